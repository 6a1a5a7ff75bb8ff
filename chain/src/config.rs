//! How a chain is configured: the parameters fixed at genesis.

use crate::fee::FeeSchedule;
use crate::snapshot::SnapshotSchedule;

/// Chain parameters fixed at genesis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainConfig {
    /// Time of the genesis block, ms since the Unix epoch.
    pub genesis_time_ms: u64,
    /// How far apart [`Chain::next_block_time_ms`](crate::Chain::next_block_time_ms) puts blocks (EOS: 500 ms). A node under
    /// consensus passes the agreed block time to [`Chain::execute_block`](crate::Chain::execute_block) instead; block time
    /// never comes from a local clock during execution.
    pub block_interval_ms: u64,
    /// Longest a transaction may live past the block time. The ids of included transactions
    /// stay in state this long, to detect duplicates.
    pub max_tx_lifetime_ms: u64,
    /// Blocks kept below the head (the Vryx test pruned past depth 512).
    pub retain_blocks: u64,
    /// Whether signatures and authorities are checked. Off only to measure execution alone:
    /// a chain that does not check signatures trusts every `authorization` list.
    pub check_signatures: bool,
    /// How the chain prices its use ([`FeeSchedule::STANDARD`] by default).
    /// [`FeeSchedule::ZERO`] makes use free: only for a private chain whose senders are all
    /// trusted, since on a public network anyone could then fill every block at no cost.
    pub fees: FeeSchedule,
    /// When the chain snapshots its state for nodes that join by state sync
    /// ([`SnapshotSchedule::NEVER`] by default). Fixed at genesis like the fee schedule: every
    /// node commits to the same snapshots.
    pub snapshots: SnapshotSchedule,
}

impl Default for ChainConfig {
    fn default() -> Self {
        Self {
            // 2026-01-01T00:00:00Z: fixed, so every node and run derives the same blocks.
            genesis_time_ms: 1_767_225_600_000,
            block_interval_ms: 500,
            max_tx_lifetime_ms: 120_000,
            retain_blocks: 512,
            check_signatures: true,
            fees: FeeSchedule::STANDARD,
            snapshots: SnapshotSchedule::NEVER,
        }
    }
}
