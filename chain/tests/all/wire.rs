//! Issue 26, the wire: signatures without their public key, implied signers and payer, and
//! compact integers. A signature that omits its key verifies under the key its account has
//! registered when the transaction executes, whatever key the stateless stage checked it
//! against ahead, and every encoding is strict.

use crate::common::*;
use ed25519_dalek::SigningKey;
use tally_chain::crypto::{KeySource, NoKeys, derived_key};
use tally_chain::genesis::GenesisAccount;
use tally_chain::system::{NEWACCOUNT, NewAccount, SYSTEM};
use tally_chain::{
    Chain, ChainConfig, Genesis, Name, Pipeline, SignedTransaction, Transaction, Transfer, TxError,
    TxResult, prepare_block,
};

/// Bytes of a signed simplecoin transfer with a 4-byte memo before issue 26 (borsh: the
/// public key and the account in the signature, fixed-width integers), counted on main.
const TRANSFER_BYTES_BEFORE: usize = 214;

/// Bytes of the same transfer now: 214 less the varints (25: expiration 2, max fee 4, tip 7,
/// four vector lengths 3 each), the implied payer (7), the implied signer account (8) and the
/// public key (31: 32 less its tag byte). The goal was 110; what is left is the signature (64),
/// the action's names (contract, action, authorization: 24) and simplecoin's own data (32).
const TRANSFER_BYTES_AFTER: usize = 143;

struct World {
    chain: Chain,
    alice: SigningKey,
    bob: SigningKey,
    system: SigningKey,
}

fn world() -> World {
    let (alice, bob, system) = (derived_key(26, 0), derived_key(26, 1), derived_key(26, 2));
    let mut genesis = Genesis::with_system_key(system.verifying_key().to_bytes());
    for (who, key) in [("alice", &alice), ("bob", &bob)] {
        genesis.accounts.push(GenesisAccount {
            name: name(who),
            key: key.verifying_key().to_bytes(),
            balance: 1_000_000_000_000,
        });
    }
    let chain = chain_with(ChainConfig::default(), &genesis, &[]);
    World {
        chain,
        alice,
        bob,
        system,
    }
}

/// A native transfer of 1 coin from `from` to `to`, `memo` making it unique.
fn pay(chain: &Chain, from: &str, to: &str, memo: u64) -> Transaction {
    let data = tally_chain::system::NativeTransfer {
        from: name(from),
        to: name(to),
        amount: 1 + memo,
    };
    envelope(
        chain,
        vec![action(
            SYSTEM,
            tally_chain::system::TRANSFER,
            &[name(from)],
            borsh::to_vec(&data).unwrap(),
        )],
    )
}

fn newaccount(chain: &Chain, who: &str, key: &SigningKey) -> Transaction {
    let new = NewAccount {
        creator: SYSTEM,
        name: name(who),
        key: key.verifying_key().to_bytes(),
    };
    let fund = tally_chain::system::NativeTransfer {
        from: SYSTEM,
        to: name(who),
        amount: 1 << 40,
    };
    envelope(
        chain,
        vec![
            action(SYSTEM, NEWACCOUNT, &[SYSTEM], borsh::to_vec(&new).unwrap()),
            action(
                SYSTEM,
                tally_chain::system::TRANSFER,
                &[SYSTEM],
                borsh::to_vec(&fund).unwrap(),
            ),
        ],
    )
}

fn outcome(result: &TxResult) -> Result<(), TxError> {
    match result {
        TxResult::Rejected(e) => Err(e.clone()),
        TxResult::Included(r) if r.is_success() => Ok(()),
        other => panic!("expected success or a rejection, got {other:?}"),
    }
}

/// The pipelines a signature can meet: batched ahead of execution, or one at a time in it.
const PIPELINES: [Pipeline; 2] = [Pipeline::ALL, Pipeline::NONE];

#[test]
fn issue_26_a_signature_without_its_key_verifies_under_the_registered_key() {
    let World {
        mut chain, alice, ..
    } = world();
    for (i, pipeline) in PIPELINES.into_iter().enumerate() {
        chain.set_pipeline(pipeline);
        let tx = SignedTransaction::sign_registered(
            pay(&chain, "alice", "bob", i as u64),
            &[(name("alice"), &alice)],
        );
        assert_eq!(tx.signatures[0].public_key, None);
        // It travels as bytes and comes back whole.
        let back = SignedTransaction::decode(&tx.encode()).unwrap();
        assert_eq!(back, tx);
        let prepared = chain.prepare(vec![back.clone()]);
        if pipeline.batch_verify {
            // Verified ahead, against the committed key.
            assert_eq!(prepared[0].check, tally_chain::Check::Verified);
            assert_eq!(
                prepared[0].keys,
                vec![Some(alice.verifying_key().to_bytes())]
            );
        }
        let block = chain.run_block(vec![back]).unwrap();
        assert_eq!(
            outcome(&block.results[0]),
            Ok(()),
            "{}",
            pipeline.describe()
        );
    }
}

#[test]
fn issue_26_a_signature_without_its_key_by_another_key_or_unknown_account_is_refused() {
    let World {
        mut chain,
        alice,
        bob,
        ..
    } = world();
    for (i, pipeline) in PIPELINES.into_iter().enumerate() {
        chain.set_pipeline(pipeline);
        let i = i as u64;
        // Signed by bob's key for alice: no key travels, so it can only fail to verify.
        let wrong = SignedTransaction::sign_registered(
            pay(&chain, "alice", "bob", 10 + i),
            &[(name("alice"), &bob)],
        );
        let unknown = SignedTransaction::sign_registered(
            pay(&chain, "carol", "bob", 20 + i),
            &[(name("carol"), &alice)],
        );
        let block = chain.run_block(vec![wrong, unknown]).unwrap();
        let what = pipeline.describe();
        assert_eq!(
            outcome(&block.results[0]),
            Err(TxError::BadSignature(name("alice"))),
            "{what}"
        );
        assert_eq!(
            outcome(&block.results[1]),
            Err(TxError::UnknownAccount(name("carol"))),
            "{what}"
        );
    }
}

/// An account created earlier in the block signs without its key: the stateless stage knew
/// no key for it (the committed state has none), so execution verifies it in order against the
/// key the block registered; a signature by another key is refused the same way.
#[test]
fn issue_26_an_account_created_earlier_in_the_block_signs_without_its_key() {
    let World {
        mut chain,
        alice,
        system,
        ..
    } = world();
    let dave = derived_key(26, 3);
    for (i, pipeline) in PIPELINES.into_iter().enumerate() {
        chain.set_pipeline(pipeline);
        let who = ["dave", "erin"][i];
        let create = SignedTransaction::sign_registered(
            newaccount(&chain, who, &dave),
            &[(SYSTEM, &system)],
        );
        let spend =
            SignedTransaction::sign_registered(pay(&chain, who, "bob", 1), &[(name(who), &dave)]);
        let forged =
            SignedTransaction::sign_registered(pay(&chain, who, "bob", 2), &[(name(who), &alice)]);
        let prepared = chain.prepare(vec![create, spend, forged]);
        if pipeline.batch_verify {
            assert_eq!(
                prepared[1].keys,
                vec![None],
                "no committed key to verify against"
            );
        }
        let block = chain
            .execute_block(chain.next_block_time_ms(), &prepared)
            .unwrap();
        chain.commit(tally_chain::Durability::Immediate).unwrap();
        let what = pipeline.describe();
        assert_eq!(outcome(&block.results[0]), Ok(()), "{what}");
        assert_eq!(outcome(&block.results[1]), Ok(()), "{what}");
        assert_eq!(
            outcome(&block.results[2]),
            Err(TxError::BadSignature(name(who))),
            "{what}"
        );
    }
}

/// A key source that is a commit behind: it still has `account`'s old key.
struct Stale {
    account: Name,
    old: [u8; 32],
}

impl KeySource for Stale {
    fn registered_key(&self, account: Name) -> Option<[u8; 32]> {
        (account == self.account).then_some(self.old)
    }
}

/// The stateless stage verified against a key the account no longer has when the transaction
/// executes (it read an older commit; the account was re-keyed since): execution verifies
/// again, in order, under the registered key. Signed by the new key it is included; signed by
/// the old one (which the stale stage accepted) it is refused.
#[test]
fn issue_26_a_signature_checked_against_an_older_key_is_verified_again_under_the_registered_one() {
    let World {
        mut chain,
        alice,
        bob,
        ..
    } = world();
    // alice's "old" key, as a stale stage would know it, is bob's.
    let stale = Stale {
        account: name("alice"),
        old: bob.verifying_key().to_bytes(),
    };
    let by_new = SignedTransaction::sign_registered(
        pay(&chain, "alice", "bob", 1),
        &[(name("alice"), &alice)],
    );
    let by_old = SignedTransaction::sign_registered(
        pay(&chain, "alice", "bob", 2),
        &[(name("alice"), &bob)],
    );
    let prepared = prepare_block(vec![by_new, by_old], true, &Pipeline::ALL, &stale);
    // The stale stage could not verify the first (so it names no key), and verified the
    // second under the old key.
    assert_eq!(prepared[0].keys, vec![None]);
    assert_eq!(prepared[1].keys, vec![Some(bob.verifying_key().to_bytes())]);
    first_stands_second_is_refused(&mut chain, &prepared);
}

/// A signature that carries its key keeps the old rule: the key must be the registered one.
#[test]
fn issue_26_a_carried_key_must_still_be_the_registered_key() {
    let World { mut chain, bob, .. } = world();
    let tx = SignedTransaction::sign(pay(&chain, "alice", "bob", 1), &[(name("alice"), &bob)]);
    let block = chain.run_block(vec![tx]).unwrap();
    assert_eq!(
        outcome(&block.results[0]),
        Err(TxError::WrongKey(name("alice")))
    );
}

/// The same blocks of signatures with and without keys, accounts created and spending in
/// one block, good and bad, give the same results and head under every pipeline and thread
/// count.
#[test]
fn issue_26_thread_counts_and_pipelines_give_the_same_head() {
    let mut heads = Vec::new();
    for pipeline in PIPELINES {
        for threads in [1, 2, 3] {
            let pool = thread_pool(threads);
            let (head, results) = pool.install(|| {
                let World {
                    mut chain,
                    alice,
                    bob,
                    system,
                } = world();
                chain.set_pipeline(pipeline);
                let mut results = Vec::new();
                for round in 0..3u64 {
                    let who = format!("new{}", ["a", "b", "c"][round as usize]);
                    let key = derived_key(27, round);
                    let mut txs = vec![SignedTransaction::sign_registered(
                        newaccount(&chain, &who, &key),
                        &[(SYSTEM, &system)],
                    )];
                    for i in 0..40u64 {
                        let memo = round * 100 + i;
                        let (from, signer) = match i % 4 {
                            0 => ("alice", &alice),
                            1 => ("bob", &bob),
                            2 => (who.as_str(), &key),
                            _ => ("alice", &bob), // refused
                        };
                        let to = if from == "bob" { "alice" } else { "bob" };
                        let tx = pay(&chain, from, to, memo);
                        txs.push(if i % 5 == 0 {
                            SignedTransaction::sign(tx, &[(name(from), signer)])
                        } else {
                            SignedTransaction::sign_registered(tx, &[(name(from), signer)])
                        });
                    }
                    let block = chain.run_block(txs).unwrap();
                    results.extend(block.results.iter().map(outcome));
                }
                (chain.head().clone(), results)
            });
            assert!(results.iter().any(Result::is_err) && results.iter().any(Result::is_ok));
            heads.push((pipeline.describe(), threads, head, results));
        }
    }
    for (what, threads, head, results) in &heads[1..] {
        assert_eq!(head, &heads[0].2, "{what}, {threads} threads");
        assert_eq!(results, &heads[0].3, "{what}, {threads} threads");
    }
}

/// A signed simplecoin transfer as the bench and the load generator build it.
fn simplecoin_transfer(memo: &str, elided: bool) -> SignedTransaction {
    let key = derived_key(1, 0);
    let from = name("user1");
    let data = Transfer {
        from,
        to: name("user2"),
        amount: 1,
        memo: memo.into(),
    };
    // An expiration as a live chain has it (late 2026, in milliseconds).
    let tx = Transaction::new(
        1_795_000_000_000,
        (1234, 0xdead_beef),
        vec![action(simplecoin(), transfer(), &[from], data.encode())],
    );
    if elided {
        SignedTransaction::sign_registered(tx, &[(from, &key)])
    } else {
        SignedTransaction::sign(tx, &[(from, &key)])
    }
}

/// Issue 26's figure: the bytes of a signed transfer. Run with `--nocapture` to print it.
#[test]
fn issue_26_a_signed_transfer_takes_143_bytes() {
    let elided = simplecoin_transfer("1f-42", true).encode().len();
    let carried = simplecoin_transfer("1f-42", false).encode().len();
    println!(
        "bytes per signed transfer (memo of 5 bytes): {elided} without its key, {carried} with \
         it; {TRANSFER_BYTES_BEFORE} before issue 26 with a 4-byte memo"
    );
    assert_eq!(elided, TRANSFER_BYTES_AFTER + 1);
    assert_eq!(carried, elided + 32);
    assert_eq!(
        simplecoin_transfer("1f-4", true).encode().len(),
        TRANSFER_BYTES_AFTER
    );
}

/// Every field's encoding is strict: a non-minimal varint, a payer written out that is the
/// implied one, a tag other than 0 or 1, or more signatures than signers never decode, so a
/// transaction has one encoding and one id.
#[test]
fn issue_26_non_minimal_encodings_are_refused() {
    let tx = simplecoin_transfer("x", true);
    let bytes = tx.encode();
    assert_eq!(SignedTransaction::decode(&bytes).unwrap(), tx);
    let malformed = |b: &[u8]| matches!(SignedTransaction::decode(b), Err(TxError::Malformed(_)));

    // The expiration (first field) with a redundant continuation byte: 6 bytes become 7.
    let exp_len = 6;
    assert_eq!(bytes[exp_len - 1] & 0x80, 0);
    let mut longer = bytes[..exp_len].to_vec();
    longer[exp_len - 1] |= 0x80;
    longer.push(0);
    longer.extend_from_slice(&bytes[exp_len..]);
    assert!(malformed(&longer), "a non-minimal varint");

    // The payer tag (after the one action) written out as the implied payer.
    let unsigned = tx.transaction.encode();
    let payer_at = unsigned.len() - 1 - tally_chain::wire::varint_len(tx.transaction.max_fee) - 1;
    assert_eq!(unsigned[payer_at], 0);
    let mut explicit = bytes[..payer_at].to_vec();
    explicit.push(1);
    explicit.extend_from_slice(&tx.transaction.payer.0.to_le_bytes());
    explicit.extend_from_slice(&bytes[payer_at + 1..]);
    assert!(malformed(&explicit), "an implied payer written out");
    // A payer tag of 2.
    let mut tag = bytes.clone();
    tag[payer_at] = 2;
    assert!(malformed(&tag), "a payer tag of 2");

    // The signature's key tag of 2, and a second signature where one account signs.
    let sig_at = unsigned.len() + 1;
    let mut tag = bytes.clone();
    tag[sig_at] = 2;
    assert!(malformed(&tag), "a key tag of 2");
    let mut two = bytes[..unsigned.len()].to_vec();
    two.push(2);
    two.extend_from_slice(&bytes[sig_at..]);
    two.extend_from_slice(&bytes[sig_at..]);
    assert!(malformed(&two), "more signatures than signers");

    // Trailing bytes, and every truncation.
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(malformed(&trailing), "a trailing byte");
    for cut in 0..bytes.len() {
        assert!(
            SignedTransaction::decode(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
}

/// The chain without a key source (`NoKeys`) gives the same results: the stateless stage's keys
/// only decide how much execution verifies.
#[test]
fn issue_26_no_key_source_only_moves_verification_into_execution() {
    let World {
        mut chain,
        alice,
        bob,
        ..
    } = world();
    let txs = vec![
        SignedTransaction::sign_registered(
            pay(&chain, "alice", "bob", 1),
            &[(name("alice"), &alice)],
        ),
        SignedTransaction::sign_registered(
            pay(&chain, "alice", "bob", 2),
            &[(name("alice"), &bob)],
        ),
    ];
    let prepared = prepare_block(txs, true, &Pipeline::ALL, &NoKeys);
    assert!(prepared.iter().all(|p| p.keys == vec![None]));
    first_stands_second_is_refused(&mut chain, &prepared);
}

/// Executes `prepared`, two transactions signed for alice: the first stands, the second is
/// refused for its signature.
fn first_stands_second_is_refused(chain: &mut Chain, prepared: &[tally_chain::PreparedTx]) {
    let block = chain
        .execute_block(chain.next_block_time_ms(), prepared)
        .unwrap();
    assert_eq!(outcome(&block.results[0]), Ok(()));
    assert_eq!(
        outcome(&block.results[1]),
        Err(TxError::BadSignature(name("alice")))
    );
}
