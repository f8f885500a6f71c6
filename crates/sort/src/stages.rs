//! The sort engine's side of the distributed stages (issue 11): skew-safe
//! range splitters, the partitioning of a map task's sorted stream into
//! framed blocks, and the reduce's merge of those blocks.
//!
//! **Total order.** The single-node sort orders records by key, ties by
//! input order. Over several splits of the input (split `s` holds the
//! records before split `s + 1`'s), input order is (split ordinal, record
//! position within the split), where a position is any number that grows
//! with input order within one split: the record's virtual offset (BAM),
//! which a sampler knows without counting records from the split's start.
//! A [`Splitter`] is such a triple `(key, split, position)`, so a range boundary can fall *inside* the
//! records of one key — all unmapped reads of a coordinate sort, a pileup
//! — and every range still holds exactly a contiguous stretch of the
//! single-node order.
//!
//! **Map.** A map task sorts its split alone (ties in input order), then
//! [`Assigner`] walks the sorted stream and sends each record to its range.
//! In the sorted stream the records of one key from this split come in
//! input order, so "position < P" is "among the first `c` records of key
//! K", where `c` was counted while the split was read
//! ([`Partitioner::observe`], or [`Tally`]s filled by decode jobs in
//! parallel and added up; only for the splitters that name this split and
//! only when there are any). Each range's records go to one [`RunBlockWriter`]: the run files'
//! frame format (`runfile.rs`) in memory, self-describing (magic, CRC-
//! checked stored frames, end marker), which the reduce reads in place.
//!
//! **Reduce.** [`merge_blocks`] merges one range's blocks, given in split
//! order, with the loser tree every merge uses (lower source wins ties):
//! equal keys come out in split order, and within a split in input order,
//! which is the single-node order.

use std::cmp::Ordering;
use std::path::PathBuf;

use crate::error::{Result, SortError};
use crate::loser::{LoserTree, MergeSource};
use alnsort_pipeline::varint;

use crate::runfile::{frame_crc, FrameHeader, HEADER_LEN, MAGIC, METHOD_END, METHOD_STORED};
use crate::runread::{decode, entry_at, StoredFrame};
use crate::KeyKind;

/// Bytes of the tie-break fields at the end of an encoded splitter or
/// sample: the split ordinal (`u32`, big-endian) and the record's position
/// within the split (`u64`, big-endian; its virtual offset).
pub const TIE_BREAK_LEN: usize = 12;

/// Raw bytes of a block's frame before it is compressed.
const FRAME_TARGET: usize = 256 << 10;

/// A point in the single-node order: a key and, among the records with
/// that key, the place `(split, position)` in input order. Records
/// compare to it by `(key, split, position)`; a splitter with `split` and
/// `position` 0 cuts before every record of its key (a BAM record's
/// virtual offset is never 0: the header comes first).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Splitter {
    /// The sort key (as `KeyEncoder` makes it).
    pub key: Vec<u8>,
    /// Ordinal of the split the record is in (its place in input order).
    pub split: u32,
    /// The record's position within its split: any number that increases
    /// with input order inside the split (the stages use its virtual
    /// offset); 0 is before every record.
    pub position: u64,
}

impl Splitter {
    /// `key ++ split (u32 BE) ++ position (u64 BE)`: the form samples and
    /// splitters take between processes (the Python `bytes`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.key.len() + TIE_BREAK_LEN);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.split.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
        out
    }

    /// The inverse of [`Splitter::encode`]; `None` when `bytes` is shorter
    /// than the tie-break fields.
    pub fn decode(bytes: &[u8]) -> Option<Splitter> {
        let cut = bytes.len().checked_sub(TIE_BREAK_LEN)?;
        let (key, tie) = bytes.split_at(cut);
        let split = u32::from_be_bytes(tie[..4].try_into().ok()?);
        let position = u64::from_be_bytes(tie[4..].try_into().ok()?);
        Some(Splitter {
            key: key.to_vec(),
            split,
            position,
        })
    }
}

/// Up to `partitions - 1` splitters, strictly increasing, cutting the
/// sampled points into `partitions` ranges of about equal counts. A cut at
/// the first sample of its key becomes a cut before the whole key
/// (`split`, `position` 0), so most ranges are cut by key alone and map
/// tasks need no counting; a key sampled more often than a range's share
/// is cut inside (skew-safe). Fewer come back when there are fewer
/// distinct samples than cuts.
pub fn splitters_from_samples(mut samples: Vec<Splitter>, partitions: usize) -> Vec<Splitter> {
    samples.sort_unstable();
    let n = samples.len();
    let mut out: Vec<Splitter> = Vec::new();
    if partitions < 2 || n == 0 {
        return out;
    }
    for j in 1..partitions {
        let i = j * n / partitions;
        if i == 0 {
            continue;
        }
        let mut cut = samples[i].clone();
        if samples[i - 1].key != cut.key {
            cut.split = 0;
            cut.position = 0;
        }
        if out.last().is_none_or(|last| *last < cut) {
            out.push(cut);
        }
    }
    out
}

/// Counts, while a map task reads its split in input order, what the
/// splitters that fall inside this split's records need (see the module
/// documentation), then hands an [`Assigner`] for the sorted stream.
#[derive(Debug, Clone)]
pub struct Partitioner {
    splitters: Vec<Splitter>,
    split: u32,
    /// Per splitter: records of this split with its key and a position
    /// below its position.
    counts: Vec<u64>,
    /// The splitters that name this split with a position past 0.
    watched: Vec<usize>,
}

impl Partitioner {
    /// For the map task of split `split`; `splitters` must be strictly
    /// increasing (as [`splitters_from_samples`] makes them).
    pub fn new(splitters: Vec<Splitter>, split: u32) -> Result<Partitioner> {
        if let Some(i) = splitters.windows(2).position(|w| w[0] >= w[1]) {
            return Err(SortError::SplittersUnordered { index: i + 1 });
        }
        let watched = splitters
            .iter()
            .enumerate()
            .filter(|(_, s)| s.split == split && s.position > 0)
            .map(|(i, _)| i)
            .collect();
        Ok(Partitioner {
            counts: vec![0; splitters.len()],
            splitters,
            split,
            watched,
        })
    }

    /// Ranges the records go to: splitters + 1.
    pub fn ranges(&self) -> usize {
        self.splitters.len() + 1
    }

    /// Whether [`Partitioner::observe`] must see every record.
    pub fn needs_observe(&self) -> bool {
        !self.watched.is_empty()
    }

    /// Notes the record with `key` at `position` (records may come in any
    /// order).
    pub fn observe(&mut self, key: &[u8], position: u64) {
        for &i in &self.watched {
            let s = &self.splitters[i];
            if position < s.position && s.key == key {
                self.counts[i] += 1;
            }
        }
    }

    /// An empty tally of the watched splitters, for a decode job to fill
    /// off this thread; [`Partitioner::add`] takes it back.
    pub fn tally(&self) -> Tally {
        Tally {
            watched: self
                .watched
                .iter()
                .map(|&i| (self.splitters[i].key.clone(), self.splitters[i].position))
                .collect(),
            counts: vec![0; self.watched.len()],
        }
    }

    /// Adds a tally's counts (from [`Partitioner::tally`] of this
    /// partitioner).
    pub fn add(&mut self, tally: &Tally) {
        for (&i, &c) in self.watched.iter().zip(&tally.counts) {
            self.counts[i] += c;
        }
    }

    /// The assigner for the split's sorted stream.
    pub fn into_assigner(self) -> Assigner {
        Assigner {
            p: self,
            current: 0,
            run_key: Vec::new(),
            rank: 0,
            started: false,
        }
    }
}

/// [`Partitioner::observe`]'s counts for some of a split's records, kept
/// apart so that decode jobs can count in parallel.
#[derive(Debug, Clone)]
pub struct Tally {
    watched: Vec<(Vec<u8>, u64)>,
    counts: Vec<u64>,
}

impl Tally {
    /// Whether any record must be noted.
    pub fn is_needed(&self) -> bool {
        !self.watched.is_empty()
    }

    /// Notes the record with `key` at `position`.
    pub fn observe(&mut self, key: &[u8], position: u64) {
        for (w, c) in self.watched.iter().zip(&mut self.counts) {
            if position < w.1 && w.0 == key {
                *c += 1;
            }
        }
    }
}

/// Assigns each record of a sorted stream (one split's, ties in input
/// order) to its range, in order.
#[derive(Debug, Clone)]
pub struct Assigner {
    p: Partitioner,
    current: usize,
    run_key: Vec<u8>,
    /// Records of `run_key` before this one in the stream.
    rank: u64,
    started: bool,
}

impl Assigner {
    /// The range of the next record of the stream, whose key is `key`.
    pub fn range_of(&mut self, key: &[u8]) -> usize {
        if self.started && self.run_key == key {
            self.rank += 1;
        } else {
            self.run_key.clear();
            self.run_key.extend_from_slice(key);
            self.rank = 0;
            self.started = true;
        }
        while self.current < self.p.splitters.len() && !self.before(self.current, key) {
            self.current += 1;
        }
        self.current
    }

    /// Whether the current record sorts before splitter `i`.
    fn before(&self, i: usize, key: &[u8]) -> bool {
        let s = &self.p.splitters[i];
        match key.cmp(&s.key) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => match self.p.split.cmp(&s.split) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => self.rank < self.p.counts[i],
            },
        }
    }
}

/// Writes one framed block in memory: the run-file format (`runfile.rs`),
/// ended by the end marker. Its frames are stored, not compressed: a block
/// lives in memory (Ray's object store) or crosses a network, where LZ4's
/// 0.4-0.6 GB/s per core costs more than the 35-40% of bytes it saves
/// (`bench/results/2026-11-23-ray-perf.md`), and a stored frame is read in
/// place by the reduce. Each entry is written once, straight into the
/// block; a frame's header is filled in when the frame is closed.
#[derive(Debug)]
pub struct RunBlockWriter {
    out: Vec<u8>,
    /// Offset in `out` of the open frame's header (placeholder).
    frame: usize,
    entries: u32,
    records: u64,
}

impl Default for RunBlockWriter {
    fn default() -> Self {
        RunBlockWriter::new()
    }
}

impl RunBlockWriter {
    /// An empty block.
    pub fn new() -> RunBlockWriter {
        RunBlockWriter::with_buffer(Vec::new())
    }

    /// An empty block written into `buf` (its contents are dropped, its
    /// memory kept): the bytes are the same as [`RunBlockWriter::new`]'s.
    pub fn with_buffer(mut buf: Vec<u8>) -> RunBlockWriter {
        buf.clear();
        buf.extend_from_slice(MAGIC);
        RunBlockWriter {
            out: buf,
            frame: MAGIC.len(),
            entries: 0,
            records: 0,
        }
    }

    /// Appends one entry; entries must come in key order.
    pub fn push(&mut self, key: &[u8], record: &[u8]) {
        if self.entries == 0 {
            self.frame = self.out.len();
            self.out.extend_from_slice(&[0u8; HEADER_LEN]);
        }
        varint::put(&mut self.out, key.len() as u64);
        self.out.extend_from_slice(key);
        varint::put(&mut self.out, record.len() as u64);
        self.out.extend_from_slice(record);
        self.entries += 1;
        self.records += 1;
        if self.out.len() - self.frame - HEADER_LEN >= FRAME_TARGET {
            self.flush();
        }
    }

    /// Entries pushed.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Closes the open frame: its header, with the CRC of the payload.
    fn flush(&mut self) {
        if self.entries == 0 {
            return;
        }
        let payload = self.out.len() - self.frame - HEADER_LEN;
        let mut header = FrameHeader {
            raw_len: payload as u32,
            stored_len: payload as u32,
            entries: self.entries,
            method: METHOD_STORED,
            crc: 0,
        };
        header.crc = frame_crc(&header.encode(), &self.out[self.frame + HEADER_LEN..]);
        self.out[self.frame..self.frame + HEADER_LEN].copy_from_slice(&header.encode());
        self.entries = 0;
    }

    /// The block's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.flush();
        self.out.extend_from_slice(&FrameHeader::end());
        self.out
    }
}

/// Memory of finished blocks, kept for the next blocks written in this
/// process. A block written into fresh memory pays a page fault (and the
/// kernel's zeroing) for every 4 KiB it grows into, about as much CPU as
/// the map's own partitioning (`bench/results/2026-11-26-ray-one-node-index.md`);
/// a map task that hands its blocks on by copying them (the Python
/// binding copies each into a `bytes`) gives their buffers back here, and
/// the next map of the process writes into memory that is already mapped.
///
/// Bounded: at most `limit` bytes of capacity are held (the limit the
/// last [`BlockBuffers::writers`] call named; a map names its memory
/// budget, so what waits here between maps is never more than the map
/// was allowed while it ran), and at most as many buffers as that call
/// asked for writers. Nothing is charged anew: the blocks were never
/// part of the sort's budget, and a held buffer is memory the previous
/// map's blocks had already used.
#[derive(Debug)]
pub struct BlockBuffers {
    held: std::sync::Mutex<HeldBuffers>,
}

#[derive(Debug)]
struct HeldBuffers {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
    limit: usize,
    count: usize,
}

impl Default for BlockBuffers {
    fn default() -> Self {
        BlockBuffers::new()
    }
}

impl BlockBuffers {
    /// An empty pool that holds nothing until [`BlockBuffers::writers`]
    /// sets its bounds.
    pub const fn new() -> BlockBuffers {
        BlockBuffers {
            held: std::sync::Mutex::new(HeldBuffers {
                bufs: Vec::new(),
                bytes: 0,
                limit: 0,
                count: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldBuffers> {
        // A panic while holding the lock leaves a consistent pool (each
        // step below keeps `bytes` equal to the held capacities).
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `n` block writers, on held buffers (the largest first) where there
    /// are any; from now on at most `limit` bytes in at most `n` buffers
    /// are held.
    pub fn writers(&self, n: usize, limit: usize) -> Vec<RunBlockWriter> {
        let mut held = self.lock();
        held.limit = limit;
        held.count = n;
        held.bufs.sort_unstable_by_key(Vec::capacity);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let buf = match held.bufs.pop() {
                Some(b) => {
                    held.bytes -= b.capacity();
                    b
                }
                None => Vec::new(),
            };
            out.push(RunBlockWriter::with_buffer(buf));
        }
        // Buffers beyond `n` (an earlier map had more ranges) go.
        held.bufs.clear();
        held.bytes = 0;
        out
    }

    /// Keeps `buf`'s memory for a later block, within the bounds, or
    /// frees it.
    pub fn give_back(&self, buf: Vec<u8>) {
        let mut held = self.lock();
        if held.bufs.len() < held.count && held.bytes + buf.capacity() <= held.limit {
            held.bytes += buf.capacity();
            held.bufs.push(buf);
        }
    }

    /// Bytes of capacity held now.
    pub fn held_bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// The raw bytes of a block's current frame: a stored frame is read in
/// place, an LZ4 frame (as run files and older blocks have) is
/// decompressed into a buffer.
#[derive(Debug)]
enum FrameBytes {
    Stored(std::ops::Range<usize>),
    Decoded(Vec<u8>),
}

/// Reads one block front to back (a merge source), borrowing its bytes.
struct BlockReader<'a> {
    name: PathBuf,
    data: &'a [u8],
    /// Offset of the next frame header.
    next: usize,
    frame: FrameBytes,
    /// Entries of the current frame not yet read, the current one included.
    left: u32,
    /// Offset of the current entry in the frame, and its key and record.
    key: std::ops::Range<usize>,
    rec: std::ops::Range<usize>,
    pos: usize,
    done: bool,
}

impl<'a> BlockReader<'a> {
    fn open(name: PathBuf, data: &'a [u8]) -> Result<BlockReader<'a>> {
        if data.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(SortError::CorruptRun {
                path: name,
                offset: 0,
                reason: "not a framed block (bad magic)".into(),
            });
        }
        let mut r = BlockReader {
            name,
            data,
            next: MAGIC.len(),
            frame: FrameBytes::Decoded(Vec::new()),
            left: 0,
            key: 0..0,
            rec: 0..0,
            pos: 0,
            done: false,
        };
        r.load()?;
        Ok(r)
    }

    fn corrupt(&self, offset: usize, reason: &str) -> SortError {
        SortError::CorruptRun {
            path: self.name.clone(),
            offset: offset as u64,
            reason: reason.to_string(),
        }
    }

    /// The current frame's raw bytes.
    fn raw(&self) -> &[u8] {
        match &self.frame {
            FrameBytes::Stored(range) => &self.data[range.clone()],
            FrameBytes::Decoded(raw) => raw,
        }
    }

    /// Loads the entry at `pos`, reading the next frame when this one is
    /// used up.
    fn load(&mut self) -> Result<()> {
        while self.left == 0 {
            let at = self.next;
            let header_bytes: [u8; HEADER_LEN] = self
                .data
                .get(at..at + HEADER_LEN)
                .and_then(|h| h.try_into().ok())
                .ok_or_else(|| self.corrupt(at, "block ends inside a frame header (truncated)"))?;
            let header = FrameHeader::decode(&header_bytes);
            if header.method == METHOD_END {
                if frame_crc(&header_bytes, &[]) != header.crc
                    || header.raw_len != 0
                    || header.entries != 0
                {
                    return Err(self.corrupt(at, "bad end marker"));
                }
                if at + HEADER_LEN != self.data.len() {
                    return Err(self.corrupt(at, "bytes after the end marker"));
                }
                self.done = true;
                return Ok(());
            }
            let start = at + HEADER_LEN;
            let end = start + header.stored_len as usize;
            let payload = self
                .data
                .get(start..end)
                .ok_or_else(|| self.corrupt(at, "block ends inside a frame (truncated)"))?;
            self.frame = if header.method == METHOD_STORED {
                let crc = frame_crc(&header_bytes, payload);
                if crc != header.crc {
                    return Err(self.corrupt(
                        at,
                        &format!(
                            "checksum mismatch (header says {:#010x}, data gives {crc:#010x})",
                            header.crc
                        ),
                    ));
                }
                if header.raw_len != header.stored_len {
                    return Err(self.corrupt(at, "stored frame length mismatch"));
                }
                FrameBytes::Stored(start..end)
            } else {
                let buffer = match std::mem::replace(&mut self.frame, FrameBytes::Stored(0..0)) {
                    FrameBytes::Decoded(raw) => raw,
                    FrameBytes::Stored(_) => Vec::new(),
                };
                let frame = decode(
                    StoredFrame {
                        offset: at as u64,
                        header,
                        header_bytes,
                        payload: payload.to_vec(),
                    },
                    buffer,
                    &self.name,
                )?;
                FrameBytes::Decoded(frame.raw)
            };
            if header.entries == 0 {
                return Err(self.corrupt(at, "frame without entries"));
            }
            self.left = header.entries;
            self.pos = 0;
            self.next = end;
        }
        let (key, rec) = entry_at(self.raw(), self.pos).map_err(|r| {
            let offset = self.next;
            self.corrupt(offset, r)
        })?;
        self.pos = rec.end;
        self.key = key;
        self.rec = rec;
        Ok(())
    }
}

impl MergeSource for BlockReader<'_> {
    fn key(&self) -> Option<&[u8]> {
        (!self.done).then(|| &self.raw()[self.key.clone()])
    }

    fn record(&self) -> &[u8] {
        &self.raw()[self.rec.clone()]
    }

    fn advance(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.left -= 1;
        if self.left == 0 && self.pos != self.raw().len() {
            return Err(self.corrupt(self.next, "frame holds bytes past its entries"));
        }
        self.load()
    }
}

/// The merge of one range's blocks ([`merge_blocks`]).
pub struct BlockMerge<'a> {
    tree: LoserTree<BlockReader<'a>>,
    started: bool,
    records: u64,
}

impl BlockMerge<'_> {
    /// The next `(key, record)` in order, `None` at the end.
    pub fn next_entry(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.started {
            self.tree.pop()?;
        }
        self.started = true;
        let entry = self.tree.peek();
        if entry.is_some() {
            self.records += 1;
        }
        Ok(entry)
    }

    /// Records handed out so far.
    pub fn records(&self) -> u64 {
        self.records
    }
}

/// Merges the blocks of one range, given in split order (ties keep that
/// order), reading them in place. `names` name the blocks in errors (e.g.
/// "range 2, split 5").
pub fn merge_blocks<'a>(
    blocks: &[&'a [u8]],
    names: Vec<String>,
    key_kind: KeyKind,
) -> Result<BlockMerge<'a>> {
    let mut sources = Vec::with_capacity(blocks.len());
    for (i, &block) in blocks.iter().enumerate() {
        let name = names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("block {i}"));
        sources.push(BlockReader::open(PathBuf::from(name), block)?);
    }
    Ok(BlockMerge {
        tree: LoserTree::new(sources, key_kind == KeyKind::Fixed8),
        started: false,
        records: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }

    /// A record's position in its split: increasing with input order but
    /// not an ordinal (like a virtual offset: gaps, never 0).
    fn pos(i: usize) -> u64 {
        ((i as u64 + 1) << 16) | (i as u64 * 37 % 500)
    }

    /// Sorts `(key, input position)` pairs of several splits on one node,
    /// and the distributed way (each split sorted alone, assigned to
    /// ranges, blocks merged per range): the records must come out the
    /// same, and the ranges must be balanced.
    fn distributed_equals_single(splits: &[Vec<u64>], partitions: usize, samples_per_split: usize) {
        // Single node: stable sort of everything in input order.
        let mut all: Vec<(u64, u32, u64)> = Vec::new();
        for (s, keys) in splits.iter().enumerate() {
            for (i, &k) in keys.iter().enumerate() {
                all.push((k, s as u32, i as u64));
            }
        }
        let mut want = all.clone();
        want.sort_by_key(|e| e.0);

        // Samples: evenly spaced records of each split.
        let mut samples = Vec::new();
        for (s, keys) in splits.iter().enumerate() {
            let step = (keys.len() / samples_per_split).max(1);
            for i in (0..keys.len()).step_by(step) {
                samples.push(Splitter {
                    key: key(keys[i]),
                    split: s as u32,
                    position: pos(i),
                });
            }
        }
        let encoded: Vec<Vec<u8>> = samples.iter().map(Splitter::encode).collect();
        let decoded: Vec<Splitter> = encoded
            .iter()
            .map(|b| Splitter::decode(b).expect("decodes"))
            .collect();
        assert_eq!(decoded, samples);
        let splitters = splitters_from_samples(decoded, partitions);
        assert_eq!(splitters.len(), partitions - 1, "{splitters:?}");

        let mut blocks: Vec<Vec<Vec<u8>>> = vec![Vec::new(); partitions];
        for (s, keys) in splits.iter().enumerate() {
            let mut p = Partitioner::new(splitters.clone(), s as u32).expect("partitioner");
            // Half the records noted directly, the rest through two
            // tallies (as parallel decode jobs do), out of order.
            let (mut t1, mut t2) = (p.tally(), p.tally());
            for (i, &k) in keys.iter().enumerate().rev() {
                match i % 4 {
                    0 | 1 => p.observe(&key(k), pos(i)),
                    2 => t1.observe(&key(k), pos(i)),
                    _ => t2.observe(&key(k), pos(i)),
                }
            }
            p.add(&t1);
            p.add(&t2);
            let mut sorted: Vec<(u64, u64)> = keys
                .iter()
                .enumerate()
                .map(|(i, &k)| (k, i as u64))
                .collect();
            sorted.sort_by_key(|e| e.0);
            let mut writers: Vec<RunBlockWriter> =
                (0..partitions).map(|_| RunBlockWriter::new()).collect();
            let mut assigner = p.into_assigner();
            let mut last = 0;
            for (k, i) in sorted {
                let r = assigner.range_of(&key(k));
                assert!(r >= last, "ranges never go back");
                last = r;
                let mut rec = (s as u32).to_le_bytes().to_vec();
                rec.extend_from_slice(&i.to_le_bytes());
                writers[r].push(&key(k), &rec);
            }
            for (r, w) in writers.into_iter().enumerate() {
                blocks[r].push(w.finish());
            }
        }
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        for range in blocks {
            let n = range.len();
            let refs: Vec<&[u8]> = range.iter().map(Vec::as_slice).collect();
            let mut m =
                merge_blocks(&refs, vec![String::new(); n], KeyKind::Fixed8).expect("merge");
            let before = got.len();
            while let Some((k, rec)) = m.next_entry().expect("entry") {
                let k = u64::from_be_bytes(k.try_into().expect("8 bytes"));
                let s = u32::from_le_bytes(rec[..4].try_into().expect("4"));
                let i = u64::from_le_bytes(rec[4..].try_into().expect("8"));
                got.push((k, s, i));
            }
            sizes.push(got.len() - before);
        }
        assert_eq!(got, want);
        let share = want.len() / partitions;
        for &size in &sizes {
            assert!(
                size >= share / 2 && size <= share * 2,
                "unbalanced ranges {sizes:?} (share {share})"
            );
        }
    }

    #[test]
    fn a_file_of_one_key_is_cut_into_even_ranges_in_input_order() {
        let splits = vec![vec![7u64; 1000], vec![7; 800], vec![7; 1200]];
        distributed_equals_single(&splits, 4, 50);
    }

    #[test]
    fn a_hot_key_among_others_keeps_the_single_node_order() {
        let mut rng = crate::test_support::XorShift64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = || rng.next_u64();
        let splits: Vec<Vec<u64>> = (0..3)
            .map(|_| {
                (0..900)
                    .map(|_| {
                        let r = next();
                        // Two thirds of the records share the largest key
                        // (like unmapped reads in coordinate order).
                        if r % 3 != 0 {
                            u64::MAX
                        } else {
                            r % 500
                        }
                    })
                    .collect()
            })
            .collect();
        distributed_equals_single(&splits, 5, 60);
    }

    #[test]
    fn key_only_cuts_need_no_counting() {
        let samples: Vec<Splitter> = (0..100u64)
            .map(|i| Splitter {
                key: key(i),
                split: (i % 3) as u32,
                position: i,
            })
            .collect();
        let splitters = splitters_from_samples(samples, 4);
        assert_eq!(splitters.len(), 3);
        assert!(splitters.iter().all(|s| s.split == 0 && s.position == 0));
        let p = Partitioner::new(splitters, 1).expect("partitioner");
        assert!(!p.needs_observe());
    }

    #[test]
    fn unordered_splitters_are_refused() {
        let s = |k| Splitter {
            key: key(k),
            split: 0,
            position: 0,
        };
        assert!(Partitioner::new(vec![s(5), s(5)], 0).is_err());
        assert!(Partitioner::new(vec![s(5), s(4)], 0).is_err());
    }

    fn block_of(w: &mut RunBlockWriter, n: u64) {
        for i in 0..n {
            w.push(&key(i), &vec![(i % 251) as u8; 40 + (i % 7) as usize]);
        }
    }

    #[test]
    fn a_block_in_reused_memory_has_the_bytes_of_a_fresh_one() {
        let mut fresh = RunBlockWriter::new();
        block_of(&mut fresh, 20_000);
        let want = fresh.finish();
        // A buffer holding an earlier, larger block, and a small one that
        // has to grow.
        for old in [vec![0xabu8; want.len() * 2], vec![0x5au8; 100]] {
            let mut w = RunBlockWriter::with_buffer(old);
            block_of(&mut w, 20_000);
            assert!(w.finish() == want);
        }
    }

    #[test]
    fn block_buffers_are_reused_within_their_bounds() {
        let pool = BlockBuffers::new();
        // Nothing is held before a map has named the bounds.
        pool.give_back(Vec::with_capacity(1000));
        assert_eq!(pool.held_bytes(), 0);
        let blocks: Vec<Vec<u8>> = pool
            .writers(3, 100_000)
            .into_iter()
            .map(|mut w| {
                block_of(&mut w, 50);
                w.finish()
            })
            .collect();
        let caps: Vec<usize> = blocks.iter().map(Vec::capacity).collect();
        let ptrs: Vec<*const u8> = blocks.iter().map(|b| b.as_ptr()).collect();
        for b in blocks {
            pool.give_back(b);
        }
        assert_eq!(pool.held_bytes(), caps.iter().sum::<usize>());
        // The next map writes into the same memory, and the blocks' bytes
        // do not depend on it.
        let again: Vec<Vec<u8>> = pool
            .writers(3, 100_000)
            .into_iter()
            .map(|mut w| {
                block_of(&mut w, 50);
                w.finish()
            })
            .collect();
        assert_eq!(pool.held_bytes(), 0);
        let mut reused: Vec<*const u8> = again.iter().map(|b| b.as_ptr()).collect();
        let mut before = ptrs.clone();
        reused.sort();
        before.sort();
        assert_eq!(reused, before);
        let mut fresh = RunBlockWriter::new();
        block_of(&mut fresh, 50);
        let want = fresh.finish();
        assert!(again.iter().all(|b| *b == want));
        // Over the byte limit, or more buffers than writers asked for:
        // freed, not held.
        pool.give_back(Vec::with_capacity(200_000));
        assert_eq!(pool.held_bytes(), 0);
        for b in again {
            pool.give_back(b);
        }
        pool.give_back(Vec::with_capacity(10));
        assert_eq!(pool.held_bytes(), caps.iter().sum::<usize>());
        // A map with fewer ranges takes what it needs; the rest is freed.
        assert_eq!(pool.writers(1, 100_000).len(), 1);
        assert_eq!(pool.held_bytes(), 0);
    }

    #[test]
    fn a_damaged_block_is_an_error_naming_it() {
        let mut w = RunBlockWriter::new();
        for i in 0..1000u64 {
            w.push(&key(i), &[7u8; 40]);
        }
        let mut block = w.finish();
        let mid = block.len() / 2;
        block[mid] ^= 0x40;
        let e = match merge_blocks(&[&block], vec!["range 1, split 2".into()], KeyKind::Fixed8) {
            Ok(mut m) => loop {
                match m.next_entry() {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("a damaged block merged"),
                    Err(e) => break e,
                }
            },
            Err(e) => e,
        };
        assert!(e.to_string().contains("range 1, split 2"), "{e}");
        let e = merge_blocks(&[b"junk"], vec!["b".into()], KeyKind::Fixed8)
            .err()
            .expect("bad magic");
        assert!(e.to_string().contains("magic"), "{e}");
    }

    /// The methods of a block's frames, in order (the end marker last).
    fn frame_methods(block: &[u8]) -> Vec<u8> {
        let mut at = MAGIC.len();
        let mut out = Vec::new();
        while at < block.len() {
            let h: [u8; HEADER_LEN] = block[at..at + HEADER_LEN].try_into().expect("header");
            let h = FrameHeader::decode(&h);
            out.push(h.method);
            at += HEADER_LEN + h.stored_len as usize;
        }
        out
    }

    #[test]
    fn blocks_hold_stored_frames_and_compressed_frames_still_merge() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..6000u64)
            .map(|i| (key(i * 2), vec![(i % 251) as u8; 60 + (i % 7) as usize]))
            .collect();
        let mut w = RunBlockWriter::new();
        for (k, r) in &entries {
            w.push(k, r);
        }
        let block = w.finish();
        let methods = frame_methods(&block);
        assert!(methods.len() > 2, "several frames: {methods:?}");
        assert_eq!(methods.last(), Some(&METHOD_END));
        assert!(
            methods[..methods.len() - 1]
                .iter()
                .all(|&m| m == METHOD_STORED),
            "{methods:?}"
        );
        // The same entries as compressed frames (the run files' encoding,
        // zstd), and a second block interleaved with the first: the merge
        // reads both.
        let mut lz4 = MAGIC.to_vec();
        let mut frame = Vec::new();
        for part in entries.chunks(1000) {
            let mut raw = Vec::new();
            for (k, r) in part {
                varint::put(&mut raw, k.len() as u64);
                raw.extend_from_slice(&key(u64::from_be_bytes(k[..].try_into().unwrap()) + 1));
                varint::put(&mut raw, r.len() as u64);
                raw.extend_from_slice(r);
            }
            let len = crate::runfile::encode_frame(&raw, part.len() as u32, &mut frame);
            lz4.extend_from_slice(&frame[..len]);
        }
        lz4.extend_from_slice(&FrameHeader::end());
        assert!(frame_methods(&lz4).contains(&crate::runfile::METHOD_ZSTD));
        let mut m = merge_blocks(&[&block, &lz4], vec![], KeyKind::Fixed8).expect("merge");
        let mut got = Vec::new();
        while let Some((k, r)) = m.next_entry().expect("entry") {
            got.push((u64::from_be_bytes(k.try_into().expect("8")), r.to_vec()));
        }
        let mut want: Vec<(u64, Vec<u8>)> = entries
            .iter()
            .flat_map(|(k, r)| {
                let k = u64::from_be_bytes(k[..].try_into().unwrap());
                [(k, r.clone()), (k + 1, r.clone())]
            })
            .collect();
        want.sort_by_key(|e| e.0);
        assert_eq!(got, want);
    }
}
