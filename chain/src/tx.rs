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
