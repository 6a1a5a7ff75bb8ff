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
//! the contract it deployed with `Journal::set_code`, which pushes an undo entry like any
//! write, so one `discard_tx` reverts a transaction's code and state together (revm's
//! `JournalInner` pushes a code-changed entry for the same reason).
//!
//! A journal that records its reads (`Journal::recording`) is how a transaction runs
//! speculatively: alone, over the state its block started from, noting every key whose
//! committed value it depended on (pevm runs revm's own EVM over a `Database` that records
//! reads the same way). Speculative and in-order runs go through the same executor and the
//! same journal type.

use std::hash::BuildHasher;
use std::ops::Bound;

use indexmap::IndexMap;
use indexmap::map::RawEntryApiV1;
use indexmap::map::raw_entry_v1::RawEntryMut;
use tally_host_api::limits::{MAX_EVENTS_PER_TX, MAX_TX_WRITE_BYTES, MAX_TX_WRITES, MAX_VALUE_LEN};
use tally_host_api::{Abort, AbortCode, Name};

use super::code::Executor;
use super::key_order::key_order;
use super::overlay_order::OverlayOrder;
use crate::receipt::Event;
use crate::store::{Change, Changes, Direction, KeyRange, StateStore, StoreResult, comes_before};
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
    /// An update in place of a value by one of the same length (a balance): the entry's index,
    /// and where in [`Journal::undo_bytes`] the bytes it replaced start (they run to its end,
    /// and are as long as the entry's value).
    Overwrite(usize, usize),
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

/// Whether state access of `counts` ((keys, bytes) read, created, written) at `prices` (read,
/// allocate, write) costs more than `budget` (scaled by `PRICE_SCALE`; `u128::MAX`: no bound).
fn over_budget(budget: u128, prices: [u64; 3], counts: [(u64, u64); 3]) -> bool {
    if budget == u128::MAX {
        return false;
    }
    let cost: u128 = counts
        .iter()
        .zip(prices)
        .map(|(&(keys, bytes), price)| {
            (u128::from(keys) * u128::from(crate::fee::KEY_UNITS) + u128::from(bytes))
                * u128::from(price)
        })
        .sum();
    cost > budget
}

/// The abort of a transaction whose state access outgrew what its max fee leaves.
fn over_budget_abort() -> Abort {
    Abort::new(
        AbortCode::LimitExceeded,
        "the transaction's reads and writes at this block's prices cost more than its max fee \
         leaves: raise the max fee",
    )
}

/// What a block changed: its state changes sorted by key, and the contracts it deployed
/// (which the code map takes over once the block is committed).
pub(crate) struct BlockChanges {
    /// Sorted by key, each key once.
    pub(crate) state: Changes,
    /// Each account whose code the block set, with the contract it runs now.
    pub(crate) code: Vec<(Name, Executor)>,
}

/// What an ordered read through the journal found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seek {
    /// The first entry of the range walking the direction, as the running transaction sees
    /// it, if there is one.
    pub entry: Option<(Vec<u8>, Vec<u8>)>,
    /// Keys the pending block deleted that the read stepped over to find it, each a further
    /// seek (a contract pays for each: [`tally_host_api::limits::FUEL_PER_KEY_SEEK`]).
    pub skipped: u32,
}

/// The keys an ordered read depended on: its range from the end it started at to the key it
/// returned (the whole range if it found none). A speculative run that made it stands only if
/// no earlier transaction of the block wrote or deleted a key in it, since an inserted key
/// there would have been found first (a phantom), and a deleted one not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walked {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
}

impl Walked {
    /// What a read of `range` walking `dir` that found `found` walked.
    fn new(range: KeyRange<'_>, dir: Direction, found: Option<&[u8]>) -> Self {
        let owned = |b: Bound<&[u8]>| b.map(<[u8]>::to_vec);
        let (mut lo, mut hi) = (owned(range.lo), owned(range.hi));
        match (dir, found) {
            (_, None) => {}
            (Direction::Forward, Some(key)) => hi = Bound::Included(key.to_vec()),
            (Direction::Backward, Some(key)) => lo = Bound::Included(key.to_vec()),
        }
        Self { lo, hi }
    }

    /// The keys walked.
    pub(crate) fn range(&self) -> KeyRange<'_> {
        KeyRange::new(
            self.lo.as_ref().map(Vec::as_slice),
            self.hi.as_ref().map(Vec::as_slice),
        )
    }
}

/// The largest read buffer a journal keeps between blocks: an account's balance is tens of
/// bytes, a contract's code hundreds of KiB, which it reads seldom. Twice the largest value a
/// contract can store, since a buffer grows by doubling.
const KEEP_SCRATCH_BYTES: usize = 2 * MAX_VALUE_LEN as usize;

/// Values read from a store that copies them and longer than this are kept for the block
/// ([`Journal::large_reads`]): the log store's value cache keeps values up to 4 KiB only.
const KEEP_READ_BYTES: usize = 4096;

/// Buffers made for an overlay's keys and values have room for at least this many bytes, so
/// that a buffer a block's key used takes the next block's value, or any other: a native
/// balance's key is 9 bytes, a simplecoin balance's key 17, and either value 8.
const SPARE_MIN_BYTES: usize = 32;

/// Buffers larger than this are not kept for reuse: they held a large value, which is rare,
/// and would tie up memory between blocks.
const SPARE_MAX_BYTES: usize = 256;

/// The most buffers a journal keeps for reuse between blocks: two for each key a block of
/// 16,000 transfers writes (4.1 keys a transfer), 4 MiB at [`SPARE_MIN_BYTES`] and at most
/// 32 MiB.
const MAX_SPARE_BUFFERS: usize = 2 * 16_000 * 4;

/// Keys remembered by [`RecentReads`]: a transfer loads two balances and writes them back, a
/// trade loads seven keys and writes five.
const RECENT_READS: usize = 4;

/// The last [`RECENT_READS`] keys contracts loaded from the store, and whether each had a
/// value: an upsert of a key the transaction loaded before (a contract reads a balance, then
/// writes it) learns whether it existed without a second read of the store, which cost a log
/// store's write about 115 instructions (a cache lookup and a copy). Committed state does not
/// change within a block, so an answer holds until the block ends. Keys are compared whole.
#[derive(Default)]
struct RecentReads {
    keys: [Vec<u8>; RECENT_READS],
    present: [bool; RECENT_READS],
    valid: [bool; RECENT_READS],
    next: usize,
}

impl RecentReads {
    fn note(&mut self, key: &[u8], present: bool) {
        let i = self.next;
        self.keys[i].clear();
        self.keys[i].extend_from_slice(key);
        self.present[i] = present;
        self.valid[i] = true;
        self.next = (i + 1) % RECENT_READS;
    }

    fn find(&self, key: &[u8]) -> Option<bool> {
        (0..RECENT_READS)
            .find(|&i| self.valid[i] && *self.keys[i] == *key)
            .map(|i| self.present[i])
    }

    /// Forgets every key (the block ended: committed state may change), keeping the buffers.
    fn clear(&mut self) {
        self.valid = [false; RECENT_READS];
    }
}

/// A buffer holding `bytes`: one of `spare` if there is one.
fn take_spare(spare: &mut Vec<Vec<u8>>, bytes: &[u8]) -> Vec<u8> {
    match spare.pop() {
        Some(mut buffer) => {
            buffer.clear();
            buffer.extend_from_slice(bytes);
            buffer
        }
        None => {
            let mut buffer = Vec::with_capacity(bytes.len().max(SPARE_MIN_BYTES));
            buffer.extend_from_slice(bytes);
            buffer
        }
    }
}

/// Keeps `buffer` in `spare` for reuse, within [`MAX_SPARE_BUFFERS`] and [`SPARE_MAX_BYTES`].
fn give_spare(spare: &mut Vec<Vec<u8>>, buffer: Vec<u8>) {
    if spare.len() < MAX_SPARE_BUFFERS && buffer.capacity() <= SPARE_MAX_BYTES {
        spare.push(buffer);
    }
}

/// The pending block's state over a [`StateStore`].
pub struct Journal {
    /// Writes of the pending block, the running transaction's included, in the order their
    /// keys were first written.
    overlay: IndexMap<Vec<u8>, Slot, KeyedHasher>,
    /// Contracts deployed by the pending block, by account.
    code: KeyedMap<Name, Executor>,
    /// The last value read from a store that hands out copies ([`StateStore::get_in`]): a
    /// read lends it until the next, which the `&mut self` it borrows enforces, so no read
    /// allocates once it has grown to the values read.
    scratch: Vec<u8>,
    /// Values over [`KEEP_READ_BYTES`] read from the store, kept for the block, as all reads
    /// were before `scratch`: the log store caches no value that large, so a contract
    /// loading one again and again would read it from disk each time, a cost its per-byte
    /// charge was not measured with. Mostly empty: a read of a small value checks only that.
    large_reads: KeyedMap<Vec<u8>, Vec<u8>>,
    /// The last keys contracts loaded from the store, and whether each had a value.
    recent: RecentReads,
    /// The running transaction's undo log, newest last.
    undo: Vec<Undo>,
    /// The values [`Undo::Overwrite`] entries replaced, oldest first: kept in one buffer, so
    /// that updating a value the block wrote before allocates nothing.
    undo_bytes: Vec<u8>,
    /// The running transaction's events, in the order they were emitted.
    events: Vec<Event>,
    /// Writes and bytes written by the running transaction, against the limits.
    tx_writes: u32,
    tx_bytes: u64,
    /// What the running transaction read and created, for its fee (its writes are the two
    /// counts above).
    tx_reads: u64,
    tx_read_bytes: u64,
    tx_new_keys: u64,
    tx_new_bytes: u64,
    /// What the running transaction's reads, new keys and writes may cost, scaled by
    /// `PRICE_SCALE`, at `state_prices` (read, allocate, write): what its max fee leaves
    /// ([`Journal::set_fee_budget`]). Unlimited outside a transaction's run.
    fee_budget: u128,
    state_prices: [u64; 3],
    /// With [`Journal::recording`]: every key read from the store (not from the overlay), in
    /// order, repeats included.
    reads: Option<Vec<Vec<u8>>>,
    /// With [`Journal::recording`]: what every ordered read walked.
    walks: Vec<Walked>,
    /// The overlay's keys in order, built on the block's first ordered read.
    order: OverlayOrder,
    /// Buffers of keys and values the last blocks wrote, cleared, for the overlay to take
    /// instead of allocating: [`Journal::take_changes`] copies a block's changes into one
    /// buffer and hands these back, so a transaction writing keys allocates nothing once the
    /// journal has seen a block as large (at most [`MAX_SPARE_BUFFERS`]).
    spare: Vec<Vec<u8>>,
    /// The overlay's length when the running transaction started: entries before it were
    /// written by earlier transactions of the block.
    tx_start: usize,
    /// Whether the running transaction loaded or overwrote a key an earlier transaction of
    /// the block wrote: run speculatively, against the block's start, it would not stand.
    tx_conflicted: bool,
    /// Transactions run since [`Journal::take_conflicts`], and how many of them conflicted.
    txs_run: u32,
    txs_conflicted: u32,
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            overlay: IndexMap::default(),
            code: KeyedMap::default(),
            scratch: Vec::new(),
            large_reads: KeyedMap::default(),
            recent: RecentReads::default(),
            undo: Vec::new(),
            undo_bytes: Vec::new(),
            events: Vec::new(),
            tx_writes: 0,
            tx_bytes: 0,
            tx_reads: 0,
            tx_read_bytes: 0,
            tx_new_keys: 0,
            tx_new_bytes: 0,
            fee_budget: u128::MAX,
            state_prices: [0; 3],
            reads: None,
            walks: Vec::new(),
            order: OverlayOrder::default(),
            spare: Vec::new(),
            tx_start: 0,
            tx_conflicted: false,
            txs_run: 0,
            txs_conflicted: 0,
        }
    }
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
        Ok(self
            .read(store, key, false)?
            .expect("an uncounted read is never over budget"))
    }

    /// [`Journal::get`] for a contract's `load`: counted in the running transaction's reads,
    /// which its fee pays for. (The chain's own reads, such as the code an action runs, are
    /// not: whether one reaches the store differs between in-order and speculative runs.)
    /// `Ok(Err)` when the read makes the transaction's state access cost more than its max
    /// fee leaves ([`Journal::set_fee_budget`]).
    pub(crate) fn load<'a>(
        &'a mut self,
        store: &'a dyn StateStore,
        key: &[u8],
    ) -> StoreResult<Result<Option<&'a [u8]>, Abort>> {
        self.read(store, key, true)
    }

    fn read<'a>(
        &'a mut self,
        store: &'a dyn StateStore,
        key: &[u8],
        counted: bool,
    ) -> StoreResult<Result<Option<&'a [u8]>, Abort>> {
        let value = match self.overlay.get_full(key) {
            Some((index, _, slot)) => {
                self.tx_conflicted |= counted && index < self.tx_start;
                slot.as_deref()
            }
            None => {
                if let Some(reads) = &mut self.reads {
                    reads.push(key.to_vec());
                }
                if !self.large_reads.is_empty() && self.large_reads.contains_key(key) {
                    self.large_reads.get(key).map(Vec::as_slice)
                } else {
                    let value = store.get_in(key, &mut self.scratch)?;
                    // A contract's load, which its store may follow; the chain's own reads
                    // (a payer's balance, a code hash) are not followed by an upsert.
                    if counted {
                        self.recent.note(key, value.is_some());
                    }
                    match value {
                        Some(value) if value.len() > KEEP_READ_BYTES => Some(
                            self.large_reads
                                .entry(key.to_vec())
                                .or_insert(value.to_vec())
                                .as_slice(),
                        ),
                        value => value,
                    }
                }
            }
        };
        if counted {
            self.tx_reads += 1;
            self.tx_read_bytes += value.map_or(0, |v| v.len() as u64);
            let over = over_budget(
                self.fee_budget,
                self.state_prices,
                [
                    (self.tx_reads, self.tx_read_bytes),
                    (self.tx_new_keys, self.tx_new_bytes),
                    (u64::from(self.tx_writes), self.tx_bytes),
                ],
            );
            if over {
                return Ok(Err(over_budget_abort()));
            }
        }
        Ok(Ok(value))
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

    /// The first entry of `range` walking `dir` as the running transaction sees it: the
    /// nearer of the store's first key and the overlay's, a key the overlay deletes stepped
    /// over (and counted in [`Seek::skipped`]), a key both hold with the overlay's value.
    /// Keys only: the caller bounds `range` to a contract's namespace. It steps over at most
    /// `max_skips` deleted keys (what the contract's fuel pays for): at one more, it stops with
    /// no entry and that count, having recorded the range walked so far.
    pub fn seek(
        &mut self,
        store: &dyn StateStore,
        range: KeyRange<'_>,
        dir: Direction,
        max_skips: u32,
    ) -> StoreResult<Seek> {
        self.order.catch_up(&self.overlay);
        let mut skipped = 0u32;
        // The last key stepped over: the walk goes on past it.
        let mut past: Option<Vec<u8>> = None;
        let mut stored: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut seek_store = true;
        let found = loop {
            let rest = past.as_deref().map_or(range, |k| range.past(k, dir));
            if seek_store {
                stored = store.seek(rest, dir)?;
            }
            let pending = self.order.first(&self.overlay, rest, dir);
            let pending = pending.map(|i| self.overlay.get_index(i).expect("in the overlay"));
            let store_first = match (&stored, pending) {
                (None, None) => break None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((s, _)), Some((p, _))) => comes_before(s, p, dir),
            };
            if store_first {
                // Not in the overlay: the overlay's first key of the range comes after it.
                break stored.take();
            }
            let (key, slot) = pending.expect("the overlay's key comes first");
            if let Some(value) = slot {
                break Some((key.clone(), value.clone()));
            }
            // Deleted by the pending block: step over it, and over the store's copy of it.
            skipped += 1;
            seek_store = stored.as_ref().is_some_and(|(s, _)| s == key);
            past = Some(key.clone());
            if skipped > max_skips {
                // The fuel left pays for no more: the charge for `skipped` fails the action.
                // What it read so far decided that, so a speculative run records it.
                break None;
            }
        };
        if self.reads.is_some() {
            let last = match &found {
                Some((key, _)) => Some(key.as_slice()),
                None if skipped > max_skips => past.as_deref(),
                None => None,
            };
            self.walks.push(Walked::new(range, dir, last));
        }
        Ok(Seek {
            entry: found,
            skipped,
        })
    }

    /// Whether the pending block wrote or deleted a key of `range` (a transaction's
    /// included): what decides whether an ordered read made speculatively still stands.
    pub(crate) fn wrote_in(&mut self, range: KeyRange<'_>) -> bool {
        self.order.catch_up(&self.overlay);
        self.order
            .first(&self.overlay, range, Direction::Forward)
            .is_some()
    }

    /// Sets (`Some`) or deletes (`None`) `key` in the running transaction, within the
    /// transaction's write limits.
    pub fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Abort> {
        count_write(&mut self.tx_writes, &mut self.tx_bytes, key, value)?;
        let hash = self.overlay.hasher().hash_one(key);
        let value = value.map(|v| take_spare(&mut self.spare, v));
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
                entry.insert_hashed_nocheck(hash, take_spare(&mut self.spare, key), value);
                Undo::Write(index, None)
            }
        };
        self.undo.push(undo);
        // Written, with its undo: the abort fails the action, which drops it.
        match self.over_budget() {
            true => Err(over_budget_abort()),
            false => Ok(()),
        }
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
                // Whether the key existed is a read of it.
                self.tx_conflicted |= entry.index() < self.tx_start;
                let index = entry.index();
                match entry.get_mut() {
                    Some(slot) if slot.len() == value.len() => {
                        let start = self.undo_bytes.len();
                        self.undo_bytes.extend_from_slice(slot);
                        slot.copy_from_slice(value);
                        (true, Undo::Overwrite(index, start))
                    }
                    slot => {
                        let previous = slot.replace(take_spare(&mut self.spare, value));
                        if previous.is_none() {
                            // Deleted earlier in the block: writing it creates it again.
                            self.tx_new_keys += 1;
                            self.tx_new_bytes += (key.len() + value.len()) as u64;
                        }
                        (previous.is_some(), Undo::Write(index, Some(previous)))
                    }
                }
            }
            RawEntryMut::Vacant(entry) => {
                if let Some(reads) = &mut self.reads {
                    reads.push(key.to_vec());
                }
                let existed = match self.recent.find(key) {
                    Some(present) => present,
                    None => store.get_in(key, &mut self.scratch)?.is_some(),
                };
                if let Err(abort) =
                    count_write(&mut self.tx_writes, &mut self.tx_bytes, key, Some(value))
                {
                    return Ok(Err(abort));
                }
                if !existed {
                    self.tx_new_keys += 1;
                    self.tx_new_bytes += (key.len() + value.len()) as u64;
                }
                let index = entry.index();
                let (key, value) = (
                    take_spare(&mut self.spare, key),
                    take_spare(&mut self.spare, value),
                );
                entry.insert_hashed_nocheck(hash, key, Some(value));
                (existed, Undo::Write(index, None))
            }
        };
        self.undo.push(undo);
        if self.over_budget() {
            return Ok(Err(over_budget_abort()));
        }
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
                Undo::Write(index, Some(slot)) => {
                    if let Some(value) = std::mem::replace(&mut self.overlay[index], slot) {
                        give_spare(&mut self.spare, value);
                    }
                }
                Undo::Overwrite(index, start) => {
                    let slot = self.overlay[index]
                        .as_mut()
                        .expect("an overwritten value is there until its undo");
                    slot.copy_from_slice(&self.undo_bytes[start..]);
                    self.undo_bytes.truncate(start);
                }
                Undo::Write(index, None) => {
                    // Undone newest first, so every entry added after this one is gone.
                    debug_assert_eq!(index + 1, self.overlay.len());
                    if let Some((key, slot)) = self.overlay.pop() {
                        give_spare(&mut self.spare, key);
                        if let Some(value) = slot {
                            give_spare(&mut self.spare, value);
                        }
                    }
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
        self.order.truncate(self.overlay.len());
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

    /// [`Journal::write_block`] of a value, without allocating when the block wrote the key
    /// already with a value of the same length (a payer's native balance, written by every
    /// transaction it pays for): the key is hashed once and the bytes copied in place.
    pub(crate) fn set_block_value(&mut self, key: &[u8], value: &[u8]) {
        debug_assert!(self.undo.is_empty(), "a transaction is running");
        let hash = self.overlay.hasher().hash_one(key);
        match self
            .overlay
            .raw_entry_mut_v1()
            .from_key_hashed_nocheck(hash, key)
        {
            RawEntryMut::Occupied(mut entry) => match entry.get_mut() {
                Some(slot) if slot.len() == value.len() => slot.copy_from_slice(value),
                slot => *slot = Some(take_spare(&mut self.spare, value)),
            },
            RawEntryMut::Vacant(entry) => {
                let (key, value) = (
                    take_spare(&mut self.spare, key),
                    take_spare(&mut self.spare, value),
                );
                entry.insert_hashed_nocheck(hash, key, Some(value));
            }
        }
    }

    /// Starts a transaction: its changes can be discarded until [`Journal::commit_tx`].
    pub fn checkpoint(&mut self) {
        debug_assert!(self.undo.is_empty(), "a transaction is already running");
        self.undo.clear();
        self.undo_bytes.clear();
        self.events.clear();
        self.tx_start = self.overlay.len();
        self.tx_conflicted = false;
        self.tx_writes = 0;
        self.tx_bytes = 0;
        self.tx_reads = 0;
        self.tx_read_bytes = 0;
        self.tx_new_keys = 0;
        self.tx_new_bytes = 0;
        self.fee_budget = u128::MAX;
    }

    /// Bounds what the running transaction's state access may cost: `budget` coins at
    /// `prices` ([`Journal::over_budget`]). Fuel has its own cap; this one keeps a transaction
    /// from reading (or writing) far more than its max fee pays for, as a failed transaction
    /// would otherwise fill the read dimension for the price of its compute.
    pub(crate) fn set_fee_budget(&mut self, prices: &crate::fee::Prices, budget: u64) {
        use crate::fee::{Dimension, PRICE_SCALE};
        self.state_prices = [
            prices[Dimension::Read as usize],
            prices[Dimension::Allocate as usize],
            prices[Dimension::Write as usize],
        ];
        self.fee_budget = u128::from(budget) * u128::from(PRICE_SCALE);
    }

    /// Whether the running transaction's reads, new keys and writes so far cost more than its
    /// fee budget allows.
    pub(crate) fn over_budget(&self) -> bool {
        over_budget(
            self.fee_budget,
            self.state_prices,
            [
                (self.tx_reads, self.tx_read_bytes),
                (self.tx_new_keys, self.tx_new_bytes),
                (u64::from(self.tx_writes), self.tx_bytes),
            ],
        )
    }

    /// Counts `keys` read by the running transaction's contracts, returning `bytes`: what
    /// its fee's read dimension pays for.
    /// `Err` when that makes its state access cost more than its max fee leaves.
    pub(crate) fn count_read(&mut self, keys: u64, bytes: u64) -> Result<(), Abort> {
        self.tx_reads += keys;
        self.tx_read_bytes += bytes;
        match self.over_budget() {
            true => Err(over_budget_abort()),
            false => Ok(()),
        }
    }

    /// Counts a key of `bytes` (key and value) the running transaction created outside
    /// [`Journal::upsert`] (which tells new keys by itself): an account, a contract's code.
    pub(crate) fn count_new_key(&mut self, bytes: u64) {
        self.tx_new_keys += 1;
        self.tx_new_bytes += bytes;
    }

    /// What the running transaction has read, created and written so far, whether its
    /// changes stay or not: the state part of its fee.
    pub(crate) fn counts(&self) -> crate::fee::StateCounts {
        crate::fee::StateCounts {
            reads: self.tx_reads,
            read_bytes: self.tx_read_bytes,
            new_keys: self.tx_new_keys,
            new_bytes: self.tx_new_bytes,
            writes: u64::from(self.tx_writes),
            write_bytes: self.tx_bytes,
        }
    }

    /// Keeps the running transaction's changes in the pending block (its events are taken
    /// with `Journal::take_events`).
    pub fn commit_tx(&mut self) {
        self.undo.clear();
        self.undo_bytes.clear();
        self.count_conflict();
    }

    /// Drops the running transaction's changes and events, leaving the journal as at the
    /// checkpoint.
    pub fn discard_tx(&mut self) {
        self.revert_to(0);
        self.events.clear();
        self.count_conflict();
    }

    fn count_conflict(&mut self) {
        self.txs_run += 1;
        self.txs_conflicted += u32::from(self.tx_conflicted);
    }

    /// How many transactions ran since the last call, and how many of those loaded (or
    /// overwrote) a key an earlier transaction of their block wrote: run against the block's
    /// start, as speculation runs them, those would have had to run again. A block executed in
    /// order thereby says what speculating it would have gained, for the price of a comparison
    /// per load. It leaves out what speculation also checks and contracts seldom do (code
    /// reads, walks, fuel), so it can only overestimate how many runs would stand.
    pub(crate) fn take_conflicts(&mut self) -> (u32, u32) {
        let counts = (self.txs_run, self.txs_conflicted);
        (self.txs_run, self.txs_conflicted) = (0, 0);
        counts
    }

    /// Forgets the block's large reads, and lets go of a read buffer a large value grew (one
    /// value may take a transaction's whole [`MAX_TX_WRITE_BYTES`]): a journal lives as long
    /// as its chain or worker.
    fn drop_large_scratch(&mut self) {
        if self.scratch.capacity() > KEEP_SCRATCH_BYTES {
            self.scratch = Vec::new();
        }
        self.large_reads.clear();
        self.recent.clear();
    }

    /// The pending block's changes, leaving an empty journal for the next block.
    pub(crate) fn take_changes(&mut self) -> BlockChanges {
        debug_assert!(self.undo.is_empty(), "a transaction is still running");
        let mut bytes = 0;
        let keys: Vec<&[u8]> = (self.overlay.iter())
            .map(|(key, slot)| {
                bytes += key.len() + slot.as_ref().map_or(0, Vec::len);
                key.as_slice()
            })
            .collect();
        let order = key_order(&keys, |key| key);
        let mut state = Changes::with_capacity(order.len(), bytes);
        for &i in &order {
            let (key, slot) = self
                .overlay
                .get_index(i as usize)
                .expect("an overlay index");
            state.push(key, slot.as_deref());
        }
        for (key, slot) in self.overlay.drain(..) {
            give_spare(&mut self.spare, key);
            if let Some(value) = slot {
                give_spare(&mut self.spare, value);
            }
        }
        self.drop_large_scratch();
        self.order.clear();
        BlockChanges {
            state,
            code: self.code.drain().collect(),
        }
    }

    /// The changes of a speculative run, unsorted, the keys it read and the ranges its
    /// ordered reads walked; leaves the journal empty for the next run.
    pub(crate) fn take_run(&mut self) -> (Vec<Change>, Vec<Vec<u8>>, Vec<Walked>) {
        debug_assert!(self.undo.is_empty(), "a transaction is still running");
        self.drop_large_scratch();
        self.code.clear();
        self.order.clear();
        let reads = self.reads.as_mut().map(std::mem::take).unwrap_or_default();
        let walks = std::mem::take(&mut self.walks);
        (self.overlay.drain(..).collect(), reads, walks)
    }

    /// Forgets the pending block's changes (a block that was executed but not committed).
    pub fn clear(&mut self) {
        self.overlay.clear();
        self.code.clear();
        self.drop_large_scratch();
        self.undo.clear();
        self.undo_bytes.clear();
        self.events.clear();
        self.order.clear();
        self.walks.clear();
        if let Some(reads) = &mut self.reads {
            reads.clear();
        }
        // An aborted block's count says nothing of the next block's.
        (self.txs_run, self.txs_conflicted) = (0, 0);
    }

    /// Whether the pending block has written nothing yet.
    pub fn is_empty(&self) -> bool {
        self.overlay.is_empty() && self.code.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockHeader;
    use crate::store::log::{LogOptions, LogStore};
    use crate::store::memory::MemoryStore;
    use crate::store::{BlockRecord, Commit, Durability};

    /// A log store (a store that copies values out) holding `changes` at genesis, in a
    /// directory that lives as long as the returned guard.
    fn log_store(changes: Vec<Change>) -> (tempfile::TempDir, LogStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path(), LogOptions::default()).unwrap();
        let block = BlockRecord {
            header: BlockHeader::default(),
            body: Vec::new(),
            changes: changes.into(),
        };
        let commit = Commit {
            durability: Durability::None,
            retain_from: 0,
        };
        store.commit(block, commit).unwrap();
        (dir, store)
    }

    /// Point reads that reached the store.
    fn gets(store: &LogStore) -> u64 {
        store.stats().gets
    }

    /// A value too large for the log store's cache is read from the store once a block: read
    /// again, it comes from the journal (the same bytes), and the next block reads it anew.
    /// Small values go to the store each time, whose cache serves them.
    #[test]
    fn a_large_value_is_read_from_a_copying_store_once_a_block() {
        let large = vec![7u8; KEEP_READ_BYTES + 1];
        let (_dir, store) = log_store(vec![
            (b"big".to_vec(), Some(large.clone())),
            (b"small".to_vec(), Some(b"1".to_vec())),
        ]);
        let before = gets(&store);
        let mut j = Journal::default();
        for _ in 0..3 {
            assert_eq!(j.get(&store, b"big").unwrap(), Some(large.as_slice()));
            assert_eq!(j.get(&store, b"small").unwrap(), Some(&b"1"[..]));
            assert_eq!(j.get(&store, b"none").unwrap(), None);
        }
        assert_eq!(gets(&store) - before, 1 + 3 + 3);
        j.take_changes();
        assert_eq!(j.get(&store, b"big").unwrap(), Some(large.as_slice()));
        assert_eq!(gets(&store) - before, 8);
    }

    /// A write of a key the journal just read from the store knows whether the key existed
    /// without reading it again; until the block ends, whatever came between.
    #[test]
    fn an_upsert_of_a_key_just_read_asks_the_store_nothing() {
        let (_dir, store) = log_store((0..8u8).map(|i| (vec![b'k', i], Some(vec![i]))).collect());
        let before = gets(&store);
        let mut j = Journal::default();
        let load =
            |j: &mut Journal, key: &[u8]| j.load(&store, key).unwrap().unwrap().map(<[u8]>::to_vec);
        j.checkpoint();
        assert_eq!(load(&mut j, b"k\x00"), Some(vec![0]));
        assert_eq!(load(&mut j, b"absent"), None);
        assert!(
            j.upsert(&store, b"k\x00", b"x").unwrap().unwrap(),
            "k0 existed"
        );
        assert!(
            !j.upsert(&store, b"absent", b"x").unwrap().unwrap(),
            "absent did not"
        );
        assert_eq!(gets(&store) - before, 2, "the upserts read nothing");
        // More keys read than it remembers: the oldest goes to the store again.
        for i in 1..8u8 {
            load(&mut j, &[b'k', i]);
        }
        let read = gets(&store);
        assert!(j.upsert(&store, b"k\x07", b"x").unwrap().unwrap());
        assert_eq!(gets(&store), read);
        assert!(j.upsert(&store, b"k\x01", b"x").unwrap().unwrap());
        assert_eq!(gets(&store), read + 1);
        // A key never read is read, and the block's end forgets every answer.
        assert!(!j.upsert(&store, b"new", b"x").unwrap().unwrap());
        assert_eq!(gets(&store), read + 2);
        j.commit_tx();
        j.take_changes();
        j.checkpoint();
        assert!(j.upsert(&store, b"k\x06", b"x").unwrap().unwrap());
        assert_eq!(gets(&store), read + 3);
    }

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
            j.take_changes().state.to_vec(),
            vec![(b"a".to_vec(), Some(b"1".to_vec()))]
        );
    }

    /// Updates in place (a value replaced by one of its length) undo like any write: a
    /// discarded transaction, and a call reverted to its mark inside a transaction that goes
    /// on, leave the values as they were, whatever the mix of in-place and other writes.
    #[test]
    fn updates_in_place_undo_exactly() {
        let store = MemoryStore::new(1);
        let mut j = Journal::default();
        let value = |j: &mut Journal, k: &[u8]| j.get(&store, k).unwrap().map(<[u8]>::to_vec);
        j.checkpoint();
        j.upsert(&store, b"a", b"11").unwrap().unwrap();
        j.upsert(&store, b"b", b"22").unwrap().unwrap();
        j.commit_tx();
        j.checkpoint();
        assert!(j.upsert(&store, b"a", b"12").unwrap().unwrap(), "a existed");
        let mark = j.mark();
        j.upsert(&store, b"a", b"13").unwrap().unwrap();
        j.upsert(&store, b"b", b"222").unwrap().unwrap();
        j.upsert(&store, b"b", b"223").unwrap().unwrap();
        j.upsert(&store, b"a", b"14").unwrap().unwrap();
        assert_eq!(value(&mut j, b"a"), Some(b"14".to_vec()));
        j.revert_to(mark);
        assert_eq!(value(&mut j, b"a"), Some(b"12".to_vec()));
        assert_eq!(value(&mut j, b"b"), Some(b"22".to_vec()));
        j.upsert(&store, b"b", b"23").unwrap().unwrap();
        j.discard_tx();
        assert_eq!(value(&mut j, b"a"), Some(b"11".to_vec()));
        assert_eq!(value(&mut j, b"b"), Some(b"22".to_vec()));
        j.checkpoint();
        j.upsert(&store, b"a", b"15").unwrap().unwrap();
        j.commit_tx();
        assert_eq!(
            j.take_changes().state.to_vec(),
            vec![
                (b"a".to_vec(), Some(b"15".to_vec())),
                (b"b".to_vec(), Some(b"22".to_vec()))
            ]
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
                ..Default::default()
            },
            body: Vec::new(),
            changes: vec![(b"a".to_vec(), Some(b"1".to_vec()))].into(),
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
            j.take_changes().state.to_vec(),
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
        let changes = j.take_changes().state;
        let got: Vec<Vec<u8>> = changes.iter().map(|(k, _)| k.to_vec()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(got, keys);
    }

    /// A store holding `changes`.
    fn store_with(changes: Vec<Change>) -> MemoryStore {
        let mut store = MemoryStore::new(1);
        let record = crate::store::BlockRecord {
            header: crate::block::BlockHeader {
                height: 0,
                previous: Default::default(),
                timestamp_ms: 0,
                transactions_root: [0; 32],
                state_checksum: [0; 32],
                ..Default::default()
            },
            body: Vec::new(),
            changes: changes.into(),
        };
        store.commit(record, Default::default()).unwrap();
        store
    }

    fn small_key(next: &mut impl FnMut() -> u64) -> Vec<u8> {
        (0..next() % 4).map(|_| (next() % 4) as u8).collect()
    }

    fn bound(next: &mut impl FnMut() -> u64, key: &[u8]) -> Bound<Vec<u8>> {
        match next() % 3 {
            0 => Bound::Unbounded,
            1 => Bound::Included(key.to_vec()),
            _ => Bound::Excluded(key.to_vec()),
        }
    }

    /// Random writes and deletes over committed state, in transactions committed, discarded
    /// and undone to a call's mark, with the block's overlay growing past several runs: every
    /// seek, both ways, finds what a sorted map of the transaction's view holds, and counts a
    /// skip per deleted key it stepped over.
    #[test]
    fn seeks_through_the_journal_see_the_transaction_s_own_writes_and_deletes() {
        for seed in 1..40 {
            let mut next = crate::test_rng::xorshift(seed);
            let committed: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = (0..next() % 40)
                .map(|_| (small_key(&mut next), vec![1]))
                .collect();
            let store = store_with(
                committed
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect(),
            );
            let mut model = committed.clone();
            let mut j = Journal::default();
            for tx in 0..30 {
                j.checkpoint();
                let at_start = model.clone();
                let mut at_mark = None;
                for op in 0..next() % 60 {
                    if op == 10 {
                        at_mark = Some((j.mark(), model.clone()));
                    }
                    let key = small_key(&mut next);
                    if next().is_multiple_of(3) {
                        j.set(&key, None).unwrap();
                        model.remove(&key);
                    } else {
                        let value = vec![tx as u8, op as u8];
                        j.set(&key, Some(&value)).unwrap();
                        model.insert(key, value);
                    }
                    if next().is_multiple_of(4) {
                        check_seek(&mut next, &mut j, &store, &model);
                    }
                }
                if let Some((mark, then)) = at_mark.filter(|_| next().is_multiple_of(2)) {
                    j.revert_to(mark);
                    model = then;
                    check_seek(&mut next, &mut j, &store, &model);
                }
                if next().is_multiple_of(3) {
                    j.discard_tx();
                    model = at_start;
                } else {
                    j.commit_tx();
                }
                check_seek(&mut next, &mut j, &store, &model);
            }
        }
    }

    fn check_seek(
        next: &mut impl FnMut() -> u64,
        j: &mut Journal,
        store: &MemoryStore,
        model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    ) {
        let (a, b) = (small_key(next), small_key(next));
        let (lo, hi) = (bound(next, &a), bound(next, &b));
        let range = KeyRange::new(
            lo.as_ref().map(Vec::as_slice),
            hi.as_ref().map(Vec::as_slice),
        );
        for dir in [Direction::Forward, Direction::Backward] {
            let mut all = model.iter().filter(|(k, _)| range.contains(k));
            let want = match dir {
                Direction::Forward => all.next(),
                Direction::Backward => all.next_back(),
            };
            let got = j.seek(store, range, dir, u32::MAX).unwrap();
            assert_eq!(
                got.entry,
                want.map(|(k, v)| (k.clone(), v.clone())),
                "{range:?} {dir:?}"
            );
        }
    }

    #[test]
    fn a_seek_steps_over_keys_the_block_deleted_and_counts_them() {
        let store = store_with(
            [b"a", b"b", b"c", b"d"]
                .iter()
                .map(|k| (k.to_vec(), Some(b"1".to_vec())))
                .collect(),
        );
        let mut j = Journal::default();
        j.checkpoint();
        j.set(b"a", None).unwrap();
        j.set(b"b", None).unwrap();
        // Deleted, but never in the store: stepped over all the same.
        j.set(b"bb", None).unwrap();
        let got = j
            .seek(&store, KeyRange::ALL, Direction::Forward, u32::MAX)
            .unwrap();
        assert_eq!(got.entry, Some((b"c".to_vec(), b"1".to_vec())));
        assert_eq!(got.skipped, 3);
        j.set(b"d", None).unwrap();
        j.set(b"c", None).unwrap();
        let got = j
            .seek(&store, KeyRange::ALL, Direction::Backward, u32::MAX)
            .unwrap();
        assert_eq!((got.entry, got.skipped), (None, 5));
    }

    /// A seek stops one skip past what the fuel pays for, before the work it cannot pay for,
    /// with no entry; a recording journal notes the range walked up to where it stopped.
    #[test]
    fn issue_23_a_seek_steps_over_no_more_deleted_keys_than_it_may() {
        let store = store_with(
            [b"a", b"b", b"c", b"d", b"e"]
                .iter()
                .map(|k| (k.to_vec(), Some(b"1".to_vec())))
                .collect(),
        );
        let mut j = Journal::recording();
        j.checkpoint();
        for key in [b"a", b"b", b"c", b"d"] {
            j.set(key, None).unwrap();
        }
        let got = j
            .seek(&store, KeyRange::ALL, Direction::Forward, 2)
            .unwrap();
        assert_eq!((got.entry, got.skipped), (None, 3));
        let got = j
            .seek(&store, KeyRange::ALL, Direction::Forward, 4)
            .unwrap();
        assert_eq!(got.entry, Some((b"e".to_vec(), b"1".to_vec())));
        j.commit_tx();
        let (_, _, walks) = j.take_run();
        let walked: Vec<KeyRange<'_>> = walks.iter().map(Walked::range).collect();
        assert_eq!(
            walked[0],
            KeyRange::new(Bound::Unbounded, Bound::Included(b"c"))
        );
    }

    /// A speculative journal records the range each seek walked, from where it started to the
    /// key it found; a block journal says whether it wrote in such a range, deleted keys
    /// included.
    #[test]
    fn a_recording_journal_notes_the_range_a_seek_walked() {
        let store = store_with(vec![
            (b"b".to_vec(), Some(b"1".to_vec())),
            (b"d".to_vec(), Some(b"1".to_vec())),
        ]);
        let mut j = Journal::recording();
        j.checkpoint();
        let from_a = KeyRange::new(Bound::Included(b"a"), Bound::Unbounded);
        j.seek(&store, from_a, Direction::Forward, u32::MAX)
            .unwrap();
        j.seek(&store, KeyRange::ALL, Direction::Backward, u32::MAX)
            .unwrap();
        j.commit_tx();
        let (_, _, walks) = j.take_run();
        let walked: Vec<KeyRange<'_>> = walks.iter().map(Walked::range).collect();
        assert_eq!(
            walked,
            vec![
                KeyRange::new(Bound::Included(b"a"), Bound::Included(b"b")),
                KeyRange::new(Bound::Included(b"d"), Bound::Unbounded),
            ]
        );
        let mut block = Journal::default();
        block.write_block(b"c".to_vec(), None);
        assert!(!block.wrote_in(walked[0]));
        assert!(!block.wrote_in(walked[1]));
        block.write_block(b"e".to_vec(), None);
        assert!(block.wrote_in(walked[1]), "a deletion is a write");
        block.write_block(b"ab".to_vec(), Some(b"new".to_vec()));
        assert!(block.wrote_in(walked[0]), "a phantom");
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

    /// The journal against a model of the state, over blocks whose writes reuse the buffers
    /// of the blocks before: sets, deletions, upserts of values of changing lengths, block
    /// values, calls rolled back to a mark, discarded transactions. Every read, every
    /// upsert's answer and every block's changes are the model's, and the kept buffers stay
    /// within their bounds. (A buffer that kept bytes of its last use would show here.)
    #[test]
    fn reads_and_changes_match_a_model_while_buffers_are_reused() {
        type State = std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>;
        for seed in 1..20u64 {
            let mut next = crate::test_rng::xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut below = move |n: u64| next() % n;
            let mut store = MemoryStore::new(4);
            let mut j = Journal::default();
            for height in 1..=20u64 {
                // What a read sees, and what the block changed so far.
                let (mut block, mut changed) = (State::new(), State::new());
                let read = |j: &mut Journal, store: &MemoryStore, seen: &State| {
                    for k in 0..12u8 {
                        let key = [b'k', k];
                        let want = match seen.get(&key[..]) {
                            Some(slot) => slot.clone(),
                            None => store.get(&key).unwrap().map(|v| v.into_owned()),
                        };
                        assert_eq!(j.get(store, &key).unwrap().map(<[u8]>::to_vec), want);
                    }
                };
                for _ in 0..below(20) {
                    j.checkpoint();
                    let (mut tx, mut tx_changed) = (block.clone(), changed.clone());
                    let mut marks = Vec::new();
                    for _ in 0..below(30) {
                        let key = vec![b'k', below(12) as u8];
                        let len = [0, 1, 8, 8, 8, 17, 40, 300][below(8) as usize];
                        let value: Vec<u8> = (0..len).map(|_| below(256) as u8).collect();
                        let slot = match below(7) {
                            0 => {
                                j.set(&key, None).unwrap();
                                None
                            }
                            1 | 2 => {
                                j.set(&key, Some(&value)).unwrap();
                                Some(value)
                            }
                            3 | 4 => {
                                let existed = j.upsert(&store, &key, &value).unwrap().unwrap();
                                let before = match tx.get(&key) {
                                    Some(slot) => slot.is_some(),
                                    None => store.get(&key).unwrap().is_some(),
                                };
                                assert_eq!(existed, before);
                                Some(value)
                            }
                            5 => {
                                marks.push((j.mark(), tx.clone(), tx_changed.clone()));
                                continue;
                            }
                            _ => {
                                if let Some((mark, t, c)) = marks.pop() {
                                    j.revert_to(mark);
                                    (tx, tx_changed) = (t, c);
                                }
                                continue;
                            }
                        };
                        tx.insert(key.clone(), slot.clone());
                        tx_changed.insert(key, slot);
                        read(&mut j, &store, &tx);
                    }
                    if below(3) == 0 {
                        j.discard_tx();
                    } else {
                        j.commit_tx();
                        (block, changed) = (tx, tx_changed);
                    }
                    read(&mut j, &store, &block);
                }
                for _ in 0..below(4) {
                    let key = vec![b'k', below(12) as u8];
                    let value = vec![height as u8; [1, 8, 300][below(3) as usize]];
                    j.set_block_value(&key, &value);
                    block.insert(key.clone(), Some(value.clone()));
                    changed.insert(key, Some(value));
                }
                let changes = j.take_changes().state;
                assert_eq!(changes.to_vec(), changed.into_iter().collect::<Vec<_>>());
                assert!(j.spare.len() <= MAX_SPARE_BUFFERS);
                assert!(j.spare.iter().all(|b| b.capacity() <= SPARE_MAX_BYTES));
                let header = BlockHeader {
                    height,
                    ..Default::default()
                };
                let record = BlockRecord {
                    header,
                    body: Vec::new(),
                    changes,
                };
                store.commit(record, Commit::default()).unwrap();
            }
        }
    }
}
