//! Cases whose answers samtools 1.24 (pysam 0.24.1's `pysam.fixmate`) gave.

use super::*;
use alnsort_bam::header::{parse_sam_header, Header};
use alnsort_bam::sam_format::format_sam_record;
use alnsort_bam::sam_parse::parse_sam_record;

const HEADER: &str = "@HD\tVN:1.6\tSO:queryname\n@SQ\tSN:chr1\tLN:1000\n@SQ\tSN:chr2\tLN:1000";

fn header() -> Header {
    parse_sam_header(HEADER.lines().map(str::as_bytes)).unwrap()
}

/// Runs fixmate with `opts` on the template given as SAM lines (fields
/// separated by spaces), returns the SAM lines.
fn fix(opts: Options, sam: &str) -> Vec<String> {
    let h = header();
    let lookup = h.ref_lookup();
    let mut recs: Vec<Vec<u8>> = sam
        .trim()
        .lines()
        .map(|l| {
            let line = l.split_whitespace().collect::<Vec<_>>().join("\t");
            let mut out = Vec::new();
            parse_sam_record(line.as_bytes(), &h, &lookup, &mut out).unwrap();
            out
        })
        .collect();
    let lens = h.refs().iter().map(|r| r.len as i64).collect();
    Fixmate::new(opts, lens).unwrap().fix_template(&mut recs);
    recs.iter()
        .map(|r| {
            let mut out = Vec::new();
            format_sam_record(RecordRef::with_block_size(r), &h, &mut out);
            String::from_utf8(out)
                .unwrap()
                .trim_end()
                .replace('\t', " ")
        })
        .collect()
}

fn opts() -> Options {
    Options::default()
}

const Q: &str = "IIIIIIIIII";
const S: &str = "ACGTACGTAC";

#[test]
fn pair_with_supplementaries_of_both_segments() {
    let got = fix(
        Options {
            mate_score: true,
            ..opts()
        },
        &format!(
            "r1 65 chr1 100 30 10M * 0 0 {S} {Q}\n\
             r1 2177 chr2 300 20 5S5M * 0 0 {S} {Q}\n\
             r1 129 chr1 300 40 4M2D6M * 0 0 {S} {Q}\n\
             r1 2193 chr2 500 20 5H5M * 0 0 ACGTA IIIII\n\
             r1 256 chr1 700 20 10M * 0 0 * *"
        ),
    );
    assert_eq!(
        got,
        [
            format!("r1 65 chr1 100 30 10M = 300 200 {S} {Q} MQ:i:40 MC:Z:4M2D6M ms:i:400"),
            format!("r1 2177 chr2 300 20 5S5M chr1 100 0 {S} {Q} MQ:i:30 MC:Z:10M"),
            format!("r1 129 chr1 300 40 4M2D6M = 100 -200 {S} {Q} MQ:i:30 MC:Z:10M ms:i:400"),
            "r1 2193 chr2 500 20 5H5M chr1 100 0 ACGTA IIIII MQ:i:30 MC:Z:10M".to_string(),
            "r1 256 chr1 700 20 10M * 0 0 * *".to_string(),
        ]
    );
}

#[test]
fn unmapped_mate_and_supplementary_without_paired_flag() {
    let got = fix(
        opts(),
        &format!(
            "a 65 chr1 100 30 10M * 0 0 {S} {Q}\n\
             a 2048 chr2 300 20 5S5M * 0 0 {S} {Q} MQ:i:3 XX:i:1 MC:Z:1M\n\
             a 133 * 0 0 * * 0 0 {S} {Q}\n\
             a 2176 chr2 500 20 5H5M * 0 0 ACGTA IIIII"
        ),
    );
    assert_eq!(
        got,
        [
            format!("a 73 chr1 100 30 10M = 100 0 {S} {Q} MC:Z:*"),
            format!("a 2048 chr2 300 20 5S5M * 0 0 {S} {Q} MQ:i:3 XX:i:1 MC:Z:1M"),
            format!("a 133 chr1 100 0 * = 100 0 {S} {Q} MQ:i:30 MC:Z:10M"),
            "a 2176 chr2 500 20 5H5M * 0 0 ACGTA IIIII".to_string(),
        ]
    );
}

#[test]
fn supplementary_takes_the_other_segments_primary_and_keeps_stale_tags() {
    let got = fix(
        Options {
            mate_score: true,
            ..opts()
        },
        &format!(
            "a 65 chr1 100 30 10M * 0 0 {S} {Q}\n\
             a 2049 chr2 300 20 5S5M chr1 1 5 {S} {Q} MQ:i:3 XX:i:1 MC:Z:1M ms:i:5\n\
             a 133 * 0 0 * * 0 0 {S} {Q}"
        ),
    );
    assert_eq!(
        got[1],
        format!("a 2057 chr2 300 20 5S5M chr1 100 5 {S} {Q} MQ:i:3 XX:i:1 ms:i:5 MC:Z:*")
    );
}

#[test]
fn orphan_keeps_paired_flag_and_supplementary_of_absent_segment_is_untouched() {
    let got = fix(
        opts(),
        &format!(
            "c 99 chr1 100 30 10M chr1 500 400 {S} {Q}\n\
             c 2113 chr2 300 20 5S5M chr1 5 7 {S} {Q}\n\
             c 2177 chr2 500 20 5H5M chr1 5 9 ACGTA IIIII"
        ),
    );
    assert_eq!(
        got,
        [
            format!("c 65 chr1 100 30 10M * 0 0 {S} {Q}"),
            format!("c 2113 chr2 300 20 5S5M chr1 5 7 {S} {Q}"),
            "c 2177 chr2 500 20 5H5M chr1 100 9 ACGTA IIIII MQ:i:30 MC:Z:10M".to_string(),
        ]
    );
}

#[test]
fn three_primaries_pair_with_the_first_and_ct_moves() {
    let got = fix(
        Options {
            mate_score: true,
            template_cigar: true,
            ..opts()
        },
        &format!(
            "e 2177 chr2 500 20 5H5M * 0 0 ACGTA IIIII\n\
             e 65 chr1 100 30 10M * 0 0 {S} {Q}\n\
             e 129 chr1 300 40 10M * 0 0 {S} {Q}\n\
             e 65 chr1 600 50 10M * 0 0 {S} {Q}\n\
             e 2113 chr2 600 50 10M * 0 0 {S} {Q}"
        ),
    );
    assert_eq!(
        got,
        [
            "e 2177 chr2 500 20 5H5M chr1 600 0 ACGTA IIIII MQ:i:50 MC:Z:10M".to_string(),
            format!(
                "e 65 chr1 100 30 10M = 600 500 {S} {Q} MQ:i:50 MC:Z:10M ct:Z:1F10M490T1F10M ms:i:400"
            ),
            format!("e 129 chr1 300 40 10M = 100 -200 {S} {Q} MQ:i:30 MC:Z:10M ms:i:400"),
            format!("e 65 chr1 600 50 10M = 100 -500 {S} {Q} MQ:i:30 MC:Z:10M ms:i:400"),
            format!("e 2113 chr2 600 50 10M chr1 300 0 {S} {Q} MQ:i:40 MC:Z:10M"),
        ]
    );
}

#[test]
fn overhang_is_soft_clipped_and_scores_count_from_15() {
    let o = Options {
        mate_score: true,
        template_cigar: true,
        ..opts()
    };
    let got = fix(
        o,
        &format!(
            "c 99 chr1 995 30 10M * 0 0 {S} {Q}\n\
             c 147 chr1 990 30 3H10M * 0 0 {S} *"
        ),
    );
    assert_eq!(
        got,
        [
            format!("c 99 chr1 995 30 6M4S = 990 5 {S} {Q} MQ:i:30 MC:Z:3H10M ms:i:2550"),
            format!(
                "c 147 chr1 990 30 3H10M = 995 -5 {S} * MQ:i:30 MC:Z:6M4S ct:Z:2R3H10M-5T1F6M4S ms:i:400"
            ),
        ]
    );
    let got = fix(
        o,
        &format!(
            "d 97 chr1 10 30 2S8M * 0 0 {S} ./0/0/0/0/\n\
             d 145 chr1 5 30 8M2S * 0 0 {S} {Q}"
        ),
    );
    assert_eq!(
        got,
        [
            format!("d 97 chr1 10 30 2S8M = 5 3 {S} ./0/0/0/0/ MQ:i:30 MC:Z:8M2S ms:i:400"),
            format!(
                "d 145 chr1 5 30 8M2S = 10 -3 {S} {Q} MQ:i:30 MC:Z:2S8M ct:Z:2R8M2S-3T1F2S8M ms:i:60"
            ),
        ]
    );
    let got = fix(
        Options {
            sanitize: Sanitize::NONE,
            ..opts()
        },
        &format!(
            "c 99 chr1 995 30 10M * 0 0 {S} {Q}\n\
             c 147 chr1 990 30 3H10M * 0 0 {S} *"
        ),
    );
    assert_eq!(
        got,
        [
            format!("c 99 chr1 995 30 10M = 990 5 {S} {Q} MQ:i:30 MC:Z:3H10M"),
            format!("c 147 chr1 990 30 3H10M = 995 -5 {S} * MQ:i:30 MC:Z:10M"),
        ]
    );
}

#[test]
fn remove_drops_secondary_and_unmapped_but_keeps_supplementary() {
    let got = fix(
        Options {
            remove: true,
            ..opts()
        },
        &format!(
            "c 97 chr1 100 30 10M * 0 0 {S} {Q}\n\
             c 2113 chr2 300 20 5S5M * 0 0 {S} {Q}\n\
             c 2117 * 0 0 * * 0 0 {S} {Q}\n\
             c 355 chr1 700 40 10M * 0 0 {S} {Q}\n\
             c 165 chr1 300 40 10M * 0 0 {S} {Q}"
        ),
    );
    assert_eq!(
        got,
        [
            format!("c 73 chr1 100 30 10M = 100 0 {S} {Q} MC:Z:*"),
            format!("c 2121 chr2 300 20 5S5M chr1 100 0 {S} {Q} MC:Z:*"),
        ]
    );
}

#[test]
fn proper_pair_flag_is_only_cleared() {
    let pair = format!(
        "p 67 chr1 100 30 10M * 0 0 {S} {Q}\n\
         p 131 chr1 300 30 10M * 0 0 {S} {Q}"
    );
    // FF: not plausibly proper, 0x2 cleared; with -p kept.
    assert_eq!(fix(opts(), &pair)[0].split(' ').nth(1), Some("65"));
    let kept = fix(
        Options {
            proper_pair_check: false,
            ..opts()
        },
        &pair,
    );
    assert_eq!(kept[0].split(' ').nth(1), Some("67"));
    // FR without 0x2 does not get it.
    let fr = fix(
        opts(),
        &format!(
            "q 65 chr1 100 30 10M * 0 0 {S} {Q}\n\
             q 145 chr1 300 30 10M * 0 0 {S} {Q}"
        ),
    );
    assert_eq!(fr[0].split(' ').nth(1), Some("97"));
    assert_eq!(fr[0].split(' ').nth(8), Some("210"));
}

#[test]
fn unmapped_records_lose_cigar_mapq_and_alignment_tags() {
    let got = fix(
        opts(),
        &format!("u 4 chr1 100 30 10M * 0 0 {S} {Q} NM:i:1 XA:Z:x MD:Z:10 SM:i:3 NM:i:2"),
    );
    assert_eq!(got, [format!("u 4 chr1 100 0 * * 0 0 {S} {Q} XA:Z:x")]);
    // Past the reference's end: unplaced.
    let got = fix(opts(), &format!("v 0 chr1 1001 30 10M * 0 0 {S} {Q}"));
    assert_eq!(got, [format!("v 4 * 0 0 * * 0 0 {S} {Q}")]);
}

#[test]
fn trim_cuts_at_the_end_and_unmaps_at_an_op_boundary() {
    let mut flag = 0u16;
    let w = |s: &[(u8, u32)]| {
        s.iter()
            .map(|&(o, l)| cigar::pack(o, l))
            .collect::<Vec<_>>()
    };
    let mut c = w(&[(op::MATCH, 10), (op::INSERTION, 2), (op::HARD_CLIP, 3)]);
    trim(&mut c, &mut flag, 995, 1000);
    assert_eq!(
        c,
        w(&[(op::MATCH, 5), (op::SOFT_CLIP, 7), (op::HARD_CLIP, 3)])
    );
    assert_eq!(flag, 0);
    let mut c = w(&[(op::MATCH, 10), (op::DELETION, 5), (op::MATCH, 5)]);
    flag = flags::PROPER_PAIR;
    trim(&mut c, &mut flag, 990, 1000);
    assert_eq!(flag, flags::UNMAPPED);
}

#[test]
fn cigdup_merges_and_drops_empty_ops() {
    let w = |s: &[(u8, u32)]| {
        s.iter()
            .map(|&(o, l)| cigar::pack(o, l))
            .collect::<Vec<_>>()
    };
    let mut c = w(&[
        (op::MATCH, 3),
        (op::MATCH, 4),
        (op::INSERTION, 0),
        (op::DELETION, 2),
        (op::MATCH, 1),
    ]);
    merge_duplicate_ops(&mut c);
    assert_eq!(c, w(&[(op::MATCH, 7), (op::DELETION, 2), (op::MATCH, 1)]));
}

#[test]
fn sanitize_keywords_parse_as_samtools() {
    assert_eq!(Sanitize::parse("all").unwrap(), Sanitize::ALL);
    assert_eq!(Sanitize::parse("none").unwrap(), Sanitize::NONE);
    assert_eq!(Sanitize::parse("").unwrap(), Sanitize::NONE);
    assert_eq!(
        Sanitize::parse("on").unwrap().bits(),
        Sanitize::MQUAL | Sanitize::UNMAP | Sanitize::CIGAR | Sanitize::AUX
    );
    assert_eq!(
        Sanitize::parse("pos,cigarx").unwrap().bits(),
        Sanitize::POS | Sanitize::CIGARX | Sanitize::CIGDUP
    );
    assert!(matches!(
        Sanitize::parse("pos,bogus"),
        Err(FixmateError::SanitizeKeyword(w)) if w == "bogus"
    ));
    assert!(matches!(
        Fixmate::new(
            Options {
                base_mods: true,
                ..opts()
            },
            vec![]
        ),
        Err(FixmateError::BaseModsUnsupported)
    ));
    assert!(check_sort_order(Some(b"coordinate")).is_err());
    assert!(check_sort_order(Some(b"queryname")).is_ok());
    assert!(check_sort_order(None).is_ok());
}

#[test]
fn templates_are_runs_of_one_name() {
    let h = header();
    let lookup = h.ref_lookup();
    let rec = |name: &str| {
        let mut out = Vec::new();
        let line = format!("{name}\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*");
        parse_sam_record(line.as_bytes(), &h, &lookup, &mut out).unwrap();
        out
    };
    let mut t = TemplateCutter::new();
    let mut got: Vec<usize> = Vec::new();
    for name in ["a", "a", "b", "a", "c", "c", "c"] {
        let r = rec(name);
        if t.starts_new(&r) {
            t.take(|recs| {
                got.push(recs.len());
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        t.push(&r);
    }
    t.take(|recs| {
        got.push(recs.len());
        Ok::<(), ()>(())
    })
    .unwrap();
    assert_eq!(got, [2, 1, 1, 3]);
}

#[test]
fn template_runs_cut_at_each_new_name() {
    let h = header();
    let lookup = h.ref_lookup();
    let recs: Vec<Vec<u8>> = ["x", "x", "y", "x", "x"]
        .iter()
        .map(|name| {
            let mut out = Vec::new();
            let line = format!("{name}\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*");
            parse_sam_record(line.as_bytes(), &h, &lookup, &mut out).unwrap();
            out
        })
        .collect();
    let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    assert_eq!(template_runs(&refs), [0..2, 2..3, 3..5]);
    assert!(template_runs(&[]).is_empty());
}
