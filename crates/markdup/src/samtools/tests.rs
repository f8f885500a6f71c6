//! Unit tests of the samtools markdup port: positions, names, tags, statistics, and small marking cases.

use super::coords::*;
use super::stats::estimate_library_size;
use super::*;
use alnsort_bam::aux::Aux;
use alnsort_bam::header::{parse_sam_header, Header};
use alnsort_bam::sam_parse::parse_sam_record;

fn header() -> Header {
    parse_sam_header(
        [
            "@HD\tVN:1.6\tSO:coordinate",
            "@SQ\tSN:chr1\tLN:10000",
            "@RG\tID:a\tLB:l1",
            "@RG\tID:b\tLB:l2",
        ]
        .iter()
        .map(|l| l.as_bytes()),
    )
    .unwrap()
}

fn rec(h: &Header, line: &str) -> Vec<u8> {
    let mut out = Vec::new();
    parse_sam_record(line.as_bytes(), h, &h.ref_lookup(), &mut out).unwrap();
    out
}

/// Runs the marker over SAM lines; the records out as (name, flag, tags).
fn mark(opts: Options, lines: &[&str]) -> (Vec<(String, u16, Vec<u8>)>, Stats) {
    let h = header();
    let mut m = SamtoolsMarker::new(opts, &[b"a", b"b"]);
    let mut out = Vec::new();
    let take = |m: &mut SamtoolsMarker, out: &mut Vec<(String, u16, Vec<u8>)>| {
        while let Some(r) = m.pop_ready() {
            let v = RecordRef::with_block_size(&r);
            out.push((text(v.read_name()), v.flag(), v.aux_bytes().to_vec()));
        }
    };
    for l in lines {
        m.push(rec(&h, l)).unwrap();
        take(&mut m, &mut out);
    }
    m.finish().unwrap();
    take(&mut m, &mut out);
    (out, m.stats())
}

fn q(n: usize, c: char) -> String {
    std::iter::repeat_n(c, n).collect()
}

#[test]
fn strtol_reads_like_c() {
    assert_eq!(strtol(b"123:4"), Some((123, 3)));
    assert_eq!(strtol(b"  -7x"), Some((-7, 4)));
    assert_eq!(strtol(b"+0"), Some((0, 2)));
    assert_eq!(strtol(b"x1"), None);
    assert_eq!(strtol(b"-"), None);
    assert_eq!(strtol(b"99999999999999999999").map(|v| v.0), Some(i64::MAX));
}

#[test]
fn names_need_3_4_6_or_7_colons() {
    let c = colon_coords(b"1:1101:200:300").unwrap();
    assert_eq!((c.x, c.y, c.t_end), (200, 300, 7));
    let c = colon_coords(b"M:1:1101:200:300").unwrap();
    assert_eq!((c.x, c.y), (200, 300));
    let c = colon_coords(b"M:R:FC:1:1101:200:300").unwrap();
    assert_eq!(
        (c.x, c.y, &b"M:R:FC:1:1101:200:300"[..c.t_end]),
        (200, 300, &b"M:R:FC:1:1101:"[..])
    );
    let c = colon_coords(b"M:R:FC:1:1101:200:300:ACGT").unwrap();
    assert_eq!((c.x, c.y), (200, 300));
    assert!(matches!(
        colon_coords(b"M:R:FC:1101:200:300"),
        Err(NameFailure::Warn(_))
    ));
    assert!(matches!(colon_coords(b"read1"), Err(NameFailure::Warn(_))));
    assert!(matches!(
        colon_coords(b"a:b:x:300"),
        Err(NameFailure::Warn(_))
    ));
}

#[test]
fn regex_coords_follow_the_order() {
    let rx = CoordRegex::new("([0-9]+):([0-9]+):([0-9]+)$", "txy").unwrap();
    let c = regex_coords(&rx, b"M:5:17:23").unwrap();
    assert_eq!((c.x, c.y, c.t_beg, c.t_end), (17, 23, 2, 3));
    let rx = CoordRegex::new("([0-9]+):([0-9]+)$", "yx").unwrap();
    assert_eq!(regex_coords(&rx, b"M:17:23").unwrap().x, 17);
    assert_eq!(regex_coords(&rx, b"none"), Err(NameFailure::NoMatch));
    assert!(CoordRegex::new("(a)", "abc").is_err());
}

#[test]
fn mate_ends_from_mc_text() {
    // 0-based mpos 99: start 100 less leading clips, end after ref ops and trailing clips.
    assert_eq!(mate_unclipped_start(99, b"5H3S20M"), 92);
    assert_eq!(
        mate_unclipped_end(99, b"5H3S20M2D5M4S1H"),
        99 + 20 + 2 + 5 + 4 + 1
    );
    assert_eq!(mate_unclipped_start(99, b"*"), 100);
    assert_eq!(mate_unclipped_end(99, b"10M5I10M"), 119);
}

#[test]
fn own_unclipped_ends_count_hard_clips() {
    let h = header();
    let r = rec(
        &h,
        "r\t16\tchr1\t101\t60\t2H3S10M4S1H\t*\t0\t0\tAAAAAAAAAAAAAAAAA\t*",
    );
    let v = RecordRef::with_block_size(&r);
    assert_eq!(unclipped_start(v), 101 - 5);
    assert_eq!(unclipped_end(v), 100 + 10 + 5);
}

#[test]
fn jenkins_hash_of_known_strings() {
    // Bob Jenkins' one-at-a-time: "a" -> 0xca2e9442.
    assert_eq!(one_at_a_time(b"a"), 0xca2e_9442);
    assert_eq!(one_at_a_time(b""), 0);
}

#[test]
fn duplicate_count_255_is_type_s() {
    let h = header();
    let mut r = rec(&h, "r\t0\tchr1\t1\t60\t4M\t*\t0\t0\tACGT\t*");
    tags::update_int(&mut r, *b"dc", 254);
    assert_eq!(
        RecordRef::with_block_size(&r)
            .aux()
            .find(*b"dc")
            .unwrap()
            .ty,
        b'C'
    );
    tags::update_int(&mut r, *b"dc", 255);
    let f = RecordRef::with_block_size(&r).aux().find(*b"dc").unwrap();
    assert_eq!((f.ty, f.int()), (b'S', Some(255)));
    // An existing wider field keeps its size.
    tags::update_int(&mut r, *b"dc", 3);
    let f = RecordRef::with_block_size(&r).aux().find(*b"dc").unwrap();
    assert_eq!((f.ty, f.int()), (b'S', Some(3)));
}

#[test]
fn library_size_as_samtools() {
    assert_eq!(estimate_library_size(0, 0, 0).0, 0);
    assert!(estimate_library_size(10, 0, 0).1.is_some());
    // 100 pairs, 10 duplicate pairs: between the unique pairs and ten times them.
    let (n, w) = estimate_library_size(200, 20, 0);
    assert!(w.is_none());
    assert!((90..2000).contains(&n), "{n}");
}

#[test]
fn stats_text_has_samtools_keys_in_order() {
    let s = Stats {
        ungrouped: StatsBlock {
            read: 4,
            written: 4,
            ..Default::default()
        },
        groups: vec![],
        by_group: false,
    };
    let (t, _) = s.text("samtools markdup a b");
    let keys: Vec<&str> = t.lines().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(keys[0], "COMMAND");
    assert_eq!(keys[1..4], ["READ", "WRITTEN", "EXCLUDED"]);
    assert_eq!(keys[keys.len() - 2], "ESTIMATED_LIBRARY_SIZE");
    assert!(t.ends_with("\n\n"));
    let (j, _) = s.json("x");
    assert!(j.starts_with("{\n    \"COMMAND\": \"x\",\n    \"READ\": 4,\n"));
    assert!(j.ends_with("    \"ESTIMATED_LIBRARY_SIZE\": 0\n}\n"));
}

#[test]
fn pair_tie_goes_to_the_smaller_name_and_single_loses_to_pair() {
    let qa = q(10, 'I');
    let lines = [
        format!("b\t99\tchr1\t100\t60\t10M\t=\t200\t110\tAAAAAAAAAA\t{qa}\tMC:Z:10M\tms:i:400"),
        format!("a\t99\tchr1\t100\t60\t10M\t=\t200\t110\tAAAAAAAAAA\t{qa}\tMC:Z:10M\tms:i:400"),
        // A single at the same 5' end, better quality: still the duplicate.
        format!(
            "s\t0\tchr1\t100\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t{}",
            q(10, 'z')
        ),
        format!("b\t147\tchr1\t200\t60\t10M\t=\t100\t-110\tAAAAAAAAAA\t{qa}\tMC:Z:10M\tms:i:400"),
        format!("a\t147\tchr1\t200\t60\t10M\t=\t100\t-110\tAAAAAAAAAA\t{qa}\tMC:Z:10M\tms:i:400"),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let opts = Options {
        tag_original: true,
        duplicate_count: true,
        ..Options::default()
    };
    let (out, stats) = mark(opts, &refs);
    let names: Vec<&str> = out.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(names, ["b", "a", "s", "b", "a"], "input order kept");
    let dup = |i: usize| out[i].1 & flags::DUPLICATE != 0;
    assert!(dup(0) && !dup(1) && dup(2) && dup(3) && !dup(4));
    let t = stats.total();
    assert_eq!(
        (t.paired, t.single, t.duplicate_pair, t.duplicate_single),
        (4, 1, 2, 1)
    );
    // The kept read's dc counts itself and the pair it beat; the single was
    // absorbed by the first pair read in the single map ("b", itself a
    // duplicate), as samtools counts it (checked against samtools 1.24).
    let dc = |i: usize| Aux::new(&out[i].2).find(*b"dc").and_then(|f| f.int());
    assert_eq!(dc(1), Some(2));
    assert_eq!(dc(4), Some(2));
    assert_eq!(dc(0), None);
    let do_of = |i: usize| {
        Aux::new(&out[i].2)
            .find(*b"do")
            .and_then(|f| f.string())
            .map(<[u8]>::to_vec)
    };
    assert_eq!(do_of(0).as_deref(), Some(&b"a"[..]));
    assert_eq!(do_of(2).as_deref(), Some(&b"a"[..]));
}

#[test]
fn singles_tie_keeps_the_earlier_and_window_bounds_matching() {
    let lines = [
        format!(
            "z\t0\tchr1\t100\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t{}",
            q(10, 'I')
        ),
        format!(
            "y\t0\tchr1\t100\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t{}",
            q(10, 'I')
        ),
        // A read 500 bases on moves the window past the first two.
        format!(
            "w\t0\tchr1\t600\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t{}",
            q(10, 'I')
        ),
        // Same 5' end through a 600-base soft clip (and a better score):
        // its partners have left the window, so it is not compared.
        format!(
            "x\t0\tchr1\t700\t60\t600S10M\t*\t0\t0\t{}\t*",
            "A".repeat(610)
        ),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (out, stats) = mark(Options::default(), &refs);
    let flags_out: Vec<u16> = out.iter().map(|o| o.1).collect();
    assert_eq!(flags_out, [0, flags::DUPLICATE, 0, 0]);
    assert_eq!(stats.total().duplicate_single, 1);
}

#[test]
fn out_of_order_and_missing_mc_are_errors() {
    let h = header();
    let mut m = SamtoolsMarker::new(Options::default(), &[]);
    m.push(rec(&h, "a\t0\tchr1\t200\t60\t4M\t*\t0\t0\tACGT\t*"))
        .unwrap();
    let e = m
        .push(rec(&h, "b\t0\tchr1\t100\t60\t4M\t*\t0\t0\tACGT\t*"))
        .unwrap_err();
    assert!(matches!(e, Error::NotSorted { record: 2, .. }), "{e}");
    let mut m = SamtoolsMarker::new(Options::default(), &[]);
    let e = m
        .push(rec(&h, "p\t99\tchr1\t100\t60\t4M\t=\t200\t104\tACGT\t*"))
        .unwrap_err();
    assert!(matches!(e, Error::NoMateCigar { record: 1, .. }), "{e}");
}

#[test]
fn read_groups_without_rg_lines_are_dropped_with_samtools_message() {
    let mut m = SamtoolsMarker::new(
        Options {
            read_groups: true,
            ..Options::default()
        },
        &[],
    );
    let w = m.take_warnings();
    assert!(w.iter().any(|l| l.contains("no read groups found")));
    m.finish().unwrap();
    assert!(!m.stats().by_group);
}

#[test]
fn move_umi_takes_the_umi_and_one_separator_out_of_the_name() {
    let h = header();
    let opts = Options {
        barcode: Barcode::Regex(build_regex(BARCODE_NAME_REGEX).unwrap()),
        move_umi: Some(b':'),
        ..Options::default()
    };
    let m = SamtoolsMarker::new(opts, &[]);
    let mut r = rec(
        &h,
        "M:1:FC:1:1101:20:30:ACGTAC\t0\tchr1\t1\t60\t4M\t*\t0\t0\tACGT\t*\tRG:Z:a",
    );
    m.move_umi(&mut r);
    let v = RecordRef::with_block_size(&r);
    assert_eq!(v.read_name(), b"M:1:FC:1:1101:20:30");
    assert_eq!(
        v.aux().find(*b"RX").and_then(|f| f.string()),
        Some(&b"ACGTAC"[..])
    );
    assert_eq!(
        v.aux().find(*b"RG").and_then(|f| f.string()),
        Some(&b"a"[..])
    );
    assert_eq!(v.seq_bytes().len(), 2);
    // No UMI in the name: nothing changes.
    let mut r = rec(&h, "plain\t0\tchr1\t1\t60\t4M\t*\t0\t0\tACGT\t*");
    let before = r.clone();
    m.move_umi(&mut r);
    assert_eq!(r, before);
}
