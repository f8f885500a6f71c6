//! Turning the accumulated runs into the index htslib would save: logical
//! offsets become real virtual offsets, the linear index is back-filled and
//! (for CSI) folded into per-bin `loff`, and sparse bins are merged into
//! their parents (`update_loff` + `compress_binning` in htslib's
//! `hts_idx_finish`). The merge test compares *compressed* distances, so it
//! must run after translation; nothing before it compares offsets.

use crate::bins::{first_bin, parent_bin, Binning};
use crate::builder::{BinData, Chunk, RefIndex, UNSET};
use crate::error::IndexError;
use crate::write;
use crate::IndexFormat;

pub use crate::write::IndexFile;

/// A bin whose chunks span less than this many compressed bytes is merged
/// into its parent (`HTS_MIN_MARKER_DIST` in hts.c).
const MIN_MARKER_DIST: u64 = 0x10000;
/// Compressed offsets must fit the top 48 bits of a virtual offset (SAM spec §4.1.1).
const MAX_COMPRESSED_OFFSET: u64 = (1 << 48) - 1;

/// Everything the builder hands over once the last run is closed.
pub(crate) struct Parts {
    pub format: IndexFormat,
    pub binning: Binning,
    pub refs: Vec<Option<RefIndex>>,
    pub n_no_coor: u64,
}

/// Check `block_offsets` and return the index of the final (EOF) block.
pub(crate) fn check_block_offsets(block_offsets: &[u64]) -> Result<usize, IndexError> {
    let Some(&last) = block_offsets.last() else {
        return Err(IndexError::BadBlockOffsets {
            block: 0,
            reason: "no blocks given",
        });
    };
    if let Some(i) = block_offsets.windows(2).position(|w| w[1] <= w[0]) {
        return Err(IndexError::BadBlockOffsets {
            block: i + 1,
            reason: "offsets must increase",
        });
    }
    if last > MAX_COMPRESSED_OFFSET {
        let block = block_offsets.len() - 1;
        return Err(IndexError::BadBlockOffsets {
            block,
            reason: "offset exceeds 2^48",
        });
    }
    Ok(block_offsets.len() - 1)
}

/// Logical-to-real translation (`block_offsets[i] << 16 | offset`).
struct Translate<'a> {
    block_offsets: &'a [u64],
}

impl Translate<'_> {
    fn real(&self, logical: u64) -> Result<u64, IndexError> {
        let block = logical >> 16;
        match usize::try_from(block)
            .ok()
            .and_then(|b| self.block_offsets.get(b))
        {
            Some(&c) => Ok((c << 16) | (logical & 0xffff)),
            None => Err(IndexError::UnknownBlock {
                offset: logical,
                block,
                n_blocks: self.block_offsets.len(),
            }),
        }
    }
}

/// Finish every reference and serialise.
pub(crate) fn finish(mut parts: Parts, block_offsets: &[u64]) -> Result<IndexFile, IndexError> {
    let translate = Translate { block_offsets };
    for r in parts.refs.iter_mut().flatten() {
        translate_offsets(r, &translate)?;
        update_loff(r, parts.binning);
        compress_binning(r, parts.binning);
    }
    write::serialize(&parts)
}

/// Back-fill untouched windows from the next touched one and translate
/// every stored offset. Metadata counts are not offsets and stay as they are.
fn translate_offsets(r: &mut RefIndex, t: &Translate<'_>) -> Result<(), IndexError> {
    let mut next = UNSET;
    for window in r.linear.iter_mut().rev() {
        if *window == UNSET {
            *window = next;
        } else {
            *window = t.real(*window)?;
            next = *window;
        }
    }
    for chunk in r.bins.iter_mut().flat_map(|b| b.chunks.iter_mut()) {
        chunk.beg = t.real(chunk.beg)?;
        chunk.end = t.real(chunk.end)?;
    }
    if let Some(meta) = r.meta.as_mut() {
        meta.off_beg = t.real(meta.off_beg)?;
        meta.off_end = t.real(meta.off_end)?;
    }
    Ok(())
}

/// Set each bin's `loff` to the linear-index entry of its first window, or 0
/// when that window lies past the last record (`update_loff`).
fn update_loff(r: &mut RefIndex, binning: Binning) {
    let n_bins = binning.n_bins();
    for (key, value) in r.table.iter() {
        if key >= n_bins {
            continue;
        }
        let bottom = binning.bin_bottom(key);
        let loff = usize::try_from(bottom)
            .ok()
            .and_then(|w| r.linear.get(w))
            .copied()
            .unwrap_or(0);
        if let Some(bin) = r.bins.get_mut(value) {
            bin.loff = loff;
        }
    }
}

/// Merge bins spanning under [`MIN_MARKER_DIST`] compressed bytes into their
/// parents, level by level from the bottom, then merge chunks that touch
/// the same BGZF block (`compress_binning`).
fn compress_binning(r: &mut RefIndex, binning: Binning) {
    let n_bins = binning.n_bins();
    for level in (1..=binning.n_lvls).rev() {
        let start = first_bin(level);
        for bucket in 0..r.table.capacity() {
            let Some((key, value)) = r.table.entry(bucket) else {
                continue;
            };
            if key >= n_bins || key < start {
                continue;
            }
            let Some(bin) = r.bins.get_mut(value) else {
                continue;
            };
            if level < binning.n_lvls {
                sort_chunks(bin);
            }
            let (Some(first), Some(last)) = (bin.chunks.first(), bin.chunks.last()) else {
                continue;
            };
            if (last.end >> 16) - (first.beg >> 16) >= MIN_MARKER_DIST {
                continue;
            }
            let Some(parent) = r.table.value(parent_bin(key)) else {
                continue;
            };
            let moved = std::mem::take(&mut bin.chunks);
            if let Some(p) = r.bins.get_mut(parent) {
                p.chunks.extend(moved);
            }
            r.table.remove_bucket(bucket);
        }
    }
    if let Some(root) = r.table.value(0).and_then(|v| r.bins.get_mut(v)) {
        sort_chunks(root);
    }
    for (key, value) in r.table.iter() {
        if key >= n_bins {
            continue;
        }
        if let Some(bin) = r.bins.get_mut(value) {
            merge_adjacent(&mut bin.chunks);
        }
    }
}

/// Order chunks by start. Starts are unique (each chunk starts at a
/// different record), so any sort gives htslib's `ks_introsort` order.
fn sort_chunks(bin: &mut BinData) {
    bin.chunks.sort_unstable_by_key(|c| c.beg);
}

/// Merge each chunk into its predecessor when it starts in the block where
/// the predecessor ends (or earlier).
fn merge_adjacent(chunks: &mut Vec<Chunk>) {
    let mut kept = 0;
    for i in 1..chunks.len() {
        let next = chunks[i];
        let cur = &mut chunks[kept];
        if cur.end >> 16 >= next.beg >> 16 {
            cur.end = cur.end.max(next.end);
        } else {
            kept += 1;
            chunks[kept] = next;
        }
    }
    chunks.truncate(kept + 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(beg: u64, end: u64) -> Chunk {
        Chunk { beg, end }
    }

    #[test]
    fn merge_adjacent_joins_chunks_sharing_a_block() {
        let mut c = vec![
            chunk(1 << 16, 2 << 16 | 5),
            chunk(2 << 16 | 9, 3 << 16),
            chunk(5 << 16, 6 << 16),
        ];
        merge_adjacent(&mut c);
        assert_eq!(c, vec![chunk(1 << 16, 3 << 16), chunk(5 << 16, 6 << 16)]);
        let mut one = vec![chunk(7, 9)];
        merge_adjacent(&mut one);
        assert_eq!(one, vec![chunk(7, 9)]);
    }

    #[test]
    fn block_offsets_are_checked() {
        assert!(check_block_offsets(&[]).is_err());
        assert_eq!(check_block_offsets(&[0, 100, 200]), Ok(2));
        assert_eq!(
            check_block_offsets(&[0, 100, 100]),
            Err(IndexError::BadBlockOffsets {
                block: 2,
                reason: "offsets must increase"
            })
        );
        assert!(check_block_offsets(&[0, 1 << 48]).is_err());
    }

    #[test]
    fn translation_maps_blocks_and_keeps_in_block_offsets() {
        let t = Translate {
            block_offsets: &[0, 700, 1500],
        };
        assert_eq!(t.real(1 << 16 | 42), Ok(700 << 16 | 42));
        assert_eq!(t.real(2 << 16), Ok(1500 << 16));
        assert!(matches!(
            t.real(3 << 16),
            Err(IndexError::UnknownBlock { block: 3, .. })
        ));
    }

    #[test]
    fn small_bins_fold_into_existing_parents_only() {
        let binning = Binning::BAI;
        let mut r = RefIndex::default();
        // Bottom bin 4681 spans 10 compressed bytes: merged into 585.
        // Bottom bin 4682 spans 0x20000 compressed bytes: kept.
        // Bottom bin 4700 is small but its parent 587 is absent: kept.
        for (bin, c) in [
            (4681, chunk(100 << 16, 110 << 16)),
            (585, chunk(200 << 16, 210 << 16)),
            (4682, chunk(300 << 16, (300 + 0x20000) << 16)),
            (4700, chunk(900_000 << 16, 900_001 << 16)),
        ] {
            let bins = &mut r.bins;
            let v = r.table.insert_with(bin, || {
                bins.push(BinData::default());
                bins.len() - 1
            });
            r.bins[v].chunks.push(c);
        }
        compress_binning(&mut r, binning);
        let mut keys: Vec<u32> = r.table.iter().map(|(k, _)| k).collect();
        keys.sort_unstable();
        // 585 itself spans little and folds into 73, which is absent: kept.
        assert_eq!(keys, vec![585, 4682, 4700]);
        let v585 = r.table.value(585).unwrap_or(usize::MAX);
        assert_eq!(
            r.bins[v585].chunks,
            vec![chunk(100 << 16, 110 << 16), chunk(200 << 16, 210 << 16)]
        );
    }
}
