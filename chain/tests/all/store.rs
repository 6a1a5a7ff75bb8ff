//! The state stores on their own: on-disk format, damage, crashes, locking, read-only opens.
//!
//! Blocks here are synthetic [`BlockRecord`]s (a store checks heights, not contents), so these
//! tests need no contract and no runtime.

use std::path::{Path, PathBuf};

mod order;

use tally_chain::block::chain_checksum;
use tally_chain::{
    BlockArchive, BlockHeader, BlockRecord, Commit, Durability, LogOptions, LogStore, StateStore,
    StoreError,
};

/// The block at `height`: `n` changes to keys of its own and to a few shared ones, so later
/// blocks overwrite earlier values.
fn record(height: u64, n: usize) -> BlockRecord {
    let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n)
        .map(|i| {
            let key = format!("k{:06}", (height as usize * 7 + i) % 500).into_bytes();
            let value = (i % 11 != 10).then(|| format!("v{height}-{i}").into_bytes());
            (key, value)
        })
        .collect();
    changes.sort();
    changes.dedup_by(|a, b| a.0 == b.0);
    BlockRecord {
        header: BlockHeader {
            height,
            previous: [height as u8; 32],
            timestamp_ms: 1_000 * height,
            transactions_root: [0; 32],
            state_checksum: chain_checksum(
                &[0; 32],
                changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
            ),
            ..Default::default()
        },
        body: vec![height as u8; 40],
        changes: changes.into(),
    }
}

/// One segment, no snapshot: every record stays where the tests look for it.
fn one_segment() -> LogOptions {
    LogOptions {
        segment_bytes: 1 << 30,
        snapshot_min_bytes: 1 << 30,
        ..LogOptions::default()
    }
}

/// Commits `block` keeping the last 512 blocks, durably.
fn commit(store: &mut impl StateStore, block: &BlockRecord) -> Result<(), StoreError> {
    store.commit(block.clone(), Commit::keeping(block.header.height, 512))
}

/// Commits blocks `0..blocks` to a log store in `dir`; returns the head state after each.
fn write_blocks(dir: &Path, options: LogOptions, blocks: u64) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    // Every block's own retention: the last `retain_blocks`, as a chain would ask.
    let mut store = LogStore::open(dir, options).unwrap();
    (0..blocks)
        .map(|h| {
            commit(&mut store, &record(h, 40)).unwrap();
            store.entries().unwrap().map(Result::unwrap).collect()
        })
        .collect()
}

/// The log's segment files, in order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    with_extension(dir, "tlog")
}

fn with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// Byte offsets of the records of a segment (12-byte file header, 12-byte record headers).
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 12;
    let mut offsets = Vec::new();
    while at + 12 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        offsets.push(at);
        at += 12 + len;
    }
    offsets
}

/// Every file in `dir` with its bytes, to show that an open changed nothing.
fn snapshot_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

fn entries_of(store: &dyn StateStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    store.entries().unwrap().map(Result::unwrap).collect()
}

fn expect_corruption(result: Result<LogStore, StoreError>, file: &Path, offset: Option<u64>) {
    match result {
        Err(StoreError::Corrupted {
            path, offset: at, ..
        }) => {
            assert_eq!(path, file);
            assert_eq!(at, offset);
        }
        Err(other) => panic!("expected corruption of {}, got {other}", file.display()),
        Ok(store) => panic!(
            "expected corruption of {}, but the store opened at block {:?}",
            file.display(),
            store.head().map(|h| h.height)
        ),
    }
}

#[test]
fn issue_10_a_flipped_bit_in_an_early_record_of_the_last_segment_is_corruption() {
    // Before the fix, open took this for a torn tail: it dropped blocks 3..=9, every one
    // fsync'd, and truncated the file, even when opened by a read-only command.
    type Damage = fn(&mut [u8], usize);
    let damages: [(&str, Damage); 3] = [
        ("payload", |bytes, at| bytes[at + 12 + 5] ^= 0x04),
        ("length", |bytes, at| bytes[at + 2] ^= 0x01),
        ("payload checksum", |bytes, at| bytes[at + 6] ^= 0x80),
    ];
    for (what, damage) in damages {
        for victim in [2, 8] {
            let dir = tempfile::tempdir().unwrap();
            write_blocks(dir.path(), one_segment(), 10);
            let file = segments(dir.path()).pop().unwrap();
            let mut bytes = std::fs::read(&file).unwrap();
            let at = record_offsets(&bytes)[victim];
            damage(&mut bytes, at);
            std::fs::write(&file, &bytes).unwrap();
            let before = snapshot_files(dir.path());

            expect_corruption(
                LogStore::open(dir.path(), one_segment()),
                &file,
                Some(at as u64),
            );
            expect_corruption(LogStore::open_read_only(dir.path()), &file, Some(at as u64));
            assert_eq!(
                snapshot_files(dir.path()),
                before,
                "{what} of record {victim}: a refused open changed files"
            );
        }
    }
}

#[test]
fn issue_10_corruption_names_the_segment_and_the_offset_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), one_segment(), 5);
    let file = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let at = record_offsets(&bytes)[1];
    bytes[at + 20] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let err = LogStore::open(dir.path(), one_segment()).err().unwrap();
    assert!(err.is_corruption());
    let text = err.to_string();
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(text.contains(&format!("at byte {at}")), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");
}

/// Reopening reads each retained block's header and body, not its changes (a streamed genesis
/// of ten million accounts keeps them all in block 0): what it reads is the block's own.
#[test]
fn header_and_body_are_the_blocks_own_without_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), one_segment(), 5);
    let store = LogStore::open_read_only(dir.path()).unwrap();
    for height in 0..5 {
        let block = store.block(height).unwrap().unwrap();
        assert_eq!(
            store.header_and_body(height).unwrap(),
            Some((block.header, block.body)),
            "block {height}"
        );
    }
    assert_eq!(store.header_and_body(5).unwrap(), None);
}

/// After a damaged last header, open looks for a good record further on. A crafted tail of
/// valid-looking headers, each claiming a record to the end of the file, once cost one
/// checksum of the rest of the file per header: quadratic, minutes for a few MiB. Now the
/// search has a budget, and running out of it is corruption (the tail is not a torn write).
#[test]
fn issue_10_a_tail_of_crafted_record_headers_is_refused_not_searched_forever() {
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), one_segment(), 3);
    let file = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let damaged = bytes.len();
    let headers = 100_000;
    let end = damaged + 12 + 12 * headers;
    bytes.extend_from_slice(&[0xAB; 12]);
    for i in 0..headers {
        let payload = damaged + 12 + 12 * i + 12;
        let len = (end - payload) as u32;
        bytes.extend_from_slice(&tally_chain::store::log::record::header_bytes(len, 0));
    }
    std::fs::write(&file, &bytes).unwrap();
    let err = LogStore::open_read_only(dir.path()).err().expect("refused");
    assert!(err.is_corruption(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("more record-like headers than can be checked"),
        "{text}"
    );
    assert!(text.contains(&format!("at byte {damaged}")), "{text}");
}

#[test]
fn a_torn_or_unwritten_last_record_is_cut_by_a_writer_and_skipped_by_a_reader() {
    type Damage = fn(&mut Vec<u8>, usize);
    let damages: [(&str, Damage); 5] = [
        ("torn mid-record", |bytes, last| {
            bytes.truncate(last + (bytes.len() - last) / 2)
        }),
        ("torn mid-header", |bytes, last| bytes.truncate(last + 3)),
        ("flipped payload byte", |bytes, last| {
            let at = last + (bytes.len() - last) * 2 / 3;
            bytes[at] ^= 0x20;
        }),
        // Power lost after the file grew but before its data reached the disk.
        ("zeroed record", |bytes, last| bytes[last..].fill(0)),
        ("zeroed header", |bytes, last| {
            bytes[last..last + 12].fill(0)
        }),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        let states = write_blocks(dir.path(), one_segment(), 6);
        let file = segments(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&file).unwrap();
        let last = *record_offsets(&bytes).last().unwrap();
        damage(&mut bytes, last);
        std::fs::write(&file, &bytes).unwrap();

        let before = snapshot_files(dir.path());
        let reader = LogStore::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.head().unwrap().height, 4, "{what}");
        assert_eq!(entries_of(&reader), states[4], "{what}");
        // Issue 10: dropping it is never silent.
        let dropped = reader
            .dropped_tail()
            .expect("the dropped record is reported");
        assert_eq!(
            (dropped.offset, dropped.bytes, dropped.cut),
            (last as u64, (bytes.len() - last) as u64, false),
            "{what}"
        );
        drop(reader);
        assert_eq!(snapshot_files(dir.path()), before, "{what}: a reader wrote");

        let mut writer = LogStore::open(dir.path(), one_segment()).unwrap();
        assert_eq!(writer.head().unwrap().height, 4, "{what}");
        assert_eq!(entries_of(&writer), states[4], "{what}");
        assert!(writer.dropped_tail().is_some_and(|t| t.cut), "{what}");
        assert_eq!(
            std::fs::metadata(&file).unwrap().len() as usize,
            last,
            "{what}: the writer cuts the torn record off"
        );
        // And the log goes on from there.
        commit(&mut writer, &record(5, 40)).unwrap();
        drop(writer);
        let reopened = LogStore::open_read_only(dir.path()).unwrap();
        assert_eq!(reopened.head().unwrap().height, 5, "{what}");
        assert_eq!(reopened.dropped_tail(), None, "{what}");
        assert_eq!(entries_of(&reopened), states[5], "{what}");
    }
}

#[test]
fn damage_in_a_sealed_segment_is_corruption_even_at_its_end() {
    let small = LogOptions {
        segment_bytes: 1,
        ..one_segment()
    };
    for cut in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        write_blocks(dir.path(), small.clone(), 6);
        let sealed = segments(dir.path())[2].clone();
        let mut bytes = std::fs::read(&sealed).unwrap();
        if cut {
            bytes.truncate(bytes.len() - 3);
        } else {
            let n = bytes.len();
            bytes[n - 2] ^= 1;
        }
        std::fs::write(&sealed, &bytes).unwrap();
        let err = LogStore::open(dir.path(), small.clone()).err().unwrap();
        assert!(
            matches!(&err, StoreError::Corrupted { path, offset: Some(12), .. } if *path == sealed),
            "{err}"
        );
    }
}

#[test]
fn a_missing_segment_is_corruption_not_a_shorter_chain() {
    let small = LogOptions {
        segment_bytes: 1,
        ..one_segment()
    };
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), small.clone(), 6);
    let all = segments(dir.path());
    std::fs::remove_file(&all[2]).unwrap();
    expect_corruption(LogStore::open(dir.path(), small), &all[3], Some(12));
}

#[test]
fn a_damaged_snapshot_is_corruption() {
    let options = LogOptions {
        snapshot_min_bytes: 1,
        background: false,
        ..one_segment()
    };
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), options.clone(), 4);
    let snapshot = with_extension(dir.path(), "trun").pop().unwrap();
    let mut bytes = std::fs::read(&snapshot).unwrap();
    bytes[30] ^= 1;
    std::fs::write(&snapshot, &bytes).unwrap();
    let err = LogStore::open(dir.path(), options).err().unwrap();
    assert!(
        matches!(&err, StoreError::Corrupted { path, .. } if *path == snapshot),
        "{err}"
    );
}

#[test]
fn a_store_reopens_with_every_committed_block_across_segments_and_snapshots() {
    let options = LogOptions {
        retain_blocks: 5,
        segment_bytes: 4 << 10,
        snapshot_min_bytes: 16 << 10,
        background: false,
        ..LogOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let states = write_blocks(dir.path(), options.clone(), 60);
    assert!(segments(dir.path()).len() > 1);
    assert!(!with_extension(dir.path(), "trun").is_empty());
    let store = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(store.head().unwrap().height, 59);
    assert_eq!(entries_of(&store), states[59]);
    // What each commit asked to retain is in the log: a reader knows it too.
    assert_eq!(store.first_retained(), 55);
    for h in 55..60 {
        assert_eq!(store.block(h).unwrap().unwrap(), record(h, 40));
    }
    assert!(store.block(54).unwrap().is_none());
}

#[test]
fn issue_10_a_second_writer_is_refused_naming_the_directory() {
    // Before the fix both opens succeeded; each appended a block of the same height, and the
    // store never opened again.
    let dir = tempfile::tempdir().unwrap();
    let mut first = LogStore::open(dir.path(), one_segment()).unwrap();
    commit(&mut first, &record(0, 4)).unwrap();
    // flock belongs to an open file description, so a second open in this process conflicts
    // just as another process would.
    let err = LogStore::open(dir.path(), one_segment()).err().unwrap();
    assert!(
        matches!(&err, StoreError::Locked { dir: d, writing: true } if d == dir.path()),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    assert!(text.contains("another tally process"), "{text}");
    // A reader is refused while the writer runs, rather than read a log being appended.
    assert!(matches!(
        LogStore::open_read_only(dir.path()),
        Err(StoreError::Locked { writing: false, .. })
    ));
    commit(&mut first, &record(1, 4)).unwrap();
    drop(first);

    // Readers share the lock with each other, and keep writers out.
    let r1 = LogStore::open_read_only(dir.path()).unwrap();
    let r2 = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(r2.head().unwrap().height, 1);
    assert!(matches!(
        LogStore::open(dir.path(), one_segment()),
        Err(StoreError::Locked { writing: true, .. })
    ));
    drop((r1, r2));
    let writer = LogStore::open(dir.path(), one_segment()).unwrap();
    assert_eq!(writer.head().unwrap().height, 1);
}

#[test]
fn a_read_only_store_writes_nothing_and_refuses_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("none");
    assert!(matches!(
        LogStore::open_read_only(&missing),
        Err(StoreError::Missing { .. })
    ));
    assert!(!missing.exists(), "a read-only open created the directory");

    write_blocks(tmp.path(), one_segment(), 3);
    let before = snapshot_files(tmp.path());
    let mut store = LogStore::open_read_only(tmp.path()).unwrap();
    assert!(matches!(
        commit(&mut store, &record(3, 4)),
        Err(StoreError::ReadOnly)
    ));
    assert!(matches!(store.snapshot(), Err(StoreError::ReadOnly)));
    drop(store);
    assert_eq!(snapshot_files(tmp.path()), before);
}

#[test]
fn point_reads_into_one_reused_buffer_agree_with_get_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path(), compacting()).unwrap();
    let (mut rng, mut model) = (Gen(11), Model::new());
    for h in 0..300 {
        let b = rng.block(h, 400);
        apply(&mut model, &b);
        store.commit(b, keep_all(h)).unwrap();
    }
    assert!(
        store.stats().snapshots >= 1,
        "some keys must be read from the run"
    );
    // Every key of the space (live, deleted, never written), twice: the second pass is
    // served from the cache. The buffer keeps the last value's bytes, which no later read
    // may show through: a 700-byte value is followed by shorter ones and by absent keys.
    let mut scratch = vec![0xee; 1000];
    let before = store.stats();
    let (mut reads, mut bytes) = (0, 0);
    for _ in 0..2 {
        for i in 0..400 {
            let key = format!("key-{i:05}").into_bytes();
            let want = model.get(&key).map(Vec::as_slice);
            let got = store.get_in(&key, &mut scratch).unwrap();
            assert_eq!(got, want, "key {i}");
            assert_eq!(store.get(&key).unwrap().as_deref(), want, "key {i}");
            reads += 2;
            bytes += 2 * (key.len() + want.map_or(0, <[u8]>::len)) as u64;
        }
    }
    let after = store.stats();
    assert_eq!(after.gets - before.gets, reads);
    assert_eq!(after.user_bytes_read - before.user_bytes_read, bytes);
    assert!(
        after.cache_hits - before.cache_hits >= reads / 2,
        "{after:?}"
    );
}

#[test]
fn a_log_from_another_format_version_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), one_segment(), 2);
    let file = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    let err = LogStore::open(dir.path(), one_segment()).err().unwrap();
    assert!(matches!(err, StoreError::Version { found: 1, .. }), "{err}");
}

/// A small model of the state: what every height should hold.
type Model = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(model: &mut Model, block: &BlockRecord) {
    for (k, v) in &block.changes {
        match v {
            Some(v) => {
                model.insert(k.to_vec(), v.to_vec());
            }
            None => {
                model.remove(k);
            }
        }
    }
}

/// Blocks from a seeded generator: keys from a space of `space`, a fifth of them deletes,
/// some values large enough to spread over segments.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// How to commit block `height`: any durability (half of them immediate), keeping the
    /// last 10 blocks.
    fn commit(&mut self, height: u64) -> Commit {
        let durability = match self.next() % 4 {
            0 => Durability::Background,
            1 => Durability::None,
            _ => Durability::Immediate,
        };
        Commit {
            durability,
            retain_from: height.saturating_sub(10),
        }
    }

    fn block(&mut self, height: u64, space: u64) -> BlockRecord {
        let n = 1 + self.next() % 24;
        let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n)
            .map(|_| {
                let key = format!("key-{:05}", self.next() % space).into_bytes();
                let value = (!self.next().is_multiple_of(5)).then(|| {
                    let len = if self.next().is_multiple_of(10) {
                        700
                    } else {
                        1 + self.next() % 40
                    };
                    vec![(height % 251) as u8; len as usize]
                });
                (key, value)
            })
            .collect();
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        changes.dedup_by(|a, b| a.0 == b.0);
        BlockRecord {
            header: BlockHeader {
                height,
                previous: [1; 32],
                timestamp_ms: height,
                transactions_root: [2; 32],
                state_checksum: [3; 32],
                ..Default::default()
            },
            body: vec![7; (self.next() % 64) as usize],
            changes: changes.into(),
        }
    }
}

/// Small segments and snapshots, compacted inline: a few hundred blocks spread over many
/// segments and leave part of the state in the run.
fn compacting() -> LogOptions {
    LogOptions {
        segment_bytes: 8 << 10,
        snapshot_min_bytes: 16 << 10,
        background: false,
        ..LogOptions::default()
    }
}

fn keep_all(height: u64) -> Commit {
    Commit {
        durability: Durability::Immediate,
        retain_from: height.saturating_sub(20),
    }
}

#[test]
fn issue_14_a_store_fills_past_many_segments_compacts_and_stays_right() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path(), compacting()).unwrap();
    let mut rng = Gen(5);
    let mut model = Model::new();
    let mut blocks = Vec::new();
    for h in 0..600 {
        let b = rng.block(h, 400);
        apply(&mut model, &b);
        store.commit(b.clone(), keep_all(h)).unwrap();
        blocks.push(b);
    }
    let stats = store.stats();
    assert!(stats.snapshots >= 3, "{stats:?}");
    assert!(stats.segments_deleted >= 10, "{stats:?}");
    let live: Vec<_> = model.clone().into_iter().collect();
    assert_eq!(entries_of(&store), live);
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(store.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    assert_eq!(store.get(b"key-99999").unwrap(), None);
    // Disk stays near the live state plus the retained blocks, not the whole history.
    let written: u64 = blocks
        .iter()
        .map(|b| borsh::to_vec(b).unwrap().len() as u64)
        .sum();
    assert!(
        store.disk_bytes() < written / 4,
        "{} bytes on disk for {written} written",
        store.disk_bytes()
    );
    assert_eq!(store.first_retained(), 579);
    assert_eq!(store.block(590).unwrap().as_ref(), Some(&blocks[590]));
    assert!(store.block(578).unwrap().is_none());
    drop(store);
    let store = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(store.head().unwrap().height, 599);
    assert_eq!(entries_of(&store), live);
    assert_eq!(store.block(599).unwrap().as_ref(), Some(&blocks[599]));
}

#[test]
fn issue_14_background_and_inline_compaction_give_the_same_state_and_files() {
    let run = |background: bool, min: u64| {
        let dir = tempfile::tempdir().unwrap();
        let options = LogOptions {
            segment_bytes: 8 << 10,
            snapshot_min_bytes: min,
            background,
            ..LogOptions::default()
        };
        let mut store = LogStore::open(dir.path(), options).unwrap();
        let mut rng = Gen(9);
        for h in 0..300 {
            store.commit(rng.block(h, 300), keep_all(h)).unwrap();
            if h % 50 == 0 {
                store.snapshot().unwrap();
            }
        }
        store.settle().unwrap();
        entries_of(&store)
    };
    let reference = run(false, 1 << 40);
    assert_eq!(run(true, 4 << 10), reference);
    assert_eq!(run(false, 4 << 10), reference);
}

/// How far a store must have got: the highest height whose durability was promised.
fn durable_after(
    durability: Durability,
    height: u64,
    acked: &mut Option<u64>,
    pending: &mut Option<u64>,
) {
    match durability {
        Durability::Immediate => {
            *acked = Some(height);
            *pending = None;
        }
        // Durable once the next commit returns.
        Durability::Background => {
            if let Some(p) = pending.take() {
                *acked = Some(p.max(acked.unwrap_or(0)));
            }
            *pending = Some(height);
        }
        Durability::None => {
            if let Some(p) = pending.take() {
                *acked = Some(p.max(acked.unwrap_or(0)));
            }
        }
    }
}

/// Issue 14: power cuts at random file operations, across commits, rotations, snapshots
/// and compactions, lose nothing whose durability was promised and never leave a store
/// that will not open. `TALLY_POWER_CUTS=N` runs N (CI runs a short version).
#[test]
fn issue_14_power_cuts_lose_no_durable_block() {
    use tally_chain::store::log::fault::FaultFs;
    let cuts: u64 = std::env::var("TALLY_POWER_CUTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(150);
    let dir = std::path::Path::new("/store");
    let mut done = 0u64;
    let mut seed = 0u64;
    let mut max_ops = 0u64;
    while done < cuts {
        seed += 1;
        let fs = FaultFs::new(seed);
        let options = LogOptions {
            segment_bytes: 2 << 10,
            snapshot_min_bytes: 4 << 10,
            background: seed.is_multiple_of(2),
            vfs: std::sync::Arc::new(fs.clone()),
            ..LogOptions::default()
        };
        let mut rng = Gen(seed);
        let mut states: Vec<Model> = Vec::new();
        let mut blocks: Vec<BlockRecord> = Vec::new();
        // Three cuts per store, each reopening what the last one left.
        for _ in 0..3 {
            let mut store = LogStore::open(dir, options.clone())
                .unwrap_or_else(|e| panic!("seed {seed}: the store does not reopen: {e}"));
            let head = store.head().map(|h| h.height);
            // Whatever survived is a state the store was at.
            let survived = head.map_or(0, |h| h + 1) as usize;
            assert!(
                survived <= states.len(),
                "seed {seed}: a block came back from nowhere"
            );
            states.truncate(survived);
            blocks.truncate(survived);
            if let Some(h) = head {
                let live: Vec<_> = states[h as usize].clone().into_iter().collect();
                assert_eq!(entries_of(&store), live, "seed {seed}: state at {h}");
                for h in store.first_retained()..=h {
                    assert_eq!(
                        store.block(h).unwrap().as_ref(),
                        Some(&blocks[h as usize]),
                        "seed {seed}: block {h}"
                    );
                }
            }
            let mut acked = None;
            let mut pending = None;
            let arm = rng.next() % 400;
            fs.crash_after(arm);
            let start_ops = fs.ops();
            let mut height = head.map_or(0, |h| h + 1);
            loop {
                let b = rng.block(height, 300);
                let commit = rng.commit(height);
                let durability = commit.durability;
                let mut model = states.last().cloned().unwrap_or_default();
                apply(&mut model, &b);
                // The block may survive even if its commit fails (the record may have hit
                // the disk before the power went): remember it either way.
                states.push(model);
                blocks.push(b.clone());
                match store.commit(b, commit) {
                    Ok(()) => durable_after(durability, height, &mut acked, &mut pending),
                    Err(_) => break,
                }
                height += 1;
                if fs.crashed() {
                    break;
                }
            }
            max_ops = max_ops.max(fs.ops() - start_ops);
            drop(store);
            fs.reboot();
            done += 1;
            // Nothing promised durable is lost.
            let store = LogStore::open_read_only_with(dir, options.clone())
                .unwrap_or_else(|e| panic!("seed {seed}: the store does not reopen: {e}"));
            let head = store.head().map(|h| h.height);
            assert!(
                head >= acked,
                "seed {seed}: lost block {acked:?}, reopened at {head:?}"
            );
        }
    }
    eprintln!("{done} power cuts, up to {max_ops} file operations between cuts");
}

#[cfg(feature = "rocksdb")]
mod rocksdb {
    use super::*;
    use tally_chain::store::rocks::RocksStore;

    #[test]
    fn issue_10_a_second_rocksdb_writer_gets_a_clear_lock_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = RocksStore::open(dir.path(), 16).unwrap();
        commit(&mut first, &record(0, 4)).unwrap();
        let err = RocksStore::open(dir.path(), 16).err().unwrap();
        assert!(
            matches!(&err, StoreError::Locked { dir: d, writing: true } if d == dir.path()),
            "{err}"
        );
        assert!(err.to_string().contains("another tally process"), "{err}");
        // A read-only open reads alongside the writer.
        let reader = RocksStore::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.head().unwrap().height, 0);
    }

    #[test]
    fn a_read_only_rocksdb_open_changes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = RocksStore::open(dir.path(), 16).unwrap();
            for h in 0..5 {
                commit(&mut store, &record(h, 40)).unwrap();
            }
        }
        let before = snapshot_files(dir.path());
        let mut store = RocksStore::open_read_only(dir.path()).unwrap();
        assert_eq!(store.head().unwrap().height, 4);
        assert!(matches!(
            commit(&mut store, &record(5, 4)),
            Err(StoreError::ReadOnly)
        ));
        drop(store);
        assert_eq!(snapshot_files(dir.path()), before);
        let missing = dir.path().join("none");
        assert!(matches!(
            RocksStore::open_read_only(&missing),
            Err(StoreError::Missing { .. })
        ));
        assert!(!missing.exists());
    }
}

/// Issue 10, found by the `log_open` fuzz target: the store names its segments with
/// zero-padded numbers (`log-00000000.tlog`), and `log-0.tlog` is not one of them. It used to
/// be read as segment 0: beside the real segment 0 that was the same segment twice, and alone
/// a reader failed with a bare "not found" for a file that does not exist while a writer
/// started an empty store beside it.
#[test]
fn issue_10_files_not_named_as_the_store_names_them_are_not_its_segments() {
    let dir = tempfile::tempdir().unwrap();
    let states = write_blocks(dir.path(), one_segment(), 3);
    let segment = segments(dir.path())[0].clone();
    std::fs::copy(&segment, dir.path().join("log-0.tlog")).unwrap();
    std::fs::copy(&segment, dir.path().join("run-7.trun")).unwrap();
    let before = snapshot_files(dir.path());
    let reader = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.head().map(|h| h.height), Some(2));
    assert_eq!(entries_of(&reader), states[2]);
    drop(reader);
    assert_eq!(snapshot_files(dir.path()), before);
    let writer = LogStore::open(dir.path(), one_segment()).unwrap();
    assert_eq!(writer.head().map(|h| h.height), Some(2));
    assert_eq!(entries_of(&writer), states[2]);
    drop(writer);

    // Alone, such a file is no store at all, for a reader and a writer alike.
    let alone = tempfile::tempdir().unwrap();
    std::fs::copy(&segment, alone.path().join("log-0.tlog")).unwrap();
    std::fs::write(alone.path().join(tally_chain::store::lock::LOCK_FILE), b"").unwrap();
    let reader = LogStore::open_read_only(alone.path()).unwrap();
    assert_eq!(reader.head(), None);
    drop(reader);
    let writer = LogStore::open(alone.path(), one_segment()).unwrap();
    assert_eq!(writer.head(), None);
}

/// Issue 10, found by the `log_open` fuzz target: a segment numbered past what the index can
/// address (`Loc::MAX_SEQ`, 2^24 - 1) made opening the store panic ("location out of range").
/// The store never writes such a file, so it is corruption, named, for a reader and a writer.
#[test]
fn issue_10_a_segment_numbered_past_the_index_range_is_corruption_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), one_segment(), 2);
    let segment = segments(dir.path())[0].clone();
    let far = dir.path().join(format!("log-{:08}.tlog", 1u64 << 24));
    std::fs::rename(&segment, &far).unwrap();
    let before = snapshot_files(dir.path());
    expect_corruption(LogStore::open_read_only(dir.path()), &far, None);
    assert_eq!(snapshot_files(dir.path()), before);
    expect_corruption(LogStore::open(dir.path(), one_segment()), &far, None);
}

/// Issue 20: an injected `EIO` in a run of commits, and what the caller was told.
mod issue_20 {
    use super::*;
    use std::sync::Arc;
    use tally_chain::store::log::fault::{Fault, FaultFs};
    use tally_chain::{ChangeSource, Changes, Poison};

    const DIR: &str = "/store";

    fn options(fs: &FaultFs, background: bool) -> LogOptions {
        LogOptions {
            // Small segments and snapshots: rotations, merges, installs and deletions all
            // happen within 40 blocks.
            segment_bytes: 1 << 10,
            snapshot_min_bytes: 2 << 10,
            background,
            // A small cache: each of the hundreds of runs opens the store three times.
            cache_bytes: 64 << 10,
            vfs: Arc::new(fs.clone()),
            ..LogOptions::default()
        }
    }

    /// What the caller was told before the store stopped.
    #[derive(Default)]
    struct Told {
        /// The highest block reported durable.
        acked: Option<u64>,
        /// A block committed with `Background`, durable once the next call returns `Ok`.
        pending: Option<u64>,
        /// The highest block whose commit returned `Ok`.
        committed: Option<u64>,
    }

    impl Told {
        fn ok(&mut self, height: u64, durability: Durability) {
            self.committed = Some(height);
            // A `Background` block is durable once the next commit returns.
            if let Some(p) = self.pending.take() {
                self.acked = self.acked.max(Some(p));
            }
            match durability {
                Durability::Immediate => self.acked = Some(height),
                Durability::Background => self.pending = Some(height),
                Durability::None => {}
            }
        }

        fn synced(&mut self) {
            self.acked = self.committed;
            self.pending = None;
        }
    }

    /// The states after each block of the run, and the blocks.
    struct Run {
        states: Vec<Model>,
        blocks: Vec<BlockRecord>,
    }

    /// Checks a store reopened after the failure: at a block the caller may find there, with
    /// that block's state and blocks.
    fn check_reopened(store: &LogStore, run: &Run, allowed: &[Option<u64>], what: &str) {
        let head = store.head().map(|h| h.height);
        assert!(
            allowed.contains(&head),
            "{what}: reopened at {head:?}, allowed {allowed:?}"
        );
        if let Some(h) = head {
            let live: Vec<_> = run.states[h as usize].clone().into_iter().collect();
            assert_eq!(entries_of(store), live, "{what}: state at {h}");
            for b in store.first_retained()..=h {
                assert_eq!(
                    store.block(b).unwrap().as_ref(),
                    Some(&run.blocks[b as usize]),
                    "{what}: block {b}"
                );
            }
        }
    }

    /// Runs 40 commits (mixed durability, syncs, a forced snapshot) with an `EIO` armed for the
    /// `k`th operation of kind `fault`. Returns whether the fault fired.
    fn one_run(fault: Fault, k: u64, sticky: bool, background: bool) -> bool {
        let what = format!("{fault:?} #{k} sticky={sticky} background={background}");
        let fs = FaultFs::new(k + 1);
        let dir = Path::new(DIR);
        let mut store = LogStore::open(dir, options(&fs, background)).unwrap();
        fs.fail_after(fault, k, sticky);
        let mut rng = Gen(k + 17);
        let mut run = Run {
            states: Vec::new(),
            blocks: Vec::new(),
        };
        let mut told = Told::default();
        // (the call that failed, the call after which the fault had fired, the error)
        let mut failed: Option<(usize, usize, StoreError)> = None;
        let mut fired_at = None;
        let mut call = 0;
        let mut note = |call: &mut usize, result: Result<(), StoreError>, fs: &FaultFs| {
            *call += 1;
            if fired_at.is_none() && fs.failed() {
                fired_at = Some(*call);
            }
            result.map_err(|e| (*call, fired_at.unwrap_or(usize::MAX), e))
        };
        for h in 0..40u64 {
            let b = rng.block(h, 200);
            let mut model = run.states.last().cloned().unwrap_or_default();
            apply(&mut model, &b);
            run.states.push(model);
            run.blocks.push(b.clone());
            let commit = rng.commit(h);
            let durability = commit.durability;
            let result = note(&mut call, store.commit(b, commit), &fs);
            if let Err(e) = result {
                failed = Some(e);
                break;
            }
            told.ok(h, durability);
            let extra = match h {
                20 => Some(store.snapshot()),
                _ if h % 6 == 5 => Some(store.sync()),
                _ => None,
            };
            if let Some(result) = extra {
                if let Err(e) = note(&mut call, result, &fs) {
                    failed = Some(e);
                    break;
                }
                told.synced();
            }
        }
        if failed.is_none() {
            let result = store.settle().and_then(|()| store.sync());
            failed = note(&mut call, result, &fs).err();
        }
        let Some((at, fired, error)) = failed else {
            assert!(
                !fs.failed(),
                "{what}: the fault fired and no call reported it"
            );
            return false;
        };
        // The error comes from the call the fault hit, or (for a sync in the background) the
        // next one; a background merge's, by the next call after it is done.
        if !background {
            assert!(
                at <= fired + 1,
                "{what}: fired in call {fired}, reported in {at}"
            );
        }
        let poison: Poison = error
            .poison()
            .unwrap_or_else(|| panic!("{what}: not a stopped store: {error}"))
            .clone();
        assert!(poison.path.starts_with(dir), "{what}: {poison}");
        let message = error.to_string();
        assert!(message.contains("start it again"), "{what}: {message}");
        // Nothing reported durable is lost; nothing reported as failed is claimed.
        assert!(
            poison.durable >= told.acked,
            "{what}: {poison} after {:?}",
            told.acked
        );
        assert!(
            poison.durable <= told.committed,
            "{what}: {poison}, but the last commit that returned Ok was {:?}",
            told.committed
        );
        if !sticky {
            assert_eq!(
                poison.unsure, None,
                "{what}: a single fault is cut off: {poison}"
            );
        }
        // The store is stopped: no commit, no read, no sync.
        let next = run.blocks.len() as u64;
        let b = rng.block(told.committed.map_or(0, |c| c + 1), 200);
        assert!(store.commit(b, Commit::keeping(next, 10)).is_err());
        for refused in [
            store.get(b"key-00001").map(|_| ()),
            store.sync(),
            store.block(0).map(|_| ()),
            store.entries().map(|_| ()),
        ] {
            assert_eq!(refused.unwrap_err().poison(), Some(&poison), "{what}");
        }
        assert_eq!(store.head().map(|h| h.height), poison.durable, "{what}");
        drop(store);

        let mut allowed = vec![poison.durable];
        if let Some(unsure) = &poison.unsure {
            allowed.extend(unsure.clone().map(Some));
        }
        if !sticky {
            // Restarting the process (the page cache stays): the store is where the error
            // said, and it takes commits that survive a power cut.
            let mut store = LogStore::open(dir, options(&fs, background)).unwrap();
            check_reopened(&store, &run, &allowed, &format!("{what}, restarted"));
            let mut height = store.head().map_or(0, |h| h.height + 1);
            run.states.truncate(height as usize);
            run.blocks.truncate(height as usize);
            for _ in 0..3 {
                let b = rng.block(height, 200);
                let mut model = run.states.last().cloned().unwrap_or_default();
                apply(&mut model, &b);
                run.states.push(model);
                run.blocks.push(b.clone());
                store.commit(b, Commit::keeping(height, 10)).unwrap();
                height += 1;
            }
            drop(store);
            allowed = vec![Some(height - 1)];
        }
        // A power cut, and the disk works again: what reopens is on disk.
        fs.crash();
        fs.reboot();
        let store = LogStore::open(dir, options(&fs, background))
            .unwrap_or_else(|e| panic!("{what}: the store does not reopen after a power cut: {e}"));
        check_reopened(
            &store,
            &run,
            &allowed,
            &format!("{what}, after a power cut"),
        );
        true
    }

    /// Every write and every sync of the run fails in turn, once or for good.
    fn every_step(fault: Fault, sticky: bool, background: bool) -> u64 {
        let mut k = 0;
        while one_run(fault, k, sticky, background) {
            k += 1;
        }
        assert!(k > 20, "only {k} {fault:?} steps");
        k
    }

    #[test]
    fn issue_20_a_failed_sync_at_any_step_stops_the_store_and_loses_no_durable_block() {
        let steps = every_step(Fault::Sync, false, false);
        every_step(Fault::Sync, true, false);
        every_step(Fault::Sync, false, true);
        eprintln!("{steps} syncs, each failed in turn");
    }

    #[test]
    fn issue_20_a_failed_write_at_any_step_stops_the_store_and_loses_no_durable_block() {
        let steps = every_step(Fault::Write, false, false);
        every_step(Fault::Write, true, false);
        every_step(Fault::Write, false, true);
        eprintln!("{steps} writes, each failed in turn");
    }

    /// A genesis large enough to go straight into a run as well as into the log.
    struct BigGenesis;

    impl ChangeSource for BigGenesis {
        fn len(&self) -> u64 {
            100_000
        }
        fn for_each(&self, f: &mut tally_chain::store::ChangeFn<'_>) -> std::io::Result<()> {
            (0..self.len())
                .try_for_each(|i| f(format!("g-{i:07}").as_bytes(), Some(&i.to_le_bytes())))
        }
    }

    #[test]
    fn issue_20_a_failed_write_or_sync_in_a_large_genesis_stops_the_store_at_a_durable_block() {
        let genesis = BlockRecord {
            body: Vec::new(),
            changes: Changes::new(),
            ..record(0, 0)
        };
        let dir = Path::new(DIR);
        for fault in [Fault::Write, Fault::Sync] {
            for sticky in [false, true] {
                let mut k = 0;
                loop {
                    let what = format!("genesis, {fault:?} #{k} sticky={sticky}");
                    let fs = FaultFs::new(k);
                    let mut store = LogStore::open(dir, options(&fs, false)).unwrap();
                    fs.fail_after(fault, k, sticky);
                    let result = store
                        .commit_genesis(genesis.clone(), &BigGenesis, Commit::keeping(0, 10))
                        .and_then(|()| store.sync());
                    if !fs.failed() {
                        result.unwrap();
                        break;
                    }
                    let error = result.expect_err(&what);
                    let poison = error.poison().unwrap_or_else(|| panic!("{what}: {error}"));
                    let mut allowed = vec![poison.durable];
                    allowed.extend(poison.unsure.iter().flat_map(|u| u.clone().map(Some)));
                    drop(store);
                    fs.crash();
                    fs.reboot();
                    let store = LogStore::open(dir, options(&fs, false)).unwrap();
                    let head = store.head().map(|h| h.height);
                    assert!(allowed.contains(&head), "{what}: reopened at {head:?}");
                    if head == Some(0) {
                        assert_eq!(entries_of(&store).len(), 100_000, "{what}");
                    }
                    k += 1;
                }
                assert!(k >= 3, "{fault:?}: only {k} steps");
            }
        }
    }
}
