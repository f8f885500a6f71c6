//! External sort engine for `(key, record)` pairs within a memory budget.
//!
//! The engine knows nothing about BAM. Keys are byte strings ordered by
//! `memcmp` (`<[u8]>::cmp`: a proper prefix sorts first); records are
//! opaque byte slices whose length the engine stores itself. Equal keys keep
//! their input order, on every path and for every budget and thread count
//! (ARCHITECTURE.md, "Stability").
//!
//! How it works:
//!
//! 1. `push` copies each record into the current **sub-batch**: one large
//!    recycled buffer plus a fixed-size entry per record (`batch.rs`). The
//!    budget's chunk is split into [`plan::SUB_BATCHES`]-ish sub-batches;
//!    each is sorted on the pool as soon as it is full, while `push` fills
//!    the next (radix sort for [`KeyKind::Fixed8`], stable merge sort for
//!    [`KeyKind::Variable`]). `push_batch` takes a whole input batch
//!    built on another thread (`Batch::for_input`) as if each record were
//!    pushed in turn, with one bulk copy per sub-batch it lands in.
//! 2. When the whole chunk is full it starts to be **spilled**: its oldest
//!    sorted sub-batches, a share of the chunk at a time, are merged into
//!    run files of zstd frames compressed on the pool (`runfile.rs`).
//!    Spills run on a background thread while `push` fills the room the
//!    previous one freed, and the newest records, the chunk less at most
//!    two shares, stay in memory (`sorter.rs`).
//! 3. When runs pile up past the open-file/memory limit, a **background
//!    fan-in** merges consecutive runs into one while input still arrives,
//!    so the final merge stays a single pass.
//! 4. `finish` never spills the last chunk: [`Merged`] merges the runs and
//!    the in-memory sub-batches with a loser tree (`loser.rs`). With two or
//!    more pool threads the final merge is cut into key ranges that pool
//!    jobs merge at once, concatenated in order (`partition.rs`): the same
//!    stream, byte for byte, with every core merging.
//!
//! For a distributed sort, the map and reduce stages (`stages.rs`) cut a
//! map task's sorted stream into framed blocks, one per key range, and
//! merge one range's blocks of every map task.
//!
//! Temp files live in `SortConfig::temp_dir`, are created with O_EXCL and
//! are deleted once merged away (a fan-in's inputs when it ends, the final
//! merge's runs when [`Merged`] is dropped), and on drop or error.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use alnsort_sort::{KeyKind, SortConfig, Sorter};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
//! let config = SortConfig {
//!     memory_budget: 1 << 20,
//!     temp_dir: dir.path().to_path_buf(),
//!     key_kind: KeyKind::Variable,
//!     max_open_runs: 0,
//!     merge_partition_bytes: 0,
//!     chunk_fill: Default::default(),
//!     expected_bytes: 0,
//! };
//! let mut sorter = Sorter::new(config, pool).unwrap();
//! for (key, record) in [(&b"b"[..], &b"second"[..]), (b"a", b"first"), (b"b", b"third")] {
//!     sorter.push(key, record).unwrap();
//! }
//! let mut merged = sorter.finish().unwrap();
//! let mut out = Vec::new();
//! while let Some(record) = merged.next_record().unwrap() {
//!     out.push(record.to_vec());
//! }
//! assert_eq!(out, [&b"first"[..], b"second", b"third"]);
//! ```

// This crate calls libc (limits, statvfs) and copies into reserved memory
// from pool jobs, with `unsafe`: each block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(missing_docs)]

pub mod batch;
pub mod durable;
mod error;
mod fields;
pub mod loser;
mod merge;
mod meter;
mod partition;
pub mod plan;
pub mod radix;
mod runfile;
mod runread;
mod sorter;
pub mod stages;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use error::{Result, SortError};
pub use merge::Merged;
pub use partition::Chunk;
pub use plan::{raise_open_file_limit, Plan};
pub use sorter::Sorter;

/// The shape of the keys, which picks the in-memory sort.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// Every key is exactly 8 bytes (a big-endian `u64`, e.g. the
    /// coordinate key): LSD radix sort.
    Fixed8,
    /// Keys of any length: sorted on a 16-byte prefix, then the full key,
    /// then input order.
    Variable,
}

/// How a [`Sorter`] may use memory, disk and files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortConfig {
    /// Bytes the engine may hold: sub-batch buffers, entry arrays, key
    /// bytes, sort scratch and run-file buffers. Soft for one record: a
    /// record up to half the budget is accepted (it may get a sub-batch of
    /// its own); a larger one is `SortError::RecordTooLarge`. Each run being
    /// merged holds at least its current and next frame, so records much
    /// larger than a frame (1/1024 of the budget, at most 256 KiB) make the
    /// merge exceed the budget by about `4 x record size` per open run.
    pub memory_budget: usize,
    /// An existing, private directory (the CLI makes it with `mkdtemp`);
    /// run files are created inside it with O_EXCL.
    pub temp_dir: PathBuf,
    /// The key shape.
    pub key_kind: KeyKind,
    /// Most runs merged at once. 0 = automatic: from the current soft
    /// `RLIMIT_NOFILE` (never changed here; a program may call
    /// [`raise_open_file_limit`] first; 32 descriptors are kept in reserve)
    /// and from memory (each open run needs read buffers).
    pub max_open_runs: usize,
    /// Target bytes of one partition of the final merge. 0 = automatic:
    /// with two or more pool threads, about an eighth of the input per
    /// thread, between 64 KiB and 16 MiB, and smaller (or fewer in flight,
    /// or not cut at all) when what the budget has left beside the last
    /// chunk cannot hold them; one thread merges in one piece. Any other
    /// value forces partitioning, whatever the memory (tests use tiny
    /// ones).
    pub merge_partition_bytes: usize,
    /// What fills a chunk (when the sorter spills): by default what the
    /// records hold here.
    pub chunk_fill: ChunkFill,
    /// Key plus record bytes the caller expects to push, 0 when it cannot
    /// tell. Only the spill schedule reads it ([`plan::Plan`]'s
    /// `spill_sub_batches`): an input expected to spill into few runs is
    /// spilled in small shares, so that more of it stays in memory; an
    /// unknown or large one in halves of the chunk. Any value sorts the
    /// same records into the same output.
    pub expected_bytes: u64,
}

/// What a record counts against the chunk, which decides when the sorter
/// spills.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChunkFill {
    /// What it holds here: record, key and entry bytes. The budget is then
    /// this sorter's own memory.
    #[default]
    Held,
    /// What another sorter's record arena would take for it: the record's
    /// length plus `overhead`, rounded up to `align`. A budget stated in
    /// that sorter's units (samtools' `-m`) then spills where that sorter
    /// would write a temporary file, never earlier. The bytes held (and
    /// metered) differ from the budget by the difference of the two
    /// per-record overheads.
    Arena {
        /// Bytes the arena adds to each record's length.
        overhead: usize,
        /// What each record's slot is rounded up to.
        align: usize,
    },
}

impl ChunkFill {
    /// What a record of `record_len` bytes that holds `held` bytes counts.
    pub(crate) fn cost(self, record_len: usize, held: usize) -> usize {
        match self {
            ChunkFill::Held => held,
            ChunkFill::Arena { overhead, align } => {
                (record_len + overhead).next_multiple_of(align.max(1))
            }
        }
    }
}

/// Counters of one sort.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SortStats {
    /// Records pushed.
    pub records: u64,
    /// Key plus record bytes pushed.
    pub bytes: u64,
    /// Runs written from memory: the first full chunk is spilled as two
    /// halves, every later chunk (half the first's size) as one run.
    pub spills: u64,
    /// Nanoseconds `push` and `finish` spent waiting for a spill: the first
    /// spill's older half always, later ones only when a background spill
    /// was slower than reading the next half chunk.
    pub spill_wait_ns: u64,
    /// Merges of runs into one run (background fan-in, or in line at
    /// `finish` when spills outran them).
    pub fanin_merges: u64,
    /// Run files written (spills plus fan-in outputs).
    pub runs_written: u64,
    /// Bytes of all run files written, before compression.
    pub run_bytes_raw: u64,
    /// Bytes of all run files written, on disk.
    pub run_bytes_compressed: u64,
    /// Run files the most-rewritten record went through (0 without spills;
    /// 1 = spilled once; each fan-in level adds 1). The final merge is one
    /// more pass on top.
    pub merge_passes: u32,
    /// Sources of the final merge (runs plus in-memory sub-batches).
    pub final_sources: u64,
    /// Key ranges the final merge was cut into (1 = one loser tree).
    pub merge_partitions: u64,
    /// Most bytes held at once by batches (records, keys, entries, sort
    /// scratch) and run-file buffers; allocator slack is not counted.
    pub peak_bytes: u64,
}
