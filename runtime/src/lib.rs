//! Tally's execution engine: a deterministic wasmtime engine, upload validation, a two-tier
//! module cache and per-action execution against any [`Host`].
//!
//! ```no_run
//! use tally_runtime::{Entry, Runtime, RuntimeConfig};
//! # fn host() -> Box<dyn tally_host_api::Host> { unimplemented!() }
//! let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
//! let code = std::fs::read("contracts/simplecoin.wasm").unwrap();
//! let contract = runtime.prepare(&code).unwrap(); // validate + compile (or load from cache)
//! let mut host = host();
//! let receipt = runtime.execute(&contract, Entry::Init, host.as_mut()).unwrap();
//! assert!(receipt.is_success());
//! ```
//!
//! # Core concepts
//!
//! - **Compile once, safely.** [`Runtime::prepare`] validates a module (the ABI, and static
//!   bounds on everything that makes compiling slow), [instruments](instrument) it, then takes
//!   its compiled form from memory, from the disk cache (keyed by the code's sha256 and the
//!   engine's [fingerprint](engine::fingerprint), authenticated with this node's
//!   [cache key](cache_key)), or compiles it and fills both tiers.
//! - **Pristine per action.** Every action starts from the contract's state right after
//!   instantiation: no memory, global or table state carries over between actions. The
//!   instrumentation records the pages an action writes, and the action pays for each in
//!   fuel; afterwards the runtime copies just those pages back from a sparse snapshot and
//!   reuses the instance (~1 µs instead of ~8 µs for a fresh one). Modules that change tables
//!   or drop segments get a fresh instance from the pooling allocator per action instead, and
//!   pay for it.
//! - **Deterministic limits.** Fuel, not time, ends an action; the call stack is bounded in
//!   WebAssembly terms, not native bytes; Cranelift compiles for one pinned ISA baseline.
//! - **Outcomes are not errors.** A contract that asserts, traps or runs out of fuel yields a
//!   [`Receipt`] with [`Outcome::Failure`]; `Err` is kept for faults of the node itself.

pub mod cache_key;
pub mod engine;
pub mod error;
pub mod instrument;
pub mod receipt;
pub mod trace;
pub mod validate;

/// Deploy-time internals for the fuzz targets in `fuzz/`: the differential check of the
/// instrumentation runs the rewritten module beside the original in plain wasmtime, and
/// [`Runtime::prepare`] never hands the rewritten module out. Not a stable API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use crate::error::DeployError;

    /// The module of the runtime's private imports.
    pub const PRIVATE_MODULE: &str = crate::instrument::PRIVATE_MODULE;

    /// The runtime's private imports, name and number of i32 parameters, in order.
    pub const PRIVATE_IMPORTS: [(&str, usize); 4] = crate::instrument::PRIVATE_IMPORTS;

    /// The added exports of the globals the runtime resets after every action: the stack
    /// height and the count of chunks marked since the last charge point.
    pub const RESET_GLOBALS: [&str; 2] = [
        crate::instrument::STACK_EXPORT,
        crate::instrument::NEW_CHUNKS_EXPORT,
    ];

    /// Validates `wasm` as an upload and returns it instrumented, as `prepare` would compile
    /// it.
    pub fn instrument(wasm: &[u8]) -> Result<Vec<u8>, DeployError> {
        Ok(crate::instrument::rewrite(wasm)?.wasm)
    }
}

mod cache;
mod call;
mod config;
mod contract;
mod counters;
mod disk_cache;
mod execute;
mod instance;
mod pool;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tally_host_api::Host;
use wasmtime::{Engine, Linker};

pub use call::{Budget, Entry};
pub use config::{RuntimeConfig, default_concurrency};
pub use contract::Contract;
pub use counters::CacheStats;
pub use error::{DeployError, PrepareError, Resource, RuntimeError};
pub use receipt::{Outcome, Receipt};
pub use trace::{TraceFrame, TrapTrace};
pub use validate::{EntryPoints, LegacyHandler, ModuleInfo};

use cache::{ContractCache, DiskTier};
use counters::{Counters, bump};
use execute::{ActionCtx, with_host};
use pool::WarmPool;

/// A sha256 digest of a contract's WebAssembly code.
pub type CodeHash = [u8; 32];

/// Bytes of prepared contracts kept in memory by default. A contract holds its compiled code
/// and the non-zero pages of its initial memory (at most its data segments, so well under
/// `MAX_MODULE_SIZE` plus a page per segment); 256 MiB keeps hundreds of ordinary contracts.
pub const DEFAULT_CONTRACT_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// The engine, its linker and the module cache. Cheap to share by reference across actions.
pub struct Runtime {
    engine: Engine,
    linker: Linker<ActionCtx>,
    fingerprint: [u8; 32],
    config: RuntimeConfig,
    /// Instances the engine's pool holds.
    pool_instances: u32,
    disk: Option<DiskTier>,
    contracts: ContractCache,
    warm: WarmPool,
    counters: Counters,
}

impl Runtime {
    /// Builds the deterministic engine, registers the ABI, opens the cache directory and
    /// loads (or creates) the key that authenticates it.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let pool_instances = engine::pool_instances(config.concurrency);
        let engine = match config.trace {
            true => engine::new_tracing_engine(pool_instances),
            false => engine::new_engine(pool_instances),
        }
        .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        tally_host_api::linker::add_to_linker(&mut linker)
            .and_then(|()| execute::add_private_imports(&mut linker))
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let disk = DiskTier::open(&config)?;
        Ok(Self {
            fingerprint: engine::fingerprint(&engine),
            engine,
            linker,
            disk,
            contracts: ContractCache::new(config.contract_cache_bytes),
            config,
            pool_instances,
            warm: WarmPool::default(),
            counters: Counters::default(),
        })
    }

    /// Instances the engine's pool holds: warm ones and those of running actions together
    /// ([`RuntimeConfig::concurrency`]).
    pub fn pool_instances(&self) -> u32 {
        self.pool_instances
    }

    /// Instances kept warm between actions now, each holding a slot of the pool.
    pub fn warm_instances(&self) -> usize {
        self.warm.len()
    }

    /// Whether failed receipts carry a [`TrapTrace`] ([`RuntimeConfig::trace`]).
    pub fn traces(&self) -> bool {
        self.config.trace
    }

    /// The engine fingerprint that keys the disk cache.
    pub fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }

    /// Instances created so far (at deploy, for modules that cannot reuse one, and after a
    /// warm instance was dropped); most actions reuse a warm instance and create none.
    pub fn instantiations(&self) -> u64 {
        self.counters.instantiations()
    }

    /// Where `prepare` found modules so far.
    pub fn cache_stats(&self) -> CacheStats {
        self.counters.cache_stats()
    }

    /// Bytes the prepared contracts in memory hold (at most
    /// [`RuntimeConfig::contract_cache_bytes`], plus the one most recently prepared).
    pub fn contract_cache_bytes(&self) -> usize {
        self.contracts.bytes()
    }

    /// Validates `wasm` and returns it compiled, from the cheapest tier that has it.
    ///
    /// # Errors
    /// [`PrepareError::Rejected`] if the module breaks a rule (the same verdict on every
    /// node); [`PrepareError::Node`] if this node failed (then nothing may be concluded about
    /// the module).
    pub fn prepare(&self, wasm: &[u8]) -> Result<Arc<Contract>, PrepareError> {
        let code_hash: CodeHash = Sha256::digest(wasm).into();
        if let Some(found) = self.contracts.get(&code_hash) {
            bump(&self.counters.memory_hits);
            return Ok(found);
        }
        let validated = validate::check(wasm)?;
        let instrumented = instrument::instrument(wasm, &validated, self.config.trace)?;
        let module = cache::load_or_compile(
            &self.engine,
            &self.fingerprint,
            self.disk.as_ref(),
            &self.counters,
            &instrumented.wasm,
            &code_hash,
        )?;
        let mut contract = self.link(code_hash, validated, &instrumented, module)?;
        if let Some(offsets) = instrumented.offsets {
            contract.attach_debug(trace::DebugInfo::new(wasm, offsets));
        }
        let contract = Arc::new(contract);
        for evicted in self.contracts.insert(contract.clone()) {
            bump(&self.counters.evictions);
            self.warm.forget(&evicted);
        }
        Ok(contract)
    }

    /// Runs one entry point of `contract` against `host`, in an instance whose memory,
    /// globals and tables are exactly those of a fresh instantiation.
    ///
    /// A contract failure is an `Ok` receipt with [`Outcome::Failure`]; the caller must then
    /// discard the writes the action made through `host`.
    pub fn execute(
        &self,
        contract: &Contract,
        entry: Entry,
        host: &mut dyn Host,
    ) -> Result<Receipt, RuntimeError> {
        self.execute_metered(contract, entry, host, self.config.fuel_per_action)
    }

    /// [`Runtime::execute`] with at most `fuel` fuel (never more than the configured fuel per
    /// action): the chain passes what is left of its block's fuel budget.
    pub fn execute_metered(
        &self,
        contract: &Contract,
        entry: Entry,
        host: &mut dyn Host,
        fuel: u64,
    ) -> Result<Receipt, RuntimeError> {
        self.execute_call(
            contract,
            entry,
            host,
            Budget {
                fuel,
                entry_fee: 0,
                stack_base: 0,
            },
        )
    }

    /// [`Runtime::execute_metered`] within `budget`: for a call from another contract, and
    /// for an entry the embedder charges for (see [`Budget`]).
    pub fn execute_call(
        &self,
        contract: &Contract,
        entry: Entry,
        host: &mut dyn Host,
        budget: Budget,
    ) -> Result<Receipt, RuntimeError> {
        let Budget {
            fuel,
            entry_fee,
            stack_base,
        } = budget;
        let fuel = fuel.min(self.config.fuel_per_action);
        let (mut slot, instance_fuel) = self.acquire(contract)?;
        let up_front = instance_fuel.saturating_add(entry_fee);
        let instance::Slot { store, entries, .. } = &mut *slot;
        let request = call::Request {
            entry,
            fuel,
            up_front,
            stack_base,
            debug: contract.debug.as_deref(),
        };
        let receipt = with_host(store, host, |store| call::run(store, entries, request))?;
        self.release(contract, slot);
        Ok(receipt)
    }
}
