//! Builds the BAI or CSI index of a coordinate-sorted BAM while it is being
//! written, so `--write-index` needs no second pass over the output. The
//! crate knows nothing of BAM: the writer reports, for each record in output
//! order, its reference, its `[beg, end)` span, whether it is mapped and
//! where its bytes went as *logical* virtual offsets
//! (`block_index << 16 | offset_in_block`), because compressed block
//! offsets are only known once blocks are deflated. [`IndexBuilder::finish`]
//! takes the real block offsets and returns the index htslib 1.24 would
//! write for `samtools index` (BAI) or `samtools index -c` /
//! `samtools sort --write-index` (CSI), byte for byte before compression.
//!
//! ```
//! use alnsort_index::{logical_offset, IndexBuilder, IndexFormat, IndexRecord};
//!
//! let mut builder = IndexBuilder::new(IndexFormat::Bai, &[1_000_000])?;
//! // Block 0 holds the header; block 1 the record; block 2 is the EOF block.
//! builder.push(&IndexRecord {
//!     ref_id: 0,
//!     beg: 100,
//!     end: 200,
//!     mapped: true,
//!     vstart: logical_offset(1, 0),
//!     vend: logical_offset(1, 60),
//! })?;
//! let index = builder.finish(&[0, 120, 180])?;
//! assert_eq!(&index.content()[..4], b"BAI\x01");
//! # Ok::<(), alnsort_index::IndexError>(())
//! ```

#![forbid(unsafe_code)]

mod bins;
mod builder;
mod error;
mod finish;
mod khash;
mod merge;
mod read;
mod write;

pub use bins::{bin_level, first_bin, parent_bin, Binning};
pub use builder::{logical_offset, record_end, IndexBuilder, IndexRecord};
pub use error::IndexError;
pub use merge::{merge_part_indexes, PartIndexWriter};
pub use read::{IndexReadError, IndexReader};
pub use write::IndexFile;

/// Which index to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexFormat {
    /// BAI (SAM spec §5.2): fixed 16 kbp bins, six levels, uncompressed.
    Bai,
    /// CSI: bottom bins of `2^min_shift` bases, depth from the longest
    /// reference, BGZF-compressed. `samtools sort --write-index` uses 14.
    Csi {
        /// Bottom-bin width as a shift.
        min_shift: u32,
    },
}

impl IndexFormat {
    /// The CSI `samtools sort --write-index` writes by default
    /// (`auto_index` in samtools' sam_utils.c: `min_shift = 14`).
    pub const DEFAULT_CSI: IndexFormat = IndexFormat::Csi { min_shift: 14 };
}
