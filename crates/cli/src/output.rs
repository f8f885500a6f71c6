//! Writing the sorted records: BAM through the ordered parallel BGZF writer
//! (blocked exactly as htslib blocks them, so sizes compare and the index can
//! be built on the fly), or SAM text formatted as htslib formats it, plain or
//! in BGZF. A file is written under a temporary name and renamed into place
//! only after its last byte; every write error surfaces. The temporary files
//! of the output and of its index are created by `Destinations::prepare`
//! before any input is read, so an output that cannot be created stops the
//! run at once, with its name in the message.

use crate::args::OutFormat;
use crate::cleanup::{CreateError, Debris, PendingFile};
use crate::config::{Config, IndexKind};
use alnsort_bam::header::Header;
use alnsort_bam::sam_format::format_sam_record;
use alnsort_bam::RecordRef;
use alnsort_bgzf::block::{CompressionLevel, MAX_PAYLOAD};
use alnsort_bgzf::writer::ParallelWriter;
use alnsort_index::{IndexBuilder, IndexRecord};
use anyhow::{anyhow, Context, Result};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of SAM text collected before one write.
const SAM_FLUSH: usize = 1 << 20;
/// Bytes of compressed BGZF blocks collected before one write.
const OUT_BUFFER: usize = 1 << 20;

/// What the run reports about its output.
#[derive(Debug, Default, Clone)]
pub struct OutputSummary {
    pub records: u64,
    pub bytes_uncompressed: u64,
    pub bytes_written: u64,
}

/// A write to the output failed. The message names the destination; the
/// cause is kept whole (its kind tells a closed standard-output pipe, see
/// [`is_closed_stdout`]). It is printed inline rather than as a `source`
/// because the BGZF layer's I/O error already prints its own cause.
#[derive(Debug, thiserror::Error)]
#[error("writing {name}: {cause}")]
pub struct WriteError {
    name: String,
    to_stdout: bool,
    cause: io::Error,
}

fn write_error(name: &str, to_stdout: bool, cause: impl Into<io::Error>) -> anyhow::Error {
    anyhow::Error::new(WriteError {
        name: name.to_string(),
        to_stdout,
        cause: cause.into(),
    })
}

/// True when ERR comes from writing to standard output after its reader went
/// away (EPIPE): the run should end by SIGPIPE, quietly, as Unix filters do.
/// EPIPE on any other file stays an ordinary error.
pub fn is_closed_stdout(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<WriteError>()
            .is_some_and(|w| w.to_stdout && w.cause.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// A destination file reserved at the start of the run.
enum Reserved {
    /// The temporary file beside the destination, created and open.
    Ready(PendingFile, File),
    /// A device or a pipe (`-o /dev/null`, a FIFO): written in place, and
    /// opened only when the output starts (opening a FIFO waits for its
    /// reader).
    Later(PathBuf),
}

impl Reserved {
    fn new(what: &'static str, path: &Path, debris: &Debris) -> Result<Reserved> {
        // A directory is refused now (opening it fails); a device or a pipe
        // waits for the output to start.
        if crate::cleanup::resolve_destination(path).1 && !path.is_dir() {
            return Ok(Reserved::Later(path.to_path_buf()));
        }
        let (p, f) =
            PendingFile::create(path, debris).map_err(|e| CreateError::new(what, path, e))?;
        Ok(Reserved::Ready(p, f))
    }

    fn open(self, what: &'static str, debris: &Debris) -> Result<(PendingFile, File)> {
        match self {
            Reserved::Ready(p, f) => Ok((p, f)),
            Reserved::Later(path) => {
                Ok(PendingFile::create(&path, debris)
                    .map_err(|e| CreateError::new(what, &path, e))?)
            }
        }
    }
}

/// The output's and the index's files, created before the input is read.
pub struct Destinations {
    output: Option<Reserved>,
    index: Option<Reserved>,
}

impl Destinations {
    /// Creates the temporary files beside the output and the index (both
    /// registered as debris), or says which of them cannot be created and
    /// why. Nothing at the destinations themselves is touched.
    pub fn prepare(cfg: &Config, debris: &Debris) -> Result<Destinations> {
        let output = match &cfg.output {
            Some(p) => Some(Reserved::new("output", p, debris)?),
            None => None,
        };
        let index = match &cfg.index {
            Some(t) => Some(Reserved::new("index", &t.path, debris)?),
            None => None,
        };
        Ok(Destinations { output, index })
    }
}

pub struct Output {
    kind: Kind,
    pending: Option<PendingFile>,
    index: Option<(IndexKind, PathBuf, IndexBuilder)>,
    index_file: Option<(PendingFile, File)>,
    name: String,
    to_stdout: bool,
    header: Arc<Header>,
    records: u64,
}

enum Kind {
    Bgzf {
        writer: ParallelWriter<BufWriter<File>>,
        cur: Vec<u8>,
        block: u64,
        sam_text: bool,
        line: Vec<u8>,
    },
    Sam {
        out: std::io::BufWriter<File>,
        bytes: u64,
        line: Vec<u8>,
    },
}

fn stdout_file() -> Result<File> {
    // SAFETY: fd 1 is open for the life of the process; dup gives this File
    // its own descriptor to own and close.
    let fd = unsafe { libc::dup(1) };
    if fd < 0 {
        return Err(anyhow!(
            "cannot write to standard output: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(unsafe { File::from_raw_fd(fd) })
}

impl Output {
    /// Starts the output in the files `dest` reserved (or on stdout) and
    /// writes the header.
    pub fn create(
        cfg: &Config,
        dest: Destinations,
        header: Arc<Header>,
        pool: Arc<rayon::ThreadPool>,
        debris: &Debris,
    ) -> Result<Output> {
        let (file, pending, name) = match (&cfg.output, dest.output) {
            (Some(p), Some(r)) => {
                let (pending, f) = r.open("output", debris)?;
                (f, Some(pending), p.display().to_string())
            }
            (None, _) => (stdout_file()?, None, "standard output".to_string()),
            (Some(p), None) => {
                return Err(anyhow!(
                    "internal error: no file was reserved for the output {}",
                    p.display()
                ))
            }
        };
        let to_stdout = pending.is_none();
        let index_file = match dest.index {
            Some(r) => Some(r.open("index", debris)?),
            None => None,
        };
        let index = match &cfg.index {
            Some(t) => {
                let format = match t.kind {
                    IndexKind::Csi => alnsort_index::IndexFormat::DEFAULT_CSI,
                    IndexKind::Bai => alnsort_index::IndexFormat::Bai,
                };
                let lengths: Vec<u64> = header.refs().iter().map(|r| r.len).collect();
                let builder = IndexBuilder::new(format, &lengths)
                    .map_err(|e| anyhow!("cannot index this output: {e}"))?;
                Some((t.kind, t.path.clone(), builder))
            }
            None => None,
        };
        let mut out = match cfg.format {
            OutFormat::Sam => {
                let mut w = std::io::BufWriter::with_capacity(SAM_FLUSH, file);
                let text = header.to_sam_text();
                w.write_all(&text)
                    .map_err(|e| write_error(&name, to_stdout, e))?;
                Output {
                    kind: Kind::Sam {
                        out: w,
                        bytes: text.len() as u64,
                        line: Vec::with_capacity(1024),
                    },
                    pending,
                    index,
                    index_file,
                    name,
                    to_stdout,
                    header,
                    records: 0,
                }
            }
            OutFormat::Bam | OutFormat::SamGz | OutFormat::Cram => {
                let level = CompressionLevel::new(cfg.level).map_err(|e| anyhow!("{e}"))?;
                // Compressed blocks are written in 1 MiB pieces, not 64 KiB.
                let writer =
                    ParallelWriter::new(BufWriter::with_capacity(OUT_BUFFER, file), pool, level);
                let sam_text = cfg.format == OutFormat::SamGz;
                let mut o = Output {
                    kind: Kind::Bgzf {
                        writer,
                        cur: Vec::new(),
                        block: 0,
                        sam_text,
                        line: Vec::new(),
                    },
                    pending,
                    index,
                    index_file,
                    name,
                    to_stdout,
                    header,
                    records: 0,
                };
                o.write_bgzf_header(sam_text)?;
                o
            }
        };
        out.records = 0;
        Ok(out)
    }

    fn write_bgzf_header(&mut self, sam_text: bool) -> Result<()> {
        let bytes = if sam_text {
            self.header.to_sam_text()
        } else {
            self.header.to_bam_bytes()
        };
        let Kind::Bgzf {
            writer, cur, block, ..
        } = &mut self.kind
        else {
            unreachable!()
        };
        // htslib writes the header and flushes (bam_hdr_write), so records
        // start in a block of their own.
        for piece in bytes.chunks(MAX_PAYLOAD) {
            let mut buf = writer.buffer();
            buf.extend_from_slice(piece);
            writer
                .write_block(buf)
                .map_err(|e| write_error(&self.name, self.to_stdout, e))?;
            *block += 1;
        }
        *cur = writer.buffer();
        Ok(())
    }

    /// Appends one record (with its block_size prefix).
    pub fn write_record(&mut self, rec: &[u8]) -> Result<()> {
        self.records += 1;
        match &mut self.kind {
            Kind::Sam { out, bytes, line } => {
                line.clear();
                format_sam_record(RecordRef::with_block_size(rec), &self.header, line);
                *bytes += line.len() as u64;
                out.write_all(line)
                    .map_err(|e| write_error(&self.name, self.to_stdout, e))
            }
            Kind::Bgzf {
                writer,
                cur,
                block,
                sam_text: true,
                line,
            } => {
                line.clear();
                format_sam_record(RecordRef::with_block_size(rec), &self.header, line);
                append_bgzf(writer, cur, block, line)
                    .map_err(|e| write_error(&self.name, self.to_stdout, e))?;
                Ok(())
            }
            Kind::Bgzf {
                writer,
                cur,
                block,
                sam_text: false,
                ..
            } => {
                // htslib's bam_write1: start a new block when the record does
                // not fit in what is left of the current one.
                if !cur.is_empty() && cur.len() + rec.len() > MAX_PAYLOAD {
                    flush_block(writer, cur, block)
                        .map_err(|e| write_error(&self.name, self.to_stdout, e))?;
                }
                let vstart = (*block << 16) | cur.len() as u64;
                append_bgzf(writer, cur, block, rec)
                    .map_err(|e| write_error(&self.name, self.to_stdout, e))?;
                if let Some((_, _, idx)) = &mut self.index {
                    let vend = (*block << 16) | cur.len() as u64;
                    let r = RecordRef::with_block_size(rec);
                    let beg = r.pos() as i64;
                    let unmapped = r.flag() & alnsort_bam::record::flags::UNMAPPED != 0;
                    let end = alnsort_index::record_end(beg, r.reference_length(), !unmapped);
                    let rec = IndexRecord {
                        ref_id: r.ref_id(),
                        beg,
                        end,
                        mapped: !unmapped,
                        vstart,
                        vend,
                    };
                    idx.push(&rec)
                        .map_err(|e| anyhow!("indexing the output: {e}"))?;
                }
                Ok(())
            }
        }
    }

    /// Flushes everything, writes the EOF block and the index, and renames
    /// the files into place.
    pub fn finish(self) -> Result<OutputSummary> {
        let Output {
            kind,
            pending,
            index,
            index_file,
            name,
            to_stdout,
            records,
            ..
        } = self;
        let fail = |e: io::Error| write_error(&name, to_stdout, e);
        let mut summary = OutputSummary {
            records,
            ..Default::default()
        };
        let mut block_offsets = Vec::new();
        match kind {
            Kind::Sam { mut out, bytes, .. } => {
                out.flush().map_err(fail)?;
                let f = out.into_inner().map_err(|e| fail(e.into_error()))?;
                if pending.as_ref().is_some_and(|p| !p.is_direct()) {
                    f.sync_all().map_err(fail)?;
                }
                summary.bytes_uncompressed = bytes;
                summary.bytes_written = bytes;
            }
            Kind::Bgzf {
                mut writer,
                mut cur,
                mut block,
                ..
            } => {
                if !cur.is_empty() {
                    flush_block(&mut writer, &mut cur, &mut block).map_err(|e| fail(e.into()))?;
                }
                let s = writer.finish().map_err(|e| fail(e.into()))?;
                let f = s.inner.into_inner().map_err(|e| fail(e.into_error()))?;
                if pending.as_ref().is_some_and(|p| !p.is_direct()) {
                    f.sync_all().map_err(fail)?;
                }
                summary.bytes_uncompressed = s.uncompressed_bytes;
                summary.bytes_written = s.compressed_bytes;
                block_offsets = s.block_offsets;
            }
        }
        if let Some((_, path, builder)) = index {
            let file = builder
                .finish(&block_offsets)
                .map_err(|e| anyhow!("building the index: {e}"))?;
            let bytes = if file.is_bgzf() {
                let level = CompressionLevel::default();
                let mut c = level.compressor();
                let mut block = Vec::new();
                // `file_bytes` expects each block appended; deflate_block
                // writes a whole block into its buffer.
                file.file_bytes(
                    |p, out| {
                        alnsort_bgzf::block::deflate_block(p, level, &mut block, &mut c)?;
                        out.extend_from_slice(&block);
                        Ok::<(), alnsort_bgzf::Error>(())
                    },
                    &alnsort_bgzf::block::EOF_BLOCK,
                )
                .map_err(|e| anyhow!("compressing the index: {e}"))?
            } else {
                file.into_content()
            };
            let Some((p, mut f)) = index_file else {
                return Err(anyhow!(
                    "internal error: no file was reserved for the index {}",
                    path.display()
                ));
            };
            let direct = p.is_direct();
            f.write_all(&bytes)
                .and_then(|_| if direct { Ok(()) } else { f.sync_all() })
                .map_err(|e| anyhow!("writing index {}: {e}", path.display()))?;
            // Output first, then its index, so an index never exists without
            // the file it indexes.
            if let Some(out) = pending {
                out.commit()
                    .with_context(|| format!("renaming output into place as {name}"))?;
            }
            p.commit()
                .with_context(|| format!("renaming index into place as {}", path.display()))?;
        } else if let Some(out) = pending {
            out.commit()
                .with_context(|| format!("renaming output into place as {name}"))?;
        }
        Ok(summary)
    }
}

fn flush_block(
    writer: &mut ParallelWriter<BufWriter<File>>,
    cur: &mut Vec<u8>,
    block: &mut u64,
) -> Result<(), alnsort_bgzf::Error> {
    let full = std::mem::replace(cur, writer.buffer());
    writer.write_block(full)?;
    *block += 1;
    Ok(())
}

/// Appends bytes, spilling into new blocks when one fills (a record longer
/// than a block spans blocks, as in htslib).
fn append_bgzf(
    writer: &mut ParallelWriter<BufWriter<File>>,
    cur: &mut Vec<u8>,
    block: &mut u64,
    mut bytes: &[u8],
) -> Result<(), alnsort_bgzf::Error> {
    while !bytes.is_empty() {
        let room = MAX_PAYLOAD - cur.len();
        let take = room.min(bytes.len());
        cur.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if cur.len() == MAX_PAYLOAD {
            flush_block(writer, cur, block)?;
        }
    }
    Ok(())
}
