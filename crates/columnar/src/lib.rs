//! Sorted BAM records as a Parquet dataset partitioned by reference, and back.
//!
//! One row per record, a typed column per SAM field and per standard tag,
//! every other tag kept losslessly in a list column (`schema`); the writer
//! takes BAM record bytes in output order and cuts files by reference
//! (hive-style `ref=NAME/` folders) and row groups by position (`write`);
//! the reader gives the same record bytes back with the header (`read`).

#![forbid(unsafe_code)]

pub mod error;
pub mod partition;
pub mod read;
pub mod record;
pub mod schema;
pub mod write;

pub use error::ColumnarError;
pub use read::Dataset;
pub use write::{assemble, Closed, Codec, DatasetWriter, WriteOptions, WriteSummary};

#[cfg(test)]
mod roundtrip_tests;
