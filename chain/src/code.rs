//! The code map: which executor runs each account's actions, found with one lookup per
//! action and loaded from state (through the runtime's module cache) on a miss.
//!
//! The map holds wasm contracts weakly. The runtime's contract cache is the one owner, so
//! its byte bound is what bounds memory: a contract it evicts is freed once no action runs
//! it, and loads again (from the disk tier, or by compiling) when next called.

use std::sync::{Arc, Weak};

use tally_host_api::{Host, HostError, Name};
use tally_runtime::{Contract, Runtime};

use crate::KeyedMap;
use crate::error::ChainError;
use crate::journal::Journal;
use crate::state::{StateStore, keys};

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

/// Accounts' executors, loaded on first use.
#[derive(Default)]
pub struct CodeMap {
    loaded: KeyedMap<Name, Loaded>,
    /// Native replacements, consulted when an account is loaded.
    natives: KeyedMap<Name, NativeContract>,
    /// Accounts whose code the running transaction set, and the pending block's committed
    /// transactions set: their entries must go if that work is discarded.
    changed_in_tx: Vec<Name>,
    changed_in_block: Vec<Name>,
}

impl CodeMap {
    /// The executor of `account`, or `None` if it has no code. Reads the code hash through
    /// the journal, so an action after a `setcode` in the same transaction runs the new code.
    pub fn get(
        &mut self,
        account: Name,
        journal: &mut Journal,
        store: &dyn StateStore,
        runtime: &Runtime,
    ) -> Result<Option<Executor>, ChainError> {
        if let Some(found) = self.loaded.get(&account).and_then(Loaded::executor) {
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

    /// Remembers `contract` as `account`'s code from now on: `setcode` just deployed it.
    pub fn set(&mut self, account: Name, contract: Arc<Contract>) {
        self.changed_in_tx.push(account);
        let loaded = match self.natives.get(&account) {
            Some(native) => Loaded::Native(native.clone()),
            None => Loaded::Wasm(Arc::downgrade(&contract)),
        };
        self.loaded.insert(account, loaded);
    }

    /// Runs `account`'s actions with `native` instead of its wasm contract (which must still
    /// be deployed: it owns the storage).
    pub fn set_native(&mut self, account: Name, native: NativeContract) {
        self.natives.insert(account, native);
        self.loaded.remove(&account);
    }

    /// The running transaction's code changes stay.
    pub fn commit_tx(&mut self) {
        self.changed_in_block.append(&mut self.changed_in_tx);
    }

    /// The running transaction's code changes are undone: their accounts load again from
    /// state when next used.
    pub fn discard_tx(&mut self) {
        for account in self.changed_in_tx.drain(..) {
            self.loaded.remove(&account);
        }
    }

    /// The pending block was committed.
    pub fn commit_block(&mut self) {
        self.changed_in_block.clear();
    }

    /// The pending block was discarded.
    pub fn discard_block(&mut self) {
        self.discard_tx();
        for account in self.changed_in_block.drain(..) {
            self.loaded.remove(&account);
        }
    }
}
