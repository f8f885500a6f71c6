//! A sub-batch: one contiguous byte buffer of records plus a fixed-size
//! entry per record, sorted in place by entry. This is the arena of the
//! seed papers: records are copied once, on `push`, into a big recycled
//! buffer (no allocation per record), and sorting moves 16- or 24-byte
//! entries, never record bytes.
//!
//! Invariants: offsets are `u32`, so a batch holds under 4 GiB of records
//! and of keys (the sorter caps sub-batches well below that); entries are in
//! input order until `sort`, after which they are in (key, input order)
//! order.

use std::mem::size_of;

use crate::radix::{radix_sort, FixedEntry};
use crate::KeyKind;

/// One record of a `Variable` batch: the first 8 key bytes (zero-padded,
/// big-endian) to decide most comparisons without touching the key buffer,
/// then where the full key and the record sit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct VarEntry {
    prefix: u64,
    key_offset: u32,
    key_len: u32,
    offset: u32,
    len: u32,
}

/// Budget charged per `Fixed8` record besides its bytes: the entry plus its
/// twin in the radix scratch buffer.
const FIXED_ENTRY_COST: usize = 2 * size_of::<FixedEntry>();

/// Budget charged per `Variable` record besides its key and record bytes:
/// the entry plus the merge sort's scratch (std's stable sort allocates up
/// to one element of scratch per element for small slices).
const VAR_ENTRY_COST: usize = 2 * size_of::<VarEntry>();

/// Largest offset an entry can hold.
const MAX_OFFSET: usize = u32::MAX as usize;

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

/// A sub-batch of records with a soft byte budget. Public so the benchmark
/// example can time the in-memory sorts alone; the [`Sorter`](crate::Sorter)
/// is the real interface.
pub struct Batch {
    data: Vec<u8>,
    body: Body,
    limit: usize,
    used: usize,
}

impl Batch {
    /// An empty batch that accepts records until they would charge more
    /// than `limit` bytes (see [`Batch::try_push`]). Nothing is allocated
    /// until the first record; then the record buffer reserves `limit`
    /// bytes at once (virtual memory: pages are touched as records arrive),
    /// so it never reallocates while filling.
    pub fn new(kind: KeyKind, limit: usize) -> Self {
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

    /// Number of records.
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Fixed { entries, .. } => entries.len(),
            Body::Variable { entries, .. } => entries.len(),
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

    /// Bytes the records would take in a run file before compression: keys,
    /// records and at most 5 + 5 varint bytes of lengths each.
    pub(crate) fn raw_bytes(&self) -> u64 {
        let keys = match &self.body {
            Body::Fixed { entries, .. } => 8 * entries.len(),
            Body::Variable { keys, .. } => keys.len(),
        };
        (self.data.len() + keys + 10 * self.len()) as u64
    }

    /// Appends a record unless it would push the batch over its budget (or
    /// past the 4 GiB an offset can address); returns whether it was taken.
    /// An empty batch takes any record, so one larger than the budget gets a
    /// batch of its own. The caller checks the key length for `Fixed8` (a
    /// shorter key is zero-padded, a longer one truncated, here).
    pub fn try_push(&mut self, key: &[u8], record: &[u8]) -> bool {
        let cost = record_cost(self.kind(), key.len(), record.len());
        let empty = self.is_empty();
        if !empty && self.used + cost > self.limit {
            return false;
        }
        if self.data.len() + record.len() > MAX_OFFSET {
            return false;
        }
        if self.data.capacity() == 0 {
            self.data
                .reserve_exact(self.limit.min(MAX_OFFSET).max(record.len()));
        }
        let offset = self.data.len() as u32;
        let len = record.len() as u32;
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
                    prefix: key_prefix(key),
                    key_offset,
                    key_len: key.len() as u32,
                    offset,
                    len,
                });
            }
        }
        self.data.extend_from_slice(record);
        self.used += cost;
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

    /// Bytes of records held (without keys and entries).
    pub fn record_bytes(&self) -> usize {
        self.data.len()
    }

    /// Appends `src`'s records from `from` on, in order, while they fit
    /// this batch's budget exactly as [`Batch::try_push`] would take them
    /// one by one (an empty batch takes at least one), with one copy of
    /// their bytes and keys. `src` must be in input order (not sorted), as
    /// [`Batch::for_input`] batches filled by `try_push` are. Returns how
    /// many records were taken and their key plus record bytes.
    pub(crate) fn append_from(&mut self, src: &Batch, from: usize) -> (usize, u64) {
        assert_eq!(self.kind(), src.kind(), "batches of different key kinds");
        let (mut used, mut data_len) = (self.used, self.data.len());
        let mut keys_len = match &self.body {
            Body::Fixed { .. } => 0,
            Body::Variable { keys, .. } => keys.len(),
        };
        let mut bytes = 0u64;
        let mut to = from;
        while to < src.len() {
            let (key_len, len) = src.lens(to);
            let cost = record_cost(self.kind(), key_len, len);
            let empty = self.is_empty() && to == from;
            if (!empty && used + cost > self.limit)
                || data_len + len > MAX_OFFSET
                || (self.kind() == KeyKind::Variable && keys_len + key_len > MAX_OFFSET)
            {
                break;
            }
            used += cost;
            data_len += len;
            keys_len += key_len;
            bytes += (key_len + len) as u64;
            to += 1;
        }
        if to == from {
            return (0, 0);
        }
        let src_start = src.entry_offset(from);
        let src_end = src.entry_offset(to - 1) + src.lens(to - 1).1;
        if self.data.capacity() == 0 {
            self.data
                .reserve_exact(self.limit.min(MAX_OFFSET).max(src_end - src_start));
        }
        let base = self.data.len();
        self.data.extend_from_slice(&src.data[src_start..src_end]);
        // Offsets move by `base - src_start`; records are contiguous in
        // `src` because it is in input order.
        let shift = |offset: u32| (offset as usize - src_start + base) as u32;
        match (&mut self.body, &src.body) {
            (
                Body::Fixed { entries, .. },
                Body::Fixed {
                    entries: theirs, ..
                },
            ) => {
                entries.extend(theirs[from..to].iter().map(|e| FixedEntry {
                    offset: shift(e.offset),
                    ..*e
                }));
            }
            (
                Body::Variable { entries, keys },
                Body::Variable {
                    entries: theirs,
                    keys: their_keys,
                },
            ) => {
                let key_start = theirs[from].key_offset as usize;
                let key_end = theirs[to - 1].key_offset as usize + theirs[to - 1].key_len as usize;
                let key_base = keys.len();
                keys.extend_from_slice(&their_keys[key_start..key_end]);
                entries.extend(theirs[from..to].iter().map(|e| VarEntry {
                    offset: shift(e.offset),
                    key_offset: (e.key_offset as usize - key_start + key_base) as u32,
                    ..*e
                }));
            }
            _ => unreachable!("kinds checked above"),
        }
        self.used = used;
        (to - from, bytes)
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
        let len = self.data.len();
        let reachable = len.saturating_add(self.limit.saturating_sub(self.used));
        (
            self.data.as_ptr() as usize,
            self.data.capacity().min(reachable),
            len,
        )
    }

    /// Sorts the entries by key, stably: radix for `Fixed8`, the standard
    /// library's stable merge sort for `Variable`.
    pub fn sort(&mut self) {
        match &mut self.body {
            Body::Fixed { entries, scratch } => radix_sort(entries, scratch),
            Body::Variable { entries, keys } => {
                let keys: &[u8] = keys;
                entries.sort_by(|a, b| {
                    a.prefix.cmp(&b.prefix).then_with(|| {
                        let ka = &keys[a.key_offset as usize..][..a.key_len as usize];
                        let kb = &keys[b.key_offset as usize..][..b.key_len as usize];
                        ka.cmp(kb)
                    })
                });
            }
        }
    }

    /// The `i`-th entry: its key prefix (the whole key for `Fixed8`), its
    /// full key (`None` for `Fixed8`: the prefix is the key) and its record.
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
                    e.prefix,
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

    /// Empties the batch for reuse, keeping its buffers, except that a
    /// buffer a lone oversized record blew past the budget is shrunk back.
    pub(crate) fn clear(&mut self) {
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
        let keys: [&[u8]; 7] = [b"", b"\0", b"a", b"a\0", b"ab", b"abcdefgh", b"abcdefghi"];
        for a in keys {
            for b in keys {
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} vs {b:?}");
                }
            }
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
            let mut from = 1;
            let mut total = 0u64;
            while from < input.len() {
                let (n, bytes) = appended.last_mut().unwrap().append_from(&input, from);
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
            for (a, b) in appended.iter_mut().zip(&mut one_by_one) {
                assert_eq!(a.used_bytes(), b.used_bytes());
                a.sort();
                b.sort();
                assert_eq!(drain(a), drain(b), "{kind:?}");
            }
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
