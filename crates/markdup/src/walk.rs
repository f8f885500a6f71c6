//! Picard's output loop: the record slots walked in input order beside the
//! sorted duplicate indexes, giving each record's flag and the counts per
//! library.

use crate::{flags, Bits, MarkdupError};

/// What the output pass needs of each record (8 bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordSlot {
    pub(crate) library: u32,
    pub(crate) flag: u16,
    /// The record starts a template (a new name; every record in
    /// coordinate order).
    pub(crate) new_template: bool,
}

/// Record counts per library index, as the metrics take them: unmapped,
/// secondary or supplementary, unpaired, paired records; unpaired and
/// paired duplicates.
pub type LibraryCounts = Vec<[u64; 6]>;

/// Where a walk over record slots ([`walk_records`]) stands between two
/// stretches of the input: the listed indexes it has not passed yet (all
/// before the next stretch: they hold it back as a listing twice does),
/// and whether the last template was a duplicate (the next stretch may
/// continue that template). The start of the input is the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkCarry {
    pub stale: u64,
    pub dup_template: bool,
    pub optical_stale: u64,
    pub optical_dup_template: bool,
}

/// What [`walk_records`] finds over a stretch of records.
pub struct Walked {
    pub duplicate: Bits,
    pub optical: Option<Bits>,
    pub counts: LibraryCounts,
    /// Where the walk stands after the stretch.
    pub carry: WalkCarry,
}

/// Picard's output loop over `records` record slots in input order (from
/// `next_slot`): the sorted duplicate indexes (and the optical ones, when
/// given; both relative to the stretch's first record) are walked as the
/// records go by ([`Walk`]), and the metrics counted on the way. `carry`:
/// where the walk stood before the stretch ([`WalkCarry`]); a stretch
/// whose first slot starts no template continues the last one.
pub(crate) fn walk_records(
    records: u64,
    mut next_slot: impl FnMut() -> Result<Option<RecordSlot>, MarkdupError>,
    dups: impl Iterator<Item = u64>,
    optical: Option<impl Iterator<Item = u64>>,
    carry: WalkCarry,
) -> Result<Walked, MarkdupError> {
    let mut duplicate = Bits::new(records);
    let mut optical_out = optical.is_some().then(|| Bits::new(records));
    let mut walk = Walk::new(shifted(carry.stale, Some(dups)));
    walk.dup_template = carry.dup_template.then_some(0);
    let mut optical_walk = Walk::new(shifted(carry.optical_stale, optical));
    optical_walk.dup_template = carry.optical_dup_template.then_some(0);
    let mut counts: LibraryCounts = Vec::new();
    // Template 0 is the one the stretch continues, if it does.
    let mut template = 0u64;
    let mut i = 0u64;
    while let Some(rec) = next_slot()? {
        // Each record is its own template in coordinate order.
        template += rec.new_template as u64;
        let dup = walk.step(i + 1, template);
        if dup {
            duplicate.set(i);
        }
        if let Some(o) = optical_out.as_mut() {
            if optical_walk.step(i + 1, template) {
                o.set(i);
            }
        }
        let lib = rec.library as usize;
        if lib >= counts.len() {
            counts.resize(lib + 1, [0; 6]);
        }
        let c = &mut counts[lib];
        let f = rec.flag;
        let unpaired = f & flags::PAIRED == 0 || f & flags::MATE_UNMAPPED != 0;
        let sec_sup = f & (flags::SECONDARY | flags::SUPPLEMENTARY) != 0;
        if f & flags::UNMAPPED != 0 {
            c[0] += 1;
        } else if sec_sup {
            c[1] += 1;
        } else if unpaired {
            c[2] += 1;
        } else {
            c[3] += 1;
        }
        if dup && !sec_sup && f & flags::UNMAPPED == 0 {
            c[if unpaired { 4 } else { 5 }] += 1;
        }
        i += 1;
    }
    let carry = WalkCarry {
        dup_template: walk.dup_template == Some(template),
        optical_dup_template: optical_walk.dup_template == Some(template),
        stale: walk.left(),
        optical_stale: optical_walk.left(),
    };
    Ok(Walked {
        duplicate,
        optical: optical_out,
        counts,
        carry,
    })
}

/// Listed indexes shifted by one, after `stale` zeros: the indexes a walk
/// has not passed before the stretch, before every record of it.
pub(crate) fn shifted(
    stale: u64,
    it: Option<impl Iterator<Item = u64>>,
) -> impl Iterator<Item = u64> {
    std::iter::repeat_n(0, stale as usize).chain(it.into_iter().flatten().map(|i| i + 1))
}

/// Picard's output loop over one sorted index list: a record is a
/// duplicate when its index is the next one, or (queryname order) when it
/// follows a duplicate record of the same template. (An index listed twice
/// holds the walk back by one template, or one record in coordinate order,
/// as in Picard.)
pub(crate) struct Walk<I: Iterator<Item = u64>> {
    pub(crate) it: I,
    pub(crate) next: u64,
    pub(crate) dup_template: Option<u64>,
}

impl<I: Iterator<Item = u64>> Walk<I> {
    fn new(mut it: I) -> Self {
        let next = it.next().unwrap_or(u64::MAX);
        Walk {
            it,
            next,
            dup_template: None,
        }
    }

    /// Listed indexes not passed yet (the current one included).
    fn left(self) -> u64 {
        (self.next != u64::MAX) as u64 + self.it.count() as u64
    }

    fn step(&mut self, i: u64, template: u64) -> bool {
        if i > self.next && self.dup_template != Some(template) {
            self.next = self.it.next().unwrap_or(u64::MAX);
        }
        let is_dup = i == self.next || (i > self.next && self.dup_template == Some(template));
        if is_dup {
            self.dup_template = Some(template);
        }
        is_dup
    }
}
