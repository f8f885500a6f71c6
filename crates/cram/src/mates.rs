//! TLEN of mates attached within a slice, as htslib's decoder sets it.
//!
//! A CRAM writer may store a pair whose two records sit in one slice as
//! "attached": the second record's RNEXT, PNEXT and TLEN are not stored but
//! rebuilt on decoding. noodles-cram gives the first record of the pair in
//! the slice `+T` and the other `-T` (T the template's span); htslib 1.24
//! gives `+T` to the leftmost record by start, then by end (found by
//! decoding samtools' own CRAMs: of two mates starting together, the one
//! ending first is positive), on a tie of both to the one with flag 0x40
//! (READ1), `-T` to the other, and 0 to both when the mates are on
//! different references or either is unmapped. htslib's encoder stores a
//! pair as attached only when its own rule gives back the record's TLEN,
//! so htslib's rule is the one that reproduces the original file.
//!
//! noodles does not say which records it attached, so a pair is taken as
//! attached when its two TLENs are exactly what noodles computes for an
//! attached pair (first `+T`, second `-T`, T its span). A pair stored
//! detached with exactly those values, and whose values htslib's rule would
//! not give, would be changed wrongly; htslib's encoder attaches every pair
//! whose TLENs follow the SAM spec's sign rule, so only a file whose TLEN
//! signs break that rule (rightmost mate positive) can show it.

use alnsort_bam::RecordRef;
use std::collections::HashMap;

const TLEN_AT: usize = 4 + 28;

/// noodles' end of a record: start plus its reference span (its read
/// length when unmapped), minus one; positions 1-based.
fn noodles_end(r: &RecordRef) -> i64 {
    let start = r.pos() as i64 + 1;
    let span = if r.flag() & 0x4 != 0 {
        r.l_seq() as i64
    } else {
        r.reference_length()
    };
    start + span - 1
}

fn set_tlen(buf: &mut [u8], at: usize, v: i32) {
    buf[at + TLEN_AT..at + TLEN_AT + 4].copy_from_slice(&v.to_le_bytes());
}

/// Rewrites the TLEN of attached pairs among the records of one slice
/// (`starts`: each record's offset in `buf`, framed) by htslib's rule.
pub(crate) fn fix_attached_tlen(buf: &mut [u8], starts: &[usize]) {
    // Per name: its first two records and how many it has (exactly two
    // make a pair).
    let mut by_name: HashMap<&[u8], (usize, usize, u32)> = HashMap::with_capacity(starts.len());
    for (i, &at) in starts.iter().enumerate() {
        let r = RecordRef::with_block_size(&buf[at..]);
        if r.flag() & 0x1 != 0 {
            let e = by_name.entry(r.read_name()).or_insert((i, i, 0));
            if e.2 == 1 {
                e.1 = i;
            }
            e.2 += 1;
        }
    }
    let mut changes: Vec<(usize, i32)> = Vec::new();
    for &(a, b, count) in by_name.values() {
        if count != 2 {
            continue;
        }
        let ra = RecordRef::with_block_size(&buf[starts[a]..]);
        let rb = RecordRef::with_block_size(&buf[starts[b]..]);
        if ra.pos() < 0 || rb.pos() < 0 {
            continue;
        }
        let start = (ra.pos().min(rb.pos()) as i64) + 1;
        let end = noodles_end(&ra).max(noodles_end(&rb));
        let t = end - start + 1;
        if t <= 0 || t > i32::MAX as i64 {
            continue;
        }
        let t = t as i32;
        if ra.tlen() != t || rb.tlen() != -t {
            continue;
        }
        let unmapped = (ra.flag() | rb.flag()) & 0x4 != 0;
        if unmapped || ra.ref_id() != rb.ref_id() {
            changes.push((starts[a], 0));
            changes.push((starts[b], 0));
            continue;
        }
        // htslib's span: leftmost start to rightmost mapped end.
        let hend =
            (ra.pos() as i64 + ra.reference_length()).max(rb.pos() as i64 + rb.reference_length());
        let ht = (hend - ra.pos().min(rb.pos()) as i64) as i32;
        // The leftmost record by (start, end) is positive; on a tie of
        // both, the one with READ1.
        let key = |r: &RecordRef| (r.pos() as i64, r.pos() as i64 + r.reference_length());
        let (ka, kb) = (key(&ra), key(&rb));
        let a_plus = ka < kb || (ka == kb && ra.flag() & 0x40 != 0);
        let b_plus = kb < ka || (ka == kb && rb.flag() & 0x40 != 0);
        changes.push((starts[a], if a_plus { ht } else { -ht }));
        changes.push((starts[b], if b_plus { ht } else { -ht }));
    }
    for (at, v) in changes {
        set_tlen(buf, at, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A framed paired record with a 10M CIGAR.
    fn rec(name: &[u8], flag: u16, ref_id: i32, pos: i32, tlen: i32) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&ref_id.to_le_bytes());
        d.extend_from_slice(&pos.to_le_bytes());
        d.push(name.len() as u8 + 1);
        d.push(60);
        d.extend_from_slice(&0u16.to_le_bytes());
        d.extend_from_slice(&1u16.to_le_bytes());
        d.extend_from_slice(&flag.to_le_bytes());
        d.extend_from_slice(&10u32.to_le_bytes());
        d.extend_from_slice(&ref_id.to_le_bytes());
        d.extend_from_slice(&0i32.to_le_bytes());
        d.extend_from_slice(&tlen.to_le_bytes());
        d.extend_from_slice(name);
        d.push(0);
        d.extend_from_slice(&(10u32 << 4).to_le_bytes());
        d.extend_from_slice(&[0x11; 5]);
        d.extend_from_slice(&[30; 10]);
        let mut f = (d.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&d);
        f
    }

    fn tlens(buf: &[u8], starts: &[usize]) -> Vec<i32> {
        starts
            .iter()
            .map(|&s| RecordRef::with_block_size(&buf[s..]).tlen())
            .collect()
    }

    fn slice(recs: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut starts = Vec::new();
        for r in recs {
            starts.push(buf.len());
            buf.extend_from_slice(r);
        }
        (buf, starts)
    }

    #[test]
    fn leftmost_mate_gets_the_positive_tlen() {
        // The rightmost mate comes first in the slice; noodles gave it +T.
        let (mut buf, starts) = slice(&[
            rec(b"p", 0x1 | 0x80 | 0x10, 0, 400, 410),
            rec(b"p", 0x1 | 0x40 | 0x20, 0, 0, -410),
        ]);
        fix_attached_tlen(&mut buf, &starts);
        assert_eq!(tlens(&buf, &starts), vec![-410, 410]);
    }

    /// A framed paired record with an `n`M CIGAR.
    fn rec_len(name: &[u8], flag: u16, pos: i32, tlen: i32, n: u32) -> Vec<u8> {
        let mut r = rec(name, flag, 0, pos, tlen);
        let cigar_at = 4 + 32 + name.len() + 1;
        r[cigar_at..cigar_at + 4].copy_from_slice(&(n << 4).to_le_bytes());
        r
    }

    #[test]
    fn equal_starts_go_by_end_first() {
        // READ1 is longer: its mate, ending first, is positive (samtools
        // 1.24 decodes its own CRAM of such a pair this way).
        let (mut buf, starts) = slice(&[
            rec_len(b"b", 0x1 | 0x40 | 0x10, 300, 80, 80),
            rec_len(b"b", 0x1 | 0x80 | 0x20, 300, -80, 10),
        ]);
        fix_attached_tlen(&mut buf, &starts);
        assert_eq!(tlens(&buf, &starts), vec![-80, 80]);
    }

    #[test]
    fn equal_starts_go_by_read1_and_other_references_give_zero() {
        let (mut buf, starts) = slice(&[
            rec(b"q", 0x1 | 0x80, 0, 5, 10),
            rec(b"q", 0x1 | 0x40, 0, 5, -10),
            rec(b"r", 0x1 | 0x40, 0, 5, 20),
            rec(b"r", 0x1 | 0x80, 1, 15, -20),
        ]);
        fix_attached_tlen(&mut buf, &starts);
        assert_eq!(tlens(&buf, &starts), vec![-10, 10, 0, 0]);
    }

    #[test]
    fn pairs_not_in_noodles_attached_form_are_left_alone() {
        let (mut buf, starts) = slice(&[
            rec(b"s", 0x1 | 0x80, 0, 400, -123),
            rec(b"s", 0x1 | 0x40, 0, 0, 123),
        ]);
        let before = buf.clone();
        fix_attached_tlen(&mut buf, &starts);
        assert_eq!(buf, before);
    }

    #[test]
    fn a_name_of_three_records_is_not_a_pair() {
        // The first two would be an attached pair in noodles' form; the
        // third record of the name makes them no pair.
        let (mut buf, starts) = slice(&[
            rec(b"t", 0x1 | 0x80 | 0x10, 0, 400, 410),
            rec(b"t", 0x1 | 0x40 | 0x20, 0, 0, -410),
            rec(b"t", 0x1 | 0x800, 0, 900, 0),
        ]);
        let before = buf.clone();
        fix_attached_tlen(&mut buf, &starts);
        assert_eq!(buf, before);
    }
}
