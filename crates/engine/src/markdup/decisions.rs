//! The duplicate decision applied to the output: a bitset over input ordinals (`Decisions`), its wire form, `DT` tags and removal, and the flag set in the compression jobs (`MarkedChunk`).

use crate::error::{bail, Error, Result};
use crate::markdup::ends::{DT, ORDINAL_BYTES};
use crate::options::markdup::{MarkdupConfig, TaggingPolicy};
use alnsort_bam::record::{set_flag_bits_in_part, FRAMED_FLAG_AT};
use alnsort_bam::{RecordMut, RecordRef};
use alnsort_markdup::MetricsReport;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
/// The ordinal a record carries through the sorter ([`ordinal_suffix`]).
pub fn record_ordinal(rec: &[u8]) -> Result<u64> {
    let Some(body_len) = rec.len().checked_sub(ORDINAL_BYTES) else {
        return Err(Error::Internal(
            "a record came back without its ordinal".to_string(),
        ));
    };
    let mut ord = [0u8; 8];
    ord.copy_from_slice(&rec[body_len..]);
    Ok(u64::from_le_bytes(ord))
}

/// The first bytes of [`Decisions::to_bytes`] (format version 1).
const DECISIONS_MAGIC: &[u8; 8] = b"ALNMDD1\0";

/// The decision for every input record, applied as the records are written.
pub struct Decisions {
    pub(crate) bits: Arc<alnsort_markdup::Bits>,
    /// Duplicates met by [`Decisions::apply`] and [`MarkedChunk`]s so far
    /// (checked against `marked` at the end).
    seen_marked: Arc<AtomicU64>,
    /// Optical duplicates (empty unless tagged or removed).
    optical_bits: alnsort_markdup::Bits,
    records: u64,
    /// What the decision's state wrote to disk.
    spill: alnsort_markdup::SpillStats,
    /// Records whose 0x400 is set.
    pub marked: u64,
    /// Records left out of the output.
    pub removed: u64,
    remove: bool,
    remove_sequencing: bool,
    tagging: TaggingPolicy,
    pub metrics: MetricsReport,
    /// Whether an input record carries a `DT` tag, which [`Decisions::apply`]
    /// drops (Picard's `CLEAR_DT=true`): its record changes length, so
    /// whole chunks cannot be written in place. True where unknown (the
    /// decision made in another process).
    pub(crate) input_dt: bool,
}

/// The value of a record's `tag` if it is a `Z` string (`rec` with its
/// block_size); Picard's `getStringAttribute`.
pub fn string_tag(rec: &[u8], tag: [u8; 2]) -> Option<&[u8]> {
    RecordRef::with_block_size(rec).aux().find(tag)?.string()
}

/// Sets `tag` to the string `value` as htsjdk's `setAttribute` does: an
/// existing `tag` field is replaced where it is, else the field is inserted
/// where htsjdk's key order puts it (as `DT` is); `block_size` follows.
pub fn set_string_tag(rec: &mut Vec<u8>, tag: [u8; 2], value: &[u8]) {
    RecordMut::new(rec).set_string(tag, value, |aux| {
        alnsort_bam::htsjdk::tags::insert_at(aux, tag)
    });
}

/// Removes the first `tag` field of a record (with its block_size), as
/// htsjdk's `setAttribute(tag, null)` does; `block_size` follows.
pub fn remove_tag(rec: &mut Vec<u8>, tag: [u8; 2]) {
    RecordMut::new(rec).remove_tag(tag);
}

impl Decisions {
    /// The records decided on.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The decision from the duplicate and optical bits over input-order
    /// ordinals, what the marker spilled, the metrics, and the options
    /// that act on it: (`--remove-duplicates`,
    /// `--remove-sequencing-duplicates`, `--tagging-policy`).
    pub fn new(
        bits: alnsort_markdup::Bits,
        optical_bits: alnsort_markdup::Bits,
        spill: alnsort_markdup::SpillStats,
        metrics: MetricsReport,
        (remove, remove_sequencing, tagging): (bool, bool, TaggingPolicy),
    ) -> Decisions {
        let marked = bits.count_ones();
        let removed = match (remove, remove_sequencing) {
            (false, false) => 0,
            (true, false) => marked,
            (false, true) => optical_bits.count_ones(),
            (true, true) => bits.count_ones_or(&optical_bits),
        };
        Decisions {
            records: bits.len(),
            bits: Arc::new(bits),
            seen_marked: Arc::new(AtomicU64::new(0)),
            optical_bits,
            spill,
            marked,
            removed,
            remove,
            remove_sequencing,
            tagging,
            metrics,
            input_dt: true,
        }
    }

    /// The same decisions over other ordinals: `new` gives, in order, the
    /// new ordinal of each record (a permutation of `0..records`). Several
    /// inputs are decided in Picard's merge order and sorted with each
    /// record's ordinal in input order (`crate::markdup::inputs`).
    pub fn renumbered(mut self, new: impl Iterator<Item = u64>) -> Result<Decisions> {
        let mut bits = alnsort_markdup::Bits::new(self.bits.len());
        let mut optical = alnsort_markdup::Bits::new(self.optical_bits.len());
        let mut n = 0u64;
        for (i, to) in new.enumerate() {
            let i = i as u64;
            if to >= self.records {
                bail!(
                    Internal,
                    "record ordinal {to} beyond the {} decided",
                    self.records
                );
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
            bail!(
                Internal,
                "{n} records renumbered of the {} decided",
                self.records
            );
        }
        self.bits = Arc::new(bits);
        self.optical_bits = optical;
        Ok(self)
    }

    /// The record to write for `rec` as it comes out of the sorter (with
    /// its ordinal): the ordinal cut off and 0x400 set or cleared, built in
    /// `buf`; `None` when the record is removed.
    pub fn apply<'a>(&self, rec: &[u8], buf: &'a mut Vec<u8>) -> Result<Option<&'a [u8]>> {
        let ordinal = record_ordinal(rec)?;
        self.apply_at(&rec[..rec.len() - ORDINAL_BYTES], ordinal, buf)
    }

    /// [`Decisions::apply`] for a record given without its ordinal (`rec`,
    /// with its block_size) and the record's input ordinal `ordinal`: the
    /// copy of `alnsort MarkDuplicates`, which reads its input again in
    /// order rather than through the sorter, and the distributed stages'
    /// reduce, whose records carry another numbering (cut off by the caller).
    pub fn apply_at<'a>(
        &self,
        rec: &[u8],
        ordinal: u64,
        buf: &'a mut Vec<u8>,
    ) -> Result<Option<&'a [u8]>> {
        if ordinal >= self.records || rec.len() < FRAMED_FLAG_AT + 2 {
            return Err(Error::Internal(format!(
                "record ordinal {ordinal} out of range ({} records)",
                self.records
            )));
        }
        let (dup, optical) = (self.bits.get(ordinal), self.optical_bits.get(ordinal));
        self.apply_flags(rec, dup, optical, buf)
    }

    /// [`Decisions::apply_at`] of a record whose duplicate and optical
    /// verdicts the caller looked up (a reduce of the distributed stages
    /// holding only its range's part of the decision:
    /// `crate::stages::markdup::Marks::sliced`).
    pub fn apply_flags<'a>(
        &self,
        rec: &[u8],
        dup: bool,
        optical: bool,
        buf: &'a mut Vec<u8>,
    ) -> Result<Option<&'a [u8]>> {
        if rec.len() < FRAMED_FLAG_AT + 2 {
            return Err(Error::Internal(format!(
                "a record of {} bytes, too short for its flag",
                rec.len()
            )));
        }
        if dup {
            self.seen_marked.fetch_add(1, Ordering::Relaxed);
        }
        if (dup && self.remove) || (optical && self.remove_sequencing) {
            return Ok(None);
        }
        buf.clear();
        buf.extend_from_slice(rec);
        let mut out = RecordMut::new(buf);
        // Picard (CLEAR_DT=true) drops every DT tag of the input, then tags
        // duplicates at the end of the aux fields.
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
        flag &= !alnsort_markdup::flags::DUPLICATE;
        if dup {
            flag |= alnsort_markdup::flags::DUPLICATE;
        }
        out.set_flag(flag);
        Ok(Some(buf))
    }

    /// The duplicate and optical bits, for a task in another process that
    /// writes some of the records ([`Decisions::from_bytes`]): a magic,
    /// the record count, then each bitset's words (little-endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let words = |b: &alnsort_markdup::Bits, out: &mut Vec<u8>| {
            out.extend_from_slice(&b.len().to_le_bytes());
            for w in b.words() {
                out.extend_from_slice(&w.to_le_bytes());
            }
        };
        let mut out = DECISIONS_MAGIC.to_vec();
        out.extend_from_slice(&self.records.to_le_bytes());
        words(&self.bits, &mut out);
        words(&self.optical_bits, &mut out);
        out
    }

    /// The decisions [`Decisions::to_bytes`] wrote, applied with `cfg`'s
    /// removal and tagging options (those of the run that decided). The
    /// metrics stay with the deciding task (empty here).
    pub fn from_bytes(bytes: &[u8], cfg: &MarkdupConfig) -> Result<Decisions> {
        let bad = || {
            Error::Internal("duplicate decisions: not the bytes Decisions::to_bytes writes".into())
        };
        let rest = bytes.strip_prefix(DECISIONS_MAGIC).ok_or_else(bad)?;
        let mut at = 0usize;
        let u64_at = |at: &mut usize| -> Result<u64> {
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
                .collect::<Result<Vec<_>>>()?;
            bits.push(alnsort_markdup::Bits::from_words(words, len).ok_or_else(bad)?);
        }
        if at != rest.len() || bits[0].len() != records {
            return Err(bad());
        }
        let optical_bits = bits.pop().expect("two");
        let dup = bits.pop().expect("two");
        let marked = dup.count_ones();
        let (remove, remove_sequencing) = (cfg.remove_duplicates, cfg.remove_sequencing_duplicates);
        let removed = match (remove, remove_sequencing) {
            (false, false) => 0,
            (true, false) => marked,
            (false, true) => optical_bits.count_ones(),
            (true, true) => dup.count_ones_or(&optical_bits),
        };
        Ok(Decisions {
            records,
            bits: Arc::new(dup),
            seen_marked: Arc::new(AtomicU64::new(0)),
            optical_bits,
            spill: Default::default(),
            marked,
            removed,
            remove,
            remove_sequencing,
            tagging: cfg.tagging,
            metrics: MetricsReport::default(),
            input_dt: true,
        })
    }

    /// Duplicates met by [`Decisions::apply`] so far.
    pub fn seen_marked(&self) -> u64 {
        self.seen_marked.load(Ordering::Relaxed)
    }

    /// Whether every record keeps its place and length in the output (no
    /// record removed, no `DT` tag written and none in the input to
    /// drop): then whole chunks of the sorted stream are written as
    /// [`MarkedChunk`]s.
    pub fn marks_in_place(&self) -> bool {
        !self.remove
            && !self.remove_sequencing
            && self.tagging == TaggingPolicy::None
            && !self.input_dt
    }

    /// `chunk` as the records to write, their ordinals cut off and 0x400
    /// set or cleared as they are copied (by the output's compression
    /// jobs, on the pool). Only when [`Decisions::marks_in_place`].
    pub fn marked_chunk(&self, chunk: alnsort_sort::Chunk) -> MarkedChunk {
        debug_assert!(self.marks_in_place());
        MarkedChunk {
            chunk,
            edit: FlagEdit {
                bits: Arc::clone(&self.bits),
                seen_marked: Arc::clone(&self.seen_marked),
            },
        }
    }

    /// Checks, once every record is written, that the records met carried
    /// each duplicate's ordinal: as many duplicates met as decided.
    pub fn check_all_met(&self) -> Result<()> {
        let seen = self.seen_marked.load(Ordering::Relaxed);
        if seen != self.marked {
            return Err(Error::Internal(format!("{} records were decided duplicates but {seen} of the records written carried their ordinals",
                self.marked)));
        }
        Ok(())
    }

    /// The `--stats-json` object: the metrics' counts summed over libraries.
    pub fn stats_counts(&self) -> Vec<(&'static str, u64)> {
        let libs = &self.metrics.libraries;
        let sum = |f: fn(&alnsort_markdup::DuplicationMetrics) -> u64| libs.iter().map(f).sum();
        vec![
            ("libraries", libs.len() as u64),
            (
                "unpaired_reads_examined",
                sum(|m| m.unpaired_reads_examined),
            ),
            ("read_pairs_examined", sum(|m| m.read_pairs_examined)),
            (
                "secondary_or_supplementary_rds",
                sum(|m| m.secondary_or_supplementary_rds),
            ),
            ("unmapped_reads", sum(|m| m.unmapped_reads)),
            (
                "unpaired_read_duplicates",
                sum(|m| m.unpaired_read_duplicates),
            ),
            ("read_pair_duplicates", sum(|m| m.read_pair_duplicates)),
            (
                "read_pair_optical_duplicates",
                sum(|m| m.read_pair_optical_duplicates),
            ),
            ("records_marked", self.marked),
            ("records_removed", self.removed),
            ("spill_runs", self.spill.runs),
            ("spill_bytes", self.spill.bytes),
            ("waiting_spilled", self.spill.waiting),
        ]
    }
}

/// A chunk of the sorted stream whose records are written with their
/// ordinal cut off and 0x400 set or cleared ([`Decisions::marked_chunk`]):
/// [`alnsort_bgzf::Units::unit`] is the record without its ordinal (its
/// length, and the position fields an index reads), and the compression
/// jobs copy it with the flag decided ([`FlagEdit`]).
pub struct MarkedChunk {
    chunk: alnsort_sort::Chunk,
    edit: FlagEdit,
}

/// Copies records that carry their ordinal with the decided 0x400.
pub(crate) struct FlagEdit {
    pub(crate) bits: Arc<alnsort_markdup::Bits>,
    pub(crate) seen_marked: Arc<AtomicU64>,
}

impl FlagEdit {
    /// Appends bytes `range` of `rec` (a record with its block_size and its
    /// ordinal; `range` within the record, short of the ordinal) to `out`,
    /// with the flag's high byte (the one with 0x400) as decided when the
    /// range holds it.
    pub(crate) fn append(&self, rec: &[u8], range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&rec[range.clone()]);
        set_flag_bits_in_part(
            &mut out[at..],
            range.start,
            alnsort_markdup::flags::DUPLICATE,
            || {
                let body_len = rec.len() - ORDINAL_BYTES;
                let mut ord = [0u8; 8];
                ord.copy_from_slice(&rec[body_len..]);
                let dup = self.bits.get(u64::from_le_bytes(ord));
                if dup {
                    self.seen_marked.fetch_add(1, Ordering::Relaxed);
                }
                dup
            },
        );
    }
}

impl alnsort_bgzf::Units for MarkedChunk {
    fn count(&self) -> usize {
        self.chunk.len()
    }

    fn unit(&self, i: usize) -> &[u8] {
        let rec = self.chunk.record(i);
        &rec[..rec.len() - ORDINAL_BYTES]
    }

    fn unit_len(&self, i: usize) -> usize {
        self.chunk.record_len(i) - ORDINAL_BYTES
    }

    fn fitting(&self, from: usize, room: usize) -> (usize, usize) {
        self.chunk.fitting(from, room, ORDINAL_BYTES)
    }

    fn prefetch(&self, i: usize) {
        self.chunk.prefetch(i);
    }

    fn append_unit(&self, i: usize, out: &mut Vec<u8>) {
        let rec = self.chunk.record(i);
        self.edit.append(rec, 0..rec.len() - ORDINAL_BYTES, out);
    }

    fn append_part(&self, i: usize, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        self.edit.append(self.chunk.record(i), range, out);
    }
}
