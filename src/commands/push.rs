//! `tally push`: sign and push one transaction of one or more actions, with arguments encoded
//! by each contract's ABI, to a local chain or a network.

use anyhow::{Context, bail};
use clap::Args;
use tally_chain::{Action, Name, TxReceipt};
use tally_runtime::Outcome;

use super::local::{output, parse_name};
use super::receipt::Committed;
use super::target::{AbiFile, Dest, Target};

/// Turns a failed receipt into an error that says why.
pub fn fail_on(receipt: &TxReceipt) -> anyhow::Result<()> {
    match &receipt.outcome {
        Outcome::Success => Ok(()),
        Outcome::Failure(abort) => bail!(
            "transaction {} failed (included: no state changed but its fee, {} coins, was paid): \
             {abort}",
            hex::encode(receipt.id),
            receipt.fee.total()
        ),
    }
}

/// Push a transaction, signed by the --auth accounts' keys, and wait for its block.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally push simplecoin transfer simplecoin alice 100 \"first coins\" --auth simplecoin --data ./chain
  tally push simplecoin transfer --data-hex 00aa... --auth simplecoin --data ./chain
  tally push simplecoin transfer alice bob 5 memo --auth alice --data ./chain --trace
                                  # on failure: the wasm function and offset, and the console
  tally push tokena transfer alice swap 1000 \"\" --action swap swap alice 1 --auth alice --data ./chain
                                  # two actions in one transaction: both apply, or neither
  tally push counter hit alice --auth alice --rpc 127.0.0.1:26601 --wallet ./net
                                  # to a network: signed with the wallet's keys
  tally push tokena transfer alice bob 5 \"\" --action tokenb transfer alice bob 5 \"\" --auth alice,bob --data ./chain
                                  # signed by both (or repeat --auth)
  tally push ledger adjust alice -5 --auth alice --data ./chain     # a negative number
  tally push registry set alice home @notes.txt --auth alice --data ./chain
                                  # an argument read from a file (@@ for a literal @)
  tally push simplecoin transfer alice bob 5 memo --auth alice --data ./chain --dry-run
                                  # print the signed transaction (hex and JSON), send nothing
  tally push simplecoin transfer alice bob 5 memo --auth alice --max-fee 5000 --tip 10 --data ./chain
                                  # pay at most 5,000 coins, 10 of them to the block's proposer
  tally push simplecoin transfer alice bob 5 memo --auth alice --payer sponsor --data ./chain
                                  # sponsor pays (and signs first)

Arguments follow the action's fields in the contract's ABI: a scalar as it is written
(alice, -5, true, bytes in hex with or without 0x), a list, option or struct as JSON
([1,2], null, {\"a\":1}); an argument @PATH is the contents of the file PATH, less one
trailing newline. The ABI is the file given with
--abi PATH (or --abi CONTRACT=PATH, one per contract), else the one `tally deploy` kept in the
data directory or, with --rpc, in the wallet (DIR/abi/CONTRACT.json), provided the contract
still runs the code it was deployed with. Every --action adds an action, run in order in the
same transaction; every action is authorized by every --auth account.

Every transaction pays a fee from its payer's native coins (the first --auth account unless
--payer): Σ price × usage over five dimensions (bandwidth, compute, read, allocate, write;
`tally fees` shows the prices), plus --tip, never more than --max-fee, whether it succeeds or
fails. The fee is shown with the result.

What the contract printed is shown after the result. --trace adds each action's fuel and,
when an action fails, where in the contract it stopped: the function (by its name in the
module's name section, else its export, else its index) and the byte offset in the .wasm
file. Keep names in a build to see them (`tally build` strips them). The block is the same
with or without --trace. Nodes do not trace: --trace needs --data.")]
pub struct PushArgs {
    /// The contract account of the first action.
    #[arg(required_unless_present = "more")]
    pub contract: Option<String>,
    /// The first action's name.
    #[arg(required_unless_present = "more")]
    pub action: Option<String>,
    /// The first action's arguments, in ABI order.
    #[arg(allow_negative_numbers = true)]
    pub args: Vec<String>,
    /// More actions (`--action CONTRACT ACTION ARGS...`, repeated).
    #[command(flatten)]
    pub more: MoreActions,
    /// Accounts authorizing (and signing) the actions: repeat it, or list them (a,b).
    #[arg(
        long = "auth",
        value_name = "ACCOUNT",
        required = true,
        value_delimiter = ','
    )]
    pub auth: Vec<String>,
    /// Raw data of the first action instead of ABI arguments: hex, with or without 0x, or
    /// @PATH of a file holding it.
    #[arg(long, value_name = "HEX", conflicts_with = "args")]
    pub data_hex: Option<String>,
    /// An ABI file: PATH for the one contract the transaction calls, or CONTRACT=PATH.
    #[arg(long = "abi", value_name = "[CONTRACT=]PATH")]
    pub abi: Vec<AbiFile>,
    /// A local chain, or a network.
    #[command(flatten)]
    pub dest: Dest,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Show each action's fuel and console, and where a failed action stopped in its
    /// contract (function and offset).
    #[arg(long)]
    pub trace: bool,
    /// Print the signed transaction, its bytes in hex and decoded, and send nothing.
    #[arg(long, conflicts_with = "trace")]
    pub dry_run: bool,
    /// The account that pays the fee, from its native coins, and signs first (default: the
    /// first --auth account).
    #[arg(long, value_name = "ACCOUNT")]
    pub payer: Option<String>,
    /// The most the transaction may pay, in coins (default 10,000,000; a token transfer
    /// costs ~1,300 at the standard starting prices: `tally fees` shows the prices). One whose
    /// fee at the block's prices would be more fails, and pays this; one whose payer holds
    /// less is not included.
    #[arg(long, value_name = "COINS")]
    pub max_fee: Option<u64>,
    /// Coins offered to the block's proposer on top of the fee (within --max-fee).
    #[arg(long, value_name = "COINS", default_value_t = 0)]
    pub tip: u64,
}

/// The `--action CONTRACT ACTION ARGS...` options, each occurrence one action. (clap's
/// derive cannot group a repeated option's values by occurrence, so this reads them from its
/// matches itself.)
#[derive(Debug, Clone, Default)]
pub struct MoreActions(pub Vec<Vec<String>>);

impl clap::FromArgMatches for MoreActions {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self(
            matches
                .get_occurrences::<String>("more")
                .map(|all| all.map(|one| one.cloned().collect()).collect())
                .unwrap_or_default(),
        ))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for MoreActions {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.arg(
            clap::Arg::new("more")
                .long("action")
                .value_names(["CONTRACT", "ACTION", "ARGS"])
                .num_args(2..)
                .allow_negative_numbers(true)
                .action(clap::ArgAction::Append)
                .help("Another action in the same transaction: its contract, its name and its arguments (repeat for more)"),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// One action as the command line gives it.
struct Given<'a> {
    contract: Name,
    action: &'a str,
    args: &'a [String],
    data_hex: Option<&'a str>,
}

fn given(args: &PushArgs) -> anyhow::Result<Vec<Given<'_>>> {
    let mut out = Vec::new();
    if let (Some(contract), Some(action)) = (&args.contract, &args.action) {
        out.push(Given {
            contract: parse_name(contract)?,
            action,
            args: &args.args,
            data_hex: args.data_hex.as_deref(),
        });
    }
    for more in &args.more.0 {
        out.push(Given {
            contract: parse_name(&more[0])?,
            action: &more[1],
            args: &more[2..],
            data_hex: None,
        });
    }
    Ok(out)
}

/// Encodes the actions, each with its contract's ABI (or raw data).
fn actions(target: &Target, args: &PushArgs, auth: &[Name]) -> anyhow::Result<Vec<Action>> {
    let given = given(args)?;
    let mut contracts: Vec<Name> = given.iter().map(|g| g.contract).collect();
    contracts.sort_unstable_by_key(|c| c.0);
    contracts.dedup();
    if contracts.len() > 1 && args.abi.iter().any(|a| a.contract.is_none()) {
        bail!("the transaction calls several contracts: write each ABI as --abi CONTRACT=PATH");
    }
    for contract in &contracts {
        // The system account's actions are native: it runs no code, and needs none.
        if *contract != tally_chain::system::SYSTEM {
            target.require_contract(*contract)?;
        }
    }
    given
        .iter()
        .map(|g| {
            let data = match g.data_hex {
                Some(h) => {
                    let h = super::abi::argument(h).context("--data-hex")?;
                    let h = h.trim();
                    hex::decode(h.strip_prefix("0x").unwrap_or(h))
                        .context("--data-hex is not hex")?
                }
                None => target
                    .abi(g.contract, &args.abi)?
                    .encode(g.action, g.args)
                    .with_context(|| format!("{}::{}", g.contract, g.action))?,
            };
            Ok(Action {
                account: g.contract,
                name: parse_name(g.action)?,
                authorization: auth.to_vec(),
                data,
            })
        })
        .collect()
}

/// Prints a committed transaction as `tally push` does: with --trace its report, else what
/// it printed; a failure as an error; then the summary line and its events (or the JSON).
/// Exits non-zero after printing a failed transaction's JSON.
pub fn print(committed: &Committed, json: bool, trace: bool) -> anyhow::Result<()> {
    let receipt = &committed.receipt;
    if !json {
        if trace {
            print!("{}", receipt.report());
        } else if !receipt.console.is_empty() {
            println!("console:\n{}", receipt.console_text());
        }
        fail_on(receipt)?;
    }
    output(
        json,
        committed.json(trace),
        committed.summary_text("pushed"),
    )?;
    if !receipt.is_success() {
        std::process::exit(1);
    }
    Ok(())
}

pub fn run(args: PushArgs) -> anyhow::Result<()> {
    if args.trace && args.dest.rpc.is_some() {
        bail!(
            "--trace needs a local chain (--data): nodes do not trace transactions; run the same \
             actions on a local chain with --trace to see each action's fuel and where it failed"
        );
    }
    let auth = args
        .auth
        .iter()
        .map(|a| parse_name(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut target = args.dest.open()?;
    target.set_offer(super::local::Offer {
        payer: args.payer.as_deref().map(parse_name).transpose()?,
        max_fee: args.max_fee,
        tip: args.tip,
    });
    let actions = actions(&target, &args, &auth)?;
    if args.dry_run {
        let signed = target.sign(actions, &auth)?;
        return print_dry_run(&target, &args, &signed);
    }
    let mut committed = target.push(actions, &auth)?;
    committed.decode_events(|contract| target.abi(contract, &args.abi).ok());
    print(&committed, args.json, args.trace)
}

/// `tally push --dry-run`: the signed transaction, as bytes and as JSON with each action's
/// arguments decoded by its contract's ABI.
fn print_dry_run(
    target: &Target,
    args: &PushArgs,
    signed: &tally_chain::SignedTransaction,
) -> anyhow::Result<()> {
    let tx = &signed.transaction;
    let bytes = signed.encode();
    let actions: Vec<serde_json::Value> = tx
        .actions
        .iter()
        .map(|a| {
            let decoded = target.abi(a.account, &args.abi).ok().and_then(|abi| {
                let entry = abi.actions.get(&a.name.to_string())?;
                abi.decode_fields(&entry.args, &a.data).ok()
            });
            serde_json::json!({
                "account": a.account.to_string(),
                "name": a.name.to_string(),
                "authorization": a.authorization.iter().map(Name::to_string).collect::<Vec<_>>(),
                "data": hex::encode(&a.data),
                "args": decoded,
            })
        })
        .collect();
    let decoded = serde_json::json!({
        "expiration_ms": tx.expiration_ms,
        "ref_block_num": tx.ref_block_num,
        "ref_block_prefix": tx.ref_block_prefix,
        "actions": actions,
        "signatures": signed.signatures.iter().map(|s| serde_json::json!({
            "account": s.account.to_string(),
            "public_key": s.public_key.map(hex::encode),
        })).collect::<Vec<_>>(),
    });
    let id = hex::encode(tx.id());
    output(
        args.json,
        serde_json::json!({
            "dry_run": true,
            "transaction": id,
            "bytes": hex::encode(&bytes),
            "decoded": decoded,
        }),
        format!(
            "dry run: transaction {id} was not sent ({} bytes)\n{}\n{}\n",
            bytes.len(),
            hex::encode(&bytes),
            serde_json::to_string_pretty(&decoded)?
        ),
    )
}
