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
  tally get simplecoin name:u1 --rpc 127.0.0.1:26601 # ask a running node (tally devnet)
  tally get dca str:status --as Status --data ./chain # a struct of dca.abi.json: {\"plan\":..}
  tally get token name:alice --as u64 --data ./chain  # a built-in type needs no ABI

--as decodes the value strictly (no bytes left over) as an ABI type: bool, u8, u16, u32, u64,
u128, i32, i64, name, string, bytes, T[], T?, or a struct of the contract's ABI (the one
`tally deploy` kept in the data directory, or --abi PATH).")]
pub struct GetArgs {
    /// The contract account.
    pub contract: String,
    /// The key: name:ACCOUNT, str:TEXT or hex:BYTES.
    pub key: String,
    /// Decode the value as TYPE.
    #[arg(long = "as", value_name = "TYPE")]
    pub as_type: Option<String>,
    /// The ABI whose structs --as may name [default: the one deployed with the contract].
    #[arg(long, value_name = "PATH", requires = "as_type")]
    pub abi: Option<std::path::PathBuf>,
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
    read_from(source.open()?, contract, key)
}

fn read_from(
    opened: Opened,
    contract: tally_chain::Name,
    key: &[u8],
) -> anyhow::Result<Option<Vec<u8>>> {
    match opened {
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
    let opened = args.source.open()?;
    // The type --as names, with the ABI its structs come from.
    let typed = match &args.as_type {
        None => None,
        Some(text) => {
            let abi = match (&args.abi, &opened) {
                (Some(path), _) => super::abi::Abi::read(path)?,
                (None, Opened::Local(local)) => local.abi(contract).unwrap_or_default(),
                (None, Opened::Node(_)) => super::abi::Abi::default(),
            };
            let ty = abi.parse_type(text).with_context(|| {
                format!("--as {text}: a struct needs the contract's ABI (deploy it with one, or --abi PATH)")
            })?;
            Some((abi, ty))
        }
    };
    let value = read_from(opened, contract, &key)?;
    let decoded = match (&typed, &value) {
        (Some((abi, ty)), Some(v)) => Some(
            abi.decode(ty, v)
                .with_context(|| format!("{contract}'s {} is not a {}", args.key, ty.spelling()))?,
        ),
        _ => None,
    };
    let as_u64 = value
        .as_ref()
        .filter(|v| v.len() == 8)
        .map(|v| u64::from_le_bytes(v[..8].try_into().expect("8 bytes")));
    let text = match (&value, &decoded) {
        (None, _) => format!("{} has no key {}\n", contract, args.key),
        (Some(_), Some(d)) => format!("{}\n", super::abi::text(d)),
        (Some(v), None) => format!(
            "{}{}\n",
            hex::encode(v),
            as_u64.map_or(String::new(), |n| format!("  (u64 {n})"))
        ),
    };
    output(
        args.json,
        json!({ "contract": contract.to_string(), "key": args.key, "value": value.as_ref().map(hex::encode), "u64": as_u64, "decoded": decoded }),
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
