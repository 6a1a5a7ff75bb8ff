//! The journal: one overlay of the pending block's writes over committed state, with a
//! checkpoint per transaction.
//!
//! Every read goes through [`Journal::get`]: one hash lookup in the overlay, then the store.
//! Writes go straight into the overlay and push the value they replaced onto an undo log, so
//! [`Journal::discard_tx`] can put the overlay back exactly as [`Journal::checkpoint`] found it
//! and [`Journal::commit_tx`] only has to forget the log. Model: revm's journal
//! (`checkpoint`/`commit_tx`/`discard_tx`).

use std::borrow::Cow;
use std::io;

use rustc_hash::FxHashMap;
use tally_host_api::limits::{MAX_TX_WRITE_BYTES, MAX_TX_WRITES};
use tally_host_api::{Abort, AbortCode};

use crate::state::{Change, StateStore};

/// A value in the overlay: `None` means the pending block deleted the key.
type Slot = Option<Vec<u8>>;

/// What one write replaced, to undo it: the key and its previous overlay entry (`None` when
/// the key was not in the overlay at all).
type Undo = (Vec<u8>, Option<Slot>);

/// Counts one write of `key` = `value` against a transaction's limits (`writes` made and
/// `bytes` written so far): every path that writes for a transaction counts the same way.
pub(crate) fn count_write(
    writes: &mut u32,
    bytes: &mut u64,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), Abort> {
    let added = key.len() as u64 + value.map_or(0, |v| v.len() as u64);
    if *writes >= MAX_TX_WRITES {
        return Err(Abort::new(
            AbortCode::LimitExceeded,
            format!("a transaction may write at most {MAX_TX_WRITES} times"),
        ));
    }
    if *bytes + added > MAX_TX_WRITE_BYTES {
        return Err(Abort::new(
            AbortCode::LimitExceeded,
            format!("a transaction may write at most {MAX_TX_WRITE_BYTES} bytes"),
        ));
    }
    *writes += 1;
    *bytes += added;
    Ok(())
}

/// The pending block's state over a [`StateStore`].
#[derive(Default)]
pub struct Journal {
    /// Writes of the pending block, the running transaction's included.
    overlay: FxHashMap<Vec<u8>, Slot>,
    /// Values read from stores that hand out owned bytes, kept for the block so that a
    /// borrowed slice can be returned to the contract.
    read_cache: FxHashMap<Vec<u8>, Vec<u8>>,
    /// The running transaction's undo log, newest last.
    undo: Vec<Undo>,
    /// Writes and bytes written by the running transaction, against the limits.
    tx_writes: u32,
    tx_bytes: u64,
}

impl Journal {
    /// The value of `key` as the running transaction sees it.
    pub fn get<'a>(
        &'a mut self,
        store: &'a dyn StateStore,
        key: &[u8],
    ) -> io::Result<Option<&'a [u8]>> {
        if let Some(slot) = self.overlay.get(key) {
            return Ok(slot.as_deref());
        }
        if self.read_cache.contains_key(key) {
            return Ok(self.read_cache.get(key).map(Vec::as_slice));
        }
        match store.get(key)? {
            None => Ok(None),
            Some(Cow::Borrowed(v)) => Ok(Some(v)),
            Some(Cow::Owned(v)) => Ok(Some(
                self.read_cache.entry(key.to_vec()).or_insert(v).as_slice(),
            )),
        }
    }

    /// The value of `key` as the running transaction sees it, copied (for reads outside an
    /// action, which need no borrowed slice).
    pub fn get_owned(&self, store: &dyn StateStore, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        match self.overlay.get(key) {
            Some(slot) => Ok(slot.clone()),
            None => Ok(store.get(key)?.map(Cow::into_owned)),
        }
    }

    /// Sets (`Some`) or deletes (`None`) `key` in the running transaction, within the
    /// transaction's write limits.
    pub fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Abort> {
        count_write(&mut self.tx_writes, &mut self.tx_bytes, key, value)?;
        self.set_unchecked(key, value.map(<[u8]>::to_vec));
        Ok(())
    }

    /// Whether the pending block wrote `key` (a transaction's included).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.overlay.contains_key(key)
    }

    fn set_unchecked(&mut self, key: &[u8], value: Slot) {
        let previous = self.overlay.insert(key.to_vec(), value);
        self.undo.push((key.to_vec(), previous));
    }

    /// Writes `key` straight into the pending block, outside any transaction and its limits:
    /// for genesis, whose writes are trusted and may be many.
    pub fn write_block(&mut self, key: Vec<u8>, value: Slot) {
        debug_assert!(self.undo.is_empty(), "a transaction is running");
        self.overlay.insert(key, value);
    }

    /// Starts a transaction: its writes can be discarded until [`Journal::commit_tx`].
    pub fn checkpoint(&mut self) {
        debug_assert!(self.undo.is_empty(), "a transaction is already running");
        self.undo.clear();
        self.tx_writes = 0;
        self.tx_bytes = 0;
    }

    /// Keeps the running transaction's writes in the pending block.
    pub fn commit_tx(&mut self) {
        self.undo.clear();
    }

    /// Drops the running transaction's writes, leaving the overlay as at the checkpoint.
    pub fn discard_tx(&mut self) {
        while let Some((key, previous)) = self.undo.pop() {
            match previous {
                Some(slot) => {
                    self.overlay.insert(key, slot);
                }
                None => {
                    self.overlay.remove(&key);
                }
            }
        }
    }

    /// The pending block's changes, sorted by key, leaving an empty journal for the next block.
    pub fn take_changes(&mut self) -> Vec<Change> {
        debug_assert!(self.undo.is_empty(), "a transaction is still running");
        let mut changes: Vec<Change> = self.overlay.drain().collect();
        changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.read_cache.clear();
        changes
    }

    /// Forgets the pending block's writes (a block that was executed but not committed).
    pub fn clear(&mut self) {
        self.overlay.clear();
        self.read_cache.clear();
        self.undo.clear();
    }

    /// Whether the pending block has written nothing yet.
    pub fn is_empty(&self) -> bool {
        self.overlay.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryStore;

    #[test]
    fn discard_restores_the_overlay_exactly_and_commit_keeps_it() {
        let store = MemoryStore::new(1);
        let mut j = Journal::default();
        j.checkpoint();
        j.set(b"a", Some(b"1")).unwrap();
        j.commit_tx();
        j.checkpoint();
        j.set(b"a", Some(b"2")).unwrap();
        j.set(b"a", None).unwrap();
        j.set(b"b", Some(b"3")).unwrap();
        assert_eq!(j.get(&store, b"a").unwrap(), None);
        assert_eq!(j.get(&store, b"b").unwrap(), Some(&b"3"[..]));
        j.discard_tx();
        assert_eq!(j.get(&store, b"a").unwrap(), Some(&b"1"[..]));
        assert_eq!(j.get(&store, b"b").unwrap(), None);
        assert_eq!(j.take_changes(), vec![(b"a".to_vec(), Some(b"1".to_vec()))]);
    }

    #[test]
    fn issue_10_a_transaction_cannot_write_past_its_limits() {
        let mut j = Journal::default();
        j.checkpoint();
        for i in 0..MAX_TX_WRITES {
            j.set(&i.to_le_bytes(), Some(b"v")).unwrap();
        }
        let err = j.set(b"one more", Some(b"v")).unwrap_err();
        assert_eq!(err.code, AbortCode::LimitExceeded);
        j.discard_tx();
        assert!(j.is_empty());
        j.checkpoint();
        let big = vec![0u8; 60 * 1024];
        let mut written = 0u64;
        let err = loop {
            match j.set(&written.to_le_bytes(), Some(&big)) {
                Ok(()) => written += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err.code, AbortCode::LimitExceeded);
        assert!(written * (big.len() as u64 + 8) <= MAX_TX_WRITE_BYTES);
    }
}
