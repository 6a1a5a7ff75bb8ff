//! Opening a `log` state store from arbitrary files: a real store's files with damage
//! (flipped bytes, cuts, insertions, deleted files), or files made from raw bytes.
//!
//! `cargo +nightly fuzz run log_open`
//!
//! Holds: opening returns a store or a typed error, never panics or hangs; a read-only open
//! changes no file; a writer opens exactly when a reader does, at the same head, and what the
//! writer leaves behind opens read-only at that head too. Most inputs run on the in-memory
//! `FaultFs`; one in eight on the real file system, in a temporary directory.

#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::{Corpus, fuzz_target};
use tally_chain::block::chain_checksum;
use tally_chain::store::log::fault::FaultFs;
use tally_chain::store::log::vfs::{RealFs, Vfs};
use tally_chain::{
    BlockArchive, BlockHeader, BlockRecord, Commit, LogOptions, LogStore, StateStore, StoreError,
};

/// Files of a store directory: name and bytes.
type Files = BTreeMap<String, Vec<u8>>;

const DIR: &str = "/store";

fn options(vfs: Arc<dyn Vfs>) -> LogOptions {
    LogOptions {
        // Small segments and snapshots, so a few blocks make several files of each kind.
        segment_bytes: 1536,
        snapshot_min_bytes: 2048,
        cache_bytes: 1 << 16,
        background: false,
        vfs,
        ..LogOptions::default()
    }
}

/// Block `height` with `n` changes, some overwriting earlier blocks' keys, some removals.
fn record(height: u64, n: usize) -> BlockRecord {
    let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n)
        .map(|i| {
            let key = format!("k{:03}", (height as usize * 7 + i) % 50).into_bytes();
            let value = (i % 5 != 4).then(|| format!("v{height}-{i}").into_bytes());
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
        body: vec![height as u8; 20],
        changes: changes.into(),
    }
}

/// The files of a real store: a run, several segments, a retained window of blocks.
fn baseline() -> &'static Files {
    static BASELINE: OnceLock<Files> = OnceLock::new();
    BASELINE.get_or_init(|| {
        let fs = FaultFs::new(1);
        let dir = Path::new(DIR);
        let mut store = LogStore::open(dir, options(Arc::new(fs.clone()))).expect("open");
        for height in 0..24 {
            store
                .commit(record(height, 6), Commit::keeping(height, 16))
                .expect("commit");
            if height == 12 {
                store.snapshot().expect("snapshot");
            }
        }
        store.settle().expect("settle");
        drop(store);
        fault_files(&fs, dir)
    })
}

fn fault_files(fs: &FaultFs, dir: &Path) -> Files {
    fs.list(dir)
        .expect("list")
        .into_iter()
        .map(|name| {
            let bytes = fs.read_file(&dir.join(&name)).expect("listed file");
            (name, bytes)
        })
        .collect()
}

fn real_files(dir: &Path) -> Files {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().into_string().expect("utf-8 name");
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

const NAMES: &[&str] = &[
    "log-0.tlog",
    "log-1.tlog",
    "log-2.tlog",
    "log-7.tlog",
    "run-0.trun",
    "run-5.trun",
    "run-12.trun",
    "merge.tmp",
    "log-18446744073709551615.tlog",
    "run-18446744073709551615.trun",
    "log-x.tlog",
];

/// The directory an input describes.
fn files(u: &mut Unstructured<'_>) -> Result<Files> {
    let mut files = Files::new();
    if u.ratio(1, 4)? {
        // Raw files.
        for _ in 0..u.int_in_range(0..=4)? {
            let name = if u.ratio(1, 8)? {
                format!("log-{}.tlog", u.arbitrary::<u64>()?)
            } else {
                u.choose(NAMES)?.to_string()
            };
            files.insert(name, u.arbitrary()?);
        }
        return Ok(files);
    }
    files.clone_from(baseline());
    for _ in 0..u.int_in_range(1..=6)? {
        let names: Vec<String> = files.keys().cloned().collect();
        let Ok(name) = u.choose(&names) else { break };
        let name = name.clone();
        let bytes = files.get_mut(&name).expect("chosen");
        let at = if bytes.is_empty() {
            0
        } else {
            u.choose_index(bytes.len() + 1)?
        };
        match u.int_in_range(0..=6)? {
            0 | 1 => {
                if at < bytes.len() {
                    bytes[at] ^= u.int_in_range(1..=255)?;
                }
            }
            2 => bytes.truncate(at),
            3 => {
                let insert: Vec<u8> = u.arbitrary()?;
                bytes.splice(at..at, insert);
            }
            4 => {
                // A little-endian u32 (lengths, counts, heights) set to a chosen value.
                let any: u32 = u.arbitrary()?;
                let value = *u.choose(&[0, 1, 0x7fff_ffff, 0xffff_ffff, any])?;
                for (i, b) in value.to_le_bytes().into_iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = b;
                    }
                }
            }
            5 => {
                files.remove(&name);
            }
            _ => {
                let to = u.choose(NAMES)?.to_string();
                let moved = files.remove(&name).expect("chosen");
                files.insert(to, moved);
            }
        }
    }
    Ok(files)
}

/// What an open store shows: its head, its retained blocks and its whole state.
#[derive(Debug, PartialEq)]
struct View {
    head: Option<BlockHeader>,
    blocks: Vec<Option<BlockRecord>>,
    state: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Opens the store and reads everything it holds; a read may fail only with a typed error.
fn view(dir: &Path, vfs: Arc<dyn Vfs>, read_only: bool) -> std::result::Result<View, StoreError> {
    let store = if read_only {
        LogStore::open_read_only_with(dir, options(vfs))?
    } else {
        LogStore::open(dir, options(vfs))?
    };
    let head = store.head().cloned();
    let mut blocks = Vec::new();
    if let Some(head) = &head {
        // Bounded: a damaged head height must not make this loop long.
        let from = store.first_retained().max(head.height.saturating_sub(64));
        for height in from..=head.height {
            blocks.push(store.block(height)?);
        }
    }
    let state = store.entries()?.collect::<std::result::Result<_, _>>()?;
    Ok(View {
        head,
        blocks,
        state,
    })
}

/// The file system under test and a way to list what it holds.
struct Disk {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    snapshot: Box<dyn Fn() -> Files>,
    _temp: Option<tempfile::TempDir>,
}

fn disk(files: &Files, real: bool) -> Disk {
    if real {
        let parent = Path::new("/dev/shm");
        let temp = if parent.is_dir() {
            tempfile::tempdir_in(parent)
        } else {
            tempfile::tempdir()
        }
        .expect("temp dir");
        let dir = temp.path().to_path_buf();
        // A real store directory always has its lock file (a reader without one finds no
        // store, since it may not create it).
        std::fs::write(dir.join(tally_chain::store::lock::LOCK_FILE), b"").expect("lock file");
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("write");
        }
        let listed = dir.clone();
        Disk {
            vfs: Arc::new(RealFs),
            dir,
            snapshot: Box::new(move || real_files(&listed)),
            _temp: Some(temp),
        }
    } else {
        let fs = FaultFs::new(2);
        let dir = PathBuf::from(DIR);
        fs.create_dir_all(&dir).expect("dir");
        for (name, bytes) in files {
            let path = dir.join(name);
            fs.create(&path).expect("create");
            fs.write_file(&path, bytes);
        }
        let (listed, lister) = (dir.clone(), fs.clone());
        Disk {
            vfs: Arc::new(fs),
            dir,
            snapshot: Box::new(move || fault_files(&lister, &listed)),
            _temp: None,
        }
    }
}

fuzz_target!(|data: &[u8]| -> Corpus {
    let mut u = Unstructured::new(data);
    let (Ok(real), Ok(files)) = (u.ratio(1, 8), files(&mut u)) else {
        return Corpus::Reject;
    };
    let disk = disk(&files, real);
    let before = (disk.snapshot)();
    let reader = view(&disk.dir, disk.vfs.clone(), true);
    assert!(
        before == (disk.snapshot)(),
        "a read-only open changed the files (reader: {:?})",
        reader.as_ref().map(|v| &v.head)
    );
    let writer = view(&disk.dir, disk.vfs.clone(), false);
    match (&reader, &writer) {
        (Ok(r), Ok(w)) => assert_eq!(r, w, "a reader and a writer see different stores"),
        (Err(r), Err(w)) => assert_eq!(
            r.is_corruption(),
            w.is_corruption(),
            "reader {r}, writer {w}"
        ),
        (r, w) => panic!(
            "a reader and a writer disagree: reader {:?}, writer {:?}",
            r.as_ref().map(|v| &v.head),
            w.as_ref().map(|v| &v.head)
        ),
    }
    if let Ok(w) = &writer {
        let again = view(&disk.dir, disk.vfs.clone(), true)
            .unwrap_or_else(|e| panic!("what a writer left does not open: {e}"));
        assert_eq!(&again, w, "what a writer left opens differently");
    }
    Corpus::Keep
});
