//! Resident memory of prepared contracts with large memories (issue 10, item 4).
//!
//! Run: `cargo run --release -p tally-runtime --example contract_rss`
//!
//! Prepares 24 contracts that each declare 512 pages (32 MiB) of memory with one small data
//! segment, runs one action of each that writes its first and last byte, and prints the
//! process's resident set size (VmRSS, from /proc/self/status) before and after.

use tally_host_api::Name;
use tally_host_api::testing::MapHost;
use tally_runtime::{Entry, Runtime, RuntimeConfig};

/// VmRSS in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib / 1024.0
}

fn main() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let before = rss_mib();
    let mut contracts = Vec::new();
    for i in 0..24 {
        let wat = format!(
            r#"(module (memory (export "memory") 512)
                 (data (i32.const 0) "contract {i}")
                 (func (export "apply") (param i64 i64 i64)
                   (i32.store8 (i32.const 0) (i32.const 1))
                   (i32.store8 (i32.const 33554431) (i32.const 1))))"#
        );
        let contract = runtime.prepare(&wat::parse_str(&wat).unwrap()).unwrap();
        let entry = Entry::Action {
            receiver: Name(1),
            code: Name(1),
            action: Name(1),
        };
        let receipt = runtime
            .execute(&contract, entry, &mut MapHost::default())
            .unwrap();
        assert!(receipt.is_success(), "{receipt:?}");
        contracts.push(contract);
    }
    let after = rss_mib();
    println!(
        "24 contracts of 512 pages, one action each: RSS {before:.1} MiB -> {after:.1} MiB \
         (+{:.1} MiB)",
        after - before
    );
}
