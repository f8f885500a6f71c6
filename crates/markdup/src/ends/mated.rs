//! The fragment ends of records whose mate is mapped, kept by their set
//! keys alone ([`MatedFrags`]).

use crate::ends::{End, FragKey, MIN_ENDS, R};
use crate::optical::Location;
#[cfg(doc)]
use crate::sets::mark_fragments;

/// The fragment ends of mapped records whose mate is mapped too, kept as
/// their set keys alone. In a fragment set such an end is never marked and
/// never the kept one: the decision asks only whether the set holds one
/// ([`mark_fragments`]'s `contains_pairs`), and a set of them alone is
/// passed over. So an end rebuilt from its key ([`MatedFrags::end`])
/// decides exactly as the record's own end did. A key takes 8 bytes
/// (packed, the usual case: no barcodes, fewer than 128 libraries and
/// 2^24 references) or 24, where the full end takes 64: with every mate
/// mapped these are two thirds of the ends.
#[derive(Default)]
pub(crate) struct MatedFrags {
    pub(crate) packed: Vec<u64>,
    pub(crate) wide: Vec<FragKey>,
}

impl MatedFrags {
    /// Libraries below this id fit the packed form (7 bits).
    pub(crate) const PACKED_LIBRARIES: i16 = 1 << 7;
    /// References below this id fit the packed form (24 bits).
    pub(crate) const PACKED_REFS: i32 = 1 << 24;

    #[inline]
    pub(crate) fn push(&mut self, e: &End) {
        self.push_key(e.frag_key());
    }

    #[inline]
    pub(crate) fn push_key(&mut self, key: FragKey) {
        let (library, _, _, _, r1_ref, r1_coord, orientation) = key;
        if Self::packs(key) {
            self.packed.push(
                (library as u64) << 57
                    | (orientation as u64) << 56
                    | (r1_ref as u64) << 32
                    | r1_coord as u32 as u64,
            );
        } else {
            self.wide.push(key);
        }
    }

    #[inline]
    pub(crate) fn unpack(k: u64) -> FragKey {
        (
            (k >> 57) as i16,
            0,
            0,
            0,
            (k >> 32 & 0xff_ffff) as i32,
            k as u32 as i32,
            (k >> 56 & 1) as u8,
        )
    }

    pub(crate) fn len(&self) -> usize {
        self.packed.len() + self.wide.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` would pack ([`MatedFrags::push`]).
    #[inline]
    pub(crate) fn packs(key: FragKey) -> bool {
        let (library, barcode, r1_barcode, r2_barcode, r1_ref, _, orientation) = key;
        (barcode, r1_barcode, r2_barcode) == (0, 0, 0)
            && (0..Self::PACKED_LIBRARIES).contains(&library)
            && (0..Self::PACKED_REFS).contains(&r1_ref)
            && orientation <= R
    }

    /// Whether `key` finds its buffer full.
    #[inline]
    pub(crate) fn is_full_for(&self, key: FragKey) -> bool {
        if Self::packs(key) {
            self.packed.len() == self.packed.capacity()
        } else {
            self.wide.len() == self.wide.capacity()
        }
    }

    /// Grows the buffer `key` goes to: doubled, to at least
    /// `MIN_ENDS` keys, to at most `max_bytes` (but one key).
    pub(crate) fn grow_for(&mut self, key: FragKey, max_bytes: usize) {
        fn grow<T>(v: &mut Vec<T>, max_bytes: usize) {
            let most = (max_bytes / std::mem::size_of::<T>()).max(v.len() + 1);
            let want = (v.capacity() * 2).max(MIN_ENDS).min(most);
            v.reserve_exact(want.saturating_sub(v.len()));
        }
        if Self::packs(key) {
            grow(&mut self.packed, max_bytes);
        } else {
            grow(&mut self.wide, max_bytes);
        }
    }

    /// Empties the buffers, keeping room for `MIN_ENDS` keys each.
    pub(crate) fn clear(&mut self) {
        self.packed.clear();
        self.packed.shrink_to(MIN_ENDS);
        self.wide.clear();
        self.wide.shrink_to(MIN_ENDS);
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.packed.capacity() * std::mem::size_of::<u64>()
            + self.wide.capacity() * std::mem::size_of::<FragKey>()
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = FragKey> + '_ {
        (self.packed.iter().map(|&k| Self::unpack(k))).chain(self.wide.iter().copied())
    }

    /// A fragment end with `key` whose mate is mapped (`r2_ref` 0: any
    /// reference; the rest no record's).
    pub(crate) fn end(key: FragKey) -> End {
        let (library, barcode, r1_barcode, r2_barcode, r1_ref, r1_coord, orientation) = key;
        End {
            library,
            barcode,
            r1_barcode,
            r2_barcode,
            orientation,
            r1_ref,
            r1_coord,
            r2_ref: 0,
            r2_coord: -1,
            loc: Location {
                read_group: 0,
                tile: -1,
                x: 0,
                y: 0,
            },
            optical_orientation: -1,
            score: 0,
            r1_index: -1,
            r2_index: -1,
            pair: false,
        }
    }
}
