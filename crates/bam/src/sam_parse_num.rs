//! C number parsing as htslib's SAM reader does it (`hts_str2uint`,
//! `hts_str2int`, libc `strtod`), split from `sam_parse` to keep it short.
//! Each function reads from an index of a `Line` and returns the value and
//! the index where parsing stopped, as the C functions return `end`.

use super::Line;

/// htslib's `hts_str2uint`: optional '+', decimal digits; saturates at
/// `2^bits - 1` and sets `overflow`. Returns the value and the end index.
pub(super) fn str2uint(s: &Line, mut p: usize, bits: u32, overflow: &mut bool) -> (u64, usize) {
    let limit = if bits < 64 {
        (1u64 << bits) - 1
    } else {
        u64::MAX
    };
    if s.at(p) == b'+' {
        p += 1;
    }
    digits(s, p, limit, overflow)
}

/// htslib's `hts_str2int`: optional sign, digits; saturates at
/// `-2^(bits-1)` / `2^(bits-1) - 1` and sets `overflow`.
pub(super) fn str2int(s: &Line, mut p: usize, bits: u32, overflow: &mut bool) -> (i64, usize) {
    let neg = s.at(p) == b'-';
    if neg || s.at(p) == b'+' {
        p += 1;
    }
    let limit = (1u64 << (bits - 1)) - 1 + neg as u64;
    let (n, p) = digits(s, p, limit, overflow);
    let v = if neg {
        (n as i64).wrapping_neg()
    } else {
        n as i64
    };
    (v, p)
}

/// Decimal digits from `p`, accumulated up to `limit`: past it the value
/// saturates at `limit`, the remaining digits are skipped and `overflow` is
/// set, as htslib's `hts_str2uint`/`hts_str2int` do.
fn digits(s: &Line, mut p: usize, limit: u64, overflow: &mut bool) -> (u64, usize) {
    let mut n: u64 = 0;
    while s.at(p).is_ascii_digit() {
        let d = (s.at(p) - b'0') as u64;
        match n
            .checked_mul(10)
            .and_then(|v| v.checked_add(d))
            .filter(|&v| v <= limit)
        {
            Some(v) => n = v,
            None => {
                while s.at(p).is_ascii_digit() {
                    p += 1;
                }
                *overflow = true;
                return (limit, p);
            }
        }
        p += 1;
    }
    (n, p)
}

/// C `strtod` on the bytes from `p`: the longest prefix that is a decimal or
/// hexadecimal float, `inf[inity]` or `nan[(...)]` after optional white space
/// and sign. Returns 0.0 and `p` when there is none.
pub(super) fn strtod(s: &Line, p: usize) -> (f64, usize) {
    let mut i = p;
    while matches!(s.at(i), b' ' | b'\t'..=b'\r') {
        i += 1;
    }
    let neg = s.at(i) == b'-';
    if matches!(s.at(i), b'-' | b'+') {
        i += 1;
    }
    let sign = |v: f64| if neg { -v } else { v };
    let word = |i: usize, w: &[u8]| {
        w.iter()
            .enumerate()
            .all(|(k, c)| s.at(i + k).eq_ignore_ascii_case(c))
    };
    if word(i, b"inf") {
        let len = if word(i, b"infinity") { 8 } else { 3 };
        return (sign(f64::INFINITY), i + len);
    }
    if word(i, b"nan") {
        let mut e = i + 3;
        if s.at(e) == b'(' {
            let mut k = e + 1;
            while s.at(k).is_ascii_alphanumeric() || s.at(k) == b'_' {
                k += 1;
            }
            if s.at(k) == b')' {
                e = k + 1;
            }
        }
        return (sign(f64::NAN), e);
    }
    if s.at(i) == b'0' && matches!(s.at(i + 1), b'x' | b'X') {
        if let Some((v, e)) = hex_float(s, i + 2) {
            return (sign(v), e);
        }
    }
    let start = i;
    let mut digits = 0;
    while s.at(i).is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if s.at(i) == b'.' {
        i += 1;
        while s.at(i).is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return (0.0, p);
    }
    let mantissa_end = i;
    if matches!(s.at(i), b'e' | b'E') {
        let mut k = i + 1;
        if matches!(s.at(k), b'+' | b'-') {
            k += 1;
        }
        if s.at(k).is_ascii_digit() {
            while s.at(k).is_ascii_digit() {
                k += 1;
            }
            i = k;
        }
    }
    let text = std::str::from_utf8(&s.0[start..i]).unwrap_or("0");
    let v = text.parse::<f64>().unwrap_or_else(|_| {
        // Only reachable for absurd exponents Rust rejects; use the mantissa.
        std::str::from_utf8(&s.0[start..mantissa_end])
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0.0)
    });
    (sign(v), i)
}

/// Hexadecimal float after "0x": hex digits with an optional point and an
/// optional binary exponent. Up to 30 significant hex digits are used.
fn hex_float(s: &Line, mut i: usize) -> Option<(f64, usize)> {
    let (mut mant, mut exp, mut digits, mut used) = (0u128, 0i64, 0, 0);
    let mut seen_point = false;
    loop {
        let c = s.at(i);
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            digits += 1;
            if used < 30 {
                mant = mant << 4 | d as u128;
                used += (mant != 0) as u32;
                exp -= 4 * seen_point as i64;
            } else {
                exp += 4 * !seen_point as i64;
            }
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if matches!(s.at(i), b'p' | b'P') {
        let mut k = i + 1;
        let neg = s.at(k) == b'-';
        if matches!(s.at(k), b'+' | b'-') {
            k += 1;
        }
        if s.at(k).is_ascii_digit() {
            let mut e: i64 = 0;
            while s.at(k).is_ascii_digit() {
                e = (e * 10 + (s.at(k) - b'0') as i64).min(100_000);
                k += 1;
            }
            exp += if neg { -e } else { e };
            i = k;
        }
    }
    Some(((mant as f64) * 2f64.powi(exp.clamp(-2000, 2000) as i32), i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_saturate_and_flag_overflow() {
        let mut of = false;
        assert_eq!(str2uint(&Line(b"+255x"), 0, 8, &mut of), (255, 4));
        assert!(!of);
        assert_eq!(str2uint(&Line(b"256,"), 0, 8, &mut of), (255, 3));
        assert!(of);
        let mut of = false;
        assert_eq!(str2int(&Line(b"-128"), 0, 8, &mut of), (-128, 4));
        assert_eq!(str2int(&Line(b"-"), 0, 8, &mut of), (0, 1));
        assert!(!of);
        assert_eq!(str2int(&Line(b"-129"), 0, 8, &mut of), (-128, 4));
        assert!(of);
    }

    #[test]
    fn strtod_prefixes() {
        let d = |s: &[u8]| strtod(&Line(s), 0);
        assert_eq!(d(b"1.5e3x"), (1500.0, 5));
        assert_eq!(d(b"1e"), (1.0, 1));
        assert_eq!(d(b" .5"), (0.5, 3));
        assert_eq!(d(b"abc"), (0.0, 0));
        assert_eq!(d(b"-0x1.8p1"), (-3.0, 8));
        assert_eq!(d(b"INFINITY"), (f64::INFINITY, 8));
        assert!(d(b"nan(123)").0.is_nan() && d(b"nan(123)").1 == 8);
    }
}
