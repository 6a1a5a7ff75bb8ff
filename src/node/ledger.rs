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
//!
//! A node that joins by state sync gets no InitChain: it reads the same facts from the
//! network's genesis file ([`Network::from_genesis_file`]) and writes `node.json` once the
//! restored store is in place ([`Ledger::install`]).
//!
//! ```text
//! DIR/node.json        what genesis fixed (chain id, proposers, snapshot schedule)
//! DIR/store/           the chain's log store: only ever created whole (InitChain, or the
//!                      rename that ends a restore)
//! DIR/snapshots/       this node's snapshots, served to joining peers
//! DIR/restore/         a restore in progress (the chunks received so far)
//! DIR/restore-store/   the store a restore writes, renamed to store/ when complete
//! DIR/store.replaced/  the store a restore replaced, until the rename is durable
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
pub use tally_chain::Genesis;
use tally_chain::crypto::ResolvedKeys;
use tally_chain::snapshot::{SnapshotSchedule, SnapshotStore};
use tally_chain::{
    BlockHeader, Chain, ChainConfig, ChainError, Fee, FeeSchedule, IdSet, Name, PreparedTx,
    StateStore, TxError, TxId, TxResult, Usage,
};
use tally_host_api::Abort;
use tally_runtime::{Outcome, Runtime, RuntimeConfig};

use crate::common::fs::{rename_durably, write_atomic};
use crate::common::store::{StoreKind, open_store};

/// What the committed window decides about a transaction: its id (a duplicate of a committed
/// one is rejected), when it expires and the block it names (number, prefix). What
/// [`Ledger::takeable`] holds a proposal's transactions to.
#[derive(Debug, Clone, Copy)]
pub struct TxFacts {
    /// Its id.
    pub id: TxId,
    /// Its expiration.
    pub expiration_ms: u64,
    /// Its reference block's number and prefix.
    pub reference: (u16, u32),
}

/// The facts of `txs`, in order.
pub fn facts(txs: &[PreparedTx]) -> Vec<TxFacts> {
    txs.iter()
        .map(|t| {
            let tx = &t.tx.transaction;
            TxFacts {
                id: t.id,
                expiration_ms: tx.expiration_ms,
                reference: (tx.ref_block_num, tx.ref_block_prefix),
            }
        })
        .collect()
}

/// Version of the node's data-directory layout: 2 stores blocks whose transactions have the
/// compact encoding of issue 26 (whatever the store backend).
const LAYOUT_VERSION: u32 = 2;

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
    /// When the chain takes snapshots: a consensus parameter, from genesis. Absent: the
    /// chain's default schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshots: Option<SnapshotParams>,
    /// The height of the snapshot this node restored by state sync, if it joined that way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state_synced_at: Option<u64>,
}

/// When a network takes snapshots (`app_state.snapshots`): every `interval` blocks (0:
/// never), their digest committed `delay` blocks later, in state chunks of `chunk_bytes`
/// ([`SnapshotSchedule`]). Every node must agree: the digest is in the block headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotParams {
    /// Blocks between snapshots (0: none).
    pub interval: u64,
    /// Blocks between a snapshot's height and the header that commits its digest.
    pub delay: u64,
    /// A state chunk is cut once it holds this many bytes (absent: the chain's
    /// [`tally_chain::snapshot::CHUNK_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_bytes: Option<u32>,
}

impl From<SnapshotParams> for SnapshotSchedule {
    fn from(p: SnapshotParams) -> Self {
        let every = SnapshotSchedule::every(p.interval, p.delay);
        match p.chunk_bytes {
            Some(bytes) => every.with_chunk_bytes(bytes),
            None => every,
        }
    }
}

/// What a node must know of its network besides the state, fixed by genesis: the chain id,
/// the genesis time, who takes each proposer's tips and the snapshot schedule. InitChain
/// brings it to a node that starts from genesis; a node that joins by state sync gets no
/// InitChain and reads it from the network's genesis file.
#[derive(Debug, Clone)]
pub struct Network {
    file: NodeFile,
}

/// The parts of a CometBFT `genesis.json` a joining node reads. The accounts and
/// allocations of `app_state` (millions, on a large network) are skipped as they stream
/// past, never held.
#[derive(Deserialize)]
struct GenesisDoc {
    chain_id: String,
    genesis_time: String,
    #[serde(default)]
    app_state: GenesisParams,
}

#[derive(Default, Deserialize)]
struct GenesisParams {
    #[serde(default)]
    proposers: BTreeMap<String, String>,
    #[serde(default)]
    snapshots: Option<SnapshotParams>,
}

impl Network {
    /// What InitChain gives: `genesis_time_ms` is CometBFT's genesis time.
    fn new(
        chain_id: &str,
        proposers: &BTreeMap<String, String>,
        snapshots: Option<SnapshotParams>,
        genesis_time_ms: u64,
        genesis: Option<&Genesis>,
    ) -> anyhow::Result<Self> {
        let proposers = proposer_map(proposers, genesis)?;
        Ok(Self {
            file: NodeFile {
                version: LAYOUT_VERSION,
                chain_id: chain_id.to_string(),
                genesis_time_ms: genesis_time_ms.saturating_sub(1),
                // Upper case, as CometBFT spells addresses, whatever the genesis file used.
                proposers: proposers
                    .iter()
                    .map(|(a, n)| (hex::encode_upper(a), n.to_string()))
                    .collect(),
                snapshots,
                state_synced_at: None,
            },
        })
    }

    /// Reads a CometBFT `genesis.json` (the one the node's CometBFT runs with).
    pub fn from_genesis_file(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot read the genesis file {}", path.display()))?;
        let doc: GenesisDoc =
            serde_json::from_reader(std::io::BufReader::new(file)).with_context(|| {
                format!(
                    "{} is not a CometBFT genesis file with a Tally app_state",
                    path.display()
                )
            })?;
        let time_ms = super::rpc::rfc3339_ms(&doc.genesis_time);
        if time_ms == 0 {
            bail!(
                "{}: genesis_time {:?} is not an RFC 3339 UTC time",
                path.display(),
                doc.genesis_time
            );
        }
        Self::new(
            &doc.chain_id,
            &doc.app_state.proposers,
            doc.app_state.snapshots,
            time_ms,
            None,
        )
        .with_context(|| format!("{} is not valid", path.display()))
    }

    /// The network's chain id.
    pub fn chain_id(&self) -> &str {
        &self.file.chain_id
    }
}

/// The genesis `app_state` of a Tally network under CometBFT: Tally's genesis, who takes
/// each proposer's tips, and when the chain takes snapshots.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppState {
    /// The chain's initial state.
    #[serde(flatten)]
    pub genesis: Genesis,
    /// The account that takes the tips of the blocks a validator proposes, by the validator's
    /// address (20 bytes, hex, as `genesis.json`'s `validators[].address`).
    #[serde(default)]
    pub proposers: BTreeMap<String, String>,
    /// When the chain takes snapshots for state sync (absent: the chain's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotParams>,
    /// Accounts genesis creates besides those it lists, generated as `tally bench` makes
    /// them: a devnet of millions of accounts, whose list would not fit in an ABCI message
    /// (InitChain carries `genesis.json`'s `app_state`, and ABCI messages stop at 128 MiB:
    /// about 450,000 listed accounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<GeneratedAccounts>,
}

/// Accounts a genesis generates (`tally_bench::workload::accounts_source`): `accounts`
/// accounts named as `tally bench` names them (`u1`, `u2`, …), each with a key of `seed`'s
/// pool, the benchmark's native coins and a simplecoin balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GeneratedAccounts {
    /// How many.
    pub accounts: u64,
    /// The seed of their keys.
    pub seed: u64,
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
    /// The next block's fee prices, per dimension.
    #[serde(default)]
    pub next_prices: tally_chain::fee::Prices,
    /// Coins burned in fees since genesis.
    #[serde(default)]
    pub fees_burned: u64,
}

/// The chain as the node drives it.
pub struct Ledger {
    chain: Chain,
    /// Validator address → the account its blocks' tips go to.
    proposers: BTreeMap<[u8; 20], Name>,
    /// The snapshot height this node joined at by state sync, if it did.
    state_synced_at: Option<u64>,
    /// Transactions run speculatively in parallel since the node started, and of them those
    /// whose run stood (`tally node --metrics`).
    speculation: (u64, u64),
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
        snapshots: file
            .snapshots
            .map_or(SnapshotSchedule::NEVER, SnapshotSchedule::from),
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

/// Where a restore writes its store before the rename that makes it the node's.
pub fn restore_store_dir(dir: &Path) -> PathBuf {
    dir.join("restore-store")
}

/// Where the store a restore replaces waits until the restored one is durably in place.
fn replaced_store_dir(dir: &Path) -> PathBuf {
    dir.join("store.replaced")
}

/// Reads `DIR/node.json`, if there is one.
fn read_node_file(dir: &Path) -> anyhow::Result<Option<NodeFile>> {
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
    Ok(Some(file))
}

/// Finishes or undoes what a crash left of [`Ledger::install`], so that `DIR/store` is
/// whole: the store it was replacing goes back if the restored one never got in place, or
/// away if it did. Returns whether anything was left.
pub fn recover_install(dir: &Path) -> anyhow::Result<bool> {
    let replaced = replaced_store_dir(dir);
    if !replaced.exists() {
        return Ok(false);
    }
    if store_dir(dir).exists() {
        std::fs::remove_dir_all(&replaced)
            .with_context(|| format!("cannot remove {}", replaced.display()))?;
    } else {
        rename_durably(&replaced, &store_dir(dir))?;
    }
    Ok(true)
}

impl Ledger {
    /// Opens the chain in `dir`, or `None` if InitChain has not created one yet. It keeps
    /// `retain_blocks` blocks below its head (0: every block).
    pub fn open(
        dir: &Path,
        retain_blocks: u64,
        snapshots: &Arc<SnapshotStore>,
    ) -> anyhow::Result<Option<Self>> {
        let Some(file) = read_node_file(dir)? else {
            return Ok(None);
        };
        let config = chain_config(&file, retain_blocks);
        let store = open_store(
            StoreKind::Log,
            &store_dir(dir),
            config.retain_blocks,
            tally_chain::Access::ReadWrite,
        )?;
        let mut chain = Chain::open(runtime(dir)?, store, config)?;
        chain.set_snapshots(snapshots.clone())?;
        let proposers = proposer_map(&file.proposers, None)
            .with_context(|| format!("{} is not valid", dir.join("node.json").display()))?;
        Ok(Some(Self {
            chain,
            proposers,
            state_synced_at: file.state_synced_at,
            speculation: (0, 0),
        }))
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
        snapshots: &Arc<SnapshotStore>,
    ) -> anyhow::Result<Self> {
        let genesis = &state.genesis;
        let network = Network::new(
            chain_id,
            &state.proposers,
            state.snapshots,
            genesis_time_ms,
            Some(genesis),
        )?;
        let file = network.file;
        let proposers = proposer_map(&file.proposers, None)?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let config = chain_config(&file, retain_blocks);
        // A store left by an InitChain that crashed before node.json was written is replaced.
        let _ = std::fs::remove_dir_all(store_dir(dir));
        let store = open_store(
            StoreKind::Log,
            &store_dir(dir),
            config.retain_blocks,
            tally_chain::Access::ReadWrite,
        )?;
        let mut chain = match state.generated {
            None => Chain::create(runtime(dir)?, store, config, genesis)?,
            Some(g) => {
                let mut builder = Chain::genesis(runtime(dir)?, store, config)?;
                builder.apply(genesis)?;
                builder.finish_with(&tally_bench::workload::accounts_source(g.accounts, g.seed))?
            }
        };
        chain.sync()?;
        chain.set_snapshots(snapshots.clone())?;
        write_atomic(
            &dir.join("node.json"),
            serde_json::to_string_pretty(&file)?.as_bytes(),
            0o644,
        )?;
        Ok(Self {
            chain,
            proposers,
            state_synced_at: None,
            speculation: (0, 0),
        })
    }

    /// A fresh, empty store in [`restore_store_dir`] for a restore to write (whatever an
    /// earlier attempt left there is removed first).
    pub fn restore_store(dir: &Path) -> anyhow::Result<Box<dyn StateStore>> {
        let path = restore_store_dir(dir);
        if path.exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
        open_store(
            StoreKind::Log,
            &path,
            u64::MAX,
            tally_chain::Access::ReadWrite,
        )
    }

    /// Makes the store a restore wrote in [`restore_store_dir`] (closed, complete, durable)
    /// the node's store, and opens the chain on it. `network` is what genesis fixed (kept
    /// from `node.json` if the directory has one, else from the genesis file); `head` is the
    /// restored head, at the snapshot's height.
    ///
    /// Crash safety: the restored store becomes `DIR/store` by one rename, after the store it
    /// replaces (a node that restarted mid-sync has one) moved aside to
    /// `DIR/store.replaced`; each rename is made durable (the directory is synced) before the
    /// next step. A crash between them leaves a whole store at one of the two names, which
    /// [`recover_install`] puts back at start; `node.json` is written last, so a store
    /// without it is never opened (the node then reports height 0 and syncs again).
    pub fn install(
        dir: &Path,
        network: &Network,
        head: &BlockHeader,
        retain_blocks: u64,
        snapshots: &Arc<SnapshotStore>,
    ) -> anyhow::Result<Self> {
        let store = store_dir(dir);
        let replaced = replaced_store_dir(dir);
        if replaced.exists() {
            std::fs::remove_dir_all(&replaced)
                .with_context(|| format!("cannot remove {}", replaced.display()))?;
        }
        if store.exists() {
            rename_durably(&store, &replaced)?;
        }
        rename_durably(&restore_store_dir(dir), &store)?;
        let file = NodeFile {
            state_synced_at: Some(head.height),
            ..network.file.clone()
        };
        write_atomic(
            &dir.join("node.json"),
            serde_json::to_string_pretty(&file)?.as_bytes(),
            0o644,
        )?;
        crate::common::fs::sync_dir(dir)?;
        if replaced.exists() {
            std::fs::remove_dir_all(&replaced)
                .with_context(|| format!("cannot remove {}", replaced.display()))?;
        }
        let ledger =
            Self::open(dir, retain_blocks, snapshots)?.context("node.json was just written")?;
        if ledger.chain.head().height != head.height || ledger.chain.head_id() != head.id() {
            bail!(
                "the restored store opened at height {} with another head than the restore \
                 finished at (height {}): remove {} and start the node again to sync anew",
                ledger.chain.head().height,
                head.height,
                store.display()
            );
        }
        Ok(ledger)
    }

    /// What genesis fixed for this node's network.
    pub fn network(dir: &Path) -> anyhow::Result<Option<Network>> {
        Ok(read_node_file(dir)?.map(|file| Network { file }))
    }

    /// The height of the snapshot this node restored when it joined by state sync (`None`:
    /// it replayed from genesis).
    pub fn state_synced_at(&self) -> Option<u64> {
        self.state_synced_at
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
        let fees = self
            .chain
            .fee_state()
            .unwrap_or_else(|e| super::app::fatal("reading the fee state", e));
        Head {
            height: h.height,
            time_ms: h.timestamp_ms,
            app_hash: hex::encode(self.chain.head_id()),
            state_checksum: hex::encode(h.state_checksum),
            ref_block_num,
            ref_block_prefix,
            max_lifetime_ms: self.chain.config().max_tx_lifetime_ms,
            next_prices: fees.prices,
            fees_burned: fees.burned,
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
        // A signature without its key against the committed key (the block's own changes are
        // seen when it executes, which verifies again under any other key).
        tally_chain::pipeline::verify_batched(
            txs,
            &self.chain.committed_keys(),
            tally_chain::crypto::Need::Each,
        );
        // Block times must increase; CometBFT's do, by at least a millisecond. The guard keeps
        // the node alive (and deterministic: it depends only on the chain) if one does not.
        let time_ms = time_ms.max(self.chain.head().timestamp_ms + 1);
        let proposer = self.proposer_account(proposer);
        let executed = self.chain.execute_block_by(time_ms, proposer, txs)?;
        self.speculation.0 += u64::from(executed.speculated);
        self.speculation.1 += u64::from(executed.confirmed);
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
        // A snapshot that could not be published (a full disk) only stops this node serving
        // it; the operator hears why. One whose merge could not start fails the block that
        // commits to it, with the reason, until the node restarts.
        if let Some(e) = self.chain.take_snapshot_failure() {
            eprintln!(
                "tally node: snapshot at height {}: {e}",
                self.chain.head().height
            );
        }
        Ok(())
    }

    /// Transactions run speculatively in parallel since the node started, and of them those
    /// whose run stood.
    pub fn speculation(&self) -> (u64, u64) {
        self.speculation
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

    /// The first of `txs` committed already ([`tally_chain::Chain::is_committed`]).
    pub fn first_committed(&self, txs: &[PreparedTx]) -> Option<usize> {
        txs.iter().position(|t| self.chain.is_committed(&t.id))
    }

    /// The reference blocks of `txs` that the committed window does not know, in order, with
    /// the index of the transaction naming each ([`Chain::knows_reference`]).
    pub fn unknown_references(&self, txs: &[PreparedTx]) -> Vec<(usize, u16, u32)> {
        txs.iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    i,
                    t.tx.transaction.ref_block_num,
                    t.tx.transaction.ref_block_prefix,
                )
            })
            .filter(|&(_, num, prefix)| !self.chain.knows_reference(num, prefix))
            .collect()
    }

    /// Which of `bundles` (a proposal's, in order; `None`: one left out already) the next
    /// block, at `time_ms`, can take whole, and otherwise its first transaction it would
    /// reject for no fee, with why: expired, expiring further ahead than a transaction may
    /// live, or naming a block the chain has not committed
    /// ([`tally_chain::Chain::check_timing`], the block's own rule), or a duplicate of a
    /// committed transaction or of one in a bundle taken before it. A subset of what it takes,
    /// in any order, it takes whole again: what PrepareProposal proposes by it, ProcessProposal
    /// accepts by it.
    pub fn takeable(
        &self,
        time_ms: u64,
        bundles: &[Option<Vec<TxFacts>>],
    ) -> Vec<Result<(), (usize, TxError)>> {
        let mut taken = IdSet::default();
        bundles
            .iter()
            .map(|facts| {
                let Some(facts) = facts else {
                    return Ok(());
                };
                let mut ids = IdSet::with_capacity_and_hasher(facts.len(), taken.hasher().clone());
                for (i, f) in facts.iter().enumerate() {
                    self.chain
                        .check_timing(time_ms, f.expiration_ms, f.reference)
                        .map_err(|e| (i, e))?;
                    if self.chain.is_committed(&f.id) || taken.contains(&f.id) || !ids.insert(f.id)
                    {
                        return Err((i, TxError::Duplicate(hex::encode(f.id))));
                    }
                }
                taken.extend(ids);
                Ok(())
            })
            .collect()
    }

    /// The keys the committed state registers for the accounts of `txs`' signatures, read now
    /// so that they can be verified later without the ledger; a read that fails is an error,
    /// not an account without a key.
    pub fn committed_keys_of(&self, txs: &[PreparedTx]) -> Result<ResolvedKeys, ChainError> {
        let keys = self.chain.committed_keys();
        ResolvedKeys::try_read(txs.iter().map(|t| &t.tx), |a| keys.read(a))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(dir: &Path, name: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("which"), name).unwrap();
    }

    fn which(dir: &Path) -> Option<String> {
        std::fs::read_to_string(dir.join("which")).ok()
    }

    #[test]
    fn an_install_cut_before_its_rename_puts_the_replaced_store_back() {
        let dir = tempfile::tempdir().unwrap();
        mark(&replaced_store_dir(dir.path()), "old");
        mark(&restore_store_dir(dir.path()), "new");
        assert!(recover_install(dir.path()).unwrap());
        assert_eq!(which(&store_dir(dir.path())).as_deref(), Some("old"));
        assert!(!replaced_store_dir(dir.path()).exists());
    }

    #[test]
    fn an_install_cut_after_its_rename_keeps_the_restored_store() {
        let dir = tempfile::tempdir().unwrap();
        mark(&replaced_store_dir(dir.path()), "old");
        mark(&store_dir(dir.path()), "new");
        assert!(recover_install(dir.path()).unwrap());
        assert_eq!(which(&store_dir(dir.path())).as_deref(), Some("new"));
        assert!(!replaced_store_dir(dir.path()).exists());
        assert!(
            !recover_install(dir.path()).unwrap(),
            "nothing left the second time"
        );
    }

    #[test]
    fn a_joining_node_reads_its_network_from_the_genesis_file_without_its_accounts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("genesis.json");
        let address = "AB".repeat(20);
        std::fs::write(
            &path,
            serde_json::to_vec(&serde_json::json!({
                "chain_id": "net",
                "genesis_time": "2026-01-01T00:00:00.5Z",
                "app_state": {
                    "accounts": [{"name": "val1", "key": "00".repeat(32), "balance": 1}],
                    "proposers": {address.clone(): "val1"},
                    "snapshots": {"interval": 10, "delay": 5},
                },
            }))
            .unwrap(),
        )
        .unwrap();
        let n = Network::from_genesis_file(&path).unwrap();
        assert_eq!(n.chain_id(), "net");
        // As InitChain would give it: 1 ms before CometBFT's genesis time.
        assert_eq!(n.file.genesis_time_ms, 1_767_225_600_499);
        assert_eq!(
            n.file.proposers.get(&address).map(String::as_str),
            Some("val1")
        );
        let schedule: SnapshotSchedule = n.file.snapshots.unwrap().into();
        assert_eq!(schedule, SnapshotSchedule::every(10, 5));
        std::fs::write(&path, br#"{"chain_id": "net", "genesis_time": "soon"}"#).unwrap();
        let err = Network::from_genesis_file(&path).unwrap_err();
        assert!(format!("{err:#}").contains("RFC 3339"), "{err:#}");
    }
}
