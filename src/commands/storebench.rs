//! `tally storebench`: a state-store workload against several stores in one run, measured the
//! way the IAVL notebook (shared/seeds/002) measures: ops/s over time, peak memory, disk over
//! time, commit latency and stalls, and read and write amplification.
//!
//! Each store runs in its own child process (the same binary, `--child`), so its peak memory
//! is its own; with `--runs N` the stores take turns (A B, B A, …) and the table shows
//! medians.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tally_chain::{BlockHeader, BlockRecord, Commit, Durability, StateStore};

use super::storebench_workload::{Griffin, Iavl, Transfers, Workload};
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

    fn workload(&self) -> Box<dyn Workload> {
        let scaled = |n: f64| ((n * self.scale).round() as u64).max(1);
        match self.workload {
            WorkloadArg::Griffin => Box::new(Griffin::new(50, scaled(1_000_000.0), 100, self.seed)),
            WorkloadArg::Iavl => Box::new(Iavl::new(self.versions, self.scale, self.seed)),
            WorkloadArg::Transfers => Box::new(Transfers::new(
                scaled(10_000_000.0).max(2),
                self.blocks,
                5_000,
                self.seed,
            )),
        }
    }
}

/// One sample of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the timed part started.
    pub t: f64,
    /// Ops per second over the interval.
    pub ops_per_sec: f64,
    /// Resident memory (bytes).
    pub rss: u64,
    /// The store's size on disk (bytes).
    pub disk: u64,
}

/// What one store did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreRun {
    pub store: String,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub setup_seconds: f64,
    pub peak_rss: u64,
    pub final_disk: u64,
    pub max_disk: u64,
    pub commits: u64,
    pub commit_p50_ms: f64,
    pub commit_p99_ms: f64,
    pub commit_max_ms: f64,
    /// Commits slower than 100 ms.
    pub stalls: u64,
    pub longest_pause_ms: f64,
    pub write_amplification: f64,
    /// `None` when the workload asked for no reads (iavl): the store's reads are then its own
    /// upkeep, and dividing them by the few bytes of the head lookup gave ratios in the
    /// millions.
    pub read_amplification: Option<f64>,
    pub gets: u64,
    pub cache_hits: u64,
    pub snapshots: u64,
    pub longest_snapshot_ms: f64,
    pub segments_deleted: u64,
    pub background_bytes_read: u64,
    pub samples: Vec<Sample>,
}

/// A commit slower than this is a stall (issue 14's goal: none, at 10M accounts).
const STALL: Duration = Duration::from_millis(100);

pub fn run(args: StorebenchArgs) -> anyhow::Result<()> {
    if args.child {
        let [store] = args.store[..] else {
            anyhow::bail!("--child runs exactly one store");
        };
        let report = run_store(&args, store)?;
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
    let medians: Vec<StoreRun> = runs.into_iter().map(median_run).collect();
    let report = json!({
        "workload": args.workload,
        "parameters": args.workload().describe(),
        "durability": args.durability_arg().label(),
        "scale": args.scale,
        "seed": args.seed,
        "runs": args.runs,
        "stores": medians,
    });
    let table = table(&args, &medians);
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
            let svg = lines_svg(&format!("{title}: {what}"), unit, &series);
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

fn median_run(mut runs: Vec<StoreRun>) -> StoreRun {
    runs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    runs.swap_remove(runs.len() / 2)
}

fn open(
    store: StoreKind,
    dir: &Path,
    workload: WorkloadArg,
) -> anyhow::Result<Box<dyn StateStore>> {
    Ok(match store {
        StoreKind::Memory => Box::new(tally_chain::MemoryStore::new(16)),
        StoreKind::Log => Box::new(tally_chain::LogStore::open(
            dir,
            tally_chain::LogOptions::default(),
        )?),
        #[cfg(feature = "rocksdb")]
        StoreKind::Rocksdb => Box::new(tally_chain::store::rocks::RocksStore::open_tuned(
            dir,
            match workload {
                WorkloadArg::Griffin => tally_chain::store::rocks::Tuning::Griffin,
                WorkloadArg::Iavl => tally_chain::store::rocks::Tuning::Iavl,
                WorkloadArg::Transfers => tally_chain::store::rocks::Tuning::Transfers,
            },
        )?),
        #[cfg(not(feature = "rocksdb"))]
        StoreKind::Rocksdb => {
            let _ = workload;
            anyhow::bail!("this tally was built without RocksDB")
        }
    })
}

/// Resident memory now and at its peak (bytes), from /proc/self/status.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Keep this many blocks in each store's archive: storebench measures state, not history.
const RETAIN: u64 = 16;

fn run_store(args: &StorebenchArgs, kind: StoreKind) -> anyhow::Result<StoreRun> {
    let temp = match &args.data {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::tempdir_in(d)
        }
        None => tempfile::tempdir(),
    }
    .context("cannot create a temporary directory")?;
    let dir = temp.path().join("store");
    let mut store = open(kind, &dir, args.workload)?;
    let mut workload = args.workload();
    let durability = args.durability_arg().durability();
    let bar = ProgressBar::new(workload.total_steps()).with_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {:<8} {{bar:40}} {{pos}}/{{len}} steps ({{eta}})",
            kind.label()
        ))
        .expect("valid template"),
    );
    let mut height = 0u64;
    let (mut ops, mut interval_ops, mut steps) = (0u64, 0u64, 0u64);
    let mut workload_gets = 0u64;
    let mut latencies: Vec<f64> = Vec::new();
    let mut samples = Vec::new();
    let mut setup = Duration::ZERO;
    let mut timed = Duration::ZERO;
    let mut interval_time = Duration::ZERO;
    let mut max_disk = 0;
    let interval = workload.interval();
    loop {
        let t0 = Instant::now();
        let step = {
            let store = &*store;
            let workload_gets = &mut workload_gets;
            let mut get = |key: &[u8]| -> anyhow::Result<Option<Vec<u8>>> {
                *workload_gets += 1;
                Ok(store.get(key)?.map(|v| v.into_owned()))
            };
            workload.next(&mut get)?
        };
        let Some(step) = step else { break };
        workload_gets += step.reads.len() as u64;
        for key in &step.reads {
            std::hint::black_box(store.get(key)?);
        }
        if !step.changes.is_empty() {
            let block = BlockRecord {
                header: BlockHeader {
                    height,
                    previous: [0; 32],
                    timestamp_ms: height * 500,
                    transactions_root: [0; 32],
                    state_checksum: [0; 32],
                },
                body: Vec::new(),
                changes: step.changes,
            };
            let c0 = Instant::now();
            store.commit(
                block,
                Commit {
                    durability,
                    retain_from: (height + 1).saturating_sub(RETAIN),
                },
            )?;
            if !step.setup {
                latencies.push(c0.elapsed().as_secs_f64() * 1e3);
            }
            height += 1;
        }
        let took = t0.elapsed();
        bar.inc(1);
        if step.setup {
            setup += took;
            continue;
        }
        timed += took;
        interval_time += took;
        ops += step.ops;
        interval_ops += step.ops;
        steps += 1;
        if steps.is_multiple_of(interval) {
            let disk = dir_bytes(&dir);
            max_disk = max_disk.max(disk);
            samples.push(Sample {
                t: timed.as_secs_f64(),
                ops_per_sec: interval_ops as f64 / interval_time.as_secs_f64().max(1e-9),
                rss: rss().0,
                disk,
            });
            interval_ops = 0;
            interval_time = Duration::ZERO;
        }
    }
    let t = Instant::now();
    store.sync()?;
    timed += t.elapsed();
    bar.finish_and_clear();
    let stats = store.stats();
    let final_disk = dir_bytes(&dir);
    let mut sorted = latencies.clone();
    sorted.sort_by(f64::total_cmp);
    let stalls = latencies
        .iter()
        .filter(|&&ms| ms > STALL.as_secs_f64() * 1e3)
        .count() as u64;
    Ok(StoreRun {
        store: kind.label().to_string(),
        ops,
        seconds: timed.as_secs_f64(),
        ops_per_sec: ops as f64 / timed.as_secs_f64().max(1e-9),
        setup_seconds: setup.as_secs_f64(),
        peak_rss: rss().1,
        final_disk,
        max_disk: max_disk.max(final_disk),
        commits: latencies.len() as u64,
        commit_p50_ms: percentile(&sorted, 0.5),
        commit_p99_ms: percentile(&sorted, 0.99),
        commit_max_ms: sorted.last().copied().unwrap_or(0.0),
        stalls,
        longest_pause_ms: stats.longest_pause_ms,
        write_amplification: stats.write_amplification(),
        read_amplification: (workload_gets > 0).then(|| stats.read_amplification()),
        gets: stats.gets,
        cache_hits: stats.cache_hits,
        snapshots: stats.snapshots,
        longest_snapshot_ms: stats.longest_snapshot_ms,
        segments_deleted: stats.segments_deleted,
        background_bytes_read: stats.background_bytes_read,
        samples,
    })
}

fn table(args: &StorebenchArgs, runs: &[StoreRun]) -> String {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1 << 20) as f64);
    let mut out = format!(
        "storebench {:?}, ops = {} (scale {}, durability {}, {} run{})\n",
        args.workload,
        args.workload().unit(),
        args.scale,
        args.durability_arg().label(),
        args.runs,
        if args.runs == 1 { "" } else { "s, medians" }
    )
    .to_lowercase();
    let header = [
        "store", "ops/s", "vs first", "seconds", "setup s", "peak RSS", "disk", "p50 ms", "p99 ms",
        "max ms", "stalls", "WA", "RA",
    ];
    out += &format!(
        "{:<8} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7} {:>8} {:>6} {:>5} {:>5}\n",
        header[0],
        header[1],
        header[2],
        header[3],
        header[4],
        header[5],
        header[6],
        header[7],
        header[8],
        header[9],
        header[10],
        header[11],
        header[12]
    );
    let first = runs.first().map_or(1.0, |r| r.ops_per_sec);
    for r in runs {
        out += &format!(
            "{:<8} {:>10.0} {:>7.2}x {:>8.1} {:>8.1} {:>9} {:>9} {:>7.2} {:>7.2} {:>8.1} {:>6} {:>5.1} {:>5}\n",
            r.store,
            r.ops_per_sec,
            r.ops_per_sec / first.max(1e-9),
            r.seconds,
            r.setup_seconds,
            mib(r.peak_rss),
            mib(r.max_disk),
            r.commit_p50_ms,
            r.commit_p99_ms,
            r.commit_max_ms,
            r.stalls,
            r.write_amplification,
            r.read_amplification
                .map_or_else(|| "-".to_string(), |ra| format!("{ra:.1}")),
        );
    }
    out += "WA: bytes written to disk per byte of keys and values committed. RA: bytes read \
            from disk per byte returned by gets (- when the workload reads nothing).\n";
    out
}

/// A line chart of several series, plain SVG.
fn lines_svg(title: &str, unit: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    const W: f64 = 800.0;
    const H: f64 = 320.0;
    const M: f64 = 60.0;
    const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let x_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-9);
    let y_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let (pw, ph) = (W - 2.0 * M, H - 2.0 * M);
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="{M}" y="24" font-size="14" font-weight="bold">{title}</text>
<rect x="{M}" y="{M}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>
<text x="{}" y="{}" font-size="11" text-anchor="end">{y_max:.0} {unit}</text>
<text x="{}" y="{}" font-size="11" text-anchor="end">0</text>
<text x="{}" y="{}" font-size="11" text-anchor="end">{x_max:.1} s</text>
"##,
        M - 4.0,
        M + 10.0,
        M - 4.0,
        M + ph,
        M + pw,
        M + ph + 14.0
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", M + x / x_max * pw, M + ph - y / y_max * ph))
            .collect();
        svg += &format!(
            r##"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>
<text x="{}" y="{}" font-size="12" fill="{color}">{name}</text>
"##,
            path.join(" "),
            M + pw - 80.0,
            M + 16.0 + 14.0 * i as f64
        );
    }
    svg += "</svg>\n";
    svg
}
