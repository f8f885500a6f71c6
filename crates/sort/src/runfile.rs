//! Run files: their on-disk format, their temp-file lifetime, and the
//! writer that compresses frames on the pool.
//!
//! Format (all integers little-endian):
//!
//! ```text
//! file   = MAGIC frame* end
//! frame  = header payload
//! header = raw_len:u32 stored_len:u32 entries:u32 method:u8 0:u8 0:u8 0:u8 crc:u32
//! end    = header with method = END and every length 0
//! raw    = (key_len:varint key rec_len:varint record)*   -- `entries` of them
//! ```
//!
//! `crc` is CRC-32 (crc32fast) over the first 16 header bytes and the
//! stored payload, so a flipped bit anywhere, a torn header or a truncated
//! file is caught before decompression. The payload is one zstd frame at
//! level 1 of the entries with their BAM records' fields apart
//! (`METHOD_ZSTD_FIELDS`, `fields.rs`: 11% smaller), or of the raw
//! entries when a record is not BAM (`METHOD_ZSTD`), or the raw bytes
//! when zstd does not shrink them; LZ4 frames (`METHOD_LZ4`, what runs were written in before) are
//! still read. Frames are written in order; a frame's compression runs on
//! the pool, several in flight, so a spill is bounded by the disk, not one
//! core.
//!
//! Why zstd 1 (issue 38: the least temporary disk): `examples/codec_compare.rs`
//! on the benchmark's records (reads-300000.bam sorted, 648,184 records,
//! 354 bytes per entry with key and lengths) in 256 KiB frames, one core of
//! the loaded 2-core VM (speeds are relative, not absolute):
//!
//! | codec          | size / raw | bytes/record | compress | decompress |
//! |----------------|-----------:|-------------:|---------:|-----------:|
//! | lz4_flex block |      0.644 |        228.0 |  74 MB/s |   366 MB/s |
//! | zstd -1 (fast) |      0.619 |        219.2 |  59 MB/s |   233 MB/s |
//! | zstd 1         |      0.435 |        154.2 |  45 MB/s |   166 MB/s |
//! | zstd 3         |      0.424 |        150.3 |  25 MB/s |   136 MB/s |
//! | libdeflate 1   |      0.427 |        151.3 |  25 MB/s |    77 MB/s |
//!
//! zstd 1 writes a third fewer bytes than LZ4 (the 4x input of
//! bench/results/2026-12-07-regime.md: 133-140 against 192-203 run bytes
//! per record, peak temporary disk 344-362 MB against 497-527 MB at
//! `-m 100M`, 5-6% more CPU for the whole sort) for about 1.6x LZ4's
//! compression time and 2.2x its decompression time;
//! libdeflate 1 (samtools' temporary files, BGZF level 1) is no smaller
//! and inflates 2x slower than zstd decompresses, and zstd 3 saves 2.5%
//! more for twice the compression time.
//!
//! Temp files are made with `create_new` (O_EXCL) inside the sorter's
//! private directory and deleted when their [`TempRun`] is dropped: after
//! being merged away, on error, or when the sorter is dropped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use alnsort_pipeline::{varint, OrderedQueue};
use rayon::ThreadPool;

use crate::error::{Result, SortError};
use crate::meter::{Charge, Meter};

/// First bytes of every run file.
pub(crate) const MAGIC: &[u8; 8] = b"ALNSRUN1";
/// Bytes in a frame header.
pub(crate) const HEADER_LEN: usize = 20;
/// Payload is the raw frame.
pub(crate) const METHOD_STORED: u8 = 0;
/// Payload is one LZ4 block (read back; no longer written).
pub(crate) const METHOD_LZ4: u8 = 1;
/// Payload is one zstd frame.
pub(crate) const METHOD_ZSTD: u8 = 2;
/// Payload is one zstd frame of the entries with their fields apart
/// (`fields.rs`).
pub(crate) const METHOD_ZSTD_FIELDS: u8 = 3;

/// zstd level of run frames: see the module doc for the measurement.
pub(crate) const ZSTD_LEVEL: i32 = 1;
/// End-of-run marker (no payload).
pub(crate) const METHOD_END: u8 = 0xff;

/// How many times `create` tries the next sequence number when a name is
/// already taken (the directory is private, so a clash means a stale file).
const CREATE_ATTEMPTS: u32 = 1000;

/// Most bytes a stored payload may take for a frame of `raw_len` bytes.
pub(crate) fn max_stored_len(raw_len: usize) -> usize {
    lz4_flex::block::get_maximum_output_size(raw_len)
        .max(zstd::zstd_safe::compress_bound(
            raw_len + crate::fields::LENS_BYTES,
        ))
        .max(raw_len)
}

thread_local! {
    /// Each pool thread's zstd compression context, made once: a fresh
    /// context per 256 KiB frame would allocate and clear its tables every
    /// time.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// Each pool thread's buffer for a frame's fields apart (at most the
    /// largest frame it compressed, 256 KiB in all but frames of one huge
    /// record).
    static APART: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Compresses `raw` into `out` (at least `compress_bound` long) with zstd
/// at [`ZSTD_LEVEL`]; `None` when it fails.
fn zstd_compress(raw: &[u8], out: &mut [u8]) -> Option<usize> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
        }
        c.as_mut()?.compress_to_buffer(raw, out).ok()
    })
}

/// Decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) raw_len: u32,
    pub(crate) stored_len: u32,
    pub(crate) entries: u32,
    pub(crate) method: u8,
    pub(crate) crc: u32,
}

impl FrameHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&self.raw_len.to_le_bytes());
        h[4..8].copy_from_slice(&self.stored_len.to_le_bytes());
        h[8..12].copy_from_slice(&self.entries.to_le_bytes());
        h[12] = self.method;
        h[16..20].copy_from_slice(&self.crc.to_le_bytes());
        h
    }

    /// The encoded end frame (no payload) that closes a run or a block.
    pub(crate) fn end() -> [u8; HEADER_LEN] {
        let mut end = FrameHeader {
            raw_len: 0,
            stored_len: 0,
            entries: 0,
            method: METHOD_END,
            crc: 0,
        };
        end.crc = frame_crc(&end.encode(), &[]);
        end.encode()
    }

    pub(crate) fn decode(h: &[u8; HEADER_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        FrameHeader {
            raw_len: u32_at(0),
            stored_len: u32_at(4),
            entries: u32_at(8),
            method: h[12],
            crc: u32_at(16),
        }
    }
}

/// CRC of a frame: header bytes 0..16, then the payload.
pub(crate) fn frame_crc(header: &[u8; HEADER_LEN], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[..16]);
    hasher.update(payload);
    hasher.finalize()
}

/// `Vec::resize(len, 0)` for a reused frame buffer, except that a buffer
/// that must grow gets exactly `len` bytes of capacity instead of the
/// amortised doubling: a buffer reused across frames then never holds more
/// than the largest frame it has carried, which is what the memory plan
/// reserves per frame (`plan.rs`) and what the meter is told.
pub(crate) fn resize_exact(buf: &mut Vec<u8>, len: usize) {
    if len > buf.len() {
        buf.reserve_exact(len - buf.len());
    }
    buf.resize(len, 0);
}

/// Makes a reused buffer `len` bytes long for a caller that overwrites
/// all of them: [`resize_exact`], but the bytes it already holds are kept
/// rather than zeroed again (at every frame that zeroing was a memset of
/// every run byte written and read).
pub(crate) fn set_len_for_overwrite(buf: &mut Vec<u8>, len: usize) {
    if len <= buf.len() {
        buf.truncate(len);
    } else {
        resize_exact(buf, len);
    }
}

/// Encodes one frame into the start of `out`: header + payload, whose
/// length it returns. `out` is left as long as the largest frame of its
/// size needs, so that the next frame finds those bytes already there.
pub(crate) fn encode_frame(raw: &[u8], entries: u32, out: &mut Vec<u8>) -> usize {
    set_len_for_overwrite(out, HEADER_LEN + max_stored_len(raw.len()));
    let apart = APART.with(|a| {
        let mut a = a.borrow_mut();
        if !crate::fields::split(raw, &mut a) {
            return None;
        }
        zstd_compress(&a, &mut out[HEADER_LEN..])
    });
    let compressed = match apart {
        Some(n) => Some((METHOD_ZSTD_FIELDS, n)),
        None => zstd_compress(raw, &mut out[HEADER_LEN..]).map(|n| (METHOD_ZSTD, n)),
    };
    let (method, stored_len) = match compressed {
        Some((method, n)) if n < raw.len() => (method, n),
        _ => {
            out[HEADER_LEN..HEADER_LEN + raw.len()].copy_from_slice(raw);
            (METHOD_STORED, raw.len())
        }
    };
    let len = HEADER_LEN + stored_len;
    let mut header = FrameHeader {
        raw_len: raw.len() as u32,
        stored_len: stored_len as u32,
        entries,
        method,
        crc: 0,
    };
    header.crc = frame_crc(&header.encode(), &out[HEADER_LEN..len]);
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    len
}

/// Where one frame of a finished run lies, and the key of its first
/// entry: the run's sparse index, which lets the final merge start reading
/// a run in the middle (`partition.rs`) without scanning it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameInfo {
    /// Byte offset of the frame header in the file.
    pub(crate) offset: u64,
    /// Bytes of header plus stored payload.
    pub(crate) len: u32,
    /// Bytes of the frame before compression.
    pub(crate) raw_len: u32,
    /// Entries in the frame (at least one).
    pub(crate) entries: u32,
    /// Key of the frame's first entry.
    pub(crate) first_key: Box<[u8]>,
}

/// A run file on disk, deleted when this is dropped.
#[derive(Debug)]
pub(crate) struct TempRun {
    path: PathBuf,
    /// One entry per frame, in file order; filled by `RunWriter::finish`.
    index: Vec<FrameInfo>,
}

impl TempRun {
    /// Creates `dir/run-NNNNNN.alnrun` with O_EXCL, taking the next free
    /// number from `*seq`.
    pub(crate) fn create(dir: &Path, seq: &mut u64) -> Result<(TempRun, File)> {
        let mut attempts = 0;
        loop {
            let path = dir.join(format!("run-{:06}.alnrun", *seq));
            *seq += 1;
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    let run = TempRun {
                        path,
                        index: Vec::new(),
                    };
                    return Ok((run, file));
                }
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists && attempts < CREATE_ATTEMPTS =>
                {
                    attempts += 1;
                }
                Err(source) => return Err(SortError::Create { path, source }),
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A finished run already on disk at `path` (a resumed sort's,
    /// `durable.rs`), with its frames as read back; deleted when dropped
    /// like any other.
    pub(crate) fn adopt(path: PathBuf, index: Vec<FrameInfo>) -> TempRun {
        TempRun { path, index }
    }

    /// The run's frames, in file order (empty until the run is finished).
    pub(crate) fn index(&self) -> &[FrameInfo] {
        &self.index
    }
}

impl Drop for TempRun {
    fn drop(&mut self) {
        // Best effort: the file may already be gone, and a failure to
        // delete a temp file must not turn into a panic.
        let _ = fs::remove_file(&self.path);
    }
}

/// What a finished run holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RunMeta {
    pub(crate) records: u64,
    /// Bytes of frame contents before compression.
    pub(crate) raw_bytes: u64,
    /// Bytes of the file.
    pub(crate) file_bytes: u64,
    pub(crate) frames: u64,
}

/// An encoded frame coming back from the pool, with the raw buffer to
/// reuse.
struct Encoded {
    raw: Vec<u8>,
    /// The encoded frame is `out[..len]`.
    out: Vec<u8>,
    len: usize,
    entries: u32,
    first_key: Box<[u8]>,
}

/// Writes one run file, frame by frame, compressing on the pool.
pub(crate) struct RunWriter {
    run: TempRun,
    file: File,
    offset: u64,
    frame_target: usize,
    raw: Vec<u8>,
    raw_entries: u32,
    /// Key of the filling frame's first entry.
    first_key: Vec<u8>,
    index: Vec<FrameInfo>,
    /// Frames being compressed, taken in the order they were filled.
    pending: OrderedQueue<Encoded>,
    max_pending: usize,
    spare: Vec<Encoded>,
    meta: RunMeta,
    charge: Charge,
    /// Test seam: the compression job of this frame number (1-based) and
    /// every later one panics.
    #[cfg(test)]
    pub(crate) panic_from_frame: Option<u64>,
}

impl RunWriter {
    /// Starts a run in a freshly created file. Frames hold about
    /// `frame_target` raw bytes; up to `pool threads + 1` are compressed at
    /// once.
    pub(crate) fn new(
        (run, mut file): (TempRun, File),
        pool: Arc<ThreadPool>,
        frame_target: usize,
        meter: &Arc<Meter>,
    ) -> Result<Self> {
        file.write_all(MAGIC).map_err(|source| SortError::Write {
            path: run.path.clone(),
            offset: 0,
            source,
        })?;
        let max_pending = pool.current_num_threads() + 1;
        let mut charge = Charge::new(meter);
        charge.set(Self::buffer_bytes(frame_target, max_pending));
        Ok(RunWriter {
            run,
            file,
            offset: MAGIC.len() as u64,
            frame_target,
            raw: Vec::with_capacity(frame_target),
            raw_entries: 0,
            first_key: Vec::new(),
            index: Vec::new(),
            pending: OrderedQueue::new(pool, "run frame compression"),
            max_pending,
            spare: Vec::new(),
            meta: RunMeta::default(),
            charge,
            #[cfg(test)]
            panic_from_frame: None,
        })
    }

    /// Frame buffers a writer holds at most (for the memory plan): one
    /// frame filling plus `max_pending` in flight, each raw + encoded.
    pub(crate) fn buffer_bytes(frame_target: usize, max_pending: usize) -> usize {
        (max_pending + 1) * (frame_target + HEADER_LEN + max_stored_len(frame_target))
    }

    /// Appends one entry.
    pub(crate) fn push(&mut self, key: &[u8], record: &[u8]) -> Result<()> {
        if self.raw_entries == 0 {
            self.first_key.clear();
            self.first_key.extend_from_slice(key);
        }
        // The entry that takes a frame past its target grows the buffer by
        // itself only (two varints of at most 10 bytes), not by doubling it.
        self.raw.reserve_exact(key.len() + record.len() + 20);
        varint::put(&mut self.raw, key.len() as u64);
        self.raw.extend_from_slice(key);
        varint::put(&mut self.raw, record.len() as u64);
        self.raw.extend_from_slice(record);
        self.raw_entries += 1;
        self.meta.records += 1;
        if self.raw.len() >= self.frame_target {
            self.flush_frame()?;
        }
        Ok(())
    }

    /// Hands the filling frame to the pool.
    fn flush_frame(&mut self) -> Result<()> {
        if self.raw_entries == 0 {
            return Ok(());
        }
        let (next_raw, out) = match self.spare.pop() {
            Some(spare) => (spare.raw, spare.out),
            None => (Vec::with_capacity(self.frame_target), Vec::new()),
        };
        let first_key: Box<[u8]> = self.first_key.as_slice().into();
        let raw = std::mem::replace(&mut self.raw, next_raw);
        let entries = std::mem::take(&mut self.raw_entries);
        self.meta.raw_bytes += raw.len() as u64;
        self.meta.frames += 1;
        let mut out = out;
        #[cfg(test)]
        let panics = self.panic_from_frame.is_some_and(|f| self.meta.frames >= f);
        self.pending.push(move || {
            #[cfg(test)]
            assert!(!panics, "injected run frame compression panic");
            let len = encode_frame(&raw, entries, &mut out);
            Encoded {
                raw,
                out,
                len,
                entries,
                first_key,
            }
        });
        while self.pending.len() > self.max_pending {
            self.write_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest frame in flight and writes it.
    fn write_oldest(&mut self) -> Result<()> {
        let Some(encoded) = self.pending.pop() else {
            return Ok(());
        };
        let mut encoded = encoded?;
        self.index.push(FrameInfo {
            offset: self.offset,
            len: encoded.len as u32,
            raw_len: encoded.raw.len() as u32,
            entries: encoded.entries,
            first_key: std::mem::take(&mut encoded.first_key),
        });
        self.write_bytes(&encoded.out[..encoded.len])?;
        encoded.raw.clear();
        self.spare.push(encoded);
        Ok(())
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|source| SortError::Write {
                path: self.run.path.clone(),
                offset: self.offset,
                source,
            })?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Writes the remaining frames and the end marker; returns the run.
    pub(crate) fn finish(mut self) -> Result<(TempRun, RunMeta)> {
        self.flush_frame()?;
        while !self.pending.is_empty() {
            self.write_oldest()?;
        }
        self.write_bytes(&FrameHeader::end())?;
        self.file.flush().map_err(|source| SortError::Write {
            path: self.run.path.clone(),
            offset: self.offset,
            source,
        })?;
        self.meta.file_bytes = self.offset;
        self.charge.set(0);
        self.run.index = std::mem::take(&mut self.index);
        Ok((self.run, self.meta))
    }
}
