//! `tally blocks` and `tally verify`: inspect and audit the stored blocks.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;
use tally_chain::BlockBody;

use super::local::{open_chain, output};

/// List the retained blocks.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally blocks --data ./chain
  tally blocks --last 5 --json --data ./chain")]
pub struct BlocksArgs {
    /// Show only the last N blocks.
    #[arg(long, value_name = "N")]
    pub last: Option<u64>,
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BlocksArgs) -> anyhow::Result<()> {
    let chain = open_chain(&args.data)?;
    let store = chain.store();
    let head = chain.head().height;
    let from = args
        .last
        .map_or(store.first_retained(), |n| {
            head.saturating_sub(n.saturating_sub(1))
        })
        .max(store.first_retained());
    let mut rows = Vec::new();
    let mut text = format!(
        "{:>8}  {:<16}  {:>5}  {:>6}  {}\n",
        "height", "id", "txs", "failed", "state checksum"
    );
    for h in from..=head {
        let Some(record) = store.block(h)? else {
            continue;
        };
        let body: BlockBody = borsh::from_slice(&record.body)?;
        let failed = body.success.iter().filter(|s| !**s).count();
        let id = hex::encode(record.header.id());
        let checksum = hex::encode(record.header.state_checksum);
        text.push_str(&format!(
            "{h:>8}  {:<16}  {:>5}  {failed:>6}  {checksum}{}\n",
            &id[..16],
            body.transactions.len(),
            if h == 0 { "  (genesis)" } else { "" }
        ));
        rows.push(json!({
            "height": h, "id": id, "timestamp_ms": record.header.timestamp_ms,
            "transactions": body.transactions.len(), "failed": failed, "genesis": h == 0,
            "state_checksum": checksum, "changes": record.changes.len(),
        }));
    }
    output(args.json, json!({ "head": head, "blocks": rows }), text)
}

/// Check every stored block: links, transaction roots, chained state checksums, and a full
/// re-execution from genesis while genesis is retained.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally verify --data ./chain
  tally verify --data ./bench-data --json      # a `tally bench --data` directory too")]
pub struct VerifyArgs {
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_verify(args: VerifyArgs) -> anyhow::Result<()> {
    let chain = open_chain(&args.data)?;
    let report =
        tally_chain::verify::verify(chain.store(), chain.runtime().clone(), chain.config())?;
    let digest = hex::encode(report.state_digest);
    // A `tally bench --unsigned` directory says so in its own bench.json, which came with the
    // directory: never let that pass unremarked.
    let signatures = chain.config().check_signatures;
    output(
        args.json,
        json!({
            "ok": true, "from": report.from, "to": report.to, "replayed": report.replayed,
            "transactions": report.transactions, "state_digest": digest,
            "signatures_checked": signatures,
        }),
        format!(
            "ok: blocks {}..={} verified{}\n  state digest {digest}\n{}",
            report.from,
            report.to,
            if report.replayed {
                format!(
                    ", {} transactions re-executed from genesis",
                    report.transactions
                )
            } else {
                " against their recorded changes (genesis is pruned)".into()
            },
            if signatures {
                ""
            } else {
                "  signatures NOT checked: the directory's bench.json says its run was \
                 --unsigned\n"
            }
        ),
    )
}
