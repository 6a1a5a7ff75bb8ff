//! poll: polls in Rust, on ordered storage (`guest::range::Map`).
//!
//! Actions (types generated from contracts/poll.abi.json into `abi.rs`):
//! - `create {id, creator, question, options, duration_ms}` → the time it closes: the creator
//!   signs; 2 to [`MAX_OPTIONS`] options; it closes `duration_ms` after the block's time;
//! - `vote {id, voter, option}`: the voter signs; a second vote replaces the first; event
//!   `voted`;
//! - `remove {id}`: once closed, its creator deletes it and its votes.
//!
//! Queries: `results {id}` → the question, options, votes per option and whether it is open,
//! counted by walking the poll's votes; `open` → the ids of the polls still open, in order.
//!
//! Storage, two ordered maps: polls under "p" + id, votes under "v" + id + voter, both
//! big-endian (`OrderedKey`), so a poll's votes are one prefix and polls list in id order:
//! `tally keys poll polls`, `tally keys poll 'votes[7]'`. No index of its own is kept: the
//! store's order is the index.
//!
//! Costs grow with what is walked, and every walk is paid (about 4,600 fuel a key): `results`
//! over a poll's votes, `open` over every poll kept, `remove` over a poll's votes, each
//! within one action's or query's 10,000,000 fuel, so about 2,000 votes a poll and 2,000
//! polls kept. A poll meant for more would keep a counter per option (updated by `vote`)
//! and remove in batches; this one shows walks.
//!
//! Build: `tally build contracts/poll`. After changing the ABI:
//! `tally abigen contracts/poll.abi.json --lang rust -o contracts/poll/src/abi.rs`.
#![no_std]

extern crate alloc;

// `abi::Event` is for clients that decode the events this contract emits.
#[allow(dead_code)]
mod abi;

use abi::{Action, Create, Poll, Query, Remove, Results, Vote, VotedEvent};
use alloc::vec;
use alloc::vec::Vec;
use tally_host_api::guest::range::Map;
use tally_host_api::guest::{self, Context, Name, check, require_auth};

tally_host_api::contract!(execute);
tally_host_api::queries!(answer);

/// Polls by id.
const POLLS: Map<u64, Poll> = Map::new(b"p");
/// Each poll's votes by voter: the option chosen.
const VOTES: Map<(u64, Name), u8> = Map::new(b"v");

/// The most options a poll offers: a vote stores its choice in one byte, and a results query
/// sums one counter per option.
const MAX_OPTIONS: usize = 16;

fn execute(_: &Context, action: Action) {
    match action {
        Action::Create(c) => create(c),
        Action::Vote(v) => vote(v),
        Action::Remove(r) => remove(r),
    }
}

fn poll(id: u64) -> Poll {
    POLLS
        .get(&id)
        .unwrap_or_else(|| guest::abort("no poll with this id"))
}

fn create(c: Create) {
    require_auth(c.creator);
    check(
        !POLLS.contains(&c.id),
        "a poll with this id exists: pick another id",
    );
    check(
        (2..=MAX_OPTIONS).contains(&c.options.len()),
        "a poll offers 2 to 16 options",
    );
    let closes_ms = guest::block_time()
        .checked_add(c.duration_ms)
        .unwrap_or_else(|| guest::abort("duration_ms is too large"));
    guest::reply(&c, &closes_ms);
    let Create {
        id,
        creator,
        question,
        options,
        ..
    } = c;
    POLLS.set(
        &id,
        &Poll {
            creator,
            question,
            options,
            closes_ms,
        },
    );
}

fn vote(v: Vote) {
    require_auth(v.voter);
    let poll = poll(v.id);
    check(guest::block_time() < poll.closes_ms, "the poll is closed");
    check(usize::from(v.option) < poll.options.len(), "no such option");
    VOTES.set(&(v.id, v.voter), &v.option);
    guest::emit_event(&VotedEvent {
        id: v.id,
        voter: v.voter,
        option: v.option,
    });
}

fn remove(r: Remove) {
    let poll = poll(r.id);
    require_auth(poll.creator);
    check(
        guest::block_time() >= poll.closes_ms,
        "the poll is still open",
    );
    // Deleting the key a walk just returned is safe: each step seeks past the last key.
    for (key, _) in VOTES.prefix(&r.id) {
        VOTES.remove(&key);
    }
    POLLS.remove(&r.id);
}

fn answer(_: &Context, query: Query) {
    match query {
        Query::Results(q) => {
            let poll = poll(q.id);
            let mut votes = vec![0u64; poll.options.len()];
            for (_, option) in VOTES.prefix(&q.id) {
                if let Some(count) = votes.get_mut(usize::from(option)) {
                    *count += 1;
                }
            }
            let results = Results {
                open: guest::block_time() < poll.closes_ms,
                question: poll.question,
                options: poll.options,
                votes,
            };
            guest::reply(&q, &results);
        }
        Query::Open(q) => {
            let now = guest::block_time();
            let open: Vec<u64> = POLLS
                .iter()
                .filter(|(_, poll)| now < poll.closes_ms)
                .map(|(id, _)| id)
                .collect();
            guest::reply(&q, &open);
        }
    }
}
