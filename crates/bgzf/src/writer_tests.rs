//! Tests for the parallel writer: round trips through the reader (property
//! based), block offsets, error surfacing, `BlockWriter`, and that htslib
//! and Python's gzip read what we write.

use std::io::{self, Read, Write};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::block::{self, decompress_all, parse_header};
use crate::reader::ParallelReader;
use crate::test_util::*;

/// Writes `data` cut at the given block sizes (cycled) and returns the
/// summary.
fn write_blocks_of(
    data: &[u8],
    sizes: &[usize],
    threads: usize,
    level: u32,
) -> WriterSummary<Vec<u8>> {
    let level = CompressionLevel::new(level).expect("level");
    let mut writer = ParallelWriter::new(Vec::new(), pool(threads), level);
    let mut rest = data;
    for (index, &size) in (0u64..).zip(sizes.iter().cycle()) {
        if rest.is_empty() {
            break;
        }
        let (payload, tail) = rest.split_at(size.min(rest.len()));
        let mut buf = writer.buffer();
        buf.extend_from_slice(payload);
        assert_eq!(writer.write_block(buf).expect("write"), index);
        rest = tail;
    }
    writer.finish().expect("finish")
}

/// The compressed offsets of each block, found by walking the headers.
fn walk_blocks(file: &[u8]) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at < file.len() {
        offsets.push(at as u64);
        at += parse_header(&file[at..], at as u64)
            .expect("valid header")
            .bsize;
    }
    offsets
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_random_blocks(
        data in proptest::collection::vec(any::<u8>(), 0..300_000),
        sizes in proptest::collection::vec(1..=MAX_PAYLOAD, 1..8),
        level in 0u32..=9,
        threads in prop_oneof![Just(1usize), Just(3usize)],
    ) {
        let summary = write_blocks_of(&data, &sizes, threads, level);
        prop_assert_eq!(summary.uncompressed_bytes, data.len() as u64);
        prop_assert_eq!(summary.compressed_bytes, summary.inner.len() as u64);
        prop_assert_eq!(&summary.block_offsets, &walk_blocks(&summary.inner));
        prop_assert!(summary.inner.ends_with(&EOF_BLOCK));
        let mut reader = ParallelReader::new(io::Cursor::new(summary.inner), pool(4 - threads), Vec::new())
            .expect("reader");
        let mut out = Vec::new();
        reader.read_to_end(&mut out).expect("valid BGZF");
        prop_assert_eq!(out, data);
    }
}

#[test]
fn block_offsets_end_with_the_eof_block() {
    let data = bam_like(5 * MAX_PAYLOAD + 3);
    let summary = write_blocks_of(&data, &[MAX_PAYLOAD], 3, 6);
    assert_eq!(summary.block_offsets.len(), 7);
    let eof = *summary.block_offsets.last().expect("EOF entry");
    assert_eq!(eof + EOF_BLOCK.len() as u64, summary.compressed_bytes);
    assert_eq!(&summary.inner[eof as usize..], &EOF_BLOCK);
    assert_eq!(decompress_all(&summary.inner).expect("valid"), data);
}

#[test]
fn bad_payload_sizes_are_rejected_and_poison_the_writer() {
    let mut writer = ParallelWriter::new(Vec::new(), pool(1), CompressionLevel::default());
    assert!(matches!(
        writer.write_block(Vec::new()),
        Err(BgzfError::PayloadSize { len: 0, .. })
    ));
    assert!(matches!(
        writer.write_block(b"x".to_vec()),
        Err(BgzfError::PayloadSize { len: 0, .. })
    ));
    let mut writer = ParallelWriter::new(Vec::new(), pool(1), CompressionLevel::default());
    writer.write_block(b"ok".to_vec()).expect("fine");
    let err = writer
        .write_block(vec![0; MAX_PAYLOAD + 1])
        .expect_err("too large");
    assert!(
        matches!(err, BgzfError::PayloadSize { block_index: 1, .. }),
        "{err:?}"
    );
    assert!(writer.finish().is_err());
}

/// Writes incompressible blocks into a sink that fails after `limit` bytes
/// and returns the first error and what later calls return.
fn write_until_error(limit: usize, threads: usize) -> (BgzfError, BgzfError) {
    let sink = FailAfter {
        limit,
        written: 0,
        kind: io::ErrorKind::StorageFull,
    };
    let mut writer = ParallelWriter::new(sink, pool(threads), CompressionLevel::FASTEST);
    let mut first = None;
    for i in 0..200 {
        if let Err(e) = writer.write_block(noise(MAX_PAYLOAD, i)) {
            first = Some(e);
            break;
        }
    }
    match first {
        Some(e) => {
            let again = writer.write_block(b"more".to_vec()).expect_err("poisoned");
            let finish = writer.finish().expect_err("poisoned");
            assert_eq!(again.to_string(), e.to_string());
            (e, finish)
        }
        None => {
            let e = writer.finish().expect_err("the sink failed");
            (e.clone(), e)
        }
    }
}

#[test]
fn write_errors_surface_with_their_offset() {
    let limit = 3 * 65_000;
    // Where the block that crosses the limit starts.
    let level = CompressionLevel::FASTEST;
    let mut c = level.compressor();
    let (mut start, mut block_buf) = (0u64, Vec::new());
    for i in 0.. {
        block::deflate_block(&noise(MAX_PAYLOAD, i), level, &mut block_buf, &mut c).expect("fits");
        if start + block_buf.len() as u64 > limit as u64 {
            break;
        }
        start += block_buf.len() as u64;
    }
    for threads in [1, 3] {
        let (first, later) = write_until_error(limit, threads);
        match &first {
            BgzfError::Io { offset, source } => {
                assert_eq!(source.kind(), io::ErrorKind::StorageFull);
                assert_eq!(*offset, start, "threads = {threads}");
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
        assert_eq!(later.to_string(), first.to_string());
    }
}

#[test]
fn error_while_writing_the_eof_block_surfaces_from_finish() {
    let sink = FailAfter {
        limit: 10,
        written: 0,
        kind: io::ErrorKind::BrokenPipe,
    };
    let writer = ParallelWriter::new(sink, pool(2), CompressionLevel::default());
    let err = writer.finish().expect_err("sink fails");
    assert!(
        matches!(&err, BgzfError::Io { offset: 0, source } if source.kind() == io::ErrorKind::BrokenPipe)
    );
    assert_eq!(io::Error::from(err).kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn writer_inside_a_one_thread_pool_does_not_deadlock() {
    let pool = pool(1);
    let data = bam_like(40 * MAX_PAYLOAD);
    let file = pool.install(|| {
        let mut writer =
            ParallelWriter::new(Vec::new(), Arc::clone(&pool), CompressionLevel::FASTEST);
        for chunk in data.chunks(MAX_PAYLOAD) {
            writer.write_block(chunk.to_vec()).expect("write");
        }
        writer.finish().expect("finish").inner
    });
    assert_eq!(decompress_all(&file).expect("valid"), data);
}

/// A sink that sends its contents down a channel when dropped.
struct ReportOnDrop {
    data: Vec<u8>,
    tx: crossbeam_channel::Sender<Vec<u8>>,
}

impl Write for ReportOnDrop {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for ReportOnDrop {
    fn drop(&mut self) {
        let _ = self.tx.send(std::mem::take(&mut self.data));
    }
}

#[test]
fn dropping_without_finish_writes_no_eof_block() {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let sink = ReportOnDrop {
        data: Vec::new(),
        tx,
    };
    let mut writer = ParallelWriter::new(sink, pool(2), CompressionLevel::default());
    writer.write_block(b"unfinished".to_vec()).expect("write");
    drop(writer);
    let written = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("writer thread ended");
    assert!(!written.ends_with(&EOF_BLOCK));
}

#[test]
fn block_writer_packs_payloads_and_flush_ends_a_block() {
    let header = bam_like(MAX_PAYLOAD + 100);
    let writer = ParallelWriter::new(Vec::new(), pool(2), CompressionLevel::default());
    let mut bw = BlockWriter::new(writer);
    bw.write_all(&header).expect("write");
    bw.flush().expect("flush");
    bw.write_all(b"tail").expect("write");
    bw.flush().expect("flush");
    assert_eq!(bw.virtual_offset(), 3 << 16);
    bw.write_all(b"next").expect("write");
    let summary = bw.finish(true).expect("finish");
    let offsets = &summary.block_offsets;
    let mut d = libdeflater::Decompressor::new();
    let mut sizes = Vec::new();
    for &offset in &offsets[..offsets.len() - 1] {
        let mut out = Vec::new();
        block::inflate_block(&summary.inner[offset as usize..], offset, &mut out, &mut d)
            .expect("valid");
        sizes.push(out.len());
    }
    assert_eq!(sizes, [MAX_PAYLOAD, 100, 4, 4]);
    let mut expected = header;
    expected.extend_from_slice(b"tailnext");
    assert_eq!(decompress_all(&summary.inner).expect("valid"), expected);
}

/// htslib's blocking of BAM records: a record that does not fit in what is
/// left of a block starts the next one; one longer than a block spans
/// blocks; a block is sent as soon as it is full.
#[test]
fn write_unit_starts_a_new_block_when_the_unit_does_not_fit() {
    let writer = ParallelWriter::new(Vec::new(), pool(2), CompressionLevel::FASTEST);
    let mut bw = BlockWriter::new(writer);
    let a = vec![1u8; MAX_PAYLOAD - 10];
    let b = vec![2u8; 20];
    let c = vec![3u8; MAX_PAYLOAD - 20];
    let long = vec![4u8; MAX_PAYLOAD + 5];
    let mut starts = Vec::new();
    for unit in [&a, &b, &c, &long] {
        starts.push(bw.write_unit(unit).expect("write"));
    }
    // `c` filled block 1 exactly, so it was sent at once.
    assert_eq!(starts, [0, 1 << 16, (1 << 16) | 20, 2 << 16]);
    assert_eq!(bw.virtual_offset(), (3 << 16) | 5);
    let summary = bw.finish(false).expect("finish");
    assert!(!summary.inner.ends_with(&EOF_BLOCK));
    assert_eq!(summary.block_offsets.len(), 5);
    assert_eq!(
        *summary.block_offsets.last().expect("end"),
        summary.compressed_bytes
    );
    let mut sizes = Vec::new();
    let mut d = libdeflater::Decompressor::new();
    for &offset in &summary.block_offsets[..4] {
        let mut out = Vec::new();
        block::inflate_block(&summary.inner[offset as usize..], offset, &mut out, &mut d)
            .expect("valid");
        sizes.push(out.len());
    }
    assert_eq!(sizes, [MAX_PAYLOAD - 10, MAX_PAYLOAD, MAX_PAYLOAD, 5]);
}

struct VecUnits(Vec<Vec<u8>>);

impl Units for VecUnits {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn unit(&self, i: usize) -> &[u8] {
        &self.0[i]
    }
}

/// A note is as small as the memory reserve counts on (alnsort-engine's
/// `reserve_bytes`).
#[test]
fn a_note_is_32_bytes() {
    assert_eq!(std::mem::size_of::<UnitNote>(), 32);
}

/// `write_units` is `write_unit` for each unit in turn: the same blocks
/// (so the same file) and the same start and end offsets, around units
/// that fill a block exactly, overflow it, span blocks, and between plain
/// `write_bytes` and `end_block` calls; the payloads are copied by the
/// deflate jobs, which a broken `Units` (a panic) turns into an error.
#[test]
fn write_units_packs_exactly_as_write_unit_one_by_one() {
    let mut lens = vec![
        MAX_PAYLOAD - 10,
        20,
        MAX_PAYLOAD - 20,
        MAX_PAYLOAD + 5,
        3 * MAX_PAYLOAD + 1,
        7,
        MAX_PAYLOAD,
        1,
        // Units of no bytes: inside a block, and after one that fills
        // its block exactly (they start the next block).
        0,
        MAX_PAYLOAD - 32,
        30,
        0,
        5,
    ];
    lens.extend((0..3000).map(|i| 40 + (i * 7919) % 900));
    let units: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| (0..len).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    // A note that tells units apart: their first byte and length.
    fn note(unit: &[u8]) -> UnitFields {
        UnitFields {
            ref_id: i32::from(unit[0]),
            beg: unit.len() as i32,
            end: i64::from(unit[unit.len() - 1]),
            mapped: unit.len().is_multiple_of(2),
            word: unit.len() as u32 * 7,
        }
    }
    for threads in [1, 3] {
        // `batched`: by `write_units` (the blocks then come from
        // `Units::fitting` and the notes from the deflate jobs), or by
        // `write_unit`, one by one (recording each unit's offsets); noted
        // or not.
        let run = |batched: bool, noted: bool| {
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let sink = Arc::clone(&seen);
            let mut bw = BlockWriter::new(ParallelWriter::with_notes(
                Vec::new(),
                pool(threads),
                CompressionLevel::FASTEST,
                Box::new(move |block, notes: &[UnitNote]| {
                    let mut seen = sink.lock().expect("notes");
                    seen.extend(notes.iter().map(|n| (n.offsets(block), n.fields())));
                }),
            ));
            if noted {
                bw.noting(note);
            }
            let mut at = Vec::new();
            bw.write_bytes(b"header").expect("bytes");
            bw.end_block().expect("end");
            for (k, part) in [&units[..5], &units[5..1000], &units[1000..]]
                .iter()
                .enumerate()
            {
                if batched {
                    let shared: Arc<dyn Units> = Arc::new(VecUnits(part.to_vec()));
                    bw.write_units(shared).expect("units");
                } else {
                    for u in part.iter() {
                        let start = bw.write_unit(u).expect("unit");
                        if !u.is_empty() {
                            at.push(((start, bw.virtual_offset()), note(u)));
                        }
                    }
                }
                if k == 1 {
                    bw.write_bytes(&[9u8; 300]).expect("bytes between");
                }
            }
            let done = bw.finish(true).expect("finish");
            let seen = seen.lock().expect("notes").clone();
            (done, at, seen)
        };
        let (want, want_at, want_notes) = run(false, true);
        assert_eq!(want_notes, want_at, "write_unit's notes, {threads} threads");
        assert_eq!(
            want_at.len(),
            units.iter().filter(|u| !u.is_empty()).count()
        );
        for noted in [true, false] {
            let (got, _, got_notes) = run(true, noted);
            if noted {
                assert_eq!(got_notes, want_at, "notes, {threads} threads");
            } else {
                assert!(got_notes.is_empty());
            }
            assert_eq!(got.block_offsets, want.block_offsets);
            assert!(
                got.inner == want.inner,
                "bytes, {threads} threads, noted {noted}"
            );
        }
    }

    struct Broken;
    impl Units for Broken {
        fn count(&self) -> usize {
            2
        }
        fn unit(&self, i: usize) -> &[u8] {
            // Lengths are read on the caller's thread; on the pool it is
            // the deflate job's copy.
            if rayon::current_thread_index().is_some() {
                panic!("unit {i} is gone");
            }
            b"abc"
        }
    }
    let mut bw = BlockWriter::new(ParallelWriter::new(
        Vec::new(),
        pool(2),
        CompressionLevel::FASTEST,
    ));
    bw.write_units(Arc::new(Broken))
        .expect("blocking needs only lengths");
    let err = bw.finish(true).expect_err("the lost block is an error");
    assert!(matches!(err, BgzfError::WriterLost { .. }), "{err:?}");
}

/// A `Units` that edits its units as they are copied (byte 5 of each
/// becomes 0xEE; the lengths stay `unit`'s): the file holds the edited
/// bytes, for units packed whole and for units longer than a block, which
/// go out in parts cut at every block boundary.
#[test]
fn write_units_writes_what_append_unit_and_append_part_give() {
    struct Edited(Vec<Vec<u8>>);
    impl Edited {
        fn edit(&self, i: usize, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
            let at = out.len();
            out.extend_from_slice(&self.0[i][range.clone()]);
            if range.contains(&5) {
                out[at + 5 - range.start] = 0xEE;
            }
        }
    }
    impl Units for Edited {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn unit(&self, i: usize) -> &[u8] {
            &self.0[i]
        }
        fn append_unit(&self, i: usize, out: &mut Vec<u8>) {
            self.edit(i, 0..self.0[i].len(), out);
        }
        fn append_part(&self, i: usize, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
            self.edit(i, range, out);
        }
    }
    // Long units start 1 to 9 bytes before a block's end, so the edited
    // byte falls in the first part or in the second.
    let mut lens = Vec::new();
    for k in 1..10 {
        lens.push(MAX_PAYLOAD - k);
        lens.push(MAX_PAYLOAD + 50);
    }
    lens.extend((0..500).map(|i| 10 + (i * 7919) % 900));
    let units: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| (0..len).map(|j| (i * 31 + j) as u8 | 1).collect())
        .collect();
    let want: Vec<u8> = units
        .iter()
        .flat_map(|u| {
            let mut u = u.clone();
            u[5] = 0xEE;
            u
        })
        .collect();
    let mut bw = BlockWriter::new(ParallelWriter::new(
        Vec::new(),
        pool(3),
        CompressionLevel::FASTEST,
    ));
    bw.write_units(Arc::new(Edited(units))).expect("units");
    let got = bw.finish(true).expect("finish");
    let data = decompress_all(&got.inner).expect("valid");
    assert_eq!(data.len(), want.len());
    assert!(data == want, "the edited bytes");
}

#[test]
fn htslib_and_python_gzip_read_our_output() {
    let data = bam_like(400_000);
    let summary = write_blocks_of(&data, &[MAX_PAYLOAD, 1000, 7], 3, 6);
    let path = temp_path("ours.bgzf");
    std::fs::write(&path, &summary.inner).expect("write temp file");
    let script = "import gzip, pysam, sys\n\
        a = gzip.decompress(open(sys.argv[1], 'rb').read())\n\
        f = pysam.BGZFile(sys.argv[1], 'rb')\n\
        b = f.read()\n\
        f.close()\n\
        assert a == b, 'gzip and htslib disagree'\n\
        sys.stdout.buffer.write(b)\n";
    let out = python(script, &[path.to_str().expect("utf-8 temp path")]);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, data);
}

/// The deflate jobs announce each unit to `Units::prefetch` before they
/// copy it (a few units ahead), once per unit, and the bytes are the same
/// as without the hint.
#[test]
fn write_units_prefetches_each_unit_before_copying_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Watched {
        units: Vec<Vec<u8>>,
        prefetched: Vec<AtomicUsize>,
        read_unannounced: AtomicUsize,
    }
    impl Units for Watched {
        fn count(&self) -> usize {
            self.units.len()
        }
        fn unit(&self, i: usize) -> &[u8] {
            // On the pool it is the deflate job's copy (lengths are read on
            // the caller's thread).
            if rayon::current_thread_index().is_some()
                && self.prefetched[i].load(Ordering::SeqCst) == 0
            {
                self.read_unannounced.fetch_add(1, Ordering::SeqCst);
            }
            &self.units[i]
        }
        fn prefetch(&self, i: usize) {
            self.prefetched[i].fetch_add(1, Ordering::SeqCst);
        }
    }
    let units: Vec<Vec<u8>> = (0..5000)
        .map(|i| vec![(i % 251) as u8; 30 + (i * 7919) % 700])
        .collect();
    let watched = Arc::new(Watched {
        prefetched: units.iter().map(|_| AtomicUsize::new(0)).collect(),
        units: units.clone(),
        read_unannounced: AtomicUsize::new(0),
    });
    let mut bw = BlockWriter::new(ParallelWriter::new(
        Vec::new(),
        pool(2),
        CompressionLevel::FASTEST,
    ));
    let shared: Arc<dyn Units> = Arc::clone(&watched) as Arc<dyn Units>;
    bw.write_units(shared).expect("units");
    let got = bw.finish(true).expect("finish");
    let mut bw = BlockWriter::new(ParallelWriter::new(
        Vec::new(),
        pool(2),
        CompressionLevel::FASTEST,
    ));
    for u in &units {
        bw.write_unit(u).expect("unit");
    }
    let want = bw.finish(true).expect("finish");
    assert!(got.inner == want.inner, "the hint changed the bytes");
    assert_eq!(watched.read_unannounced.load(Ordering::SeqCst), 0);
    let counts: Vec<usize> = watched
        .prefetched
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    assert!(counts.iter().all(|&c| c == 1), "prefetch counts {counts:?}");
}

/// Jobs of several blocks write the same bytes as deflating every block on
/// one thread, for block counts on and off a multiple of `JOB_BLOCKS` and
/// for any number of pool threads.
#[test]
fn jobs_of_several_blocks_write_what_one_thread_writes_block_by_block() {
    let level = CompressionLevel::new(6).expect("level");
    for blocks in [1, JOB_BLOCKS - 1, JOB_BLOCKS, 3 * JOB_BLOCKS + 2] {
        let data = bam_like(blocks * MAX_PAYLOAD - 100);
        let want = block::compress_all(&data, level);
        for threads in [1, 2, 3] {
            let got = write_blocks_of(&data, &[MAX_PAYLOAD], threads, 6);
            assert_eq!(got.inner, want, "{blocks} blocks, {threads} threads");
            assert_eq!(got.block_offsets, walk_blocks(&want), "{blocks} blocks");
        }
    }
}

/// A writer started again on a killed one's output (its first blocks on
/// disk, cut at any block boundary, with a torn block after them) writes
/// the same file with the same block offsets and notes, deflating only
/// the blocks after the kept ones; kept blocks that are not what it makes
/// again are an error naming the block; the checkpoints say blocks and
/// bytes that really are on disk in order.
#[test]
fn a_resumed_writer_goes_on_from_the_kept_blocks() {
    let units: Vec<Vec<u8>> = (0..4000)
        .map(|i: usize| {
            (0..(40 + (i * 7919) % 900))
                .map(|j| (i * 31 + j) as u8)
                .collect()
        })
        .collect();
    fn note(unit: &[u8]) -> UnitFields {
        UnitFields {
            ref_id: i32::from(unit[0]),
            beg: unit.len() as i32,
            end: 0,
            mapped: true,
            word: 0,
        }
    }
    type Seen = Arc<std::sync::Mutex<Vec<(u64, (u64, u64))>>>;
    type Checks = Arc<std::sync::Mutex<Vec<(u64, u64)>>>;
    let write = |units: &[Vec<u8>], file: std::fs::File, resuming: Resuming| {
        let seen: Seen = Arc::default();
        let sink = Arc::clone(&seen);
        let mut bw = BlockWriter::new(ParallelWriter::resuming(
            file,
            pool(3),
            CompressionLevel::default(),
            Box::new(move |block, notes: &[UnitNote]| {
                let mut seen = sink.lock().expect("notes");
                seen.extend(notes.iter().map(|n| (block, n.offsets(block))));
            }),
            resuming,
        ));
        bw.noting(note);
        let mut feed = || -> Result<()> {
            bw.write_bytes(b"a header")?;
            bw.end_block()?;
            for part in units.chunks(700) {
                bw.write_units(Arc::new(VecUnits(part.to_vec())))?;
            }
            Ok(())
        };
        let fed = feed();
        let done = fed.and_then(|()| bw.finish(true).map(|s| s.block_offsets));
        let seen = seen.lock().expect("notes").clone();
        (done, seen)
    };
    const STEP: u64 = 8_000;
    let dir = tempfile::tempdir().expect("dir");
    let whole = dir.path().join("whole.bgzf");
    let checks: Checks = Arc::default();
    let told = Arc::clone(&checks);
    let (want_offsets, want_notes) = write(
        &units,
        std::fs::File::create(&whole).expect("create"),
        Resuming {
            kept: KeptBlocks::default(),
            checkpoint: Some((
                STEP,
                Box::new(move |blocks, bytes| told.lock().expect("checks").push((blocks, bytes))),
            )),
        },
    );
    let want_offsets = want_offsets.expect("first write");
    let want = std::fs::read(&whole).expect("read");
    let checks = checks.lock().expect("checks").clone();
    assert!(checks.len() >= 3, "{checks:?}");
    for w in checks.windows(2) {
        assert!(w[0].0 < w[1].0 && w[1].1 >= w[0].1 + STEP, "{checks:?}");
    }
    for &(blocks, bytes) in &checks {
        // What a checkpoint names ends at a block's end.
        assert_eq!(want_offsets[blocks as usize], bytes);
    }
    // A writer of `units` resumed on the file at `path`, its blocks up to
    // `end` kept and the rest cut off.
    let resume_on = |path: &std::path::Path, end: u64, units: &[Vec<u8>]| {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open");
        let kept = KeptBlocks::scan(&file, end).expect("scan");
        let blocks = kept.len();
        file.set_len(end).expect("truncate");
        io::Seek::seek(&mut file, io::SeekFrom::Start(end)).expect("seek");
        let resuming = Resuming {
            kept,
            checkpoint: None,
        };
        (blocks, write(units, file, resuming))
    };
    // Cut after several kept blocks (the header's alone, a checkpoint's, a
    // later one), each followed by half of the next block (a torn write).
    let cuts = [1, checks[1].0 as usize, want_offsets.len() - 3];
    for cut in cuts {
        let end = want_offsets[cut];
        let path = dir.path().join(format!("cut-{cut}.bgzf"));
        let torn = (want_offsets[cut + 1] - end) / 2;
        std::fs::write(&path, &want[..(end + torn) as usize]).expect("write cut");
        let (blocks, (offsets, notes)) = resume_on(&path, end, &units);
        assert_eq!(blocks, cut as u64);
        assert_eq!(offsets.expect("resumed write"), want_offsets, "cut {cut}");
        assert_eq!(notes, want_notes, "cut {cut}");
        assert!(std::fs::read(&path).expect("read") == want, "cut {cut}");
    }
    // Other units than the kept blocks were made from: refused by name.
    let mut other = units.clone();
    other[10][3] ^= 1;
    let end = want_offsets[cuts[1]];
    let path = dir.path().join("other.bgzf");
    std::fs::write(&path, &want[..end as usize]).expect("write");
    let (_, (err, _)) = resume_on(&path, end, &other);
    assert!(
        matches!(err, Err(BgzfError::KeptMismatch { block_index: 1, offset }) if offset == want_offsets[1]),
        "{err:?}"
    );
}
