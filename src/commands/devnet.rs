//! `tally devnet`: a local multi-validator network of real CometBFT and Tally processes.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use super::local::output;
use crate::node::devnet::{self, Devnet, DevnetConfig};
use crate::node::rpc::Rpc;

/// Blocks before a join whose mean time `--join` reports, to compare with the blocks during
/// it.
const BLOCKS_BEFORE_JOIN: u64 = 20;

/// Blocks between a devnet's snapshots by default: 7-25 s of blocks at a devnet's 20-70
/// blocks a second, so the two snapshots a node keeps outlast a join's 5 s of discovery and
/// its transfer (the target: 30 s for ten million accounts, about 1.1 GB of state);
/// 50 blocks lived 1-3 s and joins picked snapshots already deleted.
const DEFAULT_SNAPSHOT_INTERVAL: u64 = 500;

/// Start (or stop) a local network of CometBFT validators running Tally, on 127.0.0.1.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally devnet --validators 4 --data ./net        # create and start 4 validators
  tally devnet --validators 4 --data ./net --no-mempool-gossip
                                                  # each bundle to one mempool: less work
  tally devnet --data ./net                       # start whatever is not running (after a crash)
  tally devnet --data ./net --stop                # stop every process
  tally load --rpc 127.0.0.1:26601 --transfers 100000
  tally balance u1 --rpc 127.0.0.1:26601
  tally account create alice --rpc 127.0.0.1:26601 --wallet ./net
                                                  # DIR is a wallet holding the key of `tally`
  tally devnet --validators 1 --data ./bench --no-index
                                                  # for load runs: no transaction index
  tally devnet --data ./net --join 1              # one more node, joining by state sync
  tally devnet --data ./net --status              # each node's height, app hash, sync

Each validator is two processes: `cometbft start` and `tally node`, joined by a unix socket
(DIR/vI/abci.sock); logs are DIR/vI/cometbft.log and DIR/vI/tally.log. Validator I serves RPC
on 127.0.0.1:(base-port + 10*I + 1) and Prometheus metrics on base-port + 10*I + 2. Genesis holds simplecoin and --accounts accounts (u1,
u2, ... as `tally bench` names them) whose keys `tally load` derives from --seed, and the
system account `tally`, whose key DIR/keystore.json holds: DIR is the wallet of `--rpc URL
--wallet DIR` commands (account create, deploy, push). CometBFT indexes transactions and their
events for `tx_search` and `tally tx --rpc` unless --no-index.

Validators snapshot their state every --snapshot-interval blocks. --join N adds N full nodes
(DIR/fJ/, ports after the validators') that join by CometBFT's state sync: each restores a
validator's snapshot, checking it against the app hash its light client verified from a
header of validator 0 it was given as trusted, then follows by block sync. --join waits until
they follow the head and reports how long that took, their peak memory, and the validators'
block times before and during the join.
cometbft is taken from $COMETBFT or PATH; install it with
  go install github.com/cometbft/cometbft/cmd/cometbft@v0.38.26")]
pub struct DevnetArgs {
    /// The network's directory.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Validators to create (only when DIR holds no network yet).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
    pub validators: u64,
    /// Benchmark accounts in genesis, each with 1,000,000 simplecoin.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(2..=10_000_000))]
    pub accounts: u64,
    /// Seed of the accounts' keys (give `tally load` the same).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Validator I listens on P2P base-port + 10*I, RPC base-port + 10*I + 1 and serves
    /// metrics on base-port + 10*I + 2.
    #[arg(long, default_value_t = 26_600)]
    pub base_port: u16,
    /// How long an idle network waits before an empty block, in ms (0: at once, ~70 blocks/s).
    #[arg(long, default_value_t = 1_000)]
    pub empty_blocks_ms: u64,
    /// Validators do not gossip mempool transactions: a bundle is checked (CheckTx) only by
    /// the validator it was sent to, and waits for that validator's turn to propose; the
    /// others verify its signatures in ProcessProposal. Every validator still verifies every
    /// transfer once. On one machine this halves CometBFT's work per transfer; `tally load`
    /// sends to every validator in turn, so each mempool fills. A validator that is down holds
    /// what was sent to it until it is back.
    #[arg(long)]
    pub no_mempool_gossip: bool,
    /// CometBFT does not index transactions and events: `tx_search` and `tally tx --rpc`
    /// find nothing, and each block costs CometBFT less (for `tally load` measurements).
    #[arg(long)]
    pub no_index: bool,
    /// Blocks each node keeps below its head (0: every block); CometBFT prunes alike. Fixed
    /// when the network is created.
    #[arg(long, value_name = "N", default_value_t = crate::node::ledger::DEFAULT_RETAIN_BLOCKS)]
    pub retain_blocks: u64,
    /// Blocks between snapshots (0: none, and no node can join by state sync). Fixed when
    /// the network is created: it is in the genesis. A joining node picks a snapshot up to
    /// 5 s (CometBFT's discovery time) after it heard of it, then fetches it: the snapshots
    /// a node keeps must span more than that, and a devnet makes 20-70 blocks a second.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SNAPSHOT_INTERVAL)]
    pub snapshot_interval: u64,
    /// Snapshots each node keeps for joining peers. Fixed when the network is created.
    #[arg(long, value_name = "N", default_value_t = crate::node::sync::DEFAULT_SNAPSHOT_KEEP as u64,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub snapshot_keep: u64,
    /// For tests: state chunks of this many bytes, so a small state makes several.
    #[arg(long, value_name = "BYTES", hide = true)]
    pub test_snapshot_chunk_bytes: Option<u32>,
    /// Add N full nodes that join the running network by state sync, and wait until they
    /// follow the head.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=16))]
    pub join: u64,
    /// Show each node's height, app hash, pruned height and how it synced, instead.
    #[arg(long)]
    pub status: bool,
    /// For tests: validator I's tally node serves wrong snapshot chunks, these ways in turn
    /// (`I:forged,damaged,other-height,truncated`). Only when the network is created.
    #[arg(long, value_name = "I:HOW", hide = true)]
    pub test_serve_bad_snapshots: Vec<String>,
    /// Stop every process of the network instead.
    #[arg(long)]
    pub stop: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DevnetArgs) -> anyhow::Result<()> {
    if args.stop {
        let n = devnet::stop(&args.data)?;
        return output(
            args.json,
            json!({ "stopped": n }),
            format!(
                "stopped {n} processes of the devnet in {}\n",
                args.data.display()
            ),
        );
    }
    if args.status {
        return status(&args);
    }
    if !args.data.join("devnet.json").exists() {
        let bad_snapshots = args
            .test_serve_bad_snapshots
            .iter()
            .map(|s| {
                let (i, how) = s
                    .split_once(':')
                    .context("--test-serve-bad-snapshots takes I:HOW[,HOW...]")?;
                let i: usize = i.parse().context("a validator index")?;
                if i >= args.validators as usize {
                    bail!("--test-serve-bad-snapshots: there is no validator {i}");
                }
                Ok((i, how.to_string()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cometbft = devnet::find_cometbft()?;
        let config = DevnetConfig {
            validators: args.validators as usize,
            accounts: args.accounts,
            seed: args.seed,
            base_port: args.base_port,
            empty_blocks_ms: args.empty_blocks_ms,
            mempool_gossip: !args.no_mempool_gossip,
            index: !args.no_index,
            retain_blocks: args.retain_blocks,
            snapshot_interval: args.snapshot_interval,
            snapshot_chunk_bytes: args.test_snapshot_chunk_bytes,
            snapshot_keep: args.snapshot_keep as usize,
            bad_snapshots,
        };
        eprintln!(
            "creating a devnet of {} validators in {} ({} accounts)...",
            config.validators,
            args.data.display(),
            config.accounts
        );
        devnet::create(&args.data, &config, &cometbft)?;
    }
    let d = devnet::start(&args.data)?;
    devnet::wait_ready(&d, &args.data)?;
    if args.join > 0 {
        return join(&args, &d);
    }
    let rpcs: Vec<String> = d.validators.iter().map(|v| v.rpc.clone()).collect();
    let mut text = format!(
        "devnet of {} validators running in {} (stop it with `tally devnet --data {} --stop`)\n\n",
        d.validators.len(),
        args.data.display(),
        args.data.display()
    );
    text.push_str(
        "node       rpc                 metrics             tally pid  cometbft pid  logs\n",
    );
    for (node, v) in d.nodes() {
        text.push_str(&format!(
            "{:<9}  {:<18}  {:<18}  {:>9}  {:>12}  {}/{}/{{tally,cometbft}}.log\n",
            node.name(),
            v.rpc,
            v.metrics.as_deref().unwrap_or("-"),
            v.tally_pid.unwrap_or(0),
            v.cometbft_pid.unwrap_or(0),
            args.data.display(),
            node.name()
        ));
    }
    text.push_str(&format!(
        "\nnext: tally load --rpc {} --transfers 100000 --accounts {} --seed {}\n",
        rpcs.join(","),
        d.accounts,
        d.seed
    ));
    output(
        args.json,
        json!({
            "dir": args.data,
            "rpc": rpcs,
            "validators": d.validators,
            "full_nodes": d.full_nodes,
            "accounts": d.accounts,
            "seed": d.seed,
        }),
        text,
    )
}

/// `--join N`: adds the nodes, waits until they follow the head, reports how it went.
fn join(args: &DevnetArgs, d: &Devnet) -> anyhow::Result<()> {
    let rpc0 = Rpc::new(&d.validators[0].rpc);
    // Header times are read as the blocks pass: a pruned validator no longer has them at
    // the end.
    let at = |h: u64| devnet::block_time_ms(&rpc0, h).map(|t| (h, t));
    let h0 = rpc0.height()?;
    let start = at(h0);
    let earlier = at(h0.saturating_sub(BLOCKS_BEFORE_JOIN).max(1));
    let started = Instant::now();
    let (d, added) = devnet::join(&args.data, args.join as usize)?;
    eprintln!(
        "started {} full node(s) joining by state sync; waiting until they follow the head...",
        added.len()
    );
    let reports = devnet::wait_joined(&d, &added, started, devnet::JOIN_TIMEOUT);
    let end = at(rpc0.height()?);
    let before = earlier
        .zip(start)
        .and_then(|(a, b)| devnet::mean_block_ms(a, b));
    let during = start
        .zip(end)
        .and_then(|(a, b)| devnet::mean_block_ms(a, b));
    let f = |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut text = String::from("node  snapshot  restored (s)  following (s)  peak RSS (MiB)\n");
    for r in &reports {
        text.push_str(&format!(
            "{:<4}  {:>8}  {:>12}  {:>13}  {:>14}\n",
            r.node,
            r.snapshot_height.map_or("-".to_string(), |h| h.to_string()),
            f(r.restored_s, 1),
            f(r.following_s, 1),
            f(r.peak_rss_mib, 0),
        ));
    }
    text.push_str(&format!(
        "validator 0's mean block time: {} ms before the join, {} ms during it\n",
        f(before, 1),
        f(during, 1)
    ));
    output(
        args.json,
        json!({
            "joined": reports,
            "block_ms_before": before,
            "block_ms_during": during,
            "full_nodes": d.full_nodes,
        }),
        text,
    )?;
    if let Some(r) = reports.iter().find(|r| r.following_s.is_none()) {
        bail!(
            "{} did not follow the head within {:?}: see {}/{}/{{tally,cometbft}}.log",
            r.node,
            devnet::JOIN_TIMEOUT,
            args.data.display(),
            r.node
        );
    }
    Ok(())
}

/// `--status`: each node as CometBFT and Tally see it.
fn status(args: &DevnetArgs) -> anyhow::Result<()> {
    let nodes = devnet::status(&args.data)?;
    let mut text = String::from(
        "node  running  height  earliest  app hash          catching up  joined at  snapshots\n",
    );
    for n in &nodes {
        let snapshots: Vec<String> = n.tally["snapshots"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["height"].as_u64().map(|h| h.to_string()))
            .collect();
        text.push_str(&format!(
            "{:<4}  {:<7}  {:>6}  {:>8}  {:<16}  {:<11}  {:>9}  {}\n",
            n.node,
            if n.running { "yes" } else { "no" },
            n.height,
            n.earliest_height,
            n.app_hash.get(..16).unwrap_or(&n.app_hash),
            if n.catching_up { "yes" } else { "no" },
            n.tally["state_synced_at"]
                .as_u64()
                .map_or("genesis".to_string(), |h| h.to_string()),
            snapshots.join(","),
        ));
    }
    output(args.json, json!({ "nodes": nodes }), text)
}
