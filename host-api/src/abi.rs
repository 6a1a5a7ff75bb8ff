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

/// The read-only entry point: `query(receiver: i64, method: i64)`, run by `tally query` and by
/// another contract's `query` import, in static mode (docs/CONTRACTS.md).
pub const QUERY_EXPORT: &str = "query";

/// The upgrade entry point: `migrate()`, run once when `setcode` replaces existing code, in the
/// same transaction, against the old state.
pub const MIGRATE_EXPORT: &str = "migrate";

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
    /// What it costs in fuel.
    pub charge: Charge,
}

/// What a host call costs in fuel, on top of the WebAssembly that makes it. Every engine that
/// runs contracts prices calls from this one table: the wasmtime linker of
/// [`crate::linker`] and the wasmi baseline of `tally bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// Charged first, once the lengths are checked, with [`Charge::per_input_byte`].
    pub call: u64,
    /// Per byte of the call's input: its key, the key and value of a `store`, printed text.
    pub per_input_byte: u64,
    /// Per byte of the call's result, after the call: the message bytes `read_message`
    /// copies, or the whole value a `load` finds, however little of it the contract asks
    /// for. The host reads (and the journal keeps) all of it, so probing a large value with a
    /// zero-length buffer costs what reading it does.
    pub per_output_byte: u64,
    /// Extra when a `store` creates a key that did not exist.
    pub new_key: u64,
}

impl Charge {
    /// A call that moves no bytes: [`FUEL_PER_HOST_CALL`] plus `extra`.
    const fn flat(extra: u64) -> Self {
        Self {
            call: FUEL_PER_HOST_CALL + extra,
            per_input_byte: 0,
            per_output_byte: 0,
            new_key: 0,
        }
    }

    /// The fuel charged before the call runs, for `input_bytes` of input.
    pub const fn before(&self, input_bytes: u64) -> u64 {
        self.call + input_bytes * self.per_input_byte
    }
}

use crate::limits::{
    FUEL_PER_BYTE, FUEL_PER_CALL, FUEL_PER_EVENT, FUEL_PER_EVENT_BYTE, FUEL_PER_HOST_CALL,
    FUEL_PER_KEY_READ, FUEL_PER_KEY_SEEK, FUEL_PER_KEY_WRITE, FUEL_PER_NEW_KEY,
    FUEL_PER_STORED_BYTE,
};
use ValType::{I32, I64};

/// Every import of ABI v1, in the order `tally.h` declares them.
pub const IMPORTS: &[Import] = &[
    Import {
        name: "read_message",
        params: &[I32, I32],
        results: &[I32],
        doc: "copy up to len bytes of the action's data to dst; returns its full length",
        charge: Charge {
            per_output_byte: FUEL_PER_BYTE,
            ..Charge::flat(0)
        },
    },
    Import {
        name: "message_size",
        params: &[],
        results: &[I32],
        doc: "the full length of the action's data",
        charge: Charge::flat(0),
    },
    Import {
        name: "load",
        params: &[I32, I32, I32, I32],
        results: &[I32],
        doc: "copy up to dlen bytes of key's value to dst; returns its full length, or -1 if absent",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            per_output_byte: FUEL_PER_BYTE,
            ..Charge::flat(FUEL_PER_KEY_READ)
        },
    },
    Import {
        name: "store",
        params: &[I32, I32, I32, I32],
        results: &[],
        doc: "set key to value in this contract's own namespace",
        charge: Charge {
            per_input_byte: FUEL_PER_STORED_BYTE,
            new_key: FUEL_PER_NEW_KEY,
            ..Charge::flat(FUEL_PER_KEY_WRITE)
        },
    },
    Import {
        name: "remove",
        params: &[I32, I32],
        results: &[],
        doc: "delete key from this contract's own namespace",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            ..Charge::flat(FUEL_PER_KEY_WRITE)
        },
    },
    Import {
        name: "assert",
        params: &[I32, I32, I32],
        results: &[],
        doc: "abort the action with the given message when cond is 0",
        charge: Charge::flat(0),
    },
    Import {
        name: "require_auth",
        params: &[I64],
        results: &[],
        doc: "abort the action unless the transaction is authorized by account",
        charge: Charge::flat(0),
    },
    Import {
        name: "print",
        params: &[I32, I32],
        results: &[],
        doc: "append text to the action's console (bounded; for debugging)",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            ..Charge::flat(0)
        },
    },
    Import {
        name: "call",
        params: &[I64, I64, I32, I32, I64],
        results: &[I32],
        doc: "run account's action with data, giving it at most fuel (0: all left); 0 on success, else its abort code",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            per_output_byte: FUEL_PER_BYTE,
            ..Charge::flat(FUEL_PER_CALL)
        },
    },
    Import {
        name: "query",
        params: &[I64, I64, I32, I32, I64],
        results: &[I32],
        doc: "run account's read-only query method with data, like call; 0 on success, else its abort code",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            per_output_byte: FUEL_PER_BYTE,
            ..Charge::flat(FUEL_PER_CALL)
        },
    },
    Import {
        name: "set_return",
        params: &[I32, I32],
        results: &[],
        doc: "set this action's return data (what its caller or a query reads)",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            ..Charge::flat(0)
        },
    },
    Import {
        name: "return_size",
        params: &[],
        results: &[I32],
        doc: "the length of the return data of the last call or query",
        charge: Charge::flat(0),
    },
    Import {
        name: "read_return",
        params: &[I32, I32],
        results: &[I32],
        doc: "copy up to len bytes of the last call's return data to dst; returns its full length",
        charge: Charge {
            per_output_byte: FUEL_PER_BYTE,
            ..Charge::flat(0)
        },
    },
    Import {
        name: "caller",
        params: &[],
        results: &[I64],
        doc: "the contract that called this action, or 0 for a top-level action",
        charge: Charge::flat(0),
    },
    Import {
        name: "emit",
        params: &[I64, I32, I32],
        results: &[],
        doc: "emit event name with borsh data, kept in the receipt in order",
        charge: Charge {
            per_input_byte: FUEL_PER_EVENT_BYTE,
            ..Charge::flat(FUEL_PER_EVENT)
        },
    },
    Import {
        name: "block_time",
        params: &[],
        results: &[I64],
        doc: "the block's time, ms since the Unix epoch (the header's, the same on every node)",
        charge: Charge::flat(0),
    },
    Import {
        name: "block_height",
        params: &[],
        results: &[I64],
        doc: "the block's height",
        charge: Charge::flat(0),
    },
    Import {
        name: "has_auth",
        params: &[I64],
        results: &[I32],
        doc: "1 if account authorizes this action (require_auth without aborting), else 0",
        charge: Charge::flat(0),
    },
    Import {
        name: "is_account",
        params: &[I64],
        results: &[I32],
        doc: "1 if the account exists, else 0",
        charge: Charge::flat(FUEL_PER_KEY_READ),
    },
    Import {
        name: "db_next",
        params: &[I32, I32, I32, I32, I32, I32, I32, I32, I32],
        results: &[I64],
        doc: "the first key of this contract's namespace between bounds lo and hi (flags: NEXT_*), copied to key_dst and its value to val_dst; returns key length << 32 | value length, or -1 if none",
        charge: Charge {
            per_input_byte: FUEL_PER_BYTE,
            per_output_byte: FUEL_PER_BYTE,
            ..Charge::flat(FUEL_PER_KEY_SEEK)
        },
    },
];

/// `db_next` flags: walk backward, from `hi` down (the last key of the range).
pub const NEXT_BACKWARD: i32 = 1;
/// `db_next` flags: the lower bound `lo` is exclusive (a forward walk passes its last key).
pub const NEXT_LO_EXCLUSIVE: i32 = 2;
/// `db_next` flags: the upper bound `hi` is inclusive.
pub const NEXT_HI_INCLUSIVE: i32 = 4;
/// `db_next` flags: no upper bound: `hi` is ignored, and the range runs to the namespace's
/// end. (An empty inclusive `lo` is already no lower bound: the empty key sorts first.)
pub const NEXT_HI_OPEN: i32 = 8;
/// Every `db_next` flag: any other bit set aborts the call, so that later flags cannot change
/// what an old contract's call means.
pub const NEXT_FLAGS: i32 = NEXT_BACKWARD | NEXT_LO_EXCLUSIVE | NEXT_HI_INCLUSIVE | NEXT_HI_OPEN;

/// Looks up an import of ABI v1 by name.
pub fn import(name: &str) -> Option<&'static Import> {
    IMPORTS.iter().find(|i| i.name == name)
}

/// The charge of import `name`, at compile time: `const LOAD: Charge = abi::charge("load");`.
///
/// # Panics
/// At compile time, if ABI v1 has no such import.
pub const fn charge(name: &str) -> Charge {
    let mut i = 0;
    while i < IMPORTS.len() {
        if eq(IMPORTS[i].name.as_bytes(), name.as_bytes()) {
            return IMPORTS[i].charge;
        }
        i += 1;
    }
    panic!("no such import in ABI v1")
}

const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
