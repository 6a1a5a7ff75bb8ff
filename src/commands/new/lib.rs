//! {{name}}: counts how often each account calls `hit`; `reset` forgets an account's count.
//!
//! Storage: an account's 8-byte name -> its count (a little-endian u64).
//! The action types in `abi.rs` come from {{name}}.abi.json; after changing it, run
//! `tally abigen {{name}}.abi.json --lang rust -o src/abi.rs`.
//! Build: `tally build . -o {{name}}.wasm`. Test: `./test.sh`. More: README.md.
#![no_std]

mod abi;

use abi::{Action, Hit, Reset};
use tally_host_api::guest::{self, Context};

tally_host_api::contract!(execute);

fn execute(_ctx: &Context, action: Action) {
    match action {
        // hit {who}: adds one to who's count.
        Action::Hit(Hit { who }) => {
            guest::require_auth(who);
            let count = guest::load::<u64>(&who).unwrap_or(0);
            guest::store(&who, &(count + 1));
        }
        // reset {who}: forgets who's count.
        Action::Reset(Reset { who }) => {
            guest::require_auth(who);
            guest::remove(&who);
        }
    }
}
