//! A block's state changes in one buffer.
//!
//! A block of 10,000 transfers among 10,000 accounts writes about 40,000 keys. As
//! `(Vec<u8>, Option<Vec<u8>>)` pairs, each key and value was an allocation of its own, made as
//! a transaction wrote it and freed when the block left the archive: 4.1 allocations a
//! transfer, counted by callgrind (`benches/callgrind/stages.sh`), where issue 26 asks for none.
//! [`Changes`] holds a block's changes back to back in one byte buffer, with their ends in a
//! second: two allocations a block, whatever it holds (after redb's and RocksDB's write
//! batches, which are one buffer too).
//!
//! The buffer holds each change as it is committed: `[klen:u32][key][0 | 1 [vlen:u32][value]]`,
//! borsh's encoding of `(Vec<u8>, Option<Vec<u8>>)`. That is what the state checksum hashes
//! ([`crate::block::ChangeHasher`]) and what a log store's record and a snapshot's tail hold,
//! so the checksum is one BLAKE3 call over the buffer and a record one copy of it, not an
//! encoding of every change (543 instructions a transfer for the checksum alone, callgrind).

use std::fmt;
use std::io::{self, Read};

use borsh::{BorshDeserialize, BorshSerialize};

use super::{Change, ChangeFn, ChangeSource};

/// Where one change ends in [`Changes::bytes`]: its key ends at `key` (it starts 4 bytes, its
/// length, after the previous change's end), and the change at `value` (its value, if it has
/// one, starts 5 bytes, the tag and its length, after its key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct End {
    key: usize,
    value: usize,
    present: bool,
}

/// Bytes of a change's encoding before its key: the key's length.
const KEY_HEAD: usize = 4;

/// Bytes of a change's encoding between its key and its value: the tag, and the value's
/// length if it has one.
const VALUE_HEAD: usize = 5;

/// A length as the encoding holds it. Keys and values are far shorter (a value is at most
/// `MAX_VALUE_LEN`, a transaction writes at most `MAX_TX_WRITE_BYTES`).
fn len_u32(len: usize) -> [u8; 4] {
    u32::try_from(len)
        .expect("a key or value is shorter than 4 GiB")
        .to_le_bytes()
}

/// State changes in order, each a key and its new value (`None`: deleted), held in one
/// buffer. A block's are sorted by key, each key once ([`Changes::is_strictly_sorted`]); this
/// type does not enforce it, since a store checks what it is handed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Every change's encoding, back to back.
    bytes: Vec<u8>,
    /// Where each change ends in `bytes`.
    ends: Vec<End>,
}

impl Changes {
    /// No changes.
    pub fn new() -> Self {
        Self::default()
    }

    /// No changes, with room for `changes` of `bytes` keys and values in all.
    pub fn with_capacity(changes: usize, bytes: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bytes + changes * (KEY_HEAD + VALUE_HEAD)),
            ends: Vec::with_capacity(changes),
        }
    }

    /// Appends a change of `key` to `value` (`None`: deleted).
    ///
    /// # Panics
    /// If the key or the value is 4 GiB or longer.
    #[inline]
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.bytes.extend_from_slice(&len_u32(key.len()));
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        match value {
            Some(value) => {
                self.bytes.push(1);
                self.bytes.extend_from_slice(&len_u32(value.len()));
                self.bytes.extend_from_slice(value);
            }
            None => self.bytes.push(0),
        }
        self.ends.push(End {
            key: key_end,
            value: self.bytes.len(),
            present: value.is_some(),
        });
    }

    /// Every change's encoding, back to back: borsh's encoding of the changes as
    /// `Vec<(Vec<u8>, Option<Vec<u8>>)>` without its leading count.
    pub fn encoded(&self) -> &[u8] {
        &self.bytes
    }

    /// Where each change's encoding starts in [`Changes::encoded`], in order.
    pub fn offsets(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(0)
            .chain(self.ends.iter().map(|e| e.value))
            .take(self.len())
    }

    /// The state checksum of these changes (sorted by key) chained onto `previous`: what
    /// [`crate::block::chain_checksum`] gives for them, in one pass over the encoding.
    /// Out of line (one call a block) so that a profile names it
    /// (`benches/callgrind/stages.sh`).
    #[inline(never)]
    pub fn checksum(&self, previous: &[u8; 32]) -> [u8; 32] {
        crate::block::chain_encoded(previous, &self.bytes)
    }

    /// How many changes there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of all keys and values (without their lengths and tags), which a store's
    /// statistics count.
    pub fn byte_len(&self) -> usize {
        let headers: usize = self
            .ends
            .iter()
            .map(|e| KEY_HEAD + if e.present { VALUE_HEAD } else { 1 })
            .sum();
        self.bytes.len() - headers
    }

    /// The `index`-th change.
    ///
    /// # Panics
    /// If there are not that many.
    pub fn get(&self, index: usize) -> (&[u8], Option<&[u8]>) {
        let start = match index {
            0 => 0,
            i => self.ends[i - 1].value,
        };
        change(&self.bytes, start, self.ends[index])
    }

    /// The changes in order.
    #[inline]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            ends: &self.ends,
            start: 0,
        }
    }

    /// Whether every key is larger than the one before: a block's changes, sorted, each key
    /// once.
    pub fn is_strictly_sorted(&self) -> bool {
        let mut keys = self.iter().map(|(key, _)| key);
        let Some(mut previous) = keys.next() else {
            return true;
        };
        keys.all(|key| std::mem::replace(&mut previous, key) < key)
    }

    /// Forgets every change, keeping the buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The changes as owned pairs (for tests and other cold paths).
    pub fn to_vec(&self) -> Vec<Change> {
        self.iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect()
    }
}

impl fmt::Debug for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(K, Option<V>)> for Changes {
    fn from_iter<I: IntoIterator<Item = (K, Option<V>)>>(iter: I) -> Self {
        let mut changes = Self::new();
        changes.extend(iter);
        changes
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> Extend<(K, Option<V>)> for Changes {
    fn extend<I: IntoIterator<Item = (K, Option<V>)>>(&mut self, iter: I) {
        for (key, value) in iter {
            self.push(key.as_ref(), value.as_ref().map(AsRef::as_ref));
        }
    }
}

impl From<Vec<Change>> for Changes {
    fn from(changes: Vec<Change>) -> Self {
        changes.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Changes {
    type Item = (&'a [u8], Option<&'a [u8]>);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The changes of a [`Changes`], in order. It walks the ends with the start of the next key
/// in hand, rather than indexing ([`Changes::get`] looks up the end before): iterating a
/// block's changes is what the checksum and every store's commit do.
#[derive(Clone)]
pub struct Iter<'a> {
    bytes: &'a [u8],
    /// The ends of the changes not yet yielded.
    ends: &'a [End],
    /// Where the first of them starts.
    start: usize,
}

/// The change of `bytes` that starts at `start` and ends at `end`.
#[inline]
fn change(bytes: &[u8], start: usize, end: End) -> (&[u8], Option<&[u8]>) {
    let key = &bytes[start + KEY_HEAD..end.key];
    let value = end.present.then(|| &bytes[end.key + VALUE_HEAD..end.value]);
    (key, value)
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (&end, rest) = self.ends.split_first()?;
        self.ends = rest;
        let change = change(self.bytes, self.start, end);
        self.start = end.value;
        Some(change)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.ends.len(), Some(self.ends.len()))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let (&end, rest) = self.ends.split_last()?;
        self.ends = rest;
        let start = rest.last().map_or(self.start, |e| e.value);
        Some(change(self.bytes, start, end))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl ChangeSource for Changes {
    fn len(&self) -> u64 {
        Changes::len(self) as u64
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> io::Result<()> {
        self.iter().try_for_each(|(k, v)| f(k, v))
    }
}

impl BorshSerialize for Changes {
    /// As `Vec<(Vec<u8>, Option<Vec<u8>>)>`: the count, then the encoding as it is held.
    fn serialize<W: io::Write>(&self, writer: &mut W) -> io::Result<()> {
        let count = u32::try_from(self.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "over 2^32 changes"))?;
        writer.write_all(&count.to_le_bytes())?;
        writer.write_all(&self.bytes)
    }
}

/// Reads a borsh byte string, its length included, onto the end of `out`: as long as its
/// prefix says, taking the bytes as they arrive, so a hostile prefix makes no allocation the
/// input does not back.
fn read_bytes<R: Read>(reader: &mut R, out: &mut Vec<u8>) -> io::Result<()> {
    let len = u32::deserialize_reader(reader)?;
    out.extend_from_slice(&len.to_le_bytes());
    let read = reader.take(u64::from(len)).read_to_end(out)?;
    if read as u64 != u64::from(len) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

impl BorshDeserialize for Changes {
    /// From `Vec<(Vec<u8>, Option<Vec<u8>>)>`'s encoding.
    fn deserialize_reader<R: Read>(reader: &mut R) -> io::Result<Self> {
        let count = u32::deserialize_reader(reader)?;
        let mut changes = Changes::new();
        for _ in 0..count {
            read_bytes(reader, &mut changes.bytes)?;
            let key = changes.bytes.len();
            let tag = u8::deserialize_reader(reader)?;
            changes.bytes.push(tag);
            let present = match tag {
                0 => false,
                1 => {
                    read_bytes(reader, &mut changes.bytes)?;
                    true
                }
                tag => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("invalid Option tag: {tag}"),
                    ));
                }
            };
            changes.ends.push(End {
                key,
                value: changes.bytes.len(),
                present,
            });
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Change> {
        vec![
            (b"".to_vec(), Some(b"empty key".to_vec())),
            (b"a".to_vec(), None),
            (b"b".to_vec(), Some(Vec::new())),
            (b"c".to_vec(), Some(vec![7; 300])),
        ]
    }

    /// Blocks already on disk and in snapshots decode as they did, and new ones encode as
    /// before: the encoding is the pairs'.
    #[test]
    fn the_encoding_is_the_one_of_owned_pairs() {
        for pairs in [Vec::new(), sample()] {
            let changes = Changes::from(pairs.clone());
            let encoded = borsh::to_vec(&changes).unwrap();
            assert_eq!(encoded, borsh::to_vec(&pairs).unwrap());
            assert_eq!(borsh::from_slice::<Changes>(&encoded).unwrap(), changes);
            assert_eq!(changes.to_vec(), pairs);
            assert_eq!(changes.encoded(), &encoded[4..]);
            let byte_len: usize = pairs
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum();
            assert_eq!(changes.byte_len(), byte_len);
        }
    }

    /// A deleted key and a key set to the empty value stay apart, read either way.
    #[test]
    fn a_deletion_is_not_an_empty_value() {
        let changes = Changes::from(sample());
        assert_eq!(changes.get(1), (&b"a"[..], None));
        assert_eq!(changes.get(2), (&b"b"[..], Some(&b""[..])));
        let backwards: Vec<_> = changes.iter().rev().collect();
        let mut forwards: Vec<_> = changes.iter().collect();
        forwards.reverse();
        assert_eq!(backwards, forwards);
        assert_ne!(changes, Changes::from(vec![(b"b".to_vec(), None)]));
    }

    /// Truncated input, a bad option tag and a length prefix the input does not back are
    /// errors, and the last allocates nothing near its claim.
    #[test]
    fn bad_encodings_are_refused() {
        let encoded = borsh::to_vec(&Changes::from(sample())).unwrap();
        for cut in 0..encoded.len() {
            assert!(
                borsh::from_slice::<Changes>(&encoded[..cut]).is_err(),
                "{cut}"
            );
        }
        let mut bad_tag = borsh::to_vec(&Changes::from(vec![(b"k".to_vec(), None)])).unwrap();
        *bad_tag.last_mut().unwrap() = 2;
        assert!(borsh::from_slice::<Changes>(&bad_tag).is_err());
        let mut huge = 1u32.to_le_bytes().to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(borsh::from_slice::<Changes>(&huge).is_err());
    }

    /// The checksum hashed from the encoding is the one of the changes hashed one by one,
    /// as a genesis streams them ([`crate::block::ChangeHasher`]): every node, however it
    /// holds a block's changes, reaches the same header.
    #[test]
    fn the_checksum_of_the_encoding_is_the_streamed_one() {
        let previous = [3; 32];
        for pairs in [Vec::new(), sample()] {
            let changes = Changes::from(pairs.clone());
            let streamed = crate::block::chain_checksum(&previous, changes.iter());
            assert_eq!(changes.checksum(&previous), streamed);
        }
        assert_ne!(
            Changes::from(sample()).checksum(&previous),
            Changes::new().checksum(&previous)
        );
    }

    /// Each change's offset is where its encoding starts: a log store indexes values by them.
    #[test]
    fn offsets_are_where_each_encoding_starts() {
        let changes = Changes::from(sample());
        let encoded = changes.encoded();
        for ((key, value), at) in changes.iter().zip(changes.offsets()) {
            let mut one = Vec::new();
            borsh::BorshSerialize::serialize(&(key.to_vec(), value.map(<[u8]>::to_vec)), &mut one)
                .unwrap();
            assert_eq!(&encoded[at..at + one.len()], &one[..]);
        }
        assert_eq!(changes.offsets().count(), changes.len());
    }

    #[test]
    fn sortedness_is_strict() {
        assert!(Changes::from(sample()).is_strictly_sorted());
        let twice = Changes::from(vec![(b"a".to_vec(), None), (b"a".to_vec(), None)]);
        assert!(!twice.is_strictly_sorted());
        assert!(Changes::new().is_strictly_sorted());
    }
}
