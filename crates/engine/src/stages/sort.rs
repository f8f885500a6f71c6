//! The distributed sort's stages (issue 11) as library calls, for the
//! Python module `alnsort.stages`, the `alnsort split|sample|map|reduce|
//! assemble` subcommands and any workflow manager:
//!
//! 1. [`split`]: cut the inputs into splits (record-start virtual offsets:
//!    the header's end, proven; the others guessed, `alnsort_bam::split`).
//! 2. [`sample`]: sort keys with their tie-break (split, record virtual
//!    offset), drawn from a few evenly spaced stretches of one split.
//! 3. [`splitters`]: R - 1 skew-safe range splitters from all samples.
//! 4. [`map`]: one split read, keyed, sorted, cut into R framed blocks;
//!    reports the proven end of the split (the offset of the first record
//!    at or past its end), which the driver checks against the next
//!    split's start (repair: run the next map again from the proven end).
//! 5. [`reduce`]: one range's blocks (in split order) merged into a
//!    headerless, EOF-less part, and its part index when asked.
//! 6. [`assemble`]: header + parts in range order + one EOF block, the
//!    index merged from the part indexes; or a directory of complete,
//!    individually indexed files (sharded).
//!
//! Options are those of `alnsort sort` (the order, `-l`, `-O`,
//! `--write-index`, `--no-PG`, `-@`, `--max-memory`, `-T`), given as the
//! argument vector that command would take, without `-o` and the input:
//! one parser, one meaning, the same messages. assemble(reduce(map(...)))
//! over any splits and partitions holds the records of `alnsort sort`,
//! in its order, with its header.
//!
//! Several inputs (lanes) are sorted together as `alnsort sort IN1 IN2
//! ...` sorts them: their headers merged as `samtools merge` merges them
//! (`alnsort_bam::header_merge`, the merged header is the output's), each
//! record translated into the merged header's terms (reference ids, `RG`
//! and `PG` tags) before it is keyed, and records of equal sort keys in
//! the order of the coordinate merge of the inputs that `alnsort sort`
//! sorts stably. That order is (coordinate merge key's running maximum in
//! the record's input, input, position in the input), see [`MergedInputs`]:
//! the maps append that running maximum to every key, [`reach`] gives the
//! maximum of a split, and a map is told the largest reach of the earlier
//! splits of its input (`prior`). Only BAM inputs can be split (a SAM input
//! is refused).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{bail, Context, Error, Result};
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::{HeaderMerger, MergeOptions, Translation};
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_bam::reader::{BamScanner, Decoder, RangeEnd, RawBatch, ScanOptions, Scanner};
use alnsort_bam::split as bsplit;
use alnsort_bam::writer::{Format, Writer, WriterOptions};
use alnsort_bam::RecordRef;
use alnsort_bgzf::{CompressionLevel, ParallelReader, ReadAhead, EOF_BLOCK};
use alnsort_index::IndexFormat;
use alnsort_sort::batch::Batch;
use alnsort_sort::stages::{
    merge_blocks, splitters_from_samples, BlockWriter, Partitioner, Splitter, Tally, BLOCK_BUFFERS,
};
use alnsort_sort::{KeyKind, SortConfig, Sorter};

use crate::cleanup::{Debris, PendingFile, TempDir};
use crate::config::{self, Config, IndexKind};
use crate::input::key_kind;
use crate::options::{OutFormat, SortOptions};
use crate::output::Output;

/// One split: the records of input `input` from virtual offset `start`
/// (a record start) to `end` (the next split's start; `None`: to the end
/// of the input). `ordinal` is its place in input order over all inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitSpec {
    pub input: usize,
    pub start: u64,
    pub end: Option<u64>,
    pub ordinal: u32,
}

/// What [`map`] returns.
#[derive(Debug)]
pub struct MapOutput {
    /// One framed block per range, in range order.
    pub blocks: Vec<Vec<u8>>,
    pub records: u64,
    /// The proven end: the virtual offset of the first record at or past
    /// the split's end (`None` when the split runs to the end of input).
    pub end: Option<u64>,
    /// Several inputs: the split's reach (as [`reach`] gives it), `None`
    /// for one input or an empty split.
    pub reach: Option<u64>,
}

/// What [`reduce`] returns.
#[derive(Debug, Clone, Copy)]
pub struct ReduceOutput {
    pub records: u64,
    pub bytes: u64,
    /// With duplicate decisions ([`reduce_marked`]): the duplicates among
    /// the records (the driver checks they add up to the decided count).
    pub marked: u64,
}

/// What [`assemble`] returns.
#[derive(Debug, Clone)]
pub struct AssembleOutput {
    pub bytes: u64,
    /// The index written, if any (sharded: one per file, beside it).
    pub index: Option<PathBuf>,
    /// Sharded: the files written, in range order.
    pub files: Vec<PathBuf>,
}

/// The input a stage's options name: the stages read the inputs they are
/// given, so the sort options' own input is only a placeholder.
const STAGE_INPUT: &str = "stage-input.bam";

/// The resolved `alnsort sort` options of a stage. `output` names the
/// output (assemble) or a stand-in with the right extension (the format
/// follows it as `-o` does); `index` asks for that kind of index (BAI
/// named `OUTPUT.bai`, CSI `OUTPUT.csi`). The options' `command_line` is
/// `alnsort sort` with the options the stages were given.
pub fn stage_config(
    options: &SortOptions,
    output: &Path,
    index: Option<IndexKind>,
) -> Result<Config> {
    let mut a = options.clone();
    let mut out = output.display().to_string();
    if let Some(kind) = index {
        a.write_index = true;
        if kind == IndexKind::Bai {
            out = format!("{out}##idx##{out}.bai");
        }
    }
    a.output = out;
    a.input = STAGE_INPUT.into();
    a.inputs = vec![STAGE_INPUT.into()];
    let cfg = config::resolve(&a)?;
    if cfg.format == OutFormat::Cram {
        return Err(Error::Refused(
            "CRAM output is not supported by the distributed stages yet".to_string(),
        ));
    }
    Ok(cfg)
}

pub(crate) fn pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    crate::worker_pool(threads, "alnsort-stage")
}

/// The inputs of one sort: each input's header, first-record offset and
/// size (`heads`), the output's header, and with several inputs how each
/// input's records translate into it.
pub(crate) struct InputSet {
    pub(crate) heads: Vec<(Header, u64, u64)>,
    /// The only input's header, or the merged one (`alnsort sort IN1 IN2
    /// ...`'s: `samtools merge`'s rules, clash suffixes seeded with 0).
    header: Arc<Header>,
    merged: Option<Arc<MergedInputs>>,
}

/// Several inputs in the merged header's terms. `alnsort sort IN1 IN2 ...`
/// interleaves the inputs by coordinate (a loser tree over their heads,
/// the lower input first on equal keys) and sorts that stream stably. A
/// merge of heads hands on each input in stretches that start at a new
/// running maximum of its keys, so the stream is ordered by (running
/// maximum of the coordinate key within the record's input, input,
/// position): the tie-break of equal sort keys. The maps append that
/// running maximum (8 bytes, big-endian) to each sort key; the splits
/// and the reduce's merge (blocks in split order) add (input, position).
/// Sort keys are prefix-free (`alnsort_bam::keys`), so the longer keys
/// keep their order.
struct MergedInputs {
    translations: Vec<Translation>,
    /// Coordinate keys in the merged header's terms (the merge's order).
    coordinate: KeyEncoder,
    warnings: Vec<String>,
}

impl MergedInputs {
    /// The coordinate merge key of `rec`, a record of input `input`.
    fn merge_key(&self, input: usize, rec: RecordRef<'_>) -> u64 {
        let tid = self.translations[input].ref_id(rec.ref_id());
        self.coordinate.coordinate_of(tid, rec.pos(), rec.flag())
    }

    /// The running maximum of the merge key over the records of `raw` (a
    /// batch of input `input`), each record's value in order, starting
    /// from `running` (which ends at the batch's maximum). A record too
    /// short to hold the fields counts as nothing; its decoding fails.
    fn running_max(&self, input: usize, raw: &RawBatch, running: &mut Option<u64>) -> Vec<u64> {
        let mut out = Vec::with_capacity(raw.voffsets.len());
        let mut records = raw.records();
        for _ in 0..raw.voffsets.len() {
            if let Some((rec, _)) = records.next().filter(|(r, _)| r.len() >= 36) {
                let k = self.merge_key(input, RecordRef::with_block_size(rec));
                *running = Some(running.map_or(k, |r| r.max(k)));
            }
            out.push(running.unwrap_or(0));
        }
        out
    }

    /// `rec` (of input `input`) translated as `alnsort sort` translates it
    /// (into `scratch` when it changes) and its key of `encoder`'s order
    /// with the tie-break `running` appended, into `key`. Tags dropped for
    /// an ID the input's header lacks are reported to `unknown`.
    #[allow(clippy::too_many_arguments)]
    fn rekey<'a>(
        &self,
        input: usize,
        rec: &'a [u8],
        scratch: &'a mut Vec<u8>,
        encoder: &KeyEncoder,
        running: u64,
        key: &mut Vec<u8>,
        unknown: &mut alnsort_bam::header_merge::UnknownTag<'_>,
    ) -> std::result::Result<&'a [u8], alnsort_bam::keys::KeyError> {
        let rec = if self.translations[input].apply(rec, scratch, unknown) {
            &scratch[..]
        } else {
            rec
        };
        encoder.encode(RecordRef::with_block_size(rec), key)?;
        key.extend_from_slice(&running.to_be_bytes());
        Ok(rec)
    }
}

/// Bytes appended to each sort key with several inputs (see
/// [`MergedInputs`]).
const TIE_LEN: usize = 8;

/// Headers (and first-record offsets and sizes) of `inputs`, merged when
/// there are several.
pub(crate) fn headers(inputs: &[PathBuf], pool: &Arc<rayon::ThreadPool>) -> Result<InputSet> {
    if inputs.is_empty() {
        return Err(Error::Refused("no input files".to_string()));
    }
    let mut heads: Vec<(Header, u64, u64)> = Vec::new();
    for path in inputs {
        heads.push(bsplit::read_header(path, Arc::clone(pool))?);
    }
    merge_heads(inputs, heads)
}

/// [`headers`] once the headers are read (`heads`, one per input).
fn merge_heads(inputs: &[PathBuf], heads: Vec<(Header, u64, u64)>) -> Result<InputSet> {
    if heads.len() == 1 {
        return Ok(InputSet {
            header: Arc::new(heads[0].0.clone()),
            heads,
            merged: None,
        });
    }
    let mut merger = HeaderMerger::new(MergeOptions {
        seed: 0,
        ..Default::default()
    });
    let mut translations = Vec::with_capacity(heads.len());
    let mut reset_order = false;
    for (path, h) in inputs.iter().zip(&heads) {
        let t = merger
            .add(&h.0)
            .with_context(|| format!("{}: merging its header", path.display()))?;
        reset_order |= t.lost_coord_sort;
        translations.push(t);
    }
    let warnings = std::mem::take(&mut merger.warnings);
    let header = merger.finish(reset_order).context("merging the headers")?;
    let coordinate = KeyEncoder::new(SortOrder::Coordinate, header.n_ref(), &[]);
    Ok(InputSet {
        header: Arc::new(header),
        heads,
        merged: Some(Arc::new(MergedInputs {
            translations,
            coordinate,
            warnings,
        })),
    })
}

/// The key encoder of `cfg`'s order for `header`.
fn encoder(cfg: &Config, header: &Header) -> Arc<KeyEncoder> {
    Arc::new(KeyEncoder::new(
        cfg.order.clone(),
        header.n_ref(),
        &header.library_map(),
    ))
}

/// Cuts `inputs` into about `parts` splits in all (at least one per
/// input, the rest by compressed size), in input order.
pub fn split(inputs: &[PathBuf], parts: usize, threads: usize) -> Result<Vec<SplitSpec>> {
    let pool = pool(threads)?;
    let set = headers(inputs, &pool)?;
    for w in set.merged.iter().flat_map(|m| &m.warnings) {
        eprintln!("{w}");
    }
    let heads = &set.heads;
    let total: u64 = heads.iter().map(|h| h.2).sum::<u64>().max(1);
    let mut out = Vec::new();
    for (i, (path, (header, first, size))) in inputs.iter().zip(heads).enumerate() {
        let share = ((parts as u64 * size).div_ceil(total)).max(1) as usize;
        let starts = bsplit::guess_starts(path, header.n_ref(), *first, *size, share, &pool)?;
        for (j, &start) in starts.iter().enumerate() {
            out.push(SplitSpec {
                input: i,
                start,
                end: starts.get(j + 1).copied(),
                ordinal: u32::try_from(out.len())
                    .map_err(|_| Error::Refused("too many splits".into()))?,
            });
        }
    }
    Ok(out)
}

/// Places in a split that [`sample`] draws keys from: its start and
/// record starts evenly spaced in its compressed bytes.
const SAMPLE_STRETCHES: u64 = 8;

/// Uncompressed bytes per batch while sampling: a stretch is short (the
/// Ray driver draws 128 keys per partition over a split's eight
/// stretches: 16 records per stretch of 4 partitions and 4 splits, about
/// 5 KiB of the benchmark's records).
const SAMPLE_BATCH: usize = 16 << 10;

/// The path of split `split`'s input.
pub(crate) fn split_input<'a>(inputs: &'a [PathBuf], split: &SplitSpec) -> Result<&'a PathBuf> {
    inputs.get(split.input).ok_or_else(|| {
        Error::Refused(format!(
            "split {} names input {}, but there are {} inputs",
            split.ordinal,
            split.input,
            inputs.len()
        ))
    })
}

/// A scanner of `path`'s records from the record start `from` to `end`.
pub(crate) fn open_scanner(
    path: &Path,
    from: u64,
    end: Option<u64>,
    opts: ScanOptions,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<(Arc<str>, BamScanner)> {
    let name: Arc<str> = path.display().to_string().into();
    let file = File::open(path).with_context(|| format!("{name}: cannot open"))?;
    let scanner = BamScanner::open_at(
        Arc::clone(&name),
        file,
        Arc::clone(pool),
        from,
        ScanOptions {
            end: end.map_or(RangeEnd::Eof, RangeEnd::VirtualOffset),
            ..opts
        },
    )?;
    Ok((name, scanner))
}

fn decoder(
    name: &Arc<str>,
    cfg: &Config,
    header: &Arc<Header>,
    encoder: &Arc<KeyEncoder>,
    record_limit: usize,
) -> Decoder {
    Decoder {
        file: Arc::clone(name),
        header: Arc::clone(header),
        lookup: Arc::new(header.ref_lookup()),
        encoder: Arc::clone(encoder),
        record_limit,
        unknown_reference: cfg.unknown_reference,
    }
}

/// Up to `count` sort keys with their tie-break (encoded [`Splitter`]s:
/// the split's ordinal and the record's virtual offset), drawn from
/// [`SAMPLE_STRETCHES`] stretches of split `split`: its start and record
/// starts evenly spaced in its compressed bytes (named by an index beside
/// the input, else guessed, as `split` finds them), about
/// `count / stretches` records each. Only those stretches are read, not
/// the split. A guessed start that does not decode is passed over (a
/// wrong guess only makes the ranges less even; any splitter keeps the
/// order exact); the same split always gives the same samples.
pub fn sample(
    inputs: &[PathBuf],
    split: &SplitSpec,
    count: usize,
    options: &SortOptions,
) -> Result<Vec<Vec<u8>>> {
    let cfg = stage_config(options, Path::new("stage.bam"), None)?;
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    let heads = &set.heads;
    let path = split_input(inputs, split)?;
    let header = Arc::new(heads[split.input].0.clone());
    let enc = encoder(&cfg, &header);
    // Several inputs: keys of the merged header's records (a sample's tie
    // suffix is the running maximum from its stretch's start: samples
    // only balance the ranges).
    let merged_enc = set.merged.as_ref().map(|_| encoder(&cfg, &set.header));
    let count = count.max(1);
    let c0 = split.start >> 16;
    let c1 = split.end.map_or(heads[split.input].2, |e| e >> 16).max(c0);
    let indexed = bsplit::index_starts(path);
    let mut starts = vec![split.start];
    for j in 1..SAMPLE_STRETCHES {
        let at = c0 + (c1 - c0) * j / SAMPLE_STRETCHES;
        if at <= c0 {
            continue;
        }
        let near = bsplit::start_near(path, header.n_ref(), at, indexed.as_deref(), &pool);
        if let Ok(Some(v)) = near {
            let last = *starts.last().unwrap_or(&0);
            if v > last && split.end.is_none_or(|e| v < e) {
                starts.push(v);
            }
        }
    }
    let per = count.div_ceil(starts.len());
    let mut kept: Vec<Splitter> = Vec::new();
    for (j, &from) in starts.iter().enumerate() {
        let end = starts.get(j + 1).copied().or(split.end);
        let got = (|| -> Result<Vec<Splitter>> {
            let opts = ScanOptions {
                batch_bytes: SAMPLE_BATCH,
                read_ahead: ReadAhead::Peek,
                ..ScanOptions::default()
            };
            let (name, scanner) = open_scanner(path, from, end, opts, &pool)?;
            let dec = decoder(&name, &cfg, &header, &enc, usize::MAX);
            let (merged, merged_enc) = (set.merged.clone(), merged_enc.clone());
            let producer_merged = set.merged.clone();
            let (input, ordinal) = (split.input, split.ordinal);
            let mut running = None;
            // One batch ahead: reading stops once `per` are taken, mostly
            // within the first batch.
            let depth = 1;
            let (mut batches, _) = crate::input::spawn_scanned(
                &name,
                Scanner::Bam(Box::new(scanner)),
                &pool,
                "sample read",
                depth,
                move |b: &RawBatch| match &producer_merged {
                    Some(m) => m.running_max(input, b, &mut running),
                    None => Vec::new(),
                },
                move |raw: &RawBatch, ties: Vec<u64>| -> Result<Vec<Splitter>> {
                    let mut out = Vec::new();
                    let (mut scratch, mut merged_key) = (Vec::new(), Vec::new());
                    let mut i = 0;
                    dec.decode(
                        raw,
                        |key, rec| {
                            if out.len() < per {
                                let key = match (&merged, &merged_enc) {
                                    (Some(m), Some(menc)) => {
                                        m.rekey(
                                            input,
                                            rec,
                                            &mut scratch,
                                            menc,
                                            ties[i],
                                            &mut merged_key,
                                            &mut |_, _, _| {},
                                        )?;
                                        &merged_key[..]
                                    }
                                    _ => key,
                                };
                                out.push(Splitter {
                                    key: key.to_vec(),
                                    split: ordinal,
                                    position: raw.voffsets[i],
                                });
                            }
                            i += 1;
                            Ok(())
                        },
                        |_| {},
                    )?;
                    Ok(out)
                },
            )?;
            let mut out = Vec::new();
            while out.len() < per {
                let Some(r) = batches.next_result() else {
                    break;
                };
                out.extend(r??);
            }
            out.truncate(per);
            Ok(out)
        })();
        match got {
            Ok(v) => kept.extend(v),
            // The split's own start: its error is the split's.
            Err(e) if j == 0 => return Err(e),
            Err(_) => {}
        }
    }
    let n = kept.len();
    let picked: Vec<Vec<u8>> = if n <= count {
        kept.iter().map(Splitter::encode).collect()
    } else {
        (0..count).map(|j| kept[j * n / count].encode()).collect()
    };
    Ok(picked)
}

/// R - 1 skew-safe splitters (encoded) from every split's samples.
pub fn splitters(samples: &[Vec<u8>], partitions: usize) -> Result<Vec<Vec<u8>>> {
    let decoded = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Splitter::decode(s).ok_or_else(|| {
                Error::Refused(format!(
                    "sample {i} is {} bytes, shorter than its tie-break fields",
                    s.len()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(splitters_from_samples(decoded, partitions)
        .iter()
        .map(Splitter::encode)
        .collect())
}

fn decode_splitters(splitters: &[Vec<u8>]) -> Result<Vec<Splitter>> {
    splitters
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Splitter::decode(s).ok_or_else(|| {
                Error::Refused(format!("splitter {i} is {} bytes, too short", s.len()))
            })
        })
        .collect()
}

/// One batch of a map task, decoded on the pool.
struct Decoded {
    batch: Batch,
    tally: Tally,
    warnings: Vec<String>,
    /// Several inputs: tags dropped in translation ((tag and ID, message)).
    unknown_tags: Vec<(Vec<u8>, String)>,
    /// The virtual offset of the batch's last record.
    last: Option<u64>,
    /// The records' read ends, when the map collects the split's
    /// duplicate-marking share.
    ends: Option<crate::markdup::BatchEnds>,
}

/// The reach of split `split` of several inputs: the largest coordinate
/// merge key (a `u64`, in the merged header's terms) of its records, or
/// `None` when it has none. A map needs the largest reach of the earlier
/// splits of its input (its `prior`): the tie-break of `alnsort sort`
/// with several inputs depends on it (see [`MergedInputs`]). Reads the
/// whole split (inflating it and walking its records, no more); with one
/// input it reads nothing and answers `None`.
pub fn reach(inputs: &[PathBuf], split: &SplitSpec, threads: usize) -> Result<Option<u64>> {
    let pool = pool(threads)?;
    let set = headers(inputs, &pool)?;
    let path = split_input(inputs, split)?;
    let Some(m) = &set.merged else {
        return Ok(None);
    };
    let (name, scanner) =
        open_scanner(path, split.start, split.end, ScanOptions::default(), &pool)?;
    // The running maximum is the reading thread's ordered state; the pool
    // jobs have nothing to do.
    let (m, input) = (Arc::clone(m), split.input);
    let running = Arc::new(std::sync::Mutex::new(None));
    let seen = Arc::clone(&running);
    let depth = pool.current_num_threads() * 2 + 2;
    let (mut batches, _) = crate::input::spawn_scanned(
        &name,
        Scanner::Bam(Box::new(scanner)),
        &pool,
        "reach read",
        depth,
        move |b: &RawBatch| {
            m.running_max(
                input,
                b,
                &mut seen.lock().unwrap_or_else(|e| e.into_inner()),
            );
        },
        |_, ()| Ok(()),
    )?;
    while let Some(r) = batches.next_result() {
        r??;
    }
    let reach = *running.lock().unwrap_or_else(|e| e.into_inner());
    Ok(reach)
}

/// The map task of split `split`: its records sorted and cut into
/// `splitters.len() + 1` framed blocks. With several inputs, `prior` is
/// the largest [`reach`] of the earlier splits of the split's input
/// (`None` for its first split).
pub fn map(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    prior: Option<u64>,
) -> Result<MapOutput> {
    map_with_share(inputs, split, splitters, options, prior, None).map(|(out, _)| out)
}

/// [`map`] of split `split` of one input with `--markdup` among the
/// options, which also gives the split's duplicate-marking share as
/// [`crate::stages_markdup::collect`] gives it (the same bytes), from the
/// records the map reads and decodes (one read, one decode): fragment
/// ends cut into `end_buckets`, mate halves into `name_buckets`.
pub fn map_collecting(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    end_buckets: usize,
    name_buckets: usize,
) -> Result<(MapOutput, crate::stages_markdup::SplitShare)> {
    if inputs.len() != 1 {
        return Err(Error::Refused(format!(
            "map_collecting takes one input ({} given): a map of several inputs needs its prior \
             (map_collecting_after)",
            inputs.len()
        )));
    }
    map_collecting_after(
        inputs,
        split,
        splitters,
        options,
        None,
        end_buckets,
        name_buckets,
    )
}

/// [`map_collecting`] of split `split` of one of several inputs, `prior`
/// as [`map`] takes it.
pub fn map_collecting_after(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    prior: Option<u64>,
    end_buckets: usize,
    name_buckets: usize,
) -> Result<(MapOutput, crate::stages_markdup::SplitShare)> {
    let (out, share) = map_with_share(
        inputs,
        split,
        splitters,
        options,
        prior,
        Some((end_buckets, name_buckets)),
    )?;
    let share = share.ok_or_else(|| {
        Error::Internal("the map collected no duplicate-marking share".to_string())
    })?;
    Ok((out, share))
}

/// [`map`], and with `collect` (end buckets, name buckets) the split's
/// duplicate-marking share ([`map_collecting`]).
fn map_with_share(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    prior: Option<u64>,
    collect: Option<(usize, usize)>,
) -> Result<(MapOutput, Option<crate::stages_markdup::SplitShare>)> {
    let cfg = stage_config(options, Path::new("stage.bam"), None)?;
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    split_input(inputs, split)?;
    let header = Arc::new(set.heads[split.input].0.clone());
    let enc = encoder(&cfg, &header);
    // Several inputs: records are translated and keyed in the merged
    // header's terms, with the tie-break suffix.
    let merged = set.merged.clone();
    let merged_enc = encoder(&cfg, &set.header);
    let kind = match merged {
        Some(_) => KeyKind::Variable,
        None => key_kind(&enc),
    };
    let mut partitioner = Partitioner::new(decode_splitters(splitters)?, split.ordinal)?;
    // --markdup: each record carries its place in the input to the reduce
    // (crate::stages_markdup).
    let markdup = cfg.markdup.is_some();
    let split_ordinal = split.ordinal;
    // With `collect`: the split's duplicate-marking share, from the same
    // records (as crate::stages_markdup::collect reads them: one input,
    // the marker's messages counting records from the split's start).
    let mut marker = match (collect, &cfg.markdup) {
        (None, _) => None,
        (Some(_), None) => return Err(Error::Refused(
            "the map collects the duplicate-marking share only with --markdup among the options"
                .to_string(),
        )),
        (Some(buckets), Some(md)) => {
            if splitters.len() + 1 > crate::stages_markdup::dist::MAX_RANGES {
                return Err(Error::Refused(format!(
                    "the map collects the duplicate-marking share for at most {} ranges, not {}",
                    crate::stages_markdup::dist::MAX_RANGES,
                    splitters.len() + 1
                )));
            }
            let file = crate::stages_markdup::split_file(inputs, split)?;
            let budget = crate::markdup_budget(&cfg)?;
            Some(crate::stages_markdup::split_marker(
                inputs, &set, split, md, &file, budget, buckets,
            )?)
        }
    };
    let ends_spec = marker.as_ref().map(|m| m.ends_spec());
    let debris = Debris::default();
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort-map", &debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    let result = (|| {
        let sort_cfg = SortConfig {
            memory_budget: cfg.memory_budget as usize,
            temp_dir: tmp.path().to_path_buf(),
            key_kind: kind,
            max_open_runs: 0,
            merge_partition_bytes: 0,
            chunk_fill: Default::default(),
        };
        let mut sorter = Sorter::new(sort_cfg, Arc::clone(&pool))?;
        let limit = sorter.plan().record_limit;
        let path = split_input(inputs, split)?;
        let opts = ScanOptions {
            record_limit: limit,
            ..ScanOptions::default()
        };
        let (name, scanner) = open_scanner(path, split.start, split.end, opts, &pool)?;
        let dec = decoder(&name, &cfg, &header, &enc, limit);
        let empty = partitioner.tally();
        // The split's own reach (the reading thread keeps the running
        // maximum: each record's tie-break needs every record before it).
        let own_reach = Arc::new(std::sync::Mutex::new(None));
        let producer_merged = merged.clone();
        let producer_reach = Arc::clone(&own_reach);
        let input = split.input;
        // Batches are decoded, keyed and copied into sort batches on the
        // pool (as `alnsort sort` reads), in input order.
        let depth = pool.current_num_threads() * 2 + 2;
        let (mut batches, _) = crate::input::spawn_scanned(
            &name,
            Scanner::Bam(Box::new(scanner)),
            &pool,
            "map read",
            depth,
            move |b: &RawBatch| match &producer_merged {
                Some(m) => {
                    let mut own = producer_reach.lock().unwrap_or_else(|e| e.into_inner());
                    let mut v = m.running_max(input, b, &mut own);
                    if let Some(p) = prior {
                        v.iter_mut().for_each(|t| *t = (*t).max(p));
                    }
                    v
                }
                None => Vec::new(),
            },
            move |raw: &RawBatch, ties: Vec<u64>| -> Result<Decoded> {
                let mut ends = ends_spec
                    .as_ref()
                    .map(|spec| crate::markdup::BatchEnds::new(spec.clone()));
                let mut tally = empty.clone();
                let observe = tally.is_needed();
                let mut batch = Batch::for_input(kind, raw.bytes(), raw.voffsets.len());
                let mut warnings = Vec::new();
                let mut unknown_tags = Vec::new();
                let (mut scratch, mut merged_key) = (Vec::new(), Vec::new());
                let mut i = 0;
                dec.decode(
                    raw,
                    |key, rec| {
                        // The marker takes the record as its input has it
                        // (it translates read groups into the merged
                        // header itself: `Marker::for_split_of_several`).
                        let as_read = rec;
                        let (key, rec) = match &merged {
                            Some(m) => {
                                let mut unknown = |tag: [u8; 2], id: &[u8], read: &[u8]| {
                                    let mut what = tag.to_vec();
                                    what.extend_from_slice(id);
                                    unknown_tags.push((
                                        what,
                                        crate::merge::unknown_tag_warning(&tag, id, read),
                                    ))
                                };
                                let rec = m.rekey(
                                    input,
                                    rec,
                                    &mut scratch,
                                    &merged_enc,
                                    ties[i],
                                    &mut merged_key,
                                    &mut unknown,
                                )?;
                                (&merged_key[..], rec)
                            }
                            None => (key, rec),
                        };
                        if observe {
                            tally.observe(key, raw.voffsets[i]);
                        }
                        if let Some(e) = &mut ends {
                            e.add_fields(as_read);
                        }
                        let taken = if markdup {
                            let place = crate::stages_markdup::packed(
                                split_ordinal,
                                raw.first_record + i as u64,
                            );
                            batch.try_push_parts(key, rec, &crate::markdup::ordinal_suffix(place))
                        } else {
                            batch.try_push(key, rec)
                        };
                        i += 1;
                        if !taken {
                            return Err(
                                "more record bytes than one batch can address (4 GiB)".into()
                            );
                        }
                        Ok(())
                    },
                    |w| warnings.push(w),
                )?;
                let last = raw.voffsets.last().copied();
                Ok(Decoded {
                    batch,
                    tally,
                    warnings,
                    unknown_tags,
                    last,
                    ends,
                })
            },
        )?;
        let mut records = 0u64;
        let mut last = None;
        let mut reported = std::collections::HashSet::new();
        while let Some(d) =
            crate::input::next_batch(&mut batches, &name, records + 1, |d| &d.warnings)
        {
            let d = d?;
            for (what, w) in d.unknown_tags {
                if reported.insert(what) {
                    eprintln!("{w}");
                }
            }
            partitioner.add(&d.tally);
            if let (Some(m), Some(e)) = (&mut marker, &d.ends) {
                m.push(e)?;
            }
            records += d.batch.len() as u64;
            sorter.push_batch(d.batch)?;
            last = d.last.or(last);
        }
        let mut merged = sorter.finish()?;
        // Into the memory of earlier maps' blocks where the caller gave
        // it back ([`recycle_block`]).
        let mut writers = BLOCK_BUFFERS.writers(partitioner.ranges(), cfg.memory_budget as usize);
        let mut assigner = partitioner.clone().into_assigner();
        // Collecting the share: the range each record goes to, for each
        // reduce's slice of the decision (crate::stages_markdup::Marks).
        let mut ranges = match &marker {
            Some(_) => vec![0u8; records as usize * crate::stages_markdup::dist::RANGE_BYTES],
            None => Vec::new(),
        };
        let mut out = 0u64;
        while let Some((key, rec)) = merged.next_entry()? {
            let r = assigner.range_of(key);
            if marker.is_some() {
                let (_, index) =
                    crate::stages_markdup::dist::split_of(crate::markdup::record_ordinal(rec)?);
                if !crate::stages_markdup::dist::set_range(&mut ranges, index, r) {
                    return Err(Error::Internal(format!(
                        "record {index} of the split sorted into range {r}, beyond the split's {records} records or {} ranges",
                        crate::stages_markdup::dist::MAX_RANGES
                    )));
                }
            }
            writers[r].push(key, rec);
            out += 1;
        }
        if out != records {
            return Err(Error::Internal(format!(
                "read {records} records but the sort gave {out}"
            )));
        }
        let end = match split.end {
            Some(end) => bsplit::proven_end(
                &inputs[split.input],
                split.start,
                last,
                end,
                Arc::clone(&pool),
            )?,
            None => None,
        };
        let reach = *own_reach.lock().unwrap_or_else(|e| e.into_inner());
        let share = match marker {
            Some(m) => {
                let mut share = m.finish_split()?;
                share.ranges = ranges;
                Some(share)
            }
            None => None,
        };
        Ok((
            MapOutput {
                blocks: writers.into_iter().map(BlockWriter::finish).collect(),
                records,
                end,
                reach,
            },
            share,
        ))
    })();
    drop(tmp);
    result
}

fn index_format(kind: IndexKind) -> IndexFormat {
    match kind {
        IndexKind::Csi => IndexFormat::DEFAULT_CSI,
        IndexKind::Bai => IndexFormat::Bai,
    }
}

/// A scanner over the records of the headerless, EOF-less BAM part at
/// `path` (read as if its EOF block followed it).
fn part_scanner(
    path: &Path,
    opts: ScanOptions,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<BamScanner> {
    let name: Arc<str> = path.display().to_string().into();
    let file = File::open(path).with_context(|| format!("{name}: cannot open"))?;
    let stream = file.chain(std::io::Cursor::new(EOF_BLOCK));
    let reader = ParallelReader::new(stream, Arc::clone(pool), Vec::new())
        .with_context(|| format!("{name}: starting the reader"))?;
    Ok(BamScanner::new(name, reader, opts))
}

/// Hands the memory of a block [`map`] returned back for the blocks of
/// later maps in this process, once the block has been copied where it
/// goes (see `alnsort_sort::stages::BlockBuffers`: bounded by the last
/// map's memory budget; freed when over it).
pub fn recycle_block(block: Vec<u8>) {
    BLOCK_BUFFERS.give_back(block);
}

/// Path of the part index of the part at `part`.
pub fn part_index_path(part: &Path) -> PathBuf {
    let mut p = part.as_os_str().to_owned();
    p.push(".idx");
    PathBuf::from(p)
}

/// Writes `bytes` to `dest` atomically (a temp file renamed into place).
pub fn write_atomic(dest: &Path, bytes: &[u8], debris: &Debris) -> Result<()> {
    let (pending, mut f) = PendingFile::create(dest, debris)
        .with_context(|| format!("{}: cannot create", dest.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("{}: cannot write", dest.display()))?;
    pending
        .commit()
        .with_context(|| format!("{}: cannot rename into place", dest.display()))
}

/// The reduce task of range `range_index` (of `partitions`): `blocks`
/// (that range's block of every split, in split order) merged into the
/// headerless, EOF-less part `part`, and its part index `part.idx` when
/// `index` is set. Both appear only when complete. The blocks are read in
/// place (a driver can hand over its buffers without a copy).
pub fn reduce(
    inputs: &[PathBuf],
    blocks: &[&[u8]],
    part: &Path,
    range_index: usize,
    partitions: usize,
    options: &SortOptions,
    index: bool,
) -> Result<ReduceOutput> {
    reduce_marked(
        inputs,
        blocks,
        part,
        range_index,
        partitions,
        options,
        index,
        None,
    )
}

/// [`reduce`] of maps that ran with `--markdup`: each record written as
/// `marks` decide (`crate::stages_markdup`). [`ReduceOutput::records`]
/// counts the records read from the blocks, removed ones included;
/// `marked` the duplicates among them.
#[allow(clippy::too_many_arguments)]
pub fn reduce_marked(
    inputs: &[PathBuf],
    blocks: &[&[u8]],
    part: &Path,
    range_index: usize,
    partitions: usize,
    options: &SortOptions,
    index: bool,
    marks: Option<&crate::stages_markdup::Marks>,
) -> Result<ReduceOutput> {
    if range_index >= partitions.max(1) {
        return Err(Error::Refused(format!(
            "range {range_index} is not one of the {partitions} ranges"
        )));
    }
    let cfg = stage_config(options, Path::new("stage.bam"), None)?;
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    let header = Arc::clone(&set.header);
    let enc = encoder(&cfg, &header);
    // Several inputs: keys end with the tie-break suffix.
    let (kind, tie) = match set.merged {
        Some(_) => (KeyKind::Variable, TIE_LEN),
        None => (key_kind(&enc), 0),
    };
    let names = (0..blocks.len())
        .map(|s| format!("block of range {range_index} from split {s}"))
        .collect();
    let mut merged = merge_blocks(blocks, names, kind)?;
    if marks.is_none() && cfg.markdup.is_some() {
        bail!(
            Refused,
            "the maps ran with --markdup: the reduce needs the duplicate decisions"
        );
    }
    let debris = Debris::default();
    let index_path = index.then(|| part_index_path(part));
    let mut out = Output::part(
        &cfg,
        part,
        index_path.as_deref(),
        Arc::clone(&header),
        Arc::clone(&pool),
        &debris,
    )?;
    // Duplicates met by this reduce (a `Marks` may serve several reduces
    // one after another).
    let seen_before = marks.map_or(0, |m| m.decisions.seen_marked());
    let mut scratch = Vec::new();
    let mut marked_buf = Vec::new();
    let mut read = 0u64;
    while let Some((key, rec)) = merged.next_entry()? {
        let key = &key[..key.len().saturating_sub(tie)];
        read += 1;
        let rec = match marks {
            Some(m) => match m.apply(rec, &mut marked_buf)? {
                Some(r) => r,
                None => continue,
            },
            None => rec,
        };
        out.write_record(enc.finish_record(key, rec, &mut scratch))?;
    }
    if let Some(m) = marks {
        m.check_complete()
            .with_context(|| format!("range {range_index}"))?;
    }
    let written = out.records();
    let done = out.finish_releasing((), || {
        if marks.is_none() && read != written {
            bail!(Internal, "merged {read} records but wrote {written}");
        }
        Ok(())
    })?;
    Ok(ReduceOutput {
        records: read,
        bytes: done.bytes_written,
        marked: marks.map_or(0, |m| m.decisions.seen_marked() - seen_before),
    })
}

/// Whether the first record of the first non-empty part is unplaced
/// (samtools' minimiser order then writes other @HD values); true when
/// every part is empty.
fn first_record_unplaced(
    parts: &[PathBuf],
    format: Format,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<bool> {
    for part in parts {
        let size = std::fs::metadata(part)
            .with_context(|| format!("{}: cannot read the part", part.display()))?
            .len();
        if size == 0 {
            continue;
        }
        return Ok(match format {
            Format::Bam => {
                let mut s = part_scanner(
                    part,
                    ScanOptions {
                        batch_bytes: 1,
                        end: RangeEnd::Records(1),
                        ..ScanOptions::default()
                    },
                    pool,
                )?;
                match s.next_batch()? {
                    // `RawBatch::records`: the scanner leaves records in
                    // the inflated blocks, not in `data`.
                    Some(b) => match b.records().next() {
                        Some((rec, _)) => RecordRef::with_block_size(rec).ref_id() < 0,
                        None => continue,
                    },
                    None => continue,
                }
            }
            Format::Sam | Format::SamBgzf => {
                let bytes = std::fs::read(part)?;
                let text = if format == Format::SamBgzf {
                    alnsort_bgzf::decompress_all(&bytes)?
                } else {
                    bytes
                };
                let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
                line.split(|&b| b == b'\t').nth(2) == Some(b"*")
            }
        });
    }
    Ok(true)
}

/// The header bytes of the output (BGZF blocks for BAM and SAM.gz): the
/// writer's own header form, kept in memory for [`concatenate`] to put
/// before the parts (no records, no file: not an [`Output`]).
fn header_bytes(
    header: &Arc<Header>,
    cfg: &Config,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<Vec<u8>> {
    let options = WriterOptions {
        format: crate::output::hts_format(cfg),
        level: CompressionLevel::new(cfg.level).context("compression level")?,
        header: true,
        eof: false,
        index: None,
    };
    let w = Writer::new(Vec::new(), Arc::clone(header), options, Arc::clone(pool))?;
    Ok(w.finish()?.inner)
}

/// Copies `header`, then `parts` in order, then the EOF block (BGZF forms)
/// into `dest` atomically; returns each part's start offset and the EOF
/// block's offset.
fn concatenate(
    dest: &Path,
    header: &[u8],
    parts: &[PathBuf],
    bgzf: bool,
    debris: &Debris,
) -> Result<(Vec<u64>, u64, PendingFile)> {
    let (pending, file) = PendingFile::create(dest, debris)
        .with_context(|| format!("{}: cannot create", dest.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let wctx = || format!("{}: cannot write", dest.display());
    out.write_all(header).with_context(wctx)?;
    let mut at = header.len() as u64;
    let mut starts = Vec::with_capacity(parts.len());
    for part in parts {
        starts.push(at);
        let mut f = File::open(part)
            .with_context(|| format!("{}: cannot open the part", part.display()))?;
        at += std::io::copy(&mut f, &mut out).with_context(wctx)?;
    }
    let eof = at;
    if bgzf {
        out.write_all(&EOF_BLOCK).with_context(wctx)?;
    }
    let file = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(wctx)?;
    file.sync_all().with_context(wctx)?;
    Ok((starts, eof, pending))
}

/// Assembles the output from `parts` (in range order): header (the only
/// input's or the merged one, edited as `alnsort sort` edits it) + parts + one EOF block;
/// the index merged from the parts' indexes. With `sharded`, `output` is a
/// directory of complete files instead, `part-NNNNN.<ext>`, each with its
/// own index when one is asked for. `pg_argv` is the command line the @PG
/// line records (unless the options say `--no-PG`).
pub fn assemble(
    inputs: &[PathBuf],
    parts: &[PathBuf],
    output: &Path,
    options: &SortOptions,
    index: Option<IndexKind>,
    sharded: bool,
    pg_argv: Option<&[String]>,
) -> Result<AssembleOutput> {
    let stand_in;
    let cfg_out = if sharded {
        stand_in = output.join("part.bam");
        &stand_in
    } else {
        output
    };
    let mut cfg = stage_config(options, cfg_out, index)?;
    // The configuration's warnings (an index asked of an order that has
    // none), once per sort: the other stages resolve the same options
    // but leave the warning to the assemble, which decides the index.
    cfg.print_warnings();
    if cfg.pg.is_some() {
        // The @PG command line: the one given, or `alnsort sort` with these
        // options over the inputs.
        let line = match pg_argv {
            Some(argv) => argv.join(" "),
            None => {
                let mut words: Vec<String> = vec![options.command_line.clone()];
                words.extend(["-o".into(), output.display().to_string()]);
                words.extend(inputs.iter().map(|p| p.display().to_string()));
                words.join(" ")
            }
        };
        cfg.pg = Some(line.replace('\t', " "));
    }
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    let format = crate::output::hts_format(&cfg);
    let mut header = (*set.header).clone();
    let all_unplaced = if cfg.hd_all_unplaced.is_some() {
        first_record_unplaced(parts, format, &pool)?
    } else {
        false
    };
    crate::edit_header(&mut header, &cfg, all_unplaced);
    let header = Arc::new(header);
    let head = header_bytes(&header, &cfg, &pool)?;
    let bgzf = format != Format::Sam;
    let ref_lengths: Vec<u64> = header.refs().iter().map(|r| r.len).collect();
    let read_idx = |part: &Path| -> Result<Vec<u8>> {
        let p = part_index_path(part);
        std::fs::read(&p).with_context(|| {
            format!(
                "{}: cannot read the part index (reduce with the index option)",
                p.display()
            )
        })
    };
    let debris = Debris::default();
    if !sharded {
        let (starts, eof, pending) = concatenate(output, &head, parts, bgzf, &debris)?;
        let mut index_path = None;
        if let Some(target) = &cfg.index {
            if format != Format::Bam {
                return Err(Error::Refused(
                    "an index can only be built for BAM output".to_string(),
                ));
            }
            let idx: Vec<Vec<u8>> = parts.iter().map(|p| read_idx(p)).collect::<Result<_>>()?;
            let list: Vec<(&[u8], u64)> = idx.iter().map(|d| d.as_slice()).zip(starts).collect();
            let file = alnsort_index::merge_part_indexes(
                index_format(target.kind),
                &ref_lengths,
                &list,
                eof,
            )
            .context("merging the parts' indexes")?;
            write_atomic(&target.path, &file.file_bytes(), &debris)?;
            index_path = Some(target.path.clone());
        }
        pending
            .commit()
            .with_context(|| format!("{}: cannot rename into place", output.display()))?;
        let bytes = std::fs::metadata(output)?.len();
        return Ok(AssembleOutput {
            bytes,
            index: index_path,
            files: Vec::new(),
        });
    }
    // Sharded: a directory made beside the destination, renamed into place.
    if output.exists() {
        return Err(Error::Refused(format!(
            "{}: already exists; the sharded output must be a new directory",
            output.display()
        )));
    }
    let parent = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let work = parent.join(format!(".{stem}.alnsort-{}.tmp", std::process::id()));
    debris.add(work.clone());
    let result = (|| {
        std::fs::create_dir(&work)
            .with_context(|| format!("{}: cannot create the directory", work.display()))?;
        let ext = match cfg.format {
            OutFormat::Sam => "sam",
            OutFormat::SamGz => "sam.gz",
            _ => "bam",
        };
        let mut files = Vec::new();
        let mut bytes = 0u64;
        for (i, part) in parts.iter().enumerate() {
            let name = format!("part-{i:05}.{ext}");
            let (starts, eof, pending) = concatenate(
                &work.join(&name),
                &head,
                std::slice::from_ref(part),
                bgzf,
                &debris,
            )?;
            if let Some(target) = &cfg.index {
                if format != Format::Bam {
                    return Err(Error::Refused(
                        "an index can only be built for BAM output".to_string(),
                    ));
                }
                let idx = read_idx(part)?;
                let file = alnsort_index::merge_part_indexes(
                    index_format(target.kind),
                    &ref_lengths,
                    &[(idx.as_slice(), starts[0])],
                    eof,
                )
                .context("indexing a shard")?;
                let suffix = match target.kind {
                    IndexKind::Csi => "csi",
                    IndexKind::Bai => "bai",
                };
                write_atomic(
                    &work.join(format!("{name}.{suffix}")),
                    &file.file_bytes(),
                    &debris,
                )?;
            }
            pending.commit()?;
            bytes += eof + if bgzf { EOF_BLOCK.len() as u64 } else { 0 };
            files.push(output.join(name));
        }
        std::fs::rename(&work, output).with_context(|| {
            format!(
                "{}: cannot rename the shard directory into place",
                output.display()
            )
        })?;
        debris.forget(&work);
        Ok(AssembleOutput {
            bytes,
            index: None,
            files,
        })
    })();
    if result.is_err() {
        debris.remove_all();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use alnsort_sort::loser::{LoserTree, MergeSource};

    /// One input's records (BAM, framed) for the loser tree, keyed by
    /// the coordinate merge key `alnsort sort IN1 IN2 ...` merges by: the
    /// record translated into the merged header, then keyed.
    struct Source {
        records: Vec<Vec<u8>>,
        input: usize,
        at: usize,
        key: Vec<u8>,
        rec: [u8; 16],
        translation: Translation,
        encoder: KeyEncoder,
    }

    impl Source {
        fn load(&mut self) {
            if let Some(r) = self.records.get(self.at) {
                let mut out = Vec::new();
                let r = if self.translation.apply(r, &mut out, &mut |_, _, _| {}) {
                    &out[..]
                } else {
                    r
                };
                self.encoder
                    .encode(RecordRef::with_block_size(r), &mut self.key)
                    .unwrap();
                self.rec[..8].copy_from_slice(&(self.input as u64).to_be_bytes());
                self.rec[8..].copy_from_slice(&(self.at as u64).to_be_bytes());
            }
        }
    }

    impl MergeSource for Source {
        fn key(&self) -> Option<&[u8]> {
            (self.at < self.records.len()).then_some(&self.key[..])
        }
        fn record(&self) -> &[u8] {
            &self.rec
        }
        fn advance(&mut self) -> alnsort_sort::Result<()> {
            self.at += 1;
            self.load();
            Ok(())
        }
    }

    #[test]
    fn the_tie_suffix_orders_equal_keys_as_the_merge_of_the_inputs_does() {
        // `alnsort sort IN1 IN2 ...` merges unsorted inputs with a loser
        // tree on coordinate keys in the merged header's terms, then sorts
        // stably: records of equal sort keys keep the merge's order. The
        // maps' tie suffix (`MergedInputs::running_max`) with (input,
        // position) must give that order, with headers whose @SQ lines
        // differ in order and in number.
        let texts = [
            "@SQ\tSN:a\tLN:100\n@SQ\tSN:b\tLN:100",
            "@SQ\tSN:b\tLN:100\n@SQ\tSN:c\tLN:100\n@SQ\tSN:a\tLN:100",
            "@SQ\tSN:c\tLN:100",
        ];
        let headers: Vec<Header> = texts
            .iter()
            .map(|t| alnsort_bam::header::parse_sam_header(t.lines().map(str::as_bytes)).unwrap())
            .collect();
        let paths: Vec<PathBuf> = (0..3)
            .map(|i| PathBuf::from(format!("in{i}.bam")))
            .collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for round in 0..150 {
            let n = 2 + round % 2;
            let heads: Vec<(Header, u64, u64)> =
                headers[..n].iter().map(|h| (h.clone(), 0, 0)).collect();
            let set = merge_heads(&paths[..n], heads).unwrap();
            let m = set.merged.as_ref().unwrap();
            let mut sources = Vec::new();
            let mut want = Vec::new();
            for (input, (h, _, _)) in set.heads.iter().enumerate() {
                let lookup = h.ref_lookup();
                let (mut framed, mut voffsets) = (Vec::new(), Vec::new());
                for _ in 0..next(30) {
                    let t = next(h.n_ref() as u64 + 1);
                    let (rname, flag) = match t as usize {
                        t if t == h.n_ref() => ("*".to_string(), 4 | (next(2) as u16 * 16)),
                        t => (
                            String::from_utf8_lossy(&h.refs()[t].name).into_owned(),
                            next(2) as u16 * 16,
                        ),
                    };
                    let pos = if rname == "*" { 0 } else { 1 + next(4) };
                    let line = format!("r\t{flag}\t{rname}\t{pos}\t0\t*\t*\t0\t0\t*\t*");
                    alnsort_bam::sam_parse::parse_sam_record(
                        line.as_bytes(),
                        h,
                        &lookup,
                        &mut framed,
                    )
                    .unwrap();
                    voffsets.push(voffsets.len() as u64);
                }
                let mut raw = RawBatch::framed(framed);
                raw.voffsets = voffsets;
                let mut running = None;
                let ties = m.running_max(input, &raw, &mut running);
                for (at, tie) in ties.iter().enumerate() {
                    want.push((*tie, input, at));
                }
                let records: Vec<Vec<u8>> = raw.records().map(|(r, _)| r.to_vec()).collect();
                let mut s = Source {
                    records,
                    input,
                    at: 0,
                    key: Vec::new(),
                    rec: [0; 16],
                    translation: m.translations[input].clone(),
                    encoder: KeyEncoder::new(SortOrder::Coordinate, set.header.n_ref(), &[]),
                };
                s.load();
                sources.push(s);
            }
            let mut tree = LoserTree::new(sources, false);
            let mut merged = Vec::new();
            while let Some((_, rec)) = tree.peek() {
                let input = u64::from_be_bytes(rec[..8].try_into().unwrap()) as usize;
                let at = u64::from_be_bytes(rec[8..].try_into().unwrap()) as usize;
                merged.push((input, at));
                tree.pop().unwrap();
            }
            want.sort();
            let want: Vec<(usize, usize)> = want.into_iter().map(|(_, i, a)| (i, a)).collect();
            assert_eq!(merged, want, "round {round}");
        }
    }
}
