//! `alnsort merge`: samtools merge's interface and output for inputs that
//! are already sorted. Headers are merged by `alnsort_bam::header_merge`
//! (samtools' rules); each input is read by `alnsort_bam::reader` (scan on
//! its own thread, decode and key on the pool, results in order), its
//! records translated into the merged header's terms, and the inputs are
//! merged with the sort crate's loser tree (ties: the earlier input first,
//! as samtools' heap) into the same `Output` as `alnsort sort`.
//!
//! [`merged_inputs`] is the stream alone, which `alnsort sort` with several
//! inputs feeds to its sorter.

use crate::cleanup::Debris;
use crate::config::{self, Config};
use crate::error::{Context, Error, Result};
use crate::input::{self, Fed, Records};
use crate::options::{self, ArgError, Group, OptSpec, OptionName, OrderFlag, SortOptions};
use crate::output;
use crate::progress::{thread_cpu_seconds, Progress};
use crate::sort_args;
use alnsort_bam::header::Header;
pub use alnsort_bam::header_merge::MergeOptions;
use alnsort_bam::header_merge::{HeaderMerger, Translation};
use alnsort_bam::keys::{KeyEncoder, SortOrder};
use alnsort_bam::reader::{
    BamScanner, Decoded, RangeEnd, RawBatch, ReadError, ScanOptions, Scanner, UnknownReference,
};
use alnsort_bam::RecordRef;
use alnsort_index::IndexReader;
use alnsort_pipeline::Ordered;
use alnsort_sort::batch::Batch;
use alnsort_sort::loser::{LoserTree, MergeSource};
use alnsort_sort::{KeyKind, Sorter};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

/// What an option of `alnsort merge` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeOptId {
    Name,
    NameLex,
    Tag,
    TemplateCoordinate,
    Output,
    Force,
    FileList,
    CombineRg,
    CombinePg,
    Seed,
    Level1,
    Level,
    Uncompressed,
    OutputFmt,
    OutputFmtOption,
    Threads,
    WriteIndex,
    NoPg,
    Verbosity,
    Help,
    Region,
    Reference,
    InputFmtOption,
    Flagstat,
    FlagstatFormat,
    Idxstats,
    Unsupported(&'static str),
}

impl options::OptionId for MergeOptId {
    fn refused(self) -> Option<&'static str> {
        match self {
            MergeOptId::Unsupported(why) => Some(why),
            _ => None,
        }
    }
}

/// One option of `alnsort merge` ([`MERGE_OPTIONS`]).
pub type MergeSpec = OptSpec<MergeOptId>;

/// A row of [`MERGE_OPTIONS`]; `key` is the Python keyword of an option
/// without a long name. Its help group follows from what it does.
const fn spec(
    id: MergeOptId,
    short: Option<char>,
    long: Option<&'static str>,
    value: Option<&'static str>,
    help: &'static str,
    key: Option<&'static str>,
) -> MergeSpec {
    use MergeOptId::*;
    let group = match id {
        Name | NameLex | Tag | TemplateCoordinate => Group::Order,
        Output | Level1 | Level | Uncompressed | OutputFmt | OutputFmtOption | WriteIndex
        | NoPg | Reference => Group::Output,
        Threads => Group::Resources,
        Flagstat | FlagstatFormat | Idxstats => Group::Additions,
        Unsupported(_) => Group::Unsupported,
        _ => Group::Other,
    };
    OptSpec {
        id,
        short,
        long,
        value,
        group,
        help,
        key,
    }
}

/// Every option `alnsort merge` knows; the parser and the help read it.
pub const MERGE_OPTIONS: &[MergeSpec] = &[
    spec(
        MergeOptId::Name,
        Some('n'),
        None,
        None,
        "Inputs are sorted by read name (natural order).",
        Some("name"),
    ),
    spec(
        MergeOptId::NameLex,
        Some('N'),
        None,
        None,
        "Inputs are sorted by read name (byte order).",
        Some("name_lexicographic"),
    ),
    spec(
        MergeOptId::Tag,
        Some('t'),
        None,
        Some("TAG"),
        "Inputs are sorted by the value of TAG (then position, or name with -n/-N).",
        Some("tag"),
    ),
    spec(
        MergeOptId::TemplateCoordinate,
        None,
        Some("template-coordinate"),
        None,
        "Inputs are sorted by template coordinate.",
        None,
    ),
    spec(
        MergeOptId::Output,
        Some('o'),
        None,
        Some("FILE"),
        "Output file ('-': standard output); without -o the first argument is the output.",
        Some("output"),
    ),
    spec(
        MergeOptId::Force,
        Some('f'),
        None,
        None,
        "Overwrite the output if it exists (samtools refuses otherwise).",
        Some("force"),
    ),
    spec(
        MergeOptId::FileList,
        Some('b'),
        None,
        Some("FILE"),
        "Read input file names from FILE, one per line (before the arguments' inputs).",
        Some("file_list"),
    ),
    spec(
        MergeOptId::CombineRg,
        Some('c'),
        None,
        None,
        "Combine @RG lines with the same ID (default: rename later ones ID-XXXXXXXX).",
        Some("combine_rg"),
    ),
    spec(
        MergeOptId::CombinePg,
        Some('p'),
        None,
        None,
        "Combine @PG lines with the same ID (default: rename later ones).",
        Some("combine_pg"),
    ),
    spec(
        MergeOptId::Seed,
        Some('s'),
        None,
        Some("VALUE"),
        "Seed of the random suffixes of renamed IDs (default: the time).",
        Some("seed"),
    ),
    spec(
        MergeOptId::Level1,
        Some('1'),
        None,
        None,
        "Compression level 1.",
        Some("level1"),
    ),
    spec(
        MergeOptId::Level,
        Some('l'),
        None,
        Some("INT"),
        "Compression level, 0 to 9.",
        Some("level"),
    ),
    spec(
        MergeOptId::Uncompressed,
        Some('u'),
        None,
        None,
        "Uncompressed BAM output (level 0).",
        Some("uncompressed"),
    ),
    spec(
        MergeOptId::OutputFmt,
        Some('O'),
        Some("output-fmt"),
        Some("FMT[,OPT=VAL]..."),
        "Output format: SAM, BAM or CRAM (default: from the output's name: \
         .sam SAM, .cram CRAM, else BAM); CRAM options as alnsort sort's -O.",
        None,
    ),
    spec(
        MergeOptId::OutputFmtOption,
        None,
        Some("output-fmt-option"),
        Some("OPT=VAL"),
        "Output format option (level=N; for CRAM version=3.0|3.1, reference=FILE, \
         embed_ref, no_ref, store_md, store_nm).",
        None,
    ),
    spec(
        MergeOptId::Threads,
        Some('@'),
        Some("threads"),
        Some("INT"),
        "Threads for decoding and compression.",
        None,
    ),
    spec(
        MergeOptId::WriteIndex,
        None,
        Some("write-index"),
        None,
        "Write an index beside the output (coordinate order): CSI for BAM, .crai for CRAM.",
        None,
    ),
    spec(
        MergeOptId::Flagstat,
        None,
        Some("flagstat"),
        Some("FILE"),
        options::FLAGSTAT_HELP,
        None,
    ),
    spec(
        MergeOptId::FlagstatFormat,
        None,
        Some("flagstat-format"),
        Some("default|json|tsv"),
        options::FLAGSTAT_FORMAT_HELP,
        None,
    ),
    spec(
        MergeOptId::Idxstats,
        None,
        Some("idxstats"),
        Some("FILE"),
        options::IDXSTATS_HELP,
        None,
    ),
    spec(
        MergeOptId::NoPg,
        None,
        Some("no-PG"),
        None,
        "Do not add a @PG line.",
        None,
    ),
    spec(
        MergeOptId::Verbosity,
        None,
        Some("verbosity"),
        Some("INT"),
        "Verbosity (3: print a summary).",
        None,
    ),
    spec(
        MergeOptId::Help,
        None,
        Some("help"),
        None,
        "Print this help.",
        None,
    ),
    spec(
        MergeOptId::Region,
        Some('R'),
        None,
        Some("STR"),
        "Merge only the records overlapping region STR (chr, chr:beg, chr:beg-end); \
         each input needs an index (IN.bai or IN.csi), as in samtools, and only the \
         part of a BAM input the index names for the region is read.",
        Some("region"),
    ),
    spec(
        MergeOptId::Unsupported("BED region lists are not supported yet"),
        Some('L'),
        None,
        Some("FILE"),
        "Merge only the regions of a BED file (not supported yet).",
        Some("bed"),
    ),
    spec(
        MergeOptId::Unsupported("a header from another file is not supported yet"),
        Some('h'),
        None,
        Some("FILE"),
        "Take the header from FILE (not supported yet).",
        Some("header_file"),
    ),
    spec(
        MergeOptId::Unsupported("RG tags from file names are not supported yet"),
        Some('r'),
        None,
        None,
        "Attach RG tags from file names (not supported yet).",
        Some("rg_from_names"),
    ),
    spec(
        MergeOptId::Unsupported("custom index files are not supported yet"),
        Some('X'),
        None,
        None,
        "Inputs' index files given (not supported yet).",
        Some("index_files"),
    ),
    spec(
        MergeOptId::Reference,
        None,
        Some("reference"),
        Some("FILE"),
        "Reference FASTA for CRAM inputs and CRAM output (else REF_PATH, REF_CACHE).",
        None,
    ),
    spec(
        MergeOptId::InputFmtOption,
        None,
        Some("input-fmt-option"),
        Some("OPT=VAL"),
        "Input format option: reference=FILE (as --reference).",
        None,
    ),
];

/// `alnsort merge --help`, rendered from [`MERGE_OPTIONS`] as `alnsort sort
/// --help` is from its table.
pub fn merge_help() -> String {
    let mut out = String::from(
        "Usage: alnsort merge [options] -o <out.bam|out.cram> <in1> ... <inN>\n   \
         or: alnsort merge [options] <out.bam|out.cram> <in1> ... <inN>\n\n\
         Merges inputs that are already sorted (an input out of order is an error),\n\
         as samtools merge does: same options, header merging and records.\n\
         Inputs are SAM, BAM or CRAM, in any mix (CRAM decoded against --reference,\n\
         REF_PATH or REF_CACHE); the output is SAM, BAM or CRAM.\n\nOptions:\n",
    );
    for s in MERGE_OPTIONS {
        options::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// Parsed `alnsort merge` arguments.
#[derive(Debug)]
pub struct MergeArgs {
    /// The output, format, order and thread options in `alnsort sort`'s
    /// terms (`config::resolve` makes the output configuration from them).
    pub sort: SortOptions,
    pub inputs: Vec<String>,
    pub force: bool,
    pub merge: MergeOptions,
    /// `-R STR`.
    pub region: Option<String>,
}

/// What parsing `alnsort merge`'s arguments produced.
#[derive(Debug)]
pub enum ParsedMerge {
    Run(Box<MergeArgs>),
    /// Print [`merge_help`] and exit 0 (`--help`, or no arguments).
    Usage,
}

impl MergeArgs {
    /// `alnsort merge` with no option given yet: no inputs, no output,
    /// header IDs renamed with suffixes seeded by `seed` (the command's
    /// default is the time). `command_line` is the @PG CL.
    pub fn new(command_line: String, seed: i64) -> MergeArgs {
        let mut sort = SortOptions::new(command_line);
        sort.output = String::new();
        MergeArgs {
            sort,
            inputs: Vec::new(),
            force: false,
            merge: MergeOptions {
                seed,
                ..Default::default()
            },
            region: None,
        }
    }

    /// Applies one option of [`MERGE_OPTIONS`] with its value (`None` for a
    /// flag), as `alnsort merge` given it does; a later option overrides an
    /// earlier one. `-b FILE` adds the inputs FILE names. `--help` and the
    /// refused options are not options of a run: the parser acts on them.
    pub fn apply(&mut self, id: MergeOptId, value: Option<&str>) -> Result<(), ArgError> {
        let text = || value.ok_or_else(|| ArgError::Invalid(format!("{id:?} needs a value")));
        let sort = &mut self.sort;
        match id {
            MergeOptId::Name => sort.order = OrderFlag::Name,
            MergeOptId::NameLex => {
                sort.order = OrderFlag::Name;
                sort.lexicographic = true;
            }
            MergeOptId::Tag => sort.tag = Some(text()?.to_string()),
            MergeOptId::TemplateCoordinate => sort.order = OrderFlag::TemplateCoordinate,
            MergeOptId::Output => sort.output = text()?.to_string(),
            MergeOptId::Force => self.force = true,
            MergeOptId::FileList => {
                let list = text()?;
                let body = std::fs::read_to_string(list).map_err(|e| ArgError::Value {
                    what: format!("-b {list}: cannot read the file list"),
                    source: e.into(),
                })?;
                // hts_readlines: one name per line, empty lines skipped.
                self.inputs.extend(
                    body.lines()
                        .map(|l| l.trim_end_matches('\r'))
                        .filter(|l| !l.is_empty())
                        .map(String::from),
                );
            }
            MergeOptId::CombineRg => self.merge.combine_rg = true,
            MergeOptId::CombinePg => self.merge.combine_pg = true,
            MergeOptId::Seed => {
                let v = text()?;
                self.merge.seed = v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| ArgError::Invalid(format!("Invalid random seed '{v}'")))?;
            }
            MergeOptId::Level1 => sort.level = Some(1),
            MergeOptId::Level => sort.level = options::parse_level(text()?)?,
            MergeOptId::Uncompressed => sort.uncompressed = true,
            MergeOptId::OutputFmt => options::parse_output_fmt(text()?, sort)?,
            MergeOptId::OutputFmtOption => options::parse_fmt_option(text()?, sort)?,
            MergeOptId::Threads => {
                sort.threads = options::parse_int("-@", text()?)?.max(0) as usize
            }
            MergeOptId::WriteIndex => sort.write_index = true,
            MergeOptId::Flagstat => sort.apply(options::OptId::Flagstat, Some(text()?.into()))?,
            MergeOptId::FlagstatFormat => {
                sort.apply(options::OptId::FlagstatFormat, Some(text()?.into()))?
            }
            MergeOptId::Idxstats => sort.apply(options::OptId::Idxstats, Some(text()?.into()))?,
            MergeOptId::NoPg => sort.no_pg = true,
            MergeOptId::Verbosity => {
                sort.verbosity = options::parse_int("--verbosity", text()?)? as i32
            }
            MergeOptId::Region => self.region = Some(text()?.to_string()),
            MergeOptId::Reference => sort.reference = Some(text()?.into()),
            MergeOptId::InputFmtOption => {
                let v = text()?;
                match v.split_once('=') {
                    Some(("reference", file)) => sort.reference = Some(file.into()),
                    _ => {
                        return Err(ArgError::Invalid(format!(
                            "--input-fmt-option {v}: alnsort takes reference=FILE only"
                        )))
                    }
                }
            }
            MergeOptId::Help | MergeOptId::Unsupported(_) => {
                return Err(ArgError::Invalid(format!(
                    "{id:?} is not an option of a run: the parser acts on it"
                )))
            }
        }
        Ok(())
    }

    /// Applies the option of [`MERGE_OPTIONS`] the Python keyword
    /// `keyword` names, as [`MergeArgs::apply`] does for the command line.
    pub fn apply_keyword(&mut self, keyword: &str, value: Option<&str>) -> Result<(), ArgError> {
        let spec = options::keyword_option(MERGE_OPTIONS, keyword)?;
        match spec.id {
            MergeOptId::Output | MergeOptId::Help => {
                Err(options::not_a_keyword(spec.name(), keyword))
            }
            id => self.apply(id, value),
        }
    }

    /// The arguments after the options: the output first unless `-o` named
    /// it, then the inputs (after those of `-b`).
    pub fn finish_positional(&mut self, mut positional: Vec<String>) -> Result<(), ArgError> {
        if self.sort.output.is_empty() {
            if positional.is_empty() {
                return Err(ArgError::Invalid(
                    "You must at least specify the output file".into(),
                ));
            }
            self.sort.output = positional.remove(0);
        }
        self.inputs.extend(positional);
        match self.inputs.first() {
            Some(first) => self.sort.input = first.clone(),
            None => {
                return Err(ArgError::Invalid(
                    "You must specify at least one (and usually two or more) input files".into(),
                ))
            }
        }
        Ok(())
    }
}

/// Parses the arguments after `alnsort merge` (`argv0` is the program name
/// as typed; it begins the @PG CL) with [`MERGE_OPTIONS`], looked up as
/// `alnsort sort`'s options are (unique prefixes of long names), each
/// applied with [`MergeArgs::apply`]; `seed` is `-s`'s default.
pub fn parse_merge(argv0: &str, rest: Vec<OsString>, seed: i64) -> Result<ParsedMerge, ArgError> {
    use lexopt::prelude::*;
    if rest.is_empty() {
        return Ok(ParsedMerge::Usage);
    }
    let mut m = MergeArgs::new(sort_args::stringify(argv0, "merge", &rest), seed);
    let mut positional = Vec::new();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let s = sort_args::find_option(MERGE_OPTIONS, &arg)?;
        if let Some(refusal) = s.refusal() {
            return Err(refusal);
        }
        if s.id == MergeOptId::Help {
            return Ok(ParsedMerge::Usage);
        }
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        m.apply(s.id, value.as_deref())?;
    }
    m.finish_positional(positional)?;
    Ok(ParsedMerge::Run(Box::new(m)))
}

/// The inputs opened, their headers merged.
pub struct MergedInputs {
    pub header: Header,
    /// Bytes of the input files, when every one is a regular file.
    pub size: Option<u64>,
    sources: Vec<Source>,
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
) -> Result<(MergedInputs, Arc<KeyEncoder>)> {
    merged_inputs_with(plan, pool, true)
}

/// [`merged_inputs`] handing on each record as its input holds it, its
/// `RG`/`PG` tags and reference ids not translated into the merged
/// header's terms: for a caller that merges the headers another tool's way
/// and translates the records itself (`alnsort MarkDuplicates` with several
/// inputs, htsjdk's header merge: [`crate::markdup_inputs::HtsjdkMerge`]).
/// The inputs' `@SQ` lines must be the same (the keys are the merged
/// header's only then).
pub fn merged_inputs_untranslated(
    plan: &MergePlan<'_>,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<(MergedInputs, Arc<KeyEncoder>)> {
    merged_inputs_with(plan, pool, false)
}

fn merged_inputs_with(
    plan: &MergePlan<'_>,
    pool: &Arc<rayon::ThreadPool>,
    translate: bool,
) -> Result<(MergedInputs, Arc<KeyEncoder>)> {
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
    let wide = crate::has_long_reference(&header);
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
    let shared = Shared {
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
        sources.push(Source::start(
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
        MergedInputs {
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

impl MergedInputs {
    /// Calls `sink(key, record)` for each record in merged order.
    pub fn for_each(self, mut sink: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<u64> {
        self.for_each_from(|_, _, key, rec| sink(key, rec))
    }

    /// [`MergedInputs::for_each`] that also names where each record comes
    /// from: `sink(input, record of that input (0-based), key, record)`.
    pub fn for_each_from(
        self,
        mut sink: impl FnMut(usize, u64, &[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let MergedInputs {
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
    /// htsjdk's `MergingSamRecordIterator`: [`crate::markdup_inputs`],
    /// `alnsort sort --markdup IN1 IN2 ...` and `alnsort MarkDuplicates
    /// I=a I=b`). The inputs wait in a [`JavaHeap`], so records that
    /// compare equal come out of different inputs in the order Java's
    /// `PriorityQueue` gives them, not always the earlier input first.
    pub fn for_each_by(
        self,
        cmp: impl Fn(&[u8], &[u8]) -> std::cmp::Ordering,
        mut sink: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let MergedInputs {
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

/// `java.util.PriorityQueue` over input numbers, compared by the caller's
/// `cmp` of their next records: the same sift-up and sift-down steps
/// (OpenJDK's `siftUpComparable`/`siftDownComparable`: an element moves
/// only past strictly greater ones), so ties between inputs are broken as
/// htsjdk's merging iterator breaks them (`poll`, then `offer` of the
/// input it came from).
#[derive(Debug, Default)]
pub struct JavaHeap {
    queue: Vec<usize>,
}

impl JavaHeap {
    pub fn offer(&mut self, x: usize, cmp: impl Fn(usize, usize) -> std::cmp::Ordering) {
        let mut k = self.queue.len();
        self.queue.push(x);
        while k > 0 {
            let parent = (k - 1) >> 1;
            let e = self.queue[parent];
            if cmp(x, e).is_ge() {
                break;
            }
            self.queue[k] = e;
            k = parent;
        }
        self.queue[k] = x;
    }

    pub fn poll(&mut self, cmp: impl Fn(usize, usize) -> std::cmp::Ordering) -> Option<usize> {
        let result = *self.queue.first()?;
        let x = self.queue.pop()?;
        let n = self.queue.len();
        if n > 0 {
            let mut k = 0;
            let half = n >> 1;
            while k < half {
                let mut child = 2 * k + 1;
                let mut c = self.queue[child];
                let right = child + 1;
                if right < n && cmp(c, self.queue[right]).is_gt() {
                    child = right;
                    c = self.queue[child];
                }
                if cmp(x, c).is_le() {
                    break;
                }
                self.queue[k] = c;
                k = child;
            }
            self.queue[k] = x;
        }
        Some(result)
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
/// `bases`: with `--markdup` (`crate::markdup_inputs`), each record enters
/// the sorter followed by its ordinal (`crate::markdup::ordinal_suffix`):
/// `bases[i]` plus its position in input `i`.
pub fn feed_sorter(
    m: MergedInputs,
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
            Some(b) => {
                batch.try_push_parts(key, rec, &crate::markdup::ordinal_suffix(b[input] + at))
            }
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
struct Chunk {
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

impl Chunk {
    /// Empties the chunk for the next batch, keeping its buffers.
    fn clear(&mut self) {
        let Chunk {
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

type ChunkResult = std::result::Result<Chunk, ReadError>;

struct Source {
    name: Arc<str>,
    /// The input's position among the merge's inputs.
    input: usize,
    /// None: nothing of the input to read (`-R` outside it).
    batches: Option<Ordered<Result<Chunk>>>,
    chunk: Chunk,
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
    /// The current chunk is the last one to take (see `Chunk::past_region`).
    last_chunk: bool,
    /// Chunks taken go back to the decode jobs.
    spares: crossbeam_channel::Sender<Chunk>,
}

/// What every input of one merge shares.
struct Shared {
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
    /// region's end ends it (`Chunk::past_region`).
    stop_past_region: bool,
    /// Chunks the merge is done with.
    spares: crossbeam_channel::Receiver<Chunk>,
}

impl Source {
    #[allow(clippy::too_many_arguments)]
    fn start(
        input: usize,
        inp: input::OpenInput,
        path: &str,
        index: Option<&IndexReader>,
        translation: Translation,
        shared: &Shared,
        pool: &Arc<rayon::ThreadPool>,
        failure: Rc<RefCell<Option<Error>>>,
        tally: Rc<Cell<Decoded>>,
    ) -> Result<Source> {
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
        let mut s = Source {
            name: file,
            input,
            batches,
            chunk: Chunk::default(),
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

impl MergeSource for Source {
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
    fn decode(&self, raw: &RawBatch) -> ChunkResult {
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

/// Runs `alnsort merge` with parsed arguments.
pub fn run_merge(m: &MergeArgs, debris: &Debris) -> Result<()> {
    let cfg: Config = config::resolve(&m.sort)?;
    cfg.print_warnings();
    if !m.force {
        if let Some(out) = &cfg.output {
            if std::fs::metadata(out).is_ok_and(|md| md.is_file()) {
                return Err(Error::Refused(format!(
                    "[bam_merge] File '{}' exists. Please apply '-f' to overwrite. Abort.",
                    out.display()
                )));
            }
        }
    }
    let pool = crate::worker_pool(cfg.threads, "alnsort-worker")?;
    let dest = output::Destinations::prepare(&cfg, debris)?;
    let plan = MergePlan {
        paths: &m.inputs,
        opts: m.merge,
        order: &cfg.order,
        sort_order: None,
        region: m.region.as_deref(),
        unknown_reference: cfg.unknown_reference,
        refs: &cfg.refs,
        check_sorted: true,
    };
    let (inputs, encoder) = merged_inputs(&plan, &pool)?;
    if encoder.wide_positions() {
        crate::check_wide_output(&cfg)?;
    }
    let mut header = inputs.header.clone();
    if let Some(cl) = &cfg.pg {
        header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
    }
    let mut out = output::Output::create(&cfg, dest, Arc::new(header), Arc::clone(&pool), debris)?;
    let mut scratch = Vec::new();
    let n = inputs
        .for_each(|key, rec| out.write_record(encoder.finish_record(key, rec, &mut scratch)))?;
    out.finish()?;
    if cfg.verbosity >= 3 {
        eprintln!("[alnsort merge] {n} records from {} inputs", m.inputs.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::OptionName;

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

    /// Help is rendered as `alnsort sort --help` is: every option listed,
    /// wrapped to 80 columns.
    #[test]
    fn help_lists_every_option_within_80_columns() {
        let help = merge_help();
        for line in help.lines() {
            assert!(line.chars().count() <= options::HELP_WIDTH, "{line:?}");
        }
        for s in MERGE_OPTIONS {
            assert!(help.contains(&format!("  {}", s.synopsis())), "{s:?}");
        }
    }

    /// java.util.PriorityQueue's order, worked by hand from OpenJDK's
    /// siftUp/siftDown: elements that compare equal are not taken in
    /// insertion order once the heap has been reshaped.
    #[test]
    fn java_heap_breaks_ties_as_java() {
        use super::JavaHeap;
        // Two inputs whose next records always tie: the one offered back
        // goes behind the one waiting, so they alternate.
        let mut h = JavaHeap::default();
        let eq = |_: usize, _: usize| std::cmp::Ordering::Equal;
        h.offer(0, eq);
        h.offer(1, eq);
        let mut out = Vec::new();
        for _ in 0..4 {
            let x = h.poll(eq).unwrap();
            out.push(x);
            h.offer(x, eq);
        }
        assert_eq!(out, [0, 1, 0, 1]);
        // Three: poll 0 moves the last (2) to the root, so 2 comes before 1.
        let mut h = JavaHeap::default();
        for i in 0..3 {
            h.offer(i, eq);
        }
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(h.poll(eq).unwrap());
        }
        assert_eq!(out, [0, 2, 1]);
        assert_eq!(h.poll(eq), None);
        // Distinct keys come out in order.
        let keys = [5, 1, 4, 2, 3];
        let by = |a: usize, b: usize| keys[a].cmp(&keys[b]);
        let mut h = JavaHeap::default();
        for i in 0..keys.len() {
            h.offer(i, by);
        }
        let order: Vec<usize> = std::iter::from_fn(|| h.poll(by)).collect();
        assert_eq!(order, [1, 3, 4, 2, 0]);
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;
    use crate::options::OutFormat;

    /// Options are looked up as `alnsort sort`'s: unique prefixes of long
    /// names, ambiguity named, refused options named as written.
    #[test]
    fn long_options_abbreviate_and_refusals_name_the_option() {
        let args = |v: &[&str]| parse_merge("alnsort", v.iter().map(OsString::from).collect(), 0);
        let Ok(ParsedMerge::Run(m)) = args(&["--write", "--templ", "-o", "x.bam", "a.bam"]) else {
            panic!("expected a run")
        };
        assert!(m.sort.write_index);
        assert_eq!(m.sort.order, OrderFlag::TemplateCoordinate);
        assert_eq!(
            m.sort.command_line,
            "alnsort merge --write --templ -o x.bam a.bam"
        );
        let e = args(&["--output-fmt", "sam", "--output", "x", "a"]).unwrap_err();
        assert!(matches!(e, ArgError::Ambiguous { .. }), "{e}");
        let e = args(&["--input-fmt-option", "x=1", "-o", "x", "a"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("--input-fmt-option x=1: alnsort takes reference=FILE only"),
            "{e}"
        );
        let Ok(ParsedMerge::Run(m)) =
            args(&["--input-fmt-option", "reference=r.fa", "o.cram", "a"])
        else {
            panic!("expected a run")
        };
        assert_eq!(m.sort.reference, Some("r.fa".into()));
        let Ok(ParsedMerge::Run(m)) = args(&["--ref", "s.fa", "-O", "cram,version=3.1", "o", "a"])
        else {
            panic!("expected a run")
        };
        assert_eq!(m.sort.reference, Some("s.fa".into()));
        assert_eq!(m.sort.format, Some(OutFormat::Cram));
        let Ok(ParsedMerge::Run(m)) = args(&["-l", "12", "-o", "x.bam", "a.bam"]) else {
            panic!("expected a run")
        };
        assert_eq!(m.sort.level, Some(9));
    }

    #[test]
    fn output_is_the_first_argument_without_o() {
        let args = |v: &[&str]| parse_merge("alnsort", v.iter().map(OsString::from).collect(), 0);
        let Ok(ParsedMerge::Run(m)) = args(&["out.bam", "a.bam", "b.bam"]) else {
            panic!("expected a run")
        };
        assert_eq!(m.sort.output, "out.bam");
        assert_eq!(m.inputs, ["a.bam", "b.bam"]);
        let Ok(ParsedMerge::Run(m)) = args(&["-o", "x.sam", "-s", "3", "-c", "a.bam"]) else {
            panic!("expected a run")
        };
        assert_eq!(
            (m.sort.output.as_str(), m.merge.seed, m.merge.combine_rg),
            ("x.sam", 3, true)
        );
        assert!(matches!(args(&["-o", "x.bam"]), Err(ArgError::Invalid(_))));
        assert!(matches!(
            args(&["-L", "b.bed", "-o", "x", "a"]),
            Err(ArgError::Unsupported { .. })
        ));
        assert!(matches!(args(&[]), Ok(ParsedMerge::Usage)));
    }
}

#[cfg(test)]
mod keyword_tests {
    use super::*;
    use crate::options::{OptionId, OPTIONS};
    use std::collections::HashSet;

    /// Every option of each table has one Python keyword of its own: the
    /// long name's, or the row's key for an option with a short name only.
    fn keywords_are_derived_and_unique<Id: OptionId>(table: &'static [OptSpec<Id>]) {
        let mut seen = HashSet::new();
        for s in table {
            match (s.long, s.key) {
                (Some(_), Some(k)) => panic!("{k}: a long name gives the keyword"),
                (None, None) => panic!("{}: no long name and no key", s.name()),
                _ => {}
            }
            let k = s.keyword();
            assert!(
                k.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{k}"
            );
            assert!(seen.insert(k.clone()), "{k} twice");
            assert!(std::ptr::eq(OptSpec::by_keyword(table, &k).unwrap(), s));
        }
    }

    #[test]
    fn every_table_gives_each_option_one_keyword() {
        keywords_are_derived_and_unique(OPTIONS);
        keywords_are_derived_and_unique(MERGE_OPTIONS);
        assert_eq!(OPTIONS[0].keyword(), "name");
        let no_pg = OPTIONS.iter().find(|s| s.long == Some("no-PG")).unwrap();
        assert_eq!(no_pg.keyword(), "no_pg");
    }

    /// A keyword applies its option as the command line does; refused and
    /// unknown ones are errors naming them.
    #[test]
    fn keywords_apply_as_options_and_refusals_name_the_option() {
        let mut m = MergeArgs::new(String::new(), 0);
        m.apply_keyword("combine_rg", None).unwrap();
        m.apply_keyword("seed", Some("9")).unwrap();
        m.apply_keyword("name_lexicographic", None).unwrap();
        assert!(m.merge.combine_rg && m.merge.seed == 9 && m.sort.lexicographic);
        let e = m.apply_keyword("bed", Some("x.bed")).unwrap_err();
        assert!(e.to_string().starts_with("-L is not supported yet"), "{e}");
        let e = m.apply_keyword("help", None).unwrap_err();
        assert!(e.to_string().contains("--help (help=)"), "{e}");
        assert!(matches!(
            m.apply_keyword("nope", None),
            Err(ArgError::UnknownOption(_))
        ));
        let mut o = SortOptions::new(String::new());
        o.apply_keyword("max_memory", Some("2G".into())).unwrap();
        o.apply_keyword("markdup", None).unwrap();
        assert_eq!(o.max_memory.as_deref(), Some("2G"));
        let e = o
            .apply_keyword("input_fmt_option", Some("x=1".into()))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--input-fmt-option is not supported yet"),
            "{e}"
        );
    }
}
