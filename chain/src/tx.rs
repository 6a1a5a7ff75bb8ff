//! Transactions: what a client sends, encoded deterministically with borsh.

use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::Name;
use tally_host_api::limits::{
    MAX_ACTIONS_PER_TX, MAX_MESSAGE_LEN, MAX_SIGNATURES_PER_TX, MAX_TX_BYTES,
};

use crate::error::TxError;

/// One call of a contract.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Action {
    /// The account whose contract runs the action.
    pub account: Name,
    /// The action's name, e.g. `transfer`.
    pub name: Name,
    /// Accounts that authorize this action; the contract checks them with `require_auth`.
    pub authorization: Vec<Name>,
    /// The action's data, as the contract's ABI encodes it.
    pub data: Vec<u8>,
}

/// A transaction: actions that apply atomically, valid until `expiration`, and bound to a
/// recent block (TaPoS) so it cannot be replayed on another fork or chain.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Transaction {
    /// Last moment (milliseconds since the Unix epoch, in block time) it may be included.
    pub expiration_ms: u64,
    /// The low 16 bits of the height of a recent block.
    pub ref_block_num: u16,
    /// Bytes 8..12 of that block's id, little-endian: proves the sender saw that block.
    pub ref_block_prefix: u32,
    /// The actions, run in order.
    pub actions: Vec<Action>,
    /// The account that pays the transaction's fee, from its native balance. It must sign
    /// (its signature comes first), whether or not it authorizes an action: a transaction
    /// nobody signs is refused at decode.
    pub payer: Name,
    /// The most the payer will pay, in coin units: the fee at the block's prices plus the
    /// tip, cut to this. Its fuel, reads and writes are bounded by what it buys; a transaction
    /// whose fee at the block's prices still exceeds it fails (and pays for what it used, up
    /// to this); one whose payer's balance is below it is not included.
    pub max_fee: u64,
    /// What the payer offers the block's proposer on top of the fee, in coin units.
    pub tip: u64,
}

/// A max fee that covers any ordinary transaction at a public network's starting prices
/// (a token transfer costs ~1,300 coin units at [`crate::fee::FeeSchedule::STANDARD`]'s
/// starting prices; the largest `setcode` about 1.1 M for its bytes and 1.1 M for its fuel),
/// with room for prices 4x higher: what `tally push` and the SDKs offer unless told.
pub const DEFAULT_MAX_FEE: u64 = 10_000_000;

/// A transaction id: the BLAKE3 hash of the unsigned transaction's borsh encoding. Signatures sign it,
/// and duplicates are detected by it; blocks commit to the signed bytes as well.
pub type TxId = [u8; 32];

impl Transaction {
    /// A transaction of `actions` valid until `expiration_ms`, bound to the block `tapos`
    /// names, paid for by the first account that authorizes an action (`payer` otherwise
    /// unset: the system account) with [`DEFAULT_MAX_FEE`] and no tip.
    pub fn new(expiration_ms: u64, tapos: (u16, u32), actions: Vec<Action>) -> Self {
        let payer = actions
            .iter()
            .flat_map(|a| a.authorization.first())
            .copied()
            .next()
            .unwrap_or(crate::system::SYSTEM);
        Self {
            expiration_ms,
            ref_block_num: tapos.0,
            ref_block_prefix: tapos.1,
            actions,
            payer,
            max_fee: DEFAULT_MAX_FEE,
            tip: 0,
        }
    }

    /// The accounts that must sign it, in the order their signatures go: the payer, then
    /// each authorizing account where it first authorizes an action (repeats included).
    pub fn signers(&self) -> impl Iterator<Item = Name> + Clone + '_ {
        std::iter::once(self.payer).chain(
            self.actions
                .iter()
                .flat_map(|a| a.authorization.iter().copied()),
        )
    }

    /// Its deterministic encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }

    /// Its id.
    pub fn id(&self) -> TxId {
        blake3::hash(&self.encode()).into()
    }
}

/// The borsh data of simplecoin's (and token-rs's) `transfer` action.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Transfer {
    /// Sender.
    pub from: Name,
    /// Recipient.
    pub to: Name,
    /// Amount of coins.
    pub amount: u64,
    /// Free text.
    pub memo: String,
}

impl Transfer {
    /// Its borsh encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }
}

/// One account's signature on a transaction. The public key travels with the signature, so
/// signatures can be checked in parallel before execution without reading state; execution
/// then only compares the key with the account's registered one.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct TxSignature {
    /// The signing account.
    pub account: Name,
    /// The ed25519 public key that signed.
    pub public_key: [u8; 32],
    /// The ed25519 signature of the transaction id.
    pub signature: [u8; 64],
}

/// A transaction with the signatures of every account that authorizes one of its actions.
///
/// Its borsh encoding is the transaction's encoding followed by the signatures, so the
/// unsigned id can be hashed from a prefix of the signed bytes.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SignedTransaction {
    /// What is signed.
    pub transaction: Transaction,
    /// One signature per authorizing account.
    pub signatures: Vec<TxSignature>,
}

/// Bytes one [`TxSignature`] takes in the encoding: account, public key, signature.
pub(crate) const SIGNATURE_BYTES: usize = 8 + 32 + 64;

impl SignedTransaction {
    /// Signs `transaction` with one key per authorizing account. The signatures are put in
    /// the canonical order ([`SignedTransaction::check_limits`]) whatever the order of
    /// `signers`.
    pub fn sign(transaction: Transaction, signers: &[(Name, &ed25519_dalek::SigningKey)]) -> Self {
        use ed25519_dalek::Signer;
        let id = transaction.id();
        let mut signers = signers.to_vec();
        signers.sort_by_key(|(account, _)| first_authorization(&transaction, *account));
        let signatures = signers
            .iter()
            .map(|(account, key)| TxSignature {
                account: *account,
                public_key: key.verifying_key().to_bytes(),
                signature: key.sign(&id).to_bytes(),
            })
            .collect();
        Self {
            transaction,
            signatures,
        }
    }

    /// A transaction with no signatures, for chains that do not check them (benchmarks of
    /// execution alone).
    pub fn unsigned(transaction: Transaction) -> Self {
        Self {
            transaction,
            signatures: Vec::new(),
        }
    }

    /// Its deterministic encoding: what a block stores and commits to.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }

    /// Decodes a transaction received from outside (a client, a peer, a block) and admits it:
    /// its size is checked before anything is decoded, trailing bytes are refused, then
    /// every structural limit of [`SignedTransaction::check_limits`] applies, and its payer
    /// must have signed it. Nothing that fails here can be included in a block.
    pub fn decode(bytes: &[u8]) -> Result<Self, TxError> {
        if bytes.len() > MAX_TX_BYTES {
            return Err(TxError::TooLarge {
                bytes: bytes.len(),
                limit: MAX_TX_BYTES,
            });
        }
        let tx: Self = borsh::from_slice(bytes).map_err(|e| TxError::Malformed(e.to_string()))?;
        tx.check_limits(bytes.len())?;
        // Checked here, not in `check_limits`: a chain that does not check signatures (a
        // benchmark of execution alone) builds unsigned transactions in process, but nothing
        // from outside is ever unsigned.
        if tx.signatures.first().map(|s| s.account) != Some(tx.transaction.payer) {
            return Err(TxError::MissingSignature(tx.transaction.payer));
        }
        Ok(tx)
    }

    /// The admission limits on a transaction whose encoding is `encoded_len` bytes: its size,
    /// its number of actions, each action's authorizations and data, and its signatures, which
    /// must be in the canonical order: the payer's first, then by where their account first
    /// authorizes an action, each account once. A transaction then has exactly one valid encoding: reordering the
    /// signatures of a valid one would otherwise give other signed bytes, and another block
    /// root, for the same transaction id.
    pub fn check_limits(&self, encoded_len: usize) -> Result<(), TxError> {
        if encoded_len > MAX_TX_BYTES {
            return Err(TxError::TooLarge {
                bytes: encoded_len,
                limit: MAX_TX_BYTES,
            });
        }
        let actions = &self.transaction.actions;
        if actions.is_empty() {
            return Err(TxError::NoActions);
        }
        if actions.len() > MAX_ACTIONS_PER_TX {
            return Err(TxError::TooMany {
                what: "actions",
                count: actions.len(),
                limit: MAX_ACTIONS_PER_TX,
            });
        }
        if self.transaction.tip > self.transaction.max_fee {
            return Err(TxError::TipAboveMaxFee {
                tip: self.transaction.tip,
                max_fee: self.transaction.max_fee,
            });
        }
        if self.signatures.len() > MAX_SIGNATURES_PER_TX {
            return Err(TxError::TooMany {
                what: "signatures",
                count: self.signatures.len(),
                limit: MAX_SIGNATURES_PER_TX,
            });
        }
        for (index, action) in actions.iter().enumerate() {
            if action.authorization.len() > MAX_SIGNATURES_PER_TX {
                return Err(TxError::TooMany {
                    what: "authorizations of an action",
                    count: action.authorization.len(),
                    limit: MAX_SIGNATURES_PER_TX,
                });
            }
            // Code travels in `setcode`'s data; everything else is a contract's message.
            let limit = if action.account == crate::system::SYSTEM {
                MAX_TX_BYTES
            } else {
                MAX_MESSAGE_LEN as usize
            };
            if action.data.len() > limit {
                return Err(TxError::ActionDataTooLarge {
                    index,
                    bytes: action.data.len(),
                    limit,
                });
            }
        }
        let mut previous = None;
        for sig in &self.signatures {
            // A signature from an account that authorizes nothing has no place in the order.
            let Some(at) = first_authorization(&self.transaction, sig.account) else {
                return Err(TxError::UnneededSignature(sig.account));
            };
            if previous.is_some_and(|p| at <= p) {
                return Err(TxError::SignatureOrder(sig.account));
            }
            previous = Some(at);
        }
        Ok(())
    }

    /// The transaction id computed from this transaction's own signed encoding, whose prefix
    /// is the unsigned encoding: one encoding gives both the block bytes and the id.
    pub(crate) fn id_from_encoding(&self, encoded: &[u8]) -> TxId {
        let unsigned = encoded.len() - 4 - self.signatures.len() * SIGNATURE_BYTES;
        blake3::hash(&encoded[..unsigned]).into()
    }
}

/// Where `account` first comes among `tx`'s [signers](Transaction::signers): 0 for the
/// payer; `None` if it need not sign. Admission bounds the search to `MAX_ACTIONS_PER_TX` x
/// `MAX_SIGNATURES_PER_TX` names.
fn first_authorization(tx: &Transaction, account: Name) -> Option<usize> {
    tx.signers().position(|a| a == account)
}

/// What a block holds besides its header: the exact signed bytes of each included
/// transaction, and whether it succeeded. The header's transactions root commits to both.
#[derive(Debug, Clone, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct BlockBody {
    /// The included transactions, in order.
    pub transactions: Vec<SignedTransaction>,
    /// Whether each one succeeded (a failed one changed nothing).
    pub success: Vec<bool>,
    /// The events each one emitted, in order (none for a failed one): the block commits to
    /// them, so an indexer can trust them.
    pub events: Vec<Vec<crate::receipt::Event>>,
}

impl BlockBody {
    /// The transactions root of a body's encoding: its BLAKE3 hash. The encoding holds each
    /// transaction's exact signed bytes and its outcome (success and events), so the root commits to the signatures
    /// too, and a stored block whose signatures were swapped or altered no longer matches its
    /// header.
    pub fn transactions_root(encoded_body: &[u8]) -> [u8; 32] {
        blake3::hash(encoded_body).into()
    }

    /// The root of this body (encoding it again).
    pub fn root(&self) -> [u8; 32] {
        Self::transactions_root(&borsh::to_vec(self).expect("encoding into a Vec cannot fail"))
    }
}
