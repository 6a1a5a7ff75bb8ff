//! Why the chain rejected a transaction, and faults of the node.

use tally_host_api::{Abort, Name};
use tally_runtime::{DeployError, PrepareError, RuntimeError};

use crate::store::StoreError;

/// Why a transaction was rejected before it ran. A rejected transaction is not included in
/// any block and changes nothing.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxError {
    /// It has no actions.
    #[error("the transaction has no actions")]
    NoActions,
    /// Its expiration is not after the block time.
    #[error("the transaction expired at {expiration_ms} ms; the block time is {block_time_ms} ms")]
    Expired {
        /// Its expiration.
        expiration_ms: u64,
        /// The block's time.
        block_time_ms: u64,
    },
    /// Its expiration is further ahead than a transaction may live.
    #[error(
        "the transaction expires at {expiration_ms} ms, more than {max_lifetime_ms} ms after the block time {block_time_ms} ms"
    )]
    ExpirationTooFar {
        /// Its expiration.
        expiration_ms: u64,
        /// The block's time.
        block_time_ms: u64,
        /// The longest lifetime allowed.
        max_lifetime_ms: u64,
    },
    /// Its reference block is not a recent block of this chain.
    #[error(
        "unknown reference block: number {num} with prefix {prefix:#010x} is not a recent block of this chain"
    )]
    UnknownReferenceBlock {
        /// `ref_block_num`.
        num: u16,
        /// `ref_block_prefix`.
        prefix: u32,
    },
    /// A signature does not verify against the public key it carries.
    #[error("bad signature from {0}: it does not verify against its public key")]
    BadSignature(Name),
    /// The payer or an authorizing account did not sign.
    #[error(
        "missing signature: {0} pays the fee or authorizes an action, but did not sign (sign the transaction with its key)"
    )]
    MissingSignature(Name),
    /// An account signed with a key that is not its registered key.
    #[error("wrong key: {0} signed with a key that is not its registered key")]
    WrongKey(Name),
    /// A signature from an account that authorizes no action.
    #[error("unneeded signature from {0}: it neither pays the fee nor authorizes an action")]
    UnneededSignature(Name),
    /// The signatures are not in the one order a transaction's encoding allows: the order in
    /// which their accounts first authorize an action, each account once.
    #[error(
        "the signature of {0} is out of order: sign in the order the accounts first authorize an \
         action, each once (`SignedTransaction::sign` does)"
    )]
    SignatureOrder(Name),
    /// The payer's native balance cannot cover the transaction's max fee.
    #[error(
        "the payer {payer} has {balance} coins, less than the transaction's max fee {max_fee}: fund it, or lower the max fee (`tally fees` shows the prices)"
    )]
    CannotPay {
        /// The payer.
        payer: Name,
        /// Its balance before the transaction.
        balance: u64,
        /// The transaction's max fee.
        max_fee: u64,
    },
    /// The max fee does not cover what the transaction costs before any action runs (its
    /// bytes and intrinsic fuel at the block's prices).
    #[error(
        "the max fee {max_fee} does not cover the {needed} this transaction costs before any action runs at this block's prices: raise --max-fee (`tally fees` shows the prices)"
    )]
    MaxFeeTooLow {
        /// What its size and intrinsic fuel cost.
        needed: u64,
        /// Its max fee.
        max_fee: u64,
    },
    /// Its tip is more than its max fee, which must cover the tip too.
    #[error(
        "the tip {tip} is more than the max fee {max_fee}, which includes it: raise --max-fee or lower --tip"
    )]
    TipAboveMaxFee {
        /// Its tip.
        tip: u64,
        /// Its max fee.
        max_fee: u64,
    },
    /// An authorizing account does not exist.
    #[error("unknown account {0}")]
    UnknownAccount(Name),
    /// The same transaction was already included within its expiration window.
    #[error("duplicate transaction {0}")]
    Duplicate(String),
    /// The encoded transaction is larger than `limits::MAX_TX_BYTES`.
    #[error("the transaction is {bytes} bytes; the limit is {limit}")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// More actions, signatures or authorizations than the limits allow.
    #[error("the transaction has {count} {what}; the limit is {limit}")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// An action's data is larger than its limit.
    #[error("action {index} carries {bytes} bytes of data; the limit is {limit}")]
    ActionDataTooLarge {
        /// The action's index in the transaction.
        index: usize,
        /// Its data's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not a transaction (bad borsh, trailing bytes).
    #[error("malformed transaction: {0}")]
    Malformed(String),
    /// One of the block's five budgets (bandwidth, compute, read, allocate, write) is spent;
    /// the transaction may go in a later block.
    #[error("the block's {0} budget is spent; submit the transaction again for a later block")]
    BlockFull(&'static str),
}

/// An error of a chain operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// The transaction was rejected.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The contract was rejected at deploy.
    #[error("deploy rejected: {0}")]
    Deploy(#[from] DeployError),
    /// The contract's `onInit` failed, so it was not deployed.
    #[error("the contract's onInit failed: {0}")]
    InitFailed(Abort),
    /// The runtime failed (not the contract).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The state store failed: I/O, corruption, a lock held by another process.
    #[error("state store: {0}")]
    Store(#[from] StoreError),
    /// Stored state is inconsistent (a code hash without its code, …).
    #[error("corrupt state: {0}")]
    Corrupt(String),
    /// The chain could not build or publish a snapshot it commits to.
    #[error("snapshot: {0}")]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// The chain configuration is inconsistent.
    #[error("invalid chain configuration: {0}")]
    Config(String),
    /// A block was executed and neither committed nor discarded before the next call.
    #[error("block {0} was executed but not committed; commit or discard it first")]
    Uncommitted(u64),
    /// A block's time does not advance past the head's.
    #[error("block time {time_ms} ms does not advance past the head's {head_ms} ms")]
    BlockTime {
        /// The proposed time.
        time_ms: u64,
        /// The head block's time.
        head_ms: u64,
    },
    /// A speculative run could not go on (a contract it calls is not loaded yet); the
    /// transaction runs in order instead. Never returned by [`crate::Chain::execute_block`].
    #[error("the speculative run stopped: {0}")]
    NotSpeculable(&'static str),
    /// The store holds no chain and no genesis was given to create one.
    #[error("the store is empty: create the chain with a genesis (`tally init`)")]
    NoGenesis,
}

impl From<std::io::Error> for ChainError {
    /// An I/O error of the store (a [`StoreError`] carried inside one comes back out whole).
    fn from(error: std::io::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<PrepareError> for ChainError {
    fn from(e: PrepareError) -> Self {
        match e {
            PrepareError::Rejected(e) => Self::Deploy(e),
            PrepareError::Node(e) => Self::Runtime(e),
        }
    }
}
