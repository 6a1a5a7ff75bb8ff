//! contracts/dca.c end to end (issue 22): a C contract that composes with others through the
//! headers `tally abigen` generates. It asks the exchange for its reserves (a query), pays it
//! with a token call, calls its `swap` for the return value, reads the block's time, emits an
//! event and answers a query, and a failure anywhere rolls all of it back.
//!
//! The test drives it with the Rust types `tally abigen --lang rust` generated from the same
//! ABI (dca_abi.rs): one ABI, a C contract, a Rust client.

use crate::common::*;
use crate::swap::{market_with, push_tx, token_balance, transfer};
use tally_chain::{Chain, TxReceipt};
use tally_host_api::message::{EventData, Message, read_exact};

const DCA_WASM: &[u8] = include_bytes!("../../../contracts/dca.wasm");

#[allow(dead_code)] // the enums are for a contract's dispatch
#[path = "dca_abi.rs"]
mod dca_abi;

use dca_abi::{Buy, Init, Payout, Plan, Status, StatusQuery};

/// The pool's formula (contracts/swap): what `amount_in` buys at these reserves, 0.3% fee.
fn quote(amount_in: u64, reserve_in: u64, reserve_out: u64) -> u64 {
    let in_with_fee = u128::from(amount_in) * 9_970;
    (in_with_fee * u128::from(reserve_out) / (u128::from(reserve_in) * 10_000 + in_with_fee)) as u64
}

const LIQUIDITY_A: u64 = 100_000;
const LIQUIDITY_B: u64 = 400_000;
const INTERVAL_MS: u64 = 2_000;
const AMOUNT: u64 = 1_000;

/// The market of swap.rs with liquidity from alice, 10,000 A for dca, and a plan: sell 1,000
/// A for B every 2 s, for at least `min_out` B, paid out to carol.
fn planned(min_out: u64) -> Chain {
    let mut chain = market_with(&[(name("dca"), DCA_WASM)]);
    let deposit = crate::swap::deposit_data("alice");
    let receipt = push_tx(
        &mut chain,
        &[
            transfer("tokena", "alice", "swap", LIQUIDITY_A),
            transfer("tokenb", "alice", "swap", LIQUIDITY_B),
            ("swap", "deposit", "alice", deposit),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    let receipt = push_tx(&mut chain, &[transfer("tokena", "alice", "dca", 10_000)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    let init = Init {
        plan: Plan {
            owner: name("carol"),
            pool: name("swap"),
            token_in: name("tokena"),
            sell_a: true,
            amount: AMOUNT,
            interval_ms: INTERVAL_MS,
            min_out,
        },
    };
    let receipt = push_tx(&mut chain, &[("dca", "init", "dca", init.encode())]);
    assert!(receipt.is_success(), "{}", receipt.report());
    chain
}

fn buy(chain: &mut Chain) -> TxReceipt {
    push_tx(chain, &[("dca", "buy", "bob", Buy {}.encode())])
}

fn status(chain: &Chain) -> Status {
    let answer = chain
        .query(name("dca"), StatusQuery::NAME, &StatusQuery {}.encode())
        .unwrap();
    assert!(answer.is_success(), "{answer:?}");
    read_exact(&answer.output).unwrap()
}

#[test]
fn a_c_contract_buys_through_the_exchange_on_its_schedule() {
    let mut chain = planned(1);
    let expected = quote(AMOUNT, LIQUIDITY_A, LIQUIDITY_B);

    let receipt = buy(&mut chain);
    assert!(receipt.is_success(), "{}", receipt.report());
    let time = chain.head().timestamp_ms;
    // The exchange's event, then dca's: in execution order, each with its contract.
    let names: Vec<_> = receipt
        .events
        .iter()
        .map(|e| (e.contract.to_string(), e.name.to_string()))
        .collect();
    assert_eq!(
        names,
        [
            ("swap".to_string(), "swapped".to_string()),
            ("dca".to_string(), "bought".to_string())
        ]
    );
    let bought = dca_abi::BoughtEvent::decode(&receipt.events[1].data).unwrap();
    assert_eq!(
        bought,
        dca_abi::BoughtEvent {
            amount_in: AMOUNT,
            amount_out: expected,
            time_ms: time,
        }
    );
    assert_eq!(receipt.events[1].name, dca_abi::BoughtEvent::NAME);
    assert_eq!(token_balance(&chain, "tokena", "dca"), 10_000 - AMOUNT);
    assert_eq!(token_balance(&chain, "tokenb", "dca"), expected);

    // Too early: refused with the contract's reason, and nothing moved.
    let before = user_state(&chain);
    let receipt = buy(&mut chain);
    let failure = receipt
        .failure()
        .expect("a second buy within the interval fails");
    assert!(failure.message.contains("too early"), "{failure:?}");
    assert_eq!(user_state(&chain), before);

    // Once the interval has passed, the next purchase goes through at the new price.
    while chain.next_block_time_ms() < time + INTERVAL_MS {
        chain.run_block(vec![]).unwrap();
    }
    let second = quote(AMOUNT, LIQUIDITY_A + AMOUNT, LIQUIDITY_B - expected);
    let receipt = buy(&mut chain);
    assert!(receipt.is_success(), "{}", receipt.report());
    let s = status(&chain);
    assert_eq!(
        (s.spent, s.bought, s.last_buy_ms),
        (2 * AMOUNT, expected + second, chain.head().timestamp_ms)
    );
    assert_eq!(s.plan.owner, name("carol"));

    // Only the owner takes tokens out; the dca contract authorizes its own transfer.
    let payout = Payout {
        token: name("tokenb"),
        amount: expected + second,
    };
    let receipt = push_tx(&mut chain, &[("dca", "payout", "bob", payout.encode())]);
    assert!(!receipt.is_success(), "bob is not the plan's owner");
    let receipt = push_tx(&mut chain, &[("dca", "payout", "carol", payout.encode())]);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(token_balance(&chain, "tokenb", "carol"), expected + second);
    assert_eq!(token_balance(&chain, "tokenb", "dca"), 0);
}

#[test]
fn a_price_below_the_plan_pays_nothing() {
    // The plan wants more B for 1,000 A than the pool gives.
    let mut chain = planned(quote(AMOUNT, LIQUIDITY_A, LIQUIDITY_B) + 1);
    let before = user_state(&chain);
    let receipt = buy(&mut chain);
    let failure = receipt
        .failure()
        .expect("the limit is above the pool's price");
    assert!(
        failure.message.contains("below the plan's min_out"),
        "{failure:?}"
    );
    assert!(receipt.events.is_empty());
    assert_eq!(user_state(&chain), before);
}

#[test]
fn a_failed_swap_rolls_back_the_payment_made_before_it() {
    // Pay the pool more than dca holds: the token call fails inside buy, and the contract
    // aborts; nothing it did before (its quote) or after leaves a trace.
    let mut chain = planned(1);
    let drain = Payout {
        token: name("tokena"),
        amount: 10_000,
    };
    let receipt = push_tx(&mut chain, &[("dca", "payout", "carol", drain.encode())]);
    assert!(receipt.is_success(), "{}", receipt.report());
    let before = user_state(&chain);
    let receipt = buy(&mut chain);
    let failure = receipt.failure().expect("dca holds no A to pay with");
    assert!(
        failure.message.contains("paying the pool failed"),
        "{failure:?}"
    );
    assert_eq!(user_state(&chain), before);
    assert_eq!(status(&chain).spent, 0);
}
