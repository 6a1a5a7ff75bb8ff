//! Registration of the ABI v1 imports on a wasmtime [`Linker`] (feature `host`).
//!
//! Every host function takes the same steps in the same order: charge fuel for the call, the
//! keys it touches and its input bytes, bounds-check each guest pointer/length pair against the
//! contract's memory, call the [`Host`], write any result back, and charge for the output bytes
//! (and for state growth, when a `store` created its key). Any failure is an [`Abort`]
//! returned as the call's error, which wasmtime turns into a trap and the runtime turns into a
//! failed receipt.

use core::ops::Range;
use std::format;
use std::string::String;

use wasmtime::{Caller, Linker, Memory};

use crate::abi::{Charge, MODULE, charge as charge_of};
use crate::error::{Abort, AbortCode, HostError};
use crate::limits::{MAX_ASSERT_MESSAGE_LEN, MAX_CONSOLE_LEN, MAX_KEY_LEN, MAX_VALUE_LEN};

// The prices of abi::IMPORTS, resolved at compile time (so they cost what literals would).
const READ_MESSAGE: Charge = charge_of("read_message");
const MESSAGE_SIZE: Charge = charge_of("message_size");
const LOAD: Charge = charge_of("load");
const STORE: Charge = charge_of("store");
const REMOVE: Charge = charge_of("remove");
const ASSERT: Charge = charge_of("assert");
const REQUIRE_AUTH: Charge = charge_of("require_auth");
const PRINT: Charge = charge_of("print");
use crate::{Host, Name, Upsert};

/// The store data of a running action: a [`Host`] that also knows the instance's memory.
pub trait WasmHost: Host + 'static {
    /// The running instance's exported linear memory. The runtime sets it right after
    /// instantiation; `None` before that.
    fn memory(&self) -> Option<Memory>;

    /// Called after the host wrote `range` of guest memory (`read_message`, `load`), so a
    /// runtime that restores instances knows to restore those bytes too. Returns the fuel the
    /// write costs beyond its bytes (restoring the pages it dirtied first), which the call
    /// then charges.
    fn wrote(&mut self, range: Range<usize>) -> u64 {
        let _ = range;
        0
    }
}

type HostResult<T> = wasmtime::Result<T>;

fn abort(code: AbortCode, message: impl Into<String>) -> wasmtime::Error {
    wasmtime::Error::new(Abort::new(code, message))
}

/// Takes `amount` fuel from the running action, or aborts it when there is not enough.
///
/// # Errors
/// An [`AbortCode::OutOfFuel`] abort, with the action's fuel set to zero.
pub fn charge<T>(caller: &mut Caller<'_, T>, amount: u64) -> HostResult<()> {
    let left = caller.get_fuel()?;
    match left.checked_sub(amount) {
        Some(rest) => caller.set_fuel(rest),
        None => {
            caller.set_fuel(0)?;
            Err(abort(AbortCode::OutOfFuel, "out of fuel in a host call"))
        }
    }
}

/// Reads a length argument: negative lengths are bad arguments, and `max` bounds it.
fn length(len: i32, max: u32, what: &str) -> HostResult<u32> {
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

/// The byte range `[ptr, ptr + len)` of guest memory, if it lies inside `mem_len` bytes.
/// Pointers are unsigned 32-bit offsets, as in wasm32.
fn guest_range(mem_len: usize, ptr: i32, len: u32, what: &str) -> HostResult<Range<usize>> {
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

fn memory<T: WasmHost>(caller: &Caller<'_, T>) -> HostResult<Memory> {
    caller
        .data()
        .memory()
        .ok_or_else(|| abort(AbortCode::BadPointer, "the contract exports no memory"))
}

/// A host's refusal as the call's error: an [`Abort`] fails the action, a
/// [`crate::NodeFault`] reaches the runtime unchanged, which fails the block instead.
fn into_trap(err: HostError) -> wasmtime::Error {
    match err {
        HostError::Abort(abort) => wasmtime::Error::new(abort),
        HostError::Fault(fault) => wasmtime::Error::new(fault),
    }
}

/// Registers every import of [`crate::abi::IMPORTS`] on `linker`.
///
/// # Errors
/// Only if an import of the same name is already defined on `linker`.
pub fn add_to_linker<T: WasmHost>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.func_wrap(
        MODULE,
        "read_message",
        |mut caller: Caller<'_, T>, dst: i32, len: i32| -> HostResult<i32> {
            charge(&mut caller, READ_MESSAGE.before(0))?;
            let len = length(len, u32::MAX >> 1, "message buffer")?;
            let mem = memory(&caller)?;
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let dst = guest_range(data.len(), dst, len, "message buffer")?;
            let msg = host.message();
            let n = msg.len().min(dst.len());
            data[dst.start..dst.start + n].copy_from_slice(&msg[..n]);
            let full = msg.len() as i32;
            let extra = host.wrote(dst.start..dst.start + n);
            charge(&mut caller, n as u64 * READ_MESSAGE.per_output_byte + extra)?;
            Ok(full)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "message_size",
        |mut caller: Caller<'_, T>| -> HostResult<i32> {
            charge(&mut caller, MESSAGE_SIZE.before(0))?;
            Ok(caller.data().message().len() as i32)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "load",
        |mut caller: Caller<'_, T>, key: i32, klen: i32, dst: i32, dlen: i32| -> HostResult<i32> {
            let klen = length(klen, MAX_KEY_LEN, "key")?;
            charge(&mut caller, LOAD.before(klen as u64))?;
            let dlen = length(dlen, u32::MAX >> 1, "value buffer")?;
            let mem = memory(&caller)?;
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let key = guest_range(data.len(), key, klen, "key")?;
            let dst = guest_range(data.len(), dst, dlen, "value buffer")?;
            let (full, n) = match host.load(&data[key]).map_err(into_trap)? {
                None => (-1, 0),
                Some(value) => {
                    let n = value.len().min(dst.len());
                    data[dst.start..dst.start + n].copy_from_slice(&value[..n]);
                    (value.len() as i32, n)
                }
            };
            let extra = host.wrote(dst.start..dst.start + n);
            // The whole value was read, whatever part of it was copied (`Charge::per_output_byte`).
            let read = full.max(0) as u64;
            charge(&mut caller, read * LOAD.per_output_byte + extra)?;
            Ok(full)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "store",
        |mut caller: Caller<'_, T>, key: i32, klen: i32, val: i32, vlen: i32| -> HostResult<()> {
            let klen = length(klen, MAX_KEY_LEN, "key")?;
            let vlen = length(vlen, MAX_VALUE_LEN, "value")?;
            charge(&mut caller, STORE.before(klen as u64 + vlen as u64))?;
            let mem = memory(&caller)?;
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let key = guest_range(data.len(), key, klen, "key")?;
            let val = guest_range(data.len(), val, vlen, "value")?;
            match host.upsert(&data[key], &data[val]).map_err(into_trap)? {
                Upsert::Inserted => charge(&mut caller, STORE.new_key),
                Upsert::Updated => Ok(()),
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "remove",
        |mut caller: Caller<'_, T>, key: i32, klen: i32| -> HostResult<()> {
            let klen = length(klen, MAX_KEY_LEN, "key")?;
            charge(&mut caller, REMOVE.before(klen as u64))?;
            let mem = memory(&caller)?;
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let key = guest_range(data.len(), key, klen, "key")?;
            host.remove(&data[key]).map_err(into_trap)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "assert",
        |mut caller: Caller<'_, T>, cond: i32, msg: i32, mlen: i32| -> HostResult<()> {
            charge(&mut caller, ASSERT.before(0))?;
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
    )?;
    linker.func_wrap(
        MODULE,
        "require_auth",
        |mut caller: Caller<'_, T>, account: i64| -> HostResult<()> {
            charge(&mut caller, REQUIRE_AUTH.before(0))?;
            let account = Name(account as u64);
            if caller.data().is_authorized(account) {
                Ok(())
            } else {
                Err(abort(
                    AbortCode::Unauthorized,
                    format!("missing authority of {account}"),
                ))
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "print",
        |mut caller: Caller<'_, T>, msg: i32, mlen: i32| -> HostResult<()> {
            let mlen = length(mlen, MAX_CONSOLE_LEN, "console text")?;
            charge(&mut caller, PRINT.before(mlen as u64))?;
            let mem = memory(&caller)?;
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let msg = guest_range(data.len(), msg, mlen, "console text")?;
            host.print(&data[msg]).map_err(into_trap)
        },
    )?;
    Ok(())
}
