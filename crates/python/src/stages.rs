//! The extension functions behind `alnsort.stages` (the distributed sort's
//! stages, `alnsort_engine::stages`). Each runs without the GIL and raises
//! alnsort.AlnsortError (AlnsortIOError for I/O causes) with the message
//! the subcommands print. Options are the typed keywords of
//! `alnsort.sort()` ([`Keywords`]), the same for every stage of one sort.

use std::path::PathBuf;

use alnsort_engine::config::IndexKind;
use alnsort_engine::options::sort::SortOptions;
use alnsort_engine::stages::markdup::Marks;
use alnsort_engine::stages::plan::SplitSpec;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::Keywords;

/// A split as the Python half passes it: (input, start, end, ordinal).
pub(crate) type SplitTuple = (usize, u64, Option<u64>, u32);

pub(crate) fn spec(t: SplitTuple) -> SplitSpec {
    SplitSpec {
        input: t.0,
        start: t.1,
        end: t.2,
        ordinal: t.3,
    }
}

/// Raises the package's exception for a failed stage.
pub(crate) fn raise(py: Python<'_>, e: alnsort_engine::error::Error) -> PyErr {
    crate::raise_failure(py, crate::Failure::of(&e))
}

/// The engine's options for a stage's keywords; a refused value raises
/// the package's exception with the setter's message.
pub(crate) fn typed(py: Python<'_>, kw: &Keywords) -> PyResult<SortOptions> {
    kw.sort_options().map_err(|e| raise(py, e.into()))
}

/// Each buffer as a Python `bytes`.
pub(crate) fn bytes_list(py: Python<'_>, v: &[Vec<u8>]) -> Vec<Py<PyBytes>> {
    v.iter().map(|b| PyBytes::new(py, b).unbind()).collect()
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
    py.detach(move || alnsort_engine::stages::plan::split(&inputs, parts, threads))
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
    options: Keywords,
) -> PyResult<Vec<Py<PyBytes>>> {
    let options = typed(py, &options)?;
    let got = py.detach(move || {
        alnsort_engine::stages::plan::sample(&inputs, &spec(split), count, &options)
    });
    got.map(|v| bytes_list(py, &v)).map_err(|e| raise(py, e))
}

/// `partitions - 1` (or fewer) encoded splitters from the samples.
#[pyfunction]
pub fn stage_splitters(
    py: Python<'_>,
    samples: Vec<Vec<u8>>,
    partitions: usize,
) -> PyResult<Vec<Py<PyBytes>>> {
    let got = py.detach(move || alnsort_engine::stages::plan::splitters(&samples, partitions));
    got.map(|v| bytes_list(py, &v)).map_err(|e| raise(py, e))
}

/// The reach of one split of several inputs (None for one input).
#[pyfunction]
pub fn stage_reach(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    threads: usize,
) -> PyResult<Option<u64>> {
    py.detach(move || alnsort_engine::stages::plan::reach(&inputs, &spec(split), threads))
        .map_err(|e| raise(py, e))
}

/// What a map task gives Python: (blocks, records, proven end, reach).
pub(crate) type MapResult = (Vec<Py<PyBytes>>, u64, Option<u64>, Option<u64>);

/// One map task: (blocks, records, proven end, reach). With `markdup`
/// among the options (duplicate marking, [`Keywords::markdup`]) each
/// record carries its place in the input (split ordinal, index) to the
/// reduce.
#[pyfunction]
#[pyo3(signature = (inputs, split, splitters, options, prior=None))]
pub fn stage_map(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    split: SplitTuple,
    splitters: Vec<Vec<u8>>,
    options: Keywords,
    prior: Option<u64>,
) -> PyResult<MapResult> {
    let options = typed(py, &options)?;
    let got = py.detach(move || {
        alnsort_engine::stages::sort::map(
            &inputs,
            &spec(split),
            &splitters,
            &options,
            prior,
            &BLOCK_BUFFERS,
        )
    });
    map_result(py, got)
}

/// The memory of the blocks this worker process's maps returned, kept for
/// its next map (the blocks are copied into `bytes`; the page faults of
/// fresh memory cost more than the copy). Process-wide: a Ray worker runs
/// one map after another.
pub(crate) static BLOCK_BUFFERS: alnsort_engine::stages::sort::BlockBuffers =
    alnsort_engine::stages::sort::BlockBuffers::new();

/// A map's outcome as the Python half takes it.
pub(crate) fn map_result(
    py: Python<'_>,
    got: alnsort_engine::error::Result<alnsort_engine::stages::sort::MapOutput>,
) -> PyResult<MapResult> {
    match got {
        Ok(m) => {
            // Each block is copied into a `bytes` and its memory kept for
            // the next map of this process (the page faults of fresh
            // memory cost more than the copy).
            let blocks = m
                .blocks
                .into_iter()
                .map(|b| {
                    let obj = PyBytes::new(py, &b).unbind();
                    BLOCK_BUFFERS.give_back(b);
                    obj
                })
                .collect();
            Ok((blocks, m.records, m.end, m.reach))
        }
        Err(e) => Err(raise(py, e)),
    }
}

/// The C buffer interface (`Py_buffer`, `PyObject_GetBuffer`,
/// `PyBuffer_Release`): part of the stable ABI only from CPython 3.11, so
/// pyo3 does not declare it for this abi3-py39 module; the functions and
/// the struct's layout are the same in every CPython 3 (the 3.11 stable ABI
/// took them over unchanged).
#[repr(C)]
pub(crate) struct RawBuffer {
    buf: *mut std::ffi::c_void,
    obj: *mut pyo3::ffi::PyObject,
    len: pyo3::ffi::Py_ssize_t,
    itemsize: pyo3::ffi::Py_ssize_t,
    readonly: std::ffi::c_int,
    ndim: std::ffi::c_int,
    format: *mut std::ffi::c_char,
    shape: *mut pyo3::ffi::Py_ssize_t,
    strides: *mut pyo3::ffi::Py_ssize_t,
    suboffsets: *mut pyo3::ffi::Py_ssize_t,
    internal: *mut std::ffi::c_void,
}

// SAFETY: these are the signatures of CPython's `PyObject_GetBuffer` and
// `PyBuffer_Release`, with `RawBuffer` laid out as its `Py_buffer` (see
// `RawBuffer`).
unsafe extern "C" {
    fn PyObject_GetBuffer(
        obj: *mut pyo3::ffi::PyObject,
        view: *mut RawBuffer,
        flags: std::ffi::c_int,
    ) -> std::ffi::c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

/// The bytes of a Python object with the buffer protocol: a read-only
/// buffer (`bytes`, a read-only `memoryview`, Ray's object-store buffers)
/// is borrowed in place until this is dropped; a writable one (which
/// Python code could change while the GIL is released) is copied.
pub(crate) enum BlockBytes {
    Borrowed(Box<RawBuffer>),
    Copied(Vec<u8>),
}

impl BlockBytes {
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> PyResult<BlockBytes> {
        // Boxed: an exporter may point fields of the view into the view.
        let mut view = Box::new(RawBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        // PyBUF_SIMPLE (0): one contiguous run of bytes, or an error.
        // SAFETY: `obj` is a live object (the GIL is held through `obj`)
        // and `view` a writable `Py_buffer`-shaped struct.
        if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, 0) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        let held = BlockBytes::Borrowed(view);
        if let BlockBytes::Borrowed(v) = &held {
            if v.readonly == 0 {
                return Ok(BlockBytes::Copied(held.as_slice().to_vec()));
            }
        }
        Ok(held)
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            BlockBytes::Borrowed(v) if v.len > 0 && !v.buf.is_null() => {
                // SAFETY: the exporter keeps `len` bytes at `buf` for as
                // long as the view is held (until `drop`), and a read-only
                // exporter does not change them.
                unsafe { std::slice::from_raw_parts(v.buf as *const u8, v.len as usize) }
            }
            BlockBytes::Borrowed(_) => &[],
            BlockBytes::Copied(v) => v,
        }
    }
}

impl Drop for BlockBytes {
    fn drop(&mut self) {
        if let BlockBytes::Borrowed(view) = self {
            // SAFETY: `view` was filled by a successful PyObject_GetBuffer
            // and is released once, with the GIL held.
            Python::attach(|_| unsafe { PyBuffer_Release(&mut **view) });
        }
    }
}

/// Blocks a task reads in place while the GIL is released: each held
/// (borrowed or copied, see [`BlockBytes`]) until this is dropped.
pub(crate) struct HeldBlocks(Vec<BlockBytes>);

impl HeldBlocks {
    pub(crate) fn new(blocks: &[Bound<'_, PyAny>]) -> PyResult<HeldBlocks> {
        blocks
            .iter()
            .map(BlockBytes::new)
            .collect::<PyResult<Vec<_>>>()
            .map(HeldBlocks)
    }

    /// The held bytes, one slice per block in the order given.
    pub(crate) fn slices(&self) -> Vec<&[u8]> {
        self.0.iter().map(BlockBytes::as_slice).collect()
    }
}

/// One reduce task: (records, bytes, duplicates marked). The blocks (any
/// objects with the buffer protocol: `bytes`, `memoryview`, Ray's
/// object-store buffers) are read in place while the GIL is released
/// (writable ones are copied first, see [`BlockBytes`]); the list holds
/// them until the reduce returns. For maps that ran with `markdup`, the
/// duplicate decisions, each record then written as one node writes it
/// (`alnsort_engine::stages::sort::reduce_marked`): `marks`, (the whole decision
/// `stage_markdup_decide` or `stage_markdup_assemble` gave, read in place
/// as the blocks are; where each split's records start in input order),
/// or `slices`, the reduce's own range's slice of every split, in split
/// order (`stage_markdup_finish` with the split's range numbers; read in
/// place too), checked against the records of each split the reduce
/// meets. Not both. `argv`: the @PG command line of a Parquet part's
/// header (as `stage_assemble`'s).
#[pyfunction]
#[pyo3(signature = (inputs, blocks, part_path, range_index, partitions, options, index, marks=None, slices=None, argv=None))]
#[allow(clippy::too_many_arguments)]
pub fn stage_reduce(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    blocks: Vec<Bound<'_, PyAny>>,
    part_path: PathBuf,
    range_index: usize,
    partitions: usize,
    options: Keywords,
    index: bool,
    marks: Option<(Bound<'_, PyAny>, Vec<u64>)>,
    slices: Option<Vec<Bound<'_, PyAny>>>,
    argv: Option<Vec<String>>,
) -> PyResult<(u64, u64, u64)> {
    if marks.is_some() && slices.is_some() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "the duplicate decisions: either the whole decision and the splits' bases, or slices, not both",
        ));
    }
    let options = typed(py, &options)?;
    let held = HeldBlocks::new(&blocks)?;
    let blocks = held.slices();
    let (decided, bases) = match marks {
        Some((d, bases)) => (Some(BlockBytes::new(&d)?), bases),
        None => (None, Vec::new()),
    };
    let decided = decided.as_ref().map(BlockBytes::as_slice);
    let range_slices = slices.as_deref().map(HeldBlocks::new).transpose()?;
    let range_slices = range_slices.as_ref().map(HeldBlocks::slices);
    let got = py.detach(move || {
        let marks = match (decided, range_slices) {
            (Some(d), _) => Some(Marks::new(d, bases, &options)?),
            (None, Some(s)) => Some(Marks::sliced(&s, &options)?),
            (None, None) => None,
        };
        alnsort_engine::stages::sort::reduce_marked(
            &inputs,
            &blocks,
            &part_path,
            range_index,
            partitions,
            &options,
            index,
            marks.as_ref(),
            argv.as_deref(),
        )
    });
    got.map(|r| (r.records, r.bytes, r.marked))
        .map_err(|e| raise(py, e))
}

/// The assemble step: (bytes, index path or None, shard files).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn stage_assemble(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    parts: Vec<PathBuf>,
    output: PathBuf,
    options: Keywords,
    index: Option<String>,
    sharded: bool,
    argv: Option<Vec<String>>,
) -> PyResult<(u64, Option<PathBuf>, Vec<PathBuf>)> {
    let kind = index_kind(index.as_deref())?;
    let options = typed(py, &options)?;
    let got = py.detach(move || {
        alnsort_engine::stages::sort::assemble(
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
