//! The engine's one error type. Every run (`run_sort`, `merge::run_merge`,
//! the `stages`) returns [`Error`]: the library crates' own errors kept as
//! they are (each with its file, byte offset or record number), wrapped in
//! what the engine was doing ([`Error::Context`], [`Error::Record`]), so
//! the whole source chain reaches the caller: the CLI prints it with
//! [`error_text`], the Python binding raises it, and either can look into
//! it ([`Error::find`], [`Error::io_error`]).

use std::error::Error as StdError;
use std::io;
use std::path::PathBuf;

/// A failed run of the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input that cannot be read as what it must be, named by file
    /// (standard input is `-`) with what is wrong and where.
    #[error("{file}: {what}")]
    Input { file: String, what: String },
    /// A failure reading, decoding or sorting FILE's records, at record
    /// number RECORD (1-based, counted from the start of what this run
    /// reads) or in the batch that follows it.
    #[error("{file}: {doing} record {record} or later")]
    Record {
        file: String,
        /// "reading", "sorting".
        doing: &'static str,
        record: u64,
        #[source]
        source: Box<Error>,
    },
    /// Options, inputs or sizes the run refuses, with the text saying which.
    #[error("{0}")]
    Refused(String),
    /// What the engine was doing (and on which file) when SOURCE failed.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<Error>,
    },
    /// A broken promise inside the engine (a thread that panicked, counts
    /// that disagree): a bug, never bad input.
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Arg(#[from] ArgError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Write(#[from] OutputError),
    #[error(transparent)]
    Sort(#[from] alnsort_sort::SortError),
    #[error(transparent)]
    Read(#[from] alnsort_bam::reader::ReadError),
    /// A BAM record that does not hold together (`alnsort_bam::validate`),
    /// met where no reader wraps it with its place.
    #[error(transparent)]
    Validate(#[from] alnsort_bam::validate::RecordError),
    #[error(transparent)]
    Header(#[from] alnsort_bam::header::HeaderError),
    #[error(transparent)]
    HeaderMerge(#[from] alnsort_bam::header_merge::HeaderMergeError),
    #[error(transparent)]
    HtsjdkMerge(#[from] alnsort_bam::htsjdk::header_merge::HtsjdkMergeError),
    #[error(transparent)]
    Split(#[from] alnsort_bam::split::SplitError),
    #[error(transparent)]
    BamWrite(#[from] alnsort_bam::writer::WriteError),
    #[error(transparent)]
    Cram(#[from] alnsort_cram::CramError),
    /// A Parquet dataset written or read (`alnsort_columnar`).
    #[error(transparent)]
    Columnar(#[from] alnsort_columnar::ColumnarError),
    #[error(transparent)]
    Bgzf(#[from] alnsort_bgzf::BgzfError),
    #[error(transparent)]
    Level(#[from] alnsort_bgzf::block::InvalidLevel),
    #[error(transparent)]
    Index(#[from] alnsort_index::IndexError),
    #[error(transparent)]
    IndexRead(#[from] alnsort_index::IndexReadError),
    #[error(transparent)]
    Markdup(#[from] alnsort_markdup::MarkdupError),
    #[error(transparent)]
    SeveralInputs(#[from] alnsort_markdup::several::SeveralInputsError),
    #[error(transparent)]
    SamtoolsMarkdup(#[from] alnsort_markdup::samtools::Error),
    #[error(transparent)]
    Lost(#[from] alnsort_pipeline::Lost),
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error(transparent)]
    Pool(#[from] rayon::ThreadPoolBuildError),
}

/// `bail!(Refused, "...", args)` returns `Err(Error::Refused(format!(...)))`;
/// the call names the variant (`Refused`: what the run was given cannot be
/// done; `Internal`: a bug, printed "internal error: ...").
macro_rules! bail {
    ($variant:ident, $($t:tt)*) => {
        return Err($crate::error::Error::$variant(format!($($t)*)))
    };
}
pub(crate) use bail;

/// The engine's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `what` failed: the message names the file and where.
    pub fn input(file: impl std::fmt::Display, what: impl Into<String>) -> Error {
        Error::Input {
            file: file.to_string(),
            what: what.into(),
        }
    }

    /// SOURCE, met while doing WHAT (printed "WHAT: SOURCE").
    pub fn context(what: impl Into<String>, source: impl Into<Error>) -> Error {
        Error::Context {
            what: what.into(),
            source: Box::new(source.into()),
        }
    }

    /// The error a transparent variant wraps (whose source is this
    /// variant's source), for looking into the chain.
    fn wrapped(&self) -> Option<&(dyn StdError + 'static)> {
        Some(match self {
            Error::Input { .. }
            | Error::Record { .. }
            | Error::Refused(_)
            | Error::Context { .. }
            | Error::Internal(_) => return None,
            Error::Io(e) => e,
            Error::Arg(e) => e,
            Error::Config(e) => e,
            Error::Write(e) => e,
            Error::Sort(e) => e,
            Error::Read(e) => e,
            Error::Validate(e) => e,
            Error::Header(e) => e,
            Error::HeaderMerge(e) => e,
            Error::HtsjdkMerge(e) => e,
            Error::Split(e) => e,
            Error::BamWrite(e) => e,
            Error::Cram(e) => e,
            Error::Columnar(e) => e,
            Error::Bgzf(e) => e,
            Error::Level(e) => e,
            Error::Index(e) => e,
            Error::IndexRead(e) => e,
            Error::Markdup(e) => e,
            Error::SeveralInputs(e) => e,
            Error::SamtoolsMarkdup(e) => e,
            Error::Lost(e) => e,
            Error::Create(e) => e,
            Error::Pool(e) => e,
        })
    }

    /// The first error of type T in the chain (this error, its sources,
    /// and what the transparent variants wrap).
    pub fn find<T: StdError + 'static>(&self) -> Option<&T> {
        let mut node: Option<&(dyn StdError + 'static)> = Some(self);
        while let Some(e) = node {
            if let Some(t) = e.downcast_ref::<T>() {
                return Some(t);
            }
            if let Some(t) = engine(e)
                .and_then(Error::wrapped)
                .and_then(|w| w.downcast_ref::<T>())
            {
                return Some(t);
            }
            node = e.source();
        }
        None
    }

    /// An operating-system I/O error in the chain (a missing file, a
    /// permission, a full disk): kinds InvalidData, InvalidInput and
    /// UnexpectedEof are the input's fault (a truncated or corrupt file),
    /// not I/O, and are passed over.
    pub fn io_error(&self) -> Option<&io::Error> {
        use std::io::ErrorKind::{InvalidData, InvalidInput, UnexpectedEof};
        let mut node: Option<&(dyn StdError + 'static)> = Some(self);
        while let Some(e) = node {
            let io = e.downcast_ref::<io::Error>().or_else(|| match engine(e) {
                Some(Error::Io(io)) => Some(io),
                _ => None,
            });
            if let Some(io) =
                io.filter(|io| !matches!(io.kind(), InvalidData | InvalidInput | UnexpectedEof))
            {
                return Some(io);
            }
            node = e.source();
        }
        None
    }
}

/// E as the engine's error: itself, or the box a context holds it in
/// (a boxed source is its own node of the chain).
fn engine<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a Error> {
    e.downcast_ref::<Error>()
        .or_else(|| e.downcast_ref::<Box<Error>>().map(|b| &**b))
}

/// Context for a failure: `result.context("what")?`, as the engine says
/// what it was doing around a library call.
pub trait Context<T> {
    fn context(self, what: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::context(what, e))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::context(what(), e))
    }
}

/// The text of a failed run, as `alnsort sort: TEXT` prints it and the
/// Python package raises it: the error and each of its causes, joined by
/// ": ", except a cause whose text the message before already ends with (a
/// library error that spells out its source, such as the sort crate's
/// "cannot write run file F at byte offset N: No space left on device",
/// keeps that source in its chain for callers that inspect it, and it is
/// printed once).
pub fn error_text(e: &(dyn StdError + 'static)) -> String {
    let mut text = String::new();
    let mut node = Some(e);
    while let Some(cause) = node {
        let part = cause.to_string();
        if text.is_empty() {
            text = part;
        } else if !part.is_empty() && !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        node = cause.source();
    }
    text
}

#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    #[error("unknown option '{0}'")]
    UnknownOption(String),
    #[error("option '--{given}' is ambiguous: it could be {candidates}")]
    Ambiguous { given: String, candidates: String },
    /// An option samtools has and alnsort does not implement yet.
    #[error("{option} is not supported yet: {why}")]
    Unsupported { option: String, why: &'static str },
    /// A value or positional argument that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// A value that cannot be used for the reason a library gives (a file
    /// list that cannot be read, a pattern that does not compile): WHAT
    /// names the option and value, SOURCE is the library's error, kept.
    #[error("{what}: {source}")]
    Value {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Missing value, value given to a flag, non-UTF-8 text.
    #[error(transparent)]
    Syntax(#[from] lexopt::Error),
}

impl ArgError {
    /// A mistake in how the command line is written (worth pointing at
    /// `--help`), as opposed to a known option that is refused.
    pub fn is_usage(&self) -> bool {
        !matches!(self, ArgError::Unsupported { .. })
    }
}

/// Options that cannot be resolved into a run: each variant's text is
/// the message, and a library error behind it stays its source.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Options the run refuses, with the text saying which and why.
    #[error("{0}")]
    Invalid(String),
    /// A CRAM output option (`-O cram,KEY=VALUE`) refused by the CRAM
    /// crate.
    #[error("{0}")]
    Cram(#[source] alnsort_cram::CramError),
    /// `--max-memory` that does not read as a size.
    #[error("{0}")]
    Size(#[source] SizeError),
    /// `-I FILE` that cannot be opened or read.
    #[error("-I {}: {doing}: {source}", .path.display())]
    MinimiserFile {
        path: PathBuf,
        /// "cannot open", "cannot read".
        doing: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// `-I FILE` whose FASTA does not give a minimiser index.
    #[error("-I {}: {source}", .path.display())]
    MinimiserFasta {
        path: PathBuf,
        #[source]
        source: alnsort_bam::keys::minimiser::FastaError,
    },
    /// A CRAM output's `--reference` that cannot be opened (found before
    /// the sort, not at the first container after it).
    #[error("--reference {}: cannot open it (CRAM output is encoded against this FASTA): {source}", .path.display())]
    Reference {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A size that does not read as one, with the text saying what was
/// understood and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SizeError(pub String);

/// A write to the output failed. The message names the destination; the
/// cause is kept whole (its I/O kind tells a closed standard-output pipe,
/// see [`is_closed_stdout`]). It is printed inline rather than as a
/// `source` because the cause's own message already prints its source.
#[derive(Debug, thiserror::Error)]
#[error("writing {name}: {cause}")]
pub struct OutputError {
    pub(crate) name: String,
    pub(crate) to_stdout: bool,
    pub(crate) cause: Cause,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum Cause {
    #[error(transparent)]
    Writer(#[from] alnsort_bam::writer::WriteError),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Cram(#[from] alnsort_cram::CramError),
}

impl Cause {
    pub(crate) fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Cause::Writer(e) => e.io_kind(),
            Cause::Io(e) => Some(e.kind()),
            Cause::Cram(e) => std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<io::Error>())
                .map(|e| e.kind()),
        }
    }
}

/// A destination (the output or its index) that cannot be created, with
/// what is wrong with its directory, found before any input is read.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {what} '{}': {problem}", dest.display())]
pub struct CreateError {
    pub what: &'static str,
    pub dest: PathBuf,
    pub(crate) problem: String,
    #[source]
    pub(crate) source: io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sort error keeps its I/O source in the chain (so a caller can tell
    /// an I/O failure, as the Python package does) and its text names the
    /// source once.
    #[test]
    fn sources_stay_in_the_chain_and_are_printed_once() {
        let run = || -> Result<()> {
            let e = alnsort_sort::SortError::Write {
                path: "/tmp/run-1".into(),
                offset: 7,
                source: io::Error::from_raw_os_error(libc::ENOSPC),
            };
            Err(e)?
        };
        let e = run().context("in.bam: sorting records").unwrap_err();
        assert_eq!(
            e.io_error().and_then(io::Error::raw_os_error),
            Some(libc::ENOSPC),
            "the io::Error is in the chain"
        );
        assert!(e.find::<alnsort_sort::SortError>().is_some());
        assert_eq!(
            error_text(&e),
            format!(
                "in.bam: sorting records: cannot write run file /tmp/run-1 at byte offset 7: {}",
                io::Error::from_raw_os_error(libc::ENOSPC)
            )
        );
    }

    /// Context and record positions read outermost first; a bare I/O error
    /// under a context is found and is I/O, a truncated input is not.
    #[test]
    fn chains_read_outermost_first() {
        let e = Error::context(
            "outer",
            Error::Record {
                file: "in.bam".into(),
                doing: "reading",
                record: 12,
                source: Box::new(Error::input("in.bam", "cut short")),
            },
        );
        assert_eq!(
            error_text(&e),
            "outer: in.bam: reading record 12 or later: in.bam: cut short"
        );
        let gone = Error::context("opening", io::Error::from(io::ErrorKind::NotFound));
        assert!(gone.io_error().is_some());
        let cut = Error::context("reading", io::Error::from(io::ErrorKind::UnexpectedEof));
        assert!(cut.io_error().is_none());
        assert!(Error::Refused("no".into()).io_error().is_none());
    }
}
