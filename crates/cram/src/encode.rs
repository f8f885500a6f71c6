//! CRAM output: framed BAM records in, CRAM containers out.

use crate::encode_container::{self as container, SliceInfo};
use crate::error::{parse_header_text, take_reference_error, CramError, Unencodable};
use crate::options::{CramOptions, CramVersion};
use crate::reference::{normalized_md5_hex, Lease, M5Mismatch, RefHolding, RefSource, References};
use alnsort_pipeline::OrderedQueue;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// Writes sorted BAM records as CRAM. Each container (one slice of
/// [`RECORDS_PER_SLICE`] records, fewer when they reach [`BASES_PER_SLICE`]
/// bases or [`BYTES_PER_SLICE`] bytes) is encoded by its own job on the pool into
/// memory (`container::encode`, with its record counter set for its place
/// in the file) and written in order (`alnsort_pipeline::OrderedQueue`).
pub struct CramWriter<W: Write> {
    shared: Arc<Shared>,
    /// Where the file definition, header container, the encoded containers
    /// and the EOF container go.
    out: Counted<W>,
    /// The `.crai` lines of the containers written so far, when an index
    /// is wanted ([`CramWriter::with_index`]).
    crai: Option<Vec<u8>>,
    /// Records handed to encoding jobs so far.
    records: u64,
    /// The records of the slice being filled.
    slice: Vec<u8>,
    slice_starts: Vec<usize>,
    /// The bases of the records in `slice`.
    slice_bases: usize,
    /// The reference id of the last record in `slice`.
    slice_ref: i32,
    /// Slice buffers back from finished jobs, for the next slices (a new
    /// buffer per slice was grown by doubling, every byte copied again and
    /// its pages faulted in, on the thread that feeds the records).
    spare: Vec<SliceBuffers>,
    queue: OrderedQueue<(Result<Encoded, CramError>, SliceBuffers)>,
    /// Containers in flight before the writer waits for the oldest.
    depth: usize,
}

/// What every encoding job reads.
struct Shared {
    file: String,
    /// The read-group series value of each @RG ID, in header order.
    read_groups: HashMap<Vec<u8>, i32>,
    /// How many @SQ the header has.
    n_refs: usize,
    references: Arc<References>,
    opts: CramOptions,
    /// Whether jobs work out their slice's `.crai` lines.
    index: bool,
}

/// A slice's records (framed BAM records) and where each starts.
type SliceBuffers = (Vec<u8>, Vec<usize>);

/// One encoded container and, when an index is wanted, its slice's
/// `.crai` lines without the container's offset in the file.
struct Encoded {
    bytes: Vec<u8>,
    crai: Vec<CraiLine>,
}

/// A `.crai` line (htslib `cram_index_slice`): reference id, alignment
/// start, span, then the container's offset (known when it is written),
/// the slice's landmark and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CraiLine {
    reference: i32,
    start: i64,
    span: i64,
    landmark: u32,
    size: u32,
}

impl CraiLine {
    /// Appends the line, in the container at byte `offset` of the file,
    /// to `out` in htslib's format: "%d\t%ld\t%ld\t%ld\t%d\t%d\n".
    pub(crate) fn write(&self, out: &mut Vec<u8>, offset: u64) {
        writeln!(
            out,
            "{}\t{}\t{}\t{offset}\t{}\t{}",
            self.reference, self.start, self.span, self.landmark, self.size
        )
        .expect("writing to memory");
    }
}

/// Counts the bytes written through it (the containers' offsets).
struct Counted<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Counted<W> {
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }
}

/// Records per slice (and per container), at most.
const RECORDS_PER_SLICE: usize = 10_240;
/// Bases per slice after which it ends: htslib's rule (`bases_per_slice`
/// = 500 x `seqs_per_slice`), so that slices of long reads hold no more
/// bases than one of short reads.
const BASES_PER_SLICE: usize = 500 * RECORDS_PER_SLICE;
/// BAM bytes per slice after which it ends (records whose bytes are not
/// bases: long tags, CIGARs): about what 10,240 records of 150 bases take,
/// so that the containers in flight stay within what `--max-memory` sets
/// aside for them per thread.
const BYTES_PER_SLICE: usize = 6 << 20;

impl<W: Write> CramWriter<W> {
    /// Starts a CRAM file on `inner` and writes its header, edited as
    /// htslib edits the header of a CRAM it writes (`cram_write_SAM_hdr`):
    /// unless `no_ref`, each @SQ without an M5 gets one, and with a
    /// `--reference` FASTA each @SQ's UR is set to that file
    /// ([`RefSource::header_url`]); the lines keep their order, and each
    /// new tag is appended to its line (M5 before UR), an existing UR's
    /// value replaced in place (`sam_hdr_update_line`).
    /// `holding` says how long references stay loaded: only while slices
    /// use them ([`RefHolding::InUse`]) when the records come in coordinate
    /// order, else all until the end.
    pub fn new(
        file: &str,
        inner: W,
        header: &alnsort_bam::header::Header,
        refs: &RefSource,
        opts: &CramOptions,
        holding: RefHolding,
        pool: Arc<rayon::ThreadPool>,
    ) -> Result<CramWriter<W>, CramError> {
        let sam_header = parse_header_text(file, &header.to_sam_text())?;
        let references = refs.references(&sam_header, holding, M5Mismatch::Refuse);
        let header_err = |source| match take_reference_error(source) {
            Ok(r) => CramError::EncodeReference {
                file: file.to_string(),
                record: 0,
                source: Box::new(r),
            },
            Err(source) => CramError::Write {
                file: file.to_string(),
                source,
            },
        };
        let mut header = header.clone();
        // No reference is needed with no_ref, so none is looked for: the
        // header stays as given (htslib: `!fd->no_ref`).
        if !opts.no_ref {
            // Each @SQ without an M5 gets one: computed one reference at a
            // time, none kept, when references are held while in use; else
            // from the references held for the whole run, so that each is
            // loaded once.
            let missing = if holding == RefHolding::InUse {
                references
                    .missing_m5(&sam_header, &pool)
                    .map_err(header_err)?
            } else {
                let mut lease = references.lease();
                let mut out = Vec::new();
                for (id, (_, rs)) in sam_header.reference_sequences().iter().enumerate() {
                    if rs.other_fields().get(b"M5").is_none() {
                        let seq = lease.sequence(id).map_err(header_err)?;
                        out.push((id, normalized_md5_hex(AsRef::<[u8]>::as_ref(&*seq))));
                    }
                }
                out
            };
            let names: Vec<&[u8]> = sam_header
                .reference_sequences()
                .keys()
                .map(|name| name.as_ref())
                .collect();
            header.set_sq_tags(
                b"M5",
                missing
                    .iter()
                    .filter_map(|(id, m5)| Some((*names.get(*id)?, m5.as_bytes()))),
            );
            if let Some(url) = refs.header_url() {
                header.set_sq_tags(b"UR", names.iter().map(|name| (*name, url.as_slice())));
            }
        }
        let text = header.to_sam_text();
        let minor = match opts.version {
            CramVersion::V3_0 => 0,
            CramVersion::V3_1 => 1,
        };
        let mut out = Counted { inner, written: 0 };
        out.write_all(&container::file_start(minor, &text))
            .map_err(header_err)?;
        let read_groups = sam_header
            .read_groups()
            .keys()
            .enumerate()
            .map(|(i, id)| (id.to_vec(), i as i32))
            .collect();
        let depth = 2 * pool.current_num_threads().max(1);
        Ok(CramWriter {
            shared: Arc::new(Shared {
                file: file.to_string(),
                read_groups,
                n_refs: sam_header.reference_sequences().len(),
                references,
                opts: opts.clone(),
                index: false,
            }),
            out,
            crai: None,
            records: 0,
            slice: Vec::new(),
            slice_starts: Vec::new(),
            slice_bases: 0,
            slice_ref: -1,
            spare: Vec::new(),
            queue: OrderedQueue::new(pool, "CRAM encoding"),
            depth,
        })
    }

    /// Also builds the file's `.crai` (returned by
    /// [`CramWriter::finish_indexed`]); call before any record.
    pub fn with_index(mut self) -> CramWriter<W> {
        Arc::get_mut(&mut self.shared)
            .expect("with_index is called before any record is written")
            .index = true;
        self.crai = Some(Vec::new());
        self
    }

    /// Appends one BAM record (with its `block_size` prefix). Records are
    /// held until their slice is full, then encoded.
    pub fn write_record(&mut self, framed: &[u8]) -> Result<(), CramError> {
        // A validated record from the sort (as every job's records are).
        let record = alnsort_bam::RecordRef::with_block_size(framed);
        let ref_id = record.ref_id();
        if self.shared.opts.embed_ref && !self.slice_starts.is_empty() && ref_id != self.slice_ref {
            // A slice embeds one reference's bases: no slice of several.
            self.flush_slice()?;
        }
        self.slice_ref = ref_id;
        self.slice_starts.push(self.slice.len());
        self.slice.extend_from_slice(framed);
        self.slice_bases += record.l_seq();
        if self.slice_starts.len() == RECORDS_PER_SLICE
            || self.slice_bases >= BASES_PER_SLICE
            || self.slice.len() >= BYTES_PER_SLICE
        {
            self.flush_slice()?;
        }
        Ok(())
    }

    /// Hands the filled slice to an encoding job, then writes the
    /// containers done, waiting for the oldest while too many are in flight.
    fn flush_slice(&mut self) -> Result<(), CramError> {
        let (next, next_starts) = self.spare.pop().unwrap_or_else(|| {
            (
                Vec::with_capacity(self.slice.capacity()),
                Vec::with_capacity(RECORDS_PER_SLICE),
            )
        });
        self.slice_bases = 0;
        let slice = std::mem::replace(&mut self.slice, next);
        let starts = std::mem::replace(&mut self.slice_starts, next_starts);
        let first = self.records;
        self.records += starts.len() as u64;
        let shared = Arc::clone(&self.shared);
        // The slice's references are held from now, in file order, not from
        // when its job starts: a later job that ran first would otherwise
        // release a reference this one needs, evicting it to be loaded again.
        let mut lease = shared.references.lease();
        for id in slice_references(&shared, &slice, &starts) {
            lease.reserve(id);
        }
        self.queue.push(move || {
            let encoded = encode_container(&shared, &slice, &starts, first, lease);
            (encoded, (slice, starts))
        });
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
        done: Result<(Result<Encoded, CramError>, SliceBuffers), alnsort_pipeline::Lost>,
    ) -> Result<(), CramError> {
        let file = &self.shared.file;
        let (encoded, (mut slice, mut starts)) = done.map_err(|source| CramError::Lost {
            file: file.clone(),
            source,
        })?;
        slice.clear();
        starts.clear();
        self.spare.push((slice, starts));
        let Encoded { bytes, crai } = encoded?;
        if let Some(out) = &mut self.crai {
            let offset = self.out.written;
            for l in crai {
                l.write(out, offset);
            }
        }
        self.out
            .write_all(&bytes)
            .map_err(|source| CramError::Write {
                file: file.clone(),
                source,
            })
    }

    /// Writes the last container and the EOF container; returns the
    /// underlying writer.
    pub fn finish(self) -> Result<W, CramError> {
        Ok(self.finish_indexed()?.0)
    }

    /// As [`CramWriter::finish`], also returning the `.crai`'s text
    /// (htslib's lines, one per slice and reference; the file is its gzip
    /// stream: [`crate::crai::gzip`]) when the writer was made
    /// [`CramWriter::with_index`].
    pub fn finish_indexed(mut self) -> Result<(W, Option<Vec<u8>>), CramError> {
        if !self.slice_starts.is_empty() {
            self.flush_slice()?;
        }
        while !self.queue.is_empty() {
            self.write_oldest()?;
        }
        let file = self.shared.file.clone();
        self.out
            .write_all(&container::EOF_CONTAINER)
            .and_then(|_| self.out.inner.flush())
            .map_err(|source| CramError::Write { file, source })?;
        Ok((self.out.inner, self.crai.take()))
    }
}

/// The framed records of a slice, in order.
fn slice_records<'a>(slice: &'a [u8], starts: &[usize]) -> Vec<&'a [u8]> {
    (0..starts.len())
        .map(|k| {
            let end = starts.get(k + 1).copied().unwrap_or(slice.len());
            &slice[starts[k]..end]
        })
        .collect()
}

/// Whether all `records` are on one reference (id), unmapped ones included.
fn single_reference(records: &[&[u8]]) -> bool {
    let tid_of = |r: &[u8]| alnsort_bam::RecordRef::with_block_size(r).ref_id();
    let first_tid = records.first().map_or(-1, |r| tid_of(r));
    records.iter().all(|r| tid_of(r) == first_tid)
}

/// Whether the encoder reads the reference of `record`: a mapped record's,
/// or a placed unmapped one's in a slice of one reference (its span's MD5).
fn uses_reference(shared: &Shared, record: &alnsort_bam::RecordRef, single: bool) -> bool {
    !shared.opts.no_ref && record.ref_id() >= 0 && (record.flag() & 0x4 == 0 || single)
}

/// The header's references a slice's job reads (see [`uses_reference`]),
/// each once; ids outside the header are left to the job, which refuses
/// them by record.
fn slice_references(shared: &Shared, slice: &[u8], starts: &[usize]) -> Vec<usize> {
    let records = slice_records(slice, starts);
    let single = single_reference(&records);
    let mut ids: Vec<usize> = Vec::new();
    for r in &records {
        let view = alnsort_bam::RecordRef::with_block_size(r);
        if uses_reference(shared, &view, single) {
            let id = view.ref_id() as usize;
            if id < shared.n_refs && ids.last() != Some(&id) {
                ids.push(id);
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Encodes one slice's records (framed BAM records at `starts` in `slice`;
/// `first` records precede them in the file) into one CRAM container.
fn encode_container(
    shared: &Shared,
    slice: &[u8],
    starts: &[usize],
    first: u64,
    mut lease: Lease,
) -> Result<Encoded, CramError> {
    let file = &shared.file;
    let records = slice_records(slice, starts);
    // The references the slice needs (its own, for the MD5 of its span,
    // and each mapped record's; `slice_references`) stay loaded until the
    // job ends.
    let mut sequences: Vec<Option<Arc<noodles_fasta::record::Sequence>>> =
        vec![None; shared.n_refs];
    let single = single_reference(&records);
    for (k, r) in records.iter().enumerate() {
        let view = alnsort_bam::RecordRef::with_block_size(r);
        let tid = view.ref_id();
        if !uses_reference(shared, &view, single) {
            continue;
        }
        let record = first + k as u64 + 1;
        let t = tid as usize;
        if t >= shared.n_refs {
            return Err(CramError::Unsupported {
                file: file.clone(),
                record,
                what: Unencodable::UnknownReference(tid),
            });
        }
        if sequences[t].is_none() {
            let seq = lease
                .sequence(t)
                .map_err(|source| match take_reference_error(source) {
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
                })?;
            sequences[t] = Some(seq);
        }
    }
    let views: Vec<Option<&[u8]>> = sequences
        .iter()
        .map(|s| s.as_deref().map(AsRef::<[u8]>::as_ref))
        .collect();
    let refs = container::SliceRefs { sequences: &views };
    let encoded = SCRATCH
        .with(|s| {
            container::encode(
                &records,
                first,
                &refs,
                &shared.read_groups,
                &shared.opts,
                &mut s.borrow_mut(),
            )
        })
        .map_err(|(i, what)| CramError::Unsupported {
            file: file.clone(),
            record: first + i as u64 + 1,
            what,
        })?;
    let crai = if shared.index {
        crai_lines(encoded.info, records.iter().copied())
    } else {
        Vec::new()
    };
    Ok(Encoded {
        bytes: encoded.bytes,
        crai,
    })
}

thread_local! {
    /// Each pool thread's encoding buffers, reused from slice to slice.
    static SCRATCH: std::cell::RefCell<container::Scratch> = Default::default();
}

impl container::ReadGroups for HashMap<Vec<u8>, i32> {
    fn id(&self, name: &[u8]) -> Option<i32> {
        self.get(name).copied()
    }
}

/// The `.crai` lines of a slice, as htslib's `cram_index_slice` makes them:
/// one line from the slice header, or, for a slice of several references
/// (id -2), one line per run of records on one reference, from the first
/// record's start to the furthest end (`cram_index_build_multiref`; a
/// record's end as htslib's decoder sets it: the last reference base its
/// CIGAR covers, never before its start, and its start when unmapped).
pub(crate) fn crai_lines<'a>(
    slice: SliceInfo,
    records: impl Iterator<Item = &'a [u8]>,
) -> Vec<CraiLine> {
    let line = |reference, start, span| CraiLine {
        reference,
        start,
        span,
        landmark: slice.landmark,
        size: slice.size,
    };
    if slice.reference != -2 {
        return vec![line(slice.reference, slice.start as i64, slice.span as i64)];
    }
    let mut lines = Vec::new();
    let mut run: Option<(i32, i64, i64)> = None;
    for framed in records {
        let view = alnsort_bam::RecordRef::with_block_size(framed);
        let reference = view.ref_id();
        let start = view.pos() as i64 + 1;
        let end = if view.flag() & 0x4 != 0 {
            start
        } else {
            (start - 1 + view.reference_length()).max(start)
        };
        match &mut run {
            Some((r, _, e)) if *r == reference => *e = (*e).max(end),
            _ => {
                if let Some((r, s, e)) = run {
                    lines.push(line(r, s, e - s + 1));
                }
                run = Some((reference, start, end));
            }
        }
    }
    if let Some((r, s, e)) = run {
        lines.push(line(r, s, e - s + 1));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::md_nm::tests::record;

    /// `record` on reference `tid` (md_nm's helper puts every record on 0).
    fn on(tid: i32, framed: Vec<u8>) -> Vec<u8> {
        let mut f = framed;
        f[4..8].copy_from_slice(&tid.to_le_bytes());
        f
    }

    #[test]
    fn crai_lines_of_a_slice_of_several_references_go_by_reference() {
        let info = |reference| SliceInfo {
            reference,
            start: 7,
            span: 90,
            landmark: 300,
            size: 5000,
        };
        let line = |reference, start, span| CraiLine {
            reference,
            start,
            span,
            landmark: 300,
            size: 5000,
        };
        let recs = [
            // 0-based 99, 10M2D5M: 1-based 100..116.
            on(
                0,
                record(0, 99, &[(0, 10), (2, 2), (0, 5)], &[b'A'; 15], b""),
            ),
            // 1-based 101..104, inside the first.
            on(0, record(0, 100, &[(0, 4)], b"ACGT", b"")),
            // Soft clips only: its end is its start (200).
            on(1, record(0, 199, &[(4, 4)], b"ACGT", b"")),
            // Placed unmapped: end at its start (300).
            on(1, record(4, 299, &[], b"AC", b"")),
            on(-1, record(4, -1, &[], b"AC", b"")),
        ];
        let got = crai_lines(info(-2), recs.iter().map(|r| &r[..]));
        assert_eq!(got, [line(0, 100, 17), line(1, 200, 101), line(-1, 0, 1)]);
        // One reference: the slice header's values.
        let got = crai_lines(info(1), recs.iter().map(|r| &r[..]));
        assert_eq!(got, [line(1, 7, 90)]);
    }
}
