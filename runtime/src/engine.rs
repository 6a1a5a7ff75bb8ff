//! The deterministic wasmtime engine, the features uploads may use, and the engine fingerprint.

use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};
use tally_host_api::limits::{
    FUEL_PER_BULK_BYTE, FUEL_PER_FLOAT_DIVISION, FUEL_PER_INTEGER_DIVISION, FUEL_PER_TABLE_ELEMENT,
    MAX_CALL_DEPTH, MAX_MEMORY_PAGES, MAX_TABLE_ELEMENTS, MAX_WASM_STACK, PAGE_SIZE,
};
use wasmparser::WasmFeatures;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OperatorCost, OptLevel, PoolingAllocationConfig,
};

use crate::pool::WARM_INSTANCES;

/// Bump when anything Tally adds to a compiled module's meaning changes (the linker's
/// imports, the instrumentation, validation rules), so old disk-cache entries become misses.
const TALLY_CACHE_FORMAT: &str = "tally-module-cache-v5-inline-bulk-marks";

/// The wasmtime release this build links, part of every cache key.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Instances kept for deploys besides those of running actions: [`crate::Runtime::prepare`]
/// instantiates a module once to take its snapshot, and a node deploys on its sequential path,
/// a handful at a time at most (the contract cache and the fuzz targets prepare concurrently
/// with actions only in tests).
const PREPARE_INSTANCES: u32 = 8;

/// Most threads a runtime sizes its pool for. Each pool slot reserves ~8 GiB of address space
/// ([`pool_reservation_bytes`]), so 256 threads (2,088 instances, ~16.4 TiB) take an eighth of
/// the 128 TiB a process has on x86-64; a larger figure would leave too little for a second
/// runtime in the same process.
pub const MAX_CONCURRENCY: usize = 256;

/// How many instances may be alive at once in the pool of a runtime that serves `concurrency`
/// threads (at most [`MAX_CONCURRENCY`]):
///
/// - `WARM_INSTANCES` kept between actions,
/// - [`MAX_CALL_DEPTH`] per thread: an action holds one instance per level of synchronous
///   calls it is in (the action itself is the first), and every thread may run one action,
/// - `PREPARE_INSTANCES` for deploys.
///
/// A node that runs more threads than this at once meets
/// [`RuntimeError::Exhausted`](crate::RuntimeError::Exhausted) on some of them, never a
/// crash; one thread at a time never does, since its actions hold at most [`MAX_CALL_DEPTH`]
/// instances and warm instances are dropped to make room.
pub fn pool_instances(concurrency: usize) -> u32 {
    let threads = concurrency.clamp(1, MAX_CONCURRENCY) as u32;
    WARM_INSTANCES as u32 + threads * MAX_CALL_DEPTH + PREPARE_INSTANCES
}

/// Address space the pool of [`pool_instances`] instances reserves, in bytes. Each of an
/// instance's `MEMORIES_PER_INSTANCE` memories gets a slot of wasmtime's default memory
/// reservation (4 GiB on 64-bit hosts, which lets compiled code skip bounds checks) plus its
/// guard region (32 MiB), all in one `PROT_NONE` mapping: neither memory nor commit charge
/// until a slot is used, and then only the pages an instance touches (at most
/// `KEEP_RESIDENT_BYTES` of each memory stay mapped after it is freed). A 2-thread node
/// reserves 56 instances, ~450 GiB; a 128-thread node 1,064 instances, ~8.4 TiB.
pub fn pool_reservation_bytes(instances: u32) -> u64 {
    const MEMORY_RESERVATION: u64 = 4 << 30;
    const MEMORY_GUARD: u64 = 32 << 20;
    u64::from(instances * MEMORIES_PER_INSTANCE) * (MEMORY_RESERVATION + MEMORY_GUARD)
        + MEMORY_GUARD
}

/// Memories per instance: the contract's own, and the dirty-page map the instrumentation adds
/// ([`crate::instrument`]).
const MEMORIES_PER_INSTANCE: u32 = 2;

/// Bytes of a pool slot's linear memory that stay mapped between actions and are reset with
/// `memset` rather than `madvise`; most contracts touch less than this per action, so one page
/// avoids a syscall per action (keep-resident saved ~30% of a transfer with wasmtime 48's
/// pooling allocator, measured on a 2-core Xeon).
const KEEP_RESIDENT_BYTES: usize = 64 * 1024;

/// The CPU features every node compiles for, whatever CPU it runs on: x86-64-v2 (SSE4.2 and
/// POPCNT, every x86-64 server CPU since 2009). Without a pinned baseline Cranelift uses every
/// feature of the host (AVX-512 on one validator, AVX2 on another), so two nodes would run
/// different native code for the same contract. The baseline is part of the
/// [fingerprint].
#[cfg(target_arch = "x86_64")]
pub const ISA_BASELINE: &[&str] = &[
    "has_sse3",
    "has_ssse3",
    "has_sse41",
    "has_sse42",
    "has_popcnt",
    "has_cmpxchg16b",
];

/// The CPU features every node compiles for: the architecture's baseline.
#[cfg(not(target_arch = "x86_64"))]
pub const ISA_BASELINE: &[&str] = &[];

/// The WebAssembly features an uploaded module may use: WebAssembly 2.0 (bulk memory,
/// reference types, SIMD, multi-value, sign extension, saturating conversions) plus extended
/// constant expressions.
///
/// Left out on purpose: threads and relaxed SIMD (their results may differ between CPUs),
/// multiple memories and memory64 (one 32-bit memory keeps host pointers simple; the engine
/// enables multi-memory only for the page map the runtime adds), tail calls and exceptions
/// (they leave a frame without passing its epilogue, which the stack accounting relies on),
/// and GC, including the GC types `externref` needs (this build of wasmtime has no
/// collector).
pub fn upload_features() -> WasmFeatures {
    WasmFeatures::FLOATS
        | WasmFeatures::MUTABLE_GLOBAL
        | WasmFeatures::BULK_MEMORY
        | WasmFeatures::REFERENCE_TYPES
        | WasmFeatures::SIGN_EXTENSION
        | WasmFeatures::SATURATING_FLOAT_TO_INT
        | WasmFeatures::MULTI_VALUE
        | WasmFeatures::SIMD
        | WasmFeatures::EXTENDED_CONST
}

/// Builds the engine every node must use.
///
/// Determinism: fuel metering (not wall-clock) bounds actions, with [`fuel_costs`] pinned; NaNs are canonicalised so float
/// results are bit-identical on every CPU; Cranelift compiles for one pinned
/// [`ISA_BASELINE`], without the optimisations that would make native frames larger than
/// their accounted size; the call stack is bounded in WebAssembly terms by the
/// instrumentation, with `max_wasm_stack` only a backstop above it; threads, shared memory and relaxed SIMD
/// (whose results may differ between CPUs) are off. Backtraces are off, so no engine text
/// enters a failure and failures stay cheap.
pub fn deterministic_config(pool_instances: u32) -> Config {
    let mut config = unpinned_config(pool_instances);
    // An explicit target turns off wasmtime's inference of the host's CPU features; the
    // baseline is then enabled flag by flag. Engine creation fails on a CPU without them.
    config
        .target(&host_triple())
        .expect("the host triple is a valid target");
    for flag in ISA_BASELINE {
        // SAFETY: these flags only tell Cranelift which instructions it may emit; each is part
        // of the x86-64-v2 baseline, and wasmtime refuses to build an engine whose flags the
        // host CPU does not support, so no emitted instruction can be unsupported.
        unsafe {
            config.cranelift_flag_enable(flag);
        }
    }
    config
}

/// The target triple of this build, which is the machine it runs on.
fn host_triple() -> String {
    let arch = std::env::consts::ARCH;
    let os = std::env::consts::OS;
    let env = if cfg!(target_env = "musl") {
        "musl"
    } else {
        "gnu"
    };
    match os {
        "linux" => format!("{arch}-unknown-linux-{env}"),
        "macos" => format!("{arch}-apple-darwin"),
        other => format!("{arch}-unknown-{other}"),
    }
}

/// The fuel each operator costs, pinned here rather than left to wasmtime's defaults (which a
/// wasmtime upgrade could change, silently changing every receipt): one per operator, except
/// the free ones wasmtime exempts (`nop`, `drop`, `block`, `loop`, `end`…), the slow ones
/// priced from measurement, and bulk operations charged per byte or element.
pub fn fuel_costs() -> OperatorCost {
    let mut cost = OperatorCost::new();
    for op in [
        &mut cost.I32DivS,
        &mut cost.I32DivU,
        &mut cost.I32RemS,
        &mut cost.I32RemU,
        &mut cost.I64DivS,
        &mut cost.I64DivU,
        &mut cost.I64RemS,
        &mut cost.I64RemU,
    ] {
        *op = FUEL_PER_INTEGER_DIVISION;
    }
    for op in [
        &mut cost.F32Div,
        &mut cost.F64Div,
        &mut cost.F32Sqrt,
        &mut cost.F64Sqrt,
    ] {
        *op = FUEL_PER_FLOAT_DIVISION;
    }
    let v = &mut cost.variable;
    v.memory_copy_per_byte = FUEL_PER_BULK_BYTE;
    v.memory_fill_per_byte = FUEL_PER_BULK_BYTE;
    v.memory_init_per_byte = FUEL_PER_BULK_BYTE;
    // `memory.grow` pays a flat `FUEL_PER_MEMORY_GROW` through the instrumentation.
    v.memory_grow_per_page = 0;
    v.table_copy_per_element = FUEL_PER_TABLE_ELEMENT;
    v.table_fill_per_element = FUEL_PER_TABLE_ELEMENT;
    v.table_init_per_element = FUEL_PER_TABLE_ELEMENT;
    v.table_grow_per_element = FUEL_PER_TABLE_ELEMENT;
    cost
}

/// Every setting of [`deterministic_config`] but the pinned ISA.
fn unpinned_config(pool_instances: u32) -> Config {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(pool_instances)
        .total_memories(pool_instances * MEMORIES_PER_INSTANCE)
        .total_tables(pool_instances)
        .max_memories_per_module(MEMORIES_PER_INSTANCE)
        .max_tables_per_module(1)
        .max_memory_size((MAX_MEMORY_PAGES * PAGE_SIZE) as usize)
        .table_elements(MAX_TABLE_ELEMENTS as usize)
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES);

    let mut config = Config::new();
    config
        .consume_fuel(true)
        .operator_cost(fuel_costs())
        .cranelift_nan_canonicalization(true)
        // No e-graph optimisation: its loop-invariant code motion and value numbering keep
        // values live that are neither locals nor on the operand stack (a loop of a thousand
        // `x * c` hoisted out, live across a call), so a frame's native size would no longer
        // be bounded by its accounted size (`validate::frame_bytes`), and the native stack
        // backstop could fire before the deterministic limit. It also halves compile time.
        .cranelift_opt_level(OptLevel::None)
        .wasm_relaxed_simd(false)
        .wasm_multi_memory(true)
        .wasm_memory64(false)
        .wasm_tail_call(false)
        // No backtrace is captured on a trap: a failed action costs no stack walk. Traced
        // runtimes turn it on ([`new_tracing_engine`]).
        .wasm_backtrace_max_frames(None)
        .native_unwind_info(false)
        .max_wasm_stack(MAX_WASM_STACK)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// A new engine with [`deterministic_config`], its pool sized by [`pool_instances`].
pub fn new_engine(pool_instances: u32) -> wasmtime::Result<Engine> {
    Engine::new(&deterministic_config(pool_instances))
}

/// [`new_engine`] that also captures the wasm frames of every trap, for
/// [`RuntimeConfig::trace`](crate::RuntimeConfig::trace). Capturing is a run-time setting:
/// the compiled code and the [`fingerprint`] are the same as without it, so both engines
/// share the disk cache.
pub fn new_tracing_engine(pool_instances: u32) -> wasmtime::Result<Engine> {
    let mut config = deterministic_config(pool_instances);
    config.wasm_backtrace_max_frames(std::num::NonZeroUsize::new(crate::trace::MAX_TRACE_FRAMES));
    Engine::new(&config)
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
/// version, the pinned ISA baseline, and every engine setting that changes compiled code.
pub fn fingerprint(engine: &Engine) -> [u8; 32] {
    let mut h = ShaHasher(Sha256::new());
    TALLY_CACHE_FORMAT.hash(&mut h);
    WASMTIME_VERSION.hash(&mut h);
    ISA_BASELINE.hash(&mut h);
    engine.precompile_compatibility_hash().hash(&mut h);
    h.0.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SIMD and bit counting: code Cranelift emits differently with AVX, BMI or LZCNT.
    const FEATURE_SENSITIVE: &str = r#"(module
        (func (export "f") (param v128 v128 i64) (result v128 i64)
          (f32x4.mul (f32x4.add (local.get 0) (local.get 1)) (local.get 1))
          (i64.add (i64.clz (local.get 2)) (i64.ctz (local.get 2)))))"#;

    #[test]
    fn the_engine_compiles_every_feature_uploads_may_use() {
        let engine = new_engine(pool_instances(1)).unwrap();
        assert!(
            engine.get_wasm_features().contains(upload_features()),
            "{:?}",
            upload_features().difference(engine.get_wasm_features())
        );
    }

    #[test]
    fn issue_10_compiled_code_does_not_depend_on_the_hosts_extra_cpu_features() {
        let wasm = wat::parse_str(FEATURE_SENSITIVE).unwrap();
        let compile = |config: &Config| {
            Engine::new(config)
                .unwrap()
                .precompile_module(&wasm)
                .unwrap()
        };
        let pinned = compile(&deterministic_config(pool_instances(1)));
        assert_eq!(pinned, compile(&deterministic_config(pool_instances(1))));
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("lzcnt") {
            // This host has more than the baseline; left to infer, Cranelift would use it.
            assert_ne!(pinned, compile(&unpinned_config(pool_instances(1))));
            let inferred = Engine::new(&unpinned_config(pool_instances(1))).unwrap();
            assert_ne!(
                fingerprint(&new_engine(pool_instances(1)).unwrap()),
                fingerprint(&inferred)
            );
        }
    }

    #[test]
    fn the_fingerprint_does_not_depend_on_the_pool_size() {
        let small = new_engine(pool_instances(1)).unwrap();
        let large = new_engine(pool_instances(64)).unwrap();
        assert_eq!(fingerprint(&small), fingerprint(&large));
    }

    #[test]
    fn issue_20_the_pool_holds_every_threads_call_stack_besides_the_warm_instances() {
        for threads in [1, 2, 48, 64, 128] {
            let instances = pool_instances(threads) as usize;
            assert!(instances >= WARM_INSTANCES + threads * MAX_CALL_DEPTH as usize);
        }
        // A pool for more threads than the address space allows is capped, not refused.
        assert_eq!(pool_instances(100_000), pool_instances(MAX_CONCURRENCY));
        assert!(pool_reservation_bytes(pool_instances(MAX_CONCURRENCY)) < 1 << 45);
        // An engine for 128 threads can be built (it only reserves address space).
        new_engine(pool_instances(128)).unwrap();
    }
}
