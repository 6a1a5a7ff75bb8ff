//! contracts/swap end to end (issue 22): a constant-product pool of two token-rs tokens that
//! counts what arrived with queries, pays out with calls and emits events, through the
//! chain's one executor.

use borsh::BorshSerialize;

use crate::common::*;
use tally_chain::{Chain, SignedTransaction, TxReceipt, TxResult};
use tally_host_api::AbortCode;

const TOKEN_WASM: &[u8] = include_bytes!("../../../contracts/token-rs.wasm");
const SWAP_WASM: &[u8] = include_bytes!("../../../contracts/swap.wasm");

#[allow(dead_code)]
#[path = "../../../contracts/swap/src/abi.rs"]
mod swap_abi;
/// token-rs's and the exchange's action types, as `tally abigen` generated them: the client
/// side of their ABIs.
#[allow(dead_code)]
#[path = "../../../contracts/token-rs/src/abi.rs"]
mod token_abi;

use swap_abi::{Deposit, Init, Swap, Withdraw};
use tally_host_api::message::Message;
use token_abi::{Create, Issue, Transfer};

fn data(value: &impl BorshSerialize) -> Vec<u8> {
    borsh::to_vec(value).unwrap()
}

/// One transaction of `actions`, each `(contract, action, signer, data)`.
pub(crate) fn push_tx(chain: &mut Chain, actions: &[(&str, &str, &str, Vec<u8>)]) -> TxReceipt {
    let actions = actions
        .iter()
        .map(|(contract, act, signer, data)| {
            action(name(contract), name(act), &[name(signer)], data.clone())
        })
        .collect();
    let tx = SignedTransaction::unsigned(envelope(chain, actions));
    match push(chain, tx) {
        TxResult::Included(receipt) => receipt,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn transfer(
    token: &str,
    from: &str,
    to: &str,
    amount: u64,
) -> (&'static str, &'static str, &'static str, Vec<u8>) {
    let t = Transfer {
        from: name(from),
        to: name(to),
        amount,
        memo: String::new(),
    };
    (
        Box::leak(token.to_string().into_boxed_str()),
        "transfer",
        Box::leak(from.to_string().into_boxed_str()),
        t.encode(),
    )
}

/// `deposit {user}`'s data.
pub(crate) fn deposit_data(user: &str) -> Vec<u8> {
    Deposit { user: name(user) }.encode()
}

pub(crate) fn token_balance(chain: &Chain, token: &str, owner: &str) -> u64 {
    balance(chain, name(token), name(owner)).unwrap_or(0)
}

fn reserves(chain: &Chain) -> (u64, u64) {
    let answer = chain.query(name("swap"), name("reserves"), &[]).unwrap();
    assert!(answer.is_success(), "{answer:?}");
    borsh::from_slice(&answer.output).unwrap()
}

/// Two tokens, alice and bob holding 1,000,000 of each, and an initialised pool.
fn market() -> Chain {
    market_with(&[])
}

/// [`market`], with `more` contracts deployed at genesis.
pub(crate) fn market_with(more: &[(tally_chain::Name, &[u8])]) -> Chain {
    let mut contracts = vec![
        (name("tokena"), TOKEN_WASM),
        (name("tokenb"), TOKEN_WASM),
        (name("swap"), SWAP_WASM),
    ];
    contracts.extend_from_slice(more);
    let mut chain = unsigned_chain(&contracts);
    for token in ["tokena", "tokenb"] {
        let create = Create {
            issuer: name(token),
            max_supply: 10_000_000,
        };
        let receipt = push_tx(&mut chain, &[(token, "create", token, create.encode())]);
        assert!(receipt.is_success(), "{}", receipt.report());
        for user in ["alice", "bob"] {
            let issue = Issue {
                to: name(user),
                amount: 1_000_000,
                memo: String::new(),
            };
            let receipt = push_tx(&mut chain, &[(token, "issue", token, issue.encode())]);
            assert!(receipt.is_success(), "{}", receipt.report());
        }
    }
    let init = Init {
        token_a: name("tokena"),
        token_b: name("tokenb"),
    }
    .encode();
    let receipt = push_tx(&mut chain, &[("swap", "init", "swap", init)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    chain
}

#[test]
fn deposit_swap_and_withdraw_through_calls_queries_and_events() {
    let mut chain = market();

    // alice deposits 100,000 A and 400,000 B: moved by alice, counted by the pool.
    let receipt = push_tx(
        &mut chain,
        &[
            transfer("tokena", "alice", "swap", 100_000),
            transfer("tokenb", "alice", "swap", 400_000),
            (
                "swap",
                "deposit",
                "alice",
                Deposit {
                    user: name("alice"),
                }
                .encode(),
            ),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(reserves(&chain), (100_000, 400_000));
    let shares = 200_000u64; // sqrt(100,000 × 400,000)
    let deposited = &receipt.events[0];
    assert_eq!(
        (deposited.contract, deposited.name),
        (name("swap"), name("deposited"))
    );
    assert_eq!(
        deposited.data,
        data(&(name("alice"), 100_000u64, 400_000u64, shares))
    );

    // bob sells 1,000 A: the constant product less 0.3%.
    let expected_out = (1_000u128 * 9_970 * 400_000 / (100_000 * 10_000 + 1_000 * 9_970)) as u64;
    let receipt = push_tx(
        &mut chain,
        &[
            transfer("tokena", "bob", "swap", 1_000),
            (
                "swap",
                "swap",
                "bob",
                Swap {
                    user: name("bob"),
                    min_out: 1,
                }
                .encode(),
            ),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        token_balance(&chain, "tokenb", "bob"),
        1_000_000 + expected_out
    );
    assert_eq!(token_balance(&chain, "tokena", "bob"), 999_000);
    assert_eq!(reserves(&chain), (101_000, 400_000 - expected_out));
    assert!(101_000u128 * u128::from(400_000 - expected_out) >= 100_000u128 * 400_000);
    let swapped = receipt.events.last().unwrap();
    assert_eq!(swapped.name, name("swapped"));
    assert_eq!(
        swapped.data,
        data(&(name("bob"), name("tokena"), 1_000u64, expected_out))
    );

    // Asking for more than the price gives fails, and bob's transfer in goes back with it.
    let receipt = push_tx(
        &mut chain,
        &[
            transfer("tokena", "bob", "swap", 1_000),
            (
                "swap",
                "swap",
                "bob",
                Swap {
                    user: name("bob"),
                    min_out: 1_000_000,
                }
                .encode(),
            ),
        ],
    );
    assert_eq!(
        receipt.failure().unwrap().code,
        AbortCode::AssertFailed,
        "{}",
        receipt.report()
    );
    assert_eq!(token_balance(&chain, "tokena", "bob"), 999_000);
    // Swapping without paying in is refused.
    let receipt = push_tx(
        &mut chain,
        &[(
            "swap",
            "swap",
            "bob",
            Swap {
                user: name("bob"),
                min_out: 1,
            }
            .encode(),
        )],
    );
    assert!(!receipt.is_success());

    // alice withdraws everything: both reserves, paid out by the pool's calls.
    let before = (
        token_balance(&chain, "tokena", "alice"),
        token_balance(&chain, "tokenb", "alice"),
    );
    let (ra, rb) = reserves(&chain);
    let receipt = push_tx(
        &mut chain,
        &[(
            "swap",
            "withdraw",
            "alice",
            Withdraw {
                user: name("alice"),
                shares,
            }
            .encode(),
        )],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(token_balance(&chain, "tokena", "alice"), before.0 + ra);
    assert_eq!(token_balance(&chain, "tokenb", "alice"), before.1 + rb);
    assert_eq!(reserves(&chain), (0, 0));
    let shares_left = chain
        .query(name("swap"), name("shares"), &data(&name("alice")))
        .unwrap();
    assert_eq!(shares_left.output, data(&0u64));
}

#[test]
fn the_pool_cannot_take_what_a_user_did_not_send_it() {
    let mut chain = market();
    // bob signs a deposit but sent nothing: the pool cannot pull his tokens (the signer's
    // authority does not flow into the pool's calls), so the deposit fails.
    let receipt = push_tx(
        &mut chain,
        &[(
            "swap",
            "deposit",
            "bob",
            Deposit { user: name("bob") }.encode(),
        )],
    );
    assert!(!receipt.is_success());
    assert_eq!(token_balance(&chain, "tokena", "bob"), 1_000_000);
    // And nobody but bob can deposit as bob.
    let receipt = push_tx(
        &mut chain,
        &[(
            "swap",
            "deposit",
            "alice",
            Deposit { user: name("bob") }.encode(),
        )],
    );
    assert_eq!(receipt.failure().unwrap().code, AbortCode::Unauthorized);
}
