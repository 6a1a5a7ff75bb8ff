//! Where a failed action stopped: the wasm frames of a trap, named and placed in the module the
//! author uploaded, for runtimes built with [`RuntimeConfig::trace`](crate::RuntimeConfig).
//!
//! A trace is a diagnostic for authors and never part of consensus data: it is read from
//! wasmtime's backtrace only after the outcome has been decided, it changes neither the outcome
//! nor the fuel, and the chain keeps it out of everything it hashes or stores. Runtimes built
//! without `trace` capture no backtrace at all, so a failing action costs what it always did.

use std::collections::BTreeMap;
use std::fmt;

use wasmparser::{KnownCustom, Name, Parser, Payload, TypeRef};

use crate::instrument::ADDED_FUNCTIONS;

/// Most wasm frames a trace keeps, innermost first. Deep recursion that overflows the stack
/// would otherwise give thousands of identical frames; the innermost ones say where it was.
pub const MAX_TRACE_FRAMES: usize = 32;

/// The wasm call stack of a failed action, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TrapTrace {
    /// The frames, innermost (where the action stopped) first; at most [`MAX_TRACE_FRAMES`].
    pub frames: Vec<TraceFrame>,
}

impl TrapTrace {
    /// The frame where the action stopped.
    pub fn innermost(&self) -> Option<&TraceFrame> {
        self.frames.first()
    }
}

/// One wasm frame of a [`TrapTrace`], in terms of the module the author uploaded (not the
/// instrumented module the runtime compiles).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceFrame {
    /// The function's index in the uploaded module's function index space (imports first).
    pub func_index: u32,
    /// Its name: from the module's `name` section, else the name it is exported under.
    pub func_name: Option<String>,
    /// Byte offset, from the start of the uploaded module, of the instruction the frame was
    /// at: the one that trapped, or the call of a host function that aborted (`assert`,
    /// `require_auth`, …). In outer frames, the call instruction.
    pub offset: Option<u32>,
}

impl fmt::Display for TraceFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.func_name {
            Some(name) => write!(f, "{name} (function {})", self.func_index)?,
            None => write!(f, "function {}", self.func_index)?,
        }
        if let Some(offset) = self.offset {
            write!(f, " at offset {offset:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for TrapTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, frame) in self.frames.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {i}: {frame}")?;
        }
        Ok(())
    }
}

/// What a traced contract keeps to turn wasmtime's frames into [`TraceFrame`]s.
pub(crate) struct DebugInfo {
    /// Functions the uploaded module imports: its defined functions follow them.
    imported_funcs: u32,
    /// Functions the uploaded module defines; the instrumentation's entry wrappers follow
    /// them, and are no frame of the author's.
    defined_funcs: u32,
    /// Names by function index of the uploaded module.
    names: BTreeMap<u32, String>,
    /// (offset in the instrumented module, offset in the uploaded one), sorted by the first:
    /// where the code emitted for each uploaded instruction (its added checks included)
    /// starts.
    offsets: Vec<(u32, u32)>,
}

impl DebugInfo {
    /// Reads the names of `wasm` (the uploaded module, already validated) and keeps
    /// `offsets`, the instrumentation's map.
    pub(crate) fn new(wasm: &[u8], offsets: Vec<(u32, u32)>) -> Self {
        let mut imported_funcs = 0;
        let mut defined_funcs = 0;
        let mut names = BTreeMap::new();
        let mut exported = BTreeMap::new();
        // Malformed custom sections are ignored: they do not stop a valid module from running,
        // so they must not stop it from being traced.
        for payload in Parser::new(0).parse_all(wasm).flatten() {
            match payload {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports().flatten() {
                        imported_funcs += u32::from(matches!(import.ty, TypeRef::Func(_)));
                    }
                }
                Payload::FunctionSection(reader) => defined_funcs = reader.count(),
                Payload::ExportSection(reader) => {
                    for export in reader.into_iter().flatten() {
                        if export.kind == wasmparser::ExternalKind::Func {
                            exported
                                .entry(export.index)
                                .or_insert_with(|| export.name.to_string());
                        }
                    }
                }
                Payload::CustomSection(section) => {
                    if let KnownCustom::Name(reader) = section.as_known() {
                        for name in reader.into_iter().flatten() {
                            if let Name::Function(map) = name {
                                for naming in map.into_iter().flatten() {
                                    names.insert(naming.index, naming.name.to_string());
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (index, name) in exported {
            names.entry(index).or_insert(name);
        }
        Self {
            imported_funcs,
            defined_funcs,
            names,
            offsets,
        }
    }

    /// Bytes it holds, for the contract cache's bound.
    pub(crate) fn bytes(&self) -> usize {
        self.offsets.len() * 8 + self.names.values().map(|n| n.len() + 48).sum::<usize>()
    }

    /// The frames of `backtrace`, in terms of the uploaded module.
    pub(crate) fn trace(&self, backtrace: &wasmtime::WasmBacktrace) -> TrapTrace {
        let wrappers = self.imported_funcs + ADDED_FUNCTIONS + self.defined_funcs;
        let frames = backtrace
            .frames()
            .iter()
            .filter(|frame| frame.func_index() < wrappers)
            .take(MAX_TRACE_FRAMES)
            .map(|frame| {
                let index = frame.func_index();
                // Instrumentation puts its private imports right after the module's own, so
                // every defined function moved up by their number.
                let func_index = if index >= self.imported_funcs + ADDED_FUNCTIONS {
                    index - ADDED_FUNCTIONS
                } else {
                    index
                };
                TraceFrame {
                    func_index,
                    func_name: self.names.get(&func_index).cloned(),
                    offset: frame
                        .module_offset()
                        .and_then(|o| self.original_offset(o as u32)),
                }
            })
            .collect();
        TrapTrace { frames }
    }

    /// The uploaded module's offset of the instruction whose instrumented code holds
    /// `instrumented`.
    fn original_offset(&self, instrumented: u32) -> Option<u32> {
        let i = self.offsets.partition_point(|&(at, _)| at <= instrumented);
        i.checked_sub(1).map(|i| self.offsets[i].1)
    }
}
