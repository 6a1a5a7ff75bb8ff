//! The module cache's tiers: prepared contracts in memory (bounded by bytes, least recently
//! used evicted first), authenticated native code on disk ([`crate::disk_cache`]), and the
//! compiler.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use wasmtime::{Engine, Module};

use crate::cache_key::{self, CacheKey};
use crate::counters::{Counters, bump};
use crate::error::RuntimeError;
use crate::{CodeHash, Contract, RuntimeConfig, disk_cache};

/// Prepared contracts in memory, bounded by the bytes they hold.
pub(crate) struct ContractCache {
    inner: Mutex<Lru>,
    limit: usize,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<CodeHash, (Arc<Contract>, u64)>,
    bytes: usize,
    clock: u64,
}

impl ContractCache {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            inner: Mutex::new(Lru::default()),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // Every update leaves the map and its byte count consistent before anything can panic.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The contract, marked as just used.
    pub(crate) fn get(&self, code_hash: &CodeHash) -> Option<Arc<Contract>> {
        let mut lru = self.lock();
        lru.clock += 1;
        let now = lru.clock;
        let (contract, used) = lru.entries.get_mut(code_hash)?;
        *used = now;
        Some(contract.clone())
    }

    /// Adds `contract`, then evicts the least recently used contracts (never the one just
    /// added) until the cache fits its limit. Returns the evicted code hashes.
    pub(crate) fn insert(&self, contract: Arc<Contract>) -> Vec<CodeHash> {
        let mut lru = self.lock();
        lru.clock += 1;
        let now = lru.clock;
        let hash = *contract.code_hash();
        let weight = contract.weight();
        if let Some((old, _)) = lru.entries.insert(hash, (contract, now)) {
            lru.bytes -= old.weight();
        }
        lru.bytes += weight;
        let mut evicted = Vec::new();
        while lru.bytes > self.limit && lru.entries.len() > 1 {
            let Some(oldest) = lru
                .entries
                .iter()
                .filter(|(h, _)| **h != hash)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(h, _)| *h)
            else {
                break;
            };
            if let Some((gone, _)) = lru.entries.remove(&oldest) {
                lru.bytes -= gone.weight();
                evicted.push(oldest);
            }
        }
        evicted
    }

    /// Bytes the cached contracts hold.
    pub(crate) fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// The disk tier: a directory of entries and the key that authenticates them.
pub(crate) struct DiskTier {
    pub dir: PathBuf,
    pub key: CacheKey,
}

impl DiskTier {
    /// The disk tier `config` asks for, its directory created and its key loaded (or
    /// created); `None` without a `cache_dir`.
    pub(crate) fn open(config: &RuntimeConfig) -> Result<Option<Self>, RuntimeError> {
        let Some(dir) = &config.cache_dir else {
            return Ok(None);
        };
        std::fs::create_dir_all(dir).map_err(|source| RuntimeError::CacheIo {
            path: dir.clone(),
            source,
        })?;
        let key_path = config
            .cache_key
            .clone()
            .or_else(cache_key::default_key_path)
            .ok_or_else(|| RuntimeError::CacheKey {
                path: PathBuf::from("cache.key"),
                problem: format!(
                    "no home or configuration directory to keep it in; set {} to a file path",
                    cache_key::CACHE_KEY_ENV
                ),
            })?;
        Ok(Some(Self {
            key: cache_key::load_or_create(&key_path, dir)?,
            dir: dir.clone(),
        }))
    }
}

/// The compiled form of `wasm` (the instrumented module of the upload whose hash is
/// `code_hash`): from disk if an authenticated entry is there, else compiled and written.
pub(crate) fn load_or_compile(
    engine: &Engine,
    fingerprint: &[u8; 32],
    disk: Option<&DiskTier>,
    counters: &Counters,
    wasm: &[u8],
    code_hash: &CodeHash,
) -> Result<Module, RuntimeError> {
    let path = disk.map(|disk| disk_cache::entry_path(&disk.dir, code_hash));
    if let (Some(disk), Some(path)) = (disk, &path) {
        if let Some(payload) = disk_cache::read_entry(path, &disk.key, fingerprint, code_hash) {
            // SAFETY: `Module::deserialize` runs native code from its input, so the input must
            // be wasmtime's own output for this engine. The entry's HMAC verified under this
            // node's cache key, which never leaves the user's configuration directory (mode
            // 0600) and is not in the data directory, so only this node's runtime (or another
            // with the same user's key) wrote it, right after compiling the module whose hash
            // is `code_hash` with an engine of the same fingerprint (wasmtime version, Tally's
            // instrumentation, engine settings and ISA baseline), which the header binds too.
            match unsafe { Module::deserialize(engine, &payload) } {
                Ok(module) => {
                    bump(&counters.disk_hits);
                    return Ok(module);
                }
                Err(_) => bump(&counters.disk_rejected),
            }
        } else if path.exists() {
            bump(&counters.disk_rejected);
        }
    }
    // A module that passed validation is within every limit Cranelift has, so a failure here
    // is the node's (memory, mmap), not the module's: it must not become a verdict on it.
    let module = Module::new(engine, wasm).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
    bump(&counters.compiles);
    if let (Some(disk), Some(path)) = (disk, &path) {
        let written = module.serialize().ok().and_then(|bytes| {
            disk_cache::write_entry(path, &disk.key, fingerprint, code_hash, &bytes).ok()
        });
        if written.is_none() {
            bump(&counters.disk_write_errors);
        }
    }
    Ok(module)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tally_host_api::{Host, HostError, Name};

    use crate::{Entry, Runtime, RuntimeConfig, cache_key, disk_cache};

    #[derive(Default)]
    struct MapHost(HashMap<Vec<u8>, Vec<u8>>);

    impl Host for MapHost {
        fn message(&self) -> &[u8] {
            &[]
        }
        fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
            Ok(self.0.get(key).map(Vec::as_slice))
        }
        fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
            self.0.insert(key.to_vec(), value.to_vec());
            Ok(())
        }
        fn remove(&mut self, key: &[u8]) -> Result<(), HostError> {
            self.0.remove(key);
            Ok(())
        }
        fn is_authorized(&self, _: Name) -> bool {
            false
        }
    }

    /// A contract whose `apply` stores `answer` under key "r".
    fn answering(answer: u8) -> Vec<u8> {
        wat::parse_str(format!(
            r#"(module
              (import "env" "store" (func $store (param i32 i32 i32 i32)))
              (memory (export "memory") 1)
              (data (i32.const 0) "r{}")
              (func (export "apply") (param i64 i64 i64)
                (call $store (i32.const 0) (i32.const 1) (i32.const 1) (i32.const 1))))"#,
            char::from(answer)
        ))
        .unwrap()
    }

    fn answer(rt: &Runtime, wasm: &[u8]) -> u8 {
        let c = rt.prepare(wasm).unwrap();
        let mut host = MapHost::default();
        let entry = Entry::Action {
            receiver: Name(1),
            code: Name(1),
            action: Name(1),
        };
        assert!(rt.execute(&c, entry, &mut host).unwrap().is_success());
        host.0[&b"r"[..]][0]
    }

    fn cached(root: &std::path::Path, who: &str) -> RuntimeConfig {
        RuntimeConfig {
            cache_dir: Some(root.join(who)),
            cache_key: Some(root.join(format!("{who}.key"))),
            ..RuntimeConfig::default()
        }
    }

    #[test]
    fn issue_10_a_forged_cache_entry_is_recompiled_never_run() {
        let root = tempfile::tempdir().unwrap();
        let (x, y) = (answering(b'x'), answering(b'y'));
        let hash =
            |wasm: &[u8]| -> [u8; 32] { <sha2::Sha256 as sha2::Digest>::digest(wasm).into() };

        // The attacker compiles X on a node of their own, with the same tally binary...
        let attacker_config = cached(root.path(), "attacker");
        let attacker = Runtime::new(attacker_config.clone()).unwrap();
        assert_eq!(answer(&attacker, &x), b'x');
        let attacker_key = cache_key::load_or_create(
            attacker_config.cache_key.as_ref().unwrap(),
            attacker_config.cache_dir.as_ref().unwrap(),
        )
        .unwrap();
        let fingerprint = *attacker.fingerprint();
        let x_native = disk_cache::read_entry(
            &disk_cache::entry_path(attacker_config.cache_dir.as_ref().unwrap(), &hash(&x)),
            &attacker_key,
            &fingerprint,
            &hash(&x),
        )
        .expect("the attacker's own entry");

        // ...and plants it in the victim's data directory as the code of Y: a well-formed
        // entry with every header field right, authenticated the only way the attacker can.
        let victim_config = cached(root.path(), "victim");
        std::fs::create_dir_all(victim_config.cache_dir.as_ref().unwrap()).unwrap();
        disk_cache::write_entry(
            &disk_cache::entry_path(victim_config.cache_dir.as_ref().unwrap(), &hash(&y)),
            &attacker_key,
            &fingerprint,
            &hash(&y),
            &x_native,
        )
        .unwrap();

        let victim = Runtime::new(victim_config.clone()).unwrap();
        assert_eq!(
            answer(&victim, &y),
            b'y',
            "the victim ran the attacker's code"
        );
        let stats = victim.cache_stats();
        assert_eq!(
            (stats.disk_hits, stats.disk_rejected, stats.compiles),
            (0, 1, 1),
            "{stats:?}"
        );
        // The entry was rewritten under the victim's key: a restart loads it.
        let restarted = Runtime::new(victim_config).unwrap();
        assert_eq!(answer(&restarted, &y), b'y');
        assert_eq!(restarted.cache_stats().disk_hits, 1);
    }
}
