//! A mapped record's read features (CRAM 3 §10.6) decoded into its bases,
//! qualities and CIGAR: bases from the features' series or from the
//! reference (implicit matches, substitutions through the substitution
//! matrix), and where htslib's MD ends past the reference's end.

use super::compression_header::{CompressionHeader, Ds};
use super::slice::SliceDecoder;
use super::streams::Streams;
use super::{out_of_range, Fault, CF_QUAL_ARRAY};
use alnsort_bam::cigar::{self, op};
use std::io;

/// The substitution matrix row of a reference base.
fn base_row(b: u8) -> usize {
    match b {
        b'A' | b'a' => 0,
        b'C' | b'c' => 1,
        b'G' | b'g' => 2,
        b'T' | b't' => 3,
        _ => 4,
    }
}

/// Cigar being built: pending operation and length.
struct Cig<'a> {
    ops: &'a mut Vec<u32>,
    zero_dels: &'a mut Vec<usize>,
    op: u8,
    len: u32,
}

impl Cig<'_> {
    #[inline]
    fn switch(&mut self, op: u8) {
        if self.op != op {
            self.flush();
        }
        self.op = op;
    }

    /// Extends the CIGAR by `n` of `op`, merged with a preceding `op`.
    #[inline]
    fn add(&mut self, op: u8, n: u32) {
        self.switch(op);
        self.len = self.len.saturating_add(n);
    }

    /// Ends the operation being built, if it has a length.
    #[inline]
    fn flush(&mut self) {
        if self.len > 0 {
            self.ops.push(cigar::pack(self.op, self.len));
            self.len = 0;
        }
    }
}

/// A read being built from its features: its buffers, the CIGAR, and where
/// the walk stands in the read and on the reference.
struct Walk<'a> {
    cig: Cig<'a>,
    seq: &'a mut Vec<u8>,
    qual: &'a mut Vec<u8>,
    /// A byte-array feature's value (soft clip, insertion, bases, scores).
    array: &'a mut Vec<u8>,
    /// The 1-based position in the read of the next base to give.
    seq_pos: i64,
    /// The 0-based reference position facing it.
    ref_pos: i64,
    /// The reference position of the first feature to give a base past the
    /// reference's end (htslib ends its MD there), or `i64::MAX`.
    md_end: i64,
    /// The read's length and CRAM flags.
    rl: usize,
    cf: i32,
    /// The reference's length (its @SQ LN) and its bases with the 0-based
    /// position of the first.
    ref_len: i64,
    refseq: Option<(&'a [u8], i64)>,
}

impl Walk<'_> {
    /// `n` bases equal to the reference's (an implicit match).
    #[inline]
    fn implicit_match(&mut self, n: i64) {
        if self.rl > 0 {
            copy_ref(
                self.seq,
                (self.seq_pos - 1) as usize,
                n as usize,
                self.ref_pos,
                self.ref_len,
                self.refseq,
            );
        }
        self.cig.add(op::MATCH, n as u32);
        self.ref_pos += n;
    }

    /// The reference base at 0-based `p` (N past its end or without one).
    #[inline]
    fn ref_at(&self, p: i64) -> u8 {
        match self.refseq {
            Some((r, off)) if p < self.ref_len => usize::try_from(p - off)
                .ok()
                .and_then(|i| r.get(i))
                .copied()
                .unwrap_or(b'N'),
            _ => b'N',
        }
    }

    /// The first quality a feature gives: a read without stored qualities
    /// gets 30 for every base first (htslib's rule).
    #[inline]
    fn fill_qual(&mut self) {
        if self.cf & CF_QUAL_ARRAY == 0 && self.rl > 0 && self.qual[0] == 0xff {
            self.qual.iter_mut().for_each(|q| *q = 30);
        }
    }

    /// Applies the feature of code `code` at 0-based read position `at`,
    /// reading its value from its series.
    #[inline]
    fn feature(
        &mut self,
        ch: &CompressionHeader,
        st: &mut Streams<'_>,
        code: u8,
        at: usize,
    ) -> io::Result<()> {
        let ds = |d: Ds| &ch.series[d as usize];
        let rl = self.rl;
        match code {
            b'S' => {
                self.array.clear();
                let n = st.array(ds(Ds::SC), self.array, 1)?;
                put(self.seq, rl, at, self.array)?;
                self.cig.flush();
                self.cig.ops.push(cigar::pack(op::SOFT_CLIP, n as u32));
                self.cig.op = op::SOFT_CLIP;
                self.seq_pos += n as i64;
            }
            b'X' => {
                if self.ref_pos >= self.ref_len {
                    self.md_end = self.md_end.min(self.ref_pos);
                }
                let code = st.byte(ds(Ds::BS))? as usize & 3;
                let row = if self.refseq.is_none() || self.ref_pos >= self.ref_len {
                    4
                } else {
                    base_row(self.ref_at(self.ref_pos))
                };
                put(self.seq, rl, at, &[ch.substitutions[row][code]])?;
                self.cig.add(op::MATCH, 1);
                self.seq_pos += 1;
                self.ref_pos += 1;
            }
            b'D' => {
                let n = nonneg(st.int(ds(Ds::DL))?)?;
                self.cig.add(op::DELETION, n);
                if n == 0 {
                    // htslib's decoder ends the operation before it
                    // (as `add` did) and writes `^` into the MD.
                    self.cig.zero_dels.push(self.cig.ops.len());
                }
                self.ref_pos += n as i64;
            }
            b'I' => {
                self.array.clear();
                let n = st.array(ds(Ds::IN), self.array, 1)?;
                put(self.seq, rl, at, self.array)?;
                self.cig.add(op::INSERTION, n as u32);
                self.seq_pos += n as i64;
            }
            b'i' => {
                let b = st.byte(ds(Ds::BA))?;
                put(self.seq, rl, at, &[b])?;
                self.cig.add(op::INSERTION, 1);
                self.seq_pos += 1;
            }
            b'b' => {
                self.array.clear();
                let n = st.array(ds(Ds::BB), self.array, 1)?;
                if n > 0 && self.ref_pos + n as i64 > self.ref_len {
                    self.md_end = self.md_end.min(self.ref_pos.max(self.ref_len));
                }
                put(self.seq, rl, at, self.array)?;
                self.cig.add(op::MATCH, n as u32);
                self.seq_pos += n as i64;
                self.ref_pos += n as i64;
            }
            b'q' => {
                self.cig.switch(op::MATCH);
                self.fill_qual();
                self.array.clear();
                st.array(ds(Ds::QQ), self.array, 1)?;
                put(self.qual, rl, at, self.array)?;
            }
            b'B' => {
                if self.ref_pos >= self.ref_len {
                    self.md_end = self.md_end.min(self.ref_pos);
                }
                let b = st.byte(ds(Ds::BA))?;
                put(self.seq, rl, at, &[b])?;
                self.fill_qual();
                let q = st.byte(ds(Ds::QS))?;
                put(self.qual, rl, at, &[q])?;
                self.cig.add(op::MATCH, 1);
                self.seq_pos += 1;
                self.ref_pos += 1;
            }
            b'Q' => {
                self.fill_qual();
                let q = st.byte(ds(Ds::QS))?;
                put(self.qual, rl, at, &[q])?;
            }
            b'H' => {
                self.cig.add(op::HARD_CLIP, nonneg(st.int(ds(Ds::HC))?)?);
            }
            b'P' => {
                self.cig.add(op::PADDING, nonneg(st.int(ds(Ds::PD))?)?);
            }
            b'N' => {
                let n = nonneg(st.int(ds(Ds::RS))?)?;
                self.cig.add(op::SKIP, n);
                self.ref_pos += n as i64;
            }
            code => return Err(Fault::UnknownFeature { code }.into()),
        }
        Ok(())
    }
}

impl SliceDecoder {
    /// Decodes a mapped record's read features into its bases, qualities
    /// and CIGAR (`self.seq`, `self.qual`, `self.cigar`, sized by the
    /// caller), and where its MD ends (`self.md_end`); returns its
    /// reference span. `ref_len`: its reference's length; `refseq`: its
    /// reference's bases and the 0-based position of the first, if any.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn features(
        &mut self,
        ch: &CompressionHeader,
        st: &mut Streams<'_>,
        cf: i32,
        rl: usize,
        apos: i64,
        ref_len: i64,
        refseq: Option<(&[u8], i64)>,
    ) -> io::Result<i64> {
        let ds = |d: Ds| &ch.series[d as usize];
        let fn_ = st.int(ds(Ds::FN))?;
        self.md_end = usize::MAX;
        self.zero_dels.clear();
        let mut w = Walk {
            cig: Cig {
                ops: &mut self.cigar,
                zero_dels: &mut self.zero_dels,
                op: op::MATCH,
                len: 0,
            },
            seq: &mut self.seq,
            qual: &mut self.qual,
            array: &mut self.array,
            seq_pos: 1,
            ref_pos: apos - 1,
            md_end: i64::MAX,
            rl,
            cf,
            ref_len,
            refseq,
        };
        let rl_i = rl as i64;
        let mut prev_pos: i64 = 0;
        for _ in 0..fn_ {
            let code = st.byte(ds(Ds::FC))?;
            let pos = prev_pos + st.int(ds(Ds::FP))? as i64;
            if pos <= 0 {
                return Err(Fault::FeatureOutsideRead {
                    position: pos,
                    read_length: rl_i,
                }
                .into());
            }
            if rl != 0 && pos > rl_i {
                let valid_end = if matches!(code, b'N' | b'P' | b'H' | b'D') {
                    rl_i + 1
                } else {
                    rl_i
                };
                if pos > valid_end {
                    return Err(Fault::FeatureOutsideRead {
                        position: pos,
                        read_length: rl_i,
                    }
                    .into());
                }
            }
            if pos > w.seq_pos {
                w.implicit_match(pos - w.seq_pos);
                w.seq_pos = pos;
            }
            prev_pos = pos;
            w.feature(ch, st, code, (pos - 1) as usize)?;
        }
        // An implicit match for the bases after the last feature.
        if rl_i >= w.seq_pos {
            w.implicit_match(rl_i - w.seq_pos + 1);
        }
        w.cig.flush();
        let (ref_pos, md_end) = (w.ref_pos, w.md_end);
        self.md_end = usize::try_from(md_end).unwrap_or(usize::MAX);
        Ok(ref_pos - (apos - 1))
    }
}

/// Copies the `n` reference bases from 0-based `ref_pos` into `seq` at
/// `at` (an implicit match); a base past the reference's end is `N`. Without
/// a reference the read keeps its `=`s.
fn copy_ref(
    seq: &mut [u8],
    at: usize,
    n: usize,
    ref_pos: i64,
    ref_len: i64,
    refseq: Option<(&[u8], i64)>,
) {
    let Some((r, off)) = refseq else {
        return;
    };
    let dst = &mut seq[at..at + n];
    let from = ref_pos - off;
    if from >= 0 && ref_pos + n as i64 <= ref_len {
        if let Some(src) = r.get(from as usize..from as usize + n) {
            dst.copy_from_slice(src);
            return;
        }
    }
    for (i, d) in dst.iter_mut().enumerate() {
        let p = ref_pos + i as i64;
        *d = if p < ref_len && p - off >= 0 {
            r.get((p - off) as usize).copied().unwrap_or(b'N')
        } else {
            b'N'
        };
    }
}

fn nonneg(v: i32) -> io::Result<u32> {
    u32::try_from(v).map_err(|_| out_of_range("feature length", v))
}

/// Writes `bytes` at `at` of a read of `rl` bases (nothing when the read
/// has no stored length).
fn put(buf: &mut [u8], rl: usize, at: usize, bytes: &[u8]) -> io::Result<()> {
    if rl == 0 {
        return Ok(());
    }
    buf.get_mut(at..at + bytes.len())
        .ok_or(Fault::FeatureOutsideRead {
            position: (at + bytes.len()) as i64,
            read_length: rl as i64,
        })?
        .copy_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::fault;

    /// Feature lengths and positions out of the read: the typed fault
    /// with the values read.
    #[test]
    fn feature_faults_are_typed() {
        let e = nonneg(-3).unwrap_err();
        assert!(
            matches!(
                fault(&e),
                Fault::OutOfRange {
                    field: "feature length",
                    value: -3
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "feature length -3 out of range");
        let e = put(&mut [0; 4], 4, 3, b"ab").unwrap_err();
        assert!(
            matches!(
                fault(&e),
                Fault::FeatureOutsideRead {
                    position: 5,
                    read_length: 4
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "read feature at position 5 outside the read of 4 bases"
        );
    }
}
