use super::*;
use crate::ends::{End, FragKey, MatedFrags, F, R};
use crate::optical::Location;
use std::collections::HashMap;

const P: u16 = flags::PAIRED;
const R1: u16 = flags::PAIRED | flags::READ1;
const R2: u16 = flags::PAIRED | 0x80;
const REV: u16 = flags::REVERSE;
const MREV: u16 = 0x20;

struct B {
    md: MarkDuplicates,
    rg: RgInfo,
}

impl B {
    fn new() -> Self {
        let mut groups = ReadGroups::new([(b"rg1".to_vec(), Some("lib1".to_string()))]);
        let rg = groups.resolve(Some(b"rg1"));
        B {
            md: MarkDuplicates::new(groups),
            rg,
        }
    }
    fn rec(&mut self, name: &str, flag: u16, ref_id: i32, five: i32, mate_ref: i32, score: i16) {
        self.md
            .push(&ReadInfo {
                name: name.as_bytes(),
                flag,
                ref_id,
                mate_ref_id: mate_ref,
                five_prime: five,
                score,
                rg: self.rg,
                barcodes: Default::default(),
            })
            .unwrap();
    }
    /// A properly paired FR template: read1 forward at `a`, read2 reverse
    /// with 5' end `b`.
    fn pair(&mut self, name: &str, a: i32, b: i32, score: i16) {
        self.rec(name, R1 | MREV, 0, a, 0, score);
        self.rec(name, R2 | REV, 0, b, 0, score);
    }
    fn run(self) -> Outcome {
        self.md.finish().unwrap()
    }
}

#[test]
fn five_prime_uses_unclipped_ends() {
    // 2S8M at 0-based 100: unclipped start 1-based 99.
    assert_eq!(five_prime_coordinate(100, 8, &[(4, 2), (0, 8)], false), 99);
    // 3H2S10M1D5M4S at 0-based 100, reverse: end = 101+16-1 = 116, +4.
    let cig = [(5, 3), (4, 2), (0, 10), (2, 1), (0, 5), (4, 4)];
    assert_eq!(five_prime_coordinate(100, 16, &cig, true), 120);
    assert_eq!(five_prime_coordinate(100, 16, &cig, false), 101 - 5);
}

#[test]
fn score_sums_qualities_of_15_and_above() {
    assert_eq!(base_quality_score(&[14, 15, 30, 2], 0), 45);
    assert_eq!(base_quality_score(&[0xff, 0xff], 0), 0);
    // Qualities above 127 are negative Java bytes.
    assert_eq!(base_quality_score(&[200, 20], 0), 20);
    assert_eq!(base_quality_score(&vec![40u8; 1000], 0), 16383);
    assert_eq!(base_quality_score(&[20], flags::QC_FAIL), 20 - 16384);
}

#[test]
fn identical_pairs_keep_the_best_score() {
    let mut b = B::new();
    b.pair("a", 100, 300, 10);
    b.pair("b", 100, 300, 30);
    b.pair("c", 100, 300, 20);
    let o = b.run();
    assert_eq!(o.duplicate, vec![true, true, false, false, true, true]);
    let m = &o.metrics.libraries[0];
    assert_eq!((m.read_pairs_examined, m.read_pair_duplicates), (3, 2));
    assert_eq!(o.metrics.set_sizes.all_sets.get(&3), Some(&1));
}

#[test]
fn equal_scores_keep_the_first_in_file() {
    let mut b = B::new();
    b.pair("x", 100, 300, 10);
    b.pair("y", 100, 300, 10);
    assert_eq!(b.run().duplicate, vec![false, false, true, true]);
}

#[test]
fn equal_scores_prefer_lower_tile_x_y() {
    let mut b = B::new();
    b.pair("M:1:1102:5:5", 100, 300, 10);
    b.pair("M:1:1101:9000:9000", 100, 300, 10);
    assert_eq!(b.run().duplicate, vec![true, true, false, false]);
}

#[test]
fn different_second_end_is_not_a_duplicate() {
    let mut b = B::new();
    b.pair("a", 100, 300, 10);
    b.pair("b", 100, 301, 10);
    assert_eq!(b.run().duplicate, vec![false; 4]);
}

#[test]
fn mates_in_either_order_give_the_same_pair() {
    let mut b = B::new();
    b.pair("a", 100, 300, 10);
    // Reverse mate first in the file.
    b.rec("b", R2 | REV, 0, 300, 0, 50);
    b.rec("b", R1 | MREV, 0, 100, 0, 50);
    assert_eq!(b.run().duplicate, vec![true, true, false, false]);
}

#[test]
fn fragment_at_a_pair_end_is_a_duplicate() {
    let mut b = B::new();
    b.pair("a", 100, 300, 1);
    b.rec("f", 0, 0, 100, -1, 1000);
    let o = b.run();
    assert_eq!(o.duplicate, vec![false, false, true]);
    let m = &o.metrics.libraries[0];
    assert_eq!(
        (m.unpaired_reads_examined, m.unpaired_read_duplicates),
        (1, 1)
    );
}

#[test]
fn fragments_alone_keep_the_best() {
    let mut b = B::new();
    b.rec("f1", 0, 0, 100, -1, 5);
    b.rec("f2", 0, 0, 100, -1, 9);
    b.rec("f3", REV, 0, 100, -1, 1);
    assert_eq!(b.run().duplicate, vec![true, false, false]);
}

#[test]
fn one_mate_unmapped_competes_as_fragment_and_marks_its_template() {
    let mut b = B::new();
    b.pair("a", 100, 300, 1);
    // Mapped mate at 100 forward, mate unmapped; then the unmapped mate.
    b.rec("h", R1 | flags::MATE_UNMAPPED, 0, 100, 0, 99);
    b.rec("h", R2 | flags::UNMAPPED, 0, 0, 0, 99);
    let o = b.run();
    assert_eq!(o.duplicate, vec![false, false, true, true]);
    let m = &o.metrics.libraries[0];
    assert_eq!(m.unmapped_reads, 1);
    assert_eq!(m.unpaired_read_duplicates, 1);
}

#[test]
fn secondary_and_supplementary_follow_their_template() {
    let mut b = B::new();
    b.pair("a", 100, 300, 10);
    b.rec("b", R1 | MREV, 0, 100, 0, 1);
    b.rec("b", R1 | flags::SUPPLEMENTARY, 1, 5000, 0, 1);
    b.rec("b", R2 | REV, 0, 300, 0, 1);
    b.rec("b", R2 | flags::SECONDARY, 2, 7, 0, 1);
    let o = b.run();
    assert_eq!(o.duplicate, vec![false, false, true, true, true, true]);
    let m = &o.metrics.libraries[0];
    assert_eq!(m.secondary_or_supplementary_rds, 2);
    assert_eq!(m.read_pair_duplicates, 1);
}

#[test]
fn libraries_are_separate() {
    let mut groups = ReadGroups::new([
        (b"a".to_vec(), Some("L1".to_string())),
        (b"b".to_vec(), Some("L2".to_string())),
    ]);
    let (ra, rb) = (groups.resolve(Some(b"a")), groups.resolve(Some(b"b")));
    let mut md = MarkDuplicates::new(groups);
    for (name, rg) in [("x", ra), ("y", rb)] {
        for (flag, five) in [(R1 | MREV, 100), (R2 | REV, 300)] {
            md.push(&ReadInfo {
                name: name.as_bytes(),
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
    }
    let o = md.finish().unwrap();
    assert_eq!(o.duplicate, vec![false; 4]);
    let libs: Vec<_> = o
        .metrics
        .libraries
        .iter()
        .map(|m| m.library.as_str())
        .collect();
    assert_eq!(libs, ["L1", "L2"]);
}

#[test]
fn records_without_a_known_read_group_are_unknown_library() {
    let mut groups = ReadGroups::new([(b"a".to_vec(), None)]);
    let r = groups.resolve(None);
    assert_eq!(groups.library_name(r.library), UNKNOWN_LIBRARY);
    assert_eq!(r.ordinal, 0);
    let r = groups.resolve(Some(b"zz"));
    assert_eq!(r.ordinal, 1);
}

#[test]
fn optical_pair_is_counted() {
    let mut b = B::new();
    b.pair("M:1:1101:1000:1000", 100, 300, 10);
    b.pair("M:1:1101:1050:1050", 100, 300, 5);
    b.pair("M:1:1101:9000:1000", 100, 300, 5);
    let o = b.run();
    let m = &o.metrics.libraries[0];
    assert_eq!(m.read_pair_duplicates, 2);
    assert_eq!(m.read_pair_optical_duplicates, 1);
    assert_eq!(o.metrics.set_sizes.optical_sets.get(&2), Some(&1));
    assert_eq!(o.metrics.set_sizes.non_optical_sets.get(&2), Some(&1));
}

#[test]
fn index_listed_twice_holds_back_the_walk() {
    // Two same-name single-end records both duplicates of a better read:
    // the template index is listed twice, and Picard's walk then misses the
    // next duplicate template's first record.
    let mut b = B::new();
    b.rec("best", 0, 0, 100, -1, 50);
    b.rec("dd", 0, 0, 100, -1, 1);
    b.rec("dd", 0, 0, 100, -1, 1);
    b.rec("e", 0, 0, 100, -1, 1);
    let o = b.run();
    assert_eq!(o.duplicate, vec![false, true, true, false]);
    let _ = P;
}

#[test]
fn coordinate_order_marks_only_the_primary_records_of_an_end() {
    let mut groups = ReadGroups::new([(b"rg1".to_vec(), Some("lib1".to_string()))]);
    let rg = groups.resolve(Some(b"rg1"));
    let mut md = MarkDuplicates::with_order(groups, InputOrder::Coordinate);
    let recs = [
        ("a", R1 | MREV, 0, 100, 10),
        ("b", R1 | MREV, 0, 100, 1),
        ("b", R1 | flags::SUPPLEMENTARY, 0, 150, 1),
        ("h", R1 | flags::MATE_UNMAPPED, 0, 100, 99),
        ("h", R2 | flags::UNMAPPED, 0, 100, 99),
        ("a", R2 | REV, 0, 300, 10),
        ("b", R2 | REV, 0, 300, 1),
        ("u", flags::UNMAPPED, -1, 0, 0),
        // After the first unplaced unmapped record no ends are collected.
        ("z", 0, 0, 100, 0),
    ];
    for (name, flag, ref_id, five, score) in recs {
        md.push(&ReadInfo {
            name: name.as_bytes(),
            flag,
            ref_id,
            mate_ref_id: 0,
            five_prime: five,
            score,
            rg,
            barcodes: Default::default(),
        })
        .unwrap();
    }
    let o = md.finish().unwrap();
    // b's two primaries and h's mapped mate (a fragment at a pair's end).
    assert_eq!(
        o.duplicate,
        vec![false, true, false, true, false, false, true, false, false]
    );
    let m = &o.metrics.libraries[0];
    assert_eq!(
        (m.unpaired_reads_examined, m.unpaired_read_duplicates),
        (2, 1)
    );
    assert_eq!((m.read_pairs_examined, m.read_pair_duplicates), (2, 1));
}

#[test]
fn mates_whose_reference_fields_disagree_do_not_pair() {
    let mut b = B::new();
    b.pair("a", 100, 300, 10);
    // Read1 says its mate is on reference 1, but read2 is on reference 0.
    b.rec("b", R1 | MREV, 0, 100, 1, 50);
    b.rec("b", R2 | REV, 0, 300, 0, 50);
    let o = b.run();
    // No pair for b: a is alone in its pair set; b's ends are paired
    // fragments, never marked as fragments.
    assert_eq!(o.duplicate, vec![false; 4]);
    assert_eq!(o.metrics.set_sizes.all_sets.get(&1), Some(&1));
}

#[test]
fn reference_length_score_caps_and_penalises_qc_failures() {
    assert_eq!(reference_length_score(55, 0), 55);
    assert_eq!(reference_length_score(1 << 20, 0), 16383);
    assert_eq!(reference_length_score(55, flags::UNMAPPED), 0);
    assert_eq!(reference_length_score(55, flags::QC_FAIL), 55 - 16384);
}

/// A small deterministic generator (xorshift) for the spill tests.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Records of random templates (pairs, fragments, half-mapped pairs,
/// secondary and supplementary records, two libraries, names with
/// flow-cell locations) on few positions, so sets of every size occur; in
/// coordinate order when `coordinate` (mates far apart wait for each other).
#[allow(clippy::type_complexity)]
pub(crate) fn random_records(seed: u64, templates: usize, coordinate: bool) -> Vec<Rec> {
    let mut rng = Rng(seed);
    let mut recs = Vec::new();
    for t in 0..templates {
        let name = format!(
            "r{t}:1:FC:1:{}:{}:{}",
            1101 + rng.below(2),
            rng.below(400),
            rng.below(400)
        );
        let lib = rng.below(2) as usize;
        let a = 100 + 1000 * (t as i32 / 200) + 5 * rng.below(20) as i32;
        let b = a + 200 + 50 * rng.below(3) as i32;
        let ref1 = rng.below(2) as i32;
        let q = |rng: &mut Rng| 10 + rng.below(5) as i16;
        match rng.below(10) {
            0..=5 => {
                let (f1, f2) = if rng.below(2) == 0 {
                    (R1 | MREV, R2 | REV)
                } else {
                    (R1 | REV, R2 | MREV)
                };
                recs.push((name.clone(), f1, ref1, a, ref1, q(&mut rng), lib));
                if rng.below(8) == 0 {
                    recs.push((
                        name.clone(),
                        R1 | flags::SUPPLEMENTARY,
                        1 - ref1,
                        a,
                        ref1,
                        5,
                        lib,
                    ));
                }
                recs.push((name.clone(), f2, ref1, b, ref1, q(&mut rng), lib));
            }
            6 | 7 => recs.push((
                name.clone(),
                if rng.below(2) == 0 { 0 } else { REV },
                ref1,
                a,
                -1,
                q(&mut rng),
                lib,
            )),
            8 => {
                recs.push((
                    name.clone(),
                    R1 | flags::MATE_UNMAPPED,
                    ref1,
                    a,
                    ref1,
                    q(&mut rng),
                    lib,
                ));
                recs.push((name.clone(), R2 | flags::UNMAPPED, ref1, a, ref1, 0, lib));
            }
            _ => {
                recs.push((name.clone(), R1 | MREV, ref1, a, ref1, q(&mut rng), lib));
                recs.push((name.clone(), R1 | flags::SECONDARY, ref1, b, ref1, 3, lib));
                recs.push((name.clone(), R2 | REV, ref1, b, ref1, q(&mut rng), lib));
            }
        }
    }
    if coordinate {
        recs.sort_by_key(|r| (r.2 as u32, r.3));
    }
    recs
}

/// A generated record: name, flag, reference, 5' end, mate's reference,
/// score, library (0 or 1: [`two_libraries`]' read groups).
pub(crate) type Rec = (String, u16, i32, i32, i32, i16, usize);

/// Read groups `rg1` (library `lib1`) and `rg2` (`lib2`).
pub(crate) fn two_libraries() -> ReadGroups {
    ReadGroups::new([
        (b"rg1".to_vec(), Some("lib1".to_string())),
        (b"rg2".to_vec(), Some("lib2".to_string())),
    ])
}

/// The record `r` as the marker takes it, `rgs` the two read groups
/// resolved.
pub(crate) fn read_info<'a>(r: &'a Rec, rgs: &[RgInfo; 2]) -> ReadInfo<'a> {
    let (name, flag, ref_id, five, mate_ref, score, lib) = r;
    ReadInfo {
        name: name.as_bytes(),
        flag: *flag,
        ref_id: *ref_id,
        mate_ref_id: *mate_ref,
        five_prime: *five,
        score: *score,
        rg: rgs[*lib],
        barcodes: Default::default(),
    }
}

pub(crate) fn mark(
    recs: &[Rec],
    order: InputOrder,
    spill: Option<(&std::path::Path, usize)>,
) -> Outcome {
    mark_on(recs, order, spill, None)
}

fn mark_on(
    recs: &[Rec],
    order: InputOrder,
    spill: Option<(&std::path::Path, usize)>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
) -> Outcome {
    let mut groups = two_libraries();
    let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
    let mut md = MarkDuplicates::with_order(groups, order);
    md.set_track_optical(true);
    if let Some((dir, limit)) = spill {
        md.set_spill(dir, limit, true);
    }
    if let Some(pool) = pool {
        md.set_pool(pool);
    }
    for r in recs {
        md.push(&read_info(r, &rgs)).unwrap();
        if let Some((_, limit)) = spill {
            assert!(
                md.memory_bytes() <= limit,
                "{} > {limit}",
                md.memory_bytes()
            );
        }
    }
    md.finish().unwrap()
}

/// Ends sorted into many runs on disk (more than are merged at once, so
/// runs are merged into runs too) and merged back give the decisions,
/// optical verdicts and metrics of one in-memory sort; the files are gone.
#[test]
fn spilled_runs_merge_to_the_in_memory_decisions() {
    // Coordinate order keeps waiting mates in memory: a larger limit.
    for (order, coordinate, limit, runs) in [
        (
            InputOrder::Queryname,
            false,
            24 << 10,
            2 * spill::MAX_RUNS as u64,
        ),
        (InputOrder::Coordinate, true, 48 << 10, 8),
    ] {
        let recs = random_records(7, 6000, coordinate);
        let dir = std::env::temp_dir().join(format!(
            "alnsort-markdup-test-{}-{coordinate}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let memory = mark(&recs, order, None);
        assert_eq!(memory.spill, SpillStats::default());
        let spilled = mark(&recs, order, Some((&dir, limit)));
        assert!(
            spilled.spill.runs > runs,
            "only {} runs",
            spilled.spill.runs
        );
        assert!(memory.duplicate.count_ones() > 500);
        assert!(memory.optical.as_ref().unwrap().count_ones() > 0);
        assert_eq!(spilled.duplicate, memory.duplicate);
        assert_eq!(spilled.optical, memory.optical);
        assert_eq!(spilled.metrics, memory.metrics);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "spill files left behind"
        );
        std::fs::remove_dir(&dir).unwrap();
    }
}

/// The read ends sorted, and their duplicate sets walked, in parallel on a
/// pool give the decisions, optical verdicts and metrics of the sort and
/// the walk on the calling thread.
#[test]
fn ends_sorted_on_a_pool_give_the_same_decisions() {
    let pool = std::sync::Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap(),
    );
    for (order, coordinate) in [
        (InputOrder::Queryname, false),
        (InputOrder::Coordinate, true),
    ] {
        let recs = random_records(11, 20000, coordinate);
        let serial = mark(&recs, order, None);
        let parallel = mark_on(&recs, order, None, Some(std::sync::Arc::clone(&pool)));
        assert!(serial.duplicate.count_ones() > 2000);
        assert_eq!(parallel.duplicate, serial.duplicate);
        assert_eq!(parallel.optical, serial.optical);
        assert_eq!(parallel.metrics, serial.metrics);
    }
}

/// Coordinate order: mates waiting for a mate on the reference being read
/// are not spilled; when they crowd out the ends, the run stops saying so.
#[test]
fn waiting_mates_beyond_the_limit_are_refused() {
    let mut recs = Vec::new();
    for t in 0..2000 {
        recs.push((format!("m{t}"), R1 | MREV, 0, 100 + t, 0, 30, 0));
    }
    let mut groups = ReadGroups::new([(b"rg1".to_vec(), Some("lib1".to_string()))]);
    let rg = groups.resolve(Some(b"rg1"));
    let mut md = MarkDuplicates::with_order(groups, InputOrder::Coordinate);
    let dir = std::env::temp_dir();
    md.set_spill(&dir, 64 << 10, true);
    let mut err = None;
    for (name, flag, ref_id, five, mate_ref, score, _) in &recs {
        let r = md.push(&ReadInfo {
            name: name.as_bytes(),
            flag: *flag,
            ref_id: *ref_id,
            mate_ref_id: *mate_ref,
            five_prime: *five,
            score: *score,
            rg,
            barcodes: Default::default(),
        });
        if let Err(e) = r {
            err = Some(e);
            break;
        }
    }
    let e = err.expect("waiting mates beyond the limit").to_string();
    assert!(e.contains("mates wait for their other half"), "{e}");
}

/// Once the ends' buffer is full, the other parts (record slots, bitsets)
/// still grow a little with every record: that must not make every record
/// spill a handful of ends. Each spill writes a good part of the limit.
#[test]
fn spills_write_a_good_part_of_the_limit_each() {
    let recs = random_records(11, 40_000, false);
    let dir =
        std::env::temp_dir().join(format!("alnsort-markdup-test-{}-size", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let limit = 512 << 10;
    let o = mark(&recs, InputOrder::Queryname, Some((&dir, limit)));
    std::fs::remove_dir(&dir).unwrap();
    // Each spill writes a pair run and a fragment run.
    let spills = o.spill.runs / 2;
    assert!(spills >= 4, "{:?}", o.spill);
    // The ends' bytes before compression: what the limit bounds.
    let raw = o.spill.ends * spill::END_BYTES as u64;
    assert!(
        raw / spills > limit as u64 / 4,
        "{} spills of {} bytes on average",
        spills,
        raw / spills
    );
    assert!(
        o.spill.bytes < raw,
        "the end runs are compressed: {:?}",
        o.spill
    );
}

/// Without a hard limit (`-m` alone), waiting mates beyond it are kept and
/// the ends still spill: the answer is the in-memory one.
#[test]
fn waiting_mates_beyond_a_soft_limit_are_kept() {
    let recs = random_records(5, 6000, true);
    let dir =
        std::env::temp_dir().join(format!("alnsort-markdup-test-{}-soft", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let memory = mark(&recs, InputOrder::Coordinate, None);
    let mut groups = two_libraries();
    let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
    let mut md = MarkDuplicates::with_order(groups, InputOrder::Coordinate);
    md.set_track_optical(true);
    md.set_spill(&dir, 8 << 10, false);
    for r in &recs {
        md.push(&read_info(r, &rgs)).unwrap();
    }
    let soft = md.finish().unwrap();
    std::fs::remove_dir(&dir).unwrap();
    assert!(soft.spill.runs > 2, "{:?}", soft.spill);
    assert_eq!(soft.duplicate, memory.duplicate);
    assert_eq!(soft.optical, memory.optical);
    assert_eq!(soft.metrics, memory.metrics);
}

/// A fragment end as the waiting-mate tests park it: only its index matters.
fn waiting_end(r1_index: i64) -> End {
    End {
        library: 0,
        barcode: 0,
        r1_barcode: 0,
        r2_barcode: 0,
        orientation: F,
        r1_ref: 0,
        r1_coord: 0,
        r2_ref: -1,
        r2_coord: -1,
        loc: Location::NONE,
        optical_orientation: -1,
        score: 0,
        r1_index,
        r2_index: -1,
        pair: false,
    }
}

/// The waiting mates (the most recent one apart, the others in a map)
/// answer every sequence of takes and waits as one map keyed by
/// (reference, read group, name) does, overwrites included. Each step is
/// a record of the name, as the pushes give them (a run of one name is a
/// template, in which a waiting mate's name is not compared again).
#[test]
fn waiting_mates_behave_as_one_map() {
    let mut md = MarkDuplicates::new(ReadGroups::default());
    let mut model: HashMap<(i32, i16, Vec<u8>), i64> = HashMap::new();
    let mut rng = Rng(5);
    let names: [&[u8]; 3] = [b"a", b"b", b"c"];
    let mut hits = 0;
    for step in 0..20_000i64 {
        let key = (
            rng.below(3) as i32,
            rng.below(2) as i16,
            names[rng.below(3) as usize],
        );
        md.templates.step(step, key.2);
        if rng.below(2) == 0 {
            let got = md.take_waiting(key.0, key.1, key.2).map(|e| e.r1_index);
            let want = model.remove(&(key.0, key.1, key.2.to_vec()));
            assert_eq!(got, want, "step {step}");
            hits += got.is_some() as u32;
        } else {
            let end = waiting_end(step);
            md.add_waiting(key.0, key.1, key.2, end);
            model.insert((key.0, key.1, key.2.to_vec()), step);
        }
        assert_eq!(md.waiting(), model.len(), "step {step}");
    }
    assert!(hits > 1000);
}

/// A name parsed without the read group and completed with it is the
/// location parsed with it, for every parser, names that parse or not;
/// and records pushed with their names parsed elsewhere get the same
/// decisions, optical verdicts and metrics.
#[test]
fn names_parsed_by_the_caller_give_the_same_answer() {
    let parsers = [
        optical::NameParser::Default,
        optical::NameParser::Disabled,
        optical::NameParser::from_picard_arg(r"[a-z0-9]+:(\d+):(\d+):(\d+)").unwrap(),
        optical::NameParser::from_picard_arg(r"(\w+):(\d+):(\w+)").unwrap(),
    ];
    let names: [&[u8]; 6] = [
        b"r1:1:FC:1:1101:200:300",
        b"a:1:2:3",
        b"a:1:x:3",
        b"no-fields",
        b"A00917:42:HKWJ3DSX2:1:1314:70000:29790",
        b"",
    ];
    for p in &parsers {
        for name in names {
            for rg in [-1i16, 0, 1, 7] {
                assert_eq!(
                    p.parse(name).with_read_group(rg),
                    p.location(name, rg),
                    "{name:?} read group {rg}"
                );
            }
        }
    }
    let recs = random_records(13, 6000, false);
    let outcome = |parsed: bool| {
        let mut groups = two_libraries();
        let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
        let mut md = MarkDuplicates::new(groups);
        md.set_track_optical(true);
        let parser = optical::NameParser::Default;
        for rec in &recs {
            let r = read_info(rec, &rgs);
            if parsed {
                md.push_parsed(&r, parser.parse(r.name)).unwrap();
            } else {
                md.push(&r).unwrap();
            }
        }
        md.finish().unwrap()
    };
    let (a, b) = (outcome(false), outcome(true));
    assert!(a.optical.as_ref().unwrap().count_ones() > 0);
    assert_eq!(a.duplicate, b.duplicate);
    assert_eq!(a.optical, b.optical);
    assert_eq!(a.metrics, b.metrics);
}

/// Coordinate order with many pairs whose mates are on later references,
/// under a limit their waiting mates alone exceed: those are spilled per
/// mate reference and read back when reading reaches it, and the
/// decisions, optical verdicts and metrics are those of the run without a
/// limit; the spill directory is left empty.
#[test]
fn waiting_mates_for_later_references_spill_and_come_back() {
    let mut rng = Rng(17);
    let mut recs = Vec::new();
    for t in 0..12_000 {
        let name = format!(
            "x{t}:1:FC:1:{}:{}:{}",
            1101 + rng.below(2),
            rng.below(300),
            rng.below(300)
        );
        let lib = rng.below(2) as usize;
        let ref1 = rng.below(16) as i32;
        // Most mates on another reference, some on the same one.
        let ref2 = if rng.below(4) == 0 {
            ref1
        } else {
            rng.below(16) as i32
        };
        let a = 100 + 5 * rng.below(6) as i32;
        let b = 100 + 5 * rng.below(6) as i32;
        let q = |rng: &mut Rng| 10 + rng.below(5) as i16;
        let (f1, f2) = if rng.below(2) == 0 {
            (R1 | MREV, R2 | REV)
        } else {
            (R1 | REV, R2 | MREV)
        };
        recs.push((name.clone(), f1, ref1, a, ref2, q(&mut rng), lib));
        recs.push((name.clone(), f2, ref2, b, ref1, q(&mut rng), lib));
        if rng.below(10) == 0 {
            // A lone fragment at the same place.
            recs.push((format!("f{t}"), 0, ref1, a, -1, q(&mut rng), lib));
        }
    }
    // Two mates waiting under the same key (a name used twice): the later
    // one replaces the earlier, spilled or not (unless it is asked to be an
    // error: a_mate_waiting_twice_in_coordinate_order_is_an_error).
    recs.push(("dup:1:FC:1:1101:5:5".into(), R1 | MREV, 0, 150, 3, 30, 0));
    recs.push(("dup:1:FC:1:1101:5:5".into(), R1 | MREV, 1, 150, 3, 20, 0));
    recs.push(("dup:1:FC:1:1101:5:5".into(), R2 | REV, 3, 400, 0, 30, 0));
    recs.sort_by_key(|r| (r.2 as u32, r.3));
    let dir =
        std::env::temp_dir().join(format!("alnsort-markdup-test-{}-wait", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let memory = mark(&recs, InputOrder::Coordinate, None);
    let limit = 384 << 10;
    let spilled = mark(&recs, InputOrder::Coordinate, Some((&dir, limit)));
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "spill files left behind"
    );
    std::fs::remove_dir(&dir).unwrap();
    assert!(spilled.spill.waiting > 1000, "{:?}", spilled.spill);
    assert_eq!(memory.spill.waiting, 0);
    assert!(memory
        .metrics
        .libraries
        .iter()
        .any(|m| m.read_pair_duplicates > 100));
    assert_eq!(spilled.duplicate, memory.duplicate);
    assert_eq!(spilled.optical, memory.optical);
    assert_eq!(spilled.metrics, memory.metrics);
}

/// Coordinate order: with waiting mates spilled at random moments and read
/// back as reading reaches their reference, the waiting mates still answer
/// every take and wait as one map does, overwrites of spilled keys (twice
/// over, or by a mate in memory) included; nothing is left on disk.
#[test]
fn spilled_waiting_mates_behave_as_one_map() {
    let dir = std::env::temp_dir().join(format!(
        "alnsort-markdup-test-{}-waitmap",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(9);
    let names: [&[u8]; 3] = [b"a", b"b", b"c"];
    let (mut hits, mut spilled) = (0, 0);
    for run in 0..40i64 {
        let mut md = MarkDuplicates::with_order(ReadGroups::default(), InputOrder::Coordinate);
        md.set_spill(&dir, 1 << 30, true);
        let mut model: HashMap<(i32, i16, Vec<u8>), i64> = HashMap::new();
        md.reach_reference(0).unwrap();
        for step in 0..2000i64 {
            let current = md.current_ref;
            let rg = rng.below(2) as i16;
            let name = names[rng.below(3) as usize];
            match rng.below(40) {
                0 if current < 5 => md.reach_reference(current + 1).unwrap(),
                1 => md.spill_waiting().unwrap(),
                2..=19 => {
                    let got = md.take_waiting(current, rg, name).map(|e| e.r1_index);
                    let want = model.remove(&(current, rg, name.to_vec()));
                    assert_eq!(got, want, "run {run} step {step}");
                    hits += got.is_some() as u32;
                }
                _ => {
                    let ref_id = current + rng.below((6 - current) as u64) as i32;
                    let end = waiting_end(run * 10_000 + step);
                    md.add_waiting(ref_id, rg, name, end);
                    model.insert((ref_id, rg, name.to_vec()), end.r1_index);
                }
            }
        }
        md.reach_reference(5).unwrap();
        assert_eq!(md.waiting(), model.len(), "run {run}");
        for ((ref_id, rg, name), want) in model {
            assert_eq!(
                md.take_waiting(ref_id, rg, &name).map(|e| e.r1_index),
                Some(want),
                "run {run}"
            );
        }
        spilled += md.spill_stats().waiting;
    }
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "spill files left behind"
    );
    std::fs::remove_dir(&dir).unwrap();
    assert!(hits > 1000 && spilled > 1000, "{hits} {spilled}");
}

/// A mate waiting under a key another mate already waits under (a
/// template twice in coordinate-sorted input): Picard's waiting map for
/// coordinate-sorted input stops, and so does the marker when asked
/// (several merged inputs), naming the read, the mate's reference and the
/// read group; whether the first one waits in memory or was spilled.
/// Name-grouped input replaces the first, as Picard's map for it does.
#[test]
fn a_mate_waiting_twice_in_coordinate_order_is_an_error() {
    let dir =
        std::env::temp_dir().join(format!("alnsort-markdup-test-{}-twice", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (order, spill_first) in [
        (InputOrder::Coordinate, false),
        (InputOrder::Coordinate, true),
        (InputOrder::Queryname, false),
    ] {
        let mut groups = ReadGroups::new([(b"rg1".to_vec(), Some("lib1".to_string()))]);
        let rg = groups.resolve(Some(b"rg1"));
        let mut md = MarkDuplicates::with_order(groups, order);
        md.set_spill(&dir, 1 << 30, true);
        md.set_waiting_twice_fails(true);
        let read = |pos| ReadInfo {
            name: b"x:1:1:1:1",
            flag: R1 | MREV,
            ref_id: 0,
            mate_ref_id: 1,
            five_prime: pos,
            score: 30,
            rg,
            barcodes: Default::default(),
        };
        md.push(&read(100)).unwrap();
        if spill_first {
            md.spill_waiting().unwrap();
        }
        let second = md.push(&read(100)).and_then(|()| md.reach_reference(1));
        if order == InputOrder::Queryname {
            second.unwrap();
            assert_eq!(md.waiting(), 1);
            continue;
        }
        let e = second.expect_err("a mate waiting twice").to_string();
        assert!(
            e.contains("read x:1:1:1:1 waits for its mate on reference 1 in read group rg1")
                && e.contains("Value was put into PairInfoMap more than once"),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fragment ends of records whose mate is mapped are kept by their set
/// keys: packed (no barcodes, small library and reference ids, any 5' end)
/// or whole, and each comes back exactly, as a fragment end whose mate is
/// mapped (what the fragment walk asks of it).
#[test]
fn mated_fragment_keys_come_back_whole() {
    let mut mated = MatedFrags::default();
    let mut want = Vec::new();
    for (library, barcodes, r1_ref, r1_coord, orientation, packed) in [
        (0, (0, 0, 0), 0, -5, F, true),
        (127, (0, 0, 0), (1 << 24) - 1, i32::MAX, R, true),
        (3, (0, 0, 0), 2, i32::MIN, F, true),
        (128, (0, 0, 0), 1, 10, R, false),
        (1, (7, 0, -2), 1, 10, F, false),
        (1, (0, 0, 0), 1 << 24, 10, F, false),
    ] {
        let key = (
            library,
            barcodes.0,
            barcodes.1,
            barcodes.2,
            r1_ref,
            r1_coord,
            orientation,
        );
        let before = mated.packed.len();
        mated.push(&MatedFrags::end(key));
        assert_eq!(mated.packed.len() > before, packed, "{key:?}");
        want.push(key);
    }
    let mut got: Vec<FragKey> = mated.keys().collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    let e = MatedFrags::end(want[0]);
    assert!(
        e.is_paired() && !e.pair,
        "a fragment end whose mate is mapped"
    );
}
