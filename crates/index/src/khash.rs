//! The order in which an index lists its bins. htslib keeps each reference's
//! bins in a klib `khash` integer map and writes them in bucket order, so a
//! byte-identical index needs the same bucket layout. This module
//! reproduces that layout — identity hash, power-of-two table, triangular
//! (quadratic) probing, 0.77 load factor, in-place rehash with kick-out,
//! tombstones on delete — and nothing else: values are plain indexes into
//! the caller's own storage.

/// Load factor at which the table grows (`__ac_HASH_UPPER` in khash.h).
const HASH_UPPER: f64 = 0.77;
/// Smallest table khash allocates (`kh_resize`: `if (new_n_buckets < 4)`).
const MIN_BUCKETS: u32 = 4;

/// Per-bucket state; khash packs the same two bits per bucket.
const EMPTY: u8 = 0b10;
const DELETED: u8 = 0b01;
const LIVE: u8 = 0b00;

/// `kroundup32`: round up to a power of two (0 stays 0, as in C).
fn round_up_pow2(x: u32) -> u32 {
    if x == 0 {
        0
    } else {
        x.next_power_of_two()
    }
}

/// `(khint_t)(n_buckets * __ac_HASH_UPPER + 0.5)`.
fn upper_bound_for(n_buckets: u32) -> u32 {
    (f64::from(n_buckets) * HASH_UPPER + 0.5) as u32
}

/// A khash-compatible `u32 -> usize` map whose iteration order is khash's.
#[derive(Debug, Clone, Default)]
pub(crate) struct BinTable {
    n_buckets: u32,
    size: u32,
    n_occupied: u32,
    upper_bound: u32,
    flags: Vec<u8>,
    keys: Vec<u32>,
    vals: Vec<usize>,
}

impl BinTable {
    /// Number of live keys (`kh_size`).
    pub fn len(&self) -> usize {
        self.size as usize
    }

    /// Number of buckets (`kh_end`); buckets are numbered `0..capacity()`.
    pub fn capacity(&self) -> u32 {
        self.n_buckets
    }

    /// The live entry in `bucket`, if any (`kh_exist` + key + value).
    pub fn entry(&self, bucket: u32) -> Option<(u32, usize)> {
        let b = bucket as usize;
        (self.flags.get(b) == Some(&LIVE)).then(|| (self.keys[b], self.vals[b]))
    }

    /// Live entries in bucket order: the order htslib writes bins.
    pub fn iter(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        (0..self.n_buckets).filter_map(|b| self.entry(b))
    }

    /// Bucket holding `key` (`kh_get`).
    pub fn get(&self, key: u32) -> Option<u32> {
        if self.n_buckets == 0 {
            return None;
        }
        let mask = self.n_buckets - 1;
        let mut i = key & mask;
        let last = i;
        let mut step = 0u32;
        while self.flags[i as usize] & EMPTY == 0
            && (self.flags[i as usize] & DELETED != 0 || self.keys[i as usize] != key)
        {
            step += 1;
            i = i.wrapping_add(step) & mask;
            if i == last {
                return None;
            }
        }
        (self.flags[i as usize] == LIVE).then_some(i)
    }

    /// Value stored under `key`.
    pub fn value(&self, key: u32) -> Option<usize> {
        self.get(key).map(|b| self.vals[b as usize])
    }

    /// Insert `key` if absent (`kh_put`), storing `make_value()` for it.
    /// Returns the value now stored under `key`.
    pub fn insert_with(&mut self, key: u32, make_value: impl FnOnce() -> usize) -> usize {
        if self.n_occupied >= self.upper_bound {
            if self.n_buckets > self.size << 1 {
                self.resize(self.n_buckets - 1); // clear tombstones
            } else {
                self.resize(self.n_buckets + 1); // grow
            }
        }
        let n = self.n_buckets;
        let mask = n - 1;
        let mut i = key & mask;
        let mut x = n;
        let mut site = n;
        if self.flags[i as usize] & EMPTY != 0 {
            x = i;
        } else {
            let last = i;
            let mut step = 0u32;
            while self.flags[i as usize] & EMPTY == 0
                && (self.flags[i as usize] & DELETED != 0 || self.keys[i as usize] != key)
            {
                if self.flags[i as usize] & DELETED != 0 {
                    site = i;
                }
                step += 1;
                i = i.wrapping_add(step) & mask;
                if i == last {
                    x = site;
                    break;
                }
            }
            if x == n {
                x = if self.flags[i as usize] & EMPTY != 0 && site != n {
                    site
                } else {
                    i
                };
            }
        }
        // The load factor keeps an empty bucket, and triangular probing over
        // a power-of-two table visits every bucket, so `x < n` here.
        let xi = x as usize;
        match self.flags[xi] {
            LIVE => self.vals[xi],
            state => {
                let value = make_value();
                self.keys[xi] = key;
                self.vals[xi] = value;
                self.flags[xi] = LIVE;
                self.size += 1;
                if state & EMPTY != 0 {
                    self.n_occupied += 1;
                }
                value
            }
        }
    }

    /// Delete the live entry in `bucket` (`kh_del`), leaving a tombstone.
    pub fn remove_bucket(&mut self, bucket: u32) {
        if let Some(flag) = self.flags.get_mut(bucket as usize) {
            if *flag == LIVE {
                *flag |= DELETED;
                self.size -= 1;
            }
        }
    }

    /// `kh_resize`: rehash in place into `round_up_pow2(new_n_buckets)`
    /// buckets, kicking resident keys forward exactly as khash does.
    fn resize(&mut self, new_n_buckets: u32) {
        let new_n = round_up_pow2(new_n_buckets).max(MIN_BUCKETS);
        if self.size >= upper_bound_for(new_n) {
            return; // requested size is too small
        }
        let mut new_flags = vec![EMPTY; new_n as usize];
        if self.n_buckets < new_n {
            self.keys.resize(new_n as usize, 0);
            self.vals.resize(new_n as usize, 0);
        }
        let new_mask = new_n - 1;
        for j in 0..self.n_buckets as usize {
            if self.flags[j] != LIVE {
                continue;
            }
            let mut key = self.keys[j];
            let mut val = self.vals[j];
            self.flags[j] |= DELETED;
            loop {
                let mut i = key & new_mask;
                let mut step = 0u32;
                while new_flags[i as usize] & EMPTY == 0 {
                    step += 1;
                    i = i.wrapping_add(step) & new_mask;
                }
                let iu = i as usize;
                new_flags[iu] &= !EMPTY;
                if i < self.n_buckets && self.flags[iu] == LIVE {
                    std::mem::swap(&mut self.keys[iu], &mut key);
                    std::mem::swap(&mut self.vals[iu], &mut val);
                    self.flags[iu] |= DELETED;
                } else {
                    self.keys[iu] = key;
                    self.vals[iu] = val;
                    break;
                }
            }
        }
        if self.n_buckets > new_n {
            self.keys.truncate(new_n as usize);
            self.vals.truncate(new_n as usize);
        }
        self.flags = new_flags;
        self.n_buckets = new_n;
        self.n_occupied = self.size;
        self.upper_bound = upper_bound_for(new_n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn small_tables_follow_identity_hash() {
        let mut t = BinTable::default();
        for (v, k) in [4681u32, 37450, 4682].into_iter().enumerate() {
            assert_eq!(t.insert_with(k, || v), v);
        }
        // 4 buckets until the 4th key: 4681 & 3 = 1, 37450 & 3 = 2,
        // 4682 & 3 = 2 -> probes to 3.
        assert_eq!(t.capacity(), 4);
        assert_eq!(
            t.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec![4681, 37450, 4682]
        );
        // Fourth key: occupancy 3 >= upper bound 3, so grow to 8 and rehash:
        // 4681 & 7 = 1, 37450 & 7 = 2, 4682 & 7 = 2 -> 3; then
        // 585 & 7 = 1 -> 2 -> 4.
        t.insert_with(585, || 3);
        assert_eq!(t.capacity(), 8);
        assert_eq!(
            t.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec![4681, 37450, 4682, 585]
        );
        assert_eq!(t.get(585), Some(4));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn rehash_kicks_wrapped_keys_forward() {
        let mut t = BinTable::default();
        // In 4 buckets 23 wraps from 3 to 0; growing to 8 moves 7 to 0.
        for (v, k) in [7u32, 23, 1, 2, 3, 4].into_iter().enumerate() {
            t.insert_with(k, || v);
        }
        assert_eq!(t.capacity(), 8);
        assert_eq!(
            t.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec![7, 1, 2, 3, 4, 23]
        );
        // The 7th key grows the table to 16; 7 kicks 23 out of bucket 7.
        t.insert_with(5, || 6);
        assert_eq!(t.capacity(), 16);
        assert_eq!(
            t.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5, 7, 23]
        );
        assert_eq!(t.get(23), Some(8));
    }

    #[test]
    fn remove_leaves_tombstone_that_get_skips() {
        let mut t = BinTable::default();
        t.insert_with(1, || 10);
        t.insert_with(5, || 11); // 5 & 3 = 1: collides, probes to 2
        let b1 = t.get(1).unwrap_or(u32::MAX);
        t.remove_bucket(b1);
        assert_eq!(t.get(1), None);
        assert_eq!(t.value(5), Some(11));
        assert_eq!(t.len(), 1);
        // Re-inserting reuses the tombstone.
        assert_eq!(t.insert_with(1, || 12), 12);
        assert_eq!(t.get(1), Some(b1));
    }

    proptest! {
        /// Whatever the sequence of inserts and deletes, the table agrees
        /// with an ordinary map on membership and values.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((0u32..200, any::<bool>()), 0..400)) {
            let mut t = BinTable::default();
            let mut model = BTreeMap::new();
            for (n, (key, insert)) in ops.into_iter().enumerate() {
                if insert {
                    let v = t.insert_with(key, || n);
                    let expected = *model.entry(key).or_insert(n);
                    prop_assert_eq!(v, expected);
                } else if let Some(b) = t.get(key) {
                    t.remove_bucket(b);
                    prop_assert!(model.remove(&key).is_some());
                } else {
                    prop_assert!(!model.contains_key(&key));
                }
            }
            prop_assert_eq!(t.len(), model.len());
            let mut live: Vec<(u32, usize)> = t.iter().collect();
            live.sort_unstable();
            prop_assert_eq!(live, model.into_iter().collect::<Vec<_>>());
        }
    }
}
