//! Duplicate marking cut into tasks, none of which holds the whole input:
//! the answer of one [`MarkDuplicates`] over the input, from its splits.
//!
//! 1. **Collect** ([`SplitCollector`], one per split of the input, in any
//!    order): each record's slot (flag, library, whether it starts a
//!    template), the fragment end of each mapped primary record and, for
//!    those whose mate is mapped, a *half* (its fragment end, name and
//!    read group) for the join. Records are numbered by [`ordinal`]
//!    (split, index in the split), which grows with input order, so ends
//!    compare across splits as the one-pass marker's input indexes do.
//!    Ends go to [`end_bucket`]s (a hash of the library, barcodes and
//!    first 5' end: every duplicate set, pair or fragment, falls in one
//!    bucket), halves to [`name_bucket`]s (a hash of read group and name).
//! 2. **Templates across splits** ([`continued_templates`]): in name-grouped
//!    input a template may start in one split and go on in the next; its
//!    ends carry the index of its first record ([`Fixups`], applied by the
//!    join and the decision).
//! 3. **Join** ([`join_mates`], one per name bucket): the halves of each
//!    (read group, name) in input order, paired exactly as the one-pass
//!    marker pairs them (a mate waits under its mate's reference, read
//!    group and name; a later one under the same key replaces it): the
//!    pair ends, to their end buckets.
//! 4. **Decide** ([`MarkDuplicates::decide_ends`], one per end bucket): the
//!    bucket's duplicate sets sorted and walked as the one-pass marker walks
//!    them: the duplicate (and optical) indexes listed, the set-size
//!    histograms and optical counts per library.
//! 5. **Finish** ([`finish_split`], one per split, in order or retried):
//!    Picard's output loop over the split's slots with the indexes listed
//!    in it, resumed where the previous split's left it ([`WalkCarry`]):
//!    the split's bits and record counts per library.
//! 6. **Metrics** ([`crate::metrics_report`]): the counts summed.
//!
//! Between tasks everything is bytes: ends 63 bytes each (the spill
//! files' encoding), halves the same plus name and read group, index
//! lists 8 bytes per listed index, slots 8 bytes per record. Several
//! coordinate-sorted inputs that share a library (lanes of one library)
//! keep Picard's merged order ([`merge_order`]): each end and half is
//! followed by its (first) record's running maximum by htsjdk's
//! coordinate comparator, each split's boundary carries its input and
//! largest record, and the decision ranks each bucket's records in that
//! order ([`MarkDuplicates::decide_merged`]).

use std::collections::HashMap;

use crate::optical::NameParser;
use crate::spill::{
    decode_end, decode_slot, encode_end, encode_slot, io_error, END_BYTES, SLOT_BYTES,
};

pub mod merge_order;
mod wire;
use crate::{
    flags, fragment_end, pair_end, walk_frag_sets, walk_records, Barcodes, DupSink, End,
    InputOrder, LibraryCounts, MarkDuplicates, MarkdupError, PartFound, ReadInfo, RecordSlot,
    SetSizeHistograms, Templates, WalkCarry,
};
use merge_order::{MergeKey, MergeOrder, RunningMax};
pub use wire::{set_range, RangeSlice, MAX_RANGES, RANGE_BYTES};

/// Bits of an [`ordinal`] that hold the record's index in its split (up to
/// 2^40 records per split, 2^23 splits: ordinals stay positive).
pub const INDEX_BITS: u32 = 40;

/// The number a record goes by: its split ordinal and its index in the
/// split. It grows with input order.
pub fn ordinal(split: u32, index: u64) -> i64 {
    ((split as u64) << INDEX_BITS | index) as i64
}

/// The bit that marks a first end's place in Picard's merged order
/// ([`MarkDuplicates::decide_merged`]) among ordinals: above any
/// ordinal of fewer than 2^22 splits.
const RANK_BIT: u64 = 1 << 62;

/// The split of an [`ordinal`], and the index in it.
pub fn split_of(ordinal: u64) -> (usize, u64) {
    (
        (ordinal >> INDEX_BITS) as usize,
        ordinal & ((1 << INDEX_BITS) - 1),
    )
}

/// A hash of `bytes` from `h`, eight bytes at a time (little-endian
/// words, the tail zero-padded): the same bucket in every process,
/// whatever its hasher. Each word is folded in with FxHash's step
/// (rustc-hash's multiplier), and the result is mixed with MurmurHash3's
/// 64-bit finaliser (`fmix64`) so that its remainder by a bucket count
/// depends on every bit.
fn hash_bytes(bytes: &[u8], mut h: u64) -> u64 {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w.try_into().expect("8"))).wrapping_mul(K);
    }
    let rest = words.remainder();
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    h = (h.rotate_left(5) ^ u64::from_le_bytes(tail) ^ (bytes.len() as u64) << 56).wrapping_mul(K);
    fmix64(h)
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ h >> 33
}

fn end_bucket_of(e: &End, buckets: usize) -> usize {
    let mut key = [0u8; 24];
    key[..2].copy_from_slice(&e.library.to_le_bytes());
    key[2..6].copy_from_slice(&e.barcode.to_le_bytes());
    key[6..10].copy_from_slice(&e.r1_barcode.to_le_bytes());
    key[10..14].copy_from_slice(&e.r2_barcode.to_le_bytes());
    key[14..18].copy_from_slice(&e.r1_ref.to_le_bytes());
    key[18..22].copy_from_slice(&e.r1_coord.to_le_bytes());
    (hash_bytes(&key, 0) % buckets as u64) as usize
}

/// The bucket of the ends whose library, barcodes and first 5' end are
/// these: a duplicate set (pair or fragment) shares them all.
pub fn end_bucket(
    library: i16,
    barcodes: (i32, i32, i32),
    ref_id: i32,
    five_prime: i32,
    buckets: usize,
) -> usize {
    let e = End {
        library,
        barcode: barcodes.0,
        r1_barcode: barcodes.1,
        r2_barcode: barcodes.2,
        orientation: 0,
        r1_ref: ref_id,
        r1_coord: five_prime,
        r2_ref: -1,
        r2_coord: -1,
        loc: crate::optical::Location::NONE,
        optical_orientation: -1,
        score: 0,
        r1_index: 0,
        r2_index: 0,
        pair: false,
    };
    end_bucket_of(&e, buckets)
}

/// The bucket of the halves of read group `rg` (its header position) and
/// name `name`.
pub fn name_bucket(rg: i16, name: &[u8], buckets: usize) -> usize {
    (join_key(rg, name) % buckets as u64) as usize
}

/// What the join needs of a mapped primary record whose mate is mapped
/// (a *half*), besides its name: its fragment end, its place in the
/// input, read group, whether it is the first of pair, and its barcodes.
#[derive(Clone, Copy, Debug)]
struct HalfFields {
    end: End,
    seq: i64,
    rg: i16,
    read1: bool,
    barcodes: Barcodes,
}

/// Bytes of a half before its name: its fragment end, then `seq`, `rg`,
/// `read1`, the three barcodes and the name's length.
const HALF_BYTES: usize = END_BYTES + 8 + 2 + 1 + 4 * 3 + 4;

/// Appends a half (its fragment end already encoded as `end`) to `out`.
fn put_half(
    end: &[u8; END_BYTES],
    seq: i64,
    rg: i16,
    read1: bool,
    barcodes: Barcodes,
    name: &[u8],
    out: &mut Vec<u8>,
) {
    let mut f = [0u8; HALF_BYTES];
    f[..END_BYTES].copy_from_slice(end);
    let t = &mut f[END_BYTES..];
    t[..8].copy_from_slice(&seq.to_le_bytes());
    t[8..10].copy_from_slice(&rg.to_le_bytes());
    t[10] = read1 as u8;
    t[11..15].copy_from_slice(&barcodes.umi.to_le_bytes());
    t[15..19].copy_from_slice(&barcodes.read_one.to_le_bytes());
    t[19..23].copy_from_slice(&barcodes.read_two.to_le_bytes());
    t[23..27].copy_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(&f);
    out.extend_from_slice(name);
}

/// [`put_half`] of decoded fields.
fn encode_half(h: &HalfFields, name: &[u8], out: &mut Vec<u8>) {
    let mut e = [0u8; END_BYTES];
    encode_end(&h.end, &mut e);
    put_half(&e, h.seq, h.rg, h.read1, h.barcodes, name, out);
}

fn bad_block(what: &'static str, len: usize, at: usize) -> MarkdupError {
    MarkdupError::BadBlock { what, len, at }
}

/// The fields of a half from its fixed bytes ([`HALF_BYTES`]).
fn half_fields(fixed: &[u8; HALF_BYTES]) -> HalfFields {
    let end = decode_end(fixed[..END_BYTES].try_into().expect("sized"));
    let f = &fixed[END_BYTES..];
    let i32_ = |s: &[u8]| i32::from_le_bytes(s.try_into().expect("sized"));
    HalfFields {
        end,
        seq: i64::from_le_bytes(f[..8].try_into().expect("sized")),
        rg: i16::from_le_bytes([f[8], f[9]]),
        read1: f[10] != 0,
        barcodes: Barcodes {
            umi: i32_(&f[11..15]),
            read_one: i32_(&f[15..19]),
            read_two: i32_(&f[19..23]),
        },
    }
}

/// The name's length, from a half's fixed bytes.
fn half_name_len(fixed: &[u8; HALF_BYTES]) -> usize {
    u32::from_le_bytes(fixed[HALF_BYTES - 4..].try_into().expect("sized")) as usize
}

/// The half that starts at `at` in `b` (its fields and name), and where
/// the next one starts.
fn half_at(b: &[u8], at: usize) -> Result<(HalfFields, &[u8], usize), MarkdupError> {
    let bad = || bad_block("mate halves", b.len(), at);
    let fixed: &[u8; HALF_BYTES] = b
        .get(at..at + HALF_BYTES)
        .ok_or_else(bad)?
        .try_into()
        .expect("sized");
    let name_at = at + HALF_BYTES;
    let name = b
        .get(name_at..name_at + half_name_len(fixed))
        .ok_or_else(bad)?;
    Ok((half_fields(fixed), name, name_at + name.len()))
}

/// Index lists (8 bytes each, a listed index once per listing).
fn decode_indexes(b: &[u8], out: &mut Vec<u64>) -> Result<(), MarkdupError> {
    if !b.len().is_multiple_of(8) {
        return Err(bad_block("duplicate indexes", b.len(), b.len() / 8 * 8));
    }
    out.extend(
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("sized"))),
    );
    Ok(())
}

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
    order: InputOrder,
    parser: NameParser,
    split: u32,
    index: u64,
    templates: Templates,
    first_name: Option<Vec<u8>>,
    /// The record slots, [`SLOT_BYTES`] each.
    slots: Vec<u8>,
    /// Fragment ends by end bucket.
    ends: Vec<Vec<u8>>,
    /// Halves by name bucket.
    halves: Vec<Vec<u8>>,
    /// Keeping Picard's merge order: the split's input and the running
    /// maximum of its records.
    merge: Option<(u32, RunningMax)>,
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

    fn push_record(
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

/// For each split (in input order), where its first template began when
/// that was in an earlier split (name-grouped input: the names meet at the
/// boundary; a split of one template passes its start on); else `None`
/// (always in coordinate order, whose boundaries have no last name: every
/// record is a template).
pub fn continued_templates(bounds: &[Boundary]) -> Vec<Option<i64>> {
    let mut out = vec![None; bounds.len()];
    // The last name seen and where its template began.
    let mut last: Option<(&[u8], i64)> = None;
    for (b, cont) in bounds.iter().zip(&mut out) {
        let (Some(first), Some(last_name)) = (&b.first_name, &b.last_name) else {
            continue;
        };
        *cont = last.filter(|(n, _)| *n == first.as_slice()).map(|l| l.1);
        let start = match *cont {
            Some(s) if b.last_template == b.first => s,
            _ => b.last_template,
        };
        last = Some((last_name, start));
    }
    out
}

/// The template indexes to replace: the first record of a split whose
/// first template began earlier stands for that template's first record.
/// Also whether the input is grouped by name (the boundaries have last
/// names), where the join checks that a name's templates are not
/// scattered ([`MateJoin::finish`]).
#[derive(Clone, Debug, Default)]
pub struct Fixups {
    fixes: Vec<(i64, i64)>,
    grouped: bool,
    /// The splits keep Picard's merge order (every boundary has its
    /// [`MergeBoundary`]): their inputs and priors.
    merge: Option<MergeOrder>,
}

impl Fixups {
    /// From [`continued_templates`] and the splits' first ordinals.
    pub fn new(bounds: &[Boundary], continued: &[Option<i64>]) -> Fixups {
        let mut v: Vec<(i64, i64)> = bounds
            .iter()
            .zip(continued)
            .filter_map(|(b, c)| c.map(|c| (b.first, c)))
            .collect();
        v.sort_unstable();
        let merge: Option<Vec<(usize, Option<&MergeKey>)>> = bounds
            .iter()
            .map(|b| {
                b.merge
                    .as_ref()
                    .map(|m| (m.input as usize, m.largest.as_ref()))
            })
            .collect();
        Fixups {
            fixes: v,
            grouped: bounds.iter().any(|b| b.last_name.is_some()),
            merge: merge.filter(|m| !m.is_empty()).map(|m| MergeOrder::new(&m)),
        }
    }

    /// The splits' inputs and priors when they keep Picard's merge order.
    pub fn merge_order(&self) -> Option<&MergeOrder> {
        self.merge.as_ref()
    }

    fn apply(&self, i: i64) -> i64 {
        if self.fixes.is_empty() {
            return i;
        }
        match self.fixes.binary_search_by_key(&i, |f| f.0) {
            Ok(k) => self.fixes[k].1,
            Err(_) => i,
        }
    }

    fn apply_end(&self, e: &mut End) {
        e.r1_index = self.apply(e.r1_index);
        if e.r2_index != -1 {
            e.r2_index = self.apply(e.r2_index);
        }
    }
}

/// Pairs the halves of one name bucket (blocks from every split, any
/// order) as [`MarkDuplicates`] pairs them over the whole input; returns
/// the pair ends by end bucket ([`MateJoin`] without a memory limit).
pub fn join_mates(
    blocks: &[&[u8]],
    fixups: &Fixups,
    end_buckets: usize,
) -> Result<Vec<Vec<u8>>, MarkdupError> {
    let mut join = MateJoin::for_fixups(fixups);
    for b in blocks {
        join.add_block(b)?;
    }
    let mut out = vec![Vec::new(); end_buckets.max(1)];
    join.finish(fixups, end_buckets, &mut |bucket, end| {
        out[bucket].extend_from_slice(end);
        Ok(())
    })?;
    Ok(out)
}

/// Where [`MateJoin::finish`] hands each pair end: its end bucket and its
/// 63 bytes.
pub type PairEndSink<'a> = dyn FnMut(usize, &[u8]) -> Result<(), MarkdupError> + 'a;

/// A half held in memory by the join: its fields, its [`join_key`], and
/// where its name is in the join's name bytes.
struct Held {
    h: HalfFields,
    key: u64,
    name_at: usize,
    name_len: u32,
    /// The bytes of its record's running maximum ([`MergeKey::encode`]),
    /// after its name: 0 unless the join keeps the merge order.
    merge_len: u32,
}

/// The join's order of halves: by [`join_key`], read group and name (a
/// name's halves together; which name comes first does not matter, the
/// hash spares most comparisons of whole names), then input order.
fn join_key(rg: i16, name: &[u8]) -> u64 {
    hash_bytes(name, rg as u16 as u64)
}

/// A half as the join compares it: its [`join_key`], fields and name;
/// then the bytes of its record's running maximum (empty unless the join
/// keeps the merge order).
type HalfView<'a> = (u64, &'a HalfFields, &'a [u8], &'a [u8]);

/// A held half as the join compares it; `names`: the join's name bytes.
fn held_view<'a>(h: &'a Held, names: &'a [u8]) -> HalfView<'a> {
    let name_end = h.name_at + h.name_len as usize;
    (
        h.key,
        &h.h,
        &names[h.name_at..name_end],
        &names[name_end..name_end + h.merge_len as usize],
    )
}

/// [`join_key`]'s order of two halves.
fn join_cmp(a: HalfView<'_>, b: HalfView<'_>) -> std::cmp::Ordering {
    a.0.cmp(&b.0)
        .then_with(|| a.1.rg.cmp(&b.1.rg))
        .then_with(|| a.2.cmp(b.2))
        .then_with(|| a.1.seq.cmp(&b.1.seq))
}

/// The join of one name bucket: its halves added block by block (from
/// every split, any order), held in memory up to a limit and beyond it
/// sorted into run files ([`MateJoin::set_spill`]), then read back in
/// order (runs and memory merged) and paired as [`MarkDuplicates`] pairs
/// them over the whole input. The halves' names are held in one buffer.
#[derive(Default)]
pub struct MateJoin {
    held: Vec<Held>,
    /// The held halves' names, one after the other.
    names: Vec<u8>,
    spill: Option<(std::path::PathBuf, usize)>,
    runs: Vec<HalfRun>,
    files: u64,
    runs_written: u64,
    /// Keeping Picard's merge order of several inputs: the halves carry
    /// their records' running maxima, and the pair ends their first
    /// mate's.
    merge: Option<MergeOrder>,
}

impl MateJoin {
    /// A join of the splits whose `fixups` these are: when they keep
    /// Picard's merge order ([`Fixups::merge_order`]) the halves carry
    /// their records' running maxima and the pair ends their first mate's,
    /// for [`MarkDuplicates::decide_merged`].
    pub fn for_fixups(fixups: &Fixups) -> MateJoin {
        MateJoin {
            merge: fixups.merge.clone(),
            ..MateJoin::default()
        }
    }

    /// Halves beyond `limit` bytes go to sorted run files in `dir`
    /// (removed as they are read back; on failure the caller removes
    /// `dir`).
    pub fn set_spill(&mut self, dir: &std::path::Path, limit: usize) {
        self.spill = Some((dir.to_path_buf(), limit));
    }

    /// Run files written so far (merges of runs included).
    pub fn runs_written(&self) -> u64 {
        self.runs_written
    }

    /// Bytes the halves in memory take (each one's fields, name and
    /// running maximum).
    fn bytes(&self) -> usize {
        self.held.len() * std::mem::size_of::<Held>() + self.names.len()
    }

    /// Adds a block of halves ([`SplitShare::halves`]).
    pub fn add_block(&mut self, block: &[u8]) -> Result<(), MarkdupError> {
        let mut at = 0;
        while at < block.len() {
            let (h, name, mut next) = half_at(block, at)?;
            let merge = if self.merge.is_some() {
                let end = MergeKey::decode(block, next)?.1;
                let key = &block[next..end];
                next = end;
                key
            } else {
                &[]
            };
            at = next;
            self.held.push(Held {
                h,
                key: join_key(h.rg, name),
                name_at: self.names.len(),
                name_len: name.len() as u32,
                merge_len: merge.len() as u32,
            });
            self.names.extend_from_slice(name);
            self.names.extend_from_slice(merge);
            if self.spill.as_ref().is_some_and(|s| self.bytes() > s.1) {
                self.spill_run()?;
            }
        }
        Ok(())
    }

    fn next_path(&mut self) -> std::path::PathBuf {
        self.files += 1;
        let dir = &self.spill.as_ref().expect("spill configured").0;
        dir.join(format!(
            "markdup-halves-{}-{}",
            std::process::id(),
            self.files
        ))
    }

    /// The halves in memory in the join's order, as (key, place in
    /// `held`): 16 bytes moved per step of the sort, not the half.
    fn sorted(&self) -> Vec<(u64, usize)> {
        let mut order: Vec<(u64, usize)> = self
            .held
            .iter()
            .enumerate()
            .map(|(i, h)| (h.key, i))
            .collect();
        let names = &self.names;
        let half = |i: usize| held_view(&self.held[i], names);
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| join_cmp(half(a.1), half(b.1))));
        order
    }

    /// The halves in memory sorted into a run file (the runs merged into
    /// one first when there are [`spill::MAX_RUNS`]).
    fn spill_run(&mut self) -> Result<(), MarkdupError> {
        if self.runs.len() >= crate::spill::MAX_RUNS {
            let old = std::mem::take(&mut self.runs);
            let path = self.next_path();
            let keyed = self.merge.is_some();
            let mut stream = HalfStream::new(old, &[], &[], &[], keyed)?;
            let mut w = HalfWriter::create(path)?;
            while let Some((_, h, name, merge)) = stream.next_half()? {
                w.put(h, name, merge)?;
            }
            self.runs_written += 1;
            self.runs.push(w.finish()?);
        }
        let order = self.sorted();
        let path = self.next_path();
        let mut w = HalfWriter::create(path)?;
        for &(_, i) in &order {
            let (_, h, name, merge) = held_view(&self.held[i], &self.names);
            w.put(h, name, merge)?;
        }
        self.runs_written += 1;
        self.runs.push(w.finish()?);
        self.held.clear();
        self.names.clear();
        Ok(())
    }

    /// The pair ends, each handed to `out` with its end bucket (of
    /// `end_buckets`) as its 63 bytes.
    pub fn finish(
        mut self,
        fixups: &Fixups,
        end_buckets: usize,
        out: &mut PairEndSink<'_>,
    ) -> Result<(), MarkdupError> {
        // A name's halves in input order; the marker's waiting mates are
        // keyed by (reference, read group, name), so names do not meet.
        let order = self.sorted();
        let runs = std::mem::take(&mut self.runs);
        let merge = self.merge.take();
        let mut stream = HalfStream::new(runs, &self.held, &order, &self.names, merge.is_some())?;
        // The name's waiting mates by the reference they wait under (a
        // name has few: a list, searched), with their running maxima.
        let mut waiting: Vec<(i32, End, Vec<u8>)> = Vec::new();
        let mut entry: Vec<u8> = Vec::new();
        let mut last: Option<(u64, i16)> = None;
        let mut last_name: Vec<u8> = Vec::new();
        // Name-grouped input: the name's current template (its first
        // record's ordinal) and whether it held a first and a second of
        // pair.
        let mut template: Option<(i64, bool, bool)> = None;
        let mut buf = [0u8; END_BYTES];
        while let Some((key, h, name, running)) = stream.next_half()? {
            if last != Some((key, h.rg)) || last_name != name {
                waiting.clear();
                template = None;
                last = Some((key, h.rg));
                last_name.clear();
                last_name.extend_from_slice(name);
            }
            let mut frag = h.end;
            fixups.apply_end(&mut frag);
            if fixups.grouped {
                template = Some(scatter_step(template, frag.r1_index, h.read1, name)?);
            }
            match waiting.iter().position(|w| w.0 == frag.r1_ref) {
                Some(i) => {
                    let (_, p, p_running) = waiting.swap_remove(i);
                    let e = pair_end(p, &frag, h.read1, h.barcodes);
                    encode_end(&e, &mut buf);
                    let bucket = end_bucket_of(&e, end_buckets.max(1));
                    match &merge {
                        None => out(bucket, &buf)?,
                        Some(m) => {
                            // Mates in two inputs: Picard meets them in its
                            // merged stream, whose order of the two the
                            // pairing would need.
                            if m.input_of(p.r1_index)? != m.input_of(frag.r1_index)? {
                                return Err(MarkdupError::MatesInTwoInputs {
                                    name: name.to_vec(),
                                });
                            }
                            entry.clear();
                            entry.extend_from_slice(&buf);
                            let first = if e.r1_index == p.r1_index {
                                &p_running[..]
                            } else {
                                running
                            };
                            entry.extend_from_slice(first);
                            out(bucket, &entry)?;
                        }
                    }
                }
                // A later half waiting under the same reference replaces
                // the earlier one.
                None => match waiting.iter_mut().find(|w| w.0 == frag.r2_ref) {
                    Some(w) => {
                        w.1 = frag;
                        w.2.clear();
                        w.2.extend_from_slice(running);
                    }
                    None => waiting.push((frag.r2_ref, frag, running.to_vec())),
                },
            }
        }
        Ok(())
    }
}

/// The grouping check across splits, one half of a name at a time (in
/// input order): a template of the name that begins after an earlier one
/// of the name without both primary mates among its halves is scattered
/// (one node's [`crate::grouping::GroupCheck`] remembers that earlier
/// template as incomplete and refuses the later one at its first record,
/// the template's index). Halves are the mapped primary records whose
/// mate is mapped, so a template scattered over two splits is found when
/// both its parts hold one (the split's own check finds it within a
/// split). Returns the name's current template.
fn scatter_step(
    template: Option<(i64, bool, bool)>,
    index: i64,
    read1: bool,
    name: &[u8],
) -> Result<(i64, bool, bool), MarkdupError> {
    let (r1, r2) = (read1, !read1);
    match template {
        Some((t, a, b)) if t == index => Ok((t, a || r1, b || r2)),
        Some((t, a, b)) if !(a && b) => Err(MarkdupError::ScatteredTemplate {
            name: name.to_vec(),
            ordinal: index,
            earlier: t,
        }),
        _ => Ok((index, r1, r2)),
    }
}

/// One sorted run of halves on disk.
struct HalfRun {
    path: std::path::PathBuf,
    halves: u64,
}

/// Writes a run of halves (given in the join's order).
struct HalfWriter {
    w: std::io::BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    buf: Vec<u8>,
    halves: u64,
}

impl HalfWriter {
    fn create(path: std::path::PathBuf) -> Result<HalfWriter, MarkdupError> {
        let file =
            std::fs::File::create(&path).map_err(io_error(&path, "creating a spill file"))?;
        Ok(HalfWriter {
            w: std::io::BufWriter::with_capacity(1 << 16, file),
            path,
            buf: Vec::new(),
            halves: 0,
        })
    }

    fn put(&mut self, h: &HalfFields, name: &[u8], merge: &[u8]) -> Result<(), MarkdupError> {
        use std::io::Write as _;
        self.buf.clear();
        encode_half(h, name, &mut self.buf);
        self.buf.extend_from_slice(merge);
        self.w
            .write_all(&self.buf)
            .map_err(io_error(&self.path, "writing a spill file"))?;
        self.halves += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<HalfRun, MarkdupError> {
        use std::io::Write as _;
        self.w
            .flush()
            .map_err(io_error(&self.path, "writing a spill file"))?;
        Ok(HalfRun {
            path: self.path,
            halves: self.halves,
        })
    }
}

/// Reads a run of halves back, removing its file when dropped; holds the
/// half read last (its fields, key and name).
struct HalfReader {
    r: std::io::BufReader<std::fs::File>,
    left: u64,
    path: std::path::PathBuf,
    head: Option<(u64, HalfFields)>,
    name: Vec<u8>,
    /// Whether each half is followed by its record's running maximum, and
    /// the head's.
    keyed: bool,
    merge: Vec<u8>,
}

impl HalfReader {
    fn open(run: HalfRun, keyed: bool) -> Result<HalfReader, MarkdupError> {
        let file =
            std::fs::File::open(&run.path).map_err(io_error(&run.path, "opening a spill file"))?;
        Ok(HalfReader {
            r: std::io::BufReader::with_capacity(1 << 16, file),
            left: run.halves,
            path: run.path,
            head: None,
            name: Vec::new(),
            keyed,
            merge: Vec::new(),
        })
    }

    /// Reads the next half into the head (`None` at the run's end).
    fn advance(&mut self) -> Result<(), MarkdupError> {
        use std::io::Read as _;
        if self.left == 0 {
            self.head = None;
            return Ok(());
        }
        let mut fixed = [0u8; HALF_BYTES];
        self.r
            .read_exact(&mut fixed)
            .map_err(io_error(&self.path, "reading a spill file"))?;
        self.name.resize(half_name_len(&fixed), 0);
        self.r
            .read_exact(&mut self.name)
            .map_err(io_error(&self.path, "reading a spill file"))?;
        if self.keyed {
            let mut fixed = [0u8; merge_order::KEY_FIXED];
            self.r
                .read_exact(&mut fixed)
                .map_err(io_error(&self.path, "reading a spill file"))?;
            self.merge.clear();
            self.merge.extend_from_slice(&fixed);
            self.merge
                .resize(fixed.len() + merge_order::key_name_len(&fixed), 0);
            self.r
                .read_exact(&mut self.merge[fixed.len()..])
                .map_err(io_error(&self.path, "reading a spill file"))?;
        }
        self.left -= 1;
        let h = half_fields(&fixed);
        self.head = Some((join_key(h.rg, &self.name), h));
        Ok(())
    }
}

impl Drop for HalfReader {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The halves in the join's order: the runs on disk and the sorted halves
/// in memory, merged (equal keys cannot occur: a half's place is its own).
struct HalfStream<'a> {
    runs: Vec<HalfReader>,
    held: &'a [Held],
    /// `held` in the join's order.
    order: &'a [(u64, usize)],
    names: &'a [u8],
    /// The next half in memory (in `order`).
    at: usize,
    /// The source of the half given last, advanced at the next call (the
    /// runs by number, the memory last).
    given: Option<usize>,
}

impl<'a> HalfStream<'a> {
    fn new(
        runs: Vec<HalfRun>,
        held: &'a [Held],
        order: &'a [(u64, usize)],
        names: &'a [u8],
        keyed: bool,
    ) -> Result<HalfStream<'a>, MarkdupError> {
        let mut runs = runs
            .into_iter()
            .map(|r| HalfReader::open(r, keyed))
            .collect::<Result<Vec<_>, _>>()?;
        for r in &mut runs {
            r.advance()?;
        }
        Ok(HalfStream {
            runs,
            held,
            order,
            names,
            at: 0,
            given: None,
        })
    }

    fn memory_head(&self) -> Option<HalfView<'a>> {
        Some(held_view(
            &self.held[self.order.get(self.at)?.1],
            self.names,
        ))
    }

    /// The next half in the join's order (its [`join_key`], fields and
    /// name).
    fn next_half(&mut self) -> Result<Option<HalfView<'_>>, MarkdupError> {
        match self.given.take() {
            Some(r) if r < self.runs.len() => self.runs[r].advance()?,
            Some(_) => self.at += 1,
            None => {}
        }
        // Few runs (at most MAX_RUNS + 1 sources): a scan for the least.
        let mut best = self.memory_head().map(|m| (self.runs.len(), m));
        for (i, r) in self.runs.iter().enumerate() {
            if let Some((key, h)) = &r.head {
                let cand = (*key, h, r.name.as_slice(), r.merge.as_slice());
                if best.is_none_or(|(_, b)| join_cmp(cand, b).is_lt()) {
                    best = Some((i, cand));
                }
            }
        }
        let Some((source, half)) = best else {
            return Ok(None);
        };
        self.given = Some(source);
        Ok(Some(half))
    }
}

impl DupSink for Vec<u64> {
    fn add(&mut self, index: i64) {
        self.push(index as u64);
    }
}

/// What one end bucket's decision finds.
#[derive(Clone, Debug, Default)]
pub struct SetsDecided {
    /// Duplicate and optical duplicate ordinals, ascending (an ordinal
    /// once per listing).
    pub duplicates: Vec<u64>,
    pub optical: Vec<u64>,
    pub set_sizes: SetSizeHistograms,
    /// Optical duplicate pairs per library (header library index).
    pub optical_by_library: HashMap<u32, u64>,
}

impl SetsDecided {
    /// The listed indexes of each of `splits` splits, relative to the
    /// split's first record, as bytes: (duplicates, optical).
    #[allow(clippy::type_complexity)]
    pub fn by_split(&self, splits: usize) -> Result<(Vec<Vec<u8>>, Vec<Vec<u8>>), MarkdupError> {
        let cut = |list: &[u64]| {
            let mut out = vec![Vec::new(); splits];
            for &o in list {
                let (s, i) = split_of(o);
                let Some(to) = out.get_mut(s) else {
                    return Err(MarkdupError::SplitBeyond { split: s, splits });
                };
                to.extend_from_slice(&i.to_le_bytes());
            }
            Ok(out)
        };
        Ok((cut(&self.duplicates)?, cut(&self.optical)?))
    }

    /// Adds the counts of another bucket (the index lists are the
    /// splits').
    pub fn add_counts(&mut self, o: SetsDecided) {
        self.set_sizes.add(o.set_sizes, 0);
        for (lib, n) in o.optical_by_library {
            *self.optical_by_library.entry(lib).or_default() += n;
        }
    }
}

impl MarkDuplicates {
    /// The duplicate sets of one end bucket (fragment ends from the
    /// splits, pair ends from the joins; blocks in any order), walked as
    /// [`MarkDuplicates::finish`] walks them, with this marker's optical
    /// settings (pixel distance, name parser, whether optical duplicates
    /// are listed), pool and spill limit: [`MarkDuplicates::add_end_block`]
    /// of each block, then [`MarkDuplicates::decide_bucket`].
    pub fn decide_ends(
        &mut self,
        blocks: &[&[u8]],
        fixups: &Fixups,
    ) -> Result<SetsDecided, MarkdupError> {
        if let Some(order) = fixups.merge_order() {
            return self.decide_merged(blocks, fixups, order);
        }
        for b in blocks {
            self.add_end_block(b, fixups)?;
        }
        self.decide_bucket()
    }

    /// Adds a block of one end bucket's ends (a split's fragment ends or
    /// a join's pair ends), their template indexes fixed; beyond the
    /// spill limit ([`MarkDuplicates::set_spill`]) the ends go to sorted
    /// run files, as the one-pass marker's do.
    pub fn add_end_block(&mut self, block: &[u8], fixups: &Fixups) -> Result<(), MarkdupError> {
        if !block.len().is_multiple_of(END_BYTES) {
            return Err(bad_block(
                "read ends",
                block.len(),
                block.len() / END_BYTES * END_BYTES,
            ));
        }
        for c in block.chunks_exact(END_BYTES) {
            let mut e = decode_end(c.try_into().expect("sized"));
            fixups.apply_end(&mut e);
            self.add_end(e)?;
        }
        Ok(())
    }

    /// [`MarkDuplicates::decide_ends`] of ends that carry their first
    /// record's running maximum within its split (collectors and joins
    /// keeping the merge order of several coordinate-sorted inputs,
    /// `order`): the records are put in Picard's merged order
    /// ([`merge_order::order_places`]) and the ends compared by their
    /// places in it; the listed indexes are the records' ordinals as
    /// always. Two inputs' equal running maxima are refused
    /// ([`MarkdupError::MergeTie`]): one task decides then. The ends and
    /// their records' places are held in memory until all are read: with a
    /// spill limit they may take half of it
    /// ([`MarkdupError::MergeBeyondLimit`] beyond: one task decides then,
    /// spilling), and the marker spills its ends beyond what they leave.
    pub fn decide_merged(
        &mut self,
        blocks: &[&[u8]],
        fixups: &Fixups,
        order: &MergeOrder,
    ) -> Result<SetsDecided, MarkdupError> {
        let limit = self.spill.as_ref().map(|s| s.limit);
        let mut held = 0usize;
        let mut ends: Vec<End> = Vec::new();
        let mut places: Vec<merge_order::Place> = Vec::new();
        for b in blocks {
            let mut at = 0;
            while at < b.len() {
                let fixed = b
                    .get(at..at + END_BYTES)
                    .ok_or_else(|| bad_block("read ends", b.len(), at))?;
                let mut e = decode_end(fixed.try_into().expect("sized"));
                fixups.apply_end(&mut e);
                let (local, next) = MergeKey::decode(b, at + END_BYTES)?;
                // The end, its place, the place's name (at most the key's
                // bytes) and its rank and merged-order entry (8 bytes
                // each): about what the vectors will hold.
                held += std::mem::size_of::<End>()
                    + std::mem::size_of::<merge_order::Place>()
                    + (next - at - END_BYTES)
                    + 16;
                at = next;
                if let Some(limit) = limit.filter(|&l| held > l / 2) {
                    return Err(MarkdupError::MergeBeyondLimit {
                        held,
                        ends: ends.len() + 1,
                        limit,
                    });
                }
                places.push(order.place(e.r1_index, local)?);
                ends.push(e);
            }
        }
        // The marker's ends spill beyond what the ranks leave of the limit.
        if let (Some(limit), Some(sp)) = (limit, self.spill.as_mut()) {
            sp.limit = limit - held;
        }
        let decided = self.decide_ranked(ends, places);
        if let (Some(limit), Some(sp)) = (limit, self.spill.as_mut()) {
            sp.limit = limit;
        }
        decided
    }

    /// The rest of [`MarkDuplicates::decide_merged`]: the records ranked
    /// in Picard's merged order, the ends added by their first records'
    /// ranks and the bucket decided, its lists turned back into ordinals.
    fn decide_ranked(
        &mut self,
        ends: Vec<End>,
        mut places: Vec<merge_order::Place>,
    ) -> Result<SetsDecided, MarkdupError> {
        // One place per record (a record's fragment end and its pair end
        // name it both, with one running maximum).
        places.sort_unstable_by_key(|p| p.ordinal);
        places.dedup_by_key(|p| p.ordinal);
        let merged = merge_order::order_places(&places).map_err(|t| MarkdupError::MergeTie {
            a_input: t.a.0,
            b_input: t.b.0,
            name: t.name,
        })?;
        // Ranks stand for the records' first-end indexes, above every
        // ordinal so that listed ranks and listed ordinals (second ends)
        // are told apart.
        let mut rank_of = vec![0u64; places.len()];
        for (rank, &p) in merged.iter().enumerate() {
            rank_of[p] = rank as u64;
        }
        for mut e in ends {
            let p = places
                .binary_search_by_key(&e.r1_index, |p| p.ordinal)
                .expect("every end's place is listed");
            e.r1_index = (RANK_BIT | rank_of[p]) as i64;
            self.add_end(e)?;
        }
        let mut d = self.decide_bucket()?;
        let ordinal_of = |v: u64| {
            if v & RANK_BIT != 0 {
                places[merged[(v & !RANK_BIT) as usize]].ordinal as u64
            } else {
                v
            }
        };
        for list in [&mut d.duplicates, &mut d.optical] {
            for v in list.iter_mut() {
                *v = ordinal_of(*v);
            }
            list.sort_unstable();
        }
        Ok(d)
    }

    /// The duplicate sets of the ends added since the last call (the runs
    /// on disk merged with those in memory), walked as
    /// [`MarkDuplicates::finish`] walks them.
    pub fn decide_bucket(&mut self) -> Result<SetsDecided, MarkdupError> {
        // With every fragment end in memory, those no set needs are left
        // out before the sort, as one node's decision leaves them out (a
        // fragment set lies in one bucket).
        let frags_spilled = self.spill.as_ref().is_some_and(|s| !s.frag_runs.is_empty());
        let k = if frags_spilled {
            self.sort_ends(true)
        } else {
            self.sort_ends_for_decision()
        };
        let ends = std::mem::take(&mut self.ends);
        let (mut pair_runs, mut frag_runs) = (Vec::new(), Vec::new());
        if let Some(sp) = self.spill.as_mut() {
            pair_runs = std::mem::take(&mut sp.pair_runs);
            frag_runs = std::mem::take(&mut sp.frag_runs);
        }
        let mut part = PartFound::new((Vec::<u64>::new(), Vec::<u64>::new()));
        let mut stream = crate::spill::EndStream::new(pair_runs, &ends[..k])?;
        self.walk_pair_sets(|| stream.next_end(), &mut part)?;
        drop(stream);
        let mut stream = crate::spill::EndStream::new(frag_runs, &ends[k..])?;
        walk_frag_sets(|| stream.next_end(), &mut part.sink.0)?;
        drop(stream);
        let PartFound {
            sink: (mut duplicates, mut optical),
            set_sizes: sizes,
            singles,
            optical_by_library,
        } = part;
        duplicates.sort_unstable();
        optical.sort_unstable();
        let mut set_sizes = SetSizeHistograms::default();
        set_sizes.add(sizes, singles);
        Ok(SetsDecided {
            duplicates,
            optical,
            set_sizes,
            optical_by_library: optical_by_library
                .into_iter()
                .map(|(id, n)| ((id - 1) as u32, n))
                .collect(),
        })
    }
}

/// What [`finish_split`] gives for one split.
#[derive(Debug)]
pub struct SplitOutcome {
    /// Picard's duplicate flag per record of the split.
    pub duplicate: crate::Bits,
    /// The optical verdict per record, when optical lists were given.
    pub optical: Option<crate::Bits>,
    /// Record counts per library index, for [`crate::metrics_report`].
    pub counts: LibraryCounts,
    /// Where the walk stands after the split: the next split's `carry`.
    pub carry: WalkCarry,
    /// Listed indexes (duplicate or optical) equal to the one before them:
    /// Picard's walk then falls behind its list, which in a merged stream
    /// of several inputs reaches the records of the other inputs too.
    pub repeated: u64,
}

/// Picard's output loop over one split: its slots
/// ([`SplitShare::slots`]), whether its first template began in an earlier
/// split ([`continued_templates`]), the index lists of the split from every
/// end bucket ([`SetsDecided::by_split`]; the optical ones when they are
/// tracked) and where the walk stood after the previous split (the
/// default for the first split; a split run with another carry than the
/// one the previous split ends with must be run again with that one).
pub fn finish_split(
    slots: &[u8],
    continued: bool,
    duplicates: &[&[u8]],
    optical: Option<&[&[u8]]>,
    carry: WalkCarry,
) -> Result<SplitOutcome, MarkdupError> {
    if !slots.len().is_multiple_of(SLOT_BYTES) {
        return Err(bad_block(
            "record slots",
            slots.len(),
            slots.len() / SLOT_BYTES * SLOT_BYTES,
        ));
    }
    let list = |blocks: &[&[u8]]| -> Result<Vec<u64>, MarkdupError> {
        let mut v = Vec::new();
        for b in blocks {
            decode_indexes(b, &mut v)?;
        }
        v.sort_unstable();
        Ok(v)
    };
    let duplicates = list(duplicates)?;
    let optical = optical.map(list).transpose()?;
    let repeats = |v: &[u64]| v.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    let repeated = repeats(&duplicates) + optical.as_deref().map_or(0, repeats);
    let records = (slots.len() / SLOT_BYTES) as u64;
    let mut it = slots.chunks_exact(SLOT_BYTES).enumerate().map(|(i, c)| {
        let mut s = decode_slot(c.try_into().expect("sized"));
        if i == 0 && continued {
            s.new_template = false;
        }
        s
    });
    let walked = walk_records(
        records,
        || Ok(it.next()),
        duplicates.into_iter(),
        optical.map(Vec::into_iter),
        carry,
    )?;
    Ok(SplitOutcome {
        duplicate: walked.duplicate,
        optical: walked.optical,
        counts: walked.counts,
        carry: walked.carry,
        repeated,
    })
}

/// Adds one split's record counts to `total`.
pub fn add_library_counts(total: &mut LibraryCounts, counts: &LibraryCounts) {
    if total.len() < counts.len() {
        total.resize(counts.len(), [0; 6]);
    }
    for (t, c) in total.iter_mut().zip(counts) {
        for (a, b) in t.iter_mut().zip(c) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests;
