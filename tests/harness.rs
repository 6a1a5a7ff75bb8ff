//! The contract test harness (`tally_chain::testing`, issue 15): simplecoin and token-rs give
//! the results the chain's own tests expect, every block it runs replays identically on a
//! plain chain, and receipts carry per-action fuel, console and trap locations.

use std::sync::Arc;

use tally_chain::testing::TestChain;
use tally_chain::{BlockBody, Chain, ChainConfig, Genesis, MemoryStore, Transfer, TxResult};
use tally_host_api::{AbortCode, Name};
use tally_runtime::{Runtime, RuntimeConfig};

#[path = "../contracts/token-rs/src/abi.rs"]
#[allow(dead_code)] // the contract's `Action` enum is for its dispatch, not for tests
mod token_abi;

const SIMPLECOIN: &[u8] = include_bytes!("../contracts/simplecoin.wasm");
const TOKEN_RS: &[u8] = include_bytes!("../contracts/token-rs.wasm");
/// What simplecoin's `onInit` gives to `simplecoin`.
const SIMPLECOIN_SUPPLY: u64 = 1_000_000;

fn name(s: &str) -> Name {
    s.parse().unwrap()
}

fn transfer(from: &str, to: &str, amount: u64) -> Transfer {
    Transfer {
        from: name(from),
        to: name(to),
        amount,
        memo: "memo".into(),
    }
}

/// Runs every block the harness committed again on a plain chain (untraced runtime, its own
/// memory store, the same genesis) and checks each header and receipt is the same: the
/// harness runs the node's block path, not a shortcut.
fn replays_on_a_plain_chain(harness: &TestChain) {
    let system = harness.key("tally").unwrap().verifying_key().to_bytes();
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    let mut genesis = Genesis::with_system_key(system);
    genesis.accounts[0].balance = TestChain::SUPPLY;
    let mut plain = Chain::create(
        runtime,
        Box::new(MemoryStore::new(512)),
        ChainConfig::default(),
        &genesis,
    )
    .unwrap();
    let source = harness.chain();
    assert_eq!(
        plain.head(),
        &source.store().block(0).unwrap().unwrap().header
    );
    for height in 1..=source.head().height {
        let record = source.store().block(height).unwrap().unwrap();
        let body: BlockBody = borsh::from_slice(&record.body).unwrap();
        let block = plain.run_block(body.transactions).unwrap();
        assert_eq!(block.header, record.header, "block {height}");
        let success: Vec<bool> = block.results.iter().map(TxResult::is_success).collect();
        assert_eq!(success, body.success, "block {height}");
    }
    assert_eq!(
        plain.state_digest().unwrap(),
        source.state_digest().unwrap()
    );
}

#[test]
fn simplecoin_runs_the_seeds_scenario_with_exact_balances() {
    let mut chain = TestChain::new();
    chain.deploy("simplecoin", SIMPLECOIN);
    assert_eq!(
        chain.balance("simplecoin", "simplecoin"),
        Some(SIMPLECOIN_SUPPLY)
    );
    // The EOS post's test: 1,000 transfers of 1+i from simplecoin to init1, in one block.
    let block: Vec<_> = (0..1000)
        .map(|i| {
            let data = transfer("simplecoin", "init1", 1 + i);
            vec![TestChain::action(
                "simplecoin",
                "simplecoin",
                "transfer",
                &data,
            )]
        })
        .collect();
    for (i, result) in chain.push_block(block).iter().enumerate() {
        assert!(result.is_success(), "transfer {i}: {result:?}");
    }
    let moved: u64 = (1..=1000).sum();
    assert_eq!(chain.balance("simplecoin", "init1"), Some(moved));
    assert_eq!(
        chain.balance("simplecoin", "simplecoin"),
        Some(SIMPLECOIN_SUPPLY - moved)
    );
    replays_on_a_plain_chain(&chain);
}

#[test]
fn simplecoin_failures_change_nothing_and_say_why_and_where() {
    let mut chain = TestChain::new();
    chain.deploy("simplecoin", SIMPLECOIN);
    chain.create_account("alice");
    let r = chain.push(
        "simplecoin",
        "simplecoin",
        "transfer",
        &transfer("simplecoin", "alice", 100),
    );
    assert!(r.is_success(), "{}", r.report());
    for (data, reason) in [
        (
            borsh::to_vec(&transfer("alice", "bob", 101)).unwrap(),
            "insufficient funds",
        ),
        (
            borsh::to_vec(&transfer("carol", "bob", 1)).unwrap(),
            "no existing balance",
        ),
        (vec![1, 2, 3], "message too short"),
    ] {
        let r = chain.push_raw("alice", "simplecoin", "transfer", data);
        let abort = r.failure().expect("a failure");
        assert_eq!(abort.code, AbortCode::AssertFailed);
        assert_eq!(abort.message, reason);
        assert_eq!(r.failed_action, Some(0));
        // The harness traces: where the contract stopped (simplecoin.wasm has no name
        // section, so its export names the handler) and what the action cost.
        let trap = r.trap().expect("a traced failure");
        assert!(
            trap.frames
                .iter()
                .any(|f| f.func_name.as_deref() == Some("onApply_Transfer_simplecoin")),
            "{}",
            r.report()
        );
        assert!(trap.innermost().unwrap().offset.is_some());
        let fuel = r.action_fuel().unwrap();
        assert_eq!(fuel.len(), 1);
        assert!(fuel[0] > 0 && fuel[0] < r.fuel_used);
    }
    assert_eq!(chain.balance("simplecoin", "alice"), Some(100));
    assert_eq!(chain.balance("simplecoin", "bob"), None);
    replays_on_a_plain_chain(&chain);
}

#[test]
fn a_failing_action_rolls_back_the_earlier_actions_of_its_transaction() {
    let mut chain = TestChain::new();
    chain.deploy("simplecoin", SIMPLECOIN);
    let data = transfer("simplecoin", "alice", 5);
    let r = chain.push_actions(vec![
        TestChain::action("simplecoin", "simplecoin", "transfer", &data),
        TestChain::raw_action("simplecoin", "simplecoin", "transfer", vec![0; 4]),
    ]);
    assert_eq!(r.failed_action, Some(1));
    assert_eq!(r.action_fuel().unwrap().len(), 2);
    assert_eq!(chain.balance("simplecoin", "alice"), None);
    assert_eq!(
        chain.balance("simplecoin", "simplecoin"),
        Some(SIMPLECOIN_SUPPLY)
    );
}

#[test]
fn token_rs_creates_issues_and_transfers_with_authority() {
    use token_abi::{Create, Issue, Transfer as TokenTransfer};
    let mut chain = TestChain::new();
    chain.deploy("token", TOKEN_RS);
    for account in ["issuer", "alice", "bob"] {
        chain.create_account(account);
    }
    let create = Create {
        issuer: name("issuer"),
        max_supply: 1000,
    };
    assert!(
        chain
            .push("issuer", "token", "create", &create)
            .is_success()
    );
    // The key is the 5 bytes "stats", as tests/authoring.rs expects.
    assert!(chain.get("token", b"stats").is_some());
    let again = chain.push("issuer", "token", "create", &create);
    assert_eq!(again.failure().unwrap().message, "token already created");

    let issue = Issue {
        to: name("alice"),
        amount: 250,
        memo: "".into(),
    };
    // Only the issuer may issue: alice's signature is not its authority.
    let r = chain.push("alice", "token", "issue", &issue);
    assert_eq!(r.failure().unwrap().code, AbortCode::Unauthorized);
    assert!(chain.push("issuer", "token", "issue", &issue).is_success());
    assert_eq!(chain.balance("token", "alice"), Some(250));

    let send = |amount| TokenTransfer {
        from: name("alice"),
        to: name("bob"),
        amount,
        memo: "hi".into(),
    };
    assert!(
        chain
            .push("alice", "token", "transfer", &send(100))
            .is_success()
    );
    let r = chain.push("bob", "token", "transfer", &send(1));
    assert_eq!(r.failure().unwrap().code, AbortCode::Unauthorized);
    let r = chain.push("alice", "token", "transfer", &send(151));
    assert_eq!(r.failure().unwrap().message, "insufficient funds");
    assert_eq!(chain.balance("token", "alice"), Some(150));
    assert_eq!(chain.balance("token", "bob"), Some(100));
    // Malformed data is refused with the C readers' messages (tests/authoring.rs).
    let r = chain.push_raw("alice", "token", "transfer", vec![0; 23]);
    assert_eq!(r.failure().unwrap().message, "message too short");
    replays_on_a_plain_chain(&chain);
}

#[test]
fn token_rs_and_simplecoin_move_the_same_balances() {
    // alice gets 1,000 coins in each contract, then sends the same transfers through both,
    // some more than she has.
    let run = |wasm: &[u8]| {
        // simplecoin's handler is `onApply_Transfer_simplecoin`: it must live at `simplecoin`.
        let coin = if wasm == TOKEN_RS {
            "token"
        } else {
            "simplecoin"
        };
        let mut chain = TestChain::new();
        chain.deploy(coin, wasm);
        chain.create_account("alice");
        let funded = if wasm == TOKEN_RS {
            let create = token_abi::Create {
                issuer: name(coin),
                max_supply: 1_000_000,
            };
            assert!(chain.push(coin, coin, "create", &create).is_success());
            let issue = token_abi::Issue {
                to: name("alice"),
                amount: 1000,
                memo: "".into(),
            };
            chain.push(coin, coin, "issue", &issue)
        } else {
            let seed = transfer("simplecoin", "alice", 1000);
            chain.push(coin, coin, "transfer", &seed)
        };
        assert!(funded.is_success(), "{}", funded.report());
        let outcomes: Vec<bool> = (0..30u64)
            .map(|i| {
                let to = ["bob", "carol"][i as usize % 2];
                let data = transfer("alice", to, 7 + 29 * i);
                chain.push("alice", coin, "transfer", &data).is_success()
            })
            .collect();
        let balances: Vec<_> = ["alice", "bob", "carol"]
            .iter()
            .map(|a| chain.balance(coin, *a))
            .collect();
        (outcomes, balances)
    };
    let simplecoin = run(SIMPLECOIN);
    assert!(
        simplecoin.0.contains(&true) && simplecoin.0.contains(&false),
        "{simplecoin:?}"
    );
    assert_eq!(run(TOKEN_RS), simplecoin);
}

/// A contract with a name section: `apply` prints, then `check_amount` traps (a division by
/// zero) when the message's first byte is zero.
const NAMED_TRAP: &str = r#"(module
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "print" (func $print (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "checking amount")
  (func $check_amount (param i32) (result i32)
    (i32.div_u (i32.const 100) (local.get 0)))
  (func (export "apply") (param i64 i64 i64)
    (drop (call $read_message (i32.const 0) (i32.const 1)))
    (call $print (i32.const 100) (i32.const 15))
    (drop (call $check_amount (i32.load8_u (i32.const 0))))))"#;

#[test]
fn issue_15_receipts_show_console_fuel_and_the_named_function_that_trapped() {
    let mut chain = TestChain::new();
    chain.deploy("checker", wat::parse_str(NAMED_TRAP).unwrap());
    let ok = chain.push_raw("checker", "checker", "check", vec![5]);
    assert!(ok.is_success(), "{}", ok.report());
    assert_eq!(ok.console_text(), "checking amount");
    assert!(ok.trap().is_none());

    let r = chain.push_raw("checker", "checker", "check", vec![0]);
    assert_eq!(r.failure().unwrap().message, "integer division by zero");
    assert_eq!(r.console_text(), "checking amount");
    let trap = r.trap().unwrap();
    let top = trap.innermost().unwrap();
    assert_eq!(top.func_name.as_deref(), Some("check_amount"));
    assert_eq!(top.func_index, 2); // after the two imports
    assert_eq!(trap.frames[1].func_name.as_deref(), Some("apply"));
    let report = r.report();
    assert!(
        report.contains("stopped in check_amount (function 2) at offset 0x"),
        "{report}"
    );
    assert!(report.contains("checking amount"), "{report}");
}
