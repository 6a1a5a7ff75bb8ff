//! The warm pool: instances kept between actions, over all contracts, so most actions reuse
//! one instead of instantiating.

use std::sync::Mutex;

use tally_host_api::limits::MAX_CONTRACTS_PER_TX;

use crate::CodeHash;
use crate::instance::Slot;

/// Warm instances kept across actions, over all contracts; the least recently used one is
/// dropped beyond this. Each holds a slot of the engine's instance pool, which has room for
/// them besides those of running actions ([`crate::engine::pool_instances`]). Twice
/// [`MAX_CONTRACTS_PER_TX`]: a transaction, run in order, never evicts a contract it entered,
/// so each contract costs it at most one fresh instance, which the chain charges
/// (`Contract::fresh_instance_fuel`); calls rotating over more contracts than the pool held
/// missed it on every call (8 slots: 1,400 calls over 9 contracts, each a fresh instance).
/// Resident memory stays bounded (`instance::WARM_RESIDENT_BYTES` each).
pub(crate) const WARM_INSTANCES: usize = 2 * MAX_CONTRACTS_PER_TX as usize;

/// Warm slots, most recently used last. Each slot is boxed so that taking one out of the
/// pool and putting it back moves a pointer, not the slot (the boxing is part of what took a
/// warm empty action from 238 to 111 ns).
#[derive(Default)]
pub(crate) struct WarmPool {
    #[allow(clippy::vec_box)]
    slots: Mutex<Vec<Box<Slot>>>,
}

impl WarmPool {
    #[allow(clippy::vec_box)]
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Box<Slot>>> {
        // Slots are pushed and popped whole, so a poisoned lock still holds consistent data.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A warm instance of the contract, most recently used first.
    pub(crate) fn take(&self, code_hash: &CodeHash) -> Option<Box<Slot>> {
        let mut slots = self.lock();
        let at = slots
            .iter()
            .rposition(|slot| slot.code_hash == *code_hash)?;
        Some(slots.remove(at))
    }

    /// Keeps `slot` warm, dropping the least recently used one beyond [`WARM_INSTANCES`].
    pub(crate) fn put(&self, slot: Box<Slot>) {
        let mut slots = self.lock();
        if slots.len() >= WARM_INSTANCES {
            slots.remove(0);
        }
        slots.push(slot);
    }

    /// How many instances are warm.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Drops every warm instance of a contract (it left the contract cache).
    pub(crate) fn forget(&self, code_hash: &CodeHash) {
        self.lock().retain(|slot| slot.code_hash != *code_hash);
    }

    /// Drops every warm instance, returning their slots to the engine's pool; `false` if there
    /// was none. Dropping happens after the lock is released: freeing a pooled instance resets
    /// its memory.
    pub(crate) fn clear(&self) -> bool {
        let slots = std::mem::take(&mut *self.lock());
        !slots.is_empty()
    }
}
