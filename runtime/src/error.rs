//! Errors of the runtime itself: a module rejected at deploy, or a fault of the node.
//!
//! A contract that fails while running is *not* an error: it yields a failed
//! [`crate::Receipt`].

use std::io;
use std::path::PathBuf;

/// Why a module was rejected at deploy. Each variant names the problem precisely.
///
/// Every node rejects the same module for the same reason, but the `Display` text may quote
/// wasmparser or wasmtime, whose wording is not part of consensus. What a chain records (a
/// failed `setcode` receipt) must come from [`DeployError::code`] and
/// [`DeployError::reason`], which are built only from Tally's own text and numbers.
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
    /// The bytes are not a valid WebAssembly module, or use a feature uploads may not use.
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
    /// A count over its limit (functions, imports, exports, globals, tables, pages, code
    /// bytes…).
    #[error("too many {what}: {count}; the limit is {limit}")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// How many the module has.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// One function over a per-function limit that bounds compile time or stack use (locals,
    /// body bytes, nesting depth, `br_table` targets, operand stack, parameters…).
    #[error("function {function}: too many {what}: {count}; the limit is {limit}")]
    FunctionLimit {
        /// The function's index in the module's function index space.
        function: u32,
        /// What was counted.
        what: &'static str,
        /// How many it has.
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
    /// The module validated but its instantiation fails on every node (a data segment that
    /// does not fit its memory, initialisers that use more than `limits::INSTANTIATE_FUEL`).
    #[error("the module cannot be instantiated: {0}")]
    Instantiate(String),
}

/// Longest module-chosen name (an import or export) quoted in [`DeployError::reason`], so a
/// hostile name cannot bloat the receipt that records it.
const MAX_QUOTED_NAME: usize = 64;

/// `name`, cut to [`MAX_QUOTED_NAME`] characters (at a character boundary, the same on every
/// node).
fn quoted(name: &str) -> String {
    match name.char_indices().nth(MAX_QUOTED_NAME) {
        Some((cut, _)) => format!("{:?}…", &name[..cut]),
        None => format!("{name:?}"),
    }
}

impl DeployError {
    /// A stable numeric code for the kind of rejection; new kinds get new numbers.
    pub fn code(&self) -> u16 {
        match self {
            Self::TooLarge { .. } => 1,
            Self::Invalid(_) => 2,
            Self::UnknownImport { .. } => 3,
            Self::ImportSignature { .. } => 4,
            Self::DuplicateImport(_) => 5,
            Self::TooMany { .. } => 6,
            Self::StartFunction => 7,
            Self::NoMemory => 8,
            Self::NoEntryPoint => 9,
            Self::EntrySignature { .. } => 10,
            Self::BadHandlerName { .. } => 11,
            Self::ReservedExport(_) => 12,
            Self::Instantiate(_) => 13,
            Self::FunctionLimit { .. } => 14,
        }
    }

    /// A short reason that is the same on every node: Tally's own words, limits and counts,
    /// and (cut short) the names the module itself chose, never an engine's text. This is
    /// what a chain puts into a failed `setcode` receipt.
    pub fn reason(&self) -> String {
        match self {
            Self::TooLarge { size, limit } => {
                format!("module is {size} bytes; the limit is {limit}")
            }
            Self::Invalid(_) => "invalid WebAssembly, or a feature contracts may not use".into(),
            Self::UnknownImport { module, name } => {
                format!("unknown import {}.{}", quoted(module), quoted(name))
            }
            Self::ImportSignature { name, expected, .. } => {
                format!(
                    "import {} has the wrong signature: expected {expected}",
                    quoted(name)
                )
            }
            Self::DuplicateImport(name) => format!("import {} declared twice", quoted(name)),
            Self::TooMany { what, count, limit } => {
                format!("too many {what}: {count}; the limit is {limit}")
            }
            Self::FunctionLimit {
                function,
                what,
                count,
                limit,
            } => format!("function {function}: too many {what}: {count}; the limit is {limit}"),
            Self::StartFunction => "the module has a start function".into(),
            Self::NoMemory => "the module exports no memory named \"memory\"".into(),
            Self::NoEntryPoint => "no entry point".into(),
            Self::EntrySignature { name, expected } => {
                format!(
                    "export {} has the wrong signature: expected {expected}",
                    quoted(name)
                )
            }
            Self::BadHandlerName { export, .. } => {
                format!("export {} is not onApply_<Action>_<code>", quoted(export))
            }
            Self::ReservedExport(name) => format!("export {} uses a reserved name", quoted(name)),
            Self::Instantiate(_) => "the module cannot be instantiated".into(),
        }
    }
}

/// A fault of the node, not of a contract.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Creating the engine failed, or the engine failed in a way no contract can cause.
    #[error("wasmtime engine: {0}")]
    Engine(String),
    /// The module cache directory could not be used.
    #[error("module cache at {path}: {source}")]
    CacheIo {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The key that authenticates the disk cache could not be read or created.
    #[error("module cache key {path}: {problem}")]
    CacheKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong, and what to do about it.
        problem: String,
    },
    /// Instantiating an already validated module failed in a way its deploy did not. The
    /// action did not run.
    #[error("cannot instantiate contract: {0}")]
    Instantiate(String),
    /// A resource of this node ran out while others were using it: every instance of the
    /// engine's pool was held by actions running at once. The action did not run, and nothing
    /// may be concluded about it; run it again when fewer actions run at once (a caller that
    /// was running actions concurrently should run them one at a time, which never meets
    /// this error), or build the runtime for more threads
    /// ([`RuntimeConfig::concurrency`](crate::RuntimeConfig::concurrency)).
    #[error(
        "all {limit} {resource} of this node are in use by actions running at once; run fewer at \
         once, or raise RuntimeConfig::concurrency"
    )]
    Exhausted {
        /// What ran out.
        resource: Resource,
        /// How many of it the node has.
        limit: u32,
    },
    /// A host call met a fault of the node (a store that failed); the action's outcome is
    /// unknown, so its block must not be committed.
    #[error(transparent)]
    Host(#[from] tally_host_api::NodeFault),
}

/// A resource of the node that concurrent actions share, named by [`RuntimeError::Exhausted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resource {
    /// Instances of the engine's pool ([`crate::engine::pool_instances`]).
    Instances,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Instances => "instances",
        })
    }
}

/// Why [`crate::Runtime::prepare`] returned no contract: the module's fault (the same on every
/// node) or the node's own.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The module breaks a rule; every node rejects it the same way.
    #[error(transparent)]
    Rejected(#[from] DeployError),
    /// The node failed while preparing a module that may be fine; the caller must not record
    /// a verdict on the module.
    #[error(transparent)]
    Node(#[from] RuntimeError),
}
