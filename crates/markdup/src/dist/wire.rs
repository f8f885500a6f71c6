//! The bytes the distributed marking's tasks hand each other besides ends,
//! halves, slots and index lists (which have their own encodings in
//! `dist.rs`): a split's [`Boundary`], an end bucket's counts
//! ([`SetsDecided::counts_to_bytes`]) and a split's [`SplitOutcome`] with
//! the carry it was finished from. Little-endian fixed-width fields, each
//! decoded with its length checked: a cut or padded block is
//! [`MarkdupError::BadBlock`] naming what and where.

use std::collections::BTreeMap;

use super::{bad_block, Boundary, SetsDecided, SplitOutcome};
use crate::{Bits, MarkdupError, SetSizeHistograms, WalkCarry};

/// Reads fixed-width fields from a block, checking each one's room.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Fields<'a> {
    fn new(b: &'a [u8], what: &'static str) -> Self {
        Fields { b, at: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], MarkdupError> {
        let got = self
            .at
            .checked_add(n)
            .and_then(|end| self.b.get(self.at..end))
            .ok_or_else(|| bad_block(self.what, self.b.len(), self.at))?;
        self.at += n;
        Ok(got)
    }

    fn u8(&mut self) -> Result<u8, MarkdupError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, MarkdupError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, MarkdupError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn bytes(&mut self) -> Result<Option<Vec<u8>>, MarkdupError> {
        match self.u8()? {
            0 => Ok(None),
            _ => {
                let n = self.u32()? as usize;
                Ok(Some(self.take(n)?.to_vec()))
            }
        }
    }

    fn bits(&mut self) -> Result<Bits, MarkdupError> {
        let len = self.u64()?;
        let n = len.div_ceil(64);
        if n > (self.b.len() - self.at) as u64 / 8 {
            return Err(bad_block(self.what, self.b.len(), self.at));
        }
        let words = (0..n).map(|_| self.u64()).collect::<Result<Vec<_>, _>>()?;
        let at = self.at;
        Bits::from_words(words, len).ok_or_else(|| bad_block(self.what, self.b.len(), at))
    }

    fn carry(&mut self) -> Result<WalkCarry, MarkdupError> {
        Ok(WalkCarry {
            stale: self.u64()?,
            dup_template: self.u8()? != 0,
            optical_stale: self.u64()?,
            optical_dup_template: self.u8()? != 0,
        })
    }

    fn histogram(&mut self) -> Result<BTreeMap<u64, u64>, MarkdupError> {
        let n = self.u32()?;
        (0..n).map(|_| Ok((self.u64()?, self.u64()?))).collect()
    }

    /// The block must end here.
    fn end(self) -> Result<(), MarkdupError> {
        if self.at != self.b.len() {
            return Err(bad_block(self.what, self.b.len(), self.at));
        }
        Ok(())
    }
}

fn put_bytes(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }
}

fn put_bits(out: &mut Vec<u8>, b: &Bits) {
    out.extend_from_slice(&b.len().to_le_bytes());
    for w in b.words() {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

fn put_carry(out: &mut Vec<u8>, c: &WalkCarry) {
    out.extend_from_slice(&c.stale.to_le_bytes());
    out.push(c.dup_template as u8);
    out.extend_from_slice(&c.optical_stale.to_le_bytes());
    out.push(c.optical_dup_template as u8);
}

fn put_histogram(out: &mut Vec<u8>, h: &BTreeMap<u64, u64>) {
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    for (k, v) in h {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
    }
}

impl Boundary {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_bytes(&mut out, self.first_name.as_deref());
        put_bytes(&mut out, self.last_name.as_deref());
        out.extend_from_slice(&self.last_template.to_le_bytes());
        out.extend_from_slice(&self.first.to_le_bytes());
        out
    }

    pub fn from_bytes(b: &[u8]) -> Result<Boundary, MarkdupError> {
        let mut f = Fields::new(b, "split boundary");
        let got = Boundary {
            first_name: f.bytes()?,
            last_name: f.bytes()?,
            last_template: f.u64()? as i64,
            first: f.u64()? as i64,
        };
        f.end()?;
        Ok(got)
    }
}

impl SetsDecided {
    /// The bucket's counts (set-size histograms, optical pairs per
    /// library), which [`SetsDecided::add_counts`] sums; the index lists
    /// go to the splits ([`SetsDecided::by_split`]).
    pub fn counts_to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_histogram(&mut out, &self.set_sizes.all_sets);
        put_histogram(&mut out, &self.set_sizes.optical_sets);
        put_histogram(&mut out, &self.set_sizes.non_optical_sets);
        let by_lib: BTreeMap<u32, u64> = self
            .optical_by_library
            .iter()
            .map(|(&k, &v)| (k, v))
            .collect();
        out.extend_from_slice(&(by_lib.len() as u32).to_le_bytes());
        for (lib, n) in by_lib {
            out.extend_from_slice(&lib.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// The counts [`SetsDecided::counts_to_bytes`] wrote (no index lists).
    pub fn counts_from_bytes(b: &[u8]) -> Result<SetsDecided, MarkdupError> {
        let mut f = Fields::new(b, "bucket counts");
        let set_sizes = SetSizeHistograms {
            all_sets: f.histogram()?,
            optical_sets: f.histogram()?,
            non_optical_sets: f.histogram()?,
        };
        let n = f.u32()?;
        let optical_by_library = (0..n)
            .map(|_| Ok((f.u32()?, f.u64()?)))
            .collect::<Result<_, MarkdupError>>()?;
        f.end()?;
        Ok(SetsDecided {
            set_sizes,
            optical_by_library,
            ..Default::default()
        })
    }
}

impl SplitOutcome {
    /// The outcome with `carry_in`, the carry the split was finished from
    /// (which the assembly checks against the previous split's).
    pub fn to_bytes(&self, carry_in: WalkCarry) -> Vec<u8> {
        let mut out = Vec::new();
        put_carry(&mut out, &carry_in);
        put_carry(&mut out, &self.carry);
        put_bits(&mut out, &self.duplicate);
        match &self.optical {
            None => out.push(0),
            Some(b) => {
                out.push(1);
                put_bits(&mut out, b);
            }
        }
        out.extend_from_slice(&(self.counts.len() as u32).to_le_bytes());
        for row in &self.counts {
            for n in row {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        out.extend_from_slice(&self.repeated.to_le_bytes());
        out
    }

    /// The outcome and its carry in, as [`SplitOutcome::to_bytes`] wrote
    /// them.
    pub fn from_bytes(b: &[u8]) -> Result<(SplitOutcome, WalkCarry), MarkdupError> {
        let mut f = Fields::new(b, "split outcome");
        let carry_in = f.carry()?;
        let carry = f.carry()?;
        let duplicate = f.bits()?;
        let optical = match f.u8()? {
            0 => None,
            _ => Some(f.bits()?),
        };
        let n = f.u32()?;
        let counts = (0..n)
            .map(|_| {
                let mut row = [0u64; 6];
                for v in &mut row {
                    *v = f.u64()?;
                }
                Ok(row)
            })
            .collect::<Result<Vec<_>, MarkdupError>>()?;
        let repeated = f.u64()?;
        f.end()?;
        Ok((
            SplitOutcome {
                duplicate,
                optical,
                counts,
                carry,
                repeated,
            },
            carry_in,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_a_cut_block_is_an_error() {
        let b = Boundary {
            first_name: Some(b"r1".to_vec()),
            last_name: None,
            last_template: 77,
            first: 5,
        };
        let bytes = b.to_bytes();
        assert_eq!(Boundary::from_bytes(&bytes).unwrap(), b);
        assert!(Boundary::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(Boundary::from_bytes(&padded).is_err());

        let mut d = SetsDecided::default();
        d.set_sizes.all_sets.insert(2, 9);
        d.set_sizes.non_optical_sets.insert(3, 1);
        d.optical_by_library.insert(1, 4);
        let got = SetsDecided::counts_from_bytes(&d.counts_to_bytes()).unwrap();
        assert_eq!(got.set_sizes, d.set_sizes);
        assert_eq!(got.optical_by_library, d.optical_by_library);

        let mut dup = Bits::new(70);
        dup.set(69);
        let o = SplitOutcome {
            duplicate: dup,
            optical: Some(Bits::new(70)),
            counts: vec![[1, 2, 3, 4, 5, 6]],
            carry: WalkCarry {
                stale: 3,
                dup_template: true,
                optical_stale: 0,
                optical_dup_template: false,
            },
            repeated: 2,
        };
        let carry_in = WalkCarry {
            stale: 1,
            ..Default::default()
        };
        let bytes = o.to_bytes(carry_in);
        let (back, c) = SplitOutcome::from_bytes(&bytes).unwrap();
        assert_eq!(c, carry_in);
        assert_eq!(back.duplicate, o.duplicate);
        assert_eq!(back.optical, o.optical);
        assert_eq!(back.repeated, 2);
        assert_eq!(back.counts, o.counts);
        assert_eq!(back.carry, o.carry);
        let e = SplitOutcome::from_bytes(&bytes[..bytes.len() - 4]).unwrap_err();
        assert!(
            matches!(
                e,
                MarkdupError::BadBlock {
                    what: "split outcome",
                    ..
                }
            ),
            "{e}"
        );
    }
}
