//! contracts/escrow.c end to end (issue 23): a C contract that holds a token-rs token for a
//! deal, checks it was funded in the same transaction (a query), pays out by calling the
//! token, and lets the buyer have the tokens back only after a deadline taken from the
//! block's time. Driven with the Rust types generated from the same ABI (escrow_abi.rs).

use crate::common::*;
use crate::swap::{market_with, push_tx, token_balance, transfer};
use tally_chain::{Chain, TxReceipt};
use tally_host_api::message::{EventData, Message, read_exact};

const ESCROW_WASM: &[u8] = include_bytes!("../../../contracts/escrow.wasm");

#[allow(dead_code)] // the enums are for a contract's dispatch
#[path = "escrow_abi.rs"]
mod escrow_abi;

use escrow_abi::{Deal, DealQuery, Open, OpenedEvent, Refund, Release, SettledEvent};

const AMOUNT: u64 = 5_000;
const TIMEOUT_MS: u64 = 3_000;

fn open(id: u64, buyer: &str) -> Vec<u8> {
    Open {
        id,
        buyer: name(buyer),
        seller: name("bob"),
        token: name("tokena"),
        amount: AMOUNT,
        timeout_ms: TIMEOUT_MS,
    }
    .encode()
}

/// alice funds and opens deal `id` in one transaction: the transfer, then `open`.
fn funded_open(chain: &mut Chain, id: u64) -> TxReceipt {
    push_tx(
        chain,
        &[
            transfer("tokena", "alice", "escrow", AMOUNT),
            ("escrow", "open", "alice", open(id, "alice")),
        ],
    )
}

fn deal(chain: &Chain, id: u64) -> Option<Deal> {
    let answer = chain
        .query(name("escrow"), DealQuery::NAME, &DealQuery { id }.encode())
        .unwrap();
    answer
        .is_success()
        .then(|| read_exact(&answer.output).unwrap())
}

fn failure_of(receipt: &TxReceipt) -> String {
    receipt
        .failure()
        .unwrap_or_else(|| panic!("expected a failure: {}", receipt.report()))
        .message
        .clone()
}

#[test]
fn issue_23_an_escrow_in_c_pays_the_seller_on_release_and_the_buyer_after_the_deadline() {
    let mut chain = market_with(&[(name("escrow"), ESCROW_WASM)]);
    let alice = token_balance(&chain, "tokena", "alice");

    // Opened and funded in one transaction: the deadline is the block's time + the timeout.
    let receipt = funded_open(&mut chain, 1);
    assert!(receipt.is_success(), "{}", receipt.report());
    let deadline = chain.head().timestamp_ms + TIMEOUT_MS;
    let expected = Deal {
        buyer: name("alice"),
        seller: name("bob"),
        token: name("tokena"),
        amount: AMOUNT,
        deadline_ms: deadline,
    };
    assert_eq!(deal(&chain, 1), Some(expected.clone()));
    let opened = receipt.events.last().unwrap();
    assert_eq!(opened.name, OpenedEvent::NAME);
    assert_eq!(
        OpenedEvent::decode(&opened.data).unwrap(),
        OpenedEvent {
            id: 1,
            deal: expected
        }
    );
    assert_eq!(token_balance(&chain, "tokena", "escrow"), AMOUNT);

    // Only the buyer releases; bob cannot pay himself.
    let release = Release { id: 1 }.encode();
    let receipt = push_tx(&mut chain, &[("escrow", "release", "bob", release.clone())]);
    assert!(
        failure_of(&receipt).contains("alice"),
        "{}",
        receipt.report()
    );
    let bob = token_balance(&chain, "tokena", "bob");
    let receipt = push_tx(&mut chain, &[("escrow", "release", "alice", release)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(token_balance(&chain, "tokena", "bob"), bob + AMOUNT);
    assert_eq!(token_balance(&chain, "tokena", "escrow"), 0);
    assert_eq!(deal(&chain, 1), None);
    let settled = receipt.events.last().unwrap();
    assert_eq!(
        SettledEvent::decode(&settled.data).unwrap(),
        SettledEvent {
            id: 1,
            to: name("bob"),
            amount: AMOUNT
        }
    );

    // A second deal is refunded, but not before its deadline.
    let receipt = funded_open(&mut chain, 2);
    assert!(receipt.is_success(), "{}", receipt.report());
    let deadline = chain.head().timestamp_ms + TIMEOUT_MS;
    let refund = Refund { id: 2 }.encode();
    let receipt = push_tx(&mut chain, &[("escrow", "refund", "carol", refund.clone())]);
    assert!(
        failure_of(&receipt).contains("runs until its deadline"),
        "{}",
        receipt.report()
    );
    while chain.next_block_time_ms() < deadline {
        chain.run_block(vec![]).unwrap();
    }
    let receipt = push_tx(&mut chain, &[("escrow", "refund", "carol", refund)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        token_balance(&chain, "tokena", "alice"),
        alice - AMOUNT,
        "alice paid bob once and had the second deal back"
    );
}

#[test]
fn issue_23_an_escrow_deal_must_be_funded_and_its_id_is_not_reused() {
    let mut chain = market_with(&[(name("escrow"), ESCROW_WASM)]);
    let before = user_state(&chain);
    // No transfer in the transaction: refused, and nothing recorded.
    let receipt = push_tx(&mut chain, &[("escrow", "open", "alice", open(7, "alice"))]);
    assert!(
        failure_of(&receipt).contains("not funded"),
        "{}",
        receipt.report()
    );
    assert_eq!(user_state(&chain), before);
    // Funded once, the tokens back one deal only: a second open on them is refused.
    let receipt = funded_open(&mut chain, 7);
    assert!(receipt.is_success(), "{}", receipt.report());
    let receipt = push_tx(&mut chain, &[("escrow", "open", "alice", open(8, "alice"))]);
    assert!(
        failure_of(&receipt).contains("not funded"),
        "{}",
        receipt.report()
    );
    let receipt = funded_open(&mut chain, 7);
    assert!(
        failure_of(&receipt).contains("exists"),
        "{}",
        receipt.report()
    );
    // The escrow cannot be the seller: the token refuses transfers to oneself, so such a
    // deal could never be released.
    let mut to_self = Open::decode(&open(10, "alice")).unwrap();
    to_self.seller = name("escrow");
    let receipt = push_tx(
        &mut chain,
        &[
            transfer("tokena", "alice", "escrow", AMOUNT),
            ("escrow", "open", "alice", to_self.encode()),
        ],
    );
    assert!(
        failure_of(&receipt).contains("cannot be a party"),
        "{}",
        receipt.report()
    );
    // A buyer who does not sign opens nothing.
    let receipt = push_tx(
        &mut chain,
        &[
            transfer("tokena", "bob", "escrow", AMOUNT),
            ("escrow", "open", "bob", open(9, "alice")),
        ],
    );
    assert!(!receipt.is_success(), "{}", receipt.report());
}
