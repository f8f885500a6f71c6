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
