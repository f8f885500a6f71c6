//! Differential test against samtools 1.24 (through pysam 0.24.1): random SAM
//! records, converted by `samtools view -b` and back by `samtools view`, must
//! give the same BAM bytes as `parse_sam_record` and the same text as
//! `format_sam_record`. Header edits are compared with `samtools sort`.
//! The oracle runs in a fresh python process per call. Without python3 and
//! pysam these tests fail (they do not skip): the oracle is the point.

use alnsort_bam::header::{parse_sam_header, read_bam_header, Header};
use alnsort_bam::sam_format::format_sam_record;
use alnsort_bam::sam_parse::parse_sam_record;
use alnsort_bam::validate::{htslib_normalise, read_block_size, validate_record};
use alnsort_bam::RecordRef;
use std::path::Path;
use std::process::Command;

/// Runs a python snippet with `argv` and returns its stdout; fails the test
/// loudly when python3 or pysam is missing.
fn python(script: &str, args: &[&Path]) -> Vec<u8> {
    let probe = Command::new("python3")
        .args(["-c", "import pysam"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "this test needs python3 with pysam 0.24.1 (samtools 1.24): `import pysam` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "this test needs python3 with pysam 0.24.1 (samtools 1.24): cannot run python3: {e}"
        ),
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// xorshift64*: deterministic, dependency-free randomness for the generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const REFS: &[(&str, u32)] = &[("chr1", 100_000), ("chr2", 5_000), ("c3", 1_000_000)];
const INT_EDGES: &[i64] = &[
    -2147483648,
    -32769,
    -32768,
    -129,
    -128,
    -1,
    0,
    1,
    127,
    128,
    255,
    256,
    32767,
    32768,
    65535,
    65536,
    2147483647,
    2147483648,
    4294967295,
];
const FLOATS: &[&str] = &[
    "1.0",
    "1e-5",
    "123456789.0",
    "0.1",
    "-2.5",
    "3.14159265",
    "1e38",
    "1e-38",
    "0",
    "-0",
    "999999.5",
    "0.00001234",
    "100000",
    "1000000",
    "0.0001",
    "0.00009999",
    "65504.2",
    "1.5E+3",
    "+7",
    ".5",
    "5.",
    "inf",
    "-inf",
    "nan",
    "12abc",
];

/// A float literal; `junk` allows trailing garbage, which htslib skips in a
/// scalar tag but rejects inside a B array.
fn random_float(r: &mut Rng, junk: bool) -> String {
    if r.chance(50) {
        let f = r.pick(FLOATS);
        return if junk || !f.contains("abc") {
            f.to_string()
        } else {
            "2.5".to_string()
        };
    }
    let mag = 10f64.powi(r.below(20) as i32 - 10);
    let v = (r.next() as f64 / u64::MAX as f64 - 0.5) * mag;
    match r.below(3) {
        0 => format!("{v}"),
        1 => format!("{v:e}"),
        _ => format!("{v:.3}"),
    }
}

fn random_text(r: &mut Rng, min: u64, max: u64, alphabet: &[u8]) -> String {
    let n = min + r.below(max - min + 1);
    (0..n).map(|_| *r.pick(alphabet) as char).collect()
}

fn random_aux(r: &mut Rng, tag: &str) -> String {
    let printable: Vec<u8> = (b' '..=b'~').collect();
    match r.below(8) {
        0 => format!("{tag}:A:{}", *r.pick(&printable[1..]) as char),
        1 | 2 => {
            let v = if r.chance(60) {
                *r.pick(INT_EDGES)
            } else {
                r.next() as i32 as i64
            };
            format!("{tag}:i:{v}")
        }
        3 => format!("{tag}:f:{}", random_float(r, true)),
        4 => format!("{tag}:Z:{}", random_text(r, 0, 12, &printable)),
        5 => format!(
            "{tag}:H:{}",
            random_text(r, 0, 4, b"0123456789ABCDEF").repeat(2)
        ),
        6 => format!("{tag}:d:{}", random_float(r, true)),
        _ => {
            let sub = *r.pick(b"cCsSiIf");
            let n = r.below(6);
            let vals: Vec<String> = (0..n)
                .map(|_| match sub {
                    b'f' => random_float(r, false),
                    // Values slightly outside the type exercise htslib's retyping.
                    b'c' => (r.below(300) as i64 - 140).to_string(),
                    b'C' => (r.below(270) as i64 - 2).to_string(),
                    b's' | b'S' => (r.below(70_000) as i64 - 2_000).to_string(),
                    // Mixing negatives with values above i32::MAX is an error.
                    b'i' => r
                        .pick(INT_EDGES)
                        .clamp(&-2147483648, &2147483647)
                        .to_string(),
                    _ => r.pick(INT_EDGES).max(&0).to_string(),
                })
                .collect();
            let mut s = format!("{tag}:B:{}", sub as char);
            for v in vals {
                s.push(',');
                s.push_str(&v);
            }
            s
        }
    }
}

fn random_record(r: &mut Rng, i: usize) -> String {
    let name_chars: Vec<u8> = (b'!'..=b'~').filter(|&c| c != b'@').collect();
    let qname = if r.chance(3) {
        "*".to_string()
    } else {
        format!("{}{i}", random_text(r, 0, 20, &name_chars))
    };
    let flag = r.below(4096);
    let flag = if r.chance(20) {
        format!("{flag:#x}")
    } else {
        flag.to_string()
    };
    let rname = match r.below(10) {
        0 => "*".to_string(),
        1 => "unknown_ref".to_string(),
        _ => r.pick(REFS).0.to_string(),
    };
    let pos = if r.chance(10) { 0 } else { r.below(2_000_000) };
    let mapq = r.below(256);
    let mut qlen = 0u64;
    let cigar = if r.chance(15) {
        "*".to_string()
    } else {
        let max_ops = if r.chance(3) { 80 } else { 6 };
        let n = 1 + r.below(max_ops);
        let mut c = String::new();
        for _ in 0..n {
            let op = *r.pick(b"MIDNSHP=XMMB");
            let len = if r.chance(2) {
                r.below(1 << 20)
            } else {
                r.below(60)
            };
            if matches!(op, b'M' | b'I' | b'S' | b'=' | b'X') {
                qlen += len;
            }
            c.push_str(&format!("{len}{}", op as char));
        }
        c
    };
    let with_seq = qlen < 5_000
        && !(cigar == "*" && r.chance(30))
        && !(cigar != "*" && qlen == 0 && r.chance(50));
    let seq_len = if cigar == "*" { r.below(40) } else { qlen };
    let seq = if with_seq && seq_len > 0 {
        random_text(r, seq_len, seq_len, b"=ACMGRSVTWYHKDBNacgtnuU.ACGTACGT")
    } else {
        "*".to_string()
    };
    let qual = if seq != "*" && r.chance(80) {
        let q: Vec<u8> = (b'!'..=b'~').collect();
        random_text(r, seq.len() as u64, seq.len() as u64, &q)
    } else {
        "*".to_string()
    };
    let rnext = match r.below(6) {
        0 => "*".to_string(),
        1 => "=".to_string(),
        2 => "nope".to_string(),
        _ => r.pick(REFS).0.to_string(),
    };
    let pnext = if r.chance(10) { 0 } else { r.below(2_000_000) };
    let tlen = r.next() as i32 as i64 / if r.chance(50) { 1 } else { 100_000 };
    let mut line = format!(
        "{qname}\t{flag}\t{rname}\t{pos}\t{mapq}\t{cigar}\t{rnext}\t{pnext}\t{tlen}\t{seq}\t{qual}"
    );
    for k in 0..r.below(7) {
        let tag = format!(
            "{}{k}",
            *r.pick(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") as char
        );
        line.push('\t');
        line.push_str(&random_aux(r, &tag));
    }
    line
}

/// Records the generator does not reach: CIGARs over 65535 operations
/// (stored in a CG tag), a CG tag that htslib moves into the CIGAR, B-array
/// retyping edges, and POS/TLEN limits.
fn special_records() -> Vec<String> {
    let long_cigar = "1M1D".repeat(40_000);
    let mut cg = String::from("CG:B:I");
    for op in [5u32 << 4, 3 << 4 | 1, 2 << 4 | 2, 2 << 4] {
        cg.push_str(&format!(",{op}"));
    }
    vec![
        format!("long\t0\tchr1\t100\t60\t{long_cigar}\t=\t200\t0\t*\t*\tNM:i:0"),
        format!("longseq\t0\tchr2\t1\t60\t{}\t*\t0\t0\t{}\t*", "1M".repeat(70_000), "A".repeat(70_000)),
        format!("cg\t0\tchr1\t100\t60\t10S5N\t*\t0\t0\tACGTACGTAC\t*\tXA:i:1\t{cg}\tXB:Z:after"),
        "cgunplaced\t4\t*\t0\t0\t10S\t*\t0\t0\tACGTACGTAC\t*\tCG:B:I,80".to_string(),
        "b\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\tXa:B:c,255\tXb:B:C,-1\tXc:B:c,200\tXd:B:C,254\tXe:B:c,-129,1\tXf:B:S,-1,70000\tXg:B:c\tXh:B:c,\tXi:B:f,,1".to_string(),
        "edge\t0\tchr1\t2147483648\t0\t1M\t=\t2147483648\t-2147483648\tA\t!".to_string(),
        "junk\t0\tchr1\t5\t0\t1M\t*\t0\t0\ta\t~\tXA:A:xyz\tXI:i:12abc\tXC:c:q\tXM:i:-\tXN:i:+7\tXF:f:0x1p-3\tXG:f: 5".to_string(),
        "\t0x10\tchr1\t+5\t\t1M\t*\t\t\tN\t*\t".to_string(),
        "flags\t017\tchr3x\t0\t0\t*\tchr1\t0\t0\t*\t*".to_string(),
    ]
}

/// SAM -> BAM -> SAM through samtools; returns (uncompressed BAM, SAM text).
fn samtools_roundtrip(dir: &Path, sam: &str) -> (Vec<u8>, Vec<u8>) {
    let sam_path = dir.join("in.sam");
    std::fs::write(&sam_path, sam).expect("write SAM");
    let bam_path = dir.join("out.bam");
    let raw_path = dir.join("out.raw");
    let text_path = dir.join("out.sam");
    let script = "import sys, gzip, pysam\n\
        sam, bam, raw, text = sys.argv[1:5]\n\
        pysam.samtools.view('-b', '--no-PG', '-o', bam, sam, catch_stdout=False)\n\
        open(raw, 'wb').write(gzip.decompress(open(bam, 'rb').read()))\n\
        pysam.samtools.view('--no-PG', '-o', text, bam, catch_stdout=False)\n";
    python(script, &[&sam_path, &bam_path, &raw_path, &text_path]);
    (
        std::fs::read(raw_path).expect("raw BAM"),
        std::fs::read(text_path).expect("SAM text"),
    )
}

fn header_text() -> String {
    let mut h = String::from("@HD\tVN:1.6\tSO:unsorted\n");
    for (name, len) in REFS {
        h.push_str(&format!("@SQ\tSN:{name}\tLN:{len}\n"));
    }
    h.push_str("@RG\tID:g1\tLB:lib1\n@PG\tID:gen\tPN:gen\n@CO\tdifferential test\n");
    h
}

#[test]
fn random_records_match_samtools_bytes_and_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ALNSORT_DIFF_SEED / ALNSORT_DIFF_N widen the search when debugging.
    let seed = std::env::var("ALNSORT_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let n = std::env::var("ALNSORT_DIFF_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let mut rng = Rng(seed);
    let mut records: Vec<String> = (0..n).map(|i| random_record(&mut rng, i)).collect();
    records.extend(special_records());
    let head = header_text();
    let mut sam = head.clone();
    for r in &records {
        sam.push_str(r);
        sam.push('\n');
    }
    let (raw, text) = samtools_roundtrip(dir.path(), &sam);

    let header_lines: Vec<&[u8]> = head.lines().map(str::as_bytes).collect();
    let header = parse_sam_header(header_lines).expect("our header parse");
    let mut cursor = std::io::Cursor::new(&raw[..]);
    let bam_header = read_bam_header(&mut cursor).expect("samtools' BAM header");
    assert_eq!(
        header.to_bam_bytes(),
        raw[..cursor.position() as usize],
        "BAM header block differs"
    );
    assert_eq!(
        bam_header, header,
        "BAM header reads back as the SAM header"
    );

    let lookup = header.ref_lookup();
    let mut at = cursor.position() as usize;
    let text_lines: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        text_lines.len(),
        records.len(),
        "samtools printed every record"
    );
    for (i, full_line) in records.iter().enumerate() {
        // Messages quote at most 300 bytes of a line (some are 280 kB).
        let line = &full_line[..full_line.len().min(300)];
        let size =
            read_block_size(raw[at..at + 4].try_into().expect("4 bytes")).expect("block size");
        let theirs = &raw[at..at + 4 + size];
        at += 4 + size;
        let mut ours = Vec::new();
        parse_sam_record(full_line.as_bytes(), &header, &lookup, &mut ours)
            .unwrap_or_else(|e| panic!("record {i} rejected ({e}): {line}"));
        assert!(ours == theirs, "BAM bytes differ for record {i}: {line}");
        assert_eq!(
            htslib_normalise(theirs),
            Ok(None),
            "samtools' record {i} is already normal: {line}"
        );
        validate_record(&ours[4..], header.n_ref())
            .unwrap_or_else(|e| panic!("record {i} invalid ({e}): {line}"));
        let mut printed = Vec::new();
        format_sam_record(RecordRef::with_block_size(&ours), &header, &mut printed);
        let expected = [text_lines[i], b"\n"].concat();
        assert!(
            printed == expected,
            "SAM text differs for record {i}: {line}\n ours: {}\ntheirs: {}",
            String::from_utf8_lossy(&printed[..printed.len().min(300)]),
            String::from_utf8_lossy(&expected[..expected.len().min(300)])
        );
    }
    assert_eq!(at, raw.len(), "all of samtools' records were compared");
}

/// `samtools sort` on a SAM with `header` and one record; returns its header.
fn samtools_sort_header(dir: &Path, header: &str, args: &[&str]) -> String {
    let sam_path = dir.join("h.sam");
    let out_path = dir.join("h.out.sam");
    std::fs::write(
        &sam_path,
        format!("{header}r1\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\n"),
    )
    .expect("write");
    let script = format!(
        "import sys, pysam\npysam.samtools.sort({} '-o', sys.argv[2], '-O', 'SAM', sys.argv[1], catch_stdout=False)\n",
        args.iter().map(|a| format!("'{a}',")).collect::<String>()
    );
    python(&script, &[&sam_path, &out_path]);
    let text = std::fs::read_to_string(&out_path).expect("sorted SAM");
    text.lines()
        .filter(|l| l.starts_with('@'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn header_edits_match_samtools_sort() {
    let dir = tempfile::tempdir().expect("tempdir");
    let headers = [
        "@HD\tVN:1.5\tSS:coordinate:foo\tGO:query\tSO:queryname\tZZ:keep\n@SQ\tSN:c1\tLN:10\n@CO\tx\n",
        "@CO\tfirst\n@SQ\tSN:c1\tLN:10\n@PG\tID:bull\tPP:donkey\n@PG\tID:donkey\n@CO\tmid\n@PG\tID:moose\n@PG\tID:cow\tPP:moose\n@CO\tend\n",
        "@SQ\tSN:c1\tLN:10\n@PG\tID:samtools\n@PG\tID:samtools.1\n@PG\tID:x\tPP:samtools\n@CO\tend\n",
        "@SQ\tSN:c1\tLN:10\n@HD\tVN:1.0\n@RG\tID:a\tLB:b\n",
    ];
    // (samtools sort options, SO, GO, SS)
    type Order<'a> = (&'a [&'a str], &'a str, Option<&'a str>, Option<&'a str>);
    let orders: [Order; 4] = [
        (&[], "coordinate", None, None),
        (&["-n"], "queryname", None, Some("queryname:natural")),
        (
            &["-t", "XY", "-N"],
            "unsorted",
            None,
            Some("unsorted:XY:queryname:lexicographical"),
        ),
        (
            &["--template-coordinate"],
            "unsorted",
            Some("query"),
            Some("unsorted:template-coordinate"),
        ),
    ];
    for text in headers {
        for (args, so, go, ss) in orders {
            let expected = samtools_sort_header(dir.path(), text, args);
            let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
            let mut h: Header = parse_sam_header(lines).expect("parse");
            h.set_sort_order(so, go, ss);
            let mut cl = String::from("samtools sort ");
            for a in args {
                cl.push_str(a);
                cl.push(' ');
            }
            let out = dir.path().join("h.out.sam");
            let inp = dir.path().join("h.sam");
            cl.push_str(&format!("-o {} -O SAM {}", out.display(), inp.display()));
            h.add_pg("samtools", "samtools", "1.24 (pysam)", &cl);
            assert_eq!(
                String::from_utf8_lossy(&h.to_sam_text()),
                expected,
                "header {text:?} with {args:?}"
            );
        }
    }
}
