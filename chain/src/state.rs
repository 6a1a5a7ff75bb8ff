//! State stores: one trait, the in-memory backend, and how Tally lays its state out in keys.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io;

use borsh::{BorshDeserialize, BorshSerialize};
use rustc_hash::FxHashMap;
use tally_host_api::Name;

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

/// The deferred durable sync of one block ([`StateStore::commit_deferred`]).
pub type SyncJob = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// Where committed state and recent blocks live.
///
/// Errors are [`StoreError`]s: I/O, corruption (its own kind), a lock held by another
/// process, or a write to a store opened read-only. Reads see only committed blocks. [`StateStore::commit`] applies one block's changes and
/// records the block atomically: after a crash the store is at the last block whose commit
/// returned, or a later one, never between two blocks.
pub trait StateStore: Send {
    /// The committed value of `key`.
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>>;

    /// Commits `block` and prunes blocks more than the retention depth below it.
    fn commit(&mut self, block: &BlockRecord) -> StoreResult<()>;

    /// [`StateStore::commit`], except that the block may not be durable yet when it returns:
    /// the returned job makes it durable, and may run on another thread while the caller
    /// goes on (reads see the block at once). The caller runs the job before the next commit.
    /// Stores without a separate sync step commit durably and return `None`.
    fn commit_deferred(&mut self, block: &BlockRecord) -> StoreResult<Option<SyncJob>> {
        self.commit(block).map(|()| None)
    }

    /// The last committed block, or `None` for an empty store.
    fn head(&self) -> Option<&BlockHeader>;

    /// A retained block.
    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>>;

    /// The lowest height whose block is still retained.
    fn first_retained(&self) -> u64;

    /// Every committed entry, sorted by key (for audits and snapshots; not a hot path).
    fn entries(&self) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>>;

    /// Bytes the store occupies on disk (0 for memory).
    fn disk_bytes(&self) -> u64;

    /// The backend's name: `memory`, `log` or `rocksdb`.
    fn kind(&self) -> &'static str;
}

/// Live state in a hash map; nothing survives the process.
pub struct MemoryStore {
    map: FxHashMap<Vec<u8>, Vec<u8>>,
    blocks: VecDeque<BlockRecord>,
    retain: u64,
}

impl MemoryStore {
    /// An empty store keeping the last `retain` blocks.
    pub fn new(retain: u64) -> Self {
        Self {
            map: FxHashMap::default(),
            blocks: VecDeque::new(),
            retain: retain.max(1),
        }
    }
}

/// Applies sorted changes to a hash map.
pub(crate) fn apply_changes(map: &mut FxHashMap<Vec<u8>, Vec<u8>>, changes: &[Change]) {
    for (key, value) in changes {
        match value {
            Some(v) => {
                map.insert(key.clone(), v.clone());
            }
            None => {
                map.remove(key);
            }
        }
    }
}

/// Every entry of a hash map, sorted by key.
pub(crate) fn sorted_entries(map: &FxHashMap<Vec<u8>, Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut all: Vec<_> = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    all.sort_unstable();
    all
}

impl StateStore for MemoryStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        Ok(self.map.get(key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    fn commit(&mut self, block: &BlockRecord) -> StoreResult<()> {
        apply_changes(&mut self.map, &block.changes);
        self.blocks.push_back(block.clone());
        while self.blocks.len() as u64 > self.retain {
            self.blocks.pop_front();
        }
        Ok(())
    }

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

    fn entries(&self) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(sorted_entries(&self.map))
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    fn kind(&self) -> &'static str {
        "memory"
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
