//! Live instances: a slot per instance with its store and typed entry points, the sparse
//! snapshot an instance is restored to after every action, and the bounded set of warm slots
//! kept between actions.

use std::sync::Mutex;

use tally_host_api::Name;
use tally_host_api::limits::{DIRTY_CHUNK_BYTES, PAGE_SIZE};
use wasmtime::{Extern, Global, Instance, Memory, ModuleExport, Store, TypedFunc, Val};

use crate::CodeHash;
use crate::execute::ActionCtx;

/// Warm instances kept across actions, over all contracts; the least recently used one is
/// dropped beyond this. Each holds a slot of the engine's instance pool, which has room for
/// them besides those of running actions ([`crate::engine::pool_instances`]). Eight covers
/// the contracts a block usually calls (a token and a few others) without keeping much
/// memory resident ([`WARM_RESIDENT_BYTES`] each).
pub(crate) const WARM_INSTANCES: usize = 8;

/// Bytes of memory a warm instance may keep resident beyond its snapshot. Restored chunks stay
/// mapped, so an instance that once dirtied many would hold them for as long as it stays
/// warm; past this it is dropped instead, and the instance pool returns its memory to the OS.
/// With [`WARM_INSTANCES`] slots, warm instances hold at most 8 x 4 MiB.
const WARM_RESIDENT_BYTES: u64 = 4 * 1024 * 1024;

/// Bytes restored past the end of each dirty chunk: a store is marked by the chunk of its
/// first byte, and the widest store (`v128.store`) writes 16 bytes.
const CHUNK_OVERLAP: usize = 16;

/// How an action enters a contract: resolved and type-checked once per instance.
pub(crate) enum Entries {
    /// `apply(receiver, code, action)`.
    Apply(TypedFunc<(i64, i64, i64), ()>),
    /// 2017 handlers by (code, action).
    Legacy(Vec<(Name, Name, TypedFunc<(), ()>)>),
}

/// The exports an instance is driven through, looked up by index once per module.
pub(crate) struct Exports {
    pub memory: ModuleExport,
    /// The instrumentation's dirty-chunk map.
    pub dirty_map: ModuleExport,
    /// The instrumentation's count of chunks marked since the last charge point.
    pub new_chunks: ModuleExport,
    pub init: Option<ModuleExport>,
    pub dispatch: Dispatch,
    /// `None` for modules whose instances cannot be restored.
    pub restore: Option<RestoreExports>,
}

/// The entry points of a module, by export.
pub(crate) enum Dispatch {
    Apply(ModuleExport),
    Legacy(Vec<(Name, Name, ModuleExport)>),
}

/// The exports restoring an instance needs.
pub(crate) struct RestoreExports {
    pub stack: ModuleExport,
    /// The module's mutable globals.
    pub globals: Vec<ModuleExport>,
}

/// The contract's state right after instantiation, kept sparse: only the pages that were not
/// all zero (its data segments), and the values of its mutable globals.
pub(crate) struct Pristine {
    memory_len: usize,
    /// By page index; `None` for a page that was all zero.
    pages: Vec<Option<Box<[u8]>>>,
    globals: Vec<Val>,
}

impl Pristine {
    /// Takes the snapshot from a fresh instance.
    fn take(memory: &[u8], globals: Vec<Val>) -> Self {
        let pages = memory
            .chunks(PAGE_SIZE as usize)
            .map(|page| (!is_zero(page)).then(|| page.into()))
            .collect();
        Self {
            memory_len: memory.len(),
            pages,
            globals,
        }
    }

    /// Heap bytes the snapshot holds.
    pub(crate) fn bytes(&self) -> usize {
        let pages: usize = self.pages.iter().flatten().map(|page| page.len()).sum();
        pages + self.pages.len() * std::mem::size_of::<Option<Box<[u8]>>>()
    }

    /// Copies `chunk` (and the few bytes a store that began in it may have written past it)
    /// back from the snapshot into `memory`.
    fn restore_chunk(&self, memory: &mut [u8], chunk: u32) {
        let start = chunk as usize * DIRTY_CHUNK_BYTES as usize;
        let end = (start + DIRTY_CHUNK_BYTES as usize + CHUNK_OVERLAP).min(memory.len());
        let mut at = start;
        while at < end {
            let page = at / PAGE_SIZE as usize;
            let within = at % PAGE_SIZE as usize;
            let chunk_end = end.min((page + 1) * PAGE_SIZE as usize);
            let target = &mut memory[at..chunk_end];
            match self.pages.get(page).and_then(Option::as_deref) {
                Some(pristine) => target.copy_from_slice(&pristine[within..within + target.len()]),
                None => target.fill(0),
            }
            at = chunk_end;
        }
    }
}

/// Whether every byte of `bytes` is zero, a word at a time.
fn is_zero(bytes: &[u8]) -> bool {
    // SAFETY: every bit pattern is a valid u64.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    head.iter().all(|&b| b == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
}

/// Handles of what restoring resets, bound once per instance.
struct Bound {
    dirty_map: Memory,
    stack: Global,
    globals: Vec<Global>,
}

/// One live instance with its store.
pub(crate) struct Slot {
    pub code_hash: CodeHash,
    pub store: Store<ActionCtx>,
    pub memory: Memory,
    pub init: Option<TypedFunc<(), ()>>,
    pub entries: Entries,
    bound: Option<Bound>,
    /// Chunks this instance has dirtied since it was created, one bit each; they stay
    /// resident.
    resident: Vec<u64>,
    resident_chunks: u64,
}

/// Looks up a function export and checks its type.
fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    store: &mut Store<ActionCtx>,
    instance: &Instance,
    export: &ModuleExport,
) -> Option<TypedFunc<P, R>> {
    instance
        .get_module_export(&mut *store, export)
        .and_then(Extern::into_func)?
        .typed::<P, R>(&*store)
        .ok()
}

impl Slot {
    /// Wraps a fresh instance, resolving its entry points once. `None` if an export that
    /// validation guaranteed is missing (a runtime bug).
    pub(crate) fn new(
        code_hash: CodeHash,
        mut store: Store<ActionCtx>,
        instance: Instance,
        exports: &Exports,
    ) -> Option<Self> {
        let memory = instance
            .get_module_export(&mut store, &exports.memory)
            .and_then(Extern::into_memory)?;
        store.data_mut().memory = Some(memory);
        let dirty_map = instance
            .get_module_export(&mut store, &exports.dirty_map)
            .and_then(Extern::into_memory)?;
        store.data_mut().dirty_map = Some(dirty_map);
        let new_chunks = instance
            .get_module_export(&mut store, &exports.new_chunks)
            .and_then(Extern::into_global)?;
        store.data_mut().new_chunks = Some(new_chunks);
        let init = match &exports.init {
            Some(export) => Some(typed(&mut store, &instance, export)?),
            None => None,
        };
        let entries = match &exports.dispatch {
            Dispatch::Apply(export) => Entries::Apply(typed(&mut store, &instance, export)?),
            Dispatch::Legacy(handlers) => Entries::Legacy(
                handlers
                    .iter()
                    .map(|(code, action, export)| {
                        Some((*code, *action, typed(&mut store, &instance, export)?))
                    })
                    .collect::<Option<_>>()?,
            ),
        };
        let bound = match &exports.restore {
            None => None,
            Some(restore) => {
                let mut global = |export: &ModuleExport| {
                    instance
                        .get_module_export(&mut store, export)
                        .and_then(Extern::into_global)
                };
                let stack = global(&restore.stack)?;
                let globals = restore
                    .globals
                    .iter()
                    .map(&mut global)
                    .collect::<Option<Vec<_>>>()?;
                Some(Bound {
                    dirty_map,
                    stack,
                    globals,
                })
            }
        };
        Some(Self {
            code_hash,
            store,
            memory,
            init,
            entries,
            bound,
            resident: Vec::new(),
            resident_chunks: 0,
        })
    }

    /// The snapshot of this (fresh) instance.
    pub(crate) fn snapshot(&mut self) -> Option<Pristine> {
        let bound = self.bound.as_ref()?;
        let globals = bound
            .globals
            .iter()
            .map(|g| g.get(&mut self.store))
            .collect();
        Some(Pristine::take(self.memory.data(&self.store), globals))
    }

    /// Puts the instance back into its pristine state, given the chunks the action dirtied
    /// ([`crate::execute::collect_dirty`]); `false` if it cannot be (its memory grew, or it
    /// would keep too much memory resident), and must then be dropped.
    pub(crate) fn restore(&mut self, pristine: &Pristine) -> bool {
        let Some(bound) = &self.bound else {
            return false;
        };
        let store = &mut self.store;
        let chunks = std::mem::take(&mut store.data_mut().dirty.chunks);
        let fits = self.memory.data_size(&*store) == pristine.memory_len;
        if fits {
            let memory = self.memory.data_mut(&mut *store);
            for &chunk in &chunks {
                pristine.restore_chunk(memory, chunk);
            }
        }
        let map = bound.dirty_map.data_mut(&mut *store);
        for &chunk in &chunks {
            if let Some(byte) = map.get_mut(chunk as usize) {
                *byte = 0;
            }
        }
        for &chunk in &chunks {
            let chunk = chunk as usize;
            if self.resident.len() <= chunk / 64 {
                self.resident.resize(chunk / 64 + 1, 0);
            }
            if self.resident[chunk / 64] & (1 << (chunk % 64)) == 0 {
                self.resident[chunk / 64] |= 1 << (chunk % 64);
                self.resident_chunks += 1;
            }
        }
        let dirty = &mut store.data_mut().dirty;
        dirty.chunks = chunks;
        dirty.clear();
        if !fits || self.resident_chunks * DIRTY_CHUNK_BYTES > WARM_RESIDENT_BYTES {
            return false;
        }
        if bound.stack.set(&mut *store, Val::I32(0)).is_err() {
            return false;
        }
        for (global, value) in bound.globals.iter().zip(&pristine.globals) {
            if global.set(&mut *store, *value).is_err() {
                return false;
            }
        }
        true
    }
}

/// Warm slots, most recently used last.
#[derive(Default)]
pub(crate) struct WarmPool {
    slots: Mutex<Vec<Slot>>,
}

impl WarmPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // Slots are pushed and popped whole, so a poisoned lock still holds consistent data.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A warm instance of the contract, most recently used first.
    pub(crate) fn take(&self, code_hash: &CodeHash) -> Option<Slot> {
        let mut slots = self.lock();
        let at = slots
            .iter()
            .rposition(|slot| slot.code_hash == *code_hash)?;
        Some(slots.remove(at))
    }

    /// Keeps `slot` warm, dropping the least recently used one beyond [`WARM_INSTANCES`].
    pub(crate) fn put(&self, slot: Slot) {
        let mut slots = self.lock();
        if slots.len() >= WARM_INSTANCES {
            slots.remove(0);
        }
        slots.push(slot);
    }

    /// How many instances are warm.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Drops every warm instance of a contract (it left the contract cache).
    pub(crate) fn forget(&self, code_hash: &CodeHash) {
        self.lock().retain(|slot| slot.code_hash != *code_hash);
    }

    /// Drops every warm instance, returning their slots to the engine's pool; `false` if there
    /// was none. Dropping happens after the lock is released: freeing a pooled instance resets
    /// its memory.
    pub(crate) fn clear(&self) -> bool {
        let slots = std::mem::take(&mut *self.lock());
        !slots.is_empty()
    }
}
