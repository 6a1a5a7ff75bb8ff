//! The chain's guarantees: the seed's scenario, atomic transactions, rejections, determinism.

use std::sync::Arc;

use tally_chain::workload::{
    self, BenchConfig, Distribution, Rng, SIMPLECOIN, SIMPLECOIN_SUPPLY, TRANSFER, ZipfMandelbrot,
    account_name, balance,
};
use tally_chain::{
    Action, Chain, ChainConfig, ChainError, MemoryStore, Name, Transaction, Transfer, TxError,
};
use tally_host_api::AbortCode;
use tally_runtime::{Runtime, RuntimeConfig};

fn name(s: &str) -> Name {
    s.parse().unwrap()
}

fn new_chain() -> Chain {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    Chain::open(
        runtime,
        Box::new(MemoryStore::new()),
        ChainConfig::default(),
    )
    .unwrap()
}

fn simplecoin_chain() -> Chain {
    let mut chain = new_chain();
    chain.deploy(SIMPLECOIN, workload::SIMPLECOIN_WASM).unwrap();
    chain.finish_block().unwrap();
    chain
}

/// A transaction carrying one simplecoin action with raw `data`, valid for the pending block.
fn tx_with_data(chain: &Chain, data: Vec<u8>) -> Transaction {
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    Transaction {
        expiration_ms: chain.pending_block_time_ms() + 30_000,
        ref_block_num,
        ref_block_prefix,
        actions: vec![Action {
            account: SIMPLECOIN,
            name: TRANSFER,
            authorization: vec![],
            data,
        }],
    }
}

fn transfer_tx(chain: &Chain, from: &str, to: &str, amount: u64) -> Transaction {
    let t = Transfer {
        from: name(from),
        to: name(to),
        amount,
        memo: "memo".into(),
    };
    tx_with_data(chain, t.encode())
}

#[test]
fn the_seeds_scenario_moves_exact_balances() {
    // The EOS post's test: 1,000 transfers of 1+i from simplecoin to init1.
    let mut chain = simplecoin_chain();
    assert_eq!(
        balance(&chain, SIMPLECOIN, SIMPLECOIN),
        Some(SIMPLECOIN_SUPPLY)
    );
    for i in 0..1000 {
        let tx = transfer_tx(&chain, "simplecoin", "init1", 1 + i);
        let receipt = chain.push_transaction(&tx).unwrap();
        assert!(receipt.is_success(), "transfer {i}: {receipt:?}");
    }
    chain.finish_block().unwrap();
    let moved: u64 = (1..=1000).sum();
    assert_eq!(balance(&chain, SIMPLECOIN, name("init1")), Some(moved));
    assert_eq!(
        balance(&chain, SIMPLECOIN, SIMPLECOIN),
        Some(SIMPLECOIN_SUPPLY - moved)
    );
}

#[test]
fn failing_transfers_leave_state_untouched_and_the_next_one_succeeds() {
    let mut with_failures = simplecoin_chain();
    let mut clean = simplecoin_chain();
    for chain in [&mut with_failures, &mut clean] {
        let tx = transfer_tx(chain, "simplecoin", "alice", 100);
        assert!(chain.push_transaction(&tx).unwrap().is_success());
    }
    let failing = [
        (
            transfer_tx(&with_failures, "alice", "bob", 101),
            "insufficient funds",
        ),
        (
            transfer_tx(&with_failures, "carol", "bob", 1),
            "no existing balance",
        ),
        (
            tx_with_data(&with_failures, vec![1, 2, 3]),
            "message too short",
        ),
    ];
    for (tx, reason) in failing {
        let receipt = with_failures.push_transaction(&tx).unwrap();
        let abort = tally_chain::chain::failure_reason(&receipt).expect("a failure");
        assert_eq!(abort.code, AbortCode::AssertFailed);
        assert_eq!(abort.message, reason);
        assert_eq!(
            balance(&with_failures, SIMPLECOIN, name("alice")),
            Some(100)
        );
        assert_eq!(balance(&with_failures, SIMPLECOIN, name("bob")), None);
    }
    for chain in [&mut with_failures, &mut clean] {
        let tx = transfer_tx(chain, "alice", "bob", 40);
        assert!(chain.push_transaction(&tx).unwrap().is_success());
    }
    let a = with_failures.finish_block().unwrap();
    let b = clean.finish_block().unwrap();
    // The failed transactions are in the block, but changed nothing: same state checksum.
    assert_eq!(a.state_checksum, b.state_checksum);
    assert_ne!(a.transactions_root, b.transactions_root);
    assert_eq!(balance(&clean, SIMPLECOIN, name("bob")), Some(40));
}

#[test]
fn a_failing_action_rolls_back_the_earlier_actions_of_its_transaction() {
    let mut chain = simplecoin_chain();
    let good = Transfer {
        from: SIMPLECOIN,
        to: name("alice"),
        amount: 5,
        memo: String::new(),
    };
    let mut tx = tx_with_data(&chain, good.encode());
    let bad = tx_with_data(&chain, vec![0; 4]).actions.remove(0);
    tx.actions.push(bad);
    let receipt = chain.push_transaction(&tx).unwrap();
    assert_eq!(receipt.failed_action, Some(1));
    assert_eq!(balance(&chain, SIMPLECOIN, name("alice")), None);
    assert_eq!(
        balance(&chain, SIMPLECOIN, SIMPLECOIN),
        Some(SIMPLECOIN_SUPPLY)
    );
}

#[test]
fn invalid_transactions_are_rejected_with_their_own_error() {
    let mut chain = simplecoin_chain();
    let base = transfer_tx(&chain, "simplecoin", "alice", 1);

    let mut expired = base.clone();
    expired.expiration_ms = chain.pending_block_time_ms();
    let mut too_far = base.clone();
    too_far.expiration_ms = chain.pending_block_time_ms() + 10 * 3_600_000;
    let mut unknown_ref = base.clone();
    unknown_ref.ref_block_prefix ^= 1;
    let mut wrong_num = base.clone();
    wrong_num.ref_block_num += 7;
    let mut empty = base.clone();
    empty.actions.clear();
    let mut no_contract = base.clone();
    no_contract.actions[0].account = name("nobody");

    let cases: [(Transaction, fn(&TxError) -> bool); 6] = [
        (expired, |e| matches!(e, TxError::Expired { .. })),
        (too_far, |e| matches!(e, TxError::ExpirationTooFar { .. })),
        (unknown_ref, |e| {
            matches!(e, TxError::UnknownReferenceBlock { .. })
        }),
        (wrong_num, |e| {
            matches!(e, TxError::UnknownReferenceBlock { .. })
        }),
        (empty, |e| matches!(e, TxError::NoActions)),
        (
            no_contract,
            |e| matches!(e, TxError::NoContract(n) if *n == name("nobody")),
        ),
    ];
    let before = balance(&chain, SIMPLECOIN, SIMPLECOIN);
    for (tx, expected) in cases {
        match chain.push_transaction(&tx) {
            Err(ChainError::Tx(e)) => assert!(expected(&e), "{e}"),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(balance(&chain, SIMPLECOIN, SIMPLECOIN), before);
    assert!(chain.push_transaction(&base).unwrap().is_success());
}

fn bench_checksum(seed: u64, dist: Distribution) -> ([u8; 32], u64) {
    let config = BenchConfig {
        transfers: 3_000,
        accounts: 200,
        dist,
        seed,
        block_size: 1_000,
    };
    let report = workload::run(&mut new_chain(), &config, &mut |_| {}).unwrap();
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

#[test]
fn benchmark_transfers_conserve_coins() {
    let config = BenchConfig {
        transfers: 2_000,
        accounts: 50,
        dist: Distribution::Zipf,
        seed: 9,
        block_size: 500,
    };
    let mut chain = new_chain();
    workload::run(&mut chain, &config, &mut |_| {}).unwrap();
    let total: u64 = (0..config.accounts)
        .map(|i| balance(&chain, SIMPLECOIN, account_name(i)).unwrap_or(0))
        .sum();
    assert_eq!(total, config.accounts * workload::INITIAL_BALANCE);
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
