//! State sync without Merklization (issue 25): snapshots the headers commit to, built in the
//! background, restored by a node that checks every chunk against consensus data alone.

use std::sync::Arc;

use tally_chain::snapshot::{
    Applied, ChunkError, Manifest, Offer, OfferError, Restore, SnapshotSchedule,
};
use tally_chain::{
    BlockHeader, Chain, ChainConfig, FeeSchedule, Genesis, GenesisBuilder, LogOptions, LogStore,
    MemoryStore, SignedTransaction, SnapshotStore, StateStore, Transfer,
};

use crate::common::*;

/// Every 4 blocks, committed 2 blocks later, in chunks of 2 KiB (so a small state has many).
const SCHEDULE: SnapshotSchedule = SnapshotSchedule::every(4, 2).with_chunk_bytes(2048);

fn config() -> ChainConfig {
    ChainConfig {
        check_signatures: false,
        fees: FeeSchedule::ZERO,
        snapshots: SCHEDULE,
        ..ChainConfig::default()
    }
}

/// A chain with simplecoin and 2,000 funded accounts (about 40 chunks of state), taking
/// snapshots into `dir`.
fn chain_in(store: Box<dyn StateStore>, dir: &std::path::Path) -> Chain {
    let mut builder: GenesisBuilder = Chain::genesis(runtime(), store, config()).unwrap();
    builder.apply(&Genesis::default()).unwrap();
    builder.fund(tally_chain::system::SYSTEM, 1 << 60);
    for i in 0..2000u64 {
        builder.fund(name(&format!("acct{}", to_base32(i))), 1_000 + i);
    }
    builder.deploy(simplecoin(), SIMPLECOIN_WASM).unwrap();
    let mut chain = builder.finish().unwrap();
    chain
        .set_snapshots(Arc::new(SnapshotStore::open(dir, 2).unwrap()))
        .unwrap();
    chain
}

/// A name-safe spelling of `i` (names use a-z, 1-5).
fn to_base32(mut i: u64) -> String {
    let digits = b"abcdefghijklmnopqrstuvwxyz12345";
    let mut s = String::new();
    loop {
        s.push(digits[(i % 31) as usize] as char);
        i /= 31;
        if i == 0 {
            return s;
        }
    }
}

/// Block `n`'s transactions: the same on every chain built from the same genesis.
fn block_txs(chain: &Chain, n: u64) -> Vec<SignedTransaction> {
    (0..20)
        .map(|i| {
            let data = Transfer {
                from: simplecoin(),
                to: name(&format!("to{}", to_base32(n * 20 + i))),
                amount: 1 + i,
                memo: String::new(),
            }
            .encode();
            unsigned_tx(chain, simplecoin(), transfer(), data)
        })
        .collect()
}

fn run_to(chain: &mut Chain, height: u64) {
    while chain.head().height < height {
        let n = chain.head().height;
        chain.run_block(block_txs(chain, n)).unwrap();
    }
}

fn entries(store: &dyn StateStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    store.entries().unwrap().map(Result::unwrap).collect()
}

/// The snapshot `source` serves at `height`, with its chunks.
fn served(snapshots: &SnapshotStore, height: u64) -> (Offer, Vec<Vec<u8>>) {
    let offer = snapshots
        .list()
        .into_iter()
        .find(|o| o.height == height)
        .unwrap_or_else(|| panic!("no snapshot at {height}: {:?}", snapshots.list()));
    let chunks = (0..offer.chunks)
        .map(|i| {
            snapshots
                .load_chunk(height, offer.format, i)
                .unwrap()
                .unwrap()
        })
        .collect();
    (offer, chunks)
}

fn restore_all(
    work: &std::path::Path,
    offer: &Offer,
    app_hash: &[u8],
    chunks: &[Vec<u8>],
) -> Restore {
    let mut restore = Restore::offer(work, offer, app_hash).unwrap();
    for (i, c) in chunks.iter().enumerate() {
        let applied = restore.apply(i as u32, c).unwrap();
        assert_eq!(applied == Applied::Done, i + 1 == chunks.len());
    }
    restore
}

#[test]
fn issue_25_headers_commit_to_snapshots_and_a_restored_node_follows_the_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("a"));
    // Snapshots of blocks 4 and 8, committed in blocks 6 and 10.
    run_to(&mut a, 10);
    let header =
        |chain: &Chain, h: u64| -> BlockHeader { chain.store().block(h).unwrap().unwrap().header };
    for h in 1..=10 {
        let committed = header(&a, h).committed_snapshot().map(|r| r.height);
        let expected = match h {
            6 => Some(4),
            10 => Some(8),
            _ => None,
        };
        assert_eq!(committed, expected, "block {h}");
    }
    // The digest is the one of the state at block 4, whatever the store: a second chain
    // with the same blocks on a log store commits the same headers.
    let mut b = chain_in(
        Box::new(LogStore::open(tmp.path().join("b-store"), LogOptions::default()).unwrap()),
        &tmp.path().join("b"),
    );
    run_to(&mut b, 10);
    assert_eq!(a.head_id(), b.head_id());
    // `tally verify` replays the chain and builds the snapshots again: the same headers.
    let report = tally_chain::verify::verify(b.store(), runtime(), b.config()).unwrap();
    assert_eq!(report.to, 10);

    // A new node restores the snapshot at 10 (state at 8 and blocks 8..=10) from a's files.
    let a_snapshots = SnapshotStore::open(&tmp.path().join("a"), 2).unwrap();
    let (offer, chunks) = served(&a_snapshots, 10);
    assert!(chunks.len() > 10, "many state chunks: {}", chunks.len());
    let restore = restore_all(&tmp.path().join("work"), &offer, &a.head_id(), &chunks);
    let mut store: Box<dyn StateStore> =
        Box::new(LogStore::open(tmp.path().join("c-store"), LogOptions::default()).unwrap());
    let c_snapshots = Arc::new(SnapshotStore::open(&tmp.path().join("c"), 2).unwrap());
    let head = restore.finish(store.as_mut(), &c_snapshots).unwrap();
    assert_eq!(head.id(), a.head_id());
    assert_eq!(
        entries(store.as_ref()),
        entries(a.store()),
        "entry by entry"
    );
    assert_eq!(
        store.first_retained(),
        8,
        "it never had the blocks below the snapshot"
    );
    // It serves the snapshot it restored, and follows the chain: the same blocks give the
    // same headers, snapshots included (block 14 commits to 12).
    assert_eq!(served(&c_snapshots, 10).1, chunks);
    let mut c = Chain::open(runtime(), store, config()).unwrap();
    c.set_snapshots(c_snapshots.clone()).unwrap();
    run_to(&mut a, 15);
    run_to(&mut c, 15);
    assert_eq!(
        header(&c, 14).committed_snapshot().map(|r| r.height),
        Some(12)
    );
    assert_eq!(c.head_id(), a.head_id());
    assert_eq!(entries(c.store()), entries(a.store()));
}

#[test]
fn issue_25_a_restart_between_a_snapshot_and_its_commitment_builds_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = tmp.path().join("snapshots");
    let store_dir = tmp.path().join("store");
    let mut a = chain_in(
        Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap()),
        &snapshots,
    );
    run_to(&mut a, 5);
    // Killed between block 4 (the snapshot) and block 6 (its commitment): the state file of
    // 4 may be unfinished; the reopened chain must commit the same digest.
    let store = a.into_store();
    drop(store);
    let _ = std::fs::remove_file(snapshots.join(format!("state-{:020}.idx", 4)));
    let store = Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap());
    let mut a = Chain::open(runtime(), store, config()).unwrap();
    a.set_snapshots(Arc::new(SnapshotStore::open(&snapshots, 2).unwrap()))
        .unwrap();
    run_to(&mut a, 7);
    let mut b = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("b"));
    run_to(&mut b, 7);
    assert_eq!(a.head_id(), b.head_id());
}

#[test]
fn issue_25_forged_damaged_foreign_and_truncated_chunks_are_refused_and_the_honest_one_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("a"));
    run_to(&mut a, 10);
    let app_hash = a.head_id();
    let snapshots = SnapshotStore::open(&tmp.path().join("a"), 2).unwrap();
    let (offer, chunks) = served(&snapshots, 10);
    let (_, older) = served(&snapshots, 6);
    let manifest: Manifest = borsh::from_slice(&offer.metadata).unwrap();
    let pieces = manifest.tail_hashes.len();
    assert_eq!(
        chunks.len(),
        manifest.chunk_hashes.len() + 1,
        "blocks 8, 9 and 10 travel in one piece"
    );

    let mut restore = Restore::offer(&tmp.path().join("work"), &offer, &app_hash).unwrap();
    for (i, chunk) in chunks.iter().enumerate() {
        let i = i as u32;
        let mut damaged = chunk.clone();
        let at = damaged.len() / 2;
        damaged[at] ^= 1;
        let truncated = &chunk[..chunk.len() - 1];
        // Forged: well-formed entries with other values.
        let forged = if i as usize >= pieces {
            // One entry, `[len][key][len][value]`, as state chunks encode them.
            let mut f = Vec::new();
            for part in [&b"\x10forged-key"[..], &b"forged-value"[..]] {
                f.extend_from_slice(&(part.len() as u32).to_le_bytes());
                f.extend_from_slice(part);
            }
            f
        } else {
            borsh::to_vec(&(Vec::<u8>::new(), Vec::<(Vec<u8>, Option<Vec<u8>>)>::new())).unwrap()
        };
        let foreign = older.get(i as usize).cloned().unwrap_or_default();
        for bad in [&damaged[..], truncated, &forged[..], &foreign[..]] {
            if bad == &chunk[..] {
                continue;
            }
            match restore.apply(i, bad) {
                Err(ChunkError::Refused(_)) => {}
                other => panic!("chunk {i}: a bad chunk gave {other:?}"),
            }
        }
        restore.apply(i, chunk).unwrap();
    }
    let mut store = MemoryStore::new(512);
    let head = restore
        .finish(
            &mut store,
            &SnapshotStore::open(&tmp.path().join("c"), 2).unwrap(),
        )
        .unwrap();
    assert_eq!(head.id(), app_hash);
    assert_eq!(entries(&store), entries(a.store()));
}

#[test]
fn issue_25_an_offer_that_does_not_match_the_verified_app_hash_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("a"));
    run_to(&mut a, 10);
    let snapshots = SnapshotStore::open(&tmp.path().join("a"), 2).unwrap();
    let (offer, _) = served(&snapshots, 10);
    let (older, _) = served(&snapshots, 6);
    let work = tmp.path().join("work");
    let refused = |offer: &Offer, app_hash: &[u8]| {
        matches!(
            Restore::offer(&work, offer, app_hash),
            Err(OfferError::Invalid(_))
        )
    };
    // Another height's app hash, or a snapshot of another height offered as this one.
    let app_hash_6 = a.store().block(6).unwrap().unwrap().header.id();
    assert!(refused(&offer, &app_hash_6));
    let mut relabelled = older.clone();
    relabelled.height = 10;
    assert!(refused(&relabelled, &a.head_id()));
    // A manifest with one chunk hash changed, re-hashed so the offer is self-consistent.
    let mut manifest: Manifest = borsh::from_slice(&offer.metadata).unwrap();
    manifest.chunk_hashes[0][0] ^= 1;
    assert!(refused(&Offer::of(10, &manifest), &a.head_id()));
    // A hash that is not the metadata's; another format.
    let mut wrong_hash = offer.clone();
    wrong_hash.hash[0] ^= 1;
    assert!(refused(&wrong_hash, &a.head_id()));
    let mut format = offer.clone();
    format.format = 2;
    assert!(matches!(
        Restore::offer(&work, &format, &a.head_id()),
        Err(OfferError::Format(2))
    ));
    assert!(Restore::offer(&work, &offer, &a.head_id()).is_ok());
}

/// Copies every file of `from` into `to` (a backup of a store's directory).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// A store put back from an older backup, beside a snapshots directory that went on: the
/// directory holds state files and snapshots above the head. Pruning used to count the
/// newest of those as "the base of the next snapshot" and delete the real base, so the
/// merge at the next snapshot height panicked ("the base stays until replaced").
#[test]
fn issue_25_a_store_put_back_from_an_older_backup_goes_on_snapshotting() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = tmp.path().join("snapshots");
    let store_dir = tmp.path().join("store");
    let backup = tmp.path().join("backup");
    let mut a = chain_in(
        Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap()),
        &snapshots,
    );
    run_to(&mut a, 7);
    drop(a.into_store());
    copy_dir(&store_dir, &backup);
    let store = Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap());
    let mut a = Chain::open(runtime(), store, config()).unwrap();
    a.set_snapshots(Arc::new(SnapshotStore::open(&snapshots, 2).unwrap()))
        .unwrap();
    run_to(&mut a, 23);
    drop(a.into_store());
    // The store goes back to block 7; the snapshots directory stays at 22.
    std::fs::remove_dir_all(&store_dir).unwrap();
    copy_dir(&backup, &store_dir);
    let store = Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap());
    let mut a = Chain::open(runtime(), store, config()).unwrap();
    let a_snapshots = Arc::new(SnapshotStore::open(&snapshots, 2).unwrap());
    a.set_snapshots(a_snapshots.clone()).unwrap();
    let mut b = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("b"));
    for h in 8..=23 {
        run_to(&mut b, h);
        let n = a.head().height;
        let executed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.run_block(block_txs(&a, n))
        }));
        assert!(
            matches!(executed, Ok(Ok(_))),
            "block {h} after the store went back: {:?}",
            executed.map(|r| r.map(|e| e.header.height))
        );
        assert_eq!(a.head_id(), b.head_id(), "block {h}");
    }
}

/// A snapshots directory left from another chain (a node's store re-created for a new
/// genesis, its snapshots directory kept): its state file of block 0 is not this chain's, and
/// must not become the base this chain's snapshots are merged from, or the node commits
/// another digest than its peers at the first snapshot and falls out of consensus.
#[test]
fn issue_25_a_state_file_of_another_chain_is_never_taken_as_a_base() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = tmp.path().join("snapshots");
    // The old chain: other accounts, stopped before its first snapshot was published.
    let mut builder = Chain::genesis(runtime(), Box::new(MemoryStore::new(512)), config()).unwrap();
    builder.apply(&Genesis::default()).unwrap();
    builder.fund(tally_chain::system::SYSTEM, 1 << 60);
    builder.fund(name("oldchain"), 7);
    builder.deploy(simplecoin(), SIMPLECOIN_WASM).unwrap();
    let mut old = builder.finish().unwrap();
    old.set_snapshots(Arc::new(SnapshotStore::open(&snapshots, 2).unwrap()))
        .unwrap();
    run_to(&mut old, 3);
    drop(old);
    // The new chain on the same snapshots directory, and a peer with a clean one.
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &snapshots);
    let mut b = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("b"));
    run_to(&mut a, 6);
    run_to(&mut b, 6);
    assert_eq!(
        a.store().block(6).unwrap().unwrap().header.snapshot,
        b.store().block(6).unwrap().unwrap().header.snapshot,
        "the digest of block 4 committed in block 6"
    );
    assert_eq!(a.head_id(), b.head_id());
}

/// A chunk past the last (a confused or hostile caller, once every chunk is in) is refused,
/// not a panic of the node (it indexed the tail's hashes past their end).
#[test]
fn issue_25_a_chunk_past_the_last_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("a"));
    run_to(&mut a, 6);
    let snapshots = SnapshotStore::open(&tmp.path().join("a"), 2).unwrap();
    let (offer, chunks) = served(&snapshots, 6);
    let mut restore = restore_all(&tmp.path().join("work"), &offer, &a.head_id(), &chunks);
    let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restore.apply(offer.chunks, chunks.last().unwrap())
    }));
    assert!(
        matches!(past, Ok(Err(ChunkError::Refused(_)))),
        "a chunk past the last gave {:?}",
        past.map(|r| r.map_err(|e| e.to_string()))
    );
}

/// Killed after block `T` is in the store but before its snapshot is published (a long
/// write of the tail): the restarted node publishes it, instead of never serving it.
#[test]
fn issue_25_a_snapshot_a_crash_left_unpublished_is_published_on_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = tmp.path().join("snapshots");
    let store_dir = tmp.path().join("store");
    let mut a = chain_in(
        Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap()),
        &snapshots,
    );
    run_to(&mut a, 6);
    let (offer, chunks) = served(&SnapshotStore::open(&snapshots, 2).unwrap(), 6);
    drop(a.into_store());
    // What the kill left: block 6 committed, its snapshot's files not written.
    for ext in ["meta", "tail"] {
        std::fs::remove_file(snapshots.join(format!("snap-{:020}.{ext}", 6))).unwrap();
    }
    let store = Box::new(LogStore::open(&store_dir, LogOptions::default()).unwrap());
    let mut a = Chain::open(runtime(), store, config()).unwrap();
    let a_snapshots = Arc::new(SnapshotStore::open(&snapshots, 2).unwrap());
    a.set_snapshots(a_snapshots.clone()).unwrap();
    assert!(
        a_snapshots.list().iter().any(|o| o.height == 6),
        "snapshot 6 is served again: {:?}",
        a_snapshots.list()
    );
    assert_eq!(served(&a_snapshots, 6), (offer, chunks));
}

/// A node restored into a log store is a node like any other: its store reopens from disk
/// (its first block is the snapshot's base, at block 8, beside the run of its state), and
/// goes on after merges and pruning have moved past that base.
#[test]
fn issue_25_a_restored_log_store_reopens_after_its_base_is_pruned() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("a"));
    run_to(&mut a, 10);
    let a_snapshots = SnapshotStore::open(&tmp.path().join("a"), 2).unwrap();
    let (offer, chunks) = served(&a_snapshots, 10);
    let restore = restore_all(&tmp.path().join("work"), &offer, &a.head_id(), &chunks);
    // Small segments and merges, few blocks kept: the base's segment goes early.
    let options = LogOptions {
        segment_bytes: 64 * 1024,
        snapshot_min_bytes: 64 * 1024,
        background: false,
        ..LogOptions::default()
    };
    let store_dir = tmp.path().join("c-store");
    let c_snapshots = tmp.path().join("c");
    let mut store: Box<dyn StateStore> =
        Box::new(LogStore::open(&store_dir, options.clone()).unwrap());
    restore
        .finish(
            store.as_mut(),
            &SnapshotStore::open(&c_snapshots, 2).unwrap(),
        )
        .unwrap();
    drop(store);
    let short = ChainConfig {
        retain_blocks: 2,
        ..config()
    };
    let reopen = |options: &LogOptions| {
        let store = Box::new(LogStore::open(&store_dir, options.clone()).unwrap());
        let mut c = Chain::open(runtime(), store, short.clone()).unwrap();
        c.set_snapshots(Arc::new(SnapshotStore::open(&c_snapshots, 2).unwrap()))
            .unwrap();
        c
    };
    let mut c = reopen(&options);
    assert_eq!(c.head_id(), a.head_id());
    for stop in [13, 19, 27] {
        run_to(&mut a, stop);
        run_to(&mut c, stop);
        drop(c.into_store());
        c = reopen(&options);
        assert_eq!(c.head_id(), a.head_id(), "block {stop}");
        assert_eq!(entries(c.store()), entries(a.store()), "block {stop}");
    }
    assert!(c.store().first_retained() > 8, "the base was pruned");
}

/// A restoring node refuses a tail block over `MAX_TAIL_BLOCK_BYTES` and a state chunk over
/// `MAX_CHUNK_BYTES`, both sized for the standard block maxima: a chain whose fee schedule lets
/// blocks grow past them would commit to snapshots no node can restore (a block of 64 MiB of
/// transactions, or the ids of its ~385,000 transactions in one state entry, 12 MB, beside a
/// 4 MiB chunk). Such a genesis is refused.
#[test]
fn issue_25_a_chain_that_snapshots_cannot_have_blocks_a_restoring_node_refuses() {
    for (dimension, max) in [
        (tally_chain::Dimension::Bandwidth, 64 << 20),
        (tally_chain::Dimension::Write, 1 << 30),
    ] {
        let mut fees = FeeSchedule::STANDARD;
        fees.max[dimension as usize] = max;
        let config = ChainConfig { fees, ..config() };
        let genesis = Chain::genesis(runtime(), Box::new(MemoryStore::new(512)), config.clone());
        assert!(
            matches!(genesis, Err(tally_chain::ChainError::Config(_))),
            "{dimension:?} up to {max}: {:?}",
            genesis.err()
        );
        // Without snapshots it is a chain like any other.
        let never = ChainConfig {
            snapshots: SnapshotSchedule::NEVER,
            ..config
        };
        assert!(Chain::genesis(runtime(), Box::new(MemoryStore::new(512)), never).is_ok());
    }
}

/// The tail's piece hashes and block lengths are the manifest's word, not consensus's: a peer
/// may offer honest headers and chunk hashes with a lying tail (a new metadata hash, so a new
/// snapshot, as often as it likes). The tail travels first, so the lie shows when its block
/// fails its header, before any of the state (1.1 GB at 10M accounts) is fetched, and the
/// whole snapshot is refused.
#[test]
fn issue_25_a_manifest_whose_tail_lies_is_refused_before_its_state_is_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = chain_in(Box::new(MemoryStore::new(512)), &tmp.path().join("a"));
    run_to(&mut a, 10);
    let snapshots = SnapshotStore::open(&tmp.path().join("a"), 2).unwrap();
    let (offer, chunks) = served(&snapshots, 10);
    let mut manifest: Manifest = borsh::from_slice(&offer.metadata).unwrap();
    assert_eq!(
        manifest.tail_hashes.len(),
        1,
        "blocks 8, 9 and 10 in one piece, first"
    );
    let mut forged_tail = chunks[0].clone();
    let last = forged_tail.len() - 1;
    forged_tail[last] ^= 1; // the last byte of block 10's changes
    manifest.tail_hashes = vec![blake3::hash(&forged_tail).into()];
    let forged = Offer::of(10, &manifest);
    let mut restore = Restore::offer(&tmp.path().join("work"), &forged, &a.head_id()).unwrap();
    match restore.apply(0, &forged_tail) {
        Err(ChunkError::Snapshot(why)) => assert!(why.contains("block 10"), "{why}"),
        other => panic!("a forged tail gave {other:?}"),
    }
}
