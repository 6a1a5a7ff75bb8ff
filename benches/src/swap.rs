//! The swap workload (issue 22): every transaction is one trade on contracts/swap, a
//! constant-product pool of two token-rs tokens. The trader's `transfer` of what it sells to
//! the pool, then `swap`, in which the pool asks both tokens for its balance (two queries)
//! and pays out with a call to the other token's `transfer`: four contract entries and three
//! calls between contracts per transaction. Traders alternate direction so the reserves stay
//! balanced over a run.

use std::sync::Arc;

use borsh::BorshSerialize;
use tally_chain::{
    Action, Chain, ChainConfig, ChainError, GenesisBuilder, MemoryStore, Pipeline,
    SignedTransaction, Transaction,
};
use tally_host_api::Name;
use tally_host_api::message::Message;
use tally_runtime::{Runtime, RuntimeConfig};

use crate::workload::account_name;

/// contracts/token-rs.wasm: both tokens of the pool.
pub const TOKEN_WASM: &[u8] = include_bytes!("../../contracts/token-rs.wasm");
/// contracts/swap.wasm: the pool.
pub const SWAP_WASM: &[u8] = include_bytes!("../../contracts/swap.wasm");

const fn name(s: &str) -> Name {
    match Name::from_str_const(s) {
        Ok(n) => n,
        Err(_) => panic!("valid name"),
    }
}

/// The pool's account.
pub const POOL: Name = name("swap");
/// Its two tokens' accounts.
pub const TOKENS: [Name; 2] = [name("tokena"), name("tokenb")];

/// What each trader holds of each token at genesis.
pub const TRADER_BALANCE: u64 = 1_000_000_000;
/// The pool's reserve of each token at genesis: deep enough that a trade hardly moves the
/// price.
pub const RESERVE: u64 = 1_000_000_000_000;
/// What each trade sells.
pub const TRADE: u64 = 1_000;

/// swap's state under its key "pool" (contracts/swap/src/lib.rs).
#[derive(BorshSerialize)]
struct Pool {
    token_a: Name,
    token_b: Name,
    reserve_a: u64,
    reserve_b: u64,
    shares: u64,
}

#[allow(dead_code)]
#[path = "../../contracts/swap/src/abi.rs"]
mod swap_abi;
/// token-rs's and the exchange's action types, as `tally abigen` generated them.
#[allow(dead_code)]
#[path = "../../contracts/token-rs/src/abi.rs"]
mod token_abi;

/// Deploys the two tokens and the pool, with the pool holding [`RESERVE`] of each token.
/// Traders' balances are the caller's to write (under each of [`TOKENS`]).
pub fn deploy(genesis: &mut GenesisBuilder) -> Result<(), ChainError> {
    for token in TOKENS {
        genesis.deploy(token, TOKEN_WASM)?;
        genesis.allocate(token, &POOL.0.to_le_bytes(), &RESERVE.to_le_bytes());
    }
    genesis.deploy(POOL, SWAP_WASM)?;
    let pool = Pool {
        token_a: TOKENS[0],
        token_b: TOKENS[1],
        reserve_a: RESERVE,
        reserve_b: RESERVE,
        shares: RESERVE,
    };
    let pool = borsh::to_vec(&pool).expect("encoding into a Vec cannot fail");
    genesis.allocate(POOL, b"pool", &pool);
    Ok(())
}

/// Trade number `k` by `trader`: [`TRADE`] of token `k % 2` to the pool, then `swap`.
pub fn actions(trader: Name, k: u64) -> Vec<Action> {
    let transfer = token_abi::Transfer {
        from: trader,
        to: POOL,
        amount: TRADE,
        // Unique, so that a trader's repeated trades are distinct transactions.
        memo: k.to_string(),
    };
    let swap = swap_abi::Swap {
        user: trader,
        min_out: 1,
    };
    vec![
        Action {
            account: TOKENS[(k % 2) as usize],
            name: name("transfer"),
            authorization: vec![trader],
            data: transfer.encode(),
        },
        Action {
            account: POOL,
            name: name("swap"),
            authorization: vec![trader],
            data: swap.encode(),
        },
    ]
}

/// A chain (memory store, unsigned: execution is what is measured) with the two tokens and
/// the pool deployed and `traders` accounts holding [`TRADER_BALANCE`] of each token, run in
/// order on one thread: the criterion bench's.
pub fn chain(traders: u64) -> Result<Chain, ChainError> {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
    let config = ChainConfig {
        check_signatures: false,
        ..ChainConfig::default()
    };
    let mut genesis = Chain::genesis(runtime, Box::new(MemoryStore::new(16)), config)?;
    deploy(&mut genesis)?;
    for token in TOKENS {
        for i in 0..traders {
            let trader = account_name(i).0.to_le_bytes();
            genesis.allocate(token, &trader, &TRADER_BALANCE.to_le_bytes());
        }
    }
    for i in 0..traders {
        genesis.fund(account_name(i), crate::workload::NATIVE_FUNDS);
    }
    let mut chain = genesis.finish()?;
    chain.set_pipeline(Pipeline {
        parallel_execute: false,
        ..Pipeline::ALL
    });
    Ok(chain)
}

/// `n` trades for the next block, by traders `first + k` (modulo `traders`).
pub fn block(chain: &Chain, traders: u64, first: u64, n: u64) -> Vec<SignedTransaction> {
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    (first..first + n)
        .map(|k| {
            SignedTransaction::unsigned(Transaction::new(
                chain.next_block_time_ms() + 30_000,
                (ref_block_num, ref_block_prefix),
                actions(account_name(k % traders), k),
            ))
        })
        .collect()
}

/// The pool's reserves, as its query `reserves` answers them: what a baseline's pool must end
/// with after the same trades.
///
/// # Errors
/// The chain failed, or the pool did not answer (it is not deployed on `chain`).
pub fn reserves(chain: &Chain) -> anyhow::Result<(u64, u64)> {
    let answer = chain.query(POOL, name("reserves"), &[])?;
    anyhow::ensure!(
        answer.is_success(),
        "the pool did not answer `reserves` ({:?}): is contracts/swap deployed at {POOL}?",
        answer.failure()
    );
    Ok(borsh::from_slice(&answer.output)?)
}

/// What traders `0..traders` and the pool hold of both tokens together. Trades only move
/// tokens between them, so after any run it is what genesis gave them.
///
/// # Errors
/// The chain's store failed.
pub fn holdings(chain: &Chain, traders: u64) -> Result<u64, ChainError> {
    let mut total = 0u64;
    for token in TOKENS {
        let held = |who| crate::workload::balance(chain, token, who).map(Option::unwrap_or_default);
        total = total.saturating_add(held(POOL)?);
        for i in 0..traders {
            total = total.saturating_add(held(account_name(i))?);
        }
    }
    Ok(total)
}
