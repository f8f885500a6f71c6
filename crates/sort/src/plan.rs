//! How the memory budget is divided, and the two questions asked of the
//! operating system: how many files may be open (the soft limit as the
//! caller left it), and how much space the temp filesystem has left.
//!
//! The budget pays for three things that can be alive at once:
//!
//! * the chunk: `SUB_BATCHES` sub-batches of records, keys, entries and
//!   sort scratch (see `batch.rs` for what a record charges);
//! * run readers: the final merge reads up to `max_open_runs` runs, each
//!   double-buffered (two raw frames and two stored frames), and a
//!   background fan-in reads `fanin_width` of them;
//! * run writers: the spill and a background fan-in each write one run,
//!   with one frame filling and `threads + 1` compressing.
//!
//! A frame buffer reused from frame to frame grows to exactly the frame it
//! must hold (`runfile::resize_exact`), never by amortised doubling, so a
//! reader or writer holds the frames counted here; a frame's raw bytes can
//! pass `frame_bytes` by its last entry only, which this plan does not
//! reserve (a few records' bytes against 100 KiB frames at real budgets).
//!
//! Spilling does not add to this. Until the first spill the chunk is the
//! plan's; from then on the sorter spills its oldest sub-batches a share
//! ([`Plan::spill_sub_batches`]) at a time on a background thread while
//! `push` fills the room the previous spill freed, and `push` waits rather
//! than start a second spill or read past the chunk (`sorter.rs`). So
//! batches, the ones being spilled included, never hold more than the
//! chunk, and the one spill writer in flight is the one reserved below.
//! The share trades temporary disk against runs: what is in memory when
//! the input ends (the chunk less at most two shares) is never written, so
//! a smaller share spills fewer records, in more, smaller runs (more for
//! the fan-in and the final merge to read).
//!
//! For a budget of bytes held ([`ChunkFill::Held`], a hard limit), the
//! chunk gets what is left after reserving readers and writers. For a
//! budget in another sorter's units ([`ChunkFill::Arena`], samtools' `-m`),
//! the first chunk is the whole budget, as the other sorter's arena is, so
//! that what fits there is never spilled here; readers and writers are
//! then only reserved against half the chunk. The chunk
//! is never less than half the budget: when an explicit `max_open_runs` or
//! a tiny budget makes the reserve larger, the budget is exceeded by the
//! reader buffers rather than shrinking batches to nothing.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Result, SortError};
use crate::runfile::{max_stored_len, RunWriter, HEADER_LEN};
use crate::{ChunkFill, SortConfig};

/// Sub-batches per chunk. Each is sorted on the pool as soon as it is full
/// while `push` fills the next, so sorting overlaps reading (and a spill,
/// on its own thread, waits for the last one's sort, not `push`). More sub-batches
/// shrink that tail but deepen the merge (log2 of the source count), and 8
/// also matches samtools' per-thread block split at `-@ 8`.
pub(crate) const SUB_BATCHES: usize = 8;

/// Largest sub-batch: entry offsets are `u32`, and 1 GiB keeps well clear of
/// that while still making a huge budget use few, large sub-batches.
const MAX_SUB_BATCH_BYTES: usize = 1 << 30;

/// Raw bytes per run-file frame, at most. 256 KiB is four times LZ4's
/// 64 KiB window (so the window is always full), large enough that the
/// per-frame header, CRC and pool hand-off are noise (< 0.1%), and small
/// enough that 100+ double-buffered run readers fit in a 768 MiB budget.
const MAX_FRAME_BYTES: usize = 256 << 10;

/// Smallest frame: below this the header dominates. Only tiny (test)
/// budgets get it.
const MIN_FRAME_BYTES: usize = 256;

/// Frames are 1/1024 of the budget (between the bounds above), so run
/// reader buffers stay a small share of small budgets.
const FRAME_BUDGET_DIVISOR: usize = 1024;

/// Share of the budget that automatic `max_open_runs` may spend on run
/// reader buffers (1/4), the rest being the chunk.
const READER_BUDGET_DIVISOR: usize = 4;

/// File descriptors left for everything that is not a run reader: the
/// input, the output, the index, the spill writer, the fan-in writer,
/// stdio and whatever the caller holds.
const FD_RESERVE: u64 = 32;

/// Fewest runs a merge may read; two is the least that makes progress.
const MIN_OPEN_RUNS: usize = 2;

/// The smallest budget accepted.
pub(crate) const MIN_BUDGET: usize = 256;

/// The division of the budget for one sorter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Sub-batches per chunk.
    pub sub_batches: usize,
    /// Sub-batches one spill takes once spilling has begun (see `sorter.rs`):
    /// the oldest ones, as soon as no more than this many are free to read
    /// into. One sub-batch when the input is expected to spill into few
    /// enough runs, up to half the chunk (see `spill_sub_batches`).
    pub spill_sub_batches: usize,
    /// Byte budget of one sub-batch.
    pub sub_batch_bytes: usize,
    /// Target raw bytes per run-file frame.
    pub frame_bytes: usize,
    /// Most runs the final merge reads; more trigger fan-in merges.
    pub max_open_runs: usize,
    /// Runs one fan-in merge combines.
    pub fanin_width: usize,
    /// A fan-in starts when this many runs exist.
    pub fanin_trigger: usize,
    /// Largest key + record accepted.
    pub record_limit: usize,
    /// The caller's [`SortConfig::expected_bytes`] (0: unknown), for
    /// [`Plan::spill_share`].
    pub expected_bytes: u64,
}

impl Plan {
    /// Divides `config.memory_budget` for a pool of `threads` workers.
    pub fn new(config: &SortConfig, threads: usize) -> Result<Plan> {
        let budget = config.memory_budget;
        if budget < MIN_BUDGET {
            return Err(SortError::BudgetTooSmall {
                budget,
                minimum: MIN_BUDGET,
            });
        }
        let frame_bytes = (budget / FRAME_BUDGET_DIVISOR).clamp(MIN_FRAME_BYTES, MAX_FRAME_BYTES);
        let reader = reader_bytes(frame_bytes);
        let writer = RunWriter::buffer_bytes(frame_bytes, threads + 1);
        let max_open_runs = match config.max_open_runs {
            0 => {
                let by_fds = usize::try_from(open_file_limit().saturating_sub(FD_RESERVE))
                    .unwrap_or(usize::MAX);
                let by_memory = budget / READER_BUDGET_DIVISOR / reader;
                by_fds.min(by_memory)
            }
            n => n,
        }
        .max(MIN_OPEN_RUNS);
        let spilling = max_open_runs
            .saturating_mul(reader)
            .saturating_add(2 * writer);
        let chunk = match config.chunk_fill {
            // A budget of bytes held: the chunk is what the readers and
            // writers leave, so that a spill never needs more.
            ChunkFill::Held => budget.saturating_sub(spilling),
            // A budget in another sorter's units is all records before the
            // first spill, as it is there (the final merge of an unspilled
            // input takes its partitions beside it, see
            // `Sorter::partition_plan`); from then on half a chunk beside
            // the readers and writers fits it.
            ChunkFill::Arena { .. } => {
                budget.min(budget.saturating_sub(spilling).saturating_mul(2))
            }
        }
        .max(budget / 2);
        let sub_batches = SUB_BATCHES.max(chunk.div_ceil(MAX_SUB_BATCH_BYTES));
        Ok(Plan {
            sub_batches,
            spill_sub_batches: spill_sub_batches(
                sub_batches,
                chunk,
                config.expected_bytes,
                max_open_runs,
            ),
            sub_batch_bytes: (chunk / sub_batches).max(1),
            frame_bytes,
            max_open_runs,
            fanin_width: (max_open_runs / 2).max(MIN_OPEN_RUNS),
            fanin_trigger: fanin_trigger(max_open_runs),
            record_limit: (budget / 2).min(u32::MAX as usize),
            expected_bytes: config.expected_bytes,
        })
    }

    /// Sub-batches one spill takes once records of up to `largest` key
    /// plus record bytes have been pushed: [`Plan::spill_sub_batches`] while
    /// they fit in a frame, and otherwise the share for the runs that fit
    /// when each run's reader holds frames of `largest` bytes (a frame
    /// holds at least one whole record). Long reads of 100-500 kb at a
    /// 64 MiB budget make frames ten times the planned 64 KiB: the share
    /// for 24 runs was one sub-batch, and their 32 readers at the final
    /// merge held 35 MiB beyond the budget (`tests/safety/test_memory.py`);
    /// here those inputs spill in halves (9 runs).
    pub fn spill_share(&self, largest: usize) -> usize {
        let planned = reader_bytes(self.frame_bytes);
        let actual = reader_bytes(self.frame_bytes.max(largest));
        if actual <= planned {
            return self.spill_sub_batches;
        }
        // The runs whose readers fit in what the plan set aside for
        // `max_open_runs` readers of planned frames.
        let runs = (self.max_open_runs.saturating_mul(planned) / actual).max(MIN_OPEN_RUNS);
        let chunk = self.sub_batches * self.sub_batch_bytes;
        spill_sub_batches(self.sub_batches, chunk, self.expected_bytes, runs)
            .max(self.spill_sub_batches)
    }
}

/// A fan-in starts when this many runs exist, for a final merge of at
/// most `max_open_runs` ([`Plan::fanin_trigger`]).
fn fanin_trigger(max_open_runs: usize) -> usize {
    (max_open_runs - max_open_runs / 4).max(MIN_OPEN_RUNS)
}

/// Sub-batches one spill takes (see [`Plan::spill_sub_batches`]) when
/// the final merge reads at most `max_open_runs`: the share whose runs
/// stay within [`SPILL_RUNS_OF_TRIGGER`] of the fan-in trigger
/// ([`share_for_runs`]).
fn spill_sub_batches(
    sub_batches: usize,
    chunk: usize,
    expected: u64,
    max_open_runs: usize,
) -> usize {
    let (num, den) = SPILL_RUNS_OF_TRIGGER;
    share_for_runs(
        sub_batches,
        chunk,
        expected,
        fanin_trigger(max_open_runs) * num / den,
    )
}

/// The smallest of 1, 2, 4, ... up to half of `sub_batches` whose runs,
/// for an input of `expected` bytes against a chunk of `chunk`, are
/// expected to number no more than `max_runs`; half when `expected` is
/// unknown (0). Smaller shares leave more of the input in memory at its
/// end; fewer runs keep the fan-in from merging them again.
fn share_for_runs(sub_batches: usize, chunk: usize, expected: u64, max_runs: usize) -> usize {
    let half = (sub_batches / 2).max(1);
    if expected == 0 || chunk == 0 {
        return half;
    }
    // Chunks' worth spilled, about: the input less the chunk kept.
    let spilled = (expected as f64 / chunk as f64 - 1.0).max(0.0);
    let mut share = 1;
    while share < half {
        let runs = (spilled * sub_batches as f64 / share as f64).ceil() + 1.0;
        if runs <= max_runs as f64 {
            break;
        }
        share *= 2;
    }
    share.min(half)
}

/// What the expected run count may reach, as a fraction of the fan-in
/// trigger. The expectation counts the input's key and record bytes
/// against the chunk, which counts more per record (entries, or an arena's
/// per-record overhead), so it falls short: 27.3 runs expected against 32
/// written for the 4x benchmark input at `-m 100M -@2` with one sub-batch
/// a spill (`bench/results/2026-12-07-regime-schedule.md`). Two thirds
/// leave room for 1.5 times that, and for an input's size that is itself
/// an estimate.
const SPILL_RUNS_OF_TRIGGER: (usize, usize) = (2, 3);

/// Final-merge partition size the plan leaves room for beside a chunk
/// that fills the budget: 1/512 of the budget, between the sorter's
/// smallest automatic partition and 4 MiB (larger partitions gain nothing
/// measurable, and every MiB kept here is a MiB of records spilled).
fn reserve_partition_bytes(budget: usize) -> usize {
    (budget / 512).clamp(64 << 10, 4 << 20)
}

/// What the partitioned final merge of an unspilled chunk needs beside
/// it when the chunk filled an arena budget (see `Sorter::partition_plan`): for each of `threads + 2` partitions
/// in flight, its output (up to twice its target) and one frame. Never
/// more than an eighth of the budget.
pub(crate) fn merge_reserve(budget: usize, frame_bytes: usize, threads: usize) -> usize {
    let per_job = 2 * reserve_partition_bytes(budget) + frame_bytes;
    (threads.max(1) + 2).saturating_mul(per_job).min(budget / 8)
}

/// Buffers of one double-buffered run reader.
fn reader_bytes(frame_bytes: usize) -> usize {
    2 * (frame_bytes + HEADER_LEN + max_stored_len(frame_bytes))
}

/// The soft `RLIMIT_NOFILE` as it is now; unknown means a conservative
/// 1024. The sorter never changes the limit: that is process state, which
/// only a program's entry point may touch ([`raise_open_file_limit`]).
fn open_file_limit() -> u64 {
    match get_nofile() {
        Some(lim) if lim.rlim_cur == libc::RLIM_INFINITY => u64::MAX,
        Some(lim) => lim.rlim_cur,
        None => 1024,
    }
}

fn get_nofile() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// Raises the process's soft `RLIMIT_NOFILE` to its hard limit (a sort with
/// many runs is exactly what the hard limit is for), so that a sorter
/// planned afterwards with `max_open_runs == 0` merges more runs at once.
/// Process-wide: for a program's entry point (the `alnsort` binary), never
/// for a library caller. Returns the soft limit now in force; a failure
/// leaves the limit as it was.
pub fn raise_open_file_limit() -> u64 {
    if let Some(lim) = get_nofile() {
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: `raised` is a valid rlimit; failure leaves the limit
            // as is.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) };
        }
    }
    open_file_limit()
}

/// Bytes available to an unprivileged writer on the filesystem of `dir`.
pub fn free_space(dir: &Path) -> Result<u64> {
    let stat_err = |source| SortError::StatFs {
        dir: dir.to_path_buf(),
        source,
    };
    let c_dir = CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
        stat_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path contains a NUL byte",
        ))
    })?;
    // SAFETY: all-zero is a valid `statvfs` (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_dir` is NUL-terminated and `st` is writable for the call.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut st) } != 0 {
        return Err(stat_err(io::Error::last_os_error()));
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between libcs
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Fails with `NoSpace` unless `dir` has `needed` bytes free.
pub(crate) fn ensure_space(dir: &Path, needed: u64) -> Result<()> {
    let available = free_space(dir)?;
    if needed > available {
        return Err(SortError::NoSpace {
            dir: dir.to_path_buf(),
            needed,
            available,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyKind;

    fn config(budget: usize, max_open_runs: usize) -> SortConfig {
        SortConfig {
            memory_budget: budget,
            temp_dir: std::env::temp_dir(),
            key_kind: KeyKind::Fixed8,
            max_open_runs,
            merge_partition_bytes: 0,
            chunk_fill: Default::default(),
            expected_bytes: 0,
        }
    }

    #[test]
    fn default_budget_gets_full_frames_and_many_runs() {
        let plan = Plan::new(&config(768 << 20, 0), 4).expect("plan");
        assert_eq!(plan.frame_bytes, MAX_FRAME_BYTES);
        assert_eq!(plan.sub_batches, SUB_BATCHES);
        assert!(plan.max_open_runs >= 64, "{plan:?}");
        let chunk = plan.sub_batches * plan.sub_batch_bytes;
        let readers = plan.max_open_runs * reader_bytes(plan.frame_bytes);
        assert!(chunk + readers <= 768 << 20, "{plan:?}");
        assert!(chunk >= 768 << 19);
    }

    #[test]
    fn an_arena_budget_is_all_chunk_and_half_of_it_fits_when_spilling() {
        for budget in [1 << 20, 10 << 20, 160 << 20, 2 << 30, 32 << 30] {
            for threads in [1, 2, 16] {
                let mut cfg = config(budget, 0);
                cfg.chunk_fill = ChunkFill::Arena {
                    overhead: 44,
                    align: 8,
                };
                let plan = Plan::new(&cfg, threads).expect("plan");
                let chunk = plan.sub_batches * plan.sub_batch_bytes;
                let readers = plan.max_open_runs * reader_bytes(plan.frame_bytes);
                let writers = 2 * RunWriter::buffer_bytes(plan.frame_bytes, threads + 1);
                assert!(
                    chunk / 2 + readers + writers <= budget,
                    "{budget} {threads}: {plan:?}"
                );
                assert!(
                    chunk <= budget && chunk + plan.sub_batches > budget,
                    "{budget} {threads}: {plan:?}"
                );
            }
        }
    }

    #[test]
    fn a_spill_takes_the_smallest_share_whose_runs_stay_few() {
        // Unknown input: halves of the chunk.
        assert_eq!(share_for_runs(8, 1000, 0, 32), 4);
        // Within the chunk, or spilling a little: one sub-batch.
        assert_eq!(share_for_runs(8, 1000, 900, 32), 1);
        assert_eq!(share_for_runs(8, 1000, 1500, 32), 1);
        // 3 chunks spilled: 25 runs of one sub-batch fit 32, not 24.
        assert_eq!(share_for_runs(8, 1000, 4000, 32), 1);
        assert_eq!(share_for_runs(8, 1000, 4000, 24), 2);
        // 13 chunks spilled: 105, 53, then 27 runs; never past half.
        assert_eq!(share_for_runs(8, 1000, 14_000, 32), 4);
        assert_eq!(share_for_runs(8, 1000, 14_000, 60), 2);
        assert_eq!(share_for_runs(8, 1000, u64::MAX, 32), 4);
        // Many sub-batches: shares up to half of them.
        assert_eq!(share_for_runs(32, 1000, 14_000, 32), 16);
        for expected in [1u64, 999, 1001, 2000, 5000, 50_000, 1 << 40] {
            for max_runs in [2, 16, 48, 1000] {
                let share = share_for_runs(8, 1000, expected, max_runs);
                assert!(share.is_power_of_two() && share <= 4, "{share}");
                // A larger allowance never takes a larger share.
                assert!(share_for_runs(8, 1000, expected, max_runs * 2) <= share);
            }
        }
    }

    #[test]
    fn the_spill_share_follows_the_expected_input() {
        // The 4x benchmark input at `-m 100M -@2`: 898 MB of records
        // against a 200 MiB arena budget spill in single sub-batches
        // (with the open-file limit of a test process, at least 64 runs
        // by memory).
        let mut cfg = config(200 << 20, 0);
        cfg.chunk_fill = ChunkFill::Arena {
            overhead: 44,
            align: 8,
        };
        cfg.expected_bytes = 897_767_548;
        let plan = Plan::new(&cfg, 2).expect("plan");
        assert_eq!(plan.spill_sub_batches, 1, "{plan:?}");
        // Four times that, or an unknown size: halves.
        cfg.expected_bytes *= 4;
        assert_eq!(Plan::new(&cfg, 2).expect("plan").spill_sub_batches, 4);
        cfg.expected_bytes = 0;
        assert_eq!(Plan::new(&cfg, 2).expect("plan").spill_sub_batches, 4);
    }

    #[test]
    fn records_longer_than_a_frame_spill_in_larger_shares() {
        // tests/safety/test_memory.py's long reads: 155 MB of 100-500 kb
        // records at a 64 MiB held budget (frames of 64 KiB).
        let mut cfg = config(64 << 20, 0);
        cfg.expected_bytes = 155_768_912;
        let plan = Plan::new(&cfg, 2).expect("plan");
        assert_eq!(plan.spill_sub_batches, 1, "{plan:?}");
        // Records up to a frame change nothing.
        assert_eq!(plan.spill_share(0), 1);
        assert_eq!(plan.spill_share(plan.frame_bytes), 1);
        // Records of 750 KB: only ~10 readers fit, so halves.
        assert_eq!(plan.spill_share(750_000), plan.sub_batches / 2);
        // The share never shrinks as records grow.
        let mut last = 0;
        for largest in (0..40).map(|i| i * 25_000) {
            let share = plan.spill_share(largest);
            assert!(
                share >= last && share <= plan.sub_batches / 2,
                "{largest}: {share}"
            );
            last = share;
        }
    }

    #[test]
    fn explicit_open_run_limit_is_kept() {
        let plan = Plan::new(&config(1 << 20, 3), 1).expect("plan");
        assert_eq!(
            (plan.max_open_runs, plan.fanin_width, plan.fanin_trigger),
            (3, 2, 3)
        );
    }

    #[test]
    fn tiny_budget_is_rejected() {
        let err = Plan::new(&config(10, 0), 1).expect_err("too small");
        assert!(matches!(err, SortError::BudgetTooSmall { budget: 10, .. }));
    }

    #[test]
    fn free_space_of_tmp_is_known_and_a_huge_need_fails() {
        let dir = std::env::temp_dir();
        assert!(free_space(&dir).expect("statvfs") > 0);
        let err = ensure_space(&dir, u64::MAX).expect_err("no fs has 2^64 bytes");
        assert!(matches!(
            err,
            SortError::NoSpace {
                needed: u64::MAX,
                ..
            }
        ));
        assert!(err.to_string().contains("not enough space"));
    }
}
