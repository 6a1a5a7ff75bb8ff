//! The fee flood (issue 24): a funded attacker fills blocks with new state (the allocate
//! dimension) while honest senders keep making transfers, on the standard fee schedule.
//! Block by block, the allocate price rises by up to an eighth while the flood fills blocks
//! past their allocate target; a transfer, which creates no state, pays the same throughout.
//! The attacker offers a fixed max fee per flood transaction (ten times what one costs at the
//! starting prices): once the price passes that, its transactions fail, keep no state and
//! count no allocation, and the price settles where the attacker stops paying.
//! `tally bench --flood` runs it and plots each dimension's price.

use std::sync::Arc;

use tally_chain::fee::{DIMENSIONS, Dimension, FeeSchedule, Prices, Usage};
use tally_chain::system::{SETCODE, SYSTEM, SetCode};
use tally_chain::{
    Action, Chain, ChainConfig, ChainError, Name, Pipeline, SignedTransaction, StateStore,
    Transaction, TxResult,
};
use tally_runtime::{Runtime, RuntimeConfig};

use crate::workload::{self, BenchConfig, TransferGen};

/// The flooding contract's account.
pub const FLOOD: Name = match Name::from_str_const("flood") {
    Ok(n) => n,
    Err(_) => panic!("valid name"),
};

/// New keys one flood transaction stores, each of [`VALUE_BYTES`]: 14 x 64 KiB is 918 KB of
/// new state, within a transaction's write-byte limit (2 MiB) and an action's fuel (10 M: ~9.3 M
/// at 10 fuel a stored byte).
pub const KEYS_PER_FLOOD: u32 = 14;

/// Bytes of each value a flood stores: the largest value (`MAX_VALUE_LEN`).
pub const VALUE_BYTES: u32 = 64 * 1024;

/// The flooding contract: stores [`KEYS_PER_FLOOD`] new keys, numbered from the 8-byte base in
/// its message, each with [`VALUE_BYTES`] of value.
pub fn flood_wasm() -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
          (import "env" "read_message" (func $read (param i32 i32) (result i32)))
          (import "env" "store" (func $store (param i32 i32 i32 i32)))
          (memory (export "memory") 2)
          (func (export "apply") (param i64 i64 i64) (local $i i32)
            (drop (call $read (i32.const 0) (i32.const 8)))
            (block $done (loop $l
              (br_if $done (i32.ge_u (local.get $i) (i32.const {KEYS_PER_FLOOD})))
              (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1)))
              (call $store (i32.const 0) (i32.const 8) (i32.const 64) (i32.const {VALUE_BYTES}))
              (local.set $i (i32.add (local.get $i) (i32.const 1)))
              (br $l)))))"#
    ))
    .expect("the flood contract is valid WAT")
}

/// One block of the flood.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FloodBlock {
    /// Its height.
    pub height: u64,
    /// The prices it paid.
    pub prices: Prices,
    /// What it used.
    pub usage: Usage,
    /// The mean fee of its honest transfers.
    pub transfer_fee: f64,
    /// The mean fee of its flood transactions that kept their keys (0 if none did).
    pub flood_fee: f64,
    /// Flood transactions that kept their keys.
    pub floods_kept: u32,
    /// Flood transactions that failed (over their max fee).
    pub floods_failed: u32,
}

/// What the flood run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FloodReport {
    /// Transfers sent each block.
    pub transfers_per_block: u64,
    /// Flood transactions sent each block.
    pub floods_per_block: u64,
    /// The max fee each flood transaction offered.
    pub flood_max_fee: u64,
    /// Each block, in order.
    pub blocks: Vec<FloodBlock>,
}

/// Runs `blocks` blocks of `transfers` honest transfers and `floods` flood transactions each
/// (the floods first: the attacker outbids nobody, it just arrives first), on `store` (empty)
/// with the standard schedule, one thread. `progress` gets the blocks done.
pub fn run(
    store: Box<dyn StateStore>,
    blocks: u64,
    transfers: u64,
    floods: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<FloodReport, ChainError> {
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
    let config = BenchConfig {
        transfers: blocks * transfers,
        accounts: 10_000,
        signed: false,
        fees: FeeSchedule::STANDARD,
        ..BenchConfig::default()
    };
    let chain_config = ChainConfig {
        check_signatures: false,
        fees: FeeSchedule::STANDARD,
        ..ChainConfig::default()
    };
    let (mut chain, _) = workload::create(runtime, store, chain_config, &config)?;
    chain.set_pipeline(Pipeline {
        parallel_execute: false,
        ..Pipeline::ALL
    });
    deploy_flood(&mut chain)?;
    // The flood's cost at the starting prices, from one run of it: the attacker offers ten
    // times that.
    let probe = chain.run_block(vec![flood_tx(&chain, 0, workload::SYSTEM_FUNDS / 1_000)])?;
    let flood_max_fee = match probe.results[0].receipt() {
        Some(r) if r.is_success() => 10 * r.fee.total(),
        other => {
            return Err(ChainError::Config(format!(
                "the probe flood transaction did not succeed: {other:?}"
            )));
        }
    };
    let mut generator = TransferGen::new(&config);
    let mut out = Vec::with_capacity(blocks as usize);
    let mut base = 1u64 << 32;
    for done in 0..blocks {
        let height = chain.head().height + 1;
        let mut txs: Vec<SignedTransaction> = (0..floods)
            .map(|_| {
                base += u64::from(KEYS_PER_FLOOD);
                flood_tx(&chain, base, flood_max_fee)
            })
            .collect();
        txs.extend(generator.next_block(&chain, height, transfers));
        let executed = chain.run_block(txs)?;
        let (mut transfer_fees, mut flood_fees) = (Vec::new(), Vec::new());
        let mut floods_failed = 0;
        for (i, result) in executed.results.iter().enumerate() {
            let TxResult::Included(r) = result else {
                continue;
            };
            if (i as u64) < floods {
                match r.is_success() {
                    true => flood_fees.push(r.fee.total()),
                    false => floods_failed += 1,
                }
            } else {
                transfer_fees.push(r.fee.total());
            }
        }
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
        out.push(FloodBlock {
            height: executed.header.height,
            prices: executed.header.prices,
            usage: executed.header.usage,
            transfer_fee: mean(&transfer_fees),
            flood_fee: mean(&flood_fees),
            floods_kept: flood_fees.len() as u32,
            floods_failed,
        });
        progress(done + 1);
    }
    Ok(FloodReport {
        transfers_per_block: transfers,
        floods_per_block: floods,
        flood_max_fee,
        blocks: out,
    })
}

/// Deploys the flood contract, paid by the system account. (An unsigned chain registers no
/// keys, so the account needs no `newaccount`.)
fn deploy_flood(chain: &mut Chain) -> Result<(), ChainError> {
    let set = SetCode {
        account: FLOOD,
        code: flood_wasm(),
    };
    let actions = vec![Action {
        account: SYSTEM,
        name: SETCODE,
        authorization: vec![FLOOD],
        data: borsh::to_vec(&set).expect("in memory"),
    }];
    let tx = Transaction {
        payer: SYSTEM,
        ..Transaction::new(chain.next_block_time_ms() + 30_000, chain.tapos(), actions)
    };
    let block = chain.run_block(vec![SignedTransaction::unsigned(tx)])?;
    match &block.results[0] {
        TxResult::Included(r) if r.is_success() => Ok(()),
        other => Err(ChainError::Config(format!(
            "deploying the flood contract: {other:?}"
        ))),
    }
}

/// A flood transaction storing keys from `base`, paid by the system account with `max_fee`.
fn flood_tx(chain: &Chain, base: u64, max_fee: u64) -> SignedTransaction {
    let action = Action {
        account: FLOOD,
        name: Name::from_str_const("go").expect("a name"),
        authorization: Vec::new(),
        data: base.to_le_bytes().to_vec(),
    };
    SignedTransaction::unsigned(Transaction {
        max_fee,
        ..Transaction::new(
            chain.next_block_time_ms() + 30_000,
            chain.tapos(),
            vec![action],
        )
    })
}

/// Each dimension's price over the run, relative to its first block's, as a table.
pub fn table(report: &FloodReport) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "fee flood: {} flood transactions ({} new keys of {} KiB each, max fee {}) and {} \
         transfers a block, standard schedule\n",
        report.floods_per_block,
        KEYS_PER_FLOOD,
        VALUE_BYTES / 1024,
        report.flood_max_fee,
        report.transfers_per_block
    );
    let _ = write!(out, "  {:>6}", "block");
    for d in Dimension::ALL {
        let _ = write!(out, " {:>10}", d.name());
    }
    let _ = writeln!(
        out,
        " {:>12} {:>12} {:>6} {:>6}",
        "transfer fee", "flood fee", "kept", "failed"
    );
    let Some(first) = report.blocks.first() else {
        return out;
    };
    let step = (report.blocks.len() / 20).max(1);
    for (i, b) in report.blocks.iter().enumerate() {
        if i % step != 0 && i + 1 != report.blocks.len() {
            continue;
        }
        let _ = write!(out, "  {:>6}", b.height);
        for d in 0..DIMENSIONS {
            let ratio = b.prices[d] as f64 / first.prices[d].max(1) as f64;
            let _ = write!(out, " {:>9.2}x", ratio);
        }
        let _ = writeln!(
            out,
            " {:>12.0} {:>12.0} {:>6} {:>6}",
            b.transfer_fee, b.flood_fee, b.floods_kept, b.floods_failed
        );
    }
    out
}
