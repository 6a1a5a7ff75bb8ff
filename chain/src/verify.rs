//! Audits of stored blocks: linkage, transaction roots, chained checksums, and a full
//! re-execution from genesis when genesis is still retained.

use std::sync::Arc;

use tally_runtime::Runtime;

use crate::block::BlockHeader;
use crate::chain::Chain;
use crate::config::ChainConfig;
use crate::error::ChainError;
use crate::pipeline::prepare_block;
use crate::receipt::TxResult;
use crate::store::log::{LogOptions, LogStore};
use crate::store::{
    BlockRecord, ChangeFn, ChangeSource, Durability, StateStore, StoreError, digest_entries,
};
use crate::tx::BlockBody;

/// What [`verify`] checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// First block checked.
    pub from: u64,
    /// Last block checked (the head).
    pub to: u64,
    /// Whether every block was re-executed from genesis (else genesis was pruned, and the
    /// retained blocks were checked against their recorded changes).
    pub replayed: bool,
    /// Transactions re-executed.
    pub transactions: u64,
    /// Digest of the store's whole state.
    pub state_digest: [u8; 32],
    /// The state checksum of the genesis block, when it is retained: what the replay trusted.
    pub genesis_checksum: Option<[u8; 32]>,
}

fn corrupt(msg: String) -> ChainError {
    ChainError::Corrupt(msg)
}

/// Checks every retained block of `store`. Each block must link to the one before, its
/// transactions root must match its body's signed bytes, every transaction in it must be one a
/// node admits, and its state checksum must equal the previous checksum chained over its
/// recorded changes. If genesis is retained, every block after it is also re-executed from its
/// signed transactions on a fresh chain and must produce the identical header and outcomes,
/// and the replayed state must equal the store's state. Only block 0's changes are taken as
/// recorded: genesis is the chain's root of trust, and [`VerifyReport::genesis_checksum`]
/// names it.
///
/// The replay runs on a scratch log store in the system's temporary directory, into which
/// block 0's changes stream: auditing a ten-million-account chain holds none of its state in
/// memory.
pub fn verify(
    store: &dyn StateStore,
    runtime: Arc<Runtime>,
    config: &ChainConfig,
) -> Result<VerifyReport, ChainError> {
    let head = store
        .head()
        .cloned()
        .ok_or_else(|| corrupt("the store has no blocks".into()))?;
    let from = store.first_retained();
    let mut replay: Option<Replay> = None;
    let mut previous: Option<BlockHeader> = None;
    let mut transactions = 0;
    for height in from..=head.height {
        let header = if height == 0 {
            let genesis = Replay::genesis(store, runtime.clone(), config)?;
            let header = genesis.chain.head().clone();
            replay = Some(genesis);
            header
        } else {
            let record = store
                .block(height)?
                .ok_or_else(|| corrupt(format!("block {height} is missing")))?;
            let body = check_block(&record, previous.as_ref())?;
            if let Some(replay) = replay.as_mut() {
                transactions += replay.block(&record.header, body, config)?;
            }
            record.header
        };
        previous = Some(header);
    }
    let state_digest = digest_entries(store.entries()?)?;
    if let Some(replay) = &replay
        && replay.chain.state_digest()? != state_digest
    {
        return Err(corrupt(
            "the replayed state differs from the stored state".into(),
        ));
    }
    Ok(VerifyReport {
        from,
        to: head.height,
        genesis_checksum: replay.as_ref().map(|r| r.genesis_checksum),
        replayed: replay.is_some(),
        transactions,
        state_digest,
    })
}

/// The checks of one stored block after genesis that need no execution: its height, its
/// body against the transactions root, every transaction's admission, its link to `previous`
/// (`None`: pruned) and its checksum over its recorded changes. Returns its body.
fn check_block(
    record: &BlockRecord,
    previous: Option<&BlockHeader>,
) -> Result<BlockBody, ChainError> {
    let header = &record.header;
    let height = header.height;
    let body: BlockBody = borsh::from_slice(&record.body)
        .map_err(|e| corrupt(format!("block {height} body: {e}")))?;
    if body.success.len() != body.transactions.len() || body.root() != header.transactions_root {
        return Err(corrupt(format!(
            "block {height}: transactions root mismatch"
        )));
    }
    // Every stored transaction must be one a node admits: within the limits, and in its
    // one canonical encoding (a block re-hashed around reordered signatures is not).
    for (i, tx) in body.transactions.iter().enumerate() {
        if let Err(e) = tx.check_limits(tx.encode().len()) {
            return Err(corrupt(format!(
                "block {height}: transaction {i} could not be admitted: {e}"
            )));
        }
    }
    if let Some(p) = previous {
        if header.previous != p.id() {
            return Err(corrupt(format!(
                "block {height} does not link to {}",
                p.height
            )));
        }
        let recomputed = record.changes.checksum(&p.state_checksum);
        if recomputed != header.state_checksum {
            return Err(corrupt(format!("block {height}: state checksum mismatch")));
        }
    }
    Ok(body)
}

/// A chain re-executing the stored blocks from genesis, on a scratch store.
struct Replay {
    chain: Chain,
    genesis_checksum: [u8; 32],
    /// Holds the scratch store's directory until the replay is dropped.
    _dir: tempfile::TempDir,
}

impl Replay {
    /// A new chain whose genesis is `store`'s block 0, streamed from it. Its header must be
    /// the stored one.
    fn genesis(
        store: &dyn StateStore,
        runtime: Arc<Runtime>,
        config: &ChainConfig,
    ) -> Result<Self, ChainError> {
        let (stored, body) = store
            .header_and_body(0)?
            .ok_or_else(|| corrupt("block 0 is missing".into()))?;
        if stored.height != 0 {
            return Err(corrupt(format!("block 0 says it is {}", stored.height)));
        }
        let genesis_body: BlockBody =
            borsh::from_slice(&body).map_err(|e| corrupt(format!("block 0 body: {e}")))?;
        if !genesis_body.transactions.is_empty() {
            return Err(corrupt("the genesis block carries transactions".into()));
        }
        let dir = tempfile::tempdir()?;
        let scratch = LogStore::open(dir.path().join("store"), LogOptions::default())?;
        let replay_config = ChainConfig {
            retain_blocks: config.retain_blocks.max(2),
            ..config.clone()
        };
        let builder = Chain::genesis_recorded(runtime, Box::new(scratch), replay_config)?;
        let changes = StoredChanges::new(store, 0)?;
        let mut chain = builder.finish_with(&changes)?;
        crate::chain::check_schedule(chain.store(), &config.fees)?;
        crate::chain::check_snapshot_schedule(chain.store(), &config.snapshots)?;
        // The headers commit to snapshot digests: the replay builds the snapshots again, beside
        // its scratch store, and must commit to the same ones.
        chain.set_snapshots(Arc::new(crate::snapshot::SnapshotStore::open(
            &dir.path().join("snapshots"),
            1,
        )?))?;
        if chain.head() != &stored {
            return Err(corrupt(
                "block 0: its recorded changes give another header".into(),
            ));
        }
        Ok(Self {
            chain,
            genesis_checksum: stored.state_checksum,
            _dir: dir,
        })
    }

    /// Re-executes the block whose header is `header` from its signed transactions (`body`):
    /// it must give the same outcome for each, and the same header. Returns how many
    /// transactions it ran.
    fn block(
        &mut self,
        header: &BlockHeader,
        body: BlockBody,
        config: &ChainConfig,
    ) -> Result<u64, ChainError> {
        let height = header.height;
        let pipeline = self.chain.pipeline();
        let prepared = prepare_block(
            body.transactions,
            config.check_signatures,
            &pipeline,
            &self.chain.committed_keys(),
        );
        // The header names the proposer its tips went to (consensus chose it).
        let executed =
            self.chain
                .execute_block_by(header.timestamp_ms, header.proposer, &prepared)?;
        for (result, success) in executed.results.iter().zip(&body.success) {
            let same = match result {
                TxResult::Included(receipt) => receipt.is_success() == *success,
                TxResult::Rejected(_) => false,
            };
            if !same {
                return Err(corrupt(format!(
                    "block {height}: a transaction replays with another outcome ({result:?})"
                )));
            }
        }
        self.chain.commit(Durability::None)?;
        if self.chain.head() != header {
            return Err(corrupt(format!(
                "block {height}: replay gives another header"
            )));
        }
        Ok(prepared.len() as u64)
    }
}

/// A stored block's changes as a [`ChangeSource`]: each pass reads them from the store
/// again, so they are never all in memory.
struct StoredChanges<'a> {
    store: &'a dyn StateStore,
    height: u64,
    len: u64,
}

impl<'a> StoredChanges<'a> {
    fn new(store: &'a dyn StateStore, height: u64) -> Result<Self, ChainError> {
        let len = store
            .changes(height)?
            .ok_or_else(|| corrupt(format!("block {height} is missing")))?
            .len;
        Ok(Self { store, height, len })
    }
}

impl ChangeSource for StoredChanges<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()> {
        let io = |e: StoreError| std::io::Error::other(e);
        let changes = self
            .store
            .changes(self.height)
            .map_err(io)?
            .ok_or_else(|| std::io::Error::other(format!("block {} is gone", self.height)))?;
        for change in changes.iter {
            let (key, value) = change.map_err(io)?;
            f(&key, value.as_deref())?;
        }
        Ok(())
    }
}
