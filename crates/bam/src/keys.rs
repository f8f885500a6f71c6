//! Sort keys: one memcmp-comparable byte string per record and sort order.
//!
//! The sort engine never sees a comparator. It orders records by
//! `<[u8]>::cmp` on the keys this module writes and breaks ties by input
//! order, so each encoding below must reproduce the samtools 1.24 comparator
//! for its order exactly: `sign(memcmp(key(a), key(b))) == sign(cmp(a, b))`.
//! The comparators are described in `shared/reference/samtools-sort.md` §1;
//! the property tests in `keys/tests.rs` check every encoding against a
//! direct implementation of those comparators (`keys/reference.rs`), and
//! `keys/differential.rs` checks whole sorts against samtools 1.24 itself.
//!
//! Encodings (all integers big-endian, so byte order is numeric order):
//!
//! | order | key |
//! |---|---|
//! | coordinate | 8 bytes: `tid' << 33 \| (pos+1) as u32 << 1 \| reverse` |
//! | name | name key, `0x00`, flag key (u16) |
//! | tag | tag class (u8), tag value, then the coordinate or name key |
//! | template-coordinate | tid1, tid2 (i32), pos1, pos2 (i64), neg1, neg2, library, CB, MI, name, upper-of-pair |
//! | minimiser | `0x00` + coordinate key, or for `tid == -1`: `0x01`, minimiser (u64), position (descending, u32), strand (u8); see `keys/minimiser.rs` |
//!
//! Strings end with `0x00`. That is sound because none of them can contain a
//! NUL (read names, aux `Z`/`H` values and header values are NUL-free), and it
//! makes a proper prefix sort first, as `strcmp` does.
//!
//! Where samtools' comparator is not a strict weak order, no key can copy it;
//! these cases are documented where they arise (NaN tag values, and
//! template-coordinate `tid` differences that overflow `int`).

use std::collections::HashMap;

use crate::aux::Field;
use crate::record::{flags, RecordRef};

#[cfg(test)]
mod differential;
pub mod minimiser;
#[cfg(test)]
mod reference;
#[cfg(test)]
pub(crate) mod testrec;
#[cfg(test)]
mod tests;

/// What breaks ties between equal tag values (`samtools sort -t TAG`, with or
/// without `-n`/`-N`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagSecondary {
    /// `-t TAG`: coordinate order (§1.1).
    Coordinate,
    /// `-t TAG -n` (`natural`) or `-t TAG -N`: name plus flag key (§1.3, §1.4).
    Name { natural: bool },
}

/// The record orders samtools sort offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortOrder {
    /// Default order: (tid, pos, strand), unplaced reads last (§1.1).
    Coordinate,
    /// `-n` (`natural: true`, samtools `strnum_cmp`) or `-N` (`strcmp`).
    Name { natural: bool },
    /// `-t TAG`. `tag` is the argument as the user gave it; only its first two
    /// bytes are used and a shorter tag matches no record (§1.5).
    Tag {
        tag: Vec<u8>,
        secondary: TagSecondary,
    },
    /// `--template-coordinate` (§1.7).
    TemplateCoordinate,
    /// `-M` (§1.6): unplaced reads by minimiser, the others by coordinate.
    /// Writing such records changes them: see [`KeyEncoder::finish_record`].
    Minimiser(minimiser::Minimiser),
}

/// Why a record has no key. Only template-coordinate order can fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A paired read whose mate is mapped lacks `MC`.
    #[error("{} (read {read_name:?})", self.samtools_message())]
    MissingMateCigar { read_name: String },
    /// `MC` exists but is neither `Z` nor `H`.
    #[error("{} (read {read_name:?})", self.samtools_message())]
    MateCigarWrongType { read_name: String },
    /// `CB` exists but is neither `Z` nor `H`.
    #[error("{} (read {read_name:?})", self.samtools_message())]
    CellBarcodeWrongType { read_name: String },
    /// `MI` exists but is neither `Z` nor `H`.
    #[error("{} (read {read_name:?})", self.samtools_message())]
    MolecularIdWrongType { read_name: String },
    /// The sort tag's value runs past the end of the record (only possible
    /// for records that skipped validation).
    #[error("{tag} tag value truncated (read {read_name:?})")]
    TruncatedTag { tag: String, read_name: String },
}

impl KeyError {
    /// The text samtools 1.24 prints after `[bam_sort] error: ` for the same
    /// failure (strings in `bam_sort.c` `template_coordinate_key`, confirmed
    /// against the 1.24 binary).
    pub fn samtools_message(&self) -> &'static str {
        match self {
            KeyError::MissingMateCigar { .. } => {
                "no MC tag. Please run samtools fixmate on file first."
            }
            KeyError::MateCigarWrongType { .. } => {
                "MC tag wrong type. Please use the MC tag provided by samtools fixmate."
            }
            KeyError::CellBarcodeWrongType { .. } => "CB tag wrong type (not a string).",
            KeyError::MolecularIdWrongType { .. } => "MI tag wrong type (not a string).",
            KeyError::TruncatedTag { .. } => "aux tag value truncated",
        }
    }
}

/// Marks a digit run in natural-order name keys. It must lie in `'0'..='9'`:
/// where one name has a digit and the other a non-digit, `strnum_cmp`
/// compares the raw bytes, and every digit compares alike against a
/// non-digit (§1.3).
const DIGIT_RUN: u8 = b'0';

/// Tag classes, in samtools' order of normalised type bytes (§1.5):
/// missing < `A` < `B` < `H`/`Z` < numbers. Unknown type bytes (which
/// validation rejects) use their own byte, as samtools compares them.
const TAG_MISSING: u8 = 0x00;
const TAG_CHAR: u8 = b'A';
const TAG_ARRAY: u8 = b'B';
const TAG_STRING: u8 = b'H';
const TAG_NUMBER: u8 = b'c';

/// Template-coordinate defaults for an unmapped end (`template_coordinate_key`:
/// `INT32_MAX` and htslib's `HTS_POS_MAX`).
const TC_NO_TID: i32 = i32::MAX;
const TC_NO_POS: i64 = ((i32::MAX as i64) << 32) | i32::MAX as i64;

use crate::cigar::op::{HARD_CLIP as CIGAR_HARD_CLIP, SOFT_CLIP as CIGAR_SOFT_CLIP};

/// Turns records into sort keys for one order.
#[derive(Clone, Debug)]
pub struct KeyEncoder {
    order: SortOrder,
    /// The two tag bytes for [`SortOrder::Tag`]; `None` when the tag can
    /// match nothing.
    tag: Option<[u8; 2]>,
    /// Where unplaced reads (tid -1) go: after every reference.
    unplaced_tid: u64,
    /// `@RG ID` -> `LB`, first line wins (samtools `lookup_libraries`).
    libraries: HashMap<Vec<u8>, Vec<u8>>,
    /// Positions may exceed 32 bits (see [`KeyEncoder::with_wide_positions`]).
    wide: bool,
}

impl KeyEncoder {
    /// Builds the encoder. `n_ref` is the number of `@SQ` lines; `libraries`
    /// lists `(ID, LB)` for the `@RG` lines that have an `LB` tag, in header
    /// order (a read group without `LB` means library "").
    pub fn new(order: SortOrder, n_ref: usize, libraries: &[(Vec<u8>, Vec<u8>)]) -> Self {
        let tag = match &order {
            SortOrder::Tag { tag, .. } => match tag.as_slice() {
                [a, b, ..] if *a != 0 && *b != 0 => Some([*a, *b]),
                _ => None,
            },
            _ => None,
        };
        let mut map = HashMap::new();
        if order == SortOrder::TemplateCoordinate {
            for (id, lb) in libraries {
                map.entry(id.clone()).or_insert_with(|| lb.clone());
            }
        }
        // BAM stores n_ref as an i32 (§4.2), so this fits the key's 31 bits.
        let unplaced_tid = n_ref.min(i32::MAX as usize) as u64;
        KeyEncoder {
            order,
            tag,
            unplaced_tid,
            libraries: map,
            wide: false,
        }
    }

    /// Positions may exceed 32 bits: SAM records carry them in a
    /// `sam_parse::WIDE_TAG` field, and coordinates take 12 key bytes
    /// (tid, then 63 bits of position and strand) instead of 8, so the
    /// keys are no longer fixed-width. samtools sorts such input (a header
    /// with a reference longer than `i32::MAX`) SAM in, SAM out.
    pub fn with_wide_positions(mut self, wide: bool) -> Self {
        self.wide = wide;
        self
    }

    /// Whether positions may exceed 32 bits.
    pub fn wide_positions(&self) -> bool {
        self.wide
    }

    /// The order this encoder writes keys for.
    pub fn order(&self) -> &SortOrder {
        &self.order
    }

    /// True when every key is exactly 8 bytes (a big-endian u64), so the
    /// sort crate may radix-sort it.
    pub fn is_fixed8(&self) -> bool {
        self.order == SortOrder::Coordinate && !self.wide
    }

    /// Clears `out` and writes the key of `rec` into it.
    pub fn encode(&self, rec: RecordRef<'_>, out: &mut Vec<u8>) -> Result<(), KeyError> {
        out.clear();
        match &self.order {
            SortOrder::Coordinate => self.put_coordinate(rec, out),
            SortOrder::Name { natural } => put_name_key(rec, *natural, out),
            SortOrder::Tag { secondary, .. } => {
                put_tag_value(rec, self.tag, out)?;
                match secondary {
                    TagSecondary::Coordinate => self.put_coordinate(rec, out),
                    TagSecondary::Name { natural } => put_name_key(rec, *natural, out),
                }
            }
            SortOrder::TemplateCoordinate => self.put_template_coordinate(rec, out)?,
            SortOrder::Minimiser(m) => {
                if rec.ref_id() == -1 {
                    m.put_unplaced_key(rec, out);
                } else {
                    out.push(minimiser::CLASS_PLACED);
                    self.put_coordinate(rec, out);
                }
            }
        }
        Ok(())
    }

    /// True when records must pass through [`KeyEncoder::finish_record`]
    /// before they are written (minimiser order).
    pub fn rewrites_records(&self) -> bool {
        matches!(self.order, SortOrder::Minimiser(_))
    }

    /// The record as samtools writes it, given the key this encoder made for
    /// it. Minimiser order rewrites unplaced reads (`pos`, `mpos` -1,
    /// `isize` 0, reverse-complemented where their minimiser was on the
    /// reverse strand) into `scratch`; every other record is returned as it
    /// is. `framed` includes the 4-byte block size.
    pub fn finish_record<'a>(
        &self,
        key: &[u8],
        framed: &'a [u8],
        scratch: &'a mut Vec<u8>,
    ) -> &'a [u8] {
        match &self.order {
            SortOrder::Minimiser(_)
                if key.len() == minimiser::UNPLACED_KEY_LEN
                    && key[0] == minimiser::CLASS_UNPLACED =>
            {
                minimiser::rewrite_unplaced(key, framed, scratch);
                scratch
            }
            _ => framed,
        }
    }

    /// The coordinate key: 8 bytes, or 12 with wide positions.
    #[inline]
    fn put_coordinate(&self, rec: RecordRef<'_>, out: &mut Vec<u8>) {
        if !self.wide {
            out.extend_from_slice(&self.coordinate(rec).to_be_bytes());
            return;
        }
        let tid = match rec.ref_id() {
            t if t < 0 => self.unplaced_tid,
            t => t as u64,
        };
        let pos = crate::sam_parse::wide_positions(rec.bytes()).map_or(rec.pos() as i64, |w| w[0]);
        let pos1 = (pos + 1) as u64 & (u64::MAX >> 2);
        let rev = u64::from(rec.flag() & flags::REVERSE != 0);
        out.extend_from_slice(&(tid as u32).to_be_bytes());
        out.extend_from_slice(&(pos1 << 1 | rev).to_be_bytes());
    }

    /// `bam1_cmp_core`'s coordinate branch as one u64 (§1.1). samtools
    /// compares `(uint64_t)tid`, `(uint64_t)(pos+1)` and the strand; tid -1
    /// becomes `n_ref` as in its radix sort, and `(pos+1) as u32` keeps the
    /// same order as the u64 cast for every i32 `pos`.
    #[inline]
    fn coordinate(&self, rec: RecordRef<'_>) -> u64 {
        self.coordinate_of(rec.ref_id(), rec.pos(), rec.flag())
    }

    /// The 8-byte coordinate key (as a u64) of a record with these fields,
    /// for a caller that has them apart from the record (a reference id
    /// already translated into a merged header's terms).
    #[inline]
    pub fn coordinate_of(&self, ref_id: i32, pos: i32, flag: u16) -> u64 {
        let tid = match ref_id {
            t if t < 0 => self.unplaced_tid,
            t => t as u64,
        };
        let pos1 = (pos as i64 + 1) as u32 as u64;
        let rev = u64::from(flag & flags::REVERSE != 0);
        tid << 33 | pos1 << 1 | rev
    }

    /// `template_coordinate_key` plus `bam1_cmp_template_coordinate` (§1.7).
    fn put_template_coordinate(
        &self,
        rec: RecordRef<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        // The four tags the key reads, found in one pass over the aux data.
        let [mc, cb, mi, rg] = rec.aux().find_each([*b"MC", *b"CB", *b"MI", *b"RG"]);
        let fields = TemplateFields::from_tags(rec, mc, cb, mi)?;
        let library = match rg.and_then(|f| f.string()) {
            Some(id) => self.libraries.get(id).map(Vec::as_slice).unwrap_or(b""),
            None => b"",
        };
        // tids: samtools subtracts ints (`tid1 - tid2`, built with -fwrapv),
        // which overflows only for -1 against INT32_MAX, i.e. when an end
        // with tid -1 (a mate flagged mapped whose RNEXT is `*`, or a BAM
        // record not flagged unmapped on tid -1) meets an unmapped end. Its
        // comparator then answers "less" both ways; we use signed order.
        out.extend_from_slice(&signed32(fields.tid1));
        out.extend_from_slice(&signed32(fields.tid2));
        out.extend_from_slice(&signed64(fields.pos1));
        out.extend_from_slice(&signed64(fields.pos2));
        // Reverse strand first.
        out.push(u8::from(!fields.neg1));
        out.push(u8::from(!fields.neg2));
        put_cstr(library, out);
        put_cstr(fields.cell, out);
        put_molecular_id(fields.mid, out);
        put_cstr(rec.read_name(), out);
        out.push(u8::from(fields.upper));
        Ok(())
    }
}

/// The fields of a template-coordinate key other than library and name,
/// already normalised so that end 1 is the lower end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateFields<'a> {
    pub tid1: i32,
    pub tid2: i32,
    pub pos1: i64,
    pub pos2: i64,
    pub neg1: bool,
    pub neg2: bool,
    pub cell: &'a [u8],
    pub mid: &'a [u8],
    pub upper: bool,
}

impl<'a> TemplateFields<'a> {
    /// Computes the fields as samtools 1.24 does: 5' unclipped positions
    /// counting soft clips only (1.24 ignores hard clips; verified with
    /// `5H10M` vs `10M`), mate end from `MC`, `CB` and `MI` as strings,
    /// given what `rec.aux().find` returns for those three tags.
    fn from_tags(
        rec: RecordRef<'a>,
        mc: Option<Field<'a>>,
        cb: Option<Field<'a>>,
        mi: Option<Field<'a>>,
    ) -> Result<Self, KeyError> {
        let flag = rec.flag();
        let mut f = TemplateFields {
            tid1: TC_NO_TID,
            tid2: TC_NO_TID,
            pos1: TC_NO_POS,
            pos2: TC_NO_POS,
            neg1: false,
            neg2: false,
            cell: b"",
            mid: b"",
            upper: false,
        };
        if flag & flags::UNMAPPED == 0 {
            f.tid1 = rec.ref_id();
            f.neg1 = flag & flags::REVERSE != 0;
            f.pos1 = if f.neg1 {
                unclipped_end(rec)
            } else {
                unclipped_start(rec)
            };
        }
        if flag & flags::PAIRED != 0 && flag & flags::MATE_UNMAPPED == 0 {
            let cigar = match mc.map(|f| f.text()) {
                Some(Some(v)) => v,
                Some(None) => {
                    return Err(KeyError::MateCigarWrongType {
                        read_name: name_of(rec),
                    })
                }
                None => {
                    return Err(KeyError::MissingMateCigar {
                        read_name: name_of(rec),
                    })
                }
            };
            f.tid2 = rec.next_ref_id();
            f.neg2 = flag & flags::MATE_REVERSE != 0;
            let mpos = rec.next_pos() as i64;
            f.pos2 = if f.neg2 {
                mate_unclipped_end(mpos, cigar)
            } else {
                mate_unclipped_start(mpos, cigar)
            };
        }
        match cb.map(|f| f.text()) {
            Some(Some(v)) => f.cell = v,
            Some(None) => {
                return Err(KeyError::CellBarcodeWrongType {
                    read_name: name_of(rec),
                })
            }
            None => {}
        }
        match mi.map(|f| f.text()) {
            Some(Some(v)) => f.mid = v,
            Some(None) => {
                return Err(KeyError::MolecularIdWrongType {
                    read_name: name_of(rec),
                })
            }
            None => {}
        }
        let lower = f.tid1 < f.tid2
            || (f.tid1 == f.tid2 && f.pos1 < f.pos2)
            || (f.tid1 == f.tid2 && f.pos1 == f.pos2 && !f.neg1);
        if !lower {
            f.upper = true;
            std::mem::swap(&mut f.tid1, &mut f.tid2);
            std::mem::swap(&mut f.pos1, &mut f.pos2);
            std::mem::swap(&mut f.neg1, &mut f.neg2);
        }
        Ok(f)
    }
}

/// The name part of `-n`/`-N` keys: the name (natural or raw), a `0x00`
/// terminator, then the flag key.
fn put_name_key(rec: RecordRef<'_>, natural: bool, out: &mut Vec<u8>) {
    if natural {
        put_natural_name(rec.read_name(), out);
    } else {
        put_cstr(rec.read_name(), out);
    }
    out.extend_from_slice(&name_flag_key(rec.flag()).to_be_bytes());
}

/// Tie-break after equal names (samtools 1.20+, §1.3): R1/R2 bits first,
/// then primary < supplementary < secondary. Other bits are ignored.
#[inline]
pub(crate) fn name_flag_key(flag: u16) -> u16 {
    ((flag & 0xC0) << 8) | ((flag & 0x100) << 3) | ((flag & 0x800) >> 3)
}

/// Writes a name so that memcmp order equals `strnum_cmp` order (§1.3):
/// non-digit bytes as they are; each maximal digit run as [`DIGIT_RUN`], the
/// count of its significant digits (leading zeros dropped, since they never
/// count), and those digits; then `0x00`. Both keys stay aligned token by
/// token because equal prefixes hold the same token kinds, and names that
/// `strnum_cmp` calls equal ("a01", "a1") get identical bytes.
pub(crate) fn put_natural_name(name: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < name.len() {
        if name[i].is_ascii_digit() {
            let start = i;
            while i < name.len() && name[i].is_ascii_digit() {
                i += 1;
            }
            let run = &name[start..i];
            let first_sig = run.iter().position(|&d| d != b'0').unwrap_or(run.len());
            let digits = &run[first_sig..];
            out.push(DIGIT_RUN);
            // A read name has at most 255 bytes (`l_read_name` is a u8).
            out.push(digits.len().min(u8::MAX as usize) as u8);
            out.extend_from_slice(digits);
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    out.push(0);
}

/// The tag part of `-t` keys: class byte, then the value (§1.5).
fn put_tag_value(
    rec: RecordRef<'_>,
    tag: Option<[u8; 2]>,
    out: &mut Vec<u8>,
) -> Result<(), KeyError> {
    let Some(Field { ty, value: val, .. }) = tag.and_then(|t| rec.aux().find(t)) else {
        out.push(TAG_MISSING);
        return Ok(());
    };
    let truncated = || KeyError::TruncatedTag {
        tag: tag
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default(),
        read_name: name_of(rec),
    };
    let fixed = |n: usize| val.get(..n).ok_or_else(truncated);
    let number = match ty {
        b'A' => {
            out.push(TAG_CHAR);
            out.push(fixed(1)?[0]);
            return Ok(());
        }
        b'B' => {
            // Arrays are never compared by value: equal among themselves.
            out.push(TAG_ARRAY);
            return Ok(());
        }
        b'Z' | b'H' => {
            out.push(TAG_STRING);
            put_cstr(until_nul(val), out);
            return Ok(());
        }
        b'c' => fixed(1)?[0] as i8 as f64,
        b'C' => fixed(1)?[0] as f64,
        b's' => fixed(2).map(|b| i16::from_le_bytes([b[0], b[1]]))? as f64,
        b'S' => fixed(2).map(|b| u16::from_le_bytes([b[0], b[1]]))? as f64,
        b'i' => fixed(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))? as f64,
        b'I' => fixed(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))? as f64,
        b'f' => fixed(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))? as f64,
        b'd' => fixed(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))?,
        other => {
            out.push(other);
            return Ok(());
        }
    };
    out.push(TAG_NUMBER);
    out.extend_from_slice(&ordered_f64(number).to_be_bytes());
    Ok(())
}

/// Maps a double to a u64 whose unsigned order is numeric order. Every BAM
/// integer (at most 32 bits) is exact as a double, so ints and floats share
/// one scale, as samtools compares them (`bam_aux2f` for mixed pairs, int64
/// for int pairs: the same order). `-0.0` is folded into `0.0` (C `!=` sees
/// them equal). NaN: samtools answers "greater" for any comparison with a
/// NaN in either position, which no key can copy; we put NaN after +inf and
/// make all NaNs equal, so they fall to the secondary key.
#[inline]
pub(crate) fn ordered_f64(v: f64) -> u64 {
    let v = if v == 0.0 {
        0.0
    } else if v.is_nan() {
        f64::NAN
    } else {
        v
    };
    let bits = v.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// 1-based 5' start of a forward read: `pos+1` minus leading soft clips; hard
/// clips are skipped without counting (samtools `unclipped_start(b, 0)`).
pub(crate) fn unclipped_start(rec: RecordRef<'_>) -> i64 {
    let mut clipped = 0i64;
    for (op, len) in rec.cigar() {
        match op {
            CIGAR_SOFT_CLIP => clipped += len as i64,
            CIGAR_HARD_CLIP => {}
            _ => break,
        }
    }
    rec.pos() as i64 - clipped + 1
}

/// 1-based 5' end of a reverse read: htslib `bam_endpos` (a reference span of
/// 0 counts as 1) plus trailing soft clips (samtools `unclipped_end(b, 0)`).
pub(crate) fn unclipped_end(rec: RecordRef<'_>) -> i64 {
    let span = rec.reference_length().max(1);
    let mut clipped = 0i64;
    for (op, len) in rec.cigar().ops().rev() {
        match op {
            CIGAR_SOFT_CLIP => clipped += len as i64,
            CIGAR_HARD_CLIP => {}
            _ => break,
        }
    }
    rec.pos() as i64 + span + clipped
}

/// One step of samtools' walk over a CIGAR string: an optional number (a
/// missing one counts as 1; `strtol` saturates) and the byte after it, `None`
/// at the end of the string.
fn cigar_step(cigar: &[u8], i: &mut usize) -> (i64, Option<u8>) {
    let mut num = 1i64;
    if cigar[*i].is_ascii_digit() {
        num = 0;
        while let Some(d) = cigar.get(*i).filter(|d| d.is_ascii_digit()) {
            num = num.saturating_mul(10).saturating_add((d - b'0') as i64);
            *i += 1;
        }
    }
    (num, cigar.get(*i).copied())
}

/// The mate's 1-based 5' start from `MC` (samtools
/// `unclipped_other_start(mpos, MC, 0)`): leading `S` counted, `H` skipped,
/// anything else (or `*`, or the end) stops the walk.
pub(crate) fn mate_unclipped_start(mpos: i64, cigar: &[u8]) -> i64 {
    let mut clipped = 0i64;
    let mut i = 0;
    while i < cigar.len() && cigar[i] != b'*' {
        match cigar_step(cigar, &mut i) {
            (n, Some(b'S')) => clipped = clipped.wrapping_add(n),
            (_, Some(b'H')) => {}
            _ => break,
        }
        i += 1;
    }
    mpos.wrapping_sub(clipped).wrapping_add(1)
}

/// The mate's 1-based 5' end from `MC` (samtools
/// `unclipped_other_end(mpos, MC, 0)`): reference-consuming ops plus `S`
/// after the first of them; `H` never counts. samtools reads past the string
/// when it ends in a bare number; we stop there.
pub(crate) fn mate_unclipped_end(mpos: i64, cigar: &[u8]) -> i64 {
    let mut refpos = 0i64;
    let mut leading = true;
    let mut i = 0;
    while i < cigar.len() && cigar[i] != b'*' {
        match cigar_step(cigar, &mut i) {
            (n, Some(b'M' | b'D' | b'N' | b'=' | b'X')) => {
                refpos = refpos.wrapping_add(n);
                leading = false;
            }
            (n, Some(b'S')) if !leading => refpos = refpos.wrapping_add(n),
            (_, Some(_)) => {}
            (_, None) => break,
        }
        i += 1;
    }
    mpos.wrapping_add(refpos)
}

/// `MI` as samtools compares it (`template_coordinate_key_compare_mid`): a
/// trailing "/X" (one byte after '/') dropped, bytes compared as x86-64's
/// signed `char`, a prefix first. Each byte maps to one byte that keeps
/// signed order and is never 0 (NUL cannot occur inside the value, so
/// `b ^ 0x80` never yields 0x80 and the values below it can move up by one),
/// leaving `0x00` free as the terminator.
pub(crate) fn put_molecular_id(mid: &[u8], out: &mut Vec<u8>) {
    let len = mid.len();
    let body = if len >= 2 && mid[len - 2] == b'/' {
        &mid[..len - 2]
    } else {
        mid
    };
    out.extend(body.iter().map(|&b| {
        let u = b ^ 0x80;
        if u < 0x80 {
            u + 1
        } else {
            u
        }
    }));
    out.push(0);
}

/// A NUL-free string followed by its `0x00` terminator (`strcmp` order).
#[inline]
fn put_cstr(s: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(s);
    out.push(0);
}

/// i32 in 4 bytes whose unsigned order is signed order.
#[inline]
fn signed32(v: i32) -> [u8; 4] {
    ((v as u32) ^ 0x8000_0000).to_be_bytes()
}

/// i64 in 8 bytes whose unsigned order is signed order.
#[inline]
fn signed64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// An aux `Z`/`H` value up to its NUL (or the end of the aux area).
#[inline]
fn until_nul(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    &v[..end]
}

fn name_of(rec: RecordRef<'_>) -> String {
    String::from_utf8_lossy(rec.read_name()).into_owned()
}
