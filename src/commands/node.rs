//! `tally node`: Tally as a CometBFT ABCI application.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::node::abci::{self, Address};
use crate::node::app::{App, NodeOptions};
use crate::node::ledger::DEFAULT_RETAIN_BLOCKS;

/// Run Tally as the ABCI application of a CometBFT node.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally node --data ./node0                                  # listens on tcp://127.0.0.1:26658
  tally node --data ./node0 --abci unix://./node0/abci.sock  # a unix socket
  cometbft start --home ./cmt0 --proxy_app tcp://127.0.0.1:26658

Start `tally node` first, then `cometbft start` pointing at the same address. CometBFT's
genesis `app_state` holds Tally's initial state (accounts, contracts, allocations); `tally
devnet` writes one. A restarted node resumes at its last committed block.")]
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
}

pub fn run(args: NodeArgs) -> anyhow::Result<()> {
    let address: Address = args.abci.parse()?;
    // main() checked TALLY_VERIFY_BACKEND before any command ran.
    let backend = tally_chain::crypto::Backend::best();
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create {}", args.data.display()))?;
    let options = NodeOptions {
        retain_blocks: args.retain_blocks,
    };
    let app = App::open(args.data.clone(), options)?;
    eprintln!(
        "tally node: data {}, listening on {address}, verifying with {backend:?}",
        args.data.display()
    );
    abci::serve(&address, Arc::new(app))
}
