//! `alnsort sort`'s command line, read the way samtools 1.24 reads it
//! (getopt string `l:m:nNo:O:T:@:t:MI:K:uRw:H` plus the global long options),
//! so a pipeline switches by replacing `samtools sort` with `alnsort sort`.
//!
//! One table, [`OPTIONS`], defines every option: the parser accepts exactly
//! the options in it, and `alnsort sort --help` is rendered from it, so no
//! option can be accepted without being listed. Options samtools has but
//! alnsort does not implement yet are in the table too (group
//! [`Group::Unsupported`]) so that using one is refused with a clear message
//! rather than read as an unknown option or silently ignored.
//!
//! This module only turns argv into `SortOptions`; it opens nothing and reads no
//! input (the `Config` built from it in `crate::config` does the resolving).

use crate::error::ArgError;
use crate::options::table::{
    keyword_option, not_a_keyword, parse_c_int, parse_int, parse_level, parse_seconds,
    push_help_entry, wrap, Group, OptSpec, OptionName, HELP_WIDTH,
};
pub use alnsort_bam::reader::UnknownReference;
use lexopt::prelude::*;
use std::ffi::OsString;
use std::path::PathBuf;

/// The order options as given; `crate::config` resolves them as samtools does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderFlag {
    Coordinate,
    Name,
    TemplateCoordinate,
    /// `-M` or `-I FILE`.
    Minimiser,
}

/// Output format as named by `-O` or the output file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    Bam,
    Sam,
    /// SAM text in BGZF (`-O sam,level=N`, `.sam.gz`).
    SamGz,
    Cram,
    /// A Parquet dataset directory (`alnsort_columnar`).
    Parquet,
}

#[derive(Debug, Clone)]
pub struct SortOptions {
    pub input: String,
    /// Every input named (more than one: sorted as one, with the header
    /// samtools merge would make); empty when none was (standard input).
    pub inputs: Vec<String>,
    pub output: String,
    pub format: Option<OutFormat>,
    pub format_level: Option<u32>,
    pub level: Option<u32>,
    pub uncompressed: bool,
    pub mem_per_thread: Option<u64>,
    pub max_memory: Option<String>,
    pub threads: usize,
    pub tmp_prefix: Option<String>,
    /// `--no-tmp-space-check`: no pre-flight estimate of temporary space.
    pub no_tmp_space_check: bool,
    /// `--resume DIR`: runs kept in DIR so that a killed sort resumes
    /// (`crate::run::resume`).
    pub resume: Option<PathBuf>,
    pub order: OrderFlag,
    /// `-N` given anywhere: name order is lexicographic (it sticks, §1.8).
    pub lexicographic: bool,
    pub tag: Option<String>,
    /// `-K INT`, clamped to 1..=31 as samtools does.
    pub kmer: u32,
    /// `-w INT`: the `-I` index window.
    pub window: i64,
    /// `-R`: minimiser without the reverse strand.
    pub no_reverse: bool,
    /// `-H`: squash homopolymers.
    pub squash: bool,
    /// `-I FILE`: FASTA to index (the last `-I` given).
    pub minimiser_ref: Option<PathBuf>,
    pub no_pg: bool,
    pub write_index: bool,
    pub verbosity: i32,
    pub progress: Option<bool>,
    /// `--progress-interval SECS`: seconds between plain progress lines.
    pub progress_interval: Option<f64>,
    pub stats_json: Option<PathBuf>,
    /// `--mqc`: the report as MultiQC custom content.
    pub mqc: Option<PathBuf>,
    /// `--unknown-reference error|unmapped`: a SAM RNAME/RNEXT missing from
    /// the header's @SQ lines fails the run (default) or is read as
    /// unmapped, as samtools does.
    pub unknown_reference: UnknownReference,
    /// `--reference FILE` (or `-O cram,reference=FILE`): the FASTA that CRAM
    /// input is decoded and CRAM output encoded against.
    pub reference: Option<PathBuf>,
    /// CRAM-only output options (`version`, `embed_ref`, `no_ref`,
    /// `store_md`, `store_nm`) as given,
    /// `--flagstat`, `--flagstat-format`, `--idxstats`.
    pub qc: crate::options::qc::QcArgs,
    /// checked by the config against the output format.
    pub cram_options: Vec<(String, String)>,
    /// `-O parquet,codec=zstd|snappy` as given; checked by the config.
    pub parquet_codec: Option<String>,
    /// `--markdup` and its options (group "Duplicate marking").
    pub markdup: crate::options::markdup::MarkdupArgs,
    /// `argv[0] sort args…` joined by spaces, tabs made spaces (htslib's
    /// `stringify_argv`), for the @PG CL field.
    pub command_line: String,
}

impl SortOptions {
    /// The options of `alnsort sort` with nothing given: standard input to
    /// standard output in coordinate order, samtools' defaults.
    /// `command_line` is the command the run stands for (@PG CL,
    /// `--stats-json`'s `command_line`).
    pub fn new(command_line: String) -> SortOptions {
        SortOptions {
            input: "-".into(),
            inputs: Vec::new(),
            output: "-".into(),
            format: None,
            format_level: None,
            level: None,
            uncompressed: false,
            mem_per_thread: None,
            max_memory: None,
            threads: 0,
            tmp_prefix: None,
            no_tmp_space_check: false,
            resume: None,
            order: OrderFlag::Coordinate,
            lexicographic: false,
            tag: None,
            kmer: alnsort_bam::keys::minimiser::DEFAULT_KMER,
            window: alnsort_bam::keys::minimiser::DEFAULT_WINDOW,
            no_reverse: false,
            squash: false,
            minimiser_ref: None,
            no_pg: false,
            write_index: false,
            verbosity: 2,
            progress: None,
            progress_interval: None,
            stats_json: None,
            mqc: None,
            unknown_reference: UnknownReference::Error,
            reference: None,
            cram_options: Vec::new(),
            parquet_codec: None,
            markdup: Default::default(),
            qc: Default::default(),
            command_line,
        }
    }

    /// Applies one option of [`OPTIONS`] with its value (`None` for a flag;
    /// a value for each option that names one), as `alnsort sort` given it
    /// does; a later option overrides an earlier one as samtools' getopt
    /// loop does. `--help`, `--version` and the options alnsort refuses are
    /// not options of a run: the parser acts on them before this.
    pub fn apply(&mut self, id: OptId, value: Option<OsString>) -> Result<(), ArgError> {
        let a = self;
        let missing = || ArgError::Invalid(format!("{id:?} needs a value"));
        let path = || value.clone().ok_or_else(missing);
        let text = || -> Result<String, ArgError> {
            match value.clone() {
                Some(v) => Ok(v.string()?),
                None => Err(missing()),
            }
        };
        match id {
            OptId::Level => a.level = parse_level(&text()?)?,
            OptId::Uncompressed => a.uncompressed = true,
            OptId::MemPerThread => {
                a.mem_per_thread = Some(
                    crate::options::memsize::parse_per_thread(&text()?)
                        .map_err(|e| ArgError::Invalid(e.0))?,
                );
            }
            OptId::Name => a.order = OrderFlag::Name,
            OptId::NameLex => {
                a.order = OrderFlag::Name;
                a.lexicographic = true;
            }
            OptId::Output => a.output = text()?,
            OptId::OutputFmt => parse_output_fmt(&text()?, a)?,
            OptId::OutputFmtOption => parse_fmt_option(&text()?, a)?,
            OptId::TmpPrefix => a.tmp_prefix = Some(text()?),
            OptId::NoTmpSpaceCheck => a.no_tmp_space_check = true,
            OptId::Resume => a.resume = Some(PathBuf::from(path()?)),
            OptId::Reference => a.reference = Some(PathBuf::from(text()?)),
            OptId::Threads => {
                let n = parse_int("-@", &text()?)?;
                a.threads = n.max(0) as usize;
            }
            OptId::Tag => a.tag = Some(text()?),
            OptId::TemplateCoordinate => a.order = OrderFlag::TemplateCoordinate,
            OptId::Minimiser => a.order = OrderFlag::Minimiser,
            OptId::MinimiserIndex => {
                a.order = OrderFlag::Minimiser;
                a.minimiser_ref = Some(PathBuf::from(path()?));
            }
            OptId::Kmer => a.kmer = parse_c_int("-K", &text()?)?.clamp(1, 31) as u32,
            OptId::Window => a.window = parse_c_int("-w", &text()?)?,
            OptId::NoReverse => a.no_reverse = true,
            OptId::Squash => a.squash = true,
            OptId::NoPg => a.no_pg = true,
            OptId::WriteIndex => a.write_index = true,
            OptId::Verbosity => a.verbosity = parse_int("--verbosity", &text()?)? as i32,
            OptId::MaxMemory => a.max_memory = Some(text()?),
            OptId::Progress => a.progress = Some(true),
            OptId::NoProgress => a.progress = Some(false),
            OptId::ProgressInterval => {
                a.progress_interval = Some(parse_seconds("--progress-interval", &text()?)?)
            }
            OptId::StatsJson => a.stats_json = Some(PathBuf::from(path()?)),
            OptId::Mqc => a.mqc = Some(PathBuf::from(path()?)),
            OptId::Flagstat => a.qc.flagstat = Some(PathBuf::from(path()?)),
            OptId::FlagstatFormat => {
                a.qc.flagstat_format = crate::options::qc::parse_flagstat_format(&text()?)
                    .map_err(ArgError::Invalid)?
            }
            OptId::Idxstats => a.qc.idxstats = Some(PathBuf::from(path()?)),
            OptId::UnknownReference => {
                a.unknown_reference = match text()?.as_str() {
                "error" => UnknownReference::Error,
                "unmapped" => UnknownReference::Unmapped,
                other => {
                    return Err(ArgError::Invalid(format!(
                        "--unknown-reference '{other}': expected 'error' (the default) or 'unmapped'"
                    )))
                }
            };
            }
            OptId::Markdup(opt) => {
                let v = match value {
                    Some(_) => Some(text()?),
                    None => None,
                };
                let name = markdup_options()
                    .find(|s| s.id == id)
                    .map_or_else(|| format!("{opt:?}"), |s| s.name());
                crate::options::markdup::apply_arg(&mut a.markdup, opt, &name, v)?;
            }
            OptId::Help | OptId::Version | OptId::Unsupported(_) => {
                return Err(ArgError::Invalid(format!(
                    "{id:?} is not an option of a run: the parser acts on it"
                )))
            }
        }
        Ok(())
    }
}

impl SortOptions {
    /// Applies the option of [`OPTIONS`] the Python keyword `keyword`
    /// names, as [`SortOptions::apply`] does for the command line.
    pub fn apply_keyword(&mut self, keyword: &str, value: Option<String>) -> Result<(), ArgError> {
        let spec = keyword_option(OPTIONS, keyword)?;
        match spec.id {
            OptId::Output | OptId::Help | OptId::Version => {
                Err(not_a_keyword(spec.name(), keyword))
            }
            id => self.apply(id, value.map(OsString::from)),
        }
    }

    /// Applies the option of `alnsort sort`'s group "Duplicate marking"
    /// (an [`OptId::Markdup`] row) that the Python keyword `keyword` names, as
    /// [`SortOptions::apply_keyword`] does, and turns duplicate marking on
    /// (the stage tasks that mark duplicates take the group's options
    /// alone, `--markdup` implied); any other option is refused by name.
    pub fn apply_markdup_keyword(
        &mut self,
        keyword: &str,
        value: Option<String>,
    ) -> Result<(), ArgError> {
        let spec = keyword_option(OPTIONS, keyword)?;
        if !matches!(spec.id, OptId::Markdup(_)) {
            return Err(ArgError::Invalid(format!(
                "{} ({keyword}=): not a duplicate-marking option of alnsort sort",
                spec.name()
            )));
        }
        self.apply(spec.id, value.map(OsString::from))?;
        self.apply(
            OptId::Markdup(crate::options::markdup::MdOpt::Markdup),
            None,
        )
    }
}

/// `--flagstat`'s help (`sort`, `merge` and `MarkDuplicates` share it).
pub const FLAGSTAT_HELP: &str = "Write to FILE the text `samtools flagstat` 1.24 prints for the \
     output, counted as the records are written (no second pass).";
/// `--flagstat-format`'s help.
pub const FLAGSTAT_FORMAT_HELP: &str = "The form of --flagstat's text: samtools flagstat's \
     default, or its -O json or -O tsv.";
/// `--idxstats`' help.
pub const IDXSTATS_HELP: &str = "Write to FILE the table `samtools idxstats` 1.24 prints for \
     the output, counted as the records are written: from the index's counts when the output \
     is BAM indexed where samtools looks (--write-index), else as samtools' scan gives it (last \
     line split by 0x4); an output samtools would call not position sorted fails the run.";

/// What an option does; `parse` applies it to `SortOptions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptId {
    Name,
    NameLex,
    Tag,
    TemplateCoordinate,
    Minimiser,
    MinimiserIndex,
    Kmer,
    Window,
    NoReverse,
    Squash,
    Output,
    OutputFmt,
    OutputFmtOption,
    Level,
    Uncompressed,
    WriteIndex,
    NoPg,
    MemPerThread,
    Threads,
    TmpPrefix,
    NoTmpSpaceCheck,
    Resume,
    MaxMemory,
    Progress,
    NoProgress,
    ProgressInterval,
    StatsJson,
    Mqc,
    Flagstat,
    FlagstatFormat,
    Idxstats,
    UnknownReference,
    Reference,
    Verbosity,
    Help,
    Version,
    /// An option of duplicate marking (`crate::markdup`).
    Markdup(crate::options::markdup::MdOpt),
    /// Refused when used, with this reason.
    Unsupported(&'static str),
}

crate::options::table::refused_when_unsupported!(OptId);

impl OptId {
    /// Whether a stage task of the distributed sort (`alnsort.stages`, the
    /// Ray driver's tasks) takes the option as a keyword of its own: those
    /// that say how records are ordered and written and what a task may
    /// use. Duplicate marking's options come as a marking stage's group
    /// ([`markdup_options`]); the others are a whole run's (its output,
    /// index, report, progress), minimiser settings the stages are not
    /// given, or refused. Every id is named, no wildcard: a new option
    /// does not compile until it is placed here.
    pub fn taken_by_stages(self) -> bool {
        use OptId::*;
        match self {
            Name | NameLex | TemplateCoordinate | Minimiser | Tag => true,
            OutputFmt | Level | NoPg => true,
            Threads | TmpPrefix | MaxMemory | UnknownReference => true,
            MinimiserIndex | Kmer | Window | NoReverse | Squash => false,
            Output | OutputFmtOption | Uncompressed | WriteIndex | Reference => false,
            MemPerThread | Progress | NoProgress | ProgressInterval | StatsJson | Mqc => false,
            NoTmpSpaceCheck => false,
            Resume => false,
            Flagstat | FlagstatFormat | Idxstats => false,
            Verbosity | Help | Version | Markdup(_) | Unsupported(_) => false,
        }
    }
}

/// The rows of [`OPTIONS`] in the group "Duplicate marking" (the
/// [`OptId::Markdup`] ids), in the table's order: `--markdup`, `--metrics`
/// and the options a marking stage takes
/// ([`SortOptions::apply_markdup_keyword`]).
pub fn markdup_options() -> impl Iterator<Item = &'static OptSpec<OptId>> {
    OPTIONS.iter().filter(|s| matches!(s.id, OptId::Markdup(_)))
}

/// The rows of [`OPTIONS`] a stage task takes as its own keywords
/// ([`OptId::taken_by_stages`]), in the table's order.
pub fn stage_options() -> impl Iterator<Item = &'static OptSpec<OptId>> {
    OPTIONS.iter().filter(|s| s.id.taken_by_stages())
}

/// Every option `alnsort sort` accepts; the parser and the help both read it.
pub const OPTIONS: &[OptSpec<OptId>] = &[
    OptSpec {
        id: OptId::Name,
        short: Some('n'),
        long: None,
        key: Some("name"),
        value: None,
        group: Group::Order,
        help: "Sort by read name in natural order (digit runs compare as \
               numbers): @HD SO:queryname SS:queryname:natural.",
    },
    OptSpec {
        id: OptId::NameLex,
        short: Some('N'),
        long: None,
        key: Some("name_lexicographic"),
        value: None,
        group: Group::Order,
        help: "Sort by read name in byte order (SS:queryname:lexicographical). \
               As in samtools, once -N is given a later -n is byte order too.",
    },
    OptSpec {
        id: OptId::Tag,
        short: Some('t'),
        long: None,
        key: Some("tag"),
        value: Some("TAG"),
        group: Group::Order,
        help: "Sort by the value of aux tag TAG (its first two characters), \
               then by position, or by name with -n/-N: @HD SO:unsorted \
               SS:unsorted:TAG:coordinate (or :queryname:...).",
    },
    OptSpec {
        id: OptId::TemplateCoordinate,
        short: None,
        long: Some("template-coordinate"),
        key: None,
        value: None,
        group: Group::Order,
        help: "Sort by template coordinate (as samtools 1.24: mate-aware, \
               with CB; what fgbio expects): @HD SO:unsorted GO:query \
               SS:unsorted:template-coordinate.",
    },
    OptSpec {
        id: OptId::Output,
        short: Some('o'),
        long: None,
        key: Some("output"),
        value: Some("FILE"),
        group: Group::Output,
        help: "Write to FILE instead of standard output (-). FILE##idx##IDX \
               names the --write-index file. Unlike samtools, FILE appears \
               only when the run succeeds (written under a temporary name, \
               then renamed).",
    },
    OptSpec {
        id: OptId::OutputFmt,
        short: Some('O'),
        long: Some("output-fmt"),
        key: None,
        value: Some("FMT[,OPT=VAL]..."),
        group: Group::Output,
        help: "Output format BAM, SAM, CRAM or PARQUET; it overrides FILE's extension \
               (.sam: SAM, .sam.gz: BGZF SAM, .cram: CRAM, anything else: BAM). \
               SAM with level=N is BGZF-compressed SAM. PARQUET writes the \
               directory FILE as a Parquet dataset, one folder per reference \
               in coordinate order (docs/columnar.md), codec=zstd|snappy \
               (zstd: level=1..9, default 1); -l, -u and --write-index are \
               refused with it. OPT is level=N, \
               reference=FILE (as --reference), nthreads=N (accepted, -@ \
               counts), and for CRAM version=3.0|3.1, embed_ref=0|1 (1: \
               each slice carries its reference bases; 2 is refused), \
               no_ref=0|1, store_md=0|1 and \
               store_nm=0|1 (keep MD/NM as given; by default, as samtools, \
               those a reader computes back the same are left out and come \
               back after the other tags).",
    },
    OptSpec {
        id: OptId::OutputFmtOption,
        short: None,
        long: Some("output-fmt-option"),
        key: None,
        value: Some("OPT=VAL"),
        group: Group::Output,
        help: "One output format option, the same as ,OPT=VAL after -O FMT \
               (level=N).",
    },
    OptSpec {
        id: OptId::Level,
        short: Some('l'),
        long: None,
        key: Some("level"),
        value: Some("INT"),
        group: Group::Output,
        help: "Compression level 0-9 of BAM output (above 9 is 9, below 0 \
               the default, 6); plain SAM output ignores it. Levels 5-7 use \
               a faster libdeflate level than samtools: output about 0.5% \
               larger, records the same.",
    },
    OptSpec {
        id: OptId::Uncompressed,
        short: Some('u'),
        long: None,
        key: Some("uncompressed"),
        value: None,
        group: Group::Output,
        help: "Uncompressed BAM (the same as -l 0).",
    },
    OptSpec {
        id: OptId::WriteIndex,
        short: None,
        long: Some("write-index"),
        key: None,
        value: None,
        group: Group::Output,
        help: "Index the output while writing it: FILE.csi, or the IDX of \
               -o FILE##idx##IDX (a .bai name gives BAI). Coordinate order \
               only (other orders: a warning, no index, as in samtools); BAM \
               output, or CRAM output with FILE.crai (or IDX) as samtools \
               writes it (samtools also indexes BGZF SAM).",
    },
    OptSpec {
        id: OptId::NoPg,
        short: None,
        long: Some("no-PG"),
        key: None,
        value: None,
        group: Group::Output,
        help: "Do not add the @PG line (alnsort's is ID:alnsort PN:alnsort \
               with the version and command line).",
    },
    OptSpec {
        id: OptId::MemPerThread,
        short: Some('m'),
        long: None,
        key: Some("mem_per_thread"),
        value: Some("INT[K|M|G]"),
        group: Group::Resources,
        help: "Record memory per thread, read as samtools reads it (0x: hex, \
               leading 0: octal): the record buffer is -m times -@ [768M]; \
               I/O buffers come on top. Values below 1M, and values samtools \
               would misread (1.5G), are refused.",
    },
    OptSpec {
        id: OptId::Threads,
        short: Some('@'),
        long: Some("threads"),
        key: None,
        value: Some("INT"),
        group: Group::Resources,
        help: "Worker threads in all: one pool of INT threads reads, sorts, \
               merges and compresses (below 2: one). samtools' -@ INT starts \
               INT sort threads and INT more for compression. The output \
               bytes are the same for every -@ and -m.",
    },
    OptSpec {
        id: OptId::TmpPrefix,
        short: Some('T'),
        long: None,
        key: Some("tmp_prefix"),
        value: Some("PREFIX"),
        group: Group::Resources,
        help: "Temporary files go in a new private directory made inside \
               PREFIX if it is a directory, else inside PREFIX's directory \
               (samtools writes PREFIX.NNNN.bam files). Default: $TMPDIR, \
               else the output's directory. Removed at exit, also on error \
               and on SIGINT/SIGTERM/SIGHUP.",
    },
    OptSpec {
        id: OptId::NoTmpSpaceCheck,
        short: None,
        long: Some("no-tmp-space-check"),
        key: None,
        value: None,
        group: Group::Additions,
        help: "Skip the check at the start that the temporary directory's \
               filesystem has room for the run files the inputs' sizes \
               promise (BAM and SAM files; standard input, CRAM and plain \
               gzip are not estimated). Without it a sort that would not fit \
               is refused before reading, naming the directory, what it \
               needs and what it has.",
    },
    OptSpec {
        id: OptId::Resume,
        short: None,
        long: Some("resume"),
        key: None,
        value: Some("DIR"),
        group: Group::Additions,
        help: "Keep the sorted runs in DIR (made if missing), with a manifest \
               rewritten after each run is on disk, so that the same command \
               run again after the sort was killed writes the same output \
               bytes, reading each input only from where the kept runs end. \
               BAM output written is kept too (every 64 MiB, as \
               DIR/output.partial), and a rerun killed in the final merge \
               compresses only what follows it. A manifest from another input, changed file, other output \
               options or another alnsort version is refused (remove DIR to \
               start afresh). Standard input resumes only once every record \
               is in a kept run. Needs -o FILE; not with --markdup (the \
               marker's state is not kept) nor several inputs. What alnsort \
               put in DIR is removed when the sort succeeds, and DIR if then \
               empty. docs/resume.md.",
    },
    OptSpec {
        id: OptId::MaxMemory,
        short: None,
        long: Some("max-memory"),
        key: None,
        value: Some("SIZE"),
        group: Group::Additions,
        help: "Memory budget of the whole process, I/O buffers included: \
               1.5G, 800M, or a share of the machine's (or cgroup's) memory \
               such as 80%. Overrides -m.",
    },
    OptSpec {
        id: OptId::Progress,
        short: None,
        long: Some("progress"),
        key: None,
        value: None,
        group: Group::Additions,
        help: "Show progress on stderr: a live display on a terminal \
               (the default there), otherwise a plain line every 10 s.",
    },
    OptSpec {
        id: OptId::ProgressInterval,
        short: None,
        long: Some("progress-interval"),
        key: None,
        value: Some("SECS"),
        group: Group::Additions,
        help: "Seconds between the plain progress lines written when stderr \
               is not a terminal (fractions allowed, at least 0.01); implies \
               --progress.",
    },
    OptSpec {
        id: OptId::NoProgress,
        short: None,
        long: Some("no-progress"),
        key: None,
        value: None,
        group: Group::Additions,
        help: "Never show the progress display.",
    },
    OptSpec {
        id: OptId::StatsJson,
        short: None,
        long: Some("stats-json"),
        key: None,
        value: Some("FILE"),
        group: Group::Additions,
        help: "Write a JSON report to FILE: records and bytes in and out, \
               runs written, merge passes and partitions, wall and CPU \
               seconds per phase, peak RSS.",
    },
    OptSpec {
        id: OptId::Mqc,
        short: None,
        long: Some("mqc"),
        key: None,
        value: Some("FILE"),
        group: Group::Additions,
        help: "Write the run's report as MultiQC custom content to FILE (a \
               table section: records, order, threads, wall and CPU seconds, \
               peak RSS, output size, runs spilled, duplicates with \
               --markdup), the sample named after the input; MultiQC finds \
               it when FILE ends in _mqc.json.",
    },
    OptSpec {
        id: OptId::Flagstat,
        short: None,
        long: Some("flagstat"),
        key: None,
        value: Some("FILE"),
        group: Group::Additions,
        help: FLAGSTAT_HELP,
    },
    OptSpec {
        id: OptId::FlagstatFormat,
        short: None,
        long: Some("flagstat-format"),
        key: None,
        value: Some("default|json|tsv"),
        group: Group::Additions,
        help: FLAGSTAT_FORMAT_HELP,
    },
    OptSpec {
        id: OptId::Idxstats,
        short: None,
        long: Some("idxstats"),
        key: None,
        value: Some("FILE"),
        group: Group::Additions,
        help: IDXSTATS_HELP,
    },
    OptSpec {
        id: OptId::UnknownReference,
        short: None,
        long: Some("unknown-reference"),
        key: None,
        value: Some("error|unmapped"),
        group: Group::Additions,
        help: "What a SAM record whose RNAME, or RNEXT other than '=' and \
               '*', is not in the header's @SQ lines does: 'error' (the \
               default) fails the run naming the file, line and name; \
               'unmapped' reads the name as '*' with a warning, as samtools \
               does (an unknown RNAME makes the read unmapped), and counts \
               such records in --stats-json (unknown_reference_records).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::Markdup),
        short: None,
        long: Some("markdup"),
        key: None,
        value: Some("[=picard|samtools]"),
        group: Group::Markdup,
        help: "Mark duplicates while sorting. --markdup or --markdup=picard: \
               as Picard MarkDuplicates 3.4.0 does: input grouped by read \
               name (aligner output, -n output) gets Picard's \
               ASSUME_SORT_ORDER=queryname answer (every record of a \
               duplicate template marked); input whose @HD says SO:coordinate \
               gets Picard's coordinate-input answer (primary records only). \
               Existing 0x400 flags are cleared first. Input whose templates \
               are scattered is refused. --markdup=samtools: the records of \
               samtools collate | samtools fixmate -m | samtools sort | \
               samtools markdup 1.24 (fixmate's mate fields, MC, ms and TLEN \
               included), from one input: grouped by read name (aligner \
               output, collate or -n output), or with @HD SO:coordinate \
               (grouped first, by a sort of its own); coordinate order only.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::Metrics),
        short: None,
        long: Some("metrics"),
        key: None,
        value: Some("FILE"),
        group: Group::Markdup,
        help: "Write Picard's DuplicationMetrics text (one row per library \
               and the histogram) to FILE.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::RemoveDuplicates),
        short: None,
        long: Some("remove-duplicates"),
        key: None,
        value: None,
        group: Group::Markdup,
        help: "Leave duplicates out of the output instead of marking them \
               (Picard's REMOVE_DUPLICATES=true; samtools markdup's -r).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::OpticalDistance),
        short: None,
        long: Some("optical-distance"),
        key: None,
        value: Some("N"),
        group: Group::Markdup,
        help: "Pixel distance within which duplicates on one tile are \
               optical (Picard's OPTICAL_DUPLICATE_PIXEL_DISTANCE) [100]; \
               2500 suits patterned flow cells. With --markdup=samtools: \
               samtools markdup's -d [0: off], duplicates tagged dt:Z:SQ \
               (optical) or dt:Z:LB.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::DuplicateScoring),
        short: None,
        long: Some("duplicate-scoring"),
        key: None,
        value: Some("STRATEGY"),
        group: Group::Markdup,
        help: "Which duplicate of a set is kept: sum-of-base-qualities (the \
               default, Picard's SUM_OF_BASE_QUALITIES) or \
               total-mapped-reference-length (TOTAL_MAPPED_REFERENCE_LENGTH). \
               random is refused (Picard's random scores cannot be \
               reproduced).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::TaggingPolicy),
        short: None,
        long: Some("tagging-policy"),
        key: None,
        value: Some("POLICY"),
        group: Group::Markdup,
        help: "DT tags on duplicates (Picard's TAGGING_POLICY): none (the \
               default, DontTag), optical (DT:Z:SQ on sequencing/optical \
               duplicates, OpticalOnly) or all (also DT:Z:LB on the other \
               duplicates). Any DT tag of the input is dropped, as Picard's \
               CLEAR_DT does.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::ReadNameRegex),
        short: None,
        long: Some("read-name-regex"),
        key: None,
        value: Some("REGEX"),
        group: Group::Markdup,
        help: "Picard's READ_NAME_REGEX: a regex matching the whole read \
               name whose groups 1, 2 and 3 are tile, x and y (Java syntax \
               it shares with Rust's regex crate; lookaround, possessive \
               quantifiers and other Java-only syntax are refused), or null \
               to look for no optical duplicates. Default: the last three \
               ':'-separated fields of names with 5 or 7 fields.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::RemoveSequencingDuplicates),
        short: None,
        long: Some("remove-sequencing-duplicates"),
        key: None,
        value: None,
        group: Group::Markdup,
        help: "Leave sequencing (optical) duplicates out of the output and \
               mark the others (Picard's REMOVE_SEQUENCING_DUPLICATES=true).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::BarcodeTag),
        short: None,
        long: Some("barcode-tag"),
        key: None,
        value: Some("TAG"),
        group: Group::Markdup,
        help: "Picard's BARCODE_TAG: duplicates must also share this tag's \
               UMI (a string of ATCGN-); with --markdup=samtools, samtools \
               markdup's --barcode-tag (a Z tag duplicates must share).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::ReadOneBarcodeTag),
        short: None,
        long: Some("read-one-barcode-tag"),
        key: None,
        value: Some("TAG"),
        group: Group::Markdup,
        help: "Picard's READ_ONE_BARCODE_TAG: duplicates must also share \
               the first read's value of this tag.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::ReadTwoBarcodeTag),
        short: None,
        long: Some("read-two-barcode-tag"),
        key: None,
        value: Some("TAG"),
        group: Group::Markdup,
        help: "Picard's READ_TWO_BARCODE_TAG: duplicates must also share \
               the second read's value of this tag.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::Mode),
        short: None,
        long: Some("mode"),
        key: None,
        value: Some("t|s"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -m: how paired reads' positions are measured: t, template start and end (the default), or s, sequence start.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::MarkSupplementary),
        short: None,
        long: Some("mark-supplementary"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -S: also mark the supplementary (and secondary, unmapped) records of duplicates carrying SA, XA or an unmapped mate (a second pass over a temporary file).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::IncludeFails),
        short: None,
        long: Some("include-fails"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --include-fails: QC-failed (0x200) reads take part.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::ClearExisting),
        short: None,
        long: Some("clear-existing"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -c: clear 0x400 and the dt/do tags of duplicates of the input first.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::DuplicateCount),
        short: None,
        long: Some("duplicate-count"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --duplicate-count: a dc tag with the duplication count on the records kept.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::TagOriginal),
        short: None,
        long: Some("tag-original"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -t: a do tag naming the original on each primary duplicate.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::MaxReadLength),
        short: None,
        long: Some("max-read-length"),
        key: None,
        value: Some("INT"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -l: the window duplicates are looked for in [300].",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::BarcodeName),
        short: None,
        long: Some("barcode-name"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --barcode-name: duplicates must share the barcode in the read name (eighth ':' field).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::BarcodeRgx),
        short: None,
        long: Some("barcode-rgx"),
        key: None,
        value: Some("REGEX"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --barcode-rgx: the barcode is group 1 of REGEX in the read name.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::UseReadGroups),
        short: None,
        long: Some("use-read-groups"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --use-read-groups: duplicates must share the read group.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::NoMultiDup),
        short: None,
        long: Some("no-multi-dup"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --no-multi-dup: reduced checking of duplicates of duplicates.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::ReadCoords),
        short: None,
        long: Some("read-coords"),
        key: None,
        value: Some("REGEX"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --read-coords: regex for the tile and x/y coordinates in read names (Rust regex syntax; POSIX extended in samtools).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::CoordsOrder),
        short: None,
        long: Some("coords-order"),
        key: None,
        value: Some("ORDER"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --coords-order: txy (default), tyx, xyt, yxt, xty, ytx, xy or yx.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::MoveUmi),
        short: None,
        long: Some("move-umi-to-tag"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --move-umi-to-tag (with --barcode-name or --barcode-rgx): the UMI goes from the read name to RX:Z; as samtools 1.24, without --mark-supplementary only the records written at the end of the input are changed.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::UmiSeparator),
        short: None,
        long: Some("umi-separator"),
        key: None,
        value: Some("CHAR"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --umi-separator [:].",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::MarkdupStats),
        short: None,
        long: Some("markdup-stats"),
        key: None,
        value: Some("FILE"),
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -f: write its statistics text to FILE.",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::MarkdupReport),
        short: None,
        long: Some("markdup-report"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's -s: print its statistics text on standard error (when no --markdup-stats file).",
    },
    OptSpec {
        id: OptId::Markdup(crate::options::markdup::MdOpt::MarkdupJson),
        short: None,
        long: Some("markdup-json"),
        key: None,
        value: None,
        group: Group::SamtoolsMarkdup,
        help: "samtools markdup's --json: the statistics in JSON.",
    },
    OptSpec {
        id: OptId::Verbosity,
        short: None,
        long: Some("verbosity"),
        key: None,
        value: Some("INT"),
        group: Group::Other,
        help: "Verbosity [2]; 3 or more also prints a summary of the run on \
               stderr.",
    },
    OptSpec {
        id: OptId::Help,
        short: Some('h'),
        long: Some("help"),
        key: None,
        value: None,
        group: Group::Other,
        help: "Print this help and exit.",
    },
    OptSpec {
        id: OptId::Version,
        short: None,
        long: Some("version"),
        key: None,
        value: None,
        group: Group::Other,
        help: "Print the version and exit.",
    },
    OptSpec {
        id: OptId::Minimiser,
        short: Some('M'),
        long: None,
        key: Some("minimiser"),
        value: None,
        group: Group::Order,
        help: "Minimiser order: placed reads by coordinate, then unplaced \
               reads clustered by the minimiser of their sequence (reads \
               whose minimiser is on the reverse strand are written \
               reverse-complemented): @HD SO:coordinate SS:coordinate:minhash, \
               or SO:unsorted SS:unsorted:minhash when no read is placed.",
    },
    OptSpec {
        id: OptId::Kmer,
        short: Some('K'),
        long: None,
        key: Some("kmer"),
        value: Some("INT"),
        group: Group::Order,
        help: "Minimiser k-mer size, 1 to 31 (others are clamped) [20].",
    },
    OptSpec {
        id: OptId::MinimiserIndex,
        short: Some('I'),
        long: None,
        key: Some("minimiser_index"),
        value: Some("FILE"),
        group: Group::Order,
        help: "Order minimisers by their position in FILE, a FASTA \
               reference (plain or gzip); implies -M.",
    },
    OptSpec {
        id: OptId::Window,
        short: Some('w'),
        long: None,
        key: Some("window"),
        value: Some("INT"),
        group: Group::Order,
        help: "Window size for the -I index [100].",
    },
    OptSpec {
        id: OptId::NoReverse,
        short: Some('R'),
        long: None,
        key: Some("no_reverse"),
        value: None,
        group: Group::Order,
        help: "Minimiser of the forward strand only (no effect without -M).",
    },
    OptSpec {
        id: OptId::Squash,
        short: Some('H'),
        long: None,
        key: Some("squash"),
        value: None,
        group: Group::Order,
        help: "Squash homopolymers when computing minimisers.",
    },
    OptSpec {
        id: OptId::Reference,
        short: None,
        long: Some("reference"),
        key: None,
        value: Some("FILE"),
        group: Group::Output,
        help: "Reference FASTA for CRAM input and output (with its .fai when \
               there is one); without it, REF_CACHE and REF_PATH are searched \
               by each @SQ's M5, as htslib does. Each reference must match its \
               @SQ M5.",
    },
    OptSpec {
        id: OptId::Unsupported(
            "htslib input options (such as filter=EXPR) are not implemented; \
             alnsort sorts every record of the input",
        ),
        short: None,
        long: Some("input-fmt-option"),
        key: None,
        value: Some("OPT=VAL"),
        group: Group::Unsupported,
        help: "Input format options, such as filter=EXPR.",
    },
];

/// The first line of every usage text.
pub const SORT_USAGE: &str =
    "Usage: alnsort sort [options] [in.bam|in.sam|in.cram|-] [in2.bam|in2.cram ...]";

/// `alnsort sort --help`, rendered from [`OPTIONS`].
pub fn sort_help() -> String {
    let mut out = String::new();
    out.push_str(SORT_USAGE);
    out.push_str("\n\n");
    for line in wrap(
        "Sorts SAM, BAM or CRAM (a file, or - for standard input) as samtools 1.24 \
         sorts it: the same options, the same records in the same order, the \
         same header edits. Several inputs are sorted as one, with the header \
         and records samtools merge of them followed by samtools sort gives \
         (clashing @RG/@PG IDs renamed with the suffixes of samtools merge \
         -s 0). Long options may be abbreviated to a unique \
         prefix, as in samtools.",
        HELP_WIDTH,
    ) {
        out.push_str(&line);
        out.push('\n');
    }
    for group in Group::ALL {
        out.push('\n');
        for line in wrap(group.title(), HELP_WIDTH) {
            out.push_str(&line);
            out.push('\n');
        }
        for spec in OPTIONS.iter().filter(|s| s.group == group) {
            push_help_entry(&mut out, spec, spec.help);
        }
    }
    out
}

/// Parses samtools' `-O FMT[,opt=val...]`.
pub fn parse_output_fmt(v: &str, args: &mut SortOptions) -> Result<(), ArgError> {
    let mut parts = v.split(',');
    let fmt = parts.next().unwrap_or("").to_ascii_lowercase();
    args.format = Some(match fmt.as_str() {
        "bam" => OutFormat::Bam,
        "sam" => OutFormat::Sam,
        "sam.gz" => OutFormat::SamGz,
        "cram" => OutFormat::Cram,
        "parquet" => OutFormat::Parquet,
        other => {
            return Err(ArgError::Invalid(format!(
                "unknown output format '{other}': alnsort writes SAM, BAM, CRAM or Parquet"
            )))
        }
    });
    for opt in parts {
        parse_fmt_option(opt, args)?;
    }
    Ok(())
}

pub fn parse_fmt_option(opt: &str, args: &mut SortOptions) -> Result<(), ArgError> {
    match opt.split_once('=') {
        Some(("level", n)) => {
            let n = parse_int("level", n)?;
            if !(0..=9).contains(&n) {
                return Err(ArgError::Invalid(format!(
                    "compression level {n} is out of range 0..9"
                )));
            }
            args.format_level = Some(n as u32);
            Ok(())
        }
        // htslib's output thread count: alnsort's -@ covers compression.
        Some(("nthreads", _)) => Ok(()),
        Some(("reference", f)) => {
            args.reference = Some(PathBuf::from(f));
            Ok(())
        }
        // CRAM's own options: checked against the output format (and their
        // values) by the config.
        // Parquet's compression: checked against the output format by the
        // config.
        Some(("codec", v)) => {
            args.parquet_codec = Some(v.to_ascii_lowercase());
            Ok(())
        }
        Some((k @ ("version" | "embed_ref" | "no_ref" | "store_md" | "store_nm"), v)) => {
            args.cram_options.push((k.to_string(), v.to_string()));
            Ok(())
        }
        _ => Err(ArgError::Invalid(format!(
            "unsupported output format option '{opt}' (alnsort knows level=N, reference=FILE, \
             nthreads=N, for CRAM version, embed_ref, no_ref, store_md, store_nm, and for Parquet codec)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The group "Duplicate marking" of the help and the ids the marking
    /// stages' setter takes are the same rows, every one applied as a
    /// marking stage's keyword; none of them is a stage's own keyword.
    #[test]
    fn the_markdup_group_is_its_ids_and_every_one_applies() {
        let group: Vec<String> = OPTIONS
            .iter()
            .filter(|s| matches!(s.group, Group::Markdup | Group::SamtoolsMarkdup))
            .map(|s| s.name())
            .collect();
        let ids: Vec<String> = markdup_options().map(|s| s.name()).collect();
        assert_eq!(ids, group);
        assert!(ids.len() >= 11, "{ids:?}");
        for s in markdup_options() {
            assert!(!s.id.taken_by_stages(), "{}", s.name());
            let value = s.value.map(|v| match v {
                "N" => "50".to_string(),
                "STRATEGY" => "total-mapped-reference-length".into(),
                "POLICY" => "all".into(),
                "REGEX" => "null".into(),
                "TAG" => "BC".into(),
                "[=picard|samtools]" => "samtools".into(),
                "t|s" => "s".into(),
                "INT" => "250".into(),
                "CHAR" => "_".into(),
                "ORDER" => "txy".into(),
                other => format!("x.{}", other.to_lowercase()),
            });
            let mut o = SortOptions::new("alnsort sort".into());
            o.apply_markdup_keyword(&s.keyword(), value)
                .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
            assert!(o.markdup.enabled, "{}", s.name());
        }
    }

    /// The stages' keywords are settings of a run from Python, none
    /// refused, and the whole-run options (output, index, report) are not
    /// among them.
    #[test]
    fn the_stages_options_are_keywords_of_a_run() {
        let names: Vec<String> = stage_options().map(|s| s.name()).collect();
        for s in stage_options() {
            assert!(s.refusal().is_none(), "{}", s.name());
            assert!(!matches!(
                s.id,
                OptId::Output | OptId::Help | OptId::Version
            ));
        }
        for whole_run in [
            "-o",
            "--write-index",
            "--stats-json",
            "--progress",
            "--markdup",
        ] {
            assert!(
                !names.iter().any(|n| n == whole_run),
                "{whole_run}: {names:?}"
            );
        }
        for own in [
            "-n",
            "-t",
            "-@",
            "-O",
            "-l",
            "-T",
            "--no-PG",
            "--max-memory",
        ] {
            assert!(names.iter().any(|n| n == own), "{own}: {names:?}");
        }
    }
}
