//! Writer tests: htslib's BAM blocking, parts without header or EOF block
//! that concatenate into the whole file, SAM text, and refusals.

use super::*;
use crate::header::parse_sam_header;
use crate::sam_parse::parse_sam_record;
use crate::test_util::pool;
use alnsort_bgzf::{decompress_all, EOF_BLOCK, MAX_PAYLOAD};

fn header() -> Arc<Header> {
    let text = b"@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:100000\n";
    Arc::new(parse_sam_header(text.split_inclusive(|&b| b == b'\n')).expect("header"))
}

/// Records of varied length (sequences of 1..=400 bases), in position order.
fn records(header: &Header, n: usize) -> Vec<Vec<u8>> {
    let refs = header.ref_lookup();
    (0..n)
        .map(|i| {
            let len = 1 + (i * 37) % 400;
            let seq: String = (0..len).map(|j| b"ACGT"[(i + j) % 4] as char).collect();
            let line = format!(
                "r{i}\t0\tchr1\t{}\t60\t{len}M\t*\t0\t0\t{seq}\t*\tNM:i:{}",
                1 + i * 10,
                i % 7
            );
            let mut out = Vec::new();
            parse_sam_record(line.as_bytes(), header, &refs, &mut out).expect("record");
            out
        })
        .collect()
}

fn write(header: &Arc<Header>, recs: &[Vec<u8>], options: WriterOptions) -> Finished<Vec<u8>> {
    let mut w = Writer::new(Vec::new(), Arc::clone(header), options, pool()).expect("writer");
    for r in recs {
        w.write_record(r).expect("record");
    }
    w.finish().expect("finish")
}

/// Payload length of each BGZF block of `file`.
fn block_payloads(file: &[u8]) -> Vec<usize> {
    let mut d = libdeflater::Decompressor::new();
    let mut pos = 0;
    let mut sizes = Vec::new();
    while pos < file.len() {
        let h = alnsort_bgzf::block::parse_header(&file[pos..], pos as u64).expect("header");
        let mut out = Vec::new();
        alnsort_bgzf::block::inflate_block(&file[pos..], pos as u64, &mut out, &mut d)
            .expect("block");
        sizes.push(out.len());
        pos += h.bsize;
    }
    sizes
}

#[test]
fn bam_blocks_follow_htslib() {
    let h = header();
    let recs = records(&h, 2000);
    let out = write(
        &h,
        &recs,
        WriterOptions::whole(Format::Bam, CompressionLevel::FASTEST),
    );
    let mut want = h.to_bam_bytes();
    let header_blocks = want.len().div_ceil(MAX_PAYLOAD);
    // The blocks htslib's bam_write1 makes: a record that does not fit in
    // what is left of a block starts the next one.
    let mut sizes = vec![0usize];
    for r in &recs {
        let cur = sizes.last_mut().expect("a block");
        if *cur > 0 && *cur + r.len() > MAX_PAYLOAD {
            sizes.push(r.len());
        } else {
            *cur += r.len();
        }
        want.extend_from_slice(r);
    }
    let got = block_payloads(&out.inner);
    assert_eq!(&got[header_blocks..got.len() - 1], &sizes[..]);
    assert_eq!(*got.last().expect("eof"), 0);
    assert!(out.inner.ends_with(&EOF_BLOCK));
    assert_eq!(decompress_all(&out.inner).expect("valid"), want);
    assert_eq!(out.records, 2000);
    assert_eq!(out.bytes_uncompressed, want.len() as u64);
    assert_eq!(out.bytes_written, out.inner.len() as u64);
}

#[test]
fn parts_without_header_or_eof_concatenate_into_the_whole_file() {
    let h = header();
    let recs = records(&h, 1500);
    let level = CompressionLevel::default();
    let whole = write(&h, &recs, WriterOptions::whole(Format::Bam, level));
    let first = write(
        &h,
        &[],
        WriterOptions {
            eof: false,
            ..WriterOptions::whole(Format::Bam, level)
        },
    );
    let middle = write(
        &h,
        &recs,
        WriterOptions {
            header: false,
            eof: false,
            ..WriterOptions::whole(Format::Bam, level)
        },
    );
    let last = write(
        &h,
        &[],
        WriterOptions {
            header: false,
            ..WriterOptions::whole(Format::Bam, level)
        },
    );
    assert!(!first.inner.ends_with(&EOF_BLOCK));
    assert_eq!(last.inner, EOF_BLOCK);
    let joined = [first.inner, middle.inner, last.inner].concat();
    assert_eq!(joined, whole.inner);
}

#[test]
fn index_offsets_point_at_the_records() {
    let h = header();
    let recs = records(&h, 3000);
    let options = WriterOptions {
        index: Some(IndexFormat::Bai),
        ..WriterOptions::whole(Format::Bam, CompressionLevel::FASTEST)
    };
    let out = write(&h, &recs, options);
    let index = out.index.expect("index");
    assert!(index.content().starts_with(b"BAI\x01"));
    // The metadata pseudo-bin holds the first record's virtual offset:
    // the compressed offset of the first block after the header's, 0.
    let header_blocks = h.to_bam_bytes().len().div_ceil(MAX_PAYLOAD);
    let mut pos = 0usize;
    for _ in 0..header_blocks {
        let block = alnsort_bgzf::block::parse_header(&out.inner[pos..], 0).expect("header");
        pos += block.bsize;
    }
    let first = (pos as u64) << 16;
    let found = index
        .content()
        .windows(8)
        .any(|w| u64::from_le_bytes(w.try_into().expect("8")) == first);
    assert!(
        found,
        "first record's virtual offset {first:#x} not in the index"
    );
}

#[test]
fn sam_text_plain_and_bgzf_hold_the_same_lines() {
    let h = header();
    let recs = records(&h, 500);
    let plain = write(
        &h,
        &recs,
        WriterOptions::whole(Format::Sam, CompressionLevel::default()),
    );
    let mut want = h.to_sam_text();
    for r in &recs {
        format_sam_record(RecordRef::with_block_size(r), &h, &mut want);
    }
    assert_eq!(plain.inner, want);
    assert_eq!(plain.bytes_written, want.len() as u64);
    let gz = write(
        &h,
        &recs,
        WriterOptions::whole(Format::SamBgzf, CompressionLevel::default()),
    );
    assert_eq!(decompress_all(&gz.inner).expect("valid"), want);
    let headerless = write(
        &h,
        &recs,
        WriterOptions {
            header: false,
            ..WriterOptions::whole(Format::Sam, CompressionLevel::default())
        },
    );
    assert_eq!(headerless.inner, want[h.to_sam_text().len()..]);
}

#[test]
fn an_index_of_sam_text_is_refused() {
    let options = WriterOptions {
        index: Some(IndexFormat::DEFAULT_CSI),
        ..WriterOptions::whole(Format::Sam, CompressionLevel::default())
    };
    let err = Writer::new(Vec::new(), header(), options, pool()).err();
    assert!(matches!(err, Some(WriteError::Unsupported(_))));
}

/// A sink that refuses every write, as a full disk or a closed pipe does.
struct Refuse(io::ErrorKind);

impl Write for Refuse {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::from(self.0))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_write_keeps_its_io_kind() {
    let h = header();
    let recs = records(&h, 100);
    for format in [Format::Bam, Format::Sam] {
        let options = WriterOptions::whole(format, CompressionLevel::default());
        let w = Writer::new(
            Refuse(io::ErrorKind::BrokenPipe),
            Arc::clone(&h),
            options,
            pool(),
        );
        let result = w.and_then(|mut w| {
            for r in &recs {
                w.write_record(r)?;
            }
            w.finish()
        });
        let err = result.err().expect("the write fails");
        assert_eq!(
            err.io_kind(),
            Some(io::ErrorKind::BrokenPipe),
            "{format:?}: {err}"
        );
    }
}

struct Recs(Vec<Vec<u8>>);

impl Units for Recs {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn unit(&self, i: usize) -> &[u8] {
        &self.0[i]
    }
}

/// `write_records` (the compression jobs copy the records) writes the same
/// file and index as `write_record` one record at a time, for BAM with each
/// index format and for the SAM forms, mixed with single records.
#[test]
fn write_records_is_write_record_one_by_one() {
    let h = header();
    let mut recs = records(&h, 3000);
    // Records longer than a block span blocks.
    for r in recs.iter_mut().skip(500).step_by(700) {
        let mut long = r.clone();
        let extra = 70_000;
        long.extend(std::iter::repeat_n(b'X', extra));
        let block_size = u32::from_le_bytes(long[..4].try_into().expect("4")) + extra as u32;
        long[..4].copy_from_slice(&block_size.to_le_bytes());
        // Make it a valid record: a tag of `extra - 4` bytes of text.
        let tag_start = r.len();
        long[tag_start..tag_start + 3].copy_from_slice(b"XZZ");
        long[tag_start + 2] = b'Z';
        *long.last_mut().expect("last") = 0;
        *r = long;
    }
    for (format, index) in [
        (Format::Bam, None),
        (Format::Bam, Some(IndexFormat::Bai)),
        (Format::Bam, Some(IndexFormat::DEFAULT_CSI)),
        (Format::SamBgzf, None),
        (Format::Sam, None),
    ] {
        let options = WriterOptions {
            index,
            ..WriterOptions::whole(format, CompressionLevel::FASTEST)
        };
        let want = write(&h, &recs, options);
        let mut w = Writer::new(Vec::new(), Arc::clone(&h), options, pool()).expect("writer");
        w.write_record(&recs[0]).expect("record");
        for part in [&recs[1..900], &recs[900..2999]] {
            w.write_records(Arc::new(Recs(part.to_vec())))
                .expect("records");
        }
        w.write_record(&recs[2999]).expect("record");
        assert_eq!(w.records(), recs.len() as u64);
        let got = w.finish().expect("finish");
        assert!(got.inner == want.inner, "{format:?} {index:?}: bytes");
        assert_eq!(
            got.index.map(|i| i.file_bytes()),
            want.index.map(|i| i.file_bytes()),
            "{format:?} {index:?}: index"
        );
        assert_eq!(got.bytes_uncompressed, want.bytes_uncompressed);
    }
}

/// Records out of order for the index (noted by the deflate jobs, taken on
/// the block-writing thread) fail the write with the index's error, naming
/// the record, whether written one by one or in batches: at the latest
/// from `finish`, never an index left out silently.
#[test]
fn an_unsorted_record_fails_the_index_with_its_number() {
    let h = header();
    let mut recs = records(&h, 2000);
    recs.swap(1200, 1300);
    let options = WriterOptions {
        index: Some(IndexFormat::DEFAULT_CSI),
        ..WriterOptions::whole(Format::Bam, CompressionLevel::FASTEST)
    };
    for batched in [false, true] {
        let mut w = Writer::new(Vec::new(), Arc::clone(&h), options, pool()).expect("writer");
        let mut failed = None;
        if batched {
            for part in recs.chunks(100) {
                if let Err(e) = w.write_records(Arc::new(Recs(part.to_vec()))) {
                    failed = Some(e);
                    break;
                }
            }
        } else {
            for r in &recs {
                w.write_record(r).expect("written; the index is fed later");
            }
        }
        let err = match failed {
            Some(e) => e,
            None => w.finish().expect_err("the index refuses the order"),
        };
        match err {
            WriteError::Index {
                source: IndexError::Unsorted { record, .. },
            } => assert_eq!(record, 1201, "batched {batched}"),
            other => panic!("batched {batched}: {other}"),
        }
    }
}

/// The part index of a headerless, EOF-less BAM part as a reader of it
/// sees the records: each record's index fields with the virtual offset
/// where it starts (offset 0 of a block for a record that opens one) and
/// ends (where the next starts; the last one at the part's end).
fn part_index_by_reading(part: &[u8]) -> Vec<u8> {
    let mut d = libdeflater::Decompressor::new();
    let mut payload = Vec::new();
    // (position in the payload, compressed offset of the block) per block.
    let mut blocks = Vec::new();
    let mut pos = 0;
    while pos < part.len() {
        let h = alnsort_bgzf::block::parse_header(&part[pos..], pos as u64).expect("header");
        let mut out = Vec::new();
        alnsort_bgzf::block::inflate_block(&part[pos..], pos as u64, &mut out, &mut d)
            .expect("block");
        blocks.push((payload.len(), pos as u64));
        payload.extend_from_slice(&out);
        pos += h.bsize;
    }
    let voffset = |at: usize| -> u64 {
        // The last block that starts at or before `at` and is not empty
        // where `at` is its end: a reader is then in the next block.
        let i = blocks.partition_point(|&(start, _)| start <= at) - 1;
        (blocks[i].1 << 16) | (at - blocks[i].0) as u64
    };
    let mut starts = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        starts.push(at);
        at += 4 + u32::from_le_bytes(payload[at..at + 4].try_into().expect("4")) as usize;
    }
    let mut idx = PartIndexWriter::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts
            .get(i + 1)
            .map_or((part.len() as u64) << 16, |&n| voffset(n));
        let f = index_fields(&payload[start..]);
        let rec = IndexRecord {
            ref_id: f.ref_id,
            beg: i64::from(f.beg),
            end: f.end,
            mapped: f.mapped,
            vstart: voffset(start),
            vend: end,
        };
        idx.push(&rec).expect("part index record");
    }
    idx.finish(part.len() as u64)
}

/// A writer that keeps the records' index fields gives the part index a
/// reader of the part would build, record by record or in batches, with
/// records that span blocks, blocks filled to the brim and unplaced
/// records at the end; text output and a late request are refused.
#[test]
fn the_part_index_is_the_one_read_back_from_the_part() {
    let h = header();
    let mut recs = records(&h, 3000);
    for r in recs.iter_mut().skip(300).step_by(500) {
        let extra = 70_000 + r.len() % 7;
        let tag_start = r.len();
        r.extend(std::iter::repeat_n(b'X', extra));
        let block_size = u32::from_le_bytes(r[..4].try_into().expect("4")) + extra as u32;
        r[..4].copy_from_slice(&block_size.to_le_bytes());
        r[tag_start..tag_start + 3].copy_from_slice(b"XZZ");
        *r.last_mut().expect("last") = 0;
    }
    let refs = h.ref_lookup();
    for i in 0..40 {
        let line = format!("u{i}\t4\t*\t0\t0\t*\t*\t0\t0\tACGT\t*");
        let mut out = Vec::new();
        parse_sam_record(line.as_bytes(), &h, &refs, &mut out).expect("record");
        recs.push(out);
    }
    let options = WriterOptions {
        header: false,
        eof: false,
        ..WriterOptions::whole(Format::Bam, CompressionLevel::FASTEST)
    };
    for batched in [false, true] {
        let mut w = Writer::new(Vec::new(), Arc::clone(&h), options, pool()).expect("writer");
        w.collect_part_index().expect("a BAM part can be indexed");
        if batched {
            w.write_record(&recs[0]).expect("record");
            for part in [&recs[1..1200], &recs[1200..]] {
                w.write_records(Arc::new(Recs(part.to_vec())))
                    .expect("records");
            }
        } else {
            for r in &recs {
                w.write_record(r).expect("record");
            }
        }
        let got = w.finish().expect("finish");
        assert!(got.index.is_none());
        let sizes = block_payloads(&got.inner);
        assert!(sizes.contains(&MAX_PAYLOAD), "a block filled to the brim");
        let want = part_index_by_reading(&got.inner);
        assert!(
            got.part_index.as_deref() == Some(&want[..]),
            "batched {batched}: part index differs from the one read back"
        );
    }
    // An empty part has an empty part index.
    let mut w = Writer::new(Vec::new(), Arc::clone(&h), options, pool()).expect("writer");
    w.collect_part_index().expect("index");
    let got = w.finish().expect("finish");
    assert_eq!(got.part_index, Some(PartIndexWriter::new().finish(0)));
    // SAM text cannot be indexed; nor can records already written.
    for format in [Format::Sam, Format::SamBgzf] {
        let mut w = Writer::new(
            Vec::new(),
            Arc::clone(&h),
            WriterOptions::whole(format, CompressionLevel::FASTEST),
            pool(),
        )
        .expect("writer");
        assert!(matches!(
            w.collect_part_index(),
            Err(WriteError::Unsupported(_))
        ));
    }
    let mut w = Writer::new(Vec::new(), Arc::clone(&h), options, pool()).expect("writer");
    w.write_record(&recs[0]).expect("record");
    assert!(matches!(
        w.collect_part_index(),
        Err(WriteError::Unsupported(_))
    ));
}

/// Units that set 0x400 on each record as they copy it (as duplicate
/// marking's units do).
struct MarkDup(Vec<Vec<u8>>);

impl Units for MarkDup {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn unit(&self, i: usize) -> &[u8] {
        &self.0[i]
    }
    fn append_unit(&self, i: usize, out: &mut Vec<u8>) {
        let at = out.len() + crate::record::FRAMED_FLAG_AT;
        out.extend_from_slice(&self.0[i]);
        out[at + 1] |= (flags::DUPLICATE >> 8) as u8;
    }
    fn append_part(&self, i: usize, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        let mut whole = Vec::new();
        self.append_unit(i, &mut whole);
        out.extend_from_slice(&whole[range]);
    }
}

/// The QC counts are those of the records as written (edits made while
/// copying included, records longer than a block too), however they were
/// handed over, in every form, indexed or not; SAM text as samtools
/// parses it back.
#[test]
fn qc_counts_are_of_the_records_as_written() {
    let h = header();
    let mut recs = records(&h, 1500);
    for (i, r) in recs.iter_mut().enumerate() {
        let flag = [0x1 | 0x2 | 0x40, 0x1 | 0x8 | 0x80, 0x4, 0x100, 0x800, 0x200][i % 6];
        let at = crate::record::FRAMED_FLAG_AT;
        r[at..at + 2].copy_from_slice(&(flag as u16).to_le_bytes());
        if i == 0 {
            // POS 0 on chr1 (first, for the index's order): SAM text
            // reads it back without a reference.
            r[8..12].copy_from_slice(&(-1i32).to_le_bytes());
        }
    }
    for r in recs.iter_mut().skip(300).step_by(500) {
        let extra = 70_000;
        let tag_start = r.len();
        r.extend(std::iter::repeat_n(b'X', extra));
        let block_size = u32::from_le_bytes(r[..4].try_into().expect("4")) + extra as u32;
        r[..4].copy_from_slice(&block_size.to_le_bytes());
        r[tag_start..tag_start + 3].copy_from_slice(b"XZZ");
        *r.last_mut().expect("last") = 0;
    }
    let marked: Vec<Vec<u8>> = recs
        .iter()
        .map(|r| {
            let mut v = Vec::new();
            MarkDup(vec![r.clone()]).append_unit(0, &mut v);
            v
        })
        .collect();
    for (format, index) in [
        (Format::Bam, None),
        (Format::Bam, Some(IndexFormat::DEFAULT_CSI)),
        (Format::SamBgzf, None),
        (Format::Sam, None),
    ] {
        let read_back = match format {
            Format::Bam => ReadBack::Binary,
            _ => ReadBack::SamText,
        };
        let mut want = QcTally::new(h.n_ref());
        for r in &marked {
            want.push(&QcRecord::of(RecordRef::with_block_size(r), read_back));
        }
        let options = WriterOptions {
            index,
            ..WriterOptions::whole(format, CompressionLevel::FASTEST)
        };
        let mut w = Writer::new(Vec::new(), Arc::clone(&h), options, pool()).expect("writer");
        w.count_qc().expect("qc");
        w.write_record(&marked[0]).expect("record");
        w.write_records(Arc::new(MarkDup(recs[1..1400].to_vec())))
            .expect("records");
        for r in &marked[1400..] {
            w.write_record(r).expect("record");
        }
        let got = w.finish().expect("finish").qc.expect("counts");
        assert_eq!(got.flagstat, want.flagstat, "{format:?} {index:?}");
        assert_eq!(got.idxstats, want.idxstats, "{format:?} {index:?}");
        assert_eq!(got.flagstat.duplicates, [1250, 250]);
    }
    // Asked for after the first record: refused.
    let mut w = Writer::new(
        Vec::new(),
        Arc::clone(&h),
        WriterOptions::whole(Format::Bam, CompressionLevel::FASTEST),
        pool(),
    )
    .expect("writer");
    w.write_record(&recs[0]).expect("record");
    assert!(w.count_qc().is_err());
}
