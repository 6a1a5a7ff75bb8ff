//! The store context of a running action: the store data every host function reaches, the
//! guard that lends it the host, the runtime's private (metering) imports, and what an action
//! owes for the memory it dirtied.

use std::ptr::NonNull;

use tally_host_api::imports::{ActionData, CallState};
use tally_host_api::linker::{WasmHost, Wasmtime, into_trap};
use tally_host_api::{Host, HostError, NodeFault};
use wasmtime::{Caller, Global, Linker, Memory, Store, Val};

use crate::instrument::PRIVATE_MODULE;

/// The store data of an instance.
///
/// It holds the embedder's [`Host`] as a raw pointer because wasmtime requires store data to
/// be `'static`, while the host is borrowed only for one call to [`crate::Runtime::execute`].
/// The pointer is set only inside [`with_host`], which clears it again when the call returns
/// or unwinds, so a warm instance never keeps one; a host function that runs without a host
/// fails with a [`NodeFault`], never by dereferencing anything.
pub(crate) struct ActionCtx {
    host: Option<NonNull<dyn Host>>,
    pub(crate) memory: Option<Memory>,
    /// The instrumentation's dirty-chunk map (memory 1).
    pub(crate) dirty_map: Option<Memory>,
    /// The instrumentation's count of chunks marked since the last charge point.
    pub(crate) new_chunks: Option<Global>,
    /// The instrumentation's stack-height global, which a call's callee starts from.
    pub(crate) stack: Option<Global>,
    /// The module's own stack pointer and the value it starts at, when it keeps one.
    pub(crate) shadow_stack: Option<(Global, u32)>,
    /// The console, and the chunks the host wrote (and, once the action ended, every chunk
    /// it dirtied).
    pub(crate) state: CallState,
}

// SAFETY: the pointer is only dereferenced by the thread running `with_host`, which holds the
// exclusive borrow it came from for as long as the pointer is set.
unsafe impl Send for ActionCtx {}

/// The node fault of a host call made while no host is lent (a runtime bug, never UB).
#[derive(Debug, thiserror::Error)]
#[error("a host function ran while no host was lent to the instance")]
struct NoHost;

impl ActionCtx {
    pub(crate) fn new() -> Self {
        Self {
            host: None,
            memory: None,
            dirty_map: None,
            new_chunks: None,
            stack: None,
            shadow_stack: None,
            state: CallState::default(),
        }
    }
}

/// Lends `host` to the instance in `store` for the duration of `f`. A guard clears the
/// pointer when `f` returns, fails or panics.
pub(crate) fn with_host<R>(
    store: &mut Store<ActionCtx>,
    host: &mut dyn Host,
    f: impl FnOnce(&mut Store<ActionCtx>) -> R,
) -> R {
    struct Lent<'s>(&'s mut Store<ActionCtx>);
    impl Drop for Lent<'_> {
        fn drop(&mut self) {
            self.0.data_mut().host = None;
        }
    }
    let host: NonNull<dyn Host + '_> = NonNull::from(host);
    // SAFETY: only the trait object's lifetime bound changes. The pointer lives in the store
    // until `Lent` drops, which happens before this function returns (or while it unwinds),
    // so it never outlives the borrow it came from.
    let host: NonNull<dyn Host + 'static> = unsafe { std::mem::transmute(host) };
    store.data_mut().host = Some(host);
    let lent = Lent(store);
    f(&mut *lent.0)
}

impl ActionData for ActionCtx {
    fn host(&mut self) -> Result<&mut dyn Host, HostError> {
        match self.host {
            // SAFETY: see the type's docs: a set pointer is valid for the whole `with_host`
            // call.
            Some(host) => Ok(unsafe { &mut *host.as_ptr() }),
            None => Err(NodeFault::new(NoHost).into()),
        }
    }

    fn state(&mut self) -> &mut CallState {
        &mut self.state
    }
}

impl WasmHost for ActionCtx {
    fn memory(&self) -> Option<Memory> {
        self.memory
    }

    fn dirty_map(&self) -> Option<Memory> {
        self.dirty_map
    }

    fn stack(&self) -> Option<Global> {
        self.stack
    }
}

/// After an action: gathers every chunk it dirtied (the instance's map and the host's own
/// writes) into `state.dirty`, and returns the fuel still owed for them and for reading the map
/// ([`DirtyChunks::collect`]). `pending` are the chunks wasm marked after its last charge
/// point, as the entry wrapper returned them; after a trap they are read from the global
/// instead (the next entry wrapper zeroes it).
pub(crate) fn collect_dirty(
    store: &mut Store<ActionCtx>,
    failed: bool,
    pending: Option<u32>,
) -> u64 {
    let (Some(map), Some(new_chunks)) = (store.data().dirty_map, store.data().new_chunks) else {
        return 0;
    };
    let pending = match pending {
        Some(n) => u64::from(n),
        None => match new_chunks.get(&mut *store) {
            Val::I32(n) => u64::from(n as u32),
            _ => 0,
        },
    };
    let memory_len = store.data().memory.map_or(0, |m| m.data_size(&*store));
    let (map, ctx) = map.data_and_store_mut(&mut *store);
    ctx.state.dirty.collect(map, memory_len, failed, pending)
}

/// Registers the imports of module `__tally` that the instrumentation calls
/// ([`crate::instrument::PRIVATE_IMPORTS`]).
pub(crate) fn add_private_imports(linker: &mut Linker<ActionCtx>) -> wasmtime::Result<()> {
    tally_host_api::register_metering_imports!(
        linker,
        PRIVATE_MODULE,
        Caller<'_, ActionCtx>,
        Wasmtime,
        into_trap
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_host_api::Name;

    struct Fixed;

    impl Host for Fixed {
        fn message(&self) -> &[u8] {
            b"message"
        }
        fn load(&mut self, _: &[u8]) -> Result<Option<&[u8]>, HostError> {
            Ok(Some(b"value"))
        }
        fn store(&mut self, _: &[u8], _: &[u8]) -> Result<(), HostError> {
            Ok(())
        }
        fn remove(&mut self, _: &[u8]) -> Result<(), HostError> {
            Ok(())
        }
        fn is_authorized(&self, _: Name) -> bool {
            true
        }
    }

    #[test]
    fn a_host_call_without_a_lent_host_is_a_node_fault() {
        let mut ctx = ActionCtx::new();
        assert!(matches!(ctx.host(), Err(HostError::Fault(_))));
    }

    #[test]
    fn the_host_is_lent_only_for_the_call_even_when_it_panics() {
        let engine = wasmtime::Engine::default();
        let mut store = Store::new(&engine, ActionCtx::new());
        let mut host = Fixed;
        let seen = with_host(&mut store, &mut host, |store| {
            let host = store.data_mut().host().unwrap();
            host.load(b"k").unwrap().map(<[u8]>::to_vec)
        });
        assert_eq!(seen.as_deref(), Some(&b"value"[..]));
        assert!(store.data().host.is_none());

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_host(&mut store, &mut host, |_| panic!("a host bug"))
        }));
        assert!(panicked.is_err());
        assert!(store.data().host.is_none());
    }
}
