//! Measures what each libdeflate level costs and saves on real data: inflates
//! the first N blocks of a BGZF file, then deflates them at raw libdeflate
//! levels 1..=9 (single thread), printing MB/s and the size ratio. Used to
//! choose the level mapping documented in `block.rs`.
//!
//!     cargo run --release -p alnsort-bgzf --example recompress_levels -- FILE.bam [BLOCKS]

use std::io::Read;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: recompress_levels FILE [BLOCKS]");
    let max_blocks: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3000);
    let mut data = Vec::new();
    std::fs::File::open(path)
        .expect("open")
        .read_to_end(&mut data)
        .expect("read");
    let mut d = libdeflater::Decompressor::new();
    let mut blocks = Vec::new();
    let mut at = 0usize;
    while at < data.len() && blocks.len() < max_blocks {
        let h = alnsort_bgzf::block::parse_header(&data[at..], at as u64).expect("header");
        let end = at + h.bsize;
        let mut out = Vec::new();
        alnsort_bgzf::block::inflate_block(&data[at..end], at as u64, &mut out, &mut d)
            .expect("inflate");
        if !out.is_empty() {
            blocks.push(out);
        }
        at = end;
    }
    let raw: usize = blocks.iter().map(|b| b.len()).sum();
    println!(
        "{} blocks, {:.1} MB uncompressed",
        blocks.len(),
        raw as f64 / 1e6
    );
    for lvl in 1..=9 {
        let mut c =
            libdeflater::Compressor::new(libdeflater::CompressionLvl::new(lvl).expect("level"));
        let mut out = vec![0u8; 70000];
        let t = std::time::Instant::now();
        let mut total = 0usize;
        for b in &blocks {
            total += c.deflate_compress(b, &mut out).expect("deflate");
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "libdeflate {lvl}: {:7.1} MB/s  compressed {:.2} MB ({:.4} of raw)",
            raw as f64 / 1e6 / s,
            total as f64 / 1e6,
            total as f64 / raw as f64
        );
    }
}
