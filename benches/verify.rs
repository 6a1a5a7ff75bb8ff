//! Criterion benches of signature verification, each backend side by side (issue 13).
//! Run: `cargo bench --bench verify` (or `cargo bench --bench verify -- batch` for one group).
//!
//! - `single`: one signature, ed25519-zebra against `zip215::verify_one` (key cached or not);
//! - `batch N`: one batch of N signatures on one thread: ed25519-zebra's batch verifier (what
//!   Tally used before), curve25519-dalek's multiscalar multiplication (`Backend::Dalek`: its
//!   AVX2 backend here), and the AVX-512F backend, each with a warm key cache and with none;
//! - `block`: `verify_many` on a block of 10,000 transfers with every core, against the
//!   previous implementation (ed25519-zebra, batches of 256 on rayon).
//!
//! Signatures are over 32-byte transaction ids, with keys from a pool of 4,096 as in
//! `tally bench` (`workload::KEY_POOL`).

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::{Signer, SigningKey};
use rayon::prelude::*;
use tally_chain::crypto::{self, Backend, Keys, SigItem, zip215};
use tally_chain::workload::KEY_POOL;
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

fn items(sigs: &[([u8; 32], [u8; 64], [u8; 32])]) -> Vec<SigItem<'_>> {
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
    if Backend::Avx512.available() {
        all.push(("avx512", Backend::Avx512));
    } else {
        eprintln!("no AVX-512F on this CPU: the avx512 variants do not run");
    }
    all
}

fn single(c: &mut Criterion) {
    let sigs = signatures(1);
    let item = items(&sigs)[0];
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

fn batch(c: &mut Criterion) {
    for n in [256, 2500] {
        let sigs = signatures(n);
        let items = items(&sigs);
        let mut group = c.benchmark_group(format!("verify/batch {n}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function("zebra", |b| b.iter(|| assert!(zebra_batch(&sigs))));
        for (name, backend) in backends() {
            let warm = Keys::new(crypto::KEY_CACHE_ENTRIES);
            group.bench_function(format!("{name}, keys cached"), |b| {
                b.iter(|| crypto::verify_batch(&items, backend, &warm))
            });
            group.bench_function(format!("{name}, no key cache"), |b| {
                b.iter_batched(
                    || Keys::new(0),
                    |cold| crypto::verify_batch(&items, backend, &cold),
                    BatchSize::LargeInput,
                )
            });
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
            let tx = Transaction {
                expiration_ms: i as u64,
                ref_block_num: 0,
                ref_block_prefix: 0,
                actions: vec![Action {
                    account: Name(7),
                    name: Name(8),
                    authorization: vec![signer],
                    data: (i as u64).to_le_bytes().to_vec(),
                }],
            };
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
                        ed25519_zebra::VerificationKeyBytes::from(sig.public_key),
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
            b.iter(|| crypto::verify_many_with(&items, backend))
        });
    }
    group.finish();
}

criterion_group!(benches, single, batch, block);
criterion_main!(benches);
