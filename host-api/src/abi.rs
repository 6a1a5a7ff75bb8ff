//! The import table of ABI v1 and the entry-point conventions.
//!
//! [`IMPORTS`] is the single source of truth: the wasmtime registration in [`crate::linker`],
//! the upload validation in `tally-runtime` and the declarations in `sdk-c/include/tally.h`
//! are all checked against it by tests.

/// The module name every import lives in.
pub const MODULE: &str = "env";

/// The ABI version this crate describes.
pub const VERSION: u32 = 1;

/// The linear memory a contract must export, for the host to read its pointers.
pub const MEMORY_EXPORT: &str = "memory";

/// The modern entry point: `apply(receiver: i64, code: i64, action: i64)`.
pub const APPLY_EXPORT: &str = "apply";

/// The 2017 constructor, run once when the contract is deployed: `onInit()`.
pub const INIT_EXPORT: &str = "onInit";

/// The 2017 handler prefix: `onApply_<Action>_<code>()` handles action `<Action>` sent to
/// contract `<code>`. `<Action>` is lower-cased before it is read as a [`crate::Name`], since
/// 64-bit names have no capital letters; `<code>` is read as is.
pub const LEGACY_APPLY_PREFIX: &str = "onApply_";

/// A WebAssembly value type used by the ABI (only the two integer types are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValType {
    /// `i32`: pointers, lengths, booleans and small results.
    I32,
    /// `i64`: account and action names.
    I64,
}

/// One imported host function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Import {
    /// Its name in module [`MODULE`].
    pub name: &'static str,
    /// Parameter types, in order.
    pub params: &'static [ValType],
    /// Result types (none or one).
    pub results: &'static [ValType],
    /// One line on what it does.
    pub doc: &'static str,
}

use ValType::{I32, I64};

/// Every import of ABI v1, in the order `tally.h` declares them.
pub const IMPORTS: &[Import] = &[
    Import {
        name: "read_message",
        params: &[I32, I32],
        results: &[I32],
        doc: "copy up to len bytes of the action's data to dst; returns its full length",
    },
    Import {
        name: "message_size",
        params: &[],
        results: &[I32],
        doc: "the full length of the action's data",
    },
    Import {
        name: "load",
        params: &[I32, I32, I32, I32],
        results: &[I32],
        doc: "copy up to dlen bytes of key's value to dst; returns its full length, or -1 if absent",
    },
    Import {
        name: "store",
        params: &[I32, I32, I32, I32],
        results: &[],
        doc: "set key to value in this contract's own namespace",
    },
    Import {
        name: "remove",
        params: &[I32, I32],
        results: &[],
        doc: "delete key from this contract's own namespace",
    },
    Import {
        name: "assert",
        params: &[I32, I32, I32],
        results: &[],
        doc: "abort the action with the given message when cond is 0",
    },
    Import {
        name: "require_auth",
        params: &[I64],
        results: &[],
        doc: "abort the action unless the transaction is authorized by account",
    },
    Import {
        name: "print",
        params: &[I32, I32],
        results: &[],
        doc: "append text to the action's console (bounded; for debugging)",
    },
];

/// Looks up an import of ABI v1 by name.
pub fn import(name: &str) -> Option<&'static Import> {
    IMPORTS.iter().find(|i| i.name == name)
}
