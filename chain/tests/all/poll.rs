//! contracts/poll end to end (issue 23): a Rust contract on ordered storage. Its `results`
//! query counts a poll's votes by walking their prefix, its `open` query lists polls by
//! walking the polls' map, `remove` deletes the votes as it walks them, and a second vote
//! replaces the first. Driven with the types generated from its ABI (poll_abi.rs).

use crate::common::*;
use crate::swap::push_tx;
use tally_chain::{Chain, TxReceipt};
use tally_host_api::message::{Message, read_exact};

const POLL_WASM: &[u8] = include_bytes!("../../../contracts/poll.wasm");

#[allow(dead_code)] // the enums are for a contract's dispatch
#[path = "poll_abi.rs"]
mod poll_abi;

use poll_abi::{Create, OpenQuery, Remove, Results, ResultsQuery, Vote};

const DURATION_MS: u64 = 5_000;

fn create(chain: &mut Chain, id: u64, options: &[&str]) -> TxReceipt {
    let create = Create {
        id,
        creator: name("alice"),
        question: format!("question {id}"),
        options: options.iter().map(|o| o.to_string()).collect(),
        duration_ms: DURATION_MS,
    };
    push_tx(chain, &[("poll", "create", "alice", create.encode())])
}

fn vote(chain: &mut Chain, id: u64, voter: &str, option: u8) -> TxReceipt {
    let vote = Vote {
        id,
        voter: name(voter),
        option,
    };
    push_tx(chain, &[("poll", "vote", voter, vote.encode())])
}

fn results(chain: &Chain, id: u64) -> Results {
    let answer = chain
        .query(
            name("poll"),
            ResultsQuery::NAME,
            &ResultsQuery { id }.encode(),
        )
        .unwrap();
    assert!(answer.is_success(), "{answer:?}");
    read_exact(&answer.output).unwrap()
}

fn open(chain: &Chain) -> Vec<u64> {
    let answer = chain
        .query(name("poll"), OpenQuery::NAME, &OpenQuery {}.encode())
        .unwrap();
    assert!(answer.is_success(), "{answer:?}");
    read_exact(&answer.output).unwrap()
}

#[test]
fn issue_23_a_poll_counts_votes_and_lists_polls_by_walking_its_ordered_maps() {
    let mut chain = unsigned_chain(&[(name("poll"), POLL_WASM)]);
    // Created out of order: listed in id order (big-endian keys).
    for id in [300, 7, 42] {
        let receipt = create(&mut chain, id, &["yes", "no", "later"]);
        assert!(receipt.is_success(), "{}", receipt.report());
    }
    assert_eq!(open(&chain), [7, 42, 300]);

    for (voter, option) in [("alice", 0), ("bob", 1), ("carol", 0)] {
        let receipt = vote(&mut chain, 42, voter, option);
        assert!(receipt.is_success(), "{}", receipt.report());
    }
    // A vote on another poll is not counted in this one's prefix.
    assert!(vote(&mut chain, 7, "bob", 2).is_success());
    // A second vote replaces the first.
    assert!(vote(&mut chain, 42, "bob", 0).is_success());
    let r = results(&chain, 42);
    assert_eq!(
        (r.question.as_str(), r.votes.as_slice(), r.open),
        ("question 42", &[3, 0, 0][..], true)
    );
    assert_eq!(results(&chain, 7).votes, [0, 0, 1]);

    let receipt = vote(&mut chain, 42, "bob", 3);
    assert!(
        receipt
            .failure()
            .unwrap()
            .message
            .contains("no such option"),
        "{}",
        receipt.report()
    );

    // Closed once its time has passed: no more votes, no longer listed, and removable.
    let remove = Remove { id: 42 }.encode();
    let receipt = push_tx(&mut chain, &[("poll", "remove", "alice", remove.clone())]);
    assert!(receipt.failure().unwrap().message.contains("still open"));
    let closes = chain.head().timestamp_ms + DURATION_MS;
    while chain.next_block_time_ms() <= closes {
        chain.run_block(vec![]).unwrap();
    }
    assert!(
        vote(&mut chain, 42, "dave", 1)
            .failure()
            .unwrap()
            .message
            .contains("closed")
    );
    assert!(!results(&chain, 42).open);
    assert_eq!(open(&chain), Vec::<u64>::new());
    let receipt = push_tx(&mut chain, &[("poll", "remove", "bob", remove.clone())]);
    assert!(!receipt.is_success(), "only the creator removes a poll");
    let receipt = push_tx(&mut chain, &[("poll", "remove", "alice", remove)]);
    assert!(receipt.is_success(), "{}", receipt.report());
    // Its votes went with it; poll 7's stayed. A vote's key is "v", the poll's id and the
    // voter's name, both big-endian.
    let vote_key = |id: u64, voter: &str| {
        [&b"v"[..], &id.to_be_bytes(), &name(voter).0.to_be_bytes()].concat()
    };
    for voter in ["alice", "bob", "carol"] {
        assert_eq!(chain.get(name("poll"), &vote_key(42, voter)).unwrap(), None);
    }
    assert_eq!(
        chain.get(name("poll"), &vote_key(7, "bob")).unwrap(),
        Some(vec![2])
    );
    assert_eq!(results(&chain, 7).votes, [0, 0, 1]);
}
