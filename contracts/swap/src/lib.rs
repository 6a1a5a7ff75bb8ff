//! swap: a constant-product exchange (Uniswap v2's pair) of two token-rs tokens, built on
//! calls between contracts (docs/CONTRACTS.md).
//!
//! A contract cannot move a user's tokens: the authority of a transaction's signers does not
//! flow into a call. So a user moves tokens to the pool themselves, in the same transaction,
//! and the pool counts what arrived by asking each token for its balance (a query) and
//! comparing it with the reserves it recorded, as Uniswap v2's pair does:
//!
//! 1. `token.transfer {from: user, to: swap, ...}` (signed by the user), then
//! 2. `swap.deposit {user}` or `swap.swap {user, min_out}` (signed by the user).
//!
//! What the pool pays out it sends with a call to the token's `transfer`, in which the pool
//! is the caller and so authorizes moving its own balance.
//!
//! Actions (types generated from contracts/swap.abi.json into `abi.rs`):
//! - `init {token_a, token_b}`: once, by the pool's own account;
//! - `deposit {user}`: what arrived of both tokens becomes the user's shares of the pool;
//! - `swap {user, min_out}`: what arrived of one token buys the other, at the constant product
//!   less a 0.3% fee, at least `min_out` of it or nothing;
//! - `withdraw {user, shares}`: burns shares and sends back their part of both reserves.
//!
//! Events: `deposited {user, a, b, shares}`, `swapped {user, token_in, amount_in,
//! amount_out}`, `withdrew {user, a, b, shares}`. Queries: `reserves` → `Reserves {a, b}` and
//! `shares {user}` → u64. Every type is declared in contracts/swap.abi.json; the calls to the
//! tokens use the types generated from contracts/token-rs.abi.json, so a change to the
//! token's ABI fails this contract's build instead of its calls.
//!
//! Build: `tally build contracts/swap` (writes contracts/swap.wasm).
#![no_std]

extern crate alloc;

mod abi;
/// token-rs's types, to call and query the two tokens.
#[path = "../../token-rs/src/abi.rs"]
mod token_abi;

use abi::{
    Action, Deposit, DepositedEvent, Init, Query, Reserves, Swap, SwappedEvent, Withdraw,
    WithdrewEvent,
};
use alloc::string::String;
use borsh::{BorshDeserialize, BorshSerialize};
use tally_host_api::guest::{self, Context, Name, check, load, require_auth, store};
use token_abi::{BalanceQuery, Transfer};

// As token-rs: every failure is an explicit check, so no formatted panic text (18 KiB).
tally_host_api::contract!(execute, panic = terse);
tally_host_api::queries!(answer);

/// The pool's state, under key "pool".
#[derive(BorshSerialize, BorshDeserialize)]
struct Pool {
    token_a: Name,
    token_b: Name,
    /// What the pool holds of each token, as it last counted.
    reserve_a: u64,
    reserve_b: u64,
    /// Shares issued; a user's own are under the user's 8-byte name.
    shares: u64,
}

const POOL: &str = "pool";

/// The fee on what a swap puts in, in basis points: Uniswap v2's 0.3%.
const FEE_BPS: u128 = 30;

fn execute(ctx: &Context, action: Action) {
    match action {
        Action::Init(i) => init(ctx.receiver, i),
        Action::Deposit(d) => deposit(ctx.receiver, d),
        Action::Swap(s) => swap(ctx.receiver, s),
        Action::Withdraw(w) => withdraw(ctx.receiver, w),
    }
}

fn init(me: Name, i: Init) {
    require_auth(me);
    check(!guest::contains(POOL), "the pool is already initialised");
    check(i.token_a != i.token_b, "a pool needs two different tokens");
    store(
        POOL,
        &Pool {
            token_a: i.token_a,
            token_b: i.token_b,
            reserve_a: 0,
            reserve_b: 0,
            shares: 0,
        },
    );
}

fn pool() -> Pool {
    load::<Pool>(POOL).unwrap_or_else(|| guest::abort("the pool is not initialised"))
}

/// `owner`'s balance of `token`, asked of the token.
fn balance(token: Name, owner: Name) -> u64 {
    guest::ask(token, &BalanceQuery { owner }, 0)
        .unwrap_or_else(|_| guest::abort("the token did not answer `balance`"))
}

/// What arrived of each token since the pool last counted, and the balances now.
fn arrived(me: Name, pool: &Pool) -> ((u64, u64), (u64, u64)) {
    let (a, b) = (balance(pool.token_a, me), balance(pool.token_b, me));
    let lost = || guest::abort("the pool holds less than its reserves");
    let in_a = a.checked_sub(pool.reserve_a).unwrap_or_else(lost);
    let in_b = b.checked_sub(pool.reserve_b).unwrap_or_else(lost);
    ((in_a, in_b), (a, b))
}

/// Sends `amount` of `token` from the pool to `to`: the pool is the caller, so it authorizes.
fn pay(me: Name, token: Name, to: Name, amount: u64) {
    let transfer = Transfer {
        from: me,
        to,
        amount,
        memo: String::from("swap"),
    };
    let sent = guest::call_action(token, &transfer, 0);
    check(sent.is_ok(), "the token transfer out of the pool failed");
}

fn shares_of(user: Name) -> u64 {
    load::<u64>(&user).unwrap_or(0)
}

fn deposit(me: Name, d: Deposit) {
    require_auth(d.user);
    let mut pool = pool();
    let ((in_a, in_b), (a, b)) = arrived(me, &pool);
    check(
        in_a > 0 && in_b > 0,
        "transfer both tokens to the pool first, in the same transaction",
    );
    let minted = if pool.shares == 0 {
        isqrt(u128::from(in_a) * u128::from(in_b))
    } else {
        let by_a = u128::from(in_a) * u128::from(pool.shares) / u128::from(pool.reserve_a);
        let by_b = u128::from(in_b) * u128::from(pool.shares) / u128::from(pool.reserve_b);
        by_a.min(by_b) as u64
    };
    check(minted > 0, "the deposit is too small for a share");
    store(&d.user, &(shares_of(d.user) + minted));
    pool.shares += minted;
    (pool.reserve_a, pool.reserve_b) = (a, b);
    store(POOL, &pool);
    guest::emit_event(&DepositedEvent {
        user: d.user,
        a: in_a,
        b: in_b,
        shares: minted,
    });
    guest::reply(&d, &minted);
}

fn swap(me: Name, s: Swap) {
    require_auth(s.user);
    let mut pool = pool();
    check(pool.shares > 0, "the pool has no liquidity");
    let ((in_a, in_b), (a, b)) = arrived(me, &pool);
    let (token_in, amount_in, reserve_in, reserve_out, token_out) = match (in_a, in_b) {
        (0, 0) => guest::abort("transfer a token to the pool first, in the same transaction"),
        (amount, 0) => (pool.token_a, amount, pool.reserve_a, pool.reserve_b, pool.token_b),
        (0, amount) => (pool.token_b, amount, pool.reserve_b, pool.reserve_a, pool.token_a),
        _ => guest::abort("transfer only the token you sell"),
    };
    let in_with_fee = u128::from(amount_in) * (10_000 - FEE_BPS);
    let out = (in_with_fee * u128::from(reserve_out)
        / (u128::from(reserve_in) * 10_000 + in_with_fee)) as u64;
    check(out > 0 && out >= s.min_out, "the swap gives less than min_out");
    pay(me, token_out, s.user, out);
    // What the pool holds now: all that arrived, less what it paid out.
    if token_out == pool.token_b {
        (pool.reserve_a, pool.reserve_b) = (a, b - out);
    } else {
        (pool.reserve_a, pool.reserve_b) = (a - out, b);
    }
    store(POOL, &pool);
    guest::emit_event(&SwappedEvent {
        user: s.user,
        token_in,
        amount_in,
        amount_out: out,
    });
    guest::reply(&s, &out);
}

fn withdraw(me: Name, w: Withdraw) {
    require_auth(w.user);
    let mut pool = pool();
    let held = shares_of(w.user);
    check(w.shares > 0 && w.shares <= held, "not that many shares");
    let part = |reserve: u64| {
        (u128::from(reserve) * u128::from(w.shares) / u128::from(pool.shares)) as u64
    };
    let (out_a, out_b) = (part(pool.reserve_a), part(pool.reserve_b));
    if held == w.shares {
        guest::remove(&w.user);
    } else {
        store(&w.user, &(held - w.shares));
    }
    pool.shares -= w.shares;
    pool.reserve_a -= out_a;
    pool.reserve_b -= out_b;
    store(POOL, &pool);
    pay(me, pool.token_a, w.user, out_a);
    pay(me, pool.token_b, w.user, out_b);
    guest::emit_event(&WithdrewEvent {
        user: w.user,
        a: out_a,
        b: out_b,
        shares: w.shares,
    });
    guest::reply(&w, &Reserves { a: out_a, b: out_b });
}

/// Answers `reserves` and `shares`.
fn answer(_: &Context, query: Query) {
    match query {
        Query::Reserves(q) => {
            let pool = pool();
            guest::reply(
                &q,
                &Reserves {
                    a: pool.reserve_a,
                    b: pool.reserve_b,
                },
            );
        }
        Query::Shares(q) => guest::reply(&q, &shares_of(q.user)),
    }
}

/// The integer square root of `n`, rounded down (the first deposit's shares, as Uniswap v2).
fn isqrt(n: u128) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut x = n;
    let mut y = x.div_ceil(2);
    while y < x {
        x = y;
        y = (x + n / x) / 2;
    }
    x as u64
}
