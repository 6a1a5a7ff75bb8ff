//! The order of a block's changes by key.
//!
//! Why not `sort_unstable_by`: a block of 5,000 transfers among 10,000 accounts writes about
//! 20,000 keys (callgrind counts 4.1 changes hashed a transfer), and pdqsort compares each
//! about 14 times, comparing keys' first 16 bytes as one integer ([`sort_prefix`]) and whole
//! keys on a tie: 990 instructions a transfer, 8% of a transfer's execution. And a block's
//! keys share most of those 16 bytes (a tag, then a contract's 8-byte name), so they tie often.
//!
//! So the keys are split by their first byte (the kind of state: a contract's storage, a
//! balance), and each group is ordered by the 16 bytes that follow what all its keys share:
//! by a least-significant-digit radix sort on the bytes of those in which its keys differ
//! (a simplecoin balance's name: three bytes among 10,000 accounts), or, when more bytes
//! differ than radix passes pay for, by pdqsort on them. Keys that tie on them are ordered by
//! their whole keys. All of `Journal::take_changes`, which moves the changes into this order,
//! went from 1,186 to 823 instructions a transfer (`benches/callgrind/stages.sh`).
//!
//! The order is the one a comparison sort of whole keys gives: within a group every key starts
//! with the shared bytes, [`sort_prefix`] order of what follows never contradicts its key
//! order, and ties go to whole keys. A block's keys are distinct, so the order is total and
//! every node reaches it.

use crate::store::sort_prefix;

/// Groups of fewer keys than this are sorted by comparison: a radix pass costs a table of 256
/// counts whatever the number of keys, and below a few hundred keys pdqsort's dozen
/// comparisons each cost less than clearing and summing the tables.
const RADIX_MIN_KEYS: usize = 256;

/// Groups whose prefixes differ in more bytes than this are sorted by comparison: each radix
/// pass reads and writes every entry, and pdqsort's dozen comparisons of a key cost about as
/// much as six passes.
const RADIX_MAX_DIGITS: usize = 6;

/// A key's sort prefix past its group's shared bytes, and the key's index in the caller's
/// slice.
type Entry = (u128, u32);

/// The indices of `items` in the order of their keys (`key`, compared bytewise as
/// `<[u8]>::cmp`).
///
/// # Panics
/// If there are more than `u32::MAX` items (a block writes at most a few million keys).
pub(crate) fn key_order<T>(items: &[T], key: impl Fn(&T) -> &[u8]) -> Vec<u32> {
    let index = |i: usize| u32::try_from(i).expect("a block writes fewer than 2^32 keys");
    // Group 0 is the empty key, which sorts first; group b + 1 the keys starting with b.
    let group = |k: &[u8]| k.first().map_or(0, |&b| usize::from(b) + 1);
    let mut starts = [0u32; 258];
    for item in items {
        starts[group(key(item)) + 1] += 1;
    }
    for g in 1..starts.len() {
        starts[g] += starts[g - 1];
    }
    let mut grouped = vec![0u32; items.len()];
    let mut next = starts;
    for (i, item) in items.iter().enumerate() {
        let slot = &mut next[group(key(item))];
        grouped[*slot as usize] = index(i);
        *slot += 1;
    }
    let mut order = Vec::with_capacity(items.len());
    let mut entries: Vec<Entry> = Vec::new();
    for g in 0..257 {
        let members = &grouped[starts[g] as usize..starts[g + 1] as usize];
        let Some(&first) = members.first() else {
            continue;
        };
        if members.len() == 1 {
            order.push(first);
            continue;
        }
        // The bytes every key of the group starts with.
        let first = key(&items[first as usize]);
        let shared = members.iter().fold(first.len(), |shared, &i| {
            common_prefix(&first[..shared], key(&items[i as usize]))
        });
        entries.clear();
        entries.extend(
            members
                .iter()
                .map(|&i| (sort_prefix(&key(&items[i as usize])[shared..]), i)),
        );
        let whole = |a: &Entry, b: &Entry| {
            a.0.cmp(&b.0)
                .then_with(|| key(&items[a.1 as usize]).cmp(key(&items[b.1 as usize])))
        };
        if entries.len() < RADIX_MIN_KEYS || !radix_sort(&mut entries) {
            entries.sort_unstable_by(whole);
        } else {
            // Runs of equal prefixes, in the order the radix passes left them: whole keys
            // decide.
            let mut start = 0;
            while start < entries.len() {
                let prefix = entries[start].0;
                let run = entries[start..]
                    .iter()
                    .take_while(|e| e.0 == prefix)
                    .count();
                if run > 1 {
                    entries[start..start + run].sort_unstable_by(whole);
                }
                start += run;
            }
        }
        order.extend(entries.iter().map(|&(_, i)| i));
    }
    order
}

/// How many bytes `a` and `b` start with alike, compared 8 at a time: each key of a block is
/// compared with its group's first, over the 9 or more bytes they share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let word = |k: &[u8]| u64::from_le_bytes(k[i..i + 8].try_into().expect("8 bytes"));
        let differ = word(a) ^ word(b);
        if differ != 0 {
            // Little-endian: the lowest set bit is in the first byte that differs.
            return i + (differ.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Sorts `entries` by prefix, one stable counting pass per byte of the prefix, least
/// significant first, skipping the bytes every prefix has alike; `false` (and `entries` as
/// they were) when more than [`RADIX_MAX_DIGITS`] bytes differ.
fn radix_sort(entries: &mut Vec<Entry>) -> bool {
    let Some(&(first, _)) = entries.first() else {
        return true;
    };
    // The bits in which some prefix differs from the first.
    let differ = entries.iter().fold(0u128, |acc, &(p, _)| acc | (p ^ first));
    let digits: Vec<u32> = (0..16).filter(|d| (differ >> (8 * d)) as u8 != 0).collect();
    if digits.len() > RADIX_MAX_DIGITS {
        return false;
    }
    let mut counts = vec![[0u32; 256]; digits.len()];
    for &(p, _) in entries.iter() {
        for (count, &d) in counts.iter_mut().zip(&digits) {
            count[usize::from((p >> (8 * d)) as u8)] += 1;
        }
    }
    let mut from = std::mem::take(entries);
    let mut to: Vec<Entry> = vec![(0, 0); from.len()];
    for (count, &d) in counts.iter_mut().zip(&digits) {
        // Each byte value's first slot in the output.
        let mut next = 0u32;
        for c in count.iter_mut() {
            (*c, next) = (next, next + *c);
        }
        for &entry in &from {
            let slot = &mut count[usize::from((entry.0 >> (8 * d)) as u8)];
            to[*slot as usize] = entry;
            *slot += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    *entries = from;
    true
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The order a comparison sort of whole keys gives.
    fn by_comparison(keys: &[Vec<u8>]) -> Vec<u32> {
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_by(|&a, &b| keys[a as usize].cmp(&keys[b as usize]));
        order
    }

    /// Distinct keys, as a block writes them.
    fn distinct(mut keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        keys.sort();
        keys.dedup();
        // Out of order again, deterministically.
        let n = keys.len();
        (0..n)
            .map(|i| keys[(i * 7919) % n.max(1)].clone())
            .collect()
    }

    /// Keys a block of simplecoin transfers writes: a contract's balances (a tag, the
    /// contract's name, the holder's name as the contract stores it, little-endian) and the
    /// native balances (a tag, the name big-endian), over `accounts` names.
    fn transfer_keys(accounts: u64) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for i in 0..accounts {
            let name = (0x8000_0000_0000_0000u64 | (i << 40)).rotate_right(3);
            let mut key = b"\x05contract".to_vec();
            key.extend_from_slice(&name.to_le_bytes());
            keys.push(key);
            if i % 3 == 0 {
                let mut key = vec![0x02];
                key.extend_from_slice(&name.to_be_bytes());
                keys.push(key);
            }
        }
        distinct(keys)
    }

    #[test]
    fn a_block_of_transfers_sorts_by_key_with_radix_passes() {
        let keys = transfer_keys(3_000);
        // Each group is large enough, and differs in few enough bytes, for the radix passes.
        for tag in [0x02, 0x05] {
            let group: Vec<&Vec<u8>> = keys.iter().filter(|k| k[0] == tag).collect();
            let shared = group
                .iter()
                .fold(group[0].len(), |n, k| common_prefix(&group[0][..n], k));
            let mut entries: Vec<Entry> = group
                .iter()
                .map(|k| (sort_prefix(&k[shared..]), 0))
                .collect();
            assert!(
                entries.len() >= RADIX_MIN_KEYS,
                "{tag}: {} keys",
                entries.len()
            );
            assert!(radix_sort(&mut entries), "{tag}: too many bytes differ");
        }
        assert_eq!(key_order(&keys, Vec::as_slice), by_comparison(&keys));
    }

    #[test]
    fn keys_that_differ_in_many_bytes_sort_by_comparison() {
        let keys: Vec<Vec<u8>> = distinct(
            (0..3_000u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec())
                .collect(),
        );
        let mut entries: Vec<Entry> = keys.iter().map(|k| (sort_prefix(k), 0)).collect();
        assert!(
            !radix_sort(&mut entries),
            "8 bytes differ: too many for radix passes"
        );
        assert_eq!(key_order(&keys, Vec::as_slice), by_comparison(&keys));
    }

    #[test]
    fn keys_that_tie_on_16_bytes_past_the_shared_ones_sort_by_the_rest() {
        // Past the shared "pfx", one of 4 bytes then 15 zeros: the prefixes tie in groups of
        // 150, which the bytes after decide. Short keys tie with zero-padded longer ones.
        let mut keys = vec![
            b"".to_vec(),
            b"\0".to_vec(),
            b"\0\0".to_vec(),
            b"a".to_vec(),
        ];
        for i in 0..600u32 {
            let mut key = b"pfx".to_vec();
            key.push((i % 4) as u8);
            key.extend_from_slice(&[0; 15]);
            key.extend_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            keys.push(key);
        }
        keys.push(b"pfx".to_vec());
        keys.push(b"pfx\0".to_vec());
        let keys = distinct(keys);
        assert_eq!(key_order(&keys, Vec::as_slice), by_comparison(&keys));
    }

    #[test]
    fn the_common_prefix_is_the_bytes_alike_up_to_the_first_that_differs() {
        let a = b"0123456789abcdefXYZ";
        for n in 0..=a.len() {
            for differ in 0..n {
                let mut b = a[..n].to_vec();
                b[differ] ^= 0x10;
                assert_eq!(common_prefix(a, &b), differ);
            }
            assert_eq!(common_prefix(a, &a[..n]), n);
            assert_eq!(common_prefix(&a[..n], a), n);
        }
    }

    proptest! {
        #[test]
        fn the_order_is_a_comparison_sorts(
            keys in prop::collection::vec(prop::collection::vec(0u8..3, 0..24), 0..1200)
        ) {
            // Bytes from a small alphabet make shared bytes, ties and groups of hundreds
            // common.
            let keys = distinct(keys);
            prop_assert_eq!(key_order(&keys, Vec::as_slice), by_comparison(&keys));
        }
    }
}
