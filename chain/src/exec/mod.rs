//! The one action runner: a transaction's actions against a [`Journal`], by the system
//! contract, a wasm contract or a native replacement. In-order execution runs it over the
//! block's journal; speculation (`speculate`) runs the very same code over a journal of its
//! own that records what it read.

pub mod code;
pub(crate) mod host;
pub mod journal;
mod key_order;
mod overlay_order;
mod query;
pub(crate) mod speculate;
pub mod system;

use tally_host_api::limits::MAX_CONTRACTS_PER_TX;
use tally_host_api::{Abort, AbortCode, BlockInfo, HostError, Name};
use tally_runtime::{Budget, CodeHash, Contract, Entry, Outcome, Receipt, Runtime};

use crate::error::{ChainError, TxError};
use crate::fee::{self, Dimension, Fee, Prices, Usage};
use crate::receipt::{ActionTrace, CallTrace, Event};
use crate::state::keys;
use crate::store::StateStore;
use crate::tx::Action;
use code::{CodeMap, Executor, NativeContract};
use host::{ActionHost, CallStack, Frame};
use journal::Journal;
use system::SYSTEM;

/// Where an action's executor comes from.
pub(crate) enum Code<'a> {
    /// The chain's code map, which loads (and compiles, if need be) what it does not hold.
    Load(&'a mut CodeMap),
    /// A code map shared by speculative runs, read only: an account it does not hold ends the
    /// run (the transaction then runs in order, where its code is loaded).
    Cached(&'a CodeMap),
}

impl Code<'_> {
    /// The code map, to read.
    pub(crate) fn map(&self) -> &CodeMap {
        match self {
            Code::Load(map) => map,
            Code::Cached(map) => map,
        }
    }
}

/// What running actions borrows from the chain.
pub(crate) struct Exec<'a> {
    pub(crate) runtime: &'a Runtime,
    pub(crate) store: &'a dyn StateStore,
    pub(crate) journal: &'a mut Journal,
    pub(crate) code: Code<'a>,
    /// Scratch space for state keys.
    pub(crate) key: &'a mut Vec<u8>,
    /// The block the actions run in, which contracts may read.
    pub(crate) block: BlockInfo,
    /// The contracts on the running action's call stack.
    pub(crate) stack: CallStack,
    /// The contracts the running transaction has entered.
    entered: Entered,
    /// The running action's call tree, when the runtime traces.
    pub(crate) calls: Option<Vec<CallTrace>>,
}

/// The code of each contract a transaction entered, in order: at most
/// [`MAX_CONTRACTS_PER_TX`]. A fixed array, so a transaction allocates nothing for it.
#[derive(Debug, Default)]
struct Entered {
    hashes: [CodeHash; MAX_CONTRACTS_PER_TX as usize],
    len: usize,
}

impl Entered {
    /// What entering `contract` costs the transaction up front: nothing for code it entered
    /// already, or for the first code it enters; a fresh instance of it for any other (the
    /// runtime keeps twice [`MAX_CONTRACTS_PER_TX`] instances warm, so a transaction never
    /// needs more fresh instances than it pays for). Entering more than
    /// [`MAX_CONTRACTS_PER_TX`] contracts fails.
    fn enter(&mut self, contract: &Contract) -> Result<u64, Abort> {
        let hash = contract.code_hash();
        if self.hashes[..self.len].contains(hash) {
            return Ok(0);
        }
        if self.len == self.hashes.len() {
            return Err(Abort::new(
                AbortCode::LimitExceeded,
                format!("a transaction may enter at most {MAX_CONTRACTS_PER_TX} contracts"),
            ));
        }
        self.hashes[self.len] = *hash;
        self.len += 1;
        // A module that cannot reuse instances pays for a fresh one on every entry already.
        Ok(match self.len > 1 && contract.reuses_instances() {
            true => contract.fresh_instance_fuel(),
            false => 0,
        })
    }
}

impl<'a> Exec<'a> {
    /// An executor over `journal`, for actions of the block `block`.
    pub(crate) fn new(
        runtime: &'a Runtime,
        store: &'a dyn StateStore,
        journal: &'a mut Journal,
        code: Code<'a>,
        key: &'a mut Vec<u8>,
        block: BlockInfo,
    ) -> Self {
        Self {
            runtime,
            store,
            journal,
            code,
            key,
            block,
            stack: CallStack::default(),
            entered: Entered::default(),
            calls: None,
        }
    }
}

/// What a transaction's actions did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxRun {
    /// Success, or why the failing action failed (its transaction's writes were discarded).
    pub(crate) outcome: Outcome,
    /// The index of the failing action.
    pub(crate) failed_action: Option<usize>,
    /// Fuel its actions used.
    pub(crate) fuel_used: u64,
    /// Fuel the last action that ran used: with `fuel_used`, what each action had left.
    pub(crate) last_action_fuel: u64,
    /// The events its actions emitted, in order (none if it failed).
    pub(crate) events: Vec<Event>,
    /// What its actions printed, in order.
    pub(crate) console: Vec<u8>,
    /// Each action's fuel, console and trap, when the runtime traces.
    pub(crate) actions: Option<Vec<ActionTrace>>,
    /// What it used of each dimension, its intrinsic charge and size included.
    pub(crate) usage: Usage,
    /// What it pays for that.
    pub(crate) fee: Fee,
}

/// What a transaction's fee depends on besides what its actions do: the block's prices, its
/// offer, its size and its intrinsic fuel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FeeTerms {
    pub(crate) prices: Prices,
    pub(crate) max_fee: u64,
    pub(crate) tip: u64,
    pub(crate) bytes: u64,
    pub(crate) intrinsic_fuel: u64,
}

impl FeeTerms {
    /// What the transaction costs before any action runs: its bytes and intrinsic fuel.
    fn intrinsic_fee(&self) -> u64 {
        let mut usage = Usage::default();
        usage.0[Dimension::Bandwidth as usize] = self.bytes;
        usage.0[Dimension::Compute as usize] = self.intrinsic_fuel;
        fee::base_fee(&self.prices, &usage)
    }

    /// Refuses a transaction whose max fee cannot pay for its own size and intrinsic fuel.
    pub(crate) fn check(&self) -> Result<(), TxError> {
        let needed = self.intrinsic_fee();
        match needed <= self.max_fee {
            true => Ok(()),
            false => Err(TxError::MaxFeeTooLow {
                needed,
                max_fee: self.max_fee,
            }),
        }
    }

    /// What the max fee leaves once the transaction's size, intrinsic fuel and tip are paid:
    /// what its fuel may cost, and, apart, what its reads and writes may.
    pub(crate) fn budget(&self) -> u64 {
        self.max_fee
            .saturating_sub(self.intrinsic_fee())
            .saturating_sub(self.tip)
    }

    /// The most fuel the transaction's actions may burn: what its max fee buys at the compute
    /// price once its intrinsic cost and its tip are set aside, so a spinning transaction
    /// stops when its fee runs out, not after (unbounded when compute is free).
    pub(crate) fn fuel_cap(&self) -> u64 {
        let price = self.prices[Dimension::Compute as usize];
        if price == 0 {
            return u64::MAX;
        }
        // In 64 bits when the product fits, as `fee::unscale` does: the same quotient
        // without a call to `__udivti3`.
        let budget = self.budget();
        match budget.checked_mul(fee::PRICE_SCALE) {
            Some(scaled) => scaled / price,
            None => {
                u64::try_from(u128::from(budget) * u128::from(fee::PRICE_SCALE) / u128::from(price))
                    .unwrap_or(u64::MAX)
            }
        }
    }
}

impl TxRun {
    fn new(traced: bool) -> Self {
        Self {
            outcome: Outcome::Success,
            failed_action: None,
            fuel_used: 0,
            last_action_fuel: 0,
            events: Vec::new(),
            console: Vec::new(),
            actions: traced.then(Vec::new),
            usage: Usage::default(),
            fee: Fee::default(),
        }
    }

    /// Adds action `index`'s receipt; `false` if it failed (the transaction stops there).
    /// `calls` are the calls it made, when the runtime traces.
    fn push(&mut self, index: usize, receipt: Receipt, calls: Vec<CallTrace>) -> bool {
        self.fuel_used += receipt.fuel_used;
        self.last_action_fuel = receipt.fuel_used;
        self.console.extend_from_slice(&receipt.console);
        if let Some(actions) = &mut self.actions {
            actions.push(ActionTrace {
                fuel_used: receipt.fuel_used,
                console: receipt.console,
                trap: receipt.trace,
                calls,
            });
        }
        match receipt.outcome {
            Outcome::Success => true,
            Outcome::Failure(abort) => {
                self.outcome = Outcome::Failure(abort);
                self.failed_action = Some(index);
                false
            }
        }
    }
}

impl Exec<'_> {
    /// Runs `actions` as one transaction with at most `fuel` for all of them (each also within
    /// the runtime's fuel per action): all their writes stay, or, if one fails, none.
    /// A contract failure is an `Ok` run with a failed outcome; `Err` is the node's own fault,
    /// and the transaction's writes are then discarded too.
    ///
    /// The transaction's usage and fee are computed here, from `terms` and what the journal
    /// counted, before its writes are kept or dropped: one whose fee at the block's prices
    /// exceeds its max fee fails after its last action, its writes dropped, and pays its max.
    pub(crate) fn run_tx(
        &mut self,
        actions: &[Action],
        fuel: u64,
        terms: &FeeTerms,
    ) -> Result<TxRun, ChainError> {
        self.journal.checkpoint();
        self.journal.set_fee_budget(&terms.prices, terms.budget());
        // Forgets what an earlier transaction entered, without zeroing the array again.
        self.entered.len = 0;
        let mut run = TxRun::new(self.runtime.traces());
        self.calls = self.runtime.traces().then(Vec::new);
        for (index, action) in actions.iter().enumerate() {
            let receipt = match self.run_action(action, fuel - run.fuel_used) {
                Ok(receipt) => receipt,
                Err(e) => {
                    self.journal.discard_tx();
                    return Err(e);
                }
            };
            let calls = self.calls.as_mut().map(std::mem::take).unwrap_or_default();
            if !run.push(index, receipt, calls) {
                break;
            }
        }
        let fuel = terms.intrinsic_fuel.saturating_add(run.fuel_used);
        let kept = Usage::of_tx(terms.bytes, fuel, &self.journal.counts());
        let (fee, exceeded) = fee::charge(&terms.prices, &kept, terms.tip, terms.max_fee);
        if exceeded && run.failed_action.is_none() {
            run.outcome = Outcome::Failure(Abort::new(
                AbortCode::LimitExceeded,
                format!(
                    "the fee at this block's prices, {}, exceeds the max fee {}",
                    fee::base_fee(&terms.prices, &kept),
                    terms.max_fee
                ),
            ));
            run.failed_action = Some(actions.len() - 1);
        }
        (run.usage, run.fee) = match run.failed_action {
            None => (kept, fee),
            // Its writes are dropped: it allocated and wrote nothing, and pays for what it
            // used of the rest. (Otherwise a flood whose fee outgrew its max fee would go on
            // filling the allocate dimension, and raising its price, for a capped fee.)
            Some(_) => {
                let mut dropped = kept;
                dropped.0[Dimension::Allocate as usize] = 0;
                dropped.0[Dimension::Write as usize] = 0;
                let (fee, _) = fee::charge(&terms.prices, &dropped, terms.tip, terms.max_fee);
                (dropped, fee)
            }
        };
        match run.failed_action {
            None => {
                run.events = self.journal.take_events();
                self.journal.commit_tx();
            }
            Some(_) => self.journal.discard_tx(),
        }
        Ok(run)
    }

    /// Runs `action` with at most `fuel`. A contract failure is an `Ok` failed receipt; `Err`
    /// is the node's own fault.
    pub(crate) fn run_action(&mut self, action: &Action, fuel: u64) -> Result<Receipt, ChainError> {
        if action.account == SYSTEM {
            return system::apply(self, action, fuel);
        }
        let Some(executor) = self.executor(action.account)? else {
            return Ok(Receipt::failed(
                Abort::new(
                    AbortCode::NoHandler,
                    format!("account {} has no contract", action.account),
                ),
                0,
            ));
        };
        let entry = Entry::Action {
            receiver: action.account,
            code: action.account,
            action: action.name,
        };
        let frame = Frame::top(action.account, &action.data, &action.authorization);
        self.stack.push(action.account);
        let receipt = self.run_frame(&executor, frame, entry, fuel, 0);
        self.stack.pop();
        receipt
    }

    /// Runs `entry` of `executor` in `frame`, with at most `fuel`, its deterministic stack
    /// starting at `stack_base`: a top-level action and a call alike.
    pub(crate) fn run_frame(
        &mut self,
        executor: &Executor,
        frame: Frame<'_>,
        entry: Entry,
        fuel: u64,
        stack_base: u32,
    ) -> Result<Receipt, ChainError> {
        match executor {
            Executor::Wasm(contract) => {
                let entry_fee = match self.entered.enter(contract) {
                    Ok(fee) => fee,
                    Err(abort) => return Ok(Receipt::failed(abort, 0)),
                };
                let budget = Budget {
                    fuel,
                    entry_fee,
                    stack_base,
                };
                let runtime = self.runtime;
                let mut host = ActionHost { exec: self, frame };
                Ok(runtime.execute_call(contract, entry, &mut host, budget)?)
            }
            Executor::Native(native) => self.run_native(native, frame),
        }
    }

    /// The executor of `account`. The code an action runs is part of what it read: a
    /// speculative run that used code a transaction before it replaced is run again.
    fn executor(&mut self, account: Name) -> Result<Option<Executor>, ChainError> {
        match &mut self.code {
            Code::Load(code) => code.get(account, self.journal, self.store, self.runtime),
            Code::Cached(code) => {
                self.journal.note_read(&keys::code_hash(account));
                code.cached(account, self.journal)
                    .map(Some)
                    .ok_or(ChainError::NotSpeculable("the contract is not loaded"))
            }
        }
    }

    /// Runs `entry` of `contract` as a top-level run of `account`'s code authorized by
    /// `account` itself: its `onInit` or `migrate` when `setcode` installs it.
    pub(crate) fn run_wasm(
        &mut self,
        contract: &Contract,
        account: Name,
        entry: Entry,
        fuel: u64,
    ) -> Result<Receipt, ChainError> {
        let authorization = [account];
        let frame = Frame::top(account, &[], &authorization);
        let runtime = self.runtime;
        self.stack.push(account);
        let mut host = ActionHost { exec: self, frame };
        let budget = Budget {
            fuel,
            entry_fee: 0,
            stack_base: 0,
        };
        let receipt = runtime.execute_call(contract, entry, &mut host, budget);
        self.stack.pop();
        Ok(receipt?)
    }

    fn run_native(
        &mut self,
        native: &NativeContract,
        frame: Frame<'_>,
    ) -> Result<Receipt, ChainError> {
        let mut host = ActionHost { exec: self, frame };
        match native(&mut host) {
            Ok(()) => Ok(Receipt::success(0)),
            Err(HostError::Abort(abort)) => Ok(Receipt::failed(abort, 0)),
            Err(HostError::Fault(fault)) => Err(ChainError::Runtime(fault.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuel_cap_is_the_128_bit_quotient_whether_or_not_it_fits_in_64_bits() {
        let compute = Dimension::Compute as usize;
        for price in [1, 7, fee::PRICE_SCALE, u64::MAX] {
            for max_fee in [
                0,
                1,
                12_345,
                u64::MAX / fee::PRICE_SCALE,
                u64::MAX / 2,
                u64::MAX,
            ] {
                let mut prices = Prices::default();
                prices[compute] = price;
                let terms = FeeTerms {
                    prices,
                    max_fee,
                    tip: 0,
                    bytes: 0,
                    intrinsic_fuel: 0,
                };
                let reference = u64::try_from(
                    u128::from(terms.budget()) * u128::from(fee::PRICE_SCALE) / u128::from(price),
                )
                .unwrap_or(u64::MAX);
                assert_eq!(
                    terms.fuel_cap(),
                    reference,
                    "price {price}, max fee {max_fee}"
                );
            }
        }
    }
}
