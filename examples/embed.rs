//! cargo run --release --example embed
//!
//! A node embedding Tally's runtime through the library API, with its own `Host`: here a
//! sorted map. It deploys simplecoin, runs its `onInit`, and pushes a few transfers straight
//! through `Runtime::execute`, rolling back the writes of any action that fails.

use std::collections::BTreeMap;

use tally_chain::Transfer;
use tally_host_api::{Host, HostError, Name};
use tally_runtime::{Entry, Runtime, RuntimeConfig};

/// The embedder's state: one contract's keys and values, plus the running action's data and
/// writes (applied only if the action succeeds).
#[derive(Default)]
struct MapHost {
    state: BTreeMap<Vec<u8>, Vec<u8>>,
    message: Vec<u8>,
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    signers: Vec<Name>,
}

impl Host for MapHost {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        // The action sees its own writes first.
        Ok(match self.writes.iter().rev().find(|(k, _)| k == key) {
            Some((_, value)) => value.as_deref(),
            None => self.state.get(key).map(Vec::as_slice),
        })
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.writes.push((key.to_vec(), Some(value.to_vec())));
        Ok(())
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.writes.push((key.to_vec(), None));
        Ok(())
    }
    fn is_authorized(&self, account: Name) -> bool {
        self.signers.contains(&account)
    }
}

impl MapHost {
    fn commit(&mut self) {
        for (key, value) in self.writes.drain(..) {
            match value {
                Some(v) => self.state.insert(key, v),
                None => self.state.remove(&key),
            };
        }
    }

    fn balance(&self, account: Name) -> u64 {
        self.state
            .get(&account.0.to_le_bytes()[..])
            .map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()))
    }
}

/// simplecoin, built from contracts/simplecoin.c.
const SIMPLECOIN_WASM: &[u8] = include_bytes!("../contracts/simplecoin.wasm");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let simplecoin: Name = "simplecoin".parse()?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let contract = runtime.prepare(SIMPLECOIN_WASM)?; // validate + compile once
    let mut host = MapHost::default();
    runtime.execute(&contract, Entry::Init, &mut host)?;
    host.commit();

    let alice: Name = "alice".parse()?;
    let transfer = Entry::Action {
        receiver: simplecoin,
        code: simplecoin,
        action: "transfer".parse()?,
    };
    for amount in [100, 250, 2_000_000] {
        host.message = Transfer {
            from: simplecoin,
            to: alice,
            amount,
            memo: "from embed.rs".into(),
        }
        .encode();
        let receipt = runtime.execute(&contract, transfer, &mut host)?;
        match receipt.failure() {
            None => host.commit(),
            Some(abort) => {
                host.writes.clear(); // a failed action changes nothing
                println!("transfer of {amount} failed: {}", abort.message);
            }
        }
        println!(
            "after transfer of {amount}: simplecoin {}, alice {} ({} fuel)",
            host.balance(simplecoin),
            host.balance(alice),
            receipt.fuel_used
        );
    }
    Ok(())
}
