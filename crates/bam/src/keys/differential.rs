//! Differential test against the oracle: random SAM files sorted by samtools
//! 1.24 (pysam 0.24.1, one fresh `python3` process per sort) must come out
//! in the same record order as a stable sort by our keys. Records carry
//! `XI:i:<input index>`, so the order is read from the output without
//! depending on how samtools re-formats a line.
//!
//! The generator stays inside the inputs where samtools' comparators are a
//! strict weak order (finite floats; no "mate mapped" records whose RNEXT is
//! `*`, where template-coordinate's int subtraction overflows) and where
//! htslib's SAM parser keeps the fields as written (mapped reads have POS > 0
//! and a CIGAR; a set RNEXT has PNEXT > 0; SEQ is `*`).
//!
//! The test fails, rather than skips, when python3 or pysam is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::testrec::{parse_cigar, Rec};
use super::*;
use crate::header::parse_sam_header;
use crate::sam_parse::parse_sam_record;

/// splitmix64 (Steele, Lea, Flood 2014): deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }
}

const REFS: [&str; 4] = ["chr1", "chr2", "chr3", "chrM"];
const READ_GROUPS: [(&str, Option<&str>); 4] = [
    ("g1", Some("libB")),
    ("g2", Some("libA")),
    ("g3", None),
    ("g4", Some("libB")),
];

fn header() -> String {
    let mut h = String::from("@HD\tVN:1.6\tSO:unsorted\n");
    for r in REFS {
        h.push_str(&format!("@SQ\tSN:{r}\tLN:100000\n"));
    }
    for (id, lb) in READ_GROUPS {
        h.push_str(&format!("@RG\tID:{id}\tSM:s"));
        if let Some(lb) = lb {
            h.push_str(&format!("\tLB:{lb}"));
        }
        h.push('\n');
    }
    h
}

fn random_name(rng: &mut Rng, previous: &[String]) -> String {
    if !previous.is_empty() && rng.chance(25) {
        return previous[rng.below(previous.len())].clone();
    }
    let alphabet = b"000112399aAbzZ+-_.:";
    let len = 1 + rng.below(9);
    (0..len)
        .map(|_| alphabet[rng.below(alphabet.len())] as char)
        .collect()
}

fn random_cigar(rng: &mut Rng) -> String {
    let mut c = String::new();
    if rng.chance(25) {
        c.push_str(&format!("{}H", 1 + rng.below(5)));
    }
    if rng.chance(35) {
        c.push_str(&format!("{}S", 1 + rng.below(5)));
    }
    for _ in 0..1 + rng.below(3) {
        let op = rng.pick(&["M", "M", "I", "D", "N", "=", "X"]);
        c.push_str(&format!("{}{op}", 1 + rng.below(20)));
    }
    if rng.chance(35) {
        c.push_str(&format!("{}S", 1 + rng.below(5)));
    }
    if rng.chance(25) {
        c.push_str(&format!("{}H", 1 + rng.below(5)));
    }
    c
}

fn random_xt(rng: &mut Rng) -> String {
    match rng.below(7) {
        0 => format!(
            "XT:i:{}",
            rng.pick(&["-3", "0", "10", "200", "-70000", "4294967295"])
        ),
        1 => format!(
            "XT:f:{}",
            rng.pick(&["10", "10.5", "-0", "0", "-3.25", "1e+10", "9.5"])
        ),
        2 => format!("XT:A:{}", rng.pick(&["a", "b", "Z", "~"])),
        3 => format!("XT:Z:{}", rng.pick(&["", "ab", "abc", "ABC", "b", "1AE3"])),
        4 => format!("XT:H:{}", rng.pick(&["1AE3", "FF", "AB"])),
        5 => format!("XT:B:{}", rng.pick(&["c,1,2", "i,5", "f,1.5"])),
        _ => format!("XT:i:{}", rng.below(4)),
    }
}

/// One SAM line; `index` becomes `XI:i`.
fn random_line(rng: &mut Rng, index: usize, names: &mut Vec<String>) -> String {
    let name = random_name(rng, names);
    names.push(name.clone());
    let mut flag = 0u16;
    for bit in [
        0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100, 0x400, 0x800,
    ] {
        if rng.chance(35) {
            flag |= bit;
        }
    }
    let unmapped = flag & 0x4 != 0;
    let placed = !unmapped || rng.chance(50);
    let (rname, pos) = if placed {
        (rng.pick(&REFS).to_string(), 1 + rng.below(300))
    } else {
        (
            "*".to_string(),
            if rng.chance(70) { 0 } else { 1 + rng.below(50) },
        )
    };
    let cigar = if unmapped && rng.chance(70) {
        "*".to_string()
    } else {
        random_cigar(rng)
    };
    let paired = flag & 0x1 != 0;
    let mate_mapped = paired && flag & 0x8 == 0;
    let (rnext, pnext) = if mate_mapped || (paired && rng.chance(50)) {
        let r = if placed && rng.chance(40) {
            "=".to_string()
        } else {
            rng.pick(&REFS).to_string()
        };
        (r, 1 + rng.below(300))
    } else {
        ("*".to_string(), 0)
    };
    let mut tags = Vec::new();
    if mate_mapped || rng.chance(10) {
        tags.push(format!("MC:Z:{}", random_cigar(rng)));
    }
    if rng.chance(70) {
        tags.push(format!(
            "RG:Z:{}",
            rng.pick(&["g1", "g2", "g3", "g4", "g5"])
        ));
    }
    if rng.chance(40) {
        tags.push(format!("CB:Z:{}", rng.pick(&["AAA", "AAC", "AA", "C"])));
    }
    if rng.chance(40) {
        tags.push(format!(
            "MI:Z:{}",
            rng.pick(&["1", "1/A", "1/B", "12", "2/A", "1/"])
        ));
    }
    if rng.chance(80) {
        tags.push(random_xt(rng));
    }
    tags.push(format!("XI:i:{index}"));
    format!(
        "{name}\t{flag}\t{rname}\t{pos}\t30\t{cigar}\t{rnext}\t{pnext}\t0\t*\t*\t{}",
        tags.join("\t")
    )
}

/// Parses one aux field (`TG:T:VALUE`) into `(tag, bam type, value bytes)`.
fn parse_aux(field: &str) -> (Vec<u8>, u8, Vec<u8>) {
    let (tag, rest) = field.split_at(2);
    let (ty, val) = (rest.as_bytes()[1], &rest[3..]);
    let (ty, bytes) = match ty {
        b'i' => {
            let v: i64 = val.parse().expect("int tag");
            match i32::try_from(v) {
                Ok(x) => (b'i', x.to_le_bytes().to_vec()),
                Err(_) => (b'I', (v as u32).to_le_bytes().to_vec()),
            }
        }
        b'f' => (
            b'f',
            val.parse::<f32>()
                .expect("float tag")
                .to_le_bytes()
                .to_vec(),
        ),
        b'A' => (b'A', val.as_bytes().to_vec()),
        b'Z' | b'H' => {
            let mut z = val.as_bytes().to_vec();
            z.push(0);
            (ty, z)
        }
        b'B' => {
            let mut parts = val.split(',');
            let sub = parts.next().expect("B subtype").as_bytes()[0];
            let items: Vec<&str> = parts.collect();
            let mut b = vec![sub];
            b.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for it in items {
                match sub {
                    b'c' => b.push(it.parse::<i8>().expect("B:c") as u8),
                    b'i' => b.extend_from_slice(&it.parse::<i32>().expect("B:i").to_le_bytes()),
                    b'f' => b.extend_from_slice(&it.parse::<f32>().expect("B:f").to_le_bytes()),
                    other => panic!("generator makes no B:{}", other as char),
                }
            }
            (b'B', b)
        }
        other => panic!("generator makes no type {}", other as char),
    };
    (tag.as_bytes().to_vec(), ty, bytes)
}

/// The fields the keys read, from one generated SAM line (an independent
/// check on the crate's parser, see `key_order_matches_samtools_1_24`).
fn parse_line(line: &str) -> Rec {
    let f: Vec<&str> = line.split('\t').collect();
    let tid = |s: &str| REFS.iter().position(|r| *r == s).map_or(-1, |i| i as i32);
    let t = tid(f[2]);
    let flag: u16 = f[1].parse().expect("flag");
    let mut r = Rec::new(f[0].as_bytes()).at(t, f[3].parse::<i32>().expect("pos") - 1, flag);
    if f[5] != "*" {
        r.cigar = parse_cigar(f[5].as_bytes()).expect("cigar");
    }
    let mtid = if f[6] == "=" { t } else { tid(f[6]) };
    r = r.mate(mtid, f[7].parse::<i32>().expect("pnext") - 1);
    for field in &f[11..] {
        let (tag, ty, val) = parse_aux(field);
        r = r.raw(&[tag[0], tag[1]], ty, &val);
    }
    r
}

/// Runs `samtools sort ARGS` through pysam in a fresh python process.
fn pysam_sort(args: &[&str]) -> Result<(), String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sys, pysam; pysam.samtools.sort(*sys.argv[1:])")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 (needed for the samtools oracle): {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn assert_oracle_is_1_24() {
    let out = Command::new("python3")
        .args(["-c", "import pysam; print(pysam.samtools.version())"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 (needed for the samtools oracle): {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("samtools 1.24"),
        "the differential test needs pysam 0.24.1 (samtools 1.24) importable by python3; got: {} {}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("alnsort-keys-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `XI` values of the records in a samtools SAM output, in output order.
fn output_indices(path: &Path) -> Vec<usize> {
    let text = std::fs::read_to_string(path).expect("samtools output");
    text.lines()
        .filter(|l| !l.starts_with('@'))
        .map(|l| {
            let xi = l
                .split('\t')
                .find_map(|f| f.strip_prefix("XI:i:"))
                .expect("XI tag kept");
            xi.parse().expect("XI value")
        })
        .collect()
}

/// `@RG` ID -> LB as the header module reports it; it must match the
/// generator's table.
fn libraries() -> Vec<(Vec<u8>, Vec<u8>)> {
    let text = header();
    let parsed = parse_sam_header(text.lines().map(str::as_bytes)).expect("header");
    let libs = parsed.library_map();
    let want: Vec<(Vec<u8>, Vec<u8>)> = READ_GROUPS
        .iter()
        .filter_map(|(id, lb)| lb.map(|lb| (id.as_bytes().to_vec(), lb.as_bytes().to_vec())))
        .collect();
    assert_eq!(libs, want);
    libs
}

/// Records (with `block_size`) from the crate's SAM parser.
fn parse_with_crate_parser(lines: &[String]) -> Vec<Vec<u8>> {
    let text = header();
    let parsed = parse_sam_header(text.lines().map(str::as_bytes)).expect("header");
    let refs = parsed.ref_lookup();
    lines
        .iter()
        .map(|l| {
            let mut out = Vec::new();
            parse_sam_record(l.as_bytes(), &parsed, &refs, &mut out)
                .unwrap_or_else(|e| panic!("crate parser rejects {l}: {e}"));
            out
        })
        .collect()
}

#[test]
fn key_order_matches_samtools_1_24() {
    assert_oracle_is_1_24();
    let scratch = Scratch::new("diff");
    let cases: [(&[&str], SortOrder); 8] = [
        (&[], SortOrder::Coordinate),
        (&["-n"], SortOrder::Name { natural: true }),
        (&["-N"], SortOrder::Name { natural: false }),
        (
            &["-t", "XT"],
            SortOrder::Tag {
                tag: b"XT".to_vec(),
                secondary: TagSecondary::Coordinate,
            },
        ),
        (
            &["-n", "-t", "XT"],
            SortOrder::Tag {
                tag: b"XT".to_vec(),
                secondary: TagSecondary::Name { natural: true },
            },
        ),
        (
            &["-N", "-t", "XTQ"],
            SortOrder::Tag {
                tag: b"XTQ".to_vec(),
                secondary: TagSecondary::Name { natural: false },
            },
        ),
        (
            &["-t", "RG"],
            SortOrder::Tag {
                tag: b"RG".to_vec(),
                secondary: TagSecondary::Coordinate,
            },
        ),
        (&["--template-coordinate"], SortOrder::TemplateCoordinate),
    ];
    for seed in [1u64, 2] {
        let mut rng = Rng(seed);
        let mut names = Vec::new();
        let lines: Vec<String> = (0..500)
            .map(|i| random_line(&mut rng, i, &mut names))
            .collect();
        let input = scratch.path(&format!("in{seed}.sam"));
        std::fs::write(&input, format!("{}{}\n", header(), lines.join("\n"))).expect("write input");
        let records = parse_with_crate_parser(&lines);
        for (args, order) in &cases {
            let output = scratch.path("out.sam");
            let mut argv: Vec<&str> = args.to_vec();
            let (out_s, in_s) = (output.to_string_lossy(), input.to_string_lossy());
            argv.extend_from_slice(&["-o", &out_s, "-O", "SAM", &in_s]);
            pysam_sort(&argv).unwrap_or_else(|e| panic!("samtools sort {args:?} failed: {e}"));
            let want = output_indices(&output);

            let enc = KeyEncoder::new(order.clone(), REFS.len(), &libraries());
            let mut keyed: Vec<(Vec<u8>, usize)> = Vec::with_capacity(records.len());
            for (i, (line, framed)) in lines.iter().zip(&records).enumerate() {
                let mut k = Vec::new();
                enc.encode(RecordRef::with_block_size(framed), &mut k)
                    .expect("key");
                // The crate's parser and the test builder must agree on
                // every field a key reads.
                let mut mine = Vec::new();
                enc.encode(RecordRef::new(&parse_line(line).bytes()), &mut mine)
                    .expect("key");
                assert_eq!(k, mine, "parsers disagree on {line}");
                keyed.push((k, i));
            }
            keyed.sort_by(|a, b| a.0.cmp(&b.0)); // stable: ties keep input order
            let got: Vec<usize> = keyed.iter().map(|&(_, i)| i).collect();
            if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
                panic!(
                    "seed {seed}, samtools sort {args:?}: first difference at output record {at}: \
                     ours {}\nsamtools {}",
                    lines[got[at]], lines[want[at]]
                );
            }
            assert_eq!(got.len(), want.len());
        }
    }
}

#[test]
fn template_coordinate_errors_match_samtools_1_24() {
    assert_oracle_is_1_24();
    let scratch = Scratch::new("err");
    let base = "r1\t65\tchr1\t100\t30\t10M\tchr1\t200\t0\t*\t*";
    let cases = [
        (
            base.to_string(),
            KeyError::MissingMateCigar {
                read_name: "r1".into(),
            },
        ),
        (
            format!("{base}\tMC:i:5"),
            KeyError::MateCigarWrongType {
                read_name: "r1".into(),
            },
        ),
        (
            format!("{base}\tMC:Z:10M\tCB:i:5"),
            KeyError::CellBarcodeWrongType {
                read_name: "r1".into(),
            },
        ),
        (
            format!("{base}\tMC:Z:10M\tMI:A:x"),
            KeyError::MolecularIdWrongType {
                read_name: "r1".into(),
            },
        ),
    ];
    let enc = KeyEncoder::new(SortOrder::TemplateCoordinate, REFS.len(), &[]);
    for (line, want) in cases {
        let input = scratch.path("in.sam");
        std::fs::write(&input, format!("{}{line}\n", header())).expect("write input");
        let output = scratch.path("out.sam");
        let (out_s, in_s) = (output.to_string_lossy(), input.to_string_lossy());
        let err = pysam_sort(&["--template-coordinate", "-o", &out_s, "-O", "SAM", &in_s])
            .expect_err("samtools must reject the record");
        let expected = format!("[bam_sort] error: {}", want.samtools_message());
        assert!(
            err.contains(&expected),
            "samtools said {err:?}, expected {expected:?}"
        );
        let rec = parse_line(&line).bytes();
        let got = enc
            .encode(RecordRef::new(&rec), &mut Vec::new())
            .expect_err("key error");
        assert_eq!(got, want);
    }
}
