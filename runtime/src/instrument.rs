//! Deploy-time rewriting that lets one instance serve many actions with pristine state.
//!
//! A fresh instance per action isolates actions but costs ~8 µs, most of it resetting a 64 KiB
//! memory. Instead, every instruction that writes linear memory is preceded by a few
//! instructions that widen a dirty range `[low, high)` kept in two added globals. After an
//! action the runtime copies only that range back from a snapshot of the memory taken right
//! after instantiation, resets every mutable global, and the instance is pristine again.
//! Writes the host makes into guest memory (`read_message`, `load`) are tracked on the host
//! side ([`tally_host_api::linker::WasmHost::wrote`]).
//!
//! Instance state that this cannot restore cheaply (tables changed by `table.*`, segments
//! dropped by `elem.drop`/`data.drop`) makes a module non-reusable: it then gets a fresh
//! instance per action, as before. `memory.grow` is detected after the action (the memory's
//! size differs) and the instance is dropped.
//!
//! Every node instruments the same way, so fuel (which counts the added instructions too)
//! stays deterministic.

use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{
    CodeSection, ConstExpr, ExportKind, ExportSection, Function, GlobalSection, GlobalType,
    Instruction, Module, RawSection, ValType,
};
use wasmparser::{
    BinaryReader, CodeSectionReader, FunctionBody, Operator, Parser, Payload, TypeRef,
};

use crate::error::DeployError;

/// Exports whose names start with this are Tally's; uploads may not use them.
pub const RESERVED_EXPORT_PREFIX: &str = "__tally";
/// The added global holding the lowest byte offset written in this action (`u64::MAX` when
/// nothing was written).
pub(crate) const DIRTY_LOW_EXPORT: &str = "__tally_dirty_low";
/// The added global holding one past the highest byte offset written in this action.
pub(crate) const DIRTY_HIGH_EXPORT: &str = "__tally_dirty_high";
/// Prefix of the added exports of the module's own mutable globals, by global index.
pub(crate) const GLOBAL_EXPORT_PREFIX: &str = "__tally_global_";

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
}

fn invalid(e: impl std::fmt::Display) -> DeployError {
    DeployError::Invalid(e.to_string())
}

/// Rewrites a module that already passed [`crate::validate::validate`].
pub(crate) fn instrument(wasm: &[u8]) -> Result<Instrumented, DeployError> {
    // First pass: parameter counts (to number the scratch locals) and the globals.
    let mut type_params: Vec<u32> = Vec::new();
    let mut func_params: Vec<u32> = Vec::new();
    let mut global_count = 0u32;
    let mut mutable_globals = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(invalid)? {
            Payload::TypeSection(reader) => {
                for ty in reader.into_iter_err_on_gc_types() {
                    type_params.push(ty.map_err(invalid)?.params().len() as u32);
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if let TypeRef::Func(ty) = import.map_err(invalid)?.ty {
                        func_params.push(type_params[ty as usize]);
                    }
                }
            }
            Payload::FunctionSection(reader) => {
                for ty in reader {
                    func_params.push(type_params[ty.map_err(invalid)? as usize]);
                }
            }
            Payload::GlobalSection(reader) => {
                for global in reader {
                    if global.map_err(invalid)?.ty.mutable {
                        mutable_globals.push(global_count);
                    }
                    global_count += 1;
                }
            }
            _ => {}
        }
    }
    let imported_funcs = func_params.len() - defined_funcs(wasm)?;
    let low = global_count;
    let high = global_count + 1;

    let mut out = Module::new();
    let mut reusable = true;
    let mut globals_written = false;
    let mut defined = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(invalid)?;
        match &payload {
            Payload::GlobalSection(reader) => {
                let mut section = GlobalSection::new();
                RoundtripReencoder
                    .parse_global_section(&mut section, reader.clone())
                    .map_err(invalid)?;
                add_dirty_globals(&mut section);
                out.section(&section);
                globals_written = true;
            }
            Payload::ExportSection(reader) => {
                if !globals_written {
                    let mut section = GlobalSection::new();
                    add_dirty_globals(&mut section);
                    out.section(&section);
                }
                let mut section = ExportSection::new();
                RoundtripReencoder
                    .parse_export_section(&mut section, reader.clone())
                    .map_err(invalid)?;
                section.export(DIRTY_LOW_EXPORT, ExportKind::Global, low);
                section.export(DIRTY_HIGH_EXPORT, ExportKind::Global, high);
                for &index in &mutable_globals {
                    section.export(
                        &format!("{GLOBAL_EXPORT_PREFIX}{index}"),
                        ExportKind::Global,
                        index,
                    );
                }
                out.section(&section);
            }
            Payload::CodeSectionStart { range, .. } => {
                let reader =
                    CodeSectionReader::new(BinaryReader::new(&wasm[range.clone()], range.start))
                        .map_err(invalid)?;
                let mut section = CodeSection::new();
                for body in reader {
                    let params = func_params[imported_funcs + defined];
                    defined += 1;
                    let (function, ok) = rewrite_body(&body.map_err(invalid)?, params, low, high)?;
                    reusable &= ok;
                    section.function(&function);
                }
                out.section(&section);
            }
            // Names and other custom sections are not needed to run, so they are dropped.
            Payload::CustomSection(_) | Payload::CodeSectionEntry(_) => {}
            other => {
                if let Some((id, range)) = other.as_section() {
                    out.section(&RawSection {
                        id,
                        data: &wasm[range],
                    });
                }
            }
        }
    }
    Ok(Instrumented {
        wasm: out.finish(),
        mutable_globals,
        reusable,
    })
}

fn defined_funcs(wasm: &[u8]) -> Result<usize, DeployError> {
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::FunctionSection(reader) = payload.map_err(invalid)? {
            return Ok(reader.count() as usize);
        }
    }
    Ok(0)
}

fn add_dirty_globals(section: &mut GlobalSection) {
    let ty = GlobalType {
        val_type: ValType::I64,
        mutable: true,
        shared: false,
    };
    section.global(ty, &ConstExpr::i64_const(-1)); // low = u64::MAX: nothing written
    section.global(ty, &ConstExpr::i64_const(0)); // high
}

/// The scratch locals added to every function, numbered from its first free local.
struct Scratch {
    /// Address (or destination) operand.
    addr: u32,
    /// Second i32 operand (an i32 value, a fill byte or a copy source).
    b: u32,
    /// Third i32 operand (a length).
    len: u32,
    /// The i64 offset being compared with the dirty bounds.
    offset: u32,
    i64: u32,
    f32: u32,
    f64: u32,
    /// Only present when the function stores a v128.
    v128: u32,
    low: u32,
    high: u32,
}

/// The value local and byte width of a store, if `op` is one.
fn store_shape(op: &Operator<'_>, s: &Scratch) -> Option<(u32, u64, u64)> {
    use Operator::*;
    let (local, width, memarg) = match op {
        I32Store { memarg } => (s.b, 4, memarg),
        I32Store8 { memarg } => (s.b, 1, memarg),
        I32Store16 { memarg } => (s.b, 2, memarg),
        I64Store { memarg } => (s.i64, 8, memarg),
        I64Store8 { memarg } => (s.i64, 1, memarg),
        I64Store16 { memarg } => (s.i64, 2, memarg),
        I64Store32 { memarg } => (s.i64, 4, memarg),
        F32Store { memarg } => (s.f32, 4, memarg),
        F64Store { memarg } => (s.f64, 8, memarg),
        V128Store { memarg } => (s.v128, 16, memarg),
        V128Store8Lane { memarg, .. } => (s.v128, 1, memarg),
        V128Store16Lane { memarg, .. } => (s.v128, 2, memarg),
        V128Store32Lane { memarg, .. } => (s.v128, 4, memarg),
        V128Store64Lane { memarg, .. } => (s.v128, 8, memarg),
        _ => return None,
    };
    Some((local, width, memarg.offset))
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

/// Emits `low = min(low, offset)` (first) or `high = max(high, offset)` with `select`, so
/// marking adds no branches.
fn widen(f: &mut Function, offset: u32, global: u32, is_low: bool) {
    f.instruction(&Instruction::LocalGet(offset));
    f.instruction(&Instruction::GlobalGet(global));
    f.instruction(&Instruction::LocalGet(offset));
    f.instruction(&Instruction::GlobalGet(global));
    f.instruction(if is_low {
        &Instruction::I64LtU
    } else {
        &Instruction::I64GtU
    });
    f.instruction(&Instruction::Select);
    f.instruction(&Instruction::GlobalSet(global));
}

/// Marks `[start, start + len)` dirty, where `start` is on the stack as an i64 and `len` is
/// pushed by `push_len`.
fn mark(f: &mut Function, s: &Scratch, push_len: impl FnOnce(&mut Function)) {
    f.instruction(&Instruction::LocalSet(s.offset));
    widen(f, s.offset, s.low, true);
    f.instruction(&Instruction::LocalGet(s.offset));
    push_len(f);
    f.instruction(&Instruction::I64Add);
    f.instruction(&Instruction::LocalSet(s.offset));
    widen(f, s.offset, s.high, false);
}

fn rewrite_body(
    body: &FunctionBody<'_>,
    params: u32,
    low: u32,
    high: u32,
) -> Result<(Function, bool), DeployError> {
    let mut locals = Vec::new();
    let mut declared = 0u32;
    for pair in body.get_locals_reader().map_err(invalid)? {
        let (count, ty) = pair.map_err(invalid)?;
        declared += count;
        locals.push((count, RoundtripReencoder.val_type(ty).map_err(invalid)?));
    }
    let mut ops = Vec::new();
    let mut reader = body.get_operators_reader().map_err(invalid)?;
    while !reader.eof() {
        ops.push(reader.read().map_err(invalid)?);
    }
    let needs_v128 = ops.iter().any(is_v128_store);
    let base = params + declared;
    let s = Scratch {
        addr: base,
        b: base + 1,
        len: base + 2,
        offset: base + 3,
        i64: base + 4,
        f32: base + 5,
        f64: base + 6,
        v128: base + 7,
        low,
        high,
    };
    locals.extend([
        (3, ValType::I32),
        (2, ValType::I64),
        (1, ValType::F32),
        (1, ValType::F64),
    ]);
    if needs_v128 {
        locals.push((1, ValType::V128));
    }

    let mut f = Function::new(locals);
    let mut reusable = true;
    for op in ops {
        reusable &= !breaks_reuse(&op);
        if let Some((value, width, static_offset)) = store_shape(&op, &s) {
            // [addr, value] -> mark [addr + offset, +width) -> [addr, value] -> store
            f.instruction(&Instruction::LocalSet(value));
            f.instruction(&Instruction::LocalTee(s.addr));
            f.instruction(&Instruction::I64ExtendI32U);
            f.instruction(&Instruction::I64Const(static_offset as i64));
            f.instruction(&Instruction::I64Add);
            mark(&mut f, &s, |f| {
                f.instruction(&Instruction::I64Const(width as i64));
            });
            f.instruction(&Instruction::LocalGet(s.addr));
            f.instruction(&Instruction::LocalGet(value));
        } else if matches!(
            op,
            Operator::MemoryFill { .. } | Operator::MemoryCopy { .. } | Operator::MemoryInit { .. }
        ) {
            // [dst, b, len] -> mark [dst, dst + len) -> [dst, b, len] -> op
            f.instruction(&Instruction::LocalSet(s.len));
            f.instruction(&Instruction::LocalSet(s.b));
            f.instruction(&Instruction::LocalTee(s.addr));
            f.instruction(&Instruction::I64ExtendI32U);
            mark(&mut f, &s, |f| {
                f.instruction(&Instruction::LocalGet(s.len));
                f.instruction(&Instruction::I64ExtendI32U);
            });
            f.instruction(&Instruction::LocalGet(s.addr));
            f.instruction(&Instruction::LocalGet(s.b));
            f.instruction(&Instruction::LocalGet(s.len));
        }
        f.instruction(&RoundtripReencoder.instruction(op).map_err(invalid)?);
    }
    Ok((f, reusable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instrumented_module_is_valid_and_exports_the_dirty_bounds() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 1)
                (global $g (mut i32) (i32.const 7))
                (global i32 (i32.const 1))
                (func (export "apply") (param i64 i64 i64) (local i64)
                    (i32.store offset=4 (i32.const 8) (i32.const 1))
                    (i64.store8 (i32.const 100) (local.get 0))
                    (f64.store (i32.const 16) (f64.const 1))
                    (memory.fill (i32.const 200) (i32.const 0) (i32.const 10))
                    (global.set $g (i32.const 3))))"#,
        )
        .unwrap();
        let out = instrument(&wasm).unwrap();
        assert!(out.reusable);
        assert_eq!(out.mutable_globals, vec![0]);
        wasmparser::Validator::new()
            .validate_all(&out.wasm)
            .unwrap();
        let exports: Vec<String> = Parser::new(0)
            .parse_all(&out.wasm)
            .filter_map(|p| match p.unwrap() {
                Payload::ExportSection(r) => Some(
                    r.into_iter()
                        .map(|e| e.unwrap().name.to_string())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect::<Vec<_>>();
        for name in [DIRTY_LOW_EXPORT, DIRTY_HIGH_EXPORT, "__tally_global_0"] {
            assert!(exports.iter().any(|e| e == name), "{name} in {exports:?}");
        }
    }

    #[test]
    fn table_mutation_makes_a_module_non_reusable() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 1)
                (table 2 funcref)
                (func $f)
                (func (export "apply") (param i64 i64 i64)
                    (table.set (i32.const 0) (ref.func $f)))
                (elem declare func $f))"#,
        )
        .unwrap();
        assert!(!instrument(&wasm).unwrap().reusable);
    }
}
