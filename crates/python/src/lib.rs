//! `alnsort._alnsort`: the extension module behind the `alnsort` Python
//! package (its Python half is `python/alnsort/`). It runs `alnsort sort`
//! from an argument vector through the CLI's own parser (`args::parse`),
//! resolver (`config::resolve`) and run (`run_sort`), so every option has
//! one definition and every error message is the one the CLI prints after
//! "alnsort sort: ". The Python half builds the argument vector from
//! keyword arguments and turns the report's JSON into a dict.

use alnsort_engine::args::{self, Parsed};
use alnsort_engine::config;
use pyo3::prelude::*;
use std::ffi::OsString;

mod stages;

/// The program name the runs are given: it begins the @PG CL field and the
/// report's `command_line`, as `alnsort` typed in a shell does.
pub const ARGV0: &str = "alnsort";

/// A failed `alnsort sort`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What the CLI prints after "alnsort sort: " for the same arguments.
    pub message: String,
    /// The cause is an I/O error of the operating system (a missing file,
    /// a permission, a full disk), not bad data or a bad option.
    pub io: bool,
}

impl Failure {
    fn usage(message: String) -> Failure {
        Failure { message, io: false }
    }
}

/// True when `e`'s chain holds an operating-system I/O error. Errors of
/// kind InvalidData, InvalidInput and UnexpectedEof are the input's
/// fault (a truncated or corrupt file), not I/O.
pub fn is_io(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::{InvalidData, InvalidInput, UnexpectedEof};
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| !matches!(io.kind(), InvalidData | InvalidInput | UnexpectedEof))
    })
}

/// Runs `alnsort sort REST…` (REST: the arguments after `sort`) and returns
/// the run's report as JSON, the text `--stats-json` writes. Standard input
/// and output are refused: a Python caller names files.
pub fn sort_argv(rest: Vec<OsString>) -> Result<String, Failure> {
    // The message texts are the ones `alnsort_engine::run` prints for each stage.
    let a = match args::parse(ARGV0, rest, false).map_err(|e| Failure::usage(e.to_string()))? {
        Parsed::Run(a) => a,
        Parsed::Usage | Parsed::Version => {
            return Err(Failure::usage(
                "the arguments ask for the help or the version, not for a sort".into(),
            ))
        }
    };
    let cfg = config::resolve(&a).map_err(|e| Failure::usage(e.to_string()))?;
    if cfg.input == "-" {
        return Err(Failure::usage(
            "standard input cannot be read from Python: name an input file".into(),
        ));
    }
    if cfg.output.is_none() {
        return Err(Failure::usage(
            "standard output cannot be written from Python: name an output file (-o FILE)".into(),
        ));
    }
    let report = alnsort_engine::run_sort(cfg).map_err(|e| Failure {
        message: alnsort_engine::error_text(&e),
        io: is_io(&e),
    })?;
    Ok(report.json())
}

/// Runs `alnsort sort` with `argv`, the arguments after `sort` (str or
/// os.PathLike items), without the GIL, and returns the run's report as
/// JSON text. Raises alnsort.AlnsortError (alnsort.AlnsortIOError when
/// the cause is I/O) with the message the CLI prints after
/// "alnsort sort: ". Use alnsort.sort(), which builds argv from keyword
/// arguments.
#[pyfunction]
fn run(py: Python<'_>, argv: Vec<OsString>) -> PyResult<String> {
    match py.detach(move || sort_argv(argv)) {
        Ok(json) => Ok(json),
        Err(f) => {
            // The exception classes live in the package's Python half.
            let class = py.import("alnsort")?.getattr(if f.io {
                "AlnsortIOError"
            } else {
                "AlnsortError"
            })?;
            Err(PyErr::from_value(class.call1((f.message,))?))
        }
    }
}

/// The text of `alnsort sort --help`: every option, with its differences
/// from samtools.
#[pyfunction]
fn sort_help() -> String {
    args::sort_help()
}

#[pymodule]
fn _alnsort(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ARGV0", ARGV0)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(sort_help, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_split, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_sample, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_splitters, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_map, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_reach, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_assemble, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn option_errors_are_the_parsers_text() {
        let f = sort_argv(os(&["--no-such-option", "-o", "x.bam", "in.sam"])).unwrap_err();
        let cli = args::parse(ARGV0, os(&["--no-such-option"]), false).unwrap_err();
        assert_eq!(f.message, cli.to_string());
        assert!(!f.io);
    }

    #[test]
    fn standard_streams_are_refused() {
        let f = sort_argv(os(&["-o", "x.bam", "-"])).unwrap_err();
        assert!(f.message.contains("standard input"), "{}", f.message);
        let f = sort_argv(os(&["in.sam"])).unwrap_err();
        assert!(f.message.contains("standard output"), "{}", f.message);
    }

    #[test]
    fn a_missing_input_is_io_and_leaves_no_output() {
        let dir = std::env::temp_dir().join(format!("alnsort-py-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.bam");
        let missing = dir.join("missing.sam");
        let mut argv = os(&["--no-PG", "--no-progress", "-o"]);
        argv.push(out.clone().into());
        argv.push(missing.clone().into());
        let f = sort_argv(argv).unwrap_err();
        assert!(f.io, "{f:?}");
        assert!(
            f.message.contains(&missing.display().to_string()),
            "{}",
            f.message
        );
        assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn data_errors_are_not_io() {
        let bad = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "truncated");
        assert!(!is_io(&anyhow::Error::new(bad).context("reading")));
        let gone = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert!(is_io(&anyhow::Error::new(gone).context("opening")));
    }
}
