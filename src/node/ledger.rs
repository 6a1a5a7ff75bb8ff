//! The node's view of tally-chain: create from genesis, execute a block, commit, read.
//!
//! Everything the ABCI application needs from the chain library goes through this file, so
//! the application does not depend on how the library spells it.
//!
//! Proposers: a block's tips go to the account the network's genesis names for the block's
//! proposer (FinalizeBlock's `proposer_address`, a CometBFT validator address): the genesis
//! `app_state` is Tally's [`Genesis`] plus `proposers`, a map from validator address (hex,
//! as CometBFT's `genesis.json` spells it) to account name ([`AppState`]). InitChain writes it
//! to `node.json`, so every node, restarted or not, maps a proposer the same way; a proposer
//! with no entry pays its block's tips to the system account.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
pub use tally_chain::Genesis;
use tally_chain::{
    Chain, ChainConfig, ChainError, Fee, FeeSchedule, Name, PreparedTx, TxError, TxResult, Usage,
};
use tally_host_api::Abort;
use tally_runtime::{Outcome, Runtime, RuntimeConfig};

use crate::common::fs::write_atomic;
use crate::common::store::{StoreKind, open_store};

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
    /// The account each validator's blocks pay their tips to, by validator address (hex,
    /// upper case). Absent in a directory written before fees: every proposer pays the system
    /// account.
    #[serde(default)]
    proposers: BTreeMap<String, String>,
}

/// The genesis `app_state` of a Tally network under CometBFT: Tally's genesis, and who takes
/// each proposer's tips.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppState {
    /// The chain's initial state.
    #[serde(flatten)]
    pub genesis: Genesis,
    /// The account that takes the tips of the blocks a validator proposes, by the validator's
    /// address (20 bytes, hex, as `genesis.json`'s `validators[].address`).
    #[serde(default)]
    pub proposers: BTreeMap<String, String>,
}

/// Validator address → account, checked: each address 20 bytes of hex, each account a name
/// that genesis creates.
fn proposer_map(
    proposers: &BTreeMap<String, String>,
    genesis: Option<&Genesis>,
) -> anyhow::Result<BTreeMap<[u8; 20], Name>> {
    proposers
        .iter()
        .map(|(address, account)| {
            let bytes: [u8; 20] = hex::decode(address)
                .ok()
                .and_then(|b| b.try_into().ok())
                .with_context(|| {
                    format!("proposer address {address:?} is not 20 bytes of hex (a CometBFT validator address)")
                })?;
            let name: Name = account
                .parse()
                .map_err(|e| anyhow::anyhow!("proposer account {account:?}: {e}"))?;
            if let Some(g) = genesis
                && !g.accounts.iter().any(|a| a.name == name)
            {
                bail!(
                    "the proposer account {name} of validator {address} is not among the genesis \
                     accounts: add it to app_state.accounts"
                );
            }
            Ok((bytes, name))
        })
        .collect()
}

/// What a block did with one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOutcome {
    /// Included; all its actions succeeded.
    Success {
        /// Fuel used.
        fuel: u64,
        /// The events its contracts emitted, in order.
        events: Vec<tally_chain::Event>,
        /// What it used of each fee dimension.
        usage: Usage,
        /// What it paid.
        fee: Fee,
    },
    /// Included; an action failed, so it changed nothing but its fee.
    Failed {
        /// Fuel used.
        fuel: u64,
        /// What it used of each fee dimension.
        usage: Usage,
        /// What it paid.
        fee: Fee,
        /// The index of the failing action, if one failed.
        action: Option<usize>,
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
    /// CometBFT's app hash, hex: the id of Tally's head block (BLAKE3 of its header), so the
    /// hash CometBFT's light client verifies commits to the whole header: the state checksum,
    /// the fee prices and the digest of the last snapshot.
    pub app_hash: String,
    /// The head block's chained state checksum, hex.
    pub state_checksum: String,
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
    /// Validator address → the account its blocks' tips go to.
    proposers: BTreeMap<[u8; 20], Name>,
}

/// Blocks a node keeps below its head by default (`tally node --retain-blocks`): the depth the
/// Vryx test pruned past. No validity rule reads them (the replay window is chain state), so
/// the number only bounds what `tally blocks` and CometBFT's own block store can show.
pub const DEFAULT_RETAIN_BLOCKS: u64 = 512;

/// The closest CometBFT blocks come under `tally devnet`'s `timeout_commit` of 10 ms. Under
/// consensus the block time is CometBFT's; this only sets `ChainConfig::block_interval_ms`,
/// which the node never uses to place blocks.
const MIN_BLOCK_SPACING_MS: u64 = 10;

/// `retain_blocks`: blocks kept below the head, 0 for every block.
fn chain_config(file: &NodeFile, retain_blocks: u64) -> ChainConfig {
    ChainConfig {
        genesis_time_ms: file.genesis_time_ms,
        block_interval_ms: MIN_BLOCK_SPACING_MS,
        retain_blocks: if retain_blocks == 0 {
            u64::MAX
        } else {
            retain_blocks
        },
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
    /// Opens the chain in `dir`, or `None` if InitChain has not created one yet. It keeps
    /// `retain_blocks` blocks below its head (0: every block).
    pub fn open(dir: &Path, retain_blocks: u64) -> anyhow::Result<Option<Self>> {
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
        let config = chain_config(&file, retain_blocks);
        let store = open_store(
            StoreKind::Log,
            &store_dir(dir),
            config.retain_blocks,
            tally_chain::Access::ReadWrite,
        )?;
        let chain = Chain::open(runtime(dir)?, store, config)?;
        let proposers = proposer_map(&file.proposers, None)
            .with_context(|| format!("{} is not valid", path.display()))?;
        Ok(Some(Self { chain, proposers }))
    }

    /// Creates the chain in `dir` from `state` (InitChain): Tally's block 0 is the state
    /// CometBFT's height 0 stands for, so heights are the same on both sides. It keeps
    /// `retain_blocks` blocks below its head (0: every block).
    pub fn create(
        dir: &Path,
        chain_id: &str,
        state: &AppState,
        genesis_time_ms: u64,
        retain_blocks: u64,
    ) -> anyhow::Result<Self> {
        let genesis = &state.genesis;
        let proposers = proposer_map(&state.proposers, Some(genesis))?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let file = NodeFile {
            version: LAYOUT_VERSION,
            chain_id: chain_id.to_string(),
            genesis_time_ms: genesis_time_ms.saturating_sub(1),
            // Upper case, as CometBFT spells addresses, whatever the genesis file used.
            proposers: proposers
                .iter()
                .map(|(a, n)| (hex::encode_upper(a), n.to_string()))
                .collect(),
        };
        let config = chain_config(&file, retain_blocks);
        // A store left by an InitChain that crashed before node.json was written is replaced.
        let _ = std::fs::remove_dir_all(store_dir(dir));
        let store = open_store(
            StoreKind::Log,
            &store_dir(dir),
            config.retain_blocks,
            tally_chain::Access::ReadWrite,
        )?;
        let mut chain = Chain::create(runtime(dir)?, store, config, genesis)?;
        chain.sync()?;
        write_atomic(
            &dir.join("node.json"),
            serde_json::to_string_pretty(&file)?.as_bytes(),
            0o644,
        )?;
        Ok(Self { chain, proposers })
    }

    /// The account that takes the tips of a block proposed by the validator at `address`:
    /// the one genesis names, else the system account.
    pub fn proposer_account(&self, address: &[u8]) -> Name {
        <[u8; 20]>::try_from(address)
            .ok()
            .and_then(|a| self.proposers.get(&a).copied())
            .unwrap_or(tally_chain::system::SYSTEM)
    }

    /// The chain's fee schedule (fixed at genesis).
    pub fn fee_schedule(&self) -> FeeSchedule {
        self.chain.config().fees
    }

    /// The lowest height whose block the store still holds: what CometBFT may prune below
    /// (`retain_height`).
    pub fn first_retained(&self) -> u64 {
        self.chain.store().first_retained()
    }

    /// The last committed block.
    pub fn head(&self) -> Head {
        let h = self.chain.head();
        let (ref_block_num, ref_block_prefix) = self.chain.tapos();
        Head {
            height: h.height,
            time_ms: h.timestamp_ms,
            app_hash: hex::encode(self.chain.head_id()),
            state_checksum: hex::encode(h.state_checksum),
            ref_block_num,
            ref_block_prefix,
            max_lifetime_ms: self.chain.config().max_tx_lifetime_ms,
        }
    }

    /// CometBFT's app hash of the committed head: its block id. The state checksum alone
    /// would not do: a state-synced node checks a snapshot against the digest a header
    /// carries, and only a hash of the whole header lets the light client vouch for it.
    pub fn app_hash(&self) -> [u8; 32] {
        self.chain.head_id()
    }

    /// Executes `txs` as the next block at `time_ms` (CometBFT's block time), proposed by the
    /// validator at `proposer` (its tips go to [`Ledger::proposer_account`]): the new app hash
    /// (the executed block's id, as [`Ledger::app_hash`]) and one outcome per transaction. Transactions not verified yet are verified here, in
    /// batches on all cores. `Err` is the node's own fault.
    ///
    /// A block executed and not committed is dropped first: CometBFT finalizes a height again
    /// only when the first attempt never reached Commit.
    pub fn execute(
        &mut self,
        time_ms: u64,
        proposer: &[u8],
        txs: &mut [PreparedTx],
    ) -> Result<([u8; 32], Vec<TxOutcome>), ChainError> {
        self.chain.discard();
        tally_chain::pipeline::verify_batched(txs);
        // Block times must increase; CometBFT's do, by at least a millisecond. The guard keeps
        // the node alive (and deterministic: it depends only on the chain) if one does not.
        let time_ms = time_ms.max(self.chain.head().timestamp_ms + 1);
        let proposer = self.proposer_account(proposer);
        let executed = self.chain.execute_block_by(time_ms, proposer, txs)?;
        let outcomes = executed
            .results
            .into_iter()
            .map(|r| match r {
                TxResult::Rejected(e) => TxOutcome::Rejected(e),
                TxResult::Included(receipt) => match receipt.outcome {
                    Outcome::Success => TxOutcome::Success {
                        fuel: receipt.fuel_used,
                        events: receipt.events,
                        usage: receipt.usage,
                        fee: receipt.fee,
                    },
                    Outcome::Failure(abort) => TxOutcome::Failed {
                        fuel: receipt.fuel_used,
                        usage: receipt.usage,
                        fee: receipt.fee,
                        action: receipt.failed_action,
                        abort,
                    },
                },
            })
            .collect();
        Ok((executed.header.id(), outcomes))
    }

    /// Makes the executed block durable before returning: CometBFT records the height as
    /// committed by the application once Commit answers.
    pub fn commit(&mut self) -> Result<(), ChainError> {
        self.chain.commit(tally_chain::Durability::Immediate)?;
        Ok(())
    }

    /// The committed value of `contract`'s storage key `key`.
    pub fn get(&self, contract: Name, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        self.chain.get(contract, key)
    }

    /// Runs `contract`'s read-only query `method` against the committed state
    /// ([`Chain::query`]).
    pub fn query(
        &self,
        contract: Name,
        method: Name,
        data: &[u8],
    ) -> Result<tally_runtime::Receipt, ChainError> {
        self.chain.query(contract, method, data)
    }

    /// One page of a contract's committed entries, bounded for a remote caller
    /// ([`super::keys::MAX_KEYS_PER_QUERY`], [`super::keys::MAX_PAGE_BYTES`]).
    pub fn keys(
        &self,
        request: &super::keys::KeysRequest,
    ) -> Result<super::keys::KeysPage, ChainError> {
        use super::keys::{MAX_KEYS_PER_QUERY, MAX_PAGE_BYTES, page};
        page(&self.chain, request, MAX_KEYS_PER_QUERY, MAX_PAGE_BYTES)
    }

    /// The fee prices, the schedule and the last `blocks` blocks' usage (`tally fees`).
    pub fn fees(&self, blocks: u64) -> Result<crate::commands::fees::FeesView, ChainError> {
        crate::commands::fees::view(&self.chain, blocks)
    }

    /// The native coins of `account`.
    pub fn native_balance(&self, account: Name) -> Result<u64, ChainError> {
        self.chain.native_balance(account)
    }

    /// The registered public key of `account`, if it exists.
    pub fn account_key(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        self.chain.account_key(account)
    }

    /// The sha256 of the code `account` runs, if any.
    pub fn code_hash(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        self.chain.code_hash(account)
    }
}
