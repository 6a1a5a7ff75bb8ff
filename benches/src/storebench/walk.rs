//! Ordered iteration through a contract (issue 23): contracts/ordered.c walks its own keys
//! with one `db_next` host call per key, in one action, as a contract listing a table would.
//! What it costs per key in time (the host call, the journal's merge with the store's seek,
//! the copy into the contract's memory) and in fuel
//! ([`FUEL_PER_KEY_SEEK`](tally_host_api::limits::FUEL_PER_KEY_SEEK) and a fuel per byte).
//! `benches/benches/store_iter.rs` prints it after the store-level table.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use borsh::BorshSerialize;
use tally_chain::{
    Action, Chain, ChainConfig, Genesis, LogOptions, LogStore, MemoryStore, Name,
    SignedTransaction, StateStore, Transaction,
};
use tally_runtime::{Runtime, RuntimeConfig};

use super::Store;
use crate::sampler::Rng;

/// contracts/ordered.wasm (recipe: contracts/README.md).
pub const ORDERED_WASM: &[u8] = include_bytes!("../../../contracts/ordered.wasm");

/// ordered.c's `walk` mode that counts keys without returning them.
const MODE_COUNT: u8 = 8;
/// `db_next`'s flag for no upper bound.
const HI_OPEN: u32 = 8;

#[derive(BorshSerialize)]
struct Walk {
    lo: Vec<u8>,
    hi: Vec<u8>,
    flags: u32,
    mode: u8,
    limit: u32,
}

/// What walks through the contract measured.
#[derive(Debug, Clone)]
pub struct WalkFigures {
    /// The store the chain ran on.
    pub store: Store,
    /// Keys the contract held.
    pub keys: u64,
    /// Keys each walk visited.
    pub walk: u32,
    /// Keys walked per second, the median of the walks (each a block of one action).
    pub keys_per_second: f64,
    /// Fuel per key walked, beyond what a walk of no key used.
    pub fuel_per_key: f64,
}

/// A chain on `store` whose contract `ordered` holds `keys` keys (`k` and 8 bytes
/// big-endian, values of 8 bytes), written at genesis.
fn chain(store: Store, dir: &Path, keys: u64) -> anyhow::Result<Chain> {
    let db: Box<dyn StateStore> = match store {
        Store::Log => Box::new(LogStore::open(dir, LogOptions::default())?),
        _ => Box::new(MemoryStore::new(512)),
    };
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
    let config = ChainConfig {
        check_signatures: false,
        ..ChainConfig::default()
    };
    let mut builder = Chain::genesis(runtime, db, config)?;
    builder.apply(&Genesis::default())?;
    builder.deploy(ordered(), ORDERED_WASM)?;
    for i in 0..keys {
        let mut key = vec![b'k'];
        key.extend_from_slice(&(i * 16).to_be_bytes());
        builder.allocate(ordered(), &key, &i.to_le_bytes());
    }
    Ok(builder.finish()?)
}

fn ordered() -> Name {
    Name::from_str_const("ordered").expect("a name")
}

/// Runs one walk of `limit` keys from `lo` in a block of its own; its fuel.
fn walk(chain: &mut Chain, lo: Vec<u8>, limit: u32) -> anyhow::Result<u64> {
    let data = borsh::to_vec(&Walk {
        lo,
        hi: Vec::new(),
        flags: HI_OPEN,
        mode: MODE_COUNT,
        limit,
    })?;
    let (ref_block_num, ref_block_prefix) = chain.tapos();
    let tx = SignedTransaction::unsigned(Transaction::new(
        chain.next_block_time_ms() + 30_000,
        (ref_block_num, ref_block_prefix),
        vec![Action {
            account: ordered(),
            name: Name::from_str_const("walk").expect("a name"),
            authorization: Vec::new(),
            data,
        }],
    ));
    let block = chain.run_block(vec![tx])?;
    let receipt = block.results[0]
        .receipt()
        .ok_or_else(|| anyhow::anyhow!("the walk was not included"))?;
    if let Some(failure) = receipt.failure() {
        anyhow::bail!("the walk failed: {failure:?}");
    }
    Ok(receipt.fuel_used)
}

/// Walks of `walk` keys from random keys, `runs` times, over `keys` keys on `store`.
pub fn run(
    store: Store,
    dir: &Path,
    keys: u64,
    walk_keys: u32,
    runs: u32,
) -> anyhow::Result<WalkFigures> {
    let mut chain = chain(store, dir, keys)?;
    let mut rng = Rng::new(23);
    let start_key = |rng: &mut Rng| {
        let mut key = vec![b'k'];
        let from = rng.below(keys.saturating_sub(u64::from(walk_keys)).max(1));
        key.extend_from_slice(&(from * 16).to_be_bytes());
        key
    };
    let empty = walk(&mut chain, start_key(&mut rng), 0)?;
    let mut times = Vec::new();
    let mut fuel = 0;
    for _ in 0..runs {
        let lo = start_key(&mut rng);
        let started = Instant::now();
        fuel = walk(&mut chain, lo, walk_keys)?;
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    Ok(WalkFigures {
        store,
        keys,
        walk: walk_keys,
        keys_per_second: f64::from(walk_keys) / median,
        fuel_per_key: (fuel - empty) as f64 / f64::from(walk_keys),
    })
}
