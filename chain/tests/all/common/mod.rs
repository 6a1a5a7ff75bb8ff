//! What the chain's test files share: names, the simplecoin contract, chains with contracts
//! deployed at genesis, and one-transaction blocks.
#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;

use tally_chain::system::SYSTEM;
use tally_chain::{
    Action, Chain, ChainConfig, FeeSchedule, Genesis, MemoryStore, Name, SignedTransaction,
    Transaction, TxResult,
};
use tally_runtime::{Runtime, RuntimeConfig};

/// contracts/simplecoin.wasm (recipe: contracts/README.md).
pub const SIMPLECOIN_WASM: &[u8] = include_bytes!("../../../../contracts/simplecoin.wasm");
/// Coins simplecoin's `onInit` gives to `simplecoin`.
pub const SIMPLECOIN_SUPPLY: u64 = 1_000_000;

pub fn name(s: &str) -> Name {
    s.parse().unwrap()
}

pub fn simplecoin() -> Name {
    name("simplecoin")
}

pub fn transfer() -> Name {
    name("transfer")
}

pub fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(RuntimeConfig::default()).unwrap())
}

/// A chain on a memory store whose genesis is `genesis` plus `contracts` deployed.
pub fn chain_with(config: ChainConfig, genesis: &Genesis, contracts: &[(Name, &[u8])]) -> Chain {
    let mut builder = Chain::genesis(runtime(), Box::new(MemoryStore::new(512)), config).unwrap();
    builder.apply(genesis).unwrap();
    if !genesis
        .accounts
        .iter()
        .any(|a| a.name == SYSTEM && a.balance > 0)
    {
        // Every coin of the chain, for the transactions nobody authorizes (paid by the system
        // account).
        builder.fund(SYSTEM, 1 << 60);
    }
    for (account, code) in contracts {
        builder.deploy(*account, code).unwrap();
    }
    builder.finish().unwrap()
}

/// A chain that does not check signatures, with `contracts` deployed at genesis.
pub fn unsigned_chain(contracts: &[(Name, &[u8])]) -> Chain {
    // Free: its transactions' payers are whoever they name, unfunded.
    let config = ChainConfig {
        check_signatures: false,
        fees: FeeSchedule::ZERO,
        ..ChainConfig::default()
    };
    chain_with(config, &Genesis::default(), contracts)
}

/// An unsigned chain with simplecoin deployed.
pub fn simplecoin_chain() -> Chain {
    unsigned_chain(&[(simplecoin(), SIMPLECOIN_WASM)])
}

/// A transaction of `actions`, valid for the next block.
pub fn envelope(chain: &Chain, actions: Vec<Action>) -> Transaction {
    let mut tx = Transaction::new(chain.next_block_time_ms() + 30_000, chain.tapos(), actions);
    if chain.config().fees.is_zero() {
        tx.max_fee = 0;
    }
    tx
}

/// One action.
pub fn action(account: Name, action: Name, auth: &[Name], data: Vec<u8>) -> Action {
    Action {
        account,
        name: action,
        authorization: auth.to_vec(),
        data,
    }
}

/// An unsigned transaction of one action, valid for the next block.
pub fn unsigned_tx(chain: &Chain, account: Name, name: Name, data: Vec<u8>) -> SignedTransaction {
    SignedTransaction::unsigned(envelope(chain, vec![action(account, name, &[], data)]))
}

/// Runs `tx` alone in a new committed block and returns what happened to it.
pub fn push(chain: &mut Chain, tx: SignedTransaction) -> TxResult {
    let mut block = chain.run_block(vec![tx]).unwrap();
    assert_eq!(block.results.len(), 1);
    block.results.pop().unwrap()
}

/// A simplecoin-style balance: 8 bytes little-endian under the account's name.
pub fn balance(chain: &Chain, contract: Name, account: Name) -> Option<u64> {
    let value = chain.get(contract, &account.0.to_le_bytes()).unwrap()?;
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

/// Every committed entry but the replay window's and the fee state, which every block
/// rewrites: what transactions and contracts can change, to show that one changed nothing.
pub fn user_state(chain: &Chain) -> Vec<(Vec<u8>, Vec<u8>)> {
    use tally_chain::state::keys::{FEES, RECENT_IDS, TAPOS};
    chain
        .store()
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .filter(|(k, _)| !matches!(k.first(), Some(&TAPOS | &RECENT_IDS | &FEES)))
        .collect()
}

/// A rayon pool of `threads` workers, for running the same blocks on several thread counts.
pub fn thread_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}
