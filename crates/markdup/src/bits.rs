//! One bit per input record: the duplicate decisions.

/// A fixed-length bitset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bits {
    words: Vec<u64>,
    len: u64,
}

impl Bits {
    /// `len` bits, all clear.
    pub fn new(len: u64) -> Bits {
        Bits {
            words: vec![0; len.div_ceil(64) as usize],
            len,
        }
    }

    /// The bits as 64-bit words, bit `i` in word `i / 64` at `i % 64`
    /// (what [`Bits::from_words`] takes back).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// `len` bits from [`Bits::words`]; `None` when the words do not hold
    /// exactly `len` bits (bits beyond `len` must be clear).
    pub fn from_words(words: Vec<u64>, len: u64) -> Option<Bits> {
        if words.len() as u64 != len.div_ceil(64) {
            return None;
        }
        if !len.is_multiple_of(64) && words.last().is_some_and(|w| w >> (len % 64) != 0) {
            return None;
        }
        Some(Bits { words, len })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bit `i`; false beyond the end.
    pub fn get(&self, i: u64) -> bool {
        self.words
            .get((i / 64) as usize)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Sets bit `i` (which must be below `len`).
    pub fn set(&mut self, i: u64) {
        assert!(i < self.len, "bit {i} beyond {} bits", self.len);
        self.words[(i / 64) as usize] |= 1 << (i % 64);
    }

    /// Bits set.
    pub fn count_ones(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// Bits set in both.
    pub fn count_ones_and(&self, o: &Bits) -> u64 {
        self.words
            .iter()
            .zip(&o.words)
            .map(|(a, b)| (a & b).count_ones() as u64)
            .sum()
    }

    /// Bits set in either.
    pub fn count_ones_or(&self, o: &Bits) -> u64 {
        let n = self.words.len().max(o.words.len());
        (0..n)
            .map(|i| {
                let a = self.words.get(i).copied().unwrap_or(0);
                let b = o.words.get(i).copied().unwrap_or(0);
                (a | b).count_ones() as u64
            })
            .sum()
    }

    /// Every bit, in order.
    pub fn iter(&self) -> impl Iterator<Item = bool> + '_ {
        (0..self.len).map(|i| self.get(i))
    }

    /// The positions of the set bits, ascending.
    pub fn into_ones(self) -> impl Iterator<Item = u64> {
        self.words.into_iter().enumerate().flat_map(|(wi, mut w)| {
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let t = w.trailing_zeros() as u64;
                    w &= w - 1;
                    wi as u64 * 64 + t
                })
            })
        })
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

impl PartialEq<Vec<bool>> for Bits {
    fn eq(&self, o: &Vec<bool>) -> bool {
        self.len == o.len() as u64 && self.iter().zip(o).all(|(a, &b)| a == b)
    }
}

impl From<&[bool]> for Bits {
    fn from(v: &[bool]) -> Bits {
        let mut b = Bits::new(v.len() as u64);
        for (i, &x) in v.iter().enumerate() {
            if x {
                b.set(i as u64);
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_count_and_ones() {
        let mut b = Bits::new(130);
        for i in [0, 63, 64, 129] {
            b.set(i);
        }
        assert!(b.get(63) && b.get(64) && !b.get(65) && !b.get(500));
        assert_eq!(b.count_ones(), 4);
        assert_eq!(b.clone().into_ones().collect::<Vec<_>>(), [0, 63, 64, 129]);
        let mut v = vec![false; 130];
        for i in [0, 63, 64, 129] {
            v[i] = true;
        }
        assert_eq!(b, v);
        assert_eq!(Bits::from(&v[..]), b);
    }
}
