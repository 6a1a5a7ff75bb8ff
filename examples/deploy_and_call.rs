//! cargo run --release --example deploy_and_call
//!
//! A local chain through the library API: a log store on disk, an account with a key, a
//! contract deployed by a signed `setcode`, a signed call, a committed block, and a check
//! that the stored chain re-executes to the same state.

use std::sync::Arc;

use borsh::BorshSerialize;
use tally_chain::crypto::derived_key;
use tally_chain::system::{NEWACCOUNT, NewAccount, SETCODE, SYSTEM, SetCode};
use tally_chain::{
    Action, Chain, ChainConfig, Genesis, LogOptions, LogStore, Name, SignedTransaction,
    Transaction, Transfer, TxResult,
};
use tally_runtime::{Runtime, RuntimeConfig};

fn action(account: Name, name: Name, auth: Name, data: &impl BorshSerialize) -> Action {
    Action {
        account,
        name,
        authorization: vec![auth],
        data: borsh::to_vec(data).expect("encodes"),
    }
}

/// simplecoin, built from contracts/simplecoin.c.
const SIMPLECOIN_WASM: &[u8] = include_bytes!("../contracts/simplecoin.wasm");

/// Signs `actions` with `key` for `signer` and commits them in a block of their own, through
/// the library's one block path (prepare, execute, commit).
fn push(chain: &mut Chain, actions: Vec<Action>, signer: Name, key: &ed25519_dalek::SigningKey) {
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    let tx = Transaction::new(
        chain.next_block_time_ms() + 30_000,
        (ref_block_num, ref_block_prefix),
        actions,
    );
    let block = chain
        .run_block(vec![SignedTransaction::sign(tx, &[(signer, key)])])
        .expect("the node works");
    let outcome = match &block.results[0] {
        TxResult::Included(receipt) => match receipt.failure() {
            None => "ok".to_string(),
            Some(abort) => format!("failed: {}", abort.message),
        },
        TxResult::Rejected(e) => format!("rejected: {e}"),
    };
    println!("block {}: {outcome}", block.header.height);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let system_key = derived_key(0, 0);
    let config = ChainConfig::default();
    let genesis = Genesis::with_system_key(system_key.verifying_key().to_bytes());
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("modules")),
        ..RuntimeConfig::default()
    })?);
    let store = LogStore::open(dir.path().join("store"), LogOptions::default())?;
    let mut chain = Chain::create(runtime.clone(), Box::new(store), config.clone(), &genesis)?;

    // The system account creates `simplecoin` with its own key; simplecoin deploys itself.
    let coin: Name = "simplecoin".parse()?;
    let coin_key = derived_key(0, 1);
    let new = NewAccount {
        creator: SYSTEM,
        name: coin,
        key: coin_key.verifying_key().to_bytes(),
    };
    push(
        &mut chain,
        vec![action(SYSTEM, NEWACCOUNT, SYSTEM, &new)],
        SYSTEM,
        &system_key,
    );
    let code = SetCode {
        account: coin,
        code: SIMPLECOIN_WASM.to_vec(),
    };
    push(
        &mut chain,
        vec![action(SYSTEM, SETCODE, coin, &code)],
        coin,
        &coin_key,
    );

    // A signed call: onInit gave simplecoin the supply; it sends some to alice.
    let alice: Name = "alice".parse()?;
    let transfer_action: Name = "transfer".parse()?;
    let transfer = Transfer {
        from: coin,
        to: alice,
        amount: 42,
        memo: "hello".into(),
    };
    push(
        &mut chain,
        vec![action(coin, transfer_action, coin, &transfer)],
        coin,
        &coin_key,
    );
    let balance = chain.get(coin, &alice.0.to_le_bytes())?;
    println!("alice's balance record: {:?}", balance.map(hex::encode));

    // Everything stored re-executes from genesis to the same state.
    let report = tally_chain::verify::verify(chain.store(), runtime, &config)?;
    println!("verified blocks {}..={} by replay", report.from, report.to);
    Ok(())
}
