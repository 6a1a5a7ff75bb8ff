//! Reading a contract's committed state, from a data directory or a node: keys as the
//! command line writes them, and keys and values as a contract's ABI tables describe them
//! (`tally get`, `tally keys`, `tally balance`).

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;
use tally_chain::Name;

use super::abi::{Abi, Table, Type};
use super::local::{Opened, parse_name};
use super::target::{AbiFile, find_abi};
use crate::node::app::code;
use crate::node::keys::{KeysPage, KeysRequest, MAX_KEYS_PER_QUERY, page};
use crate::node::rpc::Rpc;

/// How keys are written on the command line, for errors and `--help`.
pub const KEY_SYNTAX: &str = "name:ACCOUNT (its 8-byte name), str:TEXT, hex:BYTES or 0xBYTES, \
                              or TABLE[PART,...] of the contract's ABI tables";

/// Parses a key as the command line writes it: `name:alice`, `str:stats`, `hex:0a0b`,
/// `0x0a0b`, or, with an ABI, a key of one of its tables (`balances[alice]`, `stats`).
pub fn parse_key(text: &str, abi: Option<&Abi>) -> anyhow::Result<Vec<u8>> {
    if let Some(n) = text.strip_prefix("name:") {
        Ok(parse_name(n)?.0.to_le_bytes().to_vec())
    } else if let Some(s) = text.strip_prefix("str:") {
        Ok(s.as_bytes().to_vec())
    } else if let Some(h) = text
        .strip_prefix("hex:")
        .or_else(|| text.strip_prefix("0x"))
    {
        hex::decode(h).with_context(|| format!("the key {text:?} is not hex"))
    } else if let Some(key) = abi.and_then(|abi| abi.parse_table_key(text)) {
        key.with_context(|| format!("the key {text:?}"))
    } else {
        let tables = abi.map_or(String::new(), |abi| {
            if abi.tables.is_empty() {
                " (the contract's ABI has no tables)".into()
            } else {
                let names: Vec<&str> = abi.tables.keys().map(String::as_str).collect();
                format!(" (its ABI's tables: {})", names.join(", "))
            }
        });
        bail!("keys are written {KEY_SYNTAX}, not {text:?}{tables}")
    }
}

/// A stored key written so that [`parse_key`] reads it back exactly: `str:` when it is
/// plain text, `name:` when it is the 8 bytes of a name (a name of letters and digits, as
/// accounts are), else `hex:`.
pub fn raw_key_text(key: &[u8]) -> String {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"_-.:/@+=,".contains(b);
    if !key.is_empty() && key.iter().all(plain) {
        return format!("str:{}", std::str::from_utf8(key).expect("ASCII"));
    }
    if let Ok(bytes) = <[u8; 8]>::try_from(key) {
        let name = Name(u64::from_le_bytes(bytes));
        let text = name.to_string();
        if !text.is_empty() && !text.contains('.') && text.parse::<Name>().ok() == Some(name) {
            return format!("name:{text}");
        }
    }
    format!("hex:{}", hex::encode(key))
}

/// A stored entry as its contract's ABI reads it.
pub struct Typed<'a> {
    /// The key, written as its table's (`balances[alice]`) or raw ([`raw_key_text`]).
    pub key: String,
    /// The table it belongs to.
    pub table: Option<(&'a str, &'a Table)>,
    /// The value decoded by `--as` or by its table; `None` without either.
    pub value: Option<anyhow::Result<Value>>,
}

/// Reads `key` and `value` with `abi`'s tables, the value as `as_type` when given.
pub fn typed<'a>(abi: &'a Abi, as_type: Option<&Type>, key: &[u8], value: &[u8]) -> Typed<'a> {
    let found = abi.table_of(key);
    let text = match &found {
        Some((name, _, parts)) => Abi::key_text(name, parts),
        None => raw_key_text(key),
    };
    let table = found.map(|(name, table, _)| (name, table));
    let value = match (as_type, &table) {
        (Some(ty), _) => Some(
            abi.decode(ty, value)
                .with_context(|| format!("{text} is not a {}", ty.spelling())),
        ),
        (None, Some((name, t))) => Some(
            abi.decode_table_value(t, value)
                .with_context(|| format!("{text} does not hold what table {name} says")),
        ),
        (None, None) => None,
    };
    Typed {
        key: text,
        table,
        value,
    }
}

/// A value shown raw: hex, and the u64 it is when it is 8 bytes.
pub fn raw_value_text(value: &[u8]) -> String {
    match <[u8; 8]>::try_from(value) {
        Ok(b) => format!("{}  (u64 {})", hex::encode(value), u64::from_le_bytes(b)),
        Err(_) => hex::encode(value),
    }
}

/// The public key `account` has registered, asked of a node (ABCI query `account`); `None`
/// if there is no such account.
pub fn registered_key(rpc: &Rpc, account: Name) -> anyhow::Result<Option<[u8; 32]>> {
    let (status, value, log) = rpc.query("account", &account.0.to_le_bytes())?;
    match status {
        code::OK => Ok(Some(value.try_into().map_err(|v: Vec<u8>| {
            anyhow::anyhow!(
                "the node gave a {}-byte key for {account}, not 32 (is it another chain?)",
                v.len()
            )
        })?)),
        code::NOT_FOUND => Ok(None),
        _ => bail!(
            "the node refused the query (code {status}): {log} (is it an older tally node, \
             without query `account`?)"
        ),
    }
}

/// Whether `account` exists, asked of a node (ABCI query `account`).
pub fn account_exists(rpc: &Rpc, account: Name) -> anyhow::Result<bool> {
    let (status, _, log) = rpc.query("account", &account.0.to_le_bytes())?;
    match status {
        code::OK => Ok(true),
        code::NOT_FOUND => Ok(false),
        _ => bail!(
            "the node refused the query (code {status}): {log} (is it an older tally node, \
             without query `account`?)"
        ),
    }
}

/// `Ok` when `contract` runs code; else why not, and what to do.
pub fn require_contract(
    contract: Name,
    has_code: bool,
    exists: impl FnOnce() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    if has_code {
        return Ok(());
    }
    if exists()? {
        bail!("{contract} has no contract: deploy one with `tally deploy {contract} FILE`")
    }
    bail!(
        "there is no account {contract}: create it with `tally account create {contract}`, \
         then deploy a contract to it with `tally deploy {contract} FILE`"
    )
}

impl Opened {
    /// The committed value of `contract`'s `key`.
    pub fn get(&self, contract: Name, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        match self {
            Opened::Node(rpc) => {
                let mut query = contract.0.to_le_bytes().to_vec();
                query.extend_from_slice(key);
                let (status, value, log) = rpc.query("get", &query)?;
                match status {
                    code::OK => Ok(Some(value)),
                    code::NOT_FOUND => Ok(None),
                    _ => bail!("the node refused the query (code {status}): {log}"),
                }
            }
            Opened::Local(local) => Ok(local.chain.get(contract, key)?),
        }
    }

    /// The native coins of `account`, which pay its fees (none: 0).
    pub fn native_balance(&self, account: Name) -> anyhow::Result<u64> {
        match self {
            Opened::Node(rpc) => {
                let (status, value, log) = rpc.query("native", &account.0.to_le_bytes())?;
                anyhow::ensure!(
                    status == code::OK,
                    "the node refused the query (code {status}): {log}"
                );
                let bytes: [u8; 8] = value
                    .try_into()
                    .map_err(|_| anyhow::anyhow!("the node's native balance is not 8 bytes"))?;
                Ok(u64::from_le_bytes(bytes))
            }
            Opened::Local(local) => Ok(local.chain.native_balance(account)?),
        }
    }

    /// The sha256 of the code `account` runs, if it runs any.
    pub fn code_hash(&self, account: Name) -> anyhow::Result<Option<[u8; 32]>> {
        match self {
            Opened::Node(rpc) => super::query::code_hash(rpc, account),
            Opened::Local(local) => Ok(local.chain.code_hash(account)?),
        }
    }

    /// Whether `account` exists (has a registered key).
    pub fn account_exists(&self, account: Name) -> anyhow::Result<bool> {
        match self {
            Opened::Node(rpc) => account_exists(rpc, account),
            Opened::Local(local) => Ok(local.chain.account_key(account)?.is_some()),
        }
    }

    /// Fails, saying what to do, unless `contract` runs a contract.
    pub fn require_contract(&self, contract: Name) -> anyhow::Result<()> {
        require_contract(contract, self.code_hash(contract)?.is_some(), || {
            self.account_exists(contract)
        })
    }

    /// One page of a contract's entries. A node bounds it ([`MAX_KEYS_PER_QUERY`] entries);
    /// a data directory does not.
    pub fn keys(&self, request: &KeysRequest) -> anyhow::Result<KeysPage> {
        match self {
            Opened::Node(rpc) => {
                let (status, value, log) = rpc.query("keys", &borsh::to_vec(request)?)?;
                if status != code::OK {
                    bail!(
                        "the node refused the query (code {status}): {log} (is it an older \
                         tally node, without query `keys`?)"
                    );
                }
                let page: KeysPage = borsh::from_slice(&value)
                    .context("the node's answer to `keys` is not a page of entries")?;
                if page.entries.len() > request.limit.min(MAX_KEYS_PER_QUERY) as usize {
                    bail!("the node answered `keys` with more entries than asked for");
                }
                Ok(page)
            }
            Opened::Local(local) => Ok(page(&local.chain, request, u32::MAX, usize::MAX)?),
        }
    }

    /// The ABI to read `contract`'s state with: `--abi PATH`, else the one kept when it was
    /// deployed (in the data directory, or with `--rpc` in the `--wallet` directory); `None`
    /// when there is none.
    pub fn abi(
        &self,
        contract: Name,
        path: Option<&Path>,
        wallet: Option<&Path>,
    ) -> anyhow::Result<Option<Abi>> {
        if let Some(path) = path {
            return Abi::read(path).map(Some);
        }
        let given: [AbiFile; 0] = [];
        Ok(match (self, wallet) {
            (Opened::Local(local), _) => local.abi(contract),
            (Opened::Node(rpc), Some(wallet)) => {
                find_abi(&wallet.join("abi"), contract, &given, |c| {
                    super::query::code_hash(rpc, c)
                })
                .ok()
            }
            (Opened::Node(_), None) => None,
        })
    }
}
