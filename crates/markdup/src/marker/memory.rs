//! The marker's memory: what its state holds, the limit, and the ends and
//! mated keys sorted into spill runs beyond it.

use crate::ends::{partition, End, FragKey, MatedFrags, MIN_ENDS};
use crate::{InputOrder, MarkDuplicates, MarkdupError, SpillStats};

impl MarkDuplicates {
    /// Bytes the decision's bitsets will take (4 bits per record).
    pub(crate) fn bitset_bytes(&self) -> usize {
        (self.records.len() / 2) as usize
    }

    /// Bytes held for the records pushed so far (their slots, read ends,
    /// mates waiting for their other half, and the bitsets the decision
    /// will need), for a caller that keeps them within a memory budget.
    pub fn memory_bytes(&self) -> usize {
        self.records.memory_bytes()
            + self.ends.capacity() * std::mem::size_of::<End>()
            + self.mated.memory_bytes()
            + self.pending_bytes()
            + self.bitset_bytes()
    }

    /// What went to disk so far.
    pub fn spill_stats(&self) -> SpillStats {
        self.spill
            .as_ref()
            .map_or_else(SpillStats::default, |s| SpillStats {
                runs: s.runs_written,
                bytes: s.bytes_written,
                ends: s.ends_written,
                waiting: s.waiting.written,
            })
    }

    /// Ends the limit leaves room for now, beside the other parts and a
    /// sixteenth of the limit left for their growth (without it, every
    /// record would push the state over the limit once the ends' buffer
    /// is full, and each would spill a handful of ends).
    pub(crate) fn ends_room(&self, limit: usize) -> usize {
        let other = self.records.memory_bytes()
            + self.mated.memory_bytes()
            + self.pending_bytes()
            + self.bitset_bytes();
        limit.saturating_sub(other).saturating_sub(limit / 16) / std::mem::size_of::<End>()
    }

    /// Keeps [`MarkDuplicates::memory_bytes`] within the limit: the ends
    /// go to a run when the state grows beyond it, and their buffer is cut
    /// to what is left beside the other parts.
    pub(crate) fn enforce_limit(&mut self) -> Result<(), MarkdupError> {
        let Some(limit) = self.spill.as_ref().map(|s| s.limit) else {
            return Ok(());
        };
        if self.memory_bytes() <= limit {
            return Ok(());
        }
        let hard = self.spill.as_ref().is_some_and(|s| s.hard);
        if !hard && self.ends_room(limit) < MIN_ENDS {
            // Waiting mates hold the limit: the ends keep a buffer of
            // MIN_ENDS, spilled when full (in add_end).
            return Ok(());
        }
        let coordinate = hard && self.order == InputOrder::Coordinate;
        if coordinate
            && self.pending_bytes() > limit / 4
            && self.pending.len() >= 2 * self.waiting_floor
        {
            self.spill_waiting()?;
            if self.memory_bytes() <= limit {
                return Ok(());
            }
        }
        if !self.ends.is_empty() || !self.mated.is_empty() {
            self.spill_ends()?;
        }
        let mut room = self.ends_room(limit);
        if room < MIN_ENDS && coordinate && self.pending.len() > self.waiting_floor {
            self.spill_waiting()?;
            room = self.ends_room(limit);
        }
        if room < MIN_ENDS {
            return Err(MarkdupError::WaitingMatesBeyondLimit {
                waiting: self.waiting(),
                waiting_bytes: self.pending_bytes(),
                min_bytes: MIN_ENDS * std::mem::size_of::<End>(),
                limit,
            });
        }
        if self.ends.capacity() > room {
            self.ends.shrink_to(room);
        }
        Ok(())
    }

    pub(crate) fn add_end(&mut self, e: End) -> Result<(), MarkdupError> {
        if let Some((limit, hard)) = self.spill.as_ref().map(|s| (s.limit, s.hard)) {
            if self.ends.len() == self.ends.capacity() {
                // Without a hard limit, waiting mates may take it all and
                // the ends keep MIN_ENDS.
                let room_now = |md: &Self| {
                    let room = md.ends_room(limit);
                    if hard {
                        room
                    } else {
                        room.max(MIN_ENDS)
                    }
                };
                let mut room = room_now(self);
                if self.ends.len() >= room {
                    self.spill_ends()?;
                    self.enforce_limit()?;
                    room = room_now(self);
                }
                let want = (self.ends.capacity() * 2)
                    .max(1024)
                    .min(room.max(self.ends.len() + 1));
                self.ends.reserve_exact(want - self.ends.len());
            }
        }
        self.ends.push(e);
        Ok(())
    }

    /// Keeps the fragment end `e` of a record whose mate is mapped, by its
    /// key ([`MatedFrags`]); with a memory limit, the ends and keys go to
    /// runs first when a key buffer would grow beyond it.
    pub(crate) fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError> {
        self.add_mated_key(e.frag_key())
    }

    /// [`MarkDuplicates::add_mated`] of the end's key alone.
    pub(crate) fn add_mated_key(&mut self, e: FragKey) -> Result<(), MarkdupError> {
        if let Some(limit) = self.spill.as_ref().map(|s| s.limit) {
            if self.mated.is_full_for(e) {
                // What the limit leaves beside the other parts and the
                // ends' buffer (as the ends' own room is counted).
                let free = |md: &Self| {
                    md.ends_room(limit).saturating_sub(md.ends.capacity())
                        * std::mem::size_of::<End>()
                };
                let min_bytes = MIN_ENDS * std::mem::size_of::<FragKey>();
                // As in `enforce_limit`: the mates waiting for a later
                // reference go to their files first when they hold a good
                // part of the limit, then the ends and keys to runs.
                if free(self) < min_bytes && self.ends.len() < self.ends.capacity() {
                    // The ends' unused room first.
                    self.ends.shrink_to_fit();
                }
                let hard = self.spill.as_ref().is_some_and(|s| s.hard);
                if free(self) < min_bytes
                    && hard
                    && self.order == InputOrder::Coordinate
                    && self.pending_bytes() > limit / 4
                    && self.pending.len() >= 2 * self.waiting_floor
                {
                    self.spill_waiting()?;
                }
                if free(self) < min_bytes {
                    self.spill_ends()?;
                    self.enforce_limit()?;
                }
                if self.mated.is_full_for(e) {
                    self.mated.grow_for(e, free(self).max(min_bytes));
                }
            }
        }
        self.mated.push_key(e);
        Ok(())
    }

    /// Sorts the ends in memory: pair ends first, each kind in
    /// [`End::total_cmp`] order; returns where the fragment ends start.
    /// `parallel`: on the pool, if there is one.
    pub(crate) fn sort_ends(&mut self, parallel: bool) -> usize {
        let k = partition(&mut self.ends, |e| e.pair);
        let pool = self.pool.as_ref();
        let (pairs, frags) = self.ends.split_at_mut(k);
        Self::sort_slice(pool, pairs, parallel);
        Self::sort_slice(pool, frags, parallel);
        k
    }

    /// Sorts ends in [`End::total_cmp`] order (on `pool` when `parallel`).
    pub(crate) fn sort_slice(
        pool: Option<&std::sync::Arc<rayon::ThreadPool>>,
        ends: &mut [End],
        parallel: bool,
    ) {
        let order = |a: &End, b: &End| a.total_cmp(b);
        match pool.filter(|_| parallel) {
            Some(pool) => {
                use rayon::slice::ParallelSliceMut;
                pool.install(|| ends.par_sort_unstable_by(order));
            }
            None => ends.sort_unstable_by(order),
        }
    }

    pub(crate) fn spill_ends(&mut self) -> Result<(), MarkdupError> {
        // (While the input is read, the pool is busy reading it.)
        let k = self.sort_ends(false);
        let spill = self.spill.as_mut().expect("spill configured");
        spill.add_run(true, &self.ends[..k])?;
        spill.add_run(false, &self.ends[k..])?;
        self.ends.clear();
        self.spill_mated()
    }

    /// Writes the mated fragments' keys as fragment ends
    /// ([`MatedFrags::end`]) into fragment runs, as many at a time as the
    /// ends' buffer holds (empty: [`MarkDuplicates::spill_ends`] has just
    /// written its ends), and empties their buffers.
    pub(crate) fn spill_mated(&mut self) -> Result<(), MarkdupError> {
        debug_assert!(self.ends.is_empty(), "spill_mated fills the ends' buffer");
        let chunk = self.ends.capacity().max(MIN_ENDS);
        let mut keys = self.mated.keys();
        let spill = self.spill.as_mut().expect("spill configured");
        loop {
            self.ends
                .extend(keys.by_ref().take(chunk).map(MatedFrags::end));
            if self.ends.is_empty() {
                break;
            }
            Self::sort_slice(None, &mut self.ends, false);
            spill.add_run(false, &self.ends)?;
            self.ends.clear();
        }
        drop(keys);
        self.mated.clear();
        Ok(())
    }
}
