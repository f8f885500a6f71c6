//! The `.crai` of a CRAM file that already exists (`alnsort index`), as
//! htslib's `cram_index_build` writes it: one line per slice from its header
//! (reference, start, span, the container's byte offset, the slice's
//! landmark and size), or, for a slice of several references, one line per
//! run of records on one reference, from the records decoded (the same
//! lines the writer makes of the slices it writes: `encode::crai_lines`).

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::container::SliceHeader;
use crate::encode::crai_lines;
use crate::encode_container::SliceInfo;
use crate::{CramError, CramReader, RefSource};

/// A finished `.crai`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crai {
    /// The lines, uncompressed.
    pub text: Vec<u8>,
    /// The file's bytes (gzip of `text`).
    pub gzip: Vec<u8>,
    /// Records the file holds (from the container headers).
    pub records: u64,
}

/// Counts the bytes read through it: the reader reads containers exactly,
/// so the count is the offset of the next container.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Indexes the CRAM file `input` reads from its first byte (named `file`
/// in errors). Slices of several references are decoded, against `refs`
/// where their records need a reference.
pub fn index_cram<R: Read>(file: &str, input: R, refs: &RefSource) -> Result<Crai, CramError> {
    let count = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: input,
        count: Arc::clone(&count),
    };
    let mut reader = CramReader::open(file, counting, refs)?;
    let major = reader.version().0;
    let ctx = reader.context();
    let mut text = Vec::new();
    let mut records = 0u64;
    let mut last: Option<(i32, i32)> = None;
    let mut decoded = Vec::new();
    while let Some(container) = reader.next_container()? {
        let raw = container.raw();
        // The reader has read exactly this container last.
        let offset =
            count.load(Ordering::Relaxed) - (raw.header_bytes.len() + raw.body.len()) as u64;
        let header = &raw.header;
        let unsorted = |what: String| CramError::Unsorted {
            file: file.to_string(),
            offset,
            what,
        };
        if let Some((reference, start)) = last {
            if header.reference_id == reference && header.alignment_start < start {
                return Err(unsorted(format!(
                    "it starts at {} on reference id {reference}, before the previous container's {start}",
                    header.alignment_start
                )));
            }
        }
        last = Some((header.reference_id, header.alignment_start));
        records += container.records;
        let read_err = |source: io::Error| CramError::ReadContainer {
            file: file.to_string(),
            records_before: container.first_record,
            source,
        };
        // Records of the container's slices, decoded once if a slice of
        // several references needs them.
        let mut slice_records: Option<Vec<(usize, usize)>> = None;
        let mut first_in_slice = 0usize;
        for i in 0..raw.slice_count() {
            let bytes = raw.slice_bytes(i).map_err(read_err)?;
            let slice = SliceHeader::read_version(bytes, major).map_err(read_err)?;
            let info = SliceInfo {
                reference: slice.reference_id,
                start: slice.alignment_start,
                span: slice.alignment_span,
                landmark: raw.header.landmarks[i] as u32,
                size: bytes.len() as u32,
            };
            let lines = if slice.reference_id == -2 {
                let spans = match &mut slice_records {
                    Some(spans) => spans,
                    None => {
                        decoded.clear();
                        container.decode(&ctx, &mut decoded)?;
                        slice_records.insert(record_spans(&decoded))
                    }
                };
                let end = (first_in_slice + slice.record_count).min(spans.len());
                let recs = spans[first_in_slice.min(end)..end]
                    .iter()
                    .map(|&(s, e)| &decoded[s..e]);
                check_slice_order(recs.clone()).map_err(unsorted)?;
                crai_lines(info, recs)
            } else {
                crai_lines(info, std::iter::empty())
            };
            first_in_slice += slice.record_count;
            for l in &lines {
                l.write(&mut text, offset);
            }
        }
    }
    let gzip = gzip(&text);
    Ok(Crai {
        text,
        gzip,
        records,
    })
}

/// Where each framed record of `framed` (back to back) lies.
fn record_spans(framed: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(size) = framed.get(at..at + 4) {
        let end = at + 4 + u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
        spans.push((at, end.min(framed.len())));
        at = end;
    }
    spans
}

/// htslib's check in a slice of several references: a record may not
/// start before the previous one on the same reference.
fn check_slice_order<'a>(records: impl Iterator<Item = &'a [u8]>) -> Result<(), String> {
    let mut last: Option<(i32, i32)> = None;
    for (i, framed) in records.enumerate() {
        let r = alnsort_bam::RecordRef::with_block_size(framed);
        let here = (r.ref_id(), r.pos());
        if let Some((reference, pos)) = last {
            if here.0 == reference && here.1 < pos {
                return Err(format!(
                    "record {} of a slice of several references starts at {} on reference id {reference}, \
                     before the previous record's {}",
                    i + 1,
                    here.1 + 1,
                    pos + 1
                ));
            }
        }
        last = Some(here);
    }
    Ok(())
}
/// The `.crai` file of its text: gzip as htslib's `bgzf_open(fn, "wg")`
/// writes it (zlib's default level).
pub fn gzip(text: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::GzBuilder::new()
        .operating_system(3)
        .write(Vec::new(), flate2::Compression::default());
    gz.write_all(text)
        .and_then(|_| gz.finish())
        .expect("compressing in memory")
}
