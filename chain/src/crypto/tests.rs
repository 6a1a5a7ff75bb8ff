//! The consensus property of signature checks: batched and single verification accept exactly
//! the same signatures, whatever the batch size or thread count, and both accept exactly what
//! ed25519-zebra (the ZIP-215 reference) accepts.

#![allow(non_snake_case)]

use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::Signer;

use super::*;
use crate::tx::{Action, Transaction};
use tally_host_api::Name;

/// The backends this CPU runs: the tests check each.
fn backends() -> Vec<Backend> {
    let all = Backend::ALL;
    for b in all {
        if !b.available() {
            eprintln!("{b:?} is not available on this CPU: its batch checks do not run");
        }
    }
    all.into_iter().filter(|b| b.available()).collect()
}

/// Deterministic bytes for the corpus: SHA-512 of a counter.
struct TestRng(u64);

impl TestRng {
    fn bytes64(&mut self) -> [u8; 64] {
        self.0 += 1;
        sha2::Sha512::digest(self.0.to_le_bytes()).into()
    }
    fn bytes32(&mut self) -> [u8; 32] {
        self.bytes64()[..32].try_into().unwrap()
    }
    fn scalar(&mut self) -> Scalar {
        Scalar::from_bytes_mod_order_wide(&self.bytes64())
    }
    fn below(&mut self, n: usize) -> usize {
        (u64::from_le_bytes(self.bytes64()[..8].try_into().unwrap()) % n as u64) as usize
    }
}

/// One signature as received, with what kind of case it is and whether ZIP-215 accepts it.
#[derive(Clone)]
struct Case {
    kind: &'static str,
    key: [u8; 32],
    sig: [u8; 64],
    msg: Vec<u8>,
    valid: bool,
}

impl Case {
    fn item(&self) -> SigItem<'_> {
        SigItem {
            public_key: &self.key,
            signature: &self.sig,
            message: &self.msg,
        }
    }

    /// ed25519-zebra's verdict on this signature: the oracle.
    fn zebra(&self) -> bool {
        ed25519_zebra::VerificationKey::try_from(self.key)
            .and_then(|k| k.verify(&ed25519_zebra::Signature::from_bytes(&self.sig), &self.msg))
            .is_ok()
    }
}

fn k_of(R: &[u8; 32], A: &[u8; 32], msg: &[u8]) -> Scalar {
    Scalar::from_bytes_mod_order_wide(
        &sha2::Sha512::new()
            .chain_update(R)
            .chain_update(A)
            .chain_update(msg)
            .finalize()
            .into(),
    )
}

fn sig_bytes(R: &[u8; 32], s: &[u8; 32]) -> [u8; 64] {
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(R);
    sig[32..].copy_from_slice(s);
    sig
}

/// A signature made by hand: key `A_bytes` (secret `a`, so `A_bytes` decodes to `aB` plus any
/// torsion), nonce point `R_bytes` (`rB` plus any torsion), `s = r + k·a`.
fn forge(a: Scalar, A_bytes: [u8; 32], r: Scalar, R_bytes: [u8; 32], msg: &[u8]) -> [u8; 64] {
    let s = r + k_of(&R_bytes, &A_bytes, msg) * a;
    sig_bytes(&R_bytes, &s.to_bytes())
}

/// Encodings of small-order points: the 8 canonical ones, then the 6 non-canonical ones
/// (`x = 0` with the sign bit set, and `y ≥ p`), as in ed25519-zebra's ZIP-215 vectors.
fn small_order_encodings() -> Vec<[u8; 32]> {
    let mut encodings: Vec<[u8; 32]> = EIGHT_TORSION.iter().map(|p| p.compress().0).collect();
    let mut noncanonical = Vec::new();
    // y = 1 and y = −1 with the sign bit set: x = 0, so the bit is meaningless.
    let mut y1 = [0u8; 32];
    y1[0] = 1;
    y1[31] = 0x80;
    noncanonical.push(y1);
    let mut ym1 = [0xffu8; 32];
    ym1[0] = 0xec;
    noncanonical.push(ym1);
    // y + p for the 19 values y < 19 whose y + p fits in 255 bits, either sign.
    for y in 0u8..19 {
        let mut e = [0xffu8; 32];
        e[0] = 0xed + y;
        e[31] = 0x7f;
        for sign in [0u8, 0x80] {
            let mut e = e;
            e[31] |= sign;
            if CompressedEdwardsY(e).decompress().is_some() {
                noncanonical.push(e);
            }
        }
    }
    for e in &noncanonical {
        let p = CompressedEdwardsY(*e).decompress().unwrap();
        assert_ne!(p.compress().0, *e, "{e:?} is non-canonical");
    }
    // Only the first 6 are small-order; the rest are non-canonical encodings of other points.
    encodings.extend(noncanonical.iter().take(6));
    for e in &encodings {
        assert!(
            CompressedEdwardsY(*e)
                .decompress()
                .unwrap()
                .is_small_order()
        );
    }
    encodings
}

/// Non-canonical encodings of points of large order (`y + p` for small `y`).
fn noncanonical_large_order_encodings() -> Vec<[u8; 32]> {
    let mut out = Vec::new();
    for y in 0u8..19 {
        for sign in [0u8, 0x80] {
            let mut e = [0xffu8; 32];
            e[0] = 0xed + y;
            e[31] = 0x7f | sign;
            if let Some(p) = CompressedEdwardsY(e).decompress()
                && !p.is_small_order()
            {
                out.push(e);
            }
        }
    }
    assert!(!out.is_empty());
    out
}

/// Bytes that are no point's encoding.
fn not_a_point(rng: &mut TestRng) -> [u8; 32] {
    loop {
        let b = rng.bytes32();
        if CompressedEdwardsY(b).decompress().is_none() {
            return b;
        }
    }
}

/// ℓ, the order of the prime subgroup, little-endian.
const ELL: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// `s + ℓ` as 32 little-endian bytes: the same scalar, encoded non-canonically.
fn plus_ell(s: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u16;
    for i in 0..32 {
        let v = s[i] as u16 + ELL[i] as u16 + carry;
        out[i] = v as u8;
        carry = v >> 8;
    }
    out
}

/// Every kind of signature the rules must decide, valid and invalid, `n` of each.
fn corpus(n: usize) -> Vec<Case> {
    let mut rng = TestRng(0);
    let small = small_order_encodings();
    let large_nc = noncanonical_large_order_encodings();
    let mut cases = Vec::new();
    let mut push = |kind, key, sig, msg: Vec<u8>, valid| {
        cases.push(Case {
            kind,
            key,
            sig,
            msg,
            valid,
        })
    };
    for i in 0..n {
        let msg = rng.bytes32().to_vec();
        let signer = SigningKey::from_bytes(&rng.bytes32());
        let key = signer.verifying_key().to_bytes();
        let good = signer.sign(&msg).to_bytes();
        push("valid", key, good, msg.clone(), true);

        // Torsion components, which only the cofactored equation ignores.
        let (a, r) = (rng.scalar(), rng.scalar());
        let T = EIGHT_TORSION[1 + i % 7];
        let A = (B * a).compress().0;
        let R_torsion = (B * r + T).compress().0;
        push(
            "torsion in R",
            A,
            forge(a, A, r, R_torsion, &msg),
            msg.clone(),
            true,
        );
        let A_torsion = (B * a + T).compress().0;
        let R = (B * r).compress().0;
        push(
            "torsion in A (mixed-order key)",
            A_torsion,
            forge(a, A_torsion, r, R, &msg),
            msg.clone(),
            true,
        );
        let R_small = small[i % small.len()];
        push(
            "small-order R, s = k·a",
            A,
            forge(a, A, Scalar::ZERO, R_small, &msg),
            msg.clone(),
            true,
        );
        let A_small = small[(i * 5 + 3) % small.len()];
        push(
            "small-order A, R = rB, s = r",
            A_small,
            sig_bytes(&R, &r.to_bytes()),
            msg.clone(),
            true,
        );
        push(
            "small-order A, R = rB, s = r + 1",
            A_small,
            sig_bytes(&R, &(r + Scalar::ONE).to_bytes()),
            msg.clone(),
            false,
        );
        push(
            "small-order A and R, s = 0",
            A_small,
            sig_bytes(&R_small, &[0; 32]),
            msg.clone(),
            true,
        );
        push(
            "small-order A and R, s = 1",
            A_small,
            sig_bytes(&R_small, &Scalar::ONE.to_bytes()),
            msg.clone(),
            false,
        );

        // Invalid: corrupted parts, and parts that do not decode.
        let mut bad = good;
        bad[rng.below(32)] ^= 1 << rng.below(8);
        // A flipped bit in R can land on another point or none; invalid either way.
        push("bit flipped in R", key, bad, msg.clone(), false);
        let mut bad = good;
        bad[32 + rng.below(31)] ^= 1 << rng.below(8);
        push("bit flipped in s", key, bad, msg.clone(), false);
        let mut bad = good;
        bad[32..].copy_from_slice(&plus_ell(&good[32..]));
        push("s + ℓ (non-canonical s)", key, bad, msg.clone(), false);
        let mut bad = good;
        bad[63] |= 0x80;
        push("s with its top bit set", key, bad, msg.clone(), false);
        let mut other = msg.clone();
        other[0] ^= 1;
        push("signed another message", key, good, other, false);
        let stranger = SigningKey::from_bytes(&rng.bytes32()).verifying_key();
        push("another key", stranger.to_bytes(), good, msg.clone(), false);
        push(
            "key is not a point",
            not_a_point(&mut rng),
            good,
            msg.clone(),
            false,
        );
        let mut bad = good;
        bad[..32].copy_from_slice(&not_a_point(&mut rng));
        push("R is not a point", key, bad, msg.clone(), false);
        let nc = large_nc[i % large_nc.len()];
        push(
            "non-canonical large-order key",
            nc,
            good,
            msg.clone(),
            false,
        );
        let mut bad = good;
        bad[..32].copy_from_slice(&nc);
        push("non-canonical large-order R", key, bad, msg, false);
    }
    cases
}

#[test]
fn every_signature_gets_the_zip215_verdict_of_ed25519_zebra() {
    let uncached: KeyCache = KeyCache::new(0);
    let cached: KeyCache = KeyCache::new(64);
    let cases = corpus(24);
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(case.zebra(), case.valid, "case {i} ({}): zebra", case.kind);
        for round in 0..2 {
            assert_eq!(
                zip215::verify_one(&case.item(), &cached),
                case.valid,
                "case {i} ({}), round {round} (cached key)",
                case.kind
            );
        }
        assert_eq!(
            zip215::verify_one(&case.item(), &uncached),
            case.valid,
            "case {i} ({}): uncached",
            case.kind
        );
    }
}

/// The 196 small-order cases of ed25519-zebra's ZIP-215 test vectors (tests/small_order.rs):
/// every pair of small-order `A` and `R` encodings, canonical or not, with `s = 0`. All are
/// valid under ZIP-215; most are invalid under the cofactorless equation.
#[test]
fn the_196_zip215_small_order_vectors_verify_singly_and_in_one_batch() {
    let encodings = small_order_encodings();
    assert_eq!(encodings.len(), 14);
    let mut cases = Vec::new();
    for A in &encodings {
        for R in &encodings {
            cases.push(Case {
                kind: "small order",
                key: *A,
                sig: sig_bytes(R, &[0; 32]),
                msg: b"Zcash".to_vec(),
                valid: true,
            });
        }
    }
    assert_eq!(cases.len(), 196);
    let keys = Keys::new(64);
    for (i, case) in cases.iter().enumerate() {
        assert!(case.zebra(), "vector {i}: zebra");
        assert!(zip215::verify_one(&case.item(), &keys.points), "vector {i}");
    }
    let items: Vec<SigItem> = cases.iter().map(Case::item).collect();
    for backend in backends() {
        let verdict = verify_batch(&items, backend, &keys, Need::Each);
        assert!(verdict.iter().all(|v| *v), "{backend:?}");
    }
}

#[test]
fn batches_of_every_size_give_every_signature_its_single_result() {
    let mut cases = corpus(8);
    // Interleave the kinds so that every batch mixes valid and invalid signatures.
    let mut rng = TestRng(99);
    for i in (1..cases.len()).rev() {
        cases.swap(i, rng.below(i + 1));
    }
    let items: Vec<SigItem> = cases.iter().map(Case::item).collect();
    for backend in backends() {
        // Uncached, then cached keys: the same results.
        let keys = Keys::new(64);
        for size in [1, 2, 7, 17, 33, 100, items.len(), items.len()] {
            let batched: Vec<bool> = items
                .chunks(size)
                .flat_map(|c| verify_batch(c, backend, &keys, Need::Each))
                .collect();
            for (i, case) in cases.iter().enumerate() {
                assert_eq!(
                    batched[i], case.valid,
                    "{backend:?}, batch size {size}, case {i} ({})",
                    case.kind
                );
            }
        }
    }
}

#[test]
fn a_batch_of_only_valid_signatures_of_every_kind_verifies() {
    let cases: Vec<Case> = corpus(12).into_iter().filter(|c| c.valid).collect();
    let items: Vec<SigItem> = cases.iter().map(Case::item).collect();
    for backend in backends() {
        let verdict = verify_batch(&items, backend, &Keys::new(64), Need::Each);
        assert!(verdict.iter().all(|v| *v), "{backend:?}");
    }
}

/// The batch equation on `backend` alone, without the bisection and single checks that
/// would hide a wrong equation behind correct results.
fn batch_equation_holds(items: &[SigItem], backend: Backend, keys: &Keys) -> bool {
    match backend {
        Backend::Dalek => zip215::batch_equation_holds(items, &keys.points),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => avx2::batch_equation_holds(items, keys),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => avx512::batch_equation_holds(items, keys),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512Ifma => avx512ifma::batch_equation_holds(items, keys),
        #[cfg(not(target_arch = "x86_64"))]
        Backend::Avx2 | Backend::Avx512 | Backend::Avx512Ifma => unreachable!("not available"),
    }
}

/// Issue 13: the batch equation itself is the cofactored one. Results would stay right with
/// a cofactorless equation (a batch it rejects falls back to single checks), but every
/// batch holding a torsion component would then cost single checks, and a block of them
/// could be made to. The equation must hold for valid signatures of every kind, in one
/// batch, and fail when one invalid signature joins them.
#[test]
fn the_batch_equation_holds_for_torsion_components_and_fails_for_an_invalid_signature() {
    let cases: Vec<Case> = corpus(12).into_iter().collect();
    let valid: Vec<SigItem> = cases.iter().filter(|c| c.valid).map(Case::item).collect();
    // Bad only in the equation: every part decodes.
    let bad = cases
        .iter()
        .find(|c| c.kind == "small-order A, R = rB, s = r + 1")
        .expect("in the corpus");
    let mut with_bad = valid.clone();
    with_bad.insert(valid.len() / 2, bad.item());
    let mut small_order = Vec::new();
    for A in small_order_encodings() {
        for R in small_order_encodings() {
            small_order.push((A, sig_bytes(&R, &[0; 32])));
        }
    }
    let vectors: Vec<SigItem> = small_order
        .iter()
        .map(|(key, sig)| SigItem {
            public_key: key,
            signature: sig,
            message: b"Zcash",
        })
        .collect();
    for backend in backends() {
        let keys = Keys::new(64);
        assert!(batch_equation_holds(&valid, backend, &keys), "{backend:?}");
        assert!(
            batch_equation_holds(&vectors, backend, &keys),
            "{backend:?}: the 196 vectors"
        );
        assert!(
            !batch_equation_holds(&with_bad, backend, &keys),
            "{backend:?}: one invalid"
        );
    }
}

/// Shows the corpus decides something: the cofactorless equation `[s]B = R + [k]A`, which
/// ZIP-215 replaced, rejects signatures the corpus holds as valid. A batch built on it
/// would accept or reject those depending on its random coefficients.
#[test]
fn the_corpus_holds_signatures_only_the_cofactored_equation_accepts() {
    let cofactorless = |c: &Case| {
        let A = CompressedEdwardsY(c.key).decompress()?;
        let R = CompressedEdwardsY(c.sig[..32].try_into().unwrap()).decompress()?;
        let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(
            c.sig[32..].try_into().unwrap(),
        ))?;
        let k = k_of(&c.sig[..32].try_into().unwrap(), &c.key, &c.msg);
        Some(EdwardsPoint::vartime_double_scalar_mul_basepoint(&k, &-A, &s) == R)
    };
    let differ = corpus(12)
        .iter()
        .filter(|c| c.valid && cofactorless(c) != Some(true))
        .count();
    assert!(differ > 30, "only {differ} cases tell the equations apart");
}

#[test]
fn bisection_finds_exactly_the_invalid_signatures_of_a_large_batch() {
    let mut rng = TestRng(7);
    let msg = b"issue 13".to_vec();
    let signers: Vec<SigningKey> = (0..8)
        .map(|_| SigningKey::from_bytes(&rng.bytes32()))
        .collect();
    let good: Vec<Case> = (0..600)
        .map(|i| {
            let signer = &signers[i % signers.len()];
            let msg = [msg.clone(), (i as u32).to_le_bytes().to_vec()].concat();
            Case {
                kind: "valid",
                key: signer.verifying_key().to_bytes(),
                sig: signer.sign(&msg).to_bytes(),
                msg,
                valid: true,
            }
        })
        .collect();
    let keys = Keys::new(64);
    for bad_at in [
        vec![],
        vec![0],
        vec![299],
        vec![599],
        vec![3, 590],
        vec![10, 11, 12],
        (0..600).step_by(7).collect(),
        (0..600).collect(),
    ] {
        let mut cases = good.clone();
        for &i in &bad_at {
            cases[i].sig[40] ^= 4;
            cases[i].valid = false;
        }
        let items: Vec<SigItem> = cases.iter().map(Case::item).collect();
        for backend in backends() {
            let verdict = verify_batch(&items, backend, &keys, Need::Each);
            for (i, case) in cases.iter().enumerate() {
                assert_eq!(
                    verdict[i], case.valid,
                    "{backend:?}, invalid at {bad_at:?}: case {i}"
                );
            }
        }
    }
}

fn transaction(i: u64, signers: &[(Name, &SigningKey)]) -> SignedTransaction {
    let tx = Transaction::new(
        i,
        (0, 0),
        vec![Action {
            account: Name(1),
            name: Name(2),
            authorization: signers.iter().map(|(n, _)| *n).collect(),
            data: i.to_le_bytes().to_vec(),
        }],
    );
    SignedTransaction::sign(tx, signers)
}

#[test]
fn batched_verification_gives_each_transaction_the_single_result() {
    let key = derived_key(1, 2);
    let txs: Vec<SignedTransaction> = (0..(VERIFY_BATCH as u64 + 10))
        .map(|i| {
            let mut signed = transaction(i, &[(Name(3), &key)]);
            match i {
                7 => signed.signatures[0].signature[5] ^= 1, // corrupt signature
                300 => signed.signatures[0].public_key = Some([0xff; 32]), // not a point
                _ => {}
            }
            signed
        })
        .collect();
    let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
    let items: Vec<_> = txs.iter().zip(&ids).collect();
    let batched = verify_many(&items, &NoKeys, Need::Each);
    for (i, (tx, id)) in txs.iter().zip(&ids).enumerate() {
        assert_eq!(
            batched[i],
            verify_signatures(tx, id, &NoKeys),
            "transaction {i}"
        );
        assert_eq!(batched[i].is_ok(), i != 7 && i != 300, "transaction {i}");
    }
}

/// Transactions with no, one and several signatures, some bad: every thread count gives each
/// transaction the error of its first bad signature, as `verify_signatures` does.
#[test]
fn verify_many_gives_the_single_result_for_any_thread_count() {
    let keys: Vec<SigningKey> = (0..5).map(|i| derived_key(9, i)).collect();
    let names = [Name(11), Name(12), Name(13), Name(14), Name(15)];
    let txs: Vec<SignedTransaction> = (0..700u64)
        .map(|i| {
            let n = (i % 4) as usize; // 0 to 3 signatures
            let signers: Vec<(Name, &SigningKey)> = (0..n)
                .map(|j| (names[(i as usize + j) % 5], &keys[(i as usize + j) % 5]))
                .collect();
            let mut tx = transaction(i, &signers);
            if n > 0 && i % 9 == 0 {
                tx.signatures[n - 1].signature[33] ^= 2; // the last signer's is bad
            }
            if n > 1 && i % 13 == 0 {
                tx.signatures[0].signature[2] ^= 2; // and the first signer's
            }
            tx
        })
        .collect();
    let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
    let items: Vec<_> = txs.iter().zip(&ids).collect();
    let single: Vec<_> = items
        .iter()
        .map(|(t, id)| verify_signatures(t, id, &NoKeys))
        .collect();
    assert!(single.iter().any(|r| r.is_err()) && single.iter().any(|r| r.is_ok()));
    for backend in backends() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let batched = pool.install(|| verify_many_with(&items, &NoKeys, backend, Need::Each));
            assert_eq!(batched, single, "{backend:?}, {threads} threads");
        }
    }
    // The error names the first bad signer in order.
    let both_bad = (0..700usize)
        .find(|i| i % 9 == 0 && i % 13 == 0 && i % 4 > 1)
        .unwrap();
    assert_eq!(
        single[both_bad].as_ref().err(),
        Some(&TxError::BadSignature(txs[both_bad].signatures[0].account))
    );
}

/// Issue 12: the signer set is checked before any state is read, so a node refuses a
/// transaction that lacks a signature at CheckTx, and batched and single verification agree.
#[test]
fn exactly_the_authorizing_accounts_must_sign_checked_without_state() {
    let (alice, bob, carol) = (Name(1), Name(2), Name(3));
    let key = |i| derived_key(i, 1);
    let tx = |auths: &[&[Name]]| {
        Transaction::new(
            5,
            (1, 2),
            auths
                .iter()
                .map(|a| Action {
                    account: Name(9),
                    name: Name(9),
                    authorization: a.to_vec(),
                    data: vec![],
                })
                .collect(),
        )
    };
    let cases: Vec<(&str, SignedTransaction, Result<(), TxError>)> = vec![
        (
            "both signers, over two actions",
            SignedTransaction::sign(
                tx(&[&[bob], &[alice, bob]]),
                &[(bob, &key(2)), (alice, &key(1))],
            ),
            Ok(()),
        ),
        (
            "no signature at all",
            SignedTransaction::unsigned(tx(&[&[carol], &[bob]])),
            Err(TxError::MissingSignature(bob)),
        ),
        (
            "one signer of two",
            SignedTransaction::sign(tx(&[&[alice, carol]]), &[(carol, &key(3))]),
            Err(TxError::MissingSignature(alice)),
        ),
        (
            "a signer that authorizes nothing",
            SignedTransaction::sign(tx(&[&[alice]]), &[(alice, &key(1)), (bob, &key(2))]),
            Err(TxError::UnneededSignature(bob)),
        ),
        (
            "the same signer twice",
            SignedTransaction::sign(tx(&[&[alice]]), &[(alice, &key(1)), (alice, &key(1))]),
            Err(TxError::UnneededSignature(alice)),
        ),
        (
            "a payer that authorizes nothing signs first",
            SignedTransaction::sign(
                Transaction {
                    payer: carol,
                    ..tx(&[&[alice]])
                },
                &[(alice, &key(1)), (carol, &key(3))],
            ),
            Ok(()),
        ),
        (
            "a payer that did not sign",
            SignedTransaction::sign(
                Transaction {
                    payer: carol,
                    ..tx(&[&[alice]])
                },
                &[(alice, &key(1))],
            ),
            Err(TxError::MissingSignature(carol)),
        ),
        (
            "nothing to authorize, the payer (the system account) did not sign",
            SignedTransaction::unsigned(tx(&[&[]])),
            Err(TxError::MissingSignature(crate::system::SYSTEM)),
        ),
    ];
    let ids: Vec<TxId> = cases.iter().map(|(_, t, _)| t.transaction.id()).collect();
    let items: Vec<(&SignedTransaction, &TxId)> = cases
        .iter()
        .zip(&ids)
        .map(|((_, t, _), id)| (t, id))
        .collect();
    for backend in backends() {
        let batched = verify_many_with(&items, &NoKeys, backend, Need::Each);
        for (((what, t, expected), id), got) in cases.iter().zip(&ids).zip(batched) {
            assert_eq!(check_signers(t), *expected, "{what}");
            assert_eq!(
                verify_signatures(t, id, &NoKeys).map(|_| ()),
                *expected,
                "{what}"
            );
            assert_eq!(got.map(|_| ()), *expected, "{what}, batched on {backend:?}");
        }
    }
}

/// Issue 20's crafted set: every category [`corpus`] has, and the ones it lacks: the identity
/// and `x = 0` with the sign bit as `A` and `R` in valid signatures, `s` with each high bit
/// set and `s + mℓ`, edge values of `s`, raw `y` near `p`, the same signature twice, one key
/// signing many messages, and messages of other lengths than the 32 bytes of a transaction id
/// (the AVX-512 backend hashes 32-byte messages eight at a time, others one by one).
fn issue_20_crafted_set() -> Vec<Case> {
    let mut rng = TestRng(20);
    let mut cases = corpus(14); // 14: each small-order encoding appears as R and as A
    let small = small_order_encodings();
    let signer = SigningKey::from_bytes(&rng.bytes32());
    let (a, A) = (signer.to_scalar(), signer.verifying_key().to_bytes());
    let mut push = |kind, key, sig, msg: Vec<u8>, valid| {
        cases.push(Case {
            kind,
            key,
            sig,
            msg,
            valid,
        })
    };
    for (i, e) in small.iter().enumerate() {
        let msg = rng.bytes32().to_vec();
        let r = rng.scalar();
        let x_zero = matches!(e[0], 0x01 | 0xec | 0xee) && e[31] & 0x80 != 0;
        let kind = |identity, x0, other| {
            if i == 0 {
                identity
            } else if x_zero {
                x0
            } else {
                other
            }
        };
        push(
            kind("identity R", "x = 0 R, sign bit set", "small-order R"),
            A,
            forge(a, A, Scalar::ZERO, *e, &msg),
            msg.clone(),
            true,
        );
        push(
            kind("identity A", "x = 0 A, sign bit set", "small-order A"),
            *e,
            sig_bytes(&(B * r).compress().0, &r.to_bytes()),
            msg,
            true,
        );
    }
    for i in 0..14u8 {
        let msg = rng.bytes32().to_vec();
        let good = signer.sign(&msg).to_bytes();
        let mut bad = good;
        bad[63] |= 0x10 << (i % 4); // bits 252 to 255 of s
        push("s with a high bit set", A, bad, msg.clone(), false);
        let mut s = good[32..].to_vec();
        for _ in 0..=i % 8 {
            s = plus_ell(&s).to_vec();
        }
        bad[32..].copy_from_slice(&s);
        push("s + mℓ", A, bad, msg.clone(), false);
        let edge = match i % 4 {
            0 => ELL,
            1 => [0xff; 32],
            2 => plus_ell(&Scalar::ONE.to_bytes()),
            _ => (-Scalar::ONE).to_bytes(),
        };
        let mut sig = good;
        sig[32..].copy_from_slice(&edge);
        push("s at an edge", A, sig, msg.clone(), false);
        // y just below and at or above p, with either sign: points or not, decided alike.
        let mut y = [0xffu8; 32];
        y[0] = 0xe0 + i;
        y[31] = if i % 2 == 0 { 0x7f } else { 0xff };
        let mut sig = good;
        sig[..32].copy_from_slice(&y);
        push("R with y near p", A, sig, msg.clone(), false);
        push("key with y near p", y, good, msg.clone(), false);
        // Duplicates: the same valid and invalid signatures twice, one key many times.
        push("valid, twice", A, good, msg.clone(), true);
        push("valid, twice", A, good, msg.clone(), true);
        let mut flipped = good;
        flipped[i as usize] ^= 0x40;
        push("invalid, twice", A, flipped, msg.clone(), false);
        push("invalid, twice", A, flipped, msg, false);
        // Messages of other lengths than a transaction id's.
        let len = [0usize, 1, 31, 33, 64, 100, 200][i as usize % 7];
        let msg: Vec<u8> = rng.bytes64().iter().cycle().take(len).copied().collect();
        push(
            "message of another length",
            A,
            signer.sign(&msg).to_bytes(),
            msg,
            true,
        );
    }
    // The verdicts above are by construction; the corpus test holds them to ed25519-zebra's.
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(case.zebra(), case.valid, "case {i} ({})", case.kind);
    }
    cases
}

/// Issue 20: an input on which two backends disagree forks AVX-512 validators from the
/// others. Each backend, forced, gives every signature of the crafted set the result
/// `zip215::verify_one` gives it: in batches of every size from 1 to 64 (cut from the set
/// shuffled, so every batch mixes kinds), and in one batch of thousands of mostly valid
/// signatures, with cold and warm key caches.
#[test]
fn issue_20_every_backend_gives_each_crafted_signature_the_verify_one_result() {
    let mut cases = issue_20_crafted_set();
    let mut rng = TestRng(2020);
    for i in (1..cases.len()).rev() {
        cases.swap(i, rng.below(i + 1));
    }
    let items: Vec<SigItem> = cases.iter().map(Case::item).collect();
    let uncached = KeyCache::new(0);
    let single: Vec<bool> = items
        .iter()
        .map(|i| zip215::verify_one(i, &uncached))
        .collect();
    for (i, case) in cases.iter().enumerate() {
        assert_eq!(single[i], case.valid, "case {i} ({})", case.kind);
    }
    // Thousands: valid signatures by a few keys, the crafted set spread among them.
    let signers: Vec<SigningKey> = (0..6).map(|i| derived_key(20, i)).collect();
    let mut large: Vec<Case> = (0..2_500u32)
        .map(|i| {
            let msg = sha2::Sha256::digest(i.to_le_bytes()).to_vec();
            let signer = &signers[i as usize % signers.len()];
            Case {
                kind: "valid",
                key: signer.verifying_key().to_bytes(),
                sig: signer.sign(&msg).to_bytes(),
                msg,
                valid: true,
            }
        })
        .collect();
    for (i, case) in cases.iter().enumerate() {
        large.insert(i * 2_500 / cases.len(), case.clone());
    }
    let large_items: Vec<SigItem> = large.iter().map(Case::item).collect();

    let ran = backends();
    assert!(ran.contains(&Backend::Dalek));
    for backend in ran {
        assert_eq!(set_backend(BackendChoice::Force(backend)), Ok(backend));
        assert_eq!(Backend::best(), backend, "set_backend forces {backend}");
        let keys = Keys::new(64);
        for size in 1..=64 {
            let batched: Vec<bool> = items
                .chunks(size)
                .flat_map(|c| verify_batch(c, backend, &keys, Need::Each))
                .collect();
            for (i, case) in cases.iter().enumerate() {
                assert_eq!(
                    batched[i], single[i],
                    "{backend}, batch size {size}, case {i} ({})",
                    case.kind
                );
            }
        }
        for cache in ["cold", "warm"] {
            let keys = if cache == "cold" {
                Keys::new(0)
            } else {
                Keys::new(64)
            };
            let batched = verify_batch(&large_items, backend, &keys, Need::Each);
            for (i, case) in large.iter().enumerate() {
                assert_eq!(
                    batched[i],
                    case.valid,
                    "{backend}, one batch of {}, {cache} cache, case {i} ({})",
                    large.len(),
                    case.kind
                );
            }
        }
    }
    set_backend(BackendChoice::Auto).expect("auto is always available");
}

/// Issue 20: an operator forces a backend with `TALLY_VERIFY_BACKEND`; a name that is no
/// backend, or a backend this CPU cannot run, is refused with the fix in the message, never
/// replaced by another backend. Checked in a child process, since the variable is read once.
#[test]
fn issue_20_tally_verify_backend_forces_a_backend_or_refuses() {
    const CHILD: &str = "TALLY_TEST_BACKEND_CHILD";
    let this = "crypto::tests::issue_20_tally_verify_backend_forces_a_backend_or_refuses";
    if std::env::var_os(CHILD).is_some() {
        println!("best backend: {}", Backend::best());
        return;
    }
    let forced = |backend: Backend| {
        if backend.available() {
            Ok(backend.name())
        } else {
            Err(format!(
                "the {backend} signature verification backend was forced, but this CPU cannot \
                 run it"
            ))
        }
    };
    let fastest = Backend::fastest().name();
    for (value, expected) in [
        (None, Ok(fastest)),
        (Some(""), Ok(fastest)),
        (Some("auto"), Ok(fastest)),
        (Some("dalek"), Ok("dalek")),
        (Some("Dalek"), Ok("dalek")),
        (Some("avx512"), forced(Backend::Avx512)),
        (Some("avx512ifma"), forced(Backend::Avx512Ifma)),
        (Some("avx2"), forced(Backend::Avx2)),
        (Some("AVX2"), forced(Backend::Avx2)),
        (
            Some("avx"),
            Err(
                "\"avx\" names no signature verification backend: set TALLY_VERIFY_BACKEND \
                 to dalek, avx2, avx512, avx512ifma or auto"
                    .to_owned(),
            ),
        ),
    ] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args([this, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env_remove(BACKEND_ENV);
        if let Some(value) = value {
            child.env(BACKEND_ENV, value);
        }
        let out = child.output().expect("the test binary runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        match expected {
            Ok(name) => assert!(
                out.status.success() && stdout.contains(&format!("best backend: {name}\n")),
                "{BACKEND_ENV}={value:?}: expected {name}\n{stdout}\n{stderr}"
            ),
            Err(message) => assert!(
                !out.status.success()
                    && stderr.contains("refusing to verify signatures")
                    && stderr.contains(&message)
                    && !stdout.contains("best backend"),
                "{BACKEND_ENV}={value:?}: expected a refusal\n{stdout}\n{stderr}"
            ),
        }
    }
}

/// Issue 20: what an embedder or a test calls instead of the environment variable.
#[test]
fn issue_20_backend_choices_parse_and_resolve_as_documented() {
    for (text, choice) in [
        ("auto", BackendChoice::Auto),
        ("", BackendChoice::Auto),
        ("dalek", BackendChoice::Force(Backend::Dalek)),
        ("avx2", BackendChoice::Force(Backend::Avx2)),
        (" AVX512 ", BackendChoice::Force(Backend::Avx512)),
        ("AVX512IFMA", BackendChoice::Force(Backend::Avx512Ifma)),
    ] {
        assert_eq!(text.parse(), Ok(choice), "{text:?}");
    }
    let unknown = "ifma".parse::<BackendChoice>().unwrap_err();
    assert_eq!(
        unknown,
        BackendError::Unknown {
            value: "ifma".into()
        }
    );
    assert!(
        unknown
            .to_string()
            .contains("dalek, avx2, avx512, avx512ifma or auto")
    );
    for backend in Backend::ALL {
        assert_eq!(backend.name().parse(), Ok(BackendChoice::Force(backend)));
    }
    assert_eq!(
        BackendChoice::Force(Backend::Dalek).resolve(),
        Ok(Backend::Dalek)
    );
    assert_eq!(BackendChoice::Auto.resolve(), Ok(Backend::fastest()));
    assert!(Backend::fastest().available());
    // The lanes on IFMA, else on AVX-512F, else on AVX2 (faster than dalek there), else dalek.
    let expected = if Backend::Avx512Ifma.available() {
        Backend::Avx512Ifma
    } else if Backend::Avx512.available() {
        Backend::Avx512
    } else if Backend::Avx2.available() {
        Backend::Avx2
    } else {
        Backend::Dalek
    };
    assert_eq!(Backend::fastest(), expected);
    for backend in [Backend::Avx2, Backend::Avx512, Backend::Avx512Ifma] {
        let resolved = BackendChoice::Force(backend).resolve();
        if backend.available() {
            assert_eq!(resolved, Ok(backend));
        } else {
            assert_eq!(resolved, Err(BackendError::Unavailable(backend)));
            // Refused: what was in force stays.
            let before = Backend::best();
            assert!(set_backend(BackendChoice::Force(backend)).is_err());
            assert_eq!(Backend::best(), before);
        }
    }
}

/// Issue 26: a signature without its key is verified ahead against the key the source gives
/// for its account, and the result says which key; one the source knows no key for, or that
/// does not verify under the key it gives, is left to execution (not refused: the account
/// may be created or re-keyed earlier in the block). Batched and single agree, on every
/// backend and thread count.
#[test]
fn issue_26_signatures_without_keys_verify_against_the_sources_key() {
    let keys: Vec<SigningKey> = (0..4).map(|i| derived_key(26, i)).collect();
    let names = [Name(21), Name(22), Name(23), Name(24)];
    let registered = |account: Name| {
        // Name(24) is unknown to the source; Name(23)'s entry is a stale key.
        match account.0 {
            21 | 22 => Some(keys[(account.0 - 21) as usize].verifying_key().to_bytes()),
            23 => Some(keys[0].verifying_key().to_bytes()),
            _ => None,
        }
    };
    let txs: Vec<SignedTransaction> = (0..300u64)
        .map(|i| {
            let j = (i % 4) as usize;
            let k = ((i / 4) % 4) as usize;
            let signers = if j == k {
                vec![(names[j], &keys[j])]
            } else {
                vec![(names[j], &keys[j]), (names[k], &keys[k])]
            };
            let tx = transaction(i, &signers);
            // Every third transaction carries its first key.
            let mut signed = SignedTransaction::sign_registered(tx.transaction, &signers);
            if i % 3 == 0 {
                signed.signatures[0].public_key = Some(keys[j].verifying_key().to_bytes());
            }
            if i % 7 == 0 {
                signed.signatures[0].signature[9] ^= 4;
            }
            signed
        })
        .collect();
    let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
    let items: Vec<_> = txs.iter().zip(&ids).collect();
    let single: Vec<_> = items
        .iter()
        .map(|(t, id)| verify_signatures(t, id, &registered))
        .collect();
    for (i, (tx, result)) in txs.iter().zip(&single).enumerate() {
        let corrupted = i % 7 == 0;
        if corrupted && tx.signatures[0].public_key.is_some() {
            assert_eq!(
                result.as_ref().err(),
                Some(&TxError::BadSignature(tx.signatures[0].account)),
                "{i}"
            );
            continue;
        }
        let verified = result.as_ref().expect("no carried key is bad");
        for (n, (sig, got)) in tx.signatures.iter().zip(verified).enumerate() {
            let own = keys[(sig.account.0 - 21) as usize]
                .verifying_key()
                .to_bytes();
            let expected = match sig.public_key {
                Some(carried) => Some(carried),
                // Known, current and valid: verified under the registered key.
                None if (n > 0 || !corrupted) && matches!(sig.account.0, 21 | 22) => Some(own),
                None => None,
            };
            assert_eq!(*got, expected, "transaction {i}, signature {n}");
        }
    }
    for backend in backends() {
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let batched =
                pool.install(|| verify_many_with(&items, &registered, backend, Need::Each));
            assert_eq!(batched, single, "{backend:?}, {threads} threads");
        }
    }
}

/// Admission's search (`Need::UpToFirstInvalid`) against the full one (`Need::Each`), on a
/// batch equation that holds exactly when its range has no invalid signature: the same
/// results up to the first invalid signature, which is reported invalid, and at most about two
/// batches' worth of equation work and `BISECT_MIN` single checks, where the full search
/// checks every signature of an all-invalid batch alone.
#[test]
fn the_first_invalid_signature_is_found_with_two_batches_of_work() {
    use std::cell::Cell;
    use std::ops::Range;
    let mut rng = TestRng(26);
    for len in [0usize, 1, 15, 16, 17, 33, 600, 2500] {
        let mut patterns: Vec<Vec<bool>> = vec![
            vec![false; len],
            vec![true; len],
            (0..len).map(|i| i != 0).collect(),
            (0..len).map(|i| i + 1 != len).collect(),
            (0..len).map(|i| i != len / 2 && i != len * 3 / 4).collect(),
            (0..len).map(|i| i % 7 != 3).collect(),
        ];
        patterns.extend((0..4).map(|_| (0..len).map(|_| rng.bytes32()[0] > 2).collect()));
        for invalid_free in patterns {
            let (equations, singles) = (Cell::new(0usize), Cell::new(0usize));
            let batch = |r: Range<usize>| {
                equations.set(equations.get() + r.len());
                invalid_free[r].iter().all(|v| *v)
            };
            let single = |i: usize| {
                singles.set(singles.get() + 1);
                invalid_free[i]
            };
            let first = zip215::settle(len, &batch, &single, Need::UpToFirstInvalid);
            let end = invalid_free.iter().position(|v| !v).map_or(len, |i| i + 1);
            assert_eq!(first[..end], invalid_free[..end], "len {len}");
            assert!(
                first[end..].iter().all(|v| !v),
                "len {len}: unchecked, invalid"
            );
            assert!(equations.get() <= 2 * len, "len {len}: {}", equations.get());
            assert!(
                singles.get() <= 16,
                "len {len}: {} single checks",
                singles.get()
            );
            let each = zip215::settle(len, &batch, &single, Need::Each);
            assert_eq!(each, invalid_free, "len {len}");
        }
    }
    // An equation that fails where every signature alone holds (impossible for the real
    // one, which is their sum): both searches fall back to single checks and agree, however
    // far from where the bisection led the one invalid signature is.
    let fails = |_: Range<usize>| false;
    for invalid in [None, Some(0), Some(39)] {
        let single = |i: usize| Some(i) != invalid;
        let expected: Vec<bool> = (0..40).map(single).collect();
        assert_eq!(zip215::settle(40, &fails, &single, Need::Each), expected);
        // Up to the first invalid one; those after it reported invalid.
        let end = invalid.map_or(40, |i| i + 1);
        let first: Vec<bool> = (0..40).map(|i| i < end && single(i)).collect();
        assert_eq!(
            zip215::settle(40, &fails, &single, Need::UpToFirstInvalid),
            first
        );
    }
}

/// `verify_many` up to the first refused transaction gives the results the full check gives
/// up to and including that transaction, and stops there, on every backend; with every
/// transaction valid, all of them. Transactions of one to three signatures, some carrying
/// their key and some verified under the registered one (Name(24)'s unknown, Name(23)'s
/// stale), the first bad signature anywhere in its transaction, with a second bad one after
/// it whose error the full check would name instead (a carried key's).
#[test]
fn admission_verifies_up_to_the_first_refused_transaction() {
    let keys: Vec<SigningKey> = (0..4).map(|i| derived_key(27, i)).collect();
    let names = [Name(21), Name(22), Name(23), Name(24)];
    let registered = |account: Name| match account.0 {
        21 | 22 => Some(keys[(account.0 - 21) as usize].verifying_key().to_bytes()),
        23 => Some(keys[0].verifying_key().to_bytes()),
        _ => None,
    };
    // Signers from Name(21) and Name(22) only, unless `stranger`: the transaction also has
    // one whose registered key does not verify it (23) or who has none (24).
    let block = |bad: &[(u64, usize)], stranger: Option<(u64, usize)>| {
        (0..300u64)
            .map(|i| {
                let mut who: Vec<usize> = (0..1 + (i % 2) as usize).collect();
                if let Some((at, s)) = stranger
                    && at == i
                {
                    who.push(s);
                }
                let signers: Vec<(Name, &SigningKey)> =
                    who.iter().map(|&j| (names[j], &keys[j])).collect();
                let tx = transaction(i, &signers).transaction;
                let mut signed = SignedTransaction::sign_registered(tx, &signers);
                // Every third transaction carries its last signer's key.
                if i % 3 == 0 {
                    let last = signed.signatures.len() - 1;
                    signed.signatures[last].public_key =
                        Some(keys[who[last]].verifying_key().to_bytes());
                }
                for &(at, sig) in bad {
                    if at == i {
                        let sig = sig.min(signed.signatures.len() - 1);
                        signed.signatures[sig].signature[9] ^= 1;
                    }
                }
                signed
            })
            .collect::<Vec<_>>()
    };
    // The bad signatures, the stranger, and the first transaction refused.
    for (bad, stranger, refused_at) in [
        (vec![], None, None),
        (vec![], Some((121, 3)), Some(121)),
        (vec![], Some((7, 2)), Some(7)),
        (vec![(0, 0)], None, Some(0)),
        (vec![(299, 1)], None, Some(299)),
        // Two bad signatures of one transaction: the first without its key, the second
        // carrying it, whose error the full check gives.
        (vec![(153, 0), (153, 1)], None, Some(153)),
        (vec![(5, 1), (200, 0)], Some((100, 3)), Some(5)),
        (vec![(40, 0)], Some((20, 3)), Some(20)),
        ((0..300).map(|i| (i, 0)).collect(), None, Some(0)),
    ] {
        let txs = block(&bad, stranger);
        let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
        let items: Vec<_> = txs.iter().zip(&ids).collect();
        let each = verify_many_with(&items, &registered, Backend::Dalek, Need::Each);
        let refused = |r: &Result<VerifiedKeys, TxError>| match r {
            Ok(keys) => keys.iter().any(Option::is_none),
            Err(_) => true,
        };
        let first_refused = each.iter().position(refused);
        assert_eq!(
            first_refused, refused_at,
            "invalid at {bad:?}, stranger {stranger:?}"
        );
        let end = first_refused.map_or(each.len(), |i| i + 1);
        for backend in backends() {
            let first = verify_many_with(&items, &registered, backend, Need::UpToFirstInvalid);
            assert_eq!(
                first,
                each[..end],
                "{backend:?}, invalid at {bad:?}, stranger {stranger:?}"
            );
        }
    }
}
