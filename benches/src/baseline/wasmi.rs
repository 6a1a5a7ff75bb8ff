//! The `wasmi` baseline of `tally bench`: the same contract run by the wasmi interpreter
//! instead of wasmtime, and nothing else different, so "Tally vs wasmi" compares engines.
//!
//! Like for like with the runtime (issue 11):
//! - **The same module.** wasmi runs the module as [`tally_runtime::instrument::rewrite`]
//!   instruments it for wasmtime: the same dirty-chunk tracking, the same deterministic stack
//!   limit, the same charges for `memory.grow`.
//! - **The same host functions.** Not copies: the engine-free functions of
//!   [`tally_host_api::imports`] (the ABI's and the instrumentation's metering imports),
//!   registered by the same macros as the runtime's wasmtime linker, over a wasmi
//!   [`Guest`](tally_host_api::imports::Guest).
//!   Each registration's type is checked against [`tally_host_api::abi::IMPORTS`].
//! - **The same fuel budget** ([`FUEL_PER_ACTION`]) and the same charges after the action,
//!   counted by the same code ([`tally_host_api::memory::DirtyChunks::collect`]). (wasmi
//!   counts fuel per instruction in its own way, so the totals differ a little.)
//! - **The same instance reuse.** A warm instance is reused across actions and restored
//!   after each, as the runtime does: the dirtied chunks (from the instrumentation's map and
//!   the host's own writes) copied back from a snapshot of the fresh instance by the same
//!   code ([`tally_host_api::memory::Snapshot`]), and every mutable global reset. An instance whose memory grew is dropped, and a
//!   module that cannot be restored gets a fresh instance per action, paying
//!   [`FUEL_PER_FRESH_INSTANCE`] up front. A fresh instance per action in both engines would
//!   also be fair, but it is not what Tally does, and it would measure instantiation.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::workload::{SIMPLECOIN, TRANSFER};
use anyhow::Context;
use tally_chain::NativeContract;
use tally_host_api::abi::{self, IMPORTS, MODULE, ValType as AbiType};
use tally_host_api::imports::{ActionData, CallState};
use tally_host_api::limits::{FUEL_PER_ACTION, FUEL_PER_FRESH_INSTANCE, INSTANTIATE_FUEL};
use tally_host_api::memory::Snapshot;
use tally_host_api::{Abort, AbortCode, Host, HostError, NodeFault};
use tally_runtime::instrument::{
    DIRTY_MAP_EXPORT, NEW_CHUNKS_EXPORT, PRIVATE_IMPORTS, PRIVATE_MODULE, STACK_EXPORT,
};
use wasmi::{Caller, Config, Engine, Global, Linker, Memory, Module, Store, TypedFunc, Val};

/// A host error carried through wasmi as a trap, to come back out unchanged.
#[derive(Debug)]
struct Trapped(HostError);

impl std::fmt::Display for Trapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            HostError::Abort(abort) => write!(f, "{abort:?}"),
            HostError::Fault(fault) => write!(f, "{fault}"),
        }
    }
}

impl wasmi::errors::HostError for Trapped {}

fn trap(e: HostError) -> wasmi::Error {
    wasmi::Error::host(Trapped(e))
}

/// A wasmi failure that is the node's, not the contract's.
#[derive(Debug, thiserror::Error)]
#[error("wasmi: {0}")]
struct WasmiError(String);

fn wasmi_fault(e: wasmi::Error) -> HostError {
    NodeFault::new(WasmiError(e.to_string())).into()
}

/// The store data of an instance. The host is borrowed only for one action, so it is held as
/// a pointer that is set just before the call and cleared right after; an instance that
/// unwinds with it set is never reused (it is owned by the unwinding call, not the pool).
#[derive(Default)]
struct Ctx {
    host: Option<NonNull<dyn Host>>,
    memory: Option<Memory>,
    dirty_map: Option<Memory>,
    state: CallState,
}

// SAFETY: the pointer is only used by the thread running the action, while it is set.
unsafe impl Send for Ctx {}

#[derive(Debug, thiserror::Error)]
#[error("a host function ran while no host was lent to the wasmi instance")]
struct NoHost;

impl ActionData for Ctx {
    fn host(&mut self) -> Result<&mut dyn Host, HostError> {
        // SAFETY: see the type's docs: a set pointer is valid for the whole action.
        let host = self.host.map(|host| unsafe { &mut *host.as_ptr() });
        host.ok_or_else(|| NodeFault::new(NoHost).into())
    }

    fn state(&mut self) -> &mut CallState {
        &mut self.state
    }
}

/// A wasmi host call as a [`Guest`](tally_host_api::imports::Guest), so the host functions
/// are the runtime's own.
struct Wasmi<'a, 'c>(&'a mut Caller<'c, Ctx>);

// The baseline runs no calls between contracts, so no callee needs the stack height.
tally_host_api::impl_guest!([] Wasmi<'_, '_>, Ctx, wasmi_fault,
    memory: |ctx: &Ctx| ctx.memory, dirty_map: |ctx: &Ctx| ctx.dirty_map,
    stack_height: |_: &mut Caller<'_, Ctx>| 0);

/// A linker with every import of [`IMPORTS`] and of the instrumentation, each checked
/// against its table.
fn linker(engine: &Engine) -> anyhow::Result<Linker<Ctx>> {
    let mut linker = Linker::<Ctx>::new(engine);
    tally_host_api::register_imports!(linker, Caller<'_, Ctx>, Wasmi, trap);
    tally_host_api::register_metering_imports!(
        linker,
        PRIVATE_MODULE,
        Caller<'_, Ctx>,
        Wasmi,
        trap
    );
    // wasmi checks each import's type when it links a module: link one that imports every
    // function of both tables with the type the table gives it.
    let wat_type = |t: &AbiType| match t {
        AbiType::I32 => "i32",
        AbiType::I64 => "i64",
    };
    let mut wat = String::from("(module");
    for import in IMPORTS {
        let params: Vec<_> = import.params.iter().map(wat_type).collect();
        let results: Vec<_> = import.results.iter().map(wat_type).collect();
        wat += &format!(
            " (import \"{MODULE}\" \"{}\" (func (param {}) (result {})))",
            import.name,
            params.join(" "),
            results.join(" ")
        );
    }
    for (name, params) in PRIVATE_IMPORTS {
        wat += &format!(
            " (import \"{PRIVATE_MODULE}\" \"{name}\" (func (param{})))",
            " i32".repeat(params)
        );
    }
    wat += ")";
    let probe = Module::new(engine, &wat::parse_str(&wat)?[..])?;
    let mut store = Store::new(engine, Ctx::default());
    linker
        .instantiate_and_start(&mut store, &probe)
        .context("the wasmi baseline's host functions do not have the types of their tables")?;
    Ok(linker)
}

/// The contract's state right after instantiation.
struct Pristine {
    memory: Snapshot,
    globals: Vec<Val>,
}

/// One live instance.
struct Slot {
    store: Store<Ctx>,
    memory: Memory,
    dirty_map: Memory,
    new_chunks: Global,
    stack: Global,
    globals: Vec<Global>,
    transfer: Transfer,
}

/// How an action enters the contract: simplecoin's 2017 handler, or `apply`.
enum Transfer {
    Legacy(TypedFunc<(), ()>),
    Apply(TypedFunc<(i64, i64, i64), ()>),
}

/// The transfer handler of the 2017 simplecoin.
const LEGACY_TRANSFER: &str = "onApply_Transfer_simplecoin";

/// What the executor shares between actions and threads.
struct Shared {
    engine: Engine,
    module: Module,
    linker: Linker<Ctx>,
    mutable_globals: Vec<String>,
    reusable: bool,
    /// Set once the first instance is made.
    pristine: Mutex<Option<Arc<Pristine>>>,
    /// Warm instances; an action takes one (or makes one) and puts it back restored.
    warm: Mutex<Vec<Slot>>,
}

impl Shared {
    fn instantiate(&self) -> Result<Slot, wasmi::Error> {
        let mut store = Store::new(&self.engine, Ctx::default());
        store.set_fuel(INSTANTIATE_FUEL)?;
        let instance = self
            .linker
            .instantiate_and_start(&mut store, &self.module)?;
        let missing =
            |what: &str| wasmi::Error::new(format!("the instrumented module lacks {what}"));
        let memory = instance
            .get_memory(&store, abi::MEMORY_EXPORT)
            .ok_or_else(|| missing("its memory"))?;
        let dirty_map = instance
            .get_memory(&store, DIRTY_MAP_EXPORT)
            .ok_or_else(|| missing(DIRTY_MAP_EXPORT))?;
        let global = |name: &str| {
            instance
                .get_global(&store, name)
                .ok_or_else(|| missing(name))
        };
        let new_chunks = global(NEW_CHUNKS_EXPORT)?;
        let stack = global(STACK_EXPORT)?;
        let globals = self
            .mutable_globals
            .iter()
            .map(|name| global(name))
            .collect::<Result<Vec<_>, _>>()?;
        let transfer = match instance.get_typed_func::<(), ()>(&store, LEGACY_TRANSFER) {
            Ok(f) => Transfer::Legacy(f),
            Err(_) => Transfer::Apply(instance.get_typed_func(&store, abi::APPLY_EXPORT)?),
        };
        store.data_mut().memory = Some(memory);
        store.data_mut().dirty_map = Some(dirty_map);
        let slot = Slot {
            store,
            memory,
            dirty_map,
            new_chunks,
            stack,
            globals,
            transfer,
        };
        let mut pristine = self.pristine.lock().expect("not poisoned");
        if pristine.is_none() {
            *pristine = Some(Arc::new(Pristine {
                memory: Snapshot::take(slot.memory.data(&slot.store)),
                globals: slot.globals.iter().map(|g| g.get(&slot.store)).collect(),
            }));
        }
        Ok(slot)
    }

    /// Runs one transfer against `host`.
    fn execute(&self, host: &mut dyn Host) -> Result<(), HostError> {
        let warm = if self.reusable {
            self.warm.lock().expect("not poisoned").pop()
        } else {
            None
        };
        let (mut slot, up_front) = match warm {
            Some(slot) => (slot, 0),
            None => {
                let slot = self
                    .instantiate()
                    .map_err(|e| Abort::new(AbortCode::Trap, format!("instantiation: {e}")))?;
                (
                    slot,
                    if self.reusable {
                        0
                    } else {
                        FUEL_PER_FRESH_INSTANCE
                    },
                )
            }
        };
        let host: NonNull<dyn Host + '_> = NonNull::from(host);
        // SAFETY: only the lifetime bound changes; the pointer is cleared below, before the
        // borrow ends, and a slot that unwinds with it set is dropped, never reused.
        let host: NonNull<dyn Host + 'static> = unsafe { std::mem::transmute(host) };
        slot.store.data_mut().host = Some(host);
        slot.store.data_mut().state.console.clear();
        let result = run(&mut slot, up_front);
        slot.store.data_mut().host = None;
        let (result, owed) = match result {
            Ok(()) => (Ok(()), collect_dirty(&mut slot, false)),
            Err(e) => (Err(e), collect_dirty(&mut slot, true)),
        };
        let left = slot.store.get_fuel().unwrap_or(0);
        let result = match result {
            Ok(()) if owed > left => Err(HostError::from(Abort::out_of_fuel(FUEL_PER_ACTION))),
            other => other,
        };
        if self.reusable {
            let pristine = self.pristine.lock().expect("not poisoned").clone();
            if let Some(pristine) = pristine
                && restore(&mut slot, &pristine)
            {
                self.warm.lock().expect("not poisoned").push(slot);
            }
        }
        result
    }
}

/// Calls the transfer with the action's fuel, of which `up_front` is charged first.
fn run(slot: &mut Slot, up_front: u64) -> Result<(), HostError> {
    let out_of_fuel = || HostError::from(Abort::out_of_fuel(FUEL_PER_ACTION));
    let fuel = FUEL_PER_ACTION
        .checked_sub(up_front)
        .ok_or_else(out_of_fuel)?;
    slot.store
        .set_fuel(fuel)
        .map_err(|e| NodeFault::new(WasmiError(e.to_string())))?;
    let (coin, transfer) = (SIMPLECOIN.0 as i64, TRANSFER.0 as i64);
    let called = match &slot.transfer {
        Transfer::Legacy(f) => f.call(&mut slot.store, ()),
        Transfer::Apply(f) => f.call(&mut slot.store, (coin, coin, transfer)),
    };
    called.map_err(|e| {
        if matches!(e.as_trap_code(), Some(wasmi::TrapCode::OutOfFuel)) {
            return out_of_fuel();
        }
        match e.downcast::<Trapped>() {
            Some(Trapped(e)) => e,
            // Any other trap fails the action, as a wasmtime trap does; wasmi's text never
            // reaches the receipt.
            None => Abort::new(AbortCode::Trap, "the contract trapped").into(),
        }
    })
}

/// After an action: the fuel still owed for the memory it dirtied and for reading the map,
/// counted by the runtime's own rules ([`tally_host_api::memory::DirtyChunks::collect`]),
/// which also gather every dirtied chunk for [`restore`].
fn collect_dirty(slot: &mut Slot, failed: bool) -> u64 {
    let counted = slot.new_chunks.get(&slot.store).i32().unwrap_or(0);
    slot.new_chunks
        .set(&mut slot.store, Val::I32(0))
        .expect("the count of new chunks is an i32 global");
    let memory_len = slot.memory.data(&slot.store).len();
    let (map, ctx) = slot.dirty_map.data_and_store_mut(&mut slot.store);
    let pending = u64::from(counted as u32);
    ctx.state.dirty.collect(map, memory_len, failed, pending)
}

/// Puts the instance back into its pristine state, given the chunks [`collect_dirty`] found;
/// `false` if it cannot be (its memory grew), and must then be dropped.
fn restore(slot: &mut Slot, pristine: &Pristine) -> bool {
    let (memory, ctx) = slot.memory.data_and_store_mut(&mut slot.store);
    let restored = pristine.memory.restore(memory, &ctx.state.dirty);
    let (map, ctx) = slot.dirty_map.data_and_store_mut(&mut slot.store);
    ctx.state.dirty.unmark(map);
    ctx.state.dirty.clear();
    let stack_reset = slot.stack.set(&mut slot.store, Val::I32(0)).is_ok();
    restored
        && stack_reset
        && (slot.globals.iter().zip(&pristine.globals))
            .all(|(global, value)| global.set(&mut slot.store, value.clone()).is_ok())
}

/// An executor that runs the bench contract `wasm`'s transfer in wasmi, instrumented,
/// priced and restored as the runtime does (see the module's docs).
///
/// # Errors
/// The contract breaks an upload rule, or wasmi cannot load it.
pub fn executor(wasm: &[u8]) -> anyhow::Result<NativeContract> {
    let rewritten =
        tally_runtime::instrument::rewrite(wasm).context("the contract is not a valid upload")?;
    let mut config = Config::default();
    config.consume_fuel(true);
    let engine = Engine::new(&config);
    let module =
        Module::new(&engine, &rewritten.wasm[..]).context("wasmi cannot load the contract")?;
    let linker = linker(&engine)?;
    let shared = Arc::new(Shared {
        engine,
        module,
        linker,
        mutable_globals: rewritten.mutable_globals,
        reusable: rewritten.reusable,
        pristine: Mutex::new(None),
        warm: Mutex::new(Vec::new()),
    });
    // Instantiate once now, as the runtime does at deploy: the snapshot comes from it.
    let slot = shared
        .instantiate()
        .map_err(|e| anyhow::anyhow!("wasmi cannot instantiate the contract: {e}"))?;
    if shared.reusable {
        shared.warm.lock().expect("not poisoned").push(slot);
    }
    Ok(Arc::new(move |host: &mut dyn Host| shared.execute(host)))
}
