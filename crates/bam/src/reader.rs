//! Batch reading of BAM and SAM records: batch-deferred parsing. One thread
//! only finds record boundaries (BAM: read the 4-byte `block_size` and hop;
//! SAM: cut the text after the last newline) and hands out [`RawBatch`]es, a
//! contiguous buffer of whole records with where each came from; the
//! per-record work (validation, htslib normalisation, SAM parsing, key
//! encoding) is done by [`Decoder::decode`], one call per batch, on any
//! thread.
//!
//! A BAM scan can start at a BGZF virtual offset and stop at a range end (a
//! virtual offset or a record count), so a file can be read in pieces: the
//! pieces of a split read, concatenated, are exactly the records of one full
//! read.
//!
//! Every error names the file, the record (1-based) and where it is: for
//! BAM the uncompressed byte offset and the compressed offset of its BGZF
//! block, for SAM the line. A scan started at a virtual offset counts
//! uncompressed bytes from there, and records from `ScanOptions::first_record`.

use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use alnsort_bgzf::reader::EofWatch;
use alnsort_bgzf::{BgzfError, BlockRecycler, ParallelReader, ReadAhead, TakenBlock};

use crate::header::{Header, RefLookup};
use crate::keys::{KeyEncoder, KeyError};
use crate::sam_parse::{self, SamError};
use crate::validate::{self, RecordError};
use crate::RecordRef;

/// Bytes of raw records (or SAM text) per batch: about 1,500 BAM records or
/// 800 SAM lines of 300 bytes (half a millisecond of decoding), large
/// enough to amortise a pool hand-off, small enough to keep every worker
/// busy and the memory in flight small.
pub const BATCH_BYTES: usize = 256 << 10;

/// Where a scan stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeEnd {
    /// At the end of the input.
    Eof,
    /// Before the first record whose virtual offset is at or past this one.
    VirtualOffset(u64),
    /// After this many records.
    Records(u64),
}

/// How a scan cuts and bounds its batches.
#[derive(Clone, Copy, Debug)]
pub struct ScanOptions {
    /// Target bytes per batch (a batch ends at the first record boundary at
    /// or past it).
    pub batch_bytes: usize,
    /// Largest record (with its `block_size`) or SAM line accepted; a
    /// longer one is refused before it is allocated, so a corrupt length
    /// cannot make the process outgrow its memory budget.
    pub record_limit: usize,
    /// Where to stop.
    pub end: RangeEnd,
    /// Records before the first one read (for record numbers in errors).
    pub first_record: u64,
    /// How far the BGZF reader inflates ahead ([`ReadAhead::Peek`] for a
    /// few records read at one place).
    pub read_ahead: ReadAhead,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            batch_bytes: BATCH_BYTES,
            record_limit: usize::MAX,
            end: RangeEnd::Eof,
            first_record: 0,
            read_ahead: ReadAhead::Stream,
        }
    }
}

/// The file buffer under a BAM reader: a streaming read takes 1 MiB a
/// system call; a peek takes a block's worth (most peeks need a block or
/// two, and a 1 MiB buffer filled for them was a sample's largest kernel
/// cost after the inflation).
pub(crate) fn read_buffer(ahead: ReadAhead) -> usize {
    match ahead {
        ReadAhead::Stream => 1 << 20,
        ReadAhead::Peek => alnsort_bgzf::MAX_BLOCK_SIZE,
    }
}

/// Whole records (BAM) or lines (SAM), and where they came from.
///
/// A [`BamScanner`] leaves the records where the inflate jobs decoded them:
/// the batch holds those blocks and lists its stretches of whole records in
/// order (its pieces); only a record that spans blocks is copied, into the
/// batch's own buffer. Every other batch (SAM, CRAM, one built by hand) has
/// no pieces, and its buffer holds all its records (or text). The buffer,
/// the blocks and the pieces are private, so that no reader can take one
/// form for the other: BAM records are read with [`RawBatch::records`]
/// (either form), their size with [`RawBatch::bytes`]; a batch of framed
/// records is made with [`RawBatch::framed`], its buffer taken back for
/// reuse, emptied, with [`RawBatch::into_spare`]. A reader of the buffer
/// does not compile:
///
/// ```compile_fail,E0616
/// fn first_byte(b: &alnsort_bam::reader::RawBatch) -> Option<u8> {
///     b.data.first().copied()
/// }
/// ```
#[derive(Debug, Default)]
pub struct RawBatch {
    /// BAM: framed records (each with its `block_size`), back to back: all
    /// of them when `pieces` is empty, else those that span blocks. SAM:
    /// whole lines, each ended by a newline except perhaps the last of the
    /// input.
    data: Vec<u8>,
    /// BAM read in place: decoded BGZF blocks that `pieces` point into.
    blocks: Vec<Vec<u8>>,
    /// BAM read in place: the stretches of whole records, in input order.
    pieces: Vec<Piece>,
    /// Records of the input before this batch's first.
    pub first_record: u64,
    /// BAM: the virtual offset of each record's start. SAM: empty.
    pub voffsets: Vec<u64>,
    /// BAM: uncompressed offset of the first record. SAM: its line number
    /// (1-based).
    pub first_position: u64,
    /// Whether `data` is SAM text.
    sam: bool,
    /// Set on the batch that reaches the end of a BGZF input (BAM, or SAM
    /// with [`SamScanner::with_eof_watch`]) whose stream ended without its
    /// EOF block, to the compressed offset where that block was expected
    /// ([`Decoder::decode`] warns and counts it). Such a batch may hold no
    /// record.
    pub missing_eof: Option<u64>,
}

/// A stretch of whole BAM records of a [`RawBatch`]: bytes `start..end` of
/// block `block`, or of the batch's `data` when `block` is `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub block: Option<usize>,
    pub start: usize,
    pub end: usize,
    /// Uncompressed offset of the stretch's first byte in the input.
    pub uncompressed: u64,
}

impl RawBatch {
    /// A batch of the BAM records `framed` holds (each with its
    /// `block_size`, back to back), such as a CRAM container decoded: its
    /// voffsets and first record are the caller's to set.
    pub fn framed(framed: Vec<u8>) -> RawBatch {
        RawBatch {
            data: framed,
            ..RawBatch::default()
        }
    }

    /// The batch's own buffer, emptied (its capacity kept), for the next
    /// [`RawBatch::framed`].
    pub fn into_spare(self) -> Vec<u8> {
        let mut data = self.data;
        data.clear();
        data
    }

    /// Whether the batch is SAM text (else BAM records).
    pub fn is_sam(&self) -> bool {
        self.sam
    }

    /// Compressed offset of the block the last record starts in (0 if
    /// unknown), for progress displays.
    pub fn last_block_offset(&self) -> u64 {
        self.voffsets.last().map_or(0, |v| v >> 16)
    }

    /// Bytes of the batch's records (BAM) or text (SAM).
    pub fn bytes(&self) -> usize {
        if self.pieces.is_empty() {
            self.data.len()
        } else {
            self.pieces.iter().map(|p| p.end - p.start).sum()
        }
    }

    /// The BAM records, in order, each with its `block_size` and the
    /// uncompressed offset of its first byte. The walk ends at the first
    /// stretch whose lengths do not add up (a batch made by a scanner
    /// never has one: it checked every `block_size`). A SAM batch has no
    /// BAM records: asking for them is a bug.
    pub fn records(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        assert!(!self.sam, "RawBatch::records of a batch of SAM text");
        let whole = Piece {
            block: None,
            start: 0,
            end: self.data.len(),
            uncompressed: self.first_position,
        };
        let n = self.pieces.len().max(1);
        (0..n).flat_map(move |i| {
            let p = self.pieces.get(i).copied().unwrap_or(whole);
            let bytes = match p.block {
                Some(b) => &self.blocks[b][p.start..p.end],
                None => &self.data[p.start..p.end],
            };
            stretch_records(bytes, p.uncompressed)
        })
    }
}

/// The framed records of `bytes` (records back to back), each with its
/// uncompressed offset (`uncompressed` is that of `bytes[0]`).
fn stretch_records(bytes: &[u8], uncompressed: u64) -> impl Iterator<Item = (&[u8], u64)> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let size = bytes.get(at..at + 4)?;
        let len = 4 + u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
        let rec = bytes.get(at..at + len)?;
        let out = (rec, uncompressed + at as u64);
        at += len;
        Some(out)
    })
}

/// What is wrong with one record (the context is in [`ReadError`]).
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Sam(#[from] SamError),
    #[error("truncated: the input ends inside the record's block_size field")]
    TruncatedSize,
    #[error("truncated: block_size says {len} bytes but the input ends after {got}")]
    Truncated { len: usize, got: usize },
    #[error("block_size says {} bytes; the record (with its sort key) is {} bytes, more than the {limit} bytes one record may take \
             with this memory budget (half the sort budget); raise --max-memory or -m", .len - 4, .len)]
    BlockTooLarge { len: usize, limit: usize },
    #[error("the record (with its sort key) is {len} bytes, more than the {limit} bytes one record may take \
             with this memory budget (half the sort budget); raise --max-memory or -m")]
    TooLarge { len: usize, limit: usize },
    #[error("the line is longer than {limit} bytes, more than the {limit} bytes one record may take with this \
             memory budget (half the sort budget); raise --max-memory or -m")]
    LineTooLong { limit: usize },
    /// htslib's `sam_read1` takes an empty line (in the middle of the
    /// records or at their end) as a parse error, and samtools stops.
    #[error("an empty line (samtools refuses it: a SAM line is a header line or a record)")]
    EmptyLine,
    #[error("the sink refused the record: {0}")]
    Refused(#[source] SinkError),
    /// SAM input names a reference the header lacks (with
    /// [`UnknownReference::Error`]).
    #[error(
        "{field} '{name}' is not in the header's @SQ lines; add it to the header, \
         or use --unknown-reference=unmapped to keep samtools' behaviour"
    )]
    UnknownReference { field: &'static str, name: String },
}

/// Why a [`Decoder::decode`] sink refused a record: the caller's own
/// error, kept whole as the source of [`Problem::Refused`] (a plain text
/// becomes one with `.into()`).
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// A failure to read the input, with the file and the place.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A bad BAM record.
    #[error("{file}: record {record} at uncompressed byte offset {offset} (BGZF block at compressed offset {block})")]
    Record {
        file: Arc<str>,
        record: u64,
        offset: u64,
        block: u64,
        #[source]
        problem: Problem,
    },
    /// The BGZF layer failed (truncation, CRC, missing EOF block) while a
    /// record was read.
    #[error("{file}: reading record {record} (uncompressed byte offset {offset})")]
    Bgzf {
        file: Arc<str>,
        record: u64,
        offset: u64,
        #[source]
        source: BgzfError,
    },
    /// A bad SAM line.
    #[error("{file}: line {line} (record {record})")]
    Line {
        file: Arc<str>,
        line: u64,
        record: u64,
        #[source]
        problem: Problem,
    },
    /// Reading SAM text failed.
    #[error("{file}: line {line}: read error")]
    Io {
        file: Arc<str>,
        line: u64,
        #[source]
        source: io::Error,
    },
    /// Seeking to the start of a range failed, or it is not a record start.
    #[error("{file}: cannot start reading at virtual offset {voffset:#x}")]
    Seek {
        file: Arc<str>,
        voffset: u64,
        #[source]
        source: io::Error,
    },
}

/// Cuts a BAM body (the stream positioned after the header) into batches.
///
/// The records stay in the decoded blocks the inflate jobs wrote: the
/// scanner takes each block whole ([`ParallelReader::take_block`]), hops
/// from `block_size` to `block_size` to find the record starts, and hands
/// the block to the batch with the stretch of whole records it holds. Only
/// a record that spans blocks is copied (assembled in `carry`, then put in
/// the batch's `data`). A batch ends at a block end, once it holds
/// [`ScanOptions::batch_bytes`].
pub struct BamScanner {
    file: Arc<str>,
    reader: ParallelReader,
    opts: ScanOptions,
    /// Records read so far, `opts.first_record` included.
    record: u64,
    done: bool,
    /// An error found after some records of a batch: that batch goes out
    /// first, so errors come in input order.
    pending: Option<ReadError>,
    buffers: Buffers,
    /// Taken blocks that no batch holds go back here.
    blocks: BlockRecycler,
    /// The record being assembled across blocks, if one is.
    carry: Option<Carry>,
    /// `carry`'s buffer, kept between records that span blocks.
    carry_bytes: Vec<u8>,
    /// Whether a batch already carried the missing EOF block's notice.
    eof_noticed: bool,
}

/// A record that spans blocks, as far as it has arrived.
struct Carry {
    /// Where it starts.
    voffset: u64,
    uncompressed: u64,
    /// Its length with the `block_size` field, once those 4 bytes are in.
    len: Option<usize>,
}

impl BamScanner {
    /// Scans `reader`, positioned at the first record.
    pub fn new(file: Arc<str>, reader: ParallelReader, opts: ScanOptions) -> Self {
        reader.scan_units_with(record_starts);
        BamScanner {
            file,
            blocks: reader.block_recycler(),
            reader,
            record: opts.first_record,
            opts,
            done: false,
            pending: None,
            buffers: Buffers::new(),
            carry: None,
            carry_bytes: Vec::new(),
            eof_noticed: false,
        }
    }

    /// Scans `input` (a BGZF file) from virtual offset `voffset`: seeks to
    /// its block, inflates from there on `pool` and skips the in-block
    /// offset. The header is read separately (from the start of the file).
    pub fn open_at(
        file: Arc<str>,
        mut input: File,
        pool: Arc<rayon::ThreadPool>,
        voffset: u64,
        opts: ScanOptions,
    ) -> Result<Self, ReadError> {
        let seek_err = |source| ReadError::Seek {
            file: Arc::clone(&file),
            voffset,
            source,
        };
        let block = voffset >> 16;
        let mut skip = (voffset & 0xffff) as usize;
        input.seek(SeekFrom::Start(block)).map_err(seek_err)?;
        let mut reader = ParallelReader::starting_at_with(
            io::BufReader::with_capacity(read_buffer(opts.read_ahead), input),
            pool,
            Vec::new(),
            block,
            opts.read_ahead,
        )
        .map_err(|e| seek_err(e.into()))?;
        while skip > 0 {
            let available = reader.fill_buf().map_err(seek_err)?.len();
            if available == 0 {
                return Err(seek_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the offset is past the end of the data",
                )));
            }
            // An offset past its block's data is not a record start.
            if reader.position().block_offset != block || available < skip {
                return Err(seek_err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the in-block offset is past the block's data",
                )));
            }
            reader.consume(skip);
            skip = 0;
        }
        Ok(Self::new(file, reader, opts))
    }

    /// The next batch; `None` at the end of the range.
    pub fn next_batch(&mut self) -> Result<Option<RawBatch>, ReadError> {
        if let Some(e) = self.pending.take() {
            self.done = true;
            return Err(e);
        }
        if self.done {
            return Ok(None);
        }
        let mut batch = self.buffers.take_batch(0);
        batch.first_record = self.record;
        let mut bytes = 0;
        while bytes < self.opts.batch_bytes {
            match self.scan_block(&mut batch, &mut bytes) {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    break;
                }
                Err(e) if batch.voffsets.is_empty() => {
                    self.done = true;
                    return Err(e);
                }
                Err(e) => {
                    self.pending = Some(e);
                    break;
                }
            }
        }
        // Look past a full batch for the end of the input, so that the
        // batch reaching it carries the notice of a missing EOF block (an
        // error here comes again with the next call).
        if !self.done
            && self.pending.is_none()
            && self.carry.is_none()
            && matches!(self.reader.fill_block(), Ok([]))
        {
            self.done = true;
        }
        if self.done && !self.eof_noticed {
            batch.missing_eof = self.reader.missing_eof_block();
            self.eof_noticed = batch.missing_eof.is_some();
        }
        Ok((!batch.voffsets.is_empty() || batch.missing_eof.is_some()).then_some(batch))
    }

    /// Whether the range ends before a record starting at `voffset`.
    fn range_ends_at(&self, voffset: u64) -> bool {
        match self.opts.end {
            RangeEnd::Eof => false,
            RangeEnd::Records(n) => self.record - self.opts.first_record >= n,
            RangeEnd::VirtualOffset(end) => voffset >= end,
        }
    }

    /// Takes the next block into `batch`: the end of a record carried over
    /// from earlier blocks, then the whole records the block holds, then
    /// the start of a record that goes on in the next block (carried).
    /// Adds the records' bytes to `bytes`; false at the end of the range.
    /// On an error, the records before it are in `batch`.
    fn scan_block(&mut self, batch: &mut RawBatch, bytes: &mut usize) -> Result<bool, ReadError> {
        let before = self.reader.position();
        // A BGZF failure is about the record being read: the carried one,
        // else the one that would start here.
        let (record, offset) = match &self.carry {
            Some(c) => (self.record + 1, c.uncompressed),
            None => (self.record + 1, before.uncompressed_total),
        };
        if self.carry.is_none() && self.range_ends_at(before.virtual_offset()) {
            return Ok(false);
        }
        let taken = match self.reader.take_block() {
            Ok(Some(t)) => t,
            Ok(None) => {
                return match self.carry.take() {
                    None => Ok(false),
                    Some(c) => Err(self.truncated(&c)),
                }
            }
            Err(source) => {
                return Err(ReadError::Bgzf {
                    file: Arc::clone(&self.file),
                    record,
                    offset,
                    source,
                })
            }
        };
        let data = &taken.data;
        let mut at = taken.start;
        if self.carry.is_some() {
            at = match self.continue_carry(batch, bytes, data, at) {
                Ok(Some(at)) => at,
                Ok(None) => {
                    // The block was all the carried record's.
                    self.blocks.give_back(taken.data);
                    return Ok(true);
                }
                Err(e) => {
                    self.blocks.give_back(taken.data);
                    return Err(e);
                }
            };
        }
        let start = at;
        let mut result = Ok(true);
        let in_block = |at: usize| (taken.offset << 16) | at as u64;
        // The inflate job's record starts ([`record_starts`]): where this
        // walk meets them, the next start comes from the list instead of a
        // load from a block another thread wrote (a cache miss per record).
        let starts = taken.starts.as_deref().unwrap_or(&[]);
        let mut j = 0;
        while at < data.len() {
            let voffset = in_block(at);
            if self.range_ends_at(voffset) {
                result = Ok(false);
                break;
            }
            let uncompressed = taken.uncompressed + at as u64;
            let rest = &data[at..];
            while starts.get(j).is_some_and(|&s| (s as usize) < at) {
                j += 1;
            }
            if starts.get(j).is_some_and(|&s| s as usize == at) {
                let n = self.take_listed(batch, &starts[j..], at, &taken, &in_block);
                if n > 0 {
                    j += n;
                    at = starts[j] as usize;
                    continue;
                }
            }
            let listed = match (starts.get(j), starts.get(j + 1)) {
                (Some(&s), Some(&next)) if s as usize == at => Some((next - s) as usize),
                _ => None,
            };
            let len = match listed {
                Some(len) if len <= self.opts.record_limit => len,
                _ if rest.len() < 4 => {
                    self.start_carry(rest, voffset, uncompressed);
                    break;
                }
                _ => match self.check_size([rest[0], rest[1], rest[2], rest[3]]) {
                    Ok(len) => len,
                    Err(problem) => {
                        result = Err(self.bad_record(problem, uncompressed, taken.offset));
                        break;
                    }
                },
            };
            if rest.len() < len {
                self.start_carry(rest, voffset, uncompressed);
                self.carry.as_mut().expect("started").len = Some(len);
                break;
            }
            if batch.voffsets.is_empty() {
                batch.first_position = uncompressed;
            }
            batch.voffsets.push(voffset);
            self.record += 1;
            at += len;
        }
        if let Some(starts) = taken.starts {
            self.blocks.give_back_starts(starts);
        }
        if at > start {
            batch.pieces.push(Piece {
                block: Some(batch.blocks.len()),
                start,
                end: at,
                uncompressed: taken.uncompressed + start as u64,
            });
            *bytes += at - start;
            batch.blocks.push(taken.data);
        } else {
            self.blocks.give_back(taken.data);
        }
        result
    }

    /// Takes at once the records the inflate job listed from `listed[0]`
    /// (where the walk is) on whose ends the list also tells (every
    /// listed start but the last), when none of them is over the record
    /// limit and the range cannot end among them; returns how many (0:
    /// the walk goes on record by record, as it does for the block's last
    /// record). The same records, offsets and count as that walk.
    fn take_listed(
        &mut self,
        batch: &mut RawBatch,
        listed: &[u32],
        at: usize,
        taken: &TakenBlock,
        in_block: &impl Fn(usize) -> u64,
    ) -> usize {
        let whole = listed.len().saturating_sub(1);
        if whole == 0 {
            return 0;
        }
        let longest = listed.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        if longest as usize > self.opts.record_limit {
            return 0;
        }
        let fits = match self.opts.end {
            RangeEnd::Eof => true,
            RangeEnd::Records(n) => self.record - self.opts.first_record + whole as u64 <= n,
            RangeEnd::VirtualOffset(end) => in_block(listed[whole - 1] as usize) < end,
        };
        if !fits {
            return 0;
        }
        if batch.voffsets.is_empty() {
            batch.first_position = taken.uncompressed + at as u64;
        }
        batch
            .voffsets
            .extend(listed[..whole].iter().map(|&s| in_block(s as usize)));
        self.record += whole as u64;
        whole
    }

    /// `block_size` read and checked against the record limit: the whole
    /// record's length, `block_size` field included.
    fn check_size(&self, size: [u8; 4]) -> Result<usize, Problem> {
        let len = 4 + validate::read_block_size(size)?;
        if len > self.opts.record_limit {
            return Err(Problem::BlockTooLarge {
                len,
                limit: self.opts.record_limit,
            });
        }
        Ok(len)
    }

    fn bad_record(&self, problem: Problem, offset: u64, block: u64) -> ReadError {
        ReadError::Record {
            file: Arc::clone(&self.file),
            record: self.record + 1,
            offset,
            block,
            problem,
        }
    }

    /// Starts assembling the record whose first bytes are `head` (the rest
    /// of a block).
    fn start_carry(&mut self, head: &[u8], voffset: u64, uncompressed: u64) {
        self.carry_bytes.clear();
        self.carry_bytes.extend_from_slice(head);
        self.carry = Some(Carry {
            voffset,
            uncompressed,
            len: None,
        });
    }

    /// Adds the carried record's next bytes from `data[at..]`; once it is
    /// whole, puts it in `batch` and returns where the block's next record
    /// starts (`None` while the record goes on past this block).
    fn continue_carry(
        &mut self,
        batch: &mut RawBatch,
        bytes: &mut usize,
        data: &[u8],
        mut at: usize,
    ) -> Result<Option<usize>, ReadError> {
        let c = self.carry.as_ref().expect("a record is carried");
        let (voffset, uncompressed) = (c.voffset, c.uncompressed);
        let len = match c.len {
            Some(len) => len,
            None => {
                let k = (4 - self.carry_bytes.len()).min(data.len() - at);
                self.carry_bytes.extend_from_slice(&data[at..at + k]);
                at += k;
                if self.carry_bytes.len() < 4 {
                    return Ok(None);
                }
                let b = &self.carry_bytes;
                let len = self
                    .check_size([b[0], b[1], b[2], b[3]])
                    .map_err(|p| self.bad_record(p, uncompressed, voffset >> 16))?;
                self.carry.as_mut().expect("carried").len = Some(len);
                len
            }
        };
        // Grows as the bytes arrive, so a block_size that points past the
        // end of a truncated file fails on the truncation, not the
        // allocation.
        let k = (len - self.carry_bytes.len()).min(data.len() - at);
        self.carry_bytes.extend_from_slice(&data[at..at + k]);
        at += k;
        if self.carry_bytes.len() < len {
            return Ok(None);
        }
        self.carry = None;
        let start = batch.data.len();
        batch.data.extend_from_slice(&self.carry_bytes);
        batch.pieces.push(Piece {
            block: None,
            start,
            end: batch.data.len(),
            uncompressed,
        });
        if batch.voffsets.is_empty() {
            batch.first_position = uncompressed;
        }
        batch.voffsets.push(voffset);
        self.record += 1;
        *bytes += len;
        Ok(Some(at))
    }

    /// The error for a carried record the input ends inside.
    fn truncated(&self, c: &Carry) -> ReadError {
        let problem = match c.len {
            None => Problem::TruncatedSize,
            Some(len) => Problem::Truncated {
                len: len - 4,
                got: self.carry_bytes.len() - 4,
            },
        };
        self.bad_record(problem, c.uncompressed, c.voffset >> 16)
    }
}

/// The inflate jobs' scan of a BAM block ([`alnsort_bgzf::UnitScan`]): the
/// offsets of the records starting in `block`, hopping from `block_size` to
/// `block_size` from `from`; how far past the block the last one reaches,
/// or `None` at a `block_size` that [`validate::read_block_size`] refuses
/// or that the block's end cuts (its record is not listed).
fn record_starts(block: &[u8], from: usize, starts: &mut Vec<u32>) -> Option<usize> {
    let mut at = from;
    while at < block.len() {
        let size = block.get(at..at + 4)?;
        let len = 4 + validate::read_block_size([size[0], size[1], size[2], size[3]]).ok()?;
        starts.push(at as u32);
        at += len;
    }
    Some(at - block.len())
}

/// Cuts SAM text (positioned after the header) into batches of whole lines.
pub struct SamScanner {
    file: Arc<str>,
    reader: Box<dyn Read + Send>,
    opts: ScanOptions,
    line: u64,
    record: u64,
    carry: Vec<u8>,
    done: bool,
    buffers: Buffers,
    /// BGZF-compressed text: where its stream ended without the EOF block.
    eof_watch: Option<EofWatch>,
}

impl SamScanner {
    /// `header_lines` lines were read before `reader`'s first byte.
    pub fn new(
        file: Arc<str>,
        reader: Box<dyn Read + Send>,
        header_lines: u64,
        opts: ScanOptions,
    ) -> Self {
        SamScanner {
            file,
            reader,
            line: header_lines + 1,
            record: opts.first_record,
            opts,
            carry: Vec::new(),
            done: false,
            buffers: Buffers::new(),
            eof_watch: None,
        }
    }

    /// For text read through a [`ParallelReader`]: the batch reaching the
    /// end carries a missing EOF block's notice ([`RawBatch::missing_eof`]).
    pub fn with_eof_watch(mut self, watch: EofWatch) -> Self {
        self.eof_watch = Some(watch);
        self
    }

    /// The missing EOF block's offset, once, at the end of the input.
    fn take_eof_notice(&mut self) -> Option<u64> {
        self.eof_watch.take()?.missing_eof_block()
    }

    /// The next batch of whole lines; `None` at the end of the input.
    pub fn next_batch(&mut self) -> Result<Option<RawBatch>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let result = self.cut();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn cut(&mut self) -> Result<Option<RawBatch>, ReadError> {
        loop {
            let mut text = self.buffers.take_batch(0).data;
            text.append(&mut self.carry);
            text.reserve(self.opts.batch_bytes + 4096);
            let start = text.len();
            text.resize(start + self.opts.batch_bytes, 0);
            let got = read_some(&mut *self.reader, &mut text[start..]).map_err(|source| {
                ReadError::Io {
                    file: Arc::clone(&self.file),
                    line: self.line,
                    source,
                }
            })?;
            text.truncate(start + got);
            let eof = got == 0;
            if !eof {
                // Cut at the last newline; the tail starts the next batch.
                match text.iter().rposition(|&b| b == b'\n') {
                    Some(p) => self.carry = text.split_off(p + 1),
                    None if text.len() > self.opts.record_limit => {
                        // One line longer than any record may be: stop
                        // before it outgrows the memory budget.
                        return Err(ReadError::Line {
                            file: Arc::clone(&self.file),
                            line: self.line,
                            record: self.record + 1,
                            problem: Problem::LineTooLong {
                                limit: self.opts.record_limit,
                            },
                        });
                    }
                    None => {
                        self.carry = text;
                        continue;
                    }
                }
            }
            if text.is_empty() {
                // The end: no line left, perhaps a notice.
                return Ok(self.take_eof_notice().map(|offset| RawBatch {
                    first_record: self.record,
                    first_position: self.line,
                    sam: true,
                    missing_eof: Some(offset),
                    ..RawBatch::default()
                }));
            }
            let lines = text.iter().filter(|&&b| b == b'\n').count() as u64
                + u64::from(text.last() != Some(&b'\n'));
            let batch = RawBatch {
                data: text,
                first_record: self.record,
                first_position: self.line,
                sam: true,
                missing_eof: if eof { self.take_eof_notice() } else { None },
                ..RawBatch::default()
            };
            self.line += lines;
            self.record += lines;
            if eof {
                self.done = true;
            }
            return Ok(Some(batch));
        }
    }
}

/// Like `read_exact`, but returns how many bytes were read before EOF.
pub fn read_some(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Batch buffers coming back for reuse. A fresh buffer costs a page fault
/// per 4 KiB on the scanning thread (large blocks are mapped afresh by the
/// allocator); a recycled one is already resident. The buffers in
/// existence are never more than the batches in flight at once.
struct Buffers {
    back: Sender<RawBatch>,
    returned: Receiver<RawBatch>,
}

impl Buffers {
    fn new() -> Self {
        let (back, returned) = channel();
        Buffers { back, returned }
    }

    /// An empty batch whose `data` has room for at least `capacity` bytes
    /// (a recycled one when there is one; one whose `data` a long record
    /// grew past twice that is dropped, unless `capacity` is 0).
    fn take_batch(&self, capacity: usize) -> RawBatch {
        while let Ok(mut b) = self.returned.try_recv() {
            if capacity == 0 || b.data.capacity() <= 2 * capacity {
                b.data.clear();
                b.data.reserve(capacity);
                b.voffsets.clear();
                b.pieces.clear();
                b.blocks.clear();
                b.missing_eof = None;
                return b;
            }
        }
        RawBatch {
            data: Vec::with_capacity(capacity),
            ..RawBatch::default()
        }
    }
}

/// Where a batch's buffers go when its records have been decoded (see
/// [`Scanner::recycler`]).
#[derive(Clone)]
pub struct Recycler {
    back: Sender<RawBatch>,
    /// A BAM scanner's blocks go back to its reader's inflate jobs.
    blocks: Option<BlockRecycler>,
}

impl Recycler {
    /// Hands `batch`'s buffers back to its scanner, its blocks to the
    /// inflate jobs (dropped if they are gone).
    pub fn give_back(&self, mut batch: RawBatch) {
        for b in batch.blocks.drain(..) {
            match &self.blocks {
                Some(r) => r.give_back(b),
                None => drop(b),
            }
        }
        let _ = self.back.send(batch);
    }
}

/// Either scanner, for callers that take both formats.
pub enum Scanner {
    Bam(Box<BamScanner>),
    Sam(SamScanner),
}

impl Scanner {
    /// A handle through which decoded batches' buffers return to this
    /// scanner for reuse.
    pub fn recycler(&self) -> Recycler {
        match self {
            Scanner::Bam(s) => Recycler {
                back: s.buffers.back.clone(),
                blocks: Some(s.blocks.clone()),
            },
            Scanner::Sam(s) => Recycler {
                back: s.buffers.back.clone(),
                blocks: None,
            },
        }
    }

    pub fn next_batch(&mut self) -> Result<Option<RawBatch>, ReadError> {
        match self {
            Scanner::Bam(s) => s.next_batch(),
            Scanner::Sam(s) => s.next_batch(),
        }
    }
}

/// What to do with a SAM record whose RNAME, or RNEXT other than `=` and
/// `*`, is not among the header's `@SQ` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownReference {
    /// Fail with [`Problem::UnknownReference`] naming the line and the name:
    /// no record's position is lost without the run failing.
    #[default]
    Error,
    /// As htslib 1.24 (`sam_parse1`): the name is read as `*` (an unknown
    /// RNAME also sets the unmapped flag), with a warning per name.
    Unmapped,
}

/// What decoding a batch found besides its records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decoded {
    /// SAM records with an unknown RNAME or RNEXT read as unmapped
    /// ([`UnknownReference::Unmapped`]); each counts once.
    pub unknown_reference_records: u64,
    /// BGZF inputs (BAM, or SAM text) whose stream ended without the EOF
    /// block (1 on the batch that reached such an end, else 0); read as
    /// samtools reads them.
    pub missing_eof_blocks: u64,
}

impl Decoded {
    /// Adds another batch's counts (the tally of a whole input, or of all).
    pub fn add(&mut self, other: Decoded) {
        self.unknown_reference_records += other.unknown_reference_records;
        self.missing_eof_blocks += other.missing_eof_blocks;
    }

    /// Warns of and counts the batch's missing EOF block, if it has one.
    fn note_missing_eof(&mut self, batch: &RawBatch, warn: &mut impl FnMut(String)) {
        if let Some(offset) = batch.missing_eof {
            warn(missing_eof_warning(offset));
            self.missing_eof_blocks += 1;
        }
    }
}

/// The warning for an input whose BGZF stream ends at compressed byte
/// `offset` without the EOF block (htslib's "EOF marker is absent").
pub fn missing_eof_warning(offset: u64) -> String {
    format!(
        "EOF marker is absent: the BGZF stream ends at compressed byte offset {offset} \
         without the 28-byte EOF block; the input is probably truncated (its records \
         are read up to there, as samtools reads them)"
    )
}

/// The per-record work on a batch: BAM records are validated and
/// normalised as htslib would on reading (recomputed bin, CG CIGAR moved
/// into place, so output records equal samtools' byte for byte), SAM lines
/// parsed; then each record's sort key is encoded.
pub struct Decoder {
    pub file: Arc<str>,
    pub header: Arc<Header>,
    pub lookup: Arc<RefLookup>,
    pub encoder: Arc<KeyEncoder>,
    /// Largest key + record accepted.
    pub record_limit: usize,
    /// SAM records naming a reference the header lacks.
    pub unknown_reference: UnknownReference,
}

impl Decoder {
    /// Calls `sink(key, record)` for each record of `batch`, in order (the
    /// record with its `block_size`); `warn` gets the warnings of SAM input
    /// (unknown reference names, with [`UnknownReference::Unmapped`]) and
    /// of a BAM without its EOF block ([`RawBatch::missing_eof`]). The
    /// first bad record stops the batch; a sink's `Err(e)` is reported as the
    /// record's problem, with `e` as its source.
    pub fn decode(
        &self,
        batch: &RawBatch,
        mut sink: impl FnMut(&[u8], &[u8]) -> Result<(), SinkError>,
        mut warn: impl FnMut(String),
    ) -> Result<Decoded, ReadError> {
        let mut key = Vec::with_capacity(64);
        if batch.sam {
            return self.decode_sam(batch, &mut key, &mut sink, &mut warn);
        }
        let n_ref = self.header.n_ref();
        let mut records = batch.records();
        for (i, &vo) in batch.voffsets.iter().enumerate() {
            let (rec, offset) = records
                .next()
                .expect("a scanned batch holds a record for each offset");
            let err = |problem| ReadError::Record {
                file: Arc::clone(&self.file),
                record: batch.first_record + i as u64 + 1,
                offset,
                block: vo >> 16,
                problem,
            };
            validate::validate_record(&rec[4..], n_ref).map_err(|e| err(e.into()))?;
            let fixed = validate::htslib_normalise(rec).map_err(|e| err(e.into()))?;
            let rec = fixed.as_deref().unwrap_or(rec);
            self.encoder
                .encode(RecordRef::with_block_size(rec), &mut key)
                .map_err(|e| err(e.into()))?;
            self.check_and_sink(&key, rec, &mut sink).map_err(err)?;
        }
        let mut decoded = Decoded::default();
        decoded.note_missing_eof(batch, &mut warn);
        Ok(decoded)
    }

    fn check_and_sink(
        &self,
        key: &[u8],
        rec: &[u8],
        sink: &mut impl FnMut(&[u8], &[u8]) -> Result<(), SinkError>,
    ) -> Result<(), Problem> {
        if key.len() + rec.len() > self.record_limit {
            return Err(Problem::TooLarge {
                len: key.len() + rec.len(),
                limit: self.record_limit,
            });
        }
        sink(key, rec).map_err(Problem::Refused)
    }

    fn decode_sam(
        &self,
        batch: &RawBatch,
        key: &mut Vec<u8>,
        sink: &mut impl FnMut(&[u8], &[u8]) -> Result<(), SinkError>,
        warn: &mut impl FnMut(String),
    ) -> Result<Decoded, ReadError> {
        let mut decoded = Decoded::default();
        let mut rec = Vec::with_capacity(1024);
        // The lines: the batch's text less the newline that ends its last
        // line (a batch without text has none); every line is a record.
        let body = batch.data.strip_suffix(b"\n").unwrap_or(&batch.data);
        let lines = if batch.data.is_empty() { 0 } else { usize::MAX };
        let numbered = (batch.first_position..).zip(batch.first_record + 1..);
        for ((line_no, record_no), line) in numbered.zip(body.split(|&c| c == b'\n').take(lines)) {
            let err = |problem| ReadError::Line {
                file: Arc::clone(&self.file),
                line: line_no,
                record: record_no,
                problem,
            };
            if line.is_empty() {
                return Err(err(Problem::EmptyLine));
            }
            rec.clear();
            sam_parse::parse_sam_record_with(
                line,
                &self.header,
                &self.lookup,
                self.encoder.wide_positions(),
                &mut rec,
            )
            .map_err(|e| err(e.into()))?;
            let r = RecordRef::with_block_size(&rec);
            if r.ref_id() < 0 || r.next_ref_id() < 0 {
                let (rname, rnext) = unknown_references(line, r, &self.lookup);
                match self.unknown_reference {
                    UnknownReference::Error => {
                        if let Some((field, name)) =
                            rname.map(|n| ("RNAME", n)).or(rnext.map(|n| ("RNEXT", n)))
                        {
                            return Err(err(Problem::UnknownReference {
                                field,
                                name: String::from_utf8_lossy(name).into_owned(),
                            }));
                        }
                    }
                    UnknownReference::Unmapped => {
                        if rname.is_some() || rnext.is_some() {
                            decoded.unknown_reference_records += 1;
                        }
                        unknown_reference_warnings(line, r, &self.lookup, |w| {
                            warn(format!("line {line_no} (record {record_no}): {w}"))
                        });
                    }
                }
            }
            self.encoder.encode(r, key).map_err(|e| err(e.into()))?;
            self.check_and_sink(key, &rec, sink).map_err(err)?;
        }
        decoded.note_missing_eof(batch, warn);
        Ok(decoded)
    }
}

/// htslib's `sam_parse1` reads an RNAME or RNEXT the header does not know as
/// `*` (unmapped) and warns; alnsort parses it the same way, and warns the
/// same way so the user learns of it.
pub fn unknown_reference_warnings(
    line: &[u8],
    r: RecordRef<'_>,
    lookup: &RefLookup,
    mut warn: impl FnMut(String),
) {
    let (rname, rnext) = unknown_references(line, r, lookup);
    if let Some(rname) = rname {
        warn(format!(
            "unrecognized reference name \"{}\"; treated as unmapped",
            String::from_utf8_lossy(rname)
        ));
    }
    if let Some(rnext) = rnext {
        warn(format!(
            "unrecognized mate reference name \"{}\"; treated as unmapped",
            String::from_utf8_lossy(rnext)
        ));
    }
}

/// The RNAME and the RNEXT of SAM `line` (parsed into `r`) that the header
/// does not know, if any (`*` and an RNEXT of `=` are not names).
pub fn unknown_references<'l>(
    line: &'l [u8],
    r: RecordRef<'_>,
    lookup: &RefLookup,
) -> (Option<&'l [u8]>, Option<&'l [u8]>) {
    let mut fields = line.split(|&c| c == b'\t');
    let rname = fields.nth(2).unwrap_or(b"*");
    let rnext = fields.nth(3).unwrap_or(b"*");
    let rname = (r.ref_id() < 0 && rname != b"*" && lookup.get(rname).is_none()).then_some(rname);
    let rnext =
        (r.next_ref_id() < 0 && !matches!(rnext, b"*" | b"=") && lookup.get(rnext).is_none())
            .then_some(rnext);
    (rname, rnext)
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
