//! `tally query` and `tally code`: ask a contract a read-only question, and show what code an
//! account runs, from a data directory or a running node.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use tally_chain::Name;

use super::local::{Opened, Source, output, parse_name};
use super::target::{AbiFile, find_abi};
use crate::node::app::code;
use crate::node::rpc::Rpc;

/// Run a contract's read-only query against the committed state.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally query swap reserves --data ./chain             # decoded by swap's ABI: {\"a\":..,\"b\":..}
  tally query token balance alice --data ./chain       # arguments in the query's ABI order
  tally query token balance --data-hex 0000000000a0a432 --rpc 127.0.0.1:26601   # a node
  tally query swap shares alice --rpc 127.0.0.1:26601 --wallet ./net
                                                       # with the ABI deploy --rpc kept

The contract's `query(receiver, method)` export runs in static mode with at most an action's
fuel: it may read its state and query other contracts, never write, emit or call. Nothing is
committed and no transaction is signed. The answer is the return data it set (set_return),
decoded as the query's \"returns\" in the contract's ABI when there is one, else shown as
hex, and as a u64 when it is 8 bytes.")]
pub struct QueryArgs {
    /// The contract account.
    pub contract: String,
    /// The query method.
    pub method: String,
    /// The method's arguments, in the order of its fields in the contract's ABI (as `tally
    /// push` takes them: negative numbers, JSON, @PATH for a file's contents).
    #[arg(allow_negative_numbers = true)]
    pub args: Vec<String>,
    /// Raw query data instead of ABI arguments.
    #[arg(long, value_name = "HEX", conflicts_with = "args")]
    pub data_hex: Option<String>,
    /// The contract's ABI file [default: the one `tally deploy` kept in the data directory,
    /// or with --rpc in the --wallet directory].
    #[arg(long, value_name = "PATH")]
    pub abi: Option<PathBuf>,
    /// With --rpc: the wallet directory whose abi/ holds the ABIs of contracts deployed with
    /// it (a devnet's directory).
    #[arg(long, value_name = "DIR", requires = "rpc")]
    pub wallet: Option<PathBuf>,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a query answered.
struct Answer {
    /// The return data, or why the query failed.
    result: Result<Vec<u8>, String>,
    /// The return data as the method's ABI declares it, when there is one that does.
    value: Option<serde_json::Value>,
    /// Fuel it used, when known (a node's answer does not carry it).
    fuel: Option<String>,
    console: String,
}

/// The contract's ABI, as `--abi`, the data directory or the `--wallet` keeps it.
fn find(args: &QueryArgs, opened: &Opened, contract: Name) -> anyhow::Result<super::abi::Abi> {
    let given: Vec<AbiFile> = args
        .abi
        .iter()
        .map(|path| AbiFile {
            contract: None,
            path: path.clone(),
        })
        .collect();
    match opened {
        Opened::Local(local) => find_abi(&local.dir.join("abi"), contract, &given, |c| {
            Ok(local.chain.code_hash(c)?)
        }),
        Opened::Node(rpc) => match (&args.wallet, &given[..]) {
            (_, [file]) => super::abi::Abi::read(&file.path),
            (Some(wallet), _) => {
                find_abi(&wallet.join("abi"), contract, &given, |c| code_hash(rpc, c))
            }
            (None, _) => anyhow::bail!(
                "with --rpc, arguments are encoded with an ABI: pass --abi PATH, or \
                 --wallet DIR holding the one kept when {contract} was deployed, or \
                 pass --data-hex"
            ),
        },
    }
}

fn ask(args: &QueryArgs, contract: Name, method: Name) -> anyhow::Result<Answer> {
    let opened = args.source.open()?;
    // Needed to encode arguments; without any, only to decode the answer, if there is one.
    let abi = match (&args.data_hex, args.args.is_empty()) {
        (None, false) => Some(find(args, &opened, contract)?),
        _ => find(args, &opened, contract).ok(),
    };
    let data = match (&args.data_hex, &abi) {
        (Some(h), _) => {
            let h = super::abi::argument(h).context("--data-hex")?;
            let h = h.trim();
            hex::decode(h.strip_prefix("0x").unwrap_or(h)).context("--data-hex is not hex")?
        }
        (None, Some(abi)) if !args.args.is_empty() => abi.encode_query(&args.method, &args.args)?,
        (None, _) => Vec::new(),
    };
    let decode = |output: &[u8]| {
        let abi = abi.as_ref()?;
        let returns = abi.queries.get(&args.method)?.returns.as_ref()?;
        abi.decode(returns, output).ok()
    };
    let local = match opened {
        Opened::Local(local) => local,
        Opened::Node(rpc) => {
            let mut query = contract.0.to_le_bytes().to_vec();
            query.extend_from_slice(&method.0.to_le_bytes());
            query.extend_from_slice(&data);
            let (status, value, log) = rpc.query("query", &query)?;
            return Ok(Answer {
                value: decode(&value),
                result: match status {
                    code::OK => Ok(value),
                    code::QUERY_FAILED => Err(log),
                    other => anyhow::bail!("the node refused the query (code {other}): {log}"),
                },
                fuel: None,
                console: String::new(),
            });
        }
    };
    let receipt = local.chain.query(contract, method, &data)?;
    Ok(Answer {
        value: decode(&receipt.output),
        result: match receipt.failure() {
            None => Ok(receipt.output.clone()),
            Some(abort) => Err(abort.to_string()),
        },
        fuel: Some(format!("{} fuel", receipt.fuel_used)),
        console: String::from_utf8_lossy(&receipt.console).into_owned(),
    })
}

pub fn run(args: QueryArgs) -> anyhow::Result<()> {
    let (contract, method) = (parse_name(&args.contract)?, parse_name(&args.method)?);
    let answer = ask(&args, contract, method)?;
    let as_u64 = |v: &[u8]| <[u8; 8]>::try_from(v).ok().map(u64::from_le_bytes);
    let fuel = answer.fuel.unwrap_or_else(|| "fuel not reported".into());
    match &answer.result {
        Ok(value) => {
            let mut text = hex::encode(value);
            if let Some(decoded) = &answer.value {
                text = super::abi::text(decoded);
            } else if let Some(n) = as_u64(value) {
                text.push_str(&format!("  (u64 {n})"));
            }
            if value.is_empty() && answer.value.is_none() {
                text = "(no return data)".into();
            }
            if !answer.console.is_empty() && !args.json {
                println!("console:\n{}", answer.console);
            }
            output(
                args.json,
                json!({ "contract": contract.to_string(), "method": method.to_string(),
                        "success": true, "output": hex::encode(value), "u64": as_u64(value),
                        "value": answer.value,
                        "fuel": fuel, "console": answer.console }),
                format!("{text}\n{contract}::{method} answered ({fuel})\n"),
            )
        }
        Err(why) => {
            if args.json {
                output(
                    true,
                    json!({ "contract": contract.to_string(), "method": method.to_string(),
                            "success": false, "failure": why, "fuel": fuel,
                            "console": answer.console }),
                    String::new(),
                )?;
                std::process::exit(1);
            }
            anyhow::bail!("{contract}::{method} failed: {why} ({fuel})")
        }
    }
}

/// Show the sha256 of the code an account runs.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally code simplecoin --data ./chain
  tally code simplecoin --rpc 127.0.0.1:26601")]
pub struct CodeArgs {
    /// The account.
    pub account: String,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The sha256 of the code `account` runs on the node's chain, if any.
pub fn code_hash(rpc: &Rpc, account: Name) -> anyhow::Result<Option<[u8; 32]>> {
    let (status, value, log) = rpc.query("code", &account.0.to_le_bytes())?;
    match status {
        code::OK => Ok(Some(value.try_into().map_err(|_| {
            anyhow::anyhow!("the node's code hash is not 32 bytes")
        })?)),
        code::NOT_FOUND => Ok(None),
        other => anyhow::bail!("the node refused the query (code {other}): {log}"),
    }
}

pub fn run_code(args: CodeArgs) -> anyhow::Result<()> {
    let account = parse_name(&args.account)?;
    let hash = match args.source.open()? {
        Opened::Node(rpc) => code_hash(&rpc, account)?,
        Opened::Local(local) => local.chain.code_hash(account)?,
    };
    let hex = hash.as_ref().map(hex::encode);
    output(
        args.json,
        json!({ "account": account.to_string(), "code_hash": hex }),
        match &hex {
            Some(h) => format!("{h}\n"),
            None => format!("{account} has no contract\n"),
        },
    )
}
