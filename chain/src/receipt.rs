//! What a block did with each transaction: receipts for included ones, the rejection of the
//! others, per-action traces for authors, and the executed block they come in.

use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::{Abort, Name};
use tally_runtime::{Outcome, TrapTrace};

use crate::block::BlockHeader;
use crate::error::TxError;
use crate::tx::TxId;

/// What happened to an included transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxReceipt {
    /// Its id.
    pub id: TxId,
    /// Success, or why it failed (its writes were then discarded).
    pub outcome: Outcome,
    /// The index of the failing action, if one failed.
    pub failed_action: Option<usize>,
    /// Fuel it used: its intrinsic charge and all its actions'.
    pub fuel_used: u64,
    /// What it used of each fee dimension ([`crate::fee::Dimension`]), whether it
    /// succeeded or not.
    pub usage: crate::fee::Usage,
    /// What its payer paid for that (charged whether it succeeded or not).
    pub fee: crate::fee::Fee,
    /// The events its actions emitted, in order (none if it failed). The block body commits
    /// to them, so the transactions root covers them.
    pub events: Vec<Event>,
    /// What its actions printed, in order (for authors; never part of consensus data).
    pub console: Vec<u8>,
    /// Each action's fuel, console and trap location, when the chain's runtime traces
    /// ([`RuntimeConfig::trace`](tally_runtime::RuntimeConfig::trace)); `None` otherwise.
    /// Like the console, a diagnostic for authors: never hashed, stored or replicated.
    pub trace: Option<TxTrace>,
}

/// An event a contract emitted (docs/CONTRACTS.md): its name and borsh data, as declared in
/// the contract's ABI, and the contract that emitted it.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Event {
    /// The contract that emitted it.
    pub contract: Name,
    /// The event's name.
    pub name: Name,
    /// Its data (at most `MAX_EVENT_LEN` bytes).
    pub data: Vec<u8>,
}

/// What each action of a transaction did, for authors (see [`TxReceipt::trace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxTrace {
    /// Fuel the transaction paid before any action ran (for its size).
    pub intrinsic_fuel: u64,
    /// One entry per action that ran, in order: all of them, or up to the one that failed.
    pub actions: Vec<ActionTrace>,
}

/// One action's part of a [`TxTrace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionTrace {
    /// Fuel it used.
    pub fuel_used: u64,
    /// What it printed.
    pub console: Vec<u8>,
    /// Where in its contract it stopped, if it failed inside wasm.
    pub trap: Option<Box<TrapTrace>>,
    /// The calls and queries it made, and theirs, in the order they began.
    pub calls: Vec<CallTrace>,
}

/// One call or query an action made (or a callee of it), for authors: the call tree of a
/// traced receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTrace {
    /// 1 for a call the action made, 2 for one its callee made, and so on.
    pub depth: u32,
    /// The contract called.
    pub contract: Name,
    /// The action or query method.
    pub entry: Name,
    /// Whether it was a query.
    pub query: bool,
    /// Fuel it used, its callees' included.
    pub fuel_used: u64,
    /// Why it failed, if it did (its writes and events were rolled back).
    pub failure: Option<Abort>,
    /// Events that stood of those emitted while it ran, its callees' included.
    pub events: usize,
    /// What it printed.
    pub console: Vec<u8>,
}

impl TxReceipt {
    /// Whether all its actions succeeded.
    pub fn is_success(&self) -> bool {
        self.outcome.is_success()
    }

    /// Why it failed, if it did.
    pub fn failure(&self) -> Option<&Abort> {
        self.outcome.failure()
    }

    /// Fuel each action used, in order, when traced (see [`TxReceipt::trace`]).
    pub fn action_fuel(&self) -> Option<Vec<u64>> {
        let trace = self.trace.as_ref()?;
        Some(trace.actions.iter().map(|a| a.fuel_used).collect())
    }

    /// Where the failed action stopped in its contract, when traced.
    pub fn trap(&self) -> Option<&TrapTrace> {
        self.failed_action?;
        self.trace.as_ref()?.actions.last()?.trap.as_deref()
    }

    /// What the actions printed, as text (invalid UTF-8 replaced).
    pub fn console_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.console)
    }

    /// A report for a person: the outcome, the failed action and where it stopped, each
    /// action's fuel and what it printed (per action when traced). What `tally push --trace`
    /// prints and what the test harness shows when a receipt is not what a test expected.
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        match (&self.outcome, self.failed_action) {
            (Outcome::Success, _) => out.push_str("success"),
            (Outcome::Failure(abort), Some(i)) => {
                let _ = write!(out, "failed in action {i}: {abort}");
            }
            (Outcome::Failure(abort), None) => {
                let _ = write!(out, "failed: {abort}");
            }
        }
        let _ = writeln!(out, " ({} fuel)", self.fuel_used);
        let Some(trace) = &self.trace else {
            if !self.console.is_empty() {
                let _ = writeln!(out, "console:\n{}", indent(&self.console_text()));
            }
            return out;
        };
        let _ = writeln!(out, "  transaction itself: {} fuel", trace.intrinsic_fuel);
        for (i, action) in trace.actions.iter().enumerate() {
            let _ = writeln!(out, "  action {i}: {} fuel", action.fuel_used);
            if let Some(trap) = &action.trap {
                let _ = writeln!(out, "    stopped in {}", display_or(trap.innermost()));
                for (depth, frame) in trap.frames.iter().enumerate().skip(1) {
                    let _ = writeln!(out, "      {depth}: called from {frame}");
                }
            }
            if !action.console.is_empty() {
                let text = String::from_utf8_lossy(&action.console);
                let _ = writeln!(out, "    console:\n{}", indent(&indent(&text)));
            }
            for call in &action.calls {
                let pad = "  ".repeat(call.depth as usize + 1);
                let kind = if call.query { "query" } else { "call" };
                let _ = write!(
                    out,
                    "  {pad}{kind} {}::{} ({} fuel",
                    call.contract, call.entry, call.fuel_used
                );
                if call.events > 0 {
                    let _ = write!(out, ", {} events", call.events);
                }
                match &call.failure {
                    None => out.push_str(")\n"),
                    Some(abort) => {
                        let _ = writeln!(out, ") failed: {abort}");
                    }
                }
                if !call.console.is_empty() {
                    let text = String::from_utf8_lossy(&call.console);
                    let _ = writeln!(out, "  {pad}  console: {}", text.trim_end());
                }
            }
        }
        out
    }
}

/// `text` with every line indented by four spaces.
fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn display_or(frame: Option<&tally_runtime::TraceFrame>) -> String {
    frame.map_or_else(|| "an unknown frame".to_string(), ToString::to_string)
}

/// What a block did with one of the transactions it was given.
// Unboxed: a block's results are one Vec written once per transaction, and boxing the
// receipt (264 bytes with its fee) would add an allocation per transaction to the block path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxResult {
    /// Included in the block, successful or not.
    Included(TxReceipt),
    /// Not included: it could not be valid in this block. It changed nothing.
    Rejected(TxError),
}

impl TxResult {
    /// The receipt of an included transaction.
    pub fn receipt(&self) -> Option<&TxReceipt> {
        match self {
            Self::Included(receipt) => Some(receipt),
            Self::Rejected(_) => None,
        }
    }

    /// Whether it was included and succeeded.
    pub fn is_success(&self) -> bool {
        self.receipt().is_some_and(TxReceipt::is_success)
    }
}

/// A block that [`Chain::execute_block`](crate::Chain::execute_block) ran: its header and one result per transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutedBlock {
    /// The header, with the new state checksum.
    pub header: BlockHeader,
    /// One result per transaction given, in order.
    pub results: Vec<TxResult>,
    /// Transactions run speculatively in parallel (0 when the block ran sequentially).
    pub speculated: u32,
    /// Of those, how many were finalized from their speculative run, needing no re-execution.
    pub confirmed: u32,
}
