//! What running an action produced.

use tally_host_api::Abort;

use crate::trace::TrapTrace;

/// How an action ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It returned normally; its writes stand.
    Success,
    /// It aborted (assert, trap, out of fuel, bad pointer…); the caller must discard its writes.
    Failure(Abort),
}

impl Outcome {
    /// Whether it succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success)
    }

    /// Why it failed, if it did.
    pub fn failure(&self) -> Option<&Abort> {
        match self {
            Outcome::Success => None,
            Outcome::Failure(abort) => Some(abort),
        }
    }
}

/// The result of one action. Its outcome and fuel are deterministic; its console and trace
/// are diagnostics for authors, which nothing hashed or stored may include.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// How it ended.
    pub outcome: Outcome,
    /// Fuel it consumed, including host-call charges.
    pub fuel_used: u64,
    /// What it printed (at most `limits::MAX_CONSOLE_LEN` bytes).
    pub console: Vec<u8>,
    /// Its return data (`set_return`): what a caller or a query reads. Empty when it failed.
    pub output: Vec<u8>,
    /// Where the contract stopped, when it failed inside wasm and the runtime traces
    /// ([`RuntimeConfig::trace`](crate::RuntimeConfig::trace)); `None` otherwise. Not
    /// consensus data: it depends on the node's settings.
    pub trace: Option<Box<TrapTrace>>,
}

impl Receipt {
    /// A success that used `fuel_used` and printed nothing.
    pub fn success(fuel_used: u64) -> Self {
        Self {
            outcome: Outcome::Success,
            fuel_used,
            console: Vec::new(),
            output: Vec::new(),
            trace: None,
        }
    }

    /// A failure for `abort` that used `fuel_used` and printed nothing.
    pub fn failed(abort: Abort, fuel_used: u64) -> Self {
        Self {
            outcome: Outcome::Failure(abort),
            fuel_used,
            console: Vec::new(),
            output: Vec::new(),
            trace: None,
        }
    }

    /// Whether the action succeeded.
    pub fn is_success(&self) -> bool {
        self.outcome.is_success()
    }

    /// Why the action failed, if it did.
    pub fn failure(&self) -> Option<&Abort> {
        self.outcome.failure()
    }
}
