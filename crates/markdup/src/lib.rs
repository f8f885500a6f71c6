//! Duplicate marking identical to Picard MarkDuplicates 3.4.0 run with
//! `ASSUME_SORT_ORDER=queryname` on name-grouped input (all records of a
//! template adjacent, as aligners write them).
//!
//! The crate sees read ends, not BAM bytes: the caller gives each input
//! record, in file order, as a [`ReadInfo`] (flags, reference ids, the
//! unclipped 5' coordinate, the base-quality score, the read group's
//! [`RgInfo`] and the name). [`MarkDuplicates::finish`] returns, per input
//! record, whether Picard sets 0x400 on it, and Picard's metrics.
//!
//! What Picard does, and this crate with it:
//! * every mapped primary record gives a *fragment end* (reference, unclipped
//!   5' coordinate, strand); two mapped primary mates give a *pair end*
//!   (both 5' coordinates, the lower first, and the pair's orientation);
//! * pair ends with equal library, coordinates and orientation form a
//!   duplicate set; the highest score (sum of base qualities >= 15) is kept,
//!   ties going to the first in Picard's sort order (tile, x, y from the
//!   name, then position in the file);
//! * fragment ends at the same 5' end: if any belongs to a mapped pair, every
//!   unpaired one is a duplicate; otherwise all but the best are;
//! * a duplicate template has every record marked (secondary,
//!   supplementary and unmapped ones too);
//! * optical duplicates come from the read names (see [`optical`]).
//!
//! Memory: with [`MarkDuplicates::set_spill`] the state stays within a byte
//! limit: read ends beyond it are sorted into run files and merged back
//! one duplicate set at a time, record slots are appended to a file, and
//! the decisions are bitsets over the records (`spill`); the answer is the
//! same as without the limit.
//!
//! Records whose 0x400 bit the outcome says is clear must have it cleared
//! (Picard resets it on every record). Not covered: Picard options other
//! than `OPTICAL_DUPLICATE_PIXEL_DISTANCE`, `READ_NAME_REGEX`
//! ([`optical::NameParser`]) and the optical verdict behind `DT` tags and
//! `REMOVE_SEQUENCING_DUPLICATES` ([`Outcome::optical`]): barcodes
//! (`BARCODE_TAG`), random scoring and duplicate-set tags;
//! `alnsort sort --markdup` refuses them), names of one template that are
//! not adjacent in queryname order (Picard compares the names themselves;
//! [`grouping::GroupCheck`] lets a caller refuse such input). The metrics
//! file's header gives the run as Picard's command line
//! ([`PicardCommandLine`]: `INPUT=` names the sample for MultiQC), then the
//! caller's own command line where Picard writes its start time.
//!
//! Where things are: what a record gives ([`ReadInfo`], `record`), its
//! read group (`read_groups`), where templates start (`templates`), read
//! ends and their pairing (`ends`), the one-pass marker with its waiting
//! mates, memory limit and decision (`marker`), duplicate sets (`sets`),
//! Picard's output loop over the record slots (`walk`), the spill files
//! (`spill`), the metrics ([`metrics`]), whole templates paired on read
//! jobs ([`batch`]) and the marking cut into tasks ([`dist`]).

#![forbid(unsafe_code)]

pub mod batch;
pub mod bits;
pub mod decision;
pub mod dist;
mod ends;
mod error;
pub mod extract;
pub mod fixmate;
pub mod grouping;
pub mod hash;
pub mod htsjdk;
mod marker;
pub mod metrics;
pub mod optical;
mod read_groups;
mod record;
pub mod samtools;
mod sets;
pub mod several;
mod spill;
mod templates;
mod walk;

pub use bits::Bits;
pub use error::MarkdupError;
pub use marker::{MarkDuplicates, Outcome, SpillStats};
pub use metrics::{
    metrics_report, DuplicationMetrics, MetricsReport, PicardCommandLine, SetSizeHistograms,
};
pub use read_groups::{ReadGroups, RgInfo, UNKNOWN_LIBRARY};
pub use record::{
    base_quality_score, five_prime_coordinate, java_string_hash, reference_length_score, Barcodes,
    ReadInfo,
};
pub use templates::InputOrder;
pub use walk::{LibraryCounts, WalkCarry, Walked};

/// SAM flag bits (the bam crate's, SAM spec §1.4).
pub use alnsort_bam::record::flags;

#[cfg(test)]
mod tests;
