//! Duplicate marking through the distributed stages (`alnsort_engine::stages`
//! with `stages_markdup`): split -> sample -> splitters -> (reach) -> map ->
//! decide -> reduce -> assemble, in process, gives the bytes of one-node
//! `alnsort sort --markdup` (output BAM and metrics file; with several
//! ranges the same BGZF payload, blocks cut at the parts), on name-grouped
//! and coordinate-sorted input, one and several inputs (lanes of two
//! libraries; coordinate-sorted lanes also through the decision cut into
//! tasks, in Picard's merged order), 1 to 8 splits and partitions, with `DT` tags and removal.
//! One node's flags are Picard's (tests/markdup/); this pins the stages to
//! one node.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use alnsort_engine::options::sort::SortOptions;
use alnsort_engine::stages::markdup as stages_markdup;
use alnsort_engine::stages::markdup::Marks;
use alnsort_engine::stages::plan::SplitSpec;

fn alnsort(args: &[OsString]) {
    let out = Command::new(env!("CARGO_BIN_EXE_alnsort"))
        .args(args)
        .output()
        .expect("run the alnsort binary");
    assert!(
        out.status.success(),
        "alnsort {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// A tiny deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Name-grouped SAM of `n` templates that make duplicate sets: pairs at a
/// few hundred starts (mates on another reference too), fragments at pair
/// ends, mates unmapped, secondary and supplementary records, optical
/// neighbours on two tiles, two read groups of two libraries (`lane`
/// names the read groups apart).
fn generated_sam(path: &Path, n: usize, seed: u64, lane: &str) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut s = String::from(
        "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:200000\n@SQ\tSN:chr2\tLN:200000\n",
    );
    let _ = writeln!(s, "@RG\tID:a{lane}\tSM:s\tLB:libA");
    let _ = writeln!(s, "@RG\tID:b{lane}\tSM:s\tLB:libB");
    let seq = "ACGTACGTAC".repeat(5);
    for i in 0..n {
        let name = format!(
            "r{lane}{i}:1:FC:1:{}:{}:{}",
            1101 + rng.below(2),
            rng.below(400),
            rng.below(400)
        );
        let rg = if rng.below(3) == 0 { "b" } else { "a" };
        let q = (b'5' + rng.below(3) as u8) as char;
        let qual: String = std::iter::repeat_n(q, 50).collect();
        let tags = format!("RG:Z:{rg}{lane}");
        let p1 = 1000 + rng.below(300) * 10;
        let kind = rng.below(10);
        let rev1 = rng.below(2) == 1;
        let r1 = if rev1 { 0x10 } else { 0 };
        match kind {
            0 => {
                // A fragment, at a pair's start.
                let _ = writeln!(
                    s,
                    "{name}\t{r1}\tchr1\t{p1}\t60\t50M\t*\t0\t0\t{seq}\t{qual}\t{tags}"
                );
            }
            1 => {
                // Mate unmapped, placed at its mate.
                let f1 = 0x1 | 0x40 | 0x8 | r1;
                let f2 = 0x1 | 0x80 | 0x4 | if rev1 { 0x20 } else { 0 };
                let _ = writeln!(
                    s,
                    "{name}\t{f1}\tchr1\t{p1}\t60\t50M\t=\t{p1}\t0\t{seq}\t{qual}\t{tags}"
                );
                let _ = writeln!(
                    s,
                    "{name}\t{f2}\tchr1\t{p1}\t0\t*\t=\t{p1}\t0\t{seq}\t{qual}\t{tags}"
                );
            }
            _ => {
                let (ref2, p2) = if kind == 2 {
                    ("chr2", 5000 + rng.below(50) * 10)
                } else {
                    ("chr1", p1 + 200 + rng.below(3) * 50)
                };
                let rnext = if ref2 == "chr1" { "=" } else { ref2 };
                let rnext1 = if ref2 == "chr1" { "=" } else { "chr1" };
                let rev2 = rng.below(4) != 0;
                let f1 = 0x1 | 0x2 | 0x40 | r1 | if rev2 { 0x20 } else { 0 };
                let f2 =
                    0x1 | 0x2 | 0x80 | if rev2 { 0x10 } else { 0 } | if rev1 { 0x20 } else { 0 };
                let clip = if rng.below(8) == 0 { "5S45M" } else { "50M" };
                let _ = writeln!(
                    s,
                    "{name}\t{f1}\tchr1\t{p1}\t60\t{clip}\t{rnext}\t{p2}\t0\t{seq}\t{qual}\t{tags}"
                );
                if kind == 3 {
                    let _ = writeln!(
                        s,
                        "{name}\t{}\tchr2\t{}\t0\t50M\t{rnext}\t{p2}\t0\t{seq}\t{qual}\t{tags}",
                        f1 | 0x100,
                        9000 + i
                    );
                }
                let _ = writeln!(
                    s,
                    "{name}\t{f2}\t{ref2}\t{p2}\t60\t50M\t{rnext1}\t{p1}\t0\t{seq}\t{qual}\t{tags}"
                );
                if kind == 4 {
                    let _ = writeln!(
                        s,
                        "{name}\t{}\tchr2\t{}\t0\t25H25M\t{rnext1}\t{p1}\t0\t{}\t{}\t{tags}",
                        f2 | 0x800,
                        20000 + i,
                        &seq[..25],
                        &qual[..25]
                    );
                }
            }
        }
    }
    std::fs::write(path, s).expect("write the SAM");
}

/// The stages over `inputs` with `opts` (the sort options besides
/// inputs), `splits` and `partitions`; the output at `out`, the metrics at
/// `metrics` with `command_line`.
fn run_stages(
    inputs: &[PathBuf],
    opts: &[&str],
    splits: usize,
    partitions: usize,
    out: &Path,
    metrics: &Path,
    command_line: &str,
) {
    let mut argv = os(opts);
    argv.extend(["-o".into(), out.into()]);
    argv.extend(inputs.iter().map(OsString::from));
    let alnsort::args::ParsedSort::Run(options) =
        alnsort::args::parse("alnsort", argv, false).expect("options parse")
    else {
        panic!("the options name a run");
    };
    let options: SortOptions = *options;
    let specs: Vec<SplitSpec> =
        alnsort_engine::stages::plan::split(inputs, splits, 1).expect("split");
    let mut samples = Vec::new();
    for s in &specs {
        samples
            .extend(alnsort_engine::stages::plan::sample(inputs, s, 64, &options).expect("sample"));
    }
    let splitters =
        alnsort_engine::stages::plan::splitters(&samples, partitions).expect("splitters");
    // Several inputs: each map's prior is the largest reach of the
    // earlier splits of its input.
    let mut priors = Vec::new();
    let mut reach: Option<(usize, Option<u64>)> = None;
    for s in &specs {
        let prior = match reach {
            Some((i, r)) if i == s.input => r,
            _ => None,
        };
        priors.push(prior);
        let own = alnsort_engine::stages::plan::reach(inputs, s, 1).expect("reach");
        let r = match (prior, own) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        reach = Some((s.input, r));
    }
    let mut decided = stages_markdup::decide(inputs, &options).expect("decide");
    // One input, or several coordinate-sorted ones (libraries apart, or
    // lanes of one library: ends compared in Picard's merged order): each
    // range's slices of the splits' outcomes (by range, then split), from
    // the maps' ranges.
    let mut slices: Option<Vec<Vec<Vec<u8>>>> = None;
    let tasks_decide = stages_markdup::tasks_refusal(inputs, &options)
        .expect("tasks refusal")
        .is_none();
    if tasks_decide {
        // The decision cut into tasks: the same bits and metrics as the
        // one task's; the rest of the run uses it.
        for (buckets, names) in [(splits + 1, splits.saturating_sub(1).max(1)), (1, 1)] {
            let (tasks, sliced) = decide_in_tasks(
                inputs, &specs, &priors, &splitters, &options, buckets, names,
            );
            slices = Some(sliced);
            assert!(
                tasks.decisions == decided.decisions,
                "{splits} splits, {buckets} buckets, {names} name buckets: decisions differ"
            );
            assert_eq!(
                tasks.metrics, decided.metrics,
                "{splits} splits, {buckets} buckets"
            );
            assert_eq!(tasks.records, decided.records);
            decided = tasks;
        }
    }
    let maps: Vec<_> = specs
        .iter()
        .zip(&priors)
        .map(|(s, p)| {
            let prior = if inputs.len() > 1 { *p } else { None };
            alnsort_engine::stages::sort::map(
                inputs,
                s,
                &splitters,
                &options,
                prior,
                &Default::default(),
            )
            .expect("map")
        })
        .collect();
    let split_records: Vec<u64> = maps.iter().map(|m| m.records).collect();
    let split_inputs: Vec<usize> = specs.iter().map(|s| s.input).collect();
    let bases = stages_markdup::split_bases(&split_records, &split_inputs, &decided.records)
        .expect("split bases");
    let marks = Marks::new(&decided.decisions, bases, &options).expect("marks");
    let ranges = maps[0].blocks.len();
    let dir = out.parent().expect("dir");
    let mut parts = Vec::new();
    let mut marked = 0;
    for r in 0..ranges {
        let blocks: Vec<&[u8]> = maps.iter().map(|m| &m.blocks[r][..]).collect();
        let part = dir.join(format!("part{r}"));
        let got = alnsort_engine::stages::sort::reduce_marked(
            inputs,
            &blocks,
            &part,
            r,
            ranges,
            &options,
            false,
            Some(&marks),
            None,
        )
        .expect("reduce");
        marked += got.marked;
        if let Some(slices) = &slices {
            // The reduce given only its range's slices writes the same part.
            let own: Vec<&[u8]> = slices[r].iter().map(Vec::as_slice).collect();
            let sliced = Marks::sliced(&own, &options).expect("sliced marks");
            let spart = dir.join(format!("part{r}.sliced"));
            let s = alnsort_engine::stages::sort::reduce_marked(
                inputs,
                &blocks,
                &spart,
                r,
                ranges,
                &options,
                false,
                Some(&sliced),
                None,
            )
            .expect("sliced reduce");
            assert_eq!(
                (s.records, s.marked),
                (got.records, got.marked),
                "range {r}"
            );
            assert!(
                std::fs::read(&spart).expect("sliced part") == std::fs::read(&part).expect("part"),
                "range {r}: the sliced reduce's part differs"
            );
            std::fs::remove_file(&spart).expect("remove");
        }
        parts.push(part);
    }
    assert_eq!(marked, marks.decisions.marked(), "every duplicate met once");
    alnsort_engine::stages::sort::assemble(inputs, &parts, out, &options, None, false, None)
        .expect("assemble");
    let given: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    stages_markdup::write_metrics(&decided.metrics, metrics, &given, Some(out), command_line)
        .expect("metrics");
}

/// The decision of `stages_markdup::decide` from tasks none of which
/// reads the whole input: collect per split, join per name bucket, decide
/// per end bucket, every split finished with the default carry and those
/// whose carry was not the previous split's finished again, assembled.
///
/// Each split's share is also collected by its map
/// (`alnsort_engine::stages::sort::map_collecting`): the same share as the separate collect's
/// with each record's range besides, and the same blocks as the plain
/// map's. Also each range's slice of every split's outcome (by range, then
/// split), from the maps' ranges.
fn decide_in_tasks(
    inputs: &[PathBuf],
    specs: &[SplitSpec],
    priors: &[Option<u64>],
    splitters: &[Vec<u8>],
    options: &SortOptions,
    buckets: usize,
    names: usize,
) -> (stages_markdup::StageDecision, Vec<Vec<Vec<u8>>>) {
    use stages_markdup::dist::{self, Fixups, SetsDecided};
    use stages_markdup::WalkCarry;
    let shares: Vec<_> = specs
        .iter()
        .map(|s| stages_markdup::collect(inputs, s, options, buckets, names).expect("collect"))
        .collect();
    let mut ranges = Vec::new();
    for ((s, share), &prior) in specs.iter().zip(&shares).zip(priors) {
        let prior = if inputs.len() > 1 { prior } else { None };
        let (mapped, folded) = alnsort_engine::stages::sort::map_collecting_after(
            inputs,
            s,
            splitters,
            options,
            prior,
            (buckets, names),
            &Default::default(),
        )
        .expect("map collecting");
        let what = format!(
            "split {} of {}, {buckets} buckets, {names} name buckets",
            s.ordinal,
            specs.len()
        );
        assert_eq!(folded.records, share.records, "{what}: records");
        assert_eq!(folded.boundary, share.boundary, "{what}: boundary");
        assert!(folded.slots == share.slots, "{what}: slots differ");
        assert!(folded.ends == share.ends, "{what}: fragment ends differ");
        assert!(folded.halves == share.halves, "{what}: mate halves differ");
        assert_eq!(mapped.records, share.records, "{what}: map records");
        assert!(share.ranges.is_empty(), "{what}: collect knows no ranges");
        assert_eq!(
            folded.ranges.len() as u64,
            2 * share.records,
            "{what}: a range per record"
        );
        ranges.push(folded.ranges);
        let plain = alnsort_engine::stages::sort::map(
            inputs,
            s,
            splitters,
            options,
            prior,
            &Default::default(),
        )
        .expect("map");
        assert!(plain.blocks == mapped.blocks, "{what}: blocks differ");
        assert_eq!(
            (plain.end, plain.reach),
            (mapped.end, mapped.reach),
            "{what}"
        );
    }
    let bounds: Vec<_> = shares.iter().map(|s| s.boundary.clone()).collect();
    let continued = dist::continued_templates(&bounds);
    let fixups = Fixups::new(&bounds, &continued);
    let joined: Vec<Vec<Vec<u8>>> = (0..names)
        .map(|j| {
            let blocks: Vec<&[u8]> = shares.iter().map(|s| &s.halves[j][..]).collect();
            stages_markdup::join_within(&blocks, &fixups, buckets, options, &[])
                .expect("join")
                .0
        })
        .collect();
    let mut totals = SetsDecided::default();
    let mut lists = Vec::new();
    for b in 0..buckets {
        let mut blocks: Vec<&[u8]> = shares.iter().map(|s| &s.ends[b][..]).collect();
        blocks.extend(joined.iter().map(|j| &j[b][..]));
        let d = stages_markdup::decide_bucket(inputs, &blocks, &fixups, options).expect("decide");
        lists.push(d.by_split(specs.len()).expect("lists by split"));
        totals.add_counts(d);
    }
    let finish = |s: usize, carry: WalkCarry| {
        let dups: Vec<&[u8]> = lists.iter().map(|l| &l.0[s][..]).collect();
        let opt: Vec<&[u8]> = lists.iter().map(|l| &l.1[s][..]).collect();
        stages_markdup::finish_split(
            &shares[s].slots,
            continued[s].is_some(),
            &dups,
            Some(&opt),
            carry,
        )
        .expect("finish")
    };
    let mut outcomes: Vec<_> = (0..specs.len())
        .map(|s| finish(s, WalkCarry::default()))
        .collect();
    for s in 1..specs.len() {
        let carry = outcomes[s - 1].carry;
        // Several inputs: each input's walk starts afresh.
        if carry != WalkCarry::default() && specs[s].input == specs[s - 1].input {
            outcomes[s] = finish(s, carry);
        }
    }
    let walked: Vec<stages_markdup::WalkedSplit<'_>> = specs
        .iter()
        .zip(&outcomes)
        .map(|(s, o)| (s.input, &o.counts, o.repeated))
        .collect();
    assert_eq!(
        stages_markdup::walk_refusal(inputs, &walked).expect("walk refusal"),
        None
    );
    let partitions = splitters.len() + 1;
    let mut slices = vec![Vec::new(); partitions];
    for (o, r) in outcomes.iter().zip(&ranges) {
        let cut = stages_markdup::range_slices(o, r, partitions).expect("slices");
        for (to, s) in slices.iter_mut().zip(cut) {
            to.push(s);
        }
    }
    let mut decided =
        stages_markdup::assemble(inputs, options, outcomes, totals).expect("assemble");
    if inputs.len() > 1 {
        // The records per input (the assemble counts them all, as the Ray
        // driver's does; the driver counts them per input from the maps).
        let mut per_input = vec![0u64; inputs.len()];
        for (s, share) in specs.iter().zip(&shares) {
            per_input[s.input] += share.records;
        }
        assert_eq!(
            per_input.iter().sum::<u64>(),
            decided.records.iter().sum::<u64>()
        );
        decided.records = per_input;
    }
    (decided, slices)
}

fn check(dir: &Path, inputs: &[PathBuf], opts: &[&str], tag: &str) {
    let want = dir.join(format!("{tag}.want.bam"));
    let want_m = dir.join(format!("{tag}.want.metrics"));
    let mut args = os(&["sort"]);
    args.extend(os(opts));
    args.extend([
        "--metrics".into(),
        want_m.clone().into(),
        "-o".into(),
        want.clone().into(),
    ]);
    args.extend(inputs.iter().map(OsString::from));
    alnsort(&args);
    let want_bytes = std::fs::read(&want).expect("one-node output");
    let want_text = std::fs::read_to_string(&want_m).expect("one-node metrics");
    let command_line = want_text.lines().nth(3).expect("command line")[2..].to_string();
    let dups = want_text
        .lines()
        .skip_while(|l| !l.starts_with("LIBRARY"))
        .nth(1)
        .expect("a library row")
        .split('\t')
        .nth(6)
        .expect("READ_PAIR_DUPLICATES")
        .parse::<u64>()
        .expect("a count");
    assert!(dups > 10, "{tag}: the case has duplicates ({dups})");
    // The stages write to the same paths (the metrics file names both).
    for (splits, partitions) in [(1, 1), (3, 1), (3, 2), (8, 8)] {
        std::fs::remove_file(&want).expect("remove");
        std::fs::remove_file(&want_m).expect("remove");
        let mut with_m: Vec<&str> = opts.to_vec();
        let mpath = want_m.display().to_string();
        with_m.extend(["--metrics", &mpath]);
        run_stages(
            inputs,
            &with_m,
            splits,
            partitions,
            &want,
            &want_m,
            &command_line,
        );
        let got = std::fs::read(&want).expect("stages output");
        // One range: the same bytes; several: the same BGZF payload (the
        // parts' blocks are cut at the part boundaries, as without
        // --markdup).
        let same = if partitions == 1 {
            got == want_bytes
        } else {
            alnsort_bgzf::decompress_all(&got).expect("inflate")
                == alnsort_bgzf::decompress_all(&want_bytes).expect("inflate")
        };
        assert!(
            same,
            "{tag}: {splits} splits, {partitions} ranges: the output differs from one node's"
        );
        let got_text = std::fs::read_to_string(&want_m).expect("stages metrics");
        assert_eq!(
            got_text, want_text,
            "{tag}: {splits} splits, {partitions} ranges: metrics differ"
        );
        for r in 0..partitions {
            let _ = std::fs::remove_file(dir.join(format!("part{r}")));
        }
    }
}

fn inputs(dir: &Path, lanes: usize, coordinate: bool) -> Vec<PathBuf> {
    (0..lanes)
        .map(|k| {
            let sam = dir.join(format!("lane{k}.sam"));
            generated_sam(&sam, 1500, 7 + k as u64, &format!("L{k}"));
            let bam = dir.join(format!(
                "lane{k}.{}.bam",
                if coordinate { "coord" } else { "name" }
            ));
            // Name-grouped BAM: alnsort sort -n keeps templates together.
            let order = if coordinate { vec![] } else { vec!["-n"] };
            let mut args = os(&["sort", "--no-PG", "-O", "bam"]);
            args.extend(os(&order));
            args.extend(["-o".into(), bam.clone().into(), sam.into()]);
            alnsort(&args);
            bam
        })
        .collect()
}

#[test]
fn stages_mark_as_one_node_on_name_grouped_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let one = inputs(dir.path(), 1, false);
    check(dir.path(), &one, &["--no-PG", "--markdup"], "name1");
    check(
        dir.path(),
        &one,
        &["--no-PG", "-n", "--markdup", "--tagging-policy", "all"],
        "name1n",
    );
    let three = inputs(dir.path(), 3, false);
    check(
        dir.path(),
        &three,
        &["--no-PG", "--markdup", "--remove-sequencing-duplicates"],
        "name3",
    );
}

#[test]
fn stages_mark_as_one_node_on_coordinate_sorted_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let one = inputs(dir.path(), 1, true);
    check(
        dir.path(),
        &one,
        &["--no-PG", "--markdup", "--tagging-policy", "optical"],
        "coord1",
    );
    let two = inputs(dir.path(), 2, true);
    check(
        dir.path(),
        &two,
        &["--no-PG", "--markdup", "--remove-duplicates"],
        "coord2",
    );
    // Three lanes of the same two libraries: decided by the tasks in
    // Picard's merged order.
    let three = inputs(dir.path(), 3, true);
    check(
        dir.path(),
        &three,
        &["--no-PG", "--markdup", "--tagging-policy", "all"],
        "coord3",
    );
}
