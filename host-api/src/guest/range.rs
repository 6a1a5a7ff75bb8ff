//! Ordered reads of this contract's storage: [`entries`] and [`prefix`] walk raw keys in
//! byte order, both ways, and [`Map`] keeps typed keys under a prefix, encoded so that their
//! byte order is their order ([`OrderedKey`]).
//!
//! Each step is one `db_next` host call, stateless: it asks for the first key past the last
//! one returned, so a walk sees the action's own writes and deletes made between its steps,
//! and deleting the key just returned is safe. A step costs
//! [`FUEL_PER_KEY_SEEK`](crate::limits::FUEL_PER_KEY_SEEK) and a fuel per byte of the key and
//! value found: a walk pays for every key it visits.
//!
//! ```ignore
//! use tally_host_api::guest::range::Map;
//! use tally_host_api::Name;
//!
//! // Votes of poll 7, keyed (poll, voter), one byte of prefix apart from other maps.
//! const VOTES: Map<(u64, Name), u8> = Map::new(b"v");
//! VOTES.set(&(7, voter), &choice);
//! for ((_, voter), choice) in VOTES.prefix(&7u64) { /* in voter order */ }
//! let last = VOTES.iter().next_back();
//! ```
//!
//! # How ordered keys encode
//!
//! Unsigned integers big-endian, signed ones big-endian with the sign bit flipped, a
//! [`Name`] as its 8 bytes big-endian (its number, whose order is its text's for names of the
//! same length), byte arrays as they are, and a tuple as its parts one after another. A
//! `Vec<u8>` or `String` has no length, so it may only come last. These differ from
//! [`Key`](super::Key), which stores a [`Name`] and a `u64` little-endian as the 2017 C
//! contracts do: keys already written that way keep it, and only keys a contract iterates in
//! order need [`OrderedKey`].

use alloc::string::String;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::ops::Bound;

use borsh::{BorshDeserialize, BorshSerialize};

use super::abort;
use crate::Name;
use crate::abi::{NEXT_BACKWARD, NEXT_HI_INCLUSIVE, NEXT_HI_OPEN, NEXT_LO_EXCLUSIVE};
use crate::limits::MAX_KEY_LEN;

/// The import, beside the walk that calls it.
///
/// Every function of this module that is not generic is `#[inline]` (and `Entries` and `Iter`
/// derive no `Debug`): compiled into this crate, they reordered the functions of contracts
/// that never call them (token-rs built to other bytes, though its imports and sizes were the
/// same), and CI requires the committed builds to stay reproducible. Inline, they are
/// compiled only into the contracts that use them.
mod sys {
    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        #[allow(clippy::too_many_arguments)] // the import's own arguments
        pub fn db_next(
            lo: *const u8,
            lo_len: u32,
            hi: *const u8,
            hi_len: u32,
            flags: i32,
            key_dst: *mut u8,
            key_cap: u32,
            val_dst: *mut u8,
            val_cap: u32,
        ) -> i64;
    }
}

/// Value bytes a step reads at first: a larger value takes a second call with room for it.
const FIRST_VALUE: usize = 64;

/// One `db_next` call: the first entry between `lo` and `hi` (the last, `backward`).
#[inline]
pub fn next(lo: Bound<&[u8]>, hi: Bound<&[u8]>, backward: bool) -> Option<(Vec<u8>, Vec<u8>)> {
    let (lo, mut flags) = match lo {
        Bound::Included(k) => (k, 0),
        Bound::Excluded(k) => (k, NEXT_LO_EXCLUSIVE),
        Bound::Unbounded => (&[][..], 0),
    };
    let hi = match hi {
        Bound::Included(k) => {
            flags |= NEXT_HI_INCLUSIVE;
            k
        }
        Bound::Excluded(k) => k,
        Bound::Unbounded => {
            flags |= NEXT_HI_OPEN;
            &[]
        }
    };
    if backward {
        flags |= NEXT_BACKWARD;
    }
    let mut key = Vec::with_capacity(MAX_KEY_LEN as usize);
    let mut value = Vec::with_capacity(FIRST_VALUE);
    loop {
        // SAFETY: every pointer with its exact length or capacity.
        let found = unsafe {
            sys::db_next(
                lo.as_ptr(),
                lo.len() as u32,
                hi.as_ptr(),
                hi.len() as u32,
                flags,
                key.as_mut_ptr(),
                key.capacity() as u32,
                value.as_mut_ptr(),
                value.capacity() as u32,
            )
        };
        if found < 0 {
            return None;
        }
        let (key_len, value_len) = ((found >> 32) as usize, found as u32 as usize);
        if value_len <= value.capacity() {
            // SAFETY: the host wrote the whole key (at most MAX_KEY_LEN) and value, within
            // the capacities it was given.
            unsafe {
                key.set_len(key_len);
                value.set_len(value_len);
            }
            return Some((key, value));
        }
        value.reserve_exact(value_len);
    }
}

/// The entries of this contract's storage between `lo` and `hi`, in key order (`.rev()` or
/// `next_back` for the other way).
#[inline]
pub fn entries(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Entries {
    let own = |b: Bound<&[u8]>| b.map(<[u8]>::to_vec);
    Entries {
        lo: own(lo),
        hi: own(hi),
        done: false,
    }
}

/// The entries whose key starts with `prefix`, in key order.
#[inline]
pub fn prefix(prefix: &[u8]) -> Entries {
    let end = prefix_end(prefix);
    entries(
        Bound::Included(prefix),
        end.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
    )
}

/// The least key above every key that starts with `prefix`; `None` if there is none (an
/// empty or all-`0xff` prefix).
#[inline]
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// A walk over raw entries (key, value), from both ends: each step narrows its bounds past
/// the key it returned, so the walk holds no cursor in the host.
#[derive(Clone)]
pub struct Entries {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    done: bool,
}

impl Entries {
    #[inline]
    fn step(&mut self, backward: bool) -> Option<(Vec<u8>, Vec<u8>)> {
        if self.done {
            return None;
        }
        let found = next(
            self.lo.as_ref().map(Vec::as_slice),
            self.hi.as_ref().map(Vec::as_slice),
            backward,
        );
        match &found {
            None => self.done = true,
            Some((key, _)) if backward => self.hi = Bound::Excluded(key.clone()),
            Some((key, _)) => self.lo = Bound::Excluded(key.clone()),
        }
        found
    }
}

impl Iterator for Entries {
    type Item = (Vec<u8>, Vec<u8>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

impl DoubleEndedIterator for Entries {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

/// A key whose encoding sorts as the key does (see the module docs).
pub trait OrderedKey: Sized {
    /// Appends the encoding.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads one key off the front of `bytes`, moving past it; `None` if they hold none.
    fn decode(bytes: &mut &[u8]) -> Option<Self>;
}

macro_rules! ordered_int {
    ($($t:ty, $flip:expr;)*) => {$(
        /// Big-endian (a signed one with its sign bit flipped, so negatives sort first).
        impl OrderedKey for $t {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&(*self ^ $flip).to_be_bytes());
            }
            #[inline]
            fn decode(bytes: &mut &[u8]) -> Option<Self> {
                const N: usize = core::mem::size_of::<$t>();
                let (head, rest) = bytes.split_first_chunk::<N>()?;
                *bytes = rest;
                Some(<$t>::from_be_bytes(*head) ^ $flip)
            }
        }
    )*};
}

ordered_int! {
    u8, 0; u16, 0; u32, 0; u64, 0; u128, 0;
    i8, i8::MIN; i16, i16::MIN; i32, i32::MIN; i64, i64::MIN; i128, i128::MIN;
}

/// Its 8 bytes big-endian (unlike [`Key`](super::Key)'s little-endian, kept for the C
/// contracts' balances).
impl OrderedKey for Name {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    #[inline]
    fn decode(bytes: &mut &[u8]) -> Option<Self> {
        u64::decode(bytes).map(Name)
    }
}

impl<const N: usize> OrderedKey for [u8; N] {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    #[inline]
    fn decode(bytes: &mut &[u8]) -> Option<Self> {
        let (head, rest) = bytes.split_first_chunk::<N>()?;
        *bytes = rest;
        Some(*head)
    }
}

/// The rest of the key: only as a tuple's last part.
impl OrderedKey for Vec<u8> {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    #[inline]
    fn decode(bytes: &mut &[u8]) -> Option<Self> {
        Some(core::mem::take(bytes).to_vec())
    }
}

/// The rest of the key, UTF-8: only as a tuple's last part.
impl OrderedKey for String {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    #[inline]
    fn decode(bytes: &mut &[u8]) -> Option<Self> {
        String::from_utf8(core::mem::take(bytes).to_vec()).ok()
    }
}

impl<A: OrderedKey, B: OrderedKey> OrderedKey for (A, B) {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }
    #[inline]
    fn decode(bytes: &mut &[u8]) -> Option<Self> {
        Some((A::decode(bytes)?, B::decode(bytes)?))
    }
}

impl<A: OrderedKey, B: OrderedKey, C: OrderedKey> OrderedKey for (A, B, C) {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
        self.2.encode(out);
    }
    #[inline]
    fn decode(bytes: &mut &[u8]) -> Option<Self> {
        Some((A::decode(bytes)?, B::decode(bytes)?, C::decode(bytes)?))
    }
}

/// Typed entries under a prefix: keys `K` in their order ([`OrderedKey`]), values `V` in
/// borsh. Give each map of a contract a prefix no other's starts with (one distinct byte
/// each is simplest).
#[derive(Debug)]
pub struct Map<K, V> {
    prefix: &'static [u8],
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for Map<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for Map<K, V> {}

impl<K: OrderedKey, V: BorshSerialize + BorshDeserialize> Map<K, V> {
    /// The map under `prefix`.
    pub const fn new(prefix: &'static [u8]) -> Self {
        Self {
            prefix,
            types: PhantomData,
        }
    }

    /// The storage key of `key`.
    pub fn key(&self, key: &K) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + 16);
        out.extend_from_slice(self.prefix);
        key.encode(&mut out);
        out
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        super::load(&self.key(key))
    }

    /// Whether `key` has a value.
    pub fn contains(&self, key: &K) -> bool {
        super::contains(&self.key(key))
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &K, value: &V) {
        super::store(&self.key(key), value);
    }

    /// Deletes `key` (a no-op if absent).
    pub fn remove(&self, key: &K) {
        super::remove(&self.key(key));
    }

    /// Every entry, in key order (`.rev()` for the other way).
    pub fn iter(&self) -> Iter<K, V> {
        self.typed(prefix(self.prefix))
    }

    /// The entries from `lo` to `hi`, in key order.
    pub fn range(&self, lo: Bound<&K>, hi: Bound<&K>) -> Iter<K, V> {
        let end = prefix_end(self.prefix);
        let (lo, hi) = (lo.map(|k| self.key(k)), hi.map(|k| self.key(k)));
        let lo = match &lo {
            Bound::Unbounded => Bound::Included(self.prefix),
            bound => bound.as_ref().map(Vec::as_slice),
        };
        let hi = match &hi {
            Bound::Unbounded => end.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            bound => bound.as_ref().map(Vec::as_slice),
        };
        self.typed(entries(lo, hi))
    }

    /// The entries whose key's encoding starts with `part`'s (a tuple key's first parts), in
    /// key order.
    pub fn prefix<P: OrderedKey>(&self, part: &P) -> Iter<K, V> {
        let mut start = self.prefix.to_vec();
        part.encode(&mut start);
        self.typed(prefix(&start))
    }

    fn typed(&self, raw: Entries) -> Iter<K, V> {
        Iter {
            raw,
            skip: self.prefix.len(),
            types: PhantomData,
        }
    }
}

/// Typed entries of a [`Map`]; aborts on a key or value of another type.
pub struct Iter<K, V> {
    raw: Entries,
    skip: usize,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: OrderedKey, V: BorshDeserialize> Iter<K, V> {
    fn typed(&self, (key, value): (Vec<u8>, Vec<u8>)) -> (K, V) {
        let mut bytes = &key[self.skip..];
        let key = K::decode(&mut bytes)
            .filter(|_| bytes.is_empty())
            .unwrap_or_else(|| abort("stored key has another type"));
        let value = crate::message::decode(&value)
            .unwrap_or_else(|_| abort("stored value has another type"));
        (key, value)
    }
}

impl<K: OrderedKey, V: BorshDeserialize> Iterator for Iter<K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<Self::Item> {
        let raw = self.raw.next()?;
        Some(self.typed(raw))
    }
}

impl<K: OrderedKey, V: BorshDeserialize> DoubleEndedIterator for Iter<K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let raw = self.raw.next_back()?;
        Some(self.typed(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded<K: OrderedKey>(key: &K) -> Vec<u8> {
        let mut out = Vec::new();
        key.encode(&mut out);
        out
    }

    fn round_trip<K: OrderedKey + PartialEq + core::fmt::Debug>(key: K) {
        let bytes = encoded(&key);
        let mut rest = bytes.as_slice();
        assert_eq!(K::decode(&mut rest), Some(key));
        assert!(rest.is_empty());
    }

    #[test]
    fn ordered_keys_sort_as_their_values_and_read_back() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edges = [0, 1, 0x7f, 0x80, 0xff, 0x100, u64::MAX >> 1, u64::MAX];
        for i in 0..2000 {
            let (a, b) = match i {
                i if i < 64 => (edges[i % 8], edges[i / 8]),
                _ => (next() >> (next() % 64), next() >> (next() % 64)),
            };
            assert_eq!(encoded(&a).cmp(&encoded(&b)), a.cmp(&b));
            let (sa, sb) = (a as i64, b as i64);
            assert_eq!(encoded(&sa).cmp(&encoded(&sb)), sa.cmp(&sb));
            let (na, nb) = (a as u32 as i32, b as u32 as i32);
            assert_eq!(encoded(&na).cmp(&encoded(&nb)), na.cmp(&nb));
            let (ta, tb) = ((a % 3, Name(b)), (b % 3, Name(a)));
            assert_eq!(encoded(&ta).cmp(&encoded(&tb)), ta.cmp(&tb));
            round_trip(a);
            round_trip(sa);
            round_trip((na, Name(b), b.to_le_bytes().to_vec()));
        }
        round_trip((7u64, String::from("poll")));
        round_trip(u128::MAX - 5);
        round_trip(i128::MIN);
    }

    #[test]
    fn a_key_of_another_shape_does_not_decode() {
        let mut short: &[u8] = &[1, 2, 3];
        assert_eq!(u64::decode(&mut short), None);
        let mut bad_text: &[u8] = &[0xff];
        assert_eq!(String::decode(&mut bad_text), None);
    }

    #[test]
    fn a_prefix_ends_past_every_key_that_starts_with_it() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(alloc::vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
        assert_eq!(prefix_end(&[]), None);
    }
}
