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
//! - **Compile once.** [`Runtime::prepare`] validates a module, then takes its compiled form
//!   from memory, from the disk cache (keyed by the code's sha256 and the engine's
//!   [fingerprint](engine::fingerprint)), or compiles it and fills both tiers.
//! - **Pristine per action.** Every action starts from the contract's state right after
//!   instantiation: no memory, global or table state carries over between actions. Modules are
//!   [instrumented](instrument) at deploy to track the memory they write, so after an action
//!   the runtime restores just those bytes and the mutable globals, and reuses the instance
//!   (~1 µs instead of ~8 µs for a fresh one). Modules that change tables or drop segments
//!   get a fresh instance from the pooling allocator per action instead.
//! - **Outcomes are not errors.** A contract that asserts, traps or runs out of fuel yields a
//!   [`Receipt`] with [`Outcome::Failure`]; `Err` is kept for faults of the node itself.

pub mod engine;
pub mod error;
pub mod receipt;
pub mod validate;

pub mod instrument;

mod cache;
mod execute;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tally_host_api::limits::FUEL_PER_ACTION;
use tally_host_api::{Abort, AbortCode, Host, HostError, Name};
use wasmtime::{
    Engine, Extern, Global, Instance, InstancePre, Linker, Memory, Module, ModuleExport, Store, Val,
};

pub use error::{DeployError, RuntimeError};
pub use receipt::{Outcome, Receipt};
pub use validate::{EntryPoints, ModuleInfo};

use execute::ActionCtx;

/// A sha256 digest of a contract's WebAssembly code.
pub type CodeHash = [u8; 32];

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory of the disk tier of the module cache; `None` keeps compiled code in memory
    /// only.
    pub cache_dir: Option<PathBuf>,
    /// Fuel each action starts with.
    pub fuel_per_action: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            fuel_per_action: FUEL_PER_ACTION,
        }
    }
}

/// Where [`Runtime::prepare`] found a module, counted since the runtime was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Found ready in memory.
    pub memory_hits: u64,
    /// Deserialized from the disk cache.
    pub disk_hits: u64,
    /// Disk entries that were present but stale or corrupt (then recompiled and rewritten).
    pub disk_rejected: u64,
    /// Compiled from WebAssembly.
    pub compiles: u64,
    /// Disk entries that could not be written (the module still works from memory).
    pub disk_write_errors: u64,
}

#[derive(Default)]
struct Counters {
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    disk_rejected: AtomicU64,
    compiles: AtomicU64,
    disk_write_errors: AtomicU64,
    instantiations: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
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

enum Dispatch {
    Apply(ModuleExport),
    Legacy(Vec<(Name, Name, ModuleExport)>),
}

/// Warm instances kept across actions, over all contracts; the least recently used one is
/// dropped beyond this. Each holds a slot of the engine's instance pool.
const WARM_INSTANCES: usize = 8;

/// What restoring an instance needs: its state right after instantiation.
struct Pristine {
    memory: Vec<u8>,
    /// Exports of the dirty-range globals and of the module's mutable globals.
    low: ModuleExport,
    high: ModuleExport,
    globals: Vec<(ModuleExport, Val)>,
}

/// A validated, compiled contract, ready to instantiate.
pub struct Contract {
    code_hash: CodeHash,
    info: ModuleInfo,
    pre: InstancePre<ActionCtx>,
    memory: ModuleExport,
    init: Option<ModuleExport>,
    dispatch: Dispatch,
    /// `None` when instances of this module cannot be restored, so each action gets a fresh
    /// one.
    pristine: Option<Pristine>,
}

/// One live instance with its store.
struct Slot {
    code_hash: CodeHash,
    store: Store<ActionCtx>,
    instance: Instance,
    memory: Memory,
    /// Handles of the globals restored after each action, in `Pristine` order.
    low: Option<Global>,
    high: Option<Global>,
    globals: Vec<Global>,
}

impl Slot {
    /// Puts the instance back into its pristine state; `false` if it cannot be (its memory
    /// grew), and must then be dropped.
    fn restore(&mut self, pristine: &Pristine) -> bool {
        let (Some(low), Some(high)) = (self.low, self.high) else {
            return false;
        };
        let store = &mut self.store;
        let len = self.memory.data_size(&*store);
        if len != pristine.memory.len() {
            return false;
        }
        let wasm_low = low.get(&mut *store).i64().unwrap_or(-1) as u64;
        let wasm_high = high.get(&mut *store).i64().unwrap_or(0) as u64;
        let host = std::mem::replace(&mut store.data_mut().host_dirty, execute::NOTHING_WRITTEN);
        // Offsets past the memory are clamped: a store there trapped and wrote nothing.
        let start = (wasm_low.min(len as u64) as usize).min(host.start);
        let end = (wasm_high.min(len as u64) as usize).max(host.end).min(len);
        if start < end {
            self.memory.data_mut(&mut *store)[start..end]
                .copy_from_slice(&pristine.memory[start..end]);
        }
        let reset = low
            .set(&mut *store, Val::I64(-1))
            .and_then(|()| high.set(&mut *store, Val::I64(0)));
        if reset.is_err() {
            return false;
        }
        for (global, (_, value)) in self.globals.iter().zip(&pristine.globals) {
            if global.set(&mut *store, *value).is_err() {
                return false;
            }
        }
        true
    }
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
}

impl std::fmt::Debug for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contract")
            .field("code_hash", &hex::encode(self.code_hash))
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The engine, its linker and the module cache. Cheap to share by reference across actions.
pub struct Runtime {
    engine: Engine,
    linker: Linker<ActionCtx>,
    fingerprint: [u8; 32],
    config: RuntimeConfig,
    contracts: Mutex<HashMap<CodeHash, Arc<Contract>>>,
    warm: Mutex<Vec<Slot>>,
    counters: Counters,
}

impl Runtime {
    /// Builds the deterministic engine, registers the ABI and opens the cache directory.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let engine = engine::new_engine().map_err(|e| RuntimeError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        tally_host_api::linker::add_to_linker(&mut linker)
            .map_err(|e| RuntimeError::Engine(e.to_string()))?;
        if let Some(dir) = &config.cache_dir {
            std::fs::create_dir_all(dir).map_err(|source| RuntimeError::CacheIo {
                path: dir.clone(),
                source,
            })?;
        }
        Ok(Self {
            fingerprint: engine::fingerprint(&engine),
            engine,
            linker,
            config,
            contracts: Mutex::new(HashMap::new()),
            warm: Mutex::new(Vec::new()),
            counters: Counters::default(),
        })
    }

    /// The engine fingerprint that keys the disk cache.
    pub fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }

    /// Instances created so far (at deploy, for modules that cannot reuse one, and after a
    /// warm instance was dropped); most actions reuse a warm instance and create none.
    pub fn instantiations(&self) -> u64 {
        self.counters.instantiations.load(Ordering::Relaxed)
    }

    /// Where `prepare` found modules so far.
    pub fn cache_stats(&self) -> CacheStats {
        let c = &self.counters;
        CacheStats {
            memory_hits: c.memory_hits.load(Ordering::Relaxed),
            disk_hits: c.disk_hits.load(Ordering::Relaxed),
            disk_rejected: c.disk_rejected.load(Ordering::Relaxed),
            compiles: c.compiles.load(Ordering::Relaxed),
            disk_write_errors: c.disk_write_errors.load(Ordering::Relaxed),
        }
    }

    /// Validates `wasm` and returns it compiled, from the cheapest tier that has it.
    pub fn prepare(&self, wasm: &[u8]) -> Result<Arc<Contract>, DeployError> {
        let code_hash: CodeHash = Sha256::digest(wasm).into();
        if let Some(found) = self.lock_contracts().get(&code_hash) {
            bump(&self.counters.memory_hits);
            return Ok(found.clone());
        }
        let info = validate::validate(wasm, self.engine.get_wasm_features())?;
        let instrumented = instrument::instrument(wasm)?;
        let module = self.load_or_compile(&instrumented.wasm, &code_hash)?;
        let contract = Arc::new(self.link(code_hash, info, &instrumented, module)?);
        self.lock_contracts().insert(code_hash, contract.clone());
        Ok(contract)
    }

    fn lock_contracts(&self) -> std::sync::MutexGuard<'_, HashMap<CodeHash, Arc<Contract>>> {
        // A panic while holding the lock cannot leave the map inconsistent (single inserts).
        self.contracts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `wasm` is the instrumented module; the cache is keyed by the hash of the uploaded one
    /// (instrumentation is deterministic, and its version is part of the fingerprint).
    fn load_or_compile(&self, wasm: &[u8], code_hash: &CodeHash) -> Result<Module, DeployError> {
        let path = self
            .config
            .cache_dir
            .as_ref()
            .map(|dir| cache::entry_path(dir, code_hash));
        if let Some(path) = &path {
            if let Some(payload) = cache::read_entry(path, &self.fingerprint, code_hash) {
                // SAFETY: `Module::deserialize` trusts its input to be wasmtime's own output.
                // The payload's sha256 matched the header, the header's fingerprint matched
                // this engine, and Tally is the only writer of the cache directory, so these
                // are bytes this wasmtime version produced for this configuration.
                match unsafe { Module::deserialize(&self.engine, &payload) } {
                    Ok(module) => {
                        bump(&self.counters.disk_hits);
                        return Ok(module);
                    }
                    Err(_) => bump(&self.counters.disk_rejected),
                }
            } else if path.exists() {
                bump(&self.counters.disk_rejected);
            }
        }
        let module =
            Module::new(&self.engine, wasm).map_err(|e| DeployError::Invalid(e.to_string()))?;
        bump(&self.counters.compiles);
        if let Some(path) = &path {
            let written = module.serialize().ok().and_then(|bytes| {
                cache::write_entry(path, &self.fingerprint, code_hash, &bytes).ok()
            });
            if written.is_none() {
                bump(&self.counters.disk_write_errors);
            }
        }
        Ok(module)
    }

    fn link(
        &self,
        code_hash: CodeHash,
        info: ModuleInfo,
        instrumented: &instrument::Instrumented,
        module: Module,
    ) -> Result<Contract, DeployError> {
        let export = |name: &str| module.get_export_index(name);
        let memory = export(tally_host_api::abi::MEMORY_EXPORT).ok_or(DeployError::NoMemory)?;
        let init = if info.has_init {
            export(tally_host_api::abi::INIT_EXPORT)
        } else {
            None
        };
        let dispatch = match &info.entry {
            EntryPoints::Apply => Dispatch::Apply(
                export(tally_host_api::abi::APPLY_EXPORT).ok_or(DeployError::NoEntryPoint)?,
            ),
            EntryPoints::Legacy(handlers) => Dispatch::Legacy(
                handlers
                    .iter()
                    .filter_map(|h| Some((h.code, h.action, export(&h.export)?)))
                    .collect(),
            ),
        };
        let restore_exports = instrumented.reusable.then(|| {
            let globals = instrumented
                .mutable_globals
                .iter()
                .map(|i| export(&format!("{}{i}", instrument::GLOBAL_EXPORT_PREFIX)))
                .collect::<Option<Vec<_>>>()?;
            Some((
                export(instrument::DIRTY_LOW_EXPORT)?,
                export(instrument::DIRTY_HIGH_EXPORT)?,
                globals,
            ))
        });
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|e| DeployError::Instantiate(e.to_string()))?;
        let mut contract = Contract {
            code_hash,
            info,
            pre,
            memory,
            init,
            dispatch,
            pristine: None,
        };
        // Instantiate once now, so a module whose data segments do not fit its memory is
        // rejected at deploy rather than failing every action. The fresh instance is also the
        // pristine state that reused instances are restored to.
        let mut slot = self
            .instantiate(&contract)
            .map_err(|e| DeployError::Instantiate(e.to_string()))?;
        if let Some(Some((low, high, globals))) = restore_exports {
            let store = &mut slot.store;
            let globals = globals
                .into_iter()
                .map(|e| {
                    let global = slot
                        .instance
                        .get_module_export(&mut *store, &e)
                        .and_then(Extern::into_global)
                        .expect("instrumentation exports every mutable global");
                    (e, global.get(&mut *store))
                })
                .collect();
            contract.pristine = Some(Pristine {
                memory: slot.memory.data(&*store).to_vec(),
                low,
                high,
                globals,
            });
            slot.bind_globals(contract.pristine.as_ref().expect("just set"));
            self.put_warm(slot);
        }
        Ok(contract)
    }

    /// A fresh instance of `contract` in a new store.
    fn instantiate(&self, contract: &Contract) -> Result<Slot, RuntimeError> {
        bump(&self.counters.instantiations);
        let mut nop = NopHost;
        let mut store = Store::new(&self.engine, ActionCtx::new(&mut nop));
        let instance = contract
            .pre
            .instantiate(&mut store)
            .map_err(|e| RuntimeError::Instantiate(e.to_string()))?;
        let memory = instance
            .get_module_export(&mut store, &contract.memory)
            .and_then(Extern::into_memory)
            .ok_or_else(|| RuntimeError::Instantiate("the contract exports no memory".into()))?;
        store.data_mut().memory = Some(memory);
        let mut slot = Slot {
            code_hash: contract.code_hash,
            store,
            instance,
            memory,
            low: None,
            high: None,
            globals: Vec::new(),
        };
        if let Some(pristine) = &contract.pristine {
            slot.bind_globals(pristine);
        }
        Ok(slot)
    }

    fn lock_warm(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // Slots are pushed and popped whole, so a poisoned lock still holds consistent data.
        self.warm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A warm instance of `contract`, most recently used first.
    fn take_warm(&self, contract: &Contract) -> Option<Slot> {
        let mut warm = self.lock_warm();
        let at = warm
            .iter()
            .rposition(|slot| slot.code_hash == contract.code_hash)?;
        Some(warm.remove(at))
    }

    fn put_warm(&self, slot: Slot) {
        let mut warm = self.lock_warm();
        if warm.len() >= WARM_INSTANCES {
            warm.remove(0);
        }
        warm.push(slot);
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
        let mut slot = match contract.pristine {
            Some(_) => self.take_warm(contract),
            None => None,
        }
        .map_or_else(|| self.instantiate(contract), Ok)?;
        slot.store.data_mut().set_host(host);
        let receipt = self.run(contract, &mut slot, entry, fuel)?;
        if let Some(pristine) = &contract.pristine
            && slot.restore(pristine)
        {
            self.put_warm(slot);
        }
        Ok(receipt)
    }

    fn run(
        &self,
        contract: &Contract,
        slot: &mut Slot,
        entry: Entry,
        fuel_limit: u64,
    ) -> Result<Receipt, RuntimeError> {
        let store = &mut slot.store;
        store
            .set_fuel(fuel_limit)
            .map_err(|e| RuntimeError::Instantiate(e.to_string()))?;
        let func = match entry {
            Entry::Init => contract.init,
            Entry::Action { code, action, .. } => match &contract.dispatch {
                Dispatch::Apply(export) => Some(*export),
                Dispatch::Legacy(handlers) => handlers
                    .iter()
                    .find(|(c, a, _)| *c == code && *a == action)
                    .map(|(_, _, export)| *export),
            },
        };
        let outcome = match (func, entry) {
            (None, Entry::Init) => Ok(()),
            (None, Entry::Action { code, action, .. }) => Err(Abort::new(
                AbortCode::NoHandler,
                format!("the contract has no handler for action {action} of {code}"),
            )),
            (Some(export), entry) => {
                let func = slot
                    .instance
                    .get_module_export(&mut *store, &export)
                    .and_then(Extern::into_func)
                    .expect("validated export is a function");
                let result = match entry {
                    Entry::Action {
                        receiver,
                        code,
                        action,
                    } if matches!(contract.dispatch, Dispatch::Apply(_)) => {
                        func.typed::<(i64, i64, i64), ()>(&*store).and_then(|f| {
                            f.call(
                                &mut *store,
                                (receiver.0 as i64, code.0 as i64, action.0 as i64),
                            )
                        })
                    }
                    _ => func
                        .typed::<(), ()>(&*store)
                        .and_then(|f| f.call(&mut *store, ())),
                };
                match result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(execute::classify(e, fuel_limit).map_err(RuntimeError::Host)?),
                }
            }
        };
        let fuel_used = fuel_limit - store.get_fuel().unwrap_or(0);
        let console = std::mem::take(&mut store.data_mut().console);
        Ok(Receipt {
            outcome: match outcome {
                Ok(()) => Outcome::Success,
                Err(abort) => Outcome::Failure(abort),
            },
            fuel_used,
            console,
        })
    }
}

impl Slot {
    /// Looks up the handles of the globals `pristine` restores.
    fn bind_globals(&mut self, pristine: &Pristine) {
        let store = &mut self.store;
        let mut global = |export: &ModuleExport| {
            self.instance
                .get_module_export(&mut *store, export)
                .and_then(Extern::into_global)
        };
        self.low = global(&pristine.low);
        self.high = global(&pristine.high);
        self.globals = pristine
            .globals
            .iter()
            .filter_map(|(export, _)| global(export))
            .collect();
    }
}

/// A host with no state, for the instantiation check at deploy (no code runs there).
struct NopHost;

impl Host for NopHost {
    fn message(&self) -> &[u8] {
        &[]
    }
    fn load(&mut self, _key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(None)
    }
    fn store(&mut self, _key: &[u8], _value: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn remove(&mut self, _key: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _account: Name) -> bool {
        false
    }
}
