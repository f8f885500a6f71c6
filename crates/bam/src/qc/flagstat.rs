//! `samtools flagstat` 1.24's counts (bam_stat.c `flagstat_loop`) and its three texts: default, `-O json`, `-O tsv`.

use crate::record::flags;
use std::fmt::Write;

/// The text `samtools flagstat -O FORMAT` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlagstatFormat {
    /// `A + B label` lines, percentages in parentheses.
    #[default]
    Default,
    /// Two objects, QC-passed and QC-failed reads.
    Json,
    /// `A\tB\tlabel` lines, percentages on lines of their own.
    Tsv,
}

impl FlagstatFormat {
    /// The format samtools' `-O` names (`json`/`JSON`, `tsv`/`TSV`,
    /// `default`); samtools prints the default text for any other name,
    /// which alnsort refuses instead (`None`).
    pub fn from_name(name: &str) -> Option<FlagstatFormat> {
        match name {
            "default" => Some(FlagstatFormat::Default),
            "json" | "JSON" => Some(FlagstatFormat::Json),
            "tsv" | "TSV" => Some(FlagstatFormat::Tsv),
            _ => None,
        }
    }
}

/// One counter per line of the report, each split by 0x200 (index 0:
/// QC-passed, 1: QC-failed), in bam_stat.c's meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flagstat {
    pub total: [u64; 2],
    pub primary: [u64; 2],
    pub secondary: [u64; 2],
    pub supplementary: [u64; 2],
    pub duplicates: [u64; 2],
    pub primary_duplicates: [u64; 2],
    pub mapped: [u64; 2],
    pub primary_mapped: [u64; 2],
    pub paired: [u64; 2],
    pub read1: [u64; 2],
    pub read2: [u64; 2],
    pub properly_paired: [u64; 2],
    pub both_mapped: [u64; 2],
    pub singletons: [u64; 2],
    pub diff_chr: [u64; 2],
    pub diff_chr_mapq5: [u64; 2],
}

impl Flagstat {
    /// Counts one record: its flag, whether its mate's reference id
    /// differs from its own (`mtid != tid`, a missing mate reference
    /// included), whether its MAPQ is 5 or more.
    #[inline]
    pub fn push(&mut self, flag: u16, diff_chr: bool, mapq5: bool) {
        let w = usize::from(flag & flags::QC_FAIL != 0);
        let mapped = flag & flags::UNMAPPED == 0;
        let dup = flag & flags::DUPLICATE != 0;
        self.total[w] += 1;
        if flag & flags::SECONDARY != 0 {
            self.secondary[w] += 1;
        } else if flag & flags::SUPPLEMENTARY != 0 {
            self.supplementary[w] += 1;
        } else {
            self.primary[w] += 1;
            if flag & flags::PAIRED != 0 {
                self.paired[w] += 1;
                let mate_mapped = flag & flags::MATE_UNMAPPED == 0;
                self.properly_paired[w] += u64::from(mapped && flag & 0x2 != 0);
                self.read1[w] += u64::from(flag & flags::READ1 != 0);
                self.read2[w] += u64::from(flag & flags::READ2 != 0);
                self.singletons[w] += u64::from(mapped && !mate_mapped);
                if mapped && mate_mapped {
                    self.both_mapped[w] += 1;
                    if diff_chr {
                        self.diff_chr[w] += 1;
                        self.diff_chr_mapq5[w] += u64::from(mapq5);
                    }
                }
            }
            self.primary_mapped[w] += u64::from(mapped);
            self.primary_duplicates[w] += u64::from(dup);
        }
        self.mapped[w] += u64::from(mapped);
        self.duplicates[w] += u64::from(dup);
    }

    /// Adds `other`'s counts (the counts are sums: the order does not
    /// matter).
    pub fn merge(&mut self, other: &Flagstat) {
        for (a, b) in self.counters_mut().into_iter().zip(other.counters()) {
            a[0] += b[0];
            a[1] += b[1];
        }
    }

    fn counters(&self) -> [&[u64; 2]; 16] {
        [
            &self.total,
            &self.primary,
            &self.secondary,
            &self.supplementary,
            &self.duplicates,
            &self.primary_duplicates,
            &self.mapped,
            &self.primary_mapped,
            &self.paired,
            &self.read1,
            &self.read2,
            &self.properly_paired,
            &self.both_mapped,
            &self.singletons,
            &self.diff_chr,
            &self.diff_chr_mapq5,
        ]
    }

    fn counters_mut(&mut self) -> [&mut [u64; 2]; 16] {
        [
            &mut self.total,
            &mut self.primary,
            &mut self.secondary,
            &mut self.supplementary,
            &mut self.duplicates,
            &mut self.primary_duplicates,
            &mut self.mapped,
            &mut self.primary_mapped,
            &mut self.paired,
            &mut self.read1,
            &mut self.read2,
            &mut self.properly_paired,
            &mut self.both_mapped,
            &mut self.singletons,
            &mut self.diff_chr,
            &mut self.diff_chr_mapq5,
        ]
    }

    /// The report's lines in order: label, counts, and the count the
    /// percentage divides by (for the lines that have one).
    fn lines(&self) -> [Line; 16] {
        [
            (
                "total (QC-passed reads + QC-failed reads)",
                self.total,
                None,
            ),
            ("primary", self.primary, None),
            ("secondary", self.secondary, None),
            ("supplementary", self.supplementary, None),
            ("duplicates", self.duplicates, None),
            ("primary duplicates", self.primary_duplicates, None),
            ("mapped", self.mapped, Some(self.total)),
            ("primary mapped", self.primary_mapped, Some(self.primary)),
            ("paired in sequencing", self.paired, None),
            ("read1", self.read1, None),
            ("read2", self.read2, None),
            ("properly paired", self.properly_paired, Some(self.paired)),
            ("with itself and mate mapped", self.both_mapped, None),
            ("singletons", self.singletons, Some(self.paired)),
            ("with mate mapped to a different chr", self.diff_chr, None),
            (
                "with mate mapped to a different chr (mapQ>=5)",
                self.diff_chr_mapq5,
                None,
            ),
        ]
    }

    /// The text `samtools flagstat -O format` prints for these counts.
    pub fn render(&self, format: FlagstatFormat) -> String {
        let mut s = String::new();
        match format {
            FlagstatFormat::Default => {
                for (label, n, of) in self.lines() {
                    let label = match label {
                        "total (QC-passed reads + QC-failed reads)" => {
                            "in total (QC-passed reads + QC-failed reads)"
                        }
                        l => l,
                    };
                    let _ = write!(s, "{} + {} {label}", n[0], n[1]);
                    if let Some(of) = of {
                        let _ = write!(
                            s,
                            " ({} : {})",
                            percent(n[0], of[0], "%", "N/A"),
                            percent(n[1], of[1], "%", "N/A")
                        );
                    }
                    s.push('\n');
                }
            }
            FlagstatFormat::Tsv => {
                for (label, n, of) in self.lines() {
                    let _ = writeln!(s, "{}\t{}\t{label}", n[0], n[1]);
                    if let Some(of) = of {
                        let _ = writeln!(
                            s,
                            "{}\t{}\t{label} %",
                            percent(n[0], of[0], "%", "N/A"),
                            percent(n[1], of[1], "%", "N/A")
                        );
                    }
                }
            }
            FlagstatFormat::Json => {
                s.push_str("{\n");
                for (w, title) in ["QC-passed reads", "QC-failed reads"].iter().enumerate() {
                    let _ = writeln!(s, " \"{title}\": {{ ");
                    let lines = self.lines();
                    for (i, (label, n, of)) in lines.iter().enumerate() {
                        let label = match *label {
                            "total (QC-passed reads + QC-failed reads)" => "total",
                            // The JSON label is spelt with spaces.
                            "with mate mapped to a different chr (mapQ>=5)" => {
                                "with mate mapped to a different chr (mapQ >= 5)"
                            }
                            l => l,
                        };
                        let last = i + 1 == lines.len();
                        let _ = write!(s, "  \"{label}\": {}", n[w]);
                        if let Some(of) = of {
                            let _ = write!(
                                s,
                                ", \n  \"{label} %\": {}",
                                percent(n[w], of[w], "", "null")
                            );
                        }
                        s.push_str(if last { " \n" } else { ", \n" });
                    }
                    s.push_str(if w == 0 { " },\n" } else { " }\n" });
                }
                s.push_str("}\n");
            }
        }
        s
    }
}

/// A line of the report: label, counts, and the counts the percentage
/// divides by.
type Line = (&'static str, [u64; 2], Option<[u64; 2]>);

/// bam_stat.c's `percent`: `(float)n / total * 100.0` printed `%.2f`,
/// then `suffix`; `none` when `total` is 0. The division is in single
/// precision (1/160 prints 0.63, not 0.62), the product in double.
fn percent(n: u64, total: u64, suffix: &str, none: &str) -> String {
    if total == 0 {
        return none.to_string();
    }
    let q = n as f32 / total as f32;
    format!("{:.2}{suffix}", f64::from(q) * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_divide_in_single_precision() {
        assert_eq!(percent(1, 160, "%", "N/A"), "0.63%");
        assert_eq!(percent(0, 0, "%", "N/A"), "N/A");
        assert_eq!(percent(0, 0, "", "null"), "null");
        // An exact tie rounds to even, as glibc's printf does.
        assert_eq!(percent(1, 32, "", "null"), "3.12");
        assert_eq!(percent(3, 3, "%", "N/A"), "100.00%");
    }

    #[test]
    fn counts_follow_bam_stat() {
        let mut f = Flagstat::default();
        // Paired, proper, read1, both mapped, mate on another reference.
        f.push(0x1 | 0x2 | 0x40, true, true);
        // Proper pair flag on an unmapped read does not count as proper.
        f.push(0x1 | 0x2 | 0x4 | 0x80, false, false);
        // Singleton (mate unmapped), QC-failed, duplicate.
        f.push(0x1 | 0x8 | 0x200 | 0x400, false, false);
        // Secondary and supplementary count only in total, mapped, dups.
        f.push(0x100 | 0x400, true, true);
        f.push(0x800 | 0x4, true, true);
        assert_eq!(f.total, [4, 1]);
        assert_eq!(f.primary, [2, 1]);
        assert_eq!(f.secondary, [1, 0]);
        assert_eq!(f.supplementary, [1, 0]);
        assert_eq!(f.duplicates, [1, 1]);
        assert_eq!(f.primary_duplicates, [0, 1]);
        assert_eq!(f.mapped, [2, 1]);
        assert_eq!(f.primary_mapped, [1, 1]);
        assert_eq!(f.paired, [2, 1]);
        assert_eq!(f.properly_paired, [1, 0]);
        assert_eq!(f.singletons, [0, 1]);
        assert_eq!(f.both_mapped, [1, 0]);
        assert_eq!((f.diff_chr, f.diff_chr_mapq5), ([1, 0], [1, 0]));
        let mut twice = f.clone();
        twice.merge(&f);
        assert_eq!(twice.total, [8, 2]);
        assert_eq!(twice.diff_chr_mapq5, [2, 0]);
    }

    #[test]
    fn texts_have_samtools_layout() {
        let mut f = Flagstat::default();
        f.push(0x1 | 0x2 | 0x40, false, true);
        let text = f.render(FlagstatFormat::Default);
        assert!(
            text.starts_with("1 + 0 in total (QC-passed reads + QC-failed reads)\n1 + 0 primary\n")
        );
        assert!(text.contains("1 + 0 mapped (100.00% : N/A)\n"));
        assert!(text.ends_with("0 + 0 with mate mapped to a different chr (mapQ>=5)\n"));
        assert_eq!(text.lines().count(), 16);
        let tsv = f.render(FlagstatFormat::Tsv);
        assert!(tsv.contains("1\t0\tmapped\n100.00%\tN/A\tmapped %\n"));
        assert_eq!(tsv.lines().count(), 20);
        let json = f.render(FlagstatFormat::Json);
        assert!(json.starts_with("{\n \"QC-passed reads\": { \n  \"total\": 1, \n"));
        assert!(json.contains("  \"mapped %\": 100.00, \n"));
        assert!(json.contains("  \"mapped %\": null, \n"));
        assert!(json.contains("(mapQ >= 5)\": 0 \n },\n \"QC-failed reads\": { \n"));
        assert!(json.ends_with(" }\n}\n"));
    }
}
