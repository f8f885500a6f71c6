//! The distributed marking against one [`MarkDuplicates`] over the whole
//! input: the same duplicate and optical bits and the same metrics, for
//! any cut into splits (inside templates too, empty splits, one template
//! over several splits) and any number of buckets.

use super::*;
use crate::flags;
use crate::optical::NameParser;
use crate::tests::{mark, random_records, read_info, two_libraries as groups, Rec, Rng};
use crate::{
    metrics_report, Bits, InputOrder, MarkDuplicates, MarkdupError, MetricsReport, ReadInfo,
    WalkCarry,
};

fn bits(b: &Bits) -> Vec<bool> {
    b.iter().collect()
}

/// The distributed marking of `recs` cut before each index of `cuts`, with
/// `buckets` end buckets and `names` name buckets, run as a driver would:
/// every split finished at once with the default carry, then those whose
/// carry was not the previous split's run again.
/// The marker a decide task runs, tracking optical duplicates, spilling
/// beyond `spill`'s limit where one is given.
fn decider(
    groups: &crate::ReadGroups,
    order: InputOrder,
    spill: Option<(&std::path::Path, usize)>,
) -> MarkDuplicates {
    let mut md = MarkDuplicates::with_order(groups.clone(), order);
    md.set_track_optical(true);
    if let Some((dir, limit)) = spill {
        md.set_spill(dir, limit, true);
    }
    md
}

/// Each end bucket decided as its decide task does (the bucket's ends from
/// every split's share and every join), its lists cut by split, and the
/// counts of all buckets summed.
#[allow(clippy::type_complexity)]
fn decide_buckets(
    md: &mut MarkDuplicates,
    shares: &[SplitShare],
    joined: &[Vec<Vec<u8>>],
    fixups: &Fixups,
    buckets: usize,
) -> Result<(Vec<(Vec<Vec<u8>>, Vec<Vec<u8>>)>, SetsDecided), MarkdupError> {
    let mut total = SetsDecided::default();
    let mut lists = Vec::new();
    for b in 0..buckets {
        let mut blocks: Vec<&[u8]> = shares.iter().map(|s| s.ends[b].as_slice()).collect();
        blocks.extend(joined.iter().map(|j| j[b].as_slice()));
        let d = md.decide_ends(&blocks, fixups)?;
        lists.push(d.by_split(shares.len())?);
        total.add_counts(d);
    }
    Ok((lists, total))
}

fn dist_mark(
    recs: &[Rec],
    order: InputOrder,
    cuts: &[usize],
    buckets: usize,
    names: usize,
    spill: Option<(&std::path::Path, usize)>,
) -> (Vec<bool>, Vec<bool>, MetricsReport) {
    let mut groups = groups();
    let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(recs.len());
    let shares: Vec<SplitShare> = bounds
        .windows(2)
        .enumerate()
        .map(|(s, w)| {
            let mut c = SplitCollector::new(order, NameParser::Default, s as u32, buckets, names);
            for r in &recs[w[0]..w[1]] {
                c.push(&read_info(r, &rgs)).unwrap();
            }
            c.finish()
        })
        .collect();
    let splits = shares.len();
    let bnds: Vec<Boundary> = shares.iter().map(|s| s.boundary.clone()).collect();
    let continued = continued_templates(&bnds);
    let fixups = Fixups::new(&bnds, &continued);
    // Joins, one per name bucket: pair ends by end bucket.
    let joined: Vec<Vec<Vec<u8>>> = (0..names)
        .map(|j| {
            let blocks: Vec<&[u8]> = shares.iter().map(|s| s.halves[j].as_slice()).collect();
            let Some((dir, limit)) = spill else {
                return join_mates(&blocks, &fixups, buckets).unwrap();
            };
            let mut join = MateJoin::default();
            join.set_spill(dir, limit);
            for b in blocks {
                join.add_block(b).unwrap();
            }
            assert!(join.runs_written() > 0, "the halves spill");
            let mut out = vec![Vec::new(); buckets];
            join.finish(&fixups, buckets, &mut |b, e| {
                out[b].extend_from_slice(e);
                Ok(())
            })
            .unwrap();
            out
        })
        .collect();
    // Decisions, one per end bucket.
    let mut md = decider(&groups, order, spill);
    let (lists, total) = decide_buckets(&mut md, &shares, &joined, &fixups, buckets).unwrap();
    if spill.is_some() {
        assert!(md.spill_stats().runs > 0, "the ends spill");
    }
    let finish = |s: usize, carry: WalkCarry| {
        let dups: Vec<&[u8]> = lists.iter().map(|l| l.0[s].as_slice()).collect();
        let opt: Vec<&[u8]> = lists.iter().map(|l| l.1[s].as_slice()).collect();
        finish_split(
            &shares[s].slots,
            continued[s].is_some(),
            &dups,
            Some(&opt),
            carry,
        )
        .unwrap()
    };
    let mut outcomes: Vec<SplitOutcome> = (0..splits)
        .map(|s| finish(s, WalkCarry::default()))
        .collect();
    for s in 1..splits {
        let carry = outcomes[s - 1].carry;
        if carry != WalkCarry::default() {
            outcomes[s] = finish(s, carry);
        }
    }
    let mut counts = Vec::new();
    let (mut dup, mut opt) = (Vec::new(), Vec::new());
    for o in &outcomes {
        dup.extend(bits(&o.duplicate));
        opt.extend(bits(o.optical.as_ref().unwrap()));
        add_library_counts(&mut counts, &o.counts);
    }
    let metrics = metrics_report(&groups, &counts, &total.optical_by_library, total.set_sizes);
    (dup, opt, metrics)
}

fn check(recs: &[Rec], order: InputOrder, cuts: &[usize], buckets: usize, names: usize) {
    check_within(recs, order, cuts, buckets, names, None)
}

fn check_within(
    recs: &[Rec],
    order: InputOrder,
    cuts: &[usize],
    buckets: usize,
    names: usize,
    spill: Option<(&std::path::Path, usize)>,
) {
    let want = mark(recs, order, None);
    let (dup, opt, metrics) = dist_mark(recs, order, cuts, buckets, names, spill);
    let ctx = format!("{order:?}, cuts {cuts:?}, {buckets} buckets, {names} name buckets");
    assert_eq!(dup, bits(&want.duplicate), "duplicates: {ctx}");
    assert_eq!(opt, bits(want.optical.as_ref().unwrap()), "optical: {ctx}");
    assert_eq!(metrics, want.metrics, "metrics: {ctx}");
}

/// `random_records` with a third of the pairs' second mates moved to the
/// other reference (the fields of both mates kept consistent), in
/// coordinate order when asked.
fn records(seed: u64, templates: usize, order: InputOrder) -> Vec<Rec> {
    let mut recs = random_records(seed, templates, false);
    let mut rng = Rng(seed ^ 0x5eed);
    let primary_pair = |f: u16| {
        f & flags::PAIRED != 0
            && f & (flags::UNMAPPED
                | flags::MATE_UNMAPPED
                | flags::SECONDARY
                | flags::SUPPLEMENTARY)
                == 0
    };
    let mut i = 0;
    while i < recs.len() {
        let mut j = i;
        while j < recs.len() && recs[j].0 == recs[i].0 {
            j += 1;
        }
        let mates: Vec<usize> = (i..j).filter(|&k| primary_pair(recs[k].1)).collect();
        if mates.len() == 2 && rng.below(3) == 0 {
            let other = 1 - recs[mates[1]].2;
            recs[mates[1]].2 = other;
            recs[mates[0]].4 = other;
        }
        i = j;
    }
    if order == InputOrder::Coordinate {
        recs.sort_by_key(|r| (r.2 as u32, r.3));
    }
    recs
}

#[test]
fn any_cut_and_any_buckets_give_one_markers_answer() {
    for order in [InputOrder::Queryname, InputOrder::Coordinate] {
        for seed in [3u64, 77, 1234] {
            let recs = records(seed, 700, order);
            let mut rng = Rng(seed * 31 + 7);
            for splits in [1usize, 2, 3, 5, 8] {
                let mut cuts: Vec<usize> = (1..splits)
                    .map(|_| rng.below(recs.len() as u64) as usize)
                    .collect();
                cuts.sort_unstable();
                for (buckets, names) in [(1, 1), (3, 2), (7, 5)] {
                    check(&recs, order, &cuts, buckets, names);
                }
            }
        }
    }
}

/// The join and the decision within a small limit: halves and ends spill
/// into many sorted runs (merged into runs too), the same answer; every
/// run file is gone afterwards, and after a failure the caller's directory
/// holds what is left.
#[test]
fn joins_and_decisions_beyond_a_limit_spill_and_give_the_same_answer() {
    let dir = std::env::temp_dir().join(format!("alnsort-dist-spill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for order in [InputOrder::Queryname, InputOrder::Coordinate] {
        let recs = records(11, 1500, order);
        let cuts = [recs.len() / 3, recs.len() / 2];
        check_within(&recs, order, &cuts, 2, 1, Some((&dir, 4_000)));
        check_within(&recs, order, &cuts, 3, 2, Some((&dir, 40_000)));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "run files left"
        );
    }
    // The decision spills: more runs than are merged at once.
    let recs = records(5, 1500, InputOrder::Queryname);
    let mut c = SplitCollector::new(InputOrder::Queryname, NameParser::Default, 0, 1, 1);
    let mut g = groups();
    let rgs = [g.resolve(Some(b"rg1")), g.resolve(Some(b"rg2"))];
    for r in &recs {
        c.push(&read_info(r, &rgs)).unwrap();
    }
    let share = c.finish();
    let mut md = MarkDuplicates::with_order(g.clone(), InputOrder::Queryname);
    md.set_spill(&dir, 3_000, true);
    let spilled = md
        .decide_ends(&[&share.ends[0]], &Fixups::default())
        .unwrap();
    assert!(md.spill_stats().runs > 32, "{:?}", md.spill_stats());
    let mut md = MarkDuplicates::with_order(g, InputOrder::Queryname);
    let held = md
        .decide_ends(&[&share.ends[0]], &Fixups::default())
        .unwrap();
    assert_eq!(spilled.duplicates, held.duplicates);
    assert_eq!(spilled.set_sizes, held.set_sizes);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "run files left"
    );
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn cuts_inside_templates_and_empty_splits() {
    let recs = records(99, 300, InputOrder::Queryname);
    // Every cut after a record whose template goes on, two at one place
    // (an empty split) and a run of cuts inside one template.
    let inside: Vec<usize> = (1..recs.len())
        .filter(|&k| recs[k].0 == recs[k - 1].0)
        .take(6)
        .collect();
    let mut cuts = inside.clone();
    cuts.push(inside[2]);
    cuts.sort_unstable();
    check(&recs, InputOrder::Queryname, &cuts, 4, 3);
    // One template over three splits.
    // (After record 40, which ends template r19: inside it the input
    // would not be grouped by name, which the join refuses.)
    let mut long: Vec<Rec> = recs[..41].to_vec();
    let name = "long:1:FC:1:1101:5:5".to_string();
    for (flag, five) in [
        (flags::PAIRED | flags::READ1 | 0x20, 100),
        (flags::PAIRED | flags::READ1 | flags::SECONDARY, 700),
        (flags::PAIRED | flags::READ1 | flags::SUPPLEMENTARY, 900),
        (flags::PAIRED | 0x80 | flags::REVERSE, 300),
    ] {
        long.push((name.clone(), flag, 0, five, 0, 1, 0));
    }
    long.extend_from_slice(&recs[41..]);
    check(&long, InputOrder::Queryname, &[42, 43, 44], 2, 2);
    check(&long, InputOrder::Queryname, &[41, 42, 43, 44, 45], 3, 1);
}

#[test]
fn an_index_listed_twice_holds_back_the_next_split() {
    // As `index_listed_twice_holds_back_the_walk`: "dd" is listed twice,
    // and the walk then misses "e", wherever the splits are cut.
    let recs: Vec<Rec> = [("best", 50), ("dd", 1), ("dd", 1), ("e", 1), ("f", 1)]
        .iter()
        .map(|&(n, score)| (n.to_string(), 0, 0, 100, -1, score, 0))
        .collect();
    for cuts in [
        vec![],
        vec![3],
        vec![2],
        vec![1, 3],
        vec![3, 4],
        vec![2, 3, 4],
    ] {
        check(&recs, InputOrder::Queryname, &cuts, 2, 1);
    }
}

#[test]
fn a_block_cut_short_is_an_error() {
    let mut c = SplitCollector::new(InputOrder::Queryname, NameParser::Default, 0, 1, 1);
    let mut groups = groups();
    let rg = groups.resolve(Some(b"rg1"));
    for (flag, five) in [
        (flags::PAIRED | flags::READ1, 100),
        (flags::PAIRED | 0x80, 300),
    ] {
        c.push(&ReadInfo {
            name: b"a",
            flag,
            ref_id: 0,
            mate_ref_id: 0,
            five_prime: five,
            score: 1,
            rg,
            barcodes: Default::default(),
        })
        .unwrap();
    }
    let share = c.finish();
    let h = &share.halves[0];
    let e = join_mates(&[&h[..h.len() - 1]], &Fixups::default(), 1).unwrap_err();
    assert!(
        matches!(
            e,
            MarkdupError::BadBlock {
                what: "mate halves",
                ..
            }
        ),
        "{e}"
    );
    let mut md = MarkDuplicates::new(groups);
    let ends = &share.ends[0];
    let e = md
        .decide_ends(&[&ends[..ends.len() - 3]], &Fixups::default())
        .unwrap_err();
    assert!(
        matches!(
            e,
            MarkdupError::BadBlock {
                what: "read ends",
                ..
            }
        ),
        "{e}"
    );
    let far = SetsDecided {
        duplicates: vec![ordinal(3, 0) as u64],
        ..Default::default()
    };
    let e = far.by_split(2).unwrap_err();
    assert!(
        matches!(
            e,
            MarkdupError::SplitBeyond {
                split: 3,
                splits: 2
            }
        ),
        "{e}"
    );
}

/// Name-grouped input whose template "a" is scattered (its first mate,
/// then template "b", then its second mate): wherever the splits are cut,
/// the join refuses it at the second part's first record, as one node's
/// grouping check does; a template continued over a cut is one template.
#[test]
fn a_template_scattered_over_splits_is_refused_by_the_join() {
    let mut groups = groups();
    let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
    let p = flags::PAIRED;
    let recs: Vec<Rec> = [
        ("a", p | flags::READ1, 100),
        ("b", p | flags::READ1, 200),
        ("b", p | 0x80 | flags::REVERSE, 400),
        ("a", p | 0x80 | flags::REVERSE, 300),
    ]
    .iter()
    .map(|&(n, f, five)| (n.to_string(), f, 0, five, 0, 1, 0))
    .collect();
    let join = |cuts: &[usize]| {
        let mut at = vec![0];
        at.extend_from_slice(cuts);
        at.push(recs.len());
        let shares: Vec<SplitShare> = at
            .windows(2)
            .enumerate()
            .map(|(s, w)| {
                let mut c =
                    SplitCollector::new(InputOrder::Queryname, NameParser::Default, s as u32, 1, 1);
                for r in &recs[w[0]..w[1]] {
                    c.push(&read_info(r, &rgs)).unwrap();
                }
                c.finish()
            })
            .collect();
        let bnds: Vec<Boundary> = shares.iter().map(|s| s.boundary.clone()).collect();
        let fixups = Fixups::new(&bnds, &continued_templates(&bnds));
        let blocks: Vec<&[u8]> = shares.iter().map(|s| s.halves[0].as_slice()).collect();
        join_mates(&blocks, &fixups, 1)
    };
    for (cuts, split, index) in [
        (vec![], 0, 3),
        (vec![1], 1, 2),
        (vec![1, 3], 2, 0),
        (vec![2, 3], 2, 0),
    ] {
        match join(&cuts) {
            Err(MarkdupError::ScatteredTemplate {
                name,
                ordinal: o,
                earlier,
            }) => {
                assert_eq!(name, b"a", "cuts {cuts:?}");
                assert_eq!(o, ordinal(split, index), "cuts {cuts:?}");
                assert_eq!(earlier, ordinal(0, 0), "cuts {cuts:?}");
            }
            other => panic!("cuts {cuts:?}: {:?}", other.map(|_| ())),
        }
    }
    // Grouped: "a" cut between its mates is one template, not refused; in
    // coordinate order names recur freely.
    let grouped = [0, 3, 1, 2].map(|k| recs[k].clone());
    for cuts in [[1usize], [2], [3]] {
        check(&grouped, InputOrder::Queryname, &cuts, 1, 1);
    }
    check(&recs, InputOrder::Coordinate, &[2], 1, 1);
}

/// The fields htsjdk's coordinate comparator compares of a generated
/// record (its 5' end standing for its position).
fn merge_key(r: &Rec) -> merge_order::MergeKey<&[u8]> {
    merge_order::MergeKey {
        ref_id: r.2,
        pos: r.3,
        flag: r.1,
        mapq: 0,
        mate_ref: r.4,
        mate_pos: 0,
        tlen: 0,
        name: r.0.as_bytes(),
    }
}

/// Several coordinate-sorted inputs whose libraries are in each (lanes
/// of one library): input `i`'s templates are named `r{t}_{i}:...`, so
/// names interleave across inputs, and sorted by (reference, position,
/// strand) only, as samtools sorts them. For odd seeds the names have no
/// flow-cell location (as SRA's), so that ends of equal scores are told
/// apart by their records' places alone (with a location the tile and
/// coordinates come first).
fn lanes(seed: u64, inputs: usize, templates: usize) -> Vec<Vec<Rec>> {
    (0..inputs)
        .map(|i| {
            let mut recs = random_records(seed * 7 + i as u64, templates, false);
            for r in &mut recs {
                let (t, rest) = r.0.split_once(':').unwrap();
                r.0 = if seed % 2 == 1 {
                    format!("{t}_{i}")
                } else {
                    format!("{t}_{i}:{rest}")
                };
            }
            recs.sort_by_key(|r| (r.2 as u32, r.3, r.1 & flags::REVERSE));
            recs
        })
        .collect()
}

/// One marker over the inputs merged as htsjdk merges them (the smallest
/// of the inputs' next records by its coordinate comparator taken each
/// time; the earlier input on equal records, which decides nothing where
/// no two inputs' running maxima are equal): the bits in each input's
/// order, inputs one after the other; `None` where two inputs' running
/// maxima are equal (Java's heap order, which the tasks refuse).
fn lanes_one_marker(inputs: &[Vec<Rec>]) -> Option<(Vec<bool>, Vec<bool>, MetricsReport)> {
    let mut places = Vec::new();
    for (i, recs) in inputs.iter().enumerate() {
        let mut m = merge_order::RunningMax::default();
        for (o, r) in recs.iter().enumerate() {
            let max = m.push(&merge_key(r)).clone();
            places.push(merge_order::Place {
                input: i as u32,
                ordinal: o as i64,
                max,
            });
        }
    }
    merge_order::order_places(&places).ok()?;
    let mut next = vec![0usize; inputs.len()];
    let mut merged: Vec<(usize, usize)> = Vec::new();
    loop {
        let least = (0..inputs.len())
            .filter(|&i| next[i] < inputs[i].len())
            .min_by(|&a, &b| {
                merge_key(&inputs[a][next[a]])
                    .htsjdk_cmp(&merge_key(&inputs[b][next[b]]))
                    .then(a.cmp(&b))
            });
        let Some(i) = least else { break };
        merged.push((i, next[i]));
        next[i] += 1;
    }
    let recs: Vec<Rec> = merged.iter().map(|&(i, o)| inputs[i][o].clone()).collect();
    let want = mark(&recs, InputOrder::Coordinate, None);
    let (dup, opt) = (bits(&want.duplicate), bits(want.optical.as_ref().unwrap()));
    // Back to input order, inputs one after the other.
    let base: Vec<usize> = inputs
        .iter()
        .scan(0, |b, v| {
            let here = *b;
            *b += v.len();
            Some(here)
        })
        .collect();
    let mut by_input = vec![(false, false); recs.len()];
    for (k, &(i, o)) in merged.iter().enumerate() {
        by_input[base[i] + o] = (dup[k], opt[k]);
    }
    Some((
        by_input.iter().map(|b| b.0).collect(),
        by_input.iter().map(|b| b.1).collect(),
        want.metrics,
    ))
}

/// The tasks on lanes: each input cut before the indexes of its `cuts`,
/// collectors and joins keeping the merge order, each input's walk
/// started afresh; the joins spill beyond `spill`'s limit, the decisions
/// beyond `decide_limit` (in `spill`'s directory).
fn lanes_dist(
    inputs: &[Vec<Rec>],
    cuts: &[Vec<usize>],
    buckets: usize,
    names: usize,
    spill: Option<(&std::path::Path, usize)>,
    decide_limit: Option<usize>,
) -> Result<(Vec<bool>, Vec<bool>, MetricsReport), MarkdupError> {
    let mut groups = groups();
    let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
    let mut shares = Vec::new();
    let mut split_input = Vec::new();
    for (i, recs) in inputs.iter().enumerate() {
        let mut bounds = vec![0];
        bounds.extend_from_slice(&cuts[i]);
        bounds.push(recs.len());
        for w in bounds.windows(2) {
            let s = shares.len() as u32;
            let mut c = SplitCollector::new(
                InputOrder::Coordinate,
                NameParser::Default,
                s,
                buckets,
                names,
            )
            .keeping_merge_order(i as u32);
            for r in &recs[w[0]..w[1]] {
                c.push_keyed(&read_info(r, &rgs), None, &merge_key(r))?;
            }
            shares.push(c.finish());
            split_input.push(i);
        }
    }
    let splits = shares.len();
    let bnds: Vec<Boundary> = shares.iter().map(|s| s.boundary.clone()).collect();
    let continued = continued_templates(&bnds);
    let fixups = Fixups::new(&bnds, &continued);
    let mut joined = Vec::new();
    for j in 0..names {
        let mut join = MateJoin::for_fixups(&fixups);
        if let Some((dir, limit)) = spill {
            join.set_spill(dir, limit);
        }
        for s in &shares {
            join.add_block(&s.halves[j])?;
        }
        let mut out = vec![Vec::new(); buckets];
        join.finish(&fixups, buckets, &mut |b, e| {
            out[b].extend_from_slice(e);
            Ok(())
        })?;
        joined.push(out);
    }
    let decide_spill = spill
        .zip(decide_limit)
        .map(|((dir, _), limit)| (dir, limit));
    let mut md = decider(&groups, InputOrder::Coordinate, decide_spill);
    let (lists, total) = decide_buckets(&mut md, &shares, &joined, &fixups, buckets)?;
    let mut counts = Vec::new();
    let (mut dup, mut opt) = (Vec::new(), Vec::new());
    let mut carry = WalkCarry::default();
    for s in 0..splits {
        if s == 0 || split_input[s] != split_input[s - 1] {
            carry = WalkCarry::default();
        }
        let dups: Vec<&[u8]> = lists.iter().map(|l| l.0[s].as_slice()).collect();
        let op: Vec<&[u8]> = lists.iter().map(|l| l.1[s].as_slice()).collect();
        let o = finish_split(
            &shares[s].slots,
            continued[s].is_some(),
            &dups,
            Some(&op),
            carry,
        )?;
        assert_eq!(o.repeated, 0);
        carry = o.carry;
        dup.extend(bits(&o.duplicate));
        opt.extend(bits(o.optical.as_ref().unwrap()));
        add_library_counts(&mut counts, &o.counts);
    }
    let metrics = metrics_report(&groups, &counts, &total.optical_by_library, total.set_sizes);
    Ok((dup, opt, metrics))
}

/// Cuts of each input: none, every `every` records, or at random places
/// (empty splits among them).
fn lanes_cuts(inputs: &[Vec<Rec>], rng: &mut Rng, how: usize) -> Vec<Vec<usize>> {
    inputs
        .iter()
        .map(|recs| match how {
            0 => Vec::new(),
            1 => (1..recs.len()).step_by(3).collect(),
            _ => {
                let mut c: Vec<usize> = (0..1 + rng.below(6))
                    .map(|_| rng.below(recs.len() as u64 + 1) as usize)
                    .collect();
                c.sort_unstable();
                c
            }
        })
        .collect()
}

#[test]
fn lanes_of_one_library_decided_per_bucket_give_one_markers_answer() {
    let (mut exact, mut ties, mut differ) = (0, 0, 0);
    for seed in 1..40u64 {
        let inputs = lanes(seed, 2 + seed as usize % 2, 60 + seed as usize * 5);
        let Some((dup, opt, metrics)) = lanes_one_marker(&inputs) else {
            // Equal running maxima in two inputs: the tasks must refuse.
            let e =
                lanes_dist(&inputs, &vec![Vec::new(); inputs.len()], 2, 2, None, None).unwrap_err();
            assert!(matches!(e, MarkdupError::MergeTie { .. }), "{e}");
            ties += 1;
            continue;
        };
        // Input order instead of Picard's merged order changes some flag.
        let concatenated: Vec<Rec> = inputs.concat();
        differ +=
            (bits(&mark(&concatenated, InputOrder::Coordinate, None).duplicate) != dup) as u32;
        let mut rng = Rng(seed * 131 + 1);
        for (how, buckets, names) in [(0, 1, 1), (1, 3, 2), (2, 8, 5), (2, 4, 8), (1, 2, 1)] {
            let cuts = lanes_cuts(&inputs, &mut rng, how);
            let ctx =
                format!("seed {seed}, cuts {cuts:?}, {buckets} buckets, {names} name buckets");
            let (d, o, m) = lanes_dist(&inputs, &cuts, buckets, names, None, None)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(d, dup, "duplicates: {ctx}");
            assert_eq!(o, opt, "optical: {ctx}");
            assert_eq!(m, metrics, "metrics: {ctx}");
        }
        exact += 1;
    }
    assert!(
        exact >= 20 && differ >= 10,
        "{exact} exact, {ties} ties, {differ} differ"
    );
}

#[test]
fn lanes_joins_beyond_a_limit_spill_and_a_decision_beyond_half_goes_to_one_task() {
    let dir = std::env::temp_dir().join(format!("alnsort-lanes-spill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for seed in 50..60u64 {
        let inputs = lanes(seed, 2, 300);
        let Some(want) = lanes_one_marker(&inputs) else {
            continue;
        };
        let mut rng = Rng(seed);
        let cuts = lanes_cuts(&inputs, &mut rng, 2);
        let got = lanes_dist(&inputs, &cuts, 2, 2, Some((&dir, 4096)), Some(1 << 20)).unwrap();
        assert_eq!(got, want, "seed {seed}");
        // A decision whose ranks would hold more than half its limit goes
        // to one task (the typed error says so), not beyond the limit.
        let e = lanes_dist(&inputs, &cuts, 2, 2, Some((&dir, 4096)), Some(4096)).unwrap_err();
        assert!(
            matches!(e, MarkdupError::MergeBeyondLimit { limit: 4096, held, .. } if held > 2048),
            "{e}"
        );
        assert!(e.needs_one_task(), "{e}");
        checked += 1;
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(checked >= 5, "{checked}");
}

#[test]
fn lanes_mates_in_two_inputs_are_refused() {
    let inputs = lanes(3, 2, 40);
    let mut moved = inputs.clone();
    // Give a pair's second mate to the other input (same name and group).
    let at = moved[0]
        .iter()
        .position(|r| r.1 & flags::READ2 != 0 && r.1 & flags::UNMAPPED == 0 && r.4 != -1)
        .unwrap();
    let r = moved[0].remove(at);
    moved[1].push(r);
    moved[1].sort_by_key(|r| (r.2 as u32, r.3, r.1 & flags::REVERSE));
    let e = lanes_dist(&moved, &[Vec::new(), Vec::new()], 2, 2, None, None).unwrap_err();
    assert!(matches!(e, MarkdupError::MatesInTwoInputs { .. }), "{e}");
}

#[test]
fn lanes_with_one_record_in_two_inputs_are_refused_as_a_tie() {
    let mut tried = 0;
    for seed in 1..10u64 {
        let mut inputs = lanes(seed, 2, 60);
        // A mapped fragment that begins its (reference, position, strand)
        // in input 0, copied to the start of that group in input 1: the
        // two records' running maxima are equal.
        let key = |r: &Rec| (r.2 as u32, r.3, r.1 & flags::REVERSE);
        let Some(at) = (0..inputs[0].len()).find(|&k| {
            let r = &inputs[0][k];
            r.4 == -1 && r.1 & flags::UNMAPPED == 0 && (k == 0 || key(&inputs[0][k - 1]) != key(r))
        }) else {
            continue;
        };
        let copy = inputs[0][at].clone();
        inputs[1].insert(0, copy);
        inputs[1].sort_by_key(key);
        assert!(lanes_one_marker(&inputs).is_none(), "seed {seed}: a tie");
        for buckets in [1, 3] {
            let e = lanes_dist(&inputs, &[vec![5], vec![]], buckets, 2, None, None).unwrap_err();
            assert!(
                matches!(
                    &e,
                    MarkdupError::MergeTie {
                        a_input: 0,
                        b_input: 1,
                        ..
                    }
                ),
                "seed {seed}: {e}"
            );
        }
        tried += 1;
    }
    assert!(tried >= 5, "{tried}");
}
