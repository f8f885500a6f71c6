//! CRAM 3 wire primitives (spec §2.3): ITF8 and LTF8 integers, and the
//! CRC32 that closes every block and container header.

use crate::error::DecodeError;
use std::io;

/// An integer of `kind` ("ITF8", "LTF8") that the data ends inside.
fn cut_short(kind: &'static str) -> io::Error {
    DecodeError::Wire { kind }.io()
}

/// Reads an ITF8 integer (CRAM §2.3) from the front of `src`.
pub(crate) fn read_itf8(src: &mut &[u8]) -> io::Result<i32> {
    let (&b0, rest) = src.split_first().ok_or_else(|| cut_short("ITF8"))?;
    let extra = (b0.leading_ones() as usize).min(4);
    if rest.len() < extra {
        return Err(cut_short("ITF8"));
    }
    let v = if extra < 4 {
        let mut v = u32::from(b0 & (0xff >> (extra + 1)));
        for &b in &rest[..extra] {
            v = (v << 8) | u32::from(b);
        }
        v
    } else {
        (u32::from(b0 & 0x0f) << 28)
            | (u32::from(rest[0]) << 20)
            | (u32::from(rest[1]) << 12)
            | (u32::from(rest[2]) << 4)
            | u32::from(rest[3] & 0x0f)
    };
    *src = &rest[extra..];
    Ok(v as i32)
}

/// Reads an LTF8 integer (CRAM §2.3) from the front of `src`.
pub(crate) fn read_ltf8(src: &mut &[u8]) -> io::Result<i64> {
    let (&b0, rest) = src.split_first().ok_or_else(|| cut_short("LTF8"))?;
    let extra = b0.leading_ones() as usize;
    if rest.len() < extra {
        return Err(cut_short("LTF8"));
    }
    let mut v = if extra >= 7 {
        0
    } else {
        u64::from(b0 & (0xff >> (extra + 1)))
    };
    for &b in &rest[..extra] {
        v = (v << 8) | u64::from(b);
    }
    *src = &rest[extra..];
    Ok(v as i64)
}

pub(crate) fn write_itf8(out: &mut Vec<u8>, v: u32) {
    if v < 0x80 {
        out.push(v as u8);
    } else if v < 0x4000 {
        out.extend_from_slice(&[0x80 | (v >> 8) as u8, v as u8]);
    } else if v < 0x20_0000 {
        out.extend_from_slice(&[0xc0 | (v >> 16) as u8, (v >> 8) as u8, v as u8]);
    } else if v < 0x1000_0000 {
        out.extend_from_slice(&[
            0xe0 | (v >> 24) as u8,
            (v >> 16) as u8,
            (v >> 8) as u8,
            v as u8,
        ]);
    } else {
        out.extend_from_slice(&[
            0xf0 | ((v >> 28) & 0x0f) as u8,
            (v >> 20) as u8,
            (v >> 12) as u8,
            (v >> 4) as u8,
            (v & 0x0f) as u8,
        ]);
    }
}

pub(crate) fn write_ltf8(out: &mut Vec<u8>, v: u64) {
    // Bytes after the first (CRAM 3 §2.3): 0 to 8 of them hold 7, 14, 21,
    // 28, 35, 42, 49, 56 or 64 value bits.
    let extra = match v {
        _ if v < 1 << 7 => 0,
        _ if v < 1 << 14 => 1,
        _ if v < 1 << 21 => 2,
        _ if v < 1 << 28 => 3,
        _ if v < 1 << 35 => 4,
        _ if v < 1 << 42 => 5,
        _ if v < 1 << 49 => 6,
        _ if v < 1 << 56 => 7,
        _ => 8,
    };
    let prefix: u8 = !(0xffu16 >> extra) as u8;
    let first_bits = if extra >= 7 { 0 } else { v >> (8 * extra) };
    out.push(prefix | first_bits as u8);
    for i in (0..extra).rev() {
        out.push((v >> (8 * i)) as u8);
    }
}

/// The CRC32 (the zlib polynomial) of CRAM 3 block and container headers.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn itf8_len(b0: u8) -> usize {
        (b0.leading_ones() as usize).min(4) + 1
    }

    fn ltf8_len(b0: u8) -> usize {
        b0.leading_ones() as usize + 1
    }

    #[test]
    fn itf8_round_trips_at_every_width() {
        for v in [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            0x1f_ffff,
            0x20_0000,
            0x0fff_ffff,
            0x1000_0000,
            u32::MAX,
        ] {
            let mut b = Vec::new();
            write_itf8(&mut b, v);
            assert_eq!(b.len(), itf8_len(b[0]), "{v:#x}");
            let mut s = &b[..];
            assert_eq!(read_itf8(&mut s).unwrap() as u32, v, "{v:#x}");
            assert!(s.is_empty());
        }
    }

    #[test]
    fn ltf8_round_trips_at_every_width() {
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) - 1, u64::MAX >> (63 - shift)] {
                let mut b = Vec::new();
                write_ltf8(&mut b, v);
                assert_eq!(b.len(), ltf8_len(b[0]), "{v:#x}");
                let mut s = &b[..];
                assert_eq!(read_ltf8(&mut s).unwrap() as u64, v, "{v:#x}");
                assert!(s.is_empty());
            }
        }
    }
}
