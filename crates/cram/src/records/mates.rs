//! Mates within a slice: each record's mate data, the attached chains'
//! first records (for generated names), and the mate fields (flags,
//! RNEXT/PNEXT, TLEN) set once the slice is decoded, by htslib's rule.

use super::Fault;
use std::collections::HashMap;
use std::io;

/// One record's mate data, kept until the slice's mates are resolved.
#[derive(Clone, Copy)]
pub(super) struct Mate {
    /// Offset of the record (its `block_size`) in the output.
    pub(super) at: usize,
    pub(super) flag: u16,
    pub(super) ref_id: i32,
    pub(super) apos: i64,
    pub(super) aend: i64,
    /// The next record of the template in the slice (attached), or -1.
    pub(super) line: i64,
    pub(super) tlen: Option<i64>,
    pub(super) explicit_tlen: Option<i64>,
    /// From this record's own mate series (detached).
    pub(super) mate_ref: i32,
    pub(super) mate_pos: i64,
}

/// How far ahead of the current record [`ChainHeads`] grows its table for
/// a mate link.
const NEAR_LINES: usize = 1 << 16;

/// Per record line of a slice: the first record of the attached chain that
/// points at it.
#[derive(Default)]
pub(super) struct ChainHeads {
    /// By line (-1: none). Grown as records and mate links reach a line,
    /// never sized by the slice header's record count, which is not
    /// trusted: a count of 2^31 would otherwise allocate and fill 16 GiB
    /// up front.
    near: Vec<i64>,
    /// The same for lines more than [`NEAR_LINES`] ahead of the record
    /// whose mate link names them (only a malformed or unusually large
    /// slice has such links).
    far: HashMap<usize, i64>,
}

impl ChainHeads {
    /// Forgets the previous slice's chains.
    pub(super) fn clear(&mut self) {
        self.near.clear();
        self.far.clear();
    }

    /// The first record of the attached chain that points at line `rec`,
    /// or -1.
    #[inline]
    pub(super) fn of(&self, rec: usize) -> i64 {
        match self.near.get(rec) {
            Some(&h) if h >= 0 => h,
            _ if self.far.is_empty() => -1,
            _ => self.far.get(&rec).copied().unwrap_or(-1),
        }
    }

    /// Record `rec` names line `line` (after it) as its mate: that line's
    /// chain starts where `rec`'s does.
    #[inline]
    pub(super) fn link(&mut self, rec: usize, line: usize) {
        let head = match self.of(rec) {
            -1 => rec as i64,
            x => x,
        };
        if line - rec <= NEAR_LINES {
            if self.near.len() <= line {
                self.near.resize(line + 1, -1);
            }
            self.near[line] = head;
        } else {
            self.far.insert(line, head);
        }
    }
}

/// Sets the mate fields of the slice's records, framed in `out` at each
/// mate's `at` (htslib's `cram_decode_slice_xref`): attached mates from
/// each other, detached ones from their own series.
pub(super) fn resolve(ms: &mut [Mate], out: &mut [u8]) -> io::Result<()> {
    let n = ms.len();
    for rec in 0..n {
        if ms[rec].line >= 0 {
            if ms[rec].tlen.is_none() {
                // The chain from this record: its span and signs.
                let mut id2 = rec;
                let (mut aleft, mut aright) = (ms[rec].apos, ms[rec].aend);
                let (mut left_cnt, mut right_cnt) = (0, 0);
                let mut same_ref = true;
                let r = ms[rec].ref_id;
                let mut steps = 0;
                loop {
                    let m = ms[id2];
                    if aleft > m.apos {
                        aleft = m.apos;
                        left_cnt = 1;
                    } else if aleft == m.apos {
                        left_cnt += 1;
                    }
                    if aright < m.aend {
                        aright = m.aend;
                        right_cnt = 1;
                    } else if aright == m.aend {
                        right_cnt += 1;
                    }
                    if m.line == -1 {
                        ms[id2].line = rec as i64;
                        break;
                    }
                    if m.line as usize <= id2 || m.line as usize >= n {
                        // Record id2 is linked already (its line
                        // points back to its chain's first record).
                        return Err(Fault::MateOfTwo {
                            record: id2 as i64 + 1,
                        }
                        .into());
                    }
                    id2 = m.line as usize;
                    if ms[id2].ref_id != r {
                        same_ref = false;
                    }
                    steps += 1;
                    if steps > n || id2 == rec {
                        break;
                    }
                }
                let chain = |ms: &mut [Mate], f: &mut dyn FnMut(usize, &mut Mate)| {
                    let mut id = ms[rec].line as usize;
                    let mut guard = 0;
                    while id != rec && guard <= n {
                        let mut m = ms[id];
                        f(id, &mut m);
                        ms[id] = m;
                        match usize::try_from(ms[id].line) {
                            Ok(next) if next < n => id = next,
                            _ => break,
                        }
                        guard += 1;
                    }
                };
                if same_ref {
                    let mut tlen = aright - aleft + 1;
                    let head = ms[rec];
                    if head.apos == aleft && (head.aend < aright || left_cnt <= 1) {
                        ms[rec].tlen = Some(tlen);
                        tlen = -tlen;
                    } else if head.apos == aleft
                        && head.aend == aright
                        && left_cnt > 1
                        && right_cnt > 1
                    {
                        if head.flag & 0x40 != 0 {
                            ms[rec].tlen = Some(tlen);
                            tlen = -tlen;
                        } else {
                            ms[rec].tlen = Some(-tlen);
                        }
                    } else {
                        ms[rec].tlen = Some(-tlen);
                    }
                    chain(ms, &mut |_, m| m.tlen = Some(tlen));
                } else {
                    ms[rec].tlen = Some(0);
                    chain(ms, &mut |_, m| m.tlen = Some(0));
                }
            }
            let line = ms[rec].line as usize;
            if line < n {
                let mate = ms[line];
                let m = &mut ms[rec];
                m.mate_pos = mate.apos;
                m.mate_ref = mate.ref_id;
                m.flag |= 0x1;
                if mate.flag & 0x4 != 0 {
                    m.flag |= 0x8;
                    m.tlen = Some(0);
                }
                if m.flag & 0x4 != 0 {
                    m.tlen = Some(0);
                }
                if mate.flag & 0x10 != 0 {
                    m.flag |= 0x20;
                }
            }
        }
    }
    for m in ms.iter() {
        let tlen = m.explicit_tlen.or(m.tlen).unwrap_or(0);
        let r = &mut out[m.at + 4..];
        r[14..16].copy_from_slice(&m.flag.to_le_bytes());
        r[20..24].copy_from_slice(&m.mate_ref.to_le_bytes());
        r[24..28].copy_from_slice(&((m.mate_pos - 1).max(-1) as i32).to_le_bytes());
        r[28..32].copy_from_slice(&(tlen as i32).to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::fault;

    /// Mate data of a record at `apos..=aend` (1-based) on reference 0.
    fn mate(i: usize, flag: u16, apos: i64, aend: i64, line: i64) -> Mate {
        Mate {
            at: i * 36,
            flag,
            ref_id: 0,
            apos,
            aend,
            line,
            tlen: None,
            explicit_tlen: None,
            mate_ref: -1,
            mate_pos: 0,
        }
    }

    /// (flag, RNEXT, PNEXT, TLEN) of each record after the slice's mates
    /// are resolved.
    fn resolved(mates: Vec<Mate>) -> Vec<(u16, i32, i32, i32)> {
        let mut mates = mates;
        let mut out = vec![0u8; mates.len() * 36];
        resolve(&mut mates, &mut out).unwrap();
        let int = |r: &[u8], at: usize| i32::from_le_bytes(r[at..at + 4].try_into().unwrap());
        out.chunks(36)
            .map(|c| {
                let r = &c[4..];
                (
                    u16::from_le_bytes([r[14], r[15]]),
                    int(r, 20),
                    int(r, 24),
                    int(r, 28),
                )
            })
            .collect()
    }

    #[test]
    fn attached_mates_get_htslib_mate_fields_and_tlen() {
        // The rightmost first: the leftmost is positive; PNEXT from the mate.
        let got = resolved(vec![
            mate(0, 0x80 | 0x10, 401, 410, 1),
            mate(1, 0x40, 1, 10, -1),
        ]);
        assert_eq!(got, vec![(0x91, 0, 0, -410), (0x41 | 0x20, 0, 400, 410)]);
        // Equal starts: the one ending first is positive.
        let got = resolved(vec![mate(0, 0x40, 1, 20, 1), mate(1, 0x80, 1, 10, -1)]);
        assert_eq!((got[0].3, got[1].3), (-20, 20));
        // Equal starts and ends: READ1 is positive.
        let got = resolved(vec![mate(0, 0x80, 5, 14, 1), mate(1, 0x40, 5, 14, -1)]);
        assert_eq!((got[0].3, got[1].3), (-10, 10));
        // Other references: 0; an unmapped mate: 0 and mate-unmapped.
        let mut other = mate(1, 0x80, 5, 14, -1);
        other.ref_id = 1;
        let got = resolved(vec![mate(0, 0x40, 1, 10, 1), other]);
        assert_eq!((got[0].1, got[0].3, got[1].1, got[1].3), (1, 0, 0, 0));
        let got = resolved(vec![mate(0, 0x40, 1, 10, 1), mate(1, 0x80 | 0x4, 1, 1, -1)]);
        assert_eq!((got[0].0, got[0].3, got[1].0, got[1].3), (0x49, 0, 0x85, 0));
    }

    #[test]
    fn a_record_named_as_the_mate_of_two_is_an_error() {
        let mut mates = vec![
            mate(0, 0x40, 1, 10, 2),
            mate(1, 0x40, 1, 10, 2),
            mate(2, 0x80, 1, 10, -1),
        ];
        let mut out = vec![0u8; 3 * 36];
        let e = resolve(&mut mates, &mut out).unwrap_err();
        // Records 1 and 2 both name record 3.
        assert!(matches!(fault(&e), Fault::MateOfTwo { record: 3 }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "record 3 of the slice is the mate of two records"
        );
    }
}
