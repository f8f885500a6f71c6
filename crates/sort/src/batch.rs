//! A sub-batch: one contiguous byte buffer of records plus a fixed-size
//! entry per record, sorted in place by entry. This is the arena of the
//! seed papers: records are copied once, on `push`, into a big recycled
//! buffer (no allocation per record), and sorting moves 16- or 24-byte
//! entries, never record bytes.
//!
//! Invariants: offsets are `u32`, so a batch holds under 4 GiB of records
//! and of keys (the sorter caps sub-batches well below that); entries are in
//! input order, with offsets increasing, until `sort`, after which they are
//! in (key, input order) order.
//!
//! `Batch::append_from` is one function of about 200 lines on purpose: the
//! capacity it reserves and the copy job that writes into that capacity
//! through raw pointers stay side by side, so each `SAFETY` comment sits in
//! the same function as the reservation it relies on.

use std::mem::size_of;
use std::sync::Arc;

use alnsort_pipeline::{Lost, Slot};
use rayon::ThreadPool;

use crate::radix::{radix_sort, FixedEntry};
use crate::{ChunkFill, KeyKind};

/// One record of a `Variable` batch: 16 key bytes (zero-padded, big-endian)
/// to decide most comparisons without touching the key buffer, then where
/// the full key and the record sit. [`Batch::sort`] fills the 16 bytes,
/// taking them after the bytes every key of the batch shares (read names
/// of one run share 20 or more, then differ in tile and x and y
/// coordinates), so that they decide all comparisons but those of equal
/// names; nothing reads them outside the sort.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct VarEntry {
    prefix: u128,
    key_offset: u32,
    key_len: u32,
    offset: u32,
    len: u32,
}

/// Budget charged per `Fixed8` record besides its bytes: the entry plus its
/// twin in the radix scratch buffer.
const FIXED_ENTRY_COST: usize = 2 * size_of::<FixedEntry>();

/// Budget charged per `Variable` record besides its key and record bytes:
/// the entry. The sort is an in-place unstable sort whose ties are broken
/// by record offset (input order within a batch), so it needs no scratch.
const VAR_ENTRY_COST: usize = size_of::<VarEntry>();

/// Largest offset an entry can hold.
const MAX_OFFSET: usize = u32::MAX as usize;

/// Bytes of a record's start that [`prefetch`] asks for (a BAM record is
/// usually a few hundred bytes; the hardware prefetcher follows a longer
/// one).
const PREFETCH_BYTES: usize = 512;

/// Hints the CPU to load the start of `bytes` into the cache: a merge
/// reads sorted records at scattered addresses of the batches, and asking
/// for the next ones early overlaps their cache and TLB misses with the
/// copying of the current one. Only a hint: it never faults and changes
/// nothing.
#[inline]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for at in (0..bytes.len().min(PREFETCH_BYTES)).step_by(64) {
            // SAFETY: the address is inside `bytes`; a prefetch reads
            // nothing architecturally and cannot fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at).cast::<i8>()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// How many leading bytes `a` and `b` share.
fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"))
            ^ u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != 0 {
            return i + (x.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Bytes one record charges against a batch's budget.
pub(crate) fn record_cost(kind: KeyKind, key_len: usize, record_len: usize) -> usize {
    match kind {
        KeyKind::Fixed8 => FIXED_ENTRY_COST + record_len,
        KeyKind::Variable => VAR_ENTRY_COST + key_len + record_len,
    }
}

/// The first 8 bytes of `key`, zero-padded, as a big-endian integer. For two
/// keys with different prefixes, prefix order is `memcmp` order (a key that
/// ends early pads with 0, the smallest byte, exactly where `memcmp` would
/// call it the shorter, smaller one); equal prefixes need the full keys.
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = key.len().min(8);
    buf[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(buf)
}

/// [`key_prefix`] with 16 bytes.
fn key_prefix16(key: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    let n = key.len().min(16);
    buf[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(buf)
}

enum Body {
    Fixed {
        entries: Vec<FixedEntry>,
        scratch: Vec<FixedEntry>,
    },
    Variable {
        entries: Vec<VarEntry>,
        keys: Vec<u8>,
    },
}

/// An input batch lent to the copy jobs that take its records into
/// sub-batches ([`Batch::append_from`]): shared by them, and handed to its
/// `then` (the reader's recycling) when the last of them lets go.
pub(crate) struct Lent {
    batch: Option<Batch>,
    /// Taken once, on drop; the mutex only makes `Lent` shareable.
    then: std::sync::Mutex<Option<Recycle>>,
}

/// What a [`Lent`] batch is handed to once its copies are done.
type Recycle = Box<dyn FnOnce(Batch) + Send>;

impl Lent {
    pub(crate) fn new(batch: Batch, then: impl FnOnce(Batch) + Send + 'static) -> Arc<Self> {
        Arc::new(Lent {
            batch: Some(batch),
            then: std::sync::Mutex::new(Some(Box::new(then))),
        })
    }

    pub(crate) fn batch(&self) -> &Batch {
        self.batch
            .as_ref()
            .expect("a lent batch is held until dropped")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let then = self.then.get_mut().ok().and_then(Option::take);
        if let (Some(batch), Some(then)) = (self.batch.take(), then) {
            then(batch);
        }
    }
}

/// Record and key bytes that pool jobs are still copying into a batch's
/// reserved capacity: the logical lengths the buffers will have once they
/// are done, and the jobs. The buffers are not reallocated, read or
/// dropped until the jobs have finished ([`Batch::settle`], or `Drop`).
struct Unsettled {
    data_len: usize,
    keys_len: usize,
    entries_len: usize,
    copies: Vec<Slot<()>>,
    pool: Arc<ThreadPool>,
}

/// A destination in a batch's reserved capacity, handed to a copy job.
struct Dest<T = u8>(*mut T);

// SAFETY: the pointer is only written by the one job it is given to, into
// a region no one else reads or writes until that job has finished (see
// `Unsettled`).
unsafe impl<T> Send for Dest<T> {}

impl<T> Dest<T> {
    fn ptr(&self) -> *mut T {
        self.0
    }
}

/// Where a copy job writes the entries it takes, moved to their place in
/// the batch: record offsets by `shift` (and `Variable` key offsets by
/// `key_shift`), both as `new = old - from + to`.
enum EntryCopy {
    Fixed(Dest<FixedEntry>),
    Variable(Dest<VarEntry>),
}

/// `offset - from + to`, the move of an offset from one buffer to another.
#[derive(Clone, Copy)]
struct Shift {
    from: usize,
    to: usize,
}

impl Shift {
    fn apply(self, offset: u32) -> u32 {
        (offset as usize - self.from + self.to) as u32
    }
}

/// A sub-batch of records with a soft byte budget. Public so the benchmark
/// example can time the in-memory sorts alone; the [`Sorter`](crate::Sorter)
/// is the real interface.
pub struct Batch {
    data: Vec<u8>,
    body: Body,
    limit: usize,
    /// Bytes held: records, keys, entries and sort scratch (the meter's).
    used: usize,
    /// What the records count against `limit` (see [`ChunkFill`]).
    fill: ChunkFill,
    filled: usize,
    /// The largest key plus record length of the records held (0 when
    /// empty): the sorter checks a whole input batch against its record
    /// limit with it instead of walking the entries.
    max_len: usize,
    unsettled: Option<Unsettled>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Copy jobs may still be writing into the buffers.
        if let Some(u) = self.unsettled.take() {
            for copy in u.copies {
                let _ = copy.wait(&u.pool, "record copy");
            }
        }
    }
}

impl Batch {
    /// An empty batch that accepts records until they would charge more
    /// than `limit` bytes (see [`Batch::try_push`]). Nothing is allocated
    /// until the first record; then the record buffer reserves `limit`
    /// bytes at once (virtual memory: pages are touched as records arrive),
    /// so it never reallocates while filling.
    pub fn new(kind: KeyKind, limit: usize) -> Self {
        Batch::with_fill(kind, limit, ChunkFill::Held)
    }

    /// [`Batch::new`] whose records count against `limit` as `fill` says.
    pub fn with_fill(kind: KeyKind, limit: usize, fill: ChunkFill) -> Self {
        let body = match kind {
            KeyKind::Fixed8 => Body::Fixed {
                entries: Vec::new(),
                scratch: Vec::new(),
            },
            KeyKind::Variable => Body::Variable {
                entries: Vec::new(),
                keys: Vec::new(),
            },
        };
        Batch {
            data: Vec::new(),
            body,
            limit,
            used: 0,
            fill,
            filled: 0,
            max_len: 0,
            unsettled: None,
        }
    }

    /// A batch for gathering input records on any thread before they are
    /// handed to [`Sorter::push_batch`](crate::Sorter::push_batch): no
    /// budget (any number of records, up to the 4 GiB an offset can
    /// address), with room for `capacity` record bytes and `records`
    /// entries reserved at once.
    pub fn for_input(kind: KeyKind, capacity: usize, records: usize) -> Self {
        let mut batch = Batch::new(kind, MAX_OFFSET);
        batch.data.reserve_exact(capacity.min(MAX_OFFSET));
        match &mut batch.body {
            Body::Fixed { entries, .. } => entries.reserve_exact(records),
            Body::Variable { entries, .. } => entries.reserve_exact(records),
        }
        batch
    }

    /// [`Batch::for_input`] whose records also add up what they count
    /// against a sorter's chunk as `fill` says (the sorter's
    /// [`chunk_fill`](crate::Sorter::chunk_fill)): the input batch then
    /// holds that sum, and [`Sorter::push_batch`](crate::Sorter::push_batch)
    /// takes a batch that fits the filling sub-batch whole without walking
    /// its records (a batch of another fill is walked record by record, as
    /// before, with the same result).
    pub fn for_input_filling(
        kind: KeyKind,
        fill: ChunkFill,
        capacity: usize,
        records: usize,
    ) -> Self {
        let mut batch = Batch::for_input(kind, capacity, records);
        batch.fill = fill;
        batch
    }

    /// What this batch's records count against its limit (see
    /// [`Batch::for_input_filling`]).
    pub fn chunk_fill(&self) -> ChunkFill {
        self.fill
    }

    /// The largest key plus record length among the records held (0 when
    /// empty).
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// Empties a [`Batch::for_input`] batch for the next input batch,
    /// keeping its buffers (so a reader that recycles batches does not pay
    /// fresh pages for every one), with room for at least `capacity` record
    /// bytes and `records` entries.
    pub fn reuse_for_input(&mut self, capacity: usize, records: usize) {
        debug_assert_eq!(self.limit, MAX_OFFSET, "not a for_input batch");
        self.clear();
        self.data.reserve(capacity.min(MAX_OFFSET));
        match &mut self.body {
            Body::Fixed { entries, .. } => entries.reserve(records),
            Body::Variable { entries, .. } => entries.reserve(records),
        }
    }

    /// The key kind this batch was made for.
    pub fn kind(&self) -> KeyKind {
        match self.body {
            Body::Fixed { .. } => KeyKind::Fixed8,
            Body::Variable { .. } => KeyKind::Variable,
        }
    }

    /// Number of records, counting those whose entries are still being
    /// copied in.
    pub fn len(&self) -> usize {
        if let Some(u) = &self.unsettled {
            return u.entries_len;
        }
        self.entries_len()
    }

    /// Length of the entry list as it is now (without pending copies).
    fn entries_len(&self) -> usize {
        match &self.body {
            Body::Fixed { entries, .. } => entries.len(),
            Body::Variable { entries, .. } => entries.len(),
        }
    }

    /// Capacity of the entry list.
    fn entries_capacity(&self) -> usize {
        match &self.body {
            Body::Fixed { entries, .. } => entries.capacity(),
            Body::Variable { entries, .. } => entries.capacity(),
        }
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the record buffer has been allocated (a recycled batch).
    pub(crate) fn has_buffers(&self) -> bool {
        self.data.capacity() > 0
    }

    /// Bytes charged so far (records, keys, entries and sort scratch).
    pub fn used_bytes(&self) -> usize {
        self.used
    }

    /// What the records count against the batch's limit: its
    /// [`used_bytes`](Batch::used_bytes) unless made with another
    /// [`ChunkFill`].
    pub fn filled_bytes(&self) -> usize {
        self.filled
    }

    /// Bytes the records would take in a run file before compression: keys,
    /// records and at most 5 + 5 varint bytes of lengths each.
    pub(crate) fn raw_bytes(&self) -> u64 {
        let keys = match &self.body {
            Body::Fixed { .. } => 8 * self.len(),
            Body::Variable { .. } => self.keys_len(),
        };
        (self.data_len() + keys + 10 * self.len()) as u64
    }

    /// Appends a record unless it would push the batch over its budget (or
    /// past the 4 GiB an offset can address); returns whether it was taken.
    /// An empty batch takes any record, so one larger than the budget gets a
    /// batch of its own. The caller checks the key length for `Fixed8` (a
    /// shorter key is zero-padded, a longer one truncated, here).
    pub fn try_push(&mut self, key: &[u8], record: &[u8]) -> bool {
        self.try_push_parts(key, record, &[])
    }

    /// [`Batch::try_push`] of the record `head` followed by `tail` (bytes
    /// the caller carries with the record), without first joining them.
    pub fn try_push_parts(&mut self, key: &[u8], head: &[u8], tail: &[u8]) -> bool {
        let record_len = head.len() + tail.len();
        assert!(
            self.unsettled.is_none(),
            "try_push on a batch with copies in flight: settle it first"
        );
        let cost = record_cost(self.kind(), key.len(), record_len);
        let fill = self.fill.cost(record_len, cost);
        let empty = self.is_empty();
        if !empty && self.filled + fill > self.limit {
            return false;
        }
        if self.data.len() + record_len > MAX_OFFSET {
            return false;
        }
        if self.data.capacity() == 0 {
            self.data
                .reserve_exact(self.limit.min(MAX_OFFSET).max(record_len));
        }
        let offset = self.data.len() as u32;
        let len = record_len as u32;
        match &mut self.body {
            Body::Fixed { entries, .. } => {
                entries.push(FixedEntry {
                    key: key_prefix(key),
                    offset,
                    len,
                });
            }
            Body::Variable { entries, keys } => {
                if keys.len() + key.len() > MAX_OFFSET {
                    return false;
                }
                let key_offset = keys.len() as u32;
                keys.extend_from_slice(key);
                entries.push(VarEntry {
                    prefix: 0,
                    key_offset,
                    key_len: key.len() as u32,
                    offset,
                    len,
                });
            }
        }
        self.data.extend_from_slice(head);
        self.data.extend_from_slice(tail);
        self.used += cost;
        self.filled += fill;
        self.max_len = self.max_len.max(key.len() + record_len);
        true
    }

    /// The key and record lengths of the `i`-th entry.
    pub(crate) fn lens(&self, i: usize) -> (usize, usize) {
        match &self.body {
            Body::Fixed { entries, .. } => (8, entries[i].len as usize),
            Body::Variable { entries, .. } => {
                (entries[i].key_len as usize, entries[i].len as usize)
            }
        }
    }

    /// Bytes of records held (without keys and entries), counting those
    /// still being copied in.
    pub fn record_bytes(&self) -> usize {
        self.data_len()
    }

    /// Length of the record buffer once pending copies are done.
    fn data_len(&self) -> usize {
        self.unsettled
            .as_ref()
            .map_or(self.data.len(), |u| u.data_len)
    }

    /// Length of the key buffer (`Variable`) once pending copies are done.
    fn keys_len(&self) -> usize {
        match &self.body {
            Body::Fixed { .. } => 0,
            Body::Variable { keys, .. } => {
                self.unsettled.as_ref().map_or(keys.len(), |u| u.keys_len)
            }
        }
    }

    /// Whether copy jobs started by [`Batch::append_from`] may still be
    /// writing into this batch.
    pub(crate) fn is_unsettled(&self) -> bool {
        self.unsettled.is_some()
    }

    /// Waits for the copy jobs started by [`Batch::append_from`]; then the
    /// batch's bytes may be read. A lost job (it panicked) leaves the batch
    /// without the records it was to copy: the error is final for it.
    pub(crate) fn settle(&mut self) -> Result<(), Lost> {
        let Some(u) = self.unsettled.take() else {
            return Ok(());
        };
        let mut result = Ok(());
        for copy in u.copies {
            // Wait for every job, even after a lost one: each writes into
            // this batch's buffers.
            if let Err(lost) = copy.wait(&u.pool, "record copy") {
                result = Err(lost);
            }
        }
        result?;
        debug_assert!(u.data_len <= self.data.capacity());
        // SAFETY: every byte up to `data_len` has been written: below the
        // old length by earlier appends, above it by the finished copy
        // jobs, which filled exactly the ranges reserved for them, back to
        // back from the old length.
        unsafe { self.data.set_len(u.data_len) };
        debug_assert!(u.entries_len <= self.entries_capacity());
        match &mut self.body {
            Body::Fixed { entries, .. } => {
                // SAFETY: as for the record bytes: the jobs wrote every
                // entry from the old length to `entries_len`.
                unsafe { entries.set_len(u.entries_len) };
            }
            Body::Variable { entries, keys } => {
                debug_assert!(u.keys_len <= keys.capacity());
                // SAFETY: as for the record bytes.
                unsafe { keys.set_len(u.keys_len) };
                // SAFETY: as for the fixed entries.
                unsafe { entries.set_len(u.entries_len) };
            }
        }
        Ok(())
    }

    /// Appends `src`'s records from `from` on, in order, while they fit
    /// this batch's budget exactly as [`Batch::try_push`] would take them
    /// one by one (an empty batch takes at least one). The entries are
    /// added here; the records' bytes and keys are copied by one job on
    /// `pool`, into capacity reserved for them, so the caller's thread does
    /// no per-byte work: the batch is [unsettled](Batch::settle) until that
    /// job is done, and `src` is held until then. `src` must be in input
    /// order (not sorted), as [`Batch::for_input`] batches filled by
    /// `try_push` are. Returns how many records were taken and their key
    /// plus record bytes; a lost copy job is only reported here if this
    /// batch had to be settled to grow its buffers.
    pub(crate) fn append_from(
        &mut self,
        src: &Arc<Lent>,
        from: usize,
        pool: &Arc<ThreadPool>,
    ) -> Result<(usize, u64), Lost> {
        let lent = src;
        let src = lent.batch();
        assert_eq!(self.kind(), src.kind(), "batches of different key kinds");
        let (mut used, base, key_base) = (self.used, self.data_len(), self.keys_len());
        let mut filled = self.filled;
        let (mut data_len, mut keys_len) = (base, key_base);
        let mut bytes = 0u64;
        let mut to = from;
        let mut max_len = self.max_len;
        // The whole of `src` at once when it fits: its sums are what the
        // walk below would add up record by record (the same fill, the
        // same kind), and each record's prefix of the sums is below their
        // total, so the walk would take every record too.
        let (src_data, src_keys) = (src.data_len(), src.keys_len());
        let whole = from == 0
            && !src.is_empty()
            && src.fill == self.fill
            && filled + src.filled <= self.limit
            && base + src_data <= MAX_OFFSET
            && key_base + src_keys <= MAX_OFFSET;
        if whole {
            to = src.len();
            used += src.used;
            filled += src.filled;
            data_len += src_data;
            keys_len += src_keys;
            let key_bytes = match self.kind() {
                KeyKind::Fixed8 => 8 * src.len(),
                KeyKind::Variable => src_keys,
            };
            bytes = (key_bytes + src_data) as u64;
            max_len = max_len.max(src.max_len);
        }
        while !whole && to < src.len() {
            let (key_len, len) = src.lens(to);
            let cost = record_cost(self.kind(), key_len, len);
            let fill = self.fill.cost(len, cost);
            let empty = self.is_empty() && to == from;
            if (!empty && filled + fill > self.limit)
                || data_len + len > MAX_OFFSET
                || (self.kind() == KeyKind::Variable && keys_len + key_len > MAX_OFFSET)
            {
                break;
            }
            used += cost;
            filled += fill;
            data_len += len;
            keys_len += key_len;
            bytes += (key_len + len) as u64;
            max_len = max_len.max(key_len + len);
            to += 1;
        }
        if to == from {
            return Ok((0, 0));
        }
        // Room for the copies, reserved before any job writes into it: a
        // buffer is only reallocated once its jobs are done.
        if self.data.capacity() < data_len {
            self.settle()?;
            let want = self.limit.min(MAX_OFFSET).max(data_len);
            self.data.reserve_exact(want - self.data.len());
        }
        if let Body::Variable { keys, .. } = &self.body {
            if keys.capacity() < keys_len {
                self.settle()?;
                if let Body::Variable { keys, .. } = &mut self.body {
                    let want = (self.limit.min(MAX_OFFSET) / 2).max(keys_len);
                    keys.reserve_exact(want - keys.len());
                }
            }
        }
        // Room for the entries, which the copy job writes too: the
        // reading thread only adds up lengths. Grown (after the jobs
        // writing into it are done) to what the batch is likely to hold
        // once full, as its records so far say.
        let entries_base = self.len();
        let entries_len = entries_base + (to - from);
        if self.entries_capacity() < entries_len {
            self.settle()?;
            let likely = entries_len.saturating_mul(self.limit) / filled.max(1);
            let want = entries_len.max(likely + likely / 8);
            match &mut self.body {
                Body::Fixed { entries, .. } => entries.reserve_exact(want - entries.len()),
                Body::Variable { entries, .. } => entries.reserve_exact(want - entries.len()),
            }
        }
        let src_start = src.entry_offset(from);
        let src_end = src.entry_offset(to - 1) + src.lens(to - 1).1;
        debug_assert_eq!(src_end - src_start, data_len - base);
        // Offsets move by `base - src_start`; records are contiguous in
        // `src` because it is in input order.
        let shift = Shift {
            from: src_start,
            to: base,
        };
        let mut key_copy = None;
        let entry_copy = match (&mut self.body, &src.body) {
            (Body::Fixed { entries, .. }, Body::Fixed { .. }) => {
                // SAFETY: `entries_base + (to - from)` is within the
                // capacity reserved above.
                EntryCopy::Fixed(Dest(unsafe { entries.as_mut_ptr().add(entries_base) }))
            }
            (
                Body::Variable { entries, keys },
                Body::Variable {
                    entries: theirs, ..
                },
            ) => {
                let key_start = theirs[from].key_offset as usize;
                let key_end = theirs[to - 1].key_offset as usize + theirs[to - 1].key_len as usize;
                debug_assert_eq!(key_end - key_start, keys_len - key_base);
                // SAFETY: `key_base + (key_end - key_start)` is within the
                // capacity reserved above.
                let dest = Dest(unsafe { keys.as_mut_ptr().add(key_base) });
                key_copy = Some((
                    key_start..key_end,
                    dest,
                    Shift {
                        from: key_start,
                        to: key_base,
                    },
                ));
                // SAFETY: as for the fixed entries.
                EntryCopy::Variable(Dest(unsafe { entries.as_mut_ptr().add(entries_base) }))
            }
            _ => unreachable!("kinds checked above"),
        };
        // SAFETY: `base + (src_end - src_start)` is within the capacity
        // reserved above.
        let dest = Dest(unsafe { self.data.as_mut_ptr().add(base) });
        let job_src = Arc::clone(lent);
        let copy = alnsort_pipeline::spawn(pool, move || {
            let src = job_src.batch();
            let records = &src.data[src_start..src_end];
            // SAFETY: the destination is this job's own reserved range of
            // the batch's buffer (see `Unsettled`), which does not overlap
            // the source, another batch's buffer.
            unsafe { std::ptr::copy_nonoverlapping(records.as_ptr(), dest.ptr(), records.len()) };
            match (&src.body, entry_copy) {
                (Body::Fixed { entries, .. }, EntryCopy::Fixed(dest)) => {
                    for (k, e) in entries[from..to].iter().enumerate() {
                        let moved = FixedEntry {
                            offset: shift.apply(e.offset),
                            ..*e
                        };
                        // SAFETY: entry `k` of this job's own reserved
                        // range of the entry list, as for the records.
                        unsafe { dest.ptr().add(k).write(moved) };
                    }
                }
                (Body::Variable { entries, keys }, EntryCopy::Variable(dest)) => {
                    let Some((range, key_dest, key_shift)) = key_copy else {
                        unreachable!("variable entries come with their keys")
                    };
                    let keys = &keys[range];
                    // SAFETY: as for the records.
                    unsafe {
                        std::ptr::copy_nonoverlapping(keys.as_ptr(), key_dest.ptr(), keys.len())
                    };
                    for (k, e) in entries[from..to].iter().enumerate() {
                        let moved = VarEntry {
                            offset: shift.apply(e.offset),
                            key_offset: key_shift.apply(e.key_offset),
                            ..*e
                        };
                        // SAFETY: as for the fixed entries.
                        unsafe { dest.ptr().add(k).write(moved) };
                    }
                }
                _ => unreachable!("kinds checked by append_from"),
            }
        });
        let (data_now, keys_now, entries_now) = (
            self.data.len(),
            match &self.body {
                Body::Fixed { .. } => 0,
                Body::Variable { keys, .. } => keys.len(),
            },
            self.entries_len(),
        );
        let unsettled = self.unsettled.get_or_insert_with(|| Unsettled {
            data_len: data_now,
            keys_len: keys_now,
            entries_len: entries_now,
            copies: Vec::new(),
            pool: Arc::clone(pool),
        });
        unsettled.data_len = data_len;
        unsettled.keys_len = keys_len;
        unsettled.entries_len = entries_len;
        unsettled.copies.push(copy);
        self.used = used;
        self.filled = filled;
        self.max_len = max_len;
        Ok((to - from, bytes))
    }

    fn entry_offset(&self, i: usize) -> usize {
        match &self.body {
            Body::Fixed { entries, .. } => entries[i].offset as usize,
            Body::Variable { entries, .. } => entries[i].offset as usize,
        }
    }

    /// The part of the record buffer that records may still reach: its
    /// start address and the end offset of that part (capacity, or less
    /// when the budget left cannot fill it), and the bytes used so far (for
    /// the sorter's page prefaulting).
    pub(crate) fn data_span(&self) -> (usize, usize, usize) {
        let len = self.data_len();
        let reachable = len.saturating_add(self.limit.saturating_sub(self.filled));
        (
            self.data.as_ptr() as usize,
            self.data.capacity().min(reachable),
            len,
        )
    }

    /// Sorts the entries by key, stably: radix for `Fixed8`, the standard
    /// library's unstable sort with the record offset (input order) as the
    /// last key for `Variable`.
    pub fn sort(&mut self) {
        assert!(
            self.unsettled.is_none(),
            "sorting a batch with copies in flight: settle it first"
        );
        match &mut self.body {
            Body::Fixed { entries, scratch } => radix_sort(entries, scratch),
            Body::Variable { entries, keys } => {
                let keys: &[u8] = keys;
                let key = |e: &VarEntry| &keys[e.key_offset as usize..][..e.key_len as usize];
                // Every key starts with the same `skip` bytes, so memcmp
                // order is the order of what follows them; the prefixes are
                // taken there.
                let skip = match entries.first() {
                    Some(first) => entries.iter().fold(first.key_len as usize, |n, e| {
                        common_prefix_len(&key(first)[..n], key(e))
                    }),
                    None => 0,
                };
                for e in entries.iter_mut() {
                    e.prefix = key_prefix16(&key(e)[skip..]);
                }
                // Records are laid out in input order, so the offset
                // breaks ties as a stable sort would.
                entries.sort_unstable_by(|a, b| {
                    a.prefix
                        .cmp(&b.prefix)
                        .then_with(|| {
                            // Equal prefixes: both keys hold the same bytes
                            // up to the shorter one's end or `skip + 16`.
                            let from = (skip + 16).min(a.key_len as usize).min(b.key_len as usize);
                            key(a)[from..].cmp(&key(b)[from..])
                        })
                        .then(a.offset.cmp(&b.offset))
                });
            }
        }
    }

    /// The `i`-th entry: its key as an integer (`Fixed8`; 0 for
    /// `Variable`), its full key (`None` for `Fixed8`: the integer is the
    /// key) and its record.
    pub(crate) fn entry(&self, i: usize) -> (u64, Option<&[u8]>, &[u8]) {
        match &self.body {
            Body::Fixed { entries, .. } => {
                let e = entries[i];
                (
                    e.key,
                    None,
                    &self.data[e.offset as usize..][..e.len as usize],
                )
            }
            Body::Variable { entries, keys } => {
                let e = entries[i];
                let key = &keys[e.key_offset as usize..][..e.key_len as usize];
                (
                    0,
                    Some(key),
                    &self.data[e.offset as usize..][..e.len as usize],
                )
            }
        }
    }

    /// The `i`-th entry's full key and record; a `Fixed8` key, stored as an
    /// integer, is written to `buf` and returned from there.
    pub(crate) fn key_and_record<'a>(
        &'a self,
        i: usize,
        buf: &'a mut [u8; 8],
    ) -> (&'a [u8], &'a [u8]) {
        let (prefix, key, record) = self.entry(i);
        match key {
            Some(key) => (key, record),
            None => {
                *buf = prefix.to_be_bytes();
                (&buf[..], record)
            }
        }
    }

    /// Removes the first `n` entries of a sorted batch (those a stopped
    /// spill already wrote to its run): the rest stay in order, their
    /// bytes where they are. The buffers, and what they charge, are kept
    /// until [`clear`](Batch::clear).
    pub(crate) fn drop_front(&mut self, n: usize) {
        match &mut self.body {
            Body::Fixed { entries, .. } => {
                entries.drain(..n.min(entries.len()));
            }
            Body::Variable { entries, .. } => {
                entries.drain(..n.min(entries.len()));
            }
        }
    }

    /// Empties the batch for reuse, keeping its buffers, except that a
    /// buffer a lone oversized record blew past the budget is shrunk back.
    pub(crate) fn clear(&mut self) {
        if let Some(u) = self.unsettled.take() {
            // The records are dropped anyway; only the writes must end.
            for copy in u.copies {
                let _ = copy.wait(&u.pool, "record copy");
            }
        }
        self.data.clear();
        self.data.shrink_to(self.limit.min(MAX_OFFSET));
        match &mut self.body {
            Body::Fixed { entries, scratch } => {
                entries.clear();
                scratch.clear();
                entries.shrink_to(self.limit / FIXED_ENTRY_COST);
                scratch.shrink_to(self.limit / FIXED_ENTRY_COST);
            }
            Body::Variable { entries, keys } => {
                entries.clear();
                keys.clear();
                entries.shrink_to(self.limit / VAR_ENTRY_COST);
                keys.shrink_to(self.limit);
            }
        }
        self.used = 0;
        self.filled = 0;
        self.max_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(batch: &Batch) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..batch.len())
            .map(|i| {
                let (prefix, key, rec) = batch.entry(i);
                let key = key.map_or_else(|| prefix.to_be_bytes().to_vec(), <[u8]>::to_vec);
                (key, rec.to_vec())
            })
            .collect()
    }

    #[test]
    fn prefix_order_agrees_with_memcmp() {
        let keys: [&[u8]; 10] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"ab",
            b"abcdefgh",
            b"abcdefghi",
            b"abcdefghijklmnop",
            b"abcdefghijklmnop\0",
            b"abcdefghijklmnoq",
        ];
        for a in keys {
            for b in keys {
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} vs {b:?}");
                }
                let (pa, pb) = (key_prefix16(a), key_prefix16(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} vs {b:?}");
                }
            }
        }
    }

    /// A record pushed in two parts is the record pushed joined, and
    /// counts against the budget as that record does.
    #[test]
    fn records_pushed_in_parts_are_joined() {
        for kind in [KeyKind::Fixed8, KeyKind::Variable] {
            let (mut joined, mut parts) = (Batch::new(kind, 200), Batch::new(kind, 200));
            let recs: [(&[u8], &[u8]); 3] = [(b"head", b"tail"), (b"", b"x"), (b"abc", b"")];
            let mut taken = 0;
            for (i, (h, t)) in recs.iter().cycle().take(40).enumerate() {
                let key = (i as u64).to_be_bytes();
                let a = joined.try_push(&key, &[*h, *t].concat());
                assert_eq!(parts.try_push_parts(&key, h, t), a, "record {i}");
                taken += a as usize;
            }
            assert!(taken > 0 && taken < 40, "{taken} of 40 taken");
            assert_eq!(drain(&parts), drain(&joined));
            assert_eq!(parts.record_bytes(), joined.record_bytes());
        }
    }

    #[test]
    fn variable_batch_sorts_by_full_key_and_is_stable() {
        let mut batch = Batch::new(KeyKind::Variable, 1 << 20);
        let input: [(&[u8], &[u8]); 6] = [
            (b"abcdefghZ", b"1"),
            (b"abcdefgh", b"2"),
            (b"abcdefghA", b"3"),
            (b"abcdefgh", b"4"),
            (b"a", b"5"),
            (b"a\0", b"6"),
        ];
        for (k, r) in input {
            assert!(batch.try_push(k, r));
        }
        batch.sort();
        let records: Vec<Vec<u8>> = drain(&batch).into_iter().map(|(_, r)| r).collect();
        let want: Vec<&[u8]> = vec![b"5", b"6", b"2", b"4", b"3", b"1"];
        assert_eq!(records, want);
    }

    /// Keys sharing a long common prefix (as read names do) sort by their
    /// full bytes, stably, including keys that end inside the shared part's
    /// 8 following bytes, keys that are the shared part alone, and zero
    /// bytes against a key's end.
    #[test]
    fn variable_batch_with_shared_key_prefix_sorts_like_memcmp() {
        let mut rng = crate::test_support::XorShift64::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next_u64();
        for shared in [&b""[..], b"A", b"A00917:42:HKWJ3DSX2:1:"] {
            let mut input: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for i in 0..3000u32 {
                let mut key = shared.to_vec();
                for _ in 0..next() % 14 {
                    key.push([0u8, 1, b'a', b'b'][(next() % 4) as usize]);
                }
                input.push((key, i.to_le_bytes().to_vec()));
            }
            let mut batch = Batch::new(KeyKind::Variable, 1 << 20);
            for (k, r) in &input {
                assert!(batch.try_push(k, r));
            }
            batch.sort();
            let mut want = input.clone();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(drain(&batch), want, "shared prefix {shared:?}");
        }
    }

    #[test]
    fn common_prefix_len_counts_shared_bytes() {
        assert_eq!(common_prefix_len(b"", b"abc"), 0);
        assert_eq!(common_prefix_len(b"abc", b"abd"), 2);
        assert_eq!(common_prefix_len(b"abcdefghijk", b"abcdefghijk"), 11);
        assert_eq!(common_prefix_len(b"abcdefghijk", b"abcdefghij"), 10);
        assert_eq!(common_prefix_len(b"abcdefghijkl", b"abcdefghiXkl"), 9);
        assert_eq!(common_prefix_len(b"abcdeXghijkl", b"abcdefghijkl"), 5);
    }

    #[test]
    fn fixed_batch_sorts_records_by_key() {
        let mut batch = Batch::new(KeyKind::Fixed8, 1 << 20);
        for (k, r) in [(3u64, &b"c"[..]), (1, b"a1"), (2, b""), (1, b"a2")] {
            assert!(batch.try_push(&k.to_be_bytes(), r));
        }
        batch.sort();
        let got = drain(&batch);
        let want: Vec<(Vec<u8>, Vec<u8>)> = [(1u64, &b"a1"[..]), (1, b"a2"), (2, b""), (3, b"c")]
            .iter()
            .map(|(k, r)| (k.to_be_bytes().to_vec(), r.to_vec()))
            .collect();
        assert_eq!(got, want);
    }

    /// Appending an input batch takes records exactly as pushing them one
    /// by one would: same records, same entries, same split at the budget.
    #[test]
    fn append_from_matches_pushing_one_by_one() {
        for kind in [KeyKind::Fixed8, KeyKind::Variable] {
            let records: Vec<(Vec<u8>, Vec<u8>)> = (0..200u64)
                .map(|i| {
                    let key = match kind {
                        KeyKind::Fixed8 => (i * 7919 % 101).to_be_bytes().to_vec(),
                        KeyKind::Variable => format!("k{}", i * 31 % 17).into_bytes(),
                    };
                    (key, vec![i as u8; (i as usize * 13) % 90])
                })
                .collect();
            let mut input = Batch::for_input(kind, 1 << 10, 0);
            for (k, r) in &records {
                assert!(input.try_push(k, r));
            }
            let limit = 2000;
            let mut one_by_one = vec![Batch::new(kind, limit)];
            for (k, r) in &records {
                if !one_by_one.last_mut().unwrap().try_push(k, r) {
                    one_by_one.push(Batch::new(kind, limit));
                    assert!(one_by_one.last_mut().unwrap().try_push(k, r));
                }
            }
            let mut appended = vec![Batch::new(kind, limit)];
            // Start with one record pushed, so appends land mid-buffer.
            assert!(appended[0].try_push(&records[0].0, &records[0].1));
            let pool = Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap(),
            );
            let (back_tx, back_rx) = std::sync::mpsc::channel();
            let input = Lent::new(input, move |b| back_tx.send(b.len()).unwrap());
            let mut from = 1;
            let mut total = 0u64;
            while from < input.batch().len() {
                let (n, bytes) = appended
                    .last_mut()
                    .unwrap()
                    .append_from(&input, from, &pool)
                    .expect("copy");
                if n == 0 {
                    appended.push(Batch::new(kind, limit));
                    continue;
                }
                from += n;
                total += bytes;
            }
            let want_bytes: usize = records[1..].iter().map(|(k, r)| k.len() + r.len()).sum();
            assert_eq!(total, want_bytes as u64, "{kind:?}");
            assert_eq!(appended.len(), one_by_one.len(), "{kind:?}");
            drop(input);
            for (a, b) in appended.iter_mut().zip(&mut one_by_one) {
                assert_eq!(a.used_bytes(), b.used_bytes());
                a.settle().expect("copies");
                a.sort();
                b.sort();
                assert_eq!(drain(a), drain(b), "{kind:?}");
            }
            assert_eq!(
                back_rx.recv().expect("the input batch is handed back"),
                records.len(),
                "once every copy is done"
            );
        }
    }

    #[test]
    fn budget_is_enforced_except_for_the_first_record() {
        let mut batch = Batch::new(KeyKind::Fixed8, 100);
        let big = vec![7u8; 500];
        assert!(
            batch.try_push(&[0; 8], &big),
            "an empty batch takes anything"
        );
        assert!(!batch.try_push(&[0; 8], b"x"), "full");
        assert_eq!(batch.used_bytes(), FIXED_ENTRY_COST + 500);
        batch.clear();
        assert!(batch.is_empty());
        assert!(batch.try_push(&[0; 8], &[1; 60]));
        assert!(
            !batch.try_push(&[0; 8], &[1; 60]),
            "32 + 60 + 32 + 60 > 100"
        );
    }
}
