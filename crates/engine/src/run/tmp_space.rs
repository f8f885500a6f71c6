//! The pre-flight check of temporary space: from the inputs' sizes, the run files a sort will write, refused at the start when the temporary directory's filesystem lacks the room.
//!
//! The estimate: each input's record bytes (a BAM's from its BGZF blocks'
//! own sizes, a SAM's from its length), times what a run file takes per
//! record byte ([`RUN_BYTES_PER_RAW`]), less the last chunk, which stays in
//! memory. Inputs whose record bytes cannot be told from their length
//! (standard input, CRAM, plain gzip) make the check pass over them: they
//! add nothing to the estimate, and the sorter's own check before each
//! spill remains (`alnsort_sort`'s `NoSpace`).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// Run-file bytes per byte of BAM record data, with a margin: zstd level
/// 1 frames of the records with their keys and lengths measured 0.45 of
/// the records' bytes on the coordinate-sorted benchmark BAM (154.2 bytes
/// per 343-byte record, `cargo run --release -p alnsort-sort --example
/// codec_compare`) and 0.44 on its 4x copy (362 MB of runs for 2.38 M
/// records spilled, bench/results/2026-12-07-regime.md). With the
/// records' fields apart in each frame (`alnsort_sort`'s fields.rs) the 4x
/// copy's runs are 0.42 of their raw bytes at `-m 100M` and 0.26 at `-m
/// 256M` (bench/results/2026-12-07-run-fields.md); 0.5 is kept as the
/// bound for data that compresses less (other instruments' qualities,
/// records that are not BAM and stay whole).
const RUN_BYTES_PER_RAW: f64 = 0.5;

/// BAM record bytes per byte of SAM text: the benchmark BAM's records are
/// 222.5 MB decoded, its `samtools view -h` text 282.3 MB (0.788).
const BAM_PER_SAM_BYTE: f64 = 0.79;

/// Bytes of a BGZF file read to find its inflation ratio: enough blocks
/// (about 64 KiB of records each) for a stable mean, at no cost.
const SAMPLE_BYTES: usize = 4 << 20;

/// What a sort is estimated to need in its temporary directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Record bytes the inputs are estimated to hold.
    pub record_bytes: u64,
    /// Run-file bytes the sort is estimated to write and hold at once.
    pub needed: u64,
    /// Inputs passed over (size unknown from their length), by name.
    pub unknown: Vec<String>,
}

/// Estimates the temporary space of sorting `inputs` with a sorter budget
/// of `budget` bytes (what stays in memory is half of it, at least).
pub fn estimate(inputs: &[String], budget: u64) -> Estimate {
    let mut record_bytes = 0u64;
    let mut unknown = Vec::new();
    for input in inputs {
        match record_bytes_of(Path::new(input)) {
            Some(b) => record_bytes += b,
            None => unknown.push(input.clone()),
        }
    }
    let spilled = record_bytes.saturating_sub(budget / 2);
    Estimate {
        record_bytes,
        needed: (spilled as f64 * RUN_BYTES_PER_RAW) as u64,
        unknown,
    }
}

/// Checks that the filesystem of `dir` has the room [`estimate`] gives;
/// a refusal names the directory, what the sort needs and what it has.
pub fn check(inputs: &[String], budget: u64, dir: &Path) -> Result<Estimate> {
    let est = estimate(inputs, budget);
    if est.needed == 0 {
        return Ok(est);
    }
    let available = alnsort_sort::plan::free_space(dir).map_err(|e| {
        Error::Refused(format!(
            "cannot tell the free space of the temporary directory {}: {e} (--no-tmp-space-check skips this check)",
            dir.display()
        ))
    })?;
    if available < est.needed {
        let human = crate::options::memsize::human;
        return Err(Error::Refused(format!(
            "not enough temporary space in {}: this sort needs about {} there (run files for about {} of records, \
             estimated from the inputs' sizes) and the filesystem has {} free; free some, give another directory \
             with -T, or skip this check with --no-tmp-space-check",
            dir.display(),
            human(est.needed),
            human(est.record_bytes),
            human(available),
        )));
    }
    Ok(est)
}

/// Record bytes of one input told from its length, or `None`.
fn record_bytes_of(path: &Path) -> Option<u64> {
    if path.as_os_str() == "-" {
        return None;
    }
    let mut file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let size = meta.len();
    let mut head = vec![0u8; SAMPLE_BYTES.min(size as usize)];
    file.read_exact(&mut head).ok()?;
    if head.starts_with(b"CRAM") {
        return None;
    }
    if !head.starts_with(&[0x1f, 0x8b]) {
        // Plain SAM text.
        return Some((size as f64 * BAM_PER_SAM_BYTE) as u64);
    }
    let (inflated, deflated, sam) = bgzf_sample(&head)?;
    let raw = size as f64 * inflated as f64 / deflated.max(1) as f64;
    Some((if sam { raw * BAM_PER_SAM_BYTE } else { raw }) as u64)
}

/// The inflated and compressed bytes of the whole BGZF blocks at the start
/// of `head`, and whether they hold SAM text (the first block's first
/// inflated bytes are not BAM's magic); `None` when `head` is not BGZF.
fn bgzf_sample(head: &[u8]) -> Option<(u64, u64, bool)> {
    let (mut at, mut inflated, mut deflated) = (0usize, 0u64, 0u64);
    let mut sam = None;
    while at + 18 <= head.len() {
        let h = &head[at..];
        // gzip with FEXTRA, and BGZF's "BC" subfield first (as htslib writes it).
        if h[..4] != [0x1f, 0x8b, 8, 4] || h[12..14] != *b"BC" {
            break;
        }
        let bsize = usize::from(u16::from_le_bytes([h[16], h[17]])) + 1;
        if at + bsize > head.len() || bsize < 26 {
            break;
        }
        let isize = u32::from_le_bytes(h[bsize - 4..bsize].try_into().ok()?);
        if sam.is_none() && isize > 0 {
            let mut first = [0u8; 4];
            let mut d = flate2::read::DeflateDecoder::new(&h[18..bsize - 8]);
            sam = Some(d.read_exact(&mut first).is_err() || first != *b"BAM\x01");
        }
        inflated += u64::from(isize);
        deflated += bsize as u64;
        at += bsize;
    }
    (deflated > 0).then_some((inflated, deflated, sam.unwrap_or(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory of this test process.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("alnsort-tmp-space-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// One BGZF block of `data` (flate2's deflate, as a test needs).
    fn block(data: &[u8]) -> Vec<u8> {
        let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut d, data).unwrap();
        let body = d.finish().unwrap();
        let bsize = 18 + body.len() + 8;
        let mut b = vec![
            0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 0xff, 6, 0, b'B', b'C', 2, 0,
        ];
        b.extend_from_slice(&((bsize - 1) as u16).to_le_bytes());
        b.extend_from_slice(&body);
        b.extend_from_slice(&0u32.to_le_bytes()); // the CRC: the sample does not read it
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b
    }

    #[test]
    fn a_bgzf_sample_counts_whole_blocks_and_tells_bam_from_sam() {
        for (magic, sam) in [(&b"BAM\x01rest"[..], false), (&b"@HD\tVN:1.6\n"[..], true)] {
            let mut file = block(magic);
            file.extend(block(&[b'A'; 60_000]));
            let whole = file.len() as u64;
            // A block cut short at the end of the sample is not counted.
            let cut = block(&[b'C'; 1000]);
            file.extend_from_slice(&cut[..cut.len() - 3]);
            let (inflated, deflated, got) = bgzf_sample(&file).expect("bgzf");
            assert_eq!(inflated, (magic.len() + 60_000) as u64);
            assert_eq!(deflated, whole);
            assert_eq!(got, sam);
        }
        assert_eq!(
            bgzf_sample(b"@HD\tVN:1.6\n plain text, not BGZF at all"),
            None
        );
    }

    #[test]
    fn unknown_inputs_add_nothing_and_a_small_input_needs_nothing() {
        let dir = scratch("unknown");
        let cram = dir.join("x.cram");
        std::fs::write(&cram, b"CRAM\x03\x00").unwrap();
        let sam = dir.join("x.sam");
        std::fs::write(&sam, vec![b'x'; 1000]).unwrap();
        let inputs = [
            "-".to_string(),
            cram.display().to_string(),
            sam.display().to_string(),
        ];
        let est = estimate(&inputs, 1 << 20);
        assert_eq!(est.unknown, inputs[..2].to_vec());
        assert_eq!(est.record_bytes, 790);
        assert_eq!(est.needed, 0);
        let est = estimate(&inputs[2..], 0);
        assert_eq!(est.needed, (790.0 * RUN_BYTES_PER_RAW) as u64);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn more_than_the_filesystem_has_is_refused_naming_the_directory() {
        let dir = scratch("refused");
        let sam = dir.join("x.sam");
        let file = File::create(&sam).unwrap();
        // A sparse file of 8 TiB (ext4 files stop at 16 TiB): more than is free here.
        file.set_len(1 << 43).unwrap();
        let err =
            check(&[sam.display().to_string()], 1 << 20, &dir).expect_err("2 TiB and more of runs");
        let text = err.to_string();
        assert!(text.contains("not enough temporary space in"), "{text}");
        assert!(text.contains(&dir.display().to_string()), "{text}");
        assert!(text.contains("--no-tmp-space-check"), "{text}");
        // The same input within what the filesystem has passes.
        file.set_len(1 << 20).unwrap();
        let est = check(&[sam.display().to_string()], 1 << 10, &dir).expect("1 MiB fits");
        assert!(est.needed > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
