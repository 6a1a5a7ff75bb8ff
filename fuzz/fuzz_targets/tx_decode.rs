//! Transaction decoding and admission, on bytes as a node receives them from the network.
//!
//! `cargo +nightly fuzz run tx_decode`
//!
//! Holds: decoding never panics; whatever decodes is within every admission limit,
//! re-encodes to exactly the input bytes (so one transaction has one encoding, and one id),
//! and goes through the rest of the stateless stage (ids, signature checks) without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tally_chain::pipeline::verify_batched;
use tally_chain::{Check, PreparedTx, SignedTransaction};

fuzz_target!(|data: &[u8]| {
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

    // Signatures: one at a time and batched give the same verdict.
    prepared.verify();
    let mut batch = vec![local];
    verify_batched(&mut batch);
    assert_eq!(
        prepared.check, batch[0].check,
        "single and batched verification differ"
    );
});
