//! The extension functions behind `alnsort.stages` (the distributed sort's
//! stages, `alnsort::stages`). Each runs without the GIL and raises
//! alnsort.AlnsortError (AlnsortIOError for I/O causes) with the message
//! the subcommands print. Options are `alnsort sort` options (argv form,
//! without `-o` and the input); the Python half builds them.

use std::ffi::OsString;
use std::path::PathBuf;

use alnsort::config::IndexKind;
use alnsort::stages::{self, SplitSpec};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::is_io;

/// A split as the Python half passes it: (input, start, end, ordinal).
type SplitTuple = (usize, u64, Option<u64>, u32);

fn spec(t: SplitTuple) -> SplitSpec {
    SplitSpec {
        input: t.0,
        start: t.1,
        end: t.2,
        ordinal: t.3,
    }
}

/// Raises the package's exception for a failed stage.
fn raise(py: Python<'_>, e: anyhow::Error) -> PyErr {
    let class = match py.import("alnsort").and_then(|m| {
        m.getattr(if is_io(&e) {
            "AlnsortIOError"
        } else {
            "AlnsortError"
        })
    }) {
        Ok(c) => c,
        Err(err) => return err,
    };
    match class.call1((format!("{e:#}"),)) {
        Ok(v) => PyErr::from_value(v),
        Err(err) => err,
    }
}

fn bytes_list(py: Python<'_>, v: Vec<Vec<u8>>) -> Vec<Py<PyBytes>> {
    v.into_iter()
        .map(|b| PyBytes::new(py, &b).unbind())
        .collect()
}

fn index_kind(index: Option<&str>) -> PyResult<Option<IndexKind>> {
    match index {
        None => Ok(None),
        Some("csi") => Ok(Some(IndexKind::Csi)),
        Some("bai") => Ok(Some(IndexKind::Bai)),
        Some(other) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "index must be None, 'bai' or 'csi', not {other:?}"
        ))),
    }
}

/// Splits of `inputs` (BAM files), about `parts` in all: a list of
/// (input, start, end, ordinal) tuples.
#[pyfunction]
pub fn stage_split(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    parts: usize,
    threads: usize,
) -> PyResult<Vec<SplitTuple>> {
    py.detach(move || stages::split(&inputs, parts, threads))
        .map(|v| {
            v.into_iter()
                .map(|s| (s.input, s.start, s.end, s.ordinal))
                .collect()
        })
        .map_err(|e| raise(py, e))
}

/// Up to `count` encoded sample keys of one split.
#[pyfunction]
pub fn stage_sample(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    count: usize,
    options: Vec<OsString>,
) -> PyResult<Vec<Py<PyBytes>>> {
    let got = py.detach(move || stages::sample(&inputs, &spec(split), count, &options));
    got.map(|v| bytes_list(py, v)).map_err(|e| raise(py, e))
}

/// `partitions - 1` (or fewer) encoded splitters from the samples.
#[pyfunction]
pub fn stage_splitters(
    py: Python<'_>,
    samples: Vec<Vec<u8>>,
    partitions: usize,
) -> PyResult<Vec<Py<PyBytes>>> {
    let got = py.detach(move || stages::splitters(&samples, partitions));
    got.map(|v| bytes_list(py, v)).map_err(|e| raise(py, e))
}

/// The reach of one split of several inputs (None for one input).
#[pyfunction]
pub fn stage_reach(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    threads: usize,
) -> PyResult<Option<u64>> {
    py.detach(move || stages::reach(&inputs, &spec(split), threads))
        .map_err(|e| raise(py, e))
}

/// What a map task gives Python: (blocks, records, proven end, reach).
type MapResult = (Vec<Py<PyBytes>>, u64, Option<u64>, Option<u64>);

/// One map task: (blocks, records, proven end, reach).
#[pyfunction]
#[pyo3(signature = (inputs, split, splitters, options, prior=None))]
pub fn stage_map(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    splitters: Vec<Vec<u8>>,
    options: Vec<OsString>,
    prior: Option<u64>,
) -> PyResult<MapResult> {
    let got = py.detach(move || stages::map(&inputs, &spec(split), &splitters, &options, prior));
    match got {
        Ok(m) => Ok((bytes_list(py, m.blocks), m.records, m.end, m.reach)),
        Err(e) => Err(raise(py, e)),
    }
}

/// One reduce task: (records, bytes). The blocks (`bytes`) are read in
/// place while the GIL is released: `bytes` objects are immutable, and the
/// list holds them until the reduce returns.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn stage_reduce(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    blocks: Vec<Bound<'_, PyBytes>>,
    part_path: PathBuf,
    range_index: usize,
    partitions: usize,
    options: Vec<OsString>,
    index: bool,
) -> PyResult<(u64, u64)> {
    let slices: Vec<&[u8]> = blocks.iter().map(|b| b.as_bytes()).collect();
    let got = py.detach(move || {
        stages::reduce(
            &inputs,
            &slices,
            &part_path,
            range_index,
            partitions,
            &options,
            index,
        )
    });
    got.map(|r| (r.records, r.bytes)).map_err(|e| raise(py, e))
}

/// The assemble step: (bytes, index path or None, shard files).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn stage_assemble(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    parts: Vec<PathBuf>,
    output: PathBuf,
    options: Vec<OsString>,
    index: Option<String>,
    sharded: bool,
    argv: Option<Vec<String>>,
) -> PyResult<(u64, Option<PathBuf>, Vec<PathBuf>)> {
    let kind = index_kind(index.as_deref())?;
    let got = py.detach(move || {
        stages::assemble(
            &inputs,
            &parts,
            &output,
            &options,
            kind,
            sharded,
            argv.as_deref(),
        )
    });
    got.map(|a| (a.bytes, a.index, a.files))
        .map_err(|e| raise(py, e))
}
