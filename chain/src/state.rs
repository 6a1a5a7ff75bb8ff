//! State stores: one trait, the in-memory backend, and how Tally lays its state out in keys.

use std::borrow::Cow;
use std::collections::VecDeque;

use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::Name;

use crate::KeyedMap;
use crate::block::BlockHeader;
pub use crate::store::{StoreError, StoreResult};

/// A key's new value in a block, or `None` if the block deleted it.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// One committed block as a store keeps it: header, encoded body (a
/// [`crate::tx::BlockBody`]) and the state changes it made, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct BlockRecord {
    /// The header.
    pub header: BlockHeader,
    /// borsh of the block's [`crate::tx::BlockBody`].
    pub body: Vec<u8>,
    /// Its state changes, sorted by key, each key once.
    pub changes: Vec<Change>,
}

/// When a commit is durable: what survives a crash of the process or of the machine.
/// (After redb's `Durability` and fjall's `PersistMode`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// On disk (`fdatasync`) before `commit` returns.
    #[default]
    Immediate,
    /// Synced in the background while the caller goes on (reads see the block at once); on
    /// disk before the next commit returns, or when [`StateStore::sync`] returns. A crash of
    /// the process loses nothing; a power cut may lose this last block.
    Background,
    /// Left to the operating system until [`StateStore::sync`], a segment's end or a
    /// snapshot: a power cut may lose any number of recent blocks, never leaving a torn one.
    /// For benchmarks that compare stores without syncing.
    None,
}

/// How to commit one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Commit {
    /// When the block is durable.
    pub durability: Durability,
    /// The lowest height whose block the archive must keep: the committer decides what to
    /// retain (by count, by block time for a duplicate window, …). Older blocks may go.
    pub retain_from: u64,
}

impl Commit {
    /// An immediately durable commit keeping the last `blocks` blocks up to `height`.
    pub fn keeping(height: u64, blocks: u64) -> Self {
        Self {
            durability: Durability::Immediate,
            retain_from: (height + 1).saturating_sub(blocks),
        }
    }
}

/// What a [`ChangeSource`] calls with each change: its key and its value (`None`: deleted).
pub type ChangeFn<'a> = dyn FnMut(&[u8], Option<&[u8]>) -> std::io::Result<()> + 'a;

/// Changes, sorted by key, that can be read more than once without being held in memory:
/// the state of a large genesis (ten million accounts), which the chain checksums and a store
/// writes as they stream past. Each pass yields the same changes.
pub trait ChangeSource: Sync {
    /// How many changes a pass yields.
    fn len(&self) -> u64;

    /// Whether a pass yields nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every change in strictly increasing key order (`None`: deleted), and
    /// stops at the first error `f` returns.
    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()>;
}

impl ChangeSource for Vec<Change> {
    fn len(&self) -> u64 {
        Vec::len(self) as u64
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()> {
        self.iter().try_for_each(|(k, v)| f(k, v.as_deref()))
    }
}

/// Every committed entry, in key order.
pub type Entries<'a> = Box<dyn Iterator<Item = StoreResult<(Vec<u8>, Vec<u8>)>> + 'a>;

/// Counters of a store's work, for read and write amplification. Zero where a backend does
/// not know.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    /// Blocks committed since the store was opened.
    pub commits: u64,
    /// Bytes of keys and values the committed changes carried.
    pub user_bytes_written: u64,
    /// Bytes written to files: log records, snapshots, compaction output.
    pub disk_bytes_written: u64,
    /// Point reads.
    pub gets: u64,
    /// Of which served from memory.
    pub cache_hits: u64,
    /// Bytes of keys and values the reads returned.
    pub user_bytes_read: u64,
    /// Bytes read from files to answer them.
    pub disk_bytes_read: u64,
    /// Bytes read from files by background work (snapshots, compaction).
    pub background_bytes_read: u64,
    /// Snapshots written.
    pub snapshots: u64,
    /// The longest a snapshot took, in the background (ms).
    pub longest_snapshot_ms: f64,
    /// Segment files deleted by compaction.
    pub segments_deleted: u64,
    /// The longest time one commit spent on the store's upkeep (installing a snapshot,
    /// sweeping the index, rotating a segment) rather than on its own block (ms).
    pub longest_pause_ms: f64,
    /// Keys in the in-memory index.
    pub index_keys: u64,
    /// Bytes the store's own structures hold in memory (index, cache, filters).
    pub memory_bytes: u64,
}

impl StoreStats {
    /// Bytes written to disk per byte of user data.
    pub fn write_amplification(&self) -> f64 {
        self.disk_bytes_written as f64 / self.user_bytes_written.max(1) as f64
    }

    /// Bytes read from disk per byte returned by reads.
    pub fn read_amplification(&self) -> f64 {
        self.disk_bytes_read as f64 / self.user_bytes_read.max(1) as f64
    }
}

/// The block archive: recent blocks, by height.
pub trait BlockArchive {
    /// The last committed block, or `None` for an empty store.
    fn head(&self) -> Option<&BlockHeader>;

    /// A retained block.
    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>>;

    /// A retained block's header and encoded body, without its changes (which a genesis of
    /// millions of accounts makes large). By default taken from [`BlockArchive::block`].
    fn header_and_body(&self, height: u64) -> StoreResult<Option<(BlockHeader, Vec<u8>)>> {
        Ok(self
            .block(height)?
            .map(|record| (record.header, record.body)))
    }

    /// The lowest height whose block is still retained.
    fn first_retained(&self) -> u64;
}

/// Where committed state lives, with the block archive beside it. Shared by reference across
/// the threads that execute a block in parallel, which only read it.
///
/// Errors are [`StoreError`]s: I/O, corruption (its own kind), a lock held by another
/// process, or a write to a store opened read-only. Reads see only committed blocks.
/// [`StateStore::commit`] applies one block's changes and records the block atomically:
/// after a crash the store is at the last block whose commit was durable, or a later one,
/// never between two blocks.
pub trait StateStore: BlockArchive + Send + Sync {
    /// The committed value of `key`.
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>>;

    /// Commits `block` (the next height), durable as `commit` says, keeping blocks from
    /// `commit.retain_from` up. The store takes the record: one that keeps blocks in memory
    /// keeps it without a copy.
    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()>;

    /// Commits the genesis block (height 0, on an empty store) with the changes of `changes`
    /// rather than `block.changes` (empty): a genesis too large to hold in memory. A store
    /// that can write it as it streams past should; this default collects the changes and
    /// commits them as usual.
    fn commit_genesis(
        &mut self,
        block: BlockRecord,
        changes: &dyn ChangeSource,
        commit: Commit,
    ) -> StoreResult<()> {
        collect_and_commit_genesis(self, block, changes, commit)
    }

    /// Waits until every committed block is durable. An error means the store can no longer
    /// promise that: the node must stop.
    fn sync(&mut self) -> StoreResult<()> {
        Ok(())
    }

    /// Every committed entry, in key order (for audits; not a hot path).
    fn entries(&self) -> StoreResult<Entries<'_>>;

    /// Bytes the store occupies on disk (0 for memory).
    fn disk_bytes(&self) -> u64;

    /// The backend's name: `memory`, `log` or `rocksdb`.
    fn kind(&self) -> &'static str;

    /// Counters of the work done so far.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }

    /// The unfinished last record that opening the store dropped, if any: a node reports it.
    fn dropped_tail(&self) -> Option<&DroppedTail> {
        None
    }
}

/// A last record that opening a log dropped: one whose bytes end the log but do not hold a
/// whole, checksummed record. A crash before the record's sync returned leaves one (its block
/// never counted as committed); so can damage to the last block on disk, which is why it is
/// reported and not dropped silently. Anything that fails its checksum with data after it is
/// corruption instead, and the store does not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTail {
    /// The segment file.
    pub file: std::path::PathBuf,
    /// Where the record starts in it.
    pub offset: u64,
    /// The bytes from there to the end of the file.
    pub bytes: u64,
    /// What was wrong with it.
    pub why: &'static str,
    /// Whether the file was cut there (a writer) or left as it is (a reader).
    pub cut: bool,
}

impl std::fmt::Display for DroppedTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the last {} bytes of {}, from byte {}, are not a whole record ({}): {}; a crash \
             before that block's sync leaves this, and the store opened at the block before it",
            self.bytes,
            self.file.display(),
            self.offset,
            self.why,
            if self.cut {
                "cut off"
            } else {
                "skipped, file unchanged"
            },
        )
    }
}

/// [`StateStore::commit_genesis`] by collecting the changes into the record and committing it
/// as any block: what a store does that cannot stream them.
pub fn collect_and_commit_genesis<S: StateStore + ?Sized>(
    store: &mut S,
    mut block: BlockRecord,
    changes: &dyn ChangeSource,
    commit: Commit,
) -> StoreResult<()> {
    block.changes.reserve(changes.len() as usize);
    changes.for_each(&mut |k, v| {
        block.changes.push((k.to_vec(), v.map(<[u8]>::to_vec)));
        Ok(())
    })?;
    store.commit(block, commit)
}

/// Live state in a hash map; nothing survives the process.
pub struct MemoryStore {
    map: KeyedMap<Vec<u8>, Vec<u8>>,
    blocks: VecDeque<BlockRecord>,
    retain: u64,
    stats: StoreStats,
}

impl MemoryStore {
    /// An empty store keeping at most the last `retain` blocks (and fewer if commits ask).
    pub fn new(retain: u64) -> Self {
        Self {
            map: KeyedMap::default(),
            blocks: VecDeque::new(),
            retain: retain.max(1),
            stats: StoreStats::default(),
        }
    }
}

/// Applies sorted changes to a hash map.
pub(crate) fn apply_changes(map: &mut KeyedMap<Vec<u8>, Vec<u8>>, changes: &[Change]) {
    for (key, value) in changes {
        match value {
            // An update of a value to one of the same length (a balance) reuses the key and
            // the buffer: most writes of a block update accounts that already exist. Other
            // lengths get a fresh buffer, so a shrunk value keeps no spare capacity.
            Some(v) => match map.get_mut(key.as_slice()) {
                Some(slot) if slot.len() == v.len() => slot.copy_from_slice(v),
                Some(slot) => *slot = v.clone(),
                None => {
                    map.insert(key.clone(), v.clone());
                }
            },
            None => {
                map.remove(key);
            }
        }
    }
}

impl BlockArchive for MemoryStore {
    fn head(&self) -> Option<&BlockHeader> {
        self.blocks.back().map(|b| &b.header)
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        let first = self.first_retained();
        Ok(height
            .checked_sub(first)
            .and_then(|i| self.blocks.get(i as usize))
            .cloned())
    }

    fn first_retained(&self) -> u64 {
        self.blocks.front().map_or(0, |b| b.header.height)
    }
}

impl StateStore for MemoryStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        Ok(self.map.get(key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        apply_changes(&mut self.map, &block.changes);
        self.stats.commits += 1;
        self.stats.user_bytes_written += block
            .changes
            .iter()
            .map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum::<u64>();
        let height = block.header.height;
        self.blocks.push_back(block);
        let keep_from = commit
            .retain_from
            .max((height + 1).saturating_sub(self.retain))
            .min(height);
        while self
            .blocks
            .front()
            .is_some_and(|b| b.header.height < keep_from)
        {
            self.blocks.pop_front();
        }
        Ok(())
    }

    fn entries(&self) -> StoreResult<Entries<'_>> {
        let mut all: Vec<(&Vec<u8>, &Vec<u8>)> = self.map.iter().collect();
        all.sort_unstable();
        Ok(Box::new(
            all.into_iter().map(|(k, v)| Ok((k.clone(), v.clone()))),
        ))
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            index_keys: self.map.len() as u64,
            ..self.stats.clone()
        }
    }
}

/// Key prefixes of Tally's state. Contract storage is namespaced by account, so one contract's
/// keys can never collide with another's or with the chain's own records.
pub mod keys {
    use super::Name;

    /// `[ACCOUNT, account]` → the account's ed25519 public key (32 bytes).
    pub const ACCOUNT: u8 = 0x00;
    /// `[CODE_HASH, account]` → sha256 of the account's contract code.
    pub const CODE_HASH: u8 = 0x01;
    /// `[CODE, hash]` → the WebAssembly code with that hash.
    pub const CODE: u8 = 0x02;
    /// `[TAPOS, slot (u16, big-endian)]` → height (u64) and id prefix (u32), little-endian,
    /// of the latest block whose height is `slot` modulo the TaPoS window
    /// ([`crate::window`]).
    pub const TAPOS: u8 = 0x03;
    /// `[RECENT_IDS, height (u64, big-endian)]` → the block's time (u64, little-endian) and
    /// the ids of the transactions it included, until all of them have expired
    /// ([`crate::window`]).
    pub const RECENT_IDS: u8 = 0x04;
    /// `[CONTRACT, account, key…]` → a contract's own storage.
    pub const CONTRACT: u8 = 0x10;

    fn with_name(prefix: u8, account: Name) -> Vec<u8> {
        let mut k = Vec::with_capacity(9);
        k.push(prefix);
        k.extend_from_slice(&account.0.to_be_bytes());
        k
    }

    /// The key of `account`'s public key.
    pub fn account(account: Name) -> Vec<u8> {
        with_name(ACCOUNT, account)
    }

    /// The key of `account`'s code hash.
    pub fn code_hash(account: Name) -> Vec<u8> {
        with_name(CODE_HASH, account)
    }

    /// The key of the code with `hash`.
    pub fn code(hash: &[u8; 32]) -> Vec<u8> {
        let mut k = vec![CODE];
        k.extend_from_slice(hash);
        k
    }

    /// The key of TaPoS slot `slot`.
    pub fn tapos(slot: u16) -> [u8; 3] {
        let [hi, lo] = slot.to_be_bytes();
        [TAPOS, hi, lo]
    }

    /// The key of the ids block `height` included.
    pub fn recent_ids(height: u64) -> [u8; 9] {
        let mut k = [RECENT_IDS; 9];
        k[1..].copy_from_slice(&height.to_be_bytes());
        k
    }

    /// Writes the state key of `contract`'s storage key `key` into `out`.
    pub fn contract_into(out: &mut Vec<u8>, contract: Name, key: &[u8]) {
        out.clear();
        out.push(CONTRACT);
        out.extend_from_slice(&contract.0.to_be_bytes());
        out.extend_from_slice(key);
    }

    /// The state key of `contract`'s storage key `key`.
    pub fn contract(contract: Name, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(9 + key.len());
        contract_into(&mut k, contract, key);
        k
    }
}
