//! `tally deploy`: upload a contract to an account, on a local chain or a network.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::json;
use tally_chain::Action;
use tally_chain::system::{SETCODE, SYSTEM, SetCode};

use super::abi::Abi;
use super::local::{output, parse_name};
use super::push::fail_on;
use super::target::Dest;

/// Deploy a contract (.wasm or .wat) to an account; its onInit runs once.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally deploy simplecoin contracts/simplecoin.wasm --data ./chain
  tally deploy hello hello.wat --abi hello.abi.json --data ./chain
  tally deploy swap contracts/swap.wasm --rpc 127.0.0.1:26601 --wallet ./net

The account signs the deploy (its key must be in the keystore: the data directory's, or with
--rpc the wallet's). An ABI file (default: the module's path with .abi.json) describes each
action's fields; the data directory (or the wallet, with --rpc) keeps it as abi/ACCOUNT.json,
with the hash of the code, so `tally push` and `tally query` encode readable arguments for as
long as the account runs this code. A deploy without an ABI forgets the one kept before.")]
pub struct DeployArgs {
    /// The account receiving the contract.
    pub account: String,
    /// The module: WebAssembly binary (.wasm) or text (.wat).
    pub file: PathBuf,
    /// The contract's ABI [default: FILE with .abi.json, if present].
    #[arg(long)]
    pub abi: Option<PathBuf>,
    /// A local chain, or a network.
    #[command(flatten)]
    pub dest: Dest,
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
        // Read and checked before anything is sent: a bad ABI deploys nothing.
        Some(p) => Some((Abi::read(p)?, std::fs::read(p)?)),
        None => None,
    };
    let mut target = args.dest.open()?;
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
    let committed = target.push(vec![action], &[account])?;
    fail_on(&committed.receipt)?;
    let hash = sha256(&code);
    target.save_abi(account, abi.as_ref().map(|(_, b)| b.as_slice()), &hash)?;
    let hash = hex::encode(hash);
    output(
        args.json,
        json!({ "account": account.to_string(), "code_hash": hash, "bytes": code.len(),
                "block": committed.height, "transaction": hex::encode(committed.receipt.id),
                "abi": abi.is_some() }),
        format!(
            "deployed {} ({} bytes) to {account} in block {}\n  code hash {hash}\n  abi       {}\n",
            args.file.display(),
            code.len(),
            committed.height,
            abi_path.map_or("none (push with --data-hex)".into(), |p| p
                .display()
                .to_string())
        ),
    )
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}
