//! The worst-case block benchmark (issue 10): 5,000 transactions calling one hostile
//! contract, executed and committed on one thread. Run: `cargo bench --bench hostile`.

use criterion::{Criterion, criterion_group, criterion_main};
use tally_bench::hostile::{self, HOSTILE};

fn hostile_blocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("hostile block (5,000 txs)");
    group.sample_size(10);
    let mut chain = hostile::chain().expect("a chain");
    for h in HOSTILE {
        let run = hostile::run(&mut chain, h).expect("the block runs");
        eprintln!(
            "{}: {} included, {} fuel, {:.1} ms ({:.2} ns per fuel)",
            h.name,
            run.included,
            run.fuel,
            run.elapsed.as_secs_f64() * 1e3,
            run.elapsed.as_secs_f64() * 1e9 / run.fuel.max(1) as f64
        );
        group.bench_function(h.name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| hostile::run(&mut chain, h).expect("the block runs").elapsed)
                    .sum()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, hostile_blocks);
criterion_main!(benches);
