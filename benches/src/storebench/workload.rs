//! The workloads of `tally storebench`: each turns a seed into a deterministic stream of
//! blocks (sorted changes) and point reads for a state store.
//!
//! - `griffin` (shared/seeds/004): loops of puts in batches of 100, each loop followed by as
//!   many random gets of keys written so far. Keys are 32-byte hashes and values 67 bytes,
//!   the commonest MPT node size of that technote.
//! - `iavl` (shared/seeds/002): changesets of three stores (bank, staking, lockup) with the
//!   notebook's key and value size means and deviations, initial and final sizes, changes per
//!   version and delete fractions.
//! - `transfers`: the write pattern of `tally bench`: per transfer, read the sender's key and
//!   both balances, write both balances; accounts drawn from Zipf-Mandelbrot
//!   (s = 1.0001, v = 2.7) as in the Vryx test.
//!
//! Randomness comes from [`crate::sampler`], shared with `tally bench`'s workload; its tests
//! pin the streams, so a change there that would alter these workloads is noticed.

use std::collections::HashMap as FxHashMap;

use crate::sampler::{Rng, ZipfMandelbrot};

/// One step of a workload: reads, then (maybe) one block of writes.
#[derive(Debug, Default)]
pub struct Step {
    /// Keys to read, in order.
    pub reads: Vec<Vec<u8>>,
    /// The block's changes, sorted by key, each key once (empty: no commit).
    pub changes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Operations this step counts (puts, gets or transfers).
    pub ops: u64,
    /// Whether this step is setup (not timed as part of the workload).
    pub setup: bool,
}

/// Reads committed state, for workloads that write what they read.
pub type Get<'a> = dyn FnMut(&[u8]) -> anyhow::Result<Option<Vec<u8>>> + 'a;

/// A deterministic workload.
pub trait Workload {
    /// The next step, or `None` at the end. `get` reads committed state (transfers read
    /// balances to write new ones).
    fn next(&mut self, get: &mut Get<'_>) -> anyhow::Result<Option<Step>>;
    /// Steps per reporting interval.
    fn interval(&self) -> u64;
    /// What an op is, for the table.
    fn unit(&self) -> &'static str;
    /// The parameters, for the report.
    fn describe(&self) -> serde_json::Value;
    /// Total steps, for the progress bar.
    fn total_steps(&self) -> u64;
}

fn sorted(changes: FxHashMap<Vec<u8>, Option<Vec<u8>>>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut v: Vec<_> = changes.into_iter().collect();
    v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The GriffinDB technote's workload.
pub struct Griffin {
    loops: u64,
    per_loop: u64,
    batch: u64,
    loop_no: u64,
    put_next: u64,
    gets_left: u64,
    rng: Rng,
    value_len: usize,
}

/// Keys of the griffin workload: 32 bytes derived from the sequence number, like the hashes
/// of MPT nodes.
fn griffin_key(seq: u64) -> Vec<u8> {
    let mut rng = Rng::new(seq ^ 0x6772_6966_6669_6e00);
    let mut key = Vec::with_capacity(32);
    rng.fill(&mut key, 32);
    key
}

impl Griffin {
    /// `loops` loops of `per_loop` puts in batches of `batch`, each followed by `per_loop`
    /// gets.
    pub fn new(loops: u64, per_loop: u64, batch: u64, seed: u64) -> Self {
        Self {
            loops,
            per_loop,
            batch,
            loop_no: 0,
            put_next: 0,
            gets_left: 0,
            rng: Rng::new(seed),
            value_len: 67,
        }
    }
}

/// Reads per step in the get phases (one step reads this many keys).
const GETS_PER_STEP: u64 = 1000;

impl Workload for Griffin {
    fn next(&mut self, _get: &mut Get<'_>) -> anyhow::Result<Option<Step>> {
        if self.loop_no >= self.loops {
            return Ok(None);
        }
        let loop_end = (self.loop_no + 1) * self.per_loop;
        if self.put_next < loop_end {
            let n = self.batch.min(loop_end - self.put_next);
            let mut changes = Vec::with_capacity(n as usize);
            let mut value = Vec::new();
            for seq in self.put_next..self.put_next + n {
                self.rng.fill(&mut value, self.value_len);
                changes.push((griffin_key(seq), Some(value.clone())));
            }
            self.put_next += n;
            if self.put_next == loop_end {
                self.gets_left = self.per_loop;
            }
            changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return Ok(Some(Step {
                reads: Vec::new(),
                changes,
                ops: n,
                setup: false,
            }));
        }
        let n = GETS_PER_STEP.min(self.gets_left);
        let reads = (0..n)
            .map(|_| griffin_key(self.rng.below(loop_end)))
            .collect();
        self.gets_left -= n;
        if self.gets_left == 0 {
            self.loop_no += 1;
        }
        Ok(Some(Step {
            reads,
            changes: Vec::new(),
            ops: n,
            setup: false,
        }))
    }

    fn interval(&self) -> u64 {
        // Ten points per loop.
        (self.per_loop / self.batch / 10).max(1)
    }

    fn unit(&self) -> &'static str {
        "puts+gets"
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "loops": self.loops, "puts_per_loop": self.per_loop, "batch": self.batch,
            "gets_per_loop": self.per_loop, "key_bytes": 32, "value_bytes": self.value_len,
        })
    }

    fn total_steps(&self) -> u64 {
        self.loops * (self.per_loop.div_ceil(self.batch) + self.per_loop.div_ceil(GETS_PER_STEP))
    }
}

/// One store of the IAVL notebook's changesets.
#[derive(Debug, Clone)]
pub struct IavlStore {
    /// Its name in the notebook.
    pub name: &'static str,
    /// Mean key size, bytes.
    pub key_mean: f64,
    /// Standard deviation of the key size.
    pub key_std: f64,
    /// Mean value size, bytes.
    pub value_mean: f64,
    /// Standard deviation of the value size.
    pub value_std: f64,
    /// Keys before the first version.
    pub initial_size: u64,
    /// Keys after the last version.
    pub final_size: u64,
    /// Changes per version.
    pub change_per_version: u64,
    /// Share of the changes that delete a key.
    pub delete_fraction: f64,
}

/// The notebook's "mixed-small" stores (10,000 versions).
pub fn iavl_stores() -> Vec<IavlStore> {
    vec![
        IavlStore {
            name: "bank",
            key_mean: 56.0,
            key_std: 3.0,
            value_mean: 100.0,
            value_std: 1200.0,
            initial_size: 35_000,
            final_size: 220_020,
            change_per_version: 1840,
            delete_fraction: 0.25,
        },
        IavlStore {
            name: "staking",
            key_mean: 24.0,
            key_std: 2.0,
            value_mean: 12263.0,
            value_std: 22967.0,
            initial_size: 35_000,
            final_size: 160_069,
            change_per_version: 305,
            delete_fraction: 0.25,
        },
        IavlStore {
            name: "lockup",
            key_mean: 56.0,
            key_std: 3.0,
            value_mean: 1936.0,
            value_std: 29261.0,
            initial_size: 35_000,
            final_size: 260_020,
            change_per_version: 363,
            delete_fraction: 0.29,
        },
    ]
}

/// The IAVL notebook's changesets.
pub struct Iavl {
    stores: Vec<(IavlStore, Vec<u64>, u64)>,
    versions: u64,
    notebook_versions: u64,
    version: u64,
    setup_done: bool,
    rng: Rng,
    scale: f64,
}

impl Iavl {
    /// `versions` versions of the notebook's stores, with sizes and changes scaled by
    /// `scale`; growth per version is the notebook's (over its 10,000 versions).
    pub fn new(versions: u64, scale: f64, seed: u64) -> Self {
        let stores = iavl_stores()
            .into_iter()
            .map(|mut s| {
                s.initial_size = ((s.initial_size as f64) * scale).round().max(1.0) as u64;
                s.final_size = ((s.final_size as f64) * scale).round().max(1.0) as u64;
                s.change_per_version =
                    ((s.change_per_version as f64) * scale).round().max(1.0) as u64;
                (s, Vec::new(), 0)
            })
            .collect();
        Self {
            stores,
            versions,
            notebook_versions: 10_000,
            version: 0,
            setup_done: false,
            rng: Rng::new(seed),
            scale,
        }
    }

    /// The key of entry `id` of store `s` ("s/k:<name>/" then pseudo-random bytes of a
    /// normally distributed length).
    fn key(store: &IavlStore, id: u64) -> Vec<u8> {
        let mut rng = Rng::new(id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ store.name.len() as u64);
        let len = rng.normal(store.key_mean, store.key_std, 4, 1024) as usize;
        let mut key = format!("s/k:{}/", store.name).into_bytes();
        let mut rest = Vec::new();
        rng.fill(&mut rest, len);
        key.extend_from_slice(&rest);
        key
    }

    fn value(rng: &mut Rng, store: &IavlStore) -> Vec<u8> {
        // The notebook's deviations exceed the means: the sizes are heavy-tailed. A normal
        // clipped at 1 byte keeps the mean near the notebook's and the tail long.
        let len = rng.normal(store.value_mean, store.value_std, 1, 256 << 10) as usize;
        let mut v = Vec::new();
        rng.fill(&mut v, len);
        v
    }
}

impl Workload for Iavl {
    fn next(&mut self, _get: &mut Get<'_>) -> anyhow::Result<Option<Step>> {
        if !self.setup_done {
            // The initial sizes, in setup blocks of at most 10,000 entries.
            let mut changes = FxHashMap::new();
            for (store, live, next_id) in &mut self.stores {
                while (live.len() as u64) < store.initial_size && changes.len() < 10_000 {
                    let id = *next_id;
                    *next_id += 1;
                    live.push(id);
                    changes.insert(
                        Self::key(store, id),
                        Some(Self::value(&mut self.rng, store)),
                    );
                }
            }
            if changes.is_empty() {
                self.setup_done = true;
            } else {
                let ops = changes.len() as u64;
                return Ok(Some(Step {
                    reads: Vec::new(),
                    changes: sorted(changes),
                    ops,
                    setup: true,
                }));
            }
        }
        if self.version >= self.versions {
            return Ok(None);
        }
        let mut changes = FxHashMap::new();
        let nb = self.notebook_versions as f64;
        for (store, live, next_id) in &mut self.stores {
            let c = store.change_per_version;
            let growth = (store.final_size as f64 - store.initial_size as f64) / nb;
            let deletes = (c as f64 * store.delete_fraction).round() as u64;
            // Inserts so that the size grows by `growth` per version on average.
            let target = store.initial_size as f64 + growth * (self.version + 1) as f64;
            let inserts_needed = (target - live.len() as f64 + deletes as f64)
                .max(0.0)
                .round() as u64;
            let inserts = inserts_needed.min(c - deletes.min(c));
            let updates = c.saturating_sub(deletes + inserts);
            for _ in 0..deletes.min(live.len() as u64) {
                let i = self.rng.below(live.len() as u64) as usize;
                let id = live.swap_remove(i);
                changes.insert(Self::key(store, id), None);
            }
            for _ in 0..updates.min(live.len() as u64) {
                let id = live[self.rng.below(live.len() as u64) as usize];
                changes.insert(
                    Self::key(store, id),
                    Some(Self::value(&mut self.rng, store)),
                );
            }
            for _ in 0..inserts {
                let id = *next_id;
                *next_id += 1;
                live.push(id);
                changes.insert(
                    Self::key(store, id),
                    Some(Self::value(&mut self.rng, store)),
                );
            }
        }
        self.version += 1;
        let ops = changes.len() as u64;
        Ok(Some(Step {
            reads: Vec::new(),
            changes: sorted(changes),
            ops,
            setup: false,
        }))
    }

    fn interval(&self) -> u64 {
        (self.versions / 50).max(1)
    }

    fn unit(&self) -> &'static str {
        "changes"
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "versions": self.versions, "scale": self.scale,
            "stores": self.stores.iter().map(|(s, _, _)| serde_json::json!({
                "store_key": s.name, "key_mean": s.key_mean, "key_std_dev": s.key_std,
                "value_mean": s.value_mean, "value_std_dev": s.value_std,
                "initial_size": s.initial_size, "final_size": s.final_size,
                "change_per_version": s.change_per_version, "delete_fraction": s.delete_fraction,
            })).collect::<Vec<_>>(),
        })
    }

    fn total_steps(&self) -> u64 {
        let initial: u64 = self.stores.iter().map(|(s, _, _)| s.initial_size).sum();
        initial.div_ceil(10_000) + self.versions
    }
}

/// The `tally bench` write pattern at the storage level.
pub struct Transfers {
    accounts: u64,
    blocks: u64,
    per_block: u64,
    block: u64,
    set_up: u64,
    zipf: ZipfMandelbrot,
    rng: Rng,
}

/// Accounts per setup block.
const SETUP_CHUNK: u64 = 100_000;
/// The account the bench's token lives at; its balances are its storage.
const SIMPLECOIN: tally_chain::Name = match tally_chain::Name::from_str_const("simplecoin") {
    Ok(name) => name,
    Err(_) => panic!("valid name"),
};

/// A balance key, laid out as the chain lays out contract storage.
fn balance_key(account: u64) -> Vec<u8> {
    tally_chain::state::keys::contract(SIMPLECOIN, &account.to_le_bytes())
}

/// An account's public-key key, as the chain lays it out.
fn account_key(account: u64) -> Vec<u8> {
    tally_chain::state::keys::account(tally_chain::Name(account)).to_vec()
}

impl Transfers {
    /// `blocks` blocks of `per_block` transfers among `accounts` Zipf-distributed accounts.
    pub fn new(accounts: u64, blocks: u64, per_block: u64, seed: u64) -> Self {
        Self {
            accounts,
            blocks,
            per_block,
            block: 0,
            set_up: 0,
            zipf: ZipfMandelbrot::vryx(accounts),
            rng: Rng::new(seed),
        }
    }
}

impl Workload for Transfers {
    fn next(&mut self, get: &mut Get<'_>) -> anyhow::Result<Option<Step>> {
        if self.set_up < self.accounts {
            let end = (self.set_up + SETUP_CHUNK).min(self.accounts);
            let mut changes = Vec::with_capacity(2 * (end - self.set_up) as usize);
            for a in self.set_up..end {
                changes.push((balance_key(a), Some(1_000_000u64.to_le_bytes().to_vec())));
                let mut key = [0u8; 32];
                key[..8].copy_from_slice(&(a % 4096).to_le_bytes());
                changes.push((account_key(a), Some(key.to_vec())));
            }
            changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            let ops = end - self.set_up;
            self.set_up = end;
            return Ok(Some(Step {
                reads: Vec::new(),
                changes,
                ops,
                setup: true,
            }));
        }
        if self.block >= self.blocks {
            return Ok(None);
        }
        self.block += 1;
        // The block's own writes shadow committed state, as the chain's journal does.
        let mut writes: FxHashMap<Vec<u8>, Option<Vec<u8>>> = FxHashMap::new();
        let mut reads = 0u64;
        for _ in 0..self.per_block {
            let from = self.zipf.sample(&mut self.rng);
            let mut to = self.zipf.sample(&mut self.rng);
            while to == from && self.accounts > 1 {
                to = self.zipf.sample(&mut self.rng);
            }
            // The authority check reads the sender's key.
            get(&account_key(from))?;
            reads += 1;
            let mut balance = |account: u64, writes: &FxHashMap<_, Option<Vec<u8>>>| {
                let key = balance_key(account);
                let value = match writes.get(&key) {
                    Some(v) => v.clone(),
                    None => {
                        reads += 1;
                        get(&key)?
                    }
                };
                anyhow::Ok(
                    value
                        .and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?)))
                        .unwrap_or(0),
                )
            };
            let (fb, tb) = (balance(from, &writes)?, balance(to, &writes)?);
            if fb >= 1 {
                writes.insert(balance_key(from), Some((fb - 1).to_le_bytes().to_vec()));
                writes.insert(balance_key(to), Some((tb + 1).to_le_bytes().to_vec()));
            }
        }
        let _ = reads;
        Ok(Some(Step {
            reads: Vec::new(),
            changes: sorted(writes),
            ops: self.per_block,
            setup: false,
        }))
    }

    fn interval(&self) -> u64 {
        (self.blocks / 50).max(1)
    }

    fn unit(&self) -> &'static str {
        "transfers"
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "accounts": self.accounts, "blocks": self.blocks, "transfers_per_block": self.per_block,
            "distribution": "zipf-mandelbrot s=1.0001 v=2.7",
            "reads_per_transfer": 3, "writes_per_transfer": 2,
        })
    }

    fn total_steps(&self) -> u64 {
        self.accounts.div_ceil(SETUP_CHUNK) + self.blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_steps() {
        let run = |seed| {
            let mut w = Iavl::new(5, 0.01, seed);
            let mut none = |_: &[u8]| Ok(None);
            let mut all = Vec::new();
            while let Some(step) = w.next(&mut none).unwrap() {
                assert!(step.changes.windows(2).all(|p| p[0].0 < p[1].0));
                all.push(step.changes);
            }
            all
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }
}
