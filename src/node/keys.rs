//! Listing a contract's committed keys in order, a page at a time: what `tally keys` reads
//! from a data directory, and what a node answers to ABCI query `keys` (the same function,
//! bounded per request so a remote caller never makes the node do unbounded work).

use borsh::{BorshDeserialize, BorshSerialize};
use tally_chain::store::{Direction, KeyRange, prefix_end};
use tally_chain::{Chain, ChainError, Name};

/// Most entries a node returns for one `keys` query. The node answers queries under the lock
/// its consensus connection takes between blocks, and each entry costs one store seek: a
/// page of 1,000 keys of a 200,000-key contract on the log store took 0.60 ms walking
/// forward and 0.71 ms backward (median of 21 pages at random places, release build, warm;
/// the first, cold, 4.7 ms), so a full page holds that lock for about a millisecond, less
/// than a small block's execution. A client asks again with `after` for more.
pub const MAX_KEYS_PER_QUERY: u32 = 1_000;

/// Most bytes of keys and values a node returns for one `keys` query (the page stops after
/// the entry that reaches it, so it always holds at least one): 16 values of the largest
/// size a contract may store (host-api's `MAX_VALUE_LEN`, 64 KiB), which CometBFT sends back
/// base64 in JSON, a third larger again.
pub const MAX_PAGE_BYTES: usize = 1 << 20;

/// A request for one page of a contract's keys (ABCI query `keys`'s data, borsh).
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct KeysRequest {
    /// The contract, as its name's u64.
    pub contract: u64,
    /// Only keys that start with these bytes.
    pub prefix: Vec<u8>,
    /// Only keys strictly past this one in the walk's direction: the last key of the page
    /// before.
    pub after: Option<Vec<u8>>,
    /// Walk from the largest key down.
    pub reverse: bool,
    /// Most entries wanted (a node returns at most [`MAX_KEYS_PER_QUERY`]).
    pub limit: u32,
}

/// One page of a contract's entries, in order (ABCI query `keys`'s value, borsh).
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct KeysPage {
    /// Keys (the contract's own, without its namespace) and their values.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Whether more keys follow the last one: ask again with it as `after`.
    pub more: bool,
}

/// One page of `request` from `chain`'s committed state: at most `max_keys` entries, and
/// no entry past the one whose keys and values reach `max_bytes` in all.
pub fn page(
    chain: &Chain,
    request: &KeysRequest,
    max_keys: u32,
    max_bytes: usize,
) -> Result<KeysPage, ChainError> {
    let dir = if request.reverse {
        Direction::Backward
    } else {
        Direction::Forward
    };
    let end = prefix_end(&request.prefix);
    let mut range = KeyRange::prefix(&request.prefix, end.as_deref());
    if let Some(after) = &request.after {
        range = range.past(after, dir);
    }
    let limit = request.limit.min(max_keys) as usize;
    let mut entries = Vec::new();
    let mut bytes = 0;
    let mut walk = chain.contract_entries(Name(request.contract), range, dir)?;
    while entries.len() < limit && bytes < max_bytes {
        match walk.next() {
            Some(entry) => {
                let (key, value) = entry?;
                bytes += key.len() + value.len();
                entries.push((key, value));
            }
            None => {
                return Ok(KeysPage {
                    entries,
                    more: false,
                });
            }
        }
    }
    // One seek more says whether the page is the last.
    let more = walk.next().transpose()?.is_some();
    Ok(KeysPage { entries, more })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tally_chain::{ChainConfig, MemoryStore};
    use tally_runtime::{Runtime, RuntimeConfig};

    fn name(s: &str) -> Name {
        s.parse().unwrap()
    }

    /// `coin` holds `n` keys `k0000`…, `other` one key, each value 100 bytes.
    fn chain(n: u32) -> Chain {
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
        let store = Box::new(MemoryStore::new(10));
        let mut genesis = Chain::genesis(runtime, store, ChainConfig::default()).unwrap();
        for i in 0..n {
            genesis.allocate(name("coin"), format!("k{i:04}").as_bytes(), &[7; 100]);
        }
        genesis.allocate(name("other"), b"k", b"x");
        genesis.finish().unwrap()
    }

    fn request(prefix: &str, after: Option<&str>, reverse: bool, limit: u32) -> KeysRequest {
        KeysRequest {
            contract: name("coin").0,
            prefix: prefix.as_bytes().to_vec(),
            after: after.map(|a| a.as_bytes().to_vec()),
            reverse,
            limit,
        }
    }

    fn keys(page: &KeysPage) -> Vec<String> {
        page.entries
            .iter()
            .map(|(k, _)| String::from_utf8(k.clone()).unwrap())
            .collect()
    }

    #[test]
    fn a_node_never_returns_more_than_its_bounds_and_says_more_follow() {
        let chain = chain(2_500);
        let asked = request("", None, false, u32::MAX);
        let page = page(&chain, &asked, MAX_KEYS_PER_QUERY, MAX_PAGE_BYTES).unwrap();
        assert_eq!(page.entries.len(), MAX_KEYS_PER_QUERY as usize);
        assert!(page.more);
        // 100-byte values: the byte bound stops the page at the entry that reaches it.
        let small = super::page(&chain, &asked, MAX_KEYS_PER_QUERY, 1_000).unwrap();
        assert_eq!(small.entries.len(), 10);
        assert!(small.more);
        let everything = super::page(&chain, &asked, u32::MAX, usize::MAX).unwrap();
        assert_eq!(everything.entries.len(), 2_500);
        assert!(
            !everything.more,
            "the other contract's key is not this one's"
        );
    }

    #[test]
    fn pages_follow_each_other_in_either_direction_within_the_prefix() {
        let chain = chain(30);
        let page = |r: &KeysRequest| super::page(&chain, r, 1000, MAX_PAGE_BYTES).unwrap();
        let first = page(&request("k001", None, false, 4));
        assert_eq!(keys(&first), ["k0010", "k0011", "k0012", "k0013"]);
        assert!(first.more);
        let next = page(&request("k001", Some("k0013"), false, 100));
        assert_eq!(
            keys(&next),
            ["k0014", "k0015", "k0016", "k0017", "k0018", "k0019"]
        );
        assert!(!next.more);
        let back = page(&request("k001", Some("k0012"), true, 100));
        assert_eq!(keys(&back), ["k0011", "k0010"]);
        let last = page(&request("", None, true, 1));
        assert_eq!(keys(&last), ["k0029"]);
        // An `after` outside the prefix: before it walking forward is the whole prefix.
        assert_eq!(
            page(&request("k002", Some("a"), false, 100)).entries.len(),
            10
        );
        assert!(
            page(&request("k002", Some("z"), false, 100))
                .entries
                .is_empty()
        );
    }
}
