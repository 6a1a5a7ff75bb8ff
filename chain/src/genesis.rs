//! Genesis: the only block whose state changes are not derived from signed transactions.
//!
//! A chain starts from a [`Genesis`] (accounts with their keys, deployed contracts, contract
//! storage allocations), written as block 0. Every later change comes from signed actions, and
//! `verify` re-derives it. Every node given the same genesis derives the same block 0, so its
//! state checksum identifies the chain.

use std::io;

use serde::{Deserialize, Serialize};
use tally_host_api::Name;
use tally_runtime::Receipt;

use std::sync::Arc;

use tally_runtime::Runtime;

use crate::block::{BlockHeader, ChangeHasher};
use crate::chain::Chain;
use crate::config::ChainConfig;
use crate::error::ChainError;
use crate::exec::{Code, Exec, system};
use crate::state::keys;
use crate::store::{BlockRecord, ChangeFn, ChangeSource, Changes, Durability, StateStore};
use crate::tx::BlockBody;

/// An account that exists at genesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenesisAccount {
    /// Its name.
    #[serde(with = "name_str")]
    pub name: Name,
    /// Its ed25519 public key, hex.
    #[serde(with = "hex_array")]
    pub key: [u8; 32],
    /// Its native coins, which pay its transactions' fees.
    #[serde(default)]
    pub balance: u64,
}

/// A contract deployed at genesis (its `onInit` runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenesisContract {
    /// The account it is deployed to.
    #[serde(with = "name_str")]
    pub account: Name,
    /// The WebAssembly module, hex.
    #[serde(with = "hex_vec")]
    pub code: Vec<u8>,
}

/// A value written directly to a contract's storage at genesis, after the contracts' `onInit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The contract whose storage gets it.
    #[serde(with = "name_str")]
    pub contract: Name,
    /// The storage key, hex.
    #[serde(with = "hex_vec")]
    pub key: Vec<u8>,
    /// The value, hex.
    #[serde(with = "hex_vec")]
    pub value: Vec<u8>,
}

/// A chain's initial state. Serialises to the JSON a CometBFT genesis carries as `app_state`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Genesis {
    /// Accounts and keys (the system account `tally` among them, to create others).
    #[serde(default)]
    pub accounts: Vec<GenesisAccount>,
    /// Deployed contracts, in order.
    #[serde(default)]
    pub contracts: Vec<GenesisContract>,
    /// Storage values, written last.
    #[serde(default)]
    pub allocations: Vec<Allocation>,
}

impl Genesis {
    /// A genesis with just the system account and its key.
    pub fn with_system_key(key: [u8; 32]) -> Self {
        Self {
            accounts: vec![GenesisAccount {
                name: system::SYSTEM,
                key,
                balance: 0,
            }],
            ..Self::default()
        }
    }
}

/// Builds block 0 of a new chain, one entry at a time (so a benchmark can create ten million
/// accounts without a [`Genesis`] value holding them all).
pub struct GenesisBuilder {
    chain: Chain,
}

impl GenesisBuilder {
    pub(crate) fn new(mut chain: Chain) -> Self {
        // The schedule is part of the chain: a node opened with another one is refused.
        let schedule = borsh::to_vec(&chain.config.fees).expect("in memory");
        chain
            .journal
            .write_block(vec![keys::FEE_SCHEDULE], Some(schedule));
        // So is the snapshot schedule, when there is one (a chain that never snapshots writes
        // nothing, and keeps the state of chains created before snapshots existed).
        if chain.config.snapshots.is_enabled() {
            let schedule = borsh::to_vec(&chain.config.snapshots).expect("in memory");
            chain
                .journal
                .write_block(vec![keys::SNAPSHOT_SCHEDULE], Some(schedule));
        }
        Self { chain }
    }

    /// A builder for a genesis whose every change is recorded elsewhere (a replay of block 0,
    /// `tally verify`): it writes nothing of its own, the schedule included.
    pub(crate) fn recorded(chain: Chain) -> Self {
        Self { chain }
    }

    /// Creates `account` with public key `key`.
    pub fn account(&mut self, account: Name, key: [u8; 32]) {
        self.chain
            .journal
            .write_block(keys::account(account).to_vec(), Some(key.to_vec()));
    }

    /// Gives `account` `coins` native coins (replacing any balance given before). The sum of
    /// every balance at genesis is the chain's supply, for ever: fees burn coins, tips move
    /// them, nothing mints them.
    pub fn fund(&mut self, account: Name, coins: u64) {
        self.chain.set_balance(account, coins);
    }

    /// Writes `value` under `contract`'s storage key `key`.
    pub fn allocate(&mut self, contract: Name, key: &[u8], value: &[u8]) {
        self.chain
            .journal
            .write_block(keys::contract(contract, key), Some(value.to_vec()));
    }

    /// Deploys `code` to `account` and runs its `onInit`. Genesis is trusted, so it pays no
    /// fuel beyond the action's own; a module that is refused, or an `onInit` that fails, is
    /// an error.
    pub fn deploy(&mut self, account: Name, code: &[u8]) -> Result<Receipt, ChainError> {
        let chain = &mut self.chain;
        chain.journal.checkpoint();
        let block = tally_host_api::BlockInfo {
            time_ms: chain.config.genesis_time_ms,
            height: 0,
        };
        let mut exec = Exec::new(
            &chain.runtime,
            chain.store.as_ref(),
            &mut chain.journal,
            Code::Load(&mut chain.code),
            &mut chain.key,
            block,
        );
        let result = chain
            .runtime
            .prepare(code)
            .map_err(ChainError::from)
            .and_then(|contract| system::install(&mut exec, account, code, contract, u64::MAX));
        match result {
            Ok(receipt) if receipt.is_success() => {
                chain.journal.commit_tx();
                Ok(receipt)
            }
            Ok(receipt) => {
                chain.journal.discard_tx();
                let abort = receipt.failure().cloned().expect("a failed receipt");
                Err(ChainError::InitFailed(abort))
            }
            Err(e) => {
                chain.journal.discard_tx();
                Err(e)
            }
        }
    }

    /// Applies every entry of `genesis`.
    pub fn apply(&mut self, genesis: &Genesis) -> Result<(), ChainError> {
        for a in &genesis.accounts {
            self.account(a.name, a.key);
            if a.balance > 0 {
                self.fund(a.name, a.balance);
            }
        }
        for c in &genesis.contracts {
            self.deploy(c.account, &c.code)?;
        }
        for a in &genesis.allocations {
            self.allocate(a.contract, &a.key, &a.value);
        }
        Ok(())
    }

    /// Writes recorded changes as they are: to replay a stored genesis block.
    pub fn apply_changes(&mut self, changes: &Changes) {
        for (key, value) in changes {
            let value = value.map(<[u8]>::to_vec);
            self.chain.journal.write_block(key.to_vec(), value);
        }
    }

    /// Commits block 0 and returns the chain, ready for transactions.
    pub fn finish(mut self) -> Result<Chain, ChainError> {
        self.chain.commit_genesis(None)?;
        Ok(self.chain)
    }

    /// Commits block 0 with the changes of `bulk` besides what the builder wrote, and returns
    /// the chain. For a genesis too large to hold in memory (ten million accounts): `bulk`
    /// streams its changes, sorted, to the checksum and to the store, which may write them
    /// without ever holding them (the log store does). Its keys must be ones the builder did
    /// not write; [`GenesisBuilder::account`] and [`GenesisBuilder::allocate`] say which keys
    /// an account or an allocation has (`state::keys`).
    pub fn finish_with(mut self, bulk: &dyn ChangeSource) -> Result<Chain, ChainError> {
        self.chain.commit_genesis(Some(bulk))?;
        Ok(self.chain)
    }
}

impl Chain {
    /// Starts a new chain on an empty `store`: fill its genesis with the returned builder,
    /// then [`GenesisBuilder::finish`] commits block 0.
    pub fn genesis(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<GenesisBuilder, ChainError> {
        config.fees.validate().map_err(ChainError::Config)?;
        config.snapshots.validate().map_err(ChainError::Config)?;
        config
            .snapshots
            .check_fees(&config.fees)
            .map_err(ChainError::Config)?;
        if let Some(head) = store.head() {
            return Err(ChainError::Config(format!(
                "the store already holds a chain (at block {}); open it instead",
                head.height
            )));
        }
        let head = BlockHeader {
            height: 0,
            previous: [0; 32],
            timestamp_ms: config.genesis_time_ms,
            transactions_root: BlockBody::default().root(),
            proposer: system::SYSTEM,
            prices: config.fees.start_price,
            usage: crate::fee::Usage::default(),
            state_checksum: [0; 32],
            snapshot: Default::default(),
        };
        Ok(GenesisBuilder::new(Self::new(runtime, store, config, head)))
    }

    /// [`Chain::genesis`] for a replay of a recorded genesis: the builder writes nothing but
    /// the recorded changes it is given.
    pub(crate) fn genesis_recorded(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<GenesisBuilder, ChainError> {
        let builder = Self::genesis(runtime, store, config)?;
        let mut chain = builder.chain;
        chain.journal.clear();
        Ok(GenesisBuilder::recorded(chain))
    }

    /// Starts a new chain on an empty `store` from `genesis`.
    pub fn create(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
        genesis: &Genesis,
    ) -> Result<Self, ChainError> {
        let mut builder = Self::genesis(runtime, store, config)?;
        builder.apply(genesis)?;
        builder.finish()
    }

    /// Commits the genesis block, durably: whatever the builder wrote, and the changes of
    /// `bulk` (keys the builder did not write), as block 0. The changes stream past twice, to
    /// the checksum and to the store, and are never all in memory at once.
    fn commit_genesis(&mut self, bulk: Option<&dyn ChangeSource>) -> Result<(), ChainError> {
        let written = self.journal.take_changes();
        let changes = GenesisChanges {
            written: &written.state,
            bulk,
        };
        let mut hasher = ChangeHasher::new();
        // The supply: every coin there will ever be is in a genesis balance, so it must fit
        // where a balance does.
        let mut supply = 0u64;
        changes
            .for_each(&mut |k, v| {
                hasher.add(k, v);
                if k.first() == Some(&keys::BALANCE) {
                    let account = Name(u64::from_be_bytes(k[1..].try_into().map_err(|_| {
                        io::Error::other("a balance key is not a balance prefix and a name")
                    })?));
                    let coins = crate::phase::finalize::read_balance(v, account)
                        .map_err(io::Error::other)?;
                    supply = supply.checked_add(coins).ok_or_else(|| {
                        io::Error::other("the genesis balances add up to more than 2^64 - 1 coins")
                    })?;
                }
                Ok(())
            })
            .map_err(|e| ChainError::Config(format!("genesis: {e}")))?;
        self.head.state_checksum = hasher.finish(&[0; 32]);
        let record = BlockRecord {
            header: self.head.clone(),
            body: borsh::to_vec(&BlockBody::default()).expect("encoding into a Vec cannot fail"),
            changes: Changes::new(),
        };
        let commit = self.commit_options(0, Durability::Immediate);
        self.store.commit_genesis(record, &changes, commit)?;
        self.head_id = self.head.id();
        self.window.push_genesis(&self.head_id);
        self.code.install(written.code);
        Ok(())
    }
}

/// Genesis changes: what the builder wrote (a few contracts, sorted) with a bulk source's,
/// merged in key order. Fails a pass if the bulk source's keys do not strictly increase or
/// repeat a key the builder wrote: either would make the block's changes ambiguous.
pub(crate) struct GenesisChanges<'a> {
    pub(crate) written: &'a Changes,
    pub(crate) bulk: Option<&'a dyn ChangeSource>,
}

impl ChangeSource for GenesisChanges<'_> {
    fn len(&self) -> u64 {
        self.written.len() as u64 + self.bulk.map_or(0, |b| b.len())
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> io::Result<()> {
        let mut written = self.written.iter().peekable();
        if let Some(bulk) = self.bulk {
            let mut last: Option<Vec<u8>> = None;
            let mut count = 0u64;
            bulk.for_each(&mut |key, value| {
                if last.as_deref().is_some_and(|l| l >= key) {
                    return Err(bad_bulk("its keys do not strictly increase"));
                }
                while let Some((k, v)) = written.next_if(|&(k, _)| k < key) {
                    f(k, v)?;
                }
                if written.peek().is_some_and(|&(k, _)| k == key) {
                    return Err(bad_bulk("it repeats a key the genesis already wrote"));
                }
                let last = last.get_or_insert_with(Vec::new);
                last.clear();
                last.extend_from_slice(key);
                count += 1;
                f(key, value)
            })?;
            if count != bulk.len() {
                return Err(bad_bulk(
                    "it gave a different number of changes than it said",
                ));
            }
        }
        written.try_for_each(|(k, v)| f(k, v))
    }
}

fn bad_bulk(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("the bulk genesis source is unusable: {why}"),
    )
}

/// serde of a 32-byte array as hex.
mod hex_array {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        let bytes = hex::decode(&text).map_err(serde::de::Error::custom)?;
        bytes
            .try_into()
            .map_err(|_| serde::de::Error::custom("expected 32 bytes of hex"))
    }
}

/// serde of a [`Name`] as its text.
mod name_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use tally_host_api::Name;

    pub fn serialize<S: Serializer>(name: &Name, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(name)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(|e| serde::de::Error::custom(format!("{e}")))
    }
}

/// serde of bytes as hex.
mod hex_vec {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        hex::decode(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}
