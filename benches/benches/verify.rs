//! Criterion benches of signature verification, each backend side by side (issue 13).
//! Run: `cargo bench --bench verify` (or `cargo bench --bench verify -- batch` for one group,
//! `-- whole` for the whole-process figure alone).
//!
//! - `single`: one signature, ed25519-zebra against `zip215::verify_one` (key cached or not);
//! - `batch N`: one batch of N signatures on one thread: ed25519-zebra's batch verifier (what
//!   Tally used before), curve25519-dalek's multiscalar multiplication (`Backend::Dalek`: its
//!   AVX2 backend here), and the lane backends (AVX-512F, and its code on AVX2), each with a
//!   warm key cache and with none; at 2,500, batches with invalid signatures, each result
//!   settled (`Need::Each`, a block) or up to the first invalid one (`UpToFirstInvalid`,
//!   admission);
//! - `block`: `verify_many` on a block of 10,000 transfers with every core, against the
//!   previous implementation (ed25519-zebra, batches of 256 on rayon).
//!
//! Before the criterion groups, the whole-process figure: signatures per second of
//! `verify_many` on 10,000 signatures with every core, each variant run 5 times, interleaved
//! (A B C A B C …) so that a noisy minute slows all alike; the median is printed.
//!
//! Signatures are over 32-byte transaction ids, with keys from a pool of 4,096 as in
//! `tally bench` (`workload::KEY_POOL`).

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use ed25519_dalek::{Signer, SigningKey};
use rayon::prelude::*;
use tally_bench::workload::KEY_POOL;
use tally_chain::crypto::{self, Backend, Keys, Need, SigItem, zip215};
use tally_chain::{Action, Name, SignedTransaction, Transaction, TxId};

/// `n` signatures by keys from the pool: (public key, signature, message).
fn signatures(n: usize) -> Vec<([u8; 32], [u8; 64], [u8; 32])> {
    let keys: Vec<SigningKey> = (0..KEY_POOL.min(n as u64))
        .into_par_iter()
        .map(|i| crypto::derived_key(13, i))
        .collect();
    (0..n)
        .into_par_iter()
        .map(|i| {
            let key = &keys[i % keys.len()];
            let mut msg = [0u8; 32];
            msg[..8].copy_from_slice(&(i as u64).to_le_bytes());
            (
                key.verifying_key().to_bytes(),
                key.sign(&msg).to_bytes(),
                msg,
            )
        })
        .collect()
}

fn items_of(sigs: &[([u8; 32], [u8; 64], [u8; 32])]) -> Vec<SigItem<'_>> {
    sigs.iter()
        .map(|(key, sig, msg)| SigItem {
            public_key: key,
            signature: sig,
            message: msg,
        })
        .collect()
}

fn zebra_batch(sigs: &[([u8; 32], [u8; 64], [u8; 32])]) -> bool {
    let mut verifier = ed25519_zebra::batch::Verifier::new();
    for (key, sig, msg) in sigs {
        verifier.queue((
            ed25519_zebra::VerificationKeyBytes::from(*key),
            ed25519_zebra::Signature::from_bytes(sig),
            &msg[..],
        ));
    }
    verifier.verify(rand_core::OsRng).is_ok()
}

fn backends() -> Vec<(&'static str, Backend)> {
    let mut all = vec![("dalek", Backend::Dalek)];
    for backend in [Backend::Avx2, Backend::Avx512, Backend::Avx512Ifma] {
        if backend.available() {
            all.push((backend.name(), backend));
        } else {
            eprintln!("this CPU cannot run the {backend} backend: its variants do not run");
        }
    }
    all
}

fn single(c: &mut Criterion) {
    let sigs = signatures(1);
    let item = items_of(&sigs)[0];
    let (key, sig, msg) = sigs[0];
    let mut group = c.benchmark_group("verify/single");
    group.bench_function("zebra", |b| {
        b.iter(|| {
            ed25519_zebra::VerificationKey::try_from(key)
                .and_then(|k| k.verify(&ed25519_zebra::Signature::from_bytes(&sig), &msg))
                .is_ok()
        })
    });
    let warm = Keys::new(16);
    group.bench_function("zip215, key cached", |b| {
        b.iter(|| zip215::verify_one(&item, warm.points()))
    });
    let cold = Keys::new(0);
    group.bench_function("zip215, no key cache", |b| {
        b.iter(|| zip215::verify_one(&item, cold.points()))
    });
    group.finish();
}

/// A pool of one thread: the AVX-512 backend parallelises inside a batch, so a per-batch
/// comparison runs every variant on one core.
fn one_thread() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread")
}

fn batch(c: &mut Criterion) {
    let pool = one_thread();
    for n in [256, 2500] {
        let sigs = signatures(n);
        let items = items_of(&sigs);
        let mut group = c.benchmark_group(format!("verify/batch {n}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function("zebra", |b| b.iter(|| assert!(zebra_batch(&sigs))));
        for (name, backend) in backends() {
            let warm = Keys::new(crypto::KEY_CACHE_ENTRIES);
            group.bench_function(format!("{name}, keys cached"), |b| {
                b.iter(|| pool.install(|| crypto::verify_batch(&items, backend, &warm, Need::Each)))
            });
            group.bench_function(format!("{name}, no key cache"), |b| {
                b.iter_batched(
                    || Keys::new(0),
                    |cold| {
                        pool.install(|| crypto::verify_batch(&items, backend, &cold, Need::Each))
                    },
                    BatchSize::LargeInput,
                )
            });
        }
        if n == 2500 {
            // What invalid signatures cost: bisection for a few, single checks for many; and
            // admission's worst case, every signature invalid (anyone can send such a
            // bundle for free), settled in full and up to the first invalid one.
            for (label, every) in [
                ("2 invalid", n / 2),
                ("every 16th invalid", 16),
                ("all invalid", 1),
            ] {
                let mut bad = sigs.clone();
                for s in bad.iter_mut().step_by(every) {
                    s.1[40] ^= 1;
                }
                let bad_items = items_of(&bad);
                let warm = Keys::new(crypto::KEY_CACHE_ENTRIES);
                let backend = Backend::best();
                for need in [Need::Each, Need::UpToFirstInvalid] {
                    group.bench_function(format!("{backend:?}, {label}, {need:?}"), |b| {
                        b.iter(|| {
                            pool.install(|| crypto::verify_batch(&bad_items, backend, &warm, need))
                        })
                    });
                }
            }
        }
        group.finish();
    }
}

/// A block of `n` single-signature transfers.
fn signed_block(n: usize) -> Vec<SignedTransaction> {
    let keys: Vec<SigningKey> = (0..KEY_POOL)
        .into_par_iter()
        .map(|i| crypto::derived_key(13, i))
        .collect();
    (0..n)
        .into_par_iter()
        .map(|i| {
            let signer = Name(1 + (i as u64 % KEY_POOL));
            let tx = Transaction::new(
                i as u64,
                (0, 0),
                vec![Action {
                    account: Name(7),
                    name: Name(8),
                    authorization: vec![signer],
                    data: (i as u64).to_le_bytes().to_vec(),
                }],
            );
            SignedTransaction::sign(tx, &[(signer, &keys[i % keys.len()])])
        })
        .collect()
}

/// What `verify_many` did before issue 13: ed25519-zebra batches of 256 on rayon, a failed
/// batch verified again one signature at a time.
fn zebra_verify_many(items: &[(&SignedTransaction, &TxId)]) -> Vec<bool> {
    items
        .par_chunks(256)
        .flat_map_iter(|chunk| {
            let mut verifier = ed25519_zebra::batch::Verifier::new();
            for (tx, id) in chunk {
                for sig in &tx.signatures {
                    verifier.queue((
                        ed25519_zebra::VerificationKeyBytes::from(
                            sig.public_key.expect("these signatures carry their keys"),
                        ),
                        ed25519_zebra::Signature::from_bytes(&sig.signature),
                        &id[..],
                    ));
                }
            }
            let ok = verifier.verify(rand_core::OsRng).is_ok();
            chunk.iter().map(move |_| ok)
        })
        .collect()
}

fn block(c: &mut Criterion) {
    let n = 10_000;
    let txs = signed_block(n);
    let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
    let items: Vec<(&SignedTransaction, &TxId)> = txs.iter().zip(&ids).collect();
    let mut group = c.benchmark_group(format!(
        "verify/block of {n}, {} threads",
        rayon::current_num_threads()
    ));
    group.sample_size(10);
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("zebra (before)", |b| {
        b.iter(|| assert!(zebra_verify_many(&items).iter().all(|ok| *ok)))
    });
    for (name, backend) in backends() {
        group.bench_function(name, |b| {
            b.iter(|| {
                crypto::verify_many_with(&items, &crypto::NoKeys, backend, crypto::Need::Each)
            })
        });
    }
    group.finish();
}

/// Signatures per second of each variant on `n` signatures with every core: the median of
/// `runs`, the variants interleaved run by run.
fn whole_process(n: usize, runs: usize) {
    let txs = signed_block(n);
    let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
    let items: Vec<(&SignedTransaction, &TxId)> = txs.iter().zip(&ids).collect();
    let mut variants: Vec<(String, Box<dyn Fn() -> bool>)> = vec![(
        "zebra (before)".into(),
        Box::new(|| zebra_verify_many(&items).iter().all(|ok| *ok)),
    )];
    for (name, backend) in backends() {
        let items = &items;
        variants.push((
            name.into(),
            Box::new(move || {
                crypto::verify_many_with(items, &crypto::NoKeys, backend, crypto::Need::Each)
                    .iter()
                    .all(|r| r.is_ok())
            }),
        ));
    }
    // Warm the key caches and the code once.
    for (_, run) in &variants {
        assert!(run());
    }
    let mut rates = vec![Vec::new(); variants.len()];
    for _ in 0..runs {
        for ((_, run), rates) in variants.iter().zip(&mut rates) {
            let t = std::time::Instant::now();
            assert!(run());
            rates.push(n as f64 / t.elapsed().as_secs_f64());
        }
    }
    println!(
        "verify_many, {n} signatures, {} threads, median of {runs} interleaved runs:",
        rayon::current_num_threads()
    );
    for ((name, _), mut rates) in variants.iter().zip(rates) {
        rates.sort_by(f64::total_cmp);
        println!(
            "  {name:<16} {:>9.0} signatures/s (runs from {:.0} to {:.0})",
            rates[runs / 2],
            rates[0],
            rates[runs - 1]
        );
    }
}

criterion_group!(benches, single, batch, block);

fn main() {
    // `cargo bench --bench verify` runs everything; `-- <filter>` only the matching criterion
    // groups, and `-- whole` only the whole-process figure.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if filters.is_empty() || filters.iter().any(|f| f == "whole") {
        whole_process(10_000, 5);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
