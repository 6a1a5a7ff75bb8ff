//! `tally account create`: a new account with a fresh key in the keystore.

use clap::{Args, Subcommand};
use serde_json::json;
use tally_chain::Action;
use tally_chain::system::{NEWACCOUNT, NativeTransfer, NewAccount, SYSTEM};

use super::local::{output, parse_name};
use super::push::fail_on;
use super::target::{Dest, Unconfirmed};

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
  tally account create bob --creator alice --data ./chain
  tally account create alice --rpc 127.0.0.1:26601 --wallet ./net
                          # on a devnet: `tally`, whose key is in ./net/keystore.json, creates it

The new key is written to the keystore (the data directory's, or the wallet's with --rpc)
before the transaction is sent, so an account created on chain never lacks its key; it is
removed again if the transaction fails or is refused.")]
    Create {
        /// Its name: up to 12 characters of a-z, 1-5 and '.'.
        name: String,
        /// The account that creates it and signs (its key must be in the keystore).
        #[arg(long, default_value = "tally")]
        creator: String,
        /// Native coins the creator gives it, which pay its transactions' fees (a token
        /// transfer costs ~1,300 at the standard schedule's starting prices; `tally fees`
        /// shows the prices). 0 creates it without coins.
        #[arg(long, default_value_t = DEFAULT_FUNDS, value_name = "COINS")]
        fund: u64,
        /// A local chain, or a network.
        #[command(flatten)]
        dest: Dest,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Native coins `tally account create` gives a new account unless told: about 600,000 token
/// transfers at the standard schedule's starting prices.
const DEFAULT_FUNDS: u64 = 1_000_000_000;

pub fn run(args: AccountArgs) -> anyhow::Result<()> {
    let AccountCommand::Create {
        name,
        creator,
        fund,
        dest,
        json,
    } = args.command;
    let (name, creator) = (parse_name(&name)?, parse_name(&creator)?);
    let mut target = dest.open()?;
    anyhow::ensure!(
        !target.keystore().accounts.contains_key(&name.to_string()),
        "the keystore already has a key for {name}"
    );
    // The creator's key is checked before the new one is written.
    target.keystore().key(creator)?;
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
    let mut actions = vec![action];
    if fund > 0 {
        actions.push(
            NativeTransfer {
                from: creator,
                to: name,
                amount: fund,
            }
            .action(),
        );
    }
    target.keystore().insert(name, &key);
    target.save_keystore()?;
    let committed = target
        .push(actions, &[creator])
        .and_then(|c| fail_on(&c.receipt).map(|()| c));
    let committed = match committed {
        Ok(c) => c,
        Err(e) => {
            // Unless nobody knows whether it committed: then the key must stay.
            if e.downcast_ref::<Unconfirmed>().is_none() {
                target.keystore().accounts.remove(&name.to_string());
                target.save_keystore()?;
            }
            return Err(e);
        }
    };
    output(
        json,
        json!({ "account": name.to_string(), "public_key": hex::encode(new.key),
                "funds": fund, "fee": committed.receipt.fee.total(),
                "block": committed.height, "transaction": hex::encode(committed.receipt.id) }),
        format!(
            "created {name} in block {}\n  public key {}\n  funds      {fund} coins from {creator}\n",
            committed.height,
            hex::encode(new.key)
        ),
    )
}
