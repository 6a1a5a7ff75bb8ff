//! EOS-style 64-bit names: up to 12 characters of `a-z`, `1-5` and `.`, packed 5 bits each.
//!
//! The packing is EOS's `string_to_name`, so names sort and compare as in EOS, and
//! `tally.h`'s `AccountName_initCString` computes the same number inside a contract.

use core::fmt;
use core::str::FromStr;

/// An account or action name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct Name(pub u64);

/// Most characters a name may have.
pub const MAX_NAME_LEN: usize = 12;

const CHARMAP: &[u8; 32] = b".12345abcdefghijklmnopqrstuvwxyz";

/// Why a string is not a valid name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The empty string.
    Empty,
    /// More than [`MAX_NAME_LEN`] characters.
    TooLong,
    /// A character outside `a-z`, `1-5` and `.`, with its byte offset.
    BadChar(usize),
    /// A trailing `.`, which would not survive a round trip.
    TrailingDot,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("a name cannot be empty"),
            Self::TooLong => write!(f, "a name has at most {MAX_NAME_LEN} characters"),
            Self::BadChar(at) => write!(
                f,
                "character {} is not allowed in a name (use a-z, 1-5 and '.')",
                at + 1
            ),
            Self::TrailingDot => f.write_str("a name cannot end with '.'"),
        }
    }
}

impl core::error::Error for NameError {}

impl Name {
    /// Packs `s`, or says why it is not a name. Usable in constants.
    pub const fn from_str_const(s: &str) -> Result<Name, NameError> {
        let b = s.as_bytes();
        if b.is_empty() {
            return Err(NameError::Empty);
        }
        if b.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        if b[b.len() - 1] == b'.' {
            return Err(NameError::TrailingDot);
        }
        let mut value: u64 = 0;
        let mut i = 0;
        while i < b.len() {
            let sym = match b[i] {
                c @ b'a'..=b'z' => c - b'a' + 6,
                c @ b'1'..=b'5' => c - b'1' + 1,
                b'.' => 0,
                _ => return Err(NameError::BadChar(i)),
            } as u64;
            value |= sym << (64 - 5 * (i + 1));
            i += 1;
        }
        Ok(Name(value))
    }

    /// The raw 64-bit value.
    pub const fn as_u64(self) -> u64 {
        self.0
    }
}

impl FromStr for Name {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        Name::from_str_const(s)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [b'.'; 13];
        let mut len = 0;
        for (i, slot) in buf.iter_mut().enumerate().take(MAX_NAME_LEN) {
            let sym = (self.0 >> (64 - 5 * (i + 1))) & 0x1f;
            *slot = CHARMAP[sym as usize];
            if sym != 0 {
                len = i + 1;
            }
        }
        // The low 4 bits are the 13th character in EOS; Tally never sets them, but show them
        // rather than hide a difference.
        let last = self.0 & 0x0f;
        if last != 0 {
            buf[12] = CHARMAP[last as usize];
            len = 13;
        }
        f.write_str(core::str::from_utf8(&buf[..len]).unwrap_or("?"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn known_eos_values() {
        // Values from EOS: N(eosio) = 0x5530ea0000000000.
        assert_eq!(
            Name::from_str_const("eosio").unwrap().0,
            0x5530_ea00_0000_0000
        );
        assert_eq!(
            "simplecoin".parse::<Name>().unwrap().to_string(),
            "simplecoin"
        );
        assert_eq!("a.b".parse::<Name>().unwrap().to_string(), "a.b");
    }

    #[test]
    fn rejects_bad_names() {
        assert_eq!("".parse::<Name>(), Err(NameError::Empty));
        assert_eq!("abcdefghijklm".parse::<Name>(), Err(NameError::TooLong));
        assert_eq!("Abc".parse::<Name>(), Err(NameError::BadChar(0)));
        assert_eq!("ab6".parse::<Name>(), Err(NameError::BadChar(2)));
        assert_eq!("ab.".parse::<Name>(), Err(NameError::TrailingDot));
    }
}
