//! `alnsort._alnsort`: the extension module behind the `alnsort` Python
//! package (its Python half is `python/alnsort/`). It binds the engine
//! (`alnsort_engine`): the keyword arguments arrive as typed values
//! ([`Keywords`]), each setting the field of the engine's `SortOptions`
//! that its `alnsort sort` option sets (through the same value parsers, so
//! a refused value gives the message the CLI prints after "alnsort sort: "),
//! and the run is the engine's `run_sort`, resolved by `config::resolve` as
//! the binary's is. Nothing is turned into argv and parsed again.

// This crate calls CPython's buffer protocol and so has `unsafe`: each
// block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

use alnsort_engine::error::ArgError;
use alnsort_engine::options::merge::MergeArgs;
use alnsort_engine::options::sort::{OrderFlag, SortOptions, UnknownReference};
use alnsort_engine::options::table::{OptSpec, OptionId, OptionName};
use alnsort_engine::{config, error_text};
use pyo3::prelude::*;

mod markdup_stages;
mod stages;

/// The program name the runs are given: it begins the @PG CL field and the
/// report's `command_line`, as `alnsort` typed in a shell does.
pub const ARGV0: &str = "alnsort";

/// Keyword arguments as the Python half checked them (`alnsort._options`,
/// the one conversion of every call): each option of the command's table
/// by its keyword ([`OptSpec::keyword`]: the long name with `_` for `-`,
/// or the table's key) with its value as text (`None` for a flag given as
/// `True`), in the order given.
///
/// [`OptSpec::keyword`]: alnsort_engine::options::table::OptSpec::keyword
pub type KeywordPairs = Vec<(String, Option<String>)>;

/// The keyword arguments of `alnsort.sort()` and `alnsort.merge()` (the
/// stages take the sort's) as typed values, and the command line they
/// stand for; a stage that marks duplicates also has `markdup`.
#[derive(Debug, Clone, FromPyObject)]
#[pyo3(from_item_all)]
pub struct Keywords {
    pub options: KeywordPairs,
    /// The `alnsort sort` (or `alnsort merge`) command these options stand
    /// for (recorded in @PG CL and the report, never parsed).
    pub command_line: Vec<String>,
    /// A stage's duplicate marking: the keywords of `alnsort sort`'s
    /// group "Duplicate marking" (`--markdup` implied), or `None` (no
    /// duplicate marking; absent from the dict).
    #[pyo3(default)]
    pub markdup: Option<KeywordPairs>,
}

impl Keywords {
    /// htslib's stringify_argv, as the binary records its command line.
    fn command_text(&self) -> String {
        self.command_line.join(" ").replace('\t', " ")
    }

    /// The engine's options for these keywords: each applied by the
    /// setter its `alnsort sort` option goes through, then the
    /// duplicate-marking ones (`SortOptions::apply_markdup_keyword`).
    pub fn sort_options(&self) -> Result<SortOptions, ArgError> {
        let mut o = SortOptions::new(self.command_text());
        apply_each(&self.options, |k, v| o.apply_keyword(k, v))?;
        if let Some(markdup) = &self.markdup {
            // `--markdup` itself first: an empty list asks for Picard's defaults.
            o.apply_markdup_keyword("markdup", None)?;
            apply_each(markdup, |k, v| o.apply_markdup_keyword(k, v))?;
        }
        Ok(o)
    }

    /// `alnsort merge`'s options for these keywords, each applied by the
    /// setter its `alnsort merge` option goes through; `-s` is 0 unless
    /// given (a call is reproducible). `alnsort merge` marks no duplicates.
    pub fn merge_args(&self) -> Result<MergeArgs, ArgError> {
        if self.markdup.is_some() {
            return Err(ArgError::Invalid(
                "alnsort merge marks no duplicates: markdup is a sort's".into(),
            ));
        }
        let mut m = MergeArgs::new(self.command_text(), 0);
        apply_each(&self.options, |k, v| m.apply_keyword(k, v.as_deref()))?;
        Ok(m)
    }
}

/// Applies each keyword pair, in the order given, with a command's
/// keyword setter; the first refusal stops it.
fn apply_each(
    pairs: &KeywordPairs,
    mut set: impl FnMut(&str, Option<String>) -> Result<(), ArgError>,
) -> Result<(), ArgError> {
    pairs
        .iter()
        .try_for_each(|(keyword, value)| set(keyword, value.clone()))
}

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

    /// A failed run: the engine's message, and whether an OS error is in
    /// its chain.
    fn of(e: &alnsort_engine::error::Error) -> Failure {
        Failure {
            message: error_text(e),
            io: is_io(e),
        }
    }
}

/// True when `e`'s chain holds an operating-system I/O error. Errors of
/// kind InvalidData, InvalidInput and UnexpectedEof are the input's
/// fault (a truncated or corrupt file), not I/O.
pub fn is_io(e: &alnsort_engine::error::Error) -> bool {
    e.io_error().is_some()
}

/// Where the index goes: `false` none, `true` OUTPUT.csi, a path that file
/// (`.bai`: BAI).
#[derive(Debug, Clone, FromPyObject)]
pub enum IndexArg {
    Write(bool),
    Path(String),
}

/// Sets the output of `o` and its index: `false` none, `true` the
/// output's name with `.csi`, a path that file (FILE.bai writes BAI,
/// anything else CSI) as `-o OUTPUT##idx##PATH` does.
fn set_output(o: &mut SortOptions, output: &str, index: &IndexArg) {
    o.output = match index {
        IndexArg::Write(false) => output.to_string(),
        IndexArg::Write(true) => {
            o.write_index = true;
            output.to_string()
        }
        IndexArg::Path(p) => {
            o.write_index = true;
            format!("{output}##idx##{p}")
        }
    };
}

/// The typed options of one sort of `input` into `output`.
pub fn sort_options(
    input: &str,
    output: &str,
    kw: &Keywords,
    index: &IndexArg,
) -> Result<SortOptions, ArgError> {
    let mut o = kw.sort_options()?;
    set_output(&mut o, output, index);
    o.input = input.to_string();
    o.inputs = vec![input.to_string()];
    Ok(o)
}

/// Runs one sort with typed options and returns the run's report as JSON,
/// the text `--stats-json` writes. Standard input and output are refused:
/// a Python caller names files.
pub fn sort_typed(options: SortOptions) -> Result<String, Failure> {
    let cfg = config::resolve(&options).map_err(|e| Failure::usage(error_text(&e)))?;
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
    let report = alnsort_engine::run::sort::run_sort(cfg).map_err(|e| Failure::of(&e))?;
    Ok(report.json())
}

/// Raises the package's exception for a failure.
pub(crate) fn raise_failure(py: Python<'_>, f: Failure) -> PyErr {
    // The exception classes live in the package's Python half.
    let class = match py.import("alnsort").and_then(|m| {
        m.getattr(if f.io {
            "AlnsortIOError"
        } else {
            "AlnsortError"
        })
    }) {
        Ok(c) => c,
        Err(err) => return err,
    };
    match class.call1((f.message,)) {
        Ok(v) => PyErr::from_value(v),
        Err(err) => err,
    }
}

/// Sorts `input` into `output` with the typed options `options` (a dict
/// of [`Keywords`]: `markdup` and `metrics` among them) and `index` (bool
/// or path), without the GIL, and returns the run's report as JSON text. Raises
/// alnsort.AlnsortError (alnsort.AlnsortIOError when the cause is I/O)
/// with the message the CLI prints after "alnsort sort: ". Use
/// alnsort.sort(), which checks the keyword arguments.
#[pyfunction]
fn sort(
    py: Python<'_>,
    input: String,
    output: String,
    options: Keywords,
    index: IndexArg,
) -> PyResult<String> {
    let opts = sort_options(&input, &output, &options, &index)
        .map_err(|e| raise_failure(py, Failure::usage(error_text(&e))))?;
    py.detach(move || sort_typed(opts))
        .map_err(|f| raise_failure(py, f))
}

/// The name of the order the options choose, as `alnsort.sort(order=)`
/// takes it.
fn order_name(o: &SortOptions) -> &'static str {
    match (o.order, o.lexicographic) {
        (OrderFlag::Coordinate, _) => "coordinate",
        (OrderFlag::Name, false) => "name",
        (OrderFlag::Name, true) => "name-lexicographic",
        (OrderFlag::TemplateCoordinate, _) => "template-coordinate",
        (OrderFlag::Minimiser, _) => "minimiser",
    }
}

/// Reads ARGS (what follows `sort` in a driver's command line; ARGV0 begins
/// the recorded command line) with `alnsort sort`'s own parser and option
/// table, plus EXTRAS, the driver's own long options as (name, takes a
/// value); CHECK is called with the list of the table's options given
/// (named as messages name them) before anything is resolved, and refuses
/// one by raising; then the result is resolved as `alnsort sort` does (output format
/// from `-O` or the name, `##idx##`, the index kind, the warnings).
/// Returns a dict: `action` ("run", "help", "version"), `given` (the name
/// of each table option given, as messages name it: `-n`,
/// `--write-index`), `extra` ((name, value) of each extra option) and, for
/// a run, `inputs`, `output` (None: standard output), `format` ("bam",
/// "sam", "sam.gz", "cram"), `level`, `order`, `tag`, `threads`,
/// `max_memory`, `mem_per_thread`, `no_pg`, `unknown_reference`, `index`
/// (None or (kind, path)), `warnings` and `command_line`. A refused
/// option or value raises alnsort.AlnsortError with the message
/// `alnsort sort` prints.
#[pyfunction]
fn parse_sort_args<'py>(
    py: Python<'py>,
    argv0: String,
    args: Vec<String>,
    extras: Vec<(String, bool)>,
    check: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use alnsort_engine::options::sort_args::{parse_with, Extra, ParsedSort};
    use pyo3::types::PyDict;
    let extras: Vec<Extra> = extras
        .into_iter()
        .map(|(long, takes_value)| Extra { long, takes_value })
        .collect();
    let rest = args.into_iter().map(std::ffi::OsString::from).collect();
    let parsed = parse_with(&argv0, rest, false, &extras)
        .map_err(|e| raise_failure(py, Failure::usage(error_text(&e))))?;
    let d = PyDict::new(py);
    let given: Vec<String> = parsed.given.iter().map(|s| s.name()).collect();
    check.call1((given.clone(),))?;
    d.set_item("given", given.clone())?;
    // (name, value) of each table option given, for a driver to pass on.
    let given_values: Vec<(String, Option<String>)> = given
        .into_iter()
        .zip(parsed.values.iter().cloned())
        .collect();
    d.set_item("given_values", given_values)?;
    d.set_item("extra", parsed.extra)?;
    let o = match parsed.parsed {
        ParsedSort::Usage => {
            d.set_item("action", "help")?;
            return Ok(d);
        }
        ParsedSort::Version => {
            d.set_item("action", "version")?;
            return Ok(d);
        }
        ParsedSort::Run(o) => o,
    };
    let cfg = config::resolve(&o).map_err(|e| raise_failure(py, Failure::usage(error_text(&e))))?;
    d.set_item("action", "run")?;
    d.set_item("inputs", o.inputs.clone())?;
    d.set_item(
        "output",
        cfg.output.as_ref().map(|p| p.display().to_string()),
    )?;
    d.set_item(
        "format",
        match cfg.format {
            alnsort_engine::options::sort::OutFormat::Bam => "bam".to_string(),
            alnsort_engine::options::sort::OutFormat::Sam => "sam".to_string(),
            alnsort_engine::options::sort::OutFormat::SamGz => "sam.gz".to_string(),
            alnsort_engine::options::sort::OutFormat::Cram => "cram".to_string(),
            // With the dataset's own options, as `-O` takes them.
            alnsort_engine::options::sort::OutFormat::Parquet => {
                let mut f = "parquet".to_string();
                if let Some(c) = &o.parquet_codec {
                    f.push_str(&format!(",codec={c}"));
                }
                if let Some(l) = o.format_level {
                    f.push_str(&format!(",level={l}"));
                }
                f
            }
        },
    )?;
    d.set_item("level", cfg.level)?;
    d.set_item("order", order_name(&o))?;
    d.set_item("tag", o.tag.clone())?;
    d.set_item("threads", o.threads)?;
    d.set_item("max_memory", o.max_memory.clone())?;
    d.set_item("mem_per_thread", o.mem_per_thread)?;
    d.set_item("no_pg", o.no_pg)?;
    d.set_item(
        "unknown_reference",
        match o.unknown_reference {
            UnknownReference::Error => "error",
            UnknownReference::Unmapped => "unmapped",
        },
    )?;
    d.set_item(
        "index",
        cfg.index.as_ref().map(|i| {
            (
                match i.kind {
                    config::IndexKind::Bai => "bai",
                    config::IndexKind::Csi => "csi",
                },
                i.path.display().to_string(),
            )
        }),
    )?;
    d.set_item("warnings", cfg.warnings.clone())?;
    d.set_item("command_line", cfg.command_line.clone())?;
    Ok(d)
}

/// Every option of `alnsort sort`'s table, as (name as messages write it,
/// the help's synopsis, its help group in lower case: "order", "output",
/// "resources", "additions", "markdup", "other", or "unsupported" for an
/// option alnsort refuses), in the table's order.
#[pyfunction]
fn sort_option_table() -> Vec<(String, String, String)> {
    alnsort_engine::options::sort::OPTIONS
        .iter()
        .map(|s| {
            (
                s.name(),
                s.synopsis().trim().to_string(),
                format!("{:?}", s.group).to_lowercase(),
            )
        })
        .collect()
}

/// Merges the sorted INPUTS into OUTPUT as `alnsort merge` does, with the
/// typed options of [`Keywords`] (each an option of `alnsort merge`'s
/// table by its keyword: `force`, `combine_rg`, `seed`, `region`, ...;
/// `-s` is 0 unless given) and `index` (bool or path, as for [`sort`]),
/// without the GIL. Raises alnsort.AlnsortError (AlnsortIOError when the
/// cause is I/O) with the message `alnsort merge` prints after "alnsort
/// merge: "; the run's files are removed on failure. Use alnsort.merge().
#[pyfunction]
fn merge(
    py: Python<'_>,
    inputs: Vec<String>,
    output: String,
    options: Keywords,
    index: IndexArg,
) -> PyResult<()> {
    use alnsort_engine::run::merge::run_merge;
    let usage = |e: ArgError| raise_failure(py, Failure::usage(error_text(&e)));
    let mut m = options.merge_args().map_err(usage)?;
    set_output(&mut m.sort, &output, &index);
    m.finish_positional(inputs).map_err(usage)?;
    m.sort.inputs = m.inputs.clone();
    py.detach(move || {
        let debris = alnsort_engine::io::cleanup::Debris::default();
        run_merge(&m, &debris).map_err(|e| {
            debris.remove_all();
            Failure::of(&e)
        })
    })
    .map_err(|f| raise_failure(py, f))
}

/// The options of COMMAND's table ("sort" or "merge"), in the table's
/// order, as (keyword, name as messages write it, the value's name or
/// None for a flag, why alnsort refuses it or None): what the Python
/// half turns keyword arguments into.
/// One row of [`option_table`]: (keyword, name, value name, refusal).
type OptionRow = (String, String, Option<String>, Option<String>);

#[pyfunction]
fn option_table(command: &str) -> PyResult<Vec<OptionRow>> {
    fn rows<Id: OptionId>(table: &'static [OptSpec<Id>]) -> Vec<OptionRow> {
        table
            .iter()
            .map(|s| {
                (
                    s.keyword(),
                    s.name(),
                    s.value.map(String::from),
                    s.id.refused().map(String::from),
                )
            })
            .collect()
    }
    match command {
        "sort" => Ok(rows(alnsort_engine::options::sort::OPTIONS)),
        "merge" => Ok(rows(alnsort_engine::options::merge::MERGE_OPTIONS)),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "no option table for '{other}': sort or merge"
        ))),
    }
}

/// The options of `alnsort sort`'s group "Duplicate marking"
/// (`alnsort_engine::options::sort::markdup_options`), in the table's order, as (keyword, name
/// as messages write it, the value's name or None for a flag): what a
/// marking stage's `markdup` and the Ray driver's duplicate marking take.
#[pyfunction]
fn markdup_options() -> Vec<(String, String, Option<String>)> {
    alnsort_engine::options::sort::markdup_options()
        .map(|s| (s.keyword(), s.name(), s.value.map(String::from)))
        .collect()
}

/// The keywords of the options of `alnsort sort` that a stage takes as its
/// own (`alnsort_engine::options::sort::stage_options`: order, output format and level, threads,
/// memory, temporary files, ...), in the table's order.
#[pyfunction]
fn stage_option_keywords() -> Vec<String> {
    alnsort_engine::options::sort::stage_options()
        .map(|s| s.keyword())
        .collect()
}

/// The text of `alnsort sort --help`: every option, with its differences
/// from samtools.
#[pyfunction]
fn sort_help() -> String {
    alnsort_engine::options::sort::sort_help()
}

#[pymodule]
fn _alnsort(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ARGV0", ARGV0)?;
    m.add_function(wrap_pyfunction!(sort, m)?)?;
    m.add_function(wrap_pyfunction!(sort_help, m)?)?;
    m.add_function(wrap_pyfunction!(parse_sort_args, m)?)?;
    m.add_function(wrap_pyfunction!(merge, m)?)?;
    m.add_function(wrap_pyfunction!(sort_option_table, m)?)?;
    m.add_function(wrap_pyfunction!(option_table, m)?)?;
    m.add_function(wrap_pyfunction!(markdup_options, m)?)?;
    m.add_function(wrap_pyfunction!(stage_option_keywords, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_split, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_sample, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_splitters, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_map, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_reach, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(stages::stage_assemble, m)?)?;
    markdup_stages::register(m)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keywords() -> Keywords {
        Keywords {
            options: vec![("no_pg".into(), None)],
            command_line: vec![ARGV0.into(), "sort".into()],
            markdup: None,
        }
    }

    fn typed(input: &str, output: &str, kw: &Keywords) -> Result<String, Failure> {
        let o = sort_options(input, output, kw, &IndexArg::Write(false))
            .map_err(|e| Failure::usage(error_text(&e)))?;
        sort_typed(o)
    }

    #[test]
    fn option_value_errors_are_the_setters_text() {
        let mut kw = keywords();
        kw.options.push(("output_fmt".into(), Some("xyz".into())));
        let f = typed("in.sam", "x.bam", &kw).unwrap_err();
        let mut cli = SortOptions::new(String::new());
        let want = alnsort_engine::options::sort::parse_output_fmt("xyz", &mut cli).unwrap_err();
        assert_eq!(f.message, want.to_string());
        assert!(!f.io);
    }

    #[test]
    fn a_stage_marks_duplicates_with_the_groups_keywords_only() {
        let mut kw = keywords();
        kw.markdup = Some(vec![]);
        assert!(kw.sort_options().unwrap().markdup.enabled);
        kw.markdup = Some(vec![("tagging_policy".into(), Some("all".into()))]);
        let o = kw.sort_options().unwrap();
        let mut cli = SortOptions::new(String::new());
        for id in ["--markdup", "--tagging-policy"] {
            let spec = alnsort_engine::options::sort::OPTIONS
                .iter()
                .find(|s| s.name() == id)
                .unwrap();
            // --markdup alone (its value, the flavour, is optional).
            let value = spec
                .value
                .filter(|_| id != "--markdup")
                .map(|_| "all".into());
            cli.apply(spec.id, value).unwrap();
        }
        assert_eq!(format!("{:?}", o.markdup), format!("{:?}", cli.markdup));
        kw.markdup = Some(vec![("name".into(), None)]);
        let e = kw.sort_options().unwrap_err().to_string();
        assert!(
            e.contains("-n (name=): not a duplicate-marking option"),
            "{e}"
        );
        kw.markdup = None;
        assert!(!kw.sort_options().unwrap().markdup.enabled);
        kw.markdup = Some(vec![]);
        assert!(kw.merge_args().is_err());
    }

    #[test]
    fn standard_streams_are_refused() {
        let f = typed("-", "x.bam", &keywords()).unwrap_err();
        assert!(f.message.contains("standard input"), "{}", f.message);
        let f = typed("in.sam", "-", &keywords()).unwrap_err();
        assert!(f.message.contains("standard output"), "{}", f.message);
    }

    #[test]
    fn a_missing_input_is_io_and_leaves_no_output() {
        let dir = std::env::temp_dir().join(format!("alnsort-py-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.bam");
        let missing = dir.join("missing.sam");
        let f = typed(
            missing.to_str().unwrap(),
            out.to_str().unwrap(),
            &keywords(),
        )
        .unwrap_err();
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
        use alnsort_engine::error::Error;
        let bad = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "truncated");
        assert!(!is_io(&Error::context("reading", bad)));
        let gone = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert!(is_io(&Error::context("opening", gone)));
    }
}
