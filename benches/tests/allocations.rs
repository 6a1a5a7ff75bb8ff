//! Issue 26, goal 1: the chain's work for a transaction allocates nothing once it runs warm.
//! Counted by an allocator that counts the calling thread's allocations: in its own test
//! binary, so the count sees nothing but this test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use tally_bench::workload::{self, BenchConfig, TransferGen};
use tally_chain::{
    Chain, ChainConfig, Durability, LogOptions, LogStore, MemoryStore, Pipeline, StateStore,
};
use tally_runtime::{Runtime, RuntimeConfig};

/// Counts the allocations (and growths) the calling thread makes.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down has no counter left, and is not measured.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is a plain
// thread-local with no destructor, so counting never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations this thread made while `f` ran.
fn allocations_during<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let start = ALLOCATIONS.with(Cell::get);
    let out = f();
    (out, ALLOCATIONS.with(Cell::get) - start)
}

/// Allocations the calling thread makes executing and committing a block of 1,000 simplecoin
/// transfers, then one of 4,000, on `store`, after warm blocks: 10,000 accounts, fees on,
/// `tally bench --unsigned --threads 1 --sequential`.
fn allocations_for_blocks(store: Box<dyn StateStore>) -> (u64, u64) {
    let config = BenchConfig {
        signed: false,
        pipeline: Pipeline::NONE,
        durability: Durability::None,
        ..BenchConfig::default()
    };
    let chain_config = ChainConfig {
        check_signatures: false,
        fees: config.fees,
        ..ChainConfig::default()
    };
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    let (mut chain, _) = workload::create(runtime, store, chain_config, &config).unwrap();
    let mut transfers = TransferGen::new(&config);
    let mut run = |chain: &mut Chain, n: u64| {
        let height = chain.head().height + 1;
        let txs = transfers.next_block(chain, height, n);
        // Preparing stands for a node receiving the transactions: it encodes each once, and
        // the block keeps those bytes.
        let prepared = chain.prepare(txs);
        let (run, allocations) = allocations_during(|| {
            workload::execute_and_commit(chain, &prepared, Durability::None).unwrap()
        });
        assert_eq!(run.failed, 0);
        allocations
    };
    // Warm: the runtime's instance, the journal's buffers, the store's keys, and the log
    // store's value cache, whose empty ways fill over the first 20 or so blocks (an entry put
    // into an empty way is an allocation; one that evicts reuses the old entry's).
    for _ in 0..32 {
        run(&mut chain, 4_000);
    }
    (run(&mut chain, 1_000), run(&mut chain, 4_000))
}

/// A block four times as large makes no more allocations, give or take a few buffers that
/// double. Before the journal reused its buffers and a block's changes went into one, each
/// transfer made about 4.1 (callgrind, `benches/callgrind/stages.sh`); with the journal's
/// reuse turned off, this counts 5,620 for the small block and 9,677 for the large one.
fn assert_per_block((small, large): (u64, u64)) {
    let per_transfer = large.saturating_sub(small) as f64 / 3_000.0;
    println!("allocations: {small} for 1,000 transfers, {large} for 4,000");
    assert!(
        per_transfer < 0.02,
        "{per_transfer:.3} allocations a transfer ({small} for a block of 1,000, {large} for \
         4,000)"
    );
}

#[test]
fn a_block_of_transfers_allocates_per_block_not_per_transfer() {
    assert_per_block(allocations_for_blocks(Box::new(MemoryStore::new(4))));
}

/// The log store's commit runs on this thread (its sync and merges on others), and so do its
/// reads. Its value cache allocates an entry for each key it has not held yet, so the warm
/// blocks above fill it first (before that, 0.13 allocations a transfer here).
#[test]
fn on_the_log_store_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), LogOptions::default()).unwrap();
    assert_per_block(allocations_for_blocks(Box::new(store)));
}
