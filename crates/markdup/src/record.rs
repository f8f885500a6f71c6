//! What marking reads of one input record ([`ReadInfo`]) and the values
//! Picard derives from it: the unclipped 5' coordinate, the scores and the
//! barcode hashes.

use crate::flags;
use crate::read_groups::RgInfo;

/// A record's barcode values as Picard compares them (its `BARCODE_TAG`,
/// `READ_ONE_BARCODE_TAG` and `READ_TWO_BARCODE_TAG`): Java string hashes,
/// so barcodes whose hashes collide fall in one set, as in Picard. All 0
/// when no barcode tag is used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Barcodes {
    /// `Objects.hash(umi)`: 31 + the UMI's hash, 31 without a UMI.
    pub umi: i32,
    /// Hash of the `READ_ONE_BARCODE_TAG` value, 0 when absent.
    pub read_one: i32,
    /// Hash of the `READ_TWO_BARCODE_TAG` value, 0 when absent.
    pub read_two: i32,
}

/// Java's `String.hashCode` of UTF-8 text (over its UTF-16 code units).
pub fn java_string_hash(s: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(s);
    text.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

impl Barcodes {
    /// Picard's UMI value: `Objects.hash` of the tag's string (or of null).
    pub fn umi_value(umi: Option<&[u8]>) -> i32 {
        31i32.wrapping_add(umi.map_or(0, java_string_hash))
    }

    /// Picard's read-one/read-two barcode value: the string's hash, 0 when
    /// the record has no such tag.
    pub fn read_value(tag: Option<&[u8]>) -> i32 {
        tag.map_or(0, java_string_hash)
    }
}

/// The fields of one input record that duplicate marking needs.
#[derive(Clone, Copy, Debug)]
pub struct ReadInfo<'a> {
    pub name: &'a [u8],
    pub flag: u16,
    pub ref_id: i32,
    pub mate_ref_id: i32,
    /// 1-based unclipped 5' coordinate ([`five_prime_coordinate`]); unused
    /// for unmapped records.
    pub five_prime: i32,
    /// [`base_quality_score`] of the record.
    pub score: i16,
    pub rg: RgInfo,
    pub barcodes: Barcodes,
}

/// The 1-based unclipped 5' coordinate Picard uses: the unclipped start
/// (soft and hard clips before the first other operation moved back) on the
/// forward strand, the unclipped end on the reverse strand. `pos0` is the
/// 0-based position, `ref_len` the CIGAR's reference length.
pub fn five_prime_coordinate(pos0: i32, ref_len: i64, cigar: &[(u8, u32)], reverse: bool) -> i32 {
    use alnsort_bam::cigar::op::{HARD_CLIP as H, SOFT_CLIP as S};
    let start = pos0 as i64 + 1;
    if reverse {
        let end = start + ref_len - 1;
        let clip: i64 = cigar
            .iter()
            .rev()
            .take_while(|(op, _)| *op == S || *op == H)
            .map(|&(_, l)| l as i64)
            .sum();
        (end + clip) as i32
    } else {
        let clip: i64 = cigar
            .iter()
            .take_while(|(op, _)| *op == S || *op == H)
            .map(|&(_, l)| l as i64)
            .sum();
        (start - clip) as i32
    }
}

/// Picard's TOTAL_MAPPED_REFERENCE_LENGTH score: the CIGAR's reference
/// length of a mapped record (capped at 16383; 0 when unmapped), less 16384
/// for a QC-failed record.
pub fn reference_length_score(ref_len: i64, flag: u16) -> i16 {
    let mut score = if flag & flags::UNMAPPED != 0 {
        0
    } else {
        ref_len.clamp(0, i16::MAX as i64 / 2) as i16
    };
    if flag & flags::QC_FAIL != 0 {
        score = score.wrapping_add(i16::MIN / 2);
    }
    score
}

/// Picard's SUM_OF_BASE_QUALITIES score: the sum of qualities of at least 15
/// (qualities are Java bytes, so above 127 count as negative and are left
/// out), capped at 16383, less 16384 for a QC-failed record. A quality
/// string of 0xFF (absent) scores 0.
pub fn base_quality_score(qual: &[u8], flag: u16) -> i16 {
    let sum: i64 = if qual.first() == Some(&0xff) {
        0
    } else {
        // Branch-free sums in u32 over pieces that cannot overflow it
        // (127 x 2^20), which the compiler turns into vector code.
        qual.chunks(1 << 20)
            .map(|c| {
                c.iter()
                    .map(|&q| if q as i8 >= 15 { q as u32 } else { 0 })
                    .sum::<u32>() as i64
            })
            .sum()
    };
    let mut score = sum.min(i16::MAX as i64 / 2) as i16;
    if flag & flags::QC_FAIL != 0 {
        score = score.wrapping_add(i16::MIN / 2);
    }
    score
}
