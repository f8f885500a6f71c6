//! `alnsort sort`'s run: inputs opened, records fed to the sorter (with the duplicate marker riding along), the header edited, the sorted records written.

use crate::config::Config;
use crate::error::Error;
use crate::error::{Context, Result};
use crate::io::cleanup::{Debris, TempDir};
use crate::io::merged::several_inputs_merge_options;
use crate::markdup::decisions::Decisions;
use crate::markdup::marker::Marker;
use crate::report::progress::{Phase, Progress};
use crate::run::resources::{
    charge_cram, chunk_fill, markdup_share, sorter_budget, uses_cram, worker_pool,
};
use alnsort_bam::header::Header;
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_sort::{SortConfig, Sorter};
use std::sync::Arc;

/// Runs `alnsort sort` with a resolved configuration, as a library call: it
/// changes no process state (no signal mask or handler thread, no allocator
/// tuning, no resource limit; the open-file fan-in follows the soft
/// `RLIMIT_NOFILE` as the caller left it) and removes the run's own files
/// (temp directory, pending output, index, stats) when it fails. It may be
/// called any number of times in one process.
/// Returns the run's report (what `--stats-json` writes, `Report::json`).
pub fn run_sort(cfg: Config) -> Result<crate::report::stats::Report> {
    run_sort_with(cfg, &Debris::default())
}

/// [`run_sort`], registering the run's files in `debris`, which the caller
/// may share with a signal handler (the binary's signal thread).
pub fn run_sort_with(cfg: Config, debris: &Debris) -> Result<crate::report::stats::Report> {
    cfg.print_warnings();
    // Created before any input is read, so an unwritable path costs no sort
    // and touches nothing else (no output is removed for it).
    let create = |opt: &str, p: &std::path::PathBuf| {
        crate::io::cleanup::StatsFile::create(p, debris)
            .with_context(|| format!("{opt} {}: cannot create the report file", p.display()))
    };
    let stats_file = match &cfg.stats_json {
        Some(p) => Some((p, create("--stats-json", p)?)),
        None => None,
    };
    let mqc_file = match &cfg.mqc {
        Some(p) => Some((p, create("--mqc", p)?)),
        None => None,
    };
    let run = match &cfg.samtools_markdup {
        Some(sm) => crate::run::sort_samtools::run_inner(&cfg, sm, debris),
        None => run_inner(&cfg, debris),
    };
    let report = match run {
        Ok(r) => r,
        Err(e) => {
            drop(stats_file);
            drop(mqc_file);
            // Only this run's own files (temp directory, pending output,
            // index and reports) are removed: whatever was at the output or
            // index path before the run is never touched, as only the final
            // rename reaches it.
            debris.remove_all();
            return Err(crate::run::resume::explain_failure(&cfg, e));
        }
    };
    // The output is complete and in place by now: keep it.
    let reports = [
        stats_file.map(|(p, f)| (p, f, report.json())),
        mqc_file.map(|(p, f)| {
            (
                p,
                f,
                report.mqc_json(&crate::report::stats::sample_name(&cfg)),
            )
        }),
    ];
    for (p, f, text) in reports.into_iter().flatten() {
        f.write(&text).with_context(|| {
            format!(
                "the sort finished and its output is complete, but writing the report to {} failed",
                p.display()
            )
        })?;
    }
    Ok(report)
}

/// The run's input: one file, or several merged as samtools merge would
/// (header, record order) and sorted as one; with its header and the
/// sort keys' encoder.
fn open_input(
    cfg: &Config,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<(InputFeed, Header, Arc<KeyEncoder>)> {
    // Several inputs: merged as samtools merge would (header, record
    // order), then sorted as one.
    Ok(if cfg.inputs.len() > 1 {
        let opts = several_inputs_merge_options();
        // `samtools merge` (coordinate order) interleaves them; the sort
        // then orders that stream.
        let plan = crate::io::merged::MergePlan {
            paths: &cfg.inputs,
            opts,
            order: &alnsort_bam::keys::SortOrder::Coordinate,
            sort_order: Some(&cfg.order),
            region: None,
            unknown_reference: cfg.unknown_reference,
            refs: &cfg.refs,
            check_sorted: false,
        };
        let (m, encoder) = crate::io::merged::merged_inputs(&plan, pool)?;
        let header = m.header.clone();
        (InputFeed::Many(m), header, encoder)
    } else {
        let input = crate::io::input::open_with_refs(&cfg.input, Arc::clone(pool), &cfg.refs)?;
        let header = input.header.clone();
        let encoder = Arc::new(
            KeyEncoder::new(cfg.order.clone(), header.n_ref(), &header.library_map())
                .with_wide_positions(crate::io::output::has_long_reference(&header)),
        );
        (InputFeed::One(input), header, encoder)
    })
}

/// `--resume`'s input when every record is in a kept run and the input is
/// standard input: the header kept in DIR, no records.
fn kept_input(
    cfg: &Config,
    resume: &crate::run::resume::Resume,
) -> Result<(InputFeed, Header, Arc<KeyEncoder>)> {
    let header = resume.kept_header()?;
    let encoder = Arc::new(
        KeyEncoder::new(cfg.order.clone(), header.n_ref(), &header.library_map())
            .with_wide_positions(crate::io::output::has_long_reference(&header)),
    );
    Ok((InputFeed::Kept, header, encoder))
}

/// The sorter's share less what CRAM reference bases take (with an
/// explicit `--max-memory` total): the input's references and, for CRAM
/// output, the encoder's.
fn charge_references(
    cfg: &Config,
    input: &InputFeed,
    header: &Header,
    budget: usize,
) -> Result<usize> {
    use alnsort_cram::RefHolding;
    let mut holdings = Vec::new();
    match input {
        InputFeed::One(input) => holdings.extend(input.cram_reference_holding()),
        InputFeed::Kept => {}
        // Several inputs: charged as one input holding all its references
        // (as before the evicting cache).
        InputFeed::Many(_) => {
            if uses_cram(false, cfg.inputs.iter().map(String::as_str)) {
                holdings.push(RefHolding::All);
            }
        }
    }
    if cfg.format == crate::options::sort::OutFormat::Cram {
        holdings.push(RefHolding::for_order(cfg.order == SortOrder::Coordinate));
    }
    if cfg.explicit_total && !holdings.is_empty() {
        return charge_cram(budget, header, cfg.threads, cfg.memory_budget, &holdings);
    }
    Ok(budget)
}

/// The sorter's final merge and, with `--markdup`, the marker's decision,
/// taken together. Duplicate marking decides on a thread of its own while the sorter
/// finishes its runs (a serial step over every read end; the pool may
/// be busy with the sorter's jobs, so it does not run there).
fn finish_deciding(
    sorter: Sorter,
    marker: Option<Marker>,
) -> (Result<Option<Decisions>>, Result<alnsort_sort::Merged>) {
    std::thread::scope(|s| {
        let decide = marker.map(|m| {
            std::thread::Builder::new()
                .name("alnsort-markdup".into())
                .spawn_scoped(s, move || m.finish())
        });
        let merged = sorter.finish().map_err(Error::from);
        let decisions = match decide {
            None => Ok(None),
            Some(Err(e)) => Err(Error::context("starting the duplicate-marking thread", e)),
            Some(Ok(h)) => h
                .join()
                .map_err(|_| Error::Internal("the duplicate-marking thread panicked".to_string()))
                .and_then(|r| r.map(Some)),
        };
        (decisions, merged)
    })
}

/// Writes the merged records to `out` (the first one, taken early for
/// minimiser order's `@HD`, before the rest), with `--markdup`'s flags and
/// removals applied, and checks that every record read was written once.
#[allow(clippy::too_many_arguments)]
fn write_sorted(
    cfg: &Config,
    out: &mut crate::io::output::Output,
    merged: &mut alnsort_sort::Merged,
    decisions: &Option<Decisions>,
    encoder: &KeyEncoder,
    first: Option<(Vec<u8>, Vec<u8>)>,
    progress: &Progress,
    records_in: u64,
) -> Result<()> {
    let mut written = 0u64;
    // Records as samtools writes them (minimiser order edits unplaced ones).
    let mut scratch = Vec::new();
    // --markdup: the record with its ordinal cut off and 0x400 decided.
    let mut marked = Vec::new();
    let mut removed = 0u64;
    if let Some((key, rec)) = &first {
        let rec = match &decisions {
            Some(d) => d.apply(rec, &mut marked)?,
            None => Some(&rec[..]),
        };
        match rec {
            Some(rec) => out.write_record(encoder.finish_record(key, rec, &mut scratch))?,
            None => removed += 1,
        }
        written += 1;
    }
    if merged.has_chunks()
        && decisions.as_ref().is_none_or(|d| d.marks_in_place())
        && !matches!(cfg.order, SortOrder::Minimiser(_))
    {
        // Whole merged partitions: the packing copies run on the pool (and
        // set duplicate marking's flags as they copy).
        while let Some(chunk) = merged.next_chunk()? {
            written += chunk.len() as u64;
            match &decisions {
                Some(d) => out.write_units(Arc::new(d.marked_chunk(chunk)))?,
                None => out.write_chunk(chunk)?,
            }
            progress.set_output_position(written);
        }
    }
    while let Some((key, rec)) = merged.next_entry()? {
        let rec = match &decisions {
            Some(d) => d.apply(rec, &mut marked)?,
            None => Some(rec),
        };
        match rec {
            Some(rec) => out.write_record(encoder.finish_record(key, rec, &mut scratch))?,
            None => removed += 1,
        }
        written += 1;
        if written.is_multiple_of(4096) {
            progress.set_output_position(written);
        }
    }
    if written != records_in || decisions.as_ref().is_some_and(|d| removed != d.removed()) {
        return Err(Error::Internal(format!(
            "read {records_in} records but the merge produced {written}"
        )));
    }
    Ok(())
}

/// Duplicate marking's start (`--markdup`): several inputs decided first,
/// in a pass of their own over the inputs in Picard's merge order
/// (`crate::markdup::inputs`); otherwise the marker the reading feeds.
fn start_marking(
    cfg: &Config,
    input: &InputFeed,
    header: &Header,
    markdup_budget: (usize, Option<u64>),
    pool: &Arc<rayon::ThreadPool>,
    tmp: &std::path::Path,
    debris: &Debris,
) -> Result<(Option<crate::markdup::inputs::Decided>, Option<Marker>)> {
    let mut decided_first = None;
    let input_name = match input {
        InputFeed::One(input) => input.name.clone(),
        InputFeed::Kept => cfg.input.clone(),
        InputFeed::Many(_) => {
            if let Some(md) = &cfg.markdup {
                decided_first = Some(crate::markdup::inputs::decide(
                    cfg,
                    md,
                    markdup_budget,
                    several_inputs_merge_options(),
                    pool,
                    debris,
                )?);
            }
            cfg.inputs.join(", ")
        }
    };
    let marker = cfg
        .markdup
        .as_ref()
        .filter(|_| decided_first.is_none())
        .map(|m| {
            let mut marker = crate::markdup::marker::Marker::new(
                header,
                m,
                &input_name,
                markdup_budget,
                Some(tmp),
            );
            marker.set_pool(Arc::clone(pool));
            marker
        });
    Ok((decided_first, marker))
}

fn run_inner(cfg: &Config, debris: &Debris) -> Result<crate::report::stats::Report> {
    let pool = worker_pool(cfg.threads, "alnsort-worker")?;
    let mut budget = sorter_budget(cfg, cfg.explicit_total)?;
    let metrics_file = match cfg.markdup.as_ref().and_then(|m| m.metrics.as_ref()) {
        Some(p) => Some(crate::markdup::metrics::MetricsFile::create(p, debris)?),
        None => None,
    };
    // The output's and the index's files first: a destination that cannot
    // be created stops the run before any input is read.
    let resume = crate::run::resume::Resume::open(cfg)?;
    let dest = crate::io::output::Destinations::prepare(cfg, debris)?;
    let (input, header, encoder) = match resume.as_ref().filter(|r| r.needs_no_input()) {
        Some(r) => kept_input(cfg, r)?,
        None => open_input(cfg, &pool)?,
    };
    if let Some(r) = &resume {
        r.keep_header(&header)?;
    }
    if encoder.wide_positions() {
        crate::io::output::check_wide_output(cfg)?;
    }
    budget = charge_references(cfg, &input, &header, budget)?;
    // --markdup: its state is kept within a quarter of the sorter's share
    // of --max-memory, taken from the sorter; with -m alone (the record
    // buffer, as in samtools) within as much again, beside the sorter (see
    // crate::markdup).
    let markdup_budget = markdup_share(cfg, &mut budget);
    let input_file_bytes = input.size();
    let progress = crate::run::resources::progress(cfg, input_file_bytes);
    let tmp = temp_dir(cfg, resume.as_ref(), budget, debris)?;
    let sort_cfg = SortConfig {
        memory_budget: budget,
        temp_dir: tmp.path().to_path_buf(),
        key_kind: crate::io::input::key_kind(&encoder),
        max_open_runs: 0,
        merge_partition_bytes: 0,
        chunk_fill: chunk_fill(cfg.explicit_total),
        expected_bytes: expected_bytes(cfg, budget),
    };
    let mut sorter = Sorter::new(sort_cfg, Arc::clone(&pool))?;
    let mut input = input;
    let (tracker, held) = match &resume {
        Some(r) => resume_from(r, cfg, &mut input, &mut sorter, tmp.path(), &pool)?,
        None => (None, 0),
    };
    let (decided_first, mut marker) = start_marking(
        cfg,
        &input,
        &header,
        markdup_budget,
        &pool,
        tmp.path(),
        debris,
    )?;
    let fed = match input {
        InputFeed::One(input) => input.feed(
            cfg.unknown_reference,
            Arc::clone(&encoder),
            &mut sorter,
            Arc::clone(&pool),
            &progress,
            marker
                .as_mut()
                .map(|m| m as &mut dyn crate::io::input::EndsSink),
            tracker.as_deref(),
        )?,
        InputFeed::Kept => crate::io::input::Fed::default(),
        InputFeed::Many(m) => {
            let kind = crate::io::input::key_kind(&encoder);
            let bases: Option<Vec<u64>> = decided_first.as_ref().map(|d| {
                d.records
                    .iter()
                    .scan(0u64, |base, &c| {
                        let b = *base;
                        *base += c;
                        Some(b)
                    })
                    .collect()
            });
            crate::io::merged::feed_sorter(m, kind, &mut sorter, &progress, bases.as_deref())?
        }
    };
    let records_in = fed.records + held;
    progress.enter(Phase::MergeRuns);
    let (decisions, merged) = finish_deciding(sorter, marker);
    if let Some(r) = &resume {
        if merged.is_ok() {
            r.mark_complete()?;
        }
        r.kill_point("merge");
    }
    let decisions = match decided_first {
        Some(d) => Some(d.decisions),
        None => decisions?,
    };
    let mut merged = merged?;
    progress.enter(Phase::Write);
    let (first, header) = output_header(cfg, &mut merged, header)?;
    let mut out = crate::io::output::Output::create_resumable(
        cfg,
        dest,
        Arc::clone(&header),
        Arc::clone(&pool),
        debris,
        resume.as_ref(),
    )?;
    write_sorted(
        cfg,
        &mut out,
        &mut merged,
        &decisions,
        &encoder,
        first,
        &progress,
        records_in,
    )?;
    if let Some(r) = &resume {
        r.kill_point("write");
    }
    let sort_stats = merged.stats();
    // Every decided duplicate must have been met once by the compression
    // jobs that set the flags; checked before the output is renamed into
    // place.
    let summary = out.finish_releasing(merged, || match &decisions {
        Some(d) => d.check_all_met(),
        None => Ok(()),
    })?;
    if let (Some(f), Some(d)) = (metrics_file, &decisions) {
        f.write(
            &d.metrics,
            &cfg.inputs,
            cfg.output.as_deref(),
            &cfg.command_line,
        )?;
    }
    let times = progress.finish();
    drop(tmp);
    if let Some(r) = &resume {
        r.kill_point("committed");
        r.finished()?;
    }
    Ok(crate::report::stats::sort_report(
        cfg,
        input_file_bytes,
        records_in,
        &fed,
        &progress,
        &summary,
        &sort_stats,
        &times,
        decisions.as_ref(),
    ))
}

/// The run's temporary directory (in `--resume`'s DIR, else under `-T`'s
/// parent), checked for the space the inputs' sizes promise
/// (`run::tmp_space`) unless told not to.
fn temp_dir(
    cfg: &Config,
    resume: Option<&Arc<crate::run::resume::Resume>>,
    budget: usize,
    debris: &Debris,
) -> Result<TempDir> {
    let temp_parent = resume.map_or(cfg.temp_parent.as_path(), |r| r.dir());
    let tmp =
        TempDir::new(temp_parent, crate::run::resume::TEMP_STEM, debris).with_context(|| {
            format!(
                "cannot create a temporary directory in {}",
                temp_parent.display()
            )
        })?;
    if cfg.tmp_space_check {
        super::tmp_space::check(input_paths(cfg), budget as u64, tmp.path())?;
    }
    Ok(tmp)
}

/// The input paths as given (one, or `--inputs`' several).
fn input_paths(cfg: &Config) -> &[String] {
    if cfg.inputs.is_empty() {
        std::slice::from_ref(&cfg.input)
    } else {
        &cfg.inputs[..]
    }
}

/// The record bytes the inputs are expected to hold
/// ([`super::tmp_space::estimate`]), for the sorter's spill schedule
/// ([`SortConfig::expected_bytes`]); 0 when any input's size is unknown
/// (standard input, CRAM).
fn expected_bytes(cfg: &Config, budget: usize) -> u64 {
    let est = super::tmp_space::estimate(input_paths(cfg), budget as u64);
    if est.unknown.is_empty() {
        est.record_bytes
    } else {
        0
    }
}

/// `--resume`: the kept runs handed to `sorter` and a BAM input moved to
/// where they end. Returns the tracker of the runs to come and the records
/// the kept runs hold.
fn resume_from(
    r: &Arc<crate::run::resume::Resume>,
    cfg: &Config,
    input: &mut InputFeed,
    sorter: &mut Sorter,
    tmp: &std::path::Path,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<(Option<Arc<crate::run::resume::Tracker>>, u64)> {
    let bam = matches!(&input, InputFeed::One(i) if i.is_bam());
    let tracker = r.tracker(bam);
    let held = r.start(sorter, tmp, Arc::clone(&tracker))?;
    if let (InputFeed::One(i), Some(at), true) = (input, r.restart(), bam) {
        i.seek_bam(
            &cfg.input,
            at.voffset.unwrap_or(0),
            at.record,
            sorter.plan().record_limit,
            Arc::clone(pool),
        )?;
    }
    Ok((Some(tracker), held))
}

/// A record taken from the merge before the output is made: (key, record).
type TakenAhead = (Vec<u8>, Vec<u8>);

/// The output's header: samtools sort's edits, minimiser order's @HD
/// saying whether any record is placed (placed records sort first, so the
/// first record tells: it is taken from `merged` and returned, to be
/// written first).
fn output_header(
    cfg: &Config,
    merged: &mut alnsort_sort::Merged,
    mut header: Header,
) -> Result<(Option<TakenAhead>, Arc<Header>)> {
    let mut first = None;
    if cfg.hd_all_unplaced.is_some() {
        first = merged.next_entry()?.map(|(k, r)| (k.to_vec(), r.to_vec()));
    }
    let all_unplaced = first
        .as_ref()
        .is_none_or(|(_, r)| alnsort_bam::RecordRef::with_block_size(r).ref_id() < 0);
    cfg.edit_header(&mut header, all_unplaced);
    Ok((first, Arc::new(header)))
}

/// The input of a sort: one file, or several merged.
enum InputFeed {
    One(crate::io::input::OpenInput),
    Many(crate::io::merged::MergedStream),
    /// `--resume` on standard input with every record in a kept run:
    /// nothing to read.
    Kept,
}

impl InputFeed {
    /// Bytes of the input files, when every one is a regular file.
    fn size(&self) -> Option<u64> {
        match self {
            InputFeed::One(i) => i.size,
            InputFeed::Many(m) => m.size,
            InputFeed::Kept => None,
        }
    }
}

#[cfg(test)]
mod allocator_tests {
    use super::uses_cram;

    /// The binary picks the CRAM allocator setting from the output format
    /// and from each input file's magic; standard input and unreadable or
    /// short files count as not CRAM.
    #[test]
    fn cram_is_recognised_by_output_format_and_input_magic() {
        let dir = std::env::temp_dir().join(format!("alnsort-uses-cram-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cram = dir.join("in.cram.renamed");
        std::fs::write(&cram, b"CRAM\x03\x00rest").unwrap();
        let bam = dir.join("in.bam");
        std::fs::write(&bam, b"\x1f\x8b\x08\x04rest").unwrap();
        let short = dir.join("short");
        std::fs::write(&short, b"CR").unwrap();
        let (cram, bam, short) = (
            cram.to_str().unwrap(),
            bam.to_str().unwrap(),
            short.to_str().unwrap(),
        );

        assert!(uses_cram(false, [bam, cram]));
        assert!(!uses_cram(false, [bam, short, "-", "/nonexistent/x.cram"]));
        assert!(uses_cram(true, ["-"]));
        assert!(!uses_cram(false, std::iter::empty()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
