//! The end-of-run report: a per-phase timing summary for `--verbosity 3`
//! and the JSON that `--stats-json` writes for pipelines to keep. Every field
//! is documented in docs/stats-json.md (a test keeps the two in step); a
//! field's name says its unit (`_bytes`, `_s`) or the doc does. JSON is
//! written by hand: the shape is small and fixed.
//!
//! The stats file is created (under a temporary name beside it) before any
//! input is read, so an unwritable path fails at once and costs no sort; it
//! is renamed into place only after the output is.

use crate::config::Config;

use crate::io::output::OutputSummary;
use crate::options::sort::OutFormat;
use crate::report::progress::{peak_rss_bytes, PhaseTime};
use alnsort_sort::SortStats;
use std::fmt::Write as _;
use std::path::Path;

/// Version of the JSON's shape: raised when a field is removed or changes
/// meaning (adding a field does not raise it).
pub const SCHEMA_VERSION: u64 = 1;

pub struct ReportInput<'a> {
    pub cfg: &'a Config,
    /// Size of the input file on disk (`None` for stdin or a pipe).
    pub input_file_bytes: Option<u64>,
    pub records_in: u64,
    /// SAM records read as unmapped for an unknown RNAME or RNEXT.
    pub unknown_reference_records: u64,
    /// BGZF inputs (BAM, or compressed SAM) read without their EOF block.
    pub missing_eof_inputs: u64,
    /// Uncompressed BAM record bytes read (with their 4-byte length).
    pub bytes_in: u64,
    pub output: &'a OutputSummary,
    pub sort: &'a SortStats,
    pub times: &'a [PhaseTime],
    /// CPU seconds of the serial stages' threads, by stage.
    pub serial: &'a [(&'static str, f64)],
}

/// One JSON value of the report.
#[derive(Debug, Clone, PartialEq)]
enum JsonValue {
    Int(u64),
    Str(String),
    Null,
    Secs(f64),
    /// A JSON object of named values, in this order.
    Map(Vec<(&'static str, JsonValue)>),
}

impl JsonValue {
    fn opt_str(s: Option<String>) -> JsonValue {
        s.map(JsonValue::Str).unwrap_or(JsonValue::Null)
    }

    fn json(&self, out: &mut String) {
        match self {
            JsonValue::Int(n) => {
                let _ = write!(out, "{n}");
            }
            JsonValue::Secs(s) => {
                let _ = write!(out, "{s:.3}");
            }
            JsonValue::Null => out.push_str("null"),
            JsonValue::Str(s) => json_string(s, out),
            JsonValue::Map(fields) => {
                out.push('{');
                for (n, (k, v)) in fields.iter().enumerate() {
                    if n > 0 {
                        out.push_str(", ");
                    }
                    json_string(k, out);
                    out.push_str(": ");
                    v.json(out);
                }
                out.push('}');
            }
        }
    }

    fn text(&self) -> String {
        match self {
            JsonValue::Int(n) => n.to_string(),
            JsonValue::Secs(s) => format!("{s:.3}"),
            JsonValue::Null => "-".into(),
            JsonValue::Str(s) => s.clone(),
            JsonValue::Map(fields) => fields
                .iter()
                .map(|(k, v)| format!("{k}={}", v.text()))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The output format as `-O` names it.
fn format_name(f: OutFormat) -> &'static str {
    match f {
        OutFormat::Bam => "bam",
        OutFormat::Sam => "sam",
        OutFormat::SamGz => "sam.gz",
        OutFormat::Cram => "cram",
        OutFormat::Parquet => "parquet",
    }
}

/// Appends `s` as a JSON string literal (RFC 8259 escapes).
pub(crate) fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub struct Report {
    fields: Vec<(&'static str, JsonValue)>,
    times: Vec<PhaseTime>,
}

impl Report {
    pub fn new(i: ReportInput<'_>) -> Report {
        let s = i.sort;
        let cfg = i.cfg;
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let wall: f64 = i.times.iter().map(|t| t.wall_s).sum();
        let cpu: f64 = i.times.iter().map(|t| t.cpu_s).sum();
        let fields = vec![
            ("schema_version", JsonValue::Int(SCHEMA_VERSION)),
            ("tool", JsonValue::Str("alnsort".into())),
            ("version", JsonValue::Str(env!("CARGO_PKG_VERSION").into())),
            ("command_line", JsonValue::Str(cfg.command_line.clone())),
            ("input", JsonValue::Str(cfg.input.clone())),
            (
                "input_file_bytes",
                i.input_file_bytes
                    .map(JsonValue::Int)
                    .unwrap_or(JsonValue::Null),
            ),
            (
                "output",
                JsonValue::opt_str(cfg.output.as_deref().map(path)),
            ),
            (
                "output_format",
                JsonValue::Str(format_name(cfg.format).into()),
            ),
            (
                "index",
                JsonValue::opt_str(cfg.index.as_ref().map(|x| path(&x.path))),
            ),
            ("sort_order", JsonValue::Str(cfg.hd.so.clone())),
            ("sub_sort", JsonValue::opt_str(cfg.hd.ss.clone())),
            ("threads", JsonValue::Int(cfg.threads as u64)),
            ("memory_budget_bytes", JsonValue::Int(cfg.memory_budget)),
            (
                "memory_budget_scope",
                JsonValue::Str(
                    if cfg.explicit_total {
                        "process"
                    } else {
                        "records"
                    }
                    .into(),
                ),
            ),
            ("records_in", JsonValue::Int(i.records_in)),
            ("records_out", JsonValue::Int(i.output.records)),
            (
                "unknown_reference_records",
                JsonValue::Int(i.unknown_reference_records),
            ),
            ("missing_eof_inputs", JsonValue::Int(i.missing_eof_inputs)),
            ("cram_reference_loads", JsonValue::Int(cfg.refs.loads())),
            ("bytes_in_uncompressed", JsonValue::Int(i.bytes_in)),
            // The name of schema 1's first release, kept for one version.
            ("bytes_in", JsonValue::Int(i.bytes_in)),
            (
                "bytes_out_uncompressed",
                JsonValue::Int(i.output.bytes_uncompressed),
            ),
            ("bytes_out", JsonValue::Int(i.output.bytes_written)),
            ("runs_written", JsonValue::Int(s.runs_written)),
            ("run_bytes_raw", JsonValue::Int(s.run_bytes_raw)),
            ("run_bytes_written", JsonValue::Int(s.run_bytes_compressed)),
            ("merge_passes", JsonValue::Int(u64::from(s.merge_passes))),
            ("merge_partitions", JsonValue::Int(s.merge_partitions)),
            ("peak_rss_bytes", JsonValue::Int(peak_rss_bytes())),
            ("wall_s", JsonValue::Secs(wall)),
            ("cpu_s", JsonValue::Secs(cpu)),
            (
                "serial_seconds",
                JsonValue::Map(
                    i.serial
                        .iter()
                        .map(|&(k, v)| (k, JsonValue::Secs(v)))
                        .chain([("write_consume", JsonValue::Secs(i.output.write_consume_s))])
                        .collect(),
                ),
            ),
        ];
        Report {
            fields,
            times: i.times.to_vec(),
        }
    }

    /// Adds an object of counts after the other fields (`--markdup`'s).
    pub fn add_object(&mut self, name: &'static str, counts: Vec<(&'static str, u64)>) {
        self.fields.push((
            name,
            JsonValue::Map(
                counts
                    .into_iter()
                    .map(|(k, v)| (k, JsonValue::Int(v)))
                    .collect(),
            ),
        ));
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
            let _ = writeln!(t, "[alnsort]   {k}: {}", v.text());
        }
        t
    }

    fn get(&self, name: &str) -> Option<&JsonValue> {
        self.fields.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The report as MultiQC custom content (a table section with one row,
    /// `sample`): what a pipeline's report shows of the run. The columns
    /// are fields of the JSON report (docs/stats-json.md), sizes in MiB.
    pub fn mqc_json(&self, sample: &str) -> String {
        const MIB: f64 = (1u64 << 20) as f64;
        // (column, title, description, value)
        let mut cols: Vec<(&str, &str, &str, JsonValue)> = Vec::new();
        let mut col = |key: &'static str, title: &'static str, desc: &'static str| {
            if let Some(v) = self.get(key) {
                cols.push((key, title, desc, v.clone()));
            }
        };
        col("records_in", "Records", "Records read");
        col("sort_order", "Order", "Sort order of the output (@HD SO)");
        col("threads", "Threads", "Threads (-@)");
        col("wall_s", "Wall s", "Wall-clock seconds of the run");
        col("cpu_s", "CPU s", "CPU seconds of the run (user + system)");
        col(
            "runs_written",
            "Runs",
            "Sorted runs spilled to temporary files",
        );
        let mib = |key: &str| match self.get(key) {
            Some(JsonValue::Int(n)) => Some(JsonValue::Secs(*n as f64 / MIB)),
            _ => None,
        };
        let mut mib_col =
            |key: &str, col: &'static str, title: &'static str, desc: &'static str| {
                if let Some(v) = mib(key) {
                    cols.push((col, title, desc, v));
                }
            };
        mib_col(
            "peak_rss_bytes",
            "peak_rss_mib",
            "Peak RSS MiB",
            "Peak resident memory, MiB",
        );
        mib_col(
            "bytes_out",
            "bytes_out_mib",
            "Output MiB",
            "Size of the output file, MiB",
        );
        if let Some(JsonValue::Map(md)) = self.get("markdup") {
            for (k, v) in md {
                if *k == "records_marked" {
                    cols.push((
                        "duplicates_marked",
                        "Duplicates",
                        "Records flagged as duplicates (--markdup)",
                        v.clone(),
                    ));
                }
            }
        }
        let mut j = String::from("{\n");
        j.push_str("  \"id\": \"alnsort\",\n  \"section_name\": \"alnsort\",\n");
        j.push_str(
            "  \"description\": \"Records, time and memory of each alnsort run \
             (alnsort --mqc; --stats-json keeps every field).\",\n",
        );
        j.push_str("  \"plot_type\": \"table\",\n");
        j.push_str("  \"pconfig\": {\"id\": \"alnsort_runs\", \"title\": \"alnsort: runs\"},\n");
        j.push_str("  \"headers\": {");
        for (n, (key, title, desc, _)) in cols.iter().enumerate() {
            j.push_str(if n > 0 { ",\n    " } else { "\n    " });
            json_string(key, &mut j);
            j.push_str(": {\"title\": ");
            json_string(title, &mut j);
            j.push_str(", \"description\": ");
            json_string(desc, &mut j);
            j.push('}');
        }
        j.push_str("\n  },\n  \"data\": {");
        json_string(sample, &mut j);
        j.push_str(": ");
        JsonValue::Map(cols.into_iter().map(|(k, _, _, v)| (k, v)).collect()).json(&mut j);
        j.push_str("}\n}\n");
        j
    }

    pub fn json(&self) -> String {
        let mut j = String::from("{\n");
        for (k, v) in &self.fields {
            let _ = write!(j, "  \"{k}\": ");
            v.json(&mut j);
            j.push_str(",\n");
        }
        j.push_str("  \"phases\": [");
        for (n, p) in self.times.iter().enumerate() {
            if n > 0 {
                j.push_str(", ");
            }
            j.push_str("{\"phase\": ");
            json_string(p.phase, &mut j);
            let _ = write!(
                j,
                ", \"wall_s\": {:.3}, \"cpu_s\": {:.3}}}",
                p.wall_s, p.cpu_s
            );
        }
        j.push_str("]\n}\n");
        j
    }
}

/// The sample a MultiQC report names the run after (`--mqc`): the first
/// input's file name, as MultiQC names Picard's metrics after their INPUT
/// (it strips `.bam` and the like itself); the output's for standard input;
/// "alnsort" when both are standard streams.
pub fn sample_name(cfg: &Config) -> String {
    let base = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.to_string_lossy().into_owned())
    };
    let first = cfg.inputs.first().unwrap_or(&cfg.input);
    match (Some(first), cfg.output.as_deref()) {
        (Some(i), _) if i != "-" => base(Path::new(i)),
        (_, Some(o)) => base(o),
        _ => "alnsort".into(),
    }
}

/// The run's report (`--stats-json`, `-v 3`): what was read, sorted,
/// written and decided, and the phases' times.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sort_report(
    cfg: &Config,
    input_file_bytes: Option<u64>,
    records_in: u64,
    fed: &crate::io::input::Fed,
    progress: &crate::report::progress::Progress,
    summary: &crate::io::output::OutputSummary,
    sort_stats: &alnsort_sort::SortStats,
    times: &[crate::report::progress::PhaseTime],
    decisions: Option<&crate::markdup::decisions::Decisions>,
) -> crate::report::stats::Report {
    let report = crate::report::stats::Report::new(crate::report::stats::ReportInput {
        cfg,
        input_file_bytes,
        records_in,
        unknown_reference_records: fed.tally.unknown_reference_records,
        missing_eof_inputs: fed.tally.missing_eof_blocks,
        bytes_in: progress.bytes(),
        output: summary,
        sort: sort_stats,
        times,
        serial: &[
            ("read_scan", fed.read_scan_s),
            ("read_push", fed.read_push_s),
        ],
    });
    let mut report = report;
    if let Some(d) = decisions {
        report.add_object("markdup", d.stats_counts());
    }
    if cfg.verbosity >= 3 {
        eprint!("{}", report.text());
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        json_string("a\"b\\c\nd\u{1}é", &mut s);
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    #[test]
    fn values_render_as_json_types() {
        let mut s = String::new();
        for v in [
            JsonValue::Int(7),
            JsonValue::Null,
            JsonValue::Secs(1.23456),
            JsonValue::Str("x".into()),
            JsonValue::Map(vec![("a", JsonValue::Secs(0.5)), ("b", JsonValue::Null)]),
        ] {
            v.json(&mut s);
            s.push(' ');
        }
        assert_eq!(s, "7 null 1.235 \"x\" {\"a\": 0.500, \"b\": null} ");
    }
}
