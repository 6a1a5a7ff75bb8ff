//! The transfer workload of `tally bench`, shared with the criterion benches so the number a
//! user sees and the number CI tracks come from the same code. It only drives the library's
//! block path: [`tally_chain::prepare_block`], [`Chain::execute_block`], [`Chain::commit`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use rayon::prelude::*;
use tally_chain::state::keys;
use tally_chain::store::{ChangeFn, ChangeSource, Durability};
use tally_chain::tx::DEFAULT_MAX_FEE;
use tally_chain::{
    Action, Chain, ChainConfig, ChainError, FeeSchedule, Pipeline, PreparedTx, SignedTransaction,
    StateStore, Transaction, Transfer, TxId, crypto, prepare_block,
};
use tally_host_api::Name;
use tally_runtime::Runtime;

use crate::sampler::{Distribution, Rng, Sampler};

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

/// What each transaction of a benchmark does. The transfers go through a token deployed at
/// account [`SIMPLECOIN`] (both tokens take the same [`Transfer`] data and keep balances
/// alike); a swap is a trade on contracts/swap ([`crate::swap`]), the account's balances held
/// in both of its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BenchContract {
    /// A transfer through the 2017 C contract.
    #[default]
    Simplecoin,
    /// A transfer through the Rust token of contracts/token-rs.
    TokenRs,
    /// A trade on the constant-product pool of contracts/swap: a token transfer to the pool,
    /// then a swap that queries both tokens and calls one.
    Swap,
}

impl BenchContract {
    /// Its WebAssembly.
    pub fn wasm(self) -> &'static [u8] {
        match self {
            Self::Simplecoin => SIMPLECOIN_WASM,
            Self::TokenRs => TOKEN_RS_WASM,
            Self::Swap => crate::swap::SWAP_WASM,
        }
    }

    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::Simplecoin => "simplecoin",
            Self::TokenRs => "token-rs",
            Self::Swap => "swap",
        }
    }

    /// The contracts that hold the accounts' balances.
    fn balance_contracts(self) -> &'static [Name] {
        match self {
            Self::Simplecoin | Self::TokenRs => &[SIMPLECOIN],
            Self::Swap => &crate::swap::TOKENS,
        }
    }

    /// The actions of transaction number `k`, a transfer of one coin from `from` to `to`, or
    /// a trade by `from`.
    fn actions(self, k: u64, from: Name, to: Name) -> Vec<Action> {
        match self {
            Self::Simplecoin | Self::TokenRs => {
                let transfer = Transfer {
                    from,
                    to,
                    amount: 1,
                    memo: k.to_string(),
                };
                vec![Action {
                    account: SIMPLECOIN,
                    name: TRANSFER,
                    authorization: vec![from],
                    data: transfer.encode(),
                }]
            }
            Self::Swap => crate::swap::actions(from, k),
        }
    }
}

/// Coins each benchmark account starts with: enough that transfers of one coin rarely fail.
pub const INITIAL_BALANCE: u64 = 1_000_000;

/// Native coins (which pay fees) every benchmark and devnet account starts with: a
/// transfer's fee at the standard schedule's starting prices is ~1,300, so this pays for
/// over 600 million of them, whatever the prices do during a run.
pub const NATIVE_FUNDS: u64 = 1_000_000_000_000;

/// Native coins the system account starts with on a devnet or benchmark chain: what it can
/// give new accounts.
pub const SYSTEM_FUNDS: u64 = 1_000_000_000_000_000;

/// A simplecoin balance (`None` if the account has none).
pub fn balance(chain: &Chain, contract: Name, account: Name) -> Result<Option<u64>, ChainError> {
    let value = chain.get(contract, &account.0.to_le_bytes())?;
    Ok(value.and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))))
}

/// The name of benchmark account `i`: `u` and `i` in base 31 over the name alphabet.
pub fn account_name(i: u64) -> Name {
    const DIGITS: &[u8; 31] = b"12345abcdefghijklmnopqrstuvwxyz";
    // 'u' and at most 12 base-31 digits of a u64: within a name's 13 characters for any
    // account count a machine can hold (31^12 > 7 * 10^17).
    let mut s = [0u8; 16];
    s[0] = b'u';
    let mut len = 1;
    let mut n = i;
    loop {
        s[len] = DIGITS[(n % 31) as usize];
        len += 1;
        n /= 31;
        if n == 0 {
            break;
        }
    }
    Name::from_str_const(std::str::from_utf8(&s[..len]).expect("ascii")).expect("valid name")
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
    /// When each block is durable: `Background` lets the durable sync of block N run while
    /// block N+1 executes (the DCC study's PR-7); `Immediate` syncs before the next block.
    pub durability: Durability,
    /// The contract the transfers go through.
    pub contract: BenchContract,
    /// How the chain prices its use: every transfer pays its fee like any sender's
    /// ([`FeeSchedule::STANDARD`]), or nothing ([`FeeSchedule::ZERO`], to measure what fees
    /// cost).
    pub fees: FeeSchedule,
    /// What each transfer offers to pay ([`DEFAULT_MAX_FEE`] by default). 0, on a zero
    /// schedule, is what a sender of a free chain offers: then no payer's balance is read or
    /// written (`Payment::Free`), so a run with it against one on the standard schedule
    /// measures the whole fee mechanism, not only nonzero prices (the payer's read and write,
    /// and a changed key a payer a block, cost 1,239 of 11,972 instructions a transfer:
    /// callgrind, 10,000 accounts).
    pub max_fee: u64,
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
            durability: Durability::Background,
            contract: BenchContract::Simplecoin,
            fees: FeeSchedule::STANDARD,
            max_fee: DEFAULT_MAX_FEE,
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
    contract: BenchContract,
    max_fee: u64,
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
            contract: config.contract,
            max_fee: config.max_fee,
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

    /// The next `n` (sender, recipient) account pairs: the draws [`TransferGen::next_block`]
    /// makes, for a baseline that builds its own kind of transaction from them.
    pub fn next_pairs(&mut self, n: u64) -> Vec<(u64, u64)> {
        (0..n).map(|_| self.draw()).collect()
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
                let k = self.next;
                let (from, to) = self.draw();
                let mut tx = Transaction::new(
                    expiration_ms,
                    (ref_block_num, ref_block_prefix),
                    self.contract
                        .actions(k, account_name(from), account_name(to)),
                );
                tx.max_fee = self.max_fee;
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
                // Genesis registered every sender's key: the signature leaves it out, as
                // clients send it (issue 26).
                SignedTransaction::sign_registered(tx, &[(account_name(from), key)])
            })
            .collect()
    }
}

/// Where the timed section's time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    /// The stateless stage: encodings, ids, admission and batched signature verification.
    pub verify: Duration,
    /// [`Chain::execute_block`]: the duplicate check, validation, execution, the block's
    /// sorted changes and checksum (and signature checks, when they are not batched).
    pub execute: Duration,
    /// [`Chain::commit`]: the store's write and its durable sync.
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
    /// Time that batched signature verification alone, on all cores, took over the same
    /// transactions (measured per block outside the timed section; zero when unsigned).
    pub verify_alone: Duration,
    /// Transfers per second of each block, in order, with the process's resident memory and
    /// the store's disk after it (bytes; 0 where unknown).
    pub per_block: Vec<crate::report::BlockPoint>,
    /// Transactions executed speculatively in parallel.
    pub speculated: u64,
    /// Of those, how many needed no re-execution.
    pub confirmed: u64,
    /// Bytes of the signed encodings of the transactions pushed: what a block stores and a
    /// network carries for them (0 for baselines that are not Tally's).
    pub tx_bytes: u64,
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

/// Creates the benchmark chain on an empty `store`: a genesis that deploys the contract, gives
/// every account [`INITIAL_BALANCE`] and (for signed runs) registers its key. Returns the chain
/// and how long deploying the contract took.
pub fn create(
    runtime: Arc<Runtime>,
    store: Box<dyn StateStore>,
    chain_config: ChainConfig,
    config: &BenchConfig,
) -> Result<(Chain, Duration), ChainError> {
    let mut genesis = Chain::genesis(runtime, store, chain_config)?;
    let start = Instant::now();
    match config.contract {
        BenchContract::Swap => crate::swap::deploy(&mut genesis)?,
        token => {
            genesis.deploy(SIMPLECOIN, token.wasm())?;
        }
    }
    let deploy = start.elapsed();
    // The payer of transactions nobody authorizes (the hostile and walk benchmarks).
    genesis.fund(tally_chain::system::SYSTEM, SYSTEM_FUNDS);
    let accounts = BenchAccounts::new(config);
    Ok((genesis.finish_with(&accounts)?, deploy))
}

/// The genesis changes of `accounts` signed benchmark accounts of `seed` holding simplecoin
/// (what [`create`] streams into a signed simplecoin run's genesis, and what a devnet too large
/// to list its accounts in `genesis.json` generates): each account's public key (from the
/// seed's pool), its native coins and its simplecoin balance, in key order, never all in
/// memory.
pub fn accounts_source(accounts: u64, seed: u64) -> impl ChangeSource {
    BenchAccounts::new(&BenchConfig {
        accounts,
        seed,
        signed: true,
        contract: BenchContract::Simplecoin,
        ..BenchConfig::default()
    })
}

/// The benchmark's accounts as genesis changes, streamed in key order so that ten million of
/// them are never all in memory: each account's balance, its native coins
/// ([`NATIVE_FUNDS`], which pay its fees) and (signed runs) its public key.
/// These are the keys [`tally_chain::GenesisBuilder::allocate`] and
/// [`tally_chain::GenesisBuilder::account`] would write, so the genesis is the same.
struct BenchAccounts {
    /// (name, account number) by name: the order of their `keys::account` and
    /// `keys::balance` keys (the name big-endian).
    by_name: Vec<(u64, u32)>,
    /// Whether the accounts' public keys are registered (signed runs).
    signed: bool,
    /// Names by their little-endian bytes: the order of their balance keys.
    by_balance_key: Vec<u64>,
    /// The public keys of the pool accounts share ([`KEY_POOL`]).
    public_keys: Vec<[u8; 32]>,
    /// The contracts each account holds [`INITIAL_BALANCE`] in, in key order.
    contracts: Vec<Name>,
}

impl BenchAccounts {
    fn new(config: &BenchConfig) -> Self {
        let n = config.accounts;
        assert!(n <= u32::MAX as u64, "at most 2^32 benchmark accounts");
        let mut by_balance_key: Vec<u64> = (0..n)
            .into_par_iter()
            .map(|i| account_name(i).0.swap_bytes())
            .collect();
        by_balance_key.par_sort_unstable();
        let mut by_name: Vec<(u64, u32)> = (0..n)
            .into_par_iter()
            .map(|i| (account_name(i).0, i as u32))
            .collect();
        by_name.par_sort_unstable();
        let public_keys = match config.signed {
            true => (0..KEY_POOL.min(n))
                .into_par_iter()
                .map(|i| {
                    crypto::derived_key(config.seed, i)
                        .verifying_key()
                        .to_bytes()
                })
                .collect(),
            false => Vec::new(),
        };
        let mut contracts = config.contract.balance_contracts().to_vec();
        contracts.sort_by_key(|&c| keys::contract(c, &[]));
        Self {
            by_name,
            signed: config.signed,
            by_balance_key,
            public_keys,
            contracts,
        }
    }
}

impl ChangeSource for BenchAccounts {
    fn len(&self) -> u64 {
        let keys = if self.signed { 2 } else { 1 };
        (keys * self.by_name.len() + self.contracts.len() * self.by_balance_key.len()) as u64
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()> {
        // Account keys ([ACCOUNT, name]) sort before contract storage ([CONTRACT, …]).
        let mut key = Vec::with_capacity(32);
        if self.signed {
            for &(name, i) in &self.by_name {
                let public = &self.public_keys[(i as u64 % KEY_POOL) as usize];
                f(&keys::account(Name(name)), Some(public))?;
            }
        }
        // Native balances ([BALANCE, name]) sort between accounts and contract storage.
        let coins = NATIVE_FUNDS.to_le_bytes();
        for &(name, _) in &self.by_name {
            f(&keys::balance(Name(name)), Some(&coins))?;
        }
        let balance = INITIAL_BALANCE.to_le_bytes();
        for &contract in &self.contracts {
            for &swapped in &self.by_balance_key {
                let name = Name(swapped.swap_bytes());
                keys::contract_into(&mut key, contract, &name.0.to_le_bytes());
                f(&key, Some(&balance))?;
            }
        }
        Ok(())
    }
}

/// Runs the benchmark on a `chain` made by [`create`] (or reopened from disk): the blocks
/// already committed are skipped (their transfers are drawn again but not pushed), so a
/// resumed run ends at the state checksum of an uninterrupted one. `progress` gets the
/// transfers done so far.
pub fn run(
    chain: &mut Chain,
    config: &BenchConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<BenchReport, ChainError> {
    let mut run = Run::new(chain, config)?;
    while run.step()?.is_some() {
        progress(run.done);
    }
    Ok(run.finish())
}

/// The native coins of a benchmark chain made by [`create`] with `config`: what every balance
/// and the coins burned add up to at any height.
pub fn native_supply(config: &BenchConfig) -> u128 {
    u128::from(config.accounts) * u128::from(NATIVE_FUNDS) + u128::from(SYSTEM_FUNDS)
}

/// Every native coin now: every account's balance (the benchmark's, the system account's, any
/// other's) and what fees burned. Equal to [`native_supply`] after any run, or a fee was lost
/// or minted. One pass over the state in key order, up to the end of the balances: at 10M
/// accounts a point read per account cost the log store 60 s after a 15 s run (a run block
/// read each), and walking the balances by seeks more.
pub fn native_total(chain: &Chain) -> Result<u128, ChainError> {
    let mut total = u128::from(chain.fee_state()?.burned);
    for entry in chain.store().entries()? {
        let (key, value) = entry?;
        match key.first() {
            Some(&keys::BALANCE) => {}
            Some(&tag) if tag > keys::BALANCE => break,
            _ => continue,
        }
        let coins: [u8; 8] = value.as_slice().try_into().map_err(|_| {
            ChainError::Corrupt(format!("the native balance at {key:02x?} is not 8 bytes"))
        })?;
        total += u128::from(u64::from_le_bytes(coins));
    }
    Ok(total)
}

/// A digest of every contract's storage (the `keys::CONTRACT` entries): what a baseline engine
/// must reach. The whole state checksum also covers the blocks' fee usage, which differs by
/// engine (a native contract burns no fuel).
pub fn contract_state_digest(chain: &Chain) -> Result<[u8; 32], ChainError> {
    use tally_chain::store::{Direction, KeyRange, digest_entries};
    let lo = [keys::CONTRACT];
    let hi = [keys::CONTRACT + 1];
    let entries = chain.store().range(
        KeyRange::new(
            std::ops::Bound::Included(&lo[..]),
            std::ops::Bound::Excluded(&hi[..]),
        ),
        Direction::Forward,
    )?;
    Ok(digest_entries(entries)?)
}

/// Sum of every benchmark account's balance, which transfers between them conserve: it is
/// `accounts * INITIAL_BALANCE` after any run. One lookup per account.
pub fn accounts_supply(chain: &Chain, config: &BenchConfig) -> Result<u64, ChainError> {
    let mut total = 0u64;
    for i in 0..config.accounts {
        total = total.saturating_add(balance(chain, SIMPLECOIN, account_name(i))?.unwrap_or(0));
    }
    Ok(total)
}

/// What executing and committing one block gave.
pub struct BlockRun {
    /// Transactions that failed or were rejected.
    pub failed: u64,
    /// Transactions executed speculatively in parallel.
    pub speculated: u64,
    /// Of those, the ones whose speculative result stood.
    pub confirmed: u64,
    /// Time in `execute_block`.
    pub execute: Duration,
    /// Time in `commit`.
    pub commit: Duration,
}

/// Executes one prepared block through the library and commits it: what `tally bench` and
/// the criterion block bench both time.
pub fn execute_and_commit(
    chain: &mut Chain,
    prepared: &[PreparedTx],
    durability: Durability,
) -> Result<BlockRun, ChainError> {
    let t0 = Instant::now();
    let executed = chain.execute_block(chain.next_block_time_ms(), prepared)?;
    let t1 = Instant::now();
    chain.commit(durability)?;
    Ok(BlockRun {
        failed: executed.results.iter().filter(|r| !r.is_success()).count() as u64,
        speculated: executed.speculated.into(),
        confirmed: executed.confirmed.into(),
        execute: t1 - t0,
        commit: t1.elapsed(),
    })
}

/// One chain's benchmark, advanced a block at a time by [`Run::step`]: [`run`] steps it to
/// the end, and a baseline comparison steps several chains in turn, block by block, so a slow
/// minute of a shared machine hits every engine alike.
pub struct Run<'c> {
    chain: &'c mut Chain,
    config: BenchConfig,
    generator: TransferGen,
    /// The next block, prepared (verified, encoded) and ready to execute.
    current: Option<Vec<PreparedTx>>,
    height: u64,
    done: u64,
    start_done: u64,
    phases: Phases,
    elapsed: Duration,
    failed: u64,
    blocks: u64,
    speculated: u64,
    confirmed: u64,
    verify_alone: Duration,
    per_block: Vec<crate::report::BlockPoint>,
    tx_bytes: u64,
}

impl<'c> Run<'c> {
    /// Starts the benchmark on `chain` (see [`run`]) and prepares its first block.
    ///
    /// # Errors
    /// A signed run on a chain that does not check signatures, or the other way round.
    pub fn new(chain: &'c mut Chain, config: &BenchConfig) -> Result<Self, ChainError> {
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
        // Block h of the run holds transfers (h-1)*block_size.. : genesis is block 0.
        let done = chain.head().height * config.block_size as u64;
        generator.skip(done.min(config.transfers));
        chain.set_pipeline(config.pipeline);
        let height = chain.head().height + 1;
        let mut run = Self {
            chain,
            config: config.clone(),
            generator,
            current: None,
            height,
            done,
            start_done: done,
            phases: Phases::default(),
            elapsed: Duration::ZERO,
            failed: 0,
            blocks: 0,
            speculated: 0,
            confirmed: 0,
            verify_alone: Duration::ZERO,
            per_block: Vec::new(),
            tx_bytes: 0,
        };
        // The client generates one block ahead; with batched verification the chain prepares
        // that block on the spare cores while the current one executes.
        if done < run.config.transfers {
            let len = run.block_len(done);
            let block = run.generator.next_block(run.chain, height, len);
            let t = Instant::now();
            let prepared = run.chain.prepare(block);
            run.phases.verify += t.elapsed();
            run.elapsed += t.elapsed();
            run.current = Some(prepared);
        }
        Ok(run)
    }

    fn block_len(&self, done: u64) -> u64 {
        (self.config.transfers - done).min(self.config.block_size as u64)
    }

    /// Transfers done so far, counting those of blocks committed before this run started.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Executes and commits the next block. Returns its transfers per second, or `None` when
    /// the workload is done.
    ///
    /// # Errors
    /// A node fault of the chain (its store failed).
    pub fn step(&mut self) -> Result<Option<f64>, ChainError> {
        let Some(prepared) = self.current.take() else {
            return Ok(None);
        };
        let (done, height) = (self.done, self.height);
        let n = prepared.len() as u64;
        let ahead_len = self.block_len((done + n).min(self.config.transfers));
        let chain = &mut *self.chain;
        let check = chain.config().check_signatures;
        let (pipeline, durability) = (self.config.pipeline, self.config.durability);
        let ahead = (done + n < self.config.transfers)
            .then(|| self.generator.next_block(chain, height + 1, ahead_len));
        if check {
            // The ceiling: batched verification of these transactions and nothing else.
            let items: Vec<(&SignedTransaction, &TxId)> =
                prepared.iter().map(|p| (&p.tx, &p.id)).collect();
            let t = Instant::now();
            let results = crypto::verify_many(&items, &chain.committed_keys(), crypto::Need::Each);
            self.verify_alone += t.elapsed();
            debug_assert!(results.iter().all(Result::is_ok));
        }
        let t0 = Instant::now();
        // The keys of the block ahead's senders, from the committed state before this block
        // lends the chain to execution (a block older: execution verifies again any key this
        // block changes, issue 26). Timed with the block: a node reads them too.
        let ahead_keys = match &ahead {
            Some(block) if check && pipeline.batch_verify => {
                crypto::ResolvedKeys::read(block, &chain.committed_keys())
            }
            _ => crypto::ResolvedKeys::default(),
        };
        let prepare_ahead = |ahead: Option<Vec<SignedTransaction>>| {
            ahead.map(|block| {
                let t = Instant::now();
                let prepared = prepare_block(block, check, &pipeline, &ahead_keys);
                (prepared, t.elapsed())
            })
        };
        let (next, executed) = if pipeline.batch_verify {
            // Execution first, on this thread: rayon::join runs its first half where it is
            // called and offers the second to other workers. With preparation first, the block
            // ran on whichever worker took it, away from the state this thread built: at 10M
            // accounts the memory store's commit took 3.9 µs a transfer instead of 1.5.
            let (executed, next) = rayon::join(
                || execute_and_commit(chain, &prepared, durability),
                || prepare_ahead(ahead),
            );
            (next, executed)
        } else {
            let executed = execute_and_commit(chain, &prepared, durability);
            (prepare_ahead(ahead), executed)
        };
        let executed = executed?;
        let t1 = Instant::now();
        if next.is_none() {
            chain.sync()?; // the last block is durable before the clock stops
        }
        let t2 = Instant::now();
        self.failed += executed.failed;
        self.speculated += executed.speculated;
        self.confirmed += executed.confirmed;
        self.phases.execute += executed.execute;
        self.phases.commit += executed.commit + (t2 - t1);
        let tps = n as f64 / (t2 - t0).as_secs_f64().max(1e-9);
        self.per_block.push(crate::report::BlockPoint {
            tps,
            rss_bytes: crate::proc::resident_bytes(),
            disk_bytes: self.chain.store().disk_bytes(),
        });
        self.elapsed += t2 - t0;
        self.current = next.map(|(prepared, took)| {
            self.phases.verify += took;
            prepared
        });
        self.done += n;
        self.tx_bytes += prepared.iter().map(|p| p.bytes.len() as u64).sum::<u64>();
        self.height += 1;
        self.blocks += 1;
        Ok(Some(tps))
    }

    /// The report of the blocks stepped so far.
    pub fn finish(self) -> BenchReport {
        BenchReport {
            transfers: self.done - self.start_done.min(self.done),
            failed: self.failed,
            elapsed: self.elapsed,
            phases: self.phases,
            blocks: self.blocks,
            height: self.chain.head().height,
            state_checksum: self.chain.head().state_checksum,
            verify_alone: self.verify_alone,
            tx_bytes: self.tx_bytes,
            per_block: self.per_block,
            speculated: self.speculated,
            confirmed: self.confirmed,
        }
    }
}
