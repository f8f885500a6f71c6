//! Duplicate marking cut into tasks, none of which holds the whole input:
//! the answer of one [`MarkDuplicates`] over the input, from its splits.
//!
//! 1. **Collect** ([`SplitCollector`], one per split of the input, in any
//!    order): each record's slot (flag, library, whether it starts a
//!    template), the fragment end of each mapped primary record and, for
//!    those whose mate is mapped, a *half* (its fragment end, name and
//!    read group) for the join. Records are numbered by [`ordinal`]
//!    (split, index in the split), which grows with input order, so ends
//!    compare across splits as the one-pass marker's input indexes do.
//!    Ends go to [`end_bucket`]s (a hash of the library, barcodes and
//!    first 5' end: every duplicate set, pair or fragment, falls in one
//!    bucket), halves to [`name_bucket`]s (a hash of read group and name).
//! 2. **Templates across splits** ([`continued_templates`]): in name-grouped
//!    input a template may start in one split and go on in the next; its
//!    ends carry the index of its first record ([`Fixups`], applied by the
//!    join and the decision).
//! 3. **Join** ([`join_mates`], one per name bucket): the halves of each
//!    (read group, name) in input order, paired exactly as the one-pass
//!    marker pairs them (a mate waits under its mate's reference, read
//!    group and name; a later one under the same key replaces it): the
//!    pair ends, to their end buckets.
//! 4. **Decide** ([`MarkDuplicates::decide_ends`], one per end bucket): the
//!    bucket's duplicate sets sorted and walked as the one-pass marker walks
//!    them: the duplicate (and optical) indexes listed, the set-size
//!    histograms and optical counts per library.
//! 5. **Finish** ([`finish_split`], one per split, in order or retried):
//!    Picard's output loop over the split's slots with the indexes listed
//!    in it, resumed where the previous split's left it ([`WalkCarry`]):
//!    the split's bits and record counts per library.
//! 6. **Metrics** ([`crate::metrics_report`]): the counts summed.
//!
//! Between tasks everything is bytes: ends 63 bytes each (the spill
//! files' encoding), halves the same plus name and read group, index
//! lists 8 bytes per listed index, slots 8 bytes per record. Several
//! coordinate-sorted inputs that share a library (lanes of one library)
//! keep Picard's merged order ([`merge_order`]): each end and half is
//! followed by its (first) record's running maximum by htsjdk's
//! coordinate comparator, each split's boundary carries its input and
//! largest record, and the decision ranks each bucket's records in that
//! order ([`MarkDuplicates::decide_merged`]).

mod bucket;
mod collect;
mod decide;
mod finish;
mod fixups;
mod half;
mod join;
pub mod merge_order;
mod wire;

pub use bucket::{end_bucket, name_bucket};
pub use collect::{Boundary, MergeBoundary, SplitCollector, SplitShare};
pub use decide::SetsDecided;
pub use finish::{add_library_counts, finish_split, SplitOutcome};
pub use fixups::{continued_templates, Fixups};
pub use join::{join_mates, MateJoin, PairEndSink};
pub use wire::{set_range, RangeSlice, MAX_RANGES, RANGE_BYTES};

#[cfg(doc)]
use crate::{MarkDuplicates, WalkCarry};

/// Bits of an [`ordinal`] that hold the record's index in its split (up to
/// 2^40 records per split, 2^23 splits: ordinals stay positive).
pub const INDEX_BITS: u32 = 40;

/// The number a record goes by: its split ordinal and its index in the
/// split. It grows with input order.
pub fn ordinal(split: u32, index: u64) -> i64 {
    ((split as u64) << INDEX_BITS | index) as i64
}

/// The bit that marks a first end's place in Picard's merged order
/// ([`MarkDuplicates::decide_merged`]) among ordinals: above any
/// ordinal of fewer than 2^22 splits.
pub(crate) const RANK_BIT: u64 = 1 << 62;

/// The split of an [`ordinal`], and the index in it.
pub fn split_of(ordinal: u64) -> (usize, u64) {
    (
        (ordinal >> INDEX_BITS) as usize,
        ordinal & ((1 << INDEX_BITS) - 1),
    )
}

#[cfg(test)]
mod tests;
