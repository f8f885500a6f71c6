//! The stage subcommands' command lines (`alnsort split|sample|reach|
//! splitters|map|reduce|assemble` and the duplicate-marking tasks
//! `alnsort markdup-collect|markdup-join|markdup-decide|markdup-finish|
//! markdup-assemble`): one option table, [`STAGE_OPTIONS`] (rows of the
//! engine's [`OptSpec`], as `alnsort sort`'s and `alnsort merge`'s), from
//! which the parser ([`parse_stage_args`]), `--help` ([`stage_help`]),
//! the man page and completions ([`stage_docs`]) come; each option is
//! applied by one setter ([`StageArgs::apply`]). The sort options after
//! `--` are `alnsort sort`'s, parsed by its own parser
//! ([`StageArgs::sort_options`]). The commands themselves run in
//! [`crate::stages::commands`].

use std::ffi::OsString;
use std::path::PathBuf;

use crate::config::IndexKind;
use crate::error::ArgError;
use crate::options::sort::{OptId, SortOptions};
use crate::options::table::{Group, OptSpec, OptionName};
use crate::stages::plan::SplitSpec;

/// The stage subcommands, with their arguments and what each does.
pub const STAGE_COMMANDS: [(&str, &str, &str); 12] = [
    ("split", "IN.bam...", "Cut BAM inputs into splits (record-start virtual offsets); prints them as JSON."),
    ("sample", "IN.bam...", "Sort keys with their tie-break, from a few stretches spread over one split; prints them (hex) as JSON."),
    ("reach", "IN.bam...", "Several inputs: the largest coordinate merge key of one split's records (null for one input or an empty split); map takes the largest of the earlier splits of the same input as --prior."),
    ("splitters", "SAMPLES.json...", "Range splitters (hex, JSON) from the output of 'alnsort sample' for every split."),
    ("map", "IN.bam...", "Sort one split and cut it into one framed block file per range; prints the files, the record count and the proven end."),
    ("reduce", "IN.bam...", "Merge one range's block files (in split order) into a headerless, EOF-less part (and its part index); with --markdup among the sort options, set the duplicate flags of --marks or of this range's slices (--finished)."),
    ("assemble", "IN.bam...", "Write the output: header, parts in range order, EOF block, merged index; or a directory of shards."),
    ("markdup-collect", "IN.bam", "Duplicate marking, per split: the split's record slots, fragment ends (one file per end bucket) and mate halves (one file per name bucket), and where its templates meet its neighbours'."),
    ("markdup-join", "IN.bam", "Duplicate marking, per name bucket: the pair ends of the bucket's mate halves from every split, one file per end bucket."),
    ("markdup-decide", "IN.bam", "Duplicate marking, per end bucket: the duplicate sets of the bucket's ends (from every collect and join), the duplicate and optical indexes of each split and the bucket's counts."),
    ("markdup-finish", "IN.bam", "Duplicate marking, per split: Picard's output walk over the split with the indexes every decide found in it, resumed where the previous split's walk ended (--after)."),
    ("markdup-assemble", "IN.bam", "Duplicate marking: the metrics file (--metrics among the sort options) from every split's finish, and with --decisions the whole decision 'reduce --marks' applies."),
];

/// What a stage option does; [`StageArgs::apply`] applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageOptId {
    Parts,
    Threads,
    Split,
    Count,
    Samples,
    Partitions,
    Splitters,
    Prior,
    OutDir,
    Range,
    Block,
    Part,
    Index,
    Output,
    WriteIndex,
    Sharded,
    Marks,
    Records,
    EndBuckets,
    NameBuckets,
    Collected,
    Joined,
    Decided,
    Finished,
    Bucket,
    Ordinal,
    After,
    Decisions,
    Help,
}

impl crate::options::table::OptionId for StageOptId {}

impl StageOptId {
    /// The subcommands that take the option.
    pub fn commands(self) -> &'static [&'static str] {
        use StageOptId::*;
        match self {
            Parts => &["split"],
            Threads => &["split", "reach"],
            Split => &["sample", "reach", "map", "markdup-collect"],
            Count => &["sample"],
            Samples => &["splitters"],
            Partitions => &["splitters", "reduce", "markdup-finish"],
            Splitters => &["map"],
            Prior => &["map"],
            OutDir => &[
                "map",
                "markdup-collect",
                "markdup-join",
                "markdup-decide",
                "markdup-finish",
            ],
            Range => &["reduce"],
            Block => &["reduce"],
            Part => &["reduce", "assemble"],
            Index => &["reduce"],
            Output => &["assemble", "markdup-assemble"],
            WriteIndex => &["assemble"],
            Sharded => &["assemble"],
            Marks | Records => &["reduce"],
            EndBuckets | NameBuckets => &["markdup-collect", "map"],
            Collected => &["markdup-join", "markdup-decide", "markdup-finish"],
            Joined => &["markdup-decide"],
            Decided => &["markdup-finish", "markdup-assemble"],
            Finished => &["markdup-assemble", "reduce"],
            Bucket => &["markdup-join", "markdup-decide"],
            Ordinal | After => &["markdup-finish"],
            Decisions => &["markdup-assemble"],
            Help => &[],
        }
    }

    /// Whether `command` takes the option (`--help` every one does).
    pub fn of(self, command: &str) -> bool {
        self == StageOptId::Help || self.commands().contains(&command)
    }
}

/// One option of the stage subcommands.
pub type StageSpec = OptSpec<StageOptId>;

/// A row of [`STAGE_OPTIONS`]: a long option (`value` its value's name,
/// `None` for a flag).
const fn row(
    id: StageOptId,
    long: &'static str,
    value: Option<&'static str>,
    help: &'static str,
) -> StageSpec {
    OptSpec::new(id, None, Some(long), value, Group::Other, help, None)
}

/// Every option of the stage subcommands; [`StageOptId::commands`] says
/// which take it.
pub const STAGE_OPTIONS: &[StageSpec] = &[
    row(StageOptId::Parts, "parts", Some("N"), "About this many splits in all (default 1)."),
    row(StageOptId::Threads, "threads", Some("N"), "Threads (default 1; the other stages take -@ among the sort options)."),
    row(StageOptId::Split, "split", Some("I:START:END:ORD"), "The split: input index, start and end virtual offsets (END '-' for the end of the input) and ordinal, as the 'arg' field 'alnsort split' prints."),
    row(StageOptId::Count, "count", Some("N"), "Most keys to draw (default 100)."),
    row(StageOptId::Samples, "samples", Some("FILE"), "A file holding the JSON 'alnsort sample' printed; repeat for every split (or give them as arguments)."),
    row(StageOptId::Partitions, "partitions", Some("R"), "Ranges (the splitters cut R ranges; reduce: how many there are; markdup-finish: cut the split's outcome into R slices, one per reduce, from the map's ranges)."),
    row(StageOptId::Splitters, "splitters", Some("FILE"), "The JSON 'alnsort splitters' printed (default: none, one range)."),
    row(StageOptId::Prior, "prior", Some("N"), "Several inputs: the largest 'reach' of the earlier splits of this split's input (default: none, for its first split)."),
    row(StageOptId::OutDir, "out-dir", Some("DIR"), "Directory for the files the stage writes (map: split-ORD.range-R.alnblk; the markdup tasks: markdup-*)."),
    row(StageOptId::Range, "range", Some("I"), "The range this reduce merges (0-based)."),
    row(StageOptId::Block, "block", Some("FILE"), "A block file of this range; repeat in split order."),
    row(StageOptId::Part, "part", Some("FILE"), "reduce: the part to write; assemble: a part, repeated in range order."),
    row(StageOptId::Index, "index", None, "Also write the part index FILE.idx (for an indexed output)."),
    row(StageOptId::Output, "output", Some("FILE"), "assemble: the output (a new directory with --sharded); markdup-assemble: the output the metrics file names (default: standard output, '-')."),
    row(StageOptId::WriteIndex, "write-index", Some("bai|csi"), "Merge the parts' indexes into FILE.bai or FILE.csi."),
    row(StageOptId::Sharded, "sharded", None, "Write a directory of complete, individually indexed files, one per part."),
    row(StageOptId::Marks, "marks", Some("FILE"), "The decisions file 'alnsort markdup-assemble' wrote (the maps ran with --markdup)."),
    row(StageOptId::Records, "records", Some("N"), "With --marks: the 'records' of each map, repeated in split order."),
    row(StageOptId::EndBuckets, "end-buckets", Some("N"), "Buckets of read ends (each a markdup-decide task; default 1). map --markdup: also write the split's share as markdup-collect does."),
    row(StageOptId::NameBuckets, "name-buckets", Some("N"), "Buckets of mate halves (each a markdup-join task; default 1). map --markdup: also write the split's share as markdup-collect does."),
    row(StageOptId::Collected, "collected", Some("FILE"), "The JSON 'alnsort markdup-collect' printed for a split; repeat for every split, in split order."),
    row(StageOptId::Joined, "joined", Some("FILE"), "The JSON 'alnsort markdup-join' printed for a name bucket; repeat for every name bucket."),
    row(StageOptId::Decided, "decided", Some("FILE"), "The JSON 'alnsort markdup-decide' printed for an end bucket; repeat for every end bucket."),
    row(StageOptId::Finished, "finished", Some("FILE"), "The JSON 'alnsort markdup-finish' printed for a split; repeat for every split, in split order (reduce: take this range's slice of each, finished with --partitions, instead of --marks)."),
    row(StageOptId::Bucket, "bucket", Some("I"), "The bucket this task takes (0-based): a name bucket (join) or an end bucket (decide)."),
    row(StageOptId::Ordinal, "ordinal", Some("S"), "The split this task finishes (its ordinal)."),
    row(StageOptId::After, "after", Some("FILE"), "The JSON 'alnsort markdup-finish' printed for the previous split: the walk resumes where it ended (default: the start of the input; needed when that split's 'carry' is not null)."),
    row(StageOptId::Decisions, "decisions", Some("FILE"), "The whole decision to write, for 'reduce --marks' (default: none, the reduces take their ranges' slices with --finished; only the metrics are made)."),
    OptSpec::new(
        StageOptId::Help,
        Some('h'),
        Some("help"),
        None,
        Group::Other,
        "Print this help.",
        None,
    ),
];

/// What a stage command line holds, every option applied.
#[derive(Debug, Clone, Default)]
pub struct StageArgs {
    pub parts: Option<usize>,
    pub threads: Option<usize>,
    pub split: Option<SplitSpec>,
    pub count: Option<usize>,
    pub samples: Vec<PathBuf>,
    pub partitions: Option<usize>,
    pub splitters: Option<PathBuf>,
    pub prior: Option<u64>,
    pub out_dir: Option<PathBuf>,
    pub range: Option<usize>,
    pub blocks: Vec<PathBuf>,
    pub part_files: Vec<PathBuf>,
    pub index: bool,
    pub output: Option<PathBuf>,
    pub write_index: Option<IndexKind>,
    pub sharded: bool,
    pub marks: Option<PathBuf>,
    pub records: Vec<u64>,
    pub end_buckets: Option<usize>,
    pub name_buckets: Option<usize>,
    pub collected: Vec<PathBuf>,
    pub joined: Vec<PathBuf>,
    pub decided: Vec<PathBuf>,
    pub finished: Vec<PathBuf>,
    pub bucket: Option<usize>,
    pub ordinal: Option<usize>,
    pub after: Option<PathBuf>,
    pub decisions: Option<PathBuf>,
    /// The arguments that are not options (inputs, sample files).
    pub positional: Vec<PathBuf>,
    /// The arguments after `--`: `alnsort sort`'s options.
    pub sort_options: Vec<OsString>,
    /// `--help` or `-h` was given.
    pub help: bool,
}

/// `--NAME V`: a number.
fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, ArgError> {
    v.parse()
        .map_err(|_| ArgError::Invalid(format!("--{name} {v}: not a number")))
}

impl StageArgs {
    /// Applies one option of [`STAGE_OPTIONS`] with its value (`None` for
    /// a flag); a later value of a single-valued option overrides an
    /// earlier one, a repeated list option adds to the list.
    pub fn apply(&mut self, id: StageOptId, value: Option<&str>) -> Result<(), ArgError> {
        use StageOptId::*;
        let name = STAGE_OPTIONS
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.long)
            .unwrap_or("");
        let v = || value.ok_or_else(|| ArgError::Invalid(format!("--{name} needs a value")));
        match id {
            Parts => self.parts = Some(number(name, v()?)?),
            Threads => self.threads = Some(number(name, v()?)?),
            Split => self.split = Some(parse_split(v()?)?),
            Count => self.count = Some(number(name, v()?)?),
            Samples => self.samples.push(v()?.into()),
            Partitions => self.partitions = Some(number(name, v()?)?),
            Splitters => self.splitters = Some(v()?.into()),
            Prior => {
                self.prior = match v()? {
                    "-" => None,
                    n => Some(number(name, n)?),
                }
            }
            OutDir => self.out_dir = Some(v()?.into()),
            Range => self.range = Some(number(name, v()?)?),
            Block => self.blocks.push(v()?.into()),
            Part => self.part_files.push(v()?.into()),
            Index => self.index = true,
            Output => self.output = Some(v()?.into()),
            WriteIndex => {
                self.write_index = Some(match v()? {
                    "bai" => IndexKind::Bai,
                    "csi" => IndexKind::Csi,
                    other => {
                        return Err(ArgError::Invalid(format!(
                            "--write-index {other}: expected bai or csi"
                        )))
                    }
                })
            }
            Sharded => self.sharded = true,
            Marks => self.marks = Some(v()?.into()),
            Records => self.records.push(number(name, v()?)?),
            EndBuckets => self.end_buckets = Some(positive(name, v()?)?),
            NameBuckets => self.name_buckets = Some(positive(name, v()?)?),
            Collected => self.collected.push(v()?.into()),
            Joined => self.joined.push(v()?.into()),
            Decided => self.decided.push(v()?.into()),
            Finished => self.finished.push(v()?.into()),
            Bucket => self.bucket = Some(number(name, v()?)?),
            Ordinal => self.ordinal = Some(number(name, v()?)?),
            After => self.after = Some(v()?.into()),
            Decisions => self.decisions = Some(v()?.into()),
            Help => self.help = true,
        }
        Ok(())
    }

    /// The sort options given after `--`, as `alnsort sort` reads them;
    /// the command line the stages record is `alnsort sort` with them.
    pub fn sort_options(&self) -> Result<SortOptions, ArgError> {
        let parsed = crate::options::sort_args::parse_with(
            "alnsort",
            self.sort_options.clone(),
            false,
            &[],
        )?;
        if let Some((spec, why)) = parsed
            .given
            .iter()
            .find_map(|s| not_for_stages(s.id).map(|why| (s, why)))
        {
            return Err(ArgError::Unsupported {
                option: spec.name(),
                why,
            });
        }
        match parsed.parsed {
            crate::options::sort_args::ParsedSort::Run(o) => Ok(*o),
            crate::options::sort_args::ParsedSort::Usage
            | crate::options::sort_args::ParsedSort::Version => Err(ArgError::Invalid(
                "the options ask for the help or the version, not for a sort".into(),
            )),
        }
    }
}

/// Why an option of `alnsort sort` that no stage reads is refused among
/// a stage's sort options (the stages resolve the options into the run's
/// configuration, of which they use the order, format, level, index,
/// threads, memory, temporary directory, unknown-reference policy, @PG
/// and duplicate marking); `None` for the options they honour.
fn not_for_stages(id: OptId) -> Option<&'static str> {
    use crate::options::sort::OptId::*;
    match id {
        StatsJson => {
            Some("the stage subcommands write no run statistics; each prints JSON of what it wrote")
        }
        Mqc => Some("the stage subcommands write no MultiQC report"),
        Progress | ProgressInterval => {
            Some("the stage subcommands print no progress; a workflow manager reports the tasks")
        }
        Verbosity => Some("the stage subcommands have no verbosity levels"),
        Resume => Some("the stage subcommands keep their outputs as files already: a killed driver resumes from them (docs/cluster.md)"),
        Reference => Some("the stages read BAM and write BAM or SAM: CRAM needs no reference here"),
        _ => None,
    }
}

fn positive(name: &str, v: &str) -> Result<usize, ArgError> {
    match number::<usize>(name, v)? {
        0 => Err(ArgError::Invalid(format!("--{name} {v}: at least 1"))),
        n => Ok(n),
    }
}

/// The `arg` form of a split (`INPUT:START:END:ORDINAL`, END `-` for the
/// end of the input), as `alnsort split` prints it.
pub fn split_arg(s: &SplitSpec) -> String {
    format!(
        "{}:{}:{}:{}",
        s.input,
        s.start,
        s.end.map_or("-".into(), |e| e.to_string()),
        s.ordinal
    )
}

/// The split [`split_arg`] wrote.
pub fn parse_split(text: &str) -> Result<SplitSpec, ArgError> {
    let f: Vec<&str> = text.split(':').collect();
    let bad = || {
        ArgError::Invalid(format!(
            "--split {text}: expected INPUT:START:END:ORDINAL (END '-' for none)"
        ))
    };
    if f.len() != 4 {
        return Err(bad());
    }
    Ok(SplitSpec {
        input: f[0].parse().map_err(|_| bad())?,
        start: f[1].parse().map_err(|_| bad())?,
        end: if f[2] == "-" {
            None
        } else {
            Some(f[2].parse().map_err(|_| bad())?)
        },
        ordinal: f[3].parse().map_err(|_| bad())?,
    })
}

/// Whether `command` is a stage subcommand.
pub fn is_stage_command(command: &str) -> bool {
    STAGE_COMMANDS.iter().any(|c| c.0 == command)
}

/// Reads the arguments after `alnsort COMMAND`: the options of
/// [`STAGE_OPTIONS`] that `command` takes (long names, `--name value` or
/// `--name=value`), the positional arguments, and after `--` the sort
/// options, kept for [`StageArgs::sort_options`].
pub fn parse_stage_args(command: &str, argv: Vec<OsString>) -> Result<StageArgs, ArgError> {
    let mut out = StageArgs::default();
    let mut it = argv.into_iter();
    let unknown = |text: &str| {
        ArgError::Invalid(format!(
            "unknown option '{text}' for alnsort {command} (sort options go after --)"
        ))
    };
    while let Some(arg) = it.next() {
        let text = arg.to_string_lossy().into_owned();
        if text == "--" {
            out.sort_options = it.by_ref().collect();
            break;
        }
        if text == "-h" {
            out.help = true;
            continue;
        }
        let Some(long) = text.strip_prefix("--") else {
            if text.starts_with('-') && text != "-" {
                return Err(unknown(&text));
            }
            out.positional.push(PathBuf::from(arg));
            continue;
        };
        let (name, inline) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        let spec = STAGE_OPTIONS
            .iter()
            .find(|o| o.long == Some(name) && o.id.of(command))
            .ok_or_else(|| unknown(&format!("--{name}")))?;
        let value = match (spec.value, inline) {
            (Some(_), Some(v)) => Some(v),
            (Some(_), None) => Some(
                it.next()
                    .ok_or_else(|| ArgError::Invalid(format!("--{name} needs a value")))?
                    .to_string_lossy()
                    .into_owned(),
            ),
            (None, Some(_)) => return Err(ArgError::Invalid(format!("--{name} takes no value"))),
            (None, None) => None,
        };
        out.apply(spec.id, value.as_deref())?;
    }
    Ok(out)
}

/// The rows of [`STAGE_OPTIONS`] that `command` takes, `--help` last.
fn options_of(command: &str) -> impl Iterator<Item = &'static StageSpec> + '_ {
    STAGE_OPTIONS
        .iter()
        .filter(move |o| o.id != StageOptId::Help && o.id.of(command))
}

/// `alnsort help <stage>` and `alnsort <stage> --help`, rendered from
/// [`STAGE_OPTIONS`] as `alnsort sort --help` is from its table.
pub fn stage_help(command: &str) -> String {
    let (_, args_text, what) = STAGE_COMMANDS
        .iter()
        .find(|c| c.0 == command)
        .copied()
        .unwrap_or(("", "", ""));
    let mut out = format!("Usage: alnsort {command} [options] {args_text} [-- SORT OPTIONS]\n\n");
    let about = format!(
        "{what} SORT OPTIONS are those of 'alnsort sort' (order, -l, -O, -@, --max-memory, \
         -T, --no-PG, ...); give every stage of one sort the same ones. Prints JSON on \
         standard output."
    );
    for line in crate::options::table::wrap(&about, crate::options::table::HELP_WIDTH) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\nOptions:\n");
    for o in options_of(command) {
        crate::options::table::push_help_entry(&mut out, o, o.help);
    }
    out
}

/// The stage subcommands for the man page and completions
/// (`alnsort generate`), from [`STAGE_COMMANDS`] and [`STAGE_OPTIONS`].
pub fn stage_docs() -> Vec<crate::options::generate::CommandDoc> {
    use crate::options::generate::{CommandDoc, OptDoc};
    STAGE_COMMANDS
        .iter()
        .map(|&(name, args, what)| CommandDoc {
            name,
            summary: what,
            usage: format!("alnsort {name} [options] {args}"),
            options: options_of(name).map(OptDoc::of).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_help_lists_each_option_within_80_columns() {
        for (command, _, _) in STAGE_COMMANDS {
            let text = stage_help(command);
            for line in text.lines() {
                assert!(
                    line.chars().count() <= crate::options::table::HELP_WIDTH,
                    "{command}: {line:?}"
                );
            }
            for o in options_of(command) {
                assert!(
                    text.contains(&format!("--{}", o.long.unwrap())),
                    "{command}: --{:?}",
                    o.long
                );
            }
        }
        // Every option is some command's.
        for o in STAGE_OPTIONS {
            assert!(
                o.id == StageOptId::Help
                    || STAGE_COMMANDS
                        .iter()
                        .any(|c| o.id.commands().contains(&c.0)),
                "{:?} belongs to no command",
                o.id
            );
        }
    }

    #[test]
    fn split_args_round_trip() {
        let s = SplitSpec {
            input: 1,
            start: 123 << 16,
            end: None,
            ordinal: 4,
        };
        assert_eq!(parse_split(&split_arg(&s)).unwrap(), s);
        assert!(parse_split("1:2:3").is_err());
    }

    #[test]
    fn unknown_options_are_refused_and_sort_options_pass_after_the_separator() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let e = parse_stage_args("map", os(&["--parts", "3"])).unwrap_err();
        assert!(e.to_string().contains("sort options go after --"), "{e}");
        assert!(parse_stage_args("map", os(&["-n"])).is_err());
        assert!(parse_stage_args("map", os(&["--index"])).is_err());
        assert!(parse_stage_args("reduce", os(&["--index=1"])).is_err());
        assert!(parse_stage_args("split", os(&["--parts", "x"])).is_err());
        let a = parse_stage_args(
            "map",
            os(&["--split=0:1:-:0", "in.bam", "--", "-n", "-l", "1"]),
        )
        .unwrap();
        assert_eq!(a.split.map(|s| s.start), Some(1));
        assert_eq!(a.positional, vec![PathBuf::from("in.bam")]);
        assert_eq!(a.sort_options, os(&["-n", "-l", "1"]));
        let a =
            parse_stage_args("reduce", os(&["--records", "3", "--records=4", "--help"])).unwrap();
        assert_eq!(a.records, vec![3, 4]);
        assert!(a.help);
    }
}
