//! LSD radix sort of fixed 8-byte keys, the in-memory sort for
//! `KeyKind::Fixed8` (coordinate order: big-endian `tid << 32 | pos`-style
//! keys). It sorts 16-byte entries (key plus the record's place in its
//! batch), never the records.
//!
//! Invariants: the sort is stable (each pass is a counting scatter that
//! walks the input front to back), and byte positions where every key holds
//! the same byte are skipped, as samtools' `ks_radixsort` trims the key
//! bytes it sorts on. Coordinate keys usually share their top 3-5 bytes, so
//! a batch takes 3-5 passes instead of 8.

/// One record of a `Fixed8` batch: its key as a big-endian integer (so
/// integer order is `memcmp` order) and where its bytes sit in the batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedEntry {
    /// The 8 key bytes read as a big-endian `u64`.
    pub key: u64,
    /// Byte offset of the record in its batch buffer.
    pub offset: u32,
    /// Record length in bytes.
    pub len: u32,
}

/// Below this many entries a comparison sort wins: each radix pass pays a
/// 256-bucket prefix sum and a full scatter, which only amortises once the
/// batch is larger than the bucket count.
const RADIX_MIN_LEN: usize = 256;

/// Bytes in a key, one radix pass each at most.
const KEY_BYTES: usize = 8;

/// Sorts `entries` by `key`, stably. `scratch` is a reusable buffer of the
/// same length (its contents are overwritten); on return the sorted entries
/// are in `entries` (the two vectors may have been swapped).
pub fn radix_sort(entries: &mut Vec<FixedEntry>, scratch: &mut Vec<FixedEntry>) {
    let n = entries.len();
    if n < RADIX_MIN_LEN {
        // `sort_by_key` is stable, which is the contract.
        entries.sort_by_key(|e| e.key);
        return;
    }
    let counts = histograms(entries);
    let first = entries[0].key;
    scratch.clear();
    scratch.resize(n, FixedEntry::default());
    let mut sorted_in_entries = true;
    for (byte, count) in counts.iter().enumerate() {
        let shift = 8 * byte;
        if count[((first >> shift) & 0xff) as usize] == n {
            continue; // every key has the same byte here
        }
        let mut next = [0usize; 256];
        let mut sum = 0;
        for (slot, c) in next.iter_mut().zip(count.iter()) {
            *slot = sum;
            sum += c;
        }
        let (src, dst) = if sorted_in_entries {
            (&entries[..], &mut scratch[..])
        } else {
            (&scratch[..], &mut entries[..])
        };
        scatter(src, dst, shift, &mut next);
        sorted_in_entries = !sorted_in_entries;
    }
    if !sorted_in_entries {
        std::mem::swap(entries, scratch);
    }
}

/// Bucket counts of every key byte, all eight in one pass over the entries.
fn histograms(entries: &[FixedEntry]) -> Box<[[usize; 256]; KEY_BYTES]> {
    let mut counts = Box::new([[0usize; 256]; KEY_BYTES]);
    for e in entries {
        let k = e.key;
        for (byte, count) in counts.iter_mut().enumerate() {
            count[((k >> (8 * byte)) & 0xff) as usize] += 1;
        }
    }
    counts
}

/// One stable counting pass: `next[b]` is where the next entry whose key
/// byte is `b` goes.
fn scatter(src: &[FixedEntry], dst: &mut [FixedEntry], shift: usize, next: &mut [usize; 256]) {
    for e in src {
        let bucket = ((e.key >> shift) & 0xff) as usize;
        dst[next[bucket]] = *e;
        next[bucket] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entries_from(keys: &[u64]) -> Vec<FixedEntry> {
        keys.iter()
            .enumerate()
            .map(|(i, &key)| FixedEntry {
                key,
                offset: i as u32,
                len: 0,
            })
            .collect()
    }

    fn check(keys: &[u64]) {
        let mut got = entries_from(keys);
        let mut scratch = Vec::new();
        radix_sort(&mut got, &mut scratch);
        let mut want = entries_from(keys);
        want.sort_by_key(|e| e.key); // std's stable sort is the reference
        assert_eq!(got, want);
    }

    /// The crate's test generator, as a closure.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut rng = crate::test_support::XorShift64::new(seed);
        move || rng.next_u64()
    }

    #[test]
    fn sorts_coordinate_like_keys_with_many_ties() {
        let mut next = rng(7);
        // A few references, positions from a small range: lots of equal keys
        // and constant high bytes (the skipped passes).
        let keys: Vec<u64> = (0..20_000)
            .map(|_| ((next() % 3) << 32) | (next() % 500))
            .collect();
        check(&keys);
    }

    #[test]
    fn sorts_full_width_random_keys() {
        let mut next = rng(99);
        let keys: Vec<u64> = (0..5_000).map(|_| next()).collect();
        check(&keys);
    }

    #[test]
    fn all_equal_keys_keep_input_order() {
        let keys = vec![0xdead_beef_u64; 1_000];
        let mut got = entries_from(&keys);
        radix_sort(&mut got, &mut Vec::new());
        let offsets: Vec<u32> = got.iter().map(|e| e.offset).collect();
        assert_eq!(offsets, (0..1_000).collect::<Vec<u32>>());
    }

    #[test]
    fn extreme_keys_sort_as_unsigned_big_endian() {
        let mut keys = vec![u64::MAX, 0, 1 << 63, (1 << 63) - 1, u64::MAX, 0];
        keys.extend(std::iter::repeat_n(5, RADIX_MIN_LEN)); // force radix path
        check(&keys);
    }

    #[test]
    fn empty_and_single() {
        check(&[]);
        check(&[42]);
    }

    proptest! {
        #[test]
        fn matches_stable_std_sort(
            keys in prop::collection::vec(
                prop_oneof![0u64..8, any::<u64>(), (0u64..4).prop_map(|x| x << 40)],
                0..2_000,
            )
        ) {
            check(&keys);
        }
    }
}
