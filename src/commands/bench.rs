//! `tally bench`: the experiment of the EOS post, done properly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tally_chain::Durability;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tally_bench::baseline;
use tally_bench::proc::{cpu_model, peak_rss_bytes};
use tally_bench::report::{
    BaselineReport, ConfigReport, FeesReport, MachineReport, ParallelReport, PipelineReport, Report,
};
use tally_bench::sampler::Distribution;
use tally_bench::workload::{self, BenchConfig, BenchReport};
use tally_chain::tx::DEFAULT_MAX_FEE;
use tally_chain::{Access, Chain, ChainConfig, FeeSchedule, Pipeline};
use tally_runtime::{Runtime, RuntimeConfig};

use crate::common::store::{StoreKind, open_store};

/// How many recent blocks the benchmark's store keeps. The memory store keeps the last
/// [`MEMORY_RETAIN_BLOCKS`]: holding the chain's 512 (about 2 MiB each at 5,000 transfers, 1 GB
/// in all) would make a run shorter than 512 blocks measure the kernel zeroing the pages the
/// archive grows by (a sixth of a one-thread run's time in a profile), not execution. Disk
/// stores keep what the chain says.
fn bench_retain(store: StoreKind, chain_config: &ChainConfig) -> u64 {
    match store {
        StoreKind::Memory => MEMORY_RETAIN_BLOCKS,
        _ => chain_config.retain_blocks,
    }
}

/// Blocks the benchmark's memory store keeps: as many as the storage benchmark's.
const MEMORY_RETAIN_BLOCKS: u64 = 16;

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
                                                # execution vs plain Rust vs an interpreter,
                                                # interleaved block by block
  tally bench --store memory --unsigned --baseline native,wasmi,evm
                                                # and an ERC-20 in revm (feature `evm`)
  tally bench --sequential                      # every pipeline stage off, for comparison
  tally bench --plot run.svg                    # transfers/s and memory per block
  tally bench --contract swap --block-size 1000 --store memory --unsigned --sequential
  tally bench --flood --block-size 1000 --plot flood.svg
                                  # a funded flood of new state: each fee dimension's price
                                                # trades on a token pool, executed on one core
                                                # (a trade uses ~160,000 fuel: 1,500 fill a
                                                # block; more are refused as the block is full)
  tally bench --contract swap --block-size 1000 --store memory --unsigned --sequential \
      --threads 1 --transfers 100000 --baseline evm
                                                # the same trades on a Solidity pool in revm
                                                # (feature `evm`), interleaved block by block

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
    /// Run the fee flood instead of the transfer benchmark: a funded attacker sends
    /// --flood-txs transactions of new state (the allocate dimension) a block, beside
    /// --block-size honest transfers, for --flood-blocks blocks; prints each dimension's price
    /// over the run (--plot draws it, --json writes every block).
    #[arg(long)]
    pub flood: bool,
    /// Blocks of the fee flood.
    #[arg(long, default_value_t = 200, requires = "flood", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub flood_blocks: u64,
    /// Flood transactions a block (each stores 14 new keys of 64 KiB).
    #[arg(long, default_value_t = 20, requires = "flood", value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub flood_txs: u64,
    /// Charge no fees (a zero fee schedule, as a private chain may choose, whose transfers
    /// offer no fee, so no payer's balance is read or written): with and without it, the
    /// difference is what fees cost. By default every transfer pays its fee in five
    /// dimensions at the standard schedule's prices, like any sender's (but with --baseline,
    /// which compares engines on one state, and a native contract burns no fuel).
    #[arg(long)]
    pub free: bool,
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
    /// Execute each block's transactions one at a time, not speculatively on all cores.
    #[arg(long)]
    pub no_parallel_execute: bool,
    /// Every pipeline stage off (the five --no-* switches at once).
    #[arg(long)]
    pub sequential: bool,
    /// What each transaction does: a transfer through the 2017 C simplecoin or the Rust
    /// token-rs, or a trade on contracts/swap (calls between contracts).
    #[arg(long, value_enum, default_value_t = ContractArg::Simplecoin)]
    pub contract: ContractArg,
    /// Also run the same workload with baseline engines and report Tally's ratio to each:
    /// `native` (simplecoin's transfer in plain Rust) and `wasmi` (the same .wasm in the wasmi
    /// interpreter), each on its own chain on a fresh store of the same kind, and `evm` (an
    /// ERC-20 in revm's in-memory database, or with `--contract swap` a Solidity pool of two
    /// ERC-20s; cargo feature `evm`), interleaved with Tally block by block; each ratio is the
    /// median over the blocks, with its spread. `--contract swap` takes `evm` only.
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
    /// A trade on contracts/swap, a constant-product pool of two token-rs tokens: a token
    /// transfer to the pool, then a swap that queries both tokens and calls one.
    Swap,
}

impl From<ContractArg> for workload::BenchContract {
    fn from(c: ContractArg) -> Self {
        match c {
            ContractArg::Simplecoin => Self::Simplecoin,
            ContractArg::TokenRs => Self::TokenRs,
            ContractArg::Swap => Self::Swap,
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
    /// A solc-compiled ERC-20 `transfer` in revm, in its in-memory database, or with
    /// `--contract swap` the same trade on a solc-compiled pool of two ERC-20s (needs the
    /// `evm` cargo feature).
    Evm,
}

impl Baseline {
    /// The engine of a baseline that runs on a Tally chain (`None` for the EVM, which keeps
    /// its own state).
    fn engine(self) -> Option<baseline::Engine> {
        match self {
            Baseline::Native => Some(baseline::Engine::Native),
            Baseline::Wasmi => Some(baseline::Engine::Wasmi),
            Baseline::Evm => None,
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

/// The settings a data directory was created with, so a rerun can resume only the same run.
fn bench_marker(config: &BenchConfig, store: StoreKind) -> serde_json::Value {
    let mut marker = json!({
        "transfers": config.transfers,
        "accounts": config.accounts,
        "dist": config.dist.label(),
        "seed": config.seed,
        "block_size": config.block_size,
        "signed": config.signed,
        "store": store.label(),
        "contract": config.contract.label(),
        "fees": fees_label(&config.fees),
    });
    // Only when it is not the default, so that directories made before `--free` offered no fee
    // still resume their runs.
    if config.max_fee != DEFAULT_MAX_FEE {
        marker["max_fee"] = json!(config.max_fee);
    }
    marker
}

/// The name of a benchmark's fee schedule, in reports and markers.
pub fn fees_label(fees: &FeeSchedule) -> &'static str {
    match fees.is_zero() {
        true => "free",
        false => "standard",
    }
}

/// The workload `args` ask for, with the pipeline stages they leave on.
fn bench_config(args: &BenchArgs) -> BenchConfig {
    let pipeline = Pipeline {
        batch_verify: !(args.sequential || args.no_batch_verify),
        batch_dedup: !(args.sequential || args.no_batch_dedup),
        early_encode: !(args.sequential || args.no_early_encode),
        parallel_execute: !(args.sequential || args.no_parallel_execute),
    };
    BenchConfig {
        transfers: args.transfers,
        accounts: args.accounts,
        dist: args.dist.into(),
        seed: args.seed,
        block_size: args.block_size as usize,
        signed: !args.unsigned,
        pipeline,
        durability: if args.sequential || args.no_overlap_commit {
            Durability::Immediate
        } else {
            Durability::Background
        },
        contract: args.contract.into(),
        // Baselines compare engines on one state: a native contract burns no fuel, so with
        // fees its payers would end with other balances than the wasm contract's.
        fees: match args.free || !args.baseline.is_empty() {
            true => FeeSchedule::ZERO,
            false => FeeSchedule::STANDARD,
        },
        // A free chain's senders offer no fee. Baselines keep the payer's (zero) charge: revm
        // pays its gas from the sender's balance too.
        max_fee: match args.free && args.baseline.is_empty() {
            true => 0,
            false => DEFAULT_MAX_FEE,
        },
    }
}

/// Writes the marker of a new data directory, or checks an existing one's: whether the run
/// resumes.
fn check_marker(data: &Path, marker: &serde_json::Value) -> anyhow::Result<bool> {
    let marker_path = data.join("bench.json");
    if !marker_path.exists() {
        std::fs::write(&marker_path, serde_json::to_string_pretty(marker)? + "\n")?;
        return Ok(false);
    }
    let found: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&marker_path)
            .with_context(|| format!("cannot read {}", marker_path.display()))?,
    )
    .with_context(|| format!("{} is not a bench marker", marker_path.display()))?;
    anyhow::ensure!(
        found == *marker,
        "{} holds a bench run with other settings ({found}); use another --data directory \
         or the same flags",
        data.display()
    );
    Ok(true)
}

/// A runtime whose module cache served the contract from disk, and what each tier cost.
struct Warm {
    runtime: Arc<Runtime>,
    compile: Duration,
    cache_load: Duration,
    /// The cache directory, kept while the runtime runs.
    _cache: tempfile::TempDir,
}

/// Measures both tiers of the module cache: a compile, then a fresh runtime that finds the
/// module on disk. The chain then runs on the second runtime, as a restarted node would.
fn warm_runtime(config: &BenchConfig) -> anyhow::Result<Warm> {
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
    Ok(Warm {
        runtime,
        compile,
        cache_load,
        _cache: cache,
    })
}

/// The baselines that run on a Tally chain: each engine on its own chain, from the same
/// genesis on a fresh store of the same kind (in the returned directories).
fn baseline_chains(
    args: &BenchArgs,
    chain_config: &ChainConfig,
    config: &BenchConfig,
) -> anyhow::Result<(Vec<baseline::Engine>, Vec<tempfile::TempDir>, Vec<Chain>)> {
    let mut engines: Vec<baseline::Engine> =
        args.baseline.iter().filter_map(|b| b.engine()).collect();
    engines.sort();
    engines.dedup();
    let mut dirs = Vec::new();
    let mut chains = Vec::new();
    for &engine in &engines {
        let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
        let store = open_store(
            args.store,
            &dir.path().join("store"),
            bench_retain(args.store, chain_config),
            Access::ReadWrite,
        )?;
        dirs.push(dir);
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
        let (mut base, _) = workload::create(runtime, store, chain_config.clone(), config)?;
        base.set_native(workload::SIMPLECOIN, engine.executor(config.contract)?);
        chains.push(base);
    }
    Ok((engines, dirs, chains))
}

/// The EVM baseline, when asked for and built in.
#[cfg(feature = "evm")]
type EvmRun = Option<baseline::evm::EvmBaseline>;
/// Without the `evm` feature there is none.
#[cfg(not(feature = "evm"))]
type EvmRun = Option<std::convert::Infallible>;

fn evm_run(args: &BenchArgs, config: &BenchConfig) -> anyhow::Result<EvmRun> {
    let want = args.baseline.contains(&Baseline::Evm);
    #[cfg(not(feature = "evm"))]
    {
        let _ = config;
        anyhow::ensure!(
            !want,
            "this tally was built without the EVM baseline; rebuild it with \
             `cargo build --release --features evm` to use --baseline evm"
        );
        Ok(None)
    }
    #[cfg(feature = "evm")]
    {
        want.then(|| baseline::evm::EvmBaseline::new(config))
            .transpose()
    }
}

/// Runs Tally and the baselines over the same transactions, interleaved block by block.
fn run_interleaved(
    chain: &mut Chain,
    base_chains: &mut [Chain],
    evm: &mut EvmRun,
    config: &BenchConfig,
) -> anyhow::Result<(BenchReport, Vec<BenchReport>)> {
    let bar = ProgressBar::new(config.transfers).with_style(
        ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} transfers ({per_sec}, {eta})")
            .expect("valid template"),
    );
    let mut tally_run = workload::Run::new(chain, config)?;
    let mut base_runs = base_chains
        .iter_mut()
        .map(|c| workload::Run::new(c, config))
        .collect::<Result<Vec<_>, _>>()?;
    {
        let mut steppers: Vec<&mut dyn baseline::Stepper> = vec![&mut tally_run];
        steppers.extend(
            base_runs
                .iter_mut()
                .map(|r| r as &mut dyn baseline::Stepper),
        );
        #[cfg(feature = "evm")]
        if let Some(evm) = evm.as_mut() {
            steppers.push(evm);
        }
        #[cfg(not(feature = "evm"))]
        let _ = evm;
        baseline::interleave(&mut steppers, &mut |done| bar.set_position(done))?;
    }
    let run = tally_run.finish();
    let base_reports = base_runs.into_iter().map(workload::Run::finish).collect();
    bar.finish_and_clear();
    Ok((run, base_reports))
}

/// Each chain baseline against Tally's run, once its accounts are checked to hold the
/// genesis supply and its state to equal Tally's.
fn baseline_reports(
    run: &BenchReport,
    engines: &[baseline::Engine],
    base_reports: Vec<BenchReport>,
    (chain, base_chains): (&Chain, &[Chain]),
    config: &BenchConfig,
) -> anyhow::Result<BTreeMap<String, BaselineReport>> {
    let expected_supply = config.accounts * workload::INITIAL_BALANCE;
    let mut baselines = BTreeMap::new();
    for ((engine, base_report), base_chain) in engines.iter().zip(base_reports).zip(base_chains) {
        let compared = baseline::compare(run, base_report);
        let base = &compared.report;
        let supply = workload::accounts_supply(base_chain, config)?;
        anyhow::ensure!(
            supply == expected_supply,
            "the {} baseline's accounts hold {supply} coins at the end, not the \
             {expected_supply} genesis gave them",
            engine.label()
        );
        anyhow::ensure!(
            workload::contract_state_digest(base_chain)? == workload::contract_state_digest(chain)?,
            "the {} baseline reached another state than the contract",
            engine.label()
        );
        let per = |d: Duration| d.as_secs_f64() * 1e6 / base.transfers.max(1) as f64;
        baselines.insert(
            engine.label().to_string(),
            BaselineReport {
                tps: base.tps(),
                verify_us: per(base.phases.verify),
                execute_us: per(base.phases.execute),
                commit_us: per(base.phases.commit),
                ratio: compared.spread,
                per_block_ratio: compared.ratios.clone(),
                state_checksum: Some(hex::encode(base.state_checksum)),
                same_state: Some(base.state_checksum == run.state_checksum),
                accounts_supply: supply,
            },
        );
    }
    Ok(baselines)
}

/// The EVM baseline against Tally's run, once it is checked to have done what Tally's did (its
/// state is its own: transfers conserved the token; trades ended with the pool and traders
/// where Tally's are).
#[cfg(feature = "evm")]
fn evm_report(
    run: &BenchReport,
    mut evm: baseline::evm::EvmBaseline,
    chain: &Chain,
) -> anyhow::Result<BaselineReport> {
    let supply = evm.check(chain)?;
    let compared = baseline::compare(run, evm.report());
    let base = &compared.report;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / base.transfers.max(1) as f64;
    Ok(BaselineReport {
        tps: base.tps(),
        verify_us: 0.0,
        execute_us: per(base.phases.execute),
        commit_us: 0.0,
        ratio: compared.spread,
        per_block_ratio: compared.ratios.clone(),
        state_checksum: None,
        same_state: None,
        accounts_supply: supply,
    })
}

/// What the run measured apart from Tally's own run: setup, caches and the store.
struct Costs {
    setup: Duration,
    compile: Duration,
    cache_load: Duration,
    resumed: bool,
    disk_bytes: u64,
}

/// The report of Tally's run.
fn report(
    args: &BenchArgs,
    config: &BenchConfig,
    run: &BenchReport,
    baselines: BTreeMap<String, BaselineReport>,
    accounts_supply: Option<u64>,
    costs: Costs,
) -> Report {
    let pipeline = &config.pipeline;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / run.transfers.max(1) as f64;
    Report {
        transfers: run.transfers,
        failed: run.failed,
        seconds: run.elapsed.as_secs_f64(),
        tps: run.tps(),
        verify_ceiling_tps: run.verify_ceiling_tps(),
        baselines,
        accounts_supply,
        fees: None,
        pipeline: PipelineReport {
            batch_verify: pipeline.batch_verify,
            batch_dedup: pipeline.batch_dedup,
            early_encode: pipeline.early_encode,
            overlap_commit: config.durability == Durability::Background,
            parallel_execute: pipeline.parallel_execute,
        },
        threads: rayon::current_num_threads(),
        parallel: ParallelReport {
            speculated: run.speculated,
            confirmed: run.confirmed,
            confirmed_share: run.confirmed as f64 / run.speculated.max(1) as f64,
        },
        per_block: run.per_block.clone(),
        us_per_transfer: per(run.elapsed),
        bytes_per_tx: run.tx_bytes as f64 / run.transfers.max(1) as f64,
        verify_us: per(run.phases.verify),
        execute_us: per(run.phases.execute),
        commit_us: per(run.phases.commit),
        blocks: run.blocks,
        height: run.height,
        state_checksum: hex::encode(run.state_checksum),
        store: args.store.label(),
        signed: config.signed,
        resumed: costs.resumed,
        peak_rss_bytes: peak_rss_bytes(),
        disk_bytes: costs.disk_bytes,
        setup_seconds: costs.setup.as_secs_f64(),
        compile_ms: costs.compile.as_secs_f64() * 1e3,
        cache_load_us: costs.cache_load.as_secs_f64() * 1e6,
        config: ConfigReport {
            transfers: config.transfers,
            accounts: config.accounts,
            dist: config.dist.label(),
            seed: config.seed,
            block_size: config.block_size,
            contract: config.contract.label(),
            store: args.store.label(),
            signed: config.signed,
            pipeline: pipeline.describe(),
        },
        machine: MachineReport {
            cpu: cpu_model(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
    }
}

/// `tally bench --flood`: the fee flood, its table, and its plot and JSON when asked.
fn run_flood(args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.free && args.baseline.is_empty(),
        "--flood shows how the standard schedule's prices answer a flood: it takes neither \
         --free nor --baseline"
    );
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = args
        .data
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    anyhow::ensure!(
        !dir.join("store").exists(),
        "{} already holds a store: the flood starts from genesis, give a new --data",
        dir.display()
    );
    let store = open_store(args.store, &dir.join("store"), 16, Access::ReadWrite)?;
    let bar = ProgressBar::new(args.flood_blocks).with_style(
        ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} blocks")
            .expect("a valid template"),
    );
    bar.set_message("fee flood");
    let report = tally_bench::flood::run(
        store,
        args.flood_blocks,
        args.block_size,
        args.flood_txs,
        &mut |done| bar.set_position(done),
    )?;
    bar.finish_and_clear();
    let table = tally_bench::flood::table(&report);
    if let Some(path) = &args.plot {
        let title = format!(
            "tally bench --flood: {} flood transactions and {} transfers a block, {} store",
            report.floods_per_block,
            report.transfers_per_block,
            args.store.label()
        );
        std::fs::write(path, super::plot::flood_svg(&title, &report))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match args.json.as_deref() {
        Some(path) if path.as_os_str() == "-" => {
            eprint!("{table}");
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Some(path) => {
            print!("{table}");
            std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => print!("{table}"),
    }
    Ok(())
}

/// Writes the plot (`--plot`), then the table and the JSON (`--json`).
fn write_outputs(
    args: &BenchArgs,
    config: &BenchConfig,
    run: &BenchReport,
    report: &Report,
) -> anyhow::Result<()> {
    let table = report.table();
    if let Some(path) = &args.plot {
        let title = format!(
            "tally bench: {} transfers, {} accounts ({}), {} store, {}; {:.0} transfers/s",
            run.transfers,
            config.accounts,
            config.dist.label(),
            args.store.label(),
            if config.signed { "signed" } else { "unsigned" },
            report.tps,
        );
        let svg = super::plot::svg(
            &title,
            config.block_size as u64,
            run.transfers,
            &run.per_block,
        );
        std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    match args.json.as_deref() {
        Some(path) if path.as_os_str() == "-" => {
            eprint!("{table}");
            println!("{}", serde_json::to_string_pretty(report)?);
        }
        Some(path) => {
            print!("{table}");
            std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => print!("{table}"),
    }
    Ok(())
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads as usize)
            .build_global()
            .context("cannot start the worker threads")?;
    }
    if args.flood {
        return run_flood(&args);
    }
    // The run goes on a worker thread of the pool (rayon::scope called from outside the pool
    // runs its body there, and hands back its result or panic), so that the blocks' stages
    // (each a rayon::join of this block's execution and the next block's preparation)
    // allocate and free on the threads that run them: from the main thread, every join was
    // handed to a worker, and each block's buffers were freed on another thread than the one
    // that allocated them.
    rayon::scope(|_| run_transfers(args))
}

fn run_transfers(args: BenchArgs) -> anyhow::Result<()> {
    let config = bench_config(&args);
    let chain_config = ChainConfig {
        check_signatures: config.signed,
        fees: config.fees,
        ..ChainConfig::default()
    };
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&data)
        .with_context(|| format!("cannot create data directory {}", data.display()))?;
    let resumed = check_marker(&data, &bench_marker(&config, args.store))?;
    let warm = warm_runtime(&config)?;
    let store = open_store(
        args.store,
        &data.join("store"),
        bench_retain(args.store, &chain_config),
        Access::ReadWrite,
    )?;
    anyhow::ensure!(
        config.contract != workload::BenchContract::Swap
            || args.baseline.iter().all(|&b| b == Baseline::Evm),
        "--baseline native and wasmi run transfers only: with --contract swap, use \
         --baseline evm or none"
    );
    let start = Instant::now();
    let mut chain = if store.head().is_some() {
        Chain::open(warm.runtime.clone(), store, chain_config.clone())?
    } else {
        workload::create(warm.runtime.clone(), store, chain_config.clone(), &config)?.0
    };
    let setup = start.elapsed();
    anyhow::ensure!(
        args.baseline.is_empty() || !resumed,
        "--baseline runs every engine from genesis alongside Tally, block by block, so it \
         cannot resume {}: drop --data, or give a new directory",
        data.display()
    );
    let mut evm = evm_run(&args, &config)?;
    let (engines, _base_dirs, mut base_chains) = baseline_chains(&args, &chain_config, &config)?;
    let (run, base_reports) = run_interleaved(&mut chain, &mut base_chains, &mut evm, &config)?;
    let accounts_supply = if args.baseline.is_empty() {
        None
    } else {
        // Transfers conserve the accounts' coins; trades, the traders' and the pool's tokens.
        let (supply, expected_supply) = match config.contract {
            workload::BenchContract::Swap => (
                tally_bench::swap::holdings(&chain, config.accounts)?,
                2 * (config.accounts * workload::INITIAL_BALANCE + tally_bench::swap::RESERVE),
            ),
            _ => (
                workload::accounts_supply(&chain, &config)?,
                config.accounts * workload::INITIAL_BALANCE,
            ),
        };
        anyhow::ensure!(
            supply == expected_supply,
            "Tally's accounts hold {supply} coins at the end, not the {expected_supply} genesis \
             gave them"
        );
        Some(supply)
    };
    // Fees move coins and burn them, never create or lose one: checked on every run (one walk
    // of the balances, after the timed section).
    let native = workload::native_total(&chain)?;
    anyhow::ensure!(
        native == workload::native_supply(&config),
        "the native balances and the coins burned add up to {native} at the end, not the {} \
         genesis gave: fee accounting lost or minted coins",
        workload::native_supply(&config)
    );
    let fee_state = chain.fee_state()?;
    let fees = FeesReport {
        schedule: fees_label(&config.fees),
        burned: fee_state.burned,
        per_transfer: fee_state.burned as f64 / run.transfers.max(1) as f64,
        prices: fee_state.prices,
        conserved: true,
    };
    #[allow(unused_mut)]
    let mut baselines = baseline_reports(
        &run,
        &engines,
        base_reports,
        (&chain, &base_chains),
        &config,
    )?;
    #[cfg(feature = "evm")]
    if let Some(evm) = evm {
        baselines.insert("evm".to_string(), evm_report(&run, evm, &chain)?);
    }
    let costs = Costs {
        setup,
        compile: warm.compile,
        cache_load: warm.cache_load,
        resumed,
        disk_bytes: chain.store().disk_bytes(),
    };
    let mut report = report(&args, &config, &run, baselines, accounts_supply, costs);
    report.fees = Some(fees);
    write_outputs(&args, &config, &run, &report)
}
