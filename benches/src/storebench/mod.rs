//! `tally storebench`'s engine: a deterministic storage workload against one state store,
//! measured the way the IAVL notebook (shared/seeds/002) measures: ops/s over time, peak
//! memory, disk over time, commit latency and stalls, and read and write amplification.
//!
//! The CLI (`src/commands/storebench.rs`) runs each store in its own child process, so its
//! peak memory is its own, and compares them with [`table`] and [`lines_svg`].

pub mod iterate;
pub mod walk;
pub mod workload;

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tally_chain::{BlockHeader, BlockRecord, Commit, Durability, StateStore};

use crate::proc::{peak_rss_bytes, resident_bytes};
use workload::{Griffin, Iavl, Transfers, Workload};

/// A state store to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// The log store (state in RAM, an append-only log, snapshots).
    Log,
    /// Nothing on disk.
    Memory,
    /// RocksDB (feature `rocksdb`).
    Rocksdb,
}

impl Store {
    /// Its label in reports and on the command line.
    pub fn label(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::Memory => "memory",
            Self::Rocksdb => "rocksdb",
        }
    }
}

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// GriffinDB's loops of puts and random gets (shared/seeds/004).
    Griffin,
    /// IAVL's bank/staking/lockup changesets (shared/seeds/002).
    Iavl,
    /// `tally bench`'s transfers, at the storage level.
    Transfers,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The workload.
    pub workload: WorkloadKind,
    /// Shrinks (< 1) or grows (> 1) the workload.
    pub scale: f64,
    /// Seed of the workload.
    pub seed: u64,
    /// iavl: versions to apply.
    pub versions: u64,
    /// transfers: blocks of [`TRANSFERS_PER_BLOCK`] after setup.
    pub blocks: u64,
    /// When a commit is durable; `None`: the workload's default ([`Config::durability`]).
    pub durability: Option<Durability>,
    /// Runs per store (for the table's title; the CLI takes the medians).
    pub runs: u32,
}

/// Transfers per block of the transfers workload: `tally bench`'s default block size.
pub const TRANSFERS_PER_BLOCK: u64 = 5_000;

impl Config {
    /// The durability of each commit: none for griffin and iavl, as in their notebooks;
    /// immediate for transfers, as a chain commits.
    pub fn durability(&self) -> Durability {
        self.durability.unwrap_or(match self.workload {
            WorkloadKind::Transfers => Durability::Immediate,
            _ => Durability::None,
        })
    }

    /// [`Config::durability`]'s label.
    pub fn durability_label(&self) -> &'static str {
        match self.durability() {
            Durability::Immediate => "immediate",
            Durability::Background => "background",
            Durability::None => "none",
        }
    }

    /// The workload, from the start.
    pub fn workload(&self) -> Box<dyn Workload> {
        let scaled = |n: f64| ((n * self.scale).round() as u64).max(1);
        match self.workload {
            WorkloadKind::Griffin => {
                Box::new(Griffin::new(50, scaled(1_000_000.0), 100, self.seed))
            }
            WorkloadKind::Iavl => Box::new(Iavl::new(self.versions, self.scale, self.seed)),
            WorkloadKind::Transfers => Box::new(Transfers::new(
                scaled(10_000_000.0).max(2),
                self.blocks,
                TRANSFERS_PER_BLOCK,
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
    /// The store's label.
    pub store: String,
    /// Operations of the timed part.
    pub ops: u64,
    /// Seconds of the timed part (with the final sync).
    pub seconds: f64,
    /// Operations per second over the timed part.
    pub ops_per_sec: f64,
    /// Seconds of setup (not timed).
    pub setup_seconds: f64,
    /// Peak resident memory of the process, bytes.
    pub peak_rss: u64,
    /// Bytes on disk at the end.
    pub final_disk: u64,
    /// Most bytes on disk at any sample.
    pub max_disk: u64,
    /// Timed commits.
    pub commits: u64,
    /// Median commit, ms.
    pub commit_p50_ms: f64,
    /// 99th-percentile commit, ms.
    pub commit_p99_ms: f64,
    /// Slowest commit, ms.
    pub commit_max_ms: f64,
    /// Commits slower than 100 ms.
    pub stalls: u64,
    /// The store's longest pause of a commit for its own upkeep, ms.
    pub longest_pause_ms: f64,
    /// Bytes written to disk per byte of keys and values committed.
    pub write_amplification: f64,
    /// `None` when the workload asked for no reads (iavl): the store's reads are then its own
    /// upkeep, and dividing them by the few bytes of the head lookup gave ratios in the
    /// millions.
    pub read_amplification: Option<f64>,
    /// Point reads the store served.
    pub gets: u64,
    /// Of them, served from its cache.
    pub cache_hits: u64,
    /// Snapshots the store took.
    pub snapshots: u64,
    /// Its longest snapshot, ms.
    pub longest_snapshot_ms: f64,
    /// Log segments it deleted.
    pub segments_deleted: u64,
    /// Bytes its background work read.
    pub background_bytes_read: u64,
    /// Bytes the store's own structures held at the end (index, order, cache, run index
    /// and filter).
    #[serde(default)]
    pub memory_bytes: u64,
    /// Keys in its index at the end (log store: the keys changed since the last merge).
    #[serde(default)]
    pub index_keys: u64,
    /// Bytes its index held at the end.
    #[serde(default)]
    pub index_bytes: u64,
    /// Keys in its order of unmerged keys at the end (log store).
    #[serde(default)]
    pub ordered_keys: u64,
    /// Bytes that order held at the end.
    #[serde(default)]
    pub order_bytes: u64,
    /// Throughput, memory and disk over time.
    pub samples: Vec<Sample>,
}

/// A commit slower than this is a stall (issue 14's goal: none, at 10M accounts).
const STALL: Duration = Duration::from_millis(100);

/// Keep this many blocks in each store's archive: storebench measures state, not history.
const RETAIN: u64 = 16;

/// Opens `store` in `dir`, tuned for `workload` where the store has tunings (RocksDB).
pub fn open(
    store: Store,
    dir: &Path,
    workload: WorkloadKind,
) -> anyhow::Result<Box<dyn StateStore>> {
    Ok(match store {
        Store::Memory => Box::new(tally_chain::MemoryStore::new(RETAIN)),
        Store::Log => Box::new(tally_chain::LogStore::open(
            dir,
            tally_chain::LogOptions::default(),
        )?),
        #[cfg(feature = "rocksdb")]
        Store::Rocksdb => Box::new(tally_chain::store::rocks::RocksStore::open_tuned(
            dir,
            match workload {
                WorkloadKind::Griffin => tally_chain::store::rocks::Tuning::Griffin,
                WorkloadKind::Iavl => tally_chain::store::rocks::Tuning::Iavl,
                WorkloadKind::Transfers => tally_chain::store::rocks::Tuning::Transfers,
            },
        )?),
        #[cfg(not(feature = "rocksdb"))]
        Store::Rocksdb => {
            let _ = workload;
            anyhow::bail!("this tally was built without RocksDB")
        }
    })
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

/// What the timed part of a run has measured so far.
#[derive(Default)]
struct Meter {
    ops: u64,
    interval_ops: u64,
    steps: u64,
    /// Point reads the workload asked for (its own reads and the step's).
    gets: u64,
    latencies_ms: Vec<f64>,
    samples: Vec<Sample>,
    setup: Duration,
    timed: Duration,
    interval_time: Duration,
    max_disk: u64,
}

impl Meter {
    /// Counts a timed step; every `interval` steps, samples throughput, memory and disk.
    fn step(&mut self, ops: u64, took: Duration, interval: u64, dir: &Path) {
        self.timed += took;
        self.interval_time += took;
        self.ops += ops;
        self.interval_ops += ops;
        self.steps += 1;
        if self.steps.is_multiple_of(interval) {
            let disk = dir_bytes(dir);
            self.max_disk = self.max_disk.max(disk);
            self.samples.push(Sample {
                t: self.timed.as_secs_f64(),
                ops_per_sec: self.interval_ops as f64 / self.interval_time.as_secs_f64().max(1e-9),
                rss: resident_bytes(),
                disk,
            });
            self.interval_ops = 0;
            self.interval_time = Duration::ZERO;
        }
    }

    /// The report, once the store is synced.
    fn finish(self, store: Store, stats: tally_chain::StoreStats, dir: &Path) -> StoreRun {
        let final_disk = dir_bytes(dir);
        let mut sorted = self.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let stall_ms = STALL.as_secs_f64() * 1e3;
        StoreRun {
            store: store.label().to_string(),
            ops: self.ops,
            seconds: self.timed.as_secs_f64(),
            ops_per_sec: self.ops as f64 / self.timed.as_secs_f64().max(1e-9),
            setup_seconds: self.setup.as_secs_f64(),
            peak_rss: peak_rss_bytes(),
            final_disk,
            max_disk: self.max_disk.max(final_disk),
            commits: self.latencies_ms.len() as u64,
            commit_p50_ms: percentile(&sorted, 0.5),
            commit_p99_ms: percentile(&sorted, 0.99),
            commit_max_ms: sorted.last().copied().unwrap_or(0.0),
            stalls: self
                .latencies_ms
                .iter()
                .filter(|&&ms| ms > stall_ms)
                .count() as u64,
            longest_pause_ms: stats.longest_pause_ms,
            write_amplification: stats.write_amplification(),
            read_amplification: (self.gets > 0).then(|| stats.read_amplification()),
            gets: stats.gets,
            cache_hits: stats.cache_hits,
            snapshots: stats.snapshots,
            longest_snapshot_ms: stats.longest_snapshot_ms,
            segments_deleted: stats.segments_deleted,
            background_bytes_read: stats.background_bytes_read,
            memory_bytes: stats.memory_bytes,
            index_keys: stats.index_keys,
            index_bytes: stats.index_bytes,
            ordered_keys: stats.ordered_keys,
            order_bytes: stats.order_bytes,
            samples: self.samples,
        }
    }
}

/// Runs `config`'s workload against `store`, opened in `dir` (which it fills).
/// `progress` gets the number of steps done after each step, out of
/// `config.workload().total_steps()`.
pub fn run_store(
    config: &Config,
    store: Store,
    dir: &Path,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<StoreRun> {
    let mut db = open(store, dir, config.workload)?;
    let mut workload = config.workload();
    let durability = config.durability();
    let interval = workload.interval();
    let mut meter = Meter::default();
    let (mut height, mut done) = (0u64, 0u64);
    loop {
        let t0 = Instant::now();
        let step = {
            let db = &*db;
            let gets = &mut meter.gets;
            let mut get = |key: &[u8]| -> anyhow::Result<Option<Vec<u8>>> {
                *gets += 1;
                Ok(db.get(key)?.map(|v| v.into_owned()))
            };
            workload.next(&mut get)?
        };
        let Some(step) = step else { break };
        meter.gets += step.reads.len() as u64;
        for key in &step.reads {
            std::hint::black_box(db.get(key)?);
        }
        if !step.changes.is_empty() {
            // Built before the clock starts: the copy into one buffer is the executor's work.
            let record = block(height, step.changes);
            let c0 = Instant::now();
            db.commit(
                record,
                Commit {
                    durability,
                    retain_from: (height + 1).saturating_sub(RETAIN),
                },
            )?;
            if !step.setup {
                meter.latencies_ms.push(c0.elapsed().as_secs_f64() * 1e3);
            }
            height += 1;
        }
        let took = t0.elapsed();
        done += 1;
        progress(done);
        if step.setup {
            meter.setup += took;
        } else {
            meter.step(step.ops, took, interval, dir);
        }
    }
    let t = Instant::now();
    db.sync()?;
    meter.timed += t.elapsed();
    Ok(meter.finish(store, db.stats(), dir))
}

/// A block of `changes` at `height`: storebench measures the store, so the header is empty.
fn block(height: u64, changes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> BlockRecord {
    BlockRecord {
        header: BlockHeader {
            height,
            previous: [0; 32],
            timestamp_ms: height * 500,
            transactions_root: [0; 32],
            state_checksum: [0; 32],
            ..Default::default()
        },
        body: Vec::new(),
        changes: changes.into(),
    }
}

/// The run with the median throughput.
pub fn median_run(mut runs: Vec<StoreRun>) -> StoreRun {
    runs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    runs.swap_remove(runs.len() / 2)
}

/// The comparison table of `runs` (the first store is the reference).
pub fn table(config: &Config, runs: &[StoreRun]) -> String {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1 << 20) as f64);
    let mut out = format!(
        "storebench {:?}, ops = {} (scale {}, durability {}, {} run{})\n",
        config.workload,
        config.workload().unit(),
        config.scale,
        config.durability_label(),
        config.runs,
        if config.runs == 1 { "" } else { "s, medians" }
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
pub fn lines_svg(title: &str, unit: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
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
