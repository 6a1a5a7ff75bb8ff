//! The `wasmi` baseline of `tally bench`: the same simplecoin `.wasm`, run by the wasmi
//! interpreter against the same host and store. The 2017 post's lesson was that an
//! interpreter (Wren, then) is many times slower than compiled code; this measures it.
//!
//! It is a baseline, not a second runtime: it implements the ABI's host functions with plain
//! bounds checks, meters fuel like the real runtime, and calls simplecoin's transfer handler.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::workload::{SIMPLECOIN, TRANSFER};
use anyhow::Context;
use tally_chain::NativeContract;
use tally_host_api::limits::FUEL_PER_ACTION;
use tally_host_api::{Abort, AbortCode, Host, HostError, Name};
use wasmi::{Caller, Config, Engine, Linker, Memory, Module, Store};

/// The store data: the action's host, erased to `'static` as in the real runtime (the store
/// lives only inside one call of the executor, while the host borrow is alive).
struct Ctx {
    host: NonNull<dyn Host>,
    memory: Option<Memory>,
}

// SAFETY: the pointer is only used by the thread running the executor, during the call.
unsafe impl Send for Ctx {}

impl Ctx {
    fn host(&mut self) -> &mut dyn Host {
        // SAFETY: see the type's docs.
        unsafe { self.host.as_mut() }
    }
}

fn abort(code: AbortCode, text: &str) -> wasmi::Error {
    wasmi::Error::new(format!("{code:?}: {text}"))
}

fn host_error(e: HostError) -> wasmi::Error {
    wasmi::Error::new(e.to_string())
}

fn range(len: usize, ptr: i32, n: i32) -> Result<std::ops::Range<usize>, wasmi::Error> {
    let (start, n) = (
        ptr as u32 as usize,
        usize::try_from(n).unwrap_or(usize::MAX),
    );
    match start.checked_add(n) {
        Some(end) if end <= len => Ok(start..end),
        _ => Err(abort(AbortCode::BadPointer, "pointer out of range")),
    }
}

fn memory(caller: &Caller<'_, Ctx>) -> Result<Memory, wasmi::Error> {
    caller
        .data()
        .memory
        .ok_or_else(|| abort(AbortCode::BadPointer, "no memory"))
}

fn linker(engine: &Engine) -> anyhow::Result<Linker<Ctx>> {
    let mut linker = Linker::<Ctx>::new(engine);
    linker.func_wrap(
        "env",
        "read_message",
        |mut caller: Caller<'_, Ctx>, dst: i32, len: i32| -> Result<i32, wasmi::Error> {
            let mem = memory(&caller)?;
            let (data, ctx) = mem.data_and_store_mut(&mut caller);
            let dst = range(data.len(), dst, len)?;
            let msg = ctx.host().message();
            let n = msg.len().min(dst.len());
            data[dst.start..dst.start + n].copy_from_slice(&msg[..n]);
            Ok(msg.len() as i32)
        },
    )?;
    linker.func_wrap(
        "env",
        "message_size",
        |mut caller: Caller<'_, Ctx>| -> i32 { caller.data_mut().host().message().len() as i32 },
    )?;
    linker.func_wrap(
        "env",
        "load",
        |mut caller: Caller<'_, Ctx>,
         k: i32,
         kl: i32,
         d: i32,
         dl: i32|
         -> Result<i32, wasmi::Error> {
            let mem = memory(&caller)?;
            let (data, ctx) = mem.data_and_store_mut(&mut caller);
            let key = range(data.len(), k, kl)?;
            let dst = range(data.len(), d, dl)?;
            let key = data[key].to_vec();
            Ok(match ctx.host().load(&key).map_err(host_error)? {
                None => -1,
                Some(value) => {
                    let n = value.len().min(dst.len());
                    data[dst.start..dst.start + n].copy_from_slice(&value[..n]);
                    value.len() as i32
                }
            })
        },
    )?;
    linker.func_wrap(
        "env",
        "store",
        |mut caller: Caller<'_, Ctx>,
         k: i32,
         kl: i32,
         v: i32,
         vl: i32|
         -> Result<(), wasmi::Error> {
            let mem = memory(&caller)?;
            let (data, ctx) = mem.data_and_store_mut(&mut caller);
            let (key, value) = (range(data.len(), k, kl)?, range(data.len(), v, vl)?);
            ctx.host()
                .store(&data[key], &data[value])
                .map_err(host_error)
        },
    )?;
    linker.func_wrap(
        "env",
        "remove",
        |mut caller: Caller<'_, Ctx>, k: i32, kl: i32| -> Result<(), wasmi::Error> {
            let mem = memory(&caller)?;
            let (data, ctx) = mem.data_and_store_mut(&mut caller);
            let key = range(data.len(), k, kl)?;
            ctx.host().remove(&data[key]).map_err(host_error)
        },
    )?;
    linker.func_wrap(
        "env",
        "assert",
        |caller: Caller<'_, Ctx>, cond: i32, m: i32, ml: i32| -> Result<(), wasmi::Error> {
            if cond != 0 {
                return Ok(());
            }
            let mem = memory(&caller)?;
            let data = mem.data(&caller);
            let text = String::from_utf8_lossy(&data[range(data.len(), m, ml)?]).into_owned();
            Err(abort(AbortCode::AssertFailed, &text))
        },
    )?;
    linker.func_wrap(
        "env",
        "require_auth",
        |mut caller: Caller<'_, Ctx>, account: i64| -> Result<(), wasmi::Error> {
            if caller.data_mut().host().is_authorized(Name(account as u64)) {
                Ok(())
            } else {
                Err(abort(AbortCode::Unauthorized, "missing authority"))
            }
        },
    )?;
    linker.func_wrap(
        "env",
        "print",
        |_caller: Caller<'_, Ctx>, _m: i32, _ml: i32| -> Result<(), wasmi::Error> { Ok(()) },
    )?;
    Ok(linker)
}

/// The transfer handler of the bench contracts: simplecoin's 2017 export, or `apply`.
const LEGACY_TRANSFER: &str = "onApply_Transfer_simplecoin";

/// An executor that runs the bench contract `wasm`'s transfer in a fresh wasmi instance per
/// action.
pub fn executor(wasm: &[u8]) -> anyhow::Result<NativeContract> {
    let mut config = Config::default();
    config.consume_fuel(true);
    let engine = Engine::new(&config);
    let module = Module::new(&engine, wasm).context("wasmi cannot load the contract")?;
    let linker = linker(&engine)?;
    Ok(Arc::new(move |host: &mut dyn Host| {
        let host: NonNull<dyn Host + '_> = NonNull::from(host);
        // SAFETY: only the lifetime bound changes; the store is dropped before this returns.
        let host: NonNull<dyn Host + 'static> = unsafe { std::mem::transmute(host) };
        let mut store = Store::new(&engine, Ctx { host, memory: None });
        let failed = |e: wasmi::Error| Abort::new(AbortCode::Trap, e.to_string());
        store.set_fuel(FUEL_PER_ACTION).map_err(failed)?;
        let instance = linker
            .instantiate_and_start(&mut store, &module)
            .map_err(failed)?;
        store.data_mut().memory = instance.get_memory(&store, "memory");
        if let Ok(func) = instance.get_typed_func::<(), ()>(&store, LEGACY_TRANSFER) {
            return Ok(func.call(&mut store, ()).map_err(failed)?);
        }
        let apply = instance
            .get_typed_func::<(i64, i64, i64), ()>(&store, "apply")
            .map_err(failed)?;
        let coin = SIMPLECOIN.0 as i64;
        let transfer = TRANSFER.0 as i64;
        Ok(apply
            .call(&mut store, (coin, coin, transfer))
            .map_err(failed)?)
    }))
}
