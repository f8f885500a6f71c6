//! The sources of the partitioned merge and the cursors that read one
//! partition's slice of each: run files read by position through their
//! frame index (decoded frames shared through a cache of weak references
//! and recycled through [`Spare`]), and sorted in-memory batches.

use std::fs::File;
use std::sync::{Arc, Mutex, Weak};

use super::stream::{Item, Segment};
use super::{corrupt, lock, Pos};
use crate::batch::Batch;
use crate::error::{Result, SortError};
use crate::loser::MergeSource;
use crate::merge::BatchCursor;
use crate::meter::{Charge, Meter};
use crate::runfile::{FrameInfo, TempRun};
use crate::runread::{entry_at, read_frame_at};

/// A decoded frame, charged to the meter while alive.
pub(super) struct FrameBuf {
    pub(super) raw: Vec<u8>,
    _charge: Charge,
}

/// A run as the partitioned merge reads it.
pub(crate) struct RunSource {
    /// Deleted when the merge is dropped.
    pub(super) run: TempRun,
    file: File,
    /// Decoded frames alive somewhere, by frame number.
    cache: Mutex<Vec<Weak<FrameBuf>>>,
}

impl RunSource {
    /// Opens a finished run for positioned reads.
    pub(crate) fn open(run: TempRun) -> Result<Self> {
        let file = File::open(run.path()).map_err(|source| SortError::Read {
            path: run.path().to_path_buf(),
            offset: 0,
            source,
        })?;
        let frames = run.index().len();
        Ok(RunSource {
            run,
            file,
            cache: Mutex::new((0..frames).map(|_| Weak::new()).collect()),
        })
    }

    pub(super) fn frames(&self) -> &[FrameInfo] {
        self.run.index()
    }

    /// Frame `i`'s raw bytes, decoded now or shared with whoever decoded it.
    pub(super) fn frame(&self, i: usize, spare: &Spare) -> Result<Arc<FrameBuf>> {
        if let Some(hit) = lock(&self.cache)[i].upgrade() {
            return Ok(hit);
        }
        let (raw, stored) = read_frame_at(
            &self.file,
            self.run.path(),
            &self.frames()[i],
            spare.take(),
            spare.take(),
        )?;
        spare.give(stored);
        let mut cache = lock(&self.cache);
        // Another job may have decoded it meanwhile: share theirs.
        if let Some(hit) = cache[i].upgrade() {
            spare.give(raw);
            return Ok(hit);
        }
        let mut charge = Charge::new(&spare.meter);
        charge.set(raw.capacity());
        let frame = Arc::new(FrameBuf {
            raw,
            _charge: charge,
        });
        cache[i] = Arc::downgrade(&frame);
        Ok(frame)
    }
}

/// A source of the partitioned merge, in input order.
pub(crate) enum PartSource {
    Run(RunSource),
    Batch(Batch),
}

/// Recycled frame buffers, charged to the meter while kept.
pub(super) struct Spare {
    list: Mutex<(Vec<Vec<u8>>, Charge)>,
    most: usize,
    meter: Arc<Meter>,
}

impl Spare {
    pub(super) fn new(meter: &Arc<Meter>, most: usize) -> Self {
        Spare {
            list: Mutex::new((Vec::new(), Charge::new(meter))),
            most,
            meter: Arc::clone(meter),
        }
    }

    fn take(&self) -> Vec<u8> {
        let mut guard = lock(&self.list);
        let (list, charge) = &mut *guard;
        let buf = list.pop().unwrap_or_default();
        charge.set(list.iter().map(Vec::capacity).sum());
        buf
    }

    pub(super) fn give(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut guard = lock(&self.list);
        let (list, charge) = &mut *guard;
        if list.len() < self.most {
            list.push(buf);
            charge.set(list.iter().map(Vec::capacity).sum());
        }
    }
}

/// One source's slice of a partition, read front to back.
pub(super) enum Cursor<'a> {
    Batch {
        /// Index of the batch among the merge's sources.
        source: u32,
        cursor: BatchCursor<&'a Batch>,
    },
    Run(RunCursor<'a>),
}

pub(super) struct RunCursor<'a> {
    source: &'a RunSource,
    spare: &'a Spare,
    data: Option<Arc<FrameBuf>>,
    frame: usize,
    entry: u32,
    byte: usize,
    key: std::ops::Range<usize>,
    record: std::ops::Range<usize>,
    /// Where the partition ends in this run: before entry `end_entry` of
    /// frame `end_frame`, whose decoded bytes the cut may hold.
    end_frame: usize,
    end_entry: u32,
    end_data: Option<Arc<FrameBuf>>,
    /// Where the current frame sits in the segment being filled, once an
    /// entry of it has been emitted.
    slot: Option<u32>,
    done: bool,
}

impl RunCursor<'_> {
    /// Moves to the first entry at or after (frame, entry), or to done.
    fn settle(&mut self) -> Result<()> {
        let frames = self.source.frames();
        loop {
            if (self.frame, self.entry) == (self.end_frame, self.end_entry)
                || self.frame >= frames.len()
            {
                self.done = true;
                self.release();
                return Ok(());
            }
            let data = match &self.data {
                Some(d) => Arc::clone(d),
                None => {
                    let d = match &self.end_data {
                        Some(d) if self.frame == self.end_frame => Arc::clone(d),
                        _ => self.source.frame(self.frame, self.spare)?,
                    };
                    self.data = Some(Arc::clone(&d));
                    d
                }
            };
            if self.entry == frames[self.frame].entries {
                if self.byte != data.raw.len() {
                    return Err(corrupt(
                        self.source,
                        self.frame,
                        "frame has bytes after its last entry",
                    ));
                }
                self.release();
                self.frame += 1;
                self.entry = 0;
                self.byte = 0;
                continue;
            }
            let (key, record) = entry_at(&data.raw, self.byte)
                .map_err(|reason| corrupt(self.source, self.frame, reason))?;
            self.key = key;
            self.record = record;
            return Ok(());
        }
    }

    /// Lets go of the current frame, recycling its buffer if no one else
    /// holds it.
    pub(super) fn release(&mut self) {
        self.slot = None;
        if let Some(d) = self.data.take() {
            if let Ok(buf) = Arc::try_unwrap(d) {
                self.spare.give(buf.raw);
            }
        }
    }
}

impl Cursor<'_> {
    /// Appends the current entry to `seg` as a reference: a batch entry by
    /// number, a run entry by its frame (kept alive by the segment) and
    /// byte ranges. Nothing is copied.
    pub(super) fn emit(&mut self, seg: &mut Segment) -> Result<()> {
        match self {
            Cursor::Batch { source, cursor } => seg.items.push(Item::Batch {
                source: *source,
                index: cursor.pos() as u32,
                len: cursor.record().len() as u32,
            }),
            Cursor::Run(r) => {
                let Some(data) = &r.data else {
                    return Err(SortError::Worker {
                        what: "a run cursor without its frame won the merge",
                    });
                };
                let slot = *r.slot.get_or_insert_with(|| {
                    seg.frames.push(Arc::clone(data));
                    (seg.frames.len() - 1) as u32
                });
                seg.items.push(Item::Run {
                    slot,
                    key: r.key.start as u32,
                    key_len: r.key.len() as u32,
                    record: r.record.start as u32,
                    record_len: r.record.len() as u32,
                });
            }
        }
        Ok(())
    }
}

impl MergeSource for Cursor<'_> {
    fn key(&self) -> Option<&[u8]> {
        match self {
            Cursor::Batch { cursor, .. } => cursor.key(),
            Cursor::Run(r) => match (&r.data, r.done) {
                (Some(d), false) => Some(&d.raw[r.key.clone()]),
                _ => None,
            },
        }
    }

    fn record(&self) -> &[u8] {
        match self {
            Cursor::Batch { cursor, .. } => cursor.record(),
            Cursor::Run(r) => match &r.data {
                Some(d) => &d.raw[r.record.clone()],
                None => &[],
            },
        }
    }

    fn advance(&mut self) -> Result<()> {
        match self {
            Cursor::Batch { cursor, .. } => cursor.advance(),
            Cursor::Run(r) => {
                r.byte = r.record.end;
                r.entry += 1;
                r.settle()
            }
        }
    }
}

/// A cursor over source number `s` from cut position `from` to `to`.
pub(super) fn cursor<'a>(
    source: &'a PartSource,
    s: usize,
    spare: &'a Spare,
    from: &Pos,
    to: &Pos,
) -> Result<Cursor<'a>> {
    match (source, from, to) {
        (PartSource::Batch(batch), Pos::Batch(pos), Pos::Batch(end)) => Ok(Cursor::Batch {
            source: s as u32,
            cursor: BatchCursor::range(batch, *pos, *end).without_record_prefetch(),
        }),
        (
            PartSource::Run(source),
            Pos::Run {
                frame,
                entry,
                byte,
                data,
            },
            Pos::Run {
                frame: end_frame,
                entry: end_entry,
                data: end_data,
                ..
            },
        ) => {
            let mut c = RunCursor {
                source,
                spare,
                data: data.clone(),
                frame: *frame,
                entry: *entry,
                byte: *byte,
                key: 0..0,
                record: 0..0,
                end_frame: *end_frame,
                end_entry: *end_entry,
                end_data: end_data.clone(),
                slot: None,
                done: false,
            };
            c.settle()?;
            Ok(Cursor::Run(c))
        }
        _ => Err(SortError::Worker {
            what: "partition cut of the wrong kind",
        }),
    }
}
