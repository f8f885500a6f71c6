//! The workspace's one unsigned LEB128 varint (and zigzag for signed
//! values), for the formats alnsort writes for itself: the sort's run
//! files (`alnsort-sort`), part indexes (`alnsort-index`, and the BAM
//! writer's record fields for them in `alnsort-bam`) and the distributed
//! marking's range slices (`alnsort-markdup`). It lives here because this
//! is the one crate all four already depend on; it has nothing to do with
//! ordering. CRAM's ITF8/LTF8 are another encoding and stay in
//! `alnsort-cram`.
//!
//! Seven bits a byte, least significant group first, the high bit set on
//! every byte but the last. A `u64` takes at most [`MAX_LEN`] bytes; the
//! reader refuses a varint that is cut short ([`VarintError::Truncated`])
//! or that runs past [`MAX_LEN`] bytes or past 64 bits
//! ([`VarintError::Overlong`]). It accepts a value padded with `0x80`
//! bytes within [`MAX_LEN`] (the writer never pads).

/// The most bytes a `u64` takes: 64 bits in groups of 7 is 10 groups.
pub const MAX_LEN: usize = 64usize.div_ceil(7);

/// Why bytes are not a varint. The caller knows the file and offset and
/// reports them with this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The bytes end while the varint's last byte still says more follow.
    #[error("varint cut short: the bytes end before its last byte")]
    Truncated,
    /// More than [`MAX_LEN`] bytes, or bits beyond the 64th.
    #[error("overlong varint: more than 10 bytes or more than 64 bits")]
    Overlong,
}

/// Appends `v` as an unsigned LEB128 varint (1 to [`MAX_LEN`] bytes).
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at the start of `bytes`: `(value, bytes it takes)`.
#[inline]
pub fn get(bytes: &[u8]) -> Result<(u64, usize), VarintError> {
    if let Some(&b) = bytes.first() {
        if b < 0x80 {
            return Ok((u64::from(b), 1));
        }
    }
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(MAX_LEN).enumerate() {
        let bits = u64::from(b & 0x7f);
        // The last group holds the 64th bit alone.
        if i == MAX_LEN - 1 && bits > 1 {
            return Err(VarintError::Overlong);
        }
        value |= bits << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    if bytes.len() >= MAX_LEN {
        Err(VarintError::Overlong)
    } else {
        Err(VarintError::Truncated)
    }
}

/// The varint at `*at` of `bytes`; moves `*at` past it. On an error `*at`
/// is left at the varint's first byte (an `*at` beyond `bytes` is
/// [`VarintError::Truncated`]).
#[inline]
pub fn read(bytes: &[u8], at: &mut usize) -> Result<u64, VarintError> {
    let (v, used) = get(bytes.get(*at..).unwrap_or_default())?;
    *at += used;
    Ok(v)
}

/// A signed value as an unsigned one for [`put`], small magnitudes small:
/// 0, -1, 1, -2, ... become 0, 1, 2, 3, ...
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes_of(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, v);
        out
    }

    #[test]
    fn known_encodings() {
        // The bytes the run files, part indexes and range slices already
        // hold: the encoding must not change.
        assert_eq!(bytes_of(0), [0]);
        assert_eq!(bytes_of(1), [1]);
        assert_eq!(bytes_of(127), [0x7f]);
        assert_eq!(bytes_of(128), [0x80, 0x01]);
        assert_eq!(bytes_of(300), [0xac, 0x02]);
        assert_eq!(bytes_of(u32::MAX.into()), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut max = vec![0xff; MAX_LEN - 1];
        max.push(0x01);
        assert_eq!(bytes_of(u64::MAX), max);
        assert_eq!(MAX_LEN, 10);
    }

    #[test]
    fn refuses_cut_and_overlong() {
        assert_eq!(get(&[]), Err(VarintError::Truncated));
        assert_eq!(get(&[0x80]), Err(VarintError::Truncated));
        assert_eq!(get(&[0xff; MAX_LEN - 1]), Err(VarintError::Truncated));
        // Ten bytes that all continue, with or without more after them.
        assert_eq!(get(&[0x80; MAX_LEN]), Err(VarintError::Overlong));
        assert_eq!(get(&[0x80; MAX_LEN + 1]), Err(VarintError::Overlong));
        // A tenth byte with bits beyond the 64th.
        let mut wide = vec![0xff; MAX_LEN - 1];
        wide.push(0x02);
        assert_eq!(get(&wide), Err(VarintError::Overlong));
        // Padding within ten bytes is read (the writer never pads).
        assert_eq!(get(&[0x81, 0x80, 0x00]), Ok((1, 3)));
    }

    #[test]
    fn read_moves_past_the_varint_and_not_on_an_error() {
        let mut b = bytes_of(300);
        b.push(0x80);
        let mut at = 0;
        assert_eq!(read(&b, &mut at), Ok(300));
        assert_eq!(at, 2);
        assert_eq!(read(&b, &mut at), Err(VarintError::Truncated));
        assert_eq!(at, 2);
        let mut beyond = 7;
        assert_eq!(read(&b, &mut beyond), Err(VarintError::Truncated));
        assert_eq!(beyond, 7);
    }

    #[test]
    fn zigzag_known_values() {
        for (s, u) in [(0i64, 0u64), (-1, 1), (1, 2), (-2, 3), (2, 4)] {
            assert_eq!(zigzag(s), u);
            assert_eq!(unzigzag(u), s);
        }
        assert_eq!(zigzag(i64::MAX), u64::MAX - 1);
        assert_eq!(zigzag(i64::MIN), u64::MAX);
    }

    proptest! {
        #[test]
        fn round_trip(v in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut b = bytes_of(v);
            let n = b.len();
            prop_assert!(n <= MAX_LEN);
            prop_assert_eq!(n, 1.max((64 - v.leading_zeros() as usize).div_ceil(7)));
            b.extend_from_slice(&tail);
            prop_assert_eq!(get(&b), Ok((v, n)));
            // Any cut inside it is truncated.
            for cut in 0..n {
                prop_assert_eq!(get(&b[..cut]), Err(VarintError::Truncated));
            }
        }

        #[test]
        fn zigzag_round_trip(v in any::<i64>()) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
            prop_assert!(zigzag(v) <= v.unsigned_abs().saturating_mul(2));
        }

        #[test]
        fn any_bytes_give_a_value_or_an_error(b in proptest::collection::vec(any::<u8>(), 0..14)) {
            match get(&b) {
                Ok((v, n)) => {
                    prop_assert!(n <= MAX_LEN && n <= b.len());
                    prop_assert!(b[n - 1] < 0x80);
                    prop_assert!(b[..n - 1].iter().all(|&x| x >= 0x80));
                    // Re-encoded it is the same value, at most as long.
                    prop_assert!(bytes_of(v).len() <= n);
                }
                Err(VarintError::Truncated) => prop_assert!(b.len() < MAX_LEN),
                Err(VarintError::Overlong) => prop_assert!(b.len() >= MAX_LEN),
            }
        }
    }
}
