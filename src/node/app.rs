//! The ABCI application: what `tally node` answers CometBFT.
//!
//! - **CheckTx** (mempool connection): splits the bundle, decodes each transaction within
//!   Tally's size limits, checks expiration against the last block, refuses a transaction
//!   already in the mempool, and verifies every signature in one batched call. A bundle that
//!   passes is remembered by its hash as verified, with its transactions' ids.
//! - **Recheck** after each commit drops bundles whose transactions have expired.
//! - **PrepareProposal** takes the mempool's bundles in order up to CometBFT's byte limit.
//! - **ProcessProposal** rejects a block holding anything CheckTx would refuse for good: a
//!   malformed or oversized bundle or transaction, or a bad signature. Bundles this node
//!   verified in CheckTx are not verified again.
//! - **FinalizeBlock** runs every transaction of every bundle, in order, as one Tally block at
//!   CometBFT's block time, and returns one result per bundle plus the state checksum as the
//!   app hash. The block is not durable yet.
//! - **Commit** makes it durable. **Info** reports the last committed height and app hash, so a
//!   restarted node resumes where it was.
//!
//! Determinism: results and app hash depend only on the block and the committed state. Logs
//! are built from Tally's fixed error strings and the contract's own `assert` text, never an
//! engine's.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prost::bytes::Bytes;
use tally_chain::{Check, Name, PreparedTx, TxId};
use tendermint_proto::google::protobuf::Timestamp;
use tendermint_proto::v0_38::abci::{
    CheckTxType, ExecTxResult, RequestCheckTx, RequestFinalizeBlock, RequestInitChain,
    RequestPrepareProposal, RequestProcessProposal, RequestQuery, ResponseCheckTx, ResponseCommit,
    ResponseFinalizeBlock, ResponseInfo, ResponseInitChain, ResponsePrepareProposal,
    ResponseProcessProposal, ResponseQuery, request, response,
    response_process_proposal::ProposalStatus,
};

use tally_host_api::limits::{FUEL_PER_ACTION, FUEL_PER_TX, FUEL_PER_TX_BYTE, MAX_BLOCK_FUEL};

use super::abci::Application;
use super::bundle;
use super::ledger::{Genesis, Ledger, TxOutcome};
use tally_chain::pipeline::verify_batched;

/// Result codes of CheckTx, FinalizeBlock and Query. Stable: clients match on them.
pub mod code {
    /// Accepted; in FinalizeBlock, every transaction of the bundle succeeded.
    pub const OK: u32 = 0;
    /// The bundle's framing is bad, or it is empty, too large or holds too many transactions.
    pub const MALFORMED_BUNDLE: u32 = 1;
    /// A transaction is refused for good: it does not decode, breaks a size limit, or a
    /// signature does not verify.
    pub const REFUSED: u32 = 2;
    /// A transaction has expired, or expires further ahead than a transaction may live.
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
}

/// Outcome bytes of a FinalizeBlock result's data, one per transaction after the bundle hash.
pub mod outcome {
    /// Included and successful.
    pub const SUCCESS: u8 = 0;
    /// Included; an action failed, so it changed nothing.
    pub const FAILED: u8 = 1;
    /// Not included.
    pub const REJECTED: u8 = 2;
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

/// Maps keyed by bundle hashes and transaction ids, which senders choose: a seeded hash, so
/// none can send bundles that collide in them.
type KeyedMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A bundle that passed CheckTx and is in CometBFT's mempool.
struct Pooled {
    ids: Vec<TxId>,
    /// The earliest expiration among its transactions: it is dropped once a block reaches it.
    expires_ms: u64,
}

/// What the mempool connection knows.
#[derive(Default)]
struct Pool {
    /// Verified bundles in the mempool, by CometBFT hash.
    bundles: KeyedMap<[u8; 32], Pooled>,
    /// Ids of the transactions in them.
    ids: KeyedMap<TxId, [u8; 32]>,
    /// Last committed block time and the longest transaction lifetime.
    head_time_ms: u64,
    max_lifetime_ms: u64,
}

impl Pool {
    fn remove(&mut self, hash: &[u8; 32]) {
        if let Some(p) = self.bundles.remove(hash) {
            for id in p.ids {
                self.ids.remove(&id);
            }
        }
    }
}

/// The block between FinalizeBlock and Commit.
struct Finalized {
    height: i64,
    bundles: Vec<[u8; 32]>,
}

/// The application.
pub struct App {
    dir: PathBuf,
    ledger: Mutex<Option<Ledger>>,
    pool: Mutex<Pool>,
    /// Bundles this node verified in ProcessProposal (not in its mempool), for FinalizeBlock.
    proposal_verified: Mutex<HashSet<[u8; 32]>>,
    finalized: Mutex<Option<Finalized>>,
    abort_before_commit: Option<i64>,
    /// Nanoseconds spent in each call, by [`CALLS`] index, for the `stats` query.
    busy_ns: [AtomicU64; CALLS.len()],
    /// Fuel an included transaction used on average in the last non-empty block: what
    /// PrepareProposal expects of the next ones.
    fuel_per_tx: AtomicU64,
    /// Whether a block has been finalized since the process started (logged once, so a
    /// restart shows where it resumed).
    finalized_any: std::sync::atomic::AtomicBool,
}

/// The calls whose time the `stats` query reports: where a node's time goes.
const CALLS: [&str; 6] = [
    "check_tx",
    "prepare_proposal",
    "process_proposal",
    "finalize_block",
    "commit",
    "query",
];

/// A node fault: the store failed or the state is corrupt. The node must stop rather than
/// answer CometBFT wrongly; CometBFT then stops too, and both restart from the last commit.
fn fatal(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("tally node: fatal: {what}: {e}");
    std::process::exit(1)
}

fn time_ms(t: Option<Timestamp>) -> u64 {
    t.map_or(0, |t| {
        (t.seconds.max(0) as u64) * 1000 + (t.nanos.max(0) as u64) / 1_000_000
    })
}

fn check_response(code: u32, log: String) -> ResponseCheckTx {
    ResponseCheckTx {
        code,
        log,
        ..Default::default()
    }
}

impl App {
    /// Opens the application's data directory (the chain is created at InitChain).
    pub fn open(dir: PathBuf) -> anyhow::Result<Self> {
        let ledger = Ledger::open(&dir)?;
        let mut pool = Pool::default();
        match &ledger {
            None => eprintln!("tally node: no chain yet; it is created at InitChain"),
            Some(l) => {
                let head = l.head();
                eprintln!(
                    "tally node: resuming at height {} (app hash {})",
                    head.height, head.app_hash
                );
            }
        }
        if let Some(l) = &ledger {
            let head = l.head();
            pool.head_time_ms = head.time_ms;
            pool.max_lifetime_ms = head.max_lifetime_ms;
        }
        let abort_before_commit = std::env::var(ABORT_BEFORE_COMMIT_ENV)
            .ok()
            .and_then(|v| v.parse().ok());
        Ok(Self {
            dir,
            ledger: Mutex::new(ledger),
            pool: Mutex::new(pool),
            proposal_verified: Mutex::new(HashSet::new()),
            finalized: Mutex::new(None),
            abort_before_commit,
            busy_ns: Default::default(),
            fuel_per_tx: AtomicU64::new(INITIAL_FUEL_PER_TX),
            finalized_any: Default::default(),
        })
    }

    fn info(&self) -> ResponseInfo {
        let ledger = self.ledger.lock().expect("ledger lock");
        let (height, hash) = match ledger.as_ref() {
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
        let mut ledger = self.ledger.lock().expect("ledger lock");
        if ledger.is_none() {
            let genesis: Genesis = if req.app_state_bytes.is_empty() {
                Genesis::default()
            } else {
                serde_json::from_slice(&req.app_state_bytes)
                    .unwrap_or_else(|e| fatal("the genesis app_state is not Tally's", e))
            };
            let created = Ledger::create(&self.dir, &req.chain_id, &genesis, time_ms(req.time))
                .unwrap_or_else(|e| fatal("cannot create the chain from genesis", e));
            *ledger = Some(created);
        }
        let l = ledger.as_ref().expect("created above");
        let head = l.head();
        let mut pool = self.pool.lock().expect("pool lock");
        pool.head_time_ms = head.time_ms;
        pool.max_lifetime_ms = head.max_lifetime_ms;
        ResponseInitChain {
            app_hash: Bytes::copy_from_slice(&l.app_hash()),
            ..Default::default()
        }
    }

    fn check_tx(&self, req: RequestCheckTx) -> ResponseCheckTx {
        let hash = bundle::hash(&req.tx);
        if req.r#type == CheckTxType::Recheck as i32 {
            let mut pool = self.pool.lock().expect("pool lock");
            if let Some(p) = pool.bundles.get(&hash) {
                if p.expires_ms <= pool.head_time_ms {
                    let log = format!(
                        "expired at {} ms; the last block's time is {} ms",
                        p.expires_ms, pool.head_time_ms
                    );
                    pool.remove(&hash);
                    return check_response(code::EXPIRED, log);
                }
                return check_response(code::OK, String::new());
            }
            // Not known (this node restarted): check it from scratch.
        }
        let (head_time_ms, max_lifetime_ms) = {
            let pool = self.pool.lock().expect("pool lock");
            (pool.head_time_ms, pool.max_lifetime_ms)
        };
        // Cheap checks first, so a flood of stale or duplicate bundles costs no verification.
        let parts = match bundle::split(&req.tx) {
            Ok(p) => p,
            Err(e) => return check_response(code::MALFORMED_BUNDLE, e.to_string()),
        };
        let mut txs = Vec::with_capacity(parts.len());
        let mut seen = HashSet::with_capacity(parts.len());
        {
            let pool = self.pool.lock().expect("pool lock");
            for (i, b) in parts.iter().enumerate() {
                let t = match PreparedTx::decode(b.to_vec()) {
                    Ok(t) => t,
                    Err(e) => {
                        return check_response(code::REFUSED, format!("transaction {i}: {e}"));
                    }
                };
                let exp = t.tx.transaction.expiration_ms;
                if exp <= head_time_ms {
                    return check_response(
                        code::EXPIRED,
                        format!(
                            "transaction {i}: expired at {exp} ms; the last block's time is {head_time_ms} ms"
                        ),
                    );
                }
                // One block of slack: the next block's time is later than the head's.
                if exp - head_time_ms > max_lifetime_ms + 60_000 {
                    return check_response(
                        code::EXPIRED,
                        format!(
                            "transaction {i}: expires at {exp} ms, more than {max_lifetime_ms} ms after the last block's time {head_time_ms} ms"
                        ),
                    );
                }
                if !seen.insert(t.id) || pool.ids.contains_key(&t.id) {
                    return check_response(
                        code::DUPLICATE,
                        format!(
                            "transaction {i}: duplicate transaction {}: it is already in the mempool",
                            hex::encode(t.id)
                        ),
                    );
                }
                txs.push(t);
            }
        }
        verify_batched(&mut txs);
        for (i, t) in txs.iter().enumerate() {
            if let Check::Refused(e) = &t.check {
                return check_response(code::REFUSED, format!("transaction {i}: {e}"));
            }
        }
        let mut pool = self.pool.lock().expect("pool lock");
        if txs.iter().any(|t| pool.ids.contains_key(&t.id)) {
            return check_response(
                code::DUPLICATE,
                "a transaction is already in the mempool".into(),
            );
        }
        let expires_ms = txs
            .iter()
            .map(|t| t.tx.transaction.expiration_ms)
            .min()
            .unwrap_or(0);
        let ids: Vec<TxId> = txs.iter().map(|t| t.id).collect();
        for id in &ids {
            pool.ids.insert(*id, hash);
        }
        pool.bundles.insert(hash, Pooled { ids, expires_ms });
        ResponseCheckTx {
            code: code::OK,
            gas_wanted: txs.len() as i64,
            ..Default::default()
        }
    }

    /// The mempool's bundles in order, while they fit CometBFT's byte limit and, by the last
    /// block's fuel per transaction, the block's fuel budget (`MAX_BLOCK_FUEL`); the rest wait
    /// for the next block.
    fn prepare_proposal(&self, req: RequestPrepareProposal) -> ResponsePrepareProposal {
        let per_tx = self.fuel_per_tx.load(Ordering::Relaxed).max(1);
        let budget = (MAX_BLOCK_FUEL - FUEL_PER_ACTION) / 100 * PROPOSAL_FUEL_PERCENT;
        let (mut bytes, mut fuel) = (0i64, 0u64);
        let mut txs = Vec::new();
        for tx in req.txs {
            let count = tx.get(1..5).map_or(1, |c| {
                u32::from_le_bytes(c.try_into().expect("4 bytes")) as u64
            });
            let tx_fuel = count.saturating_mul(per_tx);
            bytes += tx.len() as i64;
            fuel = fuel.saturating_add(tx_fuel);
            if bytes > req.max_tx_bytes || (fuel > budget && !txs.is_empty()) {
                break;
            }
            txs.push(tx);
        }
        ResponsePrepareProposal { txs }
    }

    fn process_proposal(&self, req: RequestProcessProposal) -> ResponseProcessProposal {
        let status = |s: ProposalStatus| ResponseProcessProposal { status: s as i32 };
        let unknown: Vec<&Bytes> = {
            let pool = self.pool.lock().expect("pool lock");
            let verified = self.proposal_verified.lock().expect("proposal lock");
            req.txs
                .iter()
                .filter(|tx| {
                    let h = bundle::hash(tx);
                    !pool.bundles.contains_key(&h) && !verified.contains(&h)
                })
                .collect()
        };
        // Every bundle not verified here before, in one batched verification.
        let mut all = Vec::new();
        let mut ranges = Vec::new();
        for tx in &unknown {
            let parts = match bundle::split(tx) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!(
                        "tally node: rejecting a proposal at height {}: {e}",
                        req.height
                    );
                    return status(ProposalStatus::Reject);
                }
            };
            let start = all.len();
            for (i, b) in parts.iter().enumerate() {
                match PreparedTx::decode(b.to_vec()) {
                    Ok(t) => all.push(t),
                    Err(e) => {
                        eprintln!(
                            "tally node: rejecting a proposal at height {}: transaction {i}: {e}",
                            req.height
                        );
                        return status(ProposalStatus::Reject);
                    }
                }
            }
            ranges.push((bundle::hash(tx), start..all.len()));
        }
        verify_batched(&mut all);
        if let Some(e) = all.iter().find_map(|t| match &t.check {
            Check::Refused(e) => Some(e),
            _ => None,
        }) {
            eprintln!(
                "tally node: rejecting a proposal at height {}: {e}",
                req.height
            );
            return status(ProposalStatus::Reject);
        }
        let mut verified = self.proposal_verified.lock().expect("proposal lock");
        verified.extend(ranges.into_iter().map(|(h, _)| h));
        status(ProposalStatus::Accept)
    }

    fn finalize_block(&self, req: RequestFinalizeBlock) -> ResponseFinalizeBlock {
        if !self.finalized_any.swap(true, Ordering::Relaxed) {
            eprintln!("tally node: first block since start: height {}", req.height);
        }
        let hashes: Vec<[u8; 32]> = req.txs.iter().map(|t| bundle::hash(t)).collect();
        // Which bundles were verified here already (CheckTx or ProcessProposal).
        let known: Vec<bool> = {
            let pool = self.pool.lock().expect("pool lock");
            let verified = self.proposal_verified.lock().expect("proposal lock");
            hashes
                .iter()
                .map(|h| pool.bundles.contains_key(h) || verified.contains(h))
                .collect()
        };
        // Each bundle: its transactions' positions in the block, or why it is malformed.
        enum Slot {
            Malformed(String),
            Txs(Vec<Result<usize, String>>),
        }
        let mut prepared = Vec::new();
        let mut slots = Vec::with_capacity(req.txs.len());
        for (tx, known) in req.txs.iter().zip(&known) {
            match bundle::split(tx) {
                Err(e) => slots.push(Slot::Malformed(e.to_string())),
                Ok(parts) => slots.push(Slot::Txs(
                    parts
                        .iter()
                        .map(|b| {
                            PreparedTx::decode(b.to_vec())
                                .map(|mut t| {
                                    if *known {
                                        t.check = Check::Verified;
                                    }
                                    prepared.push(t);
                                    prepared.len() - 1
                                })
                                .map_err(|e| e.to_string())
                        })
                        .collect(),
                )),
            }
        }
        let block_time = time_ms(req.time);
        let mut ledger = self.ledger.lock().expect("ledger lock");
        let Some(l) = ledger.as_mut() else {
            fatal(
                "FinalizeBlock before InitChain",
                "no chain in the data directory",
            )
        };
        let (app_hash, outcomes) = l
            .execute(block_time, &mut prepared)
            .unwrap_or_else(|e| fatal("executing a block", e));
        let (included, fuel) = outcomes.iter().fold((0u64, 0u64), |(n, f), o| match o {
            TxOutcome::Success { fuel } | TxOutcome::Failed { fuel, .. } => (n + 1, f + fuel),
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
                Slot::Txs(txs) => bundle_result(hash, &txs, &outcomes),
            })
            .collect();
        drop(ledger);
        *self.finalized.lock().expect("finalized lock") = Some(Finalized {
            height: req.height,
            bundles: hashes,
        });
        ResponseFinalizeBlock {
            tx_results,
            app_hash: Bytes::copy_from_slice(&app_hash),
            ..Default::default()
        }
    }

    fn commit(&self) -> ResponseCommit {
        let finalized = self.finalized.lock().expect("finalized lock").take();
        if let (Some(at), Some(f)) = (self.abort_before_commit, &finalized)
            && f.height >= at
        {
            eprintln!(
                "tally node: {ABORT_BEFORE_COMMIT_ENV}={at}: aborting before committing block {}",
                f.height
            );
            std::process::abort();
        }
        let mut ledger = self.ledger.lock().expect("ledger lock");
        let Some(l) = ledger.as_mut() else {
            fatal("Commit before InitChain", "no chain in the data directory")
        };
        l.commit()
            .unwrap_or_else(|e| fatal("committing a block", e));
        let head = l.head();
        drop(ledger);
        let mut pool = self.pool.lock().expect("pool lock");
        pool.head_time_ms = head.time_ms;
        if let Some(f) = finalized {
            for h in &f.bundles {
                pool.remove(h);
            }
        }
        // Bundles that expired leave with the recheck; this bounds what a lost one costs.
        let now = pool.head_time_ms;
        let expired: Vec<[u8; 32]> = pool
            .bundles
            .iter()
            .filter(|(_, p)| p.expires_ms + pool.max_lifetime_ms < now)
            .map(|(h, _)| *h)
            .collect();
        for h in &expired {
            pool.remove(h);
        }
        drop(pool);
        self.proposal_verified
            .lock()
            .expect("proposal lock")
            .clear();
        ResponseCommit { retain_height: 0 }
    }

    fn query(&self, req: RequestQuery) -> ResponseQuery {
        let ledger = self.ledger.lock().expect("ledger lock");
        let Some(l) = ledger.as_ref() else {
            return ResponseQuery {
                code: code::BAD_QUERY,
                log: "the chain has not started: CometBFT has not sent InitChain yet".into(),
                ..Default::default()
            };
        };
        let head = l.head();
        match req.path.as_str() {
            "stats" => {
                let mut m = serde_json::Map::new();
                for (name, ns) in CALLS.iter().zip(&self.busy_ns) {
                    let s = ns.load(Ordering::Relaxed) as f64 / 1e9;
                    m.insert((*name).to_string(), serde_json::json!(s));
                }
                ResponseQuery {
                    value: serde_json::to_vec(&m).expect("serialisable").into(),
                    height: head.height as i64,
                    ..Default::default()
                }
            }
            "head" => ResponseQuery {
                value: serde_json::to_vec(&head).expect("serialisable").into(),
                height: head.height as i64,
                ..Default::default()
            },
            "get" => {
                if req.data.len() < 8 {
                    return ResponseQuery {
                        code: code::BAD_QUERY,
                        log: "get: data is the contract's 8-byte name (little-endian) then the key"
                            .into(),
                        ..Default::default()
                    };
                }
                let contract = Name(u64::from_le_bytes(req.data[..8].try_into().expect("8")));
                let key = &req.data[8..];
                match l.get(contract, key) {
                    Ok(Some(v)) => ResponseQuery {
                        key: Bytes::copy_from_slice(key),
                        value: v.into(),
                        height: head.height as i64,
                        ..Default::default()
                    },
                    Ok(None) => ResponseQuery {
                        code: code::NOT_FOUND,
                        key: Bytes::copy_from_slice(key),
                        log: format!("{contract} has no such key"),
                        height: head.height as i64,
                        ..Default::default()
                    },
                    Err(e) => fatal("reading state", e),
                }
            }
            other => ResponseQuery {
                code: code::BAD_QUERY,
                log: format!(
                    "unknown query path {other:?}: Tally answers \"head\", \"get\" and \"stats\""
                ),
                ..Default::default()
            },
        }
    }
}

/// One bundle's FinalizeBlock result: data is the bundle hash then one outcome byte per
/// transaction; gas_used is the fuel of all its transactions.
fn bundle_result(
    hash: &[u8; 32],
    txs: &[Result<usize, String>],
    outcomes: &[TxOutcome],
) -> ExecTxResult {
    let mut data = Vec::with_capacity(32 + txs.len());
    data.extend_from_slice(hash);
    let (mut ok, mut failed, mut rejected, mut fuel) = (0usize, 0usize, 0usize, 0u64);
    let mut notes = Vec::new();
    for (i, t) in txs.iter().enumerate() {
        let (byte, note) = match t {
            Err(e) => (
                outcome::REJECTED,
                Some(format!("transaction {i}: rejected: {e}")),
            ),
            Ok(at) => match &outcomes[*at] {
                TxOutcome::Success { fuel: f } => {
                    fuel += f;
                    (outcome::SUCCESS, None)
                }
                TxOutcome::Failed { fuel: f, abort } => {
                    fuel += f;
                    (
                        outcome::FAILED,
                        Some(format!("transaction {i}: failed: {abort}")),
                    )
                }
                TxOutcome::Rejected(e) => (
                    outcome::REJECTED,
                    Some(format!("transaction {i}: rejected: {e}")),
                ),
            },
        };
        match byte {
            outcome::SUCCESS => ok += 1,
            outcome::FAILED => failed += 1,
            _ => rejected += 1,
        }
        data.push(byte);
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
    ExecTxResult {
        code: if ok == txs.len() {
            code::OK
        } else {
            code::PARTIAL
        },
        data: data.into(),
        log,
        gas_used: fuel.min(i64::MAX as u64) as i64,
        ..Default::default()
    }
}

impl Application for App {
    fn handle(&self, request: request::Value) -> response::Value {
        use request::Value as Q;
        let call = match &request {
            Q::CheckTx(_) => Some(0),
            Q::PrepareProposal(_) => Some(1),
            Q::ProcessProposal(_) => Some(2),
            Q::FinalizeBlock(_) => Some(3),
            Q::Commit(_) => Some(4),
            Q::Query(_) => Some(5),
            _ => None,
        };
        let start = Instant::now();
        let response = self.dispatch(request);
        if let Some(i) = call {
            self.busy_ns[i].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        response
    }
}

impl App {
    fn dispatch(&self, request: request::Value) -> response::Value {
        use request::Value as Q;
        use response::Value as A;
        match request {
            Q::Info(_) => A::Info(self.info()),
            Q::InitChain(r) => A::InitChain(self.init_chain(r)),
            Q::CheckTx(r) => A::CheckTx(self.check_tx(r)),
            Q::PrepareProposal(r) => A::PrepareProposal(self.prepare_proposal(r)),
            Q::ProcessProposal(r) => A::ProcessProposal(self.process_proposal(r)),
            Q::FinalizeBlock(r) => A::FinalizeBlock(self.finalize_block(r)),
            Q::Commit(_) => A::Commit(self.commit()),
            Q::Query(r) => A::Query(self.query(r)),
            Q::ExtendVote(_) => A::ExtendVote(Default::default()),
            Q::VerifyVoteExtension(_) => A::VerifyVoteExtension(
                tendermint_proto::v0_38::abci::ResponseVerifyVoteExtension {
                    status: tendermint_proto::v0_38::abci::response_verify_vote_extension::VerifyStatus::Accept as i32,
                },
            ),
            // No state sync: snapshots are neither offered nor taken.
            Q::ListSnapshots(_) => A::ListSnapshots(Default::default()),
            Q::OfferSnapshot(_) => A::OfferSnapshot(Default::default()),
            Q::LoadSnapshotChunk(_) => A::LoadSnapshotChunk(Default::default()),
            Q::ApplySnapshotChunk(_) => A::ApplySnapshotChunk(Default::default()),
            Q::Echo(e) => A::Echo(tendermint_proto::v0_38::abci::ResponseEcho { message: e.message }),
            Q::Flush(_) => A::Flush(Default::default()),
        }
    }
}
