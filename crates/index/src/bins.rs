//! Binning-scheme arithmetic shared by BAI and CSI (SAM spec §5.1.1 and the
//! CSI spec): which bin a `[beg, end)` interval falls in, how bins nest, and
//! how deep a CSI index must be for the longest reference. Kept apart from
//! the builder so each formula can be tested against the spec on its own.

use crate::error::IndexError;

/// Levels in a BAI binning index and the fixed BAI `min_shift` (SAM spec
/// §5.3: 16 kbp bottom bins, six levels 0..=5).
pub const BAI_LEVELS: u32 = 5;
/// BAI's bottom-bin width and linear-index window, as a shift (2^14 = 16 kbp).
pub const BAI_MIN_SHIFT: u32 = 14;
/// The deepest CSI index htslib builds (`hts_adjust_csi_settings`:
/// `max_n_lvls = 9`, "to prevent bin number overflow").
pub const CSI_MAX_LEVELS: u32 = 9;
/// htslib pads the longest reference by this many bases before choosing the
/// depth (`hts_adjust_csi_settings`: `max_len = max_len_in + 256`).
const CSI_LENGTH_PAD: u128 = 256;
/// Largest `min_shift + 3 * n_lvls` we accept: positions are `i64` here, and
/// `1 << 62` still leaves headroom for `end` arithmetic.
pub const MAX_TOTAL_SHIFT: u32 = 62;

/// The shape of a binning index: bottom-bin width `2^min_shift` and
/// `n_lvls` levels below the root bin 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binning {
    /// Width of the smallest bins (and the linear-index windows) as a shift.
    pub min_shift: u32,
    /// Depth of the tree: level 0 is the root, level `n_lvls` the bottom.
    pub n_lvls: u32,
}

impl Binning {
    /// The BAI scheme (SAM spec §5.3).
    pub const BAI: Binning = Binning {
        min_shift: BAI_MIN_SHIFT,
        n_lvls: BAI_LEVELS,
    };

    /// CSI settings for references up to `max_ref_len` bases, chosen as
    /// htslib's `hts_adjust_csi_settings` does: deepen the tree until it
    /// covers `max_ref_len + 256`; if nine levels are not enough, keep nine
    /// and widen `min_shift` instead.
    pub fn csi_for(min_shift: u32, max_ref_len: u64) -> Result<Binning, IndexError> {
        if min_shift == 0 || min_shift + 3 * CSI_MAX_LEVELS > MAX_TOTAL_SHIFT {
            return Err(IndexError::InvalidMinShift { min_shift });
        }
        let need = u128::from(max_ref_len) + CSI_LENGTH_PAD;
        let at_max_depth = 1u128 << (min_shift + 3 * CSI_MAX_LEVELS);
        let binning = if need <= at_max_depth {
            let mut n_lvls = 0;
            let mut covered = 1u128 << min_shift;
            while need > covered {
                n_lvls += 1;
                covered <<= 3;
            }
            Binning { min_shift, n_lvls }
        } else {
            let mut shift = min_shift;
            let mut covered = at_max_depth;
            while need > covered {
                shift += 1;
                covered <<= 1;
            }
            Binning {
                min_shift: shift,
                n_lvls: CSI_MAX_LEVELS,
            }
        };
        if binning.min_shift + 3 * binning.n_lvls > MAX_TOTAL_SHIFT {
            return Err(IndexError::ReferenceTooLong {
                length: max_ref_len,
            });
        }
        Ok(binning)
    }

    /// Exclusive upper bound of the positions the tree covers
    /// (`hts_bin_maxpos`).
    pub fn max_pos(self) -> i64 {
        1i64 << (self.min_shift + 3 * self.n_lvls)
    }

    /// Number of real bins, levels 0..=n_lvls (`idx->n_bins`); also the first
    /// bin number of the level below the bottom.
    pub fn n_bins(self) -> u32 {
        first_bin(self.n_lvls + 1)
    }

    /// The pseudo-bin holding per-reference metadata (`META_BIN`: 37450 for
    /// BAI, SAM spec §5.2).
    pub fn meta_bin(self) -> u32 {
        self.n_bins() + 1
    }

    /// The smallest bin wholly containing `[beg, end)` (`hts_reg2bin`; the
    /// SAM spec's `reg2bin` generalised to any depth). `end` is exclusive;
    /// an empty interval is treated as covering `beg`. Negative `beg`
    /// (htslib's unplaced `[-1, 0)`) yields the bin just before the bottom
    /// level, which htslib uses only as a run marker.
    pub fn reg2bin(self, beg: i64, end: i64) -> i64 {
        let last = end - 1;
        let mut shift = self.min_shift;
        for level in (1..=self.n_lvls).rev() {
            if beg >> shift == last >> shift {
                return i64::from(first_bin(level)) + (beg >> shift);
            }
            shift += 3;
        }
        0
    }

    /// First bin of the bottom-level range that `bin` covers
    /// (`hts_bin_bot`): the index of the linear-index window at its start.
    pub fn bin_bottom(self, bin: u32) -> u64 {
        let level = bin_level(bin);
        u64::from(bin - first_bin(level)) << (3 * (self.n_lvls - level))
    }
}

/// Number of the first bin on `level` (`hts_bin_first`): `(8^level - 1) / 7`.
pub fn first_bin(level: u32) -> u32 {
    ((1u64 << (3 * level)) - 1) as u32 / 7
}

/// Parent of a non-root bin (`hts_bin_parent`).
pub fn parent_bin(bin: u32) -> u32 {
    (bin - 1) >> 3
}

/// Level of a bin: 0 for the root (`hts_bin_level`).
pub fn bin_level(bin: u32) -> u32 {
    let mut level = 0;
    let mut b = bin;
    while b != 0 {
        level += 1;
        b = parent_bin(b);
    }
    level
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The SAM spec §5.3 `reg2bin`, transcribed literally (0-based,
    /// exclusive end), as an independent oracle for the BAI case.
    fn spec_reg2bin(beg: i64, end: i64) -> i64 {
        let end = end - 1;
        if beg >> 14 == end >> 14 {
            return ((1 << 15) - 1) / 7 + (beg >> 14);
        }
        if beg >> 17 == end >> 17 {
            return ((1 << 12) - 1) / 7 + (beg >> 17);
        }
        if beg >> 20 == end >> 20 {
            return ((1 << 9) - 1) / 7 + (beg >> 20);
        }
        if beg >> 23 == end >> 23 {
            return ((1 << 6) - 1) / 7 + (beg >> 23);
        }
        if beg >> 26 == end >> 26 {
            return 1 + (beg >> 26); // ((1 << 3) - 1) / 7 = 1
        }
        0
    }

    #[test]
    fn bai_constants_match_the_spec() {
        assert_eq!(Binning::BAI.n_bins(), 37449);
        assert_eq!(Binning::BAI.meta_bin(), 37450);
        assert_eq!(Binning::BAI.max_pos(), 1 << 29);
        assert_eq!(
            (0..=5).map(first_bin).collect::<Vec<_>>(),
            vec![0, 1, 9, 73, 585, 4681]
        );
    }

    #[test]
    fn reg2bin_known_values() {
        let b = Binning::BAI;
        assert_eq!(b.reg2bin(0, 1), 4681);
        assert_eq!(b.reg2bin(16383, 16384), 4681);
        assert_eq!(b.reg2bin(16384, 16385), 4682);
        assert_eq!(b.reg2bin(16383, 16385), 585);
        assert_eq!(b.reg2bin(0, 1 << 29), 0);
        assert_eq!(b.reg2bin((1 << 26) - 1, (1 << 26) + 1), 0);
        // Unplaced reads: htslib pushes [-1, 0).
        assert_eq!(b.reg2bin(-1, 0), 4680);
    }

    #[test]
    fn bin_tree_navigation() {
        assert_eq!(parent_bin(4681), 585);
        assert_eq!(parent_bin(1), 0);
        assert_eq!(bin_level(0), 0);
        assert_eq!(bin_level(8), 1);
        assert_eq!(bin_level(9), 2);
        assert_eq!(bin_level(37448), 5);
        let b = Binning::BAI;
        assert_eq!(b.bin_bottom(0), 0);
        assert_eq!(b.bin_bottom(4682), 1);
        assert_eq!(b.bin_bottom(586), 8);
        assert_eq!(b.bin_bottom(2), 4096);
    }

    #[test]
    fn csi_depth_follows_longest_reference() {
        let csi = |len| Binning::csi_for(14, len).map(|b| (b.min_shift, b.n_lvls));
        assert_eq!(csi(0).ok(), Some((14, 0)));
        assert_eq!(csi(16384 - 256).ok(), Some((14, 0)));
        assert_eq!(csi(16384 - 255).ok(), Some((14, 1)));
        // hg38 chr1 (248,956,422 bp) fits in the BAI-shaped 5 levels.
        assert_eq!(csi(248_956_422).ok(), Some((14, 5)));
        assert_eq!(csi((1 << 29) - 256).ok(), Some((14, 5)));
        assert_eq!(csi((1 << 29) - 255).ok(), Some((14, 6)));
        assert_eq!(csi(1_000_000_000).ok(), Some((14, 6)));
        // Beyond 2^41 nine levels are not enough: min_shift grows instead.
        assert_eq!(csi(1 << 41).ok(), Some((15, 9)));
        assert!(matches!(
            Binning::csi_for(0, 10),
            Err(IndexError::InvalidMinShift { min_shift: 0 })
        ));
        assert!(matches!(
            Binning::csi_for(14, u64::MAX),
            Err(IndexError::ReferenceTooLong { .. })
        ));
    }

    proptest! {
        #[test]
        fn reg2bin_matches_spec_for_bai(beg in 0i64..(1 << 29), len in 0i64..(1 << 22)) {
            let end = (beg + len).min(1 << 29).max(beg + 1);
            prop_assert_eq!(Binning::BAI.reg2bin(beg, end), spec_reg2bin(beg, end));
        }

        #[test]
        fn reg2bin_bin_contains_interval(
            min_shift in 10u32..20, n_lvls in 1u32..8, beg_frac in 0.0f64..1.0, len in 1i64..5_000_000,
        ) {
            let b = Binning { min_shift, n_lvls };
            let beg = (beg_frac * (b.max_pos() - 1) as f64) as i64;
            let end = (beg + len).min(b.max_pos());
            let bin = b.reg2bin(beg, end) as u32;
            let level = bin_level(bin);
            let width = 1i64 << (min_shift + 3 * (n_lvls - level));
            let start = (b.bin_bottom(bin) as i64) << min_shift;
            prop_assert!(start <= beg && end <= start + width);
            // ... and no child bin would do.
            if level < n_lvls {
                let child_width = width >> 3;
                prop_assert!(beg / child_width != (end - 1) / child_width);
            }
        }
    }
}
