//! Reading the input: a file or stdin, SAM or BAM detected by content (not by
//! extension), every byte checked, every record handed to the sorter with its
//! key. BAM blocks are inflated in parallel by `alnsort_bgzf`; SAM is parsed
//! in parallel the way the thread-scaling paper's batch-deferred parsing does:
//! one thread only cuts the text at line boundaries, pool workers parse whole
//! batches (and encode their keys), and results come back in order.

use crate::ordered::Ordered;
use crate::progress::Progress;
use alnsort_bam::header::Header;
use alnsort_bam::header::RefLookup;
use alnsort_bam::keys::KeyEncoder;
use alnsort_bam::sam_parse;
use alnsort_bam::validate;
use alnsort_bam::RecordRef;
use alnsort_bgzf::reader::ParallelReader;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::FromRawFd;
use std::sync::Arc;

/// Where records go: the sorter, behind a small trait so tests and a future
/// distributed driver can feed other sinks.
pub trait RecordSink {
    fn push(&mut self, key: &[u8], record: &[u8]) -> Result<()>;

    /// Largest key + record (with its block_size) the sink accepts. The
    /// reader refuses a longer record (or SAM line) *before* allocating for
    /// it, so a corrupt length cannot make the process outgrow its budget.
    fn record_limit(&self) -> usize {
        usize::MAX
    }
}

/// An opened input whose format is known and whose header has been read.
pub struct OpenInput {
    pub name: String,
    pub header: Header,
    /// Size of the input file in bytes, when it is a regular file.
    pub size: Option<u64>,
    body: Body,
}

enum Body {
    Bam(ParallelReader),
    Sam(BufReader<Box<dyn Read + Send>>, u64),
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
    let mut n = 0;
    while n < want {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// Opens `path` ("-" is stdin), detects SAM/BAM by content and reads the header.
pub fn open(path: &str, pool: Arc<rayon::ThreadPool>) -> Result<OpenInput> {
    let name = if path == "-" {
        "<stdin>".to_string()
    } else {
        path.to_string()
    };
    let (mut raw, size): (Box<dyn Read + Send>, Option<u64>) = if path == "-" {
        // SAFETY: fd 0 is open for the life of the process; dup gives this
        // File its own descriptor to own and close.
        let fd = unsafe { libc::dup(0) };
        if fd < 0 {
            bail!(
                "{name}: cannot read standard input: {}",
                std::io::Error::last_os_error()
            );
        }
        (
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
        bail!("{name}: the input is empty (no header, no records)");
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
            ParallelReader::new(raw, pool, prefix).map_err(|e| anyhow!("{name}: {e}"))?;
        let head = reader.fill_buf().map_err(|e| anyhow!("{name}: {e}"))?;
        // samtools fails on these too ("failed to read header", "Exec format
        // error"); say what the bytes are instead of parsing them as SAM.
        if head.is_empty() {
            bail!("{name}: the input is empty (a BGZF stream with no data: no header, no records)");
        }
        if head.len() >= 4 && head.starts_with(b"BAM") && &head[..4] != BAM_MAGIC {
            bail!(
                "{name}: not a BAM file: uncompressed bytes 0..4 are {:02x?}, expected the BAM magic \"BAM\\1\" (42 41 4d 01)",
                &head[..4]
            );
        }
        if head.len() >= 4 && &head[..4] == BAM_MAGIC {
            // HeaderError messages say "BAM header" themselves.
            let header = alnsort_bam::header::read_bam_header(&mut reader)
                .map_err(|e| anyhow!("{name}: {e}"))?;
            return Ok(OpenInput {
                name,
                header,
                size,
                body: Body::Bam(reader),
            });
        }
        check_text_start(
            &name,
            reader.fill_buf().map_err(|e| anyhow!("{name}: {e}"))?,
            "uncompressed ",
        )?;
        let boxed: Box<dyn Read + Send> = Box::new(reader);
        return open_sam(name, boxed, size);
    }
    if prefix.starts_with(b"CRAM") {
        bail!("{name}: CRAM input is not supported yet; convert it with samtools view -b first");
    }
    if prefix.starts_with(BAM_MAGIC) {
        bail!("{name}: uncompressed raw BAM (without BGZF) is not a valid BAM file");
    }
    check_text_start(&name, &prefix, "")?;
    let chained: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(prefix).chain(raw));
    open_sam(name, chained, size)
}

/// Plain gzip (one or more members without BGZF's block-size field, as
/// `gzip file.sam` writes): samtools reads SAM compressed this way, so it is
/// read here too, inflated as one stream on the reading thread (plain gzip
/// cannot be split for parallel inflation). BAM must be BGZF (SAM spec
/// §4.1), so a gzip stream holding BAM is refused as samtools refuses it.
fn open_plain_gzip(name: String, prefix: Vec<u8>, raw: Box<dyn Read + Send>) -> Result<OpenInput> {
    if !alnsort_bgzf::is_gzip(&prefix) {
        bail!(
            "{name}: starts with the gzip magic but is not a deflate gzip stream (first bytes {:02x?})",
            &prefix[..prefix.len().min(4)]
        );
    }
    let stream = std::io::Cursor::new(prefix).chain(raw);
    let mut gz = BufReader::with_capacity(
        INPUT_BUFFER,
        flate2::read::MultiGzDecoder::new(BufReader::with_capacity(INPUT_BUFFER, stream)),
    );
    let head = gz
        .fill_buf()
        .map_err(|e| anyhow!("{name}: gzip stream at its start: {e}"))?;
    if head.is_empty() {
        bail!("{name}: the input is empty (a gzip stream with no data: no header, no records)");
    }
    if head.starts_with(b"BAM") {
        bail!(
            "{name}: BAM data in a gzip stream whose first block has no valid BGZF header (BC extra field): \
             a damaged BAM file, or one compressed with plain gzip; BAM must be BGZF (recompress it with samtools view -b)"
        );
    }
    check_text_start(&name, head, "uncompressed ")?;
    // The file size counts compressed bytes while the reader counts text,
    // so no total (and no ETA) is shown for it.
    open_sam(name, Box::new(gz), None)
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
        bail!(
            "{name}: neither BAM nor SAM: {what}byte {i} is 0x{:02x}, which SAM text cannot contain (first bytes {first:02x?})",
            first[i]
        );
    }
    Ok(())
}

fn open_sam(name: String, r: Box<dyn Read + Send>, size: Option<u64>) -> Result<OpenInput> {
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
        .map_err(|e| anyhow!("{name}: {e}"))?;
    Ok(OpenInput {
        name,
        header,
        size,
        body: Body::Sam(br, n_lines),
    })
}

/// Bytes of SAM text per parse batch: about 1,700 lines of 300 bytes, large
/// enough to amortise dispatch, small enough to keep all workers busy and the
/// memory in flight small (see `reserve_bytes` in lib.rs).
pub const SAM_BATCH_BYTES: usize = 512 << 10;

struct ParsedBatch {
    records: Vec<u8>,
    key_bytes: Vec<u8>,
    key_ends: Vec<u32>,
    /// Warnings to print in input order (unknown reference names).
    warnings: Vec<String>,
}

impl OpenInput {
    /// Reads every record, validates it, encodes its key and pushes it.
    /// Returns the number of records read.
    pub fn feed(
        self,
        encoder: Arc<KeyEncoder>,
        sink: &mut dyn RecordSink,
        pool: Arc<rayon::ThreadPool>,
        progress: &Progress,
    ) -> Result<u64> {
        let OpenInput {
            name, header, body, ..
        } = self;
        match body {
            Body::Bam(reader) => feed_bam(&name, header.n_ref(), reader, &encoder, sink, progress),
            Body::Sam(br, header_lines) => feed_sam(
                SamFeed {
                    name,
                    header,
                    reader: br,
                    header_lines,
                    encoder,
                    pool,
                    // A line is held whole and then parsed into a record
                    // beside it, while the sorter may hold its full budget:
                    // cap lines at the record limit so that stays within the
                    // reserve plus one record. SAM text is usually longer than
                    // its BAM record (SEQ is 2 bases per byte in BAM), so
                    // this rarely refuses a record the sorter would take.
                    max_line: sink.record_limit(),
                },
                sink,
                progress,
            ),
        }
    }
}

fn feed_bam(
    name: &str,
    n_ref: usize,
    mut reader: ParallelReader,
    encoder: &KeyEncoder,
    sink: &mut dyn RecordSink,
    progress: &Progress,
) -> Result<u64> {
    let limit = sink.record_limit();
    let mut rec: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut key: Vec<u8> = Vec::with_capacity(64);
    let mut n: u64 = 0;
    loop {
        let pos = reader.position();
        let where_ = |n: u64| {
            format!(
                "{name}: record {} at uncompressed byte offset {} (BGZF block at compressed offset {})",
                n + 1,
                pos.uncompressed_total,
                pos.block_offset
            )
        };
        // A BGZF error (truncation, CRC, missing EOF block) surfaces while
        // reading some record: say which.
        let io_err = |e: std::io::Error, n: u64| {
            anyhow!(
                "{name}: reading record {} (uncompressed byte offset {}): {e}",
                n + 1,
                pos.uncompressed_total
            )
        };
        // Fast path: the whole record lies in the current inflated block, so
        // it is validated, keyed and copied into the sorter straight from
        // there (one copy of the data instead of two; records only span
        // blocks near block ends).
        let whole = {
            let buf = reader.fill_buf().map_err(|e| io_err(e, n))?;
            if buf.is_empty() {
                break;
            }
            match buf.get(..4) {
                Some(b) => {
                    let len = validate::read_block_size([b[0], b[1], b[2], b[3]])
                        .map_err(|e| anyhow!("{}: {e}", where_(n)))?;
                    if 4 + len > limit {
                        bail!(
                            "{}: block_size says {len} bytes; {}",
                            where_(n),
                            too_large(4 + len, limit)
                        );
                    }
                    match buf.get(..4 + len) {
                        Some(rec) => {
                            push_record(rec, n_ref, encoder, &mut key, sink, limit)
                                .map_err(|e| anyhow!("{}: {e}", where_(n)))?;
                            Some(4 + len)
                        }
                        None => None,
                    }
                }
                None => None,
            }
        };
        if let Some(whole) = whole {
            reader.consume(whole);
            n += 1;
            progress.add_records(1, whole as u64, pos.block_offset);
            continue;
        }
        let mut size = [0u8; 4];
        let got = read_full(&mut reader, &mut size).map_err(|e| io_err(e, n))?;
        if got == 0 {
            break;
        }
        if got < 4 {
            bail!(
                "{}: truncated: the input ends inside the record's block_size field",
                where_(n)
            );
        }
        let len = validate::read_block_size(size).map_err(|e| anyhow!("{}: {e}", where_(n)))?;
        if 4 + len > limit {
            bail!(
                "{}: block_size says {len} bytes; {}",
                where_(n),
                too_large(4 + len, limit)
            );
        }
        rec.clear();
        rec.extend_from_slice(&size);
        // Grow as the bytes arrive, so a block_size that points past the end
        // of a truncated file fails on the truncation, not on the allocation.
        let mut got = 0;
        while got < len {
            let step = (len - got).min(READ_STEP);
            rec.resize(4 + got + step, 0);
            let k = read_full(&mut reader, &mut rec[4 + got..]).map_err(|e| io_err(e, n))?;
            got += k;
            if k < step {
                break;
            }
        }
        if got < len {
            bail!(
                "{}: truncated: block_size says {len} bytes but the input ends after {got}",
                where_(n)
            );
        }
        push_record(&rec, n_ref, encoder, &mut key, sink, limit)
            .map_err(|e| anyhow!("{}: {e}", where_(n)))?;
        n += 1;
        progress.add_records(1, (4 + len) as u64, pos.block_offset);
    }
    Ok(n)
}

/// Validates one record (with its block_size), normalises it as htslib
/// would on reading (recomputed bin, CG CIGAR moved into place, so output
/// records equal samtools' byte for byte), encodes its key and pushes it.
fn push_record(
    rec: &[u8],
    n_ref: usize,
    encoder: &KeyEncoder,
    key: &mut Vec<u8>,
    sink: &mut dyn RecordSink,
    limit: usize,
) -> Result<()> {
    validate::validate_record(&rec[4..], n_ref)?;
    let fixed = validate::htslib_normalise(rec)?;
    let rec = fixed.as_deref().unwrap_or(rec);
    encoder.encode(RecordRef::with_block_size(rec), key)?;
    if key.len() + rec.len() > limit {
        bail!("{}", too_large(key.len() + rec.len(), limit));
    }
    sink.push(key, rec)
}

/// The refusal of a record the budget cannot hold.
fn too_large(len: usize, limit: usize) -> String {
    format!(
        "the record (with its sort key) is {len} bytes, more than the {limit} bytes one record may take \
         with this memory budget (half the sort budget); raise --max-memory or -m"
    )
}

/// Bytes of a record read (and allocated) at a time: a BGZF block's worth
/// several times over, small next to any budget.
const READ_STEP: usize = 1 << 20;

/// Like `read_exact`, but returns how many bytes were read before EOF.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

struct SamFeed {
    name: String,
    header: Header,
    reader: BufReader<Box<dyn Read + Send>>,
    header_lines: u64,
    encoder: Arc<KeyEncoder>,
    pool: Arc<rayon::ThreadPool>,
    /// Longest line accepted (see `RecordSink::record_limit`).
    max_line: usize,
}

/// A batch of whole lines and the 1-based number of its first line and record.
struct TextBatch {
    text: Vec<u8>,
    first_line: u64,
    first_record: u64,
    read_error: Option<String>,
}

fn feed_sam(f: SamFeed, sink: &mut dyn RecordSink, progress: &Progress) -> Result<u64> {
    let SamFeed {
        name,
        header,
        mut reader,
        header_lines,
        encoder,
        pool,
        max_line,
    } = f;
    let header = Arc::new(header);
    let lookup = Arc::new(header.ref_lookup());
    let depth = pool.current_num_threads() * 2 + 2;
    let name_w = name.clone();
    let hdr = Arc::clone(&header);
    let mut batches = Ordered::spawn(
        Arc::clone(&pool),
        depth,
        move |emit| {
            let mut line_no = header_lines + 1;
            let mut record_no = 1u64;
            let mut carry: Vec<u8> = Vec::new();
            loop {
                let mut text = std::mem::take(&mut carry);
                text.reserve(SAM_BATCH_BYTES + 4096);
                let start = text.len();
                text.resize(start + SAM_BATCH_BYTES, 0);
                let got = match read_full(&mut reader, &mut text[start..]) {
                    Ok(g) => g,
                    Err(e) => {
                        emit(TextBatch {
                            text: Vec::new(),
                            first_line: line_no,
                            first_record: record_no,
                            read_error: Some(format!("read error: {e}")),
                        });
                        return;
                    }
                };
                text.truncate(start + got);
                let eof = got == 0;
                if !eof {
                    // Cut at the last newline; the tail starts the next batch.
                    match text.iter().rposition(|&b| b == b'\n') {
                        Some(p) => carry = text.split_off(p + 1),
                        None if text.len() > max_line => {
                            // One line longer than any record may be: stop
                            // before it outgrows the memory budget.
                            emit(TextBatch {
                                text: Vec::new(),
                                first_line: line_no,
                                first_record: record_no,
                                read_error: Some(format!(
                                    "(record {record_no}): the line is longer than {max_line} bytes, \
                                     more than the {max_line} bytes one record may take with this \
                                     memory budget (half the sort budget); raise --max-memory or -m"
                                )),
                            });
                            return;
                        }
                        None => {
                            carry = text;
                            continue;
                        }
                    }
                }
                if text.is_empty() {
                    return;
                }
                let lines = text.iter().filter(|&&b| b == b'\n').count() as u64
                    + u64::from(text.last() != Some(&b'\n'));
                let batch = TextBatch {
                    text,
                    first_line: line_no,
                    first_record: record_no,
                    read_error: None,
                };
                line_no += lines;
                record_no += lines;
                if !emit(batch) || eof {
                    return;
                }
            }
        },
        move |b: TextBatch| -> Result<ParsedBatch, String> {
            if let Some(e) = b.read_error {
                return Err(format!("{name_w}: line {} {e}", b.first_line));
            }
            parse_batch(&b, &hdr, &lookup, &encoder).map_err(|e| format!("{name_w}: {e}"))
        },
    );
    let limit = sink.record_limit();
    let mut n = 0u64;
    while let Some(r) = batches.next_result() {
        let parsed = r
            .map_err(|e| anyhow!("{name}: {e}"))?
            .map_err(|e| anyhow!(e))?;
        for w in &parsed.warnings {
            eprintln!("[W::alnsort] {name}: {w}");
        }
        let mut off = 0usize;
        let mut kstart = 0usize;
        for &kend in &parsed.key_ends {
            let len = u32::from_le_bytes([
                parsed.records[off],
                parsed.records[off + 1],
                parsed.records[off + 2],
                parsed.records[off + 3],
            ]) as usize;
            let rec = &parsed.records[off..off + 4 + len];
            let key = &parsed.key_bytes[kstart..kend as usize];
            if key.len() + rec.len() > limit {
                bail!(
                    "{name}: record {}: {}",
                    n + 1,
                    too_large(key.len() + rec.len(), limit)
                );
            }
            sink.push(key, rec)
                .map_err(|e| anyhow!("{name}: record {}: {e}", n + 1))?;
            progress.add_records(1, rec.len() as u64, 0);
            off += 4 + len;
            kstart = kend as usize;
            n += 1;
        }
    }
    Ok(n)
}

fn parse_batch(
    b: &TextBatch,
    header: &Header,
    lookup: &RefLookup,
    encoder: &KeyEncoder,
) -> std::result::Result<ParsedBatch, String> {
    let mut out = ParsedBatch {
        records: Vec::with_capacity(b.text.len()),
        key_bytes: Vec::new(),
        key_ends: Vec::new(),
        warnings: Vec::new(),
    };
    let mut key = Vec::with_capacity(64);
    let mut line_no = b.first_line;
    let mut record_no = b.first_record;
    for line in b.text.split(|&c| c == b'\n') {
        if line.is_empty() {
            // only the split after a final newline yields an empty last piece
            line_no += 1;
            continue;
        }
        let at = out.records.len();
        sam_parse::parse_sam_record(line, header, lookup, &mut out.records)
            .map_err(|e| format!("line {line_no} (record {record_no}): {e}"))?;
        let r = RecordRef::with_block_size(&out.records[at..]);
        if r.ref_id() < 0 || r.next_ref_id() < 0 {
            unknown_reference_warnings(line, r, lookup, |w| {
                out.warnings
                    .push(format!("line {line_no} (record {record_no}): {w}"))
            });
        }
        encoder
            .encode(r, &mut key)
            .map_err(|e| format!("line {line_no} (record {record_no}): {e}"))?;
        out.key_bytes.extend_from_slice(&key);
        out.key_ends.push(out.key_bytes.len() as u32);
        line_no += 1;
        record_no += 1;
    }
    Ok(out)
}

/// htslib's `sam_parse1` reads an RNAME or RNEXT the header does not know as
/// `*` (unmapped) and warns; alnsort parses it the same way, and warns the
/// same way so the user learns of it.
fn unknown_reference_warnings(
    line: &[u8],
    r: RecordRef<'_>,
    lookup: &RefLookup,
    mut warn: impl FnMut(String),
) {
    let mut fields = line.split(|&c| c == b'\t');
    let rname = fields.nth(2).unwrap_or(b"*");
    let rnext = fields.nth(3).unwrap_or(b"*");
    if r.ref_id() < 0 && rname != b"*" && lookup.get(rname).is_none() {
        warn(format!(
            "unrecognized reference name \"{}\"; treated as unmapped",
            String::from_utf8_lossy(rname)
        ));
    }
    if r.next_ref_id() < 0 && !matches!(rnext, b"*" | b"=") && lookup.get(rnext).is_none() {
        warn(format!(
            "unrecognized mate reference name \"{}\"; treated as unmapped",
            String::from_utf8_lossy(rnext)
        ));
    }
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

    #[test]
    fn unknown_reference_names_warn_like_htslib() {
        let header = alnsort_bam::header::parse_sam_header([&b"@SQ\tSN:chr1\tLN:100"[..]]).unwrap();
        let lookup = header.ref_lookup();
        let line = b"r1\t1\tchrX\t5\t0\t*\tchrY\t7\t0\t*\t*";
        let mut out = Vec::new();
        sam_parse::parse_sam_record(line, &header, &lookup, &mut out).unwrap();
        let mut warnings = Vec::new();
        unknown_reference_warnings(line, RecordRef::with_block_size(&out), &lookup, |w| {
            warnings.push(w)
        });
        assert_eq!(
            warnings,
            [
                "unrecognized reference name \"chrX\"; treated as unmapped",
                "unrecognized mate reference name \"chrY\"; treated as unmapped"
            ]
        );
        let line = b"r1\t1\tchr1\t5\t0\t*\t=\t7\t0\t*\t*";
        out.clear();
        sam_parse::parse_sam_record(line, &header, &lookup, &mut out).unwrap();
        let mut n = 0;
        unknown_reference_warnings(line, RecordRef::with_block_size(&out), &lookup, |_| n += 1);
        assert_eq!(n, 0, "known names and '=' do not warn");
    }
}
