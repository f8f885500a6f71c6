//! `alnsort markdup`: samtools markdup's command line and run (its option table, parser, help, and the streaming glue from the input reader through `alnsort_markdup::samtools` to the output sink).
//!
//! The input (SAM, BAM or CRAM; `-` is standard input) is read in batches
//! by the engine's input reader; the records go one by one, in input
//! order, to [`alnsort_markdup::samtools::Marker`], and the records it
//! hands back go to the same [`crate::output::Output`] as `alnsort sort`'s
//! (BAM/SAM/CRAM, `@PG`, index, the output removed on failure).

use crate::cleanup::Debris;
use crate::config::{self, Config};
use crate::error::{Context, Error, Result};
use crate::input::{next_batch, spawn_batches};
use crate::options::{self, ArgError, Group, OptSpec, SortOptions};
use crate::output;
use crate::sort_args;
use alnsort_bam::header::Header;
use alnsort_bam::reader::ScanOptions;
use alnsort_markdup::samtools::coords::{build_regex, strtol, CoordRegex};
use alnsort_markdup::samtools::{Barcode, Marker, Mode, Options, BARCODE_NAME_REGEX};
use std::ffi::OsString;
use std::io::Write as _;
use std::sync::Arc;

/// What an option of `alnsort markdup` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmdOptId {
    Remove,
    Stats,
    MaxLength,
    Supplementary,
    TagOriginal,
    TmpPrefix,
    OutputFmt,
    OutputFmtOption,
    Threads,
    StatsFile,
    OpticalDistance,
    Clear,
    Mode,
    Uncompressed,
    IncludeFails,
    NoPg,
    NoMultiDup,
    ReadCoords,
    CoordsOrder,
    BarcodeTag,
    BarcodeName,
    BarcodeRgx,
    UseReadGroups,
    Json,
    DuplicateCount,
    MoveUmi,
    UmiSeparator,
    Reference,
    InputFmtOption,
    WriteIndex,
    Verbosity,
    Help,
    Unsupported(&'static str),
}

impl options::OptionId for SmdOptId {
    fn refused(self) -> Option<&'static str> {
        match self {
            SmdOptId::Unsupported(why) => Some(why),
            _ => None,
        }
    }
}

/// One option of `alnsort markdup` ([`MARKDUP_OPTIONS`]).
pub type SmdSpec = OptSpec<SmdOptId>;

const fn spec(
    id: SmdOptId,
    short: Option<char>,
    long: Option<&'static str>,
    value: Option<&'static str>,
    help: &'static str,
    key: Option<&'static str>,
) -> SmdSpec {
    use SmdOptId::*;
    let group = match id {
        OutputFmt | OutputFmtOption | Uncompressed | NoPg | Reference | WriteIndex => Group::Output,
        Threads | TmpPrefix => Group::Resources,
        Unsupported(_) => Group::Unsupported,
        Help | Verbosity | InputFmtOption => Group::Other,
        _ => Group::Markdup,
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

/// Every option `alnsort markdup` knows (samtools markdup 1.24's, in its
/// usage order, then htslib's global options); the parser and the help
/// read it.
pub const MARKDUP_OPTIONS: &[SmdSpec] = &[
    spec(SmdOptId::Remove, Some('r'), None, None, "Remove duplicate reads.", Some("remove_duplicates")),
    spec(SmdOptId::MaxLength, Some('l'), None, Some("INT"),
         "Max read length (default 300 bases): the window duplicates are looked for in.", Some("max_length")),
    spec(SmdOptId::Supplementary, Some('S'), None, None,
         "Mark supplementary alignments of duplicates as duplicates (slower: a second pass over a temporary file).",
         Some("supplementary")),
    spec(SmdOptId::Stats, Some('s'), None, None, "Report stats (on standard error).", Some("stats")),
    spec(SmdOptId::StatsFile, Some('f'), None, Some("NAME"), "Write stats to named file. Implies -s.", Some("stats_file")),
    spec(SmdOptId::Json, None, Some("json"), None, "Output stats in JSON. Also implies -s.", None),
    spec(SmdOptId::TmpPrefix, Some('T'), None, Some("PREFIX"),
         "Where -S's temporary file goes: a private directory is made beside PREFIX (in it, when a directory).",
         Some("tmp_prefix")),
    spec(SmdOptId::OpticalDistance, Some('d'), None, Some("INT"),
         "Optical distance (if set, marks duplicates with a dt tag: SQ optical, LB library).",
         Some("optical_distance")),
    spec(SmdOptId::Clear, Some('c'), None, None, "Clear previous duplicate settings and tags.", Some("clear")),
    spec(SmdOptId::Mode, Some('m'), Some("mode"), Some("TYPE"),
         "Duplicate decision method for paired reads: t measure positions based on template start/end \
          (default), s measure positions based on sequence start.", None),
    spec(SmdOptId::Uncompressed, Some('u'), None, None, "Output uncompressed data.", Some("uncompressed")),
    spec(SmdOptId::IncludeFails, None, Some("include-fails"), None, "Include quality check failed reads.", None),
    spec(SmdOptId::NoPg, None, Some("no-PG"), None, "Do not add a PG line.", None),
    spec(SmdOptId::NoMultiDup, None, Some("no-multi-dup"), None, "Reduced duplicates of duplicates checking.", None),
    spec(SmdOptId::ReadCoords, None, Some("read-coords"), Some("STR"),
         "Regex for coords from read name (Rust regex syntax; POSIX extended in samtools).", None),
    spec(SmdOptId::CoordsOrder, None, Some("coords-order"), Some("STR"),
         "Order of regex elements: txy (default), tyx, xyt, yxt, xty, ytx, xy, yx; t is a part of the \
          read names that must be equal, x/y are coordinates.", None),
    spec(SmdOptId::BarcodeTag, None, Some("barcode-tag"), Some("STR"), "Use a barcode tag that duplicates must match.", None),
    spec(SmdOptId::BarcodeName, None, Some("barcode-name"), None,
         "Use the UMI/barcode in the read name (eighth colon delimited part).", None),
    spec(SmdOptId::BarcodeRgx, None, Some("barcode-rgx"), Some("STR"),
         "Regex for barcode in the readname (alternative to --barcode-name).", None),
    spec(SmdOptId::MoveUmi, None, Some("move-umi-to-tag"), None,
         "Move UMI from read name to RX tag (use with --barcode-name/--barcode-rgx); as samtools 1.24, \
          without -S only the records written at the end of the input are changed.", None),
    spec(SmdOptId::UmiSeparator, None, Some("umi-separator"), Some("CHAR"),
         "Separator for UMI (default ':').", None),
    spec(SmdOptId::UseReadGroups, None, Some("use-read-groups"), None, "Use the read group tags in duplicate matching.", None),
    spec(SmdOptId::TagOriginal, Some('t'), None, None,
         "Mark primary duplicates with the name of the original in a 'do' tag.", Some("tag_original")),
    spec(SmdOptId::DuplicateCount, None, Some("duplicate-count"), None,
         "Record the original primary read duplication count (include itself) in a 'dc' tag.", None),
    spec(SmdOptId::OutputFmt, Some('O'), Some("output-fmt"), Some("FORMAT[,OPT[=VAL]]..."),
         "Specify output format (SAM, BAM, CRAM).", None),
    spec(SmdOptId::OutputFmtOption, None, Some("output-fmt-option"), Some("OPT[=VAL]"),
         "Specify a single output file format option in the form of OPTION or OPTION=VALUE.", None),
    spec(SmdOptId::Reference, None, Some("reference"), Some("FILE"), "Reference sequence FASTA FILE (CRAM).", None),
    spec(SmdOptId::Threads, Some('@'), Some("threads"), Some("INT"), "Number of additional threads to use.", None),
    spec(SmdOptId::WriteIndex, None, Some("write-index"), None, "Automatically index the output files.", None),
    spec(SmdOptId::InputFmtOption, None, Some("input-fmt-option"), Some("OPT=VAL"),
         "Input format option: reference=FILE (as --reference).", None),
    spec(SmdOptId::Unsupported("the input's format is found from its contents"), None,
         Some("input-fmt"), Some("FORMAT"), "Refused: the input's format is found from its contents.", None),
    spec(SmdOptId::Verbosity, None, Some("verbosity"), Some("INT"), "Set level of verbosity.", None),
    spec(SmdOptId::Help, Some('h'), Some("help"), None, "Print this help and exit.", None),
];

/// `alnsort markdup --help`, rendered from [`MARKDUP_OPTIONS`].
pub fn markdup_help() -> String {
    let mut out = String::from(
        "Usage: alnsort markdup [options] <input.bam> <output.bam>\n\n\
         Marks duplicates as samtools markdup 1.24 does (same flags, tags and\n\
         statistics), streaming. The input must be coordinate sorted and must have\n\
         gone through fixmate with the mate scoring option on (samtools fixmate -m).\n\
         '-' is standard input or output.\n\nOptions:\n",
    );
    for s in MARKDUP_OPTIONS {
        options::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// `markdup` as the man page and completions show it
/// ([`crate::generate`]), from [`MARKDUP_OPTIONS`].
pub fn command_doc() -> crate::generate::CommandDoc {
    crate::generate::CommandDoc {
        name: "markdup",
        summary:
            "Mark duplicates in coordinate-sorted, fixmate'd input as samtools markdup 1.24 does \
                  (flags, tags, statistics), streaming.",
        usage: "alnsort markdup [options] <input.bam> <output.bam>".to_string(),
        options: MARKDUP_OPTIONS
            .iter()
            .map(crate::generate::OptDoc::of)
            .collect(),
    }
}

/// Parsed `alnsort markdup` arguments.
#[derive(Debug)]
pub struct MarkdupArgs {
    /// Input, output, format, threads in `alnsort sort`'s terms.
    pub sort: SortOptions,
    pub marking: Options,
    /// `-s`, `-f`, `--json`: statistics wanted.
    pub stats: bool,
    pub stats_file: Option<String>,
    pub json: bool,
    /// samtools' `COMMAND:` text (the command line as given).
    pub command_line: String,
}

/// What parsing produced.
#[derive(Debug)]
pub enum ParsedMarkdup {
    Run(Box<MarkdupArgs>),
    /// Print [`markdup_help`] and exit (`--help`: 0; no arguments: 1, as
    /// samtools' usage).
    Usage {
        error: bool,
    },
}

/// C `atoi`: the leading integer of `v`, 0 without one.
fn atoi(v: &str) -> i64 {
    strtol(v.as_bytes()).map_or(0, |(n, _)| n as i32 as i64)
}

/// Parses the arguments after `alnsort markdup` (`argv0`: the program name
/// as typed, which begins the `@PG` CL and the statistics' COMMAND).
pub fn parse_markdup(argv0: &str, rest: Vec<OsString>) -> Result<ParsedMarkdup, ArgError> {
    use lexopt::prelude::*;
    if rest.is_empty() {
        return Ok(ParsedMarkdup::Usage { error: true });
    }
    let command_line = sort_args::stringify(argv0, "markdup", &rest);
    let mut sort = SortOptions::new(command_line.clone());
    let mut m = Options::default();
    let (mut stats, mut json) = (false, false);
    let mut stats_file = None;
    let mut read_coords: Option<String> = None;
    let mut coords_order = "txy".to_string();
    let mut barcode_tag: Option<String> = None;
    let mut barcode_name = false;
    let mut barcode_rgx: Option<String> = None;
    let mut move_umi = false;
    let mut umi_sep = b':';
    let mut positional = Vec::new();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let s = sort_args::find_option(MARKDUP_OPTIONS, &arg)?;
        if let Some(refusal) = s.refusal() {
            return Err(refusal);
        }
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        let v = || value.clone().unwrap_or_default();
        use SmdOptId::*;
        match s.id {
            Remove => m.remove_duplicates = true,
            Stats => stats = true,
            MaxLength => m.max_length = atoi(&v()),
            Supplementary => m.supplementary = true,
            TagOriginal => m.tag_original = true,
            TmpPrefix => sort.tmp_prefix = Some(v()),
            OutputFmt => options::parse_output_fmt(&v(), &mut sort)?,
            OutputFmtOption => options::parse_fmt_option(&v(), &mut sort)?,
            Threads => sort.threads = options::parse_int("-@", &v())?.max(0) as usize,
            StatsFile => {
                stats_file = Some(v());
                stats = true;
            }
            OpticalDistance => m.optical_distance = atoi(&v()),
            Clear => m.clear = true,
            Mode => {
                m.mode = match v().as_str() {
                    "t" => self::Mode::Template,
                    "s" => self::Mode::Sequence,
                    other => {
                        return Err(ArgError::Invalid(format!(
                            "unknown mode '{other}' (-m takes t or s)"
                        )))
                    }
                }
            }
            Uncompressed => sort.uncompressed = true,
            IncludeFails => m.include_fails = true,
            NoPg => sort.no_pg = true,
            NoMultiDup => m.multi_dup = false,
            ReadCoords => read_coords = Some(v()),
            CoordsOrder => coords_order = v(),
            BarcodeTag => barcode_tag = Some(v()),
            BarcodeName => barcode_name = true,
            BarcodeRgx => {
                barcode_name = true;
                barcode_rgx = Some(v());
            }
            UseReadGroups => m.read_groups = true,
            Json => {
                json = true;
                stats = true;
            }
            DuplicateCount => m.duplicate_count = true,
            MoveUmi => move_umi = true,
            UmiSeparator => umi_sep = v().bytes().next().unwrap_or(0),
            Reference => sort.reference = Some(v().into()),
            InputFmtOption => match v().split_once('=') {
                Some(("reference", file)) => sort.reference = Some(file.into()),
                _ => {
                    return Err(ArgError::Invalid(format!(
                        "--input-fmt-option {}: alnsort takes reference=FILE only",
                        v()
                    )))
                }
            },
            WriteIndex => sort.write_index = true,
            Verbosity => sort.verbosity = options::parse_int("--verbosity", &v())? as i32,
            Help => return Ok(ParsedMarkdup::Usage { error: false }),
            Unsupported(_) => unreachable!("refused above"),
        }
    }
    if positional.len() < 2 {
        return Ok(ParsedMarkdup::Usage { error: true });
    }
    if positional.len() > 2 {
        return Err(ArgError::Invalid(format!(
            "expected an input and an output, got {} file names ({})",
            positional.len(),
            positional.join(" ")
        )));
    }
    if barcode_tag.is_some() && barcode_name {
        return Err(ArgError::Invalid(
            "cannot specify --barcode-tag and --barcode-name (or --barcode-rgx) at same time"
                .into(),
        ));
    }
    if move_umi && !barcode_name {
        return Err(ArgError::Invalid(
            "--move-umi-to-tag requires --barcode-name or --barcode-rgx".into(),
        ));
    }
    if move_umi {
        m.move_umi = Some(umi_sep);
    }
    if let Some(rx) = read_coords {
        m.read_coords = Some(
            CoordRegex::new(&rx, &coords_order)
                .map_err(|e| ArgError::Invalid(format!("--read-coords {rx}: {e}")))?,
        );
    }
    if let Some(tag) = barcode_tag {
        let b = tag.as_bytes();
        if b.len() < 2 {
            return Err(ArgError::Invalid(format!(
                "--barcode-tag {tag}: a tag has two characters"
            )));
        }
        m.barcode = Barcode::Tag([b[0], b[1]]);
    } else if barcode_name {
        let pattern = barcode_rgx.as_deref().unwrap_or(BARCODE_NAME_REGEX);
        let rx = build_regex(pattern).map_err(|e| ArgError::Value {
            what: format!("barcode regex fail on {pattern}"),
            source: Box::new(e),
        })?;
        m.barcode = Barcode::Regex(rx);
    }
    sort.input = positional[0].clone();
    sort.inputs = vec![positional[0].clone()];
    sort.output = positional[1].clone();
    Ok(ParsedMarkdup::Run(Box::new(MarkdupArgs {
        sort,
        marking: m,
        stats,
        stats_file,
        json,
        command_line,
    })))
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct MarkdupReport {
    pub records: u64,
    pub stats: alnsort_markdup::samtools::Stats,
}

/// The `@HD SO` of a header.
fn sort_order(header: &Header) -> Option<String> {
    let hd = header.lines().iter().find(|l| l.starts_with(b"@HD"))?;
    hd.split(|&b| b == b'\t')
        .find(|f| f.starts_with(b"SO:"))
        .map(|f| String::from_utf8_lossy(&f[3..]).into_owned())
}

/// The IDs of the header's `@RG` lines, in order.
fn read_group_ids(header: &Header) -> Vec<Vec<u8>> {
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

/// Runs `alnsort markdup`: the output in place and the statistics
/// written, or an error with the output removed.
pub fn run(a: &MarkdupArgs, debris: &Debris) -> Result<MarkdupReport> {
    let r = run_inner(a, debris);
    if r.is_err() {
        debris.remove_all();
    }
    r
}

fn run_inner(a: &MarkdupArgs, debris: &Debris) -> Result<MarkdupReport> {
    let cfg: Config = config::resolve(&a.sort)?;
    cfg.print_warnings();
    let pool = crate::worker_pool(cfg.threads, "alnsort-worker")?;
    let input = crate::input::open_with_refs(&a.sort.input, Arc::clone(&pool), &cfg.refs)?;
    let name = input.name.clone();
    let header = input.header.clone();
    if sort_order(&header).as_deref() == Some("queryname") {
        return Err(Error::input(
            &name,
            "the header says SO:queryname: samtools markdup needs coordinate-sorted input \
             (samtools: \"error, queryname sorted, must be sorted by coordinate.\")",
        ));
    }
    let rgs = read_group_ids(&header);
    let rg_refs: Vec<&[u8]> = rgs.iter().map(Vec::as_slice).collect();
    let mut marker = Marker::new(a.marking.clone(), &rg_refs);
    let mut out_header = header.clone();
    if let Some(cl) = &cfg.pg {
        out_header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
    }
    let dest = output::Destinations::prepare(&cfg, debris)?;
    let mut out =
        output::Output::create(&cfg, dest, Arc::new(out_header), Arc::clone(&pool), debris)?;
    let dec = crate::mark_in_order::decoder_for(&name, &header, &cfg);
    let depth = pool.current_num_threads() * 2 + 2;
    let (_, _, records) = input.into_records(ScanOptions::default());
    let (mut batches, _) = spawn_batches(&name, records, &pool, "read", depth, move |raw| {
        let mut bytes = Vec::with_capacity(raw.bytes());
        let mut starts = Vec::with_capacity(raw.voffsets.len());
        let mut warnings = Vec::new();
        dec.decode(
            raw,
            |_key, rec| {
                starts.push(bytes.len());
                bytes.extend_from_slice(rec);
                Ok(())
            },
            |w| warnings.push(w),
        )?;
        Ok((bytes, starts, warnings))
    })?;
    // -S: the first pass's records go to a temporary file, read back for
    // the second pass (as samtools does).
    let mut first_pass = match marker.needs_second_pass() {
        true => Some(FirstPass::create(&cfg, debris)?),
        false => None,
    };
    let mut n = 0u64;
    let drain = |marker: &mut Marker,
                 out: &mut output::Output,
                 first_pass: &mut Option<FirstPass>|
     -> Result<()> {
        for w in marker.take_warnings() {
            eprintln!("alnsort markdup: {w}");
        }
        while let Some(rec) = marker.pop_ready() {
            match first_pass {
                Some(f) => f.write(&rec)?,
                None => out.write_record(&rec)?,
            }
        }
        Ok(())
    };
    let ref_name = |tid: i32| match usize::try_from(tid).ok().and_then(|t| header.refs().get(t)) {
        Some(r) => String::from_utf8_lossy(&r.name).into_owned(),
        None => "*".to_string(),
    };
    let failed = |e: alnsort_markdup::samtools::Error| {
        match e {
        alnsort_markdup::samtools::Error::NotSorted {
            record,
            name: qname,
            tid,
            pos,
            prev_tid,
            prev_pos,
        } => Error::input(
            &name,
            format!(
                "record {record} ({qname}) at {}:{pos} comes after {}:{prev_pos}: not in coordinate \
                 sorted order (samtools markdup: \"error, not in coordinate sorted order.\"); sort it first",
                ref_name(tid),
                ref_name(prev_tid)
            ),
        ),
        e => Error::Context {
            what: format!("{name}: samtools markdup"),
            source: Box::new(Error::from(e)),
        },
    }
    };
    while let Some(r) = next_batch(&mut batches, &name, n + 1, |(_, _, w)| w) {
        let (bytes, starts, _) = r?;
        for (i, &s) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
            n += 1;
            marker.push(bytes[s..end].to_vec()).map_err(failed)?;
            drain(&mut marker, &mut out, &mut first_pass)?;
        }
    }
    marker.finish().map_err(failed)?;
    drain(&mut marker, &mut out, &mut first_pass)?;
    if let Some(f) = first_pass {
        f.replay(|rec| match marker.second_pass(rec) {
            Some(r) => out.write_record(&r),
            None => Ok(()),
        })?;
    }
    let stats = marker.stats();
    for w in marker.take_warnings() {
        eprintln!("alnsort markdup: {w}");
    }
    out.finish()?;
    if a.stats {
        write_stats(a, &stats)?;
    }
    Ok(MarkdupReport { records: n, stats })
}

/// `-S`'s temporary file of first-pass records (BAM records with their
/// `block_size`, back to back), in a private temporary directory.
struct FirstPass {
    _dir: crate::cleanup::TempDir,
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl FirstPass {
    fn create(cfg: &Config, debris: &Debris) -> Result<FirstPass> {
        let dir = crate::cleanup::TempDir::new(&cfg.temp_parent, "alnsort", debris).with_context(
            || {
                format!(
                    "cannot create a temporary directory in {}",
                    cfg.temp_parent.display()
                )
            },
        )?;
        let path = dir.path().join("markdup-first-pass.bin");
        let file = std::fs::File::create(&path)
            .with_context(|| format!("{}: creating the -S pass file", path.display()))?;
        Ok(FirstPass {
            _dir: dir,
            path,
            file: std::io::BufWriter::with_capacity(1 << 20, file),
        })
    }

    fn write(&mut self, rec: &[u8]) -> Result<()> {
        self.file
            .write_all(rec)
            .with_context(|| format!("{}: writing the -S pass file", self.path.display()))
    }

    /// Reads the records back, in order, handing each to `each`.
    fn replay(mut self, mut each: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
        use std::io::Read as _;
        let what = |p: &std::path::Path| format!("{}: reading the -S pass file back", p.display());
        self.file.flush().with_context(|| what(&self.path))?;
        let f = std::fs::File::open(&self.path).with_context(|| what(&self.path))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, f);
        loop {
            let mut size = [0u8; 4];
            match r.read_exact(&mut size) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e).with_context(|| what(&self.path)),
            }
            let len = u32::from_le_bytes(size) as usize;
            let mut rec = Vec::with_capacity(4 + len);
            rec.extend_from_slice(&size);
            rec.resize(4 + len, 0);
            r.read_exact(&mut rec[4..])
                .with_context(|| what(&self.path))?;
            each(rec)?;
        }
    }
}

/// The statistics to `-f FILE` or standard error, as samtools writes them
/// (a file that cannot be created: samtools' warning, then standard error).
fn write_stats(a: &MarkdupArgs, stats: &alnsort_markdup::samtools::Stats) -> Result<()> {
    let (text, warnings) = if a.json {
        stats.json(&a.command_line)
    } else {
        stats.text(&a.command_line)
    };
    for w in warnings {
        eprintln!("alnsort markdup: {w}");
    }
    if let Some(path) = &a.stats_file {
        match std::fs::File::create(path) {
            Ok(mut f) => {
                return f
                    .write_all(text.as_bytes())
                    .with_context(|| format!("{path}: writing the statistics"));
            }
            Err(_) => eprintln!("alnsort markdup: warning, cannot write stats to {path}."),
        }
    }
    eprint!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::OptionName;

    fn parse(args: &[&str]) -> Result<ParsedMarkdup, ArgError> {
        parse_markdup("alnsort", args.iter().map(OsString::from).collect())
    }

    #[test]
    fn help_lists_every_option_within_80_columns() {
        let h = markdup_help();
        for s in MARKDUP_OPTIONS {
            assert!(h.contains(&s.synopsis()), "{} missing", s.synopsis());
        }
        assert!(h.lines().all(|l| l.chars().count() <= 80), "{h}");
    }

    #[test]
    fn options_map_as_samtools_reads_them() {
        let ParsedMarkdup::Run(a) = parse(&[
            "-rS",
            "-l",
            "250",
            "-d100",
            "-t",
            "-m",
            "s",
            "--include-fails",
            "--no-multi-dup",
            "-f",
            "st.txt",
            "--json",
            "--barcode-tag",
            "BC",
            "--use-read-groups",
            "--duplicate-count",
            "-@",
            "3",
            "in.bam",
            "out.sam",
        ])
        .unwrap() else {
            panic!("not a run")
        };
        let m = &a.marking;
        assert!(m.remove_duplicates && m.supplementary && m.tag_original && m.include_fails);
        assert!(!m.multi_dup && m.read_groups && m.duplicate_count);
        assert_eq!(
            (m.max_length, m.optical_distance, m.mode),
            (250, 100, Mode::Sequence)
        );
        assert!(matches!(m.barcode, Barcode::Tag(t) if t == *b"BC"));
        assert!(a.stats && a.json);
        assert_eq!(a.stats_file.as_deref(), Some("st.txt"));
        assert_eq!(
            (a.sort.input.as_str(), a.sort.output.as_str()),
            ("in.bam", "out.sam")
        );
        assert_eq!(a.sort.threads, 3);
        assert!(a.command_line.starts_with("alnsort markdup -rS -l 250"));
        // atoi: a value that is not a number is 0, as samtools reads it.
        let ParsedMarkdup::Run(a) = parse(&["-d", "x", "i", "o"]).unwrap() else {
            panic!("not a run")
        };
        assert_eq!(a.marking.optical_distance, 0);
    }

    #[test]
    fn refusals_and_usage() {
        assert!(matches!(
            parse(&[]),
            Ok(ParsedMarkdup::Usage { error: true })
        ));
        assert!(matches!(
            parse(&["in.bam"]),
            Ok(ParsedMarkdup::Usage { error: true })
        ));
        assert!(matches!(
            parse(&["--help"]),
            Ok(ParsedMarkdup::Usage { error: false })
        ));
        let e = parse(&["--move-umi-to-tag", "i", "o"]).unwrap_err();
        assert!(e.to_string().contains("--move-umi-to-tag"), "{e}");
        let e = parse(&["--input-fmt", "sam", "i", "o"]).unwrap_err();
        assert!(e.to_string().contains("--input-fmt"), "{e}");
        assert!(parse(&["-m", "x", "i", "o"]).is_err());
        assert!(parse(&["--barcode-tag", "BC", "--barcode-name", "i", "o"]).is_err());
        assert!(parse(&["--read-coords", "(", "i", "o"]).is_err());
        assert!(parse(&["--read-coords", "(a)(b)", "--coords-order", "q", "i", "o"]).is_err());
    }
}
