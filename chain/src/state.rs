//! State stores: one trait, and how Tally lays its state out in keys.

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use tally_host_api::Name;

use crate::block::BlockHeader;

/// A key's new value in a block, or `None` if the block deleted it.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// Where committed state lives. Reads see only committed blocks; a block's changes apply
/// atomically with its header.
pub trait StateStore: Send {
    /// The committed value of `key`.
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>>;

    /// Applies one block's changes (sorted by key, each key once) and records `header` as the
    /// head, atomically.
    fn commit(&mut self, header: &BlockHeader, changes: &[Change]) -> std::io::Result<()>;

    /// The last committed block, or `None` for an empty store.
    fn head(&self) -> Option<&BlockHeader>;

    /// Every committed entry, sorted by key (for audits; not on any hot path).
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)>;
}

/// Live state in a hash map; nothing survives the process.
#[derive(Default)]
pub struct MemoryStore {
    map: FxHashMap<Vec<u8>, Vec<u8>>,
    head: Option<BlockHeader>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StateStore for MemoryStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.map.get(key).map(|v| Cow::Borrowed(v.as_slice()))
    }

    fn commit(&mut self, header: &BlockHeader, changes: &[Change]) -> std::io::Result<()> {
        for (key, value) in changes {
            match value {
                Some(v) => {
                    self.map.insert(key.clone(), v.clone());
                }
                None => {
                    self.map.remove(key);
                }
            }
        }
        self.head = Some(header.clone());
        Ok(())
    }

    fn head(&self) -> Option<&BlockHeader> {
        self.head.as_ref()
    }

    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all: Vec<_> = self
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort_unstable();
        all
    }
}

/// Key prefixes of Tally's state. Contract storage is namespaced by account, so one contract's
/// keys can never collide with another's or with the chain's own records.
pub mod keys {
    use super::Name;

    /// `[CODE_HASH, account]` → sha256 of the account's contract code.
    pub const CODE_HASH: u8 = 0x01;
    /// `[CODE, hash]` → the WebAssembly code with that hash.
    pub const CODE: u8 = 0x02;
    /// `[CONTRACT, account, key…]` → a contract's own storage.
    pub const CONTRACT: u8 = 0x10;

    /// The key of `account`'s code hash.
    pub fn code_hash(account: Name) -> Vec<u8> {
        let mut k = vec![CODE_HASH];
        k.extend_from_slice(&account.0.to_be_bytes());
        k
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
