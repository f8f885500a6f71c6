//! The engine's pieces for a distributed sort (a map task and a reduce task,
//! e.g. on Ray), on the same run files and merge as the one-process sort.
//!
//! * **Map**: a [`Sorter`](crate::Sorter) fed with one split of the input
//!   (the records between two virtual offsets, in input order) ends with
//!   [`Sorter::finish_runs`](crate::Sorter::finish_runs) instead of
//!   `finish`: every record goes to sorted run files that are kept, and
//!   their [`SortedRun`] handles (path, counts, sparse frame index) are
//!   handed back.
//! * **Splitters**: [`sample_splitters`] picks up to `parts - 1` keys from
//!   the runs' frame indexes (no run is read), cutting the key space into
//!   ranges of about equal bytes.
//! * **Reduce**: [`merge_runs`] merges runs of several map tasks, given in
//!   split order, optionally only the keys of one [`KeyRange`], into the
//!   same [`Merged`] stream `finish` returns; each range's records are
//!   exactly the whole merge's records with keys in the range, in the same
//!   order, so writing the ranges one after the other (the first with the
//!   header, the last with the EOF block) gives the whole sort's records.
//!
//! Nothing here touches process state (no signal handling, no resource
//! limit, no global thread pool), and every call can be made any number of
//! times in one process.
//!
//! Stability: runs of one sorter are numbered in input order and the merge
//! prefers the earlier run on equal keys (ARCHITECTURE.md, "Stability"), so
//! passing the map tasks' runs in split order, each task's runs in the
//! order `finish_runs` returned them, breaks ties by input order exactly
//! as one sorter over the whole input does.
//!
//! Ranges are cut **by key only**: every record with one key falls in one
//! range. The one-process final merge (`partition.rs`) cuts at a triple
//! (key, source, position) instead, which bounds every partition however
//! many records share a key; a key range cannot, so a key held by more
//! records than a range's share (e.g. unmapped reads in coordinate order,
//! which all have the largest key) makes its range that much larger.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::ThreadPool;

use crate::error::{Result, SortError};
use crate::loser::LoserTree;
use crate::merge::{FinalMerge, Merged, Source};
use crate::meter::{Charge, Meter};
use crate::runfile::{FrameInfo, TempRun};
use crate::runread::RunReader;
use crate::{KeyKind, SortStats};

/// A sorted run file kept on disk by
/// [`Sorter::finish_runs`](crate::Sorter::finish_runs): its records in key order, ties in input
/// order, with the sparse index of its frames (each frame's offset, size
/// and first key) that ranged merges and [`sample_splitters`] use.
///
/// The file belongs to the caller: it is **not** deleted when this handle
/// is dropped (a reduce task, perhaps in another process, reads it later).
/// [`SortedRun::remove`] deletes it. The frame index lives in this handle;
/// a task in another process that has only the path rebuilds the handle
/// with [`SortedRun::open`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortedRun {
    path: PathBuf,
    index: Vec<FrameInfo>,
    records: u64,
    raw_bytes: u64,
    file_bytes: u64,
}

impl SortedRun {
    pub(crate) fn new(run: TempRun, records: u64, raw_bytes: u64, file_bytes: u64) -> Self {
        let (path, index) = run.into_kept();
        SortedRun {
            path,
            index,
            records,
            raw_bytes,
            file_bytes,
        }
    }

    /// The handle of the run file at `path` (written by
    /// [`Sorter::finish_runs`](crate::Sorter::finish_runs), perhaps in
    /// another process), rebuilt from the file alone: one pass reads,
    /// CRC-checks and decompresses every frame on the calling thread for
    /// its first key, so this costs a read of the run; a driver that can
    /// pass the handle itself saves it. A damaged or truncated file is
    /// `SortError::CorruptRun`.
    pub fn open(path: impl Into<PathBuf>) -> Result<SortedRun> {
        let path = path.into();
        let file = std::fs::File::open(&path).map_err(|source| SortError::Read {
            path: path.clone(),
            offset: 0,
            source,
        })?;
        let (index, meta) = crate::runread::scan_index(&file, &path)?;
        Ok(SortedRun {
            path,
            index,
            records: meta.records,
            raw_bytes: meta.raw_bytes,
            file_bytes: meta.file_bytes,
        })
    }

    /// The run file (inside the sorter's `SortConfig::temp_dir`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records in the run.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Key and record bytes of the run before compression (the run's share
    /// of the data, for weighing).
    pub fn raw_bytes(&self) -> u64 {
        self.raw_bytes
    }

    /// Bytes of the file.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// Frames of the run (its index's entries).
    pub fn frames(&self) -> usize {
        self.index.len()
    }

    /// Deletes the run file.
    pub fn remove(self) -> Result<()> {
        std::fs::remove_file(&self.path).map_err(|source| SortError::Remove {
            path: self.path,
            source,
        })
    }
}

/// What [`Sorter::finish_runs`](crate::Sorter::finish_runs) hands back.
#[derive(Debug)]
pub struct SortedRuns {
    /// The runs, in input order: pass them to [`merge_runs`] in this order
    /// (after the runs of earlier splits) so equal keys keep input order.
    pub runs: Vec<SortedRun>,
    /// Counters of the map task's sort (`final_sources` and
    /// `merge_partitions` stay 0: there is no final merge).
    pub stats: SortStats,
}

/// A half-open range of keys `[start, end)`; `None` is unbounded on that
/// side. Keys compare as byte strings (`<[u8]>::cmp`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// First key in the range (`None`: from the smallest key).
    pub start: Option<Vec<u8>>,
    /// First key past the range (`None`: to the largest key).
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> KeyRange {
        KeyRange::default()
    }

    /// The `i`-th of the `splitters.len() + 1` ranges that sorted,
    /// distinct `splitters` cut the key space into: `[s[i-1], s[i])`, the
    /// first open below and the last open above.
    pub fn nth(splitters: &[Vec<u8>], i: usize) -> KeyRange {
        KeyRange {
            start: i.checked_sub(1).and_then(|j| splitters.get(j).cloned()),
            end: splitters.get(i).cloned(),
        }
    }
}

/// Merges `runs`, in the order given (equal keys come out in that order of
/// runs, so pass them in input order: the map tasks' runs in split order),
/// keeping only records whose key lies in `range`. Each run is read from
/// the frame its index says may hold `range.start`, so a range does not
/// read the runs' earlier frames. `key_kind` is the sorters' (8-byte keys
/// take the loser tree's integer comparison).
///
/// The merge runs on the caller's thread as it is read (frames are
/// decompressed on `pool`); a reduce task is itself the unit of parallel
/// work. The run files are left in place. Runs are open at once: one file
/// descriptor and about four frames of memory each (a frame is at most
/// 256 KiB raw); the caller keeps their number within its limits.
pub fn merge_runs(
    runs: &[SortedRun],
    range: &KeyRange,
    key_kind: KeyKind,
    pool: Arc<ThreadPool>,
) -> Result<Merged> {
    let meter = Arc::new(Meter::default());
    let mut sources = Vec::with_capacity(runs.len());
    for run in runs {
        let handle = TempRun::kept(run.path.clone(), run.index.clone());
        sources.push(Source::Run(RunReader::open_range(
            handle,
            Arc::clone(&pool),
            &meter,
            range.start.as_deref(),
            range.end.as_deref(),
        )?));
    }
    let stats = SortStats {
        final_sources: runs.len() as u64,
        merge_partitions: 1,
        ..SortStats::default()
    };
    let merge = FinalMerge::Single {
        tree: LoserTree::new(sources, key_kind == KeyKind::Fixed8),
        handed_out: false,
    };
    let charge = Charge::new(&meter);
    Ok(Merged::new(merge, stats, meter, charge))
}

/// Up to `parts - 1` splitters, sorted and distinct, that cut the keys of
/// `runs` into `parts` ranges of about equal raw bytes (use them with
/// [`KeyRange::nth`]). The candidates are the first keys of the runs'
/// frames, each weighed by its frame's bytes, so nothing is read and a
/// range is within about a frame per run of its share, except that ranges
/// are cut by key only: a key held by more than a range's share of the
/// bytes is never cut (see the module documentation), and then fewer than
/// `parts - 1` splitters may come back.
pub fn sample_splitters(runs: &[SortedRun], parts: usize) -> Vec<Vec<u8>> {
    let mut candidates: Vec<(&[u8], u64)> = runs
        .iter()
        .flat_map(|r| r.index.iter())
        .map(|f| (&*f.first_key, u64::from(f.raw_len)))
        .collect();
    candidates.sort_unstable();
    let smallest = candidates.first().map(|c| c.0.to_vec());
    let total: u64 = candidates.iter().map(|c| c.1).sum();
    let mut splitters: Vec<Vec<u8>> = Vec::new();
    if parts < 2 || total == 0 {
        return splitters;
    }
    let parts = parts as u64;
    let mut acc = 0u64;
    for (key, weight) in candidates {
        // The next cut is due once the bytes before this candidate reach
        // its share; the smallest key is never a cut (its range would be
        // empty), nor a key already cut at.
        let due = total * (splitters.len() as u64 + 1) / parts;
        if acc >= due
            && (splitters.len() as u64) < parts - 1
            && smallest.as_deref() != Some(key)
            && splitters.last().is_none_or(|last| last.as_slice() < key)
        {
            splitters.push(key.to_vec());
        }
        acc += weight;
    }
    splitters
}
