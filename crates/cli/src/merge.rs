//! `alnsort merge`'s command line (samtools merge's options, from the
//! engine's [`MERGE_OPTIONS`] table) and its exit status; the merge is
//! [`alnsort_engine::merge::run_merge`].

use crate::args::{self, find_option};
use alnsort_engine::cleanup::Debris;
use alnsort_engine::merge::{
    merge_help, run_merge, MergeArgs, MergeOptId, MergeOptions, MERGE_OPTIONS,
};
use alnsort_engine::options::{self, ArgError, OptionName, OrderFlag, OutFormat};
use lexopt::prelude::*;
use std::ffi::OsString;

/// What parsing produced.
#[derive(Debug)]
pub enum ParsedMerge {
    Run(Box<MergeArgs>),
    Usage,
}

/// Parses the arguments after `alnsort merge`.
pub fn parse(argv0: &str, rest: Vec<OsString>) -> Result<ParsedMerge, ArgError> {
    if rest.is_empty() {
        return Ok(ParsedMerge::Usage);
    }
    let command_line = args::stringify(argv0, "merge", &rest);
    let mut sort = match args::parse(argv0, Vec::new(), false)? {
        args::Parsed::Run(a) => *a,
        _ => unreachable!("no arguments and no terminal give a run"),
    };
    sort.command_line = command_line;
    sort.output = String::new();
    let mut inputs = Vec::new();
    let mut positional = Vec::new();
    let mut force = false;
    let mut merge = MergeOptions {
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
        ..Default::default()
    };
    let mut output: Option<String> = None;
    let mut region = None;
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let s = find_option(MERGE_OPTIONS, &arg)?;
        if let MergeOptId::Unsupported(why) = s.id {
            return Err(ArgError::Unsupported {
                option: s.name(),
                why,
            });
        }
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        let text = || value.clone().expect("option takes a value");
        match s.id {
            MergeOptId::Name => sort.order = OrderFlag::Name,
            MergeOptId::NameLex => {
                sort.order = OrderFlag::Name;
                sort.lexicographic = true;
            }
            MergeOptId::Tag => sort.tag = Some(text()),
            MergeOptId::TemplateCoordinate => sort.order = OrderFlag::TemplateCoordinate,
            MergeOptId::Output => output = Some(text()),
            MergeOptId::Force => force = true,
            MergeOptId::FileList => {
                let list = text();
                let body = std::fs::read_to_string(&list).map_err(|e| {
                    ArgError::Invalid(format!("-b {list}: cannot read the file list: {e}"))
                })?;
                // hts_readlines: one name per line, empty lines skipped.
                inputs.extend(
                    body.lines()
                        .map(|l| l.trim_end_matches('\r'))
                        .filter(|l| !l.is_empty())
                        .map(String::from),
                );
            }
            MergeOptId::CombineRg => merge.combine_rg = true,
            MergeOptId::CombinePg => merge.combine_pg = true,
            MergeOptId::Seed => {
                let v = text();
                merge.seed = v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| ArgError::Invalid(format!("Invalid random seed '{v}'")))?;
            }
            MergeOptId::Level1 => sort.level = Some(1),
            MergeOptId::Level => sort.level = options::parse_level(&text())?,
            MergeOptId::Uncompressed => sort.uncompressed = true,
            MergeOptId::OutputFmt => options::parse_output_fmt(&text(), &mut sort)?,
            MergeOptId::OutputFmtOption => options::parse_fmt_option(&text(), &mut sort)?,
            MergeOptId::Threads => {
                sort.threads = options::parse_int("-@", &text())?.max(0) as usize
            }
            MergeOptId::WriteIndex => sort.write_index = true,
            MergeOptId::NoPg => sort.no_pg = true,
            MergeOptId::Verbosity => {
                sort.verbosity = options::parse_int("--verbosity", &text())? as i32
            }
            MergeOptId::Help => return Ok(ParsedMerge::Usage),
            MergeOptId::Region => region = Some(text()),
            MergeOptId::Reference => sort.reference = Some(text().into()),
            MergeOptId::InputFmtOption => {
                let v = text();
                match v.split_once('=') {
                    Some(("reference", file)) => sort.reference = Some(file.into()),
                    _ => {
                        return Err(ArgError::Invalid(format!(
                            "--input-fmt-option {v}: alnsort takes reference=FILE only"
                        )))
                    }
                }
            }
            MergeOptId::Unsupported(_) => unreachable!("refused above"),
        }
    }
    let output = match output {
        Some(o) => o,
        None if !positional.is_empty() => positional.remove(0),
        None => {
            return Err(ArgError::Invalid(
                "You must at least specify the output file".into(),
            ))
        }
    };
    inputs.extend(positional);
    if inputs.is_empty() {
        return Err(ArgError::Invalid(
            "You must specify at least one (and usually two or more) input files".into(),
        ));
    }
    sort.output = output;
    sort.input = inputs[0].clone();
    Ok(ParsedMerge::Run(Box::new(MergeArgs {
        sort,
        inputs,
        force,
        merge,
        region,
    })))
}

/// `alnsort merge ARGS`: the exit status.
pub fn main(argv0: &str, rest: Vec<OsString>) -> i32 {
    let parsed = match parse(argv0, rest) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("alnsort merge: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort merge --help' for the options.");
            }
            return 1;
        }
    };
    let m = match parsed {
        ParsedMerge::Usage => {
            print!("{}", merge_help());
            return 0;
        }
        ParsedMerge::Run(m) => m,
    };
    let debris = Debris::default();
    let cram = alnsort_engine::uses_cram(
        m.sort.format == Some(OutFormat::Cram) || m.sort.output.ends_with(".cram"),
        m.inputs.iter().map(String::as_str),
    );
    let result = crate::setup_process(&debris, cram).and_then(|_signals| {
        let r = run_merge(&m, &debris).map_err(anyhow::Error::from);
        if r.is_err() {
            debris.remove_all();
        }
        r
    });
    if result.is_err() {
        crate::signals::yield_to_signal();
    }
    match result {
        Ok(()) => 0,
        Err(e) if crate::closed_stdout(&e) => crate::signals::exit_by_sigpipe(),
        Err(e) => {
            eprintln!("alnsort merge: {}", crate::failure_text(&e));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options are looked up as `alnsort sort`'s: unique prefixes of long
    /// names, ambiguity named, refused options named as written.
    #[test]
    fn long_options_abbreviate_and_refusals_name_the_option() {
        let args = |v: &[&str]| parse("alnsort", v.iter().map(OsString::from).collect());
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
        let args = |v: &[&str]| parse("alnsort", v.iter().map(OsString::from).collect());
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
