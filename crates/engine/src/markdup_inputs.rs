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
//! Picard's order ([`crate::merge::MergedInputs::for_each_by`]) into a
//! [`Marker`], then renumbers the decisions from that order to ordinals in
//! input order (input `i`'s record `j` is `base[i] + j`), the ordinals the
//! sort's feed appends to each record ([`crate::merge::feed_sorter`]). The
//! pass keeps 2 bytes per record (the input each record of Picard's order
//! came from) beside the marker's own state; the inputs are read twice.
//!
//! Refused by name rather than answered differently from Picard: inputs
//! whose `@SQ` lines differ (htsjdk and samtools merge dictionaries
//! differently), and inputs of which some say `SO:coordinate` and others
//! do not (Picard takes the first header's order for all of them).

use crate::cleanup::{Debris, TempDir};
use crate::config::Config;
use crate::error::{bail, Context, Result};
use crate::input;
use crate::markdup::{BatchEnds, Decisions, MarkdupConfig, Marker};
use crate::merge::{self, MergePlan};
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::{HeaderMerger, MergeOptions};
use alnsort_bam::keys::SortOrder;
use alnsort_bam::RecordRef;
use alnsort_markdup::InputOrder;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// Records handed to the marker at a time.
const ENDS_BATCH: usize = 4096;

/// What [`decide`] found: the decisions over input-order ordinals and each
/// input's record count.
pub struct Decided {
    pub decisions: Decisions,
    pub records: Vec<u64>,
}

/// htsjdk's `SAMRecordQueryNameComparator.compare` on two framed BAM
/// records: names as Java strings (`String.compareTo`: byte order for the
/// ASCII that SAM names are), then paired before unpaired, first of pair
/// before second, forward before reverse, primary before secondary, then
/// before supplementary, then the `HI` tag (absent first).
pub fn htsjdk_queryname_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (RecordRef::with_block_size(a), RecordRef::with_block_size(b));
    let c = a.read_name().cmp(b.read_name());
    if c != Ordering::Equal {
        return c;
    }
    use alnsort_markdup::flags;
    let (fa, fb) = (a.flag(), b.flag());
    let (pa, pb) = (fa & flags::PAIRED != 0, fb & flags::PAIRED != 0);
    let first = |f: u16| f & flags::READ1 != 0;
    let second = |f: u16| f & flags::READ2 != 0;
    let paired = match (pa, pb) {
        (false, false) => Ordering::Equal,
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (true, true) if first(fa) && second(fb) => Ordering::Less,
        (true, true) if second(fa) && first(fb) => Ordering::Greater,
        (true, true) => Ordering::Equal,
    };
    if paired != Ordering::Equal {
        return paired;
    }
    let bit = |f: u16, m: u16| f & m != 0;
    for m in [flags::REVERSE, flags::SECONDARY, flags::SUPPLEMENTARY] {
        if bit(fa, m) != bit(fb, m) {
            return if bit(fa, m) {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
    }
    let hi = |r: &RecordRef<'_>| {
        r.aux_get(*b"HI")
            .and_then(|(ty, v)| alnsort_bam::record::aux_int(ty, v))
    };
    match (hi(&a), hi(&b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => Ordering::Equal,
    }
}

/// htsjdk's `SAMRecordCoordinateComparator.compare`: reference (no
/// reference last), 1-based start, forward before reverse, then name,
/// flags, mapping quality, mate reference, mate start, insert size.
pub fn htsjdk_coordinate_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (RecordRef::with_block_size(a), RecordRef::with_block_size(b));
    let (ra, rb) = (a.ref_id(), b.ref_id());
    let c = match (ra == -1, rb == -1) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => ra.cmp(&rb).then(a.pos().cmp(&b.pos())),
    };
    if c != Ordering::Equal {
        return c;
    }
    use alnsort_markdup::flags;
    let (fa, fb) = (a.flag(), b.flag());
    if (fa & flags::REVERSE) != (fb & flags::REVERSE) {
        return if fa & flags::REVERSE != 0 {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    a.read_name()
        .cmp(b.read_name())
        .then(fa.cmp(&fb))
        .then(a.mapq().cmp(&b.mapq()))
        .then(a.next_ref_id().cmp(&b.next_ref_id()))
        .then(a.next_pos().cmp(&b.next_pos()))
        .then(a.tlen().cmp(&b.tlen()))
}

/// The `@HD` sort order of a header says coordinate.
fn says_coordinate(h: &Header) -> bool {
    h.lines()
        .iter()
        .find(|l| l.starts_with(b"@HD"))
        .is_some_and(|l| l.split(|&b| b == b'\t').any(|f| f == b"SO:coordinate"))
}

/// The `@RG` lines of a header as (ID, the line's fields sorted: the
/// read group's identity as htsjdk compares two of them).
fn read_groups(h: &Header) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
    h.lines()
        .iter()
        .filter(|l| l.starts_with(b"@RG\t"))
        .filter_map(|l| {
            let mut fields: Vec<Vec<u8>> = l
                .split(|&b| b == b'\t')
                .skip(1)
                .map(<[u8]>::to_vec)
                .collect();
            let id = fields.iter().find(|f| f.starts_with(b"ID:"))?[3..].to_vec();
            fields.sort();
            Some((id, fields))
        })
        .collect()
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
    let coordinate: Vec<bool> = headers.iter().map(says_coordinate).collect();
    let order = if coordinate.iter().all(|&c| c) {
        InputOrder::Coordinate
    } else if coordinate.iter().all(|&c| !c) {
        InputOrder::Queryname
    } else {
        let (c, n): (Vec<_>, Vec<_>) = paths.iter().zip(&coordinate).partition(|(_, &c)| c);
        bail!(Refused,
            "--markdup with several inputs reads them all with one of Picard's semantics, but {} says \
             SO:coordinate and {} does not: give inputs that are all coordinate-sorted or all grouped by name",
            c[0].0,
            n[0].0
        );
    };
    let dict = |h: &Header| -> Vec<(Vec<u8>, u64)> {
        h.refs().iter().map(|r| (r.name.clone(), r.len)).collect()
    };
    let first = dict(&headers[0]);
    for (p, h) in paths.iter().zip(&headers).skip(1) {
        if dict(h) != first {
            bail!(Refused,
                "--markdup with several inputs needs the same @SQ lines, in the same order, in every input \
                 (Picard's header merge and samtools' order references differently otherwise), but those of {p} \
                 differ from those of {}",
                paths[0]
            );
        }
    }
    // Read groups: an @RG line an earlier input has too (same fields) is
    // one read group, as in htsjdk's merged header; samtools' merge (the
    // records' RG tags here) renamed it.
    let mut merger = HeaderMerger::new(merge_opts);
    let mut aliases = Vec::new();
    let mut seen: HashMap<Vec<Vec<u8>>, Vec<u8>> = HashMap::new();
    for (p, h) in paths.iter().zip(&headers) {
        let t = merger
            .add(h)
            .with_context(|| format!("{p}: merging its header"))?;
        for (id, fields) in read_groups(h) {
            let merged = t.read_group(&id).to_vec();
            match seen.get(&fields) {
                Some(first) if *first != merged => aliases.push((merged, first.clone())),
                Some(_) => {}
                None => {
                    seen.insert(fields, merged);
                }
            }
        }
    }
    drop(headers);
    let plan = MergePlan {
        paths,
        opts: merge_opts,
        order: &SortOrder::Coordinate,
        sort_order: None,
        region: None,
        unknown_reference: cfg.unknown_reference,
        refs: &cfg.refs,
        check_sorted: false,
    };
    let (m, _) = merge::merged_inputs(&plan, pool)?;
    let name = format!("{} (merged in Picard's order)", paths.join(", "));
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort-markdup", debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    let mut marker = Marker::with_order(&m.header, md, &name, budget, Some(tmp.path()), order);
    marker.set_pool(Arc::clone(pool));
    for (id, same_as) in &aliases {
        marker.alias_read_group(id, same_as);
    }
    let spec = marker.ends_spec();
    let mut ends = BatchEnds::new(spec.clone());
    let mut from: Vec<u16> = Vec::new();
    let mut counts = vec![0u64; paths.len()];
    let cmp = match order {
        InputOrder::Queryname => htsjdk_queryname_cmp,
        InputOrder::Coordinate => htsjdk_coordinate_cmp,
    };
    m.for_each_by(cmp, |input, rec| {
        ends.add_fields(rec);
        from.push(input as u16);
        counts[input] += 1;
        if ends.len() >= ENDS_BATCH {
            marker.push(&ends)?;
            ends = BatchEnds::new(spec.clone());
        }
        Ok(())
    })?;
    marker.push(&ends)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &[u8], flag: u16, ref_id: i32, pos: i32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&ref_id.to_le_bytes());
        body.extend_from_slice(&pos.to_le_bytes());
        body.push(name.len() as u8 + 1);
        body.push(0); // mapq
        body.extend_from_slice(&4680u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes()); // n_cigar
        body.extend_from_slice(&flag.to_le_bytes());
        body.extend_from_slice(&0i32.to_le_bytes()); // l_seq
        body.extend_from_slice(&(-1i32).to_le_bytes());
        body.extend_from_slice(&(-1i32).to_le_bytes());
        body.extend_from_slice(&0i32.to_le_bytes());
        body.extend_from_slice(name);
        body.push(0);
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend(body);
        out
    }

    #[test]
    fn queryname_comparator_is_htsjdks() {
        use Ordering::*;
        // Names by bytes (not samtools' natural order: "r10" < "r9").
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"r10", 0, 0, 0), &rec(b"r9", 0, 0, 0)),
            Less
        );
        // Same name: first of pair before second, paired before unpaired.
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0x41, 0, 0), &rec(b"a", 0x81, 0, 0)),
            Less
        );
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0, 0, 0), &rec(b"a", 0x41, 0, 0)),
            Greater
        );
        // Then forward before reverse, primary before secondary.
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0x10, 0, 0), &rec(b"a", 0, 0, 0)),
            Greater
        );
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0x100, 0, 0), &rec(b"a", 0, 0, 0)),
            Greater
        );
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0, 0, 0), &rec(b"a", 0, 0, 0)),
            Equal
        );
    }

    #[test]
    fn coordinate_comparator_is_htsjdks() {
        use Ordering::*;
        // No reference last; then position; forward first; then name.
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"a", 4, -1, -1), &rec(b"b", 0, 2, 5)),
            Greater
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"z", 0, 0, 5), &rec(b"a", 0, 0, 6)),
            Less
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"a", 0x10, 0, 5), &rec(b"z", 0, 0, 5)),
            Greater
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"z", 0, 0, 5), &rec(b"a", 0, 0, 5)),
            Greater
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"a", 0x41, 0, 5), &rec(b"a", 0x81, 0, 5)),
            Less
        );
    }
}
