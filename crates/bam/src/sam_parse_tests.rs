//! SAM parser tests. Behaviours marked "pysam" were observed with samtools
//! 1.24 (pysam 0.24.1): `samtools view -b` then `samtools view` of a SAM
//! holding the line. The wider byte-for-byte comparison is in
//! `tests/pysam_differential.rs`.

use super::*;
use crate::header::parse_sam_header;
use crate::sam_format::format_sam_record;
use crate::RecordRef;

fn header() -> Header {
    let lines: [&[u8]; 2] = [b"@SQ\tSN:c1\tLN:1000\tAN:alt1", b"@SQ\tSN:c2\tLN:50"];
    parse_sam_header(lines).expect("header")
}

fn parse(line: &str) -> Result<Vec<u8>, SamError> {
    let h = header();
    let mut out = Vec::new();
    parse_sam_record(line.as_bytes(), &h, &h.ref_lookup(), &mut out).map(|_| out)
}

fn roundtrip(line: &str) -> String {
    let h = header();
    let bytes = parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    crate::validate::validate_record(&bytes[4..], h.n_ref()).expect("parser output validates");
    let mut out = Vec::new();
    format_sam_record(RecordRef::with_block_size(&bytes), &h, &mut out);
    String::from_utf8(out).expect("utf8")
}

#[test]
fn encodes_a_mapped_record() {
    let b = parse("r1\t99\tc1\t100\t60\t2M1I2M\t=\t200\t150\tACgtN\tIIIII\tNM:i:1").expect("valid");
    let r = RecordRef::with_block_size(&b);
    assert_eq!(
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
        b.len() - 4
    );
    assert_eq!((r.ref_id(), r.pos(), r.mapq(), r.flag()), (0, 99, 60, 99));
    assert_eq!((r.next_ref_id(), r.next_pos(), r.tlen()), (0, 199, 150));
    assert_eq!(r.bin(), reg2bin(99, 103));
    assert_eq!(r.read_name(), b"r1");
    assert_eq!(
        r.cigar().ops().collect::<Vec<_>>(),
        vec![(0, 2), (1, 1), (0, 2)]
    );
    assert_eq!(r.seq_bytes(), &[0x12, 0x48, 0xf0]);
    assert_eq!(r.qual(), &[40; 5]);
    assert_eq!(r.aux_bytes(), b"NMC\x01");
}

#[test]
fn htslib_normalisations() {
    // pysam: unknown RNAME -> '*' and unmapped, POS kept (1.24 warns, no error).
    assert_eq!(
        roundtrip("r\t0\tzz\t5\t0\t4M\t*\t0\t0\tACGT\tIIII"),
        "r\t4\t*\t5\t0\t4M\t*\t0\t0\tACGT\tIIII\n"
    );
    // pysam: AN alternative names resolve to their @SQ.
    assert_eq!(
        roundtrip("r\t0\talt1\t5\t0\t4M\t=\t7\t0\tACGT\tIIII"),
        "r\t0\tc1\t5\t0\t4M\t=\t7\t0\tACGT\tIIII\n"
    );
    // pysam: POS 0 on a placed read -> unplaced and unmapped; '=' follows.
    assert_eq!(
        roundtrip("r\t0\tc1\t0\t0\t4M\t=\t7\t0\tACGT\tIIII"),
        "r\t4\t*\t0\t0\t4M\t*\t7\t0\tACGT\tIIII\n"
    );
    // pysam: unknown RNEXT -> '*'.
    assert_eq!(
        roundtrip("r\t0\tc1\t5\t0\t4M\tzz\t7\t0\tACGT\tIIII"),
        "r\t0\tc1\t5\t0\t4M\t*\t7\t0\tACGT\tIIII\n"
    );
    // pysam: mapped without CIGAR -> flag 4, RNAME kept.
    assert_eq!(
        roundtrip("r\t0\tc1\t5\t0\t*\t*\t0\t0\tACGT\tIIII"),
        "r\t4\tc1\t5\t0\t*\t*\t0\t0\tACGT\tIIII\n"
    );
    // pysam: hex flag, '+' and empty numbers, empty QNAME, trailing tabs.
    assert_eq!(
        roundtrip("r\t0x10\tc1\t+5\t0\t1M\t*\t\t\tA\t*"),
        "r\t16\tc1\t5\t0\t1M\t*\t0\t0\tA\t*\n"
    );
    assert_eq!(
        roundtrip("\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*"),
        "\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\n"
    );
    assert_eq!(
        roundtrip("r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t"),
        "r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\n"
    );
    assert_eq!(
        roundtrip("r\t017\t*\t0\t0\t*\t*\t0\t0\t*\t*\r\n"),
        "r\t15\t*\t0\t0\t*\t*\t0\t0\t*\t*\n"
    );
}

#[test]
fn unplaced_bin_is_4680() {
    let b = parse("r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*").expect("valid");
    assert_eq!(RecordRef::with_block_size(&b).bin(), 4680);
}

#[test]
fn aux_values_as_htslib_stores_and_prints_them() {
    // pysam, scalar types and junk handling.
    let line = "r\t0\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tIIIII\tXD:d:1.5\tXA:c:q\tXF:f:1e-5\tXG:f:abc\tXI:i:12abc\t\
                XJ:i:-129\tXK:A:xyz\tXL:i:4294967295\tXM:Z:a\u{e9}b\tXH:f:0x1p3\tXN:f:-0";
    assert_eq!(
        roundtrip(line),
        "r\t0\tc1\t5\t0\t5M\t*\t0\t0\tACGTT\tIIIII\tXD:d:1.5\tXA:A:q\tXF:f:1e-05\tXG:f:0\tXI:i:12\t\
         XJ:i:-129\tXK:A:x\tXL:i:4294967295\tXM:Z:a\u{e9}b\tXH:f:8\tXN:f:-0\n"
    );
    // pysam, B arrays retyped on overflow and kputd float elements.
    let line = "r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXB:B:c,255\tXC:B:C,-1\tXE:B:c,200\tXF:B:f,1.5,1e-5,123456789,0.0001,999999,999999.5,-0\tXG:B:f";
    assert_eq!(
        roundtrip(line),
        "r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXB:B:S,255\tXC:B:c,-1\tXE:B:C,200\tXF:B:f,1.5,1e-05,1.23457e+08,0.0001,999999,1e+06,-0\tXG:B:f\n"
    );
}

#[test]
fn integer_tags_take_the_smallest_type() {
    let stored = |v: &str| {
        let b = parse(&format!("r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXX:i:{v}")).expect("valid");
        RecordRef::with_block_size(&b).aux_bytes()[2..].to_vec()
    };
    assert_eq!(stored("-128"), b"c\x80");
    assert_eq!(stored("-129"), b"s\x7f\xff");
    assert_eq!(stored("-32769"), b"i\xff\x7f\xff\xff");
    assert_eq!(stored("255"), b"C\xff");
    assert_eq!(stored("256"), b"S\x00\x01");
    assert_eq!(stored("65536"), b"I\x00\x00\x01\x00");
    assert_eq!(stored("-0"), b"c\x00");
}

#[test]
fn errors_htslib_reports() {
    let err = |l: &str| parse(l).expect_err(l);
    // pysam rejected each of these lines.
    assert_eq!(
        err("r\t0\tc1\t5\t0\t4M\t*\t0\t0\tacgtu\tIIIII"),
        SamError::CigarSeqMismatch
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tIIIII\tXL:i:4294967296"),
        SamError::Aux("numeric value out of allowed range")
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tIIIII\tXL:i:-2147483649"),
        SamError::Aux("numeric value out of allowed range")
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tIIIII\tX"),
        SamError::Aux("incomplete aux field")
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tIIIII\tXX:i:"),
        SamError::Aux("incomplete aux field")
    );
    assert_eq!(
        err("r\t65536\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tIIIII"),
        SamError::OutOfRange
    );
    assert_eq!(
        err("r\t0\tc1\t5\t256\t5M\t*\t0\t0\tacgtu\tIIIII"),
        SamError::OutOfRange
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5M\t*\t0\t2147483648\tacgtu\tIIIII"),
        SamError::PositionTooLarge
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5m\t*\t0\t0\tacgtu\tIIIII"),
        SamError::BadCigar("unrecognized CIGAR operator")
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t0M5B\t*\t0\t0\tacgtu\tIIIII"),
        SamError::CigarSeqMismatch
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t5M\t*\t0\t0\tacgtu\tII II"),
        SamError::BadQual
    );
    assert_eq!(
        err("r\t4\t*\t0\t0\t*\t*\t0\t0\t*"),
        SamError::MissingField("SEQ")
    );
    assert_eq!(
        err("r\t0\tc1\t5\t0\t1M\t*\t0\t0\tA\tII"),
        SamError::QualLength
    );
    assert_eq!(
        err(&format!(
            "{}\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*",
            "n".repeat(255)
        )),
        SamError::NameTooLong
    );
    assert_eq!(
        err("r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXB:B:C,-"),
        SamError::Aux("malformed data in B array")
    );
    assert_eq!(
        err("r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXB:B:c,1x"),
        SamError::Aux("malformed B array")
    );
    assert_eq!(
        err("r\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXH:H:abc"),
        SamError::Aux("hex field does not have an even number of digits")
    );
    // The output buffer is left untouched on error.
    let h = header();
    let mut out = b"keep".to_vec();
    assert!(parse_sam_record(
        b"r\t0\tc1\t5\t0\t5M\t*\t0\t0\tACGTA\tII",
        &h,
        &h.ref_lookup(),
        &mut out
    )
    .is_err());
    assert_eq!(out, b"keep");
    // A header without @SQ cannot place a read.
    let empty = Header::empty();
    let mut out = Vec::new();
    assert_eq!(
        parse_sam_record(
            b"r\t0\tc1\t5\t0\t1M\t*\t0\t0\tA\t*",
            &empty,
            &empty.ref_lookup(),
            &mut out
        ),
        Err(SamError::NoReferences)
    );
}

#[test]
fn pos_at_the_bam_limit_is_accepted() {
    // pysam: POS 2147483648 (0-based INT32_MAX) converts; one more does not.
    assert!(parse("r\t0\tc1\t2147483648\t0\t5M\t*\t0\t0\tACGTA\tIIIII").is_ok());
    assert_eq!(
        parse("r\t0\tc1\t2147483649\t0\t5M\t*\t0\t0\tACGTA\tIIIII"),
        Err(SamError::PositionTooLarge)
    );
}

#[test]
fn cg_tag_becomes_the_cigar() {
    // 10S placeholder + CG:B:I,5M3I2M: htslib moves it into the CIGAR.
    let ops = [5u32 << 4, 3 << 4 | 1, 2 << 4];
    let cg: String = ops.iter().map(|o| format!(",{o}")).collect();
    let line =
        format!("r\t0\tc1\t100\t60\t10S\t*\t0\t0\tACGTACGTAC\t*\tXA:i:1\tCG:B:I{cg}\tXB:Z:after");
    let b = parse(&line).expect("valid");
    let r = RecordRef::with_block_size(&b);
    assert_eq!(
        r.cigar().ops().collect::<Vec<_>>(),
        vec![(0, 5), (1, 3), (0, 2)]
    );
    assert_eq!(r.aux_bytes(), b"XAC\x01XBZafter\0");
    assert_eq!(r.bin(), reg2bin(99, 106));
}
