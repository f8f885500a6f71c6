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
    /// Entry `index` of the batch that is source `source`.
    Batch { source: u32, index: u32 },
    /// Byte ranges in the segment's frame `slot`.
    Run {
        slot: u32,
        key: u32,
        key_len: u32,
        record: u32,
        record_len: u32,
    },
}

/// One partition's merged stream: references to batch entries, and to run
/// entries in decoded frames the segment keeps alive (their memory is
/// charged by the frames themselves).
pub(crate) struct Segment {
    pub(super) items: Vec<Item>,
    pub(super) frames: Vec<Arc<FrameBuf>>,
    pub(super) charge: Charge,
}

impl Segment {
    pub(super) fn new(meter: &Arc<Meter>) -> Self {
        Segment {
            items: Vec::new(),
            frames: Vec::new(),
            charge: Charge::new(meter),
        }
    }

    pub(super) fn clear(&mut self) {
        self.items.clear();
        self.frames.clear();
    }

    /// Empties the segment, recycling frame buffers no one else holds.
    fn recycle(&mut self, spare: &Spare) {
        self.items.clear();
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
    current: Segment,
    idx: usize,
    /// The current key of a `Fixed8` batch entry, whose key is stored as an
    /// integer.
    key8: [u8; 8],
    spare: Vec<Segment>,
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
            current: Segment::new(&meter),
            meter,
            next: 0,
            inflight: OrderedQueue::new(pool, "partition merge"),
            lookahead: lookahead.max(1),
            idx: 0,
            key8: [0; 8],
            spare: Vec::new(),
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
            self.inflight
                .push(move || shared.merge_partition(p, &mut seg).map(|()| seg));
        }
    }

    /// The next `(key, record)`, or `None` after the last partition.
    pub(crate) fn next_entry(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        while self.idx == self.current.items.len() {
            self.dispatch();
            let Some(seg) = self.inflight.pop() else {
                return Ok(None);
            };
            let seg = seg??;
            let mut done = std::mem::replace(&mut self.current, seg);
            done.recycle(&self.shared.spare);
            self.spare.push(done);
            self.idx = 0;
        }
        let item = self.current.items[self.idx];
        self.idx += 1;
        match item {
            Item::Batch { source, index } => {
                let PartSource::Batch(batch) = &self.shared.sources[source as usize] else {
                    return Err(SortError::Worker {
                        what: "partition entry of the wrong kind",
                    });
                };
                Ok(Some(batch.key_and_record(index as usize, &mut self.key8)))
            }
            Item::Run {
                slot,
                key,
                key_len,
                record,
                record_len,
            } => {
                let raw = &self.current.frames[slot as usize].raw;
                let key = key as usize;
                let record = record as usize;
                Ok(Some((
                    &raw[key..key + key_len as usize],
                    &raw[record..record + record_len as usize],
                )))
            }
        }
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
