//! The CometBFT transaction format: a bundle of individually signed Tally transactions.
//!
//! CometBFT's mempool, gossip and block building cost about the same per CometBFT transaction
//! whatever its size, so a client may bundle many signed transfers into one (the precedent is
//! Vryx's chunks and Celestia's blobs). Every Tally transaction inside keeps its own
//! signatures, and every validator verifies each of them: bundling changes what CometBFT
//! orders, never what Tally checks.
//!
//! Layout: the byte [`BUNDLE_TAG`], then borsh of `Vec<Vec<u8>>`: a u32 LE count and, per
//! transaction, a u32 LE length and its exact signed bytes ([`tally_chain::SignedTransaction`]
//! in borsh).

use sha2::{Digest, Sha256};

/// First byte of a bundle: lets a later format coexist with this one.
pub const BUNDLE_TAG: u8 = 0x01;

/// Most transactions in one bundle. A bundle's signatures are verified in one batched call
/// (`VERIFY_BATCH` = 256 per batch on all cores); 8,192 of about 170 bytes is 1.4 MB, above
/// CometBFT's default mempool `max_tx_bytes` of 1 MiB, so the byte limit binds first for
/// transfers and this only bounds the per-transaction bookkeeping of tiny ones.
pub const MAX_BUNDLE_TXS: usize = 8_192;

/// Largest bundle in bytes: CometBFT's default mempool `max_tx_bytes` (1 MiB), which devnet
/// keeps. A larger one could never be gossiped, so it is refused before anything is decoded.
pub const MAX_BUNDLE_BYTES: usize = 1 << 20;

/// Why bytes are not a bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Larger than [`MAX_BUNDLE_BYTES`].
    #[error("the bundle is {0} bytes; the limit is {MAX_BUNDLE_BYTES}")]
    TooLarge(usize),
    /// The first byte is not [`BUNDLE_TAG`].
    #[error("not a Tally bundle: it must start with byte {BUNDLE_TAG:#04x}")]
    BadTag,
    /// No transactions.
    #[error("the bundle holds no transactions")]
    Empty,
    /// More than [`MAX_BUNDLE_TXS`].
    #[error("the bundle holds {0} transactions; the limit is {MAX_BUNDLE_TXS}")]
    TooMany(usize),
    /// The framing is cut short or has bytes after its end.
    #[error("malformed bundle framing: {0}")]
    Framing(&'static str),
}

/// Splits a bundle into its transactions' bytes (not yet decoded as transactions).
pub fn split(bytes: &[u8]) -> Result<Vec<&[u8]>, BundleError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(BundleError::TooLarge(bytes.len()));
    }
    let Some((&tag, mut rest)) = bytes.split_first() else {
        return Err(BundleError::BadTag);
    };
    if tag != BUNDLE_TAG {
        return Err(BundleError::BadTag);
    }
    let count = take_u32(&mut rest).ok_or(BundleError::Framing("no count"))? as usize;
    if count == 0 {
        return Err(BundleError::Empty);
    }
    if count > MAX_BUNDLE_TXS {
        return Err(BundleError::TooMany(count));
    }
    let mut txs = Vec::with_capacity(count);
    for _ in 0..count {
        let len =
            take_u32(&mut rest).ok_or(BundleError::Framing("a length is cut short"))? as usize;
        if rest.len() < len {
            return Err(BundleError::Framing("a transaction is cut short"));
        }
        let (tx, tail) = rest.split_at(len);
        txs.push(tx);
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

/// Builds a bundle from transactions' signed bytes.
pub fn join<'a>(txs: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![BUNDLE_TAG, 0, 0, 0, 0];
    let mut count = 0u32;
    for tx in txs {
        out.extend_from_slice(&(tx.len() as u32).to_le_bytes());
        out.extend_from_slice(tx);
        count += 1;
    }
    out[1..5].copy_from_slice(&count.to_le_bytes());
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

    #[test]
    fn split_returns_what_join_bundled() {
        let txs: [&[u8]; 3] = [b"a", b"", b"xyz"];
        let bundle = join(txs);
        assert_eq!(split(&bundle).unwrap(), txs);
    }

    #[test]
    fn split_refuses_bad_framing() {
        let good = join([b"abc".as_slice()]);
        assert_eq!(split(&[]), Err(BundleError::BadTag));
        assert_eq!(split(&[0x02, 1, 0, 0, 0]), Err(BundleError::BadTag));
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
}
