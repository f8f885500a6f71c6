//! Mate fields of a CRAM output slice checked against what a reader
//! rebuilds (htslib 1.24's rule for mates attached within a slice: `+T` to
//! the leftmost record by start, then by end, on a tie of both to READ1,
//! `-T` to the other, 0 when the mates are on different references or
//! either is unmapped; the decoder applies the same rule in `records.rs`).

use alnsort_bam::RecordRef;
use std::collections::HashMap;

/// Checks that a CRAM reader gives back every record's mate fields when
/// noodles-cram stores the records of one slice (`starts`: each record's
/// offset in `buf`): noodles attaches each segmented, non-secondary record
/// to the next one of the same name in the slice without checking, and a
/// reader then rebuilds RNEXT, PNEXT, the mate flags and TLEN from the mate
/// (htslib's rule, see the module). `Err((index, what))` names
/// the first record whose stored values would not come back.
pub(crate) fn check_slice(buf: &[u8], starts: &[usize]) -> Result<(), (usize, String)> {
    let rec = |i: usize| RecordRef::with_block_size(&buf[starts[i]..]);
    // Records of each name in slice order: first, second, how many. The
    // names are checked in the order of their first record, so the error
    // names the same record on every run.
    let mut group_of: HashMap<&[u8], usize> = HashMap::with_capacity(starts.len());
    let mut groups: Vec<[usize; 3]> = Vec::with_capacity(starts.len());
    for i in 0..starts.len() {
        let r = rec(i);
        if r.flag() & 0x1 != 0 && r.flag() & 0x100 == 0 {
            match group_of.entry(r.read_name()) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    let g = &mut groups[*e.get()];
                    if g[2] == 1 {
                        g[1] = i;
                    }
                    g[2] += 1;
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(groups.len());
                    groups.push([i, i, 1]);
                }
            }
        }
    }
    for &[first, second, count] in &groups {
        if count < 2 {
            continue;
        }
        let m = [first, second];
        let name = String::from_utf8_lossy(rec(first).read_name()).into_owned();
        if count > 2 {
            return Err((
                first,
                format!(
                    "{count} records named {name} in one CRAM slice (noodles-cram 0.102 would chain \
                     them as mates and readers would rebuild their mate fields)"
                ),
            ));
        }
        let (a, b) = (rec(m[0]), rec(m[1]));
        let bad = |x: &RecordRef, y: &RecordRef, want_tlen: i32| -> Option<String> {
            let mate_unmapped = y.flag() & 0x4 != 0;
            let mate_rev = y.flag() & 0x10 != 0;
            if x.next_ref_id() != y.ref_id() || x.next_pos() != y.pos() {
                return Some("RNEXT/PNEXT other than its mate's position".into());
            }
            if (x.flag() & 0x8 != 0) != mate_unmapped || (x.flag() & 0x20 != 0) != mate_rev {
                return Some("mate flags (0x8, 0x20) other than its mate's".into());
            }
            if x.tlen() != want_tlen {
                return Some(format!(
                    "TLEN {} where a CRAM reader rebuilds {want_tlen} from its mate",
                    x.tlen()
                ));
            }
            None
        };
        let (ta, tb) = htslib_pair_tlen(&a, &b);
        for (i, x, y, t) in [(m[0], &a, &b, ta), (m[1], &b, &a, tb)] {
            if let Some(why) = bad(x, y, t) {
                return Err((
                    i,
                    format!(
                        "{why} (read {name}; noodles-cram 0.102 stores mates in one slice \
                         attached, and readers rebuild these fields)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The TLENs htslib gives two attached mates.
fn htslib_pair_tlen(a: &RecordRef, b: &RecordRef) -> (i32, i32) {
    if (a.flag() | b.flag()) & 0x4 != 0 || a.ref_id() != b.ref_id() {
        return (0, 0);
    }
    let key = |r: &RecordRef| (r.pos() as i64, r.pos() as i64 + r.reference_length());
    let (ka, kb) = (key(a), key(b));
    let t = (ka.1.max(kb.1) - ka.0.min(kb.0)) as i32;
    let a_plus = ka < kb || (ka == kb && a.flag() & 0x40 != 0);
    let b_plus = kb < ka || (ka == kb && b.flag() & 0x40 != 0);
    (if a_plus { t } else { -t }, if b_plus { t } else { -t })
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

    fn slice(recs: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut starts = Vec::new();
        for r in recs {
            starts.push(buf.len());
            buf.extend_from_slice(r);
        }
        (buf, starts)
    }

    /// A paired record with RNEXT/PNEXT set.
    fn mate_rec(name: &[u8], flag: u16, pos: i32, next_pos: i32, tlen: i32) -> Vec<u8> {
        let mut r = rec(name, flag, 0, pos, tlen);
        r[4 + 24..4 + 28].copy_from_slice(&next_pos.to_le_bytes());
        r
    }

    #[test]
    fn consistent_mates_pass_and_others_are_named() {
        let (buf, starts) = slice(&[
            mate_rec(b"m", 0x1 | 0x40 | 0x20, 100, 300, 210),
            mate_rec(b"m", 0x1 | 0x80 | 0x10, 300, 100, -210),
        ]);
        assert_eq!(check_slice(&buf, &starts), Ok(()));
        // TLEN by another convention (5' ends): a reader would change it.
        let (buf, starts) = slice(&[
            mate_rec(b"m", 0x1 | 0x40 | 0x20, 100, 300, 200),
            mate_rec(b"m", 0x1 | 0x80 | 0x10, 300, 100, -200),
        ]);
        let (i, why) = check_slice(&buf, &starts).unwrap_err();
        assert_eq!(i, 0);
        assert!(why.contains("TLEN 200") && why.contains("read m"), "{why}");
        // Three segments of one name.
        let (buf, starts) = slice(&[
            mate_rec(b"t", 0x1 | 0x40, 100, 300, 0),
            mate_rec(b"t", 0x1 | 0x800 | 0x40, 200, 300, 0),
            mate_rec(b"t", 0x1 | 0x80, 300, 100, 0),
        ]);
        assert!(check_slice(&buf, &starts)
            .unwrap_err()
            .1
            .contains("3 records named t"));
    }

    #[test]
    fn the_first_bad_pair_in_slice_order_is_named() {
        // Eight pairs of which every one has a bad TLEN: the error names
        // the first record of the slice, whatever the hashing order.
        let names: Vec<Vec<u8>> = (0..8).map(|k| format!("p{k}").into_bytes()).collect();
        let mut recs = Vec::new();
        for name in &names {
            recs.push(mate_rec(name, 0x1 | 0x40 | 0x20, 100, 300, 200));
            recs.push(mate_rec(name, 0x1 | 0x80 | 0x10, 300, 100, -200));
        }
        let (buf, starts) = slice(&recs);
        for _ in 0..4 {
            let (i, why) = check_slice(&buf, &starts).unwrap_err();
            assert_eq!(i, 0);
            assert!(why.contains("read p0"), "{why}");
        }
    }
}
