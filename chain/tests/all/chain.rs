//! The chain's guarantees: the seed's scenario, atomic transactions, rejections, the block
//! path, and the hardening of issue 10.

use std::borrow::Cow;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::*;
use tally_chain::state::keys;
use tally_chain::{
    BlockArchive, BlockHeader, BlockRecord, Chain, ChainConfig, ChainError, Commit, Durability,
    Entries, Genesis, MemoryStore, SignedTransaction, StateStore, StoreResult, Transaction,
    Transfer, TxError, TxResult, prepare_block,
};
use tally_host_api::AbortCode;
use tally_host_api::limits::{
    FUEL_PER_ACTION, MAX_ACTIONS_PER_TX, MAX_BLOCK_FUEL, MAX_MESSAGE_LEN, MAX_SIGNATURES_PER_TX,
    MAX_TX_BYTES,
};
use tally_runtime::{Runtime, RuntimeConfig, RuntimeError};

fn transfer_data(from: &str, to: &str, amount: u64) -> Vec<u8> {
    Transfer {
        from: name(from),
        to: name(to),
        amount,
        memo: "memo".into(),
    }
    .encode()
}

fn transfer_tx(chain: &Chain, from: &str, to: &str, amount: u64) -> SignedTransaction {
    unsigned_tx(
        chain,
        simplecoin(),
        transfer(),
        transfer_data(from, to, amount),
    )
}

fn bal(chain: &Chain, account: &str) -> Option<u64> {
    balance(chain, simplecoin(), name(account))
}

fn rejected(result: TxResult) -> TxError {
    match result {
        TxResult::Rejected(e) => e,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn the_seeds_scenario_moves_exact_balances() {
    // The EOS post's test: 1,000 transfers of 1+i from simplecoin to init1, in one block.
    let mut chain = simplecoin_chain();
    assert_eq!(bal(&chain, "simplecoin"), Some(SIMPLECOIN_SUPPLY));
    let txs: Vec<_> = (0..1000)
        .map(|i| transfer_tx(&chain, "simplecoin", "init1", 1 + i))
        .collect();
    let block = chain.run_block(txs).unwrap();
    for (i, result) in block.results.iter().enumerate() {
        assert!(result.is_success(), "transfer {i}: {result:?}");
    }
    let moved: u64 = (1..=1000).sum();
    assert_eq!(bal(&chain, "init1"), Some(moved));
    assert_eq!(bal(&chain, "simplecoin"), Some(SIMPLECOIN_SUPPLY - moved));
}

#[test]
fn failing_transfers_leave_state_untouched_and_the_next_one_succeeds() {
    let mut with_failures = simplecoin_chain();
    let mut clean = simplecoin_chain();
    let first = transfer_tx(&clean, "simplecoin", "alice", 100);
    let last = transfer_tx(&clean, "alice", "bob", 40);
    let failing = [
        (
            transfer_tx(&clean, "alice", "bob", 101),
            "insufficient funds",
        ),
        (
            transfer_tx(&clean, "carol", "bob", 1),
            "no existing balance",
        ),
        (
            unsigned_tx(&clean, simplecoin(), transfer(), vec![1, 2, 3]),
            "message too short",
        ),
    ];
    let mut txs = vec![first.clone()];
    txs.extend(failing.iter().map(|(tx, _)| tx.clone()));
    txs.push(last.clone());
    let a = with_failures.run_block(txs).unwrap();
    for ((_, reason), result) in failing.iter().zip(&a.results[1..4]) {
        let abort = result.receipt().unwrap().failure().expect("a failure");
        assert_eq!(abort.code, AbortCode::AssertFailed);
        assert_eq!(&abort.message, reason);
    }
    assert!(a.results[0].is_success() && a.results[4].is_success());
    let b = clean.run_block(vec![first, last]).unwrap();
    // The failed transactions are in the block (and their ids in the replay window), but
    // their writes changed nothing.
    assert_eq!(user_state(&with_failures), user_state(&clean));
    assert_ne!(a.header.state_checksum, b.header.state_checksum);
    assert_ne!(a.header.transactions_root, b.header.transactions_root);
    assert_eq!(bal(&with_failures, "alice"), Some(60));
    assert_eq!(bal(&with_failures, "bob"), Some(40));
}

#[test]
fn a_failing_action_rolls_back_the_earlier_actions_of_its_transaction() {
    let mut chain = simplecoin_chain();
    let mut tx = transfer_tx(&chain, "simplecoin", "alice", 5);
    let bad = action(simplecoin(), transfer(), &[], vec![0; 4]);
    tx.transaction.actions.push(bad);
    let result = push(&mut chain, tx);
    assert_eq!(result.receipt().unwrap().failed_action, Some(1));
    assert_eq!(bal(&chain, "alice"), None);
    assert_eq!(bal(&chain, "simplecoin"), Some(SIMPLECOIN_SUPPLY));
}

#[test]
fn invalid_transactions_are_rejected_with_their_own_error() {
    let mut chain = simplecoin_chain();
    let base = transfer_tx(&chain, "simplecoin", "alice", 1);
    let next_time = chain.next_block_time_ms();

    let mut expired = base.clone();
    expired.transaction.expiration_ms = next_time;
    let mut too_far = base.clone();
    too_far.transaction.expiration_ms = next_time + 10 * 3_600_000;
    let mut unknown_ref = base.clone();
    unknown_ref.transaction.ref_block_prefix ^= 1;
    let mut wrong_num = base.clone();
    wrong_num.transaction.ref_block_num += 7;
    let mut empty = base.clone();
    empty.transaction.actions.clear();
    // Issue 10: limits are enforced when a transaction is admitted, before inclusion.
    let mut many_actions = base.clone();
    many_actions.transaction.actions =
        vec![base.transaction.actions[0].clone(); MAX_ACTIONS_PER_TX + 1];
    let mut big_data = base.clone();
    big_data.transaction.actions[0].data = vec![0; MAX_MESSAGE_LEN as usize + 1];
    let mut huge_setcode = base.clone();
    huge_setcode.transaction.actions[0] = action(
        tally_chain::system::SYSTEM,
        tally_chain::system::SETCODE,
        &[],
        vec![0; MAX_TX_BYTES],
    );
    let mut many_auths = base.clone();
    many_auths.transaction.actions[0].authorization = vec![name("x"); MAX_SIGNATURES_PER_TX + 1];

    type Expect = fn(&TxError) -> bool;
    let cases: [(SignedTransaction, Expect); 9] = [
        (expired, |e| matches!(e, TxError::Expired { .. })),
        (too_far, |e| matches!(e, TxError::ExpirationTooFar { .. })),
        (unknown_ref, |e| {
            matches!(e, TxError::UnknownReferenceBlock { .. })
        }),
        (wrong_num, |e| {
            matches!(e, TxError::UnknownReferenceBlock { .. })
        }),
        (empty, |e| matches!(e, TxError::NoActions)),
        (many_actions, |e| {
            matches!(
                e,
                TxError::TooMany {
                    what: "actions",
                    ..
                }
            )
        }),
        (big_data, |e| {
            matches!(e, TxError::ActionDataTooLarge { index: 0, .. })
        }),
        (huge_setcode, |e| matches!(e, TxError::TooLarge { .. })),
        (many_auths, |e| matches!(e, TxError::TooMany { .. })),
    ];
    let before = user_state(&chain);
    let (txs, expected): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
    let block = chain.run_block(txs.clone()).unwrap();
    for ((result, expected), tx) in block.results.into_iter().zip(expected).zip(&txs) {
        let e = rejected(result);
        assert!(expected(&e), "{e}");
        // The same limits hold for bytes from outside.
        if matches!(
            e,
            TxError::TooMany { .. } | TxError::ActionDataTooLarge { .. } | TxError::TooLarge { .. }
        ) {
            assert_eq!(SignedTransaction::decode(&tx.encode()), Err(e));
        }
    }
    // Nothing rejected was included: the block is empty.
    assert_eq!(
        chain
            .store()
            .block(chain.head().height)
            .unwrap()
            .unwrap()
            .body,
        borsh::to_vec(&tally_chain::BlockBody::default()).unwrap()
    );
    // It changed nothing but the replay window, which records no id for it.
    assert_eq!(user_state(&chain), before);
    let recent = chain
        .get_raw(&keys::recent_ids(chain.head().height))
        .unwrap()
        .unwrap();
    assert_eq!(recent, chain.head().timestamp_ms.to_le_bytes());
    assert!(push(&mut chain, base).is_success());
}

#[test]
fn an_action_for_an_account_without_code_fails_its_transaction() {
    let mut chain = simplecoin_chain();
    let mut tx = transfer_tx(&chain, "simplecoin", "alice", 1);
    tx.transaction
        .actions
        .push(action(name("nobody"), transfer(), &[], vec![]));
    let result = push(&mut chain, tx);
    let abort = result.receipt().unwrap().failure().unwrap();
    assert_eq!(abort.code, AbortCode::NoHandler);
    assert_eq!(bal(&chain, "alice"), None);
}

#[test]
fn oversized_and_malformed_bytes_are_refused_before_decoding() {
    let huge = vec![0u8; MAX_TX_BYTES + 1];
    assert!(matches!(
        SignedTransaction::decode(&huge),
        Err(TxError::TooLarge { .. })
    ));
    let mut bytes = simplecoin_chain_tx_bytes();
    bytes.push(0);
    assert!(matches!(
        SignedTransaction::decode(&bytes),
        Err(TxError::Malformed(_))
    ));
}

fn simplecoin_chain_tx_bytes() -> Vec<u8> {
    let chain = simplecoin_chain();
    transfer_tx(&chain, "simplecoin", "alice", 1).encode()
}

/// A contract that stores `value` under key "v" on every action.
fn writer(value: u8) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
            (import "env" "store" (func $store (param i32 i32 i32 i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "v")
            (data (i32.const 8) "\{value:02x}")
            (func (export "apply") (param i64 i64 i64)
                (call $store (i32.const 0) (i32.const 1) (i32.const 8) (i32.const 1))))"#
    ))
    .unwrap()
}

#[test]
fn issue_11_an_action_after_setcode_in_the_same_transaction_runs_the_new_code() {
    use tally_chain::system::{SETCODE, SYSTEM, SetCode};
    let dave = name("dave");
    let old = writer(1);
    let mut chain = unsigned_chain(&[(dave, &old)]);
    let value = |chain: &Chain| chain.get(dave, b"v").unwrap();
    let setcode = |code: Vec<u8>| {
        action(
            SYSTEM,
            SETCODE,
            &[dave],
            borsh::to_vec(&SetCode {
                account: dave,
                code,
            })
            .unwrap(),
        )
    };
    let call = action(dave, name("go"), &[], vec![]);

    // A transaction that sets new code, calls it, then fails: the old code stays, and the
    // next call runs it (no stale compiled contract survives the rollback).
    let failing = envelope(
        &chain,
        vec![setcode(writer(3)), call.clone(), setcode(vec![1, 2, 3])],
    );
    assert!(!push(&mut chain, SignedTransaction::unsigned(failing)).is_success());
    let again = unsigned_tx(&chain, dave, name("go"), vec![]);
    assert!(push(&mut chain, again).is_success());
    assert_eq!(value(&chain), Some(vec![1]));

    let tx = envelope(&chain, vec![setcode(writer(2)), call]);
    let result = push(&mut chain, SignedTransaction::unsigned(tx));
    assert!(result.is_success(), "{result:?}");
    assert_eq!(
        value(&chain),
        Some(vec![2]),
        "the call after setcode ran the old code"
    );
}

#[test]
fn issue_10_the_chain_keeps_no_contract_the_runtimes_cache_evicted() {
    // A runtime whose contract cache holds about one contract: calling three in turn evicts
    // the first. The chain must not keep its own copy alive, or the cache's byte bound would
    // bound nothing: calling the first again has to load it again.
    let probe = Runtime::new(RuntimeConfig::default()).unwrap();
    let weight = probe.prepare(&writer(1)).unwrap().weight();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            contract_cache_bytes: weight,
            ..RuntimeConfig::default()
        })
        .unwrap(),
    );
    let config = ChainConfig {
        check_signatures: false,
        fees: tally_chain::FeeSchedule::ZERO,
        ..ChainConfig::default()
    };
    let accounts = [name("one"), name("two"), name("three")];
    let mut builder =
        Chain::genesis(runtime.clone(), Box::new(MemoryStore::new(512)), config).unwrap();
    builder.apply(&Genesis::default()).unwrap();
    for (i, account) in accounts.iter().enumerate() {
        builder.deploy(*account, &writer(i as u8 + 1)).unwrap();
    }
    let mut chain = builder.finish().unwrap();
    for account in accounts {
        let tx = unsigned_tx(&chain, account, name("go"), vec![]);
        assert!(push(&mut chain, tx).is_success());
    }
    assert!(runtime.contract_cache_bytes() <= 2 * weight);
    let before = runtime.cache_stats();
    let tx = unsigned_tx(&chain, accounts[0], name("go"), vec![]);
    assert!(push(&mut chain, tx).is_success());
    let after = runtime.cache_stats();
    assert_eq!(
        after.compiles,
        before.compiles + 1,
        "the evicted contract ran from a copy the chain kept: {before:?} -> {after:?}"
    );
    assert_eq!(chain.get(accounts[0], b"v").unwrap(), Some(vec![1]));
}

/// A memory store whose reads fail on demand: a disk that breaks under a running block.
struct FailingStore {
    inner: MemoryStore,
    fail: Arc<AtomicBool>,
}

impl BlockArchive for FailingStore {
    fn head(&self) -> Option<&BlockHeader> {
        self.inner.head()
    }
    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        self.inner.block(height)
    }
    fn first_retained(&self) -> u64 {
        self.inner.first_retained()
    }
}

impl StateStore for FailingStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(io::Error::other("the disk is gone").into());
        }
        self.inner.get(key)
    }
    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        self.inner.commit(block, commit)
    }
    fn entries(&self) -> StoreResult<Entries<'_>> {
        self.inner.entries()
    }
    fn disk_bytes(&self) -> u64 {
        0
    }
    fn kind(&self) -> &'static str {
        "failing"
    }
}

#[test]
fn issue_11_a_store_fault_aborts_the_block_and_is_never_a_receipt() {
    let fail = Arc::new(AtomicBool::new(false));
    let store = FailingStore {
        inner: MemoryStore::new(8),
        fail: fail.clone(),
    };
    let config = ChainConfig {
        check_signatures: false,
        fees: tally_chain::FeeSchedule::ZERO,
        ..ChainConfig::default()
    };
    let mut builder = Chain::genesis(runtime(), Box::new(store), config).unwrap();
    builder.deploy(simplecoin(), SIMPLECOIN_WASM).unwrap();
    let mut chain = builder.finish().unwrap();
    let head = chain.head().clone();
    let tx = transfer_tx(&chain, "simplecoin", "alice", 1);
    let prepared = prepare_block(
        vec![tx.clone()],
        false,
        &chain.pipeline(),
        &tally_chain::crypto::NoKeys,
    );
    fail.store(true, Ordering::Relaxed);
    match chain.execute_block(chain.next_block_time_ms(), &prepared) {
        // The fault surfaces where the block first reads the store: its fee state, or a
        // contract's read.
        Err(ChainError::Runtime(RuntimeError::Host(_)) | ChainError::Store(_)) => {}
        other => panic!("expected a node fault, got {other:?}"),
    }
    assert_eq!(chain.head(), &head, "nothing was committed");
    // The disk comes back: the same transaction now runs normally.
    fail.store(false, Ordering::Relaxed);
    assert!(push(&mut chain, tx).is_success());
}

#[test]
fn issue_10_a_block_stops_taking_transactions_when_its_fuel_is_spent() {
    let spin = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "apply") (param i64 i64 i64) (loop $l (br $l))))"#,
    )
    .unwrap();
    let mut chain = unsigned_chain(&[(name("spin"), &spin)]);
    let n = (MAX_BLOCK_FUEL / FUEL_PER_ACTION) as usize + 5;
    let txs: Vec<_> = (0..n)
        .map(|i| {
            unsigned_tx(
                &chain,
                name("spin"),
                name("go"),
                vec![i as u8, (i >> 8) as u8],
            )
        })
        .collect();
    let block = chain.run_block(txs).unwrap();
    let mut fuel = 0;
    let (mut included, mut full) = (0, 0);
    for result in &block.results {
        match result {
            TxResult::Included(r) => {
                assert_eq!(r.failure().unwrap().code, AbortCode::OutOfFuel);
                fuel += r.fuel_used;
                included += 1;
            }
            TxResult::Rejected(TxError::BlockFull(_)) => full += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(fuel <= MAX_BLOCK_FUEL, "{fuel}");
    assert!(
        included >= 20 && full >= 5,
        "{included} included, {full} refused"
    );
}

mod signed {
    use super::*;
    use ed25519_dalek::SigningKey;
    use tally_chain::crypto::derived_key;
    use tally_chain::genesis::{Allocation, GenesisAccount};

    struct World {
        chain: Chain,
        alice: SigningKey,
        bob: SigningKey,
    }

    fn world() -> World {
        let alice = derived_key(7, 0);
        let bob = derived_key(7, 1);
        let genesis = Genesis {
            accounts: vec![
                GenesisAccount {
                    name: name("alice"),
                    key: alice.verifying_key().to_bytes(),
                    balance: 1_000_000_000_000,
                },
                GenesisAccount {
                    name: name("bob"),
                    key: bob.verifying_key().to_bytes(),
                    balance: 1_000_000_000_000,
                },
            ],
            contracts: vec![],
            allocations: vec![Allocation {
                contract: simplecoin(),
                key: name("alice").0.to_le_bytes().to_vec(),
                value: 50u64.to_le_bytes().to_vec(),
            }],
        };
        let chain = chain_with(
            ChainConfig::default(),
            &genesis,
            &[(simplecoin(), SIMPLECOIN_WASM)],
        );
        World { chain, alice, bob }
    }

    fn transfer_from(chain: &Chain, from: &str, memo: &str) -> tally_chain::Transaction {
        let data = Transfer {
            from: name(from),
            to: name("bob"),
            amount: 5,
            memo: memo.into(),
        };
        envelope(
            chain,
            vec![action(
                simplecoin(),
                transfer(),
                &[name(from)],
                data.encode(),
            )],
        )
    }

    #[test]
    fn each_bad_signature_is_rejected_with_its_own_error_and_no_state_change() {
        let World {
            mut chain,
            alice,
            bob,
        } = world();
        let tx = transfer_from(&chain, "alice", "1");

        let mut bad = SignedTransaction::sign(tx.clone(), &[(name("alice"), &alice)]);
        bad.signatures[0].signature[10] ^= 1;
        let wrong = SignedTransaction::sign(tx.clone(), &[(name("alice"), &bob)]);
        let missing = SignedTransaction::unsigned(tx.clone());
        let extra =
            SignedTransaction::sign(tx.clone(), &[(name("alice"), &alice), (name("bob"), &bob)]);
        let carol = transfer_from(&chain, "carol", "2");
        let unknown = SignedTransaction::sign(carol, &[(name("carol"), &alice)]);
        let good = SignedTransaction::sign(tx, &[(name("alice"), &alice)]);
        let expected = [
            TxError::BadSignature(name("alice")),
            TxError::WrongKey(name("alice")),
            TxError::MissingSignature(name("alice")),
            TxError::UnneededSignature(name("bob")),
            TxError::UnknownAccount(name("carol")),
        ];
        for pipeline in [tally_chain::Pipeline::ALL, tally_chain::Pipeline::NONE] {
            chain.set_pipeline(pipeline);
            let txs = vec![
                bad.clone(),
                wrong.clone(),
                missing.clone(),
                extra.clone(),
                unknown.clone(),
            ];
            let block = chain.run_block(txs).unwrap();
            for (result, expected) in block.results.into_iter().zip(&expected) {
                assert_eq!(&rejected(result), expected, "{}", pipeline.describe());
            }
        }
        assert_eq!(bal(&chain, "alice"), Some(50));
        let block = chain.run_block(vec![good.clone(), good.clone()]).unwrap();
        assert!(block.results[0].is_success());
        assert_eq!(
            rejected(block.results[1].clone()),
            TxError::Duplicate(hex::encode(good.transaction.id()))
        );
        // Still a duplicate in the next block, inside the expiration window.
        assert!(matches!(
            rejected(push(&mut chain, good)),
            TxError::Duplicate(_)
        ));
        assert_eq!(bal(&chain, "alice"), Some(45));
        assert_eq!(bal(&chain, "bob"), Some(5));
    }

    #[test]
    fn accounts_and_contracts_are_created_by_signed_system_actions() {
        use tally_chain::system::{NEWACCOUNT, NewAccount, SETCODE, SYSTEM, SetCode};
        let system_key = derived_key(9, 0);
        let dave = derived_key(9, 1);
        let genesis = Genesis::with_system_key(system_key.verifying_key().to_bytes());
        let mut chain = chain_with(ChainConfig::default(), &genesis, &[]);
        let new = NewAccount {
            creator: SYSTEM,
            name: name("dave"),
            key: dave.verifying_key().to_bytes(),
        };
        let newaccount = action(SYSTEM, NEWACCOUNT, &[SYSTEM], borsh::to_vec(&new).unwrap());
        let fund = tally_chain::system::NativeTransfer {
            from: SYSTEM,
            to: name("dave"),
            amount: 1 << 40,
        };
        let fund = action(
            SYSTEM,
            tally_chain::system::TRANSFER,
            &[SYSTEM],
            borsh::to_vec(&fund).unwrap(),
        );
        let tx = envelope(&chain, vec![newaccount.clone(), fund]);
        let tx = SignedTransaction::sign(tx, &[(SYSTEM, &system_key)]);
        assert!(push(&mut chain, tx).is_success());
        // Creating it again fails as a receipt, not a rejection.
        let again = envelope(
            &chain,
            vec![newaccount, action(SYSTEM, NEWACCOUNT, &[SYSTEM], vec![])],
        );
        let again = SignedTransaction::sign(again, &[(SYSTEM, &system_key)]);
        assert!(!push(&mut chain, again).is_success());

        let set = SetCode {
            account: name("dave"),
            code: SIMPLECOIN_WASM.to_vec(),
        };
        let setcode = action(
            SYSTEM,
            SETCODE,
            &[name("dave")],
            borsh::to_vec(&set).unwrap(),
        );
        // A setcode whose transaction fails later leaves no contract behind.
        let failing = envelope(
            &chain,
            vec![
                setcode.clone(),
                action(SYSTEM, SETCODE, &[name("dave")], vec![1]),
            ],
        );
        let failing = SignedTransaction::sign(failing, &[(name("dave"), &dave)]);
        assert!(!push(&mut chain, failing).is_success());
        assert!(
            chain
                .get_raw(&keys::code_hash(name("dave")))
                .unwrap()
                .is_none()
        );
        let tx = SignedTransaction::sign(envelope(&chain, vec![setcode]), &[(name("dave"), &dave)]);
        let result = push(&mut chain, tx);
        assert!(result.is_success(), "{result:?}");
        // dave's simplecoin ran onInit, crediting its own (hard-coded) `simplecoin` account.
        assert_eq!(
            balance(&chain, name("dave"), simplecoin()),
            Some(SIMPLECOIN_SUPPLY)
        );
    }
}

/// Issue 10, items 7 and 9: a stored block commits to the exact signed bytes of its
/// transactions, and only genesis carries changes that `verify` takes as recorded.
mod tampering {
    use super::*;
    use tally_chain::BlockBody;
    use tally_chain::block::chain_checksum;
    use tally_chain::crypto::derived_key;
    use tally_chain::genesis::GenesisAccount;
    use tally_chain::verify::verify;

    /// A memory store with one block record replaced, as an attacker who edits a data
    /// directory would leave it.
    struct Tampered {
        inner: MemoryStore,
        replaced: Option<BlockRecord>,
    }

    impl StateStore for Tampered {
        fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
            self.inner.get(key)
        }
        fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
            self.inner.commit(block, commit)
        }
        fn entries(&self) -> StoreResult<Entries<'_>> {
            self.inner.entries()
        }
        fn disk_bytes(&self) -> u64 {
            0
        }
        fn kind(&self) -> &'static str {
            "tampered"
        }
    }

    impl BlockArchive for Tampered {
        fn head(&self) -> Option<&BlockHeader> {
            match &self.replaced {
                Some(r) if r.header.height == self.inner.head()?.height => Some(&r.header),
                _ => self.inner.head(),
            }
        }
        fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
            match &self.replaced {
                Some(r) if r.header.height == height => Ok(Some(r.clone())),
                _ => self.inner.block(height),
            }
        }
        fn first_retained(&self) -> u64 {
            self.inner.first_retained()
        }
    }

    /// A signed chain with two accounts and one block of two signed transfers; returns the
    /// chain, whose store is a [`Tampered`] with nothing replaced yet.
    fn signed_chain() -> Chain {
        let (a, b) = (derived_key(3, 0), derived_key(3, 1));
        let genesis = Genesis {
            accounts: vec![
                GenesisAccount {
                    name: name("alice"),
                    key: a.verifying_key().to_bytes(),
                    balance: 1_000_000_000_000,
                },
                GenesisAccount {
                    name: name("bob"),
                    key: b.verifying_key().to_bytes(),
                    balance: 1_000_000_000_000,
                },
            ],
            ..Genesis::default()
        };
        let store = Tampered {
            inner: MemoryStore::new(64),
            replaced: None,
        };
        let mut builder =
            Chain::genesis(runtime(), Box::new(store), ChainConfig::default()).unwrap();
        builder.apply(&genesis).unwrap();
        builder.deploy(simplecoin(), SIMPLECOIN_WASM).unwrap();
        let mut chain = builder.finish().unwrap();
        let txs = [("alice", &a), ("bob", &b)]
            .iter()
            .map(|(who, key)| {
                let data = transfer_data(who, "carol", 0);
                let tx = envelope(
                    &chain,
                    vec![action(simplecoin(), transfer(), &[name(who)], data)],
                );
                SignedTransaction::sign(tx, &[(name(who), key)])
            })
            .collect();
        chain.run_block(txs).unwrap();
        chain
    }

    fn verify_chain(chain: &Chain) -> Result<(), ChainError> {
        verify(chain.store(), chain.runtime().clone(), chain.config()).map(|_| ())
    }

    #[test]
    fn issue_10_swapped_signatures_no_longer_match_the_block() {
        let chain = signed_chain();
        verify_chain(&chain).unwrap();
        let record = chain.store().block(1).unwrap().unwrap();
        let mut body: BlockBody = borsh::from_slice(&record.body).unwrap();
        // Swap the signature bytes of the two transactions: their unsigned ids stay the same.
        let (first, second) = body.transactions.split_at_mut(1);
        std::mem::swap(
            &mut first[0].signatures[0].signature,
            &mut second[0].signatures[0].signature,
        );
        assert_ne!(body.root(), record.header.transactions_root);
        let forged = BlockRecord {
            body: borsh::to_vec(&body).unwrap(),
            ..record
        };
        let mut store = Tampered {
            inner: MemoryStore::new(64),
            replaced: Some(forged),
        };
        for height in 0..=1 {
            store
                .inner
                .commit(
                    chain.store().block(height).unwrap().unwrap(),
                    Commit::default(),
                )
                .unwrap();
        }
        let err = verify(&store, chain.runtime().clone(), chain.config()).unwrap_err();
        assert!(err.to_string().contains("transactions root"), "{err}");
    }

    /// Issue 20, item 5: one transaction, one encoding. The same transaction with its
    /// signatures reordered (or one repeated) is refused at admission (its bytes, whose
    /// signatures imply their accounts since issue 26, decode to signatures that do not verify,
    /// or not at all), and a stored block re-hashed around a reordered transaction is refused
    /// by `verify`.
    #[test]
    fn issue_20_reordered_signatures_are_refused_at_decode_and_by_verify() {
        let mut chain = signed_chain();
        let (a, b) = (derived_key(3, 0), derived_key(3, 1));
        let data = transfer_data("alice", "carol", 0);
        let tx = envelope(
            &chain,
            vec![action(
                simplecoin(),
                transfer(),
                &[name("alice"), name("bob")],
                data,
            )],
        );
        // Whatever order the signers are given in, the signatures come out canonical.
        let signed = SignedTransaction::sign(tx.clone(), &[(name("bob"), &b), (name("alice"), &a)]);
        assert_eq!(signed.signatures[0].account, name("alice"));
        assert_eq!(SignedTransaction::decode(&signed.encode()).unwrap(), signed);
        let mut reordered = signed.clone();
        reordered.signatures.reverse();
        assert_eq!(reordered.transaction.id(), signed.transaction.id());
        assert_eq!(
            reordered.check_limits(reordered.encode().len()),
            Err(TxError::SignatureOrder(name("bob")))
        );
        // The encoding leaves the accounts out (issue 26): reordered signature bytes decode
        // as bob's signature for alice and alice's for bob, which do not verify.
        let swapped = SignedTransaction::decode(&reordered.encode()).unwrap();
        assert_ne!(swapped, reordered);
        assert_eq!(swapped.signatures[0].account, name("alice"));
        assert_eq!(
            swapped.signatures[0].signature,
            signed.signatures[1].signature
        );
        let mut repeated = signed.clone();
        repeated.signatures.push(signed.signatures[1].clone());
        assert_eq!(
            repeated.check_limits(repeated.encode().len()),
            Err(TxError::SignatureOrder(name("bob")))
        );
        assert!(matches!(
            SignedTransaction::decode(&repeated.encode()),
            Err(TxError::Malformed(_))
        ));
        let block = chain.run_block(vec![reordered.clone(), signed]).unwrap();
        assert_eq!(
            block.results[0],
            TxResult::Rejected(TxError::SignatureOrder(name("bob")))
        );
        // Included (alice has no coins to move, so it fails, which does not matter here).
        assert!(
            block.results[1].receipt().is_some(),
            "{:?}",
            block.results[1]
        );
        verify_chain(&chain).unwrap();

        // The stored block rewritten with the reordered signatures, its root re-hashed: every
        // link and checksum still holds (it is the head), and replaying would accept it.
        let height = chain.head().height;
        let record = chain.store().block(height).unwrap().unwrap();
        let mut body: BlockBody = borsh::from_slice(&record.body).unwrap();
        body.transactions[0] = reordered;
        let mut header = record.header.clone();
        header.transactions_root = body.root();
        let forged = BlockRecord {
            header,
            body: borsh::to_vec(&body).unwrap(),
            ..record
        };
        let mut store = Tampered {
            inner: MemoryStore::new(64),
            replaced: Some(forged),
        };
        for h in 0..=height {
            store
                .inner
                .commit(chain.store().block(h).unwrap().unwrap(), Commit::default())
                .unwrap();
        }
        let err = verify(&store, chain.runtime().clone(), chain.config()).unwrap_err();
        assert!(err.to_string().contains("another outcome"), "{err}");
    }

    /// A store that refuses to load block 0 whole, as a ten-million-account genesis must not
    /// be: only its header, body and a stream of its changes may be read.
    struct NoWholeGenesis(MemoryStore);

    impl StateStore for NoWholeGenesis {
        fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
            self.0.get(key)
        }
        fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
            self.0.commit(block, commit)
        }
        fn entries(&self) -> StoreResult<Entries<'_>> {
            self.0.entries()
        }
        fn disk_bytes(&self) -> u64 {
            0
        }
        fn kind(&self) -> &'static str {
            "no-whole-genesis"
        }
    }

    impl BlockArchive for NoWholeGenesis {
        fn head(&self) -> Option<&BlockHeader> {
            self.0.head()
        }
        fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
            assert_ne!(height, 0, "block 0 was loaded whole");
            self.0.block(height)
        }
        fn header_and_body(&self, height: u64) -> StoreResult<Option<(BlockHeader, Vec<u8>)>> {
            Ok(self.0.block(height)?.map(|r| (r.header, r.body)))
        }
        fn changes(
            &self,
            height: u64,
        ) -> StoreResult<Option<tally_chain::store::BlockChanges<'_>>> {
            self.0.changes(height)
        }
        fn first_retained(&self) -> u64 {
            self.0.first_retained()
        }
    }

    /// Issue 20, item 6: `verify` streams genesis into its replay rather than loading block 0
    /// (GBs at ten million accounts) whole.
    #[test]
    fn issue_20_verify_streams_the_genesis_block() {
        let chain = signed_chain();
        let mut store = NoWholeGenesis(MemoryStore::new(64));
        for height in 0..=chain.head().height {
            store
                .0
                .commit(
                    chain.store().block(height).unwrap().unwrap(),
                    Commit::default(),
                )
                .unwrap();
        }
        let report = verify(&store, chain.runtime().clone(), chain.config()).unwrap();
        assert!(report.replayed);
        assert_eq!(
            report.genesis_checksum,
            Some(
                chain
                    .store()
                    .block(0)
                    .unwrap()
                    .unwrap()
                    .header
                    .state_checksum
            )
        );
    }

    #[test]
    fn issue_10_a_later_block_cannot_smuggle_in_unsigned_state_changes() {
        let chain = signed_chain();
        // A forged block 2 with no transactions that replaces alice's key with the attacker's,
        // its header and checksum recomputed so that every link and checksum checks out.
        let head = chain.head().clone();
        let attacker = derived_key(666, 0).verifying_key().to_bytes();
        let changes = vec![(
            keys::account(name("alice")).to_vec(),
            Some(attacker.to_vec()),
        )];
        let header = BlockHeader {
            height: head.height + 1,
            previous: head.id(),
            timestamp_ms: head.timestamp_ms + 500,
            transactions_root: BlockBody::default().root(),
            state_checksum: chain_checksum(
                &head.state_checksum,
                changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
            ),
            ..Default::default()
        };
        let forged = BlockRecord {
            header,
            body: borsh::to_vec(&BlockBody::default()).unwrap(),
            changes: changes.into(),
        };
        let mut store = MemoryStore::new(64);
        for height in 0..=head.height {
            store
                .commit(
                    chain.store().block(height).unwrap().unwrap(),
                    Commit::default(),
                )
                .unwrap();
        }
        store.commit(forged, Commit::default()).unwrap();
        let err = verify(&store, chain.runtime().clone(), chain.config()).unwrap_err();
        assert!(err.to_string().contains("replay"), "{err}");
    }
}

/// Issue 15: a traced runtime's diagnostics stay out of consensus data.
mod tracing {
    use super::*;
    use tally_chain::{MemoryStore, TxReceipt};
    use tally_runtime::{Runtime, RuntimeConfig};

    fn chain(trace: bool) -> Chain {
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                trace,
                ..RuntimeConfig::default()
            })
            .unwrap(),
        );
        let config = ChainConfig {
            check_signatures: false,
            fees: tally_chain::FeeSchedule::ZERO,
            ..ChainConfig::default()
        };
        let mut builder = Chain::genesis(runtime, Box::new(MemoryStore::new(512)), config).unwrap();
        builder.deploy(simplecoin(), SIMPLECOIN_WASM).unwrap();
        builder.finish().unwrap()
    }

    fn without_trace(receipt: &TxReceipt) -> TxReceipt {
        TxReceipt {
            trace: None,
            ..receipt.clone()
        }
    }

    #[test]
    fn issue_15_tracing_changes_no_header_receipt_or_state() {
        let (mut plain, mut traced) = (chain(false), chain(true));
        // Successes and failures of every kind simplecoin has, several blocks long.
        for round in 0..3u64 {
            let mut txs: Vec<_> = (0..20)
                .map(|i| transfer_tx(&plain, "simplecoin", "alice", 1 + i + 100 * round))
                .collect();
            txs.push(transfer_tx(&plain, "alice", "bob", 1_000_000));
            txs.push(transfer_tx(&plain, "carol", "bob", 1));
            txs.push(unsigned_tx(&plain, simplecoin(), transfer(), vec![1, 2, 3]));
            let a = plain.run_block(txs.clone()).unwrap();
            let b = traced.run_block(txs).unwrap();
            assert_eq!(a.header, b.header, "round {round}");
            assert_eq!(a.results.len(), b.results.len());
            for (ra, rb) in a.results.iter().zip(&b.results) {
                let (ra, rb) = (ra.receipt().unwrap(), rb.receipt().unwrap());
                assert!(ra.trace.is_none());
                let trace = rb
                    .trace
                    .as_ref()
                    .expect("a traced chain traces every receipt");
                let action_fuel: u64 = trace.actions.iter().map(|a| a.fuel_used).sum();
                assert_eq!(trace.intrinsic_fuel + action_fuel, rb.fuel_used);
                assert_eq!(trace.actions[0].trap.is_some(), !rb.is_success());
                assert_eq!(ra, &without_trace(rb));
            }
        }
        assert_eq!(
            plain.state_digest().unwrap(),
            traced.state_digest().unwrap()
        );
        assert_eq!(plain.head_id(), traced.head_id());
    }
}

/// The chain of the restart-equivalence test: simplecoin deployed at genesis on a memory
/// store that keeps only `retain` blocks.
fn pruned_chain(config: &ChainConfig, retain: u64) -> Chain {
    let store = Box::new(MemoryStore::new(retain));
    let mut builder = Chain::genesis(runtime(), store, config.clone()).unwrap();
    builder.deploy(simplecoin(), SIMPLECOIN_WASM).unwrap();
    builder.finish().unwrap()
}

/// Closes `chain` and opens its store again, as a node that restarts.
fn restart(chain: Chain, config: &ChainConfig) -> Chain {
    let store = chain.into_store();
    Chain::open(runtime(), store, config.clone()).unwrap()
}

/// A small xorshift generator: the test's choices are the same on every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Issue 20, item 1: every validity rule is a pure function of committed data. Two chains
/// get the same blocks; one runs without stopping, the other restarts at random heights and
/// around the retention, lifetime and TaPoS window boundaries, and sometimes between executing
/// a block and committing it (the block is dropped and executed again). Blocks come faster than
/// the configured interval and only 4 are retained, so neither the TaPoS table nor the
/// duplicate window can be rebuilt from retained blocks. The transactions reference every
/// boundary height (the head, just past retention, the oldest block of the TaPoS window and
/// the first one out of it) and replay earlier transactions within and past their lifetime.
/// Both must give identical results and headers at every height.
#[test]
fn issue_20_a_restarted_chain_decides_every_transaction_as_one_that_never_stopped() {
    use tally_chain::block::ref_prefix;
    use tally_chain::window::TAPOS_WINDOW;

    const RETAIN: u64 = 4;
    const LIFETIME_MS: u64 = 20_000;
    let window = TAPOS_WINDOW as u64;
    let config = ChainConfig {
        check_signatures: false,
        fees: tally_chain::FeeSchedule::ZERO,
        retain_blocks: RETAIN,
        max_tx_lifetime_ms: LIFETIME_MS,
        ..ChainConfig::default()
    };
    let mut steady = pruned_chain(&config, RETAIN);
    let mut restarted = pruned_chain(&config, RETAIN);
    let mut ids = vec![steady.head_id()];
    let mut time = steady.head().timestamp_ms;
    let mut draw = Draw(0x2545_f491_4f6c_dd1d);
    let mut included: Vec<(u64, SignedTransaction)> = Vec::new();
    let (mut restarts, mut dropped, mut pushed) = (0, 0, 0);
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    let last = window + 40;
    for height in 1..=last {
        // Blocks 1 ms apart, with a jump now and then that expires earlier transactions.
        time += if draw.next().is_multiple_of(4_000) {
            LIFETIME_MS / 2
        } else {
            1
        };
        let head = height - 1;
        let near_window = head + 4 >= window && head <= window + 4;
        let mut txs = Vec::new();
        if height.is_multiple_of(1_999) || near_window || height <= 8 {
            let refs = [
                Some(head),
                head.checked_sub(1),
                head.checked_sub(RETAIN + 1),
                head.checked_sub(window - 1),
                head.checked_sub(window),
            ];
            for (i, at) in refs.into_iter().flatten().enumerate() {
                let id = &ids[at as usize];
                let tx = Transaction {
                    max_fee: 0,
                    ..Transaction::new(
                        time + LIFETIME_MS,
                        (at as u16, ref_prefix(id)),
                        vec![action(
                            simplecoin(),
                            transfer(),
                            &[],
                            Transfer {
                                from: simplecoin(),
                                to: name("alice"),
                                amount: height,
                                memo: format!("{i}"),
                            }
                            .encode(),
                        )],
                    )
                };
                txs.push(SignedTransaction::unsigned(tx));
            }
            // Replays of earlier transactions: the newest (a duplicate while it lives) and one
            // drawn from all of them (mostly expired by now).
            if let Some((_, tx)) = included.last() {
                txs.push(tx.clone());
            }
            if !included.is_empty() {
                let (_, tx) = &included[draw.next() as usize % included.len()];
                txs.push(tx.clone());
            }
        }
        pushed += txs.len();
        let prepared = prepare_block(
            txs.clone(),
            false,
            &steady.pipeline(),
            &tally_chain::crypto::NoKeys,
        );
        let a = steady.execute_block(time, &prepared).unwrap();
        steady.commit(Durability::Immediate).unwrap();

        let restart_now = draw.next().is_multiple_of(9_000)
            || near_window
            || [RETAIN, RETAIN + 1, RETAIN + 2].contains(&height)
            || height % 1_999 == 1;
        if restart_now {
            restarted = restart(restarted, &config);
            restarts += 1;
        }
        if draw.next().is_multiple_of(7_000) || height == window {
            // Executed, then the node stops before Commit: it executes the block again.
            restarted.execute_block(time, &prepared).unwrap();
            restarted = restart(restarted, &config);
            dropped += 1;
        }
        let b = restarted.execute_block(time, &prepared).unwrap();
        restarted.commit(Durability::Immediate).unwrap();
        assert_eq!(a.results, b.results, "results of block {height}");
        assert_eq!(a.header, b.header, "header of block {height}");

        for (result, tx) in a.results.iter().zip(txs) {
            let key = match result {
                TxResult::Included(r) if r.is_success() => "included".to_string(),
                TxResult::Included(_) => "failed".to_string(),
                TxResult::Rejected(e) => format!("{e:?}")
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap()
                    .to_string(),
            };
            *outcomes.entry(key).or_default() += 1;
            if result.receipt().is_some() {
                included.push((height, tx));
            }
        }
        ids.push(a.header.id());
    }
    assert_eq!(
        steady.state_digest().unwrap(),
        restarted.state_digest().unwrap()
    );
    // Every rule was exercised, on both sides of each boundary.
    for kind in ["included", "UnknownReferenceBlock", "Duplicate", "Expired"] {
        assert!(
            outcomes.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {outcomes:?}"
        );
    }
    assert!(
        restarts > 20 && dropped > 3,
        "{restarts} restarts, {dropped} dropped blocks"
    );
    eprintln!(
        "{pushed} transactions over {last} blocks: {outcomes:?}; {restarts} restarts, {dropped} blocks dropped before commit"
    );
}
