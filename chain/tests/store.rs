//! The state stores on their own: on-disk format, damage, crashes, locking, read-only opens.
//!
//! Blocks here are synthetic [`BlockRecord`]s (a store checks heights, not contents), so these
//! tests need no contract and no runtime.

use std::path::{Path, PathBuf};

use tally_chain::block::chain_checksum;
use tally_chain::{BlockHeader, BlockRecord, LogOptions, LogStore, StateStore, StoreError};

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
        },
        body: vec![height as u8; 40],
        changes,
    }
}

/// One segment, no snapshot: every record stays where the tests look for it.
fn one_segment() -> LogOptions {
    LogOptions {
        retain_blocks: 512,
        segment_bytes: 1 << 30,
        snapshot_min_bytes: 1 << 30,
    }
}

/// Commits blocks `0..blocks` to a log store in `dir`; returns the head state after each.
fn write_blocks(dir: &Path, options: LogOptions, blocks: u64) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut store = LogStore::open(dir, options).unwrap();
    (0..blocks)
        .map(|h| {
            store.commit(&record(h, 40)).unwrap();
            store.entries().unwrap()
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
        assert_eq!(reader.entries().unwrap(), states[4], "{what}");
        drop(reader);
        assert_eq!(snapshot_files(dir.path()), before, "{what}: a reader wrote");

        let mut writer = LogStore::open(dir.path(), one_segment()).unwrap();
        assert_eq!(writer.head().unwrap().height, 4, "{what}");
        assert_eq!(writer.entries().unwrap(), states[4], "{what}");
        assert_eq!(
            std::fs::metadata(&file).unwrap().len() as usize,
            last,
            "{what}: the writer cuts the torn record off"
        );
        // And the log goes on from there.
        writer.commit(&record(5, 40)).unwrap();
        drop(writer);
        let reopened = LogStore::open_read_only(dir.path()).unwrap();
        assert_eq!(reopened.head().unwrap().height, 5, "{what}");
        assert_eq!(reopened.entries().unwrap(), states[5], "{what}");
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
        ..one_segment()
    };
    let dir = tempfile::tempdir().unwrap();
    write_blocks(dir.path(), options.clone(), 4);
    let snapshot = with_extension(dir.path(), "tsnap").pop().unwrap();
    let mut bytes = std::fs::read(&snapshot).unwrap();
    bytes[30] ^= 1;
    std::fs::write(&snapshot, &bytes).unwrap();
    expect_corruption(LogStore::open(dir.path(), options), &snapshot, None);
}

#[test]
fn a_store_reopens_with_every_committed_block_across_segments_and_snapshots() {
    let options = LogOptions {
        retain_blocks: 5,
        segment_bytes: 4 << 10,
        snapshot_min_bytes: 16 << 10,
    };
    let dir = tempfile::tempdir().unwrap();
    let states = write_blocks(dir.path(), options.clone(), 60);
    assert!(segments(dir.path()).len() > 1);
    assert!(!with_extension(dir.path(), "tsnap").is_empty());
    let store = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(store.head().unwrap().height, 59);
    assert_eq!(store.entries().unwrap(), states[59]);
    assert!(store.first_retained() <= 55);
    for h in 55..60 {
        assert_eq!(store.block(h).unwrap().unwrap(), record(h, 40));
    }
}

#[test]
fn issue_10_a_second_writer_is_refused_naming_the_directory() {
    // Before the fix both opens succeeded; each appended a block of the same height, and the
    // store never opened again.
    let dir = tempfile::tempdir().unwrap();
    let mut first = LogStore::open(dir.path(), one_segment()).unwrap();
    first.commit(&record(0, 4)).unwrap();
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
    first.commit(&record(1, 4)).unwrap();
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
        store.commit(&record(3, 4)),
        Err(StoreError::ReadOnly)
    ));
    assert!(matches!(store.snapshot(), Err(StoreError::ReadOnly)));
    drop(store);
    assert_eq!(snapshot_files(tmp.path()), before);
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

#[cfg(feature = "rocksdb")]
mod rocksdb {
    use super::*;
    use tally_chain::rocks_store::RocksStore;

    #[test]
    fn issue_10_a_second_rocksdb_writer_gets_a_clear_lock_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = RocksStore::open(dir.path(), 16).unwrap();
        first.commit(&record(0, 4)).unwrap();
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
                store.commit(&record(h, 40)).unwrap();
            }
        }
        let before = snapshot_files(dir.path());
        let mut store = RocksStore::open_read_only(dir.path()).unwrap();
        assert_eq!(store.head().unwrap().height, 4);
        assert!(matches!(
            store.commit(&record(5, 4)),
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
