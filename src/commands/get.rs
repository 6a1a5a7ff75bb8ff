//! `tally get` and `tally balance`: read contract state.

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::local::{Opened, Source, output, parse_name};

/// Read one key of a contract's storage.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally get simplecoin name:alice --data ./chain     # the key is alice's 8-byte name
  tally get registry str:home --data ./chain         # a UTF-8 key
  tally get registry hex:0a0b --data ./chain         # raw bytes
  tally get simplecoin name:u1 --rpc 127.0.0.1:26601 # ask a running node (tally devnet)")]
pub struct GetArgs {
    /// The contract account.
    pub contract: String,
    /// The key: name:ACCOUNT, str:TEXT or hex:BYTES.
    pub key: String,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The committed value of `contract`'s `key`, from a data directory or a node.
fn read(
    source: &Source,
    contract: tally_chain::Name,
    key: &[u8],
) -> anyhow::Result<Option<Vec<u8>>> {
    match source.open()? {
        Opened::Node(rpc) => {
            let mut query = contract.0.to_le_bytes().to_vec();
            query.extend_from_slice(key);
            let (code, value, log) = rpc.query("get", &query)?;
            match code {
                crate::node::app::code::OK => Ok(Some(value)),
                crate::node::app::code::NOT_FOUND => Ok(None),
                _ => anyhow::bail!("the node refused the query (code {code}): {log}"),
            }
        }
        Opened::Local(local) => Ok(local.chain.get(contract, key)?),
    }
}

fn parse_key(key: &str) -> anyhow::Result<Vec<u8>> {
    if let Some(n) = key.strip_prefix("name:") {
        Ok(parse_name(n)?.0.to_le_bytes().to_vec())
    } else if let Some(s) = key.strip_prefix("str:") {
        Ok(s.as_bytes().to_vec())
    } else if let Some(h) = key.strip_prefix("hex:") {
        hex::decode(h).context("the key after hex: is not hex")
    } else {
        anyhow::bail!("keys are written name:ACCOUNT, str:TEXT or hex:BYTES, not {key:?}")
    }
}

pub fn run(args: GetArgs) -> anyhow::Result<()> {
    let contract = parse_name(&args.contract)?;
    let key = parse_key(&args.key)?;
    let value = read(&args.source, contract, &key)?;
    let as_u64 = value
        .as_ref()
        .filter(|v| v.len() == 8)
        .map(|v| u64::from_le_bytes(v[..8].try_into().expect("8 bytes")));
    let text = match &value {
        None => format!("{} has no key {}\n", contract, args.key),
        Some(v) => format!(
            "{}{}\n",
            hex::encode(v),
            as_u64.map_or(String::new(), |n| format!("  (u64 {n})"))
        ),
    };
    output(
        args.json,
        json!({ "contract": contract.to_string(), "key": args.key, "value": value.as_ref().map(hex::encode), "u64": as_u64 }),
        text,
    )
}

/// A simplecoin balance.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally balance alice --data ./chain
  tally balance alice --contract mycoin --data ./chain
  tally balance u1 --rpc 127.0.0.1:26601              # ask a running node (tally devnet)")]
pub struct BalanceArgs {
    /// The account.
    pub account: String,
    /// The simplecoin-style contract.
    #[arg(long, default_value = "simplecoin")]
    pub contract: String,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_balance(args: BalanceArgs) -> anyhow::Result<()> {
    let (account, contract) = (parse_name(&args.account)?, parse_name(&args.contract)?);
    let value = read(&args.source, contract, &account.0.to_le_bytes())?;
    let balance = value
        .and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?)))
        .unwrap_or(0);
    output(
        args.json,
        json!({ "account": account.to_string(), "contract": contract.to_string(), "balance": balance }),
        format!("{account}: {balance}\n"),
    )
}
