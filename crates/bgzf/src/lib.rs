//! alnsort-bgzf: the BGZF layer (SAM spec §4.1). It turns a byte stream into
//! checked, decompressed blocks and back, in parallel on an injected
//! `rayon::ThreadPool`, and knows nothing about BAM.
//!
//! * [`block`]: one block: header parsing, inflate with ISIZE/CRC32 checks,
//!   deflate, format sniffing, single-threaded whole-file helpers.
//! * [`ParallelReader`]: ordered parallel inflate, `Read` + `BufRead`, with a
//!   [`Position`] for error messages.
//! * [`ParallelWriter`]: ordered parallel deflate of caller-sized blocks,
//!   recording each block's compressed offset; [`BlockWriter`], the one
//!   block packer (htslib's blocking), fills its payloads.
//! * [`kept`]: the blocks a killed writer left, read back so that a writer
//!   started again checks them and goes on after them.
//! * [`BgzfError`]: every error names the byte offset it is about.

#![forbid(unsafe_code)]

pub mod block;
pub mod error;
pub mod kept;
pub mod reader;
#[cfg(test)]
mod test_util;
pub mod writer;

pub use block::{
    compress_all, compress_all_with, decompress_all, is_bgzf, is_gzip, CompressionLevel,
    InvalidLevel, EOF_BLOCK, MAX_BLOCK_SIZE, MAX_PAYLOAD,
};
pub use error::{BgzfError, BgzfError as Error, Result};
pub use kept::{KeptBlock, KeptBlocks};
pub use reader::{
    BlockRecycler, EmptyBlocks, ParallelReader, Position, ReadAhead, TakenBlock, UnitScan,
};
pub use writer::{
    BlockWriter, Checkpoint, NoteFn, NotesSink, ParallelWriter, Resuming, UnitFields, UnitNote,
    Units, WriterSummary, MAX_NOTES_PER_BLOCK,
};
