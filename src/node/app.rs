//! The ABCI application: what `tally node` answers CometBFT.
//!
//! - **CheckTx** (mempool connection): decodes the bundle within Tally's size limits, applies
//!   the chain's expiration rule at the next block's earliest time, refuses a transaction
//!   already in the mempool, and verifies every signature in one batched call; then it refuses
//!   a bundle whose payers' committed native balances cannot cover the max fees of their
//!   pending transactions plus the bundle's ([`Mempool`] keeps the
//!   verified bundle and what each payer has pending).
//! - **Recheck** after each commit drops bundles whose transactions have expired, or whose
//!   payer's balance no longer covers what it has pending.
//! - **PrepareProposal** takes the mempool's bundles in order up to CometBFT's byte limit and
//!   the chain's bandwidth maximum; when they do not all fit, the highest tips per byte
//!   first.
//! - **ProcessProposal** rejects a block holding anything CheckTx would refuse for good: a
//!   malformed or oversized bundle or transaction, or a bad signature. Bundles this node
//!   verified in CheckTx are not decoded or verified again.
//! - **FinalizeBlock** runs every transaction of every bundle, in order, as one Tally block at
//!   CometBFT's block time, and returns one result per bundle plus the block's id (BLAKE3 of
//!   its header, which carries the state checksum) as the app hash. It takes the transactions this node verified from the mempool and decodes only
//!   the others. The block's tips go to the account genesis names for its proposer
//!   ([`Ledger::proposer_account`]). The block is not durable yet.
//! - **Commit** makes it durable and tells CometBFT which blocks it may prune (`retain_height`:
//!   the lowest block Tally's store still holds). **Info** reports the last committed height
//!   and app hash, so a restarted node resumes where it was.
//! - **ListSnapshots**, **LoadSnapshotChunk** serve this node's snapshots to joining peers
//!   without the consensus lock; **OfferSnapshot**, **ApplySnapshotChunk** restore a peer's
//!   snapshot into an empty node, every chunk checked against the app hash CometBFT's light
//!   client verified ([`super::sync`]). A node that joins this way never gets InitChain: it
//!   reports height 0 until the restore is installed, then the snapshot's height.
//!
//! Determinism: results and app hash depend only on the block and the committed state. Logs
//! are built from Tally's fixed error strings and the contract's own `assert` text, never an
//! engine's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::Context;
use prost::bytes::Bytes;
use tally_chain::crypto::ResolvedKeys;
use tally_chain::snapshot::SnapshotStore;
use tally_chain::{Dimension, Name, PreparedTx, TxError, TxId};
use tendermint_proto::google::protobuf::Timestamp;
use tendermint_proto::v0_38::abci::{
    CheckTxType, ExecTxResult, RequestApplySnapshotChunk, RequestCheckTx, RequestFinalizeBlock,
    RequestInfo, RequestInitChain, RequestLoadSnapshotChunk, RequestOfferSnapshot,
    RequestPrepareProposal, RequestProcessProposal, RequestQuery, ResponseApplySnapshotChunk,
    ResponseCheckTx, ResponseCommit, ResponseFinalizeBlock, ResponseInfo, ResponseInitChain,
    ResponseListSnapshots, ResponseLoadSnapshotChunk, ResponseOfferSnapshot,
    ResponsePrepareProposal, ResponseProcessProposal, ResponseQuery, request, response,
    response_apply_snapshot_chunk, response_offer_snapshot,
    response_process_proposal::ProposalStatus,
};

use tally_host_api::limits::{FUEL_PER_ACTION, FUEL_PER_TX, FUEL_PER_TX_BYTE, MAX_BLOCK_FUEL};

use super::abci::{self, Application};
use super::bundle;
use super::ledger::{self, AppState, Ledger, Network, TxFacts, TxOutcome};
use super::mempool::{self, Balances, Candidate, Mempool, Refusal};
use super::metrics::Histogram;
use super::results::{self, BundleResult, TxSummary};
use super::sync::{self, BadSnapshots, ChunkOutcome, Restoring, Serving};

/// What a bundle may spend of each account's native balance ([`mempool::asked`]).
type Asked = BTreeMap<Name, u64>;

/// Result codes of CheckTx, FinalizeBlock and Query. Stable: clients match on them.
pub mod code {
    /// Accepted; in FinalizeBlock, every transaction of the bundle succeeded.
    pub const OK: u32 = 0;
    /// The bundle's framing is bad, or it is empty, too large or holds too many transactions.
    pub const MALFORMED_BUNDLE: u32 = 1;
    /// A transaction is refused for good: it does not decode, breaks a size limit, or a
    /// signature does not verify.
    pub const REFUSED: u32 = 2;
    /// A transaction has expired.
    pub const EXPIRED: u32 = 3;
    /// A transaction is already in the mempool (or twice in the bundle).
    pub const DUPLICATE: u32 = 4;
    /// FinalizeBlock: some transactions of the bundle failed or were rejected (the result's
    /// data says which).
    pub const PARTIAL: u32 = 5;
    /// Query: no value under that key.
    pub const NOT_FOUND: u32 = 6;
    /// Query: unknown path or malformed data.
    pub const BAD_QUERY: u32 = 7;
    /// Query `query`: the contract's query failed (the log says why).
    pub const QUERY_FAILED: u32 = 8;
    /// A payer's committed native balance cannot cover the max fees of its pending
    /// transactions and the bundle's.
    pub const CANNOT_PAY: u32 = 9;
    /// A transaction's max fee cannot pay for its own size and intrinsic fuel at the next
    /// block's prices: the chain would reject it.
    pub const MAX_FEE_TOO_LOW: u32 = 10;
    /// This node cannot take the bundle now, though it may be valid: it names a reference
    /// block the node has not committed, and the room for transactions that wait for one is
    /// full (`mempool::MAX_AWAITING_BYTES`), or its payer may not wait
    /// (`mempool::SUSPENDED_BLOCKS`), or the block is further ahead than the node waits for
    /// (it may be catching up); or a transaction expires further ahead of the node's last
    /// block than a transaction may live (the node may be behind, or the sender's clock
    /// ahead). Send it again later, or to another node.
    pub const TRY_LATER: u32 = 11;
}

/// What PrepareProposal expects a transaction to use before any block ran: the intrinsic
/// charge of a 200-byte transfer and about as much again for its action.
const INITIAL_FUEL_PER_TX: u64 = 2 * (FUEL_PER_TX + 200 * FUEL_PER_TX_BYTE);

/// The share of a block's fuel PrepareProposal fills, in percent: estimates are averages, and
/// a transaction past the budget would be rejected (`BlockFull`) rather than wait for the next
/// block.
const PROPOSAL_FUEL_PERCENT: u64 = 80;

/// Failures spelled out in one result's log; the data has every transaction's outcome.
const LOGGED_FAILURES: usize = 3;

/// The environment variable that makes `tally node` abort when CometBFT asks it to commit a
/// block at or above the given height: after FinalizeBlock, before the block is durable.
/// For crash-recovery tests only.
pub const ABORT_BEFORE_COMMIT_ENV: &str = "TALLY_TEST_ABORT_BEFORE_COMMIT";

/// How an operator runs a node (`tally node`'s flags): local choices, none of them consensus.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Blocks kept below the head, 0 for every block ([`super::ledger::DEFAULT_RETAIN_BLOCKS`]
    /// by default). CometBFT is told to prune its own block store alike (`retain_height`).
    pub retain_blocks: u64,
    /// Snapshots kept for peers ([`sync::DEFAULT_SNAPSHOT_KEEP`] by default).
    pub snapshot_keep: usize,
    /// The network's CometBFT genesis file: what a node that joins by state sync (and so
    /// gets no InitChain) learns of its network from.
    pub genesis: Option<PathBuf>,
    /// For tests: serve wrong snapshot chunks, these ways in turn.
    pub serve_bad_snapshots: Vec<BadSnapshots>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            retain_blocks: super::ledger::DEFAULT_RETAIN_BLOCKS,
            snapshot_keep: sync::DEFAULT_SNAPSHOT_KEEP,
            genesis: None,
            serve_bad_snapshots: Vec::new(),
        }
    }
}

/// The environment variable that makes `tally node` abort inside a restore: `after-chunk`
/// (once a chunk that is not the last is applied) or `before-install` (after the restored
/// store is written, before it replaces the node's). For crash-recovery tests only.
pub const ABORT_IN_RESTORE_ENV: &str = "TALLY_TEST_ABORT_IN_RESTORE";

fn restore_abort_point() -> Option<String> {
    std::env::var(ABORT_IN_RESTORE_ENV).ok()
}

/// The block between FinalizeBlock and Commit.
struct Finalized {
    height: i64,
    bundles: Vec<[u8; 32]>,
    /// The ids of the transactions the block included.
    included: Vec<TxId>,
}

/// The consensus connection's state: the chain, and the block it finalized and has not yet
/// committed. CometBFT sends this connection's requests one at a time; queries read the
/// chain between them.
#[derive(Default)]
struct Consensus {
    ledger: Option<Ledger>,
    finalized: Option<Finalized>,
}

impl Consensus {
    fn ledger(&mut self, call: &str) -> &mut Ledger {
        match self.ledger.as_mut() {
            Some(l) => l,
            None => fatal(
                &format!("{call} before InitChain"),
                "no chain in the data directory",
            ),
        }
    }
}

/// The application: one method per ABCI request. Its state has two owners, each behind one
/// lock: [`Consensus`] (the chain) and [`Mempool`] (the bundles verified and not yet
/// committed), so CheckTx admits bundles while a block executes, but for one step: reading a
/// payer's committed balance that the mempool has not read since the last commit waits for
/// the consensus lock (the chain's committed state is only reachable through it), after the
/// bundle's signatures are verified, so only authenticated bundles ever wait.
pub struct App {
    dir: PathBuf,
    options: NodeOptions,
    consensus: Mutex<Consensus>,
    mempool: Mutex<Mempool>,
    abort_before_commit: Option<i64>,
    /// Nanoseconds spent in each call, by [`CALLS`] index, for the `stats` query.
    busy_ns: [AtomicU64; CALLS.len()],
    /// What `tally node --metrics` serves, updated without the consensus lock.
    metrics: NodeMetrics,
    /// Fuel an included transaction used on average in the last non-empty block: what
    /// PrepareProposal expects of the next ones.
    fuel_per_tx: AtomicU64,
    /// Whether a block has been finalized since the process started (logged once, so a
    /// restart shows where it resumed).
    finalized_any: AtomicBool,
    /// The chain's bandwidth maximum (bytes of transactions a block may carry), once the
    /// chain exists: PrepareProposal's byte limit besides CometBFT's.
    max_block_bytes: AtomicU64,
    /// This node's snapshots, as peers fetch them (no lock: see [`sync`]).
    serving: Serving,
    /// The restore in progress, when CometBFT state-syncs this node (the snapshot
    /// connection's state; the consensus lock is taken only to install the result).
    restoring: Mutex<Option<Restoring>>,
    /// What genesis fixed, from `--genesis`: needed to join by state sync.
    network: Option<Network>,
}

/// What admission read of committed state for a bundle ([`App::read_committed`]).
struct Committed {
    /// The committed keys of its signers.
    keys: ResolvedKeys,
    /// The reference blocks it names that are not committed yet, which the pool waits for.
    awaited: Vec<(u16, u32)>,
    /// The height of the state read (`u64::MAX` before there is a chain): the pool checks the
    /// bundle against the commits since ([`mempool::Mempool::admit_awaiting`]).
    height: u64,
}

/// The calls whose time the `stats` query reports: where a node's time goes.
const CALLS: [&str; 10] = [
    "check_tx",
    "prepare_proposal",
    "process_proposal",
    "finalize_block",
    "commit",
    "query",
    "list_snapshots",
    "load_snapshot_chunk",
    "offer_snapshot",
    "apply_snapshot_chunk",
];

/// A node fault: the store failed or the state is corrupt. The node must stop rather than
/// answer CometBFT wrongly; CometBFT then stops too, and both restart from the last commit.
pub(super) fn fatal(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("tally node: fatal: {what}: {e}");
    std::process::exit(1)
}

fn time_ms(t: Option<Timestamp>) -> u64 {
    t.map_or(0, |t| {
        (t.seconds.max(0) as u64) * 1000 + (t.nanos.max(0) as u64) / 1_000_000
    })
}

fn check_response(refusal: Refusal) -> ResponseCheckTx {
    ResponseCheckTx {
        code: refusal.code,
        log: refusal.log,
        ..Default::default()
    }
}

/// Each bundle of a block: its transactions' positions in the block (or why one does not
/// decode), or why the bundle is malformed.
enum Slot {
    Malformed(String),
    Txs(Vec<Result<usize, TxError>>),
}

/// The block's transactions in order, and where each bundle's are. `verified` holds the
/// transactions this node already decoded and verified, by bundle; the others are decoded
/// here (a transaction that does not decode is rejected, the rest of its bundle runs).
fn block_txs(
    txs: &[Bytes],
    verified: Vec<Option<Vec<PreparedTx>>>,
) -> (Vec<PreparedTx>, Vec<Slot>) {
    let mut prepared = Vec::new();
    let mut slots = Vec::with_capacity(txs.len());
    for (tx, verified) in txs.iter().zip(verified) {
        if let Some(verified) = verified {
            let start = prepared.len();
            prepared.extend(verified);
            slots.push(Slot::Txs((start..prepared.len()).map(Ok).collect()));
            continue;
        }
        match bundle::split(tx) {
            Err(e) => slots.push(Slot::Malformed(e.to_string())),
            Ok(parts) => slots.push(Slot::Txs(
                parts
                    .into_iter()
                    .map(|b| {
                        PreparedTx::decode(b).map(|t| {
                            prepared.push(t);
                            prepared.len() - 1
                        })
                    })
                    .collect(),
            )),
        }
    }
    (prepared, slots)
}

impl App {
    /// Opens the application's data directory (the chain is created at InitChain, or
    /// restored by state sync). What an interrupted restore left is removed first.
    pub fn open(dir: PathBuf, options: NodeOptions) -> anyhow::Result<Self> {
        for cleaned in sync::clean_leftovers(&dir)? {
            eprintln!("tally node: removed what an interrupted restore left: {cleaned}");
        }
        let snapshots_dir = sync::snapshots_dir(&dir);
        let snapshots = Arc::new(
            SnapshotStore::open(&snapshots_dir, options.snapshot_keep).with_context(|| {
                format!("cannot open the snapshots in {}", snapshots_dir.display())
            })?,
        );
        let network = options
            .genesis
            .as_deref()
            .map(Network::from_genesis_file)
            .transpose()?;
        if let (Some(given), Some(kept)) = (&network, Ledger::network(&dir)?)
            && given.chain_id() != kept.chain_id()
        {
            anyhow::bail!(
                "--genesis is for chain {:?}, but {} holds chain {:?}: give this node its own \
                 network's genesis file",
                given.chain_id(),
                dir.display(),
                kept.chain_id()
            );
        }
        let ledger = Ledger::open(&dir, options.retain_blocks, &snapshots)?;
        let mempool = match &ledger {
            None => {
                eprintln!(
                    "tally node: no chain yet; it is created at InitChain, or restored by state sync{}",
                    if network.is_some() {
                        ""
                    } else {
                        " (which needs --genesis)"
                    }
                );
                Mempool::default()
            }
            Some(l) => {
                let head = l.head();
                eprintln!(
                    "tally node: resuming at height {} (app hash {})",
                    head.height, head.app_hash
                );
                Mempool::new(
                    head.height,
                    head.time_ms,
                    head.max_lifetime_ms,
                    head.next_prices,
                )
            }
        };
        let max_block_bytes = ledger.as_ref().map_or(u64::MAX, |l| {
            l.fee_schedule().max[Dimension::Bandwidth as usize]
        });
        let abort_before_commit = std::env::var(ABORT_BEFORE_COMMIT_ENV)
            .ok()
            .and_then(|v| v.parse().ok());
        let serving = Serving::new(snapshots, options.serve_bad_snapshots.clone());
        let app = Self {
            dir,
            options,
            consensus: Mutex::new(Consensus {
                ledger,
                finalized: None,
            }),
            mempool: Mutex::new(mempool),
            abort_before_commit,
            busy_ns: Default::default(),
            metrics: NodeMetrics::default(),
            fuel_per_tx: AtomicU64::new(INITIAL_FUEL_PER_TX),
            finalized_any: AtomicBool::new(false),
            max_block_bytes: AtomicU64::new(max_block_bytes),
            serving,
            restoring: Mutex::new(None),
            network,
        };
        // A resumed node's metrics start at its head, not at zero.
        if let Some(l) = app.consensus().ledger.as_ref() {
            app.metrics.committed(&l.head(), l.speculation());
        }
        Ok(app)
    }

    /// What CometBFT may prune below (`retain_height`): the blocks Tally's store no longer
    /// holds, but never the header of a snapshot this node still lists. A joining node's
    /// light client fetches the headers at a snapshot's height `T`, `T + 1` and `T + 2` from
    /// its RPC servers, so a snapshot whose headers were pruned could be listed and never
    /// restored. Heights are the same on both sides (Tally's block 0 is CometBFT's height
    /// 0); 0 asks CometBFT to keep everything.
    fn retain_height(&self, first_retained: u64) -> u64 {
        let oldest_listed = self
            .serving
            .store()
            .list()
            .last()
            .map_or(u64::MAX, |o| o.height);
        first_retained.min(oldest_listed)
    }

    fn restoring(&self) -> MutexGuard<'_, Option<Restoring>> {
        self.restoring.lock().expect("restore lock")
    }

    /// Finishes a verified restore: writes it into a fresh store, makes that store the
    /// node's ([`Ledger::install`]) and opens the chain on it, in place of any chain the node
    /// had (a node restarted mid-sync has the one it restored before).
    fn install(&self, restoring: Restoring) -> anyhow::Result<()> {
        let network = match Ledger::network(&self.dir)? {
            Some(n) => n,
            None => self.network.clone().context(
                "a node that joins by state sync needs its network's genesis file: start \
                 tally node with --genesis <cometbft home>/config/genesis.json",
            )?,
        };
        let (height, chunks, started) = (
            restoring.offer.height,
            restoring.offer.chunks,
            restoring.started,
        );
        let mut store = Ledger::restore_store(&self.dir)?;
        let head = restoring
            .into_restore()
            .finish(store.as_mut(), self.serving.store())
            .context("finishing the restore")?;
        store.sync()?;
        drop(store);
        if let Some(at) = restore_abort_point()
            && at == "before-install"
        {
            eprintln!("tally node: {ABORT_IN_RESTORE_ENV}={at}: aborting");
            std::process::abort();
        }
        let mut consensus = self.consensus();
        // The chain open on the store being replaced closes first.
        consensus.ledger = None;
        consensus.finalized = None;
        let ledger = Ledger::install(
            &self.dir,
            &network,
            &head,
            self.options.retain_blocks,
            self.serving.store(),
        )?;
        let h = ledger.head();
        self.max_block_bytes.store(
            ledger.fee_schedule().max[Dimension::Bandwidth as usize],
            Ordering::Relaxed,
        );
        consensus.ledger = Some(ledger);
        drop(consensus);
        self.mempool()
            .set_head(h.height, h.time_ms, h.max_lifetime_ms, h.next_prices);
        eprintln!(
            "tally node: restored the snapshot at height {height} ({chunks} chunks) in {:.1} s; \
             app hash {}",
            started.elapsed().as_secs_f64(),
            h.app_hash
        );
        Ok(())
    }

    /// The `sync` query: how this node came to its state and what it serves.
    fn sync_status(&self) -> Vec<u8> {
        let (height, first_retained, state_synced_at) = {
            let consensus = self.consensus();
            match consensus.ledger.as_ref() {
                None => (0, 0, None),
                Some(l) => (l.head().height, l.first_retained(), l.state_synced_at()),
            }
        };
        let restoring = self
            .restoring()
            .as_ref()
            .map(|r| serde_json::json!({"height": r.offer.height, "chunks": r.offer.chunks, "applied": r.applied}));
        let snapshots: Vec<_> = self
            .serving
            .store()
            .list()
            .iter()
            .map(|o| serde_json::json!({"height": o.height, "chunks": o.chunks}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "height": height,
            "first_retained": first_retained,
            "state_synced_at": state_synced_at,
            "restoring": restoring,
            "snapshots": snapshots,
        }))
        .expect("serialisable")
    }

    fn consensus(&self) -> MutexGuard<'_, Consensus> {
        self.consensus.lock().expect("consensus lock")
    }

    fn mempool(&self) -> MutexGuard<'_, Mempool> {
        self.mempool.lock().expect("mempool lock")
    }

    /// CheckTx's checks of a new bundle, cheapest first: decode, expiration and duplicates,
    /// then every signature in one batched call, then whether its payers can pay. Returns how
    /// many transactions it holds.
    fn admit(&self, hash: [u8; 32], bytes: &[u8]) -> Result<usize, Refusal> {
        self.within_bandwidth(std::slice::from_ref(&bytes))?;
        let mut txs = mempool::decode(bytes)?;
        self.mempool().screen(&txs)?;
        let Committed {
            keys,
            awaited,
            height: checked_at,
        } = self.read_committed(&txs)?;
        // Whether a bundle that waits may displace those holding its transactions, and has
        // room to wait, before verifying. One that does not wait always may (`screen` refused
        // the rest), so the usual bundle skips the lock and a second lookup of every id.
        let awaited = if awaited.is_empty() {
            awaited
        } else {
            let pool = self.mempool();
            let awaited = pool.still_ahead(awaited);
            pool.may_wait(&txs, &awaited)?;
            awaited
        };
        self.verify(&mut txs, &keys)?;
        let n = txs.len();
        let unknown = self.mempool().unknown_balances(mempool::asked(&txs).keys());
        let read = self.read_balances(unknown);
        self.mempool()
            .admit_awaiting(hash, txs, &read, awaited, checked_at)?;
        Ok(n)
    }

    /// What admitting `txs` needs of committed state, under one acquisition of the consensus
    /// lock (each waits behind a running FinalizeBlock), checked before any signature: the
    /// committed keys of their signers ([`App::read_keys`]) and the reference blocks they
    /// name that this node has not committed yet, which the pool waits for
    /// ([`mempool::awaitable`]). A bundle is refused for the first of `txs` that:
    /// - is committed already: anyone can send a committed transaction's bytes again, its key
    ///   added or stripped, as a bundle CometBFT has not seen. Admitted, it would be rejected
    ///   in the block without a fee, and its max fee would hold its payer's balance in the
    ///   pool meanwhile, so that the payer's own new bundles could be refused;
    /// - names a reference block no block up to [`mempool::MAX_REFERENCE_LEAD`] ahead can
    ///   match: the block would reject it without a fee too.
    fn read_committed(&self, txs: &[PreparedTx]) -> Result<Committed, Refusal> {
        let consensus = self.consensus();
        let Some(l) = consensus.ledger.as_ref() else {
            return Ok(Committed {
                keys: ResolvedKeys::default(),
                awaited: Vec::new(),
                height: u64::MAX,
            });
        };
        let refused = |i: usize, e: TxError, code: u32| {
            Err(Refusal::new(code, format!("transaction {i}: {e}")))
        };
        if let Some(i) = l.first_committed(txs) {
            return refused(
                i,
                TxError::Duplicate(hex::encode(txs[i].id)),
                code::DUPLICATE,
            );
        }
        let head = l.head().height;
        let mut awaited = Vec::new();
        for (i, num, prefix) in l.unknown_references(txs) {
            if let Err(e) = mempool::awaitable(num, prefix, head) {
                let lead = mempool::MAX_REFERENCE_LEAD;
                return Err(match mempool::blocks_ahead(num, head) {
                    Some(ahead) => Refusal::new(
                        code::TRY_LATER,
                        format!(
                            "transaction {i}: {e}: it names a block {ahead} after this node's \
                             head (block {head}, number {}), more than the {lead} it waits \
                             for: this node may be catching up; send it again later, or to \
                             another node",
                            head as u16
                        ),
                    ),
                    None => Refusal::new(
                        code::REFUSED,
                        format!(
                            "transaction {i}: {e}: this node's head is block {head} (number \
                             {}); name a block it has committed, as its `head` query gives, or \
                             one at most {lead} ahead",
                            head as u16
                        ),
                    ),
                });
            }
            awaited.push((num, prefix));
        }
        match l.committed_keys_of(txs) {
            Ok(keys) => Ok(Committed {
                keys,
                awaited,
                height: head,
            }),
            Err(e) => fatal("reading the signers' keys", e),
        }
    }

    /// [`mempool::verify`], counting the signatures it is given for the metrics
    /// (`tally_signatures_verified_total`): the verification work CheckTx and the proposals
    /// cost this node.
    fn verify(&self, txs: &mut [PreparedTx], keys: &ResolvedKeys) -> Result<(), Refusal> {
        let signatures: usize = txs.iter().map(|t| t.tx.signatures.len()).sum();
        self.metrics
            .signatures_verified
            .fetch_add(signatures as u64, Ordering::Relaxed);
        mempool::verify(txs, keys)
    }

    /// The committed keys of the accounts that sign `txs`, read under the consensus lock,
    /// which verification (the slow part) then does not hold: the key to verify a signature
    /// without its key under, and the key one that carries its key must carry.
    fn read_keys(&self, txs: &[PreparedTx]) -> ResolvedKeys {
        let consensus = self.consensus();
        match consensus.ledger.as_ref() {
            Some(l) => l
                .committed_keys_of(txs)
                .unwrap_or_else(|e| fatal("reading the signers' keys", e)),
            None => ResolvedKeys::default(),
        }
    }

    /// The committed native balances of `payers`, at the committed height. The consensus
    /// lock is taken only when there is something to read (the mempool keeps what it read
    /// until the next commit), and never with the mempool's: each is taken alone.
    fn read_balances(&self, payers: Vec<Name>) -> Balances {
        if payers.is_empty() {
            return Balances::default();
        }
        let consensus = self.consensus();
        let Some(l) = consensus.ledger.as_ref() else {
            return Balances::default();
        };
        let balances = payers
            .into_iter()
            .map(|p| match l.native_balance(p) {
                Ok(b) => (p, b),
                Err(e) => fatal("reading a balance", e),
            })
            .collect();
        Balances {
            height: l.head().height,
            balances,
        }
    }

    /// The bundles of `txs` that a block at `time_ms` would not reject a transaction of for
    /// no fee. Every transaction's max fee pays for its own size at this block's prices, and
    /// none has expired by `time_ms`, expires further ahead than a transaction may live, names
    /// a block the chain has not committed, or repeats a committed transaction or one an
    /// earlier bundle proposed holds: ProcessProposal refuses a proposal with any other, by
    /// the same call ([`Ledger::takeable`]), as the chain would reject the transaction, having
    /// carried it for nothing. And its accounts' committed balances cover it
    /// ([`App::affordable`]). CometBFT's mempool may still hold a bundle that was admitted
    /// at lower prices, or that this node never decoded: its recheck after a commit runs
    /// beside the next proposal, not before it. A bundle that does not decode, or that the
    /// pool does not hold and whose signatures do not verify, is dropped too.
    fn proposable(&self, txs: Vec<Bytes>, time_ms: u64) -> Vec<Bytes> {
        let hashes: Vec<[u8; 32]> = txs.iter().map(|tx| bundle::hash(tx)).collect();
        // What a pooled bundle asks, and its transactions' facts, are taken with its verdict:
        // CometBFT's recheck may remove it from the pool meanwhile, on another connection.
        let mut facts: Vec<Option<Vec<TxFacts>>> = vec![None; txs.len()];
        let (mut ok, mut asked): (Vec<Option<bool>>, Vec<Option<Asked>>) = {
            let pool = self.mempool();
            hashes
                .iter()
                .zip(&mut facts)
                .map(|(h, facts)| {
                    let ready = pool
                        .pays(h)
                        .and_then(|pays| Some(pays.is_ok() && pool.ready(h, time_ms)?));
                    if ready == Some(true) {
                        *facts = pool.facts_of(h);
                    }
                    // FinalizeBlock took its transactions: it leaves at the commit.
                    let ok = ready.map(|ready| ready && facts.is_some());
                    let asked = (ok == Some(true))
                        .then(|| pool.asked_of(h).cloned())
                        .flatten();
                    (ok, asked)
                })
                .unzip()
        };
        // The rest from scratch (this node restarted, or dropped them at a commit, or only
        // verified them in a proposal), decoded without a lock; one that holds a transaction
        // the pool holds is left out (the block would reject one of the two as a duplicate).
        let decoded: Vec<(usize, Vec<PreparedTx>)> = ok
            .iter()
            .enumerate()
            .filter(|(_, ok)| ok.is_none())
            .filter_map(|(i, _)| Some((i, mempool::decode(&txs[i]).ok()?)))
            .collect();
        let decoded: Vec<(usize, Vec<PreparedTx>)> = {
            let pool = self.mempool();
            decoded
                .into_iter()
                .filter(|(_, txs)| pool.pay(txs).is_ok() && txs.iter().all(|t| !pool.holds(&t.id)))
                .collect()
        };
        // Only those the block could take on their own are worth verifying: each alone by the
        // call below (no bundle is left out for a duplicate in another that may not verify).
        // Verifying first, PrepareProposal verified every signature of bundles no block can
        // take: those that waited for a block that never came, which the pool drops at the
        // commit but CometBFT's recheck may not have yet, are free to send, and a full waiting
        // room of them (32 MiB, about 200,000 transfers) is most of a second of verification on
        // two cores at about 250,000 signatures/s: the devnet's propose timeout is 1 s.
        let decoded: Vec<(usize, Vec<PreparedTx>, Option<Vec<TxFacts>>)> = if decoded.is_empty() {
            Vec::new()
        } else {
            let with_facts = decoded.into_iter().map(|(i, txs)| {
                let facts = Some(ledger::facts(&txs));
                (i, txs, facts)
            });
            let consensus = self.consensus();
            match consensus.ledger.as_ref() {
                Some(l) => with_facts
                    .filter(|(_, _, facts)| {
                        l.takeable(time_ms, std::slice::from_ref(facts))
                            .iter()
                            .all(Result::is_ok)
                    })
                    .collect(),
                None => with_facts.collect(),
            }
        };
        // Verified as ProcessProposal verifies them, so that what this node proposes passes
        // it whatever CometBFT hands over: each bundle on its own, as one bad signature
        // refuses only its own bundle.
        for (i, mut txs, bundle_facts) in decoded {
            let keys = self.read_keys(&txs);
            if self.verify(&mut txs, &keys).is_ok() {
                ok[i] = Some(true);
                asked[i] = Some(mempool::asked(&txs));
                facts[i] = bundle_facts;
            }
        }
        // Expirations, references and duplicates under one consensus lock, by the call
        // ProcessProposal makes (a bundle has its facts exactly when it is still taken).
        {
            let consensus = self.consensus();
            if let Some(l) = consensus.ledger.as_ref() {
                for (ok, takeable) in ok.iter_mut().zip(l.takeable(time_ms, &facts)) {
                    if *ok == Some(true) {
                        *ok = Some(takeable.is_ok());
                    }
                }
            }
        }
        self.affordable(&mut ok, &asked);
        txs.into_iter()
            .zip(ok)
            .filter(|(_, ok)| *ok == Some(true))
            .map(|(tx, _)| tx)
            .collect()
    }

    /// Leaves out of a proposal (`ok`, in its order) each bundle that would spend more of an
    /// account's committed balance than the bundles before it left: a transaction whose payer
    /// an earlier one in the block drained is rejected for no fee (`TxError::CannotPay`).
    /// The pool admitted each bundle against the balances it knew, but a block since may have
    /// spent them (transactions another node admitted), and CometBFT's recheck after a commit
    /// runs beside this proposal, not before it. `asked` holds what each bundle asks
    /// ([`mempool::asked`]). The balances the pool does not know at its head are read under
    /// one consensus lock (one read an account of the proposal, which FinalizeBlock then
    /// finds cached), and kept in the pool for CometBFT's recheck.
    fn affordable(&self, ok: &mut [Option<bool>], asked: &[Option<Asked>]) {
        let proposed: Vec<Option<&Asked>> = ok
            .iter()
            .zip(asked)
            .map(|(ok, asked)| asked.as_ref().filter(|_| *ok == Some(true)))
            .collect();
        let (mut balances, unknown) = {
            let pool = self.mempool();
            let accounts: std::collections::BTreeSet<Name> = proposed
                .iter()
                .flatten()
                .flat_map(|a| a.keys().copied())
                .collect();
            let mut known = BTreeMap::new();
            let mut unknown = Vec::new();
            for a in accounts {
                match pool.balance_at_head(&a) {
                    Some(b) => {
                        known.insert(a, b);
                    }
                    None => unknown.push(a),
                }
            }
            (known, unknown)
        };
        if !unknown.is_empty() {
            let read = self.read_balances(unknown);
            self.mempool().learn(&read);
            balances.extend(read.balances);
        }
        for (ok, covered) in ok.iter_mut().zip(mempool::affordable(&proposed, balances)) {
            if *ok == Some(true) && !covered {
                *ok = Some(false);
            }
        }
    }

    /// Whether `bundles` fit one block's bandwidth (the chain's maximum, from its committed
    /// fee schedule) by the decoded bytes their headers state, before anything is decoded.
    /// What PrepareProposal counts, so an honest proposal always fits. Without it, compressed
    /// bundles would let a proposal of CometBFT's 21 MiB make every validator decode and
    /// verify up to 8 times as many bytes of transactions ([`bundle::MAX_COMPRESSION_RATIO`]).
    /// A header that states less than its bundle holds does not decode.
    fn within_bandwidth(&self, bundles: &[impl AsRef<[u8]>]) -> Result<(), Refusal> {
        let stated = bundles
            .iter()
            .map(|b| bundle::stated_raw_len(b.as_ref()))
            .fold(0u64, u64::saturating_add);
        let max = self.max_block_bytes.load(Ordering::Relaxed);
        if stated > max {
            return Err(Refusal::new(
                code::MALFORMED_BUNDLE,
                format!(
                    "the transactions take {stated} bytes decoded, above the {max} a block may \
                     carry (the chain's bandwidth maximum)"
                ),
            ));
        }
        Ok(())
    }

    /// Decodes and verifies the proposal's bundles this node has not verified before, and
    /// keeps them for FinalizeBlock; the first reason to reject the proposal, if any. A
    /// proposal for a block at `time_ms` holding a transaction the block would reject for its
    /// expiration, its reference block or as a duplicate ([`Ledger::takeable`]), or asking
    /// more of an account's committed balance than it holds ([`App::affordable`]), is
    /// rejected before any signature is verified: the block would carry it for no fee, for
    /// good. An honest proposer leaves such bundles out by the same calls
    /// ([`App::proposable`]).
    fn verify_proposal(&self, txs: &[Bytes], time_ms: u64) -> Result<(), Refusal> {
        self.within_bandwidth(txs)?;
        let mut facts: Vec<Option<Vec<TxFacts>>> = vec![None; txs.len()];
        // What the whole proposal asks of each account: it is covered if and only if its
        // bundles are one after another, in any order (asks are never negative).
        let mut asked = Asked::new();
        let mut ask = |of: &Asked| {
            for (account, coins) in of {
                let sum = asked.entry(*account).or_default();
                *sum = sum.saturating_add(*coins);
            }
        };
        let unknown: Vec<usize> = {
            let pool = self.mempool();
            let mut unknown = Vec::new();
            for (b, tx) in txs.iter().enumerate() {
                let h = bundle::hash(tx);
                match (pool.pays(&h), pool.facts_of(&h), pool.asked_of(&h)) {
                    (Some(paid), Some(f), Some(of)) => {
                        paid?;
                        facts[b] = Some(f);
                        ask(of);
                    }
                    _ => unknown.push(b),
                }
            }
            unknown
        };
        let mut all = Vec::new();
        let mut sizes = Vec::with_capacity(unknown.len());
        for &b in &unknown {
            let decoded = mempool::decode(&txs[b])?;
            self.mempool().pay(&decoded)?;
            sizes.push((bundle::hash(&txs[b]), decoded.len()));
            facts[b] = Some(ledger::facts(&decoded));
            ask(&mempool::asked(&decoded));
            all.extend(decoded);
        }
        let has_state = {
            let consensus = self.consensus();
            if let Some(l) = consensus.ledger.as_ref() {
                let takeable = l.takeable(time_ms, &facts);
                if let Some((b, Err((i, e)))) =
                    takeable.into_iter().enumerate().find(|(_, t)| t.is_err())
                {
                    return Err(Refusal::new(
                        code::REFUSED,
                        format!("bundle {b}, transaction {i}: {e}"),
                    ));
                }
            }
            consensus.ledger.is_some()
        };
        // What every account is asked for, summed over the proposal, within its committed
        // balance, by the call PrepareProposal makes (the proposal as one bundle): a
        // transaction whose payer an earlier one drained would be rejected in the block for
        // no fee (`TxError::CannotPay`).
        let mut covered = [Some(true)];
        if has_state {
            self.affordable(&mut covered, &[Some(asked)]);
        }
        if covered[0] != Some(true) {
            return Err(Refusal::new(
                code::CANNOT_PAY,
                "the proposal asks more of an account's committed native balance than the \
                 account holds (the max fees it pays and the native transfers it signs, summed)",
            ));
        }
        // Every unknown bundle in one batched verification.
        let keys = self.read_keys(&all);
        self.verify(&mut all, &keys)?;
        let mut all = all.into_iter();
        let bundles: Vec<_> = sizes
            .into_iter()
            .map(|(h, n)| (h, all.by_ref().take(n).collect()))
            .collect();
        self.mempool().proposed(bundles);
        Ok(())
    }

    /// Queries of state: `get`'s data is the contract's 8-byte name (little-endian), then the
    /// key.
    fn query_get(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        if data.len() < 8 {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "get: data is the contract's 8-byte name (little-endian) then the key".into(),
                ..Default::default()
            };
        }
        let contract = Name(u64::from_le_bytes(data[..8].try_into().expect("8")));
        let key = &data[8..];
        match ledger.get(contract, key) {
            Ok(Some(v)) => ResponseQuery {
                key: Bytes::copy_from_slice(key),
                value: v.into(),
                height,
                ..Default::default()
            },
            Ok(None) => ResponseQuery {
                code: code::NOT_FOUND,
                key: Bytes::copy_from_slice(key),
                log: format!("{contract} has no such key"),
                height,
                ..Default::default()
            },
            Err(e) => fatal("reading state", e),
        }
    }

    /// `query`: data is the contract's and the method's 8-byte names (little-endian), then the
    /// query's data; the value is the contract's answer, its return data.
    fn query_contract(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        if data.len() < 16 {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "query: data is the contract's and the method's 8-byte names \
                      (little-endian), then the query's data"
                    .into(),
                ..Default::default()
            };
        }
        let name = |at: usize| Name(u64::from_le_bytes(data[at..at + 8].try_into().expect("8")));
        let receipt = match ledger.query(name(0), name(8), &data[16..]) {
            Ok(receipt) => receipt,
            Err(e) => fatal("answering a query", e),
        };
        match receipt.failure() {
            None => ResponseQuery {
                value: receipt.output.into(),
                info: format!("{} fuel", receipt.fuel_used),
                height,
                ..Default::default()
            },
            Some(abort) => ResponseQuery {
                code: code::QUERY_FAILED,
                log: abort.to_string(),
                info: format!("{} fuel", receipt.fuel_used),
                height,
                ..Default::default()
            },
        }
    }

    /// `keys`: data is a [`KeysRequest`](super::keys::KeysRequest) (borsh); the value is a
    /// [`KeysPage`](super::keys::KeysPage) (borsh) of at most
    /// [`MAX_KEYS_PER_QUERY`](super::keys::MAX_KEYS_PER_QUERY) entries.
    fn query_keys(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        let Ok(request) = borsh::from_slice::<super::keys::KeysRequest>(data) else {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "keys: data is a KeysRequest, borsh (src/node/keys.rs)".into(),
                ..Default::default()
            };
        };
        match ledger.keys(&request) {
            Ok(page) => ResponseQuery {
                value: borsh::to_vec(&page).expect("a page serializes").into(),
                height,
                ..Default::default()
            },
            Err(e) => fatal("reading state", e),
        }
    }

    /// `fees`: data is how many of the last blocks to list (u64 little-endian, at most
    /// [`MAX_BLOCKS`](crate::commands::fees::MAX_BLOCKS); empty: the default); the value is a
    /// [`FeesView`](crate::commands::fees::FeesView), JSON.
    fn query_fees(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        use crate::commands::fees::{DEFAULT_BLOCKS, MAX_BLOCKS};
        let blocks = match data {
            [] => DEFAULT_BLOCKS,
            bytes => match <[u8; 8]>::try_from(bytes) {
                Ok(b) => u64::from_le_bytes(b).min(MAX_BLOCKS),
                Err(_) => {
                    return ResponseQuery {
                        code: code::BAD_QUERY,
                        log: "fees: data is a block count, u64 little-endian".into(),
                        ..Default::default()
                    };
                }
            },
        };
        match ledger.fees(blocks) {
            Ok(view) => ResponseQuery {
                value: serde_json::to_vec(&view).expect("serialisable").into(),
                height,
                ..Default::default()
            },
            Err(e) => fatal("reading state", e),
        }
    }

    /// `native`: data is an account's 8-byte name (little-endian); the value is its native
    /// coins, u64 little-endian (0 for an account with none).
    fn query_native(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        let Ok(name) = <[u8; 8]>::try_from(data) else {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "native: data is an account's 8-byte name, little-endian".into(),
                ..Default::default()
            };
        };
        match ledger.native_balance(Name(u64::from_le_bytes(name))) {
            Ok(coins) => ResponseQuery {
                value: coins.to_le_bytes().to_vec().into(),
                height,
                ..Default::default()
            },
            Err(e) => fatal("reading state", e),
        }
    }

    /// `account`: data is an account's 8-byte name; the value is its public key.
    fn query_account(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        let Ok(account) = <[u8; 8]>::try_from(data) else {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "account: data is the account's 8-byte name (little-endian)".into(),
                ..Default::default()
            };
        };
        let account = Name(u64::from_le_bytes(account));
        match ledger.account_key(account) {
            Ok(Some(key)) => ResponseQuery {
                value: key.to_vec().into(),
                height,
                ..Default::default()
            },
            Ok(None) => ResponseQuery {
                code: code::NOT_FOUND,
                log: format!("there is no account {account}"),
                height,
                ..Default::default()
            },
            Err(e) => fatal("reading state", e),
        }
    }

    /// `code`: data is an account's 8-byte name; the value is the sha256 of its code.
    fn query_code(ledger: &Ledger, data: &[u8], height: i64) -> ResponseQuery {
        let Ok(account) = <[u8; 8]>::try_from(data) else {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "code: data is the account's 8-byte name (little-endian)".into(),
                ..Default::default()
            };
        };
        let account = Name(u64::from_le_bytes(account));
        match ledger.code_hash(account) {
            Ok(Some(hash)) => ResponseQuery {
                value: hash.to_vec().into(),
                height,
                ..Default::default()
            },
            Ok(None) => ResponseQuery {
                code: code::NOT_FOUND,
                log: format!("{account} has no contract"),
                height,
                ..Default::default()
            },
            Err(e) => fatal("reading state", e),
        }
    }

    fn stats(&self) -> Vec<u8> {
        let mut m = serde_json::Map::new();
        for (name, ns) in CALLS.iter().zip(&self.busy_ns) {
            let s = ns.load(Ordering::Relaxed) as f64 / 1e9;
            m.insert((*name).to_string(), serde_json::json!(s));
        }
        serde_json::to_vec(&m).expect("serialisable")
    }
}

/// One bundle's FinalizeBlock result: `data` is the bundle hash and one summary per
/// transaction ([`BundleResult`]); events carry its contracts' events and, in a bundle of one
/// transaction, its id ([`results`]); `gas_used` is the fuel of all its transactions.
fn bundle_result(
    hash: &[u8; 32],
    txs: &[Result<usize, TxError>],
    prepared: &[PreparedTx],
    outcomes: &[TxOutcome],
) -> ExecTxResult {
    let (mut ok, mut failed, mut rejected, mut fuel) = (0usize, 0usize, 0usize, 0u64);
    let mut notes = Vec::new();
    let mut events = Vec::new();
    let mut summaries = Vec::with_capacity(txs.len());
    for (i, t) in txs.iter().enumerate() {
        let (summary, note) = match t {
            Err(e) => (
                TxSummary::rejected(e),
                Some(format!("transaction {i}: rejected: {e}")),
            ),
            Ok(at) => {
                if txs.len() == 1 {
                    events.push(results::tx_event(i, &prepared[*at].id));
                }
                match &outcomes[*at] {
                    TxOutcome::Success {
                        fuel: f,
                        events: e,
                        usage,
                        fee,
                    } => {
                        fuel += f;
                        events.extend(e.iter().map(|e| results::contract_event(i, e)));
                        (
                            TxSummary::Success {
                                fuel_used: *f,
                                usage: *usage,
                                fee: *fee,
                            },
                            None,
                        )
                    }
                    TxOutcome::Failed {
                        fuel: f,
                        usage,
                        fee,
                        action,
                        abort,
                    } => {
                        fuel += f;
                        (
                            TxSummary::Failed {
                                fuel_used: *f,
                                usage: *usage,
                                fee: *fee,
                                action: action.map(|a| a as u32),
                                code: abort.code.code(),
                                message: abort.message.clone(),
                            },
                            Some(format!("transaction {i}: failed: {abort}")),
                        )
                    }
                    TxOutcome::Rejected(e) => (
                        TxSummary::rejected(e),
                        Some(format!("transaction {i}: rejected: {e}")),
                    ),
                }
            }
        };
        match summary {
            TxSummary::Success { .. } => ok += 1,
            TxSummary::Failed { .. } => failed += 1,
            TxSummary::Rejected { .. } => rejected += 1,
        }
        summaries.push(summary);
        if let Some(n) = note
            && notes.len() < LOGGED_FAILURES
        {
            notes.push(n);
        }
    }
    let mut log = format!(
        "{} transactions: {ok} succeeded, {failed} failed, {rejected} rejected",
        txs.len()
    );
    for n in notes {
        log.push_str("; ");
        log.push_str(&n);
    }
    let data = BundleResult {
        bundle: *hash,
        txs: summaries,
    }
    .encode();
    ExecTxResult {
        code: if ok == txs.len() {
            code::OK
        } else {
            code::PARTIAL
        },
        data: data.into(),
        log,
        gas_used: fuel.min(i64::MAX as u64) as i64,
        events,
        ..Default::default()
    }
}

impl Application for App {
    fn info(&self, _: RequestInfo) -> ResponseInfo {
        let consensus = self.consensus();
        let (height, hash) = match consensus.ledger.as_ref() {
            None => (0, Bytes::new()),
            Some(l) => (
                l.head().height as i64,
                Bytes::copy_from_slice(&l.app_hash()),
            ),
        };
        eprintln!("tally node: Info: last committed height {height}");
        ResponseInfo {
            data: "tally".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            app_version: 1,
            last_block_height: height,
            last_block_app_hash: hash,
        }
    }

    fn init_chain(&self, req: RequestInitChain) -> ResponseInitChain {
        let mut consensus = self.consensus();
        if consensus.ledger.is_none() {
            eprintln!("tally node: InitChain: creating the chain from genesis");
            let state: AppState = if req.app_state_bytes.is_empty() {
                AppState::default()
            } else {
                serde_json::from_slice(&req.app_state_bytes)
                    .unwrap_or_else(|e| fatal("the genesis app_state is not Tally's", e))
            };
            let created = Ledger::create(
                &self.dir,
                &req.chain_id,
                &state,
                time_ms(req.time),
                self.options.retain_blocks,
                self.serving.store(),
            )
            .unwrap_or_else(|e| fatal("cannot create the chain from genesis", e));
            consensus.ledger = Some(created);
        }
        let l = consensus.ledger("InitChain");
        let head = l.head();
        let app_hash = l.app_hash();
        self.max_block_bytes.store(
            l.fee_schedule().max[Dimension::Bandwidth as usize],
            Ordering::Relaxed,
        );
        // The mempool's lock is never taken with the consensus lock held.
        drop(consensus);
        self.mempool().set_head(
            head.height,
            head.time_ms,
            head.max_lifetime_ms,
            head.next_prices,
        );
        ResponseInitChain {
            app_hash: Bytes::copy_from_slice(&app_hash),
            ..Default::default()
        }
    }

    fn check_tx(&self, req: RequestCheckTx) -> ResponseCheckTx {
        let hash = bundle::hash(&req.tx);
        if req.r#type == CheckTxType::Recheck as i32 {
            let unknown = self.mempool().unknown_balances_of(&hash);
            let read = self.read_balances(unknown.unwrap_or_default());
            match self.mempool().recheck(&hash, &read) {
                Some(Ok(())) => return ResponseCheckTx::default(),
                Some(Err(refusal)) => return check_response(refusal),
                // Not known (this node restarted): check it from scratch.
                None => {}
            }
        }
        match self.admit(hash, &req.tx) {
            Ok(n) => ResponseCheckTx {
                code: code::OK,
                gas_wanted: n as i64,
                ..Default::default()
            },
            Err(refusal) => check_response(refusal),
        }
    }

    /// The mempool's bundles within CometBFT's byte limit, the chain's bandwidth maximum and,
    /// by the last block's fuel per transaction, the block's fuel budget (`MAX_BLOCK_FUEL`):
    /// all in CometBFT's order when they fit, else the highest tips per byte first
    /// ([`mempool::propose`]); the rest wait for the next block.
    fn prepare_proposal(&self, req: RequestPrepareProposal) -> ResponsePrepareProposal {
        let per_tx = self.fuel_per_tx.load(Ordering::Relaxed).max(1);
        let budget = (MAX_BLOCK_FUEL - FUEL_PER_ACTION) / 100 * PROPOSAL_FUEL_PERCENT;
        let max_bytes =
            (req.max_tx_bytes.max(0) as u64).min(self.max_block_bytes.load(Ordering::Relaxed));
        let txs = self.proposable(req.txs, time_ms(req.time));
        let mut candidates: Vec<Candidate> = txs
            .iter()
            .map(|tx| Candidate {
                // Its transactions' signed bytes, which the bandwidth dimension charges, and
                // at least its own bytes, which CometBFT's limit counts: within both.
                bytes: bundle::stated_raw_len(tx),
                fuel: u64::from(bundle::stated_count(tx).max(1)).saturating_mul(per_tx),
                tips: 0,
            })
            .collect();
        if mempool::all_fit(&candidates, max_bytes, budget) {
            // Nothing to rank.
            return ResponsePrepareProposal { txs };
        }
        {
            let pool = self.mempool();
            for (c, tx) in candidates.iter_mut().zip(&txs) {
                // A bundle this node did not admit (it restarted): its tips as it says; a
                // malformed one offers none.
                c.tips = pool
                    .tips_of(&bundle::hash(tx))
                    .unwrap_or_else(|| mempool::decode(tx).map_or(0, |txs| mempool::tips(&txs)));
            }
        }
        let mut txs: Vec<Option<Bytes>> = txs.into_iter().map(Some).collect();
        let txs = mempool::propose(&candidates, max_bytes, budget)
            .into_iter()
            .filter_map(|i| txs[i].take())
            .collect();
        ResponsePrepareProposal { txs }
    }

    /// Rejects a block holding anything CheckTx would refuse for good, a transaction whose
    /// max fee does not pay for its own size at this block's prices, or one the block would
    /// reject for its expiration, its reference block, as a duplicate or because its payer
    /// cannot pay ([`App::verify_proposal`]).
    fn process_proposal(&self, req: RequestProcessProposal) -> ResponseProcessProposal {
        let status = match self.verify_proposal(&req.txs, time_ms(req.time)) {
            Ok(()) => ProposalStatus::Accept,
            Err(refusal) => {
                eprintln!(
                    "tally node: rejecting a proposal at height {}: {}",
                    req.height, refusal.log
                );
                ProposalStatus::Reject
            }
        };
        ResponseProcessProposal {
            status: status as i32,
        }
    }

    fn finalize_block(&self, req: RequestFinalizeBlock) -> ResponseFinalizeBlock {
        if !self.finalized_any.swap(true, Ordering::Relaxed) {
            eprintln!("tally node: first block since start: height {}", req.height);
        }
        let hashes = mempool::hashes(&req.txs);
        let verified = {
            let mut pool = self.mempool();
            hashes.iter().map(|h| pool.take(h)).collect()
        };
        let (mut prepared, slots) = block_txs(&req.txs, verified);
        let mut consensus = self.consensus();
        let (app_hash, outcomes) = consensus
            .ledger("FinalizeBlock")
            .execute(time_ms(req.time), &req.proposer_address, &mut prepared)
            .unwrap_or_else(|e| fatal("executing a block", e));
        let (included, fuel) = outcomes.iter().fold((0u64, 0u64), |(n, f), o| match o {
            TxOutcome::Success { fuel, .. } | TxOutcome::Failed { fuel, .. } => (n + 1, f + fuel),
            TxOutcome::Rejected(_) => (n, f),
        });
        if included > 0 {
            self.fuel_per_tx
                .store(fuel.div_ceil(included), Ordering::Relaxed);
        }
        let tx_results = slots
            .into_iter()
            .zip(&hashes)
            .map(|(slot, hash)| match slot {
                Slot::Malformed(log) => ExecTxResult {
                    code: code::MALFORMED_BUNDLE,
                    log,
                    ..Default::default()
                },
                Slot::Txs(txs) => bundle_result(hash, &txs, &prepared, &outcomes),
            })
            .collect();
        let included_ids = prepared
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| !matches!(o, TxOutcome::Rejected(_)))
            .map(|(t, _)| t.id)
            .collect();
        consensus.finalized = Some(Finalized {
            height: req.height,
            bundles: hashes,
            included: included_ids,
        });
        ResponseFinalizeBlock {
            tx_results,
            app_hash: Bytes::copy_from_slice(&app_hash),
            ..Default::default()
        }
    }

    fn commit(&self) -> ResponseCommit {
        let mut consensus = self.consensus();
        let finalized = consensus.finalized.take();
        if let (Some(at), Some(f)) = (self.abort_before_commit, &finalized)
            && f.height >= at
        {
            eprintln!(
                "tally node: {ABORT_BEFORE_COMMIT_ENV}={at}: aborting before committing block {}",
                f.height
            );
            std::process::abort();
        }
        let l = consensus.ledger("Commit");
        l.commit()
            .unwrap_or_else(|e| fatal("committing a block", e));
        let head = l.head();
        let first_retained = l.first_retained();
        self.metrics.committed(&head, l.speculation());
        drop(consensus);
        let (block, included) = finalized
            .map(|f| (f.bundles, f.included))
            .unwrap_or_default();
        self.mempool().committed(
            head.height,
            head.time_ms,
            (head.ref_block_num, head.ref_block_prefix),
            head.next_prices,
            &block,
            &included,
        );
        ResponseCommit {
            retain_height: self.retain_height(first_retained) as i64,
        }
    }

    fn query(&self, req: RequestQuery) -> ResponseQuery {
        if req.path == "sync" {
            return ResponseQuery {
                value: self.sync_status().into(),
                ..Default::default()
            };
        }
        let consensus = self.consensus();
        let Some(l) = consensus.ledger.as_ref() else {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "the chain has not started: CometBFT has not sent InitChain yet, or state \
                      sync has not restored a snapshot yet"
                    .into(),
                ..Default::default()
            };
        };
        let head = l.head();
        let height = head.height as i64;
        // Every answer is the head's: a query for another height (pruned, past or future)
        // got the head's answer labelled with the head's height (helper-43's review).
        if req.height != 0 && req.height != height {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: format!(
                    "this node answers at its head only (block {height}), not at block {}: ask \
                     without a height",
                    req.height
                ),
                height,
                ..Default::default()
            };
        }
        let value = match req.path.as_str() {
            "stats" => self.stats(),
            "head" => serde_json::to_vec(&head).expect("serialisable"),
            "get" => return Self::query_get(l, &req.data, height),
            "query" => return Self::query_contract(l, &req.data, height),
            "code" => return Self::query_code(l, &req.data, height),
            "keys" => return Self::query_keys(l, &req.data, height),
            "account" => return Self::query_account(l, &req.data, height),
            "fees" => return Self::query_fees(l, &req.data, height),
            "native" => return Self::query_native(l, &req.data, height),
            other => {
                return ResponseQuery {
                    code: code::BAD_QUERY,
                    log: format!(
                        "unknown query path {other:?}: Tally answers \"head\", \"get\", \"query\", \"code\", \"keys\", \"account\", \"fees\", \"native\", \"stats\" and \"sync\""
                    ),
                    ..Default::default()
                };
            }
        };
        ResponseQuery {
            value: value.into(),
            height,
            ..Default::default()
        }
    }

    /// This node's snapshots, newest first (no consensus lock: block execution goes on).
    fn list_snapshots(&self) -> ResponseListSnapshots {
        self.serving.list()
    }

    /// A chunk of one of this node's snapshots, read from its file (no consensus lock).
    fn load_snapshot_chunk(&self, req: RequestLoadSnapshotChunk) -> ResponseLoadSnapshotChunk {
        self.serving.load(&req)
    }

    /// Starts restoring a peer's snapshot, checked against the app hash CometBFT's light
    /// client verified. A new offer replaces a restore in progress (CometBFT moved on to
    /// another snapshot).
    fn offer_snapshot(&self, req: RequestOfferSnapshot) -> ResponseOfferSnapshot {
        if self.network.is_none() && !matches!(Ledger::network(&self.dir), Ok(Some(_))) {
            eprintln!(
                "tally node: cannot join by state sync without the network's genesis: start \
                 tally node with --genesis <cometbft home>/config/genesis.json"
            );
            return ResponseOfferSnapshot {
                result: response_offer_snapshot::Result::Abort as i32,
            };
        }
        let mut restoring = self.restoring();
        *restoring = None;
        match Restoring::offer(&sync::restore_dir(&self.dir), &req) {
            Ok(r) => {
                *restoring = Some(r);
                ResponseOfferSnapshot {
                    result: response_offer_snapshot::Result::Accept as i32,
                }
            }
            Err(answer) => answer,
        }
    }

    /// Checks and applies the next chunk; the last one installs the restored state.
    fn apply_snapshot_chunk(&self, req: RequestApplySnapshotChunk) -> ResponseApplySnapshotChunk {
        use response_apply_snapshot_chunk::Result as R;
        let mut slot = self.restoring();
        let Some(restoring) = slot.take() else {
            eprintln!(
                "tally node: ApplySnapshotChunk {} with no snapshot offered",
                req.index
            );
            return sync::chunk_answer(R::Abort);
        };
        let (back, outcome) = restoring.apply(&req);
        *slot = back;
        match outcome {
            ChunkOutcome::More(answer) => {
                if restore_abort_point().as_deref() == Some("after-chunk") {
                    eprintln!(
                        "tally node: {ABORT_IN_RESTORE_ENV}=after-chunk: aborting after chunk {}",
                        req.index
                    );
                    std::process::abort();
                }
                answer
            }
            ChunkOutcome::Answer(answer) => answer,
            ChunkOutcome::Done(restoring) => match self.install(*restoring) {
                Ok(()) => sync::chunk_answer(R::Accept),
                Err(e) => {
                    eprintln!("tally node: cannot install the restored snapshot: {e:#}");
                    sync::chunk_answer(R::Abort)
                }
            },
        }
    }

    /// Every request, timed by kind for the `stats` query.
    fn handle(&self, request: request::Value) -> response::Value {
        use request::Value as Q;
        let call = match &request {
            Q::CheckTx(_) => Some(0),
            Q::PrepareProposal(_) => Some(1),
            Q::ProcessProposal(_) => Some(2),
            Q::FinalizeBlock(_) => Some(3),
            Q::Commit(_) => Some(4),
            Q::Query(_) => Some(5),
            Q::ListSnapshots(_) => Some(6),
            Q::LoadSnapshotChunk(_) => Some(7),
            Q::OfferSnapshot(_) => Some(8),
            Q::ApplySnapshotChunk(_) => Some(9),
            _ => None,
        };
        let start = Instant::now();
        let response = abci::dispatch(self, request);
        if let Some(i) = call {
            let took = start.elapsed();
            self.busy_ns[i].fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
            self.metrics.calls[i].observe(took);
        }
        response
    }
}

/// The gauges and histograms `tally node --metrics` serves ([`super::metrics`]).
#[derive(Default)]
struct NodeMetrics {
    /// Each ABCI call's time, by [`CALLS`] index.
    calls: [Histogram; CALLS.len()],
    height: AtomicU64,
    fees_burned: AtomicU64,
    prices: [AtomicU64; tally_chain::fee::DIMENSIONS],
    speculated: AtomicU64,
    confirmed: AtomicU64,
    /// Signatures given to verification by CheckTx and the proposals ([`App::verify`]).
    signatures_verified: AtomicU64,
}

impl NodeMetrics {
    /// Takes the committed head's figures.
    fn committed(&self, head: &super::ledger::Head, (speculated, confirmed): (u64, u64)) {
        self.height.store(head.height, Ordering::Relaxed);
        self.fees_burned.store(head.fees_burned, Ordering::Relaxed);
        for (p, v) in self.prices.iter().zip(head.next_prices) {
            p.store(v, Ordering::Relaxed);
        }
        self.speculated.store(speculated, Ordering::Relaxed);
        self.confirmed.store(confirmed, Ordering::Relaxed);
    }
}

impl App {
    /// The metrics in Prometheus's text format. Takes the mempool's lock for a moment, never
    /// the consensus lock.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        let m = &self.metrics;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP tally_abci_call_seconds Time of each ABCI call (FinalizeBlock executes a block, Commit makes it durable, CheckTx verifies a bundle).\n# TYPE tally_abci_call_seconds histogram"
        );
        for (i, call) in CALLS.iter().enumerate() {
            m.calls[i].render(
                &mut out,
                "tally_abci_call_seconds",
                &format!("call=\"{call}\""),
            );
        }
        let (bundles, transactions) = self.mempool().size();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let gauges = [
            (
                "tally_height",
                "gauge",
                "The last committed height.",
                load(&m.height),
            ),
            (
                "tally_mempool_bundles",
                "gauge",
                "Bundles in the mempool.",
                bundles as u64,
            ),
            (
                "tally_mempool_transactions",
                "gauge",
                "Transactions in the mempool.",
                transactions as u64,
            ),
            (
                "tally_fees_burned_total",
                "counter",
                "Coins burned in fees since genesis.",
                load(&m.fees_burned),
            ),
            (
                "tally_speculated_total",
                "counter",
                "Transactions run speculatively in parallel since the node started.",
                load(&m.speculated),
            ),
            (
                "tally_speculation_confirmed_total",
                "counter",
                "Speculative runs that stood (no re-execution).",
                load(&m.confirmed),
            ),
            (
                "tally_signatures_verified_total",
                "counter",
                "Signatures CheckTx, PrepareProposal and ProcessProposal gave to verification since the node started.",
                load(&m.signatures_verified),
            ),
        ];
        for (name, kind, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP tally_fee_price The next block's price of each fee dimension.\n# TYPE tally_fee_price gauge"
        );
        for d in Dimension::ALL {
            let _ = writeln!(
                out,
                "tally_fee_price{{dimension=\"{}\"}} {}",
                d.name(),
                load(&m.prices[d as usize])
            );
        }
        out
    }
}
