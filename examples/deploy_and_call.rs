//! cargo run --release --example deploy_and_call
//!
//! A local chain through the library API: a log store on disk, an account with a key, a
//! contract deployed by a signed `setcode`, a signed call, a committed block, and a check
//! that the stored chain re-executes to the same state.

use std::sync::Arc;

use borsh::BorshSerialize;
use tally_chain::crypto::derived_key;
use tally_chain::system::{NEWACCOUNT, NewAccount, SETCODE, SYSTEM, SetCode};
use tally_chain::workload::{self, TRANSFER};
use tally_chain::{
    Action, Chain, ChainConfig, LogOptions, LogStore, Name, SignedTransaction, Transaction,
    Transfer,
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

/// Signs `actions` with `key` for `signer` and commits them in a block of their own.
fn push(chain: &mut Chain, actions: Vec<Action>, signer: Name, key: &ed25519_dalek::SigningKey) {
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    let tx = Transaction {
        expiration_ms: chain.pending_block_time_ms() + 30_000,
        ref_block_num,
        ref_block_prefix,
        actions,
    };
    let receipt = chain
        .push_transaction(&SignedTransaction::sign(tx, &[(signer, key)]))
        .expect("accepted");
    let header = chain.finish_block().expect("committed");
    println!(
        "block {}: {}",
        header.height,
        match tally_chain::chain::failure_reason(&receipt) {
            None => "ok".to_string(),
            Some(abort) => format!("failed: {}", abort.message),
        }
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let system_key = derived_key(0, 0);
    let config = ChainConfig {
        system_key: Some(system_key.verifying_key().to_bytes()),
        ..ChainConfig::default()
    };
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("modules")),
        ..RuntimeConfig::default()
    })?);
    let store = LogStore::open(dir.path().join("store"), LogOptions::default())?;
    let mut chain = Chain::open(runtime.clone(), Box::new(store), config.clone())?;

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
        code: workload::SIMPLECOIN_WASM.to_vec(),
    };
    push(
        &mut chain,
        vec![action(SYSTEM, SETCODE, coin, &code)],
        coin,
        &coin_key,
    );

    // A signed call: onInit gave simplecoin the supply; it sends some to alice.
    let alice: Name = "alice".parse()?;
    let transfer = Transfer {
        from: coin,
        to: alice,
        amount: 42,
        memo: "hello".into(),
    };
    push(
        &mut chain,
        vec![action(coin, TRANSFER, coin, &transfer)],
        coin,
        &coin_key,
    );
    println!(
        "alice has {:?} coins",
        workload::balance(&chain, coin, alice)?
    );

    // Everything stored re-executes from genesis to the same state.
    let report = tally_chain::verify::verify(chain.store(), runtime, &config)?;
    println!("verified blocks {}..={} by replay", report.from, report.to);
    Ok(())
}
