//! Step 1, collect: one split's records encoded as they come, into its
//! slots, its end buckets and its name buckets ([`SplitCollector`]).

use super::bucket::{end_bucket_of, name_bucket};
use super::half::put_half;
use super::merge_order::{MergeKey, RunningMax};
use super::ordinal;
#[cfg(doc)]
use super::{finish_split, merge_order, set_range, SplitOutcome, RANGE_BYTES};
use crate::ends::fragment_end;
use crate::optical::NameParser;
#[cfg(doc)]
use crate::spill::SLOT_BYTES;
use crate::spill::{encode_end, encode_slot, END_BYTES};
use crate::templates::Templates;
use crate::walk::RecordSlot;
#[cfg(doc)]
use crate::MarkDuplicates;
use crate::{flags, InputOrder, MarkdupError, ReadInfo};

/// Where a split's templates meet its neighbours' (name-grouped input).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Boundary {
    /// The split's first and last record names (`None`: no records; the
    /// last name also in coordinate order, where templates are records).
    pub first_name: Option<Vec<u8>>,
    pub last_name: Option<Vec<u8>>,
    /// The [`ordinal`] of the split's last template's first record.
    pub last_template: i64,
    /// The ordinal of the split's first record.
    pub first: i64,
    /// Keeping Picard's merge order ([`SplitCollector::keeping_merge_order`]).
    pub merge: Option<MergeBoundary>,
}

/// What the next splits need of a split keeping Picard's merge order of
/// several coordinate-sorted inputs: its input, and its largest record by
/// htsjdk's coordinate comparator (their priors: [`merge_order::priors`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeBoundary {
    pub input: u32,
    pub largest: Option<MergeKey>,
}

/// What a split gives the other tasks.
pub struct SplitShare {
    /// Fragment ends, by end bucket.
    pub ends: Vec<Vec<u8>>,
    /// Halves for the join, by name bucket.
    pub halves: Vec<Vec<u8>>,
    /// The record slots, 8 bytes each, for [`finish_split`].
    pub slots: Vec<u8>,
    pub boundary: Boundary,
    pub records: u64,
    /// The range of the output each record went to, [`RANGE_BYTES`] per
    /// record in the split's order ([`set_range`]): set by the map that
    /// sorts the split (empty from a collector alone), for
    /// [`SplitOutcome::slices`].
    pub ranges: Vec<u8>,
}

/// Takes one split's records in input order ([`ReadInfo`], resolved
/// against the header's read groups as for [`MarkDuplicates`]), each
/// encoded as it comes: its slot, its fragment end straight into its end
/// bucket's bytes, its half (with its name) into its name bucket's.
pub struct SplitCollector {
    pub(crate) order: InputOrder,
    pub(crate) parser: NameParser,
    pub(crate) split: u32,
    pub(crate) index: u64,
    pub(crate) templates: Templates,
    pub(crate) first_name: Option<Vec<u8>>,
    /// The record slots, [`SLOT_BYTES`] each.
    pub(crate) slots: Vec<u8>,
    /// Fragment ends by end bucket.
    pub(crate) ends: Vec<Vec<u8>>,
    /// Halves by name bucket.
    pub(crate) halves: Vec<Vec<u8>>,
    /// Keeping Picard's merge order: the split's input and the running
    /// maximum of its records.
    pub(crate) merge: Option<(u32, RunningMax)>,
}

impl SplitCollector {
    /// For split `split` of an input in `order`, names parsed by `parser`
    /// (Picard's `READ_NAME_REGEX`), ends cut into `end_buckets` and
    /// halves into `name_buckets` (0 counts as 1).
    pub fn new(
        order: InputOrder,
        parser: NameParser,
        split: u32,
        end_buckets: usize,
        name_buckets: usize,
    ) -> Self {
        SplitCollector {
            order,
            parser,
            split,
            index: 0,
            templates: Templates::new(order, ordinal(split, 0)),
            first_name: None,
            slots: Vec::new(),
            ends: vec![Vec::new(); end_buckets.max(1)],
            halves: vec![Vec::new(); name_buckets.max(1)],
            merge: None,
        }
    }

    /// Each end and half carries the running maximum of its record within
    /// the split ([`merge_order`]), for the decision of coordinate-sorted
    /// inputs that share a library ([`MarkDuplicates::decide_merged`]);
    /// records are then pushed with [`SplitCollector::push_keyed`]. The
    /// split is of input `input` (its splits' ordinals counted across
    /// every input, in input order).
    pub fn keeping_merge_order(mut self, input: u32) -> Self {
        self.merge = Some((input, RunningMax::default()));
        self
    }

    /// Adds the split's next record.
    pub fn push(&mut self, r: &ReadInfo<'_>) -> Result<(), MarkdupError> {
        self.push_record(r, None, None)
    }

    /// [`SplitCollector::push_parsed`] (`parsed`: `None` to parse here) of
    /// a collector keeping the merge order: `key` is the record's fields
    /// that htsjdk's coordinate comparator compares.
    pub fn push_keyed(
        &mut self,
        r: &ReadInfo<'_>,
        parsed: Option<crate::optical::Location>,
        key: &MergeKey<&[u8]>,
    ) -> Result<(), MarkdupError> {
        self.push_record(r, parsed, Some(key))
    }

    /// [`SplitCollector::push`] of a record whose name the caller parsed
    /// with this collector's parser ([`NameParser::parse`]), as
    /// [`MarkDuplicates::push_parsed`].
    pub fn push_parsed(
        &mut self,
        r: &ReadInfo<'_>,
        parsed: crate::optical::Location,
    ) -> Result<(), MarkdupError> {
        self.push_record(r, Some(parsed), None)
    }

    pub(crate) fn push_record(
        &mut self,
        r: &ReadInfo<'_>,
        parsed: Option<crate::optical::Location>,
        key: Option<&MergeKey<&[u8]>>,
    ) -> Result<(), MarkdupError> {
        let running = match (&mut self.merge, key) {
            (Some((_, m)), Some(k)) => Some(m.push(k)),
            (None, None) => None,
            _ => return Err(MarkdupError::MergeKeys),
        };
        let ord = ordinal(self.split, self.index);
        self.index += 1;
        if self.first_name.is_none() {
            self.first_name = Some(r.name.to_vec());
        }
        let new_template = self.templates.step(ord, r.name);
        self.slots.extend_from_slice(&encode_slot(&RecordSlot {
            library: r.rg.library,
            flag: r.flag,
            new_template,
        }));
        if !self.templates.gives_ends(r) {
            return Ok(());
        }
        // Libraries by header index (MarkDuplicates numbers them as first
        // seen; only their equality matters to the sets).
        let library =
            i16::try_from(r.rg.library + 1).map_err(|_| MarkdupError::TooManyLibraries)?;
        let loc = match parsed {
            Some(loc) => loc.with_read_group(r.rg.ordinal),
            None => self.parser.location(r.name, r.rg.ordinal),
        };
        let frag = fragment_end(r, library, loc, self.templates.index);
        let mut e = [0u8; END_BYTES];
        encode_end(&frag, &mut e);
        let bucket = end_bucket_of(&frag, self.ends.len());
        self.ends[bucket].extend_from_slice(&e);
        if let Some(k) = running {
            k.encode(&mut self.ends[bucket]);
        }
        if frag.r2_ref != -1 {
            let bucket = name_bucket(r.rg.ordinal, r.name, self.halves.len());
            put_half(
                &e,
                ord,
                r.rg.ordinal,
                r.flag & flags::READ1 != 0,
                r.barcodes,
                r.name,
                &mut self.halves[bucket],
            );
            if let Some(k) = running {
                k.encode(&mut self.halves[bucket]);
            }
        }
        Ok(())
    }

    /// The split's share.
    pub fn finish(self) -> SplitShare {
        SplitShare {
            ends: self.ends,
            halves: self.halves,
            slots: self.slots,
            records: self.index,
            ranges: Vec::new(),
            boundary: Boundary {
                merge: self.merge.map(|(input, m)| MergeBoundary {
                    input,
                    largest: m.max().cloned(),
                }),
                first_name: self.first_name,
                last_name: self
                    .templates
                    .last_name
                    .filter(|_| self.order == InputOrder::Queryname),
                last_template: self.templates.index,
                first: ordinal(self.split, 0),
            },
        }
    }
}
