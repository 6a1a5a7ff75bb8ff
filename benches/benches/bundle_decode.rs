//! The cost of splitting a compressed bundle (`tally_chain::bundle`), the one thing a node
//! does to one before any limit on its transactions applies: an honest bundle of 8,192 signed
//! transfers against the worst block built within the limits (at most
//! `MAX_BUNDLE_RAW_BYTES` decompressed, `MAX_COMPRESSION_RATIO` times the block,
//! `MAX_BUNDLE_BYTES` on the wire). Run: `cargo bench --bench bundle_decode`.
//!
//! The worst case: LZ4 sequences of no literals and a 19-byte match at offset 2, so every
//! 3 bytes of block are a sequence whose overlapping copy goes a few bytes at a time, about
//! 4.7 bytes out per byte in; what it decompresses to is no framing, so `split` refuses it
//! having done all the work. Compare with what verifying an honest bundle of as many bytes
//! costs (about 14 µs a signature of core time on the AVX2 machine, 88.8 bytes a transfer
//! compressed).

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

/// An LZ4 block that decompresses to exactly `raw` bytes through one sequence per 3 bytes:
/// each a token (no literals, match length 19), then the offset 2.
fn worst_block(raw: usize) -> Vec<u8> {
    // A first sequence of 16 literals, so that the offset has bytes behind it, and a match
    // of 4.
    let mut block = vec![0xF0, 1];
    block.extend_from_slice(&[7; 16]);
    block.extend_from_slice(&2u16.to_le_bytes());
    let mut produced = 20;
    // The last sequence must be literals only: keep room for at least 16 of them.
    while produced + 19 + 16 <= raw {
        block.push(0x0F);
        block.extend_from_slice(&2u16.to_le_bytes());
        block.push(0);
        produced += 19;
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

fn decode(c: &mut Criterion) {
    let txs = transfers(8_192);
    let honest = bundle::join(txs.iter().map(Vec::as_slice));
    assert_eq!(honest[0], BUNDLE_LZ4_TAG);
    assert_eq!(bundle::split(&honest).expect("splits"), txs);
    let worst = compressed(&worst_block(MAX_BUNDLE_RAW_BYTES), MAX_BUNDLE_RAW_BYTES);
    assert!(
        worst.len() <= MAX_BUNDLE_BYTES,
        "within what a bundle may take"
    );
    assert!(MAX_BUNDLE_RAW_BYTES <= MAX_COMPRESSION_RATIO * (worst.len() - 9));
    assert!(
        matches!(bundle::split(&worst), Err(bundle::BundleError::Framing(_))),
        "decompressed whole, then refused"
    );
    for (name, b) in [("honest", &honest), ("worst", &worst)] {
        eprintln!(
            "{name}: {} bytes received, {} decompressed",
            b.len(),
            bundle::stated_raw_len(b)
        );
    }
    let mut group = c.benchmark_group("bundle split");
    for (name, b) in [
        ("honest, 8,192 transfers", &honest),
        ("worst case, 4 MiB", &worst),
    ] {
        group.throughput(Throughput::Bytes(b.len() as u64));
        group.bench_function(name, |bench| bench.iter(|| bundle::split(b)));
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
