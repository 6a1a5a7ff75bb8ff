//! Optimistic parallel execution: every transaction of a block runs speculatively, on all
//! cores, against the state the block started from, recording the keys it read and the writes
//! it would make. The block is then finalized in order on one thread: a transaction none of
//! whose reads was written by an earlier transaction of the block would have read exactly the
//! same values had it run in order, so its recorded writes and receipt are the ones sequential
//! execution gives, and they are applied as they are; any other transaction runs again, in
//! order, on the usual path. The head is therefore identical to sequential execution's, for
//! any thread count (tested, hostile contracts included).
//!
//! Two kinds of work never run speculatively: system actions (`newaccount`, `setcode`), which
//! change accounts and code, and anything whose fuel limit depends on how much of the block's
//! fuel earlier transactions used (checked when it is finalized).

use std::borrow::Cow;

use rayon::prelude::*;
use tally_host_api::limits::FUEL_PER_ACTION;
use tally_host_api::{Abort, AbortCode, Host, HostError, Name, NodeFault};
use tally_runtime::{Entry, Outcome, Runtime};

use crate::KeyedMap;
use crate::code::Executor;
use crate::error::ChainError;
use crate::execute::failure;
use crate::journal::count_write;
use crate::pipeline::{Check, PreparedTx};
use crate::state::{StateStore, keys};
use crate::system::SYSTEM;
use crate::tx::Action;

/// What one transaction did when run against the block's starting state.
pub(crate) struct Speculation {
    /// Every state key whose value it depended on (each action's code hash included).
    pub(crate) reads: Vec<Vec<u8>>,
    /// Its writes, newest value per key, to apply if it succeeded.
    pub(crate) writes: KeyedMap<Vec<u8>, Option<Vec<u8>>>,
    /// Fuel each action used, in order, up to the failing one.
    pub(crate) action_fuel: Vec<u64>,
    /// Success, or why it failed.
    pub(crate) outcome: Outcome,
    /// The failing action's index.
    pub(crate) failed_action: Option<usize>,
    /// What its actions printed.
    pub(crate) console: Vec<u8>,
}

/// The executors a block's speculative runs use, resolved once before they start.
pub(crate) type Executors = KeyedMap<Name, Option<Executor>>;

/// Whether `tx` may run speculatively: it is admitted and calls no system action.
pub(crate) fn speculable(tx: &PreparedTx) -> bool {
    !matches!(tx.check, Check::Refused(_))
        && tx
            .tx
            .transaction
            .actions
            .iter()
            .all(|a| a.account != SYSTEM)
}

/// Runs every speculable transaction of `txs` against `store` on all cores; `None` for the
/// others, and for any whose run met an error. Speculation only saves time, so an error in it
/// is no verdict: the instance pool or memory running out while every core runs an action at
/// once is this node's limit, not the block's fault, and a store that failed fails again when
/// the transaction runs on the sequential path, which reports it there. A block therefore
/// executes on any core count.
pub(crate) fn speculate(
    runtime: &Runtime,
    store: &dyn StateStore,
    executors: &Executors,
    txs: &[PreparedTx],
) -> Vec<Option<Speculation>> {
    txs.par_iter()
        .map(|tx| {
            speculable(tx)
                .then(|| run(runtime, store, executors, &tx.tx.transaction.actions).ok())
                .flatten()
        })
        .collect()
}

/// One transaction's actions, as `Env::run_action` would run them with a full block budget.
fn run(
    runtime: &Runtime,
    store: &dyn StateStore,
    executors: &Executors,
    actions: &[Action],
) -> Result<Speculation, ChainError> {
    let mut spec = Speculation {
        reads: Vec::new(),
        writes: KeyedMap::default(),
        action_fuel: Vec::with_capacity(actions.len()),
        outcome: Outcome::Success,
        failed_action: None,
        console: Vec::new(),
    };
    let mut writes_made = 0u32;
    let mut bytes_written = 0u64;
    let mut key = Vec::with_capacity(64);
    for (i, action) in actions.iter().enumerate() {
        // The code that runs is part of what the transaction read.
        spec.reads.push(keys::code_hash(action.account));
        let receipt = match executors.get(&action.account).cloned().flatten() {
            None => failure(
                Abort::new(
                    AbortCode::NoHandler,
                    format!("account {} has no contract", action.account),
                ),
                0,
            ),
            Some(executor) => {
                let mut host = SpecHost {
                    contract: action.account,
                    action,
                    store,
                    spec: &mut spec,
                    writes_made: &mut writes_made,
                    bytes_written: &mut bytes_written,
                    key: &mut key,
                    owned: Vec::new(),
                };
                match executor {
                    Executor::Wasm(contract) => {
                        let entry = Entry::Action {
                            receiver: action.account,
                            code: action.account,
                            action: action.name,
                        };
                        runtime.execute_metered(&contract, entry, &mut host, FUEL_PER_ACTION)?
                    }
                    Executor::Native(native) => match native(&mut host) {
                        Ok(()) => tally_runtime::Receipt {
                            outcome: Outcome::Success,
                            fuel_used: 0,
                            console: Vec::new(),
                            trace: None,
                        },
                        Err(HostError::Abort(abort)) => failure(abort, 0),
                        Err(HostError::Fault(fault)) => {
                            return Err(ChainError::Runtime(fault.into()));
                        }
                    },
                }
            }
        };
        spec.action_fuel.push(receipt.fuel_used);
        spec.console.extend_from_slice(&receipt.console);
        if let Outcome::Failure(abort) = receipt.outcome {
            spec.outcome = Outcome::Failure(abort);
            spec.failed_action = Some(i);
            spec.writes.clear();
            break;
        }
    }
    Ok(spec)
}

/// The host of a speculative action: the transaction's own writes over the block's starting
/// state, recording every key read from that state.
struct SpecHost<'a> {
    contract: Name,
    action: &'a Action,
    store: &'a dyn StateStore,
    spec: &'a mut Speculation,
    /// Counted as `Journal::set` counts them, so the limits bite exactly as they would.
    writes_made: &'a mut u32,
    bytes_written: &'a mut u64,
    key: &'a mut Vec<u8>,
    /// Values read from a store that hands out owned bytes.
    owned: Vec<Vec<u8>>,
}

impl Host for SpecHost<'_> {
    fn message(&self) -> &[u8] {
        &self.action.data
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        keys::contract_into(self.key, self.contract, key);
        if let Some(written) = self.spec.writes.get(self.key.as_slice()) {
            return Ok(written.as_deref());
        }
        self.spec.reads.push(self.key.clone());
        match self.store.get(self.key).map_err(NodeFault::new)? {
            None => Ok(None),
            Some(Cow::Borrowed(v)) => Ok(Some(v)),
            Some(Cow::Owned(v)) => {
                self.owned.push(v);
                Ok(self.owned.last().map(Vec::as_slice))
            }
        }
    }

    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.write(key, Some(value))
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.write(key, None)
    }

    fn is_authorized(&self, account: Name) -> bool {
        self.action.authorization.contains(&account)
    }
}

impl SpecHost<'_> {
    fn write(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), HostError> {
        keys::contract_into(self.key, self.contract, key);
        count_write(self.writes_made, self.bytes_written, self.key, value)?;
        self.spec
            .writes
            .insert(self.key.clone(), value.map(<[u8]>::to_vec));
        Ok(())
    }
}
