//! `alnsort MarkDuplicates`: Picard MarkDuplicates' own command line, so a
//! pipeline that runs `picard MarkDuplicates I=in.bam O=out.bam M=m.txt`
//! (or `--INPUT in.bam --OUTPUT out.bam --METRICS_FILE m.txt`) swaps one
//! word. The answer is Picard 3.4.0's (flags, `DT` and `PG` tags, metrics)
//! and the output keeps the input's order, as Picard writes it.
//!
//! One table, [`PICARD_OPTIONS`], lists every option of Picard's
//! MarkDuplicates: the parser ([`parse`]) accepts exactly these names (long
//! or short, in either syntax), `alnsort MarkDuplicates --help` is rendered
//! from it ([`help`]), and each entry says what alnsort does with it: the
//! engine setting it maps to, accepted because it does not change the
//! output (memory and logging knobs of the JVM program), or refused by
//! name when alnsort cannot honour the value given.
//!
//! The run ([`crate::run::mark_in_order::run`]) reads the input twice
//! instead of sorting it: a first pass collects the read ends
//! ([`crate::markdup::marker::Marker`]) and decides, a second copies the records in
//! their order with 0x400 (and the tags) set by input ordinal.
//!
//! Sizes: `parse` is one function of about 360 lines because it is one loop
//! over Picard's two syntaxes whose `match` applies each option's `Action`
//! of the table: the effects of the table's 80 rows in one place, each a
//! few lines, in the table's order.

use crate::error::ArgError;
use crate::options::markdup::MdOpt;
use crate::options::sort::{OutFormat, SortOptions};
use crate::options::table::{wrap, HELP_WIDTH};
use std::ffi::OsString;
use std::path::PathBuf;

/// What an option of Picard's command line does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Input,
    Output,
    Metrics,
    /// A boolean of duplicate marking (true: the option given).
    MdFlag(MdOpt),
    /// A valued option of duplicate marking, its value translated.
    MdValue(MdOpt),
    AssumeSortOrder,
    AssumeSorted,
    CreateIndex,
    CreateMd5,
    TmpDir,
    CompressionLevel,
    Reference,
    Comment,
    AddPgTag,
    PgId,
    PgName,
    PgVersion,
    PgCommandLine,
    /// alnsort's worker threads (not an option of Picard's).
    Threads,
    /// alnsort's `--flagstat`, `--flagstat-format`, `--idxstats` (not
    /// options of Picard's, so not echoed in the metrics' command line).
    Flagstat,
    FlagstatFormat,
    Idxstats,
    /// Accepted, any value of its type: it tunes how the JVM program works
    /// (memory, files, logging), not what it writes.
    Neutral,
    /// Accepted with its default value only (given here as Picard writes
    /// it); any other value is refused with the reason.
    DefaultOnly(&'static str, &'static str),
    /// Refused whatever its value, with the reason.
    Refused(&'static str),
    Help,
    Version,
}

/// The type of an option's value, as Picard's help names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PicardValueKind {
    Boolean,
    Text,
    Integer,
}

/// One option of Picard's MarkDuplicates.
#[derive(Debug)]
pub struct PicardOpt {
    pub name: &'static str,
    pub short: Option<&'static str>,
    /// The value's type as Picard's help shows it (`File`, `Boolean`, ...).
    pub value: &'static str,
    pub kind: PicardValueKind,
    pub action: Action,
    pub help: &'static str,
}

impl PicardOpt {
    fn takes_many(&self) -> bool {
        matches!(
            self.action,
            Action::Input | Action::TmpDir | Action::Comment
        )
    }
}

const BOOL: PicardValueKind = PicardValueKind::Boolean;
const TEXT: PicardValueKind = PicardValueKind::Text;
const INT: PicardValueKind = PicardValueKind::Integer;

macro_rules! opt {
    ($name:expr, $short:expr, $value:expr, $kind:expr, $action:expr, $help:expr) => {
        PicardOpt {
            name: $name,
            short: $short,
            value: $value,
            kind: $kind,
            action: $action,
            help: $help,
        }
    };
}

/// Every option of Picard 3.4.0's MarkDuplicates (its `--help`, hidden
/// ones included), in the order its help lists them, then alnsort's one
/// addition (`THREADS`).
pub const PICARD_OPTIONS: &[PicardOpt] = &[
    opt!("INPUT", Some("I"), "File", TEXT, Action::Input,
         "Input SAM, BAM or CRAM: coordinate-sorted (@HD SO:coordinate) or grouped by read name \
          (SO:queryname, or ASSUME_SORT_ORDER=queryname). A file, read twice (not standard input). \
          Given more than once, the inputs are merged as Picard merges them (htsjdk's header merge, \
          records in the first input's order)."),
    opt!("METRICS_FILE", Some("M"), "File", TEXT, Action::Metrics,
         "Where the duplication metrics go (Picard's DuplicationMetrics text). Required."),
    opt!("OUTPUT", Some("O"), "File", TEXT, Action::Output,
         "The output, in the input's order: BAM, or SAM/CRAM by its extension (.sam, .cram); \
          /dev/stdout or - for standard output (BAM). Required."),
    opt!("ADD_PG_TAG_TO_READS", None, "Boolean", BOOL, Action::AddPgTag,
         "Add PG:Z:<the @PG ID> to every record, as Picard does [true]."),
    opt!("ASSUME_SORT_ORDER", Some("ASO"), "SortOrder", TEXT, Action::AssumeSortOrder,
         "coordinate or queryname: read the input as sorted so whatever its @HD says. queryname \
          means grouped by name; the output then says SO:unknown GO:query, as Picard's."),
    opt!("ASSUME_SORTED", Some("AS"), "Boolean", BOOL, Action::AssumeSorted,
         "true: read the input as coordinate-sorted whatever its @HD says [false]."),
    opt!("BARCODE_TAG", None, "String", TEXT, Action::MdValue(MdOpt::BarcodeTag),
         "Duplicates must also share this tag's UMI (a string of ATCGN-) [null]."),
    opt!("CLEAR_DT", None, "Boolean", BOOL,
         Action::DefaultOnly("true", "alnsort always drops the input's DT tags, as Picard's default does"),
         "Drop the input's DT tags [true]; only true is supported."),
    opt!("COMMENT", Some("CO"), "String", TEXT, Action::Comment,
         "An @CO line to add to the output's header; may be given more than once."),
    opt!("DUPLEX_UMI", None, "Boolean", BOOL,
         Action::DefaultOnly("false", "duplex UMIs are not implemented"),
         "Only false is supported."),
    opt!("DUPLICATE_SCORING_STRATEGY", Some("DS"), "ScoringStrategy", TEXT,
         Action::MdValue(MdOpt::DuplicateScoring),
         "SUM_OF_BASE_QUALITIES (the default) or TOTAL_MAPPED_REFERENCE_LENGTH; RANDOM is refused \
          (Java's random scores cannot be reproduced)."),
    opt!("FLOW_DUP_STRATEGY", None, "FLOW_DUPLICATE_SELECTION_STRATEGY", TEXT,
         Action::DefaultOnly("FLOW_QUALITY_SUM_STRATEGY", "flow-based read modes are not implemented"),
         "Only the default, FLOW_QUALITY_SUM_STRATEGY."),
    opt!("FLOW_EFFECTIVE_QUALITY_THRESHOLD", None, "Integer", INT,
         Action::DefaultOnly("15", "flow-based read modes are not implemented"),
         "Only the default, 15."),
    opt!("FLOW_MODE", None, "Boolean", BOOL,
         Action::DefaultOnly("false", "flow-based read modes are not implemented"),
         "Only false is supported."),
    opt!("FLOW_Q_IS_KNOWN_END", None, "Boolean", BOOL,
         Action::DefaultOnly("false", "flow-based read modes are not implemented"),
         "Only false is supported."),
    opt!("FLOW_SKIP_FIRST_N_FLOWS", None, "Integer", INT,
         Action::DefaultOnly("0", "flow-based read modes are not implemented"),
         "Only the default, 0."),
    opt!("FLOW_UNPAIRED_END_UNCERTAINTY", None, "Integer", INT,
         Action::DefaultOnly("0", "flow-based read modes are not implemented"),
         "Only the default, 0."),
    opt!("FLOW_UNPAIRED_START_UNCERTAINTY", None, "Integer", INT,
         Action::DefaultOnly("0", "flow-based read modes are not implemented"),
         "Only the default, 0."),
    opt!("FLOW_USE_END_IN_UNPAIRED_READS", None, "Boolean", BOOL,
         Action::DefaultOnly("false", "flow-based read modes are not implemented"),
         "Only false is supported."),
    opt!("FLOW_USE_UNPAIRED_CLIPPED_END", None, "Boolean", BOOL,
         Action::DefaultOnly("false", "flow-based read modes are not implemented"),
         "Only false is supported."),
    opt!("MAX_FILE_HANDLES_FOR_READ_ENDS_MAP", Some("MAX_FILE_HANDLES"), "Integer", INT,
         Action::Neutral, "Accepted; no effect (alnsort's own spill files, --max-memory's budget)."),
    opt!("MAX_OPTICAL_DUPLICATE_SET_SIZE", None, "Long", INT,
         Action::DefaultOnly("300000", "alnsort applies Picard's default limit only"),
         "Only the default, 300000."),
    opt!("MAX_SEQUENCES_FOR_DISK_READ_ENDS_MAP", Some("MAX_SEQS"), "Integer", INT,
         Action::Neutral, "Accepted; no effect."),
    opt!("MOLECULAR_IDENTIFIER_TAG", None, "String", TEXT,
         Action::DefaultOnly("null", "molecular identifier tags are not written"),
         "Only null is supported."),
    opt!("OPTICAL_DUPLICATE_PIXEL_DISTANCE", None, "Integer", INT,
         Action::MdValue(MdOpt::OpticalDistance),
         "Pixel distance within which duplicates on one tile are optical [100]."),
    opt!("PROGRAM_GROUP_COMMAND_LINE", Some("PG_COMMAND"), "String", TEXT, Action::PgCommandLine,
         "CL of the @PG line [alnsort's command line]."),
    opt!("PROGRAM_GROUP_NAME", Some("PG_NAME"), "String", TEXT, Action::PgName,
         "PN of the @PG line [MarkDuplicates]."),
    opt!("PROGRAM_GROUP_VERSION", Some("PG_VERSION"), "String", TEXT, Action::PgVersion,
         "VN of the @PG line [alnsort's version]."),
    opt!("PROGRAM_RECORD_ID", Some("PG"), "String", TEXT, Action::PgId,
         "ID of the @PG line (made unique as htsjdk does: ID.N) [MarkDuplicates]; \
          null: no @PG line and no PG tags."),
    opt!("READ_NAME_REGEX", None, "String", TEXT, Action::MdValue(MdOpt::ReadNameRegex),
         "A regex matching the whole read name whose groups 1-3 are tile, x and y (Java syntax \
          shared with Rust's regex crate), or null: no optical duplicates [the last three \
          ':'-separated fields]."),
    opt!("READ_ONE_BARCODE_TAG", None, "String", TEXT, Action::MdValue(MdOpt::ReadOneBarcodeTag),
         "Duplicates must also share the first read's value of this tag [null]."),
    opt!("READ_TWO_BARCODE_TAG", None, "String", TEXT, Action::MdValue(MdOpt::ReadTwoBarcodeTag),
         "Duplicates must also share the second read's value of this tag [null]."),
    opt!("REMOVE_DUPLICATES", None, "Boolean", BOOL, Action::MdFlag(MdOpt::RemoveDuplicates),
         "Leave duplicates out of the output [false]."),
    opt!("REMOVE_SEQUENCING_DUPLICATES", None, "Boolean", BOOL,
         Action::MdFlag(MdOpt::RemoveSequencingDuplicates),
         "Leave optical duplicates out of the output, mark the others [false]."),
    opt!("SORTING_COLLECTION_SIZE_RATIO", None, "Double", TEXT, Action::Neutral,
         "Accepted; no effect."),
    opt!("TAG_DUPLICATE_SET_MEMBERS", None, "Boolean", BOOL,
         Action::DefaultOnly("false", "DI/DS duplicate-set tags are not written"),
         "Only false is supported."),
    opt!("TAGGING_POLICY", None, "DuplicateTaggingPolicy", TEXT, Action::MdValue(MdOpt::TaggingPolicy),
         "DontTag (the default), OpticalOnly (DT:Z:SQ on optical duplicates) or All (also \
          DT:Z:LB on the others)."),
    opt!("arguments_file", None, "File", TEXT,
         Action::Refused("argument files are not read; give the options on the command line"),
         "Refused."),
    opt!("COMPRESSION_LEVEL", None, "Integer", INT, Action::CompressionLevel,
         "BGZF level 0-9 of BAM output [5, Picard's]."),
    opt!("CREATE_INDEX", None, "Boolean", BOOL, Action::CreateIndex,
         "Write a BAI beside coordinate-sorted BAM output, named as Picard names it (out.bam: \
          out.bai) [false]. Other outputs get none, as with Picard."),
    opt!("CREATE_MD5_FILE", None, "Boolean", BOOL, Action::CreateMd5,
         "Write the output's MD5 (32 hex digits) to OUTPUT.md5, as htsjdk does [false]."),
    opt!("MAX_RECORDS_IN_RAM", None, "Integer", INT, Action::Neutral,
         "Accepted; no effect (memory is -Xmx's budget)."),
    opt!("QUIET", None, "Boolean", BOOL, Action::Neutral, "Accepted; no effect."),
    opt!("REFERENCE_SEQUENCE", Some("R"), "File", TEXT, Action::Reference,
         "Reference FASTA for CRAM input and output."),
    opt!("TMP_DIR", None, "File", TEXT, Action::TmpDir,
         "Directory for temporary files (the first one given) [$TMPDIR, -Djava.io.tmpdir]."),
    opt!("USE_JDK_DEFLATER", Some("use_jdk_deflater"), "Boolean", BOOL, Action::Neutral,
         "Accepted; no effect."),
    opt!("USE_JDK_INFLATER", Some("use_jdk_inflater"), "Boolean", BOOL, Action::Neutral,
         "Accepted; no effect."),
    opt!("VALIDATION_STRINGENCY", None, "ValidationStringency", TEXT, Action::Neutral,
         "STRICT, LENIENT or SILENT: accepted; alnsort always checks every record and stops at \
          the first malformed one, naming it."),
    opt!("VERBOSITY", None, "LogLevel", TEXT, Action::Neutral, "Accepted; no effect."),
    opt!("help", Some("h"), "Boolean", BOOL, Action::Help, "Print this help and exit."),
    opt!("version", None, "Boolean", BOOL, Action::Version, "Print the version and exit."),
    opt!("showHidden", None, "Boolean", BOOL, Action::Neutral, "Accepted; no effect."),
    opt!("THREADS", None, "Integer", INT, Action::Threads,
         "alnsort addition: worker threads [1]."),
    opt!("FLAGSTAT", Some("flagstat"), "File", TEXT, Action::Flagstat,
         "alnsort addition (also --flagstat FILE): write to FILE the text `samtools flagstat` \
          1.24 prints for the output, counted as the records are written."),
    opt!("FLAGSTAT_FORMAT", Some("flagstat-format"), "String", TEXT, Action::FlagstatFormat,
         "alnsort addition: default, json or tsv (samtools flagstat -O's forms) [default]."),
    opt!("IDXSTATS", Some("idxstats"), "File", TEXT, Action::Idxstats,
         "alnsort addition (also --idxstats FILE): write to FILE the table `samtools idxstats` \
          1.24 prints for the output: from the index's counts with CREATE_INDEX=true on \
          coordinate-sorted BAM (OUT.bai is where samtools looks), else as samtools' scan gives \
          it; an output samtools would call not position sorted fails the run."),
];

/// What Picard-syntax parsing produced.
#[derive(Debug)]
pub enum ParsedPicard {
    Run(Box<PicardRun>),
    Help,
    Version,
}

/// Which order the input is read in (Picard's two semantics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssumedOrder {
    Coordinate,
    Queryname,
}

/// The @PG line and the records' PG tags.
#[derive(Debug, Clone, Default)]
pub struct PgSpec {
    /// `None`: PROGRAM_RECORD_ID=null (no @PG line, no PG tags).
    pub id: Option<String>,
    pub name: String,
    pub version: Option<String>,
    pub command_line: Option<String>,
    pub tag_reads: bool,
}

/// A parsed `alnsort MarkDuplicates` command line.
#[derive(Debug)]
pub struct PicardRun {
    /// The engine's options it maps to (output, level, threads, memory,
    /// temporary directory, duplicate marking).
    pub sort: SortOptions,
    pub inputs: Vec<String>,
    pub metrics: String,
    pub assume: Option<AssumedOrder>,
    pub create_index: bool,
    /// CREATE_MD5_FILE: the output's MD5 in OUTPUT.md5.
    pub create_md5: bool,
    pub pg: PgSpec,
    pub comments: Vec<String>,
    /// The options as Picard names them (`NAME=VALUE`, in the order given,
    /// other than INPUT, OUTPUT and METRICS_FILE), for the metrics header.
    pub given: Vec<(String, String)>,
}

fn lookup(name: &str) -> Option<&'static PicardOpt> {
    PICARD_OPTIONS
        .iter()
        .find(|o| o.name == name || o.short == Some(name))
}

/// Picard's booleans: `true` or `false`, in any case.
fn parse_bool(opt: &PicardOpt, v: &str) -> Result<bool, ArgError> {
    match v.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ArgError::Invalid(format!(
            "{}={v}: expected true or false",
            opt.name
        ))),
    }
}

fn parse_integer(opt: &PicardOpt, v: &str) -> Result<i64, ArgError> {
    v.trim()
        .parse::<i64>()
        .map_err(|_| ArgError::Invalid(format!("{}={v}: expected a whole number", opt.name)))
}

/// Whether `v` is the default `default` (as Picard would parse both).
fn is_default(opt: &PicardOpt, v: &str, default: &str) -> Result<bool, ArgError> {
    Ok(match opt.kind {
        PicardValueKind::Boolean => parse_bool(opt, v)? == parse_bool(opt, default)?,
        PicardValueKind::Integer => parse_integer(opt, v)? == parse_integer(opt, default)?,
        PicardValueKind::Text => v == default,
    })
}

/// The value a JVM option `-Xmx4g` gives `--max-memory` (`4G`).
fn java_size(v: &str) -> String {
    v.to_ascii_uppercase()
}

/// Parses the arguments after `alnsort MarkDuplicates`. `command_line` is
/// the whole command as typed (the @PG CL and the metrics' second line).
/// Both of Picard's syntaxes are read, even mixed: `NAME=VALUE` (the legacy
/// one; NAME long or short), and `--NAME VALUE` / `-SHORT VALUE` (a boolean
/// given without a value is true). The JVM's own options, which Picard's
/// launcher script takes from anywhere on its command line, are read too:
/// `-Xmx` is the memory budget (`--max-memory`), `-Djava.io.tmpdir` the
/// default TMP_DIR, and other `-X`/`-D` settings are accepted without effect.
pub fn parse(command_line: String, args: Vec<OsString>) -> Result<ParsedPicard, ArgError> {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| ArgError::Invalid(format!("argument {a:?} is not valid UTF-8")))
        })
        .collect::<Result<_, _>>()?;
    let mut pairs: Vec<(&'static PicardOpt, Option<String>)> = Vec::new();
    let mut java_tmp: Option<String> = None;
    let mut xmx: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if let Some(size) = a.strip_prefix("-Xmx") {
            xmx = Some(java_size(size));
            continue;
        }
        if let Some(prop) = a.strip_prefix("-D") {
            if let Some(dir) = prop.strip_prefix("java.io.tmpdir=") {
                java_tmp = Some(dir.to_string());
            }
            continue;
        }
        if a.starts_with("-X") {
            continue;
        }
        let (name, inline) = if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            }
        } else if let Some(short) = a.strip_prefix('-') {
            (short, None)
        } else if let Some((n, v)) = a.split_once('=') {
            (n, Some(v.to_string()))
        } else {
            return Err(ArgError::Invalid(format!(
                "'{a}' is not an option: Picard's options are NAME=VALUE or --NAME VALUE \
                 (INPUT, OUTPUT and METRICS_FILE are named: I=in.bam O=out.bam M=metrics.txt)"
            )));
        };
        let Some(opt) = lookup(name) else {
            return Err(ArgError::UnknownOption(name.to_string()));
        };
        let value = match (inline, opt.kind) {
            (Some(v), _) => Some(v),
            (None, PicardValueKind::Boolean) => match args.get(i) {
                Some(v) if matches!(v.to_ascii_lowercase().as_str(), "true" | "false") => {
                    i += 1;
                    Some(v.clone())
                }
                _ => None,
            },
            (None, _) => match args.get(i) {
                Some(v) => {
                    i += 1;
                    Some(v.clone())
                }
                None => {
                    return Err(ArgError::Invalid(format!(
                        "--{} needs a value ({})",
                        opt.name, opt.value
                    )))
                }
            },
        };
        pairs.push((opt, value));
    }
    let mut run = PicardRun {
        sort: SortOptions::new(command_line.clone()),
        inputs: Vec::new(),
        metrics: String::new(),
        assume: None,
        create_index: false,
        create_md5: false,
        pg: PgSpec {
            id: Some("MarkDuplicates".into()),
            name: "MarkDuplicates".into(),
            version: None,
            command_line: None,
            tag_reads: true,
        },
        comments: Vec::new(),
        given: Vec::new(),
    };
    run.sort.markdup.enabled = true;
    run.sort.no_pg = true;
    // Picard's COMPRESSION_LEVEL default.
    run.sort.level = Some(PICARD_COMPRESSION_LEVEL);
    run.sort.max_memory = xmx;
    let mut output: Option<String> = None;
    let mut tmp_dir: Option<String> = None;
    let mut seen: Vec<&'static str> = Vec::new();
    for (opt, value) in pairs {
        if seen.contains(&opt.name) && !opt.takes_many() {
            return Err(ArgError::Invalid(format!(
                "{} is given more than once (Picard takes it once)",
                opt.name
            )));
        }
        seen.push(opt.name);
        let flag = |v: &Option<String>| -> Result<bool, ArgError> {
            match v {
                None => Ok(true),
                Some(v) => parse_bool(opt, v),
            }
        };
        let text = |v: &Option<String>| -> String { v.clone().unwrap_or_default() };
        match opt.action {
            Action::Help => {
                if flag(&value)? {
                    return Ok(ParsedPicard::Help);
                }
                continue;
            }
            Action::Version => {
                if flag(&value)? {
                    return Ok(ParsedPicard::Version);
                }
                continue;
            }
            _ => {}
        }
        let shown = match (&value, opt.kind) {
            (Some(v), _) => v.clone(),
            (None, _) => "true".to_string(),
        };
        match opt.action {
            Action::Input => {
                run.inputs.push(text(&value));
                continue;
            }
            Action::Output => {
                output = Some(text(&value));
                continue;
            }
            Action::Metrics => {
                run.metrics = text(&value);
                continue;
            }
            Action::Flagstat => {
                run.sort.qc.flagstat = Some(PathBuf::from(text(&value)));
                continue;
            }
            Action::FlagstatFormat => {
                run.sort.qc.flagstat_format =
                    crate::options::qc::parse_flagstat_format(&text(&value))
                        .map_err(ArgError::Invalid)?;
                continue;
            }
            Action::Idxstats => {
                run.sort.qc.idxstats = Some(PathBuf::from(text(&value)));
                continue;
            }
            _ => {}
        }
        run.given.push((opt.name.to_string(), shown.clone()));
        let md = &mut run.sort.markdup;
        match opt.action {
            Action::MdFlag(id) => {
                if flag(&value)? {
                    crate::options::markdup::apply_arg(md, id, opt.name, None)?;
                } else if id == MdOpt::RemoveDuplicates {
                    md.remove_duplicates = false;
                } else {
                    md.remove_sequencing_duplicates = false;
                }
            }
            Action::MdValue(id) => {
                let v = text(&value);
                let translated = match id {
                    MdOpt::DuplicateScoring => match v.as_str() {
                        "SUM_OF_BASE_QUALITIES" => "sum-of-base-qualities".to_string(),
                        "TOTAL_MAPPED_REFERENCE_LENGTH" => {
                            "total-mapped-reference-length".to_string()
                        }
                        "RANDOM" => {
                            return Err(ArgError::Unsupported {
                                option: "DUPLICATE_SCORING_STRATEGY=RANDOM".into(),
                                why: "Picard's RANDOM scores come from Java's random number \
                                      generator, which alnsort does not reproduce; use \
                                      SUM_OF_BASE_QUALITIES or TOTAL_MAPPED_REFERENCE_LENGTH",
                            })
                        }
                        _ => {
                            return Err(bad_choice(
                                opt,
                                &v,
                                "SUM_OF_BASE_QUALITIES, TOTAL_MAPPED_REFERENCE_LENGTH",
                            ))
                        }
                    },
                    MdOpt::TaggingPolicy => match v.as_str() {
                        "DontTag" => "none".to_string(),
                        "OpticalOnly" => "optical".to_string(),
                        "All" => "all".to_string(),
                        _ => return Err(bad_choice(opt, &v, "DontTag, OpticalOnly, All")),
                    },
                    MdOpt::OpticalDistance => parse_integer(opt, &v)?.to_string(),
                    MdOpt::BarcodeTag | MdOpt::ReadOneBarcodeTag | MdOpt::ReadTwoBarcodeTag
                        if v == "null" =>
                    {
                        match id {
                            MdOpt::BarcodeTag => md.barcode_tags.umi = None,
                            MdOpt::ReadOneBarcodeTag => md.barcode_tags.read_one = None,
                            _ => md.barcode_tags.read_two = None,
                        }
                        continue;
                    }
                    _ => v.clone(),
                };
                crate::options::markdup::apply_arg(md, id, opt.name, Some(translated)).map_err(
                    |e| match e {
                        ArgError::Invalid(m) => ArgError::Invalid(format!("{}={v}: {m}", opt.name)),
                        ArgError::Value { what, source } => ArgError::Value {
                            what: format!("{}={v}: {what}", opt.name),
                            source,
                        },
                        other => other,
                    },
                )?;
            }
            Action::AssumeSortOrder => {
                let v = text(&value);
                run.assume = match v.as_str() {
                    "coordinate" => Some(AssumedOrder::Coordinate),
                    "queryname" => Some(AssumedOrder::Queryname),
                    "unsorted" | "duplicate" | "unknown" => {
                        return Err(ArgError::Invalid(format!(
                            "ASSUME_SORT_ORDER={v}: MarkDuplicates needs coordinate-sorted or \
                             queryname-grouped input (ASSUME_SORT_ORDER=coordinate or queryname), \
                             as Picard does"
                        )))
                    }
                    _ => {
                        return Err(bad_choice(
                            opt,
                            &v,
                            "coordinate, queryname (unsorted, duplicate, unknown are refused by Picard too)",
                        ))
                    }
                };
            }
            Action::AssumeSorted => {
                if flag(&value)? {
                    run.assume = Some(AssumedOrder::Coordinate);
                }
            }
            Action::CreateIndex => run.create_index = flag(&value)?,
            Action::CreateMd5 => run.create_md5 = flag(&value)?,
            Action::TmpDir => {
                if tmp_dir.is_none() {
                    tmp_dir = Some(text(&value));
                }
            }
            Action::CompressionLevel => {
                let n = parse_integer(opt, &text(&value))?;
                if !(0..=9).contains(&n) {
                    return Err(ArgError::Invalid(format!(
                        "COMPRESSION_LEVEL={n}: expected 0 to 9"
                    )));
                }
                run.sort.level = Some(n as u32);
            }
            Action::Reference => run.sort.reference = Some(PathBuf::from(text(&value))),
            Action::Comment => run.comments.push(text(&value)),
            Action::AddPgTag => run.pg.tag_reads = flag(&value)?,
            Action::PgId => {
                let v = text(&value);
                run.pg.id = (v != "null").then_some(v);
            }
            Action::PgName => run.pg.name = text(&value),
            Action::PgVersion => run.pg.version = Some(text(&value)),
            Action::PgCommandLine => run.pg.command_line = Some(text(&value)),
            Action::Threads => {
                let n = parse_integer(opt, &text(&value))?;
                run.sort.threads = n.max(1) as usize;
            }
            Action::Neutral => {
                // Still a value of its type.
                match (opt.kind, &value) {
                    (PicardValueKind::Boolean, v) => {
                        flag(v)?;
                    }
                    (PicardValueKind::Integer, Some(v)) => {
                        parse_integer(opt, v)?;
                    }
                    _ => {}
                }
            }
            Action::DefaultOnly(default, why) => {
                let v = value.clone().unwrap_or_else(|| "true".into());
                if !is_default(opt, &v, default)? {
                    return Err(ArgError::Unsupported {
                        option: format!("{}={v}", opt.name),
                        why,
                    });
                }
            }
            Action::Refused(why) => {
                return Err(ArgError::Unsupported {
                    option: opt.name.to_string(),
                    why,
                })
            }
            Action::Input
            | Action::Output
            | Action::Metrics
            | Action::Flagstat
            | Action::FlagstatFormat
            | Action::Idxstats
            | Action::Help
            | Action::Version => {
                unreachable!("handled above")
            }
        }
    }
    let missing: Vec<&str> = [
        ("INPUT", run.inputs.is_empty()),
        ("OUTPUT", output.is_none()),
        ("METRICS_FILE", run.metrics.is_empty()),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(n, _)| *n)
    .collect();
    if !missing.is_empty() {
        return Err(ArgError::Invalid(format!(
            "{} required: alnsort MarkDuplicates I=in.bam O=out.bam M=metrics.txt",
            if missing.len() == 1 {
                format!("{} is", missing[0])
            } else {
                format!("{} are", missing.join(", "))
            }
        )));
    }
    if let Some(input) = run.inputs.iter().find(|i| *i == "-" || *i == "/dev/stdin") {
        return Err(ArgError::Unsupported {
            option: format!("INPUT={input}"),
            why: "alnsort MarkDuplicates reads its input twice (once to decide, once to write \
                  the records in their order), and standard input cannot be read twice: write \
                  it to a file first, or mark it while sorting with 'alnsort sort --markdup'",
        });
    }
    // Several inputs are merged as Picard merges them
    // (`crate::run::mark_in_order`); the engine's options name the first.
    run.sort.input = run.inputs[0].clone();
    run.sort.inputs = run.inputs.clone();
    let output = output.unwrap_or_default();
    run.sort.output = if output == "/dev/stdout" || output == "-" {
        "-".into()
    } else {
        output
    };
    if run.create_md5 && run.sort.output == "-" {
        return Err(ArgError::Unsupported {
            option: "CREATE_MD5_FILE=true with standard output".into(),
            why: "the MD5 goes beside the output file (OUTPUT.md5); write the output to a file",
        });
    }
    run.sort.tmp_prefix = tmp_dir.or(java_tmp);
    run.sort.markdup.metrics = Some(PathBuf::from(&run.metrics));
    if run.create_index && run.sort.output != "-" {
        match crate::config::format_of(&run.sort) {
            OutFormat::Bam => {
                let idx = picard_index_path(&run.sort.output);
                run.sort.output = format!("{}##idx##{idx}", run.sort.output);
                run.sort.write_index = true;
            }
            OutFormat::Parquet => return Err(ArgError::Unsupported {
                option: "CREATE_INDEX=true with Parquet output".into(),
                why:
                    "a Parquet dataset is pruned by its reference folders and row-group statistics",
            }),
            OutFormat::Cram => {
                return Err(ArgError::Unsupported {
                    option: "CREATE_INDEX=true with CRAM output".into(),
                    why: "index the CRAM afterwards (samtools index)",
                })
            }
            // htsjdk indexes BAM only.
            OutFormat::Sam | OutFormat::SamGz => {}
        }
    }
    Ok(ParsedPicard::Run(Box::new(run)))
}

fn bad_choice(opt: &PicardOpt, v: &str, choices: &str) -> ArgError {
    ArgError::Invalid(format!("{}={v}: expected one of {choices}", opt.name))
}

/// Picard's COMPRESSION_LEVEL default (its `--help`: "Default value: 5").
pub const PICARD_COMPRESSION_LEVEL: u32 = 5;

/// Where Picard (htsjdk's `SAMFileWriterFactory`) writes the BAI of
/// `output`: the name without its last extension, then `.bai`.
pub fn picard_index_path(output: &str) -> String {
    let p = std::path::Path::new(output);
    let stem = match p.extension() {
        Some(_) => p.with_extension(""),
        None => p.to_path_buf(),
    };
    format!("{}.bai", stem.display())
}

/// The first line of the help.
pub const MARKDUPLICATES_USAGE: &str =
    "Usage: alnsort MarkDuplicates I=in.bam O=out.bam M=metrics.txt [NAME=VALUE ...]\n       \
     alnsort MarkDuplicates -I in.bam -O out.bam -M m.txt [--NAME VALUE ...]";

/// `alnsort MarkDuplicates --help`, rendered from [`PICARD_OPTIONS`].
pub fn help() -> String {
    let mut out = String::new();
    out.push_str(MARKDUPLICATES_USAGE);
    out.push_str("\n\n");
    for line in wrap(
        "Picard MarkDuplicates' command line: the flags, DT and PG tags and metrics Picard 3.4.0 \
         writes, the records in the input's order. Coordinate-sorted input (primary records \
         marked) and input grouped by read name (SO:queryname or ASSUME_SORT_ORDER=queryname: \
         whole templates marked) are read twice, never sorted. The JVM's -Xmx is the memory \
         budget (as --max-memory), -Djava.io.tmpdir the default TMP_DIR; other -X/-D settings \
         are accepted without effect. Options that do not change the output are accepted; \
         values alnsort cannot honour are refused by name.",
        HELP_WIDTH,
    ) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    for o in PICARD_OPTIONS {
        let mut left = format!("  --{}", o.name);
        if let Some(s) = o.short {
            left.push_str(&format!(", -{s}"));
        }
        left.push_str(&format!(" <{}>", o.value));
        out.push_str(&left);
        out.push('\n');
        for line in wrap(o.help, HELP_WIDTH - 8) {
            out.push_str("        ");
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<ParsedPicard, ArgError> {
        parse(
            "alnsort MarkDuplicates".into(),
            args.iter().map(OsString::from).collect(),
        )
    }

    fn ok(args: &[&str]) -> PicardRun {
        match run(args) {
            Ok(ParsedPicard::Run(r)) => *r,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn both_syntaxes_give_the_same_run() {
        let legacy = ok(&[
            "I=in.bam",
            "O=out.bam",
            "M=m.txt",
            "REMOVE_DUPLICATES=True",
            "ASSUME_SORT_ORDER=queryname",
            "TAGGING_POLICY=All",
            "OPTICAL_DUPLICATE_PIXEL_DISTANCE=2500",
        ]);
        let modern = ok(&[
            "--INPUT",
            "in.bam",
            "-O",
            "out.bam",
            "--METRICS_FILE",
            "m.txt",
            "--REMOVE_DUPLICATES",
            "-ASO",
            "queryname",
            "--TAGGING_POLICY",
            "All",
            "--OPTICAL_DUPLICATE_PIXEL_DISTANCE",
            "2500",
        ]);
        for r in [&legacy, &modern] {
            assert_eq!(r.inputs, ["in.bam"]);
            assert_eq!(r.sort.output, "out.bam");
            assert_eq!(r.metrics, "m.txt");
            assert!(r.sort.markdup.remove_duplicates);
            assert_eq!(
                r.sort.markdup.tagging,
                alnsort_markdup::decision::TaggingPolicy::All
            );
            assert_eq!(r.sort.markdup.optical_distance, Some(2500));
            assert_eq!(r.assume, Some(AssumedOrder::Queryname));
            assert_eq!(r.sort.level, Some(PICARD_COMPRESSION_LEVEL));
        }
        // A boolean followed by its value, and false switches it off.
        let r = ok(&[
            "-I",
            "a.bam",
            "-O",
            "b.bam",
            "-M",
            "m",
            "--REMOVE_DUPLICATES",
            "FALSE",
        ]);
        assert!(!r.sort.markdup.remove_duplicates);
    }

    #[test]
    fn jvm_options_map_to_memory_and_temporary_directory() {
        let r = ok(&[
            "-Xmx716m",
            "-Djava.io.tmpdir=/scratch",
            "-XX:+UseG1GC",
            "I=a.bam",
            "O=b.bam",
            "M=m",
        ]);
        assert_eq!(r.sort.max_memory.as_deref(), Some("716M"));
        assert_eq!(r.sort.tmp_prefix.as_deref(), Some("/scratch"));
        let r = ok(&[
            "-Djava.io.tmpdir=/scratch",
            "I=a.bam",
            "O=b.bam",
            "M=m",
            "TMP_DIR=/t1",
            "TMP_DIR=/t2",
        ]);
        assert_eq!(r.sort.tmp_prefix.as_deref(), Some("/t1"));
    }

    #[test]
    fn create_index_names_the_bai_as_picard() {
        let r = ok(&["I=a.bam", "O=dir/out.bam", "M=m", "CREATE_INDEX=true"]);
        assert_eq!(r.sort.output, "dir/out.bam##idx##dir/out.bai");
        assert!(r.sort.write_index);
        assert_eq!(picard_index_path("x"), "x.bai");
        // SAM output: no index, as htsjdk writes none.
        let r = ok(&["I=a.bam", "O=out.sam", "M=m", "--CREATE_INDEX"]);
        assert!(!r.sort.write_index);
    }

    #[test]
    fn refusals_name_the_option() {
        let e = |args: &[&str]| run(args).unwrap_err().to_string();
        assert!(
            e(&["I=a.bam", "O=/dev/stdout", "M=m", "CREATE_MD5_FILE=true"])
                .contains("CREATE_MD5_FILE=true with standard output")
        );
        assert!(ok(&["I=a.bam", "O=b.bam", "M=m", "CREATE_MD5_FILE=true"]).create_md5);
        assert!(e(&["I=a.bam", "O=b.bam", "M=m", "DS=RANDOM"]).contains("RANDOM"));
        assert!(e(&["I=a.bam", "O=b.bam", "M=m", "CLEAR_DT=false"]).contains("CLEAR_DT=false"));
        assert!(
            e(&["I=a.bam", "O=b.bam", "M=m", "REMOVE_DUPLICATES=maybe"]).contains("true or false")
        );
        assert!(e(&["I=/dev/stdin", "O=b.bam", "M=m"]).contains("standard input"));
        assert!(e(&["I=a.bam", "I=-", "O=c.bam", "M=m"]).contains("INPUT=-"));
        assert!(e(&["I=a.bam", "O=b.bam"]).contains("METRICS_FILE is required"));
        assert!(e(&["I=a.bam", "O=b.bam", "M=m", "NOT_AN_OPTION=1"]).contains("NOT_AN_OPTION"));
        assert!(e(&["I=a.bam", "O=b.bam", "M=m", "ASO=unsorted"]).contains("queryname"));
        // Defaults are accepted.
        ok(&[
            "I=a.bam",
            "O=b.bam",
            "M=m",
            "CREATE_MD5_FILE=false",
            "CLEAR_DT=true",
            "MAX_RECORDS_IN_RAM=5",
            "VALIDATION_STRINGENCY=SILENT",
            "QUIET=true",
            "MAX_OPTICAL_DUPLICATE_SET_SIZE=300000",
        ]);
    }

    #[test]
    fn help_lists_every_option() {
        let h = help();
        for o in PICARD_OPTIONS {
            assert!(h.contains(&format!("--{}", o.name)), "{}", o.name);
        }
        assert!(h.lines().all(|l| l.chars().count() <= HELP_WIDTH), "{h}");
    }
}
