//! The chain: executes transactions sequentially against a pending block and commits blocks.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use tally_host_api::{Abort, Name};
use tally_runtime::{Contract, Entry, Outcome, Receipt, Runtime};

use crate::block::{BlockHeader, BlockId, chain_checksum};
use crate::error::{ChainError, TxError};
use crate::host::{ActionHost, Pending, TxWrites};
use crate::state::{Change, StateStore, keys};
use crate::tx::{Transaction, TxId};

/// How many recent blocks a transaction may reference (TaPoS). `ref_block_num` has 16 bits,
/// as in EOS, whose `block_summary` table keeps the same 65,536 entries.
const TAPOS_WINDOW: usize = 1 << 16;

/// Chain parameters fixed at genesis.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    /// Time of the genesis block, ms since the Unix epoch.
    pub genesis_time_ms: u64,
    /// Block time advances by this much per block (EOS: 500 ms).
    pub block_interval_ms: u64,
    /// Longest a transaction may live past the block time (EOS: one hour).
    pub max_tx_lifetime_ms: u64,
}

impl Default for ChainConfig {
    fn default() -> Self {
        Self {
            // 2026-01-01T00:00:00Z: fixed, so every node and run derives the same blocks.
            genesis_time_ms: 1_767_225_600_000,
            block_interval_ms: 500,
            max_tx_lifetime_ms: 3_600_000,
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
    contracts: FxHashMap<Name, Arc<Contract>>,
    pending: Pending,
    pending_txs: Vec<(TxId, bool)>,
    tx_writes: TxWrites,
}

impl Chain {
    /// Opens a chain on `store`: writes the genesis block if the store is empty, or resumes
    /// at its last committed block.
    pub fn open(
        runtime: Arc<Runtime>,
        mut store: Box<dyn StateStore>,
        config: ChainConfig,
    ) -> Result<Self, ChainError> {
        let head = match store.head() {
            Some(head) => head.clone(),
            None => {
                let genesis = BlockHeader {
                    height: 0,
                    previous: [0; 32],
                    timestamp_ms: config.genesis_time_ms,
                    transactions_root: Sha256::digest([]).into(),
                    state_checksum: chain_checksum(&[0; 32], std::iter::empty()),
                };
                store.commit(&genesis, &[])?;
                genesis
            }
        };
        let head_id = head.id();
        let mut chain = Self {
            runtime,
            store,
            config,
            head,
            head_id,
            recent: vec![(u64::MAX, 0); TAPOS_WINDOW],
            contracts: FxHashMap::default(),
            pending: Pending::default(),
            pending_txs: Vec::new(),
            tx_writes: Vec::new(),
        };
        chain.remember(chain.head.height, chain.head_id);
        Ok(chain)
    }

    fn remember(&mut self, height: u64, id: BlockId) {
        self.recent[height as usize % TAPOS_WINDOW] = (height, BlockHeader::ref_prefix(&id));
    }

    /// The last committed block.
    pub fn head(&self) -> &BlockHeader {
        &self.head
    }

    /// The last committed block's id.
    pub fn head_id(&self) -> BlockId {
        self.head_id
    }

    /// The runtime executing contracts.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The time of the block being built.
    pub fn pending_block_time_ms(&self) -> u64 {
        self.head.timestamp_ms + self.config.block_interval_ms
    }

    /// `(ref_block_num, ref_block_prefix)` naming the head block, for new transactions.
    pub fn tapos(&self) -> (u16, u32) {
        (
            self.head.height as u16,
            BlockHeader::ref_prefix(&self.head_id),
        )
    }

    /// The value of `contract`'s storage key `key`, including writes of the pending block.
    pub fn get(&self, contract: Name, key: &[u8]) -> Option<Vec<u8>> {
        let key = keys::contract(contract, key);
        self.pending
            .get(self.store.as_ref(), &key)
            .map(|v| v.into_owned())
    }

    /// Deploys `code` to `account` in the pending block and runs its `onInit`.
    ///
    /// Validation and compilation happen here, once; the compiled module is cached in memory
    /// and, if the runtime has a cache directory, on disk.
    pub fn deploy(&mut self, account: Name, code: &[u8]) -> Result<Receipt, ChainError> {
        let contract = self.runtime.prepare(code)?;
        let action = crate::tx::Action {
            account,
            name: Name(0),
            authorization: vec![account],
            data: Vec::new(),
        };
        self.tx_writes.clear();
        let receipt = self.run(&contract, account, &action, Entry::Init)?;
        if let Outcome::Failure(abort) = &receipt.outcome {
            return Err(ChainError::InitFailed(abort.clone()));
        }
        let hash = *contract.code_hash();
        self.tx_writes
            .push((keys::code_hash(account), Some(hash.to_vec())));
        self.tx_writes
            .push((keys::code(&hash), Some(code.to_vec())));
        self.merge_tx_writes();
        self.contracts.insert(account, contract);
        Ok(receipt)
    }

    /// Writes `value` under `contract`'s storage key `key` in the pending block, bypassing
    /// contract code: for genesis allocations and benchmark setup. The write is part of the
    /// block's changes and checksum like any other.
    pub fn allocate(&mut self, contract: Name, key: &[u8], value: &[u8]) {
        self.pending
            .writes
            .insert(keys::contract(contract, key), Some(value.to_vec()));
    }

    /// The compiled contract of `account`: from memory, else from state (through the
    /// runtime's module cache, so a restarted node does not recompile).
    fn contract(&mut self, account: Name) -> Result<Arc<Contract>, ChainError> {
        if let Some(c) = self.contracts.get(&account) {
            return Ok(c.clone());
        }
        let store = self.store.as_ref();
        let Some(hash) = self.pending.get(store, &keys::code_hash(account)) else {
            return Err(TxError::NoContract(account).into());
        };
        let hash: [u8; 32] = hash
            .as_ref()
            .try_into()
            .map_err(|_| ChainError::Corrupt(format!("code hash of {account} is not 32 bytes")))?;
        let code = self
            .pending
            .get(store, &keys::code(&hash))
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

    /// Runs `tx` atomically in the pending block: all its actions' writes apply, or none do.
    ///
    /// `Err` means the transaction was rejected (or the node failed) and is not included. An
    /// included transaction whose action failed returns `Ok` with a failed receipt and leaves
    /// no trace in state.
    pub fn push_transaction(&mut self, tx: &Transaction) -> Result<TxReceipt, ChainError> {
        self.check(tx)?;
        let id = tx.id();
        self.tx_writes.clear();
        let mut fuel_used = 0;
        let mut outcome = Outcome::Success;
        let mut failed_action = None;
        for (i, action) in tx.actions.iter().enumerate() {
            let contract = self.contract(action.account)?;
            let entry = Entry::Action {
                receiver: action.account,
                code: action.account,
                action: action.name,
            };
            let receipt = self.run(&contract, action.account, action, entry)?;
            fuel_used += receipt.fuel_used;
            if let Outcome::Failure(abort) = receipt.outcome {
                outcome = Outcome::Failure(abort);
                failed_action = Some(i);
                break;
            }
        }
        let success = failed_action.is_none();
        if success {
            self.merge_tx_writes();
        }
        self.pending_txs.push((id, success));
        Ok(TxReceipt {
            id,
            outcome,
            failed_action,
            fuel_used,
        })
    }

    fn run(
        &mut self,
        contract: &Contract,
        receiver: Name,
        action: &crate::tx::Action,
        entry: Entry,
    ) -> Result<Receipt, ChainError> {
        let mut host = ActionHost {
            contract: receiver,
            action,
            tx: &mut self.tx_writes,
            pending: &mut self.pending,
            store: self.store.as_ref(),
            key: Vec::with_capacity(64),
        };
        Ok(self.runtime.execute(contract, entry, &mut host)?)
    }

    fn merge_tx_writes(&mut self) {
        for (key, value) in self.tx_writes.drain(..) {
            self.pending.writes.insert(key, value);
        }
    }

    /// Commits the pending block: its changes, sorted by key, go to the store in one atomic
    /// commit with the new header.
    pub fn finish_block(&mut self) -> Result<BlockHeader, ChainError> {
        let mut changes: Vec<Change> = self.pending.writes.drain().collect();
        changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let state_checksum = chain_checksum(
            &self.head.state_checksum,
            changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
        );
        let mut root = Sha256::new();
        for (id, success) in self.pending_txs.drain(..) {
            root.update(id);
            root.update([success as u8]);
        }
        let header = BlockHeader {
            height: self.head.height + 1,
            previous: self.head_id,
            timestamp_ms: self.pending_block_time_ms(),
            transactions_root: root.finalize().into(),
            state_checksum,
        };
        self.store.commit(&header, &changes)?;
        self.pending.read_cache.clear();
        self.head_id = header.id();
        self.head = header.clone();
        self.remember(header.height, self.head_id);
        Ok(header)
    }

    /// sha256 over every committed entry in key order: a digest of the whole state, for
    /// audits. Unlike the block checksum it does not depend on history.
    pub fn state_digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for (k, v) in self.store.entries() {
            h.update((k.len() as u32).to_le_bytes());
            h.update(&k);
            h.update((v.len() as u32).to_le_bytes());
            h.update(&v);
        }
        h.finalize().into()
    }
}

/// A failed receipt's reason, for callers that only need the text.
pub fn failure_reason(receipt: &TxReceipt) -> Option<&Abort> {
    match &receipt.outcome {
        Outcome::Success => None,
        Outcome::Failure(abort) => Some(abort),
    }
}
