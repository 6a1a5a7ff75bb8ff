//! Action data, the same on both sides of the boundary: what `tally abigen --lang rust` builds on.
//!
//! An action's data is one borsh-encoded message (integers little-endian, strings and bytes
//! after a u32 length, names as 8 bytes little-endian). The types `tally abigen` generates
//! from a contract's ABI file implement [`ActionData`] (one struct per action) and [`Actions`]
//! (an enum of all of them), and compile both in a `no_std` contract and in a client or test
//! on the host, so the bytes a client sends are the bytes the contract reads.
//!
//! Decoding is strict: the data must be exactly one message. Trailing bytes are an error, as
//! they are in the C readers `tally abigen --lang c` generates, so the same data is accepted or
//! refused for the same reason by a contract in either language, and a client built against
//! another version of the ABI (one field more) fails loudly instead of losing a field.
//!
//! ```
//! use tally_host_api::Name;
//! use tally_host_api::message::{self, DecodeError, Field, Message, Reader, borsh, name};
//!
//! // What `tally abigen --lang rust` writes for `"hit": [{"name": "who", "type": "name"}]`.
//! #[derive(Debug, PartialEq, borsh::BorshSerialize, borsh::BorshDeserialize)]
//! #[borsh(crate = "tally_host_api::message::borsh")]
//! struct Hit {
//!     who: Name,
//! }
//! impl Field for Hit {
//!     fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
//!         Ok(Self { who: r.read()? })
//!     }
//! }
//! impl Message for Hit {
//!     const NAME: Name = name("hit");
//!     type Returns = ();
//! }
//!
//! let data = Hit { who: "alice".parse().unwrap() }.encode();
//! assert_eq!(data.len(), 8);
//! assert_eq!(Hit::decode(&data).unwrap().who.to_string(), "alice");
//! assert_eq!(Hit::decode(&data[..7]), Err(DecodeError::TooShort));
//! assert_eq!(Hit::decode(&[0; 9]), Err(DecodeError::TrailingBytes));
//! ```

use core::fmt;

pub use alloc::string::String;
pub use alloc::vec::Vec;
pub use borsh;
use borsh::io::ErrorKind;
use borsh::{BorshDeserialize, BorshSerialize};

pub use crate::Name;

/// A name from a string literal; in a `const`, an invalid name fails the build.
pub const fn name(s: &str) -> Name {
    match Name::from_str_const(s) {
        Ok(n) => n,
        Err(_) => panic!("not a valid name (up to 12 characters of a-z, 1-5 and '.')"),
    }
}

/// Why action data could not be decoded. Its [`Display`](fmt::Display) text is what a contract
/// aborts with, and the C readers of `tally abigen` abort with the same text for the same data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The data ended inside a field.
    TooShort,
    /// Bytes were left after the last field.
    TrailingBytes,
    /// A field's bytes are not a valid value (a string that is not UTF-8).
    Malformed,
    /// The contract has no action of this name.
    UnknownAction(Name),
}

impl DecodeError {
    /// The abort message, without the action's name: a `&'static str`, so that a contract can
    /// abort without formatting (which would pull `core::fmt` into every contract).
    pub fn message(&self) -> &'static str {
        match self {
            Self::TooShort => "message too short",
            Self::TrailingBytes => "message has trailing bytes",
            Self::Malformed => "malformed action data",
            Self::UnknownAction(_) => "unknown action",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownAction(name) => write!(f, "unknown action {name}"),
            other => f.write_str(other.message()),
        }
    }
}

impl core::error::Error for DecodeError {}

/// Decodes `data` as exactly one borsh `T`, for types of a contract's own (the generated
/// types decode with [`read_exact`] instead). Data that ends early reads as
/// [`DecodeError::TooShort`] or [`DecodeError::Malformed`], as borsh reports it.
pub fn decode<T: BorshDeserialize>(data: &[u8]) -> Result<T, DecodeError> {
    let mut rest = data;
    let value = T::deserialize(&mut rest).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => DecodeError::TooShort,
        _ => DecodeError::Malformed,
    })?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(DecodeError::TrailingBytes)
    }
}

/// Encodes `value` with borsh.
pub fn encode<T: BorshSerialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail, and none of the types an ABI can name refuses to encode.
    value
        .serialize(&mut out)
        .expect("borsh encoding into a Vec does not fail");
    out
}

/// A cursor over action data that reads ABI fields the way the C readers of `tally abigen`
/// do, field by field, checking each length against what is left before it allocates.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts at the beginning of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::TooShort);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// The next field.
    pub fn read<T: Field>(&mut self) -> Result<T, DecodeError> {
        T::read(self)
    }

    /// Succeeds if nothing is left.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}

/// A type an ABI field can have: `bool`, `u8`, `u16`, `u32`, `u64`, `u128`, `i32`, `i64`,
/// `name`, `string`, `bytes`, lists `T[]` (`Vec<T>`), options `T?` (`Option<T>`), and the
/// structs `tally abigen` generates.
pub trait Field: Sized {
    /// Reads one value.
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// Reads the `n` items of a list: one at a time, unless the type knows a faster way (a
    /// list of `u8` is one copy).
    #[doc(hidden)]
    fn read_list(r: &mut Reader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(Self::read(r)?);
        }
        Ok(out)
    }
}

/// Decodes `data` as exactly one `T`, strictly (no bytes left over), the way generated types
/// and the C readers of `tally abigen` read.
pub fn read_exact<T: Field>(data: &[u8]) -> Result<T, DecodeError> {
    let mut r = Reader::new(data);
    let value = T::read(&mut r)?;
    r.finish()?;
    Ok(value)
}

/// Nothing: what an action without return data returns.
impl Field for () {
    fn read(_: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(())
    }
}

/// `bool`: one byte, 0 or 1; any other byte is malformed (as borsh decides).
impl Field for bool {
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match r.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Malformed),
        }
    }
}

impl Field for u8 {
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(r.take(1)?[0])
    }

    fn read_list(r: &mut Reader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
        r.take(n).map(<[u8]>::to_vec)
    }
}

macro_rules! le_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                r.array().map(<$t>::from_le_bytes)
            }
        }
    )*};
}
le_field!(u16, u32, u64, u128, i32, i64);

impl Field for Name {
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.array().map(|b| Name(u64::from_le_bytes(b)))
    }
}

/// A list (`bytes` is a list of `u8`): a u32 count, then the items. A count beyond what is
/// left of the data is refused before anything is allocated for it (every item the ABI can
/// describe takes at least one byte).
impl<T: Field> Field for Vec<T> {
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = u32::read(r)? as usize;
        if n > r.rest.len() {
            return Err(DecodeError::TooShort);
        }
        T::read_list(r, n)
    }
}

/// An option: 0, or 1 then the value; any other tag is malformed.
impl<T: Field> Field for Option<T> {
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match r.take(1)?[0] {
            0 => Ok(None),
            1 => T::read(r).map(Some),
            _ => Err(DecodeError::Malformed),
        }
    }
}

/// `string`: a u32 length, then that many bytes of UTF-8.
impl Field for String {
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = u32::read(r)? as usize;
        let bytes = r.take(len)?;
        core::str::from_utf8(bytes)
            .map(Into::into)
            .map_err(|_| DecodeError::Malformed)
    }
}

/// The data of an action or a query: a struct `tally abigen` generates from one entry of an
/// ABI file, with what the action or query returns.
pub trait Message: Field + BorshSerialize + BorshDeserialize {
    /// The action's or query's name.
    const NAME: Name;

    /// What it returns (its return data, borsh); `()` if nothing.
    type Returns: Field + BorshSerialize;

    /// Decodes exactly one value from `data` (no trailing bytes).
    fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        read_exact(data)
    }

    /// The data, as a transaction or a call carries it.
    fn encode(&self) -> Vec<u8> {
        encode(self)
    }
}

/// The data of an action (`guest::call_action` sends one to another contract).
pub trait ActionData: Message {}

/// The data of a query (`guest::ask` asks one of another contract).
pub trait QueryData: Message {}

/// An event a contract emits: a struct `tally abigen` generates from the ABI's "events".
pub trait EventData: Field + BorshSerialize + BorshDeserialize {
    /// The event's name.
    const NAME: Name;

    /// Decodes exactly one event from `data` (no trailing bytes).
    fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        read_exact(data)
    }

    /// The event's data, as a receipt carries it.
    fn encode(&self) -> Vec<u8> {
        encode(self)
    }
}

/// Generates an enum trait of [`Actions`]' shape: one variant per message of a contract.
macro_rules! message_enum {
    ($(#[$doc:meta])* $trait:ident, $what:literal) => {
        $(#[$doc])*
        pub trait $trait: Sized {
            #[doc = concat!("Decodes the data of ", $what, " `name`; [`DecodeError::UnknownAction`] if the contract has none of this name.")]
            fn decode(name: Name, data: &[u8]) -> Result<Self, DecodeError>;

            #[doc = concat!("This ", $what, "'s name.")]
            fn name(&self) -> Name;

            #[doc = concat!("This ", $what, "'s data.")]
            fn encode(&self) -> Vec<u8>;
        }
    };
}

message_enum!(
    /// Every action of one contract: the enum `tally abigen` generates from an ABI file, with
    /// one variant per action. A contract decodes its incoming action with it (`guest::apply`
    /// does); a client or a test builds one and sends [`Actions::name`] with
    /// [`Actions::encode`].
    Actions,
    "an action"
);

message_enum!(
    /// Every query of one contract, as [`Actions`] for actions: `guest::answer` decodes the
    /// incoming query with it.
    Queries,
    "a query"
);

message_enum!(
    /// Every event of one contract, as [`Actions`] for actions: an indexer or a test decodes a
    /// receipt's events with it.
    Events,
    "an event"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, BorshSerialize, BorshDeserialize)]
    #[borsh(crate = "crate::message::borsh")]
    struct Memo {
        amount: u64,
        memo: String,
    }

    impl Field for Memo {
        fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
            Ok(Self {
                amount: r.read()?,
                memo: r.read()?,
            })
        }
    }

    impl Message for Memo {
        const NAME: Name = name("memo");
        type Returns = ();
    }

    #[test]
    fn action_data_decoding_names_each_way_data_can_be_wrong() {
        let good = Memo {
            amount: 7,
            memo: "hi".into(),
        }
        .encode();
        assert_eq!(good.len(), 8 + 4 + 2);
        assert_eq!(Memo::decode(&good).unwrap().memo, "hi");
        assert_eq!(Memo::decode(&good[..13]), Err(DecodeError::TooShort));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Memo::decode(&long), Err(DecodeError::TrailingBytes));
        let mut bad_utf8 = good.clone();
        bad_utf8[12] = 0xff;
        assert_eq!(Memo::decode(&bad_utf8), Err(DecodeError::Malformed));
        // A string length far beyond the data is too short, and allocates nothing.
        let mut huge = good[..8].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Memo::decode(&huge), Err(DecodeError::TooShort));
    }

    #[test]
    fn action_data_decoding_agrees_with_borsh_on_valid_data() {
        let good = Memo {
            amount: u64::MAX,
            memo: "ünïcode".into(),
        }
        .encode();
        assert_eq!(Memo::decode(&good), decode::<Memo>(&good));
        let mut long = good.clone();
        long.push(1);
        assert_eq!(decode::<Memo>(&long), Err(DecodeError::TrailingBytes));
    }
}
