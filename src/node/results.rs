//! What a node tells clients about each transaction it executed: the `data` and events of a
//! bundle's FinalizeBlock result, and how a client reads them back into receipts.
//!
//! - `data` is the bundle's hash (32 bytes: sha256, CometBFT's transaction hash) followed by
//!   borsh of `Vec<TxSummary>`, one summary per transaction of the bundle, in order: its
//!   outcome, fuel, failing action and reason, and for an included one its usage in each fee
//!   dimension and its fee (per dimension, burned, tip). Those 13 numbers (fuel, 5 usages, 5
//!   parts, burned, tip) are LEB128 varints, not borsh's fixed 8 bytes: a transfer's summary
//!   is then 26 bytes rather than 105 (9 before fees), in what CometBFT stores and hashes for
//!   every transaction. (Fees changed this encoding: a client older than them cannot read a
//!   newer node's results.) CometBFT's `LastResultsHash` commits to `data`
//!   (with the code and gas), so every byte of it is a pure function of the block and the
//!   committed state: abort reasons are Tally's fixed strings and the contract's own text, and
//!   a rejection names its rule without a decoder's message.
//! - Events: one `tally` event per contract event (`contract`, `event`, `data` in hex, `tx` =
//!   the transaction's index in its bundle), so CometBFT's indexer finds events; contract
//!   events are also committed by Tally's own transactions root, which the app hash covers.
//!   A bundle of one transaction, as `tally push --rpc` and other clients send one
//!   transaction, also carries a `tally_tx` event (attribute `id`, indexed: the Tally
//!   transaction id in hex; `index`, 0), so the indexer finds it by its id
//!   (`tx_search?query="tally_tx.id='…'"`, what `tally tx --rpc` asks). A bundle of many does
//!   not name them: an event per transaction cost CometBFT half again its CPU under
//!   `tally load` (one validator, bundles of 1,000, indexing off, 200,000 transfers, medians
//!   of 3 alternated runs on a busy 2-core machine: 8.9 CPU-s against 5.9, and 8,717
//!   committed transfers/s against 12,734), while with an id event for lone transactions only
//!   the figures match the format before it (13,384/s against 13,921/s, within the runs'
//!   spread). Such a transaction is found by its bundle's hash (`/tx?hash=`).

use std::io::{self, Read, Write};

use borsh::{BorshDeserialize, BorshSerialize};
use tally_chain::{Event, Fee, Name, TxError, TxId, TxReceipt, Usage};
use tally_host_api::{Abort, AbortCode};
use tally_runtime::Outcome;
use tendermint_proto::v0_38::abci::{Event as AbciEvent, EventAttribute};

/// ABCI event type of a contract's event.
pub const EVENT_TYPE: &str = "tally";

/// ABCI event type that names each transaction of a bundle by its id.
pub const TX_EVENT_TYPE: &str = "tally_tx";

/// What a block did with one transaction of a bundle. Borsh, in declaration order, with
/// fuel, usage and fee as LEB128 varints (the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxSummary {
    /// Included; every action succeeded.
    Success {
        /// Fuel it used.
        fuel_used: u64,
        /// What it used of each fee dimension.
        usage: Usage,
        /// What it paid.
        fee: Fee,
    },
    /// Included; an action failed, so it changed nothing (its fee is still charged).
    Failed {
        /// Fuel it used.
        fuel_used: u64,
        /// What it used of each fee dimension.
        usage: Usage,
        /// What it paid.
        fee: Fee,
        /// The index of the failing action, if one failed.
        action: Option<u32>,
        /// The abort's stable code ([`AbortCode::code`]).
        code: u16,
        /// The abort's message.
        message: String,
    },
    /// Not included: it could not be valid in this block.
    Rejected {
        /// Which rule it broke.
        reason: String,
    },
}

impl TxSummary {
    /// The summary of a rejection. A malformed transaction's decoder message is left out:
    /// it is the borsh library's text, which could change with its version and split the
    /// validators' results.
    pub fn rejected(error: &TxError) -> Self {
        let reason = match error {
            TxError::Malformed(_) => "malformed transaction".to_string(),
            other => other.to_string(),
        };
        Self::Rejected { reason }
    }

    /// What the transaction paid (nothing if it was not included).
    pub fn fee(&self) -> Fee {
        match self {
            Self::Success { fee, .. } | Self::Failed { fee, .. } => *fee,
            Self::Rejected { .. } => Fee::default(),
        }
    }

    /// The receipt of the included transaction `id` emitting `events`, or why it was
    /// rejected. A node's receipt has no console and no trace: they are for authors, and
    /// never leave the node that ran the transaction.
    pub fn into_receipt(self, id: TxId, events: Vec<Event>) -> Result<TxReceipt, String> {
        let (outcome, failed_action, fuel_used, usage, fee) = match self {
            Self::Rejected { reason } => return Err(reason),
            Self::Success {
                fuel_used,
                usage,
                fee,
            } => (Outcome::Success, None, fuel_used, usage, fee),
            Self::Failed {
                fuel_used,
                usage,
                fee,
                action,
                code,
                message,
            } => {
                // A code this client does not know (a newer node) still reads as a failure.
                let code = AbortCode::from_code(code).unwrap_or(AbortCode::InvalidAction);
                (
                    Outcome::Failure(Abort::new(code, message)),
                    action.map(|a| a as usize),
                    fuel_used,
                    usage,
                    fee,
                )
            }
        };
        Ok(TxReceipt {
            id,
            outcome,
            failed_action,
            fuel_used,
            usage,
            fee,
            events,
            console: Vec::new(),
            trace: None,
        })
    }
}

/// Writes `v` as an LEB128 varint: 7 bits a byte, low first, the high bit set on all but the
/// last.
fn put_varint<W: Write>(w: &mut W, mut v: u64) -> io::Result<()> {
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            return w.write_all(&[low]);
        }
        w.write_all(&[low | 0x80])?;
    }
}

/// Reads an LEB128 varint written by [`put_varint`]; refuses one longer than a u64 needs or
/// with a needless zero byte (one number has one encoding).
fn get_varint<R: Read>(r: &mut R) -> io::Result<u64> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut v = 0u64;
    // 10 bytes hold 64 bits; the tenth may carry only the top bit.
    for i in 0..10 {
        let mut b = [0u8];
        r.read_exact(&mut b)?;
        let b = b[0];
        if i == 9 && b > 1 {
            return Err(bad("a varint above u64::MAX"));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return Err(bad("a varint with a needless zero byte"));
            }
            return Ok(v);
        }
    }
    Err(bad("a varint longer than 10 bytes"))
}

/// Fuel, usage and fee, as varints.
fn put_costs<W: Write>(w: &mut W, fuel: u64, usage: &Usage, fee: &Fee) -> io::Result<()> {
    put_varint(w, fuel)?;
    for v in usage.0.iter().chain(&fee.per_dimension) {
        put_varint(w, *v)?;
    }
    put_varint(w, fee.burned)?;
    put_varint(w, fee.tip)
}

fn get_costs<R: Read>(r: &mut R) -> io::Result<(u64, Usage, Fee)> {
    let fuel = get_varint(r)?;
    let mut usage = Usage::default();
    for v in &mut usage.0 {
        *v = get_varint(r)?;
    }
    let mut fee = Fee::default();
    for v in &mut fee.per_dimension {
        *v = get_varint(r)?;
    }
    fee.burned = get_varint(r)?;
    fee.tip = get_varint(r)?;
    Ok((fuel, usage, fee))
}

impl BorshSerialize for TxSummary {
    fn serialize<W: Write>(&self, w: &mut W) -> io::Result<()> {
        match self {
            Self::Success {
                fuel_used,
                usage,
                fee,
            } => {
                0u8.serialize(w)?;
                put_costs(w, *fuel_used, usage, fee)
            }
            Self::Failed {
                fuel_used,
                usage,
                fee,
                action,
                code,
                message,
            } => {
                1u8.serialize(w)?;
                put_costs(w, *fuel_used, usage, fee)?;
                action.serialize(w)?;
                code.serialize(w)?;
                message.serialize(w)
            }
            Self::Rejected { reason } => {
                2u8.serialize(w)?;
                reason.serialize(w)
            }
        }
    }
}

impl BorshDeserialize for TxSummary {
    fn deserialize_reader<R: Read>(r: &mut R) -> io::Result<Self> {
        match u8::deserialize_reader(r)? {
            0 => {
                let (fuel_used, usage, fee) = get_costs(r)?;
                Ok(Self::Success {
                    fuel_used,
                    usage,
                    fee,
                })
            }
            1 => {
                let (fuel_used, usage, fee) = get_costs(r)?;
                Ok(Self::Failed {
                    fuel_used,
                    usage,
                    fee,
                    action: BorshDeserialize::deserialize_reader(r)?,
                    code: BorshDeserialize::deserialize_reader(r)?,
                    message: BorshDeserialize::deserialize_reader(r)?,
                })
            }
            2 => Ok(Self::Rejected {
                reason: BorshDeserialize::deserialize_reader(r)?,
            }),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no transaction outcome {other}"),
            )),
        }
    }
}

/// A bundle's result `data`: its hash and one summary per transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleResult {
    /// The bundle's CometBFT hash.
    pub bundle: [u8; 32],
    /// One summary per transaction of the bundle, in order.
    pub txs: Vec<TxSummary>,
}

impl BundleResult {
    /// The bytes of `data`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + 4 + 12 * self.txs.len());
        out.extend_from_slice(&self.bundle);
        borsh::to_writer(&mut out, &self.txs).expect("encoding into a Vec cannot fail");
        out
    }

    /// Reads `data` back; `None` if it is not a bundle's result (a malformed bundle's
    /// result has no data).
    pub fn decode(data: &[u8]) -> Option<Self> {
        let (bundle, rest) = data.split_first_chunk::<32>()?;
        let txs = borsh::from_slice(rest).ok()?;
        Some(Self {
            bundle: *bundle,
            txs,
        })
    }
}

fn attribute(key: &str, value: String, index: bool) -> EventAttribute {
    EventAttribute {
        key: key.into(),
        value,
        index,
    }
}

/// The `tally_tx` event of the transaction at `index` in its bundle.
pub fn tx_event(index: usize, id: &TxId) -> AbciEvent {
    AbciEvent {
        r#type: TX_EVENT_TYPE.into(),
        attributes: vec![
            attribute("id", hex::encode(id), true),
            attribute("index", index.to_string(), false),
        ],
    }
}

/// A contract's event as an ABCI event of type `tally`, every attribute indexed, so CometBFT's
/// indexer answers `tx_search` for it (`tally.contract='swap' AND tally.event='swapped'`).
/// `tx` is the transaction's index in its bundle; `data` is the event's borsh data, hex.
pub fn contract_event(tx: usize, event: &Event) -> AbciEvent {
    AbciEvent {
        r#type: EVENT_TYPE.into(),
        attributes: vec![
            attribute("contract", event.contract.to_string(), true),
            attribute("event", event.name.to_string(), true),
            attribute("data", hex::encode(&event.data), true),
            attribute("tx", tx.to_string(), true),
        ],
    }
}

/// An ABCI event as CometBFT's RPC returns it: its type and (key, value) attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcEvent {
    /// Its type.
    pub kind: String,
    /// Its attributes.
    pub attributes: Vec<(String, String)>,
}

impl RpcEvent {
    /// The value of attribute `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The contract events of the transaction at `index` of a bundle, in order, from its
/// result's ABCI events.
pub fn events_of(events: &[RpcEvent], index: usize) -> anyhow::Result<Vec<Event>> {
    let index = index.to_string();
    events
        .iter()
        .filter(|e| e.kind == EVENT_TYPE && e.get("tx") == Some(index.as_str()))
        .map(|e| {
            let field = |key| {
                e.get(key)
                    .ok_or_else(|| anyhow::anyhow!("a `tally` event without the attribute {key:?}"))
            };
            let name = |key| -> anyhow::Result<Name> {
                let text = field(key)?;
                text.parse()
                    .map_err(|err| anyhow::anyhow!("event {key} {text:?}: {err}"))
            };
            Ok(Event {
                contract: name("contract")?,
                name: name("event")?,
                data: hex::decode(field("data")?)
                    .map_err(|err| anyhow::anyhow!("event data is not hex: {err}"))?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_back_and_one_number_has_one_encoding() {
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v).unwrap();
            assert_eq!(get_varint(&mut out.as_slice()).unwrap(), v);
        }
        assert!(
            get_varint(&mut [0x80, 0x00].as_slice()).is_err(),
            "padded zero"
        );
        assert!(
            get_varint(
                &mut [0xff; 9]
                    .iter()
                    .chain(&[2])
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice()
            )
            .is_err()
        );
        assert!(get_varint(&mut [0x80].as_slice()).is_err(), "cut short");
    }

    #[test]
    fn a_transfers_summary_is_compact() {
        // A transfer at the starting prices: ~170 bytes, ~40,000 fuel, 2 keys read and written.
        let summary = TxSummary::Success {
            fuel_used: 40_000,
            usage: Usage([170, 40_000, 144, 0, 160]),
            fee: Fee {
                per_dimension: [170, 400, 144, 0, 640],
                burned: 1_354,
                tip: 0,
            },
        };
        let bytes = borsh::to_vec(&summary).unwrap();
        assert_eq!(bytes.len(), 26, "105 with fixed-width numbers");
        assert_eq!(borsh::from_slice::<TxSummary>(&bytes).unwrap(), summary);
    }

    #[test]
    fn a_bundle_result_reads_back_what_was_encoded() {
        let result = BundleResult {
            bundle: [7; 32],
            txs: vec![
                TxSummary::Success {
                    fuel_used: 9,
                    usage: Usage([170, 9, 128, 0, 144]),
                    fee: Fee {
                        per_dimension: [170, 1, 128, 0, 576],
                        burned: 875,
                        tip: 3,
                    },
                },
                TxSummary::Failed {
                    fuel_used: 10,
                    usage: Usage([1, 2, 3, 4, 5]),
                    fee: Fee {
                        per_dimension: [1, 2, 3, 4, 5],
                        burned: 15,
                        tip: 0,
                    },
                    action: Some(1),
                    code: AbortCode::AssertFailed.code(),
                    message: "insufficient funds".into(),
                },
                TxSummary::rejected(&TxError::Malformed("borsh: unexpected eof".into())),
            ],
        };
        let data = result.encode();
        assert_eq!(&data[..32], &[7; 32]);
        assert_eq!(BundleResult::decode(&data), Some(result.clone()));
        assert_eq!(BundleResult::decode(&data[..31]), None);
        assert_eq!(
            result.txs[2],
            TxSummary::Rejected {
                reason: "malformed transaction".into()
            },
            "no decoder text in consensus data"
        );
    }

    #[test]
    fn a_summary_turns_into_a_receipt_with_its_fee_without_console_or_trace_or_into_its_rejection()
    {
        let usage = Usage([200, 77, 64, 0, 80]);
        let fee = Fee {
            per_dimension: [200, 0, 64, 0, 320],
            burned: 584,
            tip: 10,
        };
        let failed = TxSummary::Failed {
            fuel_used: 77,
            usage,
            fee,
            action: Some(2),
            code: AbortCode::AssertFailed.code(),
            message: "no".into(),
        };
        assert_eq!(
            failed.into_receipt([3; 32], Vec::new()),
            Ok(TxReceipt {
                id: [3; 32],
                outcome: Outcome::Failure(Abort::new(AbortCode::AssertFailed, "no")),
                failed_action: Some(2),
                fuel_used: 77,
                usage,
                fee,
                events: Vec::new(),
                console: Vec::new(),
                trace: None,
            })
        );
        let rejected = TxSummary::Rejected {
            reason: "duplicate".into(),
        };
        assert_eq!(
            rejected.into_receipt([3; 32], Vec::new()),
            Err("duplicate".into())
        );
    }

    #[test]
    fn events_of_picks_one_transactions_contract_events_in_order() {
        let swap: Name = "swap".parse().unwrap();
        let made = |tx, name: &str, data: &[u8]| {
            let e = contract_event(
                tx,
                &Event {
                    contract: swap,
                    name: name.parse().unwrap(),
                    data: data.to_vec(),
                },
            );
            RpcEvent {
                kind: e.r#type,
                attributes: e.attributes.into_iter().map(|a| (a.key, a.value)).collect(),
            }
        };
        let id = tx_event(1, &[1; 32]);
        let events = vec![
            made(0, "deposited", b"a"),
            RpcEvent {
                kind: id.r#type,
                attributes: id
                    .attributes
                    .into_iter()
                    .map(|a| (a.key, a.value))
                    .collect(),
            },
            made(1, "swapped", b"b"),
            made(1, "withdrew", b"c"),
        ];
        let got = events_of(&events, 1).unwrap();
        let names: Vec<String> = got.iter().map(|e| e.name.to_string()).collect();
        assert_eq!(names, ["swapped", "withdrew"]);
        assert_eq!(got[1].data, b"c");
    }
}
