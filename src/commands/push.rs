//! `tally push`: sign and push one action, with arguments encoded by the contract's ABI.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use tally_chain::{Action, TxReceipt};
use tally_runtime::Outcome;

use super::abi::Abi;
use super::local::{Local, output, parse_name};

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
    // Each event decoded by its contract's ABI, where it has one that declares the event.
    let mut abis = std::collections::BTreeMap::new();
    let mut events = Vec::with_capacity(receipt.events.len());
    for e in &receipt.events {
        if let std::collections::btree_map::Entry::Vacant(slot) = abis.entry(e.contract) {
            slot.insert(local.abi(e.contract)?);
        }
        let fields =
            super::abi::event_value(abis[&e.contract].as_ref(), &e.name.to_string(), &e.data);
        events.push((e, fields));
    }
    let mut value = json!({
        "transaction": hex::encode(receipt.id),
        "block": header.height,
        "success": failure.is_none(),
        "failure": failure,
        "failed_action": receipt.failed_action,
        "fuel_used": receipt.fuel_used,
        "console": receipt.console_text(),
        "events": events.iter().map(|(e, fields)| json!({
            "contract": e.contract.to_string(),
            "name": e.name.to_string(),
            "data": hex::encode(&e.data),
            "fields": fields,
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
            events
                .iter()
                .map(|(e, fields)| format!(
                    "  event {} from {}: {}\n",
                    e.name,
                    e.contract,
                    fields
                        .as_ref()
                        .map_or_else(|| hex::encode(&e.data), super::abi::text)
                ))
                .collect::<String>()
        ),
    )?;
    if failure.is_some() {
        std::process::exit(1);
    }
    Ok(())
}
