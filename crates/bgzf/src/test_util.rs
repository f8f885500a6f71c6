//! Helpers shared by the reader and writer tests: pools, deterministic data,
//! hand-built BGZF files, and a few `Read`/`Write` impls with behaviour
//! (failing, endless, reporting on drop).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::block::{deflate_block, CompressionLevel, EOF_BLOCK};

pub(crate) fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool"),
    )
}

/// xorshift bytes: deterministic, barely compressible.
pub(crate) fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    seed |= 1;
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// BAM-like bytes: repetitive text with some noise, compresses about 3x.
pub(crate) fn bam_like(len: usize) -> Vec<u8> {
    let noise = noise(len / 4 + 1, 9);
    let mut out = Vec::with_capacity(len);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(b"read_");
        out.extend_from_slice(&noise[i % noise.len()..][..1]);
        out.extend_from_slice(b"ACGTACGGTTCAGGCA\x1e\x1e\x1f\x22\x23");
        out.extend_from_slice(&noise[(i * 7) % noise.len()..][..1]);
        i += 1;
    }
    out.truncate(len);
    out
}

/// One block per payload, then the EOF block. Returns the file and the
/// compressed offset of each payload's block.
pub(crate) fn blocks_file(payloads: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
    let level = CompressionLevel::default();
    let mut c = level.compressor();
    let mut file = Vec::new();
    let mut offsets = Vec::new();
    let mut block = Vec::new();
    for payload in payloads {
        deflate_block(payload, level, &mut block, &mut c).expect("payload fits");
        offsets.push(file.len() as u64);
        file.extend_from_slice(&block);
    }
    file.extend_from_slice(&EOF_BLOCK);
    (file, offsets)
}

/// A `Write` that accepts `limit` bytes, then fails with `kind`.
#[derive(Debug)]
pub(crate) struct FailAfter {
    pub(crate) limit: usize,
    pub(crate) written: usize,
    pub(crate) kind: io::ErrorKind,
}

impl Write for FailAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written >= self.limit {
            return Err(io::Error::new(self.kind, "simulated write failure"));
        }
        let n = buf.len().min(self.limit - self.written);
        self.written += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Endless valid BGZF: the same block over and over. Sets `dropped` when
/// dropped, so a test can see that the reader thread has let go of it.
pub(crate) struct Endless {
    pub(crate) block: Vec<u8>,
    pub(crate) at: usize,
    pub(crate) dropped: Arc<AtomicBool>,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = &self.block[self.at..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.at = (self.at + n) % self.block.len();
        Ok(n)
    }
}

impl Drop for Endless {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Runs `python3 -c script args...`, failing loudly if python3 is missing.
pub(crate) fn python(script: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 must be installed to run the htslib interop tests")
}

/// A fresh path in the system temp dir for this process and `name`.
pub(crate) fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("alnsort-bgzf-test-{}-{name}", std::process::id()))
}
