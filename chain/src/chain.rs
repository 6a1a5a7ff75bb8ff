//! The chain: checks and executes transactions sequentially against a pending block and
//! commits blocks.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use tally_host_api::{Abort, AbortCode, Host, HostError, Name};
use tally_runtime::{Contract, Entry, Outcome, PrepareError, Receipt, Runtime};

use crate::block::{BlockHeader, BlockId, chain_checksum};
use crate::crypto;
use crate::error::{ChainError, TxError};
use crate::host::{ActionHost, Pending, TxWrites, tx_get, tx_set};
use crate::state::{BlockRecord, Change, StateStore, keys};
use crate::system::{self, NewAccount, SYSTEM, SetCode};
use crate::tx::{Action, BlockBody, SignedTransaction, Transaction, TxId};

/// How many recent blocks a transaction may reference (TaPoS). `ref_block_num` has 16 bits,
/// as in EOS, whose `block_summary` table keeps the same 65,536 entries.
const TAPOS_WINDOW: usize = 1 << 16;

/// Chain parameters fixed at genesis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainConfig {
    /// Time of the genesis block, ms since the Unix epoch.
    pub genesis_time_ms: u64,
    /// Block time advances by this much per block (EOS: 500 ms). Block time is logical: it
    /// never comes from a local clock, so replay derives the same blocks.
    pub block_interval_ms: u64,
    /// Longest a transaction may live past the block time. Duplicates are detected among the
    /// blocks of this window, so it must fit in the retained blocks.
    pub max_tx_lifetime_ms: u64,
    /// Blocks kept below the head (the Vryx test pruned past depth 512).
    pub retain_blocks: u64,
    /// Whether signatures and authorities are checked. Off only to measure execution alone:
    /// a chain that does not check signatures trusts every `authorization` list.
    pub check_signatures: bool,
    /// The public key of the system account `tally`, written at genesis.
    pub system_key: Option<[u8; 32]>,
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
            system_key: None,
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
    /// Fuel used by all its actions.
    pub fuel_used: u64,
}

impl TxReceipt {
    /// Whether all its actions succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self.outcome, Outcome::Success)
    }
}

/// A single-node chain over a [`StateStore`].
pub struct Chain {
    runtime: Arc<Runtime>,
    store: Box<dyn StateStore>,
    config: ChainConfig,
    head: BlockHeader,
    head_id: BlockId,
    /// `(height, prefix)` of the latest block with each `height % TAPOS_WINDOW`.
    recent: Vec<(u64, u32)>,
    /// Ids of transactions included within the lifetime window, and per block (by block
    /// time) which ones, so they can be forgotten once they could no longer be valid.
    recent_ids: FxHashSet<TxId>,
    id_blocks: VecDeque<(u64, Vec<TxId>)>,
    contracts: FxHashMap<Name, Arc<Contract>>,
    natives: FxHashMap<Name, NativeContract>,
    pending: Pending,
    pending_ids: Vec<(TxId, bool)>,
    /// Ids included in the pending block (they join `recent_ids` at commit).
    pending_id_set: FxHashSet<TxId>,
    pending_body: PendingBody,
    tx_writes: TxWrites,
    /// Whether `finish_block` may leave the store's durable sync running in the background.
    overlap_commit: bool,
    /// The durable sync of the last block, when it runs in the background.
    in_flight: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

/// An executor that replaces a contract's wasm for baselines (`tally bench --baseline`): plain
/// Rust, or another engine, over the same [`Host`] a wasm contract sees. It shows what the
/// runtime costs.
pub type NativeContract = Arc<dyn Fn(&mut dyn Host) -> Result<(), HostError> + Send + Sync>;

/// The pending block's body, kept encoded: each transaction's borsh is appended as it is
/// included, so committing needs no encoding pass and no copy of the transactions. The bytes
/// are exactly borsh of the [`BlockBody`] (tested).
#[derive(Default)]
struct PendingBody {
    setup: bool,
    count: u32,
    transactions: Vec<u8>,
    success: Vec<bool>,
}

impl PendingBody {
    fn push(&mut self, tx: &SignedTransaction, encoded: Option<&[u8]>, success: bool) {
        match encoded {
            Some(bytes) => self.transactions.extend_from_slice(bytes),
            None => borsh::BorshSerialize::serialize(tx, &mut self.transactions)
                .expect("encoding into a Vec cannot fail"),
        }
        self.count += 1;
        self.success.push(success);
    }

    /// borsh of the body, leaving an empty body behind.
    fn take_encoded(&mut self) -> Vec<u8> {
        let body = std::mem::take(self);
        let mut out = Vec::with_capacity(body.transactions.len() + body.success.len() + 9);
        out.push(body.setup as u8);
        out.extend_from_slice(&body.count.to_le_bytes());
        out.extend_from_slice(&body.transactions);
        out.extend_from_slice(&(body.success.len() as u32).to_le_bytes());
        out.extend(body.success.iter().map(|&s| s as u8));
        out
    }
}

impl Chain {
    /// Opens a chain on `store`: writes the genesis block if the store is empty, or resumes
    /// at its last committed block.
    pub fn open(
        runtime: Arc<Runtime>,
        store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<Self, ChainError> {
        if config.max_tx_lifetime_ms > config.retain_blocks * config.block_interval_ms {
            return Err(ChainError::Config(format!(
                "max_tx_lifetime_ms {} exceeds the {} retained blocks of {} ms",
                config.max_tx_lifetime_ms, config.retain_blocks, config.block_interval_ms
            )));
        }
        let head = store.head().cloned().unwrap_or(BlockHeader {
            height: 0,
            previous: [0; 32],
            timestamp_ms: config.genesis_time_ms,
            transactions_root: BlockBody::transactions_root(std::iter::empty()),
            state_checksum: [0; 32],
        });
        let fresh = store.head().is_none();
        let mut chain = Self {
            runtime,
            store,
            config,
            head_id: head.id(),
            head,
            recent: vec![(u64::MAX, 0); TAPOS_WINDOW],
            recent_ids: FxHashSet::default(),
            id_blocks: VecDeque::new(),
            contracts: FxHashMap::default(),
            natives: FxHashMap::default(),
            pending: Pending::default(),
            pending_ids: Vec::new(),
            pending_id_set: FxHashSet::default(),
            pending_body: PendingBody::default(),
            tx_writes: Vec::new(),
            overlap_commit: false,
            in_flight: None,
        };
        if fresh {
            chain.genesis()?;
        } else {
            chain.resume()?;
        }
        Ok(chain)
    }

    fn genesis(&mut self) -> Result<(), ChainError> {
        let mut changes = Vec::new();
        if let Some(key) = self.config.system_key {
            changes.push((keys::account(SYSTEM), Some(key.to_vec())));
        }
        self.pending_body.setup = true;
        let header = BlockHeader {
            height: 0,
            previous: [0; 32],
            timestamp_ms: self.config.genesis_time_ms,
            transactions_root: BlockBody::transactions_root(std::iter::empty()),
            state_checksum: chain_checksum(
                &[0; 32],
                changes
                    .iter()
                    .map(|(k, v): &Change| (k.as_slice(), v.as_deref())),
            ),
        };
        self.commit(header, changes)
    }

    /// Rebuilds what is not stored (TaPoS ids, the duplicate window) from retained blocks.
    fn resume(&mut self) -> Result<(), ChainError> {
        let first = self.store.first_retained();
        for height in first..=self.head.height {
            let record = self.store.block(height)?.ok_or_else(|| {
                ChainError::Corrupt(format!("retained block {height} is missing"))
            })?;
            let id = record.header.id();
            self.remember(height, id);
            let body: BlockBody = borsh::from_slice(&record.body)
                .map_err(|e| ChainError::Corrupt(format!("block {height} body: {e}")))?;
            let ids: Vec<TxId> = body
                .transactions
                .iter()
                .map(|t| t.transaction.id())
                .collect();
            self.recent_ids.extend(ids.iter().copied());
            self.id_blocks.push_back((record.header.timestamp_ms, ids));
        }
        self.forget_expired_ids();
        Ok(())
    }

    fn remember(&mut self, height: u64, id: BlockId) {
        self.recent[height as usize % TAPOS_WINDOW] = (height, crate::block::ref_prefix(&id));
    }

    fn forget_expired_ids(&mut self) {
        // A transaction included at block time t expires by t + max lifetime; once the head
        // is past that, a replay would be rejected as expired anyway.
        while let Some((time, _)) = self.id_blocks.front() {
            if time + self.config.max_tx_lifetime_ms >= self.head.timestamp_ms {
                break;
            }
            let (_, ids) = self.id_blocks.pop_front().expect("front exists");
            for id in ids {
                self.recent_ids.remove(&id);
            }
        }
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

    /// The time of the block being built.
    pub fn pending_block_time_ms(&self) -> u64 {
        self.head.timestamp_ms + self.config.block_interval_ms
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
        let (h, prefix) = self.recent[height as usize % TAPOS_WINDOW];
        (h == height).then_some((height as u16, prefix))
    }

    /// The logical time of the block at `height`: blocks are `block_interval_ms` apart from
    /// genesis.
    pub fn block_time_ms(&self, height: u64) -> u64 {
        self.config.genesis_time_ms + height * self.config.block_interval_ms
    }

    /// A raw state value, including writes of the pending block.
    pub fn get_raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        Ok(self
            .pending
            .get(self.store.as_ref(), key)?
            .map(|v| v.into_owned()))
    }

    /// The value of `contract`'s storage key `key`, including writes of the pending block.
    pub fn get(&self, contract: Name, key: &[u8]) -> Result<Option<Vec<u8>>, ChainError> {
        self.get_raw(&keys::contract(contract, key))
    }

    /// The registered public key of `account`.
    pub fn account_key(&self, account: Name) -> Result<Option<[u8; 32]>, ChainError> {
        Ok(self
            .get_raw(&keys::account(account))?
            .and_then(|k| k.try_into().ok()))
    }

    fn begin_setup(&mut self) -> Result<(), ChainError> {
        if !self.pending_ids.is_empty() {
            return Err(ChainError::NotSetupBlock);
        }
        self.pending_body.setup = true;
        Ok(())
    }

    /// Deploys `code` to `account` directly, in a setup block, and runs its `onInit`.
    /// Transactions deploy with the system action `setcode` instead.
    pub fn deploy(&mut self, account: Name, code: &[u8]) -> Result<Receipt, ChainError> {
        self.begin_setup()?;
        self.tx_writes.clear();
        let receipt = self.set_code(account, code)?;
        if let Outcome::Failure(abort) = &receipt.outcome {
            self.tx_writes.clear();
            return Err(ChainError::InitFailed(abort.clone()));
        }
        self.merge_tx_writes();
        self.contracts.remove(&account);
        Ok(receipt)
    }

    /// Writes `value` under `contract`'s storage key `key`, bypassing contract code, in a
    /// setup block: for genesis allocations and benchmark setup. The write is part of the
    /// block's changes and checksum like any other.
    pub fn allocate(&mut self, contract: Name, key: &[u8], value: &[u8]) -> Result<(), ChainError> {
        self.begin_setup()?;
        self.pending
            .writes
            .insert(keys::contract(contract, key), Some(value.to_vec()));
        Ok(())
    }

    /// Registers `account` with public key `key` directly, in a setup block. Transactions
    /// create accounts with the system action `newaccount` instead.
    pub fn register_account(&mut self, account: Name, key: [u8; 32]) -> Result<(), ChainError> {
        self.begin_setup()?;
        self.pending
            .writes
            .insert(keys::account(account), Some(key.to_vec()));
        Ok(())
    }

    /// Applies recorded changes as a setup block (replay of a stored setup block).
    pub fn apply_setup_changes(&mut self, changes: &[Change]) -> Result<(), ChainError> {
        self.begin_setup()?;
        for (k, v) in changes {
            self.pending.writes.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    /// The compiled contract of `account`: from memory, else from state (through the
    /// runtime's module cache, so a restarted node does not recompile).
    fn contract(&mut self, account: Name) -> Result<Arc<Contract>, ChainError> {
        if let Some(c) = self.contracts.get(&account) {
            return Ok(c.clone());
        }
        let store = self.store.as_ref();
        let Some(hash) = self.pending.get(store, &keys::code_hash(account))? else {
            return Err(TxError::NoContract(account).into());
        };
        let hash: [u8; 32] = hash
            .as_ref()
            .try_into()
            .map_err(|_| ChainError::Corrupt(format!("code hash of {account} is not 32 bytes")))?;
        let code = self
            .pending
            .get(store, &keys::code(&hash))?
            .ok_or_else(|| ChainError::Corrupt(format!("code of {account} is missing")))?;
        let contract = self.runtime.prepare(&code)?;
        self.contracts.insert(account, contract.clone());
        Ok(contract)
    }

    fn check(&self, tx: &Transaction) -> Result<(), TxError> {
        if tx.actions.is_empty() {
            return Err(TxError::NoActions);
        }
        let block_time_ms = self.pending_block_time_ms();
        if tx.expiration_ms <= block_time_ms {
            return Err(TxError::Expired {
                expiration_ms: tx.expiration_ms,
                block_time_ms,
            });
        }
        if tx.expiration_ms - block_time_ms > self.config.max_tx_lifetime_ms {
            return Err(TxError::ExpirationTooFar {
                expiration_ms: tx.expiration_ms,
                block_time_ms,
                max_lifetime_ms: self.config.max_tx_lifetime_ms,
            });
        }
        let (height, prefix) = self.recent[tx.ref_block_num as usize];
        if height == u64::MAX || prefix != tx.ref_block_prefix {
            return Err(TxError::UnknownReferenceBlock {
                num: tx.ref_block_num,
                prefix: tx.ref_block_prefix,
            });
        }
        Ok(())
    }

    /// Checks that exactly the authorizing accounts signed, each with its registered key.
    /// The signatures themselves were checked by [`crypto::verify_signatures`].
    fn check_authority(&self, tx: &SignedTransaction) -> Result<(), ChainError> {
        let required = crypto::required_signers(tx);
        for (i, sig) in tx.signatures.iter().enumerate() {
            let repeated = tx.signatures[..i].iter().any(|s| s.account == sig.account);
            if repeated || required.binary_search(&sig.account).is_err() {
                return Err(TxError::UnneededSignature(sig.account).into());
            }
        }
        for account in required {
            let sig = tx
                .signatures
                .iter()
                .find(|s| s.account == account)
                .ok_or(TxError::MissingSignature(account))?;
            match self.account_key(account)? {
                None => return Err(TxError::UnknownAccount(account).into()),
                Some(key) if key != sig.public_key => {
                    return Err(TxError::WrongKey(account).into());
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Checks and runs `tx` atomically in the pending block: all its actions' writes apply,
    /// or none do.
    ///
    /// `Err` means the transaction was rejected (or the node failed) and is not included. An
    /// included transaction whose action failed returns `Ok` with a failed receipt and leaves
    /// no trace in state.
    pub fn push_transaction(&mut self, tx: &SignedTransaction) -> Result<TxReceipt, ChainError> {
        let id = tx.transaction.id();
        if self.config.check_signatures {
            crypto::verify_signatures(tx, &id)?;
        }
        self.push_verified(tx, id)
    }

    /// [`Chain::push_transaction`] for a transaction whose id was computed, and whose
    /// signatures were verified (when the chain checks them), by the caller: the stateless
    /// half of checking can then run ahead, in parallel.
    pub fn push_verified(
        &mut self,
        tx: &SignedTransaction,
        id: TxId,
    ) -> Result<TxReceipt, ChainError> {
        self.push_prepared(tx, id, None, None)
    }

    /// Which of `ids` are in the committed duplicate window, looked up on all cores: the
    /// batched half of the duplicate check ([`crate::Pipeline::batch_dedup`]). Pass each
    /// answer to [`Chain::push_prepared`]; duplicates within the pending block are still
    /// found there.
    pub fn in_recent_window(&self, ids: &[TxId]) -> Vec<bool> {
        use rayon::prelude::*;
        let recent = &self.recent_ids;
        ids.par_iter().map(|id| recent.contains(id)).collect()
    }

    /// [`Chain::push_verified`] with the work of the pipeline's earlier stages: `encoded` is
    /// the transaction's borsh if already made, `in_window` the answer of
    /// [`Chain::in_recent_window`] for its id if already looked up. The result is the same
    /// as without them.
    pub fn push_prepared(
        &mut self,
        tx: &SignedTransaction,
        id: TxId,
        encoded: Option<&[u8]>,
        in_window: Option<bool>,
    ) -> Result<TxReceipt, ChainError> {
        if self.pending_body.setup {
            return Err(TxError::SetupBlock.into());
        }
        self.check(&tx.transaction)?;
        let in_window = match in_window {
            Some(known) => known,
            None => self.recent_ids.contains(&id),
        };
        if in_window || self.pending_id_set.contains(&id) {
            return Err(TxError::Duplicate(hex::encode(id)).into());
        }
        if self.config.check_signatures {
            self.check_authority(tx)?;
        }
        self.tx_writes.clear();
        let mut fuel_used = 0;
        let mut outcome = Outcome::Success;
        let mut failed_action = None;
        for (i, action) in tx.transaction.actions.iter().enumerate() {
            let receipt = if action.account == SYSTEM {
                self.run_system(action)?
            } else if let Some(native) = self.natives.get(&action.account).cloned() {
                self.run_native(&native, action)?
            } else {
                let contract = self.contract(action.account)?;
                let entry = Entry::Action {
                    receiver: action.account,
                    code: action.account,
                    action: action.name,
                };
                self.run(&contract, action.account, action, entry)?
            };
            fuel_used += receipt.fuel_used;
            if let Outcome::Failure(abort) = receipt.outcome {
                outcome = Outcome::Failure(abort);
                failed_action = Some(i);
                break;
            }
        }
        let success = failed_action.is_none();
        if success {
            for action in &tx.transaction.actions {
                // The account's code changed: forget the compiled contract; the next action
                // loads the new one from state (and the module cache).
                if action.account == SYSTEM
                    && action.name == system::SETCODE
                    && let Ok(set) = borsh::from_slice::<SetCode>(&action.data)
                {
                    self.contracts.remove(&set.account);
                }
            }
            self.merge_tx_writes();
        }
        self.pending_id_set.insert(id);
        self.pending_ids.push((id, success));
        self.pending_body.push(tx, encoded, success);
        Ok(TxReceipt {
            id,
            outcome,
            failed_action,
            fuel_used,
        })
    }

    fn system_failure(abort: Abort) -> Receipt {
        Receipt {
            outcome: Outcome::Failure(abort),
            fuel_used: 0,
            console: Vec::new(),
        }
    }

    fn run_system(&mut self, action: &Action) -> Result<Receipt, ChainError> {
        let authorized = |account: Name| action.authorization.contains(&account);
        let unauthorized = |account: Name| {
            Self::system_failure(Abort::new(
                AbortCode::Unauthorized,
                format!("missing authority of {account}"),
            ))
        };
        if action.name == system::NEWACCOUNT {
            let Ok(new) = borsh::from_slice::<NewAccount>(&action.data) else {
                return Ok(Self::system_failure(system::invalid("bad newaccount data")));
            };
            if !authorized(new.creator) {
                return Ok(unauthorized(new.creator));
            }
            let store = self.store.as_ref();
            let exists = |name: Name| -> Result<bool, ChainError> {
                Ok(tx_get(&self.tx_writes, &self.pending, store, &keys::account(name))?.is_some())
            };
            if !exists(new.creator)? {
                return Ok(Self::system_failure(system::invalid(format!(
                    "creator {} does not exist",
                    new.creator
                ))));
            }
            if exists(new.name)? {
                return Ok(Self::system_failure(system::invalid(format!(
                    "account {} already exists",
                    new.name
                ))));
            }
            tx_set(
                &mut self.tx_writes,
                &keys::account(new.name),
                Some(new.key.to_vec()),
            );
            Ok(Receipt {
                outcome: Outcome::Success,
                fuel_used: 0,
                console: Vec::new(),
            })
        } else if action.name == system::SETCODE {
            let Ok(set) = borsh::from_slice::<SetCode>(&action.data) else {
                return Ok(Self::system_failure(system::invalid("bad setcode data")));
            };
            if !authorized(set.account) {
                return Ok(unauthorized(set.account));
            }
            self.set_code(set.account, &set.code)
        } else {
            Ok(Self::system_failure(Abort::new(
                AbortCode::NoHandler,
                format!("the system contract has no action {}", action.name),
            )))
        }
    }

    /// Validates and compiles `code`, records it for `account` in the transaction's writes
    /// and runs its `onInit`.
    fn set_code(&mut self, account: Name, code: &[u8]) -> Result<Receipt, ChainError> {
        let contract = match self.runtime.prepare(code) {
            Ok(c) => c,
            // Only the deterministic reason enters the receipt; a node fault is no verdict.
            Err(PrepareError::Rejected(e)) => {
                return Ok(Self::system_failure(system::invalid(e.reason())));
            }
            Err(PrepareError::Node(e)) => return Err(e.into()),
        };
        let hash = *contract.code_hash();
        tx_set(
            &mut self.tx_writes,
            &keys::code_hash(account),
            Some(hash.to_vec()),
        );
        tx_set(&mut self.tx_writes, &keys::code(&hash), Some(code.to_vec()));
        let init = Action {
            account,
            name: Name(0),
            authorization: vec![account],
            data: Vec::new(),
        };
        self.run(&contract, account, &init, Entry::Init)
    }

    fn run(
        &mut self,
        contract: &Contract,
        receiver: Name,
        action: &Action,
        entry: Entry,
    ) -> Result<Receipt, ChainError> {
        let store = self.store.as_ref();
        with_host(
            &mut self.tx_writes,
            &mut self.pending,
            store,
            receiver,
            action,
            |host| {
                self.runtime
                    .execute(contract, entry, host)
                    .map_err(ChainError::from)
            },
        )
    }

    fn run_native(
        &mut self,
        native: &NativeContract,
        action: &Action,
    ) -> Result<Receipt, ChainError> {
        let store = self.store.as_ref();
        with_host(
            &mut self.tx_writes,
            &mut self.pending,
            store,
            action.account,
            action,
            |host| {
                Ok(Receipt {
                    outcome: match native(host) {
                        Ok(()) => Outcome::Success,
                        Err(HostError::Abort(abort)) => Outcome::Failure(abort),
                        Err(HostError::Fault(fault)) => {
                            return Err(ChainError::Runtime(fault.into()));
                        }
                    },
                    fuel_used: 0,
                    console: Vec::new(),
                })
            },
        )
    }

    /// Runs `account`'s actions with `native` instead of its wasm contract (which must still
    /// be deployed: it owns the storage). For baselines only.
    pub fn set_native(&mut self, account: Name, native: NativeContract) {
        self.natives.insert(account, native);
    }

    fn merge_tx_writes(&mut self) {
        for (key, value) in self.tx_writes.drain(..) {
            self.pending.writes.insert(key, value);
        }
    }

    /// Commits the pending block: its changes, sorted by key, go to the store in one atomic
    /// commit with the new header and body.
    pub fn finish_block(&mut self) -> Result<BlockHeader, ChainError> {
        let mut changes: Vec<Change> = self.pending.writes.drain().collect();
        changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let header = BlockHeader {
            height: self.head.height + 1,
            previous: self.head_id,
            timestamp_ms: self.pending_block_time_ms(),
            transactions_root: BlockBody::transactions_root(self.pending_ids.iter().copied()),
            state_checksum: chain_checksum(
                &self.head.state_checksum,
                changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
            ),
        };
        self.commit(header.clone(), changes)?;
        Ok(header)
    }

    fn commit(&mut self, header: BlockHeader, changes: Vec<Change>) -> Result<(), ChainError> {
        let record = BlockRecord {
            header,
            body: self.pending_body.take_encoded(),
            changes,
        };
        // At most one block's sync is in flight: the previous one must be durable before the
        // next is written.
        self.sync()?;
        if self.overlap_commit {
            if let Some(sync) = self.store.commit_deferred(&record)? {
                self.in_flight = Some(std::thread::spawn(sync));
            }
        } else {
            self.store.commit(&record)?;
        }
        self.pending_id_set.clear();
        let ids: Vec<TxId> = self.pending_ids.drain(..).map(|(id, _)| id).collect();
        self.recent_ids.extend(ids.iter().copied());
        self.pending.read_cache.clear();
        self.head = record.header;
        self.head_id = self.head.id();
        self.remember(self.head.height, self.head_id);
        self.id_blocks.push_back((self.head.timestamp_ms, ids));
        self.forget_expired_ids();
        Ok(())
    }

    /// Lets [`Chain::finish_block`] return before the store's durable sync of the block ends
    /// (the sync runs on another thread while the next block executes;
    /// [`crate::Pipeline::overlap_commit`]). The block's state is visible at once either way;
    /// [`Chain::sync`] waits until it is durable.
    pub fn set_overlap_commit(&mut self, on: bool) {
        self.overlap_commit = on;
    }

    /// Waits until every committed block is durable. Errors if a background sync failed: the
    /// store can then no longer promise that the last block survives a crash, so the node
    /// must stop.
    pub fn sync(&mut self) -> Result<(), ChainError> {
        match self.in_flight.take().map(std::thread::JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result.map_err(ChainError::Store),
            Some(Err(_)) => Err(ChainError::Store(std::io::Error::other(
                "the background sync thread panicked",
            ))),
        }
    }

    /// sha256 over every committed entry in key order: a digest of the whole state, for
    /// audits. Unlike the block checksum it does not depend on history.
    pub fn state_digest(&self) -> Result<[u8; 32], ChainError> {
        Ok(crate::verify::digest_entries(&self.store.entries()?))
    }
}

/// Runs `f` with the host that `receiver`'s action sees.
fn with_host(
    tx: &mut TxWrites,
    pending: &mut Pending,
    store: &dyn StateStore,
    receiver: Name,
    action: &Action,
    f: impl FnOnce(&mut ActionHost<'_>) -> Result<Receipt, ChainError>,
) -> Result<Receipt, ChainError> {
    let mut host = ActionHost {
        contract: receiver,
        action,
        tx,
        pending,
        store,
        key: Vec::with_capacity(64),
    };
    f(&mut host)
}

impl Drop for Chain {
    fn drop(&mut self) {
        // A sync still running in the background finishes before the chain goes away.
        let _ = self.sync();
    }
}

/// A failed receipt's reason, for callers that only need the text.
pub fn failure_reason(receipt: &TxReceipt) -> Option<&Abort> {
    match &receipt.outcome {
        Outcome::Success => None,
        Outcome::Failure(abort) => Some(abort),
    }
}
