use super::*;
use crate::header::{parse_sam_header, read_bam_header};
use crate::keys::SortOrder;
use crate::record::flags;
use crate::test_util::pool;
use alnsort_bgzf::{compress_all, CompressionLevel};
use std::io::Write;

fn header() -> Header {
    parse_sam_header([&b"@SQ\tSN:chr1\tLN:1000000"[..]]).expect("header")
}

/// Valid framed records of varied lengths, some far longer than a BGZF
/// block so they span blocks.
fn records(n: usize) -> Vec<Vec<u8>> {
    let h = header();
    let lookup = h.ref_lookup();
    (0..n)
        .map(|i| {
            let len = match i % 50 {
                7 => 70_000,
                13 => 20_000,
                _ => 20 + (i * 37) % 400,
            };
            let seq: String = (0..len).map(|j| b"ACGT"[(i + j) % 4] as char).collect();
            let line = format!(
                "r{i}\t0\tchr1\t{}\t60\t{len}M\t*\t0\t0\t{seq}\t*\tXI:i:{i}",
                1 + (i * 7919) % 900_000
            );
            let mut out = Vec::new();
            sam_parse::parse_sam_record(line.as_bytes(), &h, &lookup, &mut out).expect("parse");
            out
        })
        .collect()
}

/// A BAM file of `records` (header first), written to a temp file.
fn bam_file(records: &[Vec<u8>]) -> tempfile::NamedTempFile {
    let mut data = header().to_bam_bytes();
    for r in records {
        data.extend_from_slice(r);
    }
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(&compress_all(&data, CompressionLevel::default()))
        .expect("write");
    f
}

/// A scanner positioned after the header of `path`.
fn scanner(path: &std::path::Path, opts: ScanOptions) -> BamScanner {
    let file = File::open(path).expect("open");
    let mut reader = ParallelReader::new(file, pool(), Vec::new()).expect("reader");
    read_bam_header(&mut reader).expect("header");
    BamScanner::new("test.bam".into(), reader, opts)
}

/// Every record of a scan, with its virtual offset, checking the batches
/// are cut at record boundaries and numbered consecutively.
fn drain(mut s: BamScanner) -> Result<Vec<(u64, Vec<u8>)>, ReadError> {
    let mut out = Vec::new();
    let mut next_record = None;
    while let Some(b) = s.next_batch()? {
        if let Some(n) = next_record {
            assert_eq!(b.first_record, n, "batches number records consecutively");
        }
        let recs: Vec<&[u8]> = b.records().map(|(r, _)| r).collect();
        assert_eq!(recs.len(), b.voffsets.len(), "a record for each offset");
        let total: usize = recs.iter().map(|r| r.len()).sum();
        assert_eq!(total, b.bytes(), "a batch holds whole records only");
        for (&vo, r) in b.voffsets.iter().zip(recs) {
            out.push((vo, r.to_vec()));
        }
        next_record = Some(b.first_record + b.voffsets.len() as u64);
    }
    Ok(out)
}

fn small_batches() -> ScanOptions {
    ScanOptions {
        batch_bytes: 5000,
        ..ScanOptions::default()
    }
}

#[test]
fn full_read_returns_every_record_in_order() {
    let recs = records(300);
    let f = bam_file(&recs);
    let got = drain(scanner(f.path(), small_batches())).expect("read");
    let got: Vec<Vec<u8>> = got.into_iter().map(|(_, r)| r).collect();
    assert_eq!(got, recs);
}

#[test]
fn a_missing_eof_block_is_noticed_once_on_the_batch_reaching_the_end() {
    let recs = records(300);
    let f = bam_file(&recs);
    let data = std::fs::read(f.path()).expect("read");
    let cut = data.len() - alnsort_bgzf::EOF_BLOCK.len();
    std::fs::write(f.path(), &data[..cut]).expect("write");
    for opts in [small_batches(), ScanOptions::default()] {
        let mut s = scanner(f.path(), opts);
        let mut notices = Vec::new();
        let mut n = 0;
        while let Some(b) = s.next_batch().expect("whole records read") {
            n += b.voffsets.len();
            notices.push(b.missing_eof);
        }
        assert_eq!(n, recs.len());
        let last = notices.pop().flatten();
        assert_eq!(last, Some(cut as u64), "the last batch carries it");
        assert!(notices.iter().all(Option::is_none), "only the last one");
    }
    // A whole file: no notice.
    let f = bam_file(&recs);
    let mut s = scanner(f.path(), ScanOptions::default());
    while let Some(b) = s.next_batch().expect("read") {
        assert_eq!(b.missing_eof, None);
    }
}

#[test]
fn decode_warns_of_a_missing_eof_block_and_counts_it() {
    let h = Arc::new(header());
    let dec = Decoder {
        file: "t.bam".into(),
        lookup: Arc::new(h.ref_lookup()),
        encoder: Arc::new(KeyEncoder::new(SortOrder::Coordinate, 1, &[])),
        header: h,
        record_limit: usize::MAX,
        unknown_reference: UnknownReference::default(),
    };
    for sam in [false, true] {
        let batch = RawBatch {
            sam,
            missing_eof: Some(1234),
            ..RawBatch::default()
        };
        let mut warnings = Vec::new();
        let got = dec
            .decode(&batch, |_, _| Ok(()), |w| warnings.push(w))
            .expect("an empty batch decodes");
        assert_eq!(got.missing_eof_blocks, 1);
        assert_eq!(warnings, vec![missing_eof_warning(1234)]);
    }
}

#[test]
fn two_halves_split_at_a_virtual_offset_are_the_full_read() {
    let recs = records(300);
    let f = bam_file(&recs);
    let full = drain(scanner(f.path(), small_batches())).expect("full read");
    // Split points: inside a block, right after a record spanning blocks,
    // and at the first and last record.
    for split in [1, 8, 150, 151, 299] {
        let vo = full[split].0;
        let first = drain(scanner(
            f.path(),
            ScanOptions {
                end: RangeEnd::VirtualOffset(vo),
                ..small_batches()
            },
        ))
        .expect("first half");
        let second = drain(
            BamScanner::open_at(
                "test.bam".into(),
                File::open(f.path()).expect("open"),
                pool(),
                vo,
                ScanOptions {
                    first_record: split as u64,
                    ..small_batches()
                },
            )
            .expect("open at"),
        )
        .expect("second half");
        assert_eq!(first.len(), split, "split at record {split}");
        let joined: Vec<(u64, Vec<u8>)> = first.into_iter().chain(second).collect();
        assert_eq!(joined, full, "split at record {split} (voffset {vo:#x})");
    }
    assert!(
        full[7].1.len() > alnsort_bgzf::MAX_PAYLOAD,
        "record 8 spans BGZF blocks, so split 8 starts right after it"
    );
}

#[test]
fn a_record_count_ends_the_range() {
    let recs = records(120);
    let f = bam_file(&recs);
    let got = drain(scanner(
        f.path(),
        ScanOptions {
            end: RangeEnd::Records(77),
            ..small_batches()
        },
    ))
    .expect("read");
    assert_eq!(got.len(), 77);
    assert_eq!(got.last().unwrap().1, recs[76]);
}

#[test]
fn truncation_names_the_record_and_the_records_before_it_come_first() {
    let recs = records(60);
    let f = bam_file(&recs);
    // Cut the uncompressed stream inside record 40 and re-compress, so the
    // BGZF layer is intact and the record itself is short.
    let mut data = header().to_bam_bytes();
    let header_len = data.len();
    for r in &recs[..39] {
        data.extend_from_slice(r);
    }
    let rec40_offset = (data.len() - header_len) as u64;
    data.extend_from_slice(&recs[39][..recs[39].len() / 2]);
    std::fs::write(f.path(), compress_all(&data, CompressionLevel::default())).expect("write");
    let mut s = scanner(f.path(), small_batches());
    let mut seen = 0;
    let err = loop {
        match s.next_batch() {
            Ok(Some(b)) => seen += b.voffsets.len(),
            Ok(None) => panic!("no error"),
            Err(e) => break e,
        }
    };
    assert_eq!(seen, 39, "the records before the bad one are delivered");
    match &err {
        ReadError::Record {
            record,
            offset,
            problem: Problem::Truncated { .. },
            ..
        } => {
            assert_eq!(*record, 40);
            assert_eq!(*offset, header_len as u64 + rec40_offset);
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(err
        .to_string()
        .starts_with("test.bam: record 40 at uncompressed byte offset"));
    assert!(s.next_batch().expect("after an error, the end").is_none());
}

#[test]
fn a_block_size_over_the_limit_is_refused_before_reading_it() {
    let recs = records(10);
    let f = bam_file(&recs);
    let err = drain(scanner(
        f.path(),
        ScanOptions {
            record_limit: 10_000,
            ..small_batches()
        },
    ))
    .expect_err("record 8 is 70,000 bytes");
    assert!(matches!(
        err,
        ReadError::Record {
            record: 8,
            problem: Problem::BlockTooLarge { limit: 10_000, .. },
            ..
        }
    ));
}

#[test]
fn decode_reports_the_exact_bad_record_of_a_batch() {
    let mut recs = records(40);
    // refID 7 in a header with one reference: record 23 is invalid.
    recs[22][4..8].copy_from_slice(&7i32.to_le_bytes());
    let f = bam_file(&recs);
    let h = Arc::new(header());
    let decoder = Decoder {
        file: "test.bam".into(),
        lookup: Arc::new(h.ref_lookup()),
        encoder: Arc::new(KeyEncoder::new(SortOrder::Coordinate, h.n_ref(), &[])),
        header: h,
        record_limit: usize::MAX,
        unknown_reference: UnknownReference::Error,
    };
    let mut s = scanner(f.path(), ScanOptions::default());
    let batch = s.next_batch().expect("scan").expect("a batch");
    assert_eq!(batch.voffsets.len(), 40, "one batch");
    let mut keys = Vec::new();
    let err = decoder
        .decode(
            &batch,
            |k, _| {
                keys.push(k.to_vec());
                Ok(())
            },
            |_| {},
        )
        .expect_err("record 23");
    assert_eq!(keys.len(), 22);
    let header_len = header().to_bam_bytes().len();
    let offset = header_len + recs[..22].iter().map(Vec::len).sum::<usize>();
    match err {
        ReadError::Record {
            record: 23,
            offset: o,
            block,
            problem: Problem::Record(_),
            ..
        } => {
            assert_eq!(o, offset as u64);
            assert_eq!(block, batch.voffsets[22] >> 16);
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn sam_batches_are_whole_lines_numbered_from_the_header() {
    let text: String = (0..100)
        .map(|i| format!("r{i}\t4\t*\t0\t0\t*\t*\t0\t0\tACGT\tIIII\n"))
        .collect();
    let mut s = SamScanner::new(
        "t.sam".into(),
        Box::new(io::Cursor::new(text.clone().into_bytes())),
        3,
        ScanOptions {
            batch_bytes: 300,
            ..ScanOptions::default()
        },
    );
    let mut joined = Vec::new();
    let mut next_line = 4;
    while let Some(b) = s.next_batch().expect("scan") {
        assert!(b.sam && b.data.ends_with(b"\n"));
        assert_eq!(b.first_position, next_line);
        next_line += b.data.iter().filter(|&&c| c == b'\n').count() as u64;
        joined.extend_from_slice(&b.data);
    }
    assert_eq!(joined, text.as_bytes());
}

#[test]
fn unknown_reference_names_warn_like_htslib() {
    let header = parse_sam_header([&b"@SQ\tSN:chr1\tLN:100"[..]]).unwrap();
    let lookup = header.ref_lookup();
    let line = b"r1\t1\tchrX\t5\t0\t*\tchrY\t7\t0\t*\t*";
    let mut out = Vec::new();
    sam_parse::parse_sam_record(line, &header, &lookup, &mut out).unwrap();
    let mut warnings = Vec::new();
    unknown_reference_warnings(line, RecordRef::with_block_size(&out), &lookup, |w| {
        warnings.push(w)
    });
    assert_eq!(
        warnings,
        [
            "unrecognized reference name \"chrX\"; treated as unmapped",
            "unrecognized mate reference name \"chrY\"; treated as unmapped"
        ]
    );
    let line = b"r1\t1\tchr1\t5\t0\t*\t=\t7\t0\t*\t*";
    out.clear();
    sam_parse::parse_sam_record(line, &header, &lookup, &mut out).unwrap();
    let mut n = 0;
    unknown_reference_warnings(line, RecordRef::with_block_size(&out), &lookup, |_| n += 1);
    assert_eq!(n, 0, "known names and '=' do not warn");
}

/// Decodes `text` (SAM lines after a one-line header naming chr1) under
/// `policy`: the records' (tid, flag, next tid), the warnings, and the result.
#[allow(clippy::type_complexity)]
fn decode_sam_text(
    text: &str,
    policy: UnknownReference,
) -> (
    Vec<(i32, u16, i32)>,
    Vec<String>,
    Result<Decoded, ReadError>,
) {
    let h = Arc::new(header());
    let decoder = Decoder {
        file: "in.sam".into(),
        lookup: Arc::new(h.ref_lookup()),
        encoder: Arc::new(KeyEncoder::new(SortOrder::Coordinate, h.n_ref(), &[])),
        header: h,
        record_limit: usize::MAX,
        unknown_reference: policy,
    };
    let mut s = SamScanner::new(
        "in.sam".into(),
        Box::new(io::Cursor::new(text.as_bytes().to_vec())),
        1,
        ScanOptions::default(),
    );
    let batch = s.next_batch().expect("scan").expect("a batch");
    let mut recs = Vec::new();
    let mut warnings = Vec::new();
    let result = decoder.decode(
        &batch,
        |_, rec| {
            let r = RecordRef::with_block_size(rec);
            recs.push((r.ref_id(), r.flag(), r.next_ref_id()));
            Ok(())
        },
        |w| warnings.push(w),
    );
    (recs, warnings, result)
}

const UNKNOWN_REFS: &str = "a\t0\tchr1\t5\t0\t4M\t=\t9\t0\tACGT\tIIII\n\
                            b\t0\tchr9\t5\t0\t4M\t=\t9\t0\tACGT\tIIII\n\
                            c\t1\tchr1\t5\t0\t4M\tchrZ\t9\t0\tACGT\tIIII\n\
                            d\t1\tchrX\t5\t0\t4M\tchrY\t9\t0\tACGT\tIIII\n\
                            e\t4\t*\t0\t0\t*\t*\t0\t0\tACGT\tIIII\n";

#[test]
fn an_unknown_rname_is_an_error_naming_line_record_and_name_by_default() {
    let (recs, warnings, result) = decode_sam_text(UNKNOWN_REFS, UnknownReference::default());
    assert_eq!(recs.len(), 1, "record 1 only: record 2 stops the batch");
    assert!(warnings.is_empty());
    let err = result.expect_err("chr9 is not in the header");
    assert!(
        matches!(
            &err,
            ReadError::Line { line: 3, record: 2, problem: Problem::UnknownReference { field: "RNAME", name }, .. }
                if name == "chr9"
        ),
        "{err:?}"
    );
    let text = format!("{}: {}", err, std::error::Error::source(&err).unwrap());
    assert_eq!(
        text,
        "in.sam: line 3 (record 2): RNAME 'chr9' is not in the header's @SQ lines; add it to the header, \
         or use --unknown-reference=unmapped to keep samtools' behaviour"
    );
}

#[test]
fn an_unknown_rnext_is_an_error_by_default() {
    let text: String = UNKNOWN_REFS
        .lines()
        .filter(|l| !l.starts_with('b'))
        .map(|l| format!("{l}\n"))
        .collect();
    let (recs, _, result) = decode_sam_text(&text, UnknownReference::Error);
    assert_eq!(recs.len(), 1);
    let err = result.expect_err("chrZ is not in the header");
    assert!(
        matches!(
            &err,
            ReadError::Line { line: 3, record: 2, problem: Problem::UnknownReference { field: "RNEXT", name }, .. }
                if name == "chrZ"
        ),
        "{err:?}"
    );
}

#[test]
fn unmapped_policy_reads_unknown_names_as_htslib_and_counts_the_records() {
    let (recs, warnings, result) = decode_sam_text(UNKNOWN_REFS, UnknownReference::Unmapped);
    let decoded = result.expect("no error under the unmapped policy");
    assert_eq!(decoded.unknown_reference_records, 3, "b, c and d; d once");
    assert_eq!(
        recs,
        [
            (0, 0, 0),
            (-1, flags::UNMAPPED, -1),
            (0, 1, -1),
            (-1, 1 | flags::UNMAPPED, -1),
            (-1, 4, -1)
        ]
    );
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert_eq!(
        warnings[0],
        "line 3 (record 2): unrecognized reference name \"chr9\"; treated as unmapped"
    );
}

#[test]
fn an_empty_line_is_an_error_naming_its_line_wherever_it_is() {
    // samtools 1.24 stops at an empty line among the records or after the
    // last ("Parse error at line N", "truncated file").
    let a = "a\t0\tchr1\t5\t0\t4M\t*\t0\t0\tACGT\tIIII\n";
    let b = "b\t0\tchr1\t6\t0\t4M\t*\t0\t0\tACGT\tIIII";
    for (text, line, record, read) in [
        (format!("{a}\n{b}\n"), 3, 2, 1),
        (format!("{a}{b}\n\n"), 4, 3, 2),
        (format!("\n{a}"), 2, 1, 0),
    ] {
        let (recs, _, result) = decode_sam_text(&text, UnknownReference::Error);
        assert_eq!(recs.len(), read, "{text:?}");
        let err = result.expect_err("an empty line");
        assert!(
            matches!(
                &err,
                ReadError::Line { line: l, record: r, problem: Problem::EmptyLine, .. }
                    if *l == line && *r == record
            ),
            "{text:?}: {err:?}"
        );
        let shown = format!("{}: {}", err, std::error::Error::source(&err).unwrap());
        assert!(
            shown.starts_with(&format!(
                "in.sam: line {line} (record {record}): an empty line"
            )),
            "{shown}"
        );
    }
    let (recs, _, result) = decode_sam_text(&format!("{a}{b}\n"), UnknownReference::Error);
    result.expect("no empty line");
    assert_eq!(recs.len(), 2);
}

/// A BAM file blocked as htslib blocks it: a block ends before a record
/// that does not fit, so every block starts at a record (except inside a
/// record longer than a block).
fn aligned_bam_file(records: &[Vec<u8>]) -> tempfile::NamedTempFile {
    let mut w = alnsort_bgzf::BlockWriter::new(alnsort_bgzf::ParallelWriter::new(
        Vec::new(),
        pool(),
        CompressionLevel::default(),
    ));
    w.write_bytes(&header().to_bam_bytes()).expect("header");
    w.end_block().expect("flush");
    for r in records {
        w.write_unit(r).expect("record");
    }
    let file = w.finish(true).expect("finish").inner;
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    f.write_all(&file).expect("write");
    f
}

#[test]
fn record_starts_hop_from_block_size_to_block_size() {
    let recs = records(5);
    let mut block = recs.concat();
    let ends: Vec<usize> = recs
        .iter()
        .scan(0, |at, r| {
            *at += r.len();
            Some(*at)
        })
        .collect();
    let mut starts = Vec::new();
    let cut = ends[3] - 10;
    assert_eq!(record_starts(&block[..cut], 0, &mut starts), Some(10));
    assert_eq!(starts, [0, ends[0] as u32, ends[1] as u32, ends[2] as u32]);
    // A block_size refused, or cut by the block's end: the chain stops
    // there, its record not listed.
    starts.clear();
    block[ends[1]..ends[1] + 4].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(record_starts(&block, 0, &mut starts), None);
    assert_eq!(starts, [0, ends[0] as u32]);
    starts.clear();
    assert_eq!(record_starts(&block[..ends[0] + 2], 0, &mut starts), None);
    assert_eq!(starts, [0]);
}

#[test]
fn records_of_blocks_that_start_at_records_come_from_the_jobs_lists() {
    let recs = records(400);
    let f = aligned_bam_file(&recs);
    for opts in [small_batches(), ScanOptions::default()] {
        let got: Vec<Vec<u8>> = drain(scanner(f.path(), opts))
            .expect("read")
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        assert_eq!(got, recs);
    }
    // The same virtual offsets as a read of the records one by one.
    let mut reader =
        ParallelReader::new(File::open(f.path()).expect("open"), pool(), Vec::new()).expect("r");
    read_bam_header(&mut reader).expect("header");
    let mut want = Vec::new();
    for r in &recs {
        want.push(reader.position().virtual_offset());
        let mut buf = vec![0; r.len()];
        reader.read_exact(&mut buf).expect("record");
    }
    let got: Vec<u64> = drain(scanner(f.path(), small_batches()))
        .expect("read")
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_listed_record_over_the_limit_is_refused() {
    // Small records, then a 20,000-byte one inside a block, past the blocks
    // inflated before the scanner set the jobs' scan.
    let mut recs: Vec<Vec<u8>> = records(20_000)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !matches!(i % 50, 7 | 13))
        .map(|(_, r)| r)
        .collect();
    recs.insert(15_000, records(14).pop().expect("record 13"));
    assert!((15_001..alnsort_bgzf::MAX_PAYLOAD).contains(&recs[15_000].len()));
    let f = aligned_bam_file(&recs);
    let err = drain(scanner(
        f.path(),
        ScanOptions {
            record_limit: 15_000,
            ..small_batches()
        },
    ))
    .expect_err("record 15001 is over the limit");
    assert!(
        matches!(
            err,
            ReadError::Record {
                record: 15_001,
                problem: Problem::BlockTooLarge { limit: 15_000, .. },
                ..
            }
        ),
        "{err:?}"
    );
}
