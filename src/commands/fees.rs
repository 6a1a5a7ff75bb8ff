//! `tally fees`: the prices of the five fee dimensions, their targets, and what the last
//! blocks used, from a data directory or a running node (ABCI query `fees`).

use clap::Args;
use serde::{Deserialize, Serialize};
use tally_chain::fee::{DIMENSIONS, Dimension, FeeSchedule, FeeState, PRICE_SCALE, Prices, Usage};
use tally_chain::{Chain, ChainError};

use super::local::{Opened, Source};

/// Blocks `tally fees` lists unless told, and the most a node lists for one query (each is one
/// block read): enough to see a price move over a minute of half-second blocks.
pub const DEFAULT_BLOCKS: u64 = 10;
/// The most blocks one `fees` query lists.
pub const MAX_BLOCKS: u64 = 200;

/// Show the fee prices, targets and the last blocks' usage.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally fees --data ./chain
  tally fees --rpc 127.0.0.1:26601 --blocks 50 --json

A transaction pays Σ price × usage over the five dimensions (bandwidth in bytes, compute in
fuel, read, allocate and write in units: 64 a key plus its bytes), plus its tip, never more
than its max fee. Each price moves toward its per-block target by at most 1/8 a block.")]
pub struct FeesArgs {
    /// Where to read.
    #[command(flatten)]
    pub source: Source,
    /// How many of the last blocks to list (at most 200).
    #[arg(long, default_value_t = DEFAULT_BLOCKS, value_parser = clap::value_parser!(u64).range(0..=MAX_BLOCKS))]
    pub blocks: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One block's prices and usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockFees {
    /// Its height.
    pub height: u64,
    /// Who proposed it (its tips went there).
    pub proposer: String,
    /// The prices its transactions paid.
    pub prices: Prices,
    /// What they used.
    pub usage: Usage,
}

/// What `tally fees` shows, and what a node's `fees` query answers (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeesView {
    /// The last committed block.
    pub height: u64,
    /// The chain's schedule.
    pub schedule: FeeSchedule,
    /// The next block's prices, the last block's usage, the coins burned so far.
    pub state: FeeState,
    /// The last blocks, oldest first.
    pub recent: Vec<BlockFees>,
}

/// The fee view of `chain` with its last `blocks` blocks (at most [`MAX_BLOCKS`], and only
/// those the store retains).
pub fn view(chain: &Chain, blocks: u64) -> Result<FeesView, ChainError> {
    let head = chain.head().height;
    let store = chain.store();
    let from = (head + 1)
        .saturating_sub(blocks.min(MAX_BLOCKS))
        .max(store.first_retained())
        .max(1);
    let mut recent = Vec::new();
    for height in from..=head {
        // Headers only: this view answers a free query (`fees`) under the consensus lock, and
        // a whole block is up to 16 MiB of body and its changes.
        if let Some(h) = store.header(height)? {
            recent.push(BlockFees {
                height,
                proposer: h.proposer.to_string(),
                prices: h.prices,
                usage: h.usage,
            });
        }
    }
    Ok(FeesView {
        height: head,
        schedule: chain.config().fees,
        state: chain.fee_state()?,
        recent,
    })
}

/// A price per unit in coins, readable: `PRICE_SCALE`ths shown as a decimal.
fn coins_per_unit(price: u64) -> String {
    let whole = price / PRICE_SCALE;
    let frac = price % PRICE_SCALE;
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:06}")
            .trim_end_matches('0')
            .to_string()
    }
}

/// The table `tally fees` prints.
pub fn table(v: &FeesView) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "fees after block {} ({} coins burned since genesis){}\n",
        v.height,
        v.state.burned,
        if v.schedule.is_zero() {
            "; a zero schedule: use is free"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "  {:<10} {:>16} {:>7} {:>14} {:>14} {:>14} {:>7}",
        "dimension", "price (coins)", "per", "last block", "target", "max", "of tgt"
    );
    for d in Dimension::ALL {
        let i = d as usize;
        let used = v.state.usage.0[i];
        let _ = writeln!(
            out,
            "  {:<10} {:>16} {:>7} {:>14} {:>14} {:>14} {:>6.0}%",
            d.name(),
            coins_per_unit(v.state.prices[i]),
            d.unit(),
            used,
            v.schedule.target[i],
            v.schedule.max[i],
            100.0 * used as f64 / v.schedule.target[i].max(1) as f64
        );
    }
    if !v.recent.is_empty() {
        let _ = writeln!(out, "\n  last blocks' usage (percent of each target):");
        let _ = write!(out, "  {:>8}", "height");
        for d in Dimension::ALL {
            let _ = write!(out, " {:>10}", d.name());
        }
        out.push('\n');
        for b in &v.recent {
            let _ = write!(out, "  {:>8}", b.height);
            for i in 0..DIMENSIONS {
                let share = 100.0 * b.usage.0[i] as f64 / v.schedule.target[i].max(1) as f64;
                let _ = write!(out, " {:>9.1}%", share);
            }
            out.push('\n');
        }
    }
    out
}

pub fn run(args: FeesArgs) -> anyhow::Result<()> {
    let view = match args.source.open()? {
        Opened::Local(local) => view(&local.chain, args.blocks)?,
        Opened::Node(rpc) => {
            let (code, value, log) = rpc.query("fees", &args.blocks.to_le_bytes())?;
            anyhow::ensure!(
                code == 0,
                "{} answered the fees query with code {code}: {log}",
                rpc.url()
            );
            serde_json::from_slice(&value)
                .map_err(|e| anyhow::anyhow!("the node's fees answer is not a fee view: {e}"))?
        }
    };
    super::local::output(args.json, serde_json::to_value(&view)?, table(&view))
}
