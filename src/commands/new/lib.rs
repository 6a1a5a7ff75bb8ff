//! {{name}}: counts how often each account calls `hit`; `reset` forgets an account's count;
//! the query `count` tells anyone an account's count (`tally query {{name}} count ACCOUNT`).
//!
//! Storage: an account's 8-byte name -> its count (a little-endian u64).
//! The types in `abi.rs` come from {{name}}.abi.json; after changing it, run
//! `tally abigen {{name}}.abi.json --lang rust -o src/abi.rs`.
//! Build: `tally build . -o {{name}}.wasm`. Test: `./test.sh`. More: README.md.
#![no_std]

mod abi;

use abi::{Action, Query, Reset};
use tally_host_api::guest::{self, Context, Name};

tally_host_api::contract!(execute);
tally_host_api::queries!(answer);

/// who's count: a u64 under the account's 8-byte name, 0 if none.
fn count_of(who: Name) -> u64 {
    guest::load::<u64>(&who).unwrap_or(0)
}

fn execute(_ctx: &Context, action: Action) {
    match action {
        // hit {who}: adds one to who's count, and returns the new count.
        Action::Hit(hit) => {
            guest::require_auth(hit.who);
            let count = count_of(hit.who) + 1;
            guest::store(&hit.who, &count);
            guest::reply(&hit, &count);
        }
        // reset {who}: forgets who's count.
        Action::Reset(Reset { who }) => {
            guest::require_auth(who);
            guest::remove(&who);
        }
    }
}

fn answer(_ctx: &Context, query: Query) {
    match query {
        // count {who}: who's count (read-only: a query can write nothing).
        Query::Count(q) => guest::reply(&q, &count_of(q.who)),
    }
}
