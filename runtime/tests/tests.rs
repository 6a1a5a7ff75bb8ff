//! The runtime's guarantees, each shown with a small inline-WAT contract.

use std::sync::Arc;

use tally_host_api::limits::{FUEL_PER_ACTION, MAX_CALL_DEPTH, MAX_CONSOLE_LEN, MAX_KEY_LEN};
use tally_host_api::testing::MapHost;
use tally_host_api::{Abort, AbortCode, Host, HostError, Name};
use tally_runtime::{
    Contract, DeployError, Entry, EntryPoints, Outcome, PrepareError, Receipt, Runtime,
    RuntimeConfig,
};

/// The shared test host: a sorted map, recording what the action printed.
type TestHost = MapHost;

/// The i32 an action stored under `key` (contracts here store results as little-endian i32).
fn i32_at(host: &TestHost, key: &str) -> i32 {
    let v = &host.state[key.as_bytes()];
    i32::from_le_bytes(v[..4].try_into().unwrap())
}

fn name(s: &str) -> Name {
    s.parse().unwrap()
}

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

/// A contract whose `apply` runs `body`. Memory: one page; bytes 1000.. hold the one-letter
/// keys "r", "m", "k", "s" and "g" and the text "oops"; `$ret` stores an i32 under key "r".
fn contract(body: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module {IMPORTS}
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (data (i32.const 1000) "rmksg")
  (data (i32.const 1010) "oops")
  (func $ret (param i32)
    (i32.store (i32.const 1100) (local.get 0))
    (call $store (i32.const 1000) (i32.const 1) (i32.const 1100) (i32.const 4)))
  (func $recurse (param i32) (result i32)
    (call $recurse (i32.add (local.get 0) (i32.const 1))))
  (func (export "apply") (param i64 i64 i64) {body}))"#
    ))
    .unwrap()
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default()).unwrap()
}

fn call(rt: &Runtime, c: &Contract, host: &mut TestHost) -> Receipt {
    let entry = Entry::Action {
        receiver: name("test"),
        code: name("test"),
        action: name("run"),
    };
    rt.execute(c, entry, host).unwrap()
}

fn run(body: &str, host: &mut TestHost) -> Receipt {
    let rt = runtime();
    let c = rt.prepare(&contract(body)).unwrap();
    call(&rt, &c, host)
}

fn run_module(wasm: &[u8]) -> Receipt {
    let rt = runtime();
    let c = rt.prepare(wasm).unwrap();
    call(&rt, &c, &mut TestHost::default())
}

fn failure(receipt: &Receipt) -> &Abort {
    receipt
        .failure()
        .unwrap_or_else(|| panic!("expected a failure, got {receipt:?}"))
}

#[test]
fn read_message_copies_up_to_len_and_returns_full_length() {
    let mut host = TestHost {
        message: b"hello world".to_vec(),
        ..Default::default()
    };
    let r = run(
        "(call $ret (call $read_message (i32.const 0) (i32.const 5)))
         (call $store (i32.const 1001) (i32.const 1) (i32.const 0) (i32.const 8))",
        &mut host,
    );
    assert!(r.is_success(), "{r:?}");
    assert_eq!(i32_at(&host, "r"), 11);
    assert_eq!(host.state[&b"m"[..]], b"hello\0\0\0");
}

#[test]
fn message_size_returns_full_length() {
    let mut host = TestHost {
        message: vec![7; 300],
        ..Default::default()
    };
    assert!(run("(call $ret (call $message_size))", &mut host).is_success());
    assert_eq!(i32_at(&host, "r"), 300);
}

#[test]
fn load_returns_minus_one_for_missing_key() {
    let mut host = TestHost::default();
    assert!(
        run(
            "(call $ret (call $load (i32.const 1002) (i32.const 1) (i32.const 0) (i32.const 8)))",
            &mut host
        )
        .is_success()
    );
    assert_eq!(i32_at(&host, "r"), -1);
}

#[test]
fn load_copies_a_prefix_and_returns_the_full_length() {
    let mut host = TestHost::default();
    host.state.insert(b"k".to_vec(), b"0123456789".to_vec());
    let r = run(
        "(call $ret (call $load (i32.const 1002) (i32.const 1) (i32.const 0) (i32.const 4)))
         (call $store (i32.const 1001) (i32.const 1) (i32.const 0) (i32.const 6))",
        &mut host,
    );
    assert!(r.is_success(), "{r:?}");
    assert_eq!(i32_at(&host, "r"), 10);
    assert_eq!(host.state[&b"m"[..]], b"0123\0\0");
}

#[test]
fn store_and_remove_change_the_hosts_state() {
    let mut host = TestHost::default();
    host.state.insert(b"s".to_vec(), b"old".to_vec());
    let r = run(
        "(call $store (i32.const 1002) (i32.const 1) (i32.const 1010) (i32.const 4))
         (call $remove (i32.const 1003) (i32.const 1))",
        &mut host,
    );
    assert!(r.is_success(), "{r:?}");
    assert_eq!(
        host.state.get(&b"k"[..]).map(Vec::as_slice),
        Some(&b"oops"[..])
    );
    assert!(!host.state.contains_key(&b"s"[..]));
}

#[test]
fn assert_passes_on_true_and_aborts_with_the_message_on_false() {
    let mut host = TestHost::default();
    assert!(
        run(
            "(call $assert (i32.const 1) (i32.const 1010) (i32.const 4))",
            &mut host
        )
        .is_success()
    );
    let r = run(
        "(call $assert (i32.const 0) (i32.const 1010) (i32.const 4))",
        &mut host,
    );
    assert_eq!(failure(&r), &Abort::new(AbortCode::AssertFailed, "oops"));
}

#[test]
fn require_auth_passes_only_for_authorizing_accounts() {
    let alice = name("alice");
    let body = format!("(call $require_auth (i64.const {}))", alice.0 as i64);
    let mut host = TestHost {
        signers: vec![alice],
        ..Default::default()
    };
    assert!(run(&body, &mut host).is_success());
    let mut host = TestHost {
        signers: vec![name("bob")],
        ..Default::default()
    };
    let r = run(&body, &mut host);
    assert_eq!(failure(&r).code, AbortCode::Unauthorized);
    assert!(failure(&r).message.contains("alice"), "{r:?}");
}

#[test]
fn print_goes_to_the_receipt_and_the_host() {
    let mut host = TestHost::default();
    let r = run("(call $print (i32.const 1010) (i32.const 4))", &mut host);
    assert!(r.is_success());
    assert_eq!(r.console, b"oops");
    assert_eq!(host.printed, b"oops");
}

#[test]
fn console_flood_aborts_the_action() {
    let mut host = TestHost::default();
    let r = run(
        "(loop $l (call $print (i32.const 0) (i32.const 1000)) (br $l))",
        &mut host,
    );
    let abort = failure(&r);
    assert_eq!(abort.code, AbortCode::LimitExceeded, "{abort}");
    assert!(r.console.len() <= MAX_CONSOLE_LEN as usize);
}

#[test]
fn every_host_function_rejects_out_of_range_pointers() {
    // 65536 is one past the end of the one-page memory; -1 is 0xffffffff as a pointer.
    let cases = [
        "(drop (call $read_message (i32.const 65530) (i32.const 10)))",
        "(drop (call $read_message (i32.const -1) (i32.const 2)))",
        "(drop (call $load (i32.const 65536) (i32.const 1) (i32.const 0) (i32.const 1)))",
        "(drop (call $load (i32.const 1002) (i32.const 1) (i32.const 65535) (i32.const 2)))",
        "(call $store (i32.const 65536) (i32.const 1) (i32.const 0) (i32.const 1))",
        "(call $store (i32.const 1002) (i32.const 1) (i32.const -4) (i32.const 8))",
        "(call $remove (i32.const 65536) (i32.const 1))",
        "(call $assert (i32.const 0) (i32.const 65536) (i32.const 4))",
        "(call $print (i32.const 65535) (i32.const 2))",
    ];
    for body in cases {
        let mut host = TestHost {
            message: vec![1; 20],
            ..Default::default()
        };
        let r = run(body, &mut host);
        assert_eq!(failure(&r).code, AbortCode::BadPointer, "{body}: {r:?}");
        assert!(host.state.is_empty(), "{body} wrote state");
    }
}

#[test]
fn negative_and_oversized_lengths_are_rejected() {
    let cases = [
        (
            "(drop (call $read_message (i32.const 0) (i32.const -1)))",
            AbortCode::BadPointer,
        ),
        (
            "(call $store (i32.const 0) (i32.const -5) (i32.const 0) (i32.const 1))",
            AbortCode::BadPointer,
        ),
        (
            "(call $remove (i32.const 0) (i32.const -1))",
            AbortCode::BadPointer,
        ),
        (
            &*format!(
                "(call $store (i32.const 0) (i32.const {}) (i32.const 0) (i32.const 1))",
                MAX_KEY_LEN + 1
            ),
            AbortCode::LimitExceeded,
        ),
        (
            "(call $store (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 65537))",
            AbortCode::LimitExceeded,
        ),
    ];
    for (body, code) in cases {
        let mut host = TestHost::default();
        let r = run(body, &mut host);
        assert_eq!(failure(&r).code, code, "{body}: {r:?}");
    }
}

#[test]
fn an_infinite_loop_runs_out_of_fuel() {
    let r = run("(loop $l (br $l))", &mut TestHost::default());
    assert_eq!(failure(&r).code, AbortCode::OutOfFuel);
    assert_eq!(r.fuel_used, FUEL_PER_ACTION);
}

#[test]
fn fuel_use_is_deterministic() {
    let body = "(call $ret (call $message_size))";
    let a = run(body, &mut TestHost::default());
    let b = run(body, &mut TestHost::default());
    assert!(a.fuel_used > 0);
    assert_eq!(a, b);
}

#[test]
fn traps_and_stack_overflow_are_failed_receipts() {
    let r = run("unreachable", &mut TestHost::default());
    assert_eq!(
        failure(&r),
        &Abort::new(AbortCode::Trap, "unreachable executed")
    );
    let r = run(
        "(drop (i32.div_u (i32.const 1) (i32.const 0)))",
        &mut TestHost::default(),
    );
    assert_eq!(failure(&r).code, AbortCode::Trap);
    let r = run(
        "(drop (call $recurse (i32.const 0)))",
        &mut TestHost::default(),
    );
    assert_eq!(failure(&r).code, AbortCode::StackOverflow);
}

/// A contract that keeps a stack the way clang and rustc do: global 0 starts at the top of a
/// 1 KiB stack at the bottom of memory (`--stack-first`) and each call of `$frame` takes
/// 256 bytes of it. `apply` runs `body`.
fn stack_first_contract(body: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module {IMPORTS}
  (memory (export "memory") 1)
  (global $sp (mut i32) (i32.const 1024))
  (func $frame (param $depth i32)
    (global.set $sp (i32.sub (global.get $sp) (i32.const 256)))
    (i64.store (global.get $sp) (i64.const 7))
    (if (local.get $depth)
      (then (call $frame (i32.sub (local.get $depth) (i32.const 1)))))
    (global.set $sp (i32.add (global.get $sp) (i32.const 256))))
  (func (export "apply") (param i64 i64 i64) {body}))"#
    ))
    .unwrap()
}

#[test]
fn issue_23_a_stack_that_runs_out_is_named_a_stack_overflow_not_a_bad_pointer() {
    // Three frames fit in the 1 KiB stack; five run its pointer below 0, where it wraps past
    // the memory and the frame's first store traps.
    let r = run_module(&stack_first_contract("(call $frame (i32.const 2))"));
    assert!(r.is_success(), "{r:?}");
    let r = run_module(&stack_first_contract("(call $frame (i32.const 4))"));
    let abort = failure(&r);
    assert_eq!(abort.code, AbortCode::StackOverflow, "{abort}");
    assert!(
        abort
            .message
            .contains("stack (the first 1024 bytes of its memory) ran out"),
        "{abort}"
    );
    // A host call given a pointer into the wrapped stack: a bad pointer to the host, and a
    // stack overflow to the author.
    let r = run_module(&stack_first_contract(
        "(global.set $sp (i32.sub (global.get $sp) (i32.const 2048)))
         (drop (call $read_message (global.get $sp) (i32.const 8)))",
    ));
    assert_eq!(failure(&r).code, AbortCode::StackOverflow, "{r:?}");
    // A wild access with the stack where it belongs stays what it is.
    let r = run_module(&stack_first_contract(
        "(i32.store (i32.const 0x7fff0000) (i32.const 1))",
    ));
    assert_eq!(
        failure(&r),
        &Abort::new(AbortCode::Trap, "out-of-bounds memory access")
    );
    // So does one in a module whose global 0 counts something rather than a stack.
    let r = run(
        "(global.set $g (i32.const 5)) (i32.store (i32.const -4) (i32.const 1))",
        &mut TestHost::default(),
    );
    assert_eq!(failure(&r).code, AbortCode::Trap, "{r:?}");
}

#[test]
fn nans_are_canonical() {
    // A NaN with a payload, through an arithmetic op: x86 would keep the payload
    // (0x7fe00001); canonicalisation makes every CPU produce 0x7fc00000.
    let mut host = TestHost::default();
    let r = run(
        "(call $ret (i32.reinterpret_f32 (f32.add
            (f32.reinterpret_i32 (i32.const 0x7fa00001)) (f32.const 1))))",
        &mut host,
    );
    assert!(r.is_success(), "{r:?}");
    assert_eq!(i32_at(&host, "r") as u32, 0x7fc0_0000);
}

/// Reads byte 500 and the global, reports them, then dirties both (and the table of memory
/// around them) before maybe trapping.
fn dirtying_contract() -> Vec<u8> {
    contract(
        "(call $ret (i32.add (i32.load (i32.const 500)) (global.get $g)))
         (i32.store (i32.const 500) (i32.const 41))
         (global.set $g (i32.const 1))
         (drop (memory.grow (i32.const 1)))
         (if (i32.eq (call $message_size) (i32.const 1)) (then unreachable))",
    )
}

#[test]
fn an_action_cannot_see_memory_or_globals_of_the_previous_action() {
    let rt = runtime();
    let c = rt.prepare(&dirtying_contract()).unwrap();
    for _ in 0..3 {
        let mut host = TestHost::default();
        assert!(call(&rt, &c, &mut host).is_success());
        assert_eq!(
            i32_at(&host, "r"),
            0,
            "saw a previous action's memory or global"
        );
    }
}

#[test]
fn an_action_after_a_trap_starts_pristine() {
    let rt = runtime();
    let c = rt.prepare(&dirtying_contract()).unwrap();
    let mut trapping = TestHost {
        message: vec![1],
        ..Default::default()
    };
    assert_eq!(failure(&call(&rt, &c, &mut trapping)).code, AbortCode::Trap);
    let mut host = TestHost::default();
    assert!(call(&rt, &c, &mut host).is_success());
    assert_eq!(i32_at(&host, "r"), 0);
}

/// Stores under key "r" whether every mutable global holds its initial value (1 or 0), then
/// changes them all, and traps when the message is one byte long.
const EVERY_GLOBAL: &str = r#"(module
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "message_size" (func $message_size (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "r")
  (global $a (mut i32) (i32.const 7))
  (global $b (mut i64) (i64.add (i64.const -10) (i64.const 2)))
  (global $c (mut f64) (f64.const 1.5))
  (global $d (mut v128) (v128.const i64x2 3 4))
  (global $e (mut funcref) (ref.func $f))
  (global $fixed i32 (i32.const 5))
  (func $f)
  (func (export "apply") (param i64 i64 i64)
    (i32.store (i32.const 8)
      (i32.and
        (i32.and
          (i32.and (i32.eq (global.get $a) (i32.const 7)) (i64.eq (global.get $b) (i64.const -8)))
          (i32.and (f64.eq (global.get $c) (f64.const 1.5))
                   (i64x2.all_true (i64x2.eq (global.get $d) (v128.const i64x2 3 4)))))
        (i32.eqz (ref.is_null (global.get $e)))))
    (call $store (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 4))
    (global.set $a (i32.const 0))
    (global.set $b (i64.const 0))
    (global.set $c (f64.const 0))
    (global.set $d (v128.const i64x2 0 0))
    (global.set $e (ref.null func))
    (if (i32.eq (call $message_size) (i32.const 1)) (then unreachable))))"#;

#[test]
fn issue_22_every_action_starts_with_every_global_at_its_initial_value() {
    let rt = runtime();
    let c = rt.prepare(&wat::parse_str(EVERY_GLOBAL).unwrap()).unwrap();
    for message in [vec![], vec![1], vec![], vec![1], vec![]] {
        let mut host = TestHost {
            message: message.clone(),
            ..Default::default()
        };
        let r = call(&rt, &c, &mut host);
        assert_eq!(r.is_success(), message.is_empty(), "{r:?}");
        assert_eq!(
            i32_at(&host, "r"),
            1,
            "a global kept a previous action's value"
        );
    }
    assert_eq!(rt.instantiations(), 1);
}

const LEGACY: &str = r#"(module
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "initxfer")
  (func (export "onInit") (call $store (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 4)))
  (func (export "onApply_Transfer_simplecoin")
    (call $store (i32.const 4) (i32.const 4) (i32.const 4) (i32.const 4))))"#;

#[test]
fn legacy_handlers_resolve_to_names_at_deploy() {
    let rt = runtime();
    let c = rt.prepare(&wat::parse_str(LEGACY).unwrap()).unwrap();
    let EntryPoints::Legacy(handlers) = &c.info().entry else {
        panic!("expected 2017 dispatch");
    };
    assert_eq!(handlers.len(), 1);
    assert_eq!(handlers[0].action, name("transfer"));
    assert_eq!(handlers[0].code, name("simplecoin"));
    assert!(c.info().has_init);

    let mut host = TestHost::default();
    assert!(rt.execute(&c, Entry::Init, &mut host).unwrap().is_success());
    let transfer = Entry::Action {
        receiver: name("simplecoin"),
        code: name("simplecoin"),
        action: name("transfer"),
    };
    assert!(rt.execute(&c, transfer, &mut host).unwrap().is_success());
    assert_eq!(host.state.keys().count(), 2);

    let other = Entry::Action {
        receiver: name("simplecoin"),
        code: name("simplecoin"),
        action: name("issue"),
    };
    let r = rt.execute(&c, other, &mut host).unwrap();
    assert_eq!(failure(&r).code, AbortCode::NoHandler);
}

/// Why `wasm` is rejected; panics if it is accepted or the node failed.
fn rejection(rt: &Runtime, wasm: &[u8]) -> DeployError {
    match rt.prepare(wasm) {
        Err(PrepareError::Rejected(e)) => e,
        Err(PrepareError::Node(e)) => panic!("node fault instead of a rejection: {e}"),
        Ok(_) => panic!("deploy should fail"),
    }
}

fn deploy_error(wat: &str) -> DeployError {
    rejection(&runtime(), &wat::parse_str(wat).unwrap())
}

#[test]
fn deploy_rejects_modules_that_break_the_rules() {
    let apply = r#"(memory (export "memory") 1) (func (export "apply") (param i64 i64 i64))"#;
    type Expect = fn(&DeployError) -> bool;
    let cases: Vec<(String, Expect)> = vec![
        (
            format!(r#"(module (import "env" "read_db" (func)) {apply})"#),
            |e| matches!(e, DeployError::UnknownImport { name, .. } if name == "read_db"),
        ),
        (
            format!(r#"(module (import "wasi" "load" (func)) {apply})"#),
            |e| matches!(e, DeployError::UnknownImport { module, .. } if module == "wasi"),
        ),
        (
            format!(r#"(module (import "env" "load" (func (param i32))) {apply})"#),
            |e| matches!(e, DeployError::ImportSignature { name, .. } if name == "load"),
        ),
        (
            format!(
                r#"(module (import "env" "remove" (func (param i32 i32)))
                   (import "env" "remove" (func (param i32 i32))) {apply})"#
            ),
            |e| matches!(e, DeployError::DuplicateImport(n) if n == "remove"),
        ),
        (
            r#"(module (memory (export "memory") 1))"#.into(),
            |e| matches!(e, DeployError::NoEntryPoint),
        ),
        (
            r#"(module (func (export "apply") (param i64 i64 i64)))"#.into(),
            |e| matches!(e, DeployError::NoMemory),
        ),
        (
            r#"(module (memory (export "memory") 1) (func (export "apply") (param i32)))"#.into(),
            |e| matches!(e, DeployError::EntrySignature { .. }),
        ),
        (
            format!(r#"(module {apply} (func $s) (start $s))"#),
            |e| matches!(e, DeployError::StartFunction),
        ),
        (
            r#"(module (memory (export "memory") 513) (func (export "apply") (param i64 i64 i64)))"#.into(),
            |e| matches!(e, DeployError::TooMany { what: "initial memory pages", .. }),
        ),
        (
            r#"(module (memory (export "memory") 1) (func (export "onApply_Bad-Name_x")))"#.into(),
            |e| matches!(e, DeployError::BadHandlerName { .. }),
        ),
        (
            r#"(module (memory (export "memory") 1) (data (i32.const 65530) "0123456789")
               (func (export "apply") (param i64 i64 i64)))"#.into(),
            |e| matches!(e, DeployError::Instantiate(_)),
        ),
    ];
    for (wat, expected) in cases {
        let err = deploy_error(&wat);
        assert!(expected(&err), "{wat}\n => {err}");
    }
    let err = rejection(&runtime(), b"\0asm garbage");
    assert!(matches!(err, DeployError::Invalid(_)), "{err}");
    let huge = vec![0u8; tally_host_api::limits::MAX_MODULE_SIZE + 1];
    assert!(matches!(
        rejection(&runtime(), &huge),
        DeployError::TooLarge { .. }
    ));
}

/// A runtime caching in `dir`, with its key in `dir`'s sibling `<dir>.key` (never inside
/// the cache directory, which the runtime refuses).
fn cached_runtime(dir: &std::path::Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        cache_key: Some(dir.with_extension("key")),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn works(rt: &Runtime, c: &Arc<Contract>) {
    let mut host = TestHost::default();
    assert!(call(rt, c, &mut host).is_success());
    assert_eq!(i32_at(&host, "r"), 5);
}

#[test]
fn a_rebuilt_runtime_loads_from_the_disk_cache_without_recompiling() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    let code = contract("(call $ret (i32.const 5))");
    let first = cached_runtime(&dir);
    works(&first, &first.prepare(&code).unwrap());
    assert_eq!(first.cache_stats().compiles, 1);
    first.prepare(&code).unwrap();
    assert_eq!(first.cache_stats().memory_hits, 1);
    drop(first);

    let second = cached_runtime(&dir);
    let c = second.prepare(&code).unwrap();
    let stats = second.cache_stats();
    assert_eq!((stats.compiles, stats.disk_hits), (0, 1), "{stats:?}");
    works(&second, &c);
}

#[test]
fn a_corrupt_or_truncated_cache_file_is_recompiled_and_rewritten() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    let code = contract("(call $ret (i32.const 5))");
    cached_runtime(&dir).prepare(&code).unwrap();
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a cache file");
    let good = std::fs::read(&file).unwrap();

    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    for bad in [
        flipped,
        good[..good.len() / 3].to_vec(),
        Vec::new(),
        b"TALLYMOD".to_vec(),
    ] {
        std::fs::write(&file, &bad).unwrap();
        let rt = cached_runtime(&dir);
        let c = rt.prepare(&code).unwrap();
        let stats = rt.cache_stats();
        assert_eq!((stats.compiles, stats.disk_rejected), (1, 1), "{stats:?}");
        works(&rt, &c);
        // The entry was rewritten: the next runtime loads it.
        let again = cached_runtime(&dir);
        again.prepare(&code).unwrap();
        assert_eq!(again.cache_stats().disk_hits, 1);
    }
}

#[test]
fn outcome_failure_is_not_an_error() {
    let r = run("unreachable", &mut TestHost::default());
    assert!(matches!(r.outcome, Outcome::Failure(_)));
}

/// Mode 0 stores under "h" a hash of every byte of memory and of every mutable global. Modes
/// 1-3 write memory in every way wasm and the host can (each store width, SIMD stores and
/// lanes, `memory.fill`/`copy`/`init`, `read_message` and `load` into guest memory) and set
/// every global; mode 2 then traps and mode 3 then runs out of fuel.
const EVERY_WRITE: &str = r#"(module
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (memory (export "memory") 1)
  (global $a (mut i32) (i32.const 11))
  (global $b (mut i64) (i64.const 12))
  (global $c (mut f64) (f64.const 13))
  (data (i32.const 16) "h")
  (data (i32.const 32) "pristine data segment")
  (data $passive "passive")
  (func (export "apply") (param i64 i64 i64) (local $i i32) (local $h i64)
    (drop (call $read_message (i32.const 0) (i32.const 1)))
    (if (i32.eqz (i32.load8_u (i32.const 0)))
      (then
        ;; byte 0 now holds the mode (0), written by the host; hash everything.
        (loop $next
          (local.set $h (i64.add (i64.mul (local.get $h) (i64.const 1099511628211))
                                 (i64.load (local.get $i))))
          (local.set $i (i32.add (local.get $i) (i32.const 8)))
          (br_if $next (i32.lt_u (local.get $i) (i32.const 65536))))
        (local.set $h (i64.add (local.get $h) (i64.extend_i32_u (global.get $a))))
        (local.set $h (i64.add (local.get $h) (global.get $b)))
        (local.set $h (i64.add (local.get $h) (i64.trunc_f64_s (global.get $c))))
        (i64.store (i32.const 8) (local.get $h))
        (call $store (i32.const 16) (i32.const 1) (i32.const 8) (i32.const 8))
        (return)))
    (i32.store (i32.const 100) (i32.const -1))
    (i32.store8 offset=7 (i32.const 200) (i32.const 1))
    (i32.store16 (i32.const 301) (i32.const 2))
    (i64.store (i32.const 400) (i64.const -1))
    (i64.store8 (i32.const 500) (i64.const 3))
    (i64.store16 (i32.const 600) (i64.const 4))
    (i64.store32 (i32.const 700) (i64.const 5))
    (f32.store (i32.const 800) (f32.const 6))
    (f64.store (i32.const 900) (f64.const 7))
    (v128.store (i32.const 1000) (v128.const i64x2 -1 -1))
    (v128.store8_lane 3 (i32.const 1100) (v128.const i64x2 -1 -1))
    (v128.store64_lane 1 (i32.const 1200) (v128.const i64x2 -1 -1))
    (memory.fill (i32.const 2000) (i32.const 255) (i32.const 3000))
    (memory.copy (i32.const 40000) (i32.const 32) (i32.const 21))
    (memory.init $passive (i32.const 50000) (i32.const 0) (i32.const 7))
    ;; the host writes: the message and a loaded value, above every write above
    (drop (call $read_message (i32.const 61000) (i32.const 1)))
    (drop (call $load (i32.const 16) (i32.const 1) (i32.const 62000) (i32.const 8)))
    (global.set $a (i32.const 0))
    (global.set $b (i64.const 0))
    (global.set $c (f64.const 0))
    (if (i32.eq (i32.load8_u (i32.const 0)) (i32.const 2)) (then unreachable))
    (if (i32.eq (i32.load8_u (i32.const 0)) (i32.const 3)) (then (loop $spin (br $spin))))))"#;

#[test]
fn a_reused_instance_is_restored_after_every_kind_of_write() {
    let rt = runtime();
    let c = rt.prepare(&wat::parse_str(EVERY_WRITE).unwrap()).unwrap();
    let mut host = TestHost::default();
    let hash = |host: &mut TestHost| {
        host.message = vec![0];
        assert!(call(&rt, &c, host).is_success());
        host.state[b"h".as_slice()].clone()
    };
    let pristine = hash(&mut host);
    for mode in [1u8, 2, 3, 1] {
        host.message = vec![mode];
        let receipt = call(&rt, &c, &mut host);
        assert_eq!(receipt.is_success(), mode == 1, "mode {mode}: {receipt:?}");
        assert_eq!(hash(&mut host), pristine, "state leaked after mode {mode}");
    }
    // Nine actions, and still the one instance made at deploy.
    assert_eq!(rt.instantiations(), 1);
}

#[test]
fn a_module_that_mutates_its_table_gets_a_fresh_instance_per_action() {
    let wat = format!(
        r#"(module {IMPORTS}
      (memory (export "memory") 1)
      (table $t 2 funcref)
      (func $one (result i32) (i32.const 1))
      (elem declare func $one)
      (type $r (func (result i32)))
      (func (export "apply") (param i64 i64 i64)
        ;; reports whether slot 0 is set, then sets it
        (i32.store (i32.const 0) (i32.eqz (ref.is_null (table.get $t (i32.const 0)))))
        (call $store (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 4))
        (table.set $t (i32.const 0) (ref.func $one))))"#
    );
    let rt = runtime();
    let c = rt.prepare(&wat::parse_str(wat).unwrap()).unwrap();
    for _ in 0..3 {
        let mut host = TestHost::default();
        assert!(call(&rt, &c, &mut host).is_success());
        assert_eq!(host.state[[0u8].as_slice()], vec![0, 0, 0, 0]);
    }
    assert_eq!(rt.instantiations(), 4);
}

// ---------------------------------------------------------------------------------------
// Issue 10: compile bombs are refused before anything is compiled.

/// `count` copies of `item`, space-separated.
fn repeat(item: &str, count: usize) -> String {
    vec![item; count].join(" ")
}

/// A module with an empty `apply` and `extra` (functions, types, globals…) besides.
fn with_apply(extra: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module (memory (export "memory") 1)
             (func (export "apply") (param i64 i64 i64))
             {extra})"#
    ))
    .unwrap()
}

/// `functions` functions of type `apply` (the first exported as `apply`), each declaring
/// `locals` unused i64 locals.
fn locals_bomb(functions: usize, locals: u32) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, MemorySection,
        MemoryType, Module, TypeSection, ValType,
    };
    let mut types = TypeSection::new();
    types.ty().function([ValType::I64; 3], []);
    let mut function_section = FunctionSection::new();
    let mut code = CodeSection::new();
    for _ in 0..functions {
        function_section.function(0);
        let mut f = Function::new([(locals, ValType::I64)]);
        f.instruction(&wasm_encoder::Instruction::End);
        code.function(&f);
    }
    let mut memory = MemorySection::new();
    memory.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("apply", ExportKind::Func, 0);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&function_section)
        .section(&memory)
        .section(&exports)
        .section(&code);
    module.finish()
}

#[test]
fn issue_10_the_locals_compile_bomb_is_refused_without_compiling() {
    use tally_host_api::limits::{MAX_FUNCTION_LOCALS, MAX_FUNCTIONS};
    let rt = runtime();
    // The reported bomb: 20,000 functions of ~50,000 locals, ~160 KB that took ~90 s to
    // compile. Its function count alone is now over the limit.
    let bomb = locals_bomb(20_000, 49_990);
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    let err = rejection(&rt, &bomb);
    assert!(
        matches!(
            err,
            DeployError::TooMany {
                what: "functions",
                ..
            }
        ),
        "{err}"
    );
    // As many functions as allowed, each with the most locals wasmparser accepts.
    let err = rejection(&rt, &locals_bomb(MAX_FUNCTIONS, 49_990));
    assert!(
        matches!(
            err,
            DeployError::FunctionLimit {
                what: "locals",
                count: 49_990,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(rt.cache_stats().compiles, 0);
    // At the per-function limit, the total limit stops it.
    let err = rejection(&rt, &locals_bomb(MAX_FUNCTIONS, MAX_FUNCTION_LOCALS));
    assert!(
        matches!(
            err,
            DeployError::TooMany {
                what: "locals in all functions",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(rt.cache_stats().compiles, 0);
}

#[test]
fn issue_10_every_compile_cost_limit_is_enforced_with_a_precise_error() {
    use tally_host_api::limits::*;
    let nested =
        |depth: usize| format!("(func {} {})", repeat("block", depth), repeat("end", depth));
    let targets = |n: usize| {
        format!(
            "(func (block (br_table {} (i32.const 0))))",
            repeat("0", n + 1)
        )
    };
    type Expect = fn(&DeployError) -> bool;
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "locals per function",
            format!(
                "(func (local {}))",
                repeat("i32", MAX_FUNCTION_LOCALS as usize + 1)
            ),
            |e| matches!(e, DeployError::FunctionLimit { what: "locals", .. }),
        ),
        (
            "locals in all functions",
            repeat(
                &format!(
                    "(func (local {}))",
                    repeat("i64", MAX_FUNCTION_LOCALS as usize)
                ),
                (MAX_TOTAL_LOCALS / u64::from(MAX_FUNCTION_LOCALS)) as usize + 1,
            ),
            |e| {
                matches!(
                    e,
                    DeployError::TooMany {
                        what: "locals in all functions",
                        ..
                    }
                )
            },
        ),
        (
            "body bytes",
            format!("(func {})", repeat("nop", MAX_FUNCTION_BODY_SIZE + 1)),
            |e| {
                matches!(
                    e,
                    DeployError::FunctionLimit {
                        what: "body bytes",
                        ..
                    }
                )
            },
        ),
        (
            "code bytes",
            repeat(
                &format!("(func {})", repeat("nop", MAX_FUNCTION_BODY_SIZE - 16)),
                MAX_CODE_SIZE / MAX_FUNCTION_BODY_SIZE + 1,
            ),
            |e| {
                matches!(
                    e,
                    DeployError::TooMany {
                        what: "code bytes",
                        ..
                    }
                )
            },
        ),
        (
            "nesting depth",
            nested(MAX_NESTING_DEPTH as usize + 1),
            |e| {
                matches!(
                    e,
                    DeployError::FunctionLimit {
                        what: "nesting depth",
                        ..
                    }
                )
            },
        ),
        (
            "blocks per function",
            format!(
                "(func {})",
                repeat("block end", MAX_BLOCKS_PER_FUNCTION as usize + 1)
            ),
            |e| matches!(e, DeployError::FunctionLimit { what: "blocks", .. }),
        ),
        (
            "br_table targets",
            targets(MAX_BR_TABLE_TARGETS as usize + 1),
            |e| {
                matches!(
                    e,
                    DeployError::FunctionLimit {
                        what: "br_table targets",
                        ..
                    }
                )
            },
        ),
        (
            "operand stack",
            format!(
                "(func {} {})",
                repeat("i32.const 1", MAX_OPERAND_STACK as usize + 1),
                repeat("drop", MAX_OPERAND_STACK as usize + 1)
            ),
            |e| {
                matches!(
                    e,
                    DeployError::FunctionLimit {
                        what: "operand stack values",
                        ..
                    }
                )
            },
        ),
        (
            "parameters",
            format!("(func (param {}))", repeat("i32", MAX_FUNCTION_PARAMS + 1)),
            |e| {
                matches!(
                    e,
                    DeployError::TooMany {
                        what: "parameters of a function type",
                        ..
                    }
                )
            },
        ),
        (
            "results",
            "(func (result i32 i32) i32.const 1 i32.const 2)".into(),
            |e| {
                matches!(
                    e,
                    DeployError::TooMany {
                        what: "results of a function type",
                        ..
                    }
                )
            },
        ),
        (
            "types",
            repeat("(type (func (param i32)))", MAX_TYPES + 1),
            |e| matches!(e, DeployError::TooMany { what: "types", .. }),
        ),
        (
            "constant expression",
            format!(
                "(global i32 (i32.const 0) {})",
                repeat("i32.const 1 i32.add", MAX_CONST_EXPR_OPS / 2)
            ),
            |e| {
                matches!(
                    e,
                    DeployError::TooMany {
                        what: "operators in a constant expression",
                        ..
                    }
                )
            },
        ),
        (
            "data segments",
            repeat("(data (i32.const 0) \"x\")", MAX_DATA_SEGMENTS + 1),
            |e| {
                matches!(
                    e,
                    DeployError::TooMany {
                        what: "data segments",
                        ..
                    }
                )
            },
        ),
        ("tail calls", "(func $f return_call $f)".into(), |e| {
            matches!(e, DeployError::Invalid(_))
        }),
    ];
    let rt = runtime();
    for (what, extra, expected) in cases {
        let err = rejection(&rt, &with_apply(&extra));
        assert!(expected(&err), "{what}: {err}");
    }
    assert_eq!(rt.cache_stats().compiles, 0);
    // Exactly at each limit, a module deploys.
    let at_limits = [
        format!(
            "(func (local {}))",
            repeat("i32", MAX_FUNCTION_LOCALS as usize)
        ),
        nested(MAX_NESTING_DEPTH as usize),
        targets(MAX_BR_TABLE_TARGETS as usize),
        format!("(func (param {}))", repeat("i32", MAX_FUNCTION_PARAMS)),
    ];
    for extra in at_limits {
        rt.prepare(&with_apply(&extra))
            .unwrap_or_else(|e| panic!("{extra:.80}: {e}"));
    }
}

#[test]
fn deploy_errors_have_stable_codes_and_reasons_without_engine_text() {
    let rt = runtime();
    let garbage = rejection(&rt, b"\0asm\x01\0\0\0garbage");
    let DeployError::Invalid(detail) = &garbage else {
        panic!("{garbage}");
    };
    assert!(!detail.is_empty());
    assert_eq!(garbage.code(), 2);
    assert_eq!(
        garbage.reason(),
        "invalid WebAssembly, or a feature contracts may not use"
    );
    let oob = deploy_error(
        r#"(module (memory (export "memory") 1) (data (i32.const 65530) "0123456789")
           (func (export "apply") (param i64 i64 i64)))"#,
    );
    assert_eq!(oob.reason(), "the module cannot be instantiated");
    let long = "x".repeat(10_000);
    let unknown = deploy_error(&format!(
        r#"(module (import "env" "{long}" (func)) (memory (export "memory") 1)
           (func (export "apply") (param i64 i64 i64)))"#
    ));
    assert_eq!(unknown.code(), 3);
    assert!(unknown.reason().len() < 200, "{}", unknown.reason());
}

// ---------------------------------------------------------------------------------------
// Issue 10: instantiation runs with its own fuel budget.

#[test]
fn issue_10_modules_whose_instantiation_runs_code_deploy_and_run() {
    let shapes = [
        (
            "funcref global",
            r#"(global $g funcref (ref.func $five)) (elem declare func $five)
               (func $five (result i32) (i32.const 5))
               (table 1 funcref)
               (func (export "apply") (param i64 i64 i64)
                 (call $ret (call_ref_five)))"#,
        ),
        (
            "extended-const global",
            r#"(global $g i32 (i32.add (i32.const 3) (i32.const 2)))
               (func (export "apply") (param i64 i64 i64) (call $ret (global.get $g)))"#,
        ),
        (
            "data at a computed offset",
            r#"(data (i32.add (i32.const 1990) (i32.const 10)) "\05\00\00\00")
               (func (export "apply") (param i64 i64 i64) (call $ret (i32.load (i32.const 2000))))"#,
        ),
    ];
    for (what, body) in shapes {
        // The funcref shape reads the global through a table slot it sets from it.
        let body = body.replace(
            "(call_ref_five)",
            "(table.set (i32.const 0) (global.get $g)) (call_indirect (result i32) (i32.const 0))",
        );
        let wat = format!(
            r#"(module {IMPORTS}
              (memory (export "memory") 1)
              (func $ret (param i32)
                (i32.store (i32.const 1100) (local.get 0))
                (call $store (i32.const 1000) (i32.const 1) (i32.const 1100) (i32.const 4)))
              (data (i32.const 1000) "r")
              {body})"#
        );
        let rt = runtime();
        let c = rt
            .prepare(&wat::parse_str(&wat).unwrap())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        for _ in 0..2 {
            let mut host = TestHost::default();
            let r = call(&rt, &c, &mut host);
            assert!(r.is_success(), "{what}: {r:?}");
            assert_eq!(i32_at(&host, "r"), 5, "{what}");
        }
    }
    // `global.get` of a global the module defines is WebAssembly 3.0 (the GC proposal), which
    // uploads may not use: refused at validation, never at instantiation.
    let err = deploy_error(
        r#"(module (memory (export "memory") 1) (global $at i32 (i32.const 8))
             (data (global.get $at) "x") (func (export "apply") (param i64 i64 i64)))"#,
    );
    assert!(matches!(err, DeployError::Invalid(_)), "{err}");
}

// ---------------------------------------------------------------------------------------
// Issue 10: the call stack is exhausted at the same depth on every node.

/// `apply` reads (limit, mode) from the message and recurses from depth 1, storing each depth
/// under key "d", until depth == limit (-1: never). Mode 0 recurses through `$plain`, mode 1
/// through `$spilly`: the same accounted frame (one param, 16 i64 locals, at most four
/// operands), but `$spilly` keeps all 16 locals live across its call, so its native frame is
/// larger.
fn recursion_contract() -> Vec<u8> {
    let locals = repeat("i64", 16);
    let sets: String = (0..16)
        .map(|i| {
            format!(
                "(local.set {} (i64.extend_i32_u (i32.add (local.get $n) (i32.const {i}))))",
                i + 1
            )
        })
        .collect();
    let sum: String = (2..=16).fold("(local.get 1)".to_string(), |acc, i| {
        format!("(i64.add {acc} (local.get {i}))")
    });
    wat::parse_str(format!(
        r#"(module
          (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
          (import "env" "store" (func $store (param i32 i32 i32 i32)))
          (memory (export "memory") 1)
          (data (i32.const 0) "d")
          (global $limit (mut i32) (i32.const 0))
          (func $plain (param $n i32) (local {locals})
            (i32.store (i32.const 8) (local.get $n))
            (call $store (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 4))
            (if (i32.ne (local.get $n) (global.get $limit))
              (then (call $plain (i32.add (local.get $n) (i32.const 1))))))
          (func $spilly (param $n i32) (local {locals})
            {sets}
            (i32.store (i32.const 8) (local.get $n))
            (call $store (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 4))
            (if (i32.ne (local.get $n) (global.get $limit))
              (then (call $spilly (i32.add (local.get $n) (i32.const 1)))))
            (i64.store (i32.const 16) {sum}))
          (func (export "apply") (param i64 i64 i64)
            (drop (call $read_message (i32.const 32) (i32.const 8)))
            (global.set $limit (i32.load (i32.const 32)))
            (if (i32.load (i32.const 36))
              (then (call $spilly (i32.const 1)))
              (else (call $plain (i32.const 1))))))"#
    ))
    .unwrap()
}

/// Runs the recursion; returns the receipt and the deepest depth reached.
fn recurse(rt: &Runtime, c: &Contract, limit: i32, spilly: bool) -> (Receipt, i32) {
    let mut message = limit.to_le_bytes().to_vec();
    message.extend_from_slice(&i32::from(spilly).to_le_bytes());
    let mut host = TestHost {
        message,
        ..Default::default()
    };
    let r = call(rt, c, &mut host);
    let depth = i32::from_le_bytes(host.state[&b"d"[..]][..4].try_into().unwrap());
    (r, depth)
}

#[test]
fn issue_10_stack_overflow_happens_at_the_same_depth_whatever_the_native_frames() {
    let rt = runtime();
    let c = rt.prepare(&recursion_contract()).unwrap();
    let (plain, plain_depth) = recurse(&rt, &c, -1, false);
    let (spilly, spilly_depth) = recurse(&rt, &c, -1, true);
    for r in [&plain, &spilly] {
        let abort = failure(r);
        assert_eq!(abort.code, AbortCode::StackOverflow, "{abort}");
        assert!(abort.message.starts_with("call stack exhausted"), "{abort}");
    }
    assert_eq!(plain_depth, spilly_depth);
    assert!(plain_depth > 200, "{plain_depth}");
    // Just under the limit succeeds; one more frame fails, in both shapes.
    for spilly in [false, true] {
        let (r, depth) = recurse(&rt, &c, plain_depth, spilly);
        assert!(r.is_success(), "{r:?}");
        assert_eq!(depth, plain_depth);
        let (r, _) = recurse(&rt, &c, plain_depth + 1, spilly);
        assert_eq!(failure(&r).code, AbortCode::StackOverflow);
    }
    // The frames charged before the overflow were refunded: the instance is reused and the
    // next action gets the whole stack again.
    let (_, again) = recurse(&rt, &c, -1, false);
    assert_eq!(again, plain_depth);
}

// ---------------------------------------------------------------------------------------
// Issue 10: memory costs what it dirties, and prepared contracts stay small.

/// `apply` writes a byte at each offset listed in the message (i32 each) of a 512-page memory.
fn writer(pages: u32) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
          (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
          (memory (export "memory") {pages})
          (data (i32.const 0) "pristine")
          (func (export "apply") (param i64 i64 i64) (local $i i32) (local $n i32)
            (local.set $n (call $read_message (i32.const 64) (i32.const 64)))
            (block $done (loop $next
              (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
              (i32.store8 (i32.load (i32.add (i32.const 64) (local.get $i))) (i32.const 1))
              (local.set $i (i32.add (local.get $i) (i32.const 4)))
              (br $next)))))"#
    ))
    .unwrap()
}

fn write_at(rt: &Runtime, c: &Contract, offsets: &[u32]) -> Receipt {
    let mut host = TestHost {
        message: offsets.iter().flat_map(|o| o.to_le_bytes()).collect(),
        ..Default::default()
    };
    call(rt, c, &mut host)
}

#[test]
fn issue_10_an_action_pays_for_each_chunk_it_dirties() {
    use tally_host_api::limits::FUEL_PER_DIRTY_CHUNK;
    let rt = runtime();
    let c = rt.prepare(&writer(512)).unwrap();
    let last = 512 * 65536 - 1;
    // The message lands in chunk 0 (the host's write), so chunk 0 is dirty in every action.
    let same_chunk = write_at(&rt, &c, &[100, 200]);
    let first_and_last = write_at(&rt, &c, &[100, last]);
    assert!(first_and_last.is_success(), "{first_and_last:?}");
    // One more chunk, and the few instructions of the charge point that pays for it.
    let extra = first_and_last.fuel_used - same_chunk.fuel_used;
    assert!(
        (FUEL_PER_DIRTY_CHUNK..=FUEL_PER_DIRTY_CHUNK + 8).contains(&extra),
        "{extra}"
    );
    // Both bytes were restored: a reader of the whole memory sees them pristine, so writing
    // them again costs the same.
    assert_eq!(write_at(&rt, &c, &[100, last]), first_and_last);
    assert_eq!(rt.instantiations(), 1);
}

#[test]
fn issue_10_bulk_memory_operations_pay_per_byte() {
    let rt = runtime();
    let fill = |len: u32| {
        let c = rt
            .prepare(&contract(&format!(
                "(memory.fill (i32.const 0) (i32.const 7) (i32.const {len}))"
            )))
            .unwrap();
        call(&rt, &c, &mut TestHost::default())
    };
    use tally_host_api::limits::{DIRTY_CHUNK_BYTES, FUEL_PER_BULK_BYTE, FUEL_PER_DIRTY_CHUNK};
    // Both span chunks, so both are marked (and paid) by the runtime's call.
    let small = fill(2 * DIRTY_CHUNK_BYTES as u32);
    let large = fill(60_000);
    assert!(large.is_success(), "{large:?}");
    // 57,952 more bytes, over 57 more chunks.
    let chunks = 60_000u64.div_ceil(DIRTY_CHUNK_BYTES) - 2;
    assert_eq!(
        large.fuel_used - small.fuel_used,
        (60_000 - 2 * DIRTY_CHUNK_BYTES) * u64::from(FUEL_PER_BULK_BYTE)
            + chunks * FUEL_PER_DIRTY_CHUNK
    );
    // 32 MiB for one fuel was the bug: now it runs out of fuel.
    let c = rt
        .prepare(
            &wat::parse_str(
                r#"(module (memory (export "memory") 512)
                 (func (export "apply") (param i64 i64 i64)
                   (memory.fill (i32.const 0) (i32.const 7) (i32.const 33554432))))"#,
            )
            .unwrap(),
        )
        .unwrap();
    let r = call(&rt, &c, &mut TestHost::default());
    assert_eq!(failure(&r).code, AbortCode::OutOfFuel);
}

#[test]
fn issue_22_a_bulk_write_inside_one_chunk_pays_for_that_chunk_like_a_store() {
    use tally_host_api::limits::{DIRTY_CHUNK_BYTES, FUEL_PER_BULK_BYTE, FUEL_PER_DIRTY_CHUNK};
    let rt = runtime();
    let fill = |at: u32, len: u32| {
        let c = rt
            .prepare(&contract(&format!(
                "(memory.fill (i32.const {at}) (i32.const 7) (i32.const {len}))"
            )))
            .unwrap();
        call(&rt, &c, &mut TestHost::default())
    };
    let chunk = DIRTY_CHUNK_BYTES as u32;
    // Inside chunk 1, which nothing else writes: one byte or all of it, one chunk either way.
    let one = fill(chunk, 1);
    let whole = fill(chunk, chunk);
    assert!(whole.is_success(), "{whole:?}");
    assert_eq!(
        whole.fuel_used - one.fuel_used,
        u64::from(chunk - 1) * u64::from(FUEL_PER_BULK_BYTE)
    );
    // One byte more reaches into chunk 2: one more chunk to pay, give or take the dozen
    // instructions that tell the inline mark from the runtime's call.
    let across = fill(chunk, chunk + 1);
    let extra = across.fuel_used - whole.fuel_used - u64::from(FUEL_PER_BULK_BYTE);
    assert!(
        (FUEL_PER_DIRTY_CHUNK - 16..FUEL_PER_DIRTY_CHUNK + 16).contains(&extra),
        "{extra}"
    );
    // The memory's last byte is inside it; a write one byte past it traps, as it did before
    // any mark.
    assert!(fill(65_535, 1).is_success());
    assert_eq!(failure(&fill(65_535, 2)).code, AbortCode::Trap);
    assert!(fill(65_536, 0).is_success());
}

#[test]
fn issue_10_a_prepared_contract_keeps_only_its_initialised_pages() {
    // 24 contracts declaring 512 pages each once held 33 MiB of snapshot apiece.
    let rt = runtime();
    let mut total = 0;
    for i in 0..24 {
        let c = rt.prepare(&writer(512 - i)).unwrap();
        assert!(c.weight() < 1024 * 1024, "{}", c.weight());
        total += c.weight();
    }
    assert!(total < 24 * 1024 * 1024, "{total}");
    assert_eq!(rt.contract_cache_bytes(), total);
}

#[test]
fn issue_10_the_contract_cache_is_bounded_by_bytes_and_evicts_the_least_recently_used() {
    let probe = runtime()
        .prepare(&contract("(call $ret (i32.const 0))"))
        .unwrap();
    let limit = probe.weight() * 3 + probe.weight() / 2;
    let rt = Runtime::new(RuntimeConfig {
        contract_cache_bytes: limit,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let codes: Vec<Vec<u8>> = (0..4)
        .map(|i| contract(&format!("(call $ret (i32.const {i}))")))
        .collect();
    for code in &codes[..3] {
        rt.prepare(code).unwrap();
    }
    rt.prepare(&codes[0]).unwrap(); // code 0 is now the most recently used, code 1 the least
    rt.prepare(&codes[3]).unwrap();
    assert!(
        rt.contract_cache_bytes() <= limit,
        "{}",
        rt.contract_cache_bytes()
    );
    let stats = rt.cache_stats();
    assert_eq!((stats.evictions, stats.compiles), (1, 4), "{stats:?}");
    rt.prepare(&codes[0]).unwrap();
    assert_eq!(rt.cache_stats().compiles, 4, "code 0 stayed");
    let c = rt.prepare(&codes[1]).unwrap();
    assert_eq!(rt.cache_stats().compiles, 5, "code 1 was evicted");
    let mut host = TestHost::default();
    assert!(call(&rt, &c, &mut host).is_success());
    assert_eq!(i32_at(&host, "r"), 1);
}

// ---------------------------------------------------------------------------------------
// Issue 10: host calls pay for the keys they touch.

#[test]
fn issue_10_storing_a_new_key_costs_more_than_overwriting_one() {
    use tally_host_api::limits::FUEL_PER_NEW_KEY;
    let body = "(call $store (i32.const 1002) (i32.const 1) (i32.const 1010) (i32.const 4))";
    let fresh = run(body, &mut TestHost::default());
    let mut host = TestHost::default();
    host.state.insert(b"k".to_vec(), b"old".to_vec());
    let overwrite = run(body, &mut host);
    assert!(fresh.is_success() && overwrite.is_success());
    assert_eq!(fresh.fuel_used - overwrite.fuel_used, FUEL_PER_NEW_KEY);
}

#[test]
fn issue_10_a_load_pays_for_the_whole_value_even_into_an_empty_buffer() {
    use tally_host_api::limits::{FUEL_PER_BYTE, MAX_VALUE_LEN};
    // Load key "k" into a zero-length buffer: the contract learns only the length, but the
    // host read the whole value, so the price must not depend on the buffer.
    let body =
        "(call $ret (call $load (i32.const 1002) (i32.const 1) (i32.const 0) (i32.const 0)))";
    let fuel_for = |len: usize| {
        let mut host = TestHost::default();
        host.state.insert(b"k".to_vec(), vec![7; len]);
        let receipt = run(body, &mut host);
        assert!(receipt.is_success(), "{receipt:?}");
        assert_eq!(i32_at(&host, "r"), len as i32);
        receipt.fuel_used
    };
    let small = fuel_for(1);
    let large = fuel_for(MAX_VALUE_LEN as usize);
    assert_eq!(large - small, (MAX_VALUE_LEN as u64 - 1) * FUEL_PER_BYTE);
}

// ---------------------------------------------------------------------------------------
// Issue 11: no host pointer outlives its call.

/// A host whose `load` panics, like a buggy embedder.
struct PanickingHost;

impl Host for PanickingHost {
    fn message(&self) -> &[u8] {
        &[]
    }
    fn load(&mut self, _: &[u8]) -> Result<Option<&[u8]>, HostError> {
        panic!("the embedder's store failed")
    }
    fn store(&mut self, _: &[u8], _: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn remove(&mut self, _: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _: Name) -> bool {
        false
    }
}

#[test]
fn a_host_that_panics_leaves_the_runtime_usable() {
    let rt = runtime();
    let c = rt
        .prepare(&contract(
            "(call $ret (call $load (i32.const 1002) (i32.const 1) (i32.const 0) (i32.const 4)))",
        ))
        .unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.execute(
            &c,
            Entry::Action {
                receiver: name("test"),
                code: name("test"),
                action: name("run"),
            },
            &mut PanickingHost,
        )
    }));
    assert!(panicked.is_err());
    let mut host = TestHost::default();
    assert!(call(&rt, &c, &mut host).is_success());
    assert_eq!(i32_at(&host, "r"), -1);
}

/// A contract whose `apply` calls `$r` (with an i64 argument of 1, if it takes one), where
/// `$r` recurses without end; `funcs` defines `$r`.
fn unbounded(funcs: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
          (memory (export "memory") 1)
          (global $zero (mut i32) (i32.const 0))
          {funcs}
          (func (export "apply") (param i64 i64 i64) (drop (call $r (i64.const 1)))))"#
    ))
    .unwrap()
}

#[test]
fn issue_10_the_deterministic_stack_limit_always_fires_before_the_native_one() {
    use tally_host_api::limits::{MAX_FUNCTION_LOCALS, MAX_FUNCTION_PARAMS, MAX_OPERAND_STACK};
    let params = MAX_FUNCTION_PARAMS;
    let many_args = repeat("(local.get 0)", params - 1);
    let operands = MAX_OPERAND_STACK as usize - 8;
    let hoistable: String = (0..300)
        .map(|i| {
            format!(
                "(i64.store (i32.const {}) (i64.mul (local.get 0) (i64.const {})))",
                i % 8000,
                1_000_003 + i
            )
        })
        .collect();
    let live_locals = MAX_FUNCTION_LOCALS as usize;
    let sets: String = (0..live_locals)
        .map(|i| {
            format!(
                "(local.set {} (i64x2.splat (i64.add (local.get 0) (i64.const {i}))))",
                i + 1
            )
        })
        .collect();
    let uses: String = (0..live_locals)
        .map(|i| {
            format!(
                "(v128.store (i32.const {}) (local.get {}))",
                (i % 4000) * 16,
                i + 1
            )
        })
        .collect();
    let shapes: Vec<(&str, String)> = vec![
        ("smallest frames", "(func $r (param i64) (result i64) (call $r (local.get 0)))".into()),
        (
            "most parameters, all passed on",
            format!(
                "(func $r (param {}) (result i64) (call $r2 (local.get 0) {many_args}))
                 (func $r2 (param {}) (result i64) (call $r2 (local.get 0) {many_args}))",
                repeat("i64", 1),
                repeat("i64", params)
            ),
        ),
        (
            "the deepest operand stack, live across the call",
            format!(
                "(func $r (param i64) (result i64) {} (call $r (local.get 0)) {})",
                repeat("(local.get 0)", operands),
                repeat("i64.add", operands)
            ),
        ),
        (
            "the most vector locals, live across the call",
            format!(
                "(func $r (param i64) (result i64) (local {}) {sets} (drop (call $r (local.get 0))) {uses} (local.get 0))",
                repeat("v128", live_locals)
            ),
        ),
        (
            // Without the e-graph disabled, Cranelift hoists the thousands of products out
            // of the loop, and they stay live across the call.
            "loop-invariant values",
            format!(
                "(func $r (param i64) (result i64)
                   (loop $l {hoistable} (drop (call $r (local.get 0))) (br_if $l (global.get $zero)))
                   (local.get 0))"
            ),
        ),
    ];
    let rt = runtime();
    for (what, funcs) in shapes {
        let c = rt
            .prepare(&unbounded(&funcs))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let r = call(&rt, &c, &mut TestHost::default());
        let abort = failure(&r);
        assert_eq!(abort.code, AbortCode::StackOverflow, "{what}: {abort}");
        assert!(
            abort.message.starts_with("call stack exhausted"),
            "{what}: the native backstop fired first: {abort}"
        );
    }
}

#[test]
fn issue_10_slow_operators_cost_what_they_take() {
    use tally_host_api::limits::{FUEL_PER_FLOAT_DIVISION, FUEL_PER_INTEGER_DIVISION};
    let fuel = |op: &str, ty: &str| {
        run(
            &format!("(drop ({ty}.{op} ({ty}.const 7) ({ty}.const 3)))"),
            &mut TestHost::default(),
        )
        .fuel_used
    };
    let add = fuel("add", "i64");
    assert_eq!(
        fuel("div_u", "i64") - add,
        u64::from(FUEL_PER_INTEGER_DIVISION) - 1
    );
    assert_eq!(
        fuel("rem_s", "i32") - fuel("add", "i32"),
        u64::from(FUEL_PER_INTEGER_DIVISION) - 1
    );
    assert_eq!(
        fuel("div", "f64") - fuel("add", "f64"),
        u64::from(FUEL_PER_FLOAT_DIVISION) - 1
    );
}

#[test]
fn issue_10_an_out_of_bounds_store_that_trapped_leaves_no_mark_behind() {
    // Mode 1 stores past the end of its one page (and traps); mode 2 grows the memory so
    // that the same address is inside it, and writes nothing there.
    let code = wat::parse_str(
        r#"(module
          (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
          (memory (export "memory") 1)
          (func (export "apply") (param i64 i64 i64)
            (drop (call $read_message (i32.const 0) (i32.const 1)))
            (if (i32.eq (i32.load8_u (i32.const 0)) (i32.const 1))
              (then (i32.store (i32.const 70000) (i32.const 1))))
            (if (i32.eq (i32.load8_u (i32.const 0)) (i32.const 2))
              (then (drop (memory.grow (i32.const 1)))))))"#,
    )
    .unwrap();
    let action = |rt: &Runtime, c: &Contract, mode: u8| {
        let mut host = TestHost {
            message: vec![mode],
            ..Default::default()
        };
        call(rt, c, &mut host)
    };
    let warm = runtime();
    let c = warm.prepare(&code).unwrap();
    assert_eq!(failure(&action(&warm, &c, 1)).code, AbortCode::Trap);
    let after_trap = action(&warm, &c, 2);
    let fresh = runtime();
    let c = fresh.prepare(&code).unwrap();
    assert_eq!(after_trap, action(&fresh, &c, 2));
}

#[test]
fn issue_10_every_action_pays_for_reading_its_memorys_dirty_map() {
    use tally_host_api::limits::FUEL_PER_MEMORY_PAGE;
    let rt = runtime();
    let empty = |pages: u32| {
        let c = rt
            .prepare(
                &wat::parse_str(format!(
                    r#"(module (memory (export "memory") {pages})
                         (func (export "apply") (param i64 i64 i64)))"#
                ))
                .unwrap(),
            )
            .unwrap();
        call(&rt, &c, &mut TestHost::default()).fuel_used
    };
    assert_eq!(empty(512) - empty(1), 511 * FUEL_PER_MEMORY_PAGE);
}

#[test]
fn issue_10_a_loop_cannot_dirty_memory_it_has_not_paid_for() {
    // One store per 1 KiB chunk over 32 MiB would cost ~67M fuel in chunks; the loop runs out
    // at the charge point of its header, long before the host call after it.
    let c = wat::parse_str(format!(
        r#"(module {IMPORTS}
          (memory (export "memory") 512)
          (data (i32.const 0) "done")
          (func (export "apply") (param i64 i64 i64) (local $i i32)
            (block $d (loop $w (br_if $d (i32.ge_u (local.get $i) (i32.const 33554432)))
              (i32.store8 offset=4096 (local.get $i) (i32.const 7))
              (local.set $i (i32.add (local.get $i) (i32.const 1024))) (br $w)))
            (call $store (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 4))))"#
    ))
    .unwrap();
    let rt = runtime();
    let c = rt.prepare(&c).unwrap();
    let mut host = TestHost::default();
    let r = call(&rt, &c, &mut host);
    assert_eq!(failure(&r).code, AbortCode::OutOfFuel);
    assert!(host.state.is_empty(), "the loop finished before paying");
}

/// The module offset of the `nth` instruction `wanted` in function `func` of `wasm` (its
/// index in the module's function index space).
fn instruction_offset(wasm: &[u8], func: u32, wanted: &str, nth: usize) -> u32 {
    let mut imported = 0;
    let mut defined = 0;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.unwrap() {
            wasmparser::Payload::ImportSection(reader) => {
                imported += reader.into_imports().count() as u32;
            }
            wasmparser::Payload::CodeSectionEntry(body) => {
                if imported + defined == func {
                    let mut ops = body.get_operators_reader().unwrap();
                    let mut seen = 0;
                    while !ops.eof() {
                        let (op, offset) = ops.read_with_offset().unwrap();
                        if format!("{op:?}").starts_with(wanted) {
                            if seen == nth {
                                return offset as u32;
                            }
                            seen += 1;
                        }
                    }
                }
                defined += 1;
            }
            _ => {}
        }
    }
    panic!("no {wanted} in function {func}");
}

/// A contract whose `apply` calls `$check_balance`, which traps in `$divide` (a division by
/// zero) or aborts with `assert`, depending on the first byte of the message.
const TRAPPING: &str = r#"(module
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "assert" (func $assert (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "balance too low")
  (func $divide (param i32 i32) (result i32)
    (i32.div_u (local.get 0) (local.get 1)))
  (func $check_balance (param i32)
    (if (local.get 0)
      (then (call $assert (i32.const 0) (i32.const 100) (i32.const 15))))
    (drop (call $divide (i32.const 1) (i32.const 0))))
  (func (export "apply") (param i64 i64 i64)
    (drop (call $read_message (i32.const 0) (i32.const 1)))
    (call $check_balance (i32.load8_u (i32.const 0)))))"#;

fn traced_runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        trace: true,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn issue_15_a_traced_trap_names_the_function_and_its_offset_in_the_uploaded_module() {
    let wasm = wat::parse_str(TRAPPING).unwrap();
    let rt = traced_runtime();
    let c = rt.prepare(&wasm).unwrap();
    let mut host = TestHost {
        message: vec![0],
        ..Default::default()
    };
    let r = call(&rt, &c, &mut host);
    assert_eq!(failure(&r).message, "integer division by zero");
    let trace = r.trace.as_ref().expect("a traced runtime traces a trap");
    let names: Vec<_> = trace
        .frames
        .iter()
        .map(|f| f.func_name.as_deref().unwrap_or("?"))
        .collect();
    // Imports are functions 0 and 1, so $divide is 2, $check_balance 3 and apply 4.
    assert_eq!(names, ["divide", "check_balance", "apply"]);
    let indices: Vec<_> = trace.frames.iter().map(|f| f.func_index).collect();
    assert_eq!(indices, [2, 3, 4]);
    // Offsets are the uploaded module's, not the instrumented one's.
    assert_eq!(
        trace.frames[0].offset,
        Some(instruction_offset(&wasm, 2, "I32DivU", 0))
    );
    assert_eq!(
        trace.frames[1].offset,
        Some(instruction_offset(&wasm, 3, "Call", 1))
    );
    assert_eq!(
        trace.frames[2].offset,
        Some(instruction_offset(&wasm, 4, "Call", 1))
    );

    // A host function's abort is placed at the call that made it.
    host.message = vec![1];
    let r = call(&rt, &c, &mut host);
    assert_eq!(failure(&r).message, "balance too low");
    let top = r.trace.as_ref().unwrap().innermost().unwrap().clone();
    assert_eq!(top.func_name.as_deref(), Some("check_balance"));
    assert_eq!(top.offset, Some(instruction_offset(&wasm, 3, "Call", 0)));
}

#[test]
fn issue_15_tracing_changes_no_outcome_or_fuel_and_an_untraced_runtime_captures_nothing() {
    let wasm = wat::parse_str(TRAPPING).unwrap();
    let (plain, traced) = (runtime(), traced_runtime());
    assert_eq!(plain.fingerprint(), traced.fingerprint());
    let (pc, tc) = (
        plain.prepare(&wasm).unwrap(),
        traced.prepare(&wasm).unwrap(),
    );
    for message in [vec![0], vec![1]] {
        let mut a = TestHost {
            message: message.clone(),
            ..Default::default()
        };
        let mut b = TestHost {
            message,
            ..Default::default()
        };
        let (ra, rb) = (call(&plain, &pc, &mut a), call(&traced, &tc, &mut b));
        assert!(ra.trace.is_none());
        assert!(rb.trace.is_some());
        assert_eq!(ra.outcome, rb.outcome);
        assert_eq!(ra.fuel_used, rb.fuel_used);
    }
    // A success has no trace, traced or not.
    let ok = rt_success(&traced);
    assert!(ok.is_success() && ok.trace.is_none());
}

fn rt_success(rt: &Runtime) -> Receipt {
    let c = rt.prepare(&contract("(call $ret (i32.const 1))")).unwrap();
    call(rt, &c, &mut TestHost::default())
}

#[test]
fn issue_15_a_module_without_names_is_traced_by_index_and_export_name() {
    let wasm = wat::parse_str(
        r#"(module
  (memory (export "memory") 1)
  (func (param i32) (result i32) (i32.div_s (local.get 0) (i32.const 0)))
  (func (export "apply") (param i64 i64 i64) (drop (call 0 (i32.const 7)))))"#,
    )
    .unwrap();
    // The text format names nothing here, so the module has no name section.
    let rt = traced_runtime();
    let c = rt.prepare(&wasm).unwrap();
    let r = call(&rt, &c, &mut TestHost::default());
    let trace = r.trace.unwrap();
    assert_eq!(trace.frames[0].func_index, 0);
    assert_eq!(trace.frames[0].func_name, None);
    assert_eq!(trace.frames[1].func_name.as_deref(), Some("apply"));
    assert_eq!(
        trace.frames[0].offset,
        Some(instruction_offset(&wasm, 0, "I32DivS", 0))
    );
}

// ---------------------------------------------------------------------------------------
// Issue 20: any number of threads, and no resource a block can exhaust is a crash.

/// How long a gate waits for threads that never come (a regression that makes their
/// actions fail before they reach it) before letting the others go on, so such a test fails
/// instead of hanging.
const GATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A count of threads that arrived, which others can wait on.
#[derive(Default)]
struct Gate {
    arrived: std::sync::Mutex<usize>,
    changed: std::sync::Condvar,
}

impl Gate {
    fn arrive(&self) {
        *self.arrived.lock().unwrap() += 1;
        self.changed.notify_all();
    }

    /// Waits until `n` threads have arrived, or [`GATE_TIMEOUT`] has passed.
    fn wait_for(&self, n: usize) {
        let arrived = self.arrived.lock().unwrap();
        let _ = self
            .changed
            .wait_timeout_while(arrived, GATE_TIMEOUT, |arrived| *arrived < n)
            .unwrap();
    }
}

/// A host whose `load` waits until `threads` actions are inside it, so the test knows how
/// many instances are in use at once, and then until `release` opens.
struct GatedHost<'a> {
    entered: &'a Gate,
    threads: usize,
    release: Option<&'a Gate>,
}

impl Host for GatedHost<'_> {
    fn message(&self) -> &[u8] {
        &[]
    }
    fn load(&mut self, _: &[u8]) -> Result<Option<&[u8]>, HostError> {
        self.entered.arrive();
        self.entered.wait_for(self.threads);
        if let Some(release) = self.release {
            release.wait_for(1);
        }
        Ok(None)
    }
    fn store(&mut self, _: &[u8], _: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn remove(&mut self, _: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _: Name) -> bool {
        false
    }
}

/// Calls `load` (where a [`GatedHost`] waits), then spins until its fuel runs out when
/// `spin`.
fn gated(spin: bool) -> Vec<u8> {
    let tail = if spin { "(loop $l (br $l))" } else { "" };
    contract(&format!(
        "(drop (call $load (i32.const 1000) (i32.const 1) (i32.const 0) (i32.const 0))) {tail}"
    ))
}

fn run_entry() -> Entry {
    Entry::Action {
        receiver: name("test"),
        code: name("test"),
        action: name("run"),
    }
}

#[test]
fn issue_20_actions_on_64_and_128_threads_all_run_in_a_runtime_built_for_them() {
    for threads in [64, 128] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        // Built inside the pool, the runtime serves its threads by default.
        let rt = pool.install(|| Runtime::new(RuntimeConfig::default()).unwrap());
        let spinner = rt.prepare(&gated(true)).unwrap();
        // Every thread runs two actions; in each, all threads hold an instance at once
        // before they spin until their fuel runs out.
        let rounds = [Gate::default(), Gate::default()];
        let receipts: Vec<Vec<Result<Receipt, tally_runtime::RuntimeError>>> =
            pool.broadcast(|_| {
                (rounds.iter())
                    .map(|entered| {
                        let mut host = GatedHost {
                            entered,
                            threads,
                            release: None,
                        };
                        rt.execute(&spinner, run_entry(), &mut host)
                    })
                    .collect()
            });
        for receipt in receipts.into_iter().flatten() {
            let receipt = receipt.unwrap_or_else(|e| panic!("{threads} threads: {e}"));
            assert_eq!(failure(&receipt).code, AbortCode::OutOfFuel);
            assert_eq!(receipt.fuel_used, FUEL_PER_ACTION);
        }
        assert!(rt.pool_instances() as usize >= threads * MAX_CALL_DEPTH as usize);
    }
}

/// Runs `held` actions of `c` at once, each on its own thread and holding its instance inside
/// a [`GatedHost`] until `while_held` (called once all are inside) returns; every one must
/// succeed.
fn while_holding<R>(rt: &Runtime, c: &Contract, held: usize, while_held: impl FnOnce() -> R) -> R {
    let (entered, release) = (Gate::default(), Gate::default());
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..held)
            .map(|_| {
                scope.spawn(|| {
                    let mut host = GatedHost {
                        entered: &entered,
                        threads: held,
                        release: Some(&release),
                    };
                    rt.execute(c, run_entry(), &mut host)
                })
            })
            .collect();
        entered.wait_for(held);
        let result = while_held();
        release.arrive();
        for thread in threads {
            assert!(thread.join().unwrap().unwrap().is_success());
        }
        result
    })
}

#[test]
fn issue_20_more_actions_at_once_than_the_pool_holds_get_the_typed_exhausted_error() {
    let rt = Runtime::new(RuntimeConfig {
        concurrency: 1,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let c = rt.prepare(&gated(false)).unwrap();
    let limit = rt.pool_instances();
    // The first action reuses the warm instance, every other one takes a fresh one: the
    // pool is then full, and holds no warm instance to drop.
    assert_eq!(rt.warm_instances(), 1);
    let exhausted = while_holding(&rt, &c, limit as usize, || {
        let mut host = TestHost::default();
        rt.execute(&c, run_entry(), &mut host)
    });
    match exhausted {
        Err(tally_runtime::RuntimeError::Exhausted {
            resource: tally_runtime::Resource::Instances,
            limit: l,
        }) => assert_eq!(l, limit),
        other => panic!("expected the pool to be exhausted, got {other:?}"),
    }
    // Once the actions ended, the same call runs.
    let mut host = TestHost::default();
    assert!(rt.execute(&c, run_entry(), &mut host).unwrap().is_success());
}

#[test]
fn issue_20_warm_instances_make_room_when_they_fill_the_pool() {
    let rt = Runtime::new(RuntimeConfig {
        concurrency: 1,
        ..RuntimeConfig::default()
    })
    .unwrap();
    // More contracts than stay warm (32): the first ones prepared are no longer warm.
    let others: Vec<_> = (0..40)
        .map(|i| {
            rt.prepare(&contract(&format!("(call $ret (i32.const {i}))")))
                .unwrap()
        })
        .collect();
    let c = rt.prepare(&gated(false)).unwrap();
    let warm = rt.warm_instances();
    assert!(warm > 1 && warm < others.len());
    // The first action reuses `c`'s warm instance; with the other warm ones, the actions
    // then fill the pool.
    let held = rt.pool_instances() as usize - (warm - 1);
    // A contract that is not warm needs a fresh instance: the warm ones make room.
    let mut host = TestHost::default();
    let receipt = while_holding(&rt, &c, held, || {
        assert_eq!(rt.warm_instances(), warm - 1);
        rt.execute(&others[0], run_entry(), &mut host)
    });
    assert!(receipt.unwrap().is_success());
    assert_eq!(i32_at(&host, "r"), 0);
}
