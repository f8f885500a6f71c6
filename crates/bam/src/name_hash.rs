//! The hasher of the maps keyed by read names (markdup's waiting mates and
//! the grouping check's incomplete templates, the CRAM encoder's mates in a
//! slice): a word-at-a-time folded-multiply hash, several times cheaper
//! than the standard library's SipHash on names of 20 to 40 bytes. Each map gets a
//! random seed, so a file's names cannot be chosen to collide in every run.

use std::hash::{BuildHasher, Hasher};

const K: u64 = 0x517c_c1b7_2722_0a95;

/// A seeded [`NameHasher`] per map.
#[derive(Clone, Debug)]
pub struct NameHash {
    seed: u64,
}

impl Default for NameHash {
    fn default() -> Self {
        NameHash {
            seed: std::collections::hash_map::RandomState::new().hash_one(0u64),
        }
    }
}

impl BuildHasher for NameHash {
    type Hasher = NameHasher;

    fn build_hasher(&self) -> NameHasher {
        NameHasher(self.seed)
    }
}

/// Hashes 8 bytes at a time.
#[derive(Clone, Debug)]
pub struct NameHasher(u64);

impl NameHasher {
    /// The 128-bit product folded to 64 bits (not linear, unlike a plain
    /// multiply: similar names do not collide).
    fn add(&mut self, word: u64) {
        let x = (self.0 ^ word) as u128 * K as u128;
        self.0 = (x as u64) ^ ((x >> 64) as u64);
    }
}

impl Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Names that differ in one byte anywhere, or only in length (the
    /// slice's length is hashed too), land in many buckets: no more than a
    /// few share the low 16 bits of their hash.
    #[test]
    fn similar_names_spread() {
        let h = NameHash::default();
        let mut names = Vec::new();
        for i in 0..20_000u32 {
            names.push(format!("HWI-ST1234:8:1101:{}:{}", 1000 + i % 200, i / 200).into_bytes());
        }
        for n in 1..=40 {
            names.push(vec![b'A'; n]);
        }
        let hashes: Vec<u64> = names.iter().map(|n| h.hash_one(n)).collect();
        let distinct: HashSet<u64> = hashes.iter().copied().collect();
        assert_eq!(distinct.len(), names.len());
        let mut buckets = std::collections::HashMap::new();
        for x in &hashes {
            *buckets.entry(x & 0xffff).or_insert(0u32) += 1;
        }
        let worst = buckets.values().max().copied().unwrap();
        assert!(worst <= 8, "{worst} names in one bucket");
    }
}
