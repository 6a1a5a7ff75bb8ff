//! The chain: executes blocks of transactions against the journal and commits them.
//!
//! One block, as [`Chain::execute_block`] runs it, transaction by transaction:
//! [validate](crate::phase::validate) (admission, expiration, TaPoS, duplicates) →
//! [authorize](crate::phase::authorize) (signatures and registered keys) →
//! [execute](crate::exec) (each action against a journal checkpoint, or the transaction's
//! speculative run adopted) → [finalize](crate::phase::finalize) (charge the block's fuel,
//! record the id, build the receipt). Then the replay window's state is written, the block's
//! sorted changes are chained into the state checksum, and [`Chain::commit`] makes the block
//! durable.

use std::sync::Arc;

use tally_runtime::Runtime;

use crate::block::{BlockHeader, BlockId};
use crate::config::ChainConfig;
use crate::error::{ChainError, TxError};
use crate::exec::code::{CodeMap, Executor, NativeContract};
use crate::exec::journal::Journal;
use crate::exec::speculate::Speculation;
use crate::exec::system::SYSTEM;
use crate::fee::FeeState;
use crate::phase::finalize::{Block, read_balance};
use crate::pipeline::{Pipeline, PreparedTx, prepare_block};
use crate::receipt::{ExecutedBlock, TxResult};
use crate::snapshot::{SnapshotRef, SnapshotSchedule, SnapshotStore, Snapshotter};
use crate::state::keys;
use crate::store::{BlockRecord, Commit, Direction, Durability, KeyRange, StateStore, prefix_end};
use crate::tx::{SignedTransaction, TxId};
use crate::window::ReplayWindow;
use tally_host_api::Name;

/// The keys registered in a chain's committed state ([`Chain::committed_keys`]). As a
/// [`KeySource`](crate::crypto::KeySource), a read that fails gives no key: the signature is
/// then verified when its transaction executes, where the same read through the journal
/// reports the fault.
pub struct CommittedKeys<'a>(&'a dyn StateStore);

impl CommittedKeys<'_> {
    /// The key `account` has registered, or why it could not be read (a stored key that is
    /// not 32 bytes is corrupt, as `Chain::authorize` finds it).
    pub fn read(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        self.0
            .get(&keys::account(account))?
            .map(|k| {
                k.as_ref().try_into().map_err(|_| {
                    ChainError::Corrupt(format!(
                        "the registered key of {account} is {} bytes, not 32",
                        k.len()
                    ))
                })
            })
            .transpose()
    }
}

impl crate::crypto::KeySource for CommittedKeys<'_> {
    fn registered_key(&self, account: Name) -> Option<[u8; 32]> {
        self.read(account).ok().flatten()
    }
}

/// A parameter genesis recorded in the store under `key` (borsh), if it recorded one: what
/// every check that a store is opened with its own genesis's parameters reads.
fn genesis_param<T: borsh::BorshDeserialize>(
    store: &dyn StateStore,
    key: u8,
    what: &str,
) -> Result<Option<T>, ChainError> {
    store
        .get(&[key])?
        .map(|bytes| borsh::from_slice::<T>(&bytes))
        .transpose()
        .map_err(|e| ChainError::Corrupt(format!("the {what}: {e}")))
}

/// Refuses a store whose genesis recorded another fee schedule than `fees`: the prices of
/// every block would differ from its other nodes'.
pub(crate) fn check_schedule(
    store: &dyn StateStore,
    fees: &crate::fee::FeeSchedule,
) -> Result<(), ChainError> {
    match genesis_param::<crate::fee::FeeSchedule>(store, keys::FEE_SCHEDULE, "fee schedule")? {
        Some(s) if s != *fees => Err(ChainError::Config(
            "the store's chain was created with another fee schedule: open it with the \
             schedule of its genesis"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// Refuses a store whose genesis recorded another snapshot schedule than `snapshots` (none
/// recorded: never): its headers would commit to other snapshots than its other nodes'.
pub(crate) fn check_snapshot_schedule(
    store: &dyn StateStore,
    snapshots: &SnapshotSchedule,
) -> Result<(), ChainError> {
    let stored = genesis_param(store, keys::SNAPSHOT_SCHEDULE, "snapshot schedule")?
        .unwrap_or(SnapshotSchedule::NEVER);
    if stored != *snapshots {
        return Err(ChainError::Config(format!(
            "the store's chain snapshots every {} blocks (committed {} blocks later), not every {} ({}): open it with the schedule of its genesis",
            stored.interval, stored.delay, snapshots.interval, snapshots.delay
        )));
    }
    Ok(())
}

/// One entry of a contract's storage: its key (without the contract's namespace) and value.
pub type ContractEntry = (Vec<u8>, Vec<u8>);

/// A block executed and not yet committed.
struct Executed {
    record: BlockRecord,
    ids: Vec<TxId>,
    /// The contracts it deployed, for the code map once it commits.
    code: Vec<(Name, Executor)>,
}

/// A chain over a [`StateStore`]: the library entry point of a node.
pub struct Chain {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) store: Box<dyn StateStore>,
    pub(crate) config: ChainConfig,
    pub(crate) pipeline: Pipeline,
    pub(crate) head: BlockHeader,
    pub(crate) head_id: BlockId,
    pub(crate) window: ReplayWindow,
    pub(crate) code: CodeMap,
    pub(crate) journal: Journal,
    /// Scratch space for state keys, reused by every host call.
    pub(crate) key: Vec<u8>,
    /// Ids included in the block being executed (kept between blocks for its capacity).
    pub(crate) block_ids: crate::IdSet,
    executed: Option<Executed>,
    /// Blocks to run sequentially before speculating again (see [`MIN_CONFIRMED_SHARE`]).
    pub(crate) speculation_backoff: u32,
    /// Speculating blocks in a row that did not pay: each doubles the next back-off.
    speculation_misses: u32,
    /// Whether the last block executed in order would have gained from speculation
    /// ([`Journal::take_conflicts`](crate::exec::journal::Journal)); true until a block says.
    pub(crate) speculation_would_pay: bool,
    /// Speculate on every block the pipeline lets, whatever the blocks before said
    /// ([`Chain::set_speculate_always`]).
    pub(crate) speculate_always: bool,
    /// Builds and publishes the snapshots the chain commits to ([`Chain::set_snapshots`]).
    snapshots: Option<Snapshotter>,
    /// Why the last snapshot could not be published, until [`Chain::take_snapshot_failure`].
    snapshot_failure: Option<crate::snapshot::SnapshotError>,
}

/// Below this share of speculative runs confirmed, speculation costs more than it saves: on two
/// threads it takes half an execution's wall time per transaction, and every run that fails
/// validation costs a whole execution again. Whether a block speculates never changes its
/// result, only how fast it is reached.
const MIN_CONFIRMED_SHARE: f64 = 0.6;

/// How many blocks run in order after a block whose speculation did not pay although the
/// block before said it would (its runs walked ranges others wrote, or read code that changed,
/// which [`Journal::take_conflicts`](crate::exec::journal::Journal) does not see). Each further
/// miss in a row doubles it, up to [`MAX_SPECULATION_BACKOFF_BLOCKS`].
const SPECULATION_BACKOFF_BLOCKS: u32 = 8;

/// The longest back-off: where the estimate keeps being wrong, one block in 65 speculates in
/// vain, and a speculating block that does not pay runs at about half the speed of one in order.
const MAX_SPECULATION_BACKOFF_BLOCKS: u32 = 64;

impl Chain {
    pub(crate) fn new(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
        head: BlockHeader,
    ) -> Self {
        Self {
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
            block_ids: crate::IdSet::default(),
            executed: None,
            speculation_backoff: 0,
            speculation_misses: 0,
            speculation_would_pay: true,
            speculate_always: false,
            snapshots: None,
            snapshot_failure: None,
        }
    }

    /// Opens the chain in `store` at its last committed block.
    pub fn open(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<Self, ChainError> {
        config.fees.validate().map_err(ChainError::Config)?;
        config.snapshots.validate().map_err(ChainError::Config)?;
        config
            .snapshots
            .check_fees(&config.fees)
            .map_err(ChainError::Config)?;
        let head = store.head().cloned().ok_or(ChainError::NoGenesis)?;
        check_schedule(store.as_ref(), &config.fees)?;
        check_snapshot_schedule(store.as_ref(), &config.snapshots)?;
        let mut chain = Self::new(runtime, store, config, head);
        chain.window = ReplayWindow::load(
            chain.store.as_ref(),
            chain.head.height,
            &chain.head_id,
            chain.config.max_tx_lifetime_ms,
        )?;
        Ok(chain)
    }

    /// Closes the chain and hands back its store, as a node that stops (or crashes) leaves
    /// it: an executed block that was not committed is dropped.
    pub fn into_store(mut self) -> Box<dyn StateStore> {
        self.discard();
        self.store
    }

    /// Builds the snapshots the chain commits to ([`ChainConfig::snapshots`]) in `store`, and
    /// publishes them there for peers that join by state sync. Every node of a chain that
    /// snapshots must call it before executing a block: the headers commit to the snapshots'
    /// digests. Without a usable state file in `store` (a first start), it writes one of the
    /// head's state.
    pub fn set_snapshots(&mut self, store: Arc<SnapshotStore>) -> Result<(), ChainError> {
        if !self.config.snapshots.is_enabled() {
            return Ok(());
        }
        let mut snapshots = Snapshotter::open(
            store,
            self.config.snapshots,
            self.store.as_ref(),
            &self.head,
        )?;
        // A head that committed to a snapshot a crash kept from being published (its commit
        // is the only other place that publishes it).
        if let Err(e) = snapshots.publish_if_due(&self.head, self.store.as_ref()) {
            self.snapshot_failure = Some(e);
        }
        self.snapshots = Some(snapshots);
        Ok(())
    }

    /// Why a snapshot the chain committed to could not be published (for the node to report),
    /// once.
    pub fn take_snapshot_failure(&mut self) -> Option<crate::snapshot::SnapshotError> {
        self.snapshot_failure.take()
    }

    /// Which stages are batched or parallel (all on by default). The head reached is the same
    /// under every setting.
    pub fn set_pipeline(&mut self, pipeline: Pipeline) {
        self.pipeline = pipeline;
    }

    /// The pipeline switches in use.
    pub fn pipeline(&self) -> Pipeline {
        self.pipeline
    }

    /// Speculate on every block the pipeline and the thread count let speculate (`true`), or
    /// only where the blocks before say it pays (`false`, the default). Either way the head
    /// is the same; tests and fuzzers set it to compare the speculative path with the
    /// in-order one on every block, not only on the first.
    pub fn set_speculate_always(&mut self, always: bool) {
        self.speculate_always = always;
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

    /// Whether the transaction `id` is committed already, by the replay window: the next block
    /// would reject it as a duplicate, and so would every later one while it is in the window. A node's
    /// admission refuses such a transaction: the block would reject it without a fee, and a
    /// committed transaction's bytes can be sent again by anyone.
    pub fn is_committed(&self, id: &TxId) -> bool {
        self.window.contains(id)
    }

    /// Whether `(num, prefix)` names a committed block of the TaPoS window: what the next
    /// block requires of a transaction's reference block. A node's admission asks it, and
    /// lets a reference a few blocks ahead wait for its block (a node a block behind another
    /// would otherwise refuse transactions that name the other's head).
    pub fn knows_reference(&self, num: u16, prefix: u32) -> bool {
        self.window.knows(num, prefix)
    }

    /// A committed state value.
    pub fn get_raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        Ok(self.store.get(key)?.map(|v| v.into_owned()))
    }

    /// The committed value of `contract`'s storage key `key`.
    pub fn get(&self, contract: Name, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        self.get_raw(&keys::contract(contract, key))
    }

    /// The committed entries of `contract`'s storage whose keys (its own, without the
    /// namespace) lie in `range`, walking `dir`: what `tally keys` lists. One store seek per
    /// entry, so a caller that takes `n` of them does `n` seeks' work, however large the
    /// contract's storage is.
    pub fn contract_entries(
        &self,
        contract: Name,
        range: KeyRange<'_>,
        dir: Direction,
    ) -> Result<impl Iterator<Item = Result<ContractEntry, ChainError>> + '_, ChainError> {
        use std::ops::Bound;
        let namespace = keys::contract(contract, &[]);
        let end = prefix_end(&namespace).expect("a namespace starts with CONTRACT, not 0xff");
        let within = |b: Bound<&[u8]>| b.map(|k| keys::contract(contract, k));
        let lo = match within(range.lo) {
            Bound::Unbounded => Bound::Included(namespace.clone()),
            bound => bound,
        };
        let hi = match within(range.hi) {
            Bound::Unbounded => Bound::Excluded(end),
            bound => bound,
        };
        let entries = self.store.range(
            KeyRange::new(
                lo.as_ref().map(Vec::as_slice),
                hi.as_ref().map(Vec::as_slice),
            ),
            dir,
        )?;
        let skip = namespace.len();
        Ok(entries.map(move |entry| {
            let (mut key, value) = entry?;
            key.drain(..skip);
            Ok((key, value))
        }))
    }

    /// The registered public key of `account`.
    pub fn account_key(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        Ok(self
            .get_raw(&keys::account(account))?
            .and_then(|k| k.try_into().ok()))
    }

    /// The keys accounts have registered in the committed state, for the stateless stage to
    /// verify signatures without their key against ([`crate::crypto::KeySource`]).
    pub fn committed_keys(&self) -> CommittedKeys<'_> {
        CommittedKeys(self.store.as_ref())
    }

    /// The stateless stage for `txs` with this chain's pipeline and committed keys
    /// ([`prepare_block`]), ready for [`Chain::execute_block`].
    pub fn prepare(&self, txs: Vec<SignedTransaction>) -> Vec<PreparedTx> {
        prepare_block(
            txs,
            self.config.check_signatures,
            &self.pipeline,
            &self.committed_keys(),
        )
    }

    /// The sha256 of the code `account` runs, if it has a contract.
    pub fn code_hash(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        Ok(self
            .get_raw(&keys::code_hash(account))?
            .and_then(|h| h.try_into().ok()))
    }

    /// Runs `account`'s actions with `native` instead of its wasm contract (which must still
    /// be deployed: it owns the storage). For baselines only.
    pub fn set_native(&mut self, account: Name, native: NativeContract) {
        self.code.set_native(account, native);
    }

    /// Prepares `txs` (with this chain's pipeline), executes them as the next block at
    /// [`Chain::next_block_time_ms`] and commits it, durable before it returns: the whole
    /// block path in one call.
    pub fn run_block(&mut self, txs: Vec<SignedTransaction>) -> Result<ExecutedBlock, ChainError> {
        let prepared = self.prepare(txs);
        let executed = self.execute_block(self.next_block_time_ms(), &prepared)?;
        self.commit(Durability::Immediate)?;
        Ok(executed)
    }

    /// Executes `txs` as the block after the head, at `time_ms`, and returns its header and
    /// one result per transaction. The block is not durable, and its state not visible to
    /// reads, until [`Chain::commit`]; [`Chain::discard`] drops it instead.
    ///
    /// `Err` is the node's own fault (a store that failed, a corrupt state): the block must
    /// then not be committed, and the node should stop.
    ///
    /// Its tips go to the system account; [`Chain::execute_block_by`] names the proposer.
    pub fn execute_block(
        &mut self,
        time_ms: u64,
        txs: &[PreparedTx],
    ) -> Result<ExecutedBlock, ChainError> {
        self.execute_block_by(time_ms, SYSTEM, txs)
    }

    /// [`Chain::execute_block`] for a block proposed by `proposer`, whose balance takes the
    /// block's tips: under consensus, the account the network maps the block's proposer to,
    /// the same on every node.
    pub fn execute_block_by(
        &mut self,
        time_ms: u64,
        proposer: Name,
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
        let fees = self.fee_state()?;
        let mut block = Block::new(
            self.head.height + 1,
            time_ms,
            proposer,
            fees.prices,
            self.config.fees.max,
            txs,
        );
        let run = self
            .run_transactions(&mut block, txs)
            .and_then(|()| self.settle_fees(&block, &fees));
        let run = run.and_then(|()| self.snapshot_due(self.head.height + 1));
        let snapshot = match run {
            Ok(snapshot) => snapshot,
            Err(e) => {
                // The one abort path: nothing of the block stays.
                self.journal.clear();
                return Err(e);
            }
        };
        Ok(self.seal(block, snapshot))
    }

    /// The committed fee state: the prices the next block pays, the last block's usage, the
    /// coins burned so far.
    pub fn fee_state(&self) -> Result<FeeState, ChainError> {
        match self.store.get(&keys::fees())? {
            None => Ok(FeeState::genesis(&self.config.fees)),
            Some(bytes) => borsh::from_slice(&bytes)
                .map_err(|e| ChainError::Corrupt(format!("the fee state: {e}"))),
        }
    }

    /// The committed native balance of `account`.
    pub fn native_balance(&self, account: Name) -> Result<u64, ChainError> {
        let value = self.store.get(&keys::balance(account))?;
        read_balance(value.as_deref(), account)
    }

    /// Ends the block's fees: its tips to its proposer, and the next block's prices, its
    /// usage and the coins burned so far into the fee state.
    fn settle_fees(&mut self, block: &Block, fees: &FeeState) -> Result<(), ChainError> {
        if block.tips > 0 {
            let balance = self.balance(block.proposer)?;
            // Every coin was in a balance at genesis, whose sum fits in a u64.
            self.set_balance(block.proposer, balance.saturating_add(block.tips));
        }
        let next = FeeState {
            prices: self.config.fees.next_prices(&block.prices, &block.used),
            usage: block.used,
            burned: fees.burned.saturating_add(block.burned),
        };
        self.journal.write_block(
            keys::fees().to_vec(),
            Some(borsh::to_vec(&next).expect("in memory")),
        );
        Ok(())
    }

    /// Validates, authorizes, executes and finalizes each transaction of the block in order.
    fn run_transactions(
        &mut self,
        block: &mut Block,
        txs: &[PreparedTx],
    ) -> Result<(), ChainError> {
        let in_window = self.pipeline.batch_dedup.then(|| {
            let ids: Vec<TxId> = txs.iter().map(|p| p.id).collect();
            self.window.contains_many(&ids)
        });
        self.block_ids.clear();
        let mut speculations = self.speculate(txs, block.info(), &block.prices)?;
        for (i, tx) in txs.iter().enumerate() {
            let known = in_window.as_ref().map(|w| w[i]);
            let spec = speculations.as_mut().and_then(|s| s[i].take());
            let result = self.apply_tx(block, tx, known, spec)?;
            block.results.push(result);
        }
        Ok(())
    }

    /// One transaction: validate → authorize → execute (or adopt its speculative run) →
    /// finalize. `Err` is a node fault.
    fn apply_tx(
        &mut self,
        block: &mut Block,
        tx: &PreparedTx,
        in_window: Option<bool>,
        spec: Option<Speculation>,
    ) -> Result<TxResult, ChainError> {
        if let Err(e) = self.validate(block.time_ms, tx, in_window) {
            return Ok(TxResult::Rejected(e));
        }
        if let Err(e) = self.authorize(tx)? {
            return Ok(TxResult::Rejected(e));
        }
        let fuel = match block.fuel_for(tx) {
            Ok(fuel) => fuel,
            Err(dimension) => return Ok(TxResult::Rejected(TxError::BlockFull(dimension))),
        };
        let terms = block.fee_terms(tx);
        if let Err(e) = terms.check() {
            return Ok(TxResult::Rejected(e));
        }
        let payment = match self.reserve_fee(tx)? {
            Ok(payment) => payment,
            Err(e) => return Ok(TxResult::Rejected(e)),
        };
        let fuel = fuel.min(terms.fuel_cap());
        block.speculated += u32::from(spec.is_some());
        let run = match spec.filter(|spec| self.still_valid(spec, fuel)) {
            Some(spec) => {
                block.confirmed += 1;
                self.adopt(spec)
            }
            None => self.execute(tx, fuel, block)?,
        };
        Ok(TxResult::Included(self.finalize(block, tx, run, payment)?))
    }

    /// Ends the executed block: writes the replay window's state, sorts the block's changes
    /// into its header's checksum, and keeps it for [`Chain::commit`].
    /// The snapshot block `height` commits to, if any: waits for its merge.
    fn snapshot_due(&mut self, height: u64) -> Result<Option<SnapshotRef>, ChainError> {
        if self.config.snapshots.committed_at(height).is_none() {
            return Ok(None);
        }
        let snapshots = self.snapshots.as_mut().ok_or_else(|| {
            ChainError::Config(format!(
                "block {height} commits to a snapshot, but the chain has no snapshot directory (Chain::set_snapshots), or its snapshots stopped on an error (Chain::take_snapshot_failure says which): open the chain again"
            ))
        })?;
        Ok(snapshots.digest_for(height)?)
    }

    fn seal(&mut self, block: Block, snapshot: Option<SnapshotRef>) -> ExecutedBlock {
        let (body, transactions_root, ids) = block.body.finish();
        let height = self.head.height + 1;
        self.window.write_block(
            &mut self.journal,
            &self.head_id,
            height,
            block.time_ms,
            &ids,
        );
        let changes = self.journal.take_changes();
        let header = BlockHeader {
            height,
            previous: self.head_id,
            timestamp_ms: block.time_ms,
            transactions_root,
            proposer: block.proposer,
            prices: block.prices,
            usage: block.used,
            state_checksum: changes.state.checksum(&self.head.state_checksum),
            snapshot: snapshot.unwrap_or_default(),
        };
        self.executed = Some(Executed {
            record: BlockRecord {
                header: header.clone(),
                body,
                changes: changes.state,
            },
            ids,
            code: changes.code,
        });
        let (speculated, confirmed) = (block.speculated, block.confirmed);
        let (ran, conflicted) = self.journal.take_conflicts();
        if speculated == 0 && ran > 0 {
            self.speculation_would_pay =
                f64::from(ran - conflicted) >= MIN_CONFIRMED_SHARE * f64::from(ran);
        }
        if speculated > 0 {
            if f64::from(confirmed) < MIN_CONFIRMED_SHARE * f64::from(speculated) {
                self.speculation_backoff = SPECULATION_BACKOFF_BLOCKS
                    .saturating_mul(1 << self.speculation_misses.min(16))
                    .min(MAX_SPECULATION_BACKOFF_BLOCKS);
                self.speculation_misses = self.speculation_misses.saturating_add(1);
            } else {
                self.speculation_misses = 0;
            }
        }
        ExecutedBlock {
            header,
            results: block.results,
            speculated,
            confirmed,
        }
    }

    /// Commits the executed block: its changes, header and body go to the store in one
    /// atomic write, durable as `durability` says ([`Durability::Background`]: by the next
    /// commit or [`Chain::sync`]). Returns the committed header.
    pub fn commit(&mut self, durability: Durability) -> Result<BlockHeader, ChainError> {
        let Executed { record, ids, code } = self
            .executed
            .take()
            .ok_or_else(|| ChainError::Config("no executed block to commit".into()))?;
        let height = record.header.height;
        let header = record.header.clone();
        let options = self.commit_options(height, durability);
        // The block's changes wait on disk for the next snapshot. Spilled first: a block the
        // snapshot misses would give it another digest than every other node's.
        let spilled = match self.snapshots.as_mut() {
            Some(snapshots) => Some(snapshots.spill(height, &record.changes)?),
            None => None,
        };
        if let Err(e) = self.store.commit(record, options) {
            if let (Some(snapshots), Some(mark)) = (self.snapshots.as_mut(), spilled)
                && snapshots.undo(mark).is_err()
            {
                // The spill holds a block that never committed: no snapshot is built from
                // it. Block `T` then fails until the chain is opened again, which spills
                // the committed blocks anew.
                self.snapshots = None;
            }
            return Err(e.into());
        }
        self.head = header;
        self.head_id = self.head.id();
        self.window
            .push_block(self.head.height, &self.head_id, self.head.timestamp_ms, ids);
        self.code.install(code);
        if let Some(snapshots) = self.snapshots.as_mut() {
            // Publishing only serves peers: a failure (a full disk) is reported, and the
            // chain goes on. A merge that cannot start (no room for its files) stops the
            // snapshots: block `T` then fails until the chain is opened again.
            if let Err(e) = snapshots.committed(height, self.head_id) {
                self.snapshots = None;
                self.snapshot_failure = Some(e);
            } else if let Err(e) = snapshots.publish_if_due(&self.head, self.store.as_ref()) {
                self.snapshot_failure = Some(e);
            }
        }
        Ok(self.head.clone())
    }

    /// How the store commits block `height`: keeping the configured number of blocks.
    pub(crate) fn commit_options(&self, height: u64, durability: Durability) -> Commit {
        let by_depth = (height + 1).saturating_sub(self.config.retain_blocks);
        // Never below what the next snapshot is built from.
        let floor = self
            .snapshots
            .as_ref()
            .map_or(u64::MAX, Snapshotter::retain_floor);
        Commit {
            durability,
            retain_from: by_depth.min(floor),
        }
    }

    /// Drops the executed block without committing it: state stays at the head.
    pub fn discard(&mut self) {
        self.executed = None;
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
