#![no_main]
//! Call trees from the fuzzer's bytes: up to eight transactions, each running a script on a
//! contract that calls, queries, fails, spins, emits and returns (chain/tests/all/script.rs),
//! nested up to three calls deep. The block must execute without a node fault, and give the
//! same receipts and head in order on one thread as speculatively on all cores.

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use tally_chain::{Chain, ChainConfig, MemoryStore, Pipeline, SignedTransaction};
use tally_runtime::{Runtime, RuntimeConfig};

#[path = "../../chain/tests/all/script.rs"]
mod script;

use script::{CONTRACTS, encode, generate, script_contract};

fn runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| Arc::new(Runtime::new(RuntimeConfig::default()).expect("a runtime")))
        .clone()
}

/// The script contract at each of [`CONTRACTS`], run under `pipeline`.
fn chain(pipeline: Pipeline) -> Chain {
    static CODE: OnceLock<Vec<u8>> = OnceLock::new();
    let code = CODE.get_or_init(|| script_contract(false));
    let config = ChainConfig {
        check_signatures: false,
        ..ChainConfig::default()
    };
    let mut genesis = Chain::genesis(runtime(), Box::new(MemoryStore::new(16)), config).unwrap();
    for contract in CONTRACTS {
        genesis.deploy(contract.parse().unwrap(), code).unwrap();
    }
    // The payer of the scripts (nobody authorizes them): every run pays its fee, so fees are
    // fuzzed on both paths too.
    genesis.fund(tally_chain::system::SYSTEM, 1 << 60);
    let mut chain = genesis.finish().unwrap();
    chain.set_pipeline(pipeline);
    // Whatever genesis's transactions said of conflicts, the block must speculate.
    chain.set_speculate_always(true);
    chain
}

/// The transactions `data` describes: each a script drawn from its bytes, 8 at a time.
fn block(chain: &Chain, data: &[u8]) -> Vec<SignedTransaction> {
    let mut at = 0;
    let mut next = || {
        let mut word = [0u8; 8];
        for byte in &mut word {
            *byte = data.get(at).copied().unwrap_or(0);
            at += 1;
        }
        u64::from_le_bytes(word)
    };
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    (0..8)
        .map(|i| {
            let mut budget = 16;
            let script = generate(&mut next, 3, &mut budget);
            let action = tally_chain::Action {
                account: CONTRACTS[i].parse().unwrap(),
                name: "go".parse().unwrap(),
                authorization: vec![],
                data: encode(&script),
            };
            SignedTransaction::unsigned(tally_chain::Transaction::new(
                chain.next_block_time_ms() + 30_000,
                (ref_block_num, ref_block_prefix),
                vec![action],
            ))
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let (mut in_order, mut speculative) = (chain(Pipeline::NONE), chain(Pipeline::ALL));
    let txs = block(&in_order, data);
    let a = in_order
        .run_block(txs.clone())
        .expect("a block of calls is never a node fault");
    let b = speculative
        .run_block(txs)
        .expect("a block of calls is never a node fault");
    assert_eq!(a.results, b.results, "speculation changed a receipt");
    assert_eq!(in_order.head_id(), speculative.head_id());
});
