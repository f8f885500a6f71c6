//! samtools markdup's statistics: the counters of one block, the text and JSON it writes (`write_stats`, `write_json_stats`) and `ESTIMATED_LIBRARY_SIZE`.

use std::fmt::Write as _;

/// The counters of one statistics block (all reads, or one read group).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsBlock {
    pub read: i64,
    pub written: i64,
    pub excluded: i64,
    pub examined: i64,
    pub paired: i64,
    pub single: i64,
    pub duplicate_pair: i64,
    pub duplicate_single: i64,
    pub duplicate_pair_optical: i64,
    pub duplicate_single_optical: i64,
    pub duplicate_non_primary: i64,
    pub duplicate_non_primary_optical: i64,
}

impl StatsBlock {
    fn add(&mut self, o: &StatsBlock) {
        self.read += o.read;
        self.written += o.written;
        self.excluded += o.excluded;
        self.examined += o.examined;
        self.paired += o.paired;
        self.single += o.single;
        self.duplicate_pair += o.duplicate_pair;
        self.duplicate_single += o.duplicate_single;
        self.duplicate_pair_optical += o.duplicate_pair_optical;
        self.duplicate_single_optical += o.duplicate_single_optical;
        self.duplicate_non_primary += o.duplicate_non_primary;
        self.duplicate_non_primary_optical += o.duplicate_non_primary_optical;
    }

    /// The block's lines as samtools names them, in its order, with
    /// `ESTIMATED_LIBRARY_SIZE` last (its warning, if any, to `warn`).
    pub fn entries(&self, warn: &mut Vec<String>) -> [(&'static str, i64); 15] {
        let (els, w) = estimate_library_size(
            self.paired,
            self.duplicate_pair,
            self.duplicate_pair_optical,
        );
        warn.extend(w);
        [
            ("READ", self.read),
            ("WRITTEN", self.written),
            ("EXCLUDED", self.excluded),
            ("EXAMINED", self.examined),
            ("PAIRED", self.paired),
            ("SINGLE", self.single),
            ("DUPLICATE PAIR", self.duplicate_pair),
            ("DUPLICATE SINGLE", self.duplicate_single),
            ("DUPLICATE PAIR OPTICAL", self.duplicate_pair_optical),
            ("DUPLICATE SINGLE OPTICAL", self.duplicate_single_optical),
            ("DUPLICATE NON PRIMARY", self.duplicate_non_primary),
            (
                "DUPLICATE NON PRIMARY OPTICAL",
                self.duplicate_non_primary_optical,
            ),
            (
                "DUPLICATE PRIMARY TOTAL",
                self.duplicate_single + self.duplicate_pair,
            ),
            (
                "DUPLICATE TOTAL",
                self.duplicate_single + self.duplicate_pair + self.duplicate_non_primary,
            ),
            ("ESTIMATED_LIBRARY_SIZE", els as i64),
        ]
    }
}

/// A run's statistics: the ungrouped block and, with
/// `--use-read-groups`, one per `@RG` in header order.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Block 0: reads without a (known) read group; every read without
    /// `--use-read-groups`.
    pub ungrouped: StatsBlock,
    /// `(ID, block)` per `@RG` line, when read groups are used.
    pub groups: Vec<(String, StatsBlock)>,
    /// Whether read groups were used (blocks are then written per group).
    pub by_group: bool,
}

impl Stats {
    /// The sum over all blocks (samtools' first block).
    pub fn total(&self) -> StatsBlock {
        let mut t = self.ungrouped;
        for (_, g) in &self.groups {
            t.add(g);
        }
        t
    }

    /// The text samtools writes with `-s`/`-f` (`command`: its `COMMAND:`
    /// line, the command line as given), and the warnings samtools prints
    /// while writing it (library sizes it could not estimate).
    pub fn text(&self, command: &str) -> (String, Vec<String>) {
        let mut out = String::new();
        let mut warn = Vec::new();
        let mut block = |out: &mut String, title: &str, b: &StatsBlock| {
            let entries = b.entries(&mut warn);
            let _ = writeln!(out, "{title}");
            for (k, v) in entries {
                let _ = writeln!(out, "{k}: {v}");
            }
            out.push('\n');
        };
        block(&mut out, &format!("COMMAND: {command}"), &self.total());
        if self.by_group {
            if self.ungrouped.read != 0 {
                block(&mut out, "READ GROUP: ungrouped", &self.ungrouped);
            }
            for (id, g) in &self.groups {
                block(&mut out, &format!("READ GROUP: {id}"), g);
            }
        }
        (out, warn)
    }

    /// The JSON samtools writes with `--json` (4-space indent, a
    /// `"READ GROUPS"` array with `--use-read-groups`), and the warnings.
    pub fn json(&self, command: &str) -> (String, Vec<String>) {
        let mut out = String::new();
        let mut warn = Vec::new();
        let mut block =
            |out: &mut String, ind: &str, group: Option<&str>, b: &StatsBlock, end: &str| {
                if let Some(g) = group {
                    let _ = writeln!(out, "{ind}\"READ GROUP\": \"{g}\",");
                }
                let entries = b.entries(&mut warn);
                let n = entries.len();
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    let _ = write!(out, "{ind}\"{k}\": {v}");
                    if i + 1 < n {
                        out.push_str(",\n");
                    }
                }
                out.push_str(end);
            };
        out.push_str("{\n");
        let _ = writeln!(out, "    \"COMMAND\": \"{command}\",");
        let end = if self.by_group { ",\n" } else { "\n" };
        block(&mut out, "    ", None, &self.total(), end);
        if self.by_group {
            out.push_str("    \"READ GROUPS\": [\n");
            if self.ungrouped.read != 0 {
                out.push_str("        {\n");
                block(
                    &mut out,
                    "            ",
                    Some("ungrouped"),
                    &self.ungrouped,
                    "\n",
                );
                out.push_str("        },\n");
            }
            let n = self.groups.len();
            for (i, (id, g)) in self.groups.iter().enumerate() {
                out.push_str("        {\n");
                block(&mut out, "            ", Some(id), g, "\n");
                out.push_str(if i + 1 < n {
                    "        },\n"
                } else {
                    "        }\n"
                });
            }
            out.push_str("    ]\n");
        }
        out.push_str("}\n");
        (out, warn)
    }
}

/// `c / x - 1 + exp(-n / x)`: zero where `x` is the library size giving
/// `c` unique pairs of `n` (samtools' `coverage_equation`, after Picard).
fn coverage_equation(x: f64, c: f64, n: f64) -> f64 {
    c / x - 1.0 + (-n / x).exp()
}

/// samtools' `estimate_library_size(paired, duplicate pairs, optical)`
/// (reads, halved to pairs in integers), with the warning it prints when
/// there is no estimate (then 0).
pub fn estimate_library_size(paired: i64, dup: i64, optical: i64) -> (u64, Option<String>) {
    // samtools computes in unsigned long.
    let (p, d, o) = (paired as u64, dup as u64, optical as u64);
    let non_optical = p.wrapping_sub(o) / 2;
    let unique = p.wrapping_sub(d) / 2;
    let dup_pairs = d.wrapping_sub(o) / 2;
    if non_optical == 0 || dup_pairs == 0 || unique == 0 || non_optical <= dup_pairs {
        return (
            0,
            Some(format!(
                "warning, unable to calculate estimated library size. Read pairs {} should be greater \
                 than duplicate pairs {}, which should both be non zero.",
                non_optical as i64, dup_pairs as i64
            )),
        );
    }
    let (u, n) = (unique as f64, non_optical as f64);
    let mut m = 1.0f64;
    let mut big_m = 100.0f64;
    if coverage_equation(m * u, u, n) < 0.0 {
        return (
            0,
            Some("warning, unable to calculate estimated library size.".to_string()),
        );
    }
    while coverage_equation(big_m * u, u, n) > 0.0 {
        big_m *= 10.0;
    }
    for _ in 0..40 {
        let r = (m + big_m) / 2.0;
        let v = coverage_equation(r * u, u, n);
        if v > 0.0 {
            m = r;
        } else if v < 0.0 {
            big_m = r;
        } else {
            break;
        }
    }
    ((u * (m + big_m) / 2.0) as u64, None)
}
