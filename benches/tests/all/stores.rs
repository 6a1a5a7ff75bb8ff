//! One store suite, run against every backend: the same checksum, resumption after a
//! restart, duplicates across restarts, pruning, the log store's torn-tail handling, and the
//! same checksum whatever the log store's compaction and snapshots do.

use std::path::Path;
use std::sync::Arc;
use tally_chain::Durability;

use tally_bench::sampler::Distribution;
use tally_bench::workload::{self, BenchConfig, BenchContract};
use tally_chain::verify::verify;
use tally_chain::{
    BlockBody, Chain, ChainConfig, LogOptions, LogStore, MemoryStore, Pipeline, StateStore,
    TxError, TxResult,
};
use tally_runtime::{Runtime, RuntimeConfig};

type Open = fn(&Path, u64) -> Box<dyn StateStore>;

fn backends() -> Vec<(&'static str, Open)> {
    #[allow(unused_mut)] // pushed to with the rocksdb feature
    let mut all: Vec<(&'static str, Open)> = vec![
        ("memory", |_, retain| Box::new(MemoryStore::new(retain))),
        ("log", |dir, retain| {
            Box::new(
                LogStore::open(
                    dir,
                    LogOptions {
                        retain_blocks: retain,
                        // Small, so the suite exercises rotation, snapshots and compaction.
                        segment_bytes: 64 << 10,
                        snapshot_min_bytes: 128 << 10,
                        ..LogOptions::default()
                    },
                )
                .unwrap(),
            )
        }),
    ];
    #[cfg(feature = "rocksdb")]
    all.push(("rocksdb", |dir, retain| {
        Box::new(tally_chain::store::rocks::RocksStore::open(dir, retain).unwrap())
    }));
    all
}

fn config() -> BenchConfig {
    BenchConfig {
        transfers: 6_000,
        accounts: 300,
        dist: Distribution::Zipf,
        seed: 11,
        block_size: 500,
        signed: true,
        pipeline: Pipeline::ALL,
        durability: Durability::Background,
        contract: BenchContract::Simplecoin,
        fees: tally_chain::FeeSchedule::STANDARD,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    }
}

fn chain_config(retain: u64) -> ChainConfig {
    ChainConfig {
        retain_blocks: retain,
        // Short, so that the replay window's expiry deletes state within a run, on every
        // store; and the same for every retention, since it is part of what is hashed.
        max_tx_lifetime_ms: 4_000,
        ..ChainConfig::default()
    }
}

/// The benchmark chain on `store`: created with the workload's genesis when the store is
/// empty, reopened otherwise.
fn chain_on(store: Box<dyn StateStore>, retain: u64) -> Chain {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    if store.head().is_some() {
        Chain::open(runtime, store, chain_config(retain)).unwrap()
    } else {
        workload::create(runtime, store, chain_config(retain), &config())
            .unwrap()
            .0
    }
}

fn reference_checksum() -> [u8; 32] {
    let mut chain = chain_on(Box::new(MemoryStore::new(512)), 512);
    workload::run(&mut chain, &config(), &mut |_| {})
        .unwrap()
        .state_checksum
}

#[test]
fn every_backend_gives_the_same_checksum_and_verifies() {
    let expected = reference_checksum();
    for (kind, open) in backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut chain = chain_on(open(dir.path(), 512), 512);
        let report = workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
        assert_eq!(report.state_checksum, expected, "{kind}");
        let v = verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
        assert!(v.replayed, "{kind}");
        assert_eq!(v.transactions, config().transfers, "{kind}");
        assert_eq!(v.state_digest, chain.state_digest().unwrap(), "{kind}");
    }
}

#[test]
fn on_disk_backends_resume_at_the_last_block_and_finish_identically() {
    let expected = reference_checksum();
    for (kind, open) in backends().into_iter().filter(|(k, _)| *k != "memory") {
        let dir = tempfile::tempdir().unwrap();
        // Run part of the workload, drop the chain, reopen, run the rest.
        let mut partial = config();
        partial.transfers = 2_500;
        let mut chain = chain_on(open(dir.path(), 512), 512);
        workload::run(&mut chain, &partial, &mut |_| {}).unwrap();
        let (height, digest) = (chain.head().height, chain.state_digest().unwrap());
        drop(chain);

        let mut chain = chain_on(open(dir.path(), 512), 512);
        assert_eq!(chain.head().height, height, "{kind}");
        assert_eq!(chain.state_digest().unwrap(), digest, "{kind}");
        let report = workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
        assert_eq!(report.state_checksum, expected, "{kind}");
        verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
    }
}

#[test]
fn duplicates_are_still_rejected_after_a_restart() {
    for (kind, open) in backends().into_iter().filter(|(k, _)| *k != "memory") {
        let dir = tempfile::tempdir().unwrap();
        let mut chain = chain_on(open(dir.path(), 512), 512);
        let mut cfg = config();
        cfg.transfers = 1_000;
        workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
        let last = chain.store().block(chain.head().height).unwrap().unwrap();
        let body: BlockBody = borsh::from_slice(&last.body).unwrap();
        drop(chain);
        let mut chain = chain_on(open(dir.path(), 512), 512);
        let block = chain.run_block(body.transactions[..3].to_vec()).unwrap();
        for result in block.results {
            assert!(
                matches!(result, TxResult::Rejected(TxError::Duplicate(_))),
                "{kind}: {result:?}"
            );
        }
    }
}

#[test]
fn pruned_blocks_are_gone_and_the_rest_still_verify() {
    for (kind, open) in backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut chain = chain_on(open(dir.path(), 4), 4);
        workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
        let head = chain.head().height;
        assert_eq!(chain.store().first_retained(), head - 3, "{kind}");
        assert!(chain.store().block(head - 4).unwrap().is_none(), "{kind}");
        // A header read alone (the fees view's) is the block's, and absent where it is.
        for height in head - 5..=head + 1 {
            let store = chain.store();
            let whole = store.block(height).unwrap().map(|r| r.header);
            assert_eq!(
                store.header(height).unwrap(),
                whole,
                "{kind}: block {height}"
            );
        }
        let v = verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
        assert!(!v.replayed && v.from == head - 3, "{kind}: {v:?}");
    }
}

/// The log's segment files, in order.
fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    files(dir, "tlog")
}

/// The files of `dir` with extension `ext`, in order.
fn files(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

fn log_options() -> LogOptions {
    LogOptions {
        segment_bytes: 1 << 30,
        snapshot_min_bytes: 1 << 30,
        ..LogOptions::default()
    }
}

/// Runs `blocks` blocks of the workload on a log store in `dir`, returning the state
/// digest and checksum after each block.
fn log_run(dir: &Path, blocks: u64) -> Vec<([u8; 32], [u8; 32])> {
    let mut chain = chain_on(Box::new(LogStore::open(dir, log_options()).unwrap()), 512);
    let mut after = Vec::new();
    let mut cfg = config();
    cfg.transfers = cfg.block_size as u64;
    workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
    after.push((chain.state_digest().unwrap(), chain.head().state_checksum));
    for _ in 1..blocks {
        cfg.transfers += cfg.block_size as u64;
        workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
        after.push((chain.state_digest().unwrap(), chain.head().state_checksum));
    }
    after
}

#[test]
fn a_torn_or_flipped_last_record_is_dropped_on_open() {
    type Damage = fn(&mut Vec<u8>, usize);
    let damages: [(&str, Damage); 3] = [
        ("torn mid-record", |bytes, last| {
            bytes.truncate(last + (bytes.len() - last) / 2)
        }),
        ("torn mid-header", |bytes, last| bytes.truncate(last + 3)),
        ("flipped byte", |bytes, last| {
            let at = last + (bytes.len() - last) * 2 / 3;
            bytes[at] ^= 0x20;
        }),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let after = log_run(dir.path(), 3);
        let file = segments(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&file).unwrap();
        let last_record = last_record_offset(&bytes);
        damage(&mut bytes, last_record);
        std::fs::write(&file, &bytes).unwrap();

        let store = LogStore::open(dir.path(), log_options()).unwrap();
        let chain = chain_on(Box::new(store), 512);
        let (digest, checksum) = after[after.len() - 2];
        assert_eq!(chain.head().state_checksum, checksum, "{what}");
        assert_eq!(chain.state_digest().unwrap(), digest, "{what}");
        verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
        // The damaged tail was cut, so the log ends at the previous block's record.
        assert_eq!(
            std::fs::metadata(&file).unwrap().len() as usize,
            last_record,
            "{what}"
        );
    }
}

/// helper-44's review: a last record that the run already holds was synced before the run
/// was written, so damage to it is not a crash's torn tail. Cutting it left the head a block
/// below the state the run holds; the store now refuses to open, and cuts nothing.
#[test]
fn damage_to_a_last_record_the_run_holds_is_an_error_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    log_run(dir.path(), 3);
    LogStore::open(dir.path(), log_options())
        .unwrap()
        .snapshot()
        .unwrap();
    let file = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let last_record = last_record_offset(&bytes);
    let at = last_record + (bytes.len() - last_record) * 2 / 3;
    bytes[at] ^= 0x20;
    std::fs::write(&file, &bytes).unwrap();
    let err = LogStore::open(dir.path(), log_options())
        .err()
        .expect("an error");
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains("the run holds"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "nothing cut");
}

/// helper-44's review: a run from another store, at the same height, replayed with this
/// store's log into a mix of two states; a record at the run's height must be the run's block.
#[test]
fn a_run_from_another_store_is_refused() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    log_run(a.path(), 3);
    {
        let mut chain = chain_on(
            Box::new(LogStore::open(b.path(), log_options()).unwrap()),
            512,
        );
        let mut cfg = config();
        cfg.seed = 12;
        cfg.transfers = 3 * cfg.block_size as u64;
        workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
    }
    for dir in [a.path(), b.path()] {
        LogStore::open(dir, log_options())
            .unwrap()
            .snapshot()
            .unwrap();
    }
    let (ours, theirs) = (
        files(a.path(), "trun").pop().unwrap(),
        files(b.path(), "trun").pop().unwrap(),
    );
    assert_eq!(ours.file_name(), theirs.file_name(), "the same height");
    std::fs::copy(&theirs, &ours).unwrap();
    let err = LogStore::open(a.path(), log_options())
        .err()
        .expect("an error");
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains("another store"), "{err}");
}

/// The byte offset of the last record in a segment (12-byte file and record headers).
fn last_record_offset(bytes: &[u8]) -> usize {
    let mut at = 12;
    let mut last = at;
    while at + 12 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        last = at;
        at += 12 + len;
    }
    last
}

#[test]
fn damage_before_the_last_segment_is_an_error_not_a_silent_loss() {
    let dir = tempfile::tempdir().unwrap();
    {
        let options = LogOptions {
            segment_bytes: 1,
            snapshot_min_bytes: 1 << 30,
            ..LogOptions::default()
        };
        let mut chain = chain_on(Box::new(LogStore::open(dir.path(), options).unwrap()), 512);
        let mut cfg = config();
        cfg.transfers = 1_000;
        workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
    }
    let first = segments(dir.path())[1].clone();
    let mut bytes = std::fs::read(&first).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&first, bytes).unwrap();
    let err = LogStore::open(dir.path(), log_options())
        .err()
        .expect("an error");
    assert!(err.is_corruption(), "{err}");
    assert!(
        err.to_string().contains(&first.display().to_string()),
        "{err}"
    );
}

#[test]
fn issue_14_the_checksum_is_the_same_with_compaction_on_off_and_across_snapshots() {
    let expected = reference_checksum();
    let expected_digest = {
        let mut chain = chain_on(Box::new(MemoryStore::new(512)), 512);
        workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
        chain.state_digest().unwrap()
    };
    // Off: one segment, no snapshot. On: tiny segments and snapshots, inline or in the
    // background, and a forced snapshot at every restart.
    let settings: [(&str, u64, u64, bool); 4] = [
        ("off", 1 << 30, 1 << 40, false),
        ("inline", 16 << 10, 8 << 10, false),
        ("background", 16 << 10, 8 << 10, true),
        ("background, big", 256 << 10, 64 << 10, true),
    ];
    for (what, segment_bytes, snapshot_min_bytes, background) in settings {
        let dir = tempfile::tempdir().unwrap();
        let options = || LogOptions {
            segment_bytes,
            snapshot_min_bytes,
            background,
            ..LogOptions::default()
        };
        let mut partial = config();
        partial.transfers = 2_000;
        let mut store = LogStore::open(dir.path(), options()).unwrap();
        store.snapshot().unwrap();
        let mut chain = chain_on(Box::new(store), 8);
        workload::run(&mut chain, &partial, &mut |_| {}).unwrap();
        drop(chain);
        let mut store = LogStore::open(dir.path(), options()).unwrap();
        store.snapshot().unwrap();
        let mut chain = chain_on(Box::new(store), 8);
        let report = workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
        assert_eq!(report.state_checksum, expected, "{what}");
        assert_eq!(chain.state_digest().unwrap(), expected_digest, "{what}");
        let stats = chain.store().stats();
        if snapshot_min_bytes < 1 << 30 {
            assert!(stats.snapshots > 0, "{what}: {stats:?}");
        }
        verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
    }
}
