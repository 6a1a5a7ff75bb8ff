//! A local chain in a data directory: its configuration, keystore, store and ABIs.
//!
//! ```text
//! DIR/chain.json      chain parameters fixed at genesis (and the store kind)
//! DIR/keystore.json   account → ed25519 secret key, hex (owner-only permissions)
//! DIR/store/          the state store
//! DIR/modules/        the compiled-module cache
//! DIR/abi/NAME.json   action field lists, for readable `tally push` arguments
//! DIR/abi/NAME.code   the sha256 of the code NAME ran when its ABI was kept, hex
//! DIR/receipts.jsonl  the receipt of each pushed transaction, for `tally tx`
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use tally_chain::{
    Access, Action, Chain, ChainConfig, FeeSchedule, Genesis, Name, SignedTransaction, Transaction,
    TxResult,
};
use tally_runtime::{Runtime, RuntimeConfig};

use super::receipt::{self, Committed};
use super::target::TX_LIFETIME_MS;
use crate::common::fs::write_atomic;
use crate::common::store::{StoreKind, open_store};

/// Version of the data-directory layout: 2 added the fee schedule to chain.json (and the
/// store's blocks carry fees); 3 the compact transaction encoding of issue 26 in the blocks.
const LAYOUT_VERSION: u32 = 3;

/// Native coins a local chain's system account holds at genesis: every coin of the chain,
/// which it hands out to the accounts it creates (`tally account create --fund`).
pub const SUPPLY: u64 = 1_000_000_000_000_000_000;

/// `DIR/chain.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChainFile {
    pub version: u32,
    pub store: String,
    pub genesis_time_ms: u64,
    pub block_interval_ms: u64,
    pub max_tx_lifetime_ms: u64,
    pub retain_blocks: u64,
    pub system_key: String,
    /// How the chain prices its use (`FeeSchedule::STANDARD` for a new directory).
    pub fees: FeeSchedule,
}

impl ChainFile {
    pub fn config(&self) -> ChainConfig {
        ChainConfig {
            genesis_time_ms: self.genesis_time_ms,
            block_interval_ms: self.block_interval_ms,
            max_tx_lifetime_ms: self.max_tx_lifetime_ms,
            retain_blocks: self.retain_blocks,
            check_signatures: true,
            fees: self.fees,
            // A local chain is never joined by state sync.
            snapshots: tally_chain::SnapshotSchedule::NEVER,
        }
    }

    /// The system account's public key, which genesis registers.
    pub fn system_key(&self) -> anyhow::Result<[u8; 32]> {
        hex::decode(&self.system_key)
            .ok()
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .context("chain.json: system_key is not 32 bytes of hex")
    }

    pub fn store_kind(&self) -> anyhow::Result<StoreKind> {
        match self.store.as_str() {
            "log" => Ok(StoreKind::Log),
            "rocksdb" => Ok(StoreKind::Rocksdb),
            other => bail!("chain.json: unknown store {other:?} (expected log or rocksdb)"),
        }
    }
}

/// `DIR/keystore.json`: account name → secret key (hex).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Keystore {
    pub accounts: BTreeMap<String, String>,
}

impl Keystore {
    pub fn key(&self, account: Name) -> anyhow::Result<SigningKey> {
        let hex_key = self.accounts.get(&account.to_string()).with_context(|| {
            format!("no key for {account} in the keystore: create it with `tally account create {account}`")
        })?;
        let secret: [u8; 32] = hex::decode(hex_key)
            .ok()
            .and_then(|k| k.try_into().ok())
            .with_context(|| format!("keystore: the key of {account} is not 32 bytes of hex"))?;
        Ok(SigningKey::from_bytes(&secret))
    }

    pub fn insert(&mut self, account: Name, key: &SigningKey) {
        self.accounts
            .insert(account.to_string(), hex::encode(key.to_bytes()));
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {}: is this a Tally data directory? (create one with `tally init --data DIR`)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
}

/// The runtime of a local chain, with its module cache in the data directory. A reader keeps
/// compiled modules in memory only: read-only commands write no file, the cache's included.
/// `trace` gives failed receipts their trap locations (`tally push --trace`).
fn runtime(dir: &Path, access: Access, trace: bool) -> anyhow::Result<Arc<Runtime>> {
    Ok(Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: (access == Access::ReadWrite).then(|| dir.join("modules")),
        trace,
        ..RuntimeConfig::default()
    })?))
}

/// What a transaction offers to pay (`tally push --payer --max-fee --tip`); unset: its first
/// authorizer pays, up to [`tally_chain::tx::DEFAULT_MAX_FEE`], no tip.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offer {
    /// The paying account (it signs too).
    pub payer: Option<Name>,
    /// The most it pays.
    pub max_fee: Option<u64>,
    /// What it offers the block's proposer.
    pub tip: u64,
}

impl Offer {
    /// Sets `tx`'s payer, max fee and tip as offered.
    pub fn apply(&self, tx: &mut Transaction) {
        if let Some(payer) = self.payer {
            tx.payer = payer;
        }
        if let Some(max_fee) = self.max_fee {
            tx.max_fee = max_fee;
        }
        tx.tip = self.tip;
    }
}

/// An opened local chain.
pub struct Local {
    pub dir: PathBuf,
    pub keystore: Keystore,
    pub chain: Chain,
    /// What its transactions offer to pay.
    pub offer: Offer,
}

impl Local {
    /// Opens the chain in `dir` to push blocks. Its receipts carry traces (each action's
    /// fuel, console, calls and trap location), which the receipts log keeps for `tally tx`;
    /// the blocks are the same as without.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        Self::open_with(dir, Access::ReadWrite, true)
    }

    /// Opens the chain in `dir` to read it: no file in `dir` is written.
    pub fn open_read_only(dir: &Path) -> anyhow::Result<Self> {
        Self::open_with(dir, Access::ReadOnly, false)
    }

    fn open_with(dir: &Path, access: Access, trace: bool) -> anyhow::Result<Self> {
        let file: ChainFile = read_json(&dir.join("chain.json"))?;
        if file.version != LAYOUT_VERSION {
            bail!(
                "{} has data-directory layout version {}; this tally reads version {LAYOUT_VERSION}",
                dir.display(),
                file.version
            );
        }
        let keystore: Keystore = read_json(&dir.join("keystore.json"))?;
        let config = file.config();
        let system_key = file.system_key()?;
        let store = open_store(
            file.store_kind()?,
            &dir.join("store"),
            config.retain_blocks,
            access,
        )?;
        if store.head().is_none() {
            bail!(
                "{} has no genesis block: `tally init` did not finish; remove the directory and \
                 run it again",
                dir.display()
            );
        }
        let chain = Chain::open(runtime(dir, access, trace)?, store, config)?;
        if chain.account_key(tally_chain::system::SYSTEM)? != Some(system_key) {
            bail!(
                "{}: the store belongs to another chain (its system key differs from chain.json)",
                dir.display()
            );
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            keystore,
            chain,
            offer: Offer::default(),
        })
    }

    /// Creates a data directory: configuration, system key, keystore and genesis.
    pub fn init(dir: &Path, store: StoreKind) -> anyhow::Result<Self> {
        if dir.join("chain.json").exists() {
            bail!(
                "{} already holds a chain; nothing was changed (use another --data directory)",
                dir.display()
            );
        }
        if dir.join("store").exists() {
            bail!(
                "{} has a store but no chain.json: an earlier `tally init` did not finish; \
                 remove the directory and run it again",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let system = tally_chain::crypto::random_key()?;
        let defaults = ChainConfig::default();
        let file = ChainFile {
            version: LAYOUT_VERSION,
            store: store.label().to_string(),
            genesis_time_ms: defaults.genesis_time_ms,
            block_interval_ms: defaults.block_interval_ms,
            max_tx_lifetime_ms: defaults.max_tx_lifetime_ms,
            retain_blocks: defaults.retain_blocks,
            system_key: hex::encode(system.verifying_key().to_bytes()),
            fees: defaults.fees,
        };
        let mut keystore = Keystore::default();
        keystore.insert(tally_chain::system::SYSTEM, &system);
        write_atomic(
            &dir.join("keystore.json"),
            serde_json::to_string_pretty(&keystore)?.as_bytes(),
            0o600,
        )?;
        let mut genesis = Genesis::with_system_key(system.verifying_key().to_bytes());
        genesis.accounts[0].balance = SUPPLY;
        let config = file.config();
        let store = open_store(
            file.store_kind()?,
            &dir.join("store"),
            config.retain_blocks,
            Access::ReadWrite,
        )?;
        let mut chain = Chain::create(
            runtime(dir, Access::ReadWrite, false)?,
            store,
            config,
            &genesis,
        )?;
        // The genesis is on disk before chain.json says the directory holds a chain.
        chain.sync()?;
        drop(chain);
        // chain.json last: a directory without it is not a chain, so an interrupted init can
        // simply run again.
        write_atomic(
            &dir.join("chain.json"),
            serde_json::to_string_pretty(&file)?.as_bytes(),
            0o644,
        )?;
        Self::open(dir)
    }

    pub fn save_keystore(&self) -> anyhow::Result<()> {
        write_atomic(
            &self.dir.join("keystore.json"),
            serde_json::to_string_pretty(&self.keystore)?.as_bytes(),
            0o600,
        )
    }

    /// Signs `actions` with the keystore keys of `signers`, pushes them as one transaction in
    /// a new block, commits it, and keeps its receipt in the receipts log (for `tally tx`).
    pub fn push(&mut self, actions: Vec<Action>, signers: &[Name]) -> anyhow::Result<Committed> {
        let names = actions.iter().map(|a| (a.account, a.name)).collect();
        let signed = self.sign(actions, signers)?;
        let mut block = self.chain.run_block(vec![signed])?;
        // The block is committed with its sync in the background: it is reported only once
        // that sync is done (a failed one stops the store, and this command, with an error).
        self.chain.sync()?;
        let receipt = match block.results.pop() {
            Some(TxResult::Included(receipt)) => receipt,
            Some(TxResult::Rejected(e)) => {
                return Err(e).context("the transaction was rejected");
            }
            None => bail!("the block holds no result for the transaction"),
        };
        let committed = Committed::new(block.header.height, names, receipt);
        // After the block is durable: a crash between the two leaves the block without its
        // line, which `tally tx` then reads from the block itself.
        receipt::append(&self.dir, &committed)?;
        Ok(committed)
    }

    /// `actions` as the next block would take them, signed with the keystore keys of
    /// `signers`.
    pub fn sign(
        &self,
        actions: Vec<Action>,
        signers: &[Name],
    ) -> anyhow::Result<SignedTransaction> {
        let (ref_block_num, ref_block_prefix) = self.chain.tapos();
        let mut tx = Transaction::new(
            self.chain.next_block_time_ms() + TX_LIFETIME_MS,
            (ref_block_num, ref_block_prefix),
            actions,
        );
        self.offer.apply(&mut tx);
        let keys = with_payer(signers, tx.payer)
            .iter()
            .map(|s| Ok((*s, self.keystore.key(*s)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let refs: Vec<(Name, &SigningKey)> = keys.iter().map(|(n, k)| (*n, k)).collect();
        // A signer whose committed key is the one that signs leaves it out (32 bytes less a
        // signature, issue 26); an account not created yet carries it.
        let mut carry = Vec::new();
        for (name, key) in &keys {
            if self.chain.account_key(*name)? != Some(key.verifying_key().to_bytes()) {
                carry.push(*name);
            }
        }
        Ok(SignedTransaction::sign_with(tx, &refs, |n| {
            carry.contains(&n)
        }))
    }

    /// The ABI deployed with `contract`'s current code, if it was deployed with one.
    pub fn abi(&self, contract: Name) -> Option<super::abi::Abi> {
        super::target::find_abi(&self.dir.join("abi"), contract, &[], |c| {
            Ok(self.chain.code_hash(c)?)
        })
        .ok()
    }
}

/// `signers` and the payer, who signs too.
pub fn with_payer(signers: &[Name], payer: Name) -> Vec<Name> {
    let mut all = signers.to_vec();
    if !all.contains(&payer) {
        all.push(payer);
    }
    all
}

/// Opens the chain of a local-chain directory, or of a `tally bench --data` directory (which
/// has no keystore), read-only: for `tally blocks` and `tally verify`.
pub fn open_chain(dir: &Path) -> anyhow::Result<Chain> {
    if !dir.join("chain.json").exists() && dir.join("bench.json").exists() {
        let marker: serde_json::Value = read_json(&dir.join("bench.json"))?;
        let store = match marker["store"].as_str() {
            Some("log") => StoreKind::Log,
            Some("rocksdb") => StoreKind::Rocksdb,
            other => bail!(
                "{}: a bench run on store {other:?} keeps nothing on disk",
                dir.display()
            ),
        };
        let config = ChainConfig {
            check_signatures: marker["signed"].as_bool().unwrap_or(true),
            fees: match marker["fees"].as_str() {
                Some("free") => FeeSchedule::ZERO,
                _ => FeeSchedule::STANDARD,
            },
            ..ChainConfig::default()
        };
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
        let store = open_store(
            store,
            &dir.join("store"),
            config.retain_blocks,
            Access::ReadOnly,
        )?;
        return Ok(Chain::open(runtime, store, config)?);
    }
    Ok(Local::open_read_only(dir)?.chain)
}

/// Where a read-only command reads committed state: a data directory, or a running node.
#[derive(Debug, clap::Args)]
pub struct Source {
    /// The data directory.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "rpc",
        conflicts_with = "rpc"
    )]
    pub data: Option<PathBuf>,
    /// Ask a running node's CometBFT RPC instead (its committed state).
    #[arg(long, value_name = "URL")]
    pub rpc: Option<String>,
}

/// A [`Source`], opened.
pub enum Opened {
    /// A data directory, read only.
    Local(Box<Local>),
    /// A node, through its CometBFT RPC.
    Node(crate::node::rpc::Rpc),
}

impl Source {
    /// Opens the data directory read only, or names the node.
    pub fn open(&self) -> anyhow::Result<Opened> {
        match (&self.rpc, &self.data) {
            (Some(url), _) => Ok(Opened::Node(crate::node::rpc::Rpc::new(url))),
            (None, Some(dir)) => Ok(Opened::Local(Box::new(Local::open_read_only(dir)?))),
            (None, None) => bail!("give --data DIR or --rpc URL"),
        }
    }
}

/// Parses a name argument with a readable error.
pub fn parse_name(s: &str) -> anyhow::Result<Name> {
    s.parse::<Name>()
        .map_err(|e| anyhow::anyhow!("{s:?} is not a valid name: {e}"))
}

/// Prints `value` as JSON when `json`, else `text`.
pub fn output(json: bool, value: serde_json::Value, text: String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{text}");
    }
    Ok(())
}
