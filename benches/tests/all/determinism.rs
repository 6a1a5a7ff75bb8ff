//! The determinism matrix (issue 20): the same signed blocks on 1, 2 and 64 threads, with each
//! signature backend this CPU runs forced, on the memory and the log store, with and without a
//! restart half-way, all reach the same state checksum and the same state.

use std::sync::Arc;

use tally_bench::sampler::Distribution;
use tally_bench::workload::{self, BenchConfig, BenchContract};
use tally_chain::crypto::{self, Backend, BackendChoice};
use tally_chain::{
    Chain, ChainConfig, Durability, LogOptions, LogStore, MemoryStore, Pipeline, StateStore,
};
use tally_runtime::{Runtime, RuntimeConfig};

/// The workload every cell runs: signed zipf transfers over few accounts, so blocks conflict
/// and speculation both stands and fails.
fn config(transfers: u64) -> BenchConfig {
    BenchConfig {
        transfers,
        accounts: 60,
        dist: Distribution::Zipf,
        seed: 20,
        block_size: 150,
        signed: true,
        pipeline: Pipeline::ALL,
        durability: Durability::Background,
        contract: BenchContract::Simplecoin,
        fees: tally_chain::FeeSchedule::STANDARD,
        max_fee: tally_chain::tx::DEFAULT_MAX_FEE,
    }
}

fn chain_config() -> ChainConfig {
    ChainConfig {
        // Short, so the replay window expires ids (and deletes their state) within the run.
        max_tx_lifetime_ms: 2_000,
        retain_blocks: 4,
        ..ChainConfig::default()
    }
}

/// A chain on `store`: created with the workload's genesis when empty, reopened otherwise.
fn chain_on(store: Box<dyn StateStore>) -> Chain {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    if store.head().is_some() {
        Chain::open(runtime, store, chain_config()).unwrap()
    } else {
        workload::create(runtime, store, chain_config(), &config(0))
            .unwrap()
            .0
    }
}

/// Runs the whole workload on `threads` threads, on a memory or a log store, restarting the
/// chain half-way if asked; the final checksum and state digest.
fn cell(threads: usize, log: bool, restart: bool) -> ([u8; 32], [u8; 32]) {
    let dir = tempfile::tempdir().unwrap();
    let open = || -> Box<dyn StateStore> {
        match log {
            true => Box::new(LogStore::open(dir.path(), LogOptions::default()).unwrap()),
            false => Box::new(MemoryStore::new(4)),
        }
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let mut chain = chain_on(open());
        if restart {
            workload::run(&mut chain, &config(900), &mut |_| {}).unwrap();
            chain = match log {
                true => {
                    drop(chain);
                    chain_on(open())
                }
                // A memory store outlives its chain only through `into_store`.
                false => chain_on(chain.into_store()),
            };
        }
        let report = workload::run(&mut chain, &config(1_800), &mut |_| {}).unwrap();
        (report.state_checksum, chain.state_digest().unwrap())
    })
}

#[test]
fn issue_20_every_thread_count_backend_store_and_restart_gives_the_same_checksum() {
    let backends: Vec<Backend> = Backend::ALL.into_iter().filter(|b| b.available()).collect();
    let mut reference = None;
    let mut cells = 0;
    for backend in &backends {
        crypto::set_backend(BackendChoice::Force(*backend)).unwrap();
        for threads in [1, 2, 64] {
            for log in [false, true] {
                for restart in [false, true] {
                    let got = cell(threads, log, restart);
                    let what = format!(
                        "{} backend, {threads} threads, {} store, restart {restart}",
                        backend.name(),
                        if log { "log" } else { "memory" }
                    );
                    assert_eq!(*reference.get_or_insert(got), got, "{what}");
                    cells += 1;
                }
            }
        }
    }
    crypto::set_backend(BackendChoice::Auto).unwrap();
    eprintln!(
        "{cells} cells agree; backends run: {:?} (the others are not on this CPU)",
        backends.iter().map(|b| b.name()).collect::<Vec<_>>()
    );
}
