//! Finalize: what an executed transaction leaves in its block. One path for a transaction run
//! in order and for one whose speculative run stands: its usage is charged to the block and
//! its fee to its payer, its id recorded, its signed bytes appended to the body and its
//! receipt built.

use tally_host_api::limits::{FUEL_PER_ACTION, FUEL_PER_TX, FUEL_PER_TX_BYTE};
use tally_host_api::{BlockInfo, Name};

use crate::chain::Chain;
use crate::error::{ChainError, TxError};
use crate::exec::system::SYSTEM;
use crate::exec::{Code, Exec, FeeTerms, TxRun};
use crate::fee::{DIMENSIONS, Dimension, Prices, Usage};
use crate::pipeline::PreparedTx;
use crate::receipt::{Event, TxReceipt, TxResult, TxTrace};
use crate::state::keys;
use crate::tx::{BlockBody, TxId};

/// The block being executed.
pub(crate) struct Block {
    /// Its height.
    pub(crate) height: u64,
    /// Its time.
    pub(crate) time_ms: u64,
    /// Who proposed it: its tips are credited to this account.
    pub(crate) proposer: Name,
    /// The prices its transactions pay.
    pub(crate) prices: Prices,
    /// The most it may use of each dimension.
    max: [u64; DIMENSIONS],
    /// What its transactions used so far.
    pub(crate) used: Usage,
    /// Coins burned and tipped by its transactions so far.
    pub(crate) burned: u64,
    pub(crate) tips: u64,
    /// Its body so far.
    pub(crate) body: BodyBuilder,
    /// One result per transaction so far.
    pub(crate) results: Vec<TxResult>,
    /// Transactions that had a speculative run, and of those, how many stood.
    pub(crate) speculated: u32,
    pub(crate) confirmed: u32,
}

impl Block {
    /// An empty block `height` at `time_ms` proposed by `proposer`, for `txs`, at `prices`,
    /// within `max`.
    pub(crate) fn new(
        height: u64,
        time_ms: u64,
        proposer: Name,
        prices: Prices,
        max: [u64; DIMENSIONS],
        txs: &[PreparedTx],
    ) -> Self {
        Self {
            height,
            time_ms,
            proposer,
            prices,
            max,
            used: Usage::default(),
            burned: 0,
            tips: 0,
            body: BodyBuilder::for_txs(txs),
            results: Vec::with_capacity(txs.len()),
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

    /// The fuel `tx`'s actions may use once it paid for its size, or the dimension whose
    /// budget is spent if the block cannot take it (it may go in a later block): its bytes
    /// must fit, compute must have its intrinsic charge and one action's worth left, and
    /// read, allocate and write must not be full. (Those three are known only once a
    /// transaction ran, so the last one in may take a block past them by one transaction's
    /// use, which the per-transaction limits bound: `MAX_TX_WRITES`, `MAX_TX_WRITE_BYTES`, and
    /// fuel for reads.)
    pub(crate) fn fuel_for(&self, tx: &PreparedTx) -> Result<u64, &'static str> {
        let used = |d: Dimension| self.used.get(d);
        let max = |d: Dimension| self.max[d as usize];
        let bandwidth = Dimension::Bandwidth;
        if used(bandwidth).saturating_add(tx.bytes.len() as u64) > max(bandwidth) {
            return Err(bandwidth.name());
        }
        for d in [Dimension::Read, Dimension::Allocate, Dimension::Write] {
            if used(d) >= max(d) {
                return Err(d.name());
            }
        }
        let compute = Dimension::Compute;
        max(compute)
            .saturating_sub(used(compute))
            .checked_sub(intrinsic_fuel(tx))
            .filter(|&left| left >= FUEL_PER_ACTION)
            .ok_or(compute.name())
    }

    /// What `tx`'s fee depends on besides what its actions do.
    pub(crate) fn fee_terms(&self, tx: &PreparedTx) -> FeeTerms {
        fee_terms(&self.prices, tx)
    }
}

/// What `tx`'s fee at `prices` depends on besides what its actions do.
pub(crate) fn fee_terms(prices: &Prices, tx: &PreparedTx) -> FeeTerms {
    let t = &tx.tx.transaction;
    FeeTerms::of(prices, tx.bytes.len() as u64, t.max_fee, t.tip)
}

impl FeeTerms {
    /// The terms of a transaction of `bytes` signed bytes offering `max_fee` and `tip`, at
    /// `prices`.
    pub(crate) fn of(prices: &Prices, bytes: u64, max_fee: u64, tip: u64) -> Self {
        FeeTerms {
            prices: *prices,
            max_fee,
            tip,
            bytes,
            intrinsic_fuel: intrinsic_fuel_of(bytes),
        }
    }
}

/// What a transaction pays before any action runs: for being one, and for its size.
fn intrinsic_fuel(tx: &PreparedTx) -> u64 {
    intrinsic_fuel_of(tx.bytes.len() as u64)
}

/// [`intrinsic_fuel`] of a transaction of `bytes` signed bytes.
fn intrinsic_fuel_of(bytes: u64) -> u64 {
    FUEL_PER_TX + FUEL_PER_TX_BYTE * bytes
}

/// The pending block's body as it grows: the signed bytes of each included transaction
/// appended, so committing needs no encoding pass.
pub(crate) struct BodyBuilder {
    count: u32,
    /// borsh of the [`BlockBody`] so far: a count (written at the end) and the transactions'
    /// bytes; [`BodyBuilder::finish`] appends the rest in place.
    body: Vec<u8>,
    success: Vec<bool>,
    /// borsh of each transaction's events, appended.
    events: Vec<u8>,
    ids: Vec<TxId>,
}

/// Bytes of the body's three counts.
const BODY_COUNTS: usize = 12;

impl BodyBuilder {
    /// An empty body with room for all of `txs`, their success flags and an empty event list
    /// each, so that appending them never moves the bytes appended so far (about 1.1 MB for a
    /// block of 5,000 transfers): the body is built where it ends up, not copied once more at
    /// the end (83 instructions a simplecoin transfer). A block whose transactions emit
    /// events outgrows the room at [`BodyBuilder::finish`], which then moves it once.
    fn for_txs(txs: &[PreparedTx]) -> Self {
        let tx_bytes: usize = txs.iter().map(|tx| tx.bytes.len()).sum();
        let events = 4 * txs.len();
        let mut body = Vec::with_capacity(BODY_COUNTS + tx_bytes + txs.len() + events);
        body.extend_from_slice(&0u32.to_le_bytes());
        Self {
            count: 0,
            body,
            success: Vec::with_capacity(txs.len()),
            events: Vec::with_capacity(events),
            ids: Vec::with_capacity(txs.len()),
        }
    }

    fn push(&mut self, tx: &PreparedTx, success: bool, events: &[Event]) {
        self.body.extend_from_slice(&tx.bytes);
        self.count += 1;
        self.success.push(success);
        borsh::to_writer(&mut self.events, events).expect("encoding into a Vec cannot fail");
        self.ids.push(tx.id);
    }

    /// borsh of the [`BlockBody`], the transactions root and the ids.
    pub(crate) fn finish(self) -> (Vec<u8>, [u8; 32], Vec<TxId>) {
        let Self {
            count,
            mut body,
            success,
            events,
            ids,
        } = self;
        body[..4].copy_from_slice(&count.to_le_bytes());
        body.reserve(BODY_COUNTS - 4 + success.len() + events.len());
        body.extend_from_slice(&(success.len() as u32).to_le_bytes());
        body.extend(success.iter().map(|&s| s as u8));
        body.extend_from_slice(&count.to_le_bytes());
        body.extend_from_slice(&events);
        let root = BlockBody::transactions_root(&body);
        (body, root, ids)
    }
}

impl Chain {
    /// Runs `tx`'s actions in order against the block's journal, with at most `fuel`.
    pub(crate) fn execute(
        &mut self,
        tx: &PreparedTx,
        fuel: u64,
        block: &Block,
    ) -> Result<TxRun, ChainError> {
        Exec::new(
            &self.runtime,
            self.store.as_ref(),
            &mut self.journal,
            Code::Load(&mut self.code),
            &mut self.key,
            block.info(),
        )
        .run_tx(&tx.tx.transaction.actions, fuel, &block.fee_terms(tx))
    }

    /// The native balance of `account` as the block sees it.
    pub(crate) fn balance(&mut self, account: Name) -> Result<u64, ChainError> {
        read_balance(
            self.journal
                .get(self.store.as_ref(), &keys::balance(account))?,
            account,
        )
    }

    /// Sets the native balance of `account` in the pending block, outside any transaction.
    pub(crate) fn set_balance(&mut self, account: Name, balance: u64) {
        self.journal
            .set_block_value(&keys::balance(account), &balance.to_le_bytes());
    }

    /// Whether `tx`'s payer can cover its max fee now: a transaction that could not is not
    /// included (the mempool refuses it earlier). When it can, and the transaction runs a
    /// system action (the only kind that moves native coins), the max fee is set aside from
    /// the payer's balance first, so the transaction cannot move away the coins its fee needs.
    pub(crate) fn reserve_fee(
        &mut self,
        tx: &PreparedTx,
    ) -> Result<Result<Payment, TxError>, ChainError> {
        let t = &tx.tx.transaction;
        if t.max_fee == 0 {
            // Every balance covers nothing (and the payer's need not be read).
            return Ok(Ok(Payment::Free));
        }
        let balance = self.balance(t.payer)?;
        if balance < t.max_fee {
            return Ok(Err(TxError::CannotPay {
                payer: t.payer,
                balance,
                max_fee: t.max_fee,
            }));
        }
        if t.actions.iter().any(|a| a.account == SYSTEM) {
            self.set_balance(t.payer, balance - t.max_fee);
            return Ok(Ok(Payment::Reserved));
        }
        Ok(Ok(Payment::Before(balance)))
    }

    /// Charges the block for `tx` and its payer for its fee, records its id and body, and
    /// builds its receipt.
    pub(crate) fn finalize(
        &mut self,
        block: &mut Block,
        tx: &PreparedTx,
        run: TxRun,
        payment: Payment,
    ) -> Result<TxReceipt, ChainError> {
        let intrinsic = intrinsic_fuel(tx);
        let fuel_used = intrinsic + run.fuel_used;
        block.used.add(&run.usage);
        let t = &tx.tx.transaction;
        let paid = run.fee.total();
        // The fee never exceeds the max fee, which the payer's balance covered.
        match payment {
            Payment::Free => debug_assert_eq!(paid, 0),
            Payment::Before(balance) => self.set_balance(t.payer, balance - paid),
            Payment::Reserved => {
                let balance = self.balance(t.payer)?;
                self.set_balance(t.payer, balance.saturating_add(t.max_fee - paid));
            }
        }
        block.burned += run.fee.burned;
        block.tips += run.fee.tip;
        self.block_ids.insert(tx.id);
        block
            .body
            .push(tx, run.failed_action.is_none(), &run.events);
        Ok(TxReceipt {
            id: tx.id,
            outcome: run.outcome,
            failed_action: run.failed_action,
            fuel_used,
            usage: run.usage,
            fee: run.fee,
            events: run.events,
            console: run.console,
            trace: run.actions.map(|actions| TxTrace {
                intrinsic_fuel: intrinsic,
                actions,
            }),
        })
    }
}

/// How a transaction's payer pays, decided before it runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Payment {
    /// Its max fee is zero: it pays nothing.
    Free,
    /// The payer had this balance, which nothing in the transaction can change.
    Before(u64),
    /// The max fee was set aside from the payer's balance; what the fee leaves of it goes back.
    Reserved,
}

/// A native balance from its stored bytes (none: zero).
pub(crate) fn read_balance(value: Option<&[u8]>, account: Name) -> Result<u64, ChainError> {
    match value {
        None => Ok(0),
        Some(bytes) => bytes
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| ChainError::Corrupt(format!("the balance of {account} is not 8 bytes"))),
    }
}
