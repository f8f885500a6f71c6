//! The extension functions behind duplicate marking in the distributed
//! stages (`alnsort_engine::stages_markdup`), for `alnsort.ray`'s
//! `markdup=True`. Their options are the stage's [`Keywords`] with
//! `markdup`, the keywords of `alnsort sort`'s duplicate-marking options
//! (`tagging_policy`, `optical_distance`, ...), each applied by the
//! engine's setter (`SortOptions::apply_markdup_keyword`): no argv is built
//! or parsed. Each runs without the GIL.
//!
//! The decision cut into tasks (`stages_markdup::{collect, join_within,
//! decide_bucket, finish_split, assemble}`) crosses into Python as plain
//! values: the tasks' blocks as `bytes` (read back in place through the
//! buffer protocol), a split's boundary as `(first name, last name, last
//! template's ordinal, first ordinal)`, set-size counts as dicts, record
//! counts per library as lists of six, Picard's walk carry as a 4-tuple,
//! bit sets as their 64-bit words in little-endian bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use alnsort_engine::stages::markdup as stages_markdup;
use alnsort_engine::stages::markdup::{dist, Fixups, SetsDecided, SplitOutcome, WalkCarry};
use alnsort_markdup::{Bits, LibraryCounts, SetSizeHistograms};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::stages::{bytes_list, raise, spec, typed, BlockBytes, HeldBlocks, SplitTuple};
use crate::Keywords;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stage_markdup_decide, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_split_bases, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_collect, m)?)?;
    m.add_function(wrap_pyfunction!(stage_map_collecting, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_continued, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_join, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_decide_bucket, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_finish, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_assemble, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_tasks_refusal, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_walk_refusal, m)?)?;
    Ok(())
}

/// The decision over all inputs: (decisions as bytes, records per input,
/// the metrics file's text or None). `metrics`: (metrics path, inputs and
/// output as the user gave them, the command line the file records).
#[pyfunction]
#[pyo3(signature = (inputs, options, metrics=None))]
pub fn stage_markdup_decide(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    options: Keywords,
    metrics: Option<MetricsNames>,
) -> PyResult<DecisionResult> {
    let o = typed(py, &options)?;
    let got = py.detach(move || stages_markdup::decide(&inputs, &o));
    decision(py, got, metrics)
}

/// Where the metrics file goes and what it records: (metrics path,
/// inputs and output as the user gave them, the command line).
type MetricsNames = (PathBuf, Vec<String>, Option<PathBuf>, String);

/// A decision as Python takes it: (decisions as bytes, records per
/// input, the metrics file's text when `metrics` names it).
type DecisionResult = (Py<PyBytes>, Vec<u64>, Option<String>);

fn decision(
    py: Python<'_>,
    got: alnsort_engine::error::Result<stages_markdup::StageDecision>,
    metrics: Option<MetricsNames>,
) -> PyResult<DecisionResult> {
    let d = got.map_err(|e| raise(py, e))?;
    let text = metrics.map(|(path, given, output, line)| {
        alnsort_engine::markdup::metrics::metrics_text(
            &d.metrics,
            &path,
            &given,
            output.as_deref(),
            &line,
        )
    });
    Ok((PyBytes::new(py, &d.decisions).unbind(), d.records, text))
}

/// Why the decision of several inputs cannot be cut into tasks
/// (`stages_markdup::tasks_refusal`), or None.
#[pyfunction]
pub fn stage_markdup_tasks_refusal(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    options: Keywords,
) -> PyResult<Option<String>> {
    let o = typed(py, &options)?;
    py.detach(move || stages_markdup::tasks_refusal(&inputs, &o))
        .map_err(|e| raise(py, e))
}

/// Why the splits' walks of several inputs are not Picard's walk of their
/// merged stream (`stages_markdup::walk_refusal`), or None: each split's
/// input, record counts per library and repeated listed indexes.
#[pyfunction]
pub fn stage_markdup_walk_refusal(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split_inputs: Vec<usize>,
    counts: Vec<LibraryCounts>,
    repeated: Vec<u64>,
) -> PyResult<Option<String>> {
    let walked: Vec<_> = (split_inputs.iter().zip(&counts).zip(&repeated))
        .map(|((&i, c), &r)| (i, c, r))
        .collect();
    stages_markdup::walk_refusal(&inputs, &walked).map_err(|e| raise(py, e))
}

/// Where each split's records start in input order (by split ordinal).
#[pyfunction]
pub fn stage_markdup_split_bases(
    py: Python<'_>,
    split_records: Vec<u64>,
    split_inputs: Vec<usize>,
    input_records: Vec<u64>,
) -> PyResult<Vec<u64>> {
    stages_markdup::split_bases(&split_records, &split_inputs, &input_records)
        .map_err(|e| raise(py, e))
}

// ---- the decision cut into tasks --------------------------------------------

/// A split's [`dist::Boundary`] as Python holds it: (first name, last
/// name, ordinal of the last template's first record, ordinal of the
/// first record, keeping Picard's merge order: (its input, its largest
/// record's merge key as bytes) or None).
type BoundaryTuple = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    i64,
    i64,
    Option<(u32, Option<Vec<u8>>)>,
);

fn boundary(t: BoundaryTuple) -> PyResult<dist::Boundary> {
    let merge = match t.4 {
        None => None,
        Some((input, key)) => Some(dist::MergeBoundary {
            input,
            largest: match key {
                None => None,
                Some(k) => Some(
                    dist::merge_order::MergeKey::decode(&k, 0)
                        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?
                        .0,
                ),
            },
        }),
    };
    Ok(dist::Boundary {
        first_name: t.0,
        last_name: t.1,
        last_template: t.2,
        first: t.3,
        merge,
    })
}

/// Why the tasks cannot put several inputs' records in Picard's merged
/// order (the decision goes to one task), when that is what `e` says.
fn one_task_because(e: &alnsort_engine::error::Error) -> Option<String> {
    e.find::<alnsort_markdup::MarkdupError>()
        .filter(|m| m.needs_one_task())
        .map(|m| m.to_string())
}

/// The fix-ups of templates crossing split boundaries, from every split's
/// boundary (in split order): the same in every task that needs them.
fn fixups(bounds: Vec<BoundaryTuple>) -> PyResult<Fixups> {
    let bounds = bounds
        .into_iter()
        .map(boundary)
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Fixups::new(&bounds, &dist::continued_templates(&bounds)))
}

/// A split's share as Python takes it: (fragment ends by end bucket, mate
/// halves by name bucket, record slots, boundary, records, each record's
/// range: empty unless a map collected it).
type ShareResult = (
    Vec<Py<PyBytes>>,
    Vec<Py<PyBytes>>,
    Py<PyBytes>,
    BoundaryOut,
    u64,
    Py<PyBytes>,
);

/// The duplicate-marking share of one split of one input
/// (`stages_markdup::collect`): (fragment ends by end bucket, mate halves
/// by name bucket, record slots, boundary, records).
#[pyfunction]
pub fn stage_markdup_collect(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    options: Keywords,
    end_buckets: usize,
    name_buckets: usize,
) -> PyResult<ShareResult> {
    let o = typed(py, &options)?;
    let got = py.detach(move || {
        stages_markdup::collect(&inputs, &spec(split), &o, end_buckets, name_buckets)
    });
    let share = got.map_err(|e| raise(py, e))?;
    Ok(share_result(py, &share))
}

/// A [`BoundaryTuple`] as Rust gives it to Python.
type BoundaryOut = (
    Option<Py<PyBytes>>,
    Option<Py<PyBytes>>,
    i64,
    i64,
    Option<(u32, Option<Py<PyBytes>>)>,
);

/// A split's share as Python takes it ([`ShareResult`]).
fn share_result(py: Python<'_>, share: &dist::SplitShare) -> ShareResult {
    let name = |n: &Option<Vec<u8>>| n.as_ref().map(|n| PyBytes::new(py, n).unbind());
    let b = &share.boundary;
    let merge = b.merge.as_ref().map(|m| {
        let key = m.largest.as_ref().map(|k| {
            let mut bytes = Vec::new();
            k.encode(&mut bytes);
            PyBytes::new(py, &bytes).unbind()
        });
        (m.input, key)
    });
    (
        bytes_list(py, &share.ends),
        bytes_list(py, &share.halves),
        PyBytes::new(py, &share.slots).unbind(),
        (
            name(&b.first_name),
            name(&b.last_name),
            b.last_template,
            b.first,
            merge,
        ),
        share.records,
        PyBytes::new(py, &share.ranges).unbind(),
    )
}

/// One map task with `--markdup` that also gives the split's
/// duplicate-marking share (`alnsort_engine::stages::sort::map_collecting_after`: the records
/// read and decoded once; `prior` as `stage_map` takes it, for a split of
/// one of several inputs): (the map's (blocks, records, proven end,
/// reach), the share as `stage_markdup_collect` gives it).
#[pyfunction]
#[pyo3(signature = (inputs, split, splitters, options, end_buckets, name_buckets, prior=None))]
#[allow(clippy::too_many_arguments)]
pub fn stage_map_collecting(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    splitters: Vec<Vec<u8>>,
    options: Keywords,
    end_buckets: usize,
    name_buckets: usize,
    prior: Option<u64>,
) -> PyResult<(crate::stages::MapResult, ShareResult)> {
    let o = typed(py, &options)?;
    let got = py.detach(move || {
        alnsort_engine::stages::sort::map_collecting_after(
            &inputs,
            &spec(split),
            &splitters,
            &o,
            prior,
            (end_buckets, name_buckets),
            &crate::stages::BLOCK_BUFFERS,
        )
    });
    let (mapped, share) = got.map_err(|e| raise(py, e))?;
    let share = share_result(py, &share);
    Ok((crate::stages::map_result(py, Ok(mapped))?, share))
}

/// For each split (boundaries in split order), the ordinal where its first
/// template began when that was in an earlier split, else None
/// (`dist::continued_templates`).
#[pyfunction]
pub fn stage_markdup_continued(bounds: Vec<BoundaryTuple>) -> PyResult<Vec<Option<i64>>> {
    let bounds = bounds
        .into_iter()
        .map(boundary)
        .collect::<PyResult<Vec<_>>>()?;
    Ok(dist::continued_templates(&bounds))
}

/// The pair ends of one name bucket's halves (a block from every split),
/// by end bucket, within the options' duplicate-marking budget (beyond it
/// the halves are sorted into run files under the options' temporary
/// directory, removed on success and on failure:
/// `stages_markdup::join_within`); a template scattered over `splits`
/// (of `inputs`, in split order: they name the record in the message) is
/// refused as one node refuses it. Returns (pair ends by end bucket, the
/// runs written, why the decision goes to one task: a template's mates in
/// two of several coordinate-sorted inputs, else None).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn stage_markdup_join(
    py: Python<'_>,
    blocks: Vec<Bound<'_, PyAny>>,
    bounds: Vec<BoundaryTuple>,
    end_buckets: usize,
    options: Keywords,
    inputs: Vec<PathBuf>,
    splits: Vec<SplitTuple>,
) -> PyResult<(Vec<Py<PyBytes>>, u64, Option<String>)> {
    let o = typed(py, &options)?;
    let held = HeldBlocks::new(&blocks)?;
    let slices = held.slices();
    let fixups = fixups(bounds)?;
    let got = py.detach(move || {
        let names = splits
            .into_iter()
            .map(|t| stages_markdup::split_file(&inputs, &spec(t)))
            .collect::<alnsort_engine::error::Result<Vec<_>>>()?;
        stages_markdup::join_within(&slices, &fixups, end_buckets, &o, &names)
    });
    match got {
        Ok((ends, report)) => Ok((bytes_list(py, &ends), report.runs, None)),
        Err(e) => match one_task_because(&e) {
            Some(why) => Ok((
                bytes_list(py, &vec![Vec::new(); end_buckets.max(1)]),
                0,
                Some(why),
            )),
            None => Err(raise(py, e)),
        },
    }
}

/// A bucket's set-size histograms and optical counts as Python holds
/// them: ({size: sets} of all sets, of optical sets, of non-optical sets;
/// {library index: optical duplicates}).
type SetCounts = (
    BTreeMap<u64, u64>,
    BTreeMap<u64, u64>,
    BTreeMap<u64, u64>,
    HashMap<u32, u64>,
);

/// One bucket's decision as Python takes it: (duplicate index lists by
/// split, optical index lists by split, the bucket's counts, why the
/// decision goes to one task: two of several inputs' records the tasks
/// cannot order, else None).
type BucketResult = (
    Vec<Py<PyBytes>>,
    Vec<Py<PyBytes>>,
    SetCounts,
    Option<String>,
);

/// The duplicate sets of one end bucket (`stages_markdup::decide_bucket`;
/// blocks: the bucket's fragment ends from every split and pair ends from
/// every join): (duplicate indexes by split, optical indexes by split,
/// the bucket's counts).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn stage_markdup_decide_bucket(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    blocks: Vec<Bound<'_, PyAny>>,
    bounds: Vec<BoundaryTuple>,
    options: Keywords,
    splits: usize,
) -> PyResult<BucketResult> {
    let o = typed(py, &options)?;
    let held = HeldBlocks::new(&blocks)?;
    let slices = held.slices();
    let fixups = fixups(bounds)?;
    let got = py.detach(move || {
        let d = stages_markdup::decide_bucket(&inputs, &slices, &fixups, &o)?;
        let lists = d.by_split(splits).map_err(alnsort_engine::Error::from)?;
        Ok::<_, alnsort_engine::error::Error>((lists, d))
    });
    let (((dups, optical), d), why) = match got {
        Ok(x) => (x, None),
        Err(e) => match one_task_because(&e) {
            Some(why) => (
                (
                    (vec![Vec::new(); splits], vec![Vec::new(); splits]),
                    dist::SetsDecided::default(),
                ),
                Some(why),
            ),
            None => return Err(raise(py, e)),
        },
    };
    let counts = (
        d.set_sizes.all_sets,
        d.set_sizes.optical_sets,
        d.set_sizes.non_optical_sets,
        d.optical_by_library,
    );
    Ok((bytes_list(py, &dups), bytes_list(py, &optical), counts, why))
}

/// A bit set as the little-endian bytes of its words.
fn bits_bytes(py: Python<'_>, b: &Bits) -> Py<PyBytes> {
    let mut out = Vec::with_capacity(b.words().len() * 8);
    for w in b.words() {
        out.extend_from_slice(&w.to_le_bytes());
    }
    PyBytes::new(py, &out).unbind()
}

/// `len` bits from the bytes [`bits_bytes`] wrote.
fn bits_from(bytes: &[u8], len: u64, what: &str) -> PyResult<Bits> {
    let words = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    match Bits::from_words(words, len) {
        Some(b) if bytes.len().is_multiple_of(8) => Ok(b),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{what}: {} bytes are not the words of {len} bits",
            bytes.len()
        ))),
    }
}

/// Picard's output walk's carry as Python holds it: (stale, duplicate
/// template, optical stale, optical duplicate template).
type CarryTuple = (u64, bool, u64, bool);

fn carry_tuple(c: WalkCarry) -> CarryTuple {
    (
        c.stale,
        c.dup_template,
        c.optical_stale,
        c.optical_dup_template,
    )
}

/// One split's outcome as Python takes it: (duplicate bits, optical bits
/// or None, records, record counts per library, carry, the outcome's
/// slice per range: empty without range numbers, the listed indexes found
/// repeated: `SplitOutcome::repeated`).
type OutcomeResult = (
    Py<PyBytes>,
    Option<Py<PyBytes>>,
    u64,
    LibraryCounts,
    CarryTuple,
    Vec<Py<PyBytes>>,
    u64,
);

/// Picard's output walk over one split (`stages_markdup::finish_split`):
/// its slots, whether its first template began in an earlier split, its
/// duplicate and optical index lists from every end bucket, and the carry
/// of the previous split's walk; with `ranges` (each record's range, from
/// the split's map) the outcome cut into `partitions` slices, one per
/// reduce (`stages_markdup::range_slices`).
#[pyfunction]
#[pyo3(signature = (slots, continued, duplicates, optical, carry, ranges=None, partitions=0))]
#[allow(clippy::too_many_arguments)]
pub fn stage_markdup_finish(
    py: Python<'_>,
    slots: Bound<'_, PyAny>,
    continued: bool,
    duplicates: Vec<Bound<'_, PyAny>>,
    optical: Vec<Bound<'_, PyAny>>,
    carry: CarryTuple,
    ranges: Option<Bound<'_, PyAny>>,
    partitions: usize,
) -> PyResult<OutcomeResult> {
    let slots = BlockBytes::new(&slots)?;
    let ranges = ranges.as_ref().map(BlockBytes::new).transpose()?;
    let ranges = ranges.as_ref().map(BlockBytes::as_slice);
    let dups = HeldBlocks::new(&duplicates)?;
    let opt = HeldBlocks::new(&optical)?;
    let (d, o, s) = (dups.slices(), opt.slices(), slots.as_slice());
    let carry = WalkCarry {
        stale: carry.0,
        dup_template: carry.1,
        optical_stale: carry.2,
        optical_dup_template: carry.3,
    };
    let got = py.detach(move || {
        let out = stages_markdup::finish_split(s, continued, &d, Some(&o), carry)?;
        let slices = match ranges {
            Some(r) => stages_markdup::range_slices(&out, r, partitions)?,
            None => Vec::new(),
        };
        Ok::<_, alnsort_engine::error::Error>((out, slices))
    });
    let (out, slices) = got.map_err(|e| raise(py, e))?;
    Ok((
        bits_bytes(py, &out.duplicate),
        out.optical.as_ref().map(|b| bits_bytes(py, b)),
        out.duplicate.len(),
        out.counts,
        carry_tuple(out.carry),
        bytes_list(py, &slices),
        out.repeated,
    ))
}

/// The decision of [`stage_markdup_decide`] from the splits' outcomes (in
/// split order, each finished with the previous split's carry: (duplicate
/// bits, optical bits or None, records, counts per library)) and every
/// end bucket's counts.
#[pyfunction]
#[pyo3(signature = (inputs, options, outcomes, buckets, metrics=None))]
#[allow(clippy::type_complexity)]
pub fn stage_markdup_assemble(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    options: Keywords,
    outcomes: Vec<(
        Bound<'_, PyAny>,
        Option<Bound<'_, PyAny>>,
        u64,
        LibraryCounts,
    )>,
    buckets: Vec<SetCounts>,
    metrics: Option<MetricsNames>,
) -> PyResult<DecisionResult> {
    let o = typed(py, &options)?;
    let mut splits = Vec::with_capacity(outcomes.len());
    for (k, (dup, optical, records, counts)) in outcomes.into_iter().enumerate() {
        let what = format!("split {k}'s duplicate bits");
        let duplicate = bits_from(BlockBytes::new(&dup)?.as_slice(), records, &what)?;
        let optical = match optical {
            Some(b) => Some(bits_from(BlockBytes::new(&b)?.as_slice(), records, &what)?),
            None => None,
        };
        splits.push(SplitOutcome {
            duplicate,
            optical,
            counts,
            carry: WalkCarry::default(),
            repeated: 0,
        });
    }
    let totals = bucket_totals(buckets);
    let got = py.detach(move || stages_markdup::assemble(&inputs, &o, splits, totals));
    decision(py, got, metrics)
}

/// Every end bucket's counts added up.
fn bucket_totals(buckets: Vec<SetCounts>) -> SetsDecided {
    let mut totals = SetsDecided::default();
    for (all_sets, optical_sets, non_optical_sets, optical_by_library) in buckets {
        totals.add_counts(SetsDecided {
            set_sizes: SetSizeHistograms {
                all_sets,
                optical_sets,
                non_optical_sets,
            },
            optical_by_library,
            ..SetsDecided::default()
        });
    }
    totals
}

/// The metrics of [`stage_markdup_assemble`] without the decision (for
/// reduces that take their ranges' slices: `stages_markdup::assemble_metrics`),
/// from each split's record counts per library (in split order) and every
/// end bucket's counts: the metrics file's text when `metrics` names it.
#[pyfunction]
#[pyo3(signature = (inputs, options, counts, buckets, metrics=None))]
pub fn stage_markdup_metrics(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    options: Keywords,
    counts: Vec<LibraryCounts>,
    buckets: Vec<SetCounts>,
    metrics: Option<MetricsNames>,
) -> PyResult<Option<String>> {
    let o = typed(py, &options)?;
    let totals = bucket_totals(buckets);
    let got = py.detach(move || {
        let refs: Vec<&LibraryCounts> = counts.iter().collect();
        stages_markdup::assemble_metrics(&inputs, &o, &refs, totals)
    });
    let report = got.map_err(|e| raise(py, e))?;
    Ok(metrics.map(|(path, given, output, line)| {
        alnsort_engine::markdup::metrics::metrics_text(
            &report,
            &path,
            &given,
            output.as_deref(),
            &line,
        )
    }))
}
