//! token-rs: a token in Rust against Tally's ABI v1 (`tally_host_api::guest`).
//!
//! Actions (borsh data, types generated from contracts/token-rs.abi.json into `abi.rs`):
//! - `create {issuer, max_supply}`: once; needs the issuer's authority;
//! - `issue {to, amount, memo}`: the issuer mints up to the maximum supply;
//! - `transfer {from, to, amount, memo}`: needs `from`'s authority.
//!
//! Query `balance {owner}` → u64: the owner's balance (`tally query token balance alice`),
//! which another contract asks with `guest::ask(token, &BalanceQuery { owner }, 0)`.
//!
//! Storage matches simplecoin's: a balance lives under the account's 8-byte name, as a
//! little-endian u64, so `tally balance` and `tally get` read both contracts alike. The token's
//! totals live under the key "stats" (`tally get token str:stats`).
//!
//! Build: `tally build contracts/token-rs` (writes contracts/token-rs.wasm). After changing the
//! ABI: `tally abigen contracts/token-rs.abi.json --lang rust -o contracts/token-rs/src/abi.rs`.
#![no_std]

mod abi;

use abi::{Action, Create, Issue, Query, Transfer};
use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::guest::{self, Context, Name, check, load, require_auth, store};

// Every failure is an explicit check with its own message, so formatted panic text would only
// add 13 KiB of code and 5 KiB of data that each fresh instance pays for (guest.rs measures).
tally_host_api::contract!(execute, panic = terse);
tally_host_api::queries!(answer);

const STATS: &str = "stats";

#[derive(BorshSerialize, BorshDeserialize)]
struct Stats {
    issuer: Name,
    max_supply: u64,
    supply: u64,
}

fn execute(_: &Context, action: Action) {
    match action {
        Action::Create(c) => create(c),
        Action::Issue(i) => issue(i),
        Action::Transfer(t) => transfer(t),
    }
}

/// Answers query `balance`: the owner's balance (0 if none).
fn answer(_: &Context, query: Query) {
    match query {
        Query::Balance(q) => guest::reply(&q, &load::<u64>(&q.owner).unwrap_or(0)),
    }
}

fn create(c: Create) {
    require_auth(c.issuer);
    check(!guest::contains(STATS), "token already created");
    store(
        STATS,
        &Stats {
            issuer: c.issuer,
            max_supply: c.max_supply,
            supply: 0,
        },
    );
}

fn issue(i: Issue) {
    let mut stats = load::<Stats>(STATS).unwrap_or_else(|| guest::abort("token not created"));
    require_auth(stats.issuer);
    check(
        i.amount <= stats.max_supply - stats.supply,
        "issue exceeds the maximum supply",
    );
    stats.supply += i.amount;
    store(STATS, &stats);
    credit(i.to, i.amount);
}

fn transfer(t: Transfer) {
    require_auth(t.from);
    check(t.from != t.to, "cannot transfer to self");
    let from = load::<u64>(&t.from).unwrap_or_else(|| guest::abort("no existing balance"));
    check(from >= t.amount, "insufficient funds");
    if from == t.amount {
        guest::remove(&t.from);
    } else {
        store(&t.from, &(from - t.amount));
    }
    credit(t.to, t.amount);
}

fn credit(to: Name, amount: u64) {
    let balance = load::<u64>(&to).unwrap_or(0);
    let balance = balance
        .checked_add(amount)
        .unwrap_or_else(|| guest::abort("balance overflow"));
    store(&to, &balance);
}
