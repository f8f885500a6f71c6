use super::*;

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
