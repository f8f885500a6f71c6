//! `alnsort merge`: samtools merge's interface and output for inputs that
//! are already sorted. Headers are merged by `alnsort_bam::header_merge`
//! (samtools' rules); each input is read by `alnsort_bam::reader` (scan on
//! its own thread, decode and key on the pool, results in order), its
//! records translated into the merged header's terms, and the inputs are
//! merged with the sort crate's loser tree (ties: the earlier input first,
//! as samtools' heap) into the same `Output` as `alnsort sort`.
//!
//! [`merged_inputs`] is the stream alone, which `alnsort sort` with several
//! inputs feeds to its sorter.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::cleanup::Debris;

use crate::io::merged::{merged_inputs, MergePlan};
use crate::options::merge::MergeArgs;
pub use alnsort_bam::header_merge::MergeOptions;
use std::sync::Arc;

/// Runs `alnsort merge` with parsed arguments.
pub fn run_merge(m: &MergeArgs, debris: &Debris) -> Result<()> {
    let cfg: Config = crate::config::resolve(&m.sort)?;
    cfg.print_warnings();
    if !m.force {
        if let Some(out) = &cfg.output {
            if std::fs::metadata(out).is_ok_and(|md| md.is_file()) {
                return Err(Error::Refused(format!(
                    "[bam_merge] File '{}' exists. Please apply '-f' to overwrite. Abort.",
                    out.display()
                )));
            }
        }
    }
    let pool = crate::run::resources::worker_pool(cfg.threads, "alnsort-worker")?;
    let dest = crate::io::output::Destinations::prepare(&cfg, debris)?;
    let plan = MergePlan {
        paths: &m.inputs,
        opts: m.merge,
        order: &cfg.order,
        sort_order: None,
        region: m.region.as_deref(),
        unknown_reference: cfg.unknown_reference,
        refs: &cfg.refs,
        check_sorted: true,
    };
    let (inputs, encoder) = merged_inputs(&plan, &pool)?;
    if encoder.wide_positions() {
        crate::io::output::check_wide_output(&cfg)?;
    }
    let mut header = inputs.header.clone();
    if let Some(cl) = &cfg.pg {
        header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
    }
    let mut out =
        crate::io::output::Output::create(&cfg, dest, Arc::new(header), Arc::clone(&pool), debris)?;
    let mut scratch = Vec::new();
    let n = inputs
        .for_each(|key, rec| out.write_record(encoder.finish_record(key, rec, &mut scratch)))?;
    out.finish()?;
    if cfg.verbosity >= 3 {
        eprintln!("[alnsort merge] {n} records from {} inputs", m.inputs.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::io::merged::parse_region;
    use crate::options::merge::{merge_help, MERGE_OPTIONS};
    use crate::options::table::OptionName;
    use alnsort_bam::header::Header;

    fn header() -> Header {
        alnsort_bam::header::parse_sam_header(
            ["@SQ\tSN:chr1\tLN:1000", "@SQ\tSN:chr1:5\tLN:10"].map(str::as_bytes),
        )
        .unwrap()
    }

    #[test]
    fn regions_parse_as_htslib() {
        let h = header();
        let r = |t: &str| parse_region(&h, t).map(|r| (r.tid, r.beg, r.end));
        assert_eq!(r("chr1"), Some((0, 0, i64::MAX)));
        assert_eq!(r("chr1:6"), Some((0, 5, i64::MAX)));
        assert_eq!(r("chr1:1,000-2,000"), Some((0, 999, 2000)));
        assert_eq!(r("chr1:-20"), Some((0, 0, 20)));
        assert_eq!(r("chr1:30-20"), None);
        assert_eq!(r("chr9:1-2"), None);
    }

    /// Help is rendered as `alnsort sort --help` is: every option listed,
    /// wrapped to 80 columns.
    #[test]
    fn help_lists_every_option_within_80_columns() {
        let help = merge_help();
        for line in help.lines() {
            assert!(
                line.chars().count() <= crate::options::table::HELP_WIDTH,
                "{line:?}"
            );
        }
        for s in MERGE_OPTIONS {
            assert!(help.contains(&format!("  {}", s.synopsis())), "{s:?}");
        }
    }

    /// java.util.PriorityQueue's order, worked by hand from OpenJDK's
    /// siftUp/siftDown: elements that compare equal are not taken in
    /// insertion order once the heap has been reshaped.
    #[test]
    fn java_heap_breaks_ties_as_java() {
        use crate::io::merged::JavaHeap;
        // Two inputs whose next records always tie: the one offered back
        // goes behind the one waiting, so they alternate.
        let mut h = JavaHeap::default();
        let eq = |_: usize, _: usize| std::cmp::Ordering::Equal;
        h.offer(0, eq);
        h.offer(1, eq);
        let mut out = Vec::new();
        for _ in 0..4 {
            let x = h.poll(eq).unwrap();
            out.push(x);
            h.offer(x, eq);
        }
        assert_eq!(out, [0, 1, 0, 1]);
        // Three: poll 0 moves the last (2) to the root, so 2 comes before 1.
        let mut h = JavaHeap::default();
        for i in 0..3 {
            h.offer(i, eq);
        }
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(h.poll(eq).unwrap());
        }
        assert_eq!(out, [0, 2, 1]);
        assert_eq!(h.poll(eq), None);
        // Distinct keys come out in order.
        let keys = [5, 1, 4, 2, 3];
        let by = |a: usize, b: usize| keys[a].cmp(&keys[b]);
        let mut h = JavaHeap::default();
        for i in 0..keys.len() {
            h.offer(i, by);
        }
        let order: Vec<usize> = std::iter::from_fn(|| h.poll(by)).collect();
        assert_eq!(order, [1, 3, 4, 2, 0]);
    }
}
