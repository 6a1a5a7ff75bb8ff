//! How to build a [`Runtime`](crate::Runtime).

use std::path::PathBuf;

use tally_host_api::limits::FUEL_PER_ACTION;

use crate::DEFAULT_CONTRACT_CACHE_BYTES;

/// How to build a [`Runtime`](crate::Runtime).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory of the disk tier of the module cache; `None` keeps compiled code in memory
    /// only.
    pub cache_dir: Option<PathBuf>,
    /// The key file that authenticates disk-cache entries, used only with a `cache_dir`.
    /// `None` uses [`crate::cache_key::default_key_path`] (`$TALLY_CACHE_KEY`, else the user's
    /// configuration directory). It is created, mode 0600, if missing.
    pub cache_key: Option<PathBuf>,
    /// Fuel each action starts with.
    pub fuel_per_action: u64,
    /// Bytes of prepared contracts kept in memory; the least recently used are dropped (and
    /// reloaded from the disk cache when needed again).
    pub contract_cache_bytes: usize,
    /// Whether a failed action's receipt says where in the contract it stopped
    /// ([`crate::Receipt::trace`]): for authors (`tally push --trace`, the test harness). It
    /// changes no outcome and no fuel; off, a trap captures no backtrace.
    pub trace: bool,
    /// How many threads may run actions through this runtime at once: the engine's instance
    /// pool is sized for it ([`crate::engine::pool_instances`], capped at
    /// [`crate::engine::MAX_CONCURRENCY`]). More threads than this meet
    /// [`crate::RuntimeError::Exhausted`] when they all hold instances at once; one thread never
    /// does. The default, [`default_concurrency`], is the larger of rayon's thread count
    /// where the runtime is built and the machine's cores.
    pub concurrency: usize,
}

/// Threads a runtime serves by default: the larger of the current rayon pool's thread count
/// (a runtime built inside `ThreadPool::install`, or after `build_global`, serves that pool)
/// and the machine's available parallelism.
pub fn default_concurrency() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    rayon::current_num_threads().max(cores)
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            cache_key: None,
            fuel_per_action: FUEL_PER_ACTION,
            contract_cache_bytes: DEFAULT_CONTRACT_CACHE_BYTES,
            trace: false,
            concurrency: default_concurrency(),
        }
    }
}
