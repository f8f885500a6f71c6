//! `alnsort sort --markdup IN1 IN2 ...`: Picard MarkDuplicates' answer on
//! several inputs (several `I=`).
//!
//! Picard 3.4.0 reads several inputs through htsjdk's
//! `MergingSamRecordIterator`, ordered by the first header's sort order
//! (`ASSUME_SORT_ORDER=queryname` for name-grouped input; coordinate for
//! coordinate-sorted input): a priority queue over the inputs' next
//! records compared by `SAMRecordQueryNameComparator` or
//! `SAMRecordCoordinateComparator`. That order, not the order of the
//! inputs given, is the file order its tie-breaks (the representative of
//! equal scores, `read1IndexInFile`) follow: with two inputs holding `zzz`
//! and `aaa` as equal-scoring duplicates, Picard keeps `aaa` whichever
//! input comes first (checked against Picard 3.4.0 by
//! `tests/markdup/test_sort_markdup_inputs.py`). htsjdk's header merge
//! keeps one of several identical `@RG` lines, so their reads are one read
//! group (optical duplicates are found across those inputs).
//!
//! The sort itself keeps `alnsort sort IN1 IN2 ...`'s record order (the
//! inputs merged as samtools merges them), so the decision is a pass of its
//! own over the inputs before the sort's: [`decide`] reads them merged in
//! Picard's order ([`crate::io::merged::MergedStream::for_each_by`]) into a
//! [`Marker`], then renumbers the decisions from that order to ordinals in
//! input order (input `i`'s record `j` is `base[i] + j`), the ordinals the
//! sort's feed appends to each record ([`crate::io::merged::feed_sorter`]). The
//! pass keeps 2 bytes per record (the input each record of Picard's order
//! came from) beside the marker's own state; the inputs are read twice.
//!
//! Refused by name rather than answered differently from Picard: inputs
//! whose `@SQ` lines differ (htsjdk and samtools merge dictionaries
//! differently), and inputs of which some say `SO:coordinate` and others
//! do not (Picard takes the first header's order for all of them).

use crate::config::Config;
use crate::error::{bail, Context, Result};
use crate::io::cleanup::{Debris, TempDir};
use crate::io::input;
use crate::io::merged::MergePlan;
use crate::markdup::decisions::Decisions;
use crate::markdup::marker::Marker;
use crate::options::markdup::MarkdupConfig;
use alnsort_bam::header_merge::MergeOptions;
use alnsort_bam::keys::SortOrder;
use alnsort_markdup::extract::BatchEnds;
use alnsort_markdup::htsjdk::picard_cmp;
use alnsort_markdup::several::SeveralInputs;
use std::sync::Arc;

/// Records handed to the marker at a time.
const ENDS_BATCH: usize = 4096;

/// What [`decide`] found: the decisions over input-order ordinals and each
/// input's record count.
pub struct Decided {
    pub decisions: Decisions,
    pub records: Vec<u64>,
}

/// The plan of Picard's merge of several inputs (`decide` here,
/// `alnsort MarkDuplicates` with several `I=`): the inputs opened and
/// interleaved by coordinate keys, unchecked, with their headers merged by
/// `opts`; [`crate::io::merged::MergedStream::for_each_by`] with [`picard_cmp`] then
/// takes the records in Picard's order.
pub(crate) fn picard_plan<'a>(
    paths: &'a [String],
    cfg: &'a Config,
    opts: MergeOptions,
) -> MergePlan<'a> {
    MergePlan {
        paths,
        opts,
        order: &SortOrder::Coordinate,
        sort_order: None,
        region: None,
        unknown_reference: cfg.unknown_reference,
        refs: &cfg.refs,
        check_sorted: false,
    }
}

/// Decides duplicates on `cfg.inputs` together as Picard does with one
/// `I=` per input; the marker's state is kept within `budget` (as for one
/// input), spilling into a temporary directory of its own.
pub fn decide(
    cfg: &Config,
    md: &MarkdupConfig,
    budget: (usize, Option<u64>),
    merge_opts: MergeOptions,
    pool: &Arc<rayon::ThreadPool>,
    debris: &Debris,
) -> Result<Decided> {
    let paths = &cfg.inputs;
    if paths.len() > u16::MAX as usize {
        bail!(Refused, "--markdup takes at most {} inputs", u16::MAX);
    }
    // The inputs' own headers: their semantics, dictionaries and read
    // groups.
    let mut headers = Vec::with_capacity(paths.len());
    for p in paths {
        let inp = input::open_with_refs(p, Arc::clone(pool), &cfg.refs)?;
        headers.push(inp.header.clone());
    }
    let several = SeveralInputs::new(paths, &headers, merge_opts)?;
    let (order, aliases) = (several.order, several.aliases);
    drop(headers);
    let (m, _) = crate::io::merged::merged_inputs(&picard_plan(paths, cfg, merge_opts), pool)?;
    let name = format!("{} (merged in Picard's order)", paths.join(", "));
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort-markdup", debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    let mut marker = Marker::with_order(&m.header, md, &name, budget, Some(tmp.path()), order);
    marker.set_pool(Arc::clone(pool));
    marker.check_inputs_apart(paths);
    for (id, same_as) in &aliases {
        marker.alias_read_group(id, same_as);
    }
    let spec = marker.ends_spec();
    let mut ends = BatchEnds::new(spec.clone());
    // The input of each record, in Picard's order (`batch`: of the ends
    // not pushed yet).
    let mut from: Vec<u16> = Vec::new();
    let mut batch = 0usize;
    let mut counts = vec![0u64; paths.len()];
    m.for_each_by(picard_cmp(order), |input, rec| {
        ends.add_fields(rec);
        from.push(input as u16);
        counts[input] += 1;
        if ends.len() >= ENDS_BATCH {
            marker.push_from(&ends, &from[batch..])?;
            batch = from.len();
            ends = BatchEnds::new(spec.clone());
        }
        Ok(())
    })?;
    marker.push_from(&ends, &from[batch..])?;
    let decisions = marker.finish()?;
    drop(tmp);
    // Record p of Picard's order is record `next[i]` of its input i.
    let mut next: Vec<u64> = counts
        .iter()
        .scan(0u64, |base, &c| {
            let b = *base;
            *base += c;
            Some(b)
        })
        .collect();
    let decisions = decisions.renumbered(from.iter().map(|&i| {
        let o = next[i as usize];
        next[i as usize] += 1;
        o
    }))?;
    Ok(Decided {
        decisions,
        records: counts,
    })
}
