//! The `wasmi` baseline of `tally bench`: the same contract run by the wasmi interpreter
//! instead of wasmtime, and nothing else different, so "Tally vs wasmi" compares engines.
//!
//! Like for like with the runtime (issue 11):
//! - **The same module.** wasmi runs the module as [`tally_runtime::instrument::rewrite`]
//!   instruments it for wasmtime: the same dirty-chunk tracking, the same deterministic stack
//!   limit, the same charges for `memory.grow`.
//! - **The same host functions.** They are registered from the one table,
//!   [`tally_host_api::abi::IMPORTS`] (an import this file does not implement fails the
//!   linker, and each registration's type is checked against the table's), with the table's
//!   [`Charge`]s, the same length limits and bounds checks, and the same errors as
//!   `tally_host_api::linker`. The private imports of the instrumentation charge what the
//!   runtime's do.
//! - **The same fuel budget** ([`FUEL_PER_ACTION`]) and the same charges after the action:
//!   [`FUEL_PER_DIRTY_CHUNK`] per chunk not yet paid for, [`FUEL_PER_MEMORY_PAGE`] per page.
//!   (wasmi counts fuel per instruction in its own way, so the totals differ a little.)
//! - **The same instance reuse.** A warm instance is reused across actions and restored
//!   after each, as the runtime does: the dirtied chunks (from the instrumentation's map and
//!   the host's own writes) copied back from a snapshot of the fresh instance, 16 bytes past
//!   each, and every mutable global reset. An instance whose memory grew is dropped, and a
//!   module that cannot be restored gets a fresh instance per action, paying
//!   [`FUEL_PER_FRESH_INSTANCE`] up front. A fresh instance per action in both engines would
//!   also be fair, but it is not what Tally does, and it would measure instantiation.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::workload::{SIMPLECOIN, TRANSFER};
use anyhow::Context;
use tally_chain::NativeContract;
use tally_host_api::abi::{self, Charge, IMPORTS, MODULE, ValType as AbiType};
use tally_host_api::limits::{
    DIRTY_CHUNK_BYTES, FUEL_PER_ACTION, FUEL_PER_DIRTY_CHUNK, FUEL_PER_FRESH_INSTANCE,
    FUEL_PER_MEMORY_GROW, FUEL_PER_MEMORY_PAGE, INSTANTIATE_FUEL, MAX_ASSERT_MESSAGE_LEN,
    MAX_CONSOLE_LEN, MAX_KEY_LEN, MAX_STACK_BYTES, MAX_VALUE_LEN, PAGE_SIZE,
};
use tally_host_api::{Abort, AbortCode, Host, HostError, Name, NodeFault, Upsert};
use tally_runtime::instrument::{
    DIRTY_MAP_EXPORT, NEW_CHUNKS_EXPORT, PRIVATE_IMPORTS, PRIVATE_MODULE, STACK_EXPORT,
};
use wasmi::{Caller, Config, Engine, Global, Linker, Memory, Module, Store, TypedFunc, Val};

/// Bytes restored past the end of each dirty chunk, as the runtime does: a store is marked
/// by the chunk of its first byte, and the widest store writes 16 bytes.
const CHUNK_OVERLAP: usize = 16;

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

fn trap(e: impl Into<HostError>) -> wasmi::Error {
    wasmi::Error::host(Trapped(e.into()))
}

fn abort(code: AbortCode, message: impl Into<String>) -> wasmi::Error {
    trap(Abort::new(code, message))
}

/// The store data of an instance. The host is borrowed only for one action, so it is held as
/// a pointer that is set just before the call and cleared right after; an instance that
/// unwinds with it set is never reused (it is owned by the unwinding call, not the pool).
struct Ctx {
    host: Option<NonNull<dyn Host>>,
    memory: Option<Memory>,
    dirty_map: Option<Memory>,
    /// Chunks the host wrote into the contract's memory (wasm marks its own in the map).
    host_chunks: Vec<u32>,
    /// Console bytes printed by this action, bounded like the runtime's console.
    console: usize,
}

// SAFETY: the pointer is only used by the thread running the action, while it is set.
unsafe impl Send for Ctx {}

#[derive(Debug, thiserror::Error)]
#[error("a host function ran while no host was lent to the wasmi instance")]
struct NoHost;

impl Ctx {
    fn host(&mut self) -> Result<&mut dyn Host, wasmi::Error> {
        match self.host {
            // SAFETY: see the type's docs: a set pointer is valid for the whole action.
            Some(host) => Ok(unsafe { &mut *host.as_ptr() }),
            None => Err(trap(NodeFault::new(NoHost))),
        }
    }

    fn wrote(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        let chunk = DIRTY_CHUNK_BYTES as usize;
        self.host_chunks
            .extend((range.start / chunk) as u32..range.end.div_ceil(chunk) as u32);
    }
}

/// Takes `amount` fuel from the running action, or aborts it (with no fuel left).
fn charge(caller: &mut Caller<'_, Ctx>, amount: u64) -> Result<(), wasmi::Error> {
    let left = caller.get_fuel()?;
    match left.checked_sub(amount) {
        Some(rest) => caller.set_fuel(rest),
        None => {
            caller.set_fuel(0)?;
            Err(abort(AbortCode::OutOfFuel, "out of fuel in a host call"))
        }
    }
}

/// A length argument, as `tally_host_api::linker` reads it.
fn length(len: i32, max: u32, what: &str) -> Result<u32, wasmi::Error> {
    if len < 0 {
        return Err(abort(
            AbortCode::BadPointer,
            format!("{what} length is negative ({len})"),
        ));
    }
    let len = len as u32;
    if len > max {
        return Err(abort(
            AbortCode::LimitExceeded,
            format!("{what} is {len} bytes; the limit is {max}"),
        ));
    }
    Ok(len)
}

/// `[ptr, ptr + len)` of guest memory, as `tally_host_api::linker` checks it.
fn guest_range(
    mem_len: usize,
    ptr: i32,
    len: u32,
    what: &str,
) -> Result<Range<usize>, wasmi::Error> {
    let start = ptr as u32 as usize;
    match start.checked_add(len as usize) {
        Some(end) if end <= mem_len => Ok(start..end),
        _ => Err(abort(
            AbortCode::BadPointer,
            format!(
                "{what} [{start}, {start}+{len}) is outside the contract's {mem_len}-byte memory"
            ),
        )),
    }
}

fn memory(caller: &Caller<'_, Ctx>) -> Result<Memory, wasmi::Error> {
    caller
        .data()
        .memory
        .ok_or_else(|| abort(AbortCode::BadPointer, "the contract exports no memory"))
}

/// Defines import `name` of ABI v1, priced by `c`; `false` if this file has no
/// implementation of it.
fn define(linker: &mut Linker<Ctx>, name: &str, c: Charge) -> anyhow::Result<bool> {
    match name {
        "read_message" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>, dst: i32, len: i32| -> Result<i32, wasmi::Error> {
                charge(&mut caller, c.before(0))?;
                let len = length(len, u32::MAX >> 1, "message buffer")?;
                let mem = memory(&caller)?;
                let (data, ctx) = mem.data_and_store_mut(&mut caller);
                let dst = guest_range(data.len(), dst, len, "message buffer")?;
                let msg = ctx.host()?.message();
                let n = msg.len().min(dst.len());
                data[dst.start..dst.start + n].copy_from_slice(&msg[..n]);
                let full = msg.len() as i32;
                ctx.wrote(dst.start..dst.start + n);
                // The message is the action's own, already paid for by the transaction's bytes:
                // only what is copied is charged, as the runtime's linker does.
                charge(&mut caller, n as u64 * c.per_output_byte)?;
                Ok(full)
            },
        )?,
        "message_size" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>| -> Result<i32, wasmi::Error> {
                charge(&mut caller, c.before(0))?;
                Ok(caller.data_mut().host()?.message().len() as i32)
            },
        )?,
        "load" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>,
                  key: i32,
                  klen: i32,
                  dst: i32,
                  dlen: i32|
                  -> Result<i32, wasmi::Error> {
                let klen = length(klen, MAX_KEY_LEN, "key")?;
                charge(&mut caller, c.before(klen as u64))?;
                let dlen = length(dlen, u32::MAX >> 1, "value buffer")?;
                let mem = memory(&caller)?;
                let (data, ctx) = mem.data_and_store_mut(&mut caller);
                let key = guest_range(data.len(), key, klen, "key")?;
                let dst = guest_range(data.len(), dst, dlen, "value buffer")?;
                let (full, n) = match ctx.host()?.load(&data[key]).map_err(trap)? {
                    None => (-1, 0),
                    Some(value) => {
                        let n = value.len().min(dst.len());
                        data[dst.start..dst.start + n].copy_from_slice(&value[..n]);
                        (value.len() as i32, n)
                    }
                };
                ctx.wrote(dst.start..dst.start + n);
                charge(&mut caller, full.max(0) as u64 * c.per_output_byte)?;
                Ok(full)
            },
        )?,
        "store" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>,
                  key: i32,
                  klen: i32,
                  val: i32,
                  vlen: i32|
                  -> Result<(), wasmi::Error> {
                let klen = length(klen, MAX_KEY_LEN, "key")?;
                let vlen = length(vlen, MAX_VALUE_LEN, "value")?;
                charge(&mut caller, c.before(klen as u64 + vlen as u64))?;
                let mem = memory(&caller)?;
                let (data, ctx) = mem.data_and_store_mut(&mut caller);
                let key = guest_range(data.len(), key, klen, "key")?;
                let val = guest_range(data.len(), val, vlen, "value")?;
                match ctx.host()?.upsert(&data[key], &data[val]).map_err(trap)? {
                    Upsert::Inserted => charge(&mut caller, c.new_key),
                    Upsert::Updated => Ok(()),
                }
            },
        )?,
        "remove" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>, key: i32, klen: i32| -> Result<(), wasmi::Error> {
                let klen = length(klen, MAX_KEY_LEN, "key")?;
                charge(&mut caller, c.before(klen as u64))?;
                let mem = memory(&caller)?;
                let (data, ctx) = mem.data_and_store_mut(&mut caller);
                let key = guest_range(data.len(), key, klen, "key")?;
                ctx.host()?.remove(&data[key]).map_err(trap)
            },
        )?,
        "assert" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>,
                  cond: i32,
                  msg: i32,
                  mlen: i32|
                  -> Result<(), wasmi::Error> {
                charge(&mut caller, c.before(0))?;
                if cond != 0 {
                    return Ok(());
                }
                let mlen = length(mlen, MAX_ASSERT_MESSAGE_LEN, "assert message")?;
                let mem = memory(&caller)?;
                let data = mem.data(&caller);
                let msg = guest_range(data.len(), msg, mlen, "assert message")?;
                let text = String::from_utf8_lossy(&data[msg]).into_owned();
                Err(abort(AbortCode::AssertFailed, text))
            },
        )?,
        "require_auth" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>, account: i64| -> Result<(), wasmi::Error> {
                charge(&mut caller, c.before(0))?;
                let account = Name(account as u64);
                if caller.data_mut().host()?.is_authorized(account) {
                    Ok(())
                } else {
                    Err(abort(
                        AbortCode::Unauthorized,
                        format!("missing authority of {account}"),
                    ))
                }
            },
        )?,
        "print" => linker.func_wrap(
            MODULE,
            name,
            move |mut caller: Caller<'_, Ctx>, msg: i32, mlen: i32| -> Result<(), wasmi::Error> {
                let mlen = length(mlen, MAX_CONSOLE_LEN, "console text")?;
                charge(&mut caller, c.before(mlen as u64))?;
                let mem = memory(&caller)?;
                let (data, ctx) = mem.data_and_store_mut(&mut caller);
                let msg = guest_range(data.len(), msg, mlen, "console text")?;
                // The runtime collects the console into the receipt, bounded; this only
                // counts it, to fail at the same point.
                if ctx.console + msg.len() > MAX_CONSOLE_LEN as usize {
                    return Err(abort(
                        AbortCode::LimitExceeded,
                        format!("console output exceeds {MAX_CONSOLE_LEN} bytes"),
                    ));
                }
                ctx.console += msg.len();
                ctx.host()?.print(&data[msg]).map_err(trap)
            },
        )?,
        _ => return Ok(false),
    };
    Ok(true)
}

/// The chunks `dst..dst + len` covers within a memory of `memory_len` bytes.
fn chunks_of(dst: u64, len: u64, memory_len: usize) -> Range<usize> {
    let end = (dst + len).min(memory_len as u64);
    if dst >= end {
        return 0..0;
    }
    (dst / DIRTY_CHUNK_BYTES) as usize..end.div_ceil(DIRTY_CHUNK_BYTES) as usize
}

/// Defines the instrumentation's private imports, charging what the runtime's do.
fn define_private(linker: &mut Linker<Ctx>, name: &str) -> anyhow::Result<bool> {
    match name {
        "charge_chunks" => linker.func_wrap(
            PRIVATE_MODULE,
            name,
            |mut caller: Caller<'_, Ctx>, chunks: i32| -> Result<(), wasmi::Error> {
                charge(&mut caller, u64::from(chunks as u32) * FUEL_PER_DIRTY_CHUNK)
            },
        )?,
        "mem_write" => linker.func_wrap(
            PRIVATE_MODULE,
            name,
            |mut caller: Caller<'_, Ctx>, dst: i32, len: i32| -> Result<(), wasmi::Error> {
                let (dst, len) = (u64::from(dst as u32), u64::from(len as u32));
                let memory_len = caller.data().memory.map_or(0, |m| m.data(&caller).len());
                let Some(map) = caller.data().dirty_map else {
                    return Ok(());
                };
                let chunks = chunks_of(dst, len, memory_len);
                let map = &mut map.data_mut(&mut caller)[chunks];
                let newly = map.iter().filter(|&&b| b == 0).count() as u64;
                map.fill(1);
                charge(&mut caller, newly * FUEL_PER_DIRTY_CHUNK)
            },
        )?,
        "grow" => linker.func_wrap(
            PRIVATE_MODULE,
            name,
            |mut caller: Caller<'_, Ctx>, _pages: i32| -> Result<(), wasmi::Error> {
                charge(&mut caller, FUEL_PER_MEMORY_GROW)
            },
        )?,
        "stack_exhausted" => linker.func_wrap(
            PRIVATE_MODULE,
            name,
            |_caller: Caller<'_, Ctx>| -> Result<(), wasmi::Error> {
                Err(abort(
                    AbortCode::StackOverflow,
                    format!("call stack exhausted: frames exceed {MAX_STACK_BYTES} bytes"),
                ))
            },
        )?,
        _ => return Ok(false),
    };
    Ok(true)
}

/// A linker with every import of [`IMPORTS`] and of the instrumentation, each checked
/// against its table.
fn linker(engine: &Engine) -> anyhow::Result<Linker<Ctx>> {
    let mut linker = Linker::<Ctx>::new(engine);
    for import in IMPORTS {
        anyhow::ensure!(
            define(&mut linker, import.name, import.charge)?,
            "the wasmi baseline does not implement import {} of ABI v{}",
            import.name,
            abi::VERSION
        );
    }
    for (name, _) in PRIVATE_IMPORTS {
        anyhow::ensure!(
            define_private(&mut linker, name)?,
            "the wasmi baseline does not implement the runtime's private import {name}"
        );
    }
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
    let mut store = Store::new(engine, Ctx::new());
    linker
        .instantiate_and_start(&mut store, &probe)
        .context("the wasmi baseline's host functions do not have the types of their tables")?;
    Ok(linker)
}

impl Ctx {
    fn new() -> Self {
        Self {
            host: None,
            memory: None,
            dirty_map: None,
            host_chunks: Vec::new(),
            console: 0,
        }
    }
}

/// The contract's state right after instantiation.
struct Pristine {
    memory: Vec<u8>,
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
    /// The chunks the last action dirtied (kept to reuse the allocation).
    chunks: Vec<u32>,
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
        let mut store = Store::new(&self.engine, Ctx::new());
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
            chunks: Vec::new(),
        };
        let mut pristine = self.pristine.lock().expect("not poisoned");
        if pristine.is_none() {
            *pristine = Some(Arc::new(Pristine {
                memory: slot.memory.data(&slot.store).to_vec(),
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
        let result = run(&mut slot, up_front);
        slot.store.data_mut().host = None;
        let (result, owed) = match result {
            Ok(()) => (Ok(()), collect_dirty(&mut slot, false)),
            Err(e) => (Err(e), collect_dirty(&mut slot, true)),
        };
        let left = slot.store.get_fuel().unwrap_or(0);
        let result = match result {
            Ok(()) if owed > left => Err(HostError::from(Abort::new(
                AbortCode::OutOfFuel,
                format!("the action used all of its {FUEL_PER_ACTION} fuel"),
            ))),
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
    let out_of_fuel = || {
        HostError::from(Abort::new(
            AbortCode::OutOfFuel,
            format!("the action used all of its {FUEL_PER_ACTION} fuel"),
        ))
    };
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

/// A wasmi failure that is the node's, not the contract's.
#[derive(Debug, thiserror::Error)]
#[error("wasmi: {0}")]
struct WasmiError(String);

/// After an action: the fuel still owed for the chunks no charge point paid for (those
/// marked after the last one, those only the host wrote) and for reading the map, as the
/// runtime's `collect_dirty` counts it. Moves every dirtied chunk from the map into
/// `slot.chunks`. Like the runtime, it reads the map's bytes for the memory's chunks after a
/// successful action, and all of it after a failed one (which may have marked the chunk of
/// the out-of-bounds store that trapped).
fn collect_dirty(slot: &mut Slot, failed: bool) -> u64 {
    let store = &mut slot.store;
    let pending = match slot.new_chunks.get(&*store) {
        Val::I32(n) => u64::from(n as u32),
        _ => 0,
    };
    // Resetting an i32 global with an i32 cannot fail.
    let _ = slot.new_chunks.set(&mut *store, Val::I32(0));
    let memory_len = slot.memory.data(&*store).len();
    let (map, ctx) = slot.dirty_map.data_and_store_mut(&mut *store);
    let mut host_only = 0;
    for &chunk in &ctx.host_chunks {
        if let Some(byte) = map.get_mut(chunk as usize)
            && *byte == 0
        {
            *byte = 1;
            host_only += 1;
        }
    }
    ctx.host_chunks.clear();
    ctx.console = 0;
    let scanned = if failed {
        map.len()
    } else {
        memory_len
            .div_ceil(DIRTY_CHUNK_BYTES as usize)
            .min(map.len())
    };
    const BLOCK: usize = 256;
    slot.chunks.clear();
    for (block_index, block) in map[..scanned].chunks_mut(BLOCK).enumerate() {
        if or_all(block) == 0 {
            continue;
        }
        for (i, byte) in block.iter_mut().enumerate() {
            if *byte != 0 {
                *byte = 0;
                slot.chunks.push((block_index * BLOCK + i) as u32);
            }
        }
    }
    let pages = (memory_len as u64).div_ceil(PAGE_SIZE);
    (pending + host_only) * FUEL_PER_DIRTY_CHUNK + pages * FUEL_PER_MEMORY_PAGE
}

/// Every byte of `bytes` OR-ed together (zero if and only if all are zero).
fn or_all(bytes: &[u8]) -> u64 {
    // SAFETY: every bit pattern is a valid u64.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    let edges = head.iter().chain(tail).fold(0u8, |acc, &b| acc | b);
    words.iter().fold(u64::from(edges), |acc, &w| acc | w)
}

/// Puts the instance back into its pristine state, given the chunks [`collect_dirty`] found;
/// `false` if it cannot be (its memory grew), and must then be dropped.
fn restore(slot: &mut Slot, pristine: &Pristine) -> bool {
    let store = &mut slot.store;
    let memory = slot.memory.data_mut(&mut *store);
    if memory.len() != pristine.memory.len() {
        return false;
    }
    let chunk_bytes = DIRTY_CHUNK_BYTES as usize;
    for &chunk in &slot.chunks {
        let start = chunk as usize * chunk_bytes;
        let end = (start + chunk_bytes + CHUNK_OVERLAP).min(memory.len());
        if start < end {
            memory[start..end].copy_from_slice(&pristine.memory[start..end]);
        }
    }
    if slot.stack.set(&mut *store, Val::I32(0)).is_err() {
        return false;
    }
    for (global, value) in slot.globals.iter().zip(&pristine.globals) {
        if global.set(&mut *store, value.clone()).is_err() {
            return false;
        }
    }
    true
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
