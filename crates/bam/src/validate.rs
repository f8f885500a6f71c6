//! Checks one BAM record's bytes before anything indexes into them, so that
//! `RecordRef` accessors can slice without re-checking and a corrupt input is
//! reported with its cause instead of panicking or mis-sorting.
//!
//! The checks follow what htslib's `bam_read1` / `sam_read1` reject (block
//! size, `l_read_name >= 1`, lengths that overrun the block, negative
//! `l_seq`, `refID`/`next_refID` outside `-1..n_ref`, CIGAR and SEQ lengths
//! that disagree on a mapped read), plus what the SAM formatter needs
//! (well-formed aux fields). Like htslib, any `pos` and `next_pos` is read.
//! Where htslib is more lenient, it is noted at the check.

pub use crate::aux::AuxProblem;
use crate::cigar::{self, Cigar};
use crate::record::{flags, reg2bin, FIXED_LEN};

/// Largest `block_size` htslib accepts: it reads the field as an `int32_t`
/// (`bam_read1`), so anything above `i32::MAX` is negative there and rejected.
pub const MAX_BLOCK_SIZE: u32 = i32::MAX as u32;

/// What is wrong with a record. The CLI adds file, offset and record number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    // Shown as htslib reads it, a signed 32-bit value, so a negative size
    // reads as negative rather than as a 4-billion-byte record.
    #[error("block_size {} is outside 32..={MAX_BLOCK_SIZE}", *.0 as i32)]
    BlockSize(u32),
    #[error("record is {0} bytes, shorter than the 32-byte fixed part")]
    TooShort(usize),
    #[error("l_read_name is 0 (the read name needs at least its NUL)")]
    EmptyReadName,
    #[error("read name is not NUL-terminated at byte l_read_name-1")]
    ReadNameNotTerminated,
    #[error("l_seq {} is negative (a signed 32-bit field)", *.0 as i32)]
    NegativeSeqLength(u32),
    #[error("read name, CIGAR, SEQ and QUAL need {needed} bytes but the record has {available}")]
    Overrun { needed: u64, available: usize },
    #[error("{field} {value} is outside -1..{n_ref}")]
    RefIdOutOfRange {
        field: &'static str,
        value: i32,
        n_ref: usize,
    },
    #[error("CIGAR covers {cigar} query bases but l_seq is {l_seq}")]
    CigarSeqMismatch { cigar: u64, l_seq: usize },
    #[error("aux field at aux byte {offset}: {problem}")]
    Aux { offset: usize, problem: AuxProblem },
    #[error("CIGAR with {n_cigar} operations covers {ref_len} reference bases, too many for BAM's CG tag")]
    LongCigarTooLong { n_cigar: usize, ref_len: i64 },
}

/// Validates a `block_size` prefix and returns the record length it announces.
pub fn read_block_size(bytes: [u8; 4]) -> Result<usize, RecordError> {
    let v = u32::from_le_bytes(bytes);
    if !(FIXED_LEN as u32..=MAX_BLOCK_SIZE).contains(&v) {
        return Err(RecordError::BlockSize(v));
    }
    Ok(v as usize)
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Validates one record (the bytes after `block_size`) against a header with
/// `n_ref` references. On success `RecordRef::new(rec)` is safe to use.
pub fn validate_record(rec: &[u8], n_ref: usize) -> Result<(), RecordError> {
    if rec.len() < FIXED_LEN {
        return Err(RecordError::TooShort(rec.len()));
    }
    let l_read_name = rec[8] as usize;
    let n_cigar = u16::from_le_bytes([rec[12], rec[13]]) as u64;
    let flag = u16::from_le_bytes([rec[14], rec[15]]);
    let l_seq_raw = le_u32(rec, 16);
    if l_read_name == 0 {
        return Err(RecordError::EmptyReadName);
    }
    if l_seq_raw > i32::MAX as u32 {
        return Err(RecordError::NegativeSeqLength(l_seq_raw));
    }
    let l_seq = l_seq_raw as u64;
    let needed = FIXED_LEN as u64 + l_read_name as u64 + 4 * n_cigar + l_seq.div_ceil(2) + l_seq;
    if needed > rec.len() as u64 {
        return Err(RecordError::Overrun {
            needed,
            available: rec.len(),
        });
    }
    // htslib appends a NUL to an unterminated name (`fixup_missing_qname_nul`)
    // and so writes a different record; we report it instead. Earlier NULs
    // are accepted, as htslib accepts them.
    if rec[FIXED_LEN + l_read_name - 1] != 0 {
        return Err(RecordError::ReadNameNotTerminated);
    }
    for (field, at) in [("refID", 0), ("next_refID", 20)] {
        let value = le_u32(rec, at) as i32;
        if value < -1 || value as i64 >= n_ref as i64 {
            return Err(RecordError::RefIdOutOfRange {
                field,
                value,
                n_ref,
            });
        }
    }
    // htslib checks neither `pos` nor `next_pos` (a BAM may carry any
    // i32 there, and samtools sorts and writes it as it is): the keys order
    // `pos` as samtools' unsigned `pos + 1` does, and the SAM text prints it.
    // bam_read1: a mapped read with a CIGAR and a SEQ must agree on length.
    let cigar_at = FIXED_LEN + l_read_name;
    if n_cigar > 0 && l_seq > 0 && flag & flags::UNMAPPED == 0 {
        let qlen = Cigar::new(&rec[cigar_at..cigar_at + 4 * n_cigar as usize]).query_length();
        if qlen != l_seq {
            return Err(RecordError::CigarSeqMismatch {
                cigar: qlen,
                l_seq: l_seq as usize,
            });
        }
    }
    crate::Aux::new(&rec[needed as usize..])
        .validate()
        .map_err(|e| RecordError::Aux {
            offset: e.offset,
            problem: e.problem,
        })
}

/// The bin htslib's `bam_read1` stores for a record it reads: recomputed from
/// the CIGAR when there is one (reference length, or 1 when that is 0 or the
/// read is unmapped), so a BAM written by samtools carries this value even
/// where the input's `bin` field was wrong. `None` when the record has no
/// CIGAR (htslib keeps the stored bin then). The record must be valid.
pub fn htslib_bin(rec: &[u8]) -> Option<u16> {
    let r = crate::RecordRef::new(rec);
    if r.n_cigar_op() == 0 {
        return None;
    }
    let mut rlen = r.reference_length();
    if r.flag() & flags::UNMAPPED != 0 || rlen == 0 {
        rlen = 1;
    }
    let pos = r.pos() as i64;
    Some(reg2bin(pos, pos + rlen))
}

/// Where a `CG:B:I` tag holds a record's real CIGAR, as htslib's
/// `bam_tag2cigar` decides: the stored CIGAR starts with `<l_seq>S`, the read
/// is placed, and the first `CG` tag is a `B:I`/`B:i` array of at least
/// `n_cigar_op` (and fewer than 2^29) operations. Returns the CG field's
/// offset in the aux area and its operation count.
pub fn cg_cigar_field(r: crate::RecordRef) -> Option<(usize, usize)> {
    let first = r.cigar_bytes().get(..4)?;
    let soft_clip_all = (r.l_seq() as u32) << 4 | 4;
    if u32::from_le_bytes([first[0], first[1], first[2], first[3]]) != soft_clip_all
        || r.ref_id() < 0
        || r.pos() < 0
    {
        return None;
    }
    let cg = r.aux().find(*b"CG")?;
    if cg.ty != b'B' || !matches!(cg.value[0], b'I' | b'i') {
        return None;
    }
    let n = le_u32(cg.value, 1) as usize;
    (n >= r.n_cigar_op() && n < 1 << 29).then_some((cg.offset, n))
}

/// The bytes htslib would write after reading `framed` (a valid record
/// with its `block_size`): `bam_read1` moves a `CG:B:I` CIGAR into place and
/// recomputes `bin`; `bam_write1` stores a CIGAR of more than 65535
/// operations as `<l_seq>S<ref_len>N` plus a `CG:B:I` tag at the end of the
/// aux data. `Ok(None)` when that is the input unchanged (the usual case).
pub fn htslib_normalise(framed: &[u8]) -> Result<Option<Vec<u8>>, RecordError> {
    let r = crate::RecordRef::with_block_size(framed);
    let cg = cg_cigar_field(r);
    if cg.is_none() {
        // No CIGAR to move out of `CG`, and a stored CIGAR (a 16-bit count)
        // is never long: only the bin can differ, so the usual record is
        // answered without building a copy of it.
        return Ok(match htslib_bin(r.bytes()) {
            Some(bin) if bin != r.bin() => {
                let mut out = framed.to_vec();
                out[4 + 10..4 + 12].copy_from_slice(&bin.to_le_bytes());
                Some(out)
            }
            _ => None,
        });
    }
    let mut cigar: Vec<u32> = r
        .cigar_bytes()
        .chunks_exact(4)
        .map(|c| le_u32(c, 0))
        .collect();
    let mut aux = std::borrow::Cow::Borrowed(r.aux_bytes());
    if let Some((at, n)) = cg {
        let ops = &r.aux_bytes()[at + 8..at + 8 + 4 * n];
        cigar = ops.chunks_exact(4).map(|c| le_u32(c, 0)).collect();
        let mut rest = r.aux_bytes()[..at].to_vec();
        rest.extend_from_slice(&r.aux_bytes()[at + 8 + 4 * n..]);
        aux = std::borrow::Cow::Owned(rest);
    }
    let ref_len = cigar::reference_length(cigar.iter().map(|&c| cigar::unpack(c)));
    let bin = if cigar.is_empty() {
        r.bin()
    } else {
        let span = if r.flag() & flags::UNMAPPED != 0 || ref_len == 0 {
            1
        } else {
            ref_len
        };
        reg2bin(r.pos() as i64, r.pos() as i64 + span)
    };
    let long = cigar.len() > 0xffff;
    if long && ref_len >= 1 << 28 {
        return Err(RecordError::LongCigarTooLong {
            n_cigar: cigar.len(),
            ref_len,
        });
    }
    let mut out = Vec::with_capacity(framed.len() + 16);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&r.bytes()[..FIXED_LEN]);
    out[4 + 10..4 + 12].copy_from_slice(&bin.to_le_bytes());
    let n_field = if long { 2 } else { cigar.len() as u16 };
    out[4 + 12..4 + 14].copy_from_slice(&n_field.to_le_bytes());
    out.extend_from_slice(&r.bytes()[FIXED_LEN..FIXED_LEN + r.l_read_name()]);
    if long {
        out.extend_from_slice(&((r.l_seq() as u32) << 4 | 4).to_le_bytes());
        out.extend_from_slice(&((ref_len as u32) << 4 | 3).to_le_bytes());
    } else {
        out.extend(cigar.iter().flat_map(|c| c.to_le_bytes()));
    }
    out.extend_from_slice(r.seq_bytes());
    out.extend_from_slice(r.qual());
    out.extend_from_slice(&aux);
    if long {
        out.extend_from_slice(b"CGBI");
        out.extend_from_slice(&(cigar.len() as u32).to_le_bytes());
        out.extend(cigar.iter().flat_map(|c| c.to_le_bytes()));
    }
    let size = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&size.to_le_bytes());
    Ok((out != framed).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// name "r1", 2M, seq "AC", one aux field appended by the caller.
    fn rec(aux: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&0i32.to_le_bytes()); // refID
        v.extend_from_slice(&9i32.to_le_bytes()); // pos
        v.extend_from_slice(&[3, 60]); // l_read_name, mapq
        v.extend_from_slice(&4681u16.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes()); // n_cigar_op
        v.extend_from_slice(&0u16.to_le_bytes()); // flag
        v.extend_from_slice(&2u32.to_le_bytes()); // l_seq
        v.extend_from_slice(&(-1i32).to_le_bytes());
        v.extend_from_slice(&(-1i32).to_le_bytes());
        v.extend_from_slice(&0i32.to_le_bytes());
        v.extend_from_slice(b"r1\0");
        v.extend_from_slice(&(2u32 << 4).to_le_bytes());
        v.extend_from_slice(&[0x12, 30, 30]);
        v.extend_from_slice(aux);
        v
    }

    #[test]
    fn good_record_passes() {
        assert_eq!(validate_record(&rec(b"NMC\x01XZZab\0"), 1), Ok(()));
        assert_eq!(
            validate_record(&rec(b"XBBs\x02\0\0\0\x01\0\x02\0XDd12345678"), 1),
            Ok(())
        );
    }

    #[test]
    fn block_sizes() {
        assert_eq!(read_block_size(32u32.to_le_bytes()), Ok(32));
        assert_eq!(
            read_block_size(31u32.to_le_bytes()),
            Err(RecordError::BlockSize(31))
        );
        assert_eq!(
            read_block_size(0x8000_0000u32.to_le_bytes()),
            Err(RecordError::BlockSize(0x8000_0000))
        );
        assert_eq!(
            read_block_size(i32::MAX.to_le_bytes()),
            Ok(i32::MAX as usize)
        );
    }

    #[test]
    fn negative_lengths_read_as_negative() {
        let e = RecordError::BlockSize((-5i32) as u32).to_string();
        assert!(e.starts_with("block_size -5 is outside"), "{e}");
        assert!(RecordError::BlockSize(10)
            .to_string()
            .starts_with("block_size 10 "));
        let e = RecordError::NegativeSeqLength(u32::MAX).to_string();
        assert!(e.starts_with("l_seq -1 is negative"), "{e}");
    }

    #[test]
    fn fixed_part_errors() {
        assert_eq!(validate_record(&[0; 31], 1), Err(RecordError::TooShort(31)));
        let mut r = rec(b"");
        r[8] = 0;
        assert_eq!(validate_record(&r, 1), Err(RecordError::EmptyReadName));
        let mut r = rec(b"");
        r[34] = b'x';
        assert_eq!(
            validate_record(&r, 1),
            Err(RecordError::ReadNameNotTerminated)
        );
        let mut r = rec(b"");
        r[32] = 0; // an earlier NUL is accepted, as htslib does
        assert_eq!(validate_record(&r, 1), Ok(()));
        let mut r = rec(b"");
        r[16..20].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(
            validate_record(&r, 1),
            Err(RecordError::Overrun {
                needed: 44,
                available: 42
            })
        );
        let mut r = rec(b"");
        r[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            validate_record(&r, 1),
            Err(RecordError::NegativeSeqLength(u32::MAX))
        );
    }

    #[test]
    fn reference_and_position_ranges() {
        let r = rec(b"");
        assert_eq!(
            validate_record(&r, 0),
            Err(RecordError::RefIdOutOfRange {
                field: "refID",
                value: 0,
                n_ref: 0
            })
        );
        let mut r = rec(b"");
        r[20..24].copy_from_slice(&(-2i32).to_le_bytes());
        assert_eq!(
            validate_record(&r, 1),
            Err(RecordError::RefIdOutOfRange {
                field: "next_refID",
                value: -2,
                n_ref: 1
            })
        );
        // htslib reads any pos and next_pos (pysam: -5 sorts and prints as -4).
        for (at, v) in [(4, -2i32), (4, i32::MIN), (24, -5), (24, i32::MIN)] {
            let mut r = rec(b"");
            r[at..at + 4].copy_from_slice(&v.to_le_bytes());
            assert_eq!(validate_record(&r, 1), Ok(()), "field at {at} = {v}");
        }
    }

    #[test]
    fn cigar_must_match_seq_when_mapped() {
        let mut r = rec(b"");
        r[35..39].copy_from_slice(&(3u32 << 4).to_le_bytes());
        assert_eq!(
            validate_record(&r, 1),
            Err(RecordError::CigarSeqMismatch { cigar: 3, l_seq: 2 })
        );
        r[14..16].copy_from_slice(&flags::UNMAPPED.to_le_bytes());
        assert_eq!(validate_record(&r, 1), Ok(()));
    }

    #[test]
    fn aux_errors() {
        let aux_err = |aux: &[u8]| match validate_record(&rec(aux), 1) {
            Err(RecordError::Aux { offset, problem }) => (offset, problem),
            other => panic!("expected an aux error, got {other:?}"),
        };
        assert_eq!(aux_err(b"NMC\x01XZ"), (4, AuxProblem::Truncated(2)));
        assert_eq!(
            aux_err(b"XZZab"),
            (
                0,
                AuxProblem::ValueOverrun {
                    tag: "XZ".into(),
                    ty: 'Z'
                }
            )
        );
        assert_eq!(
            aux_err(b"XXq\0"),
            (
                0,
                AuxProblem::UnknownType {
                    tag: "XX".into(),
                    ty: 'q'
                }
            )
        );
        assert_eq!(
            aux_err(b"XBBq\x01\0\0\0\0"),
            (
                0,
                AuxProblem::UnknownArrayType {
                    tag: "XB".into(),
                    sub: 'q'
                }
            )
        );
        assert_eq!(
            aux_err(b"XBBi\x02\0\0\0\0\0\0\0"),
            (
                0,
                AuxProblem::ValueOverrun {
                    tag: "XB".into(),
                    ty: 'B'
                }
            )
        );
        assert_eq!(
            aux_err(b"XIi\x01\0"),
            (
                0,
                AuxProblem::ValueOverrun {
                    tag: "XI".into(),
                    ty: 'i'
                }
            )
        );
    }

    #[test]
    fn normalise_moves_cg_into_the_cigar_and_fixes_bin() {
        // An unplaced record keeps its CG tag when parsed; placing it makes
        // htslib's reader move the tag into the CIGAR.
        let h = crate::header::parse_sam_header([&b"@SQ\tSN:c1\tLN:100"[..]]).expect("header");
        let line = format!(
            "r\t4\t*\t0\t0\t4S\t*\t0\t0\tACGT\t*\tCG:B:I,{},{}\tXZ:Z:z",
            2 << 4,
            2 << 4 | 1
        );
        let mut framed = Vec::new();
        crate::sam_parse::parse_sam_record(line.as_bytes(), &h, &h.ref_lookup(), &mut framed)
            .expect("valid");
        framed[4..8].copy_from_slice(&0i32.to_le_bytes());
        framed[8..12].copy_from_slice(&10i32.to_le_bytes());
        framed[18..20].copy_from_slice(&0u16.to_le_bytes()); // flag: mapped
        let out = htslib_normalise(&framed).expect("ok").expect("changed");
        let r = crate::RecordRef::with_block_size(&out);
        assert_eq!(r.cigar().ops().collect::<Vec<_>>(), vec![(0, 2), (1, 2)]);
        assert_eq!(r.aux_bytes(), b"XZZz\0");
        assert_eq!(r.bin(), reg2bin(10, 12));
        assert_eq!(
            htslib_normalise(&out),
            Ok(None),
            "normal form is a fixed point"
        );
        // A wrong bin alone is corrected.
        let mut framed = out.clone();
        framed[14..16].copy_from_slice(&7u16.to_le_bytes());
        assert_eq!(htslib_normalise(&framed), Ok(Some(out)));
    }

    #[test]
    fn bin_is_recomputed_like_bam_read1() {
        let r = rec(b"");
        assert_eq!(htslib_bin(&r), Some(reg2bin(9, 11)));
        let mut r = rec(b"");
        r[35..39].copy_from_slice(&(2u32 << 4 | 1).to_le_bytes()); // 2I: no reference bases
        assert_eq!(htslib_bin(&r), Some(reg2bin(9, 10)));
    }
}
