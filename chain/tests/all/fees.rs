//! Fees in five dimensions (issue 24): every transaction names a payer who signs, pays
//! `Σ price × usage` plus its tip up to its max fee whether it succeeds or not, and each
//! dimension's price moves toward its own target; coins are burned or tipped, never lost or
//! minted; and all of it is the same on every path and thread count.

use proptest::prelude::*;

use crate::common::*;
use ed25519_dalek::SigningKey;
use tally_chain::crypto::derived_key;
use tally_chain::fee::{Dimension, FeeSchedule, PRICE_SCALE};
use tally_chain::genesis::GenesisAccount;
use tally_chain::system::SYSTEM;
use tally_chain::{
    Chain, ChainConfig, Genesis, Name, Pipeline, SignedTransaction, Transaction, Transfer, TxError,
    TxResult, prepare_block,
};
use tally_host_api::AbortCode;

/// Coins each funded account starts with.
const FUNDS: u64 = 1_000_000_000_000;

/// Spins until its fuel runs out.
fn spin() -> Vec<u8> {
    wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func (export "apply") (param i64 i64 i64) (loop $l (br $l))))"#,
    )
    .unwrap()
}

/// Stores 100 new keys of 56 bytes, numbered from the 8-byte base in its message: state
/// growth, the allocate dimension.
fn grow() -> Vec<u8> {
    wat::parse_str(
        r#"(module
          (import "env" "read_message" (func $read (param i32 i32) (result i32)))
          (import "env" "store" (func $store (param i32 i32 i32 i32)))
          (memory (export "memory") 1)
          (func (export "apply") (param i64 i64 i64) (local $i i32)
            (drop (call $read (i32.const 0) (i32.const 8)))
            (block $done (loop $l
              (br_if $done (i32.ge_u (local.get $i) (i32.const 100)))
              (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1)))
              (call $store (i32.const 0) (i32.const 8) (i32.const 64) (i32.const 56))
              (local.set $i (i32.add (local.get $i) (i32.const 1)))
              (br $l)))))"#,
    )
    .unwrap()
}

/// With message byte 1, stores a 64 KiB value under "k"; otherwise loads it 2,000 times:
/// reads that cost little fuel and much in the read dimension.
fn reader() -> Vec<u8> {
    wat::parse_str(
        r#"(module
          (import "env" "read_message" (func $read (param i32 i32) (result i32)))
          (import "env" "store" (func $store (param i32 i32 i32 i32)))
          (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
          (memory (export "memory") 2)
          (data (i32.const 0) "k")
          (func (export "apply") (param i64 i64 i64) (local $i i32)
            (drop (call $read (i32.const 8) (i32.const 1)))
            (if (i32.eq (i32.load8_u (i32.const 8)) (i32.const 1))
              (then (call $store (i32.const 0) (i32.const 1) (i32.const 16) (i32.const 65536)) (return)))
            (block $done (loop $l
              (br_if $done (i32.ge_u (local.get $i) (i32.const 2000)))
              (drop (call $load (i32.const 0) (i32.const 1) (i32.const 16) (i32.const 65536)))
              (local.set $i (i32.add (local.get $i) (i32.const 1)))
              (br $l)))))"#,
    )
    .unwrap()
}

/// Accounts the unsigned fee chain funds.
const PAYERS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// A chain that prices its use as `fees` but does not check signatures (payers are whoever
/// transactions name), with simplecoin, `spin` and `grow` deployed and [`PAYERS`] funded.
fn fee_chain(fees: FeeSchedule) -> Chain {
    let genesis = Genesis {
        accounts: PAYERS
            .iter()
            .map(|p| GenesisAccount {
                name: name(p),
                key: [1; 32],
                balance: FUNDS,
            })
            .collect(),
        ..Genesis::default()
    };
    let config = ChainConfig {
        check_signatures: false,
        fees,
        ..ChainConfig::default()
    };
    let (spin, grow, reader) = (spin(), grow(), reader());
    chain_with(
        config,
        &genesis,
        &[
            (simplecoin(), SIMPLECOIN_WASM),
            (name("spin"), &spin),
            (name("grow"), &grow),
            (name("reader"), &reader),
        ],
    )
}

/// A simplecoin transfer of `amount` from `from` to `to`, paid by `from`.
fn transfer_tx(chain: &Chain, from: &str, to: &str, amount: u64) -> SignedTransaction {
    let t = Transfer {
        from: name(from),
        to: name(to),
        amount,
        memo: String::new(),
    };
    let a = action(simplecoin(), transfer(), &[name(from)], t.encode());
    SignedTransaction::unsigned(envelope(chain, vec![a]))
}

/// A call of `contract`'s action `go` with `data`, paid by `payer` offering `max_fee`, `tip`.
fn call_tx(
    chain: &Chain,
    contract: &str,
    data: Vec<u8>,
    payer: &str,
    max_fee: u64,
    tip: u64,
) -> SignedTransaction {
    let a = action(name(contract), name("go"), &[], data);
    SignedTransaction::unsigned(Transaction {
        payer: name(payer),
        max_fee,
        tip,
        ..envelope(chain, vec![a])
    })
}

fn native(chain: &Chain, account: &str) -> u64 {
    chain.native_balance(name(account)).unwrap()
}

/// Every native coin: the payers', the system account's and the coins burned.
fn coins(chain: &Chain) -> u128 {
    let balances: u128 = PAYERS
        .iter()
        .chain(["simplecoin", "spin", "grow", "reader"].iter())
        .map(|p| u128::from(native(chain, p)))
        .sum();
    balances
        + u128::from(chain.native_balance(SYSTEM).unwrap())
        + u128::from(chain.fee_state().unwrap().burned)
}

fn genesis_coins() -> u128 {
    PAYERS.len() as u128 * u128::from(FUNDS) + (1u128 << 60)
}

/// A chain that checks signatures and prices its use, with simplecoin deployed and `alice`
/// and `sponsor` funded, with their signing keys.
fn signed_chain() -> (Chain, [(Name, SigningKey); 2]) {
    let keys = [
        (name("alice"), derived_key(24, 1)),
        (name("sponsor"), derived_key(24, 2)),
    ];
    let genesis = Genesis {
        accounts: keys
            .iter()
            .map(|(account, key)| GenesisAccount {
                name: *account,
                key: key.verifying_key().to_bytes(),
                balance: FUNDS,
            })
            .collect(),
        ..Genesis::default()
    };
    let chain = chain_with(
        ChainConfig::default(),
        &genesis,
        &[(simplecoin(), SIMPLECOIN_WASM)],
    );
    (chain, keys)
}

#[test]
fn issue_24_a_transaction_nobody_signs_is_refused_at_decode_and_the_payer_must_sign() {
    let (mut chain, [(alice, alice_key), (sponsor, sponsor_key)]) = signed_chain();
    // Unsigned: refused before it could be included.
    let hit = action(simplecoin(), transfer(), &[alice], vec![]);
    let unsigned = SignedTransaction::unsigned(envelope(&chain, vec![hit.clone()]));
    assert_eq!(
        SignedTransaction::decode(&unsigned.encode()),
        Err(TxError::MissingSignature(alice))
    );
    let nobody = SignedTransaction::unsigned(envelope(
        &chain,
        vec![action(simplecoin(), transfer(), &[], vec![])],
    ));
    assert_eq!(
        SignedTransaction::decode(&nobody.encode()),
        Err(TxError::MissingSignature(SYSTEM))
    );
    // A sponsor pays for alice's action: it must sign too, first.
    let tx = Transaction {
        payer: sponsor,
        ..envelope(&chain, vec![hit])
    };
    let alice_only = SignedTransaction::sign(tx.clone(), &[(alice, &alice_key)]);
    assert_eq!(
        alice_only.check_limits(alice_only.encode().len()),
        Err(TxError::SignatureOrder(alice))
    );
    // On the wire a signature's place names its account (issue 26): alice's one signature
    // comes back as the sponsor's, under a key that is not the sponsor's, and alice's is
    // missing. Either way it is never included.
    let decoded = SignedTransaction::decode(&alice_only.encode()).unwrap();
    assert_eq!(decoded.signatures[0].account, sponsor);
    for (tx, expected) in [
        (alice_only, TxError::SignatureOrder(alice)),
        (decoded, TxError::MissingSignature(alice)),
    ] {
        match push(&mut chain, tx) {
            TxResult::Rejected(e) => assert_eq!(e, expected),
            other => panic!("expected {expected:?}, got {other:?}"),
        }
    }
    let both = SignedTransaction::sign(tx, &[(alice, &alice_key), (sponsor, &sponsor_key)]);
    assert_eq!(both.signatures[0].account, sponsor, "the payer signs first");
    SignedTransaction::decode(&both.encode()).unwrap();
    let result = push(&mut chain, both);
    let receipt = result.receipt().expect("included");
    assert!(receipt.fee.total() > 0);
    assert_eq!(chain.native_balance(alice).unwrap(), FUNDS);
    assert_eq!(
        chain.native_balance(sponsor).unwrap(),
        FUNDS - receipt.fee.total()
    );
}

/// What the pool counts against a sender's balance (`system::native_spend`) is what the
/// block moves: one decoder and one authority rule for both, for a transfer its sender
/// signs, one it does not, one paid by another, data that does not decode, and the other
/// system actions; and for a transfer larger than the balance, what it may move.
#[test]
fn the_pool_counts_exactly_the_native_coins_a_block_moves() {
    use tally_chain::Action;
    use tally_chain::system::{NEWACCOUNT, NativeTransfer, SETCODE, TRANSFER, native_spend};
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let (from, sponsor, to) = (name("alice"), name("bob"), name("carol"));
    let moving = |amount| borsh::to_vec(&NativeTransfer { from, to, amount }).unwrap();
    let mut trailing = moving(5);
    trailing.push(0);
    let cases = [
        (TRANSFER, vec![from], moving(7)),
        (TRANSFER, vec![sponsor], moving(11)),
        (TRANSFER, vec![sponsor, from], moving(13)),
        (TRANSFER, vec![from], trailing),
        (TRANSFER, vec![from], moving(17)[..12].to_vec()),
        (NEWACCOUNT, vec![from], moving(19)),
        (SETCODE, vec![from], moving(23)),
        (name("nosuch"), vec![from], moving(29)),
    ];
    let mut moved_any = false;
    for (action_name, authorization, data) in cases {
        let a = Action {
            account: SYSTEM,
            name: action_name,
            authorization: authorization.clone(),
            data,
        };
        let counted = native_spend(&a);
        let before = native(&chain, "carol");
        let tx = Transaction {
            payer: authorization[0],
            ..envelope(&chain, vec![a.clone()])
        };
        assert!(
            push(&mut chain, SignedTransaction::unsigned(tx))
                .receipt()
                .is_some()
        );
        let moved = native(&chain, "carol") - before;
        assert_eq!(counted.map_or(0, |(_, amount)| amount), moved, "{a:?}");
        assert!(counted.is_none_or(|(sender, _)| sender == from));
        moved_any |= moved > 0;
    }
    assert!(moved_any, "some case moved coins");
    // The pool counts what a transfer may move: one larger than the balance is counted in
    // full, and the block moves nothing (the transfer fails, paying its fee).
    let a = Action {
        account: SYSTEM,
        name: TRANSFER,
        authorization: vec![from],
        data: moving(2 * FUNDS),
    };
    assert_eq!(native_spend(&a), Some((from, 2 * FUNDS)));
    let before = native(&chain, "carol");
    let tx = SignedTransaction::unsigned(envelope(&chain, vec![a]));
    assert!(
        !push(&mut chain, tx)
            .receipt()
            .expect("included")
            .is_success()
    );
    assert_eq!(native(&chain, "carol"), before);
}

/// Every way a system action fails, pinned: its code and its message are part of the
/// receipt, which every node computes alike, so a change to either is a change of the chain.
#[test]
fn each_failed_system_action_has_its_fixed_code_and_message() {
    use tally_chain::Action;
    use tally_chain::system::{NEWACCOUNT, NativeTransfer, NewAccount, SETCODE, SetCode, TRANSFER};
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let (alice, bob, carol, ghost) = (name("alice"), name("bob"), name("carol"), name("ghost"));
    let new = |creator, name| {
        borsh::to_vec(&NewAccount {
            creator,
            name,
            key: [7; 32],
        })
        .unwrap()
    };
    let moving = |from, to| {
        borsh::to_vec(&NativeTransfer {
            from,
            to,
            amount: 1,
        })
        .unwrap()
    };
    let code = |account| {
        borsh::to_vec(&SetCode {
            account,
            code: vec![0, 1],
        })
        .unwrap()
    };
    let cases = [
        (
            NEWACCOUNT,
            vec![bob],
            vec![1],
            AbortCode::InvalidAction,
            "bad newaccount data".to_string(),
        ),
        (
            NEWACCOUNT,
            vec![bob],
            new(alice, ghost),
            AbortCode::Unauthorized,
            "missing authority of alice".into(),
        ),
        (
            NEWACCOUNT,
            vec![bob, ghost],
            new(ghost, name("ghost2")),
            AbortCode::InvalidAction,
            "creator ghost does not exist".into(),
        ),
        (
            NEWACCOUNT,
            vec![bob],
            new(bob, carol),
            AbortCode::InvalidAction,
            "account carol already exists".into(),
        ),
        (
            TRANSFER,
            vec![bob],
            moving(bob, carol)[..10].to_vec(),
            AbortCode::InvalidAction,
            "bad transfer data".into(),
        ),
        (
            TRANSFER,
            vec![bob],
            moving(alice, carol),
            AbortCode::Unauthorized,
            "missing authority of alice".into(),
        ),
        (
            TRANSFER,
            vec![bob],
            moving(bob, bob),
            AbortCode::InvalidAction,
            "a transfer to oneself moves nothing".into(),
        ),
        (
            TRANSFER,
            vec![bob],
            moving(bob, ghost),
            AbortCode::InvalidAction,
            "account ghost does not exist: create it first".into(),
        ),
        (
            SETCODE,
            vec![bob],
            vec![1, 2],
            AbortCode::InvalidAction,
            "bad setcode data".into(),
        ),
        (
            SETCODE,
            vec![bob],
            code(alice),
            AbortCode::Unauthorized,
            "missing authority of alice".into(),
        ),
        (
            name("nosuch"),
            vec![bob],
            vec![],
            AbortCode::NoHandler,
            "the system contract has no action nosuch".into(),
        ),
    ];
    for (action_name, authorization, data, code, message) in cases {
        let a = Action {
            account: SYSTEM,
            name: action_name,
            authorization,
            data,
        };
        let tx = Transaction {
            payer: bob,
            ..envelope(&chain, vec![a.clone()])
        };
        let result = push(&mut chain, SignedTransaction::unsigned(tx));
        let receipt = result.receipt().expect("included");
        let abort = receipt.failure().expect("failed");
        assert_eq!(
            (abort.code, abort.message.as_str()),
            (code, message.as_str()),
            "{a:?}"
        );
    }
}

#[test]
fn issue_24_a_failed_transaction_pays_its_fee_and_changes_nothing_else() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let before_state = user_state(&chain);
    // bob holds no simplecoin: the transfer fails in the contract.
    let tx = transfer_tx(&chain, "bob", "alice", 5);
    let bytes = tx.encode().len() as u64;
    let result = push(&mut chain, tx);
    let receipt = result.receipt().expect("included");
    assert!(!receipt.is_success());
    let fee = receipt.fee;
    assert!(fee.burned > 0 && fee.tip == 0);
    assert_eq!(native(&chain, "bob"), FUNDS - fee.total());
    // Its usage priced at the block's prices is its fee.
    let prices = chain.head().prices;
    let priced: u128 = (0..5)
        .map(|i| u128::from(prices[i]) * u128::from(receipt.usage.0[i]))
        .sum::<u128>()
        / u128::from(PRICE_SCALE);
    assert_eq!(u128::from(fee.burned), priced);
    assert_eq!(
        receipt.usage.get(Dimension::Bandwidth),
        bytes,
        "its signed bytes"
    );
    assert!(receipt.usage.get(Dimension::Compute) > 5_000);
    assert!(
        receipt.usage.get(Dimension::Read) > 0,
        "it read bob's balance"
    );
    assert_eq!(receipt.usage.get(Dimension::Write), 0, "it kept no write");
    // Only bob's native balance changed.
    let changed: Vec<_> = user_state(&chain)
        .into_iter()
        .filter(|kv| !before_state.contains(kv))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        changed,
        vec![tally_chain::state::keys::balance(name("bob"))]
    );
    assert_eq!(coins(&chain), genesis_coins());
}

#[test]
fn issue_24_a_spinning_transaction_stops_when_its_max_fee_is_spent_and_pays_no_more() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let max_fee = 50_000;
    let tx = call_tx(&chain, "spin", vec![], "carol", max_fee, 7);
    let result = push(&mut chain, tx);
    let receipt = result.receipt().expect("included");
    assert_eq!(
        receipt.failure().map(|a| a.code),
        Some(AbortCode::OutOfFuel),
        "{:?}",
        receipt.failure()
    );
    // The max fee bought its fuel: it ran out there, far below an action's 10M.
    let compute_price = chain.head().prices[Dimension::Compute as usize];
    let bought = u128::from(max_fee) * u128::from(PRICE_SCALE) / u128::from(compute_price);
    assert!(
        u128::from(receipt.fuel_used) <= bought + 10_000,
        "{}",
        receipt.fuel_used
    );
    assert!(receipt.fee.total() <= max_fee);
    assert!(receipt.fee.total() > max_fee * 9 / 10, "{:?}", receipt.fee);
    assert_eq!(native(&chain, "carol"), FUNDS - receipt.fee.total());
    assert_eq!(coins(&chain), genesis_coins());
}

#[test]
fn issue_24_a_transaction_whose_fee_exceeds_its_max_fails_and_pays_only_for_what_it_used() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    // 100 new keys: ~13,700 allocate units, ~270,000 coins at the starting price; its fuel
    // costs far less, so the max fee does not stop it early.
    let max_fee = 50_000;
    let tx = call_tx(
        &chain,
        "grow",
        1u64.to_le_bytes().to_vec(),
        "dave",
        max_fee,
        0,
    );
    let result = push(&mut chain, tx);
    let receipt = result.receipt().expect("included");
    let failure = receipt.failure().expect("it failed");
    assert_eq!(failure.code, AbortCode::LimitExceeded);
    // Its new keys cost more than what its max fee leaves: it stops there.
    assert!(failure.message.contains("max fee"), "{failure}");
    // Its keys were dropped: it pays for its bytes and fuel, not for state it never kept.
    assert_eq!(receipt.usage.get(Dimension::Allocate), 0);
    assert_eq!(receipt.usage.get(Dimension::Write), 0);
    assert!(receipt.fee.total() < max_fee && receipt.fee.total() > 1_000);
    assert_eq!(native(&chain, "dave"), FUNDS - receipt.fee.total());
    assert!(
        chain
            .get(name("grow"), &2u64.to_le_bytes())
            .unwrap()
            .is_none()
    );
    // With room in its max fee it succeeds and its keys stay.
    let tx = call_tx(
        &chain,
        "grow",
        1u64.to_le_bytes().to_vec(),
        "dave",
        10_000_000,
        0,
    );
    let result = push(&mut chain, tx);
    assert!(result.is_success(), "{result:?}");
    assert!(
        chain
            .get(name("grow"), &2u64.to_le_bytes())
            .unwrap()
            .is_some()
    );
}

#[test]
fn issue_24_reads_stop_when_the_max_fee_is_spent_and_cannot_flood_the_read_dimension() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let tx = call_tx(&chain, "reader", vec![1], "alice", 10_000_000, 0);
    assert!(push(&mut chain, tx).is_success());
    // 2,000 loads of 64 KiB are ~131 M read units (131 M coins at the starting price) for
    // ~133 M fuel (1.3 M coins): a max fee of 1.5 M would pay the fuel, not the reads.
    let max_fee = 1_500_000;
    let tx = call_tx(&chain, "reader", vec![0], "bob", max_fee, 0);
    let block = chain.run_block(vec![tx]).unwrap();
    let receipt = block.results[0].receipt().expect("included");
    let failure = receipt.failure().expect("it failed");
    assert_eq!(failure.code, AbortCode::LimitExceeded, "{failure}");
    assert!(failure.message.contains("reads and writes"), "{failure}");
    // It read no more than its max fee pays for, and paid for it.
    let read = receipt.usage.get(Dimension::Read);
    let read_price = chain.fee_state().unwrap().prices[Dimension::Read as usize];
    assert!(
        u128::from(read) * u128::from(read_price)
            <= u128::from(max_fee + 66_000) * u128::from(PRICE_SCALE),
        "{read}"
    );
    assert!(receipt.fee.total() > max_fee / 2, "{:?}", receipt.fee);
    assert!(
        block.header.usage.get(Dimension::Read)
            < FeeSchedule::STANDARD.target[Dimension::Read as usize] / 10
    );
    assert_eq!(coins(&chain), genesis_coins());
}

#[test]
fn issue_24_a_chain_opened_with_another_schedule_is_refused() {
    let chain = fee_chain(FeeSchedule::STANDARD);
    let store = chain.into_store();
    let config = ChainConfig {
        check_signatures: false,
        fees: FeeSchedule::ZERO,
        ..ChainConfig::default()
    };
    match Chain::open(runtime(), store, config) {
        Err(tally_chain::ChainError::Config(e)) => assert!(e.contains("fee schedule"), "{e}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn issue_24_a_tip_above_the_max_fee_is_refused_at_decode() {
    let (chain, [(alice, alice_key), _]) = signed_chain();
    let tx = Transaction {
        max_fee: 10,
        tip: 11,
        ..envelope(
            &chain,
            vec![action(simplecoin(), transfer(), &[alice], vec![])],
        )
    };
    let signed = SignedTransaction::sign(tx, &[(alice, &alice_key)]);
    assert_eq!(
        SignedTransaction::decode(&signed.encode()),
        Err(TxError::TipAboveMaxFee {
            tip: 11,
            max_fee: 10
        })
    );
}

#[test]
fn issue_24_a_payer_that_cannot_cover_its_max_fee_is_not_included() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let before = user_state(&chain);
    let tx = call_tx(&chain, "spin", vec![], "alice", FUNDS + 1, 0);
    match push(&mut chain, tx) {
        TxResult::Rejected(TxError::CannotPay {
            payer,
            balance,
            max_fee,
        }) => assert_eq!((payer, balance, max_fee), (name("alice"), FUNDS, FUNDS + 1)),
        other => panic!("expected CannotPay, got {other:?}"),
    }
    // A max fee below the transaction's own size and intrinsic fuel: refused too, and a
    // mempool can tell before any block (`fee::check_max_fee` at the next block's prices).
    let tx = call_tx(&chain, "spin", vec![], "alice", 10, 0);
    let prices = chain.fee_state().unwrap().prices;
    let prepared = prepare_block(
        vec![tx.clone()],
        false,
        &chain.pipeline(),
        &tally_chain::crypto::NoKeys,
    );
    assert!(matches!(
        tally_chain::fee::check_max_fee(&prices, &prepared[0]),
        Err(TxError::MaxFeeTooLow { max_fee: 10, .. })
    ));
    let enough = call_tx(&chain, "spin", vec![], "alice", 30_000, 0);
    let prepared = prepare_block(
        vec![enough],
        false,
        &chain.pipeline(),
        &tally_chain::crypto::NoKeys,
    );
    tally_chain::fee::check_max_fee(&prices, &prepared[0]).unwrap();
    match push(&mut chain, tx) {
        TxResult::Rejected(TxError::MaxFeeTooLow { max_fee: 10, .. }) => {}
        other => panic!("expected MaxFeeTooLow, got {other:?}"),
    }
    assert_eq!(user_state(&chain), before);
}

#[test]
fn issue_24_tips_go_to_the_proposer_named_for_the_block() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    let txs = vec![
        call_tx(
            &chain,
            "grow",
            1u64.to_le_bytes().to_vec(),
            "alice",
            10_000_000,
            1_000,
        ),
        call_tx(&chain, "spin", vec![], "bob", 30_000, 25),
    ];
    let prepared = prepare_block(txs, false, &chain.pipeline(), &tally_chain::crypto::NoKeys);
    let block = chain
        .execute_block_by(chain.next_block_time_ms(), name("carol"), &prepared)
        .unwrap();
    chain.commit(tally_chain::Durability::Immediate).unwrap();
    let tips: u64 = block
        .results
        .iter()
        .map(|r| r.receipt().unwrap().fee.tip)
        .sum();
    // alice's tip whole; bob's spin spends its max fee on fuel but what its tip needs.
    assert_eq!(block.results[0].receipt().unwrap().fee.tip, 1_000);
    assert!(tips >= 1_020, "{tips}");
    assert_eq!(native(&chain, "carol"), FUNDS + tips);
    assert_eq!(chain.head().proposer, name("carol"));
    assert_eq!(coins(&chain), genesis_coins());
}

#[test]
fn issue_24_verify_replays_each_block_with_its_proposer() {
    let mut chain = fee_chain(FeeSchedule::STANDARD);
    for round in 0..3u64 {
        let tx = call_tx(
            &chain,
            "grow",
            (round * 1_000).to_le_bytes().to_vec(),
            "alice",
            10_000_000,
            500,
        );
        let prepared = prepare_block(
            vec![tx],
            false,
            &chain.pipeline(),
            &tally_chain::crypto::NoKeys,
        );
        chain
            .execute_block_by(chain.next_block_time_ms(), name("dave"), &prepared)
            .unwrap();
        chain.commit(tally_chain::Durability::Immediate).unwrap();
    }
    assert_eq!(native(&chain, "dave"), FUNDS + 1_500);
    // Replayed with another proposer, the tips would land elsewhere and the checksums differ.
    let report = tally_chain::verify::verify(chain.store(), runtime(), chain.config()).unwrap();
    assert!(report.replayed);
    assert_eq!((report.to, report.transactions), (3, 3));
}

/// A schedule whose allocate target is three `grow` calls' worth of new keys (~41,000
/// units at most a block), everything else standard.
fn small_allocate() -> FeeSchedule {
    let mut s = FeeSchedule::STANDARD;
    s.target[Dimension::Allocate as usize] = 20_000;
    s.max[Dimension::Allocate as usize] = 40_000;
    s
}

#[test]
fn issue_24_a_flood_of_new_keys_raises_the_allocate_price_and_not_a_transfers_fee() {
    let mut chain = fee_chain(small_allocate());
    // alice holds simplecoin to send.
    let seed = transfer_tx(&chain, "simplecoin", "alice", 1_000);
    let seed = SignedTransaction::unsigned(Transaction {
        payer: name("bob"),
        ..seed.transaction
    });
    assert!(push(&mut chain, seed).is_success());
    let transfer_fee = |chain: &mut Chain| {
        let r = push(chain, transfer_tx(chain, "alice", "bob", 1));
        assert!(r.is_success(), "{r:?}");
        r.receipt().unwrap().fee.total()
    };
    // The first transfer creates bob's simplecoin balance; the second is the reference.
    transfer_fee(&mut chain);
    let fee_before = transfer_fee(&mut chain);
    let start = chain.fee_state().unwrap().prices;
    let mut base = 0u64;
    for _ in 0..12 {
        // Four floods a block: the fourth finds allocate full and waits.
        let txs: Vec<_> = (0..4)
            .map(|i| {
                base += 1_000;
                call_tx(
                    &chain,
                    "grow",
                    base.to_le_bytes().to_vec(),
                    PAYERS[i],
                    100_000_000,
                    0,
                )
            })
            .collect();
        let block = chain.run_block(txs).unwrap();
        assert!(matches!(
            block.results[3],
            TxResult::Rejected(TxError::BlockFull("allocate"))
        ));
        assert!(block.header.usage.get(Dimension::Allocate) >= 40_000);
    }
    let end = chain.fee_state().unwrap().prices;
    let a = Dimension::Allocate as usize;
    // Twelve blocks at ~2x target: each raised the price by ~1/8.
    assert!(end[a] > start[a] * 3, "{} -> {}", start[a], end[a]);
    for d in [
        Dimension::Bandwidth,
        Dimension::Compute,
        Dimension::Read,
        Dimension::Write,
    ] {
        assert_eq!(end[d as usize], start[d as usize], "{} moved", d.name());
    }
    // A transfer creates no key: its fee did not move.
    assert_eq!(transfer_fee(&mut chain), fee_before);
    // Empty blocks bring the allocate price back down, an eighth a block.
    for _ in 0..40 {
        chain.run_block(Vec::new()).unwrap();
    }
    assert_eq!(chain.fee_state().unwrap().prices, start);
}

/// A block of every kind of transaction fees treat differently, from a few payers (so that
/// their balances are read and written by many transactions of the block).
fn mixed_block(chain: &Chain, round: u64) -> Vec<SignedTransaction> {
    let mut txs = Vec::new();
    for i in 0..48u64 {
        let payer = PAYERS[(i % 4) as usize];
        txs.push(match i % 6 {
            0 => transfer_tx(chain, payer, "bob", 1),
            1 => call_tx(chain, "spin", vec![], payer, 20_000 + i, i),
            2 => call_tx(
                chain,
                "grow",
                (round * 1_000_000 + i * 1_000).to_le_bytes().to_vec(),
                payer,
                if i % 4 == 0 { 50_000 } else { 10_000_000 },
                3,
            ),
            3 => SignedTransaction::unsigned(Transaction {
                payer: name(payer),
                ..transfer_tx(chain, "simplecoin", payer, 10).transaction
            }),
            4 => call_tx(chain, "spin", vec![], payer, FUNDS * 2, 0),
            _ => call_tx(chain, "grow", vec![], payer, 5, 0),
        });
    }
    txs
}

/// The heads of four mixed blocks under `pipeline` on `threads`, and how many transactions'
/// speculative runs stood.
fn mixed_heads(pipeline: Pipeline, threads: usize) -> (Vec<[u8; 32]>, u32) {
    let pool = thread_pool(threads);
    pool.install(|| {
        let mut chain = fee_chain(FeeSchedule::STANDARD);
        chain.set_pipeline(pipeline);
        let (mut heads, mut confirmed) = (Vec::new(), 0);
        for round in 0..4 {
            let txs = mixed_block(&chain, round);
            confirmed += chain.run_block(txs).unwrap().confirmed;
            heads.push(chain.head_id());
        }
        assert_eq!(coins(&chain), genesis_coins());
        (heads, confirmed)
    })
}

#[test]
fn issue_24_fees_are_the_same_on_every_thread_count_and_pipeline() {
    let (sequential, _) = mixed_heads(Pipeline::NONE, 1);
    for threads in [1, 2, 4, 8] {
        let (heads, confirmed) = mixed_heads(Pipeline::ALL, threads);
        assert_eq!(heads, sequential, "{threads} threads");
        // Speculative runs stood, their fees charged from their run's usage.
        assert!(
            threads == 1 || confirmed > 20,
            "{threads} threads: {confirmed}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever mix of transactions, max fees, tips and proposers: every coin is in a balance
    /// or burned.
    #[test]
    fn issue_24_fees_conserve_coins(
        blocks in prop::collection::vec(
            prop::collection::vec((0u8..4, 0u8..4, 0u64..200_000, 0u64..5_000), 0..12),
            1..6,
        ),
        proposer in 0usize..4,
    ) {
        let mut chain = fee_chain(FeeSchedule::STANDARD);
        for (b, txs) in blocks.iter().enumerate() {
            let txs: Vec<_> = txs
                .iter()
                .enumerate()
                .map(|(i, &(kind, payer, max_fee, tip))| {
                    let payer = PAYERS[payer as usize];
                    let base = ((b * 100 + i) as u64 * 1_000).to_le_bytes().to_vec();
                    match kind {
                        0 => transfer_tx(&chain, payer, "carol", 1),
                        1 => call_tx(&chain, "spin", vec![], payer, max_fee, tip),
                        2 => call_tx(&chain, "grow", base, payer, max_fee * 10, tip),
                        _ => call_tx(&chain, "grow", base, payer, max_fee, tip),
                    }
                })
                .collect();
            let prepared = prepare_block(txs, false, &chain.pipeline(), &tally_chain::crypto::NoKeys);
            chain
                .execute_block_by(chain.next_block_time_ms(), name(PAYERS[proposer]), &prepared)
                .unwrap();
            chain.commit(tally_chain::Durability::Immediate).unwrap();
            prop_assert_eq!(coins(&chain), genesis_coins());
        }
    }
}

#[test]
fn issue_24_a_zero_schedule_is_free_for_ever() {
    let mut chain = fee_chain(FeeSchedule::ZERO);
    for _ in 0..3 {
        let txs = vec![call_tx(&chain, "spin", vec![], "alice", 0, 0); 2];
        let block = chain.run_block(txs).unwrap();
        assert!(block.results[0].receipt().unwrap().fee.total() == 0);
    }
    assert_eq!(chain.fee_state().unwrap().prices, [0; 5]);
    assert_eq!(native(&chain, "alice"), FUNDS);
}
