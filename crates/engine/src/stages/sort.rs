//! The distributed sort's tasks: map (one split keyed, sorted and cut into ranges), reduce (one range merged into a part) and assemble (the parts and their indexes made one output).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{bail, Context, Error, Result};
use alnsort_bam::header::Header;
use alnsort_bam::reader::{BamScanner, RangeEnd, RawBatch, ScanOptions, Scanner};
use alnsort_bam::writer::{Format, Writer, WriterOptions};
use alnsort_bam::{split as bsplit, RecordRef};
use alnsort_bgzf::{CompressionLevel, ParallelReader, EOF_BLOCK};
use alnsort_index::IndexFormat;
use alnsort_sort::batch::Batch;
/// Memory of finished blocks kept for the next map's (the caller owns it:
/// one per process that runs maps one after another).
pub use alnsort_sort::stages::BlockBuffers;
use alnsort_sort::stages::{merge_blocks, Partitioner, RunBlockWriter};
use alnsort_sort::{KeyKind, SortConfig, Sorter};

use crate::config::{Config, IndexKind};
use crate::io::cleanup::{Debris, PendingFile, TempDir};
use crate::io::input::key_kind;
use crate::io::output::Output;
use crate::options::sort::{OutFormat, SortOptions};
use crate::stages::plan::{
    decode_splitters, decoder, encoder, headers, open_scanner, pool, split_input, stage_config,
    write_atomic, MapBatch, SplitSpec, TIE_LEN,
};

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

/// The map task of split `split`: its records sorted and cut into
/// `splitters.len() + 1` framed blocks, written into memory `buffers`
/// holds where it holds some (a caller that copies the blocks out gives
/// their memory back there: [`BlockBuffers::give_back`]). With several
/// inputs, `prior` is the largest [`reach`] of the earlier splits of the
/// split's input (`None` for its first split).
pub fn map(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    prior: Option<u64>,
    buffers: &BlockBuffers,
) -> Result<MapOutput> {
    map_with_share(inputs, split, splitters, options, prior, None, buffers).map(|(out, _)| out)
}

/// [`map`] of split `split` of one input with `--markdup` among the
/// options, which also gives the split's duplicate-marking share as
/// [`crate::stages::markdup::collect`] gives it (the same bytes), from the
/// records the map reads and decodes (one read, one decode): fragment
/// ends cut into `end_buckets`, mate halves into `name_buckets`.
pub fn map_collecting(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    end_buckets: usize,
    name_buckets: usize,
    buffers: &BlockBuffers,
) -> Result<(MapOutput, crate::stages::markdup::SplitShare)> {
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
        (end_buckets, name_buckets),
        buffers,
    )
}

/// [`map_collecting`] of split `split` of one of several inputs, `prior`
/// as [`map`] takes it; `buckets`: (end buckets, name buckets).
pub fn map_collecting_after(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    options: &SortOptions,
    prior: Option<u64>,
    buckets: (usize, usize),
    buffers: &BlockBuffers,
) -> Result<(MapOutput, crate::stages::markdup::SplitShare)> {
    let (out, share) = map_with_share(
        inputs,
        split,
        splitters,
        options,
        prior,
        Some(buckets),
        buffers,
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
    buffers: &BlockBuffers,
) -> Result<(MapOutput, Option<crate::stages::markdup::SplitShare>)> {
    let cfg = stage_config(options, Path::new("stage.bam"), None)?;
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    split_input(inputs, split)?;
    let header = Arc::new(set.heads[split.input].0.clone());
    let enc = encoder(&cfg, &header);
    let kind = match &set.merged {
        Some(_) => KeyKind::Variable,
        None => key_kind(&enc),
    };
    let partitioner = Partitioner::new(decode_splitters(splitters)?, split.ordinal)?;
    let marker = share_marker(inputs, split, splitters, &cfg, &set, collect)?;
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
            expected_bytes: 0,
        };
        let mut sorter = Sorter::new(sort_cfg, Arc::clone(&pool))?;
        let limit = sorter.plan().record_limit;
        let path = split_input(inputs, split)?;
        let opts = ScanOptions {
            record_limit: limit,
            ..ScanOptions::default()
        };
        let (name, scanner) = open_scanner(path, split.start, split.end, opts, &pool)?;
        let keyer = MapKeyer {
            dec: decoder(&name, &cfg, &header, &enc, limit),
            merged: set.merged.clone(),
            merged_enc: encoder(&cfg, &set.header),
            ends_spec: marker.as_ref().map(|m| m.ends_spec()),
            empty: partitioner.tally(),
            kind,
            markdup: cfg.markdup.is_some(),
            split_ordinal: split.ordinal,
            input: split.input,
        };
        let mut read = MapRead {
            partitioner,
            marker,
            records: 0,
            last: None,
            reach: None,
        };
        read.sort_split(&mut sorter, &name, scanner, &pool, prior, keyer)?;
        let mut merged = sorter.finish()?;
        let (writers, ranges) = read.scatter(&mut merged, buffers, cfg.memory_budget as usize)?;
        let end = match split.end {
            Some(end) => bsplit::proven_end(
                &inputs[split.input],
                split.start,
                read.last,
                end,
                Arc::clone(&pool),
            )?,
            None => None,
        };
        let share = match read.marker {
            Some(m) => {
                let mut share = m.finish_split()?;
                share.ranges = ranges;
                Some(share)
            }
            None => None,
        };
        Ok((
            MapOutput {
                blocks: writers.into_iter().map(RunBlockWriter::finish).collect(),
                records: read.records,
                end,
                reach: read.reach,
            },
            share,
        ))
    })();
    drop(tmp);
    result
}

/// With `collect`, the marker of the split's duplicate-marking share:
/// the same records as crate::stages::markdup::collect reads them (one
/// input, the marker's messages counting records from the split's start).
fn share_marker(
    inputs: &[PathBuf],
    split: &SplitSpec,
    splitters: &[Vec<u8>],
    cfg: &Config,
    set: &crate::stages::plan::InputSet,
    collect: Option<(usize, usize)>,
) -> Result<Option<crate::markdup::marker::Marker>> {
    let (buckets, md) = match (collect, &cfg.markdup) {
        (None, _) => return Ok(None),
        (Some(_), None) => return Err(Error::Refused(
            "the map collects the duplicate-marking share only with --markdup among the options"
                .to_string(),
        )),
        (Some(buckets), Some(md)) => (buckets, md),
    };
    if splitters.len() + 1 > crate::stages::markdup::dist::MAX_RANGES {
        return Err(Error::Refused(format!(
            "the map collects the duplicate-marking share for at most {} ranges, not {}",
            crate::stages::markdup::dist::MAX_RANGES,
            splitters.len() + 1
        )));
    }
    let file = crate::stages::markdup::split_file(inputs, split)?;
    let budget = crate::run::resources::markdup_budget(cfg)?;
    Ok(Some(crate::stages::markdup::split_marker(
        inputs, set, split, md, &file, budget, buckets,
    )?))
}

/// What the map's decoding jobs share: one raw batch of the split decoded,
/// keyed (in the merged header's terms, with the tie-break suffix, for
/// several inputs) and copied into a sort batch.
struct MapKeyer {
    dec: alnsort_bam::reader::Decoder,
    merged: Option<Arc<crate::stages::plan::InputTranslations>>,
    merged_enc: Arc<alnsort_bam::keys::KeyEncoder>,
    /// With a duplicate-marking share: the read ends to extract.
    ends_spec: Option<alnsort_markdup::extract::EndsSpec>,
    /// The partitioner's empty tally (each batch observes into a copy).
    empty: alnsort_sort::stages::Tally,
    kind: KeyKind,
    /// `--markdup`: each record carries its place in the input to the
    /// reduce (crate::stages::markdup).
    markdup: bool,
    split_ordinal: u32,
    input: usize,
}

impl MapKeyer {
    /// Batch `raw`, its records' tie-break values `ties` (several inputs).
    fn decode(&self, raw: &RawBatch, ties: Vec<u64>) -> Result<MapBatch> {
        let mut ends = self
            .ends_spec
            .as_ref()
            .map(|spec| alnsort_markdup::extract::BatchEnds::new(spec.clone()));
        let mut tally = self.empty.clone();
        let observe = tally.is_needed();
        let mut batch = Batch::for_input(self.kind, raw.bytes(), raw.voffsets.len());
        let mut warnings = Vec::new();
        let mut unknown_tags = Vec::new();
        let (mut scratch, mut merged_key) = (Vec::new(), Vec::new());
        let mut i = 0;
        self.dec.decode(
            raw,
            |key, rec| {
                // The marker takes the record as its input has it (it
                // translates read groups into the merged header itself:
                // `Marker::for_split_of_several`).
                let as_read = rec;
                let (key, rec) = match &self.merged {
                    Some(m) => {
                        let mut unknown = |tag: [u8; 2], id: &[u8], read: &[u8]| {
                            let mut what = tag.to_vec();
                            what.extend_from_slice(id);
                            unknown_tags.push((
                                what,
                                crate::io::merged::unknown_tag_warning(&tag, id, read),
                            ))
                        };
                        let rec = m.rekey(
                            self.input,
                            rec,
                            &mut scratch,
                            &self.merged_enc,
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
                let taken = if self.markdup {
                    let place = crate::stages::markdup::packed(
                        self.split_ordinal,
                        raw.first_record + i as u64,
                    );
                    batch.try_push_parts(key, rec, &crate::markdup::ordinal::ordinal_suffix(place))
                } else {
                    batch.try_push(key, rec)
                };
                i += 1;
                if !taken {
                    return Err("more record bytes than one batch can address (4 GiB)".into());
                }
                Ok(())
            },
            |w| warnings.push(w),
        )?;
        let last = raw.voffsets.last().copied();
        Ok(MapBatch {
            batch,
            tally,
            warnings,
            unknown_tags,
            last,
            ends,
        })
    }
}

/// The map's state across its read and its scatter.
struct MapRead {
    partitioner: Partitioner,
    marker: Option<crate::markdup::marker::Marker>,
    /// Records read.
    records: u64,
    /// The virtual offset of the last record read.
    last: Option<u64>,
    /// Several inputs: the split's own reach (the running maximum).
    reach: Option<u64>,
}

impl MapRead {
    /// Reads the split from `scanner` into `sorter`: batches decoded,
    /// keyed and copied into sort batches on the pool (as `alnsort sort`
    /// reads), in input order; the partitioner's tallies, the marker's
    /// ends and the split's reach taken on the way.
    fn sort_split(
        &mut self,
        sorter: &mut Sorter,
        name: &Arc<str>,
        scanner: BamScanner,
        pool: &Arc<rayon::ThreadPool>,
        prior: Option<u64>,
        keyer: MapKeyer,
    ) -> Result<()> {
        // The reading thread keeps the running maximum: each record's
        // tie-break needs every record before it.
        let own_reach = Arc::new(std::sync::Mutex::new(None));
        let producer_merged = keyer.merged.clone();
        let producer_reach = Arc::clone(&own_reach);
        let input = keyer.input;
        let depth = pool.current_num_threads() * 2 + 2;
        let (mut batches, _) = crate::io::input::spawn_scanned(
            name,
            Scanner::Bam(Box::new(scanner)),
            pool,
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
            move |raw: &RawBatch, ties: Vec<u64>| keyer.decode(raw, ties),
        )?;
        let mut reported = std::collections::HashSet::new();
        while let Some(d) =
            crate::io::input::next_batch(&mut batches, name, self.records + 1, |d| &d.warnings)
        {
            let d = d?;
            for (what, w) in d.unknown_tags {
                if reported.insert(what) {
                    eprintln!("{w}");
                }
            }
            self.partitioner.add(&d.tally);
            if let (Some(m), Some(e)) = (&mut self.marker, &d.ends) {
                m.push(e)?;
            }
            self.records += d.batch.len() as u64;
            sorter.push_batch(d.batch)?;
            self.last = d.last.or(self.last);
        }
        self.reach = *own_reach.lock().unwrap_or_else(|e| e.into_inner());
        Ok(())
    }

    /// Cuts the sorted split into one block per range (into the memory of
    /// earlier maps' blocks where the caller gave it back to `buffers`); with a share, the range each record goes to,
    /// for each reduce's slice of the decision
    /// (crate::stages::markdup::Marks).
    fn scatter(
        &self,
        merged: &mut alnsort_sort::Merged,
        buffers: &BlockBuffers,
        budget: usize,
    ) -> Result<(Vec<RunBlockWriter>, Vec<u8>)> {
        let records = self.records;
        let mut writers = buffers.writers(self.partitioner.ranges(), budget);
        let mut assigner = self.partitioner.clone().into_assigner();
        let mut ranges = match &self.marker {
            Some(_) => vec![0u8; records as usize * crate::stages::markdup::dist::RANGE_BYTES],
            None => Vec::new(),
        };
        let mut out = 0u64;
        while let Some((key, rec)) = merged.next_entry()? {
            let r = assigner.range_of(key);
            if self.marker.is_some() {
                let (_, index) = crate::stages::markdup::dist::split_of(
                    crate::markdup::ordinal::record_ordinal(rec)?,
                );
                if !crate::stages::markdup::dist::set_range(&mut ranges, index, r) {
                    return Err(Error::Internal(format!(
                        "record {index} of the split sorted into range {r}, beyond the split's {records} records or {} ranges",
                        crate::stages::markdup::dist::MAX_RANGES
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
        Ok((writers, ranges))
    }
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

/// Path of the part index of the part at `part`.
pub fn part_index_path(part: &Path) -> PathBuf {
    let mut p = part.as_os_str().to_owned();
    p.push(".idx");
    PathBuf::from(p)
}

/// The reduce task of range `range_index` (of `partitions`): `blocks`
/// (that range's block of every split, in split order) merged into the
/// headerless, EOF-less part `part`, and its part index `part.idx` when
/// `index` is set. Both appear only when complete. The blocks are read in
/// place (a driver can hand over its buffers without a copy). With `-O
/// parquet` the part is a dataset directory of the range's files, each
/// carrying the output's header (its @PG line from `pg_argv` as
/// [`assemble`] makes it; without, `alnsort sort` with these options over
/// the inputs), which [`assemble`] gathers into one dataset.
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    inputs: &[PathBuf],
    blocks: &[&[u8]],
    part: &Path,
    range_index: usize,
    partitions: usize,
    options: &SortOptions,
    index: bool,
    pg_argv: Option<&[String]>,
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
        pg_argv,
    )
}

/// [`reduce`] of maps that ran with `--markdup`: each record written as
/// `marks` decide (`crate::stages::markdup`). [`ReduceOutput::records`]
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
    marks: Option<&crate::stages::markdup::Marks>,
    pg_argv: Option<&[String]>,
) -> Result<ReduceOutput> {
    if range_index >= partitions.max(1) {
        return Err(Error::Refused(format!(
            "range {range_index} is not one of the {partitions} ranges"
        )));
    }
    let mut cfg = stage_config(options, Path::new("stage.bam"), None)?;
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    let header = Arc::clone(&set.header);
    // A Parquet part's files carry the output's header and know their range.
    let part_header = if cfg.format == OutFormat::Parquet {
        set_pg_line(&mut cfg, options, inputs, None, pg_argv);
        let mut edited = (*header).clone();
        cfg.edit_header(&mut edited, false);
        let command = cfg
            .pg
            .clone()
            .unwrap_or_else(|| options.command_line.clone());
        if let Some(c) = cfg.columnar.as_mut() {
            c.range = Some(range_index);
            c.command = command;
        }
        Arc::new(edited)
    } else {
        Arc::clone(&header)
    };
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
        part_header,
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
        format: crate::io::output::hts_format(cfg),
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
    if cfg.format == OutFormat::Parquet {
        // The parts are datasets with the header in their files already.
        if index.is_some() || sharded {
            bail!(
                Refused,
                "-O parquet: the dataset is partitioned by reference already; {} refused",
                if sharded {
                    "a sharded output is"
                } else {
                    "an index is"
                }
            );
        }
        let done = alnsort_columnar::assemble(parts, output)?;
        return Ok(AssembleOutput {
            bytes: done.bytes,
            index: None,
            files: Vec::new(),
        });
    }
    set_pg_line(&mut cfg, options, inputs, Some(output), pg_argv);
    let pool = pool(cfg.threads)?;
    let set = headers(inputs, &pool)?;
    let format = crate::io::output::hts_format(&cfg);
    let mut header = (*set.header).clone();
    let all_unplaced = if cfg.hd_all_unplaced.is_some() {
        first_record_unplaced(parts, format, &pool)?
    } else {
        false
    };
    cfg.edit_header(&mut header, all_unplaced);
    let header = Arc::new(header);
    let asm = Assembly {
        head: header_bytes(&header, &cfg, &pool)?,
        bgzf: format != Format::Sam,
        ref_lengths: header.refs().iter().map(|r| r.len).collect(),
        format,
        cfg,
    };
    let debris = Debris::default();
    if sharded {
        asm.shards(parts, output, &debris)
    } else {
        asm.one_file(parts, output, &debris)
    }
}

/// The @PG command line of the output's header, where there is one: the
/// one given, or `alnsort sort` with these options over the inputs
/// (writing `output`, where the caller knows it).
fn set_pg_line(
    cfg: &mut Config,
    options: &SortOptions,
    inputs: &[PathBuf],
    output: Option<&Path>,
    pg_argv: Option<&[String]>,
) {
    if cfg.pg.is_some() {
        let line = match pg_argv {
            Some(argv) => argv.join(" "),
            None => {
                let mut words: Vec<String> = vec![options.command_line.clone()];
                if let Some(output) = output {
                    words.extend(["-o".into(), output.display().to_string()]);
                }
                words.extend(inputs.iter().map(|p| p.display().to_string()));
                words.join(" ")
            }
        };
        cfg.pg = Some(line.replace('\t', " "));
    }
}

/// What [`assemble`] puts before and beside the parts' records.
struct Assembly {
    cfg: Config,
    /// The output's header, encoded.
    head: Vec<u8>,
    format: Format,
    bgzf: bool,
    ref_lengths: Vec<u64>,
}

impl Assembly {
    /// The index kind asked for, refused for any output but BAM.
    fn index_target(&self) -> Result<Option<&crate::config::IndexTarget>> {
        match &self.cfg.index {
            Some(_) if self.format != Format::Bam => Err(Error::Refused(
                "an index can only be built for BAM output".to_string(),
            )),
            target => Ok(target.as_ref()),
        }
    }

    /// One output file: the parts concatenated after the header, their
    /// indexes merged into the file's.
    fn one_file(
        &self,
        parts: &[PathBuf],
        output: &Path,
        debris: &Debris,
    ) -> Result<AssembleOutput> {
        let (starts, eof, pending) = concatenate(output, &self.head, parts, self.bgzf, debris)?;
        let mut index_path = None;
        if let Some(target) = self.index_target()? {
            let idx: Vec<Vec<u8>> = parts
                .iter()
                .map(|p| read_part_index(p))
                .collect::<Result<_>>()?;
            let list: Vec<(&[u8], u64)> = idx.iter().map(|d| d.as_slice()).zip(starts).collect();
            let file = alnsort_index::merge_part_indexes(
                index_format(target.kind),
                &self.ref_lengths,
                &list,
                eof,
            )
            .context("merging the parts' indexes")?;
            write_atomic(
                &target.path,
                &crate::io::zlib::index_file_bytes(&file),
                debris,
            )?;
            index_path = Some(target.path.clone());
        }
        pending
            .commit()
            .with_context(|| format!("{}: cannot rename into place", output.display()))?;
        let bytes = std::fs::metadata(output)?.len();
        Ok(AssembleOutput {
            bytes,
            index: index_path,
            files: Vec::new(),
        })
    }

    /// Sharded: one file per part (each with its index) in a directory
    /// made beside the destination, renamed into place.
    fn shards(&self, parts: &[PathBuf], output: &Path, debris: &Debris) -> Result<AssembleOutput> {
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
            let ext = match self.cfg.format {
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
                    &self.head,
                    std::slice::from_ref(part),
                    self.bgzf,
                    debris,
                )?;
                if let Some(target) = self.index_target()? {
                    let idx = read_part_index(part)?;
                    let file = alnsort_index::merge_part_indexes(
                        index_format(target.kind),
                        &self.ref_lengths,
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
                        &crate::io::zlib::index_file_bytes(&file),
                        debris,
                    )?;
                }
                pending.commit()?;
                bytes += eof + if self.bgzf { EOF_BLOCK.len() as u64 } else { 0 };
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
}

/// The index a reduce wrote beside its part.
fn read_part_index(part: &Path) -> Result<Vec<u8>> {
    let p = part_index_path(part);
    std::fs::read(&p).with_context(|| {
        format!(
            "{}: cannot read the part index (reduce with the index option)",
            p.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::plan::merge_heads;
    use alnsort_bam::header_merge::Translation;
    use alnsort_bam::keys::{KeyEncoder, SortOrder};
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
        // maps' tie suffix (`InputTranslations::running_max`) with (input,
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
