//! The journal: one overlay of the pending block's changes over committed state, with a
//! checkpoint per transaction.
//!
//! Every read goes through [`Journal::get`]: one hash lookup in the overlay, then the store.
//! Writes go straight into the overlay and push the value they replaced onto an undo log, so
//! [`Journal::discard_tx`] can put the overlay back exactly as [`Journal::checkpoint`] found it
//! and [`Journal::commit_tx`] only has to forget the log. Model: revm's journal
//! (`checkpoint`/`commit_tx`/`discard_tx`).
//!
//! The journal owns every kind of change a transaction makes, code included: `setcode` records
//! the contract it deployed with [`Journal::set_code`], which pushes an undo entry like any
//! write, so one `discard_tx` reverts a transaction's code and state together (revm's
//! `JournalInner` pushes a code-changed entry for the same reason).
//!
//! A journal that [records its reads](Journal::recording) is how a transaction runs
//! speculatively: alone, over the state its block started from, noting every key whose
//! committed value it depended on (pevm runs revm's own EVM over a `Database` that records
//! reads the same way). Speculative and in-order runs go through the same executor and the
//! same journal type.

use std::borrow::Cow;

use std::hash::BuildHasher;

use indexmap::IndexMap;
use indexmap::map::RawEntryApiV1;
use indexmap::map::raw_entry_v1::RawEntryMut;
use tally_host_api::limits::{MAX_EVENTS_PER_TX, MAX_TX_WRITE_BYTES, MAX_TX_WRITES};
use tally_host_api::{Abort, AbortCode, Name};

use super::code::Executor;
use crate::receipt::Event;
use crate::store::{Change, StateStore, StoreResult, sort_prefix};
use crate::{KeyedHasher, KeyedMap};

/// A value in the overlay: `None` means the pending block deleted the key.
type Slot = Option<Vec<u8>>;

/// What one change replaced, to undo it.
enum Undo {
    /// A write: the written entry's index in the overlay, and the value it replaced (`None`
    /// when the write added the entry). An index rather than the key, so a write allocates no
    /// copy of its key for the undo log: entries are only ever appended while a transaction
    /// runs, so the entry a write added is the overlay's last when its undo comes round.
    Write(usize, Option<Slot>),
    /// A deployment: the account and the contract it had deployed earlier in the block, if any.
    Code(Name, Option<Executor>),
    /// An event: the running transaction's last.
    Event,
}

/// Counts one write of `key` = `value` against a transaction's limits (`writes` made and
/// `bytes` written so far).
fn count_write(
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

/// What a block changed: its state changes sorted by key, and the contracts it deployed
/// (which the code map takes over once the block is committed).
pub(crate) struct BlockChanges {
    /// Sorted by key, each key once.
    pub(crate) state: Vec<Change>,
    /// Each account whose code the block set, with the contract it runs now.
    pub(crate) code: Vec<(Name, Executor)>,
}

/// The pending block's state over a [`StateStore`].
#[derive(Default)]
pub struct Journal {
    /// Writes of the pending block, the running transaction's included, in the order their
    /// keys were first written.
    overlay: IndexMap<Vec<u8>, Slot, KeyedHasher>,
    /// Contracts deployed by the pending block, by account.
    code: KeyedMap<Name, Executor>,
    /// Values read from stores that hand out owned bytes, kept for the block so that a
    /// borrowed slice can be returned to the contract.
    read_cache: KeyedMap<Vec<u8>, Vec<u8>>,
    /// The running transaction's undo log, newest last.
    undo: Vec<Undo>,
    /// The running transaction's events, in the order they were emitted.
    events: Vec<Event>,
    /// Writes and bytes written by the running transaction, against the limits.
    tx_writes: u32,
    tx_bytes: u64,
    /// With [`Journal::recording`]: every key read from the store (not from the overlay), in
    /// order, repeats included.
    reads: Option<Vec<Vec<u8>>>,
}

impl Journal {
    /// A journal that records the key of every read that reaches the store: for a speculative
    /// run, whose result stands only if none of those keys changed before its turn.
    pub(crate) fn recording() -> Self {
        Self {
            reads: Some(Vec::new()),
            ..Self::default()
        }
    }

    /// The value of `key` as the running transaction sees it.
    pub fn get<'a>(
        &'a mut self,
        store: &'a dyn StateStore,
        key: &[u8],
    ) -> StoreResult<Option<&'a [u8]>> {
        if let Some(slot) = self.overlay.get(key) {
            return Ok(slot.as_deref());
        }
        if let Some(reads) = &mut self.reads {
            reads.push(key.to_vec());
        }
        if self.cached(key) {
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

    /// Whether the read cache holds `key`. The memory and log stores lend their values, so it
    /// is mostly empty, and then no key is hashed for it: a miss in the overlay went on to hash
    /// the key once more for an empty map, on every read of committed state.
    fn cached(&self, key: &[u8]) -> bool {
        !self.read_cache.is_empty() && self.read_cache.contains_key(key)
    }

    /// Records that the running transaction depended on the committed value of `key`, read
    /// elsewhere (the code an action runs), when this journal records reads.
    pub(crate) fn note_read(&mut self, key: &[u8]) {
        if let Some(reads) = &mut self.reads
            && !self.overlay.contains_key(key)
        {
            reads.push(key.to_vec());
        }
    }

    /// Sets (`Some`) or deletes (`None`) `key` in the running transaction, within the
    /// transaction's write limits.
    pub fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Abort> {
        count_write(&mut self.tx_writes, &mut self.tx_bytes, key, value)?;
        let hash = self.overlay.hasher().hash_one(key);
        let value = value.map(<[u8]>::to_vec);
        let undo = match self
            .overlay
            .raw_entry_mut_v1()
            .from_key_hashed_nocheck(hash, key)
        {
            RawEntryMut::Occupied(mut entry) => {
                Undo::Write(entry.index(), Some(entry.insert(value)))
            }
            RawEntryMut::Vacant(entry) => {
                let index = entry.index();
                entry.insert_hashed_nocheck(hash, key.to_vec(), value);
                Undo::Write(index, None)
            }
        };
        self.undo.push(undo);
        Ok(())
    }

    /// Sets `key` to `value` like [`Journal::set`], and says whether the key held a value
    /// before, which the new-key charge needs: the overlay lookup that finds the entry to
    /// replace answers it, so an update costs one lookup instead of a read and a write, and
    /// the key is hashed once for the lookup and the insert.
    /// `Err` is the store's failure; `Ok(Err)` a limit the write would break.
    pub fn upsert(
        &mut self,
        store: &dyn StateStore,
        key: &[u8],
        value: &[u8],
    ) -> StoreResult<Result<bool, Abort>> {
        let hash = self.overlay.hasher().hash_one(key);
        let read_cache = &self.read_cache;
        let (existed, undo) = match self
            .overlay
            .raw_entry_mut_v1()
            .from_key_hashed_nocheck(hash, key)
        {
            RawEntryMut::Occupied(mut entry) => {
                if let Err(abort) =
                    count_write(&mut self.tx_writes, &mut self.tx_bytes, key, Some(value))
                {
                    return Ok(Err(abort));
                }
                let previous = entry.insert(Some(value.to_vec()));
                (
                    previous.is_some(),
                    Undo::Write(entry.index(), Some(previous)),
                )
            }
            RawEntryMut::Vacant(entry) => {
                if let Some(reads) = &mut self.reads {
                    reads.push(key.to_vec());
                }
                let existed = (!read_cache.is_empty() && read_cache.contains_key(key))
                    || store.get(key)?.is_some();
                if let Err(abort) =
                    count_write(&mut self.tx_writes, &mut self.tx_bytes, key, Some(value))
                {
                    return Ok(Err(abort));
                }
                let index = entry.index();
                entry.insert_hashed_nocheck(hash, key.to_vec(), Some(value.to_vec()));
                (existed, Undo::Write(index, None))
            }
        };
        self.undo.push(undo);
        Ok(Ok(existed))
    }

    /// The contract the pending block deployed to `account`, if it deployed one.
    pub(crate) fn code(&self, account: Name) -> Option<&Executor> {
        self.code.get(&account)
    }

    /// Records that the running transaction deployed `executor` to `account` (its code hash
    /// and code are written with [`Journal::set`]).
    pub(crate) fn set_code(&mut self, account: Name, executor: Executor) {
        let previous = self.code.insert(account, executor);
        self.undo.push(Undo::Code(account, previous));
    }

    /// Records an event of the running transaction, within [`MAX_EVENTS_PER_TX`]; a call
    /// rolled back drops it with its writes.
    pub(crate) fn emit(&mut self, event: Event) -> Result<(), Abort> {
        if self.events.len() >= MAX_EVENTS_PER_TX as usize {
            return Err(Abort::new(
                AbortCode::LimitExceeded,
                format!("a transaction may emit at most {MAX_EVENTS_PER_TX} events"),
            ));
        }
        self.events.push(event);
        self.undo.push(Undo::Event);
        Ok(())
    }

    /// How many events the running transaction has emitted so far (rolled-back ones not).
    pub(crate) fn event_count(&self) -> usize {
        self.events.len()
    }

    /// The running transaction's events so far, in order.
    pub(crate) fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// A point inside the running transaction that [`Journal::revert_to`] can return to: where
    /// a call to another contract starts.
    pub(crate) fn mark(&self) -> usize {
        self.undo.len()
    }

    /// Undoes every change made since `mark` (a failed call's writes, deployments and events),
    /// newest first; the transaction goes on from there.
    pub(crate) fn revert_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let Some(undo) = self.undo.pop() else { break };
            match undo {
                Undo::Write(index, Some(slot)) => self.overlay[index] = slot,
                Undo::Write(index, None) => {
                    // Undone newest first, so every entry added after this one is gone.
                    debug_assert_eq!(index + 1, self.overlay.len());
                    self.overlay.pop();
                }
                Undo::Code(account, Some(executor)) => {
                    self.code.insert(account, executor);
                }
                Undo::Code(account, None) => {
                    self.code.remove(&account);
                }
                Undo::Event => {
                    self.events.pop();
                }
            }
        }
    }

    /// Whether the pending block wrote `key` (a transaction's included).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.overlay.contains_key(key)
    }

    /// Writes `key` straight into the pending block, outside any transaction and its limits:
    /// genesis, whose writes are trusted and may be many; the chain's own per-block state; and
    /// a speculative run's writes, counted against the limits when it ran.
    pub fn write_block(&mut self, key: Vec<u8>, value: Slot) {
        debug_assert!(self.undo.is_empty(), "a transaction is running");
        self.overlay.insert(key, value);
    }

    /// Starts a transaction: its changes can be discarded until [`Journal::commit_tx`].
    pub fn checkpoint(&mut self) {
        debug_assert!(self.undo.is_empty(), "a transaction is already running");
        self.undo.clear();
        self.events.clear();
        self.tx_writes = 0;
        self.tx_bytes = 0;
    }

    /// Keeps the running transaction's changes in the pending block (its events are taken
    /// with [`Journal::take_events`]).
    pub fn commit_tx(&mut self) {
        self.undo.clear();
    }

    /// Drops the running transaction's changes and events, leaving the journal as at the
    /// checkpoint.
    pub fn discard_tx(&mut self) {
        self.revert_to(0);
        self.events.clear();
    }

    /// The pending block's changes, leaving an empty journal for the next block.
    pub(crate) fn take_changes(&mut self) -> BlockChanges {
        debug_assert!(self.undo.is_empty(), "a transaction is still running");
        // A block's sort compares keys a dozen times each, and keys mostly differ within
        // their first 16 bytes: compare those as one integer, and whole keys only on a tie.
        let mut keyed: Vec<(u128, Change)> = self
            .overlay
            .drain(..)
            .map(|change| (sort_prefix(&change.0), change))
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.0.cmp(&b.1.0)));
        self.read_cache.clear();
        BlockChanges {
            state: keyed.into_iter().map(|(_, change)| change).collect(),
            code: self.code.drain().collect(),
        }
    }

    /// The changes of a speculative run, unsorted, and the keys it read; leaves the journal
    /// empty for the next run.
    pub(crate) fn take_run(&mut self) -> (Vec<Change>, Vec<Vec<u8>>) {
        debug_assert!(self.undo.is_empty(), "a transaction is still running");
        self.read_cache.clear();
        self.code.clear();
        let reads = self.reads.as_mut().map(std::mem::take).unwrap_or_default();
        (self.overlay.drain(..).collect(), reads)
    }

    /// Forgets the pending block's changes (a block that was executed but not committed).
    pub fn clear(&mut self) {
        self.overlay.clear();
        self.code.clear();
        self.read_cache.clear();
        self.undo.clear();
        self.events.clear();
        if let Some(reads) = &mut self.reads {
            reads.clear();
        }
    }

    /// Whether the pending block has written nothing yet.
    pub fn is_empty(&self) -> bool {
        self.overlay.is_empty() && self.code.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

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
        assert_eq!(
            j.take_changes().state,
            vec![(b"a".to_vec(), Some(b"1".to_vec()))]
        );
    }

    /// A store holding `a` = 1.
    fn store_with_a() -> MemoryStore {
        let mut store = MemoryStore::new(1);
        let record = crate::store::BlockRecord {
            header: crate::block::BlockHeader {
                height: 0,
                previous: Default::default(),
                timestamp_ms: 0,
                transactions_root: [0; 32],
                state_checksum: [0; 32],
            },
            body: Vec::new(),
            changes: vec![(b"a".to_vec(), Some(b"1".to_vec()))],
        };
        store.commit(record, Default::default()).unwrap();
        store
    }

    #[test]
    fn upsert_tells_a_new_key_from_an_existing_one_as_load_would() {
        let store = store_with_a();
        let mut j = Journal::default();
        j.checkpoint();
        // In the store, not in the overlay.
        assert!(j.upsert(&store, b"a", b"2").unwrap().unwrap());
        // In neither, then in the overlay.
        assert!(!j.upsert(&store, b"b", b"3").unwrap().unwrap());
        assert!(j.upsert(&store, b"b", b"4").unwrap().unwrap());
        // Deleted in the overlay: new again, though the store holds it.
        j.set(b"a", None).unwrap();
        assert!(!j.upsert(&store, b"a", b"5").unwrap().unwrap());
        assert_eq!(j.get(&store, b"a").unwrap(), Some(&b"5"[..]));
        j.discard_tx();
        assert!(j.is_empty());
        assert_eq!(j.get(&store, b"a").unwrap(), Some(&b"1"[..]));

        // An update in a later transaction undoes to the earlier one's value.
        j.checkpoint();
        assert!(!j.upsert(&store, b"c", b"6").unwrap().unwrap());
        j.commit_tx();
        j.checkpoint();
        assert!(j.upsert(&store, b"c", b"7").unwrap().unwrap());
        assert!(!j.upsert(&store, b"d", b"8").unwrap().unwrap());
        j.discard_tx();
        assert_eq!(
            j.take_changes().state,
            vec![(b"c".to_vec(), Some(b"6".to_vec()))]
        );
    }

    #[test]
    fn changes_come_out_in_key_order_whatever_the_keys_lengths() {
        // Keys that tie on their first 16 bytes, prefixes of each other, zero bytes where the
        // pad goes, and empty ones: the order must be the plain byte order.
        let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![1], vec![0; 16]];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
            let mut k = vec![7u8; 14];
            k.extend((0..len).map(|i| (x >> (i % 8 * 8)) as u8 % 3));
            k.truncate((x >> 40) as usize % 26);
            keys.push(k);
        }
        let mut j = Journal::default();
        for k in &keys {
            j.write_block(k.clone(), Some(k.clone()));
        }
        let got: Vec<Vec<u8>> = j.take_changes().state.into_iter().map(|(k, _)| k).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(got, keys);
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
        let store = MemoryStore::new(1);
        let err = j.upsert(&store, b"one more", b"v").unwrap().unwrap_err();
        assert_eq!(err.code, AbortCode::LimitExceeded);
        let err = j
            .upsert(&store, &0u32.to_le_bytes(), b"v")
            .unwrap()
            .unwrap_err();
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
