//! Step 4, decide: one end bucket's duplicate sets sorted and walked as the
//! one-pass marker walks them ([`MarkDuplicates::decide_ends`]), in Picard's
//! merged order when several inputs keep it ([`MarkDuplicates::decide_merged`]).

use std::collections::HashMap;

use super::fixups::Fixups;
use super::merge_order::{self, MergeKey, MergeOrder};
use super::wire::bad_block;
use super::{split_of, RANK_BIT};
use crate::ends::End;
use crate::sets::{walk_frag_sets, DupSink, PartFound};
use crate::spill::{decode_end, END_BYTES};
use crate::{MarkDuplicates, MarkdupError, SetSizeHistograms};

impl DupSink for Vec<u64> {
    fn add(&mut self, index: i64) {
        self.push(index as u64);
    }
}

/// What one end bucket's decision finds.
#[derive(Clone, Debug, Default)]
pub struct SetsDecided {
    /// Duplicate and optical duplicate ordinals, ascending (an ordinal
    /// once per listing).
    pub duplicates: Vec<u64>,
    pub optical: Vec<u64>,
    pub set_sizes: SetSizeHistograms,
    /// Optical duplicate pairs per library (header library index).
    pub optical_by_library: HashMap<u32, u64>,
}

impl SetsDecided {
    /// The listed indexes of each of `splits` splits, relative to the
    /// split's first record, as bytes: (duplicates, optical).
    #[allow(clippy::type_complexity)]
    pub fn by_split(&self, splits: usize) -> Result<(Vec<Vec<u8>>, Vec<Vec<u8>>), MarkdupError> {
        let cut = |list: &[u64]| {
            let mut out = vec![Vec::new(); splits];
            for &o in list {
                let (s, i) = split_of(o);
                let Some(to) = out.get_mut(s) else {
                    return Err(MarkdupError::SplitBeyond { split: s, splits });
                };
                to.extend_from_slice(&i.to_le_bytes());
            }
            Ok(out)
        };
        Ok((cut(&self.duplicates)?, cut(&self.optical)?))
    }

    /// Adds the counts of another bucket (the index lists are the
    /// splits').
    pub fn add_counts(&mut self, o: SetsDecided) {
        self.set_sizes.add(o.set_sizes, 0);
        for (lib, n) in o.optical_by_library {
            *self.optical_by_library.entry(lib).or_default() += n;
        }
    }
}

impl MarkDuplicates {
    /// The duplicate sets of one end bucket (fragment ends from the
    /// splits, pair ends from the joins; blocks in any order), walked as
    /// [`MarkDuplicates::finish`] walks them, with this marker's optical
    /// settings (pixel distance, name parser, whether optical duplicates
    /// are listed), pool and spill limit: [`MarkDuplicates::add_end_block`]
    /// of each block, then [`MarkDuplicates::decide_bucket`].
    pub fn decide_ends(
        &mut self,
        blocks: &[&[u8]],
        fixups: &Fixups,
    ) -> Result<SetsDecided, MarkdupError> {
        if let Some(order) = fixups.merge_order() {
            return self.decide_merged(blocks, fixups, order);
        }
        for b in blocks {
            self.add_end_block(b, fixups)?;
        }
        self.decide_bucket()
    }

    /// Adds a block of one end bucket's ends (a split's fragment ends or
    /// a join's pair ends), their template indexes fixed; beyond the
    /// spill limit ([`MarkDuplicates::set_spill`]) the ends go to sorted
    /// run files, as the one-pass marker's do.
    pub fn add_end_block(&mut self, block: &[u8], fixups: &Fixups) -> Result<(), MarkdupError> {
        if !block.len().is_multiple_of(END_BYTES) {
            return Err(bad_block(
                "read ends",
                block.len(),
                block.len() / END_BYTES * END_BYTES,
            ));
        }
        for c in block.chunks_exact(END_BYTES) {
            let mut e = decode_end(c.try_into().expect("sized"));
            fixups.apply_end(&mut e);
            self.add_end(e)?;
        }
        Ok(())
    }

    /// [`MarkDuplicates::decide_ends`] of ends that carry their first
    /// record's running maximum within its split (collectors and joins
    /// keeping the merge order of several coordinate-sorted inputs,
    /// `order`): the records are put in Picard's merged order
    /// ([`merge_order::order_places`]) and the ends compared by their
    /// places in it; the listed indexes are the records' ordinals as
    /// always. Two inputs' equal running maxima are refused
    /// ([`MarkdupError::MergeTie`]): one task decides then. The ends and
    /// their records' places are held in memory until all are read: with a
    /// spill limit they may take half of it
    /// ([`MarkdupError::MergeBeyondLimit`] beyond: one task decides then,
    /// spilling), and the marker spills its ends beyond what they leave.
    pub fn decide_merged(
        &mut self,
        blocks: &[&[u8]],
        fixups: &Fixups,
        order: &MergeOrder,
    ) -> Result<SetsDecided, MarkdupError> {
        let limit = self.spill.as_ref().map(|s| s.limit);
        let mut held = 0usize;
        let mut ends: Vec<End> = Vec::new();
        let mut places: Vec<merge_order::Place> = Vec::new();
        for b in blocks {
            let mut at = 0;
            while at < b.len() {
                let fixed = b
                    .get(at..at + END_BYTES)
                    .ok_or_else(|| bad_block("read ends", b.len(), at))?;
                let mut e = decode_end(fixed.try_into().expect("sized"));
                fixups.apply_end(&mut e);
                let (local, next) = MergeKey::decode(b, at + END_BYTES)?;
                // The end, its place, the place's name (at most the key's
                // bytes) and its rank and merged-order entry (8 bytes
                // each): about what the vectors will hold.
                held += std::mem::size_of::<End>()
                    + std::mem::size_of::<merge_order::Place>()
                    + (next - at - END_BYTES)
                    + 16;
                at = next;
                if let Some(limit) = limit.filter(|&l| held > l / 2) {
                    return Err(MarkdupError::MergeBeyondLimit {
                        held,
                        ends: ends.len() + 1,
                        limit,
                    });
                }
                places.push(order.place(e.r1_index, local)?);
                ends.push(e);
            }
        }
        // The marker's ends spill beyond what the ranks leave of the limit.
        if let (Some(limit), Some(sp)) = (limit, self.spill.as_mut()) {
            sp.limit = limit - held;
        }
        let decided = self.decide_ranked(ends, places);
        if let (Some(limit), Some(sp)) = (limit, self.spill.as_mut()) {
            sp.limit = limit;
        }
        decided
    }

    /// The rest of [`MarkDuplicates::decide_merged`]: the records ranked
    /// in Picard's merged order, the ends added by their first records'
    /// ranks and the bucket decided, its lists turned back into ordinals.
    pub(crate) fn decide_ranked(
        &mut self,
        ends: Vec<End>,
        mut places: Vec<merge_order::Place>,
    ) -> Result<SetsDecided, MarkdupError> {
        // One place per record (a record's fragment end and its pair end
        // name it both, with one running maximum).
        places.sort_unstable_by_key(|p| p.ordinal);
        places.dedup_by_key(|p| p.ordinal);
        let merged = merge_order::order_places(&places).map_err(|t| MarkdupError::MergeTie {
            a_input: t.a.0,
            b_input: t.b.0,
            name: t.name,
        })?;
        // Ranks stand for the records' first-end indexes, above every
        // ordinal so that listed ranks and listed ordinals (second ends)
        // are told apart.
        let mut rank_of = vec![0u64; places.len()];
        for (rank, &p) in merged.iter().enumerate() {
            rank_of[p] = rank as u64;
        }
        for mut e in ends {
            let p = places
                .binary_search_by_key(&e.r1_index, |p| p.ordinal)
                .expect("every end's place is listed");
            e.r1_index = (RANK_BIT | rank_of[p]) as i64;
            self.add_end(e)?;
        }
        let mut d = self.decide_bucket()?;
        let ordinal_of = |v: u64| {
            if v & RANK_BIT != 0 {
                places[merged[(v & !RANK_BIT) as usize]].ordinal as u64
            } else {
                v
            }
        };
        for list in [&mut d.duplicates, &mut d.optical] {
            for v in list.iter_mut() {
                *v = ordinal_of(*v);
            }
            list.sort_unstable();
        }
        Ok(d)
    }

    /// The duplicate sets of the ends added since the last call (the runs
    /// on disk merged with those in memory), walked as
    /// [`MarkDuplicates::finish`] walks them.
    pub fn decide_bucket(&mut self) -> Result<SetsDecided, MarkdupError> {
        // With every fragment end in memory, those no set needs are left
        // out before the sort, as one node's decision leaves them out (a
        // fragment set lies in one bucket).
        let frags_spilled = self.spill.as_ref().is_some_and(|s| !s.frag_runs.is_empty());
        let k = if frags_spilled {
            self.sort_ends(true)
        } else {
            self.sort_ends_for_decision()
        };
        let ends = std::mem::take(&mut self.ends);
        let (mut pair_runs, mut frag_runs) = (Vec::new(), Vec::new());
        if let Some(sp) = self.spill.as_mut() {
            pair_runs = std::mem::take(&mut sp.pair_runs);
            frag_runs = std::mem::take(&mut sp.frag_runs);
        }
        let mut part = PartFound::new((Vec::<u64>::new(), Vec::<u64>::new()));
        let mut stream = crate::spill::EndStream::new(pair_runs, &ends[..k])?;
        self.walk_pair_sets(|| stream.next_end(), &mut part)?;
        drop(stream);
        let mut stream = crate::spill::EndStream::new(frag_runs, &ends[k..])?;
        walk_frag_sets(|| stream.next_end(), &mut part.sink.0)?;
        drop(stream);
        let PartFound {
            sink: (mut duplicates, mut optical),
            set_sizes: sizes,
            singles,
            optical_by_library,
        } = part;
        duplicates.sort_unstable();
        optical.sort_unstable();
        let mut set_sizes = SetSizeHistograms::default();
        set_sizes.add(sizes, singles);
        Ok(SetsDecided {
            duplicates,
            optical,
            set_sizes,
            optical_by_library: optical_by_library
                .into_iter()
                .map(|(id, n)| ((id - 1) as u32, n))
                .collect(),
        })
    }
}
