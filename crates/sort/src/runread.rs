//! Reading a run file back as a merge source.
//!
//! The reader is double-buffered: while the merge walks the entries of one
//! frame, the next frame's bytes have already been read and are being
//! checked and decompressed on the pool. The file read itself stays on the
//! merging thread, so frames arrive in order without any reordering logic.
//!
//! Invariants: every frame is CRC-checked before it is decompressed, and a
//! frame must decode to exactly the entry count its header claims; any
//! mismatch is `SortError::CorruptRun` naming the file and the frame's byte
//! offset. A file that ends before its end marker is corrupt (truncated).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use alnsort_pipeline::varint::{self, VarintError};
use alnsort_pipeline::{spawn, Slot};
use rayon::ThreadPool;

use crate::error::{Result, SortError};
use crate::loser::MergeSource;
use crate::meter::{Charge, Meter};
use crate::runfile::{
    frame_crc, max_stored_len, resize_exact, set_len_for_overwrite, FrameHeader, FrameInfo,
    TempRun, HEADER_LEN, MAGIC, METHOD_END, METHOD_LZ4, METHOD_STORED, METHOD_ZSTD,
    METHOD_ZSTD_FIELDS,
};

thread_local! {
    /// Each pool thread's zstd decompression context, made once.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// Each pool thread's buffer for a frame's fields apart, decompressed
    /// before they are joined into the frame's entries.
    static APART: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Decompresses one zstd frame into `raw` (exactly as long as it must
/// give); the bytes it gave, or why not.
fn zstd_decompress(payload: &[u8], raw: &mut [u8]) -> std::result::Result<usize, String> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        d.as_mut()
            .expect("made above")
            .decompress_to_buffer(payload, raw)
            .map_err(|e| e.to_string())
    })
}

/// A frame as read from disk, before checking.
pub(crate) struct StoredFrame {
    pub(crate) offset: u64,
    pub(crate) header: FrameHeader,
    pub(crate) header_bytes: [u8; HEADER_LEN],
    pub(crate) payload: Vec<u8>,
}

/// A checked, decompressed frame.
pub(crate) struct Frame {
    pub(crate) offset: u64,
    pub(crate) entries: u32,
    pub(crate) raw: Vec<u8>,
    /// The payload buffer, returned for reuse.
    pub(crate) payload: Vec<u8>,
}

/// A sorted run being read back.
pub(crate) struct RunReader {
    /// Deleted when the reader is dropped or reaches the end marker.
    run: Option<TempRun>,
    path: PathBuf,
    file: File,
    /// File offset of the next frame header to read.
    next_offset: u64,
    pool: Arc<ThreadPool>,
    /// The frame being walked.
    frame: Frame,
    pos: usize,
    left: u32,
    /// The next frame, being decoded on the pool; `None` after the end.
    prefetch: Option<Slot<Result<Frame>>>,
    /// Capacity of the buffers the frame in `prefetch` holds once decoded.
    prefetch_bytes: usize,
    /// Buffers of frames already walked, for reuse.
    spare_raw: Vec<Vec<u8>>,
    spare_payload: Vec<Vec<u8>>,
    key: Range<usize>,
    record: Range<usize>,
    exhausted: bool,
    /// The reader ends before the first entry whose key is `>=` this.
    end: Option<Box<[u8]>>,
    charge: Charge,
    /// Test seam: decoding jobs started from now on panic.
    #[cfg(test)]
    pub(crate) panic_in_decode: bool,
}

impl RunReader {
    /// Opens a finished run and positions it on its first entry. The reader
    /// owns the run and deletes it once it has read it to the end.
    pub(crate) fn open(run: TempRun, pool: Arc<ThreadPool>, meter: &Arc<Meter>) -> Result<Self> {
        Self::open_range(run, pool, meter, None, None)
    }

    /// Opens a finished run on its first entry whose key is `>= start`,
    /// ending before the first whose key is `>= end` (`None`: the run's
    /// start or end). Reading starts at the frame the run's index says may
    /// hold the first such key, so the entries before it are not read.
    pub(crate) fn open_range(
        run: TempRun,
        pool: Arc<ThreadPool>,
        meter: &Arc<Meter>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<Self> {
        let first_frame = start.map_or(0, |lo| {
            run.index()
                .partition_point(|f| &*f.first_key < lo)
                .saturating_sub(1)
        });
        let offset = run
            .index()
            .get(first_frame)
            .map_or(MAGIC.len() as u64, |f| f.offset);
        let path = run.path().to_path_buf();
        let mut file = File::open(&path).map_err(|source| SortError::Read {
            path: path.clone(),
            offset: 0,
            source,
        })?;
        let mut magic = [0u8; 8];
        let complete = read_full(&mut file, &mut magic).map_err(|source| SortError::Read {
            path: path.clone(),
            offset: 0,
            source,
        })?;
        if !complete || &magic != MAGIC {
            return Err(SortError::CorruptRun {
                path,
                offset: 0,
                reason: "not a run file (bad magic)".into(),
            });
        }
        if offset != MAGIC.len() as u64 {
            file.seek(SeekFrom::Start(offset))
                .map_err(|source| SortError::Read {
                    path: path.clone(),
                    offset,
                    source,
                })?;
        }
        let mut reader = RunReader {
            run: Some(run),
            path,
            file,
            next_offset: offset,
            pool,
            frame: Frame {
                offset: 0,
                entries: 0,
                raw: Vec::new(),
                payload: Vec::new(),
            },
            pos: 0,
            left: 0,
            prefetch: None,
            prefetch_bytes: 0,
            spare_raw: Vec::new(),
            spare_payload: Vec::new(),
            key: 0..0,
            record: 0..0,
            exhausted: false,
            end: None,
            charge: Charge::new(meter),
            #[cfg(test)]
            panic_in_decode: false,
        };
        reader.prefetch = reader.start_next()?;
        reader.advance()?;
        if let Some(lo) = start {
            while reader.key().is_some_and(|k| k < lo) {
                reader.advance()?;
            }
        }
        // Set after the skip, so a range whose end is before its start is
        // empty rather than read from the run's start.
        reader.end = end.map(Box::from);
        reader.check_end();
        Ok(reader)
    }

    /// Reads the next frame's bytes and starts its decoding on the pool;
    /// `None` at the end marker.
    fn start_next(&mut self) -> Result<Option<Slot<Result<Frame>>>> {
        self.prefetch_bytes = 0;
        let Some(stored) = self.read_stored()? else {
            return Ok(None);
        };
        let path = self.path.clone();
        let raw = self.spare_raw.pop().unwrap_or_default();
        // `decode` sizes `raw` with `resize_exact`, so this is its capacity.
        self.prefetch_bytes =
            raw.capacity().max(stored.header.raw_len as usize) + stored.payload.capacity();
        #[cfg(test)]
        let panics = self.panic_in_decode;
        Ok(Some(spawn(&self.pool, move || {
            #[cfg(test)]
            assert!(!panics, "injected run frame decompression panic");
            decode(stored, raw, &path)
        })))
    }

    /// Reads one frame header and payload from the file.
    fn read_stored(&mut self) -> Result<Option<StoredFrame>> {
        let offset = self.next_offset;
        let corrupt = |reason: &str| SortError::CorruptRun {
            path: self.path.clone(),
            offset,
            reason: reason.to_string(),
        };
        let mut header_bytes = [0u8; HEADER_LEN];
        let complete =
            read_full(&mut self.file, &mut header_bytes).map_err(|source| SortError::Read {
                path: self.path.clone(),
                offset,
                source,
            })?;
        if !complete {
            return Err(corrupt(
                "file ends without the end-of-run marker (truncated)",
            ));
        }
        let header = FrameHeader::decode(&header_bytes);
        if header.method == METHOD_END {
            if header.raw_len != 0
                || header.stored_len != 0
                || header.crc != frame_crc(&header_bytes, &[])
            {
                return Err(corrupt("damaged end-of-run marker"));
            }
            return Ok(None);
        }
        if header.stored_len as usize > max_stored_len(header.raw_len as usize) {
            return Err(corrupt("stored length exceeds what its raw length allows"));
        }
        let mut payload = self.spare_payload.pop().unwrap_or_default();
        resize_exact(&mut payload, header.stored_len as usize);
        let complete =
            read_full(&mut self.file, &mut payload).map_err(|source| SortError::Read {
                path: self.path.clone(),
                offset: offset + HEADER_LEN as u64,
                source,
            })?;
        if !complete {
            return Err(corrupt("file ends inside a frame (truncated)"));
        }
        self.next_offset = offset + (HEADER_LEN + payload.len()) as u64;
        Ok(Some(StoredFrame {
            offset,
            header,
            header_bytes,
            payload,
        }))
    }

    /// Makes the prefetched frame current and prefetches the one after it.
    /// Returns `false` at the end of the run.
    fn next_frame(&mut self) -> Result<bool> {
        let Some(slot) = self.prefetch.take() else {
            return Ok(false);
        };
        let frame = slot.wait(&self.pool, "run frame decompression")??;
        let old = std::mem::replace(&mut self.frame, frame);
        self.spare_raw.push(old.raw);
        self.spare_payload.push(old.payload);
        self.pos = 0;
        self.left = self.frame.entries;
        self.prefetch = self.start_next()?;
        // The current frame, the next one in flight on the pool (if any),
        // and spares (after the last frame, the buffers of the one before).
        let held = self.frame.raw.capacity()
            + self.frame.payload.capacity()
            + self.prefetch_bytes
            + self
                .spare_raw
                .iter()
                .chain(&self.spare_payload)
                .map(Vec::capacity)
                .sum::<usize>();
        self.charge.set(held);
        Ok(true)
    }

    fn corrupt(&self, reason: &str) -> SortError {
        SortError::CorruptRun {
            path: self.path.clone(),
            offset: self.frame.offset,
            reason: reason.to_string(),
        }
    }
}

impl MergeSource for RunReader {
    fn key(&self) -> Option<&[u8]> {
        (!self.exhausted).then(|| &self.frame.raw[self.key.clone()])
    }

    fn record(&self) -> &[u8] {
        &self.frame.raw[self.record.clone()]
    }

    fn advance(&mut self) -> Result<()> {
        while self.left == 0 {
            if self.pos != self.frame.raw.len() {
                return Err(self.corrupt("frame has bytes after its last entry"));
            }
            if !self.next_frame()? {
                self.exhausted = true;
                self.charge.set(0);
                self.run = None; // merged away: delete it now
                return Ok(());
            }
        }
        let (key, record) = entry_at(&self.frame.raw, self.pos).map_err(|r| self.corrupt(r))?;
        self.pos = record.end;
        self.key = key;
        self.record = record;
        self.left -= 1;
        self.check_end();
        Ok(())
    }
}

impl RunReader {
    /// Ends the reader at an entry past its range's end.
    fn check_end(&mut self) {
        if let Some(end) = &self.end {
            if !self.exhausted && self.frame.raw[self.key.clone()] >= **end {
                self.exhausted = true;
                self.charge.set(0);
            }
        }
    }
}

/// Checks and decompresses a frame (runs on the pool).
pub(crate) fn decode(
    stored: StoredFrame,
    mut raw: Vec<u8>,
    path: &std::path::Path,
) -> Result<Frame> {
    let StoredFrame {
        offset,
        header,
        header_bytes,
        payload,
    } = stored;
    let corrupt = |reason: String| SortError::CorruptRun {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let crc = frame_crc(&header_bytes, &payload);
    if crc != header.crc {
        return Err(corrupt(format!(
            "checksum mismatch (header says {:#010x}, data gives {crc:#010x})",
            header.crc
        )));
    }
    let raw_len = header.raw_len as usize;
    // The payload's zstd frame into `buf`, which must come to `len` bytes.
    let unzstd = |buf: &mut Vec<u8>, len: usize| -> Result<()> {
        set_len_for_overwrite(buf, len);
        let n =
            zstd_decompress(&payload, buf).map_err(|e| corrupt(format!("bad zstd data: {e}")))?;
        if n != len {
            return Err(corrupt(format!(
                "zstd data gives {n} bytes, header says {len}"
            )));
        }
        Ok(())
    };
    match header.method {
        METHOD_STORED if payload.len() == raw_len => {
            raw.clear();
            raw.reserve_exact(raw_len);
            raw.extend_from_slice(&payload);
        }
        METHOD_STORED => return Err(corrupt("stored frame length mismatch".into())),
        METHOD_LZ4 => {
            set_len_for_overwrite(&mut raw, raw_len);
            let n = lz4_flex::block::decompress_into(&payload, &mut raw)
                .map_err(|e| corrupt(format!("bad LZ4 data: {e}")))?;
            if n != raw_len {
                return Err(corrupt(format!(
                    "LZ4 data gives {n} bytes, header says {raw_len}"
                )));
            }
        }
        METHOD_ZSTD => unzstd(&mut raw, raw_len)?,
        METHOD_ZSTD_FIELDS => {
            let joined = APART.with(|a| -> Result<()> {
                let mut a = a.borrow_mut();
                unzstd(&mut a, raw_len + crate::fields::LENS_BYTES)?;
                crate::fields::join(&a, &mut raw).map_err(|e| corrupt(e.to_string()))?;
                if raw.len() != raw_len {
                    return Err(corrupt(format!(
                        "fields-apart frame gives {} bytes, header says {raw_len}",
                        raw.len()
                    )));
                }
                Ok(())
            });
            joined?;
        }
        m => return Err(corrupt(format!("unknown frame method {m}"))),
    }
    Ok(Frame {
        offset,
        entries: header.entries,
        raw,
        payload,
    })
}

/// The key and record ranges of the entry starting at `pos` of a frame's
/// raw bytes (`key_len:varint key rec_len:varint record`), or why it is
/// malformed.
pub(crate) fn entry_at(
    raw: &[u8],
    pos: usize,
) -> std::result::Result<(Range<usize>, Range<usize>), &'static str> {
    let field = |at: usize| {
        let (len, used) = varint::get(raw.get(at..).unwrap_or_default()).map_err(|e| match e {
            VarintError::Truncated => "length varint cut short",
            VarintError::Overlong => "overlong length varint",
        })?;
        let start = at + used;
        usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= raw.len())
            .map(|end| start..end)
            .ok_or("entry runs past the end of its frame")
    };
    let key = field(pos)?;
    let record = field(key.end)?;
    Ok((key, record))
}

/// Reads, checks and decompresses the frame `info` points at, by position
/// (`pread`), so that several threads can read one run at once. `raw` and
/// `stored` are buffers to reuse; returns the frame's raw bytes and the
/// stored buffer. The frame must hold the entry count the run's index
/// recorded.
pub(crate) fn read_frame_at(
    file: &File,
    path: &Path,
    info: &FrameInfo,
    raw: Vec<u8>,
    mut stored: Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let corrupt = |reason: &str| SortError::CorruptRun {
        path: path.to_path_buf(),
        offset: info.offset,
        reason: reason.to_string(),
    };
    let len = info.len as usize;
    if len < HEADER_LEN {
        return Err(corrupt("frame shorter than its header"));
    }
    let mut header_bytes = [0u8; HEADER_LEN];
    resize_exact(&mut stored, len - HEADER_LEN);
    let read = |buf: &mut [u8], at: u64| {
        file.read_exact_at(buf, at)
            .map_err(|source| match source.kind() {
                io::ErrorKind::UnexpectedEof => corrupt("file ends inside a frame (truncated)"),
                _ => SortError::Read {
                    path: path.to_path_buf(),
                    offset: at,
                    source,
                },
            })
    };
    read(&mut header_bytes, info.offset)?;
    read(&mut stored, info.offset + HEADER_LEN as u64)?;
    let header = FrameHeader::decode(&header_bytes);
    if header.stored_len as usize != stored.len()
        || header.entries != info.entries
        || header.raw_len != info.raw_len
    {
        return Err(corrupt("frame header disagrees with the run's index"));
    }
    let frame = StoredFrame {
        offset: info.offset,
        header,
        header_bytes,
        payload: stored,
    };
    let frame = decode(frame, raw, path)?;
    Ok((frame.raw, frame.payload))
}

/// `read_exact` that reports a clean or partial EOF as `Ok(false)`.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runfile::RunMeta;
    use crate::test_support::pool;
    use std::fs::OpenOptions;
    use std::io::{Seek, SeekFrom, Write};

    /// Writes `entries` as a run with tiny frames; returns the run.
    fn write_run(
        dir: &std::path::Path,
        entries: &[(Vec<u8>, Vec<u8>)],
        frame: usize,
    ) -> (TempRun, RunMeta) {
        let meter = Arc::new(Meter::default());
        let out = TempRun::create(dir, &mut 0).expect("create");
        let mut writer =
            crate::runfile::RunWriter::new(out, pool(2), frame, &meter).expect("writer");
        for (k, r) in entries {
            writer.push(k, r).expect("push");
        }
        writer.finish().expect("finish")
    }

    fn read_run(run: TempRun) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let meter = Arc::new(Meter::default());
        let mut reader = RunReader::open(run, pool(2), &meter)?;
        let mut out = Vec::new();
        while let Some(key) = reader.key() {
            out.push((key.to_vec(), reader.record().to_vec()));
            reader.advance()?;
        }
        Ok(out)
    }

    fn sample(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let key = (i as u64 / 3).to_be_bytes().to_vec();
                // Compressible and incompressible records, some empty, one
                // larger than a frame.
                let len = if i == 7 { 5000 } else { i % 300 };
                let rec: Vec<u8> = (0..len).map(|j| ((i * 31 + j * j) % 251) as u8).collect();
                (key, rec)
            })
            .collect()
    }

    /// The frame methods of a run file, in order (end marker included).
    fn methods(path: &std::path::Path) -> Vec<u8> {
        let bytes = std::fs::read(path).expect("read");
        let mut at = MAGIC.len();
        let mut out = Vec::new();
        while at + HEADER_LEN <= bytes.len() {
            let h = FrameHeader::decode(bytes[at..at + HEADER_LEN].try_into().expect("header"));
            out.push(h.method);
            at += HEADER_LEN + h.stored_len as usize;
        }
        out
    }

    #[test]
    fn frames_round_trip_through_zstd_and_stored_frames_stay_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Compressible records: zstd frames, smaller than raw.
        let text: Vec<(Vec<u8>, Vec<u8>)> = (0..3000u64)
            .map(|i| {
                (
                    i.to_be_bytes().to_vec(),
                    format!("read{i}\tACGTACGTACGT\tIIIIIIII").into_bytes(),
                )
            })
            .collect();
        let (run, meta) = write_run(dir.path(), &text, 4096);
        let m = methods(run.path());
        assert!(m[..m.len() - 1].iter().all(|&x| x == METHOD_ZSTD), "{m:?}");
        assert_eq!(m.last(), Some(&METHOD_END));
        assert!(meta.file_bytes * 2 < meta.raw_bytes, "{meta:?}");
        assert_eq!(read_run(run).expect("read"), text);
        // Incompressible records (xorshift bytes): stored frames.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<(Vec<u8>, Vec<u8>)> = (0..200u64)
            .map(|i| {
                let rec = (0..500)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                (i.to_be_bytes().to_vec(), rec)
            })
            .collect();
        let (run, _) = write_run(dir.path(), &noise, 4096);
        let m = methods(run.path());
        assert!(
            m[..m.len() - 1].iter().all(|&x| x == METHOD_STORED),
            "{m:?}"
        );
        assert_eq!(read_run(run).expect("read"), noise);
    }

    #[test]
    fn an_lz4_frame_of_an_older_run_still_decodes() {
        let raw = b"\x01k\x05hello".repeat(100);
        let mut payload = vec![0u8; max_stored_len(raw.len())];
        let n = lz4_flex::block::compress_into(&raw, &mut payload).expect("lz4");
        payload.truncate(n);
        let mut header = FrameHeader {
            raw_len: raw.len() as u32,
            stored_len: n as u32,
            entries: 100,
            method: METHOD_LZ4,
            crc: 0,
        };
        header.crc = frame_crc(&header.encode(), &payload);
        let stored = StoredFrame {
            offset: 8,
            header,
            header_bytes: header.encode(),
            payload,
        };
        let frame = decode(stored, Vec::new(), std::path::Path::new("old.alnrun")).expect("decode");
        assert_eq!(frame.raw, raw);
        assert_eq!(frame.entries, 100);
    }

    #[test]
    fn a_damaged_zstd_frame_is_corrupt_naming_the_file() {
        let raw = b"\x01k\x05hello".repeat(100);
        let mut out = Vec::new();
        let len = crate::runfile::encode_frame(&raw, 100, &mut out);
        let mut header = FrameHeader::decode(out[..HEADER_LEN].try_into().expect("header"));
        assert_eq!(header.method, METHOD_ZSTD);
        let mut payload = out[HEADER_LEN..len].to_vec();
        // Cut the zstd frame short and give it a valid CRC: only zstd can tell.
        payload.truncate(payload.len() - 3);
        header.stored_len = payload.len() as u32;
        header.crc = frame_crc(&header.encode(), &payload);
        let stored = StoredFrame {
            offset: 8,
            header,
            header_bytes: header.encode(),
            payload,
        };
        let err = decode(stored, Vec::new(), std::path::Path::new("x.alnrun"))
            .err()
            .expect("corrupt");
        assert!(
            matches!(&err, SortError::CorruptRun { reason, .. } if reason.contains("zstd")),
            "{err:?}"
        );
        assert!(err.to_string().contains("x.alnrun"), "{err}");
    }

    #[test]
    fn a_panicking_compression_job_is_an_error_naming_the_stage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let meter = Arc::new(Meter::default());
        let out = TempRun::create(dir.path(), &mut 0).expect("create");
        let mut writer =
            crate::runfile::RunWriter::new(out, pool(2), 1024, &meter).expect("writer");
        writer.panic_from_frame = Some(5);
        let mut result = Ok(());
        for (k, r) in &sample(2_000) {
            result = writer.push(k, r);
            if result.is_err() {
                break;
            }
        }
        let err = match result {
            Err(e) => e,
            Ok(()) => writer.finish().map(|_| ()).expect_err("frame 5 was lost"),
        };
        assert!(
            matches!(
                err,
                SortError::Worker {
                    what: "run frame compression"
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("run frame compression"), "{err}");
    }

    #[test]
    fn a_panicking_decompression_job_is_an_error_naming_the_stage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let entries = sample(2_000);
        let (run, _) = write_run(dir.path(), &entries, 1024);
        let meter = Arc::new(Meter::default());
        let mut reader = RunReader::open(run, pool(2), &meter).expect("open");
        reader.panic_in_decode = true;
        let mut read = 0;
        let err = loop {
            assert!(
                reader.key().is_some(),
                "the run ended without the lost frame"
            );
            read += 1;
            if let Err(e) = reader.advance() {
                break e;
            }
        };
        // The frames decoded before the seam was set come out first.
        assert!(read > 0 && read < entries.len(), "{read}");
        assert!(
            matches!(
                err,
                SortError::Worker {
                    what: "run frame decompression"
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn round_trip_over_many_frames() {
        let dir = tempfile::tempdir().expect("tempdir");
        let entries = sample(2_000);
        let (run, meta) = write_run(dir.path(), &entries, 1024);
        assert_eq!(meta.records, 2_000);
        assert!(meta.frames > 100, "{meta:?}");
        let path = run.path().to_path_buf();
        assert_eq!(
            std::fs::metadata(&path).expect("run exists").len(),
            meta.file_bytes
        );
        assert_eq!(read_run(run).expect("read"), entries);
        assert!(!path.exists(), "a run read to its end is deleted");
    }

    #[test]
    fn empty_run_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (run, meta) = write_run(dir.path(), &[], 1024);
        assert_eq!(meta.frames, 0);
        assert!(read_run(run).expect("read").is_empty());
    }

    #[test]
    fn flipped_byte_is_a_checksum_error_naming_file_and_frame() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (run, meta) = write_run(dir.path(), &sample(500), 1024);
        let at = meta.file_bytes / 2;
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(run.path())
            .expect("open");
        f.seek(SeekFrom::Start(at)).expect("seek");
        let mut b = [0u8; 1];
        f.read_exact(&mut b).expect("read");
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(&[b[0] ^ 0x10]).expect("write");
        drop(f);
        let path = run.path().to_path_buf();
        match read_run(run) {
            Err(SortError::CorruptRun {
                path: p,
                offset,
                reason,
            }) => {
                assert_eq!(p, path);
                assert!(
                    offset <= at && offset >= 8,
                    "frame offset {offset} vs flipped byte {at}"
                );
                assert!(
                    reason.contains("checksum") || reason.contains("marker"),
                    "{reason}"
                );
            }
            other => panic!("expected CorruptRun, got {other:?}"),
        }
        assert!(!path.exists(), "the reader's drop deletes the run");
    }

    #[test]
    fn truncated_run_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (run, meta) = write_run(dir.path(), &sample(300), 1024);
        let f = OpenOptions::new()
            .write(true)
            .open(run.path())
            .expect("open");
        f.set_len(meta.file_bytes - HEADER_LEN as u64)
            .expect("truncate");
        drop(f);
        let err = read_run(run).expect_err("truncated");
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn reader_buffers_stay_within_two_of_the_largest_frame() {
        // Frames that grow one after another (records lengthen, and random
        // bytes do not compress): each frame needs more than the buffers
        // the one before left, which is where amortised growth would
        // double them.
        let mut rng = crate::test_support::XorShift64::new(0x9e37_79b9_7f4a_7c15);
        let mut byte = move || rng.next_u64() as u8;
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..400u64)
            .map(|i| {
                let rec = (0..40 + i as usize).map(|_| byte()).collect();
                (i.to_be_bytes().to_vec(), rec)
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let (run, _) = write_run(dir.path(), &entries, 1024);
        let frames = run.index();
        assert!(
            frames
                .windows(2)
                .filter(|w| w[1].raw_len > w[0].raw_len)
                .count()
                > 10,
            "the frames grow"
        );
        let largest_raw = frames.iter().map(|f| f.raw_len).max().expect("frames") as usize;
        let largest_stored = frames
            .iter()
            .map(|f| f.len as usize - HEADER_LEN)
            .max()
            .expect("frames");
        let meter = Arc::new(Meter::default());
        let mut reader = RunReader::open(run, pool(2), &meter).expect("open");
        let mut read = Vec::new();
        while let Some(key) = reader.key() {
            read.push((key.to_vec(), reader.record().to_vec()));
            reader.advance().expect("advance");
        }
        assert_eq!(read, entries);
        // The frame walked and the one decoding, each raw and stored.
        let bound = 2 * (largest_raw + largest_stored) as u64;
        assert!(meter.peak() > 0);
        assert!(
            meter.peak() <= bound,
            "reader held {} bytes, two frames are {bound}",
            meter.peak()
        );
        assert_eq!(meter.current(), 0);
    }
}
