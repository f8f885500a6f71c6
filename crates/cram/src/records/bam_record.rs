//! A decoded record written as BAM bytes, framed by its `block_size`: the
//! fixed fields (mate fields left zero), name, CIGAR (in its long form with
//! a CG tag beyond 65,535 operations), bases and qualities, the stored
//! tags, then what htslib's reader adds after them: MD/NM computed against
//! the reference (`md_nm.rs`) and RG from the read-group series.

use super::slice::{Bases, Core, FileInfo, SliceDecoder};
use super::{out_of_range, Fault, CF_NO_SEQ};
use crate::md_nm;
use alnsort_bam::cigar::{self, op};
use alnsort_bam::record::reg2bin;
use std::io;

impl SliceDecoder {
    /// Appends the record decoded into `self` (name, CIGAR, bases,
    /// qualities, tags) to `out`, framed. `has_md`/`has_nm`: whether it
    /// carries (or is not to be given) MD and NM.
    #[inline]
    pub(super) fn write_bam(
        &mut self,
        file: &FileInfo,
        core: &Core<'_>,
        bases: &Bases<'_>,
        has_md: bool,
        has_nm: bool,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let (ref_id, apos, flag, rl) = (core.ref_id, core.apos, core.flag, core.rl);
        let (l_seq, span) = (bases.l_seq, bases.span);
        let unmapped = flag & 0x4 != 0;
        let start = out.len();
        let pos = apos - 1;
        let l_name = u8::try_from(self.name.len() + 1)
            .map_err(|_| out_of_range("read name length", self.name.len()))?;
        let long_cigar = self.cigar.len() > 0xffff;
        let bin = {
            let extent = if unmapped { rl as i64 } else { span };
            if pos < 0 || (extent == 0 && pos == 0) {
                4680
            } else {
                reg2bin(pos, pos + extent)
            }
        };
        let pos32 = i32::try_from(pos.max(-1)).map_err(|_| out_of_range("position", apos))?;
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&ref_id.to_le_bytes());
        out.extend_from_slice(&pos32.to_le_bytes());
        out.push(l_name);
        out.push(bases.mapq);
        out.extend_from_slice(&bin.to_le_bytes());
        let n_cigar: u16 = if long_cigar {
            2
        } else {
            self.cigar.len() as u16
        };
        out.extend_from_slice(&n_cigar.to_le_bytes());
        out.extend_from_slice(&flag.to_le_bytes());
        out.extend_from_slice(&(l_seq as u32).to_le_bytes());
        // Mate fields: set when the slice's mates are resolved.
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(&self.name);
        out.push(0);
        if long_cigar {
            out.extend_from_slice(&((l_seq as u32) << 4 | 4).to_le_bytes());
            out.extend_from_slice(&((span as u32) << 4 | 3).to_le_bytes());
        } else {
            for c in &self.cigar {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        let seq = &self.seq[..l_seq];
        out.extend(
            seq.chunks(2)
                .map(|p| md_nm::nt16(p[0]) << 4 | p.get(1).map_or(0, |&b| md_nm::nt16(b))),
        );
        out.extend_from_slice(&self.qual[..l_seq]);
        out.extend_from_slice(&self.tags);
        // htslib adds MD/NM to a placed record unless its CRAM flags say it
        // has no sequence: a read of length 0 not so flagged (old htsjdk
        // wrote them) gets them too.
        if !unmapped && ref_id >= 0 && core.cf & CF_NO_SEQ == 0 && !(has_md && has_nm) {
            if let Some(refseq) = bases.refseq {
                self.push_md_nm(file, core, l_seq, refseq, has_md, has_nm, out)?;
            }
        }
        if let Some(rg) = core.rg {
            out.extend_from_slice(b"RGZ");
            out.extend_from_slice(rg);
            out.push(0);
        }
        if long_cigar {
            out.extend_from_slice(b"CGBI");
            out.extend_from_slice(&(self.cigar.len() as u32).to_le_bytes());
            for c in &self.cigar {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        let block_size = u32::try_from(out.len() - start - 4)
            .map_err(|_| out_of_range("record size", out.len() - start - 4))?;
        out[start..start + 4].copy_from_slice(&block_size.to_le_bytes());
        Ok(())
    }

    /// Appends the MD (unless `has_md`) and NM (unless `has_nm`) htslib's
    /// reader computes for a placed record of `l_seq` bases against
    /// `(reference, offset)`: its bases from `offset` (0-based; an embedded
    /// reference starts at the slice's start).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn push_md_nm(
        &mut self,
        file: &FileInfo,
        core: &Core<'_>,
        l_seq: usize,
        (reference, offset): (&[u8], i64),
        has_md: bool,
        has_nm: bool,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let apos = core.apos;
        let at = usize::try_from(apos - 1 - offset)
            .map_err(|_| Fault::BeforeEmbeddedReference { position: apos })?;
        // In `reference`'s coordinates.
        let offset = usize::try_from(offset).unwrap_or(0);
        let ends = md_nm::Ends {
            reference: (file.ref_lengths[core.ref_id as usize] as usize).saturating_sub(offset),
            md: self.md_end.saturating_sub(offset),
        };
        let cigar = if self.zero_dels.is_empty() {
            &self.cigar
        } else {
            self.md_cigar.clear();
            let mut dels = self.zero_dels.iter().peekable();
            for (i, &c) in self.cigar.iter().enumerate() {
                while dels.next_if(|&&d| d == i).is_some() {
                    self.md_cigar.push(cigar::pack(op::DELETION, 0));
                }
                self.md_cigar.push(c);
            }
            self.md_cigar
                .extend(dels.map(|_| cigar::pack(op::DELETION, 0)));
            &self.md_cigar
        };
        let seq = &self.seq[..l_seq];
        if let Some(nm) = md_nm::compute(seq, cigar, at, reference, ends, &mut self.md) {
            md_nm::push(
                out,
                (!has_md).then_some(&self.md[..]),
                (!has_nm).then_some(nm),
            );
        }
        Ok(())
    }
}
