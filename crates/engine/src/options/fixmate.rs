//! `alnsort fixmate`'s command line, read as samtools fixmate 1.24 reads it: one table (`FIXMATE_OPTIONS`), its parser and help, and the parsed `FixmateArgs`.

use crate::error::ArgError;
use crate::error::Result;
use crate::options::sort::{OrderFlag, SortOptions};
use crate::options::sort_args;
use crate::options::table::{Group, OptSpec};
use alnsort_markdup::fixmate::{Options, Sanitize};
use std::ffi::OsString;

/// What an option of `alnsort fixmate` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixmateOptId {
    Remove,
    NoProperPairCheck,
    TemplateCigar,
    MateScore,
    Sanitize,
    Uncompressed,
    OutputFmt,
    OutputFmtOption,
    InputFmtOption,
    Reference,
    Threads,
    WriteIndex,
    NoPg,
    Verbosity,
    Help,
    Unsupported(&'static str),
}

crate::options::table::refused_when_unsupported!(FixmateOptId);

/// One option of `alnsort fixmate` ([`FIXMATE_OPTIONS`]).
pub type FixmateSpec = OptSpec<FixmateOptId>;

/// A row of [`FIXMATE_OPTIONS`]; its help group follows from what it does.
const fn spec(
    id: FixmateOptId,
    short: Option<char>,
    long: Option<&'static str>,
    value: Option<&'static str>,
    help: &'static str,
    key: Option<&'static str>,
) -> FixmateSpec {
    use FixmateOptId::*;
    let group = match id {
        Uncompressed | OutputFmt | OutputFmtOption | WriteIndex | NoPg | Reference => Group::Output,
        Threads => Group::Resources,
        Unsupported(_) => Group::Unsupported,
        _ => Group::Other,
    };
    OptSpec::new(id, short, long, value, group, help, key)
}

/// Every option `alnsort fixmate` knows (samtools fixmate 1.24's); the
/// parser and the help read it.
pub const FIXMATE_OPTIONS: &[FixmateSpec] = &[
    spec(
        FixmateOptId::Remove,
        Some('r'),
        None,
        None,
        "Remove unmapped reads and secondary alignments.",
        Some("remove"),
    ),
    spec(
        FixmateOptId::NoProperPairCheck,
        Some('p'),
        None,
        None,
        "Disable the FR proper pair check (0x2 is then never cleared).",
        Some("no_proper_pair_check"),
    ),
    spec(
        FixmateOptId::TemplateCigar,
        Some('c'),
        None,
        None,
        "Add the template cigar ct tag.",
        Some("template_cigar"),
    ),
    spec(
        FixmateOptId::MateScore,
        Some('m'),
        None,
        None,
        "Add the mate score tag ms (what samtools markdup needs).",
        Some("mate_score"),
    ),
    spec(
        FixmateOptId::Sanitize,
        Some('z'),
        Some("sanitize"),
        Some("FLAG[,FLAG]"),
        "Sanitize alignment fields: all (default: every fix but cigarx), none, off, on, pos, \
         mqual, unmap, cigar, cigdup, cigarx, aux.",
        None,
    ),
    spec(
        FixmateOptId::Unsupported(
            "fixing base modification tags (MM/ML/MN) to match hard clips is not implemented",
        ),
        Some('M'),
        None,
        None,
        "Fix base modification tags (MM/ML/MN).",
        Some("base_mods"),
    ),
    spec(
        FixmateOptId::Uncompressed,
        Some('u'),
        None,
        None,
        "Uncompressed output.",
        Some("uncompressed"),
    ),
    spec(
        FixmateOptId::OutputFmt,
        Some('O'),
        Some("output-fmt"),
        Some("FORMAT[,OPT[=VAL]]..."),
        "Output format: SAM, BAM or CRAM (default BAM, or as the output's name says), \
         with options as in --output-fmt-option.",
        None,
    ),
    spec(
        FixmateOptId::OutputFmtOption,
        None,
        Some("output-fmt-option"),
        Some("OPT[=VAL]"),
        "Output format option: level=N, reference=FILE, and CRAM's version, embed_ref, \
         no_ref, store_md, store_nm.",
        None,
    ),
    spec(
        FixmateOptId::InputFmtOption,
        None,
        Some("input-fmt-option"),
        Some("OPT=VAL"),
        "Input format option: reference=FILE (as --reference).",
        None,
    ),
    spec(
        FixmateOptId::Reference,
        None,
        Some("reference"),
        Some("FILE"),
        "Reference sequence FASTA FILE (CRAM input and output).",
        None,
    ),
    spec(
        FixmateOptId::Threads,
        Some('@'),
        Some("threads"),
        Some("INT"),
        "Number of additional threads to use.",
        None,
    ),
    spec(
        FixmateOptId::WriteIndex,
        None,
        Some("write-index"),
        None,
        "Ignored with a warning, as the output is not sorted by position.",
        None,
    ),
    spec(
        FixmateOptId::NoPg,
        None,
        Some("no-PG"),
        None,
        "Do not add a PG line.",
        None,
    ),
    spec(
        FixmateOptId::Verbosity,
        None,
        Some("verbosity"),
        Some("INT"),
        "Set the level of diagnostic output.",
        None,
    ),
    spec(
        FixmateOptId::Help,
        Some('h'),
        Some("help"),
        None,
        "Print this help and exit.",
        None,
    ),
];

/// The usage line.
pub const FIXMATE_USAGE: &str = "Usage: alnsort fixmate [-rpcmu] [-z FLAGS] [-O FMT] [-@ INT] <in.nameSrt.bam> <out.nameSrt.bam>";

/// `alnsort fixmate --help`, rendered from [`FIXMATE_OPTIONS`].
pub fn fixmate_help() -> String {
    let mut out = format!(
        "{FIXMATE_USAGE}\n\n\
         Fills in mate coordinates, TLEN, mate flags and the MQ, MC (and with -m ms,\n\
         with -c ct) tags of a file grouped by read name, as samtools fixmate 1.24 does.\n\
         The input must have the records of each read name together (collated or\n\
         name-sorted); coordinate-sorted input is refused. Use '-' for standard input\n\
         or output.\n\nOptions:\n"
    );
    for s in FIXMATE_OPTIONS {
        crate::options::table::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// Parsed `alnsort fixmate` arguments.
#[derive(Debug)]
pub struct FixmateArgs {
    /// Input, output, format and threads in `alnsort sort`'s terms.
    pub sort: SortOptions,
    pub fix: Options,
}

/// What parsing produced.
#[derive(Debug)]
pub enum ParsedFixmate {
    Run(Box<FixmateArgs>),
    /// Print [`fixmate_help`] and exit 0 (`--help`, or no arguments).
    Usage,
}

impl FixmateArgs {
    /// No option given yet; `command_line` is the @PG CL.
    pub fn new(command_line: String) -> FixmateArgs {
        let mut sort = SortOptions::new(command_line);
        // The output keeps the input's grouping (no index by position).
        sort.order = OrderFlag::Name;
        FixmateArgs {
            sort,
            fix: Options::default(),
        }
    }

    /// Applies one option of [`FIXMATE_OPTIONS`] (`None` for a flag).
    pub fn apply(&mut self, id: FixmateOptId, value: Option<&str>) -> Result<(), ArgError> {
        let text = || value.ok_or_else(|| ArgError::Invalid(format!("{id:?} needs a value")));
        let sort = &mut self.sort;
        match id {
            FixmateOptId::Remove => self.fix.remove = true,
            FixmateOptId::NoProperPairCheck => self.fix.proper_pair_check = false,
            FixmateOptId::TemplateCigar => self.fix.template_cigar = true,
            FixmateOptId::MateScore => self.fix.mate_score = true,
            FixmateOptId::Sanitize => {
                let v = text()?;
                self.fix.sanitize = Sanitize::parse(v).map_err(|e| ArgError::Value {
                    what: format!("-z {v}"),
                    source: Box::new(e),
                })?;
            }
            FixmateOptId::Uncompressed => sort.uncompressed = true,
            FixmateOptId::OutputFmt => crate::options::sort::parse_output_fmt(text()?, sort)?,
            FixmateOptId::OutputFmtOption => crate::options::sort::parse_fmt_option(text()?, sort)?,
            FixmateOptId::InputFmtOption => {
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
            FixmateOptId::Reference => sort.reference = Some(text()?.into()),
            FixmateOptId::Threads => {
                sort.threads = crate::options::table::parse_int("-@", text()?)?.max(0) as usize
            }
            FixmateOptId::WriteIndex => sort.write_index = true,
            FixmateOptId::NoPg => sort.no_pg = true,
            FixmateOptId::Verbosity => {
                sort.verbosity = crate::options::table::parse_int("--verbosity", text()?)? as i32
            }
            FixmateOptId::Help | FixmateOptId::Unsupported(_) => {
                return Err(ArgError::Invalid(format!(
                    "{id:?} is not an option of a run: the parser acts on it"
                )))
            }
        }
        Ok(())
    }
}

/// Parses the arguments after `alnsort fixmate` (`argv0` begins the @PG
/// CL) with [`FIXMATE_OPTIONS`]: options, then the input and the output.
pub fn parse_fixmate(argv0: &str, rest: Vec<OsString>) -> Result<ParsedFixmate, ArgError> {
    use lexopt::prelude::*;
    if rest.is_empty() {
        return Ok(ParsedFixmate::Usage);
    }
    let mut f = FixmateArgs::new(sort_args::stringify(argv0, "fixmate", &rest));
    let mut positional = Vec::new();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let s = sort_args::find_option(FIXMATE_OPTIONS, &arg)?;
        if let Some(refusal) = s.refusal() {
            return Err(refusal);
        }
        if s.id == FixmateOptId::Help {
            return Ok(ParsedFixmate::Usage);
        }
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        f.apply(s.id, value.as_deref())?;
    }
    match <[String; 2]>::try_from(positional) {
        Ok([input, output]) => {
            f.sort.input = input;
            f.sort.output = output;
        }
        Err(p) => {
            return Err(ArgError::Invalid(format!(
                "expected an input and an output file, got {} argument(s): {FIXMATE_USAGE}",
                p.len()
            )))
        }
    }
    Ok(ParsedFixmate::Run(Box::new(f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::table::OptionName;

    fn args(a: &[&str]) -> Result<ParsedFixmate, ArgError> {
        parse_fixmate("alnsort", a.iter().map(OsString::from).collect())
    }

    #[test]
    fn options_as_samtools_takes_them() {
        let ParsedFixmate::Run(f) =
            args(&["-rpcm", "-z", "on", "-O", "sam", "in.bam", "-"]).unwrap()
        else {
            panic!("a run")
        };
        assert!(f.fix.remove && !f.fix.proper_pair_check && f.fix.template_cigar);
        assert!(f.fix.mate_score);
        assert_eq!(
            f.fix.sanitize,
            Sanitize::parse("mqual,unmap,cigar,aux").unwrap()
        );
        assert_eq!(
            (f.sort.input.as_str(), f.sort.output.as_str()),
            ("in.bam", "-")
        );
        assert_eq!(f.sort.format, Some(crate::options::sort::OutFormat::Sam));
        assert!(matches!(args(&[]), Ok(ParsedFixmate::Usage)));
        assert!(matches!(args(&["--help"]), Ok(ParsedFixmate::Usage)));
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(&["-M", "in.bam", "out.bam"]).unwrap_err();
        assert!(
            matches!(e, ArgError::Unsupported { ref option, .. } if option == "-M"),
            "{e}"
        );
        let e = args(&["-z", "bogus", "in.bam", "out.bam"]).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = args(&["in.bam"]).unwrap_err();
        assert!(e.to_string().contains("input and an output"), "{e}");
        assert!(args(&["-x", "in.bam", "out.bam"]).is_err());
    }

    #[test]
    fn help_lists_every_option() {
        let h = fixmate_help();
        for s in FIXMATE_OPTIONS {
            assert!(h.contains(&s.synopsis()), "help lacks {}", s.synopsis());
        }
    }
}
