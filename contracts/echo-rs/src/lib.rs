//! echo-rs: echo.c in Rust. Reads each action of echo.abi.json with the types `tally abigen
//! --lang rust` generated (abi.rs) and stores what it read under the same keys as echo.c, so
//! tests/authoring.rs can check that both languages accept, refuse and read the same bytes.
#![no_std]

mod abi;

use abi::Action;
use tally_host_api::guest::{Context, Message, store_bytes};

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
        Action::Rich(rich) => {
            store_bytes("echo", &rich.encode());
            store_bytes("flag", &[u8::from(rich.flag)]);
            store_bytes("port", &rich.port.to_le_bytes());
            store_bytes("big", &rich.big.to_le_bytes());
            store_bytes("offset", &rich.offset.to_le_bytes());
            let sum: i64 = rich.points.iter().map(|p| i64::from(p.x)).sum();
            let labels = rich.points.iter().filter(|p| p.label.is_some()).count() as u32;
            let mut points = [0; 12];
            points[..8].copy_from_slice(&sum.to_le_bytes());
            points[8..].copy_from_slice(&labels.to_le_bytes());
            store_bytes("points", &points);
            if let Some(value) = rich.maybe {
                store_bytes("maybe", &value.to_le_bytes());
            }
            let total: usize = rich.nested.iter().map(|inner| inner.len()).sum();
            store_bytes("nested", &(total as u32).to_le_bytes());
        }
        Action::PairOf(pair) => {
            // A panic with a formatted message, for tests/authoring.rs: the receipt keeps it.
            // (Random test text never spells this: its pieces have none of its letters.)
            if pair.first == "panic!" {
                panic!("echo-rs was asked to panic with {:?}", pair.second);
            }
            store_bytes("echo", &pair.encode());
            store_bytes("first", pair.first.as_bytes());
            store_bytes("second", pair.second.as_bytes());
        }
    }
}
