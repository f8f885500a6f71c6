//! Duplicate marking identical to Picard MarkDuplicates 3.4.0 run with
//! `ASSUME_SORT_ORDER=queryname` on name-grouped input (all records of a
//! template adjacent, as aligners write them).
//!
//! The crate sees read ends, not BAM bytes: the caller gives each input
//! record, in file order, as a [`ReadInfo`] (flags, reference ids, the
//! unclipped 5' coordinate, the base-quality score, the read group's
//! [`RgInfo`] and the name). [`MarkDuplicates::finish`] returns, per input
//! record, whether Picard sets 0x400 on it, and Picard's metrics.
//!
//! What Picard does, and this crate with it:
//! * every mapped primary record gives a *fragment end* (reference, unclipped
//!   5' coordinate, strand); two mapped primary mates give a *pair end*
//!   (both 5' coordinates, the lower first, and the pair's orientation);
//! * pair ends with equal library, coordinates and orientation form a
//!   duplicate set; the highest score (sum of base qualities >= 15) is kept,
//!   ties going to the first in Picard's sort order (tile, x, y from the
//!   name, then position in the file);
//! * fragment ends at the same 5' end: if any belongs to a mapped pair, every
//!   unpaired one is a duplicate; otherwise all but the best are;
//! * a duplicate template has every record marked (secondary,
//!   supplementary and unmapped ones too);
//! * optical duplicates come from the read names (see [`optical`]).
//!
//! Records whose 0x400 bit the outcome says is clear must have it cleared
//! (Picard resets it on every record). Not covered: Picard options other
//! than `OPTICAL_DUPLICATE_PIXEL_DISTANCE`, `READ_NAME_REGEX`
//! ([`optical::NameParser`]) and the optical verdict behind `DT` tags and
//! `REMOVE_SEQUENCING_DUPLICATES` ([`Outcome::optical`]): barcodes
//! (`BARCODE_TAG`), random scoring and duplicate-set tags;
//! `alnsort sort --markdup` refuses them), names of one template that are
//! not adjacent in queryname order (Picard compares the names themselves;
//! [`grouping::GroupCheck`] lets a caller refuse such input), and the
//! metrics file's header lines (Picard writes its command line and date).

pub mod grouping;
pub mod metrics;
pub mod optical;

use std::collections::{BTreeMap, HashMap};

pub use metrics::{DuplicationMetrics, MetricsReport, SetSizeHistograms};
use optical::Location;

/// SAM flag bits this crate reads.
pub mod flags {
    pub const PAIRED: u16 = 0x1;
    pub const UNMAPPED: u16 = 0x4;
    pub const MATE_UNMAPPED: u16 = 0x8;
    pub const REVERSE: u16 = 0x10;
    pub const READ1: u16 = 0x40;
    pub const READ2: u16 = 0x80;
    pub const SECONDARY: u16 = 0x100;
    pub const QC_FAIL: u16 = 0x200;
    pub const DUPLICATE: u16 = 0x400;
    pub const SUPPLEMENTARY: u16 = 0x800;
}

/// Picard's name for records whose read group has no `LB`.
pub const UNKNOWN_LIBRARY: &str = "Unknown Library";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MarkdupError {
    /// Picard numbers libraries in a Java `short`.
    #[error("more than 32767 libraries")]
    TooManyLibraries,
    /// A duplicate set mixes FR/RF optical orientations with another one;
    /// Picard stops with "Found an unexpected orientation".
    #[error("duplicate set at reference {ref_id} position {coordinate} has an unexpected orientation for optical duplicate detection")]
    UnexpectedOrientation { ref_id: i32, coordinate: i32 },
}

/// A record's read group as Picard sees it, resolved against the header by
/// [`ReadGroups::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RgInfo {
    /// Index into [`ReadGroups`]' library names.
    pub library: u32,
    /// The read group's position among the header's `@RG` lines (Picard's
    /// `readGroup` for optical duplicates): 0 when the record has no `RG`,
    /// the number of `@RG` lines when its `RG` is not in the header.
    pub ordinal: i16,
}

/// The header's read groups and their libraries.
#[derive(Clone, Debug, Default)]
pub struct ReadGroups {
    ids: Vec<Vec<u8>>,
    /// First header position of each ID.
    by_id: HashMap<Vec<u8>, usize>,
    /// Library of each header read group, as an index into `libraries`.
    rg_library: Vec<u32>,
    libraries: Vec<String>,
    unknown: Option<u32>,
}

impl ReadGroups {
    /// From the header's `@RG` lines in order: `(ID, LB)`.
    pub fn new<I: IntoIterator<Item = (Vec<u8>, Option<String>)>>(rgs: I) -> Self {
        let mut g = ReadGroups::default();
        for (id, lb) in rgs {
            let name = lb.unwrap_or_else(|| UNKNOWN_LIBRARY.to_string());
            let lib = g.library_index(&name);
            g.by_id.entry(id.clone()).or_insert(g.ids.len());
            g.ids.push(id);
            g.rg_library.push(lib);
        }
        g
    }

    fn library_index(&mut self, name: &str) -> u32 {
        if let Some(i) = self.libraries.iter().position(|l| l == name) {
            return i as u32;
        }
        self.libraries.push(name.to_string());
        if name == UNKNOWN_LIBRARY {
            self.unknown = Some(self.libraries.len() as u32 - 1);
        }
        self.libraries.len() as u32 - 1
    }

    /// Resolves a record's `RG` value (`None` when it has none).
    pub fn resolve(&mut self, rg: Option<&[u8]>) -> RgInfo {
        let pos = rg.map(|id| self.by_id.get(id).copied());
        let library = match pos {
            Some(Some(i)) => self.rg_library[i],
            _ => match self.unknown {
                Some(u) => u,
                None => self.library_index(UNKNOWN_LIBRARY),
            },
        };
        let ordinal = match pos {
            None => 0,
            Some(Some(i)) => i as i16,
            Some(None) => self.ids.len() as i16,
        };
        RgInfo { library, ordinal }
    }

    pub fn library_name(&self, i: u32) -> &str {
        &self.libraries[i as usize]
    }
}

/// A record's barcode values as Picard compares them (its `BARCODE_TAG`,
/// `READ_ONE_BARCODE_TAG` and `READ_TWO_BARCODE_TAG`): Java string hashes,
/// so barcodes whose hashes collide fall in one set, as in Picard. All 0
/// when no barcode tag is used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Barcodes {
    /// `Objects.hash(umi)`: 31 + the UMI's hash, 31 without a UMI.
    pub umi: i32,
    /// Hash of the `READ_ONE_BARCODE_TAG` value, 0 when absent.
    pub read_one: i32,
    /// Hash of the `READ_TWO_BARCODE_TAG` value, 0 when absent.
    pub read_two: i32,
}

/// Java's `String.hashCode` of UTF-8 text (over its UTF-16 code units).
pub fn java_string_hash(s: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(s);
    text.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

impl Barcodes {
    /// Picard's UMI value: `Objects.hash` of the tag's string (or of null).
    pub fn umi_value(umi: Option<&[u8]>) -> i32 {
        31i32.wrapping_add(umi.map_or(0, java_string_hash))
    }

    /// Picard's read-one/read-two barcode value: the string's hash, 0 when
    /// the record has no such tag.
    pub fn read_value(tag: Option<&[u8]>) -> i32 {
        tag.map_or(0, java_string_hash)
    }
}

/// The fields of one input record that duplicate marking needs.
#[derive(Clone, Copy, Debug)]
pub struct ReadInfo<'a> {
    pub name: &'a [u8],
    pub flag: u16,
    pub ref_id: i32,
    pub mate_ref_id: i32,
    /// 1-based unclipped 5' coordinate ([`five_prime_coordinate`]); unused
    /// for unmapped records.
    pub five_prime: i32,
    /// [`base_quality_score`] of the record.
    pub score: i16,
    pub rg: RgInfo,
    pub barcodes: Barcodes,
}

/// The 1-based unclipped 5' coordinate Picard uses: the unclipped start
/// (soft and hard clips before the first other operation moved back) on the
/// forward strand, the unclipped end on the reverse strand. `pos0` is the
/// 0-based position, `ref_len` the CIGAR's reference length.
pub fn five_prime_coordinate(pos0: i32, ref_len: i64, cigar: &[(u8, u32)], reverse: bool) -> i32 {
    const S: u8 = 4;
    const H: u8 = 5;
    let start = pos0 as i64 + 1;
    if reverse {
        let end = start + ref_len - 1;
        let clip: i64 = cigar
            .iter()
            .rev()
            .take_while(|(op, _)| *op == S || *op == H)
            .map(|&(_, l)| l as i64)
            .sum();
        (end + clip) as i32
    } else {
        let clip: i64 = cigar
            .iter()
            .take_while(|(op, _)| *op == S || *op == H)
            .map(|&(_, l)| l as i64)
            .sum();
        (start - clip) as i32
    }
}

/// Picard's TOTAL_MAPPED_REFERENCE_LENGTH score: the CIGAR's reference
/// length of a mapped record (capped at 16383; 0 when unmapped), less 16384
/// for a QC-failed record.
pub fn reference_length_score(ref_len: i64, flag: u16) -> i16 {
    let mut score = if flag & flags::UNMAPPED != 0 {
        0
    } else {
        ref_len.clamp(0, i16::MAX as i64 / 2) as i16
    };
    if flag & flags::QC_FAIL != 0 {
        score = score.wrapping_add(i16::MIN / 2);
    }
    score
}

/// Picard's SUM_OF_BASE_QUALITIES score: the sum of qualities of at least 15
/// (qualities are Java bytes, so above 127 count as negative and are left
/// out), capped at 16383, less 16384 for a QC-failed record. A quality
/// string of 0xFF (absent) scores 0.
pub fn base_quality_score(qual: &[u8], flag: u16) -> i16 {
    let sum: i64 = if qual.first() == Some(&0xff) {
        0
    } else {
        qual.iter()
            .map(|&q| q as i8)
            .filter(|&q| q >= 15)
            .map(|q| q as i64)
            .sum()
    };
    let mut score = sum.min(i16::MAX as i64 / 2) as i16;
    if flag & flags::QC_FAIL != 0 {
        score = score.wrapping_add(i16::MIN / 2);
    }
    score
}

const F: u8 = 0;
const R: u8 = 1;
const FF: u8 = 2;
const FR: u8 = 3;
const RR: u8 = 4;
const RF: u8 = 5;

fn orientation_byte(first_neg: bool, second_neg: bool) -> u8 {
    match (first_neg, second_neg) {
        (true, true) => RR,
        (true, false) => RF,
        (false, true) => FR,
        (false, false) => FF,
    }
}

/// Picard's `ReadEndsForMarkDuplicates`.
#[derive(Clone, Copy, Debug)]
struct End {
    library: i16,
    barcode: i32,
    r1_barcode: i32,
    r2_barcode: i32,
    orientation: u8,
    r1_ref: i32,
    r1_coord: i32,
    r2_ref: i32,
    r2_coord: i32,
    loc: Location,
    optical_orientation: i8,
    score: i16,
    r1_index: i64,
    r2_index: i64,
}

impl End {
    fn is_paired(&self) -> bool {
        self.r2_ref != -1
    }

    /// Picard's `ReadEndsMDComparator` (barcodes are all 0 without them).
    fn cmp(&self, o: &End) -> std::cmp::Ordering {
        (self.library)
            .cmp(&o.library)
            .then(self.barcode.cmp(&o.barcode))
            .then(self.r1_barcode.cmp(&o.r1_barcode))
            .then(self.r2_barcode.cmp(&o.r2_barcode))
            .then(self.r1_ref.cmp(&o.r1_ref))
            .then(self.r1_coord.cmp(&o.r1_coord))
            .then(self.orientation.cmp(&o.orientation))
            .then(self.r2_ref.cmp(&o.r2_ref))
            .then(self.r2_coord.cmp(&o.r2_coord))
            .then(self.loc.tile.cmp(&o.loc.tile))
            .then(self.loc.x.cmp(&o.loc.x))
            .then(self.loc.y.cmp(&o.loc.y))
            .then(self.r1_index.cmp(&o.r1_index))
            .then(self.r2_index.cmp(&o.r2_index))
    }

    fn same_set(&self, o: &End, compare_read2: bool) -> bool {
        self.library == o.library
            && self.barcode == o.barcode
            && self.r1_barcode == o.r1_barcode
            && self.r2_barcode == o.r2_barcode
            && self.r1_ref == o.r1_ref
            && self.r1_coord == o.r1_coord
            && self.orientation == o.orientation
            && (!compare_read2 || (self.r2_ref == o.r2_ref && self.r2_coord == o.r2_coord))
    }
}

/// What the output pass needs of each record (8 bytes).
#[derive(Clone, Copy, Debug)]
struct RecordSlot {
    library: u32,
    flag: u16,
    /// The record starts a template (a new name; every record in
    /// coordinate order).
    new_template: bool,
}

/// The result: Picard's duplicate flag per input record, and its metrics.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub duplicate: Vec<bool>,
    /// Picard's sequencing (optical) duplicate verdict per input record,
    /// when asked for ([`MarkDuplicates::set_track_optical`]): what its
    /// `DT:Z:SQ` tag and `REMOVE_SEQUENCING_DUPLICATES` act on. Every
    /// record of an optical duplicate template in name-grouped input; the
    /// primary records of the optical duplicate pair in coordinate order.
    pub optical: Option<Vec<bool>>,
    pub metrics: MetricsReport,
}

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

/// Collects read ends from records given in file order.
pub struct MarkDuplicates {
    order: InputOrder,
    /// Coordinate order: an unplaced unmapped record was seen, no more ends.
    ends_done: bool,
    read_groups: ReadGroups,
    pixel_distance: i32,
    name_parser: optical::NameParser,
    track_optical: bool,
    records: Vec<RecordSlot>,
    frags: Vec<End>,
    pairs: Vec<End>,
    /// Mates waiting for their other half, keyed as Picard keys them: the
    /// reference the first mate says its mate is on, then read group and
    /// name. The second mate looks under its own reference, so mates whose
    /// fields disagree never pair up.
    pending: HashMap<(i32, i16, Vec<u8>), End>,
    library_ids: HashMap<u32, i16>,
    /// Bytes of the names of `pending`'s keys.
    pending_name_bytes: usize,
    last_name: Option<Vec<u8>>,
    template_index: i64,
}

impl MarkDuplicates {
    /// For name-grouped input ([`InputOrder::Queryname`]).
    pub fn new(read_groups: ReadGroups) -> Self {
        Self::with_order(read_groups, InputOrder::Queryname)
    }

    pub fn with_order(read_groups: ReadGroups, order: InputOrder) -> Self {
        MarkDuplicates {
            order,
            ends_done: false,
            read_groups,
            pixel_distance: optical::DEFAULT_PIXEL_DISTANCE,
            name_parser: optical::NameParser::Default,
            track_optical: false,
            records: Vec::new(),
            frags: Vec::new(),
            pairs: Vec::new(),
            pending: HashMap::new(),
            library_ids: HashMap::new(),
            pending_name_bytes: 0,
            last_name: None,
            template_index: -1,
        }
    }

    /// Picard's `OPTICAL_DUPLICATE_PIXEL_DISTANCE` (default 100).
    pub fn set_pixel_distance(&mut self, distance: i32) {
        self.pixel_distance = distance;
    }

    /// How read names give flow-cell locations (Picard's `READ_NAME_REGEX`).
    pub fn set_name_parser(&mut self, parser: optical::NameParser) {
        self.name_parser = parser;
    }

    /// Whether [`Outcome::optical`] is computed (Picard keeps its optical
    /// duplicate indexes when it tags them or removes them).
    pub fn set_track_optical(&mut self, track: bool) {
        self.track_optical = track;
    }

    /// Bytes held for the records pushed so far (their slots, read ends
    /// and mates waiting for their other half), for a caller that keeps
    /// them within a memory budget.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let pending_entry = size_of::<((i32, i16, Vec<u8>), End)>() + 8;
        let pending_names = self.pending_name_bytes;
        self.records.capacity() * size_of::<RecordSlot>()
            + (self.frags.capacity() + self.pairs.capacity()) * size_of::<End>()
            + self.pending.capacity() * pending_entry
            + pending_names
    }

    pub fn read_groups_mut(&mut self) -> &mut ReadGroups {
        &mut self.read_groups
    }

    fn library_id(&mut self, lib: u32) -> Result<i16, MarkdupError> {
        let next = self.library_ids.len() as i64 + 1;
        if let Some(&id) = self.library_ids.get(&lib) {
            return Ok(id);
        }
        if next > i16::MAX as i64 {
            return Err(MarkdupError::TooManyLibraries);
        }
        self.library_ids.insert(lib, next as i16);
        Ok(next as i16)
    }

    /// Adds the next input record.
    pub fn push(&mut self, r: &ReadInfo<'_>) -> Result<(), MarkdupError> {
        let index = self.records.len() as i64;
        // In queryname mode a template's ends carry the index of its first
        // record; a change of name starts a new template.
        // In coordinate order every record is its own index.
        if self.order == InputOrder::Coordinate {
            self.template_index = index;
        } else if self.last_name.as_deref() != Some(r.name) {
            // The buffer is reused: one allocation, not one per template.
            let last = self.last_name.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(r.name);
            self.template_index = index;
        }
        self.records.push(RecordSlot {
            new_template: self.template_index == index,
            flag: r.flag,
            library: r.rg.library,
        });
        if self.ends_done {
            return Ok(());
        }
        if r.flag & flags::UNMAPPED != 0 {
            // Picard stops collecting ends at the unplaced unmapped reads
            // that end a coordinate-sorted file.
            if r.ref_id == -1 && self.order == InputOrder::Coordinate {
                self.ends_done = true;
            }
            return Ok(());
        }
        if r.flag & (flags::SECONDARY | flags::SUPPLEMENTARY) != 0 {
            return Ok(());
        }
        let reverse = r.flag & flags::REVERSE != 0;
        let mate_mapped = r.flag & flags::PAIRED != 0 && r.flag & flags::MATE_UNMAPPED == 0;
        let read_one = r.flag & flags::PAIRED == 0 || r.flag & flags::READ1 != 0;
        let frag = End {
            library: self.library_id(r.rg.library)?,
            barcode: r.barcodes.umi,
            r1_barcode: if read_one { r.barcodes.read_one } else { 0 },
            r2_barcode: if read_one { 0 } else { r.barcodes.read_two },
            orientation: if reverse { R } else { F },
            r1_ref: r.ref_id,
            r1_coord: r.five_prime,
            r2_ref: if mate_mapped { r.mate_ref_id } else { -1 },
            r2_coord: -1,
            loc: self.name_parser.location(r.name, r.rg.ordinal),
            optical_orientation: -1,
            score: r.score,
            r1_index: self.template_index,
            r2_index: -1,
        };
        self.frags.push(frag);
        if !mate_mapped {
            return Ok(());
        }
        let Some(mut p) = self
            .pending
            .remove(&(r.ref_id, r.rg.ordinal, r.name.to_vec()))
        else {
            self.pending_name_bytes += r.name.len();
            self.pending
                .insert((r.mate_ref_id, r.rg.ordinal, r.name.to_vec()), frag);
            return Ok(());
        };
        self.pending_name_bytes -= r.name.len();
        let first_was_reverse = p.orientation == R;
        p.optical_orientation = if r.flag & flags::READ1 != 0 {
            p.r1_barcode = r.barcodes.read_one;
            orientation_byte(reverse, first_was_reverse)
        } else {
            p.r2_barcode = r.barcodes.read_two;
            orientation_byte(first_was_reverse, reverse)
        } as i8;
        let (mate_ref, mate_coord) = (frag.r1_ref, frag.r1_coord);
        if mate_ref > p.r1_ref || (mate_ref == p.r1_ref && mate_coord >= p.r1_coord) {
            p.r2_ref = mate_ref;
            p.r2_coord = mate_coord;
            p.r2_index = self.template_index;
            p.orientation = orientation_byte(first_was_reverse, reverse);
            if p.r2_ref == p.r1_ref && p.r2_coord == p.r1_coord && p.orientation == RF {
                p.orientation = FR;
            }
        } else {
            p.r2_ref = p.r1_ref;
            p.r2_coord = p.r1_coord;
            p.r2_index = p.r1_index;
            p.r1_ref = mate_ref;
            p.r1_coord = mate_coord;
            p.r1_index = self.template_index;
            p.orientation = orientation_byte(reverse, first_was_reverse);
        }
        p.score = p.score.wrapping_add(r.score);
        self.pairs.push(p);
        Ok(())
    }

    /// Finds the duplicates and computes the metrics.
    pub fn finish(mut self) -> Result<Outcome, MarkdupError> {
        let mut dup_indexes: Vec<i64> = Vec::new();
        let mut optical_indexes: Vec<i64> = Vec::new();
        let mut set_sizes = SetSizeHistograms::default();
        let mut optical_by_library: HashMap<i16, u64> = HashMap::new();

        // The comparison ends with the record indexes: ends that compare
        // equal are the same end, so an unstable sort gives the same order.
        self.pairs.sort_unstable_by(End::cmp);
        let mut start = 0;
        while start < self.pairs.len() {
            let mut end = start + 1;
            while end < self.pairs.len() && self.pairs[start].same_set(&self.pairs[end], true) {
                end += 1;
            }
            let set = &self.pairs[start..end];
            if set.len() > 1 {
                self.mark_pairs(
                    set,
                    &mut dup_indexes,
                    &mut optical_indexes,
                    &mut set_sizes,
                    &mut optical_by_library,
                )?;
            } else {
                *set_sizes.all_sets.entry(1).or_default() += 1;
                *set_sizes.non_optical_sets.entry(1).or_default() += 1;
            }
            start = end;
        }

        self.frags.sort_unstable_by(End::cmp);
        let mut start = 0;
        while start < self.frags.len() {
            let mut end = start + 1;
            while end < self.frags.len() && self.frags[start].same_set(&self.frags[end], false) {
                end += 1;
            }
            let set = &self.frags[start..end];
            let contains_pairs = set.iter().any(End::is_paired);
            let contains_frags = set.iter().any(|e| !e.is_paired());
            // Picard skips sets of one and sets of pairs only, except the
            // last set, which it always examines (to the same effect).
            if set.len() > 1 && contains_frags {
                mark_fragments(set, contains_pairs, &mut dup_indexes);
            }
            start = end;
        }
        dup_indexes.sort_unstable();

        let duplicate = self.output_pass(&dup_indexes);
        let optical = self.track_optical.then(|| {
            optical_indexes.sort_unstable();
            self.output_pass(&optical_indexes)
        });
        let metrics = self.metrics(&duplicate, &optical_by_library, set_sizes);
        Ok(Outcome {
            duplicate,
            optical,
            metrics,
        })
    }

    fn mark_pairs(
        &self,
        set: &[End],
        dup_indexes: &mut Vec<i64>,
        optical_indexes: &mut Vec<i64>,
        set_sizes: &mut SetSizeHistograms,
        optical_by_library: &mut HashMap<i16, u64>,
    ) -> Result<(), MarkdupError> {
        let best = best_index(set);
        // Which ends of the set are optical duplicates.
        let mut is_optical = vec![false; set.len()];
        // READ_NAME_REGEX=null: Picard skips the optical search and the
        // set-size histograms along with it.
        if !self.name_parser.detects_optical() {
            push_duplicates(set, best, dup_indexes);
            return Ok(());
        }
        // Optical duplicates, split by first-of-pair orientation when a set
        // holds both FR and RF.
        let has_fr = set.iter().any(|e| e.optical_orientation == FR as i8);
        let has_rf = set.iter().any(|e| e.optical_orientation == RF as i8);
        let mut count = |members: Vec<usize>| {
            let locs: Vec<Location> = members.iter().map(|&i| set[i].loc).collect();
            // Picard passes the keeper whether or not it is in the sub-list,
            // so the clustering starts at 4 ends.
            let keeper = members.iter().position(|&i| i == best);
            let flags = optical::find_optical_duplicates_with_threshold(
                &locs,
                keeper,
                4,
                self.pixel_distance,
            );
            for (&i, &f) in members.iter().zip(&flags) {
                is_optical[i] |= f;
            }
        };
        if has_fr && has_rf {
            let mut f = Vec::new();
            let mut r = Vec::new();
            for (i, e) in set.iter().enumerate() {
                if e.optical_orientation == FR as i8 {
                    f.push(i);
                } else if e.optical_orientation == RF as i8 {
                    r.push(i);
                } else {
                    return Err(MarkdupError::UnexpectedOrientation {
                        ref_id: e.r1_ref,
                        coordinate: e.r1_coord,
                    });
                }
            }
            count(f);
            count(r);
        } else {
            count((0..set.len()).collect());
        }
        let n_optical = is_optical.iter().filter(|&&b| b).count() as u64;
        if n_optical > 0 {
            *optical_by_library.entry(set[0].library).or_default() += n_optical;
        }
        let size = set.len() as u64;
        *set_sizes.all_sets.entry(size).or_default() += 1;
        if size > n_optical {
            *set_sizes
                .non_optical_sets
                .entry(size - n_optical)
                .or_default() += 1;
        }
        if n_optical > 0 {
            *set_sizes.optical_sets.entry(n_optical + 1).or_default() += 1;
        }
        push_duplicates(set, best, dup_indexes);
        // Picard lists an optical duplicate's records once more, for its
        // DT:Z:SQ tag and REMOVE_SEQUENCING_DUPLICATES.
        if self.track_optical {
            for (i, e) in set.iter().enumerate() {
                if i != best && is_optical[i] {
                    optical_indexes.push(e.r1_index);
                    if e.r2_index != e.r1_index {
                        optical_indexes.push(e.r2_index);
                    }
                }
            }
        }
        Ok(())
    }

    /// Picard's output loop: the sorted duplicate indexes are walked as the
    /// records go by; a record is a duplicate when its index is the next
    /// one, or (queryname order) when it follows a duplicate record of the
    /// same name. (An index listed twice holds the walk back by one
    /// template, or one record in coordinate order, as in Picard.)
    fn output_pass(&self, dup_indexes: &[i64]) -> Vec<bool> {
        let mut it = dup_indexes.iter().copied();
        let mut next = it.next().unwrap_or(i64::MAX);
        let mut dup_template: Option<u64> = None;
        let mut template = 0u64;
        let mut out = Vec::with_capacity(self.records.len());
        for (i, rec) in self.records.iter().enumerate() {
            let i = i as i64;
            template += rec.new_template as u64;
            // Each record is its own template in coordinate order.
            if i > next && dup_template != Some(template) {
                next = it.next().unwrap_or(i64::MAX);
            }
            let is_dup = i == next || (i > next && dup_template == Some(template));
            if is_dup {
                dup_template = Some(template);
            }
            out.push(is_dup);
        }
        out
    }

    fn metrics(
        &self,
        duplicate: &[bool],
        optical_by_library: &HashMap<i16, u64>,
        set_sizes: SetSizeHistograms,
    ) -> MetricsReport {
        // Libraries of the header's read groups are reported even when no
        // record has them; Picard orders libraries by name (Java strings;
        // byte order for ASCII).
        let mut by_lib: BTreeMap<String, DuplicationMetrics> = BTreeMap::new();
        for &l in &self.read_groups.rg_library {
            let name = self.read_groups.library_name(l);
            by_lib
                .entry(name.to_string())
                .or_insert_with(|| DuplicationMetrics::new(name));
        }
        for (rec, &dup) in self.records.iter().zip(duplicate) {
            let name = self.read_groups.library_name(rec.library);
            let m = by_lib
                .entry(name.to_string())
                .or_insert_with(|| DuplicationMetrics::new(name));
            let f = rec.flag;
            let unpaired = f & flags::PAIRED == 0 || f & flags::MATE_UNMAPPED != 0;
            let sec_sup = f & (flags::SECONDARY | flags::SUPPLEMENTARY) != 0;
            if f & flags::UNMAPPED != 0 {
                m.unmapped_reads += 1;
            } else if sec_sup {
                m.secondary_or_supplementary_rds += 1;
            } else if unpaired {
                m.unpaired_reads_examined += 1;
            } else {
                m.read_pairs_examined += 1;
            }
            if dup && !sec_sup && f & flags::UNMAPPED == 0 {
                if unpaired {
                    m.unpaired_read_duplicates += 1;
                } else {
                    m.read_pair_duplicates += 1;
                }
            }
        }
        let mut libraries = Vec::new();
        for (name, mut m) in by_lib {
            m.read_pairs_examined /= 2;
            m.read_pair_duplicates /= 2;
            let lib_index = self.read_groups.libraries.iter().position(|l| *l == name);
            if let Some(id) = lib_index.and_then(|i| self.library_ids.get(&(i as u32))) {
                m.read_pair_optical_duplicates = optical_by_library.get(id).copied().unwrap_or(0);
            }
            m.calculate_derived_fields();
            libraries.push(m);
        }
        MetricsReport {
            libraries,
            set_sizes,
        }
    }
}

/// The first end with the highest score (Picard's `end.score > maxScore ||
/// best == null`).
fn best_index(set: &[End]) -> usize {
    let mut best = 0;
    for (i, e) in set.iter().enumerate().skip(1) {
        if e.score > set[best].score {
            best = i;
        }
    }
    best
}

/// The record indexes of every end of a pair set but the kept one.
fn push_duplicates(set: &[End], best: usize, dup_indexes: &mut Vec<i64>) {
    for (i, e) in set.iter().enumerate() {
        if i != best {
            dup_indexes.push(e.r1_index);
            if e.r2_index != e.r1_index {
                dup_indexes.push(e.r2_index);
            }
        }
    }
}

fn mark_fragments(set: &[End], contains_pairs: bool, dup_indexes: &mut Vec<i64>) {
    if contains_pairs {
        dup_indexes.extend(set.iter().filter(|e| !e.is_paired()).map(|e| e.r1_index));
    } else {
        let best = best_index(set);
        dup_indexes.extend(
            set.iter()
                .enumerate()
                .filter(|&(i, _)| i != best)
                .map(|(_, e)| e.r1_index),
        );
    }
}

#[cfg(test)]
mod tests;
