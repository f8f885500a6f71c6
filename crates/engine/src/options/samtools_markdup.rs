//! `alnsort markdup`'s command line, read as samtools markdup 1.24 reads it: one table (`MARKDUP_OPTIONS`), its parser and help, and the parsed `SamtoolsMarkdupArgs`.
//!
//! Sizes: `parse_markdup` (about 160 lines) is one loop over the command
//! line whose `match` applies each row of the table, then the checks of
//! the combination (barcode options, `--move-umi-to-tag`) and the regexes.

use crate::error::ArgError;
use crate::error::Result;
use crate::options::sort::SortOptions;
use crate::options::table::{Group, OptSpec};

use crate::options::samtools_marking::Combination;
use crate::options::sort_args;
use alnsort_markdup::samtools::coords::strtol;
use alnsort_markdup::samtools::{Mode, Options};
use std::ffi::OsString;

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

crate::options::table::refused_when_unsupported!(SmdOptId);

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
    OptSpec::new(id, short, long, value, group, help, key)
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
        crate::options::table::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// Parsed `alnsort markdup` arguments.
#[derive(Debug)]
pub struct SamtoolsMarkdupArgs {
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
pub enum ParsedSamtoolsMarkdup {
    Run(Box<SamtoolsMarkdupArgs>),
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
pub fn parse_markdup(argv0: &str, rest: Vec<OsString>) -> Result<ParsedSamtoolsMarkdup, ArgError> {
    use lexopt::prelude::*;
    if rest.is_empty() {
        return Ok(ParsedSamtoolsMarkdup::Usage { error: true });
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
            OutputFmt => crate::options::sort::parse_output_fmt(&v(), &mut sort)?,
            OutputFmtOption => crate::options::sort::parse_fmt_option(&v(), &mut sort)?,
            Threads => sort.threads = crate::options::table::parse_int("-@", &v())?.max(0) as usize,
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
            Verbosity => {
                sort.verbosity = crate::options::table::parse_int("--verbosity", &v())? as i32
            }
            Help => return Ok(ParsedSamtoolsMarkdup::Usage { error: false }),
            Unsupported(_) => unreachable!("refused above"),
        }
    }
    if positional.len() < 2 {
        return Ok(ParsedSamtoolsMarkdup::Usage { error: true });
    }
    if positional.len() > 2 {
        return Err(ArgError::Invalid(format!(
            "expected an input and an output, got {} file names ({})",
            positional.len(),
            positional.join(" ")
        )));
    }
    Combination {
        read_coords,
        coords_order,
        barcode_tag,
        barcode_name,
        barcode_rgx,
        move_umi,
        umi_sep,
    }
    .apply(&mut m)?;
    sort.input = positional[0].clone();
    sort.inputs = vec![positional[0].clone()];
    sort.output = positional[1].clone();
    Ok(ParsedSamtoolsMarkdup::Run(Box::new(SamtoolsMarkdupArgs {
        sort,
        marking: m,
        stats,
        stats_file,
        json,
        command_line,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::table::OptionName;

    fn parse(args: &[&str]) -> Result<ParsedSamtoolsMarkdup, ArgError> {
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
        let ParsedSamtoolsMarkdup::Run(a) = parse(&[
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
        assert!(matches!(m.barcode, alnsort_markdup::samtools::Barcode::Tag(t) if t == *b"BC"));
        assert!(a.stats && a.json);
        assert_eq!(a.stats_file.as_deref(), Some("st.txt"));
        assert_eq!(
            (a.sort.input.as_str(), a.sort.output.as_str()),
            ("in.bam", "out.sam")
        );
        assert_eq!(a.sort.threads, 3);
        assert!(a.command_line.starts_with("alnsort markdup -rS -l 250"));
        // atoi: a value that is not a number is 0, as samtools reads it.
        let ParsedSamtoolsMarkdup::Run(a) = parse(&["-d", "x", "i", "o"]).unwrap() else {
            panic!("not a run")
        };
        assert_eq!(a.marking.optical_distance, 0);
    }

    #[test]
    fn refusals_and_usage() {
        assert!(matches!(
            parse(&[]),
            Ok(ParsedSamtoolsMarkdup::Usage { error: true })
        ));
        assert!(matches!(
            parse(&["in.bam"]),
            Ok(ParsedSamtoolsMarkdup::Usage { error: true })
        ));
        assert!(matches!(
            parse(&["--help"]),
            Ok(ParsedSamtoolsMarkdup::Usage { error: false })
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
