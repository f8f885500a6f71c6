//! Duplicate marking in the distributed stages (`alnsort_engine::stages`):
//! the output and metrics of one-node `alnsort sort --markdup` from the
//! split/map/reduce dataflow.
//!
//! * **map** (with `--markdup` among the options): each record enters the
//!   map's sorter followed by its place in the input as 8 bytes,
//!   [`packed`]`(split ordinal, record index in the split)`, as one node
//!   appends the input ordinal ([`crate::markdup::ordinal::ordinal_suffix`]); the
//!   blocks carry it to the reduce.
//! * **decide** ([`decide`]): the decision of one node over the whole input
//!   ([`crate::markdup::inputs::decide`]: the inputs read in Picard's merge
//!   order, the marker's state within the options' memory budget, read
//!   ends spilled beyond it), the duplicate and optical bits over
//!   input-order ordinals ([`Decisions::to_bytes`]) and the metrics. It
//!   reads the inputs itself, so it runs beside the maps. The read ends of
//!   the whole input are decided by this one task: the shuffle of read
//!   ends by duplicate key over several tasks is not built.
//! * **reduce** ([`crate::stages::sort::reduce_marked`]): each record's packed
//!   place becomes its input ordinal (the split's first record's ordinal,
//!   from the maps' record counts: [`split_bases`], plus its index), and
//!   the record is written as one node writes it ([`Decisions::apply_at`]:
//!   0x400, `DT`, removal).
//! * **metrics**: [`write_metrics`] writes the text one node writes.
//!
//! The decision without one task over the whole input (one input;
//! [`alnsort_markdup::dist`] says how): [`collect`] per split (slots,
//! fragment ends by end bucket, mate halves by name bucket), [`join_within`] per
//! name bucket, [`decide_bucket`] per end bucket, [`finish_split`] per
//! split in order (retried with the previous split's carry when it
//! differs from the one assumed), and [`assemble`]: the same
//! [`StageDecision`] as [`decide`]. Within the options' memory budget
//! (one node's marker's, from `-m`/`--max-memory`): [`join_within`] or
//! [`join_files`] and [`decide_bucket`] (or [`decide_bucket_files`]) sort
//! what goes beyond it into run files under `-T` and merge them back. The
//! stage subcommands run these tasks with files
//! ([`crate::stages::commands`]).

use std::path::{Path, PathBuf};

use crate::error::{bail, Context, Result};

use crate::io::cleanup::Debris;
use crate::markdup::decisions::Decisions;
use crate::markdup::metrics::MetricsFile;
use crate::options::sort::SortOptions;
pub use alnsort_markdup::dist::{self, Fixups, SetsDecided, SplitOutcome, SplitShare};
use alnsort_markdup::MetricsReport;
pub use alnsort_markdup::WalkCarry;

/// A record's place as a map appends it: split ordinal and index in the
/// split ([`alnsort_markdup::dist::ordinal`], the number the distributed
/// marking knows each record by).
pub fn packed(split: u32, index: u64) -> u64 {
    dist::ordinal(split, index) as u64
}

/// What [`decide`] gives: the decisions as bytes for the reduce tasks,
/// each input's record count (which [`split_bases`] checks), the metrics.
pub struct StageDecision {
    pub decisions: Vec<u8>,
    pub records: Vec<u64>,
    pub metrics: MetricsReport,
}

/// Decides duplicates over `inputs` as `alnsort sort --markdup IN...` does
/// on one node with `options`.
pub fn decide(inputs: &[PathBuf], options: &SortOptions) -> Result<StageDecision> {
    let mut cfg = crate::stages::plan::stage_config(options, Path::new("stage.bam"), None)?;
    let Some(md) = cfg.markdup.clone() else {
        bail!(
            Refused,
            "the duplicate-marking stage needs --markdup among the options"
        );
    };
    cfg.inputs = inputs.iter().map(|p| p.display().to_string()).collect();
    cfg.input = cfg.inputs.first().cloned().unwrap_or_default();
    let pool = crate::run::resources::worker_pool(cfg.threads, "alnsort-decide")?;
    let budget = crate::run::resources::markdup_budget(&cfg)?;
    let debris = Debris::default();
    let d = crate::markdup::inputs::decide(
        &cfg,
        &md,
        budget,
        crate::io::merged::several_inputs_merge_options(),
        &pool,
        &debris,
    )?;
    Ok(StageDecision {
        decisions: d.decisions.to_bytes(),
        records: d.records,
        metrics: d.decisions.metrics,
    })
}

/// The input ordinal of the first record of each split, by split ordinal,
/// from the maps' record counts (`split_records[s]`: split `s`'s), checked
/// against the decision's record count per input (`input_records`;
/// `split_inputs[s]`: split `s`'s input).
pub fn split_bases(
    split_records: &[u64],
    split_inputs: &[usize],
    input_records: &[u64],
) -> Result<Vec<u64>> {
    if split_records.len() != split_inputs.len() {
        bail!(
            Refused,
            "{} split record counts for {} splits",
            split_records.len(),
            split_inputs.len()
        );
    }
    let mut per_input = vec![0u64; input_records.len()];
    let mut bases = Vec::with_capacity(split_records.len());
    let mut at = 0u64;
    for (&n, &i) in split_records.iter().zip(split_inputs) {
        if i >= per_input.len() {
            bail!(
                Refused,
                "split of input {i}, but the decision read {} inputs",
                per_input.len()
            );
        }
        bases.push(at);
        at += n;
        per_input[i] += n;
    }
    if per_input != input_records {
        bail!(Refused,
            "the maps read {per_input:?} records per input, but duplicate marking decided on {input_records:?}: \
             an input changed during the run"
        );
    }
    Ok(bases)
}

/// The decisions a reduce applies: the whole decision with where each
/// split's records start in input order ([`Marks::new`]), or only the
/// reduce's own range's slice of each split ([`Marks::sliced`]).
pub struct Marks {
    pub decisions: Decisions,
    lookup: Lookup,
}

enum Lookup {
    /// Each split's first input ordinal and record count.
    Whole { bases: Vec<u64>, records: Vec<u64> },
    /// Each split's slice of one range, and the records of each split met.
    Sliced {
        slices: Vec<dist::RangeSlice>,
        met: Vec<std::sync::atomic::AtomicU64>,
    },
}

/// The `--markdup` settings of `options` (which must ask for them), which
/// the decisions are read with.
pub(crate) fn marks_config(
    options: &SortOptions,
) -> Result<crate::options::markdup::MarkdupConfig> {
    let cfg = crate::stages::plan::stage_config(options, Path::new("stage.bam"), None)?;
    match cfg.markdup {
        Some(md) => Ok(md),
        None => bail!(
            Refused,
            "duplicate decisions given, but --markdup is not among the options"
        ),
    }
}

impl Marks {
    /// The whole decision ([`Decisions::to_bytes`]) and where each split's
    /// records start in input order ([`split_bases`]).
    pub fn new(decisions: &[u8], bases: Vec<u64>, options: &SortOptions) -> Result<Marks> {
        let md = marks_config(options)?;
        let decisions = Decisions::from_bytes(decisions, &md)?;
        // Each split's record count: up to the next split's start, the
        // last one's up to the decision's end.
        let mut records = Vec::with_capacity(bases.len());
        for (s, &b) in bases.iter().enumerate() {
            let next = bases.get(s + 1).copied().unwrap_or(decisions.records());
            if next < b {
                bail!(
                    Refused,
                    "split {s} starts at record {b}, after the next split's start or the decision's {} records",
                    decisions.records()
                );
            }
            records.push(next - b);
        }
        Ok(Marks {
            decisions,
            lookup: Lookup::Whole { bases, records },
        })
    }

    /// The slices of one range of the output, one per split in split
    /// order ([`dist::RangeSlice::to_bytes`], from
    /// [`dist::SplitOutcome::slices`]): the reduce holds its range's
    /// duplicates, not the whole decision, and checks at the end
    /// ([`Marks::check_complete`]) that it met exactly the records of each
    /// split the slices say went to its range.
    pub fn sliced(slices: &[&[u8]], options: &SortOptions) -> Result<Marks> {
        let md = marks_config(options)?;
        let slices = slices
            .iter()
            .enumerate()
            .map(|(s, b)| {
                dist::RangeSlice::from_bytes(b)
                    .map_err(crate::error::Error::from)
                    .with_context(|| format!("the duplicate decision's slice of split {s}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let flags = (
            md.remove_duplicates,
            md.remove_sequencing_duplicates,
            md.tagging,
        );
        let none = alnsort_markdup::Bits::new(0);
        Ok(Marks {
            decisions: Decisions::new(
                none.clone(),
                none,
                Default::default(),
                Default::default(),
                flags,
            ),
            lookup: Lookup::Sliced {
                met: slices.iter().map(|_| Default::default()).collect(),
                slices,
            },
        })
    }

    /// The record to write for `rec` as it comes out of a map's block
    /// (with its packed place); `None` when it is removed.
    pub fn apply<'a>(&self, rec: &[u8], buf: &'a mut Vec<u8>) -> Result<Option<&'a [u8]>> {
        let place = crate::markdup::ordinal::record_ordinal(rec)?;
        let (split, index) = dist::split_of(place);
        let body = &rec[..rec.len() - crate::markdup::ordinal::ORDINAL_BYTES];
        let splits = match &self.lookup {
            Lookup::Whole { bases, .. } => bases.len(),
            Lookup::Sliced { slices, .. } => slices.len(),
        };
        if split >= splits {
            bail!(
                Refused,
                "a record of split {split}, but the duplicate decision has {splits} splits: the blocks and the decision \
                 come from different runs"
            );
        }
        match &self.lookup {
            Lookup::Whole { bases, records } => {
                if index >= records[split] {
                    bail!(
                        Refused,
                        "a record at index {index} of split {split}, which has {} records in the duplicate decision: \
                         the blocks and the decision come from different runs",
                        records[split]
                    );
                }
                self.decisions.apply_at(body, bases[split] + index, buf)
            }
            Lookup::Sliced { slices, met } => {
                met[split].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (dup, optical) = slices[split].get(index);
                self.decisions.apply_flags(body, dup, optical, buf)
            }
        }
    }

    /// With [`Marks::sliced`]: whether the reduce met as many records of
    /// each split as its slices say went to its range (a whole decision
    /// may serve several reduces: nothing to check).
    pub fn check_complete(&self) -> Result<()> {
        let Lookup::Sliced { slices, met } = &self.lookup else {
            return Ok(());
        };
        for (s, (slice, met)) in slices.iter().zip(met).enumerate() {
            let met = met.load(std::sync::atomic::Ordering::Relaxed);
            if met != slice.records {
                bail!(
                    Refused,
                    "the blocks held {met} records of split {s}, but the duplicate decision's slice says {} went \
                     to this range: the blocks and the decision come from different runs",
                    slice.records
                );
            }
        }
        Ok(())
    }
}

/// One split's decision cut by range of the output
/// ([`dist::SplitOutcome::slices`]): `ranges` from the split's map
/// ([`SplitShare::ranges`]), one slice's bytes per range.
pub fn range_slices(
    outcome: &SplitOutcome,
    ranges: &[u8],
    partitions: usize,
) -> Result<Vec<Vec<u8>>> {
    let slices = outcome
        .slices(ranges, partitions)
        .map_err(crate::error::Error::from)
        .context("cutting a split's duplicate decision by range")?;
    Ok(slices.iter().map(dist::RangeSlice::to_bytes).collect())
}

/// Writes the metrics file of `alnsort sort --markdup --metrics PATH`:
/// `inputs` and `output` as the user gave them, `command_line` the line
/// the file records.
pub fn write_metrics(
    metrics: &MetricsReport,
    path: &Path,
    inputs: &[String],
    output: Option<&Path>,
    command_line: &str,
) -> Result<()> {
    let debris = Debris::default();
    let f = MetricsFile::create(path, &debris)?;
    f.write(metrics, inputs, output, command_line)
        .with_context(|| format!("--metrics {}", path.display()))
}

/// A duplicate-marking task's configuration and its `--markdup` options
/// (the options must ask for duplicate marking).
fn task_config(
    options: &SortOptions,
) -> Result<(
    crate::config::Config,
    crate::options::markdup::MarkdupConfig,
)> {
    let cfg = crate::stages::plan::stage_config(options, Path::new("stage.bam"), None)?;
    let Some(md) = cfg.markdup.clone() else {
        bail!(
            Refused,
            "the duplicate-marking stages need --markdup among the options"
        );
    };
    Ok((cfg, md))
}

/// The duplicate-marking share of split `split` of `inputs` (one input):
/// its records read as a map reads them, checked as one node checks them
/// (within the split), their ends cut into `end_buckets` and their mates'
/// halves into `name_buckets` ([`dist::SplitCollector`]).
pub fn collect(
    inputs: &[PathBuf],
    split: &crate::stages::plan::SplitSpec,
    options: &SortOptions,
    end_buckets: usize,
    name_buckets: usize,
) -> Result<SplitShare> {
    let (cfg, md) = task_config(options)?;
    let pool = crate::stages::plan::pool(cfg.threads)?;
    let set = crate::stages::plan::headers(inputs, &pool)?;
    let path = crate::stages::plan::split_input(inputs, split)?;
    let header = &set.heads[split.input].0;
    let n_ref = header.refs().len();
    // The marker's messages count records from the split's start.
    let file = split_file(inputs, split)?;
    let budget = crate::run::resources::markdup_budget(&cfg)?;
    let mut marker = split_marker(
        inputs,
        &set,
        split,
        &md,
        &file,
        budget,
        (end_buckets, name_buckets),
    )?;
    let (name, scanner) = crate::stages::plan::open_scanner(
        path,
        split.start,
        split.end,
        alnsort_bam::reader::ScanOptions::default(),
        &pool,
    )?;
    // Each batch checked and its ends taken by a pool job (the loop every
    // reader shares, `input::spawn_scanned`), handed to the marker in order.
    let spec = marker.ends_spec();
    let depth = pool.current_num_threads() * 2 + 2;
    let (mut batches, _) = crate::io::input::spawn_scanned(
        &name,
        alnsort_bam::reader::Scanner::Bam(Box::new(scanner)),
        &pool,
        "collect read",
        depth,
        |_| (),
        move |raw, ()| {
            let mut ends = alnsort_markdup::extract::BatchEnds::new(spec.clone());
            // The records in the batch's blocks and data
            // (`RawBatch::records`: the scanner leaves whole records in
            // the inflated blocks).
            for (k, ((rec, _), &voffset)) in raw.records().zip(raw.voffsets.iter()).enumerate() {
                if let Err(e) =
                    alnsort_bam::validate::validate_record(&rec[4.min(rec.len())..], n_ref)
                {
                    return Err(crate::error::Error::Record {
                        file: file.clone(),
                        doing: "reading",
                        record: raw.first_record + k as u64 + 1,
                        source: Box::new(crate::error::Error::context(
                            format!("the record at virtual offset {voffset:#x}"),
                            e,
                        )),
                    });
                }
                ends.add_fields(rec);
            }
            Ok(ends)
        },
    )?;
    while let Some(r) = batches.next_result() {
        marker.push(&r??)?;
    }
    marker.finish_split()
}

/// How the duplicate-marking tasks name split `split` of `inputs` in
/// their messages (whose record numbers count from the split's start):
/// its input and the virtual offset it starts at.
pub fn split_file(inputs: &[PathBuf], split: &crate::stages::plan::SplitSpec) -> Result<String> {
    let path = crate::stages::plan::split_input(inputs, split)?;
    Ok(format!(
        "{} (the split from virtual offset {:#x})",
        path.display(),
        split.start
    ))
}

/// Several inputs as their duplicate-marking tasks read them
/// ([`alnsort_markdup::several::SeveralInputs`]), refused by name where the
/// decision cannot be cut into tasks exactly
/// ([`alnsort_markdup::several::SeveralInputs::tasks_refusal`]); `None` for
/// one input.
fn several(
    inputs: &[PathBuf],
    set: &crate::stages::plan::InputSet,
) -> Result<Option<alnsort_markdup::several::SeveralInputs>> {
    if inputs.len() == 1 {
        return Ok(None);
    }
    let several = several_inputs(inputs, set)?;
    if let Some(why) = several.tasks_refusal() {
        bail!(
            Refused,
            "duplicate marking of these inputs cut into tasks would not be Picard's: {why}; decide them with \
             one task (alnsort.ray with --decision-buckets 0) or on one node (alnsort sort --markdup)"
        );
    }
    Ok(Some(several))
}

/// The inputs' headers merged and checked as one node's several-input
/// marking does ([`alnsort_markdup::several::SeveralInputs`]).
fn several_inputs(
    inputs: &[PathBuf],
    set: &crate::stages::plan::InputSet,
) -> Result<alnsort_markdup::several::SeveralInputs> {
    let paths: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    let headers: Vec<_> = set.heads.iter().map(|h| h.0.clone()).collect();
    let several = alnsort_markdup::several::SeveralInputs::new(
        &paths,
        &headers,
        crate::io::merged::several_inputs_merge_options(),
    )?;
    Ok(several)
}

/// Why the duplicate decision of several inputs cut into tasks cannot be
/// cut into tasks, or `None`: [`alnsort_markdup::several::SeveralInputs::tasks_refusal`]
/// on the inputs' headers.
pub fn tasks_refusal(inputs: &[PathBuf], options: &SortOptions) -> Result<Option<String>> {
    if inputs.len() < 2 {
        return Ok(None);
    }
    let (cfg, _) = task_config(options)?;
    let pool = crate::stages::plan::pool(cfg.threads)?;
    let set = crate::stages::plan::headers(inputs, &pool)?;
    match several(inputs, &set) {
        Ok(_) => Ok(None),
        Err(crate::error::Error::Refused(why)) => Ok(Some(why)),
        Err(crate::error::Error::SeveralInputs(e)) if e.is_refusal() => Ok(Some(e.to_string())),
        Err(e) => Err(e),
    }
}

/// The marker that collects split `split`'s share: of its input, or of
/// one of several inputs in the merged header's terms.
pub(crate) fn split_marker(
    inputs: &[PathBuf],
    set: &crate::stages::plan::InputSet,
    split: &crate::stages::plan::SplitSpec,
    md: &crate::options::markdup::MarkdupConfig,
    file: &str,
    budget: (usize, Option<u64>),
    buckets: (usize, usize),
) -> Result<crate::markdup::marker::Marker> {
    Ok(match several(inputs, set)? {
        None => crate::markdup::marker::Marker::for_split(
            &set.heads[split.input].0,
            md,
            file,
            budget,
            split.ordinal,
            buckets,
        ),
        Some(s) => crate::markdup::marker::Marker::for_split_of_several(
            &s,
            split.input,
            md,
            file,
            budget,
            split.ordinal,
            buckets,
        ),
    })
}

/// A split's walk as [`walk_refusal`] checks it: the split's input, its
/// record counts per library and the listed indexes it found repeated
/// ([`SplitOutcome::repeated`]).
pub type WalkedSplit<'a> = (usize, &'a alnsort_markdup::LibraryCounts, u64);

/// Why the walk of several inputs' splits, each input on its own, is not
/// Picard's walk of their merged stream, or `None` when it is: a library
/// with records in two inputs (their headers did not say so: records of
/// no known read group fall in Picard's unknown library), or an index
/// listed twice, which puts Picard's walk behind its list for the records
/// that follow in its merged stream, of whichever input. Without repeats
/// the walk marks exactly the listed records, wherever it starts (a carry
/// into the next split only says whether the split's last record was
/// listed), so one walk per input is Picard's.
/// `splits[s]`: split `s`'s [`WalkedSplit`].
pub fn walk_refusal(inputs: &[PathBuf], splits: &[WalkedSplit<'_>]) -> Result<Option<String>> {
    // Inputs whose headers share a library were decided in Picard's merged
    // order: a library's records may be in any of them.
    let merged_order = inputs.len() > 1 && {
        let pool = crate::stages::plan::pool(1)?;
        let set = crate::stages::plan::headers(inputs, &pool)?;
        several_inputs(inputs, &set)?.keeps_merge_order()
    };
    Ok(walk_refusal_named(splits, merged_order, |i| {
        inputs
            .get(i)
            .map_or("?".into(), |p| p.display().to_string())
    })
    .map(|(why, lib)| match lib {
        None => why,
        Some(lib) => why.replacen("{library}", &library_name(inputs, lib), 1),
    }))
}

/// The name of library index `lib` as the tasks of several inputs number
/// libraries (the merged header's read groups, then Picard's unknown
/// library).
fn library_name(inputs: &[PathBuf], lib: usize) -> String {
    let named = (|| -> Result<String> {
        let pool = crate::stages::plan::pool(1)?;
        let set = crate::stages::plan::headers(inputs, &pool)?;
        let several = several_inputs(inputs, &set)?;
        let mut groups = crate::markdup::marker::header_read_groups(&several.header);
        groups.resolve(None);
        Ok(groups
            .libraries()
            .get(lib)
            .cloned()
            .unwrap_or_else(|| format!("number {lib}")))
    })();
    named.unwrap_or_else(|_| format!("number {lib}"))
}

/// [`walk_refusal`] with the inputs named by `name`; the reason has
/// `{library}` where the library's name goes (its index beside it).
fn walk_refusal_named(
    splits: &[WalkedSplit<'_>],
    merged_order: bool,
    name: impl Fn(usize) -> String,
) -> Option<(String, Option<usize>)> {
    let mut library_input: Vec<Option<usize>> = Vec::new();
    for (s, &(input, counts, repeated)) in splits.iter().enumerate() {
        if repeated != 0 {
            return Some((
                format!(
                    "split {s} (of {}) lists {repeated} record(s) twice as duplicates, which puts Picard's \
                     output loop behind its list, and in its merged stream that reaches the records of the \
                     other inputs",
                    name(input)
                ),
                None,
            ));
        }
        for (lib, c) in counts.iter().enumerate() {
            if merged_order || c.iter().all(|&n| n == 0) {
                continue;
            }
            if lib >= library_input.len() {
                library_input.resize(lib + 1, None);
            }
            match library_input[lib] {
                Some(other) if other != input => {
                    return Some((
                        format!(
                            "library {{library}} has records in {} and in {}",
                            name(other),
                            name(input)
                        ),
                        Some(lib),
                    ));
                }
                _ => library_input[lib] = Some(input),
            }
        }
    }
    None
}

/// A join's error, a template scattered over splits named as one node
/// names it ([`crate::markdup::marker::scattered_message`]): `splits[s]` names
/// split `s` ([`split_file`]; `split s` where it is missing).
fn join_error(e: alnsort_markdup::MarkdupError, splits: &[String]) -> crate::error::Error {
    let alnsort_markdup::MarkdupError::ScatteredTemplate {
        name,
        ordinal,
        earlier,
    } = &e
    else {
        return crate::error::Error::context("joining mates across splits", e);
    };
    let place = |o: i64| {
        let (s, i) = dist::split_of(o as u64);
        let file = splits
            .get(s)
            .cloned()
            .unwrap_or_else(|| format!("split {s}"));
        (file, i + 1)
    };
    let (file, record) = place(*ordinal);
    let (before, at) = place(*earlier);
    crate::error::Error::Refused(crate::markdup::marker::scattered_message(
        &file,
        record,
        name,
        &format!(" (at record {at} of {before}, without both mates)"),
    ))
}

/// A task's spill directory (a new directory under the options' `-T`,
/// removed when dropped: on success and on failure) and its memory
/// budget in bytes (what one node's marker gets from `-m` or
/// `--max-memory`, [`crate::run::resources::markdup_budget`]).
fn task_spill(
    cfg: &crate::config::Config,
) -> Result<(crate::io::cleanup::TempDir, (usize, Option<u64>))> {
    let budget = crate::run::resources::markdup_budget(cfg)?;
    let debris = Debris::default();
    let tmp = crate::io::cleanup::TempDir::new(&cfg.temp_parent, "alnsort-markdup-task", &debris)
        .with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    Ok((tmp, budget))
}

/// What [`join_files`] did.
#[derive(Debug, Clone, Copy, Default)]
pub struct JoinReport {
    /// Pair ends written.
    pub pairs: u64,
    /// Sorted runs of halves written to the temporary directory (0: the
    /// bucket fitted the budget).
    pub runs: u64,
}

/// [`join_within`] of files: the name bucket's halves
/// read from `halves` (one file per split) one file at a time, held up to
/// the budget and beyond it sorted into run files in a temporary
/// directory under `-T` (removed on success and on failure); the pair
/// ends written to `out` (one file per end bucket, each complete only on
/// success).
pub fn join_files(
    halves: &[PathBuf],
    fixups: &Fixups,
    options: &SortOptions,
    out: &[PathBuf],
    splits: &[String],
) -> Result<JoinReport> {
    use std::io::Write as _;
    let (cfg, _) = task_config(options)?;
    let (tmp, budget) = task_spill(&cfg)?;
    let mut join = dist::MateJoin::for_fixups(fixups);
    join.set_spill(tmp.path(), budget.0);
    for f in halves {
        let block = std::fs::read(f).with_context(|| format!("{}: cannot read", f.display()))?;
        join.add_block(&block)
            .with_context(|| format!("{}: joining mates across splits", f.display()))?;
    }
    let debris = Debris::default();
    let mut files = Vec::with_capacity(out.len());
    for p in out {
        let (pending, file) = crate::io::cleanup::PendingFile::create(p, &debris)
            .with_context(|| format!("{}: cannot create", p.display()))?;
        files.push((pending, std::io::BufWriter::new(file), p));
    }
    let runs = join.runs_written();
    let mut pairs = 0u64;
    let mut failed: Option<(usize, std::io::Error)> = None;
    let joined = join.finish(fixups, out.len(), &mut |bucket, end| {
        pairs += 1;
        if let Err(e) = files[bucket].1.write_all(end) {
            failed.get_or_insert((bucket, e));
        }
        Ok(())
    });
    if let Some((bucket, e)) = failed {
        return Err(crate::error::Error::context(
            format!("{}: writing pair ends", out[bucket].display()),
            e,
        ));
    }
    joined.map_err(|e| join_error(e, splits))?;
    for (pending, w, p) in files {
        let file = w
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("{}: writing pair ends", p.display()))?;
        drop(file);
        pending
            .commit()
            .with_context(|| format!("{}: writing pair ends", p.display()))?;
    }
    drop(tmp);
    Ok(JoinReport { pairs, runs })
}

/// The pair ends of one name bucket's halves (`blocks`, from every
/// split), by end bucket ([`dist::MateJoin`]), within the options' memory
/// budget: the halves beyond it are sorted into run files in a temporary
/// directory under `-T` (removed on success and on failure) and merged
/// back. A template scattered over splits of name-grouped input is
/// refused as one node refuses it, `splits[s]` naming split `s`
/// ([`split_file`]).
pub fn join_within(
    blocks: &[&[u8]],
    fixups: &Fixups,
    end_buckets: usize,
    options: &SortOptions,
    splits: &[String],
) -> Result<(Vec<Vec<u8>>, JoinReport)> {
    let (cfg, _) = task_config(options)?;
    let (tmp, budget) = task_spill(&cfg)?;
    let mut join = dist::MateJoin::for_fixups(fixups);
    join.set_spill(tmp.path(), budget.0);
    for b in blocks {
        join.add_block(b).context("joining mates across splits")?;
    }
    let runs = join.runs_written();
    let mut out = vec![Vec::new(); end_buckets.max(1)];
    let mut pairs = 0u64;
    join.finish(fixups, end_buckets, &mut |bucket, end| {
        pairs += 1;
        out[bucket].extend_from_slice(end);
        Ok(())
    })
    .map_err(|e| join_error(e, splits))?;
    drop(tmp);
    Ok((out, JoinReport { pairs, runs }))
}

/// The duplicate sets of one end bucket (fragment ends from the splits,
/// pair ends from the joins), with the options' optical settings; ends
/// beyond the options' memory budget are sorted into run files in a
/// temporary directory under `-T` (removed on success and on failure)
/// and merged back, as one node's marker does.
pub fn decide_bucket(
    inputs: &[PathBuf],
    blocks: &[&[u8]],
    fixups: &Fixups,
    options: &SortOptions,
) -> Result<SetsDecided> {
    decide_bucket_from(inputs, options, |marker| marker.decide_ends(blocks, fixups)).map(|(d, _)| d)
}

/// [`decide_bucket`] of the ends in `ends` (files: the splits' and the
/// joins' share of this bucket), read one file at a time; also the runs
/// the ends were spilled into.
pub fn decide_bucket_files(
    inputs: &[PathBuf],
    ends: &[PathBuf],
    fixups: &Fixups,
    options: &SortOptions,
) -> Result<(SetsDecided, u64)> {
    let read =
        |f: &PathBuf| std::fs::read(f).with_context(|| format!("{}: cannot read", f.display()));
    decide_bucket_from(inputs, options, |marker| {
        if fixups.merge_order().is_some() {
            // Ranked in Picard's merged order once all are read.
            let blocks = ends.iter().map(read).collect::<Result<Vec<_>>>()?;
            let blocks: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
            return marker.decide_ends(&blocks, fixups);
        }
        for f in ends {
            marker
                .add_end_block(&read(f)?, fixups)
                .with_context(|| format!("{}: reading ends", f.display()))?;
        }
        marker.decide_bucket()
    })
}

fn decide_bucket_from(
    inputs: &[PathBuf],
    options: &SortOptions,
    decide: impl FnOnce(&mut crate::markdup::marker::Marker) -> Result<SetsDecided>,
) -> Result<(SetsDecided, u64)> {
    let (cfg, md) = task_config(options)?;
    let pool = crate::stages::plan::pool(cfg.threads)?;
    let set = crate::stages::plan::headers(inputs, &pool)?;
    let file = inputs[0].display().to_string();
    let (tmp, budget) = task_spill(&cfg)?;
    let mut marker = match several(inputs, &set)? {
        None => crate::markdup::marker::Marker::new(
            &set.heads[0].0,
            &md,
            &file,
            budget,
            Some(tmp.path()),
        ),
        Some(s) => {
            let mut m = crate::markdup::marker::Marker::with_order(
                &s.header,
                &md,
                &file,
                budget,
                Some(tmp.path()),
                s.order,
            );
            for (id, same_as) in &s.aliases {
                m.alias_read_group(id, same_as);
            }
            m
        }
    };
    marker.set_pool(pool);
    let d = decide(&mut marker).map_err(|e| {
        let typed = e.find::<alnsort_markdup::MarkdupError>();
        let one_task = typed.is_some_and(|m| m.needs_one_task());
        let beyond = matches!(typed, Some(alnsort_markdup::MarkdupError::MergeBeyondLimit { .. }));
        let what = if beyond {
            let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
            format!(
                "{}: a bucket of the duplicate decision, ranked in Picard's merged order, needs more memory \
                 than the budget gives it; cut the ends into more buckets (--end-buckets, alnsort.ray's \
                 --decision-buckets), raise -m or --max-memory, or decide with one task (alnsort.ray with \
                 --decision-buckets 0, or alnsort sort --markdup), which spills",
                names.join(", ")
            )
        } else if one_task {
            // The tasks cannot put these inputs' records in Picard's merged
            // order (the typed error kept as the source: the Ray driver
            // then decides with one task).
            let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
            format!(
                "{}: the duplicate decision of these inputs cut into tasks would not be Picard's; decide \
                 them with one task (alnsort.ray with --decision-buckets 0) or on one node (alnsort sort \
                 --markdup)",
                names.join(", ")
            )
        } else {
            format!("{file}: deciding a bucket of duplicate sets")
        };
        crate::error::Error::context(what, e)
    })?;
    let runs = marker.spill_stats().runs;
    drop(tmp);
    Ok((d, runs))
}

/// Picard's output loop over one split ([`dist::finish_split`]).
pub fn finish_split(
    slots: &[u8],
    continued: bool,
    duplicates: &[&[u8]],
    optical: Option<&[&[u8]]>,
    carry: WalkCarry,
) -> Result<SplitOutcome> {
    dist::finish_split(slots, continued, duplicates, optical, carry)
        .map_err(crate::error::Error::from)
        .context("finishing a split's duplicate flags")
}

/// The decision of [`decide`] from the splits' outcomes (in split order,
/// every carry the previous split's) and the buckets' counts added up.
pub fn assemble(
    inputs: &[PathBuf],
    options: &SortOptions,
    outcomes: Vec<SplitOutcome>,
    totals: SetsDecided,
) -> Result<StageDecision> {
    let (cfg, md) = task_config(options)?;
    let pool = crate::stages::plan::pool(cfg.threads)?;
    let set = crate::stages::plan::headers(inputs, &pool)?;
    let records: u64 = outcomes.iter().map(|o| o.duplicate.len()).sum();
    // The whole decision, n/4 bytes for n records (the reduces of `--marks`
    // read it); reduces that take their ranges' slices need only
    // [`assemble_metrics`].
    let track = md.remove_sequencing_duplicates
        || md.tagging != alnsort_markdup::decision::TaggingPolicy::None;
    let mut dup = alnsort_markdup::Bits::new(records);
    let mut optical = alnsort_markdup::Bits::new(if track { records } else { 0 });
    let mut counts = Vec::new();
    let mut at = 0u64;
    for o in &outcomes {
        for (i, d) in o.duplicate.iter().enumerate() {
            if d {
                dup.set(at + i as u64);
            }
        }
        if let (true, Some(opt)) = (track, &o.optical) {
            for (i, d) in opt.iter().enumerate() {
                if d {
                    optical.set(at + i as u64);
                }
            }
        }
        at += o.duplicate.len();
        dist::add_library_counts(&mut counts, &o.counts);
    }
    let metrics = metrics_of(inputs, &set, &counts, totals)?;
    let d = Decisions::new(
        dup,
        optical,
        Default::default(),
        metrics,
        (
            md.remove_duplicates,
            md.remove_sequencing_duplicates,
            md.tagging,
        ),
    );
    Ok(StageDecision {
        decisions: d.to_bytes(),
        records: vec![records],
        metrics: d.metrics,
    })
}

/// The metrics of [`assemble`] alone, from each split's record counts
/// per library ([`SplitOutcome::counts`], in split order) and the
/// buckets' counts added up: what a run whose reduces take their ranges'
/// slices needs of the assemble, without joining the splits' bits into
/// the whole decision.
pub fn assemble_metrics(
    inputs: &[PathBuf],
    options: &SortOptions,
    split_counts: &[&alnsort_markdup::LibraryCounts],
    totals: SetsDecided,
) -> Result<MetricsReport> {
    let (cfg, _) = task_config(options)?;
    let pool = crate::stages::plan::pool(cfg.threads)?;
    let set = crate::stages::plan::headers(inputs, &pool)?;
    let mut counts = Vec::new();
    for c in split_counts {
        dist::add_library_counts(&mut counts, c);
    }
    metrics_of(inputs, &set, &counts, totals)
}

/// The metrics from the record counts per library summed over the
/// splits and the buckets' counts added up: the libraries named by the
/// inputs' header (several inputs: the merged header's, whose library
/// indexes the splits' markers used).
fn metrics_of(
    inputs: &[PathBuf],
    set: &crate::stages::plan::InputSet,
    counts: &alnsort_markdup::LibraryCounts,
    totals: SetsDecided,
) -> Result<MetricsReport> {
    let several = several(inputs, set)?;
    let mut groups = crate::markdup::marker::header_read_groups(
        several.as_ref().map_or(&set.heads[0].0, |s| &s.header),
    );
    // Records of no header read group count under Picard's unknown
    // library, which the splits' markers added after the header's.
    groups.resolve(None);
    Ok(alnsort_markdup::metrics_report(
        &groups,
        counts,
        &totals.optical_by_library,
        totals.set_sizes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_of_several_inputs_is_refused_where_it_is_not_picards() {
        let name = |i: usize| format!("in{i}.bam");
        let walk = |splits: &[WalkedSplit<'_>]| walk_refusal_named(splits, false, name);
        let a: alnsort_markdup::LibraryCounts = vec![[1, 0, 2, 4, 0, 0]];
        let b: alnsort_markdup::LibraryCounts = vec![[0; 6], [0, 0, 3, 0, 1, 0]];
        // Libraries apart (two splits of input 0, one of input 1).
        assert_eq!(walk(&[(0, &a, 0), (0, &a, 0), (1, &b, 0)]), None);
        // Library 0 in both inputs.
        let (why, lib) = walk(&[(0, &a, 0), (1, &a, 0)]).unwrap();
        assert_eq!(lib, Some(0));
        assert!(
            why.contains("library {library} has records in in0.bam and in in1.bam"),
            "{why}"
        );
        // An index listed twice.
        let (why, lib) = walk(&[(0, &a, 0), (1, &b, 1)]).unwrap();
        assert!(
            lib.is_none() && why.contains("split 1 (of in1.bam) lists 1 record(s) twice"),
            "{why}"
        );
    }
}
