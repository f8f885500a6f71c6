//! Positions, names and barcodes as samtools markdup reads them: unclipped ends (own CIGAR and `MC`), tile/x/y from read names, barcode hashes.

use alnsort_bam::cigar::op;
use alnsort_bam::RecordRef;

/// htslib's `bam_endpos`: 0-based end (exclusive) of the aligned bases; an
/// unmapped record or one without reference length spans 1 base.
pub fn end_pos(r: RecordRef<'_>) -> i64 {
    let rlen = if r.flag() & alnsort_bam::record::flags::UNMAPPED != 0 {
        0
    } else {
        r.reference_length()
    };
    r.pos() as i64 + if rlen == 0 { 1 } else { rlen }
}

fn is_clip(o: u8) -> bool {
    o == op::SOFT_CLIP || o == op::HARD_CLIP
}

/// samtools' `unclipped_start(b, 1)`: 1-based start less the leading soft
/// and hard clips.
pub fn unclipped_start(r: RecordRef<'_>) -> i64 {
    let clipped: i64 = r
        .cigar()
        .ops()
        .take_while(|&(o, _)| is_clip(o))
        .map(|(_, l)| l as i64)
        .sum();
    r.pos() as i64 - clipped + 1
}

/// samtools' `unclipped_end(b, 1)`: `bam_endpos` plus the trailing soft and
/// hard clips.
pub fn unclipped_end(r: RecordRef<'_>) -> i64 {
    let clipped: i64 = r
        .cigar()
        .ops()
        .rev()
        .take_while(|&(o, _)| is_clip(o))
        .map(|(_, l)| l as i64)
        .sum();
    end_pos(r) + clipped
}

/// One element of a CIGAR string as samtools' `unclipped_other_*` read it:
/// digits (C `strtol`) or, without digits, a length of 1, then the
/// operation letter (0 at the end of the text).
fn cigar_text_ops(text: &[u8]) -> impl Iterator<Item = (i64, u8)> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= text.len() || text[at] == b'*' {
            return None;
        }
        let num = if text[at].is_ascii_digit() {
            let (n, used) = strtol(&text[at..]).unwrap_or((0, 0));
            at += used;
            n
        } else {
            1
        };
        let c = text.get(at).copied().unwrap_or(0);
        // samtools steps past the letter even at the end of the text.
        at += 1;
        Some((num, c))
    })
}

/// samtools' `unclipped_other_start(mpos, MC, 1)`: the mate's 1-based
/// unclipped start from its 0-based position and CIGAR text.
pub fn mate_unclipped_start(mpos: i64, mc: &[u8]) -> i64 {
    let mut clipped = 0i64;
    for (n, c) in cigar_text_ops(mc) {
        match c {
            b'S' | b'H' => clipped += n,
            _ => break,
        }
        if c == 0 {
            break;
        }
    }
    mpos - clipped + 1
}

/// samtools' `unclipped_other_end(mpos, MC, 1)`: the mate's position plus
/// its M/D/N/=/X lengths and the clips after its first reference operation.
pub fn mate_unclipped_end(mpos: i64, mc: &[u8]) -> i64 {
    let mut refpos = 0i64;
    let mut skip = true;
    for (n, c) in cigar_text_ops(mc) {
        match c {
            b'M' | b'D' | b'N' | b'=' | b'X' => {
                refpos += n;
                skip = false;
            }
            b'S' | b'H' if !skip => refpos += n,
            0 => break,
            _ => {}
        }
    }
    mpos + refpos
}

/// C `strtol(s, &end, 10)` on bytes: leading white space, an optional sign,
/// decimal digits (saturating at the 64-bit range, as glibc's `long`).
/// Returns the value and the bytes used, or `None` when no digit was read
/// (`end == s`).
pub fn strtol(s: &[u8]) -> Option<(i64, usize)> {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let digits_from = i;
    let mut v: i64 = 0;
    let mut overflow = false;
    while i < s.len() && s[i].is_ascii_digit() {
        let d = (s[i] - b'0') as i64;
        match v.checked_mul(10).and_then(|x| {
            if neg {
                x.checked_sub(d)
            } else {
                x.checked_add(d)
            }
        }) {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == digits_from {
        return None;
    }
    if overflow {
        v = if neg { i64::MIN } else { i64::MAX };
    }
    Some((v, i))
}

/// The Bob Jenkins one-at-a-time hash samtools markdup reduces barcodes
/// (and its keys) with (`do_hash`).
pub fn one_at_a_time(key: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &b in key {
        h = h.wrapping_add(b as u32);
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h = h.wrapping_add(h << 15);
    h
}

/// Where a read name's optical coordinates are: the tile part that must
/// be equal (`name[t_beg..t_end]`) and x, y.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameCoords {
    pub t_beg: usize,
    pub t_end: usize,
    pub x: i64,
    pub y: i64,
}

/// Why a name gave no coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameFailure {
    /// A warning samtools prints (counted among the read-name warnings).
    Warn(String),
    /// `--read-coords` regex did not match (no warning; samtools' -1).
    NoMatch,
}

/// `--read-coords REGEX` with `--coords-order ORDER`: which capture groups
/// are x, y and the tile part (0: none).
#[derive(Debug, Clone)]
pub struct CoordRegex {
    pub regex: regex::bytes::Regex,
    pub x: usize,
    pub y: usize,
    pub t: usize,
}

impl CoordRegex {
    /// Compiles `pattern` (POSIX extended syntax; compiled by Rust's regex
    /// crate, byte-wise) with `order` read as samtools does (its first 3,
    /// or for `xy`/`yx` 2, characters): txy, tyx, xyt, yxt, xty, ytx, xy, yx.
    pub fn new(pattern: &str, order: &str) -> Result<CoordRegex, String> {
        let o = order.as_bytes();
        let starts = |p: &str| o.len() >= p.len() && &o[..p.len()] == p.as_bytes();
        let (x, y, t) = if starts("txy") || starts("tyx") {
            (2, 3, 1)
        } else if starts("xyt") || starts("yxt") {
            (1, 2, 3)
        } else if starts("xty") || starts("ytx") {
            (1, 3, 2)
        } else if starts("xy") || starts("yx") {
            (1, 2, 0)
        } else {
            return Err(format!(
                "could not recognise regex coordinate order \"{order}\""
            ));
        };
        let regex = build_regex(pattern).map_err(|e| format!("regex fail \"{e}\""))?;
        Ok(CoordRegex { regex, x, y, t })
    }
}

/// A regex compiled byte-wise (read names are bytes).
pub fn build_regex(pattern: &str) -> Result<regex::bytes::Regex, regex::Error> {
    regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
}

/// samtools' `get_coordinates_colons`: 3, 4, 6 or 7 colons; x and y are
/// the fields after colons 2/3, 3/4, 5/6 (C `strtol`); the tile part is
/// the name up to x.
pub fn colon_coords(name: &[u8]) -> Result<NameCoords, NameFailure> {
    let (mut sep, mut xpos, mut ypos) = (0, 0, 0);
    for (pos, &c) in name.iter().enumerate() {
        if c == b':' {
            sep += 1;
            match sep {
                2 => xpos = pos + 1,
                3 => ypos = pos + 1,
                4 => {
                    xpos = ypos;
                    ypos = pos + 1;
                }
                5 => xpos = pos + 1,
                6 => ypos = pos + 1,
                _ => {}
            }
        }
    }
    let text = String::from_utf8_lossy(name);
    if !matches!(sep, 3 | 4 | 6 | 7) {
        return Err(NameFailure::Warn(format!(
            "warning, cannot decipher read name {text} for optical duplicate marking."
        )));
    }
    let x = strtol(&name[xpos..])
        .ok_or_else(|| {
            NameFailure::Warn(format!("warning, cannot decipher x coordinate in {text} ."))
        })?
        .0;
    let y = strtol(&name[ypos..])
        .ok_or_else(|| {
            NameFailure::Warn(format!("warning, cannot decipher y coordinate in {text} ."))
        })?
        .0;
    Ok(NameCoords {
        t_beg: 0,
        t_end: xpos,
        x,
        y,
    })
}

/// samtools' `get_coordinates_regex`.
pub fn regex_coords(rx: &CoordRegex, name: &[u8]) -> Result<NameCoords, NameFailure> {
    let caps = rx.regex.captures(name).ok_or(NameFailure::NoMatch)?;
    let group = |i: usize| caps.get(i).map(|m| (m.start(), m.end()));
    let (Some(xm), Some(ym)) = (group(rx.x), group(rx.y)) else {
        return Err(NameFailure::NoMatch);
    };
    let (t_beg, t_end) = if rx.t > 0 {
        group(rx.t).ok_or(NameFailure::NoMatch)?
    } else {
        (0, 0)
    };
    let text = String::from_utf8_lossy(name);
    let coord = |(s, e): (usize, usize), axis: &str| -> Result<i64, NameFailure> {
        let len = e - s;
        if len > 254 {
            return Err(NameFailure::Warn(format!(
                "warning, {axis} coordinate string longer than allowed qname length in {text} ({len} long)."
            )));
        }
        let part = &name[s..e];
        strtol(part).map(|(v, _)| v).ok_or_else(|| {
            NameFailure::Warn(format!(
                "warning, cannot decipher {axis} coordinate in {text} ({}).",
                String::from_utf8_lossy(part)
            ))
        })
    };
    let x = coord(xm, "x")?;
    let y = coord(ym, "y")?;
    Ok(NameCoords { t_beg, t_end, x, y })
}
