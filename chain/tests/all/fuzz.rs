//! Property-based fuzzing (proptest) of what the node takes from strangers: transaction
//! bytes, simplecoin's action data, host-function arguments and uploaded wasm. None of it may
//! panic the node or make it return an internal error; every failure is a clean rejection or
//! a failed receipt, and the node keeps going.
//!
//! Cases per property: `TALLY_FUZZ_CASES` (default 200, what CI runs); raise it for a longer
//! session, e.g. `TALLY_FUZZ_CASES=20000 cargo test --release -p tally-chain --test all fuzz::`.

use crate::common::{SIMPLECOIN_WASM, simplecoin, simplecoin_chain, transfer};
use proptest::prelude::*;
use tally_chain::{Action, Name, SignedTransaction, Transaction, TxError, TxSignature};
use tally_host_api::{AbortCode, Host, HostError};
use tally_runtime::{Entry, Runtime, RuntimeConfig};

fn cases() -> ProptestConfig {
    let cases = std::env::var("TALLY_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(200);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn arb_action() -> impl Strategy<Value = Action> {
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(any::<u64>(), 0..3),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(account, name, auth, data)| Action {
            account: Name(account),
            name: Name(name),
            authorization: auth.into_iter().map(Name).collect(),
            data,
        })
}

fn arb_tx() -> impl Strategy<Value = SignedTransaction> {
    (
        any::<u64>(),
        any::<u16>(),
        any::<u32>(),
        prop::collection::vec(arb_action(), 0..3),
        prop::collection::vec(
            (
                any::<u64>(),
                prop::option::of(any::<[u8; 32]>()),
                any::<u8>(),
            ),
            0..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(exp, num, prefix, actions, sigs, canonical)| {
            let transaction = Transaction::new(exp, (num, prefix), actions);
            let signatures = sigs
                .into_iter()
                .enumerate()
                .map(|(i, (account, public_key, s))| TxSignature {
                    // Mostly the account the encoding implies for the i-th signature.
                    account: match transaction.signer_at(i) {
                        Some(signer) if canonical => signer,
                        _ => Name(account),
                    },
                    public_key,
                    signature: [s; 64],
                })
                .collect();
            SignedTransaction {
                transaction,
                signatures,
            }
        })
}

proptest! {
    #![proptest_config(cases())]

    /// Arbitrary bytes decode to a transaction or to an error, never a panic; what decodes
    /// re-encodes to the same bytes (the encoding is canonical, so ids are unambiguous) and is
    /// within every admission limit.
    #[test]
    fn transaction_decoding_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(tx) = SignedTransaction::decode(&bytes) {
            prop_assert_eq!(&tx.encode(), &bytes);
            prop_assert!(tx.check_limits(bytes.len()).is_ok());
        }
    }

    /// Encoded transactions decode to themselves, and a truncated one never decodes. A
    /// transaction whose signatures are not the ones their places imply (issue 26: the
    /// encoding leaves the accounts out) has no encoding: its bytes never decode to it.
    #[test]
    fn transactions_round_trip(tx in arb_tx(), cut in any::<prop::sample::Index>()) {
        let bytes = tx.encode();
        let payer_signed = tx.signatures.first().map(|s| s.account) == Some(tx.transaction.payer);
        let implied = tx
            .signatures
            .iter()
            .enumerate()
            .all(|(i, s)| tx.transaction.signer_at(i) == Some(s.account));
        match tx.check_limits(bytes.len()) {
            Ok(()) if payer_signed => {
                prop_assert_eq!(&SignedTransaction::decode(&bytes).unwrap(), &tx)
            }
            Ok(()) => prop_assert_eq!(
                SignedTransaction::decode(&bytes),
                Err(TxError::MissingSignature(tx.transaction.payer))
            ),
            Err(e) if implied => prop_assert_eq!(SignedTransaction::decode(&bytes), Err(e)),
            Err(_) => prop_assert_ne!(SignedTransaction::decode(&bytes).ok(), Some(tx.clone())),
        }
        let cut = cut.index(bytes.len());
        prop_assert!(SignedTransaction::decode(&bytes[..cut]).is_err());
    }

    /// Whatever a client puts in simplecoin's action data, the chain answers with a receipt
    /// (never an internal error), and an honest transfer still succeeds afterwards.
    #[test]
    fn simplecoin_action_data_never_faults_the_node(
        data in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut chain = simplecoin_chain();
        let tx = |data: Vec<u8>| crate::common::unsigned_tx(&chain, simplecoin(), transfer(), data);
        let (fuzzed, honest) = (tx(data), tx(tally_chain::Transfer {
            from: simplecoin(), to: "alice".parse().unwrap(), amount: 1, memo: "x".into(),
        }.encode()));
        let block = chain.run_block(vec![fuzzed, honest]).unwrap();
        prop_assert!(block.results[0].receipt().is_some());
        prop_assert!(block.results[1].is_success());
    }
}

/// A host that answers every load with a 8-byte value.
#[derive(Default)]
struct FuzzHost {
    message: Vec<u8>,
}

impl Host for FuzzHost {
    fn message(&self) -> &[u8] {
        &self.message
    }
    fn load(&mut self, _key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        Ok(Some(b"12345678"))
    }
    fn store(&mut self, _key: &[u8], _value: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn remove(&mut self, _key: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _account: Name) -> bool {
        false
    }
}

/// Calls the host function chosen by message byte 0 with four i32 arguments from the
/// message, then reports a checksum of its memory, so a leak into the next action shows.
const ARGS: &str = r#"(module
  (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
  (import "env" "load" (func $load (param i32 i32 i32 i32) (result i32)))
  (import "env" "store" (func $store (param i32 i32 i32 i32)))
  (import "env" "remove" (func $remove (param i32 i32)))
  (import "env" "assert" (func $assert (param i32 i32 i32)))
  (import "env" "print" (func $print (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "apply") (param i64 i64 i64)
    (local $a i32) (local $b i32) (local $c i32) (local $d i32) (local $i i32) (local $h i32)
    (drop (call $read_message (i32.const 0) (i32.const 17)))
    (local.set $a (i32.load (i32.const 1)))
    (local.set $b (i32.load (i32.const 5)))
    (local.set $c (i32.load (i32.const 9)))
    (local.set $d (i32.load (i32.const 13)))
    (block $done
      (br_if $done (i32.eq (i32.load8_u (i32.const 0)) (i32.const 255)))
      (block $p (block $a5 (block $r (block $s (block $l (block $m
        (br_table $m $l $s $r $a5 $p (i32.rem_u (i32.load8_u (i32.const 0)) (i32.const 6))))
        (drop (call $read_message (local.get $a) (local.get $b))) (br $done))
        (drop (call $load (local.get $a) (local.get $b) (local.get $c) (local.get $d))) (br $done))
        (call $store (local.get $a) (local.get $b) (local.get $c) (local.get $d)) (br $done))
        (call $remove (local.get $a) (local.get $b)) (br $done))
        (call $assert (i32.const 0) (local.get $a) (local.get $b)) (br $done))
        (call $print (local.get $a) (local.get $b)))
    ;; checksum of memory beyond the message buffer, stored under key byte 32
    (local.set $i (i32.const 64))
    (loop $sum
      (local.set $h (i32.add (i32.mul (local.get $h) (i32.const 31)) (i32.load (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br_if $sum (i32.lt_u (local.get $i) (i32.const 65532))))
    (i32.store (i32.const 40) (local.get $h))
    (call $store (i32.const 32) (i32.const 1) (i32.const 40) (i32.const 4))))"#;

fn arb_arg() -> impl Strategy<Value = i32> {
    prop_oneof![
        any::<i32>(),
        -8..8i32,
        65_520..65_545i32,
        Just(i32::MIN),
        Just(i32::MAX),
        0..300i32,
    ]
}

/// Records the checksum the ARGS contract stores.
#[derive(Default)]
struct SumHost {
    inner: FuzzHost,
    sum: Option<Vec<u8>>,
}

impl Host for SumHost {
    fn message(&self) -> &[u8] {
        self.inner.message()
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<&[u8]>, HostError> {
        self.inner.load(key)
    }
    fn store(&mut self, key: &[u8], value: &[u8]) -> Result<(), HostError> {
        if key == [0] {
            self.sum = Some(value.to_vec());
        }
        Ok(())
    }
    fn remove(&mut self, _key: &[u8]) -> Result<(), HostError> {
        Ok(())
    }
    fn is_authorized(&self, _account: Name) -> bool {
        false
    }
}

proptest! {
    #![proptest_config(cases())]

    /// Any arguments to any host function give a receipt, never an error of the node, and the
    /// next action starts from pristine memory.
    #[test]
    fn host_function_arguments_never_fault_the_runtime(
        which in 0u8..6,
        args in prop::array::uniform4(arb_arg()),
    ) {
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let contract = rt.prepare(&wat::parse_str(ARGS).unwrap()).unwrap();
        let entry = Entry::Action { receiver: Name(1), code: Name(1), action: Name(2) };
        let quiet = |rt: &Runtime| {
            let mut host = SumHost { inner: FuzzHost { message: vec![255; 17] }, sum: None };
            let receipt = rt.execute(&contract, entry, &mut host).unwrap();
            assert!(receipt.is_success(), "{receipt:?}");
            host.sum
        };
        let pristine = quiet(&rt);
        let mut message = vec![which];
        for a in args {
            message.extend_from_slice(&a.to_le_bytes());
        }
        let mut host = FuzzHost { message };
        let receipt = rt.execute(&contract, entry, &mut host).unwrap();
        if let Some(abort) = receipt.failure() {
            prop_assert!(matches!(
                abort.code,
                AbortCode::BadPointer | AbortCode::LimitExceeded | AbortCode::AssertFailed
                    | AbortCode::OutOfFuel | AbortCode::Trap
            ), "{:?}", abort);
        }
        prop_assert_eq!(quiet(&rt), pristine);
    }

    /// Corrupted uploads are refused or run; neither panics, and what deploys executes to a
    /// receipt.
    #[test]
    fn corrupted_uploads_never_fault_the_runtime(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut wasm = SIMPLECOIN_WASM.to_vec();
        for (at, byte) in edits {
            let i = at.index(wasm.len());
            wasm[i] = byte;
        }
        if let Some(cut) = cut {
            wasm.truncate(cut.index(wasm.len()));
        }
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        if let Ok(contract) = rt.prepare(&wasm) {
            let mut host = FuzzHost { message: vec![7; 40] };
            let entry = Entry::Action { receiver: simplecoin(), code: simplecoin(), action: transfer() };
            rt.execute(&contract, entry, &mut host).unwrap();
            rt.execute(&contract, Entry::Init, &mut host).unwrap();
        }
    }
}
