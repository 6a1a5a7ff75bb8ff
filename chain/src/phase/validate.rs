//! Validate: the checks that need no state but the replay window (admission limits,
//! expiration, TaPoS, duplicates). A transaction that fails one is rejected, not included.

use crate::chain::Chain;
use crate::error::TxError;
use crate::pipeline::{Check, PreparedTx};

impl Chain {
    /// Checks `tx` for a block at `time_ms` (`in_window`: the batched answer for its id, if
    /// looked up).
    pub(crate) fn validate(
        &self,
        time_ms: u64,
        tx: &PreparedTx,
        in_window: Option<bool>,
    ) -> Result<(), TxError> {
        if let Check::Refused(e) = &tx.check {
            return Err(e.clone());
        }
        let t = &tx.tx.transaction;
        self.check_timing(
            time_ms,
            t.expiration_ms,
            (t.ref_block_num, t.ref_block_prefix),
        )?;
        let in_window = in_window.unwrap_or_else(|| self.window.contains(&tx.id));
        if in_window || self.block_ids.contains(&tx.id) {
            return Err(TxError::Duplicate(hex::encode(tx.id)));
        }
        Ok(())
    }

    /// Whether the next block, at `time_ms`, can take a transaction expiring at
    /// `expiration_ms` and naming reference block `(num, prefix)`: it has not expired, does
    /// not expire further ahead than a transaction may live, and names a committed block of
    /// the TaPoS window. The rules of [`Chain::validate`] that need only the committed window
    /// and the block's time: a node holds a proposal to them before verifying any of its
    /// signatures, and leaves out of its own proposals what they reject.
    pub fn check_timing(
        &self,
        time_ms: u64,
        expiration_ms: u64,
        (num, prefix): (u16, u32),
    ) -> Result<(), TxError> {
        check_expiration(expiration_ms, time_ms, self.config.max_tx_lifetime_ms)?;
        if !self.window.knows(num, prefix) {
            return Err(TxError::UnknownReferenceBlock { num, prefix });
        }
        Ok(())
    }
}

/// The expiration rule for a block at `time_ms`: a transaction expiring at `expiration_ms`
/// has not expired, and does not expire more than `max_lifetime_ms` after the block. The
/// chain's ([`Chain::check_timing`]), and a node's admission's against its last block.
pub fn check_expiration(
    expiration_ms: u64,
    time_ms: u64,
    max_lifetime_ms: u64,
) -> Result<(), TxError> {
    if expiration_ms <= time_ms {
        return Err(TxError::Expired {
            expiration_ms,
            block_time_ms: time_ms,
        });
    }
    if expiration_ms - time_ms > max_lifetime_ms {
        return Err(TxError::ExpirationTooFar {
            expiration_ms,
            block_time_ms: time_ms,
            max_lifetime_ms,
        });
    }
    Ok(())
}
