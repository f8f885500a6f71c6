//! Tests for the parallel reader: ordering, every error with its offset,
//! prefixes, positions, shutdown on drop, and interop with htslib.

use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::block::{compress_all, CompressionLevel, EOF_BLOCK, HEADER_LEN};
use crate::error::IsizeFound;
use crate::test_util::*;

/// Reads everything, returning the data before the first error and the
/// error itself.
fn drain(reader: &mut ParallelReader) -> (Vec<u8>, Option<BgzfError>) {
    let mut data = Vec::new();
    loop {
        match reader.fill_block() {
            Ok([]) => return (data, None),
            Ok(block) => {
                let n = block.len();
                data.extend_from_slice(block);
                reader.consume(n);
            }
            Err(e) => return (data, Some(e)),
        }
    }
}

fn read_file(file: Vec<u8>, threads: usize) -> (Vec<u8>, Option<BgzfError>) {
    let mut reader =
        ParallelReader::new(std::io::Cursor::new(file), pool(threads), Vec::new()).expect("reader");
    drain(&mut reader)
}

#[test]
fn many_blocks_come_out_in_order() {
    let payloads: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| i.to_le_bytes().repeat(1 + i as usize % 5))
        .collect();
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let (file, offsets) = blocks_file(&refs);
    for threads in [1, 3] {
        let (data, err) = read_file(file.clone(), threads);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(data, payloads.concat(), "threads = {threads}");
        // A peeking reader (one block per job) gives the same stream, from
        // a block in the middle too, with the file's offsets.
        let at = offsets[1500];
        let mut reader = ParallelReader::starting_at_with(
            std::io::Cursor::new(file[at as usize..].to_vec()),
            pool(threads),
            Vec::new(),
            at,
            ReadAhead::Peek,
        )
        .expect("reader");
        assert_eq!(reader.fill_block().expect("block"), &payloads[1500][..]);
        assert_eq!(reader.position().block_offset, at);
        let (data, err) = drain(&mut reader);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(data, payloads[1500..].concat(), "peek, threads = {threads}");
    }
}

#[test]
fn an_error_deep_in_the_stream_comes_after_all_earlier_blocks() {
    let payloads: Vec<Vec<u8>> = (0..1000u32).map(|i| noise(1000, u64::from(i))).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let (mut file, offsets) = blocks_file(&refs);
    let bad = offsets[700] as usize;
    file[bad + 30] ^= 0x55; // inside the deflate data of block 700
    let (data, err) = read_file(file, 3);
    assert_eq!(data, payloads[..700].concat());
    let err = err.expect("block 700 is corrupt");
    assert_eq!(err.offset(), offsets[700], "{err}");
}

#[test]
fn empty_blocks_in_the_middle_are_skipped() {
    let (mut file, _) = blocks_file(&[b"abc"]);
    let (second, _) = blocks_file(&[b"def"]);
    file.extend_from_slice(&EOF_BLOCK);
    file.extend_from_slice(&second);
    let (data, err) = read_file(file, 2);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(data, b"abcdef");
}

#[test]
fn corrupt_crc_is_reported_after_the_good_blocks() {
    let (mut file, offsets) = blocks_file(&[b"first", b"second", b"third"]);
    let crc_at = offsets[2] as usize - 8; // footer of block 1
    file[crc_at] ^= 1;
    let (data, err) = read_file(file, 3);
    assert_eq!(data, b"first");
    match err {
        Some(BgzfError::Crc {
            offset,
            expected,
            got,
        }) => {
            assert_eq!(offset, offsets[1]);
            assert_eq!(expected ^ 1, got);
        }
        other => panic!("expected CRC error, got {other:?}"),
    }
}

#[test]
fn corrupt_isize_is_reported_with_its_offset() {
    let (mut file, offsets) = blocks_file(&[b"first", b"second", b"third"]);
    let isize_at = offsets[2] as usize - 4;
    file[isize_at] = 7;
    let (data, err) = read_file(file, 1);
    assert_eq!(data, b"first");
    assert!(
        matches!(err, Some(BgzfError::Isize { offset, expected: 7, got: IsizeFound::Bytes(6) }) if offset == offsets[1]),
        "{err:?}"
    );
}

#[test]
fn truncated_block_is_reported_with_its_offset() {
    let (file, offsets) = blocks_file(&[b"first", b"second"]);
    let cut = offsets[1] as usize + 20;
    let (data, err) = read_file(file[..cut].to_vec(), 2);
    assert_eq!(data, b"first");
    assert!(
        matches!(err, Some(BgzfError::Truncated { offset, available: 20, .. }) if offset == offsets[1]),
        "{err:?}"
    );
    // Cut inside the fixed header too.
    let (_, err) = read_file(file[..offsets[1] as usize + 5].to_vec(), 2);
    assert!(
        matches!(err, Some(BgzfError::Truncated { available: 5, .. })),
        "{err:?}"
    );
}

#[test]
fn bad_magic_is_reported_with_its_offset() {
    let (mut file, offsets) = blocks_file(&[b"first", b"second"]);
    file[offsets[1] as usize] = b'B';
    let (data, err) = read_file(file, 2);
    assert_eq!(data, b"first");
    assert!(
        matches!(err, Some(BgzfError::BadHeader { offset, .. }) if offset == offsets[1]),
        "{err:?}"
    );
}

#[test]
fn missing_eof_block_ends_the_stream_and_is_reported() {
    let (file, _) = blocks_file(&[b"first", b"second"]);
    let cut = file.len() - EOF_BLOCK.len();
    for threads in [1, 3] {
        let mut reader = ParallelReader::new(
            std::io::Cursor::new(file[..cut].to_vec()),
            pool(threads),
            Vec::new(),
        )
        .expect("reader");
        assert_eq!(reader.missing_eof_block(), None, "not known before the end");
        let (data, err) = drain(&mut reader);
        assert_eq!(data, b"firstsecond");
        assert!(err.is_none(), "{err:?}");
        assert_eq!(reader.missing_eof_block(), Some(cut as u64));
        // The end stays the end.
        assert!(matches!(reader.fill_block(), Ok([])));
    }
    // With the EOF block there is nothing to report.
    let mut reader =
        ParallelReader::new(std::io::Cursor::new(file), pool(2), Vec::new()).expect("reader");
    let (data, err) = drain(&mut reader);
    assert_eq!(
        (data.as_slice(), err.is_none()),
        (&b"firstsecond"[..], true)
    );
    assert_eq!(reader.missing_eof_block(), None);
    // No block at all: the EOF block is missing at offset 0.
    let mut reader =
        ParallelReader::new(std::io::Cursor::new(Vec::new()), pool(1), Vec::new()).expect("reader");
    let (data, err) = drain(&mut reader);
    assert!(data.is_empty() && err.is_none(), "{err:?}");
    assert_eq!(reader.missing_eof_block(), Some(0));
}

#[test]
fn a_block_cut_short_is_still_an_error() {
    let (file, offsets) = blocks_file(&[b"first", b"second"]);
    let cut = offsets[1] as usize + 10;
    let (data, err) = read_file(file[..cut].to_vec(), 2);
    assert_eq!(data, b"first");
    assert!(
        matches!(err, Some(BgzfError::Truncated { offset, .. }) if offset == offsets[1]),
        "{err:?}"
    );
}

#[test]
fn errors_repeat_and_convert_to_io_errors() {
    let (file, _) = blocks_file(&[b"only"]);
    let mut reader = ParallelReader::new(
        std::io::Cursor::new(file[..30].to_vec()),
        pool(1),
        Vec::new(),
    )
    .expect("reader");
    let mut out = Vec::new();
    let err = reader.read_to_end(&mut out).expect_err("truncated");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    let inner = err.get_ref().and_then(|e| e.downcast_ref::<BgzfError>());
    assert!(
        matches!(inner, Some(BgzfError::Truncated { offset: 0, .. })),
        "{inner:?}"
    );
    assert!(matches!(
        reader.fill_block(),
        Err(BgzfError::Truncated { offset: 0, .. })
    ));
}

#[test]
fn prefix_then_rest_reads_the_whole_stream() {
    let data = bam_like(200_000);
    let file = compress_all(&data, CompressionLevel::FASTEST);
    for split in [0, 4, 18, 1000, file.len()] {
        let (head, tail) = file.split_at(split);
        let tail = std::io::Cursor::new(tail.to_vec());
        let mut reader = ParallelReader::new(tail, pool(2), head.to_vec()).expect("reader");
        let mut out = Vec::new();
        reader.read_to_end(&mut out).expect("valid file");
        assert_eq!(out, data, "split at {split}");
    }
}

#[test]
fn position_tracks_block_offsets() {
    let (file, offsets) = blocks_file(&[b"abcd", b"efgh"]);
    let mut reader = ParallelReader::new(std::io::Cursor::new(file.clone()), pool(2), Vec::new())
        .expect("reader");
    assert_eq!(
        reader.position(),
        Position {
            block_offset: 0,
            in_block: 0,
            uncompressed_total: 0
        }
    );
    let mut buf = [0u8; 3];
    reader.read_exact(&mut buf).expect("3 bytes");
    assert_eq!(
        reader.position(),
        Position {
            block_offset: 0,
            in_block: 3,
            uncompressed_total: 3
        }
    );
    reader.read_exact(&mut buf[..1]).expect("1 byte");
    // At the end of a block, the position is the start of the next one.
    let at_boundary = Position {
        block_offset: offsets[1],
        in_block: 0,
        uncompressed_total: 4,
    };
    assert_eq!(reader.position(), at_boundary);
    reader.read_exact(&mut buf[..2]).expect("2 bytes");
    assert_eq!(
        reader.position(),
        Position {
            block_offset: offsets[1],
            in_block: 2,
            uncompressed_total: 6
        }
    );
    assert_eq!(reader.position().virtual_offset(), (offsets[1] << 16) | 2);
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).expect("valid");
    assert_eq!(rest, b"gh");
    assert_eq!(reader.position().block_offset, file.len() as u64);
}

#[test]
fn dropping_mid_stream_stops_the_reader_thread() {
    let dropped = Arc::new(AtomicBool::new(false));
    let block = compress_all(&noise(50_000, 5), CompressionLevel::FASTEST);
    let block = block[..block.len() - EOF_BLOCK.len()].to_vec();
    let endless = Endless {
        block,
        at: 0,
        dropped: Arc::clone(&dropped),
    };
    let mut reader = ParallelReader::new(endless, pool(2), Vec::new()).expect("reader");
    let mut buf = vec![0u8; 300_000];
    reader.read_exact(&mut buf).expect("endless data");
    drop(reader);
    let start = Instant::now();
    while !dropped.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "reader thread still holds the input"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn consumer_inside_a_one_thread_pool_does_not_deadlock() {
    let data = bam_like(500_000);
    let file = compress_all(&data, CompressionLevel::FASTEST);
    let pool = pool(1);
    let out = pool.install(|| {
        let mut reader =
            ParallelReader::new(std::io::Cursor::new(file), Arc::clone(&pool), Vec::new())
                .expect("reader");
        let mut out = Vec::new();
        reader.read_to_end(&mut out).map(|_| out)
    });
    assert_eq!(out.expect("valid"), data);
}

#[test]
fn non_default_extra_fields_are_accepted() {
    // A block whose BC subfield follows another subfield (legal per RFC 1952).
    let (file, _) = blocks_file(&[b"xy"]);
    let mut odd = file[..10].to_vec();
    let bsize = u16::from_le_bytes([file[16], file[17]]) + 5;
    odd.extend_from_slice(&[11, 0, b'Z', b'Z', 1, 0, 0]);
    odd.extend_from_slice(&[b'B', b'C', 2, 0]);
    odd.extend_from_slice(&bsize.to_le_bytes());
    odd.extend_from_slice(&file[HEADER_LEN..]);
    let (data, err) = read_file(odd, 1);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(data, b"xy");
}

#[test]
fn reads_a_file_written_by_htslib() {
    let path = temp_path("htslib-written.gz");
    let script = "import pysam, sys\n\
        data = bytes((i * 7 + i // 300) % 251 for i in range(300000))\n\
        f = pysam.BGZFile(sys.argv[1], 'wb')\n\
        f.write(data)\n\
        f.close()\n";
    let out = python(script, &[path.to_str().expect("utf-8 temp path")]);
    assert!(
        out.status.success(),
        "pysam failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::read(&path).expect("pysam output");
    let _ = std::fs::remove_file(&path);
    assert!(crate::block::is_bgzf(&file));
    let expected: Vec<u8> = (0..300_000u32)
        .map(|i| ((i * 7 + i / 300) % 251) as u8)
        .collect();
    let (data, err) = read_file(file, 3);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(data, expected);
}

/// Payloads starting with this make [`inflate_then_panic`] panic.
const PANIC_MARK: &[u8] = b"panic here!";

/// Stands in for the inflate step: inflates the block, then panics if its
/// data starts with [`PANIC_MARK`].
fn inflate_then_panic(
    raw: &[u8],
    offset: u64,
    out: &mut Vec<u8>,
    d: &mut Decompressor,
) -> Result<()> {
    block::inflate_block(raw, offset, out, d)?;
    if out.starts_with(PANIC_MARK) {
        panic!("injected inflate panic at byte offset {offset}");
    }
    Ok(())
}

#[test]
fn a_panicking_inflate_job_is_an_error_naming_the_stage_and_block() {
    // Block 8 starts the third job of `JOB_BLOCKS` blocks: the two jobs
    // before it are delivered, then the lost job is an error at its first
    // block, never an abort, a hang or a skipped block. A peeking reader's
    // jobs are one block each: every block before the lost one comes.
    assert_eq!(JOB_BLOCKS, 4);
    for (panic_block, ahead, threads) in [0usize, 8, 10]
        .into_iter()
        .flat_map(|b| [ReadAhead::Stream, ReadAhead::Peek].map(|a| (b, a)))
        .flat_map(|(b, a)| [1, 3].map(|t| (b, a, t)))
    {
        let mut payloads: Vec<Vec<u8>> = (0..40u32).map(|i| noise(5000, u64::from(i))).collect();
        payloads[panic_block].splice(0..0, PANIC_MARK.iter().copied());
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let (file, offsets) = blocks_file(&refs);
        let job_blocks = match ahead {
            ReadAhead::Stream => JOB_BLOCKS,
            ReadAhead::Peek => 1,
        };
        let job_start = panic_block - panic_block % job_blocks;
        {
            let mut reader = ParallelReader::with_inflate(
                std::io::Cursor::new(file.clone()),
                pool(threads),
                Vec::new(),
                0,
                inflate_then_panic,
                ahead,
            )
            .expect("reader");
            let (data, err) = drain(&mut reader);
            let case = format!("panic in block {panic_block}, {ahead:?}, threads = {threads}");
            assert_eq!(data, payloads[..job_start].concat(), "{case}");
            match &err {
                Some(BgzfError::WorkerLost { what, offset }) => {
                    assert_eq!(*what, "BGZF inflate", "{case}");
                    assert_eq!(*offset, offsets[job_start], "{case}");
                }
                other => panic!("{case}: expected a lost inflate job, got {other:?}"),
            }
            let shown = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(shown.contains("BGZF inflate"), "{case}: {shown}");
            // The error repeats rather than the stream going on.
            assert!(reader.fill_block().is_err(), "{case}");
        }
    }
}

/// A unit scan over units whose first byte is their length (0 is invalid).
fn byte_len_units(block: &[u8], from: usize, starts: &mut Vec<u32>) -> Option<usize> {
    let mut at = from;
    while at < block.len() {
        let len = block[at] as usize;
        if len == 0 {
            return None;
        }
        starts.push(at as u32);
        at += len;
    }
    Some(at - block.len())
}

#[test]
fn taken_blocks_carry_the_unit_starts_their_jobs_found() {
    // Units of 1 + (i % 7) * 10 bytes, each starting with its length; the
    // payloads are cut so that units span blocks and blocks start inside
    // units, and one block is a zero byte (a wrong guess: invalid).
    let mut stream = Vec::new();
    let mut truth = Vec::new();
    for i in 0..3000usize {
        let len = 1 + (i % 7) * 10;
        truth.push(stream.len());
        stream.push(len as u8);
        stream.extend(std::iter::repeat_n(0xaa, len - 1));
    }
    let cuts = [0, 500, 1000, 1003, 9000, 20000, 33000, stream.len()];
    let payloads: Vec<&[u8]> = cuts.windows(2).map(|w| &stream[w[0]..w[1]]).collect();
    let (file, offsets) = blocks_file(&payloads);
    let mut reader =
        ParallelReader::new(std::io::Cursor::new(file), pool(3), Vec::new()).expect("reader");
    reader.scan_units_with(byte_len_units);
    let recycler = reader.block_recycler();
    let mut at = 0u64;
    let mut checked = 0;
    let mut i = 0;
    while let Some(b) = reader.take_block().expect("block") {
        assert_eq!(b.offset, offsets[i], "block {i}'s offset");
        assert_eq!(b.uncompressed, at, "block {i}'s uncompressed offset");
        assert_eq!(b.start, 0);
        assert_eq!(&b.data[..], payloads[i]);
        let starts = b.starts.as_ref().expect("scanned");
        // Every true start at or after the first listed true one is listed
        // (a wrong guess lists none).
        let true_here: Vec<u32> = truth
            .iter()
            .filter(|&&t| (t as u64) >= at && (t as u64) < at + b.data.len() as u64)
            .map(|&t| (t as u64 - at) as u32)
            .collect();
        if i < JOB_BLOCKS {
            // The first job's guess (offset 0 of the stream) is right, and
            // the chain goes on across its blocks.
            assert_eq!(starts, &true_here, "block {i}");
            checked += 1;
        } else if let Some(k) = starts.iter().position(|s| true_here.contains(s)) {
            let first = true_here.iter().position(|&t| t == starts[k]).unwrap();
            assert_eq!(&starts[k..], &true_here[first..], "block {i}");
        }
        at += b.data.len() as u64;
        recycler.give_back(b.data);
        i += 1;
    }
    assert_eq!(i, payloads.len());
    assert_eq!(checked, JOB_BLOCKS);
    assert_eq!(reader.position().uncompressed_total, stream.len() as u64);
}

#[test]
fn a_block_partly_read_is_taken_from_where_reading_stopped() {
    let data = bam_like(200_000);
    let mut reader = ParallelReader::new(
        std::io::Cursor::new(compress_all(&data, CompressionLevel::default())),
        pool(2),
        Vec::new(),
    )
    .expect("reader");
    let mut head = [0u8; 100];
    reader.read_exact(&mut head).expect("read");
    let b = reader.take_block().expect("take").expect("a block");
    assert_eq!(
        (b.start, b.uncompressed, b.starts.is_none()),
        (100, 0, true)
    );
    let next = reader.position();
    assert_eq!(next.in_block, 0);
    assert_eq!(next.uncompressed_total, b.data.len() as u64);
    let (rest, err) = drain(&mut reader);
    assert!(err.is_none());
    let mut all = b.data.clone();
    all.extend_from_slice(&rest);
    assert_eq!(all, data);
}

#[test]
fn empty_blocks_are_noted_for_htslib_offsets() {
    // Data, two empty blocks, data, then the EOF block.
    let (file, offsets) = blocks_file(&[b"ab", b"", b"", b"cd"]);
    for threads in [1, 3] {
        let mut reader = ParallelReader::new(
            std::io::Cursor::new(file.clone()),
            pool(threads),
            Vec::new(),
        )
        .expect("reader");
        let empty = reader.empty_blocks();
        let (data, err) = drain(&mut reader);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(data, b"abcd");
        // htslib's tell at the end of "ab" is the first empty block.
        assert_eq!(empty.run_start(offsets[3]), offsets[1]);
        assert_eq!(empty.run_start(offsets[1]), offsets[1]);
        assert_eq!(empty.run_start(offsets[0]), offsets[0]);
        let end = file.len() as u64;
        assert_eq!(empty.stream_end(), Some(end));
        assert_eq!(empty.run_start(end), end - EOF_BLOCK.len() as u64);
    }
}
