//! The execute phase: one action against the journal, by the system contract, a wasm
//! contract or a native replacement.

use tally_host_api::{Abort, AbortCode, HostError, Name};
use tally_runtime::{Contract, Entry, Outcome, Receipt, Runtime, RuntimeError};

use crate::code::{CodeMap, Executor, NativeContract};
use crate::error::ChainError;
use crate::host::ActionHost;
use crate::journal::Journal;
use crate::state::StateStore;
use crate::system::{self, SYSTEM};
use crate::tx::Action;

/// What running an action borrows from the chain.
pub(crate) struct Env<'a> {
    pub(crate) runtime: &'a Runtime,
    pub(crate) store: &'a dyn StateStore,
    pub(crate) journal: &'a mut Journal,
    pub(crate) code: &'a mut CodeMap,
    /// Scratch space for state keys.
    pub(crate) key: &'a mut Vec<u8>,
}

/// A failed receipt that used `fuel_used`.
pub(crate) fn failure(abort: Abort, fuel_used: u64) -> Receipt {
    Receipt {
        outcome: Outcome::Failure(abort),
        fuel_used,
        console: Vec::new(),
        trace: None,
    }
}

impl Env<'_> {
    /// Runs `action` with at most `fuel`. A contract failure is an `Ok` failed receipt; `Err`
    /// is the node's own fault.
    pub(crate) fn run_action(&mut self, action: &Action, fuel: u64) -> Result<Receipt, ChainError> {
        if action.account == SYSTEM {
            return system::apply(self, action, fuel);
        }
        let executor = self
            .code
            .get(action.account, self.journal, self.store, self.runtime)?;
        match executor {
            None => Ok(failure(
                Abort::new(
                    AbortCode::NoHandler,
                    format!("account {} has no contract", action.account),
                ),
                0,
            )),
            Some(Executor::Wasm(contract)) => {
                let entry = Entry::Action {
                    receiver: action.account,
                    code: action.account,
                    action: action.name,
                };
                self.run_wasm(&contract, action.account, action, entry, fuel)
            }
            Some(Executor::Native(native)) => self.run_native(&native, action),
        }
    }

    /// Runs `entry` of `contract` as `receiver`, against this action's view of state.
    pub(crate) fn run_wasm(
        &mut self,
        contract: &Contract,
        receiver: Name,
        action: &Action,
        entry: Entry,
        fuel: u64,
    ) -> Result<Receipt, ChainError> {
        let mut host = ActionHost {
            contract: receiver,
            action,
            journal: self.journal,
            store: self.store,
            key: self.key,
        };
        self.runtime
            .execute_metered(contract, entry, &mut host, fuel)
            .map_err(node_fault)
    }

    fn run_native(
        &mut self,
        native: &NativeContract,
        action: &Action,
    ) -> Result<Receipt, ChainError> {
        let mut host = ActionHost {
            contract: action.account,
            action,
            journal: self.journal,
            store: self.store,
            key: self.key,
        };
        let outcome = match native(&mut host) {
            Ok(()) => Outcome::Success,
            Err(HostError::Abort(abort)) => Outcome::Failure(abort),
            Err(HostError::Fault(fault)) => return Err(node_fault(fault.into())),
        };
        Ok(Receipt {
            outcome,
            fuel_used: 0,
            console: Vec::new(),
            trace: None,
        })
    }
}

/// A runtime error is the node's: a store that failed under a host call keeps its kind.
fn node_fault(e: RuntimeError) -> ChainError {
    ChainError::Runtime(e)
}
