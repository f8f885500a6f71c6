//! Read ends and record slots beyond the memory limit go to disk, as Picard
//! keeps its ends in a disk-backed sorting collection.
//!
//! * **Ends** ([`EndRun`]): when the in-memory ends reach their share, they
//!   are sorted (pair ends and fragment ends apart) and each kind is written
//!   to a run file of fixed-size records, compressed as one zstd stream
//!   (sorted ends differ little from one to the next). [`EndStream`] merges a kind's runs
//!   and the sorted ends still in memory back into one stream in
//!   [`End::total_cmp`] order, the order a single in-memory sort gives, so
//!   the duplicate sets come out one at a time and the decisions are the
//!   same with and without spilling.
//! * **Record slots** ([`SlotLog`]): 8 bytes per input record, appended in
//!   input order and read back once, in order, by the output pass.
//! * **Waiting mates** ([`WaitingFiles`]): in coordinate-sorted input, the
//!   mates waiting for a mate on a later reference, appended to one file
//!   per mate reference and read back whole when reading reaches it.
//!
//! Files are created in the directory the caller names (the sort's private
//! temporary directory, removed with everything in it on success, failure
//! and signal) and removed as soon as they have been read.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::ends::End;
use crate::optical::Location;
use crate::walk::RecordSlot;
use crate::MarkdupError;

/// Bytes of one end in a run file.
pub(crate) const END_BYTES: usize = 2 + 4 * 3 + 1 + 4 * 4 + 2 * 4 + 1 + 2 + 8 * 2 + 1;

/// Bytes of one record slot in the slot file.
pub(crate) const SLOT_BYTES: usize = 8;

/// Buffer of each file reader and writer.
const IO_BUFFER: usize = 64 << 10;

/// zstd level of the end runs: 1, the sorter's run-frame level (the
/// fastest of zstd's standard levels; it takes about 4 bytes in 5 off
/// sorted ends).
const END_RUN_LEVEL: i32 = 1;

/// zstd window of the end runs (2^17 = 128 KiB): what each open run's
/// decoder holds while the runs are merged, beside its [`IO_BUFFER`].
const END_RUN_WINDOW_LOG: u32 = 17;

pub(crate) fn io_error<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> MarkdupError + 'a {
    move |source| MarkdupError::Spill {
        path: path.to_path_buf(),
        op,
        source,
    }
}

pub(crate) fn encode_end(e: &End, out: &mut [u8; END_BYTES]) {
    let mut at = 0;
    let mut put = |b: &[u8]| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    };
    put(&e.library.to_le_bytes());
    put(&e.barcode.to_le_bytes());
    put(&e.r1_barcode.to_le_bytes());
    put(&e.r2_barcode.to_le_bytes());
    put(&[e.orientation]);
    put(&e.r1_ref.to_le_bytes());
    put(&e.r1_coord.to_le_bytes());
    put(&e.r2_ref.to_le_bytes());
    put(&e.r2_coord.to_le_bytes());
    put(&e.loc.read_group.to_le_bytes());
    put(&e.loc.tile.to_le_bytes());
    put(&e.loc.x.to_le_bytes());
    put(&e.loc.y.to_le_bytes());
    put(&e.optical_orientation.to_le_bytes());
    put(&e.score.to_le_bytes());
    put(&e.r1_index.to_le_bytes());
    put(&e.r2_index.to_le_bytes());
    put(&[e.pair as u8]);
}

pub(crate) fn decode_end(b: &[u8; END_BYTES]) -> End {
    let mut at = 0;
    let mut take = |n: usize| {
        let s = &b[at..at + n];
        at += n;
        s
    };
    let i16_ = |s: &[u8]| i16::from_le_bytes([s[0], s[1]]);
    let i32_ = |s: &[u8]| i32::from_le_bytes(s.try_into().unwrap());
    let i64_ = |s: &[u8]| i64::from_le_bytes(s.try_into().unwrap());
    let library = i16_(take(2));
    let barcode = i32_(take(4));
    let r1_barcode = i32_(take(4));
    let r2_barcode = i32_(take(4));
    let orientation = take(1)[0];
    let r1_ref = i32_(take(4));
    let r1_coord = i32_(take(4));
    let r2_ref = i32_(take(4));
    let r2_coord = i32_(take(4));
    let loc = Location {
        read_group: i16_(take(2)),
        tile: i16_(take(2)),
        x: i16_(take(2)),
        y: i16_(take(2)),
    };
    let optical_orientation = take(1)[0] as i8;
    let score = i16_(take(2));
    let r1_index = i64_(take(8));
    let r2_index = i64_(take(8));
    let pair = take(1)[0] != 0;
    End {
        library,
        barcode,
        r1_barcode,
        r2_barcode,
        orientation,
        r1_ref,
        r1_coord,
        r2_ref,
        r2_coord,
        loc,
        optical_orientation,
        score,
        r1_index,
        r2_index,
        pair,
    }
}

/// One sorted run of ends of one kind on disk.
#[derive(Debug)]
pub(crate) struct EndRun {
    path: PathBuf,
    ends: u64,
    /// Bytes of the file (compressed).
    bytes: u64,
}

impl EndRun {
    /// Writes `ends` (already in [`End::total_cmp`] order) to `path`.
    pub(crate) fn write<I>(path: PathBuf, ends: I) -> Result<EndRun, MarkdupError>
    where
        I: IntoIterator<Item = Result<End, MarkdupError>>,
    {
        let file = File::create(&path).map_err(io_error(&path, "creating a spill file"))?;
        let writing = io_error(&path, "writing a spill file");
        let mut w = zstd::stream::write::Encoder::new(
            BufWriter::with_capacity(IO_BUFFER, file),
            END_RUN_LEVEL,
        )
        .and_then(|mut w| {
            w.window_log(END_RUN_WINDOW_LOG)?;
            w.include_checksum(true)?;
            Ok(w)
        })
        .map_err(io_error(&path, "starting a spill file's compression"))?;
        let mut buf = [0u8; END_BYTES];
        let mut n = 0u64;
        for e in ends {
            encode_end(&e?, &mut buf);
            w.write_all(&buf)
                .map_err(io_error(&path, "writing a spill file"))?;
            n += 1;
        }
        let file = w
            .finish()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .map_err(writing)?;
        let bytes = file
            .metadata()
            .map_err(io_error(&path, "reading a spill file's size"))?
            .len();
        Ok(EndRun {
            path,
            ends: n,
            bytes,
        })
    }

    /// Bytes the run takes on disk.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    fn open(self) -> Result<SpillReader, MarkdupError> {
        let file = File::open(&self.path).map_err(io_error(&self.path, "opening a spill file"))?;
        let r = zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(IO_BUFFER, file))
            .and_then(|mut r| {
                r.window_log_max(END_RUN_WINDOW_LOG)?;
                Ok(r)
            })
            .map_err(io_error(&self.path, "opening a spill file"))?;
        Ok(SpillReader {
            r,
            left: self.ends,
            path: self.path,
        })
    }
}

/// Reads a run back, removing its file when dropped.
struct SpillReader {
    r: zstd::stream::read::Decoder<'static, BufReader<File>>,
    left: u64,
    path: PathBuf,
}

impl SpillReader {
    fn next(&mut self) -> Result<Option<End>, MarkdupError> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut buf = [0u8; END_BYTES];
        self.r
            .read_exact(&mut buf)
            .map_err(io_error(&self.path, "reading a spill file"))?;
        self.left -= 1;
        Ok(Some(decode_end(&buf)))
    }
}

impl Drop for SpillReader {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The head of one source in the merge: the smallest first; equal ends
/// (which are interchangeable, see [`End::total_cmp`]) by source.
struct Head {
    end: End,
    source: usize,
}

impl PartialEq for Head {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Head {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap.
        o.end.total_cmp(&self.end).then(o.source.cmp(&self.source))
    }
}

/// The ends of one kind in [`End::total_cmp`] order: the runs on disk and
/// the sorted ends still in memory, merged.
pub(crate) struct EndStream<'a> {
    runs: Vec<SpillReader>,
    memory: std::slice::Iter<'a, End>,
    heap: BinaryHeap<Head>,
    started: bool,
}

impl<'a> EndStream<'a> {
    /// `memory` must be sorted by [`End::total_cmp`]; so must each run.
    pub(crate) fn new(runs: Vec<EndRun>, memory: &'a [End]) -> Result<EndStream<'a>, MarkdupError> {
        let runs = runs
            .into_iter()
            .map(EndRun::open)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EndStream {
            runs,
            memory: memory.iter(),
            heap: BinaryHeap::new(),
            started: false,
        })
    }

    fn pull(&mut self, source: usize) -> Result<Option<End>, MarkdupError> {
        if source == self.runs.len() {
            Ok(self.memory.next().copied())
        } else {
            self.runs[source].next()
        }
    }

    pub(crate) fn next_end(&mut self) -> Result<Option<End>, MarkdupError> {
        if self.runs.is_empty() {
            return Ok(self.memory.next().copied());
        }
        if !self.started {
            self.started = true;
            for source in 0..=self.runs.len() {
                if let Some(end) = self.pull(source)? {
                    self.heap.push(Head { end, source });
                }
            }
        }
        let Some(Head { end, source }) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(next) = self.pull(source)? {
            self.heap.push(Head { end: next, source });
        }
        Ok(Some(end))
    }
}

impl Iterator for EndStream<'_> {
    type Item = Result<End, MarkdupError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_end().transpose()
    }
}

/// Where and how much: the spill directory, the byte limit, and what has
/// been written.
#[derive(Debug)]
pub(crate) struct Spill {
    pub(crate) dir: PathBuf,
    pub(crate) limit: usize,
    /// Waiting mates beyond the limit stop the run (else they are kept).
    pub(crate) hard: bool,
    pub(crate) pair_runs: Vec<EndRun>,
    pub(crate) frag_runs: Vec<EndRun>,
    /// Waiting mates of coordinate-sorted input moved out of memory.
    pub(crate) waiting: WaitingFiles,
    pub(crate) files: u64,
    /// Run files written (merges of runs included).
    pub(crate) runs_written: u64,
    pub(crate) bytes_written: u64,
    pub(crate) ends_written: u64,
}

/// Runs of one kind merged into one when there are this many, so the final
/// merge never holds more files open (or more buffers) than this.
pub(crate) const MAX_RUNS: usize = 32;

impl Spill {
    pub(crate) fn new(dir: &Path, limit: usize, hard: bool) -> Spill {
        Spill {
            dir: dir.to_path_buf(),
            limit,
            hard,
            pair_runs: Vec::new(),
            frag_runs: Vec::new(),
            waiting: WaitingFiles::default(),
            files: 0,
            runs_written: 0,
            bytes_written: 0,
            ends_written: 0,
        }
    }

    pub(crate) fn next_path(&mut self, what: &str) -> PathBuf {
        self.files += 1;
        self.dir.join(format!(
            "markdup-{what}-{}-{}",
            std::process::id(),
            self.files
        ))
    }

    /// Writes one kind's sorted ends as a run, merging the kind's runs into
    /// one first when there are [`MAX_RUNS`].
    pub(crate) fn add_run(&mut self, pairs: bool, sorted: &[End]) -> Result<(), MarkdupError> {
        if sorted.is_empty() {
            return Ok(());
        }
        let what = if pairs { "pairs" } else { "frags" };
        if self.runs(pairs).len() >= MAX_RUNS {
            let old = std::mem::take(self.runs(pairs));
            let path = self.next_path(what);
            let run = EndRun::write(path, EndStream::new(old, &[])?)?;
            self.count(&run);
            self.runs(pairs).push(run);
        }
        let path = self.next_path(what);
        let run = EndRun::write(path, sorted.iter().copied().map(Ok))?;
        self.count(&run);
        self.runs(pairs).push(run);
        Ok(())
    }

    fn count(&mut self, run: &EndRun) {
        self.runs_written += 1;
        self.bytes_written += run.bytes();
        self.ends_written += run.ends;
    }

    fn runs(&mut self, pairs: bool) -> &mut Vec<EndRun> {
        if pairs {
            &mut self.pair_runs
        } else {
            &mut self.frag_runs
        }
    }
}

/// The record slots in input order: a buffer in memory, written to a file
/// in the spill directory when it is full (with a spill limit).
#[derive(Debug, Default)]
pub(crate) struct SlotLog {
    buf: Vec<RecordSlot>,
    /// Slots the buffer holds before it goes to the file (0: no limit).
    cap: usize,
    file: Option<(BufWriter<File>, PathBuf)>,
    on_disk: u64,
}

pub(crate) fn encode_slot(s: &RecordSlot) -> [u8; SLOT_BYTES] {
    let mut b = [0u8; SLOT_BYTES];
    b[..4].copy_from_slice(&s.library.to_le_bytes());
    b[4..6].copy_from_slice(&s.flag.to_le_bytes());
    b[6] = s.new_template as u8;
    b
}

pub(crate) fn decode_slot(b: &[u8; SLOT_BYTES]) -> RecordSlot {
    RecordSlot {
        library: u32::from_le_bytes(b[..4].try_into().unwrap()),
        flag: u16::from_le_bytes([b[4], b[5]]),
        new_template: b[6] != 0,
    }
}

impl SlotLog {
    /// Keeps at most `cap` slots in memory (the rest go to `path`).
    pub(crate) fn bounded(&mut self, cap: usize) {
        self.cap = cap.max(1);
    }

    pub(crate) fn len(&self) -> u64 {
        self.on_disk + self.buf.len() as u64
    }

    /// The slots in memory (for [`crate::MarkDuplicates`]' prefault jobs).
    pub(crate) fn buffer(&self) -> &Vec<RecordSlot> {
        &self.buf
    }

    /// Bytes held in memory.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<RecordSlot>()
    }

    pub(crate) fn push(
        &mut self,
        slot: RecordSlot,
        spill: Option<&mut Spill>,
    ) -> Result<(), MarkdupError> {
        if self.cap > 0 && self.buf.len() == self.cap {
            if let Some(spill) = spill {
                self.flush(spill)?;
            }
        }
        if self.cap > 0 && self.buf.len() == self.buf.capacity() {
            let want = (self.buf.capacity() * 2)
                .max(1024)
                .min(self.cap.max(self.buf.len() + 1));
            self.buf.reserve_exact(want - self.buf.len());
        }
        self.buf.push(slot);
        Ok(())
    }

    /// Slots [`SlotLog::push`] takes before the buffer goes to the file or
    /// grows (without a bound it only grows, as a `Vec` does).
    pub(crate) fn room(&self) -> usize {
        if self.cap == 0 {
            usize::MAX
        } else {
            self.cap
                .min(self.buf.capacity())
                .saturating_sub(self.buf.len())
        }
    }

    /// [`SlotLog::push`] of a slot within [`SlotLog::room`].
    pub(crate) fn push_within(&mut self, slot: RecordSlot) {
        debug_assert!(self.room() > 0);
        self.buf.push(slot);
    }

    fn flush(&mut self, spill: &mut Spill) -> Result<(), MarkdupError> {
        if self.file.is_none() {
            let path = spill.next_path("slots");
            let f = File::create(&path).map_err(io_error(&path, "creating a spill file"))?;
            self.file = Some((BufWriter::with_capacity(IO_BUFFER, f), path));
        }
        let (w, path) = self.file.as_mut().expect("slot file");
        for s in &self.buf {
            w.write_all(&encode_slot(s))
                .map_err(io_error(path, "writing a spill file"))?;
        }
        spill.bytes_written += (self.buf.len() * SLOT_BYTES) as u64;
        self.on_disk += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// The slots in input order (the file first, then the buffer); the
    /// file is removed when the reader is dropped.
    pub(crate) fn reader(&mut self) -> Result<SlotReader<'_>, MarkdupError> {
        let file = match self.file.take() {
            None => None,
            Some((w, path)) => {
                let f = w
                    .into_inner()
                    .map_err(|e| io_error(&path, "writing a spill file")(e.into_error()))?;
                drop(f);
                let f = File::open(&path).map_err(io_error(&path, "opening a spill file"))?;
                Some((BufReader::with_capacity(IO_BUFFER, f), path))
            }
        };
        Ok(SlotReader {
            file,
            left: self.on_disk,
            buf: self.buf.iter(),
        })
    }
}

pub(crate) struct SlotReader<'a> {
    file: Option<(BufReader<File>, PathBuf)>,
    left: u64,
    buf: std::slice::Iter<'a, RecordSlot>,
}

impl SlotReader<'_> {
    pub(crate) fn next_slot(&mut self) -> Result<Option<RecordSlot>, MarkdupError> {
        if self.left > 0 {
            let (r, path) = self.file.as_mut().expect("slot file");
            let mut b = [0u8; SLOT_BYTES];
            r.read_exact(&mut b)
                .map_err(io_error(path, "reading a spill file"))?;
            self.left -= 1;
            return Ok(Some(decode_slot(&b)));
        }
        Ok(self.buf.next().copied())
    }
}

impl Drop for SlotReader<'_> {
    fn drop(&mut self) {
        if let Some((_, path)) = &self.file {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A mate waiting for its other half: read group, name, and its end (the
/// reference its mate is on is the file's).
pub(crate) type WaitingEntry = (i16, Vec<u8>, End);

/// Mates of coordinate-sorted input that wait for a mate on a later
/// reference than the one being read, moved out of memory: one file per
/// mate reference, appended to at each spill (and opened only while it is
/// written or read, so no file stays open), read back whole when reading
/// reaches that reference, and removed then (the rest when this is
/// dropped). Picard keeps its waiting ends in a disk-backed map split by
/// reference in the same way.
#[derive(Debug, Default)]
pub(crate) struct WaitingFiles {
    /// Per mate reference: the file and the entries in it.
    files: std::collections::BTreeMap<i32, (PathBuf, u64)>,
    /// Entries written, in all.
    pub(crate) written: u64,
}

impl WaitingFiles {
    /// Whether any reference's entries are on disk.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Appends the entries of mate reference `ref_id` (`new_path` names its
    /// file if it has none); returns the bytes written.
    pub(crate) fn append(
        &mut self,
        ref_id: i32,
        entries: &[WaitingEntry],
        new_path: impl FnOnce() -> PathBuf,
    ) -> Result<u64, MarkdupError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let (path, count) = self.files.entry(ref_id).or_insert_with(|| (new_path(), 0));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&*path)
            .map_err(io_error(path, "creating a spill file"))?;
        let mut w = BufWriter::with_capacity(IO_BUFFER, file);
        let mut buf = [0u8; END_BYTES];
        let mut bytes = 0u64;
        for (rg, name, end) in entries {
            encode_end(end, &mut buf);
            let len = u32::try_from(name.len()).expect("read names are short");
            w.write_all(&rg.to_le_bytes())
                .and_then(|_| w.write_all(&len.to_le_bytes()))
                .and_then(|_| w.write_all(name))
                .and_then(|_| w.write_all(&buf))
                .map_err(io_error(path, "writing a spill file"))?;
            bytes += (2 + 4 + name.len() + END_BYTES) as u64;
        }
        w.flush().map_err(io_error(path, "writing a spill file"))?;
        *count += entries.len() as u64;
        self.written += entries.len() as u64;
        Ok(bytes)
    }

    /// Reads back (and removes) the files of every mate reference up to
    /// `ref_id`: the entries of each reference in the order they were
    /// written, the references in increasing order.
    pub(crate) fn take_up_to(
        &mut self,
        ref_id: i32,
    ) -> Result<Vec<(i32, WaitingEntry)>, MarkdupError> {
        let mut out = Vec::new();
        while let Some((&r, _)) = self.files.first_key_value() {
            if r > ref_id {
                break;
            }
            let (path, count) = self.files.remove(&r).expect("first key");
            let read = (|| -> Result<(), MarkdupError> {
                let file = File::open(&path).map_err(io_error(&path, "opening a spill file"))?;
                let mut rd = BufReader::with_capacity(IO_BUFFER, file);
                let mut buf = [0u8; END_BYTES];
                let mut head = [0u8; 6];
                for _ in 0..count {
                    rd.read_exact(&mut head)
                        .map_err(io_error(&path, "reading a spill file"))?;
                    let rg = i16::from_le_bytes([head[0], head[1]]);
                    let len = u32::from_le_bytes(head[2..6].try_into().unwrap()) as usize;
                    let mut name = vec![0u8; len];
                    rd.read_exact(&mut name)
                        .and_then(|_| rd.read_exact(&mut buf))
                        .map_err(io_error(&path, "reading a spill file"))?;
                    out.push((r, (rg, name, decode_end(&buf))));
                }
                Ok(())
            })();
            let _ = std::fs::remove_file(&path);
            read?;
        }
        Ok(out)
    }
}

impl Drop for WaitingFiles {
    fn drop(&mut self) {
        for (path, _) in self.files.values() {
            let _ = std::fs::remove_file(path);
        }
    }
}
