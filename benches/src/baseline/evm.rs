//! The `evm` baseline of `tally bench` (cargo feature `evm`): revm, in its in-memory database,
//! running solc builds of contracts/evm (rebuilt by contracts/evm/build.sh) over the same
//! accounts and the same draws as Tally's workload: a standard ERC-20's `transfer`
//! ([`EvmRun`]) for the transfer workloads, and a constant-product pool's swap ([`swap`]) for
//! `--contract swap`. [`EvmBaseline`] picks the one that matches the workload.
//!
//! The state is Ethereum's (accounts by address, storage slots by hash), not Tally's, so only
//! throughput compares; supply conservation is checked on both sides (and, for swaps, that
//! revm's pool and traders end where Tally's do). Transactions are not signed: revm takes the
//! sender as given, so compare with an unsigned Tally run (`--unsigned`), where neither side
//! verifies signatures.

pub mod swap;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use revm::context::{Context, ContextTr, TxEnv};
use revm::context_interface::result::{ExecutionResult, Output};
use revm::database::CacheDB;
use revm::database_interface::EmptyDB;
use revm::handler::{MainnetContext, MainnetEvm};
use revm::primitives::{Address, Bytes, TxKind, U256, keccak256};
use revm::{Database, ExecuteCommitEvm, MainBuilder, MainContext};

use super::Stepper;
use crate::workload::{
    BenchConfig, BenchContract, BenchReport, INITIAL_BALANCE, Phases, TransferGen,
};

/// contracts/evm/ERC20.sol's creation code, hex, built by contracts/evm/build.sh.
pub const ERC20_BIN: &str = include_str!("../../../contracts/evm/ERC20.bin");

/// The selector of `transfer(address,uint256)`: the first 4 bytes of its signature's keccak.
const TRANSFER_SELECTOR: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];

/// The storage slot of `balanceOf` and of `totalSupply` (contracts/evm/ERC20.sol's layout).
const BALANCES_SLOT: u64 = 0;
const TOTAL_SUPPLY_SLOT: u64 = 2;

/// Gas a deploy may use: deploying ERC20.bin costs 374,963 and Pool.bin 627,177 (measured in
/// revm 43 with these builds); the limit only needs to cover them, with room for a rebuild.
const DEPLOY_GAS: u64 = 5_000_000;

/// Gas a transfer may use: a cold `transfer` to a new holder costs ~52,000 (two cold
/// slots, one created); twice that leaves room and is far below a block's.
const TRANSFER_GAS: u64 = 100_000;

/// The account that deploys the token.
const DEPLOYER: Address = Address::new([0xde; 20]);

type Evm = MainnetEvm<MainnetContext<CacheDB<EmptyDB>>>;

/// A revm with an empty in-memory database, on revm's default (latest) spec.
fn new_evm() -> Evm {
    Context::mainnet()
        .with_db(CacheDB::new(EmptyDB::default()))
        .build_mainnet()
}

/// Deploys `code` (creation code, with any constructor arguments appended) from
/// [`DEPLOYER`]'s next nonce and returns the contract's address.
fn deploy(evm: &mut Evm, what: &str, code: Vec<u8>) -> anyhow::Result<Address> {
    let nonce = evm.db_mut().basic(DEPLOYER)?.map_or(0, |a| a.nonce);
    let tx = TxEnv::builder()
        .caller(DEPLOYER)
        .kind(TxKind::Create)
        .data(Bytes::from(code))
        .gas_limit(DEPLOY_GAS)
        .gas_price(0)
        .nonce(nonce)
        .build()
        .map_err(|e| anyhow::anyhow!("the deploy transaction of {what}: {e:?}"))?;
    match evm.transact_commit(tx)? {
        ExecutionResult::Success {
            output: Output::Create(_, Some(address)),
            ..
        } => Ok(address),
        other => anyhow::bail!("{what} did not deploy: {other:?}"),
    }
}

/// The first 4 bytes of the keccak of a function's signature: its selector in call data.
fn selector(signature: &str) -> [u8; 4] {
    let hash = keccak256(signature.as_bytes());
    [hash[0], hash[1], hash[2], hash[3]]
}

/// `address` as an ABI word: left-padded to 32 bytes.
fn word(address: Address) -> [u8; 32] {
    let mut word = [0u8; 32];
    word[12..].copy_from_slice(address.as_slice());
    word
}

/// The address of benchmark account `i`.
pub fn address(i: u64) -> Address {
    let mut bytes = [0u8; 20];
    bytes[0] = 0x7a; // clear of the precompiles and of DEPLOYER
    bytes[12..].copy_from_slice(&i.to_be_bytes());
    Address::new(bytes)
}

/// The storage slot of `balanceOf[holder]`: keccak256(holder as a word ++ slot 0).
fn balance_slot(holder: Address) -> U256 {
    let mut preimage = [0u8; 64];
    preimage[..32].copy_from_slice(&word(holder));
    preimage[56..64].copy_from_slice(&BALANCES_SLOT.to_be_bytes());
    U256::from_be_bytes(keccak256(preimage).0)
}

/// What a run in revm measured, block by block: [`EvmRun`]'s and [`swap::SwapRun`]'s.
#[derive(Debug, Default)]
struct Measured {
    done: u64,
    failed: u64,
    elapsed: Duration,
    per_block: Vec<crate::report::BlockPoint>,
}

impl Measured {
    /// Records a block of `n` transactions, `failed` of which failed, that took `took`, and
    /// returns its transactions per second.
    fn record(&mut self, n: u64, failed: u64, took: Duration) -> f64 {
        self.elapsed += took;
        self.done += n;
        self.failed += failed;
        let tps = n as f64 / took.as_secs_f64().max(1e-9);
        self.per_block.push(crate::report::BlockPoint {
            tps,
            rss_bytes: crate::proc::resident_bytes(),
            disk_bytes: 0,
        });
        tps
    }

    /// The report of the blocks run so far (no state checksum: the state is not Tally's).
    fn report(&self) -> BenchReport {
        BenchReport {
            transfers: self.done,
            failed: self.failed,
            elapsed: self.elapsed,
            phases: Phases {
                execute: self.elapsed,
                ..Phases::default()
            },
            blocks: self.per_block.len() as u64,
            height: self.per_block.len() as u64,
            state_checksum: [0; 32],
            verify_alone: Duration::ZERO,
            per_block: self.per_block.clone(),
            speculated: 0,
            confirmed: 0,
            tx_bytes: 0,
        }
    }
}

/// The EVM side of a comparison: the run in revm that does what Tally's workload does.
pub enum EvmBaseline {
    /// ERC-20 transfers, for the transfer workloads (simplecoin, token-rs).
    Transfers(EvmRun),
    /// Trades on contracts/evm/Pool.sol, for the swap workload.
    Swaps(swap::SwapRun),
}

impl EvmBaseline {
    /// The run in revm for `config`'s workload, deployed and funded as Tally's genesis is.
    ///
    /// # Errors
    /// A contract does not deploy.
    pub fn new(config: &BenchConfig) -> anyhow::Result<Self> {
        Ok(match config.contract {
            BenchContract::Simplecoin | BenchContract::TokenRs => {
                Self::Transfers(EvmRun::new(config)?)
            }
            BenchContract::Swap => Self::Swaps(swap::SwapRun::new(config)?),
        })
    }

    /// The report of the blocks run so far.
    pub fn report(&self) -> BenchReport {
        match self {
            Self::Transfers(run) => run.report(),
            Self::Swaps(run) => run.report(),
        }
    }

    /// Checks that the run did what Tally's did: transfers conserved the token; trades all
    /// succeeded, conserved both tokens and left the pool and every trader where `tally`'s
    /// are. Returns what the accounts (and, for swaps, the pool) hold at the end.
    ///
    /// # Errors
    /// They did not, or `tally`'s state could not be read.
    pub fn check(&mut self, tally: &tally_chain::Chain) -> anyhow::Result<u64> {
        match self {
            Self::Transfers(run) => run.check_supply(),
            Self::Swaps(run) => run.check(tally),
        }
    }
}

impl Stepper for EvmBaseline {
    fn step(&mut self) -> anyhow::Result<Option<f64>> {
        match self {
            Self::Transfers(run) => run.step(),
            Self::Swaps(run) => run.step(),
        }
    }

    fn done(&self) -> u64 {
        match self {
            Self::Transfers(run) => run.done(),
            Self::Swaps(run) => run.done(),
        }
    }
}

/// The benchmark in revm, a block at a time: see the module's docs.
pub struct EvmRun {
    evm: Evm,
    token: Address,
    generator: TransferGen,
    nonces: Vec<u64>,
    config: BenchConfig,
    measured: Measured,
}

impl EvmRun {
    /// Deploys the token and gives every benchmark account [`INITIAL_BALANCE`], as Tally's
    /// genesis does (written straight into the token's storage, as genesis writes Tally's).
    ///
    /// # Errors
    /// The token's code does not deploy.
    pub fn new(config: &BenchConfig) -> anyhow::Result<Self> {
        let code = hex::decode(ERC20_BIN.trim()).context("contracts/evm/ERC20.bin is not hex")?;
        let mut evm = new_evm();
        let token = deploy(&mut evm, "the ERC-20", code)?;
        let db = evm.db_mut();
        for i in 0..config.accounts {
            db.insert_account_storage(
                token,
                balance_slot(address(i)),
                U256::from(INITIAL_BALANCE),
            )?;
        }
        db.insert_account_storage(
            token,
            U256::from(TOTAL_SUPPLY_SLOT),
            U256::from(config.accounts) * U256::from(INITIAL_BALANCE),
        )?;
        // The same draws as Tally's workload; the keys of a signed one are not needed.
        let unsigned = BenchConfig {
            signed: false,
            ..config.clone()
        };
        Ok(Self {
            evm,
            token,
            generator: TransferGen::new(&unsigned),
            nonces: vec![0; config.accounts as usize],
            config: config.clone(),
            measured: Measured::default(),
        })
    }

    /// `balanceOf[address(i)]`.
    ///
    /// # Errors
    /// Never, in practice: the in-memory database cannot fail.
    pub fn balance(&mut self, i: u64) -> anyhow::Result<U256> {
        let token = self.token;
        Ok(self.evm.db_mut().storage(token, balance_slot(address(i)))?)
    }

    /// The sum of every benchmark account's balance and the token's `totalSupply`.
    ///
    /// # Errors
    /// Never, in practice: the in-memory database cannot fail.
    pub fn supply(&mut self) -> anyhow::Result<(U256, U256)> {
        let mut sum = U256::ZERO;
        for i in 0..self.config.accounts {
            sum += self.balance(i)?;
        }
        let token = self.token;
        let total = self
            .evm
            .db_mut()
            .storage(token, U256::from(TOTAL_SUPPLY_SLOT))?;
        Ok((sum, total))
    }

    /// Checks that transfers conserved the token: the accounts' balances still add up to
    /// what genesis gave them, and to `totalSupply`. Returns that sum.
    ///
    /// # Errors
    /// They do not.
    pub fn check_supply(&mut self) -> anyhow::Result<u64> {
        let expected = U256::from(self.config.accounts) * U256::from(INITIAL_BALANCE);
        let (sum, total) = self.supply()?;
        anyhow::ensure!(
            sum == expected && total == expected,
            "the evm baseline's accounts hold {sum} tokens at the end and totalSupply is \
             {total}, not the {expected} genesis gave them"
        );
        Ok(self.config.accounts * INITIAL_BALANCE)
    }

    /// The report of the blocks run so far (no state checksum: the state is not Tally's).
    pub fn report(&self) -> BenchReport {
        self.measured.report()
    }
}

impl Stepper for EvmRun {
    fn step(&mut self) -> anyhow::Result<Option<f64>> {
        let n = (self.config.transfers - self.measured.done).min(self.config.block_size as u64);
        if n == 0 {
            return Ok(None);
        }
        // Built before the clock starts, as Tally's client builds its transactions.
        let txs = self
            .generator
            .next_pairs(n)
            .into_iter()
            .map(|(from, to)| {
                let mut data = Vec::with_capacity(68);
                data.extend_from_slice(&TRANSFER_SELECTOR);
                data.extend_from_slice(&word(address(to)));
                data.extend_from_slice(&U256::from(1).to_be_bytes::<32>());
                let nonce = &mut self.nonces[from as usize];
                *nonce += 1;
                TxEnv::builder()
                    .caller(address(from))
                    .kind(TxKind::Call(self.token))
                    .data(Bytes::from(data))
                    .gas_limit(TRANSFER_GAS)
                    .gas_price(0)
                    .nonce(*nonce - 1)
                    .build()
                    .map_err(|e| anyhow::anyhow!("a transfer transaction: {e:?}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let start = Instant::now();
        let mut failed = 0;
        for tx in txs {
            if !self.evm.transact_commit(tx)?.is_success() {
                failed += 1;
            }
        }
        Ok(Some(self.measured.record(n, failed, start.elapsed())))
    }

    fn done(&self) -> u64 {
        self.measured.done
    }
}
