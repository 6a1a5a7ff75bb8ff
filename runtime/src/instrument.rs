//! Deploy-time rewriting: dirty tracking by 1 KiB chunk, fuel for bulk operations, and a
//! deterministic call-stack limit.
//!
//! - **Dirty chunks.** A fresh instance per action isolates actions but costs ~8 µs, most of
//!   it resetting memory. Instead, every instruction that writes linear memory also marks the
//!   1 KiB chunk it writes in a one-byte-per-chunk map (a second, private memory), and counts
//!   the chunk in a global if it was not marked yet: straight-line code, no branch and no
//!   call, so instrumented code stays cheap to compile. At every *charge point* (each
//!   function's entry and each loop's header) a non-zero count is paid through the runtime's
//!   `charge_chunks`, [`FUEL_PER_DIRTY_CHUNK`](tally_host_api::limits::FUEL_PER_DIRTY_CHUNK)
//!   each, and reset; the runtime pays what is left when the action ends. So the memory an
//!   action can dirty without paying is bounded by the stores of one loop-free, call-free
//!   stretch of code, and no loop can run over memory it has not paid for. After the action
//!   the runtime copies just the marked chunks back from the contract's snapshot, and the
//!   next entry's wrapper (below) resets every global, so the instance is pristine whenever an
//!   action starts. A store that crosses into the
//!   next chunk is covered because the runtime restores 16 bytes past each dirty chunk (the
//!   widest store is 16 bytes). Host writes into guest memory (`read_message`, `load`) are
//!   tracked by the runtime itself ([`tally_host_api::imports::CallState::dirty`]).
//! - **Bulk operations.** wasmtime charges `memory.fill/copy/init` and `table.*` per byte or
//!   element (the engine pins those prices, see [`crate::engine`]). A bulk memory operation
//!   that writes inside one chunk of the memory marks it inline, as a store does; any other
//!   is preceded by a call that marks the chunks it writes and pays for them before a byte is
//!   written. Rust contracts copy a few bytes at a time (27 such copies in a swap trade), and
//!   the call cost ~34 ns each, the inline mark ~5 ns.
//!   `memory.grow` is preceded by a call that charges
//!   [`FUEL_PER_MEMORY_GROW`](tally_host_api::limits::FUEL_PER_MEMORY_GROW).
//! - **Entry.** Each entry export gets a wrapper, exported as
//!   [`ENTRY_EXPORT_PREFIX`]`{export}`, which the runtime calls instead: it takes the stack
//!   height the call starts at, resets the stack height, the chunk count and every mutable
//!   global to their values in a fresh instance, calls the entry, and returns the chunks
//!   marked since the last charge point (and zeroes the count). So an instance's globals are
//!   pristine whenever an action starts, and a successful action needs no global read or
//!   written through the engine's API (~60 ns an entry, measured on the swap workload).
//! - **Stack.** Every function is charged its accounted frame size (see
//!   [`crate::validate`]) on entry, in a global, and refunded on exit; past
//!   [`MAX_STACK_BYTES`] the action fails with `StackOverflow`. The body is wrapped in one
//!   block, so every exit (the end, `return`, a branch to the function's label) passes the
//!   refund. Traps skip it, and the runtime resets the global after every action.
//!
//! Instance state that cannot be restored cheaply (tables changed by `table.*`, segments
//! dropped by `elem.drop`/`data.drop`) makes a module non-reusable: it then gets a fresh
//! instance per action, and pays for it. `memory.grow` is detected after the action (the
//! memory's size differs) and the instance is dropped.
//!
//! The helper calls are imports of module `__tally`, which uploads cannot name (validation
//! accepts only ABI v1 imports), added after the module's own imports. Every node instruments
//! the same way, so fuel (which counts the added instructions too) stays deterministic.

use std::convert::Infallible;

use tally_host_api::limits::{MAX_INSTRUMENTED_CODE_SIZE, MAX_STACK_BYTES};
use wasm_encoder::reencode::{Error as ReencodeError, Reencode};
use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, ElementSection, Encode, EntityType, ExportKind,
    ExportSection, Function, FunctionSection, GlobalSection, GlobalType, ImportSection,
    Instruction, MemArg, MemorySection, MemoryType, Module, RawSection, SectionId, TableSection,
    TypeSection, ValType,
};
use wasmparser::{
    BinaryReader, CodeSectionReader, FunctionBody, Operator, Parser, Payload, TypeRef,
};

use crate::error::DeployError;
use crate::validate::{EntryPoints, Validated};

/// Exports whose names start with this are Tally's; uploads may not use them.
pub const RESERVED_EXPORT_PREFIX: &str = "__tally";
/// The module of the runtime's private imports.
pub const PRIVATE_MODULE: &str = "__tally";
/// The added export of the dirty-chunk map (one byte per 1 KiB of the contract's memory).
pub const DIRTY_MAP_EXPORT: &str = "__tally_dirty_map";
/// The added export of the stack-height global.
pub const STACK_EXPORT: &str = "__tally_stack";
/// The added export of the global counting chunks marked since the last charge point.
pub const NEW_CHUNKS_EXPORT: &str = "__tally_new_chunks";
/// Prefix of the added exports of the module's own mutable globals, by global index.
pub const GLOBAL_EXPORT_PREFIX: &str = "__tally_global_";
/// Prefix of the added entry wrappers: `ENTRY_EXPORT_PREFIX{export}` enters the module's
/// entry export `export` (its parameters after an i32 stack height; it returns the chunks
/// marked since the last charge point).
pub const ENTRY_EXPORT_PREFIX: &str = "__tally_enter_";

/// The runtime's private imports, in the order they are added: name and parameter count
/// (every parameter is an i32; none has results).
pub const PRIVATE_IMPORTS: [(&str, usize); 4] = [
    // (chunks): a charge point found this many newly marked chunks.
    ("charge_chunks", 1),
    // (dst, len): a bulk memory operation is about to write `len` bytes at `dst`.
    ("mem_write", 2),
    // (pages): `memory.grow` is about to run.
    ("grow", 1),
    // (): the stack accounting passed `MAX_STACK_BYTES`.
    ("stack_exhausted", 0),
];
const CHARGE_CHUNKS: u32 = 0;
const MEM_WRITE: u32 = 1;
const GROW: u32 = 2;
const STACK_EXHAUSTED: u32 = 3;
/// Functions the instrumentation adds to the function index space, before the module's own.
pub(crate) const ADDED_FUNCTIONS: u32 = PRIVATE_IMPORTS.len() as u32;

/// Accounted frame bytes of the scratch locals added to every function (at most six 8-byte
/// values and one 16-byte vector).
pub(crate) const SCRATCH_FRAME_BYTES: u32 = 6 * 8 + 16;

/// log2 of `DIRTY_CHUNK_BYTES`: a write at byte `a` dirties chunk `a >> 10`.
pub(crate) const CHUNK_SHIFT: u32 = 10;
const _: () = assert!(1 << CHUNK_SHIFT == tally_host_api::limits::DIRTY_CHUNK_BYTES);

/// The instrumented module and what the runtime needs to restore an instance of it.
pub(crate) struct Instrumented {
    /// The rewritten module, to compile instead of the uploaded one.
    pub wasm: Vec<u8>,
    /// Indices of the module's mutable globals, each exported as
    /// `GLOBAL_EXPORT_PREFIX{index}`.
    pub mutable_globals: Vec<u32>,
    /// Whether an instance can be restored after an action; `false` if the module changes
    /// tables or drops segments.
    pub reusable: bool,
    /// The module's own stack, if it keeps one the way clang and rustc do: its global 0 is a
    /// mutable i32 starting at a constant, the stack's top. See [`ShadowStack`].
    pub shadow_stack: Option<ShadowStack>,
    /// With `trace`: (offset in `wasm`, offset in the uploaded module) where the code emitted
    /// for each uploaded instruction starts, sorted, for [`crate::trace`].
    pub offsets: Option<Vec<(u32, u32)>>,
}

/// A contract's own stack in linear memory (the "shadow stack" clang and rustc keep for
/// locals whose address is taken): global 0, a mutable i32 that starts at the stack's top and
/// moves down. Built with the stack first in memory (`tally build` passes `--stack-first`;
/// rustc's default), a stack that runs out moves the pointer below address 0, where it wraps
/// to an address past the memory, so the very next access traps. After an out-of-bounds
/// access or a bad pointer, a pointer above its starting value is how the runtime tells a
/// stack overflow from any other wild access (reading global 0 is exact, so every node agrees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShadowStack {
    /// Global 0's starting value: the stack's top, its size when the stack comes first.
    pub top: u32,
}

fn invalid(e: impl std::fmt::Display) -> DeployError {
    DeployError::Invalid(e.to_string())
}

fn reencode_error(e: ReencodeError<Infallible>) -> DeployError {
    invalid(e)
}

/// Re-encodes sections with the module's own functions moved up past the added imports.
struct Shift {
    imported: u32,
}

impl Reencode for Shift {
    type Error = Infallible;

    fn function_index(&mut self, func: u32) -> Result<u32, ReencodeError<Infallible>> {
        Ok(if func >= self.imported {
            func + ADDED_FUNCTIONS
        } else {
            func
        })
    }
}

/// What the first pass learns about the module.
struct Layout {
    type_count: u32,
    /// Type index of every function (imported first).
    func_types: Vec<u32>,
    imported_funcs: u32,
    /// Result count of every type.
    type_results: Vec<Option<wasmparser::ValType>>,
    type_params: Vec<u32>,
    /// Parameter types of every type.
    type_param_types: Vec<Vec<wasmparser::ValType>>,
    global_count: u32,
    mutable_globals: Vec<u32>,
    /// The initialiser of each mutable global, in the order of `mutable_globals`: what the
    /// entry wrappers reset it to (validation allows no start function, so it is the value a
    /// fresh instance holds).
    mutable_inits: Vec<Vec<u8>>,
    /// Exported functions by name.
    func_exports: Vec<(String, u32)>,
    shadow_stack: Option<ShadowStack>,
}

fn layout(wasm: &[u8]) -> Result<Layout, DeployError> {
    let mut l = Layout {
        type_count: 0,
        func_types: Vec::new(),
        imported_funcs: 0,
        type_results: Vec::new(),
        type_params: Vec::new(),
        type_param_types: Vec::new(),
        global_count: 0,
        mutable_globals: Vec::new(),
        mutable_inits: Vec::new(),
        func_exports: Vec::new(),
        shadow_stack: None,
    };
    let mut shift = Shift { imported: 0 };
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(invalid)? {
            Payload::TypeSection(reader) => {
                for ty in reader.into_iter_err_on_gc_types() {
                    let ty = ty.map_err(invalid)?;
                    l.type_params.push(ty.params().len() as u32);
                    l.type_param_types.push(ty.params().to_vec());
                    // Validation allows at most one result.
                    l.type_results.push(ty.results().first().copied());
                    l.type_count += 1;
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if let TypeRef::Func(ty) = import.map_err(invalid)?.ty {
                        l.func_types.push(ty);
                        l.imported_funcs += 1;
                    }
                }
                shift.imported = l.imported_funcs;
            }
            Payload::FunctionSection(reader) => {
                for ty in reader {
                    l.func_types.push(ty.map_err(invalid)?);
                }
            }
            Payload::GlobalSection(reader) => {
                for global in reader {
                    let global = global.map_err(invalid)?;
                    if l.global_count == 0 {
                        l.shadow_stack = shadow_stack(&global)?;
                    }
                    if global.ty.mutable {
                        l.mutable_globals.push(l.global_count);
                        // Function indices in the initialiser (`ref.func`) move up past the
                        // private imports, as everywhere else.
                        l.mutable_inits
                            .push(init_instructions(&mut shift, &global.init_expr)?);
                    }
                    l.global_count += 1;
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(invalid)?;
                    if export.kind == wasmparser::ExternalKind::Func {
                        l.func_exports.push((export.name.to_string(), export.index));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(l)
}

/// The module's own stack, if `global` (global 0) is a mutable i32 that starts at a constant.
fn shadow_stack(global: &wasmparser::Global<'_>) -> Result<Option<ShadowStack>, DeployError> {
    if !global.ty.mutable || global.ty.content_type != wasmparser::ValType::I32 {
        return Ok(None);
    }
    let mut ops = global.init_expr.get_operators_reader();
    Ok(
        match (ops.read().map_err(invalid)?, ops.read().map_err(invalid)?) {
            (Operator::I32Const { value }, Operator::End) => {
                Some(ShadowStack { top: value as u32 })
            }
            _ => None,
        },
    )
}

/// The instructions of a constant expression, without its `end`: what puts its value on the
/// stack inside a function body.
fn init_instructions(
    shift: &mut Shift,
    expr: &wasmparser::ConstExpr<'_>,
) -> Result<Vec<u8>, DeployError> {
    let mut ops = expr.get_operators_reader();
    let mut bytes = Vec::new();
    while !ops.is_end_then_eof() {
        shift
            .parse_instruction(&mut ops)
            .map_err(reencode_error)?
            .encode(&mut bytes);
    }
    Ok(bytes)
}

/// A module rewritten exactly as the runtime runs it, for another engine to run under the
/// same limits (the wasmi baseline of `tally bench`): its host must provide the imports of
/// [`PRIVATE_MODULE`] and restore instances the way the runtime does.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The instrumented module.
    pub wasm: Vec<u8>,
    /// The exports of the module's mutable globals, which restoring an instance resets.
    pub mutable_globals: Vec<String>,
    /// Whether an instance can be restored after an action and reused.
    pub reusable: bool,
}

/// Validates `wasm` as an upload and instruments it as [`crate::Runtime::prepare`] does.
///
/// # Errors
/// The module breaks an upload rule.
pub fn rewrite(wasm: &[u8]) -> Result<Rewritten, DeployError> {
    let validated = crate::validate::check(wasm)?;
    let instrumented = instrument(wasm, &validated, false)?;
    Ok(Rewritten {
        wasm: instrumented.wasm,
        mutable_globals: instrumented
            .mutable_globals
            .iter()
            .map(|i| format!("{GLOBAL_EXPORT_PREFIX}{i}"))
            .collect(),
        reusable: instrumented.reusable,
    })
}

/// Rewrites a module that passed [`crate::validate::check`], which also measured its frames.
/// With `trace`, also maps the rewritten code's offsets back to the uploaded module's.
pub(crate) fn instrument(
    wasm: &[u8],
    validated: &Validated,
    trace: bool,
) -> Result<Instrumented, DeployError> {
    let l = layout(wasm)?;
    let entries = entry_exports(&validated.info)
        .map(|export| {
            let func = (l.func_exports.iter())
                .find(|(name, _)| name == export)
                .map(|&(_, func)| func)
                .ok_or_else(|| invalid(format!("entry point {export} is not exported")))?;
            Ok(Entry {
                export: export.to_string(),
                func,
            })
        })
        .collect::<Result<Vec<_>, DeployError>>()?;
    let mut rewriter = Rewriter {
        shift: Shift { imported: 0 },
        l,
        validated,
        trace,
        out: Module::new(),
        imports_written: false,
        globals_written: false,
        reusable: true,
        body_offsets: Vec::new(),
        entries,
        wrappers_written: false,
    };
    rewriter.shift.imported = rewriter.l.imported_funcs;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(invalid)?;
        rewriter.add_missing_sections(&payload);
        rewriter.section(&payload, wasm)?;
    }
    if !rewriter.entries.is_empty() && !rewriter.wrappers_written {
        // Entry points have signatures no import has, so they are defined functions and the
        // module has a code section.
        return Err(invalid("the module's entry points have no code"));
    }
    let wasm = rewriter.out.finish();
    let offsets = match trace {
        true => Some(module_offsets(&wasm, rewriter.body_offsets)?),
        false => None,
    };
    Ok(Instrumented {
        wasm,
        mutable_globals: rewriter.l.mutable_globals,
        reusable: rewriter.reusable,
        shadow_stack: rewriter.l.shadow_stack,
        offsets,
    })
}

/// The state of one rewrite, section by section.
struct Rewriter<'v> {
    shift: Shift,
    l: Layout,
    validated: &'v Validated,
    trace: bool,
    out: Module,
    imports_written: bool,
    globals_written: bool,
    reusable: bool,
    /// Per defined function, offsets relative to its body (see `rewrite_body`).
    body_offsets: Vec<OffsetMarks>,
    /// The entry exports that get a wrapper, in the order the wrappers are added.
    entries: Vec<Entry>,
    /// Whether the wrappers' functions and code were added.
    wrappers_written: bool,
}

/// An entry export of the module, which gets a wrapper.
struct Entry {
    /// Its export name.
    export: String,
    /// Its function index in the uploaded module.
    func: u32,
}

impl Rewriter<'_> {
    // Added types, after the module's own: (i32) -> (), (i32, i32) -> (), () -> ().
    fn ty_i32(&self) -> u32 {
        self.l.type_count
    }
    fn ty_i32_i32(&self) -> u32 {
        self.l.type_count + 1
    }
    fn ty_unit(&self) -> u32 {
        self.l.type_count + 2
    }
    /// The type of the `i`th entry wrapper, after the added ones above.
    fn ty_wrapper(&self, i: usize) -> u32 {
        self.l.type_count + 3 + i as u32
    }
    /// The function index of the `i`th entry wrapper: after the module's own functions.
    fn wrapper_index(&self, i: usize) -> u32 {
        self.l.func_types.len() as u32 + ADDED_FUNCTIONS + i as u32
    }
    // Added globals, after the module's own.
    fn stack_global(&self) -> u32 {
        self.l.global_count
    }
    fn new_chunks_global(&self) -> u32 {
        self.l.global_count + 1
    }

    fn private_imports(&self, section: &mut ImportSection) {
        for (name, params) in PRIVATE_IMPORTS {
            let ty = match params {
                0 => self.ty_unit(),
                1 => self.ty_i32(),
                _ => self.ty_i32_i32(),
            };
            section.import(PRIVATE_MODULE, name, EntityType::Function(ty));
        }
    }

    fn added_globals(section: &mut GlobalSection) {
        let ty = GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        };
        section.global(ty, &ConstExpr::i32_const(0)); // the stack height
        section.global(ty, &ConstExpr::i32_const(0)); // chunks marked since the last charge
    }

    /// Sections the module lacks but the instrumentation needs go where they belong.
    fn add_missing_sections(&mut self, payload: &Payload<'_>) {
        let Some((id, _)) = payload.as_section() else {
            return;
        };
        if !self.imports_written
            && id > SectionId::Import as u8
            && id != SectionId::Custom as u8
            && id != SectionId::Type as u8
        {
            let mut section = ImportSection::new();
            self.private_imports(&mut section);
            self.out.section(&section);
            self.imports_written = true;
        }
        // Every section from exports (7) on comes after globals (6).
        if !self.globals_written
            && (SectionId::Export as u8..=SectionId::DataCount as u8).contains(&id)
        {
            let mut section = GlobalSection::new();
            Self::added_globals(&mut section);
            self.out.section(&section);
            self.globals_written = true;
        }
    }

    /// Writes `payload`'s section, rewritten.
    fn section(&mut self, payload: &Payload<'_>, wasm: &[u8]) -> Result<(), DeployError> {
        let shift = &mut self.shift;
        match payload {
            Payload::TypeSection(reader) => {
                let mut section = TypeSection::new();
                shift
                    .parse_type_section(&mut section, reader.clone())
                    .map_err(reencode_error)?;
                section.ty().function([ValType::I32], []);
                section.ty().function([ValType::I32, ValType::I32], []);
                section.ty().function([], []);
                for entry in &self.entries {
                    let ty = self.l.func_types[entry.func as usize] as usize;
                    let mut params = vec![ValType::I32];
                    for &param in &self.l.type_param_types[ty] {
                        params.push(shift.val_type(param).map_err(reencode_error)?);
                    }
                    section.ty().function(params, [ValType::I32]);
                }
                self.out.section(&section);
            }
            Payload::FunctionSection(reader) => {
                let mut section = FunctionSection::new();
                shift
                    .parse_function_section(&mut section, reader.clone())
                    .map_err(reencode_error)?;
                for i in 0..self.entries.len() {
                    section.function(self.ty_wrapper(i));
                }
                self.out.section(&section);
            }
            Payload::ImportSection(reader) => {
                let mut section = ImportSection::new();
                shift
                    .parse_import_section(&mut section, reader.clone())
                    .map_err(reencode_error)?;
                self.private_imports(&mut section);
                self.out.section(&section);
                self.imports_written = true;
            }
            Payload::TableSection(reader) => {
                let mut section = TableSection::new();
                shift
                    .parse_table_section(&mut section, reader.clone())
                    .map_err(reencode_error)?;
                self.out.section(&section);
            }
            Payload::MemorySection(reader) => self.memory_section(reader.clone())?,
            Payload::GlobalSection(reader) => {
                let mut section = GlobalSection::new();
                shift
                    .parse_global_section(&mut section, reader.clone())
                    .map_err(reencode_error)?;
                Self::added_globals(&mut section);
                self.out.section(&section);
                self.globals_written = true;
            }
            Payload::ExportSection(reader) => self.export_section(reader.clone())?,
            Payload::ElementSection(reader) => {
                let mut section = ElementSection::new();
                shift
                    .parse_element_section(&mut section, reader.clone())
                    .map_err(reencode_error)?;
                self.out.section(&section);
            }
            Payload::CodeSectionStart { range, .. } => self.code_section(wasm, range.clone())?,
            // Names and other custom sections are not needed to run, so they are dropped.
            Payload::CustomSection(_) | Payload::CodeSectionEntry(_) => {}
            other => {
                if let Some((id, range)) = other.as_section() {
                    self.out.section(&RawSection {
                        id,
                        data: &wasm[range],
                    });
                }
            }
        }
        Ok(())
    }

    fn memory_section(
        &mut self,
        reader: wasmparser::MemorySectionReader<'_>,
    ) -> Result<(), DeployError> {
        let mut section = MemorySection::new();
        self.shift
            .parse_memory_section(&mut section, reader)
            .map_err(reencode_error)?;
        // The dirty-chunk map: one byte per 1 KiB chunk. A store at 64 MiB or more
        // (chunk 65,536 or more, far past any memory a contract can have) traps on
        // its mark, exactly as the store itself would have.
        section.memory(MemoryType {
            minimum: 1,
            maximum: Some(1),
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        self.out.section(&section);
        Ok(())
    }

    fn export_section(
        &mut self,
        reader: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), DeployError> {
        let mut section = ExportSection::new();
        self.shift
            .parse_export_section(&mut section, reader)
            .map_err(reencode_error)?;
        section.export(DIRTY_MAP_EXPORT, ExportKind::Memory, 1);
        section.export(STACK_EXPORT, ExportKind::Global, self.stack_global());
        section.export(
            NEW_CHUNKS_EXPORT,
            ExportKind::Global,
            self.new_chunks_global(),
        );
        for &index in &self.l.mutable_globals {
            section.export(
                &format!("{GLOBAL_EXPORT_PREFIX}{index}"),
                ExportKind::Global,
                index,
            );
        }
        for (i, entry) in self.entries.iter().enumerate() {
            section.export(
                &format!("{ENTRY_EXPORT_PREFIX}{}", entry.export),
                ExportKind::Func,
                self.wrapper_index(i),
            );
        }
        self.out.section(&section);
        Ok(())
    }

    fn code_section(
        &mut self,
        wasm: &[u8],
        range: std::ops::Range<usize>,
    ) -> Result<(), DeployError> {
        let reader = CodeSectionReader::new(BinaryReader::new(&wasm[range.clone()], range.start))
            .map_err(invalid)?;
        let mut section = CodeSection::new();
        for (defined, body) in reader.into_iter().enumerate() {
            let body = body.map_err(invalid)?;
            let ty = self.l.func_types[self.l.imported_funcs as usize + defined] as usize;
            let frame = Frame {
                params: self.l.type_params[ty],
                result: self.l.type_results[ty],
                bytes: *self
                    .validated
                    .frame_bytes
                    .get(defined)
                    .ok_or_else(|| invalid("validation measured another module"))?,
                stack_global: self.stack_global(),
                new_chunks_global: self.new_chunks_global(),
            };
            let (function, ok, marks) = rewrite_body(&body, &frame, &mut self.shift)?;
            self.reusable &= ok;
            if self.trace {
                self.body_offsets.push(marks);
            }
            section.function(&function);
        }
        for entry in &self.entries {
            section.function(&self.entry_wrapper(entry));
        }
        self.wrappers_written = true;
        if section.byte_len() > MAX_INSTRUMENTED_CODE_SIZE {
            return Err(DeployError::TooMany {
                what: "instrumented code bytes",
                count: section.byte_len() as u64,
                limit: MAX_INSTRUMENTED_CODE_SIZE as u64,
            });
        }
        self.out.section(&section);
        Ok(())
    }

    /// The wrapper of `entry`: `(stack height, entry's parameters) -> chunks pending`. It puts
    /// every global a restored instance does not reset back to its value in a fresh instance,
    /// starts the stack at the given height, runs the entry and hands back (and zeroes) the
    /// count of chunks marked since the last charge point, which the runtime charges.
    fn entry_wrapper(&self, entry: &Entry) -> Function {
        let (stack, new_chunks) = (self.stack_global(), self.new_chunks_global());
        let mut f = Function::new([]);
        f.instruction(&Instruction::LocalGet(0));
        f.instruction(&Instruction::GlobalSet(stack));
        f.instruction(&Instruction::I32Const(0));
        f.instruction(&Instruction::GlobalSet(new_chunks));
        for (&global, init) in self.l.mutable_globals.iter().zip(&self.l.mutable_inits) {
            f.raw(init.iter().copied());
            f.instruction(&Instruction::GlobalSet(global));
        }
        let ty = self.l.func_types[entry.func as usize] as usize;
        for param in 0..self.l.type_params[ty] {
            f.instruction(&Instruction::LocalGet(param + 1));
        }
        // Entry points are defined functions, moved up past the private imports.
        let func = match entry.func >= self.l.imported_funcs {
            true => entry.func + ADDED_FUNCTIONS,
            false => entry.func,
        };
        f.instruction(&Instruction::Call(func));
        f.instruction(&Instruction::GlobalGet(new_chunks));
        f.instruction(&Instruction::I32Const(0));
        f.instruction(&Instruction::GlobalSet(new_chunks));
        f.instruction(&Instruction::End);
        f
    }
}

/// The names of the entry exports of a validated module: each gets a wrapper.
fn entry_exports(info: &crate::validate::ModuleInfo) -> impl Iterator<Item = &str> {
    use tally_host_api::abi::{INIT_EXPORT, MIGRATE_EXPORT, QUERY_EXPORT};
    let actions: Vec<&str> = match &info.entry {
        EntryPoints::Apply(export) => vec![export.as_str()],
        EntryPoints::Legacy(handlers) => handlers.iter().map(|h| h.export.as_str()).collect(),
    };
    actions
        .into_iter()
        .chain(info.has_init.then_some(INIT_EXPORT))
        .chain(info.has_query.then_some(QUERY_EXPORT))
        .chain(info.has_migrate.then_some(MIGRATE_EXPORT))
}

/// Turns offsets relative to each rewritten function body into offsets in the rewritten
/// module `wasm`, whose bodies are found by parsing it.
fn module_offsets(
    wasm: &[u8],
    body_offsets: Vec<OffsetMarks>,
) -> Result<Vec<(u32, u32)>, DeployError> {
    let mut starts = Vec::with_capacity(body_offsets.len());
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload.map_err(invalid)? {
            starts.push(body.range().start as u32);
        }
    }
    // The entry wrappers come after the module's own functions and map to no instruction.
    if starts.len() < body_offsets.len() {
        return Err(invalid("the rewritten module lost a function body"));
    }
    let mut offsets = Vec::with_capacity(body_offsets.iter().map(Vec::len).sum());
    for (start, marks) in starts.into_iter().zip(body_offsets) {
        offsets.extend(
            marks
                .into_iter()
                .map(|(at, original)| (start + at, original)),
        );
    }
    Ok(offsets)
}

/// What the prologue and epilogue of one function need.
struct Frame {
    params: u32,
    result: Option<wasmparser::ValType>,
    /// Accounted bytes charged on entry and refunded on exit.
    bytes: u32,
    stack_global: u32,
    new_chunks_global: u32,
}

/// The scratch locals added to every function, numbered from its first free local.
struct Scratch {
    /// Address (or destination) operand.
    addr: u32,
    /// Second i32 operand (an i32 value, a fill byte or a copy source).
    b: u32,
    /// A length operand.
    len: u32,
    i64: u32,
    f32: u32,
    f64: u32,
    /// Only present when the function stores a v128.
    v128: u32,
}

/// The value local and static offset of a store, if `op` is one.
fn store_shape(op: &Operator<'_>, s: &Scratch) -> Option<(u32, u64)> {
    use Operator::*;
    let (local, memarg) = match op {
        I32Store { memarg } | I32Store8 { memarg } | I32Store16 { memarg } => (s.b, memarg),
        I64Store { memarg }
        | I64Store8 { memarg }
        | I64Store16 { memarg }
        | I64Store32 { memarg } => (s.i64, memarg),
        F32Store { memarg } => (s.f32, memarg),
        F64Store { memarg } => (s.f64, memarg),
        V128Store { memarg }
        | V128Store8Lane { memarg, .. }
        | V128Store16Lane { memarg, .. }
        | V128Store32Lane { memarg, .. }
        | V128Store64Lane { memarg, .. } => (s.v128, memarg),
        _ => return None,
    };
    Some((local, memarg.offset))
}

fn is_v128_store(op: &Operator<'_>) -> bool {
    use Operator::*;
    matches!(
        op,
        V128Store { .. }
            | V128Store8Lane { .. }
            | V128Store16Lane { .. }
            | V128Store32Lane { .. }
            | V128Store64Lane { .. }
    )
}

/// Whether `op` changes instance state other than memory and globals.
fn breaks_reuse(op: &Operator<'_>) -> bool {
    use Operator::*;
    matches!(
        op,
        TableSet { .. }
            | TableGrow { .. }
            | TableFill { .. }
            | TableCopy { .. }
            | TableInit { .. }
            | ElemDrop { .. }
            | DataDrop { .. }
    )
}

/// The dirty-chunk map, memory 1.
const MAP: MemArg = MemArg {
    offset: 0,
    align: 0,
    memory_index: 1,
};

/// With the address in `s.addr` and the store's static offset, marks the chunk the store
/// writes and counts it if it was not marked yet:
/// `new += (map[c] == 0); map[c] = 1` where `c = (addr + offset) >> 10`.
fn mark_chunk(f: &mut Function, s: &Scratch, static_offset: u64, new_chunks: u32) {
    f.instruction(&Instruction::LocalGet(s.addr));
    if static_offset == 0 {
        f.instruction(&Instruction::I32Const(CHUNK_SHIFT as i32));
        f.instruction(&Instruction::I32ShrU);
    } else {
        // The effective address has 33 bits; its chunk fits an i32.
        f.instruction(&Instruction::I64ExtendI32U);
        f.instruction(&Instruction::I64Const(static_offset as i64));
        f.instruction(&Instruction::I64Add);
        f.instruction(&Instruction::I64Const(CHUNK_SHIFT.into()));
        f.instruction(&Instruction::I64ShrU);
        f.instruction(&Instruction::I32WrapI64);
    }
    f.instruction(&Instruction::LocalTee(s.len));
    f.instruction(&Instruction::LocalGet(s.len));
    f.instruction(&Instruction::I32Load8U(MAP));
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::GlobalGet(new_chunks));
    f.instruction(&Instruction::I32Add);
    f.instruction(&Instruction::GlobalSet(new_chunks));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32Store8(MAP));
}

/// With a bulk write's destination in `s.addr` and its length in `s.len` (both kept): when
/// the bytes `[dst, dst + len)` are non-empty, inside the memory and within one chunk, marks
/// and counts that chunk as a store would (it is paid at the next charge point); otherwise
/// calls `mem_write`, which marks every chunk the write touches inside the memory and pays
/// for the new ones before a byte is written. Either way the same chunks are marked.
fn bulk_mark(
    f: &mut Function,
    s: &Scratch,
    new_chunks: u32,
    call: &impl Fn(u32) -> Instruction<'static>,
) {
    // end = dst + len, in 64 bits (it can pass 4 GiB).
    f.instruction(&Instruction::LocalGet(s.addr));
    f.instruction(&Instruction::I64ExtendI32U);
    f.instruction(&Instruction::LocalGet(s.len));
    f.instruction(&Instruction::I64ExtendI32U);
    f.instruction(&Instruction::I64Add);
    f.instruction(&Instruction::LocalTee(s.i64));
    // end <= the memory's size in bytes
    f.instruction(&Instruction::MemorySize(0));
    f.instruction(&Instruction::I64ExtendI32U);
    f.instruction(&Instruction::I64Const(16));
    f.instruction(&Instruction::I64Shl);
    f.instruction(&Instruction::I64LeU);
    // (end - 1) >> 10 == dst >> 10: false for an empty write, whose end - 1 is before dst
    f.instruction(&Instruction::LocalGet(s.i64));
    f.instruction(&Instruction::I64Const(1));
    f.instruction(&Instruction::I64Sub);
    f.instruction(&Instruction::I64Const(CHUNK_SHIFT.into()));
    f.instruction(&Instruction::I64ShrU);
    f.instruction(&Instruction::LocalGet(s.addr));
    f.instruction(&Instruction::I64ExtendI32U);
    f.instruction(&Instruction::I64Const(CHUNK_SHIFT.into()));
    f.instruction(&Instruction::I64ShrU);
    f.instruction(&Instruction::I64Eq);
    f.instruction(&Instruction::I32And);
    f.instruction(&Instruction::If(BlockType::Empty));
    // map[c] = 1 with new += (map[c] == 0), where c = dst >> 10 (inside the memory, so the
    // map has it).
    for _ in 0..2 {
        f.instruction(&Instruction::LocalGet(s.addr));
        f.instruction(&Instruction::I32Const(CHUNK_SHIFT as i32));
        f.instruction(&Instruction::I32ShrU);
    }
    f.instruction(&Instruction::I32Load8U(MAP));
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::GlobalGet(new_chunks));
    f.instruction(&Instruction::I32Add);
    f.instruction(&Instruction::GlobalSet(new_chunks));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32Store8(MAP));
    f.instruction(&Instruction::Else);
    f.instruction(&Instruction::LocalGet(s.addr));
    f.instruction(&Instruction::LocalGet(s.len));
    f.instruction(&call(MEM_WRITE));
    f.instruction(&Instruction::End);
}

/// A charge point: pays for the chunks marked since the last one, if any.
fn charge_point(f: &mut Function, new_chunks: u32, charge: &Instruction<'_>) {
    f.instruction(&Instruction::GlobalGet(new_chunks));
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::GlobalGet(new_chunks));
    f.instruction(charge);
    f.instruction(&Instruction::I32Const(0));
    f.instruction(&Instruction::GlobalSet(new_chunks));
    f.instruction(&Instruction::End);
}

/// The function index of private import `which` in a module with `imported` imports of its
/// own (the private imports come right after them).
fn private(imported: u32, which: u32) -> u32 {
    imported + which
}

/// (offset in a rewritten body, offset in the uploaded module), one per uploaded instruction.
type OffsetMarks = Vec<(u32, u32)>;

/// Rewrites one function body. Also returns, for each uploaded instruction, where the code
/// emitted for it starts in the new body (its added checks first) and the instruction's
/// offset in the uploaded module.
fn rewrite_body(
    body: &FunctionBody<'_>,
    frame: &Frame,
    shift: &mut Shift,
) -> Result<(Function, bool, OffsetMarks), DeployError> {
    let (locals, ops, s) = body_parts(body, frame, shift)?;
    let imported = shift.imported;
    let call = move |which: u32| Instruction::Call(private(imported, which));

    let mut f = Function::new(locals);
    let mut marks = Vec::with_capacity(ops.len() + 1);
    // The prologue (a stack overflow stops there) belongs to the function's first instruction.
    if let Some((_, first)) = ops.first() {
        marks.push((f.byte_len() as u32, *first as u32));
    }
    prologue(&mut f, frame, &call);
    // The body, in a block that every exit leaves through.
    let result = match frame.result {
        None => BlockType::Empty,
        Some(ty) => BlockType::Result(shift.val_type(ty).map_err(reencode_error)?),
    };
    f.instruction(&Instruction::Block(result));

    let sh = frame.stack_global;
    let mut reusable = true;
    // Blocks open inside the wrapping block.
    let mut depth = 0u32;
    for (op, offset) in ops {
        marks.push((f.byte_len() as u32, offset as u32));
        reusable &= !breaks_reuse(&op);
        match &op {
            Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => depth += 1,
            Operator::End if depth > 0 => depth -= 1,
            Operator::End => {
                // The function's end: close the wrapping block, refund the frame.
                f.instruction(&Instruction::End);
                f.instruction(&Instruction::GlobalGet(sh));
                f.instruction(&Instruction::I32Const(frame.bytes as i32));
                f.instruction(&Instruction::I32Sub);
                f.instruction(&Instruction::GlobalSet(sh));
                f.instruction(&Instruction::End);
                continue;
            }
            Operator::Return => {
                // Leave through the wrapping block's end, like a branch to the function's
                // label (which now names the wrapping block).
                f.instruction(&Instruction::Br(depth));
                continue;
            }
            _ => {}
        }
        before_write(&mut f, &op, &s, frame, &call);
        let is_loop = matches!(op, Operator::Loop { .. });
        f.instruction(&shift.instruction(op).map_err(reencode_error)?);
        if is_loop {
            charge_point(&mut f, frame.new_chunks_global, &call(CHARGE_CHUNKS));
        }
    }
    Ok((f, reusable, marks))
}

/// A body's locals with the instrumentation's scratch locals after them, its operators with
/// their offsets, and where the scratch locals are.
#[allow(clippy::type_complexity)]
fn body_parts<'a>(
    body: &FunctionBody<'a>,
    frame: &Frame,
    shift: &mut Shift,
) -> Result<(Vec<(u32, ValType)>, Vec<(Operator<'a>, usize)>, Scratch), DeployError> {
    let mut locals = Vec::new();
    let mut declared = 0u32;
    for pair in body.get_locals_reader().map_err(invalid)? {
        let (count, ty) = pair.map_err(invalid)?;
        declared += count;
        locals.push((count, shift.val_type(ty).map_err(reencode_error)?));
    }
    let mut ops = Vec::new();
    let mut reader = body.get_operators_reader().map_err(invalid)?;
    while !reader.eof() {
        ops.push(reader.read_with_offset().map_err(invalid)?);
    }
    let needs_v128 = ops.iter().any(|(op, _)| is_v128_store(op));
    let base = frame.params + declared;
    let s = Scratch {
        addr: base,
        b: base + 1,
        len: base + 2,
        i64: base + 3,
        f32: base + 4,
        f64: base + 5,
        v128: base + 6,
    };
    locals.extend([
        (3, ValType::I32),
        (1, ValType::I64),
        (1, ValType::F32),
        (1, ValType::F64),
    ]);
    if needs_v128 {
        locals.push((1, ValType::V128));
    }
    Ok((locals, ops, s))
}

/// The prologue: charge the frame, fail past the limit, then a charge point.
fn prologue(f: &mut Function, frame: &Frame, call: &impl Fn(u32) -> Instruction<'static>) {
    let sh = frame.stack_global;
    f.instruction(&Instruction::GlobalGet(sh));
    f.instruction(&Instruction::I32Const(frame.bytes as i32));
    f.instruction(&Instruction::I32Add);
    f.instruction(&Instruction::GlobalSet(sh));
    f.instruction(&Instruction::GlobalGet(sh));
    f.instruction(&Instruction::I32Const(MAX_STACK_BYTES as i32));
    f.instruction(&Instruction::I32GtU);
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&call(STACK_EXHAUSTED));
    f.instruction(&Instruction::Unreachable);
    f.instruction(&Instruction::End);
    charge_point(f, frame.new_chunks_global, &call(CHARGE_CHUNKS));
}

/// What runs before `op` when it writes memory: a store marks its chunk, a bulk operation
/// marks (and pays for) its chunks, `memory.grow` pays its price.
fn before_write(
    f: &mut Function,
    op: &Operator<'_>,
    s: &Scratch,
    frame: &Frame,
    call: &impl Fn(u32) -> Instruction<'static>,
) {
    if let Some((value, static_offset)) = store_shape(op, s) {
        // [addr, value] -> mark the chunk -> [addr, value] -> store
        f.instruction(&Instruction::LocalSet(value));
        f.instruction(&Instruction::LocalSet(s.addr));
        mark_chunk(f, s, static_offset, frame.new_chunks_global);
        f.instruction(&Instruction::LocalGet(s.addr));
        f.instruction(&Instruction::LocalGet(value));
        return;
    }
    match op {
        Operator::MemoryFill { .. } | Operator::MemoryCopy { .. } | Operator::MemoryInit { .. } => {
            // [dst, b, len] -> mark one chunk inline, or mem_write(dst, len) -> [dst, b, len]
            f.instruction(&Instruction::LocalSet(s.len));
            f.instruction(&Instruction::LocalSet(s.b));
            f.instruction(&Instruction::LocalSet(s.addr));
            bulk_mark(f, s, frame.new_chunks_global, call);
            f.instruction(&Instruction::LocalGet(s.addr));
            f.instruction(&Instruction::LocalGet(s.b));
            f.instruction(&Instruction::LocalGet(s.len));
        }
        Operator::MemoryGrow { .. } => {
            // [n] -> grow(n) -> [n]
            f.instruction(&Instruction::LocalTee(s.len));
            f.instruction(&Instruction::LocalGet(s.len));
            f.instruction(&call(GROW));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::upload_features;

    fn instrumented(wat: &str) -> Instrumented {
        let wasm = wat::parse_str(wat).unwrap();
        let validated = crate::validate::check(&wasm).unwrap();
        instrument(&wasm, &validated, false).unwrap()
    }

    fn exports(wasm: &[u8]) -> Vec<String> {
        Parser::new(0)
            .parse_all(wasm)
            .filter_map(|p| match p.unwrap() {
                Payload::ExportSection(r) => Some(
                    r.into_iter()
                        .map(|e| e.unwrap().name.to_string())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect()
    }

    #[test]
    fn instrumented_module_is_valid_and_exports_what_restoring_needs() {
        let out = instrumented(
            r#"(module
                (import "env" "print" (func $print (param i32 i32)))
                (memory (export "memory") 1)
                (global $g (mut i32) (i32.const 7))
                (global i32 (i32.const 1))
                (table 2 funcref)
                (elem (i32.const 0) $helper)
                (func $helper (param i32) (result i32)
                  (if (local.get 0) (then (return (i32.const 1))))
                  (i32.const 2))
                (func (export "apply") (param i64 i64 i64) (local i64)
                    (i32.store offset=4 (i32.const 8) (call $helper (i32.const 1)))
                    (i64.store8 (i32.const 100) (local.get 0))
                    (f64.store (i32.const 16) (f64.const 1))
                    (v128.store (i32.const 32) (v128.const i64x2 1 2))
                    (memory.fill (i32.const 200) (i32.const 0) (i32.const 10))
                    (drop (memory.grow (i32.const 1)))
                    (call $print (i32.const 0) (i32.const 1))
                    (global.set $g (i32.const 3))))"#,
        );
        assert!(out.reusable);
        assert_eq!(out.mutable_globals, vec![0]);
        wasmparser::Validator::new_with_features(
            upload_features() | wasmparser::WasmFeatures::MULTI_MEMORY,
        )
        .validate_all(&out.wasm)
        .unwrap();
        let names = exports(&out.wasm);
        for name in [
            DIRTY_MAP_EXPORT,
            STACK_EXPORT,
            "__tally_global_0",
            "apply",
            "memory",
        ] {
            assert!(names.iter().any(|e| e == name), "{name} in {names:?}");
        }
    }

    #[test]
    fn a_module_without_imports_or_globals_gets_both_sections() {
        let out = instrumented(
            r#"(module (memory (export "memory") 1)
                 (func (export "apply") (param i64 i64 i64)))"#,
        );
        wasmparser::Validator::new_with_features(
            upload_features() | wasmparser::WasmFeatures::MULTI_MEMORY,
        )
        .validate_all(&out.wasm)
        .unwrap();
    }

    #[test]
    fn table_mutation_makes_a_module_non_reusable() {
        let out = instrumented(
            r#"(module
                (memory (export "memory") 1)
                (table 2 funcref)
                (func $f)
                (func (export "apply") (param i64 i64 i64)
                    (table.set (i32.const 0) (ref.func $f)))
                (elem declare func $f))"#,
        );
        assert!(!out.reusable);
    }
}
