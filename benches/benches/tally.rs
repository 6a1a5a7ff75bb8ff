//! Criterion benches of the pieces of a transfer. Run: `cargo bench` (or
//! `cargo bench -- verify` for one group). They share the workload code of `tally bench`.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tally_chain::Durability;

use criterion::{Criterion, criterion_group, criterion_main};
use tally_bench::workload::{self, BenchConfig, TransferGen};
use tally_chain::{ChainConfig, MemoryStore, SignedTransaction, TxId, crypto, prepare_block};
use tally_host_api::{Host, HostError, Name};
use tally_runtime::{Entry, Runtime, RuntimeConfig};

/// A host with one fixed balance, so the runtime benches measure the runtime alone.
struct OneBalance {
    message: Vec<u8>,
    value: [u8; 8],
}

impl Host for OneBalance {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, _key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(Some(&self.value))
    }
    fn store(&mut self, _key: &[u8], _value: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn remove(&mut self, _key: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _account: Name) -> bool {
        true
    }
}

fn transfer_entry() -> Entry {
    Entry::Action {
        receiver: workload::SIMPLECOIN,
        code: workload::SIMPLECOIN,
        action: workload::TRANSFER,
    }
}

fn runtime(c: &mut Criterion) {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let coin = rt.prepare(workload::SIMPLECOIN_WASM).unwrap();
    let transfer = tally_chain::Transfer {
        from: workload::account_name(1),
        to: workload::account_name(2),
        amount: 1,
        memo: "1".into(),
    };
    let mut host = OneBalance {
        message: transfer.encode(),
        value: 1_000u64.to_le_bytes(),
    };
    let mut group = c.benchmark_group("runtime");
    group.bench_function("one transfer (warm instance, restored)", |b| {
        b.iter(|| rt.execute(&coin, transfer_entry(), &mut host).unwrap())
    });
    // A module that changes its table cannot reuse an instance: every action instantiates.
    let fresh = wat::parse_str(
        r#"(module (memory (export "memory") 1) (table 1 funcref)
            (func (export "apply") (param i64 i64 i64)
              (table.set (i32.const 0) (ref.null func))))"#,
    )
    .unwrap();
    let fresh = rt.prepare(&fresh).unwrap();
    group.bench_function("instantiate (fresh pooled instance + empty action)", |b| {
        b.iter(|| rt.execute(&fresh, transfer_entry(), &mut host).unwrap())
    });
    let empty = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "apply") (param i64 i64 i64)))"#,
    )
    .unwrap();
    let empty = rt.prepare(&empty).unwrap();
    group.bench_function("empty action (warm instance)", |b| {
        b.iter(|| rt.execute(&empty, transfer_entry(), &mut host).unwrap())
    });
    let host_call = wat::parse_str(
        r#"(module (import "env" "message_size" (func $size (result i32)))
            (memory (export "memory") 1)
            (func (export "apply") (param i64 i64 i64)
              (local $i i32)
              (loop $l (drop (call $size))
                (local.set $i (i32.add (local.get $i) (i32.const 1)))
                (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))))"#,
    )
    .unwrap();
    let host_call = rt.prepare(&host_call).unwrap();
    group.bench_function("1000 host calls (message_size)", |b| {
        b.iter(|| rt.execute(&host_call, transfer_entry(), &mut host).unwrap())
    });
    group.finish();
}

/// A host whose `call` runs `callee` through the runtime, as the chain's does (without the
/// chain's journal mark and call-stack check, a few tens of ns).
struct Caller<'a> {
    rt: &'a Runtime,
    callee: &'a tally_runtime::Contract,
    message: Vec<u8>,
}

impl Host for Caller<'_> {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, _key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(None)
    }
    fn store(&mut self, _key: &[u8], _value: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn remove(&mut self, _key: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _account: Name) -> bool {
        true
    }
    fn call(
        &mut self,
        call: tally_host_api::Call<'_>,
    ) -> Result<tally_host_api::CallResult, HostError> {
        let mut inner = OneBalance {
            message: call.data.to_vec(),
            value: [0; 8],
        };
        let entry = Entry::Action {
            receiver: call.account,
            code: call.account,
            action: call.entry,
        };
        let budget = tally_runtime::Budget {
            fuel: call.fuel,
            entry_fee: 0,
            stack_base: call.stack_height,
        };
        let receipt = self
            .rt
            .execute_call(self.callee, entry, &mut inner, budget)
            .map_err(tally_host_api::NodeFault::new)?;
        Ok(tally_host_api::CallResult {
            status: receipt.outcome.failure().cloned().map_or(Ok(()), Err),
            fuel_used: receipt.fuel_used,
            output: receipt.output,
        })
    }
}

/// What a call to another contract's empty action costs beyond running that action at the
/// top level (issue 22's goal: at most 0.5 µs), on warm instances: `call` minus `no call`
/// (the same caller, told not to call) minus `empty action`.
fn calls(c: &mut Criterion) {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let empty = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "apply") (param i64 i64 i64)))"#,
    )
    .unwrap();
    let empty = rt.prepare(&empty).unwrap();
    // Calls the empty contract when its message is not empty.
    let caller = wat::parse_str(
        r#"(module
            (import "env" "message_size" (func $size (result i32)))
            (import "env" "call" (func $call (param i64 i64 i32 i32 i64) (result i32)))
            (memory (export "memory") 1)
            (func (export "apply") (param i64 i64 i64)
              (if (call $size) (then (drop (call $call (i64.const 7) (i64.const 8)
                (i32.const 0) (i32.const 0) (i64.const 0)))))))"#,
    )
    .unwrap();
    let caller = rt.prepare(&caller).unwrap();
    let mut group = c.benchmark_group("calls");
    let mut host = OneBalance {
        message: Vec::new(),
        value: [0; 8],
    };
    group.bench_function("empty action (warm instance)", |b| {
        b.iter(|| rt.execute(&empty, transfer_entry(), &mut host).unwrap())
    });
    for (name, message) in [
        ("no call", Vec::new()),
        ("call to an empty action", vec![1]),
    ] {
        let mut host = Caller {
            rt: &rt,
            callee: &empty,
            message,
        };
        group.bench_function(name, |b| {
            b.iter(|| rt.execute(&caller, transfer_entry(), &mut host).unwrap())
        });
    }
    group.finish();
}

/// Trades on contracts/swap (issue 22's goal: at least 300,000 a second executed on one core):
/// blocks of 1,000, each trade a token transfer to the pool and a swap that queries both
/// tokens and calls one, executed and committed in order on one thread, unsigned.
fn swaps(c: &mut Criterion) {
    use tally_bench::swap;
    const TRADERS: u64 = 10_000;
    const BLOCK: u64 = 1_000;
    let mut chain = swap::chain(TRADERS).unwrap();
    let mut first = 0;
    let mut group = c.benchmark_group("swap");
    group.sample_size(20);
    group.bench_function("1,000 swaps: execute + commit, one thread", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let txs = swap::block(&chain, TRADERS, first, BLOCK);
                first += BLOCK;
                let prepared =
                    prepare_block(txs, false, &chain.pipeline(), &tally_chain::crypto::NoKeys);
                let start = Instant::now();
                let block = chain
                    .execute_block(chain.next_block_time_ms(), &prepared)
                    .unwrap();
                chain.commit(Durability::Background).unwrap();
                elapsed += start.elapsed();
                assert!(
                    block.results.iter().all(|r| r.is_success()),
                    "a swap failed"
                );
            }
            elapsed
        })
    });
    group.finish();
}

fn signed_block(n: u64) -> (Vec<SignedTransaction>, Vec<TxId>, crypto::ResolvedKeys) {
    let config = BenchConfig {
        transfers: n,
        ..BenchConfig::default()
    };
    let rt = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    let store = Box::new(MemoryStore::new(512));
    let (chain, _) = workload::create(rt, store, ChainConfig::default(), &config).unwrap();
    let mut generator = TransferGen::new(&config);
    let block = generator.next_block(&chain, chain.head().height + 1, n);
    let ids = block.iter().map(|tx| tx.transaction.id()).collect();
    // The senders' keys as the committed state has them: the signatures omit them.
    let keys = crypto::ResolvedKeys::read(&block, &chain.committed_keys());
    (block, ids, keys)
}

fn verify(c: &mut Criterion) {
    let (block, ids, keys) = signed_block(1024);
    let mut group = c.benchmark_group("verify");
    group.bench_function("one signature", |b| {
        b.iter(|| crypto::verify_signatures(&block[0], &ids[0], &keys).unwrap())
    });
    group.throughput(criterion::Throughput::Elements(block.len() as u64));
    group.bench_function("1024 signatures, batched on all cores", |b| {
        let items: Vec<_> = block.iter().zip(&ids).collect();
        b.iter(|| crypto::verify_many(&items, &keys, crypto::Need::Each))
    });
    group.finish();
}

fn chain(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain");
    group.sample_size(10);
    let config = BenchConfig {
        transfers: 5_000,
        signed: false,
        ..BenchConfig::default()
    };
    let chain_config = ChainConfig {
        check_signatures: false,
        ..ChainConfig::default()
    };
    let rt = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store =
        tally_chain::LogStore::open(dir.path(), tally_chain::LogOptions::default()).unwrap();
    let (mut chain, _) = workload::create(rt, Box::new(store), chain_config, &config).unwrap();
    let mut generator = TransferGen::new(&config);
    group.throughput(criterion::Throughput::Elements(config.transfers));
    group.bench_function("5000 transfers: execute + commit (log store, fsync)", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let height = chain.head().height + 1;
                let block = generator.next_block(&chain, height, config.transfers);
                let prepared = prepare_block(
                    block,
                    false,
                    &chain.pipeline(),
                    &tally_chain::crypto::NoKeys,
                );
                let start = Instant::now();
                workload::execute_and_commit(&mut chain, &prepared, Durability::Immediate).unwrap();
                timed += start.elapsed();
            }
            timed
        })
    });
    group.finish();
}

criterion_group!(benches, runtime, calls, swaps, verify, chain);
criterion_main!(benches);
