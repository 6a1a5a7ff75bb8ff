//! The cost of decompressing a bundle (src/node/bundle.rs), the one thing a node does to a
//! compressed bundle before any limit on its transactions applies: an honest bundle of
//! 8,192 signed transfers against the worst block built within the node's limits (at most
//! 4 MiB decompressed, 8 times the block, 1 MiB on the wire). Run:
//! `cargo bench --bench bundle_decode`.
//!
//! The worst case: LZ4 sequences of no literals and a 19-byte match at offset 2, so every
//! 3 bytes of block are a sequence whose overlapping copy goes a few bytes at a time, about
//! 4.7 bytes out per byte in. It prints each case's time per decompressed and per received
//! byte, next to what verifying an honest bundle of that many bytes costs (about 14 µs a
//! signature of core time on the AVX2 machine, 165 bytes a transfer uncompressed).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tally_bench::workload::{KEY_POOL, SIMPLECOIN, TRANSFER, account_name};
use tally_chain::crypto::derived_key;
use tally_chain::{Action, SignedTransaction, Transaction, Transfer};

/// The node's bound on a compressed bundle's decompressed framing (`MAX_BUNDLE_RAW_BYTES`).
const MAX_RAW: usize = 4 << 20;

/// The framing of `n` signed transfers as `tally load` signs them: a u32 length and the
/// signed bytes each.
fn honest_framing(n: u64) -> Vec<u8> {
    let mut framing = Vec::new();
    for i in 0..n {
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
        let signed = SignedTransaction::sign_registered(tx, &[(from, &key)]).encode();
        framing.extend_from_slice(&(signed.len() as u32).to_le_bytes());
        framing.extend_from_slice(&signed);
    }
    framing
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

fn decode(c: &mut Criterion) {
    let honest = honest_framing(8_192);
    let honest_block = lz4_flex::block::compress(&honest);
    let worst = worst_block(MAX_RAW);
    assert!(worst.len() <= 1 << 20, "within the 1 MiB a bundle may take");
    assert!(MAX_RAW <= 8 * worst.len(), "within the ratio of 8");
    let mut out = vec![0u8; MAX_RAW];
    for (name, block, raw) in [
        ("honest", &honest_block, honest.len()),
        ("worst", &worst, MAX_RAW),
    ] {
        let n = lz4_flex::block::decompress_into(block, &mut out[..raw]).expect("decodes");
        assert_eq!(n, raw);
        eprintln!(
            "{name}: {} bytes received, {raw} decompressed ({:.1} to 1)",
            block.len(),
            raw as f64 / block.len() as f64
        );
    }
    let mut group = c.benchmark_group("bundle decompression");
    for (name, block, raw) in [
        ("honest 8,192 transfers", &honest_block, honest.len()),
        ("worst case, 4 MiB", &worst, MAX_RAW),
    ] {
        group.throughput(Throughput::Bytes(block.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| lz4_flex::block::decompress_into(block, &mut out[..raw]).expect("decodes"))
        });
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
