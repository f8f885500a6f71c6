//! The distributed sort's plan and the plumbing its tasks share: split, sample, splitters, reach, the stage configuration, the inputs' merged headers and translations.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Context, Error, Result};
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::{HeaderMerger, MergeOptions, Translation};
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_bam::reader::{BamScanner, Decoder, RangeEnd, RawBatch, ScanOptions, Scanner};
use alnsort_bam::{split as bsplit, RecordRef};
use alnsort_bgzf::ReadAhead;
use alnsort_sort::batch::Batch;
use alnsort_sort::stages::{splitters_from_samples, Splitter, Tally};

use crate::config::{Config, IndexKind};
use crate::io::cleanup::{Debris, PendingFile};
use crate::options::sort::{OutFormat, SortOptions};

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
    let cfg = crate::config::resolve(&a)?;
    if cfg.format == OutFormat::Cram {
        return Err(Error::Refused(
            "CRAM output is not supported by the distributed stages yet".to_string(),
        ));
    }
    if cfg.format == OutFormat::Parquet && cfg.hd_all_unplaced.is_some() {
        // The header of that order depends on the first record of the
        // whole output, which no reduce sees; a Parquet part carries the
        // header in its own files.
        return Err(Error::Refused(
            "Parquet output (-O parquet) of the distributed stages is refused in minimiser order: \
             its header depends on records no single reduce sees"
                .to_string(),
        ));
    }
    if cfg.samtools_markdup.is_some() {
        return Err(Error::Refused(
            "--markdup=samtools is not supported by the distributed stages: they mark \
             duplicates as Picard does (--markdup); run alnsort sort --markdup=samtools on one \
             machine"
                .to_string(),
        ));
    }
    Ok(cfg)
}

pub(crate) fn pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    crate::run::resources::worker_pool(threads, "alnsort-stage")
}

/// The inputs of one sort: each input's header, first-record offset and
/// size (`heads`), the output's header, and with several inputs how each
/// input's records translate into it.
pub(crate) struct InputSet {
    pub(crate) heads: Vec<(Header, u64, u64)>,
    /// The only input's header, or the merged one (`alnsort sort IN1 IN2
    /// ...`'s: `samtools merge`'s rules, clash suffixes seeded with 0).
    pub(crate) header: Arc<Header>,
    pub(crate) merged: Option<Arc<InputTranslations>>,
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
pub(crate) struct InputTranslations {
    pub(crate) translations: Vec<Translation>,
    /// Coordinate keys in the merged header's terms (the merge's order).
    pub(crate) coordinate: KeyEncoder,
    pub(crate) warnings: Vec<String>,
}

impl InputTranslations {
    /// The coordinate merge key of `rec`, a record of input `input`.
    fn merge_key(&self, input: usize, rec: RecordRef<'_>) -> u64 {
        let tid = self.translations[input].ref_id(rec.ref_id());
        self.coordinate.coordinate_of(tid, rec.pos(), rec.flag())
    }

    /// The running maximum of the merge key over the records of `raw` (a
    /// batch of input `input`), each record's value in order, starting
    /// from `running` (which ends at the batch's maximum). A record too
    /// short to hold the fields counts as nothing; its decoding fails.
    pub(crate) fn running_max(
        &self,
        input: usize,
        raw: &RawBatch,
        running: &mut Option<u64>,
    ) -> Vec<u64> {
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
    pub(crate) fn rekey<'a>(
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
/// [`InputTranslations`]).
pub(crate) const TIE_LEN: usize = 8;

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
pub(crate) fn merge_heads(inputs: &[PathBuf], heads: Vec<(Header, u64, u64)>) -> Result<InputSet> {
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
        merged: Some(Arc::new(InputTranslations {
            translations,
            coordinate,
            warnings,
        })),
    })
}

/// The key encoder of `cfg`'s order for `header`.
pub(crate) fn encoder(cfg: &Config, header: &Header) -> Arc<KeyEncoder> {
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

pub(crate) fn decoder(
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
            let (mut batches, _) = crate::io::input::spawn_scanned(
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

pub(crate) fn decode_splitters(splitters: &[Vec<u8>]) -> Result<Vec<Splitter>> {
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
pub(crate) struct MapBatch {
    pub(crate) batch: Batch,
    pub(crate) tally: Tally,
    pub(crate) warnings: Vec<String>,
    /// Several inputs: tags dropped in translation ((tag and ID, message)).
    pub(crate) unknown_tags: Vec<(Vec<u8>, String)>,
    /// The virtual offset of the batch's last record.
    pub(crate) last: Option<u64>,
    /// The records' read ends, when the map collects the split's
    /// duplicate-marking share.
    pub(crate) ends: Option<alnsort_markdup::extract::BatchEnds>,
}

/// The reach of split `split` of several inputs: the largest coordinate
/// merge key (a `u64`, in the merged header's terms) of its records, or
/// `None` when it has none. A map needs the largest reach of the earlier
/// splits of its input (its `prior`): the tie-break of `alnsort sort`
/// with several inputs depends on it (see [`InputTranslations`]). Reads the
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
    let (mut batches, _) = crate::io::input::spawn_scanned(
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
