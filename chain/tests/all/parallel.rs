//! Parallel execution gives exactly the head of sequential execution: blocks that mix
//! conflicting and independent transfers, contracts that read what others wrote, hostile
//! contracts, a `setcode` mid-block and a block whose fuel runs out, under every pipeline
//! setting and thread count.

use crate::common::*;
use tally_chain::system::{SETCODE, SYSTEM, SetCode};
use tally_chain::{BlockId, Chain, Name, Pipeline, SignedTransaction, Transfer};

/// A counter: `apply` loads key "n", adds one, stores it back, and prints it.
const COUNTER: &str = r#"(module
  (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "print" (func $print (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "n")
  (func (export "apply") (param i64 i64 i64)
    (drop (call $load (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 8)))
    (i64.store (i32.const 8) (i64.add (i64.load (i32.const 8)) (i64.const 1)))
    (call $store (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 8))
    (call $print (i32.const 8) (i32.const 1))))"#;

/// Hostile actions, by name: each fails in its own way.
fn hostile(body: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
          (import "env" "store" (func $store (param i32 i32 i32 i32)))
          (memory (export "memory") 1)
          (func $r (call $r))
          (func (export "apply") (param i64 i64 i64) {body}))"#
    ))
    .unwrap()
}

fn block(chain: &Chain, round: u64) -> Vec<SignedTransaction> {
    let accounts = ["simplecoin", "a1", "a2", "a3", "a4", "a5"];
    let mut txs = Vec::new();
    for i in 0..120u64 {
        let from = accounts[((i * 7 + round) % 6) as usize];
        let to = accounts[((i * 3 + 1 + round) % 6) as usize];
        let t = Transfer {
            from: name(from),
            to: name(to),
            amount: 1 + i % 5,
            memo: format!("{round}/{i}"),
        };
        txs.push(unsigned_tx(chain, simplecoin(), transfer(), t.encode()));
        match i % 10 {
            1 => txs.push(unsigned_tx(
                chain,
                name("counter"),
                name("hit"),
                vec![i as u8],
            )),
            // Twenty-four of these per block spend the block's fuel before its end.
            3 | 8 => txs.push(unsigned_tx(chain, name("spin"), name("go"), vec![i as u8])),
            5 => txs.push(unsigned_tx(
                chain,
                name("trapper"),
                name("go"),
                vec![i as u8],
            )),
            7 => txs.push(unsigned_tx(chain, name("deep"), name("go"), vec![i as u8])),
            9 if i == 59 => {
                // Mid-block, `counter` gets new code: later calls must see it.
                let set = SetCode {
                    account: name("counter"),
                    code: hostile(
                        "(call $store (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 1))",
                    ),
                };
                let setcode = action(
                    SYSTEM,
                    SETCODE,
                    &[name("counter")],
                    borsh::to_vec(&set).unwrap(),
                );
                txs.push(SignedTransaction::unsigned(envelope(chain, vec![setcode])));
            }
            _ => {}
        }
    }
    txs
}

/// Runs three blocks under `pipeline` on a pool of `threads`; returns each block's id and how
/// many transactions were finalized from their speculative run.
fn heads(pipeline: Pipeline, threads: usize) -> (Vec<BlockId>, u32) {
    use tally_chain::{TxError, TxResult};
    let counter = wat::parse_str(COUNTER).unwrap();
    let spin = hostile("(loop $l (br $l))");
    let trapper = hostile(
        "(call $store (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 1)) unreachable",
    );
    let deep = hostile("(call $r)");
    let contracts: Vec<(Name, &[u8])> = vec![
        (simplecoin(), SIMPLECOIN_WASM),
        (name("counter"), &counter),
        (name("spin"), &spin),
        (name("trapper"), &trapper),
        (name("deep"), &deep),
    ];
    let pool = thread_pool(threads);
    pool.install(|| {
        let mut chain = unsigned_chain(&contracts);
        chain.set_pipeline(pipeline);
        // These blocks conflict too much for speculation to pay after the first, but every
        // block must reach the same head on either path.
        chain.set_speculate_always(true);
        let mut ids = Vec::new();
        let mut confirmed = 0;
        for round in 0..3 {
            let txs = block(&chain, round);
            let executed = chain.run_block(txs).unwrap();
            let full = executed
                .results
                .iter()
                .filter(|r| matches!(r, TxResult::Rejected(TxError::BlockFull(_))))
                .count();
            assert!(full > 0, "the block's fuel budget was not reached");
            if pipeline.parallel_execute && threads > 1 {
                assert!(executed.speculated > 0, "block {round} did not speculate");
            }
            confirmed += executed.confirmed;
            ids.push(chain.head_id());
        }
        (ids, confirmed)
    })
}

#[test]
fn every_thread_count_and_pipeline_gives_the_sequential_head_hostile_contracts_included() {
    let (reference, _) = heads(Pipeline::NONE, 1);
    for bits in [0u8, 1, 7, 8, 9, 15] {
        let pipeline = Pipeline {
            batch_verify: bits & 1 != 0,
            batch_dedup: bits & 2 != 0,
            early_encode: bits & 4 != 0,
            parallel_execute: bits & 8 != 0,
        };
        for threads in [1, 2, 4] {
            let (ids, confirmed) = heads(pipeline, threads);
            assert_eq!(
                ids,
                reference,
                "{} on {threads} threads",
                pipeline.describe()
            );
            if pipeline.parallel_execute && threads > 1 {
                // Most transfers touch other accounts than the ones before them.
                assert!(confirmed > 0, "nothing was confirmed from speculation");
            } else {
                assert_eq!(confirmed, 0);
            }
        }
    }
}

#[test]
fn a_transaction_whose_later_actions_would_get_less_fuel_in_order_runs_again() {
    use tally_chain::TxResult;
    use tally_host_api::AbortCode;
    use tally_host_api::limits::{FUEL_PER_ACTION, MAX_BLOCK_FUEL};
    // `burn` counts down from 1.2M, five instructions and a loop-header charge point a turn:
    // about 8M fuel, and succeeds.
    let burn = hostile(
        "(local $n i32) (local.set $n (i32.const 1200000))
         (loop $l (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))",
    );
    let spin = hostile("(loop $l (br $l))");
    let contracts: Vec<(Name, &[u8])> = vec![(name("burn"), &burn), (name("spin"), &spin)];
    let run = |pipeline: Pipeline, threads: usize| {
        let pool = thread_pool(threads);
        pool.install(|| {
            let mut chain = unsigned_chain(&contracts);
            chain.set_pipeline(pipeline);
            // Spins leave between one and two actions' fuel in the block.
            let spins = (MAX_BLOCK_FUEL / FUEL_PER_ACTION - 2) as usize;
            let mut txs: Vec<_> = (0..spins)
                .map(|i| unsigned_tx(&chain, name("spin"), name("go"), vec![i as u8]))
                .collect();
            let go = || action(name("burn"), name("go"), &[], vec![]);
            txs.push(SignedTransaction::unsigned(envelope(
                &chain,
                vec![go(), go(), go()],
            )));
            let executed = chain.run_block(txs).unwrap();
            (chain.head_id(), executed.results.last().cloned().unwrap())
        })
    };
    let (sequential, last) = run(Pipeline::NONE, 1);
    // In order, the third action runs out of the block's fuel.
    match &last {
        TxResult::Included(r) => {
            assert_eq!(r.failed_action, Some(2), "{r:?}");
            assert_eq!(r.failure().unwrap().code, AbortCode::OutOfFuel);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run(Pipeline::ALL, 2), (sequential, last));
}

/// Issue 20, item 2: a block of calls that each spin until their fuel runs out executes, with
/// the same results, on 1, 2, 64 and 128 threads. The runtime's instance pool is sized for this
/// machine's cores, so on 64 and 128 threads speculation runs out of instances: that is no
/// node fault, and those transactions run again in order.
#[test]
fn issue_20_a_block_of_spinning_calls_executes_alike_on_every_core_count() {
    let spin = hostile("(loop $l (br $l))");
    let mut heads = Vec::new();
    for threads in [1, 2, 64, 128] {
        let mut chain = unsigned_chain(&[(name("spin"), &spin)]);
        let txs: Vec<_> = (0..256u32)
            .map(|i| unsigned_tx(&chain, name("spin"), name("go"), i.to_le_bytes().to_vec()))
            .collect();
        let pool = thread_pool(threads);
        let executed = pool.install(|| chain.run_block(txs)).unwrap();
        heads.push((executed.header, executed.results));
    }
    for (threads, head) in [2, 64, 128].into_iter().zip(&heads[1..]) {
        assert_eq!(head, &heads[0], "{threads} threads");
    }
}

/// A block executed in order says whether speculating the next one would pay: blocks of
/// counter calls on one contract all conflict, so after the first block (which speculates, as
/// nothing is known yet) none speculates; calls spread over four counters do not conflict, and
/// the block after the first of those speculates, as does every later one. Whether a block
/// speculates never changes its head.
#[test]
fn blocks_run_in_order_decide_whether_the_next_speculates() {
    let counter = wat::parse_str(COUNTER).unwrap();
    let counters: Vec<Name> = (1..=4).map(|i| name(&format!("c{i}"))).collect();
    let contracts: Vec<(Name, &[u8])> = counters.iter().map(|c| (*c, &counter[..])).collect();
    let run = |pipeline: Pipeline, threads: usize| {
        let pool = thread_pool(threads);
        pool.install(|| {
            let mut chain = unsigned_chain(&contracts);
            chain.set_pipeline(pipeline);
            let (mut speculated, mut heads) = (Vec::new(), Vec::new());
            for height in 0..30u8 {
                let txs = (0..4u8)
                    .map(|i| {
                        let to = if height < 20 { 0 } else { usize::from(i) };
                        unsigned_tx(&chain, counters[to], name("hit"), vec![i, height])
                    })
                    .collect();
                let executed = chain.run_block(txs).unwrap();
                if executed.speculated > 0 {
                    speculated.push(height);
                }
                heads.push(chain.head_id());
            }
            (speculated, heads)
        })
    };
    let (none, sequential) = run(Pipeline::NONE, 1);
    assert!(none.is_empty());
    let (speculated, heads) = run(Pipeline::ALL, 2);
    assert_eq!(heads, sequential);
    let expected: Vec<u8> = [0].into_iter().chain(21..30).collect();
    assert_eq!(speculated, expected);
}
