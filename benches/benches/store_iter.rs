//! Ordered reads of committed state (issue 23): a random seek and a walk of 100 keys, one
//! seek per key, on each store, over the state `tally_bench::storebench::iterate` builds (a
//! token's balances merged into the log store's run, then a fifth of them changed since).
//! First it prints that workload's own table (seeks/s, walk keys/s, and the memory of the log
//! store's order of unmerged keys, per key), from the same functions, then the same walk
//! through a contract (`tally_bench::storebench::walk`: contracts/ordered.c, one `db_next`
//! per key): keys per second and fuel per key.
//!
//! Run: `cargo bench -p tally-bench --bench store_iter` (`--features rocksdb` adds RocksDB).
//! `TALLY_ITER_KEYS=N` sets the balances (default 1,000,000) and `TALLY_ITER_KEY_BYTES=N`
//! the bytes of each key after its namespace (default 8, an account name; 32, a hash).

use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use tally_bench::sampler::Rng;
use tally_bench::storebench::Store;
use tally_bench::storebench::iterate::{self, IterConfig};
use tally_bench::storebench::walk;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config() -> IterConfig {
    IterConfig {
        keys: env("TALLY_ITER_KEYS", 1_000_000),
        key_bytes: env("TALLY_ITER_KEY_BYTES", 8) as usize,
        ..IterConfig::default()
    }
}

fn stores() -> Vec<Store> {
    let mut all = vec![Store::Memory, Store::Log];
    if cfg!(feature = "rocksdb") {
        all.push(Store::Rocksdb);
    }
    all
}

fn seeks(c: &mut Criterion) {
    let config = IterConfig {
        walk: 100,
        ..config()
    };
    for store in stores() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = iterate::build(store, dir.path(), &config).expect("the state");
        let end = iterate::namespace_end();
        let mut group = c.benchmark_group(format!("iterate/{}", store.label()));
        let (mut rng, mut key) = (Rng::new(1), Vec::new());
        group.bench_function("seek, random key, either way", |b| {
            b.iter(|| {
                black_box(
                    iterate::random_seek(&*db, &mut rng, config.key_bytes, &mut key, &end)
                        .expect("a seek"),
                )
            })
        });
        let mut digest = 0;
        group.throughput(criterion::Throughput::Elements(config.walk));
        group.bench_function("walk 100 keys, a seek each", |b| {
            b.iter(|| iterate::walk(&*db, &mut rng, &config, &end, &mut digest).expect("a walk"))
        });
        group.finish();
    }
}

criterion_group!(benches, seeks);

fn main() {
    let config = config();
    let mut runs = Vec::new();
    for store in stores() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        runs.push(iterate::run(store, dir.path(), &config).expect("the workload"));
    }
    eprintln!("{}", iterate::table(&config, &runs));
    // Through the contract: memory and log stores (the chain's own; RocksDB is a store-level
    // comparison). A walk of 1,000 keys, 21 times.
    let contract_keys = env("TALLY_WALK_KEYS", 100_000);
    eprintln!("contract walks of 1,000 keys over {contract_keys} keys (contracts/ordered.c):");
    for store in [Store::Memory, Store::Log] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let got = walk::run(store, dir.path(), contract_keys, 1_000, 21).expect("the walks");
        eprintln!(
            "  {:<8} {:>10.0} keys/s {:>8.0} fuel a key",
            store.label(),
            got.keys_per_second,
            got.fuel_per_key
        );
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
