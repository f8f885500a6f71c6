//! The extension functions behind duplicate marking in the distributed
//! stages (`alnsort_engine::stages_markdup`), for `alnsort.ray`'s
//! `markdup=True`. `markdup` is the list of `alnsort sort`'s
//! duplicate-marking options as argv (`["--markdup", "--tagging-policy",
//! "all"]`), applied to the stage's keywords by the engine
//! (`stages_markdup::with_markdup`). Each runs without the GIL.

use std::path::PathBuf;

use alnsort_engine::options::SortOptions;
use alnsort_engine::stages;
use alnsort_engine::stages_markdup::{self, Marks};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::stages::{map_result, raise, spec, typed, BlockBytes, MapResult, SplitTuple};
use crate::Keywords;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stage_markdup_map, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_decide, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_split_bases, m)?)?;
    m.add_function(wrap_pyfunction!(stage_markdup_reduce, m)?)?;
    Ok(())
}

fn options(py: Python<'_>, kw: &Keywords, markdup: &[String]) -> PyResult<SortOptions> {
    let o = typed(py, kw)?;
    stages_markdup::with_markdup(&o, markdup).map_err(|e| raise(py, e))
}

/// `stage_map` of a run with duplicate marking: each record carries its
/// place in the input to the reduce.
#[pyfunction]
pub fn stage_markdup_map(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    splitters: Vec<Vec<u8>>,
    options: Keywords,
    markdup: Vec<String>,
    prior: Option<u64>,
) -> PyResult<MapResult> {
    let o = self::options(py, &options, &markdup)?;
    let got = py.detach(move || stages::map(&inputs, &spec(split), &splitters, &o, prior));
    map_result(py, got)
}

/// The decision over all inputs: (decisions as bytes, records per input,
/// the metrics file's text or None). `metrics`: (metrics path, inputs and
/// output as the user gave them, the command line the file records).
#[pyfunction]
#[pyo3(signature = (inputs, options, markdup, metrics=None))]
pub fn stage_markdup_decide(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    options: Keywords,
    markdup: Vec<String>,
    metrics: Option<(PathBuf, Vec<String>, Option<PathBuf>, String)>,
) -> PyResult<(Py<PyBytes>, Vec<u64>, Option<String>)> {
    let o = self::options(py, &options, &markdup)?;
    let got = py.detach(move || stages_markdup::decide(&inputs, &o));
    let d = got.map_err(|e| raise(py, e))?;
    let text = metrics.map(|(path, given, output, line)| {
        alnsort_engine::markdup::metrics_text(&d.metrics, &path, &given, output.as_deref(), &line)
    });
    Ok((PyBytes::new(py, &d.decisions).unbind(), d.records, text))
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

/// `stage_reduce` with the decisions applied: (records, bytes, duplicates).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn stage_markdup_reduce(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    blocks: Vec<Bound<'_, PyAny>>,
    part_path: PathBuf,
    range_index: usize,
    partitions: usize,
    options: Keywords,
    index: bool,
    markdup: Vec<String>,
    decisions: Bound<'_, PyAny>,
    bases: Vec<u64>,
) -> PyResult<(u64, u64, u64)> {
    let o = self::options(py, &options, &markdup)?;
    let held = blocks
        .iter()
        .map(BlockBytes::new)
        .collect::<PyResult<Vec<_>>>()?;
    let decided = BlockBytes::new(&decisions)?;
    let slices: Vec<&[u8]> = held.iter().map(BlockBytes::as_slice).collect();
    let decided = decided.as_slice();
    let got = py.detach(move || {
        let marks = Marks::new(decided, bases, &o)?;
        stages::reduce_marked(
            &inputs,
            &slices,
            &part_path,
            range_index,
            partitions,
            &o,
            index,
            Some(&marks),
        )
    });
    got.map(|r| (r.records, r.bytes, r.marked))
        .map_err(|e| raise(py, e))
}
