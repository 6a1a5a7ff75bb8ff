//! `tally bench`: the experiment of the EOS post, done properly.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tally_chain::workload::{self, BenchConfig, Distribution};
use tally_chain::{Chain, ChainConfig, MemoryStore};
use tally_runtime::{Runtime, RuntimeConfig};

/// Push transfers through the simplecoin contract and report transfers per second.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally bench                                   # 200,000 transfers among 10,000 accounts
  tally bench --transfers 1000000 --dist zipf   # hot accounts, as in the Vryx test
  tally bench --json - | jq .tps                # machine-readable, on stdout
  tally bench --seed 7 --json run.json          # same seed => same state_checksum")]
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
    /// Write a JSON report to FILE ('-' for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
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

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let config = BenchConfig {
        transfers: args.transfers,
        accounts: args.accounts,
        dist: args.dist.into(),
        seed: args.seed,
        ..BenchConfig::default()
    };

    // Measure both tiers of the module cache: a compile, then a fresh runtime that finds the
    // module on disk. The chain then runs on the second runtime, as a restarted node would.
    let cache = tempfile::tempdir().context("cannot create a temporary cache directory")?;
    let runtime_config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let start = Instant::now();
    Runtime::new(runtime_config.clone())?.prepare(workload::SIMPLECOIN_WASM)?;
    let compile = start.elapsed();
    let runtime = Arc::new(Runtime::new(runtime_config)?);
    let start = Instant::now();
    runtime.prepare(workload::SIMPLECOIN_WASM)?;
    let cache_load = start.elapsed();
    anyhow::ensure!(
        runtime.cache_stats().disk_hits == 1,
        "the module cache did not serve simplecoin from disk: {:?}",
        runtime.cache_stats()
    );

    let mut chain = Chain::open(
        runtime,
        Box::new(MemoryStore::new()),
        ChainConfig::default(),
    )?;
    let bar = ProgressBar::new(config.transfers).with_style(
        ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} transfers ({per_sec}, {eta})")
            .expect("valid template"),
    );
    let report = workload::run(&mut chain, &config, &mut |done| bar.set_position(done))?;
    bar.finish_and_clear();

    let tps = report.tps();
    let us_per_transfer = report.elapsed.as_secs_f64() * 1e6 / report.transfers.max(1) as f64;
    let checksum = hex::encode(report.state_checksum);
    let rows = [
        ("transfers", report.transfers.to_string()),
        ("failed", report.failed.to_string()),
        ("seconds", format!("{:.3}", report.elapsed.as_secs_f64())),
        ("transfers/s", format!("{tps:.0}")),
        ("µs per transfer", format!("{us_per_transfer:.2}")),
        (
            "blocks",
            format!("{} of {}", report.blocks, config.block_size),
        ),
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
    let mut table = format!(
        "tally bench: simplecoin, {} accounts, {} distribution, seed {}, memory store, unsigned\n",
        config.accounts,
        config.dist.label(),
        config.seed
    );
    for (name, value) in rows {
        table.push_str(&format!("  {name:<22} {value}\n"));
    }

    let report_json = json!({
        "transfers": report.transfers,
        "failed": report.failed,
        "seconds": report.elapsed.as_secs_f64(),
        "tps": tps,
        "us_per_transfer": us_per_transfer,
        "blocks": report.blocks,
        "height": report.height,
        "state_checksum": checksum,
        "compile_ms": compile.as_secs_f64() * 1e3,
        "cache_load_us": cache_load.as_secs_f64() * 1e6,
        "config": {
            "transfers": config.transfers,
            "accounts": config.accounts,
            "dist": config.dist.label(),
            "seed": config.seed,
            "block_size": config.block_size,
            "contract": "simplecoin",
            "store": "memory",
            "signed": false,
        },
        "machine": {
            "cpu": cpu_model(),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        },
    });
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
