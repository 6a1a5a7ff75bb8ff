//! What the fuzz targets share: a map-backed [`Host`].

use std::collections::BTreeMap;

use tally_host_api::{Host, HostError, Name};

/// A host over an ordered map, so two runs can be compared by their final state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapHost {
    /// The action's data.
    pub message: Vec<u8>,
    /// The contract's state.
    pub state: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The accounts that signed.
    pub signers: Vec<Name>,
    /// What the contract printed, as the host saw it.
    pub printed: Vec<u8>,
}

impl Host for MapHost {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(self.state.get(key).map(Vec::as_slice))
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.state.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.state.remove(key);
        Ok(())
    }
    fn is_authorized(&self, account: Name) -> bool {
        self.signers.contains(&account)
    }
    fn print(&mut self, text: &[u8]) -> Result<(), HostError> {
        self.printed.extend_from_slice(text);
        Ok(())
    }
}
