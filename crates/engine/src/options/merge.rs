//! `alnsort merge`'s command line, read as samtools merge reads it: one table (`MERGE_OPTIONS`), its parser and help, and the parsed `MergeArgs`.

use crate::error::{ArgError, Result};
use crate::options::sort::{OrderFlag, SortOptions};
use crate::options::table::{Group, OptSpec, OptionName};
pub use alnsort_bam::header_merge::MergeOptions;
use std::ffi::OsString;
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

crate::options::table::refused_when_unsupported!(MergeOptId);

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
    OptSpec::new(id, short, long, value, group, help, key)
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
        crate::options::sort::FLAGSTAT_HELP,
        None,
    ),
    spec(
        MergeOptId::FlagstatFormat,
        None,
        Some("flagstat-format"),
        Some("default|json|tsv"),
        crate::options::sort::FLAGSTAT_FORMAT_HELP,
        None,
    ),
    spec(
        MergeOptId::Idxstats,
        None,
        Some("idxstats"),
        Some("FILE"),
        crate::options::sort::IDXSTATS_HELP,
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
        crate::options::table::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// Parsed `alnsort merge` arguments.
#[derive(Debug)]
pub struct MergeArgs {
    /// The output, format, order and thread options in `alnsort sort`'s
    /// terms (`crate::config::resolve` makes the output configuration from them).
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
            MergeOptId::Level => sort.level = crate::options::table::parse_level(text()?)?,
            MergeOptId::Uncompressed => sort.uncompressed = true,
            MergeOptId::OutputFmt => crate::options::sort::parse_output_fmt(text()?, sort)?,
            MergeOptId::OutputFmtOption => crate::options::sort::parse_fmt_option(text()?, sort)?,
            MergeOptId::Threads => {
                sort.threads = crate::options::table::parse_int("-@", text()?)?.max(0) as usize
            }
            MergeOptId::WriteIndex => sort.write_index = true,
            MergeOptId::Flagstat => {
                sort.apply(crate::options::sort::OptId::Flagstat, Some(text()?.into()))?
            }
            MergeOptId::FlagstatFormat => sort.apply(
                crate::options::sort::OptId::FlagstatFormat,
                Some(text()?.into()),
            )?,
            MergeOptId::Idxstats => {
                sort.apply(crate::options::sort::OptId::Idxstats, Some(text()?.into()))?
            }
            MergeOptId::NoPg => sort.no_pg = true,
            MergeOptId::Verbosity => {
                sort.verbosity = crate::options::table::parse_int("--verbosity", text()?)? as i32
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
        let spec = crate::options::table::keyword_option(MERGE_OPTIONS, keyword)?;
        match spec.id {
            MergeOptId::Output | MergeOptId::Help => {
                Err(crate::options::table::not_a_keyword(spec.name(), keyword))
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
    let mut m = MergeArgs::new(
        crate::options::sort_args::stringify(argv0, "merge", &rest),
        seed,
    );
    let mut positional = Vec::new();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let s = crate::options::sort_args::find_option(MERGE_OPTIONS, &arg)?;
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
#[cfg(test)]
mod parse_tests {
    use super::*;
    use crate::options::sort::OutFormat;

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
    use crate::options::sort::OPTIONS;
    use crate::options::table::OptionId;
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

#[cfg(test)]
mod help_tests {
    use super::{merge_help, MERGE_OPTIONS};
    use crate::options::table::OptionName;

    /// Help is rendered as `alnsort sort --help` is: every option listed,
    /// wrapped to 80 columns.
    #[test]
    fn help_lists_every_option_within_80_columns() {
        let help = merge_help();
        for line in help.lines() {
            assert!(
                line.chars().count() <= crate::options::table::HELP_WIDTH,
                "{line:?}"
            );
        }
        for s in MERGE_OPTIONS {
            assert!(help.contains(&format!("  {}", s.synopsis())), "{s:?}");
        }
    }
}
