//! CRAM output: framed BAM records in, CRAM containers out.

use crate::error::{take_reference_error, CramError};
use crate::options::{CramOptions, CramVersion};
use crate::reference::{RefHolding, RefSource, References};
use alnsort_pipeline::OrderedQueue;
use noodles_bam as bam;
use noodles_cram as cram;
use noodles_cram::codecs::Encoder;
use noodles_cram::container::BlockContentEncoderMap;
use noodles_sam::{self as sam, alignment::io::Write as _};
use std::io::Write;
use std::sync::Arc;

/// Writes sorted BAM records as CRAM. Each container (one slice of
/// [`RECORDS_PER_SLICE`] records) is encoded by its own job on the pool into
/// memory and written in order (`alnsort_pipeline::OrderedQueue`), its record
/// counter set for its place in the file (`splice`).
pub struct CramWriter<W: Write> {
    shared: Arc<Shared>,
    /// Writes the file definition and header container, the encoded
    /// containers (through `get_mut`) and the EOF container.
    writer: cram::io::Writer<Counted<W>>,
    /// The `.crai` lines of the containers written so far, when an index
    /// is wanted ([`CramWriter::with_index`]).
    crai: Option<Vec<u8>>,
    /// Records handed to encoding jobs so far.
    records: u64,
    /// The records of the slice being filled, checked as a whole before
    /// noodles gets them (`mates::check_slice`).
    slice: Vec<u8>,
    slice_starts: Vec<usize>,
    queue: OrderedQueue<Result<Encoded, CramError>>,
    /// Containers in flight before the writer waits for the oldest.
    depth: usize,
}

/// What every encoding job reads.
struct Shared {
    file: String,
    header: sam::Header,
    references: Arc<References>,
    encoders: BlockContentEncoderMap,
    /// Whether jobs work out their slice's `.crai` lines.
    index: bool,
}

/// One encoded container and, when an index is wanted, its slice's
/// `.crai` lines without the container's offset in the file.
struct Encoded {
    bytes: Vec<u8>,
    crai: Vec<CraiLine>,
}

/// A `.crai` line (htslib `cram_index_slice`): reference id, alignment
/// start, span, then the container's offset (known when it is written),
/// the slice's landmark and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CraiLine {
    reference: i32,
    start: i64,
    span: i64,
    landmark: u32,
    size: u32,
}

/// Counts the bytes written through it (the containers' offsets).
struct Counted<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Records per slice (and per container) in noodles-cram 0.102's writer:
/// mates within one slice are stored attached.
const RECORDS_PER_SLICE: usize = 10_240;

fn encoder_map(opts: &CramOptions) -> BlockContentEncoderMap {
    let gzip = Encoder::Gzip(match opts.level {
        Some(l) => flate2_level(l),
        None => Default::default(),
    });
    let data = match opts.version {
        CramVersion::V3_0 => gzip.clone(),
        CramVersion::V3_1 => Encoder::RansNx16(noodles_cram::codecs::rans_nx16::Flags::empty()),
    };
    let mut b = BlockContentEncoderMap::builder()
        .set_core_data_encoder(Some(gzip))
        .set_default_encoder(Some(data.clone()));
    for ds in ALL_DATA_SERIES {
        b = b.set_data_series_encoder(ds, Some(data.clone()));
    }
    if opts.version == CramVersion::V3_0 {
        // Qualities as htslib stores them in CRAM 3.0: rANS 4x8 order 1.
        // Against gzip it is both faster (deflate of the qualities was
        // most of CRAM output's CPU) and smaller.
        b = b.set_data_series_encoder(
            DataSeries::QualityScores,
            Some(Encoder::Rans4x8(noodles_cram::codecs::rans_4x8::Order::One)),
        );
    }
    b.build()
}

fn flate2_level(l: u32) -> flate2::Compression {
    flate2::Compression::new(l.min(9))
}

use noodles_cram::container::compression_header::data_series_encodings::DataSeries;

const ALL_DATA_SERIES: [DataSeries; 28] = [
    DataSeries::BamFlags,
    DataSeries::CramFlags,
    DataSeries::ReferenceSequenceIds,
    DataSeries::ReadLengths,
    DataSeries::AlignmentStarts,
    DataSeries::ReadGroupIds,
    DataSeries::Names,
    DataSeries::MateFlags,
    DataSeries::MateReferenceSequenceIds,
    DataSeries::MateAlignmentStarts,
    DataSeries::TemplateLengths,
    DataSeries::MateDistances,
    DataSeries::TagSetIds,
    DataSeries::FeatureCounts,
    DataSeries::FeatureCodes,
    DataSeries::FeaturePositionDeltas,
    DataSeries::DeletionLengths,
    DataSeries::StretchesOfBases,
    DataSeries::StretchesOfQualityScores,
    DataSeries::BaseSubstitutionCodes,
    DataSeries::InsertionBases,
    DataSeries::ReferenceSkipLengths,
    DataSeries::PaddingLengths,
    DataSeries::HardClipLengths,
    DataSeries::SoftClipBases,
    DataSeries::MappingQualities,
    DataSeries::Bases,
    DataSeries::QualityScores,
];

impl<W: Write> CramWriter<W> {
    /// Starts a CRAM file on `inner` and writes its header (`header_text`,
    /// SAM text), with each @SQ's M5 added where the header lacks it.
    /// `holding` says how long references stay loaded: only while slices
    /// use them ([`RefHolding::InUse`]) when the records come in coordinate
    /// order, else all until the end.
    pub fn new(
        file: &str,
        inner: W,
        header_text: &[u8],
        refs: &RefSource,
        opts: &CramOptions,
        holding: RefHolding,
        pool: Arc<rayon::ThreadPool>,
    ) -> Result<CramWriter<W>, CramError> {
        let mut header: sam::Header = std::str::from_utf8(header_text)
            .map_err(|e| e.to_string())
            .and_then(|t| t.parse::<sam::Header>().map_err(|e| e.to_string()))
            .map_err(|what| CramError::HeaderText {
                file: file.to_string(),
                what,
            })?;
        let references = refs.references(&header, holding);
        let header_err = |source| match take_reference_error(source) {
            Ok(r) => CramError::EncodeReference {
                file: file.to_string(),
                record: 0,
                source: Box::new(r),
            },
            Err(source) => CramError::Write {
                file: file.to_string(),
                source,
            },
        };
        if holding == RefHolding::InUse {
            // noodles' writer would load every reference lacking an M5
            // into one repository, keeping them all; computed here one at
            // a time and put where noodles puts them (last in the @SQ).
            use noodles_sam::header::record::value::map::reference_sequence::tag;
            for (id, m5) in references.missing_m5(&header).map_err(header_err)? {
                if let Some((_, rs)) = header.reference_sequences_mut().get_index_mut(id) {
                    rs.other_fields_mut()
                        .insert(tag::MD5_CHECKSUM, m5.into_bytes().into());
                }
            }
        }
        // The header's writer: with every M5 present noodles asks it for
        // no reference.
        let repository = references.lease().repository(None);
        let encoders = encoder_map(opts);
        let mut writer = cram::io::writer::Builder::default()
            .set_reference_sequence_repository(repository)
            .set_block_content_encoder_map(encoders.clone())
            .build_from_writer(Counted { inner, written: 0 });
        writer.write_header(&header).map_err(header_err)?;
        let depth = 2 * pool.current_num_threads().max(1);
        Ok(CramWriter {
            shared: Arc::new(Shared {
                file: file.to_string(),
                header,
                references,
                encoders,
                index: false,
            }),
            writer,
            crai: None,
            records: 0,
            slice: Vec::new(),
            slice_starts: Vec::new(),
            queue: OrderedQueue::new(pool, "CRAM encoding"),
            depth,
        })
    }

    /// Also builds the file's `.crai` (returned by
    /// [`CramWriter::finish_indexed`]); call before any record.
    pub fn with_index(mut self) -> CramWriter<W> {
        Arc::get_mut(&mut self.shared)
            .expect("with_index is called before any record is written")
            .index = true;
        self.crai = Some(Vec::new());
        self
    }

    /// Appends one BAM record (with its `block_size` prefix). Records are
    /// held until their slice is full, then checked and encoded.
    pub fn write_record(&mut self, framed: &[u8]) -> Result<(), CramError> {
        self.slice_starts.push(self.slice.len());
        self.slice.extend_from_slice(framed);
        if self.slice_starts.len() == RECORDS_PER_SLICE {
            self.flush_slice()?;
        }
        Ok(())
    }

    /// Hands the filled slice to an encoding job, then writes the
    /// containers done, waiting for the oldest while too many are in flight.
    fn flush_slice(&mut self) -> Result<(), CramError> {
        let slice = std::mem::take(&mut self.slice);
        let starts = std::mem::take(&mut self.slice_starts);
        let first = self.records;
        self.records += starts.len() as u64;
        let shared = Arc::clone(&self.shared);
        self.queue
            .push(move || encode_container(&shared, &slice, &starts, first));
        while self.queue.len() > self.depth {
            self.write_oldest()?;
        }
        while let Some(done) = self.queue.try_pop() {
            self.write_done(done)?;
        }
        Ok(())
    }

    fn write_oldest(&mut self) -> Result<(), CramError> {
        match self.queue.pop() {
            Some(done) => self.write_done(done),
            None => Ok(()),
        }
    }

    fn write_done(
        &mut self,
        done: Result<Result<Encoded, CramError>, alnsort_pipeline::Lost>,
    ) -> Result<(), CramError> {
        let file = &self.shared.file;
        let Encoded { bytes, crai } = done.map_err(|source| CramError::Lost {
            file: file.clone(),
            source,
        })??;
        if let Some(out) = &mut self.crai {
            let offset = self.writer.get_ref().written;
            for l in crai {
                // htslib's format: "%d\t%ld\t%ld\t%ld\t%d\t%d\n".
                writeln!(
                    out,
                    "{}\t{}\t{}\t{offset}\t{}\t{}",
                    l.reference, l.start, l.span, l.landmark, l.size
                )
                .expect("writing to memory");
            }
        }
        self.writer
            .get_mut()
            .write_all(&bytes)
            .map_err(|source| CramError::Write {
                file: file.clone(),
                source,
            })
    }

    /// Writes the last container and the EOF container; returns the
    /// underlying writer.
    pub fn finish(self) -> Result<W, CramError> {
        Ok(self.finish_indexed()?.0)
    }

    /// As [`CramWriter::finish`], also returning the `.crai` (gzip of
    /// htslib's text lines, one per slice and reference) when the writer
    /// was made [`CramWriter::with_index`].
    pub fn finish_indexed(mut self) -> Result<(W, Option<Vec<u8>>), CramError> {
        if !self.slice_starts.is_empty() {
            self.flush_slice()?;
        }
        while !self.queue.is_empty() {
            self.write_oldest()?;
        }
        let file = self.shared.file.clone();
        let records = self.records;
        self.writer.try_finish(&self.shared.header).map_err(
            |source| match take_reference_error(source) {
                Ok(r) => CramError::EncodeReference {
                    file: file.clone(),
                    record: records,
                    source: Box::new(r),
                },
                Err(source) => CramError::Write { file, source },
            },
        )?;
        let crai = self.crai.take().map(|text| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&text)
                .and_then(|_| gz.finish())
                .expect("compressing in memory")
        });
        Ok((self.writer.into_inner().inner, crai))
    }
}

/// Encodes one slice's records (framed BAM records at `starts` in `slice`;
/// `first` records precede them in the file) into one CRAM container.
fn encode_container(
    shared: &Shared,
    slice: &[u8],
    starts: &[usize],
    first: u64,
) -> Result<Encoded, CramError> {
    let file = &shared.file;
    if let Err((i, what)) = crate::mates::check_slice(slice, starts) {
        return Err(CramError::Unsupported {
            file: file.clone(),
            record: first + i as u64 + 1,
            what,
        });
    }
    let fail = |record: u64, source| match take_reference_error(source) {
        Ok(r) => CramError::EncodeReference {
            file: file.clone(),
            record,
            source: Box::new(r),
        },
        Err(source) => CramError::Encode {
            file: file.clone(),
            record,
            source,
        },
    };
    let records = |k: usize| {
        let end = starts.get(k + 1).copied().unwrap_or(slice.len());
        &slice[starts[k]..end]
    };
    // Where each record's RG tag is to stay a tag (see `read_group`).
    let mut kept_rg = Vec::new();
    for k in 0..starts.len() {
        let framed = records(k);
        let record = first + k as u64 + 1;
        if let Some(what) = refusal(framed) {
            return Err(CramError::Unsupported {
                file: file.clone(),
                record,
                what: what.into(),
            });
        }
        match read_group(framed, &shared.header) {
            Ok(ReadGroup::None | ReadGroup::Series) => {}
            Ok(ReadGroup::Tag(at)) => kept_rg.push((k, at)),
            Err(what) => {
                return Err(CramError::Unsupported {
                    file: file.clone(),
                    record,
                    what,
                })
            }
        }
    }
    let placeholder = if kept_rg.is_empty() {
        None
    } else {
        Some(placeholder_tag(slice, starts).ok_or_else(|| {
            CramError::Unsupported {
                file: file.clone(),
                record: first + kept_rg[0].0 as u64 + 1,
                what: "an RG tag to store as a tag, in a slice that uses every two-letter \
                       lower-case tag name (none is left to carry it past noodles-cram)"
                    .into(),
            }
        })?)
    };
    let mut kept_rg = kept_rg.into_iter().peekable();
    let mut renamed = Vec::new();
    // The references the slice's records use (noodles asks for the
    // reference of every record with a reference id and a position) stay
    // loaded until the job ends.
    let mut lease = shared.references.lease();
    let mut span: Option<(usize, usize)> = None;
    for k in 0..starts.len() {
        let r = records(k);
        let field = |at: usize| i32::from_le_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]]);
        let (tid, pos) = (field(4), field(8));
        if tid >= 0 && pos >= 0 {
            let t = tid as usize;
            span = Some(span.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
        }
    }
    let repository = match span {
        Some((a, b)) if a == b => lease.repository(Some(a)),
        // In coordinate order (the only order that holds references in
        // use) a reference strictly inside the span has no records in any
        // other slice.
        _ => lease.repository_between(span),
    };
    let mut writer = cram::io::writer::Builder::default()
        .set_reference_sequence_repository(repository)
        .set_block_content_encoder_map(shared.encoders.clone())
        .build_from_writer(Vec::new());
    let mut bam_record = bam::Record::default();
    for k in 0..starts.len() {
        let mut framed = records(k);
        let record = first + k as u64 + 1;
        if let (Some(&(j, at)), Some(p)) = (kept_rg.peek(), placeholder) {
            if j == k {
                kept_rg.next();
                renamed.clear();
                renamed.extend_from_slice(framed);
                renamed[at..at + 2].copy_from_slice(&p);
                framed = &renamed;
            }
        }
        let mut reader = bam::io::Reader::from(framed);
        reader
            .read_record(&mut bam_record)
            .map_err(|e| fail(record, e))?;
        writer
            .write_alignment_record(&shared.header, &bam_record)
            .map_err(|e| fail(record, e))?;
    }
    let last = first + starts.len() as u64;
    writer
        .try_finish(&shared.header)
        .map_err(|e| fail(last, e))?;
    let stream = writer.into_inner();
    let (bytes, slice_info) = crate::splice::renumbered_container(&stream, first, placeholder)
        .map_err(|what| CramError::Encode {
            file: file.clone(),
            record: first + 1,
            source: std::io::Error::other(format!(
                "the container noodles-cram wrote for records {}..{last} cannot be placed: {what}",
                first + 1
            )),
        })?;
    let crai = if shared.index {
        crai_lines(slice_info, (0..starts.len()).map(records))
    } else {
        Vec::new()
    };
    Ok(Encoded { bytes, crai })
}

/// The `.crai` lines of a slice, as htslib's `cram_index_slice` makes them:
/// one line from the slice header, or, for a slice of several references
/// (id -2), one line per run of records on one reference, from the first
/// record's start to the furthest end (`cram_index_build_multiref`; a
/// record's end as htslib's decoder sets it: the last reference base its
/// CIGAR covers, never before its start, and its start when unmapped).
fn crai_lines<'a>(
    slice: crate::splice::SliceInfo,
    records: impl Iterator<Item = &'a [u8]>,
) -> Vec<CraiLine> {
    let line = |reference, start, span| CraiLine {
        reference,
        start,
        span,
        landmark: slice.landmark,
        size: slice.size,
    };
    if slice.reference != -2 {
        return vec![line(slice.reference, slice.start as i64, slice.span as i64)];
    }
    let mut lines = Vec::new();
    let mut run: Option<(i32, i64, i64)> = None;
    for framed in records {
        let view = alnsort_bam::RecordRef::with_block_size(framed);
        let reference = view.ref_id();
        let start = view.pos() as i64 + 1;
        let end = if view.flag() & 0x4 != 0 {
            start
        } else {
            (start - 1 + view.reference_length()).max(start)
        };
        match &mut run {
            Some((r, _, e)) if *r == reference => *e = (*e).max(end),
            _ => {
                if let Some((r, s, e)) = run {
                    lines.push(line(r, s, e - s + 1));
                }
                run = Some((reference, start, end));
            }
        }
    }
    if let Some((r, s, e)) = run {
        lines.push(line(r, s, e - s + 1));
    }
    lines
}

/// How a record's read group is stored, as htslib 1.24 stores it
/// (`cram_encode_aux`).
#[derive(Debug, PartialEq)]
enum ReadGroup {
    /// No RG tag.
    None,
    /// An `RG:Z` naming an @RG of the header: the read-group data series
    /// (noodles sets it; `splice` removes the tag noodles also keeps), which
    /// readers give back as the last tag.
    Series,
    /// Any other RG tag (a name not in the header, which htslib stores
    /// verbatim with a warning, or a type other than Z), kept as a tag in
    /// its place; the value is the offset of its tag name in the framed
    /// record. noodles-cram 0.102 refuses such a tag, so the encoder hands
    /// it over under a placeholder name that `splice` renames RG.
    Tag(usize),
}

fn read_group(framed: &[u8], header: &sam::Header) -> Result<ReadGroup, String> {
    let view = alnsort_bam::RecordRef::with_block_size(framed);
    let aux = view.aux();
    let aux_at = framed.len() - aux.len();
    let mut found = ReadGroup::None;
    let mut i = 0;
    while i + 3 <= aux.len() {
        let (ty, val) = (aux[i + 2], &aux[i + 3..]);
        // Validation has checked the aux area; stop at anything it let by.
        let Some(len) = alnsort_bam::record::aux_value_len(ty, val) else {
            break;
        };
        if aux[i..i + 2] == *b"RG" {
            if found != ReadGroup::None {
                return Err("more than one RG tag (samtools would keep one of them, \
                            alnsort does not choose)"
                    .into());
            }
            let in_header = ty == b'Z' && header.read_groups().contains_key(&val[..len - 1]);
            found = if in_header {
                ReadGroup::Series
            } else {
                ReadGroup::Tag(aux_at + i)
            };
        }
        i += 3 + len;
    }
    Ok(found)
}

/// A tag name no record of the slice uses (two lower-case letters, `rg`
/// first), to carry RG tags past noodles-cram; `None` if all are used.
fn placeholder_tag(slice: &[u8], starts: &[usize]) -> Option<[u8; 2]> {
    // Entry (a - b'a') * 26 + (b - b'a') is set when [a, b] is in use.
    let mut used = vec![false; 26 * 26];
    for (k, &at) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(slice.len());
        let aux = alnsort_bam::RecordRef::with_block_size(&slice[at..end]).aux();
        let mut i = 0;
        while i + 3 <= aux.len() {
            let (a, b) = (aux[i], aux[i + 1]);
            if a.is_ascii_lowercase() && b.is_ascii_lowercase() {
                used[(a - b'a') as usize * 26 + (b - b'a') as usize] = true;
            }
            let Some(len) = alnsort_bam::record::aux_value_len(aux[i + 2], &aux[i + 3..]) else {
                break;
            };
            i += 3 + len;
        }
    }
    let first = (b'r' - b'a') as usize * 26 + (b'g' - b'a') as usize;
    (0..used.len())
        .map(|n| (first + n) % used.len())
        .find(|&n| !used[n])
        .map(|n| [b'a' + (n / 26) as u8, b'a' + (n % 26) as u8])
}

/// Why noodles-cram 0.102 cannot write this record as samtools would read it
/// back, if it cannot.
fn refusal(framed: &[u8]) -> Option<&'static str> {
    let view = alnsort_bam::RecordRef::with_block_size(framed);
    if view.flag() & 0x4 == 0 && view.n_cigar_op() > 0 && view.l_seq() == 0 {
        return Some(
            "no sequence (SEQ *) but an alignment: the CRAM encoder (noodles-cram 0.102) \
             cannot encode it (it fails on the missing bases); write BAM, or convert the \
             BAM with samtools view -C",
        );
    }
    if view.l_seq() > 0 && view.qual().first() == Some(&0xff) {
        return Some(
            "bases but no qualities (QUAL *): the CRAM encoder (noodles-cram 0.102) writes \
             such records into a slice that samtools cannot decode (\"Failure to decode \
             slice\"); write BAM, or convert the BAM with samtools view -C",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::md_nm::tests::record;

    fn header() -> sam::Header {
        "@HD\tVN:1.6\n@RG\tID:g1\n@RG\tID:g2\n".parse().unwrap()
    }

    #[test]
    fn read_groups_are_stored_as_htslib_stores_them() {
        let h = header();
        let rg = |aux: &[u8]| read_group(&record(4, -1, &[], b"AC", aux), &h);
        assert_eq!(rg(b"XIC\x01"), Ok(ReadGroup::None));
        assert_eq!(rg(b"XIC\x01RGZg2\0"), Ok(ReadGroup::Series));
        // Not in the header, or not of type Z: kept as a tag, found where
        // its name starts (the framed record's aux area starts at 4 + 32 +
        // name 2 + bases 1 + qualities 2 = 41).
        assert_eq!(rg(b"XIC\x01RGZg3\0"), Ok(ReadGroup::Tag(45)));
        assert_eq!(rg(b"RGC\x07XIC\x01"), Ok(ReadGroup::Tag(41)));
        assert!(rg(b"RGZg1\0RGZg2\0")
            .unwrap_err()
            .contains("more than one RG tag"));
    }

    /// `record` on reference `tid` (md_nm's helper puts every record on 0).
    fn on(tid: i32, framed: Vec<u8>) -> Vec<u8> {
        let mut f = framed;
        f[4..8].copy_from_slice(&tid.to_le_bytes());
        f
    }

    #[test]
    fn crai_lines_of_a_slice_of_several_references_go_by_reference() {
        let info = |reference| crate::splice::SliceInfo {
            reference,
            start: 7,
            span: 90,
            landmark: 300,
            size: 5000,
        };
        let line = |reference, start, span| CraiLine {
            reference,
            start,
            span,
            landmark: 300,
            size: 5000,
        };
        let recs = [
            // 0-based 99, 10M2D5M: 1-based 100..116.
            on(
                0,
                record(0, 99, &[(0, 10), (2, 2), (0, 5)], &[b'A'; 15], b""),
            ),
            // 1-based 101..104, inside the first.
            on(0, record(0, 100, &[(0, 4)], b"ACGT", b"")),
            // Soft clips only: its end is its start (200).
            on(1, record(0, 199, &[(4, 4)], b"ACGT", b"")),
            // Placed unmapped: end at its start (300).
            on(1, record(4, 299, &[], b"AC", b"")),
            on(-1, record(4, -1, &[], b"AC", b"")),
        ];
        let got = crai_lines(info(-2), recs.iter().map(|r| &r[..]));
        assert_eq!(got, [line(0, 100, 17), line(1, 200, 101), line(-1, 0, 1)]);
        // One reference: the slice header's values.
        let got = crai_lines(info(1), recs.iter().map(|r| &r[..]));
        assert_eq!(got, [line(1, 7, 90)]);
    }

    #[test]
    fn the_placeholder_is_a_tag_name_no_record_of_the_slice_uses() {
        let mut slice = Vec::new();
        let mut starts = Vec::new();
        for aux in [&b"rgZa\0"[..], b"XIC\x01rhC\x02", b""] {
            starts.push(slice.len());
            slice.extend_from_slice(&record(4, -1, &[], b"AC", aux));
        }
        assert_eq!(placeholder_tag(&slice, &starts), Some(*b"ri"));
        assert_eq!(placeholder_tag(&slice[..0], &[]), Some(*b"rg"));
    }
}
