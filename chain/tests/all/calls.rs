//! Contracts that compose (docs/CONTRACTS.md): calls with results and atomic rollback at every
//! depth, the caller's authority and no more, re-entry and depth refused, fuel from the
//! caller's, read-only queries, events dropped with what rolled back, what a contract can know
//! of its block, and `migrate` on upgrade; the same head on every thread count.

use crate::common::*;
use crate::script::*;
use tally_chain::system::{SETCODE, SYSTEM, SetCode};
use tally_chain::{
    BlockBody, Chain, Event, Name, Pipeline, SignedTransaction, TxReceipt, TxResult,
};
use tally_host_api::AbortCode;

/// A contract whose action recurses without end.
const DEEP: &str = r#"(module
  (memory (export "memory") 1)
  (func $r (call $r))
  (func (export "apply") (param i64 i64 i64) (call $r)))"#;

/// An unsigned chain with the script contract at each of [`CONTRACTS`], [`DEEP`] at `deep`, and
/// an account `alice`.
fn chain() -> Chain {
    let code = script_contract(false);
    let deep = wat::parse_str(DEEP).unwrap();
    let mut contracts: Vec<(Name, &[u8])> =
        CONTRACTS.iter().map(|c| (name(c), &code[..])).collect();
    contracts.push((name("deep"), &deep));
    let genesis = tally_chain::Genesis {
        accounts: vec![tally_chain::genesis::GenesisAccount {
            name: name("alice"),
            key: [7; 32],
            balance: 1_000_000_000_000,
        }],
        ..Default::default()
    };
    let config = tally_chain::ChainConfig {
        check_signatures: false,
        fees: tally_chain::FeeSchedule::ZERO,
        ..Default::default()
    };
    chain_with(config, &genesis, &contracts)
}

/// A transaction running `script` in contract `to`, authorized by `auth`.
fn tx(chain: &Chain, to: &str, auth: &[Name], script: &[Op]) -> SignedTransaction {
    let go = action(name(to), name("go"), auth, encode(script));
    SignedTransaction::unsigned(envelope(chain, vec![go]))
}

/// Runs `script` in `to` in its own block; its receipt.
fn run(chain: &mut Chain, to: &str, script: &[Op]) -> TxReceipt {
    match push(chain, tx(chain, to, &[], script)) {
        TxResult::Included(receipt) => receipt,
        other => panic!("{other:?}"),
    }
}

/// The u64 contract `at` stored under `key`.
fn get(chain: &Chain, at: &str, key: u64) -> Option<u64> {
    let value = chain.get(name(at), &key.to_le_bytes()).unwrap()?;
    Some(u64::from_le_bytes(value.try_into().unwrap()))
}

fn status(chain: &Chain, at: &str) -> Option<u64> {
    get(chain, at, STATUS)
}

fn code(code: AbortCode) -> Option<u64> {
    Some(u64::from(code.code()))
}

#[test]
fn a_call_runs_the_callee_in_its_namespace_and_hands_back_its_return_data() {
    let mut chain = chain();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call("b", 0, vec![Op::Store(1, 7), Op::Caller(3), Op::Return(42)]),
            Op::ReturnData(2, 4),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        get(&chain, "b", 1),
        Some(7),
        "the callee writes its own namespace"
    );
    assert_eq!(get(&chain, "a", 1), None);
    assert_eq!(
        get(&chain, "b", 3),
        Some(name("a").0),
        "the callee sees its caller"
    );
    assert_eq!(status(&chain, "a"), Some(0));
    assert_eq!(
        get(&chain, "a", 2),
        Some(42),
        "the caller reads the return data"
    );
    assert_eq!(get(&chain, "a", 4), Some(8));
}

#[test]
fn a_failed_callee_is_rolled_back_at_every_depth_and_its_caller_goes_on() {
    let mut chain = chain();
    // a → b → c: c writes, then fails; b saw it fail and goes on; a goes on.
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Store(1, 1),
            Op::Call(
                "b",
                0,
                vec![
                    Op::Store(1, 2),
                    Op::Call("c", 0, vec![Op::Store(1, 3), Op::Emit(9, 3), Op::Fail]),
                    Op::Expect(AbortCode::Trap),
                    Op::Store(5, 5),
                ],
            ),
            Op::ExpectOk,
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        get(&chain, "c", 1),
        None,
        "the failed callee's write is gone"
    );
    assert_eq!(get(&chain, "b", 1), Some(2), "its caller's writes stand");
    assert_eq!(get(&chain, "b", 5), Some(5));
    assert_eq!(status(&chain, "b"), code(AbortCode::Trap));
    assert!(
        receipt.events.is_empty(),
        "the failed callee's event is gone"
    );

    // a → b → c: c succeeds, then b fails: c's writes go with b's.
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call(
                "b",
                0,
                vec![
                    Op::Store(6, 6),
                    Op::Call("c", 0, vec![Op::Store(6, 6), Op::Emit(9, 1)]),
                    Op::Fail,
                ],
            ),
            Op::Store(6, 6),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 6), Some(6));
    assert_eq!(get(&chain, "b", 6), None);
    assert_eq!(
        get(&chain, "c", 6),
        None,
        "a succeeded callee of a failed call is gone too"
    );
    assert!(receipt.events.is_empty());

    // A top-level failure rolls back the whole transaction, callees included.
    let receipt = run(
        &mut chain,
        "a",
        &[Op::Call("b", 0, vec![Op::Store(7, 7)]), Op::Fail],
    );
    assert!(!receipt.is_success());
    assert_eq!(get(&chain, "b", 7), None);
}

#[test]
fn a_callee_has_its_callers_authority_and_not_the_signers() {
    let mut chain = chain();
    let alice = name("a");
    let signed = |chain: &Chain, script: &[Op]| tx(chain, "b", &[alice], script);
    // b, authorized by a (the signer), calls c: in c only b authorizes.
    let script = [
        Op::HasAuth(alice, 1),
        Op::Call(
            "c",
            0,
            vec![
                Op::HasAuth(alice, 2),
                Op::HasAuth(name("b"), 3),
                Op::Auth(name("b")),
            ],
        ),
        Op::ExpectOk,
        Op::Call("c", 0, vec![Op::Auth(alice)]),
        Op::Expect(AbortCode::Unauthorized),
    ];
    let signed = signed(&chain, &script);
    let result = push(&mut chain, signed);
    assert!(result.is_success(), "{result:?}");
    assert_eq!(
        get(&chain, "b", 1),
        Some(1),
        "the signer authorizes the action"
    );
    assert_eq!(get(&chain, "c", 2), Some(0), "but not the call");
    assert_eq!(get(&chain, "c", 3), Some(1), "the caller does");
}

#[test]
fn a_contract_on_the_call_stack_cannot_be_called_again_and_depth_is_bounded() {
    let mut chain = chain();
    // a → b → a
    let receipt = run(
        &mut chain,
        "a",
        &[Op::Call(
            "b",
            0,
            vec![Op::Call("a", 0, vec![Op::Store(1, 1)])],
        )],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(status(&chain, "b"), code(AbortCode::Reentry));
    assert_eq!(get(&chain, "a", 1), None);
    // a → a
    run(&mut chain, "a", &[Op::Call("a", 0, vec![])]);
    assert_eq!(status(&chain, "a"), code(AbortCode::Reentry));

    // a → b → … → j: ten contracts; the ninth call is one too deep.
    let mut script = vec![Op::Store(1, 1)];
    for callee in CONTRACTS[1..].iter().rev() {
        script = vec![Op::Call(callee, 0, script)];
    }
    let receipt = run(&mut chain, "a", &script);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        status(&chain, "h"),
        code(AbortCode::CallDepth),
        "the eighth contract is the last"
    );
    assert_eq!(get(&chain, "i", 1), None);
}

#[test]
fn a_callee_spends_the_callers_fuel_up_to_its_cap_and_the_rest_returns() {
    let mut chain = chain();
    let capped = run(
        &mut chain,
        "a",
        &[Op::Call("b", 200_000, vec![Op::Spin]), Op::Store(1, 1)],
    );
    assert!(capped.is_success(), "{}", capped.report());
    assert_eq!(status(&chain, "a"), code(AbortCode::OutOfFuel));
    assert_eq!(
        get(&chain, "a", 1),
        Some(1),
        "the caller goes on with what is left"
    );
    assert!(
        (200_000..300_000).contains(&capped.fuel_used),
        "the cap bounds what the callee spends: {}",
        capped.fuel_used
    );
    // Uncapped, a spinning callee takes all the caller has: the transaction fails.
    let all = run(
        &mut chain,
        "a",
        &[Op::Call("b", 0, vec![Op::Spin]), Op::Store(2, 2)],
    );
    assert_eq!(
        all.failure().unwrap().code,
        AbortCode::OutOfFuel,
        "{}",
        all.report()
    );
    assert_eq!(get(&chain, "a", 2), None);
}

#[test]
fn events_come_in_order_with_their_contract_and_the_block_commits_to_them() {
    let mut chain = chain();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Emit(1, 10),
            Op::Call("b", 0, vec![Op::Emit(2, 20)]),
            Op::Call("c", 0, vec![Op::Emit(3, 30), Op::Fail]),
            Op::Emit(4, 40),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    let event = |contract: &str, n: u64, v: u64| Event {
        contract: name(contract),
        name: Name(n),
        data: v.to_le_bytes().to_vec(),
    };
    let expected = vec![event("a", 1, 10), event("b", 2, 20), event("a", 4, 40)];
    assert_eq!(receipt.events, expected);
    // The stored block's body holds them, under its header's transactions root.
    let height = chain.head().height;
    let record = chain.store().block(height).unwrap().unwrap();
    let body: BlockBody = borsh::from_slice(&record.body).unwrap();
    assert_eq!(body.events, vec![expected]);
    assert_eq!(body.root(), chain.head().transactions_root);
    // A failed transaction has none.
    let failed = run(&mut chain, "a", &[Op::Emit(1, 1), Op::Fail]);
    assert!(failed.events.is_empty());
}

#[test]
fn a_query_reads_and_answers_but_cannot_write_emit_or_call() {
    let mut chain = chain();
    run(&mut chain, "b", &[Op::Store(1, 77)]);
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Query("b", 0, vec![Op::Return(5)]),
            Op::ExpectOk,
            Op::ReturnData(2, 3),
            Op::Query("b", 0, vec![Op::Store(1, 0)]),
            Op::Expect(AbortCode::ReadOnly),
            Op::Query("b", 0, vec![Op::Emit(1, 1)]),
            Op::Expect(AbortCode::ReadOnly),
            Op::Query("b", 0, vec![Op::Call("c", 0, vec![])]),
            Op::Expect(AbortCode::ReadOnly),
            // A query may query.
            Op::Query(
                "b",
                0,
                vec![Op::Query("c", 0, vec![Op::Return(9)]), Op::ExpectOk],
            ),
            Op::ExpectOk,
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 2), Some(5));
    assert_eq!(get(&chain, "b", 1), Some(77), "the query wrote nothing");
    assert!(receipt.events.is_empty());
}

#[test]
fn a_contract_knows_its_block_and_which_accounts_exist() {
    let mut chain = chain();
    let time = chain.next_block_time_ms();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Block(1, 2),
            Op::IsAccount(name("alice"), 3),
            Op::IsAccount(name("nobody"), 4),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 1), Some(chain.head().height));
    assert_eq!(get(&chain, "a", 2), Some(time));
    assert_eq!(get(&chain, "a", 3), Some(1));
    assert_eq!(get(&chain, "a", 4), Some(0));
}

#[test]
fn hostile_callees_fail_alone_and_cost_what_they_use() {
    use tally_host_api::limits::MAX_RETURN_LEN;
    let mut chain = chain();
    // Return data past the limit fails the callee, not the caller.
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call("b", 0, vec![Op::BigReturn(u64::from(MAX_RETURN_LEN) + 1)]),
            Op::Expect(AbortCode::LimitExceeded),
            Op::Call("b", 0, vec![Op::BigReturn(60_000)]),
            Op::ExpectOk,
            Op::ReturnData(1, 2),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 2), Some(60_000));
    // Events up to the transaction's limit, then the emitter fails.
    let many: Vec<Op> = (0..tally_host_api::limits::MAX_EVENTS_PER_TX as u64 + 1)
        .map(|i| Op::Emit(i, i))
        .collect();
    let receipt = run(&mut chain, "a", &[Op::Call("b", 0, many), Op::Emit(1, 1)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(status(&chain, "a"), code(AbortCode::LimitExceeded));
    assert_eq!(
        receipt.events.len(),
        1,
        "the failed emitter's events are dropped"
    );
}

#[test]
fn a_callee_that_recurses_without_end_overflows_the_shared_stack_budget_alone() {
    let mut chain = chain();
    // Eight levels deep, the last one recursing: the deterministic limit stops it (never the
    // native stack), and every caller goes on.
    let mut script = vec![
        Op::Call("deep", 0, vec![]),
        Op::Expect(AbortCode::StackOverflow),
    ];
    for callee in CONTRACTS[1..7].iter().rev() {
        script = vec![Op::Call(callee, 0, script), Op::ExpectOk];
    }
    let receipt = run(&mut chain, "a", &script);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(status(&chain, "g"), code(AbortCode::StackOverflow));
}

#[test]
fn setcode_over_code_runs_migrate_and_a_failing_migrate_keeps_the_old_code() {
    let mut chain = chain();
    let setcode = |chain: &Chain, code: Vec<u8>| {
        let set = SetCode {
            account: name("a"),
            code,
        };
        let act = action(SYSTEM, SETCODE, &[name("a")], borsh::to_vec(&set).unwrap());
        SignedTransaction::unsigned(envelope(chain, vec![act]))
    };
    assert_eq!(
        get(&chain, "a", MIGRATED),
        None,
        "a first deployment runs onInit, not migrate"
    );
    let hash = chain.code_hash(name("a")).unwrap();

    let failing = script_contract(true);
    let set = setcode(&chain, failing);
    let result = push(&mut chain, set);
    assert_eq!(
        result.receipt().unwrap().failure().unwrap().code,
        AbortCode::Trap
    );
    assert_eq!(
        chain.code_hash(name("a")).unwrap(),
        hash,
        "the old code stays"
    );
    assert_eq!(get(&chain, "a", MIGRATED), None);

    let mut upgraded = script_contract(false);
    upgraded.extend_from_slice(&[0, 3, 2, b'v', b'2']); // a custom section "v2": new code
    let set = setcode(&chain, upgraded);
    let result = push(&mut chain, set);
    assert!(result.is_success(), "{result:?}");
    assert_ne!(chain.code_hash(name("a")).unwrap(), hash);
    assert_eq!(
        get(&chain, "a", MIGRATED),
        Some(1),
        "migrate ran against the old state"
    );
}

/// Blocks of calls that fail, roll back, re-enter and spin, over every thread count and
/// pipeline: one head.
#[test]
fn blocks_with_calls_give_one_head_on_every_thread_count_and_pipeline() {
    let heads = |pipeline: Pipeline, threads: usize| {
        let pool = thread_pool(threads);
        pool.install(|| {
            let mut chain = chain();
            chain.set_pipeline(pipeline);
            let mut ids = Vec::new();
            let mut confirmed = 0;
            for round in 0..3u64 {
                let txs: Vec<_> = (0..60u64)
                    .map(|i| {
                        let from = CONTRACTS[((i + round) % 10) as usize];
                        let to = CONTRACTS[((i * 3 + 1) % 10) as usize];
                        let script = match i % 5 {
                            0 => vec![Op::Call(to, 0, vec![Op::Store(i, round)]), Op::Emit(i, i)],
                            1 => vec![Op::Store(i, i), Op::Call(to, 0, vec![Op::Fail])],
                            2 => vec![Op::Call(to, 100_000, vec![Op::Spin]), Op::Store(i, 1)],
                            3 => vec![Op::Call(to, 0, vec![Op::Call(from, 0, vec![])])],
                            _ => vec![Op::Query(to, 0, vec![Op::Return(i)]), Op::ReturnData(i, 1)],
                        };
                        tx(&chain, from, &[], &script)
                    })
                    .collect();
                confirmed += chain.run_block(txs).unwrap().confirmed;
                ids.push(chain.head_id());
            }
            (ids, confirmed)
        })
    };
    let (reference, _) = heads(Pipeline::NONE, 1);
    for threads in [1, 2, 4] {
        let (ids, confirmed) = heads(Pipeline::ALL, threads);
        assert_eq!(ids, reference, "{threads} threads");
        if threads > 1 {
            assert!(confirmed > 0, "no speculative run with calls stood");
        }
    }
}

#[test]
fn chain_query_answers_from_committed_state_and_commits_nothing() {
    let chain = chain();
    let answer = chain
        .query(name("a"), name("price"), &encode(&[Op::Return(99)]))
        .unwrap();
    assert!(answer.is_success(), "{answer:?}");
    assert_eq!(answer.output, 99u64.to_le_bytes());
    assert!(answer.fuel_used > 0);

    let before = user_state(&chain);
    let write = chain
        .query(name("a"), name("price"), &encode(&[Op::Store(1, 1)]))
        .unwrap();
    assert_eq!(write.failure().unwrap().code, AbortCode::ReadOnly);
    let spin = chain
        .query(name("a"), name("price"), &encode(&[Op::Spin]))
        .unwrap();
    assert_eq!(spin.failure().unwrap().code, AbortCode::OutOfFuel);
    assert_eq!(user_state(&chain), before);

    let nobody = chain.query(name("nobody"), name("price"), &[]).unwrap();
    assert_eq!(nobody.failure().unwrap().code, AbortCode::NoHandler);
    // A contract without a `query` export answers none.
    let coin = simplecoin_chain();
    let none = coin.query(simplecoin(), name("price"), &[]).unwrap();
    assert_eq!(none.failure().unwrap().code, AbortCode::NoHandler);
}

/// The script contract with a custom section `v{i}`: the same behaviour, another code hash.
fn variant(i: u8) -> Vec<u8> {
    let mut code = script_contract(false);
    code.extend_from_slice(&[0, 4, 3, b'v', b'0' + i / 10, b'0' + i % 10]);
    code
}

#[test]
fn a_transaction_pays_for_each_contract_it_enters_after_its_first_and_enters_at_most_sixteen() {
    use tally_host_api::limits::MAX_CONTRACTS_PER_TX;
    let variants: Vec<(String, Vec<u8>)> = (0..MAX_CONTRACTS_PER_TX as u8)
        .map(|i| (format!("k{}", (b'a' + i) as char), variant(i)))
        .collect();
    let mut contracts: Vec<(Name, &[u8])> = variants
        .iter()
        .map(|(account, code)| (name(account), &code[..]))
        .collect();
    let script = script_contract(false);
    contracts.push((name("a"), &script));
    contracts.push((name("b"), &script));
    let mut chain = unsigned_chain(&contracts);
    let fresh = chain
        .runtime()
        .prepare(&variants[0].1)
        .unwrap()
        .fresh_instance_fuel();
    assert!(fresh > 0);

    // Calling code the transaction already entered (a's own) costs no instance; new code
    // costs one, once.
    // (The first call creates a's status key, which costs a new key once.)
    run(&mut chain, "a", &[Op::Call("b", 0, vec![])]);
    let same = run(&mut chain, "a", &[Op::Call("b", 0, vec![])]);
    let new = run(&mut chain, "a", &[Op::Call("ka", 0, vec![])]);
    let twice = run(
        &mut chain,
        "a",
        &[Op::Call("ka", 0, vec![]), Op::Call("ka", 0, vec![])],
    );
    let again = run(
        &mut chain,
        "a",
        &[Op::Call("b", 0, vec![]), Op::Call("b", 0, vec![])],
    );
    for r in [&same, &new, &twice, &again] {
        assert!(r.is_success(), "{}", r.report());
    }
    // The callee's own work is the same in each: the difference is the instance (and the
    // bytes of the longer scripts, alike in both pairs).
    assert_eq!(new.fuel_used - same.fuel_used, fresh);
    assert_eq!(twice.fuel_used - again.fuel_used, fresh);

    // a and fifteen other codes: sixteen contracts; the sixteenth new one is one too many.
    let names: Vec<&'static str> = variants
        .iter()
        .map(|(n, _)| &*Box::leak(n.clone().into_boxed_str()))
        .collect();
    let mut script: Vec<Op> = names[..15]
        .iter()
        .flat_map(|n| [Op::Call(n, 0, vec![]), Op::ExpectOk])
        .collect();
    script.push(Op::Call(names[15], 0, vec![]));
    script.push(Op::Expect(AbortCode::LimitExceeded));
    let receipt = run(&mut chain, "a", &script);
    assert!(receipt.is_success(), "{}", receipt.report());
}

/// A random script from an xorshift stream ([`generate`]).
fn random_script(rng: &mut u64, depth: u32, budget: &mut u32) -> Vec<Op> {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    generate(&mut next, depth, budget)
}

/// Random blocks of nested calls, queries, failures, spins and events: the same receipts and
/// head in order on one thread, speculatively on 2, 4, 64 and 128, and after a restart mid-way.
#[test]
fn random_call_trees_give_one_history_on_every_path() {
    let run = |pipeline: Pipeline, threads: usize, restart_after: Option<u64>| {
        let pool = thread_pool(threads);
        pool.install(|| {
            let mut chain = chain();
            chain.set_pipeline(pipeline);
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut history = Vec::new();
            for round in 0..4u64 {
                if restart_after == Some(round) {
                    let store = chain.into_store();
                    chain = tally_chain::Chain::open(
                        runtime(),
                        store,
                        tally_chain::ChainConfig {
                            check_signatures: false,
                            fees: tally_chain::FeeSchedule::ZERO,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    chain.set_pipeline(pipeline);
                }
                let txs: Vec<_> = (0..40)
                    .map(|i| {
                        let mut budget = 24;
                        let script = random_script(&mut rng, 3, &mut budget);
                        tx(&chain, CONTRACTS[i % CONTRACTS.len()], &[], &script)
                    })
                    .collect();
                let block = chain.run_block(txs).unwrap();
                history.push((chain.head_id(), block.results));
            }
            history
        })
    };
    let reference = run(Pipeline::NONE, 1, None);
    let events: usize = reference
        .iter()
        .flat_map(|(_, results)| results.iter().filter_map(TxResult::receipt))
        .map(|r| r.events.len())
        .sum();
    assert!(events > 0, "the scripts emitted nothing: a weak test");
    // 64 and 128 threads run more speculative call stacks at once than the runtime's instance
    // pool (sized for this machine's cores) holds: those runs fall back to in-order execution.
    for (threads, restart) in [(2, None), (4, None), (64, None), (128, None), (2, Some(2))] {
        let got = run(Pipeline::ALL, threads, restart);
        assert_eq!(got, reference, "{threads} threads, restart {restart:?}");
    }
}

#[test]
fn a_traced_receipt_shows_the_call_tree_with_each_frames_fuel_status_and_events() {
    let rt = std::sync::Arc::new(
        tally_runtime::Runtime::new(tally_runtime::RuntimeConfig {
            trace: true,
            ..Default::default()
        })
        .unwrap(),
    );
    let code = script_contract(false);
    let mut builder = tally_chain::Chain::genesis(
        rt,
        Box::new(tally_chain::MemoryStore::new(16)),
        tally_chain::ChainConfig {
            check_signatures: false,
            fees: tally_chain::FeeSchedule::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    for c in ["a", "b", "c"] {
        builder.deploy(name(c), &code).unwrap();
    }
    let mut chain = builder.finish().unwrap();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call(
                "b",
                0,
                vec![Op::Emit(1, 1), Op::Query("c", 0, vec![Op::Return(3)])],
            ),
            Op::Call("c", 0, vec![Op::Fail]),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    let calls = &receipt.trace.as_ref().unwrap().actions[0].calls;
    let tree: Vec<_> = calls
        .iter()
        .map(|c| {
            (
                c.depth,
                c.contract,
                c.query,
                c.failure.as_ref().map(|a| a.code),
                c.events,
            )
        })
        .collect();
    assert_eq!(
        tree,
        vec![
            (1, name("b"), false, None, 1),
            (2, name("c"), true, None, 0),
            (1, name("c"), false, Some(AbortCode::Trap), 0),
        ]
    );
    assert!(calls.iter().all(|c| c.fuel_used > 0));
    assert!(
        calls[0].fuel_used > calls[1].fuel_used,
        "a frame's fuel includes its callees'"
    );
    let report = receipt.report();
    assert!(
        report.contains("call b::go") && report.contains("query c::go"),
        "{report}"
    );
    assert!(report.contains("failed: trap"), "{report}");
}
