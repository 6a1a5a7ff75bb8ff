//! Compact integers for the transaction encoding: unsigned LEB128, strict.
//!
//! A transfer's fixed-width integers (expiration, fees, vector lengths) took 36 of its ~210
//! bytes, mostly zeros (issue 26: a vector length of 1 in 4 bytes, a tip of 0 in 8). LEB128
//! writes 7 bits a byte, low bits first, the top bit set on every byte but the last. Decoding
//! is strict so that a transaction keeps exactly one encoding (its id and block bytes depend
//! on it): a value must use its fewest bytes (a last byte of 0 after others is refused), and
//! a `u64` at most 10 bytes with nothing above its 64th bit.

use std::io::{self, Read, Write};

/// Most bytes a `u64` takes: ceil(64 / 7).
pub const MAX_VARINT_BYTES: usize = 10;

/// Bytes `value` takes.
pub const fn varint_len(mut value: u64) -> usize {
    let mut n = 1;
    while value >= 0x80 {
        value >>= 7;
        n += 1;
    }
    n
}

/// Writes `value`.
pub fn write_varint<W: Write>(w: &mut W, mut value: u64) -> io::Result<()> {
    // Most varints are counts and lengths under 128: one byte, written with a constant length
    // (a `Vec` writer then pushes it instead of calling memcpy; encoding a transfer took 794
    // instructions, 378 of them here).
    if value < 0x80 {
        return w.write_all(&[value as u8]);
    }
    let mut buf = [0u8; MAX_VARINT_BYTES];
    let mut n = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            buf[n] = byte;
            n += 1;
            break;
        }
        buf[n] = byte | 0x80;
        n += 1;
    }
    w.write_all(&buf[..n])
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Reads one byte.
pub fn read_u8<R: Read>(r: &mut R) -> io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

/// Reads a `u64` written by [`write_varint`], refusing any other encoding of it.
pub fn read_varint<R: Read>(r: &mut R) -> io::Result<u64> {
    let mut value = 0u64;
    for i in 0..MAX_VARINT_BYTES {
        let byte = read_u8(r)?;
        let bits = u64::from(byte & 0x7f);
        // The 10th byte holds bit 63 only.
        if i == MAX_VARINT_BYTES - 1 && byte > 1 {
            return Err(invalid("a varint beyond 64 bits"));
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            if byte == 0 && i > 0 {
                return Err(invalid("a non-minimal varint (a trailing zero byte)"));
            }
            return Ok(value);
        }
    }
    Err(invalid("a varint beyond 64 bits"))
}

/// Reads a length written as a varint, refusing one above `limit` before anything of that
/// length is allocated.
pub fn read_len<R: Read>(r: &mut R, limit: usize, what: &str) -> io::Result<usize> {
    let len = read_varint(r)?;
    if len > limit as u64 {
        return Err(invalid(&format!("{what}: {len}, more than {limit}")));
    }
    Ok(len as usize)
}

/// Reads exactly `len` bytes (already bounded by the caller), allocating only what arrives.
pub fn read_bytes<R: Read>(r: &mut R, len: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    r.take(len as u64).read_to_end(&mut out)?;
    if out.len() != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the bytes end inside a field",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_varint(&mut out, v).unwrap();
        out
    }

    #[test]
    fn varints_round_trip_with_their_length() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let bytes = encode(v);
            assert_eq!(bytes.len(), varint_len(v), "{v}");
            assert_eq!(read_varint(&mut bytes.as_slice()).unwrap(), v);
        }
        assert_eq!(encode(u64::MAX).len(), MAX_VARINT_BYTES);
    }

    #[test]
    fn non_minimal_varints_are_refused() {
        // 0 as two bytes, 1 as two bytes, 127 as three.
        for bytes in [&[0x80, 0x00][..], &[0x81, 0x00], &[0xff, 0x80, 0x00]] {
            assert!(read_varint(&mut &bytes[..]).is_err(), "{bytes:?}");
        }
    }

    #[test]
    fn varints_beyond_64_bits_are_refused() {
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(read_varint(&mut over.as_slice()).is_err());
        let eleven = [0x80u8; 11];
        assert!(read_varint(&mut &eleven[..]).is_err());
        let mut max = vec![0xff; 9];
        max.push(0x01);
        assert_eq!(read_varint(&mut max.as_slice()).unwrap(), u64::MAX);
    }

    #[test]
    fn a_length_above_its_limit_is_refused_before_reading() {
        let bytes = encode(1 << 40);
        assert!(read_len(&mut bytes.as_slice(), 1000, "data").is_err());
        assert!(read_bytes(&mut &[1u8, 2][..], 3).is_err());
    }
}
