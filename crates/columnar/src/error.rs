//! The crate's error: what failed, with the file and the record where known.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ColumnarError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parquet {
        path: PathBuf,
        source: parquet::errors::ParquetError,
    },
    #[error("{path}: {source}")]
    Arrow {
        path: PathBuf,
        source: arrow_schema::ArrowError,
    },
    #[error("record {record} ({name}): {problem}")]
    Record {
        record: u64,
        name: String,
        problem: String,
    },
    #[error("{path}: row {row}: {problem}")]
    Row {
        path: PathBuf,
        row: u64,
        problem: String,
    },
    #[error("{path}: not a dataset alnsort wrote: {missing}")]
    NotADataset { path: PathBuf, missing: String },
    #[error("{path}: {problem}")]
    Dataset { path: PathBuf, problem: String },
    #[error(
        "record {record}: reference id {ref_id} comes after reference id {previous} in coordinate order"
    )]
    OutOfOrder {
        record: u64,
        ref_id: i32,
        previous: i32,
    },
    #[error("{path}: a row group's encoding job was lost: {problem}")]
    Encoding { path: PathBuf, problem: String },
    #[error("{path} exists and is not a dataset alnsort wrote; not replaced")]
    Occupied { path: PathBuf },
}
