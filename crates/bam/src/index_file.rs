//! Indexing a BAM file that already exists (`alnsort index`, `samtools
//! index`): the records are read in batches ([`BamScanner`], the BGZF
//! blocks inflated on the pool), and each one's reference, span, mapped flag
//! and virtual offsets go to the index crate's [`IndexBuilder`], the one
//! that indexes what alnsort writes. The offsets are htslib's `bgzf_tell`
//! as `sam_index` sees it: a record starts where the previous one ended,
//! and a record that ends at a block's end ends at the next block in the
//! file, an empty one included ([`EmptyBlocks`]), so the index is the one
//! samtools 1.24 writes for the same file, byte for byte.

use std::sync::Arc;

use alnsort_bgzf::{EmptyBlocks, ParallelReader};
use alnsort_index::{record_end, IndexBuilder, IndexError, IndexFile, IndexFormat, IndexRecord};

use crate::header::{read_bam_header, Header, HeaderError};
use crate::reader::{BamScanner, ReadError, ScanOptions};
use crate::record::{flags, FIXED_LEN};
use crate::validate::{cg_cigar_field, RecordError};
use crate::{cigar, RecordRef};

/// Why a BAM file could not be indexed. Every variant names the file; a
/// record's names its number (1-based), read name and virtual offset.
#[derive(Debug, thiserror::Error)]
pub enum IndexBamError {
    /// The header could not be read.
    #[error("{file}: cannot read the BAM header")]
    Header {
        file: Arc<str>,
        #[source]
        source: HeaderError,
    },
    /// A record could not be read (truncation, a bad BGZF block, a bad
    /// `block_size`).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A record's fields run past its end.
    #[error("{file}: record {record} at virtual offset {voffset:#x} (BGZF block at compressed offset {block})")]
    Record {
        file: Arc<str>,
        record: u64,
        voffset: u64,
        block: u64,
        #[source]
        source: RecordError,
    },
    /// A record cannot be indexed where it is (out of order, past what the
    /// index format covers): samtools index fails on the same record.
    #[error(transparent)]
    Unindexable(Box<UnindexableRecord>),
    /// The index could not be set up or finished (a CSI shift out of range,
    /// a count too large for the format).
    #[error("{file}: cannot build the index")]
    Build {
        file: Arc<str>,
        #[source]
        source: IndexError,
    },
}

/// The record an index cannot take, and why.
#[derive(Debug, thiserror::Error)]
#[error(
    "{file}: record {record} ('{name}', reference '{reference}', flag {flag}, position {pos}) \
     at virtual offset {voffset:#x} (BGZF block at compressed offset {block}) cannot be indexed"
)]
pub struct UnindexableRecord {
    pub file: Arc<str>,
    /// 1-based.
    pub record: u64,
    pub name: String,
    pub reference: String,
    pub flag: u16,
    /// 1-based, as samtools prints it.
    pub pos: i64,
    pub voffset: u64,
    pub block: u64,
    #[source]
    pub source: IndexError,
}

/// An index made of an existing BAM file.
#[derive(Debug)]
pub struct IndexedBam {
    /// The index, ready to write.
    pub index: IndexFile,
    /// Records indexed.
    pub records: u64,
    /// Where the file's EOF block was expected, when it has none (samtools
    /// warns "EOF marker is absent" and indexes the file all the same).
    pub missing_eof: Option<u64>,
}

/// One record's index fields, kept until the next record's start (its end,
/// as htslib counts) is known.
struct Pending {
    rec: IndexRecord,
    /// 1-based record number, its real virtual offset, flag and read name,
    /// for the error that pushing it may raise.
    number: u64,
    voffset: u64,
    flag: u16,
    name: Vec<u8>,
}

/// Real compressed block offsets to the index builder's logical offsets
/// (`block_index << 16 | in_block`): the blocks are numbered as the
/// records first meet them.
#[derive(Default)]
struct Blocks {
    offsets: Vec<u64>,
}

impl Blocks {
    fn logical(&mut self, voffset: u64) -> u64 {
        let block = voffset >> 16;
        if self.offsets.last() != Some(&block) {
            self.offsets.push(block);
        }
        ((self.offsets.len() as u64 - 1) << 16) | (voffset & 0xffff)
    }
}

/// Indexes the BAM file `reader` reads from its first byte (named `file`
/// in errors) as `samtools index` does: BAI, or CSI with the given
/// `min_shift` (its depth from the longest reference).
pub fn index_bam(
    file: Arc<str>,
    mut reader: ParallelReader,
    format: IndexFormat,
) -> Result<IndexedBam, IndexBamError> {
    let empty = reader.empty_blocks();
    let header = read_bam_header(&mut reader).map_err(|source| IndexBamError::Header {
        file: Arc::clone(&file),
        source,
    })?;
    let lengths: Vec<u64> = header.refs().iter().map(|r| r.len).collect();
    let build_err = |source| IndexBamError::Build {
        file: Arc::clone(&file),
        source,
    };
    let mut builder = IndexBuilder::new(format, &lengths).map_err(build_err)?;
    // htslib starts the first record where the header ends.
    let header_end = reader.position().virtual_offset();
    let mut scanner = BamScanner::new(Arc::clone(&file), reader, ScanOptions::default());
    let mut indexer = Indexer {
        file: &file,
        header: &header,
        empty: &empty,
        blocks: Blocks::default(),
        pending: None,
        spare_name: Vec::new(),
        records: 0,
    };
    let mut missing_eof = None;
    let mut first = true;
    while let Some(batch) = scanner.next_batch()? {
        missing_eof = missing_eof.or(batch.missing_eof);
        for ((bytes, _), &voffset) in batch.records().zip(&batch.voffsets) {
            // The first record starts where the header ends: the same
            // place, or the next block's start read as the end of the
            // header's block.
            let start = if first { header_end } else { voffset };
            first = false;
            indexer.record(&mut builder, bytes, voffset, start)?;
        }
    }
    // htslib's final `bgzf_tell`: past the last block with data, at the
    // first of the empty blocks that follow it (the EOF block).
    let end = empty.stream_end().unwrap_or(0);
    let final_offset = empty.run_start(end) << 16;
    indexer.flush(&mut builder, final_offset)?;
    let mut offsets = indexer.blocks.offsets;
    if offsets.last().is_none_or(|&b| b < final_offset >> 16) {
        offsets.push(final_offset >> 16);
    }
    let records = indexer.records;
    let index = builder.finish(&offsets).map_err(build_err)?;
    Ok(IndexedBam {
        index,
        records,
        missing_eof,
    })
}

/// The state of one file's indexing between records.
struct Indexer<'a> {
    file: &'a Arc<str>,
    header: &'a Header,
    empty: &'a EmptyBlocks,
    blocks: Blocks,
    pending: Option<Pending>,
    spare_name: Vec<u8>,
    records: u64,
}

impl Indexer<'_> {
    /// htslib's offset for a record start the scanner gives as `voffset`:
    /// at a block's first byte, the first of the empty blocks before it.
    fn htslib_start(&self, voffset: u64) -> u64 {
        if voffset & 0xffff == 0 {
            self.empty.run_start(voffset >> 16) << 16
        } else {
            voffset
        }
    }

    /// Takes the record `framed` (with its `block_size`), which the scanner
    /// found at `voffset` and htslib would find at `start`.
    fn record(
        &mut self,
        builder: &mut IndexBuilder,
        framed: &[u8],
        voffset: u64,
        start: u64,
    ) -> Result<(), IndexBamError> {
        self.records += 1;
        let number = self.records;
        let rec = &framed[4..];
        let l_read_name = rec[8] as usize;
        let n_cigar = u16::from_le_bytes([rec[12], rec[13]]) as usize;
        let needed = FIXED_LEN + l_read_name + 4 * n_cigar;
        if needed > rec.len() {
            return Err(IndexBamError::Record {
                file: Arc::clone(self.file),
                record: number,
                voffset,
                block: voffset >> 16,
                source: RecordError::Overrun {
                    needed: needed as u64,
                    available: rec.len(),
                },
            });
        }
        let r = RecordRef::new(rec);
        let flag = r.flag();
        let mapped = flag & flags::UNMAPPED == 0;
        let beg = i64::from(r.pos());
        // htslib's bam_read1 takes a long CIGAR out of its CG tag first.
        let span = match cg_cigar_field(r) {
            Some((at, n)) => {
                let ops = r.aux_bytes().get(at + 8..at + 8 + 4 * n).unwrap_or(&[]);
                cigar::Cigar::new(ops).reference_length()
            }
            None => r.reference_length(),
        };
        let vstart = self.blocks.logical(self.htslib_start(start));
        if let Some(p) = self.pending.take() {
            self.push(builder, p, vstart)?;
        }
        let mut name = std::mem::take(&mut self.spare_name);
        name.clear();
        name.extend_from_slice(r.read_name());
        self.pending = Some(Pending {
            rec: IndexRecord {
                ref_id: r.ref_id(),
                beg,
                end: record_end(beg, span, mapped),
                mapped,
                vstart,
                vend: vstart,
            },
            number,
            voffset,
            flag,
            name,
        });
        Ok(())
    }

    /// Pushes the record held back, which ends at `vend` (logical).
    fn push(
        &mut self,
        builder: &mut IndexBuilder,
        mut p: Pending,
        vend: u64,
    ) -> Result<(), IndexBamError> {
        p.rec.vend = vend;
        if let Err(source) = builder.push(&p.rec) {
            let reference = usize::try_from(p.rec.ref_id)
                .ok()
                .and_then(|t| self.header.refs().get(t))
                .map_or_else(
                    || "*".to_string(),
                    |r| String::from_utf8_lossy(&r.name).into_owned(),
                );
            return Err(IndexBamError::Unindexable(Box::new(UnindexableRecord {
                file: Arc::clone(self.file),
                record: p.number,
                name: String::from_utf8_lossy(&p.name).into_owned(),
                reference,
                flag: p.flag,
                pos: p.rec.beg + 1,
                voffset: p.voffset,
                block: p.voffset >> 16,
                source,
            })));
        }
        self.spare_name = p.name;
        Ok(())
    }

    /// Pushes the last record, which ends at the real offset `final_offset`.
    fn flush(
        &mut self,
        builder: &mut IndexBuilder,
        final_offset: u64,
    ) -> Result<(), IndexBamError> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let vend = self.blocks.logical(final_offset);
        self.push(builder, p, vend)
    }
}
