//! Baselines a run is compared with: the same transfer compiled into the node (the limit for
//! any runtime) and the same `.wasm` in the wasmi interpreter.
//!
//! A comparison runs every engine on its own chain, created from the same genesis, over the
//! same transactions, *interleaved* block by block (Tally, native, wasmi, Tally, native, …;
//! [`interleave`]), and reports each ratio as its median over the blocks with its spread
//! ([`Spread`]). Run one after another, a slow minute on a shared machine (another build, a
//! noisy neighbour) lands on one engine only and moves the ratio by ±30%; interleaved, it
//! slows the blocks of every engine around it alike, and the per-block ratio holds.

#[cfg(feature = "evm")]
pub mod evm;
pub mod wasmi;

use crate::report::Spread;
use crate::workload::{BenchContract, BenchReport, Run};
use tally_chain::NativeContract;

/// A baseline engine of `tally bench --baseline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// The transfer compiled into the node: [`native_simplecoin`].
    Native,
    /// The same `.wasm` in the wasmi interpreter: [`wasmi::executor`].
    Wasmi,
}

impl Engine {
    /// Its name in reports and on the command line.
    pub fn label(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Wasmi => "wasmi",
        }
    }

    /// What runs `contract`'s transfers on this engine's chain, in place of the runtime
    /// (see [`tally_chain::Chain::set_native`]).
    ///
    /// # Errors
    /// wasmi refused the contract.
    pub fn executor(self, contract: BenchContract) -> anyhow::Result<NativeContract> {
        Ok(match self {
            Self::Native => std::sync::Arc::new(native_simplecoin),
            Self::Wasmi => wasmi::executor(contract.wasm())?,
        })
    }
}

/// A benchmark that executes one block per call, so several can run interleaved.
pub trait Stepper {
    /// Executes the next block and returns its transfers per second, or `None` when the
    /// workload is done.
    ///
    /// # Errors
    /// The engine failed (a node fault, not a failed transfer).
    fn step(&mut self) -> anyhow::Result<Option<f64>>;

    /// Transfers done so far.
    fn done(&self) -> u64;
}

impl Stepper for Run<'_> {
    fn step(&mut self) -> anyhow::Result<Option<f64>> {
        Ok(Run::step(self)?)
    }

    fn done(&self) -> u64 {
        Run::done(self)
    }
}

/// Steps `runs` in turn, one block each (A B C A B C …), until every one is done, and
/// returns each one's transfers per second per block. `progress` gets the first run's
/// transfers done after each round.
///
/// # Errors
/// An engine failed, or the runs do not have the same number of blocks (they must run the
/// same workload for their blocks to pair up).
pub fn interleave(
    runs: &mut [&mut dyn Stepper],
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut tps = vec![Vec::new(); runs.len()];
    loop {
        let mut stepped = 0;
        for (run, tps) in runs.iter_mut().zip(&mut tps) {
            if let Some(t) = run.step()? {
                tps.push(t);
                stepped += 1;
            }
        }
        if stepped == 0 {
            break;
        }
        if let Some(first) = runs.first() {
            progress(first.done());
        }
        anyhow::ensure!(
            stepped == runs.len(),
            "the interleaved runs have different numbers of blocks: they must run the same \
             workload"
        );
    }
    Ok(tps)
}

/// `tally[i] / base[i]` for every block `i` both ran.
pub fn per_block_ratios(tally: &[f64], base: &[f64]) -> Vec<f64> {
    tally
        .iter()
        .zip(base)
        .map(|(t, b)| t / b.max(f64::MIN_POSITIVE))
        .collect()
}

/// A baseline's result next to Tally's: its own throughput, and Tally's per-block ratio to it.
#[derive(Debug, Clone)]
pub struct Compared {
    /// The baseline's own run.
    pub report: BenchReport,
    /// Tally's transfers per second over the baseline's, block by block.
    pub ratios: Vec<f64>,
    /// Their median and spread.
    pub spread: Spread,
}

/// Compares `base` with `tally`, block by block.
pub fn compare(tally: &BenchReport, base: BenchReport) -> Compared {
    let tps = |r: &BenchReport| r.per_block.iter().map(|p| p.tps).collect::<Vec<_>>();
    let ratios = per_block_ratios(&tps(tally), &tps(&base));
    Compared {
        spread: Spread::of(&ratios),
        ratios,
        report: base,
    }
}

/// simplecoin's `transfer` (contracts/simplecoin.c) in plain Rust over the same host calls:
/// the `native` baseline of `tally bench`, the limit for any runtime.
pub fn native_simplecoin(
    host: &mut dyn tally_host_api::Host,
) -> Result<(), tally_host_api::HostError> {
    use tally_host_api::{Abort, AbortCode};
    let mut msg = [0u8; 24];
    let data = host.message();
    let n = data.len().min(24);
    msg[..n].copy_from_slice(&data[..n]);
    let word = |i: usize| u64::from_le_bytes(msg[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (from, to, amount) = (word(0), word(1), word(2));
    let balance =
        |v: Option<&[u8]>| -> Option<u64> { Some(u64::from_le_bytes(v?.try_into().ok()?)) };
    let Some(mut from_balance) = balance(host.load(&from.to_le_bytes())?) else {
        return Err(Abort::new(AbortCode::AssertFailed, "no existing balance").into());
    };
    if from_balance < amount {
        return Err(Abort::new(AbortCode::AssertFailed, "insufficient funds").into());
    }
    let mut to_balance = balance(host.load(&to.to_le_bytes())?).unwrap_or(0);
    to_balance = to_balance.wrapping_add(amount);
    from_balance -= amount;
    if from_balance != 0 {
        host.store(&from.to_le_bytes(), &from_balance.to_le_bytes())?;
    } else {
        host.remove(&from.to_le_bytes())?;
    }
    host.store(&to.to_le_bytes(), &to_balance.to_le_bytes())
}
