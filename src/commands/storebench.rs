//! `tally storebench`: a state-store workload against several stores in one run. The
//! workloads and their measurement are tally-bench's (`tally_bench::storebench`); this is
//! the command line.
//!
//! Each store runs in its own child process (the same binary, `--child`), so its peak memory
//! is its own; with `--runs N` the stores take turns (A B, B A, …) and the table shows
//! medians.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tally_bench::storebench::{self, Config, Store, StoreRun, WorkloadKind};
use tally_chain::Durability;

use crate::common::store::StoreKind;

/// Run a storage workload against the log store, RocksDB and memory, and compare them.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally storebench --workload transfers --scale 0.1          # 1M Zipf accounts, log vs memory
  tally storebench --workload griffin --scale 0.1 --store log,rocksdb
                                      # needs a build with --features rocksdb
  tally storebench --workload iavl --versions 500 --plot out/ # ops/s, memory, disk as SVG
  tally storebench --workload transfers --json - | jq '.stores[].ops_per_sec'
  tally storebench --workload griffin --runs 3                # stores take turns; medians

Workloads: griffin = loops of 1M puts (batches of 100) each followed by 1M random gets
(shared/seeds/004); iavl = the bank/staking/lockup changesets of shared/seeds/002;
transfers = tally bench's reads and writes for 10M Zipf accounts. --scale shrinks or grows
each (griffin: 50 loops x 1M x scale; transfers: 10M x scale accounts).")]
pub struct StorebenchArgs {
    /// The workload.
    #[arg(long, value_enum, default_value_t = WorkloadArg::Transfers)]
    pub workload: WorkloadArg,
    /// Stores to compare, comma-separated (rocksdb needs `--features rocksdb`).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = default_stores())]
    pub store: Vec<StoreKind>,
    /// Shrinks (< 1) or grows (> 1) the workload.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Seed of the workload.
    #[arg(long, default_value_t = 4)]
    pub seed: u64,
    /// iavl: versions to apply.
    #[arg(long, default_value_t = 1000)]
    pub versions: u64,
    /// transfers: blocks of 5,000 transfers after setup.
    #[arg(long, default_value_t = 200)]
    pub blocks: u64,
    /// When a commit is durable (default: none for griffin and iavl, as in the notebooks;
    /// immediate for transfers, as a chain commits).
    #[arg(long, value_enum)]
    pub durability: Option<DurabilityArg>,
    /// Each store runs this many times, taking turns; the table shows medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Where the stores live while running (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Write the full report as JSON to FILE ('-' for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw ops/s, memory and disk over time into DIR (SVG), one line per store.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Internal: run one store in this process and print its JSON.
    #[arg(long, hide = true)]
    pub child: bool,
}

fn default_stores() -> Vec<StoreKind> {
    if cfg!(feature = "rocksdb") {
        vec![StoreKind::Log, StoreKind::Rocksdb]
    } else {
        vec![StoreKind::Log, StoreKind::Memory]
    }
}

/// `--workload` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadArg {
    /// GriffinDB's loops of puts and random gets.
    Griffin,
    /// IAVL's bank/staking/lockup changesets.
    Iavl,
    /// tally bench's transfers, at the storage level.
    Transfers,
}

/// `--durability` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// fdatasync before each commit returns.
    Immediate,
    /// fdatasync in the background, done before the next commit.
    Background,
    /// No sync per commit.
    None,
}

impl DurabilityArg {
    fn durability(self) -> Durability {
        match self {
            Self::Immediate => Durability::Immediate,
            Self::Background => Durability::Background,
            Self::None => Durability::None,
        }
    }
    fn label(self) -> &'static str {
        match self {
            Self::Immediate => "immediate",
            Self::Background => "background",
            Self::None => "none",
        }
    }
}

impl StorebenchArgs {
    fn durability_arg(&self) -> DurabilityArg {
        self.durability.unwrap_or(match self.workload {
            WorkloadArg::Transfers => DurabilityArg::Immediate,
            _ => DurabilityArg::None,
        })
    }

    fn config(&self) -> Config {
        Config {
            workload: match self.workload {
                WorkloadArg::Griffin => WorkloadKind::Griffin,
                WorkloadArg::Iavl => WorkloadKind::Iavl,
                WorkloadArg::Transfers => WorkloadKind::Transfers,
            },
            scale: self.scale,
            seed: self.seed,
            versions: self.versions,
            blocks: self.blocks,
            durability: Some(self.durability_arg().durability()),
            runs: self.runs,
        }
    }
}

fn store(kind: StoreKind) -> Store {
    match kind {
        StoreKind::Log => Store::Log,
        StoreKind::Memory => Store::Memory,
        StoreKind::Rocksdb => Store::Rocksdb,
    }
}

pub fn run(args: StorebenchArgs) -> anyhow::Result<()> {
    if args.child {
        let [store] = args.store[..] else {
            anyhow::bail!("--child runs exactly one store");
        };
        let report = run_child(&args, store)?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    #[cfg(not(feature = "rocksdb"))]
    if args.store.contains(&StoreKind::Rocksdb) {
        anyhow::bail!(
            "this tally was built without RocksDB: rebuild with \
             `cargo build --release --features rocksdb` (needs apt-get install clang libclang-dev)"
        );
    }
    let mut runs: Vec<Vec<StoreRun>> = vec![Vec::new(); args.store.len()];
    for r in 0..args.runs as usize {
        // Take turns: each store goes first in some run.
        let n = args.store.len();
        for i in 0..n {
            let s = (i + r) % n;
            let report = spawn_child(&args, args.store[s])?;
            runs[s].push(report);
        }
    }
    let medians: Vec<StoreRun> = runs.into_iter().map(storebench::median_run).collect();
    let report = json!({
        "workload": args.workload,
        "parameters": args.config().workload().describe(),
        "durability": args.durability_arg().label(),
        "scale": args.scale,
        "seed": args.seed,
        "runs": args.runs,
        "stores": medians,
    });
    let table = storebench::table(&args.config(), &medians);
    match &args.json {
        Some(p) if p.as_os_str() == "-" => {
            eprint!("{table}");
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Some(p) => {
            std::fs::write(p, serde_json::to_string_pretty(&report)? + "\n")
                .with_context(|| format!("cannot write {}", p.display()))?;
            print!("{table}");
        }
        None => print!("{table}"),
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let title = format!("tally storebench --workload {:?}", args.workload).to_lowercase();
        for (file, what, unit, pick) in [
            ("ops.svg", "ops/s", "ops/s", 0),
            ("memory.svg", "resident memory", "MiB", 1),
            ("disk.svg", "disk use", "MiB", 2),
        ] {
            let series: Vec<(String, Vec<(f64, f64)>)> = medians
                .iter()
                .map(|r| {
                    let pts = r
                        .samples
                        .iter()
                        .map(|s| {
                            let y = match pick {
                                0 => s.ops_per_sec,
                                1 => s.rss as f64 / (1 << 20) as f64,
                                _ => s.disk as f64 / (1 << 20) as f64,
                            };
                            (s.t, y)
                        })
                        .collect();
                    (r.store.clone(), pts)
                })
                .collect();
            let svg = storebench::lines_svg(&format!("{title}: {what}"), unit, &series);
            let path = dir.join(file);
            std::fs::write(&path, svg)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

fn spawn_child(args: &StorebenchArgs, store: StoreKind) -> anyhow::Result<StoreRun> {
    let exe = std::env::current_exe().context("cannot find the tally binary")?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "storebench",
        "--child",
        "--workload",
        &format!("{:?}", args.workload).to_lowercase(),
        "--store",
        store.label(),
        "--scale",
        &args.scale.to_string(),
        "--seed",
        &args.seed.to_string(),
        "--versions",
        &args.versions.to_string(),
        "--blocks",
        &args.blocks.to_string(),
        "--durability",
        args.durability_arg().label(),
    ]);
    if let Some(d) = &args.data {
        cmd.arg("--data").arg(d);
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run the store's child process")?;
    anyhow::ensure!(
        out.status.success(),
        "the {} run failed ({})",
        store.label(),
        out.status
    );
    serde_json::from_slice(&out.stdout).context("the child's report is not JSON")
}

/// Runs one store in this process (`--child`), with a progress bar on stderr.
fn run_child(args: &StorebenchArgs, kind: StoreKind) -> anyhow::Result<StoreRun> {
    let temp = match &args.data {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::tempdir_in(d)
        }
        None => tempfile::tempdir(),
    }
    .context("cannot create a temporary directory")?;
    let config = args.config();
    let bar = ProgressBar::new(config.workload().total_steps()).with_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {:<8} {{bar:40}} {{pos}}/{{len}} steps ({{eta}})",
            kind.label()
        ))
        .expect("valid template"),
    );
    let run = storebench::run_store(&config, store(kind), &temp.path().join("store"), &mut |n| {
        bar.set_position(n)
    })?;
    bar.finish_and_clear();
    Ok(run)
}
