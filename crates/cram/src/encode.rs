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
    let mut writer = cram::io::writer::Builder::default()
        .set_reference_sequence_repository(shared.repository.clone())
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
    crate::splice::renumbered_container(&writer.into_inner(), first, placeholder).map_err(|what| {
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
    // Bit (a - b'a') * 26 + (b - b'a') set when [a, b] is in use.
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
