//! The store data of a running action, the guard that lends it the host, the runtime's private
//! imports, and how a failed call becomes a receipt.

use std::ops::Range;
use std::ptr::NonNull;

use tally_host_api::limits::{
    DIRTY_CHUNK_BYTES, FUEL_PER_DIRTY_CHUNK, FUEL_PER_MEMORY_GROW, FUEL_PER_MEMORY_PAGE,
    MAX_CONSOLE_LEN, MAX_STACK_BYTES, PAGE_SIZE,
};
use tally_host_api::linker::{WasmHost, charge};
use tally_host_api::{Abort, AbortCode, Host, HostError, Name, NodeFault, Upsert};
use wasmtime::{Caller, Global, Linker, Memory, Store, Trap, Val};

use crate::error::RuntimeError;
use crate::instrument::PRIVATE_MODULE;

/// Chunk indices a wasm store can name without trapping first: the dirty-chunk map is one
/// 64 KiB page, a byte per chunk.
const MAP_CHUNKS: usize = 1 << 16;

/// Chunks of the contract's memory the host wrote during this action (wasm marks its own in
/// the instance's map), and, once the action has ended, every chunk it dirtied.
pub(crate) struct DirtyChunks {
    /// One bit per chunk index below [`MAP_CHUNKS`].
    marked: Box<[u64]>,
    /// The marked chunks.
    pub(crate) chunks: Vec<u32>,
}

impl DirtyChunks {
    fn new() -> Self {
        Self {
            marked: vec![0; MAP_CHUNKS / 64].into_boxed_slice(),
            chunks: Vec::new(),
        }
    }

    pub(crate) fn is_marked(&self, chunk: u32) -> bool {
        let chunk = chunk as usize;
        chunk >= MAP_CHUNKS || self.marked[chunk / 64] & (1 << (chunk % 64)) != 0
    }

    /// Marks `chunk`; `false` if it was already marked (or cannot be written at all).
    pub(crate) fn mark(&mut self, chunk: u32) -> bool {
        if self.is_marked(chunk) {
            return false;
        }
        let index = chunk as usize;
        self.marked[index / 64] |= 1 << (index % 64);
        self.chunks.push(chunk);
        true
    }

    /// Forgets every mark, keeping the allocations.
    pub(crate) fn clear(&mut self) {
        for &chunk in &self.chunks {
            let chunk = chunk as usize;
            self.marked[chunk / 64] &= !(1 << (chunk % 64));
        }
        self.chunks.clear();
    }
}

/// The chunks that `range` of a memory of `memory_len` bytes covers.
fn chunks_of(range: Range<u64>, memory_len: usize) -> Range<u32> {
    let end = range.end.min(memory_len as u64);
    if range.start >= end {
        return 0..0;
    }
    (range.start / DIRTY_CHUNK_BYTES) as u32..(end.div_ceil(DIRTY_CHUNK_BYTES)) as u32
}

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
    pub(crate) console: Vec<u8>,
    pub(crate) dirty: DirtyChunks,
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
            console: Vec::new(),
            dirty: DirtyChunks::new(),
        }
    }

    fn host(&self) -> Option<&dyn Host> {
        // SAFETY: see the type's docs: a set pointer is valid for the whole `with_host` call.
        self.host.map(|host| unsafe { &*host.as_ptr() })
    }

    fn host_mut(&mut self) -> Result<&mut dyn Host, HostError> {
        match self.host {
            // SAFETY: see the type's docs.
            Some(host) => Ok(unsafe { &mut *host.as_ptr() }),
            None => Err(NodeFault::new(NoHost).into()),
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

impl Host for ActionCtx {
    fn message(&self) -> &[u8] {
        // Without a host there is no message; only a runtime bug gets here.
        self.host().map_or(&[], |host| host.message())
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        self.host_mut()?.load(key)
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.host_mut()?.store(key, value)
    }
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<Upsert, HostError> {
        self.host_mut()?.upsert(key, value)
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.host_mut()?.remove(key)
    }
    fn is_authorized(&self, account: Name) -> bool {
        self.host().is_some_and(|host| host.is_authorized(account))
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
        self.host_mut()?.print(text)
    }
}

impl WasmHost for ActionCtx {
    fn memory(&self) -> Option<Memory> {
        self.memory
    }

    fn wrote(&mut self, range: Range<usize>) -> u64 {
        // The host checked `range` against the memory, so every chunk of it exists. The
        // chunks are paid with all the others when the action ends ([`collect_dirty`]).
        for chunk in chunks_of(range.start as u64..range.end as u64, usize::MAX) {
            self.dirty.mark(chunk);
        }
        0
    }
}

/// After an action: gathers every chunk it dirtied (the instance's map and the host's own
/// writes) into `dirty.chunks`, and returns the fuel still owed for them and for reading the
/// map: [`FUEL_PER_DIRTY_CHUNK`] for each chunk no charge point paid for yet, and
/// [`FUEL_PER_MEMORY_PAGE`] per page of memory.
///
/// A successful action wrote only inside its memory, so only the map's first
/// `memory length / 1 KiB` bytes can be set. A failed one may have marked the chunk of the
/// out-of-bounds store that trapped, anywhere in the map, so then the whole map is read.
/// Either way the count is the same on every node: it depends only on what the action did.
pub(crate) fn collect_dirty(store: &mut Store<ActionCtx>, failed: bool) -> u64 {
    let (Some(map), Some(new_chunks)) = (store.data().dirty_map, store.data().new_chunks) else {
        return 0;
    };
    // Chunks wasm marked after its last charge point.
    let pending = match new_chunks.get(&mut *store) {
        Val::I32(n) => u64::from(n as u32),
        _ => 0,
    };
    // Resetting an i32 global with an i32 cannot fail.
    let _ = new_chunks.set(&mut *store, Val::I32(0));
    let memory_len = store.data().memory.map_or(0, |m| m.data_size(&*store));
    let (map, ctx) = map.data_and_store_mut(&mut *store);
    // Chunks only the host wrote (wasm marks its own in the map, and paid for them).
    let host_only = ctx
        .dirty
        .chunks
        .iter()
        .filter(|&&chunk| map.get(chunk as usize).is_some_and(|&b| b == 0))
        .count() as u64;
    let scanned = if failed {
        map.len()
    } else {
        (memory_len as u64).div_ceil(DIRTY_CHUNK_BYTES) as usize
    };
    // Most of a big map is zero: skip it a block at a time, with a reduction the compiler
    // vectorises (a byte at a time cost ~35 µs for a 512-page memory's 32 KiB map).
    const BLOCK: usize = 256;
    for (block_index, block) in map[..scanned.min(map.len())].chunks(BLOCK).enumerate() {
        if or_all(block) == 0 {
            continue;
        }
        for (i, &byte) in block.iter().enumerate() {
            if byte != 0 {
                ctx.dirty.mark((block_index * BLOCK + i) as u32);
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

type HostResult<T> = wasmtime::Result<T>;

/// Registers the imports of module `__tally` that the instrumentation calls
/// ([`crate::instrument::PRIVATE_IMPORTS`]).
pub(crate) fn add_private_imports(linker: &mut Linker<ActionCtx>) -> wasmtime::Result<()> {
    linker.func_wrap(
        PRIVATE_MODULE,
        "charge_chunks",
        |mut caller: Caller<'_, ActionCtx>, chunks: i32| -> HostResult<()> {
            charge(&mut caller, u64::from(chunks as u32) * FUEL_PER_DIRTY_CHUNK)
        },
    )?;
    linker.func_wrap(
        PRIVATE_MODULE,
        "mem_write",
        |mut caller: Caller<'_, ActionCtx>, dst: i32, len: i32| -> HostResult<()> {
            // wasmtime charges the operation per byte (see `engine::fuel_costs`); this marks
            // the chunks it writes in the map and pays for those not marked yet, before a
            // byte is written.
            let (dst, len) = (u64::from(dst as u32), u64::from(len as u32));
            let memory_len = caller
                .data()
                .memory
                .map_or(0, |memory| memory.data_size(&caller));
            let Some(map) = caller.data().dirty_map else {
                return Ok(());
            };
            // Chunks past the memory are not marked: the operation traps before writing.
            let chunks = chunks_of(dst..dst + len, memory_len);
            let map = &mut map.data_mut(&mut caller)[chunks.start as usize..chunks.end as usize];
            let newly = map.iter().filter(|&&b| b == 0).count() as u64;
            map.fill(1);
            charge(&mut caller, newly * FUEL_PER_DIRTY_CHUNK)
        },
    )?;
    linker.func_wrap(
        PRIVATE_MODULE,
        "grow",
        |mut caller: Caller<'_, ActionCtx>, _pages: i32| -> HostResult<()> {
            charge(&mut caller, FUEL_PER_MEMORY_GROW)
        },
    )?;
    linker.func_wrap(
        PRIVATE_MODULE,
        "stack_exhausted",
        |_caller: Caller<'_, ActionCtx>| -> HostResult<()> {
            Err(wasmtime::Error::new(Abort::new(
                AbortCode::StackOverflow,
                format!("call stack exhausted: frames exceed {MAX_STACK_BYTES} bytes"),
            )))
        },
    )?;
    Ok(())
}

/// What a failed call into wasm means.
pub(crate) enum Failure {
    /// The contract failed: a receipt.
    Abort(Abort),
    /// The node failed: no receipt.
    Node(RuntimeError),
}

/// Turns an error from a call into wasm into a deterministic abort, or into the node fault it
/// is. Only the error's type and trap code are read, never wasmtime's text.
pub(crate) fn classify(err: wasmtime::Error, fuel_limit: u64) -> Failure {
    let err = match err.downcast::<NodeFault>() {
        Ok(fault) => return Failure::Node(RuntimeError::Host(fault)),
        Err(err) => err,
    };
    if let Some(abort) = err.downcast_ref::<Abort>() {
        return Failure::Abort(abort.clone());
    }
    let Some(trap) = err.downcast_ref::<Trap>() else {
        // Not a trap and not from a host function: the engine itself failed, which no
        // contract can cause on purpose, and which another node may not see.
        return Failure::Node(RuntimeError::Engine(format!("{err:#}")));
    };
    let (code, text) = match trap {
        Trap::OutOfFuel => {
            return Failure::Abort(Abort::new(
                AbortCode::OutOfFuel,
                format!("the action used all of its {fuel_limit} fuel"),
            ));
        }
        // The deterministic limit (`stack_exhausted`) always comes first; reaching the native
        // backstop means that proof failed, and the message says so.
        Trap::StackOverflow => (AbortCode::StackOverflow, "native stack exhausted"),
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
    Failure::Abort(Abort::new(code, text))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(matches!(ctx.load(b"k"), Err(HostError::Fault(_))));
        assert!(matches!(ctx.store(b"k", b"v"), Err(HostError::Fault(_))));
        assert_eq!(ctx.message(), b"");
        assert!(!ctx.is_authorized(Name(1)));
    }

    #[test]
    fn the_host_is_lent_only_for_the_call_even_when_it_panics() {
        let engine = wasmtime::Engine::default();
        let mut store = Store::new(&engine, ActionCtx::new());
        let mut host = Fixed;
        let seen = with_host(&mut store, &mut host, |store| {
            store.data_mut().load(b"k").unwrap().map(<[u8]>::to_vec)
        });
        assert_eq!(seen.as_deref(), Some(&b"value"[..]));
        assert!(store.data().host.is_none());

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_host(&mut store, &mut host, |_| panic!("a host bug"))
        }));
        assert!(panicked.is_err());
        assert!(store.data().host.is_none());
    }

    #[test]
    fn host_writes_mark_each_chunk_once() {
        let mut ctx = ActionCtx::new();
        let chunk = DIRTY_CHUNK_BYTES as usize;
        ctx.wrote(10..20);
        ctx.wrote(30..40);
        ctx.wrote(chunk - 1..chunk + 1);
        ctx.wrote(5 * chunk..5 * chunk);
        ctx.wrote(8 * chunk..10 * chunk);
        assert_eq!(ctx.dirty.chunks, vec![0, 1, 8, 9]);
        ctx.dirty.clear();
        assert!(!ctx.dirty.is_marked(8));
        ctx.wrote(10..20);
        assert_eq!(ctx.dirty.chunks, vec![0]);
    }
}
