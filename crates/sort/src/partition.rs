//! The final merge split by key range, so that every core merges.
//!
//! One loser tree over all sources is one thread's work however many
//! compressors it feeds. Here the merged stream is cut into partitions that
//! pool jobs merge independently; the consumer concatenates their outputs
//! in order.
//!
//! **Where to cut.** The single merge's order is the triple (key, source,
//! position in source): ties go to the lower source, and each source is
//! stable. A cut is one such triple `(k, s, p)`; in source `i` it falls at
//!
//! * the first position whose key is `> k` when `i < s`,
//! * the first position whose key is `>= k` when `i > s`,
//! * position `p` when `i == s`.
//!
//! Everything before a cut precedes everything after it in the single
//! merge's order, so merging each partition alone and concatenating gives
//! that merge's stream exactly: the output is the same bytes for every
//! thread count and partition size (tested in `tests.rs`). Because the
//! source and position take part, a long run of equal keys is cut like any
//! other stretch, and no partition can grow without bound.
//!
//! **Choosing cuts.** Candidates are records whose key is known without
//! reading anything: the first entry of every run frame (the run's sparse
//! index, `runfile::FrameInfo`) and evenly spaced entries of the in-memory
//! sub-batches, each weighed by the bytes up to its source's next
//! candidate. In merge order, a cut is placed every `partition_bytes` of
//! weight.
//!
//! **Sharing work.** A cut inside a run frame needs that frame decoded.
//! Each cut is computed once, by whichever of its two partitions asks
//! first (the other waits on the cut's lock), and forgotten when both are
//! done with it; decoded frames are shared through a per-run cache of weak
//! references, so a frame that straddles a cut is normally decompressed
//! once. Runs are read with `pread`, one descriptor per run
//! shared by all jobs.
//!
//! **Ordering and memory.** The consumer queues each partition's result
//! slot before dispatching its job (ARCHITECTURE.md) and keeps at most
//! `lookahead` partitions in flight. A partition's output is a list of
//! references, not copies: batch entries by number, run entries by byte
//! range in decoded frames that the output keeps alive until consumed, so
//! no record byte is copied between the sources and the writer. A lost job
//! is an error. Dropping the consumer cancels the jobs in flight and waits
//! for them, so run files are deleted when it returns.

mod source;
mod stream;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Result, SortError};
use crate::loser::LoserTree;
use crate::meter::Meter;
use crate::runread::entry_at;

use source::{cursor, Cursor, FrameBuf, Spare};
pub(crate) use source::{PartSource, RunSource};
pub use stream::Chunk;
#[cfg(test)]
use stream::Item;
pub(crate) use stream::{Partitioned, Segment};

/// Records a partition merges between looks at the cancel flag.
const CANCEL_CHECK_INTERVAL: u64 = 1 << 12;

/// Where a cut falls in one source.
#[derive(Clone)]
enum Pos {
    /// Entry index of a sorted batch.
    Batch(usize),
    /// Entry `entry` of frame `frame`, at byte `byte` of its raw bytes
    /// (`frame == frames` is the end); `data` is the decoded frame when the
    /// cut is inside it.
    Run {
        frame: usize,
        entry: u32,
        byte: usize,
        data: Option<Arc<FrameBuf>>,
    },
}

impl Pos {
    fn frame_start(frame: usize) -> Pos {
        Pos::Run {
            frame,
            entry: 0,
            byte: 0,
            data: None,
        }
    }
}

/// A cut candidate and, once chosen, a cut: `(key, source, position)`.
struct Splitter {
    key: Box<[u8]>,
    source: usize,
    /// Frame number for a run, entry index for a batch.
    pos: usize,
    /// Bytes from here to the source's next candidate.
    weight: u64,
}

/// A cut, computed by the first of its two partitions to ask and
/// forgotten when both are done with it (it may hold decoded frames).
struct CutCell {
    state: Mutex<CutState>,
    /// Partitions that have not yet finished with it.
    users: AtomicUsize,
}

enum CutState {
    Unknown,
    Known(Arc<Vec<Pos>>),
    Failed(Arc<SortError>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What every partition job reads.
pub(crate) struct Shared {
    sources: Vec<PartSource>,
    splitters: Vec<Splitter>,
    /// Cut `i` starts partition `i`; cut 0 is every source's start and the
    /// last is every source's end.
    cuts: Vec<CutCell>,
    fixed_keys: bool,
    cancel: AtomicBool,
    spare: Spare,
}

/// Frame buffers kept for reuse: as many as the jobs in flight (and the one
/// being consumed) can hold at once, a raw frame per run for the cursor and
/// for the end cut plus a stored buffer, so that decoding rarely goes to the
/// allocator once warm. The CLI pins glibc's mmap threshold at 128 KiB, so
/// every fresh frame buffer is a new mapping and ~50 page faults: on the
/// 697 MB benchmark at `-m 100M -@2` (20 runs), system time was 3.8 and
/// 3.0 s with two spares per job, 2.9 and 2.6 s with this many.
fn spare_buffers(sources: &[PartSource], jobs: usize) -> usize {
    let runs = sources
        .iter()
        .filter(|s| matches!(s, PartSource::Run(_)))
        .count();
    (jobs + 1) * (2 * runs + 2)
}

impl Shared {
    /// Chooses cuts about `partition_bytes` apart over `sources`, for a
    /// merge with `jobs` partitions in flight.
    pub(crate) fn new(
        sources: Vec<PartSource>,
        fixed_keys: bool,
        partition_bytes: u64,
        jobs: usize,
        meter: &Arc<Meter>,
    ) -> Self {
        let splitters = choose_splitters(&sources, partition_bytes.max(1));
        let spare = Spare::new(meter, spare_buffers(&sources, jobs));
        let cuts = (0..splitters.len() + 2)
            .map(|_| CutCell {
                state: Mutex::new(CutState::Unknown),
                users: AtomicUsize::new(2),
            })
            .collect();
        Shared {
            sources,
            splitters,
            cuts,
            fixed_keys,
            cancel: AtomicBool::new(false),
            spare,
        }
    }

    /// Number of partitions.
    pub(crate) fn partitions(&self) -> usize {
        self.splitters.len() + 1
    }

    /// Cut `i`'s position in every source. The cell stays locked while
    /// the cut is computed, so the other partition that needs it waits for
    /// this one instead of decoding the same frames.
    fn cut(&self, i: usize) -> Result<Arc<Vec<Pos>>> {
        let mut state = lock(&self.cuts[i].state);
        match &*state {
            CutState::Known(cut) => return Ok(Arc::clone(cut)),
            CutState::Failed(e) => return Err(SortError::Shared(Arc::clone(e))),
            CutState::Unknown => {}
        }
        match self.compute_cut(i) {
            Ok(cut) => {
                let cut = Arc::new(cut);
                *state = CutState::Known(Arc::clone(&cut));
                Ok(cut)
            }
            Err(e) => {
                let e = Arc::new(e);
                *state = CutState::Failed(Arc::clone(&e));
                Err(SortError::Shared(e))
            }
        }
    }

    /// One of cut `i`'s partitions is done with it.
    fn done_with_cut(&self, i: usize) {
        if self.cuts[i].users.fetch_sub(1, Ordering::AcqRel) == 1 {
            *lock(&self.cuts[i].state) = CutState::Unknown;
        }
    }

    fn compute_cut(&self, i: usize) -> Result<Vec<Pos>> {
        let last = self.splitters.len() + 1;
        self.sources
            .iter()
            .enumerate()
            .map(|(s, source)| match (source, i) {
                (PartSource::Batch(_), 0) => Ok(Pos::Batch(0)),
                (PartSource::Batch(b), i) if i == last => Ok(Pos::Batch(b.len())),
                (PartSource::Run(_), 0) => Ok(Pos::frame_start(0)),
                (PartSource::Run(r), i) if i == last => Ok(Pos::frame_start(r.frames().len())),
                (source, i) => self.place(source, s, &self.splitters[i - 1]),
            })
            .collect()
    }

    /// Where splitter `sp` cuts source number `s`.
    fn place(&self, source: &PartSource, s: usize, sp: &Splitter) -> Result<Pos> {
        let k: &[u8] = &sp.key;
        // Whether an entry with this key lies before the cut.
        let before = |key: &[u8]| {
            if s < sp.source {
                key <= k
            } else {
                key < k
            }
        };
        match source {
            PartSource::Batch(_) if s == sp.source => Ok(Pos::Batch(sp.pos)),
            PartSource::Run(_) if s == sp.source => Ok(Pos::frame_start(sp.pos)),
            PartSource::Batch(b) => {
                let mut buf = [0u8; 8];
                let mut lo = 0;
                let mut hi = b.len();
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if before(b.key_and_record(mid, &mut buf).0) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                Ok(Pos::Batch(lo))
            }
            PartSource::Run(r) => {
                let frames = r.frames();
                let f = frames.partition_point(|fi| before(&fi.first_key));
                if f == 0 {
                    return Ok(Pos::frame_start(0));
                }
                let data = r.frame(f - 1, &self.spare)?;
                let mut byte = 0;
                for entry in 0..frames[f - 1].entries {
                    let (key, record) =
                        entry_at(&data.raw, byte).map_err(|reason| corrupt(r, f - 1, reason))?;
                    if !before(&data.raw[key]) {
                        return Ok(Pos::Run {
                            frame: f - 1,
                            entry,
                            byte,
                            data: Some(data),
                        });
                    }
                    byte = record.end;
                }
                Ok(Pos::frame_start(f))
            }
        }
    }
}

fn corrupt(r: &RunSource, frame: usize, reason: &str) -> SortError {
    SortError::CorruptRun {
        path: r.run.path().to_path_buf(),
        offset: r.frames()[frame].offset,
        reason: reason.to_string(),
    }
}

/// Candidates in merge order, then a cut every `partition_bytes` of weight.
fn choose_splitters(sources: &[PartSource], partition_bytes: u64) -> Vec<Splitter> {
    // Batches are sampled about as densely as runs are framed, and at least
    // eight times per partition so partitions come out near their target.
    let frame_bytes = sources
        .iter()
        .find_map(|s| match s {
            PartSource::Run(r) => r.frames().first().map(|f| u64::from(f.raw_len)),
            PartSource::Batch(_) => None,
        })
        .unwrap_or(u64::MAX);
    let sample_bytes = (partition_bytes / 8).clamp(1, frame_bytes.max(1));
    let mut candidates = Vec::new();
    for (s, source) in sources.iter().enumerate() {
        match source {
            PartSource::Run(r) => {
                candidates.extend(r.frames().iter().enumerate().map(|(i, f)| Splitter {
                    key: f.first_key.clone(),
                    source: s,
                    pos: i,
                    weight: u64::from(f.raw_len),
                }));
            }
            PartSource::Batch(b) if !b.is_empty() => {
                let len = b.len() as u64;
                let bytes = b.raw_bytes();
                let step = (len * sample_bytes / bytes.max(1)).clamp(1, len);
                let mut buf = [0u8; 8];
                for i in (0..len).step_by(step as usize) {
                    let n = step.min(len - i);
                    candidates.push(Splitter {
                        key: b.key_and_record(i as usize, &mut buf).0.into(),
                        source: s,
                        pos: i as usize,
                        weight: bytes * n / len,
                    });
                }
            }
            PartSource::Batch(_) => {}
        }
    }
    candidates.sort_unstable_by(|a, b| {
        a.key
            .cmp(&b.key)
            .then(a.source.cmp(&b.source))
            .then(a.pos.cmp(&b.pos))
    });
    let mut cuts = Vec::new();
    let mut acc = 0u64;
    for c in candidates {
        if acc >= partition_bytes {
            // `c` starts the next partition.
            acc = c.weight;
            cuts.push(c);
        } else {
            acc += c.weight;
        }
    }
    cuts
}

impl Shared {
    /// Merges partition `p` into `seg`.
    fn merge_partition(&self, p: usize, seg: &mut Segment) -> Result<()> {
        seg.clear();
        let from = self.cut(p)?;
        let to = self.cut(p + 1)?;
        let cursors = (0..self.sources.len())
            .map(|s| cursor(&self.sources[s], s, &self.spare, &from[s], &to[s]))
            .collect::<Result<Vec<_>>>()?;
        drop((from, to));
        let mut tree = LoserTree::new(cursors, self.fixed_keys);
        let mut merged = 0u64;
        while let Some(winner) = tree.winner_mut() {
            winner.emit(seg)?;
            tree.pop()?;
            merged += 1;
            if merged.is_multiple_of(CANCEL_CHECK_INTERVAL) && self.cancel.load(Ordering::Relaxed) {
                return Err(SortError::Cancelled);
            }
        }
        for c in tree.into_sources() {
            if let Cursor::Run(mut r) = c {
                r.release();
            }
        }
        self.done_with_cut(p);
        self.done_with_cut(p + 1);
        seg.sum_lengths();
        seg.charge.set(seg.list_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Batch;
    use crate::KeyKind;

    /// Merges every partition of `shared` and returns each one's records.
    fn partitions(shared: &Shared) -> Vec<Vec<Vec<u8>>> {
        let meter = Arc::new(Meter::default());
        (0..shared.partitions())
            .map(|p| {
                let mut seg = Segment::new(&meter);
                shared.merge_partition(p, &mut seg).expect("merge");
                seg.items
                    .iter()
                    .map(|item| match *item {
                        Item::Batch { source, index, .. } => match &shared.sources[source as usize]
                        {
                            PartSource::Batch(b) => b.entry(index as usize).2.to_vec(),
                            PartSource::Run(_) => panic!("batch item names a run"),
                        },
                        Item::Run { .. } => panic!("no runs in this test"),
                    })
                    .collect()
            })
            .collect()
    }

    /// Three sorted batches whose keys are nearly all equal: the cuts must
    /// fall inside the stretch of equal keys (by source and position), so
    /// that every partition stays near its target size, and the partitions
    /// laid end to end must be the stable merge.
    #[test]
    fn equal_keys_are_cut_into_bounded_partitions() {
        let meter = Arc::new(Meter::default());
        let mut sources = Vec::new();
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut n = 0u32;
        for _ in 0..3 {
            let mut b = Batch::new(KeyKind::Variable, 1 << 20);
            for i in 0..2_000u32 {
                let key: &[u8] = if i % 97 == 0 { b"a" } else { b"same" };
                let mut record = n.to_be_bytes().to_vec();
                record.resize(40 + (i as usize % 20), 7);
                assert!(b.try_push(key, &record));
                want.push((key.to_vec(), record));
                n += 1;
            }
            b.sort();
            sources.push(PartSource::Batch(b));
        }
        // Stable sort of the concatenation = the merge of the sorted
        // batches with ties to the lower source.
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let target = 2_000u64;
        let shared = Shared::new(sources, false, target, 2, &meter);
        let parts = partitions(&shared);
        let total: usize = want.iter().map(|(k, r)| k.len() + r.len()).sum();
        assert!(
            parts.len() as u64 >= total as u64 / (2 * target),
            "{} partitions for {total} bytes",
            parts.len()
        );
        for (p, part) in parts.iter().enumerate() {
            let bytes: usize = part.iter().map(|r| r.len() + 4).sum();
            assert!(
                bytes as u64 <= 2 * target,
                "partition {p} holds {bytes} bytes, target {target}"
            );
        }
        let got: Vec<Vec<u8>> = parts.into_iter().flatten().collect();
        let want: Vec<Vec<u8>> = want.into_iter().map(|(_, r)| r).collect();
        assert_eq!(got, want);
    }
}
