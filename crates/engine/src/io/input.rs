//! Reading the input: a file or stdin, SAM or BAM detected by content (not by
//! extension), the header read here; the records are read by
//! `alnsort_bam::reader` (a serial boundary scan, then per-batch decoding on
//! the pool) and handed to the sorter in batches. This file is the wiring.

use crate::error::{Context, Error, Result};
use crate::report::progress::{thread_cpu_seconds, Progress};
use alnsort_bam::header::Header;
use alnsort_bam::keys::KeyEncoder;
use alnsort_bam::reader::{
    BamScanner, Decoded, Decoder, RawBatch, ReadError, SamScanner, ScanOptions, Scanner,
    UnknownReference,
};
use alnsort_bgzf::reader::{EofWatch, ParallelReader};
use alnsort_cram::{CramError, CramReader, PendingContainer, RefSource};
use alnsort_markdup::extract::BatchEnds;
use alnsort_markdup::extract::EndsSpec;
use alnsort_pipeline::{pump, Ordered};
use alnsort_sort::batch::Batch;
use alnsort_sort::{KeyKind, Sorter};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::FromRawFd;
use std::sync::Arc;

/// An opened input whose format is known and whose header has been read.
pub struct OpenInput {
    pub name: String,
    pub header: Header,
    /// Size of the input file in bytes, when it is a regular file.
    pub size: Option<u64>,
    body: InputBody,
}

impl OpenInput {
    /// Whether the input is BAM read from a file (which a resumed sort
    /// can read from a virtual offset on).
    pub fn is_bam(&self) -> bool {
        matches!(self.body, InputBody::Bam(_) | InputBody::Scanned(_)) && self.size.is_some()
    }

    /// Reads the BAM file `path` (this input, its header already read)
    /// from virtual offset `voffset` on, `first_record` being the number
    /// of the record there: a resumed sort (`crate::run::resume`).
    pub fn seek_bam(
        &mut self,
        path: &str,
        voffset: u64,
        first_record: u64,
        record_limit: usize,
        pool: Arc<rayon::ThreadPool>,
    ) -> Result<()> {
        let file = File::open(path).with_context(|| format!("cannot open input {path}"))?;
        let opts = ScanOptions {
            record_limit,
            first_record,
            ..ScanOptions::default()
        };
        let scanner = BamScanner::open_at(self.name.as_str().into(), file, pool, voffset, opts)
            .map_err(|e| Error::context(self.name.as_str(), e))?;
        self.body = InputBody::Scanned(Box::new(scanner));
        Ok(())
    }

    /// Whether the input is CRAM (decoded against reference sequences).
    pub fn is_cram(&self) -> bool {
        matches!(self.body, InputBody::Cram(_))
    }

    /// How a CRAM input holds its references (`None` for other formats).
    pub fn cram_reference_holding(&self) -> Option<alnsort_cram::RefHolding> {
        match &self.body {
            InputBody::Cram(r) => Some(r.reference_holding()),
            _ => None,
        }
    }
}

enum InputBody {
    /// Boxed: the reader is several times the size of the other bodies.
    Bam(Box<ParallelReader>),
    Cram(Box<CramReader<Box<dyn Read + Send>>>),
    /// The text, the header's line count, and for BGZF-compressed text
    /// where its stream ended without the EOF block.
    Sam(BufReader<Box<dyn Read + Send>>, u64, Option<EofWatch>),
    /// A Parquet dataset alnsort wrote (`crate::io::columnar`).
    Parquet(Box<alnsort_columnar::read::Records>),
    /// A BAM file's records from a virtual offset on (a resumed sort,
    /// [`OpenInput::seek_bam`]).
    Scanned(Box<BamScanner>),
}

/// Read size for the input: one syscall per 1 MiB rather than three per
/// BGZF block (header, extra field, body).
const INPUT_BUFFER: usize = 1 << 20;

/// gzip magic (RFC 1952 §2.3.1), which every BGZF block starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// BAM magic (SAM spec §4.2).
const BAM_MAGIC: &[u8; 4] = b"BAM\x01";

fn read_prefix(r: &mut dyn Read, want: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; want];
    let n = alnsort_bam::reader::read_some(r, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Opens `path` ("-" is stdin), detects SAM/BAM/CRAM by content and reads
/// the header. CRAM references are looked for through `REF_PATH` and
/// `REF_CACHE` only; [`open_with_refs`] takes `--reference`.
pub fn open(path: &str, pool: Arc<rayon::ThreadPool>) -> Result<OpenInput> {
    open_with_refs(path, pool, &RefSource::from_env(None))
}

/// [`open`], with CRAM references found through `refs`.
pub fn open_with_refs(
    path: &str,
    pool: Arc<rayon::ThreadPool>,
    refs: &RefSource,
) -> Result<OpenInput> {
    let name = if path == "-" {
        "<stdin>".to_string()
    } else {
        path.to_string()
    };
    if path != "-" && std::path::Path::new(path).is_dir() {
        // A directory is read only as a dataset alnsort wrote; anything
        // else is refused naming what it lacks.
        let dataset = alnsort_columnar::Dataset::open(std::path::Path::new(path))?;
        return Ok(OpenInput {
            name,
            header: dataset.header().clone(),
            size: None,
            body: InputBody::Parquet(Box::new(dataset.reader())),
        });
    }
    let (mut raw, size): (Box<dyn Read + Send>, Option<u64>) = if path == "-" {
        // SAFETY: fd 0 is open for the life of the process; dup gives this
        // File its own descriptor to own and close.
        let fd = unsafe { libc::dup(0) };
        if fd < 0 {
            return Err(Error::context(
                format!("{name}: cannot read standard input"),
                std::io::Error::last_os_error(),
            ));
        }
        (
            // SAFETY: fd is the descriptor dup just opened, owned by
            // nothing else.
            Box::new(BufReader::with_capacity(INPUT_BUFFER, unsafe {
                File::from_raw_fd(fd)
            })),
            None,
        )
    } else {
        let f = File::open(path).with_context(|| format!("cannot open input {path}"))?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(BufReader::with_capacity(INPUT_BUFFER, f)), size)
    };
    let prefix = read_prefix(&mut *raw, 4).with_context(|| format!("{name}: read error"))?;
    if prefix.is_empty() {
        return Err(Error::input(
            &name,
            "the input is empty (no header, no records)".to_string(),
        ));
    }
    if prefix.starts_with(&GZIP_MAGIC) {
        let mut prefix = prefix;
        let more = read_prefix(&mut *raw, alnsort_bgzf::block::HEADER_LEN - prefix.len())
            .with_context(|| format!("{name}: read error"))?;
        prefix.extend_from_slice(&more);
        if !alnsort_bgzf::is_bgzf(&prefix) {
            return open_plain_gzip(name, prefix, raw);
        }
        let mut reader =
            ParallelReader::new(raw, pool, prefix).map_err(|e| Error::context(name.as_str(), e))?;
        let head = reader
            .fill_buf()
            .map_err(|e| Error::context(name.as_str(), e))?;
        // samtools fails on these too ("failed to read header", "Exec format
        // error"); say what the bytes are instead of parsing them as SAM.
        if head.is_empty() {
            return Err(Error::input(
                &name,
                "the input is empty (a BGZF stream with no data: no header, no records)"
                    .to_string(),
            ));
        }
        if head.len() >= 4 && head.starts_with(b"BAM") && &head[..4] != BAM_MAGIC {
            return Err(Error::input(&name, format!("not a BAM file: uncompressed bytes 0..4 are {:02x?}, expected the BAM magic \"BAM\\1\" (42 41 4d 01)",
                &head[..4])));
        }
        if head.len() >= 4 && &head[..4] == BAM_MAGIC {
            // HeaderError messages say "BAM header" themselves.
            let header = alnsort_bam::header::read_bam_header(&mut reader)
                .map_err(|e| Error::context(name.as_str(), e))?;
            return Ok(OpenInput {
                name,
                header,
                size,
                body: InputBody::Bam(Box::new(reader)),
            });
        }
        check_text_start(
            &name,
            reader
                .fill_buf()
                .map_err(|e| Error::context(name.as_str(), e))?,
            "uncompressed ",
        )?;
        let watch = reader.eof_watch();
        let boxed: Box<dyn Read + Send> = Box::new(reader);
        return open_sam(name, boxed, size, Some(watch));
    }
    if prefix.starts_with(alnsort_cram::MAGIC) {
        let chained: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(prefix).chain(raw));
        let reader = CramReader::open(&name, chained, refs)?;
        let text = reader.header_text();
        let header = alnsort_bam::header::parse_sam_header(
            text.split(|&b| b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .filter(|l| !l.is_empty()),
        )
        .map_err(|e| Error::context(format!("{name}: CRAM header"), e))?;
        return Ok(OpenInput {
            name,
            header,
            size,
            body: InputBody::Cram(Box::new(reader)),
        });
    }
    if prefix.starts_with(BAM_MAGIC) {
        return Err(Error::input(
            &name,
            "uncompressed raw BAM (without BGZF) is not a valid BAM file".to_string(),
        ));
    }
    check_text_start(&name, &prefix, "")?;
    let chained: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(prefix).chain(raw));
    open_sam(name, chained, size, None)
}

/// Plain gzip (one or more members without BGZF's block-size field, as
/// `gzip file.sam` writes): samtools reads SAM compressed this way, so it is
/// read here too, inflated as one stream on the reading thread (plain gzip
/// cannot be split for parallel inflation). BAM must be BGZF (SAM spec
/// §4.1), so a gzip stream holding BAM is refused as samtools refuses it.
fn open_plain_gzip(name: String, prefix: Vec<u8>, raw: Box<dyn Read + Send>) -> Result<OpenInput> {
    if !alnsort_bgzf::is_gzip(&prefix) {
        return Err(Error::input(
            &name,
            format!(
                "starts with the gzip magic but is not a deflate gzip stream (first bytes {:02x?})",
                &prefix[..prefix.len().min(4)]
            ),
        ));
    }
    let stream = std::io::Cursor::new(prefix).chain(raw);
    let mut gz = BufReader::with_capacity(
        INPUT_BUFFER,
        flate2::read::MultiGzDecoder::new(BufReader::with_capacity(INPUT_BUFFER, stream)),
    );
    let head = gz
        .fill_buf()
        .map_err(|e| Error::context(format!("{name}: gzip stream at its start"), e))?;
    if head.is_empty() {
        return Err(Error::input(
            &name,
            "the input is empty (a gzip stream with no data: no header, no records)".to_string(),
        ));
    }
    if head.starts_with(b"BAM") {
        return Err(Error::input(&name, "BAM data in a gzip stream whose first block has no valid BGZF header (BC extra field): \
             a damaged BAM file, or one compressed with plain gzip; BAM must be BGZF (recompress it with samtools view -b)".to_string()));
    }
    check_text_start(&name, head, "uncompressed ")?;
    // The file size counts compressed bytes while the reader counts text,
    // so no total (and no ETA) is shown for it.
    open_sam(name, Box::new(gz), None, None)
}

/// Refuses input that is neither BAM nor SAM text: SAM cannot contain
/// control bytes other than tab, CR and LF, so one among the first bytes means
/// a binary file (htslib's format detection refuses it the same way).
fn check_text_start(name: &str, bytes: &[u8], what: &str) -> Result<()> {
    let first = &bytes[..bytes.len().min(4)];
    if let Some(i) = first
        .iter()
        .position(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
    {
        return Err(Error::input(name, format!("neither BAM nor SAM: {what}byte {i} is 0x{:02x}, which SAM text cannot contain (first bytes {first:02x?})",
            first[i])));
    }
    Ok(())
}

fn open_sam(
    name: String,
    r: Box<dyn Read + Send>,
    size: Option<u64>,
    eof_watch: Option<EofWatch>,
) -> Result<OpenInput> {
    let mut br = BufReader::with_capacity(1 << 20, r);
    let mut lines: Vec<Vec<u8>> = Vec::new();
    loop {
        let buf = br
            .fill_buf()
            .with_context(|| format!("{name}: read error"))?;
        if buf.first() != Some(&b'@') {
            break;
        }
        let mut line = Vec::new();
        br.read_until(b'\n', &mut line)
            .with_context(|| format!("{name}: read error"))?;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        lines.push(line);
    }
    let n_lines = lines.len() as u64;
    let header = alnsort_bam::header::parse_sam_header(lines.iter().map(|l| l.as_slice()))
        .map_err(|e| Error::context(name.as_str(), e))?;
    Ok(OpenInput {
        name,
        header,
        size,
        body: InputBody::Sam(br, n_lines, eof_watch),
    })
}

/// What reading the input did.
#[derive(Default)]
pub struct Fed {
    /// Records read.
    pub records: u64,
    /// CPU seconds of the serial boundary-scan thread (working, not
    /// waiting: its thread CPU time).
    pub read_scan_s: f64,
    /// CPU seconds of the thread handing finished batches to the sorter.
    pub read_push_s: f64,
    /// What decoding found besides records: SAM records whose unknown
    /// RNAME or RNEXT was read as unmapped (`--unknown-reference=unmapped`),
    /// BAM inputs without their BGZF EOF block.
    pub tally: Decoded,
}

/// A batch read, validated, keyed and copied into the sort's layout by a
/// pool job.
struct Prepared {
    batch: Batch,
    /// Record bytes (BAM form, with their block_size).
    bytes: u64,
    /// Warnings to print in input order (unknown reference names, a
    /// missing EOF block).
    warnings: Vec<String>,
    /// What decoding the batch found besides its records.
    tally: Decoded,
    last_block: u64,
    /// The raw batch's first record number, record count and first
    /// record's virtual offset (where a resumed sort can start again).
    place: crate::run::resume::BatchPlace,
    /// The records' read ends, with `--markdup`.
    ends: Option<alnsort_markdup::extract::BatchEnds>,
}

/// An input's records, read in batches of whole BAM records: SAM and BAM
/// cut by a scanner on the reading thread, CRAM cut into containers there
/// and decoded to BAM records by the pool job ([`spawn_batches`]).
pub enum Records {
    Scan(Scanner),
    Cram(Box<CramReader<Box<dyn Read + Send>>>),
    Parquet(Box<alnsort_columnar::read::Records>),
}

pub use crate::report::progress::ScanTime;

/// Starts reading `records`: one thread cuts the input (scanner batches or
/// CRAM containers), and each piece becomes a [`RawBatch`] of BAM (or SAM)
/// records on the pool and is handed to `job` there, results in input
/// order (`alnsort_pipeline::Ordered`). The one reading mechanism of
/// `alnsort sort` (one input) and of `alnsort merge` (each input); a
/// scanner's batches go through [`spawn_scanned`].
pub fn spawn_batches<T, F>(
    name: &str,
    records: Records,
    pool: &Arc<rayon::ThreadPool>,
    stage: &'static str,
    depth: usize,
    job: F,
) -> Result<(Ordered<Result<T>>, ScanTime)>
where
    T: Send + 'static,
    F: Fn(&RawBatch) -> Result<T> + Send + Sync + 'static,
{
    let mut reader = match records {
        Records::Scan(scanner) => {
            return spawn_scanned(
                name,
                scanner,
                pool,
                stage,
                depth,
                |_| (),
                move |raw, ()| job(raw),
            )
        }
        Records::Cram(reader) => reader,
        Records::Parquet(reader) => {
            return crate::io::columnar::spawn_dataset_batches(
                name, *reader, pool, stage, depth, job,
            )
        }
    };
    let time = ScanTime::default();
    let timed = time.timer();
    let ctx = reader.context();
    let started = Ordered::spawn(
        Arc::clone(pool),
        stage,
        depth,
        move |emit| timed(&mut || pump(|| reader.next_container(), emit)),
        move |item: std::result::Result<PendingContainer, CramError>| -> Result<T> {
            thread_local! {
                // The decoded container's bytes, reused by each worker:
                // fresh megabytes per container cost page faults.
                static DECODED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
            }
            let c = item?;
            let mut data = DECODED.take();
            data.clear();
            let n = match c.decode(&ctx, &mut data) {
                Ok(n) => n,
                Err(e) => {
                    DECODED.set(data);
                    return Err(e.into());
                }
            };
            let mut raw = RawBatch::framed(data);
            raw.first_record = c.first_record;
            raw.voffsets = vec![0; n as usize];
            let out = job(&raw);
            DECODED.set(raw.into_spare());
            out
        },
    );
    let batches = started.with_context(|| format!("{name}: starting the input reader thread"))?;
    Ok((batches, time))
}

/// Starts reading `scanner`'s batches: the one loop that drives a scanner
/// (`alnsort sort` and `merge` through [`spawn_batches`], the stage maps,
/// samples and reaches of `crate::stages`). The reading thread cuts each
/// batch and hands it to `ordered` there, in input order, so that state
/// carried from batch to batch (the running maximum of the stage maps'
/// tie-break with several inputs) is known before the batch is decoded;
/// `job(batch, what ordered gave)` then runs on the pool, results taken
/// in input order. The batch's buffers go back to the scanner after the
/// job.
pub fn spawn_scanned<S, T, O, F>(
    name: &str,
    mut scanner: Scanner,
    pool: &Arc<rayon::ThreadPool>,
    stage: &'static str,
    depth: usize,
    mut ordered: O,
    job: F,
) -> Result<(Ordered<Result<T>>, ScanTime)>
where
    S: Send + 'static,
    T: Send + 'static,
    O: FnMut(&RawBatch) -> S + Send + 'static,
    F: Fn(&RawBatch, S) -> Result<T> + Send + Sync + 'static,
{
    let time = ScanTime::default();
    let timed = time.timer();
    let recycler = scanner.recycler();
    let started = Ordered::spawn(
        Arc::clone(pool),
        stage,
        depth,
        move |emit| {
            timed(&mut || {
                pump(
                    || {
                        let got = scanner.next_batch()?;
                        Ok(got.map(|b| {
                            let s = ordered(&b);
                            (b, s)
                        }))
                    },
                    emit,
                )
            })
        },
        move |item: std::result::Result<(RawBatch, S), ReadError>| -> Result<T> {
            let (raw, s) = item?;
            let out = job(&raw, s);
            recycler.give_back(raw);
            out
        },
    );
    let batches = started.with_context(|| format!("{name}: starting the input reader thread"))?;
    Ok((batches, time))
}

/// The next result of a file's batch jobs (`batches`, from
/// [`spawn_batches`] or [`spawn_scanned`]); `None` once all are taken. A
/// job that was lost is [`Error::Record`] (reading record `record` or
/// later of `file`), a job's own error is as the job returned it. The
/// warnings a job gathered (`warnings` of its result: unknown reference
/// names, a missing EOF block) are printed first, naming the file, so
/// that they come in input order.
pub(crate) fn next_batch<T: Send + 'static>(
    batches: &mut Ordered<Result<T>>,
    file: &str,
    record: u64,
    warnings: fn(&T) -> &[String],
) -> Option<Result<T>> {
    let got = batches.next_result()?.map_err(|e| Error::Record {
        file: file.to_string(),
        doing: "reading",
        record,
        source: Box::new(e.into()),
    });
    Some(got.and_then(|r| r).inspect(|t| {
        for w in warnings(t) {
            eprintln!("[W::alnsort] {file}: {w}");
        }
    }))
}

impl OpenInput {
    /// The input's name, header and records (for readers other than
    /// [`OpenInput::feed`], such as `alnsort merge`'s), read with
    /// [`spawn_batches`].
    pub fn into_records(self, opts: ScanOptions) -> (Arc<str>, Header, Records) {
        let OpenInput {
            name, header, body, ..
        } = self;
        let file: Arc<str> = name.as_str().into();
        let records = match body {
            InputBody::Cram(reader) => Records::Cram(reader),
            InputBody::Parquet(reader) => Records::Parquet(reader),
            InputBody::Bam(reader) => Records::Scan(Scanner::Bam(Box::new(BamScanner::new(
                Arc::clone(&file),
                *reader,
                opts,
            )))),
            InputBody::Scanned(scanner) => Records::Scan(Scanner::Bam(scanner)),
            InputBody::Sam(br, header_lines, eof_watch) => {
                let s = SamScanner::new(Arc::clone(&file), Box::new(br), header_lines, opts);
                Records::Scan(Scanner::Sam(match eof_watch {
                    Some(w) => s.with_eof_watch(w),
                    None => s,
                }))
            }
        };
        (file, header, records)
    }

    /// Reads every record into `sorter`. One thread only finds record
    /// boundaries (`alnsort_bam::reader`); each batch of raw records is
    /// validated, normalised, keyed and copied into a sort batch by a pool
    /// job, results taken in input order (`alnsort_pipeline::Ordered`), and
    /// handed to the sorter whole (`Sorter::push_batch`), which sorts full
    /// sub-batches on the pool while reading goes on. `unknown_reference`
    /// says what a SAM record naming a reference the header lacks does.
    /// With `markdup`, each record enters the sorter with its input ordinal
    /// appended and its read ends go to the marker (`crate::markdup`).
    /// With `resume`, the records before its skip point are not taken, and
    /// each batch's place is noted for the runs it keeps.
    #[allow(clippy::too_many_arguments)]
    pub fn feed(
        self,
        unknown_reference: UnknownReference,
        encoder: Arc<KeyEncoder>,
        sorter: &mut Sorter,
        pool: Arc<rayon::ThreadPool>,
        progress: &Progress,
        mut markdup: Option<&mut dyn EndsSink>,
        resume: Option<&crate::run::resume::Tracker>,
    ) -> Result<Fed> {
        let skip_until = resume.map_or(0, |r| r.skip_until());
        let with_ends = markdup.as_ref().map(|m| m.ends_spec());
        let push_start = thread_cpu_seconds();
        let limit = sorter.plan().record_limit;
        let opts = ScanOptions {
            // A SAM line is held whole and then parsed into a record beside
            // it, while the sorter may hold its full budget: cap lines at
            // the record limit so that stays within the reserve plus one
            // record. SAM text is usually longer than its BAM record (SEQ is
            // 2 bases per byte in BAM), so this rarely refuses a record the
            // sorter would take.
            record_limit: limit,
            ..ScanOptions::default()
        };
        let (file, header, records) = self.into_records(opts);
        let name = file.to_string();
        let kind = key_kind(&encoder);
        let fill = sorter.chunk_fill();
        let header = Arc::new(header);
        let decoder = Decoder {
            file,
            lookup: Arc::new(header.ref_lookup()),
            header,
            encoder,
            record_limit: limit,
            unknown_reference,
        };
        let depth = pool.current_num_threads() * 2 + 2;
        // Sort batches the sorter has copied go back to the decode jobs:
        // a fresh batch of this size is mapped anew by malloc and costs a
        // page fault per 4 KiB written (measured +0.6 s of system time on
        // the 4.3 M-record benchmark at -@2 without this). As many spares
        // are kept as batches can be in flight (`depth`), within the
        // reserve for them (`reserve_bytes`): with one per pool thread, a
        // quarter of the batches still found the channel full after a
        // burst of copies and were freed, and as many allocated anew.
        let (spare_tx, spare_rx) = crossbeam_channel::bounded::<Batch>(depth);
        let (mut batches, scan_time) =
            spawn_batches(&name, records, &pool, "read", depth, move |raw| {
                Ok(prepare(
                    &decoder,
                    (kind, fill),
                    raw,
                    spare_rx.try_recv().ok(),
                    with_ends.as_ref(),
                    skip_until,
                )?)
            })?;
        let mut n = 0u64;
        let mut tally = Decoded::default();
        while let Some(p) = next_batch(&mut batches, &name, n + 1, |p| &p.warnings) {
            let p = p?;
            tally.add(p.tally);
            if let (Some(m), Some(ends)) = (markdup.as_deref_mut(), &p.ends) {
                m.push(ends)?;
            }
            if let Some(r) = resume {
                r.note(p.place);
            }
            let len = p.batch.len() as u64;
            // Once the sorter's copy jobs are done with it, the batch goes
            // back to the decode jobs; full (enough spares) or no job left
            // to take it: dropped.
            let spare = spare_tx.clone();
            sorter
                .push_batch_then(p.batch, move |b| {
                    let _ = spare.try_send(b);
                })
                .map_err(|e| Error::Record {
                    file: name.to_string(),
                    doing: "sorting",
                    record: n + 1,
                    source: Box::new(e.into()),
                })?;
            n += len;
            progress.add_records(len, p.bytes, p.last_block);
        }
        Ok(Fed {
            records: n,
            read_scan_s: scan_time.seconds(),
            read_push_s: thread_cpu_seconds() - push_start,
            tally,
        })
    }
}

/// What takes each batch's read ends, in input order, while records are
/// fed to the sorter: `--markdup`'s marker (`crate::markdup::marker`).
pub trait EndsSink {
    /// Which read-end fields the read jobs take out of each record.
    fn ends_spec(&self) -> EndsSpec;
    /// Takes the next batch's read ends.
    fn push(&mut self, ends: &BatchEnds) -> Result<()>;
}

/// The sort crate's layout for keys of `encoder`: 8-byte coordinate keys
/// are radix-sorted, every other order's keys compared.
pub(crate) fn key_kind(encoder: &KeyEncoder) -> KeyKind {
    if encoder.is_fixed8() {
        KeyKind::Fixed8
    } else {
        KeyKind::Variable
    }
}

/// The pool job of one batch: validation, normalisation (or SAM parsing),
/// key encoding, and the copy into a sort batch of the sorter's key kind
/// and chunk fill (`layout`), which the sorter then takes whole.
fn prepare(
    decoder: &Decoder,
    layout: (KeyKind, alnsort_sort::ChunkFill),
    raw: &RawBatch,
    spare: Option<Batch>,
    with_ends: Option<&alnsort_markdup::extract::EndsSpec>,
    skip_until: u64,
) -> std::result::Result<Prepared, ReadError> {
    let mut ends = with_ends.map(|spec| alnsort_markdup::extract::BatchEnds::new(spec.clone()));
    let (kind, fill) = layout;
    let mut batch = match spare {
        Some(mut b) if b.kind() == kind && b.chunk_fill() == fill => {
            b.reuse_for_input(raw.bytes(), raw.voffsets.len());
            b
        }
        _ => Batch::for_input_filling(kind, fill, raw.bytes(), raw.voffsets.len()),
    };
    let mut bytes = 0u64;
    let mut warnings = Vec::new();
    // A resumed sort's records already in its kept runs are read (the
    // batch is cut where it was) but not taken again.
    let mut record = raw.first_record;
    let decoded = decoder.decode(
        raw,
        |key, rec| {
            record += 1;
            if record <= skip_until {
                return Ok(());
            }
            if kind == KeyKind::Fixed8 && key.len() != 8 {
                return Err(format!(
                    "internal error: the key is {} bytes, but this sort needs 8-byte keys",
                    key.len()
                )
                .into());
            }
            // With --markdup the record's input ordinal follows it.
            let taken = match &mut ends {
                Some(e) => {
                    let ordinal = raw.first_record + e.len() as u64;
                    e.add_fields(rec);
                    batch.try_push_parts(
                        key,
                        rec,
                        &crate::markdup::ordinal::ordinal_suffix(ordinal),
                    )
                }
                None => batch.try_push(key, rec),
            };
            if !taken {
                return Err("more record bytes than one batch can address (4 GiB)".into());
            }
            bytes += rec.len() as u64;
            Ok(())
        },
        |w| warnings.push(w),
    )?;
    Ok(Prepared {
        batch,
        bytes,
        warnings,
        tally: decoded,
        last_block: raw.last_block_offset(),
        place: crate::run::resume::BatchPlace {
            first_record: raw.first_record,
            records: raw.voffsets.len() as u64,
            voffset: raw.voffsets.first().copied().unwrap_or(0),
        },
        ends,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_start_is_refused_text_is_not() {
        assert!(check_text_start("f", b"@HD\t", "").is_ok());
        assert!(check_text_start("f", b"r1\t0", "").is_ok());
        assert!(check_text_start("f", b"\r\n", "").is_ok());
        let e = check_text_start("f", b"BAM\x01", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("byte 3 is 0x01"), "{e}");
        let e = check_text_start("f", b"\0\x01", "uncompressed ")
            .unwrap_err()
            .to_string();
        assert!(e.contains("uncompressed byte 0"), "{e}");
    }
}
