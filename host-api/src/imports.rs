//! What every import does, engine-free: the ABI v1 functions of [`crate::abi::IMPORTS`] and
//! the metering functions the runtime's instrumentation calls.
//!
//! Each ABI function takes the same steps in the same order: charge fuel for the call, the
//! keys it touches and its input bytes, bounds-check each guest pointer/length pair against the
//! contract's memory ([`crate::memory`]), call the [`Host`], write any result back, and charge
//! for the output bytes (and for state growth, when a `store` created its key). Any failure is
//! a [`HostError`]: an [`Abort`] fails the action, a [`crate::NodeFault`] the node's work.
//!
//! An engine provides a [`Guest`] (its fuel, the contract's memory and the store data) and
//! registers these functions with [`register_imports!`](crate::register_imports) and
//! [`register_metering_imports!`](crate::register_metering_imports): the wasmtime linker
//! ([`crate::linker`]) and the wasmi baseline both do, so neither can price or check a call
//! differently.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::abi::{
    Charge, NEXT_BACKWARD, NEXT_FLAGS, NEXT_HI_INCLUSIVE, NEXT_HI_OPEN, NEXT_LO_EXCLUSIVE,
    charge as charge_of,
};
use crate::error::{Abort, AbortCode, HostError};
use crate::limits::{
    FUEL_PER_DIRTY_CHUNK, FUEL_PER_KEY_SEEK, FUEL_PER_MEMORY_GROW, MAX_ASSERT_MESSAGE_LEN,
    MAX_CONSOLE_LEN, MAX_EVENT_LEN, MAX_KEY_LEN, MAX_MESSAGE_LEN, MAX_RETURN_LEN, MAX_STACK_BYTES,
    MAX_VALUE_LEN,
};
use crate::memory::{DirtyChunks, guest_range, length, mark_bulk_write};
use crate::{Call, CallKind, Host, Name, Upsert, Walk};

// The prices of abi::IMPORTS, resolved at compile time (so they cost what literals would).
const READ_MESSAGE: Charge = charge_of("read_message");
const MESSAGE_SIZE: Charge = charge_of("message_size");
const LOAD: Charge = charge_of("load");
const STORE: Charge = charge_of("store");
const REMOVE: Charge = charge_of("remove");
const ASSERT: Charge = charge_of("assert");
const REQUIRE_AUTH: Charge = charge_of("require_auth");
const PRINT: Charge = charge_of("print");
const CALL: Charge = charge_of("call");
const QUERY: Charge = charge_of("query");
const SET_RETURN: Charge = charge_of("set_return");
const RETURN_SIZE: Charge = charge_of("return_size");
const READ_RETURN: Charge = charge_of("read_return");
const CALLER: Charge = charge_of("caller");
const EMIT: Charge = charge_of("emit");
const BLOCK_TIME: Charge = charge_of("block_time");
const BLOCK_HEIGHT: Charge = charge_of("block_height");
const HAS_AUTH: Charge = charge_of("has_auth");
const IS_ACCOUNT: Charge = charge_of("is_account");
const DB_NEXT: Charge = charge_of("db_next");

/// An action's console output, bounded by [`MAX_CONSOLE_LEN`].
#[derive(Debug, Default)]
pub struct Console(Vec<u8>);

impl Console {
    /// Appends `text`.
    ///
    /// # Errors
    /// [`AbortCode::LimitExceeded`] if the action's output would pass [`MAX_CONSOLE_LEN`].
    pub fn push(&mut self, text: &[u8]) -> Result<(), Abort> {
        if self.0.len() + text.len() > MAX_CONSOLE_LEN as usize {
            return Err(Abort::new(
                AbortCode::LimitExceeded,
                format!("console output exceeds {MAX_CONSOLE_LEN} bytes"),
            ));
        }
        self.0.extend_from_slice(text);
        Ok(())
    }

    /// Forgets what was printed, keeping the allocation.
    #[inline]
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// What was printed, leaving the console empty.
    #[inline]
    pub fn take(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.0)
    }
}

/// What the host functions keep of a running action besides its host.
#[derive(Default)]
pub struct CallState {
    /// What the action printed, bounded.
    pub console: Console,
    /// The chunks of the contract's memory the host wrote (`read_message`, `load`), so a
    /// runtime that restores instances restores those bytes too and charges for them with the
    /// chunks wasm wrote ([`DirtyChunks::collect`]).
    pub dirty: DirtyChunks,
    /// The return data of the action's last call or query, for `read_return`.
    pub returned: Vec<u8>,
    /// The action's own return data, set by `set_return`.
    pub output: Vec<u8>,
}

impl CallState {
    /// Forgets a finished action's console, return data and calls' return data, keeping the
    /// allocations (the dirty chunks are collected separately).
    pub fn clear(&mut self) {
        self.console.clear();
        self.returned.clear();
        self.output.clear();
    }
}

/// The store data of a running action, as the host functions see it.
pub trait ActionData {
    /// The host lent to the action.
    ///
    /// # Errors
    /// A [`crate::NodeFault`] when no host is lent (a runtime bug).
    fn host(&mut self) -> Result<&mut dyn Host, HostError>;

    /// The console and the chunks the host wrote.
    fn state(&mut self) -> &mut CallState;
}

/// What a host function needs of the engine running it.
pub trait Guest {
    /// The store data.
    type Data: ActionData + ?Sized;

    /// Fuel the action has left.
    ///
    /// # Errors
    /// A [`crate::NodeFault`] if the engine does not meter fuel.
    fn fuel(&self) -> Result<u64, HostError>;

    /// Sets the fuel the action has left.
    ///
    /// # Errors
    /// A [`crate::NodeFault`] if the engine does not meter fuel.
    fn set_fuel(&mut self, fuel: u64) -> Result<(), HostError>;

    /// The store data.
    fn data(&mut self) -> &mut Self::Data;

    /// The contract's linear memory and the store data, borrowed together.
    ///
    /// # Errors
    /// [`AbortCode::BadPointer`] if the contract has no memory.
    fn memory(&mut self) -> Result<(&mut [u8], &mut Self::Data), HostError>;

    /// The length of the contract's memory and the instrumentation's dirty-chunk map
    /// ([`crate::memory`]); `None` for an instance without one.
    fn dirty_map(&mut self) -> Option<(usize, &mut [u8])>;

    /// The action's deterministic stack height (the instrumentation's frame counter), where a
    /// call's callee starts; 0 for an engine without it.
    fn stack_height(&mut self) -> u32;

    /// Takes `amount` fuel from the running action, or aborts it when there is not enough.
    ///
    /// # Errors
    /// An [`AbortCode::OutOfFuel`] abort, with the action's fuel set to zero.
    fn charge(&mut self, amount: u64) -> Result<(), HostError> {
        let left = self.fuel()?;
        match left.checked_sub(amount) {
            Some(rest) => self.set_fuel(rest),
            None => {
                self.set_fuel(0)?;
                Err(out_of_fuel())
            }
        }
    }

    /// `charge(before)`, then `body` (given the fuel left), then `charge` of the fuel `body`
    /// says the call owes after it ran, with the fuel read and written once instead of
    /// twice. Each read and write is a call into the engine: charging a simplecoin transfer's
    /// host calls cost 327 instructions a transfer of 12,612 with two charges a call, and its
    /// two `load`s and two `store`s 316 fewer with one (callgrind). The fuel ends as the two
    /// charges would leave it: `body` failing leaves what `before` left. `body` must not read
    /// or set the fuel itself.
    ///
    /// # Errors
    /// An [`AbortCode::OutOfFuel`] abort, with the action's fuel set to zero, or `body`'s.
    fn charge_around<R>(
        &mut self,
        before: u64,
        body: impl FnOnce(&mut Self, u64) -> Result<(R, u64), HostError>,
    ) -> Result<R, HostError>
    where
        Self: Sized,
    {
        let Some(left) = self.fuel()?.checked_sub(before) else {
            self.set_fuel(0)?;
            return Err(out_of_fuel());
        };
        match body(self, left) {
            Ok((result, after)) => match left.checked_sub(after) {
                Some(rest) => {
                    self.set_fuel(rest)?;
                    Ok(result)
                }
                None => {
                    self.set_fuel(0)?;
                    Err(out_of_fuel())
                }
            },
            Err(e) => {
                self.set_fuel(left)?;
                Err(e)
            }
        }
    }
}

/// The abort of a host call the action's fuel does not cover.
fn out_of_fuel() -> HostError {
    Abort::new(AbortCode::OutOfFuel, "out of fuel in a host call").into()
}

/// The [`AbortCode::BadPointer`] of an instance without a memory.
pub fn no_memory() -> HostError {
    Abort::new(AbortCode::BadPointer, "the contract exports no memory").into()
}

/// `read_message(dst, len) -> i32`: copies up to `len` bytes of the action's data to `dst`;
/// returns its full length.
pub fn read_message(g: &mut impl Guest, dst: i32, len: i32) -> Result<i32, HostError> {
    g.charge_around(READ_MESSAGE.before(0), |g, _| {
        let len = length(len, u32::MAX >> 1, "message buffer")?;
        let (data, ctx) = g.memory()?;
        let dst = guest_range(data.len(), dst, len, "message buffer")?;
        let msg = ctx.host()?.message();
        let n = msg.len().min(dst.len());
        data[dst.start..dst.start + n].copy_from_slice(&msg[..n]);
        let full = msg.len() as i32;
        ctx.state().dirty.wrote(dst.start..dst.start + n);
        // The message is the action's own, already paid for by the transaction's bytes: only
        // what is copied is charged.
        Ok((full, n as u64 * READ_MESSAGE.per_output_byte))
    })
}

/// `message_size() -> i32`: the full length of the action's data.
pub fn message_size(g: &mut impl Guest) -> Result<i32, HostError> {
    g.charge(MESSAGE_SIZE.before(0))?;
    Ok(g.data().host()?.message().len() as i32)
}

/// `load(key, klen, dst, dlen) -> i32`: copies up to `dlen` bytes of the value under the key
/// to `dst`; returns its full length, or -1 if absent.
pub fn load(
    g: &mut impl Guest,
    key: i32,
    klen: i32,
    dst: i32,
    dlen: i32,
) -> Result<i32, HostError> {
    let klen = length(klen, MAX_KEY_LEN, "key")?;
    g.charge_around(LOAD.before(klen as u64), |g, _| {
        let dlen = length(dlen, u32::MAX >> 1, "value buffer")?;
        let (data, ctx) = g.memory()?;
        let key = guest_range(data.len(), key, klen, "key")?;
        let dst = guest_range(data.len(), dst, dlen, "value buffer")?;
        let (full, n) = match ctx.host()?.load(&data[key])? {
            None => (-1, 0),
            Some(value) => {
                let n = value.len().min(dst.len());
                data[dst.start..dst.start + n].copy_from_slice(&value[..n]);
                (value.len() as i32, n)
            }
        };
        ctx.state().dirty.wrote(dst.start..dst.start + n);
        // The whole value was read, whatever part of it was copied (`Charge::per_output_byte`).
        let read = full.max(0) as u64;
        Ok((full, read * LOAD.per_output_byte))
    })
}

/// `store(key, klen, val, vlen)`: sets the key in the contract's namespace.
pub fn store(
    g: &mut impl Guest,
    key: i32,
    klen: i32,
    val: i32,
    vlen: i32,
) -> Result<(), HostError> {
    let klen = length(klen, MAX_KEY_LEN, "key")?;
    let vlen = length(vlen, MAX_VALUE_LEN, "value")?;
    g.charge_around(STORE.before(klen as u64 + vlen as u64), |g, _| {
        let (data, ctx) = g.memory()?;
        let key = guest_range(data.len(), key, klen, "key")?;
        let val = guest_range(data.len(), val, vlen, "value")?;
        match ctx.host()?.upsert(&data[key], &data[val])? {
            Upsert::Inserted => Ok(((), STORE.new_key)),
            Upsert::Updated => Ok(((), 0)),
        }
    })
}

/// `remove(key, klen)`: deletes the key from the contract's namespace.
pub fn remove(g: &mut impl Guest, key: i32, klen: i32) -> Result<(), HostError> {
    let klen = length(klen, MAX_KEY_LEN, "key")?;
    g.charge(REMOVE.before(klen as u64))?;
    let (data, ctx) = g.memory()?;
    let key = guest_range(data.len(), key, klen, "key")?;
    ctx.host()?.remove(&data[key])
}

/// `db_next(lo, lo_len, hi, hi_len, flags, key_dst, key_cap, val_dst, val_cap) -> i64`: the
/// first key of the contract's namespace between `lo` and `hi` walking forward (the last,
/// with [`NEXT_BACKWARD`]), bounds and keys relative to the namespace, as the action sees it.
/// Copies up to `key_cap` bytes of the key to `key_dst` and up to `val_cap` of its value to
/// `val_dst`, and returns their full lengths as `key_len << 32 | value_len` (so a contract
/// whose buffer was short asks again with a bigger one: the call is stateless), or -1 if the
/// range holds no key. Charged per call and per byte of the bounds, per byte of the key and
/// the whole value found (as `load` is), and [`FUEL_PER_KEY_SEEK`] again per deleted key
/// stepped over.
#[allow(clippy::too_many_arguments)] // the import's own arguments
pub fn db_next(
    g: &mut impl Guest,
    lo: i32,
    lo_len: i32,
    hi: i32,
    hi_len: i32,
    flags: i32,
    key_dst: i32,
    key_cap: i32,
    val_dst: i32,
    val_cap: i32,
) -> Result<i64, HostError> {
    let lo_len = length(lo_len, MAX_KEY_LEN, "lower bound")?;
    let hi_len = length(hi_len, MAX_KEY_LEN, "upper bound")?;
    g.charge_around(DB_NEXT.before(lo_len as u64 + hi_len as u64), |g, fuel_left| {
        if flags & !NEXT_FLAGS != 0 {
            return Err(Abort::new(
                AbortCode::InvalidAction,
                format!("db_next flags {flags:#x} set bits this ABI does not define (known: {NEXT_FLAGS:#x})"),
            )
            .into());
        }
        let key_cap = length(key_cap, u32::MAX >> 1, "key buffer")?;
        let val_cap = length(val_cap, u32::MAX >> 1, "value buffer")?;
        let (data, ctx) = g.memory()?;
        let lo = guest_range(data.len(), lo, lo_len, "lower bound")?;
        let hi = guest_range(data.len(), hi, hi_len, "upper bound")?;
        let key_dst = guest_range(data.len(), key_dst, key_cap, "key buffer")?;
        let val_dst = guest_range(data.len(), val_dst, val_cap, "value buffer")?;
        let bound = |range, on: bool| match on {
            true => core::ops::Bound::Excluded(&data[range]),
            false => core::ops::Bound::Included(&data[range]),
        };
        let walk = Walk {
            lo: bound(lo, flags & NEXT_LO_EXCLUSIVE != 0),
            hi: match flags & NEXT_HI_OPEN != 0 {
                true => core::ops::Bound::Unbounded,
                false => bound(hi, flags & NEXT_HI_INCLUSIVE == 0),
            },
            backward: flags & NEXT_BACKWARD != 0,
            max_skips: u32::try_from(fuel_left / FUEL_PER_KEY_SEEK).unwrap_or(u32::MAX),
        };
        let next = ctx.host()?.next(walk)?;
        let (result, read) = match &next.entry {
            None => (-1, 0),
            Some((key, value)) => {
                let (nk, nv) = (
                    key.len().min(key_cap as usize),
                    value.len().min(val_cap as usize),
                );
                data[key_dst.start..key_dst.start + nk].copy_from_slice(&key[..nk]);
                data[val_dst.start..val_dst.start + nv].copy_from_slice(&value[..nv]);
                let dirty = &mut ctx.state().dirty;
                dirty.wrote(key_dst.start..key_dst.start + nk);
                dirty.wrote(val_dst.start..val_dst.start + nv);
                (
                    (key.len() as i64) << 32 | value.len() as i64,
                    (key.len() + value.len()) as u64,
                )
            }
        };
        let after = read * DB_NEXT.per_output_byte + u64::from(next.skipped) * FUEL_PER_KEY_SEEK;
        Ok((result, after))
    })
}

/// `assert(cond, msg, mlen)`: aborts the action with the message when `cond` is zero.
pub fn assert(g: &mut impl Guest, cond: i32, msg: i32, mlen: i32) -> Result<(), HostError> {
    g.charge(ASSERT.before(0))?;
    if cond != 0 {
        return Ok(());
    }
    let mlen = length(mlen, MAX_ASSERT_MESSAGE_LEN, "assert message")?;
    let (data, _) = g.memory()?;
    let msg = guest_range(data.len(), msg, mlen, "assert message")?;
    let text = String::from_utf8_lossy(&data[msg]).into_owned();
    Err(Abort::new(AbortCode::AssertFailed, text).into())
}

/// `require_auth(account)`: aborts unless the transaction is signed by `account`'s key.
pub fn require_auth(g: &mut impl Guest, account: i64) -> Result<(), HostError> {
    g.charge(REQUIRE_AUTH.before(0))?;
    let account = Name(account as u64);
    if g.data().host()?.is_authorized(account) {
        Ok(())
    } else {
        Err(Abort::new(
            AbortCode::Unauthorized,
            format!("missing authority of {account}"),
        )
        .into())
    }
}

/// `print(msg, mlen)`: appends to the action's console (bounded) and shows it to the host.
pub fn print(g: &mut impl Guest, msg: i32, mlen: i32) -> Result<(), HostError> {
    let mlen = length(mlen, MAX_CONSOLE_LEN, "console text")?;
    g.charge(PRINT.before(mlen as u64))?;
    let (data, ctx) = g.memory()?;
    let msg = guest_range(data.len(), msg, mlen, "console text")?;
    ctx.state().console.push(&data[msg.clone()])?;
    ctx.host()?.print(&data[msg])
}

/// `call(account, action, data, len, fuel) -> i32`: runs `account`'s `action` with `data`,
/// giving it at most `fuel` (0: all the caller has left); 0 on success, else the callee's
/// abort code. The callee's fuel comes out of the caller's, and its return data is kept for
/// `read_return`.
pub fn call(
    g: &mut impl Guest,
    account: i64,
    action: i64,
    data: i32,
    len: i32,
    fuel: i64,
) -> Result<i32, HostError> {
    call_with(g, CALL, CallKind::Action, account, action, data, len, fuel)
}

/// `query(account, method, data, len, fuel) -> i32`: runs `account`'s read-only `method` with
/// `data`, like [`call`].
pub fn query(
    g: &mut impl Guest,
    account: i64,
    method: i64,
    data: i32,
    len: i32,
    fuel: i64,
) -> Result<i32, HostError> {
    call_with(g, QUERY, CallKind::Query, account, method, data, len, fuel)
}

/// What `call` and `query` share: charge for the call and its input, give the callee what
/// fuel the caller allows, run it through the host, take back the fuel it used and charge for
/// its output.
#[allow(clippy::too_many_arguments)] // the import's own arguments, and how to price and run it
fn call_with(
    g: &mut impl Guest,
    charge: Charge,
    kind: CallKind,
    account: i64,
    entry: i64,
    data: i32,
    len: i32,
    fuel: i64,
) -> Result<i32, HostError> {
    let len = length(len, MAX_MESSAGE_LEN, "call data")?;
    g.charge(charge.before(len as u64))?;
    let stack_height = g.stack_height();
    let left = g.fuel()?;
    let cap = match fuel as u64 {
        0 => left,
        cap => cap.min(left),
    };
    let (memory, ctx) = g.memory()?;
    let data = guest_range(memory.len(), data, len, "call data")?;
    let result = ctx.host()?.call(Call {
        account: Name(account as u64),
        entry: Name(entry as u64),
        data: &memory[data],
        fuel: cap,
        kind,
        stack_height,
    })?;
    let status = match &result.status {
        Ok(()) => 0,
        Err(abort) => i32::from(abort.code.code()),
    };
    let output = result.output.len() as u64;
    ctx.state().returned = result.output;
    g.set_fuel(left - result.fuel_used.min(cap))?;
    g.charge(output * charge.per_output_byte)?;
    Ok(status)
}

/// `set_return(ptr, len)`: sets the action's return data, replacing any set before.
pub fn set_return(g: &mut impl Guest, ptr: i32, len: i32) -> Result<(), HostError> {
    let len = length(len, MAX_RETURN_LEN, "return data")?;
    g.charge(SET_RETURN.before(len as u64))?;
    let (memory, ctx) = g.memory()?;
    let range = guest_range(memory.len(), ptr, len, "return data")?;
    let output = &mut ctx.state().output;
    output.clear();
    output.extend_from_slice(&memory[range]);
    Ok(())
}

/// `return_size() -> i32`: the length of the last call's return data.
pub fn return_size(g: &mut impl Guest) -> Result<i32, HostError> {
    g.charge(RETURN_SIZE.before(0))?;
    Ok(g.data().state().returned.len() as i32)
}

/// `read_return(dst, len) -> i32`: copies up to `len` bytes of the last call's return data to
/// `dst`; returns its full length.
pub fn read_return(g: &mut impl Guest, dst: i32, len: i32) -> Result<i32, HostError> {
    g.charge_around(READ_RETURN.before(0), |g, _| {
        let len = length(len, u32::MAX >> 1, "return buffer")?;
        let (memory, ctx) = g.memory()?;
        let dst = guest_range(memory.len(), dst, len, "return buffer")?;
        let state = ctx.state();
        let n = state.returned.len().min(dst.len());
        memory[dst.start..dst.start + n].copy_from_slice(&state.returned[..n]);
        let full = state.returned.len() as i32;
        state.dirty.wrote(dst.start..dst.start + n);
        // The callee's output was charged when it was handed back: only the copy is charged.
        Ok((full, n as u64 * READ_RETURN.per_output_byte))
    })
}

/// `caller() -> i64`: the contract that called this action, or 0.
pub fn caller(g: &mut impl Guest) -> Result<i64, HostError> {
    g.charge(CALLER.before(0))?;
    Ok(g.data().host()?.caller().0 as i64)
}

/// `emit(name, data, len)`: records event `name` with `data` in the transaction's receipt.
pub fn emit(g: &mut impl Guest, name: i64, data: i32, len: i32) -> Result<(), HostError> {
    let len = length(len, MAX_EVENT_LEN, "event data")?;
    g.charge(EMIT.before(len as u64))?;
    let (memory, ctx) = g.memory()?;
    let data = guest_range(memory.len(), data, len, "event data")?;
    ctx.host()?.emit(Name(name as u64), &memory[data])
}

/// `block_time() -> i64`: the block's time in ms since the Unix epoch.
pub fn block_time(g: &mut impl Guest) -> Result<i64, HostError> {
    g.charge(BLOCK_TIME.before(0))?;
    Ok(g.data().host()?.block().time_ms as i64)
}

/// `block_height() -> i64`: the block's height.
pub fn block_height(g: &mut impl Guest) -> Result<i64, HostError> {
    g.charge(BLOCK_HEIGHT.before(0))?;
    Ok(g.data().host()?.block().height as i64)
}

/// `has_auth(account) -> i32`: 1 if `account` authorizes this action, else 0.
pub fn has_auth(g: &mut impl Guest, account: i64) -> Result<i32, HostError> {
    g.charge(HAS_AUTH.before(0))?;
    Ok(i32::from(
        g.data().host()?.is_authorized(Name(account as u64)),
    ))
}

/// `is_account(account) -> i32`: 1 if the account exists, else 0.
pub fn is_account(g: &mut impl Guest, account: i64) -> Result<i32, HostError> {
    g.charge(IS_ACCOUNT.before(0))?;
    Ok(i32::from(
        g.data().host()?.is_account(Name(account as u64))?,
    ))
}

/// `charge_chunks(chunks)`: a charge point of the instrumentation pays for the chunks wasm
/// marked since the last one.
pub fn charge_chunks(g: &mut impl Guest, chunks: i32) -> Result<(), HostError> {
    g.charge(u64::from(chunks as u32) * FUEL_PER_DIRTY_CHUNK)
}

/// `mem_write(dst, len)`, before a bulk memory operation writes: the engine charges the
/// operation per byte; this marks the chunks it writes in the map and pays for those not
/// marked yet, before a byte is written.
pub fn mem_write(g: &mut impl Guest, dst: i32, len: i32) -> Result<(), HostError> {
    let Some((memory_len, map)) = g.dirty_map() else {
        return Ok(());
    };
    let newly = mark_bulk_write(map, memory_len, dst, len);
    g.charge(newly * FUEL_PER_DIRTY_CHUNK)
}

/// `grow(pages)`, before `memory.grow`: its flat price.
pub fn grow(g: &mut impl Guest, pages: i32) -> Result<(), HostError> {
    let _ = pages;
    g.charge(FUEL_PER_MEMORY_GROW)
}

/// `stack_exhausted()`: the deterministic stack limit was reached.
pub fn stack_exhausted(g: &mut impl Guest) -> Result<(), HostError> {
    let _ = g;
    Err(Abort::new(
        AbortCode::StackOverflow,
        format!("call stack exhausted: frames exceed {MAX_STACK_BYTES} bytes"),
    )
    .into())
}

/// Registers every ABI v1 import on `$linker` (a wasmtime or wasmi `Linker`), as module
/// [`crate::abi::MODULE`], propagating the linker's error with `?`: each import a closure
/// taking the engine's `$caller` type, wrapped into a [`Guest`] by the tuple struct `$guest`,
/// whose [`HostError`] becomes the engine's error by `$trap`. The list of imports and their
/// types is written here once, for every engine.
///
/// ```ignore
/// register_imports!(linker, Caller<'_, T>, Wasmtime, into_trap);
/// ```
#[macro_export]
macro_rules! register_imports {
    ($linker:expr, $caller:ty, $guest:path, $trap:expr) => {
        $crate::__register!($linker, $crate::abi::MODULE, $caller, $guest, $trap;
            read_message(dst: i32, len: i32);
            message_size();
            load(key: i32, klen: i32, dst: i32, dlen: i32);
            store(key: i32, klen: i32, val: i32, vlen: i32);
            remove(key: i32, klen: i32);
            assert(cond: i32, msg: i32, mlen: i32);
            require_auth(account: i64);
            print(msg: i32, mlen: i32);
            call(account: i64, action: i64, data: i32, len: i32, fuel: i64);
            query(account: i64, method: i64, data: i32, len: i32, fuel: i64);
            set_return(ptr: i32, len: i32);
            return_size();
            read_return(dst: i32, len: i32);
            caller();
            emit(name: i64, data: i32, len: i32);
            block_time();
            block_height();
            has_auth(account: i64);
            is_account(account: i64);
            db_next(lo: i32, lo_len: i32, hi: i32, hi_len: i32, flags: i32,
                key_dst: i32, key_cap: i32, val_dst: i32, val_cap: i32);
        )
    };
}

/// Registers the metering imports the runtime's instrumentation calls on `$linker`, as module
/// `$module`, like [`register_imports!`](crate::register_imports).
#[macro_export]
macro_rules! register_metering_imports {
    ($linker:expr, $module:expr, $caller:ty, $guest:path, $trap:expr) => {
        $crate::__register!($linker, $module, $caller, $guest, $trap;
            charge_chunks(chunks: i32);
            mem_write(dst: i32, len: i32);
            grow(pages: i32);
            stack_exhausted();
        )
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __register {
    ($linker:expr, $module:expr, $caller:ty, $guest:path, $trap:expr;
        $($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            $linker.func_wrap(
                $module,
                stringify!($name),
                |mut caller: $caller, $($arg: $ty),*| {
                    $crate::imports::$name(&mut $guest(&mut caller), $($arg),*).map_err($trap)
                },
            )?;
        )*
    };
}

/// Implements [`Guest`] for `$guest`, a tuple struct around an engine's `&mut Caller` whose
/// store data is `$data`, for engines whose callers and memories speak wasmtime's API
/// (`get_fuel`, `set_fuel`, `data`, `data_mut`; `Memory::data`, `data_mut`,
/// `data_and_store_mut`), as wasmtime and wasmi both do. `$memory` and `$dirty_map` read the
/// handles of the contract's memory and of the instrumentation's map from the store data;
/// `$fault` turns the engine's fuel error into a [`HostError`].
///
/// ```ignore
/// impl_guest!([T: WasmHost] Wasmtime<'_, '_, T>, T, fuel_off,
///     memory: |data: &T| data.memory(), dirty_map: |data: &T| data.dirty_map(),
///     stack_height: |caller: &mut Caller<'_, T>| stack_height(caller));
/// ```
#[macro_export]
macro_rules! impl_guest {
    ([$($generics:tt)*] $guest:ty, $data:ty, $fault:expr,
        memory: $memory:expr, dirty_map: $map:expr, stack_height: $stack:expr) => {
        impl<$($generics)*> $crate::imports::Guest for $guest {
            type Data = $data;

            fn fuel(&self) -> Result<u64, $crate::HostError> {
                self.0.get_fuel().map_err($fault)
            }

            fn set_fuel(&mut self, fuel: u64) -> Result<(), $crate::HostError> {
                self.0.set_fuel(fuel).map_err($fault)
            }

            fn data(&mut self) -> &mut $data {
                self.0.data_mut()
            }

            fn memory(&mut self) -> Result<(&mut [u8], &mut $data), $crate::HostError> {
                let memory = ($memory)(self.0.data()).ok_or_else($crate::imports::no_memory)?;
                Ok(memory.data_and_store_mut(&mut *self.0))
            }

            fn dirty_map(&mut self) -> Option<(usize, &mut [u8])> {
                let map = ($map)(self.0.data())?;
                let memory = ($memory)(self.0.data());
                let memory_len = memory.map_or(0, |m| m.data(&*self.0).len());
                Some((memory_len, map.data_mut(&mut *self.0)))
            }

            fn stack_height(&mut self) -> u32 {
                ($stack)(&mut *self.0)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest with nothing but fuel: no memory, and store data that lends no host.
    struct Fuel(u64, Bare);

    #[derive(Default)]
    struct Bare(CallState);

    impl ActionData for Bare {
        fn host(&mut self) -> Result<&mut dyn Host, HostError> {
            Err(no_memory())
        }

        fn state(&mut self) -> &mut CallState {
            &mut self.0
        }
    }

    impl Guest for Fuel {
        type Data = Bare;

        fn fuel(&self) -> Result<u64, HostError> {
            Ok(self.0)
        }

        fn set_fuel(&mut self, fuel: u64) -> Result<(), HostError> {
            self.0 = fuel;
            Ok(())
        }

        fn data(&mut self) -> &mut Bare {
            &mut self.1
        }

        fn memory(&mut self) -> Result<(&mut [u8], &mut Bare), HostError> {
            Err(no_memory())
        }

        fn dirty_map(&mut self) -> Option<(usize, &mut [u8])> {
            None
        }

        fn stack_height(&mut self) -> u32 {
            0
        }
    }

    /// The code of an abort, or `None` for success or a node fault.
    fn code<R>(result: &Result<R, HostError>) -> Option<AbortCode> {
        match result {
            Err(HostError::Abort(abort)) => Some(abort.code),
            _ => None,
        }
    }

    #[test]
    fn charging_around_a_call_leaves_the_fuel_and_outcome_two_charges_would() {
        // (fuel, before, the body's result: the fuel it owes after, or a failure)
        let bad = || Abort::new(AbortCode::BadPointer, "a failing body");
        for fuel in [0, 5, 10, 15, 100] {
            for before in [0, 5, 10, 11] {
                for after in [None, Some(0), Some(4), Some(5), Some(90)] {
                    let body = |_: &mut Fuel| match after {
                        Some(after) => Ok(((), after)),
                        None => Err(HostError::from(bad())),
                    };
                    let mut two = Fuel(fuel, Bare::default());
                    let by_two = two.charge(before).and_then(|()| {
                        let ((), after) = body(&mut two)?;
                        two.charge(after)
                    });
                    let mut one = Fuel(fuel, Bare::default());
                    let by_one = one.charge_around(before, |g, left| {
                        assert_eq!(left, fuel - before, "the fuel left after `before`");
                        body(g)
                    });
                    let case = format!("fuel {fuel}, before {before}, after {after:?}");
                    assert_eq!(one.0, two.0, "{case}: fuel left");
                    assert_eq!(by_one.is_ok(), by_two.is_ok(), "{case}");
                    assert_eq!(code(&by_one), code(&by_two), "{case}");
                }
            }
        }
    }
}
