//! Authorize: exactly the authorizing accounts signed, each with its registered key, and every
//! signature verifies.

use crate::chain::Chain;
use crate::error::{ChainError, TxError};
use crate::pipeline::{Check, PreparedTx};
use crate::state::keys;

impl Chain {
    /// Checks `tx`'s signers against their registered keys, and its signatures now if the
    /// stateless stage did not batch them. The outer `Err` is a node fault; the inner one a
    /// rejection.
    pub(crate) fn authorize(&mut self, tx: &PreparedTx) -> Result<Result<(), TxError>, ChainError> {
        if !self.config.check_signatures {
            return Ok(Ok(()));
        }
        // The signer set is checked here whatever `check` says: it is cheap, and a caller that
        // verified signatures on its own and marked the transaction `Verified` may not have
        // checked who had to sign.
        let stateless = match tx.check {
            Check::Admitted => crate::crypto::verify_signatures(&tx.tx, &tx.id),
            _ => crate::crypto::check_signers(&tx.tx),
        };
        if let Err(e) = stateless {
            return Ok(Err(e));
        }
        // Exactly the required signers signed, once each: what is left is their keys.
        for sig in &tx.tx.signatures {
            let account = sig.account;
            // Through the journal: an account created earlier in this block can sign.
            match self
                .journal
                .get(self.store.as_ref(), &keys::account(account))?
            {
                None => return Ok(Err(TxError::UnknownAccount(account))),
                Some(key) if key != sig.public_key => {
                    return Ok(Err(TxError::WrongKey(account)));
                }
                Some(_) => {}
            }
        }
        Ok(Ok(()))
    }
}
