//! Step 5, finish: Picard's output loop over one split's slots, resumed
//! where the previous split's left it ([`finish_split`]).

use super::wire::{bad_block, decode_indexes};
#[cfg(doc)]
use super::{continued_templates, RangeSlice, SetsDecided, SplitShare};
use crate::spill::{decode_slot, SLOT_BYTES};
use crate::walk::walk_records;
use crate::{LibraryCounts, MarkdupError, WalkCarry};

/// What [`finish_split`] gives for one split.
#[derive(Debug)]
pub struct SplitOutcome {
    /// Picard's duplicate flag per record of the split.
    pub duplicate: crate::Bits,
    /// The optical verdict per record, when optical lists were given.
    pub optical: Option<crate::Bits>,
    /// Record counts per library index, for [`crate::metrics_report`].
    pub counts: LibraryCounts,
    /// Where the walk stands after the split: the next split's `carry`.
    pub carry: WalkCarry,
    /// Listed indexes (duplicate or optical) equal to the one before them:
    /// Picard's walk then falls behind its list, which in a merged stream
    /// of several inputs reaches the records of the other inputs too.
    pub repeated: u64,
}

/// Picard's output loop over one split: its slots
/// ([`SplitShare::slots`]), whether its first template began in an earlier
/// split ([`continued_templates`]), the index lists of the split from every
/// end bucket ([`SetsDecided::by_split`]; the optical ones when they are
/// tracked) and where the walk stood after the previous split (the
/// default for the first split; a split run with another carry than the
/// one the previous split ends with must be run again with that one).
pub fn finish_split(
    slots: &[u8],
    continued: bool,
    duplicates: &[&[u8]],
    optical: Option<&[&[u8]]>,
    carry: WalkCarry,
) -> Result<SplitOutcome, MarkdupError> {
    if !slots.len().is_multiple_of(SLOT_BYTES) {
        return Err(bad_block(
            "record slots",
            slots.len(),
            slots.len() / SLOT_BYTES * SLOT_BYTES,
        ));
    }
    let list = |blocks: &[&[u8]]| -> Result<Vec<u64>, MarkdupError> {
        let mut v = Vec::new();
        for b in blocks {
            decode_indexes(b, &mut v)?;
        }
        v.sort_unstable();
        Ok(v)
    };
    let duplicates = list(duplicates)?;
    let optical = optical.map(list).transpose()?;
    let repeats = |v: &[u64]| v.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    let repeated = repeats(&duplicates) + optical.as_deref().map_or(0, repeats);
    let records = (slots.len() / SLOT_BYTES) as u64;
    let mut it = slots.chunks_exact(SLOT_BYTES).enumerate().map(|(i, c)| {
        let mut s = decode_slot(c.try_into().expect("sized"));
        if i == 0 && continued {
            s.new_template = false;
        }
        s
    });
    let walked = walk_records(
        records,
        || Ok(it.next()),
        duplicates.into_iter(),
        optical.map(Vec::into_iter),
        carry,
    )?;
    Ok(SplitOutcome {
        duplicate: walked.duplicate,
        optical: walked.optical,
        counts: walked.counts,
        carry: walked.carry,
        repeated,
    })
}

/// Adds one split's record counts to `total`.
pub fn add_library_counts(total: &mut LibraryCounts, counts: &LibraryCounts) {
    if total.len() < counts.len() {
        total.resize(counts.len(), [0; 6]);
    }
    for (t, c) in total.iter_mut().zip(counts) {
        for (a, b) in t.iter_mut().zip(c) {
            *a += b;
        }
    }
}
