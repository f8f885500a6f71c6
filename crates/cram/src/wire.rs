//! CRAM 3 wire primitives (spec §2.3): ITF8 and LTF8 integers, and the
//! CRC32 that closes every block and container header.

/// Length of the ITF8 value starting with `b0`.
#[cfg(test)]
fn itf8_len(b0: u8) -> usize {
    (b0.leading_ones() as usize).min(4) + 1
}

/// Length of the LTF8 value starting with `b0`.
#[cfg(test)]
fn ltf8_len(b0: u8) -> usize {
    b0.leading_ones() as usize + 1
}

#[cfg(test)]
fn read_itf8(buf: &[u8], at: &mut usize) -> Result<u32, String> {
    let b0 = *buf.get(*at).ok_or("truncated ITF8")?;
    let n = itf8_len(b0);
    let b = buf.get(*at..*at + n).ok_or("truncated ITF8")?;
    *at += n;
    Ok(match n {
        1 => b0 as u32,
        2 => ((b0 as u32 & 0x3f) << 8) | b[1] as u32,
        3 => ((b0 as u32 & 0x1f) << 16) | (b[1] as u32) << 8 | b[2] as u32,
        4 => ((b0 as u32 & 0x0f) << 24) | (b[1] as u32) << 16 | (b[2] as u32) << 8 | b[3] as u32,
        _ => {
            ((b0 as u32 & 0x0f) << 28)
                | (b[1] as u32) << 20
                | (b[2] as u32) << 12
                | (b[3] as u32) << 4
                | (b[4] as u32 & 0x0f)
        }
    })
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

pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(bytes);
    c.sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_ltf8(buf: &[u8]) -> u64 {
        let n = ltf8_len(buf[0]);
        let extra = n - 1;
        let mut v: u64 = if extra >= 7 {
            0
        } else {
            (buf[0] & (0xffu8 >> (extra + 1))) as u64
        };
        for b in &buf[1..n] {
            v = (v << 8) | *b as u64;
        }
        v
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
            let mut at = 0;
            assert_eq!(read_itf8(&b, &mut at).unwrap(), v, "{v:#x}");
        }
    }

    #[test]
    fn ltf8_round_trips_at_every_width() {
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) - 1, u64::MAX >> (63 - shift)] {
                let mut b = Vec::new();
                write_ltf8(&mut b, v);
                assert_eq!(b.len(), ltf8_len(b[0]), "{v:#x}");
                assert_eq!(read_ltf8(&b), v, "{v:#x}");
            }
        }
    }
}
