//! The [`Host`] an action sees: its contract's namespace of the journal. The one
//! implementation in the chain: in-order and speculative runs differ only in the journal it
//! is given.

use tally_host_api::{Host, HostError, Name, NodeFault, Upsert};

use super::journal::Journal;
use crate::state::keys;
use crate::store::StateStore;
use crate::tx::Action;

/// One action's view of state: keys are prefixed with the running contract's account, so a
/// contract reaches only its own namespace.
pub(crate) struct ActionHost<'a> {
    pub(crate) contract: Name,
    pub(crate) action: &'a Action,
    pub(crate) journal: &'a mut Journal,
    pub(crate) store: &'a dyn StateStore,
    /// Scratch space for the full state key, reused across calls.
    pub(crate) key: &'a mut Vec<u8>,
}

impl Host for ActionHost<'_> {
    fn message(&self) -> &[u8] {
        &self.action.data
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        keys::contract_into(self.key, self.contract, key);
        // A store that fails is the node's fault, never the contract's: the block stops.
        self.journal
            .get(self.store, self.key)
            .map_err(|e| NodeFault::new(e).into())
    }

    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        keys::contract_into(self.key, self.contract, key);
        Ok(self.journal.set(self.key, Some(value))?)
    }

    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<Upsert, HostError> {
        keys::contract_into(self.key, self.contract, key);
        let existed = self
            .journal
            .upsert(self.store, self.key, value)
            .map_err(NodeFault::new)??;
        Ok(if existed {
            Upsert::Updated
        } else {
            Upsert::Inserted
        })
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        keys::contract_into(self.key, self.contract, key);
        Ok(self.journal.set(self.key, None)?)
    }

    fn is_authorized(&self, account: Name) -> bool {
        self.action.authorization.contains(&account)
    }
}
