//! Transaction decoding and admission, on bytes as a node receives them from the network.
//!
//! `cargo +nightly fuzz run tx_decode`
//!
//! Holds: splitting the bytes as a bundle (compressed or not) never panics, and what splits
//! joins again into a bundle that splits the same; decoding never panics; whatever decodes
//! is within every admission limit, re-encodes to exactly the input bytes (so one transaction
//! has one encoding, and one id: no non-minimal varint, tag or implied field survives, issue
//! 26), and goes through the rest of the stateless stage (ids, signature checks, signatures
//! without their key against a key source) without panicking, single and batched
//! verification agreeing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tally_chain::crypto::{KeySource, Need, NoKeys, derived_key};
use tally_chain::pipeline::verify_batched;
use tally_chain::{Check, Name, PreparedTx, SignedTransaction, bundle};

/// Registers a key for accounts with an even name, as a committed state might.
struct EvenAccounts;

impl KeySource for EvenAccounts {
    fn registered_key(&self, account: Name) -> Option<[u8; 32]> {
        (account.0 % 2 == 0).then(|| derived_key(26, account.0).verifying_key().to_bytes())
    }
}

fuzz_target!(|data: &[u8]| {
    // The same bytes as a CometBFT transaction, a bundle: splitting (and decompressing)
    // never panics, stays within the bundle limits, and what splits joins again, compressed
    // or not, into a bundle that splits the same.
    if let Ok(parts) = bundle::split(data) {
        assert!(!parts.is_empty() && parts.len() <= bundle::MAX_BUNDLE_TXS);
        let framing: usize = parts.iter().map(|p| 4 + p.len()).sum();
        assert!(framing <= bundle::MAX_BUNDLE_RAW_BYTES.max(bundle::MAX_BUNDLE_BYTES));
        let slices = || parts.iter().map(Vec::as_slice);
        for again in [bundle::join(slices()), bundle::join_uncompressed(slices())] {
            if again.len() <= bundle::MAX_BUNDLE_BYTES {
                assert_eq!(
                    bundle::split(&again).as_ref(),
                    Ok(&parts),
                    "a re-join splits otherwise"
                );
            }
        }
    }
    let decoded = SignedTransaction::decode(data);
    let prepared = PreparedTx::decode(data.to_vec());
    assert_eq!(
        decoded.as_ref().err(),
        prepared.as_ref().err(),
        "two decoders of one network path disagree"
    );
    let (Ok(tx), Ok(mut prepared)) = (decoded, prepared) else {
        return;
    };
    assert_eq!(
        tx.encode(),
        data,
        "a decoded transaction re-encodes differently"
    );
    tx.check_limits(data.len())
        .expect("a decoded transaction is within the admission limits");
    assert_eq!(prepared.tx, tx);
    assert_eq!(prepared.bytes, data);
    assert_eq!(
        prepared.id,
        tx.transaction.id(),
        "the id from the signed bytes"
    );

    // The same transaction built locally takes the same path.
    let local = PreparedTx::new(tx.clone());
    assert_eq!(local.bytes, prepared.bytes);
    assert_eq!(local.id, prepared.id);
    assert_eq!(local.check, Check::Admitted);

    // Signatures: one at a time and batched give the same verdict, and the same keys, with
    // and without a key source.
    let mut again = prepared.clone();
    prepared.verify(&NoKeys);
    let mut batch = vec![local];
    verify_batched(&mut batch, &NoKeys, Need::Each);
    assert_eq!(
        prepared.check, batch[0].check,
        "single and batched verification differ"
    );
    assert_eq!(prepared.keys, batch[0].keys);
    again.verify(&EvenAccounts);
    let mut batch = vec![PreparedTx::new(tx.clone())];
    verify_batched(&mut batch, &EvenAccounts, Need::Each);
    assert_eq!(again.check, batch[0].check);
    assert_eq!(again.keys, batch[0].keys);
    // Admission's check, which stops at the first invalid signature, gives a lone
    // transaction the same verdict and keys.
    let mut first = vec![PreparedTx::new(tx)];
    verify_batched(&mut first, &EvenAccounts, Need::UpToFirstInvalid);
    assert_eq!(again.check, first[0].check, "admission's check differs");
    assert_eq!(again.keys, first[0].keys);
});
