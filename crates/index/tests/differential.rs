//! Differential test against htslib 1.24 (through pysam's bundled samtools):
//! coordinate-sorted BAMs with several references, dense and sparse
//! regions, long deletions and N-skips, zero-length alignments, unmapped
//! placed reads, records larger than a BGZF block and unplaced reads at the
//! end are decoded here, every record is pushed with logical offsets, and
//! the finished index must equal what `samtools index` (BAI),
//! `samtools index -c` and `samtools sort --write-index` (CSI) write. CSI is
//! compared after inflating, and our BGZF framing is then checked by having
//! htslib answer region queries with our file.
//!
//! python3 with pysam is required: without it these tests fail.

use alnsort_index::{
    logical_offset, record_end, IndexBuilder, IndexError, IndexFile, IndexFormat, IndexRecord,
};
use libdeflater::Decompressor;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes a SAM file for one scenario and the same records as an unsorted
/// BAM beside it (`<path>.bam`). Arguments: path, scenario, seed.
const GENERATE_SAM: &str = r#"
import random, sys, pysam
path, scenario, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
if scenario == "bai":
    refs = [("chrA", 2_000_000), ("chrB", 300_000), ("chrC", 50_000), ("chrD", 40_000_000), ("chrE", 100_000)]
elif scenario == "deep":
    refs = [("big", 1_000_000_000), ("small", 5_000)]
else:
    refs = [("chr1", 10_000), ("chr2", 20_000)]
out = open(path, "w")
out.write("@HD\tVN:1.6\tSO:unsorted\n")
for name, length in refs:
    out.write(f"@SQ\tSN:{name}\tLN:{length}\n")
n = 0
def rec(flag, rname, pos, cigar, seq_len):
    global n
    n += 1
    seq = "".join(rng.choices("ACGT", k=seq_len))
    qual = "".join(rng.choices("!#%&*+-05:?@DFHJ", k=seq_len))
    out.write(f"r{n}\t{flag}\t{rname}\t{pos}\t60\t{cigar}\t*\t0\t0\t{seq}\t{qual}\n")
def mapped(rname, length, pos=None, cigar=None, seq_len=None):
    seq_len = seq_len or rng.randint(60, 150)
    if pos is None:
        pos = rng.randint(1, length - 200)
    rec(rng.choice([0, 16]), rname, pos, cigar or f"{seq_len}M", seq_len)
def spliced(rname, length, gap_op, max_gap):
    gap = int(10 ** rng.uniform(1, max_gap))
    pos = rng.randint(1, max(1, length - gap - 200))
    mapped(rname, length, pos, f"50M{gap}{gap_op}50M", 100)
if scenario == "bai":
    a = 2_000_000
    for _ in range(40):
        centre, size = rng.randint(30_000, a - 30_000), rng.choice([3, 30, 300, 1500])
        for _ in range(size):
            mapped("chrA", a, centre + rng.randint(-20_000, 20_000))
    for _ in range(3000):
        mapped("chrA", a)
    for _ in range(300):
        spliced("chrA", a, "N", 6.2)
    for _ in range(200):
        spliced("chrA", a, "D", 4.7)
    for _ in range(20):
        k = rng.randint(10, 40)
        mapped("chrA", a, None, rng.choice([f"{k}S", f"{k}I"]), k)
    for _ in range(300):
        rec(4, "chrA", rng.randint(1, a), "*", 100)
    for big in (70_000, 140_000):
        mapped("chrA", a, rng.randint(1, a - big), None, big)
    rec(4, "chrB", 1, "*", 80)  # made placed with POS 0 (beg -1) below
    minus_one = f"r{n}"
    for _ in range(2000):
        mapped("chrB", 300_000)
    for _ in range(800):
        mapped("chrD", 40_000_000)
    for _ in range(40):
        spliced("chrD", 40_000_000, "N", 7.3)
    for _ in range(50):
        rec(4, "chrE", rng.randint(1, 100_000), "*", 90)
    for _ in range(300):
        rec(4, "*", 0, "*", 100)
elif scenario == "deep":
    big = 1_000_000_000
    for _ in range(3000):
        mapped("big", big)
    edge = 1 << 29
    for _ in range(800):
        mapped("big", big, edge + rng.randint(-5_000, 5_000))
    for _ in range(50):
        mapped("big", big, edge - rng.randint(100, 100_000), f"50M{rng.randint(100_000, 3_000_000)}N50M", 100)
    for _ in range(100):
        mapped("small", 5_000)
    for _ in range(20):
        rec(4, "*", 0, "*", 100)
elif scenario == "unplaced":
    for _ in range(500):
        rec(4, "*", 0, "*", 100)
out.close()
# SAM cannot express a placed record at POS 0 (htslib unplaces it), so
# write the unsorted BAM with pysam and move that one record by hand.
with pysam.AlignmentFile(path) as sam, pysam.AlignmentFile(path + ".bam", "wb", template=sam) as bam:
    for r in sam:
        if scenario == "bai" and r.query_name == minus_one:
            r.reference_start = -1
        bam.write(r)
"#;

/// Compares region queries through two indexes of one BAM. Arguments: bam,
/// index a, index b, number of regions, seed. Prints `OK <records seen>`.
const COMPARE_REGIONS: &str = r#"
import random, sys, pysam
bam, idx_a, idx_b, n, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
fa = pysam.AlignmentFile(bam, index_filename=idx_a)
fb = pysam.AlignmentFile(bam, index_filename=idx_b)
refs = list(zip(fa.references, fa.lengths))
seen = 0
for i in range(n):
    name, length = rng.choice(refs)
    beg = rng.randint(0, length - 1)
    end = min(length, beg + int(10 ** rng.uniform(0, 7)))
    ra = [(r.query_name, r.reference_start, r.flag) for r in fa.fetch(name, beg, end)]
    rb = [(r.query_name, r.reference_start, r.flag) for r in fb.fetch(name, beg, end)]
    if ra != rb:
        print(f"MISMATCH {name}:{beg}-{end} {len(ra)} vs {len(rb)}")
        sys.exit(1)
    seen += len(ra)
print(f"OK {seen}")
"#;

/// Run a Python snippet in a fresh interpreter; panics loudly on failure.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("python3 is required for this test and could not be run: {e}"));
    assert!(
        out.status.success(),
        "python3 failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `samtools <command> <args>` via pysam's bundled samtools, in a fresh process.
fn samtools(command: &str, args: &[&str]) -> Result<(), String> {
    let script = "import sys, pysam\ngetattr(pysam, sys.argv[1])(*sys.argv[2:])";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(command)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("python3 is required for this test and could not be run: {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn require_pysam() {
    let version = python("import pysam; print(pysam.__samtools_version__)", &[]);
    assert!(
        !version.trim().is_empty(),
        "pysam did not report a samtools version"
    );
}

/// A decoded BGZF file: compressed offset and payload of every block.
struct Bgzf {
    offsets: Vec<u64>,
    payloads: Vec<Vec<u8>>,
}

fn read_bgzf(bytes: &[u8]) -> Bgzf {
    let mut d = Decompressor::new();
    let (mut offsets, mut payloads, mut pos) = (Vec::new(), Vec::new(), 0usize);
    while pos < bytes.len() {
        let h = &bytes[pos..];
        assert!(
            h[0] == 31 && h[1] == 139 && h[3] & 4 != 0,
            "not a BGZF block at {pos}"
        );
        let xlen = u16::from_le_bytes([h[10], h[11]]) as usize;
        let (mut x, mut bsize) = (12, None);
        while x < 12 + xlen {
            let slen = u16::from_le_bytes([h[x + 2], h[x + 3]]) as usize;
            if h[x] == b'B' && h[x + 1] == b'C' {
                bsize = Some(u16::from_le_bytes([h[x + 4], h[x + 5]]) as usize + 1);
            }
            x += 4 + slen;
        }
        let size = bsize.expect("BGZF block without BC field");
        let isize = u32::from_le_bytes(h[size - 4..size].try_into().expect("4 bytes")) as usize;
        let mut payload = vec![0; isize];
        let n = d
            .deflate_decompress(&h[12 + xlen..size - 8], &mut payload)
            .expect("inflate");
        assert_eq!(n, isize);
        offsets.push(pos as u64);
        payloads.push(payload);
        pos += size;
    }
    Bgzf { offsets, payloads }
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Reference lengths and one [`IndexRecord`] per BAM record, with logical
/// offsets as a writer would report them, plus the blocks' real offsets.
struct Decoded {
    ref_lengths: Vec<u64>,
    records: Vec<IndexRecord>,
    block_offsets: Vec<u64>,
}

fn decode_bam(path: &Path) -> Decoded {
    let bgzf = read_bgzf(&std::fs::read(path).expect("read BAM"));
    let mut starts = Vec::new(); // uncompressed start of each block
    let mut data = Vec::new();
    for p in &bgzf.payloads {
        starts.push(data.len());
        data.extend_from_slice(p);
    }
    // Logical offset of stream position `p`, naming the block holding byte
    // `p` (`at_end`: the block holding byte `p - 1`, as a writer reports an end).
    let logical = |p: usize, at_end: bool| -> u64 {
        let probe = if at_end { p - 1 } else { p };
        let b = starts.partition_point(|&s| s <= probe) - 1;
        logical_offset(
            b as u64,
            u16::try_from(p - starts[b]).expect("offset within a block"),
        )
    };
    assert_eq!(&data[..4], b"BAM\x01");
    let l_text = le_i32(&data, 4) as usize;
    let mut pos = 8 + l_text;
    let n_ref = le_i32(&data, pos) as usize;
    pos += 4;
    let mut ref_lengths = Vec::new();
    for _ in 0..n_ref {
        let l_name = le_i32(&data, pos) as usize;
        ref_lengths.push(le_i32(&data, pos + 4 + l_name) as u64);
        pos += 8 + l_name;
    }
    let mut records = Vec::new();
    while pos < data.len() {
        let block_size = le_i32(&data, pos) as usize;
        let r = &data[pos + 4..pos + 4 + block_size];
        let l_read_name = r[8] as usize;
        let n_cigar = u16::from_le_bytes([r[12], r[13]]) as usize;
        let flag = u16::from_le_bytes([r[14], r[15]]);
        let cigar_at = 32 + l_read_name;
        let span = alnsort_bam::Cigar::new(&r[cigar_at..cigar_at + 4 * n_cigar]).reference_length();
        let mapped = flag & 4 == 0;
        let beg = i64::from(le_i32(r, 4));
        let end_pos = pos + 4 + block_size;
        records.push(IndexRecord {
            ref_id: le_i32(r, 0),
            beg,
            end: record_end(beg, span, mapped),
            mapped,
            vstart: logical(pos, false),
            vend: logical(end_pos, true),
        });
        pos = end_pos;
    }
    Decoded {
        ref_lengths,
        records,
        block_offsets: bgzf.offsets,
    }
}

fn build(decoded: &Decoded, format: IndexFormat) -> Result<IndexFile, IndexError> {
    let mut builder = IndexBuilder::new(format, &decoded.ref_lengths)?;
    for r in &decoded.records {
        builder.push(r)?;
    }
    builder.finish(&decoded.block_offsets)
}

/// Position and a little context of the first differing byte.
fn first_difference(ours: &[u8], theirs: &[u8]) -> String {
    let at = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    let lo = at.saturating_sub(16);
    format!(
        "lengths {} vs {}, first difference at byte {at}: ours {:?} theirs {:?}",
        ours.len(),
        theirs.len(),
        &ours[lo..(at + 16).min(ours.len())],
        &theirs[lo..(at + 16).min(theirs.len())]
    )
}

fn assert_same_bai(ours: &IndexFile, bai: &Path) {
    let theirs = std::fs::read(bai).expect("read samtools .bai");
    assert!(!ours.is_bgzf());
    assert!(
        ours.content() == &theirs[..],
        "BAI {}: {}",
        bai.display(),
        first_difference(ours.content(), &theirs)
    );
}

fn assert_same_csi(ours: &IndexFile, csi: &Path) {
    let theirs = read_bgzf(&std::fs::read(csi).expect("read samtools .csi"));
    let inflated: Vec<u8> = theirs.payloads.concat();
    assert!(ours.is_bgzf());
    assert!(
        ours.content() == &inflated[..],
        "CSI {}: {}",
        csi.display(),
        first_difference(ours.content(), &inflated)
    );
    // Same block split: htslib fills 0xff00-byte payloads, then an empty EOF block.
    let ours_sizes: Vec<usize> = read_bgzf(&ours.file_bytes())
        .payloads
        .iter()
        .map(Vec::len)
        .collect();
    let their_sizes: Vec<usize> = theirs.payloads.iter().map(Vec::len).collect();
    assert_eq!(
        ours_sizes,
        their_sizes,
        "CSI block payload sizes for {}",
        csi.display()
    );
}

/// Write our index beside a copy of `bam` and compare region queries with
/// samtools' index for it.
fn assert_same_queries(dir: &Path, bam: &Path, ours: &IndexFile, theirs: &Path, name: &str) {
    let ours_path = dir.join(name);
    std::fs::write(&ours_path, ours.file_bytes()).expect("write our index");
    let report = python(
        COMPARE_REGIONS,
        &[
            path_str(bam),
            path_str(theirs),
            path_str(&ours_path),
            "300",
            "7",
        ],
    );
    let seen: u64 = report
        .trim()
        .strip_prefix("OK ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        seen > 0,
        "region comparison for {name} saw no records: {report}"
    );
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Unsorted BAM for `scenario`, and that BAM sorted by samtools into `<scenario>.bam`.
fn sorted_bam(dir: &Path, scenario: &str, seed: &str) -> (PathBuf, PathBuf) {
    let sam = dir.join(format!("{scenario}.sam"));
    python(GENERATE_SAM, &[path_str(&sam), scenario, seed]);
    let unsorted = dir.join(format!("{scenario}.sam.bam"));
    let bam = dir.join(format!("{scenario}.bam"));
    samtools("sort", &["-o", path_str(&bam), path_str(&unsorted)]).expect("samtools sort");
    (unsorted, bam)
}

#[test]
fn matches_samtools_index_bai_and_csi() {
    require_pysam();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let (_, bam) = sorted_bam(d, "bai", "11");
    let decoded = decode_bam(&bam);
    assert!(
        decoded.block_offsets.len() > 40,
        "want a BAM of many blocks: {}",
        decoded.block_offsets.len()
    );
    assert!(
        decoded.records.iter().any(|r| r.ref_id < 0)
            && decoded.records.iter().any(|r| r.beg < 0 && r.ref_id >= 0)
    );

    let bai = d.join("theirs.bai");
    samtools("index", &["-o", path_str(&bai), path_str(&bam)]).expect("samtools index");
    let ours_bai = build(&decoded, IndexFormat::Bai).expect("our BAI");
    assert_same_bai(&ours_bai, &bai);

    for min_shift in [14u32, 12] {
        let csi = d.join(format!("theirs.m{min_shift}.csi"));
        let m = min_shift.to_string();
        samtools(
            "index",
            &["-c", "-m", &m, "-o", path_str(&csi), path_str(&bam)],
        )
        .expect("samtools index -c");
        let ours_csi = build(&decoded, IndexFormat::Csi { min_shift }).expect("our CSI");
        assert_same_csi(&ours_csi, &csi);
        if min_shift == 14 {
            assert_same_queries(d, &bam, &ours_csi, &csi, "ours.csi");
        }
    }
    assert_same_queries(d, &bam, &ours_bai, &bai, "ours.bai");
}

#[test]
fn matches_samtools_sort_write_index() {
    require_pysam();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let (unsorted, _) = sorted_bam(d, "bai", "23");
    for (threads, kind) in [("1", "csi"), ("4", "csi"), ("4", "bai")] {
        let out = d.join(format!("wi{threads}.bam"));
        let idx = d.join(format!("wi{threads}.{kind}"));
        let spec = format!("{}##idx##{}", path_str(&out), path_str(&idx));
        samtools(
            "sort",
            &[
                "--write-index",
                "-@",
                threads,
                "-o",
                &spec,
                path_str(&unsorted),
            ],
        )
        .expect("samtools sort --write-index");
        let decoded = decode_bam(&out);
        if kind == "bai" {
            assert_same_bai(&build(&decoded, IndexFormat::Bai).expect("our BAI"), &idx);
        } else {
            assert_same_csi(
                &build(&decoded, IndexFormat::DEFAULT_CSI).expect("our CSI"),
                &idx,
            );
        }
    }
}

#[test]
fn matches_samtools_for_deep_csi_and_refuses_bai() {
    require_pysam();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let (_, bam) = sorted_bam(d, "deep", "5");
    let decoded = decode_bam(&bam);
    let csi = d.join("deep.csi");
    samtools("index", &["-c", "-o", path_str(&csi), path_str(&bam)]).expect("samtools index -c");
    let ours = build(&decoded, IndexFormat::DEFAULT_CSI).expect("our CSI");
    assert_eq!(
        &ours.content()[4..12],
        &[14, 0, 0, 0, 6, 0, 0, 0],
        "min_shift 14, depth 6"
    );
    assert_same_csi(&ours, &csi);
    assert_same_queries(d, &bam, &ours, &csi, "ours.deep.csi");
    // Positions past 2^29 cannot go in a BAI: both refuse.
    assert!(samtools(
        "index",
        &["-o", path_str(&d.join("deep.bai")), path_str(&bam)]
    )
    .is_err());
    assert!(matches!(
        build(&decoded, IndexFormat::Bai),
        Err(IndexError::PositionOutOfRange { .. })
    ));
}

#[test]
fn matches_samtools_for_unplaced_only_and_empty_files() {
    require_pysam();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let (_, bam) = sorted_bam(d, "unplaced", "3");
    let (_, empty) = sorted_bam(d, "empty", "3");
    for (bam, expect_records) in [(bam, 500), (empty, 0)] {
        let decoded = decode_bam(&bam);
        assert_eq!(decoded.records.len(), expect_records);
        let (bai, csi) = (bam.with_extension("bai"), bam.with_extension("csi"));
        samtools("index", &["-o", path_str(&bai), path_str(&bam)]).expect("samtools index");
        samtools("index", &["-c", "-o", path_str(&csi), path_str(&bam)])
            .expect("samtools index -c");
        assert_same_bai(&build(&decoded, IndexFormat::Bai).expect("our BAI"), &bai);
        assert_same_csi(
            &build(&decoded, IndexFormat::DEFAULT_CSI).expect("our CSI"),
            &csi,
        );
    }
}
