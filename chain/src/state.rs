//! How Tally lays its state out in keys. (The stores themselves are in [`crate::store`].)

use tally_host_api::Name;

/// Key prefixes of Tally's state. Contract storage is namespaced by account, so one contract's
/// keys can never collide with another's or with the chain's own records.
pub mod keys {
    use super::Name;

    /// `[ACCOUNT, account]` → the account's ed25519 public key (32 bytes).
    pub const ACCOUNT: u8 = 0x00;
    /// `[CODE_HASH, account]` → sha256 of the account's contract code.
    pub const CODE_HASH: u8 = 0x01;
    /// `[CODE, hash]` → the WebAssembly code with that hash.
    pub const CODE: u8 = 0x02;
    /// `[TAPOS, slot (u16, big-endian)]` → height (u64) and id prefix (u32), little-endian,
    /// of the latest block whose height is `slot` modulo the TaPoS window
    /// ([`crate::window`]).
    pub const TAPOS: u8 = 0x03;
    /// `[RECENT_IDS, height (u64, big-endian)]` → the block's time (u64, little-endian) and
    /// the ids of the transactions it included, until all of them have expired
    /// ([`crate::window`]).
    pub const RECENT_IDS: u8 = 0x04;
    /// `[BALANCE, account]` → the account's native coins (u64, little-endian), which pay its
    /// transactions' fees. No key: none.
    pub const BALANCE: u8 = 0x05;
    /// `[FEES]` → the chain's [`crate::fee::FeeState`] (borsh): the next block's prices, the
    /// last block's usage, the coins burned so far. No key: the schedule's starting prices.
    pub const FEES: u8 = 0x06;
    /// `[FEE_SCHEDULE]` → the [`crate::fee::FeeSchedule`] the chain was created with (borsh),
    /// written by genesis.
    pub const FEE_SCHEDULE: u8 = 0x07;
    /// `[SNAPSHOT_SCHEDULE]` → the [`crate::snapshot::SnapshotSchedule`] the chain was created
    /// with (borsh), written by a genesis that snapshots. No key: never.
    pub const SNAPSHOT_SCHEDULE: u8 = 0x08;
    /// `[CONTRACT, account, key…]` → a contract's own storage.
    pub const CONTRACT: u8 = 0x10;

    /// A key of `prefix` and `account`: a fixed array, as every transaction reads several
    /// (its signers' keys, its payer's balance, the code hash of what it runs) and a key on
    /// the stack costs no allocation.
    fn with_name(prefix: u8, account: Name) -> [u8; 9] {
        let mut k = [prefix; 9];
        k[1..].copy_from_slice(&account.0.to_be_bytes());
        k
    }

    /// The key of `account`'s public key.
    pub fn account(account: Name) -> [u8; 9] {
        with_name(ACCOUNT, account)
    }

    /// The key of `account`'s code hash.
    pub fn code_hash(account: Name) -> [u8; 9] {
        with_name(CODE_HASH, account)
    }

    /// The key of `account`'s native balance.
    pub fn balance(account: Name) -> [u8; 9] {
        with_name(BALANCE, account)
    }

    /// The key of the chain's fee state.
    pub const fn fees() -> [u8; 1] {
        [FEES]
    }

    /// The key of the code with `hash`.
    pub fn code(hash: &[u8; 32]) -> Vec<u8> {
        let mut k = vec![CODE];
        k.extend_from_slice(hash);
        k
    }

    /// The key of TaPoS slot `slot`.
    pub fn tapos(slot: u16) -> [u8; 3] {
        let [hi, lo] = slot.to_be_bytes();
        [TAPOS, hi, lo]
    }

    /// The key of the ids block `height` included.
    pub fn recent_ids(height: u64) -> [u8; 9] {
        let mut k = [RECENT_IDS; 9];
        k[1..].copy_from_slice(&height.to_be_bytes());
        k
    }

    /// Writes the state key of `contract`'s storage key `key` into `out`.
    pub fn contract_into(out: &mut Vec<u8>, contract: Name, key: &[u8]) {
        out.clear();
        out.push(CONTRACT);
        out.extend_from_slice(&contract.0.to_be_bytes());
        out.extend_from_slice(key);
    }

    /// The state key of `contract`'s storage key `key`.
    pub fn contract(contract: Name, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(9 + key.len());
        contract_into(&mut k, contract, key);
        k
    }
}
