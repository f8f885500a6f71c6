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
//! Memory: with [`MarkDuplicates::set_spill`] the state stays within a byte
//! limit: read ends beyond it are sorted into run files and merged back
//! one duplicate set at a time, record slots are appended to a file, and
//! the decisions are bitsets over the records (`spill`); the answer is the
//! same as without the limit.
//!
//! Records whose 0x400 bit the outcome says is clear must have it cleared
//! (Picard resets it on every record). Not covered: Picard options other
//! than `OPTICAL_DUPLICATE_PIXEL_DISTANCE`, `READ_NAME_REGEX`
//! ([`optical::NameParser`]) and the optical verdict behind `DT` tags and
//! `REMOVE_SEQUENCING_DUPLICATES` ([`Outcome::optical`]): barcodes
//! (`BARCODE_TAG`), random scoring and duplicate-set tags;
//! `alnsort sort --markdup` refuses them), names of one template that are
//! not adjacent in queryname order (Picard compares the names themselves;
//! [`grouping::GroupCheck`] lets a caller refuse such input). The metrics
//! file's header gives the run as Picard's command line
//! ([`PicardCommandLine`]: `INPUT=` names the sample for MultiQC), then the
//! caller's own command line where Picard writes its start time.

#![forbid(unsafe_code)]

pub mod batch;
pub mod bits;
pub mod dist;
pub mod fixmate;
pub mod grouping;
pub mod htsjdk;
pub mod metrics;
pub mod optical;
pub mod samtools;
pub mod several;
mod spill;

use alnsort_pipeline::prefault::PrefaultAhead;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

pub use bits::Bits;
pub use metrics::{DuplicationMetrics, MetricsReport, PicardCommandLine, SetSizeHistograms};
use optical::Location;

/// SAM flag bits (the bam crate's, SAM spec §1.4).
pub use alnsort_bam::record::flags;

/// Picard's name for records whose read group has no `LB`.
pub const UNKNOWN_LIBRARY: &str = "Unknown Library";

#[derive(Debug, thiserror::Error)]
pub enum MarkdupError {
    /// Picard numbers libraries in a Java `short`.
    #[error("more than 32767 libraries")]
    TooManyLibraries,
    /// A duplicate set mixes FR/RF optical orientations with another one;
    /// Picard stops with "Found an unexpected orientation".
    #[error("duplicate set at reference {ref_id} position {coordinate} has an unexpected orientation for optical duplicate detection")]
    UnexpectedOrientation { ref_id: i32, coordinate: i32 },
    /// A block of ends, halves, slots or indexes handed from another task
    /// of the distributed marking ([`dist`]) is cut short.
    #[error("a block of {what} of {len} bytes ends within the entry at byte {at}: it was cut short on its way between tasks")]
    BadBlock {
        what: &'static str,
        len: usize,
        at: usize,
    },
    /// A read end of the distributed marking names a split beyond those
    /// the run has.
    #[error("a read end names split {split}, but the run has {splits} splits: the ends come from another run")]
    SplitBeyond { split: usize, splits: usize },
    /// A split's range numbers (which range of the output each record
    /// went to, from its map) do not fit its outcome.
    #[error("the range numbers of a split cover {got} records, but its duplicate walk has {records}: they come from another run")]
    RangesCount { got: usize, records: u64 },
    /// A record went to a range beyond those the run has.
    #[error("a record went to range {range}, but the run has {partitions} ranges: the range numbers come from another run")]
    RangeBeyond { range: usize, partitions: usize },
    /// Name-grouped input cut into splits: a template of read `name`
    /// begins at `ordinal` ([`dist::ordinal`] of its first record) after
    /// an earlier template of that name (beginning at `earlier`) that
    /// lacks a primary mate: the records of one template are scattered,
    /// which one node refuses ([`grouping::GroupCheck`]).
    #[error(
        "read {}: a template begins at record {} of split {} after a template of that name without both \
         mates (at record {} of split {}): the input is not grouped by name",
        String::from_utf8_lossy(name),
        dist::split_of(*ordinal as u64).1 + 1,
        dist::split_of(*ordinal as u64).0,
        dist::split_of(*earlier as u64).1 + 1,
        dist::split_of(*earlier as u64).0
    )]
    ScatteredTemplate {
        name: Vec<u8>,
        ordinal: i64,
        earlier: i64,
    },
    /// A collector keeping Picard's merge order was given a record without
    /// its comparator fields, or one not keeping it a record with them.
    #[error("a split's records were collected with and without their merge keys: a caller mixed the paths")]
    MergeKeys,
    /// Several coordinate-sorted inputs: two records of two inputs have
    /// equal running maxima by htsjdk's coordinate comparator
    /// ([`dist::merge_order`]), so Java's heap orders them in Picard's
    /// merged stream, which the tasks do not know; one task decides.
    #[error(
        "records of input {} and input {} have equal running maxima (read {}) by htsjdk's coordinate comparator: \
         Java's heap orders them in Picard's merged stream",
        a_input, b_input, String::from_utf8_lossy(name)
    )]
    MergeTie {
        a_input: u32,
        b_input: u32,
        name: Vec<u8>,
    },
    /// Several coordinate-sorted inputs: a template's mates are in two
    /// inputs, which Picard pairs in its merged stream's order.
    #[error(
        "the mates of read {} are in two inputs: Picard pairs them in its merged stream's order",
        String::from_utf8_lossy(name)
    )]
    MatesInTwoInputs { name: Vec<u8> },
    /// Several coordinate-sorted inputs sharing a library: a bucket's read
    /// ends and their records' places, held in memory until all are read
    /// to rank the records in Picard's merged order
    /// ([`MarkDuplicates::decide_merged`]), would take more than half the
    /// marker's limit (the other half is the marker's own, as it spills);
    /// one task decides then, spilling its read ends.
    #[error(
        "ranking the bucket's read ends in Picard's merged order would hold more than {} bytes, half the \
         duplicate marker's limit of {limit} bytes ({held} bytes after {ends} ends; more end buckets make \
         each smaller)",
        limit / 2
    )]
    MergeBeyondLimit {
        held: usize,
        ends: usize,
        limit: usize,
    },
    /// A spill file of the read ends could not be written or read back.
    #[error("{op} {}: {source}", path.display())]
    Spill {
        path: std::path::PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Coordinate-sorted input: the mates waiting for their other half on
    /// the reference being read (those waiting for a later reference are
    /// spilled) leave the read ends too little of the limit.
    #[error(
        "{waiting} mates wait for their other half and take {waiting_bytes} bytes, which leaves the \
         read ends less than {min_bytes} bytes of the duplicate marker's {limit} (mates waiting for \
         a mate on the reference being read are kept in memory; the others and the ends are \
         spilled to disk)"
    )]
    WaitingMatesBeyondLimit {
        waiting: usize,
        waiting_bytes: usize,
        min_bytes: usize,
        limit: usize,
    },
    /// Coordinate-sorted input: a mate waits under a key (reference of its
    /// mate, read group, name) another mate already waits under (a
    /// template twice in the input, or in two merged inputs). Picard
    /// 3.4.0's waiting map for coordinate-sorted input (htsjdk's
    /// `CoordinateSortedPairInfoMap`) stops there.
    #[error(
        "read {name} waits for its mate on reference {mate_ref} in read group {read_group} while \
         another read of that name and read group already waits there: the template is twice in \
         the input (or in two of the inputs). Picard 3.4.0 stops on such coordinate-sorted input \
         (\"Value was put into PairInfoMap more than once\")"
    )]
    WaitingTwice {
        name: String,
        mate_ref: i32,
        read_group: String,
    },
}

impl MarkdupError {
    /// Whether the tasks of several coordinate-sorted inputs cannot put
    /// these records in Picard's merged order ([`dist::merge_order`]), or
    /// not within the marker's limit: the decision then goes to one task,
    /// not an error of the input.
    pub fn needs_one_task(&self) -> bool {
        matches!(
            self,
            MarkdupError::MergeTie { .. }
                | MarkdupError::MatesInTwoInputs { .. }
                | MarkdupError::MergeBeyondLimit { .. }
        )
    }
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

    /// The ID of the read group of ordinal `ordinal` ([`RgInfo::ordinal`]),
    /// for messages.
    pub fn id_name(&self, ordinal: i16) -> String {
        match self.ids.get(ordinal as usize) {
            Some(id) => String::from_utf8_lossy(id).into_owned(),
            None => "(none in the header)".to_string(),
        }
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

    /// Makes the header read group `id` one read group with `same_as`
    /// (its ordinal and library): several inputs whose headers have the
    /// same `@RG` line are one read group to Picard (htsjdk's header
    /// merge keeps one line), where samtools' merge renames the later one.
    /// Does nothing unless both are header read groups.
    pub fn alias(&mut self, id: &[u8], same_as: &[u8]) {
        if let (Some(_), Some(&to)) = (self.by_id.get(id), self.by_id.get(same_as)) {
            self.by_id.insert(id.to_vec(), to);
        }
    }

    /// The library names, by library index.
    pub fn libraries(&self) -> &[String] {
        &self.libraries
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
    use alnsort_bam::cigar::op::{HARD_CLIP as H, SOFT_CLIP as S};
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
        // Branch-free sums in u32 over pieces that cannot overflow it
        // (127 x 2^20), which the compiler turns into vector code.
        qual.chunks(1 << 20)
            .map(|c| {
                c.iter()
                    .map(|&q| if q as i8 >= 15 { q as u32 } else { 0 })
                    .sum::<u32>() as i64
            })
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
    /// A pair end (both mates), not a fragment end.
    pair: bool,
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

    /// [`End::cmp`], then the fields it leaves out: ends equal in this
    /// order are interchangeable (the decisions do not depend on their
    /// order), so an unstable sort, and a merge of sorted runs, give the
    /// same decisions as any stable sort.
    fn total_cmp(&self, o: &End) -> std::cmp::Ordering {
        self.cmp(o)
            .then(self.score.cmp(&o.score))
            .then(self.optical_orientation.cmp(&o.optical_orientation))
            .then(self.loc.read_group.cmp(&o.loc.read_group))
            .then(self.pair.cmp(&o.pair))
    }

    /// The fields a fragment end's set shares (`same_set` without read 2),
    /// in [`End::cmp`]'s order.
    fn frag_key(&self) -> (i16, i32, i32, i32, i32, i32, u8) {
        (
            self.library,
            self.barcode,
            self.r1_barcode,
            self.r2_barcode,
            self.r1_ref,
            self.r1_coord,
            self.orientation,
        )
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

/// A mate waiting for its other half, under the key Picard gives it.
#[derive(Debug)]
struct Waiting {
    ref_id: i32,
    rg: i16,
    name: Vec<u8>,
    end: End,
    /// The template it waits in ([`Templates::index`]): in name-grouped
    /// input a record of the same template has the same name
    /// ([`MarkDuplicates::waits_as`]).
    template: i64,
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
    pub duplicate: Bits,
    /// Picard's sequencing (optical) duplicate verdict per input record,
    /// when asked for ([`MarkDuplicates::set_track_optical`]): what its
    /// `DT:Z:SQ` tag and `REMOVE_SEQUENCING_DUPLICATES` act on. Every
    /// record of an optical duplicate template in name-grouped input; the
    /// primary records of the optical duplicate pair in coordinate order.
    pub optical: Option<Bits>,
    /// What went to disk ([`MarkDuplicates::set_spill`]).
    pub spill: SpillStats,
    pub metrics: MetricsReport,
}

/// Spill files written for the read ends and record slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Sorted runs of read ends written (merges of runs included).
    pub runs: u64,
    /// Bytes written to spill files (runs, record slots and waiting mates).
    pub bytes: u64,
    /// Mates of coordinate-sorted input waiting for their other half on a
    /// later reference, written to disk (each time one is).
    pub waiting: u64,
}

/// Bytes of a pushed buffer a prefault job makes resident at a time, and
/// how far beyond the buffer's length at most ([`MarkDuplicates::prefault`]):
/// each buffer's resident set exceeds what it holds by at most their sum,
/// which counts against the peak (`sort --markdup`'s peak is at the end of
/// input, when the buffers are fullest). An input batch (256 KiB of
/// records, `alnsort_bam::reader::BATCH_BYTES`: about 750 records on the
/// benchmark BAM) adds about 24 KiB of pair ends and 6 KiB of keys or
/// slots, so 512 KiB is tens of batches ahead: a job queued behind the
/// pool's decode jobs is seldom late. With 3 MiB ahead, 1 MiB steps, the
/// peak was 10 MB higher.
const PREFAULT_STEP: usize = 256 << 10;
const PREFAULT_AHEAD: usize = 512 << 10;

/// The fewest read ends the memory limit must leave room for.
const MIN_ENDS: usize = if cfg!(test) { 16 } else { 4096 };

/// A fragment end's set key ([`End::frag_key`]).
type FragKey = (i16, i32, i32, i32, i32, i32, u8);

/// The fragment ends of mapped records whose mate is mapped too, kept as
/// their set keys alone. In a fragment set such an end is never marked and
/// never the kept one: the decision asks only whether the set holds one
/// ([`mark_fragments`]'s `contains_pairs`), and a set of them alone is
/// passed over. So an end rebuilt from its key ([`MatedFrags::end`])
/// decides exactly as the record's own end did. A key takes 8 bytes
/// (packed, the usual case: no barcodes, fewer than 128 libraries and
/// 2^24 references) or 24, where the full end takes 64: with every mate
/// mapped these are two thirds of the ends.
#[derive(Default)]
struct MatedFrags {
    packed: Vec<u64>,
    wide: Vec<FragKey>,
}

impl MatedFrags {
    /// Libraries below this id fit the packed form (7 bits).
    const PACKED_LIBRARIES: i16 = 1 << 7;
    /// References below this id fit the packed form (24 bits).
    const PACKED_REFS: i32 = 1 << 24;

    fn push(&mut self, e: &End) {
        self.push_key(e.frag_key());
    }

    fn push_key(&mut self, key: FragKey) {
        let (library, _, _, _, r1_ref, r1_coord, orientation) = key;
        if Self::packs(key) {
            self.packed.push(
                (library as u64) << 57
                    | (orientation as u64) << 56
                    | (r1_ref as u64) << 32
                    | r1_coord as u32 as u64,
            );
        } else {
            self.wide.push(key);
        }
    }

    fn unpack(k: u64) -> FragKey {
        (
            (k >> 57) as i16,
            0,
            0,
            0,
            (k >> 32 & 0xff_ffff) as i32,
            k as u32 as i32,
            (k >> 56 & 1) as u8,
        )
    }

    fn len(&self) -> usize {
        self.packed.len() + self.wide.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` would pack ([`MatedFrags::push`]).
    fn packs(key: FragKey) -> bool {
        let (library, barcode, r1_barcode, r2_barcode, r1_ref, _, orientation) = key;
        (barcode, r1_barcode, r2_barcode) == (0, 0, 0)
            && (0..Self::PACKED_LIBRARIES).contains(&library)
            && (0..Self::PACKED_REFS).contains(&r1_ref)
            && orientation <= R
    }

    /// Whether `key` finds its buffer full.
    fn is_full_for(&self, key: FragKey) -> bool {
        if Self::packs(key) {
            self.packed.len() == self.packed.capacity()
        } else {
            self.wide.len() == self.wide.capacity()
        }
    }

    /// Grows the buffer `key` goes to: doubled, to at least
    /// `MIN_ENDS` keys, to at most `max_bytes` (but one key).
    fn grow_for(&mut self, key: FragKey, max_bytes: usize) {
        fn grow<T>(v: &mut Vec<T>, max_bytes: usize) {
            let most = (max_bytes / std::mem::size_of::<T>()).max(v.len() + 1);
            let want = (v.capacity() * 2).max(MIN_ENDS).min(most);
            v.reserve_exact(want.saturating_sub(v.len()));
        }
        if Self::packs(key) {
            grow(&mut self.packed, max_bytes);
        } else {
            grow(&mut self.wide, max_bytes);
        }
    }

    /// Empties the buffers, keeping room for `MIN_ENDS` keys each.
    fn clear(&mut self) {
        self.packed.clear();
        self.packed.shrink_to(MIN_ENDS);
        self.wide.clear();
        self.wide.shrink_to(MIN_ENDS);
    }

    fn memory_bytes(&self) -> usize {
        self.packed.capacity() * std::mem::size_of::<u64>()
            + self.wide.capacity() * std::mem::size_of::<FragKey>()
    }

    fn keys(&self) -> impl Iterator<Item = FragKey> + '_ {
        (self.packed.iter().map(|&k| Self::unpack(k))).chain(self.wide.iter().copied())
    }

    /// A fragment end with `key` whose mate is mapped (`r2_ref` 0: any
    /// reference; the rest no record's).
    fn end(key: FragKey) -> End {
        let (library, barcode, r1_barcode, r2_barcode, r1_ref, r1_coord, orientation) = key;
        End {
            library,
            barcode,
            r1_barcode,
            r2_barcode,
            orientation,
            r1_ref,
            r1_coord,
            r2_ref: 0,
            r2_coord: -1,
            loc: Location {
                read_group: 0,
                tile: -1,
                x: 0,
                y: 0,
            },
            optical_orientation: -1,
            score: 0,
            r1_index: -1,
            r2_index: -1,
            pair: false,
        }
    }
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

/// Where templates start and which records give read ends, as Picard's
/// MarkDuplicates reads its input: the one rule of the one-pass marker
/// ([`MarkDuplicates`]) and of a split's collector
/// ([`dist::SplitCollector`]).
#[derive(Clone, Debug)]
pub(crate) struct Templates {
    order: InputOrder,
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
    ended: bool,
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
    pub(crate) fn whole(&mut self, first: i64) {
        self.index = first;
        self.ended = true;
    }

    /// The record numbered `number` (growing with input order), named
    /// `name`: whether it starts a template.
    pub(crate) fn step(&mut self, number: i64, name: &[u8]) -> bool {
        self.step_known(number, name, None)
    }

    /// [`Templates::step`], told whether `name` is the previous record's
    /// (`same_name`, when the caller compared them off the serial path).
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

/// Collects read ends from records given in file order.
pub struct MarkDuplicates {
    order: InputOrder,
    /// Where templates start and which records give ends.
    templates: Templates,
    read_groups: ReadGroups,
    pixel_distance: i32,
    name_parser: optical::NameParser,
    track_optical: bool,
    records: spill::SlotLog,
    /// Pair and fragment ends not yet spilled (the fragment ends of
    /// records whose mate is mapped are in `mated`).
    ends: Vec<End>,
    /// The fragment ends of records whose mate is mapped, as their keys,
    /// not yet spilled.
    mated: MatedFrags,
    /// With a memory limit: where the ends and slots go beyond it.
    spill: Option<spill::Spill>,
    /// Mates waiting for their other half, keyed as Picard keys them: the
    /// reference the first mate says its mate is on, then read group and
    /// name. The second mate looks under its own reference, so mates whose
    /// fields disagree never pair up.
    pending: HashMap<(i32, i16, Vec<u8>), End, alnsort_bam::name_hash::NameHash>,
    /// The mate that waits most recently, kept out of `pending` (never
    /// in both): in name-grouped input its other half is usually the next
    /// primary record, which then pairs without hashing or allocating.
    recent: Option<Waiting>,
    /// A spare name buffer for `recent`.
    recent_spare: Vec<u8>,
    /// A mate of the whole template being pushed waits
    /// ([`MarkDuplicates::push_template`]: where the per-record push would
    /// hold it in `recent`).
    template_waits: bool,
    library_ids: HashMap<u32, i16>,
    /// The last library looked up and its id (libraries change rarely
    /// from one record to the next).
    last_library: Option<(u32, i16)>,
    /// The flow-cell location of the current template's name, and the read
    /// group it was parsed for (name-grouped input: every mate of a
    /// template has the same name).
    template_loc: Option<(i64, i16, Location)>,
    /// Bytes of the names of `pending`'s keys.
    pending_name_bytes: usize,
    /// Where [`MarkDuplicates::finish`] sorts the read ends in parallel,
    /// and where the pages of the ends', keys' and slots' buffers are made
    /// resident ahead of the pushes ([`MarkDuplicates::prefault`]).
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    /// How far `ends`, `mated.packed` and `records`' buffer are prefaulted.
    prefaulted: [PrefaultAhead; 3],
    /// A `pending` key to look up with.
    key_buf: (i32, i16, Vec<u8>),
    /// Coordinate order: the largest reference read so far (mates waiting
    /// for a later one may be spilled; a reference's spilled mates are
    /// read back when reading reaches it).
    current_ref: i32,
    /// Mates left in `pending` by the last spill of waiting mates: the
    /// next one waits for twice as many (each spill scans them all).
    waiting_floor: usize,
    /// A second mate waiting under a key is an error, as in Picard on
    /// coordinate-sorted input ([`MarkdupError::WaitingTwice`],
    /// [`MarkDuplicates::set_waiting_twice_fails`]); otherwise it replaces
    /// the first, as Picard's map for name-grouped input does.
    waiting_twice_fails: bool,
}

impl MarkDuplicates {
    /// For name-grouped input ([`InputOrder::Queryname`]).
    pub fn new(read_groups: ReadGroups) -> Self {
        Self::with_order(read_groups, InputOrder::Queryname)
    }

    pub fn with_order(read_groups: ReadGroups, order: InputOrder) -> Self {
        MarkDuplicates {
            order,
            templates: Templates::new(order, -1),
            read_groups,
            pixel_distance: optical::DEFAULT_PIXEL_DISTANCE,
            name_parser: optical::NameParser::Default,
            track_optical: false,
            records: spill::SlotLog::default(),
            ends: Vec::new(),
            mated: MatedFrags::default(),
            spill: None,
            pending: HashMap::default(),
            recent: None,
            recent_spare: Vec::new(),
            template_waits: false,
            library_ids: HashMap::new(),
            last_library: None,
            template_loc: None,
            pending_name_bytes: 0,
            pool: None,
            prefaulted: [PrefaultAhead::new(PREFAULT_STEP, PREFAULT_AHEAD); 3],
            key_buf: (0, 0, Vec::new()),
            current_ref: -1,
            waiting_floor: 0,
            waiting_twice_fails: false,
        }
    }

    /// Coordinate order: a mate waiting under a key (its mate's reference,
    /// read group, name) another mate waits under is an error
    /// ([`MarkdupError::WaitingTwice`]), as Picard's waiting map for
    /// coordinate-sorted input stops on it, instead of replacing it.
    /// Several merged inputs ask for it: one read name in two of them.
    pub fn set_waiting_twice_fails(&mut self, fails: bool) {
        self.waiting_twice_fails = fails && self.order == InputOrder::Coordinate;
    }

    /// A pool for [`MarkDuplicates::finish`] to sort the read ends on (in
    /// parallel; without one they are sorted on the calling thread; the
    /// order, and so the answer, is the same), and for the prefault jobs of
    /// the pushes ([`MarkDuplicates::prefault`]).
    pub fn set_pool(&mut self, pool: std::sync::Arc<rayon::ThreadPool>) {
        self.pool = Some(pool);
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

    /// Keeps the state within `limit` bytes ([`MarkDuplicates::memory_bytes`]):
    /// read ends beyond it are sorted into run files in `dir`, and record
    /// slots beyond a sixteenth of it are appended to a file there; the
    /// decision merges the runs back. Mates waiting for their other half
    /// (coordinate-sorted input) whose mate is on a later reference than
    /// the one being read are appended to a file per reference there when
    /// they take a good part of the limit, and read back when reading
    /// reaches that reference; those waiting on the reference being read
    /// stay in memory: when they leave the ends less than 4096 ends' room,
    /// [`MarkDuplicates::push`] fails with
    /// [`MarkdupError::WaitingMatesBeyondLimit`]. The files are removed as
    /// they are read; on failure the caller removes `dir`. With `hard`
    /// false, waiting mates beyond the limit are kept instead (the limit
    /// is then exceeded by them; the ends still spill).
    pub fn set_spill(&mut self, dir: &Path, limit: usize, hard: bool) {
        self.records
            .bounded(limit / 16 / std::mem::size_of::<RecordSlot>());
        self.spill = Some(spill::Spill::new(dir, limit, hard));
    }

    fn pending_bytes(&self) -> usize {
        let pending_entry = std::mem::size_of::<((i32, i16, Vec<u8>), End)>() + 8;
        self.pending.capacity() * pending_entry
            + self.pending_name_bytes
            + std::mem::size_of::<Waiting>()
            + self.recent_spare.capacity()
    }

    /// Mates waiting for their other half.
    fn waiting(&self) -> usize {
        self.pending.len() + self.recent.is_some() as usize + self.template_waits as usize
    }

    /// Runs `f` on `pending` with the key `(ref_id, rg, name)`, built in a
    /// reused buffer: no allocation per lookup.
    fn with_pending_key<R>(
        &mut self,
        ref_id: i32,
        rg: i16,
        name: &[u8],
        f: impl FnOnce(
            &mut HashMap<(i32, i16, Vec<u8>), End, alnsort_bam::name_hash::NameHash>,
            &(i32, i16, Vec<u8>),
        ) -> R,
    ) -> R {
        let mut key = std::mem::take(&mut self.key_buf);
        key.0 = ref_id;
        key.1 = rg;
        key.2.clear();
        key.2.extend_from_slice(name);
        let out = f(&mut self.pending, &key);
        self.key_buf = key;
        out
    }

    /// Whether `w` waits under `(ref_id, rg, name)`. In name-grouped input
    /// a template is a run of one name, so a mate that waits in the current
    /// template has the current record's name (no need to compare them).
    #[inline]
    fn waits_as(&self, w: &Waiting, ref_id: i32, rg: i16, name: &[u8]) -> bool {
        w.ref_id == ref_id
            && w.rg == rg
            && ((self.order == InputOrder::Queryname && w.template == self.templates.index)
                || w.name == name)
    }

    /// Takes the mate waiting under `(ref_id, rg, name)`, if any.
    fn take_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> Option<End> {
        if let Some(w) = &self.recent {
            if self.waits_as(w, ref_id, rg, name) {
                let w = self.recent.take().expect("checked");
                self.recent_spare = w.name;
                return Some(w.end);
            }
        }
        if self.pending.is_empty() {
            return None;
        }
        self.with_pending_key(ref_id, rg, name, |pending, key| pending.remove(key))
    }

    /// A mate waits under `(ref_id, rg, name)` (in memory: the spilled
    /// ones are checked when read back, [`MarkDuplicates::reach_reference`]).
    fn is_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> bool {
        if let Some(w) = &self.recent {
            if self.waits_as(w, ref_id, rg, name) {
                return true;
            }
        }
        self.with_pending_key(ref_id, rg, name, |pending, key| pending.contains_key(key))
    }

    fn waiting_twice(groups: &ReadGroups, ref_id: i32, rg: i16, name: &[u8]) -> MarkdupError {
        MarkdupError::WaitingTwice {
            name: String::from_utf8_lossy(name).into_owned(),
            mate_ref: ref_id,
            read_group: groups.id_name(rg),
        }
    }

    /// Makes `end` wait under `(ref_id, rg, name)`, replacing any mate
    /// waiting under that key (as a map insert does).
    fn add_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8], end: End) {
        if let Some(w) = &self.recent {
            if self.waits_as(w, ref_id, rg, name) {
                self.recent.as_mut().expect("checked").end = end;
                return;
            }
        }
        if !self.pending.is_empty() {
            self.with_pending_key(ref_id, rg, name, |pending, key| pending.remove(key));
        }
        let mut buf = std::mem::take(&mut self.recent_spare);
        buf.clear();
        buf.extend_from_slice(name);
        let new = Waiting {
            ref_id,
            rg,
            name: buf,
            end,
            template: self.templates.index,
        };
        if let Some(old) = self.recent.replace(new) {
            self.pending.insert((old.ref_id, old.rg, old.name), old.end);
        }
    }

    /// Bytes the decision's bitsets will take (4 bits per record).
    fn bitset_bytes(&self) -> usize {
        (self.records.len() / 2) as usize
    }

    /// Bytes held for the records pushed so far (their slots, read ends,
    /// mates waiting for their other half, and the bitsets the decision
    /// will need), for a caller that keeps them within a memory budget.
    pub fn memory_bytes(&self) -> usize {
        self.records.memory_bytes()
            + self.ends.capacity() * std::mem::size_of::<End>()
            + self.mated.memory_bytes()
            + self.pending_bytes()
            + self.bitset_bytes()
    }

    /// What went to disk so far.
    pub fn spill_stats(&self) -> SpillStats {
        self.spill
            .as_ref()
            .map_or_else(SpillStats::default, |s| SpillStats {
                runs: s.runs_written,
                bytes: s.bytes_written,
                waiting: s.waiting.written,
            })
    }

    /// Ends the limit leaves room for now, beside the other parts and a
    /// sixteenth of the limit left for their growth (without it, every
    /// record would push the state over the limit once the ends' buffer
    /// is full, and each would spill a handful of ends).
    fn ends_room(&self, limit: usize) -> usize {
        let other = self.records.memory_bytes()
            + self.mated.memory_bytes()
            + self.pending_bytes()
            + self.bitset_bytes();
        limit.saturating_sub(other).saturating_sub(limit / 16) / std::mem::size_of::<End>()
    }

    /// Keeps [`MarkDuplicates::memory_bytes`] within the limit: the ends
    /// go to a run when the state grows beyond it, and their buffer is cut
    /// to what is left beside the other parts.
    fn enforce_limit(&mut self) -> Result<(), MarkdupError> {
        let Some(limit) = self.spill.as_ref().map(|s| s.limit) else {
            return Ok(());
        };
        if self.memory_bytes() <= limit {
            return Ok(());
        }
        let hard = self.spill.as_ref().is_some_and(|s| s.hard);
        if !hard && self.ends_room(limit) < MIN_ENDS {
            // Waiting mates hold the limit: the ends keep a buffer of
            // MIN_ENDS, spilled when full (in add_end).
            return Ok(());
        }
        let coordinate = hard && self.order == InputOrder::Coordinate;
        if coordinate
            && self.pending_bytes() > limit / 4
            && self.pending.len() >= 2 * self.waiting_floor
        {
            self.spill_waiting()?;
            if self.memory_bytes() <= limit {
                return Ok(());
            }
        }
        if !self.ends.is_empty() || !self.mated.is_empty() {
            self.spill_ends()?;
        }
        let mut room = self.ends_room(limit);
        if room < MIN_ENDS && coordinate && self.pending.len() > self.waiting_floor {
            self.spill_waiting()?;
            room = self.ends_room(limit);
        }
        if room < MIN_ENDS {
            return Err(MarkdupError::WaitingMatesBeyondLimit {
                waiting: self.waiting(),
                waiting_bytes: self.pending_bytes(),
                min_bytes: MIN_ENDS * std::mem::size_of::<End>(),
                limit,
            });
        }
        if self.ends.capacity() > room {
            self.ends.shrink_to(room);
        }
        Ok(())
    }

    fn add_end(&mut self, e: End) -> Result<(), MarkdupError> {
        if let Some((limit, hard)) = self.spill.as_ref().map(|s| (s.limit, s.hard)) {
            if self.ends.len() == self.ends.capacity() {
                // Without a hard limit, waiting mates may take it all and
                // the ends keep MIN_ENDS.
                let room_now = |md: &Self| {
                    let room = md.ends_room(limit);
                    if hard {
                        room
                    } else {
                        room.max(MIN_ENDS)
                    }
                };
                let mut room = room_now(self);
                if self.ends.len() >= room {
                    self.spill_ends()?;
                    self.enforce_limit()?;
                    room = room_now(self);
                }
                let want = (self.ends.capacity() * 2)
                    .max(1024)
                    .min(room.max(self.ends.len() + 1));
                self.ends.reserve_exact(want - self.ends.len());
            }
        }
        self.ends.push(e);
        Ok(())
    }

    /// Keeps the fragment end `e` of a record whose mate is mapped, by its
    /// key ([`MatedFrags`]); with a memory limit, the ends and keys go to
    /// runs first when a key buffer would grow beyond it.
    fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError> {
        self.add_mated_key(e.frag_key())
    }

    /// [`MarkDuplicates::add_mated`] of the end's key alone.
    fn add_mated_key(&mut self, e: FragKey) -> Result<(), MarkdupError> {
        if let Some(limit) = self.spill.as_ref().map(|s| s.limit) {
            if self.mated.is_full_for(e) {
                // What the limit leaves beside the other parts and the
                // ends' buffer (as the ends' own room is counted).
                let free = |md: &Self| {
                    md.ends_room(limit).saturating_sub(md.ends.capacity())
                        * std::mem::size_of::<End>()
                };
                let min_bytes = MIN_ENDS * std::mem::size_of::<FragKey>();
                // As in `enforce_limit`: the mates waiting for a later
                // reference go to their files first when they hold a good
                // part of the limit, then the ends and keys to runs.
                if free(self) < min_bytes && self.ends.len() < self.ends.capacity() {
                    // The ends' unused room first.
                    self.ends.shrink_to_fit();
                }
                let hard = self.spill.as_ref().is_some_and(|s| s.hard);
                if free(self) < min_bytes
                    && hard
                    && self.order == InputOrder::Coordinate
                    && self.pending_bytes() > limit / 4
                    && self.pending.len() >= 2 * self.waiting_floor
                {
                    self.spill_waiting()?;
                }
                if free(self) < min_bytes {
                    self.spill_ends()?;
                    self.enforce_limit()?;
                }
                if self.mated.is_full_for(e) {
                    self.mated.grow_for(e, free(self).max(min_bytes));
                }
            }
        }
        self.mated.push_key(e);
        Ok(())
    }

    /// Sorts the ends in memory: pair ends first, each kind in
    /// [`End::total_cmp`] order; returns where the fragment ends start.
    /// `parallel`: on the pool, if there is one.
    fn sort_ends(&mut self, parallel: bool) -> usize {
        let k = partition(&mut self.ends, |e| e.pair);
        let pool = self.pool.as_ref();
        let (pairs, frags) = self.ends.split_at_mut(k);
        Self::sort_slice(pool, pairs, parallel);
        Self::sort_slice(pool, frags, parallel);
        k
    }

    /// Sorts ends in [`End::total_cmp`] order (on `pool` when `parallel`).
    fn sort_slice(
        pool: Option<&std::sync::Arc<rayon::ThreadPool>>,
        ends: &mut [End],
        parallel: bool,
    ) {
        let order = |a: &End, b: &End| a.total_cmp(b);
        match pool.filter(|_| parallel) {
            Some(pool) => {
                use rayon::slice::ParallelSliceMut;
                pool.install(|| ends.par_sort_unstable_by(order));
            }
            None => ends.sort_unstable_by(order),
        }
    }

    /// [`MarkDuplicates::sort_ends`] once the input is read, with every
    /// fragment end in memory: the fragment ends of records whose mate is
    /// mapped (`mated`, by their keys) matter only in a set that holds a
    /// fragment end of another kind (Picard passes over sets of them
    /// alone), so only those whose key such a fragment shares join the
    /// ends (with mates mapped throughout, none). Returns where the
    /// fragment ends start.
    fn sort_ends_for_decision(&mut self) -> usize {
        let k = partition(&mut self.ends, |e| e.pair);
        // (A fragment end with its mate mapped among the ends, as
        // `add_end` takes them, joins the keys.)
        let t = k + partition(&mut self.ends[k..], |e| !e.is_paired());
        for e in &self.ends[t..] {
            self.mated.push(e);
        }
        self.ends.truncate(t);
        let pool = self.pool.as_ref();
        let (pairs, lone) = self.ends.split_at_mut(k);
        Self::sort_slice(pool, pairs, true);
        // Fragments of unpaired records and of mates whose mate is
        // unmapped, sorted: sets are runs of equal `frag_key`.
        Self::sort_slice(pool, lone, true);
        // A filter over the lone fragments' 5' ends spares most of the
        // searches.
        const FILTER_BITS: u32 = 20;
        let slot = |r1_ref: i32, r1_coord: i32| {
            let h = (r1_ref as u32 as u64) << 32 | r1_coord as u32 as u64;
            (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS)) as usize
        };
        let mut filter = vec![0u64; (1 << FILTER_BITS) / 64];
        for e in lone.iter() {
            let s = slot(e.r1_ref, e.r1_coord);
            filter[s / 64] |= 1 << (s % 64);
        }
        let mut kept = Vec::new();
        if !lone.is_empty() {
            for key in self.mated.keys() {
                let s = slot(key.4, key.5);
                if filter[s / 64] >> (s % 64) & 1 == 0 {
                    continue;
                }
                let at = lone.partition_point(|f| f.frag_key() < key);
                if lone.get(at).is_some_and(|f| f.frag_key() == key) {
                    kept.push(MatedFrags::end(key));
                }
            }
        }
        self.mated = MatedFrags::default();
        if !kept.is_empty() {
            self.ends.extend(kept);
            self.ends[k..].sort_unstable_by(|a, b| a.total_cmp(b));
        }
        k
    }

    /// Coordinate order: moves the waiting mates whose mate is on a later
    /// reference than the one being read to the spill files of their
    /// mate's reference (in memory they would wait at least until reading
    /// reaches it).
    fn spill_waiting(&mut self) -> Result<(), MarkdupError> {
        let current = self.current_ref;
        let old = std::mem::take(&mut self.pending);
        let later = old.keys().filter(|k| k.0 > current).count();
        let mut kept = HashMap::with_capacity_and_hasher(old.len() - later, Default::default());
        let mut moved: Vec<(i32, spill::WaitingEntry)> = Vec::with_capacity(later);
        for ((ref_id, rg, name), end) in old {
            if ref_id > current {
                self.pending_name_bytes = self.pending_name_bytes.saturating_sub(name.len());
                moved.push((ref_id, (rg, name, end)));
            } else {
                kept.insert((ref_id, rg, name), end);
            }
        }
        self.pending = kept;
        self.waiting_floor = self.pending.len();
        moved.sort_unstable_by_key(|m| m.0);
        let spill = self.spill.as_mut().expect("spill configured");
        let mut entries = Vec::new();
        let mut moved = moved.into_iter().peekable();
        while let Some((ref_id, first)) = moved.next() {
            entries.clear();
            entries.push(first);
            while let Some((_, e)) = moved.next_if(|m| m.0 == ref_id) {
                entries.push(e);
            }
            let files = &mut spill.files;
            let dir = &spill.dir;
            let path = || {
                *files += 1;
                dir.join(format!("markdup-waiting-{}-{}", std::process::id(), *files))
            };
            spill.bytes_written += spill.waiting.append(ref_id, &entries, path)?;
        }
        Ok(())
    }

    /// Coordinate order: reading has reached `ref_id`; the mates spilled
    /// for it (and for any reference before it) wait in memory again, as
    /// if they had never left (a mate that waits under the same key in
    /// memory came later and stays; of those spilled, the latest).
    fn reach_reference(&mut self, ref_id: i32) -> Result<(), MarkdupError> {
        self.current_ref = ref_id;
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        if spill.waiting.is_empty() {
            return Ok(());
        }
        let back = spill.waiting.take_up_to(ref_id)?;
        self.pending.reserve(back.len());
        for (r, (rg, name, end)) in back.into_iter().rev() {
            if let Some(w) = &self.recent {
                if w.ref_id == r && w.rg == rg && w.name == name {
                    if self.waiting_twice_fails {
                        return Err(Self::waiting_twice(&self.read_groups, r, rg, &name));
                    }
                    continue;
                }
            }
            let len = name.len();
            match self.pending.entry((r, rg, name)) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(end);
                    self.pending_name_bytes += len;
                }
                std::collections::hash_map::Entry::Occupied(o) if self.waiting_twice_fails => {
                    let (r, rg, name) = o.key();
                    return Err(Self::waiting_twice(&self.read_groups, *r, *rg, name));
                }
                std::collections::hash_map::Entry::Occupied(_) => {}
            }
        }
        Ok(())
    }

    fn spill_ends(&mut self) -> Result<(), MarkdupError> {
        // (While the input is read, the pool is busy reading it.)
        let k = self.sort_ends(false);
        let spill = self.spill.as_mut().expect("spill configured");
        spill.add_run(true, &self.ends[..k])?;
        spill.add_run(false, &self.ends[k..])?;
        self.ends.clear();
        self.spill_mated()
    }

    /// Writes the mated fragments' keys as fragment ends
    /// ([`MatedFrags::end`]) into fragment runs, as many at a time as the
    /// ends' buffer holds (empty: [`MarkDuplicates::spill_ends`] has just
    /// written its ends), and empties their buffers.
    fn spill_mated(&mut self) -> Result<(), MarkdupError> {
        debug_assert!(self.ends.is_empty(), "spill_mated fills the ends' buffer");
        let chunk = self.ends.capacity().max(MIN_ENDS);
        let mut keys = self.mated.keys();
        let spill = self.spill.as_mut().expect("spill configured");
        loop {
            self.ends
                .extend(keys.by_ref().take(chunk).map(MatedFrags::end));
            if self.ends.is_empty() {
                break;
            }
            Self::sort_slice(None, &mut self.ends, false);
            spill.add_run(false, &self.ends)?;
            self.ends.clear();
        }
        drop(keys);
        self.mated.clear();
        Ok(())
    }

    pub fn read_groups_mut(&mut self) -> &mut ReadGroups {
        &mut self.read_groups
    }

    fn library_id(&mut self, lib: u32) -> Result<i16, MarkdupError> {
        if let Some((l, id)) = self.last_library {
            if l == lib {
                return Ok(id);
            }
        }
        let next = self.library_ids.len() as i64 + 1;
        let id = match self.library_ids.get(&lib) {
            Some(&id) => id,
            None => {
                if next > i16::MAX as i64 {
                    return Err(MarkdupError::TooManyLibraries);
                }
                self.library_ids.insert(lib, next as i16);
                next as i16
            }
        };
        self.last_library = Some((lib, id));
        Ok(id)
    }

    /// The flow-cell location of `r`'s name: `parsed` when the caller
    /// parsed it ([`optical::NameParser::parse`]), else parsed here, once
    /// per template in name-grouped input.
    fn location(&mut self, r: &ReadInfo<'_>, parsed: Option<Location>) -> Location {
        if let Some(loc) = parsed {
            return loc.with_read_group(r.rg.ordinal);
        }
        if self.order == InputOrder::Queryname {
            if let Some((t, rg, loc)) = self.template_loc {
                if t == self.templates.index && rg == r.rg.ordinal {
                    return loc;
                }
            }
            let loc = self.name_parser.location(r.name, r.rg.ordinal);
            self.template_loc = Some((self.templates.index, r.rg.ordinal, loc));
            return loc;
        }
        self.name_parser.location(r.name, r.rg.ordinal)
    }

    /// Adds the next input record.
    pub fn push(&mut self, r: &ReadInfo<'_>) -> Result<(), MarkdupError> {
        self.push_record(r, None, None)?;
        self.prefault();
        self.enforce_limit()
    }

    /// [`MarkDuplicates::push`] of a record whose name the caller parsed
    /// with this marker's parser ([`optical::NameParser::parse`], on
    /// another thread); `parsed` is used only when the record makes a read
    /// end (mapped, primary).
    pub fn push_parsed(&mut self, r: &ReadInfo<'_>, parsed: Location) -> Result<(), MarkdupError> {
        self.push_known(r, parsed, None)
    }

    /// [`MarkDuplicates::push_parsed`] told whether `r`'s name is the
    /// previous record's (`same_name`: compared by the caller off the
    /// serial path, e.g. within a batch on the pool; `None`: not known).
    pub fn push_known(
        &mut self,
        r: &ReadInfo<'_>,
        parsed: Location,
        same_name: Option<bool>,
    ) -> Result<(), MarkdupError> {
        self.push_record(r, Some(parsed), same_name)?;
        self.enforce_limit()
    }

    /// With a pool, keeps the pages of the buffers the pushes fill (pair
    /// and fragment ends, mated keys, record slots: 200 MB for the 4.3 M
    /// records of the benchmark BAM) resident a little ahead of them, made
    /// so by pool jobs ([`alnsort_pipeline::prefault`]): the page faults
    /// were a quarter of the reading thread's time with `--markdup`.
    /// [`MarkDuplicates::push`] calls it for each record; a caller of
    /// [`MarkDuplicates::push_known`] calls it once per batch of records
    /// (a batch is far smaller than [`PREFAULT_AHEAD`]).
    pub fn prefault(&mut self) {
        if let Some(pool) = &self.pool {
            let [ends, mated, slots] = &mut self.prefaulted;
            ends.check(&self.ends, pool);
            mated.check(&self.mated.packed, pool);
            slots.check(self.records.buffer(), pool);
        }
    }

    fn push_record(
        &mut self,
        r: &ReadInfo<'_>,
        parsed: Option<Location>,
        same_name: Option<bool>,
    ) -> Result<(), MarkdupError> {
        let index = self.records.len() as i64;
        let new_template = self.templates.step_known(index, r.name, same_name);
        self.records.push(
            RecordSlot {
                new_template,
                flag: r.flag,
                library: r.rg.library,
            },
            self.spill.as_mut(),
        )?;
        if self.templates.ends_done {
            return Ok(());
        }
        if self.order == InputOrder::Coordinate && r.ref_id > self.current_ref {
            self.reach_reference(r.ref_id)?;
        }
        if !self.templates.gives_ends(r) {
            return Ok(());
        }
        let library = self.library_id(r.rg.library)?;
        let loc = self.location(r, parsed);
        let frag = fragment_end(r, library, loc, self.templates.index);
        record_ends(self, r, frag)
    }

    /// Finds the duplicates and computes the metrics.
    pub fn finish(mut self) -> Result<Outcome, MarkdupError> {
        let records = self.records.len();
        let mut dups = DupList::new(records);
        let mut optical = DupList::new(if self.track_optical { records } else { 0 });
        let mut set_sizes = SetSizeHistograms::default();
        let mut optical_by_library: HashMap<i16, u64> = HashMap::new();

        // Pair ends first, then fragment ends, each in `total_cmp` order:
        // the runs on disk merged with what is still in memory.
        let frags_spilled = self.spill.as_ref().is_some_and(|s| !s.frag_runs.is_empty());
        let k = if frags_spilled {
            // The mated fragments' keys join the runs, and the ends in
            // memory with them (`spill_mated` fills the ends' buffer).
            self.spill_ends()?;
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
        let mut found = Found {
            dups: &mut dups,
            optical: &mut optical,
            set_sizes: &mut set_sizes,
            optical_by_library: &mut optical_by_library,
        };
        match self.pool.clone() {
            // Every end in memory: the sets are cut into stretches walked
            // on the pool, each adding to the shared lists.
            Some(pool) if pair_runs.is_empty() && frag_runs.is_empty() => {
                self.walk_sets_parallel(&pool, &ends[..k], &ends[k..], &mut found)?;
            }
            _ => {
                let mut stream = spill::EndStream::new(pair_runs, &ends[..k])?;
                let sink = (&mut *found.dups, &mut *found.optical);
                let mut part = PartFound::new(sink);
                self.walk_pair_sets(|| stream.next_end(), &mut part)?;
                drop(stream);
                let mut stream = spill::EndStream::new(frag_runs, &ends[k..])?;
                walk_frag_sets(|| stream.next_end(), &mut part.sink.0)?;
                drop(stream);
                let PartFound {
                    set_sizes: sizes,
                    singles,
                    optical_by_library: by_lib,
                    ..
                } = part;
                found.add_counts(sizes, singles, by_lib);
            }
        }
        drop(ends);

        let spill = self.spill_stats();
        let (duplicate, optical, metrics) =
            self.output_pass(dups, optical, &optical_by_library, set_sizes)?;
        Ok(Outcome {
            duplicate,
            optical,
            spill,
            metrics,
        })
    }

    /// Walks the pair ends' duplicate sets (ends in [`End::total_cmp`]
    /// order, from `next`), marking each set's duplicates.
    fn walk_pair_sets<S: DupSink>(
        &self,
        next: impl FnMut() -> Result<Option<End>, MarkdupError>,
        found: &mut PartFound<S>,
    ) -> Result<(), MarkdupError> {
        for_each_set(next, true, |set| {
            if set.len() > 1 {
                self.mark_pairs(set, found)?;
            } else {
                found.singles += 1;
            }
            Ok(())
        })
    }

    /// The duplicate sets of in-memory ends (`pairs` and `frags`, each in
    /// [`End::total_cmp`] order), cut into stretches at set boundaries and
    /// walked on `pool`. The lists get the same indexes as one walk in
    /// order would give them (in another order, which they do not keep);
    /// an error is the first one in that order.
    fn walk_sets_parallel(
        &self,
        pool: &rayon::ThreadPool,
        pairs: &[End],
        frags: &[End],
        found: &mut Found<'_>,
    ) -> Result<(), MarkdupError> {
        use rayon::prelude::*;
        let parts = pool.current_num_threads() * 4;
        let (dups, optical) = (&*found.dups, &*found.optical);
        let pair_parts = set_stretches(pairs, parts, true);
        let frag_parts = set_stretches(frags, parts, false);
        let (pair_found, frag_found) = pool.install(|| {
            rayon::join(
                || {
                    pair_parts
                        .par_iter()
                        .map(|r| {
                            let mut part = PartFound::new((dups.shared(), optical.shared()));
                            let mut it = pairs[r.clone()].iter();
                            self.walk_pair_sets(|| Ok(it.next().copied()), &mut part)
                                .map(|()| part)
                        })
                        .collect::<Vec<_>>()
                },
                || {
                    frag_parts
                        .par_iter()
                        .map(|r| {
                            let mut sink = dups.shared();
                            let mut it = frags[r.clone()].iter();
                            walk_frag_sets(|| Ok(it.next().copied()), &mut sink).map(|()| sink)
                        })
                        .collect::<Vec<_>>()
                },
            )
        });
        let mut repeats = Vec::new();
        let mut optical_repeats = Vec::new();
        let mut counts = Vec::new();
        for part in pair_found {
            let part = part?;
            repeats.extend(part.sink.0.repeats);
            optical_repeats.extend(part.sink.1.repeats);
            counts.push((part.set_sizes, part.singles, part.optical_by_library));
        }
        for sink in frag_found {
            repeats.extend(sink?.repeats);
        }
        for (sizes, singles, by_library) in counts {
            found.add_counts(sizes, singles, by_library);
        }
        found.dups.repeats.extend(repeats);
        found.optical.repeats.extend(optical_repeats);
        Ok(())
    }

    fn mark_pairs<S: DupSink>(
        &self,
        set: &[End],
        found: &mut PartFound<S>,
    ) -> Result<(), MarkdupError> {
        let (dup_indexes, optical_indexes) = (&mut found.sink.0, &mut found.sink.1);
        let set_sizes = &mut found.set_sizes;
        let optical_by_library = &mut found.optical_by_library;
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
                    optical_indexes.add(e.r1_index);
                    if e.r2_index != e.r1_index {
                        optical_indexes.add(e.r2_index);
                    }
                }
            }
        }
        Ok(())
    }

    /// Picard's output loop, once over the record slots in input order
    /// ([`walk_records`]); the metrics from its counts.
    fn output_pass(
        &mut self,
        dups: DupList,
        optical: DupList,
        optical_by_library: &HashMap<i16, u64>,
        set_sizes: SetSizeHistograms,
    ) -> Result<(Bits, Option<Bits>, MetricsReport), MarkdupError> {
        let records = self.records.len();
        let mut slots = self.records.reader()?;
        let walked = walk_records(
            records,
            || slots.next_slot(),
            dups.iter(),
            self.track_optical.then(|| optical.iter()),
            WalkCarry::default(),
        )?;
        drop(slots);
        // Libraries by index: their ids are numbered as first seen.
        let by_index: HashMap<u32, u64> = self
            .library_ids
            .iter()
            .filter_map(|(&lib, id)| optical_by_library.get(id).map(|&n| (lib, n)))
            .collect();
        let metrics = metrics_report(&self.read_groups, &walked.counts, &by_index, set_sizes);
        Ok((walked.duplicate, walked.optical, metrics))
    }
}

/// Record counts per library index, as the metrics take them: unmapped,
/// secondary or supplementary, unpaired, paired records; unpaired and
/// paired duplicates.
pub type LibraryCounts = Vec<[u64; 6]>;

/// Where a walk over record slots ([`walk_records`]) stands between two
/// stretches of the input: the listed indexes it has not passed yet (all
/// before the next stretch: they hold it back as a listing twice does),
/// and whether the last template was a duplicate (the next stretch may
/// continue that template). The start of the input is the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkCarry {
    pub stale: u64,
    pub dup_template: bool,
    pub optical_stale: u64,
    pub optical_dup_template: bool,
}

/// What [`walk_records`] finds over a stretch of records.
pub struct Walked {
    pub duplicate: Bits,
    pub optical: Option<Bits>,
    pub counts: LibraryCounts,
    /// Where the walk stands after the stretch.
    pub carry: WalkCarry,
}

/// Picard's output loop over `records` record slots in input order (from
/// `next_slot`): the sorted duplicate indexes (and the optical ones, when
/// given; both relative to the stretch's first record) are walked as the
/// records go by ([`Walk`]), and the metrics counted on the way. `carry`:
/// where the walk stood before the stretch ([`WalkCarry`]); a stretch
/// whose first slot starts no template continues the last one.
fn walk_records(
    records: u64,
    mut next_slot: impl FnMut() -> Result<Option<RecordSlot>, MarkdupError>,
    dups: impl Iterator<Item = u64>,
    optical: Option<impl Iterator<Item = u64>>,
    carry: WalkCarry,
) -> Result<Walked, MarkdupError> {
    let mut duplicate = Bits::new(records);
    let mut optical_out = optical.is_some().then(|| Bits::new(records));
    let mut walk = Walk::new(shifted(carry.stale, Some(dups)));
    walk.dup_template = carry.dup_template.then_some(0);
    let mut optical_walk = Walk::new(shifted(carry.optical_stale, optical));
    optical_walk.dup_template = carry.optical_dup_template.then_some(0);
    let mut counts: LibraryCounts = Vec::new();
    // Template 0 is the one the stretch continues, if it does.
    let mut template = 0u64;
    let mut i = 0u64;
    while let Some(rec) = next_slot()? {
        // Each record is its own template in coordinate order.
        template += rec.new_template as u64;
        let dup = walk.step(i + 1, template);
        if dup {
            duplicate.set(i);
        }
        if let Some(o) = optical_out.as_mut() {
            if optical_walk.step(i + 1, template) {
                o.set(i);
            }
        }
        let lib = rec.library as usize;
        if lib >= counts.len() {
            counts.resize(lib + 1, [0; 6]);
        }
        let c = &mut counts[lib];
        let f = rec.flag;
        let unpaired = f & flags::PAIRED == 0 || f & flags::MATE_UNMAPPED != 0;
        let sec_sup = f & (flags::SECONDARY | flags::SUPPLEMENTARY) != 0;
        if f & flags::UNMAPPED != 0 {
            c[0] += 1;
        } else if sec_sup {
            c[1] += 1;
        } else if unpaired {
            c[2] += 1;
        } else {
            c[3] += 1;
        }
        if dup && !sec_sup && f & flags::UNMAPPED == 0 {
            c[if unpaired { 4 } else { 5 }] += 1;
        }
        i += 1;
    }
    let carry = WalkCarry {
        dup_template: walk.dup_template == Some(template),
        optical_dup_template: optical_walk.dup_template == Some(template),
        stale: walk.left(),
        optical_stale: optical_walk.left(),
    };
    Ok(Walked {
        duplicate,
        optical: optical_out,
        counts,
        carry,
    })
}

/// Listed indexes shifted by one, after `stale` zeros: the indexes a walk
/// has not passed before the stretch, before every record of it.
fn shifted(stale: u64, it: Option<impl Iterator<Item = u64>>) -> impl Iterator<Item = u64> {
    std::iter::repeat_n(0, stale as usize).chain(it.into_iter().flatten().map(|i| i + 1))
}

/// Picard's metrics from the record counts per library index (summed over
/// the input), the optical duplicate pairs per library index and the
/// set-size histograms. Libraries of the header's read groups are reported
/// even when no record has them; Picard orders libraries by name (Java
/// strings; byte order for ASCII).
pub fn metrics_report(
    read_groups: &ReadGroups,
    counts: &[[u64; 6]],
    optical_by_library: &HashMap<u32, u64>,
    set_sizes: SetSizeHistograms,
) -> MetricsReport {
    let mut by_lib: BTreeMap<String, DuplicationMetrics> = BTreeMap::new();
    for &l in &read_groups.rg_library {
        let name = read_groups.library_name(l);
        by_lib
            .entry(name.to_string())
            .or_insert_with(|| DuplicationMetrics::new(name));
    }
    for (lib, c) in counts.iter().enumerate() {
        if c.iter().all(|&n| n == 0) {
            continue;
        }
        let name = read_groups.library_name(lib as u32);
        let m = by_lib
            .entry(name.to_string())
            .or_insert_with(|| DuplicationMetrics::new(name));
        m.unmapped_reads += c[0];
        m.secondary_or_supplementary_rds += c[1];
        m.unpaired_reads_examined += c[2];
        m.read_pairs_examined += c[3];
        m.unpaired_read_duplicates += c[4];
        m.read_pair_duplicates += c[5];
    }
    let mut libraries = Vec::new();
    for (name, mut m) in by_lib {
        m.read_pairs_examined /= 2;
        m.read_pair_duplicates /= 2;
        if let Some(i) = read_groups.libraries.iter().position(|l| *l == name) {
            m.read_pair_optical_duplicates =
                optical_by_library.get(&(i as u32)).copied().unwrap_or(0);
        }
        m.calculate_derived_fields();
        libraries.push(m);
    }
    MetricsReport {
        libraries,
        set_sizes,
    }
}

/// The fragment end of a mapped primary record `r` of template
/// `template_index` (its library's id, its name's location); `r2_ref` is
/// the mate's reference when the mate is mapped, else -1.
fn fragment_end(r: &ReadInfo<'_>, library: i16, loc: Location, template_index: i64) -> End {
    let reverse = r.flag & flags::REVERSE != 0;
    let mate_mapped = r.flag & flags::PAIRED != 0 && r.flag & flags::MATE_UNMAPPED == 0;
    let read_one = r.flag & flags::PAIRED == 0 || r.flag & flags::READ1 != 0;
    End {
        library,
        barcode: r.barcodes.umi,
        r1_barcode: if read_one { r.barcodes.read_one } else { 0 },
        r2_barcode: if read_one { 0 } else { r.barcodes.read_two },
        orientation: if reverse { R } else { F },
        r1_ref: r.ref_id,
        r1_coord: r.five_prime,
        r2_ref: if mate_mapped { r.mate_ref_id } else { -1 },
        r2_coord: -1,
        loc,
        optical_orientation: -1,
        score: r.score,
        r1_index: template_index,
        r2_index: -1,
        pair: false,
    }
}

/// Where a record's read ends go and where its mate waits for its other
/// half: the marker's own state ([`MarkDuplicates`]), or one template's on
/// a read job ([`batch::BatchTemplates`]), both fed by [`record_ends`].
trait Pairing {
    fn add_end(&mut self, e: End) -> Result<(), MarkdupError>;
    /// A fragment end whose mate is mapped ([`MatedFrags`]).
    fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError>;
    /// Takes the mate waiting under `(ref_id, rg, name)`, if any.
    fn take_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> Option<End>;
    /// Makes `end` wait under `(ref_id, rg, name)`.
    fn wait(&mut self, ref_id: i32, rg: i16, name: &[u8], end: End) -> Result<(), MarkdupError>;
    /// A mate named `name` stopped waiting (it was taken and paired).
    fn paired(&mut self, name: &[u8]);
}

impl Pairing for MarkDuplicates {
    fn add_end(&mut self, e: End) -> Result<(), MarkdupError> {
        MarkDuplicates::add_end(self, e)
    }

    fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError> {
        MarkDuplicates::add_mated(self, e)
    }

    fn take_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> Option<End> {
        MarkDuplicates::take_waiting(self, ref_id, rg, name)
    }

    fn wait(&mut self, ref_id: i32, rg: i16, name: &[u8], end: End) -> Result<(), MarkdupError> {
        if self.waiting_twice_fails && self.is_waiting(ref_id, rg, name) {
            return Err(Self::waiting_twice(&self.read_groups, ref_id, rg, name));
        }
        self.pending_name_bytes += name.len();
        self.add_waiting(ref_id, rg, name, end);
        Ok(())
    }

    fn paired(&mut self, name: &[u8]) {
        self.pending_name_bytes -= name.len();
    }
}

/// The read ends of the mapped primary record `r` whose fragment end is
/// `frag`: that end alone when its mate is unmapped (or it is unpaired);
/// else its key ([`MatedFrags`]), and the pair end with the mate waiting
/// under Picard's key, or `frag` waits for its mate. The one pairing step
/// of the reading thread and of the read jobs' whole templates.
fn record_ends<P: Pairing>(p: &mut P, r: &ReadInfo<'_>, frag: End) -> Result<(), MarkdupError> {
    if frag.r2_ref == -1 {
        return p.add_end(frag);
    }
    p.add_mated(&frag)?;
    let Some(first) = p.take_waiting(r.ref_id, r.rg.ordinal, r.name) else {
        return p.wait(r.mate_ref_id, r.rg.ordinal, r.name, frag);
    };
    p.paired(r.name);
    let read1 = r.flag & flags::READ1 != 0;
    p.add_end(pair_end(first, &frag, read1, r.barcodes))
}

/// The pair end of a waiting mate's fragment end `p` and its other half
/// (`second`: that record's fragment end; `read1`: it is the first of
/// pair; its barcodes): the lower 5' end first, Picard's orientation, the
/// scores summed. The one pairing step of [`MarkDuplicates`] and of the
/// distributed join ([`dist::join_mates`]).
fn pair_end(mut p: End, second: &End, read1: bool, barcodes: Barcodes) -> End {
    let reverse = second.orientation == R;
    let first_was_reverse = p.orientation == R;
    p.optical_orientation = if read1 {
        p.r1_barcode = barcodes.read_one;
        orientation_byte(reverse, first_was_reverse)
    } else {
        p.r2_barcode = barcodes.read_two;
        orientation_byte(first_was_reverse, reverse)
    } as i8;
    let (mate_ref, mate_coord) = (second.r1_ref, second.r1_coord);
    if mate_ref > p.r1_ref || (mate_ref == p.r1_ref && mate_coord >= p.r1_coord) {
        p.r2_ref = mate_ref;
        p.r2_coord = mate_coord;
        p.r2_index = second.r1_index;
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
        p.r1_index = second.r1_index;
        p.orientation = orientation_byte(reverse, first_was_reverse);
    }
    p.score = p.score.wrapping_add(second.score);
    p.pair = true;
    p
}

/// Moves the ends for which `first` holds before the others (in no
/// particular order); returns how many there are.
fn partition(ends: &mut [End], first: impl Fn(&End) -> bool) -> usize {
    let mut k = 0;
    for i in 0..ends.len() {
        if first(&ends[i]) {
            ends.swap(k, i);
            k += 1;
        }
    }
    k
}

/// The duplicate record indexes as Picard lists them (a multiset: an index
/// can be listed more than once, which matters to its output loop): one
/// bit per record, and the rare repeated listings apart. The bits are
/// atomic so that walks on the pool can add to one list
/// ([`DupList::shared`]).
struct DupList {
    words: Vec<AtomicU64>,
    len: u64,
    repeats: Vec<u64>,
}

/// Where a walk over duplicate sets lists the duplicate indexes.
trait DupSink {
    fn add(&mut self, index: i64);
}

impl DupList {
    fn new(records: u64) -> Self {
        DupList {
            words: (0..records.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            len: records,
            repeats: Vec::new(),
        }
    }

    /// A sink that adds to this list from a pool job; its repeated
    /// listings are kept apart, for the caller to add.
    fn shared(&self) -> SharedDups<'_> {
        SharedDups {
            list: self,
            repeats: Vec::new(),
        }
    }

    /// Sets bit `i`; whether it was clear.
    fn set_shared(&self, i: u64) -> bool {
        assert!(i < self.len, "index {i} beyond {} records", self.len);
        let bit = 1u64 << (i % 64);
        self.words[(i / 64) as usize].fetch_or(bit, AtomicOrdering::Relaxed) & bit == 0
    }

    /// The indexes in ascending order, each as often as it was listed.
    fn iter(mut self) -> impl Iterator<Item = u64> {
        self.repeats.sort_unstable();
        let mut repeats = self.repeats.into_iter().peekable();
        let mut ones = self
            .words
            .into_iter()
            .map(AtomicU64::into_inner)
            .enumerate()
            .flat_map(|(wi, mut w)| {
                std::iter::from_fn(move || {
                    (w != 0).then(|| {
                        let t = w.trailing_zeros() as u64;
                        w &= w - 1;
                        wi as u64 * 64 + t
                    })
                })
            });
        let mut last: Option<u64> = None;
        std::iter::from_fn(move || {
            if let Some(l) = last {
                if repeats.next_if_eq(&l).is_some() {
                    return Some(l);
                }
            }
            last = ones.next();
            last
        })
    }
}

impl<T: DupSink + ?Sized> DupSink for &mut T {
    fn add(&mut self, index: i64) {
        (**self).add(index)
    }
}

impl DupSink for DupList {
    fn add(&mut self, index: i64) {
        let i = index as u64;
        if !self.set_shared(i) {
            self.repeats.push(i);
        }
    }
}

/// A pool job's view of a shared [`DupList`].
struct SharedDups<'a> {
    list: &'a DupList,
    repeats: Vec<u64>,
}

impl DupSink for SharedDups<'_> {
    fn add(&mut self, index: i64) {
        let i = index as u64;
        if !self.list.set_shared(i) {
            self.repeats.push(i);
        }
    }
}

/// What the walks over duplicate sets add up besides the index lists.
struct Found<'a> {
    dups: &'a mut DupList,
    optical: &'a mut DupList,
    set_sizes: &'a mut SetSizeHistograms,
    optical_by_library: &'a mut HashMap<i16, u64>,
}

impl Found<'_> {
    /// Adds one stretch's counts (`singles`: pair sets of one end).
    fn add_counts(
        &mut self,
        sizes: SetSizeHistograms,
        singles: u64,
        by_library: HashMap<i16, u64>,
    ) {
        self.set_sizes.add(sizes, singles);
        for (lib, n) in by_library {
            *self.optical_by_library.entry(lib).or_default() += n;
        }
    }
}

/// One walk's findings over a stretch of pair sets: the sinks of the
/// duplicate and optical indexes, and its counts.
struct PartFound<S> {
    sink: (S, S),
    set_sizes: SetSizeHistograms,
    /// Sets of one pair end.
    singles: u64,
    optical_by_library: HashMap<i16, u64>,
}

impl<S> PartFound<S> {
    fn new(sink: (S, S)) -> Self {
        PartFound {
            sink,
            set_sizes: SetSizeHistograms::default(),
            singles: 0,
            optical_by_library: HashMap::new(),
        }
    }
}

/// About `parts` ranges of `ends` (sorted) that cut no duplicate set.
fn set_stretches(ends: &[End], parts: usize, compare_read2: bool) -> Vec<std::ops::Range<usize>> {
    let n = ends.len();
    let mut out = Vec::new();
    let mut start = 0;
    for p in 1..=parts {
        let mut cut = (n * p / parts).max(start);
        while cut > 0 && cut < n && ends[cut - 1].same_set(&ends[cut], compare_read2) {
            cut += 1;
        }
        if cut > start {
            out.push(start..cut);
            start = cut;
        }
    }
    out
}

/// Walks the fragment ends' duplicate sets (in [`End::total_cmp`] order,
/// from `next`), marking each set's duplicates.
fn walk_frag_sets<S: DupSink>(
    next: impl FnMut() -> Result<Option<End>, MarkdupError>,
    dups: &mut S,
) -> Result<(), MarkdupError> {
    for_each_set(next, false, |set| {
        let contains_pairs = set.iter().any(End::is_paired);
        let contains_frags = set.iter().any(|e| !e.is_paired());
        // Picard skips sets of one and sets of pairs only, except the
        // last set, which it always examines (to the same effect).
        if set.len() > 1 && contains_frags {
            mark_fragments(set, contains_pairs, dups);
        }
        Ok(())
    })
}

/// Cuts ends in [`End::total_cmp`] order (from `next`) into duplicate sets
/// (runs of [`End::same_set`] with `pairs`) and hands each to `each`: the
/// one grouping loop of the pair and fragment walks.
fn for_each_set(
    mut next: impl FnMut() -> Result<Option<End>, MarkdupError>,
    pairs: bool,
    mut each: impl FnMut(&[End]) -> Result<(), MarkdupError>,
) -> Result<(), MarkdupError> {
    let mut set: Vec<End> = Vec::new();
    let mut cur = next()?;
    while let Some(first) = cur {
        set.clear();
        set.push(first);
        cur = next()?;
        while let Some(e) = cur.filter(|e| first.same_set(e, pairs)) {
            set.push(e);
            cur = next()?;
        }
        each(&set)?;
    }
    Ok(())
}

/// Picard's output loop over one sorted index list: a record is a
/// duplicate when its index is the next one, or (queryname order) when it
/// follows a duplicate record of the same template. (An index listed twice
/// holds the walk back by one template, or one record in coordinate order,
/// as in Picard.)
struct Walk<I: Iterator<Item = u64>> {
    it: I,
    next: u64,
    dup_template: Option<u64>,
}

impl<I: Iterator<Item = u64>> Walk<I> {
    fn new(mut it: I) -> Self {
        let next = it.next().unwrap_or(u64::MAX);
        Walk {
            it,
            next,
            dup_template: None,
        }
    }

    /// Listed indexes not passed yet (the current one included).
    fn left(self) -> u64 {
        (self.next != u64::MAX) as u64 + self.it.count() as u64
    }

    fn step(&mut self, i: u64, template: u64) -> bool {
        if i > self.next && self.dup_template != Some(template) {
            self.next = self.it.next().unwrap_or(u64::MAX);
        }
        let is_dup = i == self.next || (i > self.next && self.dup_template == Some(template));
        if is_dup {
            self.dup_template = Some(template);
        }
        is_dup
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
fn push_duplicates<S: DupSink>(set: &[End], best: usize, dup_indexes: &mut S) {
    for (i, e) in set.iter().enumerate() {
        if i != best {
            dup_indexes.add(e.r1_index);
            if e.r2_index != e.r1_index {
                dup_indexes.add(e.r2_index);
            }
        }
    }
}

fn mark_fragments<S: DupSink>(set: &[End], contains_pairs: bool, dup_indexes: &mut S) {
    if contains_pairs {
        for e in set.iter().filter(|e| !e.is_paired()) {
            dup_indexes.add(e.r1_index);
        }
    } else {
        let best = best_index(set);
        for (_, e) in set.iter().enumerate().filter(|&(i, _)| i != best) {
            dup_indexes.add(e.r1_index);
        }
    }
}

#[cfg(test)]
mod tests;
