//! contracts/registry.c, a contract beyond transfers: names owned by the first claimant.

use crate::common::{action, envelope, unsigned_chain};
use borsh::BorshSerialize;
use tally_chain::{Chain, Name, SignedTransaction};
use tally_host_api::AbortCode;

const REGISTRY_WASM: &[u8] = include_bytes!("../../../contracts/registry.wasm");

fn name(s: &str) -> Name {
    s.parse().unwrap()
}

#[derive(BorshSerialize)]
struct Set {
    owner: Name,
    entry: Name,
    text: String,
}

#[derive(BorshSerialize)]
struct Del {
    owner: Name,
    entry: Name,
}

/// Pushes `action` with `data`, authorized by `auth`; returns the failure's code and text.
fn push(
    chain: &mut Chain,
    action_name: &str,
    data: Vec<u8>,
    auth: &str,
) -> Option<(AbortCode, String)> {
    let call = action(name("registry"), name(action_name), &[name(auth)], data);
    let tx = SignedTransaction::unsigned(envelope(chain, vec![call]));
    let result = crate::common::push(chain, tx);
    let receipt = result.receipt().expect("included");
    receipt.failure().map(|a| (a.code, a.message.clone()))
}

fn set(
    chain: &mut Chain,
    owner: &str,
    entry: &str,
    text: &str,
    auth: &str,
) -> Option<(AbortCode, String)> {
    let data = borsh::to_vec(&Set {
        owner: name(owner),
        entry: name(entry),
        text: text.into(),
    });
    push(chain, "set", data.unwrap(), auth)
}

fn del(chain: &mut Chain, owner: &str, entry: &str) -> Option<(AbortCode, String)> {
    let data = borsh::to_vec(&Del {
        owner: name(owner),
        entry: name(entry),
    })
    .unwrap();
    push(chain, "del", data, owner)
}

fn record(chain: &Chain, entry: &str) -> Option<(Name, String)> {
    let bytes = chain
        .get(name("registry"), &name(entry).0.to_le_bytes())
        .unwrap()?;
    let owner = Name(u64::from_le_bytes(bytes[..8].try_into().unwrap()));
    Some((owner, String::from_utf8(bytes[8..].to_vec()).unwrap()))
}

#[test]
fn names_belong_to_their_first_claimant() {
    let mut chain = unsigned_chain(&[(name("registry"), REGISTRY_WASM)]);

    assert_eq!(set(&mut chain, "alice", "home", "first", "alice"), None);
    assert_eq!(
        record(&chain, "home"),
        Some((name("alice"), "first".into()))
    );
    let taken = (
        AbortCode::AssertFailed,
        "the name belongs to another account".to_string(),
    );
    assert_eq!(
        set(&mut chain, "bob", "home", "mine", "bob"),
        Some(taken.clone())
    );
    assert_eq!(set(&mut chain, "alice", "home", "second", "alice"), None);
    assert_eq!(
        record(&chain, "home"),
        Some((name("alice"), "second".into()))
    );
    // Claiming for someone else needs their authority.
    let unauthorized = set(&mut chain, "alice", "work", "x", "bob").unwrap();
    assert_eq!(unauthorized.0, AbortCode::Unauthorized);
    let too_long = set(&mut chain, "alice", "work", &"x".repeat(257), "alice").unwrap();
    assert_eq!(too_long.1, "text longer than 256 bytes");
    assert_eq!(del(&mut chain, "bob", "home"), Some(taken));
    assert_eq!(del(&mut chain, "alice", "home"), None);
    assert_eq!(record(&chain, "home"), None);
    assert_eq!(del(&mut chain, "alice", "home").unwrap().1, "no such name");
    assert_eq!(set(&mut chain, "bob", "home", "now mine", "bob"), None);
    assert_eq!(
        record(&chain, "home"),
        Some((name("bob"), "now mine".into()))
    );
}
