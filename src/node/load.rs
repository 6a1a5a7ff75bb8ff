//! The load generator: signs transfers between the genesis accounts of a devnet, bundles them,
//! submits them to CometBFT's RPC and watches blocks until every one is committed. Its
//! transfers pay fees like any sender's (`Transaction::new`'s default max fee, from the
//! genesis accounts' native balances), and the report sums the fees their receipts show.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use rayon::prelude::*;
use serde::Serialize;
use tally_bench::sampler::{Distribution, Rng, Sampler};
use tally_bench::workload;
use tally_chain::{Action, SignedTransaction, Transaction, Transfer};

use super::bundle;
use super::ledger::Head;
use super::results::{BundleResult, TxSummary};
use super::rpc::{BlockResults, Rpc};

/// How often the watcher asks for new blocks. Latency is measured to when a block is seen, so
/// this bounds the error of each latency figure.
const POLL: Duration = Duration::from_millis(5);

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// RPC endpoints; bundles go to them in turn.
    pub rpcs: Vec<String>,
    /// Transfers to submit.
    pub transfers: u64,
    /// Genesis accounts to move coins between (the devnet's `--accounts`, or fewer).
    pub accounts: u64,
    /// How sender and recipient are picked.
    pub dist: Distribution,
    /// Seed of the accounts' keys (the devnet's `--seed`).
    pub seed: u64,
    /// Transfers per CometBFT transaction.
    pub bundle: usize,
    /// Whether bundles are compressed ([`bundle::join`]) or not.
    pub compress: bool,
    /// Most transfers submitted and not yet seen committed: the offered load is closed-loop,
    /// so latency measures the network, not a queue the generator built.
    pub window: u64,
    /// Submitting threads.
    pub submitters: usize,
    /// Give up on what is not committed after this long.
    pub timeout: Duration,
    /// A devnet directory: its process ids give the CPU time of each process.
    pub devnet: Option<PathBuf>,
}

/// One validator at the end of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ValidatorEnd {
    /// Its RPC address.
    pub rpc: String,
    /// Its latest height.
    pub height: u64,
    /// Its app hash after that block (CometBFT's `latest_app_hash`).
    pub app_hash: String,
    /// Its app hash after the highest block every validator has.
    pub app_hash_at_common_height: String,
    /// Time its Tally node spent in each ABCI call during the run (seconds).
    pub abci_seconds: serde_json::Value,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Transfers signed and offered.
    pub transfers: u64,
    /// Transfers per CometBFT transaction.
    pub bundle: usize,
    /// Whether the bundles were compressed.
    pub compressed: bool,
    /// Bundle bytes sent to CometBFT per transfer (before the RPC's own encoding).
    pub wire_bytes_per_transfer: f64,
    /// Each transfer's signed encoding, on average: what the chain charges bandwidth for.
    pub signed_bytes_per_transfer: f64,
    /// Transfers committed successfully.
    pub committed: u64,
    /// Included, but the contract failed (for example insufficient funds).
    pub failed: u64,
    /// Refused at CheckTx (whole bundles).
    pub rejected_check_tx: u64,
    /// Not included by FinalizeBlock (expired, duplicate, …).
    pub rejected_in_block: u64,
    /// Coins the included transfers paid in fees (burned and tips), from their receipts.
    pub fees_paid: u64,
    /// Of those, the coins burned.
    pub fees_burned: u64,
    /// Neither committed nor refused before the timeout.
    pub lost: u64,
    /// First CheckTx refusals, verbatim.
    pub check_tx_errors: Vec<String>,
    /// From the first submission to the last commit, seconds.
    pub elapsed_s: f64,
    /// Committed (successful) transfers per second over `elapsed_s`.
    pub tps: f64,
    /// Submission to commit, per transfer: median, ms.
    pub latency_p50_ms: f64,
    /// 99th percentile, ms.
    pub latency_p99_ms: f64,
    /// Largest, ms.
    pub latency_max_ms: f64,
    /// Blocks committed during the run.
    pub blocks: u64,
    /// Mean time between those blocks (CometBFT header times), ms.
    pub block_time_ms: f64,
    /// Client time to sign every transfer before the run (not in `elapsed_s`), seconds.
    pub signing_s: f64,
    /// CPU seconds during the run by process kind (with `--devnet`): all `tally node`s, all
    /// `cometbft`s, and this generator.
    pub cpu_s: serde_json::Value,
    /// Each validator at the end.
    pub validators: Vec<ValidatorEnd>,
    /// Whether every validator has the same app hash at the common height.
    pub app_hashes_agree: bool,
}

struct Shared {
    queue: Mutex<VecDeque<(usize, Vec<u8>)>>,
    /// Transfers submitted and not yet seen committed, with the window's condition.
    in_flight: Mutex<u64>,
    room: Condvar,
    /// Bundle hash → (transfers, submission time).
    pending: Mutex<HashMap<[u8; 32], (u64, Instant)>>,
    rejected: AtomicU64,
    errors: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// CPU seconds (user + system) of process `pid`, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name and state.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

fn devnet_cpu(dir: &Option<PathBuf>) -> (f64, f64) {
    let Some(dir) = dir else { return (0.0, 0.0) };
    let Ok(d) = super::devnet::load(dir) else {
        return (0.0, 0.0);
    };
    let sum = |pids: Vec<Option<u32>>| pids.into_iter().flatten().map(cpu_seconds).sum();
    (
        sum(d.validators.iter().map(|v| v.tally_pid).collect()),
        sum(d.validators.iter().map(|v| v.cometbft_pid).collect()),
    )
}

fn stats(rpc: &Rpc) -> serde_json::Value {
    rpc.query("stats", &[])
        .ok()
        .and_then(|(code, v, _)| (code == 0).then_some(v))
        .and_then(|v| serde_json::from_slice(&v).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn stats_delta(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let Some(a) = after.as_object() {
        for (k, v) in a {
            let b = before.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0);
            if let Some(v) = v.as_f64() {
                out.insert(
                    k.clone(),
                    serde_json::json!(((v - b) * 1000.0).round() / 1000.0),
                );
            }
        }
    }
    serde_json::Value::Object(out)
}

/// Signs `config.transfers` transfers valid on the chain whose head is `head`.
fn sign_all(config: &LoadConfig, head: &Head) -> Vec<Vec<u8>> {
    let pool = workload::KEY_POOL.min(config.accounts);
    let keys: Vec<_> = (0..pool)
        .into_par_iter()
        .map(|i| tally_chain::crypto::derived_key(config.seed, i))
        .collect();
    let sampler = Sampler::new(config.dist, config.accounts);
    // A fresh nonce per run: the same command twice must not submit duplicates.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = Rng::new(config.seed ^ nonce);
    let pairs: Vec<(u64, u64)> = (0..config.transfers)
        .map(|_| {
            let from = sampler.sample(&mut rng);
            let mut to = sampler.sample(&mut rng);
            // simplecoin mints coins on a self-transfer (contracts/simplecoin.c): redraw.
            while to == from && config.accounts > 1 {
                to = sampler.sample(&mut rng);
            }
            (from, to)
        })
        .collect();
    // Room to wait in the mempool, and still inside the longest lifetime the chain allows.
    let expiration_ms = head.time_ms
        + head
            .max_lifetime_ms
            .saturating_sub(head.max_lifetime_ms / 4);
    pairs
        .into_par_iter()
        .enumerate()
        .map(|(i, (from, to))| {
            let from_name = workload::account_name(from);
            let transfer = Transfer {
                from: from_name,
                to: workload::account_name(to),
                amount: 1,
                memo: format!("{nonce:x}-{i}"),
            };
            let tx = Transaction::new(
                expiration_ms,
                (head.ref_block_num, head.ref_block_prefix),
                vec![Action {
                    account: workload::SIMPLECOIN,
                    name: workload::TRANSFER,
                    authorization: vec![from_name],
                    data: transfer.encode(),
                }],
            );
            let key = &keys[(from % workload::KEY_POOL) as usize];
            // Genesis registered every sender's key: the signature leaves it out (issue 26).
            SignedTransaction::sign_registered(tx, &[(from_name, key)]).encode()
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Bundles (index, bytes) in submission order, and the transfers each holds.
type Bundles = (VecDeque<(usize, Vec<u8>)>, Vec<u64>);

/// Each bundle in submission order, and the transfers each holds; an error if one is larger
/// than a node accepts ([`bundle::MAX_BUNDLE_BYTES`]), before anything is sent.
fn bundles(config: &LoadConfig, signed: &[Vec<u8>]) -> anyhow::Result<Bundles> {
    let chunks = signed.chunks(config.bundle.max(1));
    let sizes = chunks.clone().map(|c| c.len() as u64).collect();
    let mut bundles = VecDeque::new();
    for (i, c) in chunks.enumerate() {
        let txs = c.iter().map(Vec::as_slice);
        let b = if config.compress {
            bundle::join(txs)
        } else {
            bundle::join_uncompressed(txs)
        };
        if b.len() > bundle::MAX_BUNDLE_BYTES {
            bail!(
                "a bundle of {} transfers takes {} bytes, above the {} a node accepts: give a \
                 smaller --bundle{}",
                c.len(),
                b.len(),
                bundle::MAX_BUNDLE_BYTES,
                if config.compress {
                    ""
                } else {
                    ", or leave out --uncompressed"
                }
            );
        }
        bundles.push_back((i, b));
    }
    Ok((bundles, sizes))
}

/// One submitter: takes bundles off the queue while the window has room, and sends each to
/// its validator in turn. A refused bundle frees its room at once.
fn submit(shared: &Shared, rpcs: &[Rpc], sizes: &[u64], window: u64) {
    loop {
        let Some((k, tx)) = shared.queue.lock().expect("queue").pop_front() else {
            return;
        };
        let n = sizes[k];
        {
            let mut f = shared.in_flight.lock().expect("window");
            while *f + n > window && !shared.stop.load(Ordering::Relaxed) {
                f = shared.room.wait_timeout(f, POLL).expect("window").0;
            }
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            *f += n;
        }
        let hash = bundle::hash(&tx);
        shared
            .pending
            .lock()
            .expect("pending")
            .insert(hash, (n, Instant::now()));
        let refused = match rpcs[k % rpcs.len()].broadcast(&tx) {
            Ok(b) if b.code == 0 => None,
            Ok(b) => Some(format!("code {}: {}", b.code, b.log)),
            Err(e) => Some(format!("{e:#}")),
        };
        if let Some(why) = refused {
            shared.pending.lock().expect("pending").remove(&hash);
            shared.rejected.fetch_add(n, Ordering::Relaxed);
            let mut errors = shared.errors.lock().expect("errors");
            if errors.len() < 5 {
                errors.push(why);
            }
            *shared.in_flight.lock().expect("window") -= n;
            shared.room.notify_all();
        }
    }
}

/// What the watcher saw of the submitted transfers.
struct Seen {
    committed: u64,
    failed: u64,
    rejected_in_block: u64,
    /// Fees the included transfers paid, and of them the coins burned.
    fees_paid: u64,
    fees_burned: u64,
    /// Submission to commit of each committed transfer, ms.
    latencies: Vec<f64>,
    last_commit: Instant,
    /// The first height not yet read.
    next: u64,
}

impl Seen {
    /// Matches one block's results to the submitted bundles by hash, and frees their room in
    /// the window.
    fn block(&mut self, results: &BlockResults, shared: &Shared) {
        let seen = Instant::now();
        let mut pending = shared.pending.lock().expect("pending");
        let mut freed = 0;
        for (_, data) in &results.txs {
            let Some(result) = BundleResult::decode(data) else {
                continue;
            };
            let Some((n, sent)) = pending.remove(&result.bundle) else {
                continue;
            };
            let ms = seen.duration_since(sent).as_secs_f64() * 1000.0;
            for tx in &result.txs {
                let fee = tx.fee();
                self.fees_paid = self.fees_paid.saturating_add(fee.total());
                self.fees_burned = self.fees_burned.saturating_add(fee.burned);
                match tx {
                    TxSummary::Success { .. } => {
                        self.committed += 1;
                        self.latencies.push(ms);
                    }
                    TxSummary::Failed { .. } => self.failed += 1,
                    TxSummary::Rejected { .. } => self.rejected_in_block += 1,
                }
            }
            freed += n;
            self.last_commit = seen;
        }
        drop(pending);
        if freed > 0 {
            *shared.in_flight.lock().expect("window") -= freed;
            shared.room.notify_all();
        }
    }
}

/// Reads every new block's results until every transfer is accounted for or the timeout.
fn watch(
    config: &LoadConfig,
    rpc: &Rpc,
    shared: &Shared,
    first_height: u64,
    started: Instant,
    progress: &dyn Fn(u64, u64),
) -> Seen {
    let mut seen = Seen {
        committed: 0,
        failed: 0,
        rejected_in_block: 0,
        fees_paid: 0,
        fees_burned: 0,
        latencies: Vec::with_capacity(config.transfers as usize),
        last_commit: started,
        next: first_height + 1,
    };
    let deadline = started + config.timeout;
    loop {
        let accounted = seen.committed
            + seen.failed
            + seen.rejected_in_block
            + shared.rejected.load(Ordering::Relaxed);
        progress(accounted, seen.committed);
        if accounted >= config.transfers || Instant::now() > deadline {
            return seen;
        }
        // The application's committed height, not CometBFT's /status: CometBFT stores a
        // block before executing it and its results before the application commits it, so
        // only this height says the transfers are durable state that queries see.
        let tip = match rpc.head() {
            Ok(h) => h.height,
            Err(_) => {
                std::thread::sleep(POLL);
                continue;
            }
        };
        if tip < seen.next {
            std::thread::sleep(POLL);
            continue;
        }
        while seen.next <= tip {
            // The block store runs ahead of the results store by one block at most.
            let Ok(results) = rpc.block_results(seen.next) else {
                std::thread::sleep(POLL);
                break;
            };
            seen.block(&results, shared);
            seen.next += 1;
        }
    }
}

/// Blocks between `first` and `last` and their mean spacing (CometBFT header times), ms.
fn block_time_ms(rpc: &Rpc, first: u64, last: u64) -> anyhow::Result<(u64, f64)> {
    let mut times = Vec::new();
    let mut h = first.max(1);
    // 20 metas per call: CometBFT's page limit.
    while h <= last {
        let hi = (h + 19).min(last);
        times.extend(rpc.block_metas(h, hi)?.into_iter().map(|(_, t, _)| t));
        h = hi + 1;
    }
    let mean = if times.len() >= 2 {
        (times[times.len() - 1] - times[0]) as f64 / (times.len() - 1) as f64
    } else {
        0.0
    };
    Ok((last.saturating_sub(first), mean))
}

/// Each validator's end state, and its app hash at the highest height all have.
fn validator_ends(rpcs: &[Rpc], stats_before: &[serde_json::Value]) -> Vec<ValidatorEnd> {
    let heights: Vec<u64> = rpcs.iter().map(|r| r.height().unwrap_or(0)).collect();
    // CometBFT stores a block before its results: the block below the lowest tip has both.
    let common = heights.iter().copied().min().unwrap_or(1).saturating_sub(1);
    rpcs.iter()
        .zip(&heights)
        .zip(stats_before)
        .map(|((rpc, height), before)| {
            let status = rpc
                .call("status", serde_json::json!({}))
                .unwrap_or_default();
            ValidatorEnd {
                rpc: rpc.url().to_string(),
                height: *height,
                app_hash: status["sync_info"]["latest_app_hash"]
                    .as_str()
                    .unwrap_or("")
                    .to_lowercase(),
                app_hash_at_common_height: (0..50)
                    .find_map(|_| {
                        let r = rpc.block_results(common).ok();
                        if r.is_none() {
                            std::thread::sleep(POLL);
                        }
                        r
                    })
                    .map(|r| r.app_hash)
                    .unwrap_or_default(),
                abci_seconds: stats_delta(before, &stats(rpc)),
            }
        })
        .collect()
}

/// CPU seconds by process kind over the run, rounded to 10 ms.
fn cpu_report(
    config: &LoadConfig,
    before: (f64, f64),
    after: (f64, f64),
    load: f64,
) -> serde_json::Value {
    let round = |s: f64| (s * 100.0).round() / 100.0;
    if config.devnet.is_some() {
        serde_json::json!({
            "tally_node": round(after.0 - before.0),
            "cometbft": round(after.1 - before.1),
            "load": round(load),
        })
    } else {
        serde_json::json!({ "load": round(load) })
    }
}

/// Runs the load and reports. `progress` gets (transfers accounted for, committed).
pub fn run(config: &LoadConfig, progress: &dyn Fn(u64, u64)) -> anyhow::Result<LoadReport> {
    if config.rpcs.is_empty() {
        bail!("give at least one --rpc address");
    }
    let rpcs: Vec<Rpc> = config.rpcs.iter().map(|u| Rpc::new(u)).collect();
    let start_head = rpcs[0].head()?;
    let t = Instant::now();
    let signed = sign_all(config, &start_head);
    let signing_s = t.elapsed().as_secs_f64();
    let (queue, sizes) = bundles(config, &signed)?;
    let per_transfer = |bytes: usize| bytes as f64 / signed.len().max(1) as f64;
    let signed_bytes_per_transfer = per_transfer(signed.iter().map(Vec::len).sum());
    let wire_bytes_per_transfer = per_transfer(queue.iter().map(|(_, b)| b.len()).sum());
    drop(signed);
    let shared = Arc::new(Shared {
        queue: Mutex::new(queue),
        in_flight: Mutex::new(0),
        room: Condvar::new(),
        pending: Mutex::new(HashMap::new()),
        rejected: AtomicU64::new(0),
        errors: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
    let stats_before: Vec<_> = rpcs.iter().map(stats).collect();
    let cpu_before = devnet_cpu(&config.devnet);
    let self_before = cpu_seconds(std::process::id());
    let first_height = rpcs[0].head()?.height;
    let started = Instant::now();
    let sizes = Arc::new(sizes);
    let window = config.window.max(config.bundle as u64);
    let submitters: Vec<_> = (0..config.submitters.max(1))
        .map(|_| {
            let (shared, rpcs, sizes) = (shared.clone(), rpcs.clone(), sizes.clone());
            std::thread::spawn(move || submit(&shared, &rpcs, &sizes, window))
        })
        .collect();
    let mut seen = watch(config, &rpcs[0], &shared, first_height, started, progress);
    shared.stop.store(true, Ordering::Relaxed);
    shared.queue.lock().expect("queue").clear();
    for s in submitters {
        let _ = s.join();
    }
    let elapsed = seen
        .last_commit
        .duration_since(started)
        .as_secs_f64()
        .max(1e-9);
    let self_cpu = cpu_seconds(std::process::id()) - self_before;
    let cpu_after = devnet_cpu(&config.devnet);
    let (blocks, block_time_ms) = block_time_ms(&rpcs[0], first_height, seen.next - 1)?;
    let validators = validator_ends(&rpcs, &stats_before);
    let agree = validators
        .windows(2)
        .all(|w| w[0].app_hash_at_common_height == w[1].app_hash_at_common_height);
    seen.latencies.sort_unstable_by(f64::total_cmp);
    let rejected = shared.rejected.load(Ordering::Relaxed);
    let errors = shared.errors.lock().expect("errors").clone();
    Ok(LoadReport {
        transfers: config.transfers,
        bundle: config.bundle,
        compressed: config.compress,
        wire_bytes_per_transfer,
        signed_bytes_per_transfer,
        committed: seen.committed,
        failed: seen.failed,
        rejected_check_tx: rejected,
        rejected_in_block: seen.rejected_in_block,
        fees_paid: seen.fees_paid,
        fees_burned: seen.fees_burned,
        lost: config.transfers - seen.committed - seen.failed - rejected - seen.rejected_in_block,
        check_tx_errors: errors,
        elapsed_s: elapsed,
        tps: seen.committed as f64 / elapsed,
        latency_p50_ms: percentile(&seen.latencies, 0.50),
        latency_p99_ms: percentile(&seen.latencies, 0.99),
        latency_max_ms: seen.latencies.last().copied().unwrap_or(0.0),
        blocks,
        block_time_ms,
        signing_s,
        cpu_s: cpu_report(config, cpu_before, cpu_after, self_cpu),
        validators,
        app_hashes_agree: agree,
    })
}
