//! Duplicate sets: sorted ends cut into sets, the kept end chosen and the
//! duplicate indexes listed ([`DupList`]), on one thread or on a pool.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use crate::ends::End;
use crate::{MarkdupError, SetSizeHistograms};

/// The duplicate record indexes as Picard lists them (a multiset: an index
/// can be listed more than once, which matters to its output loop): one
/// bit per record, and the rare repeated listings apart. The bits are
/// atomic so that walks on the pool can add to one list
/// ([`DupList::shared`]).
pub(crate) struct DupList {
    pub(crate) words: Vec<AtomicU64>,
    pub(crate) len: u64,
    pub(crate) repeats: Vec<u64>,
}

/// Where a walk over duplicate sets lists the duplicate indexes.
pub(crate) trait DupSink {
    fn add(&mut self, index: i64);
}

impl DupList {
    pub(crate) fn new(records: u64) -> Self {
        DupList {
            words: (0..records.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            len: records,
            repeats: Vec::new(),
        }
    }

    /// A sink that adds to this list from a pool job; its repeated
    /// listings are kept apart, for the caller to add.
    pub(crate) fn shared(&self) -> SharedDups<'_> {
        SharedDups {
            list: self,
            repeats: Vec::new(),
        }
    }

    /// Sets bit `i`; whether it was clear.
    pub(crate) fn set_shared(&self, i: u64) -> bool {
        assert!(i < self.len, "index {i} beyond {} records", self.len);
        let bit = 1u64 << (i % 64);
        self.words[(i / 64) as usize].fetch_or(bit, AtomicOrdering::Relaxed) & bit == 0
    }

    /// The indexes in ascending order, each as often as it was listed.
    pub(crate) fn iter(mut self) -> impl Iterator<Item = u64> {
        self.repeats.sort_unstable();
        let mut repeats = self.repeats.into_iter().peekable();
        let mut ones = self
            .words
            .into_iter()
            .map(AtomicU64::into_inner)
            .enumerate()
            .flat_map(|(wi, mut w)| {
                std::iter::from_fn(move || {
                    (w != 0).then(|| {
                        let t = w.trailing_zeros() as u64;
                        w &= w - 1;
                        wi as u64 * 64 + t
                    })
                })
            });
        let mut last: Option<u64> = None;
        std::iter::from_fn(move || {
            if let Some(l) = last {
                if repeats.next_if_eq(&l).is_some() {
                    return Some(l);
                }
            }
            last = ones.next();
            last
        })
    }
}

impl<T: DupSink + ?Sized> DupSink for &mut T {
    fn add(&mut self, index: i64) {
        (**self).add(index)
    }
}

impl DupSink for DupList {
    fn add(&mut self, index: i64) {
        let i = index as u64;
        if !self.set_shared(i) {
            self.repeats.push(i);
        }
    }
}

/// A pool job's view of a shared [`DupList`].
pub(crate) struct SharedDups<'a> {
    pub(crate) list: &'a DupList,
    pub(crate) repeats: Vec<u64>,
}

impl DupSink for SharedDups<'_> {
    fn add(&mut self, index: i64) {
        let i = index as u64;
        if !self.list.set_shared(i) {
            self.repeats.push(i);
        }
    }
}

/// What the walks over duplicate sets add up besides the index lists.
pub(crate) struct Found<'a> {
    pub(crate) dups: &'a mut DupList,
    pub(crate) optical: &'a mut DupList,
    pub(crate) set_sizes: &'a mut SetSizeHistograms,
    pub(crate) optical_by_library: &'a mut HashMap<i16, u64>,
}

impl Found<'_> {
    /// Adds one stretch's counts (`singles`: pair sets of one end).
    pub(crate) fn add_counts(
        &mut self,
        sizes: SetSizeHistograms,
        singles: u64,
        by_library: HashMap<i16, u64>,
    ) {
        self.set_sizes.add(sizes, singles);
        for (lib, n) in by_library {
            *self.optical_by_library.entry(lib).or_default() += n;
        }
    }
}

/// One walk's findings over a stretch of pair sets: the sinks of the
/// duplicate and optical indexes, and its counts.
pub(crate) struct PartFound<S> {
    pub(crate) sink: (S, S),
    pub(crate) set_sizes: SetSizeHistograms,
    /// Sets of one pair end.
    pub(crate) singles: u64,
    pub(crate) optical_by_library: HashMap<i16, u64>,
}

impl<S> PartFound<S> {
    pub(crate) fn new(sink: (S, S)) -> Self {
        PartFound {
            sink,
            set_sizes: SetSizeHistograms::default(),
            singles: 0,
            optical_by_library: HashMap::new(),
        }
    }
}

/// About `parts` ranges of `ends` (sorted) that cut no duplicate set.
pub(crate) fn set_stretches(
    ends: &[End],
    parts: usize,
    compare_read2: bool,
) -> Vec<std::ops::Range<usize>> {
    let n = ends.len();
    let mut out = Vec::new();
    let mut start = 0;
    for p in 1..=parts {
        let mut cut = (n * p / parts).max(start);
        while cut > 0 && cut < n && ends[cut - 1].same_set(&ends[cut], compare_read2) {
            cut += 1;
        }
        if cut > start {
            out.push(start..cut);
            start = cut;
        }
    }
    out
}

/// Walks the fragment ends' duplicate sets (in [`End::total_cmp`] order,
/// from `next`), marking each set's duplicates.
pub(crate) fn walk_frag_sets<S: DupSink>(
    next: impl FnMut() -> Result<Option<End>, MarkdupError>,
    dups: &mut S,
) -> Result<(), MarkdupError> {
    for_each_set(next, false, |set| {
        let contains_pairs = set.iter().any(End::is_paired);
        let contains_frags = set.iter().any(|e| !e.is_paired());
        // Picard skips sets of one and sets of pairs only, except the
        // last set, which it always examines (to the same effect).
        if set.len() > 1 && contains_frags {
            mark_fragments(set, contains_pairs, dups);
        }
        Ok(())
    })
}

/// Cuts ends in [`End::total_cmp`] order (from `next`) into duplicate sets
/// (runs of [`End::same_set`] with `pairs`) and hands each to `each`: the
/// one grouping loop of the pair and fragment walks.
pub(crate) fn for_each_set(
    mut next: impl FnMut() -> Result<Option<End>, MarkdupError>,
    pairs: bool,
    mut each: impl FnMut(&[End]) -> Result<(), MarkdupError>,
) -> Result<(), MarkdupError> {
    let mut set: Vec<End> = Vec::new();
    let mut cur = next()?;
    while let Some(first) = cur {
        set.clear();
        set.push(first);
        cur = next()?;
        while let Some(e) = cur.filter(|e| first.same_set(e, pairs)) {
            set.push(e);
            cur = next()?;
        }
        each(&set)?;
    }
    Ok(())
}

/// The first end with the highest score (Picard's `end.score > maxScore ||
/// best == null`).
pub(crate) fn best_index(set: &[End]) -> usize {
    let mut best = 0;
    for (i, e) in set.iter().enumerate().skip(1) {
        if e.score > set[best].score {
            best = i;
        }
    }
    best
}

/// The record indexes of every end of a pair set but the kept one.
pub(crate) fn push_duplicates<S: DupSink>(set: &[End], best: usize, dup_indexes: &mut S) {
    for (i, e) in set.iter().enumerate() {
        if i != best {
            dup_indexes.add(e.r1_index);
            if e.r2_index != e.r1_index {
                dup_indexes.add(e.r2_index);
            }
        }
    }
}

pub(crate) fn mark_fragments<S: DupSink>(set: &[End], contains_pairs: bool, dup_indexes: &mut S) {
    if contains_pairs {
        for e in set.iter().filter(|e| !e.is_paired()) {
            dup_indexes.add(e.r1_index);
        }
    } else {
        let best = best_index(set);
        for (_, e) in set.iter().enumerate().filter(|&(i, _)| i != best) {
            dup_indexes.add(e.r1_index);
        }
    }
}
