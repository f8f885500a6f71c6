//! Where the sorted records go: the files (or standard output) that
//! `alnsort_bam::writer::Writer` writes BAM or SAM into, and the index file
//! `alnsort_index` makes. A file is written under a temporary name and
//! renamed into place only after its last byte is on disk; its writeback is
//! started while it is written ([`Writeback`]), so the final fsync has little
//! left to wait for. Every write error surfaces. The temporary files of the
//! output and of its index are created by `Destinations::prepare` before any
//! input is read, so an output that cannot be created stops the run at once,
//! with its name in the message.

use crate::config::{Config, IndexKind};
use crate::error::{Cause, Context, CreateError, Error, OutputError, Result};
use crate::io::cleanup::{Debris, PendingFile};
use crate::options::sort::OutFormat;
use crate::report::progress::thread_cpu_seconds;
use alnsort_bam::header::Header;
use alnsort_bam::writer::{Format, Writer, WriterOptions};
use alnsort_bgzf::CompressionLevel;
use alnsort_index::IndexFormat;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the run reports about its output.
#[derive(Debug, Default, Clone)]
pub struct OutputSummary {
    pub records: u64,
    pub bytes_uncompressed: u64,
    pub bytes_written: u64,
    /// CPU seconds of the thread that took the merged records and handed
    /// them to the writer (merge consumer, block packing; an index is fed
    /// on the block-writing thread), from the
    /// output's start to its finish: the serial part of the write stage.
    pub write_consume_s: f64,
}

fn write_error(name: &str, to_stdout: bool, cause: impl Into<Cause>) -> Error {
    Error::from(OutputError {
        name: name.to_string(),
        to_stdout,
        cause: cause.into(),
    })
}

/// True when ERR comes from writing to standard output after its reader went
/// away (EPIPE): the run should end by SIGPIPE, quietly, as Unix filters do.
/// EPIPE on any other file stays an ordinary error.
pub fn is_closed_stdout(err: &Error) -> bool {
    err.find::<OutputError>()
        .is_some_and(|w| w.to_stdout && w.cause.io_kind() == Some(io::ErrorKind::BrokenPipe))
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
        if crate::io::cleanup::resolve_destination(path).1 && !path.is_dir() {
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
    /// `--flagstat` and `--idxstats`.
    qc: Option<crate::report::qc::QcFiles>,
}

impl Destinations {
    /// Creates the temporary files beside the output and the index (both
    /// registered as debris), or says which of them cannot be created and
    /// why. Nothing at the destinations themselves is touched.
    pub fn prepare(cfg: &Config, debris: &Debris) -> Result<Destinations> {
        let output = match &cfg.output {
            // A dataset directory: checked now, made by the writer.
            Some(_) if cfg.format == OutFormat::Parquet => {
                crate::io::columnar::check_destination(cfg)?;
                None
            }
            Some(p) => Some(Reserved::new("output", p, debris)?),
            None => None,
        };
        let index = match &cfg.index {
            Some(t) => Some(Reserved::new("index", &t.path, debris)?),
            None => None,
        };
        let qc = crate::report::qc::QcFiles::prepare(cfg, debris)?;
        Ok(Destinations { output, index, qc })
    }
}

/// BAM/SAM through `alnsort_bam::writer`, CRAM through `alnsort_cram`, or a
/// Parquet dataset through `alnsort_columnar`.
enum Sink {
    Hts(Box<Writer<Writeback>>),
    Parquet(Box<crate::io::columnar::ParquetSink>),
    Cram {
        writer: Box<alnsort_cram::CramWriter<Writeback>>,
        records: u64,
        bytes: u64,
    },
}

/// A chunk of the sorted stream as the block packer's units.
struct ChunkRecords(alnsort_sort::Chunk);

impl alnsort_bgzf::Units for ChunkRecords {
    fn count(&self) -> usize {
        self.0.len()
    }

    fn unit(&self, i: usize) -> &[u8] {
        self.0.record(i)
    }

    fn unit_len(&self, i: usize) -> usize {
        self.0.record_len(i)
    }

    fn fitting(&self, from: usize, room: usize) -> (usize, usize) {
        self.0.fitting(from, room, 0)
    }

    fn prefetch(&self, i: usize) {
        self.0.prefetch(i);
    }
}

/// The one record sink of the runs: `alnsort sort` and `merge` write
/// whole files through it ([`Output::create`]), a stage reduce a part of
/// one ([`Output::part`]).
pub struct Output {
    writer: Sink,
    pending: Option<PendingFile>,
    index: Option<IndexOut>,
    name: String,
    to_stdout: bool,
    cpu_at_start: f64,
    /// The QC reports to write from the counts (`--flagstat`,
    /// `--idxstats`), the header they name the references from, and a
    /// CRAM output's counts (BAM's and SAM's are the writer's).
    qc: Option<(crate::report::qc::QcFiles, Arc<Header>)>,
    cram_qc: Option<alnsort_bam::qc::QcTally>,
}

/// The index file being written beside the output, and what goes in it.
struct IndexOut {
    path: PathBuf,
    pending: PendingFile,
    file: File,
    /// A part index (`alnsort_index::PartIndexWriter`'s bytes, merged by
    /// the stages' assemble), not an index file of its own.
    part: bool,
}

fn stdout_file() -> Result<File> {
    // SAFETY: fd 1 is open for the life of the process; dup gives this File
    // its own descriptor to own and close.
    let fd = unsafe { libc::dup(1) };
    if fd < 0 {
        return Err(Error::context(
            "cannot write to standard output",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: fd is the descriptor dup just opened, owned by nothing else.
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
        Self::create_resumable(cfg, dest, header, pool, debris, None)
    }

    /// [`Output::create`] for a sort with `--resume`: a BGZF output file
    /// (BAM, BGZF-compressed SAM) goes on from the start a killed run kept
    /// in DIR, and says to `resume` how far it is on disk as it goes
    /// (`run::resume::Resume::output`). Other outputs are written whole.
    pub fn create_resumable(
        cfg: &Config,
        dest: Destinations,
        header: Arc<Header>,
        pool: Arc<rayon::ThreadPool>,
        debris: &Debris,
        resume: Option<&Arc<crate::run::resume::Resume>>,
    ) -> Result<Output> {
        let cpu_at_start = thread_cpu_seconds();
        if cfg.format == OutFormat::Parquet {
            let sink = crate::io::columnar::ParquetSink::create(
                cfg,
                &header,
                dest.qc.is_some(),
                debris,
                pool,
            )?;
            return Ok(Output {
                writer: Sink::Parquet(Box::new(sink)),
                pending: None,
                index: None,
                name: cfg
                    .output
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                to_stdout: false,
                cpu_at_start,
                qc: dest.qc.map(|q| (q, Arc::clone(&header))),
                cram_qc: None,
            });
        }
        let (file, pending, name) = match (&cfg.output, dest.output) {
            (Some(p), Some(r)) => {
                let (pending, f) = r.open("output", debris)?;
                (f, Some(pending), p.display().to_string())
            }
            (None, _) => (stdout_file()?, None, "standard output".to_string()),
            (Some(p), None) => {
                return Err(Error::Internal(format!(
                    "no file was reserved for the output {}",
                    p.display()
                )))
            }
        };
        let to_stdout = pending.is_none();
        // Writeback is started early only for a file renamed into place
        // (not for a pipe, a device or standard output).
        let durable = pending.as_ref().is_some_and(|p| !p.is_direct());
        let bgzf = cfg.format != OutFormat::Cram && hts_format(cfg) != Format::Sam;
        let (file, resuming) = match (resume, &pending) {
            (Some(r), Some(p)) if durable && bgzf => {
                r.output(&p.tmp, &p.dest, file, header.to_sam_text().as_slice())?
            }
            _ => (file, alnsort_bgzf::Resuming::default()),
        };
        let start = resuming.kept.end();
        let index = match (&cfg.index, dest.index) {
            (Some(t), Some(r)) => {
                let (pending, file) = r.open("index", debris)?;
                Some(IndexOut {
                    path: t.path.clone(),
                    pending,
                    file,
                    part: false,
                })
            }
            (None, _) => None,
            (Some(t), None) => {
                return Err(Error::Internal(format!(
                    "no file was reserved for the index {}",
                    t.path.display()
                )))
            }
        };
        let options = WriterOptions {
            format: hts_format(cfg),
            level: CompressionLevel::new(cfg.level).context("output compression level")?,
            header: true,
            eof: true,
            index: cfg.index.as_ref().map(|t| match t.kind {
                IndexKind::Csi => IndexFormat::DEFAULT_CSI,
                IndexKind::Bai => IndexFormat::Bai,
            }),
        };
        let qc = dest.qc.map(|q| (q, Arc::clone(&header)));
        let mut cram_qc = None;
        let writer = if cfg.format == OutFormat::Cram {
            let w = alnsort_cram::CramWriter::new(
                &name,
                Writeback::new(file, durable),
                &header,
                &cfg.refs,
                &cfg.cram,
                alnsort_cram::RefHolding::for_order(
                    cfg.order == alnsort_bam::keys::SortOrder::Coordinate,
                ),
                pool,
            )
            .map_err(|e| write_error(&name, to_stdout, e))?;
            // CRAM output is indexed by a .crai, whatever the index's name.
            let w = if index.is_some() { w.with_index() } else { w };
            if qc.is_some() {
                cram_qc = Some(alnsort_bam::qc::QcTally::new(header.n_ref()));
            }
            Sink::Cram {
                writer: Box::new(w),
                records: 0,
                bytes: 0,
            }
        } else {
            let mut w = Writer::resuming(
                Writeback::new_at(file, durable, start),
                header,
                options,
                pool,
                resuming,
            )
            .map_err(|e| write_error(&name, to_stdout, e))?;
            if qc.is_some() {
                w.count_qc().map_err(|e| write_error(&name, to_stdout, e))?;
            }
            Sink::Hts(Box::new(w))
        };
        Ok(Output {
            writer,
            pending,
            index,
            name,
            to_stdout,
            cpu_at_start,
            qc,
            cram_qc,
        })
    }

    /// Starts a part of a distributed sort's output at `path` (a stage
    /// reduce's): the records of one key range in `cfg`'s format, without
    /// header or EOF block, and with `index` its part index at
    /// `index_path` (offsets relative to the part's first byte). The
    /// stages' assemble puts the header before the parts and the EOF block
    /// after them, byte for byte, and merges the part indexes: so a part is
    /// BAM, SAM or BGZF-compressed SAM, whose pieces concatenate. CRAM is
    /// not (each file starts with its own file definition and header
    /// container, and a container's slices name their records' places in
    /// the whole file): refused here as `crate::stages::plan::stage_config` refuses it.
    pub fn part(
        cfg: &Config,
        path: &Path,
        index_path: Option<&Path>,
        header: Arc<Header>,
        pool: Arc<rayon::ThreadPool>,
        debris: &Debris,
    ) -> Result<Output> {
        let cpu_at_start = thread_cpu_seconds();
        let name = path.display().to_string();
        if cfg.format == OutFormat::Parquet {
            // A dataset directory of the range's files (the stages'
            // assemble moves them into one dataset).
            if index_path.is_some() {
                return Err(Error::Refused(
                    "an index can only be built for BAM output".to_string(),
                ));
            }
            let sink = crate::io::columnar::ParquetSink::create_at(
                cfg, path, &header, false, debris, pool,
            )?;
            return Ok(Output {
                writer: Sink::Parquet(Box::new(sink)),
                pending: None,
                index: None,
                name,
                to_stdout: false,
                cpu_at_start,
                qc: None,
                cram_qc: None,
            });
        }
        if cfg.format == OutFormat::Cram {
            return Err(Error::Refused(format!(
                "{name}: a part of a distributed sort's output cannot be CRAM (CRAM files do not concatenate)"
            )));
        }
        let format = hts_format(cfg);
        if index_path.is_some() && format != Format::Bam {
            return Err(Error::Refused(
                "an index can only be built for BAM output".to_string(),
            ));
        }
        let (pending, file) = PendingFile::create(path, debris)
            .with_context(|| format!("{name}: cannot create the part"))?;
        let index = match index_path {
            Some(p) => {
                let (pending, file) = PendingFile::create(p, debris)
                    .with_context(|| format!("{}: cannot create", p.display()))?;
                Some(IndexOut {
                    path: p.to_path_buf(),
                    pending,
                    file,
                    part: true,
                })
            }
            None => None,
        };
        let options = WriterOptions {
            format,
            level: CompressionLevel::new(cfg.level).context("compression level")?,
            header: false,
            eof: false,
            index: None,
        };
        let durable = !pending.is_direct();
        let mut writer = Writer::new(Writeback::new(file, durable), header, options, pool)
            .map_err(|e| write_error(&name, false, e))?;
        if index.is_some() {
            // Each record's index fields are kept as it is written: the
            // part is not read again to index it.
            writer
                .collect_part_index()
                .map_err(|e| write_error(&name, false, e))?;
        }
        Ok(Output {
            writer: Sink::Hts(Box::new(writer)),
            pending: Some(pending),
            index,
            name,
            to_stdout: false,
            cpu_at_start,
            qc: None,
            cram_qc: None,
        })
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        match &self.writer {
            Sink::Hts(w) => w.records(),
            Sink::Cram { records, .. } => *records,
            Sink::Parquet(s) => s.records,
        }
    }

    /// Appends one record (with its block_size prefix).
    pub fn write_record(&mut self, rec: &[u8]) -> Result<()> {
        match &mut self.writer {
            Sink::Parquet(s) => s.write_record(rec),
            Sink::Hts(w) => w
                .write_record(rec)
                .map_err(|e| write_error(&self.name, self.to_stdout, e)),
            Sink::Cram {
                writer,
                records,
                bytes,
            } => {
                *records += 1;
                *bytes += rec.len() as u64;
                if let Some(qc) = &mut self.cram_qc {
                    qc.push(&alnsort_bam::qc::QcRecord::of(
                        alnsort_bam::RecordRef::with_block_size(rec),
                        alnsort_bam::qc::ReadBack::Binary,
                    ));
                }
                writer
                    .write_record(rec)
                    .map_err(|e| write_error(&self.name, self.to_stdout, e))
            }
        }
    }

    /// Appends the records of a chunk of the sorted stream, in order. For
    /// BAM output the compression jobs copy them from the chunk (see
    /// `Writer::write_records`), so this thread does not touch their bytes.
    pub fn write_chunk(&mut self, chunk: alnsort_sort::Chunk) -> Result<()> {
        match &mut self.writer {
            Sink::Hts(w) => w
                .write_records(Arc::new(ChunkRecords(chunk)))
                .map_err(|e| write_error(&self.name, self.to_stdout, e)),
            Sink::Cram { .. } | Sink::Parquet(_) => {
                for i in 0..chunk.len() {
                    self.write_record(chunk.record(i))?;
                }
                Ok(())
            }
        }
    }

    /// Appends records given as units ([`alnsort_bgzf::Units`]), in order:
    /// as [`Output::write_chunk`], for units that edit the records as they
    /// are copied (duplicate marking's flags).
    pub fn write_units(&mut self, units: Arc<dyn alnsort_bgzf::Units>) -> Result<()> {
        match &mut self.writer {
            Sink::Hts(w) => w
                .write_records(units)
                .map_err(|e| write_error(&self.name, self.to_stdout, e)),
            Sink::Cram { .. } | Sink::Parquet(_) => {
                let mut rec = Vec::new();
                for i in 0..units.count() {
                    rec.clear();
                    units.append_unit(i, &mut rec);
                    self.write_record(&rec)?;
                }
                Ok(())
            }
        }
    }

    /// Flushes everything, writes the EOF block and the index, waits until
    /// both are on disk, and renames them into place (the output first, so
    /// an index never exists without the file it indexes).
    pub fn finish(self) -> Result<OutputSummary> {
        self.finish_releasing((), || Ok(()))
    }

    /// [`finish`](Self::finish), dropping `release` (what the records were
    /// read from: the sort's buffers) on another thread once the last block
    /// is written, so that giving back its memory (about 0.05 s a GB) runs
    /// beside the output's fsync, index and rename instead of before them.
    /// It is dropped before this returns, on every path. `check` runs once
    /// every block is written and every compression job has ended, before
    /// the output and index are renamed into place: a failed check leaves
    /// no output behind (and an existing file untouched), as any other
    /// failed run.
    pub fn finish_releasing<T: Send>(
        self,
        release: T,
        check: impl FnOnce() -> Result<()>,
    ) -> Result<OutputSummary> {
        let mut release = Some(release);
        std::thread::scope(|scope| {
            let mut released = || {
                if let Some(r) = release.take() {
                    let spawned = std::thread::Builder::new()
                        .name("alnsort-release".into())
                        .spawn_scoped(scope, move || drop(r));
                    // Without a thread it is dropped here, in line.
                    drop(spawned);
                }
            };
            self.finish_inner(&mut released, check)
        })
    }

    fn finish_inner(
        self,
        released: &mut dyn FnMut(),
        check: impl FnOnce() -> Result<()>,
    ) -> Result<OutputSummary> {
        let write_consume_s = thread_cpu_seconds() - self.cpu_at_start;
        let Output {
            writer,
            pending,
            index,
            name,
            to_stdout,
            qc,
            cram_qc,
            ..
        } = self;
        let mut crai = None;
        let mut part_index = None;
        let mut counts = cram_qc;
        let mut dataset = None;
        let (built, records, bytes_uncompressed, bytes_written) = match writer {
            Sink::Hts(writer) => {
                let done = (*writer)
                    .finish()
                    .map_err(|e| write_error(&name, to_stdout, e))?;
                released();
                done.inner
                    .finish()
                    .map_err(|e| write_error(&name, to_stdout, e))?;
                part_index = done.part_index;
                counts = counts.or(done.qc);
                (
                    done.index,
                    done.records,
                    done.bytes_uncompressed,
                    done.bytes_written,
                )
            }
            Sink::Cram {
                writer,
                records,
                bytes,
            } => {
                let (inner, index) = writer
                    .finish_indexed()
                    .map_err(|e| write_error(&name, to_stdout, e))?;
                released();
                crai = index.map(|text| crate::io::zlib::crai_bytes(&text));
                let written = inner.written;
                inner
                    .finish()
                    .map_err(|e| write_error(&name, to_stdout, e))?;
                (None, records, bytes, written)
            }
            Sink::Parquet(sink) => {
                let (records, bytes) = (sink.records, sink.bytes);
                counts = sink.qc.clone();
                let closed = sink.close()?;
                released();
                let written = closed.bytes();
                dataset = Some(closed);
                (None, records, bytes, written)
            }
        };
        check()?;
        // The reports are made before anything is renamed into place: one
        // samtools would refuse to print leaves no output behind.
        let reports = match qc {
            Some((files, header)) => {
                let counts = counts
                    .ok_or_else(|| Error::Internal(format!("no QC counts were kept for {name}")))?;
                Some(files.render(&counts, &header)?)
            }
            None => None,
        };
        if let Some(IndexOut {
            path,
            pending: p,
            file: mut f,
            part,
        }) = index
        {
            let bytes = if part {
                Some(part_index.ok_or_else(|| {
                    Error::Internal(format!("no part index was kept for {}", path.display()))
                })?)
            } else {
                crai
            };
            let bytes = match bytes {
                Some(bytes) => bytes,
                None => {
                    let built = built.ok_or_else(|| {
                        Error::Internal(format!("no index was built for {}", path.display()))
                    })?;
                    crate::io::zlib::index_file_bytes(&built)
                }
            };
            let sync = !p.is_direct();
            f.write_all(&bytes)
                .and_then(|_| if sync { f.sync_all() } else { Ok(()) })
                .with_context(|| format!("writing the index {}", path.display()))?;
            if let Some(out) = pending {
                out.commit()
                    .with_context(|| format!("renaming output into place as {name}"))?;
            }
            p.commit()
                .with_context(|| format!("renaming index into place as {}", path.display()))?;
        } else if let Some(out) = pending {
            out.commit()
                .with_context(|| format!("renaming output into place as {name}"))?;
        } else if let Some(d) = dataset {
            d.commit()
                .with_context(|| format!("renaming the dataset into place as {name}"))?;
        }
        if let Some(reports) = reports {
            reports.write()?;
        }
        Ok(OutputSummary {
            records,
            bytes_uncompressed,
            bytes_written,
            write_consume_s,
        })
    }
}

/// The `alnsort_bam::writer` form of `cfg`'s output (CRAM output is
/// written by `alnsort_cram` instead; its records pass through BAM form).
pub(crate) fn hts_format(cfg: &Config) -> Format {
    match cfg.format {
        OutFormat::Sam => Format::Sam,
        OutFormat::SamGz => Format::SamBgzf,
        OutFormat::Bam | OutFormat::Cram | OutFormat::Parquet => Format::Bam,
    }
}

/// Bytes written between two starts of writeback.
const WRITEBACK_STEP: u64 = 8 << 20;
/// How far behind the write position the writer waits for writeback to end,
/// which bounds the output's dirty pages.
const WRITEBACK_LAG: u64 = 64 << 20;

/// Steps of writeback the flusher thread may have queued before the writer
/// waits for it: 8 x 8 MiB more dirty pages at most than `WRITEBACK_LAG`.
const FLUSH_QUEUE: usize = 8;

/// The output file, written sequentially. For a durable output a thread of
/// its own (the flusher) starts the kernel's writeback of each completed
/// [`WRITEBACK_STEP`] (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) and waits
/// for ranges more than [`WRITEBACK_LAG`] behind, so that by the final
/// `fsync` almost everything is on disk already, and dirty pages stay
/// bounded; the writing thread only hands it offsets (waiting only when
/// [`FLUSH_QUEUE`] steps are queued), so it never waits for the disk
/// itself (issue 38: `-u` files 1.16-1.26x faster at 1x and 4x than with the
/// waits on the writing thread, bench/results/2026-12-07-regime.md). Where
/// the file system does not support
/// `sync_file_range`, writeback is left to `fsync`.
pub struct Writeback {
    file: File,
    /// Whether `finish` waits until the file is on disk.
    durable: bool,
    /// Whether writeback is started while writing (durable, and supported).
    ranges: bool,
    /// Bytes written.
    written: u64,
    /// Offset handed to the flusher last.
    handed: u64,
    /// Writeback has been started below this offset (known once the
    /// flusher is joined).
    started: u64,
    /// Writeback has ended below this offset (known once the flusher is
    /// joined).
    waited: u64,
    flusher: Option<Flusher>,
}

/// The flusher thread and the channel of offsets it is handed.
struct Flusher {
    tx: crossbeam_channel::Sender<u64>,
    handle: std::thread::JoinHandle<(u64, u64)>,
}

impl Flusher {
    /// Starts the flusher on a second handle of `file`; `None` when either
    /// cannot be had (writeback is then left to `fsync`).
    fn start(file: &File, at: u64) -> Option<Flusher> {
        let file = file.try_clone().ok()?;
        let (tx, rx) = crossbeam_channel::bounded::<u64>(FLUSH_QUEUE);
        let handle = std::thread::Builder::new()
            .name("alnsort-writeback".into())
            .spawn(move || {
                let (mut started, mut waited, mut ok) = (at, at, true);
                for upto in rx {
                    if !ok {
                        continue;
                    }
                    ok = sync_range(&file, started, upto - started, false);
                    if !ok {
                        continue;
                    }
                    started = upto;
                    if started > waited + WRITEBACK_LAG {
                        let until = started - WRITEBACK_LAG;
                        ok = sync_range(&file, waited, until - waited, true);
                        if ok {
                            waited = until;
                        }
                    }
                }
                (started, waited)
            })
            .ok()?;
        Some(Flusher { tx, handle })
    }
}

impl Writeback {
    fn new(file: File, durable: bool) -> Writeback {
        Self::new_at(file, durable, 0)
    }

    /// [`Writeback::new`] for a file whose first `at` bytes are written
    /// already (and on disk): writing goes on at `at`.
    fn new_at(file: File, durable: bool, at: u64) -> Writeback {
        let flusher = if durable {
            Flusher::start(&file, at)
        } else {
            None
        };
        Writeback {
            ranges: flusher.is_some(),
            file,
            durable,
            written: at,
            handed: at,
            started: at,
            waited: at,
            flusher,
        }
    }

    /// Hands the flusher the end of each completed step.
    fn push_writeback(&mut self) {
        if self.written - self.handed >= WRITEBACK_STEP {
            let sent = self
                .flusher
                .as_ref()
                .is_some_and(|f| f.tx.send(self.written).is_ok());
            if !sent {
                self.ranges = false;
                return;
            }
            self.handed = self.written;
        }
    }

    /// Ends the flusher after the ranges handed to it, noting how far it got.
    fn join_flusher(&mut self) {
        if let Some(Flusher { tx, handle }) = self.flusher.take() {
            drop(tx);
            if let Ok((started, waited)) = handle.join() {
                self.started = started;
                self.waited = waited;
            }
        }
    }

    /// Flushes and, for a durable output, waits until the whole file is on
    /// disk.
    fn finish(mut self) -> io::Result<()> {
        self.file.flush()?;
        self.join_flusher();
        if self.durable {
            self.file.sync_all()?;
        }
        Ok(())
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        // A run that fails ends the flusher too (its sends stop here).
        self.join_flusher();
    }
}

impl Write for Writeback {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.ranges {
            self.push_writeback();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// `sync_file_range` on `[from, from + len)`: start writeback, or (`wait`)
/// start it and wait for it to end. False when the call is not supported
/// here; real I/O errors are left for the final `fsync` to report.
#[cfg(target_os = "linux")]
fn sync_range(file: &File, from: u64, len: u64, wait: bool) -> bool {
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    // SAFETY: plain syscall on an open descriptor this File owns.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), from as i64, len as i64, flags) };
    if rc == 0 {
        return true;
    }
    let err = io::Error::last_os_error();
    !matches!(
        err.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::ESPIPE | libc::EOPNOTSUPP)
    )
}

#[cfg(not(target_os = "linux"))]
fn sync_range(_file: &File, _from: u64, _len: u64, _wait: bool) -> bool {
    false
}

/// What wide positions (see [`has_long_reference`]) allow: SAM output (as
/// samtools: BAM is refused with its message before any record is read),
/// and the orders whose keys carry 64-bit positions.
pub fn check_wide_output(cfg: &Config) -> Result<()> {
    if !matches!(cfg.format, OutFormat::Sam | OutFormat::SamGz) {
        return Err(Error::Refused("output format is not compatible with very large references: a reference is longer than \
             2147483647 bases, which BAM positions cannot reach; write SAM (-O SAM, or an output named .sam)".to_string()));
    }
    if matches!(
        cfg.order,
        alnsort_bam::keys::SortOrder::TemplateCoordinate
            | alnsort_bam::keys::SortOrder::Minimiser(_)
    ) {
        return Err(Error::Refused(
            "this sort order is not supported yet for references longer than 2147483647 bases \
             (coordinate, name and tag orders are)"
                .to_string(),
        ));
    }
    Ok(())
}

/// Whether a reference is longer than BAM's positions reach (`i32::MAX`):
/// samtools then sorts with 64-bit positions, and only SAM output can hold
/// them.
pub fn has_long_reference(header: &Header) -> bool {
    header.refs().iter().any(|r| r.len > i32::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A durable output starts writeback step by step while it is written
    /// and waits only for ranges far behind; the bytes are the bytes given.
    #[test]
    fn writeback_is_started_while_writing() {
        let path = std::env::temp_dir().join(format!("alnsort-writeback-{}", std::process::id()));
        let file = File::create(&path).expect("create");
        let mut w = Writeback::new(file, true);
        let chunk = vec![7u8; 1 << 20];
        let total = WRITEBACK_LAG + 3 * WRITEBACK_STEP;
        for _ in 0..total / chunk.len() as u64 {
            w.write_all(&chunk).expect("write");
        }
        assert!(w.ranges, "the flusher did not start");
        assert_eq!(w.written, total);
        assert_eq!(w.handed, total);
        w.join_flusher();
        assert_eq!(w.started, total, "sync_file_range is refused here");
        assert_eq!(w.waited, total - WRITEBACK_LAG);
        w.finish().expect("finish");
        let len = std::fs::metadata(&path).expect("stat").len();
        let _ = std::fs::remove_file(&path);
        assert_eq!(len, total);
    }

    /// What `finish_releasing` is given is dropped on a thread of its own
    /// (beside the fsync and rename), once the output's last block is
    /// written, and before it returns.
    #[test]
    fn finish_releasing_drops_its_value_on_another_thread_before_returning() {
        struct Probe(Arc<std::sync::Mutex<Vec<(String, u64)>>>, PathBuf);
        impl Drop for Probe {
            fn drop(&mut self) {
                let name = std::thread::current().name().unwrap_or("").to_string();
                // The output is still in its temp file; its size shows
                // whether the EOF block is in.
                let written = std::fs::read_dir(&self.1)
                    .expect("list")
                    .map(|e| e.expect("entry").metadata().expect("stat").len())
                    .sum();
                self.0.lock().expect("lock").push((name, written));
            }
        }
        let dir = std::env::temp_dir().join(format!("alnsort-release-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("x.bam");
        let mut args = crate::options::sort::SortOptions::new("alnsort sort".into());
        args.output = path.to_str().expect("utf-8").into();
        args.input = "in.bam".into();
        let cfg = crate::config::resolve(&args).expect("config");
        let debris = Debris::default();
        let dest = Destinations::prepare(&cfg, &debris).expect("reserve");
        let header = alnsort_bam::header::parse_sam_header([b"@SQ\tSN:c\tLN:1000".as_slice()])
            .expect("header");
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .expect("pool"),
        );
        let out = Output::create(&cfg, dest, Arc::new(header), pool, &debris).expect("create");
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        out.finish_releasing(Probe(seen.clone(), dir.clone()), || Ok(()))
            .expect("finish");
        let size = std::fs::metadata(&path)
            .expect("the output is in place")
            .len();
        let _ = std::fs::remove_dir_all(&dir);
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen, [("alnsort-release".to_string(), size)]);
        assert!(size > 28, "header and EOF block");
    }

    /// Standard output, a pipe or a device: no writeback calls at all.
    #[test]
    fn a_direct_output_is_left_to_the_kernel() {
        let path = std::env::temp_dir().join(format!("alnsort-direct-{}", std::process::id()));
        let file = File::create(&path).expect("create");
        let mut w = Writeback::new(file, false);
        w.write_all(&vec![1u8; 3 * WRITEBACK_STEP as usize])
            .expect("write");
        assert_eq!((w.started, w.waited), (0, 0));
        w.finish().expect("finish");
        let _ = std::fs::remove_file(&path);
    }
}
