//! The CometBFT transaction format: a bundle of individually signed Tally transactions. Here,
//! in the library, so that every node that embeds Tally, the fuzz targets and the benches
//! decode it with the one decoder.
//!
//! CometBFT's mempool, gossip and block building cost about the same per CometBFT transaction
//! whatever its size, so a client may bundle many signed transfers into one (the precedent is
//! Vryx's chunks and Celestia's blobs). Every Tally transaction inside keeps its own
//! signatures, and every validator verifies each of them: bundling changes what CometBFT
//! orders, never what Tally checks.
//!
//! Two layouts, told apart by the first byte:
//! - [`BUNDLE_TAG`]: a u32 LE count, then per transaction a u32 LE length and its exact
//!   signed bytes ([`crate::SignedTransaction`] in borsh).
//! - [`BUNDLE_LZ4_TAG`]: the u32 LE count, the u32 LE length of the framing (the lengths and
//!   bytes above, without the count), then that framing as one LZ4 block. Transfers in a
//!   bundle share their contract, action, reference block and fee fields, and account names
//!   are mostly zero bytes: in a bundle of 1,000, `tally load`'s signed transfers take 88.8 bytes
//!   each instead of 165.4, of which 64 are the signature (issue 26's wire goal is 110).
//!   CometBFT hashes, gossips and stores every byte several times, so it does that much less.
//!
//! Both layouts decode to the same transactions, and a block's root commits to each
//! transaction's signed bytes, not to the layout: compression is transport only. Every
//! validator must still agree on which bytes decode. What decodes is what `lz4_flex` 0.14.2's
//! safe decoder accepts (it does not enforce the LZ4 spec's end-of-block rules), so the
//! decoder is pinned (Cargo.toml) and replacing it is a consensus change, made by every
//! validator at once, as is this layout itself: a node from before it refuses a compressed
//! bundle and would mark it malformed in a block the others execute. A compressed bundle must
//! decompress to exactly the length its header states, at most [`MAX_BUNDLE_RAW_BYTES`] and
//! [`MAX_COMPRESSION_RATIO`] times its block.

use sha2::{Digest, Sha256};

/// First byte of an uncompressed bundle.
pub const BUNDLE_TAG: u8 = 0x01;

/// First byte of a bundle whose framing is one LZ4 block.
pub const BUNDLE_LZ4_TAG: u8 = 0x02;

/// Most transactions in one bundle: a validity rule (a bundle over it is malformed on every
/// node), so a literal, not tied to the verifier's tuning. It matches the largest batch one
/// verification takes ([`crate::crypto::VERIFY_BATCH`], on all cores). 8,192 transfers take
/// about 1.35 MB uncompressed, above CometBFT's default mempool `max_tx_bytes` of 1 MiB, and
/// about 730 KB compressed.
pub const MAX_BUNDLE_TXS: usize = 8_192;

/// Largest bundle in bytes: CometBFT's default mempool `max_tx_bytes` (1 MiB), which devnet
/// keeps. A larger one could never be gossiped, so it is refused before anything is decoded.
pub const MAX_BUNDLE_BYTES: usize = 1 << 20;

/// Largest framing a compressed bundle may decompress to: 4 MiB, four times what an
/// uncompressed bundle may carry. LZ4 can expand a byte about 255 times, so without this a
/// 1 MiB bundle could make every validator allocate and write 255 MiB; with it, decompressing
/// costs at most 4 MiB of writes. [`split`] of the slowest hostile block built within these
/// limits (an 18-byte match at offset 1 every 3 bytes, 699 KB in, 4 MiB out) takes 9.8 ms,
/// against 0.63 ms for an honest bundle of 8,192 transfers (`cargo bench --bench
/// bundle_decode`, which tries 24 such blocks), whose verification takes about 115 ms of core
/// time. [`MAX_BUNDLE_TXS`] transfers of 165 bytes take 1.35 MB.
pub const MAX_BUNDLE_RAW_BYTES: usize = 4 << 20;

/// Most bytes a compressed bundle may decompress to per byte of its LZ4 block: what a
/// validator decodes (and, in a proposal, verifies) stays within 8 times what it received.
/// Bundles of `tally load`'s transfers are 1.9 (165.4 bytes a transfer uncompressed, 88.8
/// compressed); one that would compress further is sent uncompressed ([`join`]).
pub const MAX_COMPRESSION_RATIO: usize = 8;

/// Bytes before an uncompressed bundle's framing: the tag and the count.
const HEADER: usize = 5;

/// Bytes before a compressed bundle's LZ4 block: the tag, the count and the framing's length.
const LZ4_HEADER: usize = HEADER + 4;

/// Why bytes are not a bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Larger than [`MAX_BUNDLE_BYTES`].
    #[error("the bundle is {0} bytes; the limit is {MAX_BUNDLE_BYTES}")]
    TooLarge(usize),
    /// The first byte is neither [`BUNDLE_TAG`] nor [`BUNDLE_LZ4_TAG`].
    #[error(
        "not a Tally bundle: it must start with byte {BUNDLE_TAG:#04x} or {BUNDLE_LZ4_TAG:#04x}"
    )]
    BadTag,
    /// No transactions.
    #[error("the bundle holds no transactions")]
    Empty,
    /// More than [`MAX_BUNDLE_TXS`].
    #[error("the bundle holds {0} transactions; the limit is {MAX_BUNDLE_TXS}")]
    TooMany(usize),
    /// A compressed bundle states a framing longer than [`MAX_BUNDLE_RAW_BYTES`].
    #[error("the bundle decompresses to {0} bytes; the limit is {MAX_BUNDLE_RAW_BYTES}")]
    TooLargeDecompressed(usize),
    /// A compressed bundle states a framing more than [`MAX_COMPRESSION_RATIO`] times its
    /// LZ4 block.
    #[error(
        "the bundle states {raw} bytes decompressed from {compressed}: more than \
         {MAX_COMPRESSION_RATIO} times; send it uncompressed"
    )]
    TooCompressed {
        /// The stated decompressed length.
        raw: usize,
        /// The LZ4 block's length.
        compressed: usize,
    },
    /// The LZ4 block is not valid, or does not decompress to the length the header states.
    #[error("the bundle's compressed framing is corrupt")]
    Corrupt,
    /// The framing is cut short or has bytes after its end.
    #[error("malformed bundle framing: {0}")]
    Framing(&'static str),
}

/// Splits a bundle (either layout) into its transactions' bytes, not yet decoded as
/// transactions.
pub fn split(bytes: &[u8]) -> Result<Vec<Vec<u8>>, BundleError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(BundleError::TooLarge(bytes.len()));
    }
    let Some((&tag, mut rest)) = bytes.split_first() else {
        return Err(BundleError::BadTag);
    };
    if tag != BUNDLE_TAG && tag != BUNDLE_LZ4_TAG {
        return Err(BundleError::BadTag);
    }
    let count = take_u32(&mut rest).ok_or(BundleError::Framing("no count"))? as usize;
    if count == 0 {
        return Err(BundleError::Empty);
    }
    if count > MAX_BUNDLE_TXS {
        return Err(BundleError::TooMany(count));
    }
    if tag == BUNDLE_TAG {
        return split_framing(count, rest);
    }
    let raw_len =
        take_u32(&mut rest).ok_or(BundleError::Framing("no decompressed length"))? as usize;
    if raw_len > MAX_BUNDLE_RAW_BYTES {
        return Err(BundleError::TooLargeDecompressed(raw_len));
    }
    if raw_len > MAX_COMPRESSION_RATIO * rest.len() {
        return Err(BundleError::TooCompressed {
            raw: raw_len,
            compressed: rest.len(),
        });
    }
    let mut framing = vec![0; raw_len];
    match lz4_flex::block::decompress_into(rest, &mut framing) {
        Ok(n) if n == raw_len => split_framing(count, &framing),
        _ => Err(BundleError::Corrupt),
    }
}

/// The `count` length-prefixed transactions that `framing` must hold exactly.
fn split_framing(count: usize, mut rest: &[u8]) -> Result<Vec<Vec<u8>>, BundleError> {
    let mut txs = Vec::with_capacity(count);
    for _ in 0..count {
        let len =
            take_u32(&mut rest).ok_or(BundleError::Framing("a length is cut short"))? as usize;
        if rest.len() < len {
            return Err(BundleError::Framing("a transaction is cut short"));
        }
        let (tx, tail) = rest.split_at(len);
        txs.push(tx.to_vec());
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(BundleError::Framing("bytes after the last transaction"));
    }
    Ok(txs)
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (head, tail) = rest.split_first_chunk::<4>()?;
    *rest = tail;
    Some(u32::from_le_bytes(*head))
}

/// The transactions a bundle says it holds, from its header alone (0 if it has none): for
/// estimates before it is decoded, never for a validity rule.
pub fn stated_count(bytes: &[u8]) -> u32 {
    bytes
        .get(1..HEADER)
        .map_or(0, |c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

/// The bytes a bundle's transactions take decoded, as its header states them (at least its own
/// length): what a proposal counts against the chain's bandwidth dimension, which charges each
/// transaction's signed bytes, before the bundle is decoded.
pub fn stated_raw_len(bytes: &[u8]) -> u64 {
    let raw = match bytes.first() {
        Some(&BUNDLE_LZ4_TAG) => bytes
            .get(HEADER..LZ4_HEADER)
            .map_or(0, |l| u32::from_le_bytes(l.try_into().expect("4 bytes"))),
        _ => 0,
    };
    (bytes.len() as u64).max(u64::from(raw))
}

/// Builds a bundle from transactions' signed bytes: compressed when that is smaller (a
/// bundle of one small transaction is not).
pub fn join<'a>(txs: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let out = join_uncompressed(txs);
    let framing = &out[HEADER..];
    if framing.len() > MAX_BUNDLE_RAW_BYTES {
        return out;
    }
    let block = lz4_flex::block::compress(framing);
    if LZ4_HEADER + block.len() >= out.len() || framing.len() > MAX_COMPRESSION_RATIO * block.len()
    {
        return out;
    }
    let mut compressed = Vec::with_capacity(LZ4_HEADER + block.len());
    compressed.push(BUNDLE_LZ4_TAG);
    compressed.extend_from_slice(&out[1..HEADER]);
    compressed.extend_from_slice(&(framing.len() as u32).to_le_bytes());
    compressed.extend_from_slice(&block);
    compressed
}

/// Builds an uncompressed bundle ([`BUNDLE_TAG`]) from transactions' signed bytes.
pub fn join_uncompressed<'a>(txs: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![0; HEADER];
    out[0] = BUNDLE_TAG;
    let mut count = 0u32;
    for tx in txs {
        out.extend_from_slice(&(tx.len() as u32).to_le_bytes());
        out.extend_from_slice(tx);
        count += 1;
    }
    out[1..HEADER].copy_from_slice(&count.to_le_bytes());
    out
}

/// The CometBFT hash of a transaction: sha256 of its bytes (what `/tx?hash=` and the mempool
/// cache use).
pub fn hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transfer-like transactions: a shared 40-byte prefix, an 8-byte account and 64 bytes of
    /// noise standing in for a signature.
    fn transfers(n: usize) -> Vec<Vec<u8>> {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        (0..n)
            .map(|_| {
                let mut tx = b"simplecoin-transfer-expiration-tapos-fee".to_vec();
                tx.extend_from_slice(&(next() % 10_000).to_le_bytes());
                for _ in 0..8 {
                    tx.extend_from_slice(&next().to_le_bytes());
                }
                tx
            })
            .collect()
    }

    fn slices(txs: &[Vec<u8>]) -> impl Iterator<Item = &[u8]> {
        txs.iter().map(Vec::as_slice)
    }

    #[test]
    fn split_returns_what_join_bundled() {
        let txs: [&[u8]; 3] = [b"a", b"", b"xyz"];
        let bundle = join(txs);
        assert_eq!(bundle[0], BUNDLE_TAG, "too small to gain from compression");
        assert_eq!(split(&bundle).unwrap(), txs);
    }

    #[test]
    fn many_alike_transactions_travel_compressed_and_come_back_exactly() {
        let txs = transfers(1_000);
        let bundle = join(slices(&txs));
        assert_eq!(bundle[0], BUNDLE_LZ4_TAG);
        let raw: usize = txs.iter().map(|t| 4 + t.len()).sum::<usize>() + 5;
        assert!(bundle.len() < raw * 9 / 10, "{} of {raw}", bundle.len());
        assert_eq!(stated_count(&bundle), 1_000);
        assert_eq!(stated_raw_len(&bundle), (raw - 5) as u64);
        assert_eq!(split(&bundle).unwrap(), txs);
    }

    #[test]
    fn bundles_that_would_compress_more_than_the_ratio_travel_uncompressed() {
        let same = vec![7u8; 2_000];
        let txs: Vec<&[u8]> = vec![&same; 100];
        let bundle = join(txs.iter().copied());
        assert_eq!(bundle[0], BUNDLE_TAG);
        assert_eq!(split(&bundle).unwrap(), txs);
    }

    #[test]
    fn split_refuses_bad_framing() {
        let good = join([b"abc".as_slice()]);
        assert_eq!(split(&[]), Err(BundleError::BadTag));
        assert_eq!(split(&[0x03, 1, 0, 0, 0]), Err(BundleError::BadTag));
        assert_eq!(split(&join([])), Err(BundleError::Empty));
        assert!(matches!(
            split(&good[..good.len() - 1]),
            Err(BundleError::Framing(_))
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(split(&trailing), Err(BundleError::Framing(_))));
        let mut many = vec![BUNDLE_TAG];
        many.extend_from_slice(&(MAX_BUNDLE_TXS as u32 + 1).to_le_bytes());
        assert_eq!(split(&many), Err(BundleError::TooMany(MAX_BUNDLE_TXS + 1)));
        assert_eq!(
            split(&vec![BUNDLE_TAG; MAX_BUNDLE_BYTES + 1]),
            Err(BundleError::TooLarge(MAX_BUNDLE_BYTES + 1))
        );
    }

    /// A compressed bundle with `count` and a stated framing length in front of `block`.
    fn compressed(count: u32, raw_len: u32, block: &[u8]) -> Vec<u8> {
        let mut b = vec![BUNDLE_LZ4_TAG];
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&raw_len.to_le_bytes());
        b.extend_from_slice(block);
        b
    }

    #[test]
    fn a_compressed_bundle_must_decompress_to_exactly_its_stated_length_within_the_limit() {
        let txs = transfers(100);
        let bundle = join(slices(&txs));
        let raw_len = u32::from_le_bytes(bundle[5..9].try_into().unwrap());
        let block = &bundle[LZ4_HEADER..];
        assert_eq!(split(&compressed(100, raw_len, block)).unwrap(), txs);
        for wrong in [raw_len - 1, raw_len + 1, 0] {
            assert_eq!(
                split(&compressed(100, wrong, block)),
                Err(BundleError::Corrupt),
                "{wrong}"
            );
        }
        // A bomb: about 1 MiB of zeros compresses to a few KiB; a header that states more
        // than the limit is refused before anything is allocated.
        let zeros = lz4_flex::block::compress(&vec![0; MAX_BUNDLE_RAW_BYTES + 1]);
        assert!(zeros.len() < MAX_BUNDLE_BYTES);
        let stated = MAX_BUNDLE_RAW_BYTES as u32 + 1;
        assert_eq!(
            split(&compressed(1, stated, &zeros)),
            Err(BundleError::TooLargeDecompressed(stated as usize))
        );
        assert_eq!(
            split(&compressed(1, 16, &[])),
            Err(BundleError::TooCompressed {
                raw: 16,
                compressed: 0
            }),
            "no block"
        );
        assert_eq!(split(&compressed(1, 8, &[0])), Err(BundleError::Corrupt));
        // Within the limit but more than 8 to 1: what a validator decodes stays within 8
        // times what it received.
        let ones = lz4_flex::block::compress(&[1; 4_096]);
        assert_eq!(
            split(&compressed(1, 4_096, &ones)),
            Err(BundleError::TooCompressed {
                raw: 4_096,
                compressed: ones.len()
            })
        );
        assert!(matches!(
            split(&[BUNDLE_LZ4_TAG, 1, 0, 0, 0, 9]),
            Err(BundleError::Framing(_))
        ));
        // The framing inside is checked as an uncompressed one is.
        let short = lz4_flex::block::compress(&[5, 0, 0, 0, 1, 2]);
        assert!(matches!(
            split(&compressed(1, 6, &short)),
            Err(BundleError::Framing(_))
        ));
    }

    /// Hostile compressed bytes: random blocks, and valid bundles with bytes flipped, cut or
    /// grown, never panic; whatever splits re-joins to transactions that split the same way.
    #[test]
    fn corrupt_compressed_bundles_are_refused_without_panicking() {
        let txs = transfers(50);
        let good = join(slices(&txs));
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize
        };
        let mut decoded = 0;
        for round in 0..20_000 {
            let mut b = good.clone();
            match round % 4 {
                0 => {
                    let at = LZ4_HEADER + next() % (b.len() - LZ4_HEADER);
                    b[at] ^= 1 << (next() % 8);
                }
                1 => b.truncate(LZ4_HEADER + next() % (b.len() - LZ4_HEADER)),
                2 => b.extend((0..1 + next() % 8).map(|_| next() as u8)),
                _ => {
                    let len = next() % 300;
                    b.truncate(LZ4_HEADER);
                    b.extend((0..len).map(|_| next() as u8));
                    let raw = (next() % 4_096) as u32;
                    b[5..9].copy_from_slice(&raw.to_le_bytes());
                }
            }
            if let Ok(parts) = split(&b) {
                decoded += 1;
                assert_eq!(split(&join(slices(&parts))).unwrap(), parts);
            }
        }
        assert!(decoded < 20_000, "corruption went unnoticed every time");
    }
}
