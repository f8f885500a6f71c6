//! Counts of the records written, as `samtools flagstat` and `samtools idxstats` 1.24 report them for the written file.
//!
//! Each record is reduced to what the two reports read of it ([`QcRecord`]:
//! flag, reference ids, MAPQ), as samtools reads it back from the file
//! ([`ReadBack`]: SAM text is parsed with htslib's fix-ups), and fed to a
//! [`QcTally`]. Tallies of consecutive stretches merge
//! ([`QcTally::merge_after`]), so that parts counted apart (per thread, per
//! part of an output) add up to the whole file's counts.

pub mod flagstat;
pub mod idxstats;

pub use flagstat::{Flagstat, FlagstatFormat};
pub use idxstats::{Idxstats, IdxstatsForm, NotSorted};

use crate::record::{flags, RecordRef};

/// How samtools reads the written file back, which decides what it sees of
/// a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBack {
    /// BAM or CRAM: the binary fields as written.
    Binary,
    /// SAM text (plain or BGZF): htslib's `sam_parse1` forces 0x4 where
    /// RNAME or CIGAR is `*`, and reads POS 0 (PNEXT 0) on a reference as
    /// no reference (no mate reference).
    SamText,
}

/// What flagstat and idxstats read of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QcRecord {
    pub flag: u16,
    pub ref_id: i32,
    pub mate_ref_id: i32,
    pub mapq: u8,
}

/// Bit of [`QcRecord::word`] above the flag: the mate's reference differs
/// from the read's (flagstat's "different chr", `mtid != tid`).
const WORD_DIFF_CHR: u32 = 1 << 16;
/// Bit of [`QcRecord::word`]: MAPQ is 5 or more (flagstat's `qual >= 5`).
const WORD_MAPQ5: u32 = 1 << 17;
/// flagstat's MAPQ threshold for "different chr (mapQ>=5)" (bam_stat.c).
const FLAGSTAT_MAPQ: u8 = 5;

impl QcRecord {
    /// The record `rec` as samtools sees it after reading it back from a
    /// file written in the form `read_back` says.
    pub fn of(rec: RecordRef<'_>, read_back: ReadBack) -> QcRecord {
        let (mut flag, tid, mtid) = (rec.flag(), rec.ref_id(), rec.next_ref_id());
        let (ref_id, mate_ref_id) = match read_back {
            ReadBack::Binary => (tid, mtid),
            ReadBack::SamText => {
                // sam_parse1: POS 0 on a reference drops the reference.
                let t = if tid >= 0 && rec.pos() < 0 { -1 } else { tid };
                if t < 0 || rec.n_cigar_op() == 0 {
                    flag |= flags::UNMAPPED;
                }
                // RNEXT: '*' for none, '=' for the read's own (as parsed),
                // else the name; PNEXT 0 on a reference drops it.
                let m = match mtid {
                    m if m < 0 => -1,
                    m if m == tid => t,
                    m => m,
                };
                let m = if m >= 0 && rec.next_pos() < 0 { -1 } else { m };
                (t, m)
            }
        };
        QcRecord {
            flag,
            ref_id: ref_id.max(-1),
            mate_ref_id,
            mapq: rec.mapq(),
        }
    }

    /// Flag and the two bits flagstat needs besides it, in one word (to
    /// travel in a BGZF note beside the reference id).
    pub fn word(&self) -> u32 {
        let mut w = u32::from(self.flag);
        if self.mate_ref_id != self.ref_id {
            w |= WORD_DIFF_CHR;
        }
        if self.mapq >= FLAGSTAT_MAPQ {
            w |= WORD_MAPQ5;
        }
        w
    }
}

/// Both reports' counts over a stretch of records, in file order.
#[derive(Debug, Clone)]
pub struct QcTally {
    pub flagstat: Flagstat,
    pub idxstats: Idxstats,
}

impl QcTally {
    /// Nothing counted, for a file whose header has `n_ref` references.
    pub fn new(n_ref: usize) -> QcTally {
        QcTally {
            flagstat: Flagstat::default(),
            idxstats: Idxstats::new(n_ref),
        }
    }

    /// Counts the next record.
    pub fn push(&mut self, rec: &QcRecord) {
        self.push_word(rec.ref_id, rec.word());
    }

    /// Counts the next record given as its reference id and
    /// [`QcRecord::word`].
    #[inline]
    pub fn push_word(&mut self, ref_id: i32, word: u32) {
        let flag = word as u16;
        self.flagstat
            .push(flag, word & WORD_DIFF_CHR != 0, word & WORD_MAPQ5 != 0);
        self.idxstats.push(ref_id, flag & flags::UNMAPPED != 0);
    }

    /// Adds the counts of `later`, the stretch of records right after this
    /// one's.
    pub fn merge_after(&mut self, later: &QcTally) {
        self.flagstat.merge(&later.flagstat);
        self.idxstats.merge_after(&later.idxstats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::testrec::Rec;

    fn seen(r: &Rec, how: ReadBack) -> QcRecord {
        QcRecord::of(RecordRef::new(&r.bytes()), how)
    }

    #[test]
    fn sam_text_is_read_back_with_htslibs_fixups() {
        // Placed at POS 0 (-1 in BAM): no reference, so unmapped; its mate
        // '=' follows the read.
        let mut r = Rec::new(b"q").at(0, -1, 0x1 | 0x2).mate(0, 5).cigar("4M");
        r.mapq = 30;
        let q = seen(&r, ReadBack::SamText);
        assert_eq!((q.ref_id, q.mate_ref_id, q.flag & 0x4), (-1, -1, 0x4));
        let b = seen(&r, ReadBack::Binary);
        assert_eq!((b.ref_id, b.mate_ref_id, b.flag & 0x4), (0, 0, 0));
        assert_eq!(b.word() & (WORD_DIFF_CHR | WORD_MAPQ5), WORD_MAPQ5);
        // No CIGAR: unmapped in SAM, mapped in BAM.
        let mut r = Rec::new(b"q").at(1, 10, 0x1).mate(0, 20);
        r.mapq = 3;
        let q = seen(&r, ReadBack::SamText);
        assert_eq!((q.ref_id, q.mate_ref_id, q.flag & 0x4), (1, 0, 0x4));
        assert_eq!(seen(&r, ReadBack::Binary).flag & 0x4, 0);
        assert_eq!(q.word() & (WORD_DIFF_CHR | WORD_MAPQ5), WORD_DIFF_CHR);
        // PNEXT 0 on a mate reference: no mate reference.
        let mut r = Rec::new(b"q").at(1, 10, 0x1).mate(0, -1).cigar("4M");
        r.mapq = 7;
        let q = seen(&r, ReadBack::SamText);
        assert_eq!((q.ref_id, q.mate_ref_id), (1, -1));
        assert_eq!(seen(&r, ReadBack::Binary).mate_ref_id, 0);
        assert_eq!(
            q.word() & (WORD_DIFF_CHR | WORD_MAPQ5),
            WORD_DIFF_CHR | WORD_MAPQ5
        );
    }
}
