//! The [`Sorter`]: takes `(key, record)` pairs, keeps them in sub-batches
//! sorted on the pool as they fill, spills full chunks as run files on a
//! background thread while input keeps arriving, keeps the number of runs
//! within `max_open_runs` with background fan-in merges, and hands the last
//! chunk plus the runs to the final merge.
//!
//! Spills overlap reading, and take a share of the chunk at a time
//! (`Plan::spill_sub_batches`, see also `plan.rs`):
//!
//! * The first chunk fills the whole chunk budget, so an input that fits is
//!   never spilled.
//! * When it is full, its oldest share of sub-batches is spilled and `push`
//!   waits for that (the budget is full: there is nothing to read into),
//!   then the next share is handed to a background spill thread and `push`
//!   goes on reading into the room the first spill freed. The rest of the
//!   chunk stays in memory.
//! * From then on, whenever no spill is in flight and no more than a share
//!   of the chunk is free, the oldest share of closed sub-batches is handed
//!   to a new background spill, and `push` reads into the free share
//!   meanwhile. When the chunk is full while a spill is in flight, `push`
//!   waits for it (memory stays bounded). `SortStats::spill_wait_ns`
//!   counts these waits.
//! * So memory keeps the chunk less at most two shares (the one being
//!   written and the one free to read into) of the newest records, and
//!   what is in memory when the input ends is never written: the spilled
//!   records are the input less about a chunk, as for a sorter that keeps
//!   its whole last buffer. A share of half the chunk was the earlier
//!   "double-buffer mode" (chunks of half the budget, each spilled while
//!   the other fills), which kept only the filling half at the end.
//! * A background spill's error (ENOSPC, a failed write, a vanished temp
//!   directory) is kept by its thread and returned by the next `push` that
//!   closes a sub-batch, or by `finish`; the sorter is then failed.
//!
//! Invariants (the stability contract of ARCHITECTURE.md):
//! * sub-batches are consecutive slices of the input, closed in order;
//! * a spill merges consecutive sub-batches, the oldest closed ones, in
//!   order, into one run; at most one spill is in flight and its run is
//!   appended before the next spill starts, so runs are kept in input
//!   order, and every record still in memory follows every run's;
//! * a fan-in merges *consecutive* runs and its output takes their place
//!   (a spill's run is appended after it, which leaves the place valid);
//! * the final merge reads runs first, then the sub-batches in memory.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

#[cfg(test)]
use crossbeam_channel::Receiver;
use rayon::ThreadPool;

use crate::batch::{Batch, Lent};
use crate::durable::{RunHook, SpilledRun};
use crate::error::{Result, SortError};
use crate::loser::LoserTree;
use crate::merge::{merge_into_run, BatchCursor, FinalMerge, Merged, Source};
use crate::meter::{Charge, Meter};
use crate::partition::{PartSource, Partitioned, RunSource, Shared};
use crate::plan::{ensure_space, Plan};
use crate::runfile::{RunMeta, RunWriter, TempRun};
use crate::runread::RunReader;
use crate::{ChunkFill, KeyKind, SortConfig, SortStats};

/// Smallest automatic final-merge partition: below this the per-partition
/// work (cuts, a loser tree, a pool hand-off) is no longer noise next to
/// the merging itself.
const MIN_PARTITION_BYTES: usize = 64 << 10;

/// Largest automatic final-merge partition. 16 MiB is about 2,000 BGZF
/// blocks of output: enough to amortise every per-partition cost, while
/// `threads + 2` of them in memory stay small next to a multi-GiB budget.
const MAX_PARTITION_BYTES: usize = 16 << 20;

/// Bytes of the filling sub-batch's record buffer that a pool job makes
/// resident at a time, and how far ahead of the records it stays (see
/// [`Sorter::prefault_ahead`]).
const PREFAULT_STEP: usize = 4 << 20;
const PREFAULT_AHEAD: usize = 8 << 20;

/// A finished run file in the sorter's ordered list.
struct Run {
    file: TempRun,
    meta: RunMeta,
    /// How many run files its records have been written to (1 = spilled).
    depth: u32,
}

/// A background merge of consecutive runs.
struct FanIn {
    /// Where its output goes in `runs`.
    position: usize,
    depth: u32,
    cancel: Arc<AtomicBool>,
    handle: JoinHandle<Result<(TempRun, RunMeta)>>,
}

/// A fan-in about to run: the runs taken out of the list, where the output
/// goes back, and the created output file.
struct FanInJob {
    position: usize,
    depth: u32,
    inputs: Vec<Run>,
    out: (TempRun, File),
}

/// A sub-batch sort job: its record copies finished, then sorted. A lost
/// copy job is the sort's error.
type Sorting = alnsort_pipeline::Slot<std::result::Result<Batch, alnsort_pipeline::Lost>>;

/// A closed sub-batch: sorting on the pool (or sorted), and the bytes it
/// charges against the budget.
struct Closed {
    sorted: Sorting,
    bytes: usize,
    /// Records in it.
    records: u64,
    /// What it counts against the chunk (see [`crate::ChunkFill`]).
    fill: usize,
}

/// Consecutive closed sub-batches on their way into one run.
struct SpillJob {
    batches: Vec<Sorting>,
    dir: PathBuf,
    /// First run-file sequence number to try.
    seq: u64,
    /// What the batches charge; released when the spill ends.
    charge: Charge,
    /// Records in its batches, and in them and every earlier run.
    records: u64,
    records_end: u64,
    /// Called with the finished run (`durable.rs`).
    hook: Option<RunHook>,
    /// Test seam: the spill waits for a message (or a hang-up) here once
    /// its batches are sorted, so tests can hold a spill in flight.
    #[cfg(test)]
    gate: Option<Receiver<()>>,
}

/// What a finished spill hands back: its run, its batches emptied for
/// reuse and, when it was stopped, the batches of the records it did not
/// write, with what they charge.
struct Spilled {
    file: TempRun,
    meta: RunMeta,
    batches: Vec<Batch>,
    /// Sorted batches holding the records after the run's last, in source
    /// order (empty unless stopped).
    rest: Vec<Batch>,
    rest_bytes: usize,
    /// Charges `rest_bytes` until the sorter charges them itself.
    _rest_charge: Charge,
}

/// A spill running on its own thread.
struct Spill {
    /// Sub-batches it holds, and what they count against the chunk.
    sub_batches: usize,
    fill: usize,
    cancel: Arc<AtomicBool>,
    /// Set by `finish`: end the run after the record being written and
    /// hand the unwritten records back (see [`Sorter::finish`]).
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Spilled>>,
}

/// What a merge needs besides its inputs; cloned into background threads.
#[derive(Clone)]
struct MergeContext {
    pool: Arc<ThreadPool>,
    meter: Arc<Meter>,
    frame_bytes: usize,
    fixed_keys: bool,
}

impl MergeContext {
    /// Merges `inputs` (consecutive runs, in order) into the created file.
    fn merge_runs(
        &self,
        inputs: Vec<Run>,
        out: (TempRun, File),
        cancel: Option<&AtomicBool>,
    ) -> Result<(TempRun, RunMeta)> {
        let mut sources = Vec::with_capacity(inputs.len());
        for run in inputs {
            sources.push(Source::Run(RunReader::open(
                run.file,
                Arc::clone(&self.pool),
                &self.meter,
            )?));
        }
        let writer = RunWriter::new(out, Arc::clone(&self.pool), self.frame_bytes, &self.meter)?;
        let mut tree = LoserTree::new(sources, self.fixed_keys);
        merge_into_run(&mut tree, writer, cancel, None)
    }

    /// Waits for the job's sub-batch sorts, checks the temp filesystem has
    /// room, and merges the batches, in order, into a new run.
    fn spill(&self, job: SpillJob, cancel: &AtomicBool, stop: &AtomicBool) -> Result<Spilled> {
        let batches = job
            .batches
            .into_iter()
            .map(|slot| Ok(slot.wait(&self.pool, "sub-batch sort")??))
            .collect::<Result<Vec<Batch>>>()?;
        #[cfg(test)]
        if let Some(gate) = &job.gate {
            // A message or the sender's hang-up both open the gate.
            let _ = gate.recv();
        }
        let needed: u64 = batches.iter().map(Batch::raw_bytes).sum();
        ensure_space(&job.dir, needed)?;
        let mut seq = job.seq;
        let out = TempRun::create(&job.dir, &mut seq)?;
        if cancel.load(Ordering::Relaxed) {
            return Err(SortError::Cancelled);
        }
        let writer = RunWriter::new(out, Arc::clone(&self.pool), self.frame_bytes, &self.meter)?;
        let sources = batches
            .into_iter()
            .map(|b| Source::Batch(BatchCursor::new(b)))
            .collect();
        let mut tree = LoserTree::new(sources, self.fixed_keys);
        let (file, meta) = merge_into_run(&mut tree, writer, Some(cancel), Some(stop))?;
        // A stopped spill (never with a hook: `finish` waits for it then)
        // holds a prefix of the merged order, not of the input.
        if let Some(hook) = job.hook.as_ref().filter(|_| meta.records == job.records) {
            hook(&SpilledRun {
                path: file.path(),
                records: meta.records,
                records_end: job.records_end,
            })
            .map_err(|source| SortError::Durable {
                path: file.path().to_path_buf(),
                source,
            })?;
        }
        // A stopped spill's batches keep the records it did not write, in
        // order after the run's; an unstopped one's are all written.
        let (mut batches, mut rest) = (Vec::new(), Vec::new());
        for source in tree.into_sources() {
            if let Source::Batch(cursor) = source {
                let written = cursor.pos();
                let mut batch = cursor.into_batch();
                if written < batch.len() {
                    batch.drop_front(written);
                    rest.push(batch);
                } else {
                    batch.clear();
                    batches.push(batch);
                }
            }
        }
        let rest_bytes = rest.iter().map(Batch::used_bytes).sum();
        let mut charge = job.charge;
        charge.set(rest_bytes);
        Ok(Spilled {
            file,
            meta,
            batches,
            rest,
            rest_bytes,
            _rest_charge: charge,
        })
    }
}

/// The external sort engine. See the crate documentation.
pub struct Sorter {
    config: SortConfig,
    plan: Plan,
    ctx: MergeContext,
    /// The sub-batch `push` fills.
    filling: Batch,
    /// Closed sub-batches not yet handed to a spill, in input order.
    closed: Vec<Closed>,
    /// Emptied batches for reuse.
    idle: Vec<Batch>,
    /// Bytes charged by `closed`.
    closed_bytes: usize,
    /// What the closed sub-batches count against the chunk.
    closed_fill: usize,
    chunk_charge: Charge,
    /// Set at the first spill: from then on a share of the chunk is
    /// spilled in the background whenever little of it is free.
    spilling: bool,
    /// The longest key plus record pushed so far (the spill share grows
    /// when records outgrow the run frames, [`crate::plan::Plan::spill_share`]).
    largest: usize,
    spill: Option<Spill>,
    /// The records a spill stopped by `finish` did not write: sorted
    /// batches, in source order, merged from memory after its run.
    unspilled: Vec<Batch>,
    /// What `unspilled` charges.
    unspilled_bytes: usize,
    runs: Vec<Run>,
    fanin: Option<FanIn>,
    run_seq: u64,
    stats: SortStats,
    failed: bool,
    /// Records handed to spills (and adopted runs) so far.
    spilled_records: u64,
    /// Called with each finished spill's run (`durable.rs`).
    durable: Option<RunHook>,
    /// `finish` spills the last chunk too (all input durable).
    spill_last: bool,
    /// Bytes from the start of the filling sub-batch's record buffer that
    /// have been handed to a prefault job.
    prefaulted: usize,
    #[cfg(test)]
    spill_gate: Option<Receiver<()>>,
}

impl Sorter {
    /// A sorter whose jobs run on `pool`. Computes the memory plan (for
    /// `max_open_runs == 0`, from the soft open-file limit as it is).
    pub fn new(config: SortConfig, pool: Arc<ThreadPool>) -> Result<Self> {
        let plan = Plan::new(&config, pool.current_num_threads())?;
        let meter = Arc::new(Meter::default());
        Ok(Sorter {
            filling: Batch::with_fill(config.key_kind, plan.sub_batch_bytes, config.chunk_fill),
            ctx: MergeContext {
                pool,
                frame_bytes: plan.frame_bytes,
                fixed_keys: config.key_kind == KeyKind::Fixed8,
                meter: Arc::clone(&meter),
            },
            chunk_charge: Charge::new(&meter),
            config,
            plan,
            closed: Vec::new(),
            idle: Vec::new(),
            closed_bytes: 0,
            closed_fill: 0,
            spilling: false,
            largest: 0,
            spill: None,
            unspilled: Vec::new(),
            unspilled_bytes: 0,
            runs: Vec::new(),
            fanin: None,
            run_seq: 0,
            stats: SortStats::default(),
            failed: false,
            spilled_records: 0,
            durable: None,
            spill_last: false,
            prefaulted: 0,
            #[cfg(test)]
            spill_gate: None,
        })
    }

    /// Calls `hook` with each spill's run once it is complete, on the
    /// spill thread, before the run is merged anywhere (see `durable.rs`).
    /// With a hook, `finish` waits for a spill in flight instead of
    /// stopping it, so every spill ends a whole run; with `spill_last`,
    /// `finish` also spills the last chunk, so every record is in a run the
    /// hook has seen before the final merge starts.
    pub fn set_durable(&mut self, hook: RunHook, spill_last: bool) {
        self.durable = Some(hook);
        self.spill_last = spill_last;
    }

    /// Takes back a run file a [`RunHook`] was given by an earlier sorter
    /// (a hard link or copy of it at `path`, which this sorter then owns and
    /// deletes once merged): every frame is read and checked. Runs must be
    /// adopted in input order and before any record is pushed; their
    /// records count as the first ones of the input. Returns the run's
    /// record count.
    pub fn adopt_run(&mut self, path: std::path::PathBuf) -> Result<u64> {
        assert!(
            self.stats.records == self.spilled_records && self.closed.is_empty(),
            "adopt_run: runs are taken back before any record is pushed"
        );
        let (file, meta) = crate::durable::read_back(path)?;
        self.stats.records += meta.records;
        self.stats.bytes += meta.raw_bytes;
        self.spilled_records += meta.records;
        self.runs.push(Run {
            file,
            meta,
            depth: 1,
        });
        Ok(meta.records)
    }

    /// How the budget was divided.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What a record counts against the chunk here: input batches made
    /// with it ([`Batch::for_input_filling`]) are taken by
    /// [`Sorter::push_batch`] without a walk over their records when they
    /// fit.
    pub fn chunk_fill(&self) -> ChunkFill {
        self.config.chunk_fill
    }

    /// Adds one record. `key` must be 8 bytes for `KeyKind::Fixed8`; a
    /// key + record longer than half the budget is `RecordTooLarge`. Bad
    /// input leaves the sorter usable; any other error is final, including
    /// one from a background spill, which is returned by the first `push`
    /// after it that closes a sub-batch (or by `finish`).
    pub fn push(&mut self, key: &[u8], record: &[u8]) -> Result<()> {
        if self.failed {
            return Err(SortError::AfterError);
        }
        let record_no = self.stats.records;
        if self.config.key_kind == KeyKind::Fixed8 && key.len() != 8 {
            return Err(SortError::KeyLength {
                record: record_no,
                len: key.len(),
            });
        }
        let len = key.len() + record.len();
        if len > self.plan.record_limit {
            return Err(SortError::RecordTooLarge {
                record: record_no,
                len,
                limit: self.plan.record_limit,
            });
        }
        if self.filling.is_unsettled() {
            self.sticky(|s| Ok(s.filling.settle()?))?;
        }
        if !self.filling.try_push(key, record) {
            self.sticky(|s| s.close_filling())?;
            if !self.filling.try_push(key, record) {
                // An empty batch takes any record within `record_limit`.
                return Err(SortError::RecordTooLarge {
                    record: record_no,
                    len,
                    limit: self.plan.record_limit,
                });
            }
        }
        self.stats.records += 1;
        self.stats.bytes += len as u64;
        self.largest = self.largest.max(len);
        self.prefault_ahead();
        Ok(())
    }

    /// Adds the records of `batch`, a [`Batch::for_input`] filled with
    /// `try_push` in input order (on any thread: the copy into the batch
    /// and the key encoding before it are the caller's parallel work), as
    /// if each had been given to [`Sorter::push`] in turn: the same
    /// sub-batches, so the same runs and output. Only the records' entries
    /// are added on this thread; their bytes and keys are copied into the
    /// sub-batches by pool jobs, which hold `batch` until they are done.
    ///
    /// A record over the limit is `RecordTooLarge` and nothing of the batch
    /// is added. `batch` must be of this sorter's key kind (a `Fixed8`
    /// batch holds 8-byte keys by construction).
    pub fn push_batch(&mut self, batch: Batch) -> Result<()> {
        self.push_batch_then(batch, drop)
    }

    /// [`Sorter::push_batch`], handing `batch` to `then` once its records
    /// have been copied (on a pool thread; or at once if nothing of it is
    /// added), so the caller can reuse its buffers.
    pub fn push_batch_then(
        &mut self,
        batch: Batch,
        then: impl FnOnce(Batch) + Send + 'static,
    ) -> Result<()> {
        if self.failed {
            return Err(SortError::AfterError);
        }
        assert_eq!(
            batch.kind(),
            self.config.key_kind,
            "push_batch: the batch's key kind is not the sorter's"
        );
        // The batch knows its longest record: only a batch holding one
        // over the limit is walked, to name it.
        if batch.max_len() > self.plan.record_limit {
            for i in 0..batch.len() {
                let (key_len, len) = batch.lens(i);
                if key_len + len > self.plan.record_limit {
                    return Err(SortError::RecordTooLarge {
                        record: self.stats.records + i as u64,
                        len: key_len + len,
                        limit: self.plan.record_limit,
                    });
                }
            }
        }
        self.largest = self.largest.max(batch.max_len());
        let batch = Lent::new(batch, then);
        let mut from = 0;
        let mut closed = false;
        while from < batch.batch().len() {
            let pool = Arc::clone(&self.ctx.pool);
            let (taken, bytes) =
                self.sticky(|s| Ok(s.filling.append_from(&batch, from, &pool)?))?;
            if taken == 0 {
                if closed {
                    // An empty batch takes any record within `record_limit`.
                    let (key_len, len) = batch.batch().lens(from);
                    return Err(SortError::RecordTooLarge {
                        record: self.stats.records,
                        len: key_len + len,
                        limit: self.plan.record_limit,
                    });
                }
                self.sticky(|s| s.close_filling())?;
                closed = true;
                continue;
            }
            closed = false;
            from += taken;
            self.stats.records += taken as u64;
            self.stats.bytes += bytes;
            self.prefault_ahead();
        }
        Ok(())
    }

    /// Keeps the pages of the filling sub-batch's record buffer resident a
    /// little ahead of the records being copied in. The first write to a
    /// fresh page costs a page fault and the kernel zeroing it; on the
    /// benchmark VM that was 32% of the read phase's samples, all on the
    /// reading thread, which paces the read. Here a pool job takes that cost
    /// (`alnsort_pipeline::prefault`). The range lies in the sub-batch's
    /// record buffer, allocated once at its full size and not moved while
    /// it fills.
    fn prefault_ahead(&mut self) {
        // `end` never exceeds what the batch's remaining budget can fill,
        // so no page is made resident that the records would not reach.
        let (addr, end, len) = self.filling.data_span();
        if end == 0 || self.prefaulted >= end || len + PREFAULT_AHEAD <= self.prefaulted {
            return;
        }
        let from = self.prefaulted.max(len);
        let to = (from + PREFAULT_STEP).min(end);
        self.prefaulted = to;
        self.ctx
            .pool
            .spawn(move || alnsort_pipeline::prefault::populate(addr + from, to - from));
    }

    /// Counters so far (a spill still in flight is not counted yet).
    pub fn stats(&self) -> SortStats {
        SortStats {
            peak_bytes: self.ctx.meter.peak(),
            ..self.stats
        }
    }

    /// Ends the input and returns the sorted stream. The sub-batches still
    /// in memory (the last chunk: all of it less at most two spill shares,
    /// see the module comment) are not spilled: they are merged from
    /// memory with the runs.
    ///
    /// A spill still in flight is stopped rather than waited for: its run
    /// ends after the record being written, and the records it had not
    /// written yet stay in memory as sorted batches (their first records
    /// dropped), merged after its run and before the rest in memory. Every
    /// record of the run precedes every unwritten one in the spill's
    /// merged order, so the final stream, ties included, is the one the
    /// whole run would give. Memory holds no more than the whole chunk
    /// did before the first spill. An input a little larger than the
    /// budget is then mostly merged from memory, not written and read
    /// back.
    pub fn finish(mut self) -> Result<Merged> {
        if self.failed {
            return Err(SortError::AfterError);
        }
        self.dispatch_filling();
        if self.durable.is_none() {
            if let Some(spill) = &self.spill {
                spill.stop.store(true, Ordering::Relaxed);
            }
        }
        self.wait_spill()?;
        if self.spill_last && !self.closed.is_empty() {
            self.start_spill(self.closed.len())?;
            self.wait_spill()?;
        }
        let mut batches = std::mem::take(&mut self.unspilled);
        batches.extend(self.take_sorted()?);
        self.wait_fanin()?;
        while self.runs.len() > self.plan.max_open_runs {
            // Only when spills outran the background merges: merge in line.
            let excess = self.runs.len() - self.plan.max_open_runs + 1;
            self.fanin_now(excess.clamp(2, self.plan.fanin_width))?;
        }
        let depth = self.runs.iter().map(|r| r.depth).max().unwrap_or(0);
        self.stats.final_sources = (self.runs.len() + batches.len()) as u64;
        self.stats.merge_passes = depth;
        let runs: Vec<TempRun> = std::mem::take(&mut self.runs)
            .into_iter()
            .map(|r| r.file)
            .collect();
        let merge = match self.partition_plan(runs.len()) {
            Some((bytes, jobs)) => {
                let mut sources = Vec::with_capacity(runs.len() + batches.len());
                for run in runs {
                    sources.push(PartSource::Run(RunSource::open(run)?));
                }
                sources.extend(batches.into_iter().map(PartSource::Batch));
                let shared = Shared::new(
                    sources,
                    self.ctx.fixed_keys,
                    bytes as u64,
                    jobs,
                    &self.ctx.meter,
                );
                self.stats.merge_partitions = shared.partitions() as u64;
                FinalMerge::Partitioned(Partitioned::new(
                    shared,
                    Arc::clone(&self.ctx.pool),
                    Arc::clone(&self.ctx.meter),
                    jobs,
                ))
            }
            None => {
                let mut sources = Vec::with_capacity(runs.len() + batches.len());
                for run in runs {
                    sources.push(Source::Run(RunReader::open(
                        run,
                        Arc::clone(&self.ctx.pool),
                        &self.ctx.meter,
                    )?));
                }
                sources.extend(
                    batches
                        .into_iter()
                        .map(|b| Source::Batch(BatchCursor::new(b))),
                );
                self.stats.merge_partitions = 1;
                FinalMerge::Single {
                    tree: LoserTree::new(sources, self.ctx.fixed_keys),
                    handed_out: false,
                }
            }
        };
        let charge = std::mem::replace(&mut self.chunk_charge, Charge::new(&self.ctx.meter));
        Ok(Merged::new(
            merge,
            self.stats,
            Arc::clone(&self.ctx.meter),
            charge,
        ))
    }

    /// How to cut the final merge: target bytes per partition and how many
    /// partitions may be in flight, or `None` to merge in one piece (see
    /// `SortConfig::merge_partition_bytes`). Automatic plans fit in what
    /// the budget has left beside the last chunk: each partition in flight
    /// holds its output (the decoded run frames it refers to: up to twice
    /// its target, as cuts are estimates), and per run the frame its cursor
    /// reads and the frame its end cut is in.
    fn partition_plan(&self, runs: usize) -> Option<(usize, usize)> {
        let threads = self.ctx.pool.current_num_threads();
        // One partition per thread merging, one being consumed, one ready.
        let mut jobs = threads + 1;
        if self.config.merge_partition_bytes > 0 {
            return Some((self.config.merge_partition_bytes, jobs));
        }
        if threads < 2 {
            return None;
        }
        let total = usize::try_from(self.stats.bytes).unwrap_or(usize::MAX);
        let frames_per_job = (2 * runs + 1) * self.plan.frame_bytes;
        let mut allowance = self
            .config
            .memory_budget
            .saturating_sub(usize::try_from(self.ctx.meter.current()).unwrap_or(usize::MAX));
        let mut on_top = None;
        if let crate::ChunkFill::Arena { .. } = self.config.chunk_fill {
            // Records filled a budget counted in another sorter's units:
            // the merge gets the room a held-bytes plan would have left it,
            // and, after a spill stopped by `finish`, the room that spill's
            // batches would have freed (records of an arena budget; the
            // merge's buffers come on top, as beside an unspilled chunk).
            allowance = allowance.max(
                self.config.memory_budget.saturating_sub(
                    usize::try_from(self.ctx.meter.current())
                        .unwrap_or(usize::MAX)
                        .saturating_sub(self.unspilled_bytes),
                ),
            );
            let reserve = crate::plan::merge_reserve(
                self.config.memory_budget,
                self.plan.frame_bytes,
                threads,
            );
            allowance = allowance.max(reserve);
            // And the run frames of the partitions in flight come on top
            // too, beside the reserve, up to half the budget (what the
            // discount of a stopped spill's rest above gave when spills
            // took half the chunk): a spill schedule that keeps most of the
            // chunk in memory at the end (`plan::Plan::spill_sub_batches`)
            // leaves no room for them otherwise (a name sort of 33k records
            // at `-m 1M -@3`, 21 runs: no partition fitted).
            on_top = Some((reserve, self.config.memory_budget / 2));
        }
        let mut bytes = (total / (8 * threads)).clamp(MIN_PARTITION_BYTES, MAX_PARTITION_BYTES);
        loop {
            let allowance = match on_top {
                Some((reserve, cap)) => {
                    allowance.max((reserve + (jobs + 1).saturating_mul(frames_per_job)).min(cap))
                }
                None => allowance,
            };
            let per_job = allowance / (jobs + 1);
            let fit = per_job.saturating_sub(frames_per_job) / 2;
            if fit >= MIN_PARTITION_BYTES {
                bytes = bytes.min(fit);
                break;
            }
            if jobs <= 2 {
                return None;
            }
            jobs -= 1;
        }
        (total > 2 * bytes).then_some((bytes, jobs))
    }

    /// Runs `f`; an error from it makes every later call fail.
    fn sticky<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let result = f(self);
        self.failed |= result.is_err();
        result
    }

    /// Sends the filling sub-batch to the pool for sorting, collects a
    /// finished background spill, and spills by the schedule of the module
    /// comment: nothing until the chunk is full (its sub-batches all used,
    /// or their fill reaching the chunk's bytes: records larger than a
    /// sub-batch get a sub-batch of their own and fill the chunk sooner);
    /// from then on the oldest `spill_sub_batches` closed ones as soon as
    /// no more than that many are free, and a wait for the spill in flight
    /// whenever the chunk is full.
    fn close_filling(&mut self) -> Result<()> {
        self.dispatch_filling();
        self.poll_spill()?;
        let sub_batches = self.plan.sub_batches;
        let chunk_bytes = sub_batches * self.plan.sub_batch_bytes;
        let share = self.plan.spill_share(self.largest);
        let share_bytes = share * self.plan.sub_batch_bytes;
        loop {
            // The spill in flight holds its sub-batches until it ends.
            let (held, held_fill) = match &self.spill {
                Some(spill) => (
                    self.closed.len() + spill.sub_batches,
                    self.closed_fill + spill.fill,
                ),
                None => (self.closed.len(), self.closed_fill),
            };
            let full = held >= sub_batches || held_fill >= chunk_bytes;
            if self.spill.is_some() {
                if !full {
                    return Ok(());
                }
                // Nothing left to read into: wait (memory stays bounded).
                self.wait_spill()?;
                continue;
            }
            let due = if self.spilling {
                held + share >= sub_batches || held_fill + share_bytes >= chunk_bytes
            } else {
                full
            };
            if !due || self.closed.is_empty() {
                return Ok(());
            }
            self.spilling = true;
            // The oldest sub-batches, up to a share of the chunk by count
            // or by fill.
            let mut count = 0;
            let mut fill = 0;
            while count < self.closed.len() && count < share && fill < share_bytes {
                fill += self.closed[count].fill;
                count += 1;
            }
            self.start_spill(count)?;
        }
    }

    fn dispatch_filling(&mut self) {
        if self.filling.is_empty() {
            return;
        }
        let next = self.idle.pop().unwrap_or_else(|| {
            Batch::with_fill(
                self.config.key_kind,
                self.plan.sub_batch_bytes,
                self.config.chunk_fill,
            )
        });
        let mut batch = std::mem::replace(&mut self.filling, next);
        self.prefaulted = 0;
        let (bytes, fill) = (batch.used_bytes(), batch.filled_bytes());
        let records = batch.len() as u64;
        self.closed_bytes += bytes;
        self.closed_fill += fill;
        self.chunk_charge.set(self.closed_bytes);
        let sorted = alnsort_pipeline::spawn(&self.ctx.pool, move || {
            batch.settle()?;
            batch.sort();
            Ok(batch)
        });
        self.closed.push(Closed {
            sorted,
            bytes,
            records,
            fill,
        });
    }

    /// Waits for every closed sub-batch's sort, in order.
    fn take_sorted(&mut self) -> Result<Vec<Batch>> {
        let pending = std::mem::take(&mut self.closed);
        pending
            .into_iter()
            .map(|c| Ok(c.sorted.wait(&self.ctx.pool, "sub-batch sort")??))
            .collect()
    }

    /// Hands the `count` oldest closed sub-batches to a background spill.
    /// The caller has collected the previous spill.
    fn start_spill(&mut self, count: usize) -> Result<()> {
        debug_assert!(
            self.spill.is_none(),
            "one spill at a time keeps runs in order"
        );
        let taken: Vec<Closed> = self.closed.drain(..count).collect();
        let bytes: usize = taken.iter().map(|c| c.bytes).sum();
        let records: u64 = taken.iter().map(|c| c.records).sum();
        let fill: usize = taken.iter().map(|c| c.fill).sum();
        self.spilled_records += records;
        self.closed_fill -= fill;
        // Release before charging again, so the move is not a peak.
        self.closed_bytes -= bytes;
        self.chunk_charge.set(self.closed_bytes);
        let mut charge = Charge::new(&self.ctx.meter);
        charge.set(bytes);
        let job = SpillJob {
            batches: taken.into_iter().map(|c| c.sorted).collect(),
            dir: self.config.temp_dir.clone(),
            seq: self.run_seq,
            charge,
            records,
            records_end: self.spilled_records,
            hook: self.durable.clone(),
            #[cfg(test)]
            gate: self.spill_gate.clone(),
        };
        // The spill's file tries this number first; a later clash is
        // retried by `TempRun::create` (names only need to be unique).
        self.run_seq += 1;
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (ctx, flag, stop_flag) = (self.ctx.clone(), Arc::clone(&cancel), Arc::clone(&stop));
        let handle = thread::Builder::new()
            .name("alnsort-spill".into())
            .spawn(move || ctx.spill(job, &flag, &stop_flag))
            .map_err(|_| SortError::Worker {
                what: "starting the background spill",
            })?;
        self.spill = Some(Spill {
            sub_batches: count,
            fill,
            cancel,
            stop,
            handle,
        });
        Ok(())
    }

    /// Collects the background spill if it has finished.
    fn poll_spill(&mut self) -> Result<()> {
        if self.spill.as_ref().is_some_and(|s| s.handle.is_finished()) {
            self.wait_spill()?;
        }
        Ok(())
    }

    /// Waits for the background spill, if any, and appends its run.
    fn wait_spill(&mut self) -> Result<()> {
        let Some(spill) = self.spill.take() else {
            return Ok(());
        };
        let waited = Instant::now();
        let joined = spill.handle.join();
        self.stats.spill_wait_ns += u64::try_from(waited.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let Spilled {
            file,
            meta,
            batches,
            rest,
            rest_bytes,
            _rest_charge,
        } = joined.map_err(|_| SortError::Worker {
            what: "background spill",
        })??;
        self.idle.extend(batches);
        // Released before charged again, so the move is not a peak.
        drop(_rest_charge);
        if !rest.is_empty() {
            self.closed_bytes += rest_bytes;
            self.chunk_charge.set(self.closed_bytes);
            self.unspilled = rest;
            self.unspilled_bytes = rest_bytes;
        }
        if meta.records == 0 {
            // Stopped before its first record: no run (the file goes with
            // its handle).
            return Ok(());
        }
        // A filling batch created while closing the last sub-batch and
        // never written to has no buffers yet: take a recycled one.
        if self.filling.is_empty() && !self.filling.has_buffers() {
            if let Some(batch) = self.idle.pop() {
                self.filling = batch;
            }
        }
        self.stats.spills += 1;
        self.count_run(&meta);
        self.runs.push(Run {
            file,
            meta,
            depth: 1,
        });
        self.poll_fanin()?;
        if self.fanin.is_none() && self.runs.len() >= self.plan.fanin_trigger {
            self.start_fanin()?;
        }
        Ok(())
    }

    fn count_run(&mut self, meta: &RunMeta) {
        self.stats.runs_written += 1;
        self.stats.run_bytes_raw += meta.raw_bytes;
        self.stats.run_bytes_compressed += meta.file_bytes;
    }

    /// The `width` consecutive runs with the fewest bytes (oldest first on
    /// ties): merging small neighbours keeps each record's rewrites
    /// logarithmic, and consecutive keeps the merge stable.
    fn pick_window(&self, width: usize) -> std::ops::Range<usize> {
        let width = width.min(self.runs.len());
        let bytes: Vec<u64> = self.runs.iter().map(|r| r.meta.file_bytes).collect();
        let start = (0..=bytes.len() - width)
            .min_by_key(|&s| bytes[s..s + width].iter().sum::<u64>())
            .unwrap_or(0);
        start..start + width
    }

    /// Takes a window of runs out of the list and creates their output.
    fn prepare_fanin(&mut self, width: usize) -> Result<FanInJob> {
        let window = self.pick_window(width);
        let needed: u64 = self.runs[window.clone()]
            .iter()
            .map(|r| r.meta.file_bytes)
            .sum();
        ensure_space(&self.config.temp_dir, needed)?;
        let out = TempRun::create(&self.config.temp_dir, &mut self.run_seq)?;
        let position = window.start;
        let inputs: Vec<Run> = self.runs.drain(window).collect();
        let depth = inputs.iter().map(|r| r.depth).max().unwrap_or(0) + 1;
        Ok(FanInJob {
            position,
            depth,
            inputs,
            out,
        })
    }

    fn start_fanin(&mut self) -> Result<()> {
        let FanInJob {
            position,
            depth,
            inputs,
            out,
        } = self.prepare_fanin(self.plan.fanin_width)?;
        let cancel = Arc::new(AtomicBool::new(false));
        let (ctx, flag) = (self.ctx.clone(), Arc::clone(&cancel));
        let handle = thread::Builder::new()
            .name("alnsort-fanin".into())
            .spawn(move || ctx.merge_runs(inputs, out, Some(&flag)))
            .map_err(|_| SortError::Worker {
                what: "starting the background run merge",
            })?;
        self.fanin = Some(FanIn {
            position,
            depth,
            cancel,
            handle,
        });
        Ok(())
    }

    /// Merges `width` runs on this thread.
    fn fanin_now(&mut self, width: usize) -> Result<()> {
        let FanInJob {
            position,
            depth,
            inputs,
            out,
        } = self.prepare_fanin(width)?;
        let (file, meta) = self.ctx.merge_runs(inputs, out, None)?;
        self.fanin_done(position, depth, file, meta);
        Ok(())
    }

    fn fanin_done(&mut self, position: usize, depth: u32, file: TempRun, meta: RunMeta) {
        self.stats.fanin_merges += 1;
        self.count_run(&meta);
        self.runs.insert(position, Run { file, meta, depth });
    }

    /// Collects the background merge if it has finished.
    fn poll_fanin(&mut self) -> Result<()> {
        if self.fanin.as_ref().is_some_and(|f| f.handle.is_finished()) {
            self.wait_fanin()?;
        }
        Ok(())
    }

    /// Waits for the background merge, if any, and puts its run in place.
    fn wait_fanin(&mut self) -> Result<()> {
        let Some(fanin) = self.fanin.take() else {
            return Ok(());
        };
        let (file, meta) = fanin.handle.join().map_err(|_| SortError::Worker {
            what: "background run merge",
        })??;
        self.fanin_done(fanin.position, fanin.depth, file, meta);
        Ok(())
    }
}

/// Seams for the engine tests, which hold and inspect background spills.
#[cfg(test)]
impl Sorter {
    /// Spills started from now on wait for a message (or the sender's
    /// hang-up) on `gate` before they touch the temp directory.
    pub(crate) fn set_spill_gate(&mut self, gate: Receiver<()>) {
        self.spill_gate = Some(gate);
    }

    /// Spills take `share` sub-batches from now on, whatever the plan chose.
    pub(crate) fn set_spill_sub_batches(&mut self, share: usize) {
        assert!(share >= 1 && 2 * share <= self.plan.sub_batches);
        self.plan.spill_sub_batches = share;
    }

    /// Whether a background spill has started and not yet returned.
    pub(crate) fn spill_running(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| !s.handle.is_finished())
    }

    /// Closed sub-batches not yet handed to a spill.
    pub(crate) fn closed_sub_batches(&self) -> usize {
        self.closed.len()
    }

    /// Asks the spill in flight to stop as `finish` does, without waiting.
    pub(crate) fn request_spill_stop(&self) {
        if let Some(spill) = &self.spill {
            spill.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Waits for the background spill, so every run is complete on disk.
    pub(crate) fn settle_spill(&mut self) -> Result<()> {
        self.sticky(Sorter::wait_spill)
    }
}

impl Drop for Sorter {
    fn drop(&mut self) {
        let spill = self.spill.take();
        if let Some(spill) = &spill {
            spill.cancel.store(true, Ordering::Relaxed);
        }
        if let Some(fanin) = &self.fanin {
            fanin.cancel.store(true, Ordering::Relaxed);
        }
        if let Some(spill) = spill {
            // Its batches and output file are dropped (the file deleted) as
            // the thread returns.
            let _ = spill.handle.join();
        }
        if let Some(fanin) = self.fanin.take() {
            // Its inputs and output are deleted as the thread unwinds.
            let _ = fanin.handle.join();
        }
    }
}

impl std::fmt::Debug for Sorter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sorter")
            .field("plan", &self.plan)
            .field("runs", &self.runs.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
