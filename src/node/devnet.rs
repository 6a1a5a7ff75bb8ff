//! A local network on 127.0.0.1: N validators, each a `cometbft` process and a `tally node`
//! process, configured for loopback and started in the background.
//!
//! ```text
//! DIR/devnet.json          the network: validators, addresses, process ids
//! DIR/keystore.json        the wallet of `--rpc URL --wallet DIR`: the keys of `tally` and
//!                          of each validator's account (`val1`, `val2`, …)
//! DIR/abi/NAME.json        ABIs of contracts deployed with that wallet
//! DIR/vI/cometbft/         validator I's CometBFT home (config, keys, blocks)
//! DIR/vI/tally/            validator I's Tally data directory
//! DIR/vI/abci.sock         the ABCI socket between them
//! DIR/vI/cometbft.log      CometBFT's log
//! DIR/vI/tally.log         tally node's log
//! DIR/fJ/                  full node J (`--join`): the same files; it is no validator and
//!                          joined by state sync
//! ```
//!
//! Each validator has a funded account that takes the tips of the blocks it proposes
//! ([`validator_account`]: v0's is `val1`); genesis maps each validator address to it
//! (`app_state.proposers`, [`AppState`]).

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::rpc::Rpc;
use crate::common::fs::write_atomic;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tally_bench::workload;
use tally_chain::genesis::{Allocation, GenesisAccount, GenesisContract};
use tally_chain::{Genesis, Name};

use super::ledger::AppState;

/// The CometBFT release `tally devnet` is tested with (ABCI 2.0, FinalizeBlock).
pub const COMETBFT_VERSION: &str = "v0.38.26";

/// The chain id of every devnet.
pub const CHAIN_ID: &str = "tally-devnet";

/// Version of `devnet.json`.
const DEVNET_VERSION: u32 = 1;

/// How long a started network may take to commit its first block: CometBFT's start-up and
/// handshake take about a second here; four validators on two busy cores, several.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// Consensus timeouts for loopback (shared/PROBE.md: with 10 ms commit and gossip timeouts,
/// blocks took 15 ms with one validator and 56 ms with four). Propose and vote timeouts only
/// matter when a step stalls; they stay long enough that two busy cores still make it.
const CONSENSUS_TIMEOUTS: &[(&str, &str)] = &[
    ("timeout_propose", "\"1s\""),
    ("timeout_propose_delta", "\"200ms\""),
    ("timeout_prevote", "\"200ms\""),
    ("timeout_prevote_delta", "\"100ms\""),
    ("timeout_precommit", "\"200ms\""),
    ("timeout_precommit_delta", "\"100ms\""),
    ("timeout_commit", "\"10ms\""),
    ("peer_gossip_sleep_duration", "\"10ms\""),
];

/// Gossip rate per peer. CometBFT's default, 5 MB/s, caps a network at about 30,000 transfers
/// of 170 bytes per second before any other cost.
const P2P_RATE: &str = "104857600";

/// The RPC's largest request: a bundle of 1 MiB (`bundle::MAX_BUNDLE_BYTES`) in base64 is
/// 1.4 MB; CometBFT's default of 1 MB would refuse it.
const RPC_MAX_BODY_BYTES: &str = "10000000";

/// A block's largest size (consensus parameter `block.max_bytes`): 16 MiB, about 90,000
/// transfers, under `abci::MAX_MESSAGE_BYTES`.
const BLOCK_MAX_BYTES: &str = "16777216";

/// One validator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Validator {
    /// Its index.
    pub index: usize,
    /// CometBFT's RPC address.
    pub rpc: String,
    /// CometBFT's P2P address.
    pub p2p: String,
    /// CometBFT's node id.
    pub node_id: String,
    /// Process id of `tally node`, when started.
    pub tally_pid: Option<u32>,
    /// Process id of `cometbft start`, when started.
    pub cometbft_pid: Option<u32>,
    /// The account that takes the tips of the blocks it proposes (absent in a devnet made
    /// before fees: its tips go to the system account).
    #[serde(default)]
    pub account: Option<String>,
    /// For tests: the ways its `tally node` serves wrong snapshot chunks
    /// (`--test-serve-bad-snapshots`), if it is to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_serve_bad_snapshots: Option<String>,
    /// Where its `tally node` serves Prometheus metrics (`--metrics`): `http://ADDR/metrics`
    /// (absent in a devnet made before metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

/// Where node `port`'s metrics are served: the port after its RPC's (each node has ten).
fn metrics_addr(port: u32) -> String {
    format!("127.0.0.1:{}", port + 2)
}

/// The account of validator `i`: `val` and `i + 1` in the base-31 digits of names
/// (`1`–`5`, `a`–`z`, as `workload::account_name` spells them), so v0's is `val1`, v4's
/// `val5` and v5's `vala`; up to 31^9 validators fit a name's 12 characters.
pub fn validator_account(i: usize) -> Name {
    const DIGITS: &[u8; 31] = b"12345abcdefghijklmnopqrstuvwxyz";
    let mut digits = Vec::new();
    let mut n = i;
    loop {
        digits.push(DIGITS[n % 31]);
        n /= 31;
        if n == 0 {
            break;
        }
        n -= 1;
    }
    digits.reverse();
    let name = format!("val{}", String::from_utf8(digits).expect("ascii"));
    name.parse().expect("a valid name")
}

/// `DIR/devnet.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Devnet {
    /// Layout version.
    pub version: u32,
    /// The `cometbft` binary.
    pub cometbft: PathBuf,
    /// Benchmark accounts in genesis.
    pub accounts: u64,
    /// Seed of their keys (`tally_chain::crypto::derived_key(seed, i % KEY_POOL)`).
    pub seed: u64,
    /// The validators.
    pub validators: Vec<Validator>,
    /// Blocks each node keeps below its head (`tally node --retain-blocks`; 0: every block).
    #[serde(default = "default_retain_blocks")]
    pub retain_blocks: u64,
    /// Blocks between snapshots (genesis `app_state.snapshots.interval`; 0: none).
    #[serde(default)]
    pub snapshot_interval: u64,
    /// Snapshots each node keeps (`tally node --snapshot-keep`).
    #[serde(default = "default_snapshot_keep")]
    pub snapshot_keep: usize,
    /// Full nodes that joined by state sync (`--join`), with a validator's fields: they
    /// vote for nothing and have no account.
    #[serde(default)]
    pub full_nodes: Vec<Validator>,
}

fn default_retain_blocks() -> u64 {
    super::ledger::DEFAULT_RETAIN_BLOCKS
}

fn default_snapshot_keep() -> usize {
    super::sync::DEFAULT_SNAPSHOT_KEEP
}

/// What a new devnet looks like.
#[derive(Debug, Clone)]
pub struct DevnetConfig {
    /// Validators.
    pub validators: usize,
    /// Benchmark accounts in genesis, each with a balance in simplecoin.
    pub accounts: u64,
    /// Seed of their keys.
    pub seed: u64,
    /// Validator I listens on P2P `base_port + 10 I`, RPC `base_port + 10 I + 1` and serves
    /// its metrics on `base_port + 10 I + 2`.
    pub base_port: u16,
    /// How long an idle network waits before an empty block (0: at once).
    pub empty_blocks_ms: u64,
    /// Whether validators gossip their mempools' transactions to each other.
    pub mempool_gossip: bool,
    /// Whether CometBFT indexes transactions and their events (`[tx_index] indexer = "kv"`),
    /// so `tx_search` and `tally tx --rpc` find them.
    pub index: bool,
    /// Blocks each node keeps below its head (0: every block).
    pub retain_blocks: u64,
    /// Blocks between snapshots (0: none; a network without snapshots cannot be joined by
    /// state sync).
    pub snapshot_interval: u64,
    /// For tests: state chunks of this many bytes instead of the chain's 4 MiB, so a small
    /// state still makes several.
    pub snapshot_chunk_bytes: Option<u32>,
    /// Snapshots each node keeps.
    pub snapshot_keep: usize,
    /// For tests: validators whose `tally node` serves wrong snapshot chunks, with how
    /// (`--test-serve-bad-snapshots`).
    pub bad_snapshots: Vec<(usize, String)>,
}

/// The `cometbft` binary: `$COMETBFT`, else `cometbft` on `PATH`, else `~/go/bin/cometbft`.
pub fn find_cometbft() -> anyhow::Result<PathBuf> {
    let install = format!(
        "install it with `go install github.com/cometbft/cometbft/cmd/cometbft@{COMETBFT_VERSION}` \
         (Go 1.22 or newer; about 2 minutes), then put ~/go/bin on PATH or set COMETBFT=/path/to/cometbft"
    );
    if let Some(p) = std::env::var_os("COMETBFT") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("COMETBFT={} is not a file: {install}", p.display());
    }
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("cometbft"))
                .collect()
        })
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join("go/bin/cometbft"));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .with_context(|| format!("cometbft was not found on PATH nor in $COMETBFT: {install}"))
}

fn validator_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("v{i}"))
}

fn full_node_dir(dir: &Path, j: usize) -> PathBuf {
    dir.join(format!("f{j}"))
}

/// One node of the network: validator `I` (`vI`) or full node `J` (`fJ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRef {
    /// A validator, by index.
    Validator(usize),
    /// A full node, by index among full nodes.
    Full(usize),
}

impl NodeRef {
    /// Its name: `v0`, `f1`, …
    pub fn name(self) -> String {
        match self {
            Self::Validator(i) => format!("v{i}"),
            Self::Full(j) => format!("f{j}"),
        }
    }

    /// Its directory.
    pub fn dir(self, dir: &Path) -> PathBuf {
        match self {
            Self::Validator(i) => validator_dir(dir, i),
            Self::Full(j) => full_node_dir(dir, j),
        }
    }
}

impl Devnet {
    /// Every node: validators, then full nodes.
    pub fn nodes(&self) -> Vec<(NodeRef, &Validator)> {
        let v = self
            .validators
            .iter()
            .enumerate()
            .map(|(i, v)| (NodeRef::Validator(i), v));
        let f = self
            .full_nodes
            .iter()
            .enumerate()
            .map(|(j, v)| (NodeRef::Full(j), v));
        v.chain(f).collect()
    }

    fn node_mut(&mut self, node: NodeRef) -> &mut Validator {
        match node {
            NodeRef::Validator(i) => &mut self.validators[i],
            NodeRef::Full(j) => &mut self.full_nodes[j],
        }
    }
}

/// The ABCI socket of validator `i`.
pub fn abci_socket(dir: &Path, i: usize) -> PathBuf {
    validator_dir(dir, i).join("abci.sock")
}

/// Sets `key = value` in `[section]` of a CometBFT config.toml (`""` is the top, before any
/// section). Fails if the key is not there, so a renamed option is noticed.
fn set_toml(text: &str, section: &str, key: &str, value: &str) -> anyhow::Result<String> {
    let mut current = String::new();
    let mut done = false;
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            current = t[1..t.len() - 1].to_string();
        }
        if !done && current == section && t.split_once('=').is_some_and(|(k, _)| k.trim() == key) {
            out.push_str(&format!("{key} = {value}\n"));
            done = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !done {
        bail!("config.toml has no {key} in [{section}]: is this cometbft {COMETBFT_VERSION}?");
    }
    Ok(out)
}

fn run_cometbft(cometbft: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(cometbft)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", cometbft.display()))?;
    if !out.status.success() {
        bail!(
            "`cometbft {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Tally's genesis for a devnet: the system account `tally` with `system_key` (to create
/// accounts), simplecoin at `simplecoin`, and `accounts` benchmark accounts (named as
/// `tally bench` names them) with their keys and a balance each.
pub fn genesis(accounts: u64, seed: u64, system_key: [u8; 32]) -> Genesis {
    use rayon::prelude::*;
    let pool = workload::KEY_POOL.min(accounts);
    let keys: Vec<[u8; 32]> = (0..pool)
        .into_par_iter()
        .map(|i| {
            tally_chain::crypto::derived_key(seed, i)
                .verifying_key()
                .to_bytes()
        })
        .collect();
    let system = GenesisAccount {
        name: tally_chain::system::SYSTEM,
        key: system_key,
        balance: workload::SYSTEM_FUNDS,
    };
    Genesis {
        accounts: std::iter::once(system)
            .chain((0..accounts).map(|i| GenesisAccount {
                name: workload::account_name(i),
                key: keys[(i % workload::KEY_POOL) as usize],
                balance: workload::NATIVE_FUNDS,
            }))
            .collect(),
        contracts: vec![GenesisContract {
            account: workload::SIMPLECOIN,
            code: workload::SIMPLECOIN_WASM.to_vec(),
        }],
        allocations: (0..accounts)
            .map(|i| Allocation {
                contract: workload::SIMPLECOIN,
                key: workload::account_name(i).0.to_le_bytes().to_vec(),
                value: workload::INITIAL_BALANCE.to_le_bytes().to_vec(),
            })
            .collect(),
    }
}

/// The most accounts a devnet lists in `genesis.json`; more are generated at InitChain
/// (`app_state.generated`). InitChain carries the listed accounts as JSON (~280 bytes each)
/// in one ABCI message of at most 128 MiB, which ~450,000 would reach.
const LISTED_ACCOUNTS: u64 = 100_000;

/// Writes the configuration of a new network in `dir` (which must not hold one).
pub fn create(dir: &Path, config: &DevnetConfig, cometbft: &Path) -> anyhow::Result<Devnet> {
    if config.snapshot_interval == 1 {
        bail!(
            "--snapshot-interval 1 leaves no block for a snapshot's merge: use 0 (none) or 2 and up"
        );
    }
    if dir.join("devnet.json").exists() {
        bail!(
            "{} already holds a devnet: start it with `tally devnet --data {}`, or remove the directory",
            dir.display(),
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut validators = Vec::new();
    let mut genesis_validators = Vec::new();
    let mut template: Option<Value> = None;
    for i in 0..config.validators {
        let home = validator_dir(dir, i).join("cometbft");
        let home_s = home.to_string_lossy().to_string();
        run_cometbft(cometbft, &["init", "--home", &home_s])?;
        let node_id = run_cometbft(cometbft, &["show-node-id", "--home", &home_s])?;
        let g: Value = serde_json::from_slice(&std::fs::read(home.join("config/genesis.json"))?)?;
        let mut v = g["validators"][0].clone();
        v["name"] = json!(format!("v{i}"));
        genesis_validators.push(v);
        template.get_or_insert(g);
        let port = config.base_port as u32 + 10 * i as u32;
        if port + 2 > u16::MAX as u32 {
            bail!(
                "--base-port {} leaves no room for {} validators",
                config.base_port,
                config.validators
            );
        }
        validators.push(Validator {
            index: i,
            rpc: format!("127.0.0.1:{}", port + 1),
            p2p: format!("127.0.0.1:{port}"),
            node_id,
            tally_pid: None,
            cometbft_pid: None,
            account: Some(validator_account(i).to_string()),
            metrics: Some(metrics_addr(port)),
            test_serve_bad_snapshots: config
                .bad_snapshots
                .iter()
                .find(|(v, _)| *v == i)
                .map(|(_, how)| how.clone()),
        });
    }
    let mut g = template.context("at least one validator")?;
    g["chain_id"] = json!(CHAIN_ID);
    g["initial_height"] = json!("1");
    g["genesis_time"] = json!(now_rfc3339());
    g["validators"] = Value::Array(genesis_validators);
    g["consensus_params"]["block"]["max_bytes"] = json!(BLOCK_MAX_BYTES);
    // The system account's key goes to the devnet's wallet (DIR/keystore.json), so
    // `--rpc URL --wallet DIR` commands can create accounts and deploy contracts.
    let system = tally_chain::crypto::random_key()?;
    let mut wallet = crate::commands::Keystore::default();
    wallet.insert(tally_chain::system::SYSTEM, &system);
    // Up to LISTED_ACCOUNTS, the accounts are listed in genesis.json (readable, editable);
    // above, genesis generates them (`app_state.generated`), as `tally bench` does.
    let listed = config.accounts <= LISTED_ACCOUNTS;
    let mut app_state = AppState {
        genesis: genesis(
            if listed { config.accounts } else { 0 },
            config.seed,
            system.verifying_key().to_bytes(),
        ),
        generated: (!listed).then_some(super::ledger::GeneratedAccounts {
            accounts: config.accounts,
            seed: config.seed,
        }),
        proposers: Default::default(),
        snapshots: (config.snapshot_interval > 0).then_some(super::ledger::SnapshotParams {
            interval: config.snapshot_interval,
            delay: snapshot_delay(config.snapshot_interval),
            chunk_bytes: config.snapshot_chunk_bytes,
        }),
    };
    // Each validator's account takes its blocks' tips; its key goes to the wallet.
    for (i, v) in g["validators"]
        .as_array()
        .context("genesis has validators")?
        .iter()
        .enumerate()
    {
        let address = v["address"]
            .as_str()
            .context("a genesis validator without an address")?;
        let account = validator_account(i);
        let key = tally_chain::crypto::random_key()?;
        wallet.insert(account, &key);
        app_state.genesis.accounts.push(GenesisAccount {
            name: account,
            key: key.verifying_key().to_bytes(),
            balance: workload::NATIVE_FUNDS,
        });
        app_state
            .proposers
            .insert(address.to_string(), account.to_string());
    }
    write_atomic(
        &dir.join("keystore.json"),
        serde_json::to_string_pretty(&wallet)?.as_bytes(),
        0o600,
    )?;
    g["app_state"] = serde_json::to_value(app_state)?;
    let genesis_bytes = serde_json::to_vec_pretty(&g)?;
    for v in &validators {
        let vdir = validator_dir(dir, v.index);
        let home = vdir.join("cometbft");
        std::fs::write(home.join("config/genesis.json"), &genesis_bytes)?;
        let peers: Vec<String> = validators
            .iter()
            .filter(|p| p.index != v.index)
            .map(|p| format!("{}@{}", p.node_id, p.p2p))
            .collect();
        let path = home.join("config/config.toml");
        let mut t = std::fs::read_to_string(&path)?;
        let q = |s: &str| format!("\"{s}\"");
        let socket = abci_socket(dir, v.index);
        let empty_interval = format!("\"{}ms\"", config.empty_blocks_ms);
        let settings: Vec<(&str, &str, String)> = vec![
            ("", "proxy_app", q(&format!("unix://{}", socket.display()))),
            ("", "moniker", q(&format!("v{}", v.index))),
            ("", "log_level", q("*:error,state:info")),
            ("rpc", "laddr", q(&format!("tcp://{}", v.rpc))),
            ("rpc", "max_body_bytes", RPC_MAX_BODY_BYTES.into()),
            ("p2p", "laddr", q(&format!("tcp://{}", v.p2p))),
            ("p2p", "persistent_peers", q(&peers.join(","))),
            ("p2p", "addr_book_strict", "false".into()),
            ("p2p", "allow_duplicate_ip", "true".into()),
            ("p2p", "pex", "false".into()),
            ("p2p", "flush_throttle_timeout", q("10ms")),
            ("p2p", "send_rate", P2P_RATE.into()),
            ("p2p", "recv_rate", P2P_RATE.into()),
            ("consensus", "create_empty_blocks_interval", empty_interval),
            ("mempool", "broadcast", config.mempool_gossip.to_string()),
            // The index answers `tx_search` (events, `tally tx --rpc`) at a cost on every
            // block; load measurements turn it off.
            (
                "tx_index",
                "indexer",
                q(if config.index { "kv" } else { "null" }),
            ),
        ];
        for (section, key, value) in &settings {
            t = set_toml(&t, section, key, value)?;
        }
        for (key, value) in CONSENSUS_TIMEOUTS {
            t = set_toml(&t, "consensus", key, value)?;
        }
        std::fs::write(&path, t)?;
        std::fs::create_dir_all(vdir.join("tally"))?;
    }
    let devnet = Devnet {
        version: DEVNET_VERSION,
        cometbft: cometbft.to_path_buf(),
        accounts: config.accounts,
        seed: config.seed,
        validators,
        retain_blocks: config.retain_blocks,
        snapshot_interval: config.snapshot_interval,
        snapshot_keep: config.snapshot_keep,
        full_nodes: Vec::new(),
    };
    save(dir, &devnet)?;
    Ok(devnet)
}

fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

/// Reads `DIR/devnet.json`.
pub fn load(dir: &Path) -> anyhow::Result<Devnet> {
    let path = dir.join("devnet.json");
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "{} holds no devnet: create one with `tally devnet --validators 4 --data {}`",
            dir.display(),
            dir.display()
        )
    })?;
    let d: Devnet = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not valid", path.display()))?;
    if d.version != DEVNET_VERSION {
        bail!(
            "{} has version {}; this tally reads {DEVNET_VERSION}",
            path.display(),
            d.version
        );
    }
    Ok(d)
}

fn save(dir: &Path, d: &Devnet) -> anyhow::Result<()> {
    write_atomic(
        &dir.join("devnet.json"),
        &serde_json::to_vec_pretty(d)?,
        0o644,
    )
}

/// Whether `pid` is a live process started for this devnet (its command line names `dir`), so a
/// recycled process id is never mistaken for ours.
pub fn is_ours(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    // A zombie (killed, not yet reaped) has an empty command line: it is not running.
    let needle = dir.to_string_lossy();
    String::from_utf8_lossy(&cmdline).contains(needle.as_ref())
}

fn spawn(program: &Path, args: &[String], log: &Path) -> anyhow::Result<std::process::Child> {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        // Its own process group: a Ctrl-C in the terminal that ran `tally devnet` does not
        // reach the network.
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    Ok(child)
}

/// Starts every process of the network in `dir` that is not running (validators, then
/// full nodes), and returns the network. `tally node` starts first; CometBFT once its socket
/// exists.
pub fn start(dir: &Path) -> anyhow::Result<Devnet> {
    let mut d = load(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    let tally = std::env::current_exe().context("cannot find the tally binary")?;
    let nodes: Vec<NodeRef> = d.nodes().into_iter().map(|(n, _)| n).collect();
    for node in nodes {
        start_node(&mut d, &dir, &tally, node)?;
    }
    Ok(d)
}

/// Starts `node`'s processes unless both run (one without the other is a half-dead node:
/// both restart, in order).
fn start_node(d: &mut Devnet, dir: &Path, tally: &Path, node: NodeRef) -> anyhow::Result<()> {
    let ndir = node.dir(dir);
    let name = node.name();
    let v = d.node_mut(node).clone();
    let tally_up = v.tally_pid.is_some_and(|p| is_ours(p, dir));
    let cometbft_up = v.cometbft_pid.is_some_and(|p| is_ours(p, dir));
    if tally_up && cometbft_up {
        return Ok(());
    }
    for pid in [v.cometbft_pid, v.tally_pid].into_iter().flatten() {
        if is_ours(pid, dir) {
            kill_and_wait(pid, dir, Duration::from_secs(10));
        }
    }
    let socket = ndir.join("abci.sock");
    let _ = std::fs::remove_file(&socket);
    let mut args: Vec<String> = vec![
        "node".into(),
        "--data".into(),
        ndir.join("tally").to_string_lossy().into(),
        "--abci".into(),
        format!("unix://{}", socket.display()),
        "--retain-blocks".into(),
        d.retain_blocks.to_string(),
        "--snapshot-keep".into(),
        d.snapshot_keep.to_string(),
    ];
    if let NodeRef::Full(_) = node {
        // It joins by state sync, so no InitChain tells it about its network.
        args.push("--genesis".into());
        args.push(
            ndir.join("cometbft/config/genesis.json")
                .to_string_lossy()
                .into(),
        );
    }
    if let Some(addr) = &v.metrics {
        args.push("--metrics".into());
        args.push(addr.clone());
    }
    if let Some(how) = &v.test_serve_bad_snapshots {
        args.push("--test-serve-bad-snapshots".into());
        args.push(how.clone());
    }
    let mut tally_child = spawn(tally, &args, &ndir.join("tally.log"))?;
    // Recorded at once, so `--stop` finds it even if what follows fails.
    d.node_mut(node).tally_pid = Some(tally_child.id());
    d.node_mut(node).cometbft_pid = None;
    save(dir, d)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        // The child's own status, not /proc: just after exec its command line may not be
        // readable yet.
        if Instant::now() > deadline || tally_child.try_wait()?.is_some() {
            bail!(
                "tally node of {name} did not open {}: see {}",
                socket.display(),
                ndir.join("tally.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cometbft = spawn(
        &d.cometbft,
        &[
            "start".into(),
            "--home".into(),
            ndir.join("cometbft").to_string_lossy().into(),
        ],
        &ndir.join("cometbft.log"),
    )?;
    d.node_mut(node).cometbft_pid = Some(cometbft.id());
    save(dir, d)?;
    Ok(())
}

/// How long a joining node looks for snapshots before it picks one (`[statesync]
/// discovery_time`): CometBFT's minimum; below it CometBFT waits five times longer.
const DISCOVERY_TIME: &str = "5s";

/// How long a joining node waits for a chunk before asking another peer (`[statesync]
/// chunk_request_timeout`; CometBFT's default is 10 s): on loopback a chunk comes in
/// milliseconds, so a peer that does not answer in 5 s has not got it.
const CHUNK_REQUEST_TIMEOUT: &str = "5s";

/// How long a joining node trusts the validators of its trusted header (`trust_period`):
/// CometBFT's default. The header is taken from a running validator when the node is made.
const TRUST_PERIOD: &str = "168h0m0s";

/// The blocks between a snapshot's height and the header that commits its digest: half the
/// interval (within the chain's bounds), the time each node's background merge has before a
/// block waits for it. A merge of ten million accounts (about 1.1 GB of state) takes seconds;
/// blocks come every ~15-60 ms under load, so a short delay would stall the network at every
/// snapshot.
pub fn snapshot_delay(interval: u64) -> u64 {
    (interval / 2).clamp(1, tally_chain::snapshot::MAX_DELAY)
}

/// Adds `n` full nodes to the running network in `dir`, each set to join by state sync: its
/// CometBFT gets the light client's settings (two validators' RPC as servers, a trusted
/// height and header hash read from validator 0 now), its peers are the validators, and its
/// `tally node` the network's genesis file. Returns the network and the new nodes.
pub fn join(dir: &Path, n: usize) -> anyhow::Result<(Devnet, Vec<NodeRef>)> {
    let mut d = load(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    if d.snapshot_interval == 0 {
        bail!(
            "the devnet in {} takes no snapshots (it was made with --snapshot-interval 0): a \
             node cannot join it by state sync",
            dir.display()
        );
    }
    let v0 = &d.validators[0];
    let rpc = Rpc::new(&v0.rpc);
    let trust_height = rpc.height().with_context(|| {
        format!(
            "validator 0 does not answer on {}: start the network first (`tally devnet --data {}`)",
            v0.rpc,
            dir.display()
        )
    })?;
    let commit = rpc.call(
        "commit",
        serde_json::json!({ "height": trust_height.to_string() }),
    )?;
    let trust_hash = commit["signed_header"]["commit"]["block_id"]["hash"]
        .as_str()
        .context("validator 0's /commit has no block hash")?
        .to_string();
    // The light client wants a primary and at least one witness.
    let servers: Vec<String> = d
        .validators
        .iter()
        .cycle()
        .take(2)
        .map(|v| format!("http://{}", v.rpc))
        .collect();
    let peers: Vec<String> = d
        .validators
        .iter()
        .map(|p| format!("{}@{}", p.node_id, p.p2p))
        .collect();
    let base_port: u32 = v0
        .p2p
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .context("validator 0's P2P address has no port")?;
    let template_home = validator_dir(&dir, 0).join("cometbft");
    let template = std::fs::read_to_string(template_home.join("config/config.toml"))?;
    let mut added = Vec::new();
    for _ in 0..n {
        let j = d.full_nodes.len();
        let node = NodeRef::Full(j);
        let ndir = node.dir(&dir);
        let port = base_port + 10 * (d.validators.len() + j) as u32;
        if port + 2 > u16::MAX as u32 {
            bail!("no ports are left above {base_port} for full node {j}");
        }
        let home = ndir.join("cometbft");
        let home_s = home.to_string_lossy().to_string();
        run_cometbft(&d.cometbft, &["init", "--home", &home_s])?;
        let node_id = run_cometbft(&d.cometbft, &["show-node-id", "--home", &home_s])?;
        std::fs::copy(
            template_home.join("config/genesis.json"),
            home.join("config/genesis.json"),
        )?;
        let (rpc_addr, p2p_addr) = (
            format!("127.0.0.1:{}", port + 1),
            format!("127.0.0.1:{port}"),
        );
        let q = |s: &str| format!("\"{s}\"");
        let socket = ndir.join("abci.sock");
        // Validator 0's settings (timeouts, rates, mempool, index), with this node's own
        // addresses and the light client's.
        let settings: Vec<(&str, &str, String)> = vec![
            ("", "proxy_app", q(&format!("unix://{}", socket.display()))),
            ("", "moniker", q(&node.name())),
            ("", "log_level", q("*:error,state:info,statesync:info")),
            ("rpc", "laddr", q(&format!("tcp://{rpc_addr}"))),
            ("p2p", "laddr", q(&format!("tcp://{p2p_addr}"))),
            ("p2p", "persistent_peers", q(&peers.join(","))),
            ("statesync", "enable", "true".into()),
            ("statesync", "rpc_servers", q(&servers.join(","))),
            ("statesync", "trust_height", trust_height.to_string()),
            ("statesync", "trust_hash", q(&trust_hash)),
            ("statesync", "trust_period", q(TRUST_PERIOD)),
            ("statesync", "discovery_time", q(DISCOVERY_TIME)),
            // Chunks go to the node's own directory, not the shared /tmp.
            (
                "statesync",
                "temp_dir",
                q(&home.join("data").to_string_lossy()),
            ),
            (
                "statesync",
                "chunk_request_timeout",
                q(CHUNK_REQUEST_TIMEOUT),
            ),
        ];
        let mut t = template.clone();
        for (section, key, value) in &settings {
            t = set_toml(&t, section, key, value)?;
        }
        std::fs::write(home.join("config/config.toml"), t)?;
        std::fs::create_dir_all(ndir.join("tally"))?;
        d.full_nodes.push(Validator {
            index: j,
            rpc: rpc_addr,
            p2p: p2p_addr,
            node_id,
            tally_pid: None,
            cometbft_pid: None,
            account: None,
            test_serve_bad_snapshots: None,
            metrics: Some(metrics_addr(port)),
        });
        save(&dir, &d)?;
        added.push(node);
    }
    let tally = std::env::current_exe().context("cannot find the tally binary")?;
    for node in &added {
        start_node(&mut d, &dir, &tally, *node)?;
    }
    Ok((d, added))
}

/// Where one node is: CometBFT's view and Tally's.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// `v0`, `f1`, …
    pub node: String,
    /// Its RPC address.
    pub rpc: String,
    /// Where its metrics are served, if they are.
    pub metrics: Option<String>,
    /// Whether its processes run.
    pub running: bool,
    /// CometBFT's latest height (0 if it does not answer).
    pub height: u64,
    /// The lowest block CometBFT still has (pruned below).
    pub earliest_height: u64,
    /// CometBFT's latest app hash, hex.
    pub app_hash: String,
    /// Whether CometBFT is still catching up (state or block sync).
    pub catching_up: bool,
    /// Tally's view (the `sync` query): height, first retained block, the snapshot it
    /// joined at, a restore in progress, the snapshots it serves.
    pub tally: Value,
}

/// Each node's state, for `tally devnet --status`.
pub fn status(dir: &Path) -> anyhow::Result<Vec<NodeStatus>> {
    let d = load(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    Ok(d.nodes()
        .into_iter()
        .map(|(node, v)| {
            let rpc = Rpc::new(&v.rpc);
            let s = rpc.call("status", json!({})).unwrap_or_default();
            let info = &s["sync_info"];
            let num = |k: &str| info[k].as_str().and_then(|h| h.parse().ok()).unwrap_or(0);
            let tally = rpc
                .query("sync", &[])
                .ok()
                .and_then(|(_, value, _)| serde_json::from_slice(&value).ok())
                .unwrap_or(Value::Null);
            NodeStatus {
                node: node.name(),
                rpc: v.rpc.clone(),
                metrics: v.metrics.clone(),
                running: v.tally_pid.is_some_and(|p| is_ours(p, &dir))
                    && v.cometbft_pid.is_some_and(|p| is_ours(p, &dir)),
                height: num("latest_block_height"),
                earliest_height: num("earliest_block_height"),
                app_hash: info["latest_app_hash"]
                    .as_str()
                    .unwrap_or("")
                    .to_lowercase(),
                catching_up: info["catching_up"].as_bool().unwrap_or(false),
                tally,
            }
        })
        .collect())
}

/// How long `tally devnet --join` waits for a new node to restore a snapshot and follow
/// the head: a discovery round (5 s), the light client's checks, the transfer and the
/// restore (about 30 s at ten million accounts, the issue's target), with room for a slow
/// machine.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// How one node joined, as `tally devnet --join` measured it.
#[derive(Debug, Clone, Serialize)]
pub struct JoinReport {
    /// `f0`, …
    pub node: String,
    /// The height of the snapshot it restored.
    pub snapshot_height: Option<u64>,
    /// From starting its processes to the restored state installed, seconds.
    pub restored_s: Option<f64>,
    /// From starting its processes to following the head (CometBFT no longer catching up,
    /// at the validators' height), seconds.
    pub following_s: Option<f64>,
    /// Peak resident memory of its `tally node` (VmHWM), MiB.
    pub peak_rss_mib: Option<f64>,
}

/// The time of block `height` (its header's), ms since the Unix epoch: `None` if `rpc`
/// does not have it (not yet, or pruned).
pub fn block_time_ms(rpc: &Rpc, height: u64) -> Option<u64> {
    rpc.block_metas(height, height)
        .ok()?
        .into_iter()
        .find(|&(h, _, _)| h == height)
        .map(|(_, t, _)| t)
}

/// The mean time between blocks from `(h0, t0)` to `(h1, t1)` (heights, header times in ms).
pub fn mean_block_ms((h0, t0): (u64, u64), (h1, t1): (u64, u64)) -> Option<f64> {
    (h1 > h0 && t1 >= t0).then(|| (t1 - t0) as f64 / (h1 - h0) as f64)
}

/// Waits until each of `nodes` restored a snapshot and follows the validators' head, up to
/// `timeout` after `started`; what each reached.
pub fn wait_joined(
    d: &Devnet,
    nodes: &[NodeRef],
    started: Instant,
    timeout: Duration,
) -> Vec<JoinReport> {
    let mut reports: Vec<JoinReport> = nodes
        .iter()
        .map(|n| JoinReport {
            node: n.name(),
            snapshot_height: None,
            restored_s: None,
            following_s: None,
            peak_rss_mib: None,
        })
        .collect();
    let validators: Vec<Rpc> = d.validators.iter().map(|v| Rpc::new(&v.rpc)).collect();
    let node_of = |n: NodeRef| match n {
        NodeRef::Validator(i) => &d.validators[i],
        NodeRef::Full(j) => &d.full_nodes[j],
    };
    while started.elapsed() < timeout && reports.iter().any(|r| r.following_s.is_none()) {
        let head = validators
            .iter()
            .filter_map(|r| r.height().ok())
            .min()
            .unwrap_or(0);
        for (node, report) in nodes.iter().zip(reports.iter_mut()) {
            let v = node_of(*node);
            if let Some(pid) = v.tally_pid {
                report.peak_rss_mib = peak_rss(pid)
                    .map(|b| b as f64 / (1 << 20) as f64)
                    .or(report.peak_rss_mib);
            }
            if report.following_s.is_some() {
                continue;
            }
            let rpc = Rpc::new(&v.rpc);
            if report.restored_s.is_none()
                && let Ok((0, value, _)) = rpc.query("sync", &[])
                && let Ok(sync) = serde_json::from_slice::<Value>(&value)
                && let Some(h) = sync["state_synced_at"].as_u64()
            {
                report.snapshot_height = Some(h);
                report.restored_s = Some(started.elapsed().as_secs_f64());
            }
            if report.restored_s.is_some()
                && let Ok(s) = rpc.call("status", json!({}))
                && s["sync_info"]["catching_up"] == false
                && rpc.height().is_ok_and(|h| h >= head)
            {
                report.following_s = Some(started.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reports
}

/// The peak resident memory of process `pid` so far (`VmHWM`), in bytes.
pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Waits until every validator's RPC reports a committed block.
pub fn wait_ready(d: &Devnet, dir: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    for v in &d.validators {
        let rpc = Rpc::new(&v.rpc);
        loop {
            match rpc.height() {
                Ok(h) if h >= 1 => break,
                _ if Instant::now() > deadline => bail!(
                    "validator {} committed no block within {:?}: see {}",
                    v.index,
                    READY_TIMEOUT,
                    validator_dir(dir, v.index).join("cometbft.log").display()
                ),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
    Ok(())
}

fn kill_and_wait(pid: u32, dir: &Path, grace: Duration) {
    // SAFETY: kill(2) with a pid checked to be one of this devnet's processes.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while is_ours(pid, dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_ours(pid, dir) {
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// Stops every process of the network in `dir`: CometBFT first (so it does not see its
/// application vanish mid-block), then `tally node`. Returns how many were running.
pub fn stop(dir: &Path) -> anyhow::Result<usize> {
    let mut d = load(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    let mut stopped = 0;
    for v in d.validators.iter_mut().chain(d.full_nodes.iter_mut()) {
        for pid in [v.cometbft_pid.take(), v.tally_pid.take()]
            .into_iter()
            .flatten()
        {
            if is_ours(pid, &dir) {
                kill_and_wait(pid, &dir, Duration::from_secs(10));
                stopped += 1;
            }
        }
    }
    save(&dir, &d)?;
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validator_accounts_are_distinct_valid_names() {
        assert_eq!(validator_account(0).to_string(), "val1");
        assert_eq!(validator_account(4).to_string(), "val5");
        assert_eq!(validator_account(5).to_string(), "vala");
        assert_eq!(validator_account(30).to_string(), "valz");
        assert_eq!(validator_account(31).to_string(), "val11");
        let names: std::collections::BTreeSet<String> = (0..2_000)
            .map(|i| validator_account(i).to_string())
            .collect();
        assert_eq!(names.len(), 2_000);
    }

    #[test]
    fn set_toml_changes_the_key_of_the_named_section_only() {
        let t = "moniker = \"a\"\n[rpc]\nladdr = \"x\"\n[p2p]\nladdr = \"y\"\n";
        let out = set_toml(t, "p2p", "laddr", "\"z\"").unwrap();
        assert_eq!(
            out,
            "moniker = \"a\"\n[rpc]\nladdr = \"x\"\n[p2p]\nladdr = \"z\"\n"
        );
        assert!(set_toml(t, "rpc", "nope", "1").is_err());
    }

    #[test]
    fn now_rfc3339_reads_back_as_the_current_time() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let parsed = super::super::rpc::rfc3339_ms(&now_rfc3339());
        assert!(parsed.abs_diff(now) < 5_000, "{parsed} vs {now}");
    }
}
