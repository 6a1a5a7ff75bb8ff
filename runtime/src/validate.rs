//! Static checks at deploy: what a module may import, export and declare.
//!
//! Validation runs once, before compilation, so a module that breaks a rule is rejected with
//! an error naming the rule, and nothing about it reaches the module cache.

use tally_host_api::Name;
use tally_host_api::abi::{self, ValType as AbiType};
use tally_host_api::limits::{
    MAX_EXPORTS, MAX_FUNCTIONS, MAX_GLOBALS, MAX_IMPORTS, MAX_INITIAL_PAGES, MAX_MODULE_SIZE,
    MAX_TABLE_ELEMENTS, MAX_TABLES,
};
use wasmparser::{
    ExternalKind, FuncType, Parser, Payload, TypeRef, ValType, Validator, WasmFeatures,
};

use crate::error::DeployError;

/// How a contract is entered, resolved once at deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryPoints {
    /// The modern entry point `apply(receiver, code, action)`.
    Apply,
    /// The 2017 convention: one export per (code, action) pair.
    Legacy(Vec<LegacyHandler>),
}

/// One 2017-style handler, `onApply_<Action>_<code>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyHandler {
    /// The contract the action is addressed to (`<code>`).
    pub code: Name,
    /// The action's name (`<Action>`, lower-cased).
    pub action: Name,
    /// The export to call.
    pub export: String,
}

/// What validation learned about a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// How actions enter it.
    pub entry: EntryPoints,
    /// Whether it exports `onInit`, run once at deploy.
    pub has_init: bool,
}

fn too_many(what: &'static str, count: u64, limit: u64) -> Result<(), DeployError> {
    if count > limit {
        Err(DeployError::TooMany { what, count, limit })
    } else {
        Ok(())
    }
}

fn wasm_type(t: AbiType) -> ValType {
    match t {
        AbiType::I32 => ValType::I32,
        AbiType::I64 => ValType::I64,
    }
}

fn show(ty: &FuncType) -> String {
    let list = |ts: &[ValType]| {
        ts.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("({}) -> ({})", list(ty.params()), list(ty.results()))
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

fn matches(ty: &FuncType, params: &[ValType], results: &[ValType]) -> bool {
    ty.params() == params && ty.results() == results
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

/// Checks `wasm` against every upload rule, with the features `engine_features` enables.
pub fn validate(wasm: &[u8], engine_features: WasmFeatures) -> Result<ModuleInfo, DeployError> {
    if wasm.len() > MAX_MODULE_SIZE {
        return Err(DeployError::TooLarge {
            size: wasm.len(),
            limit: MAX_MODULE_SIZE,
        });
    }
    let types = Validator::new_with_features(engine_features)
        .validate_all(wasm)
        .map_err(|e| DeployError::Invalid(e.to_string()))?;
    let types = types.as_ref();
    let func_type =
        |index: u32| -> FuncType { types[types.core_function_at(index)].unwrap_func().clone() };

    let mut imported = Vec::new();
    let mut entry_apply = false;
    let mut has_init = false;
    let mut has_memory = false;
    let mut handlers = Vec::new();

    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| DeployError::Invalid(e.to_string()))?;
        match payload {
            Payload::ImportSection(reader) => {
                too_many("imports", u64::from(reader.count()), MAX_IMPORTS as u64)?;
                // Every accepted import is a function, so import i is function i.
                for (func_index, import) in reader.into_imports().enumerate() {
                    let import = import.map_err(|e| DeployError::Invalid(e.to_string()))?;
                    let spec = (import.module == abi::MODULE)
                        .then(|| abi::import(import.name))
                        .flatten()
                        .ok_or_else(|| DeployError::UnknownImport {
                            module: import.module.to_string(),
                            name: import.name.to_string(),
                        })?;
                    let expected = show_abi(spec.params, spec.results);
                    let TypeRef::Func(_) = import.ty else {
                        return Err(DeployError::ImportSignature {
                            name: spec.name.to_string(),
                            expected,
                            found: "a non-function import".into(),
                        });
                    };
                    let ty = func_type(func_index as u32);
                    let params: Vec<_> = spec.params.iter().map(|t| wasm_type(*t)).collect();
                    let results: Vec<_> = spec.results.iter().map(|t| wasm_type(*t)).collect();
                    if !matches(&ty, &params, &results) {
                        return Err(DeployError::ImportSignature {
                            name: spec.name.to_string(),
                            expected,
                            found: show(&ty),
                        });
                    }
                    if imported.contains(&spec.name) {
                        return Err(DeployError::DuplicateImport(spec.name.to_string()));
                    }
                    imported.push(spec.name);
                }
            }
            Payload::FunctionSection(reader) => {
                too_many("functions", u64::from(reader.count()), MAX_FUNCTIONS as u64)?;
            }
            Payload::GlobalSection(reader) => {
                too_many("globals", u64::from(reader.count()), MAX_GLOBALS as u64)?;
            }
            Payload::TableSection(reader) => {
                too_many("tables", u64::from(reader.count()), MAX_TABLES as u64)?;
                for table in reader {
                    let table = table.map_err(|e| DeployError::Invalid(e.to_string()))?;
                    too_many("table elements", table.ty.initial, MAX_TABLE_ELEMENTS)?;
                }
            }
            Payload::MemorySection(reader) => {
                for memory in reader {
                    let memory = memory.map_err(|e| DeployError::Invalid(e.to_string()))?;
                    // A declared maximum above MAX_MEMORY_PAGES is harmless: the engine stops
                    // growth there, and `memory.grow` returns -1 as the spec allows.
                    too_many("initial memory pages", memory.initial, MAX_INITIAL_PAGES)?;
                }
            }
            Payload::StartSection { .. } => return Err(DeployError::StartFunction),
            Payload::ExportSection(reader) => {
                too_many("exports", u64::from(reader.count()), MAX_EXPORTS as u64)?;
                for export in reader {
                    let export = export.map_err(|e| DeployError::Invalid(e.to_string()))?;
                    if export
                        .name
                        .starts_with(crate::instrument::RESERVED_EXPORT_PREFIX)
                    {
                        return Err(DeployError::ReservedExport(export.name.to_string()));
                    }
                    match (export.kind, export.name) {
                        (ExternalKind::Memory, abi::MEMORY_EXPORT) => has_memory = true,
                        (ExternalKind::Func, abi::APPLY_EXPORT) => {
                            let i64s = [ValType::I64; 3];
                            if !matches(&func_type(export.index), &i64s, &[]) {
                                return Err(DeployError::EntrySignature {
                                    name: export.name.into(),
                                    expected: "(i64, i64, i64) -> ()",
                                });
                            }
                            entry_apply = true;
                        }
                        (ExternalKind::Func, abi::INIT_EXPORT) => {
                            if !matches(&func_type(export.index), &[], &[]) {
                                return Err(DeployError::EntrySignature {
                                    name: export.name.into(),
                                    expected: "() -> ()",
                                });
                            }
                            has_init = true;
                        }
                        (ExternalKind::Func, name) => {
                            if let Some(handler) = legacy_handler(name) {
                                if !matches(&func_type(export.index), &[], &[]) {
                                    return Err(DeployError::EntrySignature {
                                        name: name.into(),
                                        expected: "() -> ()",
                                    });
                                }
                                let handler = handler?;
                                if handlers.iter().any(|h: &LegacyHandler| {
                                    h.code == handler.code && h.action == handler.action
                                }) {
                                    return Err(DeployError::BadHandlerName {
                                        export: name.into(),
                                        reason: format!(
                                            "a second handler for action {} of {}",
                                            handler.action, handler.code
                                        ),
                                    });
                                }
                                handlers.push(handler);
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    if !has_memory {
        return Err(DeployError::NoMemory);
    }
    let entry = if entry_apply {
        EntryPoints::Apply
    } else if !handlers.is_empty() {
        EntryPoints::Legacy(handlers)
    } else {
        return Err(DeployError::NoEntryPoint);
    };
    Ok(ModuleInfo { entry, has_init })
}
