//! Runs kept for a resumed sort: the hook a finished spill calls, a run file read back into a sorter, and the byte checksum of a file.
//!
//! A resumable caller (`alnsort sort --resume DIR`) registers a
//! [`RunHook`] with [`crate::Sorter::set_durable`]: each spill, once its
//! run file is complete, calls it on the spill thread with the run's path
//! and the input records it and the earlier runs hold, before the sorter
//! takes the run. The caller makes the file durable elsewhere (a hard
//! link, fsync) and records it. A later sorter takes such files back, in
//! input order and before any record is pushed, with
//! [`crate::Sorter::adopt_run`]: equal keys then still come out in input
//! order, as the final merge puts earlier runs' records first.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Result, SortError};
use crate::runfile::{FrameHeader, FrameInfo, RunMeta, TempRun, HEADER_LEN, MAGIC, METHOD_END};
use crate::runread::{decode, entry_at, StoredFrame};

/// A finished spill's run, as its [`RunHook`] sees it.
#[derive(Debug)]
pub struct SpilledRun<'a> {
    /// The run file, in the sorter's temp directory (deleted once merged
    /// away: keep a hard link or a copy).
    pub path: &'a Path,
    /// Records in the run.
    pub records: u64,
    /// Records of the input held by this run and every run before it:
    /// the input is durable up to this record (0-based, exclusive).
    pub records_end: u64,
}

/// What a resumable caller does with each finished spill (see the module
/// documentation). An error fails the spill, and so the sort.
pub type RunHook = Arc<
    dyn Fn(&SpilledRun<'_>) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>
        + Send
        + Sync,
>;

/// Reads a complete run file at `path` back: every frame checked and
/// decoded once (its CRC, its entry count), the frame index rebuilt.
/// The file becomes the sorter's (deleted when merged away).
pub(crate) fn read_back(path: PathBuf) -> Result<(TempRun, RunMeta)> {
    let not_run = |reason: String| SortError::NotARun {
        path: path.clone(),
        reason,
    };
    let mut file = File::open(&path).map_err(|source| SortError::Read {
        path: path.clone(),
        offset: 0,
        source,
    })?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| SortError::Read {
            path: path.clone(),
            offset: 0,
            source,
        })?;
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(not_run("no run-file magic".into()));
    }
    let mut at = MAGIC.len();
    let mut index = Vec::new();
    let mut meta = RunMeta::default();
    let mut raw = Vec::new();
    loop {
        let Some(head) = bytes.get(at..at + HEADER_LEN) else {
            return Err(not_run(format!(
                "the file ends at byte {} before its end marker (truncated)",
                bytes.len()
            )));
        };
        let header_bytes: [u8; HEADER_LEN] = head.try_into().expect("HEADER_LEN bytes");
        let header = FrameHeader::decode(&header_bytes);
        if header.method == METHOD_END {
            if header_bytes != FrameHeader::end() || at + HEADER_LEN != bytes.len() {
                return Err(not_run(format!("bad end marker at byte {at}")));
            }
            at += HEADER_LEN;
            break;
        }
        let start = at + HEADER_LEN;
        let Some(payload) = bytes.get(start..start + header.stored_len as usize) else {
            return Err(not_run(format!(
                "the frame at byte {at} runs past the end of the file (truncated)"
            )));
        };
        let frame = decode(
            StoredFrame {
                offset: at as u64,
                header,
                header_bytes,
                payload: payload.to_vec(),
            },
            std::mem::take(&mut raw),
            &path,
        )?;
        let (key, _) =
            entry_at(&frame.raw, 0).map_err(|e| not_run(format!("frame at byte {at}: {e}")))?;
        index.push(FrameInfo {
            offset: at as u64,
            len: (HEADER_LEN + payload.len()) as u32,
            raw_len: header.raw_len,
            entries: header.entries,
            first_key: frame.raw[key].into(),
        });
        meta.records += u64::from(header.entries);
        meta.raw_bytes += u64::from(header.raw_len);
        meta.frames += 1;
        raw = frame.raw;
        at = start + payload.len();
    }
    meta.file_bytes = at as u64;
    Ok((TempRun::adopt(path, index), meta))
}

/// The length and CRC-32 (crc32fast) of the bytes of the file at `path`.
pub fn file_crc32(path: &Path) -> io::Result<(u64, u32)> {
    let mut file = File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, hasher.finalize()))
}

/// The CRC-32 of `bytes` (the same checksum as [`file_crc32`]).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{pool, XorShift64};
    use crate::{KeyKind, SortConfig, Sorter};
    use std::sync::Mutex;

    fn config(dir: &Path, budget: usize) -> SortConfig {
        SortConfig {
            memory_budget: budget,
            temp_dir: dir.to_path_buf(),
            key_kind: KeyKind::Variable,
            max_open_runs: 4,
            merge_partition_bytes: 0,
            chunk_fill: Default::default(),
            expected_bytes: 0,
        }
    }

    /// Keys from a small alphabet (many ties); each record is its input
    /// index, so the stable order is known.
    fn input(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rng = XorShift64::new(39);
        (0..n)
            .map(|i| {
                let key = format!("k{:02}", rng.next_u64() % 17).into_bytes();
                let mut rec = (i as u64).to_le_bytes().to_vec();
                rec.resize(40 + (rng.next_u64() % 60) as usize, b'x');
                (key, rec)
            })
            .collect()
    }

    fn drain(sorter: Sorter) -> Vec<Vec<u8>> {
        let mut merged = sorter.finish().expect("finish");
        let mut out = Vec::new();
        while let Some(r) = merged.next_record().expect("next") {
            out.push(r.to_vec());
        }
        out
    }

    /// A sort whose kept runs (linked out by the hook) are adopted by a
    /// second sorter, which is pushed only the records after them, gives
    /// the records of one uninterrupted sort, ties in input order; the
    /// hook sees whole runs whose records add up to its `records_end`.
    #[test]
    fn adopted_runs_and_the_rest_give_the_uninterrupted_order() {
        let data = input(40_000);
        let whole_dir = tempfile::tempdir().unwrap();
        let mut whole = Sorter::new(config(whole_dir.path(), 256 << 10), pool(2)).unwrap();
        for (k, r) in &data {
            whole.push(k, r).unwrap();
        }
        let want = drain(whole);

        let keep = tempfile::tempdir().unwrap();
        let first_dir = tempfile::tempdir().unwrap();
        let kept: Arc<Mutex<Vec<(PathBuf, u64, u64)>>> = Arc::default();
        let (k2, keep_path) = (Arc::clone(&kept), keep.path().to_path_buf());
        let hook: RunHook = Arc::new(move |run: &SpilledRun<'_>| {
            let mut k = k2.lock().unwrap();
            let to = keep_path.join(format!("kept-{}", k.len()));
            std::fs::hard_link(run.path, &to)?;
            k.push((to, run.records, run.records_end));
            Ok(())
        });
        let mut first = Sorter::new(config(first_dir.path(), 256 << 10), pool(2)).unwrap();
        first.set_durable(hook, false);
        // "Killed" two thirds of the way through: the sorter is dropped.
        for (k, r) in &data[..data.len() * 2 / 3] {
            first.push(k, r).unwrap();
        }
        drop(first);
        let kept = kept.lock().unwrap().clone();
        assert!(kept.len() >= 3, "{} runs kept", kept.len());
        let mut sum = 0;
        for (_, records, end) in &kept {
            sum += records;
            assert_eq!(sum, *end);
        }

        let second_dir = tempfile::tempdir().unwrap();
        let mut second = Sorter::new(config(second_dir.path(), 96 << 10), pool(3)).unwrap();
        let mut held = 0;
        for (i, (path, _, _)) in kept.iter().enumerate() {
            let to = second_dir.path().join(format!("adopted-{i}"));
            std::fs::hard_link(path, &to).unwrap();
            held += second.adopt_run(to).unwrap();
        }
        assert_eq!(held, sum);
        for (k, r) in &data[held as usize..] {
            second.push(k, r).unwrap();
        }
        assert_eq!(drain(second), want);
    }

    #[test]
    fn a_cut_or_flipped_run_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let kept: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
        let (k2, keep) = (Arc::clone(&kept), dir.path().join("kept"));
        std::fs::create_dir(&keep).unwrap();
        let hook: RunHook = Arc::new(move |run: &SpilledRun<'_>| {
            let mut k = k2.lock().unwrap();
            let to = keep.join(format!("kept-{}", k.len()));
            std::fs::copy(run.path, &to)?;
            k.push(to);
            Ok(())
        });
        let mut s = Sorter::new(config(dir.path(), 256 << 10), pool(1)).unwrap();
        s.set_durable(hook, true);
        for (k, r) in &input(5_000) {
            s.push(k, r).unwrap();
        }
        drop(drain(s));
        let path = kept.lock().unwrap()[0].clone();
        let bytes = std::fs::read(&path).unwrap();
        let (len, crc) = file_crc32(&path).unwrap();
        assert_eq!((len, crc), (bytes.len() as u64, crc32(&bytes)));
        assert!(read_back(path.clone()).is_ok());
        let cut = dir.path().join("cut");
        std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
        let e = read_back(cut).unwrap_err().to_string();
        assert!(e.contains("truncated") || e.contains("end marker"), "{e}");
        let mut flipped = bytes.clone();
        flipped[bytes.len() / 2] ^= 1;
        let f = dir.path().join("flipped");
        std::fs::write(&f, &flipped).unwrap();
        assert!(read_back(f).is_err());
    }
}
