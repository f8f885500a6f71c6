//! Formatter tests. `%g` expectations come from Python's `'%g' % x` (same
//! rules as glibc) on the f32-rounded value; `kputd` and record expectations
//! from samtools 1.24 output (pysam 0.24.1).

use super::*;
use crate::header::parse_sam_header;

fn g(d: f64) -> String {
    let mut v = Vec::new();
    format_g(d, &mut v);
    String::from_utf8(v).expect("ascii")
}

fn kd(d: f64) -> String {
    let mut v = Vec::new();
    kputd(d, &mut v);
    String::from_utf8(v).expect("ascii")
}

#[test]
fn percent_g_matches_c() {
    let f = |x: f32| g(x as f64);
    assert_eq!(f(1.0), "1");
    assert_eq!(f(1e-5), "1e-05");
    assert_eq!(f(123456789.0), "1.23457e+08");
    assert_eq!(f(0.1), "0.1");
    assert_eq!(f(-2.5), "-2.5");
    assert_eq!(f(std::f32::consts::PI), "3.14159");
    assert_eq!(f(1e38), "1e+38");
    assert_eq!(f(1e-38), "1e-38");
    assert_eq!(f(100000.0), "100000");
    assert_eq!(f(1000000.0), "1e+06");
    assert_eq!(f(999999.5), "1e+06");
    assert_eq!(f(0.0001), "0.0001");
    assert_eq!(f(0.00009999), "9.999e-05");
    assert_eq!(f(65504.2), "65504.2");
    assert_eq!(f(1234565.0), "1.23456e+06", "exact tie rounds to even");
    assert_eq!(f(0.000_123_456_79), "0.000123457");
    assert_eq!(g(5e-324), "4.94066e-324");
    assert_eq!(
        (
            g(f64::NAN),
            g(-f64::NAN),
            g(f64::INFINITY),
            g(-f64::INFINITY)
        ),
        ("nan".into(), "-nan".into(), "inf".into(), "-inf".into())
    );
    assert_eq!((g(0.0), g(-0.0)), ("0".into(), "-0".into()));
}

#[test]
fn kputd_matches_htslib() {
    // samtools 1.24 printed `B:f,1.5,1e-05,1.23457e+08,0.0001,999999,1e+06,-0`.
    let f = |x: f32| kd(x as f64);
    assert_eq!(
        [
            f(1.5),
            f(1e-5),
            f(123456789.0),
            f(0.0001),
            f(999999.0),
            f(999999.5),
            f(-0.0)
        ],
        [
            "1.5",
            "1e-05",
            "1.23457e+08",
            "0.0001",
            "999999",
            "1e+06",
            "-0"
        ]
    );
    // Rounding up into a seventh digit: 9.9999996 -> 10, 0.0099999999 -> 0.01.
    assert_eq!(kd(9.9999996), "10");
    assert_eq!(kd(0.0099999999), "0.01");
    assert_eq!(kd(0.5), "0.5");
    assert_eq!(kd(123.456), "123.456");
    assert_eq!(kd(-7.25), "-7.25");
}

fn header() -> Header {
    let lines: [&[u8]; 2] = [b"@SQ\tSN:c1\tLN:1000", b"@SQ\tSN:c2\tLN:50"];
    parse_sam_header(lines).expect("header")
}

#[rustfmt::skip]
fn record(ref_id: i32, next_ref_id: i32, qual0: u8, aux: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&ref_id.to_le_bytes());
    v.extend_from_slice(&9i32.to_le_bytes());
    v.extend_from_slice(&[4, 30]);                     // l_read_name ("a\0b\0"), mapq
    v.extend_from_slice(&0u16.to_le_bytes());           // bin (not printed)
    v.extend_from_slice(&1u16.to_le_bytes());           // n_cigar_op
    v.extend_from_slice(&16u16.to_le_bytes());          // flag
    v.extend_from_slice(&3u32.to_le_bytes());           // l_seq
    v.extend_from_slice(&next_ref_id.to_le_bytes());
    v.extend_from_slice(&19i32.to_le_bytes());
    v.extend_from_slice(&(-5i32).to_le_bytes());
    v.extend_from_slice(b"a\0b\0");
    v.extend_from_slice(&(3u32 << 4 | 8).to_le_bytes()); // 3X
    v.extend_from_slice(&[0x1f, 0x00]);                 // A N =
    v.extend_from_slice(&[qual0, 1, 2]);
    v.extend_from_slice(aux);
    v
}

fn line(rec: &[u8]) -> String {
    let mut out = Vec::new();
    format_sam_record(RecordRef::new(rec), &header(), &mut out);
    String::from_utf8(out).expect("utf8")
}

#[test]
fn fields_print_like_sam_format1() {
    let aux = b"XcC\xffXds\x00\x80XiI\xff\xff\xff\xffXAAzXZZhi\0XHH1F\0XBBc\x02\0\0\0\xff\x01XfBf\x01\0\0\0\0\0\xc0\x3f";
    let got = line(&record(1, 1, 0, aux));
    // Embedded NULs in the name are printed raw, as htslib's kputsn does.
    assert_eq!(
        got,
        "a\0b\t16\tc2\t10\t30\t3X\t=\t20\t-5\tAN=\t!\"#\tXc:i:255\tXd:i:-32768\tXi:i:4294967295\tXA:A:z\tXZ:Z:hi\tXH:H:1F\tXB:B:c,-1,1\tXf:B:f,1.5\n"
    );
    assert_eq!(
        line(&record(0, 1, 0xff, b"")),
        "a\0b\t16\tc1\t10\t30\t3X\tc2\t20\t-5\tAN=\t*\n"
    );
    assert_eq!(
        line(&record(-1, -1, 0xff, b"")),
        "a\0b\t16\t*\t10\t30\t3X\t*\t20\t-5\tAN=\t*\n"
    );
}
