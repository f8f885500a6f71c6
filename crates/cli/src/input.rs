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
        (Box::new(unsafe { File::from_raw_fd(fd) }), None)
    } else {
        let f = File::open(path).with_context(|| format!("cannot open input {path}"))?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(f), size)
    };
    let prefix = read_prefix(&mut *raw, 4).with_context(|| format!("{name}: read error"))?;
    if prefix.is_empty() {
        bail!("{name}: the input is empty (no header, no records)");
    }
    if prefix.starts_with(&GZIP_MAGIC) {
        let mut reader =
            ParallelReader::new(raw, pool, prefix).map_err(|e| anyhow!("{name}: {e}"))?;
        let head = reader.fill_buf().map_err(|e| anyhow!("{name}: {e}"))?;
        if head.len() >= 4 && &head[..4] == BAM_MAGIC {
            let header = alnsort_bam::header::read_bam_header(&mut reader)
                .map_err(|e| anyhow!("{name}: invalid BAM header: {e}"))?;
            return Ok(OpenInput {
                name,
                header,
                size,
                body: Body::Bam(reader),
            });
        }
        let boxed: Box<dyn Read + Send> = Box::new(reader);
        return open_sam(name, boxed, size);
    }
    if prefix.starts_with(b"CRAM") {
        bail!("{name}: CRAM input is not supported yet; convert it with samtools view -b first");
    }
    if prefix.starts_with(BAM_MAGIC) {
        bail!("{name}: uncompressed raw BAM (without BGZF) is not a valid BAM file");
    }
    let chained: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(prefix).chain(raw));
    open_sam(name, chained, size)
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

/// Lines per SAM parse batch: about 4 MiB of text at 300-byte lines, large
/// enough to amortise dispatch, small enough to keep all workers busy.
const SAM_BATCH_BYTES: usize = 4 << 20;

struct ParsedBatch {
    records: Vec<u8>,
    key_bytes: Vec<u8>,
    key_ends: Vec<u32>,
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
        let mut size = [0u8; 4];
        let got = read_full(&mut reader, &mut size).map_err(|e| anyhow!("{name}: {e}"))?;
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
        rec.clear();
        rec.extend_from_slice(&size);
        rec.resize(4 + len, 0);
        let got = read_full(&mut reader, &mut rec[4..]).map_err(|e| anyhow!("{name}: {e}"))?;
        if got < len {
            bail!(
                "{}: truncated: block_size says {len} bytes but the input ends after {got}",
                where_(n)
            );
        }
        validate::validate_record(&rec[4..], n_ref).map_err(|e| anyhow!("{}: {e}", where_(n)))?;
        // What htslib would hold after reading it (recomputed bin, CG CIGAR
        // moved into place), so output records equal samtools' byte for byte.
        if let Some(fixed) = validate::htslib_normalise(&rec).map_err(|e| anyhow!("{}: {e}", where_(n)))? {
            rec = fixed;
        }
        encoder
            .encode(RecordRef::with_block_size(&rec), &mut key)
            .map_err(|e| anyhow!("{}: {e}", where_(n)))?;
        sink.push(&key, &rec)?;
        n += 1;
        progress.add_records(1, (4 + len) as u64, pos.block_offset);
    }
    Ok(n)
}

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
                            read_error: Some(e.to_string()),
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
                return Err(format!(
                    "{name_w}: read error at line {}: {e}",
                    b.first_line
                ));
            }
            parse_batch(&b, &hdr, &lookup, &encoder).map_err(|e| format!("{name_w}: {e}"))
        },
    );
    let mut n = 0u64;
    while let Some(r) = batches.next() {
        let parsed = r
            .map_err(|e| anyhow!("{name}: {e}"))?
            .map_err(|e| anyhow!(e))?;
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
            sink.push(&parsed.key_bytes[kstart..kend as usize], rec)?;
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
        encoder
            .encode(RecordRef::with_block_size(&out.records[at..]), &mut key)
            .map_err(|e| format!("line {line_no} (record {record_no}): {e}"))?;
        out.key_bytes.extend_from_slice(&key);
        out.key_ends.push(out.key_bytes.len() as u32);
        line_no += 1;
        record_no += 1;
    }
    Ok(out)
}
