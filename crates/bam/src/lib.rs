//! alnsort-bam: the BAM/SAM layer. It turns bytes into validated records and
//! back, edits the header the way samtools sort does, and encodes one
//! memcmp-comparable sort key per order, so the sort engine only ever sees
//! keys and byte slices.

#![forbid(unsafe_code)]

pub mod aux;
pub mod cigar;
pub mod header;
pub mod header_merge;
pub mod htsjdk;
pub mod index_file;
pub mod keys;
pub mod name_hash;
pub mod qc;
pub mod reader;
pub mod record;
pub mod sam_format;
pub mod sam_parse;
pub mod split;
#[cfg(test)]
mod test_util;
pub mod validate;
pub mod writer;

pub use aux::Aux;
pub use cigar::Cigar;
pub use record::{RecordMut, RecordRef};
