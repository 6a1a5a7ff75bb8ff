//! Why an action aborts: stable codes that cross the ABI and enter receipts.
//!
//! The numeric codes are part of consensus (receipts are hashed), so they never change; new
//! reasons get new numbers. Messages are built only from deterministic inputs (the contract's
//! own `assert` text, limits, names), never from an engine's error text.

use alloc::boxed::Box;
use alloc::string::String;
use core::fmt;

/// Why an action failed. The discriminant is the stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum AbortCode {
    /// The contract called `assert` with a false condition.
    AssertFailed = 1,
    /// A pointer/length pair fell outside the contract's linear memory.
    BadPointer = 2,
    /// A key, value, message or console write exceeded its limit in [`crate::limits`].
    LimitExceeded = 3,
    /// `require_auth` named an account that did not authorize the transaction.
    Unauthorized = 4,
    /// The action used all its fuel.
    OutOfFuel = 5,
    /// The WebAssembly code trapped (division by zero, `unreachable`, out-of-bounds access…).
    Trap = 6,
    /// The call stack overflowed (runaway recursion).
    StackOverflow = 7,
    /// The contract has no handler for this action.
    NoHandler = 8,
    /// Memory could not be grown or a resource limit was hit while instantiating.
    ResourceLimit = 9,
    /// A native (system) action was given invalid data or could not apply it.
    InvalidAction = 10,
    /// A call named a contract that is already on the call stack: contracts are never
    /// re-entered mid-action.
    Reentry = 11,
    /// A call would make the call stack deeper than [`crate::limits::MAX_CALL_DEPTH`].
    CallDepth = 12,
    /// A query (a static call) tried to write, emit an event or make a non-static call.
    ReadOnly = 13,
}

impl AbortCode {
    /// The stable numeric code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The reason whose stable code is `code`, for clients that read a code back from a
    /// node's results (`tally push --rpc`, `tally tx`); `None` for a code this version does not
    /// know.
    pub fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            1 => Self::AssertFailed,
            2 => Self::BadPointer,
            3 => Self::LimitExceeded,
            4 => Self::Unauthorized,
            5 => Self::OutOfFuel,
            6 => Self::Trap,
            7 => Self::StackOverflow,
            8 => Self::NoHandler,
            9 => Self::ResourceLimit,
            10 => Self::InvalidAction,
            11 => Self::Reentry,
            12 => Self::CallDepth,
            13 => Self::ReadOnly,
            _ => return None,
        })
    }

    /// A short, stable, lower-case label.
    pub fn label(self) -> &'static str {
        match self {
            Self::AssertFailed => "assert failed",
            Self::BadPointer => "bad pointer",
            Self::LimitExceeded => "limit exceeded",
            Self::Unauthorized => "unauthorized",
            Self::OutOfFuel => "out of fuel",
            Self::Trap => "trap",
            Self::StackOverflow => "stack overflow",
            Self::NoHandler => "no handler",
            Self::ResourceLimit => "resource limit",
            Self::InvalidAction => "invalid action",
            Self::Reentry => "reentry",
            Self::CallDepth => "call depth",
            Self::ReadOnly => "read only",
        }
    }
}

impl fmt::Display for AbortCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// An aborted action: a code and a deterministic message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Abort {
    /// Why.
    pub code: AbortCode,
    /// Detail for a person: the contract's `assert` text, or which argument and limit.
    pub message: String,
}

impl Abort {
    /// An abort with a message.
    pub fn new(code: AbortCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The abort of an action that ran out of its `fuel`: the one out-of-fuel message, for
    /// the runtime and the chain alike.
    pub fn out_of_fuel(fuel: u64) -> Self {
        Self::new(
            AbortCode::OutOfFuel,
            alloc::format!("the action used all of its {fuel} fuel"),
        )
    }
}

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

impl core::error::Error for Abort {}

/// A fault of the node itself, met while serving a host call: a store read that failed, state
/// that is corrupt. It is not the contract's doing, so it never becomes a receipt: the runtime
/// returns it as an error and the node aborts the block.
#[derive(Debug)]
pub struct NodeFault(pub Box<dyn core::error::Error + Send + Sync>);

impl NodeFault {
    /// Wraps the node's own error.
    pub fn new(error: impl core::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }
}

impl fmt::Display for NodeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node fault during a host call: {}", self.0)
    }
}

impl core::error::Error for NodeFault {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// Why a [`crate::Host`] call did not complete.
#[derive(Debug)]
pub enum HostError {
    /// The action fails with this reason; its transaction is rolled back and the block goes on.
    Abort(Abort),
    /// The node failed; the block must not be committed.
    Fault(NodeFault),
}

impl From<Abort> for HostError {
    fn from(abort: Abort) -> Self {
        Self::Abort(abort)
    }
}

impl From<NodeFault> for HostError {
    fn from(fault: NodeFault) -> Self {
        Self::Fault(fault)
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Abort(abort) => abort.fmt(f),
            Self::Fault(fault) => fault.fmt(f),
        }
    }
}

impl core::error::Error for HostError {}

#[cfg(test)]
mod code_tests {
    use super::AbortCode;

    #[test]
    fn from_code_reads_back_every_code_and_refuses_unknown_ones() {
        let mut known = 0;
        for code in 0..=u16::from(u8::MAX) {
            if let Some(reason) = AbortCode::from_code(code) {
                assert_eq!(reason.code(), code);
                known += 1;
            }
        }
        assert_eq!(known, 13, "a new AbortCode needs its arm in from_code");
        assert_eq!(AbortCode::from_code(0), None);
    }
}
