//! The batch verifier itself: decoding a batch (keys through the cache, `s`, `R` eight at
//! a time, the challenges eight at a time), its table of points, and the batch equation,
//! settled by [`zip215::settle`] into each signature's result.

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! batch {
    ($feature:meta) => {
        use std::collections::HashMap;
        use std::ops::Range;
        use std::sync::OnceLock;

        use curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED;
        use curve25519_dalek::scalar::Scalar;
        use rayon::prelude::*;
        use rustc_hash::FxHashMap;

        use crate::crypto::Keys;
        use crate::crypto::lanes::Row;
        use crate::crypto::zip215::{self, Coefficients, Need, SigItem, challenge};

        /// [`zip215::verify_batch`] on this backend: each signature gets the result
        /// [`zip215::verify_one`] gives it (with [`Need::UpToFirstInvalid`], up to the first
        /// invalid one).
        ///
        /// # Panics
        /// If the CPU cannot run this backend ([`available`]).
        pub fn verify_batch(items: &[SigItem], keys: &Keys, need: Need) -> Vec<bool> {
            assert!(
                available(),
                "this CPU cannot run the {} signature backend",
                NAME
            );
            // SAFETY: the CPU runs this backend, checked above.
            unsafe { verify_batch_simd(items, keys, need) }
        }

        /// A signature whose parts all decoded.
        struct Candidate {
            item: usize,
            /// Which distinct key of the batch signed it.
            key: u32,
            /// Its `R`'s table row.
            r_row: u32,
            s: Scalar,
            k: Scalar,
        }

        /// Table rows 0 and 1: the identity and the base point.
        const BASEPOINT_ROW: u32 = 1;

        /// Signatures (or keys) per rayon task when decoding: eight SIMD groups, enough to
        /// amortise a task, few enough to spread a block over every core.
        const TASK: usize = 64;

        /// A signature's decoded parts, before the table is laid out.
        struct Decoded {
            key: u32,
            r: Row,
            s: Scalar,
            k: Scalar,
        }

        #[$feature]
        fn verify_batch_simd(items: &[SigItem], keys: &Keys, need: Need) -> Vec<bool> {
            let batch = Batch::decode(items, keys);
            let mut c = batch.candidates.as_slice();
            if need == Need::UpToFirstInvalid {
                // The first signature that did not decode is invalid: nothing after it is
                // needed.
                c = &c[..zip215::decoded_prefix(c.iter().map(|c| c.item))];
            }
            // Closures inherit the function's target features.
            let holds = |range: Range<usize>| batch.holds(range);
            let single = |i: usize| zip215::verify_one(&items[c[i].item], &keys.points);
            let mut valid = vec![false; items.len()];
            for (c, h) in c.iter().zip(zip215::settle(c.len(), &holds, &single, need)) {
                valid[c.item] = h;
            }
            valid
        }

        /// Whether the batch equation alone holds for `items`, all of which must decode: no
        /// bisection and no single checks behind it, for tests of the equation itself.
        #[cfg(test)]
        pub(in crate::crypto) fn batch_equation_holds(items: &[SigItem], keys: &Keys) -> bool {
            assert!(available());
            // SAFETY: the CPU runs this backend, checked above.
            unsafe {
                let batch = Batch::decode(items, keys);
                assert_eq!(
                    batch.candidates.len(),
                    items.len(),
                    "every signature decodes"
                );
                batch.holds(0..items.len())
            }
        }

        /// A batch's signatures decoded, with their coefficients and the table of their points.
        struct Batch {
            candidates: Vec<Candidate>,
            /// The random coefficient of each candidate.
            z: Vec<Scalar>,
            /// The table row of each distinct key (0 for one that is no point).
            key_rows: Vec<u32>,
            table: Vec<Row>,
        }

        impl Batch {
            /// Decodes `items` on every core: keys (through the cache), `s`, `R` and the challenges.
            #[$feature]
            fn decode(items: &[SigItem], keys: &Keys) -> Batch {
                decode(items, keys)
            }

            /// The batch equation over the candidates in `range`.
            #[$feature]
            fn holds(&self, range: Range<usize>) -> bool {
                batch_holds(
                    &self.candidates[range.clone()],
                    &self.z[range],
                    &self.key_rows,
                    &self.table,
                )
            }
        }

        #[$feature]
        fn decode(items: &[SigItem], keys: &Keys) -> Batch {
            let (key_slot, distinct) = distinct_keys(items);
            let key_rows = key_rows_of(&distinct, keys);
            let decoded = decode_signatures(items, &key_slot, &key_rows);

            // The table: the identity, the base point, the keys, then each signature's `R`.
            let mut table: Vec<Row> = Vec::with_capacity(2 + distinct.len() + items.len());
            table.push(msm::IDENTITY_ROW);
            table.push(basepoint_row());
            let key_table_rows: Vec<u32> = key_rows
                .iter()
                .map(|row| match row {
                    Some(row) => {
                        table.push(*row);
                        table.len() as u32 - 1
                    }
                    None => 0,
                })
                .collect();
            let mut candidates: Vec<Candidate> = Vec::with_capacity(items.len());
            for (i, d) in decoded.into_iter().enumerate() {
                if let Some(d) = d {
                    table.push(d.r);
                    candidates.push(Candidate {
                        item: i,
                        key: d.key,
                        r_row: table.len() as u32 - 1,
                        s: d.s,
                        k: d.k,
                    });
                }
            }

            let mut coefficients = Coefficients::new();
            let z: Vec<Scalar> = candidates.iter().map(|_| coefficients.next()).collect();
            Batch {
                candidates,
                z,
                key_rows: key_table_rows,
                table,
            }
        }

        /// Each distinct key of `items` once, however many times it signs: its slot by its bytes,
        /// and the keys in slot order.
        fn distinct_keys<'a>(
            items: &[SigItem<'a>],
        ) -> (HashMap<&'a [u8; 32], u32>, Vec<&'a [u8; 32]>) {
            // Keyed by bytes a signer chooses: std's randomly seeded hasher, so that no one can send
            // keys that collide in it (FxHash has no such defence).
            let mut key_slot: HashMap<&[u8; 32], u32> = HashMap::with_capacity(items.len());
            let mut distinct: Vec<&[u8; 32]> = Vec::new();
            for item in items {
                key_slot.entry(item.public_key).or_insert_with(|| {
                    distinct.push(item.public_key);
                    distinct.len() as u32 - 1
                });
            }
            (key_slot, distinct)
        }

        /// The rows of the `distinct` keys, on every core: cached, or decompressed eight at a time and
        /// cached; `None` for a key that is no point.
        #[$feature]
        fn key_rows_of(distinct: &[&[u8; 32]], keys: &Keys) -> Vec<Option<Row>> {
            distinct
                .par_chunks(TASK)
                .flat_map_iter(|chunk| {
                    let mut rows: Vec<Option<Row>> =
                        chunk.iter().map(|k| keys.rows.get(k)).collect();
                    let missing: Vec<usize> =
                        (0..chunk.len()).filter(|&i| rows[i].is_none()).collect();
                    for group in missing.chunks(8) {
                        let (is_point, decoded) = decompress_rows(group.iter().map(|&i| chunk[i]));
                        for (lane, &i) in group.iter().enumerate() {
                            if is_point >> lane & 1 == 1 {
                                keys.rows.insert(chunk[i], decoded[lane]);
                                rows[i] = Some(decoded[lane]);
                            }
                        }
                    }
                    rows
                })
                .collect()
        }

        /// Each signature of `items`, on every core: `s` canonical, its key a point, its `R` a point
        /// (eight at a time), and its challenge (eight at a time). Anything that does not decode
        /// settles its signature as invalid here (`None`), outside the equation, so it cannot spoil
        /// the batch.
        #[$feature]
        fn decode_signatures(
            items: &[SigItem],
            key_slot: &HashMap<&[u8; 32], u32>,
            key_rows: &[Option<Row>],
        ) -> Vec<Option<Decoded>> {
            items
                .par_chunks(TASK)
                .flat_map_iter(move |chunk| {
                    let mut out: Vec<Option<Decoded>> = (0..chunk.len()).map(|_| None).collect();
                    let mut pending = Vec::with_capacity(chunk.len());
                    for (i, item) in chunk.iter().enumerate() {
                        let s_bytes: [u8; 32] = item.signature[32..].try_into().expect("32 bytes");
                        let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(s_bytes));
                        let key = key_slot[item.public_key];
                        if let (Some(s), Some(_)) = (s, key_rows[key as usize]) {
                            pending.push((i, key, s));
                        }
                    }
                    // Sixteen at a time: two sets of eight, their square roots interleaved.
                    for pair in pending.chunks(16) {
                        let decoded = decompress_rows_16(pair.iter().map(|&(i, _, _)| {
                            <&[u8; 32]>::try_from(&chunk[i].signature[..32]).expect("32 bytes")
                        }));
                        for (group, (is_point, rows)) in pair.chunks(8).zip(decoded) {
                            let valid: Vec<(usize, usize)> = (0..group.len())
                                .filter(|lane| is_point >> lane & 1 == 1)
                                .map(|lane| (lane, group[lane].0))
                                .collect();
                            let k = challenges(chunk, valid.iter().map(|&(_, i)| i));
                            for (&(lane, i), k) in valid.iter().zip(k) {
                                let (_, key, s) = group[lane];
                                out[i] = Some(Decoded {
                                    key,
                                    r: rows[lane],
                                    s,
                                    k,
                                });
                            }
                        }
                    }
                    out
                })
                .collect()
        }

        /// The batch equation over `candidates`:
        /// `[8](−(Σ zᵢsᵢ)B + Σ zᵢRᵢ + Σ (zᵢkᵢ)Aᵢ) = 0`, with the `zᵢkᵢ` summed per distinct key.
        #[$feature]
        fn batch_holds(
            candidates: &[Candidate],
            z: &[Scalar],
            key_rows: &[u32],
            table: &[Row],
        ) -> bool {
            let mut b = Scalar::ZERO;
            let mut key_coeff: FxHashMap<u32, Scalar> = FxHashMap::default();
            let mut terms = Vec::with_capacity(2 * candidates.len() + 1);
            for (c, z) in candidates.iter().zip(z) {
                b -= z * c.s;
                *key_coeff.entry(c.key).or_insert(Scalar::ZERO) += z * c.k;
                terms.push(msm::Term {
                    scalar: z.to_bytes(),
                    row: c.r_row,
                    bits: 128,
                });
            }
            terms.push(msm::Term {
                scalar: b.to_bytes(),
                row: BASEPOINT_ROW,
                bits: 253,
            });
            for (key, coeff) in key_coeff {
                terms.push(msm::Term {
                    scalar: coeff.to_bytes(),
                    row: key_rows[key as usize],
                    bits: 253,
                });
            }
            msm::is_identity_times_8(&terms, table)
        }

        /// `k = SHA-512(R ‖ A ‖ M) mod ℓ` for up to eight of `items`: eight at a time when all
        /// messages are 32 bytes (transaction ids), one at a time otherwise.
        #[$feature]
        fn challenges(
            items: &[SigItem],
            which: impl Iterator<Item = usize> + Clone,
        ) -> Vec<Scalar> {
            if which.clone().all(|i| items[i].message.len() == 32) {
                let mut blocks = [[0u8; 96]; 8];
                for (block, i) in blocks.iter_mut().zip(which.clone()) {
                    let item = &items[i];
                    block[..32].copy_from_slice(&item.signature[..32]);
                    block[32..64].copy_from_slice(item.public_key);
                    block[64..].copy_from_slice(item.message);
                }
                let digests = sha512::sha512_96(&blocks);
                which
                    .zip(digests)
                    .map(|(_, digest)| Scalar::from_bytes_mod_order_wide(&digest))
                    .collect()
            } else {
                which
                    .map(|i| {
                        let item = &items[i];
                        challenge(&item.signature[..32], item.public_key, item.message)
                    })
                    .collect()
            }
        }

        /// Up to sixteen encoded points decompressed, as two sets of eight: the lanes that are
        /// points, and each lane's table row.
        #[$feature]
        fn decompress_rows_16<'a>(
            encodings: impl Iterator<Item = &'a [u8; 32]>,
        ) -> [(u8, [Row; 8]); 2] {
            let mut sets = [[[0u8; 32]; 8]; 2];
            let mut n = 0usize;
            for (lane, e) in sets.iter_mut().flatten().zip(encodings) {
                *lane = *e;
                n += 1;
            }
            let decoded = point::decompress_each(&sets);
            core::array::from_fn(|j| {
                let (is_point, x, y) = decoded[j];
                let used = n.saturating_sub(8 * j).min(8);
                let mask = if used == 8 { 0xff } else { (1u8 << used) - 1 };
                (is_point & mask, msm::rows(&point::affine_niels(&x, &y)))
            })
        }

        /// Up to eight encoded points decompressed: the lanes that are points, and each lane's
        /// table row.
        #[$feature]
        fn decompress_rows<'a>(encodings: impl Iterator<Item = &'a [u8; 32]>) -> (u8, [Row; 8]) {
            let mut lanes = [[0u8; 32]; 8];
            let mut n = 0;
            for (lane, e) in lanes.iter_mut().zip(encodings) {
                *lane = *e;
                n += 1;
            }
            let (is_point, x, y) = point::decompress(&lanes);
            let used = if n == 8 { 0xff } else { (1u8 << n) - 1 };
            (is_point & used, msm::rows(&point::affine_niels(&x, &y)))
        }

        /// The base point's table row, computed once.
        fn basepoint_row() -> Row {
            static ROW: OnceLock<Row> = OnceLock::new();
            *ROW.get_or_init(|| {
                // SAFETY: only `verify_batch_simd` calls this, on a CPU that runs this backend.
                let (is_point, rows) =
                    unsafe { decompress_rows(std::iter::once(&ED25519_BASEPOINT_COMPRESSED.0)) };
                assert_eq!(is_point, 1, "the base point decompresses");
                rows[0]
            })
        }
    };
}
