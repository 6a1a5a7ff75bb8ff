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
}

fn default_retain_blocks() -> u64 {
    super::ledger::DEFAULT_RETAIN_BLOCKS
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
    /// Validator I listens on P2P `base_port + 10 I` and RPC `base_port + 10 I + 1`.
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

/// Writes the configuration of a new network in `dir` (which must not hold one).
pub fn create(dir: &Path, config: &DevnetConfig, cometbft: &Path) -> anyhow::Result<Devnet> {
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
        if port + 1 > u16::MAX as u32 {
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
    let mut app_state = AppState {
        genesis: genesis(
            config.accounts,
            config.seed,
            system.verifying_key().to_bytes(),
        ),
        proposers: Default::default(),
        snapshots: None,
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

/// Starts every validator process of the network in `dir` that is not running, and returns
/// the network. `tally node` starts first; CometBFT once its socket exists.
pub fn start(dir: &Path) -> anyhow::Result<Devnet> {
    let mut d = load(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    let tally = std::env::current_exe().context("cannot find the tally binary")?;
    for i in 0..d.validators.len() {
        let vdir = validator_dir(&dir, i);
        let v = &d.validators[i];
        let tally_up = v.tally_pid.is_some_and(|p| is_ours(p, &dir));
        let cometbft_up = v.cometbft_pid.is_some_and(|p| is_ours(p, &dir));
        if tally_up && cometbft_up {
            continue;
        }
        // One without the other is a half-dead validator: restart both, in order.
        for pid in [v.cometbft_pid, v.tally_pid].into_iter().flatten() {
            if is_ours(pid, &dir) {
                kill_and_wait(pid, &dir, Duration::from_secs(10));
            }
        }
        let socket = abci_socket(&dir, i);
        let _ = std::fs::remove_file(&socket);
        let mut tally_child = spawn(
            &tally,
            &[
                "node".into(),
                "--data".into(),
                vdir.join("tally").to_string_lossy().into(),
                "--abci".into(),
                format!("unix://{}", socket.display()),
                "--retain-blocks".into(),
                d.retain_blocks.to_string(),
            ],
            &vdir.join("tally.log"),
        )?;
        // Recorded at once, so `--stop` finds it even if what follows fails.
        d.validators[i].tally_pid = Some(tally_child.id());
        d.validators[i].cometbft_pid = None;
        save(&dir, &d)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !socket.exists() {
            // The child's own status, not /proc: just after exec its command line may not
            // be readable yet.
            if Instant::now() > deadline || tally_child.try_wait()?.is_some() {
                bail!(
                    "tally node of validator {i} did not open {}: see {}",
                    socket.display(),
                    vdir.join("tally.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let cometbft = spawn(
            &d.cometbft,
            &[
                "start".into(),
                "--home".into(),
                vdir.join("cometbft").to_string_lossy().into(),
            ],
            &vdir.join("cometbft.log"),
        )?;
        d.validators[i].cometbft_pid = Some(cometbft.id());
        save(&dir, &d)?;
    }
    Ok(d)
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
    for v in &mut d.validators {
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
