//! Ordered parallel BGZF decompression.
//!
//! A dedicated thread reads raw blocks from the input. For each block it
//! makes a one-shot (bounded(1)) channel, queues the receiver in a bounded
//! FIFO *first*, and only then spawns the inflate job on the injected pool.
//! The consumer pops receivers in FIFO order, so blocks come out in file
//! order whatever order the jobs finish in, and the FIFO bound is the
//! backpressure. Errors travel through the same FIFO, so the blocks before a
//! corrupt one are still delivered first. Decoded buffers, raw buffers and
//! decompressors are recycled through channels: no steady-state allocation.

use std::io::{self, BufRead, Cursor, Read};
use std::sync::Arc;
use std::thread;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use libdeflater::Decompressor;
use rayon::ThreadPool;

use crate::block::{self, FIXED_HEADER_LEN};
use crate::error::{BgzfError, Result};
use crate::wait;

/// Blocks queued per pool thread: enough to keep every worker busy while
/// the consumer stalls briefly, small enough to bound memory at
/// 4 x threads x ~128 KiB (raw + decoded). noodles uses workers + 2; the
/// extra slack absorbs the consumer's own bursts.
const QUEUE_BLOCKS_PER_THREAD: usize = 4;

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

/// A decoded block.
struct Block {
    data: Vec<u8>,
    offset: u64,
    csize: usize,
}

/// One FIFO entry, in file order.
enum Slot {
    /// An inflate job's result, still to come.
    Pending {
        offset: u64,
        rx: Receiver<Result<Block>>,
    },
    /// The reader thread failed here (I/O, bad header, truncation, no EOF).
    Failed(BgzfError),
    /// Clean end of stream, after a valid EOF block.
    End,
}

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
    pool: Arc<ThreadPool>,
    slots: Receiver<Slot>,
    recycle: Sender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    current_offset: u64,
    current_csize: usize,
    consumed_before_current: u64,
    state: State,
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
        // At least two jobs' worth, so the FIFO never fills before a job of
        // JOB_BLOCKS queued slots has been dispatched.
        let capacity =
            (QUEUE_BLOCKS_PER_THREAD * pool.current_num_threads().max(1)).max(2 * JOB_BLOCKS);
        let (slot_tx, slots) = bounded(capacity);
        let (recycle, recycled) = unbounded();
        let (raw_back, raw_recycled) = unbounded();
        let (decompressor_back, decompressors) = unbounded();
        let producer = Producer {
            input: Cursor::new(prefix).chain(inner),
            pool: Arc::clone(&pool),
            slots: slot_tx,
            recycled,
            raw_back,
            raw_recycled,
            decompressor_back,
            decompressors,
            offset: start,
            job: Vec::with_capacity(JOB_BLOCKS),
        };
        thread::Builder::new()
            .name("bgzf-reader".into())
            .spawn(move || producer.run())
            .map_err(|e| BgzfError::io(start, e))?;
        Ok(ParallelReader {
            pool,
            slots,
            recycle,
            current: Vec::new(),
            pos: 0,
            current_offset: start,
            current_csize: 0,
            consumed_before_current: 0,
            state: State::Running,
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

    /// Replaces the used-up current block by the next non-empty one (or
    /// marks the end of the stream).
    fn advance(&mut self) -> Result<()> {
        loop {
            let next_offset = self.current_offset + self.current_csize as u64;
            let slot = wait::recv(&self.pool, &self.slots).map_err(|_| BgzfError::WorkerLost {
                what: "reader thread",
                offset: next_offset,
            })?;
            let (offset, rx) = match slot {
                Slot::Pending { offset, rx } => (offset, rx),
                Slot::Failed(e) => return Err(e),
                Slot::End => {
                    self.state = State::Done;
                    return Ok(());
                }
            };
            let block = wait::recv(&self.pool, &rx).map_err(|_| BgzfError::WorkerLost {
                what: "inflate job",
                offset,
            })??;
            self.consumed_before_current += self.current.len() as u64;
            let used = std::mem::replace(&mut self.current, block.data);
            if used.capacity() > 0 {
                // The reader thread may be gone at the end; then the buffer
                // is simply freed.
                let _ = self.recycle.send(used);
            }
            self.pos = 0;
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

/// The reader thread's state.
struct Producer<R> {
    input: R,
    pool: Arc<ThreadPool>,
    slots: Sender<Slot>,
    recycled: Receiver<Vec<u8>>,
    raw_back: Sender<Vec<u8>>,
    raw_recycled: Receiver<Vec<u8>>,
    decompressor_back: Sender<Decompressor>,
    decompressors: Receiver<Decompressor>,
    /// Compressed offset of the next block.
    offset: u64,
    /// Blocks whose slots are queued, waiting to be inflated by one job.
    job: Vec<(Vec<u8>, u64, Sender<Result<Block>>)>,
}

/// Blocks inflated per pool job. One job per 64 KiB block left the workers
/// spinning between tiny jobs (rayon's idle yield loop was about 8% of the
/// samples in perf on the benchmark BAM); four blocks per job amortise that
/// while keeping the consumer's wait for its next block short.
const JOB_BLOCKS: usize = 4;

impl<R: Read> Producer<R> {
    /// Reads and dispatches blocks until the end of the input, an error, or
    /// the consumer going away (a closed FIFO).
    fn run(mut self) {
        let mut last_isize = None;
        loop {
            let raw = match self.read_block() {
                Ok(Some(raw)) => raw,
                Ok(None) => break,
                Err(e) => {
                    self.spawn_job();
                    let _ = self.slots.send(Slot::Failed(e));
                    return;
                }
            };
            last_isize = Some(block::le_u32(&raw, raw.len() - 4));
            if !self.dispatch(raw) {
                return;
            }
        }
        self.spawn_job();
        let end = if last_isize == Some(0) {
            Slot::End
        } else {
            Slot::Failed(BgzfError::MissingEof {
                offset: self.offset,
            })
        };
        let _ = self.slots.send(end);
    }

    /// Queues the block's result slot, then adds it to the next inflate job.
    /// False if the consumer has gone.
    fn dispatch(&mut self, raw: Vec<u8>) -> bool {
        let offset = self.offset;
        let csize = raw.len();
        self.offset += csize as u64;
        let (tx, rx) = bounded(1);
        if self.slots.send(Slot::Pending { offset, rx }).is_err() {
            return false;
        }
        self.job.push((raw, offset, tx));
        if self.job.len() >= JOB_BLOCKS {
            self.spawn_job();
        }
        true
    }

    /// Spawns one pool job that inflates every block gathered so far, in
    /// order, delivering each result to its own slot.
    fn spawn_job(&mut self) {
        if self.job.is_empty() {
            return;
        }
        let blocks = std::mem::take(&mut self.job);
        let mut bufs: Vec<Vec<u8>> = blocks
            .iter()
            .map(|_| self.recycled.try_recv().unwrap_or_default())
            .collect();
        let mut d = self.decompressors.try_recv().unwrap_or_default();
        let raw_back = self.raw_back.clone();
        let decompressor_back = self.decompressor_back.clone();
        self.pool.spawn(move || {
            for ((raw, offset, tx), mut data) in blocks.into_iter().zip(bufs.drain(..)) {
                let csize = raw.len();
                let result =
                    block::inflate_block(&raw, offset, &mut data, &mut d).map(|()| Block {
                        data,
                        offset,
                        csize,
                    });
                // Recycling fails only once the reader thread has gone.
                let _ = raw_back.send(raw);
                let _ = tx.send(result);
            }
            let _ = decompressor_back.send(d);
        });
    }

    /// Reads one raw block (header, then the rest of BSIZE + 1 bytes).
    /// `None` at a clean end of input (between blocks).
    fn read_block(&mut self) -> Result<Option<Vec<u8>>> {
        let offset = self.offset;
        let mut raw = self.raw_recycled.try_recv().unwrap_or_default();
        raw.clear();
        raw.resize(FIXED_HEADER_LEN, 0);
        let got = self.read_full(&mut raw, 0)?;
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
        let xlen = block::fixed_header(&raw, offset)?;
        let header_len = FIXED_HEADER_LEN + xlen;
        raw.resize(header_len, 0);
        self.read_exactly(&mut raw, FIXED_HEADER_LEN)?;
        let header = block::parse_header(&raw, offset)?;
        raw.resize(header.bsize, 0);
        self.read_exactly(&mut raw, header_len)?;
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
