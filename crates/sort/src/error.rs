//! The one error type of the sort engine. Every variant says where the
//! problem is: the record number for bad input, the run file path and byte
//! offset for I/O and corruption, the directory and byte counts for a full
//! temp filesystem. Nothing in this crate panics on bad input or on a failed
//! write; it returns one of these.

use std::io;
use std::path::PathBuf;

impl SortError {
    /// The error itself, or for `Shared` the error it wraps.
    pub fn root(&self) -> &SortError {
        match self {
            SortError::Shared(inner) => inner.root(),
            other => other,
        }
    }
}

/// A pool job that panicked or vanished (the one ordered-slot primitive's
/// [`Lost`](alnsort_pipeline::Lost)) is a [`SortError::Worker`] naming its
/// stage.
impl From<alnsort_pipeline::Lost> for SortError {
    fn from(lost: alnsort_pipeline::Lost) -> Self {
        SortError::Worker { what: lost.stage }
    }
}

/// Result alias for this crate.
pub type Result<T, E = SortError> = std::result::Result<T, E>;

/// What went wrong while sorting.
// Field names say what they hold (`record` = 0-based record number,
// `offset` = byte offset in the file); the variant docs say the rest.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
pub enum SortError {
    /// A `KeyKind::Fixed8` sorter was given a key that is not 8 bytes long.
    #[error("record {record}: key is {len} bytes, but this sort needs 8-byte keys")]
    KeyLength { record: u64, len: usize },

    /// One record (key plus record bytes) is larger than half the memory
    /// budget, or larger than the 4 GiB a batch offset can address.
    #[error(
        "record {record}: key + record is {len} bytes, more than the {limit} bytes \
         one record may take (half the sort memory budget); raise the memory limit"
    )]
    RecordTooLarge {
        record: u64,
        len: usize,
        limit: usize,
    },

    /// The memory budget cannot hold even the minimal working set.
    #[error("sort memory budget of {budget} bytes is too small (need at least {minimum})")]
    BudgetTooSmall { budget: usize, minimum: usize },

    /// The temp filesystem has less free space than the next spill needs.
    #[error(
        "not enough space in temp directory {dir}: the next run file may need {needed} bytes, \
         only {available} are free (use another temp directory or more memory)"
    )]
    NoSpace {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },

    /// `statvfs` on the temp directory failed.
    #[error("cannot query free space of temp directory {dir}: {source}")]
    StatFs { dir: PathBuf, source: io::Error },

    /// Creating a run file failed (including `EEXIST` after every retry).
    #[error("cannot create run file {path}: {source}")]
    Create { path: PathBuf, source: io::Error },

    /// Writing a run file failed (`ENOSPC`, `EFBIG`, `EIO`, ...).
    #[error("cannot write run file {path} at byte offset {offset}: {source}")]
    Write {
        path: PathBuf,
        offset: u64,
        source: io::Error,
    },

    /// Opening or reading a run file failed.
    #[error("cannot read run file {path} at byte offset {offset}: {source}")]
    Read {
        path: PathBuf,
        offset: u64,
        source: io::Error,
    },

    /// A run file does not decode: bad magic, checksum mismatch, bad LZ4
    /// data, malformed entry, or truncation.
    #[error("run file {path} is corrupt: frame at byte offset {offset}: {reason}")]
    CorruptRun {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A pool job or the background merge thread panicked or vanished
    /// without sending its result (ARCHITECTURE.md: a missing slot is an
    /// error, never skipped).
    #[error("sort worker failed: {what}")]
    Worker { what: &'static str },

    /// `Merged` was asked for more records after it had returned an error.
    #[error("the merge stopped at an earlier error; no more records")]
    AfterError,

    /// An error met by one partition of the final merge and reported to
    /// every partition that depended on the same work.
    #[error("{0}")]
    Shared(std::sync::Arc<SortError>),

    /// A background merge stopped because its sorter was dropped.
    #[error("sort was cancelled")]
    Cancelled,

    /// The caller's hook that keeps a finished run durable
    /// ([`crate::durable::RunHook`]) failed; its error is kept whole.
    #[error("keeping run file {path} for a resumed sort: {source}")]
    Durable {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A run file handed back to a sorter ([`crate::Sorter::adopt_run`])
    /// holds records but is not a complete run.
    #[error("run file {path} cannot be resumed from: {reason}")]
    NotARun { path: PathBuf, reason: String },

    /// The splitters handed to a map task are not strictly increasing.
    #[error("splitter {index} is not past splitter {}: splitters must be strictly increasing", index - 1)]
    SplittersUnordered { index: usize },
}
