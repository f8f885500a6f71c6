//! libdeflate (what `block.rs` uses) against ISA-L's igzip on real BGZF
//! blocks: inflates the first N blocks of a BGZF file (their payloads are
//! what a BAM writer deflates), then, one thread, interleaved rounds:
//!
//! * deflate every payload, CRC32 included (a BGZF footer needs it), with
//!   libdeflate levels 1, 2, 3 (what htslib, and alnsort, use for `-l 1`,
//!   `-l 2`, `-l 3`) and ISA-L levels 0, 1, 2, 3 (its whole scale);
//! * inflate every block of the file as it is, CRC32 checked, with each.
//!
//! Times are CPU seconds of this thread (`CLOCK_THREAD_CPUTIME_ID`: the
//! machine is shared), per MB of payload (10^6 bytes); sizes are the
//! compressed blocks' deflate bytes plus 26 bytes of BGZF header and
//! footer each. Every ISA-L block is inflated back by libdeflate and
//! compared with its payload. With a directory argument, each codec's
//! blocks are also written there as a BGZF file (`<codec>.bgzf`, the
//! payloads in order, then the EOF block) for other readers to check.
//!
//! Needs the system's ISA-L (Debian: `apt-get install libisal-dev`):
//!
//!     cargo run --release -p alnsort-bgzf --features isal-bench \
//!         --example codec_isal -- FILE.bam [BLOCKS] [ROUNDS] [OUTDIR]

use std::io::Read;
use std::os::raw::c_int;

use alnsort_bgzf::block::{inflate_block, parse_header, FOOTER_LEN, HEADER_LEN};
use alnsort_bgzf::{EOF_BLOCK, MAX_BLOCK_SIZE};
use isal_sys::igzip_lib as isal;

extern "C" {
    /// ISA-L's CRC-32 as gzip uses it (`isa-l/crc.h`), in the same library.
    fn crc32_gzip_refl(init_crc: u32, buf: *const u8, len: u64) -> u32;
}

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

struct Isal {
    level: u32,
    level_buf: Vec<u8>,
}

impl Isal {
    fn new(level: u32) -> Self {
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

impl Deflate for Isal {
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

/// ISA-L inflate of one block's deflate data, CRC32 checked.
fn isal_inflate(block: &[u8], out: &mut Vec<u8>, state: &mut isal::inflate_state) {
    let h = parse_header(block, 0).expect("header");
    let footer = h.bsize - FOOTER_LEN;
    let crc = u32::from_le_bytes(block[footer..footer + 4].try_into().expect("4"));
    let isize = u32::from_le_bytes(block[footer + 4..footer + 8].try_into().expect("4"));
    out.resize(isize as usize, 0);
    let cdata = &block[h.header_len..footer];
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
        assert_eq!(state.total_out, isize, "ISIZE");
        let got = crc32_gzip_refl(0, out.as_ptr(), out.len() as u64);
        assert_eq!(got, crc, "CRC32");
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
        .expect("usage: codec_isal FILE [BLOCKS] [ROUNDS] [OUTDIR]");
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
    for lvl in 1..=3 {
        let c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(lvl).expect("lvl"));
        codecs.push(Box::new(Libdeflate(lvl, c)));
    }
    for lvl in 0..=3 {
        codecs.push(Box::new(Isal::new(lvl)));
    }
    let mut times = vec![Vec::new(); codecs.len()];
    let mut sizes = vec![0usize; codecs.len()];
    let mut out = vec![0u8; MAX_BLOCK_SIZE];
    let mut check = Vec::new();
    for round in 0..rounds {
        for (i, c) in codecs.iter_mut().enumerate() {
            let mut file = outdir.filter(|_| round == 0).map(|_| Vec::new());
            let mut total = 0usize;
            let t = thread_cpu();
            for p in &payloads {
                let (n, crc) = c.deflate(p, &mut out);
                total += n + HEADER_LEN + FOOTER_LEN;
                if let Some(f) = file.as_mut() {
                    f.extend_from_slice(&wrap(&out[..n], crc, p.len()));
                }
            }
            times[i].push(thread_cpu() - t);
            sizes[i] = total;
            if round == 0 {
                // Every block inflates back to its payload (outside the timing).
                for p in &payloads {
                    let (n, _) = c.deflate(p, &mut out);
                    check.resize(p.len(), 0);
                    let got = d.deflate_decompress(&out[..n], &mut check).expect("valid");
                    assert!(got == p.len() && check == *p, "{} round trip", c.name());
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
    println!("| deflate | CPU s/MB (median) | min | MB/s (median) | size / payload | size vs libdeflate 1 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (i, c) in codecs.iter().enumerate() {
        let min = times[i].iter().cloned().fold(f64::INFINITY, f64::min);
        let med = median(&mut times[i].clone());
        println!(
            "| {} | {:.5} | {:.5} | {:.0} | {:.4} | {:+.2}% |",
            c.name(),
            med / mb,
            min / mb,
            mb / med,
            sizes[i] as f64 / raw as f64,
            100.0 * (sizes[i] as f64 / sizes[0] as f64 - 1.0)
        );
    }
    // Inflate: the file's own blocks.
    // SAFETY: inflate_state is a C struct of integers, arrays and
    // pointers, for which all zero bytes are a valid value (ISA-L's
    // isal_inflate_init sets it up before use).
    let mut state: Box<isal::inflate_state> = Box::new(unsafe { std::mem::zeroed() });
    let (mut t_ld, mut t_is) = (Vec::new(), Vec::new());
    let mut buf = Vec::new();
    for _ in 0..rounds {
        let t = thread_cpu();
        for b in &blocks {
            inflate_block(b, 0, &mut buf, &mut d).expect("inflate");
        }
        t_ld.push(thread_cpu() - t);
        let t = thread_cpu();
        for b in &blocks {
            isal_inflate(b, &mut buf, &mut state);
        }
        t_is.push(thread_cpu() - t);
    }
    println!("| inflate (CRC32 checked) | CPU s/MB (median) | min | MB/s (median) |");
    println!("|---|---:|---:|---:|");
    for (name, t) in [("libdeflate", &mut t_ld), ("ISA-L", &mut t_is)] {
        let min = t.iter().cloned().fold(f64::INFINITY, f64::min);
        let med = median(t);
        println!(
            "| {name} | {:.5} | {:.5} | {:.0} |",
            med / mb,
            min / mb,
            mb / med
        );
    }
}
