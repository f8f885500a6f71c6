//! Several sorted inputs read as one stream: headers merged as samtools merge merges them, records translated into the merged header's terms and interleaved by a loser tree (`MergedStream`), optionally within a region.

use crate::error::{Context, Error, Result};
use crate::io::input;
use crate::io::input::{Fed, Records};
use crate::report::progress::{thread_cpu_seconds, Progress};
use alnsort_bam::header::Header;
pub use alnsort_bam::header_merge::MergeOptions;
use alnsort_bam::header_merge::{HeaderMerger, Translation};
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_bam::reader::{
    BamScanner, Decoded, RangeEnd, RawBatch, ReadError, ScanOptions, Scanner, UnknownReference,
};
use alnsort_bam::RecordRef;
use alnsort_index::IndexReader;
use alnsort_markdup::htsjdk::JavaHeap;
use alnsort_pipeline::Ordered;
use alnsort_sort::batch::Batch;
use alnsort_sort::loser::{LoserTree, MergeSource};
use alnsort_sort::{KeyKind, Sorter};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
/// The inputs opened, their headers merged.
pub struct MergedStream {
    pub header: Header,
    /// Bytes of the input files, when every one is a regular file.
    pub size: Option<u64>,
    sources: Vec<MergeInput>,
    failure: Rc<RefCell<Option<Error>>>,
    /// What decoding found besides records so far (unknown reference
    /// names read as unmapped, inputs without their EOF block).
    tally: Rc<Cell<Decoded>>,
    /// Records carry a second key (of the sort order) for the sink.
    two_keys: bool,
}

/// What [`merged_inputs`] merges and how.
pub struct MergePlan<'a> {
    pub paths: &'a [String],
    /// Header merging (`-c`, `-p`, `-s`).
    pub opts: MergeOptions,
    /// The order the inputs are interleaved by.
    pub order: &'a SortOrder,
    /// The records are handed on with keys of this order instead (the
    /// encoder returned is for it).
    pub sort_order: Option<&'a SortOrder>,
    /// `-R`: only the records overlapping it.
    pub region: Option<&'a str>,
    pub unknown_reference: UnknownReference,
    /// Where CRAM inputs' references are found.
    pub refs: &'a alnsort_cram::RefSource,
    /// An input out of order is an error naming file and record.
    pub check_sorted: bool,
}

/// Opens the plan's inputs, merges their headers, and starts reading each
/// (decoding on `pool`), interleaved by keys of its order in the merged
/// header's terms.
pub fn merged_inputs(
    plan: &MergePlan<'_>,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<(MergedStream, Arc<KeyEncoder>)> {
    merged_inputs_with(plan, pool, true)
}

/// [`merged_inputs`] handing on each record as its input holds it, its
/// `RG`/`PG` tags and reference ids not translated into the merged
/// header's terms: for a caller that merges the headers another tool's way
/// and translates the records itself (`alnsort MarkDuplicates` with several
/// inputs, htsjdk's header merge: [`crate::markdup::inputs::HtsjdkMerge`]).
/// The inputs' `@SQ` lines must be the same (the keys are the merged
/// header's only then).
pub fn merged_inputs_untranslated(
    plan: &MergePlan<'_>,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<(MergedStream, Arc<KeyEncoder>)> {
    merged_inputs_with(plan, pool, false)
}

fn merged_inputs_with(
    plan: &MergePlan<'_>,
    pool: &Arc<rayon::ThreadPool>,
    translate: bool,
) -> Result<(MergedStream, Arc<KeyEncoder>)> {
    let MergePlan {
        paths,
        opts,
        order,
        sort_order,
        region,
        unknown_reference,
        refs,
        check_sorted,
    } = *plan;
    let mut opened = Vec::with_capacity(paths.len());
    let mut merger = HeaderMerger::new(opts);
    let mut translations = Vec::new();
    let mut reset_order = false;
    let mut size = Some(0u64);
    for path in paths {
        let inp = input::open_with_refs(path, Arc::clone(pool), refs)?;
        size = size.zip(inp.size).map(|(a, b)| a + b);
        let t = merger
            .add(&inp.header)
            .with_context(|| format!("{}: merging its header", inp.name))?;
        if t.lost_coord_sort && matches!(order, SortOrder::Coordinate | SortOrder::Minimiser(_)) {
            if check_sorted {
                eprintln!(
                    "[bam_merge_core] Order of targets in file {path} caused coordinate sort to be lost"
                );
            }
            reset_order = true;
        }
        translations.push(t);
        opened.push(inp);
    }
    if check_sorted
        && !opened
            .iter()
            .any(|i| i.header.lines().iter().any(|l| l.starts_with(b"@HD")))
    {
        eprintln!("[W::bam_merge_core2] No @HD tag found.");
    }
    for w in &merger.warnings {
        eprintln!("{w}");
    }
    let header = merger.finish(reset_order).context("merging the headers")?;
    let mut indexes = Vec::new();
    let region = match region {
        Some(r) => {
            let parsed = parse_region(&header, r).ok_or_else(|| {
                Error::Refused(format!(
                    "-R: badly formatted region or unknown reference name: \"{r}\""
                ))
            })?;
            for path in paths {
                let found = IndexReader::find_beside(Path::new(path))
                    .with_context(|| format!("-R: failed to load index for {path}"))?;
                let Some((_, index)) = found else {
                    return Err(Error::Refused(format!("-R: failed to load index for {path}; merging a region needs indexed inputs \
                         ({path}.bai or {path}.csi), as in samtools")));
                };
                indexes.push(index);
            }
            Some(parsed)
        }
        None => None,
    };
    let wide = crate::io::output::has_long_reference(&header);
    let encoder = Arc::new(
        KeyEncoder::new(order.clone(), header.n_ref(), &header.library_map())
            .with_wide_positions(wide),
    );
    let sort_encoder = sort_order.filter(|o| *o != order).map(|o| {
        Arc::new(
            KeyEncoder::new(o.clone(), header.n_ref(), &header.library_map())
                .with_wide_positions(wide),
        )
    });
    let failure = Rc::new(RefCell::new(None));
    let tally = Rc::new(Cell::new(Decoded::default()));
    let shared = MergeShared {
        translate,
        encoder: Arc::clone(&encoder),
        sort_encoder: sort_encoder.clone(),
        n_ref: header.n_ref(),
        libraries: header.library_map(),
        unknown_reference,
        check: check_sorted,
        region,
        region_name: region.map(|r| header.refs()[r.tid as usize].name.clone()),
        // Past the region's end nothing more can overlap it, in coordinate
        // order (an index implies it).
        stop_past_region: *order == SortOrder::Coordinate,
    };
    let mut indexes = indexes.into_iter();
    let mut sources = Vec::with_capacity(opened.len());
    for (input, ((inp, t), path)) in opened.into_iter().zip(translations).zip(paths).enumerate() {
        sources.push(MergeInput::start(
            input,
            inp,
            path,
            indexes.next().as_ref(),
            t,
            &shared,
            pool,
            Rc::clone(&failure),
            Rc::clone(&tally),
        )?);
    }
    // Each input's first batch is read by now: an input that cannot be
    // read from its start (a CRAM whose reference is missing, a damaged
    // file) fails here, before any output is written.
    if let Some(e) = failure.borrow_mut().take() {
        return Err(e);
    }
    Ok((
        MergedStream {
            header,
            size,
            sources,
            failure,
            tally,
            two_keys: sort_encoder.is_some(),
        },
        sort_encoder.unwrap_or(encoder),
    ))
}

impl MergedStream {
    /// Calls `sink(key, record)` for each record in merged order.
    pub fn for_each(self, mut sink: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<u64> {
        self.for_each_from(|_, _, key, rec| sink(key, rec))
    }

    /// [`MergedStream::for_each`] that also names where each record comes
    /// from: `sink(input, record of that input (0-based), key, record)`.
    pub fn for_each_from(
        self,
        mut sink: impl FnMut(usize, u64, &[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let MergedStream {
            sources,
            failure,
            two_keys,
            ..
        } = self;
        let mut taken = vec![0u64; sources.len()];
        let mut tree = LoserTree::new(sources, false);
        let mut n = 0u64;
        loop {
            if let Some(e) = failure.borrow_mut().take() {
                return Err(e);
            }
            let Some(src) = tree.winner_mut() else { break };
            let Some(key) = (if two_keys {
                Some(src.sort_key())
            } else {
                src.key()
            }) else {
                break;
            };
            sink(src.input, taken[src.input], key, src.record())?;
            taken[src.input] += 1;
            n += 1;
            tree.pop()?;
        }
        if let Some(e) = failure.borrow_mut().take() {
            return Err(e);
        }
        Ok(n)
    }

    /// Calls `sink(input, record)` for each record, the inputs interleaved
    /// by `cmp` over their next records, not by sort keys: the order
    /// another tool merges them in (Picard reads several inputs through
    /// htsjdk's `MergingSamRecordIterator`: [`crate::markdup::inputs`],
    /// `alnsort sort --markdup IN1 IN2 ...` and `alnsort MarkDuplicates
    /// I=a I=b`). The inputs wait in a [`JavaHeap`], so records that
    /// compare equal come out of different inputs in the order Java's
    /// `PriorityQueue` gives them, not always the earlier input first.
    pub fn for_each_by(
        self,
        cmp: impl Fn(&[u8], &[u8]) -> std::cmp::Ordering,
        mut sink: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let MergedStream {
            mut sources,
            failure,
            ..
        } = self;
        let mut heap = JavaHeap::default();
        for i in 0..sources.len() {
            if !sources[i].done {
                heap.offer(i, |a, b| cmp(sources[a].record(), sources[b].record()));
            }
        }
        let mut n = 0u64;
        loop {
            if let Some(e) = failure.borrow_mut().take() {
                return Err(e);
            }
            let Some(b) = heap.poll(|a, b| cmp(sources[a].record(), sources[b].record())) else {
                break;
            };
            sink(b, sources[b].record())?;
            n += 1;
            sources[b].advance()?;
            if !sources[b].done {
                heap.offer(b, |a, b| cmp(sources[a].record(), sources[b].record()));
            }
        }
        if let Some(e) = failure.borrow_mut().take() {
            return Err(e);
        }
        Ok(n)
    }
}

/// Sort batches kept for reuse by [`feed_sorter`]: the batch being filled
/// and the ones the sorter's copy jobs still hold cycle through these.
const FEED_SPARES: usize = 2;

/// Feeds the merged stream of `m` to `sorter`, in batches of about
/// `alnsort_bam::reader::BATCH_BYTES` record bytes. A batch the sorter has
/// copied comes back for the next one (`Sorter::push_batch_then`), as with
/// one input (`input::OpenInput::feed`): a fresh batch costs a page fault
/// per 4 KiB written.
///
/// `bases`: with `--markdup` (`crate::markdup::inputs`), each record enters
/// the sorter followed by its ordinal (`crate::markdup::ordinal::ordinal_suffix`):
/// `bases[i]` plus its position in input `i`.
pub fn feed_sorter(
    m: MergedStream,
    kind: KeyKind,
    sorter: &mut Sorter,
    progress: &Progress,
    bases: Option<&[u64]>,
) -> Result<Fed> {
    let start = thread_cpu_seconds();
    let target = alnsort_bam::reader::BATCH_BYTES;
    let (capacity, records) = (target + (target >> 2), target / 64);
    let (spare_tx, spare_rx) = crossbeam_channel::bounded::<Batch>(FEED_SPARES);
    let next_batch = move || match spare_rx.try_recv() {
        Ok(mut b) => {
            b.reuse_for_input(capacity, records);
            b
        }
        Err(_) => Batch::for_input(kind, capacity, records),
    };
    let mut batch = next_batch();
    let mut bytes = 0u64;
    let mut flush = |batch: &mut Batch, bytes: &mut u64| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let len = batch.len() as u64;
        let full = std::mem::replace(batch, next_batch());
        let spare = spare_tx.clone();
        sorter
            .push_batch_then(full, move |b| {
                let _ = spare.try_send(b);
            })
            .map_err(Error::from)
            .context("sorting the merged inputs")?;
        progress.add_records(len, *bytes, 0);
        *bytes = 0;
        Ok(())
    };
    let tally = Rc::clone(&m.tally);
    let records = m.for_each_from(|input, at, key, rec| {
        if kind == KeyKind::Fixed8 && key.len() != 8 {
            return Err(Error::Internal(format!(
                "the key is {} bytes, but this sort needs 8-byte keys",
                key.len()
            )));
        }
        let taken = match bases {
            Some(b) => batch.try_push_parts(
                key,
                rec,
                &crate::markdup::ordinal::ordinal_suffix(b[input] + at),
            ),
            None => batch.try_push(key, rec),
        };
        if !taken {
            return Err(Error::Refused(
                "a record too large for a batch (4 GiB)".to_string(),
            ));
        }
        bytes += rec.len() as u64;
        if batch.record_bytes() >= target {
            flush(&mut batch, &mut bytes)?;
        }
        Ok(())
    })?;
    flush(&mut batch, &mut bytes)?;
    Ok(Fed {
        records,
        read_scan_s: 0.0,
        read_push_s: thread_cpu_seconds() - start,
        tally: tally.get(),
    })
}

/// A `-R` region in the merged header's terms: reference, 0-based start,
/// end (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub tid: i32,
    pub beg: i64,
    pub end: i64,
}

impl Region {
    /// htslib's iterator test: same reference, `pos < end` and
    /// `bam_endpos > beg` (the end of an unmapped or zero-length record is
    /// `pos + 1`).
    fn overlaps(&self, rec: RecordRef<'_>) -> bool {
        if rec.ref_id() != self.tid {
            return false;
        }
        let pos = record_pos(rec);
        let rlen = if rec.flag() & 4 != 0 {
            0
        } else {
            rec.reference_length()
        };
        pos < self.end && pos + rlen.max(1) > self.beg
    }
}

impl Region {
    /// Whether `rec`, read in coordinate order from the region's first
    /// chunk on, is past the region: on another reference (a later one) or
    /// starting at or after its end, as htslib's iterator stops.
    fn is_past(&self, rec: RecordRef<'_>) -> bool {
        rec.ref_id() != self.tid || record_pos(rec) >= self.end
    }
}

/// A record's 0-based position (64-bit when the SAM input had one).
fn record_pos(rec: RecordRef<'_>) -> i64 {
    alnsort_bam::sam_parse::wide_positions(rec.bytes()).map_or(rec.pos() as i64, |w| w[0])
}

/// `sam_parse_region` for `-R`: a whole reference name, or `NAME:BEG`,
/// `NAME:BEG-END`, `NAME:-END` (1-based, inclusive; commas allowed).
pub fn parse_region(header: &Header, text: &str) -> Option<Region> {
    let lookup = header.ref_lookup();
    if let Some(tid) = lookup.get(text.as_bytes()) {
        return Some(Region {
            tid,
            beg: 0,
            end: i64::MAX,
        });
    }
    let (name, range) = text.rsplit_once(':')?;
    let tid = lookup.get(name.as_bytes())?;
    let num = |s: &str| -> Option<i64> {
        let digits: String = s.chars().filter(|&c| c != ',').collect();
        digits.trim().parse::<i64>().ok()
    };
    let (beg, end) = match range.split_once('-') {
        None => (num(range)?, i64::MAX),
        Some((b, e)) => (
            if b.is_empty() { 1 } else { num(b)? },
            if e.is_empty() { i64::MAX } else { num(e)? },
        ),
    };
    let beg = (beg - 1).max(0);
    if end < beg {
        return None;
    }
    Some(Region { tid, beg, end })
}

/// What samtools merge (and `alnsort sort IN1 IN2 ...`) prints for a
/// record's `tag` whose ID is not in its input's header (the tag is lost).
pub(crate) fn unknown_tag_warning(tag: &[u8], id: &[u8], read: &[u8]) -> String {
    format!(
        "[bam_translate] {} tag \"{}\" on read \"{}\" encountered with no corresponding entry in header, \
         tag lost. Unknown tags are only reported once per input file for each tag ID.",
        String::from_utf8_lossy(tag),
        String::from_utf8_lossy(id),
        String::from_utf8_lossy(read)
    )
}

/// Records of one decoded batch, keys beside them.
#[derive(Default)]
struct KeyedRecords {
    data: Vec<u8>,
    keys: Vec<u8>,
    /// (key start, key end, record start, record end)
    entries: Vec<(u32, u32, u32, u32)>,
    /// Tags dropped for unknown IDs: (tag, ID, read name), in order.
    unknown_tags: Vec<(Vec<u8>, Vec<u8>, String)>,
    /// Keys in the input's own terms (before translation) of the first and
    /// last record, for the order check across chunks.
    first_own: Vec<u8>,
    last_own: Vec<u8>,
    /// The first record (index in the chunk, read name) whose own key is
    /// below its predecessor's.
    unsorted: Option<(usize, String)>,
    /// Keys of the sort order, when it is not the merge's: (start, end).
    sort_keys: Vec<u8>,
    sort_entries: Vec<(u32, u32)>,
    /// Records decoded (with `-R`, more than kept), and the read name of
    /// the first one.
    records: usize,
    first_name: String,
    /// What decoding the batch found besides its records.
    tally: Decoded,
    /// A record past the `-R` region's end was met: nothing after this
    /// chunk can overlap the region.
    past_region: bool,
}

impl KeyedRecords {
    /// Empties the chunk for the next batch, keeping its buffers.
    fn clear(&mut self) {
        let KeyedRecords {
            data,
            keys,
            entries,
            unknown_tags,
            first_own,
            last_own,
            unsorted,
            sort_keys,
            sort_entries,
            records,
            first_name,
            tally,
            past_region,
        } = self;
        data.clear();
        keys.clear();
        entries.clear();
        unknown_tags.clear();
        first_own.clear();
        last_own.clear();
        *unsorted = None;
        sort_keys.clear();
        sort_entries.clear();
        *records = 0;
        first_name.clear();
        *tally = Decoded::default();
        *past_region = false;
    }
}

/// Chunks kept per input for reuse by its decode jobs: a fresh chunk's
/// buffers are mapped anew by malloc and cost a page fault per 4 KiB
/// written.
const CHUNK_SPARES: usize = 2;

type KeyedRecordsResult = std::result::Result<KeyedRecords, ReadError>;

struct MergeInput {
    name: Arc<str>,
    /// The input's position among the merge's inputs.
    input: usize,
    /// None: nothing of the input to read (`-R` outside it).
    batches: Option<Ordered<Result<KeyedRecords>>>,
    chunk: KeyedRecords,
    at: usize,
    /// Records of this input before the current chunk.
    before: u64,
    done: bool,
    check: bool,
    last_own: Vec<u8>,
    failure: Rc<RefCell<Option<Error>>>,
    warned: HashSet<(Vec<u8>, Vec<u8>)>,
    /// Adds up what decoding found besides records.
    tally: Rc<Cell<Decoded>>,
    /// The current chunk is the last one to take (see `KeyedRecords::past_region`).
    last_chunk: bool,
    /// Chunks taken go back to the decode jobs.
    spares: crossbeam_channel::Sender<KeyedRecords>,
}

/// What every input of one merge shares.
struct MergeShared {
    /// Records are translated into the merged header's terms (see
    /// [`merged_inputs_untranslated`]).
    translate: bool,
    /// Keys of the merge order in the merged header's terms.
    encoder: Arc<KeyEncoder>,
    /// Keys handed on instead (see [`MergePlan::sort_order`]).
    sort_encoder: Option<Arc<KeyEncoder>>,
    /// The merged header's reference count and libraries.
    n_ref: usize,
    libraries: Vec<(Vec<u8>, Vec<u8>)>,
    unknown_reference: UnknownReference,
    check: bool,
    region: Option<Region>,
    /// The region's reference name (each input's index is asked by it).
    region_name: Option<Vec<u8>>,
    /// Stop reading an input seeked to the region at its first record past
    /// the region's end.
    stop_past_region: bool,
}

/// The per-batch work of one input, run on the pool.
struct ChunkDecoder {
    decoder: alnsort_bam::reader::Decoder,
    /// None: records handed on as read.
    translation: Option<Translation>,
    encoder: Arc<KeyEncoder>,
    sort_encoder: Option<Arc<KeyEncoder>>,
    /// The decoder's keys (the input's own terms) are the merged keys.
    same_keys: bool,
    check: bool,
    region: Option<Region>,
    /// The input was entered at the region's first chunk: a record past the
    /// region's end ends it (`KeyedRecords::past_region`).
    stop_past_region: bool,
    /// Chunks the merge is done with.
    spares: crossbeam_channel::Receiver<KeyedRecords>,
}

impl MergeInput {
    #[allow(clippy::too_many_arguments)]
    fn start(
        input: usize,
        inp: input::OpenInput,
        path: &str,
        index: Option<&IndexReader>,
        translation: Translation,
        shared: &MergeShared,
        pool: &Arc<rayon::ThreadPool>,
        failure: Rc<RefCell<Option<Error>>>,
        tally: Rc<Cell<Decoded>>,
    ) -> Result<MergeInput> {
        let encoder = &shared.encoder;
        let check = shared.check;
        let (file, header, mut records) = inp.into_records(ScanOptions::default());
        // -R on BAM: read only the stretch of the file the index names for
        // the region (None: nothing of it in this input).
        let mut span = None;
        if let (Some(r), Some(name), Some(index), Records::Scan(Scanner::Bam(_))) =
            (shared.region, &shared.region_name, index, &records)
        {
            let own_tid = header.refs().iter().position(|x| x.name == *name);
            span = Some(own_tid.and_then(|t| index.region_span(t, r.beg, r.end)));
        }
        if let Some(Some((start, end))) = span {
            let f = File::open(path).with_context(|| format!("cannot open input {path}"))?;
            let opts = ScanOptions {
                end: RangeEnd::VirtualOffset(end),
                ..ScanOptions::default()
            };
            records = Records::Scan(Scanner::Bam(Box::new(
                BamScanner::open_at(Arc::clone(&file), f, Arc::clone(pool), start, opts)
                    .with_context(|| format!("-R: {path}: starting at the region's first chunk"))?,
            )));
        }
        let nothing_to_read = span == Some(None);
        let header = Arc::new(header);
        // Keys in the input's own terms (the order check), and whether
        // they are the merged header's keys too.
        let own = KeyEncoder::new(
            encoder.order().clone(),
            header.n_ref(),
            &header.library_map(),
        )
        .with_wide_positions(encoder.wide_positions());
        let same_keys = (translation.is_identity() || !shared.translate)
            && header.n_ref() == shared.n_ref
            && (*encoder.order() != SortOrder::TemplateCoordinate
                || header.library_map() == shared.libraries);
        let decoder = alnsort_bam::reader::Decoder {
            file: Arc::clone(&file),
            lookup: Arc::new(header.ref_lookup()),
            header,
            encoder: Arc::new(own),
            record_limit: usize::MAX,
            unknown_reference: shared.unknown_reference,
        };
        let (spare_tx, spare_rx) = crossbeam_channel::bounded(CHUNK_SPARES);
        let job = ChunkDecoder {
            decoder,
            translation: shared.translate.then_some(translation),
            encoder: Arc::clone(encoder),
            sort_encoder: shared.sort_encoder.clone(),
            same_keys,
            check,
            region: shared.region,
            stop_past_region: shared.stop_past_region && span.is_some(),
            spares: spare_rx,
        };
        let depth = pool.current_num_threads() + 2;
        let batches = if nothing_to_read {
            None
        } else {
            let (batches, _) =
                input::spawn_batches(&file, records, pool, "merge-read", depth, move |raw| {
                    Ok(job.decode(raw)?)
                })?;
            Some(batches)
        };
        let mut s = MergeInput {
            name: file,
            input,
            batches,
            chunk: KeyedRecords::default(),
            at: 0,
            before: 0,
            done: false,
            check,
            last_own: Vec::new(),
            failure,
            warned: HashSet::new(),
            tally,
            last_chunk: false,
            spares: spare_tx,
        };
        s.next_chunk();
        Ok(s)
    }

    fn fail(&mut self, e: Error) {
        self.done = true;
        let mut f = self.failure.borrow_mut();
        if f.is_none() {
            *f = Some(e);
        }
    }

    /// Moves to the next non-empty chunk, or marks the source done.
    fn next_chunk(&mut self) {
        loop {
            self.before += self.chunk.records as u64;
            if self.last_chunk {
                self.done = true;
                return;
            }
            match self.batches.as_mut().and_then(|b| b.next_result()) {
                None => {
                    self.done = true;
                    return;
                }
                Some(r) => {
                    let r = r.map_err(Error::from).and_then(|c| c);
                    match r {
                        Ok(c) => {
                            for (tag, id, read) in &c.unknown_tags {
                                if self.warned.insert((tag.clone(), id.clone())) {
                                    eprintln!("{}", unknown_tag_warning(tag, id, read.as_bytes()));
                                }
                            }
                            let mut tally = self.tally.get();
                            tally.add(c.tally);
                            self.tally.set(tally);
                            if self.check && c.records > 0 {
                                let bad = if c.first_own < self.last_own {
                                    Some((0, c.first_name.clone()))
                                } else {
                                    c.unsorted.clone()
                                };
                                if let Some((i, name)) = bad {
                                    let number = self.before + i as u64 + 1;
                                    let e = Error::Refused(format!("{}: record {number} (read {name:?}) is out of order: the input is not sorted in the \
                                         order merged; sort it first (alnsort sort), or merge and sort with 'alnsort sort IN1 IN2 ...'",
                                        self.name));
                                    self.fail(e);
                                    return;
                                }
                                self.last_own = c.last_own.clone();
                            }
                            self.last_chunk = c.past_region;
                            let old = std::mem::replace(&mut self.chunk, c);
                            let _ = self.spares.try_send(old);
                            self.at = 0;
                            if !self.chunk.entries.is_empty() {
                                return;
                            }
                        }
                        Err(e) => {
                            let e = Error::Record {
                                file: self.name.to_string(),
                                doing: "reading",
                                record: self.before + 1,
                                source: Box::new(e),
                            };
                            self.fail(e);
                            return;
                        }
                    }
                }
            }
        }
    }

    fn entry(&self) -> (u32, u32, u32, u32) {
        self.chunk.entries[self.at]
    }

    /// The current record's key of the sort order (see `merged_inputs`).
    fn sort_key(&self) -> &[u8] {
        let (s, e) = self.chunk.sort_entries[self.at];
        &self.chunk.sort_keys[s as usize..e as usize]
    }
}

impl MergeSource for MergeInput {
    fn key(&self) -> Option<&[u8]> {
        if self.done {
            return None;
        }
        let (ks, ke, _, _) = self.entry();
        Some(&self.chunk.keys[ks as usize..ke as usize])
    }

    fn record(&self) -> &[u8] {
        let (_, _, rs, re) = self.entry();
        &self.chunk.data[rs as usize..re as usize]
    }

    fn advance(&mut self) -> alnsort_sort::Result<()> {
        if self.done {
            return Ok(());
        }
        self.at += 1;
        if self.at >= self.chunk.entries.len() {
            self.next_chunk();
        }
        Ok(())
    }
}

impl ChunkDecoder {
    /// The pool job of one raw batch: decode, translate, key.
    fn decode(&self, raw: &RawBatch) -> KeyedRecordsResult {
        let ChunkDecoder {
            decoder,
            translation,
            encoder,
            sort_encoder,
            same_keys,
            check,
            region,
            stop_past_region,
            spares,
        } = self;
        let (same_keys, check, region) = (*same_keys, *check, *region);
        let mut c = spares.try_recv().unwrap_or_default();
        c.clear();
        c.data.reserve(raw.bytes() + raw.bytes() / 8);
        c.keys.reserve(raw.voffsets.len().max(64) * 8);
        c.entries.reserve(raw.voffsets.len());
        let mut scratch = Vec::new();
        let mut merged_key = Vec::new();
        let mut index = 0usize;
        let decoded = decoder.decode(
            raw,
            |own_key, rec| {
                if check {
                    if index == 0 {
                        c.first_own.extend_from_slice(own_key);
                        let name = RecordRef::with_block_size(rec).read_name();
                        c.first_name = String::from_utf8_lossy(name).into_owned();
                    } else if c.unsorted.is_none() && own_key < &c.last_own[..] {
                        let name = RecordRef::with_block_size(rec).read_name();
                        c.unsorted = Some((index, String::from_utf8_lossy(name).into_owned()));
                    }
                    c.last_own.clear();
                    c.last_own.extend_from_slice(own_key);
                }
                index += 1;
                c.records = index;
                let mut unknown = |tag: [u8; 2], id: &[u8], read: &[u8]| {
                    c.unknown_tags.push((
                        tag.to_vec(),
                        id.to_vec(),
                        String::from_utf8_lossy(read).into_owned(),
                    ))
                };
                let translated = translation
                    .as_ref()
                    .is_some_and(|t| t.apply(rec, &mut scratch, &mut unknown));
                let rec = if translated { &scratch[..] } else { rec };
                if let Some(r) = region {
                    let view = RecordRef::with_block_size(rec);
                    if c.past_region || (*stop_past_region && r.is_past(view)) {
                        c.past_region = true;
                        return Ok(());
                    }
                    if !r.overlaps(view) {
                        return Ok(());
                    }
                }
                let key = if same_keys && !translated {
                    own_key
                } else {
                    encoder.encode(RecordRef::with_block_size(rec), &mut merged_key)?;
                    &merged_key[..]
                };
                if c.data.len() + rec.len() > u32::MAX as usize
                    || c.keys.len() + key.len() > u32::MAX as usize
                {
                    return Err("more record bytes than one batch can address (4 GiB)".into());
                }
                let ks = c.keys.len() as u32;
                c.keys.extend_from_slice(key);
                let rs = c.data.len() as u32;
                c.data.extend_from_slice(rec);
                c.entries
                    .push((ks, c.keys.len() as u32, rs, c.data.len() as u32));
                if let Some(se) = sort_encoder.as_deref() {
                    se.encode(RecordRef::with_block_size(rec), &mut merged_key)?;
                    let start = c.sort_keys.len() as u32;
                    c.sort_keys.extend_from_slice(&merged_key);
                    c.sort_entries.push((start, c.sort_keys.len() as u32));
                }
                Ok(())
            },
            |w| eprintln!("[W::alnsort] {}: {w}", decoder.file),
        )?;
        c.tally = decoded;
        Ok(c)
    }
}
/// How `alnsort sort IN1 IN2 ...` merges the inputs' headers: as `samtools
/// merge` does by default (clashing IDs renamed with the suffixes of seed 0).
pub(crate) fn several_inputs_merge_options() -> alnsort_bam::header_merge::MergeOptions {
    alnsort_bam::header_merge::MergeOptions {
        seed: 0,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_region;
    use alnsort_bam::header::Header;

    fn header() -> Header {
        alnsort_bam::header::parse_sam_header(
            ["@SQ\tSN:chr1\tLN:1000", "@SQ\tSN:chr1:5\tLN:10"].map(str::as_bytes),
        )
        .unwrap()
    }

    #[test]
    fn regions_parse_as_htslib() {
        let h = header();
        let r = |t: &str| parse_region(&h, t).map(|r| (r.tid, r.beg, r.end));
        assert_eq!(r("chr1"), Some((0, 0, i64::MAX)));
        assert_eq!(r("chr1:6"), Some((0, 5, i64::MAX)));
        assert_eq!(r("chr1:1,000-2,000"), Some((0, 999, 2000)));
        assert_eq!(r("chr1:-20"), Some((0, 0, 20)));
        assert_eq!(r("chr1:30-20"), None);
        assert_eq!(r("chr9:1-2"), None);
    }
}
