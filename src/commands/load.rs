//! `tally load`: signed transfers against a running network, committed transfers per second.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tally_bench::sampler::Distribution;

use crate::node::bundle::MAX_BUNDLE_TXS;
use crate::node::load::{self, LoadConfig, LoadReport};

/// How accounts are picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dist {
    /// Every account equally likely.
    Uniform,
    /// Zipf-Mandelbrot (s=1.0001, v=2.7): a few hot accounts.
    Zipf,
}

/// Sign transfers, submit them to CometBFT, and measure committed transfers per second.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally load --rpc 127.0.0.1:26601 --transfers 200000
  tally load --rpc 127.0.0.1:26601,127.0.0.1:26611,127.0.0.1:26621,127.0.0.1:26631 \\
             --transfers 200000 --dist zipf --devnet ./net --json load.json

The accounts and their keys must be in the chain's genesis: `tally devnet` puts --accounts
accounts there, keyed from --seed and funded; give the same values here. Each transfer pays
its fee from its sender's native balance, offering the default max fee; the report sums the
fees the included transfers paid. Every transfer is signed on
its own before the clock starts; --bundle of them travel in one CometBFT transaction, and
every validator verifies each signature. At most --window transfers are in flight at once,
so the latency figures measure the network, not a queue this command built.")]
pub struct LoadArgs {
    /// RPC addresses (comma-separated); bundles go to them in turn.
    #[arg(long, value_delimiter = ',', required = true)]
    pub rpc: Vec<String>,
    /// Transfers to submit.
    #[arg(long, default_value_t = 100_000)]
    pub transfers: u64,
    /// Genesis accounts to move coins between (at most the devnet's --accounts).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(2..))]
    pub accounts: u64,
    /// How sender and recipient are picked.
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    pub dist: Dist,
    /// Seed of the accounts' keys (the devnet's --seed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Transfers per CometBFT transaction.
    #[arg(long, default_value_t = 1_000)]
    pub bundle: usize,
    /// Send bundles uncompressed (their first layout), to compare what compression saves.
    #[arg(long)]
    pub uncompressed: bool,
    /// Most transfers in flight (submitted, not yet seen committed). Latency is about this
    /// over the throughput (Little's law): 16,000 keeps it near a second at the rates measured
    /// here, while blocks still fill.
    #[arg(long, default_value_t = 16_000)]
    pub window: u64,
    /// Submitting threads.
    #[arg(long, default_value_t = 4)]
    pub submitters: usize,
    /// Give up on transfers not committed after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// The devnet's directory: adds the CPU time of its processes to the report.
    #[arg(long, value_name = "DIR")]
    pub devnet: Option<PathBuf>,
    /// Write the JSON report to FILE ('-' for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=MAX_BUNDLE_TXS).contains(&args.bundle),
        "--bundle must be 1..={MAX_BUNDLE_TXS}"
    );
    let config = LoadConfig {
        rpcs: args.rpc.clone(),
        transfers: args.transfers,
        accounts: args.accounts,
        dist: match args.dist {
            Dist::Uniform => Distribution::Uniform,
            Dist::Zipf => Distribution::Zipf,
        },
        seed: args.seed,
        bundle: args.bundle,
        compress: !args.uncompressed,
        window: args.window,
        submitters: args.submitters,
        timeout: Duration::from_secs(args.timeout),
        devnet: args.devnet.clone(),
    };
    let bar = ProgressBar::new(args.transfers).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} transfers accounted for {msg}",
        )
        .expect("valid template"),
    );
    bar.set_message("(signing)");
    let report = load::run(&config, &|done, committed| {
        bar.set_position(done);
        bar.set_message(format!("{committed} committed"));
    })?;
    bar.finish_and_clear();
    let table = table(&report);
    match &args.json {
        Some(path) if path.as_os_str() == "-" => {
            eprint!("{table}");
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Some(path) => {
            print!("{table}");
            std::fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        None => print!("{table}"),
    }
    if !report.app_hashes_agree {
        anyhow::bail!("the validators' app hashes differ at the common height: see the table");
    }
    Ok(())
}

fn table(r: &LoadReport) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "committed transfers/s   {:>10.0}   ({} committed in {:.2} s, bundles of {})\n",
        r.tps, r.committed, r.elapsed_s, r.bundle
    ));
    t.push_str(&format!(
        "bytes a transfer        {:>10.1}   on the wire ({:.1} signed, {})\n",
        r.wire_bytes_per_transfer,
        r.signed_bytes_per_transfer,
        if r.compressed {
            "bundles compressed"
        } else {
            "bundles uncompressed"
        }
    ));
    t.push_str(&format!(
        "latency p50 / p99 / max {:>7.0} / {:.0} / {:.0} ms (submission to commit)\n",
        r.latency_p50_ms, r.latency_p99_ms, r.latency_max_ms
    ));
    t.push_str(&format!(
        "failed / rejected       {} failed, {} refused at CheckTx, {} rejected in blocks, {} lost\n",
        r.failed, r.rejected_check_tx, r.rejected_in_block, r.lost
    ));
    let included = r.committed + r.failed;
    t.push_str(&format!(
        "fees paid               {} coins ({} burned, {} tips; {:.0} per included transfer)\n",
        r.fees_paid,
        r.fees_burned,
        r.fees_paid - r.fees_burned,
        r.fees_paid as f64 / included.max(1) as f64
    ));
    t.push_str(&format!(
        "blocks                  {} ({:.0} ms apart)\n",
        r.blocks, r.block_time_ms
    ));
    t.push_str(&format!("cpu seconds             {}\n", r.cpu_s));
    for e in &r.check_tx_errors {
        t.push_str(&format!("CheckTx refused: {e}\n"));
    }
    t.push_str("\nvalidator                height  app hash (latest)                                                  at common height\n");
    for v in &r.validators {
        t.push_str(&format!(
            "{:<24} {:>6}  {:<64}  {}\n",
            v.rpc,
            v.height,
            v.app_hash,
            &v.app_hash_at_common_height.get(..16).unwrap_or("")
        ));
    }
    for v in &r.validators {
        t.push_str(&format!("{} ABCI seconds: {}\n", v.rpc, v.abci_seconds));
    }
    t.push_str(&format!(
        "app hashes agree: {}\n",
        if r.app_hashes_agree { "yes" } else { "NO" }
    ));
    t
}
