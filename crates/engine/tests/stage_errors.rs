//! Errors of the distributed stages keep the library's typed error in
//! their source chain (not only its text), under the file and record.

use std::sync::Arc;

use alnsort_bam::header::parse_sam_header;
use alnsort_bam::validate::RecordError;
use alnsort_bam::writer::{Format, Writer, WriterOptions};
use alnsort_bgzf::CompressionLevel;
use alnsort_engine::error::error_text;
use alnsort_engine::options::markdup::MdOpt;
use alnsort_engine::options::sort::{OptId, SortOptions};
use alnsort_engine::stages::markdup as stages_markdup;
use alnsort_engine::stages::plan as stages;

/// A BAM record (with its block_size) named `name` on reference `ref_id`
/// at 0-based `pos`, unmapped fields otherwise empty.
fn record(name: &[u8], ref_id: i32, pos: i32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&ref_id.to_le_bytes());
    body.extend_from_slice(&pos.to_le_bytes());
    body.push(name.len() as u8 + 1); // l_read_name
    body.push(0); // mapq
    body.extend_from_slice(&4680u16.to_le_bytes()); // bin of an empty span
    body.extend_from_slice(&0u16.to_le_bytes()); // n_cigar_op
    body.extend_from_slice(&0x4u16.to_le_bytes()); // flag: unmapped
    body.extend_from_slice(&0i32.to_le_bytes()); // l_seq
    body.extend_from_slice(&(-1i32).to_le_bytes()); // next_ref_id
    body.extend_from_slice(&(-1i32).to_le_bytes()); // next_pos
    body.extend_from_slice(&0i32.to_le_bytes()); // tlen
    body.extend_from_slice(name);
    body.push(0);
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend(body);
    out
}

/// markdup-collect meets a record naming reference 5 of a header with one:
/// the error names the file and record, and `validate`'s own
/// `RecordError` is in the chain.
#[test]
fn collect_keeps_the_validation_error_of_a_bad_record() {
    let dir = std::env::temp_dir().join(format!("alnsort-stage-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("bad.bam");
    let header = parse_sam_header([
        b"@HD\tVN:1.6\tSO:queryname".as_slice(),
        b"@SQ\tSN:c\tLN:1000",
    ])
    .expect("header");
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool"),
    );
    let level = CompressionLevel::new(1).expect("level");
    let mut w = Writer::new(
        Vec::new(),
        Arc::new(header),
        WriterOptions::whole(Format::Bam, level),
        pool,
    )
    .expect("writer");
    w.write_record(&record(b"a", 0, 10)).expect("record 1");
    w.write_record(&record(b"b", 5, 10)).expect("record 2");
    std::fs::write(&path, w.finish().expect("finish").inner).expect("write");

    let inputs = vec![path.clone()];
    let splits = stages::split(&inputs, 1, 1).expect("split");
    let mut options = SortOptions::new("alnsort sort".into());
    options
        .apply(OptId::Markdup(MdOpt::Markdup), None)
        .expect("--markdup");
    let got = stages_markdup::collect(&inputs, &splits[0], &options, 1, 1);
    let _ = std::fs::remove_dir_all(&dir);
    let e = got.err().expect("the bad record is refused");
    let text = error_text(&e);
    assert!(
        text.contains(&path.display().to_string()) && text.contains("record 2"),
        "{text}"
    );
    assert!(text.contains("virtual offset"), "{text}");
    assert!(
        matches!(
            e.find::<RecordError>(),
            Some(RecordError::RefIdOutOfRange { .. })
        ),
        "the validator's error is in the chain: {text}"
    );
}
