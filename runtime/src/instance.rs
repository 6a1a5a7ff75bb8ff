//! Live instances: a slot per instance with its store and typed entry points, the pristine
//! state it is restored to after every action, and how an action gets one (warm, or fresh
//! from the engine's pool).

use tally_host_api::limits::{DIRTY_CHUNK_BYTES, INSTANTIATE_FUEL};
use tally_host_api::memory::Snapshot;
use wasmtime::{Extern, Instance, Memory, ModuleExport, Store, Trap, TypedFunc};

use crate::contract::{Contract, Exports};
use crate::counters::bump;
use crate::error::{Resource, RuntimeError};
use crate::execute::ActionCtx;
use crate::pool::WARM_INSTANCES;
use crate::validate::EntryPoints;
use crate::{CodeHash, Runtime};

/// Bytes of memory a warm instance may keep resident beyond its snapshot. Restored chunks stay
/// mapped, so an instance that once dirtied many would hold them for as long as it stays
/// warm; past this it is dropped instead, and the instance pool returns its memory to the OS.
/// With [`WARM_INSTANCES`] slots, warm instances hold at most 32 x 4 MiB.
const WARM_RESIDENT_BYTES: u64 = 4 * 1024 * 1024;

const _: () = assert!(WARM_INSTANCES as u64 * WARM_RESIDENT_BYTES <= 128 * 1024 * 1024);

/// The contract's memory right after instantiation, kept sparse. (Its globals need no
/// snapshot: every entry wrapper resets them to their initialisers.)
pub(crate) struct Pristine {
    memory: Snapshot,
}

impl Pristine {
    /// Heap bytes the snapshot holds.
    pub(crate) fn bytes(&self) -> usize {
        self.memory.bytes()
    }
}

/// An entry wrapper: the stack height to start at and the entry's parameters, returning the
/// chunks marked since the last charge point ([`crate::instrument`]).
pub(crate) type EntryFn<P> = TypedFunc<P, i32>;

/// The action entry points of an instance, type-checked once.
pub(crate) type TypedEntryPoints = EntryPoints<EntryFn<(i32, i64, i64, i64)>, EntryFn<i32>>;

/// The entry points of one instance, type-checked once.
pub(crate) struct EntryFns {
    pub init: Option<EntryFn<i32>>,
    pub query: Option<EntryFn<(i32, i64, i64)>>,
    pub migrate: Option<EntryFn<i32>>,
    pub actions: TypedEntryPoints,
}

/// One live instance with its store. Boxed wherever it is kept or handed over: the warm
/// pool moves slots on every action, and a pointer moves for much less than the store, the
/// entry points and the bookkeeping (memmove was 18% of an empty action with slots moved by
/// value).
pub(crate) struct Slot {
    pub code_hash: CodeHash,
    pub store: Store<ActionCtx>,
    pub memory: Memory,
    pub entries: EntryFns,
    /// The instrumentation's dirty-chunk map, when the instance can be restored.
    restorable: Option<Memory>,
    /// Chunks this instance has dirtied since it was created, one bit each; they stay
    /// resident.
    resident: Vec<u64>,
    resident_chunks: u64,
}

/// Looks up a function export and checks its type.
fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    store: &mut Store<ActionCtx>,
    instance: &Instance,
    export: &ModuleExport,
) -> Option<TypedFunc<P, R>> {
    instance
        .get_module_export(&mut *store, export)
        .and_then(Extern::into_func)?
        .typed::<P, R>(&*store)
        .ok()
}

impl Slot {
    /// Wraps a fresh instance, resolving its entry points once. `None` if an export that
    /// validation guaranteed is missing (a runtime bug).
    pub(crate) fn new(
        code_hash: CodeHash,
        mut store: Store<ActionCtx>,
        instance: Instance,
        exports: &Exports,
    ) -> Option<Box<Self>> {
        let mut get = |export: &ModuleExport| instance.get_module_export(&mut store, export);
        let memory = get(&exports.memory).and_then(Extern::into_memory)?;
        let dirty_map = get(&exports.dirty_map).and_then(Extern::into_memory)?;
        let new_chunks = get(&exports.new_chunks).and_then(Extern::into_global)?;
        let stack = get(&exports.stack).and_then(Extern::into_global)?;
        let shadow_stack = match &exports.shadow_stack {
            Some((export, top)) => Some((get(export).and_then(Extern::into_global)?, *top)),
            None => None,
        };
        let ctx = store.data_mut();
        ctx.memory = Some(memory);
        ctx.dirty_map = Some(dirty_map);
        ctx.new_chunks = Some(new_chunks);
        ctx.stack = Some(stack);
        ctx.shadow_stack = shadow_stack;
        let init = match &exports.init {
            Some(export) => Some(typed(&mut store, &instance, export)?),
            None => None,
        };
        let query = match &exports.query {
            Some(export) => Some(typed(&mut store, &instance, export)?),
            None => None,
        };
        let migrate = match &exports.migrate {
            Some(export) => Some(typed(&mut store, &instance, export)?),
            None => None,
        };
        let entry = exports.entry.try_map(
            &mut store,
            |store, export| typed(store, &instance, export).ok_or(()),
            |store, export| typed(store, &instance, export).ok_or(()),
        );
        Some(Box::new(Self {
            code_hash,
            store,
            memory,
            entries: EntryFns {
                init,
                query,
                migrate,
                actions: entry.ok()?,
            },
            restorable: exports.reusable.then_some(dirty_map),
            resident: Vec::new(),
            resident_chunks: 0,
        }))
    }

    /// The snapshot of this (fresh) instance, if it can be restored.
    pub(crate) fn snapshot(&mut self) -> Option<Pristine> {
        self.restorable?;
        Some(Pristine {
            memory: Snapshot::take(self.memory.data(&self.store)),
        })
    }

    /// Puts the instance's memory back into its pristine state, given the chunks the action
    /// dirtied ([`crate::execute::collect_dirty`]); `false` if it cannot be (its memory grew,
    /// or it would keep too much memory resident), and must then be dropped. Its globals are
    /// left as the action left them: the next entry wrapper resets them.
    pub(crate) fn restore(&mut self, pristine: &Pristine) -> bool {
        let Some(map) = self.restorable else {
            return false;
        };
        let store = &mut self.store;
        let (memory, ctx) = self.memory.data_and_store_mut(&mut *store);
        let fits = pristine.memory.restore(memory, &ctx.state.dirty);
        let (map, ctx) = map.data_and_store_mut(&mut *store);
        ctx.state.dirty.unmark(map);
        for &chunk in ctx.state.dirty.chunks() {
            let chunk = chunk as usize;
            if self.resident.len() <= chunk / 64 {
                self.resident.resize(chunk / 64 + 1, 0);
            }
            if self.resident[chunk / 64] & (1 << (chunk % 64)) == 0 {
                self.resident[chunk / 64] |= 1 << (chunk % 64);
                self.resident_chunks += 1;
            }
        }
        ctx.state.dirty.clear();
        fits && self.resident_chunks * DIRTY_CHUNK_BYTES <= WARM_RESIDENT_BYTES
    }
}

/// Why an instantiation failed.
pub(crate) enum Instantiation {
    /// The module's doing: the same on every node.
    Module(String),
    /// The node's.
    Node(RuntimeError),
}

impl Runtime {
    /// A fresh instance of `contract` in a new store, and the fuel its instantiation used.
    ///
    /// Warm instances are only a cache: when they fill the pool they are dropped to make
    /// room, so a caller running one action at a time never finds the pool exhausted. Only
    /// when running actions hold every slot does it fail, with [`RuntimeError::Exhausted`].
    pub(crate) fn instantiate(
        &self,
        contract: &Contract,
    ) -> Result<(Box<Slot>, u64), Instantiation> {
        match self.try_instantiate(contract) {
            Err(Instantiation::Node(RuntimeError::Exhausted { .. })) if self.warm.clear() => {
                self.try_instantiate(contract)
            }
            other => other,
        }
    }

    fn try_instantiate(&self, contract: &Contract) -> Result<(Box<Slot>, u64), Instantiation> {
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

    /// An instance of `contract` for one action, warm if one is, and the fuel the action pays
    /// for it up front.
    pub(crate) fn acquire(&self, contract: &Contract) -> Result<(Box<Slot>, u64), RuntimeError> {
        if contract.pristine.is_some()
            && let Some(slot) = self.warm.take(&contract.code_hash)
        {
            return Ok((slot, 0));
        }
        let (slot, _) = self.instantiate(contract).map_err(|e| match e {
            Instantiation::Module(why) => RuntimeError::Instantiate(why),
            Instantiation::Node(e) => e,
        })?;
        // A reusable module's fresh instance is the node's business (its warm one was
        // evicted); a module that needs one per action pays for it, the same on every node.
        let up_front = match contract.pristine {
            Some(_) => 0,
            None => contract.fresh_instance_fuel,
        };
        Ok((slot, up_front))
    }

    /// After an action: keeps `slot` warm if it can be restored to `contract`'s pristine
    /// state, or drops it.
    pub(crate) fn release(&self, contract: &Contract, mut slot: Box<Slot>) {
        if let Some(pristine) = &contract.pristine
            && slot.restore(pristine)
        {
            self.warm.put(slot);
        }
    }
}
