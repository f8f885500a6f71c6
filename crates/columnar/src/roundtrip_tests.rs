//! Records through a dataset and back: every field, every aux type and
//! integer width, B arrays, tag order; empty and unmapped-only inputs.

use crate::read::{is_dataset, Dataset};
use crate::schema;
use crate::write::{Codec, DatasetWriter, WriteOptions};
use alnsort_bam::header::{parse_sam_header, Header};
use alnsort_bam::record::RecordMut;
use alnsort_bam::sam_parse::parse_sam_record;
use std::sync::Arc;

const HEADER: &str = "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:5000000\n@SQ\tSN:HLA-A*01:01\tLN:3000\n@SQ\tSN:chr3\tLN:100000\n@RG\tID:g1\tSM:s\n";

fn header(text: &str) -> Header {
    parse_sam_header(text.lines().map(|l| l.as_bytes())).expect("header parses")
}

fn sam(h: &Header, lines: &[&str]) -> Vec<Vec<u8>> {
    let refs = h.ref_lookup();
    lines
        .iter()
        .map(|l| {
            let mut out = Vec::new();
            parse_sam_record(l.as_bytes(), h, &refs, &mut out).expect("record parses");
            out
        })
        .collect()
}

/// The encoding jobs' pool, of THREADS threads.
fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap(),
    )
}

fn round_trip(h: &Header, recs: &[Vec<u8>], coordinate: bool, opts: WriteOptions) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut w = DatasetWriter::create(&out, h, coordinate, opts, pool(2)).unwrap();
    for r in recs {
        w.write_record(r).unwrap();
    }
    let summary = w.finish().unwrap();
    assert_eq!(summary.records, recs.len() as u64);
    assert!(is_dataset(&out));
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.header(), h);
    let mut reader = ds.reader();
    let mut bytes = Vec::new();
    while reader.next_batch(&mut bytes).unwrap() > 0 {}
    split(&bytes)
}

/// Every file of the dataset the records make (coordinate order), by
/// path within it, with its bytes, encoded on a pool of THREADS.
fn dataset_files(
    h: &Header,
    recs: &[Vec<u8>],
    opts: &WriteOptions,
    threads: usize,
) -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut w = DatasetWriter::create(&out, h, true, opts.clone(), pool(threads)).unwrap();
    for r in recs {
        w.write_record(r).unwrap();
    }
    w.finish().unwrap();
    let mut files = Vec::new();
    let mut todo = vec![out.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(&out).unwrap().display().to_string();
                files.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    files.sort();
    files
}

fn split(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while !bytes.is_empty() {
        let n = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize + 4;
        v.push(bytes[..n].to_vec());
        bytes = &bytes[n..];
    }
    v
}

/// Appends a field of type TY with VALUE's bytes as stored.
fn with_field(mut rec: Vec<u8>, tag: &[u8; 2], ty: u8, value: &[u8]) -> Vec<u8> {
    RecordMut::new(&mut rec).append_field(*tag, ty, value);
    rec
}

#[test]
fn every_field_and_aux_type_comes_back() {
    let h = header(HEADER);
    let mut recs = sam(
        &h,
        &[
            "r1\t99\tchr1\t100\t60\t10M2I3D5S\t=\t300\t250\tACGTNACGTACGTACGT\tIIIIIIIIIIIIIIIII\tRG:Z:g1\tNM:i:3\tMD:Z:10^ACG0\tAS:i:-5\tXS:i:0\tMC:Z:17M\tMQ:i:60\tms:i:2000\tXA:Z:chr3,+5,17M,1\tBQ:A:x\tXF:f:1.5\tXH:H:1AE3",
            "r2\t147\tchr1\t300\t60\t17M\t=\t100\t-250\tACGTMRWSYKVHDBN=A\t*\tRG:Z:g1\tZa:B:c,-1,2,-3\tZb:B:C,0,255\tZc:B:s,-300,300\tZd:B:S,65535\tZe:B:i,-70000,5\tZf:B:I,4000000000\tZg:B:f,1.5,-2.25\tZh:B:i",
            "r3\t0\tHLA-A*01:01\t5\t0\t4M1000N4M\t*\t0\t0\tACGTACGT\tABCDEFGH\tNM:i:99999\tDT:Z:SQ\tBX:Z:AAA-1\tRX:Z:ACG\tCB:Z:c\tUB:Z:u",
            "r4\t4\tchr3\t50\t0\t*\tchr3\t50\t0\tACG\t!!!",
            "r5\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*",
        ],
    );
    // Integer widths SAM text would not choose, a standard tag twice, one
    // with a type its column does not hold, and an I beyond i32.
    recs[3] = with_field(recs[3].clone(), b"NM", b'i', &7i32.to_le_bytes());
    recs[3] = with_field(recs[3].clone(), b"AS", b'S', &9u16.to_le_bytes());
    recs[3] = with_field(recs[3].clone(), b"AS", b'c', &[0xfe]);
    recs[3] = with_field(
        recs[3].clone(),
        b"MQ",
        b'I',
        &3_000_000_000u32.to_le_bytes(),
    );
    recs[3] = with_field(recs[3].clone(), b"RG", b'i', &1i32.to_le_bytes());
    recs[3] = with_field(recs[3].clone(), b"XS", b's', &(-2i16).to_le_bytes());
    recs[3] = with_field(recs[3].clone(), b"Zd", b'd', &2.5f64.to_le_bytes());
    let back = round_trip(&h, &recs, true, WriteOptions::default());
    assert_eq!(back.len(), recs.len());
    for (a, b) in recs.iter().zip(&back) {
        assert_eq!(a, b);
    }
}

#[test]
fn many_records_cut_into_groups_and_files_come_back_in_order() {
    let h = header(HEADER);
    let mut lines = Vec::new();
    for (r, name) in [(0, "chr1"), (1, "HLA-A*01:01"), (2, "chr3")] {
        for i in 0..3000u32 {
            let pos = 1 + i * (997 + r * 13) % 2900;
            lines.push(format!(
                "q{r}_{i}\t{}\t{name}\t{}\t{}\t8M\t*\t0\t0\tACGTACGT\tIIIIIIII\tNM:i:{}\tZZ:i:{}",
                if i % 3 == 0 { 16 } else { 0 },
                pos,
                i % 61,
                i % 5,
                i
            ));
        }
    }
    let refs: Vec<&str> = lines.iter().map(|s| s.as_str()).collect();
    let mut recs = sam(&h, &refs);
    recs.sort_by_key(|r| {
        let v = alnsort_bam::RecordRef::with_block_size(r);
        (v.ref_id(), v.pos())
    });
    let opts = WriteOptions {
        max_group_rows: 700,
        min_group_rows: 100,
        window: 500,
        codec: Codec::Snappy,
        command: "test".into(),
        range: None,
    };
    assert_eq!(round_trip(&h, &recs, true, opts.clone()), recs);
    // The files' bytes do not depend on how many threads encode them.
    let one = dataset_files(&h, &recs, &opts, 1);
    assert!(
        one.len() >= 3,
        "a file per reference at least: {}",
        one.len()
    );
    assert_eq!(dataset_files(&h, &recs, &opts, 3), one);
    // Not coordinate order: one folder, the records' order kept.
    recs.reverse();
    assert_eq!(round_trip(&h, &recs, false, opts), recs);
}

#[test]
fn ranges_written_apart_assemble_into_one_dataset_in_range_order() {
    let h = header(HEADER);
    let mut lines = Vec::new();
    for (r, name) in [(0, "chr1"), (2, "chr3")] {
        for i in 0..900u32 {
            lines.push(format!(
                "q{r}_{i}\t0\t{name}\t{}\t30\t8M\t*\t0\t0\tACGTACGT\tIIIIIIII",
                1 + i * 3
            ));
        }
    }
    lines.push("u1\t4\t*\t0\t0\t*\t*\t0\t0\tACGT\tIIII".to_string());
    let refs: Vec<&str> = lines.iter().map(|s| s.as_str()).collect();
    let recs = sam(&h, &refs);
    let opts = WriteOptions {
        max_group_rows: 200,
        min_group_rows: 50,
        window: 500,
        ..WriteOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    // Ranges cut inside chr1, at chr1/chr3, and an empty range at the end.
    let cuts = [0, 400, 900, recs.len(), recs.len()];
    let mut parts = Vec::new();
    for (range, w) in cuts.windows(2).enumerate() {
        let part = dir.path().join(format!("part-{range}"));
        let mut wr = DatasetWriter::create(
            &part,
            &h,
            true,
            WriteOptions {
                range: Some(range),
                ..opts.clone()
            },
            pool(2),
        )
        .unwrap();
        for r in &recs[w[0]..w[1]] {
            wr.write_record(r).unwrap();
        }
        wr.finish().unwrap();
        parts.push(part);
    }
    let out = dir.path().join("ds");
    let summary = crate::assemble(&parts, &out).unwrap();
    assert_eq!(summary.records, recs.len() as u64);
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.records(), recs.len() as u64);
    assert_eq!(ds.files().len(), summary.files);
    let mut reader = ds.reader();
    let mut bytes = Vec::new();
    while reader.next_batch(&mut bytes).unwrap() > 0 {}
    assert_eq!(split(&bytes), recs);
    // chr1's folder holds the files of two ranges.
    let chr1: Vec<_> = std::fs::read_dir(out.join("ref=chr1")).unwrap().collect();
    assert!(chr1.len() >= 2, "{chr1:?}");
    // A file of a range taken away is named as missing.
    let victim = ds.files()[1].clone();
    std::fs::remove_file(&victim).unwrap();
    let err = Dataset::open(&out)
        .err()
        .expect("a file missing")
        .to_string();
    assert!(err.contains("Parquet files where"), "{err}");
    // Nothing is left beside the dataset.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn empty_and_unmapped_only_inputs() {
    let h = header(HEADER);
    assert!(round_trip(&h, &[], true, WriteOptions::default()).is_empty());
    let recs = sam(
        &h,
        &[
            "u1\t77\t*\t0\t0\t*\t*\t0\t0\tACGT\tIIII\tRG:Z:g1",
            "u1\t141\t*\t0\t0\t*\t*\t0\t0\tTTTT\t*",
        ],
    );
    assert_eq!(round_trip(&h, &recs, true, WriteOptions::default()), recs);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut w = DatasetWriter::create(&out, &h, true, WriteOptions::default(), pool(1)).unwrap();
    for r in &recs {
        w.write_record(r).unwrap();
    }
    w.finish().unwrap();
    assert!(out
        .join("ref=__HIVE_DEFAULT_PARTITION__/part-00000.parquet")
        .is_file());
}

#[test]
fn out_of_order_input_is_refused_and_nothing_is_left() {
    let h = header(HEADER);
    let recs = sam(
        &h,
        &[
            "a\t0\tchr3\t5\t0\t4M\t*\t0\t0\tACGT\t*",
            "b\t0\tchr1\t5\t0\t4M\t*\t0\t0\tACGT\t*",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut w = DatasetWriter::create(&out, &h, true, WriteOptions::default(), pool(1)).unwrap();
    w.write_record(&recs[0]).unwrap();
    let err = w.write_record(&recs[1]).unwrap_err();
    assert!(
        err.to_string()
            .contains("reference id 0 comes after reference id 2"),
        "{err}"
    );
    drop(w);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_folder_that_is_not_a_dataset_is_refused_by_what_it_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let err = Dataset::open(dir.path()).err().unwrap();
    assert!(
        err.to_string().contains("no _alnsort_dataset file"),
        "{err}"
    );
    // A Parquet file of other columns under a marker.
    std::fs::write(
        dir.path().join(schema::MARKER_FILE),
        "schema_version 1\nfiles 1\nrecords 0\n",
    )
    .unwrap();
    let other = std::sync::Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("qname", arrow_schema::DataType::Utf8, false),
        arrow_schema::Field::new("pos", arrow_schema::DataType::Int64, false),
    ]));
    let f = std::fs::File::create(dir.path().join("x.parquet")).unwrap();
    let w = parquet::arrow::ArrowWriter::try_new(f, other, None).unwrap();
    w.close().unwrap();
    let err = Dataset::open(dir.path()).err().unwrap().to_string();
    for want in [
        "metadata key \"alnsort.header\"",
        "column \"flag\"",
        "column \"pos\" of type Int32 (found Int64)",
        "column \"tags\"",
    ] {
        assert!(err.contains(want), "{want} not in {err}");
    }
    // A destination that holds something else is not replaced.
    let occupied = tempfile::tempdir().unwrap();
    std::fs::write(occupied.path().join("keep"), "x").unwrap();
    let h = header(HEADER);
    let err = DatasetWriter::create(occupied.path(), &h, true, WriteOptions::default(), pool(1))
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("is not a dataset alnsort wrote"),
        "{err}"
    );
    assert!(occupied.path().join("keep").is_file());
}
