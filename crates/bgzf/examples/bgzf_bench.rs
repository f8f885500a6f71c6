//! Throughput of the BGZF codec on a synthetic BAM-like buffer: inflate and
//! deflate, levels 1 and 6, through the parallel reader/writer with 1, 2
//! (and more, if given) pool threads, plus the bare single-threaded block
//! codec as a baseline. MB/s are of uncompressed bytes (1 MB = 10^6 B).
//!
//! Run: `cargo run --release -p alnsort-bgzf --example bgzf_bench -- [MB] [threads...]`

use std::io::{self, Read};
use std::sync::Arc;
use std::time::Instant;

use alnsort_bgzf::block::{deflate_block, inflate_block};
use alnsort_bgzf::{CompressionLevel, ParallelReader, ParallelWriter, MAX_PAYLOAD};

/// Repetitions per measurement; the best is reported (least disturbed by
/// other processes on a shared machine).
const REPEATS: usize = 3;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Records shaped like coordinate-sorted 100 bp short-read BAM: fixed
/// fields with slowly increasing positions, a templated read name, packed
/// bases from a random "genome", skewed qualities and two aux tags. It
/// compresses about as well as real BAM (3-4x at level 6).
fn bam_like(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let genome: Vec<u8> = (0..1 << 20).map(|_| (rng.next() % 4) as u8).collect();
    let mut out = Vec::with_capacity(bytes + 512);
    let mut pos = 10_000u32;
    let mut n = 0u32;
    while out.len() < bytes {
        pos += (rng.next() % 40) as u32;
        n += 1;
        let name = format!("SRR1234567.{n}\0");
        let mut rec = Vec::with_capacity(400);
        rec.extend_from_slice(&0i32.to_le_bytes()); // refID
        rec.extend_from_slice(&pos.to_le_bytes());
        rec.push(name.len() as u8);
        rec.push(60); // MAPQ
        rec.extend_from_slice(&4680u16.to_le_bytes()); // bin
        rec.extend_from_slice(&1u16.to_le_bytes()); // n_cigar_op
        rec.extend_from_slice(&[99, 0]); // flag
        rec.extend_from_slice(&100u32.to_le_bytes()); // l_seq
        rec.extend_from_slice(&0i32.to_le_bytes()); // next refID
        rec.extend_from_slice(&(pos + 250).to_le_bytes());
        rec.extend_from_slice(&350i32.to_le_bytes()); // tlen
        rec.extend_from_slice(name.as_bytes());
        rec.extend_from_slice(&(100u32 << 4).to_le_bytes()); // 100M
        let start = pos as usize % (genome.len() - 100);
        for pair in genome[start..start + 100].chunks(2) {
            let code = |b: u8| [1u8, 2, 4, 8][usize::from(b)];
            let mismatch = rng.next().is_multiple_of(100);
            let second = if mismatch { 15 } else { code(pair[1]) };
            rec.push(code(pair[0]) << 4 | second);
        }
        for _ in 0..100 {
            let r = rng.next() % 16;
            rec.push(if r < 10 {
                37
            } else if r < 14 {
                32
            } else {
                10 + (r as u8)
            });
        }
        rec.extend_from_slice(b"NMC\x00RGZgrp1\0");
        out.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        out.extend_from_slice(&rec);
    }
    out.truncate(bytes);
    out
}

fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool"),
    )
}

fn best_of<T>(mut run: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut result = None;
    for _ in 0..REPEATS {
        let start = Instant::now();
        let value = run();
        best = best.min(start.elapsed().as_secs_f64());
        result = Some(value);
    }
    (best, result.expect("REPEATS > 0"))
}

fn deflate_parallel(data: &[u8], level: CompressionLevel, threads: usize) -> Vec<u8> {
    let mut writer = ParallelWriter::new(Vec::with_capacity(data.len() / 2), pool(threads), level);
    for chunk in data.chunks(MAX_PAYLOAD) {
        let mut buf = writer.buffer();
        buf.extend_from_slice(chunk);
        writer.write_block(buf).expect("in-memory write");
    }
    writer.finish().expect("in-memory write").inner
}

fn inflate_parallel(file: &Arc<[u8]>, threads: usize) -> usize {
    let mut reader =
        ParallelReader::new(io::Cursor::new(Arc::clone(file)), pool(threads), Vec::new())
            .expect("reader");
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf).expect("valid BGZF");
        if n == 0 {
            return total;
        }
        total += n;
    }
}

fn deflate_bare(data: &[u8], level: CompressionLevel) -> usize {
    let mut c = level.compressor();
    let mut out = Vec::new();
    let mut total = 0;
    for chunk in data.chunks(MAX_PAYLOAD) {
        deflate_block(chunk, level, &mut out, &mut c).expect("payload fits");
        total += out.len();
    }
    total
}

fn inflate_bare(file: &[u8]) -> usize {
    let mut d = libdeflater::Decompressor::new();
    let mut out = Vec::new();
    let (mut at, mut total) = (0, 0);
    while at < file.len() {
        let header = alnsort_bgzf::block::parse_header(&file[at..], at as u64).expect("valid");
        inflate_block(&file[at..], at as u64, &mut out, &mut d).expect("valid");
        total += out.len();
        at += header.bsize;
    }
    total
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mb: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let mut thread_counts: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
    if thread_counts.is_empty() {
        thread_counts = vec![1, 2];
    }
    let data = bam_like(mb * 1_000_000);
    let mbytes = data.len() as f64 / 1e6;
    println!("input: {mbytes:.0} MB synthetic BAM-like, best of {REPEATS}");
    println!(
        "{:<6} {:<24} {:>8} {:>10} {:>7}",
        "level", "stage", "threads", "MB/s", "ratio"
    );
    for level in [CompressionLevel::FASTEST, CompressionLevel::default()] {
        let lv = level.get();
        let (secs, size) = best_of(|| deflate_bare(&data, level));
        let ratio = data.len() as f64 / size as f64;
        println!(
            "{lv:<6} {:<24} {:>8} {:>10.0} {ratio:>7.2}",
            "deflate (bare block)",
            1,
            mbytes / secs
        );
        let file = deflate_parallel(&data, level, 2);
        let (secs, total) = best_of(|| inflate_bare(&file));
        assert_eq!(total, data.len());
        println!(
            "{lv:<6} {:<24} {:>8} {:>10.0} {:>7}",
            "inflate (bare block)",
            1,
            mbytes / secs,
            ""
        );
        for &threads in &thread_counts {
            let (secs, file) = best_of(|| deflate_parallel(&data, level, threads));
            let ratio = data.len() as f64 / file.len() as f64;
            println!(
                "{lv:<6} {:<24} {threads:>8} {:>10.0} {ratio:>7.2}",
                "deflate (ParallelWriter)",
                mbytes / secs
            );
            let file: Arc<[u8]> = file.into();
            let (secs, total) = best_of(|| inflate_parallel(&file, threads));
            assert_eq!(total, data.len());
            println!(
                "{lv:<6} {:<24} {threads:>8} {:>10.0} {:>7}",
                "inflate (ParallelReader)",
                mbytes / secs,
                ""
            );
        }
    }
}
