//! The node's view of tally-chain: create from genesis, execute a block, commit, read.
//!
//! Everything the ABCI application needs from the chain library goes through this file, so
//! the application does not depend on how the library spells it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tally_chain::{Chain, ChainConfig, ChainError, Name, SignedTransaction, TxError, TxId};
use tally_host_api::Abort;
use tally_runtime::{Outcome, Runtime, RuntimeConfig};

use crate::commands::local::write_atomic;
use crate::commands::store::{StoreKind, open_store};

/// Version of the node's data-directory layout.
const LAYOUT_VERSION: u32 = 1;

/// `DIR/node.json`: what InitChain fixed, so a restarted node opens the same chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeFile {
    version: u32,
    chain_id: String,
    /// Time of Tally's genesis block: 1 ms before CometBFT's genesis time, because CometBFT's
    /// first block carries the genesis time itself and Tally's block times must increase.
    genesis_time_ms: u64,
    /// Tally height of the block CometBFT calls height 0 (the state after genesis).
    height_offset: u64,
}

/// A chain's initial state, as CometBFT's genesis `app_state` carries it (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Genesis {
    /// Accounts and their keys.
    #[serde(default)]
    pub accounts: Vec<GenesisAccount>,
    /// Contracts deployed at genesis, in order (their `onInit` runs).
    #[serde(default)]
    pub contracts: Vec<GenesisContract>,
    /// Storage values written after the contracts.
    #[serde(default)]
    pub allocations: Vec<Allocation>,
}

/// An account at genesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenesisAccount {
    /// Its name.
    pub name: String,
    /// Its ed25519 public key, hex.
    pub key: String,
}

/// A contract deployed at genesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenesisContract {
    /// The account it is deployed to.
    pub account: String,
    /// The WebAssembly module, hex.
    pub code: String,
}

/// A storage value written at genesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The contract whose storage gets it.
    pub contract: String,
    /// The key, hex.
    pub key: String,
    /// The value, hex.
    pub value: String,
}

fn name(s: &str) -> anyhow::Result<Name> {
    s.parse::<Name>()
        .map_err(|e| anyhow::anyhow!("genesis: {s:?} is not a valid name: {e}"))
}

fn key32(s: &str) -> anyhow::Result<[u8; 32]> {
    hex::decode(s)
        .ok()
        .and_then(|k| k.try_into().ok())
        .with_context(|| format!("genesis: key {s:?} is not 32 bytes of hex"))
}

/// A transaction ready for a block: its exact signed bytes, id, and signature check if done.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The decoded transaction.
    pub tx: SignedTransaction,
    /// Its id.
    pub id: TxId,
    /// Its exact signed bytes.
    pub bytes: Vec<u8>,
    /// `Some(Ok)` once every signature verified.
    pub verified: Option<Result<(), TxError>>,
}

impl Prepared {
    /// Decodes a transaction received from outside; the error says why it is no transaction.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let limit = tally_host_api::limits::MAX_TX_BYTES;
        if bytes.len() > limit {
            return Err(format!(
                "the transaction is {} bytes; the limit is {limit}",
                bytes.len()
            ));
        }
        let tx =
            SignedTransaction::decode(bytes).map_err(|e| format!("malformed transaction: {e}"))?;
        if tx.transaction.actions.is_empty() {
            return Err(TxError::NoActions.to_string());
        }
        let data_limit = tally_host_api::limits::MAX_MESSAGE_LEN as usize;
        for (i, a) in tx.transaction.actions.iter().enumerate() {
            if a.account != tally_chain::system::SYSTEM && a.data.len() > data_limit {
                return Err(format!(
                    "action {i} carries {} bytes of data; the limit is {data_limit}",
                    a.data.len()
                ));
            }
        }
        let id = tx.transaction.id();
        Ok(Self {
            tx,
            id,
            bytes: bytes.to_vec(),
            verified: None,
        })
    }
}

/// Verifies the signatures of every transaction of `txs` not yet verified, in batches on all
/// cores.
pub fn verify(txs: &mut [Prepared]) {
    let pending: Vec<usize> = (0..txs.len())
        .filter(|&i| txs[i].verified.is_none())
        .collect();
    let signed: Vec<SignedTransaction> = pending.iter().map(|&i| txs[i].tx.clone()).collect();
    let ids: Vec<TxId> = pending.iter().map(|&i| txs[i].id).collect();
    let results = tally_chain::crypto::verify_many(&signed, &ids);
    for (i, r) in pending.into_iter().zip(results) {
        txs[i].verified = Some(r);
    }
}

/// What a block did with one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOutcome {
    /// Included; all its actions succeeded.
    Success {
        /// Fuel used.
        fuel: u64,
    },
    /// Included; an action failed, so it changed nothing.
    Failed {
        /// Fuel used.
        fuel: u64,
        /// Why, in the contract's words.
        abort: Abort,
    },
    /// Not included.
    Rejected(TxError),
}

/// The last committed block, in CometBFT's numbering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// CometBFT height (0 before the first block).
    pub height: u64,
    /// Block time, ms since the Unix epoch.
    pub time_ms: u64,
    /// The state checksum: CometBFT's app hash, hex.
    pub app_hash: String,
    /// `ref_block_num` for new transactions.
    pub ref_block_num: u16,
    /// `ref_block_prefix` for new transactions.
    pub ref_block_prefix: u32,
    /// Longest a transaction may live past the block time.
    pub max_lifetime_ms: u64,
}

/// The chain as the node drives it.
pub struct Ledger {
    chain: Chain,
    file: NodeFile,
    /// Whether the last block was executed but not committed.
    executed: bool,
}

fn chain_config(file: &NodeFile) -> ChainConfig {
    ChainConfig {
        genesis_time_ms: file.genesis_time_ms,
        ..ChainConfig::default()
    }
}

fn runtime(dir: &Path) -> anyhow::Result<Arc<Runtime>> {
    Ok(Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.join("modules")),
        ..RuntimeConfig::default()
    })?))
}

fn store_dir(dir: &Path) -> PathBuf {
    dir.join("store")
}

impl Ledger {
    /// Opens the chain in `dir`, or `None` if InitChain has not created one yet.
    pub fn open(dir: &Path) -> anyhow::Result<Option<Self>> {
        let path = dir.join("node.json");
        if !path.exists() {
            return Ok(None);
        }
        let file: NodeFile = serde_json::from_slice(&std::fs::read(&path)?)
            .with_context(|| format!("{} is not valid", path.display()))?;
        if file.version != LAYOUT_VERSION {
            bail!(
                "{} has node layout version {}; this tally reads version {LAYOUT_VERSION}",
                dir.display(),
                file.version
            );
        }
        let config = chain_config(&file);
        let store = open_store(StoreKind::Log, &store_dir(dir), config.retain_blocks)?;
        let chain = Chain::open(runtime(dir)?, store, config)?;
        let mut ledger = Self {
            chain,
            file,
            executed: false,
        };
        ledger.chain.set_overlap_commit(true);
        Ok(Some(ledger))
    }

    /// Creates the chain in `dir` from `genesis` (InitChain).
    pub fn create(
        dir: &Path,
        chain_id: &str,
        genesis: &Genesis,
        genesis_time_ms: u64,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let file = NodeFile {
            version: LAYOUT_VERSION,
            chain_id: chain_id.to_string(),
            genesis_time_ms: genesis_time_ms.saturating_sub(1),
            height_offset: 1,
        };
        let config = chain_config(&file);
        // A store left by an InitChain that crashed before node.json was written is replaced.
        let _ = std::fs::remove_dir_all(store_dir(dir));
        let store = open_store(StoreKind::Log, &store_dir(dir), config.retain_blocks)?;
        let mut chain = Chain::open(runtime(dir)?, store, config)?;
        for a in &genesis.accounts {
            chain.register_account(name(&a.name)?, key32(&a.key)?)?;
        }
        for c in &genesis.contracts {
            let code = hex::decode(&c.code).context("genesis: contract code is not hex")?;
            chain.deploy(name(&c.account)?, &code)?;
        }
        for a in &genesis.allocations {
            let key = hex::decode(&a.key).context("genesis: allocation key is not hex")?;
            let value = hex::decode(&a.value).context("genesis: allocation value is not hex")?;
            chain.allocate(name(&a.contract)?, &key, &value)?;
        }
        chain.finish_block()?;
        chain.sync()?;
        write_atomic(
            &dir.join("node.json"),
            serde_json::to_string_pretty(&file)?.as_bytes(),
            0o644,
        )?;
        chain.set_overlap_commit(true);
        Ok(Self {
            chain,
            file,
            executed: false,
        })
    }

    /// The last committed block.
    pub fn head(&self) -> Head {
        let h = self.chain.head();
        let (ref_block_num, ref_block_prefix) = self.chain.tapos();
        Head {
            height: h.height - self.file.height_offset,
            time_ms: h.timestamp_ms,
            app_hash: hex::encode(h.state_checksum),
            ref_block_num,
            ref_block_prefix,
            max_lifetime_ms: self.chain.config().max_tx_lifetime_ms,
        }
    }

    /// The committed state checksum.
    pub fn app_hash(&self) -> [u8; 32] {
        self.chain.head().state_checksum
    }

    /// Executes `txs` as the next block at `time_ms` (CometBFT's block time): the new app hash
    /// and one outcome per transaction. `Err` is the node's own fault.
    pub fn execute(
        &mut self,
        _time_ms: u64,
        txs: &mut [Prepared],
    ) -> Result<([u8; 32], Vec<TxOutcome>), ChainError> {
        verify(txs);
        let mut outcomes = Vec::with_capacity(txs.len());
        for p in txs.iter() {
            if let Some(Err(e)) = &p.verified {
                outcomes.push(TxOutcome::Rejected(e.clone()));
                continue;
            }
            match self.chain.push_prepared(&p.tx, p.id, Some(&p.bytes), None) {
                Ok(receipt) => outcomes.push(match receipt.outcome {
                    Outcome::Success => TxOutcome::Success {
                        fuel: receipt.fuel_used,
                    },
                    Outcome::Failure(abort) => TxOutcome::Failed {
                        fuel: receipt.fuel_used,
                        abort,
                    },
                }),
                Err(ChainError::Tx(e)) => outcomes.push(TxOutcome::Rejected(e)),
                Err(e) => return Err(e),
            }
        }
        let header = self.chain.finish_block()?;
        self.executed = true;
        Ok((header.state_checksum, outcomes))
    }

    /// Makes the executed block durable.
    pub fn commit(&mut self) -> Result<(), ChainError> {
        self.executed = false;
        self.chain.sync()
    }

    /// The committed value of `contract`'s storage key `key`.
    pub fn get(&self, contract: Name, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        self.chain.get(contract, key)
    }
}
