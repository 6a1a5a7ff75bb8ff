//! {{name}}'s tests on an in-process chain (`tally_chain::testing`): no data directory, no
//! node; each push is a signed transaction in a block, run as a node runs it.
//!
//! Run: `./test.sh` from the project directory (it builds {{name}}.wasm first), or
//! `tally build . -o {{name}}.wasm && cargo test --manifest-path test/Cargo.toml`.
//! A failed receipt's `report()` says which action failed, why, where in the contract
//! (function and offset) and what it printed.

#[path = "../src/abi.rs"]
#[allow(dead_code)] // the contract's `Action` enum is for its dispatch
mod abi;

use abi::{Hit, Reset};
use tally_chain::testing::TestChain;
use tally_host_api::message::Message;
use tally_host_api::{AbortCode, Name};

/// The contract as `tally build . -o {{name}}.wasm` wrote it.
const WASM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../{{name}}.wasm");

/// A chain with {{name}} deployed to the account `{{name}}`, and accounts alice and bob.
fn chain() -> TestChain {
    let wasm = std::fs::read(WASM).unwrap_or_else(|e| {
        panic!("cannot read {WASM} ({e}): build it first with `tally build . -o {{name}}.wasm`")
    });
    let mut chain = TestChain::new();
    chain.deploy("{{name}}", wasm);
    chain.create_account("alice");
    chain.create_account("bob");
    chain
}

fn name(s: &str) -> Name {
    s.parse().unwrap()
}

/// `who`'s count: a u64 under the account's 8-byte name.
fn count(chain: &TestChain, who: &str) -> Option<u64> {
    chain.get_as("{{name}}", name(who).0.to_le_bytes())
}

#[test]
fn hit_adds_one_to_the_callers_count() {
    let mut chain = chain();
    let hit = Hit { who: name("alice") };
    for _ in 0..2 {
        let receipt = chain.push("alice", "{{name}}", Hit::NAME, &hit);
        assert!(receipt.is_success(), "{}", receipt.report());
    }
    assert_eq!(count(&chain, "alice"), Some(2), "alice's count after two hits");
    assert_eq!(count(&chain, "bob"), None);
}

#[test]
fn only_the_account_itself_may_hit_or_reset() {
    let mut chain = chain();
    let receipt = chain.push("bob", "{{name}}", Hit::NAME, &Hit { who: name("alice") });
    let failure = receipt.failure().expect("bob cannot hit for alice");
    assert_eq!(failure.code, AbortCode::Unauthorized, "{}", receipt.report());
    assert_eq!(count(&chain, "alice"), None);
}

#[test]
fn reset_forgets_the_count() {
    let mut chain = chain();
    let hit = Hit { who: name("alice") };
    assert!(chain.push("alice", "{{name}}", Hit::NAME, &hit).is_success());
    let reset = Reset { who: name("alice") };
    let receipt = chain.push("alice", "{{name}}", Reset::NAME, &reset);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(count(&chain, "alice"), None);
}
