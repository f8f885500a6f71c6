//! Deflate and inflate implementations against libdeflate (what `block.rs`
//! uses) on real BGZF blocks: inflates the first N blocks of a BGZF file
//! (their payloads are what a BAM writer deflates), then, one thread,
//! interleaved rounds:
//!
//! * deflate every payload, CRC32 included (a BGZF footer needs it), with
//!   libdeflate levels 1, 2, 3 (what htslib, and alnsort, use for `-l 1`,
//!   `-l 2`, `-l 3`) and 5 (alnsort's `-l 6`), and with the deflaters
//!   that build with cargo alone: zlib-rs (the Rust port of zlib-ng: level
//!   1 is its `deflate_quick`, 2 `deflate_fast`, 3-6 `deflate_medium`,
//!   its default is 6), miniz_oxide (levels 1-3;
//!   level 1 is its single-probe greedy path) and fdeflate (one level,
//!   made for PNG data: zero runs and a fixed Huffman code); with the
//!   feature `isal-bench`, also ISA-L's igzip levels 0-3 (system library);
//! * inflate every block of the file as it is, CRC32 checked, with
//!   libdeflate, zlib-rs, miniz_oxide (and ISA-L with the feature).
//!
//! Times are CPU seconds of this thread (`CLOCK_THREAD_CPUTIME_ID`: the
//! machine is shared), per MB of payload (10^6 bytes); sizes are the
//! compressed blocks' deflate bytes plus 26 bytes of BGZF header and
//! footer each. Every block of every codec is inflated back by libdeflate
//! and compared with its payload. With a directory argument, each codec's
//! blocks are also written there as a BGZF file (`<codec>.bgzf`, the
//! payloads in order, then the EOF block) for other readers to check.
//!
//!     cargo run --release -p alnsort-bgzf --example codecs -- \
//!         FILE.bam [BLOCKS] [ROUNDS] [OUTDIR]
//!
//! With ISA-L (Debian: `apt-get install libisal-dev`): add
//! `--features isal-bench`.

use std::io::Read;

use alnsort_bgzf::block::{inflate_block, parse_header, FOOTER_LEN, HEADER_LEN};
use alnsort_bgzf::{EOF_BLOCK, MAX_BLOCK_SIZE};

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One compressor under test: deflates `payload` into `out` (raw deflate),
/// returns its length and the payload's CRC32.
trait Deflate {
    fn name(&self) -> String;
    fn deflate(&mut self, payload: &[u8], out: &mut [u8]) -> (usize, u32);
}

struct Libdeflate(i32, libdeflater::Compressor);

impl Deflate for Libdeflate {
    fn name(&self) -> String {
        format!("libdeflate {}", self.0)
    }
    fn deflate(&mut self, payload: &[u8], out: &mut [u8]) -> (usize, u32) {
        let n = self.1.deflate_compress(payload, out).expect("fits");
        (n, libdeflater::crc32(payload))
    }
}

/// zlib-rs, one stream per block (reset, not re-allocated), raw deflate
/// with a 32 KiB window, zlib's default memLevel 8.
struct ZlibRs(i32, zlib_rs::Deflate);

impl ZlibRs {
    fn new(level: i32) -> Self {
        ZlibRs(level, zlib_rs::Deflate::new(level, false, 15))
    }
}

impl Deflate for ZlibRs {
    fn name(&self) -> String {
        format!("zlib-rs {}", self.0)
    }
    fn deflate(&mut self, payload: &[u8], out: &mut [u8]) -> (usize, u32) {
        self.1.reset();
        let status = self
            .1
            .compress(payload, out, zlib_rs::DeflateFlush::Finish)
            .expect("zlib-rs deflate");
        assert!(
            matches!(status, zlib_rs::Status::StreamEnd),
            "zlib-rs: output full"
        );
        (self.1.total_out() as usize, libdeflater::crc32(payload))
    }
}

/// miniz_oxide's compressor core, reset per block, raw deflate.
struct Miniz(i32, Box<miniz_oxide::deflate::core::CompressorOxide>);

impl Miniz {
    fn new(level: i32) -> Self {
        use miniz_oxide::deflate::core::{create_comp_flags_from_zip_params, CompressorOxide};
        let flags = create_comp_flags_from_zip_params(level, -15, 0);
        Miniz(level, Box::new(CompressorOxide::new(flags)))
    }
}

impl Deflate for Miniz {
    fn name(&self) -> String {
        format!("miniz_oxide {}", self.0)
    }
    fn deflate(&mut self, payload: &[u8], out: &mut [u8]) -> (usize, u32) {
        use miniz_oxide::deflate::core::{compress, TDEFLFlush, TDEFLStatus};
        self.1.reset();
        let (status, read, n) = compress(&mut self.1, payload, out, TDEFLFlush::Finish);
        assert!(
            status == TDEFLStatus::Done && read == payload.len(),
            "miniz_oxide: {status:?}"
        );
        (n, libdeflater::crc32(payload))
    }
}

/// fdeflate writes a zlib stream (2-byte header, Adler-32 trailer): the
/// deflate data is what lies between them.
struct Fdeflate;

impl Deflate for Fdeflate {
    fn name(&self) -> String {
        "fdeflate".to_string()
    }
    fn deflate(&mut self, payload: &[u8], out: &mut [u8]) -> (usize, u32) {
        let z = fdeflate::compress_to_vec(payload);
        // Its output can be larger than the payload (BAM data has few zero
        // runs): `out` has room for twice a block, and such a block is
        // counted but cannot be written as BGZF.
        let raw = &z[2..z.len() - 4];
        out[..raw.len()].copy_from_slice(raw);
        (raw.len(), libdeflater::crc32(payload))
    }
}

/// The CRC32 and ISIZE in a block's footer, and its deflate data.
fn split_block(block: &[u8]) -> (&[u8], u32, usize) {
    let h = parse_header(block, 0).expect("header");
    let footer = h.bsize - FOOTER_LEN;
    let crc = u32::from_le_bytes(block[footer..footer + 4].try_into().expect("4"));
    let isize = u32::from_le_bytes(block[footer + 4..footer + 8].try_into().expect("4"));
    (&block[h.header_len..footer], crc, isize as usize)
}

/// One decompressor under test: inflates a whole block, CRC32 checked.
trait Inflate {
    fn name(&self) -> &'static str;
    fn inflate(&mut self, block: &[u8], out: &mut Vec<u8>);
}

struct LibdeflateInflate(libdeflater::Decompressor);

impl Inflate for LibdeflateInflate {
    fn name(&self) -> &'static str {
        "libdeflate"
    }
    fn inflate(&mut self, block: &[u8], out: &mut Vec<u8>) {
        inflate_block(block, 0, out, &mut self.0).expect("inflate");
    }
}

struct ZlibRsInflate(zlib_rs::Inflate);

impl Inflate for ZlibRsInflate {
    fn name(&self) -> &'static str {
        "zlib-rs"
    }
    fn inflate(&mut self, block: &[u8], out: &mut Vec<u8>) {
        let (cdata, crc, isize) = split_block(block);
        out.resize(isize, 0);
        self.0.reset(false);
        let status = self
            .0
            .decompress(cdata, out, zlib_rs::InflateFlush::Finish)
            .expect("zlib-rs inflate");
        assert!(matches!(status, zlib_rs::Status::StreamEnd));
        assert_eq!(self.0.total_out() as usize, isize, "ISIZE");
        assert_eq!(zlib_rs::crc32::crc32(0, out), crc, "CRC32");
    }
}

struct MinizInflate(Box<miniz_oxide::inflate::core::DecompressorOxide>);

impl Inflate for MinizInflate {
    fn name(&self) -> &'static str {
        "miniz_oxide"
    }
    fn inflate(&mut self, block: &[u8], out: &mut Vec<u8>) {
        use miniz_oxide::inflate::core::{decompress, inflate_flags};
        use miniz_oxide::inflate::TINFLStatus;
        let (cdata, crc, isize) = split_block(block);
        out.resize(isize, 0);
        self.0.init();
        let (status, _, n) = decompress(
            &mut self.0,
            cdata,
            out,
            0,
            inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
        );
        assert!(
            status == TINFLStatus::Done && n == isize,
            "miniz_oxide inflate: {status:?}"
        );
        assert_eq!(libdeflater::crc32(out), crc, "CRC32");
    }
}

#[cfg(feature = "isal-bench")]
mod isal {
    //! ISA-L's igzip through the system library (`isal-sys`, shared).
    use std::os::raw::c_int;

    use isal_sys::igzip_lib as isal;

    extern "C" {
        /// ISA-L's CRC-32 as gzip uses it (`isa-l/crc.h`), in the same library.
        fn crc32_gzip_refl(init_crc: u32, buf: *const u8, len: u64) -> u32;
    }

    pub struct Isal {
        level: u32,
        level_buf: Vec<u8>,
    }

    impl Isal {
        pub fn new(level: u32) -> Self {
            let size = [
                isal::ISAL_DEF_LVL0_DEFAULT,
                isal::ISAL_DEF_LVL1_DEFAULT,
                isal::ISAL_DEF_LVL2_DEFAULT,
                isal::ISAL_DEF_LVL3_DEFAULT,
            ][level as usize] as usize;
            Isal {
                level,
                level_buf: vec![0; size],
            }
        }
    }

    impl super::Deflate for Isal {
        fn name(&self) -> String {
            format!("ISA-L {}", self.level)
        }
        fn deflate(&mut self, payload: &[u8], out: &mut [u8]) -> (usize, u32) {
            // SAFETY: a zeroed isal_zstream is what isal_deflate_stateless_init
            // expects to fill; the pointers given live through the call.
            let n = unsafe {
                let mut s: isal::isal_zstream = std::mem::zeroed();
                isal::isal_deflate_stateless_init(&mut s);
                s.level = self.level;
                s.level_buf = self.level_buf.as_mut_ptr();
                s.level_buf_size = self.level_buf.len() as u32;
                s.gzip_flag = isal::IGZIP_DEFLATE as u16;
                s.end_of_stream = 1;
                s.flush = isal::NO_FLUSH as u16;
                s.next_in = payload.as_ptr() as *mut u8;
                s.avail_in = payload.len() as u32;
                s.next_out = out.as_mut_ptr();
                s.avail_out = out.len() as u32;
                let rc = isal::isal_deflate_stateless(&mut s);
                assert_eq!(rc, isal::COMP_OK as c_int, "isal_deflate_stateless");
                s.total_out as usize
            };
            // SAFETY: reads `payload` only.
            let crc = unsafe { crc32_gzip_refl(0, payload.as_ptr(), payload.len() as u64) };
            (n, crc)
        }
    }

    pub struct IsalInflate(Box<isal::inflate_state>);

    impl IsalInflate {
        pub fn new() -> Self {
            // SAFETY: isal_inflate_init fills the zeroed state before each use.
            IsalInflate(Box::new(unsafe { std::mem::zeroed() }))
        }
    }

    impl super::Inflate for IsalInflate {
        fn name(&self) -> &'static str {
            "ISA-L"
        }
        fn inflate(&mut self, block: &[u8], out: &mut Vec<u8>) {
            let (cdata, crc, isize) = super::split_block(block);
            out.resize(isize, 0);
            let state = &mut *self.0;
            // SAFETY: the pointers given live through the call; the state is
            // re-initialised for each block.
            unsafe {
                isal::isal_inflate_init(state);
                state.crc_flag = isal::ISAL_DEFLATE;
                state.next_in = cdata.as_ptr() as *mut u8;
                state.avail_in = cdata.len() as u32;
                state.next_out = out.as_mut_ptr();
                state.avail_out = out.len() as u32;
                let rc = isal::isal_inflate_stateless(state);
                assert_eq!(rc, isal::ISAL_DECOMP_OK as c_int, "isal_inflate_stateless");
                assert_eq!(state.total_out as usize, isize, "ISIZE");
                let got = crc32_gzip_refl(0, out.as_ptr(), out.len() as u64);
                assert_eq!(got, crc, "CRC32");
            }
        }
    }
}

/// A BGZF block around raw deflate data (header of `EOF_BLOCK`, BSIZE,
/// CRC32, ISIZE).
fn wrap(cdata: &[u8], crc: u32, isize: usize) -> Vec<u8> {
    let total = HEADER_LEN + cdata.len() + FOOTER_LEN;
    assert!(total <= MAX_BLOCK_SIZE);
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&EOF_BLOCK[..HEADER_LEN]);
    b[16..18].copy_from_slice(&((total - 1) as u16).to_le_bytes());
    b.extend_from_slice(cdata);
    b.extend_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(&(isize as u32).to_le_bytes());
    b
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: codecs FILE [BLOCKS] [ROUNDS] [OUTDIR]");
    let max_blocks: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4000);
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let outdir = args.get(4);
    let mut data = Vec::new();
    std::fs::File::open(path)
        .expect("open")
        .read_to_end(&mut data)
        .expect("read");
    let mut d = libdeflater::Decompressor::new();
    let (mut blocks, mut payloads) = (Vec::new(), Vec::new());
    let mut at = 0usize;
    while at < data.len() && payloads.len() < max_blocks {
        let h = parse_header(&data[at..], at as u64).expect("header");
        let block = &data[at..at + h.bsize];
        let mut out = Vec::new();
        inflate_block(block, at as u64, &mut out, &mut d).expect("inflate");
        if !out.is_empty() {
            blocks.push(block.to_vec());
            payloads.push(out);
        }
        at += h.bsize;
    }
    let raw: usize = payloads.iter().map(Vec::len).sum();
    let stored: usize = blocks.iter().map(Vec::len).sum();
    println!(
        "{path}: {} blocks, {:.1} MB payload, {:.1} MB as stored; {rounds} rounds, CPU s of one thread",
        payloads.len(),
        raw as f64 / 1e6,
        stored as f64 / 1e6
    );
    let mut codecs: Vec<Box<dyn Deflate>> = Vec::new();
    // libdeflate 5 is what alnsort's default `-l 6` uses (`block.rs`).
    for lvl in [1, 2, 3, 5] {
        let c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(lvl).expect("lvl"));
        codecs.push(Box::new(Libdeflate(lvl, c)));
    }
    for lvl in 1..=6 {
        codecs.push(Box::new(ZlibRs::new(lvl)));
    }
    for lvl in 1..=3 {
        codecs.push(Box::new(Miniz::new(lvl)));
    }
    codecs.push(Box::new(Fdeflate));
    #[cfg(feature = "isal-bench")]
    for lvl in 0..=3 {
        codecs.push(Box::new(isal::Isal::new(lvl)));
    }
    let mut times = vec![Vec::new(); codecs.len()];
    let mut sizes = vec![0usize; codecs.len()];
    let mut out = vec![0u8; 2 * MAX_BLOCK_SIZE];
    let mut check = Vec::new();
    for round in 0..rounds {
        for (i, c) in codecs.iter_mut().enumerate() {
            let mut file = outdir.filter(|_| round == 0).map(|_| Vec::new());
            let mut total = 0usize;
            let t = thread_cpu();
            for p in &payloads {
                let (n, crc) = c.deflate(p, &mut out);
                total += n + HEADER_LEN + FOOTER_LEN;
                if n + HEADER_LEN + FOOTER_LEN > MAX_BLOCK_SIZE {
                    file = None; // does not fit a BGZF block
                }
                if let Some(f) = file.as_mut() {
                    f.extend_from_slice(&wrap(&out[..n], crc, p.len()));
                }
            }
            times[i].push(thread_cpu() - t);
            sizes[i] = total;
            if round == 0 {
                // Every block inflates back to its payload, with the right
                // CRC32 (outside the timing).
                for p in &payloads {
                    let (n, crc) = c.deflate(p, &mut out);
                    check.resize(p.len(), 0);
                    let got = d.deflate_decompress(&out[..n], &mut check).expect("valid");
                    assert!(got == p.len() && check == *p, "{} round trip", c.name());
                    assert_eq!(crc, libdeflater::crc32(p), "{} CRC32", c.name());
                }
            }
            if let (Some(dir), Some(mut f)) = (outdir, file) {
                f.extend_from_slice(&EOF_BLOCK);
                let name = c.name().replace(' ', "-").to_lowercase();
                std::fs::write(format!("{dir}/{name}.bgzf"), f).expect("write");
            }
        }
    }
    let mb = raw as f64 / 1e6;
    let base = median(&mut times[0].clone());
    println!("| deflate | CPU s/MB (median) | min | MB/s (median) | CPU vs libdeflate 1 | size / payload | size vs libdeflate 1 |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (i, c) in codecs.iter().enumerate() {
        let min = times[i].iter().cloned().fold(f64::INFINITY, f64::min);
        let med = median(&mut times[i].clone());
        println!(
            "| {} | {:.5} | {:.5} | {:.0} | {:.2}x | {:.4} | {:+.2}% |",
            c.name(),
            med / mb,
            min / mb,
            mb / med,
            med / base,
            sizes[i] as f64 / raw as f64,
            100.0 * (sizes[i] as f64 / sizes[0] as f64 - 1.0)
        );
    }
    // Inflate: the file's own blocks.
    let mut inflaters: Vec<Box<dyn Inflate>> = vec![
        Box::new(LibdeflateInflate(libdeflater::Decompressor::new())),
        Box::new(ZlibRsInflate(zlib_rs::Inflate::new(false, 15))),
        Box::new(MinizInflate(Box::default())),
    ];
    #[cfg(feature = "isal-bench")]
    inflaters.push(Box::new(isal::IsalInflate::new()));
    let mut times = vec![Vec::new(); inflaters.len()];
    let mut buf = Vec::new();
    for _ in 0..rounds {
        for (i, f) in inflaters.iter_mut().enumerate() {
            let t = thread_cpu();
            for b in &blocks {
                f.inflate(b, &mut buf);
            }
            times[i].push(thread_cpu() - t);
        }
    }
    let base = median(&mut times[0].clone());
    println!(
        "| inflate (CRC32 checked) | CPU s/MB (median) | min | MB/s (median) | CPU vs libdeflate |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (f, t) in inflaters.iter().zip(&mut times) {
        let min = t.iter().cloned().fold(f64::INFINITY, f64::min);
        let med = median(t);
        println!(
            "| {} | {:.5} | {:.5} | {:.0} | {:.2}x |",
            f.name(),
            med / mb,
            min / mb,
            mb / med,
            med / base
        );
    }
}
