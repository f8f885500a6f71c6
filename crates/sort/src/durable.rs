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
