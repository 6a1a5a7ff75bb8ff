//! A contract that runs a script of ops from its message, and the scripts: the call-tree
//! tests (`calls.rs`) and the `calls` fuzz target (fuzz/fuzz_targets/calls.rs, which includes
//! this file) drive contracts that call, query, fail, spin and emit with it.
#![allow(dead_code)] // each user takes a different part

use tally_chain::Name;
use tally_host_api::AbortCode;

fn account(s: &str) -> Name {
    s.parse().expect("a valid name")
}

/// A contract that runs a script: its message is a list of 40-byte ops `[op, a, b, c, d]`
/// (u64 little-endian each). A call's (or query's) script follows its op, `d` bytes long.
/// `query` runs the same interpreter; `migrate` stores 1 under key `MIGRATED` and then, in
/// the `failing` variant, traps.
pub fn script_contract(migrate_fails: bool) -> Vec<u8> {
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
pub const STATUS: u64 = 0xFFFF_0001;
/// Where `migrate` marks that it ran.
pub const MIGRATED: u64 = 0x4D;

/// One op of a script.
#[derive(Debug, Clone)]
pub enum Op {
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

pub fn encode(ops: &[Op]) -> Vec<u8> {
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
            Op::Call(to, fuel, script) => {
                op(2, account(to).0, account("go").0, *fuel, &encode(script))
            }
            Op::Emit(n, v) => op(3, *n, *v, 0, &[]),
            Op::Return(v) => op(4, *v, 0, 0, &[]),
            Op::Fail => op(5, 0, 0, 0, &[]),
            Op::Auth(a) => op(6, a.0, 0, 0, &[]),
            Op::Caller(k) => op(7, *k, 0, 0, &[]),
            Op::Spin => op(8, 0, 0, 0, &[]),
            Op::Block(h, t) => op(9, *h, *t, 0, &[]),
            Op::HasAuth(a, k) => op(10, a.0, *k, 0, &[]),
            Op::ReturnData(k, len) => op(11, *k, *len, 0, &[]),
            Op::Query(to, fuel, script) => {
                op(12, account(to).0, account("go").0, *fuel, &encode(script))
            }
            Op::IsAccount(a, k) => op(13, a.0, *k, 0, &[]),
            Op::BigReturn(len) => op(14, *len, 0, 0, &[]),
            Op::Expect(code) => op(15, u64::from(code.code()), 0, 0, &[]),
            Op::ExpectOk => op(15, 0, 0, 0, &[]),
        }
    }
    out
}

/// The accounts the script contract is deployed to in the tests and the fuzz target.
pub const CONTRACTS: [&str; 10] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];

/// A script of at most `budget` ops drawn from `next`, nesting calls and queries up to
/// `depth`: a seeded generator in the tests, the fuzzer's bytes in the `calls` fuzz target.
pub fn generate(next: &mut dyn FnMut() -> u64, depth: u32, budget: &mut u32) -> Vec<Op> {
    let mut ops = Vec::new();
    while *budget > 0 && !next().is_multiple_of(5) {
        *budget -= 1;
        let r = next();
        let to = CONTRACTS[(r >> 8) as usize % CONTRACTS.len()];
        let (k, v) = ((r >> 16) % 8, r >> 40);
        ops.push(match r % 12 {
            0 | 1 => Op::Store(k, v),
            2 | 3 if depth > 0 => {
                let fuel = [0, 50_000, 400_000][(r >> 20) as usize % 3];
                Op::Call(to, fuel, generate(next, depth - 1, budget))
            }
            4 if depth > 0 => Op::Query(to, 0, generate(next, depth - 1, budget)),
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
