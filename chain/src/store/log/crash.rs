//! Forced crash points and I/O errors, for tests that kill the process, or fail a write, at an
//! exact step of the store's work (a rotation, a snapshot, a background sync) rather than at a
//! random moment.
//!
//! `TALLY_TEST_CRASH_AT=NAME` (or `NAME:N`, the Nth time) aborts the process when the store
//! reaches point `NAME`, as `kill -9` would: no destructor runs, nothing is flushed or synced.
//! `TALLY_TEST_EIO_AT=NAME` (or `NAME:N`) fails I/O step `NAME` with `EIO` instead, as a dying
//! disk would. Unset (always, outside tests), a point costs one load of an initialised
//! `OnceLock`.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a crash point.
pub const ENV: &str = "TALLY_TEST_CRASH_AT";

/// The environment variable that arms an I/O error.
pub const EIO_ENV: &str = "TALLY_TEST_EIO_AT";

/// `EIO`, what a failing disk answers.
const EIO: i32 = 5;

/// An armed point: its name and the occurrence that fires.
type Armed = Option<(String, u64)>;

fn parse(var: &str) -> Armed {
    let spec = std::env::var(var).ok()?;
    Some(match spec.split_once(':') {
        Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1).max(1)),
        None => (spec, 1),
    })
}

/// Whether `name` is the point armed in `armed`, at its armed occurrence (counted in `hits`).
fn fires(armed: &Armed, hits: &AtomicU64, name: &str) -> bool {
    armed
        .as_ref()
        .is_some_and(|(armed, n)| armed == name && hits.fetch_add(1, Ordering::SeqCst) + 1 == *n)
}

/// Aborts the process if `name` is the armed point (and this is its armed occurrence).
pub fn point(name: &str) {
    static ARMED: OnceLock<Armed> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    if fires(ARMED.get_or_init(|| parse(ENV)), &HITS, name) {
        eprintln!("tally: crash point {name} reached ({ENV}); aborting");
        std::process::abort();
    }
}

/// Fails with `EIO` if `name` is the armed I/O step (and this is its armed occurrence).
pub fn io_point(name: &str) -> io::Result<()> {
    static ARMED: OnceLock<Armed> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    if fires(ARMED.get_or_init(|| parse(EIO_ENV)), &HITS, name) {
        return Err(io::Error::from_raw_os_error(EIO));
    }
    Ok(())
}
