//! The phases of a transaction, after revm's handler (validate, pre-execution, execution,
//! post-execution): [`validate`] and [`authorize`] decide whether it may be included,
//! [`crate::exec`] runs it, and [`finalize`] charges the block and builds its receipt.
//! [`crate::Chain::execute_block`] runs them in that order for every transaction.

pub mod authorize;
pub mod finalize;
pub mod validate;
