//! Restoring a snapshot from a hostile peer: an honest snapshot whose manifest or chunks the
//! input replaces, damages or cuts.
//!
//! `cargo +nightly fuzz run snapshot_restore`
//!
//! Holds: `Restore::offer` and `Restore::apply` return a value or a typed error, never panic;
//! a chunk is taken only if it is the honest one (a different chunk that passed would be a
//! hash collision or a hole in the checks); and a restore that completes gives the honest
//! state, entry by entry, at the verified head.

#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::{Corpus, fuzz_target};
use tally_chain::snapshot::{Applied, Manifest, Offer, Restore, SnapshotSchedule};
use tally_chain::system::{NativeTransfer, SYSTEM, TRANSFER};
use tally_chain::{
    Action, BlockId, Chain, ChainConfig, FeeSchedule, Genesis, MemoryStore, Name,
    SignedTransaction, SnapshotStore, StateStore, Transaction,
};
use tally_runtime::{Runtime, RuntimeConfig};

/// An honest snapshot: its offer, its chunks, the app hash that verifies it, and the state.
struct Honest {
    offer: Offer,
    chunks: Vec<Vec<u8>>,
    app_hash: BlockId,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    _dir: tempfile::TempDir,
}

fn account(i: u64) -> Name {
    format!("acct{}", (b'a' + i as u8) as char).parse().unwrap()
}

/// A chain of native transfers snapshotting every 4 blocks in 512-byte chunks, run to block
/// 6, which commits to the state at 4.
fn honest() -> &'static Honest {
    static HONEST: OnceLock<Honest> = OnceLock::new();
    HONEST.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let config = ChainConfig {
            check_signatures: false,
            fees: FeeSchedule::ZERO,
            snapshots: SnapshotSchedule::every(4, 2).with_chunk_bytes(512),
            ..ChainConfig::default()
        };
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
        let mut builder =
            Chain::genesis(runtime, Box::new(MemoryStore::new(512)), config).unwrap();
        builder.apply(&Genesis::default()).unwrap();
        builder.fund(SYSTEM, 1 << 40);
        for i in 0..20 {
            builder.account(account(i), [i as u8; 32]);
            builder.fund(account(i), 1_000 + i);
        }
        let mut chain = builder.finish().unwrap();
        let snapshots = Arc::new(SnapshotStore::open(dir.path(), 2).unwrap());
        chain.set_snapshots(snapshots.clone()).unwrap();
        while chain.head().height < 6 {
            let n = chain.head().height;
            let txs = (0..5)
                .map(|i| {
                    let data = borsh::to_vec(&NativeTransfer {
                        from: SYSTEM,
                        to: account((n * 5 + i) % 20),
                        amount: 1 + i,
                    })
                    .unwrap();
                    let action = Action {
                        account: SYSTEM,
                        name: TRANSFER,
                        authorization: vec![SYSTEM],
                        data,
                    };
                    let mut tx = Transaction::new(
                        chain.next_block_time_ms() + 30_000,
                        chain.tapos(),
                        vec![action],
                    );
                    tx.max_fee = 0;
                    SignedTransaction::unsigned(tx)
                })
                .collect();
            chain.run_block(txs).unwrap();
        }
        let offer = snapshots.list().into_iter().next().unwrap();
        let chunks = (0..offer.chunks)
            .map(|i| snapshots.load_chunk(offer.height, offer.format, i).unwrap().unwrap())
            .collect();
        Honest {
            offer,
            chunks,
            app_hash: chain.head_id(),
            entries: chain.store().entries().unwrap().map(|e| e.unwrap()).collect(),
            _dir: dir,
        }
    })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let honest = honest();
    let work = tempfile::tempdir().unwrap();
    let mut offer = honest.offer.clone();
    if u.ratio(1, 8)? {
        // A manifest of the input's bytes, offered with its own hash (self-consistent).
        offer.metadata = u.arbitrary()?;
        offer.hash = blake3::hash(&offer.metadata).into();
        offer.chunks = u.arbitrary()?;
    }
    let Ok(mut restore) = Restore::offer(work.path(), &offer, &honest.app_hash) else {
        return Ok(());
    };
    if offer.metadata != honest.offer.metadata {
        // Only the tail's lengths and hashes are the manifest's own word: what consensus
        // committed (headers, state chunk hashes, entry count) must be the honest one.
        let forged: Manifest = borsh::from_slice(&offer.metadata).expect("it was accepted");
        let real: Manifest = borsh::from_slice(&honest.offer.metadata).unwrap();
        assert_eq!(
            (&forged.headers, &forged.chunk_hashes, forged.entries),
            (&real.headers, &real.chunk_hashes, real.entries),
            "a manifest consensus did not commit to was accepted"
        );
        return Ok(());
    }
    // Each chunk: the honest one, or first a hostile one (damaged, cut, another chunk, raw
    // bytes), which must be refused unless it is the honest one.
    for (i, chunk) in honest.chunks.iter().enumerate() {
        let i = i as u32;
        if u.ratio(1, 3)? {
            let mut bad = match u.int_in_range(0..=3)? {
                0 => {
                    let mut c = chunk.clone();
                    if !c.is_empty() {
                        let at = u.choose_index(c.len())?;
                        c[at] ^= u.int_in_range(1..=255)?;
                    }
                    c
                }
                1 => chunk[..u.choose_index(chunk.len().max(1))?.min(chunk.len())].to_vec(),
                2 => u.choose(&honest.chunks)?.clone(),
                _ => u.arbitrary()?,
            };
            if u.ratio(1, 4)? {
                bad.extend_from_slice(u.arbitrary::<&[u8]>()?);
            }
            if restore.apply(i, &bad).is_ok() {
                assert_eq!(&bad, chunk, "chunk {i}: a hostile chunk was taken");
                continue;
            }
        }
        let applied = restore.apply(i, chunk).expect("the honest chunk is taken");
        assert_eq!(applied == Applied::Done, i + 1 == offer.chunks);
    }
    let mut store = MemoryStore::new(512);
    let snapshots = SnapshotStore::open(&work.path().join("snapshots"), 2).unwrap();
    let head = restore.finish(&mut store, &snapshots).unwrap();
    assert_eq!(head.id(), honest.app_hash);
    let entries: Vec<_> = store.entries().unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(entries, honest.entries, "the restored state is not the honest one");
    Ok(())
}

fuzz_target!(|data: &[u8]| -> Corpus {
    match run(&mut Unstructured::new(data)) {
        Ok(()) => Corpus::Keep,
        Err(_) => Corpus::Reject,
    }
});
