//! The deterministic wasmtime engine and its fingerprint.

use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};
use tally_host_api::limits::{MAX_MEMORY_PAGES, MAX_TABLE_ELEMENTS, MAX_WASM_STACK, PAGE_SIZE};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Bump when anything Tally adds to a compiled module's meaning changes (the linker's
/// imports, validation rules), so old disk-cache entries become misses.
const TALLY_CACHE_FORMAT: &str = "tally-module-cache-v2-instrumented";

/// The wasmtime release this build links, part of every cache key.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// How many instances may be alive at once per engine: the runtime's warm instances (8) plus
/// those of actions running concurrently. The pool reserves address space, not memory, for
/// each.
const POOL_INSTANCES: u32 = 32;

/// Bytes of a pool slot's linear memory that stay mapped between actions and are reset with
/// `memset` rather than `madvise`; most contracts touch less than this per action, so one page
/// avoids a syscall per action (shared/PROBE.md: keep-resident saved ~30%).
const KEEP_RESIDENT_BYTES: usize = 64 * 1024;

/// Builds the engine every node must use.
///
/// Determinism: fuel metering (not wall-clock) bounds actions; NaNs are canonicalised so float
/// results are bit-identical on every CPU; threads, shared memory and relaxed SIMD (whose
/// results may differ between CPUs) are off (threads are not even compiled in). Backtraces are off, so no engine text enters a
/// failure and failures stay cheap.
pub fn deterministic_config() -> Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(POOL_INSTANCES)
        .total_memories(POOL_INSTANCES)
        .total_tables(POOL_INSTANCES)
        .max_memories_per_module(1)
        .max_tables_per_module(1)
        .max_memory_size((MAX_MEMORY_PAGES * PAGE_SIZE) as usize)
        .table_elements(MAX_TABLE_ELEMENTS as usize)
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES);

    let mut config = Config::new();
    config
        .consume_fuel(true)
        .cranelift_nan_canonicalization(true)
        .wasm_relaxed_simd(false)
        .wasm_multi_memory(false)
        .wasm_memory64(false)
        .wasm_backtrace_max_frames(None)
        .native_unwind_info(false)
        .max_wasm_stack(MAX_WASM_STACK)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// A new engine with [`deterministic_config`].
pub fn new_engine() -> wasmtime::Result<Engine> {
    Engine::new(&deterministic_config())
}

/// Feeds `Hash` output into sha256, so a `Hash` value gets a stable digest.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0 // never used: the digest is read with `finalize`
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// What a compiled module depends on besides its code: Tally's cache format, the wasmtime
/// version, and every engine setting that changes compiled code.
pub fn fingerprint(engine: &Engine) -> [u8; 32] {
    let mut h = ShaHasher(Sha256::new());
    TALLY_CACHE_FORMAT.hash(&mut h);
    WASMTIME_VERSION.hash(&mut h);
    engine.precompile_compatibility_hash().hash(&mut h);
    h.0.finalize().into()
}
