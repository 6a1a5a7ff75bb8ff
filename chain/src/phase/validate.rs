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
        if t.expiration_ms <= time_ms {
            return Err(TxError::Expired {
                expiration_ms: t.expiration_ms,
                block_time_ms: time_ms,
            });
        }
        if t.expiration_ms - time_ms > self.config.max_tx_lifetime_ms {
            return Err(TxError::ExpirationTooFar {
                expiration_ms: t.expiration_ms,
                block_time_ms: time_ms,
                max_lifetime_ms: self.config.max_tx_lifetime_ms,
            });
        }
        if !self.window.knows(t.ref_block_num, t.ref_block_prefix) {
            return Err(TxError::UnknownReferenceBlock {
                num: t.ref_block_num,
                prefix: t.ref_block_prefix,
            });
        }
        let in_window = in_window.unwrap_or_else(|| self.window.contains(&tx.id));
        if in_window || self.block_ids.contains(&tx.id) {
            return Err(TxError::Duplicate(hex::encode(tx.id)));
        }
        Ok(())
    }
}
