//! `tally init`: create a local chain in a data directory.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::local::{Local, output};
use crate::common::store::StoreKind;

/// Create a local chain: genesis, the system account `tally` and its key.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally init --data ./chain
  tally init --data ./chain --store rocksdb    # needs a tally built with --features rocksdb")]
pub struct InitArgs {
    /// The data directory (created if missing; refused if it already holds a chain).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// The state store.
    #[arg(long, value_enum, default_value_t = StoreKind::Log)]
    pub store: StoreKind,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InitArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.store != StoreKind::Memory,
        "a local chain needs an on-disk store: --store log or --store rocksdb"
    );
    let local = Local::init(&args.data, args.store)?;
    let id = hex::encode(local.chain.head_id());
    output(
        args.json,
        json!({ "data": args.data, "genesis": id, "system_account": "tally", "store": args.store.label() }),
        format!(
            "initialized {} ({} store)\n  genesis block  {id}\n  system account tally (key in {})\n",
            args.data.display(),
            args.store.label(),
            args.data.join("keystore.json").display()
        ),
    )
}
