//! MD and NM as htslib's CRAM decoder adds them.
//!
//! htslib drops MD and NM when it encodes a record whose tags equal what
//! the reference gives, and on decoding adds them to every placed record
//! (flag 0x4 clear, a reference id, a sequence) that lacks them, computed
//! from the read against the reference: after the tags the record carries,
//! before an RG that comes from the read-group data series (which a CRAM
//! decoder puts last); an RG stored as a tag (a name not in the header) is
//! one of the tags the record carries, so MD/NM go after it. samtools shows them, so
//! records decoded here get them the same way; noodles-cram does not do it.

use alnsort_bam::cigar::{self, op};
use alnsort_bam::record::NT16_STR as SEQ_CODES;

/// The 4-bit BAM code of a base letter as noodles-bam packs it: the
/// letters of `=ACMGRSVTWYHKDBN` in either case, anything else N.
const fn nt16_table() -> [u8; 256] {
    let mut t = [15u8; 256];
    let mut i = 0;
    while i < 16 {
        t[SEQ_CODES[i] as usize] = i as u8;
        t[SEQ_CODES[i].to_ascii_lowercase() as usize] = i as u8;
        i += 1;
    }
    t
}
static NT16: [u8; 256] = nt16_table();

/// N's 4-bit BAM code (the last of `=ACMGRSVTWYHKDBN`).
const NT16_N: u8 = 15;

/// The 4-bit BAM code of base letter `b`.
#[inline]
pub(crate) fn nt16(b: u8) -> u8 {
    NT16[b as usize]
}

/// Where, in `compute`'s reference coordinates, the reference ends (its
/// @SQ length) and where the MD ends (the first feature past that end to
/// give a base; `usize::MAX` when none).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ends {
    pub(crate) reference: usize,
    pub(crate) md: usize,
}

impl Ends {
    /// No end: bases past the sequence compare as N.
    pub(crate) const NONE: Ends = Ends {
        reference: usize::MAX,
        md: usize::MAX,
    };
}

/// Computes MD (into `md`, replacing its contents) and returns NM for a
/// placed record with base letters `bases`, CIGAR `cigar` (BAM-packed
/// operations) at 0-based `pos` against `reference` (its whole sequence;
/// bases past its end compare as N). Bases are compared as their BAM code
/// reads back (`a` as `A`, an unknown letter as `N`); an N in the read
/// never matches, not even a reference N (htslib's rule, as `samtools
/// calmd` has it: both are counted as a mismatch).
///
/// Past the reference's end (its @SQ length, `ends.reference`) htslib's
/// `cram_decode_seq` compares nothing: a stretch of implicit matches there
/// decodes to N and adds to the MD's run, while the first feature giving a
/// base there (`ends.md`, found by the caller) writes the run and ends the
/// MD (`md_dist = -1`: nothing more is written, not even the last run);
/// neither adds to NM. `None` when the
/// CIGAR consumes more bases than there are (the record is then left
/// without MD/NM and validation reports it).
pub(crate) fn compute(
    bases: &[u8],
    cigar: &[u32],
    pos: usize,
    reference: &[u8],
    ends: Ends,
    md: &mut Vec<u8>,
) -> Option<u32> {
    md.clear();
    let ref_base = |i: usize| reference.get(i).map_or(b'N', |b| b.to_ascii_uppercase());
    let mut nm: u32 = 0;
    let mut run: u32 = 0;
    // Whether a base past the reference's end ended the MD.
    let mut ended = false;
    let (mut qi, mut ri) = (0usize, pos);
    let push_run = |md: &mut Vec<u8>, run: u32| {
        let mut digits = [0u8; 10];
        let mut n = run;
        let mut k = digits.len();
        loop {
            k -= 1;
            digits[k] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        md.extend_from_slice(&digits[k..]);
    };
    for &c in cigar {
        let (op, len) = cigar::unpack(c);
        let len = len as usize;
        match op {
            op::MATCH | op::SEQ_MATCH | op::SEQ_MISMATCH => {
                let q = bases.get(qi..qi + len)?;
                // Runs where the read equals the reference, all of it
                // plain bases (a plain base equal to the reference's always
                // matches), are skipped in blocks; the other bases one by one.
                let inside = &reference[..reference.len().min(ends.reference)];
                let r = inside.get(ri..).map_or(&[][..], |r| &r[..r.len().min(len)]);
                let mut k = 0;
                while k < len {
                    let n = plain_equal_prefix(&q[k..], &r[r.len().min(k)..]);
                    run += n as u32;
                    k += n;
                    ri += n;
                    if k == len {
                        break;
                    }
                    let rb = ref_base(ri);
                    if ended {
                    } else if ri >= ends.md {
                        push_run(md, run);
                        ended = true;
                    } else if ri >= ends.reference
                        || (nt16(q[k]) != NT16_N && SEQ_CODES[nt16(q[k]) as usize] == rb)
                    {
                        run += 1;
                    } else {
                        push_run(md, run);
                        md.push(rb);
                        run = 0;
                        nm += 1;
                    }
                    ri += 1;
                    k += 1;
                }
                qi += len;
            }
            op::INSERTION => {
                qi += len;
                nm += len as u32;
            }
            op::DELETION => {
                push_run(md, run);
                md.push(b'^');
                for k in 0..len {
                    md.push(ref_base(ri + k));
                }
                run = 0;
                ri += len;
                nm += len as u32;
            }
            op::SKIP => ri += len,
            op::SOFT_CLIP => qi += len,
            _ => {}
        }
        if qi > bases.len() {
            return None;
        }
    }
    if !ended {
        push_run(md, run);
    }
    Some(nm)
}

/// Whether `q` equals `r` and `r` is all plain bases (`A`, `C`, `G`, `T`):
/// the whole length is looked at without an early exit, so that the loop
/// runs on vector registers.
#[inline]
fn plain_and_equal(q: &[u8], r: &[u8]) -> bool {
    q.len() == r.len()
        && q.iter().zip(r).fold(true, |ok, (&a, &b)| {
            ok & (a == b) & ((b == b'A') | (b == b'C') | (b == b'G') | (b == b'T'))
        })
}

/// How many leading bases of `q` equal those of `r` and are plain bases
/// (`A`, `C`, `G`, `T`), looked at 16 at a time.
#[inline]
fn plain_equal_prefix(q: &[u8], r: &[u8]) -> usize {
    let n = q.len().min(r.len());
    let (q, r) = (&q[..n], &r[..n]);
    let mut k = 0;
    for (a, b) in q.chunks_exact(16).zip(r.chunks_exact(16)) {
        if !plain_and_equal(a, b) {
            break;
        }
        k += 16;
    }
    while k < n && q[k] == r[k] && matches!(r[k], b'A' | b'C' | b'G' | b'T') {
        k += 1;
    }
    k
}

/// Whether htslib 1.24's encoder keeps a placed record's MD and NM as given,
/// whatever their values (`verbatim_MD`/`verbatim_NM` in `cram_encode.c`),
/// so that a reader finds them in their place among the tags: an aligned
/// (`M`, `=`, `X`) read base N over a reference N (either case), or an
/// aligned base at or past the reference's end (`reference` is the whole
/// sequence). `bases` are the read's letters, `cigar` BAM-packed operations
/// from 0-based `pos`.
pub(crate) fn kept_as_given(bases: &[u8], cigar: &[u32], pos: usize, reference: &[u8]) -> bool {
    let (mut qi, mut ri) = (0usize, pos);
    for &c in cigar {
        let (op, len) = cigar::unpack(c);
        let len = len as usize;
        match op {
            op::MATCH | op::SEQ_MATCH | op::SEQ_MISMATCH => {
                if len > 0 && ri.saturating_add(len) > reference.len() {
                    return true;
                }
                let q = bases.get(qi..).map_or(&[][..], |q| &q[..q.len().min(len)]);
                let mut from = 0;
                while let Some(k) = q[from..].iter().position(|&b| b == b'N') {
                    if reference[ri + from + k] & !0x20 == b'N' {
                        return true;
                    }
                    from += k + 1;
                }
                qi += len;
                ri += len;
            }
            op::INSERTION | op::SOFT_CLIP => qi += len,
            op::DELETION | op::SKIP => ri += len,
            _ => {}
        }
    }
    false
}

/// Appends the MD tag (when `md` is given) and the NM tag (when `nm` is
/// given, as the smallest unsigned type, as htslib writes it).
pub(crate) fn push(out: &mut Vec<u8>, md: Option<&[u8]>, nm: Option<u32>) {
    if let Some(md) = md {
        out.extend_from_slice(b"MDZ");
        out.extend_from_slice(md);
        out.push(0);
    }
    if let Some(nm) = nm {
        out.extend_from_slice(b"NM");
        if nm <= u8::MAX as u32 {
            out.push(b'C');
            out.push(nm as u8);
        } else if nm <= u16::MAX as u32 {
            out.push(b'S');
            out.extend_from_slice(&(nm as u16).to_le_bytes());
        } else {
            out.push(b'I');
            out.extend_from_slice(&nm.to_le_bytes());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A framed BAM record at `pos` with `cigar` ((op, len) pairs), bases
    /// `seq` and raw aux bytes.
    pub(crate) fn record(
        flag: u16,
        pos: i32,
        cigar: &[(u8, u32)],
        seq: &[u8],
        aux: &[u8],
    ) -> Vec<u8> {
        let name = b"r\0";
        let mut d = Vec::new();
        d.extend_from_slice(&0i32.to_le_bytes());
        d.extend_from_slice(&pos.to_le_bytes());
        d.push(name.len() as u8);
        d.push(60);
        d.extend_from_slice(&0u16.to_le_bytes());
        d.extend_from_slice(&(cigar.len() as u16).to_le_bytes());
        d.extend_from_slice(&flag.to_le_bytes());
        d.extend_from_slice(&(seq.len() as u32).to_le_bytes());
        d.extend_from_slice(&(-1i32).to_le_bytes());
        d.extend_from_slice(&(-1i32).to_le_bytes());
        d.extend_from_slice(&0i32.to_le_bytes());
        d.extend_from_slice(name);
        for &(op, len) in cigar {
            d.extend_from_slice(&((len << 4) | op as u32).to_le_bytes());
        }
        let code = |b: u8| SEQ_CODES.iter().position(|&c| c == b).unwrap() as u8;
        for pair in seq.chunks(2) {
            let hi = code(pair[0]) << 4;
            let lo = pair.get(1).map_or(0, |&b| code(b));
            d.push(hi | lo);
        }
        d.extend(std::iter::repeat_n(30u8, seq.len()));
        d.extend_from_slice(aux);
        let mut f = (d.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&d);
        f
    }

    fn md_nm(
        bases: &[u8],
        cigar: &[(u8, u32)],
        pos: usize,
        reference: &[u8],
    ) -> Option<(String, u32)> {
        md_nm_ending(bases, cigar, pos, reference, Ends::NONE)
    }

    fn md_nm_ending(
        bases: &[u8],
        cigar: &[(u8, u32)],
        pos: usize,
        reference: &[u8],
        ends: Ends,
    ) -> Option<(String, u32)> {
        let cigar: Vec<u32> = cigar
            .iter()
            .map(|&(op, len)| len << 4 | op as u32)
            .collect();
        let mut md = b"stale".to_vec();
        let nm = compute(bases, &cigar, pos, reference, ends, &mut md)?;
        Some((String::from_utf8(md).unwrap(), nm))
    }

    /// `kept_as_given` of `cigar` ((op, len) pairs).
    fn kept(bases: &[u8], cigar: &[(u8, u32)], pos: usize, reference: &[u8]) -> bool {
        let cigar: Vec<u32> = cigar
            .iter()
            .map(|&(op, len)| len << 4 | op as u32)
            .collect();
        kept_as_given(bases, &cigar, pos, reference)
    }

    #[test]
    fn htslib_keeps_md_nm_for_n_over_n_and_bases_past_the_end() {
        // hts-specs' md#1 cases: a read N over a reference N (either case)
        // in M, = or X keeps both tags as given.
        assert!(kept(b"ACNT", &[(0, 4)], 0, b"ACNT"));
        assert!(kept(b"ACNT", &[(7, 2), (8, 2)], 0, b"ACnT"));
        // An N elsewhere (over a base, inserted, soft-clipped) does not,
        // nor a reference N under another base or under a deletion.
        assert!(!kept(b"ANGT", &[(0, 4)], 0, b"ACNT"));
        assert!(!kept(b"NACT", &[(4, 1), (0, 3)], 1, b"NACT"));
        assert!(!kept(b"ANCT", &[(0, 1), (1, 1), (0, 2)], 0, b"AACNNT"));
        assert!(!kept(b"AT", &[(0, 1), (2, 2), (0, 1)], 0, b"ANNT"));
        // Bases after a skip are compared where they lie.
        assert!(kept(b"AN", &[(0, 1), (3, 2), (0, 1)], 0, b"ACCN"));
        // An aligned base past the end keeps them; up to the end does not.
        assert!(kept(b"ACGT", &[(0, 4)], 1, b"ACGT"));
        assert!(!kept(b"CGT", &[(0, 3)], 1, b"ACGT"));
        assert!(kept(b"A", &[(0, 1)], 9, b"ACGT"));
    }

    #[test]
    fn mismatch_insertion_deletion_and_soft_clip() {
        //            0123456789
        let reference = b"ACGTACGTACGTAC";
        // 2S 3M 1I 2M 2D 2M at pos 1: ref CGT | AC | (GT deleted) | AC
        let got = md_nm(
            b"TTCGAGACAC",
            &[(4, 2), (0, 3), (1, 1), (0, 2), (2, 2), (0, 2)],
            1,
            reference,
        );
        // CGT vs CGA: mismatch at the third base; AC = AC; ^GT; AC = AC.
        assert_eq!(got, Some(("2T2^GT2".to_string(), 4)));
    }

    #[test]
    fn bases_compare_as_their_bam_code_and_past_the_reference_as_n() {
        // a reads back as A; U and . are not BAM letters and read back as
        // N, which never matches: not the reference's N, nor the N past
        // its end (samtools 1.24 reads CRAM so: test_conformance_matrix's
        // refn-* cases).
        assert_eq!(
            md_nm(b"aUN.", &[(0, 4)], 0, b"aCN"),
            Some(("1C0N0N0".to_string(), 3))
        );
        // Other codes equal to the reference's still match.
        assert_eq!(
            md_nm(b"ARY", &[(0, 3)], 0, b"ARY"),
            Some(("3".to_string(), 0))
        );
        assert_eq!(md_nm(b"ACGT", &[(0, 12)], 0, b"ACGT"), None);
        assert_eq!(md_nm(b"AC", &[(0, 1), (4, 2)], 0, b"A"), None);
    }

    #[test]
    fn past_the_reference_end_implicit_matches_count_and_a_feature_ends_the_md() {
        // hts-specs' 1200_overflow.cram: 60M at 4951 of a 5000-base
        // reference, its last ten bases (NNNNACGTRY) features past the
        // end; samtools 1.24 gives MD:Z:50 NM:i:0.
        let reference = b"ACGTTGCA".repeat(7);
        let mut bases = reference[6..].to_vec();
        bases.extend_from_slice(b"NNNNACGTRY");
        let ends = |md| Ends {
            reference: reference.len(),
            md,
        };
        assert_eq!(
            md_nm_ending(&bases, &[(0, 60)], 6, &reference, ends(reference.len())),
            Some(("50".to_string(), 0))
        );
        // Implicit matches past the end (decoded as N) add to the run, a
        // feature after them ends the MD; an insertion still counts in NM.
        assert_eq!(
            md_nm_ending(&bases, &[(0, 60)], 6, &reference, ends(reference.len() + 4)),
            Some(("54".to_string(), 0))
        );
        assert_eq!(
            md_nm_ending(
                b"ACNNGT",
                &[(0, 3), (1, 2), (0, 1)],
                2,
                b"CCAC",
                Ends {
                    reference: 4,
                    md: usize::MAX
                }
            ),
            Some(("4".to_string(), 2))
        );
        // A mismatch before the end is written as usual.
        assert_eq!(
            md_nm_ending(
                b"AGGA",
                &[(0, 4)],
                0,
                b"ACG",
                Ends {
                    reference: 3,
                    md: 3
                }
            ),
            Some(("1C1".to_string(), 1))
        );
    }

    /// MD and NM for an all-M alignment, base by base (the model the block
    /// skipping of `compute` must agree with).
    fn per_base(bases: &[u8], pos: usize, reference: &[u8]) -> (String, u32) {
        let (mut md, mut nm, mut run) = (String::new(), 0, 0);
        for (i, &b) in bases.iter().enumerate() {
            let rb = reference
                .get(pos + i)
                .map_or(b'N', |r| r.to_ascii_uppercase());
            if nt16(b) != NT16_N && SEQ_CODES[nt16(b) as usize] == rb {
                run += 1;
            } else {
                md += &format!("{run}{}", rb as char);
                run = 0;
                nm += 1;
            }
        }
        md += &run.to_string();
        (md, nm)
    }

    proptest::proptest! {
        #[test]
        fn block_skipping_agrees_with_base_by_base(
            reference in proptest::collection::vec(proptest::prop_oneof![
                20 => proptest::sample::select(b"ACGT".to_vec()),
                1 => proptest::sample::select(b"acgtNnRM".to_vec()),
            ], 0..300),
            edits in proptest::collection::vec((0usize..300, proptest::sample::select(b"ACGTNacgt.".to_vec())), 0..4),
            pos in 0usize..40,
            len in 1usize..260,
            split in 0usize..260,
        ) {
            let mut bases: Vec<u8> = (0..len)
                .map(|i| reference.get(pos + i).copied().unwrap_or(b'A'))
                .collect();
            for (at, b) in edits {
                if let Some(x) = bases.get_mut(at) {
                    *x = b;
                }
            }
            let want = per_base(&bases, pos, &reference);
            proptest::prop_assert_eq!(md_nm(&bases, &[(0, len as u32)], pos, &reference), Some(want.clone()));
            // The same bases as two M operations give the same MD and NM.
            let k = split.min(len);
            proptest::prop_assert_eq!(
                md_nm(&bases, &[(0, k as u32), (0, (len - k) as u32)], pos, &reference),
                Some(want)
            );
        }
    }

    #[test]
    fn nm_takes_the_smallest_unsigned_type() {
        let tags = |nm| {
            let mut out = Vec::new();
            push(&mut out, None, Some(nm));
            out
        };
        assert_eq!(tags(255), b"NMC\xff".to_vec());
        assert_eq!(tags(256), b"NMS\x00\x01".to_vec());
        assert_eq!(tags(65536), b"NMI\x00\x00\x01\x00".to_vec());
        let mut out = Vec::new();
        push(&mut out, Some(b"3T0"), None);
        assert_eq!(out, b"MDZ3T0\0".to_vec());
    }
}
