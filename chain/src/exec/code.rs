//! The code map: which executor runs each account's actions, found with one lookup per
//! action and loaded from state (through the runtime's module cache) on a miss.
//!
//! The map holds wasm contracts weakly. The runtime's contract cache is the one owner, so
//! its byte bound is what bounds memory: a contract it evicts is freed once no action runs
//! it, and loads again (from the disk tier, or by compiling) when next called.
//!
//! It holds committed code only. A contract deployed by the pending block lives in the
//! [`Journal`] until the block commits (`CodeMap::install`), so discarding a transaction or a
//! block needs nothing from the map: the journal's undo covers code as it covers state.

use std::sync::{Arc, Weak};

use tally_host_api::{Host, HostError, Name};
use tally_runtime::{Contract, Runtime};

use super::journal::Journal;
use crate::KeyedMap;
use crate::error::ChainError;
use crate::state::keys;
use crate::store::StateStore;

/// An executor that replaces a contract's wasm for baselines (`tally bench --baseline`): plain
/// Rust, or another engine, over the same [`Host`] a wasm contract sees. It shows what the
/// runtime costs.
pub type NativeContract = Arc<dyn Fn(&mut dyn Host) -> Result<(), HostError> + Send + Sync>;

/// What runs an account's actions.
#[derive(Clone)]
pub enum Executor {
    /// Its deployed WebAssembly contract.
    Wasm(Arc<Contract>),
    /// A native replacement (baselines only).
    Native(NativeContract),
}

/// What the map remembers of an account's executor.
enum Loaded {
    /// Owned by the runtime's contract cache; gone once the cache evicts it.
    Wasm(Weak<Contract>),
    Native(NativeContract),
}

impl Loaded {
    fn of(executor: &Executor) -> Self {
        match executor {
            Executor::Wasm(contract) => Self::Wasm(Arc::downgrade(contract)),
            Executor::Native(native) => Self::Native(native.clone()),
        }
    }

    fn executor(&self) -> Option<Executor> {
        match self {
            Self::Wasm(contract) => contract.upgrade().map(Executor::Wasm),
            Self::Native(native) => Some(Executor::Native(native.clone())),
        }
    }
}

/// Accounts' committed executors, loaded on first use.
#[derive(Default)]
pub struct CodeMap {
    loaded: KeyedMap<Name, Loaded>,
    /// Native replacements, consulted when an account is loaded or deployed.
    natives: KeyedMap<Name, NativeContract>,
}

impl CodeMap {
    /// The executor of `account`, or `None` if it has no code: what the pending block
    /// deployed, else what the map holds, else loaded from state through the journal.
    pub fn get(
        &mut self,
        account: Name,
        journal: &mut Journal,
        store: &dyn StateStore,
        runtime: &Runtime,
    ) -> Result<Option<Executor>, ChainError> {
        if let Some(found) = self.cached(account, journal) {
            return Ok(Some(found));
        }
        let Some(hash) = journal.get(store, &keys::code_hash(account))? else {
            return Ok(None);
        };
        let hash: [u8; 32] = hash
            .try_into()
            .map_err(|_| ChainError::Corrupt(format!("code hash of {account} is not 32 bytes")))?;
        let executor = match self.natives.get(&account) {
            Some(native) => Executor::Native(native.clone()),
            None => {
                let code = journal
                    .get(store, &keys::code(&hash))?
                    .ok_or_else(|| ChainError::Corrupt(format!("code of {account} is missing")))?;
                // Code in state passed validation when it was deployed; failing now is a fault
                // of this node (its runtime or cache), not of the transaction.
                Executor::Wasm(runtime.prepare(code)?)
            }
        };
        self.loaded.insert(account, Loaded::of(&executor));
        Ok(Some(executor))
    }

    /// The executor of `account` if the pending block deployed it or the map holds it, without
    /// reading state: what a speculative run, which shares the map, may use.
    pub fn cached(&self, account: Name, journal: &Journal) -> Option<Executor> {
        match journal.code(account) {
            Some(deployed) => Some(deployed.clone()),
            None => self.loaded.get(&account).and_then(Loaded::executor),
        }
    }

    /// What runs `account`'s actions once `contract` is deployed to it: the contract, or the
    /// account's native replacement.
    pub fn deployed(&self, account: Name, contract: Arc<Contract>) -> Executor {
        match self.natives.get(&account) {
            Some(native) => Executor::Native(native.clone()),
            None => Executor::Wasm(contract),
        }
    }

    /// Takes over the contracts a committed block deployed.
    pub(crate) fn install(&mut self, deployed: Vec<(Name, Executor)>) {
        for (account, executor) in deployed {
            self.loaded.insert(account, Loaded::of(&executor));
        }
    }

    /// Runs `account`'s actions with `native` instead of its wasm contract (which must still
    /// be deployed: it owns the storage).
    pub fn set_native(&mut self, account: Name, native: NativeContract) {
        self.natives.insert(account, native);
        self.loaded.remove(&account);
    }
}
