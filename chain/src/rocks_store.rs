//! The `rocksdb` store (cargo feature `rocksdb`): the reference backend.
//!
//! Three column families: `state` (the live state), `blocks` (height, big-endian → borsh of
//! the retained [`BlockRecord`]) and `meta` (`head` → borsh of the head header). One block
//! commit is one `WriteBatch` (state changes + the block + the pruned block + the head), written
//! with `sync`, so a block counts as committed only once it is durable and is never half there.
//!
//! Settings, for this workload (small random point reads and writes, no scans on the hot path):
//! - bloom filters of 10 bits per key on `state`: a miss (a new account) costs no disk read;
//! - a 256 MiB LRU block cache with index and filter blocks in it, so memory stays bounded;
//! - 64 MiB memtables and LZ4: fewer, cheaper flushes;
//! - `increase_parallelism` over the machine's cores for flushes and compactions.
//!
//! Locking: RocksDB's own `LOCK` file keeps a second writer out; its error becomes
//! [`StoreError::Locked`]. [`RocksStore::open_read_only`] takes no lock and writes nothing:
//! RocksDB's read-only mode reads the state as of the last write that finished, even while
//! a writer goes on.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, DBCompressionType, IteratorMode, Options,
    WriteBatch, WriteOptions,
};

use crate::block::BlockHeader;
use crate::state::{BlockRecord, StateStore};
use crate::store::{StoreError, StoreResult};

const STATE: &str = "state";
const BLOCKS: &str = "blocks";
const META: &str = "meta";
const HEAD: &[u8] = b"head";

/// A RocksDB error of the store in `dir`, by kind.
fn store_err(dir: &Path, writing: bool, e: rocksdb::Error) -> StoreError {
    match e.kind() {
        rocksdb::ErrorKind::Corruption => StoreError::corrupted(dir, None, e.into_string()),
        // RocksDB says so only in its message: "While lock file: <dir>/LOCK: Resource
        // temporarily unavailable".
        rocksdb::ErrorKind::IOError if e.as_ref().contains("lock file") => StoreError::Locked {
            dir: dir.to_path_buf(),
            writing,
        },
        _ => StoreError::Io(std::io::Error::other(e.into_string())),
    }
}

/// The RocksDB store.
pub struct RocksStore {
    db: DB,
    head: Option<BlockHeader>,
    retain: u64,
    first_retained: u64,
    dir: PathBuf,
    read_only: bool,
}

impl RocksStore {
    /// Opens (or creates) the store in `dir` for writing, keeping `retain` blocks. Fails with
    /// [`StoreError::Locked`] while another process has it open for writing.
    pub fn open(dir: impl AsRef<Path>, retain: u64) -> StoreResult<Self> {
        Self::open_with(dir.as_ref(), retain, false)
    }

    /// Opens the store in `dir` for reading only: nothing in `dir` is created or changed, and
    /// a writer may keep running meanwhile.
    pub fn open_read_only(dir: impl AsRef<Path>) -> StoreResult<Self> {
        let dir = dir.as_ref();
        if !dir.join("CURRENT").is_file() {
            return Err(StoreError::Missing {
                dir: dir.to_path_buf(),
            });
        }
        Self::open_with(dir, 1, true)
    }

    fn open_with(dir: &Path, retain: u64, read_only: bool) -> StoreResult<Self> {
        let dir = dir.to_path_buf();
        let cache = Cache::new_lru_cache(256 << 20);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        let mut state = Options::default();
        state.set_block_based_table_factory(&table);
        state.set_write_buffer_size(64 << 20);
        state.set_compression_type(DBCompressionType::Lz4);
        let mut other = Options::default();
        other.set_compression_type(DBCompressionType::Lz4);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(!read_only);
        db_opts.create_missing_column_families(!read_only);
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as i32;
        db_opts.increase_parallelism(cores);
        let cfs = vec![
            ColumnFamilyDescriptor::new(STATE, state),
            ColumnFamilyDescriptor::new(BLOCKS, other.clone()),
            ColumnFamilyDescriptor::new(META, other),
        ];
        let err = |e| store_err(&dir, !read_only, e);
        let db = if read_only {
            DB::open_cf_descriptors_read_only(&db_opts, &dir, cfs, false).map_err(err)?
        } else {
            DB::open_cf_descriptors(&db_opts, &dir, cfs).map_err(err)?
        };
        let head = match db
            .get_cf(db.cf_handle(META).expect("meta cf"), HEAD)
            .map_err(err)?
        {
            Some(bytes) => Some(borsh::from_slice(&bytes).map_err(|e| {
                StoreError::corrupted(&dir, None, format!("the head record does not decode: {e}"))
            })?),
            None => None,
        };
        let first_retained = db
            .iterator_cf(
                db.cf_handle(BLOCKS).expect("blocks cf"),
                IteratorMode::Start,
            )
            .next()
            .transpose()
            .map_err(err)?
            .map(|(k, _)| {
                k.get(..8)
                    .and_then(|k| k.try_into().ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| StoreError::corrupted(&dir, None, "a block key is not 8 bytes"))
            })
            .transpose()?
            .unwrap_or(0);
        Ok(Self {
            db,
            head,
            retain: retain.max(1),
            first_retained,
            dir,
            read_only,
        })
    }

    fn err(&self, e: rocksdb::Error) -> StoreError {
        store_err(&self.dir, !self.read_only, e)
    }
}

impl StateStore for RocksStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        let cf = self.db.cf_handle(STATE).expect("state cf");
        Ok(self
            .db
            .get_cf(cf, key)
            .map_err(|e| self.err(e))?
            .map(Cow::Owned))
    }

    fn commit(&mut self, block: &BlockRecord) -> StoreResult<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let (state, blocks, meta) = (
            self.db.cf_handle(STATE).expect("state cf"),
            self.db.cf_handle(BLOCKS).expect("blocks cf"),
            self.db.cf_handle(META).expect("meta cf"),
        );
        let height = block.header.height;
        let mut batch = WriteBatch::default();
        for (k, v) in &block.changes {
            match v {
                Some(v) => batch.put_cf(state, k, v),
                None => batch.delete_cf(state, k),
            }
        }
        batch.put_cf(blocks, height.to_be_bytes(), borsh::to_vec(block)?);
        let first = (height + 1).saturating_sub(self.retain);
        for old in self.first_retained..first {
            batch.delete_cf(blocks, old.to_be_bytes());
        }
        batch.put_cf(meta, HEAD, borsh::to_vec(&block.header)?);
        let mut options = WriteOptions::default();
        options.set_sync(true);
        self.db
            .write_opt(batch, &options)
            .map_err(|e| self.err(e))?;
        self.first_retained = first.max(self.first_retained);
        self.head = Some(block.header.clone());
        Ok(())
    }

    fn head(&self) -> Option<&BlockHeader> {
        self.head.as_ref()
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        let cf = self.db.cf_handle(BLOCKS).expect("blocks cf");
        match self
            .db
            .get_cf(cf, height.to_be_bytes())
            .map_err(|e| self.err(e))?
        {
            Some(bytes) => Ok(Some(borsh::from_slice(&bytes).map_err(|e| {
                StoreError::corrupted(
                    &self.dir,
                    None,
                    format!("block {height} does not decode: {e}"),
                )
            })?)),
            None => Ok(None),
        }
    }

    fn first_retained(&self) -> u64 {
        self.first_retained
    }

    fn entries(&self) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let cf = self.db.cf_handle(STATE).expect("state cf");
        self.db
            .iterator_cf(cf, IteratorMode::Start)
            .map(|kv| {
                kv.map(|(k, v)| (k.into_vec(), v.into_vec()))
                    .map_err(|e| self.err(e))
            })
            .collect()
    }

    fn disk_bytes(&self) -> u64 {
        fs_size(&self.dir)
    }

    fn kind(&self) -> &'static str {
        "rocksdb"
    }
}

fn fs_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
