//! The runtime's guarantees, each shown with a small inline-WAT contract.

use std::collections::BTreeMap;
use std::sync::Arc;

use tally_host_api::limits::{FUEL_PER_ACTION, MAX_CONSOLE_LEN, MAX_KEY_LEN};
use tally_host_api::{Abort, AbortCode, Host, HostError, Name};
use tally_runtime::{
    Contract, DeployError, Entry, EntryPoints, Outcome, Receipt, Runtime, RuntimeConfig,
};

/// A host over a sorted map, recording what the action did.
#[derive(Default)]
struct TestHost {
    message: Vec<u8>,
    state: BTreeMap<Vec<u8>, Vec<u8>>,
    auth: Vec<Name>,
    printed: Vec<u8>,
}

impl Host for TestHost {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(self.state.get(key).map(Vec::as_slice))
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        self.state.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
        self.state.remove(key);
        Ok(())
    }
    fn is_authorized(&self, account: Name) -> bool {
        self.auth.contains(&account)
    }
    fn print(&mut self, text: &[u8]) -> Result<(), HostError> {
        self.printed.extend_from_slice(text);
        Ok(())
    }
}

impl TestHost {
    fn i32_at(&self, key: &str) -> i32 {
        let v = &self.state[key.as_bytes()];
        i32::from_le_bytes(v[..4].try_into().unwrap())
    }
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
    assert_eq!(host.i32_at("r"), 11);
    assert_eq!(host.state[&b"m"[..]], b"hello\0\0\0");
}

#[test]
fn message_size_returns_full_length() {
    let mut host = TestHost {
        message: vec![7; 300],
        ..Default::default()
    };
    assert!(run("(call $ret (call $message_size))", &mut host).is_success());
    assert_eq!(host.i32_at("r"), 300);
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
    assert_eq!(host.i32_at("r"), -1);
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
    assert_eq!(host.i32_at("r"), 10);
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
        auth: vec![alice],
        ..Default::default()
    };
    assert!(run(&body, &mut host).is_success());
    let mut host = TestHost {
        auth: vec![name("bob")],
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
    assert_eq!(host.i32_at("r") as u32, 0x7fc0_0000);
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
            host.i32_at("r"),
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
    assert_eq!(host.i32_at("r"), 0);
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

fn deploy_error(wat: &str) -> DeployError {
    runtime()
        .prepare(&wat::parse_str(wat).unwrap())
        .expect_err("deploy should fail")
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
    let err = runtime().prepare(b"\0asm garbage").unwrap_err();
    assert!(matches!(err, DeployError::Invalid(_)), "{err}");
    let huge = vec![0u8; tally_host_api::limits::MAX_MODULE_SIZE + 1];
    assert!(matches!(
        runtime().prepare(&huge),
        Err(DeployError::TooLarge { .. })
    ));
}

fn cached_runtime(dir: &std::path::Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn works(rt: &Runtime, c: &Arc<Contract>) {
    let mut host = TestHost::default();
    assert!(call(rt, c, &mut host).is_success());
    assert_eq!(host.i32_at("r"), 5);
}

#[test]
fn a_rebuilt_runtime_loads_from_the_disk_cache_without_recompiling() {
    let dir = tempfile::tempdir().unwrap();
    let code = contract("(call $ret (i32.const 5))");
    let first = cached_runtime(dir.path());
    works(&first, &first.prepare(&code).unwrap());
    assert_eq!(first.cache_stats().compiles, 1);
    first.prepare(&code).unwrap();
    assert_eq!(first.cache_stats().memory_hits, 1);
    drop(first);

    let second = cached_runtime(dir.path());
    let c = second.prepare(&code).unwrap();
    let stats = second.cache_stats();
    assert_eq!((stats.compiles, stats.disk_hits), (0, 1), "{stats:?}");
    works(&second, &c);
}

#[test]
fn a_corrupt_or_truncated_cache_file_is_recompiled_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let code = contract("(call $ret (i32.const 5))");
    cached_runtime(dir.path()).prepare(&code).unwrap();
    let file = std::fs::read_dir(dir.path())
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
        let rt = cached_runtime(dir.path());
        let c = rt.prepare(&code).unwrap();
        let stats = rt.cache_stats();
        assert_eq!((stats.compiles, stats.disk_rejected), (1, 1), "{stats:?}");
        works(&rt, &c);
        // The entry was rewritten: the next runtime loads it.
        let again = cached_runtime(dir.path());
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
