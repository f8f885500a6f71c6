//! Loser tree (tournament tree) for the k-way merge of sorted sources.
//!
//! Each of the k-1 internal nodes keeps the loser of the match played there;
//! the overall winner sits above the root. Replacing the winner's head
//! replays one leaf-to-root path: ceil(log2 k) comparisons, against log2 k
//! to 2 log2 k for a binary heap, and each comparison starts with the cached
//! 8-byte key prefixes, so most never touch the sources.
//!
//! Invariant (the stability contract): sources are numbered in input order
//! (older runs first, then in-memory batches), and on equal keys the lower
//! source index wins. Every source is itself stable, so the merged stream
//! breaks ties by input order.

use std::cmp::Ordering;

use crate::batch::key_prefix;
use crate::error::Result;

/// A sorted stream the loser tree can merge. A source is positioned on its
/// first entry when handed to the tree.
pub trait MergeSource {
    /// The current key, or `None` once the source is exhausted.
    fn key(&self) -> Option<&[u8]>;
    /// The current record; only called while `key()` is `Some`.
    fn record(&self) -> &[u8];
    /// Moves to the next entry.
    fn advance(&mut self) -> Result<()>;
}

/// The merge state over `k` sources.
pub struct LoserTree<S> {
    sources: Vec<S>,
    /// Cached `key_prefix` of each source's head; `live[i]` is false once
    /// source `i` is exhausted (it then loses every match).
    prefixes: Vec<u64>,
    live: Vec<bool>,
    /// `nodes[0]` is the winner; `nodes[1..k]` are the losers of the
    /// internal nodes of a heap-shaped tree whose leaves are `k..2k`.
    nodes: Vec<usize>,
    /// Every key is exactly 8 bytes, so equal prefixes mean equal keys.
    prefix_is_key: bool,
}

impl<S: MergeSource> LoserTree<S> {
    /// Builds the tree over sources in input order.
    pub fn new(sources: Vec<S>, prefix_is_key: bool) -> Self {
        let k = sources.len();
        let mut tree = LoserTree {
            prefixes: vec![0; k],
            live: vec![false; k],
            nodes: vec![0; k.max(1)],
            sources,
            prefix_is_key,
        };
        for i in 0..k {
            tree.refresh(i);
        }
        if k > 0 {
            tree.nodes[0] = tree.build(1);
        }
        tree
    }

    /// Gives the sources back, in input order.
    pub(crate) fn into_sources(self) -> Vec<S> {
        self.sources
    }

    /// The smallest head: `(key, record)`, or `None` when all are exhausted.
    pub fn peek(&self) -> Option<(&[u8], &[u8])> {
        let winner = *self.nodes.first()?;
        let source = self.sources.get(winner)?;
        source.key().map(|key| (key, source.record()))
    }

    /// The source holding the smallest head, or `None` when all are
    /// exhausted (the same entry `peek` returns).
    pub fn winner_mut(&mut self) -> Option<&mut S> {
        let winner = *self.nodes.first()?;
        if *self.live.get(winner)? {
            self.sources.get_mut(winner)
        } else {
            None
        }
    }

    /// Advances the source that produced the current winner and replays
    /// its path to the root.
    pub fn pop(&mut self) -> Result<()> {
        let Some(&winner) = self.nodes.first() else {
            return Ok(());
        };
        if winner >= self.sources.len() || !self.live[winner] {
            return Ok(());
        }
        self.sources[winner].advance()?;
        self.refresh(winner);
        let k = self.sources.len();
        let mut champion = winner;
        let mut node = (winner + k) / 2;
        while node >= 1 {
            let resident = self.nodes[node];
            if self.less(resident, champion) {
                self.nodes[node] = champion;
                champion = resident;
            }
            node /= 2;
        }
        self.nodes[0] = champion;
        Ok(())
    }

    fn refresh(&mut self, i: usize) {
        match self.sources[i].key() {
            Some(key) => {
                self.prefixes[i] = key_prefix(key);
                self.live[i] = true;
            }
            None => self.live[i] = false,
        }
    }

    /// Plays the subtree under `node`, storing losers; returns its winner.
    fn build(&mut self, node: usize) -> usize {
        let k = self.sources.len();
        if node >= k {
            return node - k;
        }
        let left = self.build(2 * node);
        let right = self.build(2 * node + 1);
        if self.less(right, left) {
            self.nodes[node] = left;
            right
        } else {
            self.nodes[node] = right;
            left
        }
    }

    /// Whether source `a`'s head comes strictly before source `b`'s:
    /// exhausted sources come last, then key order, then source index.
    fn less(&self, a: usize, b: usize) -> bool {
        match (self.live[a], self.live[b]) {
            (false, _) => return false,
            (true, false) => return true,
            (true, true) => {}
        }
        let by_prefix = self.prefixes[a].cmp(&self.prefixes[b]);
        let by_key = if by_prefix != Ordering::Equal || self.prefix_is_key {
            by_prefix
        } else {
            // Both live, so both keys are present.
            self.sources[a].key().cmp(&self.sources[b].key())
        };
        match by_key {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => a < b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A source over an in-memory sorted list of (key, record) pairs.
    struct ListSource {
        items: Vec<(Vec<u8>, Vec<u8>)>,
        pos: usize,
    }

    impl MergeSource for ListSource {
        fn key(&self) -> Option<&[u8]> {
            self.items.get(self.pos).map(|(k, _)| k.as_slice())
        }
        fn record(&self) -> &[u8] {
            &self.items[self.pos].1
        }
        fn advance(&mut self) -> Result<()> {
            self.pos += 1;
            Ok(())
        }
    }

    fn merge_all(lists: Vec<Vec<(Vec<u8>, Vec<u8>)>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let sources = lists
            .into_iter()
            .map(|items| ListSource { items, pos: 0 })
            .collect();
        let mut tree = LoserTree::new(sources, false);
        let mut out = Vec::new();
        while let Some((k, r)) = tree.peek() {
            out.push((k.to_vec(), r.to_vec()));
            tree.pop().expect("list sources never fail");
        }
        out
    }

    #[test]
    fn no_sources_and_empty_sources() {
        assert!(merge_all(vec![]).is_empty());
        assert!(merge_all(vec![vec![], vec![]]).is_empty());
    }

    #[test]
    fn ties_go_to_the_lower_source() {
        let item = |k: &str, r: &str| (k.as_bytes().to_vec(), r.as_bytes().to_vec());
        let lists = vec![
            vec![item("b", "s0-b"), item("c", "s0-c")],
            vec![item("a", "s1-a"), item("b", "s1-b")],
            vec![item("b", "s2-b"), item("b", "s2-b2")],
        ];
        let got: Vec<Vec<u8>> = merge_all(lists).into_iter().map(|(_, r)| r).collect();
        let want = ["s1-a", "s0-b", "s1-b", "s2-b", "s2-b2", "s0-c"];
        assert_eq!(got, want.map(|s| s.as_bytes().to_vec()));
    }

    proptest! {
        /// Splitting a stably sorted input into consecutive sources, sorting
        /// each and merging them gives the stable sort of the whole.
        #[test]
        fn merge_of_consecutive_slices_is_the_stable_sort(
            keys in prop::collection::vec(prop::collection::vec(0u8..3, 0..10), 0..300),
            cuts in prop::collection::vec(0usize..300, 0..12),
        ) {
            let input: Vec<(Vec<u8>, Vec<u8>)> = keys
                .into_iter()
                .enumerate()
                .map(|(i, k)| (k, (i as u32).to_be_bytes().to_vec()))
                .collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (input.len() + 1)).collect();
            cuts.push(0);
            cuts.push(input.len());
            cuts.sort_unstable();
            let lists: Vec<_> = cuts
                .windows(2)
                .map(|w| {
                    let mut part = input[w[0]..w[1]].to_vec();
                    part.sort_by(|a, b| a.0.cmp(&b.0));
                    part
                })
                .collect();
            let mut want = input.clone();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            prop_assert_eq!(merge_all(lists), want);
        }
    }
}
