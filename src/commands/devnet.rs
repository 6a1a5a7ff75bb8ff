//! `tally devnet`: a local multi-validator network of real CometBFT and Tally processes.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::local::output;
use crate::node::devnet::{self, DevnetConfig};

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

Each validator is two processes: `cometbft start` and `tally node`, joined by a unix socket
(DIR/vI/abci.sock); logs are DIR/vI/cometbft.log and DIR/vI/tally.log. Validator I serves RPC
on 127.0.0.1:(base-port + 10*I + 1). Genesis holds simplecoin and --accounts accounts (u1,
u2, ... as `tally bench` names them) whose keys `tally load` derives from --seed, and the
system account `tally`, whose key DIR/keystore.json holds: DIR is the wallet of `--rpc URL
--wallet DIR` commands (account create, deploy, push). CometBFT indexes transactions and their
events for `tx_search` and `tally tx --rpc` unless --no-index.
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
    /// Validator I listens on P2P base-port + 10*I and RPC base-port + 10*I + 1.
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
    if !args.data.join("devnet.json").exists() {
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
    let rpcs: Vec<String> = d.validators.iter().map(|v| v.rpc.clone()).collect();
    let mut text = format!(
        "devnet of {} validators running in {} (stop it with `tally devnet --data {} --stop`)\n\n",
        d.validators.len(),
        args.data.display(),
        args.data.display()
    );
    text.push_str("validator  rpc                 tally pid  cometbft pid  logs\n");
    for v in &d.validators {
        text.push_str(&format!(
            "v{:<8}  {:<18}  {:>9}  {:>12}  {}/v{}/{{tally,cometbft}}.log\n",
            v.index,
            v.rpc,
            v.tally_pid.unwrap_or(0),
            v.cometbft_pid.unwrap_or(0),
            args.data.display(),
            v.index
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
            "accounts": d.accounts,
            "seed": d.seed,
        }),
        text,
    )
}
