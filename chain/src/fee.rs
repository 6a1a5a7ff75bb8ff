//! Fees in five dimensions (the Vryx post's design): bandwidth, compute, read, allocate and
//! write are each metered exactly, each priced on its own, and each price moves toward its
//! per-block target by EIP-1559's rule, so a flood of one kind of work raises the price of
//! that work and not of the others (EIP-7706 proposes the same per-resource base fees for
//! Ethereum).
//!
//! - A transaction's [`Usage`] is computed in one place, `Usage::of_tx`, from the
//!   transaction's size, its fuel and the journal's counts of what it read, created and
//!   wrote: the same numbers on every node and every path (sequential or speculative).
//! - It pays `Σ price_d × used_d / PRICE_SCALE` plus its tip, never more than its max fee
//!   ([`charge`]); its fuel is capped at what the max fee buys at the compute price, and one
//!   whose fee would still exceed its max fails. The fee is charged whether its actions
//!   succeed or not, but a failed transaction's writes are dropped, so it pays for (and its
//!   block counts) only bandwidth, compute and read: allocate and write count kept state.
//! - The base part is burned and the tip goes to the block's proposer; the chain keeps the
//!   running total burned in state ([`FeeState`]), so `Σ balances + burned` is the genesis
//!   supply at every height.
//! - After each block, [`FeeSchedule::next_prices`] moves each dimension's price by at most
//!   `1 / change_denominator` of itself toward the target: the next block's prices are a pure
//!   function of committed state.

use borsh::{BorshDeserialize, BorshSerialize};
use serde::{Deserialize, Serialize};
use tally_host_api::limits::{
    FUEL_PER_ACTION, FUEL_PER_TX, FUEL_PER_TX_BYTE, MAX_BLOCK_FUEL, MAX_TX_BYTES,
};

/// How many dimensions a fee has.
pub const DIMENSIONS: usize = 5;

/// One dimension of use, priced on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// The transaction's encoded bytes: what every node receives, stores and hashes.
    Bandwidth = 0,
    /// Fuel: contract instructions and host work, the transaction's intrinsic charge included.
    Compute = 1,
    /// Keys read ([`KEY_UNITS`] each) and bytes read, by `load` and `db_next`.
    Read = 2,
    /// Keys created ([`KEY_UNITS`] each) and their bytes (key and value): state every node
    /// keeps for as long as the key lives.
    Allocate = 3,
    /// Keys written or deleted ([`KEY_UNITS`] each) and bytes written (keys and values).
    Write = 4,
}

impl Dimension {
    /// Every dimension, in the order of [`Usage`] and [`Prices`].
    pub const ALL: [Dimension; DIMENSIONS] = [
        Dimension::Bandwidth,
        Dimension::Compute,
        Dimension::Read,
        Dimension::Allocate,
        Dimension::Write,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Bandwidth => "bandwidth",
            Dimension::Compute => "compute",
            Dimension::Read => "read",
            Dimension::Allocate => "allocate",
            Dimension::Write => "write",
        }
    }

    /// Its unit in reports.
    pub fn unit(self) -> &'static str {
        match self {
            Dimension::Bandwidth => "bytes",
            Dimension::Compute => "fuel",
            Dimension::Read | Dimension::Allocate | Dimension::Write => "units",
        }
    }
}

/// Units one key counts for in the read, allocate and write dimensions, beside its bytes: a
/// key costs a store about what 64 bytes of value do (an index entry and a cache line per
/// lookup; the log store keeps ~40 bytes of index per live key), so many small keys cannot
/// buy more work per unit than few large ones.
pub const KEY_UNITS: u64 = 64;

/// Prices are in millionths of the native coin's smallest unit per unit of use: fine enough
/// that a price of a few units can still move by an eighth, and a transfer's fee lands in the
/// thousands of coin units at the starting prices.
pub const PRICE_SCALE: u64 = 1_000_000;

/// Most bytes of transactions one block may carry: CometBFT's default `block.max_bytes` is
/// 22,020,096 (21 MiB), and a Tally devnet keeps it, so a block CometBFT accepts never fills
/// the bandwidth dimension first by accident; 16 MiB leaves room for the block's other parts.
/// At least one transaction of the largest size ([`MAX_TX_BYTES`]) fits.
pub const MAX_BLOCK_BYTES: u64 = 16 * 1024 * 1024;

/// Most read units one block may use: a million key reads (~1 µs each from a large state,
/// `FUEL_PER_KEY_READ`'s figure) is a second of reads, at [`KEY_UNITS`] each.
pub const MAX_BLOCK_READ: u64 = 1_000_000 * KEY_UNITS;

/// Most allocate units one block may use: 16 MiB of new state a block (256 Ki new keys of
/// no value), 32 MiB a second at two blocks a second, which the log store keeps indexed in RAM
/// (~40 bytes a key): a full day of full blocks is ~7 GiB of index, so a sustained flood at the
/// target (half this) is what the price must stop.
pub const MAX_BLOCK_ALLOCATE: u64 = 16 * 1024 * 1024;

/// Most write units one block may use: a million written keys at [`KEY_UNITS`] each, each
/// sorted, hashed into the checksum and appended to the log at commit (~1 µs a key,
/// `FUEL_PER_KEY_WRITE`'s figure): a second of commit work.
pub const MAX_BLOCK_WRITE: u64 = 1_000_000 * KEY_UNITS;

/// What a block may use of each dimension. Compute keeps the fuel bound the worst-case block
/// benchmark sized ([`MAX_BLOCK_FUEL`]).
pub const MAX_BLOCK_USAGE: [u64; DIMENSIONS] = [
    MAX_BLOCK_BYTES,
    MAX_BLOCK_FUEL,
    MAX_BLOCK_READ,
    MAX_BLOCK_ALLOCATE,
    MAX_BLOCK_WRITE,
];

const _: () = assert!(MAX_BLOCK_BYTES >= MAX_TX_BYTES as u64);

/// How much of one dimension a transaction or a block used.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    BorshSerialize,
    BorshDeserialize,
    Serialize,
    Deserialize,
)]
pub struct Usage(pub [u64; DIMENSIONS]);

impl Usage {
    /// A transaction's usage: `bytes` of encoding, `fuel` (intrinsic charge included) and what
    /// the journal counted while its actions ran. The one place usage is computed.
    pub(crate) fn of_tx(bytes: u64, fuel: u64, counts: &StateCounts) -> Self {
        let units = |keys: u64, bytes: u64| keys.saturating_mul(KEY_UNITS).saturating_add(bytes);
        Self([
            bytes,
            fuel,
            units(counts.reads, counts.read_bytes),
            units(counts.new_keys, counts.new_bytes),
            units(counts.writes, counts.write_bytes),
        ])
    }

    /// Its amount of dimension `d`.
    pub fn get(&self, d: Dimension) -> u64 {
        self.0[d as usize]
    }

    /// Adds `other`, each dimension saturating.
    pub fn add(&mut self, other: &Usage) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }
}

/// What the journal counts of a transaction's state access, for its [`Usage`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StateCounts {
    /// Keys looked up by `load`, and keys a `db_next` sought or stepped over.
    pub(crate) reads: u64,
    /// Bytes of the values (and keys, for `db_next`) those reads returned.
    pub(crate) read_bytes: u64,
    /// Keys written that held no value before.
    pub(crate) new_keys: u64,
    /// Bytes (key and value) of those keys.
    pub(crate) new_bytes: u64,
    /// Keys written or deleted.
    pub(crate) writes: u64,
    /// Bytes (keys and values) written.
    pub(crate) write_bytes: u64,
}

/// A price per unit of each dimension, in [`PRICE_SCALE`]ths of a coin unit.
pub type Prices = [u64; DIMENSIONS];

/// How a chain prices its use: fixed at genesis ([`crate::ChainConfig::fees`]), which writes
/// it into state (`keys::FEE_SCHEDULE`), so a node opened with another schedule is refused
/// rather than diverging at its first block.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, BorshSerialize, BorshDeserialize,
)]
pub struct FeeSchedule {
    /// The usage per block each price steers toward.
    pub target: [u64; DIMENSIONS],
    /// The most a block may use: it takes no further transaction once one is reached.
    pub max: [u64; DIMENSIONS],
    /// Prices of the first block.
    pub start_price: Prices,
    /// The lowest each price may fall to.
    pub min_price: Prices,
    /// A price moves by at most `1 / change_denominator` of itself a block (EIP-1559: 8).
    pub change_denominator: u64,
}

impl FeeSchedule {
    /// The schedule a public network should start from. Targets are half the maxima
    /// (EIP-1559's elasticity of 2). Starting prices make a token transfer (~320 bytes
    /// signed, ~30,000 fuel, 2 keys read and written) cost about 1,300 coin units (1,261 in
    /// `tally bench`), a quarter of it bandwidth and a quarter compute; creating state costs
    /// five times writing it.
    pub const STANDARD: Self = {
        let max = MAX_BLOCK_USAGE;
        let price = [1_000_000, 10_000, 1_000_000, 20_000_000, 4_000_000];
        Self {
            target: [max[0] / 2, max[1] / 2, max[2] / 2, max[3] / 2, max[4] / 2],
            max,
            start_price: price,
            min_price: price,
            change_denominator: 8,
        }
    };

    /// Every price zero, for ever: use is free. Only for a private chain whose every sender is
    /// trusted; on a public network anyone could then fill every block at no cost (the block
    /// maxima still bound each block).
    pub const ZERO: Self = Self {
        start_price: [0; DIMENSIONS],
        min_price: [0; DIMENSIONS],
        change_denominator: 1,
        ..Self::STANDARD
    };

    /// Whether every price is and stays zero: starting and minimum prices all zero (such a
    /// schedule's prices never move).
    pub fn is_zero(&self) -> bool {
        self.start_price == [0; DIMENSIONS] && self.min_price == [0; DIMENSIONS]
    }

    /// Checks that the schedule can run: targets within maxima, a block's maxima room for one
    /// transaction, a denominator of at least 1, starting prices not under the minima.
    pub fn validate(&self) -> Result<(), String> {
        for d in Dimension::ALL {
            let i = d as usize;
            if self.target[i] == 0 || self.target[i] > self.max[i] {
                return Err(format!(
                    "the {} target must be between 1 and its maximum {}",
                    d.name(),
                    self.max[i]
                ));
            }
            if self.start_price[i] < self.min_price[i] {
                return Err(format!(
                    "the {} starting price is below its minimum",
                    d.name()
                ));
            }
        }
        // A block must take at least one transaction of the largest size with an action's fuel.
        let one_tx = FUEL_PER_TX + FUEL_PER_TX_BYTE * MAX_TX_BYTES as u64 + FUEL_PER_ACTION;
        if self.max[Dimension::Compute as usize] < one_tx {
            return Err(format!(
                "the compute maximum must hold one transaction of the largest size and an \
                 action's fuel ({one_tx} fuel)"
            ));
        }
        if self.max[Dimension::Bandwidth as usize] < MAX_TX_BYTES as u64 {
            return Err(format!(
                "the bandwidth maximum must hold the largest transaction ({MAX_TX_BYTES} bytes)"
            ));
        }
        if self.change_denominator == 0 {
            return Err("the change denominator must be at least 1".into());
        }
        Ok(())
    }

    /// The prices of the block after one that paid `prices` and used `used`: each moves
    /// toward its target by `(used - target) / target / change_denominator` of itself, by at
    /// least one when above target (so a price at a few units still rises, as EIP-1559's base
    /// fee does), never below its minimum.
    pub fn next_prices(&self, prices: &Prices, used: &Usage) -> Prices {
        if self.is_zero() {
            // Free for ever: the one-unit rise would otherwise start charging a chain that
            // chose to be free.
            return *prices;
        }
        let mut next = *prices;
        for (i, price) in next.iter_mut().enumerate() {
            // Usage past the maximum (the last transaction a block takes may pass it) counts
            // as the maximum: a price moves by at most 1/change_denominator a block.
            let (p, u, t) = (
                u128::from(*price),
                u128::from(used.0[i].min(self.max[i])),
                u128::from(self.target[i].max(1)),
            );
            let denominator = t * u128::from(self.change_denominator.max(1));
            let moved = if u > t {
                let up = (p * (u - t) / denominator).max(1);
                (p + up).min(u128::from(u64::MAX))
            } else {
                p - p * (t - u) / denominator
            };
            *price = (moved as u64).max(self.min_price[i]);
        }
        next
    }
}

impl Default for FeeSchedule {
    fn default() -> Self {
        Self::STANDARD
    }
}

/// What one transaction pays.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    BorshSerialize,
    BorshDeserialize,
    Serialize,
    Deserialize,
)]
pub struct Fee {
    /// What it paid for each dimension at the block's prices (before any cut to its max
    /// fee), in coin units, rounded down.
    pub per_dimension: [u64; DIMENSIONS],
    /// The part burned.
    pub burned: u64,
    /// The part paid to the block's proposer.
    pub tip: u64,
}

impl Fee {
    /// All it paid.
    pub fn total(&self) -> u64 {
        self.burned + self.tip
    }
}

/// Refuses `tx` if its max fee cannot pay for its own size and intrinsic fuel at `prices`
/// (the next block's, [`crate::Chain::fee_state`]): what executing it would reject as
/// [`crate::TxError::MaxFeeTooLow`], for a mempool to refuse before any block carries it.
pub fn check_max_fee(prices: &Prices, tx: &crate::PreparedTx) -> Result<(), crate::TxError> {
    crate::phase::finalize::fee_terms(prices, tx).check()
}

/// [`check_max_fee`] of a transaction of `bytes` signed bytes offering `max_fee`: the same
/// rule, for a caller that kept only those two numbers (a mempool deciding, at every block's
/// prices, whether a transaction it holds may still be proposed).
pub fn check_max_fee_of(prices: &Prices, bytes: u64, max_fee: u64) -> Result<(), crate::TxError> {
    crate::exec::FeeTerms::of(prices, bytes, max_fee, 0).check()
}

/// The fee of `usage` at `prices` before any tip: `Σ price_d × used_d / PRICE_SCALE`,
/// rounded down once over the sum, saturating.
pub fn base_fee(prices: &Prices, usage: &Usage) -> u64 {
    let scaled = (0..DIMENSIONS)
        .map(|i| u128::from(prices[i]) * u128::from(usage.0[i]))
        .fold(0u128, u128::saturating_add);
    unscale(scaled)
}

/// `scaled / PRICE_SCALE`, saturating at `u64::MAX`. A product that fits in 64 bits (every
/// fee of an ordinary transaction) is divided as a `u64`, which the compiler turns into a
/// multiply: a `u128` division is a call to `__udivti3`, and a transfer made seven of them
/// (about 100 instructions, callgrind). The result is the same either way.
fn unscale(scaled: u128) -> u64 {
    match u64::try_from(scaled) {
        Ok(small) => small / PRICE_SCALE,
        Err(_) => u64::try_from(scaled / u128::from(PRICE_SCALE)).unwrap_or(u64::MAX),
    }
}

/// What a transaction that used `usage` at `prices`, offering `tip` and at most `max_fee`,
/// pays, and whether its base fee alone exceeds `max_fee` (the transaction then fails, and
/// `run_tx` charges it again on what a failed transaction counts). A tip is cut to what the
/// max fee leaves.
pub fn charge(prices: &Prices, usage: &Usage, tip: u64, max_fee: u64) -> (Fee, bool) {
    let mut per_dimension = [0u64; DIMENSIONS];
    for (i, paid) in per_dimension.iter_mut().enumerate() {
        *paid = unscale(u128::from(prices[i]) * u128::from(usage.0[i]));
    }
    let base = base_fee(prices, usage);
    let exceeded = base > max_fee;
    let burned = base.min(max_fee);
    let fee = Fee {
        per_dimension,
        burned,
        tip: tip.min(max_fee - burned),
    };
    (fee, exceeded)
}

/// The fee state a chain keeps in state (`keys::FEES`), written by every block: the next
/// block's prices, the last block's usage, and the coins burned since genesis.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    BorshSerialize,
    BorshDeserialize,
    Serialize,
    Deserialize,
)]
pub struct FeeState {
    /// The prices the next block pays.
    pub prices: Prices,
    /// What the last block used.
    pub usage: Usage,
    /// Coins burned by every block so far.
    pub burned: u64,
}

impl FeeState {
    /// The state before the first block: the schedule's starting prices.
    pub fn genesis(schedule: &FeeSchedule) -> Self {
        Self {
            prices: schedule.start_price,
            usage: Usage::default(),
            burned: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unscaling_in_64_bits_gives_the_128_bit_quotient() {
        let reference = |x: u128| u64::try_from(x / u128::from(PRICE_SCALE)).unwrap_or(u64::MAX);
        let max = u128::from(u64::MAX);
        let scale = u128::from(PRICE_SCALE);
        for x in [
            0,
            1,
            scale - 1,
            scale,
            scale + 1,
            max - 1,
            max,
            max + 1,
            max * scale - 1,
            max * scale,
            max * scale + 1,
            u128::MAX,
        ] {
            assert_eq!(unscale(x), reference(x), "{x}");
        }
    }

    #[test]
    fn each_price_moves_toward_its_own_target_by_at_most_an_eighth() {
        let s = FeeSchedule::STANDARD;
        let p = s.start_price;
        let mut used = Usage(s.target);
        assert_eq!(s.next_prices(&p, &used), p, "at target nothing moves");
        used.0[Dimension::Allocate as usize] = s.max[Dimension::Allocate as usize];
        let next = s.next_prices(&p, &used);
        let a = Dimension::Allocate as usize;
        assert_eq!(
            next[a],
            p[a] + p[a] / 8,
            "a full dimension rises by an eighth"
        );
        for d in Dimension::ALL {
            if d != Dimension::Allocate {
                assert_eq!(next[d as usize], p[d as usize], "{} moved", d.name());
            }
        }
        // An empty block lowers a raised price by an eighth, never below the minimum.
        let raised = [p[0] * 2, p[1] * 2, p[2] * 2, p[3] * 2, p[4] * 2];
        let down = s.next_prices(&raised, &Usage::default());
        for i in 0..DIMENSIONS {
            assert_eq!(down[i], raised[i] - raised[i] / 8);
        }
        assert_eq!(s.next_prices(&p, &Usage::default()), s.min_price);
    }

    #[test]
    fn a_price_of_one_still_rises_and_nothing_overflows() {
        let mut s = FeeSchedule::ZERO;
        s.change_denominator = 8;
        assert_eq!(
            s.next_prices(&[0; DIMENSIONS], &Usage(s.max)),
            [0; DIMENSIONS]
        );
        s.min_price = [1; DIMENSIONS];
        let used = Usage(s.max);
        assert_eq!(s.next_prices(&[1; DIMENSIONS], &used), [2; DIMENSIONS]);
        let top = s.next_prices(&[u64::MAX; DIMENSIONS], &Usage([u64::MAX; DIMENSIONS]));
        assert_eq!(top, [u64::MAX; DIMENSIONS]);
        let (fee, exceeded) = charge(&top, &Usage([u64::MAX; DIMENSIONS]), u64::MAX, 7);
        assert!(exceeded);
        assert_eq!(fee.total(), 7);
    }

    #[test]
    fn the_fee_is_the_priced_usage_plus_the_tip_and_never_more_than_the_max() {
        let prices = [PRICE_SCALE, 2 * PRICE_SCALE, 0, 0, PRICE_SCALE / 2];
        let usage = Usage([100, 10, 999, 5, 7]);
        let (fee, exceeded) = charge(&prices, &usage, 5, 1_000);
        assert!(!exceeded);
        assert_eq!(fee.per_dimension, [100, 20, 0, 0, 3]);
        // 100 + 20 + 3.5, rounded down once over the sum.
        assert_eq!((fee.burned, fee.tip), (123, 5));
        let (fee, exceeded) = charge(&prices, &usage, 5, 125);
        assert!(!exceeded, "only the tip is cut");
        assert_eq!((fee.burned, fee.tip), (123, 2));
        let (fee, exceeded) = charge(&prices, &usage, 5, 50);
        assert!(exceeded);
        assert_eq!((fee.burned, fee.tip), (50, 0));
    }
}
