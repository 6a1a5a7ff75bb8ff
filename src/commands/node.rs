//! `tally node`: Tally as a CometBFT ABCI application.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::node::abci::{self, Address};
use crate::node::app::{App, NodeOptions};
use crate::node::ledger::DEFAULT_RETAIN_BLOCKS;
use crate::node::sync::{BadSnapshots, DEFAULT_SNAPSHOT_KEEP};

/// Run Tally as the ABCI application of a CometBFT node.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally node --data ./node0                                  # listens on tcp://127.0.0.1:26658
  tally node --data ./node0 --abci unix://./node0/abci.sock  # a unix socket
  cometbft start --home ./cmt0 --proxy_app tcp://127.0.0.1:26658
  tally node --data ./new --genesis ./cmt-new/config/genesis.json
                                                             # joins by state sync

Start `tally node` first, then `cometbft start` pointing at the same address. CometBFT's
genesis `app_state` holds Tally's initial state (accounts, contracts, allocations); `tally
devnet` writes one. A restarted node resumes at its last committed block.

A node on an empty data directory whose CometBFT has `[statesync] enable = true` joins by
state sync: it restores a peer's snapshot, checking every chunk against the app hash
CometBFT's light client verified, then follows the chain. It needs --genesis, since no
InitChain comes. Blocks past --retain-blocks are pruned, in Tally's store and CometBFT's.")]
pub struct NodeArgs {
    /// The node's data directory (the chain is created in it when CometBFT sends InitChain).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Where CometBFT connects: tcp://HOST:PORT or unix://PATH.
    #[arg(long, default_value = "tcp://127.0.0.1:26658")]
    pub abci: String,
    /// Blocks kept below the head (0: every block). Older ones are pruned from Tally's store,
    /// and CometBFT is told to prune its block store alike (ABCI `retain_height`), so this
    /// node can no longer serve them to a peer that block-syncs from further back; no
    /// validity rule reads them. Keep at least the consensus parameter
    /// `evidence.max_age_num_blocks` on a network that must verify evidence that old.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RETAIN_BLOCKS)]
    pub retain_blocks: u64,
    /// Snapshots kept for peers that join by state sync (the chain takes them at the heights
    /// genesis fixes; older ones are deleted).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SNAPSHOT_KEEP as u64,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub snapshot_keep: u64,
    /// The network's CometBFT genesis file: needed by a node that joins by state sync
    /// (CometBFT's `[statesync] enable = true` on an empty data directory), which gets no
    /// InitChain. Ignored once the node has a chain.
    #[arg(long, value_name = "FILE")]
    pub genesis: Option<PathBuf>,
    /// Serve Prometheus metrics at ADDR (HOST:PORT; any path): each ABCI call's time as a
    /// histogram (FinalizeBlock is block execution, Commit the durable write, CheckTx
    /// signature verification), the mempool's size, the height, fees burned, the next block's
    /// prices and speculation's hit rate.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// For tests only: serve wrong snapshot chunks (these ways in turn), so a test can sync
    /// next to a real misbehaving peer.
    #[arg(long, value_name = "HOW", value_delimiter = ',', hide = true)]
    pub test_serve_bad_snapshots: Vec<BadSnapshots>,
}

pub fn run(args: NodeArgs) -> anyhow::Result<()> {
    let address: Address = args.abci.parse()?;
    // main() checked TALLY_VERIFY_BACKEND before any command ran.
    let backend = tally_chain::crypto::Backend::best();
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create {}", args.data.display()))?;
    let options = NodeOptions {
        retain_blocks: args.retain_blocks,
        snapshot_keep: args.snapshot_keep as usize,
        genesis: args.genesis,
        serve_bad_snapshots: args.test_serve_bad_snapshots,
    };
    let app = Arc::new(App::open(args.data.clone(), options)?);
    if let Some(addr) = args.metrics.clone() {
        serve_metrics(addr, app.clone());
    }
    eprintln!(
        "tally node: data {}, listening on {address}, verifying with {backend:?}",
        args.data.display()
    );
    abci::serve(&address, app)
}

/// How often a node whose metrics address was taken tries it again.
const METRICS_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Serves `app`'s metrics at `addr`. A taken port (a process that held it still exiting, or
/// another program) does not keep a validator from consensus: the node says so, goes on, and
/// tries the address again every [`METRICS_RETRY`] until it gets it.
fn serve_metrics(addr: String, app: Arc<App>) {
    let serve = move || {
        let scraped = app.clone();
        crate::node::metrics::serve(&addr, move || scraped.render_metrics())
    };
    match serve() {
        Ok(bound) => eprintln!("tally node: metrics at http://{bound}/metrics"),
        Err(e) => {
            eprintln!("tally node: {e:#}; running without metrics, trying again every second");
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(METRICS_RETRY);
                    if let Ok(bound) = serve() {
                        eprintln!("tally node: metrics at http://{bound}/metrics");
                        return;
                    }
                }
            });
        }
    }
}
