//! A prepared contract: its module linked once, every export it is driven through resolved
//! to an index, and the pristine state its instances are restored to.

use tally_host_api::abi::{INIT_EXPORT, MEMORY_EXPORT, MIGRATE_EXPORT, QUERY_EXPORT};
use tally_host_api::limits::{FUEL_PER_BYTE, FUEL_PER_FRESH_INSTANCE};
use wasmtime::{InstancePre, Module, ModuleExport};

use crate::error::{DeployError, PrepareError, RuntimeError};
use crate::execute::ActionCtx;
use crate::instance::{Instantiation, Pristine};
use crate::instrument::{self, Instrumented};
use crate::validate::{EntryPoints, ModuleInfo, Validated};
use crate::{CodeHash, Runtime, trace};

/// What a prepared contract costs in memory besides its code and snapshot: the instance
/// template, export tables and bookkeeping, rounded up.
const CONTRACT_OVERHEAD_BYTES: usize = 16 * 1024;

/// A validated, compiled contract, ready to instantiate.
pub struct Contract {
    pub(crate) code_hash: CodeHash,
    info: ModuleInfo,
    pub(crate) pre: InstancePre<ActionCtx>,
    pub(crate) exports: Exports,
    /// `None` when instances of this module cannot be restored, so each action gets a fresh
    /// one (and pays [`Contract::fresh_instance_fuel`]).
    pub(crate) pristine: Option<Pristine>,
    /// Fuel each action pays up front when it needs a fresh instance: deterministic, computed
    /// from the module at deploy.
    pub(crate) fresh_instance_fuel: u64,
    /// Bytes it holds in memory, for the contract cache's bound.
    weight: usize,
    /// Names and offsets of the uploaded module, when the runtime traces.
    pub(crate) debug: Option<Box<trace::DebugInfo>>,
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

    /// What a fresh instance of it costs in fuel: [`FUEL_PER_FRESH_INSTANCE`], its data
    /// segments by the byte and its initialisers. Deterministic, computed at deploy.
    ///
    /// [`FUEL_PER_FRESH_INSTANCE`]: tally_host_api::limits::FUEL_PER_FRESH_INSTANCE
    pub fn fresh_instance_fuel(&self) -> u64 {
        self.fresh_instance_fuel
    }

    /// Whether its instances are restored and reused between actions; if not, every action
    /// pays [`Contract::fresh_instance_fuel`] itself.
    pub fn reuses_instances(&self) -> bool {
        self.pristine.is_some()
    }

    /// Bytes it holds in memory: its compiled code, its snapshot and bookkeeping.
    pub fn weight(&self) -> usize {
        self.weight
    }

    /// Keeps the names and offsets of the uploaded module, for traces.
    pub(crate) fn attach_debug(&mut self, debug: trace::DebugInfo) {
        self.weight += debug.bytes();
        self.debug = Some(Box::new(debug));
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

/// The exports an instance is driven through, resolved to indices once per module. Entry
/// points are the instrumentation's wrappers ([`instrument::ENTRY_EXPORT_PREFIX`]), which
/// reset the instance's globals and start its stack where the caller says.
pub(crate) struct Exports {
    pub memory: ModuleExport,
    /// The instrumentation's dirty-chunk map.
    pub dirty_map: ModuleExport,
    /// The instrumentation's count of chunks marked since the last charge point, read after
    /// a failed action (a successful one returns it from its wrapper).
    pub new_chunks: ModuleExport,
    /// The instrumentation's stack-height global, where a call's callee starts (its caller's
    /// height, so one budget bounds the whole call stack).
    pub stack: ModuleExport,
    /// The module's own stack pointer (its global 0, exported as a mutable global) and where
    /// it starts, to name a stack overflow ([`instrument::ShadowStack`]).
    pub shadow_stack: Option<(ModuleExport, u32)>,
    pub init: Option<ModuleExport>,
    pub query: Option<ModuleExport>,
    pub migrate: Option<ModuleExport>,
    pub entry: EntryPoints<ModuleExport>,
    /// Whether instances of the module can be restored after an action and reused.
    pub reusable: bool,
}

impl Exports {
    /// Resolves every export of `module` the runtime uses. Validation guarantees the
    /// contract's own and instrumentation adds the rest, so a missing one is a bug of this
    /// node, not the module's fault.
    fn resolve(
        module: &Module,
        info: &ModuleInfo,
        instrumented: &Instrumented,
    ) -> Result<Self, RuntimeError> {
        let export = |name: &str| {
            module.get_export_index(name).ok_or_else(|| {
                RuntimeError::Engine(format!("instrumented module lacks export {name}"))
            })
        };
        let enter = |name: &str| export(&format!("{}{name}", instrument::ENTRY_EXPORT_PREFIX));
        Ok(Self {
            memory: export(MEMORY_EXPORT)?,
            dirty_map: export(instrument::DIRTY_MAP_EXPORT)?,
            new_chunks: export(instrument::NEW_CHUNKS_EXPORT)?,
            stack: export(instrument::STACK_EXPORT)?,
            shadow_stack: instrumented
                .shadow_stack
                .map(|sp| {
                    let global = export(&format!("{}0", instrument::GLOBAL_EXPORT_PREFIX))?;
                    Ok::<_, RuntimeError>((global, sp.top))
                })
                .transpose()?,
            init: info.has_init.then(|| enter(INIT_EXPORT)).transpose()?,
            query: info.has_query.then(|| enter(QUERY_EXPORT)).transpose()?,
            migrate: info
                .has_migrate
                .then(|| enter(MIGRATE_EXPORT))
                .transpose()?,
            entry: info
                .entry
                .try_map(&mut (), |(), name| enter(name), |(), name| enter(name))?,
            reusable: instrumented.reusable,
        })
    }
}

impl Runtime {
    /// Links a compiled module into a contract, and instantiates it once.
    pub(crate) fn link(
        &self,
        code_hash: CodeHash,
        validated: Validated,
        instrumented: &Instrumented,
        module: Module,
    ) -> Result<Contract, PrepareError> {
        let exports = Exports::resolve(&module, &validated.info, instrumented)?;
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|e| RuntimeError::Instantiate(format!("{e:#}")))?;
        let mut contract = Contract {
            code_hash,
            info: validated.info,
            pre,
            exports,
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
}
