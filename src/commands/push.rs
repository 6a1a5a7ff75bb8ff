//! `tally push`: sign and push one action, with arguments encoded by the contract's ABI.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use serde_json::json;
use tally_chain::{Action, TxReceipt};
use tally_runtime::Outcome;

use super::local::{Local, output, parse_name};

/// One field of an action.
#[derive(Debug, Deserialize)]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

/// A contract's ABI file: each action's fields, in borsh order.
#[derive(Debug, Deserialize)]
pub struct Abi {
    pub actions: std::collections::BTreeMap<String, Vec<Field>>,
}

/// Field types an ABI may use.
const TYPES: &str = "name, u8, u32, u64, i64, string, bytes (hex)";

impl Abi {
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read ABI {}", path.display()))?;
        let abi: Abi = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a valid ABI file", path.display()))?;
        for (action, fields) in &abi.actions {
            parse_name(action).with_context(|| format!("{}: action names", path.display()))?;
            for f in fields {
                if !["name", "u8", "u32", "u64", "i64", "string", "bytes"].contains(&f.ty.as_str())
                {
                    bail!(
                        "{}: field {}.{} has unknown type {:?} (known: {TYPES})",
                        path.display(),
                        action,
                        f.name,
                        f.ty
                    );
                }
            }
        }
        Ok(abi)
    }

    /// Encodes `args` for `action` (borsh).
    pub fn encode(&self, action: &str, args: &[String]) -> anyhow::Result<Vec<u8>> {
        let fields = self.actions.get(action).with_context(|| {
            let known: Vec<_> = self.actions.keys().map(String::as_str).collect();
            format!(
                "the ABI has no action {action:?} (it has: {})",
                known.join(", ")
            )
        })?;
        if fields.len() != args.len() {
            let names: Vec<_> = fields
                .iter()
                .map(|f| format!("{}:{}", f.name, f.ty))
                .collect();
            bail!(
                "{action} takes {} arguments ({}), got {}",
                fields.len(),
                names.join(" "),
                args.len()
            );
        }
        let mut out = Vec::new();
        for (f, arg) in fields.iter().zip(args) {
            let bad =
                |e: &dyn std::fmt::Display| anyhow::anyhow!("{} ({}): {arg:?}: {e}", f.name, f.ty);
            match f.ty.as_str() {
                "name" => out.extend_from_slice(&parse_name(arg)?.0.to_le_bytes()),
                "u8" => out.push(arg.parse::<u8>().map_err(|e| bad(&e))?),
                "u32" => {
                    out.extend_from_slice(&arg.parse::<u32>().map_err(|e| bad(&e))?.to_le_bytes())
                }
                "u64" => {
                    out.extend_from_slice(&arg.parse::<u64>().map_err(|e| bad(&e))?.to_le_bytes())
                }
                "i64" => {
                    out.extend_from_slice(&arg.parse::<i64>().map_err(|e| bad(&e))?.to_le_bytes())
                }
                "string" => {
                    out.extend_from_slice(&(arg.len() as u32).to_le_bytes());
                    out.extend_from_slice(arg.as_bytes());
                }
                _ => {
                    let bytes = hex::decode(arg).map_err(|e| bad(&e))?;
                    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(&bytes);
                }
            }
        }
        Ok(out)
    }
}

/// A receipt's trace as JSON: per action, its fuel, console and trap frames.
fn trace_json(trace: &tally_chain::TxTrace) -> serde_json::Value {
    let actions: Vec<_> = trace
        .actions
        .iter()
        .map(|action| {
            let trap = action.trap.as_ref().map(|trap| {
                let frames: Vec<_> = trap
                    .frames
                    .iter()
                    .map(|f| {
                        json!({
                            "func_index": f.func_index,
                            "func_name": f.func_name,
                            "offset": f.offset,
                        })
                    })
                    .collect();
                json!({ "frames": frames })
            });
            let calls: Vec<_> = action
                .calls
                .iter()
                .map(|c| {
                    json!({
                        "depth": c.depth,
                        "contract": c.contract.to_string(),
                        "entry": c.entry.to_string(),
                        "query": c.query,
                        "fuel_used": c.fuel_used,
                        "failure": c.failure.as_ref().map(ToString::to_string),
                        "events": c.events,
                        "console": String::from_utf8_lossy(&c.console),
                    })
                })
                .collect();
            json!({
                "fuel_used": action.fuel_used,
                "console": String::from_utf8_lossy(&action.console),
                "trap": trap,
                "calls": calls,
            })
        })
        .collect();
    json!({ "intrinsic_fuel": trace.intrinsic_fuel, "actions": actions })
}

/// Turns a failed receipt into an error that says why.
pub fn fail_on(receipt: &TxReceipt) -> anyhow::Result<()> {
    match &receipt.outcome {
        Outcome::Success => Ok(()),
        Outcome::Failure(abort) => bail!(
            "transaction {} failed (included, no state changed): {abort}",
            hex::encode(receipt.id)
        ),
    }
}

/// Push one action, signed by the --auth accounts' keystore keys, in a new block.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally push simplecoin transfer simplecoin alice 100 \"first coins\" --auth simplecoin --data ./chain
  tally push simplecoin transfer --data-hex 00aa... --auth simplecoin --data ./chain
  tally push simplecoin transfer alice bob 5 memo --auth alice --data ./chain --trace
                                  # on failure: the wasm function and offset, and the console

Arguments follow the action's fields in the contract's ABI (see `tally deploy --abi`).
What the contract printed is shown after the result. --trace adds each action's fuel and,
when an action fails, where in the contract it stopped: the function (by its name in the
module's name section, else its export, else its index) and the byte offset in the .wasm
file. Keep names in a build to see them (`tally build` strips them). The block is the same
with or without --trace.")]
pub struct PushArgs {
    /// The contract account.
    pub contract: String,
    /// The action's name.
    pub action: String,
    /// The action's arguments, in ABI order.
    pub args: Vec<String>,
    /// Accounts authorizing (and signing) the action.
    #[arg(long = "auth", value_name = "ACCOUNT", required = true)]
    pub auth: Vec<String>,
    /// Raw action data instead of ABI arguments.
    #[arg(long, value_name = "HEX", conflicts_with = "args")]
    pub data_hex: Option<String>,
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Show each action's fuel and console, and where a failed action stopped in its
    /// contract (function and offset).
    #[arg(long)]
    pub trace: bool,
}

pub fn run(args: PushArgs) -> anyhow::Result<()> {
    let contract = parse_name(&args.contract)?;
    let action_name = parse_name(&args.action)?;
    let auth = args
        .auth
        .iter()
        .map(|a| parse_name(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut local = match args.trace {
        true => Local::open_traced(&args.data)?,
        false => Local::open(&args.data)?,
    };
    let data = match &args.data_hex {
        Some(h) => hex::decode(h).context("--data-hex is not hex")?,
        None => {
            let path = local.abi_path(contract);
            anyhow::ensure!(
                path.exists(),
                "no ABI for {contract}: deploy it with --abi, or pass --data-hex"
            );
            Abi::read(&path)?.encode(&args.action, &args.args)?
        }
    };
    let action = Action {
        account: contract,
        name: action_name,
        authorization: auth.clone(),
        data,
    };
    let (receipt, header) = local.push(vec![action], &auth)?;
    let failure = match &receipt.outcome {
        Outcome::Success => None,
        Outcome::Failure(a) => Some(a.to_string()),
    };
    if !args.json {
        if args.trace {
            print!("{}", receipt.report());
        } else if !receipt.console.is_empty() {
            println!("console:\n{}", receipt.console_text());
        }
        fail_on(&receipt)?;
    }
    let mut value = json!({
        "transaction": hex::encode(receipt.id),
        "block": header.height,
        "success": failure.is_none(),
        "failure": failure,
        "failed_action": receipt.failed_action,
        "fuel_used": receipt.fuel_used,
        "console": receipt.console_text(),
        "events": receipt.events.iter().map(|e| json!({
            "contract": e.contract.to_string(),
            "name": e.name.to_string(),
            "data": hex::encode(&e.data),
        })).collect::<Vec<_>>(),
    });
    if let Some(trace) = &receipt.trace {
        value["trace"] = trace_json(trace);
    }
    output(
        args.json,
        value,
        format!(
            "pushed {contract}::{action_name} in block {} (transaction {}, {} fuel)\n{}",
            header.height,
            hex::encode(receipt.id),
            receipt.fuel_used,
            receipt
                .events
                .iter()
                .map(|e| format!(
                    "  event {} from {}: {}\n",
                    e.name,
                    e.contract,
                    hex::encode(&e.data)
                ))
                .collect::<String>()
        ),
    )?;
    if failure.is_some() {
        std::process::exit(1);
    }
    Ok(())
}
