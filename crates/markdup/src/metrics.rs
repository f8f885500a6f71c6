//! Picard's `DuplicationMetrics` per library, the library-size estimate, and
//! the metrics file's text form (values formatted as htsjdk's `FormatUtil`
//! formats them).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use crate::ReadGroups;

/// One library's counts, as Picard reports them (pairs already halved).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DuplicationMetrics {
    pub library: String,
    pub unpaired_reads_examined: u64,
    pub read_pairs_examined: u64,
    pub secondary_or_supplementary_rds: u64,
    pub unmapped_reads: u64,
    pub unpaired_read_duplicates: u64,
    pub read_pair_duplicates: u64,
    pub read_pair_optical_duplicates: u64,
    pub percent_duplication: f64,
    pub estimated_library_size: Option<u64>,
}

fn f(x: f64, c: f64, n: f64) -> f64 {
    c / x - 1.0 + (-n / x).exp()
}

/// Picard's library-size estimate (Lander-Waterman): solves
/// `c / x = 1 - exp(-n / x)` for `x` by bisection (40 steps, bracket grown
/// by tens from 100 times the unique count). `None` when there are no pairs
/// or no duplicate pairs.
pub fn estimate_library_size(read_pairs: i64, unique_read_pairs: i64) -> Option<u64> {
    let dups = read_pairs - unique_read_pairs;
    if read_pairs <= 0 || dups <= 0 {
        return None;
    }
    let (u, n) = (unique_read_pairs as f64, read_pairs as f64);
    let mut m = 1.0f64;
    let mut big_m = 100.0f64;
    if unique_read_pairs >= read_pairs || f(m * u, u, n) < 0.0 {
        return None;
    }
    while f(big_m * u, u, n) > 0.0 {
        big_m *= 10.0;
    }
    for _ in 0..40 {
        let r = (m + big_m) / 2.0;
        let v = f(r * u, u, n);
        if v == 0.0 {
            break;
        } else if v > 0.0 {
            m = r;
        } else if v < 0.0 {
            big_m = r;
        }
    }
    Some((u * (m + big_m) / 2.0) as i64 as u64)
}

impl DuplicationMetrics {
    pub fn new(library: &str) -> Self {
        DuplicationMetrics {
            library: library.to_string(),
            ..Default::default()
        }
    }

    /// Fills PERCENT_DUPLICATION and ESTIMATED_LIBRARY_SIZE from the counts.
    pub fn calculate_derived_fields(&mut self) {
        let pairs = self.read_pairs_examined as i64;
        self.estimated_library_size = estimate_library_size(
            pairs - self.read_pair_optical_duplicates as i64,
            pairs - self.read_pair_duplicates as i64,
        );
        let denom = self.unpaired_reads_examined + self.read_pairs_examined * 2;
        self.percent_duplication = if self.unpaired_reads_examined + self.read_pairs_examined != 0 {
            (self.unpaired_read_duplicates + self.read_pair_duplicates * 2) as f64 / denom as f64
        } else {
            0.0
        };
    }

    /// Picard's return-on-investment histogram (x = 1..100), or `None` when
    /// there is no library-size estimate.
    pub fn roi_histogram(&self) -> Option<Vec<(f64, f64)>> {
        let els = self.estimated_library_size? as f64;
        let pairs = self.read_pairs_examined as f64;
        let unique = (self.read_pairs_examined - self.read_pair_duplicates) as f64;
        Some(
            (1..=100)
                .map(|x| {
                    let x = x as f64;
                    (x, els * (1.0 - (-(x * pairs) / els).exp()) / unique)
                })
                .collect(),
        )
    }
}

/// htsjdk's float format: at most 6 fraction digits, rounding half down on
/// the exact binary value, no grouping, trailing zeros dropped.
pub fn format_double(v: f64) -> String {
    if v.is_nan() {
        return "\u{FFFD}".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "\u{221E}" } else { "-\u{221E}" }.to_string();
    }
    let neg = v < 0.0;
    // Exact decimal expansion (every finite double has a finite one; 1100
    // digits covers the smallest subnormal).
    let exact = format!("{:.1100}", v.abs());
    let (int_part, frac) = exact.split_once('.').unwrap_or((&exact, ""));
    let mut digits: Vec<u8> = int_part.bytes().chain(frac.bytes().take(6)).collect();
    let rest = &frac.as_bytes()[6.min(frac.len())..];
    // Half down: round up only when the rest is strictly above one half.
    let round_up = match rest.first() {
        Some(&d) if d > b'5' => true,
        Some(&b'5') => rest[1..].iter().any(|&d| d != b'0'),
        _ => false,
    };
    if round_up {
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, b'1');
                break;
            }
            i -= 1;
            if digits[i] == b'9' {
                digits[i] = b'0';
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let int_len = digits.len() - 6;
    let mut s = String::from_utf8(digits[..int_len].to_vec()).unwrap();
    let fr = String::from_utf8(digits[int_len..].to_vec()).unwrap();
    let fr = fr.trim_end_matches('0');
    if !fr.is_empty() {
        s.push('.');
        s.push_str(fr);
    }
    if neg && s.bytes().any(|b| b != b'0' && b != b'.') {
        s.insert(0, '-');
    }
    s
}

/// Java's `Double.toString` for the whole numbers histograms use as bins:
/// `1.0`, `42.0`, and from 10^7 on scientific (`1.0E7`, `1.2345678E7`).
fn java_double_key(v: f64) -> String {
    if v.abs() < 1e7 {
        format!("{:.1}", v)
    } else {
        let e = format!("{:e}", v);
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exp}")
    }
}

/// Counts of duplicate-set sizes over all libraries, as Picard keeps them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetSizeHistograms {
    pub all_sets: BTreeMap<u64, u64>,
    pub optical_sets: BTreeMap<u64, u64>,
    pub non_optical_sets: BTreeMap<u64, u64>,
}

impl SetSizeHistograms {
    /// Adds the counts of `other` (a part of the sets), and `singles` pair
    /// sets of one end.
    pub fn add(&mut self, other: SetSizeHistograms, singles: u64) {
        let add = |to: &mut BTreeMap<u64, u64>, from: BTreeMap<u64, u64>| {
            for (k, v) in from {
                *to.entry(k).or_default() += v;
            }
        };
        add(&mut self.all_sets, other.all_sets);
        add(&mut self.optical_sets, other.optical_sets);
        add(&mut self.non_optical_sets, other.non_optical_sets);
        if singles > 0 {
            *self.all_sets.entry(1).or_default() += singles;
            *self.non_optical_sets.entry(1).or_default() += singles;
        }
    }
}

/// The command line Picard MarkDuplicates writes as the first header line
/// of its metrics file, for the same run expressed in Picard's terms:
/// `MarkDuplicates INPUT=[in.bam] OUTPUT=out.bam METRICS_FILE=m.txt`,
/// followed by any Picard-named settings added with [`option`](Self::option).
///
/// Picard 3.4.0 writes `INPUT` as a Java list (`[a.bam, b.bam]`) and the
/// other values as given. MultiQC (1.35, `modules/picard/util.py`) names a
/// sample after the file in `INPUT=` on a `#` line that also says
/// `MarkDuplicates`, and otherwise after the metrics file: so when every
/// input is standard input (`-`) there is no file to name and `INPUT=` is
/// left out (the sample is then named after the metrics file, as before).
#[derive(Clone, Debug, PartialEq)]
pub struct PicardCommandLine {
    inputs: Vec<String>,
    output: String,
    metrics_file: String,
    options: Vec<(String, String)>,
}

/// The file name alnsort and samtools give standard input and output.
const STDIO: &str = "-";

impl PicardCommandLine {
    /// The run's input files (in command-line order), output and metrics
    /// file, as the user named them.
    pub fn new<I, P>(inputs: I, output: impl AsRef<Path>, metrics_file: impl AsRef<Path>) -> Self
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        PicardCommandLine {
            inputs: inputs.into_iter().map(|p| text(p.as_ref())).collect(),
            output: text(output.as_ref()),
            metrics_file: text(metrics_file.as_ref()),
            options: Vec::new(),
        }
    }

    /// Adds `NAME=VALUE` after the three paths (Picard's option name, such
    /// as `REMOVE_DUPLICATES` or `OPTICAL_DUPLICATE_PIXEL_DISTANCE`).
    pub fn option(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        self.options.push((name.to_string(), value.to_string()));
        self
    }
}

impl std::fmt::Display for PicardCommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MarkDuplicates")?;
        if self.inputs.iter().any(|i| i != STDIO) {
            write!(f, " INPUT=[{}]", self.inputs.join(", "))?;
        }
        write!(
            f,
            " OUTPUT={} METRICS_FILE={}",
            self.output, self.metrics_file
        )?;
        for (name, value) in &self.options {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

/// Everything the metrics file holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsReport {
    /// Per library, in Picard's order (library name, Java string order).
    pub libraries: Vec<DuplicationMetrics>,
    pub set_sizes: SetSizeHistograms,
}

impl MetricsReport {
    /// The metrics file text with the header lines Picard's readers expect:
    /// first the run as Picard's command line (which names the input, so
    /// MultiQC names the sample after it as it does for Picard's own
    /// metrics), then `command_line`, what the user ran (where Picard
    /// writes its start time).
    pub fn to_text_with_command(&self, picard: &PicardCommandLine, command_line: &str) -> String {
        self.to_text(&[picard.to_string(), command_line.to_string()])
    }

    /// The metrics file text in Picard's layout. `header_lines` become the
    /// `#` comment lines at the top (Picard writes its command line and
    /// start time there).
    pub fn to_text(&self, header_lines: &[String]) -> String {
        let mut out = String::new();
        for h in header_lines {
            out.push_str("## htsjdk.samtools.metrics.StringHeader\n");
            let _ = writeln!(out, "# {h}");
        }
        out.push('\n');
        out.push_str("## METRICS CLASS\tpicard.sam.DuplicationMetrics\n");
        out.push_str(
            "LIBRARY\tUNPAIRED_READS_EXAMINED\tREAD_PAIRS_EXAMINED\tSECONDARY_OR_SUPPLEMENTARY_RDS\t\
             UNMAPPED_READS\tUNPAIRED_READ_DUPLICATES\tREAD_PAIR_DUPLICATES\t\
             READ_PAIR_OPTICAL_DUPLICATES\tPERCENT_DUPLICATION\tESTIMATED_LIBRARY_SIZE\n",
        );
        for m in &self.libraries {
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                m.library,
                m.unpaired_reads_examined,
                m.read_pairs_examined,
                m.secondary_or_supplementary_rds,
                m.unmapped_reads,
                m.unpaired_read_duplicates,
                m.read_pair_duplicates,
                m.read_pair_optical_duplicates,
                format_double(m.percent_duplication),
                m.estimated_library_size
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            );
        }
        out.push('\n');
        // Histograms: the ROI one only when there is exactly one library;
        // empty ones are left out; rows are the union of their bins.
        let roi = if self.libraries.len() == 1 {
            self.libraries[0].roi_histogram()
        } else {
            None
        };
        type Hist = (String, String, BTreeMap<u64, f64>);
        let mut hists: Vec<Hist> = Vec::new();
        if let Some(r) = roi {
            // Bins 1..100 are whole numbers.
            let m = r.into_iter().map(|(k, v)| (k as u64, v)).collect();
            hists.push(("BIN".into(), "CoverageMult".into(), m));
        }
        for (label, h) in [
            ("all_sets", &self.set_sizes.all_sets),
            ("optical_sets", &self.set_sizes.optical_sets),
            ("non_optical_sets", &self.set_sizes.non_optical_sets),
        ] {
            if !h.is_empty() {
                let m = h.iter().map(|(&k, &v)| (k, v as f64)).collect();
                hists.push(("set_size".into(), label.into(), m));
            }
        }
        if !hists.is_empty() {
            out.push_str("## HISTOGRAM\tjava.lang.Double\n");
            out.push_str(&hists[0].0);
            for h in &hists {
                out.push('\t');
                out.push_str(&h.1);
            }
            out.push('\n');
            let mut keys: Vec<u64> = hists.iter().flat_map(|h| h.2.keys().copied()).collect();
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                out.push_str(&java_double_key(k as f64));
                for h in &hists {
                    out.push('\t');
                    out.push_str(&format_double(h.2.get(&k).copied().unwrap_or(0.0)));
                }
                out.push('\n');
            }
        }
        out.push('\n');
        out
    }
}

/// Picard's metrics from the record counts per library index (summed over
/// the input), the optical duplicate pairs per library index and the
/// set-size histograms. Libraries of the header's read groups are reported
/// even when no record has them; Picard orders libraries by name (Java
/// strings; byte order for ASCII).
pub fn metrics_report(
    read_groups: &ReadGroups,
    counts: &[[u64; 6]],
    optical_by_library: &HashMap<u32, u64>,
    set_sizes: SetSizeHistograms,
) -> MetricsReport {
    let mut by_lib: BTreeMap<String, DuplicationMetrics> = BTreeMap::new();
    for &l in &read_groups.rg_library {
        let name = read_groups.library_name(l);
        by_lib
            .entry(name.to_string())
            .or_insert_with(|| DuplicationMetrics::new(name));
    }
    for (lib, c) in counts.iter().enumerate() {
        if c.iter().all(|&n| n == 0) {
            continue;
        }
        let name = read_groups.library_name(lib as u32);
        let m = by_lib
            .entry(name.to_string())
            .or_insert_with(|| DuplicationMetrics::new(name));
        m.unmapped_reads += c[0];
        m.secondary_or_supplementary_rds += c[1];
        m.unpaired_reads_examined += c[2];
        m.read_pairs_examined += c[3];
        m.unpaired_read_duplicates += c[4];
        m.read_pair_duplicates += c[5];
    }
    let mut libraries = Vec::new();
    for (name, mut m) in by_lib {
        m.read_pairs_examined /= 2;
        m.read_pair_duplicates /= 2;
        if let Some(i) = read_groups.libraries.iter().position(|l| *l == name) {
            m.read_pair_optical_duplicates =
                optical_by_library.get(&(i as u32)).copied().unwrap_or(0);
        }
        m.calculate_derived_fields();
        libraries.push(m);
    }
    MetricsReport {
        libraries,
        set_sizes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_double_drops_zeros_and_rounds_half_down() {
        assert_eq!(format_double(0.0), "0");
        assert_eq!(format_double(0.5), "0.5");
        assert_eq!(format_double(1.0 / 3.0), "0.333333");
        assert_eq!(format_double(2.0 / 3.0), "0.666667");
        // 3/128 = 0.0234375 exactly: half down gives ...437.
        assert_eq!(format_double(3.0 / 128.0), "0.023437");
        assert_eq!(format_double(0.9999999), "1");
        assert_eq!(format_double(12345678.25), "12345678.25");
    }

    #[test]
    fn histogram_keys_print_as_java_doubles() {
        assert_eq!(java_double_key(1.0), "1.0");
        assert_eq!(java_double_key(9_999_999.0), "9999999.0");
        assert_eq!(java_double_key(10_000_000.0), "1.0E7");
        assert_eq!(java_double_key(12_345_678.0), "1.2345678E7");
    }

    #[test]
    fn metrics_text_has_picards_layout() {
        let mut m = DuplicationMetrics::new("lib");
        m.read_pairs_examined = 3;
        m.read_pair_duplicates = 1;
        m.calculate_derived_fields();
        let mut set_sizes = SetSizeHistograms::default();
        set_sizes.all_sets.insert(2, 1);
        set_sizes.non_optical_sets.insert(2, 1);
        let two_libs = MetricsReport {
            libraries: vec![m.clone(), DuplicationMetrics::new("other")],
            set_sizes: set_sizes.clone(),
        };
        let text = two_libs.to_text(&["cmd".to_string()]);
        let expected = "## htsjdk.samtools.metrics.StringHeader\n# cmd\n\n\
            ## METRICS CLASS\tpicard.sam.DuplicationMetrics\n\
            LIBRARY\tUNPAIRED_READS_EXAMINED\tREAD_PAIRS_EXAMINED\tSECONDARY_OR_SUPPLEMENTARY_RDS\t\
            UNMAPPED_READS\tUNPAIRED_READ_DUPLICATES\tREAD_PAIR_DUPLICATES\t\
            READ_PAIR_OPTICAL_DUPLICATES\tPERCENT_DUPLICATION\tESTIMATED_LIBRARY_SIZE\n\
            lib\t0\t3\t0\t0\t0\t1\t0\t0.333333\t3\n\
            other\t0\t0\t0\t0\t0\t0\t0\t0\t\n\n\
            ## HISTOGRAM\tjava.lang.Double\n\
            set_size\tall_sets\tnon_optical_sets\n\
            2.0\t1\t1\n\n";
        assert_eq!(text, expected);
        // One library: the CoverageMult histogram comes first, bins 1..100.
        let one = MetricsReport {
            libraries: vec![m],
            set_sizes,
        };
        let text = one.to_text(&[]);
        assert!(text.contains("BIN\tCoverageMult\tall_sets\tnon_optical_sets\n1.0\t"));
        assert!(text.contains("\n2.0\t") && text.contains("\n100.0\t"));
    }

    #[test]
    fn picard_command_line_names_the_input_as_picard_does() {
        let one = PicardCommandLine::new(["data/s1.bam"], "out.bam", "dup.txt");
        assert_eq!(
            one.to_string(),
            "MarkDuplicates INPUT=[data/s1.bam] OUTPUT=out.bam METRICS_FILE=dup.txt"
        );
        // Several inputs: a Java list, as Picard prints a repeated INPUT.
        let two = PicardCommandLine::new(["a.bam", "b.cram"], "-", "m.txt")
            .option("REMOVE_DUPLICATES", true)
            .option("OPTICAL_DUPLICATE_PIXEL_DISTANCE", 2500);
        assert_eq!(
            two.to_string(),
            "MarkDuplicates INPUT=[a.bam, b.cram] OUTPUT=- METRICS_FILE=m.txt \
             REMOVE_DUPLICATES=true OPTICAL_DUPLICATE_PIXEL_DISTANCE=2500"
        );
        // Standard input names no file: no INPUT=, and no other word
        // MultiQC could take for one.
        let piped = PicardCommandLine::new(["-"], "out.bam", "m.txt");
        assert_eq!(
            piped.to_string(),
            "MarkDuplicates OUTPUT=out.bam METRICS_FILE=m.txt"
        );
        assert!(!piped.to_string().to_ascii_uppercase().contains("INPUT"));
        // With a file among the inputs, all are listed as given.
        let mixed = PicardCommandLine::new(["-", "b.bam"], "o.bam", "m.txt");
        assert!(mixed.to_string().contains(" INPUT=[-, b.bam] "));
    }

    #[test]
    fn metrics_text_with_command_has_picards_two_header_lines() {
        let report = MetricsReport::default();
        let picard = PicardCommandLine::new(["in.bam"], "out.bam", "m.txt");
        let text = report.to_text_with_command(&picard, "alnsort sort --markdup in.bam");
        assert!(text.starts_with(
            "## htsjdk.samtools.metrics.StringHeader\n\
             # MarkDuplicates INPUT=[in.bam] OUTPUT=out.bam METRICS_FILE=m.txt\n\
             ## htsjdk.samtools.metrics.StringHeader\n\
             # alnsort sort --markdup in.bam\n\n\
             ## METRICS CLASS\tpicard.sam.DuplicationMetrics\n"
        ));
        assert_eq!(
            text,
            report.to_text(&[picard.to_string(), "alnsort sort --markdup in.bam".into()])
        );
    }

    #[test]
    fn library_size_matches_known_values() {
        // No duplicates: no estimate.
        assert_eq!(estimate_library_size(10, 10), None);
        assert_eq!(estimate_library_size(0, 0), None);
        // 2 pairs of which 1 unique: x with 1/x = 1 - exp(-2/x) -> x ~ 0.
        // Bisection starts at m = 1 so the answer is 1 * (m+M)/2 with M->1.
        assert_eq!(estimate_library_size(2, 1), Some(1));
        // 100 pairs, 90 unique: the root is near 458.
        let v = estimate_library_size(100, 90).unwrap();
        let x = v as f64;
        assert!((90.0 / x - 1.0 + (-100.0 / x).exp()).abs() < 1e-2, "{v}");
    }

    #[test]
    fn percent_duplication_counts_pairs_twice() {
        let mut m = DuplicationMetrics::new("lib");
        m.unpaired_reads_examined = 2;
        m.read_pairs_examined = 3;
        m.unpaired_read_duplicates = 1;
        m.read_pair_duplicates = 1;
        m.calculate_derived_fields();
        assert_eq!(m.percent_duplication, 3.0 / 8.0);
        assert!(m.estimated_library_size.is_some());
    }
}
