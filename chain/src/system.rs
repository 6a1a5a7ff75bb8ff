//! The native system contract at account `tally`: creating accounts and deploying code.

use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::{Abort, AbortCode, Name};

/// The system account. Its key is set at genesis.
pub const SYSTEM: Name = match Name::from_str_const("tally") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// `newaccount`: `creator` (who must authorize) creates `name` with public key `key`.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct NewAccount {
    /// The creating account; it must authorize the action.
    pub creator: Name,
    /// The new account's name.
    pub name: Name,
    /// Its ed25519 public key.
    pub key: [u8; 32],
}

/// `setcode`: deploys `code` (WebAssembly) to `account`, which must authorize it; the
/// contract's `onInit` runs in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SetCode {
    /// The account receiving the contract.
    pub account: Name,
    /// The module.
    pub code: Vec<u8>,
}

/// The `newaccount` action name.
pub const NEWACCOUNT: Name = match Name::from_str_const("newaccount") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// The `setcode` action name.
pub const SETCODE: Name = match Name::from_str_const("setcode") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// The system's own failures, as receipts.
pub(crate) fn invalid(message: impl Into<String>) -> Abort {
    Abort::new(AbortCode::InvalidAction, message)
}
