//! Host-function arguments: a fixed contract calls the host functions (and writes memory)
//! with pointers, lengths and values the fuzzer chooses, through the real runtime and a
//! map-backed host.
//!
//! `cargo +nightly fuzz run host_args`
//!
//! Holds: no argument makes the runtime return a node error or panic; running the same
//! action again (on the restored, reused instance) gives the same receipt, fuel and state;
//! and the next action starts from pristine memory.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tally_fuzz::MapHost;
use tally_host_api::{AbortCode, Name};
use tally_runtime::{Contract, Entry, Receipt, Runtime, RuntimeConfig};

/// Reads the message to 0x18000 and runs it as 17-byte commands: an opcode byte (taken modulo
/// 13) and four little-endian i32 arguments a, b, c, d. An empty message runs no command.
/// Either way it ends by storing a checksum of its whole memory under key "sum", so memory an
/// earlier action left behind shows in the next one's state.
const CONTRACT: &str = r#"(module
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "message_size" (func $message_size (result i32)))
  (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "remove" (func $remove (param i32 i32)))
  (import "env" "assert" (func $assert (param i32 i32 i32)))
  (import "env" "require_auth" (func $require_auth (param i64)))
  (import "env" "print" (func $print (param i32 i32)))
  (memory (export "memory") 2 8)
  (global $calls (mut i32) (i32.const 0))
  (data (i32.const 1024) "pristine data in the first page")
  (data (i32.const 70000) "and in the second")
  (func $recurse (param $n i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 0))
      (else (i32.add (i32.const 1) (call $recurse (i32.sub (local.get $n) (i32.const 1)))))))
  (func (export "apply") (param i64 i64 i64)
    (local $len i32) (local $p i32) (local $end i32)
    (local $a i32) (local $b i32) (local $c i32) (local $d i32) (local $h i32) (local $i i32)
    (local.set $len (call $read_message (i32.const 0x18000) (i32.const 0x8000)))
    (local.set $p (i32.const 0x18000))
    (local.set $end (i32.add (i32.const 0x18000)
      (select (local.get $len) (i32.const 0x8000) (i32.lt_u (local.get $len) (i32.const 0x8000)))))
    (block $out
      (loop $next
        (br_if $out (i32.gt_u (i32.add (local.get $p) (i32.const 17)) (local.get $end)))
        (local.set $a (i32.load offset=1 (local.get $p)))
        (local.set $b (i32.load offset=5 (local.get $p)))
        (local.set $c (i32.load offset=9 (local.get $p)))
        (local.set $d (i32.load offset=13 (local.get $p)))
        (block $done
          (block $rec (block $grow (block $copy (block $fill (block $poke
          (block $print (block $auth (block $assert (block $remove (block $store (block $load
          (block $size (block $read
            (br_table $read $size $load $store $remove $assert $auth $print $poke $fill $copy
                      $grow $rec (i32.rem_u (i32.load8_u (local.get $p)) (i32.const 13))))
            (drop (call $read_message (local.get $a) (local.get $b))) (br $done))
            (i32.store (i32.const 64) (call $message_size)) (br $done))
            (drop (call $load (local.get $a) (local.get $b) (local.get $c) (local.get $d))) (br $done))
            (call $store (local.get $a) (local.get $b) (local.get $c) (local.get $d)) (br $done))
            (call $remove (local.get $a) (local.get $b)) (br $done))
            (call $assert (local.get $c) (local.get $a) (local.get $b)) (br $done))
            (call $require_auth (i64.or (i64.extend_i32_u (local.get $a))
                                        (i64.shl (i64.extend_i32_u (local.get $b)) (i64.const 32))))
            (br $done))
            (call $print (local.get $a) (local.get $b)) (br $done))
            (i32.store8 (local.get $a) (local.get $b)) (br $done))
            (memory.fill (local.get $a) (local.get $b) (local.get $c)) (br $done))
            (memory.copy (local.get $a) (local.get $b) (local.get $c)) (br $done))
            (i32.store (i32.const 68) (memory.grow (i32.and (local.get $a) (i32.const 3)))) (br $done))
            (i32.store (i32.const 72) (call $recurse (i32.and (local.get $a) (i32.const 0x3fff)))))
        (local.set $p (i32.add (local.get $p) (i32.const 17)))
        (br $next)))
    ;; the checksum of the whole memory, stored under "sum"
    (local.set $end (i32.mul (memory.size) (i32.const 65536)))
    (local.set $i (i32.const 0))
    (loop $sum
      (local.set $h (i32.add (i32.mul (local.get $h) (i32.const 31)) (i32.load (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br_if $sum (i32.lt_u (local.get $i) (local.get $end))))
    (i32.store (i32.const 0x17ff0) (local.get $h))
    (i32.store (i32.const 0x17ff4) (global.get $calls))
    (i32.store (i32.const 0x17ffc) (i32.const 0x6d7573)) ;; "sum"
    (call $store (i32.const 0x17ffc) (i32.const 3) (i32.const 0x17ff0) (i32.const 8))))"#;

struct Setup {
    runtime: Runtime,
    contract: std::sync::Arc<Contract>,
    /// The state an empty action leaves on a fresh instance.
    pristine: MapHost,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
        let wasm = wat::parse_str(CONTRACT).expect("the contract parses");
        let contract = runtime.prepare(&wasm).expect("the contract deploys");
        let mut pristine = host(Vec::new());
        let receipt = runtime
            .execute(&contract, ENTRY, &mut pristine)
            .expect("no node error");
        assert!(receipt.is_success(), "{receipt:?}");
        Setup {
            runtime,
            contract,
            pristine,
        }
    })
}

const ENTRY: Entry = Entry::Action {
    receiver: Name(1),
    code: Name(1),
    action: Name(2),
};

/// A host with a little state, signed by accounts 1 and 2.
fn host(message: Vec<u8>) -> MapHost {
    let mut host = MapHost {
        message,
        signers: vec![Name(1), Name(2)],
        ..MapHost::default()
    };
    host.state.insert(b"k".to_vec(), b"a value".to_vec());
    host.state.insert(vec![0; 4], vec![7; 300]);
    host
}

fn run(setup: &Setup, message: &[u8]) -> (Receipt, MapHost) {
    let mut host = host(message.to_vec());
    let receipt = setup
        .runtime
        .execute(&setup.contract, ENTRY, &mut host)
        .unwrap_or_else(|e| panic!("a contract made the node fail: {e}"));
    if let Some(abort) = receipt.failure() {
        assert!(
            matches!(
                abort.code,
                AbortCode::BadPointer
                    | AbortCode::LimitExceeded
                    | AbortCode::AssertFailed
                    | AbortCode::Unauthorized
                    | AbortCode::OutOfFuel
                    | AbortCode::StackOverflow
                    | AbortCode::ResourceLimit
                    | AbortCode::Trap
            ),
            "unexpected failure {abort:?}"
        );
    }
    (receipt, host)
}

fn assert_pristine(setup: &Setup) {
    let (receipt, host) = run(setup, &[]);
    assert!(receipt.is_success(), "{receipt:?}");
    assert_eq!(
        host.state, setup.pristine.state,
        "an action's memory or globals leaked into the next one"
    );
}

fuzz_target!(|data: &[u8]| {
    let setup = setup();
    let first = run(setup, data);
    assert_pristine(setup);
    let second = run(setup, data);
    assert_eq!(first.0, second.0, "the same action gave another receipt");
    assert_eq!(first.1, second.1, "the same action wrote another state");
    assert_pristine(setup);
});
