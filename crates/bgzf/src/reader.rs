//! Ordered parallel BGZF decompression.
//!
//! A dedicated thread reads raw blocks from the input and gathers them into
//! inflate jobs of [`JOB_BLOCKS`] blocks. Each job goes through the one
//! ordered-slot primitive ([`alnsort_pipeline::Ordered`]): its result slot
//! enters a bounded FIFO before the job is dispatched on the injected pool,
//! and the consumer takes slots in FIFO order, so blocks come out in file
//! order whatever order the jobs finish in, and the FIFO bound is the
//! backpressure. A job that panics is an error naming the block it was
//! about, never an abort or a hang. Errors of the reader thread travel
//! through the same FIFO, so the blocks before a corrupt one are still
//! delivered first. Decoded buffers, raw buffers and decompressors are
//! recycled through channels: no steady-state allocation.
//!
//! A stream whose last block is whole but is not the empty EOF block (SAM
//! spec §4.1.2; older htsjdk wrote such files) ends cleanly, as htslib reads
//! it; [`ParallelReader::missing_eof_block`] then says where the EOF block
//! was expected, for the caller's warning (samtools warns "EOF marker is
//! absent"). A block cut short is still an error.

use std::io::{self, BufRead, Cursor, Read};
use std::sync::{Arc, OnceLock};

use alnsort_pipeline::{Lost, Ordered};
use crossbeam_channel::{unbounded, Receiver, Sender};
use libdeflater::Decompressor;
use rayon::ThreadPool;

use crate::block::{self, FIXED_HEADER_LEN};
use crate::error::{BgzfError, Result};

/// Blocks queued per pool thread: enough to keep every worker busy while
/// the consumer stalls briefly, small enough to bound memory at
/// 4 x threads x ~128 KiB (raw + decoded). noodles uses workers + 2; the
/// extra slack absorbs the consumer's own bursts.
const QUEUE_BLOCKS_PER_THREAD: usize = 4;

/// How far a [`ParallelReader`] inflates ahead of its consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadAhead {
    /// A stream read through: [`QUEUE_BLOCKS_PER_THREAD`] blocks per pool
    /// thread in jobs of [`JOB_BLOCKS`] (the default).
    #[default]
    Stream,
    /// A few records or a header read at one place (a split's sample
    /// stretches, a guessed record start, a header): one block per job, one
    /// job queued. A streaming reader opened there inflates a dozen blocks
    /// (some 800 KiB) to hand over the first one; a split's sample, eight
    /// stretches and seven guessed starts, then inflated about a third of
    /// the split.
    Peek,
}

/// The stage name of the inflate jobs, in errors.
const INFLATE_STAGE: &str = "BGZF inflate";

/// Where the consumer is in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Compressed offset of the block holding the next unread byte (at the
    /// end of a block this is already the next block, as in htslib).
    pub block_offset: u64,
    /// Offset of the next unread byte within that block's decoded data.
    pub in_block: usize,
    /// Uncompressed bytes consumed so far.
    pub uncompressed_total: u64,
}

impl Position {
    /// The BGZF virtual offset (SAM spec §4.1.1).
    pub fn virtual_offset(&self) -> u64 {
        (self.block_offset << 16) | self.in_block as u64
    }
}

/// Where a [`ParallelReader`]'s stream ended without its EOF block, once it
/// has: a handle kept by a caller that hands the reader on as a plain
/// [`Read`] (BGZF-compressed SAM text).
#[derive(Clone, Debug, Default)]
pub struct EofWatch(Arc<OnceLock<u64>>);

impl EofWatch {
    /// The compressed offset at which the stream ended without the EOF
    /// block; `None` before the end and when the EOF block was there.
    pub fn missing_eof_block(&self) -> Option<u64> {
        self.0.get().copied()
    }
}

/// The empty blocks of a [`ParallelReader`]'s stream, as the reader thread
/// meets them, and where the stream ended: a handle kept by a caller that
/// needs htslib's offsets at block boundaries. htslib's `bgzf_tell` at the
/// end of a block is the offset of the block that follows it in the file,
/// empty or not (an EOF block, or an empty block that a concatenation left
/// in the middle), while a reader that skips empty blocks, as this one
/// does, sees the next block with data; [`EmptyBlocks::run_start`] turns
/// the one into the other.
#[derive(Clone, Debug, Default)]
pub struct EmptyBlocks(Arc<EmptyBlocksInner>);

#[derive(Debug, Default)]
struct EmptyBlocksInner {
    /// Runs of consecutive empty blocks, `(start, end)` compressed offsets,
    /// ascending. Rare (an EOF block, a concatenation's), so a lock per run.
    runs: std::sync::Mutex<Vec<(u64, u64)>>,
    /// Where the stream ended (the offset past its last block), once it has.
    end: OnceLock<u64>,
}

impl EmptyBlocks {
    /// Notes the empty block `start..end`.
    fn note(&self, start: u64, end: u64) {
        let mut runs = self.0.runs.lock().unwrap_or_else(|p| p.into_inner());
        match runs.last_mut() {
            Some(run) if run.1 == start => run.1 = end,
            _ => runs.push((start, end)),
        }
    }

    /// Where the run of empty blocks that ends at compressed offset
    /// `boundary` starts; `boundary` itself when no empty block ends there.
    /// Only the blocks the reader thread has read so far are known: ask
    /// about a boundary the consumer has already passed.
    pub fn run_start(&self, boundary: u64) -> u64 {
        let runs = self.0.runs.lock().unwrap_or_else(|p| p.into_inner());
        match runs.binary_search_by_key(&boundary, |r| r.1) {
            Ok(i) => runs[i].0,
            Err(_) => boundary,
        }
    }

    /// The compressed offset past the stream's last block, once the
    /// reader thread has reached the end cleanly; `None` before.
    pub fn stream_end(&self) -> Option<u64> {
        self.0.end.get().copied()
    }
}

/// A decoded block.
struct Block {
    data: Vec<u8>,
    offset: u64,
    csize: usize,
    /// Unit starts found by the caller's [`UnitScan`], if one was set.
    starts: Option<Vec<u32>>,
}

/// Finds where the caller's units (BAM records) start in a decoded block,
/// run by the inflate job right after it inflated the block, while its
/// bytes are still in that thread's cache: a consumer that hops from unit
/// to unit in blocks inflated by other threads waits for a cache miss at
/// every unit, and the job's list spares it those.
///
/// `scan(block, from, starts)` pushes the offsets in `block` of the units
/// that start in it, following their lengths from offset `from`, and
/// returns how many bytes past the block's end the last one reaches (where
/// the next block's units start), or `None` at a length that is not valid.
/// The job starts each of its first blocks at offset 0 (a guess: htslib
/// starts a block at a record whenever the record fits) and each later
/// block where the previous one's units reach. A consumer that knows a
/// true unit start among a block's `starts` knows every later one in the
/// block is true (the list follows the same lengths); a wrong guess only
/// gives a list the consumer never meets.
pub type UnitScan = fn(&[u8], usize, &mut Vec<u32>) -> Option<usize>;

/// One work item of the reader thread, in file order.
enum Item {
    /// Raw blocks and their compressed offsets, to inflate in one job.
    Blocks(Vec<(Vec<u8>, u64)>),
    /// The reader thread failed here (I/O, bad header, truncation).
    Failed(BgzfError),
    /// End of the input after a whole block: `None` when that block was the
    /// EOF block, else the compressed offset where it was expected.
    End(Option<u64>),
}

/// What the consumer gets for one [`Item`].
enum Decoded {
    /// The job's blocks in order; an inflate error ends the list.
    Blocks(Vec<Result<Block>>),
    Failed(BgzfError),
    End(Option<u64>),
}

/// Inflates one raw block into `out`: [`block::inflate_block`], or in tests
/// a stand-in that fails in ways the real one cannot.
type InflateFn = fn(&[u8], u64, &mut Vec<u8>, &mut Decompressor) -> Result<()>;

enum State {
    Running,
    Done,
    Failed(BgzfError),
}

/// Decompresses a BGZF stream on a thread pool, in order. Implements
/// [`Read`] and [`BufRead`] (`fill_buf` returns the rest of the current
/// decoded block).
///
/// Dropping the reader mid-stream stops the reader thread at its next queue
/// operation (immediately if it is waiting for queue space).
pub struct ParallelReader {
    jobs: Ordered<Decoded>,
    /// The blocks of the job being consumed that are not yet current.
    ready: std::vec::IntoIter<Result<Block>>,
    recycle: Sender<Vec<u8>>,
    current: Vec<u8>,
    /// The current block's unit starts ([`UnitScan`]), if scanned.
    current_starts: Option<Vec<u32>>,
    pos: usize,
    current_offset: u64,
    current_csize: usize,
    consumed_before_current: u64,
    state: State,
    /// Where the stream ended without its EOF block, once it has.
    missing_eof: EofWatch,
    /// The unit scan of the inflate jobs, once set.
    scan: Arc<OnceLock<UnitScan>>,
    /// Where unit start lists go back to the inflate jobs.
    starts_back: Sender<Vec<u32>>,
    /// The stream's empty blocks, as the reader thread meets them.
    empty: EmptyBlocks,
}

impl ParallelReader {
    /// Reads BGZF from `prefix` followed by `inner`, inflating on `pool`.
    /// `prefix` holds bytes the caller already consumed from `inner` to
    /// sniff the format (empty if none); offsets count from its start.
    ///
    /// Fails only if the reader thread cannot be started.
    pub fn new<R: Read + Send + 'static>(
        inner: R,
        pool: Arc<ThreadPool>,
        prefix: Vec<u8>,
    ) -> Result<Self> {
        Self::starting_at(inner, pool, prefix, 0)
    }

    /// Like [`ParallelReader::new`] for a stream that starts at compressed
    /// offset `start` of a file (the caller seeked there, to a block's
    /// first byte): positions and error offsets are the file's.
    pub fn starting_at<R: Read + Send + 'static>(
        inner: R,
        pool: Arc<ThreadPool>,
        prefix: Vec<u8>,
        start: u64,
    ) -> Result<Self> {
        Self::with_inflate(
            inner,
            pool,
            prefix,
            start,
            block::inflate_block,
            ReadAhead::Stream,
        )
    }

    /// [`ParallelReader::starting_at`] inflating only as far ahead as
    /// `ahead` says.
    pub fn starting_at_with<R: Read + Send + 'static>(
        inner: R,
        pool: Arc<ThreadPool>,
        prefix: Vec<u8>,
        start: u64,
        ahead: ReadAhead,
    ) -> Result<Self> {
        Self::with_inflate(inner, pool, prefix, start, block::inflate_block, ahead)
    }

    fn with_inflate<R: Read + Send + 'static>(
        inner: R,
        pool: Arc<ThreadPool>,
        prefix: Vec<u8>,
        start: u64,
        inflate: InflateFn,
        ahead: ReadAhead,
    ) -> Result<Self> {
        // Jobs in flight: the same number of blocks per thread as one job
        // per block would queue, and at least two jobs; a peek, one job of
        // one block.
        let (depth, job_blocks) = match ahead {
            ReadAhead::Stream => (
                (QUEUE_BLOCKS_PER_THREAD * pool.current_num_threads().max(1))
                    .div_ceil(JOB_BLOCKS)
                    .max(2),
                JOB_BLOCKS,
            ),
            ReadAhead::Peek => (1, 1),
        };
        let (recycle, recycled) = unbounded::<Vec<u8>>();
        let (raw_back, raw_recycled) = unbounded();
        let (decompressor_back, decompressors) = unbounded::<Decompressor>();
        let scan = Arc::new(OnceLock::<UnitScan>::new());
        let job_scan = Arc::clone(&scan);
        let (starts_back, starts_recycled) = unbounded::<Vec<u32>>();
        let empty = EmptyBlocks::default();
        let mut producer = Producer {
            input: Cursor::new(prefix).chain(inner),
            raw_recycled,
            offset: start,
            job: Vec::with_capacity(job_blocks),
            job_blocks,
            empty: empty.clone(),
        };
        let work = move |item: Item| match item {
            Item::Blocks(blocks) => {
                let mut d = decompressors.try_recv().unwrap_or_default();
                let mut out = Vec::with_capacity(blocks.len());
                let scan = job_scan.get().copied();
                // Where the next block's units start: guessed at the job's
                // first block, then carried from block to block.
                let mut from = Some(0);
                for (raw, offset) in blocks {
                    let mut data = recycled.try_recv().unwrap_or_default();
                    let csize = raw.len();
                    let result = inflate(&raw, offset, &mut data, &mut d);
                    // Recycling fails only once the reader thread has gone.
                    let _ = raw_back.send(raw);
                    let failed = result.is_err();
                    let starts = match (scan, failed) {
                        (Some(scan), false) => {
                            // A list freed on the consumer's thread would
                            // go back to this thread's malloc arena under
                            // its lock: lists are recycled instead.
                            let mut starts = starts_recycled.try_recv().unwrap_or_default();
                            starts.clear();
                            from = match from {
                                Some(f) if f < data.len() => scan(&data, f, &mut starts),
                                // A unit longer than the block: on past it.
                                Some(f) => Some(f - data.len()),
                                None => scan(&data, 0, &mut starts),
                            };
                            Some(starts)
                        }
                        _ => None,
                    };
                    out.push(result.map(|()| Block {
                        data,
                        offset,
                        csize,
                        starts,
                    }));
                    if failed {
                        break;
                    }
                }
                let _ = decompressor_back.send(d);
                Decoded::Blocks(out)
            }
            Item::Failed(e) => Decoded::Failed(e),
            Item::End(missing) => Decoded::End(missing),
        };
        let jobs = Ordered::spawn(
            pool,
            INFLATE_STAGE,
            depth,
            move |emit| producer.run(emit),
            work,
        )
        .map_err(|e| BgzfError::io(start, e))?;
        Ok(ParallelReader {
            jobs,
            ready: Vec::new().into_iter(),
            recycle,
            current: Vec::new(),
            current_starts: None,
            pos: 0,
            current_offset: start,
            current_csize: 0,
            consumed_before_current: 0,
            state: State::Running,
            missing_eof: EofWatch::default(),
            empty,
            scan,
            starts_back,
        })
    }

    /// Where the next unread byte is.
    pub fn position(&self) -> Position {
        let uncompressed_total = self.consumed_before_current + self.pos as u64;
        if self.pos < self.current.len() {
            Position {
                block_offset: self.current_offset,
                in_block: self.pos,
                uncompressed_total,
            }
        } else {
            Position {
                block_offset: self.current_offset + self.current_csize as u64,
                in_block: 0,
                uncompressed_total,
            }
        }
    }

    /// The compressed offset at which the stream ended without the 28-byte
    /// EOF block, once the end has been reached (`fill_block` returned an
    /// empty slice); `None` before that and when the EOF block was there.
    /// Every block before it was whole and read: only a caller that finds
    /// its last item (record, line) cut short knows the data is truncated.
    pub fn missing_eof_block(&self) -> Option<u64> {
        self.missing_eof.missing_eof_block()
    }

    /// A handle on the stream's empty blocks and its end
    /// ([`EmptyBlocks`]), which the reader thread fills in as it reads.
    pub fn empty_blocks(&self) -> EmptyBlocks {
        self.empty.clone()
    }

    /// A handle that answers [`ParallelReader::missing_eof_block`] after
    /// the reader has been moved away.
    pub fn eof_watch(&self) -> EofWatch {
        self.missing_eof.clone()
    }

    /// The rest of the current decoded block, decoding the next non-empty
    /// block if the current one is used up. Empty at the end of the stream.
    /// After an error, every call returns the same error.
    pub fn fill_block(&mut self) -> Result<&[u8]> {
        if self.pos >= self.current.len() {
            match &self.state {
                State::Running => {}
                State::Done => return Ok(&[]),
                State::Failed(e) => return Err(e.clone()),
            }
            if let Err(e) = self.advance() {
                self.state = State::Failed(e.clone());
                return Err(e);
            }
        }
        Ok(&self.current[self.pos..])
    }

    /// Takes the current decoded block whole, loading it first as
    /// [`ParallelReader::fill_block`] does; `None` at the end of the
    /// stream. The reader is left after the block (its position is the next
    /// block's start), and the caller gives the buffer back through
    /// [`ParallelReader::block_recycler`] once done with it, so that it is
    /// inflated into again instead of allocated anew. A caller that cuts
    /// records out of the blocks (BAM scanning) reads them in place this
    /// way rather than copying them through [`BufRead`].
    pub fn take_block(&mut self) -> Result<Option<TakenBlock>> {
        if self.fill_block()?.is_empty() {
            return Ok(None);
        }
        let data = std::mem::take(&mut self.current);
        let start = std::mem::take(&mut self.pos);
        let uncompressed = self.consumed_before_current;
        self.consumed_before_current += data.len() as u64;
        Ok(Some(TakenBlock {
            data,
            start,
            offset: self.current_offset,
            uncompressed,
            starts: self.current_starts.take(),
        }))
    }

    /// Sets the inflate jobs' unit scan: blocks inflated from then on carry
    /// the unit starts it finds ([`TakenBlock::starts`]). Set once; a
    /// second call changes nothing.
    pub fn scan_units_with(&self, scan: UnitScan) {
        let _ = self.scan.set(scan);
    }

    /// Where taken blocks' buffers go back to ([`ParallelReader::take_block`]).
    pub fn block_recycler(&self) -> BlockRecycler {
        BlockRecycler(self.recycle.clone(), self.starts_back.clone())
    }

    /// The next block in file order; `None` at the clean end of the stream.
    fn next_block(&mut self) -> Result<Option<Block>> {
        loop {
            if let Some(block) = self.ready.next() {
                return block.map(Some);
            }
            // The next block starts where the current one ends.
            let offset = self.current_offset + self.current_csize as u64;
            let lost = |source: Lost| BgzfError::WorkerLost {
                what: source.stage,
                offset,
            };
            match self.jobs.next_result() {
                Some(Ok(Decoded::Blocks(blocks))) => self.ready = blocks.into_iter(),
                Some(Ok(Decoded::Failed(e))) => return Err(e),
                Some(Ok(Decoded::End(missing))) => {
                    if let Some(offset) = missing {
                        // Set once: the end is reached once.
                        let _ = self.missing_eof.0.set(offset);
                    }
                    return Ok(None);
                }
                Some(Err(e)) => return Err(lost(e)),
                // The reader thread ended without saying why: it panicked.
                None => {
                    return Err(lost(Lost {
                        stage: "BGZF reader thread",
                    }))
                }
            }
        }
    }

    /// Replaces the used-up current block by the next non-empty one (or
    /// marks the end of the stream).
    fn advance(&mut self) -> Result<()> {
        loop {
            let Some(block) = self.next_block()? else {
                self.state = State::Done;
                return Ok(());
            };
            self.consumed_before_current += self.current.len() as u64;
            let used = std::mem::replace(&mut self.current, block.data);
            if used.capacity() > 0 {
                // The jobs may all be gone at the end; then the buffer is
                // simply freed.
                let _ = self.recycle.send(used);
            }
            self.pos = 0;
            self.current_starts = block.starts;
            self.current_offset = block.offset;
            self.current_csize = block.csize;
            if !self.current.is_empty() {
                return Ok(());
            }
        }
    }
}

impl Read for ParallelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for ParallelReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.fill_block().map_err(io::Error::from)
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.current.len());
    }
}

/// A decoded block taken from a [`ParallelReader`] with
/// [`ParallelReader::take_block`].
#[derive(Debug)]
pub struct TakenBlock {
    /// The block's decoded bytes, all of them.
    pub data: Vec<u8>,
    /// Where the bytes not yet read start in `data` (non-zero when the block
    /// was partly read through [`BufRead`] before it was taken).
    pub start: usize,
    /// The block's compressed offset.
    pub offset: u64,
    /// Uncompressed offset of `data[0]` in the stream.
    pub uncompressed: u64,
    /// The unit starts its inflate job found ([`UnitScan`]), ascending;
    /// `None` when no scan was set when it was inflated.
    pub starts: Option<Vec<u32>>,
}

/// Takes taken blocks' buffers back to their reader's inflate jobs
/// ([`ParallelReader::block_recycler`]).
#[derive(Clone, Debug)]
pub struct BlockRecycler(Sender<Vec<u8>>, Sender<Vec<u32>>);

impl BlockRecycler {
    /// Gives `data` (a [`TakenBlock`]'s, its length kept so that the next
    /// block inflated into it zeroes nothing) back; dropped if the reader
    /// has gone.
    pub fn give_back(&self, data: Vec<u8>) {
        if data.capacity() > 0 {
            let _ = self.0.send(data);
        }
    }

    /// Gives a [`TakenBlock`]'s unit starts back for the inflate jobs'
    /// next lists.
    pub fn give_back_starts(&self, starts: Vec<u32>) {
        let _ = self.1.send(starts);
    }
}

/// The reader thread's state.
struct Producer<R> {
    input: R,
    raw_recycled: Receiver<Vec<u8>>,
    /// Compressed offset of the next block.
    offset: u64,
    /// Blocks read, waiting to be inflated by one job.
    job: Vec<(Vec<u8>, u64)>,
    /// Blocks per job ([`JOB_BLOCKS`], or one for [`ReadAhead::Peek`]).
    job_blocks: usize,
    /// Where the empty blocks met are noted.
    empty: EmptyBlocks,
}

/// Blocks inflated per pool job. One job per 64 KiB block left the workers
/// spinning between tiny jobs (rayon's idle yield loop was about 8% of the
/// samples in perf on the benchmark BAM); four blocks per job amortise that
/// while keeping the consumer's wait for its next block short.
const JOB_BLOCKS: usize = 4;

impl<R: Read> Producer<R> {
    /// Reads blocks and emits them as jobs until the end of the input, an
    /// error, or the consumer going away (`emit` returns false).
    fn run(&mut self, emit: &mut dyn FnMut(Item) -> bool) {
        let mut last_isize = None;
        loop {
            let raw = match self.read_block() {
                Ok(Some(raw)) => raw,
                Ok(None) => break,
                Err(e) => {
                    if self.emit_job(emit) {
                        emit(Item::Failed(e));
                    }
                    return;
                }
            };
            last_isize = Some(block::le_u32(&raw, raw.len() - 4));
            let offset = self.offset;
            self.offset += raw.len() as u64;
            if last_isize == Some(0) {
                self.empty.note(offset, self.offset);
            }
            self.job.push((raw, offset));
            if self.job.len() >= self.job_blocks && !self.emit_job(emit) {
                return;
            }
        }
        let _ = self.empty.0.end.set(self.offset);
        if !self.emit_job(emit) {
            return;
        }
        emit(Item::End((last_isize != Some(0)).then_some(self.offset)));
    }

    /// Emits the blocks gathered so far as one job; false if the consumer
    /// has gone.
    fn emit_job(&mut self, emit: &mut dyn FnMut(Item) -> bool) -> bool {
        if self.job.is_empty() {
            return true;
        }
        emit(Item::Blocks(std::mem::replace(
            &mut self.job,
            Vec::with_capacity(self.job_blocks),
        )))
    }

    /// Reads one raw block (header, then the rest of BSIZE + 1 bytes).
    /// `None` at a clean end of input (between blocks).
    fn read_block(&mut self) -> Result<Option<Vec<u8>>> {
        let offset = self.offset;
        // A recycled buffer keeps its length and bytes: each read below
        // overwrites the stretch it needs, so only growth past the longest
        // block it held is zeroed (zeroing every block before the copy
        // into it was 1% of a sort's CPU).
        let mut raw = self.raw_recycled.try_recv().unwrap_or_default();
        let at_least = |raw: &mut Vec<u8>, n: usize| {
            if raw.len() < n {
                raw.resize(n, 0);
            }
        };
        at_least(&mut raw, FIXED_HEADER_LEN);
        let got = self.read_full(&mut raw[..FIXED_HEADER_LEN], 0)?;
        if got == 0 {
            return Ok(None);
        }
        if got < FIXED_HEADER_LEN {
            return Err(BgzfError::Truncated {
                offset,
                needed: FIXED_HEADER_LEN,
                available: got,
            });
        }
        let xlen = block::fixed_header(&raw[..FIXED_HEADER_LEN], offset)?;
        let header_len = FIXED_HEADER_LEN + xlen;
        at_least(&mut raw, header_len);
        self.read_exactly(&mut raw[..header_len], FIXED_HEADER_LEN)?;
        let header = block::parse_header(&raw[..header_len], offset)?;
        at_least(&mut raw, header.bsize);
        self.read_exactly(&mut raw[..header.bsize], header_len)?;
        raw.truncate(header.bsize);
        Ok(Some(raw))
    }

    /// Fills `buf[from..]`, reporting a short read as truncation.
    fn read_exactly(&mut self, buf: &mut [u8], from: usize) -> Result<()> {
        let got = from + self.read_full(buf, from)?;
        if got < buf.len() {
            return Err(BgzfError::Truncated {
                offset: self.offset,
                needed: buf.len(),
                available: got,
            });
        }
        Ok(())
    }

    /// Reads into `buf[from..]` until it is full or the input ends; returns
    /// the number of bytes read.
    fn read_full(&mut self, buf: &mut [u8], from: usize) -> Result<usize> {
        let mut filled = from;
        while filled < buf.len() {
            match self.input.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BgzfError::io(self.offset + filled as u64, e)),
            }
        }
        Ok(filled - from)
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
