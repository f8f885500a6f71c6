//! Picard's read ends ([`End`]): their fields and comparators, the fragment
//! end of a record and the pair end of two mates.

mod mated;
mod pairing;

pub(crate) use mated::MatedFrags;
pub(crate) use pairing::{record_ends, Pairing};

use crate::flags;
use crate::optical::Location;
use crate::record::{Barcodes, ReadInfo};
#[cfg(doc)]
use crate::{dist, MarkDuplicates};

pub(crate) const F: u8 = 0;
pub(crate) const R: u8 = 1;
pub(crate) const FF: u8 = 2;
pub(crate) const FR: u8 = 3;
pub(crate) const RR: u8 = 4;
pub(crate) const RF: u8 = 5;

#[inline]
pub(crate) fn orientation_byte(first_neg: bool, second_neg: bool) -> u8 {
    match (first_neg, second_neg) {
        (true, true) => RR,
        (true, false) => RF,
        (false, true) => FR,
        (false, false) => FF,
    }
}

/// Picard's `ReadEndsForMarkDuplicates`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct End {
    pub(crate) library: i16,
    pub(crate) barcode: i32,
    pub(crate) r1_barcode: i32,
    pub(crate) r2_barcode: i32,
    pub(crate) orientation: u8,
    pub(crate) r1_ref: i32,
    pub(crate) r1_coord: i32,
    pub(crate) r2_ref: i32,
    pub(crate) r2_coord: i32,
    pub(crate) loc: Location,
    pub(crate) optical_orientation: i8,
    pub(crate) score: i16,
    pub(crate) r1_index: i64,
    pub(crate) r2_index: i64,
    /// A pair end (both mates), not a fragment end.
    pub(crate) pair: bool,
}

impl End {
    #[inline]
    pub(crate) fn is_paired(&self) -> bool {
        self.r2_ref != -1
    }

    /// Picard's `ReadEndsMDComparator` (barcodes are all 0 without them).
    #[inline]
    pub(crate) fn cmp(&self, o: &End) -> std::cmp::Ordering {
        (self.library)
            .cmp(&o.library)
            .then(self.barcode.cmp(&o.barcode))
            .then(self.r1_barcode.cmp(&o.r1_barcode))
            .then(self.r2_barcode.cmp(&o.r2_barcode))
            .then(self.r1_ref.cmp(&o.r1_ref))
            .then(self.r1_coord.cmp(&o.r1_coord))
            .then(self.orientation.cmp(&o.orientation))
            .then(self.r2_ref.cmp(&o.r2_ref))
            .then(self.r2_coord.cmp(&o.r2_coord))
            .then(self.loc.tile.cmp(&o.loc.tile))
            .then(self.loc.x.cmp(&o.loc.x))
            .then(self.loc.y.cmp(&o.loc.y))
            .then(self.r1_index.cmp(&o.r1_index))
            .then(self.r2_index.cmp(&o.r2_index))
    }

    /// [`End::cmp`], then the fields it leaves out: ends equal in this
    /// order are interchangeable (the decisions do not depend on their
    /// order), so an unstable sort, and a merge of sorted runs, give the
    /// same decisions as any stable sort.
    #[inline]
    pub(crate) fn total_cmp(&self, o: &End) -> std::cmp::Ordering {
        self.cmp(o)
            .then(self.score.cmp(&o.score))
            .then(self.optical_orientation.cmp(&o.optical_orientation))
            .then(self.loc.read_group.cmp(&o.loc.read_group))
            .then(self.pair.cmp(&o.pair))
    }

    /// The fields a fragment end's set shares (`same_set` without read 2),
    /// in [`End::cmp`]'s order.
    #[inline]
    pub(crate) fn frag_key(&self) -> (i16, i32, i32, i32, i32, i32, u8) {
        (
            self.library,
            self.barcode,
            self.r1_barcode,
            self.r2_barcode,
            self.r1_ref,
            self.r1_coord,
            self.orientation,
        )
    }

    #[inline]
    pub(crate) fn same_set(&self, o: &End, compare_read2: bool) -> bool {
        self.library == o.library
            && self.barcode == o.barcode
            && self.r1_barcode == o.r1_barcode
            && self.r2_barcode == o.r2_barcode
            && self.r1_ref == o.r1_ref
            && self.r1_coord == o.r1_coord
            && self.orientation == o.orientation
            && (!compare_read2 || (self.r2_ref == o.r2_ref && self.r2_coord == o.r2_coord))
    }
}

/// The fewest read ends the memory limit must leave room for.
pub(crate) const MIN_ENDS: usize = if cfg!(test) { 16 } else { 4096 };

/// A fragment end's set key ([`End::frag_key`]).
pub(crate) type FragKey = (i16, i32, i32, i32, i32, i32, u8);

/// The fragment end of a mapped primary record `r` of template
/// `template_index` (its library's id, its name's location); `r2_ref` is
/// the mate's reference when the mate is mapped, else -1.
#[inline]
pub(crate) fn fragment_end(
    r: &ReadInfo<'_>,
    library: i16,
    loc: Location,
    template_index: i64,
) -> End {
    let reverse = r.flag & flags::REVERSE != 0;
    let mate_mapped = r.flag & flags::PAIRED != 0 && r.flag & flags::MATE_UNMAPPED == 0;
    let read_one = r.flag & flags::PAIRED == 0 || r.flag & flags::READ1 != 0;
    End {
        library,
        barcode: r.barcodes.umi,
        r1_barcode: if read_one { r.barcodes.read_one } else { 0 },
        r2_barcode: if read_one { 0 } else { r.barcodes.read_two },
        orientation: if reverse { R } else { F },
        r1_ref: r.ref_id,
        r1_coord: r.five_prime,
        r2_ref: if mate_mapped { r.mate_ref_id } else { -1 },
        r2_coord: -1,
        loc,
        optical_orientation: -1,
        score: r.score,
        r1_index: template_index,
        r2_index: -1,
        pair: false,
    }
}

/// The pair end of a waiting mate's fragment end `p` and its other half
/// (`second`: that record's fragment end; `read1`: it is the first of
/// pair; its barcodes): the lower 5' end first, Picard's orientation, the
/// scores summed. The one pairing step of [`MarkDuplicates`] and of the
/// distributed join ([`dist::join_mates`]).
#[inline]
pub(crate) fn pair_end(mut p: End, second: &End, read1: bool, barcodes: Barcodes) -> End {
    let reverse = second.orientation == R;
    let first_was_reverse = p.orientation == R;
    p.optical_orientation = if read1 {
        p.r1_barcode = barcodes.read_one;
        orientation_byte(reverse, first_was_reverse)
    } else {
        p.r2_barcode = barcodes.read_two;
        orientation_byte(first_was_reverse, reverse)
    } as i8;
    let (mate_ref, mate_coord) = (second.r1_ref, second.r1_coord);
    if mate_ref > p.r1_ref || (mate_ref == p.r1_ref && mate_coord >= p.r1_coord) {
        p.r2_ref = mate_ref;
        p.r2_coord = mate_coord;
        p.r2_index = second.r1_index;
        p.orientation = orientation_byte(first_was_reverse, reverse);
        if p.r2_ref == p.r1_ref && p.r2_coord == p.r1_coord && p.orientation == RF {
            p.orientation = FR;
        }
    } else {
        p.r2_ref = p.r1_ref;
        p.r2_coord = p.r1_coord;
        p.r2_index = p.r1_index;
        p.r1_ref = mate_ref;
        p.r1_coord = mate_coord;
        p.r1_index = second.r1_index;
        p.orientation = orientation_byte(reverse, first_was_reverse);
    }
    p.score = p.score.wrapping_add(second.score);
    p.pair = true;
    p
}

/// Moves the ends for which `first` holds before the others (in no
/// particular order); returns how many there are.
pub(crate) fn partition(ends: &mut [End], first: impl Fn(&End) -> bool) -> usize {
    let mut k = 0;
    for i in 0..ends.len() {
        if first(&ends[i]) {
            ends.swap(k, i);
            k += 1;
        }
    }
    k
}
