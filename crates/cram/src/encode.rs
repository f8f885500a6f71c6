//! CRAM output: framed BAM records in, CRAM containers out.

use crate::error::{take_reference_error, CramError};
use crate::options::{CramOptions, CramVersion};
use crate::reference::RefSource;
use noodles_bam as bam;
use noodles_cram as cram;
use noodles_cram::codecs::Encoder;
use noodles_cram::container::BlockContentEncoderMap;
use noodles_sam::{self as sam, alignment::io::Write as _};
use std::io::Write;

/// Writes sorted BAM records as CRAM.
pub struct CramWriter<W: Write> {
    file: String,
    writer: cram::io::Writer<W>,
    header: sam::Header,
    record: bam::Record,
    records: u64,
    /// The records of the slice being filled, checked as a whole before
    /// noodles gets them (`mates::check_slice`).
    slice: Vec<u8>,
    slice_starts: Vec<usize>,
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
    ) -> Result<CramWriter<W>, CramError> {
        let header: sam::Header = std::str::from_utf8(header_text)
            .map_err(|e| e.to_string())
            .and_then(|t| t.parse::<sam::Header>().map_err(|e| e.to_string()))
            .map_err(|what| CramError::HeaderText {
                file: file.to_string(),
                what,
            })?;
        let repository = refs.repository(&header);
        let mut writer = cram::io::writer::Builder::default()
            .set_reference_sequence_repository(repository)
            .set_block_content_encoder_map(encoder_map(opts))
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
        Ok(CramWriter {
            file: file.to_string(),
            writer,
            header,
            record: bam::Record::default(),
            records: 0,
            slice: Vec::new(),
            slice_starts: Vec::new(),
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

    fn flush_slice(&mut self) -> Result<(), CramError> {
        let slice = std::mem::take(&mut self.slice);
        let starts = std::mem::take(&mut self.slice_starts);
        if let Err((i, what)) = crate::mates::check_slice(&slice, &starts) {
            return Err(CramError::Unsupported {
                file: self.file.clone(),
                record: self.records + i as u64 + 1,
                what,
            });
        }
        for (k, &at) in starts.iter().enumerate() {
            let end = starts.get(k + 1).copied().unwrap_or(slice.len());
            self.encode_one(&slice[at..end])?;
        }
        self.slice = slice;
        self.slice.clear();
        self.slice_starts = starts;
        self.slice_starts.clear();
        Ok(())
    }

    fn encode_one(&mut self, framed: &[u8]) -> Result<(), CramError> {
        self.records += 1;
        let record = self.records;
        let file = &self.file;
        let fail = |source| match take_reference_error(source) {
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
        let view = alnsort_bam::RecordRef::with_block_size(framed);
        if view.flag() & 0x4 == 0 && view.n_cigar_op() > 0 && view.l_seq() == 0 {
            return Err(CramError::Unsupported {
                file: file.clone(),
                record,
                what:
                    "no sequence (SEQ *) but an alignment: the CRAM encoder (noodles-cram 0.102) \
                       cannot encode it (it fails on the missing bases); write BAM, or convert the \
                       BAM with samtools view -C"
                        .into(),
            });
        }
        if view.aux_get(*b"RG").is_some() {
            return Err(CramError::Unsupported {
                file: file.clone(),
                record,
                what: "an RG tag: the CRAM encoder (noodles-cram 0.102) stores RG both as a tag \
                       and as the read-group series, so samtools would read it twice; write BAM, \
                       or convert the BAM with samtools view -C"
                    .into(),
            });
        }
        let mut reader = bam::io::Reader::from(framed);
        reader.read_record(&mut self.record).map_err(fail)?;
        self.writer
            .write_alignment_record(&self.header, &self.record)
            .map_err(fail)
    }

    /// Writes the last container and the EOF container; returns the
    /// underlying writer.
    pub fn finish(mut self) -> Result<W, CramError> {
        if !self.slice_starts.is_empty() {
            self.flush_slice()?;
        }
        let file = self.file.clone();
        let records = self.records;
        self.writer.try_finish(&self.header).map_err(|source| {
            match take_reference_error(source) {
                Ok(r) => CramError::EncodeReference {
                    file: file.clone(),
                    record: records,
                    source: Box::new(r),
                },
                Err(source) => CramError::Write { file, source },
            }
        })?;
        Ok(self.writer.into_inner())
    }
}
