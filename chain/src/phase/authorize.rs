//! Authorize: exactly the authorizing accounts signed, and every signature verifies under the
//! key registered for its account when the transaction executes.

use crate::chain::Chain;
use crate::crypto::{self, NoKeys};
use crate::error::{ChainError, TxError};
use crate::pipeline::{Check, PreparedTx};
use crate::state::keys;

impl Chain {
    /// Checks `tx`'s signers against their registered keys as this block sees them, and
    /// verifies now, in order, every signature the stateless stage did not verify under that
    /// key: all of them if it did not batch them; one without its key whose account was
    /// created or re-keyed earlier in the block, or that was verified against an older
    /// commit, or not at all. The rule is one whatever was verified ahead: every signature
    /// verifies under the key registered for its account when the transaction executes (a key
    /// it carries must be that key). The outer `Err` is a node fault; the inner one a
    /// rejection.
    pub(crate) fn authorize(&mut self, tx: &PreparedTx) -> Result<Result<(), TxError>, ChainError> {
        if !self.config.check_signatures {
            return Ok(Ok(()));
        }
        // The signer set is checked here whatever `check` says: it is cheap, and a caller that
        // verified signatures on its own and marked the transaction `Verified` may not have
        // checked who had to sign. A signature that carries its key is verified under it
        // without state, as the batched stage does, so both give the same error.
        let unbatched;
        let verified: &[Option<[u8; 32]>] = match tx.check {
            Check::Admitted => match crypto::verify_signatures(&tx.tx, &tx.id, &NoKeys) {
                Ok(keys) => {
                    unbatched = keys;
                    &unbatched
                }
                Err(e) => return Ok(Err(e)),
            },
            _ => match crypto::check_signers(&tx.tx) {
                Ok(()) => &tx.keys,
                Err(e) => return Ok(Err(e)),
            },
        };
        // Exactly the required signers signed, once each: what is left is their keys.
        for (i, sig) in tx.tx.signatures.iter().enumerate() {
            let account = sig.account;
            // Through the journal: an account created or re-keyed earlier in this block signs
            // with its new key.
            let registered: Option<[u8; 32]> = match self
                .journal
                .get(self.store.as_ref(), &keys::account(account))?
            {
                None => None,
                Some(key) => match key.try_into() {
                    Ok(key) => Some(key),
                    Err(_) => {
                        return Err(ChainError::Corrupt(format!(
                            "the registered key of {account} is {} bytes, not 32",
                            key.len()
                        )));
                    }
                },
            };
            let registered = match crypto::required_key(sig, registered) {
                Ok(key) => key,
                Err(e) => return Ok(Err(e)),
            };
            // One that carries its key was verified under it, without state; one without,
            // verified ahead under this very key, is done.
            if sig.public_key.is_some() || verified.get(i) == Some(&Some(registered)) {
                continue;
            }
            if !crypto::verify_one(&registered, &sig.signature, &tx.id) {
                return Ok(Err(TxError::BadSignature(account)));
            }
        }
        Ok(Ok(()))
    }
}
