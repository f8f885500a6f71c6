//! CRAM input (2.0, 2.1, 3.0, 3.1) and output (3.0, 3.1) for alnsort, both by the crate itself:
//! input decoded (containers, blocks, codecs, records) and output encoded
//! (data series, blocks, containers).
//!
//! The rest of alnsort sees only raw BAM records (each with its 4-byte
//! `block_size`, as `alnsort_bam` lays them out). This crate converts:
//!
//! * **decode** — [`CramReader`] reads the file definition and the SAM header
//!   text, then hands out whole containers ([`PendingContainer`]) one by one
//!   on the reading thread (a container is a length-prefixed run of bytes, so
//!   this is a copy; [`RawContainer`], header parsed and CRC-checked by
//!   [`container`]); [`PendingContainer::decode`] turns one container into
//!   framed BAM records and is meant to run on the pool, containers being
//!   independent of each other: its blocks are decompressed by this crate
//!   ([`SliceBlocks`], [`codecs`]) and its records decoded from the data
//!   series straight into BAM bytes.
//! * **encode** — [`CramWriter`] takes framed BAM records in output order and
//!   writes CRAM containers: each slice's data series, blocks and container
//!   encoded on the pool by this crate.
//! * **references** — [`RefSource`] finds each @SQ's sequence as htslib does
//!   (`--reference FILE`, then `REF_CACHE` and `REF_PATH` with their
//!   `%2s/%2s/%s` patterns over the @SQ's M5, then a local @SQ UR) and checks
//!   its MD5 against the header's M5. A reference that cannot be found is a
//!   [`ReferenceError`] naming SN, M5 and every place looked at; one whose
//!   MD5 differs is one writing, and a warning reading (each slice's own
//!   MD5 then checks its bases; a slice without one is refused by name).

#![forbid(unsafe_code)]

pub mod codecs;
pub mod container;
pub mod crai;
mod decode;
mod encode;
mod encode_container;
mod error;
mod md_nm;
mod options;
mod rans;
mod records;
mod reference;
mod wire;

pub use container::{ContainerHeader, RawBlock, RawContainer, SliceBlocks, SliceHeader};
pub use decode::{CramReader, DecodeContext, PendingContainer};
pub use encode::CramWriter;
pub use error::{
    BlockFault, ContainerFault, CramError, DecodeError, FaiError, HeaderTextError, Rans4x8Fault,
    RansNx16Fault, RecordFault, ReferenceError, Tok3Fault, Unencodable,
};
pub use options::{CramOptions, CramVersion};
pub use reference::{RefHolding, RefSource, KEPT_UNUSED};

/// The magic number every CRAM file starts with (CRAM spec §6).
pub const MAGIC: &[u8; 4] = b"CRAM";
