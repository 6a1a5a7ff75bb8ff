//! The cost of splitting a compressed bundle (`tally_chain::bundle`), the one thing a node
//! does to one before any limit on its transactions applies: an honest bundle of 8,192 signed
//! transfers against hostile blocks built within the limits (at most `MAX_BUNDLE_RAW_BYTES`
//! decompressed, `MAX_COMPRESSION_RATIO` times the block, `MAX_BUNDLE_BYTES` on the wire).
//! Run: `cargo bench --bench bundle_decode`.
//!
//! The hostile blocks are LZ4 sequences of no literals and one short match each, at small
//! offsets, so the decoder does a sequence's bookkeeping for every few bytes it writes;
//! what they decompress to is no framing, so `split` refuses them having done all the work.
//! Each is timed (median of 5) and printed; criterion measures the slowest against the honest
//! bundle. Compare with verifying an honest bundle of 8,192 transfers: about 115 ms of core
//! time at the AVX2 machine's 14 µs a signature.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tally_bench::workload::{KEY_POOL, SIMPLECOIN, TRANSFER, account_name};
use tally_chain::bundle::{
    self, BUNDLE_LZ4_TAG, MAX_BUNDLE_BYTES, MAX_BUNDLE_RAW_BYTES, MAX_COMPRESSION_RATIO,
};
use tally_chain::crypto::derived_key;
use tally_chain::{Action, SignedTransaction, Transaction, Transfer};

/// `n` signed transfers as `tally load` signs them.
fn transfers(n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let (from, to) = (account_name(i * 7 % 10_000), account_name(i * 13 % 10_000));
            let transfer = Transfer {
                from,
                to,
                amount: 1,
                memo: format!("187b9a7c3e2f41a0-{i}"),
            };
            let tx = Transaction::new(
                1_800_000_000_000,
                (1234, 0xdead_beef),
                vec![Action {
                    account: SIMPLECOIN,
                    name: TRANSFER,
                    authorization: vec![from],
                    data: transfer.encode(),
                }],
            );
            let key = derived_key(1, (i * 7 % 10_000) % KEY_POOL);
            SignedTransaction::sign_registered(tx, &[(from, &key)]).encode()
        })
        .collect()
}

/// An LZ4 block that decompresses to exactly `raw` bytes through one sequence per step: each
/// a token with no literals and a match of `length` at `offset` (3 bytes a step up to a length
/// of 18, which the token holds; 4 above, with a length byte).
fn hostile_block(raw: usize, offset: u16, length: usize) -> Vec<u8> {
    assert!((4..=19 + 254).contains(&length));
    // A first sequence of 16 literals, so that the offset has bytes behind it, and a match
    // of 4.
    let mut block = vec![0xF0, 1];
    block.extend_from_slice(&[7; 16]);
    block.extend_from_slice(&offset.to_le_bytes());
    let mut produced = 20;
    // The last sequence must be literals only: keep room for at least 16 of them.
    while produced + length + 16 <= raw {
        let extra = length - 4;
        block.push(extra.min(15) as u8);
        block.extend_from_slice(&offset.to_le_bytes());
        if extra >= 15 {
            block.push((extra - 15) as u8);
        }
        produced += length;
    }
    let rest = raw - produced;
    block.push(0xF0);
    let mut more = rest - 15;
    while more >= 255 {
        block.push(255);
        more -= 255;
    }
    block.push(more as u8);
    block.extend(std::iter::repeat_n(3u8, rest));
    block
}

/// A compressed bundle of `block`, stating one transaction and `raw` bytes decompressed.
fn compressed(block: &[u8], raw: usize) -> Vec<u8> {
    let mut b = vec![BUNDLE_LZ4_TAG];
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&(raw as u32).to_le_bytes());
    b.extend_from_slice(block);
    b
}

/// The largest hostile bundle of `offset` and `length` within every limit: as much
/// decompressed as the 4 MiB, the ratio and the 1 MiB on the wire allow.
fn hostile(offset: u16, length: usize) -> Vec<u8> {
    let step = if length <= 18 { 3 } else { 4 };
    let room = MAX_BUNDLE_BYTES - 9 - 64;
    let raw = MAX_BUNDLE_RAW_BYTES
        .min(room / step * length)
        .min(MAX_COMPRESSION_RATIO * room);
    let b = compressed(&hostile_block(raw, offset, length), raw);
    assert!(b.len() <= MAX_BUNDLE_BYTES, "within what a bundle may take");
    assert!(
        raw <= MAX_COMPRESSION_RATIO * (b.len() - 9),
        "within the ratio"
    );
    assert!(
        matches!(bundle::split(&b), Err(bundle::BundleError::Framing(_))),
        "decompressed whole, then refused"
    );
    b
}

/// The median of 5 timings of `split(b)`, in seconds.
fn median_split(b: &[u8]) -> f64 {
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            let _ = std::hint::black_box(bundle::split(b));
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[2]
}

fn decode(c: &mut Criterion) {
    let txs = transfers(8_192);
    let honest = bundle::join(txs.iter().map(Vec::as_slice));
    assert_eq!(honest[0], BUNDLE_LZ4_TAG);
    assert_eq!(bundle::split(&honest).expect("splits"), txs);
    eprintln!(
        "honest, 8,192 transfers: {} bytes received, {} decompressed, {:.2} ms",
        honest.len(),
        bundle::stated_raw_len(&honest),
        median_split(&honest) * 1e3
    );
    // Every kind of sequence that makes the decoder copy a few bytes at a time: the slowest
    // goes to criterion.
    let mut worst = (0.0, Vec::new());
    for offset in [1u16, 2, 3, 8] {
        for length in [4, 8, 12, 18, 19, 30] {
            let b = hostile(offset, length);
            let t = median_split(&b);
            eprintln!(
                "hostile, offset {offset}, match {length}: {} bytes received, {} decompressed, \
                 {:.2} ms",
                b.len(),
                bundle::stated_raw_len(&b),
                t * 1e3
            );
            if t > worst.0 {
                worst = (t, b);
            }
        }
    }
    let mut group = c.benchmark_group("bundle split");
    for (name, b) in [
        ("honest, 8,192 transfers", &honest),
        ("slowest hostile", &worst.1),
    ] {
        group.throughput(Throughput::Bytes(b.len() as u64));
        group.bench_function(name, |bench| bench.iter(|| bundle::split(b)));
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
