//! echo-rs: echo.c in Rust. Reads each action of echo.abi.json with the types `tally abigen
//! --lang rust` generated (abi.rs) and stores what it read under the same keys as echo.c, so
//! tests/authoring.rs can check that both languages accept, refuse and read the same bytes.
#![no_std]

mod abi;

use abi::Action;
use tally_host_api::guest::{ActionData, Context, store_bytes};

tally_host_api::contract!(execute);

fn execute(ctx: &Context, action: Action) {
    store_bytes("receiver", &ctx.receiver.0.to_le_bytes());
    store_bytes("code", &ctx.code.0.to_le_bytes());
    store_bytes("action", &ctx.action.0.to_le_bytes());
    match action {
        Action::All(all) => {
            store_bytes("echo", &all.encode());
            store_bytes("account", &all.account.0.to_le_bytes());
            store_bytes("small", &[all.small]);
            store_bytes("medium", &all.medium.to_le_bytes());
            store_bytes("large", &all.large.to_le_bytes());
            store_bytes("delta", &all.delta.to_le_bytes());
            store_bytes("text", all.text.as_bytes());
            store_bytes("blob", &all.blob);
        }
        Action::Empty(empty) => store_bytes("echo", &empty.encode()),
        Action::PairOf(pair) => {
            store_bytes("echo", &pair.encode());
            store_bytes("first", pair.first.as_bytes());
            store_bytes("second", pair.second.as_bytes());
        }
    }
}
