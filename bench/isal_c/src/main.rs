// ISA-L's portable C kernels (built by the cc crate, no nasm; see build.rs)
// against libdeflate 1-3 on the payloads of the first BLOCKS blocks of a BGZF
// file: one thread, CPU seconds of the thread, codecs interleaved over ROUNDS
// rounds, medians; every block inflated back by libdeflate and compared.
use std::io::Read;
extern "C" {
    fn isalc_deflate(
        level: u32,
        i: *const u8,
        il: u32,
        o: *mut u8,
        ol: u32,
        lb: *mut u8,
        lbs: u32,
    ) -> i64;
    fn isalc_level_buf_size(level: u32) -> u32;
}
fn cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let maxb: usize = a[2].parse().unwrap();
    let rounds: usize = a[3].parse().unwrap();
    let mut data = Vec::new();
    std::fs::File::open(&a[1])
        .unwrap()
        .read_to_end(&mut data)
        .unwrap();
    let mut d = libdeflater::Decompressor::new();
    let mut payloads = Vec::new();
    let mut at = 0;
    while at < data.len() && payloads.len() < maxb {
        let bsize = u16::from_le_bytes([data[at + 16], data[at + 17]]) as usize + 1;
        let b = &data[at..at + bsize];
        let isize = u32::from_le_bytes(b[bsize - 4..].try_into().unwrap()) as usize;
        let mut out = vec![0; isize];
        d.deflate_decompress(&b[18..bsize - 8], &mut out).unwrap();
        if isize > 0 {
            payloads.push(out);
        }
        at += bsize;
    }
    let raw: usize = payloads.iter().map(Vec::len).sum();
    let mut ld: Vec<(String, Box<dyn FnMut(&[u8], &mut [u8]) -> usize>)> = Vec::new();
    for l in 1..=3 {
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(l).unwrap());
        ld.push((
            format!("libdeflate {l}"),
            Box::new(move |p: &[u8], o: &mut [u8]| {
                let n = c.deflate_compress(p, o).unwrap();
                let _ = libdeflater::crc32(p);
                n
            }),
        ));
    }
    for l in 0..=3u32 {
        // SAFETY: a pure function of `l` (src/wrap.c).
        let mut lb = vec![0u8; unsafe { isalc_level_buf_size(l) } as usize];
        ld.push((
            format!("ISA-L C {l}"),
            Box::new(move |p: &[u8], o: &mut [u8]| {
                // SAFETY: the pointers and lengths are those of live slices;
                // `lb` has the size ISA-L asks for at level `l`.
                let n = unsafe {
                    isalc_deflate(
                        l,
                        p.as_ptr(),
                        p.len() as u32,
                        o.as_mut_ptr(),
                        o.len() as u32,
                        lb.as_mut_ptr(),
                        lb.len() as u32,
                    )
                };
                assert!(n >= 0);
                let _ = libdeflater::crc32(p);
                n as usize
            }),
        ));
    }
    let mut times = vec![Vec::new(); ld.len()];
    let mut sizes = vec![0usize; ld.len()];
    let mut out = vec![0u8; 1 << 17];
    let mut chk = Vec::new();
    for r in 0..rounds {
        for (i, (name, f)) in ld.iter_mut().enumerate() {
            let t = cpu();
            let mut tot = 0;
            for p in &payloads {
                tot += f(p, &mut out) + 26;
            }
            times[i].push(cpu() - t);
            sizes[i] = tot;
            if r == 0 {
                for p in &payloads {
                    let n = f(p, &mut out);
                    chk.resize(p.len(), 0);
                    assert_eq!(
                        d.deflate_decompress(&out[..n], &mut chk).unwrap(),
                        p.len(),
                        "{name}"
                    );
                    assert!(chk == *p, "{name}");
                }
            }
        }
    }
    let mb = raw as f64 / 1e6;
    let med = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let base = med(&times[0]);
    println!(
        "{}: {} blocks {:.1} MB payload, {rounds} rounds",
        a[1],
        payloads.len(),
        mb
    );
    println!("| deflate | CPU s/MB | CPU vs libdeflate 1 | size / payload | size vs libdeflate 1 |\n|---|---:|---:|---:|---:|");
    for (i, (name, _)) in ld.iter().enumerate() {
        let m = med(&times[i]);
        println!(
            "| {name} | {:.5} | {:.2}x | {:.4} | {:+.2}% |",
            m / mb,
            m / base,
            sizes[i] as f64 / raw as f64,
            100.0 * (sizes[i] as f64 / sizes[0] as f64 - 1.0)
        );
    }
}
