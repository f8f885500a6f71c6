//! Records in and out: opening and reading inputs in batches (`input`), several inputs as one stream (`merged`), the one record sink (`output`), Parquet datasets out and in (`columnar`), index files' bytes as samtools deflates them (`zlib`), and the files a run must not leave behind (`cleanup`).

pub mod cleanup;
pub mod columnar;
pub mod input;
pub mod merged;
pub mod output;
pub(crate) mod zlib;
