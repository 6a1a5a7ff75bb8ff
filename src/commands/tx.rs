//! `tally tx`: a committed transaction's receipt, events and call tree, from a local chain or
//! a node.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use tally_chain::{Event, Name, SignedTransaction, TxId};

use super::local::{Opened, Source, output};
use super::query::code_hash;
use super::receipt::{self, Committed};
use super::target::find_abi;
use crate::node::bundle;
use crate::node::results::{BundleResult, RpcEvent, TX_EVENT_TYPE, TxSummary, events_of};
use crate::node::rpc::{FoundTx, Rpc};

/// How long a transaction the index does not hold yet is looked for again: CometBFT indexes
/// a block in the background after committing it, so a transaction `tally push --rpc` just
/// reported can be missing from `tx_search` for a moment (it was, right after the push, in
/// tests/node.rs on two busy cores).
const INDEX_LAG: Duration = Duration::from_secs(2);

/// Pause between two searches while waiting for the index.
const INDEX_POLL: Duration = Duration::from_millis(100);

/// Show a committed transaction: its outcome, fuel, events and call tree.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally tx 3f2a...c9 --data ./chain
  tally tx 3f2a...c9 --rpc 127.0.0.1:26601 --json
  tally tx 3f2a...c9 --rpc 127.0.0.1:26601 --wallet ./net   # events decoded with the kept ABIs

ID is the transaction id `tally push` printed. On a local chain, each push keeps its receipt
(with each action's fuel, console and calls) in DIR/receipts.jsonl; a transaction missing
there (its push stopped before writing it) is looked up in the retained blocks, which hold its
outcome and events only. A node finds it through CometBFT's transaction index (the event
`tally_tx.id`, which a transaction sent alone in its bundle carries, as `tally push --rpc`
sends it; `tally load`'s bundles of many carry none); its receipt has the outcome, fuel,
failed action and events, never a console or a call tree, which only the process that ran the
transaction sees.")]
pub struct TxArgs {
    /// The transaction id (64 hex digits).
    pub id: String,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// With --rpc: the wallet directory whose abi/ holds the ABIs of contracts deployed with
    /// it (a devnet's directory), to decode the events; without it they print as hex. An ABI
    /// is used while its contract runs the code it was kept for, so an event emitted before
    /// an upgrade is decoded with the new code's ABI.
    #[arg(long, value_name = "DIR", requires = "rpc")]
    pub wallet: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Transaction `id` in one bundle `tx_search` found, if the bundle names it: its block, its
/// actions, its summary and its events.
struct InBundle {
    height: u64,
    actions: Vec<(Name, Name)>,
    summary: TxSummary,
    events: Vec<Event>,
}

fn in_bundle(found: &FoundTx, id: &TxId) -> anyhow::Result<Option<InBundle>> {
    let wanted = hex::encode(id);
    let named = |e: &RpcEvent| e.kind == TX_EVENT_TYPE && e.get("id") == Some(wanted.as_str());
    let Some(index) = found
        .result
        .events
        .iter()
        .find(|e| named(e))
        .and_then(|e| e.get("index")?.parse::<usize>().ok())
    else {
        return Ok(None);
    };
    let at = found.height;
    let result = BundleResult::decode(&found.result.data)
        .with_context(|| format!("block {at}: the bundle's result is not Tally's"))?;
    let summary =
        result.txs.get(index).cloned().with_context(|| {
            format!("block {at}: the bundle's result has no transaction {index}")
        })?;
    let parts = bundle::split(&found.tx).with_context(|| format!("block {at}: a bad bundle"))?;
    let bytes = parts
        .get(index)
        .with_context(|| format!("block {at}: the bundle has no transaction {index}"))?;
    let tx = SignedTransaction::decode(bytes)
        .with_context(|| format!("block {at}: transaction {index} does not decode"))?;
    anyhow::ensure!(
        tx.transaction.id() == *id,
        "block {at}: transaction {index} of the bundle is not {wanted}"
    );
    Ok(Some(InBundle {
        height: at,
        actions: tx
            .transaction
            .actions
            .iter()
            .map(|a| (a.account, a.name))
            .collect(),
        summary,
        events: events_of(&found.result.events, index)?,
    }))
}

/// Transaction `id` on the network of `rpc`: the block that included it. A transaction can
/// sit in more than one bundle (sent twice, or rejected from a full block and sent again): the
/// one that included it wins; if none did, the last rejection is the answer.
fn on_network(rpc: &Rpc, id: &TxId) -> anyhow::Result<Committed> {
    let hex_id = hex::encode(id);
    let query = format!("{TX_EVENT_TYPE}.id='{hex_id}'");
    let deadline = Instant::now() + INDEX_LAG;
    let found = loop {
        let found = rpc.tx_search(&query)?;
        if !found.is_empty() || Instant::now() >= deadline {
            break found;
        }
        std::thread::sleep(INDEX_POLL);
    };
    let mut rejected = None;
    for f in &found {
        let Some(b) = in_bundle(f, id)? else {
            continue;
        };
        match b.summary.into_receipt(*id, b.events) {
            Ok(receipt) => return Ok(Committed::new(b.height, b.actions, receipt)),
            Err(reason) => rejected = Some((b.height, reason)),
        }
    }
    match rejected {
        Some((height, reason)) => {
            bail!("transaction {hex_id} was rejected in block {height}: {reason}")
        }
        None => bail!(
            "{} knows no transaction {hex_id}: not committed (yet), on another network, or \
             sent in a bundle of several (only a transaction sent alone is indexed by its id)",
            rpc.url()
        ),
    }
}

pub fn run(args: TxArgs) -> anyhow::Result<()> {
    let id: TxId = hex::decode(args.id.trim_start_matches("0x"))
        .ok()
        .and_then(|b| b.try_into().ok())
        .with_context(|| {
            format!(
                "{:?} is not a transaction id: 64 hex digits, as `tally push` prints",
                args.id
            )
        })?;
    let committed = match args.source.open()? {
        Opened::Node(rpc) => {
            let mut found = on_network(&rpc, &id)?;
            if let Some(wallet) = &args.wallet {
                // The ABI the wallet kept, while the contract still runs the code it was
                // kept for; an event it does not declare stays hex.
                found.decode_events(|contract| {
                    find_abi(&wallet.join("abi"), contract, &[], |c| code_hash(&rpc, c)).ok()
                });
            }
            found
        }
        Opened::Local(local) => {
            let mut found =
                receipt::find_local(&local.dir, &local.chain, &id)?.with_context(|| {
                    format!(
                        "{} holds no transaction {} in its receipts or its retained blocks (from \
                     block {})",
                        local.dir.display(),
                        args.id,
                        local.chain.store().first_retained()
                    )
                })?;
            found.decode_events(|contract| local.abi(contract));
            found
        }
    };
    output(args.json, committed.json(true), committed.report_text())
}
