//! The decision once the input is read: the duplicate sets walked (on a pool
//! when every end is in memory), the optical duplicates found, and the
//! output loop over the record slots.

use std::collections::HashMap;

use crate::ends::{partition, End, MatedFrags, FR, RF};
use crate::optical::{self, Location};
use crate::sets::{
    best_index, for_each_set, push_duplicates, set_stretches, walk_frag_sets, DupList, DupSink,
    Found, PartFound,
};
use crate::walk::{walk_records, WalkCarry};
use crate::{
    metrics_report, spill, Bits, MarkDuplicates, MarkdupError, MetricsReport, Outcome,
    SetSizeHistograms,
};

impl MarkDuplicates {
    /// Finds the duplicates and computes the metrics.
    pub fn finish(mut self) -> Result<Outcome, MarkdupError> {
        let records = self.records.len();
        let mut dups = DupList::new(records);
        let mut optical = DupList::new(if self.track_optical { records } else { 0 });
        let mut set_sizes = SetSizeHistograms::default();
        let mut optical_by_library: HashMap<i16, u64> = HashMap::new();

        // Pair ends first, then fragment ends, each in `total_cmp` order:
        // the runs on disk merged with what is still in memory.
        let frags_spilled = self.spill.as_ref().is_some_and(|s| !s.frag_runs.is_empty());
        let k = if frags_spilled {
            // The mated fragments' keys join the runs, and the ends in
            // memory with them (`spill_mated` fills the ends' buffer).
            self.spill_ends()?;
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
        let mut found = Found {
            dups: &mut dups,
            optical: &mut optical,
            set_sizes: &mut set_sizes,
            optical_by_library: &mut optical_by_library,
        };
        match self.pool.clone() {
            // Every end in memory: the sets are cut into stretches walked
            // on the pool, each adding to the shared lists.
            Some(pool) if pair_runs.is_empty() && frag_runs.is_empty() => {
                self.walk_sets_parallel(&pool, &ends[..k], &ends[k..], &mut found)?;
            }
            _ => {
                let mut stream = spill::EndStream::new(pair_runs, &ends[..k])?;
                let sink = (&mut *found.dups, &mut *found.optical);
                let mut part = PartFound::new(sink);
                self.walk_pair_sets(|| stream.next_end(), &mut part)?;
                drop(stream);
                let mut stream = spill::EndStream::new(frag_runs, &ends[k..])?;
                walk_frag_sets(|| stream.next_end(), &mut part.sink.0)?;
                drop(stream);
                let PartFound {
                    set_sizes: sizes,
                    singles,
                    optical_by_library: by_lib,
                    ..
                } = part;
                found.add_counts(sizes, singles, by_lib);
            }
        }
        drop(ends);

        let spill = self.spill_stats();
        let (duplicate, optical, metrics) =
            self.output_pass(dups, optical, &optical_by_library, set_sizes)?;
        Ok(Outcome {
            duplicate,
            optical,
            spill,
            metrics,
        })
    }

    /// [`MarkDuplicates::sort_ends`] once the input is read, with every
    /// fragment end in memory: the fragment ends of records whose mate is
    /// mapped (`mated`, by their keys) matter only in a set that holds a
    /// fragment end of another kind (Picard passes over sets of them
    /// alone), so only those whose key such a fragment shares join the
    /// ends (with mates mapped throughout, none). Returns where the
    /// fragment ends start.
    pub(crate) fn sort_ends_for_decision(&mut self) -> usize {
        let k = partition(&mut self.ends, |e| e.pair);
        // (A fragment end with its mate mapped among the ends, as
        // `add_end` takes them, joins the keys.)
        let t = k + partition(&mut self.ends[k..], |e| !e.is_paired());
        for e in &self.ends[t..] {
            self.mated.push(e);
        }
        self.ends.truncate(t);
        let pool = self.pool.as_ref();
        let (pairs, lone) = self.ends.split_at_mut(k);
        Self::sort_slice(pool, pairs, true);
        // Fragments of unpaired records and of mates whose mate is
        // unmapped, sorted: sets are runs of equal `frag_key`.
        Self::sort_slice(pool, lone, true);
        // A filter over the lone fragments' 5' ends spares most of the
        // searches.
        const FILTER_BITS: u32 = 20;
        let slot = |r1_ref: i32, r1_coord: i32| {
            let h = (r1_ref as u32 as u64) << 32 | r1_coord as u32 as u64;
            (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS)) as usize
        };
        let mut filter = vec![0u64; (1 << FILTER_BITS) / 64];
        for e in lone.iter() {
            let s = slot(e.r1_ref, e.r1_coord);
            filter[s / 64] |= 1 << (s % 64);
        }
        let mut kept = Vec::new();
        if !lone.is_empty() {
            for key in self.mated.keys() {
                let s = slot(key.4, key.5);
                if filter[s / 64] >> (s % 64) & 1 == 0 {
                    continue;
                }
                let at = lone.partition_point(|f| f.frag_key() < key);
                if lone.get(at).is_some_and(|f| f.frag_key() == key) {
                    kept.push(MatedFrags::end(key));
                }
            }
        }
        self.mated = MatedFrags::default();
        if !kept.is_empty() {
            self.ends.extend(kept);
            self.ends[k..].sort_unstable_by(|a, b| a.total_cmp(b));
        }
        k
    }

    /// Walks the pair ends' duplicate sets (ends in [`End::total_cmp`]
    /// order, from `next`), marking each set's duplicates.
    pub(crate) fn walk_pair_sets<S: DupSink>(
        &self,
        next: impl FnMut() -> Result<Option<End>, MarkdupError>,
        found: &mut PartFound<S>,
    ) -> Result<(), MarkdupError> {
        for_each_set(next, true, |set| {
            if set.len() > 1 {
                self.mark_pairs(set, found)?;
            } else {
                found.singles += 1;
            }
            Ok(())
        })
    }

    /// The duplicate sets of in-memory ends (`pairs` and `frags`, each in
    /// [`End::total_cmp`] order), cut into stretches at set boundaries and
    /// walked on `pool`. The lists get the same indexes as one walk in
    /// order would give them (in another order, which they do not keep);
    /// an error is the first one in that order.
    pub(crate) fn walk_sets_parallel(
        &self,
        pool: &rayon::ThreadPool,
        pairs: &[End],
        frags: &[End],
        found: &mut Found<'_>,
    ) -> Result<(), MarkdupError> {
        use rayon::prelude::*;
        let parts = pool.current_num_threads() * 4;
        let (dups, optical) = (&*found.dups, &*found.optical);
        let pair_parts = set_stretches(pairs, parts, true);
        let frag_parts = set_stretches(frags, parts, false);
        let (pair_found, frag_found) = pool.install(|| {
            rayon::join(
                || {
                    pair_parts
                        .par_iter()
                        .map(|r| {
                            let mut part = PartFound::new((dups.shared(), optical.shared()));
                            let mut it = pairs[r.clone()].iter();
                            self.walk_pair_sets(|| Ok(it.next().copied()), &mut part)
                                .map(|()| part)
                        })
                        .collect::<Vec<_>>()
                },
                || {
                    frag_parts
                        .par_iter()
                        .map(|r| {
                            let mut sink = dups.shared();
                            let mut it = frags[r.clone()].iter();
                            walk_frag_sets(|| Ok(it.next().copied()), &mut sink).map(|()| sink)
                        })
                        .collect::<Vec<_>>()
                },
            )
        });
        let mut repeats = Vec::new();
        let mut optical_repeats = Vec::new();
        let mut counts = Vec::new();
        for part in pair_found {
            let part = part?;
            repeats.extend(part.sink.0.repeats);
            optical_repeats.extend(part.sink.1.repeats);
            counts.push((part.set_sizes, part.singles, part.optical_by_library));
        }
        for sink in frag_found {
            repeats.extend(sink?.repeats);
        }
        for (sizes, singles, by_library) in counts {
            found.add_counts(sizes, singles, by_library);
        }
        found.dups.repeats.extend(repeats);
        found.optical.repeats.extend(optical_repeats);
        Ok(())
    }

    pub(crate) fn mark_pairs<S: DupSink>(
        &self,
        set: &[End],
        found: &mut PartFound<S>,
    ) -> Result<(), MarkdupError> {
        let (dup_indexes, optical_indexes) = (&mut found.sink.0, &mut found.sink.1);
        let set_sizes = &mut found.set_sizes;
        let optical_by_library = &mut found.optical_by_library;
        let best = best_index(set);
        // Which ends of the set are optical duplicates.
        let mut is_optical = vec![false; set.len()];
        // READ_NAME_REGEX=null: Picard skips the optical search and the
        // set-size histograms along with it.
        if !self.name_parser.detects_optical() {
            push_duplicates(set, best, dup_indexes);
            return Ok(());
        }
        // Optical duplicates, split by first-of-pair orientation when a set
        // holds both FR and RF.
        let has_fr = set.iter().any(|e| e.optical_orientation == FR as i8);
        let has_rf = set.iter().any(|e| e.optical_orientation == RF as i8);
        let mut count = |members: Vec<usize>| {
            let locs: Vec<Location> = members.iter().map(|&i| set[i].loc).collect();
            // Picard passes the keeper whether or not it is in the sub-list,
            // so the clustering starts at 4 ends.
            let keeper = members.iter().position(|&i| i == best);
            let flags = optical::find_optical_duplicates_with_threshold(
                &locs,
                keeper,
                4,
                self.pixel_distance,
            );
            for (&i, &f) in members.iter().zip(&flags) {
                is_optical[i] |= f;
            }
        };
        if has_fr && has_rf {
            let mut f = Vec::new();
            let mut r = Vec::new();
            for (i, e) in set.iter().enumerate() {
                if e.optical_orientation == FR as i8 {
                    f.push(i);
                } else if e.optical_orientation == RF as i8 {
                    r.push(i);
                } else {
                    return Err(MarkdupError::UnexpectedOrientation {
                        ref_id: e.r1_ref,
                        coordinate: e.r1_coord,
                    });
                }
            }
            count(f);
            count(r);
        } else {
            count((0..set.len()).collect());
        }
        let n_optical = is_optical.iter().filter(|&&b| b).count() as u64;
        if n_optical > 0 {
            *optical_by_library.entry(set[0].library).or_default() += n_optical;
        }
        let size = set.len() as u64;
        *set_sizes.all_sets.entry(size).or_default() += 1;
        if size > n_optical {
            *set_sizes
                .non_optical_sets
                .entry(size - n_optical)
                .or_default() += 1;
        }
        if n_optical > 0 {
            *set_sizes.optical_sets.entry(n_optical + 1).or_default() += 1;
        }
        push_duplicates(set, best, dup_indexes);
        // Picard lists an optical duplicate's records once more, for its
        // DT:Z:SQ tag and REMOVE_SEQUENCING_DUPLICATES.
        if self.track_optical {
            for (i, e) in set.iter().enumerate() {
                if i != best && is_optical[i] {
                    optical_indexes.add(e.r1_index);
                    if e.r2_index != e.r1_index {
                        optical_indexes.add(e.r2_index);
                    }
                }
            }
        }
        Ok(())
    }

    /// Picard's output loop, once over the record slots in input order
    /// ([`walk_records`]); the metrics from its counts.
    pub(crate) fn output_pass(
        &mut self,
        dups: DupList,
        optical: DupList,
        optical_by_library: &HashMap<i16, u64>,
        set_sizes: SetSizeHistograms,
    ) -> Result<(Bits, Option<Bits>, MetricsReport), MarkdupError> {
        let records = self.records.len();
        let mut slots = self.records.reader()?;
        let walked = walk_records(
            records,
            || slots.next_slot(),
            dups.iter(),
            self.track_optical.then(|| optical.iter()),
            WalkCarry::default(),
        )?;
        drop(slots);
        // Libraries by index: their ids are numbered as first seen.
        let by_index: HashMap<u32, u64> = self
            .library_ids
            .iter()
            .filter_map(|(&lib, id)| optical_by_library.get(id).map(|&n| (lib, n)))
            .collect();
        let metrics = metrics_report(&self.read_groups, &walked.counts, &by_index, set_sizes);
        Ok((walked.duplicate, walked.optical, metrics))
    }
}
