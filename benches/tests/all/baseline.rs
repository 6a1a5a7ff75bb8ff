//! Baselines run interleaved with Tally, block by block (issue 13): each engine on its own
//! chain from the same genesis, over the same transactions.

use std::sync::Arc;
use tally_chain::Durability;

use tally_bench::baseline::{self, Engine, Stepper};
use tally_bench::report::Spread;
use tally_bench::sampler::Distribution;
use tally_bench::workload::{self, BenchConfig, BenchContract, INITIAL_BALANCE, SIMPLECOIN};
use tally_chain::{Chain, ChainConfig, MemoryStore, Pipeline};
use tally_host_api::testing::MapHost;
use tally_runtime::{Runtime, RuntimeConfig};

fn config(contract: BenchContract) -> BenchConfig {
    BenchConfig {
        transfers: 1_200,
        accounts: 40,
        dist: Distribution::Zipf,
        seed: 11,
        block_size: 200,
        signed: false,
        pipeline: Pipeline::ALL,
        durability: Durability::Background,
        contract,
        // A native contract burns no fuel: with fees, its payers would keep other balances (the
        // reason `tally bench --baseline` runs free).
        fees: tally_chain::FeeSchedule::ZERO,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    }
}

/// A fresh benchmark chain for `config`, running `engine` instead of the runtime if given.
fn chain(config: &BenchConfig, engine: Option<Engine>) -> Chain {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    let chain_config = ChainConfig {
        check_signatures: config.signed,
        fees: config.fees,
        ..ChainConfig::default()
    };
    let store = Box::new(MemoryStore::new(512));
    let (mut chain, _) = workload::create(runtime, store, chain_config, config).unwrap();
    if let Some(engine) = engine {
        chain.set_native(SIMPLECOIN, engine.executor(config.contract).unwrap());
    }
    chain
}

#[test]
fn interleaved_baselines_report_per_block_ratios_and_reach_tallys_state() {
    for contract in [BenchContract::Simplecoin, BenchContract::TokenRs] {
        let config = config(contract);
        let engines = [Engine::Native, Engine::Wasmi];
        let mut tally = chain(&config, None);
        let mut bases: Vec<Chain> = engines.iter().map(|&e| chain(&config, Some(e))).collect();
        let mut tally_run = workload::Run::new(&mut tally, &config).unwrap();
        let mut base_runs: Vec<_> = bases
            .iter_mut()
            .map(|c| workload::Run::new(c, &config).unwrap())
            .collect();
        let mut rounds = Vec::new();
        let per_block = {
            let mut steppers: Vec<&mut dyn Stepper> = vec![&mut tally_run];
            steppers.extend(base_runs.iter_mut().map(|r| r as &mut dyn Stepper));
            baseline::interleave(&mut steppers, &mut |done| rounds.push(done)).unwrap()
        };
        // Six blocks of 200, each engine one block per round.
        assert_eq!(rounds, [200, 400, 600, 800, 1_000, 1_200]);
        assert!(per_block.iter().all(|b| b.len() == 6), "{per_block:?}");
        let tally_report = tally_run.finish();
        let base_reports: Vec<_> = base_runs.into_iter().map(workload::Run::finish).collect();
        for ((engine, report), base) in engines.iter().zip(base_reports).zip(&bases) {
            let compared = baseline::compare(&tally_report, report);
            assert_eq!(compared.ratios.len(), 6, "{engine:?}");
            assert!(compared.ratios.iter().all(|r| r.is_finite() && *r > 0.0));
            assert_eq!(compared.spread.blocks, 6);
            assert!(compared.spread.min <= compared.spread.median);
            assert!(compared.spread.median <= compared.spread.max);
            // native and wasmi implement the same transfer over the same host calls, so their
            // contracts' state is Tally's, byte for byte, and so are the failures. (The blocks'
            // fee usage differs: a native contract burns no fuel.)
            assert_eq!(
                workload::contract_state_digest(base).unwrap(),
                workload::contract_state_digest(&tally).unwrap(),
                "{engine:?} on {contract:?}"
            );
            assert_eq!(compared.report.failed, tally_report.failed, "{engine:?}");
            assert_eq!(
                workload::accounts_supply(base, &config).unwrap(),
                config.accounts * INITIAL_BALANCE,
                "{engine:?}"
            );
        }
        assert_eq!(
            workload::accounts_supply(&tally, &config).unwrap(),
            config.accounts * INITIAL_BALANCE
        );
        // Some transfers moved coins: the states compared are not just genesis.
        assert!((0..config.accounts).any(|i| {
            workload::balance(&tally, SIMPLECOIN, workload::account_name(i)).unwrap()
                != Some(INITIAL_BALANCE)
        }));
    }
}

#[test]
fn interleave_refuses_runs_of_different_lengths() {
    let config = config(BenchContract::Simplecoin);
    let short = BenchConfig {
        transfers: 400,
        ..config.clone()
    };
    let (mut a, mut b) = (chain(&config, None), chain(&short, Some(Engine::Native)));
    let mut a = workload::Run::new(&mut a, &config).unwrap();
    let mut b = workload::Run::new(&mut b, &short).unwrap();
    let err =
        baseline::interleave(&mut [&mut a as &mut dyn Stepper, &mut b], &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("same workload"), "{err}");
}

#[test]
fn spread_is_the_median_and_nearest_rank_percentiles() {
    let s = Spread::of(&[5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 6.0, 7.0, 9.0, 8.0]);
    assert_eq!(
        (s.median, s.p10, s.p90, s.min, s.max),
        (5.5, 1.0, 9.0, 1.0, 10.0)
    );
    assert_eq!(s.blocks, 10);
    let odd = Spread::of(&[3.0, 1.0, 2.0]);
    assert_eq!((odd.median, odd.p10, odd.p90), (2.0, 1.0, 3.0));
    assert_eq!(Spread::of(&[]), Spread::default());
}

/// Stores a new 4-byte key with a 64-byte value, forever: each call costs the charges of
/// `store` (and of a new key), and the loop around it a few instructions.
const STORE_FOREVER: &str = r#"(module
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (memory (export "memory") 1)
  (func (export "apply") (param i64 i64 i64)
    (local $i i32)
    (loop $again
      (i32.store (i32.const 0) (local.get $i))
      (call $store (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 64))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $again))))"#;

#[test]
fn issue_11_wasmi_charges_host_calls_like_the_runtime() {
    use tally_runtime::{Entry, Outcome, Runtime};
    let wasm = wat::parse_str(STORE_FOREVER).unwrap();
    // Tally: the runtime on wasmtime.
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let contract = runtime.prepare(&wasm).unwrap();
    let mut host = MapHost::default();
    let entry = Entry::Action {
        receiver: SIMPLECOIN,
        code: SIMPLECOIN,
        action: workload::TRANSFER,
    };
    let receipt = runtime.execute(&contract, entry, &mut host).unwrap();
    assert!(
        matches!(&receipt.outcome, Outcome::Failure(a) if a.code == tally_host_api::AbortCode::OutOfFuel),
        "{:?}",
        receipt.outcome
    );
    // Every store writes a new key: the state's size counts them.
    let wasmtime_stores = host.state.len() as u64;
    // The same contract in the wasmi baseline.
    let execute = baseline::wasmi::executor(&wasm).unwrap();
    let mut host = MapHost::default();
    let err = execute(&mut host).unwrap_err();
    assert!(
        matches!(&err, tally_host_api::HostError::Abort(a) if a.code == tally_host_api::AbortCode::OutOfFuel),
        "{err:?}"
    );
    // Each store costs 200 + 3,000 + 68 x 10 + 10,000 fuel, so ~720 fit in an action; the
    // engines count the loop's few instructions differently, by far less than one store.
    let per_store = 200 + 3_000 + 68 * 10 + 10_000;
    let expected = tally_host_api::limits::FUEL_PER_ACTION / per_store;
    for stores in [wasmtime_stores, host.state.len() as u64] {
        assert!(
            stores.abs_diff(expected) <= 2,
            "{stores} stores, ~{expected} expected"
        );
    }
    assert!(
        wasmtime_stores.abs_diff(host.state.len() as u64) <= 1,
        "wasmtime {wasmtime_stores}, wasmi {}",
        host.state.len() as u64
    );
}

/// Fails unless its memory cell and its mutable global are as instantiation left them, then
/// changes both.
const PRISTINE_OR_FAIL: &str = r#"(module
  (import "env" "assert" (func $assert (param i32 i32 i32)))
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 5))
  (data (i32.const 4096) "\07")
  (func (export "apply") (param i64 i64 i64)
    (call $assert
      (i32.and (i32.eq (global.get $g) (i32.const 5)) (i32.eq (i32.load8_u (i32.const 4096)) (i32.const 7)))
      (i32.const 0) (i32.const 0))
    (global.set $g (i32.const 6))
    (i32.store8 (i32.const 4096) (i32.const 8))
    (i32.store (i32.const 9000) (i32.const 1))))"#;

#[test]
fn wasmi_restores_its_warm_instance_between_actions() {
    let wasm = wat::parse_str(PRISTINE_OR_FAIL).unwrap();
    let execute = baseline::wasmi::executor(&wasm).unwrap();
    for action in 0..5 {
        let mut host = MapHost::default();
        execute(&mut host).unwrap_or_else(|e| panic!("action {action}: {e:?}"));
    }
}

#[cfg(feature = "evm")]
#[test]
fn the_evm_baseline_runs_the_same_transfers_interleaved_and_conserves_the_token() {
    use tally_bench::baseline::evm::EvmRun;
    let config = config(BenchContract::Simplecoin);
    let mut tally = chain(&config, None);
    let mut tally_run = workload::Run::new(&mut tally, &config).unwrap();
    let mut evm = EvmRun::new(&config).unwrap();
    let per_block = baseline::interleave(
        &mut [&mut tally_run as &mut dyn Stepper, &mut evm],
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(per_block[1].len(), 6);
    let tally_report = tally_run.finish();
    let evm_report = evm.report();
    assert_eq!(evm_report.transfers, config.transfers);
    assert_eq!(evm_report.failed, 0);
    assert_eq!(
        evm.check_supply().unwrap(),
        config.accounts * INITIAL_BALANCE
    );
    // The same draws moved the same coins: every balance is Tally's.
    for i in 0..config.accounts {
        let tally_balance =
            workload::balance(&tally, SIMPLECOIN, workload::account_name(i)).unwrap();
        assert_eq!(
            evm.balance(i).unwrap(),
            revm::primitives::U256::from(tally_balance.unwrap_or(0)),
            "account {i}"
        );
    }
    let compared = baseline::compare(&tally_report, evm_report);
    assert_eq!(compared.spread.blocks, 6);
}

/// Issue 22: the swap in revm (contracts/evm/Pool.sol over two ERC20.sol tokens) runs the
/// same trades as Tally's swap workload, interleaved block by block: every trade succeeds on
/// both, and the pool's reserves and every trader's balances end equal.
#[cfg(feature = "evm")]
#[test]
fn issue_22_the_evm_swap_baseline_makes_tallys_trades_and_ends_in_tallys_state() {
    use tally_bench::baseline::evm::EvmBaseline;
    use tally_bench::swap;
    let config = config(BenchContract::Swap);
    let mut tally = chain(&config, None);
    let genesis_reserves = swap::reserves(&tally).unwrap();
    let mut tally_run = workload::Run::new(&mut tally, &config).unwrap();
    let mut evm = EvmBaseline::new(&config).unwrap();
    assert!(matches!(evm, EvmBaseline::Swaps(_)));
    let per_block = baseline::interleave(
        &mut [&mut tally_run as &mut dyn Stepper, &mut evm],
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(per_block[1].len(), 6);
    let tally_report = tally_run.finish();
    assert_eq!(tally_report.failed, 0);
    let evm_report = evm.report();
    assert_eq!(evm_report.transfers, config.transfers);
    assert_eq!(evm_report.failed, 0);
    let reserves = swap::reserves(&tally).unwrap();
    assert_ne!(reserves, genesis_reserves, "the trades moved the pool");
    let genesis_supply = config.accounts * INITIAL_BALANCE + swap::RESERVE;
    assert_eq!(evm.check(&tally).unwrap(), 2 * genesis_supply);
    assert_eq!(
        swap::holdings(&tally, config.accounts).unwrap(),
        2 * genesis_supply
    );
    let EvmBaseline::Swaps(mut run) = evm else {
        unreachable!()
    };
    assert_eq!(run.reserves().unwrap(), reserves);
    let compared = baseline::compare(&tally_report, evm_report);
    assert_eq!(compared.spread.blocks, 6);
}

/// The swap baseline's check fails when revm's trades did not end where Tally's did: here,
/// revm ran one block more than a Tally chain of the same genesis.
#[cfg(feature = "evm")]
#[test]
fn issue_22_the_evm_swap_check_fails_when_revm_and_tally_traded_differently() {
    use tally_bench::baseline::evm::EvmBaseline;
    let config = config(BenchContract::Swap);
    let tally = chain(&config, None);
    let mut evm = EvmBaseline::new(&config).unwrap();
    assert!(evm.step().unwrap().is_some());
    let error = evm.check(&tally).unwrap_err().to_string();
    assert!(error.contains("ends with reserves"), "{error}");
}
