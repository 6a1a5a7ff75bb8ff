//! One report of a `tally bench` run: serialised as its JSON, and printed as its table, from
//! the same fields.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

/// The median and spread of a per-block figure (a ratio of two engines' throughput).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// The median over the blocks.
    pub median: f64,
    /// The 10th percentile (nearest rank).
    pub p10: f64,
    /// The 90th percentile (nearest rank).
    pub p90: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// How many blocks.
    pub blocks: usize,
}

impl Spread {
    /// The spread of `values` (all zero when there are none). NaNs sort last.
    pub fn of(values: &[f64]) -> Self {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let Some((&min, &max)) = v.first().zip(v.last()) else {
            return Self::default();
        };
        // Nearest rank: the smallest value with at least q of the values at or below it.
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            p10: rank(0.1),
            p90: rank(0.9),
            min,
            max,
            blocks: n,
        }
    }
}

/// A baseline measured in the same run, interleaved with Tally block by block.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineReport {
    /// Transfers per second it reached over the whole run.
    pub tps: f64,
    /// µs per transfer in the stateless stage.
    pub verify_us: f64,
    /// µs per transfer executing.
    pub execute_us: f64,
    /// µs per transfer committing.
    pub commit_us: f64,
    /// Tally's transfers per second over this baseline's, block by block: the figure to
    /// quote, since both ran the same block within moments of each other.
    pub ratio: Spread,
    /// The per-block ratios, in block order.
    pub per_block_ratio: Vec<f64>,
    /// The baseline's state checksum, hex (`None` for an engine with a state of its own).
    pub state_checksum: Option<String>,
    /// Whether it reached Tally's state (`None` when it keeps another kind of state).
    pub same_state: Option<bool>,
    /// The sum of the benchmark accounts' balances at the end (for trades, of both tokens,
    /// the pool's included), which must equal what genesis gave them.
    pub accounts_supply: u64,
}

/// The pipeline switches of the run.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    /// Batched signature verification on all cores.
    pub batch_verify: bool,
    /// Batched duplicate check.
    pub batch_dedup: bool,
    /// Encoding ahead of execution on all cores.
    pub early_encode: bool,
    /// Durable sync overlapped with the next block.
    pub overlap_commit: bool,
    /// Speculative parallel execution.
    pub parallel_execute: bool,
}

/// How parallel execution went.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelReport {
    /// Transactions run speculatively on all cores.
    pub speculated: u64,
    /// Of those, finalized from their speculative run (no re-execution).
    pub confirmed: u64,
    /// `confirmed / speculated` (0 when nothing was speculated).
    pub confirmed_share: f64,
}

/// One block's throughput, and the process's memory and the store's disk after it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BlockPoint {
    /// Transfers per second of the block.
    pub tps: f64,
    /// Resident memory after it, in bytes.
    pub rss_bytes: u64,
    /// Bytes the store occupies on disk after it (0 for memory, and for the EVM baseline).
    pub disk_bytes: u64,
}

/// What the run was asked to do.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// Transfers pushed.
    pub transfers: u64,
    /// Accounts.
    pub accounts: u64,
    /// Account distribution.
    pub dist: &'static str,
    /// Workload seed.
    pub seed: u64,
    /// Transactions per block.
    pub block_size: usize,
    /// Contract the transfers go through.
    pub contract: &'static str,
    /// Store backend.
    pub store: &'static str,
    /// Whether transfers were signed.
    pub signed: bool,
    /// The pipeline switches, as text.
    pub pipeline: String,
}

/// The machine it ran on.
#[derive(Debug, Clone, Serialize)]
pub struct MachineReport {
    /// CPU model.
    pub cpu: String,
    /// Cores available.
    pub cores: usize,
}

/// What a `tally bench` run paid in fees.
#[derive(Debug, Clone, Serialize)]
pub struct FeesReport {
    /// `standard`, or `free` (the zero schedule).
    pub schedule: &'static str,
    /// Coins the run's fees burned.
    pub burned: u64,
    /// Of those, per transfer.
    pub per_transfer: f64,
    /// The prices the next block would pay, per dimension.
    pub prices: [u64; 5],
    /// Whether every native balance and the coins burned add up to the genesis supply (the
    /// run fails if not).
    pub conserved: bool,
}

/// Everything a `tally bench` run reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Transfers pushed in the timed section.
    pub transfers: u64,
    /// Of which failed.
    pub failed: u64,
    /// Seconds of the timed section.
    pub seconds: f64,
    /// Transfers per second.
    pub tps: f64,
    /// Transfers per second batched verification alone reaches (signed runs).
    pub verify_ceiling_tps: Option<f64>,
    /// Baselines measured in the same run, by name.
    pub baselines: BTreeMap<String, BaselineReport>,
    /// The sum of the benchmark accounts' balances at the end (for trades, of both tokens,
    /// the pool's included), checked against genesis's (`None` when no baseline was asked
    /// for: the check reads every account).
    pub accounts_supply: Option<u64>,
    /// What the transfers paid in fees (set by `tally bench` after its conservation check).
    pub fees: Option<FeesReport>,
    /// Pipeline switches.
    pub pipeline: PipelineReport,
    /// Worker threads.
    pub threads: usize,
    /// Parallel execution's speculation and confirmation counts.
    pub parallel: ParallelReport,
    /// Throughput and memory per block.
    pub per_block: Vec<BlockPoint>,
    /// µs per transfer, all phases.
    pub us_per_transfer: f64,
    /// Bytes of a transaction's signed encoding, on average: what a block stores and a
    /// network carries for each (issue 26).
    pub bytes_per_tx: f64,
    /// µs per transfer in the stateless stage.
    pub verify_us: f64,
    /// µs per transfer executing.
    pub execute_us: f64,
    /// µs per transfer committing.
    pub commit_us: f64,
    /// Blocks committed in the timed section.
    pub blocks: u64,
    /// Height of the last block.
    pub height: u64,
    /// Its state checksum, hex.
    pub state_checksum: String,
    /// Store backend.
    pub store: &'static str,
    /// Whether transfers were signed.
    pub signed: bool,
    /// Whether the run resumed a data directory.
    pub resumed: bool,
    /// Peak resident memory of the process.
    pub peak_rss_bytes: u64,
    /// Bytes the store occupies on disk.
    pub disk_bytes: u64,
    /// Seconds to create the chain (its genesis: the accounts, their keys and balances) or
    /// to reopen it, before the first block: not part of `seconds`.
    pub setup_seconds: f64,
    /// Milliseconds to compile the contract.
    pub compile_ms: f64,
    /// µs to load it from the disk cache.
    pub cache_load_us: f64,
    /// What the run was asked to do.
    pub config: ConfigReport,
    /// The machine.
    pub machine: MachineReport,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

impl Report {
    /// The report as the table `tally bench` prints.
    pub fn table(&self) -> String {
        let c = &self.config;
        let mut out = format!(
            "tally bench: {}, {} accounts, {} distribution, seed {}, {} store, {}{}\n",
            c.contract,
            c.accounts,
            c.dist,
            c.seed,
            c.store,
            if c.signed {
                "signed by the client before timing, verified by the chain"
            } else {
                "unsigned (execution alone)"
            },
            if self.resumed { ", resumed" } else { "" }
        );
        let _ = writeln!(out, "  pipeline: {}, {} threads", c.pipeline, self.threads);
        // What one transaction is: a trade on the swap workload, a transfer otherwise.
        let (unit, units, per_second) = if c.contract == "swap" {
            ("trade", "trades", "trades/s")
        } else {
            ("transfer", "transfers", "transfers/s")
        };
        let per_unit = format!("µs per {unit}");
        let mut rows: Vec<(&str, String)> = vec![
            (units, self.transfers.to_string()),
            ("failed", self.failed.to_string()),
            ("seconds", format!("{:.3}", self.seconds)),
            (per_second, format!("{:.0}", self.tps)),
            (
                "verify ceiling",
                match self.verify_ceiling_tps {
                    Some(v) => format!("{v:.0}/s (this run reaches {:.2} of it)", self.tps / v),
                    None => "- (unsigned)".into(),
                },
            ),
            (&per_unit, format!("{:.2}", self.us_per_transfer)),
            (
                "fees",
                match &self.fees {
                    Some(f) if f.schedule == "free" => "none (--free)".into(),
                    Some(f) => format!(
                        "{} coins burned, {:.0} per {unit}; balances + burned = genesis supply",
                        f.burned, f.per_transfer
                    ),
                    None => "-".into(),
                },
            ),
            (
                "parallel execution",
                if self.parallel.speculated == 0 {
                    "- (sequential)".into()
                } else {
                    format!(
                        "{:.1}% of {} speculative runs needed no re-execution",
                        self.parallel.confirmed_share * 100.0,
                        self.parallel.speculated
                    )
                },
            ),
            ("  of which verify", format!("{:.2} µs", self.verify_us)),
            ("  of which execute", format!("{:.2} µs", self.execute_us)),
            ("  of which commit", format!("{:.2} µs", self.commit_us)),
            ("blocks", format!("{} of {}", self.blocks, c.block_size)),
            ("height", self.height.to_string()),
            ("peak RSS", mib(self.peak_rss_bytes)),
            ("disk", mib(self.disk_bytes)),
            (
                if self.resumed { "reopen" } else { "genesis" },
                format!("{:.2} s", self.setup_seconds),
            ),
            ("compile at deploy", format!("{:.2} ms", self.compile_ms)),
            (
                "load from disk cache",
                format!("{:.1} µs", self.cache_load_us),
            ),
            ("state checksum", self.state_checksum.clone()),
        ];
        for (name, b) in &self.baselines {
            let r = &b.ratio;
            rows.push((
                "baseline",
                format!(
                    "{name}: {:.0} {per_second} ({:.2} µs execute per {unit}); Tally/{name} \
                     per block: median {:.2}, p10-p90 {:.2}-{:.2}, min-max {:.2}-{:.2} over {} \
                     blocks{}",
                    b.tps,
                    b.execute_us,
                    r.median,
                    r.p10,
                    r.p90,
                    r.min,
                    r.max,
                    r.blocks,
                    match b.same_state {
                        Some(true) => ", same state",
                        Some(false) => ", OTHER STATE",
                        None => "",
                    }
                ),
            ));
        }
        if let Some(supply) = self.accounts_supply {
            rows.push((
                if c.contract == "swap" {
                    "traders' + pool's"
                } else {
                    "accounts' coins"
                },
                format!("{supply} (conserved on every engine)"),
            ));
        }
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<22} {value}");
        }
        out
    }
}
