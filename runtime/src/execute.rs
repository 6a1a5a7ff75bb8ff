//! The store data of a running action, and instances that can be restored between actions.

use std::ops::Range;
use std::ptr::NonNull;

use tally_host_api::limits::MAX_CONSOLE_LEN;
use tally_host_api::linker::WasmHost;
use tally_host_api::{Abort, AbortCode, Host, HostError, Name, NodeFault};
use wasmtime::{Memory, Trap};

/// The empty dirty range: `min`/`max` with any written range gives that range.
#[allow(clippy::reversed_empty_ranges)]
pub(crate) const NOTHING_WRITTEN: Range<usize> = usize::MAX..0;

/// The store data of an instance.
///
/// It holds the embedder's [`Host`] as a raw pointer because wasmtime requires store data to
/// be `'static`, while the host is borrowed only for the call to [`crate::Runtime::execute`].
/// `execute` sets the pointer before it calls into wasm, and only host functions called from
/// that wasm dereference it, so a pointer left over in a warm instance is never used.
pub(crate) struct ActionCtx {
    host: NonNull<dyn Host>,
    pub(crate) memory: Option<Memory>,
    pub(crate) console: Vec<u8>,
    /// Guest memory the host wrote during this action, as `low..high` (empty: `MAX..0`).
    pub(crate) host_dirty: Range<usize>,
}

// SAFETY: the pointer is only dereferenced by the thread running `execute`, which holds the
// exclusive borrow it came from for the whole life of the store.
unsafe impl Send for ActionCtx {}

impl ActionCtx {
    pub(crate) fn new(host: &mut dyn Host) -> Self {
        Self {
            host: erase(host),
            memory: None,
            console: Vec::new(),
            host_dirty: NOTHING_WRITTEN,
        }
    }

    /// Points the context at the host of the action about to run.
    pub(crate) fn set_host(&mut self, host: &mut dyn Host) {
        self.host = erase(host);
    }

    fn host(&self) -> &dyn Host {
        // SAFETY: see the type's docs.
        unsafe { self.host.as_ref() }
    }

    fn host_mut(&mut self) -> &mut dyn Host {
        // SAFETY: see the type's docs.
        unsafe { self.host.as_mut() }
    }
}

impl Host for ActionCtx {
    fn message(&self) -> &[u8] {
        self.host().message()
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        self.host_mut().load(key)
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.host_mut().store(key, value)
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.host_mut().remove(key)
    }
    fn is_authorized(&self, account: Name) -> bool {
        self.host().is_authorized(account)
    }
    fn print(&mut self, text: &[u8]) -> Result<(), HostError> {
        if self.console.len() + text.len() > MAX_CONSOLE_LEN as usize {
            return Err(Abort::new(
                AbortCode::LimitExceeded,
                format!("console output exceeds {MAX_CONSOLE_LEN} bytes"),
            )
            .into());
        }
        self.console.extend_from_slice(text);
        self.host_mut().print(text)
    }
}

fn erase(host: &mut dyn Host) -> NonNull<dyn Host> {
    let host: NonNull<dyn Host + '_> = NonNull::from(host);
    // SAFETY: only the trait object's lifetime bound changes; see `ActionCtx` for why the
    // pointer is never used after the borrow ends.
    unsafe { std::mem::transmute(host) }
}

impl WasmHost for ActionCtx {
    fn memory(&self) -> Option<Memory> {
        self.memory
    }

    fn wrote(&mut self, range: Range<usize>) {
        if !range.is_empty() {
            self.host_dirty.start = self.host_dirty.start.min(range.start);
            self.host_dirty.end = self.host_dirty.end.max(range.end);
        }
    }
}

/// Turns an error from a call into wasm into a deterministic abort, or the node fault a host
/// call met. Only the error's type and trap code are read, never wasmtime's text.
pub(crate) fn classify(err: wasmtime::Error, fuel_limit: u64) -> Result<Abort, NodeFault> {
    let err = match err.downcast::<NodeFault>() {
        Ok(fault) => return Err(fault),
        Err(err) => err,
    };
    Ok(classify_abort(&err, fuel_limit))
}

fn classify_abort(err: &wasmtime::Error, fuel_limit: u64) -> Abort {
    if let Some(abort) = err.downcast_ref::<Abort>() {
        return abort.clone();
    }
    let Some(trap) = err.downcast_ref::<Trap>() else {
        return Abort::new(AbortCode::Trap, "execution failed");
    };
    let (code, text) = match trap {
        Trap::OutOfFuel => {
            return Abort::new(
                AbortCode::OutOfFuel,
                format!("the action used all of its {fuel_limit} fuel"),
            );
        }
        Trap::StackOverflow => (AbortCode::StackOverflow, "call stack exhausted"),
        Trap::MemoryOutOfBounds => (AbortCode::Trap, "out-of-bounds memory access"),
        Trap::HeapMisaligned => (AbortCode::Trap, "misaligned memory access"),
        Trap::TableOutOfBounds => (AbortCode::Trap, "out-of-bounds table access"),
        Trap::IndirectCallToNull => (AbortCode::Trap, "indirect call to a null element"),
        Trap::BadSignature => (AbortCode::Trap, "indirect call signature mismatch"),
        Trap::IntegerOverflow => (AbortCode::Trap, "integer overflow"),
        Trap::IntegerDivisionByZero => (AbortCode::Trap, "integer division by zero"),
        Trap::BadConversionToInteger => (AbortCode::Trap, "invalid conversion to integer"),
        Trap::UnreachableCodeReached => (AbortCode::Trap, "unreachable executed"),
        _ => (AbortCode::Trap, "trap"),
    };
    Abort::new(code, text)
}
