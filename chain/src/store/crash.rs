//! Forced crash points, for tests that kill the process at an exact step of the store's
//! background work (a rotation, a snapshot, a compaction) rather than at a random moment.
//!
//! `TALLY_TEST_CRASH_AT=NAME` (or `NAME:N`, the Nth time) aborts the process when the store
//! reaches point `NAME`, as `kill -9` would: no destructor runs, nothing is flushed or synced.
//! Unset (always, outside tests), a point costs one load of an initialised `OnceLock`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a crash point.
pub const ENV: &str = "TALLY_TEST_CRASH_AT";

fn armed() -> &'static Option<(String, u64)> {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var(ENV).ok()?;
        Some(match spec.split_once(':') {
            Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1).max(1)),
            None => (spec, 1),
        })
    })
}

/// Aborts the process if `name` is the armed point (and this is its armed occurrence).
pub fn point(name: &str) {
    static HITS: AtomicU64 = AtomicU64::new(0);
    if let Some((armed, n)) = armed()
        && armed == name
        && HITS.fetch_add(1, Ordering::SeqCst) + 1 >= *n
    {
        eprintln!("tally: crash point {name} reached ({ENV}); aborting");
        std::process::abort();
    }
}
