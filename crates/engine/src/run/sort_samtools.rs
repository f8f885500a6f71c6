//! `alnsort sort --markdup=samtools`'s run: name-grouped input fixed template by template as `samtools fixmate -m` fixes it, sorted by coordinate with ties in `samtools collate`'s order, then marked on the way out by samtools markdup's streaming marker (`alnsort_markdup::samtools`).
//!
//! The answer is `samtools collate | samtools fixmate -m | samtools sort |
//! samtools markdup` 1.24's. What makes it one pass:
//! - collate's output is its 64 temporary files in turn, each sorted by
//!   (name hash, name, 0x40/0x80 bits) ([`collate_tie`]); samtools sort
//!   keeps its input's order for equal coordinates, so the sort key here
//!   is the coordinate key followed by that collate position, and the
//!   order of the output is the chain's without collating first.
//! - fixmate sees a template in collate's order: its records ordered by
//!   their 0x40/0x80 bits, the input's order kept among equal bits.
//!   (collate's sort is an unstable introsort: among records of one read
//!   with the same bits, e.g. a primary and its supplementary, samtools'
//!   order is introsort's, here the input's. It only shows where two such
//!   records also have the same coordinate key.)
//! - markdup reads the sorted stream; the marker is fed as the records
//!   leave the sort.
//! - input whose `@HD` says `SO:coordinate` is grouped by name first by a
//!   sort of its own keyed by the collate position alone: collate's output.

use crate::config::Config;
use crate::error::{Context, Error, Result};
use crate::io::cleanup::{Debris, TempDir};
use crate::io::input::{next_batch, spawn_batches};
use crate::options::samtools_marking::SortMarking;
use crate::report::progress::{Phase, Progress};
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_bam::reader::ScanOptions;
use alnsort_bam::RecordRef;
use alnsort_markdup::fixmate::{self as fm, Fixmate, TemplateCutter};
use alnsort_markdup::samtools::SamtoolsMarker;
use alnsort_pipeline::OrderedQueue;
use alnsort_sort::batch::Batch;
use alnsort_sort::{ChunkFill, KeyKind, SortConfig, Sorter};
use std::sync::Arc;

mod name_check;
use name_check::NameCheck;

/// The share of the budget the read-name check keeps in memory
/// (`name_check`): 1/16, 10-18 bytes a template's fingerprint in a hash
/// table (40 counted), so about 1.6 M templates per GiB of budget before
/// it spills; the benchmark BAM's 324,000 templates stay in memory at
/// `-m 256M` and above.
const NAME_CHECK_SHARE: usize = 16;

/// samtools collate's number of temporary files (`-n`, default 64: the
/// `n_files = 64` of bamshuf.c's `main_bamshuf`).
pub const COLLATE_FILES: u32 = 64;

/// samtools collate's `hash_X31_Wang` of a read name (bamshuf.c): X31
/// over the name's bytes as C `char`s (signed on the platforms samtools
/// ships for), then Thomas Wang's integer mix; an empty name hashes to 0.
pub fn collate_hash(name: &[u8]) -> u32 {
    let c = |b: u8| b as i8 as i32 as u32;
    let Some((&first, rest)) = name.split_first() else {
        return 0;
    };
    let mut h = c(first);
    if h == 0 {
        return 0;
    }
    for &b in rest {
        h = (h << 5).wrapping_sub(h).wrapping_add(c(b));
    }
    let mut key = h;
    key = key.wrapping_add(!(key << 15));
    key ^= key >> 10;
    key = key.wrapping_add(key << 3);
    key ^= key >> 6;
    key = key.wrapping_add(!(key << 11));
    key ^= key >> 16;
    key
}

/// Appends a record's place in samtools collate's output to `key`: its
/// temporary file (`hash % 64`), then the order within that file
/// (`elem_lt`: hash, name as `strcmp`, the 0x40/0x80 bits).
pub fn collate_tie(rec: RecordRef<'_>, key: &mut Vec<u8>) {
    let name = rec.read_name();
    let h = collate_hash(name);
    key.push((h % COLLATE_FILES) as u8);
    key.extend_from_slice(&h.to_be_bytes());
    // The NUL ends the name as strcmp reads it: a prefix sorts first.
    key.extend_from_slice(name);
    key.push(0);
    key.push(((rec.flag() >> 6) & 3) as u8);
}

/// A template put in collate's order (stable by the 0x40/0x80 bits), fixed
/// as fixmate fixes it.
fn fix_in_collate_order(fixer: &Fixmate, t: &mut Vec<Vec<u8>>) {
    t.sort_by_key(|r| (RecordRef::with_block_size(r).flag() >> 6) & 3);
    fixer.fix_template(t);
}

/// The fixed records of a batch's inner templates with their sort keys,
/// in a batch for the sorter (filled on the pool, added whole), and the
/// templates' names for the grouping check.
struct Keyed {
    batch: Batch,
    /// The templates' names, each ended by a NUL.
    names: Vec<u8>,
    fingerprints: Vec<u64>,
}

impl Keyed {
    /// A batch for `records` records of about `bytes` bytes: `spare`, a
    /// batch the sorter has copied, emptied for reuse, or a new one.
    fn new(fill: ChunkFill, bytes: usize, records: usize, spare: Option<Batch>) -> Keyed {
        let batch = match spare {
            Some(mut b) => {
                b.reuse_for_input(bytes, records);
                b
            }
            None => Batch::for_input_filling(KeyKind::Variable, fill, bytes, records),
        };
        Keyed {
            batch,
            names: Vec::new(),
            fingerprints: Vec::new(),
        }
    }

    fn push(&mut self, encoder: &KeyEncoder, rec: &[u8], scratch: &mut Vec<u8>) -> Result<()> {
        let view = RecordRef::with_block_size(rec);
        encoder
            .encode(view, scratch)
            .map_err(|e| Error::Internal(format!("keying a fixed record by coordinate: {e}")))?;
        collate_tie(view, scratch);
        if !self.batch.try_push(scratch, rec) {
            return Err(Error::Internal(
                "a batch of fixed records outgrew what its offsets address".into(),
            ));
        }
        Ok(())
    }

    fn note_template(&mut self, name: &[u8]) {
        self.fingerprints.push(fingerprint(name));
        self.names.extend_from_slice(name);
        self.names.push(0);
    }

    /// The name of the `i`th template.
    fn name(&self, i: usize) -> &[u8] {
        self.names.split(|&b| b == 0).nth(i).unwrap_or(b"?")
    }
}

/// One input batch after its pool job: the records of its first and last
/// templates as read (they may go on across batches), the templates
/// between them fixed and keyed, and the names of those templates.
struct Piece {
    head: Vec<Vec<u8>>,
    fixed: Keyed,
    tail: Option<Vec<Vec<u8>>>,
    records: u64,
    warnings: Vec<String>,
}

/// A name's 64-bit fingerprint, for the check that no name comes back in
/// a later template (input not grouped by name).
fn fingerprint(name: &[u8]) -> u64 {
    alnsort_markdup::hash::hash_bytes(name, 0)
}

fn read_name(rec: &[u8]) -> &[u8] {
    RecordRef::with_block_size(rec).read_name()
}

/// Reads the input into `sorter`: each template fixed as `samtools fixmate
/// -m` fixes it and keyed by coordinate with collate's tie (through
/// `grouping` first, a sort in collate's order, for coordinate-sorted
/// input), each template's name checked by `seen` (refused when it comes
/// back after other names). Returns the records read.
fn read_fixed(
    cfg: &Config,
    input: crate::io::input::OpenInput,
    pool: &Arc<rayon::ThreadPool>,
    fixer: &Arc<Fixmate>,
    encoder: &Arc<KeyEncoder>,
    (mut grouping, sorter): (Option<Sorter>, &mut Sorter),
    mut seen: NameCheck,
) -> Result<u64> {
    let name = input.name.clone();
    let group_first = grouping.is_some();
    let dec = crate::run::mark_in_order::decoder_for(&name, &input.header, cfg);
    let (_, _, records) = input.into_records(ScanOptions::default());
    let depth = pool.current_num_threads() * 2 + 2;
    let (job_fixer, job_encoder) = (Arc::clone(fixer), Arc::clone(encoder));
    let fill = sorter.chunk_fill();
    // Buffers go back to the jobs for the next batches, as `alnsort sort`'s
    // input batches do (`io::input`): a fresh one of a batch's size is
    // mapped anew and costs a page fault per 4 KiB written (12% of the
    // read phase's samples here before). The sort batches the sorter has
    // copied, and each job's staging of the decoded records.
    let (spare_tx, spare_rx) = crossbeam_channel::bounded::<Batch>(depth);
    let (staging_tx, staging_rx) = crossbeam_channel::bounded::<(Vec<u8>, Vec<usize>)>(depth);
    let (mut batches, _) = spawn_batches(&name, records, pool, "read", depth, move |raw| {
        let mut warnings = Vec::new();
        if group_first {
            // Grouped on the reading thread first: nothing to cut yet.
            let mut head = Vec::new();
            dec.decode(
                raw,
                |_key, rec| {
                    head.push(rec.to_vec());
                    Ok(())
                },
                |w| warnings.push(w),
            )?;
            return Ok(Piece {
                records: head.len() as u64,
                head,
                fixed: Keyed::new(fill, 0, 0, None),
                tail: None,
                warnings,
            });
        }
        // The batch's records back to back, and where each ends.
        let (mut bytes, mut ends) = staging_rx.try_recv().unwrap_or_default();
        bytes.clear();
        ends.clear();
        dec.decode(
            raw,
            |_key, rec| {
                bytes.extend_from_slice(rec);
                ends.push(bytes.len());
                Ok(())
            },
            |w| warnings.push(w),
        )?;
        let all: Vec<&[u8]> = ends
            .iter()
            .scan(0, |start, &end| {
                let rec = &bytes[*start..end];
                *start = end;
                Some(rec)
            })
            .collect();
        let spare = spare_rx.try_recv().ok();
        let piece = cut_fix_key(&all, &job_fixer, &job_encoder, (fill, spare), warnings);
        drop(all);
        let _ = staging_tx.try_send((bytes, ends));
        piece
    })?;
    // `seen`: the names of the templates finished, to refuse input whose
    // templates are scattered (fixmate and this sort would see two
    // templates where collate gathers one).
    let mut open = TemplateCutter::new();
    let mut records_in = 0u64;
    let mut scratch = Vec::new();
    let finish_open = |open: &mut TemplateCutter,
                       sorter: &mut Sorter,
                       seen: &mut NameCheck,
                       scratch: &mut Vec<u8>|
     -> Result<()> {
        open.take(|t| {
            seen.note(fingerprint(read_name(&t[0])), || read_name(&t[0]))?;
            fix_in_collate_order(fixer, t);
            for r in t.iter() {
                let view = RecordRef::with_block_size(r);
                encoder.encode(view, scratch).map_err(|e| {
                    Error::Internal(format!("keying a fixed record by coordinate: {e}"))
                })?;
                collate_tie(view, scratch);
                sorter.push(scratch, r)?;
            }
            Ok(())
        })
    };
    while let Some(p) = next_batch(&mut batches, &name, records_in + 1, |p: &Piece| &p.warnings) {
        let p = p?;
        if let Some(g) = grouping.as_mut() {
            for rec in &p.head {
                scratch.clear();
                collate_tie(RecordRef::with_block_size(rec), &mut scratch);
                g.push(&scratch, rec)?;
            }
            records_in += p.records;
            continue;
        }
        for rec in &p.head {
            if open.starts_new(rec) {
                finish_open(&mut open, sorter, &mut seen, &mut scratch)?;
            }
            open.push(rec);
        }
        if let Some(tail) = p.tail {
            finish_open(&mut open, sorter, &mut seen, &mut scratch)?;
            for (i, n) in p.fixed.fingerprints.iter().enumerate() {
                seen.note(*n, || p.fixed.name(i))?;
            }
            // Once copied, the batch goes back to the jobs (dropped when
            // enough spares wait).
            let spare = spare_tx.clone();
            sorter.push_batch_then(p.fixed.batch, move |b| {
                let _ = spare.try_send(b);
            })?;
            for rec in &tail {
                open.push(rec);
            }
        }
        records_in += p.records;
    }
    if let Some(g) = grouping {
        let mut grouped = g.finish()?;
        while let Some((_, rec)) = grouped.next_entry()? {
            if open.starts_new(rec) {
                finish_open(&mut open, sorter, &mut seen, &mut scratch)?;
            }
            open.push(rec);
        }
    }
    finish_open(&mut open, sorter, &mut seen, &mut scratch)?;
    seen.finish()?;
    Ok(records_in)
}

/// Records ahead of the one being gathered whose bytes are asked for
/// (`Chunk::prefetch`), as the BAM writer's block packer does.
const PREFETCH_AHEAD: usize = 8;

/// Bytes of merged records one gathering job copies (at least one
/// record): large enough that a job's hand-off is noise, small enough that
/// the pieces in flight (two per pool thread, at most
/// [`GATHER_MAX_PIECES`]) stay a few MiB.
const GATHER_PIECE_BYTES: usize = 512 << 10;

/// Gathered pieces in flight at most, whatever the thread count: one
/// marking thread reads them, so more would only hold memory beside the
/// budget (16 pieces of 512 KiB: 8 MiB).
const GATHER_MAX_PIECES: usize = 16;

/// Records `range` of `chunk` (`total` bytes), back to back, and where
/// each ends.
fn gather(
    chunk: &alnsort_sort::Chunk,
    range: std::ops::Range<usize>,
    total: usize,
) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::with_capacity(total);
    let mut ends = Vec::with_capacity(range.len());
    for i in range.clone().take(PREFETCH_AHEAD) {
        chunk.prefetch(i);
    }
    for i in range.clone() {
        if i + PREFETCH_AHEAD < range.end {
            chunk.prefetch(i + PREFETCH_AHEAD);
        }
        bytes.extend_from_slice(chunk.record(i));
        ends.push(bytes.len());
    }
    (bytes, ends)
}

/// Marks the sorted records with samtools markdup's streaming marker on
/// their way to the output (through a first-pass file with `-S`) and
/// writes the statistics asked for. `read`: the progress and the records
/// read, which the records written must match.
#[allow(clippy::too_many_arguments)]
fn mark_and_write(
    cfg: &Config,
    sm: &SortMarking,
    name: &str,
    header: Arc<alnsort_bam::header::Header>,
    mut merged: alnsort_sort::Merged,
    dest: crate::io::output::Destinations,
    pool: &Arc<rayon::ThreadPool>,
    debris: &Debris,
    read: (&Progress, u64),
) -> Result<(
    crate::io::output::OutputSummary,
    alnsort_sort::SortStats,
    alnsort_markdup::samtools::Stats,
)> {
    let (progress, records_in) = read;
    let rgs = read_group_ids(&header);
    let rg_refs: Vec<&[u8]> = rgs.iter().map(Vec::as_slice).collect();
    let mut marker = SamtoolsMarker::new(sm.marking.clone(), &rg_refs);
    let mut out = crate::io::output::Output::create(
        cfg,
        dest,
        Arc::clone(&header),
        Arc::clone(pool),
        debris,
    )?;
    let mut first_pass = match marker.needs_second_pass() {
        true => Some(crate::run::samtools_markdup::FirstPass::create(
            cfg, debris,
        )?),
        false => None,
    };
    let ref_name = |tid: i32| match usize::try_from(tid).ok().and_then(|t| header.refs().get(t)) {
        Some(r) => String::from_utf8_lossy(&r.name).into_owned(),
        None => "*".to_string(),
    };
    let failed = |e: alnsort_markdup::samtools::Error| match e {
        alnsort_markdup::samtools::Error::NotSorted { tid, pos, .. } => Error::Internal(format!(
            "the sorted records reached samtools markdup's marker out of order at {}:{pos}",
            ref_name(tid)
        )),
        e => Error::Context {
            what: format!("{name}: samtools markdup (--markdup=samtools)"),
            source: Box::new(Error::from(e)),
        },
    };
    let mut written = 0u64;
    let mut feed = |rec: &[u8], marker: &mut SamtoolsMarker| -> Result<()> {
        written += 1;
        marker.push(rec.to_vec()).map_err(failed)?;
        crate::run::samtools_markdup::drain(
            "alnsort sort --markdup=samtools",
            marker,
            &mut out,
            &mut first_pass,
        )?;
        if written.is_multiple_of(4096) {
            progress.set_output_position(written);
        }
        Ok(())
    };
    if merged.has_chunks() {
        // The merged records lie where the sort left them, scattered over
        // its sub-batches: a copy from there waits for memory at every
        // record. Pool jobs gather them, in order, a piece at a time, into
        // buffers this thread then reads straight through.
        let mut copies: OrderedQueue<(Vec<u8>, Vec<usize>)> =
            OrderedQueue::new(Arc::clone(pool), "gathering merged records for markdup");
        let depth = (2 * pool.current_num_threads() + 2).min(GATHER_MAX_PIECES);
        let mut next: Option<(Arc<alnsort_sort::Chunk>, usize)> = None;
        let mut ended = false;
        loop {
            while copies.len() < depth {
                let (chunk, from) = match next.take() {
                    Some(n) => n,
                    None if ended => break,
                    None => match merged.next_chunk()? {
                        Some(c) => (Arc::new(c), 0),
                        None => {
                            ended = true;
                            break;
                        }
                    },
                };
                if from >= chunk.len() {
                    continue;
                }
                let (fit, bytes) = match chunk.fitting(from, GATHER_PIECE_BYTES, 0) {
                    // A record larger than a piece is a piece of its own.
                    (0, _) => (1, chunk.record_len(from)),
                    fitting => fitting,
                };
                let to = from + fit;
                let job = Arc::clone(&chunk);
                copies.push(move || gather(&job, from..to, bytes));
                if to < chunk.len() {
                    next = Some((chunk, to));
                }
            }
            let Some(piece) = copies.pop() else { break };
            let (bytes, ends) = piece?;
            let mut start = 0;
            for &end in &ends {
                feed(&bytes[start..end], &mut marker)?;
                start = end;
            }
        }
    } else {
        while let Some((_, rec)) = merged.next_entry()? {
            feed(rec, &mut marker)?;
        }
    }
    marker.finish().map_err(failed)?;
    crate::run::samtools_markdup::drain(
        "alnsort sort --markdup=samtools",
        &mut marker,
        &mut out,
        &mut first_pass,
    )?;
    if let Some(f) = first_pass {
        f.replay(|rec| match marker.second_pass(rec) {
            Some(r) => out.write_record(&r),
            None => Ok(()),
        })?;
    }
    if written != records_in {
        return Err(Error::Internal(format!(
            "read {records_in} records but the sort produced {written}"
        )));
    }
    let stats = marker.stats();
    for w in marker.take_warnings() {
        eprintln!("alnsort sort --markdup=samtools: {w}");
    }
    let sort_stats = merged.stats();
    let summary = out.finish_releasing(merged, || Ok(()))?;
    if sm.stats {
        crate::run::samtools_markdup::write_stats(
            "alnsort sort --markdup=samtools",
            &cfg.command_line,
            sm.json,
            sm.stats_file.as_deref(),
            &stats,
        )?;
    }
    Ok((summary, sort_stats, stats))
}

/// Runs `alnsort sort --markdup=samtools` (called by `run::sort`).
pub(crate) fn run_inner(
    cfg: &Config,
    sm: &SortMarking,
    debris: &Debris,
) -> Result<crate::report::stats::Report> {
    if cfg.inputs.len() > 1 {
        return Err(Error::Refused(
            "--markdup=samtools takes one input (samtools collate reads one); merge the inputs \
             first (alnsort merge -n, or samtools cat)"
                .into(),
        ));
    }
    if cfg.order != SortOrder::Coordinate {
        return Err(Error::Refused(
            "--markdup=samtools sorts by coordinate only (samtools markdup needs coordinate \
             order): leave out -n, -N, -t, -M and --template-coordinate"
                .into(),
        ));
    }
    let pool = crate::run::resources::worker_pool(cfg.threads, "alnsort-worker")?;
    let budget = crate::run::resources::sorter_budget(cfg, cfg.explicit_total)?;
    let dest = crate::io::output::Destinations::prepare(cfg, debris)?;
    let input = crate::io::input::open_with_refs(&cfg.input, Arc::clone(&pool), &cfg.refs)?;
    let name = input.name.clone();
    let mut header = input.header.clone();
    let so = header
        .lines()
        .iter()
        .find(|l| l.starts_with(b"@HD"))
        .and_then(|hd| {
            hd.split(|&b| b == b'\t')
                .skip(1)
                .find(|f| f.starts_with(b"SO:"))
                .map(|f| f[3..].to_vec())
        });
    // Coordinate-sorted input: grouped by name first, in collate's order
    // (a sort of its own, keyed by [`collate_tie`] alone), as collate
    // groups it in the chain.
    let group_first = so.as_deref() == Some(b"coordinate");
    let ref_lens = header.refs().iter().map(|r| r.len as i64).collect();
    let fix_opts = fm::Options {
        mate_score: true,
        ..fm::Options::default()
    };
    let fixer =
        Arc::new(Fixmate::new(fix_opts, ref_lens).map_err(|e| Error::Refused(e.to_string()))?);
    let encoder = Arc::new(
        KeyEncoder::new(SortOrder::Coordinate, header.n_ref(), &header.library_map())
            .with_wide_positions(crate::io::output::has_long_reference(&header)),
    );
    if encoder.wide_positions() {
        crate::io::output::check_wide_output(cfg)?;
    }
    let input_file_bytes = input.size;
    let progress = crate::run::resources::progress(cfg, input_file_bytes);
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort", debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    // The read-name check keeps a sixteenth of the budget in memory, and
    // spills beyond it (`name_check`).
    let names_cap = budget / NAME_CHECK_SHARE;
    let names = NameCheck::new(&name, tmp.path(), names_cap);
    let budget = budget - names_cap;
    // Grouping first: the two sorts share the budget (the grouping's runs
    // are merged while the coordinate sort fills).
    let budget = if group_first { budget / 2 } else { budget };
    let sort_cfg = SortConfig {
        memory_budget: budget,
        temp_dir: tmp.path().to_path_buf(),
        key_kind: KeyKind::Variable,
        max_open_runs: 0,
        merge_partition_bytes: 0,
        chunk_fill: crate::run::resources::chunk_fill(cfg.explicit_total),
        expected_bytes: 0,
    };
    let grouping = match group_first {
        true => {
            let dir = tmp.path().join("grouping");
            std::fs::create_dir(&dir)
                .with_context(|| format!("{}: creating the grouping's directory", dir.display()))?;
            let cfg = SortConfig {
                temp_dir: dir,
                ..sort_cfg.clone()
            };
            Some(Sorter::new(cfg, Arc::clone(&pool))?)
        }
        false => None,
    };
    let mut sorter = Sorter::new(sort_cfg, Arc::clone(&pool))?;
    let records_in = read_fixed(
        cfg,
        input,
        &pool,
        &fixer,
        &encoder,
        (grouping, &mut sorter),
        names,
    )?;
    progress.enter(Phase::MergeRuns);
    let merged = sorter.finish()?;
    progress.enter(Phase::Write);
    cfg.edit_header(&mut header, false);
    let header = Arc::new(header);
    let (summary, sort_stats, stats) = mark_and_write(
        cfg,
        sm,
        &name,
        header,
        merged,
        dest,
        &pool,
        debris,
        (&progress, records_in),
    )?;
    let times = progress.finish();
    drop(tmp);
    let fed = crate::io::input::Fed {
        records: records_in,
        read_scan_s: 0.0,
        read_push_s: 0.0,
        tally: Default::default(),
    };
    let mut report = crate::report::stats::sort_report(
        cfg,
        input_file_bytes,
        records_in,
        &fed,
        &progress,
        &summary,
        &sort_stats,
        &times,
        None,
    );
    let mut no_warnings = Vec::new();
    let counts = stats.total().entries(&mut no_warnings);
    report.add_object(
        "samtools_markdup",
        counts.iter().map(|&(k, v)| (k, v.max(0) as u64)).collect(),
    );
    Ok(report)
}

/// The refusal of input whose templates are not together.
fn scattered(file: &str, qname: &[u8]) -> Error {
    Error::input(
        file,
        format!(
            "read name {} comes back after other names: --markdup=samtools needs input grouped \
             by read name (aligner output, or alnsort sort -n / samtools collate output)",
            String::from_utf8_lossy(qname)
        ),
    )
}

/// The pool job of a batch: its records cut into templates; those between
/// the first and the last fixed and keyed here.
fn cut_fix_key(
    all: &[&[u8]],
    fixer: &Fixmate,
    encoder: &KeyEncoder,
    (fill, spare): (ChunkFill, Option<Batch>),
    warnings: Vec<String>,
) -> Result<Piece> {
    // Room for the records, their keys (coordinate, collate's place: about
    // the name again) and what fixmate adds (MC, MQ, ms).
    let bytes: usize = all.iter().map(|r| 2 * r.len() + 32).sum();
    let runs = fm::template_runs(all);
    let mut piece = Piece {
        head: Vec::new(),
        fixed: Keyed::new(fill, bytes, all.len(), spare),
        tail: None,
        records: all.len() as u64,
        warnings,
    };
    let Some(first) = runs.first().cloned() else {
        return Ok(piece);
    };
    let owned = |range: std::ops::Range<usize>| -> Vec<Vec<u8>> {
        all[range].iter().map(|r| r.to_vec()).collect()
    };
    piece.head = owned(first);
    if runs.len() > 1 {
        let mut scratch = Vec::new();
        // One template at a time in buffers kept from template to template
        // (fixmate edits records in place and may lengthen them), so that
        // records are not each allocated and freed.
        let mut t: Vec<Vec<u8>> = Vec::new();
        for run in &runs[1..runs.len() - 1] {
            t.resize_with(run.len(), Vec::new);
            for (dst, src) in t.iter_mut().zip(&all[run.clone()]) {
                dst.clear();
                dst.extend_from_slice(src);
            }
            piece.fixed.note_template(read_name(&t[0]));
            fix_in_collate_order(fixer, &mut t);
            for r in &t {
                piece.fixed.push(encoder, r, &mut scratch)?;
            }
        }
        piece.tail = Some(owned(runs[runs.len() - 1].clone()));
    }
    Ok(piece)
}

/// The IDs of the header's `@RG` lines, in order.
fn read_group_ids(header: &alnsort_bam::header::Header) -> Vec<Vec<u8>> {
    header
        .lines()
        .iter()
        .filter(|l| l.starts_with(b"@RG\t"))
        .filter_map(|l| {
            l.split(|&b| b == b'\t')
                .find(|f| f.starts_with(b"ID:"))
                .map(|f| f[3..].to_vec())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// samtools collate's hash, worked by hand for short names: "a" is
    /// Wang's mix of 97; the empty name is 0; the X31 step is h*31 + c.
    #[test]
    fn collate_hash_is_x31_then_wang() {
        let wang = |mut key: u32| {
            key = key.wrapping_add(!(key << 15));
            key ^= key >> 10;
            key = key.wrapping_add(key << 3);
            key ^= key >> 6;
            key = key.wrapping_add(!(key << 11));
            key ^= key >> 16;
            key
        };
        assert_eq!(collate_hash(b""), 0);
        assert_eq!(collate_hash(b"a"), wang(97));
        assert_eq!(collate_hash(b"ab"), wang(97 * 31 + 98));
        // A byte above 127 is a negative C char.
        assert_eq!(
            collate_hash(b"a\xff"),
            wang((97u32 * 31).wrapping_add(-1i32 as u32))
        );
    }
}
