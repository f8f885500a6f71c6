//! The duplicate decision applied to the output: a bitset over input ordinals (`Decisions`), its wire form, `DT` tags and removal, and the flag set in the compression jobs (`MarkedChunk`).

use crate::error::{Error, Result};
use crate::markdup::ordinal::{record_ordinal, ORDINAL_BYTES};
use crate::options::markdup::MarkdupConfig;
use alnsort_bam::record::{set_flag_bits_in_part, FRAMED_FLAG_AT};
use alnsort_bam::{RecordMut, RecordRef};
use alnsort_markdup::decision::{Decision, DecisionError, TaggingPolicy};
use alnsort_markdup::MetricsReport;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The decision for every input record, applied as the records are written:
/// Picard's decision (`alnsort_markdup::decision`) with what the run keeps
/// beside it.
pub struct Decisions {
    core: Decision,
    /// Duplicates met by [`Decisions::apply`] and [`MarkedChunk`]s so far
    /// (checked against the decision's count at the end).
    seen_marked: Arc<AtomicU64>,
    /// What the decision's state wrote to disk.
    spill: alnsort_markdup::SpillStats,
    pub metrics: MetricsReport,
    /// Whether an input record carries a `DT` tag, which [`Decisions::apply`]
    /// drops (Picard's `CLEAR_DT=true`): its record changes length, so
    /// whole chunks cannot be written in place. True where unknown (the
    /// decision made in another process).
    pub(crate) input_dt: bool,
}

/// The engine's internal error for a broken promise of the decision.
fn internal(e: DecisionError) -> Error {
    Error::Internal(e.to_string())
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
        self.core.records()
    }

    /// Records whose 0x400 is set.
    pub fn marked(&self) -> u64 {
        self.core.marked
    }

    /// Records left out of the output.
    pub fn removed(&self) -> u64 {
        self.core.removed
    }

    /// The duplicate bits, as the compression jobs share them.
    pub(crate) fn duplicate_bits(&self) -> Arc<alnsort_markdup::Bits> {
        self.core.shared_bits()
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
        Decisions {
            core: Decision::new(bits, optical_bits, remove, remove_sequencing, tagging),
            seen_marked: Arc::new(AtomicU64::new(0)),
            spill,
            metrics,
            input_dt: true,
        }
    }

    /// The same decisions over other ordinals: `new` gives, in order, the
    /// new ordinal of each record (a permutation of `0..records`). Several
    /// inputs are decided in Picard's merge order and sorted with each
    /// record's ordinal in input order (`crate::markdup::inputs`).
    pub fn renumbered(mut self, new: impl Iterator<Item = u64>) -> Result<Decisions> {
        self.core = self.core.renumbered(new).map_err(internal)?;
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
        let (dup, optical) = self.core.verdict(rec, ordinal).map_err(internal)?;
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
        if dup && rec.len() >= FRAMED_FLAG_AT + 2 {
            self.seen_marked.fetch_add(1, Ordering::Relaxed);
        }
        self.core.edit(rec, dup, optical, buf).map_err(internal)
    }

    /// The duplicate and optical bits, for a task in another process that
    /// writes some of the records ([`Decisions::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.core.to_bytes()
    }

    /// The decisions [`Decisions::to_bytes`] wrote, applied with `cfg`'s
    /// removal and tagging options (those of the run that decided). The
    /// metrics stay with the deciding task (empty here).
    pub fn from_bytes(bytes: &[u8], cfg: &MarkdupConfig) -> Result<Decisions> {
        let core = Decision::from_bytes(
            bytes,
            cfg.remove_duplicates,
            cfg.remove_sequencing_duplicates,
            cfg.tagging,
        )
        .map_err(internal)?;
        Ok(Decisions {
            core,
            seen_marked: Arc::new(AtomicU64::new(0)),
            spill: Default::default(),
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
        self.core.keeps_lengths() && !self.input_dt
    }

    /// `chunk` as the records to write, their ordinals cut off and 0x400
    /// set or cleared as they are copied (by the output's compression
    /// jobs, on the pool). Only when [`Decisions::marks_in_place`].
    pub fn marked_chunk(&self, chunk: alnsort_sort::Chunk) -> MarkedChunk {
        debug_assert!(self.marks_in_place());
        MarkedChunk {
            chunk,
            edit: FlagEdit {
                bits: self.duplicate_bits(),
                seen_marked: Arc::clone(&self.seen_marked),
            },
        }
    }

    /// Checks, once every record is written, that the records met carried
    /// each duplicate's ordinal: as many duplicates met as decided.
    pub fn check_all_met(&self) -> Result<()> {
        let seen = self.seen_marked.load(Ordering::Relaxed);
        if seen != self.core.marked {
            return Err(Error::Internal(format!("{} records were decided duplicates but {seen} of the records written carried their ordinals",
                self.core.marked)));
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
            ("records_marked", self.core.marked),
            ("records_removed", self.core.removed),
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
