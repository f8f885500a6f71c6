//! Ordered parallel BGZF compression.
//!
//! The caller hands over one payload per block (the BAM layer decides block
//! boundaries, htslib-style). Blocks are deflated on the injected pool in
//! jobs of [`JOB_BLOCKS`] blocks, through `alnsort_pipeline::OrderedSink`:
//! each job's result slot is queued before the job is dispatched, and the
//! sink's consumer thread writes the compressed blocks in order, recording
//! each block's compressed offset for the index. Any write error stops that
//! thread, which closes the FIFO, so the error comes back from a later
//! `write_block` or from `finish`, and every later call returns it again.

use std::io::{self, Write};
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Sender};
use libdeflater::Compressor;
use rayon::ThreadPool;

use crate::block::{encode_block, CompressionLevel, EOF_BLOCK, MAX_BLOCK_SIZE, MAX_PAYLOAD};
use crate::error::{BgzfError, Result};
use crate::kept::KeptBlocks;
use alnsort_pipeline::{Lost, OrderedSink};

/// What a block's deflate job runs first to append the rest of its payload
/// (and the notes of the units it copies, see [`UnitNote`]).
type Fill = Box<dyn FnOnce(&mut Vec<u8>, &mut Vec<UnitNote>) + Send>;

/// What an index needs of one unit (a BAM record), as the caller's
/// [`NoteFn`] reads it from the unit's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitFields {
    pub ref_id: i32,
    pub beg: i32,
    pub end: i64,
    pub mapped: bool,
    /// The caller's own word about the unit, carried to its [`NotesSink`]
    /// untouched (the BAM writer's: what flagstat reads of the record).
    pub word: u32,
}

/// Reads a unit's [`UnitFields`] from its bytes (whole, as written).
pub type NoteFn = fn(&[u8]) -> UnitFields;

/// One unit's note, made where its bytes are copied into a block (by the
/// block's deflate job for [`BlockWriter::write_units`]' units, which are
/// then in the cache) and handed, in write order, with the block the unit
/// starts in to the [`NotesSink`] on the thread that writes the blocks:
/// so the thread that cuts the blocks never reads a unit's bytes. 32 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitNote {
    pub end: i64,
    pub ref_id: i32,
    pub beg: i32,
    /// The unit's length in bytes.
    pub len: u32,
    /// [`UnitFields::word`].
    pub word: u32,
    /// Where the unit starts in its (first) block's payload.
    pub offset: u16,
    pub mapped: bool,
}

/// The most notes one block can carry: one per unit, the shortest unit
/// being a BAM record without a sequence (its 4-byte `block_size`, 32
/// fixed bytes and a 1-byte name, SAM spec section 4.2). What the memory
/// reserve charges per block in flight.
pub const MAX_NOTES_PER_BLOCK: usize = MAX_PAYLOAD / 37 + 1;

impl UnitNote {
    fn new(f: UnitFields, offset: usize, len: usize) -> UnitNote {
        UnitNote {
            end: f.end,
            ref_id: f.ref_id,
            beg: f.beg,
            len: len as u32,
            word: f.word,
            offset: offset as u16,
            mapped: f.mapped,
        }
    }

    /// The unit's fields.
    pub fn fields(&self) -> UnitFields {
        UnitFields {
            ref_id: self.ref_id,
            beg: self.beg,
            end: self.end,
            mapped: self.mapped,
            word: self.word,
        }
    }

    /// The unit's start and end as logical virtual offsets (as
    /// [`BlockWriter::write_unit`] and [`BlockWriter::virtual_offset`]
    /// after it give them), `block` being the index of the block it starts
    /// in: a unit that ends exactly at a block's end ends at the next
    /// block's start.
    pub fn offsets(&self, block: u64) -> (u64, u64) {
        let end = self.offset as u64 + self.len as u64;
        let max = MAX_PAYLOAD as u64;
        (
            (block << 16) | self.offset as u64,
            ((block + end / max) << 16) | (end % max),
        )
    }
}

/// Takes the notes of each block in write order, with the block's index
/// (0 for the writer's first block), on the thread that writes the blocks.
pub type NotesSink = Box<dyn FnMut(u64, &[UnitNote]) + Send>;

/// Told, on the thread that writes the blocks, how many blocks and bytes
/// are written and flushed to the inner writer (so a caller can make them
/// durable and note how far a writer started again may keep them).
pub type Checkpoint = Box<dyn FnMut(u64, u64) + Send>;

/// A writer that goes on from a killed one's output
/// ([`ParallelWriter::resuming`]), and how often it says how far it got.
#[derive(Default)]
pub struct Resuming {
    /// The blocks already on disk: checked, not written again.
    pub kept: KeptBlocks,
    /// Called each time at least `.0` bytes more have been written.
    pub checkpoint: Option<(u64, Checkpoint)>,
}

/// Records (or any byte strings) whose bytes a deflate job may copy on the
/// pool: [`BlockWriter::write_units`] cuts blocks from their lengths alone
/// and leaves the copying of each block's payload to that block's job.
pub trait Units: Send + Sync {
    /// How many units there are.
    fn count(&self) -> usize;
    /// Unit `i` (`i < count()`).
    fn unit(&self, i: usize) -> &[u8];
    /// `unit(i).len()`: what [`BlockWriter::write_units`] reads of each
    /// unit on the writing thread. A `Units` that knows its lengths
    /// without forming the slice may answer from them.
    fn unit_len(&self, i: usize) -> usize {
        self.unit(i).len()
    }
    /// How many units from `from` on go into a block with `room` bytes
    /// left, and their bytes: units are taken in order while their running
    /// total stays within `room`, and no more once it reaches `room`
    /// exactly (the blocking of [`BlockWriter::write_unit`]). What
    /// [`BlockWriter::write_units`] asks per block. The default adds up [`Units::unit_len`]; a `Units` that
    /// keeps running sums of its lengths answers from them (a binary
    /// search), so the writing thread does work per block, not per unit.
    fn fitting(&self, from: usize, room: usize) -> (usize, usize) {
        let (mut k, mut bytes) = (0, 0);
        while from + k < self.count() {
            let len = self.unit_len(from + k);
            if bytes + len > room {
                break;
            }
            bytes += len;
            k += 1;
            if bytes == room {
                break;
            }
        }
        (k, bytes)
    }
    /// A hint that unit `i` (`i < count()`) is copied soon: units whose
    /// bytes lie scattered in memory (sorted records) can start loading it
    /// into the cache. The default does nothing.
    fn prefetch(&self, i: usize) {
        let _ = i;
    }
    /// Appends the bytes written for unit `i`: `unit(i)` by default. A
    /// `Units` that edits its units as they are copied (e.g. a flag bit
    /// set) gives the edited bytes here; they must be as long as
    /// `unit(i)`, whose other readers (an index) see only fields left as
    /// they are.
    fn append_unit(&self, i: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(self.unit(i));
    }
    /// Appends bytes `range` of what [`Units::append_unit`] writes for
    /// unit `i` (a unit longer than a block goes out in parts).
    fn append_part(&self, i: usize, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.unit(i)[range]);
    }
}

/// A stretch of one [`Units`]' bytes in a pending block: units `from..to`
/// whole, or part of one unit (a unit longer than what a block has left).
struct Piece {
    units: Arc<dyn Units>,
    from: usize,
    to: usize,
    /// For a part: the byte range within unit `from` (then `to == from + 1`).
    part: Option<std::ops::Range<usize>>,
}

/// Units ahead of the one being copied that are announced to
/// [`Units::prefetch`]: sorted records lie at scattered addresses, and a
/// plain copy waits for a TLB and cache miss at each one; asking a few
/// records ahead overlaps those waits with the copying.
const PREFETCH_AHEAD: usize = 8;

impl Piece {
    /// Appends the piece's bytes to `out`, and with `noting` the note of
    /// each unit that starts in it to `notes`.
    fn append_to(&self, out: &mut Vec<u8>, noting: Option<NoteFn>, notes: &mut Vec<UnitNote>) {
        match &self.part {
            Some(bytes) => {
                if let (Some(note), 0) = (noting, bytes.start) {
                    // The note reads the unit as written (its edits made),
                    // whole: a unit this long is rare enough to copy once
                    // more for it.
                    let mut whole = Vec::with_capacity(self.units.unit_len(self.from));
                    self.units.append_unit(self.from, &mut whole);
                    notes.push(UnitNote::new(note(&whole), out.len(), whole.len()));
                }
                self.units.append_part(self.from, bytes.clone(), out)
            }
            None => {
                let (from, to) = (self.from, self.to);
                for i in from..to.min(from + PREFETCH_AHEAD) {
                    self.units.prefetch(i);
                }
                for i in from..to {
                    if i + PREFETCH_AHEAD < to {
                        self.units.prefetch(i + PREFETCH_AHEAD);
                    }
                    let start = out.len();
                    self.units.append_unit(i, out);
                    if let (Some(note), true) = (noting, out.len() > start) {
                        let fields = note(&out[start..]);
                        notes.push(UnitNote::new(fields, start, out.len() - start));
                    }
                }
            }
        }
    }
}

/// Blocks deflated per pool job. One job per 64 KiB block cost the
/// writing thread a job, a slot and a FIFO handoff per block (about 0.25 s
/// of serial time on the benchmark BAM, bench/results/
/// 2026-11-27-scan-profile-speed22.md), and each handoff is a thread
/// wakeup that waits for the scheduler on a loaded machine; four blocks per
/// job, as the reader inflates them, divide both by four.
pub const JOB_BLOCKS: usize = 4;

/// Jobs queued for the writer thread per pool thread: [`JOB_BLOCKS`] blocks
/// each, so the blocks in flight are the 4 per pool thread of 128 KiB
/// (payload and deflated block) that the engine's memory reserve counts
/// (`reserve_bytes`), plus the job being queued and the blocks gathering
/// for the next one.
const QUEUE_JOBS_PER_THREAD: usize = 1;

/// The stage name of the deflate jobs, in errors.
const DEFLATE_STAGE: &str = "BGZF deflate";

/// What [`ParallelWriter::finish`] returns.
#[derive(Debug)]
pub struct WriterSummary<W> {
    /// The output, flushed.
    pub inner: W,
    /// Compressed offset of each block in write order, then one last entry:
    /// the offset of the EOF block.
    pub block_offsets: Vec<u64>,
    /// Bytes written to `inner`, EOF block included.
    pub compressed_bytes: u64,
    /// Payload bytes handed to `write_block`.
    pub uncompressed_bytes: u64,
}

/// One block waiting for its job: its first bytes, and what its job appends
/// to them (`len` bytes in all), and the notes of the units that start in
/// it (those of `payload`'s units; the fill adds its own).
struct PendingBlock {
    /// The block's index in the output (0 for the first).
    index: u64,
    payload: Vec<u8>,
    fill: Option<(usize, Fill)>,
    notes: Vec<UnitNote>,
}

/// A job's result: its blocks deflated, in order, each with its notes (a
/// kept block's bytes are empty: it is on disk already); an error when a
/// fill broke its promise or a kept block is not made again.
type Deflated = std::result::Result<Vec<(Vec<u8>, Vec<UnitNote>)>, BgzfError>;

/// Buffers and compressors that jobs hand back for later jobs, taken and
/// returned on the pool rather than on the writing thread.
struct Recycled {
    level: CompressionLevel,
    /// Blocks on disk already, each checked against its payload made again.
    kept: Arc<KeptBlocks>,
    payloads: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    blocks: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    compressors: (Sender<Compressor>, Receiver<Compressor>),
}

impl Recycled {
    /// Deflates `pending` in order, each block into its own buffer.
    fn deflate(&self, pending: Vec<PendingBlock>) -> Deflated {
        let mut compressor = match self.level.is_uncompressed() {
            true => None,
            false => Some(
                self.compressors
                    .1
                    .try_recv()
                    .unwrap_or_else(|_| self.level.compressor()),
            ),
        };
        let mut out = Vec::with_capacity(pending.len());
        for PendingBlock {
            index,
            mut payload,
            fill,
            mut notes,
        } in pending
        {
            if let Some((len, fill)) = fill {
                fill(&mut payload, &mut notes);
                if payload.len() != len {
                    return Err(BgzfError::WriterLost { block_index: index });
                }
            }
            if index < self.kept.len() {
                self.kept.check(index, &payload)?;
                out.push((Vec::new(), notes));
                payload.clear();
                let _ = self.payloads.0.send(payload);
                continue;
            }
            let mut block = self
                .blocks
                .1
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(MAX_BLOCK_SIZE));
            encode_block(&payload, compressor.as_mut(), &mut block);
            out.push((block, notes));
            payload.clear();
            // Recycling fails only once the writer itself has been dropped.
            let _ = self.payloads.0.send(payload);
        }
        if let Some(c) = compressor {
            let _ = self.compressors.0.send(c);
        }
        Ok(out)
    }
}

/// What the writer thread hands back once the caller finishes.
struct Written<W> {
    inner: W,
    block_offsets: Vec<u64>,
    compressed_bytes: u64,
}

/// Compresses blocks on a thread pool and writes them in order.
pub struct ParallelWriter<W> {
    sink: Option<OrderedSink<Deflated, Result<Written<W>>>>,
    recycled: Arc<Recycled>,
    /// Blocks queued but not yet handed to a job (fewer than [`JOB_BLOCKS`]).
    pending: Vec<PendingBlock>,
    blocks: u64,
    uncompressed: u64,
    failed: Option<BgzfError>,
}

impl<W: Write + Send + 'static> ParallelWriter<W> {
    /// Writes BGZF to `inner`, deflating on `pool` at `level`. If the
    /// writer thread cannot be started, the first `write_block` or `finish`
    /// returns that error.
    pub fn new(inner: W, pool: Arc<ThreadPool>, level: CompressionLevel) -> Self {
        Self::with_notes(inner, pool, level, Box::new(|_, _| {}))
    }

    /// [`ParallelWriter::new`], handing the notes of each block (see
    /// [`BlockWriter::noting`]) to `notes` as the block is written.
    pub fn with_notes(
        inner: W,
        pool: Arc<ThreadPool>,
        level: CompressionLevel,
        notes: NotesSink,
    ) -> Self {
        Self::resuming(inner, pool, level, notes, Resuming::default())
    }

    /// [`ParallelWriter::with_notes`] for an output whose first blocks
    /// are `resuming.kept`: `inner` is positioned at their end. The blocks
    /// are queued from the first as always, and each kept one is made
    /// again (its units copied and noted) and checked against the one on
    /// disk but neither deflated nor written; its compressed offset is the
    /// kept one. With a checkpoint, it is called after each job's blocks
    /// once at least its step of bytes more is written, `inner` flushed.
    pub fn resuming(
        inner: W,
        pool: Arc<ThreadPool>,
        level: CompressionLevel,
        mut notes: NotesSink,
        resuming: Resuming,
    ) -> Self {
        let depth = QUEUE_JOBS_PER_THREAD * pool.current_num_threads().max(1);
        let blocks = unbounded();
        let recycle = blocks.0.clone();
        let kept = Arc::new(resuming.kept);
        let on_disk = Arc::clone(&kept);
        let mut checkpoint = resuming.checkpoint;
        let started = OrderedSink::spawn(pool, DEFLATE_STAGE, depth, move |next| {
            write_blocks(inner, next, &recycle, &mut notes, &on_disk, &mut checkpoint)
        });
        let (sink, failed) = match started {
            Ok(sink) => (Some(sink), None),
            Err(e) => (None, Some(BgzfError::io(0, e))),
        };
        ParallelWriter {
            sink,
            recycled: Arc::new(Recycled {
                level,
                kept,
                payloads: unbounded(),
                blocks,
                compressors: unbounded(),
            }),
            pending: Vec::with_capacity(JOB_BLOCKS),
            blocks: 0,
            uncompressed: 0,
            failed,
        }
    }

    /// An empty payload buffer with capacity [`MAX_PAYLOAD`], recycled from
    /// earlier blocks when possible.
    pub fn buffer(&self) -> Vec<u8> {
        match self.recycled.payloads.1.try_recv() {
            Ok(buf) => buf,
            Err(_) => Vec::with_capacity(MAX_PAYLOAD),
        }
    }

    /// Queues `payload` (1..=[`MAX_PAYLOAD`] bytes) as the next block and
    /// returns its block index (0-based). Blocks while the queue is full.
    pub fn write_block(&mut self, payload: Vec<u8>) -> Result<u64> {
        self.queue_block(payload, None, Vec::new())
    }

    /// Queues the next block: `payload`'s bytes followed by what `fill`
    /// appends to them, `len` bytes in all, assembled by the block's deflate
    /// job on the pool. `fill` must append exactly `len - payload.len()`
    /// bytes (checked: a short or long fill loses the block, an error).
    fn queue_block(
        &mut self,
        payload: Vec<u8>,
        fill: Option<(usize, Fill)>,
        notes: Vec<UnitNote>,
    ) -> Result<u64> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let index = self.blocks;
        let len = fill.as_ref().map_or(payload.len(), |(len, _)| *len);
        if len == 0 || len > MAX_PAYLOAD {
            let err = BgzfError::PayloadSize {
                block_index: index,
                len,
                max: MAX_PAYLOAD,
            };
            return Err(self.fail(err));
        }
        self.pending.push(PendingBlock {
            index,
            payload,
            fill,
            notes,
        });
        self.blocks += 1;
        self.uncompressed += len as u64;
        if self.pending.len() == JOB_BLOCKS {
            self.dispatch()?;
        }
        Ok(index)
    }

    /// Hands the pending blocks to one deflate job.
    fn dispatch(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let blocks = std::mem::replace(&mut self.pending, Vec::with_capacity(JOB_BLOCKS));
        let recycled = Arc::clone(&self.recycled);
        let pushed = self
            .sink
            .as_mut()
            .is_some_and(|sink| sink.push(move || recycled.deflate(blocks)));
        if !pushed {
            return Err(self.fail_from_thread());
        }
        Ok(())
    }

    /// Waits for every queued block, writes the EOF block and flushes.
    pub fn finish(self) -> Result<WriterSummary<W>> {
        self.finish_with(true)
    }

    /// [`ParallelWriter::finish`], or without the EOF block when `eof` is
    /// false (the output is then a part of a larger BGZF file, and the last
    /// entry of `block_offsets` is the offset just past the last block).
    fn finish_with(mut self, eof: bool) -> Result<WriterSummary<W>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.dispatch()?;
        let written = match self.wait_for_thread() {
            Ok(written) => written,
            Err(e) => return Err(self.fail(e)),
        };
        let Written {
            mut inner,
            mut block_offsets,
            compressed_bytes: mut offset,
        } = written;
        block_offsets.push(offset);
        if eof {
            inner
                .write_all(&EOF_BLOCK)
                .map_err(|e| BgzfError::io(offset, e))?;
            offset += EOF_BLOCK.len() as u64;
        }
        inner.flush().map_err(|e| BgzfError::io(offset, e))?;
        Ok(WriterSummary {
            inner,
            block_offsets,
            compressed_bytes: offset,
            uncompressed_bytes: self.uncompressed,
        })
    }

    /// Blocks queued so far.
    pub fn blocks_written(&self) -> u64 {
        self.blocks
    }

    /// The writer thread's result, waited for without starving the pool.
    fn wait_for_thread(&mut self) -> Result<Written<W>> {
        match self.sink.take().map(|mut sink| sink.finish()) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Err(BgzfError::WriterLost {
                block_index: self.blocks,
            }),
        }
    }

    /// The error that made the writer thread close the queue.
    fn fail_from_thread(&mut self) -> BgzfError {
        let err = match self.wait_for_thread() {
            Err(e) => e,
            Ok(_) => BgzfError::WriterLost {
                block_index: self.blocks,
            },
        };
        self.fail(err)
    }

    fn fail(&mut self, err: BgzfError) -> BgzfError {
        self.failed = Some(err.clone());
        err
    }
}

/// The writer thread: writes each job's blocks in order until the caller
/// finishes (`next` gives `None`). Returns early on the first error. The
/// EOF block is written by `finish` after it, so an output whose writer is
/// dropped without `finish` reads as truncated rather than as complete.
fn write_blocks<W: Write>(
    mut inner: W,
    next: &mut dyn FnMut() -> Option<std::result::Result<Deflated, Lost>>,
    recycle: &Sender<Vec<u8>>,
    notes: &mut NotesSink,
    kept: &KeptBlocks,
    checkpoint: &mut Option<(u64, Checkpoint)>,
) -> Result<Written<W>> {
    // Writing goes on after the kept blocks.
    let mut offset = kept.end();
    let mut checked = offset;
    let mut block_offsets = Vec::new();
    while let Some(result) = next() {
        let blocks = match result {
            Ok(Ok(blocks)) => blocks,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(BgzfError::WriterLost {
                    block_index: block_offsets.len() as u64,
                })
            }
        };
        for (block, noted) in blocks {
            let index = block_offsets.len() as u64;
            let at = match kept.get(index) {
                Some(k) => k.offset,
                None => {
                    inner
                        .write_all(&block)
                        .map_err(|e| BgzfError::io(offset, e))?;
                    let at = offset;
                    offset += block.len() as u64;
                    at
                }
            };
            if !noted.is_empty() {
                notes(index, &noted);
            }
            block_offsets.push(at);
            let _ = recycle.send(block);
        }
        if let Some((step, tell)) = checkpoint {
            if offset >= checked + *step {
                inner.flush().map_err(|e| BgzfError::io(offset, e))?;
                tell(block_offsets.len() as u64, offset);
                checked = offset;
            }
        }
    }
    Ok(Written {
        inner,
        block_offsets,
        compressed_bytes: offset,
    })
}

/// The one BGZF block packer, over a [`ParallelWriter`] it owns. It fills
/// payloads as htslib's `bgzf_write` does: a block is sent as soon as it
/// holds [`MAX_PAYLOAD`] bytes, and bytes longer than what is left span
/// blocks. [`BlockWriter::write_unit`] first starts a new block when the
/// unit does not fit in what is left of a non-empty one (htslib's
/// `bgzf_flush_try`, as `bam_write1` uses for each record), and
/// [`BlockWriter::end_block`] sends a partial block (as after the BAM
/// header). Bytes are copied once: by `write_bytes` and `write_unit`
/// straight into the payload buffer that the deflate job takes, and for
/// [`BlockWriter::write_units`] by the deflate job itself, so that the
/// caller's thread only does the blocking arithmetic.
///
/// The pending block is `buf`'s bytes followed by `pieces` (units not yet
/// copied); `len` is its whole length.
pub struct BlockWriter<W> {
    writer: ParallelWriter<W>,
    buf: Vec<u8>,
    pieces: Vec<Piece>,
    len: usize,
    /// Whether units are noted ([`BlockWriter::noting`]), and how.
    noting: Option<NoteFn>,
    /// The notes of the units that start in `buf`.
    notes: Vec<UnitNote>,
}

impl<W: Write + Send + 'static> BlockWriter<W> {
    /// Packs into `writer`, starting a new block.
    pub fn new(writer: ParallelWriter<W>) -> Self {
        let buf = writer.buffer();
        BlockWriter {
            writer,
            buf,
            pieces: Vec::new(),
            len: 0,
            noting: None,
            notes: Vec::new(),
        }
    }

    /// Notes every unit written from now on ([`BlockWriter::write_unit`],
    /// [`BlockWriter::write_units`]) with `note`, for the writer's
    /// [`NotesSink`] ([`ParallelWriter::with_notes`]). The units of
    /// `write_units` are noted by the deflate jobs that copy them. Units of
    /// no bytes (never a BAM record) are not noted.
    pub fn noting(&mut self, note: NoteFn) {
        self.noting = Some(note);
    }

    /// Where the next byte goes, as a logical virtual offset
    /// `block_index << 16 | offset_in_block` (block 0 is the first block
    /// this writer sent); compressed offsets come from the summary's
    /// `block_offsets`.
    pub fn virtual_offset(&self) -> u64 {
        (self.writer.blocks_written() << 16) | self.len as u64
    }

    /// Copies the pending block's pieces into `buf`, so that bytes can be
    /// appended after them here (a caller that mixes the two kinds of
    /// writes pays one copy on its thread at each switch).
    fn materialise(&mut self) {
        for piece in self.pieces.drain(..) {
            piece.append_to(&mut self.buf, self.noting, &mut self.notes);
        }
        debug_assert_eq!(self.buf.len(), self.len);
    }

    /// Appends `data`, spanning blocks when it does not fit.
    pub fn write_bytes(&mut self, mut data: &[u8]) -> Result<()> {
        if !self.pieces.is_empty() {
            self.materialise();
        }
        while !data.is_empty() {
            let n = data.len().min(MAX_PAYLOAD - self.buf.len());
            self.buf.extend_from_slice(&data[..n]);
            self.len = self.buf.len();
            data = &data[n..];
            if self.buf.len() == MAX_PAYLOAD {
                self.end_block()?;
            }
        }
        Ok(())
    }

    /// Appends `unit`, in a new block if it does not fit in what is left of
    /// the current one (a unit longer than a block still spans blocks).
    /// Returns the unit's start as a logical virtual offset.
    pub fn write_unit(&mut self, unit: &[u8]) -> Result<u64> {
        if self.len != 0 && self.len + unit.len() > MAX_PAYLOAD {
            self.end_block()?;
        }
        let start = self.virtual_offset();
        if let (Some(note), false) = (self.noting, unit.is_empty()) {
            if !self.pieces.is_empty() {
                self.materialise();
            }
            self.notes
                .push(UnitNote::new(note(unit), self.len, unit.len()));
        }
        self.write_bytes(unit)?;
        Ok(start)
    }

    /// [`BlockWriter::write_unit`] for every unit of `units` in turn, with
    /// the same blocks (and notes), but without copying: each block's
    /// deflate job copies its own payload from `units`, which it holds
    /// until then, and notes its units there. Each block's units are found
    /// by [`Units::fitting`], so this thread reads no unit's bytes.
    pub fn write_units(&mut self, units: Arc<dyn Units>) -> Result<()> {
        let n = units.count();
        let mut i = 0;
        while i < n {
            // Whole units while they fit: one piece per block.
            let from = i;
            let (k, bytes) = units.fitting(from, MAX_PAYLOAD - self.len);
            if k > 0 {
                self.pieces.push(Piece {
                    units: Arc::clone(&units),
                    from,
                    to: from + k,
                    part: None,
                });
                self.len += bytes;
                i += k;
                if self.len == MAX_PAYLOAD {
                    self.end_block()?;
                }
                continue;
            }
            // Unit `i` does not fit in what is left.
            if self.len != 0 {
                self.end_block()?;
                continue;
            }
            // An empty block and a unit longer than a block: it spans.
            let len = units.unit_len(i);
            let mut done = 0;
            while done < len {
                let take = (len - done).min(MAX_PAYLOAD - self.len);
                self.pieces.push(Piece {
                    units: Arc::clone(&units),
                    from: i,
                    to: i + 1,
                    part: Some(done..done + take),
                });
                self.len += take;
                done += take;
                if self.len == MAX_PAYLOAD {
                    self.end_block()?;
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// Sends the current block if it holds anything, so that what follows
    /// starts a new block.
    pub fn end_block(&mut self) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let head = std::mem::replace(&mut self.buf, self.writer.buffer());
        let len = std::mem::take(&mut self.len);
        let notes = std::mem::take(&mut self.notes);
        if self.pieces.is_empty() {
            self.writer.queue_block(head, None, notes)?;
        } else {
            let pieces = std::mem::take(&mut self.pieces);
            let noting = self.noting;
            let fill: Fill = Box::new(move |payload: &mut Vec<u8>, notes: &mut Vec<UnitNote>| {
                for piece in &pieces {
                    piece.append_to(payload, noting, notes);
                }
            });
            self.writer.queue_block(head, Some((len, fill)), notes)?;
        }
        Ok(())
    }

    /// Sends the last partial block, then finishes the writer, with the EOF
    /// block when `eof` is true.
    pub fn finish(mut self, eof: bool) -> Result<WriterSummary<W>> {
        self.end_block()?;
        self.writer.finish_with(eof)
    }
}

impl<W: Write + Send + 'static> Write for BlockWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_bytes(data)?;
        Ok(data.len())
    }

    /// Ends the current block (see [`BlockWriter::end_block`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(self.end_block()?)
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
