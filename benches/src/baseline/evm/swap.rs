//! Issue 22's swap in revm: contracts/evm/Pool.sol over two contracts/evm/ERC20.sol tokens,
//! the same trades as Tally's swap workload ([`crate::swap`]) with the same traders, amounts
//! and reserves.
//!
//! Trade `k` by trader `i` (the sender of the workload's `k`-th draw, as in Tally) sells
//! [`TRADE`] of token `k % 2`. Tally does it in one transaction of two actions (the token's
//! `transfer` to the pool, then the pool's `swap`); an Ethereum account sends one call per
//! transaction, so here it is those same two calls as two transactions from the trader, both
//! timed, counted as one trade (a router contract would make it one transaction but add a call
//! and an allowance to read and write). Inside `swap` the work is the same: the pool reads its
//! state, asks both tokens for its balance, computes the output with contracts/swap's formula
//! and fee, records its reserves, calls the other token's `transfer` and emits an event.
//!
//! Genesis writes the state Tally's genesis writes: every trader holds
//! [`INITIAL_BALANCE`] of both tokens, the pool holds [`RESERVE`] of each, and the pool's
//! reserves and shares are [`RESERVE`].

use std::time::Instant;

use anyhow::Context as _;
use revm::context::{ContextTr, TxEnv};
use revm::context_interface::result::{ExecutionResult, Output};
use revm::primitives::{Address, Bytes, TxKind, U256};
use revm::{Database, ExecuteCommitEvm, ExecuteEvm};
use tally_chain::Chain;

use super::{
    DEPLOYER, ERC20_BIN, Evm, Measured, TOTAL_SUPPLY_SLOT, TRANSFER_SELECTOR, address,
    balance_slot, deploy, new_evm, selector, word,
};
use crate::baseline::Stepper;
use crate::swap::{RESERVE, TOKENS, TRADE};
use crate::workload::{BenchConfig, INITIAL_BALANCE, TransferGen, account_name, balance};

/// contracts/evm/Pool.sol's creation code, hex, built by contracts/evm/build.sh.
pub const POOL_BIN: &str = include_str!("../../../../contracts/evm/Pool.bin");

/// The pool's slot of its reserves and shares (contracts/evm/Pool.sol's layout: three u64,
/// packed from the lowest-order bits).
const RESERVES_SLOT: u64 = 0;

/// Gas a trade's transfer or swap may use. The workload's transfer costs 34,379 and its swap
/// about 56,900 (`every_trade_pays_what_contracts_swap_formula_gives` measures them); paying a
/// trader whose balance is zero would add 17,100 (a slot created: 20,000 gas, not 2,900), so
/// 100,000 covers every trade with room.
const TRADE_GAS: u64 = 100_000;

/// What a trade asks at least in return: contracts/swap's workload asks 1 ([`crate::swap`]).
const MIN_OUT: u64 = 1;

/// The trades of Tally's swap workload in revm, a block at a time: see the module's docs.
pub struct SwapRun {
    evm: Evm,
    tokens: [Address; 2],
    pool: Address,
    swap_selector: [u8; 4],
    generator: TransferGen,
    nonces: Vec<u64>,
    config: BenchConfig,
    measured: Measured,
}

impl SwapRun {
    /// Deploys both tokens and the pool and writes the state Tally's genesis writes (see the
    /// module's docs), then checks that the pool reads the reserves written into it.
    ///
    /// # Errors
    /// A contract does not deploy, or the pool does not see its reserves (its storage layout
    /// is not the one this code writes).
    pub fn new(config: &BenchConfig) -> anyhow::Result<Self> {
        let erc20 = hex::decode(ERC20_BIN.trim()).context("contracts/evm/ERC20.bin is not hex")?;
        let mut pool_code =
            hex::decode(POOL_BIN.trim()).context("contracts/evm/Pool.bin is not hex")?;
        let mut evm = new_evm();
        let tokens = [
            deploy(&mut evm, "token A (ERC20.sol)", erc20.clone())?,
            deploy(&mut evm, "token B (ERC20.sol)", erc20)?,
        ];
        // The constructor's arguments, ABI-encoded after the creation code.
        pool_code.extend_from_slice(&word(tokens[0]));
        pool_code.extend_from_slice(&word(tokens[1]));
        let pool = deploy(&mut evm, "the pool (Pool.sol)", pool_code)?;
        let db = evm.db_mut();
        for token in tokens {
            for i in 0..config.accounts {
                db.insert_account_storage(
                    token,
                    balance_slot(address(i)),
                    U256::from(INITIAL_BALANCE),
                )?;
            }
            db.insert_account_storage(token, balance_slot(pool), U256::from(RESERVE))?;
            db.insert_account_storage(
                token,
                U256::from(TOTAL_SUPPLY_SLOT),
                U256::from(genesis_supply(config)),
            )?;
        }
        // reserveA, reserveB and shares, as contracts/swap's genesis record has them.
        let packed =
            U256::from(RESERVE) | (U256::from(RESERVE) << 64) | (U256::from(RESERVE) << 128);
        db.insert_account_storage(pool, U256::from(RESERVES_SLOT), packed)?;
        // The same draws as Tally's workload; the keys of a signed one are not needed.
        let unsigned = BenchConfig {
            signed: false,
            ..config.clone()
        };
        let mut run = Self {
            evm,
            tokens,
            pool,
            swap_selector: selector("swap(address,uint256)"),
            generator: TransferGen::new(&unsigned),
            nonces: vec![0; config.accounts as usize],
            config: config.clone(),
            measured: Measured::default(),
        };
        let reserves = run.reserves()?;
        anyhow::ensure!(
            reserves == (RESERVE, RESERVE),
            "the pool reads reserves {reserves:?} after genesis wrote ({RESERVE}, {RESERVE}): \
             contracts/evm/Pool.sol's storage layout changed; update RESERVES_SLOT and the \
             packing in SwapRun::new to match it"
        );
        Ok(run)
    }

    /// The pool's reserves, as its `reserves()` answers them (a call, not committed).
    ///
    /// # Errors
    /// The call failed.
    pub fn reserves(&mut self) -> anyhow::Result<(u64, u64)> {
        let nonce = self.evm.db_mut().basic(DEPLOYER)?.map_or(0, |a| a.nonce);
        let tx = TxEnv::builder()
            .caller(DEPLOYER)
            .kind(TxKind::Call(self.pool))
            .data(Bytes::from(selector("reserves()").to_vec()))
            .gas_limit(TRADE_GAS)
            .gas_price(0)
            .nonce(nonce)
            .build()
            .map_err(|e| anyhow::anyhow!("the reserves() call: {e:?}"))?;
        let output = match self.evm.transact(tx)?.result {
            ExecutionResult::Success {
                output: Output::Call(output),
                ..
            } if output.len() == 64 => output,
            other => anyhow::bail!("the pool's reserves() failed: {other:?}"),
        };
        let reserve = |w: &[u8]| -> anyhow::Result<u64> {
            u64::try_from(U256::from_be_slice(w))
                .map_err(|_| anyhow::anyhow!("a reserve beyond u64 from reserves()"))
        };
        Ok((reserve(&output[..32])?, reserve(&output[32..])?))
    }

    /// What `holder` holds of token `token` (0 or 1).
    ///
    /// # Errors
    /// Never, in practice: the in-memory database cannot fail.
    pub fn balance_of(&mut self, token: usize, holder: Address) -> anyhow::Result<U256> {
        let token = self.tokens[token];
        Ok(self.evm.db_mut().storage(token, balance_slot(holder))?)
    }

    /// The pool's address.
    pub fn pool(&self) -> Address {
        self.pool
    }

    /// Checks that the trades did what Tally's did: none failed, each token is conserved
    /// (the traders and the pool hold what genesis gave, which is its `totalSupply`), the
    /// pool's reserves are its balances, and the reserves and every trader's balances equal
    /// `tally`'s. Returns what the traders and the pool hold of both tokens together.
    ///
    /// # Errors
    /// One of those does not hold, or `tally`'s state could not be read.
    pub fn check(&mut self, tally: &Chain) -> anyhow::Result<u64> {
        anyhow::ensure!(
            self.measured.failed == 0,
            "{} of the evm baseline's {} trades failed",
            self.measured.failed,
            self.measured.done
        );
        let reserves = self.reserves()?;
        let tally_reserves = crate::swap::reserves(tally)?;
        anyhow::ensure!(
            reserves == tally_reserves,
            "the evm baseline's pool ends with reserves {reserves:?}, Tally's with \
             {tally_reserves:?}: the two did not make the same trades"
        );
        let expected = U256::from(genesis_supply(&self.config));
        let mut holdings = 0u64;
        for (t, reserve) in [reserves.0, reserves.1].into_iter().enumerate() {
            let pool = self.balance_of(t, self.pool)?;
            anyhow::ensure!(
                pool == U256::from(reserve),
                "the evm baseline's pool holds {pool} of token {t} but records {reserve}"
            );
            let mut sum = pool;
            for i in 0..self.config.accounts {
                let held = self.balance_of(t, address(i))?;
                let in_tally = balance(tally, TOKENS[t], account_name(i))?.unwrap_or(0);
                anyhow::ensure!(
                    held == U256::from(in_tally),
                    "trader {i} holds {held} of token {t} in the evm baseline, {in_tally} in \
                     Tally"
                );
                sum += held;
            }
            let token = self.tokens[t];
            let total = self
                .evm
                .db_mut()
                .storage(token, U256::from(TOTAL_SUPPLY_SLOT))?;
            anyhow::ensure!(
                sum == expected && total == expected,
                "the evm baseline's traders and pool hold {sum} of token {t} and its \
                 totalSupply is {total}, not the {expected} genesis gave them"
            );
            holdings += genesis_supply(&self.config);
        }
        Ok(holdings)
    }

    /// The report of the blocks run so far (no state checksum: the state is not Tally's).
    pub fn report(&self) -> crate::workload::BenchReport {
        self.measured.report()
    }

    /// Trade `k` by trader `from`: its two transactions.
    fn trade(&mut self, k: u64, from: u64) -> anyhow::Result<[TxEnv; 2]> {
        let trader = address(from);
        let mut transfer = Vec::with_capacity(68);
        transfer.extend_from_slice(&TRANSFER_SELECTOR);
        transfer.extend_from_slice(&word(self.pool));
        transfer.extend_from_slice(&U256::from(TRADE).to_be_bytes::<32>());
        let mut swap = Vec::with_capacity(68);
        swap.extend_from_slice(&self.swap_selector);
        swap.extend_from_slice(&word(trader));
        swap.extend_from_slice(&U256::from(MIN_OUT).to_be_bytes::<32>());
        let nonce = &mut self.nonces[from as usize];
        *nonce += 2;
        let tx = |to: Address, data: Vec<u8>, nonce: u64| {
            TxEnv::builder()
                .caller(trader)
                .kind(TxKind::Call(to))
                .data(Bytes::from(data))
                .gas_limit(TRADE_GAS)
                .gas_price(0)
                .nonce(nonce)
                .build()
                .map_err(|e| anyhow::anyhow!("a trade's transaction: {e:?}"))
        };
        let sold = self.tokens[(k % 2) as usize];
        Ok([
            tx(sold, transfer, *nonce - 2)?,
            tx(self.pool, swap, *nonce - 1)?,
        ])
    }
}

/// What genesis gives of each token: every trader [`INITIAL_BALANCE`], the pool [`RESERVE`].
fn genesis_supply(config: &BenchConfig) -> u64 {
    config.accounts * INITIAL_BALANCE + RESERVE
}

impl Stepper for SwapRun {
    fn step(&mut self) -> anyhow::Result<Option<f64>> {
        let first = self.measured.done;
        let n = (self.config.transfers - first).min(self.config.block_size as u64);
        if n == 0 {
            return Ok(None);
        }
        // Built before the clock starts, as Tally's client builds its transactions.
        let pairs = self.generator.next_pairs(n);
        let trades = pairs
            .into_iter()
            .zip(first..)
            .map(|((from, _), k)| self.trade(k, from))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let start = Instant::now();
        let mut failed = 0;
        for [transfer, swap] in trades {
            // The swap runs even if the transfer failed: it then finds nothing arrived and
            // fails too, as Tally's transaction fails whole.
            let transferred = self.evm.transact_commit(transfer)?.is_success();
            let swapped = self.evm.transact_commit(swap)?.is_success();
            if !(transferred && swapped) {
                failed += 1;
            }
        }
        Ok(Some(self.measured.record(n, failed, start.elapsed())))
    }

    fn done(&self) -> u64 {
        self.measured.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Distribution;

    /// A fresh run of `trades` trades among 8 traders.
    fn new_run(trades: u64) -> SwapRun {
        SwapRun::new(&BenchConfig {
            transfers: trades,
            accounts: 8,
            dist: Distribution::Uniform,
            seed: 3,
            block_size: 4,
            signed: false,
            contract: crate::workload::BenchContract::Swap,
            ..BenchConfig::default()
        })
        .unwrap()
    }

    /// contracts/swap's output for `amount_in` against these reserves, in u128 as it computes.
    fn swap_formula(amount_in: u64, reserve_in: u64, reserve_out: u64) -> u64 {
        let in_with_fee = u128::from(amount_in) * (10_000 - 30);
        (in_with_fee * u128::from(reserve_out) / (u128::from(reserve_in) * 10_000 + in_with_fee))
            as u64
    }

    /// Runs `data` on `to` from `caller`, committed; returns the result.
    fn send(run: &mut SwapRun, caller: Address, to: Address, data: Vec<u8>) -> ExecutionResult {
        let nonce = run
            .evm
            .db_mut()
            .basic(caller)
            .unwrap()
            .map_or(0, |a| a.nonce);
        let tx = TxEnv::builder()
            .caller(caller)
            .kind(TxKind::Call(to))
            .data(Bytes::from(data))
            .gas_limit(TRADE_GAS)
            .gas_price(0)
            .nonce(nonce)
            .build()
            .unwrap();
        run.evm.transact_commit(tx).unwrap()
    }

    fn call_data(selector: [u8; 4], address: Address, amount: u64) -> Vec<u8> {
        let mut data = selector.to_vec();
        data.extend_from_slice(&word(address));
        data.extend_from_slice(&U256::from(amount).to_be_bytes::<32>());
        data
    }

    #[test]
    fn transfer_selector_is_the_keccak_of_its_signature() {
        assert_eq!(TRANSFER_SELECTOR, selector("transfer(address,uint256)"));
    }

    #[test]
    fn every_trade_pays_what_contracts_swap_formula_gives() {
        let mut run = new_run(6);
        let mut reserves = (RESERVE, RESERVE);
        let mut gas = Vec::new();
        for k in 0..6u64 {
            let trader = address(k % 8);
            let [transfer, swap] = run.trade(k, k % 8).unwrap();
            let before = run.balance_of(((k + 1) % 2) as usize, trader).unwrap();
            for tx in [transfer, swap] {
                let result = run.evm.transact_commit(tx).unwrap();
                assert!(result.is_success(), "trade {k}: {result:?}");
                gas.push(result.tx_gas_used());
            }
            let out = if k % 2 == 0 {
                let out = swap_formula(TRADE, reserves.0, reserves.1);
                reserves = (reserves.0 + TRADE, reserves.1 - out);
                out
            } else {
                let out = swap_formula(TRADE, reserves.1, reserves.0);
                reserves = (reserves.0 - out, reserves.1 + TRADE);
                out
            };
            assert!(out > 0);
            let after = run.balance_of(((k + 1) % 2) as usize, trader).unwrap();
            assert_eq!(after - before, U256::from(out), "trade {k}");
            assert_eq!(run.reserves().unwrap(), reserves, "trade {k}");
        }
        // The gas limit covers the costliest transaction, even paying a zero balance (see
        // TRADE_GAS).
        let most = gas.iter().copied().max().unwrap();
        assert!(
            most + 17_100 < TRADE_GAS,
            "a trade's transaction used {most} gas"
        );
    }

    #[test]
    fn a_swap_below_min_out_reverts_and_the_pool_keeps_its_reserves() {
        let mut run = new_run(1);
        let trader = address(0);
        let (pool, token) = (run.pool, run.tokens[0]);
        let transfer = call_data(TRANSFER_SELECTOR, pool, TRADE);
        assert!(send(&mut run, trader, token, transfer).is_success());
        let too_much = swap_formula(TRADE, RESERVE, RESERVE) + 1;
        let swap = call_data(run.swap_selector, trader, too_much);
        let result = send(&mut run, trader, pool, swap);
        assert!(
            matches!(result, ExecutionResult::Revert { .. }),
            "{result:?}"
        );
        assert_eq!(run.reserves().unwrap(), (RESERVE, RESERVE));
        // What arrived is still there to swap, at the formula's price.
        let swap = call_data(run.swap_selector, trader, too_much - 1);
        assert!(send(&mut run, trader, pool, swap).is_success());
    }

    #[test]
    fn a_swap_with_nothing_arrived_or_for_another_user_reverts() {
        let mut run = new_run(1);
        let (trader, other, pool) = (address(0), address(1), run.pool);
        let swap = call_data(run.swap_selector, trader, MIN_OUT);
        let result = send(&mut run, trader, pool, swap);
        assert!(
            matches!(result, ExecutionResult::Revert { .. }),
            "{result:?}"
        );
        let transfer = call_data(TRANSFER_SELECTOR, pool, TRADE);
        let token = run.tokens[1];
        assert!(send(&mut run, trader, token, transfer).is_success());
        let swap = call_data(run.swap_selector, trader, MIN_OUT);
        let result = send(&mut run, other, pool, swap);
        assert!(
            matches!(result, ExecutionResult::Revert { .. }),
            "{result:?}"
        );
        assert_eq!(run.reserves().unwrap(), (RESERVE, RESERVE));
    }
}
