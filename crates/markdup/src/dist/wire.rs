//! The bytes the distributed marking's tasks hand each other besides ends
//! and slots (the spill files' encodings) and halves (`half.rs`): index
//! lists, a split's [`Boundary`], an end bucket's counts
//! ([`SetsDecided::counts_to_bytes`]) and a split's [`SplitOutcome`] with
//! the carry it was finished from. Little-endian fixed-width fields, each
//! decoded with its length checked: a cut or padded block is
//! [`MarkdupError::BadBlock`] naming what and where.

use std::collections::BTreeMap;

use alnsort_pipeline::varint;

#[cfg(doc)]
use super::SplitShare;
use super::{Boundary, SetsDecided, SplitOutcome};
use crate::{Bits, MarkdupError, SetSizeHistograms, WalkCarry};

pub(crate) fn bad_block(what: &'static str, len: usize, at: usize) -> MarkdupError {
    MarkdupError::BadBlock { what, len, at }
}

/// Index lists (8 bytes each, a listed index once per listing).
pub(crate) fn decode_indexes(b: &[u8], out: &mut Vec<u64>) -> Result<(), MarkdupError> {
    if !b.len().is_multiple_of(8) {
        return Err(bad_block("duplicate indexes", b.len(), b.len() / 8 * 8));
    }
    out.extend(
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("sized"))),
    );
    Ok(())
}

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

    /// An unsigned LEB128 varint ([`varint`]); a cut or overlong one is
    /// [`MarkdupError::BadBlock`] at its first byte.
    fn varint(&mut self) -> Result<u64, MarkdupError> {
        varint::read(self.b, &mut self.at).map_err(|_| bad_block(self.what, self.b.len(), self.at))
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
        // Keeping the merge order: 1, the input, the largest record's key
        // (as bytes, absent for an empty split); else 0.
        match &self.merge {
            None => out.push(0),
            Some(m) => {
                out.push(1);
                out.extend_from_slice(&m.input.to_le_bytes());
                let key = m.largest.as_ref().map(|k| {
                    let mut b = Vec::new();
                    k.encode(&mut b);
                    b
                });
                put_bytes(&mut out, key.as_deref());
            }
        }
        out
    }

    pub fn from_bytes(b: &[u8]) -> Result<Boundary, MarkdupError> {
        let mut f = Fields::new(b, "split boundary");
        let got = Boundary {
            first_name: f.bytes()?,
            last_name: f.bytes()?,
            last_template: f.u64()? as i64,
            first: f.u64()? as i64,
            merge: match f.u8()? {
                0 => None,
                _ => Some(super::MergeBoundary {
                    input: f.u32()?,
                    largest: match f.bytes()? {
                        None => None,
                        Some(k) => Some(super::merge_order::MergeKey::decode(&k, 0)?.0),
                    },
                }),
            },
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

/// Bytes of a record's range number in a split's [`SplitShare::ranges`]
/// (`u16`, little-endian: up to 65536 ranges).
pub const RANGE_BYTES: usize = 2;

/// The most ranges a split's range numbers can name.
pub const MAX_RANGES: usize = 1 << (8 * RANGE_BYTES);

/// Sets record `index`'s range number in `ranges` (a split's
/// [`SplitShare::ranges`], [`RANGE_BYTES`] per record); `false` when the
/// index or the range is beyond them.
pub fn set_range(ranges: &mut [u8], index: u64, range: usize) -> bool {
    let at = index as usize * RANGE_BYTES;
    match (ranges.get_mut(at..at + RANGE_BYTES), u16::try_from(range)) {
        (Some(to), Ok(r)) => {
            to.copy_from_slice(&r.to_le_bytes());
            true
        }
        _ => false,
    }
}

/// One split's part of the decision for one range of the output (one
/// reduce): how many of the split's records went to the range, and the
/// indexes (in the split) of the duplicates and optical duplicates among
/// them, ascending. A reduce holds the slices of its own range: memory
/// by its partition's duplicates, not by the input. As bytes
/// ([`RangeSlice::to_bytes`]) each list is its length and the gaps
/// between its indexes as LEB128 varints (a byte or two per duplicate
/// where duplicates are dense).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSlice {
    pub records: u64,
    pub duplicates: Vec<u64>,
    pub optical: Vec<u64>,
}

impl RangeSlice {
    /// Whether the split's record `index` is a duplicate, and an optical
    /// one.
    pub fn get(&self, index: u64) -> (bool, bool) {
        (
            self.duplicates.binary_search(&index).is_ok(),
            !self.optical.is_empty() && self.optical.binary_search(&index).is_ok(),
        )
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + 2 * (self.duplicates.len() + self.optical.len()));
        out.extend_from_slice(&self.records.to_le_bytes());
        for list in [&self.duplicates, &self.optical] {
            out.extend_from_slice(&(list.len() as u64).to_le_bytes());
            let mut next = 0u64;
            for &i in list {
                varint::put(&mut out, i - next);
                next = i.saturating_add(1);
            }
        }
        out
    }

    /// The slice [`RangeSlice::to_bytes`] wrote.
    pub fn from_bytes(b: &[u8]) -> Result<RangeSlice, MarkdupError> {
        let mut f = Fields::new(b, "range slice");
        let records = f.u64()?;
        let list = |f: &mut Fields<'_>| -> Result<Vec<u64>, MarkdupError> {
            let n = f.u64()?;
            // At least a byte per index.
            if n > (b.len() - f.at) as u64 {
                return Err(bad_block(f.what, b.len(), f.at));
            }
            let mut v = Vec::with_capacity(n as usize);
            let mut next = 0u64;
            for _ in 0..n {
                let at = f.at;
                let i = f
                    .varint()?
                    .checked_add(next)
                    .ok_or_else(|| bad_block(f.what, b.len(), at))?;
                v.push(i);
                next = i.saturating_add(1);
            }
            Ok(v)
        };
        let duplicates = list(&mut f)?;
        let optical = list(&mut f)?;
        f.end()?;
        Ok(RangeSlice {
            records,
            duplicates,
            optical,
        })
    }
}

impl SplitOutcome {
    /// The split's decision cut by range of the output: `ranges` holds
    /// each record's range number ([`set_range`]), of `partitions`
    /// ranges; one [`RangeSlice`] per range.
    pub fn slices(
        &self,
        ranges: &[u8],
        partitions: usize,
    ) -> Result<Vec<RangeSlice>, MarkdupError> {
        let records = self.duplicate.len();
        if ranges.len() as u64 != records * RANGE_BYTES as u64 {
            return Err(MarkdupError::RangesCount {
                got: ranges.len() / RANGE_BYTES,
                records,
            });
        }
        let mut out = vec![RangeSlice::default(); partitions.max(1)];
        let range_of = |i: u64| {
            let at = i as usize * RANGE_BYTES;
            u16::from_le_bytes([ranges[at], ranges[at + 1]]) as usize
        };
        for i in 0..records {
            let r = range_of(i);
            let Some(slice) = out.get_mut(r) else {
                return Err(MarkdupError::RangeBeyond {
                    range: r,
                    partitions,
                });
            };
            slice.records += 1;
        }
        let mut listed = |bits: &Bits, optical: bool| {
            for (w, &word) in bits.words().iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let i = w as u64 * 64 + word.trailing_zeros() as u64;
                    word &= word - 1;
                    let slice = &mut out[range_of(i)];
                    match optical {
                        false => slice.duplicates.push(i),
                        true => slice.optical.push(i),
                    }
                }
            }
        };
        listed(&self.duplicate, false);
        if let Some(o) = &self.optical {
            listed(o, true);
        }
        Ok(out)
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
            merge: None,
        };
        let bytes = b.to_bytes();
        assert_eq!(Boundary::from_bytes(&bytes).unwrap(), b);
        for largest in [
            None,
            Some(super::super::merge_order::MergeKey {
                ref_id: 2,
                pos: 9,
                flag: 0x63,
                mapq: 60,
                mate_ref: 2,
                mate_pos: 99,
                tlen: -90,
                name: b"q1".to_vec(),
            }),
        ] {
            let keyed = Boundary {
                merge: Some(super::super::MergeBoundary { input: 3, largest }),
                ..b.clone()
            };
            let kb = keyed.to_bytes();
            assert_eq!(Boundary::from_bytes(&kb).unwrap(), keyed);
            assert!(Boundary::from_bytes(&kb[..kb.len() - 1]).is_err());
        }
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

    #[test]
    fn a_split_outcome_cut_by_range_gives_each_record_its_bits() {
        let n = 300u64;
        let (mut dup, mut optical) = (Bits::new(n), Bits::new(n));
        for i in (0..n).filter(|i| i % 7 == 3 || i % 64 == 63) {
            dup.set(i);
            if i % 3 == 0 {
                optical.set(i);
            }
        }
        let o = SplitOutcome {
            duplicate: dup.clone(),
            optical: Some(optical.clone()),
            counts: Vec::new(),
            carry: WalkCarry::default(),
            repeated: 0,
        };
        let partitions = 5;
        let range = |i: u64| ((i * 31 + i / 9) % partitions as u64) as usize;
        let mut ranges = vec![0u8; n as usize * RANGE_BYTES];
        for i in 0..n {
            assert!(set_range(&mut ranges, i, range(i)));
        }
        assert!(!set_range(&mut ranges, n, 0), "an index beyond the split");
        assert!(!set_range(&mut ranges, 0, MAX_RANGES), "a range beyond u16");
        let slices = o.slices(&ranges, partitions).unwrap();
        assert_eq!(slices.len(), partitions);
        assert_eq!(slices.iter().map(|s| s.records).sum::<u64>(), n);
        let back: Vec<RangeSlice> = slices
            .iter()
            .map(|s| RangeSlice::from_bytes(&s.to_bytes()).unwrap())
            .collect();
        assert_eq!(back, slices);
        for i in 0..n {
            assert_eq!(
                back[range(i)].get(i),
                (dup.get(i), optical.get(i)),
                "record {i}"
            );
        }
        // Every listed index is in its own range's slice only.
        let listed: usize = slices.iter().map(|s| s.duplicates.len()).sum();
        assert_eq!(listed as u64, dup.count_ones());

        // Range numbers of another run: refused by name.
        let e = o
            .slices(&ranges[..ranges.len() - RANGE_BYTES], partitions)
            .unwrap_err();
        assert!(
            matches!(
                e,
                MarkdupError::RangesCount {
                    got: 299,
                    records: 300
                }
            ),
            "{e}"
        );
        let e = o.slices(&ranges, 3).unwrap_err();
        assert!(
            matches!(e, MarkdupError::RangeBeyond { partitions: 3, .. }),
            "{e}"
        );
        // Gaps as varints: large indexes round-trip, a cut slice or a
        // varint that does not end is refused.
        let far = RangeSlice {
            records: 3,
            duplicates: vec![0, 1, 300, 1 << 40],
            optical: vec![u64::MAX - 1],
        };
        assert_eq!(RangeSlice::from_bytes(&far.to_bytes()).unwrap(), far);
        let bytes = slices[1].to_bytes();
        assert!(RangeSlice::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        let mut endless = far.to_bytes();
        let n = endless.len();
        endless[n - 1] |= 0x80;
        endless.push(0x80);
        let e = RangeSlice::from_bytes(&endless).unwrap_err();
        assert!(
            matches!(
                e,
                MarkdupError::BadBlock {
                    what: "range slice",
                    ..
                }
            ),
            "{e}"
        );
    }
}
