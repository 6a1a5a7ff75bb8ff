//! The iteration workload (issue 23): ordered reads of one contract's storage, made the way a
//! next-key host call makes them (one stateless seek per key, each just past the last) and
//! the way a random lookup of "the first key after K" does, and what keeping an order costs
//! a store in memory.
//!
//! The state is a token's balances, laid out as the chain lays out contract storage
//! (`[0x10, contract, owner]`, owners random), all merged into the log store's run, then
//! blocks of changes since that merge: updates, deletions and new keys. Those are what the
//! log store's order holds (`tally_chain::store::log::order`), beside the index's 12 bytes
//! per key. `benches/benches/store_iter.rs` runs it and times the same seeks with criterion.

use std::ops::Bound;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tally_chain::store::{Direction, KeyRange};
use tally_chain::{Commit, Durability, LogOptions, LogStore, StateStore};

use super::{Store, WorkloadKind, block};
use crate::sampler::Rng;

/// The namespace of the balances: the chain's contract prefix and an account name.
const NAMESPACE: [u8; 9] = [0x10, 0xc6, 0x7a, 0x44, 0x2b, 0x60, 0x39, 0x9d, 0x00];

/// Changes per block, in setup and in the changes since the merge: `tally bench`'s default
/// block of 5,000 transfers changes up to 10,000 balances.
const CHANGES_PER_BLOCK: usize = 10_000;

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IterConfig {
    /// Balances merged into the run at the start.
    pub keys: u64,
    /// Fractions of them changed since the merge: updated, deleted, and as many new keys
    /// created.
    pub updated: f64,
    /// See `updated`.
    pub deleted: f64,
    /// See `updated`.
    pub created: f64,
    /// Bytes of each key after the namespace: 8 for an account name, 32 for a hash (keys
    /// that share less once sorted cost the order more).
    pub key_bytes: usize,
    /// Random seeks to time.
    pub seeks: u64,
    /// Keys each walk visits, one seek per key.
    pub walk: u64,
    /// Walks to time.
    pub walks: u64,
    /// Seed of the keys and the seeks.
    pub seed: u64,
}

impl Default for IterConfig {
    fn default() -> Self {
        Self {
            keys: 1_000_000,
            updated: 0.2,
            deleted: 0.02,
            created: 0.02,
            key_bytes: 8,
            seeks: 200_000,
            walk: 1_000,
            walks: 200,
            seed: 23,
        }
    }
}

/// What one store did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IterRun {
    /// The store's label.
    pub store: String,
    /// Live keys at the end.
    pub keys: u64,
    /// Keys changed since the merge that the store's index holds (log store; else 0).
    pub unmerged_keys: u64,
    /// Bytes the index holds (log store).
    pub index_bytes: u64,
    /// Keys the store's order of unmerged keys holds (log store; else 0).
    pub ordered_keys: u64,
    /// Bytes that order holds.
    pub order_bytes: u64,
    /// Bytes the store's own structures hold (index, order, cache, run index and filter).
    pub memory_bytes: u64,
    /// Random seeks per second: half forward from a random key, half backward.
    pub seeks_per_sec: f64,
    /// Keys per second of walks, one seek past the last key per key.
    pub walk_keys_per_sec: f64,
    /// A digest of every key and value the walks and seeks found: equal on every store.
    pub digest: u64,
    /// Seconds to build the state (not timed).
    pub setup_seconds: f64,
}

impl IterRun {
    /// Order bytes per key it holds.
    pub fn order_bytes_per_key(&self) -> f64 {
        self.order_bytes as f64 / self.ordered_keys.max(1) as f64
    }

    /// Index bytes per key it holds.
    pub fn index_bytes_per_key(&self) -> f64 {
        self.index_bytes as f64 / self.unmerged_keys.max(1) as f64
    }
}

/// A random key of the namespace.
fn random_key(rng: &mut Rng, key_bytes: usize, out: &mut Vec<u8>) {
    let mut suffix = Vec::new();
    rng.fill(&mut suffix, key_bytes);
    out.clear();
    out.extend_from_slice(&NAMESPACE);
    out.extend_from_slice(&suffix);
}

/// The end of the namespace's keys: the least key above all that start with its prefix.
pub fn namespace_end() -> Vec<u8> {
    tally_chain::store::prefix_end(&NAMESPACE).expect("not all 0xff")
}

/// Commits `changes` (any order, each key once) as block `height`.
fn commit(
    store: &mut dyn StateStore,
    height: &mut u64,
    mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
) -> anyhow::Result<()> {
    changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let commit = Commit {
        durability: Durability::None,
        retain_from: *height,
    };
    store.commit(block(*height, changes), commit)?;
    *height += 1;
    Ok(())
}

/// Opens `store` in `dir` and builds `config`'s state in it: the balances, merged into the
/// run (log store), then the changes since.
pub fn build(store: Store, dir: &Path, config: &IterConfig) -> anyhow::Result<Box<dyn StateStore>> {
    let mut rng = Rng::new(config.seed);
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(config.keys as usize);
    let mut seen = std::collections::HashSet::new();
    let mut key = Vec::new();
    while keys.len() < config.keys as usize {
        random_key(&mut rng, config.key_bytes, &mut key);
        if seen.insert(key.clone()) {
            keys.push(key.clone());
        }
    }
    let value = |rng: &mut Rng| rng.next_u64().to_le_bytes().to_vec();
    let mut height = 0;
    let mut db = match store {
        // No merge but the one below: the changes since stay unmerged.
        Store::Log => Opened::Log(Box::new(LogStore::open(
            dir,
            LogOptions {
                snapshot_min_bytes: u64::MAX,
                ..LogOptions::default()
            },
        )?)),
        _ => Opened::Other(super::open(store, dir, WorkloadKind::Transfers)?),
    };
    for chunk in keys.chunks(CHANGES_PER_BLOCK) {
        let changes = chunk.iter().map(|k| (k.clone(), Some(value(&mut rng))));
        commit(db.store(), &mut height, changes.collect())?;
    }
    if let Opened::Log(log) = &mut db {
        log.snapshot()?;
    }
    // The changes since the merge, a block at a time, each key at most once a block.
    let n = |fraction: f64| (fraction * config.keys as f64) as usize;
    let (mut updates, mut deletes, mut creates) =
        (n(config.updated), n(config.deleted), n(config.created));
    let mut changes = std::collections::HashMap::new();
    while updates + deletes + creates > 0 {
        let pick = rng.below((updates + deletes + creates) as u64) as usize;
        if pick < updates {
            let k = &keys[rng.below(keys.len() as u64) as usize];
            if changes.insert(k.clone(), Some(value(&mut rng))).is_none() {
                updates -= 1;
            }
        } else if pick < updates + deletes {
            let i = rng.below(keys.len() as u64) as usize;
            if !changes.contains_key(&keys[i]) {
                changes.insert(keys.swap_remove(i), None);
                deletes -= 1;
            }
        } else {
            random_key(&mut rng, config.key_bytes, &mut key);
            if seen.insert(key.clone()) {
                changes.insert(key.clone(), Some(value(&mut rng)));
                keys.push(key.clone());
                creates -= 1;
            }
        }
        if changes.len() == CHANGES_PER_BLOCK {
            commit(db.store(), &mut height, changes.drain().collect())?;
        }
    }
    if !changes.is_empty() {
        commit(db.store(), &mut height, changes.drain().collect())?;
    }
    Ok(match db {
        Opened::Log(log) => log,
        Opened::Other(other) => other,
    })
}

/// A store being built: the log store by its type, for its snapshot.
enum Opened {
    Log(Box<LogStore>),
    Other(Box<dyn StateStore>),
}

impl Opened {
    fn store(&mut self) -> &mut dyn StateStore {
        match self {
            Self::Log(log) => &mut **log,
            Self::Other(other) => &mut **other,
        }
    }
}

/// Folds `entry` into `digest` (FNV-1a over lengths and bytes).
fn fold(digest: &mut u64, entry: Option<&(Vec<u8>, Vec<u8>)>) {
    let mut eat = |bytes: &[u8]| {
        for &b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            *digest = (*digest ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    };
    match entry {
        Some((k, v)) => {
            eat(k);
            eat(v);
        }
        None => eat(b"none"),
    }
}

/// One random seek: the first key after a random key of the namespace, or the last before
/// it (by `rng`), as a next-key call from a random position makes it.
pub fn random_seek(
    store: &dyn StateStore,
    rng: &mut Rng,
    key_bytes: usize,
    key: &mut Vec<u8>,
    end: &[u8],
) -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>> {
    random_key(rng, key_bytes, key);
    let (range, dir) = if rng.below(2) == 0 {
        let after = KeyRange::new(Bound::Excluded(key), Bound::Excluded(end));
        (after, Direction::Forward)
    } else {
        let before = KeyRange::new(Bound::Included(&NAMESPACE), Bound::Excluded(key));
        (before, Direction::Backward)
    };
    Ok(store.seek(range, dir)?)
}

/// One walk of `n` keys from a random key, forward, one seek per key just past the last (a
/// contract's loop over a next-key host call); folds what it finds into `digest`. Returns
/// the keys found.
pub fn walk(
    store: &dyn StateStore,
    rng: &mut Rng,
    config: &IterConfig,
    end: &[u8],
    digest: &mut u64,
) -> anyhow::Result<u64> {
    let mut last = Vec::new();
    random_key(rng, config.key_bytes, &mut last);
    let range = KeyRange::new(Bound::Included(&NAMESPACE), Bound::Excluded(end));
    let mut found = 0;
    while found < config.walk {
        let Some(entry) = store.seek(range.past(&last, Direction::Forward), Direction::Forward)?
        else {
            break;
        };
        fold(digest, Some(&entry));
        last = entry.0;
        found += 1;
    }
    Ok(found)
}

/// Builds `config`'s state in `store` (in `dir`) and times its seeks and walks.
pub fn run(store: Store, dir: &Path, config: &IterConfig) -> anyhow::Result<IterRun> {
    let start = Instant::now();
    let db = build(store, dir, config)?;
    let setup_seconds = start.elapsed().as_secs_f64();
    let end = namespace_end();
    let mut rng = Rng::new(config.seed ^ 0x5eed);
    let mut digest = 0xcbf2_9ce4_8422_2325;
    let mut key = Vec::new();
    let t = Instant::now();
    for _ in 0..config.seeks {
        let found = random_seek(&*db, &mut rng, config.key_bytes, &mut key, &end)?;
        fold(&mut digest, found.as_ref());
    }
    let seeks_per_sec = config.seeks as f64 / t.elapsed().as_secs_f64().max(1e-9);
    let t = Instant::now();
    let mut walked = 0;
    for _ in 0..config.walks {
        walked += walk(&*db, &mut rng, config, &end, &mut digest)?;
    }
    let walk_keys_per_sec = walked as f64 / t.elapsed().as_secs_f64().max(1e-9);
    let stats = db.stats();
    let keys = db
        .range(
            KeyRange::new(Bound::Included(&NAMESPACE), Bound::Excluded(&end)),
            Direction::Forward,
        )?
        .count() as u64;
    Ok(IterRun {
        store: store.label().to_string(),
        keys,
        unmerged_keys: if store == Store::Log {
            stats.index_keys
        } else {
            0
        },
        index_bytes: stats.index_bytes,
        ordered_keys: stats.ordered_keys,
        order_bytes: stats.order_bytes,
        memory_bytes: stats.memory_bytes,
        seeks_per_sec,
        walk_keys_per_sec,
        digest,
        setup_seconds,
    })
}

/// The comparison table of `runs`.
pub fn table(config: &IterConfig, runs: &[IterRun]) -> String {
    let mut out = format!(
        "iteration: {} keys of {} bytes, since the merge {:.0}% updated, {:.0}% deleted, {:.0}% \
         created; {} random seeks, {} walks of {} keys\n",
        config.keys,
        NAMESPACE.len() + config.key_bytes,
        config.updated * 100.0,
        config.deleted * 100.0,
        config.created * 100.0,
        config.seeks,
        config.walks,
        config.walk
    );
    out += &format!(
        "{:<8} {:>10} {:>12} {:>10} {:>12} {:>10} {:>12} {:>11} {:>16}\n",
        "store",
        "seeks/s",
        "walk keys/s",
        "unmerged",
        "index B/key",
        "ordered",
        "order B/key",
        "memory MiB",
        "digest"
    );
    for r in runs {
        out += &format!(
            "{:<8} {:>10.0} {:>12.0} {:>10} {:>12.1} {:>10} {:>12.1} {:>11.1} {:>16x}\n",
            r.store,
            r.seeks_per_sec,
            r.walk_keys_per_sec,
            r.unmerged_keys,
            r.index_bytes_per_key(),
            r.ordered_keys,
            r.order_bytes_per_key(),
            r.memory_bytes as f64 / (1 << 20) as f64,
            r.digest
        );
    }
    out += "unmerged: keys changed since the merge (the log store's index); ordered: keys its \
            order holds. B/key: bytes each holds per key it holds. memory: the store's own \
            structures (index, order, value cache, run index and filter).\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeks and walks find the same keys and values on every store.
    #[test]
    fn every_store_finds_the_same_entries() {
        let config = IterConfig {
            keys: 30_000,
            seeks: 2_000,
            walks: 20,
            walk: 500,
            ..IterConfig::default()
        };
        let mut stores = vec![Store::Memory, Store::Log];
        if cfg!(feature = "rocksdb") {
            stores.push(Store::Rocksdb);
        }
        let runs: Vec<IterRun> = stores
            .into_iter()
            .map(|store| {
                let dir = tempfile::tempdir().unwrap();
                run(store, dir.path(), &config).unwrap()
            })
            .collect();
        for r in &runs {
            assert_eq!(r.digest, runs[0].digest, "{}", table(&config, &runs));
            assert_eq!(r.keys, 30_000, "{}", r.store);
        }
        let log = runs.iter().find(|r| r.store == "log").unwrap();
        // The changes since the merge: 20% updated, 2% deleted, 2% created.
        assert_eq!(log.unmerged_keys, 7_200);
        assert_eq!(log.ordered_keys, 7_200);
    }
}
