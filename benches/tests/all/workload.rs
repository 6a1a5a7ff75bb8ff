//! The benchmark workload through the library's block path: determinism across seeds,
//! pipeline switches, thread counts, baselines, contracts and stores.

use std::sync::Arc;
use tally_chain::Durability;

use tally_bench::baseline;
use tally_bench::sampler::{Distribution, Rng, ZipfMandelbrot};
use tally_bench::workload::{
    self, BenchConfig, BenchContract, INITIAL_BALANCE, SIMPLECOIN, account_name,
};
use tally_chain::{Chain, ChainConfig, MemoryStore, Pipeline, StateStore};
use tally_runtime::{Runtime, RuntimeConfig};

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(RuntimeConfig::default()).unwrap())
}

/// A fresh benchmark chain for `config` on `store`.
fn bench_chain(
    store: Box<dyn StateStore>,
    chain_config: ChainConfig,
    config: &BenchConfig,
) -> Chain {
    workload::create(runtime(), store, chain_config, config)
        .unwrap()
        .0
}

/// A fresh chain for `config` on a memory store, checking signatures as the workload signs.
fn memory_chain(config: &BenchConfig) -> Chain {
    let chain_config = ChainConfig {
        check_signatures: config.signed,
        fees: config.fees,
        ..ChainConfig::default()
    };
    bench_chain(Box::new(MemoryStore::new(512)), chain_config, config)
}

fn bal(chain: &Chain, account: tally_chain::Name) -> Option<u64> {
    let v = chain.get(SIMPLECOIN, &account.0.to_le_bytes()).unwrap()?;
    Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))
}

fn bench_checksum(seed: u64, dist: Distribution) -> ([u8; 32], u64) {
    let config = BenchConfig {
        transfers: 3_000,
        accounts: 200,
        dist,
        seed,
        block_size: 1_000,
        signed: true,
        pipeline: Pipeline::ALL,
        durability: Durability::Background,
        contract: BenchContract::Simplecoin,
        fees: tally_chain::FeeSchedule::STANDARD,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    };
    let report = workload::run(&mut memory_chain(&config), &config, &mut |_| {}).unwrap();
    assert_eq!(report.transfers, 3_000);
    (report.state_checksum, report.failed)
}

#[test]
fn the_same_seed_gives_the_same_state_checksum() {
    for dist in [Distribution::Uniform, Distribution::Zipf] {
        let a = bench_checksum(42, dist);
        assert_eq!(a, bench_checksum(42, dist), "{dist:?}");
        assert_ne!(a.0, bench_checksum(43, dist).0, "{dist:?}");
    }
}

/// Runs a signed benchmark on a log store with `pipeline` on a pool of `threads` workers, and
/// returns the head block's id (it covers the state checksum and the transactions root).
fn pipelined_head(
    pipeline: Pipeline,
    durability: Durability,
    threads: usize,
) -> tally_chain::BlockId {
    let dir = tempfile::tempdir().unwrap();
    let store =
        tally_chain::LogStore::open(dir.path(), tally_chain::LogOptions::default()).unwrap();
    let config = BenchConfig {
        transfers: 1_200,
        accounts: 100,
        dist: Distribution::Zipf,
        seed: 5,
        block_size: 200,
        signed: true,
        pipeline,
        durability,
        contract: BenchContract::Simplecoin,
        fees: tally_chain::FeeSchedule::STANDARD,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    };
    let mut chain = bench_chain(Box::new(store), ChainConfig::default(), &config);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| workload::run(&mut chain, &config, &mut |_| {}))
        .unwrap();
    // The body kept encoded while the block was built is exactly borsh of a BlockBody.
    let record = chain.store().block(chain.head().height).unwrap().unwrap();
    let body: tally_chain::BlockBody = borsh::from_slice(&record.body).unwrap();
    assert_eq!(body.transactions.len(), 200);
    assert_eq!(borsh::to_vec(&body).unwrap(), record.body);
    chain.head_id()
}

#[test]
fn every_pipeline_switch_and_thread_count_gives_the_same_chain() {
    let reference = pipelined_head(Pipeline::NONE, Durability::Immediate, 1);
    for bits in 0u8..32 {
        let pipeline = Pipeline {
            batch_verify: bits & 1 != 0,
            batch_dedup: bits & 2 != 0,
            early_encode: bits & 4 != 0,
            parallel_execute: bits & 8 != 0,
        };
        let durability = match bits & 16 {
            0 => Durability::Immediate,
            _ => Durability::Background,
        };
        let threads = 1 + (bits as usize % 3);
        assert_eq!(
            pipelined_head(pipeline, durability, threads),
            reference,
            "{} on {threads} threads",
            pipeline.describe()
        );
    }
}

#[test]
fn the_native_baseline_reaches_the_contracts_state() {
    let config = BenchConfig {
        transfers: 1_000,
        accounts: 30,
        dist: Distribution::Zipf,
        seed: 3,
        block_size: 250,
        signed: false,
        pipeline: Pipeline::ALL,
        durability: Durability::Background,
        contract: BenchContract::Simplecoin,
        // A native contract burns no fuel: with fees, its payers would keep other balances.
        fees: tally_chain::FeeSchedule::ZERO,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    };
    let mut contract = memory_chain(&config);
    let wasm = workload::run(&mut contract, &config, &mut |_| {}).unwrap();
    let mut native = memory_chain(&config);
    native.set_native(SIMPLECOIN, Arc::new(baseline::native_simplecoin));
    let base = workload::run(&mut native, &config, &mut |_| {}).unwrap();
    // The contracts' state; the blocks' fee usage differs (a native contract burns no fuel).
    assert_eq!(
        workload::contract_state_digest(&native).unwrap(),
        workload::contract_state_digest(&contract).unwrap()
    );
    assert_eq!(base.failed, wasm.failed);
}

#[test]
fn token_rs_and_simplecoin_give_the_same_balances() {
    let run = |contract| {
        let config = BenchConfig {
            transfers: 2_000,
            accounts: 60,
            dist: Distribution::Zipf,
            seed: 8,
            block_size: 500,
            signed: true,
            pipeline: Pipeline::ALL,
            durability: Durability::Background,
            contract,
            fees: tally_chain::FeeSchedule::STANDARD,
            max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
        };
        let mut chain = memory_chain(&config);
        let report = workload::run(&mut chain, &config, &mut |_| {}).unwrap();
        let balances: Vec<Option<u64>> = (0..config.accounts)
            .map(|i| bal(&chain, account_name(i)))
            .collect();
        (report.failed, balances)
    };
    let c = run(BenchContract::Simplecoin);
    assert_eq!(run(BenchContract::TokenRs), c);
    assert!(c.1.iter().any(|b| *b != Some(INITIAL_BALANCE)));
}

#[test]
fn benchmark_transfers_conserve_coins() {
    let config = BenchConfig {
        transfers: 2_000,
        accounts: 50,
        dist: Distribution::Zipf,
        seed: 9,
        block_size: 500,
        signed: false,
        pipeline: Pipeline::ALL,
        durability: Durability::Background,
        contract: BenchContract::Simplecoin,
        fees: tally_chain::FeeSchedule::STANDARD,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    };
    let mut chain = memory_chain(&config);
    workload::run(&mut chain, &config, &mut |_| {}).unwrap();
    let total: u64 = (0..config.accounts)
        .map(|i| bal(&chain, account_name(i)).unwrap_or(0))
        .sum();
    assert_eq!(total, config.accounts * INITIAL_BALANCE);
}

#[test]
fn zipf_mandelbrot_favours_low_ranks_and_stays_in_range() {
    let n = 10_000_000;
    let z = ZipfMandelbrot::vryx(n);
    let mut rng = Rng::new(1);
    let mut counts = [0u32; 4];
    for _ in 0..200_000 {
        let k = z.sample(&mut rng);
        assert!(k < n);
        if k < 4 {
            counts[k as usize] += 1;
        }
    }
    // P(k) ∝ (k + 1 + 2.7)^-1.0001: rank 0 is about (4.7 / 3.7) times as likely as rank 1.
    let ratio = counts[0] as f64 / counts[1] as f64;
    assert!(
        (1.15..1.40).contains(&ratio),
        "ratio {ratio}, counts {counts:?}"
    );
    assert!(counts[1] > counts[2] && counts[2] > counts[3], "{counts:?}");
}

#[test]
fn account_names_are_distinct_and_valid() {
    let names: std::collections::HashSet<_> = (0..100_000).map(account_name).collect();
    assert_eq!(names.len(), 100_000);
    assert_eq!(account_name(0).to_string(), "u1");
}

#[test]
fn issue_10_every_hostile_block_stays_within_the_block_fuel_budget() {
    use tally_bench::hostile::{self, HOSTILE};
    use tally_host_api::limits::MAX_BLOCK_FUEL;
    let mut chain = hostile::chain().unwrap();
    for h in HOSTILE {
        let run = hostile::run(&mut chain, h).unwrap();
        assert!(run.fuel <= MAX_BLOCK_FUEL, "{}: {} fuel", h.name, run.fuel);
        assert!(run.included > 0, "{}", h.name);
    }
}

/// The genesis `workload::create` streams, written key by key through the builder instead:
/// the journal path every genesis took before issue 14.
fn genesis_key_by_key(store: Box<dyn StateStore>, config: &BenchConfig) -> Chain {
    let chain_config = ChainConfig {
        check_signatures: config.signed,
        ..ChainConfig::default()
    };
    let keys = workload::TransferGen::new(config);
    let mut genesis = Chain::genesis(runtime(), store, chain_config).unwrap();
    genesis.deploy(SIMPLECOIN, config.contract.wasm()).unwrap();
    for i in 0..config.accounts {
        let name = account_name(i);
        genesis.allocate(
            SIMPLECOIN,
            &name.0.to_le_bytes(),
            &INITIAL_BALANCE.to_le_bytes(),
        );
        if config.signed {
            genesis.account(name, keys.public_key(i));
        }
        genesis.fund(name, workload::NATIVE_FUNDS);
    }
    genesis.fund(tally_chain::system::SYSTEM, workload::SYSTEM_FUNDS);
    genesis.finish().unwrap()
}

#[test]
fn issue_14_the_streamed_genesis_is_the_genesis_written_key_by_key() {
    // 60,000 signed accounts are 120,000 changes: past the log store's bulk threshold, so its
    // genesis goes straight into a run; 300 stay under it.
    for (accounts, signed) in [(300, false), (300, true), (60_000, true)] {
        let config = BenchConfig {
            transfers: 2_000,
            accounts,
            dist: Distribution::Zipf,
            seed: 3,
            block_size: 500,
            signed,
            pipeline: Pipeline::ALL,
            durability: Durability::Background,
            contract: BenchContract::Simplecoin,
            fees: tally_chain::FeeSchedule::STANDARD,
            max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
        };
        let what = format!("{accounts} accounts, signed {signed}");
        let expected = genesis_key_by_key(Box::new(MemoryStore::new(512)), &config);
        let streamed = memory_chain(&config);
        assert_eq!(streamed.head(), expected.head(), "{what}: memory store");
        assert_eq!(
            streamed.state_digest().unwrap(),
            expected.state_digest().unwrap(),
            "{what}"
        );

        let dir = tempfile::tempdir().unwrap();
        let open =
            || tally_chain::LogStore::open(dir.path(), tally_chain::LogOptions::default()).unwrap();
        let chain_config = ChainConfig {
            check_signatures: signed,
            ..ChainConfig::default()
        };
        let mut chain = bench_chain(Box::new(open()), chain_config.clone(), &config);
        assert_eq!(chain.head(), expected.head(), "{what}: log store");
        assert_eq!(
            chain.state_digest().unwrap(),
            expected.state_digest().unwrap(),
            "{what}: log store"
        );
        let report = workload::run(&mut chain, &config, &mut |_| {}).unwrap();
        let head = chain.head().clone();
        drop(chain);
        // Reopened, the store holds the same state, and every block replays from genesis.
        let chain = Chain::open(runtime(), Box::new(open()), chain_config.clone()).unwrap();
        assert_eq!(chain.head(), &head, "{what}");
        assert_eq!(report.state_checksum, head.state_checksum, "{what}");
        let verified =
            tally_chain::verify::verify(chain.store(), runtime(), &chain_config).unwrap();
        assert!(verified.replayed, "{what}");
        assert_eq!(
            verified.state_digest,
            chain.state_digest().unwrap(),
            "{what}"
        );
        assert!(bal(&chain, account_name(accounts - 1)).is_some(), "{what}");
    }
}

/// The swap workload's trades all succeed (a benchmark of failures would measure nothing),
/// keep the pool's product, and give one head in order and speculatively.
#[test]
fn issue_22_every_swap_of_the_workload_succeeds_alike_on_every_path() {
    use tally_bench::swap;
    let run = |pipeline: tally_chain::Pipeline| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            let mut chain = swap::chain(50).unwrap();
            chain.set_pipeline(pipeline);
            for round in 0..3 {
                let txs = swap::block(&chain, 50, round * 100, 100);
                let block = chain.run_block(txs).unwrap();
                for r in &block.results {
                    let receipt = r.receipt().expect("included");
                    assert!(receipt.is_success(), "{}", receipt.report());
                    assert_eq!(receipt.events.len(), 1, "one `swapped` event");
                }
            }
            let answer = chain
                .query(swap::POOL, "reserves".parse().unwrap(), &[])
                .unwrap();
            let (a, b): (u64, u64) = borsh::from_slice(&answer.output).unwrap();
            assert!(u128::from(a) * u128::from(b) >= u128::from(swap::RESERVE).pow(2));
            chain.head_id()
        })
    };
    assert_eq!(
        run(tally_chain::Pipeline::NONE),
        run(tally_chain::Pipeline::ALL)
    );
}

/// `tally bench --free`: transfers that offer no fee are admitted on a zero schedule (none
/// fails), leave every payer's native balance as genesis made it, and reach one state in order
/// and in parallel.
#[test]
fn free_transfers_offer_no_fee_and_leave_payers_balances_alone() {
    let config = |pipeline| BenchConfig {
        transfers: 1_200,
        accounts: 80,
        dist: Distribution::Zipf,
        seed: 3,
        block_size: 300,
        signed: true,
        pipeline,
        fees: tally_chain::FeeSchedule::ZERO,
        max_fee: 0,
        ..BenchConfig::default()
    };
    let mut checksums = Vec::new();
    for pipeline in [Pipeline::ALL, Pipeline::NONE] {
        let config = config(pipeline);
        let mut chain = memory_chain(&config);
        let report = workload::run(&mut chain, &config, &mut |_| {}).unwrap();
        assert_eq!((report.transfers, report.failed), (1_200, 0));
        for i in 0..config.accounts {
            assert_eq!(
                chain.native_balance(account_name(i)).unwrap(),
                workload::NATIVE_FUNDS,
                "account {i} paid something"
            );
        }
        checksums.push(report.state_checksum);
    }
    assert_eq!(checksums[0], checksums[1], "in order and in parallel");
}
