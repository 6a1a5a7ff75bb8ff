//! Registration of the ABI v1 imports on a wasmtime [`Linker`] (feature `host`).
//!
//! What each import does is engine-free, in [`crate::imports`]; this module only lends it
//! wasmtime's fuel, memory and store data through a [`Guest`](crate::imports::Guest), and turns its [`HostError`]
//! into the call's error, which wasmtime turns into a trap and the runtime into a failed
//! receipt (an [`crate::Abort`]) or a node fault (a [`crate::NodeFault`]).

use std::format;
use std::string::String;

use wasmtime::{Caller, Global, Linker, Memory};

use crate::error::{HostError, NodeFault};
use crate::imports::ActionData;

/// The store data of a running action: the host functions' [`ActionData`], and the
/// instance's memories.
pub trait WasmHost: ActionData + 'static {
    /// The running instance's exported linear memory. The runtime sets it right after
    /// instantiation; `None` before that.
    fn memory(&self) -> Option<Memory>;

    /// The instrumentation's dirty-chunk map ([`crate::memory`]), for the metering imports;
    /// `None` for an instance without one.
    fn dirty_map(&self) -> Option<Memory> {
        None
    }

    /// The instrumentation's stack-height global, which a call's callee starts from; `None`
    /// for an instance without one.
    fn stack(&self) -> Option<Global> {
        None
    }
}

/// The deterministic stack height of the running action: the instrumentation's counter.
fn stack_height<T: WasmHost>(caller: &mut Caller<'_, T>) -> u32 {
    match caller.data().stack() {
        Some(global) => global.get(&mut *caller).i32().map_or(0, |h| h as u32),
        None => 0,
    }
}

/// A wasmtime host call as a [`Guest`](crate::imports::Guest).
pub struct Wasmtime<'a, 'c, T: 'static>(pub &'a mut Caller<'c, T>);

/// The node fault of an engine that does not meter fuel (a misconfigured runtime).
#[derive(Debug)]
struct FuelOff(String);

impl core::fmt::Display for FuelOff {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "wasmtime fuel: {}", self.0)
    }
}

impl core::error::Error for FuelOff {}

fn fuel_off(e: wasmtime::Error) -> HostError {
    NodeFault::new(FuelOff(format!("{e:#}"))).into()
}

crate::impl_guest!([T: WasmHost] Wasmtime<'_, '_, T>, T, fuel_off,
    memory: |data: &T| data.memory(), dirty_map: |data: &T| data.dirty_map(),
    stack_height: |caller: &mut Caller<'_, T>| stack_height(caller));

/// A host function's error as the call's error: an [`crate::Abort`] fails the action, a
/// [`NodeFault`] reaches the runtime unchanged, which fails the block instead.
pub fn into_trap(err: HostError) -> wasmtime::Error {
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
    crate::register_imports!(linker, Caller<'_, T>, Wasmtime, into_trap);
    Ok(())
}
