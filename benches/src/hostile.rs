//! The worst blocks a hostile sender can build: 5,000 transactions, all calling one hostile
//! contract, each action doing the most expensive thing per unit of fuel that the contract's
//! shape allows. Every one of them is refused nothing (they are valid transactions); what
//! bounds their cost is fuel per action, the block's fuel budget and the write limits. The
//! criterion bench `hostile` times each, and the README states the worst.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tally_chain::{
    Action, Chain, ChainConfig, ChainError, Durability, FeeSchedule, MemoryStore, Name, Pipeline,
    SignedTransaction, Transaction, TxResult, prepare_block,
};
use tally_runtime::{Runtime, RuntimeConfig};

/// Transactions in a hostile block: the block size of `tally bench` and of the DCC study.
pub const BLOCK_TXS: usize = 5_000;

const IMPORTS: &str = r#"
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "print" (func $print (param i32 i32)))
  (import "env" "call" (func $call (param i64 i64 i32 i32 i64) (result i32)))
"#;

/// One hostile contract: its name and what its `apply` does.
pub struct Hostile {
    /// Short name, for reports.
    pub name: &'static str,
    /// What it tries.
    pub what: &'static str,
    /// Pages of memory it declares.
    pub pages: u32,
    /// The body of `apply(receiver, code, action)`; `$i` and `$x` are i32/i64 locals.
    /// `$NAMES` is the address of a table of the [`CALLEES`] callees' names (8 bytes each).
    pub body: &'static str,
}

/// Callees of the call-rotating hostile contract: twice the 32 instances the runtime keeps
/// warm, so that each transaction's window of them ([`WINDOW`], from an offset its data picks)
/// finds them cold, left so by the transactions before it.
pub const CALLEES: usize = 64;

/// Callees each call-rotating transaction cycles through: one more than a transaction may
/// enter with its caller, so the last one's calls are refused.
pub const WINDOW: usize = tally_host_api::limits::MAX_CONTRACTS_PER_TX as usize + 1;

/// Data each callee's instantiation copies: 128 KiB at an extended-constant offset, which
/// keeps wasmtime from mapping a copy-on-write image, so every fresh instance copies it.
const CALLEE_DATA_BYTES: usize = 128 * 1024;

/// The account of callee `i`.
fn callee_name(i: usize) -> Name {
    const DIGITS: &[u8; 31] = b"12345abcdefghijklmnopqrstuvwxyz";
    let name = format!("callee{}{}", DIGITS[i / 31] as char, DIGITS[i % 31] as char);
    name.parse().expect("a valid name")
}

/// Callee `i` of the call-rotating contract: an empty action, behind its own data.
pub fn callee(i: usize) -> (Name, Vec<u8>) {
    let data: String = (0..CALLEE_DATA_BYTES)
        .map(|j| format!("\\{:02x}", (i + j) as u8))
        .collect();
    let wasm = wat::parse_str(format!(
        r#"(module (memory (export "memory") 8)
             (data (i32.add (i32.const 0) (i32.const 0)) "{data}")
             (func (export "apply") (param i64 i64 i64)))"#
    ))
    .expect("valid callee");
    (callee_name(i), wasm)
}

/// The hostile contracts, each aimed at a different resource.
pub const HOSTILE: &[Hostile] = &[
    Hostile {
        name: "spin",
        what: "an empty loop until the fuel runs out",
        pages: 1,
        body: "(loop $l (br $l))",
    },
    Hostile {
        name: "divide",
        what: "a chain of dependent 64-bit divisions",
        pages: 1,
        body: "(local.set $x (i64.const -1))
               (loop $l (local.set $x (i64.div_u (i64.const -1) (i64.or (local.get $x) (i64.const 3))))
                        (br $l))",
    },
    Hostile {
        name: "cache-miss",
        what: "dependent loads at pseudo-random addresses of a 32 MiB memory (DRAM latency)",
        pages: 512,
        body: "(local.set $i (i32.const 12345))
               (loop $l
                 (local.set $i (i32.and
                   (i32.add (i32.mul (local.get $i) (i32.const 1103515245))
                            (i32.add (i32.load (local.get $i)) (i32.const 12345)))
                   (i32.const 0x1fffff8)))
                 (br $l))",
    },
    Hostile {
        name: "dirty-memory",
        what: "one store in every 1 KiB chunk of a 32 MiB memory (all of it restored after)",
        pages: 512,
        body: "(loop $l
                 (i32.store (local.get $i) (local.get $i))
                 (local.set $i (i32.and (i32.add (local.get $i) (i32.const 1024)) (i32.const 0x1fffffc)))
                 (br $l))",
    },
    Hostile {
        name: "missing-keys",
        what: "loads of 256-byte keys that do not exist",
        pages: 1,
        body: "(loop $l
                 (i32.store (i32.const 0) (local.get $i))
                 (local.set $i (i32.add (local.get $i) (i32.const 1)))
                 (drop (call $load (i32.const 0) (i32.const 256) (i32.const 512) (i32.const 8)))
                 (br $l))",
    },
    Hostile {
        name: "new-keys",
        what: "stores of new 256-byte keys with 1 KiB values until the write limits",
        pages: 1,
        body: "(loop $l
                 (i32.store (i32.const 0) (local.get $i))
                 (local.set $i (i32.add (local.get $i) (i32.const 1)))
                 (call $store (i32.const 0) (i32.const 256) (i32.const 1024) (i32.const 1024))
                 (br $l))",
    },
    Hostile {
        name: "console",
        what: "prints until the console limit",
        pages: 1,
        body: "(loop $l (call $print (i32.const 0) (i32.const 1000)) (br $l))",
    },
    Hostile {
        name: "call-rotate",
        what: "calls 17 of 64 contracts in turn (a window each transaction moves on, so \
               their instances are cold), each behind 128 KiB of data that a fresh instance \
               copies, until the fuel runs out",
        pages: 1,
        body: "(drop (call $read_message (i32.const 0) (i32.const 8)))
               (local.set $x (i64.mul (i64.load (i32.const 0)) (i64.const 16)))
               (loop $l
                 (drop (call $call
                   (i64.load (i32.add (i32.const $NAMES) (i32.shl (i32.wrap_i64 (i64.rem_u
                     (i64.add (local.get $x) (i64.extend_i32_u (local.get $i)))
                     (i64.const 64))) (i32.const 3))))
                   (i64.const 0) (i32.const 0) (i32.const 0) (i64.const 0)))
                 (local.set $i (i32.rem_u (i32.add (local.get $i) (i32.const 1)) (i32.const WINDOW)))
                 (br $l))",
    },
    Hostile {
        name: "call-spin",
        what: "calls a contract that spins, giving it all the fuel",
        pages: 1,
        body: "(drop (call $call (i64.const CALLEE0) (i64.const 0) (i32.const 0) (i32.const 0) \
               (i64.const 0))) (loop $l (br $l))",
    },
    Hostile {
        name: "grow",
        what: "grows memory by a page (so the instance cannot be reused), then spins",
        pages: 1,
        body: "(drop (memory.grow (i32.const 1))) (loop $l (br $l))",
    },
];

impl Hostile {
    /// The module.
    pub fn wasm(&self) -> Vec<u8> {
        // The callees' names, little-endian, from byte 64.
        let names: String = (0..CALLEES)
            .flat_map(|i| callee_name(i).0.to_le_bytes())
            .map(|b| format!("\\{b:02x}"))
            .collect();
        let body = self
            .body
            .replace("$NAMES", "64")
            .replace("WINDOW", &WINDOW.to_string())
            .replace("CALLEE0", &(SPIN_CALLEE.0 as i64).to_string());
        wat::parse_str(format!(
            r#"(module {IMPORTS}
              (memory (export "memory") {pages})
              (data (i32.const 64) "{names}")
              (func (export "apply") (param i64 i64 i64) (local $i i32) (local $x i64)
                {body}))"#,
            pages = self.pages,
        ))
        .expect("valid hostile module")
    }

    /// Its account name.
    pub fn account(&self) -> Name {
        let short: String = self.name.chars().filter(|c| *c != '-').take(12).collect();
        short.parse().expect("a valid name")
    }
}

/// The spinning contract `call-spin` calls.
const SPIN_CALLEE: Name = match Name::from_str_const("spincallee") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// What running one hostile block measured.
#[derive(Debug, Clone)]
pub struct HostileRun {
    /// Execute and commit time of the block.
    pub elapsed: Duration,
    /// Transactions included (the rest were refused once the block's fuel was spent).
    pub included: usize,
    /// Fuel the block used.
    pub fuel: u64,
}

/// A chain (memory store, signatures off: the hostile sender's cost is what is measured, not
/// verification's) with every hostile contract deployed at genesis.
pub fn chain() -> Result<Chain, ChainError> {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
    // The standard schedule's block maxima (the five budgets bound each block), with prices
    // all but held at their starting values (a full block moves one by its minimum step, a
    // millionth of a coin unit): each block of the benchmark uses its budget in full,
    // so the price would rise an eighth a block, and a run of hundreds of blocks would price
    // the attacker out (which is the fee market working, but not the worst block a node can
    // meet: an attacker with the coins pays any price).
    let config = ChainConfig {
        check_signatures: false,
        fees: FeeSchedule {
            change_denominator: u64::MAX,
            ..FeeSchedule::STANDARD
        },
        ..ChainConfig::default()
    };
    let mut genesis = Chain::genesis(runtime, Box::new(MemoryStore::new(16)), config)?;
    for h in HOSTILE {
        genesis.deploy(h.account(), &h.wasm())?;
    }
    for i in 0..CALLEES {
        let (account, wasm) = callee(i);
        genesis.deploy(account, &wasm)?;
    }
    let spin = HOSTILE.iter().find(|h| h.name == "spin").expect("spin");
    genesis.deploy(SPIN_CALLEE, &spin.wasm())?;
    // The payer of the hostile transactions (nobody authorizes them): a funded attacker pays
    // the standard prices for each.
    genesis.fund(tally_chain::system::SYSTEM, crate::workload::SYSTEM_FUNDS);
    let mut chain = genesis.finish()?;
    // One thread, in order: the worst case for a node is not sharing the work.
    chain.set_pipeline(Pipeline {
        parallel_execute: false,
        ..Pipeline::ALL
    });
    Ok(chain)
}

/// [`BLOCK_TXS`] transactions calling `hostile` on `chain`, each different.
pub fn block(chain: &Chain, hostile: &Hostile) -> Vec<SignedTransaction> {
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    (0..BLOCK_TXS as u64)
        .map(|i| {
            SignedTransaction::unsigned(Transaction::new(
                chain.next_block_time_ms() + 30_000,
                (ref_block_num, ref_block_prefix),
                vec![Action {
                    account: hostile.account(),
                    name: "go".parse().expect("valid name"),
                    authorization: vec![],
                    data: i.to_le_bytes().to_vec(),
                }],
            ))
        })
        .collect()
}

/// Executes and commits one block of `hostile` on `chain`, timing only that.
pub fn run(chain: &mut Chain, hostile: &Hostile) -> Result<HostileRun, ChainError> {
    let txs = block(chain, hostile);
    let prepared = prepare_block(txs, false, &chain.pipeline(), &tally_chain::crypto::NoKeys);
    let start = Instant::now();
    let executed = chain.execute_block(chain.next_block_time_ms(), &prepared)?;
    chain.commit(Durability::Background)?;
    let elapsed = start.elapsed();
    let receipts: Vec<_> = executed
        .results
        .iter()
        .filter_map(TxResult::receipt)
        .collect();
    Ok(HostileRun {
        elapsed,
        included: receipts.len(),
        fuel: receipts.iter().map(|r| r.fuel_used).sum(),
    })
}
