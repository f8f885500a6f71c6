//! Why an index could not be built. The ordering errors mirror the checks
//! htslib's `hts_idx_push` makes, so alnsort refuses exactly the inputs
//! `samtools sort --write-index` refuses; each carries the 0-based number of
//! the record (in push order) that broke the rule, and says it 1-based, as
//! alnsort's other messages count records.

use thiserror::Error;

/// Errors from building or finishing an index.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum IndexError {
    /// Positions went backwards within one reference.
    #[error("record {}: unsorted positions on reference {ref_id}: {previous} followed by {beg} (0-based positions)", .record + 1)]
    Unsorted {
        /// Record number (0-based, push order).
        record: u64,
        /// Reference of both records.
        ref_id: i32,
        /// Start of the previous record (after htslib clamps negative starts to 0).
        previous: i64,
        /// Start of this record.
        beg: i64,
    },
    /// A reference's records were not contiguous.
    #[error("record {}: records for reference {ref_id} are not contiguous", .record + 1)]
    ReferenceNotContiguous {
        /// Record number (0-based, push order).
        record: u64,
        /// The reference seen again.
        ref_id: i32,
    },
    /// A placed record came after the unplaced (reference -1) records,
    /// which must form one run at the end.
    #[error("record {}: placed record on reference {ref_id} after unplaced records", .record + 1)]
    PlacedAfterUnplaced {
        /// Record number (0-based, push order).
        record: u64,
        /// The placed record's reference.
        ref_id: i32,
    },
    /// `end < beg`.
    #[error("record {}: end {end} before start {beg} on reference {ref_id}", .record + 1)]
    EndBeforeStart {
        /// Record number (0-based, push order).
        record: u64,
        /// Reference of the record.
        ref_id: i32,
        /// 0-based start.
        beg: i64,
        /// Exclusive end.
        end: i64,
    },
    /// The record lies beyond what the binning scheme covers (2^29 for BAI).
    #[error("record {}: region {beg}..{end} on reference {ref_id} exceeds the index limit {max_pos}; {hint}", .record + 1)]
    PositionOutOfRange {
        /// Record number (0-based, push order).
        record: u64,
        /// Reference of the record.
        ref_id: i32,
        /// 0-based start.
        beg: i64,
        /// Exclusive end.
        end: i64,
        /// Exclusive limit of the binning scheme.
        max_pos: i64,
        /// What to do about it.
        hint: &'static str,
    },
    /// The reference id is not in the header.
    #[error(
        "record {}: reference id {ref_id} is not below the header's {n_refs} references",
        .record + 1
    )]
    ReferenceOutOfRange {
        /// Record number (0-based, push order).
        record: u64,
        /// The reference id given.
        ref_id: i32,
        /// References in the header.
        n_refs: usize,
    },
    /// Logical virtual offsets went backwards, or a record ends where it starts.
    #[error("record {}: virtual offsets {vstart:#x}..{vend:#x} do not follow the previous end {previous_end:#x}", .record + 1)]
    OffsetsOutOfOrder {
        /// Record number (0-based, push order).
        record: u64,
        /// End of the previous record (0 for the first record).
        previous_end: u64,
        /// This record's logical start.
        vstart: u64,
        /// This record's logical end.
        vend: u64,
    },
    /// A logical offset names a block the writer never reported.
    #[error("logical virtual offset {offset:#x} names block {block}, but only {n_blocks} block offsets were given")]
    UnknownBlock {
        /// The logical virtual offset.
        offset: u64,
        /// Its block index.
        block: u64,
        /// Length of `block_offsets`.
        n_blocks: usize,
    },
    /// `block_offsets` is empty, not increasing, or too large for a virtual offset.
    #[error("block offsets are invalid at block {block}: {reason}")]
    BadBlockOffsets {
        /// The first offending block index.
        block: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// CSI `min_shift` must be positive and leave room for nine levels.
    #[error("CSI min_shift {min_shift} is out of range (1..=35)")]
    InvalidMinShift {
        /// The value given.
        min_shift: u32,
    },
    /// No CSI shape can cover a reference this long with 64-bit positions.
    #[error("reference length {length} is too long to index")]
    ReferenceTooLong {
        /// The longest reference length given.
        length: u64,
    },
    /// A count overflowed the 32-bit field the index format stores it in.
    #[error("reference {ref_id}: {what} ({count}) does not fit the index format")]
    TooLarge {
        /// Reference concerned.
        ref_id: usize,
        /// Which count.
        what: &'static str,
        /// Its value.
        count: usize,
    },
    /// A part index (`merge.rs`) does not decode, or does not fit its part.
    #[error("part index {part}: {reason} (at byte {offset})")]
    BadPartIndex {
        /// The part's number (0-based, in assembly order).
        part: usize,
        /// Byte offset in the part index where the problem is.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
}
