//! Ordered iteration through a real contract (contracts/ordered.c, on `db_next` through
//! tally.h's `TallyRange`): forward, backward, by prefix and bounds, deleting while it walks,
//! over its own uncommitted writes, never outside its namespace, charged per key; on memory,
//! log and RocksDB stores, and alike on every thread count and pipeline (issue 23).

use borsh::BorshSerialize;
use tally_chain::{Chain, ChainConfig, Genesis, LogOptions, LogStore, MemoryStore, Pipeline};
use tally_chain::{Name, SignedTransaction, StateStore, TxResult};
use tally_host_api::limits::FUEL_PER_KEY_SEEK;

use crate::common::{action, envelope, name, runtime, thread_pool};

/// contracts/ordered.wasm (recipe: contracts/README.md).
const ORDERED_WASM: &[u8] = include_bytes!("../../../contracts/ordered.wasm");

/// `walk`'s mode bits (contracts/ordered.c).
const BACKWARD: u8 = 1;
const ERASE: u8 = 2;
const PREFIX: u8 = 4;

/// `db_next`'s bound flags (tally.h's TALLY_NEXT_*).
const LO_EXCLUSIVE: u32 = 2;
const HI_INCLUSIVE: u32 = 4;
const HI_OPEN: u32 = 8;

#[derive(BorshSerialize)]
struct Put {
    key: Vec<u8>,
    value: Vec<u8>,
}

#[derive(BorshSerialize)]
struct Del {
    key: Vec<u8>,
}

#[derive(BorshSerialize, Clone)]
struct Walk {
    lo: Vec<u8>,
    hi: Vec<u8>,
    flags: u32,
    mode: u8,
    limit: u32,
}

impl Walk {
    fn prefix(prefix: &[u8], mode: u8) -> Self {
        Self {
            lo: prefix.to_vec(),
            hi: Vec::new(),
            flags: 0,
            mode: mode | PREFIX,
            limit: 1000,
        }
    }

    fn all(mode: u8) -> Self {
        Self {
            lo: Vec::new(),
            hi: Vec::new(),
            flags: HI_OPEN,
            mode,
            limit: 1000,
        }
    }
}

/// One step of a test transaction.
enum Op {
    Put(&'static [u8], Vec<u8>),
    Del(&'static [u8]),
    Walk(Walk),
}

fn ordered() -> Name {
    name("ordered")
}

fn tx(chain: &Chain, contract: Name, ops: &[Op]) -> SignedTransaction {
    let actions = ops
        .iter()
        .map(|op| {
            let (act, data) = match op {
                Op::Put(key, value) => (
                    "put",
                    borsh::to_vec(&Put {
                        key: key.to_vec(),
                        value: value.clone(),
                    }),
                ),
                Op::Del(key) => ("del", borsh::to_vec(&Del { key: key.to_vec() })),
                Op::Walk(walk) => ("walk", borsh::to_vec(walk)),
            };
            action(contract, name(act), &[], data.unwrap())
        })
        .collect();
    SignedTransaction::unsigned(envelope(chain, actions))
}

/// A walk's result, as ordered.c encodes it: keys, and values cut to 64 bytes with their
/// full lengths.
type Walked = Vec<(Vec<u8>, Vec<u8>, u32)>;

fn decode(mut data: &[u8]) -> Walked {
    let u32_at = |data: &mut &[u8]| {
        let (head, rest) = data.split_at(4);
        *data = rest;
        u32::from_le_bytes(head.try_into().unwrap())
    };
    let count = u32_at(&mut data);
    (0..count)
        .map(|_| {
            let klen = u32_at(&mut data) as usize;
            let (key, rest) = data.split_at(klen);
            data = rest;
            let full = u32_at(&mut data);
            let (value, rest) = data.split_at(full.min(64) as usize);
            data = rest;
            (key.to_vec(), value.to_vec(), full)
        })
        .collect()
}

/// The keys of each walk a receipt's events report.
fn walks(result: &TxResult) -> Vec<Vec<Vec<u8>>> {
    let receipt = result.receipt().expect("included");
    assert_eq!(receipt.failure(), None, "{:?}", receipt.console);
    receipt
        .events
        .iter()
        .map(|e| decode(&e.data).into_iter().map(|(k, _, _)| k).collect())
        .collect()
}

fn keys(list: &[&[u8]]) -> Vec<Vec<u8>> {
    list.iter().map(|k| k.to_vec()).collect()
}

fn push(chain: &mut Chain, contract: Name, ops: &[Op]) -> TxResult {
    let tx = tx(chain, contract, ops);
    let mut block = chain.run_block(vec![tx]).unwrap();
    block.results.pop().unwrap()
}

/// A chain on `store` with ordered.c deployed at `ordered` and at `other`.
fn chain_on(store: Box<dyn StateStore>) -> Chain {
    let config = ChainConfig {
        check_signatures: false,
        fees: tally_chain::FeeSchedule::ZERO,
        ..ChainConfig::default()
    };
    let mut builder = Chain::genesis(runtime(), store, config).unwrap();
    builder.apply(&Genesis::default()).unwrap();
    builder.deploy(ordered(), ORDERED_WASM).unwrap();
    builder.deploy(name("other"), ORDERED_WASM).unwrap();
    builder.finish().unwrap()
}

/// Everything a contract's walk should do, on one chain.
fn walks_as_a_sorted_map_would(chain: &mut Chain) {
    let committed: &[&'static [u8]] = &[b"a", b"a1", b"a2", b"b", b"b\0", b"c"];
    let puts: Vec<Op> = committed
        .iter()
        .map(|k| Op::Put(k, k.to_vec()))
        .chain([Op::Put(b"long", vec![7; 100])])
        .collect();
    push(chain, ordered(), &puts);
    // Another contract's keys, between and around ours: never seen.
    push(
        chain,
        name("other"),
        &[Op::Put(b"a0", vec![1]), Op::Put(b"zz", vec![1])],
    );

    // Its own uncommitted writes and deletes, earlier in the transaction.
    let got = push(
        chain,
        ordered(),
        &[
            Op::Put(b"a15", vec![1]),
            Op::Del(b"a2"),
            Op::Walk(Walk::prefix(b"a", 0)),
            Op::Walk(Walk::prefix(b"a", BACKWARD)),
        ],
    );
    let a = keys(&[b"a", b"a1", b"a15"]);
    let a_back: Vec<_> = a.iter().rev().cloned().collect();
    assert_eq!(walks(&got), vec![a, a_back]);

    // Bounds: (a1, b] forward, [a15, long) backward.
    let got = push(
        chain,
        ordered(),
        &[
            Op::Walk(Walk {
                lo: b"a1".to_vec(),
                hi: b"b".to_vec(),
                flags: LO_EXCLUSIVE | HI_INCLUSIVE,
                mode: 0,
                limit: 100,
            }),
            Op::Walk(Walk {
                lo: b"a15".to_vec(),
                hi: b"long".to_vec(),
                flags: 0,
                mode: BACKWARD,
                limit: 100,
            }),
        ],
    );
    assert_eq!(
        walks(&got),
        vec![keys(&[b"a15", b"b"]), keys(&[b"c", b"b\0", b"b", b"a15"])]
    );

    // The whole namespace both ways: only its own keys, a long value cut with its length.
    let got = push(chain, ordered(), &[Op::Walk(Walk::all(0))]);
    let receipt = got.receipt().unwrap();
    let all = decode(&receipt.events[0].data);
    let names: Vec<_> = all.iter().map(|(k, _, _)| k.clone()).collect();
    assert_eq!(
        names,
        keys(&[b"a", b"a1", b"a15", b"b", b"b\0", b"c", b"long"])
    );
    assert_eq!(all[6], (b"long".to_vec(), vec![7; 64], 100));
    let got = push(chain, ordered(), &[Op::Walk(Walk::all(BACKWARD))]);
    let mut back = names.clone();
    back.reverse();
    assert_eq!(walks(&got), vec![back]);

    // Deleting each key as it walks, then walking again in the same transaction.
    let got = push(
        chain,
        ordered(),
        &[Op::Walk(Walk::prefix(b"b", ERASE)), Op::Walk(Walk::all(0))],
    );
    assert_eq!(
        walks(&got),
        vec![
            keys(&[b"b", b"b\0"]),
            keys(&[b"a", b"a1", b"a15", b"c", b"long"])
        ]
    );
    // A limit stops a walk; a range with crossed bounds holds nothing.
    let got = push(
        chain,
        ordered(),
        &[
            Op::Walk(Walk {
                limit: 2,
                ..Walk::all(BACKWARD)
            }),
            Op::Walk(Walk {
                lo: b"c".to_vec(),
                hi: b"a".to_vec(),
                flags: 0,
                mode: 0,
                limit: 10,
            }),
        ],
    );
    assert_eq!(walks(&got), vec![keys(&[b"long", b"c"]), vec![]]);

    // A query walks committed state, read-only.
    let walk = borsh::to_vec(&Walk::all(0)).unwrap();
    let answer = chain.query(ordered(), name("walk"), &walk).unwrap();
    assert_eq!(answer.failure(), None);
    let listed: Vec<_> = decode(&answer.output)
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(listed, keys(&[b"a", b"a1", b"a15", b"c", b"long"]));
    let erase = borsh::to_vec(&Walk::all(ERASE)).unwrap();
    let refused = chain.query(ordered(), name("walk"), &erase).unwrap();
    assert!(refused.failure().is_some(), "a query cannot erase");

    // The other contract sees only its own.
    let got = push(chain, name("other"), &[Op::Walk(Walk::all(0))]);
    assert_eq!(walks(&got), vec![keys(&[b"a0", b"zz"])]);
}

#[test]
fn a_contract_walks_its_keys_as_a_sorted_map_would_on_memory() {
    walks_as_a_sorted_map_would(&mut chain_on(Box::new(MemoryStore::new(64))));
}

#[test]
fn a_contract_walks_its_keys_as_a_sorted_map_would_on_the_log_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), LogOptions::default()).unwrap();
    walks_as_a_sorted_map_would(&mut chain_on(Box::new(store)));
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_contract_walks_its_keys_as_a_sorted_map_would_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let store = tally_chain::store::rocks::RocksStore::open(dir.path(), 8).unwrap();
    walks_as_a_sorted_map_would(&mut chain_on(Box::new(store)));
}

/// A walk of twice the keys costs at least a seek's fuel more per key (and a byte's per byte
/// of key and value returned).
#[test]
fn a_walk_pays_for_every_key_it_visits() {
    let mut chain = chain_on(Box::new(MemoryStore::new(64)));
    let many: Vec<Op> = (0..40u8)
        .map(|i| Op::Put(Box::leak(Box::new([b'k', i])), vec![i; 8]))
        .collect();
    for ten in many.chunks(10) {
        let put = push(&mut chain, ordered(), ten);
        assert!(walks(&put).is_empty());
    }
    let fuel = |chain: &mut Chain, limit: u32| {
        let walk = Walk {
            limit,
            ..Walk::prefix(b"k", 0)
        };
        let got = push(chain, ordered(), &[Op::Walk(walk)]);
        assert_eq!(walks(&got)[0].len(), limit as usize);
        got.receipt().unwrap().fuel_used
    };
    let (ten, forty) = (fuel(&mut chain, 10), fuel(&mut chain, 40));
    let per_key = (forty - ten) / 30;
    // Each key: the seek, its 2 key bytes and 8 value bytes, and the contract's own work.
    assert!(
        per_key >= FUEL_PER_KEY_SEEK + 10,
        "{per_key} fuel a key, under the seek's {FUEL_PER_KEY_SEEK}"
    );
}

/// Transactions that insert into, delete from and walk overlapping ranges, in blocks run
/// sequentially and speculatively on 1 to 8 threads: the same receipts (each walk's keys are
/// in its events) and the same heads. A walk over a range an earlier transaction of its block
/// wrote in must be run again in order: found speculatively against the block's start, it
/// would miss the insert (a phantom) or return the deleted key.
#[test]
fn walks_give_the_same_results_sequentially_and_speculatively_on_every_thread_count() {
    let run = |pipeline: Pipeline, threads: usize| {
        let pool = thread_pool(threads);
        pool.install(|| {
            let mut chain = chain_on(Box::new(MemoryStore::new(64)));
            chain.set_pipeline(pipeline);
            let keys: &[&'static [u8]] = &[b"k1", b"k3", b"k5", b"k7", b"m1", b"m2"];
            let seed: Vec<Op> = keys.iter().map(|k| Op::Put(k, k.to_vec())).collect();
            chain.run_block(vec![tx(&chain, ordered(), &seed)]).unwrap();
            let (mut results, mut confirmed, mut speculated) = (Vec::new(), 0, 0);
            for round in 0..3u8 {
                let inserted: &'static [u8] = Box::leak(Box::new([b'k', b'2' + round]));
                let ops: Vec<Vec<Op>> = vec![
                    // Walks nothing anyone wrote: stands.
                    vec![Op::Walk(Walk::prefix(b"m", 0))],
                    vec![Op::Put(inserted, vec![round])],
                    // Would miss `inserted` speculatively.
                    vec![Op::Walk(Walk::prefix(b"k", 0))],
                    vec![Op::Del(b"k5")],
                    // Would return k5 speculatively, walking down.
                    vec![Op::Walk(Walk::prefix(b"k", BACKWARD))],
                    // Deletes as it walks: a later walk must not see k1 or k3.
                    vec![Op::Walk(Walk {
                        lo: b"k".to_vec(),
                        hi: b"k4".to_vec(),
                        flags: 0,
                        mode: ERASE,
                        limit: 2,
                    })],
                    vec![Op::Walk(Walk::all(0))],
                    vec![Op::Walk(Walk::prefix(b"m", BACKWARD))],
                ];
                let txs = ops.iter().map(|ops| tx(&chain, ordered(), ops)).collect();
                let block = chain.run_block(txs).unwrap();
                confirmed += block.confirmed;
                speculated += block.speculated;
                results.push((block.results, chain.head_id()));
            }
            (results, confirmed, speculated)
        })
    };
    let (reference, _, _) = run(Pipeline::NONE, 1);
    for threads in [1, 2, 4, 8] {
        let (got, confirmed, speculated) = run(Pipeline::ALL, threads);
        assert_eq!(got, reference, "{threads} threads");
        if threads > 1 {
            assert!(confirmed > 0, "no walk stood");
            assert!(confirmed < speculated, "no walk was run again");
        }
    }
}

/// Speculation that keeps missing where the in-order estimate cannot see why backs off for
/// longer each time (8, 16, 32, then 64 blocks at most): a walk over a range an earlier
/// transaction of its block wrote in conflicts, and the estimate counts loads, not walks.
#[test]
fn speculation_that_keeps_missing_backs_off_longer_each_time() {
    let pool = thread_pool(2);
    let speculated: Vec<u32> = pool.install(|| {
        let mut chain = chain_on(Box::new(MemoryStore::new(64)));
        chain.set_pipeline(Pipeline::ALL);
        let mut speculated = Vec::new();
        for height in 0..130u32 {
            let key: &'static [u8] = Box::leak(Box::new([b'k', height as u8, 0]));
            let put = vec![Op::Put(key, vec![1])];
            let walk = |limit: u32| {
                vec![Op::Walk(Walk {
                    limit,
                    ..Walk::prefix(b"k", 0)
                })]
            };
            let txs = [put, walk(200), walk(201), walk(202)]
                .iter()
                .map(|ops| tx(&chain, ordered(), ops))
                .collect();
            if chain.run_block(txs).unwrap().speculated > 0 {
                speculated.push(height);
            }
        }
        speculated
    });
    assert_eq!(speculated, [0, 9, 26, 59, 124]);
}
