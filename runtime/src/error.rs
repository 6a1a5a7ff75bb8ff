//! Errors of the runtime itself: a module rejected at deploy, or a fault of the node.
//!
//! A contract that fails while running is *not* an error: it yields a failed
//! [`crate::Receipt`].

use std::io;
use std::path::PathBuf;

/// Why a module was rejected at deploy. Each variant names the problem precisely.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeployError {
    /// The module is larger than `limits::MAX_MODULE_SIZE`.
    #[error("module is {size} bytes; the limit is {limit}")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not a valid WebAssembly module.
    #[error("invalid WebAssembly: {0}")]
    Invalid(String),
    /// An import that ABI v1 does not define.
    #[error(
        "unknown import {module}.{name}: contracts may only import the ABI v1 functions of module \"env\""
    )]
    UnknownImport {
        /// Import module.
        module: String,
        /// Import name.
        name: String,
    },
    /// An import of the right name with the wrong kind or signature.
    #[error("import env.{name} has the wrong signature: expected {expected}, found {found}")]
    ImportSignature {
        /// Import name.
        name: String,
        /// What ABI v1 says.
        expected: String,
        /// What the module declares.
        found: String,
    },
    /// The same import declared twice.
    #[error("import env.{0} is declared more than once")]
    DuplicateImport(String),
    /// A count over its limit (functions, imports, exports, globals, tables, pages…).
    #[error("too many {what}: {count}; the limit is {limit}")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// How many the module has.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// A start function would run outside any action.
    #[error("the module has a start function; contracts run only through their entry points")]
    StartFunction,
    /// No exported `memory`.
    #[error("the module exports no memory named \"memory\"")]
    NoMemory,
    /// Neither `apply` nor any `onApply_<Action>_<code>` handler is exported.
    #[error("no entry point: export apply(i64, i64, i64) or onApply_<Action>_<code>()")]
    NoEntryPoint,
    /// An entry point with the wrong signature.
    #[error("export {name} has the wrong signature: expected {expected}")]
    EntrySignature {
        /// Export name.
        name: String,
        /// The required signature.
        expected: &'static str,
    },
    /// An `onApply_<Action>_<code>` export whose parts are not valid names.
    #[error("export {export}: {reason}")]
    BadHandlerName {
        /// Export name.
        export: String,
        /// What is wrong.
        reason: String,
    },
    /// An export whose name Tally reserves for the exports it adds itself.
    #[error("export {0}: names starting with \"__tally\" are reserved for the runtime")]
    ReservedExport(String),
    /// The module validated but could not be instantiated (for example a data segment that
    /// does not fit its memory).
    #[error("the module cannot be instantiated: {0}")]
    Instantiate(String),
}

/// A fault of the node, not of a contract.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Creating the engine failed.
    #[error("cannot create the wasmtime engine: {0}")]
    Engine(String),
    /// The module cache directory could not be used.
    #[error("module cache at {path}: {source}")]
    CacheIo {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Instantiating an already validated module failed (for example the instance pool is
    /// exhausted). The action did not run.
    #[error("cannot instantiate contract: {0}")]
    Instantiate(String),
    /// A host call met a fault of the node (a store that failed); the action's outcome is
    /// unknown, so its block must not be committed.
    #[error(transparent)]
    Host(#[from] tally_host_api::NodeFault),
}
