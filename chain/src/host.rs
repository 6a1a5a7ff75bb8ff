//! The [`Host`] an action sees: its contract's namespace over the transaction's writes, the
//! pending block's writes and the committed store.

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use tally_host_api::{Host, HostError, Name, NodeFault};

use crate::state::{StateStore, StoreResult, keys};
use crate::tx::Action;

/// Writes of the running transaction, in order. Transactions touch few keys, so a vector
/// searched from the back beats a hash map.
pub(crate) type TxWrites = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Writes of the pending block, and values read from a store that returns owned bytes.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) writes: FxHashMap<Vec<u8>, Option<Vec<u8>>>,
    pub(crate) read_cache: FxHashMap<Vec<u8>, Vec<u8>>,
}

impl Pending {
    /// The value of `key` as the pending block sees it.
    pub(crate) fn get<'a>(
        &'a self,
        store: &'a dyn StateStore,
        key: &[u8],
    ) -> StoreResult<Option<Cow<'a, [u8]>>> {
        match self.writes.get(key) {
            Some(v) => Ok(v.as_deref().map(Cow::Borrowed)),
            None => store.get(key),
        }
    }
}

/// The value of `key` as the running transaction sees it.
pub(crate) fn tx_get<'a>(
    tx: &'a TxWrites,
    pending: &'a Pending,
    store: &'a dyn StateStore,
    key: &[u8],
) -> StoreResult<Option<Cow<'a, [u8]>>> {
    match tx.iter().rev().find(|(k, _)| k == key) {
        Some((_, v)) => Ok(v.as_deref().map(Cow::Borrowed)),
        None => pending.get(store, key),
    }
}

/// Sets `key` in the running transaction's writes.
pub(crate) fn tx_set(tx: &mut TxWrites, key: &[u8], value: Option<Vec<u8>>) {
    match tx.iter_mut().rev().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => tx.push((key.to_vec(), value)),
    }
}

pub(crate) struct ActionHost<'a> {
    pub(crate) contract: Name,
    pub(crate) action: &'a Action,
    pub(crate) tx: &'a mut TxWrites,
    pub(crate) pending: &'a mut Pending,
    pub(crate) store: &'a dyn StateStore,
    pub(crate) key: Vec<u8>,
}

impl Host for ActionHost<'_> {
    fn message(&self) -> &[u8] {
        &self.action.data
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        keys::contract_into(&mut self.key, self.contract, key);
        if let Some(i) = self.tx.iter().rposition(|(k, _)| *k == self.key) {
            return Ok(self.tx[i].1.as_deref());
        }
        if let Some(v) = self.pending.writes.get(&self.key) {
            return Ok(v.as_deref());
        }
        if self.pending.read_cache.contains_key(&self.key) {
            return Ok(self.pending.read_cache.get(&self.key).map(Vec::as_slice));
        }
        match self.store.get(&self.key) {
            Ok(None) => Ok(None),
            Ok(Some(Cow::Borrowed(v))) => Ok(Some(v)),
            Ok(Some(Cow::Owned(v))) => Ok(Some(
                self.pending
                    .read_cache
                    .entry(self.key.clone())
                    .or_insert(v)
                    .as_slice(),
            )),
            // The store failed, not the contract: the block must not commit.
            Err(e) => Err(NodeFault::new(e).into()),
        }
    }

    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        keys::contract_into(&mut self.key, self.contract, key);
        tx_set(self.tx, &self.key, Some(value.to_vec()));
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        keys::contract_into(&mut self.key, self.contract, key);
        tx_set(self.tx, &self.key, None);
        Ok(())
    }

    fn is_authorized(&self, account: Name) -> bool {
        self.action.authorization.contains(&account)
    }
}
