//! Merge sources (run readers and sorted in-memory batches), merging them
//! into a new run (spills and fan-in), and [`Merged`], the final sorted
//! stream.
//!
//! Source order is input order everywhere: runs oldest first, then the last
//! chunk's sub-batches in fill order. With the loser tree's "lower index
//! wins ties" rule that makes every merge stable.

use std::borrow::Borrow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::batch::{prefetch, Batch};
use crate::error::{Result, SortError};
use crate::loser::{LoserTree, MergeSource};
use crate::meter::{Charge, Meter};
use crate::partition::Partitioned;
use crate::runfile::{RunMeta, RunWriter, TempRun};
use crate::runread::RunReader;
use crate::{KeyKind, SortStats};

/// How many records a background merge writes between looks at its cancel
/// flag: often enough that dropping a sorter returns within milliseconds.
const CANCEL_CHECK_INTERVAL: u64 = 1 << 14;

/// How many records a spill writes between looks at its stop flag (the
/// sorter's `finish` stops the spill in flight, whose unwritten records
/// are then merged from memory): a few hundred KiB of records, so little
/// is written after the input has ended. Divides [`CANCEL_CHECK_INTERVAL`].
const STOP_CHECK_INTERVAL: u64 = 1 << 10;

/// A sorted batch, or a slice of one, being read front to back. The merge
/// of runs and spills owns its batches (to recycle them); a partition of
/// the final merge (`partition.rs`) borrows a slice of a shared one.
pub(crate) struct BatchCursor<B: Borrow<Batch> = Batch> {
    batch: B,
    pos: usize,
    /// One past the last entry read.
    end: usize,
    /// The current key's bytes for `Fixed8`, whose entries store the key as
    /// an integer only.
    key8: [u8; 8],
    /// Whether advancing prefetches the records ahead: for a merge that
    /// copies them, not for one that only lists them.
    prefetch_records: bool,
}

impl BatchCursor<Batch> {
    /// A cursor on the first entry of a sorted batch.
    pub(crate) fn new(batch: Batch) -> Self {
        let end = batch.len();
        BatchCursor::range(batch, 0, end)
    }

    pub(crate) fn into_batch(self) -> Batch {
        self.batch
    }
}

impl<B: Borrow<Batch>> BatchCursor<B> {
    /// A cursor on entries `pos..end` of a sorted batch.
    pub(crate) fn range(batch: B, pos: usize, end: usize) -> Self {
        let mut cursor = BatchCursor {
            batch,
            pos,
            end,
            key8: [0; 8],
            prefetch_records: true,
        };
        cursor.load_key();
        cursor
    }

    /// This cursor for a merge that reads keys only and lists the records
    /// by reference (the partitioned final merge: the records are copied
    /// later, by the output's compression jobs, which prefetch them
    /// there): loading them into this job's cache is wasted work.
    pub(crate) fn without_record_prefetch(mut self) -> Self {
        self.prefetch_records = false;
        self
    }

    /// The current entry's index in the batch.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    fn load_key(&mut self) {
        if self.pos < self.end {
            self.key8 = self.batch.borrow().entry(self.pos).0.to_be_bytes();
        }
    }
}

impl<B: Borrow<Batch>> MergeSource for BatchCursor<B> {
    fn key(&self) -> Option<&[u8]> {
        (self.pos < self.end).then(|| self.batch.borrow().entry(self.pos).1.unwrap_or(&self.key8))
    }

    fn record(&self) -> &[u8] {
        self.batch.borrow().entry(self.pos).2
    }

    fn advance(&mut self) -> Result<()> {
        self.pos += 1;
        let batch = self.batch.borrow();
        if self.prefetch_records && self.pos + PREFETCH_AHEAD < self.end {
            prefetch(batch.entry(self.pos + PREFETCH_AHEAD).2);
        }
        if batch.kind() == KeyKind::Fixed8 {
            self.load_key();
        }
        Ok(())
    }
}

/// Records ahead of a batch cursor whose bytes are prefetched as it
/// advances: a sorted batch's records lie scattered in its buffer, and the
/// merge that copies them into a run waited for a cache and TLB miss at
/// each (see [`prefetch`]). Each of a merge's sources advances once per
/// few records merged, so a few ahead is enough.
const PREFETCH_AHEAD: usize = 4;

/// Anything the merge reads.
pub(crate) enum Source {
    Run(RunReader),
    Batch(BatchCursor),
}

impl MergeSource for Source {
    fn key(&self) -> Option<&[u8]> {
        match self {
            Source::Run(r) => r.key(),
            Source::Batch(b) => b.key(),
        }
    }

    fn record(&self) -> &[u8] {
        match self {
            Source::Run(r) => r.record(),
            Source::Batch(b) => b.record(),
        }
    }

    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Run(r) => r.advance(),
            Source::Batch(b) => b.advance(),
        }
    }
}

/// Merges every source into `writer` and finishes the run. `cancel`, when
/// set, stops the merge with `SortError::Cancelled`. `stop`, when set,
/// ends the run early, after a whole record: the run then holds the first
/// records of the merged stream, and every source's cursor stands on the
/// first record not written (the rest of the stream, in the same order).
pub(crate) fn merge_into_run(
    tree: &mut LoserTree<Source>,
    mut writer: RunWriter,
    cancel: Option<&AtomicBool>,
    stop: Option<&AtomicBool>,
) -> Result<(TempRun, RunMeta)> {
    let mut written = 0u64;
    while let Some((key, record)) = tree.peek() {
        writer.push(key, record)?;
        tree.pop()?;
        written += 1;
        if written.is_multiple_of(STOP_CHECK_INTERVAL) {
            if written.is_multiple_of(CANCEL_CHECK_INTERVAL)
                && cancel.is_some_and(|c| c.load(Ordering::Relaxed))
            {
                return Err(SortError::Cancelled);
            }
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                break;
            }
        }
    }
    writer.finish()
}

/// How the final merge runs.
pub(crate) enum FinalMerge {
    /// One loser tree on the caller's thread.
    Single {
        tree: LoserTree<Source>,
        /// The current winner has been handed out and must be popped first.
        handed_out: bool,
    },
    /// Key ranges merged on the pool (`partition.rs`).
    Partitioned(Partitioned),
}

/// The sorted output: records in key order, ties in input order.
///
/// Reading it performs the final merge over the runs on disk and the last
/// chunk's sorted sub-batches in memory, on the caller's thread or, cut by
/// key range, on the pool. Run files are deleted when this is dropped (a
/// single-thread merge deletes each as soon as it is read to its end).
pub struct Merged {
    merge: FinalMerge,
    failed: bool,
    stats: SortStats,
    meter: Arc<Meter>,
    /// What the in-memory batches charge against the meter.
    _batches: Charge,
}

impl Merged {
    pub(crate) fn new(
        merge: FinalMerge,
        stats: SortStats,
        meter: Arc<Meter>,
        batches: Charge,
    ) -> Self {
        Merged {
            merge,
            failed: false,
            stats,
            meter,
            _batches: batches,
        }
    }

    /// The next `(key, record)` in sorted order, or `None` at the end. After
    /// an error every later call fails too (never a silent short stream).
    pub fn next_entry(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.failed {
            return Err(SortError::AfterError);
        }
        match &mut self.merge {
            FinalMerge::Single { tree, handed_out } => {
                if *handed_out {
                    if let Err(e) = tree.pop() {
                        self.failed = true;
                        return Err(e);
                    }
                }
                *handed_out = true;
                Ok(tree.peek())
            }
            FinalMerge::Partitioned(p) => match p.next_entry() {
                Ok(entry) => Ok(entry),
                Err(e) => {
                    self.failed = true;
                    Err(e)
                }
            },
        }
    }

    /// Whether [`Merged::next_chunk`] hands out records: the final merge
    /// is cut into key ranges merged on the pool. Otherwise records come
    /// one at a time from the caller's thread.
    pub fn has_chunks(&self) -> bool {
        matches!(self.merge, FinalMerge::Partitioned(_))
    }

    /// The next records in sorted order, as many as the current merged
    /// partition has left, as a [`Chunk`](crate::Chunk) that may be read
    /// on any thread (a writer's compression jobs copy them from there);
    /// `None` at the end. Mixed freely with [`Merged::next_entry`]. Only
    /// when [`Merged::has_chunks`]; otherwise an error.
    pub fn next_chunk(&mut self) -> Result<Option<crate::Chunk>> {
        if self.failed {
            return Err(SortError::AfterError);
        }
        let FinalMerge::Partitioned(p) = &mut self.merge else {
            return Err(SortError::Worker {
                what: "chunks of a merge that is not partitioned",
            });
        };
        let chunk = p.next_chunk();
        self.failed |= chunk.is_err();
        chunk
    }

    /// The next record in sorted order, or `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<&[u8]>> {
        Ok(self.next_entry()?.map(|(_, record)| record))
    }

    /// Counters of the whole sort; `peak_bytes` includes the final merge so
    /// far.
    pub fn stats(&self) -> SortStats {
        SortStats {
            peak_bytes: self.meter.peak(),
            ..self.stats
        }
    }
}

impl std::fmt::Debug for Merged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
