//! CRAM input: the header on the opening thread, containers cut on the
//! reading thread ([`RawContainer`]: header parsed and CRC-checked, body
//! as bytes), each container decoded to framed BAM records by a pool job
//! ([`PendingContainer::decode`]): its slices' blocks decompressed
//! ([`SliceBlocks`]) and its records decoded straight to BAM bytes
//! (`records.rs`, `records/`), both by this crate.

use crate::codecs::{self, CodecScratch};
use crate::container::{
    content_type, read_block_bytes, ContainerHeader, RawBlock, RawContainer, SliceBlocks,
};
use crate::error::{parse_header_text, take_reference_error, ContainerFault, CramError};
use crate::records::{CompressionHeader, FileInfo, SliceDecoder};
use crate::reference::{M5Mismatch, RefHolding, RefSource, References};
use noodles_sam as sam;
use std::io::{self, Read};
use std::sync::Arc;

/// What every container's decode needs: the file's name, what the records
/// need of its header (reference lengths, read group names), the references
/// (shared; held as [`CramReader::reference_holding`] says).
#[derive(Clone)]
pub struct DecodeContext {
    file: Arc<str>,
    references: Arc<References>,
    info: Arc<FileInfo>,
}

/// An opened CRAM input whose header has been read.
pub struct CramReader<R: Read> {
    reader: R,
    ctx: DecodeContext,
    text: Vec<u8>,
    version: (u8, u8),
    holding: RefHolding,
    containers: u64,
    records: u64,
}

/// One container's bytes, read and not yet decoded.
pub struct PendingContainer {
    container: RawContainer,
    /// Containers of data before this one (0-based).
    pub index: u64,
    /// Records of the input before this container's first.
    pub first_record: u64,
    /// Records in this container.
    pub records: u64,
}

impl<R: Read> CramReader<R> {
    /// Reads the file definition and the SAM header from `inner`, which is
    /// at the start of the file (its magic included).
    pub fn open(file: &str, inner: R, refs: &RefSource) -> Result<CramReader<R>, CramError> {
        let header_err = |source| CramError::Header {
            file: file.to_string(),
            source,
        };
        let mut reader = inner;
        let (version, text) = read_file_header(&mut reader).map_err(|e| match e {
            HeaderFault::Version(major, minor) => CramError::Version {
                file: file.to_string(),
                major,
                minor,
                supported: SUPPORTED_NAMES,
            },
            HeaderFault::Io(source) => header_err(source),
        })?;
        // The text block may be padded with NULs after the header.
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        let text = sq_lengths_from_fasta(file, &text[..end], refs);
        let parsed = parse_header_text(file, &text)?;
        let holding = RefHolding::for_order(says_coordinate(&parsed));
        let references = refs.references(&parsed, holding, M5Mismatch::Warn { file: file.into() });
        let info = FileInfo {
            prefix: file.rsplit('/').next().unwrap_or(file).as_bytes().to_vec(),
            ref_lengths: parsed
                .reference_sequences()
                .values()
                .map(|rs| usize::from(rs.length()) as u64)
                .collect(),
            read_groups: parsed
                .read_groups()
                .keys()
                .map(|k| AsRef::<[u8]>::as_ref(k).to_vec())
                .collect(),
        };
        Ok(CramReader {
            reader,
            ctx: DecodeContext {
                file: file.into(),
                references,
                info: Arc::new(info),
            },
            text,
            version,
            holding,
            containers: 0,
            records: 0,
        })
    }

    /// The SAM header text as the file holds it.
    pub fn header_text(&self) -> &[u8] {
        &self.text
    }

    /// The file's CRAM version (major, minor).
    pub fn version(&self) -> (u8, u8) {
        self.version
    }

    /// How the references are held: only while containers use them when
    /// the header says the records are in coordinate order (`@HD SO:coordinate`),
    /// else all of them until the end.
    pub fn reference_holding(&self) -> RefHolding {
        self.holding
    }

    /// What each container's decode needs (cheap to clone).
    pub fn context(&self) -> DecodeContext {
        self.ctx.clone()
    }

    /// Reads the next container holding records; `None` at the end (the
    /// EOF container, or the end of the stream).
    pub fn next_container(&mut self) -> Result<Option<PendingContainer>, CramError> {
        loop {
            let mut container = RawContainer::default();
            let more = container
                .read_from_version(&mut self.reader, self.version.0)
                .map_err(|source| CramError::ReadContainer {
                    file: self.ctx.file.to_string(),
                    records_before: self.records,
                    source,
                })?;
            if !more || container.header.is_eof() {
                return Ok(None);
            }
            let records = u64::try_from(container.header.record_count).map_err(|_| {
                CramError::ReadContainer {
                    file: self.ctx.file.to_string(),
                    records_before: self.records,
                    source: ContainerFault::RecordCount {
                        count: container.header.record_count,
                    }
                    .into(),
                }
            })?;
            if records == 0 {
                // An empty container (no slices) carries nothing.
                continue;
            }
            let p = PendingContainer {
                container,
                index: self.containers,
                first_record: self.records,
                records,
            };
            self.containers += 1;
            self.records += records;
            return Ok(Some(p));
        }
    }
}

/// htslib's `sanitise_SQ_lines` when a CRAM is opened with a FASTA given:
/// an @SQ whose LN differs from the length of the FASTA's sequence of that
/// name takes the FASTA's length (in place in the text, which the records'
/// MD/NM at the reference's end also follow), with a warning. A FASTA
/// that cannot be read leaves the text as it is: its error comes when a
/// slice needs it.
fn sq_lengths_from_fasta(file: &str, text: &[u8], refs: &RefSource) -> Vec<u8> {
    let Ok(Some(lengths)) = refs.fasta_lengths() else {
        return text.to_vec();
    };
    let mut out = Vec::with_capacity(text.len());
    for line in text.split_inclusive(|&b| b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let fields: Vec<&[u8]> = body.split(|&b| b == b'\t').collect();
        let sn = fields.iter().find_map(|f| f.strip_prefix(b"SN:"));
        let fasta_len = sn.and_then(|sn| lengths.get(sn));
        let ln = fields.iter().position(|f| f.starts_with(b"LN:"));
        let (Some(sn), Some(&len), Some(ln), true) = (sn, fasta_len, ln, fields[0] == b"@SQ")
        else {
            out.extend_from_slice(line);
            continue;
        };
        let given = &fields[ln][3..];
        if given == len.to_string().as_bytes() {
            out.extend_from_slice(line);
            continue;
        }
        eprintln!(
            "[W::alnsort] {file}: @SQ {} has LN:{}, but the --reference sequence of that name \
             has {len} bases: LN:{len} used, as samtools does",
            String::from_utf8_lossy(sn),
            String::from_utf8_lossy(given)
        );
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            if i == ln {
                out.extend_from_slice(format!("LN:{len}").as_bytes());
            } else {
                out.extend_from_slice(f);
            }
        }
        out.extend_from_slice(&line[body.len()..]);
    }
    out
}

/// The CRAM versions (major, minor) this crate reads, and how its errors
/// name them.
const SUPPORTED: [(u8, u8); 4] = [(2, 0), (2, 1), (3, 0), (3, 1)];
const SUPPORTED_NAMES: &str = "2.0, 2.1, 3.0 and 3.1";

/// Bytes of the file definition (CRAM spec §6): the magic number, the major
/// and minor version, and a 20-byte file id.
const FILE_DEFINITION_LEN: usize = 4 + 2 + 20;

enum HeaderFault {
    /// A version this crate does not read (major, minor).
    Version(u8, u8),
    Io(io::Error),
}

impl From<io::Error> for HeaderFault {
    fn from(e: io::Error) -> HeaderFault {
        HeaderFault::Io(e)
    }
}

/// Reads the file definition and the header container (CRAM spec §6 and
/// §7.1: a container whose first block holds the SAM header text after its
/// 32-bit length, laid out as the file's major version lays containers
/// and blocks out), refusing a version this crate does not read before
/// anything version-specific is read. Returns (major, minor) and the text.
fn read_file_header<R: Read>(r: &mut R) -> Result<((u8, u8), Vec<u8>), HeaderFault> {
    let invalid = |fault: ContainerFault| HeaderFault::Io(fault.into());
    let mut def = [0u8; FILE_DEFINITION_LEN];
    r.read_exact(&mut def)?;
    if &def[..4] != crate::MAGIC {
        return Err(invalid(ContainerFault::NotCram));
    }
    let version = (def[4], def[5]);
    if !SUPPORTED.contains(&version) {
        return Err(HeaderFault::Version(version.0, version.1));
    }
    // As htslib's `cram_read_SAM_hdr`, the container's blocks are read
    // from the stream whatever its length says (CRAM 2.1 writers gave
    // lengths short of them), then any padding its length leaves after
    // them is skipped.
    let (container, _) = ContainerHeader::read_from_version(r, version.0)?
        .ok_or_else(|| invalid(ContainerFault::NoHeaderContainer))?;
    let blocks = usize::try_from(container.block_count).unwrap_or(0);
    if blocks == 0 {
        return Err(invalid(ContainerFault::EmptyHeaderContainer));
    }
    let mut first = Vec::new();
    read_block_bytes(r, version.0, &mut first)?;
    let mut consumed = first.len();
    let mut other = Vec::new();
    for _ in 1..blocks {
        read_block_bytes(r, version.0, &mut other)?;
        consumed += other.len();
    }
    if container.length > consumed {
        let pad = (container.length - consumed) as u64;
        let n = io::copy(&mut r.take(pad), &mut io::sink())?;
        if n != pad {
            return Err(invalid(ContainerFault::Bytes {
                what: "the header container's padding",
                found: n,
                expected: pad,
            }));
        }
    }
    let mut body = &first[..];
    let block = RawBlock::read_version(&mut body, version.0)?;
    if block.content_type != content_type::FILE_HEADER {
        return Err(invalid(ContainerFault::HeaderBlockType {
            content_type: block.content_type,
        }));
    }
    let mut data = Vec::new();
    codecs::decode_block(&block, &mut data, &mut CodecScratch::default())?;
    let (len, rest) = data.split_first_chunk::<4>().ok_or_else(|| {
        invalid(ContainerFault::CutShortBefore {
            what: "the header block",
            field: "length",
        })
    })?;
    let len = i32::from_le_bytes(*len);
    let text = usize::try_from(len)
        .ok()
        .and_then(|n| rest.get(..n))
        .ok_or_else(|| {
            invalid(ContainerFault::HeaderTextLength {
                length: len,
                held: rest.len(),
            })
        })?;
    Ok((version, text.to_vec()))
}

impl PendingContainer {
    /// The container as read (header parsed, body as bytes): its slices
    /// decode with [`SliceBlocks::decode_slice`] over
    /// [`RawContainer::slice_bytes`].
    pub fn raw(&self) -> &RawContainer {
        &self.container
    }

    /// Decodes every slice of the container and appends its records to
    /// `out` as BAM records (each with its `block_size`), in file order.
    /// Returns the number of records.
    pub fn decode(&self, ctx: &DecodeContext, out: &mut Vec<u8>) -> Result<u64, CramError> {
        thread_local! {
            // Each worker's decompressed blocks, record buffers and
            // compression header buffer, reused from slice to slice.
            static BUFFERS: std::cell::RefCell<(SliceBlocks, SliceDecoder, Vec<u8>)> =
                std::cell::RefCell::default();
        }
        let mut n = 0u64;
        // The references this container's records use stay loaded until
        // its decode ends.
        let mut lease = ctx.references.lease();
        let result = BUFFERS.with_borrow_mut(|(blocks, decoder, header_buf)| -> io::Result<()> {
            let major = self.container.major;
            let ch = CompressionHeader::read(
                self.container.compression_header_bytes()?,
                major,
                header_buf,
            )?;
            for i in 0..self.container.slice_count() {
                blocks.decode_slice_version(self.container.slice_bytes(i)?, major)?;
                n += decoder.decode(
                    &ch,
                    blocks,
                    &ctx.info,
                    &mut lease,
                    self.first_record + n,
                    out,
                )? as u64;
            }
            Ok(())
        });
        result.map_err(|e| self.fail(ctx, e))?;
        if n != self.records {
            return Err(self.fail(
                ctx,
                ContainerFault::RecordsInSlices {
                    header: self.records,
                    slices: n,
                }
                .into(),
            ));
        }
        Ok(n)
    }
}

impl PendingContainer {
    fn fail(&self, ctx: &DecodeContext, source: io::Error) -> CramError {
        match take_reference_error(source) {
            Ok(r) => CramError::DecodeReference {
                file: ctx.file.to_string(),
                index: self.index,
                first: self.first_record + 1,
                end: self.first_record + self.records,
                source: Box::new(r),
            },
            Err(source) => CramError::Decode {
                file: ctx.file.to_string(),
                index: self.index,
                first: self.first_record + 1,
                end: self.first_record + self.records,
                source,
            },
        }
    }
}

/// Whether a header's `@HD SO` is `coordinate`.
pub(crate) fn says_coordinate(header: &sam::Header) -> bool {
    header
        .header()
        .and_then(|hd| hd.other_fields().get(b"SO"))
        .is_some_and(|so| AsRef::<[u8]>::as_ref(so) == b"coordinate")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::md_nm::tests::record;
    use crate::{CramOptions, CramWriter};

    /// A CRAM of mapped reads with substitutions, insertions, deletions
    /// and soft clips, and unmapped reads, on one generated reference;
    /// with the reference source that serves it.
    fn small_cram(dir: &std::path::Path) -> (Vec<u8>, RefSource) {
        let len = 3000usize;
        let seq: Vec<u8> = (0..len).map(|i| b"ACGT"[(i * 7 + i / 5) % 4]).collect();
        let fa = dir.join("r.fa");
        std::fs::write(&fa, [&b">c0\n"[..], &seq, b"\n"].concat()).expect("fa");
        let mut src = RefSource::default();
        src.fasta = Some(fa);
        let header = format!(
            "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:c0\tLN:{len}\tM5:{}\n",
            crate::reference::md5_hex(&seq)
        );
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("pool"),
        );
        let mut w = CramWriter::new(
            "t.cram",
            Vec::new(),
            &alnsort_bam::header::parse_sam_header(header.lines().map(str::as_bytes))
                .expect("header"),
            &src,
            &CramOptions::default(),
            RefHolding::All,
            pool,
        )
        .expect("writer");
        for k in 0..80usize {
            let pos = 10 + 30 * k;
            let mut read = seq[pos..pos + 40].to_vec();
            read[k % 40] = if read[k % 40] == b'A' { b'C' } else { b'A' };
            let (cigar, bases): (Vec<(u8, u32)>, Vec<u8>) = match k % 4 {
                0 => (vec![(0, 40)], read),
                1 => (vec![(4, 3), (0, 37)], read),
                2 => {
                    let mut b = read[..20].to_vec();
                    b.extend_from_slice(b"TT");
                    b.extend_from_slice(&read[20..]);
                    (vec![(0, 20), (1, 2), (0, 20)], b)
                }
                _ => (
                    vec![(0, 20), (2, 3), (0, 17)],
                    [&read[..20], &read[23..]].concat(),
                ),
            };
            w.write_record(&record(0, pos as i32, &cigar, &bases, b"XIC\x01"))
                .expect("record");
        }
        for _ in 0..5 {
            let mut r = record(4, -1, &[], b"ACGTAC", b"");
            r[4..8].copy_from_slice(&(-1i32).to_le_bytes());
            w.write_record(&r).expect("unmapped");
        }
        (w.finish().expect("finish"), src)
    }

    #[test]
    fn damaged_blocks_give_errors_not_panics() {
        let dir = tempfile::tempdir().expect("dir");
        let (bytes, src) = small_cram(dir.path());
        let mut reader = CramReader::open("t.cram", &bytes[..], &src).expect("open");
        let ctx = reader.context();
        let pending = reader.next_container().expect("read").expect("a container");
        let mut out = Vec::new();
        assert_eq!(pending.decode(&ctx, &mut out).expect("decode"), 85);
        let raw = pending.raw();
        let ch =
            CompressionHeader::read(raw.compression_header_bytes().unwrap(), 3, &mut Vec::new())
                .expect("compression header");
        let mut blocks = SliceBlocks::default();
        blocks
            .decode_slice(raw.slice_bytes(0).unwrap())
            .expect("slice");
        let (core, external) = (blocks.core.clone(), blocks.external.clone());
        let mut decoder = SliceDecoder::default();
        let mut lease = ctx.references.lease();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rand = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n.max(1) as u64) as usize
        };
        let (mut failed, mut passed) = (0, 0);
        for round in 0..2000 {
            blocks.core.clone_from(&core);
            blocks.external.clone_from(&external);
            let target = rand(external.len() + 1);
            let buf = match target {
                0 => &mut blocks.core,
                k => &mut blocks.external[k - 1].1,
            };
            if buf.is_empty() {
                continue;
            }
            if round % 5 == 0 {
                let keep = rand(buf.len());
                buf.truncate(keep);
            } else {
                for _ in 0..1 + rand(3) {
                    let at = rand(buf.len());
                    buf[at] ^= 1 << rand(8);
                }
            }
            out.clear();
            match decoder.decode(&ch, &blocks, &ctx.info, &mut lease, 0, &mut out) {
                Ok(_) => passed += 1,
                Err(e) => {
                    assert!(
                        e.to_string().starts_with("record") || e.to_string().contains("records"),
                        "{e}"
                    );
                    // What the record or the mates hit is typed too.
                    match crate::DecodeError::of(&e) {
                        Some(
                            crate::DecodeError::InRecord { error, .. }
                            | crate::DecodeError::InMates { error, .. },
                        ) => assert!(crate::DecodeError::of(error).is_some(), "{error:?}"),
                        _ => panic!("not a record's error: {e:?}"),
                    }
                    failed += 1;
                }
            }
        }
        assert!(
            failed > 100 && passed > 0,
            "{failed} failed, {passed} passed"
        );
    }
}
