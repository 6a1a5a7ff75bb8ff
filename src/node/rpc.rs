//! A small client of CometBFT's JSON-RPC over HTTP: what `tally load`, `tally devnet` and the
//! `--rpc` commands (`get`, `query`, `push`, `deploy`, `tx`, …) ask a node.

use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::Value;

use super::ledger::Head;
use super::results::RpcEvent;

/// How long one RPC call may take: a broadcast waits for CheckTx of a bundle of thousands of
/// signatures (tens of ms), and a busy node answers late, but never this late.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A CometBFT node's RPC endpoint.
#[derive(Clone)]
pub struct Rpc {
    base: String,
    agent: ureq::Agent,
}

/// CheckTx's answer to a broadcast.
#[derive(Debug, Clone)]
pub struct Broadcast {
    /// Tally's result code (`node::app::code`).
    pub code: u32,
    /// Why, when refused.
    pub log: String,
}

impl Rpc {
    /// A client of the node at `url` (`http://127.0.0.1:26657`; the scheme may be omitted, and
    /// CometBFT's own `tcp://` is read as `http://`).
    pub fn new(url: &str) -> Self {
        let trimmed = url.trim().trim_end_matches('/');
        let base = if let Some(rest) = trimmed.strip_prefix("tcp://") {
            format!("http://{rest}")
        } else if trimmed.starts_with("http://") {
            trimmed.to_string()
        } else {
            format!("http://{trimmed}")
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(CALL_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Self { base, agent }
    }

    /// Its base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Calls `method` with `params` (JSON-RPC 2.0 over POST) and returns its `result`.
    pub fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut response = self
            .agent
            .post(&self.base)
            .header("Content-Type", "application/json")
            .send(serde_json::to_vec(&body)?.as_slice())
            .with_context(|| {
                format!(
                    "cannot reach CometBFT at {}: is the node running? (start one with `tally devnet`)",
                    self.base
                )
            })?;
        let text = response
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .with_context(|| format!("reading the answer of {} to {method}", self.base))?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} answered {method} with something not JSON", self.base))?;
        if let Some(err) = v.get("error") {
            bail!("{} refused {method}: {}", self.base, err);
        }
        v.get("result")
            .cloned()
            .with_context(|| format!("{} answered {method} without a result", self.base))
    }

    /// `/status`: the latest block height.
    pub fn height(&self) -> anyhow::Result<u64> {
        let s = self.call("status", serde_json::json!({}))?;
        s["sync_info"]["latest_block_height"]
            .as_str()
            .and_then(|h| h.parse().ok())
            .context("status without sync_info.latest_block_height")
    }

    /// `/broadcast_tx_sync`: submits `tx` and returns CheckTx's answer.
    ///
    /// A transaction whose hex fits CometBFT's request-line limit goes as a GET with the
    /// hex in the URI, which CometBFT decodes directly: a JSON-RPC body instead goes through
    /// Go's reflective JSON decoder several times, which took a third of CometBFT's CPU time
    /// under `tally load` (perf, bundles of 1,000 transfers).
    pub fn broadcast(&self, tx: &[u8]) -> anyhow::Result<Broadcast> {
        let r = if tx.len() * 2 < MAX_URI_HEX {
            self.get_broadcast(tx)?
        } else {
            let b64 = base64::engine::general_purpose::STANDARD.encode(tx);
            self.call("broadcast_tx_sync", serde_json::json!({ "tx": b64 }))?
        };
        Ok(Broadcast {
            code: r["code"].as_u64().unwrap_or(0) as u32,
            log: r["log"].as_str().unwrap_or("").to_string(),
        })
    }

    /// `GET /broadcast_tx_sync?tx=0x…` over a plain socket: the HTTP library refuses URIs over
    /// 64 KiB, and a bundle's hex is hundreds of KiB.
    fn get_broadcast(&self, tx: &[u8]) -> anyhow::Result<Value> {
        use std::io::{Read, Write};
        let host = self.base.trim_start_matches("http://");
        let unreachable = || {
            format!(
                "cannot reach CometBFT at {}: is the node running? (start one with `tally devnet`)",
                self.base
            )
        };
        let mut stream = std::net::TcpStream::connect(host).with_context(unreachable)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT))?;
        let mut request = Vec::with_capacity(tx.len() * 2 + 128);
        request.extend_from_slice(b"GET /broadcast_tx_sync?tx=0x");
        request.extend_from_slice(hex::encode(tx).as_bytes());
        request.extend_from_slice(
            format!(" HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        stream.write_all(&request).with_context(unreachable)?;
        let mut response = Vec::new();
        stream
            .take(16 << 20)
            .read_to_end(&mut response)
            .with_context(|| format!("reading the answer of {} to broadcast_tx_sync", self.base))?;
        let split = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .context("broadcast_tx_sync: an HTTP answer without headers")?;
        let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
        let mut body = response[split + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            body = dechunk(&body).context("broadcast_tx_sync: bad chunked encoding")?;
        }
        let v: Value = serde_json::from_slice(&body).with_context(|| {
            format!(
                "{} answered broadcast_tx_sync with something not JSON",
                self.base
            )
        })?;
        if let Some(err) = v.get("error") {
            bail!("{} refused broadcast_tx_sync: {}", self.base, err);
        }
        v.get("result")
            .cloned()
            .with_context(|| format!("{} answered broadcast_tx_sync without a result", self.base))
    }

    /// `/abci_query`: Tally's answer to `path` with `data`, as (code, value, log).
    pub fn query(&self, path: &str, data: &[u8]) -> anyhow::Result<(u32, Vec<u8>, String)> {
        let r = self.call(
            "abci_query",
            serde_json::json!({ "path": path, "data": hex::encode(data) }),
        )?;
        let resp = &r["response"];
        let value = match resp["value"].as_str() {
            Some(v) => base64::engine::general_purpose::STANDARD
                .decode(v)
                .context("abci_query value is not base64")?,
            None => Vec::new(),
        };
        Ok((
            resp["code"].as_u64().unwrap_or(0) as u32,
            value,
            resp["log"].as_str().unwrap_or("").to_string(),
        ))
    }

    /// Tally's last committed block (ABCI query `head`): the reference block and times a new
    /// transaction needs.
    pub fn head(&self) -> anyhow::Result<Head> {
        let (code, value, log) = self.query("head", &[])?;
        if code != 0 {
            bail!("{} cannot say its head: {log}", self.base);
        }
        serde_json::from_slice(&value).context("the node's head is not Tally's JSON")
    }

    /// `/block_results?height=H`, every field a client reads back into receipts; `None` while
    /// the node has not stored that height's results yet (its block store runs ahead of its
    /// results by up to one block).
    pub fn results(&self, height: u64) -> anyhow::Result<Option<Vec<TxResult>>> {
        let r = match self.call(
            "block_results",
            serde_json::json!({ "height": height.to_string() }),
        ) {
            Ok(r) => r,
            Err(e)
                if ["must be less than or equal to", "could not find results"]
                    .iter()
                    .any(|not_yet| format!("{e:#}").contains(not_yet)) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        r["txs_results"]
            .as_array()
            .map(|a| a.iter().map(TxResult::from_json).collect())
            .unwrap_or_else(|| Ok(Vec::new()))
            .map(Some)
    }

    /// `/tx_search?query=Q`: the CometBFT transactions (bundles) whose events match, oldest
    /// first, at most [`MAX_SEARCH_RESULTS`].
    pub fn tx_search(&self, query: &str) -> anyhow::Result<Vec<FoundTx>> {
        let r = self
            .call(
                "tx_search",
                serde_json::json!({
                    "query": query,
                    "per_page": MAX_SEARCH_RESULTS.to_string(),
                    "order_by": "asc",
                }),
            )
            .map_err(|e| {
                if format!("{e:#}").contains("indexing is disabled") {
                    anyhow::anyhow!(
                        "{} does not index transactions (CometBFT's [tx_index] indexer is \"null\"): \
                         ask a node that indexes (`tally devnet` does unless --no-index)",
                        self.base
                    )
                } else {
                    e
                }
            })?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut found = Vec::new();
        for t in r["txs"].as_array().into_iter().flatten() {
            let number = |key: &str| -> anyhow::Result<u64> {
                t[key]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .or_else(|| t[key].as_u64())
                    .with_context(|| format!("tx_search: a result without {key}"))
            };
            found.push(FoundTx {
                height: number("height")?,
                tx: b64
                    .decode(t["tx"].as_str().unwrap_or(""))
                    .context("tx_search: tx is not base64")?,
                result: TxResult::from_json(&t["tx_result"])?,
            });
        }
        Ok(found)
    }

    /// `/block_results?height=H`: each result's (code, data) and the app hash after the block.
    pub fn block_results(&self, height: u64) -> anyhow::Result<BlockResults> {
        let r = self.call(
            "block_results",
            serde_json::json!({ "height": height.to_string() }),
        )?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let txs = r["txs_results"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| {
                        let data = t["data"]
                            .as_str()
                            .and_then(|d| b64.decode(d).ok())
                            .unwrap_or_default();
                        (t["code"].as_u64().unwrap_or(0) as u32, data)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let app_hash = r["app_hash"]
            .as_str()
            .and_then(|h| b64.decode(h).ok())
            .map(hex::encode)
            .unwrap_or_default();
        Ok(BlockResults { txs, app_hash })
    }

    /// `/blockchain`: (height, time in ms, number of txs) of the blocks in `min..=max`
    /// (CometBFT returns at most 20 per call).
    pub fn block_metas(&self, min: u64, max: u64) -> anyhow::Result<Vec<(u64, u64, u64)>> {
        let r = self.call(
            "blockchain",
            serde_json::json!({ "minHeight": min.to_string(), "maxHeight": max.to_string() }),
        )?;
        let mut out = Vec::new();
        for m in r["block_metas"].as_array().into_iter().flatten() {
            let h = &m["header"];
            let height = h["height"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let time = h["time"].as_str().map(rfc3339_ms).unwrap_or(0);
            let n = m["num_txs"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            out.push((height, time, n));
        }
        out.sort_unstable();
        Ok(out)
    }
}

/// Most transactions `tx_search` returns in one page: CometBFT's own maximum `per_page`.
pub const MAX_SEARCH_RESULTS: usize = 100;

/// One CometBFT transaction's result (a bundle's `ExecTxResult`), as the RPC returns it.
#[derive(Debug, Clone)]
pub struct TxResult {
    /// Its data ([`super::results::BundleResult`] for a bundle that ran).
    pub data: Vec<u8>,
    /// Its ABCI events.
    pub events: Vec<RpcEvent>,
}

impl TxResult {
    fn from_json(t: &Value) -> anyhow::Result<Self> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data = match t["data"].as_str() {
            Some(d) => b64.decode(d).context("a result's data is not base64")?,
            None => Vec::new(),
        };
        let events = t["events"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| RpcEvent {
                kind: e["type"].as_str().unwrap_or("").to_string(),
                attributes: e["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let text = |k: &str| a[k].as_str().unwrap_or("").to_string();
                        (text("key"), text("value"))
                    })
                    .collect(),
            })
            .collect();
        Ok(Self { data, events })
    }
}

/// A transaction `tx_search` found: its height, its bytes (a bundle) and its result.
#[derive(Debug, Clone)]
pub struct FoundTx {
    /// The block holding it.
    pub height: u64,
    /// Its bytes.
    pub tx: Vec<u8>,
    /// Its result.
    pub result: TxResult,
}

/// Longest hex in a GET's URI: Go's HTTP server refuses request headers over 1 MiB.
const MAX_URI_HEX: usize = 900_000;

/// The body of an HTTP/1.1 chunked transfer.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// One block's results as a node stored them.
#[derive(Debug, Clone)]
pub struct BlockResults {
    /// (code, data) per CometBFT transaction.
    pub txs: Vec<(u32, Vec<u8>)>,
    /// The app hash the node's FinalizeBlock returned for the block, hex.
    pub app_hash: String,
}

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time as CometBFT writes it
/// (`2026-01-01T00:00:00.123456789Z`); 0 if it does not parse.
pub fn rfc3339_ms(s: &str) -> u64 {
    let parse = || -> Option<u64> {
        let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
        let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
        let (y, m, day) = (d.next()??, d.next()??, d.next()??);
        let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
        let mut t = hms.split(':').map(|p| p.parse::<u64>().ok());
        let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
        // Out-of-range fields are not a time (and would overflow below); nor is a fraction
        // that is not all digits (slicing it by bytes could split a character).
        if !(1..=12).contains(&m)
            || !(1..=31).contains(&day)
            || !(0..=9999).contains(&y)
            || hh > 23
            || mm > 59
            || ss > 60
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let ms: u64 = format!("{frac:0<3}")[..3].parse().ok()?;
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(days as u64 * 86_400_000 + ((hh * 60 + mm) * 60 + ss) * 1000 + ms)
    };
    parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunk_joins_chunks_and_refuses_truncation() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").as_deref(),
            Some(&b"abcde"[..])
        );
        assert_eq!(dechunk(b"5\r\nab"), None);
    }

    #[test]
    fn rfc3339_ms_reads_cometbft_times() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), 0);
        assert_eq!(rfc3339_ms("2026-01-01T00:00:00Z"), 1_767_225_600_000);
        assert_eq!(
            rfc3339_ms("2026-01-01T00:00:01.234567891Z"),
            1_767_225_601_234
        );
        assert_eq!(rfc3339_ms("2024-02-29T12:00:00.5Z"), 1_709_208_000_500);
        assert_eq!(rfc3339_ms("garbage"), 0);
        // helper-43's review: a multi-byte character in the fraction, and fields that would
        // overflow, panicked; they are not times.
        assert_eq!(rfc3339_ms("2026-01-01T00:00:00.00éZ"), 0);
        assert_eq!(rfc3339_ms("2026-01-01T99999999999999999:00:00Z"), 0);
        assert_eq!(rfc3339_ms("2026-13-01T00:00:00Z"), 0);
        assert_eq!(rfc3339_ms("99999999999-01-01T00:00:00Z"), 0);
    }
}
