//! Header tests. Expected strings marked "pysam" were produced by running
//! samtools 1.24 (pysam 0.24.1) in a fresh process, e.g.
//! `python3 -c "import pysam; pysam.samtools.sort('-o','out.sam','-O','SAM','in.sam')"`,
//! on the input shown, and copying the `@` lines of the output.

use super::*;

fn sam(text: &str) -> Header {
    let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
    parse_sam_header(lines).expect("valid header")
}

fn sam_err(text: &str) -> HeaderError {
    let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
    parse_sam_header(lines).expect_err("invalid header")
}

fn text(h: &Header) -> String {
    String::from_utf8(h.to_sam_text()).expect("utf8")
}

/// Builds an uncompressed BAM header block by hand.
fn bam_bytes(text: &[u8], refs: &[(&[u8], u32)]) -> Vec<u8> {
    let mut b = b"BAM\x01".to_vec();
    b.extend_from_slice(&(text.len() as u32).to_le_bytes());
    b.extend_from_slice(text);
    b.extend_from_slice(&(refs.len() as i32).to_le_bytes());
    for (name, len) in refs {
        b.extend_from_slice(&(name.len() as i32 + 1).to_le_bytes());
        b.extend_from_slice(name);
        b.push(0);
        b.extend_from_slice(&len.to_le_bytes());
    }
    b
}

const PG_TAIL: &str = "VN:1.24 (pysam)\tCL:samtools sort -o out.sam -O SAM in.sam";

fn sort_pg(h: &mut Header) {
    h.add_pg(
        "samtools",
        "samtools",
        "1.24 (pysam)",
        "samtools sort -o out.sam -O SAM in.sam",
    );
}

#[test]
fn sort_order_edits_existing_hd_in_place() {
    let input = "@HD\tVN:1.5\tSS:coordinate:foo\tGO:query\tSO:queryname\tZZ:keep\n";
    // pysam, for: (no option), -n, -N, -t XY, -n -t XY, --template-coordinate, -M, -t X
    let cases: [(&str, Option<&str>, Option<&str>, &str); 8] = [
        (
            "coordinate",
            None,
            None,
            "@HD\tVN:1.5\tSO:coordinate\tZZ:keep\n",
        ),
        (
            "queryname",
            None,
            Some("queryname:natural"),
            "@HD\tVN:1.5\tSS:queryname:natural\tSO:queryname\tZZ:keep\n",
        ),
        (
            "queryname",
            None,
            Some("queryname:lexicographical"),
            "@HD\tVN:1.5\tSS:queryname:lexicographical\tSO:queryname\tZZ:keep\n",
        ),
        (
            "unsorted",
            None,
            Some("unsorted:XY:coordinate"),
            "@HD\tVN:1.5\tSS:unsorted:XY:coordinate\tSO:unsorted\tZZ:keep\n",
        ),
        (
            "unsorted",
            None,
            Some("unsorted:XY:queryname:natural"),
            "@HD\tVN:1.5\tSS:unsorted:XY:queryname:natural\tSO:unsorted\tZZ:keep\n",
        ),
        (
            "unsorted",
            Some("query"),
            Some("unsorted:template-coordinate"),
            "@HD\tVN:1.5\tSS:unsorted:template-coordinate\tGO:query\tSO:unsorted\tZZ:keep\n",
        ),
        (
            "coordinate",
            None,
            Some("coordinate:minhash"),
            "@HD\tVN:1.5\tSS:coordinate:minhash\tSO:coordinate\tZZ:keep\n",
        ),
        (
            "unsorted",
            None,
            Some("unsorted:X"),
            "@HD\tVN:1.5\tSS:unsorted:X\tSO:unsorted\tZZ:keep\n",
        ),
    ];
    for (so, go, ss, want) in cases {
        let mut h = sam(input);
        h.set_sort_order(so, go, ss);
        assert_eq!(text(&h), want, "SO:{so} GO:{go:?} SS:{ss:?}");
    }
}

#[test]
fn sort_order_adds_hd_first_when_missing() {
    // pysam, input "@SQ\tSN:c1\tLN:1000\n@CO\tc\n".
    let cases: [(&str, Option<&str>, Option<&str>, &str); 4] = [
        ("coordinate", None, None, "@HD\tVN:1.6\tSO:coordinate\n"),
        (
            "queryname",
            None,
            Some("queryname:natural"),
            "@HD\tVN:1.6\tSO:queryname\tSS:queryname:natural\n",
        ),
        (
            "unsorted",
            Some("query"),
            Some("unsorted:template-coordinate"),
            "@HD\tVN:1.6\tSO:unsorted\tGO:query\tSS:unsorted:template-coordinate\n",
        ),
        (
            "unsorted",
            None,
            Some("unsorted:XY:coordinate"),
            "@HD\tVN:1.6\tSO:unsorted\tSS:unsorted:XY:coordinate\n",
        ),
    ];
    for (so, go, ss, want) in cases {
        let mut h = sam("@SQ\tSN:c1\tLN:1000\n@CO\tc\n");
        h.set_sort_order(so, go, ss);
        assert_eq!(text(&h), format!("{want}@SQ\tSN:c1\tLN:1000\n@CO\tc\n"));
    }
}

#[test]
fn pg_one_line_per_chain_end_before_trailing_comments() {
    // pysam, samtools sort on exactly this header.
    let mut h = sam("@SQ\tSN:c1\tLN:1000\n@PG\tID:bull\tPP:donkey\n@PG\tID:donkey\n@CO\tmid\n@PG\tID:moose\n@PG\tID:cow\tPP:moose\n@CO\tend\n");
    h.set_sort_order("coordinate", None, None);
    sort_pg(&mut h);
    let want = format!(
        "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:c1\tLN:1000\n@PG\tID:bull\tPP:donkey\n@PG\tID:donkey\n@CO\tmid\n\
         @PG\tID:moose\n@PG\tID:cow\tPP:moose\n@PG\tID:samtools\tPN:samtools\tPP:bull\t{PG_TAIL}\n\
         @PG\tID:samtools.1\tPN:samtools\tPP:cow\t{PG_TAIL}\n@CO\tend\n"
    );
    assert_eq!(text(&h), want);
}

#[test]
fn pg_id_counter_and_fallbacks() {
    // pysam: taken IDs samtools, samtools.1 -> samtools.2; PP is the last PG.
    let mut h = sam("@PG\tID:samtools\n@PG\tID:samtools.1\n@CO\tend\n");
    sort_pg(&mut h);
    assert!(text(&h).ends_with(&format!(
        "@PG\tID:samtools.1\n@PG\tID:samtools.2\tPN:samtools\tPP:samtools.1\t{PG_TAIL}\n@CO\tend\n"
    )));
    // pysam: the counter keeps going: samtools.1, then samtools.3 (.2 taken).
    let mut h = sam("@PG\tID:samtools.2\n@PG\tID:x\tPP:samtools.2\n@PG\tID:y\tPP:samtools.2\n@PG\tID:samtools\n");
    sort_pg(&mut h);
    let t = text(&h);
    assert!(
        t.contains(&format!(
            "@PG\tID:samtools.1\tPN:samtools\tPP:x\t{PG_TAIL}\n"
        )),
        "{t}"
    );
    assert!(
        t.ends_with(&format!(
            "@PG\tID:samtools.3\tPN:samtools\tPP:y\t{PG_TAIL}\n"
        )),
        "{t}"
    );
    // pysam: a PP cycle leaves no chain end and no PP.
    let mut h = sam("@PG\tID:samtools\tPP:samtools.1\n@PG\tID:samtools.1\tPP:samtools\n");
    sort_pg(&mut h);
    assert!(text(&h).ends_with(&format!("@PG\tID:samtools.2\tPN:samtools\t{PG_TAIL}\n")));
    // pysam: missing and self PP links do not count; the last PG is used.
    let mut h = sam("@PG\tID:a\n@PG\tID:b\tPP:zz\n@PG\tID:c\tPP:c\n@CO\tend\n");
    sort_pg(&mut h);
    assert!(text(&h).ends_with(&format!(
        "@PG\tID:c\tPP:c\n@PG\tID:samtools\tPN:samtools\tPP:c\t{PG_TAIL}\n@CO\tend\n"
    )));
    // pysam: forward PP references: the chain a -> b -> c ends at a.
    let mut h = sam("@PG\tID:a\tPP:b\n@PG\tID:b\tPP:c\n@PG\tID:c\n");
    sort_pg(&mut h);
    assert!(text(&h).ends_with(&format!(
        "@PG\tID:c\n@PG\tID:samtools\tPN:samtools\tPP:a\t{PG_TAIL}\n"
    )));
    // pysam: no @PG at all: appended at the very end, without PP.
    let mut h = sam("@SQ\tSN:c1\tLN:1000\n@CO\tc\n");
    sort_pg(&mut h);
    assert_eq!(
        text(&h),
        format!("@SQ\tSN:c1\tLN:1000\n@CO\tc\n@PG\tID:samtools\tPN:samtools\t{PG_TAIL}\n")
    );
}

#[test]
fn sam_header_validation_matches_htslib() {
    // Accepted by samtools 1.24 (pysam): LN is read with strtoll.
    for ln in ["12abc", "+5", " 5", "007", "2147483648", "99999999999999"] {
        let h = sam(&format!("@SQ\tSN:c1\tLN:{ln}\n"));
        assert_eq!(h.refs()[0].name, b"c1");
        assert_eq!(text(&h), format!("@SQ\tSN:c1\tLN:{ln}\n"), "text is kept");
    }
    assert_eq!(sam("@SQ\tSN:c1\tLN:12abc\n").refs()[0].len, 12);
    // Rejected by samtools 1.24 (pysam).
    for ln in ["0", "-5", ""] {
        assert!(matches!(
            sam_err(&format!("@SQ\tSN:c1\tLN:{ln}\n")),
            HeaderError::SqBadLength { line: 1, .. }
        ));
    }
    assert!(matches!(
        sam_err("@SQ\tSN:c1\tLN:5\n@SQ\tSN:c1\tLN:5\n"),
        HeaderError::DuplicateSq { line: 2, .. }
    ));
    assert!(matches!(
        sam_err("@SQ\tSN:c1\tLN:5\tLN:6\n"),
        HeaderError::SqConflictingLength { .. }
    ));
    assert!(matches!(
        sam_err("@SQ\tLN:5\n"),
        HeaderError::SqWithoutName { line: 1 }
    ));
    assert!(matches!(
        sam_err("@RG\tLB:x\n"),
        HeaderError::MissingId { kind: "RG", .. }
    ));
    assert!(matches!(
        sam_err("@PG\tPN:x\n"),
        HeaderError::MissingId { kind: "PG", .. }
    ));
    for bad in [
        "@CO ",
        "@COx",
        "@SQ\tSN:c1\tLN:5\t",
        "@SQ\tSN:c1\tLN:5\tX:y",
        "@SQ\tSN:c1\tLN:5\tXYZ",
        "@Hd\tVN:1",
        "@XY\tAB:cd",
    ] {
        assert!(
            matches!(
                sam_err(&format!("{bad}\n")),
                HeaderError::Malformed { line: 1, .. }
            ),
            "{bad:?}"
        );
    }
    // Accepted: empty and tabbed comments, duplicate RG/PG IDs, repeated tags.
    let h = sam("@CO\t\n@CO\tx\ty\n@RG\tID:a\n@RG\tID:a\tLB:z\n@PG\tID:a\n@PG\tID:a\n@HD\tVN:1.6\tSO:coordinate\tSO:queryname\n");
    assert_eq!(
        h.lines()[0],
        b"@HD\tVN:1.6\tSO:coordinate\tSO:queryname",
        "the first @HD moves to the top"
    );
}

#[test]
fn bare_comment_line_reads_as_an_empty_comment() {
    // pysam: `@CO` alone, also with `\r`, sorts to `@CO\t`; `@CO ` is
    // "Missing tab".
    let h = sam("@HD\tVN:1.6\n@CO\n@SQ\tSN:c1\tLN:5\n@CO\r\n");
    assert_eq!(text(&h), "@HD\tVN:1.6\n@CO\t\n@SQ\tSN:c1\tLN:5\n@CO\t\n");
}

#[test]
fn alternative_names_resolve() {
    // pysam: SN:c2 after AN:c2 is a new reference (with a warning).
    let h = sam("@SQ\tSN:c1\tAN:c2,c3\tLN:5\n@SQ\tSN:c2\tLN:7\n");
    let l = h.ref_lookup();
    assert_eq!(
        (l.get(b"c1"), l.get(b"c2"), l.get(b"c3"), l.get(b"c4")),
        (Some(0), Some(1), Some(0), None)
    );
    assert_eq!(h.n_ref(), 2);
}

#[test]
fn bam_binary_refs_win_and_stub_lines_are_added() {
    // pysam: `samtools sort` of a BAM with this text and binary refs
    // chrA:100, chrB:200 wrote text (after its @HD edit):
    //   @HD VN:1.4 SO:coordinate / @CO first / @SQ chrB LN:200 M5:abc /
    //   @SQ chrZ LN:5 / @SQ chrA LN:100 / @PG ...
    // and binary refs chrA:100, chrB:200, chrZ:5.
    let bytes = bam_bytes(
        b"@CO\tfirst\n@SQ\tSN:chrB\tLN:999\tM5:abc\n@HD\tVN:1.4\n@SQ\tSN:chrZ\tLN:5\n",
        &[(b"chrA", 100), (b"chrB", 200)],
    );
    let mut h = read_bam_header(&mut &bytes[..]).expect("valid");
    h.set_sort_order("coordinate", None, None);
    assert_eq!(
        text(&h),
        "@HD\tVN:1.4\tSO:coordinate\n@CO\tfirst\n@SQ\tSN:chrB\tLN:200\tM5:abc\n@SQ\tSN:chrZ\tLN:5\n@SQ\tSN:chrA\tLN:100\n"
    );
    let refs: Vec<(&[u8], u64)> = h.refs().iter().map(|r| (&r.name[..], r.len)).collect();
    assert_eq!(
        refs,
        vec![(&b"chrA"[..], 100), (&b"chrB"[..], 200), (&b"chrZ"[..], 5)]
    );

    // pysam: no @SQ lines at all: stubs go to the end, after the @PG lines;
    // samtools' @PG is inserted after the existing one, before the stubs.
    let bytes = bam_bytes(
        b"@HD\tVN:1.6\n@CO\thello\n@PG\tID:x\n",
        &[(b"chrA", 100), (b"chrB", 200)],
    );
    let mut h = read_bam_header(&mut &bytes[..]).expect("valid");
    sort_pg(&mut h);
    assert_eq!(
        text(&h),
        format!(
            "@HD\tVN:1.6\n@CO\thello\n@PG\tID:x\n@PG\tID:samtools\tPN:samtools\tPP:x\t{PG_TAIL}\n\
             @SQ\tSN:chrA\tLN:100\n@SQ\tSN:chrB\tLN:200\n"
        )
    );
    // pysam: CR line ends stay part of the last tag; a missing final newline
    // and an empty text are fine; any two-letter type is kept in BAM text.
    let bytes = bam_bytes(
        b"@HD\tVN:1.6\r\n@XY\tAB:cd\n@SQ\tSN:chrA\tLN:100\r",
        &[(b"chrA", 100)],
    );
    let mut h = read_bam_header(&mut &bytes[..]).expect("valid");
    h.set_sort_order("coordinate", None, None);
    assert_eq!(
        text(&h),
        "@HD\tVN:1.6\r\tSO:coordinate\n@XY\tAB:cd\n@SQ\tSN:chrA\tLN:100\r\n"
    );
    let bytes = bam_bytes(b"", &[(b"chrA", 100)]);
    assert_eq!(
        text(&read_bam_header(&mut &bytes[..]).expect("valid")),
        "@SQ\tSN:chrA\tLN:100\n"
    );
}

#[test]
fn bam_header_errors_name_offsets() {
    assert!(matches!(
        read_bam_header(&mut &b"BAM\x02"[..]),
        Err(HeaderError::BadMagic { .. })
    ));
    let full = bam_bytes(b"@CO\tx\n", &[(b"chrA", 100)]);
    for cut in [2, 6, 10, 14, 16, 22, 26] {
        let err = read_bam_header(&mut &full[..cut]).expect_err("truncated");
        assert!(
            matches!(err, HeaderError::Truncated { offset, .. } if offset == cut as u64),
            "{cut}: {err}"
        );
    }
    let mut neg = full.clone();
    neg[14..18].copy_from_slice(&(-1i32).to_le_bytes());
    assert!(matches!(
        read_bam_header(&mut &neg[..]),
        Err(HeaderError::BadRefCount {
            offset: 14,
            n_ref: -1
        })
    ));
    let mut zero = full.clone();
    zero[18..22].copy_from_slice(&0i32.to_le_bytes());
    assert!(matches!(
        read_bam_header(&mut &zero[..]),
        Err(HeaderError::BadRefNameLength {
            offset: 18,
            index: 0,
            l_name: 0
        })
    ));
    let dup = bam_bytes(b"", &[(b"a", 1), (b"a", 2)]);
    assert!(matches!(
        read_bam_header(&mut &dup[..]),
        Err(HeaderError::DuplicateBinaryRef { index: 1, .. })
    ));
    // A bare `@CO` is let through in SAM only (pysam: a BAM whose text has
    // one fails with "failed to change sort order header").
    let bare = bam_bytes(b"@CO\tx\n@CO\n", &[]);
    assert!(matches!(
        read_bam_header(&mut &bare[..]),
        Err(HeaderError::Malformed { line: 2, .. })
    ));
    let blank = bam_bytes(b"@CO\tx\n\n@CO\ty\n", &[]);
    assert!(matches!(
        read_bam_header(&mut &blank[..]),
        Err(HeaderError::Malformed { line: 2, .. })
    ));
    // A huge l_text in a short file fails as truncated, without allocating it.
    let mut huge = full.clone();
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        read_bam_header(&mut &huge[..]),
        Err(HeaderError::Truncated { .. })
    ));
}

#[test]
fn bam_bytes_round_trip() {
    let bytes = bam_bytes(
        b"@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chrA\tLN:100\n",
        &[(b"chrA", 100)],
    );
    let h = read_bam_header(&mut &bytes[..]).expect("valid");
    assert_eq!(h.to_bam_bytes(), bytes);
    // A name without its NUL is accepted (htslib adds one) and written with it.
    let mut raw = b"BAM\x01\0\0\0\0\x01\0\0\0\x02\0\0\0ab\x05\0\0\0".to_vec();
    let h = read_bam_header(&mut &raw[..]).expect("valid");
    assert_eq!(
        h.refs()[0],
        Reference {
            name: b"ab".to_vec(),
            len: 5
        }
    );
    raw.clear();
    assert_eq!(h.to_sam_text(), b"@SQ\tSN:ab\tLN:5\n");
}

#[test]
fn library_map_follows_lookup_libraries() {
    let h = sam("@RG\tID:a\n@RG\tID:b\tLB:lb1\n@RG\tID:a\tLB:late\n@RG\tID:b\tLB:dup\n@RG\tID:c\tPL:x\tLB:l3\tLB:l4\n");
    let m = h.library_map();
    let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"b".to_vec(), b"lb1".to_vec()),
        (b"a".to_vec(), b"late".to_vec()),
        (b"c".to_vec(), b"l3".to_vec()),
    ];
    assert_eq!(m, want);
}

#[test]
fn set_sq_tags_replaces_in_place_or_appends_as_htslib() {
    // pysam: `samtools sort -O cram --reference ref.fa` of this header (the
    // M5 of chr1 given, chr2's computed) read back with `view -H`: UR
    // replaced where it was, M5 then UR appended, other lines untouched.
    let mut h = sam("@HD\tVN:1.4\tSO:coordinate\n@CO\tc\n\
         @SQ\tSN:chr1\tLN:1000\tAS:hg\tM5:d232\tSP:human\n@PG\tID:bwa\tPN:bwa\n\
         @SQ\tSN:chr2\tUR:file:/elsewhere/x.fa\tLN:800\tXX:yy\n");
    h.set_sq_tags(b"M5", [(&b"chr2"[..], &b"c4ae"[..]), (b"chrX", b"0")]);
    h.set_sq_tags(
        b"UR",
        [
            (&b"chr1"[..], &b"/tmp/hx/ref.fa"[..]),
            (b"chr2", b"/tmp/hx/ref.fa"),
        ],
    );
    assert_eq!(
        text(&h),
        "@HD\tVN:1.4\tSO:coordinate\n@CO\tc\n\
         @SQ\tSN:chr1\tLN:1000\tAS:hg\tM5:d232\tSP:human\tUR:/tmp/hx/ref.fa\n@PG\tID:bwa\tPN:bwa\n\
         @SQ\tSN:chr2\tUR:/tmp/hx/ref.fa\tLN:800\tXX:yy\tM5:c4ae\n"
    );
}
