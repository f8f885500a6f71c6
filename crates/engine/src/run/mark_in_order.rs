//! `alnsort MarkDuplicates`' run: Picard's answer, written in the input's
//! own order, without a sort.
//!
//! Two passes over the input file:
//! 1. the read jobs take each record's read-end fields
//!    ([`alnsort_markdup::extract::BatchEnds`]) and the `PG` tags it carries; in input
//!    order they go to the [`Marker`], which checks the order the input
//!    claims (coordinate-sorted, or grouped by name) and collects the ends
//!    within its memory budget (spilling to the temporary directory as in
//!    `sort --markdup`); then the core decides (a bitset over input
//!    ordinals);
//! 2. the input is read again; each batch's pool job copies its records
//!    with 0x400 set or cleared by ordinal, the `DT` tags, and the `PG` tag
//!    ([`Decisions::apply_at`]), leaving removed ones out; the writer thread
//!    writes the copies in order.
//!
//! So memory is the marker's budget plus the batches in flight, never the
//! records; the input must be a file (standard input cannot be read twice,
//! and [`crate::options::picard::parse`] refuses it).

use crate::config::Config;
use crate::error::{bail, Context, Error, Result};
use crate::io::cleanup::{Debris, TempDir};
use crate::io::input::{next_batch, spawn_batches};
use crate::markdup::decisions::{set_string_tag, string_tag, Decisions};
use crate::markdup::inputs::picard_plan;
use crate::markdup::marker::Marker;
use crate::markdup::metrics::MetricsFile;
use crate::options::picard::{AssumedOrder, PgSpec, PicardRun};
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::MergeOptions;
use alnsort_bam::htsjdk::header_merge::{htsjdk_base36, HtsjdkMerge};
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_bam::reader::{Decoder, ScanOptions};
use alnsort_markdup::htsjdk::picard_cmp;
use alnsort_markdup::InputOrder;
use std::sync::Arc;

/// What a run did.
#[derive(Debug, Clone, Copy)]
pub struct MarkReport {
    pub records: u64,
    pub marked: u64,
    pub removed: u64,
}

/// The `@HD` tag `key` of `header`.
fn hd_tag<'a>(header: &'a Header, key: &[u8; 2]) -> Option<&'a [u8]> {
    let hd = header.lines().iter().find(|l| l.starts_with(b"@HD"))?;
    hd.split(|&b| b == b'\t')
        .skip(1)
        .find(|f| f.len() >= 3 && &f[..2] == key && f[2] == b':')
        .map(|f| &f[3..])
}

/// Sets the `@HD` SO (and GO) keeping the other tags, as htsjdk's
/// `setSortOrder`/`setGroupOrder` do.
fn set_order(header: &mut Header, so: &str, go: Option<&str>) {
    let text = |t: Option<&[u8]>| t.map(|v| String::from_utf8_lossy(v).into_owned());
    let go = go
        .map(str::to_string)
        .or_else(|| text(hd_tag(header, b"GO")));
    let ss = text(hd_tag(header, b"SS"));
    header.set_sort_order(so, go.as_deref(), ss.as_deref());
}

/// Picard's `@PG` IDs for the distinct `PG` tag values its first pass saw
/// (`None`: records without one), in the order Picard makes them: it walks
/// a Java `HashSet<String>` (by bucket of the string's hash at the set's
/// final capacity, then insertion order; null in bucket 0) and takes each
/// ID from htsjdk's `PgIdGenerator` (the ID itself if free, else
/// `ID.<base 36 counter>` from the number of `@PG` lines).
fn chained_ids(
    header: &Header,
    seen: &[Option<Vec<u8>>],
    id: &str,
) -> Vec<(Option<Vec<u8>>, String)> {
    let mut cap = 16usize;
    while seen.len() > cap * 3 / 4 {
        cap *= 2;
    }
    let bucket = |v: &Option<Vec<u8>>| match v {
        None => 0,
        Some(s) => {
            let h = alnsort_markdup::java_string_hash(s) as u32;
            ((h ^ (h >> 16)) as usize) & (cap - 1)
        }
    };
    let mut order: Vec<usize> = (0..seen.len()).collect();
    order.sort_by_key(|&i| (bucket(&seen[i]), i));
    let mut taken: Vec<Vec<u8>> = header
        .lines()
        .iter()
        .filter(|l| l.starts_with(b"@PG"))
        .filter_map(|l| {
            l.split(|&b| b == b'\t')
                .find(|f| f.starts_with(b"ID:"))
                .map(|f| f[3..].to_vec())
        })
        .collect();
    taken.sort();
    taken.dedup();
    let mut counter = taken.len() as u64;
    let mut out = Vec::new();
    for i in order {
        let new = if !taken.iter().any(|t| t == id.as_bytes()) {
            counter += 1;
            id.to_string()
        } else {
            loop {
                let candidate = format!("{id}.{}", htsjdk_base36(counter));
                counter += 1;
                if !taken.iter().any(|t| t == candidate.as_bytes()) {
                    break candidate;
                }
            }
        };
        taken.push(new.as_bytes().to_vec());
        out.push((seen[i].clone(), new));
    }
    out
}

/// Adds the `@PG` lines (one per chained ID) after the last `@PG` line, with
/// Picard's tags: ID, VN, CL, PN, PP.
fn add_pg_lines(header: &mut Header, ids: &[(Option<Vec<u8>>, String)], pg: &PgSpec, cl: &str) {
    let version = pg
        .version
        .clone()
        .unwrap_or_else(|| format!("alnsort-{}", env!("CARGO_PKG_VERSION")));
    let cl = pg.command_line.clone().unwrap_or_else(|| cl.to_string());
    for (pp, id) in ids {
        let mut fields: Vec<([u8; 2], Vec<u8>)> = vec![
            (*b"ID", id.as_bytes().to_vec()),
            (*b"VN", version.as_bytes().to_vec()),
            (*b"CL", cl.replace(['\t', '\n'], " ").into_bytes()),
            (*b"PN", pg.name.as_bytes().to_vec()),
        ];
        if let Some(pp) = pp {
            fields.push((*b"PP", pp.clone()));
        }
        header.push_program(&fields);
    }
}

/// Runs `alnsort MarkDuplicates` as parsed: the output and metrics in
/// place, or an error (the run's files removed).
pub fn run(p: &PicardRun, debris: &Debris) -> Result<MarkReport> {
    let r = run_inner(p, debris);
    if r.is_err() {
        debris.remove_all();
    }
    r
}

/// Each distinct `PG` tag value of the input (None: no tag) and the
/// chained `@PG` ID its records get.
type PgChain = Vec<(Option<Vec<u8>>, String)>;

/// What is read: one input, or several merged as Picard merges them.
enum Inputs {
    One(String),
    Many(HtsjdkMerge),
}

/// The order Picard reads the inputs in: the first header's `@HD SO`, or
/// ASSUME_SORT_ORDER's (which Picard sets on the first header only);
/// without ASSUME_SORT_ORDER every other input must say the same
/// (htsjdk's merging iterator: "Files are not compatible with sort
/// order").
fn sort_order_of(
    p: &PicardRun,
    headers: &mut [Header],
    paths: &[String],
) -> Result<Option<String>> {
    match p.assume {
        Some(AssumedOrder::Coordinate) => set_order(&mut headers[0], "coordinate", None),
        Some(AssumedOrder::Queryname) => set_order(&mut headers[0], "queryname", None),
        None => {}
    }
    let so = |h: &Header| hd_tag(h, b"SO").map(|v| String::from_utf8_lossy(v).into_owned());
    let first = so(&headers[0]);
    if p.assume.is_none() {
        for (h, path) in headers.iter().zip(paths).skip(1) {
            let this = so(h);
            if this != first {
                return Err(Error::Refused(format!(
                    "{path}: its header says SO:{} but {} says SO:{}: Picard reads several inputs in the \
                     first one's order and refuses inputs whose @HD SO differ (\"Files are not compatible \
                     with sort order\"); sort them alike, or give ASSUME_SORT_ORDER",
                    this.as_deref().unwrap_or("(none)"),
                    paths[0],
                    first.as_deref().unwrap_or("(none)"),
                )));
            }
        }
    }
    Ok(first)
}

fn run_inner(p: &PicardRun, debris: &Debris) -> Result<MarkReport> {
    let mut cfg: Config = crate::config::resolve(&p.sort)?;
    let Some(md) = cfg.markdup.clone() else {
        return Err(Error::Internal(
            "MarkDuplicates without duplicate marking".into(),
        ));
    };
    refuse_non_files(&p.inputs)?;
    let pool = crate::run::resources::worker_pool(cfg.threads, "alnsort-worker")?;
    let metrics_file = MetricsFile::create(std::path::Path::new(&p.metrics), debris)?;
    let OpenedInputs {
        header,
        inputs,
        name,
        so,
        mut holdings,
    } = open_inputs(p, &cfg, &pool)?;
    let coordinate = match so.as_deref() {
        Some("coordinate") => true,
        Some("queryname") => false,
        other => {
            return Err(Error::Refused(format!(
                "{}: MarkDuplicates needs coordinate-sorted input or input grouped by read name, as the \
                 header's @HD SO says (or ASSUME_SORT_ORDER=coordinate|queryname), as Picard does; the header \
                 says SO:{}: give ASSUME_SORT_ORDER=queryname if the records of each template are together \
                 (aligner output), or sort it first",
                p.inputs[0],
                other.unwrap_or("(none)")
            )))
        }
    };
    let mut out_header = header.clone();
    if p.assume == Some(AssumedOrder::Queryname) {
        set_order(&mut out_header, "unknown", Some("query"));
    }
    for c in &p.comments {
        out_header.push_comment(c.as_bytes());
    }
    if !coordinate {
        // htsjdk indexes coordinate-sorted BAM only.
        if let Some(t) = cfg.index.take() {
            eprintln!(
                "[W::alnsort] not writing the index {}: the output is not coordinate-sorted (as Picard)",
                t.path.display()
            );
        }
        cfg.order = SortOrder::Name { natural: false };
    }
    let dest = crate::io::output::Destinations::prepare(&cfg, debris)?;
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort", debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    let budget = if cfg.explicit_total {
        // What CRAM holds (references, containers in flight) comes out of
        // the marker's share, as out of the sorter's in a sort.
        if cfg.format == crate::options::sort::OutFormat::Cram {
            holdings.push(alnsort_cram::RefHolding::for_order(coordinate));
        }
        let mut share = crate::run::resources::sorter_budget(&cfg, true)?;
        if !holdings.is_empty() {
            share = crate::run::resources::charge_cram(
                share,
                &header,
                cfg.threads,
                cfg.memory_budget,
                &holdings,
            )?;
        }
        (share, Some(cfg.memory_budget))
    } else {
        (cfg.memory_budget as usize, None)
    };
    let order = if coordinate {
        InputOrder::Coordinate
    } else {
        InputOrder::Queryname
    };
    let mut marker = Marker::with_order(&header, &md, &name, budget, Some(tmp.path()), order);
    marker.set_pool(Arc::clone(&pool));
    let want_pg = p.pg.id.is_some();

    // Pass 1: read ends and PG tags, in input order to the marker.
    let (n, seen) = match &inputs {
        Inputs::One(path) => pass1_one(path, &cfg, &header, &pool, &mut marker, want_pg)?,
        Inputs::Many(merge) => {
            pass1_many(merge, &p.inputs, &cfg, &pool, order, &mut marker, want_pg)?
        }
    };
    let decisions = Arc::new(marker.finish()?);

    // The @PG lines, and the PG tag each record gets.
    let chained = match &p.pg.id {
        Some(id) => chained_ids(&out_header, &seen, id),
        None => Vec::new(),
    };
    add_pg_lines(&mut out_header, &chained, &p.pg, &p.sort.command_line);
    let tags: Arc<PgChain> = Arc::new(if p.pg.tag_reads { chained } else { Vec::new() });

    // Pass 2: the records again, marked, in order.
    let out_header = Arc::new(out_header);
    let mut out = crate::io::output::Output::create(
        &cfg,
        dest,
        Arc::clone(&out_header),
        Arc::clone(&pool),
        debris,
    )?;
    let (m, written) = match &inputs {
        Inputs::One(path) => pass2_one(path, &cfg, &header, &pool, &decisions, &tags, &mut out)?,
        Inputs::Many(merge) => pass2_many(
            merge, &p.inputs, &cfg, &pool, order, &decisions, &tags, &mut out,
        )?,
    };
    let removed = m - written;
    if m != n || removed != decisions.removed() {
        return Err(Error::Internal(format!(
            "{name} gave {n} records on the first reading and {m} on the second \
             ({removed} left out, {} decided): was it changed while it was read?",
            decisions.removed()
        )));
    }
    out.finish_releasing((), || decisions.check_all_met())?;
    write_side_files(p, &decisions, metrics_file, debris)?;
    drop(tmp);
    Ok(MarkReport {
        records: n,
        marked: decisions.marked(),
        removed,
    })
}

/// The inputs must be files: the run reads them twice.
fn refuse_non_files(inputs: &[String]) -> Result<()> {
    for path in inputs {
        let meta =
            std::fs::metadata(path).with_context(|| format!("{path}: cannot open the input"))?;
        if !meta.is_file() {
            return Err(Error::Refused(format!(
                "{path}: not a regular file (a pipe or a device): alnsort MarkDuplicates reads its input twice \
                 (once to decide, once to write the records in their order); write it to a file first, or mark \
                 it while sorting with 'alnsort sort --markdup'"
            )));
        }
    }
    Ok(())
}

/// The inputs as [`open_inputs`] finds them.
struct OpenedInputs {
    /// The only input's header, or htsjdk's merge of theirs.
    header: Header,
    inputs: Inputs,
    /// The input's name in messages.
    name: String,
    /// The order Picard takes the input to be in ([`sort_order_of`]).
    so: Option<String>,
    /// What the inputs' CRAM readers hold.
    holdings: Vec<alnsort_cram::RefHolding>,
}

/// Opens the inputs for their headers: Picard reads the header's order, or
/// ASSUME_SORT_ORDER's (with queryname assumed its output says SO:unknown
/// GO:query); several inputs are merged as htsjdk merges them.
fn open_inputs(p: &PicardRun, cfg: &Config, pool: &Arc<rayon::ThreadPool>) -> Result<OpenedInputs> {
    let mut headers = Vec::with_capacity(p.inputs.len());
    let mut holdings = Vec::new();
    let mut name = String::new();
    for path in &p.inputs {
        let input = crate::io::input::open_with_refs(path, Arc::clone(pool), &cfg.refs)?;
        holdings.extend(input.cram_reference_holding());
        headers.push(input.header.clone());
        if name.is_empty() {
            name = input.name.clone();
        }
    }
    let so = sort_order_of(p, &mut headers, &p.inputs)?;
    let (header, inputs) = if p.inputs.len() > 1 {
        let merge = HtsjdkMerge::new(&headers, &p.inputs, so.as_deref().unwrap_or("unsorted"))?;
        name = format!("{} (merged as Picard merges them)", p.inputs.join(", "));
        (merge.header.clone(), Inputs::Many(merge))
    } else {
        (headers.swap_remove(0), Inputs::One(p.inputs[0].clone()))
    };
    Ok(OpenedInputs {
        header,
        inputs,
        name,
        so,
        holdings,
    })
}

/// The files beside the output: its MD5 (CREATE_MD5_FILE=true) and the
/// metrics file.
fn write_side_files(
    p: &PicardRun,
    decisions: &Decisions,
    metrics_file: MetricsFile,
    debris: &Debris,
) -> Result<()> {
    if p.create_md5 {
        write_md5(
            p.sort.output.split("##idx##").next().unwrap_or_default(),
            debris,
        )?;
    }
    let mut picard = alnsort_markdup::PicardCommandLine::new(
        &p.inputs,
        p.sort.output.split("##idx##").next().unwrap_or("-"),
        &p.metrics,
    );
    for (k, v) in &p.given {
        picard = picard.option(k, v);
    }
    metrics_file.write_picard(&decisions.metrics, &picard, &p.sort.command_line)
}

/// CREATE_MD5_FILE=true: the MD5 of the output file as written, in
/// `OUTPUT.md5`, as htsjdk's `Md5CalculatingOutputStream` writes it (32
/// lower-case hex digits, no newline). Read back from the finished file.
fn write_md5(output: &str, debris: &Debris) -> Result<()> {
    use md5::{Digest, Md5};
    use std::io::Read;
    let mut f = std::fs::File::open(output)
        .with_context(|| format!("{output}: reading the output back for its MD5"))?;
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("{output}: reading the output back for its MD5"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let path = std::path::PathBuf::from(format!("{output}.md5"));
    debris.add(path.clone());
    std::fs::write(&path, hex).with_context(|| format!("{}: writing the MD5", path.display()))?;
    Ok(())
}

/// The decoder both passes over one input use (the keys are not used).
pub(crate) fn decoder_for(name: &str, header: &Header, cfg: &Config) -> Arc<Decoder> {
    Arc::new(Decoder {
        file: name.into(),
        lookup: Arc::new(header.ref_lookup()),
        header: Arc::new(header.clone()),
        encoder: Arc::new(KeyEncoder::new(
            SortOrder::Coordinate,
            header.n_ref(),
            &header.library_map(),
        )),
        record_limit: usize::MAX,
        unknown_reference: cfg.unknown_reference,
    })
}

/// Adds the distinct values of `PG` tags in `new` to `seen`, in order.
fn note_pgs(seen: &mut Vec<Option<Vec<u8>>>, new: impl IntoIterator<Item = Option<Vec<u8>>>) {
    for pg in new {
        if !seen.contains(&pg) {
            seen.push(pg);
        }
    }
}

/// Pass 1 over one input: the read jobs take the ends (and PG tags) of each
/// batch, handed to the marker in order. Returns the records read and the
/// distinct PG tag values.
fn pass1_one(
    path: &str,
    cfg: &Config,
    header: &Header,
    pool: &Arc<rayon::ThreadPool>,
    marker: &mut Marker,
    want_pg: bool,
) -> Result<(u64, Vec<Option<Vec<u8>>>)> {
    let input = crate::io::input::open_with_refs(path, Arc::clone(pool), &cfg.refs)?;
    let name = input.name.clone();
    let dec = decoder_for(&name, header, cfg);
    let depth = pool.current_num_threads() * 2 + 2;
    let (_, _, records) = input.into_records(ScanOptions::default());
    let spec = marker.ends_spec();
    let (mut batches, _) = spawn_batches(&name, records, pool, "read", depth, move |raw| {
        let mut ends = alnsort_markdup::extract::BatchEnds::new(spec.clone());
        let mut pgs: Vec<Option<Vec<u8>>> = Vec::new();
        let mut warnings = Vec::new();
        dec.decode(
            raw,
            |_key, rec| {
                ends.add_fields(rec);
                if want_pg {
                    let tag = string_tag(rec, *b"PG");
                    if !pgs.iter().any(|s| s.as_deref() == tag) {
                        pgs.push(tag.map(<[u8]>::to_vec));
                    }
                }
                Ok(())
            },
            |w| warnings.push(w),
        )?;
        Ok((ends, pgs, warnings))
    })?;
    let mut n = 0u64;
    let mut seen: Vec<Option<Vec<u8>>> = Vec::new();
    while let Some(r) = next_batch(&mut batches, &name, n + 1, |(_, _, w)| w) {
        let (ends, pgs, _) = r?;
        note_pgs(&mut seen, pgs);
        n += ends.len() as u64;
        marker.push(&ends)?;
    }
    Ok((n, seen))
}

/// Pass 2 over one input: each batch's pool job copies its records marked
/// ([`copy_marked`]); the compression jobs take them in order. Returns the
/// records read and written.
fn pass2_one(
    path: &str,
    cfg: &Config,
    header: &Header,
    pool: &Arc<rayon::ThreadPool>,
    decisions: &Arc<Decisions>,
    tags: &Arc<PgChain>,
    out: &mut crate::io::output::Output,
) -> Result<(u64, u64)> {
    let input = crate::io::input::open_with_refs(path, Arc::clone(pool), &cfg.refs)?;
    let name = input.name.clone();
    let dec = decoder_for(&name, header, cfg);
    let depth = pool.current_num_threads() * 2 + 2;
    let (_, _, records) = input.into_records(ScanOptions::default());
    let d = Arc::clone(decisions);
    let tags = Arc::clone(tags);
    let (mut batches, _) = spawn_batches(&name, records, pool, "mark", depth, move |raw| {
        copy_marked(&dec, &d, &tags, raw)
    })?;
    let mut written = 0u64;
    let mut m = 0u64;
    while let Some(r) = next_batch(&mut batches, &name, m + 1, |_| &[]) {
        let (copied, count) = r?;
        m += count;
        written += copied.starts.len() as u64;
        out.write_units(Arc::new(copied))?;
    }
    Ok((m, written))
}

/// The inputs merged in Picard's order, records as they are in their files
/// (the caller translates them: [`HtsjdkMerge::translate`]).
fn merged_stream(
    paths: &[String],
    cfg: &Config,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<crate::io::merged::MergedStream> {
    let plan = picard_plan(paths, cfg, MergeOptions::default());
    Ok(crate::io::merged::merged_inputs_untranslated(&plan, pool)?.0)
}

/// Pass 1 over several inputs, in Picard's merge order, their records
/// translated as htsjdk's merging iterator hands them to Picard.
fn pass1_many(
    merge: &HtsjdkMerge,
    paths: &[String],
    cfg: &Config,
    pool: &Arc<rayon::ThreadPool>,
    order: InputOrder,
    marker: &mut Marker,
    want_pg: bool,
) -> Result<(u64, Vec<Option<Vec<u8>>>)> {
    if paths.len() > u16::MAX as usize {
        bail!(Refused, "MarkDuplicates takes at most {} inputs", u16::MAX);
    }
    let spec = marker.ends_spec();
    let mut ends = alnsort_markdup::extract::BatchEnds::new(spec.clone());
    let mut seen: Vec<Option<Vec<u8>>> = Vec::new();
    let mut counts = vec![0u64; paths.len()];
    let mut from: Vec<u16> = Vec::new();
    let mut buf = Vec::new();
    marker.check_inputs_apart(paths);
    let n = merged_stream(paths, cfg, pool)?.for_each_by(picard_cmp(order), |input, rec| {
        counts[input] += 1;
        from.push(input as u16);
        let rec = if merge.translate(input, rec, counts[input], &mut buf)? {
            &buf[..]
        } else {
            rec
        };
        ends.add_fields(rec);
        if want_pg {
            note_pgs(&mut seen, [string_tag(rec, *b"PG").map(<[u8]>::to_vec)]);
        }
        if ends.len() >= MERGED_ENDS_BATCH {
            marker.push_from(&ends, &from)?;
            from.clear();
            ends = alnsort_markdup::extract::BatchEnds::new(spec.clone());
        }
        Ok(())
    })?;
    marker.push_from(&ends, &from)?;
    Ok((n, seen))
}

/// Records of several inputs handed to the marker, or to the output's
/// compression jobs, at a time (pass 1 and 2 of merged inputs).
const MERGED_ENDS_BATCH: usize = 4096;

/// Pass 2 over several inputs: the merged stream again, each record
/// translated and marked on this thread, handed to the compression jobs in
/// batches of about [`alnsort_bam::reader::BATCH_BYTES`].
#[allow(clippy::too_many_arguments)]
fn pass2_many(
    merge: &HtsjdkMerge,
    paths: &[String],
    cfg: &Config,
    pool: &Arc<rayon::ThreadPool>,
    order: InputOrder,
    decisions: &Decisions,
    tags: &[(Option<Vec<u8>>, String)],
    out: &mut crate::io::output::Output,
) -> Result<(u64, u64)> {
    let mut counts = vec![0u64; paths.len()];
    let mut translated = Vec::new();
    let mut marked = Vec::new();
    let mut batch = CopiedBatch {
        bytes: Vec::new(),
        starts: Vec::new(),
    };
    let mut written = 0u64;
    let mut ordinal = 0u64;
    let m = merged_stream(paths, cfg, pool)?.for_each_by(picard_cmp(order), |input, rec| {
        counts[input] += 1;
        let rec = if merge.translate(input, rec, counts[input], &mut translated)? {
            &translated[..]
        } else {
            rec
        };
        let kept = decisions.apply_at(rec, ordinal, &mut marked)?.is_some();
        ordinal += 1;
        if kept {
            set_pg_tag(&mut marked, tags);
            batch.starts.push(batch.bytes.len());
            batch.bytes.extend_from_slice(&marked);
            written += 1;
            if batch.bytes.len() >= alnsort_bam::reader::BATCH_BYTES {
                let full = std::mem::replace(
                    &mut batch,
                    CopiedBatch {
                        bytes: Vec::with_capacity(alnsort_bam::reader::BATCH_BYTES + (64 << 10)),
                        starts: Vec::new(),
                    },
                );
                out.write_units(Arc::new(full))?;
            }
        }
        Ok(())
    })?;
    if !batch.starts.is_empty() {
        out.write_units(Arc::new(batch))?;
    }
    Ok((m, written))
}

/// Sets a marked record's `PG` tag to the chained `@PG` ID of the value it
/// had (Picard's `chainedPgIds`); `tags` empty: left as it is.
fn set_pg_tag(rec: &mut Vec<u8>, tags: &[(Option<Vec<u8>>, String)]) {
    if tags.is_empty() {
        return;
    }
    let have = string_tag(rec, *b"PG").map(<[u8]>::to_vec);
    if let Some((_, id)) = tags.iter().find(|(k, _)| *k == have) {
        set_string_tag(rec, *b"PG", id.as_bytes());
    }
}

/// The records of one batch as pass 2 writes them (each with its
/// block_size), for the output's compression jobs to copy.
struct CopiedBatch {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl alnsort_bgzf::Units for CopiedBatch {
    fn count(&self) -> usize {
        self.starts.len()
    }

    fn unit(&self, i: usize) -> &[u8] {
        let end = self.starts.get(i + 1).copied().unwrap_or(self.bytes.len());
        &self.bytes[self.starts[i]..end]
    }
}

/// One batch of pass 2: the records copied with the decision applied and
/// the `PG` tag set; returns them and the number of records read.
fn copy_marked(
    decoder: &Decoder,
    d: &Decisions,
    tags: &[(Option<Vec<u8>>, String)],
    raw: &alnsort_bam::reader::RawBatch,
) -> Result<(CopiedBatch, u64)> {
    let mut out = Vec::with_capacity(raw.bytes() + raw.voffsets.len() * 20);
    let mut buf = Vec::new();
    let mut starts = Vec::with_capacity(raw.voffsets.len());
    let mut count = 0u64;
    let mut failure: Option<Error> = None;
    decoder
        .decode(
            raw,
            |_key, rec| {
                let ordinal = raw.first_record + count;
                count += 1;
                let res = d.apply_at(rec, ordinal, &mut buf);
                match res {
                    Ok(Some(_)) => {
                        set_pg_tag(&mut buf, tags);
                        starts.push(out.len());
                        out.extend_from_slice(&buf);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => {
                        let text = e.to_string();
                        failure = Some(e);
                        Err(text.into())
                    }
                }
            },
            |_| {},
        )
        .map_err(|e| match failure.take() {
            Some(f) => f,
            None => Error::from(e),
        })?;
    Ok((CopiedBatch { bytes: out, starts }, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_ids_follow_java_hashset_order_and_avoid_taken_ids() {
        let h = alnsort_bam::header::parse_sam_header(
            [
                "@HD\tVN:1.6\tSO:coordinate",
                "@PG\tID:MarkDuplicates\tPN:MarkDuplicates",
            ]
            .iter()
            .map(|l| l.as_bytes()),
        )
        .unwrap();
        let ids = chained_ids(&h, &[None], "MarkDuplicates");
        assert_eq!(ids, vec![(None, "MarkDuplicates.1".to_string())]);
        let empty = Header::empty();
        let ids = chained_ids(&empty, &[Some(b"bwa".to_vec()), None], "MarkDuplicates");
        // null hashes to bucket 0, before "bwa".
        assert_eq!(ids[0], (None, "MarkDuplicates".to_string()));
        assert_eq!(ids[1].0.as_deref(), Some(&b"bwa"[..]));
        assert_eq!(ids[1].1, "MarkDuplicates.1");
    }
}
