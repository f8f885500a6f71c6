//! Picard's duplicate decision as each record gets it: the duplicate and optical bits over input ordinals, what removal and `TAGGING_POLICY` make of them (the `DT` tag where htsjdk puts it, 0x400, the records left out), renumbering, and the wire form a task in another process reads.

use crate::extract::DT;
use crate::Bits;
use alnsort_bam::record::FRAMED_FLAG_AT;
use alnsort_bam::RecordMut;
use std::sync::Arc;

/// The first bytes of [`Decision::to_bytes`] (format version 1).
const MAGIC: &[u8; 8] = b"ALNMDD1\0";

/// Picard's `TAGGING_POLICY`: which duplicates get a `DT` tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaggingPolicy {
    /// DontTag (the default): no DT tag is written.
    #[default]
    None,
    /// OpticalOnly: `DT:Z:SQ` on sequencing (optical) duplicates.
    Optical,
    /// All: `DT:Z:SQ` on optical duplicates, `DT:Z:LB` on the others.
    All,
}

/// A broken promise between the decision and the records it is applied
/// to (a bug or another run's bytes, never bad input); the texts are the
/// engine's internal errors'.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("record ordinal {ordinal} out of range ({records} records)")]
    OrdinalOutOfRange { ordinal: u64, records: u64 },
    #[error("a record of {0} bytes, too short for its flag")]
    TooShort(usize),
    #[error("record ordinal {to} beyond the {records} decided")]
    RenumberedBeyond { to: u64, records: u64 },
    #[error("{got} records renumbered of the {records} decided")]
    RenumberedCount { got: u64, records: u64 },
    #[error("duplicate decisions: not the bytes Decisions::to_bytes writes")]
    NotDecisionBytes,
}

/// The decision for every input record and the options that act on it
/// (`REMOVE_DUPLICATES`, `REMOVE_SEQUENCING_DUPLICATES`, `TAGGING_POLICY`).
#[derive(Debug)]
pub struct Decision {
    bits: Arc<Bits>,
    /// Optical duplicates (empty unless tagged or removed).
    optical_bits: Bits,
    records: u64,
    /// Records whose 0x400 is set.
    pub marked: u64,
    /// Records left out of the output.
    pub removed: u64,
    remove: bool,
    remove_sequencing: bool,
    tagging: TaggingPolicy,
}

/// Records `remove` and `remove_sequencing` leave out of `dup` and
/// `optical`.
fn removed_count(dup: &Bits, optical: &Bits, remove: bool, remove_sequencing: bool) -> u64 {
    match (remove, remove_sequencing) {
        (false, false) => 0,
        (true, false) => dup.count_ones(),
        (false, true) => optical.count_ones(),
        (true, true) => dup.count_ones_or(optical),
    }
}

impl Decision {
    /// The decision from the duplicate and optical bits over input-order
    /// ordinals and the options that act on it.
    pub fn new(
        bits: Bits,
        optical_bits: Bits,
        remove: bool,
        remove_sequencing: bool,
        tagging: TaggingPolicy,
    ) -> Decision {
        let removed = removed_count(&bits, &optical_bits, remove, remove_sequencing);
        Decision {
            records: bits.len(),
            marked: bits.count_ones(),
            bits: Arc::new(bits),
            optical_bits,
            removed,
            remove,
            remove_sequencing,
            tagging,
        }
    }

    /// The records decided on.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The duplicate bits, shared with the jobs that set 0x400 as they
    /// copy records.
    pub fn shared_bits(&self) -> Arc<Bits> {
        Arc::clone(&self.bits)
    }

    /// Whether every record keeps its length in the output: no record
    /// removed and no `DT` tag written.
    pub fn keeps_lengths(&self) -> bool {
        !self.remove && !self.remove_sequencing && self.tagging == TaggingPolicy::None
    }

    /// The same decision over other ordinals: `new` gives, in order, the
    /// new ordinal of each record (a permutation of `0..records`).
    pub fn renumbered(mut self, new: impl Iterator<Item = u64>) -> Result<Decision, DecisionError> {
        let mut bits = Bits::new(self.bits.len());
        let mut optical = Bits::new(self.optical_bits.len());
        let mut n = 0u64;
        for (i, to) in new.enumerate() {
            let i = i as u64;
            if to >= self.records {
                return Err(DecisionError::RenumberedBeyond {
                    to,
                    records: self.records,
                });
            }
            if self.bits.get(i) {
                bits.set(to);
            }
            if self.optical_bits.get(i) {
                optical.set(to);
            }
            n += 1;
        }
        if n != self.records {
            return Err(DecisionError::RenumberedCount {
                got: n,
                records: self.records,
            });
        }
        self.bits = Arc::new(bits);
        self.optical_bits = optical;
        Ok(self)
    }

    /// The duplicate and optical verdicts of the record of input ordinal
    /// `ordinal` (`rec`, with its block_size, checked to hold its flag).
    pub fn verdict(&self, rec: &[u8], ordinal: u64) -> Result<(bool, bool), DecisionError> {
        if ordinal >= self.records || rec.len() < FRAMED_FLAG_AT + 2 {
            return Err(DecisionError::OrdinalOutOfRange {
                ordinal,
                records: self.records,
            });
        }
        Ok((self.bits.get(ordinal), self.optical_bits.get(ordinal)))
    }

    /// The record to write for `rec` (with its block_size) whose verdicts
    /// are `dup` and `optical`, built in `buf`: every input `DT` tag
    /// dropped (Picard's `CLEAR_DT=true`), the policy's `DT` tag put where
    /// htsjdk puts it, 0x400 set or cleared; `None` when it is removed.
    pub fn edit<'a>(
        &self,
        rec: &[u8],
        dup: bool,
        optical: bool,
        buf: &'a mut Vec<u8>,
    ) -> Result<Option<&'a [u8]>, DecisionError> {
        if rec.len() < FRAMED_FLAG_AT + 2 {
            return Err(DecisionError::TooShort(rec.len()));
        }
        if (dup && self.remove) || (optical && self.remove_sequencing) {
            return Ok(None);
        }
        buf.clear();
        buf.extend_from_slice(rec);
        let mut out = RecordMut::new(buf);
        out.remove_tag(DT);
        // The value as stored, with its NUL.
        let tag: Option<&[u8]> = match (dup, optical, self.tagging) {
            (false, _, _) | (_, _, TaggingPolicy::None) => None,
            (true, true, _) => Some(b"SQ\0"),
            (true, false, TaggingPolicy::All) => Some(b"LB\0"),
            (true, false, TaggingPolicy::Optical) => None,
        };
        if let Some(v) = tag {
            let at = alnsort_bam::htsjdk::tags::insert_at(out.view().aux(), DT);
            out.insert_field(at, DT, b'Z', v);
        }
        let mut flag = out.view().flag();
        flag &= !crate::flags::DUPLICATE;
        if dup {
            flag |= crate::flags::DUPLICATE;
        }
        out.set_flag(flag);
        Ok(Some(buf))
    }

    /// The duplicate and optical bits, for a task in another process that
    /// writes some of the records ([`Decision::from_bytes`]): a magic, the
    /// record count, then each bitset's length and words (little-endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let words = |b: &Bits, out: &mut Vec<u8>| {
            out.extend_from_slice(&b.len().to_le_bytes());
            for w in b.words() {
                out.extend_from_slice(&w.to_le_bytes());
            }
        };
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&self.records.to_le_bytes());
        words(&self.bits, &mut out);
        words(&self.optical_bits, &mut out);
        out
    }

    /// The decision [`Decision::to_bytes`] wrote, with the options of the
    /// run that decided.
    pub fn from_bytes(
        bytes: &[u8],
        remove: bool,
        remove_sequencing: bool,
        tagging: TaggingPolicy,
    ) -> Result<Decision, DecisionError> {
        let bad = || DecisionError::NotDecisionBytes;
        let rest = bytes.strip_prefix(MAGIC).ok_or_else(bad)?;
        let mut at = 0usize;
        let u64_at = |at: &mut usize| -> Result<u64, DecisionError> {
            let b = rest.get(*at..*at + 8).ok_or_else(bad)?;
            *at += 8;
            Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let records = u64_at(&mut at)?;
        let mut bits = Vec::new();
        for _ in 0..2 {
            let len = u64_at(&mut at)?;
            let n = len.div_ceil(64);
            if n > (rest.len() as u64) / 8 {
                return Err(bad());
            }
            let words = (0..n)
                .map(|_| u64_at(&mut at))
                .collect::<Result<Vec<_>, _>>()?;
            bits.push(Bits::from_words(words, len).ok_or_else(bad)?);
        }
        if at != rest.len() || bits[0].len() != records {
            return Err(bad());
        }
        let optical_bits = bits.pop().expect("two");
        let dup = bits.pop().expect("two");
        Ok(Decision::new(
            dup,
            optical_bits,
            remove,
            remove_sequencing,
            tagging,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(n: u64, set: &[u64]) -> Bits {
        let mut b = Bits::new(n);
        for &i in set {
            b.set(i);
        }
        b
    }

    #[test]
    fn wire_form_round_trips_and_refuses_other_bytes() {
        let d = Decision::new(
            bits(130, &[0, 64, 129]),
            bits(130, &[64]),
            false,
            true,
            TaggingPolicy::All,
        );
        let bytes = d.to_bytes();
        let e = Decision::from_bytes(&bytes, false, true, TaggingPolicy::All).unwrap();
        assert_eq!((e.records(), e.marked, e.removed), (130, 3, 1));
        assert_eq!(e.to_bytes(), bytes);
        assert!(
            Decision::from_bytes(&bytes[..bytes.len() - 1], false, true, TaggingPolicy::All)
                .is_err()
        );
        assert!(
            Decision::from_bytes(b"not a decision", false, false, TaggingPolicy::None).is_err()
        );
    }

    #[test]
    fn renumbering_moves_the_bits_and_checks_the_permutation() {
        let d = Decision::new(
            bits(3, &[0]),
            bits(3, &[0]),
            false,
            false,
            TaggingPolicy::None,
        );
        let r = d.renumbered([2u64, 0, 1].into_iter()).unwrap();
        assert_eq!(r.verdict(&[0u8; 40], 2).unwrap(), (true, true));
        assert_eq!(r.verdict(&[0u8; 40], 0).unwrap(), (false, false));
        let d = Decision::new(
            bits(3, &[0]),
            bits(3, &[]),
            false,
            false,
            TaggingPolicy::None,
        );
        assert!(matches!(
            d.renumbered([0u64, 1].into_iter()),
            Err(DecisionError::RenumberedCount { got: 2, records: 3 })
        ));
    }
}
