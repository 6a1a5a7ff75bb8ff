//! What the runtime counts about itself: where prepared modules came from, evictions and
//! instantiations.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where [`crate::Runtime::prepare`] found modules, counted since the runtime was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Found ready in memory.
    pub memory_hits: u64,
    /// Deserialized from the disk cache.
    pub disk_hits: u64,
    /// Disk entries that were present but stale, corrupt or not authenticated by this node's
    /// key (then recompiled and rewritten).
    pub disk_rejected: u64,
    /// Compiled from WebAssembly.
    pub compiles: u64,
    /// Disk entries that could not be written (the module still works from memory).
    pub disk_write_errors: u64,
    /// Prepared contracts dropped from memory to stay within the configured bytes.
    pub evictions: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub memory_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub disk_rejected: AtomicU64,
    pub compiles: AtomicU64,
    pub disk_write_errors: AtomicU64,
    pub evictions: AtomicU64,
    pub instantiations: AtomicU64,
}

/// Adds one to `counter`.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn cache_stats(&self) -> CacheStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheStats {
            memory_hits: get(&self.memory_hits),
            disk_hits: get(&self.disk_hits),
            disk_rejected: get(&self.disk_rejected),
            compiles: get(&self.compiles),
            disk_write_errors: get(&self.disk_write_errors),
            evictions: get(&self.evictions),
        }
    }

    pub(crate) fn instantiations(&self) -> u64 {
        self.instantiations.load(Ordering::Relaxed)
    }
}
