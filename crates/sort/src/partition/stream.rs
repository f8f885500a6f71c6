//! The consumer side of the partitioned merge: partitions dispatched in
//! order with at most `lookahead` in flight (result slot queued before the
//! job), their outputs read back as one stream of `(key, record)` slices.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use alnsort_pipeline::OrderedQueue;
use rayon::ThreadPool;

use super::source::{FrameBuf, PartSource, Spare};
use super::Shared;
use crate::error::{Result, SortError};
use crate::meter::{Charge, Meter};

/// One merged entry of a segment, by reference.
#[derive(Clone, Copy)]
pub(super) enum Item {
    /// Entry `index` of the batch that is source `source`, a record of
    /// `len` bytes (kept here so that the writer cuts blocks without
    /// looking the entry up).
    Batch { source: u32, index: u32, len: u32 },
    /// Byte ranges in the segment's frame `slot`.
    Run {
        slot: u32,
        key: u32,
        key_len: u32,
        record: u32,
        record_len: u32,
    },
}

impl Item {
    /// The length of the item's record.
    fn record_len(&self) -> u32 {
        match *self {
            Item::Batch { len, .. } => len,
            Item::Run { record_len, .. } => record_len,
        }
    }
}

/// One partition's merged stream: references to batch entries, and to run
/// entries in decoded frames the segment keeps alive (their memory is
/// charged by the frames themselves).
pub(crate) struct Segment {
    pub(super) items: Vec<Item>,
    /// The running sums of the items' record lengths (`ends[j]`: the bytes
    /// of items `0..=j`), taken by the merge job once the items are in
    /// ([`Segment::sum_lengths`]): a writer cuts its blocks from them
    /// without a look at each record ([`Chunk::fitting`]).
    pub(super) ends: Vec<u64>,
    pub(super) frames: Vec<Arc<FrameBuf>>,
    pub(super) charge: Charge,
}

impl Segment {
    pub(super) fn new(meter: &Arc<Meter>) -> Self {
        Segment {
            items: Vec::new(),
            ends: Vec::new(),
            frames: Vec::new(),
            charge: Charge::new(meter),
        }
    }

    pub(super) fn clear(&mut self) {
        self.items.clear();
        self.ends.clear();
        self.frames.clear();
    }

    /// Fills `ends` from the items, on the merge job's thread.
    pub(super) fn sum_lengths(&mut self) {
        self.ends.clear();
        self.ends.reserve(self.items.len());
        let mut total = 0u64;
        self.ends.extend(self.items.iter().map(|item| {
            total += u64::from(item.record_len());
            total
        }));
    }

    /// Bytes the segment's lists hold (what its charge counts).
    pub(super) fn list_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<Item>()
            + self.ends.capacity() * std::mem::size_of::<u64>()
    }

    /// Empties the segment, recycling frame buffers no one else holds.
    fn recycle(&mut self, spare: &Spare) {
        self.items.clear();
        self.ends.clear();
        for frame in self.frames.drain(..) {
            if let Ok(buf) = Arc::try_unwrap(frame) {
                spare.give(buf.raw);
            }
        }
    }
}

/// The consumer side: partitions in order, as one stream.
pub(crate) struct Partitioned {
    shared: Arc<Shared>,
    meter: Arc<Meter>,
    next: usize,
    /// Partitions being merged, taken in partition order.
    inflight: OrderedQueue<Result<Segment>>,
    lookahead: usize,
    /// The partition being read; shared with the [`Chunk`]s handed out.
    current: Arc<Segment>,
    idx: usize,
    /// The current key of a `Fixed8` batch entry, whose key is stored as an
    /// integer.
    key8: [u8; 8],
    spare: Vec<Segment>,
    /// Test seam: the merge jobs of this partition and every later one
    /// panic.
    #[cfg(test)]
    panic_from_partition: Option<usize>,
}

impl Partitioned {
    /// A merge of `shared`'s partitions with up to `lookahead` in flight.
    pub(crate) fn new(
        shared: Shared,
        pool: Arc<ThreadPool>,
        meter: Arc<Meter>,
        lookahead: usize,
    ) -> Self {
        Partitioned {
            shared: Arc::new(shared),
            current: Arc::new(Segment::new(&meter)),
            meter,
            next: 0,
            inflight: OrderedQueue::new(pool, "partition merge"),
            lookahead: lookahead.max(1),
            idx: 0,
            key8: [0; 8],
            spare: Vec::new(),
            #[cfg(test)]
            panic_from_partition: None,
        }
    }

    /// Queues result slots and dispatches jobs up to the lookahead.
    fn dispatch(&mut self) {
        while self.inflight.len() < self.lookahead && self.next < self.shared.partitions() {
            let p = self.next;
            self.next += 1;
            let mut seg = self
                .spare
                .pop()
                .unwrap_or_else(|| Segment::new(&self.meter));
            let shared = Arc::clone(&self.shared);
            #[cfg(test)]
            let panics = self.panic_from_partition.is_some_and(|f| p >= f);
            self.inflight.push(move || {
                #[cfg(test)]
                assert!(!panics, "injected partition merge panic");
                shared.merge_partition(p, &mut seg).map(|()| seg)
            });
        }
    }

    /// The entries of the current partition not handed out yet (loading
    /// the next partition first if it has none left), as one owned chunk;
    /// `None` after the last partition.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        self.fill()?;
        if self.idx == self.current.items.len() {
            return Ok(None);
        }
        let chunk = Chunk {
            segment: Arc::clone(&self.current),
            shared: Arc::clone(&self.shared),
            start: self.idx,
            end: self.current.items.len(),
        };
        self.idx = chunk.end;
        Ok(Some(chunk))
    }

    /// Moves to the next partition with entries if the current one has
    /// none left; at the end the current one stays empty.
    fn fill(&mut self) -> Result<()> {
        while self.idx == self.current.items.len() {
            self.dispatch();
            let Some(seg) = self.inflight.pop() else {
                return Ok(());
            };
            let seg = seg??;
            let done = std::mem::replace(&mut self.current, Arc::new(seg));
            // A segment still held by a chunk is dropped by its last holder.
            if let Ok(mut done) = Arc::try_unwrap(done) {
                done.recycle(&self.shared.spare);
                self.spare.push(done);
            }
            self.idx = 0;
        }
        Ok(())
    }

    /// The next `(key, record)`, or `None` after the last partition.
    pub(crate) fn next_entry(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        self.fill()?;
        if self.idx == self.current.items.len() {
            return Ok(None);
        }
        let item = self.current.items[self.idx];
        self.idx += 1;
        entry(&self.shared, &self.current, item, &mut self.key8).map(Some)
    }
}

/// The `(key, record)` of a segment's item; a `Fixed8` batch key is
/// written to `key8` and returned from there.
fn entry<'a>(
    shared: &'a Shared,
    segment: &'a Segment,
    item: Item,
    key8: &'a mut [u8; 8],
) -> Result<(&'a [u8], &'a [u8])> {
    match item {
        Item::Batch { source, index, .. } => {
            let PartSource::Batch(batch) = &shared.sources[source as usize] else {
                return Err(SortError::Worker {
                    what: "partition entry of the wrong kind",
                });
            };
            Ok(batch.key_and_record(index as usize, key8))
        }
        Item::Run {
            slot,
            key,
            key_len,
            record,
            record_len,
        } => {
            let raw = &segment.frames[slot as usize].raw;
            let key = key as usize;
            let record = record as usize;
            Ok((
                &raw[key..key + key_len as usize],
                &raw[record..record + record_len as usize],
            ))
        }
    }
}

/// Consecutive records of the sorted stream that can be read on any thread
/// (see [`Merged::next_chunk`](crate::Merged::next_chunk)): it holds the
/// merged partition they belong to, and the in-memory batches and decoded
/// run frames their bytes are in, until it is dropped.
#[derive(Clone)]
pub struct Chunk {
    segment: Arc<Segment>,
    shared: Arc<Shared>,
    start: usize,
    end: usize,
}

impl Chunk {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the chunk holds no record.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Record `i` (`i < len()`), as the stream gives it.
    pub fn record(&self, i: usize) -> &[u8] {
        let item = self.segment.items[self.start + i];
        match item {
            Item::Batch { source, index, .. } => match &self.shared.sources[source as usize] {
                PartSource::Batch(batch) => batch.entry(index as usize).2,
                // `Partitioned` only makes batch items of batch sources.
                PartSource::Run(_) => unreachable!("a batch item of a run source"),
            },
            Item::Run {
                slot,
                record,
                record_len,
                ..
            } => {
                let raw = &self.segment.frames[slot as usize].raw;
                &raw[record as usize..][..record_len as usize]
            }
        }
    }
}

impl Chunk {
    /// The length of record `i` (`i < len()`): `record(i).len()`, from the
    /// chunk's own list without reading the batch entry.
    pub fn record_len(&self, i: usize) -> usize {
        self.segment.items[self.start + i].record_len() as usize
    }

    /// How many records from `from` on fit in `room` bytes, each counted
    /// `less` bytes shorter than it is (bytes the caller cuts off, at most
    /// the record's length), and their bytes so counted: records are
    /// taken in order while their running total stays within `room`, and
    /// no more once it reaches `room` exactly (a BGZF block's units,
    /// `alnsort_bgzf::Units::fitting`). Answered from the running sums the
    /// merge job took, by a binary search.
    pub fn fitting(&self, from: usize, room: usize, less: usize) -> (usize, usize) {
        let ends = &self.segment.ends[self.start..self.end];
        let base = match from {
            0 => self
                .start
                .checked_sub(1)
                .map_or(0, |j| self.segment.ends[j]),
            f => ends[f - 1],
        };
        let ends = &ends[from..];
        if ends.is_empty() {
            return (0, 0);
        }
        // The bytes of the first `k` records (k >= 1), as counted.
        let sum = |k: usize| (ends[k - 1] - base) as usize - k * less;
        // The largest k whose records fit (sums grow with k): a block
        // holds a few hundred records of the chunk's thousands, so the
        // search gallops from the start, then halves.
        let (mut lo, mut hi) = (0usize, 1usize);
        while hi < ends.len() && sum(hi) <= room {
            lo = hi;
            hi *= 2;
        }
        let mut hi = hi.min(ends.len());
        if sum(hi) <= room {
            lo = hi;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if sum(mid + 1) <= room {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut k = lo;
        if k == 0 {
            return (0, 0);
        }
        let bytes = sum(k);
        // Records of no bytes after the total reached `room` go to the
        // next block, as one by one.
        while bytes == room && k > 1 && sum(k - 1) == room {
            k -= 1;
        }
        (k, bytes)
    }

    /// A hint that record `i` (`i < len()`) is read soon: starts loading
    /// its first bytes into the cache (see `batch::prefetch`).
    pub fn prefetch(&self, i: usize) {
        crate::batch::prefetch(self.record(i));
    }
}

impl Drop for Chunk {
    /// The last holder of a finished partition gives its frame buffers
    /// back for reuse (a fresh frame buffer costs page faults).
    fn drop(&mut self) {
        if let Some(segment) = Arc::get_mut(&mut self.segment) {
            segment.recycle(&self.shared.spare);
        }
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk").field("len", &self.len()).finish()
    }
}

impl Drop for Partitioned {
    fn drop(&mut self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        // Waiting makes the jobs let go of the runs, so the files are
        // deleted when this returns; their results no longer matter.
        self.inflight.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Batch;
    use crate::KeyKind;

    #[test]
    fn a_panicking_partition_merge_is_an_error_naming_the_stage() {
        let meter = Arc::new(Meter::default());
        let sources = (0..2u64)
            .map(|b| {
                let mut batch = Batch::new(KeyKind::Fixed8, 1 << 20);
                for i in 0..2_000u64 {
                    let key = (i * 2 + b).to_be_bytes();
                    assert!(batch.try_push(&key, &[7u8; 40]));
                }
                batch.sort();
                PartSource::Batch(batch)
            })
            .collect();
        let shared = Shared::new(sources, true, 8 << 10, 2, &meter);
        let partitions = shared.partitions();
        assert!(partitions > 4, "{partitions} partitions");
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .expect("pool"),
        );
        let mut merged = Partitioned::new(shared, pool, meter, 2);
        merged.panic_from_partition = Some(3);
        let mut delivered = 0u64;
        let err = loop {
            match merged.next_entry() {
                Ok(Some((key, _))) => {
                    // Partitions before the lost one come out whole and in
                    // order.
                    assert_eq!(key, delivered.to_be_bytes());
                    delivered += 1;
                }
                Ok(None) => panic!("the merge ended without the lost partition"),
                Err(e) => break e,
            }
        };
        assert!(delivered > 0 && delivered < 4_000, "{delivered}");
        assert!(
            matches!(
                err,
                SortError::Worker {
                    what: "partition merge"
                }
            ),
            "{err:?}"
        );
    }
}
