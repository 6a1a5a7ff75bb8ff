//! token-rs: a token in Rust against Tally's ABI v1 (`tally_host_api::guest`).
//!
//! Actions (borsh data, dispatched by `apply`):
//! - `create {issuer, max_supply}`: once; needs the issuer's authority;
//! - `issue {to, amount, memo}`: the issuer mints up to the maximum supply;
//! - `transfer {from, to, amount, memo}`: needs `from`'s authority.
//!
//! Storage matches simplecoin's: a balance lives under the account's 8-byte name, as a
//! little-endian u64, so `tally balance` and `tally get` read both contracts alike. The token's
//! totals live under the borsh string "stats".
//!
//! Build: `tally build contracts/token-rs` (writes contracts/token-rs.wasm).
#![no_std]

extern crate alloc;

use alloc::string::String;
use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::guest::{self, Name, check, load, message, name, require_auth, store};

#[global_allocator]
static ALLOCATOR: guest::BumpAllocator<{ 32 * 1024 }> = guest::BumpAllocator::new();

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    guest::abort("panic")
}

const STATS: &str = "stats";

#[derive(BorshSerialize, BorshDeserialize)]
struct Stats {
    issuer: Name,
    max_supply: u64,
    supply: u64,
}

#[derive(BorshDeserialize)]
struct Create {
    issuer: Name,
    max_supply: u64,
}

#[derive(BorshDeserialize)]
struct Issue {
    to: Name,
    amount: u64,
    #[allow(dead_code)] // carried for the record, like the transfer's
    memo: String,
}

#[derive(BorshDeserialize)]
struct Transfer {
    from: Name,
    to: Name,
    amount: u64,
    #[allow(dead_code)]
    memo: String,
}

/// The entry point: routes each action to its handler.
#[unsafe(no_mangle)]
pub extern "C" fn apply(receiver: u64, code: u64, action: u64) {
    guest::dispatch(
        receiver,
        code,
        action,
        &[
            (name("create"), create),
            (name("issue"), issue),
            (name("transfer"), transfer),
        ],
    );
}

fn create() {
    let c: Create = message();
    require_auth(c.issuer);
    check(load::<_, Stats>(STATS).is_none(), "token already created");
    store(
        STATS,
        &Stats {
            issuer: c.issuer,
            max_supply: c.max_supply,
            supply: 0,
        },
    );
}

fn issue() {
    let i: Issue = message();
    let mut stats: Stats = load(STATS).unwrap_or_else(|| guest::abort("token not created"));
    require_auth(stats.issuer);
    check(
        i.amount <= stats.max_supply - stats.supply,
        "issue exceeds the maximum supply",
    );
    stats.supply += i.amount;
    store(STATS, &stats);
    credit(i.to, i.amount);
}

fn transfer() {
    let t: Transfer = message();
    require_auth(t.from);
    check(t.from != t.to, "cannot transfer to self");
    let from: u64 = load(&t.from).unwrap_or_else(|| guest::abort("no existing balance"));
    check(from >= t.amount, "insufficient funds");
    if from == t.amount {
        guest::remove(&t.from);
    } else {
        store(&t.from, &(from - t.amount));
    }
    credit(t.to, t.amount);
}

fn credit(to: Name, amount: u64) {
    let balance: u64 = load(&to).unwrap_or(0);
    let balance = balance
        .checked_add(amount)
        .unwrap_or_else(|| guest::abort("balance overflow"));
    store(&to, &balance);
}
