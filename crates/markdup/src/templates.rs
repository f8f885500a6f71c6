//! How the input is ordered ([`InputOrder`]) and where its templates start
//! ([`Templates`]).

#[cfg(doc)]
use crate::{dist, MarkDuplicates};
use crate::{flags, ReadInfo};

/// How Picard is told the input is ordered (`ASSUME_SORT_ORDER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InputOrder {
    /// Name-grouped (aligner output, `samtools sort -n`): a duplicate
    /// template has all its records marked.
    #[default]
    Queryname,
    /// Coordinate-sorted: only the primary records that make up a duplicate
    /// read end are marked; reading stops at the first unplaced unmapped
    /// record.
    Coordinate,
}

/// Where templates start and which records give read ends, as Picard's
/// MarkDuplicates reads its input: the one rule of the one-pass marker
/// ([`MarkDuplicates`]) and of a split's collector
/// ([`dist::SplitCollector`]).
#[derive(Clone, Debug)]
pub(crate) struct Templates {
    pub(crate) order: InputOrder,
    /// The number of the current template's first record: a template is
    /// a run of one name in name-grouped input, a record in coordinate
    /// order (its ends carry that number).
    pub(crate) index: i64,
    /// The current template's name (name-grouped input; the buffer is
    /// reused: one allocation, not one per template).
    pub(crate) last_name: Option<Vec<u8>>,
    /// Coordinate order: an unplaced unmapped record was seen, no more
    /// ends (Picard stops collecting ends at the unplaced unmapped reads
    /// that end a coordinate-sorted file).
    pub(crate) ends_done: bool,
    /// The current template was pushed whole ([`Templates::whole`]): it
    /// has ended, and `last_name` is not its name.
    pub(crate) ended: bool,
}

impl Templates {
    pub(crate) fn new(order: InputOrder, index: i64) -> Templates {
        Templates {
            order,
            index,
            last_name: None,
            ends_done: false,
            ended: false,
        }
    }

    /// A whole template starting at record `first` was pushed
    /// ([`MarkDuplicates::push_template`]); the next record starts another.
    #[inline]
    pub(crate) fn whole(&mut self, first: i64) {
        self.index = first;
        self.ended = true;
    }

    /// The record numbered `number` (growing with input order), named
    /// `name`: whether it starts a template.
    #[inline]
    pub(crate) fn step(&mut self, number: i64, name: &[u8]) -> bool {
        self.step_known(number, name, None)
    }

    /// [`Templates::step`], told whether `name` is the previous record's
    /// (`same_name`, when the caller compared them off the serial path).
    #[inline]
    pub(crate) fn step_known(&mut self, number: i64, name: &[u8], same_name: Option<bool>) -> bool {
        if self.order == InputOrder::Coordinate {
            self.index = number;
        } else if !same_name
            .unwrap_or_else(|| !self.ended && self.last_name.as_deref() == Some(name))
        {
            let last = self.last_name.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(name);
            self.index = number;
            self.ended = false;
        }
        self.index == number
    }

    /// Whether `r` gives read ends: a mapped primary record, before the
    /// unplaced unmapped reads of coordinate-sorted input.
    #[inline]
    pub(crate) fn gives_ends(&mut self, r: &ReadInfo<'_>) -> bool {
        if self.ends_done {
            return false;
        }
        if r.flag & flags::UNMAPPED != 0 {
            if r.ref_id == -1 && self.order == InputOrder::Coordinate {
                self.ends_done = true;
            }
            return false;
        }
        r.flag & (flags::SECONDARY | flags::SUPPLEMENTARY) == 0
    }
}
