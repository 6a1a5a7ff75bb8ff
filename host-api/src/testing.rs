//! A [`Host`] over a sorted map, for tests, benchmarks and fuzz targets (feature `testing`):
//! the one test double every crate uses, so none keeps a copy of its own.
//!
//! ```
//! use tally_host_api::Host;
//! use tally_host_api::testing::MapHost;
//!
//! let mut host = MapHost::with_message(b"hi".to_vec());
//! host.store(b"k", b"v").unwrap();
//! assert_eq!(host.load(b"k").unwrap(), Some(&b"v"[..]));
//! assert_eq!(host.message(), b"hi");
//! ```

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use core::ops::Bound;

use crate::{BlockInfo, Host, HostError, Name, Next, Upsert, Walk};

/// An action's view of state as a sorted map, so two runs can be compared by their final
/// state; it records what the action printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapHost {
    /// The action's data.
    pub message: Vec<u8>,
    /// The contract's state.
    pub state: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The accounts that signed.
    pub signers: Vec<Name>,
    /// Whether every account counts as having signed (benchmarks that do not check).
    pub all_signed: bool,
    /// What the contract printed, as the host saw it.
    pub printed: Vec<u8>,
    /// The events it emitted, in order.
    pub events: Vec<(Name, Vec<u8>)>,
    /// The block it runs in.
    pub block: BlockInfo,
}

impl MapHost {
    /// An empty state and `message` as the action's data.
    pub fn with_message(message: Vec<u8>) -> Self {
        Self {
            message,
            ..Self::default()
        }
    }
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

    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<Upsert, HostError> {
        Ok(match self.state.insert(key.to_vec(), value.to_vec()) {
            Some(_) => Upsert::Updated,
            None => Upsert::Inserted,
        })
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.state.remove(key);
        Ok(())
    }

    fn next(&mut self, walk: Walk<'_>) -> Result<Next, HostError> {
        // BTreeMap::range panics on crossed bounds; a walk over them finds nothing.
        let crossed = match (walk.lo, walk.hi) {
            (Bound::Included(lo), Bound::Included(hi)) => lo > hi,
            (
                Bound::Included(lo) | Bound::Excluded(lo),
                Bound::Included(hi) | Bound::Excluded(hi),
            ) => lo >= hi,
            _ => false,
        };
        let mut range = (!crossed).then(|| self.state.range::<[u8], _>((walk.lo, walk.hi)));
        let found = match &mut range {
            None => None,
            Some(r) if walk.backward => r.next_back(),
            Some(r) => r.next(),
        };
        Ok(Next {
            entry: found.map(|(k, v)| (k.clone(), v.clone())),
            skipped: 0,
        })
    }

    fn is_authorized(&self, account: Name) -> bool {
        self.all_signed || self.signers.contains(&account)
    }

    fn print(&mut self, text: &[u8]) -> Result<(), HostError> {
        self.printed.extend_from_slice(text);
        Ok(())
    }

    fn emit(&mut self, name: Name, data: &[u8]) -> Result<(), HostError> {
        self.events.push((name, data.to_vec()));
        Ok(())
    }

    fn block(&self) -> BlockInfo {
        self.block
    }
}
