//! The bodies of alnsort's fuzz targets. Each takes libFuzzer's bytes, feeds
//! them to one input-facing layer, and checks more than "no panic": what a
//! validator accepts must be safe to use through every accessor, what a parser
//! produces must pass the validator, and a sort with a tiny budget must return
//! a stable, sorted permutation of what went in. They live in a plain library
//! so that `cargo test` (stable, no libFuzzer) replays the committed corpus
//! through exactly the code the fuzzer runs.

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use alnsort_bam::header::{parse_sam_header, read_bam_header, Header};
use alnsort_bam::keys::{KeyEncoder, SortOrder, TagSecondary};
use alnsort_bam::sam_format::format_sam_record;
use alnsort_bam::sam_parse::parse_sam_record;
use alnsort_bam::validate::{htslib_normalise, validate_record};
use alnsort_bam::{RecordMut, RecordRef};
use alnsort_bgzf::block::{deflate_block, inflate_block, parse_header, CompressionLevel};
use alnsort_bgzf::{decompress_all, MAX_BLOCK_SIZE, MAX_PAYLOAD};
use alnsort_cram::{CramReader, RefSource};
use alnsort_sort::{KeyKind, SortConfig, SortError, SortStats, Sorter};

/// Every sort order the key encoder knows, with tags that the generated and
/// fuzzed records carry (and one that none carries).
fn all_orders() -> Vec<SortOrder> {
    let tag = |t: &[u8], secondary| SortOrder::Tag {
        tag: t.to_vec(),
        secondary,
    };
    vec![
        SortOrder::Coordinate,
        SortOrder::Name { natural: true },
        SortOrder::Name { natural: false },
        tag(b"RG", TagSecondary::Coordinate),
        tag(b"XI", TagSecondary::Name { natural: true }),
        tag(b"ZZ", TagSecondary::Name { natural: false }),
        tag(b"X", TagSecondary::Coordinate),
        SortOrder::TemplateCoordinate,
    ]
}

/// A SAM header with `n_ref` references (and two read groups, one with LB).
fn header_with_refs(n_ref: usize) -> Header {
    let mut lines: Vec<Vec<u8>> = vec![b"@HD\tVN:1.6\tSO:unsorted".to_vec()];
    for i in 0..n_ref {
        lines.push(format!("@SQ\tSN:chr{}\tLN:{}", i + 1, 1_000_000 * (i + 1)).into_bytes());
    }
    lines.push(b"@RG\tID:rg1\tLB:libA".to_vec());
    lines.push(b"@RG\tID:rg2".to_vec());
    parse_sam_header(lines.iter().map(|l| l.as_slice())).expect("fixed header parses")
}

// ---- bgzf_block ---------------------------------------------------------------------

/// `inflate_block` on arbitrary bytes: an error or a block whose inflated
/// payload re-deflates and inflates back to itself; `decompress_all` (the
/// multi-block path) must not panic either.
pub fn bgzf_block(data: &[u8]) {
    let mut d = libdeflater::Decompressor::new();
    let mut out = Vec::new();
    match inflate_block(data, 7, &mut out, &mut d) {
        Ok(()) => {
            let header = parse_header(data, 7).expect("inflate_block accepted this header");
            assert!(header.bsize <= data.len() && header.header_len < header.bsize);
            assert!(out.len() <= MAX_BLOCK_SIZE);
            if out.len() <= MAX_PAYLOAD {
                let level = CompressionLevel::default();
                let mut c = level.compressor();
                let mut block = Vec::new();
                deflate_block(&out, level, &mut block, &mut c).expect("payload fits a block");
                let mut again = Vec::new();
                inflate_block(&block, 0, &mut again, &mut d).expect("our own block inflates");
                assert_eq!(again, out, "deflate/inflate round trip changed the payload");
            }
        }
        Err(e) => assert_eq!(e.offset(), 7, "error names another block: {e}"),
    }
    if let Ok(all) = decompress_all(data) {
        // A complete file ends with the EOF block; every byte was checked.
        assert!(all.len() <= data.len().saturating_mul(1100));
    }
}

// ---- bam_record ---------------------------------------------------------------------

/// Touches every accessor of a validated record and encodes its key in
/// every order; formats it as SAM.
/// The edits of `RecordMut` on a valid record (`rec`, without its
/// `block_size`): a field taken out and put back where it was, the flag
/// set and set back, give the record again with its `block_size` right.
fn check_record_edits(rec: &[u8]) {
    let mut framed = (rec.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(rec);
    let want = framed.clone();
    let fields: Vec<_> = RecordRef::new(rec)
        .aux()
        .fields()
        .map(|f| f.expect("validated aux fields read back"))
        .collect();
    for f in fields.iter().take(4) {
        let mut m = RecordMut::new(&mut framed);
        m.remove_aux_range(f.range());
        assert_eq!(
            m.view().aux_bytes().len(),
            rec.len() - m.view().aux_offset() - (f.end() - f.offset)
        );
        m.insert_field(f.offset, f.tag, f.ty, f.value);
        let flag = m.view().flag();
        m.set_flag(!flag);
        m.set_flag(flag);
        assert_eq!(framed, want, "a field removed and put back at {}", f.offset);
    }
}

fn exercise_record(rec: &[u8], header: &Header) {
    let r = RecordRef::new(rec);
    let _ = (r.ref_id(), r.pos(), r.mapq(), r.bin(), r.flag(), r.tlen());
    let _ = (r.next_ref_id(), r.next_pos(), r.l_read_name());
    assert!(
        r.read_name().len() < r.l_read_name(),
        "the name excludes its NUL"
    );
    assert_eq!(r.cigar().len(), r.n_cigar_op());
    assert_eq!(r.cigar().ops().count(), r.n_cigar_op());
    if r.n_cigar_op() > 0 && r.l_seq() > 0 && r.flag() & 0x4 == 0 {
        assert_eq!(
            r.cigar().query_length(),
            r.l_seq() as u64,
            "validation checked the query length of a mapped record"
        );
    }
    assert_eq!(r.cigar_bytes().len(), 4 * r.n_cigar_op());
    assert_eq!(r.seq_bytes().len(), r.l_seq().div_ceil(2));
    assert_eq!(r.qual().len(), r.l_seq());
    let _ = r.reference_length();
    // Validation read every field: the walk meets no error and each
    // field's typed value can be taken.
    for f in r.aux().fields() {
        let f = f.expect("validated aux fields read back");
        let _ = f.value();
        assert_eq!(
            r.aux().find(f.tag).map(|g| g.offset <= f.offset),
            Some(true)
        );
    }
    for tag in [*b"RG", *b"XI", *b"NM", *b"CG", *b"MC", *b"ZZ"] {
        let _ = r.aux().find(tag);
    }
    check_record_edits(rec);
    let mut key = Vec::new();
    for order in all_orders() {
        let fixed = order == SortOrder::Coordinate;
        let enc = KeyEncoder::new(order, header.n_ref(), &header.library_map());
        if enc.encode(r, &mut key).is_ok() && fixed {
            assert_eq!(key.len(), 8, "coordinate keys are 8 bytes");
        }
    }
    let mut sam = Vec::new();
    format_sam_record(r, header, &mut sam);
    assert_eq!(sam.last(), Some(&b'\n'), "a SAM line ends in a newline");
}

/// `validate_record` on arbitrary bytes (the first byte picks `n_ref`, the
/// rest is the record after `block_size`); a record it accepts must survive
/// every accessor, every key order, the SAM formatter and htslib's
/// normalisation (whose output must validate too).
pub fn bam_record(data: &[u8]) {
    let Some((&sel, rec)) = data.split_first() else {
        return;
    };
    let n_ref = (sel % 4) as usize;
    if validate_record(rec, n_ref).is_err() {
        return;
    }
    let header = header_with_refs(n_ref);
    exercise_record(rec, &header);
    let mut framed = (rec.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(rec);
    if let Ok(Some(fixed)) = htslib_normalise(&framed) {
        let body = &fixed[4..];
        assert_eq!(
            u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) as usize,
            body.len()
        );
        validate_record(body, n_ref).expect("the normalised record validates");
        exercise_record(body, &header);
    }
}

// ---- sam_line -------------------------------------------------------------------------

/// `parse_sam_record` on arbitrary lines against a fixed header: what it
/// produces must validate, survive `exercise_record`, and format to a line
/// that parses again and formats identically (format . parse is idempotent
/// after one round).
pub fn sam_line(data: &[u8]) {
    static HEADER: OnceLock<Header> = OnceLock::new();
    let header = HEADER.get_or_init(|| header_with_refs(3));
    let lookup = header.ref_lookup();
    for line in data.split(|&b| b == b'\n') {
        let mut out = Vec::new();
        if parse_sam_record(line, header, &lookup, &mut out).is_err() {
            assert!(out.is_empty(), "a failed parse leaves the buffer as it was");
            continue;
        }
        let len = u32::from_le_bytes([out[0], out[1], out[2], out[3]]) as usize;
        assert_eq!(len + 4, out.len(), "block_size matches what was written");
        if let Err(e) = validate_record(&out[4..], header.n_ref()) {
            panic!(
                "parse_sam_record produced a record validate_record rejects ({e}): {:?}",
                String::from_utf8_lossy(line)
            );
        }
        exercise_record(&out[4..], header);
        let mut text = Vec::new();
        format_sam_record(RecordRef::with_block_size(&out), header, &mut text);
        // The round trip holds only for text within the SAM character set:
        // a value with a control byte (a CR before an embedded NUL, which
        // htslib also keeps) cannot survive a line-based reparse.
        let body = &text[..text.len() - 1];
        if !body
            .iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        {
            continue;
        }
        let mut again = Vec::new();
        parse_sam_record(&text, header, &lookup, &mut again).unwrap_or_else(|e| {
            panic!(
                "our own SAM line does not parse ({e}): {:?}",
                String::from_utf8_lossy(&text)
            )
        });
        let mut text2 = Vec::new();
        format_sam_record(RecordRef::with_block_size(&again), header, &mut text2);
        assert_eq!(
            String::from_utf8_lossy(&text),
            String::from_utf8_lossy(&text2),
            "format(parse(format(parse(line)))) differs"
        );
    }
}

// ---- header ------------------------------------------------------------------------------

/// `read_bam_header` on arbitrary bytes (whole, and one byte per read) and
/// `parse_sam_header` on arbitrary lines; a SAM header within SAM's
/// character set that parses must survive BAM serialisation and reading back
/// with the same reference list.
pub fn header(data: &[u8]) {
    let mut r = data;
    if let Ok(h) = read_bam_header(&mut r) {
        let _ = h.to_sam_text();
        let bytes = h.to_bam_bytes();
        // A BAM header's text is kept as it is where the binary list names
        // the references (htslib does the same), so what was read need not
        // read back: a TAB in a binary name or @SQ text with conflicting LN
        // tags give headers that samtools also writes and cannot read; a
        // binary length of 0 is one samtools refuses (README findings 2, 4,
        // 5). Checked: reading back never panics and, for names SAM text
        // can hold, keeps the reference count.
        let names_ok = h
            .refs()
            .iter()
            .all(|r| r.name.iter().all(|&b| b >= 0x20 && b != 0x7f));
        if let Ok(back) = read_bam_header(&mut bytes.as_slice()) {
            // (A TAB in a name also splits its @SQ line into a new reference.)
            assert!(
                !names_ok || back.n_ref() == h.n_ref(),
                "reference count changed"
            );
        }
    }
    // Also through a reader that returns one byte at a time.
    let _ = read_bam_header(&mut OneByte(data));
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    // Known (reported): a header line with a NUL or another control byte
    // parses, but the BAM header written from it does not read back; the
    // round trip is checked only for text within SAM's character set.
    let sam_text = data
        .iter()
        .all(|&b| b == b'\t' || b == b'\n' || (0x20..0x7f).contains(&b));
    if let Ok(h) = parse_sam_header(lines.iter().copied()) {
        if !sam_text {
            return;
        }
        let bytes = h.to_bam_bytes();
        let back = read_bam_header(&mut bytes.as_slice())
            .expect("a parsed SAM header serialises to a valid BAM header");
        assert_eq!(
            back.n_ref(),
            h.n_ref(),
            "reference count changed through BAM"
        );
        for (a, b) in back.refs().iter().zip(h.refs()) {
            assert_eq!(a.name, b.name);
        }
        let _ = h.ref_lookup();
        let _ = h.library_map();
    }
}

struct OneByte<'a>(&'a [u8]);

impl Read for OneByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.split_first(), buf.is_empty()) {
            (Some((&b, rest)), false) => {
                buf[0] = b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

// ---- sort_tiny_budget ----------------------------------------------------------------------

/// One pool for every iteration (building one per input would dominate).
fn pool() -> Arc<rayon::ThreadPool> {
    static POOL: OnceLock<Arc<rayon::ThreadPool>> = OnceLock::new();
    Arc::clone(POOL.get_or_init(|| {
        Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .expect("thread pool"),
        )
    }))
}

/// A private scratch directory per iteration, removed by `Drop`.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "alnsort-fuzz-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds one valid BAM record from 6 fuzz bytes; its input index goes in
/// an `XI:i` tag so stability can be checked after the sort.
fn build_record(b: &[u8; 6], index: u32, n_ref: usize) -> Vec<u8> {
    const NAMES: [&str; 12] = [
        "a1", "a01", "a10", "a9", "r1.2", "r1.10", "x", "x0", "read7", "read07", "A", "_",
    ];
    let ref_id = (b[0] as i32 % (n_ref as i32 + 1)) - 1;
    let pos = if ref_id < 0 && b[1] & 1 == 0 {
        -1
    } else {
        (b[1] as i32) * 3 + (b[2] as i32 % 7)
    };
    let flag = [0u16, 0x10, 0x4, 0x41, 0x81, 0x101, 0x801, 0x63, 0x93][b[3] as usize % 9];
    let name = NAMES[b[4] as usize % NAMES.len()];
    let l_seq = (b[5] % 5) as usize;
    let mapped_cigar = flag & 0x4 == 0 && l_seq > 0 && b[5] & 0x80 == 0;
    let next_ref = if flag & 1 != 0 { ref_id } else { -1 };
    let mut rec = Vec::new();
    rec.extend_from_slice(&ref_id.to_le_bytes());
    rec.extend_from_slice(&pos.to_le_bytes());
    rec.push((name.len() + 1) as u8);
    rec.push(60);
    rec.extend_from_slice(&4680u16.to_le_bytes());
    rec.extend_from_slice(&(u16::from(mapped_cigar)).to_le_bytes());
    rec.extend_from_slice(&flag.to_le_bytes());
    rec.extend_from_slice(&(l_seq as u32).to_le_bytes());
    rec.extend_from_slice(&next_ref.to_le_bytes());
    rec.extend_from_slice(&(if next_ref >= 0 { pos + 5 } else { -1 }).to_le_bytes());
    rec.extend_from_slice(&0i32.to_le_bytes());
    rec.extend_from_slice(name.as_bytes());
    rec.push(0);
    if mapped_cigar {
        rec.extend_from_slice(&((l_seq as u32) << 4).to_le_bytes());
    }
    rec.extend(std::iter::repeat_n(0x12u8, l_seq.div_ceil(2)));
    rec.extend(std::iter::repeat_n(30u8, l_seq));
    rec.extend_from_slice(b"XIi");
    rec.extend_from_slice(&index.to_le_bytes());
    if b[2] & 0x80 != 0 {
        rec.extend_from_slice(if b[2] & 0x40 != 0 {
            b"RGZrg1\0"
        } else {
            b"RGZrg2\0"
        });
    }
    let mut framed = (rec.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&rec);
    framed
}

fn xi(rec: &[u8]) -> u32 {
    match RecordRef::with_block_size(rec).aux().find(*b"XI") {
        Some(f) if f.ty == b'i' => f.int().expect("an i value") as u32,
        other => panic!("record lost its XI tag: {other:?}"),
    }
}

/// Builds records from the input, sorts them with `alnsort_sort::Sorter`
/// under a budget of a few KiB (so it spills, and with a small
/// `max_open_runs` merges runs in several passes), and checks the output is
/// exactly the input records, in non-decreasing key order, equal keys in
/// input order, with the temp directory empty afterwards.
pub fn sort_tiny_budget(data: &[u8]) {
    sort_tiny_budget_stats(data);
}

/// `sort_tiny_budget`, returning the sorter's counters (None for an input
/// too short to configure a sort) so tests can see it spilled and merged.
pub fn sort_tiny_budget_stats(data: &[u8]) -> Option<SortStats> {
    let [order_sel, budget_sel, runs_sel, ref_sel, rest @ ..] = data else {
        return None;
    };
    let orders = all_orders();
    let order = orders[*order_sel as usize % orders.len()].clone();
    let n_ref = 1 + (*ref_sel % 3) as usize;
    let header = header_with_refs(n_ref);
    let encoder = KeyEncoder::new(order, n_ref, &header.library_map());
    let mut input: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut key = Vec::new();
    for (i, chunk) in rest.chunks_exact(6).take(4000).enumerate() {
        let rec = build_record(chunk.try_into().expect("6 bytes"), i as u32, n_ref);
        validate_record(&rec[4..], n_ref).expect("generated record is valid");
        if encoder
            .encode(RecordRef::with_block_size(&rec), &mut key)
            .is_ok()
        {
            input.push((key.clone(), rec));
        }
    }
    let scratch = Scratch::new();
    let config = SortConfig {
        // 512 B .. 16.8 KiB: a spill every few records at the low end.
        memory_budget: 512 + *budget_sel as usize * 64,
        temp_dir: scratch.0.clone(),
        key_kind: if encoder.is_fixed8() {
            KeyKind::Fixed8
        } else {
            KeyKind::Variable
        },
        max_open_runs: [0, 2, 3, 5][*runs_sel as usize % 4],
        // Automatic, or the final merge cut into key ranges of one record,
        // a few records, or a few hundred.
        merge_partition_bytes: [0, 1, 300, 5000][(*runs_sel as usize / 4) % 4],
        chunk_fill: Default::default(),
        // Unknown (spills in halves), or the input's own bytes, whatever
        // it is (a share of one sub-batch where few runs are expected):
        // the schedule must not change the output.
        expected_bytes: match (*runs_sel / 16) % 2 {
            0 => 0,
            _ => input.iter().map(|(k, r)| (k.len() + r.len()) as u64).sum(),
        },
    };
    let mut sorter = Sorter::new(config, pool()).expect("a budget of 256+ bytes is accepted");
    let mut pushed: Vec<&(Vec<u8>, Vec<u8>)> = Vec::new();
    for item in &input {
        match sorter.push(&item.0, &item.1) {
            Ok(()) => pushed.push(item),
            Err(SortError::RecordTooLarge { .. }) => {}
            Err(e) => panic!("push failed: {e}"),
        }
    }
    let mut merged = sorter.finish().expect("finish");
    let stats = merged.stats();
    let mut out: Vec<Vec<u8>> = Vec::new();
    while let Some(rec) = merged.next_record().expect("merge") {
        out.push(rec.to_vec());
    }
    drop(merged);
    assert_eq!(out.len(), pushed.len(), "records lost or duplicated");
    let mut want: Vec<&(Vec<u8>, Vec<u8>)> = pushed.clone();
    want.sort_by(|a, b| a.0.cmp(&b.0)); // stable: equal keys keep input order
    for (i, (got, w)) in out.iter().zip(&want).enumerate() {
        assert_eq!(
            got,
            &w.1,
            "output record {i} (XI {}) is not the stable-sorted input record (XI {})",
            xi(got),
            xi(&w.1)
        );
    }
    let left: Vec<_> = std::fs::read_dir(&scratch.0)
        .expect("scratch dir")
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    assert!(left.is_empty(), "run files left after the merge: {left:?}");
    Some(stats)
}

// ---- cram ----------------------------------------------------------------------------------

/// The fixed reference every CRAM seed was written against
/// (`fuzz/make_seeds.py`), so that reference lookups and MD5 checks pass.
const CRAM_REF: &[u8] = include_bytes!("../cram_ref.fa");

/// At most this many containers are decoded per input.
const CRAM_MAX_CONTAINERS: usize = 64;

/// A [`RefSource`] over [`CRAM_REF`], written once per process to a file of
/// its own (no `.fai`: read whole), with no `REF_PATH`/`REF_CACHE`.
fn cram_refs() -> &'static RefSource {
    static SRC: OnceLock<RefSource> = OnceLock::new();
    SRC.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("alnsort-fuzz-cram-ref-{}.fa", std::process::id()));
        std::fs::write(&path, CRAM_REF).expect("write the fuzz reference");
        let mut src = RefSource::default();
        src.fasta = Some(path);
        src
    })
}

/// What decoding one input gave: containers read, records decoded, and
/// whether it ended in an error (rather than the end of the file).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CramOutcome {
    pub opened: bool,
    pub containers: usize,
    pub records: u64,
    pub failed: bool,
}

/// Arbitrary bytes through the crate's public CRAM reader: the file
/// definition and header container ([`CramReader::open`]), then each
/// container ([`CramReader::next_container`]: header, CRC32, body) and its
/// slices, blocks, codecs and records ([`PendingContainer::decode`]) against
/// the fixed reference. Every failure must be an error value whose message
/// formats; every record decoded must be a valid BAM record for the
/// header's references. The bytes are also decoded once more with every
/// container header and block CRC32 recomputed ([`cram_reseal`]), so that
/// mutations reach the decoders behind the checksums.
pub fn cram(data: &[u8]) {
    cram_outcome(data);
    let sealed = cram_reseal(data);
    if sealed != data {
        cram_outcome(&sealed);
    }
}

/// The body of [`cram`] for one byte string, returning what it reached.
pub fn cram_outcome(data: &[u8]) -> CramOutcome {
    let mut o = CramOutcome::default();
    let mut reader = match CramReader::open("fuzz.cram", data, cram_refs()) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            o.failed = true;
            return o;
        }
    };
    o.opened = true;
    // The records must fit the header's reference list (as the sort's
    // record layer reads it); a header alnsort_bam cannot parse is checked
    // against no references.
    let text = reader.header_text().to_vec();
    let header = parse_sam_header(text.split(|&b| b == b'\n').filter(|l| !l.is_empty()))
        .unwrap_or_else(|_| Header::empty());
    let n_ref = header.n_ref();
    let ctx = reader.context();
    let mut out = Vec::new();
    while o.containers < CRAM_MAX_CONTAINERS {
        let pending = match reader.next_container() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                o.failed = true;
                break;
            }
        };
        o.containers += 1;
        out.clear();
        match pending.decode(&ctx, &mut out) {
            Ok(n) => {
                assert_eq!(n, pending.records, "decode's count is the header's");
                let mut rest = out.as_slice();
                let mut seen = 0u64;
                while !rest.is_empty() {
                    assert!(rest.len() >= 4, "a record's block_size cut short");
                    let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                    assert!(rest.len() >= 4 + len, "a record cut short");
                    let rec = &rest[4..4 + len];
                    // The CLI validates every decoded record as it does a
                    // BAM input's (README finding 6): an invalid one is an
                    // error there, so only the valid ones go on.
                    match validate_record(rec, n_ref) {
                        Ok(()) => exercise_record(rec, &header),
                        Err(e) => assert!(!e.to_string().is_empty()),
                    }
                    rest = &rest[4 + len..];
                    seen += 1;
                }
                assert_eq!(seen, n, "records framed in the output");
                o.records += n;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                o.failed = true;
                break;
            }
        }
    }
    o
}

/// `data` with every CRC32 recomputed that a CRAM 3 reader checks: each
/// container header's and each block's, walking the containers and the
/// blocks in their bodies as far as they parse. Other bytes are kept.
pub fn cram_reseal(data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    if d.len() < 26 || &d[..4] != b"CRAM" || d[4] < 3 {
        return d;
    }
    let mut p = 26;
    while p < d.len() {
        let Some((body, end)) = reseal_container(&mut d, p) else {
            break;
        };
        let mut b = body;
        while b < end {
            match reseal_block(&mut d, b, end) {
                Some(next) => b = next,
                None => break,
            }
        }
        p = end;
    }
    d
}

/// Recomputes the header CRC of the container at `p`; returns where its
/// body starts and ends (the end clamped to the data).
fn reseal_container(d: &mut [u8], p: usize) -> Option<(usize, usize)> {
    let len = i32::from_le_bytes(d.get(p..p + 4)?.try_into().ok()?);
    let mut q = p + 4;
    for _ in 0..4 {
        itf8(d, &mut q)?;
    }
    ltf8(d, &mut q)?;
    ltf8(d, &mut q)?;
    itf8(d, &mut q)?;
    let n = itf8(d, &mut q)?;
    if !(0..=1 << 16).contains(&n) {
        return None;
    }
    for _ in 0..n {
        itf8(d, &mut q)?;
    }
    let crc = crc32fast::hash(d.get(p..q)?);
    d.get_mut(q..q + 4)?.copy_from_slice(&crc.to_le_bytes());
    let body = q + 4;
    let end = body.saturating_add(usize::try_from(len).ok()?).min(d.len());
    Some((body, end))
}

/// Recomputes the CRC of the block at `p` (within `end`); returns where the
/// next block starts.
fn reseal_block(d: &mut [u8], p: usize, end: usize) -> Option<usize> {
    let mut q = p + 2;
    itf8(d, &mut q)?;
    let size = usize::try_from(itf8(d, &mut q)?).ok()?;
    itf8(d, &mut q)?;
    let data_end = q.checked_add(size)?;
    if data_end + 4 > end {
        return None;
    }
    let crc = crc32fast::hash(&d[p..data_end]);
    d[data_end..data_end + 4].copy_from_slice(&crc.to_le_bytes());
    Some(data_end + 4)
}

/// An ITF8 integer at `*q` (CRAM spec §2.3), advancing `q`.
fn itf8(d: &[u8], q: &mut usize) -> Option<i32> {
    let b0 = *d.get(*q)? as u32;
    let extra = (b0 as u8).leading_ones().min(4) as usize;
    let bytes = d.get(*q + 1..*q + 1 + extra)?;
    *q += 1 + extra;
    let v = match extra {
        0 => b0,
        1 => ((b0 & 0x3f) << 8) | bytes[0] as u32,
        2 => ((b0 & 0x1f) << 16) | (bytes[0] as u32) << 8 | bytes[1] as u32,
        3 => {
            ((b0 & 0x0f) << 24) | (bytes[0] as u32) << 16 | (bytes[1] as u32) << 8 | bytes[2] as u32
        }
        _ => {
            ((b0 & 0x0f) << 28)
                | (bytes[0] as u32) << 20
                | (bytes[1] as u32) << 12
                | (bytes[2] as u32) << 4
                | (bytes[3] as u32 & 0x0f)
        }
    };
    Some(v as i32)
}

/// An LTF8 integer at `*q` (only its length matters here), advancing `q`.
fn ltf8(d: &[u8], q: &mut usize) -> Option<()> {
    let extra = d.get(*q)?.leading_ones() as usize;
    d.get(*q..*q + 1 + extra)?;
    *q += 1 + extra;
    Some(())
}

/// A simple mutator for the stable-Rust replay (and for long runs without
/// cargo-fuzz, see README): `rounds` mutants of `seed`, each with 1 to 4
/// edits (bit flips, bytes set to boundary values, a 4-byte field set to a
/// huge length, a cut, a deleted or duplicated run), each run through
/// [`cram`]. Returns how many of them decoded at least one record.
pub fn cram_mutations(seed: &[u8], rounds: usize, state: &mut u64) -> usize {
    let mut rand = |n: usize| {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state % n.max(1) as u64) as usize
    };
    let dump = std::env::var_os("CRAM_MUTATION_DUMP");
    let mut decoded = 0;
    for _ in 0..rounds {
        let mut m = seed.to_vec();
        for _ in 0..1 + rand(4) {
            if m.is_empty() {
                break;
            }
            let at = rand(m.len());
            match rand(7) {
                0 | 1 => m[at] ^= 1 << rand(8),
                2 => m[at] = [0, 0x7f, 0x80, 0xff, 0xfe, 0x01][rand(6)],
                3 => {
                    let huge: [u8; 4] = [
                        0x7fff_ffffu32.to_le_bytes(),
                        0x8000_0000u32.to_le_bytes(),
                        [0xff, 0xff, 0xff, 0xff],
                        [0xf7, 0xff, 0xff, 0xff],
                    ][rand(4)];
                    let end = (at + 4).min(m.len());
                    m[at..end].copy_from_slice(&huge[..end - at]);
                }
                4 => m.truncate(at),
                5 => {
                    let end = (at + 1 + rand(16)).min(m.len());
                    m.drain(at..end);
                }
                _ => {
                    let end = (at + 1 + rand(16)).min(m.len());
                    let run = m[at..end].to_vec();
                    m.splice(at..at, run);
                }
            }
        }
        if let Some(path) = &dump {
            // Where the input that panics can be found (CRAM_MUTATION_DUMP).
            std::fs::write(path, &m).expect("write the mutant");
        }
        let sealed = cram_reseal(&m);
        cram_outcome(&m);
        if cram_outcome(&sealed).records > 0 {
            decoded += 1;
        }
    }
    decoded
}

/// Where each container of a CRAM 3 file starts (the header container
/// first), as far as the headers parse.
pub fn cram_container_starts(data: &[u8]) -> Vec<usize> {
    let mut d = data.to_vec();
    let mut starts = Vec::new();
    let mut p = 26;
    while p < d.len() {
        let Some((_, end)) = reseal_container(&mut d, p) else {
            break;
        };
        starts.push(p);
        p = end;
    }
    starts
}
