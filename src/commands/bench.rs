//! `tally bench`: the experiment of the EOS post, done properly.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tally_chain::workload::{self, BenchConfig, Distribution};
use tally_chain::{Access, Chain, ChainConfig, Pipeline};
use tally_runtime::{Runtime, RuntimeConfig};

use super::store::{StoreKind, open_store};

/// Push signed transfers through the simplecoin contract and report transfers per second.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally bench                                   # 200,000 signed transfers, log store in a temp dir
  tally bench --accounts 10000000 --dist zipf   # the Vryx shape: 10M accounts, hot few
  tally bench --store memory --unsigned         # execution alone
  tally bench --data ./bench-data               # keep the store; rerun to resume after a crash
  tally bench --json - | jq .tps                # machine-readable, on stdout
  tally bench --seed 7 --json run.json          # same seed => same state_checksum
  tally bench --store memory --unsigned --baseline native,wasmi
                                                # execution vs plain Rust vs an interpreter
  tally bench --sequential                      # every pipeline stage off, for comparison
  tally bench --plot run.svg                    # transfers/s and memory per block

Transfers are generated and signed by the client before each block's timer starts; the
chain verifies every signature inside the timed section.")]
pub struct BenchArgs {
    /// Transfers to push.
    #[arg(long, default_value_t = 200_000)]
    pub transfers: u64,
    /// Accounts to move coins between (at least 2).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(2..))]
    pub accounts: u64,
    /// How sender and recipient are picked: uniform, or Zipf-Mandelbrot (s=1.0001, v=2.7).
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    pub dist: Dist,
    /// Seed of the workload; the same seed gives the same state checksum.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Transactions per block.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub block_size: u64,
    /// Where state lives: the embedded log store, memory, or RocksDB (needs the `rocksdb`
    /// cargo feature).
    #[arg(long, value_enum, default_value_t = StoreKind::Log)]
    pub store: StoreKind,
    /// Skip signing and verification: measures execution alone.
    #[arg(long)]
    pub unsigned: bool,
    /// Keep the store in DIR (default: a temporary directory). Rerunning the same command on
    /// DIR resumes the run where it stopped.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Write a JSON report to FILE ('-' for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw transfers/s per block and memory over time to FILE (SVG).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Verify signatures one at a time on the executing thread, not in batches on all cores.
    #[arg(long)]
    pub no_batch_verify: bool,
    /// Look ids up in the duplicate window one at a time, not per block on all cores.
    #[arg(long)]
    pub no_batch_dedup: bool,
    /// Encode transactions for the block body while including them, not ahead on all cores.
    #[arg(long)]
    pub no_early_encode: bool,
    /// Make each block durable before the next one executes.
    #[arg(long)]
    pub no_overlap_commit: bool,
    /// Every pipeline stage off (the four --no-* switches at once).
    #[arg(long)]
    pub sequential: bool,
    /// The contract the transfers go through: the 2017 C simplecoin or the Rust token-rs.
    #[arg(long, value_enum, default_value_t = ContractArg::Simplecoin)]
    pub contract: ContractArg,
    /// Also run the same workload with baseline executors and report them side by side:
    /// `native` (simplecoin's transfer in plain Rust) and `wasmi` (the same .wasm in the wasmi
    /// interpreter), each on a fresh store of the same kind.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    pub baseline: Vec<Baseline>,
    /// Worker threads for the parallel stages (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
}

/// `--contract` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContractArg {
    /// contracts/simplecoin.c, the 2017 contract.
    Simplecoin,
    /// contracts/token-rs, the Rust token.
    TokenRs,
}

impl From<ContractArg> for workload::BenchContract {
    fn from(c: ContractArg) -> Self {
        match c {
            ContractArg::Simplecoin => Self::Simplecoin,
            ContractArg::TokenRs => Self::TokenRs,
        }
    }
}

/// `--baseline` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// The transfer logic compiled into the node: the limit for any runtime.
    Native,
    /// The same .wasm in the wasmi interpreter.
    Wasmi,
}

impl Baseline {
    fn label(self) -> &'static str {
        match self {
            Baseline::Native => "native",
            Baseline::Wasmi => "wasmi",
        }
    }
}

/// `--dist` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Dist {
    /// Every account equally likely.
    Uniform,
    /// Zipf-Mandelbrot, s = 1.0001, v = 2.7.
    Zipf,
}

impl From<Dist> for Distribution {
    fn from(d: Dist) -> Self {
        match d {
            Dist::Uniform => Distribution::Uniform,
            Dist::Zipf => Distribution::Zipf,
        }
    }
}

/// The CPU model, for reports that name the machine they ran on.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Peak resident memory of this process (VmHWM), in bytes.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// The settings a data directory was created with, so a rerun can resume only the same run.
fn bench_marker(config: &BenchConfig, store: StoreKind) -> serde_json::Value {
    json!({
        "transfers": config.transfers,
        "accounts": config.accounts,
        "dist": config.dist.label(),
        "seed": config.seed,
        "block_size": config.block_size,
        "signed": config.signed,
        "store": store.label(),
        "contract": config.contract.label(),
    })
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads as usize)
            .build_global()
            .context("cannot start the worker threads")?;
    }
    let pipeline = Pipeline {
        batch_verify: !(args.sequential || args.no_batch_verify),
        batch_dedup: !(args.sequential || args.no_batch_dedup),
        early_encode: !(args.sequential || args.no_early_encode),
        overlap_commit: !(args.sequential || args.no_overlap_commit),
    };
    let config = BenchConfig {
        transfers: args.transfers,
        accounts: args.accounts,
        dist: args.dist.into(),
        seed: args.seed,
        block_size: args.block_size as usize,
        signed: !args.unsigned,
        pipeline,
        contract: args.contract.into(),
    };
    let chain_config = ChainConfig {
        check_signatures: config.signed,
        ..ChainConfig::default()
    };

    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&data)
        .with_context(|| format!("cannot create data directory {}", data.display()))?;
    let marker_path = data.join("bench.json");
    let marker = bench_marker(&config, args.store);
    let resuming = marker_path.exists();
    if resuming {
        let found: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&marker_path)
                .with_context(|| format!("cannot read {}", marker_path.display()))?,
        )
        .with_context(|| format!("{} is not a bench marker", marker_path.display()))?;
        anyhow::ensure!(
            found == marker,
            "{} holds a bench run with other settings ({found}); use another --data directory \
             or the same flags",
            data.display()
        );
    } else {
        std::fs::write(&marker_path, serde_json::to_string_pretty(&marker)? + "\n")?;
    }

    // Measure both tiers of the module cache: a compile, then a fresh runtime that finds the
    // module on disk. The chain then runs on the second runtime, as a restarted node would.
    let cache = tempfile::tempdir().context("cannot create a temporary cache directory")?;
    let runtime_config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let start = Instant::now();
    Runtime::new(runtime_config.clone())?.prepare(config.contract.wasm())?;
    let compile = start.elapsed();
    let runtime = Arc::new(Runtime::new(runtime_config)?);
    let start = Instant::now();
    runtime.prepare(config.contract.wasm())?;
    let cache_load = start.elapsed();
    anyhow::ensure!(
        runtime.cache_stats().disk_hits == 1,
        "the module cache did not serve simplecoin from disk: {:?}",
        runtime.cache_stats()
    );

    let store = open_store(
        args.store,
        &data.join("store"),
        chain_config.retain_blocks,
        Access::ReadWrite,
    )?;
    let mut chain = Chain::open(runtime, store, chain_config.clone())?;
    let bar = ProgressBar::new(config.transfers).with_style(
        ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} transfers ({per_sec}, {eta})")
            .expect("valid template"),
    );
    let report = if resuming {
        workload::resume(&mut chain, &config, &mut |done| bar.set_position(done))?
    } else {
        workload::run(&mut chain, &config, &mut |done| bar.set_position(done))?
    };
    bar.finish_and_clear();

    // Baselines: the same workload on a fresh store of the same kind, same settings.
    let mut baselines = serde_json::Map::new();
    for &baseline in &args.baseline {
        let executor: tally_chain::NativeContract = match baseline {
            Baseline::Native => Arc::new(workload::native_simplecoin),
            Baseline::Wasmi => super::wasmi_baseline::executor(config.contract.wasm())?,
        };
        let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
        let store = open_store(
            args.store,
            &dir.path().join("store"),
            chain_config.retain_blocks,
            Access::ReadWrite,
        )?;
        let mut chain = Chain::open(runtime, store, chain_config.clone())?;
        chain.set_native(workload::SIMPLECOIN, executor);
        let base = workload::run(&mut chain, &config, &mut |_| {})?;
        anyhow::ensure!(
            base.state_checksum == report.state_checksum || resuming,
            "the {} baseline reached another state than the contract",
            baseline.label()
        );
        let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / base.transfers.max(1) as f64;
        baselines.insert(
            baseline.label().into(),
            json!({
                "tps": base.tps(),
                "verify_us": per(base.phases.verify),
                "execute_us": per(base.phases.execute),
                "commit_us": per(base.phases.commit),
            }),
        );
    }

    let tps = report.tps();
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / report.transfers.max(1) as f64;
    let us_per_transfer = per(report.elapsed);
    let checksum = hex::encode(report.state_checksum);
    let (peak_rss, disk) = (peak_rss_bytes(), chain.store().disk_bytes());
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let rows = [
        ("transfers", report.transfers.to_string()),
        ("failed", report.failed.to_string()),
        ("seconds", format!("{:.3}", report.elapsed.as_secs_f64())),
        ("transfers/s", format!("{tps:.0}")),
        (
            "verify ceiling",
            match report.verify_ceiling_tps() {
                Some(c) => format!("{c:.0}/s (this run reaches {:.2} of it)", tps / c),
                None => "- (unsigned)".into(),
            },
        ),
        ("µs per transfer", format!("{us_per_transfer:.2}")),
        (
            "  of which verify",
            format!("{:.2} µs", per(report.phases.verify)),
        ),
        (
            "  of which execute",
            format!("{:.2} µs", per(report.phases.execute)),
        ),
        (
            "  of which commit",
            format!("{:.2} µs", per(report.phases.commit)),
        ),
        (
            "blocks",
            format!("{} of {}", report.blocks, config.block_size),
        ),
        ("height", report.height.to_string()),
        ("peak RSS", mib(peak_rss)),
        ("disk", mib(disk)),
        (
            "compile at deploy",
            format!("{:.2} ms", compile.as_secs_f64() * 1e3),
        ),
        (
            "load from disk cache",
            format!("{:.1} µs", cache_load.as_secs_f64() * 1e6),
        ),
        ("state checksum", checksum.clone()),
    ];
    let mut rows = rows.to_vec();
    for (name, b) in &baselines {
        rows.push((
            "baseline",
            format!(
                "{name}: {:.0} transfers/s ({:.2} µs execute per transfer; Tally reaches {:.2} of it)",
                b["tps"].as_f64().unwrap_or(0.0),
                b["execute_us"].as_f64().unwrap_or(0.0),
                tps / b["tps"].as_f64().unwrap_or(f64::INFINITY),
            ),
        ));
    }
    let mut table = format!(
        "tally bench: {}, {} accounts, {} distribution, seed {}, {} store, {}{}\n",
        config.contract.label(),
        config.accounts,
        config.dist.label(),
        config.seed,
        args.store.label(),
        if config.signed {
            "signed by the client before timing, verified by the chain"
        } else {
            "unsigned (execution alone)"
        },
        if resuming { ", resumed" } else { "" }
    );
    table.push_str(&format!(
        "  pipeline: {}, {} threads\n",
        pipeline.describe(),
        rayon::current_num_threads()
    ));
    for (name, value) in rows {
        table.push_str(&format!("  {name:<22} {value}\n"));
    }

    let report_json = json!({
        "transfers": report.transfers,
        "failed": report.failed,
        "seconds": report.elapsed.as_secs_f64(),
        "tps": tps,
        "verify_ceiling_tps": report.verify_ceiling_tps(),
        "baselines": baselines,
        "pipeline": {
            "batch_verify": pipeline.batch_verify,
            "batch_dedup": pipeline.batch_dedup,
            "early_encode": pipeline.early_encode,
            "overlap_commit": pipeline.overlap_commit,
        },
        "threads": rayon::current_num_threads(),
        "per_block": report.per_block.iter().map(|(tps, rss)| json!({"tps": tps, "rss_bytes": rss})).collect::<Vec<_>>(),
        "us_per_transfer": us_per_transfer,
        "verify_us": per(report.phases.verify),
        "execute_us": per(report.phases.execute),
        "commit_us": per(report.phases.commit),
        "blocks": report.blocks,
        "height": report.height,
        "state_checksum": checksum,
        "store": args.store.label(),
        "signed": config.signed,
        "resumed": resuming,
        "peak_rss_bytes": peak_rss,
        "disk_bytes": disk,
        "compile_ms": compile.as_secs_f64() * 1e3,
        "cache_load_us": cache_load.as_secs_f64() * 1e6,
        "config": {
            "transfers": config.transfers,
            "accounts": config.accounts,
            "dist": config.dist.label(),
            "seed": config.seed,
            "block_size": config.block_size,
            "contract": config.contract.label(),
            "store": args.store.label(),
            "signed": config.signed,
            "pipeline": pipeline.describe(),
        },
        "machine": {
            "cpu": cpu_model(),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        },
    });
    if let Some(path) = &args.plot {
        let title = format!(
            "tally bench: {} transfers, {} accounts ({}), {} store, {}; {tps:.0} transfers/s",
            report.transfers,
            config.accounts,
            config.dist.label(),
            args.store.label(),
            if config.signed { "signed" } else { "unsigned" },
        );
        let svg = super::plot::svg(
            &title,
            config.block_size as u64,
            report.transfers,
            &report.per_block,
        );
        std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    match args.json.as_deref() {
        Some(path) if path.as_os_str() == "-" => {
            eprint!("{table}");
            println!("{}", serde_json::to_string_pretty(&report_json)?);
        }
        Some(path) => {
            print!("{table}");
            std::fs::write(path, serde_json::to_string_pretty(&report_json)? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => print!("{table}"),
    }
    Ok(())
}
