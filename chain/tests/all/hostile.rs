//! Hostile contracts against a running chain: each one fails with a clear, deterministic
//! receipt (or is refused at deploy), changes no state, and the next honest transaction
//! succeeds. The runtime's own tests check each host function's bounds in detail; here the
//! whole node is the subject.

use crate::common::*;
use tally_chain::system::{SETCODE, SYSTEM, SetCode};
use tally_chain::{Chain, Name, SignedTransaction, Transfer};
use tally_host_api::AbortCode;

/// Every ABI v1 import.
const IMPORTS: &str = r#"
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "message_size" (func $message_size (result i32)))
  (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "remove" (func $remove (param i32 i32)))
  (import "env" "assert" (func $assert (param i32 i32 i32)))
  (import "env" "require_auth" (func $require_auth (param i64)))
  (import "env" "print" (func $print (param i32 i32)))
"#;

/// A module whose `apply` runs `body`; bytes 0..16 of its memory hold "simplecoin" as an
/// account name's 8 little-endian bytes at offset 0 and the key "k" at offset 8.
fn contract(body: &str) -> Vec<u8> {
    let simplecoin = simplecoin().0.to_le_bytes();
    let bytes: String = simplecoin.iter().map(|b| format!("\\{b:02x}")).collect();
    wat::parse_str(format!(
        r#"(module {IMPORTS}
          (memory (export "memory") 1)
          (data (i32.const 0) "{bytes}k")
          (func $recurse (call $recurse))
          (func (export "apply") (param i64 i64 i64) {body}))"#
    ))
    .unwrap()
}

/// A chain with simplecoin and `contracts` deployed at genesis.
fn coin_chain(contracts: &[(Name, &[u8])]) -> Chain {
    let mut all = vec![(simplecoin(), SIMPLECOIN_WASM)];
    all.extend_from_slice(contracts);
    unsigned_chain(&all)
}

fn tx(chain: &Chain, account: Name, data: Vec<u8>) -> SignedTransaction {
    unsigned_tx(chain, account, name("run"), data)
}

fn honest_transfer(chain: &mut Chain, n: u64) {
    let t = Transfer {
        from: simplecoin(),
        to: name("alice"),
        amount: 1,
        memo: n.to_string(),
    };
    let transfer = unsigned_tx(chain, simplecoin(), transfer(), t.encode());
    assert!(push(chain, transfer).is_success());
    assert_eq!(balance(chain, simplecoin(), name("alice")), Some(n));
}

#[test]
fn hostile_actions_fail_cleanly_change_nothing_and_the_chain_goes_on() {
    let cases: &[(&str, &str, AbortCode)] = &[
        ("infinite loop", "(loop $l (br $l))", AbortCode::OutOfFuel),
        (
            "memory.grow bomb",
            "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable",
            AbortCode::Trap,
        ),
        (
            "deep recursion",
            "(call $recurse)",
            AbortCode::StackOverflow,
        ),
        (
            "pointer out of range",
            "(drop (call $load (i32.const -1) (i32.const 8) (i32.const 0) (i32.const 8)))",
            AbortCode::BadPointer,
        ),
        (
            "negative length",
            "(call $store (i32.const 0) (i32.const -5) (i32.const 0) (i32.const 8))",
            AbortCode::BadPointer,
        ),
        (
            "message into memory's end",
            "(drop (call $read_message (i32.const 65535) (i32.const 2)))",
            AbortCode::BadPointer,
        ),
        (
            "trap midway through its writes",
            "(call $store (i32.const 8) (i32.const 1) (i32.const 0) (i32.const 8)) unreachable",
            AbortCode::Trap,
        ),
        (
            "console flood",
            "(loop $l (call $print (i32.const 0) (i32.const 1000)) (br $l))",
            AbortCode::LimitExceeded,
        ),
    ];
    let evil = |i: usize| name(&format!("evil{}", (b'a' + i as u8) as char));
    let codes: Vec<Vec<u8>> = cases.iter().map(|(_, body, _)| contract(body)).collect();
    let contracts: Vec<(Name, &[u8])> = codes
        .iter()
        .enumerate()
        .map(|(i, code)| (evil(i), code.as_slice()))
        .collect();
    let mut chain = coin_chain(&contracts);

    for (i, (what, _, code)) in cases.iter().enumerate() {
        let before = user_state(&chain);
        let evil_tx = tx(&chain, evil(i), vec![]);
        let result = push(&mut chain, evil_tx);
        let abort = result
            .receipt()
            .and_then(|r| r.failure())
            .unwrap_or_else(|| panic!("{what}: expected a failure, got {result:?}"));
        assert_eq!(abort.code, *code, "{what}: {abort:?}");
        assert_eq!(user_state(&chain), before, "{what} changed state");
        honest_transfer(&mut chain, i as u64 + 1);
    }
}

#[test]
fn a_contract_cannot_read_or_write_another_contracts_keys() {
    // It loads simplecoin's own balance key and stores the result, then writes that key.
    let snoop = contract(
        "(i32.store (i32.const 100) (call $load (i32.const 0) (i32.const 8) (i32.const 200) (i32.const 8)))
         (call $store (i32.const 8) (i32.const 1) (i32.const 100) (i32.const 4))
         (call $store (i32.const 0) (i32.const 8) (i32.const 8) (i32.const 1))",
    );
    let mut chain = coin_chain(&[(name("snoop"), &snoop)]);
    let supply = balance(&chain, simplecoin(), simplecoin());
    let snoop_tx = tx(&chain, name("snoop"), vec![]);
    let result = push(&mut chain, snoop_tx);
    assert!(result.is_success(), "{result:?}");
    // It saw no value (-1): the key exists only in simplecoin's namespace.
    let seen = chain.get(name("snoop"), b"k").unwrap().unwrap();
    assert_eq!(i32::from_le_bytes(seen.try_into().unwrap()), -1);
    // Its write landed in its own namespace; simplecoin's balance is untouched.
    assert_eq!(
        chain
            .get(name("snoop"), &simplecoin().0.to_le_bytes())
            .unwrap(),
        Some(b"k".to_vec())
    );
    assert_eq!(balance(&chain, simplecoin(), simplecoin()), supply);
}

#[test]
fn hostile_uploads_are_refused_with_a_precise_error() {
    let all_imports_twice = format!(
        r#"(module {IMPORTS} {}
          (memory (export "memory") 1)
          (func (export "apply") (param i64 i64 i64)))"#,
        IMPORTS.replace(" (func $", " (func $again_")
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "every import twice",
            wat::parse_str(&all_imports_twice).unwrap(),
            "declared twice",
        ),
        (
            "a data segment far outside its memory",
            wat::parse_str(
                r#"(module (memory (export "memory") 1)
                  (data (i32.const 40000000) "x")
                  (func (export "apply") (param i64 i64 i64)))"#,
            )
            .unwrap(),
            "cannot be instantiated",
        ),
        (
            "a huge data segment",
            wat::parse_str(format!(
                r#"(module (memory (export "memory") 20)
                  (data (i32.const 0) "{}")
                  (func (export "apply") (param i64 i64 i64)))"#,
                "x".repeat(1 << 20)
            ))
            .unwrap(),
            "the limit is",
        ),
        (
            "a start function",
            wat::parse_str(
                r#"(module (memory (export "memory") 1) (func $s) (start $s)
                  (func (export "apply") (param i64 i64 i64)))"#,
            )
            .unwrap(),
            "start function",
        ),
        (
            "not wasm at all",
            b"\0asm\x01\0\0\0garbage".to_vec(),
            "invalid WebAssembly",
        ),
    ];
    let mut chain = coin_chain(&[]);
    for (i, (what, wasm, expected)) in cases.into_iter().enumerate() {
        let before = user_state(&chain);
        let set = SetCode {
            account: name("evil"),
            code: wasm,
        };
        let setcode = action(
            SYSTEM,
            SETCODE,
            &[name("evil")],
            borsh::to_vec(&set).unwrap(),
        );
        let upload = SignedTransaction::unsigned(envelope(&chain, vec![setcode]));
        let result = push(&mut chain, upload);
        let abort = result
            .receipt()
            .and_then(|r| r.failure())
            .unwrap_or_else(|| panic!("{what}: expected a refusal, got {result:?}"));
        assert_eq!(abort.code, AbortCode::InvalidAction, "{what}");
        assert!(abort.message.contains(expected), "{what}: {abort:?}");
        assert_eq!(user_state(&chain), before, "{what} changed state");
        honest_transfer(&mut chain, i as u64 + 1);
    }
}
