//! Step 2, templates across splits: where a template that began in an
//! earlier split starts ([`continued_templates`]), applied to ends and
//! halves as [`Fixups`].

use super::collect::Boundary;
use super::merge_order::{MergeKey, MergeOrder};
#[cfg(doc)]
use super::{MateJoin, MergeBoundary};
use crate::ends::End;

/// For each split (in input order), where its first template began when
/// that was in an earlier split (name-grouped input: the names meet at the
/// boundary; a split of one template passes its start on); else `None`
/// (always in coordinate order, whose boundaries have no last name: every
/// record is a template).
pub fn continued_templates(bounds: &[Boundary]) -> Vec<Option<i64>> {
    let mut out = vec![None; bounds.len()];
    // The last name seen and where its template began.
    let mut last: Option<(&[u8], i64)> = None;
    for (b, cont) in bounds.iter().zip(&mut out) {
        let (Some(first), Some(last_name)) = (&b.first_name, &b.last_name) else {
            continue;
        };
        *cont = last.filter(|(n, _)| *n == first.as_slice()).map(|l| l.1);
        let start = match *cont {
            Some(s) if b.last_template == b.first => s,
            _ => b.last_template,
        };
        last = Some((last_name, start));
    }
    out
}

/// The template indexes to replace: the first record of a split whose
/// first template began earlier stands for that template's first record.
/// Also whether the input is grouped by name (the boundaries have last
/// names), where the join checks that a name's templates are not
/// scattered ([`MateJoin::finish`]).
#[derive(Clone, Debug, Default)]
pub struct Fixups {
    pub(crate) fixes: Vec<(i64, i64)>,
    pub(crate) grouped: bool,
    /// The splits keep Picard's merge order (every boundary has its
    /// [`MergeBoundary`]): their inputs and priors.
    pub(crate) merge: Option<MergeOrder>,
}

impl Fixups {
    /// From [`continued_templates`] and the splits' first ordinals.
    pub fn new(bounds: &[Boundary], continued: &[Option<i64>]) -> Fixups {
        let mut v: Vec<(i64, i64)> = bounds
            .iter()
            .zip(continued)
            .filter_map(|(b, c)| c.map(|c| (b.first, c)))
            .collect();
        v.sort_unstable();
        let merge: Option<Vec<(usize, Option<&MergeKey>)>> = bounds
            .iter()
            .map(|b| {
                b.merge
                    .as_ref()
                    .map(|m| (m.input as usize, m.largest.as_ref()))
            })
            .collect();
        Fixups {
            fixes: v,
            grouped: bounds.iter().any(|b| b.last_name.is_some()),
            merge: merge.filter(|m| !m.is_empty()).map(|m| MergeOrder::new(&m)),
        }
    }

    /// The splits' inputs and priors when they keep Picard's merge order.
    pub fn merge_order(&self) -> Option<&MergeOrder> {
        self.merge.as_ref()
    }

    pub(crate) fn apply(&self, i: i64) -> i64 {
        if self.fixes.is_empty() {
            return i;
        }
        match self.fixes.binary_search_by_key(&i, |f| f.0) {
            Ok(k) => self.fixes[k].1,
            Err(_) => i,
        }
    }

    pub(crate) fn apply_end(&self, e: &mut End) {
        e.r1_index = self.apply(e.r1_index);
        if e.r2_index != -1 {
            e.r2_index = self.apply(e.r2_index);
        }
    }
}
