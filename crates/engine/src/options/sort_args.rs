//! `alnsort sort`'s command line, read the way samtools 1.24 reads it
//! (getopt string `l:m:nNo:O:T:@:t:MI:K:uRw:H` plus the global long
//! options), with the options of the one table ([`OPTIONS`]): the parser
//! accepts exactly the options in it (a long option also as a unique
//! prefix, as getopt_long does) and applies each with
//! [`SortOptions::apply`]. The binary parses `alnsort sort` with it; a
//! driver around the sort (the Ray driver, through the Python binding)
//! parses its command line with it too, adding its own long options
//! ([`Extra`]) and learning which of the table's options were given
//! ([`SortArgs::given`]), so it can honour each or refuse it by name.

use crate::error::ArgError;
use crate::options::sort::{OptId, SortOptions, OPTIONS};
use crate::options::table::{OptSpec, OptionName};
use lexopt::prelude::*;
use std::ffi::OsString;

/// What parsing produced: run, or print something and exit.
#[derive(Debug)]
pub enum ParsedSort {
    Run(Box<SortOptions>),
    /// Print [`sort_help`] to stdout and exit 0 (`--help`, or no arguments
    /// and stdin a TTY, as samtools does).
    Usage,
    Version,
}

/// The entry of `table` for an option as lexopt read it: `-c`, or
/// `--name`, an exact name or a unique prefix of one (getopt_long's
/// abbreviations, which samtools accepts).
pub fn find_option<S: OptionName>(
    table: &'static [S],
    arg: &lexopt::Arg<'_>,
) -> Result<&'static S, ArgError> {
    let name = match arg {
        Short(c) => {
            return table
                .iter()
                .find(|s| s.short() == Some(*c))
                .ok_or_else(|| ArgError::UnknownOption(format!("-{c}")))
        }
        Long(name) => *name,
        Value(_) => unreachable!("positional arguments are not looked up"),
    };
    if let Some(s) = table.iter().find(|s| s.long() == Some(name)) {
        return Ok(s);
    }
    let matches: Vec<&'static S> = table
        .iter()
        .filter(|s| !name.is_empty() && s.long().is_some_and(|l| l.starts_with(name)))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(ArgError::UnknownOption(format!("--{name}"))),
        many => Err(ArgError::Ambiguous {
            given: name.to_string(),
            candidates: many
                .iter()
                .filter_map(|s| s.long().map(|l| format!("--{l}")))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// htslib's `stringify_argv` for `argv0 command rest...`: arguments joined
/// by spaces, tabs replaced (the @PG CL).
pub fn stringify(argv0: &str, command: &str, rest: &[OsString]) -> String {
    let mut s = argv0.to_string();
    s.push(' ');
    s.push_str(command);
    for a in rest {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s.replace('\t', " ")
}

/// A long option of a driver around the sort, parsed beside the table's
/// (`--partitions R` of the Ray driver): given as `--NAME VALUE`,
/// `--NAME=VALUE` or a unique prefix, as the table's long options are.
#[derive(Debug, Clone)]
pub struct Extra {
    pub long: String,
    pub takes_value: bool,
}

/// A command line read by [`parse_with`].
#[derive(Debug)]
pub struct SortArgs {
    pub parsed: ParsedSort,
    /// The table's options given, in order (each time it was given).
    pub given: Vec<&'static OptSpec<OptId>>,
    /// Their values, in the same order (`None` for an option without one):
    /// what a driver passes on to the tasks that honour the option.
    pub values: Vec<Option<String>>,
    /// The extra options given, in order, with their values.
    pub extra: Vec<(String, Option<String>)>,
}

/// Parses the arguments after `alnsort sort`. `argv0` is the program name as
/// typed (it begins the @PG CL, as samtools' does).
pub fn parse(argv0: &str, rest: Vec<OsString>, stdin_is_tty: bool) -> Result<ParsedSort, ArgError> {
    parse_with(argv0, rest, stdin_is_tty, &[]).map(|a| a.parsed)
}

/// An option as lexopt read it: one of the table's, or an extra one.
enum Found<'e> {
    Table(&'static OptSpec<OptId>),
    Extra(&'e Extra),
}

fn lookup<'e>(arg: &lexopt::Arg<'_>, extras: &'e [Extra]) -> Result<Found<'e>, ArgError> {
    let Long(name) = arg else {
        return find_option(OPTIONS, arg).map(Found::Table);
    };
    if let Some(e) = extras.iter().find(|e| e.long == *name) {
        return Ok(Found::Extra(e));
    }
    let in_table = find_option(OPTIONS, arg);
    let prefixed: Vec<&Extra> = extras
        .iter()
        .filter(|e| !name.is_empty() && e.long.starts_with(*name))
        .collect();
    match (in_table, prefixed.as_slice()) {
        (Ok(s), []) => Ok(Found::Table(s)),
        (Err(ArgError::UnknownOption(_)), [one]) => Ok(Found::Extra(one)),
        (Err(e), []) => Err(e),
        (table, several) => {
            let mut candidates: Vec<String> =
                several.iter().map(|e| format!("--{}", e.long)).collect();
            if table.is_ok() || matches!(table, Err(ArgError::Ambiguous { .. })) {
                candidates.extend(
                    OPTIONS
                        .iter()
                        .filter_map(|s| s.long().filter(|l| l.starts_with(*name)))
                        .map(|l| format!("--{l}")),
                );
            }
            Err(ArgError::Ambiguous {
                given: name.to_string(),
                candidates: candidates.join(", "),
            })
        }
    }
}

/// [`parse`], with a driver's own long options beside the table's; the
/// table's options given are listed in [`SortArgs::given`].
pub fn parse_with(
    argv0: &str,
    rest: Vec<OsString>,
    stdin_is_tty: bool,
    extras: &[Extra],
) -> Result<SortArgs, ArgError> {
    let mut a = SortOptions::new(stringify(argv0, "sort", &rest));
    let no_args = rest.is_empty();
    let mut positional: Vec<String> = Vec::new();
    let mut given = Vec::new();
    let mut values = Vec::new();
    let mut extra = Vec::new();
    let done = |parsed, given, values, extra| {
        Ok(SortArgs {
            parsed,
            given,
            values,
            extra,
        })
    };
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let spec = match lookup(&arg, extras)? {
            Found::Table(spec) => spec,
            Found::Extra(e) => {
                let value = match e.takes_value {
                    true => Some(p.value()?.string()?),
                    false => None,
                };
                extra.push((e.long.clone(), value));
                continue;
            }
        };
        match spec.id {
            OptId::Unsupported(why) => {
                return Err(ArgError::Unsupported {
                    option: spec.name(),
                    why,
                })
            }
            OptId::Help => return done(ParsedSort::Usage, given, values, extra),
            OptId::Version => return done(ParsedSort::Version, given, values, extra),
            _ => {}
        }
        let value = match spec.value {
            Some(_) if spec.optional_value() => p.optional_value(),
            Some(_) => Some(p.value()?),
            None => None,
        };
        values.push(value.as_ref().map(|v| v.to_string_lossy().into_owned()));
        a.apply(spec.id, value)?;
        given.push(spec);
    }
    if no_args && stdin_is_tty {
        return done(ParsedSort::Usage, given, values, extra);
    }
    if let Some(first) = positional.first() {
        a.input = first.clone();
    }
    if positional.len() > 1 && positional.iter().any(|p| p == "-") {
        return Err(ArgError::Invalid(
            "standard input ('-') can only be the one input of alnsort sort, not one of several"
                .into(),
        ));
    }
    a.inputs = positional;
    done(ParsedSort::Run(Box::new(a)), given, values, extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    /// A driver's own options are read beside the table's (exact, with
    /// `=`, as a unique prefix) and the table's given are listed; a prefix
    /// of both kinds is ambiguous, naming both.
    #[test]
    fn extra_options_are_read_beside_the_table() {
        let extras = [
            Extra {
                long: "partitions".into(),
                takes_value: true,
            },
            Extra {
                long: "sharded".into(),
                takes_value: false,
            },
        ];
        let a = parse_with(
            "drv",
            os(&[
                "-n",
                "--partitions",
                "4",
                "--shard",
                "--write-index",
                "-o",
                "o.bam",
                "in.bam",
            ]),
            false,
            &extras,
        )
        .unwrap();
        let names: Vec<String> = a.given.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["-n", "--write-index", "-o"]);
        assert_eq!(
            a.extra,
            [
                ("partitions".to_string(), Some("4".to_string())),
                ("sharded".to_string(), None)
            ]
        );
        let ParsedSort::Run(o) = a.parsed else {
            panic!("a run")
        };
        assert_eq!(o.inputs, ["in.bam"]);
        assert_eq!(
            o.command_line,
            "drv sort -n --partitions 4 --shard --write-index -o o.bam in.bam"
        );
        let a = parse_with("drv", os(&["--partitions=9", "x"]), false, &extras).unwrap();
        assert_eq!(a.extra, [("partitions".to_string(), Some("9".to_string()))]);
        // --p: --partitions and --progress, --progress-interval.
        let e = parse_with("drv", os(&["--p", "x"]), false, &extras).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("--partitions") && text.contains("--progress"),
            "{text}"
        );
        // Without extras the table alone: --partitions is unknown.
        let e = parse_with("drv", os(&["--partitions", "4"]), false, &[]).unwrap_err();
        assert!(matches!(e, ArgError::UnknownOption(_)), "{e}");
    }
}
