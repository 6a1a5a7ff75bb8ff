//! `tally keys`: list a contract's committed keys in order, a page at a time.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use serde_json::json;

use super::get::as_type;
use super::local::{Source, output, parse_name};
use super::state::{parse_key, raw_key_text, raw_value_text, typed};
use crate::node::keys::{KeysPage, KeysRequest, MAX_KEYS_PER_QUERY};

/// Keys `tally keys` lists when not told: a screenful, as `cleos get table` shows 10 rows and
/// CosmWasm's cw-storage-plus pages default to 10-30; more with `--limit`, or the next page
/// with `--after`.
const DEFAULT_LIMIT: u32 = 100;

/// List a contract's committed keys, in byte order.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally keys token --data ./chain                      # every key, 100 at a time
  tally keys token str:st --data ./chain               # the keys that start with \"st\"
  tally keys token balances --data ./chain             # the keys of the ABI's table balances
  tally keys token --reverse --limit 10 --data ./chain # the last 10
  tally keys token --after name:alice --data ./chain   # the page after alice's key
  tally keys counter --as u64 --data ./chain           # every value as a u64
  tally keys token --rpc 127.0.0.1:26601 --wallet ./net  # a node, with the ABI deploy kept

Keys are the contract's own (without its account), in byte order: a name's 8 bytes are
little-endian, so names do not come alphabetically. PREFIX is written as a key is in
`tally get` (name:ACCOUNT, str:TEXT, hex:BYTES or 0xBYTES), or as a table's name: the keys
that fit that table (--limit then counts the keys looked at, shown or not). Keys that fit a table of the contract's ABI are shown as the table's, with their
values decoded (`balances[alice] = 41`); --as decodes every value as one type instead. When
more keys follow, the last line says the --after that lists them. Over --rpc a node returns
at most 1000 keys a request: tally asks again until it has --limit.")]
pub struct KeysArgs {
    /// The contract account.
    pub contract: String,
    /// Only keys that start with this: a key (name:, str:, hex:, 0x) or a table's name.
    pub prefix: Option<String>,
    /// From the largest key down.
    #[arg(long)]
    pub reverse: bool,
    /// Most keys to list.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT)]
    pub limit: u32,
    /// Only keys after this one in the listing's order (the last of the page before).
    #[arg(long, value_name = "KEY")]
    pub after: Option<String>,
    /// Decode every value as TYPE.
    #[arg(long = "as", value_name = "TYPE")]
    pub as_type: Option<String>,
    /// The contract's ABI, for its tables and the structs --as may name [default: the one
    /// deployed with the contract].
    #[arg(long, value_name = "PATH")]
    pub abi: Option<PathBuf>,
    /// With --rpc: the wallet directory whose abi/ holds the ABIs of contracts deployed with
    /// it (a devnet's directory).
    #[arg(long, value_name = "DIR", requires = "rpc")]
    pub wallet: Option<PathBuf>,
    /// A data directory or a node.
    #[command(flatten)]
    pub source: Source,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: KeysArgs) -> anyhow::Result<()> {
    let contract = parse_name(&args.contract)?;
    let opened = args.source.open()?;
    opened.require_contract(contract)?;
    let abi = opened.abi(contract, args.abi.as_deref(), args.wallet.as_deref())?;
    // A table's name lists the keys of that table: those under its prefix that fit it.
    let only = args
        .prefix
        .as_ref()
        .and_then(|text| abi.as_ref()?.tables.get(text.as_str()).cloned());
    let prefix = match (&args.prefix, &only) {
        (_, Some(table)) => table.key.prefix.clone(),
        (None, None) => Vec::new(),
        (Some(text), None) => parse_key(text, abi.as_ref())?,
    };
    let after = args
        .after
        .as_deref()
        .map(|k| parse_key(k, abi.as_ref()))
        .transpose()?;
    let ty = args
        .as_type
        .as_deref()
        .map(|t| as_type(t, abi.as_ref()))
        .transpose()?;
    if args.limit == 0 {
        bail!("--limit 0 lists nothing: give at least 1");
    }
    // Pages until --limit: a node answers at most MAX_KEYS_PER_QUERY a request.
    let mut request = KeysRequest {
        contract: contract.0,
        prefix,
        after,
        reverse: args.reverse,
        limit: args.limit,
    };
    let mut all = KeysPage {
        entries: Vec::new(),
        more: false,
    };
    loop {
        let page = opened.keys(&request)?;
        let got = page.entries.len() as u32;
        all.entries.extend(page.entries);
        all.more = page.more;
        request.limit -= got.min(request.limit);
        if !page.more || request.limit == 0 || got == 0 {
            break;
        }
        request.after = all.entries.last().map(|(k, _)| k.clone());
        debug_assert!(got <= MAX_KEYS_PER_QUERY);
    }
    let abi = abi.unwrap_or_default();
    let mut text = String::new();
    let mut rows = Vec::new();
    for (key, value) in &all.entries {
        if let Some(table) = &only
            && abi.decode_key(&table.key, key).is_none()
        {
            continue;
        }
        let t = typed(&abi, ty.as_ref(), key, value);
        let decoded = match &t.value {
            Some(Ok(v)) => Some(v.clone()),
            _ => None,
        };
        let shown = match &t.value {
            Some(Ok(d)) => super::abi::text(d),
            Some(Err(e)) => format!("{}  ({e:#})", raw_value_text(value)),
            None => raw_value_text(value),
        };
        text.push_str(&format!("{} = {shown}\n", t.key));
        rows.push(json!({
            "key": hex::encode(key),
            "text": t.key,
            "table": t.table.map(|(name, _)| name),
            "value": hex::encode(value),
            "decoded": decoded,
        }));
    }
    let next = all
        .more
        .then(|| all.entries.last().map(|(k, _)| raw_key_text(k)))
        .flatten();
    if rows.is_empty() {
        text.push_str(&format!(
            "{contract} has no keys{}\n",
            args.prefix
                .as_ref()
                .map_or(String::new(), |p| format!(" under {p}"))
        ));
    }
    if let Some(after) = &next {
        let again: Vec<String> = std::env::args()
            .skip(1)
            .scan(false, |skip, a| {
                // Drops an --after given before, with its value.
                let drop = *skip || a == "--after" || a.starts_with("--after=");
                *skip = a == "--after";
                Some((!drop).then_some(a))
            })
            .flatten()
            .map(|a| shell_word(&a))
            .collect();
        text.push_str(&format!(
            "{} keys shown; more follow: tally {} --after {after}\n",
            all.entries.len(),
            again.join(" ")
        ));
    }
    output(
        args.json,
        json!({
            "contract": contract.to_string(),
            "keys": rows,
            "more": all.more,
            "after": next,
        }),
        text,
    )
}

/// `word` quoted for a POSIX shell when it needs to be.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.:/@+=,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
