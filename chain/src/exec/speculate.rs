//! Optimistic parallel execution: every transaction of a block runs speculatively, on all
//! cores, against the state the block started from, through the one executor over a journal of
//! its own that records the keys it read. The block is then finalized in order on one thread: a
//! transaction none of whose reads was written by an earlier transaction of the block would
//! have read exactly the same values had it run in order, so its recorded writes and receipt
//! are the ones in-order execution gives, and they are applied as they are; any other
//! transaction runs again, in order, on the usual path. The head is therefore identical to
//! sequential execution's, for any thread count (tested, hostile contracts included).
//!
//! Speculation pays only where most runs stand, so a block speculates only when the block
//! before, run in order, counted few transactions loading what an earlier one of its block wrote
//! (a speculative run of those would not stand); a speculating block that still did not pay
//! makes the next ones run in order, for longer each time in a row.
//!
//! Two kinds of work never run speculatively: system actions (`newaccount`, `setcode`), which
//! change accounts and code, and anything whose fuel limit depends on how much of the block's
//! fuel earlier transactions used (checked when it is finalized).

use rayon::prelude::*;
use tally_host_api::BlockInfo;
use tally_runtime::Runtime;

use tally_host_api::limits::FUEL_PER_ACTION;

use super::code::CodeMap;
use super::journal::{Journal, Walked};
use super::system::SYSTEM;
use super::{Code, Exec, TxRun};
use crate::chain::Chain;
use crate::error::ChainError;
use crate::fee::Prices;
use crate::phase::finalize::fee_terms;
use crate::pipeline::{Check, PreparedTx};
use crate::store::{Change, StateStore};

/// What one transaction did when run against the block's starting state.
pub(crate) struct Speculation {
    /// Every state key whose committed value it depended on (each action's code hash
    /// included).
    pub(crate) reads: Vec<Vec<u8>>,
    /// The key ranges its ordered reads walked: a key written in one by an earlier
    /// transaction of the block would have changed what it found.
    pub(crate) walks: Vec<Walked>,
    /// Its writes, newest value per key (none if it failed).
    pub(crate) writes: Vec<Change>,
    /// What its actions did.
    pub(crate) run: TxRun,
    /// The fuel it ran with: what its max fee buys.
    pub(crate) fuel: u64,
}

/// Whether `tx` may run speculatively: it is admitted and calls no system action.
pub(crate) fn speculable(tx: &PreparedTx) -> bool {
    !matches!(tx.check, Check::Refused(_))
        && tx
            .tx
            .transaction
            .actions
            .iter()
            .all(|a| a.account != SYSTEM)
}

/// Runs every speculable transaction of `txs` against `store` on all cores, with the
/// executors `code` holds; `None` for the others, and for any whose run met an error.
/// Speculation only saves time, so an error in it is no verdict: the instance pool or memory
/// running out while every core runs an action at once is this node's limit, not the block's
/// fault; a contract `code` does not hold is loaded when the transaction runs in order; and a
/// store that failed fails again on the in-order path, which reports it there. A block
/// therefore executes on any core count.
pub(crate) fn speculate(
    runtime: &Runtime,
    store: &dyn StateStore,
    code: &CodeMap,
    txs: &[PreparedTx],
    block: BlockInfo,
    prices: &Prices,
) -> Vec<Option<Speculation>> {
    txs.par_iter()
        .map_init(
            || (Journal::recording(), Vec::with_capacity(64)),
            |(journal, key), tx| {
                if !speculable(tx) {
                    return None;
                }
                let terms = fee_terms(prices, tx);
                terms.check().ok()?;
                let mut exec = Exec::new(runtime, store, journal, Code::Cached(code), key, block);
                // Each action gets the runtime's fuel per action, or what the max fee buys, as
                // it would with the whole block's budget left; finalizing checks that it would
                // have.
                let fuel = terms.fuel_cap();
                let run = exec.run_tx(&tx.tx.transaction.actions, fuel, &terms);
                let (writes, reads, walks) = journal.take_run();
                Some(Speculation {
                    reads,
                    walks,
                    writes,
                    run: run.ok()?,
                    fuel,
                })
            },
        )
        .collect()
}

impl Chain {
    /// Runs the block's transactions speculatively on all cores, when the pipeline asks for
    /// it and there is more than one thread to run them; `None` otherwise.
    pub(crate) fn speculate(
        &mut self,
        txs: &[PreparedTx],
        block: BlockInfo,
        prices: &Prices,
    ) -> Result<Option<Vec<Option<Speculation>>>, ChainError> {
        // A traced chain runs sequentially: speculative runs keep no per-action traces, and
        // whether a block speculates never changes its result.
        if !self.pipeline.parallel_execute
            || rayon::current_num_threads() < 2
            || txs.len() < 2
            || self.runtime.traces()
        {
            return Ok(None);
        }
        // A block speculates only when the last block run in order says enough of its runs
        // would stand: at 10k uniform accounts 43% do, a speculating block ran at 200-300k
        // transfers/s against 440k in order (two cores), and probing every ninth block made
        // the default mode 6% slower than `--sequential --threads 1` over 200,000 transfers.
        // After a block whose speculation did not pay anyway, the next ones wait.
        if !self.speculate_always {
            if self.speculation_backoff > 0 {
                self.speculation_backoff -= 1;
                return Ok(None);
            }
            if !self.speculation_would_pay {
                return Ok(None);
            }
        }
        debug_assert!(
            self.journal.is_empty(),
            "speculation reads the block's start"
        );
        // Load (and compile, if need be) every called contract first, on this thread, and
        // hold them while the runs share the code map.
        let mut held = Vec::new();
        for tx in txs.iter().filter(|tx| speculable(tx)) {
            for action in &tx.tx.transaction.actions {
                if self.code.cached(action.account, &self.journal).is_none() {
                    held.extend(self.code.get(
                        action.account,
                        &mut self.journal,
                        self.store.as_ref(),
                        &self.runtime,
                    )?);
                }
            }
        }
        let runs = speculate(
            &self.runtime,
            self.store.as_ref(),
            &self.code,
            txs,
            block,
            prices,
        );
        drop(held);
        Ok(Some(runs))
    }

    /// Whether a speculative run is what running the transaction now would give: no key it
    /// read was written earlier in this block, no key in a range its ordered reads walked was
    /// written or deleted (a phantom), and every action would get the full fuel it had
    /// (`fuel` is what it gets now: what the block has left after its intrinsic charge, or
    /// what its max fee buys. It ran with the same, or the last action that ran, which had
    /// the least, had a whole action's fuel either way).
    pub(crate) fn still_valid(&mut self, spec: &Speculation, fuel: u64) -> bool {
        let before_last = spec.run.fuel_used - spec.run.last_action_fuel;
        (fuel == spec.fuel
            || fuel
                .checked_sub(before_last)
                .is_some_and(|left| left >= FUEL_PER_ACTION))
            && spec.reads.iter().all(|key| !self.journal.contains(key))
            && spec
                .walks
                .iter()
                .all(|walk| !self.journal.wrote_in(walk.range()))
    }

    /// Takes a speculative run that stands as the transaction's execution: its writes go into
    /// the block (a failed run has none).
    pub(crate) fn adopt(&mut self, spec: Speculation) -> TxRun {
        for (key, value) in spec.writes {
            self.journal.write_block(key, value);
        }
        spec.run
    }
}
