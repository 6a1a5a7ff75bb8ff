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
mod counters;
mod disk_cache;
mod execute;
mod pool;

use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tally_host_api::limits::{
    FUEL_PER_ACTION, FUEL_PER_BYTE, FUEL_PER_FRESH_INSTANCE, INSTANTIATE_FUEL,
};
use tally_host_api::{Abort, AbortCode, Host, Name};
use wasmtime::{Engine, InstancePre, Linker, Module, Store, Trap};

pub use counters::CacheStats;
pub use error::{DeployError, PrepareError, Resource, RuntimeError};
pub use receipt::{Outcome, Receipt};
pub use trace::{TraceFrame, TrapTrace};
pub use validate::{EntryPoints, ModuleInfo};

use cache::{ContractCache, DiskTier};
use counters::{Counters, bump};
use execute::{ActionCtx, Failure, with_host};
use pool::{Dispatch, Entries, Exports, Pristine, RestoreExports, Slot, WarmPool};

/// A sha256 digest of a contract's WebAssembly code.
pub type CodeHash = [u8; 32];

/// Bytes of prepared contracts kept in memory by default. A contract holds its compiled code
/// and the non-zero pages of its initial memory (at most its data segments, so well under
/// `MAX_MODULE_SIZE` plus a page per segment); 256 MiB keeps hundreds of ordinary contracts.
pub const DEFAULT_CONTRACT_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// What a prepared contract costs in memory besides its code and snapshot: the instance
/// template, export tables and bookkeeping, rounded up.
const CONTRACT_OVERHEAD_BYTES: usize = 16 * 1024;

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory of the disk tier of the module cache; `None` keeps compiled code in memory
    /// only.
    pub cache_dir: Option<PathBuf>,
    /// The key file that authenticates disk-cache entries, used only with a `cache_dir`.
    /// `None` uses [`cache_key::default_key_path`] (`$TALLY_CACHE_KEY`, else the user's
    /// configuration directory). It is created, mode 0600, if missing.
    pub cache_key: Option<PathBuf>,
    /// Fuel each action starts with.
    pub fuel_per_action: u64,
    /// Bytes of prepared contracts kept in memory; the least recently used are dropped (and
    /// reloaded from the disk cache when needed again).
    pub contract_cache_bytes: usize,
    /// Whether a failed action's receipt says where in the contract it stopped
    /// ([`Receipt::trace`]): for authors (`tally push --trace`, the test harness). It
    /// changes no outcome and no fuel; off, a trap captures no backtrace.
    pub trace: bool,
    /// How many threads may run actions through this runtime at once: the engine's instance
    /// pool is sized for it ([`engine::pool_instances`], capped at
    /// [`engine::MAX_CONCURRENCY`]). More threads than this meet
    /// [`RuntimeError::Exhausted`] when they all hold instances at once; one thread never
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

/// Which entry point an execution enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `onInit`, once at deploy (a no-op success if the contract has none).
    Init,
    /// An action addressed to `code`, run by contract `receiver`.
    Action {
        /// The account whose contract runs.
        receiver: Name,
        /// The account the action is addressed to.
        code: Name,
        /// The action's name.
        action: Name,
    },
}

/// A validated, compiled contract, ready to instantiate.
pub struct Contract {
    code_hash: CodeHash,
    info: ModuleInfo,
    pre: InstancePre<ActionCtx>,
    exports: Exports,
    /// `None` when instances of this module cannot be restored, so each action gets a fresh
    /// one (and pays [`Contract::fresh_instance_fuel`]).
    pristine: Option<Pristine>,
    /// Fuel each action pays up front when it needs a fresh instance: deterministic, computed
    /// from the module at deploy.
    fresh_instance_fuel: u64,
    /// Bytes it holds in memory, for the contract cache's bound.
    weight: usize,
    /// Names and offsets of the uploaded module, when the runtime traces.
    debug: Option<Box<trace::DebugInfo>>,
}

impl Contract {
    /// The sha256 of its WebAssembly code.
    pub fn code_hash(&self) -> &CodeHash {
        &self.code_hash
    }

    /// What validation learned about it.
    pub fn info(&self) -> &ModuleInfo {
        &self.info
    }

    /// Bytes it holds in memory: its compiled code, its snapshot and bookkeeping.
    pub fn weight(&self) -> usize {
        self.weight
    }
}

impl std::fmt::Debug for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contract")
            .field("code_hash", &hex::encode(self.code_hash))
            .field("info", &self.info)
            .field("weight", &self.weight)
            .finish_non_exhaustive()
    }
}

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
        let disk = match &config.cache_dir {
            None => None,
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| RuntimeError::CacheIo {
                    path: dir.clone(),
                    source,
                })?;
                let key_path = config
                    .cache_key
                    .clone()
                    .or_else(cache_key::default_key_path)
                    .ok_or_else(|| RuntimeError::CacheKey {
                        path: PathBuf::from("cache.key"),
                        problem: format!(
                            "no home or configuration directory to keep it in; set {} to a \
                             file path",
                            cache_key::CACHE_KEY_ENV
                        ),
                    })?;
                Some(DiskTier {
                    key: cache_key::load_or_create(&key_path, dir)?,
                    dir: dir.clone(),
                })
            }
        };
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
            let debug = trace::DebugInfo::new(wasm, offsets);
            contract.weight += debug.bytes();
            contract.debug = Some(Box::new(debug));
        }
        let contract = Arc::new(contract);
        for evicted in self.contracts.insert(contract.clone()) {
            bump(&self.counters.evictions);
            self.warm.forget(&evicted);
        }
        Ok(contract)
    }

    fn link(
        &self,
        code_hash: CodeHash,
        validated: validate::Validated,
        instrumented: &instrument::Instrumented,
        module: Module,
    ) -> Result<Contract, PrepareError> {
        let export = |name: &str| module.get_export_index(name);
        // Validation guarantees these exports and instrumentation adds the rest; a missing
        // one is a bug of this node, not the module's fault.
        let missing = |name: &str| {
            PrepareError::Node(RuntimeError::Engine(format!(
                "instrumented module lacks export {name}"
            )))
        };
        let info = validated.info;
        let memory = export(tally_host_api::abi::MEMORY_EXPORT).ok_or_else(|| missing("memory"))?;
        let init = match info.has_init {
            true => {
                Some(export(tally_host_api::abi::INIT_EXPORT).ok_or_else(|| missing("onInit"))?)
            }
            false => None,
        };
        let dispatch = match &info.entry {
            EntryPoints::Apply => Dispatch::Apply(
                export(tally_host_api::abi::APPLY_EXPORT).ok_or_else(|| missing("apply"))?,
            ),
            EntryPoints::Legacy(handlers) => Dispatch::Legacy(
                handlers
                    .iter()
                    .map(|h| {
                        Ok((
                            h.code,
                            h.action,
                            export(&h.export).ok_or_else(|| missing(&h.export))?,
                        ))
                    })
                    .collect::<Result<_, PrepareError>>()?,
            ),
        };
        let dirty_map = export(instrument::DIRTY_MAP_EXPORT)
            .ok_or_else(|| missing(instrument::DIRTY_MAP_EXPORT))?;
        let new_chunks = export(instrument::NEW_CHUNKS_EXPORT)
            .ok_or_else(|| missing(instrument::NEW_CHUNKS_EXPORT))?;
        let restore = match instrumented.reusable {
            false => None,
            true => Some(RestoreExports {
                stack: export(instrument::STACK_EXPORT)
                    .ok_or_else(|| missing(instrument::STACK_EXPORT))?,
                globals: instrumented
                    .mutable_globals
                    .iter()
                    .map(|i| {
                        let name = format!("{}{i}", instrument::GLOBAL_EXPORT_PREFIX);
                        export(&name).ok_or_else(|| missing(&name))
                    })
                    .collect::<Result<_, _>>()?,
            }),
        };
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|e| RuntimeError::Instantiate(format!("{e:#}")))?;
        let mut contract = Contract {
            code_hash,
            info,
            pre,
            exports: Exports {
                memory,
                dirty_map,
                new_chunks,
                init,
                dispatch,
                restore,
            },
            pristine: None,
            fresh_instance_fuel: 0,
            weight: 0,
            debug: None,
        };
        // Instantiate once now, so a module whose instantiation fails on every node (a data
        // segment that does not fit its memory) is rejected at deploy rather than failing
        // every action. The fresh instance is also the pristine state that reused instances
        // are restored to.
        let (mut slot, instantiate_fuel) = self.instantiate(&contract).map_err(|e| match e {
            Instantiation::Module(why) => PrepareError::Rejected(DeployError::Instantiate(why)),
            Instantiation::Node(e) => PrepareError::Node(e),
        })?;
        contract.fresh_instance_fuel =
            FUEL_PER_FRESH_INSTANCE + validated.data_bytes * FUEL_PER_BYTE + instantiate_fuel;
        contract.pristine = slot.snapshot();
        let image = module.image_range();
        contract.weight = (image.end as usize - image.start as usize)
            + contract.pristine.as_ref().map_or(0, Pristine::bytes)
            + CONTRACT_OVERHEAD_BYTES;
        if contract.pristine.is_some() {
            self.warm.put(slot);
        }
        Ok(contract)
    }

    /// A fresh instance of `contract` in a new store, and the fuel its instantiation used.
    ///
    /// Warm instances are only a cache: when they fill the pool they are dropped to make
    /// room, so a caller running one action at a time never finds the pool exhausted. Only
    /// when running actions hold every slot does it fail, with [`RuntimeError::Exhausted`].
    fn instantiate(&self, contract: &Contract) -> Result<(Slot, u64), Instantiation> {
        match self.try_instantiate(contract) {
            Err(Instantiation::Node(RuntimeError::Exhausted { .. })) if self.warm.clear() => {
                self.try_instantiate(contract)
            }
            other => other,
        }
    }

    fn try_instantiate(&self, contract: &Contract) -> Result<(Slot, u64), Instantiation> {
        bump(&self.counters.instantiations);
        let mut store = Store::new(&self.engine, ActionCtx::new());
        let node = |e: String| Instantiation::Node(RuntimeError::Instantiate(e));
        store
            .set_fuel(INSTANTIATE_FUEL)
            .map_err(|e| node(format!("{e:#}")))?;
        let instance = contract.pre.instantiate(&mut store).map_err(|e| {
            // A trap is the module's doing and the same on every node (a segment out of
            // bounds, initialisers out of fuel); a full pool is this node's, and so is
            // anything else.
            if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
            {
                return Instantiation::Node(RuntimeError::Exhausted {
                    resource: Resource::Instances,
                    limit: self.pool_instances,
                });
            }
            match e.downcast_ref::<Trap>() {
                Some(Trap::OutOfFuel) => Instantiation::Module(format!(
                    "its initialisers use more than {INSTANTIATE_FUEL} fuel"
                )),
                Some(_) => Instantiation::Module("its initialisation traps".into()),
                None => node(format!("{e:#}")),
            }
        })?;
        let used = INSTANTIATE_FUEL - store.get_fuel().unwrap_or(0);
        let slot = Slot::new(contract.code_hash, store, instance, &contract.exports)
            .ok_or_else(|| node("an entry point lost its export or type".into()))?;
        Ok((slot, used))
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
        let fuel = fuel.min(self.config.fuel_per_action);
        let warm = match contract.pristine {
            Some(_) => self.warm.take(&contract.code_hash),
            None => None,
        };
        let (mut slot, up_front) = match warm {
            Some(slot) => (slot, 0),
            None => {
                let (slot, _) = self.instantiate(contract).map_err(|e| match e {
                    Instantiation::Module(why)
                    | Instantiation::Node(RuntimeError::Instantiate(why)) => {
                        RuntimeError::Instantiate(why)
                    }
                    Instantiation::Node(e) => e,
                })?;
                // A reusable module's fresh instance is the node's business (its warm one was
                // evicted); a module that needs one per action pays for it, the same on
                // every node.
                let up_front = match contract.pristine {
                    Some(_) => 0,
                    None => contract.fresh_instance_fuel,
                };
                (slot, up_front)
            }
        };
        let Slot {
            store,
            init,
            entries,
            ..
        } = &mut slot;
        let receipt = with_host(store, host, |store| {
            run(
                store,
                init,
                entries,
                entry,
                fuel,
                up_front,
                contract.debug.as_deref(),
            )
        })?;
        if let Some(pristine) = &contract.pristine
            && slot.restore(pristine)
        {
            self.warm.put(slot);
        }
        Ok(receipt)
    }
}

/// Why an instantiation failed.
enum Instantiation {
    /// The module's doing: the same on every node.
    Module(String),
    /// The node's.
    Node(RuntimeError),
}

/// Calls the entry point in `store`'s instance with `fuel`, of which `up_front` is charged
/// before any code runs. With `debug` (a traced runtime), a failure inside wasm gets its trace.
fn run(
    store: &mut Store<ActionCtx>,
    init: &Option<wasmtime::TypedFunc<(), ()>>,
    entries: &Entries,
    entry: Entry,
    fuel: u64,
    up_front: u64,
    debug: Option<&trace::DebugInfo>,
) -> Result<Receipt, RuntimeError> {
    store.data_mut().console.clear();
    let Some(fuel_left) = fuel.checked_sub(up_front) else {
        return Ok(Receipt {
            outcome: Outcome::Failure(Abort::new(
                AbortCode::OutOfFuel,
                format!("the action used all of its {fuel} fuel"),
            )),
            fuel_used: fuel,
            console: Vec::new(),
            trace: None,
        });
    };
    store
        .set_fuel(fuel_left)
        .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
    let result = match (entry, entries) {
        (Entry::Init, _) => match init {
            None => Ok(()),
            Some(init) => init.call(&mut *store, ()),
        },
        (
            Entry::Action {
                receiver,
                code,
                action,
            },
            Entries::Apply(apply),
        ) => apply.call(
            &mut *store,
            (receiver.0 as i64, code.0 as i64, action.0 as i64),
        ),
        (Entry::Action { code, action, .. }, Entries::Legacy(handlers)) => {
            match handlers.iter().find(|(c, a, _)| *c == code && *a == action) {
                Some((_, _, handler)) => handler.call(&mut *store, ()),
                None => Err(wasmtime::Error::new(Abort::new(
                    AbortCode::NoHandler,
                    format!("the contract has no handler for action {action} of {code}"),
                ))),
            }
        }
    };
    let mut trace = None;
    let mut outcome = match result {
        Ok(()) => Outcome::Success,
        Err(e) => {
            // Read after the fact, from what wasmtime captured; the outcome never sees it.
            if let Some(debug) = debug
                && let Some(backtrace) = e.downcast_ref::<wasmtime::WasmBacktrace>()
            {
                trace = Some(Box::new(debug.trace(backtrace)));
            }
            match execute::classify(e, fuel) {
                Failure::Abort(abort) => Outcome::Failure(abort),
                Failure::Node(e) => return Err(e),
            }
        }
    };
    // What the action still owes for the memory it dirtied (the chunks after its last charge
    // point, those only the host wrote) and for reading the map; past the action's fuel it
    // fails as if it had run out while writing.
    let restore_fuel = execute::collect_dirty(store, !matches!(outcome, Outcome::Success));
    let mut fuel_used = (fuel - store.get_fuel().unwrap_or(0)).saturating_add(restore_fuel);
    if fuel_used > fuel {
        fuel_used = fuel;
        if outcome == Outcome::Success {
            outcome = Outcome::Failure(Abort::new(
                AbortCode::OutOfFuel,
                format!("the action used all of its {fuel} fuel"),
            ));
        }
    }
    let console = std::mem::take(&mut store.data_mut().console);
    Ok(Receipt {
        outcome,
        fuel_used,
        console,
        trace,
    })
}
