//! The end-of-run report: a per-phase timing summary for `--verbosity 3`
//! and the JSON that `--stats-json` writes for pipelines to keep (records
//! and bytes in and out, runs written, merge passes, phase times, peak RSS).
//! JSON is written by hand: the shape is small and fixed.

use crate::output::OutputSummary;
use crate::progress::{peak_rss_bytes, PhaseTime};
use alnsort_sort::SortStats;
use std::fmt::Write;

pub struct ReportInput<'a> {
    pub records_in: u64,
    pub bytes_in: u64,
    pub output: &'a OutputSummary,
    pub sort: &'a SortStats,
    pub times: &'a [PhaseTime],
}

pub struct Report {
    fields: Vec<(&'static str, String)>,
    times: Vec<PhaseTime>,
}

impl Report {
    pub fn new(i: ReportInput<'_>) -> Report {
        let s = i.sort;
        let fields = vec![
            ("records_in", i.records_in.to_string()),
            ("records_out", i.output.records.to_string()),
            ("bytes_in", i.bytes_in.to_string()),
            (
                "bytes_out_uncompressed",
                i.output.bytes_uncompressed.to_string(),
            ),
            ("bytes_out", i.output.bytes_written.to_string()),
            ("runs_written", s.runs_written.to_string()),
            ("run_bytes_raw", s.run_bytes_raw.to_string()),
            ("run_bytes_written", s.run_bytes_compressed.to_string()),
            ("merge_passes", s.merge_passes.to_string()),
            ("merge_partitions", s.merge_partitions.to_string()),
            ("peak_rss_bytes", peak_rss_bytes().to_string()),
        ];
        Report {
            fields,
            times: i.times.to_vec(),
        }
    }

    /// Human summary for stderr.
    pub fn text(&self) -> String {
        let mut t = String::from("[alnsort] phase times:\n");
        for p in &self.times {
            let _ = writeln!(
                t,
                "[alnsort]   {:<16} wall {:>8.2} s  cpu {:>8.2} s",
                p.phase, p.wall_s, p.cpu_s
            );
        }
        for (k, v) in &self.fields {
            let _ = writeln!(t, "[alnsort]   {k}: {v}");
        }
        t
    }

    pub fn json(&self) -> String {
        let mut j = String::from("{\n");
        for (k, v) in &self.fields {
            let _ = writeln!(j, "  \"{k}\": {v},");
        }
        j.push_str("  \"phases\": [");
        for (n, p) in self.times.iter().enumerate() {
            if n > 0 {
                j.push_str(", ");
            }
            let _ = write!(
                j,
                "{{\"phase\": \"{}\", \"wall_s\": {:.3}, \"cpu_s\": {:.3}}}",
                p.phase, p.wall_s, p.cpu_s
            );
        }
        j.push_str("]\n}\n");
        j
    }
}
