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

use alnsort_bam::record::aux_value_len;
use alnsort_bam::RecordRef;

/// Whether the record is one htslib adds MD or NM to: placed, mapped,
/// with a sequence, lacking one of them.
pub(crate) fn may_need(r: &RecordRef) -> bool {
    r.flag() & 0x4 == 0
        && r.ref_id() >= 0
        && r.pos() >= 0
        && r.l_seq() > 0
        && (r.aux_get(*b"MD").is_none() || r.aux_get(*b"NM").is_none())
}

const SEQ_CODES: &[u8; 16] = b"=ACMGRSVTWYHKDBN";

/// When `framed` (a BAM record with its `block_size`) is placed and lacks
/// MD or NM, returns the record with them added (against `reference`, the
/// whole sequence of its reference), else `None`. `rg_from_series`: its
/// last tag is an RG the decoder added from the read-group series.
pub(crate) fn with_md_nm(framed: &[u8], reference: &[u8], rg_from_series: bool) -> Option<Vec<u8>> {
    let r = RecordRef::with_block_size(framed);
    if !may_need(&r) {
        return None;
    }
    let has_md = r.aux_get(*b"MD").is_some();
    let has_nm = r.aux_get(*b"NM").is_some();
    let seq = r.seq_bytes();
    let base = |i: usize| {
        SEQ_CODES[((seq[i / 2] >> (if i.is_multiple_of(2) { 4 } else { 0 })) & 0xf) as usize]
    };
    let ref_base = |i: usize| reference.get(i).map_or(b'N', |b| b.to_ascii_uppercase());
    let mut md = Vec::new();
    let mut nm: u32 = 0;
    let mut run: u32 = 0;
    let (mut qi, mut ri) = (0usize, r.pos() as usize);
    for (op, len) in r.cigar() {
        let len = len as usize;
        match op {
            // M, =, X
            0 | 7 | 8 => {
                for _ in 0..len {
                    let (q, rb) = (base(qi), ref_base(ri));
                    if q == rb {
                        run += 1;
                    } else {
                        md.extend_from_slice(run.to_string().as_bytes());
                        md.push(rb);
                        run = 0;
                        nm += 1;
                    }
                    qi += 1;
                    ri += 1;
                }
            }
            // I
            1 => {
                qi += len;
                nm += len as u32;
            }
            // D
            2 => {
                md.extend_from_slice(run.to_string().as_bytes());
                md.push(b'^');
                for k in 0..len {
                    md.push(ref_base(ri + k));
                }
                run = 0;
                ri += len;
                nm += len as u32;
            }
            // N
            3 => ri += len,
            // S
            4 => qi += len,
            _ => {}
        }
        if qi > r.l_seq() {
            // CIGAR and sequence disagree; validation reports it later.
            return None;
        }
    }
    md.extend_from_slice(run.to_string().as_bytes());

    let aux = r.aux();
    // Where RG starts when it is the last tag and came from the series.
    let mut at = 0;
    let mut last_rg = None;
    while rg_from_series && at + 3 <= aux.len() {
        let len = aux_value_len(aux[at + 2], &aux[at + 3..])?;
        if aux[at..at + 2] == *b"RG" && at + 3 + len == aux.len() {
            last_rg = Some(at);
        }
        at += 3 + len;
    }
    let split = framed.len() - aux.len() + last_rg.unwrap_or(aux.len());
    let mut out = Vec::with_capacity(framed.len() + md.len() + 12);
    out.extend_from_slice(&framed[..split]);
    if !has_md {
        out.extend_from_slice(b"MDZ");
        out.extend_from_slice(&md);
        out.push(0);
    }
    if !has_nm {
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
    out.extend_from_slice(&framed[split..]);
    let block_size = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&block_size.to_le_bytes());
    Some(out)
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

    fn tags(framed: &[u8]) -> Vec<u8> {
        RecordRef::with_block_size(framed).aux().to_vec()
    }

    #[test]
    fn mismatch_insertion_deletion_and_soft_clip() {
        //            0123456789
        let reference = b"ACGTACGTACGTAC";
        // 2S 3M 1I 2M 2D 2M at pos 1: ref CGT | AC | (GT deleted) | AC
        let rec = record(
            0,
            1,
            &[(4, 2), (0, 3), (1, 1), (0, 2), (2, 2), (0, 2)],
            b"TTCGAGACAC",
            b"RGZg1\0",
        );
        let out = with_md_nm(&rec, reference, true).expect("added");
        // CGT vs CGA: mismatch at the third base; AC = AC; ^GT; AC = AC.
        assert_eq!(tags(&out), b"MDZ2T2^GT2\0NMC\x04RGZg1\0".to_vec());
        // An RG stored as a tag (not from the series) stays before them.
        let out = with_md_nm(&rec, reference, false).expect("added");
        assert_eq!(tags(&out), b"RGZg1\0MDZ2T2^GT2\0NMC\x04".to_vec());
        assert_eq!(
            u32::from_le_bytes(out[..4].try_into().unwrap()) as usize,
            out.len() - 4
        );
    }

    #[test]
    fn present_tags_are_kept_and_only_the_missing_one_added() {
        let rec = record(0, 0, &[(0, 4)], b"ACGA", b"NMc\x07XYZv\0");
        let out = with_md_nm(&rec, b"ACGT", false).expect("MD added");
        assert_eq!(tags(&out), b"NMc\x07XYZv\0MDZ3T0\0".to_vec());
        let both = record(0, 0, &[(0, 4)], b"ACGA", b"MDZ3T0\0NMC\x01");
        assert!(with_md_nm(&both, b"ACGT", false).is_none());
    }

    #[test]
    fn unmapped_and_sequence_less_records_are_left_alone() {
        assert!(with_md_nm(&record(4, 0, &[(0, 4)], b"ACGT", b""), b"ACGT", false).is_none());
        assert!(with_md_nm(&record(0, 0, &[(0, 4)], b"", b""), b"ACGT", false).is_none());
    }
}
