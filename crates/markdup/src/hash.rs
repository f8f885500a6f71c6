//! The crate's one 64-bit hash: a folded 64x64->128-bit multiply per word (foldhash's and wyhash's step), MurmurHash3's finaliser; fast, and the same in every process.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The two constants each word is mixed with: the fractional digits of pi
/// (foldhash's `ARBITRARY0` and `ARBITRARY1`), nothing special about them
/// but their irregular bits.
const P0: u64 = 0x243f_6a88_85a3_08d3;
const P1: u64 = 0x1319_8a2e_0370_7344;

/// Folds one word into the state: the full 128-bit product of the two,
/// each offset by a constant, its halves XORed. Every bit of either
/// operand reaches every bit of the result (a multiply by a constant, as
/// FxHash's step, only carries upward: names that differ in two words
/// collided, `read01589` with another of the same shape).
#[inline]
fn step(h: u64, word: u64) -> u64 {
    let p = u128::from(h ^ P0) * u128::from(word ^ P1);
    (p as u64) ^ (p >> 64) as u64
}

/// Folds `bytes` into `h` eight bytes at a time (little-endian words, the
/// tail zero-padded and marked with the length), without finalising.
#[inline]
fn fold_bytes(bytes: &[u8], mut h: u64) -> u64 {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = step(h, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    step(h, u64::from_le_bytes(tail) ^ (bytes.len() as u64) << 56)
}

/// A hash of `bytes` from `h`: the same bucket in every process, whatever
/// its hasher; mixed by [`fmix64`] so that its remainder by a bucket count
/// depends on every bit.
pub fn hash_bytes(bytes: &[u8], h: u64) -> u64 {
    fmix64(fold_bytes(bytes, h))
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ h >> 33
}

/// [`hash_bytes`] as a [`Hasher`] for the crate's hash tables: integers are
/// folded in as one word each, byte strings as [`hash_bytes`] folds them.
/// The tables' keys are the input's own (coordinates, names): nothing an
/// adversary picks to collide, so no keyed (SipHash) hashing is paid for;
/// std's `DefaultHasher` was 2.6% of `sort --markdup=samtools`'s CPU,
/// all of it on the marking thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0 = fold_bytes(bytes, self.0);
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.0 = step(self.0, u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.0 = step(self.0, u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.0 = step(self.0, u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = step(self.0, i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.0 = step(self.0, i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fmix64(self.0)
    }
}

/// A `HashMap` hashed by [`WordHasher`].
pub type WordMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// A `HashSet` hashed by [`WordHasher`].
pub type WordSet<K> = HashSet<K, BuildHasherDefault<WordHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    #[test]
    fn byte_strings_hash_as_hash_bytes_folds_them() {
        for s in [&b""[..], b"a", b"abcdefgh", b"read:1101:1000:2000/1"] {
            let mut h = WordHasher::default();
            h.write(s);
            assert_eq!(h.finish(), hash_bytes(s, 0));
        }
    }

    #[test]
    fn the_hash_is_the_same_in_every_process() {
        // Fixed values (worked out apart from this code, by a Python model
        // of the steps above): a table's order and a distributed bucket
        // never depend on the process (no random keys), and a change of
        // the hash shows here.
        assert_eq!(hash_bytes(b"alnsort", 0), 0x1fc6_b29e_a403_711f);
        let b = BuildHasherDefault::<WordHasher>::default();
        assert_eq!(b.hash_one((1i32, 2i64, 3u8)), 0xa477_44db_c372_6098);
        assert_ne!(b.hash_one((1i32, 2i64)), b.hash_one((2i32, 1i64)));
    }

    #[test]
    fn numbered_names_do_not_collide() {
        // Generated read names, as the tests and simulators write them:
        // 9-byte names collided under FxHash's step (two words, each
        // difference carried only upward).
        for (width, n) in [(5, 200_000), (9, 100_000)] {
            let mut seen = std::collections::HashSet::new();
            for i in 0..n {
                let name = format!("read{i:0width$}");
                assert!(
                    seen.insert(hash_bytes(name.as_bytes(), 0)),
                    "{name} collides"
                );
            }
        }
        let mut seen = std::collections::HashSet::new();
        for i in 0..100_000u32 {
            let name = format!("SRR000001.{i}:1101:{}:{}", i % 3000, i / 7);
            assert!(
                seen.insert(hash_bytes(name.as_bytes(), 0)),
                "{name} collides"
            );
        }
    }

    #[test]
    fn nearby_keys_spread_over_the_high_bits() {
        // hashbrown takes its control byte from the top 7 bits: keys that
        // differ in one coordinate must not share them all.
        let b = BuildHasherDefault::<WordHasher>::default();
        let tops: std::collections::HashSet<u64> =
            (0..1000i64).map(|c| b.hash_one((0i32, c)) >> 57).collect();
        assert!(tops.len() > 100, "{} distinct top bytes", tops.len());
        let mut h = WordHasher::default();
        7u32.hash(&mut h);
        assert_ne!(h.finish(), 0);
    }
}
