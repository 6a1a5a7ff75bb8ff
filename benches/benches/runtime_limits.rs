//! Worst cases of the runtime's static and fuel limits (issue 10). Run:
//! `cargo bench --bench runtime_limits` (or `-- deploy`, `-- restore`, `-- fuel` for one group).
//!
//! - `deploy`: validate + instrument + compile the worst modules the upload limits still allow,
//!   one per shape that makes Cranelift slow, measured in CPU time of the deploying thread
//!   (this build compiles on one thread, so on an idle machine that is the wall time; on a
//!   shared one it leaves out the time other processes took). Goal: each under one second.
//! - `restore`: an action that dirties N 1 KiB chunks of a 512-page memory; the slope is the
//!   cost of restoring one dirtied chunk, which `FUEL_PER_DIRTY_CHUNK` must cover.
//! - `fuel`: the most expensive actions per unit of fuel a contract can build under the fuel
//!   charges; each reports its fuel as criterion throughput, so `1 / (elem/s)` is ns per fuel.
//!   A block's fuel budget is sized from the worst of these.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tally_host_api::Name;
use tally_host_api::limits::{
    MAX_BR_TABLE_TARGETS, MAX_CODE_SIZE, MAX_FUNCTION_BODY_SIZE, MAX_FUNCTION_LOCALS,
    MAX_FUNCTIONS, MAX_NESTING_DEPTH, MAX_OPERAND_STACK, MAX_TOTAL_LOCALS,
};
use tally_host_api::testing::MapHost;
use tally_runtime::{Contract, Entry, Runtime, RuntimeConfig};
use wasm_encoder::{
    BlockType, CodeSection, CustomSection, DataSection, EntityType, ExportKind, ExportSection,
    Function, FunctionSection, ImportSection, Instruction, MemArg, MemorySection, MemoryType,
    Module, TypeSection, ValType,
};

fn entry() -> Entry {
    let name = Name(1);
    Entry::Action {
        receiver: name,
        code: name,
        action: name,
    }
}

const MEM: MemArg = MemArg {
    offset: 0,
    align: 0,
    memory_index: 0,
};

/// A module with one memory of `pages`, `apply` as function `apply_index` and the given
/// defined functions (all of type `types[type_of[i]]`).
struct Builder {
    types: TypeSection,
    imports: ImportSection,
    imported: u32,
    functions: FunctionSection,
    code: CodeSection,
    data: DataSection,
    defined: u32,
    pages: u64,
}

impl Builder {
    /// Types: 0 = apply (i64, i64, i64) -> (), 1 = () -> (), 2 = (i32) -> (i32),
    /// 3 = (i32, i32, i32, i32) -> (), 4 = (i32, i32, i32, i32) -> (i32).
    fn new(pages: u64) -> Self {
        let mut types = TypeSection::new();
        types.ty().function([ValType::I64; 3], []);
        types.ty().function([], []);
        types.ty().function([ValType::I32], [ValType::I32]);
        types.ty().function([ValType::I32; 4], []);
        types.ty().function([ValType::I32; 4], [ValType::I32]);
        Self {
            types,
            imports: ImportSection::new(),
            imported: 0,
            functions: FunctionSection::new(),
            code: CodeSection::new(),
            data: DataSection::new(),
            defined: 0,
            pages,
        }
    }

    fn import(&mut self, name: &str, ty: u32) -> u32 {
        self.imports.import("env", name, EntityType::Function(ty));
        self.imported += 1;
        self.imported - 1
    }

    /// Adds a function; returns its index (imports must all be added first).
    fn function(&mut self, ty: u32, f: &Function) -> u32 {
        self.functions.function(ty);
        self.code.function(f);
        self.defined += 1;
        self.imported + self.defined - 1
    }

    /// The module, with `apply` exported as function `apply` and a custom section holding
    /// `nonce` so every call yields new code (a cache miss).
    fn finish(&self, apply: u32, nonce: u64) -> Vec<u8> {
        let mut module = Module::new();
        module.section(&self.types);
        if self.imported > 0 {
            module.section(&self.imports);
        }
        module.section(&self.functions);
        let mut memory = MemorySection::new();
        memory.memory(MemoryType {
            minimum: self.pages,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        module.section(&memory);
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        exports.export("apply", ExportKind::Func, apply);
        module.section(&exports);
        module.section(&self.code);
        module.section(&self.data);
        let nonce = nonce.to_le_bytes();
        module.section(&CustomSection {
            name: "nonce".into(),
            data: (&nonce[..]).into(),
        });
        module.finish()
    }
}

fn empty_apply() -> Function {
    let mut f = Function::new([]);
    f.instruction(&Instruction::End);
    f
}

/// Fills `f` with copies of `unit` until its body is about `bytes` long, then ends it.
fn fill(f: &mut Function, bytes: usize, unit: &[Instruction<'_>]) {
    while f.byte_len() + 16 < bytes {
        for i in unit {
            f.instruction(i);
        }
    }
    f.instruction(&Instruction::End);
}

/// Functions of `per_function` bytes filling the code-size limit, each made by `body`.
fn fill_module(
    per_function: usize,
    nonce: u64,
    body: impl Fn(&mut Builder) -> Function,
) -> Vec<u8> {
    let mut b = Builder::new(1);
    let mut total = 0;
    while total + per_function + 64 < MAX_CODE_SIZE && (b.defined as usize) < MAX_FUNCTIONS {
        let f = body(&mut b);
        total += f.byte_len() + 4;
        b.function(1, &f);
    }
    let apply = b.function(0, &empty_apply());
    b.finish(apply, nonce)
}

/// Builds one module of a shape; the argument is a nonce that makes each build distinct.
type ShapeBuilder = Box<dyn Fn(u64) -> Vec<u8>>;

/// The deploy-time worst cases, by shape.
fn deploy_shapes() -> Vec<(&'static str, ShapeBuilder)> {
    let body_bytes = MAX_FUNCTION_BODY_SIZE - 64;
    vec![
        (
            // Every byte a store: the instrumentation's largest expansion.
            "dense i32 stores",
            Box::new(move |nonce| {
                fill_module(body_bytes, nonce, |_| {
                    let mut f = Function::new([(1, ValType::I32)]);
                    fill(
                        &mut f,
                        body_bytes,
                        &[
                            Instruction::LocalGet(0),
                            Instruction::LocalGet(0),
                            Instruction::I32Store(MEM),
                        ],
                    );
                    f
                })
            }),
        ),
        (
            "stores with offsets",
            Box::new(move |nonce| {
                fill_module(body_bytes, nonce, |_| {
                    let mut f = Function::new([(1, ValType::I64)]);
                    fill(
                        &mut f,
                        body_bytes,
                        &[
                            Instruction::I32Const(0),
                            Instruction::LocalGet(0),
                            Instruction::I64Store(MemArg {
                                offset: 1_000,
                                align: 3,
                                memory_index: 0,
                            }),
                        ],
                    );
                    f
                })
            }),
        ),
        (
            // As many locals as allowed (every function at the per-function limit, as many
            // functions as the total allows), as many of them used as the code size allows.
            "max locals, used",
            Box::new(move |nonce| {
                let per = MAX_FUNCTION_LOCALS;
                let functions = (MAX_TOTAL_LOCALS / u64::from(per)) as usize;
                let body = MAX_CODE_SIZE / functions - 64;
                let mut b = Builder::new(1);
                for _ in 0..functions {
                    let mut f = Function::new([(per, ValType::I64)]);
                    let mut i = 0;
                    while f.byte_len() + 16 < body {
                        f.instruction(&Instruction::LocalGet((i * 7 + 1) % per));
                        f.instruction(&Instruction::LocalGet(i % per));
                        f.instruction(&Instruction::I64Add);
                        f.instruction(&Instruction::LocalSet((i * 13 + 5) % per));
                        i += 1;
                    }
                    f.instruction(&Instruction::End);
                    b.function(1, &f);
                }
                let apply = b.function(0, &empty_apply());
                b.finish(apply, nonce)
            }),
        ),
        (
            // Locals used at the bottom of the deepest nesting, so every level may carry
            // them as block parameters.
            "max nesting with live locals",
            Box::new(move |nonce| {
                fill_module(body_bytes, nonce, |_| {
                    let locals = 64;
                    let mut f = Function::new([(locals, ValType::I32)]);
                    let depth = MAX_NESTING_DEPTH - 1;
                    for level in 0..depth {
                        f.instruction(&Instruction::Loop(BlockType::Empty));
                        f.instruction(&Instruction::LocalGet(level % locals));
                        f.instruction(&Instruction::If(BlockType::Empty));
                        f.instruction(&Instruction::LocalGet((level + 1) % locals));
                        f.instruction(&Instruction::LocalSet(level % locals));
                        f.instruction(&Instruction::End);
                    }
                    while f.byte_len() + 2 * depth as usize + 32 < body_bytes {
                        for l in 0..locals {
                            f.instruction(&Instruction::LocalGet(l));
                            f.instruction(&Instruction::LocalGet((l + 7) % locals));
                            f.instruction(&Instruction::I32Add);
                            f.instruction(&Instruction::LocalSet(l));
                        }
                        f.instruction(&Instruction::LocalGet(0));
                        f.instruction(&Instruction::BrIf(depth / 2));
                    }
                    for _ in 0..depth {
                        f.instruction(&Instruction::End);
                    }
                    f.instruction(&Instruction::End);
                    f
                })
            }),
        ),
        (
            "max br_tables",
            Box::new(move |nonce| {
                fill_module(body_bytes, nonce, |_| {
                    let mut f = Function::new([(16, ValType::I32)]);
                    let blocks = 16u32;
                    for _ in 0..blocks {
                        f.instruction(&Instruction::Block(BlockType::Empty));
                    }
                    let targets: Vec<u32> = (0..MAX_BR_TABLE_TARGETS).map(|i| i % blocks).collect();
                    while f.byte_len() + 64 + targets.len() * 2 < body_bytes {
                        f.instruction(&Instruction::LocalGet(0));
                        f.instruction(&Instruction::BrTable(targets.as_slice().into(), 0));
                    }
                    for _ in 0..blocks {
                        f.instruction(&Instruction::End);
                    }
                    f.instruction(&Instruction::End);
                    f
                })
            }),
        ),
        (
            // The operand stack at its limit, every value live until the end.
            "max operand stack",
            Box::new(move |nonce| {
                fill_module(body_bytes, nonce, |_| {
                    let mut f = Function::new([(1, ValType::I64)]);
                    while f.byte_len() + 8 * MAX_OPERAND_STACK as usize + 64 < body_bytes {
                        for i in 0..MAX_OPERAND_STACK - 1 {
                            f.instruction(&Instruction::LocalGet(0));
                            f.instruction(&Instruction::I64Const(i64::from(i)));
                            f.instruction(&Instruction::I64Mul);
                        }
                        for _ in 0..MAX_OPERAND_STACK - 2 {
                            f.instruction(&Instruction::I64Add);
                        }
                        f.instruction(&Instruction::LocalSet(0));
                    }
                    f.instruction(&Instruction::End);
                    f
                })
            }),
        ),
        (
            // The most functions, each as small as a function can be.
            "max functions",
            Box::new(move |nonce| {
                let mut b = Builder::new(1);
                for _ in 0..MAX_FUNCTIONS - 1 {
                    b.function(1, &empty_apply());
                }
                let apply = b.function(0, &empty_apply());
                b.finish(apply, nonce)
            }),
        ),
        (
            // Calls carry every value across, and each is a safepoint for regalloc.
            "dense calls to host functions",
            Box::new(move |nonce| {
                let mut b = Builder::new(1);
                let load = b.import("load", 4);
                let mut total = 0;
                while total + body_bytes + 64 < MAX_CODE_SIZE {
                    let mut f = Function::new([(1, ValType::I32)]);
                    fill(
                        &mut f,
                        body_bytes,
                        &[
                            Instruction::LocalGet(0),
                            Instruction::LocalGet(0),
                            Instruction::LocalGet(0),
                            Instruction::LocalGet(0),
                            Instruction::Call(load),
                            Instruction::LocalSet(0),
                        ],
                    );
                    total += f.byte_len();
                    b.function(1, &f);
                }
                let apply = b.function(0, &empty_apply());
                b.finish(apply, nonce)
            }),
        ),
        (
            // NaN canonicalisation adds a compare and select to every float result.
            "dense float arithmetic",
            Box::new(move |nonce| {
                fill_module(body_bytes, nonce, |_| {
                    let mut f = Function::new([(2, ValType::F64)]);
                    fill(
                        &mut f,
                        body_bytes,
                        &[
                            Instruction::LocalGet(0),
                            Instruction::LocalGet(1),
                            Instruction::F64Mul,
                            Instruction::LocalGet(1),
                            Instruction::F64Div,
                            Instruction::LocalSet(0),
                        ],
                    );
                    f
                })
            }),
        ),
    ]
}

/// CPU time of the calling thread, in nanoseconds.
struct ThreadCpu;

fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(ok, 0, "clock_gettime");
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

impl Measurement for ThreadCpu {
    type Intermediate = f64;
    type Value = f64;
    fn start(&self) -> f64 {
        thread_cpu_ns()
    }
    fn end(&self, start: f64) -> f64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }
    fn zero(&self) -> f64 {
        0.0
    }
    fn to_f64(&self, value: &f64) -> f64 {
        *value
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical >= 1e9 {
            (1e-9, "s cpu")
        } else if typical >= 1e6 {
            (1e-6, "ms cpu")
        } else {
            (1e-3, "µs cpu")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(
        &self,
        _: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) | Throughput::Elements(n) => *n,
            _ => 1,
        } as f64;
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v);
        "per cpu s"
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn deploy(c: &mut Criterion<ThreadCpu>) {
    let mut group = c.benchmark_group("deploy");
    group.sample_size(10);
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    static NONCE: AtomicU64 = AtomicU64::new(0);
    for (name, build) in deploy_shapes() {
        let sample = build(0);
        if let Err(e) = rt.prepare(&sample) {
            panic!("{name}: the worst allowed module must deploy: {e}");
        }
        group.throughput(Throughput::Bytes(sample.len() as u64));
        group.bench_function(name, |b| {
            b.iter_batched(
                || build(NONCE.fetch_add(1, Ordering::Relaxed) + 1),
                |wasm| rt.prepare(&wasm).unwrap(),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// `apply` writes one byte into each of the first N pages of a 512-page memory (dirtying one
/// 1 KiB chunk per page), N from the message.
fn page_writer() -> Vec<u8> {
    wat::parse_str(
        r#"(module
          (import "env" "read_message" (func $read (param i32 i32) (result i32)))
          (memory (export "memory") 512)
          (data (i32.const 0) "pristine")
          (func (export "apply") (param i64 i64 i64) (local $n i32) (local $i i32)
            (drop (call $read (i32.const 16) (i32.const 4)))
            (local.set $n (i32.load (i32.const 16)))
            (block $done (loop $next
              (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
              (i32.store8 (i32.mul (local.get $i) (i32.const 65536)) (i32.const 1))
              (local.set $i (i32.add (local.get $i) (i32.const 1)))
              (br $next)))))"#,
    )
    .unwrap()
}

fn restore(c: &mut Criterion) {
    let mut group = c.benchmark_group("restore");
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let writer = rt.prepare(&page_writer()).unwrap();
    for memory in [1, 512] {
        let empty = rt
            .prepare(
                &wat::parse_str(format!(
                    r#"(module (memory (export "memory") {memory})
                     (func (export "apply") (param i64 i64 i64)))"#
                ))
                .unwrap(),
            )
            .unwrap();
        let mut host = MapHost::default();
        group.bench_function(format!("empty action, {memory}-page memory"), |b| {
            b.iter(|| rt.execute(&empty, entry(), &mut host).unwrap())
        });
    }
    for pages in [0u32, 1, 8, 32, 128] {
        let mut host = MapHost {
            message: pages.to_le_bytes().to_vec(),
            all_signed: true,
            ..MapHost::default()
        };
        group.bench_function(
            format!("action dirtying {pages} chunks, one per page"),
            |b| {
                b.iter(|| {
                    let r = rt.execute(&writer, entry(), &mut host).unwrap();
                    assert!(r.is_success(), "{r:?}");
                })
            },
        );
    }
    group.finish();
}

/// Hostile actions, each chosen to be expensive per unit of fuel.
fn hostile_actions() -> Vec<(&'static str, String, Vec<u8>)> {
    let loop_of = |setup: &str, body: &str| {
        format!(
            r#"(module
              (import "env" "read_message" (func $read (param i32 i32) (result i32)))
              (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
              (import "env" "store" (func $store (param i32 i32 i32 i32)))
              (import "env" "remove" (func $remove (param i32 i32)))
              (import "env" "print" (func $print (param i32 i32)))
              (memory (export "memory") 512)
              (table 64 funcref)
              (elem (i32.const 0) $leaf $leaf $leaf $leaf)
              (type $leaf_t (func (result i32)))
              (func $leaf (result i32) (i32.const 1))
              (func $recurse (param $n i32) (result i32)
                (if (result i32) (i32.eqz (local.get $n)) (then (i32.const 0))
                  (else (call $recurse (i32.sub (local.get $n) (i32.const 1))))))
              (func (export "apply") (param i64 i64 i64)
                (local $i i32) (local $x i64) (local $y i64) (local $f f64)
                {setup}
                (loop $l {body} (br $l))))"#
        )
    };
    vec![
        ("i64 add loop (baseline)", loop_of("", "(local.set $x (i64.add (local.get $x) (i64.const 3)))"), vec![]),
        (
            "i64.div_u chain",
            loop_of(
                "(local.set $x (i64.const -1)) (local.set $y (i64.const 3))",
                "(local.set $x (i64.or (i64.div_u (local.get $x) (local.get $y)) (i64.const 0x7000000000000000)))",
            ),
            vec![],
        ),
        (
            "f64.sqrt chain",
            loop_of(
                "(local.set $f (f64.const 1e300))",
                "(local.set $f (f64.add (f64.sqrt (local.get $f)) (f64.const 1e300)))",
            ),
            vec![],
        ),
        (
            // Dirty 128 pages (paying for them), then read them at random: cache and TLB
            // misses on every load.
            "random loads over 8 MiB",
            loop_of(
                "(local.set $i (i32.const 0))
                 (block $d (loop $w (br_if $d (i32.ge_u (local.get $i) (i32.const 128)))
                   (memory.fill (i32.mul (local.get $i) (i32.const 65536)) (i32.const 7) (i32.const 65536))
                   (local.set $i (i32.add (local.get $i) (i32.const 1))) (br $w)))
                 (local.set $x (i64.const 12345))",
                "(local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005)) (i64.load (i32.and (i32.wrap_i64 (i64.shr_u (local.get $x) (i64.const 20))) (i32.const 0x7ffff8)))))",
            ),
            vec![],
        ),
        (
            // Dirty every 1 KiB chunk of the 32 MiB memory with one store each (the chunk fees
            // are charged when the action ends, so they cap its fuel but not this work), then
            // read it at random: the most memory a contract can make the node touch and
            // restore.
            "stride stores over 32 MiB, then random loads",
            loop_of(
                "(local.set $i (i32.const 0))
                 (block $d (loop $w (br_if $d (i32.ge_u (local.get $i) (i32.const 33554432)))
                   (i32.store8 (local.get $i) (i32.const 7))
                   (local.set $i (i32.add (local.get $i) (i32.const 1024))) (br $w)))
                 (local.set $x (i64.const 12345))",
                "(local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005)) (i64.load (i32.and (i32.wrap_i64 (i64.shr_u (local.get $x) (i64.const 20))) (i32.const 0x1fffff8)))))",
            ),
            vec![],
        ),
        (
            // The same in a module that changes its table, so every action gets a fresh
            // instance: every page it touches faults in, and the pool resets it afterwards.
            "stride stores over 32 MiB in a fresh instance, then random loads",
            loop_of(
                "(table.set (i32.const 5) (ref.null func))
                 (local.set $i (i32.const 0))
                 (block $d (loop $w (br_if $d (i32.ge_u (local.get $i) (i32.const 33554432)))
                   (i32.store8 (local.get $i) (i32.const 7))
                   (local.set $i (i32.add (local.get $i) (i32.const 1024))) (br $w)))
                 (local.set $x (i64.const 12345))",
                "(local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005)) (i64.load (i32.and (i32.wrap_i64 (i64.shr_u (local.get $x) (i64.const 20))) (i32.const 0x1fffff8)))))",
            ),
            vec![],
        ),
        (
            "dirty a new page per store",
            loop_of(
                "",
                "(i32.store8 (i32.mul (local.get $i) (i32.const 65536)) (i32.const 1)) (local.set $i (i32.add (local.get $i) (i32.const 1)))",
            ),
            vec![],
        ),
        (
            "memory.fill 64 KiB",
            loop_of("", "(memory.fill (i32.const 0) (local.get $i) (i32.const 65536)) (local.set $i (i32.add (local.get $i) (i32.const 1)))"),
            vec![],
        ),
        (
            "memory.copy 64 KiB",
            loop_of("", "(memory.copy (i32.const 65536) (i32.const 0) (i32.const 65536))"),
            vec![],
        ),
        (
            "memory.grow 0",
            loop_of("", "(drop (memory.grow (i32.const 0)))"),
            vec![],
        ),
        (
            "call_indirect",
            loop_of("", "(drop (call_indirect (type $leaf_t) (i32.and (local.get $i) (i32.const 3)))) (local.set $i (i32.add (local.get $i) (i32.const 1)))"),
            vec![],
        ),
        (
            "recursion to depth 100",
            loop_of("", "(drop (call $recurse (i32.const 100)))"),
            vec![],
        ),
        (
            "load of a missing key",
            loop_of("", "(drop (call $load (i32.const 0) (i32.const 32) (i32.const 64) (i32.const 8)))"),
            vec![],
        ),
        (
            "load of a 64 KiB value",
            loop_of("", "(drop (call $load (i32.const 0) (i32.const 1) (i32.const 65536) (i32.const 65536)))"),
            vec![],
        ),
        (
            "store of new 256-byte keys",
            loop_of("", "(i32.store (i32.const 0) (local.get $i)) (call $store (i32.const 0) (i32.const 256) (i32.const 0) (i32.const 8)) (local.set $i (i32.add (local.get $i) (i32.const 1)))"),
            vec![],
        ),
        (
            "overwrite of one key",
            loop_of("", "(call $store (i32.const 0) (i32.const 8) (i32.const 0) (i32.const 8))"),
            vec![],
        ),
        (
            "remove of a missing key",
            loop_of("", "(call $remove (i32.const 0) (i32.const 8))"),
            vec![],
        ),
        (
            "read_message of 64 KiB",
            loop_of("", "(drop (call $read (i32.const 0) (i32.const 65536)))"),
            vec![7; 65536],
        ),
    ]
}

fn fuel(c: &mut Criterion) {
    let mut group = c.benchmark_group("fuel");
    group.sample_size(10);
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    for (name, wat, message) in hostile_actions() {
        let contract: std::sync::Arc<Contract> = rt
            .prepare(&wat::parse_str(&wat).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // A fresh host per action: a failed action's writes are discarded by the chain, so
        // every action finds the same state.
        let host = || {
            let mut host = MapHost {
                message: message.clone(),
                all_signed: true,
                ..MapHost::default()
            };
            host.state.insert(vec![0], vec![9; 65536]);
            host
        };
        let fuel_used = rt
            .execute(&contract, entry(), &mut host())
            .unwrap()
            .fuel_used;
        group.throughput(Throughput::Elements(fuel_used));
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                host,
                |host| black_box(rt.execute(&contract, entry(), host).unwrap()),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, restore, fuel);
criterion_group! {
    name = deploys;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = deploy
}
criterion_main!(deploys, benches);
