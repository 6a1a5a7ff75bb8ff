//! Transactions: what a client sends, encoded deterministically with borsh.

use borsh::{BorshDeserialize, BorshSerialize};
use sha2::{Digest, Sha256};
use tally_host_api::Name;

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
}

/// A transaction id: sha256 of its borsh encoding.
pub type TxId = [u8; 32];

impl Transaction {
    /// Its deterministic encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }

    /// Its id.
    pub fn id(&self) -> TxId {
        Sha256::digest(self.encode()).into()
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
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SignedTransaction {
    /// What is signed.
    pub transaction: Transaction,
    /// One signature per authorizing account.
    pub signatures: Vec<TxSignature>,
}

impl SignedTransaction {
    /// Signs `transaction` with one key per authorizing account.
    pub fn sign(transaction: Transaction, signers: &[(Name, &ed25519_dalek::SigningKey)]) -> Self {
        use ed25519_dalek::Signer;
        let id = transaction.id();
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

    /// Its deterministic encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).expect("encoding into a Vec cannot fail")
    }

    /// Decodes a signed transaction, rejecting trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, std::io::Error> {
        borsh::from_slice(bytes)
    }
}

/// What a block holds besides its header.
#[derive(Debug, Clone, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct BlockBody {
    /// A setup block carries privileged writes (genesis allocations, direct deploys) instead of
    /// transactions; replay applies its recorded changes rather than re-executing anything.
    pub setup: bool,
    /// The included transactions, in order.
    pub transactions: Vec<SignedTransaction>,
    /// Whether each one succeeded (a failed one changed nothing).
    pub success: Vec<bool>,
}

impl BlockBody {
    /// The transactions root of a body: sha256 over each id and outcome, in order.
    pub fn transactions_root(ids: impl Iterator<Item = (TxId, bool)>) -> [u8; 32] {
        let mut root = Sha256::new();
        for (id, success) in ids {
            root.update(id);
            root.update([success as u8]);
        }
        root.finalize().into()
    }
}
