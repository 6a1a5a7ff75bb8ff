//! The chain: executes blocks of transactions against the journal and commits them.
//!
//! One block, as [`Chain::execute_block`] runs it, transaction by transaction:
//! [validate](Chain::validate) (admission, expiration, TaPoS, duplicates) →
//! [authorize](Chain::authorize) (signatures and registered keys) → execute (each action
//! through [`Env::run_action`] against a journal checkpoint) → finalize (keep or discard the
//! writes, charge the block's fuel, record the receipt). Then the block's sorted changes are
//! chained into the state checksum, and [`Chain::commit`] makes the block durable.

use std::sync::Arc;

use tally_host_api::limits::{FUEL_PER_ACTION, FUEL_PER_TX, FUEL_PER_TX_BYTE, MAX_BLOCK_FUEL};
use tally_host_api::{Abort, Name};
use tally_runtime::{Outcome, Runtime, TrapTrace};

use crate::KeyedSet;
use crate::block::{BlockHeader, BlockId, ChangeHasher, chain_checksum};
use crate::code::{CodeMap, NativeContract};
use crate::error::{ChainError, TxError};
use crate::execute::Env;
use crate::genesis::{Genesis, GenesisBuilder, GenesisChanges};
use crate::journal::Journal;
use crate::parallel::{self, Executors, Speculation};
use crate::pipeline::{Check, Pipeline, PreparedTx, prepare_block};
use crate::state::{BlockRecord, ChangeSource, Commit, Durability, StateStore, keys};
use crate::tx::{BlockBody, SignedTransaction, TxId};
use crate::window::ReplayWindow;

/// Chain parameters fixed at genesis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainConfig {
    /// Time of the genesis block, ms since the Unix epoch.
    pub genesis_time_ms: u64,
    /// How far apart [`Chain::next_block_time_ms`] puts blocks (EOS: 500 ms). A node under
    /// consensus passes the agreed block time to [`Chain::execute_block`] instead; block time
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
        }
    }
}

/// What happened to an included transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxReceipt {
    /// Its id.
    pub id: TxId,
    /// Success, or why it failed (its writes were then discarded).
    pub outcome: Outcome,
    /// The index of the failing action, if one failed.
    pub failed_action: Option<usize>,
    /// Fuel it used: its intrinsic charge and all its actions'.
    pub fuel_used: u64,
    /// What its actions printed, in order (for authors; never part of consensus data).
    pub console: Vec<u8>,
    /// Each action's fuel, console and trap location, when the chain's runtime traces
    /// ([`RuntimeConfig::trace`](tally_runtime::RuntimeConfig::trace)); `None` otherwise.
    /// Like the console, a diagnostic for authors: never hashed, stored or replicated.
    pub trace: Option<TxTrace>,
}

/// What each action of a transaction did, for authors (see [`TxReceipt::trace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxTrace {
    /// Fuel the transaction paid before any action ran (for its size).
    pub intrinsic_fuel: u64,
    /// One entry per action that ran, in order: all of them, or up to the one that failed.
    pub actions: Vec<ActionTrace>,
}

/// One action's part of a [`TxTrace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionTrace {
    /// Fuel it used.
    pub fuel_used: u64,
    /// What it printed.
    pub console: Vec<u8>,
    /// Where in its contract it stopped, if it failed inside wasm.
    pub trap: Option<Box<TrapTrace>>,
}

impl TxReceipt {
    /// Whether all its actions succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self.outcome, Outcome::Success)
    }

    /// Why it failed, if it did.
    pub fn failure(&self) -> Option<&Abort> {
        match &self.outcome {
            Outcome::Success => None,
            Outcome::Failure(abort) => Some(abort),
        }
    }

    /// Fuel each action used, in order, when traced (see [`TxReceipt::trace`]).
    pub fn action_fuel(&self) -> Option<Vec<u64>> {
        let trace = self.trace.as_ref()?;
        Some(trace.actions.iter().map(|a| a.fuel_used).collect())
    }

    /// Where the failed action stopped in its contract, when traced.
    pub fn trap(&self) -> Option<&TrapTrace> {
        self.failed_action?;
        self.trace.as_ref()?.actions.last()?.trap.as_deref()
    }

    /// What the actions printed, as text (invalid UTF-8 replaced).
    pub fn console_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.console)
    }

    /// A report for a person: the outcome, the failed action and where it stopped, each
    /// action's fuel and what it printed (per action when traced). What `tally push --trace`
    /// prints and what the test harness shows when a receipt is not what a test expected.
    pub fn report(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        match (&self.outcome, self.failed_action) {
            (Outcome::Success, _) => out.push_str("success"),
            (Outcome::Failure(abort), Some(i)) => {
                let _ = write!(out, "failed in action {i}: {abort}");
            }
            (Outcome::Failure(abort), None) => {
                let _ = write!(out, "failed: {abort}");
            }
        }
        let _ = writeln!(out, " ({} fuel)", self.fuel_used);
        let Some(trace) = &self.trace else {
            if !self.console.is_empty() {
                let _ = writeln!(out, "console:\n{}", indent(&self.console_text()));
            }
            return out;
        };
        let _ = writeln!(out, "  transaction itself: {} fuel", trace.intrinsic_fuel);
        for (i, action) in trace.actions.iter().enumerate() {
            let _ = writeln!(out, "  action {i}: {} fuel", action.fuel_used);
            if let Some(trap) = &action.trap {
                let _ = writeln!(out, "    stopped in {}", display_or(trap.innermost()));
                for (depth, frame) in trap.frames.iter().enumerate().skip(1) {
                    let _ = writeln!(out, "      {depth}: called from {frame}");
                }
            }
            if !action.console.is_empty() {
                let text = String::from_utf8_lossy(&action.console);
                let _ = writeln!(out, "    console:\n{}", indent(&indent(&text)));
            }
        }
        out
    }
}

/// `text` with every line indented by four spaces.
fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn display_or(frame: Option<&tally_runtime::TraceFrame>) -> String {
    frame.map_or_else(|| "an unknown frame".to_string(), ToString::to_string)
}

/// What a block did with one of the transactions it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxResult {
    /// Included in the block, successful or not.
    Included(TxReceipt),
    /// Not included: it could not be valid in this block. It changed nothing.
    Rejected(TxError),
}

impl TxResult {
    /// The receipt of an included transaction.
    pub fn receipt(&self) -> Option<&TxReceipt> {
        match self {
            Self::Included(receipt) => Some(receipt),
            Self::Rejected(_) => None,
        }
    }

    /// Whether it was included and succeeded.
    pub fn is_success(&self) -> bool {
        self.receipt().is_some_and(TxReceipt::is_success)
    }
}

/// A block that [`Chain::execute_block`] ran: its header and one result per transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutedBlock {
    /// The header, with the new state checksum.
    pub header: BlockHeader,
    /// One result per transaction given, in order.
    pub results: Vec<TxResult>,
    /// Transactions run speculatively in parallel (0 when the block ran sequentially).
    pub speculated: u32,
    /// Of those, how many were finalized from their speculative run, needing no re-execution.
    pub confirmed: u32,
}

/// A block executed and not yet committed.
struct Executed {
    record: BlockRecord,
    ids: Vec<TxId>,
}

/// The pending block's body as it grows: the signed bytes of each included transaction
/// appended, so committing needs no encoding pass.
#[derive(Default)]
struct BodyBuilder {
    count: u32,
    transactions: Vec<u8>,
    success: Vec<bool>,
    ids: Vec<TxId>,
}

impl BodyBuilder {
    fn push(&mut self, tx: &PreparedTx, success: bool) {
        self.transactions.extend_from_slice(&tx.bytes);
        self.count += 1;
        self.success.push(success);
        self.ids.push(tx.id);
    }

    /// borsh of the [`BlockBody`], the transactions root and the ids.
    fn finish(self) -> (Vec<u8>, [u8; 32], Vec<TxId>) {
        let mut body = Vec::with_capacity(self.transactions.len() + self.success.len() + 8);
        body.extend_from_slice(&self.count.to_le_bytes());
        body.extend_from_slice(&self.transactions);
        body.extend_from_slice(&(self.success.len() as u32).to_le_bytes());
        body.extend(self.success.iter().map(|&s| s as u8));
        let root = BlockBody::transactions_root(&body);
        (body, root, self.ids)
    }
}

/// A chain over a [`StateStore`]: the library entry point of a node.
pub struct Chain {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) store: Box<dyn StateStore>,
    config: ChainConfig,
    pipeline: Pipeline,
    head: BlockHeader,
    head_id: BlockId,
    window: ReplayWindow,
    pub(crate) code: CodeMap,
    pub(crate) journal: Journal,
    /// Scratch space for state keys, reused by every host call.
    pub(crate) key: Vec<u8>,
    /// Ids included in the block being executed (kept between blocks for its capacity).
    block_ids: KeyedSet<TxId>,
    executed: Option<Executed>,
    /// Blocks to run sequentially before speculating again (see [`MIN_CONFIRMED_SHARE`]).
    speculation_backoff: u32,
}

/// Below this share of speculative runs confirmed, speculation costs more than it saves: on two
/// threads it takes half an execution's wall time per transaction, and every run that fails
/// validation costs a whole execution again. Whether a block speculates never changes its
/// result, only how fast it is reached.
const MIN_CONFIRMED_SHARE: f64 = 0.6;

/// How many blocks run sequentially after a block whose speculation did not pay, before the
/// next attempt (the workload may have changed).
const SPECULATION_BACKOFF_BLOCKS: u32 = 8;

impl Chain {
    fn new(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
        head: BlockHeader,
    ) -> Result<Self, ChainError> {
        Ok(Self {
            runtime,
            store,
            window: ReplayWindow::new(config.max_tx_lifetime_ms),
            config,
            pipeline: Pipeline::ALL,
            head_id: head.id(),
            head,
            code: CodeMap::default(),
            journal: Journal::default(),
            key: Vec::with_capacity(64),
            block_ids: KeyedSet::default(),
            executed: None,
            speculation_backoff: 0,
        })
    }

    /// Starts a new chain on an empty `store`: fill its genesis with the returned builder,
    /// then [`GenesisBuilder::finish`] commits block 0.
    pub fn genesis(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<GenesisBuilder, ChainError> {
        if let Some(head) = store.head() {
            return Err(ChainError::Config(format!(
                "the store already holds a chain (at block {}); open it instead",
                head.height
            )));
        }
        let head = BlockHeader {
            height: 0,
            previous: [0; 32],
            timestamp_ms: config.genesis_time_ms,
            transactions_root: BlockBody::default().root(),
            state_checksum: [0; 32],
        };
        Ok(GenesisBuilder::new(Self::new(
            runtime, store, config, head,
        )?))
    }

    /// Starts a new chain on an empty `store` from `genesis`.
    pub fn create(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
        genesis: &Genesis,
    ) -> Result<Self, ChainError> {
        let mut builder = Self::genesis(runtime, store, config)?;
        builder.apply(genesis)?;
        builder.finish()
    }

    /// Opens the chain in `store` at its last committed block.
    pub fn open(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<Self, ChainError> {
        let head = store.head().cloned().ok_or(ChainError::NoGenesis)?;
        let mut chain = Self::new(runtime, store, config, head)?;
        chain.window = ReplayWindow::load(
            chain.store.as_ref(),
            chain.head.height,
            &chain.head_id,
            chain.config.max_tx_lifetime_ms,
        )?;
        Ok(chain)
    }

    /// Commits the genesis block: whatever the builder wrote, and the changes of `bulk` (keys
    /// the builder did not write), as block 0. The changes stream past twice, to the
    /// checksum and to the store, and are never all in memory at once.
    pub(crate) fn commit_genesis(
        &mut self,
        bulk: Option<&dyn ChangeSource>,
    ) -> Result<(), ChainError> {
        let written = self.journal.take_changes();
        let changes = GenesisChanges {
            written: &written,
            bulk,
        };
        let mut hasher = ChangeHasher::new();
        changes
            .for_each(&mut |k, v| {
                hasher.add(k, v);
                Ok(())
            })
            .map_err(|e| ChainError::Config(format!("genesis: {e}")))?;
        self.head.state_checksum = hasher.finish(&[0; 32]);
        let (body, transactions_root, _) = BodyBuilder::default().finish();
        self.head.transactions_root = transactions_root;
        let record = BlockRecord {
            header: self.head.clone(),
            body,
            changes: Vec::new(),
        };
        let commit = self.commit_options(0);
        if let Err(e) = self.store.commit_genesis(record, &changes, commit) {
            self.code.discard_block();
            return Err(e.into());
        }
        self.head_id = self.head.id();
        self.window.push_genesis(&self.head_id);
        self.code.commit_block();
        Ok(())
    }

    /// Which stages are batched, parallel or overlapped (all on by default). The head reached
    /// is the same under every setting.
    pub fn set_pipeline(&mut self, pipeline: Pipeline) {
        self.pipeline = pipeline;
    }

    /// The pipeline switches in use.
    pub fn pipeline(&self) -> Pipeline {
        self.pipeline
    }

    /// The last committed block.
    pub fn head(&self) -> &BlockHeader {
        &self.head
    }

    /// The last committed block's id.
    pub fn head_id(&self) -> BlockId {
        self.head_id
    }

    /// The chain's configuration.
    pub fn config(&self) -> &ChainConfig {
        &self.config
    }

    /// The runtime executing contracts.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The state store.
    pub fn store(&self) -> &dyn StateStore {
        self.store.as_ref()
    }

    /// The time [`Chain::run_block`] gives the next block: `block_interval_ms` after the head.
    pub fn next_block_time_ms(&self) -> u64 {
        self.head.timestamp_ms + self.config.block_interval_ms
    }

    /// The time of the block at `height` when every block is `block_interval_ms` apart, as
    /// under [`Chain::run_block`].
    pub fn block_time_ms(&self, height: u64) -> u64 {
        self.config.genesis_time_ms + height * self.config.block_interval_ms
    }

    /// `(ref_block_num, ref_block_prefix)` naming the head block, for new transactions.
    pub fn tapos(&self) -> (u16, u32) {
        (
            self.head.height as u16,
            crate::block::ref_prefix(&self.head_id),
        )
    }

    /// `(ref_block_num, ref_block_prefix)` naming the block at `height`, while it is within the
    /// TaPoS window; `None` otherwise.
    pub fn tapos_at(&self, height: u64) -> Option<(u16, u32)> {
        self.window.tapos_at(height)
    }

    /// A committed state value.
    pub fn get_raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        Ok(self.store.get(key)?.map(|v| v.into_owned()))
    }

    /// The committed value of `contract`'s storage key `key`.
    pub fn get(&self, contract: Name, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        self.get_raw(&keys::contract(contract, key))
    }

    /// The registered public key of `account`.
    pub fn account_key(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        Ok(self
            .get_raw(&keys::account(account))?
            .and_then(|k| k.try_into().ok()))
    }

    /// Runs `account`'s actions with `native` instead of its wasm contract (which must still
    /// be deployed: it owns the storage). For baselines only.
    pub fn set_native(&mut self, account: Name, native: NativeContract) {
        self.code.set_native(account, native);
    }

    /// Prepares `txs` (with this chain's pipeline), executes them as the next block at
    /// [`Chain::next_block_time_ms`] and commits it: the whole block path in one call.
    pub fn run_block(&mut self, txs: Vec<SignedTransaction>) -> Result<ExecutedBlock, ChainError> {
        let prepared = prepare_block(txs, self.config.check_signatures, &self.pipeline);
        let executed = self.execute_block(self.next_block_time_ms(), &prepared)?;
        self.commit()?;
        Ok(executed)
    }

    /// Executes `txs` as the block after the head, at `time_ms`, and returns its header and
    /// one result per transaction. The block is not durable, and its state not visible to
    /// reads, until [`Chain::commit`]; [`Chain::discard`] drops it instead.
    ///
    /// `Err` is the node's own fault (a store that failed, a corrupt state): the block must
    /// then not be committed, and the node should stop.
    pub fn execute_block(
        &mut self,
        time_ms: u64,
        txs: &[PreparedTx],
    ) -> Result<ExecutedBlock, ChainError> {
        if self.executed.is_some() {
            return Err(ChainError::Uncommitted(self.head.height + 1));
        }
        if time_ms <= self.head.timestamp_ms {
            return Err(ChainError::BlockTime {
                time_ms,
                head_ms: self.head.timestamp_ms,
            });
        }
        let in_window = self.pipeline.batch_dedup.then(|| {
            let ids: Vec<TxId> = txs.iter().map(|p| p.id).collect();
            self.window.contains_many(&ids)
        });
        self.block_ids.clear();
        let mut speculations = match self.speculate(txs) {
            Ok(s) => s,
            Err(e) => {
                self.journal.clear();
                return Err(e);
            }
        };
        let (mut speculated, mut confirmed) = (0, 0);
        let mut body = BodyBuilder::default();
        let mut fuel_left = MAX_BLOCK_FUEL;
        let mut results = Vec::with_capacity(txs.len());
        for (i, tx) in txs.iter().enumerate() {
            let known = in_window.as_ref().map(|w| w[i]);
            let spec = speculations.as_mut().and_then(|s| s[i].take());
            speculated += u32::from(spec.is_some());
            let applied = self.apply_tx(time_ms, tx, known, &mut fuel_left, spec);
            let result = match applied.map(|(result, from_speculation)| {
                confirmed += u32::from(from_speculation);
                result
            }) {
                Ok(result) => result,
                Err(e) => {
                    self.journal.clear();
                    self.code.discard_block();
                    return Err(e);
                }
            };
            if let TxResult::Included(receipt) = &result {
                body.push(tx, receipt.is_success());
            }
            results.push(result);
        }
        let (body, transactions_root, ids) = body.finish();
        let height = self.head.height + 1;
        self.window
            .write_block(&mut self.journal, &self.head_id, height, time_ms, &ids);
        let changes = self.journal.take_changes();
        let header = BlockHeader {
            height,
            previous: self.head_id,
            timestamp_ms: time_ms,
            transactions_root,
            state_checksum: chain_checksum(
                &self.head.state_checksum,
                changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
            ),
        };
        self.executed = Some(Executed {
            record: BlockRecord {
                header: header.clone(),
                body,
                changes,
            },
            ids,
        });
        if speculated > 0 && f64::from(confirmed) < MIN_CONFIRMED_SHARE * f64::from(speculated) {
            self.speculation_backoff = SPECULATION_BACKOFF_BLOCKS;
        }
        Ok(ExecutedBlock {
            header,
            results,
            speculated,
            confirmed,
        })
    }

    /// Runs the block's transactions speculatively on all cores, when the pipeline asks for
    /// it and there is more than one thread to run them; `None` otherwise.
    fn speculate(
        &mut self,
        txs: &[PreparedTx],
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
        if self.speculation_backoff > 0 {
            self.speculation_backoff -= 1;
            return Ok(None);
        }
        debug_assert!(
            self.journal.is_empty(),
            "speculation reads the block's start"
        );
        // Resolve (and compile, if need be) every called contract first, on this thread.
        let mut executors = Executors::default();
        for tx in txs.iter().filter(|tx| parallel::speculable(tx)) {
            for action in &tx.tx.transaction.actions {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    executors.entry(action.account)
                {
                    slot.insert(self.code.get(
                        action.account,
                        &mut self.journal,
                        self.store.as_ref(),
                        &self.runtime,
                    )?);
                }
            }
        }
        Ok(Some(parallel::speculate(
            &self.runtime,
            self.store.as_ref(),
            &executors,
            txs,
        )))
    }

    /// One transaction of the block being executed: validate → authorize → execute →
    /// finalize.
    ///
    /// With `spec`, its speculative run: used as it is when nothing it read has been written
    /// since the block started (the second value returned is then `true`), else discarded.
    fn apply_tx(
        &mut self,
        time_ms: u64,
        tx: &PreparedTx,
        in_window: Option<bool>,
        fuel_left: &mut u64,
        spec: Option<Speculation>,
    ) -> Result<(TxResult, bool), ChainError> {
        if let Err(e) = self.validate(time_ms, tx, in_window) {
            return Ok((TxResult::Rejected(e), false));
        }
        if let Err(e) = self.authorize(tx)? {
            return Ok((TxResult::Rejected(e), false));
        }
        let intrinsic = FUEL_PER_TX + FUEL_PER_TX_BYTE * tx.bytes.len() as u64;
        if *fuel_left < intrinsic + FUEL_PER_ACTION {
            return Ok((TxResult::Rejected(TxError::BlockFull), false));
        }
        if let Some(spec) = spec
            && self.still_valid(&spec, *fuel_left - intrinsic)
        {
            let fuel_used = intrinsic + spec.action_fuel.iter().sum::<u64>();
            if spec.failed_action.is_none() {
                for (key, value) in spec.writes {
                    self.journal.write_block(key, value);
                }
            }
            *fuel_left -= fuel_used.min(*fuel_left);
            self.block_ids.insert(tx.id);
            let receipt = TxReceipt {
                id: tx.id,
                outcome: spec.outcome,
                failed_action: spec.failed_action,
                fuel_used,
                console: spec.console,
                trace: None,
            };
            return Ok((TxResult::Included(receipt), true));
        }
        // Execute: every action against one checkpoint of the journal.
        self.journal.checkpoint();
        let mut env = Env {
            runtime: &self.runtime,
            store: self.store.as_ref(),
            journal: &mut self.journal,
            code: &mut self.code,
            key: &mut self.key,
        };
        let mut fuel_used = intrinsic;
        let mut outcome = Outcome::Success;
        let mut failed_action = None;
        let mut console = Vec::new();
        let mut trace = self.runtime.traces().then(|| TxTrace {
            intrinsic_fuel: intrinsic,
            actions: Vec::new(),
        });
        for (i, action) in tx.tx.transaction.actions.iter().enumerate() {
            let receipt = match env.run_action(action, *fuel_left - fuel_used) {
                Ok(receipt) => receipt,
                Err(e) => {
                    self.journal.discard_tx();
                    self.code.discard_tx();
                    return Err(e);
                }
            };
            fuel_used += receipt.fuel_used;
            console.extend_from_slice(&receipt.console);
            if let Some(trace) = &mut trace {
                trace.actions.push(ActionTrace {
                    fuel_used: receipt.fuel_used,
                    console: receipt.console,
                    trap: receipt.trace,
                });
            }
            if let Outcome::Failure(abort) = receipt.outcome {
                outcome = Outcome::Failure(abort);
                failed_action = Some(i);
                break;
            }
        }
        // Finalize: keep or drop the writes, charge the block, remember the id.
        if failed_action.is_none() {
            self.journal.commit_tx();
            self.code.commit_tx();
        } else {
            self.journal.discard_tx();
            self.code.discard_tx();
        }
        *fuel_left -= fuel_used.min(*fuel_left);
        self.block_ids.insert(tx.id);
        let receipt = TxReceipt {
            id: tx.id,
            outcome,
            failed_action,
            fuel_used,
            console,
            trace,
        };
        Ok((TxResult::Included(receipt), false))
    }

    /// Whether a speculative run is what running the transaction now would give: no key it
    /// read was written earlier in this block, and every action would get the full fuel it
    /// had (`fuel_left` is what the block has left after the transaction's intrinsic charge).
    fn still_valid(&self, spec: &Speculation, mut fuel_left: u64) -> bool {
        for &fuel in &spec.action_fuel {
            if fuel_left < FUEL_PER_ACTION {
                return false;
            }
            fuel_left -= fuel;
        }
        spec.reads.iter().all(|key| !self.journal.contains(key))
    }

    /// The checks that need no state but the replay window: admission limits, expiration,
    /// TaPoS and duplicates (`in_window`: the batched answer for this id, if looked up).
    fn validate(
        &self,
        time_ms: u64,
        tx: &PreparedTx,
        in_window: Option<bool>,
    ) -> Result<(), TxError> {
        if let Check::Refused(e) = &tx.check {
            return Err(e.clone());
        }
        let t = &tx.tx.transaction;
        if t.expiration_ms <= time_ms {
            return Err(TxError::Expired {
                expiration_ms: t.expiration_ms,
                block_time_ms: time_ms,
            });
        }
        if t.expiration_ms - time_ms > self.config.max_tx_lifetime_ms {
            return Err(TxError::ExpirationTooFar {
                expiration_ms: t.expiration_ms,
                block_time_ms: time_ms,
                max_lifetime_ms: self.config.max_tx_lifetime_ms,
            });
        }
        if !self.window.knows(t.ref_block_num, t.ref_block_prefix) {
            return Err(TxError::UnknownReferenceBlock {
                num: t.ref_block_num,
                prefix: t.ref_block_prefix,
            });
        }
        let in_window = in_window.unwrap_or_else(|| self.window.contains(&tx.id));
        if in_window || self.block_ids.contains(&tx.id) {
            return Err(TxError::Duplicate(hex::encode(tx.id)));
        }
        Ok(())
    }

    /// Checks that exactly the authorizing accounts signed, each with its registered key, and
    /// that every signature verifies (now, if the stateless stage did not batch it). The outer
    /// `Err` is a node fault; the inner one a rejection.
    fn authorize(&mut self, tx: &PreparedTx) -> Result<Result<(), TxError>, ChainError> {
        if !self.config.check_signatures {
            return Ok(Ok(()));
        }
        // The signer set is checked here whatever `check` says: it is cheap, and a caller that
        // verified signatures on its own and marked the transaction `Verified` may not have
        // checked who had to sign.
        let stateless = match tx.check {
            Check::Admitted => crate::crypto::verify_signatures(&tx.tx, &tx.id),
            _ => crate::crypto::check_signers(&tx.tx),
        };
        if let Err(e) = stateless {
            return Ok(Err(e));
        }
        // Exactly the required signers signed, once each: what is left is their keys.
        for sig in &tx.tx.signatures {
            let account = sig.account;
            // Through the journal: an account created earlier in this block can sign.
            match self
                .journal
                .get(self.store.as_ref(), &keys::account(account))?
            {
                None => return Ok(Err(TxError::UnknownAccount(account))),
                Some(key) if key != sig.public_key => {
                    return Ok(Err(TxError::WrongKey(account)));
                }
                Some(_) => {}
            }
        }
        Ok(Ok(()))
    }

    /// Commits the executed block: its changes, header and body go to the store in one
    /// atomic write, durable now or (with `overlap_commit`) by the next commit or
    /// [`Chain::sync`]. Returns the committed header.
    pub fn commit(&mut self) -> Result<BlockHeader, ChainError> {
        if self.executed.is_none() {
            return Err(ChainError::Config("no executed block to commit".into()));
        }
        self.commit_durably()
    }

    fn commit_durably(&mut self) -> Result<BlockHeader, ChainError> {
        let Executed { record, ids } = self.executed.take().expect("checked by the caller");
        let commit = self.commit_options(record.header.height);
        let header = record.header.clone();
        let written = self.store.commit(record, commit).map_err(ChainError::from);
        if let Err(e) = written {
            self.code.discard_block();
            return Err(e);
        }
        self.head = header;
        self.committed(ids);
        Ok(self.head.clone())
    }

    /// How the store commits block `height`: with the overlap on, it syncs the block in the
    /// background and finishes that before its next commit.
    fn commit_options(&self, height: u64) -> Commit {
        Commit {
            durability: if self.pipeline.overlap_commit {
                Durability::Background
            } else {
                Durability::Immediate
            },
            retain_from: (height + 1).saturating_sub(self.config.retain_blocks),
        }
    }

    /// The block at `self.head` is committed: its id, its place in the replay window, and
    /// its code changes stay.
    fn committed(&mut self, ids: Vec<TxId>) {
        self.head_id = self.head.id();
        self.window
            .push_block(self.head.height, &self.head_id, self.head.timestamp_ms, ids);
        self.code.commit_block();
    }

    /// Closes the chain and hands back its store, as a node that stops (or crashes) leaves
    /// it: an executed block that was not committed is dropped.
    pub fn into_store(mut self) -> Box<dyn StateStore> {
        self.discard();
        self.store
    }

    /// Drops the executed block without committing it: state stays at the head.
    pub fn discard(&mut self) {
        if self.executed.take().is_some() {
            self.code.discard_block();
        }
    }

    /// Waits until every committed block is durable. Errors if a background sync failed: the
    /// store can then no longer promise that the last block survives a crash, so the node
    /// must stop.
    pub fn sync(&mut self) -> Result<(), ChainError> {
        Ok(self.store.sync()?)
    }

    /// BLAKE3 over every committed entry in key order: a digest of the whole state, for
    /// audits. Unlike the block checksum it does not depend on history.
    pub fn state_digest(&self) -> Result<[u8; 32], ChainError> {
        Ok(crate::store::digest_entries(self.store.entries()?)?)
    }
}
