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
