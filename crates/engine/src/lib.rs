//! The `alnsort` command: glue between argv and the library crates. It owns
//! the one thread pool (sized by `-@`), the private temp directory, the
//! cleanup on signals and errors, and the order of the stages: open and read
//! the header, feed every record with its key to the sorter, edit the header,
//! then merge and write. Each stage is a function a distributed driver can
//! call on its own.

// This crate calls libc (descriptors, rusage, mkdtemp) and so has `unsafe`:
// each block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cleanup;
pub mod config;
pub mod error;
pub mod generate;
pub mod index;
pub mod input;
pub mod mark_in_order;
pub mod markdup;
pub mod markdup_inputs;
pub mod memsize;
pub mod merge;
pub mod options;
pub mod output;
pub mod picard;
pub mod progress;
pub mod sort_args;
pub mod stage_args;
pub mod stage_commands;
pub mod stages;
pub mod stages_markdup;
pub mod stats;

pub use error::{error_text, Error};

use crate::cleanup::{Debris, TempDir};
use crate::config::Config;
use crate::error::{Context, Result};
use crate::progress::{Phase, Progress};
use alnsort_bam::header::Header;
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_sort::{SortConfig, Sorter};
use std::io::IsTerminal;
use std::sync::Arc;

/// Bytes of the total budget kept back for what the sorter does not own:
/// in-flight BGZF blocks of the reader and of the writer (4 per pool thread
/// each, 64 KiB compressed + 64 KiB payload), read batches in flight
/// (`alnsort_bam::reader::BATCH_BYTES`, 2 per thread + 4 counting the one
/// being cut and the one being handed over, each with its raw bytes, a
/// recycled raw buffer waiting for reuse, and its sort-layout copy with its
/// entries and keys: 3 batches' worth), and the program's own baseline
/// (about 6 MiB of code, stacks and allocator state). With an index
/// (`indexed`), each of the writer's blocks in flight also carries its
/// records' index notes (`alnsort_bgzf::UnitNote`: at most
/// `MAX_NOTES_PER_BLOCK`, in a vector that grows by doubling).
fn reserve_bytes(threads: usize, indexed: bool) -> u64 {
    let batch = alnsort_bam::reader::BATCH_BYTES as u64;
    let per_batch = batch * 3;
    let notes = match indexed {
        true => {
            alnsort_bgzf::MAX_NOTES_PER_BLOCK.next_power_of_two()
                * std::mem::size_of::<alnsort_bgzf::UnitNote>()
        }
        false => 0,
    } as u64;
    let per_thread = 2 * 4 * 2 * 65536 + 4 * notes + 2 * per_batch;
    (6 << 20) + 4 * per_batch + per_thread * threads as u64
}

/// What a CRAM run holds beside the records and the BAM reserve, for each
/// pool thread: the container being decoded or encoded (noodles' records
/// and blocks) and the decoded batches in flight. Measured: peak RSS above
/// `--max-memory` with only the references charged was 22, 36 and 62 MB at
/// -@1, -@2, -@4 (500,072 benchmark records in samtools' containers of
/// 10,000 records); containers of long reads are larger than this.
const CRAM_PER_THREAD: u64 = 16 << 20;
/// The same, once per run (the reader's container and the writer's).
const CRAM_BASE: u64 = 12 << 20;

/// Takes what a CRAM run holds outside the sorter from the sorter's share
/// of `--max-memory`: the reference sequences the reader and the writer
/// can hold at once ([`alnsort_cram::RefHolding::bytes`]: in coordinate
/// order those of the container jobs running, plus one kept; in any other
/// order all of them; the reader's are freed before the writer starts,
/// so the larger of the two) and the containers in flight
/// ([`CRAM_PER_THREAD`]). Too little left for the records is an error
/// naming the amounts.
fn charge_cram(
    budget: usize,
    header: &Header,
    threads: usize,
    total: u64,
    holdings: &[alnsort_cram::RefHolding],
) -> Result<usize> {
    let lengths: Vec<u64> = header.refs().iter().map(|r| r.len).collect();
    let refs = holdings
        .iter()
        .map(|h| h.bytes(&lengths, threads))
        .max()
        .unwrap_or(0);
    let need = refs + CRAM_BASE + CRAM_PER_THREAD * threads.max(1) as u64;
    let room = 2 << 20;
    match (budget as u64).checked_sub(need).filter(|&l| l >= room) {
        Some(left) => Ok(left as usize),
        None => Err(Error::Refused(format!(
            "--max-memory {} is too small for this CRAM run: of its {} reference sequence(s) \
             up to {} are held at once, and the containers in flight take about {} beside the \
             records; use --max-memory {} or more",
            memsize::human(total),
            header.refs().len(),
            memsize::human(refs),
            memsize::human(need - refs),
            memsize::human(total + (need + room).saturating_sub(budget as u64))
        ))),
    }
}

/// The smallest `--max-memory` accepted: below it the process's own
/// baseline and I/O buffers leave the sorter no useful room.
pub const MIN_TOTAL_BUDGET: u64 = 16 << 20;

/// Whether a run reads or writes CRAM, as far as the binary can tell
/// before it starts: CRAM output, or an input file (not standard input,
/// which cannot be read twice) that begins with the CRAM magic.
pub fn uses_cram<'a>(cram_out: bool, inputs: impl IntoIterator<Item = &'a str>) -> bool {
    use std::io::Read;
    cram_out
        || inputs.into_iter().any(|path| {
            if path == "-" {
                return false;
            }
            let mut magic = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok_and(|()| &magic == alnsort_cram::MAGIC)
        })
}

/// Runs `alnsort sort` with a resolved configuration, as a library call: it
/// changes no process state (no signal mask or handler thread, no allocator
/// tuning, no resource limit; the open-file fan-in follows the soft
/// `RLIMIT_NOFILE` as the caller left it) and removes the run's own files
/// (temp directory, pending output, index, stats) when it fails. It may be
/// called any number of times in one process.
/// Returns the run's report (what `--stats-json` writes, `Report::json`).
pub fn run_sort(cfg: Config) -> Result<stats::Report> {
    run_sort_with(cfg, &Debris::default())
}

/// [`run_sort`], registering the run's files in `debris`, which the caller
/// may share with a signal handler (the binary's signal thread).
pub fn run_sort_with(cfg: Config, debris: &Debris) -> Result<stats::Report> {
    cfg.print_warnings();
    // Created before any input is read, so an unwritable path costs no sort
    // and touches nothing else (no output is removed for it).
    let create = |opt: &str, p: &std::path::PathBuf| {
        stats::StatsFile::create(p, debris)
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
    let report = match run_inner(&cfg, debris) {
        Ok(r) => r,
        Err(e) => {
            drop(stats_file);
            drop(mqc_file);
            // Only this run's own files (temp directory, pending output,
            // index and reports) are removed: whatever was at the output or
            // index path before the run is never touched, as only the final
            // rename reaches it.
            debris.remove_all();
            return Err(e);
        }
    };
    // The output is complete and in place by now: keep it.
    let reports = [
        stats_file.map(|(p, f)| (p, f, report.json())),
        mqc_file.map(|(p, f)| (p, f, report.mqc_json(&stats::sample_name(&cfg)))),
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

/// `--markdup`'s memory out of the sorter's `budget`: a quarter of it,
/// taken from the sorter, with `--max-memory`; with `-m` alone (the record
/// buffer, as in samtools) as much again, beside the sorter. Also the
/// `--max-memory` total its messages name.
fn markdup_share(cfg: &Config, budget: &mut usize) -> (usize, Option<u64>) {
    match &cfg.markdup {
        Some(_) if cfg.explicit_total => {
            let share = *budget / 4;
            *budget -= share;
            (share, Some(cfg.memory_budget))
        }
        _ => (*budget, None),
    }
}

/// The memory `--markdup` may use in a run of `cfg` on its own (the
/// distributed decision, `stages_markdup::decide`): as [`markdup_share`]
/// gives it out of the sorter's budget.
pub(crate) fn markdup_budget(cfg: &Config) -> Result<(usize, Option<u64>)> {
    let mut budget = sorter_budget(cfg, cfg.explicit_total)?;
    Ok(markdup_share(cfg, &mut budget))
}

fn sorter_budget(cfg: &Config, explicit_total: bool) -> Result<usize> {
    // A CRAM output's index (.crai) is built from containers, not notes.
    let noted = cfg.index.is_some() && cfg.format == options::OutFormat::Bam;
    let reserve = reserve_bytes(cfg.threads, noted);
    let budget = if explicit_total {
        if cfg.memory_budget < MIN_TOTAL_BUDGET.max(reserve + (2 << 20)) {
            return Err(Error::Refused(format!("--max-memory {} is too small: with {} thread(s) alnsort needs at least {} for I/O buffers plus \
                 room for records; use --max-memory {} or more",
                memsize::human(cfg.memory_budget),
                cfg.threads,
                memsize::human(reserve),
                memsize::human(MIN_TOTAL_BUDGET.max(reserve + (2 << 20))))));
        }
        cfg.memory_budget - reserve
    } else {
        // samtools' -m is the record buffer (per thread x threads); keep
        // that meaning so -m 1M spills as often as samtools does.
        cfg.memory_budget
    };
    Ok(budget as usize)
}

/// samtools' record arena (`bam_sort_core_ext`, reference/samtools-sort.md
/// §4): each record takes `sizeof(bam1_t)` (80 bytes on LP64, measured)
/// plus its `l_data`, rounded up to 8. A framed BAM record here is
/// `l_data` plus 36 bytes (`block_size` and the 32 bytes of fixed fields,
/// which `bam1_t` holds in its 80), so it takes its length plus 44.
const SAMTOOLS_ARENA: alnsort_sort::ChunkFill = alnsort_sort::ChunkFill::Arena {
    overhead: 80 - 36,
    align: 8,
};

/// What fills the sorter's chunk: with `-m` (samtools' per-thread record
/// buffer), records count as samtools' arena counts them, so alnsort spills
/// exactly where samtools writes its first temporary file, never sooner;
/// with `--max-memory` (a whole-process total) what they hold here.
fn chunk_fill(explicit_total: bool) -> alnsort_sort::ChunkFill {
    if explicit_total {
        alnsort_sort::ChunkFill::Held
    } else {
        SAMTOOLS_ARENA
    }
}

/// The run's worker pool: `threads` workers (at least one) named
/// `{name}-{i}`; sort, merge and the stages each start one.
pub fn worker_pool(threads: usize, name: &'static str) -> Result<Arc<rayon::ThreadPool>> {
    Ok(Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .context("starting the thread pool")?,
    ))
}

/// How `alnsort sort IN1 IN2 ...` merges the inputs' headers: as `samtools
/// merge` does by default (clashing IDs renamed with the suffixes of seed 0).
pub(crate) fn several_inputs_merge_options() -> alnsort_bam::header_merge::MergeOptions {
    alnsort_bam::header_merge::MergeOptions {
        seed: 0,
        ..Default::default()
    }
}

fn run_inner(cfg: &Config, debris: &Debris) -> Result<stats::Report> {
    let pool = worker_pool(cfg.threads, "alnsort-worker")?;
    let mut budget = sorter_budget(cfg, cfg.explicit_total)?;
    let metrics_file = match cfg.markdup.as_ref().and_then(|m| m.metrics.as_ref()) {
        Some(p) => Some(markdup::MetricsFile::create(p, debris)?),
        None => None,
    };
    // The output's and the index's files first: a destination that cannot
    // be created stops the run before any input is read.
    let dest = output::Destinations::prepare(cfg, debris)?;
    // Several inputs: merged as samtools merge would (header, record
    // order), then sorted as one.
    let (input, mut header, encoder) = if cfg.inputs.len() > 1 {
        let opts = several_inputs_merge_options();
        // `samtools merge` (coordinate order) interleaves them; the sort
        // then orders that stream.
        let plan = merge::MergePlan {
            paths: &cfg.inputs,
            opts,
            order: &alnsort_bam::keys::SortOrder::Coordinate,
            sort_order: Some(&cfg.order),
            region: None,
            unknown_reference: cfg.unknown_reference,
            refs: &cfg.refs,
            check_sorted: false,
        };
        let (m, encoder) = merge::merged_inputs(&plan, &pool)?;
        let header = m.header.clone();
        (InputFeed::Many(m), header, encoder)
    } else {
        let input = input::open_with_refs(&cfg.input, Arc::clone(&pool), &cfg.refs)?;
        let header = input.header.clone();
        let encoder = Arc::new(
            KeyEncoder::new(cfg.order.clone(), header.n_ref(), &header.library_map())
                .with_wide_positions(has_long_reference(&header)),
        );
        (InputFeed::One(input), header, encoder)
    };
    if encoder.wide_positions() {
        check_wide_output(cfg)?;
    }
    use alnsort_cram::RefHolding;
    let mut holdings = Vec::new();
    match &input {
        InputFeed::One(input) => holdings.extend(input.cram_reference_holding()),
        // Several inputs: charged as one input holding all its references
        // (as before the evicting cache).
        InputFeed::Many(_) => {
            if uses_cram(false, cfg.inputs.iter().map(String::as_str)) {
                holdings.push(RefHolding::All);
            }
        }
    }
    if cfg.format == options::OutFormat::Cram {
        holdings.push(RefHolding::for_order(cfg.order == SortOrder::Coordinate));
    }
    if cfg.explicit_total && !holdings.is_empty() {
        budget = charge_cram(budget, &header, cfg.threads, cfg.memory_budget, &holdings)?;
    }
    // --markdup: its state is kept within a quarter of the sorter's share
    // of --max-memory, taken from the sorter; with -m alone (the record
    // buffer, as in samtools) within as much again, beside the sorter (see
    // crate::markdup).
    let markdup_budget = markdup_share(cfg, &mut budget);
    let display = progress::Display::choose(
        cfg.progress,
        cfg.progress_interval,
        std::io::stderr().is_terminal(),
    );
    let input_file_bytes = input.size();
    let progress = Progress::new(display, input_file_bytes);
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort", debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    let sort_cfg = SortConfig {
        memory_budget: budget,
        temp_dir: tmp.path().to_path_buf(),
        key_kind: input::key_kind(&encoder),
        max_open_runs: 0,
        merge_partition_bytes: 0,
        chunk_fill: chunk_fill(cfg.explicit_total),
    };
    let mut sorter = Sorter::new(sort_cfg, Arc::clone(&pool))?;
    // --markdup with several inputs: decided first, in a pass of its own
    // over the inputs in Picard's merge order (crate::markdup_inputs).
    let mut decided_first = None;
    let input_name = match &input {
        InputFeed::One(input) => input.name.clone(),
        InputFeed::Many(_) => {
            if let Some(md) = &cfg.markdup {
                decided_first = Some(markdup_inputs::decide(
                    cfg,
                    md,
                    markdup_budget,
                    several_inputs_merge_options(),
                    &pool,
                    debris,
                )?);
            }
            cfg.inputs.join(", ")
        }
    };
    let mut marker = cfg
        .markdup
        .as_ref()
        .filter(|_| decided_first.is_none())
        .map(|m| {
            let mut marker =
                markdup::Marker::new(&header, m, &input_name, markdup_budget, Some(tmp.path()));
            marker.set_pool(Arc::clone(&pool));
            marker
        });
    let fed = match input {
        InputFeed::One(input) => input.feed(
            cfg.unknown_reference,
            Arc::clone(&encoder),
            &mut sorter,
            Arc::clone(&pool),
            &progress,
            marker.as_mut(),
        )?,
        InputFeed::Many(m) => {
            let kind = input::key_kind(&encoder);
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
            merge::feed_sorter(m, kind, &mut sorter, &progress, bases.as_deref())?
        }
    };
    let records_in = fed.records;
    progress.enter(Phase::MergeRuns);
    // Duplicate marking decides on a thread of its own while the sorter
    // finishes its runs (a serial step over every read end; the pool may
    // be busy with the sorter's jobs, so it does not run there).
    let (decisions, merged) = std::thread::scope(|s| {
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
    });
    let decisions = match decided_first {
        Some(d) => Some(d.decisions),
        None => decisions?,
    };
    let mut merged = merged?;
    progress.enter(Phase::Write);
    // Minimiser order's @HD says whether any record is placed; placed
    // records sort first, so the first record tells.
    let mut first = None;
    if cfg.hd_all_unplaced.is_some() {
        first = merged.next_entry()?.map(|(k, r)| (k.to_vec(), r.to_vec()));
    }
    let all_unplaced = first
        .as_ref()
        .is_none_or(|(_, r)| alnsort_bam::RecordRef::with_block_size(r).ref_id() < 0);
    edit_header(&mut header, cfg, all_unplaced);
    let header = Arc::new(header);
    let mut out =
        output::Output::create(cfg, dest, Arc::clone(&header), Arc::clone(&pool), debris)?;
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
    if written != records_in || decisions.as_ref().is_some_and(|d| removed != d.removed) {
        return Err(Error::Internal(format!(
            "read {records_in} records but the merge produced {written}"
        )));
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
    let report = stats::Report::new(stats::ReportInput {
        cfg,
        input_file_bytes,
        records_in,
        unknown_reference_records: fed.tally.unknown_reference_records,
        missing_eof_inputs: fed.tally.missing_eof_blocks,
        bytes_in: progress.bytes(),
        output: &summary,
        sort: &sort_stats,
        times: &times,
        serial: &[
            ("read_scan", fed.read_scan_s),
            ("read_push", fed.read_push_s),
        ],
    });
    let mut report = report;
    if let Some(d) = &decisions {
        report.add_object("markdup", d.stats_counts());
    }
    if cfg.verbosity >= 3 {
        eprint!("{}", report.text());
    }
    Ok(report)
}

/// Whether a reference is longer than BAM's positions reach (`i32::MAX`):
/// samtools then sorts with 64-bit positions, and only SAM output can hold
/// them.
pub fn has_long_reference(header: &Header) -> bool {
    header.refs().iter().any(|r| r.len > i32::MAX as u64)
}

/// What wide positions (see [`has_long_reference`]) allow: SAM output (as
/// samtools: BAM is refused with its message before any record is read),
/// and the orders whose keys carry 64-bit positions.
pub fn check_wide_output(cfg: &Config) -> Result<()> {
    if !matches!(cfg.format, config_format::Sam | config_format::SamGz) {
        return Err(Error::Refused("output format is not compatible with very large references: a reference is longer than \
             2147483647 bases, which BAM positions cannot reach; write SAM (-O SAM, or an output named .sam)".to_string()));
    }
    if matches!(
        cfg.order,
        alnsort_bam::keys::SortOrder::TemplateCoordinate
            | alnsort_bam::keys::SortOrder::Minimiser(_)
    ) {
        return Err(Error::Refused(
            "this sort order is not supported yet for references longer than 2147483647 bases \
             (coordinate, name and tag orders are)"
                .to_string(),
        ));
    }
    Ok(())
}

use crate::options::OutFormat as config_format;

/// The input of a sort: one file, or several merged.
enum InputFeed {
    One(input::OpenInput),
    Many(merge::MergedInputs),
}

impl InputFeed {
    /// Bytes of the input files, when every one is a regular file.
    fn size(&self) -> Option<u64> {
        match self {
            InputFeed::One(i) => i.size,
            InputFeed::Many(m) => m.size,
        }
    }
}

/// The header edits samtools sort makes: @HD for the order, then @PG.
/// `all_unplaced`: no record is placed (`tid >= 0`), which changes
/// minimiser order's @HD.
pub fn edit_header(header: &mut Header, cfg: &Config, all_unplaced: bool) {
    let hd = match &cfg.hd_all_unplaced {
        Some(hd) if all_unplaced => hd,
        _ => &cfg.hd,
    };
    header.set_sort_order(&hd.so, hd.go.as_deref(), hd.ss.as_deref());
    if let Some(cl) = &cfg.pg {
        header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
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
