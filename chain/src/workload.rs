//! The transfer workload of `tally bench`, shared with the criterion benches so the number a
//! user sees and the number CI tracks come from the same code.

use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use rayon::prelude::*;
use tally_host_api::Name;

use crate::chain::Chain;
use crate::crypto;
use crate::error::ChainError;
use crate::pipeline::{self, Pipeline};
use crate::tx::{Action, SignedTransaction, Transaction, Transfer, TxId};

/// The account simplecoin is deployed to.
pub const SIMPLECOIN: Name = match Name::from_str_const("simplecoin") {
    Ok(name) => name,
    Err(_) => panic!("valid name"),
};

/// The `transfer` action name (the 2017 export `onApply_Transfer_simplecoin`).
pub const TRANSFER: Name = match Name::from_str_const("transfer") {
    Ok(name) => name,
    Err(_) => panic!("valid name"),
};

/// simplecoin built from `contracts/simplecoin.c` (recipe: contracts/README.md).
pub const SIMPLECOIN_WASM: &[u8] = include_bytes!("../../contracts/simplecoin.wasm");

/// Coins simplecoin's `onInit` gives to `simplecoin`.
pub const SIMPLECOIN_SUPPLY: u64 = 1_000_000;

/// contracts/token-rs.wasm, the Rust token (same transfer data, same balance layout).
pub const TOKEN_RS_WASM: &[u8] = include_bytes!("../../contracts/token-rs.wasm");

/// Which contract a benchmark pushes its transfers through. Either is deployed at account
/// [`SIMPLECOIN`]; both take the same [`Transfer`] data and keep balances alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BenchContract {
    /// The 2017 C contract.
    #[default]
    Simplecoin,
    /// The Rust token of contracts/token-rs.
    TokenRs,
}

impl BenchContract {
    /// Its WebAssembly.
    pub fn wasm(self) -> &'static [u8] {
        match self {
            Self::Simplecoin => SIMPLECOIN_WASM,
            Self::TokenRs => TOKEN_RS_WASM,
        }
    }

    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::Simplecoin => "simplecoin",
            Self::TokenRs => "token-rs",
        }
    }
}

/// Coins each benchmark account starts with: enough that transfers of one coin rarely fail.
pub const INITIAL_BALANCE: u64 = 1_000_000;

/// A simplecoin balance (`None` if the account has none).
pub fn balance(chain: &Chain, contract: Name, account: Name) -> Result<Option<u64>, ChainError> {
    let value = chain.get(contract, &account.0.to_le_bytes())?;
    Ok(value.and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))))
}

/// The name of benchmark account `i`: `u` and `i` in base 31 over the name alphabet.
pub fn account_name(i: u64) -> Name {
    const DIGITS: &[u8; 31] = b"12345abcdefghijklmnopqrstuvwxyz";
    let mut s = vec![b'u'];
    let mut n = i;
    loop {
        s.push(DIGITS[(n % 31) as usize]);
        n /= 31;
        if n == 0 {
            break;
        }
    }
    Name::from_str_const(std::str::from_utf8(&s).expect("ascii")).expect("valid name")
}

/// SplitMix64: tiny, fast and fully specified, so a seed means the same workload on every
/// platform and version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// How benchmark accounts are picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Every account equally likely.
    Uniform,
    /// Zipf-Mandelbrot with s = 1.0001, v = 2.7, as in the Vryx test: a few accounts are very
    /// hot, most are cold.
    Zipf,
}

impl Distribution {
    /// Its command-line label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Zipf => "zipf",
        }
    }
}

/// Samples ranks `0..n` from Zipf-Mandelbrot, P(k) ∝ (k + v)^-s for k = 1..n, by
/// rejection-inversion (Hörmann & Derflinger 1996): O(1) memory and time per sample, so ten
/// million accounts need no table.
#[derive(Debug, Clone)]
pub struct ZipfMandelbrot {
    n: f64,
    s: f64,
    v: f64,
    h_x1: f64,
    h_n: f64,
    threshold: f64,
}

impl ZipfMandelbrot {
    /// The Vryx parameters: s = 1.0001, v = 2.7.
    pub fn vryx(n: u64) -> Self {
        Self::new(n, 1.0001, 2.7)
    }

    /// A sampler over `n` ranks with exponent `s` (> 0, ≠ 1 is fine and so is 1) and shift `v`.
    pub fn new(n: u64, s: f64, v: f64) -> Self {
        let mut z = Self {
            n: n as f64,
            s,
            v,
            h_x1: 0.0,
            h_n: 0.0,
            threshold: 0.0,
        };
        z.h_x1 = z.big_h(1.5) - z.h(1.0);
        z.h_n = z.big_h(z.n + 0.5);
        z.threshold = 2.0 - z.big_h_inv(z.big_h(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * (x + self.v).ln()).exp()
    }

    /// An antiderivative of `h`: ((x+v)^(1-s) - 1) / (1-s), computed stably near s = 1.
    fn big_h(&self, x: f64) -> f64 {
        let log_x = (x + self.v).ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        (helper1(t) * y).exp() - self.v
    }

    /// A rank in `0..n` (0 is the hottest).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            let k = x.round().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.big_h(k + 0.5) - self.h(k) {
                return k as u64 - 1;
            }
        }
    }
}

/// log1p(x) / x, stable near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// expm1(x) / x, stable near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

/// Picks accounts for transfers.
#[derive(Debug, Clone)]
pub enum Sampler {
    /// Uniform over `0..n`.
    Uniform(u64),
    /// Zipf-Mandelbrot.
    Zipf(ZipfMandelbrot),
}

impl Sampler {
    /// A sampler over `accounts` accounts.
    pub fn new(dist: Distribution, accounts: u64) -> Self {
        match dist {
            Distribution::Uniform => Self::Uniform(accounts),
            Distribution::Zipf => Self::Zipf(ZipfMandelbrot::vryx(accounts)),
        }
    }

    /// An account index.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        match self {
            Self::Uniform(n) => rng.below(*n),
            Self::Zipf(z) => z.sample(rng),
        }
    }
}

/// Distinct signing keys the benchmark accounts share (account `i` uses key `i % KEY_POOL`).
/// Generating ten million keys would take minutes; every signature is still verified against
/// the key it carries, and that key is still compared with the sender's registered key.
pub const KEY_POOL: u64 = 4096;

/// What one benchmark run does.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Transfers to push.
    pub transfers: u64,
    /// Accounts they move coins between (at least 2).
    pub accounts: u64,
    /// How accounts are picked.
    pub dist: Distribution,
    /// Seed of the workload: the same seed gives the same transfers and the same checksum.
    pub seed: u64,
    /// Transactions per block (DCC's benchmark used 5,000).
    pub block_size: usize,
    /// Whether transfers are signed (and the chain checks signatures).
    pub signed: bool,
    /// Which pipeline stages are on.
    pub pipeline: Pipeline,
    /// The contract the transfers go through.
    pub contract: BenchContract,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            transfers: 200_000,
            accounts: 10_000,
            dist: Distribution::Uniform,
            seed: 1,
            block_size: 5_000,
            signed: true,
            pipeline: Pipeline::ALL,
            contract: BenchContract::Simplecoin,
        }
    }
}

/// Generates the benchmark's transfers, a block at a time.
pub struct TransferGen {
    rng: Rng,
    sampler: Sampler,
    accounts: u64,
    next: u64,
    keys: Vec<SigningKey>,
}

impl TransferGen {
    /// A generator for `config`.
    pub fn new(config: &BenchConfig) -> Self {
        let keys = if config.signed {
            (0..KEY_POOL.min(config.accounts))
                .into_par_iter()
                .map(|i| crypto::derived_key(config.seed, i))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            rng: Rng::new(config.seed),
            sampler: Sampler::new(config.dist, config.accounts),
            accounts: config.accounts,
            next: 0,
            keys,
        }
    }

    /// Draws `n` transfers without building them: to continue a workload where it stopped.
    pub fn skip(&mut self, n: u64) {
        for _ in 0..n {
            self.draw();
        }
    }

    fn draw(&mut self) -> (u64, u64) {
        let from = self.sampler.sample(&mut self.rng);
        let mut to = self.sampler.sample(&mut self.rng);
        while to == from && self.accounts > 1 {
            to = self.sampler.sample(&mut self.rng);
        }
        self.next += 1;
        (from, to)
    }

    /// The public key registered for account `i` (signed runs only).
    pub fn public_key(&self, i: u64) -> [u8; 32] {
        self.keys[(i % KEY_POOL) as usize]
            .verifying_key()
            .to_bytes()
    }

    /// The next `n` transfers, for the block at `height`: they reference block `height - 2`
    /// (so a block can be generated and verified while the one before it executes) and
    /// expire a minute (or the chain's longest lifetime, if shorter) after their block's
    /// time. Both depend only on `height`, so every pipeline setting, and a resumed run, sees
    /// the same transactions. Signed in parallel when the run is signed. Self-transfers are
    /// redrawn: the 2017 simplecoin mints coins on them (it stores the sender's balance, then
    /// overwrites it with the recipient's).
    pub fn next_block(&mut self, chain: &Chain, height: u64, n: u64) -> Vec<SignedTransaction> {
        let (ref_block_num, ref_block_prefix) = chain
            .tapos_at(height.saturating_sub(2))
            .expect("the block two below the next one is committed");
        let expiration_ms =
            chain.block_time_ms(height) + chain.config().max_tx_lifetime_ms.min(60_000);
        let unsigned: Vec<(u64, Transaction)> = (0..n)
            .map(|_| {
                let memo = self.next.to_string();
                let (from, to) = self.draw();
                let (from_name, to_name) = (account_name(from), account_name(to));
                let transfer = Transfer {
                    from: from_name,
                    to: to_name,
                    amount: 1,
                    memo,
                };
                let tx = Transaction {
                    expiration_ms,
                    ref_block_num,
                    ref_block_prefix,
                    actions: vec![Action {
                        account: SIMPLECOIN,
                        name: TRANSFER,
                        authorization: vec![from_name],
                        data: transfer.encode(),
                    }],
                };
                (from, tx)
            })
            .collect();
        if self.keys.is_empty() {
            return unsigned
                .into_iter()
                .map(|(_, tx)| SignedTransaction::unsigned(tx))
                .collect();
        }
        let keys = &self.keys;
        unsigned
            .into_par_iter()
            .map(|(from, tx)| {
                let key = &keys[(from % KEY_POOL) as usize];
                SignedTransaction::sign(tx, &[(account_name(from), key)])
            })
            .collect()
    }
}

/// Where the timed section's time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    /// The stateless stage: ids, signatures, early encoding and the batched duplicate check.
    pub verify: Duration,
    /// Checking and executing transactions.
    pub execute: Duration,
    /// Committing blocks (sorting changes, checksums, the store's durable write).
    pub commit: Duration,
}

/// What a benchmark run measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Transfers pushed.
    pub transfers: u64,
    /// Of which failed (for example insufficient funds).
    pub failed: u64,
    /// Wall-clock time spent verifying, pushing and committing (transaction generation and
    /// signing are the client's work and are not timed).
    pub elapsed: Duration,
    /// Time by phase. With batched verification, a block's verification runs during the
    /// previous block's execution, so the phases add up to more than `elapsed`.
    pub phases: Phases,
    /// Blocks committed in the timed section.
    pub blocks: u64,
    /// Height of the last block.
    pub height: u64,
    /// The last block's chained state checksum.
    pub state_checksum: [u8; 32],
    /// Time to deploy simplecoin (validate, compile or load from cache, run `onInit`).
    pub deploy: Duration,
    /// Time that batched signature verification alone, on all cores, took over the same
    /// transactions (measured per block outside the timed section; zero when unsigned).
    pub verify_alone: Duration,
    /// Transfers per second of each block, in order, with the process's resident memory
    /// after it (bytes; 0 where unknown).
    pub per_block: Vec<(f64, u64)>,
}

impl BenchReport {
    /// Transfers per second.
    pub fn tps(&self) -> f64 {
        self.transfers as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Transfers per second that batched signature verification alone reaches on all cores:
    /// the ceiling of a signed run. `None` for unsigned runs.
    pub fn verify_ceiling_tps(&self) -> Option<f64> {
        (!self.verify_alone.is_zero())
            .then(|| self.transfers as f64 / self.verify_alone.as_secs_f64())
    }
}

/// Deploys simplecoin on `chain` unless it is already there, gives every account
/// [`INITIAL_BALANCE`] (and, for signed runs, a key), and commits that as a setup block.
pub fn setup(
    chain: &mut Chain,
    generator: &TransferGen,
    config: &BenchConfig,
) -> Result<Duration, ChainError> {
    let start = Instant::now();
    chain.deploy(SIMPLECOIN, config.contract.wasm())?;
    let deploy = start.elapsed();
    for i in 0..config.accounts {
        let name = account_name(i);
        chain.allocate(
            SIMPLECOIN,
            &name.0.to_le_bytes(),
            &INITIAL_BALANCE.to_le_bytes(),
        )?;
        if config.signed {
            chain.register_account(name, generator.public_key(i))?;
        }
    }
    chain.finish_block()?;
    Ok(deploy)
}

/// Runs the benchmark on a fresh `chain`: setup, then `config.transfers` transfers in blocks
/// of `config.block_size`. Each block's transactions are generated and signed before its
/// timer starts. `progress` gets the transfers done so far.
pub fn run(
    chain: &mut Chain,
    config: &BenchConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<BenchReport, ChainError> {
    bench(chain, config, progress, false)
}

/// Continues a run of the same `config` on a chain reopened from disk: the blocks already
/// committed are skipped (their transfers are drawn again but not pushed), so the final state
/// checksum equals that of an uninterrupted run.
pub fn resume(
    chain: &mut Chain,
    config: &BenchConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<BenchReport, ChainError> {
    bench(chain, config, progress, true)
}

/// simplecoin's `transfer` (contracts/simplecoin.c) in plain Rust over the same host calls:
/// the `native` baseline of `tally bench`, the limit for any runtime.
pub fn native_simplecoin(
    host: &mut dyn tally_host_api::Host,
) -> Result<(), tally_host_api::HostError> {
    use tally_host_api::{Abort, AbortCode};
    let mut msg = [0u8; 24];
    let data = host.message();
    let n = data.len().min(24);
    msg[..n].copy_from_slice(&data[..n]);
    let word = |i: usize| u64::from_le_bytes(msg[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (from, to, amount) = (word(0), word(1), word(2));
    let balance =
        |v: Option<&[u8]>| -> Option<u64> { Some(u64::from_le_bytes(v?.try_into().ok()?)) };
    let Some(mut from_balance) = balance(host.load(&from.to_le_bytes())?) else {
        return Err(Abort::new(AbortCode::AssertFailed, "no existing balance").into());
    };
    if from_balance < amount {
        return Err(Abort::new(AbortCode::AssertFailed, "insufficient funds").into());
    }
    let mut to_balance = balance(host.load(&to.to_le_bytes())?).unwrap_or(0);
    to_balance = to_balance.wrapping_add(amount);
    from_balance -= amount;
    if from_balance != 0 {
        host.store(&from.to_le_bytes(), &from_balance.to_le_bytes())?;
    } else {
        host.remove(&from.to_le_bytes())?;
    }
    host.store(&to.to_le_bytes(), &to_balance.to_le_bytes())
}

/// What executing one block's transactions took.
struct Executed {
    failed: u64,
    /// Signature checks done one by one (without batched verification).
    verify: Duration,
    execute: Duration,
}

/// Includes `block`'s transactions in the pending block, using what the stateless stage
/// `prepared`.
fn execute_block(
    chain: &mut Chain,
    block: &[SignedTransaction],
    prepared: &[pipeline::Prepared],
    pipeline: &Pipeline,
) -> Result<Executed, ChainError> {
    let start = Instant::now();
    let check = chain.config().check_signatures;
    let in_window = pipeline.batch_dedup.then(|| {
        let ids: Vec<TxId> = prepared.iter().map(|p| p.id).collect();
        chain.in_recent_window(&ids)
    });
    let mut done = Executed {
        failed: 0,
        verify: Duration::ZERO,
        execute: Duration::ZERO,
    };
    for (i, (tx, p)) in block.iter().zip(prepared).enumerate() {
        match &p.signatures {
            Some(result) => result.clone()?,
            None if check => {
                let t = Instant::now();
                crypto::verify_signatures(tx, &p.id)?;
                done.verify += t.elapsed();
            }
            None => {}
        }
        let known = in_window.as_ref().map(|w| w[i]);
        if !chain
            .push_prepared(tx, p.id, p.encoded.as_deref(), known)?
            .is_success()
        {
            done.failed += 1;
        }
    }
    done.execute = start.elapsed() - done.verify;
    Ok(done)
}

/// The process's resident memory in bytes (Linux), or 0.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The height of the setup block of a benchmark chain (genesis is 0).
const SETUP_HEIGHT: u64 = 1;

fn bench(
    chain: &mut Chain,
    config: &BenchConfig,
    progress: &mut dyn FnMut(u64),
    resume: bool,
) -> Result<BenchReport, ChainError> {
    if config.signed != chain.config().check_signatures {
        return Err(ChainError::Config(format!(
            "a {} benchmark needs a chain that {} signatures",
            if config.signed { "signed" } else { "unsigned" },
            if config.signed {
                "checks"
            } else {
                "does not check"
            },
        )));
    }
    let mut generator = TransferGen::new(config);
    let mut done = 0u64;
    let deploy = if resume && chain.head().height >= SETUP_HEIGHT {
        done = (chain.head().height - SETUP_HEIGHT) * config.block_size as u64;
        generator.skip(done.min(config.transfers));
        Duration::ZERO
    } else {
        setup(chain, &generator, config)?
    };
    let mut phases = Phases::default();
    let mut elapsed = Duration::ZERO;
    let (mut failed, mut blocks) = (0u64, 0u64);
    let start_done = done;
    let check = chain.config().check_signatures;
    let pipeline = config.pipeline;
    chain.set_overlap_commit(pipeline.overlap_commit);
    let mut verify_alone = Duration::ZERO;
    let mut per_block = Vec::new();
    let block_len = |done: u64| (config.transfers - done).min(config.block_size as u64);
    // The client generates one block ahead; with batched verification the chain verifies that
    // block on the spare cores while the current one executes.
    let mut height = chain.head().height + 1;
    let mut current = (done < config.transfers).then(|| {
        let block = generator.next_block(chain, height, block_len(done));
        let t = Instant::now();
        let prepared = pipeline::prepare(&block, check, &pipeline);
        phases.verify += t.elapsed();
        elapsed += t.elapsed();
        (block, prepared)
    });
    while let Some((block, prepared)) = current.take() {
        let n = block.len() as u64;
        let ahead = (done + n < config.transfers)
            .then(|| generator.next_block(chain, height + 1, block_len(done + n)));
        if check {
            // The ceiling: batched verification of these transactions and nothing else.
            let items: Vec<(&SignedTransaction, &TxId)> =
                block.iter().zip(prepared.iter().map(|p| &p.id)).collect();
            let t = Instant::now();
            let results = crypto::verify_many(&items);
            verify_alone += t.elapsed();
            debug_assert!(results.iter().all(Result::is_ok));
        }
        let t0 = Instant::now();
        let verify_ahead = |ahead: Option<Vec<SignedTransaction>>| {
            ahead.map(|block| {
                let t = Instant::now();
                let prepared = pipeline::prepare(&block, check, &pipeline);
                (block, prepared, t.elapsed())
            })
        };
        let (next, executed) = if pipeline.batch_verify {
            rayon::join(
                || verify_ahead(ahead),
                || execute_block(chain, &block, &prepared, &pipeline),
            )
        } else {
            let executed = execute_block(chain, &block, &prepared, &pipeline);
            (verify_ahead(ahead), executed)
        };
        let executed = executed?;
        let t1 = Instant::now();
        chain.finish_block()?;
        if next.is_none() {
            chain.sync()?; // the last block is durable before the clock stops
        }
        let t2 = Instant::now();
        failed += executed.failed;
        phases.verify += executed.verify;
        phases.execute += executed.execute;
        phases.commit += t2 - t1;
        per_block.push((n as f64 / (t2 - t0).as_secs_f64(), resident_bytes()));
        elapsed += t2 - t0;
        current = next.map(|(block, prepared, took)| {
            phases.verify += took;
            (block, prepared)
        });
        done += n;
        height += 1;
        blocks += 1;
        progress(done);
    }
    Ok(BenchReport {
        transfers: done - start_done.min(done),
        failed,
        elapsed,
        phases,
        blocks,
        height: chain.head().height,
        state_checksum: chain.head().state_checksum,
        deploy,
        verify_alone,
        per_block,
    })
}
