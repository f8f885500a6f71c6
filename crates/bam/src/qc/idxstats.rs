//! `samtools idxstats` 1.24's table: from an indexed BAM's pseudo-bins (hts.c `hts_idx_push`), or from a scan of any other file (bam_index.c `slow_idxstats`).

use crate::header::Header;
use std::fmt::Write;

/// How `samtools idxstats` gets its counts for the written file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdxstatsForm {
    /// A BAM file with an index samtools finds beside it: each reference's
    /// pseudo-bin (mapped counts every record without 0x4 secondary and
    /// supplementary included, unmapped every placed 0x4 record), then
    /// `*\t0\t0\t<records without a reference>`.
    Index,
    /// SAM, CRAM, or BAM without an index: samtools reads every record;
    /// the last line splits the records without a reference by 0x4
    /// (`*\t0\t<without 0x4>\t<with 0x4>`), and a reference that comes back
    /// after another is an error ("file is not position sorted").
    Scan,
}

/// samtools' scan fails: a reference's records are not all together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "record {record} is on reference {} after records on another: samtools idxstats \
     reads this file as not position sorted and prints no table",
    ref_name(*ref_id)
)]
pub struct NotSorted {
    /// 0-based number of the record in the file.
    pub record: u64,
    pub ref_id: i32,
}

fn ref_name(ref_id: i32) -> String {
    if ref_id < 0 {
        "* (none)".to_string()
    } else {
        format!("#{}", ref_id + 1)
    }
}

/// Records per reference (index 0: without 0x4, 1: with 0x4) and the
/// order they came in, over a stretch of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idxstats {
    counts: Vec<[u64; 2]>,
    /// Records without a reference (ref id -1).
    unplaced: [u64; 2],
    records: u64,
    /// Reference id of the stretch's first and last record (-2: none).
    first: i32,
    last: i32,
    /// The first record whose reference had records before, after others.
    not_sorted: Option<NotSorted>,
}

impl Idxstats {
    /// Nothing counted, for a header of `n_ref` references.
    pub fn new(n_ref: usize) -> Idxstats {
        Idxstats {
            counts: vec![[0; 2]; n_ref],
            unplaced: [0; 2],
            records: 0,
            first: -2,
            last: -2,
            not_sorted: None,
        }
    }

    fn slot(&mut self, ref_id: i32) -> &mut [u64; 2] {
        if ref_id < 0 {
            return &mut self.unplaced;
        }
        let i = ref_id as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, [0; 2]);
        }
        &mut self.counts[i]
    }

    fn seen(&self, ref_id: i32) -> bool {
        let c = if ref_id < 0 {
            Some(&self.unplaced)
        } else {
            self.counts.get(ref_id as usize)
        };
        c.is_some_and(|c| c[0] + c[1] > 0)
    }

    /// Counts the next record: its reference id (-1 for none) and whether
    /// it has 0x4.
    #[inline]
    pub fn push(&mut self, ref_id: i32, unmapped: bool) {
        let ref_id = ref_id.max(-1);
        if ref_id != self.last {
            if self.not_sorted.is_none() && self.seen(ref_id) {
                self.not_sorted = Some(NotSorted {
                    record: self.records,
                    ref_id,
                });
            }
            if self.first == -2 {
                self.first = ref_id;
            }
            self.last = ref_id;
        }
        self.slot(ref_id)[usize::from(unmapped)] += 1;
        self.records += 1;
    }

    /// Adds the counts of `later`, the stretch of records right after this
    /// one's (in file order: a reference seen in both stretches is out of
    /// order unless it is where they meet).
    pub fn merge_after(&mut self, later: &Idxstats) {
        if self.not_sorted.is_none() {
            let reappears = |id: i32| self.seen(id) && !(id == self.last && id == later.first);
            let mut first_bad: Option<NotSorted> = later.not_sorted.clone().map(|mut n| {
                n.record += self.records;
                n
            });
            // A reference of `later` counted here too is out of order where
            // `later` first reaches it; the earliest such record is the one
            // samtools stops at. Without record numbers per reference, the
            // start of `later` (or of its first run) stands for it.
            let ids = (-1..later.counts.len() as i32).filter(|&id| later.seen(id));
            for id in ids {
                if reappears(id) {
                    let at = NotSorted {
                        record: self.records,
                        ref_id: id,
                    };
                    first_bad = Some(match first_bad {
                        Some(b) if b.record <= at.record => b,
                        _ => at,
                    });
                }
            }
            self.not_sorted = first_bad;
        }
        for (i, c) in later.counts.iter().enumerate() {
            let s = self.slot(i as i32);
            s[0] += c[0];
            s[1] += c[1];
        }
        self.unplaced[0] += later.unplaced[0];
        self.unplaced[1] += later.unplaced[1];
        if later.records > 0 {
            if self.first == -2 {
                self.first = later.first;
            }
            self.last = later.last;
        }
        self.records += later.records;
    }

    /// Whether samtools' scan would refuse the file, and where.
    pub fn not_sorted(&self) -> Option<&NotSorted> {
        self.not_sorted.as_ref()
    }

    /// The table `samtools idxstats` prints for the file (`header` its
    /// header), reading it as `form` says; for [`IdxstatsForm::Scan`] of
    /// a file whose references are not each in one stretch, samtools'
    /// error instead.
    pub fn render(&self, header: &Header, form: IdxstatsForm) -> Result<String, NotSorted> {
        if form == IdxstatsForm::Scan {
            if let Some(e) = &self.not_sorted {
                return Err(e.clone());
            }
        }
        let mut s = String::new();
        for (i, r) in header.refs().iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or([0; 2]);
            let _ = writeln!(
                s,
                "{}\t{}\t{}\t{}",
                String::from_utf8_lossy(&r.name),
                r.len,
                c[0],
                c[1]
            );
        }
        let _ = match form {
            IdxstatsForm::Index => {
                writeln!(s, "*\t0\t0\t{}", self.unplaced[0] + self.unplaced[1])
            }
            IdxstatsForm::Scan => {
                writeln!(s, "*\t0\t{}\t{}", self.unplaced[0], self.unplaced[1])
            }
        };
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        crate::header::parse_sam_header(
            ["@SQ\tSN:chr1\tLN:1000", "@SQ\tSN:chr2\tLN:20"].map(str::as_bytes),
        )
        .expect("header")
    }

    #[test]
    fn tables_in_both_forms() {
        let mut s = Idxstats::new(2);
        for (id, unmapped) in [(0, false), (0, true), (1, false), (-1, true), (-1, false)] {
            s.push(id, unmapped);
        }
        let h = header();
        assert_eq!(
            s.render(&h, IdxstatsForm::Index).expect("table"),
            "chr1\t1000\t1\t1\nchr2\t20\t1\t0\n*\t0\t0\t2\n"
        );
        assert_eq!(
            s.render(&h, IdxstatsForm::Scan).expect("table"),
            "chr1\t1000\t1\t1\nchr2\t20\t1\t0\n*\t0\t1\t1\n"
        );
    }

    #[test]
    fn a_reference_that_comes_back_fails_the_scan() {
        let mut s = Idxstats::new(2);
        for id in [0, 0, 1, 0, 1] {
            s.push(id, false);
        }
        assert_eq!(
            s.not_sorted(),
            Some(&NotSorted {
                record: 3,
                ref_id: 0
            })
        );
        assert!(s.render(&header(), IdxstatsForm::Scan).is_err());
        assert!(s.render(&header(), IdxstatsForm::Index).is_ok());
    }

    /// Stretches merged in order give the counts and the verdict of the
    /// whole, wherever the stretches are cut.
    #[test]
    fn merging_in_order_is_counting_the_whole() {
        for ids in [
            vec![0, 0, 1, 1, -1, -1],
            vec![0, 1, 0],
            vec![1, 1, 0, 0, 1],
            vec![-1, 0],
            vec![0, 0, 0],
        ] {
            let mut whole = Idxstats::new(2);
            for &id in &ids {
                whole.push(id, id == -1);
            }
            for cut in 0..=ids.len() {
                let (mut a, mut b) = (Idxstats::new(2), Idxstats::new(2));
                ids[..cut].iter().for_each(|&id| a.push(id, id == -1));
                ids[cut..].iter().for_each(|&id| b.push(id, id == -1));
                a.merge_after(&b);
                assert_eq!(a.counts, whole.counts, "{ids:?} cut at {cut}");
                assert_eq!(a.unplaced, whole.unplaced);
                assert_eq!(
                    a.not_sorted.is_some(),
                    whole.not_sorted.is_some(),
                    "{ids:?} cut at {cut}"
                );
            }
        }
    }
}
