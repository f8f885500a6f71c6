//! CRAM output: framed BAM records in, CRAM containers out.

use crate::error::{take_reference_error, CramError};
use crate::options::{CramOptions, CramVersion};
use crate::reference::RefSource;
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
    writer: cram::io::Writer<W>,
    /// Records handed to encoding jobs so far.
    records: u64,
    /// The records of the slice being filled, checked as a whole before
    /// noodles gets them (`mates::check_slice`).
    slice: Vec<u8>,
    slice_starts: Vec<usize>,
    queue: OrderedQueue<Result<Vec<u8>, CramError>>,
    /// Containers in flight before the writer waits for the oldest.
    depth: usize,
}

/// What every encoding job reads.
struct Shared {
    file: String,
    header: sam::Header,
    repository: noodles_fasta::Repository,
    encoders: BlockContentEncoderMap,
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
    /// SAM text). noodles adds each @SQ's M5 where the header lacks it.
    pub fn new(
        file: &str,
        inner: W,
        header_text: &[u8],
        refs: &RefSource,
        opts: &CramOptions,
        pool: Arc<rayon::ThreadPool>,
    ) -> Result<CramWriter<W>, CramError> {
        let header: sam::Header = std::str::from_utf8(header_text)
            .map_err(|e| e.to_string())
            .and_then(|t| t.parse::<sam::Header>().map_err(|e| e.to_string()))
            .map_err(|what| CramError::HeaderText {
                file: file.to_string(),
                what,
            })?;
        let repository = refs.repository(&header);
        let encoders = encoder_map(opts);
        let mut writer = cram::io::writer::Builder::default()
            .set_reference_sequence_repository(repository.clone())
            .set_block_content_encoder_map(encoders.clone())
            .build_from_writer(inner);
        writer
            .write_header(&header)
            .map_err(|source| match take_reference_error(source) {
                Ok(r) => CramError::EncodeReference {
                    file: file.to_string(),
                    record: 0,
                    source: Box::new(r),
                },
                Err(source) => CramError::Write {
                    file: file.to_string(),
                    source,
                },
            })?;
        let depth = 2 * pool.current_num_threads().max(1);
        Ok(CramWriter {
            shared: Arc::new(Shared {
                file: file.to_string(),
                header,
                repository,
                encoders,
            }),
            writer,
            records: 0,
            slice: Vec::new(),
            slice_starts: Vec::new(),
            queue: OrderedQueue::new(pool, "CRAM encoding"),
            depth,
        })
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
        done: Result<Result<Vec<u8>, CramError>, alnsort_pipeline::Lost>,
    ) -> Result<(), CramError> {
        let file = &self.shared.file;
        let bytes = done.map_err(|source| CramError::Lost {
            file: file.clone(),
            source,
        })??;
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
    pub fn finish(mut self) -> Result<W, CramError> {
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
        Ok(self.writer.into_inner())
    }
}

/// Encodes one slice's records (framed BAM records at `starts` in `slice`;
/// `first` records precede them in the file) into one CRAM container.
fn encode_container(
    shared: &Shared,
    slice: &[u8],
    starts: &[usize],
    first: u64,
) -> Result<Vec<u8>, CramError> {
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
    let mut writer = cram::io::writer::Builder::default()
        .set_reference_sequence_repository(shared.repository.clone())
        .set_block_content_encoder_map(shared.encoders.clone())
        .build_from_writer(Vec::new());
    let mut bam_record = bam::Record::default();
    for (k, &at) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(slice.len());
        let framed = &slice[at..end];
        let record = first + k as u64 + 1;
        if let Some(what) = refusal(framed) {
            return Err(CramError::Unsupported {
                file: file.clone(),
                record,
                what: what.into(),
            });
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
    crate::splice::renumbered_container(&writer.into_inner(), first).map_err(|what| {
        CramError::Encode {
            file: file.clone(),
            record: first + 1,
            source: std::io::Error::other(format!(
                "the container noodles-cram wrote for records {}..{last} cannot be placed: {what}",
                first + 1
            )),
        }
    })
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
    if view.aux_get(*b"RG").is_some() {
        return Some(
            "an RG tag: the CRAM encoder (noodles-cram 0.102) stores RG both as a tag \
             and as the read-group series, so samtools would read it twice; write BAM, \
             or convert the BAM with samtools view -C",
        );
    }
    None
}
