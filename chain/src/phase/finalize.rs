//! Finalize: what an executed transaction leaves in its block. One path for a transaction run
//! in order and for one whose speculative run stands: its fuel is charged to the block, its
//! id recorded, its signed bytes appended to the body and its receipt built.

use tally_host_api::BlockInfo;
use tally_host_api::limits::{FUEL_PER_ACTION, FUEL_PER_TX, FUEL_PER_TX_BYTE, MAX_BLOCK_FUEL};

use crate::chain::Chain;
use crate::error::ChainError;
use crate::exec::{Code, Exec, TxRun};
use crate::pipeline::PreparedTx;
use crate::receipt::{Event, TxReceipt, TxResult, TxTrace};
use crate::tx::{BlockBody, TxId};

/// The block being executed.
pub(crate) struct Block {
    /// Its height.
    pub(crate) height: u64,
    /// Its time.
    pub(crate) time_ms: u64,
    /// What is left of its fuel budget.
    fuel_left: u64,
    /// Its body so far.
    pub(crate) body: BodyBuilder,
    /// One result per transaction so far.
    pub(crate) results: Vec<TxResult>,
    /// Transactions that had a speculative run, and of those, how many stood.
    pub(crate) speculated: u32,
    pub(crate) confirmed: u32,
}

impl Block {
    /// An empty block `height` at `time_ms`, for `txs` transactions.
    pub(crate) fn new(height: u64, time_ms: u64, txs: usize) -> Self {
        Self {
            height,
            time_ms,
            fuel_left: MAX_BLOCK_FUEL,
            body: BodyBuilder::default(),
            results: Vec::with_capacity(txs),
            speculated: 0,
            confirmed: 0,
        }
    }

    /// What its contracts may know of it: the header's height and time, the same on every node.
    pub(crate) fn info(&self) -> BlockInfo {
        BlockInfo {
            time_ms: self.time_ms,
            height: self.height,
        }
    }

    /// The fuel `tx`'s actions may use once it paid for its size, or `None` if the block
    /// cannot give it that and one action's worth (it may go in a later block).
    pub(crate) fn fuel_for(&self, tx: &PreparedTx) -> Option<u64> {
        let left = self.fuel_left.checked_sub(intrinsic_fuel(tx))?;
        (left >= FUEL_PER_ACTION).then_some(left)
    }
}

/// What a transaction pays before any action runs: for being one, and for its size.
fn intrinsic_fuel(tx: &PreparedTx) -> u64 {
    FUEL_PER_TX + FUEL_PER_TX_BYTE * tx.bytes.len() as u64
}

/// The pending block's body as it grows: the signed bytes of each included transaction
/// appended, so committing needs no encoding pass.
#[derive(Default)]
pub(crate) struct BodyBuilder {
    count: u32,
    transactions: Vec<u8>,
    success: Vec<bool>,
    /// borsh of each transaction's events, appended.
    events: Vec<u8>,
    ids: Vec<TxId>,
}

impl BodyBuilder {
    fn push(&mut self, tx: &PreparedTx, success: bool, events: &[Event]) {
        self.transactions.extend_from_slice(&tx.bytes);
        self.count += 1;
        self.success.push(success);
        borsh::to_writer(&mut self.events, events).expect("encoding into a Vec cannot fail");
        self.ids.push(tx.id);
    }

    /// borsh of the [`BlockBody`], the transactions root and the ids.
    pub(crate) fn finish(self) -> (Vec<u8>, [u8; 32], Vec<TxId>) {
        let mut body = Vec::with_capacity(
            self.transactions.len() + self.success.len() + self.events.len() + 12,
        );
        body.extend_from_slice(&self.count.to_le_bytes());
        body.extend_from_slice(&self.transactions);
        body.extend_from_slice(&(self.success.len() as u32).to_le_bytes());
        body.extend(self.success.iter().map(|&s| s as u8));
        body.extend_from_slice(&self.count.to_le_bytes());
        body.extend_from_slice(&self.events);
        let root = BlockBody::transactions_root(&body);
        (body, root, self.ids)
    }
}

impl Chain {
    /// Runs `tx`'s actions in order against the block's journal, with at most `fuel`.
    pub(crate) fn execute(
        &mut self,
        tx: &PreparedTx,
        fuel: u64,
        block: BlockInfo,
    ) -> Result<TxRun, ChainError> {
        Exec::new(
            &self.runtime,
            self.store.as_ref(),
            &mut self.journal,
            Code::Load(&mut self.code),
            &mut self.key,
            block,
        )
        .run_tx(&tx.tx.transaction.actions, fuel)
    }

    /// Charges the block for `tx`, records its id and body, and builds its receipt.
    pub(crate) fn finalize(&mut self, block: &mut Block, tx: &PreparedTx, run: TxRun) -> TxReceipt {
        let intrinsic = intrinsic_fuel(tx);
        let fuel_used = intrinsic + run.fuel_used;
        block.fuel_left -= fuel_used.min(block.fuel_left);
        self.block_ids.insert(tx.id);
        block
            .body
            .push(tx, run.failed_action.is_none(), &run.events);
        TxReceipt {
            id: tx.id,
            outcome: run.outcome,
            failed_action: run.failed_action,
            fuel_used,
            events: run.events,
            console: run.console,
            trace: run.actions.map(|actions| TxTrace {
                intrinsic_fuel: intrinsic,
                actions,
            }),
        }
    }
}
