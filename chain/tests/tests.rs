//! The chain's guarantees: the seed's scenario, atomic transactions, rejections, determinism.

use std::sync::Arc;

use tally_chain::workload::{
    self, BenchConfig, Distribution, Rng, SIMPLECOIN, SIMPLECOIN_SUPPLY, TRANSFER, ZipfMandelbrot,
    account_name, balance,
};
use tally_chain::{
    Action, Chain, ChainConfig, ChainError, MemoryStore, Name, Pipeline, SignedTransaction,
    Transaction, Transfer, TxError,
};
use tally_host_api::AbortCode;
use tally_runtime::{Runtime, RuntimeConfig};

fn name(s: &str) -> Name {
    s.parse().unwrap()
}

fn bal(chain: &Chain, account: Name) -> Option<u64> {
    balance(chain, SIMPLECOIN, account).unwrap()
}

fn new_chain() -> Chain {
    chain_with(ChainConfig::default())
}

fn chain_with(config: ChainConfig) -> Chain {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    Chain::open(runtime, Box::new(MemoryStore::new(512)), config).unwrap()
}

fn simplecoin_chain() -> Chain {
    let mut chain = new_chain();
    chain.deploy(SIMPLECOIN, workload::SIMPLECOIN_WASM).unwrap();
    chain.finish_block().unwrap();
    chain
}

/// A transaction carrying one simplecoin action with raw `data`, valid for the pending block.
fn tx_with_data(chain: &Chain, data: Vec<u8>) -> SignedTransaction {
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    SignedTransaction::unsigned(Transaction {
        expiration_ms: chain.pending_block_time_ms() + 30_000,
        ref_block_num,
        ref_block_prefix,
        actions: vec![Action {
            account: SIMPLECOIN,
            name: TRANSFER,
            authorization: vec![],
            data,
        }],
    })
}

fn transfer_tx(chain: &Chain, from: &str, to: &str, amount: u64) -> SignedTransaction {
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
    assert_eq!(bal(&chain, SIMPLECOIN), Some(SIMPLECOIN_SUPPLY));
    for i in 0..1000 {
        let tx = transfer_tx(&chain, "simplecoin", "init1", 1 + i);
        let receipt = chain.push_transaction(&tx).unwrap();
        assert!(receipt.is_success(), "transfer {i}: {receipt:?}");
    }
    chain.finish_block().unwrap();
    let moved: u64 = (1..=1000).sum();
    assert_eq!(bal(&chain, name("init1")), Some(moved));
    assert_eq!(bal(&chain, SIMPLECOIN), Some(SIMPLECOIN_SUPPLY - moved));
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
        assert_eq!(bal(&with_failures, name("alice")), Some(100));
        assert_eq!(bal(&with_failures, name("bob")), None);
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
    assert_eq!(bal(&clean, name("bob")), Some(40));
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
    let bad = tx_with_data(&chain, vec![0; 4])
        .transaction
        .actions
        .remove(0);
    tx.transaction.actions.push(bad);
    let receipt = chain.push_transaction(&tx).unwrap();
    assert_eq!(receipt.failed_action, Some(1));
    assert_eq!(bal(&chain, name("alice")), None);
    assert_eq!(bal(&chain, SIMPLECOIN), Some(SIMPLECOIN_SUPPLY));
}

#[test]
fn invalid_transactions_are_rejected_with_their_own_error() {
    let mut chain = simplecoin_chain();
    let base = transfer_tx(&chain, "simplecoin", "alice", 1);

    let mut expired = base.clone();
    expired.transaction.expiration_ms = chain.pending_block_time_ms();
    let mut too_far = base.clone();
    too_far.transaction.expiration_ms = chain.pending_block_time_ms() + 10 * 3_600_000;
    let mut unknown_ref = base.clone();
    unknown_ref.transaction.ref_block_prefix ^= 1;
    let mut wrong_num = base.clone();
    wrong_num.transaction.ref_block_num += 7;
    let mut empty = base.clone();
    empty.transaction.actions.clear();
    let mut no_contract = base.clone();
    no_contract.transaction.actions[0].account = name("nobody");

    type Expect = fn(&TxError) -> bool;
    let cases: [(SignedTransaction, Expect); 6] = [
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
    let before = bal(&chain, SIMPLECOIN);
    for (tx, expected) in cases {
        match chain.push_transaction(&tx) {
            Err(ChainError::Tx(e)) => assert!(expected(&e), "{e}"),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(bal(&chain, SIMPLECOIN), before);
    assert!(chain.push_transaction(&base).unwrap().is_success());
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
        contract: workload::BenchContract::Simplecoin,
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

/// Runs a signed benchmark on a log store with `pipeline` on a pool of `threads` workers, and
/// returns the head block's id (it covers the state checksum and the transactions root).
fn pipelined_head(pipeline: Pipeline, threads: usize) -> tally_chain::BlockId {
    let dir = tempfile::tempdir().unwrap();
    let store =
        tally_chain::LogStore::open(dir.path(), tally_chain::LogOptions::default()).unwrap();
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    let mut chain = Chain::open(runtime, Box::new(store), ChainConfig::default()).unwrap();
    let config = BenchConfig {
        transfers: 1_200,
        accounts: 100,
        dist: Distribution::Zipf,
        seed: 5,
        block_size: 200,
        signed: true,
        pipeline,
        contract: workload::BenchContract::Simplecoin,
    };
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
    let reference = pipelined_head(Pipeline::NONE, 1);
    for bits in 0u8..16 {
        let pipeline = Pipeline {
            batch_verify: bits & 1 != 0,
            batch_dedup: bits & 2 != 0,
            early_encode: bits & 4 != 0,
            overlap_commit: bits & 8 != 0,
        };
        let threads = 1 + (bits as usize % 3);
        assert_eq!(
            pipelined_head(pipeline, threads),
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
        contract: workload::BenchContract::Simplecoin,
    };
    let unsigned = || {
        chain_with(ChainConfig {
            check_signatures: false,
            ..ChainConfig::default()
        })
    };
    let wasm = workload::run(&mut unsigned(), &config, &mut |_| {}).unwrap();
    let mut native = unsigned();
    native.set_native(SIMPLECOIN, Arc::new(workload::native_simplecoin));
    let base = workload::run(&mut native, &config, &mut |_| {}).unwrap();
    assert_eq!(base.state_checksum, wasm.state_checksum);
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
            contract,
        };
        let mut chain = new_chain();
        let report = workload::run(&mut chain, &config, &mut |_| {}).unwrap();
        let balances: Vec<Option<u64>> = (0..config.accounts)
            .map(|i| bal(&chain, account_name(i)))
            .collect();
        (report.failed, balances)
    };
    let c = run(workload::BenchContract::Simplecoin);
    assert_eq!(run(workload::BenchContract::TokenRs), c);
    assert!(c.1.iter().any(|b| *b != Some(workload::INITIAL_BALANCE)));
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
        contract: workload::BenchContract::Simplecoin,
    };
    let mut chain = chain_with(ChainConfig {
        check_signatures: false,
        ..ChainConfig::default()
    });
    workload::run(&mut chain, &config, &mut |_| {}).unwrap();
    let total: u64 = (0..config.accounts)
        .map(|i| bal(&chain, account_name(i)).unwrap_or(0))
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

mod signed {
    use super::*;
    use ed25519_dalek::SigningKey;
    use tally_chain::crypto::derived_key;

    struct World {
        chain: Chain,
        alice: SigningKey,
        bob: SigningKey,
    }

    fn world() -> World {
        let alice = derived_key(7, 0);
        let bob = derived_key(7, 1);
        let mut chain = new_chain();
        chain.deploy(SIMPLECOIN, workload::SIMPLECOIN_WASM).unwrap();
        chain
            .register_account(name("alice"), alice.verifying_key().to_bytes())
            .unwrap();
        chain
            .register_account(name("bob"), bob.verifying_key().to_bytes())
            .unwrap();
        chain
            .allocate(
                SIMPLECOIN,
                &name("alice").0.to_le_bytes(),
                &50u64.to_le_bytes(),
            )
            .unwrap();
        chain.finish_block().unwrap();
        World { chain, alice, bob }
    }

    fn transfer(chain: &Chain, from: &str, memo: &str) -> Transaction {
        let mut tx = transfer_tx(chain, from, "bob", 5).transaction;
        tx.actions[0].authorization = vec![name(from)];
        let data = Transfer {
            from: name(from),
            to: name("bob"),
            amount: 5,
            memo: memo.into(),
        };
        tx.actions[0].data = data.encode();
        tx
    }

    fn rejected(chain: &mut Chain, tx: &SignedTransaction) -> TxError {
        match chain.push_transaction(tx) {
            Err(ChainError::Tx(e)) => e,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn each_bad_signature_is_rejected_with_its_own_error_and_no_state_change() {
        let World {
            mut chain,
            alice,
            bob,
        } = world();
        let tx = transfer(&chain, "alice", "1");

        let mut bad = SignedTransaction::sign(tx.clone(), &[(name("alice"), &alice)]);
        bad.signatures[0].signature[10] ^= 1;
        assert_eq!(
            rejected(&mut chain, &bad),
            TxError::BadSignature(name("alice"))
        );

        let wrong = SignedTransaction::sign(tx.clone(), &[(name("alice"), &bob)]);
        assert_eq!(
            rejected(&mut chain, &wrong),
            TxError::WrongKey(name("alice"))
        );

        let missing = SignedTransaction::unsigned(tx.clone());
        assert_eq!(
            rejected(&mut chain, &missing),
            TxError::MissingSignature(name("alice"))
        );

        let extra =
            SignedTransaction::sign(tx.clone(), &[(name("alice"), &alice), (name("bob"), &bob)]);
        assert_eq!(
            rejected(&mut chain, &extra),
            TxError::UnneededSignature(name("bob"))
        );

        let carol = transfer(&chain, "carol", "2");
        let unknown = SignedTransaction::sign(carol, &[(name("carol"), &alice)]);
        assert_eq!(
            rejected(&mut chain, &unknown),
            TxError::UnknownAccount(name("carol"))
        );

        assert_eq!(bal(&chain, name("alice")), Some(50));
        let good = SignedTransaction::sign(tx, &[(name("alice"), &alice)]);
        assert!(chain.push_transaction(&good).unwrap().is_success());
        assert_eq!(
            rejected(&mut chain, &good),
            TxError::Duplicate(hex::encode(good.transaction.id()))
        );
        chain.finish_block().unwrap();
        // Still a duplicate in the next block, inside the expiration window.
        assert!(matches!(rejected(&mut chain, &good), TxError::Duplicate(_)));
        assert_eq!(bal(&chain, name("alice")), Some(45));
        assert_eq!(bal(&chain, name("bob")), Some(5));
    }

    #[test]
    fn accounts_and_contracts_are_created_by_signed_system_actions() {
        use tally_chain::system::{NEWACCOUNT, NewAccount, SETCODE, SYSTEM, SetCode};
        let system_key = derived_key(9, 0);
        let dave = derived_key(9, 1);
        let mut chain = chain_with(ChainConfig {
            system_key: Some(system_key.verifying_key().to_bytes()),
            ..ChainConfig::default()
        });
        let action = |account, name, auth: Name, data: Vec<u8>| Action {
            account,
            name,
            authorization: vec![auth],
            data,
        };
        let envelope = |chain: &Chain, actions| {
            let (ref_block_num, ref_block_prefix) = chain.tapos();
            Transaction {
                expiration_ms: chain.pending_block_time_ms() + 10_000,
                ref_block_num,
                ref_block_prefix,
                actions,
            }
        };
        let new = NewAccount {
            creator: SYSTEM,
            name: name("dave"),
            key: dave.verifying_key().to_bytes(),
        };
        let tx = envelope(
            &chain,
            vec![action(
                SYSTEM,
                NEWACCOUNT,
                SYSTEM,
                borsh::to_vec(&new).unwrap(),
            )],
        );
        let tx = SignedTransaction::sign(tx, &[(SYSTEM, &system_key)]);
        assert!(chain.push_transaction(&tx).unwrap().is_success());
        // Creating it again fails as a receipt, not a rejection.
        let again = envelope(
            &chain,
            vec![
                action(SYSTEM, NEWACCOUNT, SYSTEM, borsh::to_vec(&new).unwrap()),
                action(SYSTEM, NEWACCOUNT, SYSTEM, vec![]),
            ],
        );
        let again = SignedTransaction::sign(again, &[(SYSTEM, &system_key)]);
        assert!(!chain.push_transaction(&again).unwrap().is_success());

        let set = SetCode {
            account: name("dave"),
            code: workload::SIMPLECOIN_WASM.to_vec(),
        };
        // A setcode whose transaction fails later leaves no contract behind.
        let failing = envelope(
            &chain,
            vec![
                action(SYSTEM, SETCODE, name("dave"), borsh::to_vec(&set).unwrap()),
                action(SYSTEM, SETCODE, name("dave"), vec![1]),
            ],
        );
        let failing = SignedTransaction::sign(failing, &[(name("dave"), &dave)]);
        assert!(!chain.push_transaction(&failing).unwrap().is_success());
        assert!(
            chain
                .get_raw(&tally_chain::state::keys::code_hash(name("dave")))
                .unwrap()
                .is_none()
        );
        let tx = envelope(
            &chain,
            vec![action(
                SYSTEM,
                SETCODE,
                name("dave"),
                borsh::to_vec(&set).unwrap(),
            )],
        );
        let tx = SignedTransaction::sign(tx, &[(name("dave"), &dave)]);
        let receipt = chain.push_transaction(&tx).unwrap();
        assert!(receipt.is_success(), "{receipt:?}");
        chain.finish_block().unwrap();
        // dave's simplecoin ran onInit, crediting its own (hard-coded) `simplecoin` account.
        assert_eq!(
            balance(&chain, name("dave"), SIMPLECOIN).unwrap(),
            Some(SIMPLECOIN_SUPPLY)
        );
    }
}

/// One suite, run against every backend.
mod stores {
    use super::*;
    use std::path::Path;
    use tally_chain::verify::verify;
    use tally_chain::{LogOptions, LogStore, StateStore};

    type Open = fn(&Path, u64) -> Box<dyn StateStore>;

    fn backends() -> Vec<(&'static str, Open)> {
        #[allow(unused_mut)] // pushed to with the rocksdb feature
        let mut all: Vec<(&'static str, Open)> = vec![
            ("memory", |_, retain| Box::new(MemoryStore::new(retain))),
            ("log", |dir, retain| {
                Box::new(
                    LogStore::open(
                        dir,
                        LogOptions {
                            // Small, so the suite exercises rotation, snapshots and
                            // compaction.
                            segment_bytes: 64 << 10,
                            snapshot_min_bytes: 128 << 10,
                            retain_blocks: retain,
                            ..LogOptions::default()
                        },
                    )
                    .unwrap(),
                )
            }),
        ];
        #[cfg(feature = "rocksdb")]
        all.push(("rocksdb", |dir, retain| {
            Box::new(tally_chain::rocks_store::RocksStore::open(dir, retain).unwrap())
        }));
        all
    }

    fn config() -> BenchConfig {
        BenchConfig {
            transfers: 6_000,
            accounts: 300,
            dist: Distribution::Zipf,
            seed: 11,
            block_size: 500,
            signed: true,
            pipeline: Pipeline::ALL,
            contract: workload::BenchContract::Simplecoin,
        }
    }

    fn chain_on(store: Box<dyn StateStore>, retain: u64) -> Chain {
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
        let config = ChainConfig {
            retain_blocks: retain,
            max_tx_lifetime_ms: 60_000.min(retain * 500),
            ..ChainConfig::default()
        };
        Chain::open(runtime, store, config).unwrap()
    }

    fn reference_checksum() -> [u8; 32] {
        let mut chain = chain_on(Box::new(MemoryStore::new(512)), 512);
        workload::run(&mut chain, &config(), &mut |_| {})
            .unwrap()
            .state_checksum
    }

    #[test]
    fn every_backend_gives_the_same_checksum_and_verifies() {
        let expected = reference_checksum();
        for (kind, open) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let mut chain = chain_on(open(dir.path(), 512), 512);
            let report = workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
            assert_eq!(report.state_checksum, expected, "{kind}");
            let v = verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
            assert!(v.replayed, "{kind}");
            assert_eq!(v.transactions, config().transfers, "{kind}");
            assert_eq!(v.state_digest, chain.state_digest().unwrap(), "{kind}");
        }
    }

    #[test]
    fn issue_14_the_checksum_is_the_same_with_compaction_on_off_and_across_snapshots() {
        let expected = reference_checksum();
        let expected_digest = {
            let mut chain = chain_on(Box::new(MemoryStore::new(512)), 512);
            workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
            chain.state_digest().unwrap()
        };
        // Off: one segment, no snapshot. On: tiny segments and snapshots, inline or in the
        // background, and a forced snapshot at every restart.
        let settings: [(&str, u64, u64, bool); 4] = [
            ("off", 1 << 30, 1 << 40, false),
            ("inline", 16 << 10, 8 << 10, false),
            ("background", 16 << 10, 8 << 10, true),
            ("background, big", 256 << 10, 64 << 10, true),
        ];
        for (what, segment_bytes, snapshot_min_bytes, background) in settings {
            let dir = tempfile::tempdir().unwrap();
            let options = || LogOptions {
                segment_bytes,
                snapshot_min_bytes,
                background,
                ..LogOptions::default()
            };
            let mut partial = config();
            partial.transfers = 2_000;
            let mut store = LogStore::open(dir.path(), options()).unwrap();
            store.snapshot().unwrap();
            let mut chain = chain_on(Box::new(store), 8);
            workload::run(&mut chain, &partial, &mut |_| {}).unwrap();
            drop(chain);
            let mut store = LogStore::open(dir.path(), options()).unwrap();
            store.snapshot().unwrap();
            let mut chain = chain_on(Box::new(store), 8);
            let report = workload::resume(&mut chain, &config(), &mut |_| {}).unwrap();
            assert_eq!(report.state_checksum, expected, "{what}");
            assert_eq!(chain.state_digest().unwrap(), expected_digest, "{what}");
            let stats = chain.store().stats();
            if snapshot_min_bytes < 1 << 30 {
                assert!(stats.snapshots > 0, "{what}: {stats:?}");
            }
            verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
        }
    }

    #[test]
    fn on_disk_backends_resume_at_the_last_block_and_finish_identically() {
        let expected = reference_checksum();
        for (kind, open) in backends().into_iter().filter(|(k, _)| *k != "memory") {
            let dir = tempfile::tempdir().unwrap();
            // Run part of the workload, drop the chain, reopen, run the rest.
            let mut partial = config();
            partial.transfers = 2_500;
            let mut chain = chain_on(open(dir.path(), 512), 512);
            workload::run(&mut chain, &partial, &mut |_| {}).unwrap();
            let (height, digest) = (chain.head().height, chain.state_digest().unwrap());
            drop(chain);

            let mut chain = chain_on(open(dir.path(), 512), 512);
            assert_eq!(chain.head().height, height, "{kind}");
            assert_eq!(chain.state_digest().unwrap(), digest, "{kind}");
            let report = workload::resume(&mut chain, &config(), &mut |_| {}).unwrap();
            assert_eq!(report.state_checksum, expected, "{kind}");
            verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
        }
    }

    #[test]
    fn duplicates_are_still_rejected_after_a_restart() {
        for (kind, open) in backends().into_iter().filter(|(k, _)| *k != "memory") {
            let dir = tempfile::tempdir().unwrap();
            let mut chain = chain_on(open(dir.path(), 512), 512);
            chain.deploy(SIMPLECOIN, workload::SIMPLECOIN_WASM).unwrap();
            chain.finish_block().unwrap();
            let tx = transfer_tx(&chain, "simplecoin", "bob", 1);
            assert!(chain.push_transaction(&tx).unwrap().is_success());
            chain.finish_block().unwrap();
            drop(chain);
            let mut chain = chain_on(open(dir.path(), 512), 512);
            assert!(
                matches!(
                    chain.push_transaction(&tx),
                    Err(ChainError::Tx(TxError::Duplicate(_)))
                ),
                "{kind}"
            );
        }
    }

    #[test]
    fn pruned_blocks_are_gone_and_the_rest_still_verify() {
        for (kind, open) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let mut chain = chain_on(open(dir.path(), 4), 4);
            workload::run(&mut chain, &config(), &mut |_| {}).unwrap();
            let head = chain.head().height;
            assert_eq!(chain.store().first_retained(), head - 3, "{kind}");
            assert!(chain.store().block(head - 4).unwrap().is_none(), "{kind}");
            let v = verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
            assert!(!v.replayed && v.from == head - 3, "{kind}: {v:?}");
        }
    }

    /// The log's segment files, in order.
    fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "tlog"))
            .collect();
        files.sort();
        files
    }

    fn log_options() -> LogOptions {
        LogOptions {
            segment_bytes: 1 << 30,
            snapshot_min_bytes: 1 << 30,
            ..LogOptions::default()
        }
    }

    /// Runs `blocks` blocks of the workload on a log store in `dir`, returning the state
    /// digest and checksum after each block.
    fn log_run(dir: &Path, blocks: u64) -> Vec<([u8; 32], [u8; 32])> {
        let mut chain = chain_on(Box::new(LogStore::open(dir, log_options()).unwrap()), 512);
        let mut after = Vec::new();
        let mut cfg = config();
        cfg.transfers = cfg.block_size as u64;
        workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
        after.push((chain.state_digest().unwrap(), chain.head().state_checksum));
        for _ in 1..blocks {
            cfg.transfers += cfg.block_size as u64;
            workload::resume(&mut chain, &cfg, &mut |_| {}).unwrap();
            after.push((chain.state_digest().unwrap(), chain.head().state_checksum));
        }
        after
    }

    #[test]
    fn a_torn_or_flipped_last_record_is_dropped_on_open() {
        type Damage = fn(&mut Vec<u8>, usize);
        let damages: [(&str, Damage); 3] = [
            ("torn mid-record", |bytes, last| {
                bytes.truncate(last + (bytes.len() - last) / 2)
            }),
            ("torn mid-header", |bytes, last| bytes.truncate(last + 3)),
            ("flipped byte", |bytes, last| {
                let at = last + (bytes.len() - last) * 2 / 3;
                bytes[at] ^= 0x20;
            }),
        ];
        for (what, damage) in damages {
            let dir = tempfile::tempdir().unwrap();
            let after = log_run(dir.path(), 3);
            let file = segments(dir.path()).pop().unwrap();
            let mut bytes = std::fs::read(&file).unwrap();
            let last_record = last_record_offset(&bytes);
            damage(&mut bytes, last_record);
            std::fs::write(&file, &bytes).unwrap();

            let store = LogStore::open(dir.path(), log_options()).unwrap();
            let chain = chain_on(Box::new(store), 512);
            let (digest, checksum) = after[after.len() - 2];
            assert_eq!(chain.head().state_checksum, checksum, "{what}");
            assert_eq!(chain.state_digest().unwrap(), digest, "{what}");
            verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
            // The damaged tail was cut, so the log ends at the previous block's record.
            assert_eq!(
                std::fs::metadata(&file).unwrap().len() as usize,
                last_record,
                "{what}"
            );
        }
    }

    /// The byte offset of the last record in a segment (12-byte file and record headers).
    fn last_record_offset(bytes: &[u8]) -> usize {
        let mut at = 12;
        let mut last = at;
        while at + 12 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            last = at;
            at += 12 + len;
        }
        last
    }

    #[test]
    fn damage_before_the_last_segment_is_an_error_not_a_silent_loss() {
        let dir = tempfile::tempdir().unwrap();
        {
            let options = LogOptions {
                segment_bytes: 1,
                snapshot_min_bytes: 1 << 30,
                ..LogOptions::default()
            };
            let mut chain = chain_on(Box::new(LogStore::open(dir.path(), options).unwrap()), 512);
            let mut cfg = config();
            cfg.transfers = 1_000;
            workload::run(&mut chain, &cfg, &mut |_| {}).unwrap();
        }
        let first = segments(dir.path())[1].clone();
        let mut bytes = std::fs::read(&first).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&first, bytes).unwrap();
        let err = LogStore::open(dir.path(), log_options())
            .err()
            .expect("an error");
        assert!(err.is_corruption(), "{err}");
        assert!(
            err.to_string().contains(&first.display().to_string()),
            "{err}"
        );
    }
}
