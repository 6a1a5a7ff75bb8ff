//! `tally get` and `tally balance`: read contract state.

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::abi::{Abi, Type};
use super::local::{Source, output, parse_name};
use super::state::{parse_key, raw_value_text, typed};

/// Read one key of a contract's storage.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally get simplecoin name:alice --data ./chain     # the key is alice's 8-byte name
  tally get token 'balances[alice]' --data ./chain   # a key of the ABI's table \"balances\"
  tally get registry str:home --data ./chain         # a UTF-8 key
  tally get registry hex:0a0b --data ./chain         # raw bytes (or 0x0a0b)
  tally get simplecoin name:u1 --rpc 127.0.0.1:26601 # ask a running node (tally devnet)
  tally get dca str:status --as Status --data ./chain # a struct of dca.abi.json: {\"plan\":..}
  tally get token name:alice --as u64 --data ./chain  # a built-in type needs no ABI

When the contract's ABI has tables (the one `tally deploy` kept in the data directory, with
--rpc the one in --wallet DIR, or --abi PATH), a key that fits one is shown as its table's,
with its value decoded: `balances[alice] = 41`. --as decodes the value strictly (no bytes
left over) as an ABI type instead: bool, u8, u16, u32, u64, u128, i32, i64, name, string,
bytes, T[], T?, or a struct of the contract's ABI.")]
pub struct GetArgs {
    /// The contract account.
    pub contract: String,
    /// The key: name:ACCOUNT, str:TEXT, hex:BYTES (or 0xBYTES), or TABLE[PART,...].
    pub key: String,
    /// Decode the value as TYPE.
    #[arg(long = "as", value_name = "TYPE")]
    pub as_type: Option<String>,
    /// The contract's ABI, for its tables and the structs --as may name [default: the one
    /// deployed with the contract].
    #[arg(long, value_name = "PATH")]
    pub abi: Option<std::path::PathBuf>,
    /// With --rpc: the wallet directory whose abi/ holds the ABIs of contracts deployed with
    /// it (a devnet's directory).
    #[arg(long, value_name = "DIR", requires = "rpc")]
    pub wallet: Option<std::path::PathBuf>,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The type `--as` names, with the ABI its structs come from.
pub fn as_type(text: &str, abi: Option<&Abi>) -> anyhow::Result<Type> {
    abi.cloned()
        .unwrap_or_default()
        .parse_type(text)
        .with_context(|| {
            format!(
                "--as {text}: a struct needs the contract's ABI (deploy it with one, or --abi PATH)"
            )
        })
}

pub fn run(args: GetArgs) -> anyhow::Result<()> {
    let contract = parse_name(&args.contract)?;
    let opened = args.source.open()?;
    let abi = opened.abi(contract, args.abi.as_deref(), args.wallet.as_deref())?;
    let key = parse_key(&args.key, abi.as_ref())?;
    let ty = args
        .as_type
        .as_deref()
        .map(|t| as_type(t, abi.as_ref()))
        .transpose()?;
    let value = opened.get(contract, &key)?;
    if value.is_none() {
        // A key of no contract is no empty key: say what is missing.
        opened.require_contract(contract)?;
    }
    let abi = abi.unwrap_or_default();
    let typed = value.as_ref().map(|v| typed(&abi, ty.as_ref(), &key, v));
    let decoded = match typed.as_ref().and_then(|t| t.value.as_ref()) {
        // --as is a demand: a value that is not of the type is an error; a table's is a
        // description, so a value that does not fit it is shown raw.
        Some(Err(e)) if ty.is_some() => return Err(anyhow::anyhow!("{contract}'s {e:#}")),
        Some(Ok(v)) => Some(v.clone()),
        _ => None,
    };
    let as_u64 = value
        .as_ref()
        .filter(|v| v.len() == 8)
        .map(|v| u64::from_le_bytes(v[..8].try_into().expect("8 bytes")));
    let table = typed.as_ref().and_then(|t| t.table).map(|(name, _)| name);
    let text = match (&value, &decoded, &typed) {
        (None, _, _) => format!("{} has no key {}\n", contract, args.key),
        (Some(_), Some(d), _) if ty.is_some() => format!("{}\n", super::abi::text(d)),
        (Some(_), Some(d), Some(t)) => format!("{} = {}\n", t.key, super::abi::text(d)),
        (Some(v), _, _) => format!("{}\n", raw_value_text(v)),
    };
    output(
        args.json,
        json!({
            "contract": contract.to_string(),
            "key": args.key,
            "table": table,
            "typed_key": typed.as_ref().filter(|t| t.table.is_some()).map(|t| &t.key),
            "value": value.as_ref().map(hex::encode),
            "u64": as_u64,
            "decoded": decoded,
        }),
        text,
    )
}

/// A simplecoin balance.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally balance alice --data ./chain
  tally balance alice --contract mycoin --data ./chain
  tally balance alice --native --data ./chain          # its native coins, which pay its fees
  tally balance u1 --rpc 127.0.0.1:26601              # ask a running node (tally devnet)")]
pub struct BalanceArgs {
    /// The account.
    pub account: String,
    /// The simplecoin-style contract.
    #[arg(long, default_value = "simplecoin")]
    pub contract: String,
    /// Show the account's native coins instead, which pay its transactions' fees.
    #[arg(long, conflicts_with = "contract")]
    pub native: bool,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run_balance(args: BalanceArgs) -> anyhow::Result<()> {
    let (account, contract) = (parse_name(&args.account)?, parse_name(&args.contract)?);
    let opened = args.source.open()?;
    if args.native {
        if !opened.account_exists(account)? {
            anyhow::bail!(
                "there is no account {account}: check the name, or create it with \
                 `tally account create {account}`"
            );
        }
        let coins = opened.native_balance(account)?;
        return output(
            args.json,
            json!({ "account": account.to_string(), "native": coins }),
            format!("{account}: {coins} native coins\n"),
        );
    }
    let value = opened.get(contract, &account.0.to_le_bytes())?;
    if value.is_none() {
        // No balance: say so only where it is one; an unknown account or contract is a
        // mistake to point out, not a zero.
        opened.require_contract(contract)?;
        if !opened.account_exists(account)? {
            anyhow::bail!(
                "there is no account {account}: check the name, or create it with \
                 `tally account create {account}`"
            );
        }
    }
    let balance = value
        .and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?)))
        .unwrap_or(0);
    output(
        args.json,
        json!({ "account": account.to_string(), "contract": contract.to_string(), "balance": balance }),
        format!("{account}: {balance}\n"),
    )
}
