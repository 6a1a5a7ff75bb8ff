//! `tally account create`: a new account with a fresh key in the keystore.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use tally_chain::Action;
use tally_chain::system::{NEWACCOUNT, NewAccount, SYSTEM};

use super::local::{Local, output, parse_name};
use super::push::fail_on;

/// Manage accounts.
#[derive(Debug, Args)]
pub struct AccountArgs {
    #[command(subcommand)]
    pub command: AccountCommand,
}

/// Account subcommands.
#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// Create an account, with a new key kept in the keystore.
    #[command(after_help = "Examples:
  tally account create alice --data ./chain
  tally account create bob --creator alice --data ./chain")]
    Create {
        /// Its name: up to 12 characters of a-z, 1-5 and '.'.
        name: String,
        /// The account that creates it and signs (its key must be in the keystore).
        #[arg(long, default_value = "tally")]
        creator: String,
        /// The data directory.
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: AccountArgs) -> anyhow::Result<()> {
    let AccountCommand::Create {
        name,
        creator,
        data,
        json,
    } = args.command;
    let (name, creator) = (parse_name(&name)?, parse_name(&creator)?);
    let mut local = Local::open(&data)?;
    anyhow::ensure!(
        !local.keystore.accounts.contains_key(&name.to_string()),
        "the keystore already has a key for {name}"
    );
    let key = tally_chain::crypto::random_key()?;
    let new = NewAccount {
        creator,
        name,
        key: key.verifying_key().to_bytes(),
    };
    let action = Action {
        account: SYSTEM,
        name: NEWACCOUNT,
        authorization: vec![creator],
        data: borsh::to_vec(&new)?,
    };
    let (receipt, header) = local.push(vec![action], &[creator])?;
    fail_on(&receipt)?;
    local.keystore.insert(name, &key);
    local.save_keystore()?;
    output(
        json,
        json!({ "account": name.to_string(), "public_key": hex::encode(new.key), "block": header.height }),
        format!(
            "created {name} in block {}\n  public key {}\n",
            header.height,
            hex::encode(new.key)
        ),
    )
}
