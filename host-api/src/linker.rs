//! Registration of the ABI v1 imports on a wasmtime [`Linker`] (feature `host`).
//!
//! What each import does is engine-free, in [`crate::imports`]; this module only lends it
//! wasmtime's fuel, memory and store data through a [`Guest`], and turns its [`HostError`]
//! into the call's error, which wasmtime turns into a trap and the runtime into a failed
//! receipt (an [`crate::Abort`]) or a node fault (a [`crate::NodeFault`]).

use std::format;
use std::string::String;

use wasmtime::{Caller, Linker, Memory};

use crate::error::{HostError, NodeFault};
use crate::imports::{ActionData, Guest, no_memory};

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
}

/// A wasmtime host call as a [`Guest`].
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

impl<T: WasmHost> Guest for Wasmtime<'_, '_, T> {
    type Data = T;

    fn fuel(&self) -> Result<u64, HostError> {
        self.0.get_fuel().map_err(fuel_off)
    }

    fn set_fuel(&mut self, fuel: u64) -> Result<(), HostError> {
        self.0.set_fuel(fuel).map_err(fuel_off)
    }

    fn data(&mut self) -> &mut T {
        self.0.data_mut()
    }

    fn memory(&mut self) -> Result<(&mut [u8], &mut T), HostError> {
        let memory = self.0.data().memory().ok_or_else(no_memory)?;
        Ok(memory.data_and_store_mut(&mut *self.0))
    }

    fn dirty_map(&mut self) -> Option<(usize, &mut [u8])> {
        let map = self.0.data().dirty_map()?;
        let memory_len = self.0.data().memory().map_or(0, |m| m.data_size(&*self.0));
        Some((memory_len, map.data_mut(&mut *self.0)))
    }
}

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
