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
use alnsort_bgzf::{BgzfError, ParallelReader};

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

/// Bytes of a record read (and allocated) at a time when it spans blocks:
/// a BGZF block's worth several times over, small next to any budget.
const READ_STEP: usize = 1 << 20;

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
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            batch_bytes: BATCH_BYTES,
            record_limit: usize::MAX,
            end: RangeEnd::Eof,
            first_record: 0,
        }
    }
}

/// Whole records (BAM) or lines (SAM), back to back, and where they came from.
#[derive(Debug, Default)]
pub struct RawBatch {
    /// BAM: framed records (each with its `block_size`). SAM: whole lines,
    /// each ended by a newline except perhaps the last of the input.
    pub data: Vec<u8>,
    /// Records of the input before this batch's first.
    pub first_record: u64,
    /// BAM: the virtual offset of each record's start. SAM: empty.
    pub voffsets: Vec<u64>,
    /// BAM: uncompressed offset of the first record. SAM: its line number
    /// (1-based).
    pub first_position: u64,
    /// Whether `data` is SAM text.
    pub sam: bool,
    /// Set on the batch that reaches the end of a BGZF input (BAM, or SAM
    /// with [`SamScanner::with_eof_watch`]) whose stream ended without its
    /// EOF block, to the compressed offset where that block was expected
    /// ([`Decoder::decode`] warns and counts it). Such a batch may hold no
    /// record.
    pub missing_eof: Option<u64>,
}

impl RawBatch {
    /// Compressed offset of the block the last record starts in (0 if
    /// unknown), for progress displays.
    pub fn last_block_offset(&self) -> u64 {
        self.voffsets.last().map_or(0, |v| v >> 16)
    }
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
    /// Whether a batch already carried the missing EOF block's notice.
    eof_noticed: bool,
}

impl BamScanner {
    /// Scans `reader`, positioned at the first record.
    pub fn new(file: Arc<str>, reader: ParallelReader, opts: ScanOptions) -> Self {
        BamScanner {
            file,
            reader,
            record: opts.first_record,
            opts,
            done: false,
            pending: None,
            buffers: Buffers::new(),
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
        let mut reader = ParallelReader::starting_at(
            io::BufReader::with_capacity(1 << 20, input),
            pool,
            Vec::new(),
            block,
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
        let mut batch = RawBatch {
            data: self.buffers.take(self.opts.batch_bytes + (64 << 10)),
            first_record: self.record,
            ..RawBatch::default()
        };
        while batch.data.len() < self.opts.batch_bytes {
            match self.next_record(&mut batch) {
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
        if !self.done && self.pending.is_none() && matches!(self.reader.fill_block(), Ok([])) {
            self.done = true;
        }
        if self.done && !self.eof_noticed {
            batch.missing_eof = self.reader.missing_eof_block();
            self.eof_noticed = batch.missing_eof.is_some();
        }
        Ok((!batch.voffsets.is_empty() || batch.missing_eof.is_some()).then_some(batch))
    }

    /// Appends the next record to `batch`; false at the end of the range.
    fn next_record(&mut self, batch: &mut RawBatch) -> Result<bool, ReadError> {
        if let RangeEnd::Records(n) = self.opts.end {
            if self.record - self.opts.first_record >= n {
                return Ok(false);
            }
        }
        let record = self.record + 1;
        let before = self.reader.position();
        let bgzf_err = |source, file: &Arc<str>| ReadError::Bgzf {
            file: Arc::clone(file),
            record,
            offset: before.uncompressed_total,
            source,
        };
        match self.reader.fill_block() {
            Ok([]) => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(bgzf_err(e, &self.file)),
        }
        let pos = self.reader.position();
        if let RangeEnd::VirtualOffset(end) = self.opts.end {
            if pos.virtual_offset() >= end {
                return Ok(false);
            }
        }
        let at = |problem| ReadError::Record {
            file: Arc::clone(&self.file),
            record,
            offset: pos.uncompressed_total,
            block: pos.block_offset,
            problem,
        };
        let limit = self.opts.record_limit;
        // The current block is loaded: this only returns its rest.
        let buf = self
            .reader
            .fill_block()
            .map_err(|e| bgzf_err(e, &self.file))?;
        if buf.len() >= 4 {
            let len = validate::read_block_size([buf[0], buf[1], buf[2], buf[3]])
                .map_err(|e| at(e.into()))?;
            if 4 + len > limit {
                return Err(at(Problem::BlockTooLarge {
                    len: 4 + len,
                    limit,
                }));
            }
            if let Some(rec) = buf.get(..4 + len) {
                // The usual case: the whole record is in this block.
                batch.data.extend_from_slice(rec);
                self.reader.consume(4 + len);
                self.finish_record(batch, pos);
                return Ok(true);
            }
        }
        // The record spans blocks.
        let start = batch.data.len();
        let got = read_full(&mut self.reader, &mut batch.data, 4);
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                batch.data.truncate(start);
                return Err(bgzf_err(e, &self.file));
            }
        };
        if got < 4 {
            batch.data.truncate(start);
            return Err(at(Problem::TruncatedSize));
        }
        let size = [
            batch.data[start],
            batch.data[start + 1],
            batch.data[start + 2],
            batch.data[start + 3],
        ];
        let checked = validate::read_block_size(size)
            .map_err(Problem::from)
            .and_then(|len| {
                if 4 + len > limit {
                    Err(Problem::BlockTooLarge {
                        len: 4 + len,
                        limit,
                    })
                } else {
                    Ok(len)
                }
            });
        let len = match checked {
            Ok(len) => len,
            Err(p) => {
                batch.data.truncate(start);
                return Err(at(p));
            }
        };
        // Grow as the bytes arrive, so a block_size that points past the end
        // of a truncated file fails on the truncation, not the allocation.
        let mut got = 0;
        while got < len {
            let step = (len - got).min(READ_STEP);
            match read_full(&mut self.reader, &mut batch.data, step) {
                Ok(k) => {
                    got += k;
                    if k < step {
                        break;
                    }
                }
                Err(e) => {
                    batch.data.truncate(start);
                    return Err(bgzf_err(e, &self.file));
                }
            }
        }
        if got < len {
            batch.data.truncate(start);
            return Err(at(Problem::Truncated { len, got }));
        }
        self.finish_record(batch, pos);
        Ok(true)
    }

    fn finish_record(&mut self, batch: &mut RawBatch, pos: alnsort_bgzf::Position) {
        if batch.voffsets.is_empty() {
            batch.first_position = pos.uncompressed_total;
        }
        batch.voffsets.push(pos.virtual_offset());
        self.record += 1;
    }
}

/// Appends up to `n` bytes from `r` to `out`; returns how many arrived
/// before the end of the stream.
fn read_full(r: &mut ParallelReader, out: &mut Vec<u8>, n: usize) -> Result<usize, BgzfError> {
    let mut got = 0;
    while got < n {
        let buf = r.fill_block()?;
        if buf.is_empty() {
            break;
        }
        let k = buf.len().min(n - got);
        out.extend_from_slice(&buf[..k]);
        r.consume(k);
        got += k;
    }
    Ok(got)
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
            let mut text = self.buffers.take(0);
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
                voffsets: Vec::new(),
                first_position: self.line,
                sam: true,
                missing_eof: if eof { self.take_eof_notice() } else { None },
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
    back: Sender<Vec<u8>>,
    returned: Receiver<Vec<u8>>,
}

impl Buffers {
    fn new() -> Self {
        let (back, returned) = channel();
        Buffers { back, returned }
    }

    /// An empty buffer of at least `capacity` bytes (a recycled one when
    /// there is one; one grown past twice that by a long record is dropped).
    fn take(&self, capacity: usize) -> Vec<u8> {
        while let Ok(mut v) = self.returned.try_recv() {
            if capacity == 0 || v.capacity() <= 2 * capacity {
                v.clear();
                v.reserve(capacity);
                return v;
            }
        }
        Vec::with_capacity(capacity)
    }
}

/// Where a batch's buffer goes when its records have been decoded (see
/// [`Scanner::recycler`]).
#[derive(Clone)]
pub struct Recycler(Sender<Vec<u8>>);

impl Recycler {
    /// Hands `batch`'s buffer back to its scanner (dropped if the scanner
    /// is gone).
    pub fn give_back(&self, batch: RawBatch) {
        let _ = self.0.send(batch.data);
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
        Recycler(
            match self {
                Scanner::Bam(s) => &s.buffers,
                Scanner::Sam(s) => &s.buffers,
            }
            .back
            .clone(),
        )
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
        let mut at = 0usize;
        for (i, &vo) in batch.voffsets.iter().enumerate() {
            let len = 4 + u32::from_le_bytes([
                batch.data[at],
                batch.data[at + 1],
                batch.data[at + 2],
                batch.data[at + 3],
            ]) as usize;
            let rec = &batch.data[at..at + len];
            let err = |problem| ReadError::Record {
                file: Arc::clone(&self.file),
                record: batch.first_record + i as u64 + 1,
                offset: batch.first_position + at as u64,
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
            at += len;
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
