//! Contracts that compose (docs/CONTRACTS.md): calls with results and atomic rollback at every
//! depth, the caller's authority and no more, re-entry and depth refused, fuel from the
//! caller's, read-only queries, events dropped with what rolled back, what a contract can know
//! of its block, and `migrate` on upgrade; the same head on every thread count.

use crate::common::*;
use tally_chain::system::{SETCODE, SYSTEM, SetCode};
use tally_chain::{
    BlockBody, Chain, Event, Name, Pipeline, SignedTransaction, TxReceipt, TxResult,
};
use tally_host_api::AbortCode;

/// A contract that runs a script: its message is a list of 40-byte ops `[op, a, b, c, d]`
/// (u64 little-endian each). A call's (or query's) script follows its op, `d` bytes long.
/// `query` runs the same interpreter; `migrate` stores 1 under key `MIGRATED` and then, in
/// the `failing` variant, traps.
fn script_contract(migrate_fails: bool) -> Vec<u8> {
    let fail = if migrate_fails { "unreachable" } else { "" };
    wat::parse_str(format!(
        r#"(module
  (import "env" "read_message" (func $read (param i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "require_auth" (func $require_auth (param i64)))
  (import "env" "call" (func $call (param i64 i64 i32 i32 i64) (result i32)))
  (import "env" "query" (func $query (param i64 i64 i32 i32 i64) (result i32)))
  (import "env" "set_return" (func $set_return (param i32 i32)))
  (import "env" "return_size" (func $return_size (result i32)))
  (import "env" "read_return" (func $read_return (param i32 i32) (result i32)))
  (import "env" "caller" (func $caller (result i64)))
  (import "env" "emit" (func $emit (param i64 i32 i32)))
  (import "env" "block_time" (func $block_time (result i64)))
  (import "env" "block_height" (func $block_height (result i64)))
  (import "env" "has_auth" (func $has_auth (param i64) (result i32)))
  (import "env" "is_account" (func $is_account (param i64) (result i32)))
  (memory (export "memory") 2)
  (global $status (mut i32) (i32.const 0))
  ;; 0..16: a key and a value; 16..24: scratch; the message from 1024.
  (func $put (param $k i64) (param $v i64)
    (i64.store (i32.const 0) (local.get $k))
    (i64.store (i32.const 8) (local.get $v))
    (call $store (i32.const 0) (i32.const 8) (i32.const 8) (i32.const 8)))
  (func $run
    (local $p i32) (local $end i32) (local $op i64)
    (local $a i64) (local $b i64) (local $c i64) (local $d i64)
    (local.set $p (i32.const 1024))
    (local.set $end (i32.add (i32.const 1024) (call $read (i32.const 1024) (i32.const 60000))))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
      (local.set $op (i64.load (local.get $p)))
      (local.set $a (i64.load offset=8 (local.get $p)))
      (local.set $b (i64.load offset=16 (local.get $p)))
      (local.set $c (i64.load offset=24 (local.get $p)))
      (local.set $d (i64.load offset=32 (local.get $p)))
      (local.set $p (i32.add (local.get $p) (i32.const 40)))
      (if (i64.eq (local.get $op) (i64.const 1)) (then (call $put (local.get $a) (local.get $b))))
      (if (i64.eq (local.get $op) (i64.const 2)) (then
        (global.set $status (call $call (local.get $a) (local.get $b) (local.get $p)
          (i32.wrap_i64 (local.get $d)) (local.get $c)))
        (local.set $p (i32.add (local.get $p) (i32.wrap_i64 (local.get $d))))
        (call $put (i64.const {STATUS}) (i64.extend_i32_u (global.get $status)))))
      (if (i64.eq (local.get $op) (i64.const 3)) (then
        (i64.store (i32.const 16) (local.get $b))
        (call $emit (local.get $a) (i32.const 16) (i32.const 8))))
      (if (i64.eq (local.get $op) (i64.const 4)) (then
        (i64.store (i32.const 16) (local.get $a))
        (call $set_return (i32.const 16) (i32.const 8))))
      (if (i64.eq (local.get $op) (i64.const 5)) (then unreachable))
      (if (i64.eq (local.get $op) (i64.const 6)) (then (call $require_auth (local.get $a))))
      (if (i64.eq (local.get $op) (i64.const 7)) (then (call $put (local.get $a) (call $caller))))
      (if (i64.eq (local.get $op) (i64.const 8)) (then (loop $spin (br $spin))))
      (if (i64.eq (local.get $op) (i64.const 9)) (then
        (call $put (local.get $a) (call $block_height))
        (call $put (local.get $b) (call $block_time))))
      (if (i64.eq (local.get $op) (i64.const 10)) (then
        (call $put (local.get $b) (i64.extend_i32_u (call $has_auth (local.get $a))))))
      (if (i64.eq (local.get $op) (i64.const 11)) (then
        (i64.store (i32.const 16) (i64.const 0))
        (drop (call $read_return (i32.const 16) (i32.const 8)))
        (call $put (local.get $a) (i64.load (i32.const 16)))
        (call $put (local.get $b) (i64.extend_i32_u (call $return_size)))))
      (if (i64.eq (local.get $op) (i64.const 12)) (then
        (global.set $status (call $query (local.get $a) (local.get $b) (local.get $p)
          (i32.wrap_i64 (local.get $d)) (local.get $c)))
        (local.set $p (i32.add (local.get $p) (i32.wrap_i64 (local.get $d))))))
      (if (i64.eq (local.get $op) (i64.const 13)) (then
        (call $put (local.get $b) (i64.extend_i32_u (call $is_account (local.get $a))))))
      (if (i64.eq (local.get $op) (i64.const 14)) (then
        (call $set_return (i32.const 0) (i32.wrap_i64 (local.get $a)))))
      (if (i64.eq (local.get $op) (i64.const 15)) (then
        (if (i32.ne (global.get $status) (i32.wrap_i64 (local.get $a))) (then unreachable))))
      (br $next))))
  (func (export "apply") (param i64 i64 i64) (call $run))
  (func (export "query") (param i64 i64) (call $run))
  (func (export "migrate") (call $put (i64.const {MIGRATED}) (i64.const 1)) {fail}))"#
    ))
    .unwrap()
}

/// Where a script stores the status of its last call.
const STATUS: u64 = 0xFFFF_0001;
/// Where `migrate` marks that it ran.
const MIGRATED: u64 = 0x4D;

/// One op of a script.
#[derive(Debug, Clone)]
enum Op {
    Store(u64, u64),
    /// Call the account's action `go` with at most this fuel (0: all), running this script.
    Call(&'static str, u64, Vec<Op>),
    Emit(u64, u64),
    Return(u64),
    Fail,
    Auth(Name),
    /// Store the caller under this key.
    Caller(u64),
    Spin,
    /// Store the block's height and time under these keys.
    Block(u64, u64),
    /// Store `has_auth(account)` under this key.
    HasAuth(Name, u64),
    /// Store the last call's first 8 bytes of return data, and its length, under these keys.
    ReturnData(u64, u64),
    /// Query the account's `go` with at most this fuel, running this script.
    Query(&'static str, u64, Vec<Op>),
    /// Store `is_account(account)` under this key.
    IsAccount(Name, u64),
    /// Return this many bytes of memory.
    BigReturn(u64),
    /// Trap unless the last call's status is this.
    Expect(AbortCode),
    /// Expect the last call to have succeeded.
    ExpectOk,
}

fn encode(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut op = |code: u64, a: u64, b: u64, c: u64, tail: &[u8]| {
        for word in [code, a, b, c, tail.len() as u64] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(tail);
    };
    for o in ops {
        match o {
            Op::Store(k, v) => op(1, *k, *v, 0, &[]),
            Op::Call(to, fuel, script) => op(2, name(to).0, name("go").0, *fuel, &encode(script)),
            Op::Emit(n, v) => op(3, *n, *v, 0, &[]),
            Op::Return(v) => op(4, *v, 0, 0, &[]),
            Op::Fail => op(5, 0, 0, 0, &[]),
            Op::Auth(a) => op(6, a.0, 0, 0, &[]),
            Op::Caller(k) => op(7, *k, 0, 0, &[]),
            Op::Spin => op(8, 0, 0, 0, &[]),
            Op::Block(h, t) => op(9, *h, *t, 0, &[]),
            Op::HasAuth(a, k) => op(10, a.0, *k, 0, &[]),
            Op::ReturnData(k, len) => op(11, *k, *len, 0, &[]),
            Op::Query(to, fuel, script) => op(12, name(to).0, name("go").0, *fuel, &encode(script)),
            Op::IsAccount(a, k) => op(13, a.0, *k, 0, &[]),
            Op::BigReturn(len) => op(14, *len, 0, 0, &[]),
            Op::Expect(code) => op(15, u64::from(code.code()), 0, 0, &[]),
            Op::ExpectOk => op(15, 0, 0, 0, &[]),
        }
    }
    out
}

const CONTRACTS: [&str; 10] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];

/// A contract whose action recurses without end.
const DEEP: &str = r#"(module
  (memory (export "memory") 1)
  (func $r (call $r))
  (func (export "apply") (param i64 i64 i64) (call $r)))"#;

/// An unsigned chain with the script contract at each of [`CONTRACTS`], [`DEEP`] at `deep`, and
/// an account `alice`.
fn chain() -> Chain {
    let code = script_contract(false);
    let deep = wat::parse_str(DEEP).unwrap();
    let mut contracts: Vec<(Name, &[u8])> =
        CONTRACTS.iter().map(|c| (name(c), &code[..])).collect();
    contracts.push((name("deep"), &deep));
    let genesis = tally_chain::Genesis {
        accounts: vec![tally_chain::genesis::GenesisAccount {
            name: name("alice"),
            key: [7; 32],
        }],
        ..Default::default()
    };
    let config = tally_chain::ChainConfig {
        check_signatures: false,
        ..Default::default()
    };
    chain_with(config, &genesis, &contracts)
}

/// A transaction running `script` in contract `to`, authorized by `auth`.
fn tx(chain: &Chain, to: &str, auth: &[Name], script: &[Op]) -> SignedTransaction {
    let go = action(name(to), name("go"), auth, encode(script));
    SignedTransaction::unsigned(envelope(chain, vec![go]))
}

/// Runs `script` in `to` in its own block; its receipt.
fn run(chain: &mut Chain, to: &str, script: &[Op]) -> TxReceipt {
    match push(chain, tx(chain, to, &[], script)) {
        TxResult::Included(receipt) => receipt,
        other => panic!("{other:?}"),
    }
}

/// The u64 contract `at` stored under `key`.
fn get(chain: &Chain, at: &str, key: u64) -> Option<u64> {
    let value = chain.get(name(at), &key.to_le_bytes()).unwrap()?;
    Some(u64::from_le_bytes(value.try_into().unwrap()))
}

fn status(chain: &Chain, at: &str) -> Option<u64> {
    get(chain, at, STATUS)
}

fn code(code: AbortCode) -> Option<u64> {
    Some(u64::from(code.code()))
}

#[test]
fn a_call_runs_the_callee_in_its_namespace_and_hands_back_its_return_data() {
    let mut chain = chain();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call("b", 0, vec![Op::Store(1, 7), Op::Caller(3), Op::Return(42)]),
            Op::ReturnData(2, 4),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        get(&chain, "b", 1),
        Some(7),
        "the callee writes its own namespace"
    );
    assert_eq!(get(&chain, "a", 1), None);
    assert_eq!(
        get(&chain, "b", 3),
        Some(name("a").0),
        "the callee sees its caller"
    );
    assert_eq!(status(&chain, "a"), Some(0));
    assert_eq!(
        get(&chain, "a", 2),
        Some(42),
        "the caller reads the return data"
    );
    assert_eq!(get(&chain, "a", 4), Some(8));
}

#[test]
fn a_failed_callee_is_rolled_back_at_every_depth_and_its_caller_goes_on() {
    let mut chain = chain();
    // a → b → c: c writes, then fails; b saw it fail and goes on; a goes on.
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Store(1, 1),
            Op::Call(
                "b",
                0,
                vec![
                    Op::Store(1, 2),
                    Op::Call("c", 0, vec![Op::Store(1, 3), Op::Emit(9, 3), Op::Fail]),
                    Op::Expect(AbortCode::Trap),
                    Op::Store(5, 5),
                ],
            ),
            Op::ExpectOk,
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        get(&chain, "c", 1),
        None,
        "the failed callee's write is gone"
    );
    assert_eq!(get(&chain, "b", 1), Some(2), "its caller's writes stand");
    assert_eq!(get(&chain, "b", 5), Some(5));
    assert_eq!(status(&chain, "b"), code(AbortCode::Trap));
    assert!(
        receipt.events.is_empty(),
        "the failed callee's event is gone"
    );

    // a → b → c: c succeeds, then b fails: c's writes go with b's.
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call(
                "b",
                0,
                vec![
                    Op::Store(6, 6),
                    Op::Call("c", 0, vec![Op::Store(6, 6), Op::Emit(9, 1)]),
                    Op::Fail,
                ],
            ),
            Op::Store(6, 6),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 6), Some(6));
    assert_eq!(get(&chain, "b", 6), None);
    assert_eq!(
        get(&chain, "c", 6),
        None,
        "a succeeded callee of a failed call is gone too"
    );
    assert!(receipt.events.is_empty());

    // A top-level failure rolls back the whole transaction, callees included.
    let receipt = run(
        &mut chain,
        "a",
        &[Op::Call("b", 0, vec![Op::Store(7, 7)]), Op::Fail],
    );
    assert!(!receipt.is_success());
    assert_eq!(get(&chain, "b", 7), None);
}

#[test]
fn a_callee_has_its_callers_authority_and_not_the_signers() {
    let mut chain = chain();
    let alice = name("a");
    let signed = |chain: &Chain, script: &[Op]| tx(chain, "b", &[alice], script);
    // b, authorized by a (the signer), calls c: in c only b authorizes.
    let script = [
        Op::HasAuth(alice, 1),
        Op::Call(
            "c",
            0,
            vec![
                Op::HasAuth(alice, 2),
                Op::HasAuth(name("b"), 3),
                Op::Auth(name("b")),
            ],
        ),
        Op::ExpectOk,
        Op::Call("c", 0, vec![Op::Auth(alice)]),
        Op::Expect(AbortCode::Unauthorized),
    ];
    let signed = signed(&chain, &script);
    let result = push(&mut chain, signed);
    assert!(result.is_success(), "{result:?}");
    assert_eq!(
        get(&chain, "b", 1),
        Some(1),
        "the signer authorizes the action"
    );
    assert_eq!(get(&chain, "c", 2), Some(0), "but not the call");
    assert_eq!(get(&chain, "c", 3), Some(1), "the caller does");
}

#[test]
fn a_contract_on_the_call_stack_cannot_be_called_again_and_depth_is_bounded() {
    let mut chain = chain();
    // a → b → a
    let receipt = run(
        &mut chain,
        "a",
        &[Op::Call(
            "b",
            0,
            vec![Op::Call("a", 0, vec![Op::Store(1, 1)])],
        )],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(status(&chain, "b"), code(AbortCode::Reentry));
    assert_eq!(get(&chain, "a", 1), None);
    // a → a
    run(&mut chain, "a", &[Op::Call("a", 0, vec![])]);
    assert_eq!(status(&chain, "a"), code(AbortCode::Reentry));

    // a → b → … → j: ten contracts; the ninth call is one too deep.
    let mut script = vec![Op::Store(1, 1)];
    for callee in CONTRACTS[1..].iter().rev() {
        script = vec![Op::Call(callee, 0, script)];
    }
    let receipt = run(&mut chain, "a", &script);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(
        status(&chain, "h"),
        code(AbortCode::CallDepth),
        "the eighth contract is the last"
    );
    assert_eq!(get(&chain, "i", 1), None);
}

#[test]
fn a_callee_spends_the_callers_fuel_up_to_its_cap_and_the_rest_returns() {
    let mut chain = chain();
    let capped = run(
        &mut chain,
        "a",
        &[Op::Call("b", 200_000, vec![Op::Spin]), Op::Store(1, 1)],
    );
    assert!(capped.is_success(), "{}", capped.report());
    assert_eq!(status(&chain, "a"), code(AbortCode::OutOfFuel));
    assert_eq!(
        get(&chain, "a", 1),
        Some(1),
        "the caller goes on with what is left"
    );
    assert!(
        (200_000..300_000).contains(&capped.fuel_used),
        "the cap bounds what the callee spends: {}",
        capped.fuel_used
    );
    // Uncapped, a spinning callee takes all the caller has: the transaction fails.
    let all = run(
        &mut chain,
        "a",
        &[Op::Call("b", 0, vec![Op::Spin]), Op::Store(2, 2)],
    );
    assert_eq!(
        all.failure().unwrap().code,
        AbortCode::OutOfFuel,
        "{}",
        all.report()
    );
    assert_eq!(get(&chain, "a", 2), None);
}

#[test]
fn events_come_in_order_with_their_contract_and_the_block_commits_to_them() {
    let mut chain = chain();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Emit(1, 10),
            Op::Call("b", 0, vec![Op::Emit(2, 20)]),
            Op::Call("c", 0, vec![Op::Emit(3, 30), Op::Fail]),
            Op::Emit(4, 40),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    let event = |contract: &str, n: u64, v: u64| Event {
        contract: name(contract),
        name: Name(n),
        data: v.to_le_bytes().to_vec(),
    };
    let expected = vec![event("a", 1, 10), event("b", 2, 20), event("a", 4, 40)];
    assert_eq!(receipt.events, expected);
    // The stored block's body holds them, under its header's transactions root.
    let height = chain.head().height;
    let record = chain.store().block(height).unwrap().unwrap();
    let body: BlockBody = borsh::from_slice(&record.body).unwrap();
    assert_eq!(body.events, vec![expected]);
    assert_eq!(body.root(), chain.head().transactions_root);
    // A failed transaction has none.
    let failed = run(&mut chain, "a", &[Op::Emit(1, 1), Op::Fail]);
    assert!(failed.events.is_empty());
}

#[test]
fn a_query_reads_and_answers_but_cannot_write_emit_or_call() {
    let mut chain = chain();
    run(&mut chain, "b", &[Op::Store(1, 77)]);
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Query("b", 0, vec![Op::Return(5)]),
            Op::ExpectOk,
            Op::ReturnData(2, 3),
            Op::Query("b", 0, vec![Op::Store(1, 0)]),
            Op::Expect(AbortCode::ReadOnly),
            Op::Query("b", 0, vec![Op::Emit(1, 1)]),
            Op::Expect(AbortCode::ReadOnly),
            Op::Query("b", 0, vec![Op::Call("c", 0, vec![])]),
            Op::Expect(AbortCode::ReadOnly),
            // A query may query.
            Op::Query(
                "b",
                0,
                vec![Op::Query("c", 0, vec![Op::Return(9)]), Op::ExpectOk],
            ),
            Op::ExpectOk,
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 2), Some(5));
    assert_eq!(get(&chain, "b", 1), Some(77), "the query wrote nothing");
    assert!(receipt.events.is_empty());
}

#[test]
fn a_contract_knows_its_block_and_which_accounts_exist() {
    let mut chain = chain();
    let time = chain.next_block_time_ms();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Block(1, 2),
            Op::IsAccount(name("alice"), 3),
            Op::IsAccount(name("nobody"), 4),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 1), Some(chain.head().height));
    assert_eq!(get(&chain, "a", 2), Some(time));
    assert_eq!(get(&chain, "a", 3), Some(1));
    assert_eq!(get(&chain, "a", 4), Some(0));
}

#[test]
fn hostile_callees_fail_alone_and_cost_what_they_use() {
    use tally_host_api::limits::MAX_RETURN_LEN;
    let mut chain = chain();
    // Return data past the limit fails the callee, not the caller.
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call("b", 0, vec![Op::BigReturn(u64::from(MAX_RETURN_LEN) + 1)]),
            Op::Expect(AbortCode::LimitExceeded),
            Op::Call("b", 0, vec![Op::BigReturn(60_000)]),
            Op::ExpectOk,
            Op::ReturnData(1, 2),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(get(&chain, "a", 2), Some(60_000));
    // Events up to the transaction's limit, then the emitter fails.
    let many: Vec<Op> = (0..tally_host_api::limits::MAX_EVENTS_PER_TX as u64 + 1)
        .map(|i| Op::Emit(i, i))
        .collect();
    let receipt = run(&mut chain, "a", &[Op::Call("b", 0, many), Op::Emit(1, 1)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(status(&chain, "a"), code(AbortCode::LimitExceeded));
    assert_eq!(
        receipt.events.len(),
        1,
        "the failed emitter's events are dropped"
    );
}

#[test]
fn a_callee_that_recurses_without_end_overflows_the_shared_stack_budget_alone() {
    let mut chain = chain();
    // Eight levels deep, the last one recursing: the deterministic limit stops it (never the
    // native stack), and every caller goes on.
    let mut script = vec![
        Op::Call("deep", 0, vec![]),
        Op::Expect(AbortCode::StackOverflow),
    ];
    for callee in CONTRACTS[1..7].iter().rev() {
        script = vec![Op::Call(callee, 0, script), Op::ExpectOk];
    }
    let receipt = run(&mut chain, "a", &script);
    assert!(receipt.is_success(), "{}", receipt.report());
    assert_eq!(status(&chain, "g"), code(AbortCode::StackOverflow));
}

#[test]
fn setcode_over_code_runs_migrate_and_a_failing_migrate_keeps_the_old_code() {
    let mut chain = chain();
    let setcode = |chain: &Chain, code: Vec<u8>| {
        let set = SetCode {
            account: name("a"),
            code,
        };
        let act = action(SYSTEM, SETCODE, &[name("a")], borsh::to_vec(&set).unwrap());
        SignedTransaction::unsigned(envelope(chain, vec![act]))
    };
    assert_eq!(
        get(&chain, "a", MIGRATED),
        None,
        "a first deployment runs onInit, not migrate"
    );
    let hash = chain.code_hash(name("a")).unwrap();

    let failing = script_contract(true);
    let set = setcode(&chain, failing);
    let result = push(&mut chain, set);
    assert_eq!(
        result.receipt().unwrap().failure().unwrap().code,
        AbortCode::Trap
    );
    assert_eq!(
        chain.code_hash(name("a")).unwrap(),
        hash,
        "the old code stays"
    );
    assert_eq!(get(&chain, "a", MIGRATED), None);

    let mut upgraded = script_contract(false);
    upgraded.extend_from_slice(&[0, 3, 2, b'v', b'2']); // a custom section "v2": new code
    let set = setcode(&chain, upgraded);
    let result = push(&mut chain, set);
    assert!(result.is_success(), "{result:?}");
    assert_ne!(chain.code_hash(name("a")).unwrap(), hash);
    assert_eq!(
        get(&chain, "a", MIGRATED),
        Some(1),
        "migrate ran against the old state"
    );
}

/// Blocks of calls that fail, roll back, re-enter and spin, over every thread count and
/// pipeline: one head.
#[test]
fn blocks_with_calls_give_one_head_on_every_thread_count_and_pipeline() {
    let heads = |pipeline: Pipeline, threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut chain = chain();
            chain.set_pipeline(pipeline);
            let mut ids = Vec::new();
            let mut confirmed = 0;
            for round in 0..3u64 {
                let txs: Vec<_> = (0..60u64)
                    .map(|i| {
                        let from = CONTRACTS[((i + round) % 10) as usize];
                        let to = CONTRACTS[((i * 3 + 1) % 10) as usize];
                        let script = match i % 5 {
                            0 => vec![Op::Call(to, 0, vec![Op::Store(i, round)]), Op::Emit(i, i)],
                            1 => vec![Op::Store(i, i), Op::Call(to, 0, vec![Op::Fail])],
                            2 => vec![Op::Call(to, 100_000, vec![Op::Spin]), Op::Store(i, 1)],
                            3 => vec![Op::Call(to, 0, vec![Op::Call(from, 0, vec![])])],
                            _ => vec![Op::Query(to, 0, vec![Op::Return(i)]), Op::ReturnData(i, 1)],
                        };
                        tx(&chain, from, &[], &script)
                    })
                    .collect();
                confirmed += chain.run_block(txs).unwrap().confirmed;
                ids.push(chain.head_id());
            }
            (ids, confirmed)
        })
    };
    let (reference, _) = heads(Pipeline::NONE, 1);
    for threads in [1, 2, 4] {
        let (ids, confirmed) = heads(Pipeline::ALL, threads);
        assert_eq!(ids, reference, "{threads} threads");
        if threads > 1 {
            assert!(confirmed > 0, "no speculative run with calls stood");
        }
    }
}

#[test]
fn chain_query_answers_from_committed_state_and_commits_nothing() {
    let chain = chain();
    let answer = chain
        .query(name("a"), name("price"), &encode(&[Op::Return(99)]))
        .unwrap();
    assert!(answer.is_success(), "{answer:?}");
    assert_eq!(answer.output, 99u64.to_le_bytes());
    assert!(answer.fuel_used > 0);

    let before = user_state(&chain);
    let write = chain
        .query(name("a"), name("price"), &encode(&[Op::Store(1, 1)]))
        .unwrap();
    assert_eq!(write.failure().unwrap().code, AbortCode::ReadOnly);
    let spin = chain
        .query(name("a"), name("price"), &encode(&[Op::Spin]))
        .unwrap();
    assert_eq!(spin.failure().unwrap().code, AbortCode::OutOfFuel);
    assert_eq!(user_state(&chain), before);

    let nobody = chain.query(name("nobody"), name("price"), &[]).unwrap();
    assert_eq!(nobody.failure().unwrap().code, AbortCode::NoHandler);
    // A contract without a `query` export answers none.
    let coin = simplecoin_chain();
    let none = coin.query(simplecoin(), name("price"), &[]).unwrap();
    assert_eq!(none.failure().unwrap().code, AbortCode::NoHandler);
}

/// The script contract with a custom section `v{i}`: the same behaviour, another code hash.
fn variant(i: u8) -> Vec<u8> {
    let mut code = script_contract(false);
    code.extend_from_slice(&[0, 4, 3, b'v', b'0' + i / 10, b'0' + i % 10]);
    code
}

#[test]
fn a_transaction_pays_for_each_contract_it_enters_after_its_first_and_enters_at_most_sixteen() {
    use tally_host_api::limits::MAX_CONTRACTS_PER_TX;
    let variants: Vec<(String, Vec<u8>)> = (0..MAX_CONTRACTS_PER_TX as u8)
        .map(|i| (format!("k{}", (b'a' + i) as char), variant(i)))
        .collect();
    let mut contracts: Vec<(Name, &[u8])> = variants
        .iter()
        .map(|(account, code)| (name(account), &code[..]))
        .collect();
    let script = script_contract(false);
    contracts.push((name("a"), &script));
    contracts.push((name("b"), &script));
    let mut chain = unsigned_chain(&contracts);
    let fresh = chain
        .runtime()
        .prepare(&variants[0].1)
        .unwrap()
        .fresh_instance_fuel();
    assert!(fresh > 0);

    // Calling code the transaction already entered (a's own) costs no instance; new code
    // costs one, once.
    // (The first call creates a's status key, which costs a new key once.)
    run(&mut chain, "a", &[Op::Call("b", 0, vec![])]);
    let same = run(&mut chain, "a", &[Op::Call("b", 0, vec![])]);
    let new = run(&mut chain, "a", &[Op::Call("ka", 0, vec![])]);
    let twice = run(
        &mut chain,
        "a",
        &[Op::Call("ka", 0, vec![]), Op::Call("ka", 0, vec![])],
    );
    let again = run(
        &mut chain,
        "a",
        &[Op::Call("b", 0, vec![]), Op::Call("b", 0, vec![])],
    );
    for r in [&same, &new, &twice, &again] {
        assert!(r.is_success(), "{}", r.report());
    }
    // The callee's own work is the same in each: the difference is the instance (and the
    // bytes of the longer scripts, alike in both pairs).
    assert_eq!(new.fuel_used - same.fuel_used, fresh);
    assert_eq!(twice.fuel_used - again.fuel_used, fresh);

    // a and fifteen other codes: sixteen contracts; the sixteenth new one is one too many.
    let names: Vec<&'static str> = variants
        .iter()
        .map(|(n, _)| &*Box::leak(n.clone().into_boxed_str()))
        .collect();
    let mut script: Vec<Op> = names[..15]
        .iter()
        .flat_map(|n| [Op::Call(n, 0, vec![]), Op::ExpectOk])
        .collect();
    script.push(Op::Call(names[15], 0, vec![]));
    script.push(Op::Expect(AbortCode::LimitExceeded));
    let receipt = run(&mut chain, "a", &script);
    assert!(receipt.is_success(), "{}", receipt.report());
}

/// A random script of at most `budget` ops, nesting calls and queries up to `depth`.
fn random_script(rng: &mut u64, depth: u32, budget: &mut u32) -> Vec<Op> {
    fn next(rng: &mut u64) -> u64 {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    }
    let mut ops = Vec::new();
    while *budget > 0 && !next(rng).is_multiple_of(5) {
        *budget -= 1;
        let r = next(rng);
        let to = CONTRACTS[(r >> 8) as usize % CONTRACTS.len()];
        let (k, v) = ((r >> 16) % 8, r >> 40);
        ops.push(match r % 12 {
            0 | 1 => Op::Store(k, v),
            2 | 3 if depth > 0 => {
                let fuel = [0, 50_000, 400_000][(r >> 20) as usize % 3];
                Op::Call(to, fuel, random_script(rng, depth - 1, budget))
            }
            4 if depth > 0 => Op::Query(to, 0, random_script(rng, depth - 1, budget)),
            5 => Op::Emit(k, v),
            6 => Op::Return(v),
            7 if r.is_multiple_of(97) => Op::Fail,
            8 => Op::ReturnData(k, (k + 1) % 8),
            9 if r.is_multiple_of(53) => Op::Spin,
            10 => Op::Caller(k),
            _ => Op::Block(k, (k + 3) % 8),
        });
    }
    ops
}

/// Random blocks of nested calls, queries, failures, spins and events: the same receipts and
/// head in order on one thread, speculatively on 2, 4, 64 and 128, and after a restart mid-way.
#[test]
fn random_call_trees_give_one_history_on_every_path() {
    let run = |pipeline: Pipeline, threads: usize, restart_after: Option<u64>| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut chain = chain();
            chain.set_pipeline(pipeline);
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut history = Vec::new();
            for round in 0..4u64 {
                if restart_after == Some(round) {
                    let store = chain.into_store();
                    chain = tally_chain::Chain::open(
                        runtime(),
                        store,
                        tally_chain::ChainConfig {
                            check_signatures: false,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    chain.set_pipeline(pipeline);
                }
                let txs: Vec<_> = (0..40)
                    .map(|i| {
                        let mut budget = 24;
                        let script = random_script(&mut rng, 3, &mut budget);
                        tx(&chain, CONTRACTS[i % CONTRACTS.len()], &[], &script)
                    })
                    .collect();
                let block = chain.run_block(txs).unwrap();
                history.push((chain.head_id(), block.results));
            }
            history
        })
    };
    let reference = run(Pipeline::NONE, 1, None);
    let events: usize = reference
        .iter()
        .flat_map(|(_, results)| results.iter().filter_map(TxResult::receipt))
        .map(|r| r.events.len())
        .sum();
    assert!(events > 0, "the scripts emitted nothing: a weak test");
    // 64 and 128 threads run more speculative call stacks at once than the runtime's instance
    // pool (sized for this machine's cores) holds: those runs fall back to in-order execution.
    for (threads, restart) in [(2, None), (4, None), (64, None), (128, None), (2, Some(2))] {
        let got = run(Pipeline::ALL, threads, restart);
        assert_eq!(got, reference, "{threads} threads, restart {restart:?}");
    }
}

#[test]
fn a_traced_receipt_shows_the_call_tree_with_each_frames_fuel_status_and_events() {
    let rt = std::sync::Arc::new(
        tally_runtime::Runtime::new(tally_runtime::RuntimeConfig {
            trace: true,
            ..Default::default()
        })
        .unwrap(),
    );
    let code = script_contract(false);
    let mut builder = tally_chain::Chain::genesis(
        rt,
        Box::new(tally_chain::MemoryStore::new(16)),
        tally_chain::ChainConfig {
            check_signatures: false,
            ..Default::default()
        },
    )
    .unwrap();
    for c in ["a", "b", "c"] {
        builder.deploy(name(c), &code).unwrap();
    }
    let mut chain = builder.finish().unwrap();
    let receipt = run(
        &mut chain,
        "a",
        &[
            Op::Call(
                "b",
                0,
                vec![Op::Emit(1, 1), Op::Query("c", 0, vec![Op::Return(3)])],
            ),
            Op::Call("c", 0, vec![Op::Fail]),
        ],
    );
    assert!(receipt.is_success(), "{}", receipt.report());
    let calls = &receipt.trace.as_ref().unwrap().actions[0].calls;
    let tree: Vec<_> = calls
        .iter()
        .map(|c| {
            (
                c.depth,
                c.contract,
                c.query,
                c.failure.as_ref().map(|a| a.code),
                c.events,
            )
        })
        .collect();
    assert_eq!(
        tree,
        vec![
            (1, name("b"), false, None, 1),
            (2, name("c"), true, None, 0),
            (1, name("c"), false, Some(AbortCode::Trap), 0),
        ]
    );
    assert!(calls.iter().all(|c| c.fuel_used > 0));
    assert!(
        calls[0].fuel_used > calls[1].fuel_used,
        "a frame's fuel includes its callees'"
    );
    let report = receipt.report();
    assert!(
        report.contains("call b::go") && report.contains("query c::go"),
        "{report}"
    );
    assert!(report.contains("failed: trap"), "{report}");
}
