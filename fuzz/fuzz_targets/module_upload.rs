//! Upload validation and instrumentation of arbitrary modules: wasm-smith modules shaped like
//! contracts (ABI imports, `memory` and `apply` exports), and raw bytes.
//!
//! `cargo +nightly fuzz run module_upload`
//!
//! Holds:
//! - `Runtime::prepare` accepts or rejects; it never panics and never blames the node, and
//!   what deploys runs `onInit` and `apply` to receipts, the same ones twice.
//! - Differential: what validation accepts, instrumented, behaves exactly like the original
//!   in plain wasmtime: the same trap-or-not (and trap code) for each call of `apply`, and
//!   the same memory afterwards. Runs where the original runs out of fuel, or either side
//!   exhausts its stack, are not compared: instrumentation costs fuel and stack accounting
//!   is meant to be stricter than the native stack.

#![no_main]

use std::sync::OnceLock;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::{Corpus, fuzz_target};
use tally_fuzz::MapHost;
use tally_host_api::{Name, abi};
use tally_runtime::{Entry, PrepareError, Runtime, RuntimeConfig, fuzzing};
use wasmtime::{Engine, FuncType, Instance, Linker, Module, Store, Trap, Val, ValType};

/// Fuel for each call of the original: enough for any loop-free module wasm-smith makes, and
/// small enough that a looping one ends fast.
const ORIGINAL_FUEL: u64 = 200_000;

/// The instrumented module gets this many times the fuel the original used, plus a constant:
/// each store gains ~15 instructions, each function entry and loop header a few.
const FUEL_FACTOR: u64 = 40;
const FUEL_EXTRA: u64 = 100_000;

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(RuntimeConfig {
            // Keep only the latest contract: inputs are independent.
            contract_cache_bytes: 1,
            // Fuzzed code loops often; a tenth of the usual fuel ends it sooner.
            fuel_per_action: 1_000_000,
            ..RuntimeConfig::default()
        })
        .expect("runtime")
    })
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let pool = tally_runtime::engine::pool_instances(1);
        tally_runtime::engine::new_engine(pool).expect("engine")
    })
}

/// A module whose imports are ABI v1, for wasm-smith's `available_imports`.
fn abi_imports() -> Vec<u8> {
    let ty = |t: &abi::ValType| match t {
        abi::ValType::I32 => "i32",
        abi::ValType::I64 => "i64",
    };
    let mut wat = String::from("(module\n");
    for import in abi::IMPORTS {
        let params: Vec<_> = import.params.iter().map(ty).collect();
        let results: Vec<_> = import.results.iter().map(ty).collect();
        wat += &format!(
            "(import \"env\" \"{}\" (func (param {}) (result {})))\n",
            import.name,
            params.join(" "),
            results.join(" ")
        );
    }
    wat += ")";
    wat::parse_str(&wat).expect("imports module")
}

fn smith_module(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    static IMPORTS: OnceLock<Vec<u8>> = OnceLock::new();
    static EXPORTS: OnceLock<Vec<u8>> = OnceLock::new();
    let mut config = wasm_smith::Config {
        available_imports: Some(IMPORTS.get_or_init(abi_imports).clone()),
        exports: Some(
            EXPORTS
                .get_or_init(|| {
                    wat::parse_str(
                        r#"(module (memory (export "memory") 1)
                             (func (export "apply") (param i64 i64 i64)))"#,
                    )
                    .expect("exports module")
                })
                .clone(),
        ),
        // What uploads may use (tally_runtime::engine::upload_features).
        threads_enabled: false,
        shared_everything_threads_enabled: false,
        exceptions_enabled: false,
        gc_enabled: false,
        tail_call_enabled: false,
        memory64_enabled: false,
        relaxed_simd_enabled: false,
        custom_page_sizes_enabled: false,
        wide_arithmetic_enabled: false,
        allow_start_export: false,
        max_memories: 1,
        max_tables: 1,
        max_memory32_bytes: 8 << 16,
        max_table_elements: 1_000,
        max_funcs: 20,
        max_types: 20,
        max_globals: 20,
        max_data_segments: 5,
        max_element_segments: 5,
        max_nesting_depth: 8,
        ..wasm_smith::Config::default()
    };
    config.max_instructions = u.int_in_range(1..=300)?;
    // At most one result per function type (MAX_FUNCTION_RESULTS) is the common case.
    config.multi_value_enabled = u.ratio(1, 4)?;
    config.disallow_traps = u.arbitrary()?;
    config.simd_enabled = u.arbitrary()?;
    Ok(wasm_smith::Module::new(config, u)?.to_bytes())
}

/// State of one side of the differential run.
#[derive(Default)]
struct Side {
    stack_exhausted: bool,
}

/// The ABI imports as pure stubs (the same on both sides) plus, for the instrumented side,
/// the runtime's private imports as no-ops that only note stack exhaustion.
fn linker(instrumented: bool) -> Linker<Side> {
    let engine = engine();
    let mut linker: Linker<Side> = Linker::new(engine);
    let vt = |t: &abi::ValType| match t {
        abi::ValType::I32 => ValType::I32,
        abi::ValType::I64 => ValType::I64,
    };
    for import in abi::IMPORTS {
        let ty = FuncType::new(
            engine,
            import.params.iter().map(vt),
            import.results.iter().map(vt),
        );
        let name = import.name;
        linker
            .func_new(abi::MODULE, name, ty, move |_, params, results| {
                if name == "assert" && params[0].unwrap_i32() == 0 {
                    return Err(wasmtime::Error::msg("assert"));
                }
                if let Some(r) = results.first_mut() {
                    // A result that depends on the arguments, so code after the call varies.
                    let seed = params.iter().fold(7i32, |h, p| match p {
                        Val::I32(v) => h.wrapping_mul(31).wrapping_add(*v),
                        Val::I64(v) => h.wrapping_mul(31).wrapping_add(*v as i32),
                        _ => h,
                    });
                    *r = Val::I32(if name == "load" && seed % 3 == 0 {
                        -1
                    } else {
                        seed & 0xff
                    });
                }
                Ok(())
            })
            .expect("define stub");
    }
    if instrumented {
        for (name, params) in fuzzing::PRIVATE_IMPORTS {
            let ty = FuncType::new(engine, std::iter::repeat_n(ValType::I32, params), []);
            linker
                .func_new(
                    fuzzing::PRIVATE_MODULE,
                    name,
                    ty,
                    move |mut caller: wasmtime::Caller<'_, Side>, _, _| {
                        if name == "stack_exhausted" {
                            caller.data_mut().stack_exhausted = true;
                        }
                        Ok(())
                    },
                )
                .expect("define private stub");
        }
    }
    linker
}

/// How a call ended, in terms both sides can be compared by.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    Returned,
    Trapped(Trap),
    /// A host stub failed (`assert`).
    Host,
}

fn ending(result: wasmtime::Result<()>) -> Ending {
    match result {
        Ok(()) => Ending::Returned,
        Err(e) => match e.downcast_ref::<Trap>() {
            Some(trap) => Ending::Trapped(*trap),
            None => Ending::Host,
        },
    }
}

fn memory(store: &mut Store<Side>, instance: &Instance) -> Vec<u8> {
    instance
        .get_memory(&mut *store, abi::MEMORY_EXPORT)
        .expect("memory export")
        .data(&*store)
        .to_vec()
}

/// How many inputs reached each stage, printed every 100 inputs when `TALLY_FUZZ_STATS` is
/// set: to see that generated modules get past validation and the differential runs.
#[derive(Default)]
struct Stats {
    inputs: u64,
    deployed: u64,
    instrumented: u64,
    compared_calls: u64,
}

fn stats() -> &'static std::sync::Mutex<Stats> {
    static STATS: OnceLock<std::sync::Mutex<Stats>> = OnceLock::new();
    STATS.get_or_init(Default::default)
}

fn count(f: impl FnOnce(&mut Stats)) {
    let mut s = stats().lock().unwrap_or_else(|e| e.into_inner());
    f(&mut s);
}

fn differential(original: &[u8], instrumented: &[u8], calls: &[(i64, i64, i64)]) {
    let engine = engine();
    let m0 = Module::new(engine, original).expect("validated modules compile");
    let m1 = Module::new(engine, instrumented).expect("instrumented modules compile");
    let mut s0 = Store::new(engine, Side::default());
    let mut s1 = Store::new(engine, Side::default());
    s0.set_fuel(ORIGINAL_FUEL).unwrap();
    s1.set_fuel(ORIGINAL_FUEL * FUEL_FACTOR + FUEL_EXTRA)
        .unwrap();
    let i0 = linker(false).instantiate(&mut s0, &m0);
    let i1 = linker(true).instantiate(&mut s1, &m1);
    let (i0, i1) = match (i0, i1) {
        (Ok(i0), Ok(i1)) => (i0, i1),
        (Err(e0), Err(e1)) => {
            assert_eq!(
                e0.downcast_ref::<Trap>(),
                e1.downcast_ref::<Trap>(),
                "instantiation fails differently"
            );
            return;
        }
        (r0, r1) => panic!(
            "instantiation differs: original {:?}, instrumented {:?}",
            r0.err(),
            r1.err()
        ),
    };
    assert_eq!(
        memory(&mut s0, &i0),
        memory(&mut s1, &i1),
        "after instantiation"
    );
    let f0 = i0
        .get_typed_func::<(i64, i64, i64), ()>(&mut s0, abi::APPLY_EXPORT)
        .expect("apply");
    let f1 = i1
        .get_typed_func::<(i64, i64, i64), ()>(&mut s1, abi::APPLY_EXPORT)
        .expect("apply");
    for &args in calls {
        s0.set_fuel(ORIGINAL_FUEL).unwrap();
        let r0 = ending(f0.call(&mut s0, args));
        let used = ORIGINAL_FUEL - s0.get_fuel().unwrap();
        if matches!(r0, Ending::Trapped(Trap::OutOfFuel | Trap::StackOverflow)) {
            return;
        }
        // As the runtime does after every action.
        for name in fuzzing::RESET_GLOBALS {
            i1.get_global(&mut s1, name)
                .expect("added global")
                .set(&mut s1, Val::I32(0))
                .unwrap();
        }
        s1.set_fuel(used * FUEL_FACTOR + FUEL_EXTRA).unwrap();
        let r1 = ending(f1.call(&mut s1, args));
        if s1.data().stack_exhausted {
            return;
        }
        assert_ne!(
            r1,
            Ending::Trapped(Trap::OutOfFuel),
            "the instrumented module used over {FUEL_FACTOR}x the original's {used} fuel"
        );
        assert_eq!(r0, r1, "apply{args:?} ends differently");
        assert!(
            memory(&mut s0, &i0) == memory(&mut s1, &i1),
            "apply{args:?} leaves different memory"
        );
        count(|s| s.compared_calls += 1);
    }
}

/// Deploys through the node's path; what deploys must run to receipts, deterministically.
fn deploy_and_run(wasm: &[u8], calls: &[(i64, i64, i64)]) {
    let runtime = runtime();
    let contract = match runtime.prepare(wasm) {
        Ok(contract) => {
            count(|s| s.deployed += 1);
            contract
        }
        Err(PrepareError::Rejected(_)) => return,
        Err(PrepareError::Node(e)) => panic!("an upload made the node fail: {e}"),
    };
    let mut receipts = Vec::new();
    for _ in 0..2 {
        let mut host = MapHost {
            message: b"fuzz".to_vec(),
            signers: vec![Name(1)],
            ..MapHost::default()
        };
        let mut run = |entry| {
            runtime
                .execute(&contract, entry, &mut host)
                .unwrap_or_else(|e| panic!("a contract made the node fail: {e}"))
        };
        let mut round = vec![run(Entry::Init)];
        for &(receiver, code, action) in calls {
            round.push(run(Entry::Action {
                receiver: Name(receiver as u64),
                code: Name(code as u64),
                action: Name(action as u64),
            }));
        }
        receipts.push((round, host));
    }
    assert_eq!(
        receipts[0], receipts[1],
        "the same actions gave other receipts"
    );
}

fuzz_target!(|data: &[u8]| -> Corpus {
    let mut u = Unstructured::new(data);
    let Ok(raw) = u.ratio(1, 8) else {
        return Corpus::Reject;
    };
    let Ok(calls) = (0..3)
        .map(|_| u.arbitrary::<(i64, i64, i64)>())
        .collect::<Result<Vec<_>>>()
    else {
        return Corpus::Reject;
    };
    let wasm = if raw {
        u.take_rest().to_vec()
    } else {
        match smith_module(&mut u) {
            Ok(wasm) => wasm,
            Err(_) => return Corpus::Reject,
        }
    };
    count(|s| s.inputs += 1);
    deploy_and_run(&wasm, &calls);
    if let Ok(instrumented) = fuzzing::instrument(&wasm) {
        count(|s| s.instrumented += 1);
        differential(&wasm, &instrumented, &calls);
    }
    let s = stats().lock().unwrap_or_else(|e| e.into_inner());
    if s.inputs % 100 == 0 && std::env::var_os("TALLY_FUZZ_STATS").is_some() {
        eprintln!(
            "stats: {} inputs, {} deployed, {} instrumented, {} calls compared",
            s.inputs, s.deployed, s.instrumented, s.compared_calls
        );
    }
    Corpus::Keep
});
