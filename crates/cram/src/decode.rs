//! CRAM input: the header on the opening thread, containers cut on the
//! reading thread, each container decoded to framed BAM records by a pool
//! job ([`PendingContainer::decode`]).

use crate::error::{take_reference_error, CramError};
use crate::mates;
use crate::records::{CompressionHeader, FileInfo, SliceBlocks, SliceDecoder, SliceHeader};
use crate::reference::{RefHolding, RefSource, References};
use crate::splice::read_block;
use crate::to_bam::ToBam;
use noodles_cram as cram;
use noodles_sam as sam;
use std::io::{self, Read};
use std::sync::Arc;

/// What every container's decode needs: the file's name, its parsed
/// header, the references (shared; held as [`CramReader::reference_holding`]
/// says).
#[derive(Clone)]
pub struct DecodeContext {
    file: Arc<str>,
    header: Arc<sam::Header>,
    references: Arc<References>,
    info: Arc<FileInfo>,
    /// Decode through noodles-cram's records (`ALNSORT_CRAM_DECODER=noodles`),
    /// kept to compare the two decoders.
    noodles: bool,
}

/// Keeps a copy of the bytes noodles reads, so that a container's body can
/// be read by alnsort's own decoder.
pub struct Recording<R> {
    inner: R,
    seen: Vec<u8>,
}

impl<R: Read> Read for Recording<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// An opened CRAM input whose header has been read.
pub struct CramReader<R: Read> {
    reader: cram::io::Reader<Recording<R>>,
    ctx: DecodeContext,
    text: Vec<u8>,
    version: (u8, u8),
    holding: RefHolding,
    containers: u64,
    records: u64,
}

/// One container's bytes, read and not yet decoded.
pub struct PendingContainer {
    container: cram::io::reader::Container,
    /// The container's bytes after its header.
    body: Vec<u8>,
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
        let mut reader = cram::io::Reader::new(Recording {
            inner,
            seen: Vec::new(),
        });
        let (version, text) = {
            let mut hr = reader.header_reader();
            hr.read_magic_number().map_err(header_err)?;
            let v = hr.read_format_version().map_err(header_err)?;
            hr.read_file_id().map_err(header_err)?;
            let mut cr = hr.container_reader().map_err(header_err)?;
            let mut text = Vec::new();
            cr.raw_sam_header_reader()
                .and_then(|mut r| r.read_to_end(&mut text))
                .map_err(header_err)?;
            cr.discard_to_end().map_err(header_err)?;
            ((v.major(), v.minor()), text)
        };
        if version.0 != 3 {
            return Err(CramError::HeaderText {
                file: file.to_string(),
                what: format!(
                    "CRAM version {}.{} is not supported (alnsort reads CRAM 3.0 and 3.1)",
                    version.0, version.1
                ),
            });
        }
        // The text block may be padded with NULs after the header.
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        let text = text[..end].to_vec();
        let parsed: sam::Header = std::str::from_utf8(&text)
            .map_err(|e| e.to_string())
            .and_then(|t| t.parse::<sam::Header>().map_err(|e| e.to_string()))
            .map_err(|what| CramError::HeaderText {
                file: file.to_string(),
                what,
            })?;
        let holding = RefHolding::for_order(says_coordinate(&parsed));
        let references = refs.references(&parsed, holding);
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
        reader.get_mut().seen.clear();
        Ok(CramReader {
            reader,
            ctx: DecodeContext {
                file: file.into(),
                header: Arc::new(parsed),
                references,
                info: Arc::new(info),
                noodles: std::env::var_os("ALNSORT_CRAM_DECODER").is_some_and(|v| v == "noodles"),
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
            let mut container = cram::io::reader::Container::default();
            self.reader.get_mut().seen.clear();
            let n = self
                .reader
                .read_container(&mut container)
                .map_err(|source| CramError::ReadContainer {
                    file: self.ctx.file.to_string(),
                    records_before: self.records,
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            let records = container.header().record_count() as u64;
            if records == 0 {
                // An empty container (no slices) carries nothing.
                continue;
            }
            let seen = &mut self.reader.get_mut().seen;
            let body = seen.split_off(seen.len() - n);
            let p = PendingContainer {
                container,
                body,
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

impl PendingContainer {
    /// Decodes every slice of the container and appends its records to
    /// `out` as BAM records (each with its `block_size`), in file order.
    /// Returns the number of records.
    pub fn decode(&self, ctx: &DecodeContext, out: &mut Vec<u8>) -> Result<u64, CramError> {
        if !ctx.noodles {
            return self.decode_own(ctx, out);
        }
        let fail = |source: io::Error| match take_reference_error(source) {
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
        };
        let compression_header = self.container.compression_header().map_err(fail)?;
        let mut n = 0u64;
        // The references this container's records use stay loaded until
        // its decode ends.
        let mut lease = ctx.references.lease();
        // The reference of a container whose slices all use one (its
        // header's reference id), or `None` for a container of unmapped
        // records or of several references. noodles-cram 0.102 keeps the
        // type of the header's reference context private, so the id is
        // found through its public methods: `update` with no record leaves
        // only the "no reference" context as it was, and `update` with a
        // record on reference `k` keeps a single-reference context single
        // only when `k` is its reference.
        let context = self.container.header().reference_sequence_context();
        let one_reference = if context.is_many() {
            None
        } else {
            let mut unmapped = context;
            unmapped.update(None, None, None);
            let at = noodles_core::Position::MIN;
            (0..ctx.header.reference_sequences().len())
                .filter(|_| unmapped.is_many())
                .find(|&k| {
                    let mut c = context;
                    c.update(Some(k), Some(at), Some(at));
                    !c.is_many()
                })
        };
        let repository = lease.repository(one_reference);
        let mut to_bam = ToBam::default();
        let mut starts = Vec::new();
        let result = (|| -> io::Result<()> {
            for slice in self.container.slices() {
                let slice = slice?;
                let (core, external) = codec_panic_as_error(|| slice.decode_blocks())?;
                let records = slice.records(
                    repository.clone(),
                    &ctx.header,
                    &compression_header,
                    &core,
                    &external,
                )?;
                let slice_start = out.len();
                starts.clear();
                out.reserve(records.len() * 400);
                for r in &records {
                    starts.push(out.len() - slice_start);
                    let reference = |ref_id: usize| lease.sequence(ref_id);
                    to_bam.append(&ctx.header, r, reference, out)?;
                    n += 1;
                }
                mates::fix_attached_tlen(&mut out[slice_start..], &starts);
            }
            Ok(())
        })();
        result.map_err(fail)?;
        if n != self.records {
            return Err(fail(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the container header counts {} records, its slices hold {n}",
                    self.records
                ),
            )));
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

    /// [`PendingContainer::decode`] through alnsort's own record decoder.
    fn decode_own(&self, ctx: &DecodeContext, out: &mut Vec<u8>) -> Result<u64, CramError> {
        let body = &self.body[..];
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let raw = |at: &mut usize, what: &str| -> io::Result<(u8, u32, &[u8])> {
            let b = read_block(body, at).map_err(|e| invalid(format!("{what}: {e}")))?;
            Ok((b.method, b.content_id, b.data))
        };
        let mut n = 0u64;
        let mut lease = ctx.references.lease();
        let mut decoder = SliceDecoder::default();
        let result = (|| -> io::Result<()> {
            let mut at = 0;
            let (method, _, data) = raw(&mut at, "compression header")?;
            if method != 0 {
                return Err(invalid("a compressed compression header block".into()));
            }
            let ch = CompressionHeader::parse(data)?;
            let landmarks = self.container.header().landmarks();
            for (i, slice) in self.container.slices().enumerate() {
                let slice = slice?;
                let mut at = landmarks[i];
                let (method, _, data) = raw(&mut at, "slice header")?;
                if method != 0 {
                    return Err(invalid("a compressed slice header block".into()));
                }
                let header = SliceHeader::parse(data)?;
                let mut tok3 = Vec::new();
                for _ in 0..header.blocks {
                    let (method, id, _) = raw(&mut at, "slice block")?;
                    if method == 8 {
                        tok3.push(id as i32);
                    }
                }
                let (core, external) = codec_panic_as_error(|| slice.decode_blocks())?;
                let blocks = SliceBlocks {
                    header,
                    core: &core,
                    external: external
                        .iter()
                        .map(|(id, d)| {
                            let id = *id;
                            (id, &d[..], tok3.contains(&id))
                        })
                        .collect(),
                };
                n += decoder.decode(
                    &ch,
                    &blocks,
                    &ctx.info,
                    &mut lease,
                    self.first_record + n,
                    out,
                )? as u64;
            }
            Ok(())
        })();
        result.map_err(|e| self.fail(ctx, e))?;
        if n != self.records {
            return Err(self.fail(
                ctx,
                invalid(format!(
                    "the container header counts {} records, its slices hold {n}",
                    self.records
                )),
            ));
        }
        Ok(n)
    }
}

/// Whether a header's `@HD SO` is `coordinate`.
pub(crate) fn says_coordinate(header: &sam::Header) -> bool {
    header
        .header()
        .and_then(|hd| hd.other_fields().get(b"SO"))
        .is_some_and(|so| AsRef::<[u8]>::as_ref(so) == b"coordinate")
}

/// noodles-cram's block decoding (`f`), with a panic inside it (a stream
/// its codecs do not handle: noodles-cram 0.102's name tokenizer stops on a
/// token stream that duplicates a zero-padded digits' length stream, which
/// samtools 1.24 writes in CRAM 3.1) made an error that says what to do.
fn codec_panic_as_error<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "a block of this slice uses a codec stream that the CRAM decoder (noodles-cram) \
                 cannot decode ({why}); convert the file with `samtools view -O cram,version=3.0` \
                 or to BAM and sort that"
            ),
        ))
    })
}
