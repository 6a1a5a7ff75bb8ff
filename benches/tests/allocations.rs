//! Issue 26, goal 1: the chain's work for a transaction allocates nothing once it runs warm.
//! Counted by an allocator that counts the calling thread's allocations: in its own test
//! binary, so the count sees nothing but this test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use tally_bench::workload::{self, BenchConfig, TransferGen};
use tally_chain::{Chain, ChainConfig, Durability, MemoryStore, Pipeline};
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

/// Blocks of simplecoin transfers among 10,000 accounts, fees on, executed and committed on
/// this thread (`tally bench --store memory --unsigned --threads 1 --sequential`): a block
/// four times as large makes no more allocations, give or take a few buffers that double.
/// Before the journal reused its buffers and a block's changes went into one, each transfer
/// made about 4.1 (callgrind, `benches/callgrind/stages.sh`): 12,300 more for the larger
/// block.
#[test]
fn a_block_of_transfers_allocates_per_block_not_per_transfer() {
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
    let store = Box::new(MemoryStore::new(4));
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
    // Warm: the runtime's instance, the journal's buffers, the store's keys.
    for _ in 0..8 {
        run(&mut chain, 4_000);
    }
    let small = run(&mut chain, 1_000);
    let large = run(&mut chain, 4_000);
    let per_transfer = large.saturating_sub(small) as f64 / 3_000.0;
    println!("allocations: {small} for 1,000 transfers, {large} for 4,000");
    assert!(
        per_transfer < 0.05,
        "{per_transfer:.2} allocations a transfer ({small} for a block of 1,000, {large} for \
         4,000)"
    );
}
