//! Turns one SAM text line into the BAM record htslib 1.24 would write for
//! it (`sam_parse1` followed by `bam_write1`), byte for byte, so SAM input
//! can be sorted and written as BAM without htslib.
//!
//! The parser mirrors htslib's leniencies because they decide the bytes:
//! `+`/empty numbers, hex/octal FLAG, junk after a scalar aux value, an
//! unknown RNAME/RNEXT (treated as `*` with the read made unmapped), POS 0
//! on a placed read (made unplaced and unmapped), integer tags stored in the
//! smallest type, B arrays retyped on overflow, `CG:B:I` moved into the
//! CIGAR and back out for CIGARs longer than 65535 operations. htslib's
//! warnings are not reproduced; its errors are. Differences: a NUL byte ends
//! the line, and a `B:A` array (which htslib stores but cannot print) is
//! rejected.
//!
//! `parse_into` is one function of about 200 lines on purpose: it walks the
//! line's eleven mandatory fields once, in `sam_parse1`'s order, each
//! field's leniency beside the bytes it writes (the FLAG, CIGAR and aux
//! parsers are functions of their own).

use crate::header::{Header, RefLookup};
use crate::record::{flags, reg2bin, FIXED_LEN};

#[path = "sam_parse_num.rs"]
mod num;
use num::{str2int, str2uint, strtod};

/// htslib's `HTS_POS_MAX`: ((int64)INT32_MAX << 32) | INT32_MAX.
const HTS_POS_MAX: i64 = ((i32::MAX as i64) << 32) | i32::MAX as i64;
/// Longest QNAME htslib accepts (`sam_parse1`: length with NUL <= 255).
const MAX_QNAME_LEN: usize = 254;
/// CIGAR operation letters in BAM op-code order (htslib `BAM_CIGAR_STR`).
pub(crate) use crate::cigar::OP_LETTERS as CIGAR_OPS;
/// Most CIGAR operations a BAM `n_cigar_op` field holds (SAM spec §4.2.2).
const MAX_BAM_CIGAR_OPS: usize = 0xffff;
/// CIGAR operation codes (SAM spec §4.2).
const OP_SOFT_CLIP: u32 = 4;
const OP_REF_SKIP: u32 = 3;

/// Why a SAM line was rejected; the messages follow htslib's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SamError {
    #[error("too few fields: no tab after {0}")]
    MissingField(&'static str),
    #[error("malformed {0} field")]
    BadNumber(&'static str),
    #[error("number outside allowed range")]
    OutOfRange,
    #[error("query name too long")]
    NameTooLong,
    #[error("no SQ lines present in the header")]
    NoReferences,
    #[error("CIGAR: {0}")]
    BadCigar(&'static str),
    #[error("read ends beyond highest supported position")]
    EndTooLarge,
    #[error("CIGAR and query sequence are of different length")]
    CigarSeqMismatch,
    #[error("SEQ and QUAL are of different length")]
    QualLength,
    #[error("invalid QUAL character")]
    BadQual,
    #[error("aux field: {0}")]
    Aux(&'static str),
    #[error("positional data is too large for BAM format")]
    PositionTooLarge,
}

/// A SAM line as C sees it: reading past the end yields NUL.
struct Line<'a>(&'a [u8]);

impl Line<'_> {
    #[inline]
    fn at(&self, i: usize) -> u8 {
        self.0.get(i).copied().unwrap_or(0)
    }
    /// `_read_token`: the bytes up to the next tab, and the index after it.
    fn token(&self, p: usize, field: &'static str) -> Result<(&[u8], usize), SamError> {
        let rest = self.0.get(p..).unwrap_or_default();
        match rest.iter().position(|&b| b == b'\t') {
            Some(t) => Ok((&rest[..t], p + t + 1)),
            None => Err(SamError::MissingField(field)),
        }
    }
    /// Requires a tab at `p` (htslib's `if (*p++ != '\t') goto err`).
    fn tab(&self, p: usize, field: &'static str) -> Result<usize, SamError> {
        if self.at(p) == b'\t' {
            Ok(p + 1)
        } else {
            Err(SamError::BadNumber(field))
        }
    }
}

/// htslib's `seq_nt16_table`: ASCII -> 4-bit base code (`=ACMGRSVTWYHKDBN`),
/// case-insensitive, `U` as `T`, '0'..'3' as 1, 2, 4, 8, anything else N.
const fn nt16_table() -> [u8; 256] {
    let mut t = [15u8; 256];
    let codes = crate::record::NT16_STR;
    let mut i = 0;
    while i < 16 {
        t[codes[i] as usize] = i as u8;
        t[codes[i].to_ascii_lowercase() as usize] = i as u8;
        i += 1;
    }
    t[b'U' as usize] = 8;
    t[b'u' as usize] = 8;
    t[b'0' as usize] = 1;
    t[b'1' as usize] = 2;
    t[b'2' as usize] = 4;
    t[b'3' as usize] = 8;
    t
}
static NT16: [u8; 256] = nt16_table();

/// Parses one SAM alignment line (without its newline) and appends the BAM
/// record, including its 4-byte `block_size`, to `out`. On error `out` is
/// left as it was.
pub fn parse_sam_record(
    line: &[u8],
    header: &Header,
    refs: &RefLookup,
    out: &mut Vec<u8>,
) -> Result<(), SamError> {
    parse_sam_record_with(line, header, refs, false, out)
}

/// The private aux field that carries a record's 64-bit POS, PNEXT and
/// TLEN when one of them does not fit BAM's 32 bits (`wide` parsing, for
/// inputs whose header has a reference longer than `i32::MAX`, as samtools
/// sorts them: SAM in, SAM out). Its tag cannot come from SAM text (tags
/// there are alphanumeric); it is always the record's last aux field,
/// `B:i` with 6 elements (each value as low, high 32 bits), and the SAM
/// formatter prints the values in place of the 32-bit fields and drops it.
pub const WIDE_TAG: [u8; 2] = [0xff, b'P'];
/// Bytes of the field: tag, `B`, `i`, count, 6 x i32.
pub const WIDE_FIELD_LEN: usize = 8 + 24;

/// The 64-bit `[pos, next_pos, tlen]` of a record (without its
/// `block_size`) that carries them (see [`WIDE_TAG`]).
#[inline]
pub fn wide_positions(data: &[u8]) -> Option<[i64; 3]> {
    if data.len() < FIXED_LEN + WIDE_FIELD_LEN {
        return None;
    }
    let f = &data[data.len() - WIDE_FIELD_LEN..];
    if f[..8] != [WIDE_TAG[0], WIDE_TAG[1], b'B', b'i', 6, 0, 0, 0] {
        return None;
    }
    let v = |i: usize| {
        let at = 8 + 8 * i;
        i64::from_le_bytes(f[at..at + 8].try_into().expect("8 bytes"))
    };
    let w = [v(0), v(1), v(2)];
    // Only the parser's own field: the 32-bit fields hold the clamped
    // values and one value needs more than 32 bits (a BAM input cannot
    // pass for it by accident).
    let fixed = |at: usize| i32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    let clamp = |x: i64| x.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
    let consistent =
        fixed(4) == clamp(w[0]) && fixed(24) == clamp(w[1]) && fixed(28) == clamp(w[2]);
    let needed = w.iter().any(|&x| x != clamp(x) as i64);
    (consistent && needed).then_some(w)
}

/// [`parse_sam_record`]; with `wide`, a POS, PNEXT or TLEN beyond 32 bits
/// is kept in a [`WIDE_TAG`] field instead of refused.
pub fn parse_sam_record_with(
    line: &[u8],
    header: &Header,
    refs: &RefLookup,
    wide: bool,
    out: &mut Vec<u8>,
) -> Result<(), SamError> {
    let start = out.len();
    let result = parse_into(line, header, refs, wide, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn parse_into(
    line: &[u8],
    header: &Header,
    refs: &RefLookup,
    wide: bool,
    out: &mut Vec<u8>,
) -> Result<(), SamError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let s = Line(line);
    let mut overflow = false;

    let (qname, mut p) = s.token(0, "QNAME")?;
    if qname.len() > MAX_QNAME_LEN {
        return Err(SamError::NameTooLong);
    }
    let (flag, q) = parse_flag(&s, p, &mut overflow);
    let mut flag = flag;
    p = s.tab(q, "FLAG")?;

    let (rname, q) = s.token(p, "RNAME")?;
    p = q;
    let mut tid = -1;
    if rname != b"*" {
        if header.n_ref() == 0 {
            return Err(SamError::NoReferences);
        }
        tid = refs.get(rname).unwrap_or(-1);
    }
    let (pos1, q) = str2uint(&s, p, 62, &mut overflow);
    let pos = pos1 as i64 - 1;
    p = s.tab(q, "POS")?;
    if pos < 0 && tid >= 0 {
        tid = -1;
    }
    if tid < 0 {
        flag |= flags::UNMAPPED as u32;
    }
    let (mapq, q) = str2uint(&s, p, 8, &mut overflow);
    p = s.tab(q, "MAPQ")?;

    let mut cigar: Vec<u32> = Vec::new();
    let ref_span;
    if s.at(p) != b'*' {
        p = parse_cigar(&s, p, &mut cigar)?;
        p = s.tab(p, "CIGAR")?;
        let rlen = if flag & flags::UNMAPPED as u32 == 0 {
            ref_len(&cigar)
        } else {
            1
        };
        ref_span = rlen.max(1);
    } else {
        flag |= flags::UNMAPPED as u32;
        p = s.token(p, "CIGAR")?.1;
        ref_span = 1;
    }
    if HTS_POS_MAX - ref_span <= pos {
        return Err(SamError::EndTooLarge);
    }
    let mut bin = reg2bin(pos, pos + ref_span);

    let (rnext, q) = s.token(p, "RNEXT")?;
    p = q;
    let mut mtid = match rnext {
        b"=" => tid,
        b"*" => -1,
        name => refs.get(name).unwrap_or(-1),
    };
    let (mpos1, q) = str2uint(&s, p, 62, &mut overflow);
    let mpos = mpos1 as i64 - 1;
    p = s.tab(q, "PNEXT")?;
    if mpos < 0 && mtid >= 0 {
        mtid = -1;
    }
    let (tlen, q) = str2int(&s, p, 63, &mut overflow);
    p = s.tab(q, "TLEN")?;
    if overflow {
        return Err(SamError::OutOfRange);
    }

    let (seq, q) = s.token(p, "SEQ")?;
    p = q;
    let seq: &[u8] = if seq == b"*" { b"" } else { seq };
    if seq.len() > i32::MAX as usize {
        return Err(SamError::OutOfRange);
    }
    // Checked only when SEQ is present (`sam_parse1`).
    if !seq.is_empty() && !cigar.is_empty() && query_len(&cigar) != seq.len() as u64 {
        return Err(SamError::CigarSeqMismatch);
    }

    // Fixed part is filled in at the end; reserve block_size + 32 bytes.
    out.extend_from_slice(&[0u8; 4 + FIXED_LEN]);
    let body = out.len() - FIXED_LEN;
    out.extend_from_slice(qname);
    out.push(0);
    let cigar_at = out.len();
    for op in &cigar {
        out.extend_from_slice(&op.to_le_bytes());
    }
    for pair in seq.chunks(2) {
        let hi = NT16[pair[0] as usize] << 4;
        out.push(hi | pair.get(1).map_or(0, |&b| NT16[b as usize]));
    }
    if s.at(p) == b'*' && matches!(s.at(p + 1), b'\t' | 0) {
        out.extend(std::iter::repeat_n(0xffu8, seq.len()));
        p += 2;
    } else {
        let qual = line.get(p..p + seq.len()).ok_or(SamError::QualLength)?;
        if !matches!(s.at(p + seq.len()), b'\t' | 0) {
            return Err(SamError::QualLength);
        }
        let mut bad = 0u8;
        for &c in qual {
            let v = c.wrapping_sub(33);
            bad |= v;
            out.push(v);
        }
        if bad & 0x80 != 0 {
            return Err(SamError::BadQual);
        }
        p += seq.len() + 1;
    }
    let aux_at = out.len();
    parse_aux(&s, p, out)?;

    let l_seq = seq.len() as u32;
    if let Some(real) = cg_cigar(&out[aux_at..], &cigar, l_seq, tid, pos) {
        // bam_tag2cigar(b, 1, 1): the CG:B:I tag becomes the CIGAR.
        let (cg_at, cg_len, ops) = real;
        let cg_at = aux_at + cg_at;
        out.drain(cg_at..cg_at + cg_len);
        out.splice(
            cigar_at..cigar_at + 4 * cigar.len(),
            ops.iter().flat_map(|o| o.to_le_bytes()),
        );
        cigar = ops;
        let end = pos
            + if flag & flags::UNMAPPED as u32 == 0 {
                ref_len(&cigar).max(1)
            } else {
                1
            };
        bin = reg2bin(pos, end);
    }
    let too_wide = pos > i32::MAX as i64
        || mpos > i32::MAX as i64
        || tlen < i32::MIN as i64
        || tlen > i32::MAX as i64;
    if too_wide && !wide {
        return Err(SamError::PositionTooLarge);
    }
    let mut n_cigar = cigar.len();
    if n_cigar > MAX_BAM_CIGAR_OPS {
        // bam_write1: a placeholder `<l_seq>S<rlen>N` CIGAR, the real one in
        // a CG:B:I tag at the end of the aux data.
        let rlen = ref_len(&cigar);
        if rlen >= 1 << 28 {
            return Err(SamError::BadCigar(
                "reference length too long for a BAM CG tag",
            ));
        }
        let placeholder = [l_seq << 4 | OP_SOFT_CLIP, (rlen as u32) << 4 | OP_REF_SKIP];
        out.splice(
            cigar_at..cigar_at + 4 * n_cigar,
            placeholder.iter().flat_map(|o| o.to_le_bytes()),
        );
        out.extend_from_slice(b"CGBI");
        out.extend_from_slice(&(n_cigar as u32).to_le_bytes());
        out.extend(cigar.iter().flat_map(|o| o.to_le_bytes()));
        n_cigar = 2;
    }

    if too_wide {
        out.extend_from_slice(&[WIDE_TAG[0], WIDE_TAG[1], b'B', b'i', 6, 0, 0, 0]);
        for v in [pos, mpos, tlen] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let clamp = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
    let fixed = &mut out[body..body + FIXED_LEN];
    fixed[0..4].copy_from_slice(&tid.to_le_bytes());
    fixed[4..8].copy_from_slice(&clamp(pos).to_le_bytes());
    fixed[8] = (qname.len() + 1) as u8;
    fixed[9] = mapq as u8;
    fixed[10..12].copy_from_slice(&bin.to_le_bytes());
    fixed[12..14].copy_from_slice(&(n_cigar as u16).to_le_bytes());
    fixed[14..16].copy_from_slice(&(flag as u16).to_le_bytes());
    fixed[16..20].copy_from_slice(&l_seq.to_le_bytes());
    fixed[20..24].copy_from_slice(&mtid.to_le_bytes());
    fixed[24..28].copy_from_slice(&clamp(mpos).to_le_bytes());
    fixed[28..32].copy_from_slice(&clamp(tlen).to_le_bytes());
    let block_size = (out.len() - body) as u32;
    out[body - 4..body].copy_from_slice(&block_size.to_le_bytes());
    Ok(())
}

/// htslib's `parse_sam_flag`: decimal, or after a leading '0' C `strtoul`
/// base 0 (hex `0x..`, octal); anything else reads as 0 without moving.
fn parse_flag(s: &Line, p: usize, overflow: &mut bool) -> (u32, usize) {
    match s.at(p) {
        b'1'..=b'9' => {
            let (v, e) = str2uint(s, p, 16, overflow);
            (v as u32, e)
        }
        b'0' if s.at(p + 1) == b'\t' => (0, p + 1),
        b'0' => {
            let (hex, mut i) =
                if matches!(s.at(p + 1), b'x' | b'X') && s.at(p + 2).is_ascii_hexdigit() {
                    (true, p + 2)
                } else {
                    (false, p + 1)
                };
            let radix = if hex { 16 } else { 8 };
            let mut v: u64 = 0;
            while let Some(d) = (s.at(i) as char).to_digit(radix) {
                v = v.saturating_mul(radix as u64).saturating_add(d as u64);
                i += 1;
            }
            if v > 65535 {
                *overflow = true;
                return (65535, i);
            }
            (v as u32, i)
        }
        _ => (0, p),
    }
}

/// htslib's `bam_parse_cigar`: as many operations as there are non-digit
/// bytes before the tab, each a decimal length (< 2^28) and an op letter.
fn parse_cigar(s: &Line, mut p: usize, cigar: &mut Vec<u32>) -> Result<usize, SamError> {
    let field = s.0.get(p..).unwrap_or_default();
    let field = &field[..field
        .iter()
        .position(|&b| b == b'\t')
        .unwrap_or(field.len())];
    let n = field.iter().filter(|b| !b.is_ascii_digit()).count();
    if n == 0 {
        return Err(SamError::BadCigar("no CIGAR operations"));
    }
    cigar.reserve(n);
    for _ in 0..n {
        let mut overflow = false;
        let (len, q) = str2uint(s, p, 28, &mut overflow);
        if q == p {
            return Err(SamError::BadCigar("CIGAR length invalid"));
        }
        if overflow {
            return Err(SamError::BadCigar("CIGAR length too long"));
        }
        let op = CIGAR_OPS
            .iter()
            .position(|&c| c == s.at(q))
            .ok_or(SamError::BadCigar("unrecognized CIGAR operator"))?;
        cigar.push((len as u32) << 4 | op as u32);
        p = q + 1;
    }
    Ok(p)
}

fn ref_len(cigar: &[u32]) -> i64 {
    crate::cigar::reference_length(cigar.iter().map(|&c| crate::cigar::unpack(c)))
}

fn query_len(cigar: &[u32]) -> u64 {
    crate::cigar::query_length(cigar.iter().map(|&c| crate::cigar::unpack(c)))
}

/// `bam_tag2cigar`'s test: the CIGAR starts with `<l_seq>S`, the read is
/// placed, and a `CG:B:I`/`CG:B:i` tag holds at least as many operations.
/// Returns (offset of the CG field in `aux`, its byte length, the operations).
fn cg_cigar(
    aux: &[u8],
    cigar: &[u32],
    l_seq: u32,
    tid: i32,
    pos: i64,
) -> Option<(usize, usize, Vec<u32>)> {
    if cigar.first() != Some(&(l_seq << 4 | OP_SOFT_CLIP)) || tid < 0 || pos < 0 {
        return None;
    }
    let rec_aux_at = aux_field(aux, *b"CG")?;
    let val = &aux[rec_aux_at + 3..];
    if aux[rec_aux_at + 2] != b'B' || !matches!(val.first(), Some(b'I' | b'i')) {
        return None;
    }
    let n = u32::from_le_bytes([val[1], val[2], val[3], val[4]]);
    if (n as usize) < cigar.len() || n >= 1 << 29 {
        return None;
    }
    let ops = val[5..5 + 4 * n as usize]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((rec_aux_at, 8 + 4 * n as usize, ops))
}

/// Offset of the first aux field named `tag` in well-formed aux bytes.
fn aux_field(aux: &[u8], tag: [u8; 2]) -> Option<usize> {
    crate::Aux::new(aux).find(tag).map(|f| f.offset)
}

/// `aux_parse(.., lenient = 0)`: TAG, a separator, TYPE, a separator, value;
/// junk after a scalar value up to the next tab is skipped.
fn parse_aux(s: &Line, mut q: usize, out: &mut Vec<u8>) -> Result<(), SamError> {
    let end = s.0.len();
    let mut overflow = false;
    // C compares `char`, signed on x86: bytes >= 0x80 are negative.
    let signed = |b: u8| b as i8;
    while q < end {
        if end - q < 5 {
            return Err(SamError::Aux("incomplete aux field"));
        }
        if signed(s.at(q)) < b'!' as i8 || signed(s.at(q + 1)) < b'!' as i8 {
            return Err(SamError::Aux("invalid aux tag id"));
        }
        out.extend_from_slice(&s.0[q..q + 2]);
        let ty = s.at(q + 3);
        q += 5;
        if ty != b'Z' && ty != b'H' && signed(s.at(q)) <= b'\t' as i8 {
            return Err(SamError::Aux("incomplete aux field"));
        }
        match ty {
            b'A' | b'a' | b'c' | b'C' => {
                out.extend_from_slice(&[b'A', s.at(q)]);
                q += 1;
            }
            b'i' | b'I' if s.at(q) == b'-' => {
                let (x, e) = str2int(s, q, 32, &mut overflow);
                q = e;
                if x >= i8::MIN as i64 {
                    out.extend_from_slice(&[b'c', x as u8]);
                } else if x >= i16::MIN as i64 {
                    out.push(b's');
                    out.extend_from_slice(&(x as i16).to_le_bytes());
                } else {
                    out.push(b'i');
                    out.extend_from_slice(&(x as i32).to_le_bytes());
                }
            }
            b'i' | b'I' => {
                let (x, e) = str2uint(s, q, 32, &mut overflow);
                q = e;
                if x <= u8::MAX as u64 {
                    out.extend_from_slice(&[b'C', x as u8]);
                } else if x <= u16::MAX as u64 {
                    out.push(b'S');
                    out.extend_from_slice(&(x as u16).to_le_bytes());
                } else {
                    out.push(b'I');
                    out.extend_from_slice(&(x as u32).to_le_bytes());
                }
            }
            b'f' => {
                let (v, e) = strtod(s, q);
                q = e;
                out.push(b'f');
                out.extend_from_slice(&(v as f32).to_le_bytes());
            }
            b'd' => {
                let (v, e) = strtod(s, q);
                q = e;
                out.push(b'd');
                out.extend_from_slice(&v.to_le_bytes());
            }
            b'Z' | b'H' => {
                let rest = &s.0[q.min(end)..];
                let len = rest.iter().position(|&b| b == b'\t').unwrap_or(rest.len());
                if ty == b'H' && len % 2 != 0 {
                    return Err(SamError::Aux(
                        "hex field does not have an even number of digits",
                    ));
                }
                out.push(ty);
                out.extend_from_slice(&rest[..len]);
                out.push(0);
                q += len;
            }
            b'B' => {
                let sub = s.at(q);
                q += 1;
                if !matches!(s.at(q), 0 | b',' | b'\t') {
                    return Err(SamError::Aux("B aux field type not followed by ','"));
                }
                q = parse_b_array(s, sub, q, out)?;
            }
            _ => return Err(SamError::Aux("unrecognized type")),
        }
        while signed(s.at(q)) > b'\t' as i8 {
            q += 1;
        }
        q += 1;
    }
    if overflow {
        return Err(SamError::Aux("numeric value out of allowed range"));
    }
    Ok(())
}

/// `sam_parse_B_vals_r`: ",v,v,..." after the element type, ending at a tab
/// or the end of the line. When a value does not fit the given type, htslib
/// retries once with the smallest type that holds the range (unsigned only
/// when `max < 255`, `max <= 65535`, `max <= u32::MAX`, as it does).
fn parse_b_array(
    s: &Line,
    mut sub: u8,
    start: usize,
    out: &mut Vec<u8>,
) -> Result<usize, SamError> {
    // C compares `char`, signed on x86.
    let skip_to_comma = |mut q: usize| {
        while (s.at(q) as i8) > b'\t' as i8 && s.at(q) != b',' {
            q += 1;
        }
        q
    };
    for _attempt in 0..2 {
        if sub == b'A' {
            return Err(SamError::Aux("B:A arrays cannot be printed as SAM"));
        }
        if !matches!(sub, b'c' | b'C' | b's' | b'S' | b'i' | b'I' | b'f') {
            return Err(SamError::Aux("unrecognized B array type"));
        }
        let orig = out.len();
        out.extend_from_slice(&[b'B', sub, 0, 0, 0, 0]);
        let (mut q, mut n, mut overflow) = (start, 0u32, false);
        while s.at(q) == b',' {
            n = n.wrapping_add(1);
            let unsigned_bits = match sub {
                b'C' => 8,
                b'S' => 16,
                b'I' => 32,
                _ => 0,
            };
            if unsigned_bits > 0 && s.at(q + 1) == b'-' {
                overflow = true;
                q = skip_to_comma(q + 1);
                continue;
            }
            q = match sub {
                b'f' => {
                    let (v, e) = strtod(s, q + 1);
                    out.extend_from_slice(&(v as f32).to_le_bytes());
                    e
                }
                b'C' | b'S' | b'I' => {
                    let (v, e) = str2uint(s, q + 1, unsigned_bits, &mut overflow);
                    out.extend_from_slice(&v.to_le_bytes()[..unsigned_bits as usize / 8]);
                    e
                }
                _ => {
                    let bits = match sub {
                        b'c' => 8,
                        b's' => 16,
                        _ => 32,
                    };
                    let (v, e) = str2int(s, q + 1, bits, &mut overflow);
                    out.extend_from_slice(&v.to_le_bytes()[..bits as usize / 8]);
                    e
                }
            };
        }
        if !matches!(s.at(q), b'\t' | 0) {
            return Err(SamError::Aux("malformed B array"));
        }
        if !overflow {
            out[orig + 2..orig + 6].copy_from_slice(&n.to_le_bytes());
            return Ok(q);
        }
        out.truncate(orig);
        let (end, mut r, mut min, mut max, mut wide) = (q, start, 0i64, 0i64, false);
        while r < end {
            let (v, e) = str2int(s, r + 1, 64, &mut wide);
            min = min.min(v);
            max = max.max(v);
            r = skip_to_comma(e);
        }
        sub = match (min, max) {
            _ if wide => 0,
            (i64::MIN..=-1, _) if min >= i8::MIN as i64 && max <= i8::MAX as i64 => b'c',
            (i64::MIN..=-1, _) if min >= i16::MIN as i64 && max <= i16::MAX as i64 => b's',
            (i64::MIN..=-1, _) if min >= i32::MIN as i64 && max <= i32::MAX as i64 => b'i',
            (i64::MIN..=-1, _) => 0,
            _ if max < u8::MAX as i64 => b'C',
            _ if max <= u16::MAX as i64 => b'S',
            _ if max <= u32::MAX as i64 => b'I',
            _ => 0,
        };
        if sub == 0 {
            return Err(SamError::Aux(
                "numeric value in B array out of allowed range",
            ));
        }
    }
    Err(SamError::Aux("malformed data in B array"))
}

#[cfg(test)]
#[path = "sam_parse_tests.rs"]
mod tests;

#[cfg(test)]
mod wide_tests {
    use super::*;
    use crate::header::parse_sam_header;
    use crate::keys::{KeyEncoder, SortOrder};
    use crate::sam_format::format_sam_record;
    use crate::RecordRef;

    #[test]
    fn wide_positions_round_trip_and_order() {
        let h = parse_sam_header([&b"@SQ\tSN:c\tLN:20000000000"[..]]).unwrap();
        let refs = h.ref_lookup();
        let line = b"r\t1\tc\t10000000002\t1\t5M\t=\t3000000000\t-7000000002\tACGTA\tIIIII\tNM:i:0";
        let mut rec = Vec::new();
        assert_eq!(
            parse_sam_record(line, &h, &refs, &mut rec),
            Err(SamError::PositionTooLarge)
        );
        parse_sam_record_with(line, &h, &refs, true, &mut rec).unwrap();
        assert_eq!(
            wide_positions(&rec[4..]),
            Some([10000000001, 2999999999, -7000000002])
        );
        let mut out = Vec::new();
        format_sam_record(RecordRef::with_block_size(&rec), &h, &mut out);
        assert_eq!(out, [&line[..], b"\n"].concat());
        // The key orders by the 64-bit position, beyond 2^32.
        let enc = KeyEncoder::new(SortOrder::Coordinate, 1, &[]).with_wide_positions(true);
        assert!(!enc.is_fixed8());
        let mut small = Vec::new();
        let line2 = b"s\t0\tc\t4294967297\t1\t5M\t*\t0\t0\tACGTA\tIIIII";
        parse_sam_record_with(line2, &h, &refs, true, &mut small).unwrap();
        let (mut ka, mut kb) = (Vec::new(), Vec::new());
        enc.encode(RecordRef::with_block_size(&small), &mut ka)
            .unwrap();
        enc.encode(RecordRef::with_block_size(&rec), &mut kb)
            .unwrap();
        assert!(ka < kb);
    }
}
