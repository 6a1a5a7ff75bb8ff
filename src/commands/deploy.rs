//! `tally deploy`: upload a contract to an account.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::json;
use tally_chain::Action;
use tally_chain::system::{SETCODE, SYSTEM, SetCode};

use super::abi::Abi;
use super::local::{Local, output, parse_name};
use super::push::fail_on;
use crate::common::fs::write_atomic;

/// Deploy a contract (.wasm or .wat) to an account; its onInit runs once.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally deploy simplecoin contracts/simplecoin.wasm --data ./chain
  tally deploy hello hello.wat --abi hello.abi.json --data ./chain

The account signs the deploy (its key must be in the keystore). An ABI file (default: the
module's path with .abi.json) describes each action's fields, so `tally push` can encode
readable arguments.")]
pub struct DeployArgs {
    /// The account receiving the contract.
    pub account: String,
    /// The module: WebAssembly binary (.wasm) or text (.wat).
    pub file: PathBuf,
    /// The contract's ABI [default: FILE with .abi.json, if present].
    #[arg(long)]
    pub abi: Option<PathBuf>,
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn read_module(path: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "wat") {
        return wat::parse_bytes(&bytes)
            .map(|b| b.into_owned())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
    }
    Ok(bytes)
}

pub fn run(args: DeployArgs) -> anyhow::Result<()> {
    let account = parse_name(&args.account)?;
    let code = read_module(&args.file)?;
    let abi_path = args.abi.clone().or_else(|| {
        let beside = args.file.with_extension("abi.json");
        beside.exists().then_some(beside)
    });
    let abi = match &abi_path {
        Some(p) => Some((Abi::read(p)?, std::fs::read(p)?)),
        None => None,
    };
    let mut local = Local::open(&args.data)?;
    let set = SetCode {
        account,
        code: code.clone(),
    };
    let action = Action {
        account: SYSTEM,
        name: SETCODE,
        authorization: vec![account],
        data: borsh::to_vec(&set)?,
    };
    let (receipt, header) = local.push(vec![action], &[account])?;
    fail_on(&receipt)?;
    if let Some((_, bytes)) = &abi {
        let path = local.abi_path(account);
        std::fs::create_dir_all(path.parent().expect("abi dir"))?;
        write_atomic(&path, bytes, 0o644)?;
    }
    let hash = sha256_hex(&code);
    output(
        args.json,
        json!({ "account": account.to_string(), "code_hash": hash, "bytes": code.len(), "block": header.height, "abi": abi.is_some() }),
        format!(
            "deployed {} ({} bytes) to {account} in block {}\n  code hash {hash}\n  abi       {}\n",
            args.file.display(),
            code.len(),
            header.height,
            abi_path.map_or("none (push with --data-hex)".into(), |p| p
                .display()
                .to_string())
        ),
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
