//! Static checks at deploy: what a module may import, export and declare, and how much
//! compiling and running it can cost.
//!
//! Validation runs once, before compilation, so a module that breaks a rule is rejected with
//! an error naming the rule, and nothing about it reaches the compiler or the module cache.
//! Besides the ABI rules it bounds everything that makes Cranelift slow (code bytes, locals,
//! nesting, blocks, `br_table` targets, operand stack; see `limits.rs`), and it measures each
//! function's frame for the deterministic stack accounting ([`crate::instrument`]).

use tally_host_api::Name;
use tally_host_api::abi::{self, ValType as AbiType};
use tally_host_api::limits::{
    FRAME_OVERHEAD_BYTES, MAX_BLOCKS_PER_FUNCTION, MAX_BR_TABLE_TARGETS, MAX_CODE_SIZE,
    MAX_CONST_EXPR_OPS, MAX_DATA_SEGMENTS, MAX_ELEMENT_SEGMENTS, MAX_EXPORTS,
    MAX_FUNCTION_BODY_SIZE, MAX_FUNCTION_LOCALS, MAX_FUNCTION_PARAMS, MAX_FUNCTION_RESULTS,
    MAX_FUNCTIONS, MAX_GLOBALS, MAX_IMPORTS, MAX_INITIAL_PAGES, MAX_MODULE_SIZE, MAX_NESTING_DEPTH,
    MAX_OPERAND_STACK, MAX_TABLE_ELEMENTS, MAX_TABLES, MAX_TOTAL_LOCALS, MAX_TYPES,
};
use wasmparser::{
    ConstExpr, DataKind, ElementItems, ElementKind, ExternalKind, FuncToValidate,
    FuncValidatorAllocations, FunctionBody, Operator, Parser, Payload, TypeRef, ValType,
    ValidPayload, Validator, ValidatorResources,
};

use crate::engine::upload_features;
use crate::error::DeployError;
use crate::instrument::SCRATCH_FRAME_BYTES;

/// How a contract is entered, at every stage named by what calls an entry point there: export
/// names after validation ([`ModuleInfo::entry`], the default), export indices once the module
/// is linked, type-checked functions in a live instance. `A` calls `apply`, `H` a 2017
/// handler. What a caller asks to run is an [`Entry`](crate::Entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryPoints<A = String, H = A> {
    /// The modern entry point `apply(receiver, code, action)`.
    Apply(A),
    /// The 2017 convention: one export per (code, action) pair.
    Legacy(Vec<LegacyHandler<H>>),
}

/// One 2017-style handler, `onApply_<Action>_<code>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyHandler<H = String> {
    /// The contract the action is addressed to (`<code>`).
    pub code: Name,
    /// The action's name (`<Action>`, lower-cased).
    pub action: Name,
    /// What calls it: its export's name, index or function.
    pub export: H,
}

impl<A, H> EntryPoints<A, H> {
    /// The same entry points at the next stage: `apply` and `handler` turn what calls each
    /// here into what calls it there, both given `with` (the store or module they look it up
    /// in). The first error stops.
    pub fn try_map<W: ?Sized, A2, H2, E>(
        &self,
        with: &mut W,
        apply: impl FnOnce(&mut W, &A) -> Result<A2, E>,
        mut handler: impl FnMut(&mut W, &H) -> Result<H2, E>,
    ) -> Result<EntryPoints<A2, H2>, E> {
        Ok(match self {
            Self::Apply(a) => EntryPoints::Apply(apply(with, a)?),
            Self::Legacy(handlers) => EntryPoints::Legacy(
                handlers
                    .iter()
                    .map(|h| {
                        Ok(LegacyHandler {
                            code: h.code,
                            action: h.action,
                            export: handler(with, &h.export)?,
                        })
                    })
                    .collect::<Result<_, E>>()?,
            ),
        })
    }
}

/// What validation learned about a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// How actions enter it.
    pub entry: EntryPoints,
    /// Whether it exports `onInit`, run once at deploy.
    pub has_init: bool,
    /// Whether it exports `query(receiver, method)`, its read-only entry point.
    pub has_query: bool,
    /// Whether it exports `migrate()`, run when `setcode` replaces the account's code.
    pub has_migrate: bool,
}

/// What the runtime needs beyond [`ModuleInfo`] to instrument and price a module.
#[derive(Debug, Clone)]
pub(crate) struct Validated {
    pub info: ModuleInfo,
    /// The accounted stack bytes of each defined function's frame, in order: see
    /// [`frame_bytes`].
    pub frame_bytes: Vec<u32>,
    /// Bytes of all data segments: what instantiation copies into a fresh instance.
    pub data_bytes: u64,
}

fn too_many(what: &'static str, count: u64, limit: u64) -> Result<(), DeployError> {
    if count > limit {
        Err(DeployError::TooMany { what, count, limit })
    } else {
        Ok(())
    }
}

fn invalid(e: impl std::fmt::Display) -> DeployError {
    DeployError::Invalid(e.to_string())
}

fn wasm_type(t: AbiType) -> ValType {
    match t {
        AbiType::I32 => ValType::I32,
        AbiType::I64 => ValType::I64,
    }
}

/// A function type: its parameters and results.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signature {
    params: Vec<ValType>,
    results: Vec<ValType>,
}

impl Signature {
    fn show(&self) -> String {
        let list = |ts: &[ValType]| {
            ts.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!("({}) -> ({})", list(&self.params), list(&self.results))
    }

    fn is(&self, params: &[ValType], results: &[ValType]) -> bool {
        self.params == params && self.results == results
    }
}

fn show_abi(params: &[AbiType], results: &[AbiType]) -> String {
    let list = |ts: &[AbiType]| {
        ts.iter()
            .map(|t| wasm_type(*t).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("({}) -> ({})", list(params), list(results))
}

/// Splits `onApply_<Action>_<code>` into names; `None` if `export` lacks the prefix.
fn legacy_handler(export: &str) -> Option<Result<LegacyHandler, DeployError>> {
    let rest = export.strip_prefix(abi::LEGACY_APPLY_PREFIX)?;
    let bad = |reason: String| DeployError::BadHandlerName {
        export: export.to_string(),
        reason,
    };
    let Some((action, code)) = rest.split_once('_') else {
        return Some(Err(bad(
            "expected onApply_<Action>_<code>, with exactly one '_' after the prefix".into(),
        )));
    };
    let action_lower = action.to_ascii_lowercase();
    let parsed = action_lower
        .parse::<Name>()
        .map_err(|e| bad(format!("action {action:?}: {e}")))
        .and_then(|action| {
            let code = code
                .parse::<Name>()
                .map_err(|e| bad(format!("contract {code:?}: {e}")))?;
            Ok(LegacyHandler {
                code,
                action,
                export: export.to_string(),
            })
        });
    Some(parsed)
}

/// Accounted bytes of one value on the call stack: a machine word, or two for a `v128`.
/// Cranelift spills every value to an 8-byte slot (16 for vectors), so this is what a value
/// can cost natively, whatever its wasm type.
fn value_bytes(ty: ValType) -> u32 {
    match ty {
        ValType::V128 => 16,
        _ => 8,
    }
}

/// The accounted stack bytes of a function's frame: [`FRAME_OVERHEAD_BYTES`], its
/// parameters and locals (those the instrumentation adds included), and the most values its
/// operand stack holds at once. The instrumentation charges this on entry and refunds it on
/// exit, and `limits::MAX_STACK_BYTES` bounds the sum.
fn frame_bytes(params: &[ValType], local_bytes: u64, max_operands: u32, vectors: bool) -> u32 {
    let params: u32 = params.iter().map(|t| value_bytes(*t)).sum();
    let slot = if vectors { 16 } else { 8 };
    // Each term is bounded by the limits checked before (64 params, 1,024 locals of at most
    // 16 bytes, 1,024 operands), so the sum fits easily.
    FRAME_OVERHEAD_BYTES + SCRATCH_FRAME_BYTES + params + local_bytes as u32 + max_operands * slot
}

/// Totals over the functions seen so far.
#[derive(Default)]
struct Totals {
    locals: u64,
}

/// Validates one function body operator by operator, checking the per-function limits as it
/// goes, and returns its accounted frame bytes.
fn check_function(
    func: FuncToValidate<ValidatorResources>,
    body: &FunctionBody<'_>,
    params: &[ValType],
    allocs: &mut FuncValidatorAllocations,
    totals: &mut Totals,
) -> Result<u32, DeployError> {
    let function = func.index;
    let limit = |what, count, max| function_limit(function, what, count, max);
    limit(
        "body bytes",
        body.range().len() as u64,
        MAX_FUNCTION_BODY_SIZE as u64,
    )?;
    // Count locals before wasmparser sees them, so a declaration of millions costs nothing.
    let mut locals = 0u64;
    let mut local_bytes = 0u64;
    let mut vectors = params.contains(&ValType::V128);
    let mut validator = func.into_validator(std::mem::take(allocs));
    for pair in body.get_locals_reader().map_err(invalid)? {
        let (count, ty) = pair.map_err(invalid)?;
        locals += u64::from(count);
        limit("locals", locals, u64::from(MAX_FUNCTION_LOCALS))?;
        local_bytes += u64::from(count) * u64::from(value_bytes(ty));
        vectors |= ty == ValType::V128;
        validator
            .define_locals(body.range().start, count, ty)
            .map_err(invalid)?;
    }
    totals.locals += locals;
    too_many("locals in all functions", totals.locals, MAX_TOTAL_LOCALS)?;

    let (max_operands, vector_operands) = check_operators(&mut validator, body, function)?;
    vectors |= vector_operands;
    *allocs = validator.into_allocations();
    Ok(frame_bytes(params, local_bytes, max_operands, vectors))
}

/// A per-function limit of `function`, `count` against `limit`.
fn function_limit(
    function: u32,
    what: &'static str,
    count: u64,
    limit: u64,
) -> Result<(), DeployError> {
    if count > limit {
        Err(DeployError::FunctionLimit {
            function,
            what,
            count,
            limit,
        })
    } else {
        Ok(())
    }
}

/// Validates the operators of `body` with `validator`, checking the per-function limits on
/// them; returns the most operand-stack values live at once, and whether any was a `v128`.
fn check_operators(
    validator: &mut wasmparser::FuncValidator<ValidatorResources>,
    body: &FunctionBody<'_>,
    function: u32,
) -> Result<(u32, bool), DeployError> {
    let limit = |what, count, max| function_limit(function, what, count, max);
    let mut ops = body.get_operators_reader().map_err(invalid)?;
    let mut blocks = 0u32;
    let mut vectors = false;
    let mut max_operands = 0u32;
    while !ops.eof() {
        let offset = ops.original_position();
        let op = ops.read().map_err(invalid)?;
        match &op {
            Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => {
                blocks += 1;
                limit(
                    "blocks",
                    u64::from(blocks),
                    u64::from(MAX_BLOCKS_PER_FUNCTION),
                )?;
            }
            Operator::BrTable { targets } => limit(
                "br_table targets",
                u64::from(targets.len()),
                u64::from(MAX_BR_TABLE_TARGETS),
            )?,
            _ => {}
        }
        validator.op(offset, &op).map_err(invalid)?;
        let height = validator.operand_stack_height();
        if height > max_operands {
            max_operands = height;
            limit(
                "operand stack values",
                u64::from(height),
                u64::from(MAX_OPERAND_STACK),
            )?;
        }
        // The function's own frame is one level of the control stack.
        let depth = validator.control_stack_height().saturating_sub(1);
        limit(
            "nesting depth",
            u64::from(depth),
            u64::from(MAX_NESTING_DEPTH),
        )?;
        if height > 0 && validator.get_operand_type(0) == Some(Some(ValType::V128)) {
            vectors = true;
        }
    }
    ops.finish().map_err(invalid)?;
    Ok((max_operands, vectors))
}

/// Operators in a constant expression, its final `end` included.
fn const_expr_ops(expr: &ConstExpr<'_>) -> Result<usize, DeployError> {
    let mut reader = expr.get_operators_reader();
    let mut ops = 0;
    while !reader.eof() {
        reader.read().map_err(invalid)?;
        ops += 1;
    }
    Ok(ops)
}

fn check_const_expr(expr: &ConstExpr<'_>) -> Result<(), DeployError> {
    too_many(
        "operators in a constant expression",
        const_expr_ops(expr)? as u64,
        MAX_CONST_EXPR_OPS as u64,
    )
}

/// Checks `wasm` against every upload rule, and returns what validation learned.
pub fn validate(wasm: &[u8]) -> Result<ModuleInfo, DeployError> {
    check(wasm).map(|v| v.info)
}

/// [`validate`], plus what instrumentation and pricing need.
pub(crate) fn check(wasm: &[u8]) -> Result<Validated, DeployError> {
    if wasm.len() > MAX_MODULE_SIZE {
        return Err(DeployError::TooLarge {
            size: wasm.len(),
            limit: MAX_MODULE_SIZE,
        });
    }
    let mut validator = Validator::new_with_features(upload_features());
    let mut allocs = FuncValidatorAllocations::default();
    let mut totals = Totals::default();
    let mut module = Checked::default();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(invalid)?;
        // wasmparser validates each payload before Tally's rules look at it, so the rules
        // below can trust indices and types.
        if let ValidPayload::Func(func, body) = validator.payload(&payload).map_err(invalid)? {
            let signature = &module.types[module.functions[func.index as usize]];
            module.frame_bytes.push(check_function(
                func,
                &body,
                &signature.params,
                &mut allocs,
                &mut totals,
            )?);
        }
        module.section(payload)?;
    }
    module.finish()
}

/// What [`check`] has learned of a module so far.
#[derive(Default)]
struct Checked {
    types: Vec<Signature>,
    /// The type index of every function, imported ones first.
    functions: Vec<usize>,
    frame_bytes: Vec<u32>,
    data_bytes: u64,
    imported: Vec<&'static str>,
    entry_apply: bool,
    has_init: bool,
    has_query: bool,
    has_migrate: bool,
    has_memory: bool,
    handlers: Vec<LegacyHandler>,
}

impl Checked {
    /// Checks one section against the upload rules.
    fn section(&mut self, payload: Payload<'_>) -> Result<(), DeployError> {
        match payload {
            Payload::TypeSection(reader) => self.types(reader)?,
            Payload::ImportSection(reader) => {
                too_many("imports", u64::from(reader.count()), MAX_IMPORTS as u64)?;
                for import in reader.into_imports() {
                    self.import(import.map_err(invalid)?)?;
                }
            }
            Payload::FunctionSection(reader) => {
                too_many("functions", u64::from(reader.count()), MAX_FUNCTIONS as u64)?;
                for ty in reader {
                    self.functions.push(ty.map_err(invalid)? as usize);
                }
            }
            Payload::GlobalSection(reader) => {
                too_many("globals", u64::from(reader.count()), MAX_GLOBALS as u64)?;
                for global in reader {
                    check_const_expr(&global.map_err(invalid)?.init_expr)?;
                }
            }
            Payload::TableSection(reader) => {
                too_many("tables", u64::from(reader.count()), MAX_TABLES as u64)?;
                for table in reader {
                    let table = table.map_err(invalid)?;
                    too_many("table elements", table.ty.initial, MAX_TABLE_ELEMENTS)?;
                }
            }
            Payload::MemorySection(reader) => {
                for memory in reader {
                    let memory = memory.map_err(invalid)?;
                    // A declared maximum above MAX_MEMORY_PAGES is harmless: the engine stops
                    // growth there, and `memory.grow` returns -1 as the spec allows.
                    too_many("initial memory pages", memory.initial, MAX_INITIAL_PAGES)?;
                }
            }
            Payload::StartSection { .. } => return Err(DeployError::StartFunction),
            Payload::ElementSection(reader) => check_elements(reader)?,
            Payload::DataSection(reader) => self.data(reader)?,
            Payload::CodeSectionStart { size, .. } => {
                too_many("code bytes", u64::from(size), MAX_CODE_SIZE as u64)?;
            }
            Payload::ExportSection(reader) => {
                too_many("exports", u64::from(reader.count()), MAX_EXPORTS as u64)?;
                for export in reader {
                    self.export(export.map_err(invalid)?)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn types(&mut self, reader: wasmparser::TypeSectionReader<'_>) -> Result<(), DeployError> {
        too_many("types", u64::from(reader.count()), MAX_TYPES as u64)?;
        for ty in reader.into_iter_err_on_gc_types() {
            let ty = ty.map_err(invalid)?;
            too_many(
                "parameters of a function type",
                ty.params().len() as u64,
                MAX_FUNCTION_PARAMS as u64,
            )?;
            too_many(
                "results of a function type",
                ty.results().len() as u64,
                MAX_FUNCTION_RESULTS as u64,
            )?;
            self.types.push(Signature {
                params: ty.params().to_vec(),
                results: ty.results().to_vec(),
            });
        }
        Ok(())
    }

    /// An import must be one of ABI v1's, with its signature, once.
    fn import(&mut self, import: wasmparser::Import<'_>) -> Result<(), DeployError> {
        let spec = (import.module == abi::MODULE)
            .then(|| abi::import(import.name))
            .flatten()
            .ok_or_else(|| DeployError::UnknownImport {
                module: import.module.to_string(),
                name: import.name.to_string(),
            })?;
        let expected = show_abi(spec.params, spec.results);
        let TypeRef::Func(type_index) = import.ty else {
            return Err(DeployError::ImportSignature {
                name: spec.name.to_string(),
                expected,
                found: "a non-function import".into(),
            });
        };
        let ty = &self.types[type_index as usize];
        let params: Vec<_> = spec.params.iter().map(|t| wasm_type(*t)).collect();
        let results: Vec<_> = spec.results.iter().map(|t| wasm_type(*t)).collect();
        if !ty.is(&params, &results) {
            return Err(DeployError::ImportSignature {
                name: spec.name.to_string(),
                expected,
                found: ty.show(),
            });
        }
        if self.imported.contains(&spec.name) {
            return Err(DeployError::DuplicateImport(spec.name.to_string()));
        }
        self.imported.push(spec.name);
        self.functions.push(type_index as usize);
        Ok(())
    }

    fn data(&mut self, reader: wasmparser::DataSectionReader<'_>) -> Result<(), DeployError> {
        too_many(
            "data segments",
            u64::from(reader.count()),
            MAX_DATA_SEGMENTS as u64,
        )?;
        for data in reader {
            let data = data.map_err(invalid)?;
            if let DataKind::Active { offset_expr, .. } = &data.kind {
                check_const_expr(offset_expr)?;
            }
            self.data_bytes += data.data.len() as u64;
        }
        Ok(())
    }

    /// An export may not use a reserved name; entry points must have their signatures.
    fn export(&mut self, export: wasmparser::Export<'_>) -> Result<(), DeployError> {
        if export
            .name
            .starts_with(crate::instrument::RESERVED_EXPORT_PREFIX)
        {
            return Err(DeployError::ReservedExport(export.name.to_string()));
        }
        let signature = || &self.types[self.functions[export.index as usize]];
        let entry_signature =
            |params: &[ValType], expected: &'static str| match signature().is(params, &[]) {
                true => Ok(()),
                false => Err(DeployError::EntrySignature {
                    name: export.name.into(),
                    expected,
                }),
            };
        match (export.kind, export.name) {
            (ExternalKind::Memory, abi::MEMORY_EXPORT) => self.has_memory = true,
            (ExternalKind::Func, abi::APPLY_EXPORT) => {
                entry_signature(&[ValType::I64; 3], "(i64, i64, i64) -> ()")?;
                self.entry_apply = true;
            }
            (ExternalKind::Func, abi::INIT_EXPORT) => {
                entry_signature(&[], "() -> ()")?;
                self.has_init = true;
            }
            (ExternalKind::Func, abi::QUERY_EXPORT) => {
                entry_signature(&[ValType::I64; 2], "(i64, i64) -> ()")?;
                self.has_query = true;
            }
            (ExternalKind::Func, abi::MIGRATE_EXPORT) => {
                entry_signature(&[], "() -> ()")?;
                self.has_migrate = true;
            }
            (ExternalKind::Func, name) => {
                if let Some(handler) = legacy_handler(name) {
                    entry_signature(&[], "() -> ()")?;
                    self.legacy(name, handler?)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A 2017 handler, unless another one handles the same action.
    fn legacy(&mut self, name: &str, handler: LegacyHandler) -> Result<(), DeployError> {
        if self
            .handlers
            .iter()
            .any(|h| h.code == handler.code && h.action == handler.action)
        {
            return Err(DeployError::BadHandlerName {
                export: name.into(),
                reason: format!(
                    "a second handler for action {} of {}",
                    handler.action, handler.code
                ),
            });
        }
        self.handlers.push(handler);
        Ok(())
    }

    fn finish(self) -> Result<Validated, DeployError> {
        if !self.has_memory {
            return Err(DeployError::NoMemory);
        }
        let entry = if self.entry_apply {
            EntryPoints::Apply(abi::APPLY_EXPORT.into())
        } else if !self.handlers.is_empty() {
            EntryPoints::Legacy(self.handlers)
        } else {
            return Err(DeployError::NoEntryPoint);
        };
        Ok(Validated {
            info: ModuleInfo {
                entry,
                has_init: self.has_init,
                has_query: self.has_query,
                has_migrate: self.has_migrate,
            },
            frame_bytes: self.frame_bytes,
            data_bytes: self.data_bytes,
        })
    }
}

/// Element segments: their count, and the constant expressions of their offsets and items.
fn check_elements(reader: wasmparser::ElementSectionReader<'_>) -> Result<(), DeployError> {
    too_many(
        "element segments",
        u64::from(reader.count()),
        MAX_ELEMENT_SEGMENTS as u64,
    )?;
    for element in reader {
        let element = element.map_err(invalid)?;
        if let ElementKind::Active { offset_expr, .. } = &element.kind {
            check_const_expr(offset_expr)?;
        }
        if let ElementItems::Expressions(_, exprs) = element.items {
            for expr in exprs {
                check_const_expr(&expr.map_err(invalid)?)?;
            }
        }
    }
    Ok(())
}
