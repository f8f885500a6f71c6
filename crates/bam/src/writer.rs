//! Writing records: BAM, or SAM text plain or in BGZF, as htslib writes them.
//!
//! BGZF forms go through `alnsort_bgzf::BlockWriter`, the one block packer:
//! the header fills blocks of its own, and each BAM record is a unit that
//! starts a new block when it does not fit in what is left of the current one
//! (htslib's `bam_write1`); a SAM line is appended as a stream (htslib's
//! `bgzf_write`). A record is copied once, straight into the payload that the
//! deflate job on the pool takes. For an index, the BAM form notes each
//! record's index fields where its bytes are copied (the deflate job, for
//! [`Writer::write_records`]), and the thread that writes the blocks feeds
//! them with their logical virtual offsets to an [`IndexBuilder`], in
//! order, so that the caller's thread never reads the records;
//! [`Writer::finish`] returns the finished index with the output. A writer
//! of a part can instead keep each record's index fields and give back the
//! part's index ([`Writer::collect_part_index`]), without reading the part
//! again.
//!
//! [`WriterOptions`] can leave out the header and the EOF block, so that a
//! writer produces a part of a larger file (its blocks concatenate with the
//! other parts' blocks into one valid BGZF stream).

use crate::header::Header;
use crate::qc::{QcRecord, QcTally, ReadBack};
use crate::record::{flags, RecordRef};
use crate::sam_format::format_sam_record;
use alnsort_bgzf::{
    BgzfError, BlockWriter, CompressionLevel, ParallelWriter, Resuming, UnitFields, UnitNote, Units,
};
use alnsort_index::{
    IndexBuilder, IndexError, IndexFile, IndexFormat, IndexRecord, PartIndexWriter,
};
use alnsort_pipeline::varint::{self, unzigzag, zigzag};
use std::io::{self, BufWriter, Write};
use std::sync::{Arc, Mutex, PoisonError};

/// Bytes collected before one write of SAM text or of compressed blocks.
const OUT_BUFFER: usize = 1 << 20;

/// What is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// BAM: binary records in BGZF.
    Bam,
    /// SAM text, uncompressed.
    Sam,
    /// SAM text in BGZF (`-O sam,level=N`, `.sam.gz`).
    SamBgzf,
}

/// How a [`Writer`] writes.
#[derive(Debug, Clone, Copy)]
pub struct WriterOptions {
    pub format: Format,
    /// Compression level of the BGZF forms (unused for plain SAM).
    pub level: CompressionLevel,
    /// Write the header first (false for a part that follows another).
    pub header: bool,
    /// End with the BGZF EOF block (false for a part that another follows).
    pub eof: bool,
    /// Build this index from the records' virtual offsets (BAM only).
    pub index: Option<IndexFormat>,
}

impl WriterOptions {
    /// A whole file: header, records, EOF block; no index.
    pub fn whole(format: Format, level: CompressionLevel) -> WriterOptions {
        WriterOptions {
            format,
            level,
            header: true,
            eof: true,
            index: None,
        }
    }
}

/// Why writing failed; `records` is how many records had been handed over
/// when the failure was seen (BGZF blocks are written in the background, so
/// a failed block may hold an earlier record).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Writing SAM text failed.
    #[error("after {records} records, at byte {offset}: {source}")]
    Io {
        records: u64,
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// Compressing or writing a BGZF block failed.
    #[error("after {records} records: {source}")]
    Bgzf {
        records: u64,
        #[source]
        source: BgzfError,
    },
    /// The records cannot be indexed (htslib's checks: order, positions).
    #[error("indexing the output: {source}")]
    Index {
        #[source]
        source: IndexError,
    },
    /// An option combination the writer cannot honour.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl WriteError {
    /// The kind of the underlying I/O error, if the failure was one (a
    /// closed pipe reads as `BrokenPipe`).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            WriteError::Io { source, .. } => Some(source.kind()),
            WriteError::Bgzf {
                source: BgzfError::Io { source, .. },
                ..
            } => Some(source.kind()),
            _ => None,
        }
    }
}

/// What [`Writer::finish`] returns.
#[derive(Debug)]
pub struct Finished<W> {
    /// The output, flushed.
    pub inner: W,
    pub records: u64,
    /// Bytes before compression (header and records, or SAM text).
    pub bytes_uncompressed: u64,
    /// Bytes written to `inner`.
    pub bytes_written: u64,
    /// The index, when one was asked for.
    pub index: Option<IndexFile>,
    /// The part index (`alnsort_index::PartIndexWriter`'s bytes), when
    /// [`Writer::collect_part_index`] asked for it.
    pub part_index: Option<Vec<u8>>,
    /// The flagstat and idxstats counts of the records written, when
    /// [`Writer::count_qc`] asked for them.
    pub qc: Option<QcTally>,
}

/// The records' index fields for a part index, in write order, kept until
/// the blocks' compressed offsets are known: per record, as varints
/// (LEB128), `(ref_id + 1) << 1 | mapped`, zigzag `beg`, zigzag
/// `end - beg` and the logical start's distance from the previous one's
/// (about 10 bytes a record, as the part index itself).
#[derive(Debug, Default)]
struct PartRecords {
    fields: Vec<u8>,
    records: u64,
    previous: u64,
}

impl PartRecords {
    fn push(&mut self, rec: &IndexRecord, n_ref: usize) -> Result<(), IndexError> {
        let vstart = rec.vstart;
        let fail = Err;
        if rec.ref_id >= 0 && rec.ref_id as usize >= n_ref {
            return fail(IndexError::ReferenceOutOfRange {
                record: self.records,
                ref_id: rec.ref_id,
                n_refs: n_ref,
            });
        }
        let Some(step) = vstart.checked_sub(self.previous) else {
            return fail(IndexError::OffsetsOutOfOrder {
                record: self.records,
                previous_end: self.previous,
                vstart,
                vend: vstart,
            });
        };
        let tid = u64::from((rec.ref_id.max(-1) + 1) as u32);
        varint::put(&mut self.fields, tid << 1 | u64::from(rec.mapped));
        varint::put(&mut self.fields, zigzag(rec.beg));
        varint::put(&mut self.fields, zigzag(rec.end.wrapping_sub(rec.beg)));
        varint::put(&mut self.fields, step);
        self.previous = vstart;
        self.records += 1;
        Ok(())
    }

    /// The part index, offsets as a reader of the part sees them: a record
    /// starts where the writer put it (a record that opens a block starts
    /// at its offset 0) and ends where the next one starts, the last one at
    /// the end of the last block (the last entry of `block_offsets`: past
    /// the last block, or the EOF block's offset). `part_bytes` is the
    /// size of the output.
    fn finish(self, block_offsets: &[u64], part_bytes: u64) -> Result<Vec<u8>, IndexError> {
        let end = block_offsets.last().copied().unwrap_or(0);
        let real = |logical: u64| -> Result<u64, IndexError> {
            let block = logical >> 16;
            match usize::try_from(block)
                .ok()
                .and_then(|b| block_offsets.get(b))
            {
                Some(&c) => Ok((c << 16) | (logical & 0xffff)),
                None => Err(IndexError::UnknownBlock {
                    offset: logical,
                    block,
                    n_blocks: block_offsets.len(),
                }),
            }
        };
        // One record ahead: a record ends where the next one starts.
        let mut at = 0usize;
        let mut logical = 0u64;
        let mut read = |at: &mut usize| {
            // Its own bytes, four varints a record written by `push`.
            let mut field = || varint::read(&self.fields, at).expect("a varint push wrote");
            let tid = field();
            let beg = unzigzag(field());
            let len = unzigzag(field());
            logical += field();
            let rec = IndexRecord {
                ref_id: (tid >> 1) as i32 - 1,
                beg,
                end: beg.wrapping_add(len),
                mapped: tid & 1 == 1,
                vstart: 0,
                vend: 0,
            };
            (rec, logical)
        };
        let mut idx = PartIndexWriter::new();
        let mut ahead = None;
        if self.records > 0 {
            let (rec, logical) = read(&mut at);
            ahead = Some((rec, real(logical)?));
        }
        for i in 0..self.records {
            let Some((mut rec, vstart)) = ahead.take() else {
                break;
            };
            let vend = if i + 1 < self.records {
                let (next, logical) = read(&mut at);
                let start = real(logical)?;
                ahead = Some((next, start));
                start
            } else {
                end << 16
            };
            rec.vstart = vstart;
            rec.vend = vend;
            idx.push(&rec)?;
        }
        Ok(idx.finish(part_bytes))
    }
}

/// What the records' notes feed, on the thread that writes the blocks: the
/// index, the part index, and the first error either gave.
#[derive(Default)]
struct Indexing {
    index: Option<IndexBuilder>,
    part: Option<PartRecords>,
    /// The records' QC counts, from each note's reference id and word.
    qc: Option<QcTally>,
    n_ref: usize,
    error: Option<IndexError>,
}

impl Indexing {
    /// Takes one block's notes (`block` its logical index), in order.
    fn take(&mut self, block: u64, notes: &[UnitNote]) {
        if self.error.is_some() {
            return;
        }
        if let Some(qc) = &mut self.qc {
            for note in notes {
                qc.push_word(note.ref_id, note.word);
            }
        }
        if self.index.is_none() && self.part.is_none() {
            return;
        }
        for note in notes {
            let (vstart, vend) = note.offsets(block);
            let f = note.fields();
            let rec = IndexRecord {
                ref_id: f.ref_id,
                beg: i64::from(f.beg),
                end: f.end,
                mapped: f.mapped,
                vstart,
                vend,
            };
            let pushed = match (&mut self.index, &mut self.part) {
                (Some(index), _) => index.push(&rec),
                (None, Some(part)) => part.push(&rec, self.n_ref),
                (None, None) => Ok(()),
            };
            if let Err(e) = pushed {
                self.error = Some(e);
                return;
            }
        }
    }
}

/// The shared [`Indexing`], locked (a panic elsewhere cannot leave it
/// half-updated in a way that matters: its error or its index is read).
fn locked(indexing: &Mutex<Indexing>) -> std::sync::MutexGuard<'_, Indexing> {
    indexing.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Sink<W: Write + Send + 'static> {
    Bgzf {
        packer: Box<BlockWriter<BufWriter<W>>>,
        text: bool,
    },
    Text {
        out: BufWriter<W>,
        bytes: u64,
    },
}

/// Writes records in the given order.
pub struct Writer<W: Write + Send + 'static> {
    sink: Sink<W>,
    header: Arc<Header>,
    /// Fed on the block-writing thread; whole again after `finish` has
    /// waited for that thread.
    indexing: Arc<Mutex<Indexing>>,
    eof: bool,
    records: u64,
    line: Vec<u8>,
    /// The QC counts of SAM text, counted as each record is formatted
    /// (BAM's come with the notes, in `indexing`).
    text_qc: Option<QcTally>,
}

impl<W: Write + Send + 'static> Writer<W> {
    /// Starts writing to `inner` (and writes the header if asked to);
    /// BGZF blocks are deflated on `pool`.
    pub fn new(
        inner: W,
        header: Arc<Header>,
        options: WriterOptions,
        pool: Arc<rayon::ThreadPool>,
    ) -> Result<Writer<W>, WriteError> {
        Self::resuming(inner, header, options, pool, Resuming::default())
    }

    /// [`Writer::new`] for a BGZF output that goes on from a killed
    /// writer's blocks (`resuming.kept`, `inner` positioned after them):
    /// every record is given again from the first, and the blocks made
    /// again for the kept ones are checked and noted (index, QC counts)
    /// but not written (`alnsort_bgzf::ParallelWriter::resuming`). SAM
    /// text cannot go on from kept blocks.
    pub fn resuming(
        inner: W,
        header: Arc<Header>,
        options: WriterOptions,
        pool: Arc<rayon::ThreadPool>,
        resuming: Resuming,
    ) -> Result<Writer<W>, WriteError> {
        if options.format == Format::Sam
            && (!resuming.kept.is_empty() || resuming.checkpoint.is_some())
        {
            return Err(WriteError::Unsupported(
                "SAM text output cannot go on from a killed writer's output",
            ));
        }
        let index = match options.index {
            Some(_) if options.format != Format::Bam => {
                return Err(WriteError::Unsupported(
                    "an index can only be built for BAM output",
                ))
            }
            Some(format) => {
                let lengths: Vec<u64> = header.refs().iter().map(|r| r.len).collect();
                Some(
                    IndexBuilder::new(format, &lengths)
                        .map_err(|source| WriteError::Index { source })?,
                )
            }
            None => None,
        };
        let noting = index.is_some();
        let indexing = Arc::new(Mutex::new(Indexing {
            index,
            part: None,
            qc: None,
            n_ref: header.n_ref(),
            error: None,
        }));
        let sink = match options.format {
            Format::Sam => Sink::Text {
                out: BufWriter::with_capacity(OUT_BUFFER, inner),
                bytes: 0,
            },
            Format::Bam | Format::SamBgzf => {
                let out = BufWriter::with_capacity(OUT_BUFFER, inner);
                let fed = Arc::clone(&indexing);
                let mut packer = BlockWriter::new(ParallelWriter::resuming(
                    out,
                    pool,
                    options.level,
                    Box::new(move |block, notes| locked(&fed).take(block, notes)),
                    resuming,
                ));
                if noting {
                    packer.noting(index_fields);
                }
                Sink::Bgzf {
                    packer: Box::new(packer),
                    text: options.format == Format::SamBgzf,
                }
            }
        };
        let mut w = Writer {
            sink,
            header,
            indexing,
            eof: options.eof,
            records: 0,
            line: Vec::with_capacity(1024),
            text_qc: None,
        };
        if options.header {
            w.write_header()?;
        }
        Ok(w)
    }

    /// Keeps each record's index fields from now on, so that
    /// [`Writer::finish`] returns the part index of the output
    /// ([`Finished::part_index`], the bytes of
    /// `alnsort_index::PartIndexWriter`): each record's offsets relative to
    /// the output's first byte, as a reader of it sees them. For a
    /// headerless, EOF-less BAM part; called before the first record.
    pub fn collect_part_index(&mut self) -> Result<(), WriteError> {
        let Sink::Bgzf {
            packer,
            text: false,
        } = &mut self.sink
        else {
            return Err(WriteError::Unsupported(
                "an index can only be built for BAM output",
            ));
        };
        if self.records != 0 {
            return Err(WriteError::Unsupported(
                "a part index must be asked for before the first record",
            ));
        }
        packer.noting(index_fields);
        locked(&self.indexing).part = Some(PartRecords::default());
        Ok(())
    }

    /// Counts what `samtools flagstat` and `samtools idxstats` read of
    /// each record from now on, as samtools reads the file back (SAM text
    /// with htslib's fix-ups), so that [`Writer::finish`] returns the
    /// counts ([`Finished::qc`]) without the output being read again. For
    /// BAM the counts come with the records' notes, made where the
    /// records are copied (the deflate jobs) and taken in order on the
    /// thread that writes the blocks. Called before the first record.
    pub fn count_qc(&mut self) -> Result<(), WriteError> {
        if self.records != 0 {
            return Err(WriteError::Unsupported(
                "the QC counts must be asked for before the first record",
            ));
        }
        let tally = QcTally::new(self.header.n_ref());
        match &mut self.sink {
            Sink::Bgzf {
                packer,
                text: false,
            } => {
                packer.noting(index_fields);
                locked(&self.indexing).qc = Some(tally);
            }
            _ => self.text_qc = Some(tally),
        }
        Ok(())
    }

    fn write_header(&mut self) -> Result<(), WriteError> {
        match &mut self.sink {
            Sink::Text { out, bytes } => {
                let text = self.header.to_sam_text();
                out.write_all(&text).map_err(|source| WriteError::Io {
                    records: 0,
                    offset: 0,
                    source,
                })?;
                *bytes += text.len() as u64;
            }
            Sink::Bgzf { packer, text } => {
                let bytes = if *text {
                    self.header.to_sam_text()
                } else {
                    self.header.to_bam_bytes()
                };
                // htslib flushes after the header (bam_hdr_write), so the
                // records start in a block of their own.
                packer
                    .write_bytes(&bytes)
                    .and_then(|_| packer.end_block())
                    .map_err(|source| WriteError::Bgzf { records: 0, source })?;
            }
        }
        Ok(())
    }

    /// Appends one record, in its BAM form with the `block_size` prefix.
    pub fn write_record(&mut self, rec: &[u8]) -> Result<(), WriteError> {
        let records = self.records;
        self.records += 1;
        if let Some(qc) = &mut self.text_qc {
            qc.push(&QcRecord::of(
                RecordRef::with_block_size(rec),
                ReadBack::SamText,
            ));
        }
        match &mut self.sink {
            Sink::Text { out, bytes } => {
                self.line.clear();
                format_sam_record(
                    RecordRef::with_block_size(rec),
                    &self.header,
                    &mut self.line,
                );
                out.write_all(&self.line).map_err(|source| WriteError::Io {
                    records,
                    offset: *bytes,
                    source,
                })?;
                *bytes += self.line.len() as u64;
            }
            Sink::Bgzf { packer, text: true } => {
                self.line.clear();
                format_sam_record(
                    RecordRef::with_block_size(rec),
                    &self.header,
                    &mut self.line,
                );
                packer
                    .write_bytes(&self.line)
                    .map_err(|source| WriteError::Bgzf { records, source })?;
            }
            Sink::Bgzf {
                packer,
                text: false,
            } => {
                packer
                    .write_unit(rec)
                    .map_err(|source| WriteError::Bgzf { records, source })?;
            }
        }
        Ok(())
    }

    /// Appends every record of `records` in turn, as
    /// [`Writer::write_record`] would, each in its BAM form with the
    /// `block_size` prefix. For BAM the records are not copied here: the
    /// blocks are cut from their lengths and each block's compression job
    /// copies its own payload from `records` (noting each record's index
    /// fields there, for an index). SAM text is formatted here, record by record.
    pub fn write_records(&mut self, records: Arc<dyn Units>) -> Result<(), WriteError> {
        let Sink::Bgzf {
            packer,
            text: false,
        } = &mut self.sink
        else {
            let mut rec = Vec::new();
            for i in 0..records.count() {
                rec.clear();
                records.append_unit(i, &mut rec);
                self.write_record(&rec)?;
            }
            return Ok(());
        };
        let first = self.records;
        let n = records.count() as u64;
        packer
            .write_units(records)
            .map_err(|source| WriteError::Bgzf {
                records: first,
                source,
            })?;
        self.records += n;
        // An index error found so far (the notes are taken as their blocks
        // are written): the rest of the output would be wasted.
        match locked(&self.indexing).error.clone() {
            Some(source) => Err(WriteError::Index { source }),
            None => Ok(()),
        }
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Sends the last block, waits for every block to be written, writes
    /// the EOF block if asked to, flushes, and finishes the index.
    pub fn finish(self) -> Result<Finished<W>, WriteError> {
        let records = self.records;
        let (inner, bytes_uncompressed, bytes_written, block_offsets) = match self.sink {
            Sink::Text { out, bytes } => {
                let inner = out.into_inner().map_err(|e| WriteError::Io {
                    records,
                    offset: bytes,
                    source: e.into_error(),
                })?;
                (inner, bytes, bytes, Vec::new())
            }
            Sink::Bgzf { packer, .. } => {
                let bgzf = |source| WriteError::Bgzf { records, source };
                let s = packer.finish(self.eof).map_err(bgzf)?;
                let inner = s
                    .inner
                    .into_inner()
                    .map_err(|e| bgzf(BgzfError::io(s.compressed_bytes, e.into_error())))?;
                (
                    inner,
                    s.uncompressed_bytes,
                    s.compressed_bytes,
                    s.block_offsets,
                )
            }
        };
        // The block-writing thread has ended: every note is in.
        let Indexing {
            index,
            part,
            qc,
            error,
            ..
        } = std::mem::take(&mut *locked(&self.indexing));
        let qc = qc.or(self.text_qc);
        if let Some(source) = error {
            return Err(WriteError::Index { source });
        }
        let index = match index {
            Some(builder) => Some(
                builder
                    .finish(&block_offsets)
                    .map_err(|source| WriteError::Index { source })?,
            ),
            None => None,
        };
        let part_index = match part {
            Some(part) => Some(
                part.finish(&block_offsets, bytes_written)
                    .map_err(|source| WriteError::Index { source })?,
            ),
            None => None,
        };
        Ok(Finished {
            inner,
            records,
            bytes_uncompressed,
            bytes_written,
            index,
            part_index,
            qc,
        })
    }
}

/// What the index and the QC counts need of a record (with its
/// `block_size` prefix): the [`alnsort_bgzf::NoteFn`] of the BAM form, run
/// where the record is copied.
fn index_fields(rec: &[u8]) -> UnitFields {
    let r = RecordRef::with_block_size(rec);
    let beg = r.pos();
    let mapped = r.flag() & flags::UNMAPPED == 0;
    UnitFields {
        ref_id: r.ref_id(),
        beg,
        end: alnsort_index::record_end(i64::from(beg), r.reference_length(), mapped),
        mapped,
        word: QcRecord::of(r, ReadBack::Binary).word(),
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
