//! A committed transaction as the CLI shows it, one way for every command and source: what
//! `tally push`, `tally deploy` and `tally account create` report, and what `tally tx` shows
//! later, from a local chain or a node, as text or `--json`.
//!
//! A local chain also keeps each pushed transaction's receipt in `DIR/receipts.jsonl`, one
//! JSON line per transaction: the index from transaction id to block that `tally tx --data`
//! reads, with what a block does not hold (fuel, the reason of a failure, the console and the
//! call tree). The line is appended once the block is durable. A crash before that leaves
//! the transaction out of the file; `tally tx` then finds it by reading the retained blocks
//! (at most `retain_blocks`, 512 in a `tally init` chain) and shows what a block holds: its
//! outcome and events. A torn last line is cut by the next push. Lines are only hints: one
//! whose block is retained must match it, or it is ignored.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tally_chain::{
    ActionTrace, BlockBody, CallTrace, Chain, Event, Name, TxId, TxReceipt, TxTrace,
};
use tally_host_api::{Abort, AbortCode};
use tally_runtime::{Outcome, TraceFrame, TrapTrace};

/// What is known of a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// Its receipt, as the node or the push that ran it recorded it.
    Receipt,
    /// Only what its block holds: whether it succeeded and its events. Its fuel and the
    /// reason of a failure were not recorded (the receipt's fuel is 0 and a failure's
    /// message says so).
    BlockOnly,
}

/// A committed transaction: its block, its actions and its receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The block holding it.
    pub height: u64,
    /// Each action's (contract, action name), in order.
    pub actions: Vec<(Name, Name)>,
    /// Its receipt. From a node: no console and no trace (they never leave the node that ran
    /// the transaction).
    pub receipt: TxReceipt,
    /// How much of the receipt is known.
    pub detail: Detail,
    /// Each event's fields as its contract's ABI declares them, where one does
    /// ([`Committed::decode_events`]); else empty, and events show as hex.
    pub decoded: Vec<Option<Value>>,
}

impl Committed {
    /// A transaction whose receipt is known.
    pub fn new(height: u64, actions: Vec<(Name, Name)>, receipt: TxReceipt) -> Self {
        Self {
            height,
            actions,
            receipt,
            detail: Detail::Receipt,
            decoded: Vec::new(),
        }
    }

    /// Decodes each event with its contract's ABI, as `abi_of` finds it (asked once per
    /// contract); an event no ABI declares, or whose data does not match, stays hex.
    pub fn decode_events(&mut self, mut abi_of: impl FnMut(Name) -> Option<super::abi::Abi>) {
        let mut abis = std::collections::BTreeMap::new();
        self.decoded = self
            .receipt
            .events
            .iter()
            .map(|e| {
                let abi = abis.entry(e.contract).or_insert_with(|| abi_of(e.contract));
                super::abi::event_value(abi.as_ref(), &e.name.to_string(), &e.data)
            })
            .collect();
    }

    /// Event `i`'s decoded fields, if decoded.
    fn fields(&self, i: usize) -> Option<&Value> {
        self.decoded.get(i).and_then(Option::as_ref)
    }

    /// Its actions as `contract::action, …`.
    pub fn actions_text(&self) -> String {
        self.actions
            .iter()
            .map(|(c, a)| format!("{c}::{a}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Why it failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.receipt.failure().map(ToString::to_string)
    }

    /// Its JSON: the shape `tally push --json` and `tally tx --json` print. `trace` adds the
    /// per-action trace and call tree, when the receipt has one.
    pub fn json(&self, trace: bool) -> Value {
        let r = &self.receipt;
        let known = self.detail == Detail::Receipt;
        let mut value = json!({
            "transaction": hex::encode(r.id),
            "block": self.height,
            "actions": self.actions.iter().map(|(c, a)| json!({
                "contract": c.to_string(), "action": a.to_string(),
            })).collect::<Vec<_>>(),
            "success": r.is_success(),
            "failure": self.failure(),
            "failed_action": r.failed_action,
            "fuel_used": known.then_some(r.fuel_used),
            "fee": known.then(|| fee_json(r)),
            "console": r.console_text(),
            "events": r.events.iter().enumerate().map(|(i, e)| json!({
                "contract": e.contract.to_string(),
                "name": e.name.to_string(),
                "data": hex::encode(&e.data),
                "fields": self.fields(i),
            })).collect::<Vec<_>>(),
        });
        if !known {
            value["recorded"] = json!(false);
        }
        if let (true, Some(t)) = (trace, &r.trace) {
            value["trace"] = trace_json(t);
        }
        value
    }

    /// Its events, one line each.
    pub fn events_text(&self) -> String {
        self.receipt
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                format!(
                    "  event {} from {}: {}\n",
                    e.name,
                    e.contract,
                    self.fields(i)
                        .map_or_else(|| hex::encode(&e.data), super::abi::text)
                )
            })
            .collect()
    }

    /// The line `tally push` ends with: `VERB ACTIONS in block N (transaction ID, F fuel)`,
    /// then the fee by dimension and the events.
    pub fn summary_text(&self, verb: &str) -> String {
        format!(
            "{verb} {} in block {} (transaction {}, {} fuel)\n{}{}",
            self.actions_text(),
            self.height,
            hex::encode(self.receipt.id),
            self.receipt.fuel_used,
            fee_text(&self.receipt),
            self.events_text()
        )
    }

    /// What `tally tx` prints: the outcome with its fuel, each action's fuel, console and
    /// calls when recorded (the receipt's report), then its block, actions and events.
    pub fn report_text(&self) -> String {
        let mut out = match self.detail {
            Detail::Receipt => self.receipt.report(),
            Detail::BlockOnly => format!(
                "{} (fuel and any failure's reason were not recorded: the push that made \
                 this block stopped before writing its receipt)\n",
                if self.receipt.is_success() {
                    "success"
                } else {
                    "failed"
                }
            ),
        };
        out.push_str(&format!(
            "transaction {} in block {}: {}\n{}",
            hex::encode(self.receipt.id),
            self.height,
            self.actions_text(),
            self.events_text()
        ));
        out
    }
}

/// A trace as JSON: per action, its fuel, console, trap frames and call tree.
pub fn trace_json(trace: &TxTrace) -> Value {
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

// The receipts log: one `Record` per line.

/// `DIR/receipts.jsonl`.
pub fn log_path(dir: &Path) -> PathBuf {
    dir.join("receipts.jsonl")
}

#[derive(Debug, Serialize, Deserialize)]
struct AbortRecord {
    code: u16,
    message: String,
}

impl AbortRecord {
    fn of(abort: &Abort) -> Self {
        Self {
            code: abort.code.code(),
            message: abort.message.clone(),
        }
    }

    fn abort(self) -> Abort {
        // A code this version does not know (a newer tally wrote the line) still reads as a
        // failure, with its message.
        Abort::new(
            AbortCode::from_code(self.code).unwrap_or(AbortCode::InvalidAction),
            self.message,
        )
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct FrameRecord {
    func_index: u32,
    func_name: Option<String>,
    offset: Option<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CallRecord {
    depth: u32,
    contract: String,
    entry: String,
    query: bool,
    fuel_used: u64,
    failure: Option<AbortRecord>,
    events: usize,
    console: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ActionRecord {
    fuel_used: u64,
    console: String,
    trap: Option<Vec<FrameRecord>>,
    calls: Vec<CallRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
struct TraceRecord {
    intrinsic_fuel: u64,
    actions: Vec<ActionRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
struct EventRecord {
    contract: String,
    name: String,
    data: String,
}

/// One line of the receipts log.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    height: u64,
    id: String,
    actions: Vec<(String, String)>,
    failure: Option<AbortRecord>,
    failed_action: Option<usize>,
    fuel_used: u64,
    /// The fee dimensions' usage and the fee (absent in logs written before fees).
    #[serde(default)]
    usage: tally_chain::Usage,
    #[serde(default)]
    fee: tally_chain::Fee,
    events: Vec<EventRecord>,
    console: String,
    trace: Option<TraceRecord>,
}

/// A receipt's fee as JSON: the total, burned and tip, and each dimension's usage and part.
pub fn fee_json(r: &TxReceipt) -> Value {
    use tally_chain::Dimension;
    let dimensions: serde_json::Map<String, Value> = Dimension::ALL
        .iter()
        .map(|&d| {
            (
                d.name().to_string(),
                json!({ "used": r.usage.get(d), "unit": d.unit(),
                        "paid": r.fee.per_dimension[d as usize] }),
            )
        })
        .collect();
    json!({ "total": r.fee.total(), "burned": r.fee.burned, "tip": r.fee.tip,
            "dimensions": dimensions })
}

/// A receipt's fee in one line: the total, then what each dimension used and cost.
pub fn fee_text(r: &TxReceipt) -> String {
    use tally_chain::Dimension;
    if r.fee.total() == 0 && r.usage == tally_chain::Usage::default() {
        return String::new();
    }
    let parts: Vec<String> = Dimension::ALL
        .iter()
        .map(|&d| {
            format!(
                "{} {} {} ({})",
                d.name(),
                r.usage.get(d),
                d.unit(),
                r.fee.per_dimension[d as usize]
            )
        })
        .collect();
    let tip = match r.fee.tip {
        0 => String::new(),
        t => format!(" incl. tip {t}"),
    };
    format!("  fee {}{tip}: {}\n", r.fee.total(), parts.join(", "))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn name(text: &str) -> anyhow::Result<Name> {
    text.parse()
        .map_err(|e| anyhow::anyhow!("{text:?} is not a name: {e}"))
}

impl Record {
    fn of(c: &Committed) -> Self {
        let r = &c.receipt;
        Self {
            height: c.height,
            id: hex::encode(r.id),
            actions: c
                .actions
                .iter()
                .map(|(c, a)| (c.to_string(), a.to_string()))
                .collect(),
            failure: r.failure().map(AbortRecord::of),
            failed_action: r.failed_action,
            fuel_used: r.fuel_used,
            usage: r.usage,
            fee: r.fee,
            events: r
                .events
                .iter()
                .map(|e| EventRecord {
                    contract: e.contract.to_string(),
                    name: e.name.to_string(),
                    data: hex::encode(&e.data),
                })
                .collect(),
            console: text(&r.console),
            trace: r.trace.as_ref().map(|t| TraceRecord {
                intrinsic_fuel: t.intrinsic_fuel,
                actions: t
                    .actions
                    .iter()
                    .map(|a| ActionRecord {
                        fuel_used: a.fuel_used,
                        console: text(&a.console),
                        trap: a.trap.as_ref().map(|t| {
                            t.frames
                                .iter()
                                .map(|f| FrameRecord {
                                    func_index: f.func_index,
                                    func_name: f.func_name.clone(),
                                    offset: f.offset,
                                })
                                .collect()
                        }),
                        calls: a
                            .calls
                            .iter()
                            .map(|c| CallRecord {
                                depth: c.depth,
                                contract: c.contract.to_string(),
                                entry: c.entry.to_string(),
                                query: c.query,
                                fuel_used: c.fuel_used,
                                failure: c.failure.as_ref().map(AbortRecord::of),
                                events: c.events,
                                console: text(&c.console),
                            })
                            .collect(),
                    })
                    .collect(),
            }),
        }
    }

    fn committed(self) -> anyhow::Result<Committed> {
        let id: TxId = hex::decode(&self.id)
            .ok()
            .and_then(|b| b.try_into().ok())
            .context("an id that is not 32 bytes of hex")?;
        let trace = match self.trace {
            None => None,
            Some(t) => Some(TxTrace {
                intrinsic_fuel: t.intrinsic_fuel,
                actions: t
                    .actions
                    .into_iter()
                    .map(|a| {
                        Ok(ActionTrace {
                            fuel_used: a.fuel_used,
                            console: a.console.into_bytes(),
                            trap: a.trap.map(|frames| {
                                Box::new(TrapTrace {
                                    frames: frames
                                        .into_iter()
                                        .map(|f| TraceFrame {
                                            func_index: f.func_index,
                                            func_name: f.func_name,
                                            offset: f.offset,
                                        })
                                        .collect(),
                                })
                            }),
                            calls: a
                                .calls
                                .into_iter()
                                .map(|c| {
                                    Ok(CallTrace {
                                        depth: c.depth,
                                        contract: name(&c.contract)?,
                                        entry: name(&c.entry)?,
                                        query: c.query,
                                        fuel_used: c.fuel_used,
                                        failure: c.failure.map(AbortRecord::abort),
                                        events: c.events,
                                        console: c.console.into_bytes(),
                                    })
                                })
                                .collect::<anyhow::Result<_>>()?,
                        })
                    })
                    .collect::<anyhow::Result<_>>()?,
            }),
        };
        let receipt = TxReceipt {
            id,
            outcome: match self.failure {
                None => Outcome::Success,
                Some(f) => Outcome::Failure(f.abort()),
            },
            failed_action: self.failed_action,
            fuel_used: self.fuel_used,
            usage: self.usage,
            fee: self.fee,
            events: self
                .events
                .into_iter()
                .map(|e| {
                    Ok(Event {
                        contract: name(&e.contract)?,
                        name: name(&e.name)?,
                        data: hex::decode(&e.data).context("event data that is not hex")?,
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            console: self.console.into_bytes(),
            trace,
        };
        let actions = self
            .actions
            .iter()
            .map(|(c, a)| Ok((name(c)?, name(a)?)))
            .collect::<anyhow::Result<_>>()?;
        Ok(Committed::new(self.height, actions, receipt))
    }
}

/// Appends `committed`'s receipt to the log in `dir`. The caller holds the store's lock, so
/// it is the only writer; a last line a crash tore is cut first.
pub fn append(dir: &Path, committed: &Committed) -> anyhow::Result<()> {
    let path = log_path(dir);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let len = file.metadata()?.len();
    if len > 0 {
        let bytes = std::fs::read(&path)?;
        if bytes.last() != Some(&b'\n') {
            let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            file.set_len(keep as u64)?;
        }
    }
    let mut line = serde_json::to_vec(&Record::of(committed))?;
    line.push(b'\n');
    file.write_all(&line)
        .with_context(|| format!("cannot append to {}", path.display()))
}

/// The ids of a block's transactions, in order.
fn block_ids(chain: &Chain, height: u64) -> anyhow::Result<Option<(BlockBody, Vec<TxId>)>> {
    let Some((_, body)) = chain.store().header_and_body(height)? else {
        return Ok(None);
    };
    let body: BlockBody = borsh::from_slice(&body)
        .with_context(|| format!("block {height}'s body does not decode"))?;
    let ids = body
        .transactions
        .iter()
        .map(|t| t.transaction.id())
        .collect();
    Ok(Some((body, ids)))
}

/// Transaction `id` of the local chain in `dir`: from the receipts log, else from the
/// retained blocks (newest first); `None` if neither has it.
pub fn find_local(dir: &Path, chain: &Chain, id: &TxId) -> anyhow::Result<Option<Committed>> {
    let wanted = hex::encode(id);
    let log = match std::fs::read_to_string(log_path(dir)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).context(format!("reading {}", log_path(dir).display())),
    };
    // The last line for an id wins; a torn or foreign line is skipped.
    let record = log
        .lines()
        .rev()
        .filter(|line| line.contains(&wanted))
        .find_map(|line| serde_json::from_str::<Record>(line).ok())
        .filter(|r| r.id == wanted);
    if let Some(record) = record {
        let committed = record.committed()?;
        match block_ids(chain, committed.height)? {
            // Pruned: the line is all there is.
            None => return Ok(Some(committed)),
            Some((body, ids)) => {
                let at = ids.iter().position(|i| i == id);
                let matches = at.is_some_and(|i| {
                    body.success.get(i) == Some(&committed.receipt.is_success())
                        && body.events.get(i) == Some(&committed.receipt.events)
                });
                if matches {
                    return Ok(Some(committed));
                }
            }
        }
    }
    let store = chain.store();
    for height in (store.first_retained()..=chain.head().height).rev() {
        let Some((body, ids)) = block_ids(chain, height)? else {
            continue;
        };
        let Some(i) = ids.iter().position(|i| i == id) else {
            continue;
        };
        let success = body.success.get(i).copied().unwrap_or(false);
        let tx = &body.transactions[i].transaction;
        let receipt = TxReceipt {
            id: *id,
            outcome: match success {
                true => Outcome::Success,
                false => Outcome::Failure(Abort::new(
                    AbortCode::InvalidAction,
                    "the reason was not recorded",
                )),
            },
            failed_action: None,
            fuel_used: 0,
            usage: Default::default(),
            fee: Default::default(),
            events: body.events.get(i).cloned().unwrap_or_default(),
            console: Vec::new(),
            trace: None,
        };
        return Ok(Some(Committed {
            height,
            actions: tx.actions.iter().map(|a| (a.account, a.name)).collect(),
            receipt,
            detail: Detail::BlockOnly,
            decoded: Vec::new(),
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        s.parse().unwrap()
    }

    /// A receipt with every field set: a failure, events, a console and a call tree.
    fn full() -> Committed {
        let abort = Abort::new(AbortCode::AssertFailed, "min_out not reached");
        let receipt = TxReceipt {
            id: [9; 32],
            outcome: Outcome::Failure(abort.clone()),
            failed_action: Some(1),
            fuel_used: 12_345,
            usage: Default::default(),
            fee: Default::default(),
            events: vec![Event {
                contract: n("swap"),
                name: n("swapped"),
                data: vec![1, 2, 3],
            }],
            console: b"hello".to_vec(),
            trace: Some(TxTrace {
                intrinsic_fuel: 600,
                actions: vec![ActionTrace {
                    fuel_used: 11_745,
                    console: b"hello".to_vec(),
                    trap: Some(Box::new(TrapTrace {
                        frames: vec![TraceFrame {
                            func_index: 3,
                            func_name: Some("apply".into()),
                            offset: Some(0x40),
                        }],
                    })),
                    calls: vec![CallTrace {
                        depth: 1,
                        contract: n("tokena"),
                        entry: n("transfer"),
                        query: false,
                        fuel_used: 900,
                        failure: Some(abort),
                        events: 0,
                        console: b"in token".to_vec(),
                    }],
                }],
            }),
        };
        Committed::new(
            7,
            vec![(n("tokena"), n("transfer")), (n("swap"), n("swap"))],
            receipt,
        )
    }

    #[test]
    fn a_record_reads_back_the_receipt_it_was_written_from() {
        let c = full();
        let line = serde_json::to_string(&Record::of(&c)).unwrap();
        let back = serde_json::from_str::<Record>(&line)
            .unwrap()
            .committed()
            .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn append_cuts_a_torn_last_line_first() {
        let tmp = tempfile::tempdir().unwrap();
        append(tmp.path(), &full()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(log_path(tmp.path()))
            .unwrap();
        f.write_all(b"{\"height\": 8, \"id\"").unwrap();
        append(tmp.path(), &full()).unwrap();
        let text = std::fs::read_to_string(log_path(tmp.path())).unwrap();
        assert_eq!(text.lines().count(), 2);
        for line in text.lines() {
            serde_json::from_str::<Record>(line).unwrap();
        }
    }

    #[test]
    fn the_text_shows_the_outcome_calls_and_events_and_the_json_the_push_shape() {
        let c = full();
        let text = c.report_text();
        assert!(
            text.starts_with("failed in action 1: assert failed: min_out not reached (12345 fuel)"),
            "{text}"
        );
        assert!(
            text.contains("call tokena::transfer (900 fuel) failed"),
            "{text}"
        );
        assert!(
            text.contains("in block 7: tokena::transfer, swap::swap"),
            "{text}"
        );
        assert!(text.contains("event swapped from swap: 010203"), "{text}");
        let v = c.json(true);
        assert_eq!(v["success"], false);
        assert_eq!(v["failed_action"], 1);
        assert_eq!(v["events"][0]["name"], "swapped");
        assert_eq!(v["trace"]["actions"][0]["calls"][0]["contract"], "tokena");
        assert!(c.json(false).get("trace").is_none());
    }
}
