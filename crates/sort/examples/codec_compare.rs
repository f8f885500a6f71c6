//! The measurement behind the run-file codec choice: LZ4 (lz4_flex block
//! API) against zstd level 1, on BAM-like records cut into 256 KiB frames
//! the way `runfile.rs` cuts them.
//!
//! Records imitate BAM: a 36-byte fixed part with sorted-ish positions, a
//! read name, a CIGAR op, 150 bases packed 4 bits each (random ACGT), 150
//! qualities (Illumina 4-level binning, mostly Q37), and three tags. The
//! key is the 8-byte coordinate key.
//!
//! With a path, the records are a real BAM's instead (any BGZF level; sort
//! it first, `samtools sort`, for a run's order), keyed by (reference,
//! position) as the coordinate key is, and libdeflate level 1 (BGZF's
//! deflate at samtools' temp-file level) and zstd at levels -1, 1 and 3
//! are measured beside LZ4: the measurement of issue 38.
//!
//! Run: `cargo run --release -p alnsort-sort --example codec_compare [sorted.bam]`.

use std::time::Instant;

/// Raw bytes per frame, as `plan.rs`'s `MAX_FRAME_BYTES`.
const FRAME_BYTES: usize = 256 << 10;
/// Records generated (about 1 GB raw would be more faithful; 400k records,
/// ~130 MB, keeps the run short and the numbers stable).
const RECORDS: usize = 400_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (frames, records) = match std::env::args_os().nth(1) {
        Some(path) => bam_frames(std::path::Path::new(&path))?,
        None => (frames(), RECORDS),
    };
    let raw: usize = frames.iter().map(Vec::len).sum();
    println!(
        "{} frames, {} MB raw, {} records, {:.1} raw bytes per record",
        frames.len(),
        raw >> 20,
        records,
        raw as f64 / records as f64
    );
    RECORDS_SEEN.store(records, std::sync::atomic::Ordering::Relaxed);
    if std::env::args_os().nth(1).is_some() {
        // The same entries with their fields apart in each frame (keys and
        // lengths, the fixed 36 bytes, names, CIGARs, bases, qualities,
        // tags, each a stretch of its own), at zstd 1 and 2: what a run
        // format that splits records by field would save.
        let t = Instant::now();
        let apart: Vec<Vec<u8>> = frames.iter().map(|f| fields_apart(f)).collect();
        println!(
            "fields apart: {:.2} s to split every frame (one core)",
            t.elapsed().as_secs_f64()
        );
        for level in [1, 2] {
            let mut zc = zstd::bulk::Compressor::new(level)?;
            measure(&format!("zstd {level}, fields apart"), &apart, |f| {
                zc.compress(f).expect("zstd")
            });
        }
        let mut zc = zstd::bulk::Compressor::new(-1)?;
        measure("zstd -1 (fast)", &frames, |f| zc.compress(f).expect("zstd"));
        for level in [2, 3, 5, 7] {
            let mut zc = zstd::bulk::Compressor::new(level)?;
            measure(&format!("zstd {level}"), &frames, |f| {
                zc.compress(f).expect("zstd")
            });
        }
        let mut lc = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).expect("1"));
        let packed: Vec<Vec<u8>> = {
            let t = Instant::now();
            let v: Vec<Vec<u8>> = frames
                .iter()
                .map(|f| {
                    let mut out = vec![0u8; lc.deflate_compress_bound(f.len())];
                    let n = lc.deflate_compress(f, &mut out).expect("deflate");
                    out.truncate(n);
                    out
                })
                .collect();
            let c = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut ld = libdeflater::Decompressor::new();
            for (p, f) in v.iter().zip(&frames) {
                let mut out = vec![0u8; f.len()];
                let n = ld.deflate_decompress(p, &mut out).expect("inflate");
                assert_eq!(n, f.len());
            }
            let d = t.elapsed().as_secs_f64();
            line("libdeflate 1", raw, v.iter().map(Vec::len).sum(), c, d);
            v
        };
        drop(packed);
    }

    // LZ4.
    let t = Instant::now();
    let lz4: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| lz4_flex::block::compress(f))
        .collect();
    let lz4_c = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for (c, f) in lz4.iter().zip(&frames) {
        let d = lz4_flex::block::decompress(c, f.len())?;
        assert_eq!(d.len(), f.len());
    }
    let lz4_d = t.elapsed().as_secs_f64();
    line(
        "lz4_flex block",
        raw,
        lz4.iter().map(Vec::len).sum(),
        lz4_c,
        lz4_d,
    );

    // zstd level 1.
    let t = Instant::now();
    let mut zc = zstd::bulk::Compressor::new(1)?;
    let zs: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| zc.compress(f))
        .collect::<Result<_, _>>()?;
    let zs_c = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut zd = zstd::bulk::Decompressor::new()?;
    for (c, f) in zs.iter().zip(&frames) {
        let d = zd.decompress(c, f.len())?;
        assert_eq!(d.len(), f.len());
    }
    let zs_d = t.elapsed().as_secs_f64();
    line("zstd -1", raw, zs.iter().map(Vec::len).sum(), zs_c, zs_d);
    Ok(())
}

/// Records the frames came from, for the bytes per record of `line`.
static RECORDS_SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// zstd at a level: compress with `compress`, decompress with zstd.
fn measure(name: &str, frames: &[Vec<u8>], mut compress: impl FnMut(&[u8]) -> Vec<u8>) {
    let raw: usize = frames.iter().map(Vec::len).sum();
    let t = Instant::now();
    let packed: Vec<Vec<u8>> = frames.iter().map(|f| compress(f)).collect();
    let c = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut zd = zstd::bulk::Decompressor::new().expect("zstd");
    for (p, f) in packed.iter().zip(frames) {
        let d = zd.decompress(p, f.len()).expect("zstd");
        assert_eq!(d.len(), f.len());
    }
    let d = t.elapsed().as_secs_f64();
    line(name, raw, packed.iter().map(Vec::len).sum(), c, d);
}

fn line(name: &str, raw: usize, packed: usize, c: f64, d: f64) {
    let records = RECORDS_SEEN.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{name:<16} ratio {:.3}  {:>6.1} B/rec  compress {:>6.0} MB/s {:>5.2} s  decompress {:>6.0} MB/s {:>5.2} s (one core)",
        packed as f64 / raw as f64,
        packed as f64 / records as f64,
        raw as f64 / c / 1e6,
        c,
        raw as f64 / d / 1e6,
        d,
    );
}

/// Frames of run-file entries.
type Frames = Vec<Vec<u8>>;

/// A BAM's records as run-file entries keyed by (reference, position),
/// cut into frames; and how many records.
fn bam_frames(path: &std::path::Path) -> Result<(Frames, usize), Box<dyn std::error::Error>> {
    let data = std::fs::read(path)?;
    let mut raw = Vec::new();
    let mut pos = 0;
    let mut ld = libdeflater::Decompressor::new();
    while pos + 18 <= data.len() {
        let xlen = u16::from_le_bytes([data[pos + 10], data[pos + 11]]) as usize;
        let bsize = u16::from_le_bytes([data[pos + 16], data[pos + 17]]) as usize + 1;
        let isize = u32::from_le_bytes(data[pos + bsize - 4..pos + bsize].try_into()?) as usize;
        let start = raw.len();
        raw.resize(start + isize, 0);
        ld.deflate_decompress(&data[pos + 12 + xlen..pos + bsize - 8], &mut raw[start..])?;
        pos += bsize;
    }
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
    let l_text = u32_at(&raw, 4) as usize;
    let mut at = 8 + l_text;
    let n_ref = u32_at(&raw, at);
    at += 4;
    for _ in 0..n_ref {
        at += 4 + u32_at(&raw, at) as usize + 4;
    }
    // FRAME_KIB: another frame size than the run files' (their 256 KiB).
    let frame_bytes = std::env::var("FRAME_KIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(FRAME_BYTES, |k| k << 10);
    let mut frames = vec![Vec::new()];
    let mut records = 0;
    while at + 4 <= raw.len() {
        let size = u32_at(&raw, at) as usize;
        let rec = &raw[at..at + 4 + size];
        at += 4 + size;
        let key = ((u64::from(u32_at(rec, 4)) << 32) | u64::from(u32_at(rec, 8))).to_be_bytes();
        let frame = frames.last_mut().expect("never empty");
        frame.push(key.len() as u8);
        frame.extend_from_slice(&key);
        alnsort_pipeline::varint::put(frame, rec.len() as u64);
        frame.extend_from_slice(rec);
        records += 1;
        if frame.len() >= frame_bytes {
            frames.push(Vec::new());
        }
    }
    frames.retain(|f| !f.is_empty());
    Ok((frames, records))
}

/// xorshift64*.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Sorted BAM-like entries, encoded as run-file entries, cut into frames.
fn frames() -> Vec<Vec<u8>> {
    let mut next = rng(3);
    let mut pos = 0u64;
    let mut frames = vec![Vec::new()];
    for i in 0..RECORDS {
        pos += next() % 400;
        let key = pos.to_be_bytes();
        let mut rec = Vec::with_capacity(400);
        rec.extend_from_slice(&[0u8; 4]); // block_size, filled below
        rec.extend_from_slice(&0i32.to_le_bytes()); // refID
        rec.extend_from_slice(&(pos as i32).to_le_bytes()); // pos
        let name = format!(
            "A00123:45:HXXXXXXX:1:{}:{}:{}",
            1101 + i % 50,
            next() % 30000,
            next() % 40000
        );
        rec.push(name.len() as u8 + 1); // l_read_name
        rec.push(60); // mapq
        rec.extend_from_slice(&4680u16.to_le_bytes()); // bin
        rec.extend_from_slice(&1u16.to_le_bytes()); // n_cigar_op
        rec.extend_from_slice(&[99, 0]); // flag
        rec.extend_from_slice(&150u32.to_le_bytes()); // l_seq
        rec.extend_from_slice(&0i32.to_le_bytes()); // next refID
        rec.extend_from_slice(&((pos + 200) as i32).to_le_bytes()); // next pos
        rec.extend_from_slice(&350i32.to_le_bytes()); // tlen
        rec.extend_from_slice(name.as_bytes());
        rec.push(0);
        rec.extend_from_slice(&(150u32 << 4).to_le_bytes()); // 150M
        const BASES: [u8; 4] = [1, 2, 4, 8]; // A C G T in BAM 4-bit codes
        for _ in 0..75 {
            let r = next();
            rec.push((BASES[(r & 3) as usize] << 4) | BASES[((r >> 2) & 3) as usize]);
        }
        for _ in 0..150 {
            let q = match next() % 100 {
                0..=79 => 37,
                80..=91 => 25,
                92..=97 => 11,
                _ => 2,
            };
            rec.push(q);
        }
        rec.extend_from_slice(b"NMC");
        rec.push((next() % 4) as u8);
        rec.extend_from_slice(b"ASC");
        rec.push(140 + (next() % 10) as u8);
        rec.extend_from_slice(b"RGZgroup1\0");
        let block_size = (rec.len() - 4) as u32;
        rec[..4].copy_from_slice(&block_size.to_le_bytes());

        let frame = frames.last_mut().expect("never empty");
        frame.push(key.len() as u8);
        frame.extend_from_slice(&key);
        // The length as runfile.rs writes it.
        alnsort_pipeline::varint::put(frame, rec.len() as u64);
        frame.extend_from_slice(&rec);
        if frame.len() >= FRAME_BYTES {
            frames.push(Vec::new());
        }
    }
    frames.retain(|f| !f.is_empty());
    frames
}

/// A frame of entries (`key_len key rec_len record`, records with their
/// `block_size`) rewritten as streams of one field each, concatenated.
fn fields_apart(frame: &[u8]) -> Vec<u8> {
    let mut streams: [Vec<u8>; 7] = Default::default();
    let mut at = 0;
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
    while at < frame.len() {
        let key_len = alnsort_pipeline::varint::read(frame, &mut at).expect("key len") as usize;
        alnsort_pipeline::varint::put(&mut streams[0], key_len as u64);
        streams[0].extend_from_slice(&frame[at..at + key_len]);
        at += key_len;
        let len = alnsort_pipeline::varint::read(frame, &mut at).expect("len") as usize;
        let rec = &frame[at..at + len];
        at += len;
        alnsort_pipeline::varint::put(&mut streams[0], len as u64);
        streams[1].extend_from_slice(&rec[..36]);
        let l_name = rec[12] as usize;
        let n_cigar = u16::from_le_bytes([rec[16], rec[17]]) as usize;
        let l_seq = u32_at(rec, 20) as usize;
        let mut p = 36;
        streams[2].extend_from_slice(&rec[p..p + l_name]);
        p += l_name;
        streams[3].extend_from_slice(&rec[p..p + 4 * n_cigar]);
        p += 4 * n_cigar;
        let seq = l_seq.div_ceil(2);
        streams[4].extend_from_slice(&rec[p..p + seq]);
        p += seq;
        streams[5].extend_from_slice(&rec[p..p + l_seq]);
        p += l_seq;
        streams[6].extend_from_slice(&rec[p..]);
    }
    streams.concat()
}
