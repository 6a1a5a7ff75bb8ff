//! Why the chain rejected a transaction, and faults of the node.

use tally_host_api::{Abort, Name};
use tally_runtime::{DeployError, PrepareError, RuntimeError};

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
    /// An action is addressed to an account without a contract.
    #[error("account {0} has no contract")]
    NoContract(Name),
    /// A signature does not verify against the public key it carries.
    #[error("bad signature from {0}: it does not verify against its public key")]
    BadSignature(Name),
    /// An authorizing account did not sign.
    #[error("missing signature: {0} authorizes an action but did not sign")]
    MissingSignature(Name),
    /// An account signed with a key that is not its registered key.
    #[error("wrong key: {0} signed with a key that is not its registered key")]
    WrongKey(Name),
    /// A signature from an account that authorizes no action.
    #[error("unneeded signature from {0}: it authorizes no action")]
    UnneededSignature(Name),
    /// An authorizing account does not exist.
    #[error("unknown account {0}")]
    UnknownAccount(Name),
    /// The same transaction was already included within its expiration window.
    #[error("duplicate transaction {0}")]
    Duplicate(String),
    /// The pending block is a setup block (genesis allocations, direct deploys).
    #[error("the pending block is a setup block; finish it before pushing transactions")]
    SetupBlock,
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
    /// The state store failed.
    #[error("state store: {0}")]
    Store(#[from] std::io::Error),
    /// Stored state is inconsistent (a code hash without its code, …).
    #[error("corrupt state: {0}")]
    Corrupt(String),
    /// The chain configuration is inconsistent.
    #[error("invalid chain configuration: {0}")]
    Config(String),
    /// Setup operations need a pending block without transactions.
    #[error("setup operations (deploy, allocate) need a pending block without transactions")]
    NotSetupBlock,
}

impl From<PrepareError> for ChainError {
    fn from(e: PrepareError) -> Self {
        match e {
            PrepareError::Rejected(e) => Self::Deploy(e),
            PrepareError::Node(e) => Self::Runtime(e),
        }
    }
}
