//! What joining by state sync costs the node that joins, without the network (issue 25):
//! a chain of N accounts (`tally bench`'s genesis and transfers) snapshots its state; a new
//! store restores the snapshot from the served chunks, checking each as a joining node does.
//!
//! ```text
//! cargo run --release -p tally-bench --example snapshot_join -- 10000000 zipf
//! ```
//!
//! Prints one JSON line: the time of each phase (the first state file, the background merge,
//! serving every chunk, checking and keeping them, writing the store), sizes, and the peak
//! RSS of the process. The restore runs in a child process of its own (`restore DIR`), so
//! its peak RSS is the joining node's alone.

use std::sync::Arc;
use std::time::Instant;

use tally_bench::proc::peak_rss_bytes;
use tally_bench::sampler::Distribution;
use tally_bench::workload::{self, BenchConfig, TransferGen};
use tally_chain::snapshot::{Applied, Restore, SnapshotSchedule};
use tally_chain::{
    ChainConfig, Durability, FeeSchedule, LogOptions, LogStore, SnapshotStore, StateStore,
};
use tally_runtime::{Runtime, RuntimeConfig};

/// Snapshots every 4 blocks, committed 2 later: the run reaches block 6 and publishes.
const SCHEDULE: SnapshotSchedule = SnapshotSchedule::every(4, 2);

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("restore") {
        return restore(std::path::Path::new(&args[2]));
    }
    let accounts: u64 = args.get(1).map_or(Ok(1_000_000), |a| a.parse())?;
    let dist = match args.get(2).map(String::as_str) {
        Some("zipf") => Distribution::Zipf,
        _ => Distribution::Uniform,
    };
    let tmp = tempfile::tempdir()?;
    let config = BenchConfig {
        accounts,
        dist,
        signed: false,
        block_size: 5_000,
        fees: FeeSchedule::ZERO,
        ..BenchConfig::default()
    };
    let chain_config = ChainConfig {
        check_signatures: false,
        fees: FeeSchedule::ZERO,
        snapshots: SCHEDULE,
        ..ChainConfig::default()
    };
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default())?);
    let store = LogStore::open(tmp.path().join("store"), LogOptions::default())?;
    let start = Instant::now();
    let (mut chain, _) = workload::create(runtime, Box::new(store), chain_config, &config)?;
    let genesis_s = start.elapsed().as_secs_f64();
    let snapshots = Arc::new(SnapshotStore::open(&tmp.path().join("snapshots"), 2)?);
    let start = Instant::now();
    chain.set_snapshots(snapshots.clone())?;
    let first_state_s = start.elapsed().as_secs_f64();
    let mut transfers = TransferGen::new(&config);
    let mut wait_s = 0.0;
    let mut block_s = Vec::new();
    for height in 1..=6 {
        let txs = transfers.next_block(&chain, height, config.block_size as u64);
        let start = Instant::now();
        chain.run_block(txs)?;
        chain.commit(Durability::Immediate).ok();
        let took = start.elapsed().as_secs_f64();
        if height == 6 {
            wait_s = took;
        }
        block_s.push(took);
    }
    let offer = snapshots
        .list()
        .into_iter()
        .next()
        .expect("a snapshot at block 6");
    // Serve every chunk into a directory, as the peers' chunks would arrive.
    let served = tmp.path().join("served");
    std::fs::create_dir_all(&served)?;
    let start = Instant::now();
    let mut bytes = 0u64;
    for i in 0..offer.chunks {
        let chunk = snapshots
            .load_chunk(offer.height, offer.format, i)?
            .expect("served");
        bytes += chunk.len() as u64;
        std::fs::write(served.join(format!("{i:08}")), chunk)?;
    }
    let serve_s = start.elapsed().as_secs_f64();
    std::fs::write(
        served.join("offer"),
        borsh::to_vec(&(offer.height, offer.metadata.clone(), chain.head_id()))?,
    )?;
    let validator_rss = peak_rss_bytes();
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["restore", served.to_str().expect("utf-8")])
        .output()?;
    anyhow::ensure!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let restored: serde_json::Value = serde_json::from_slice(&child.stdout)?;
    let report = serde_json::json!({
        "accounts": accounts,
        "dist": format!("{dist:?}"),
        "genesis_s": genesis_s,
        "first_state_file_s": first_state_s,
        "block_s": block_s,
        "commit_block_waiting_for_merge_s": wait_s,
        "chunks": offer.chunks,
        "snapshot_bytes": bytes,
        "serve_all_chunks_s": serve_s,
        "source_peak_rss_bytes": validator_rss,
        "restore": restored,
    });
    println!("{report}");
    Ok(())
}

/// The joining node: offer, apply every chunk, write the store.
fn restore(served: &std::path::Path) -> anyhow::Result<()> {
    let (height, metadata, app_hash): (u64, Vec<u8>, [u8; 32]) =
        borsh::from_slice(&std::fs::read(served.join("offer"))?)?;
    let manifest = borsh::from_slice(&metadata)?;
    let offer = tally_chain::snapshot::Offer::of(height, &manifest);
    let start = Instant::now();
    let mut restore = Restore::offer(&served.join("work"), &offer, &app_hash)?;
    for i in 0..offer.chunks {
        let chunk = std::fs::read(served.join(format!("{i:08}")))?;
        let applied = restore.apply(i, &chunk)?;
        assert_eq!(applied == Applied::Done, i + 1 == offer.chunks);
    }
    let apply_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut store = LogStore::open(served.join("store"), LogOptions::default())?;
    let snapshots = SnapshotStore::open(&served.join("snapshots"), 2)?;
    let head = restore.finish(&mut store, &snapshots)?;
    store.sync()?;
    let finish_s = start.elapsed().as_secs_f64();
    anyhow::ensure!(head.id() == app_hash);
    println!(
        "{}",
        serde_json::json!({
            "check_and_keep_chunks_s": apply_s,
            "write_store_s": finish_s,
            "total_s": apply_s + finish_s,
            "peak_rss_bytes": peak_rss_bytes(),
        })
    );
    Ok(())
}
