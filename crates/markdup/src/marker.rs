//! The one-pass marker ([`MarkDuplicates`]): its settings and the push of
//! each record; the mates waiting for their other half, the memory limit
//! and the decision are in its submodules.

mod decide;
mod memory;
mod waiting;

use std::collections::HashMap;
use std::path::Path;

use alnsort_pipeline::prefault::PrefaultAhead;

use crate::ends::{fragment_end, record_ends, End, MatedFrags};
use crate::optical::{self, Location};
use crate::spill;
use crate::templates::Templates;
use crate::walk::RecordSlot;
use crate::{Bits, InputOrder, MarkdupError, MetricsReport, ReadGroups, ReadInfo};
use waiting::Waiting;

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
    /// Bytes written to spill files (runs, record slots and waiting
    /// mates), as they are on disk (the runs compressed).
    pub bytes: u64,
    /// Read ends written to runs (merges of runs included), each
    /// `spill::END_BYTES` before compression.
    pub ends: u64,
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
pub(crate) const PREFAULT_STEP: usize = 256 << 10;
pub(crate) const PREFAULT_AHEAD: usize = 512 << 10;

/// Collects read ends from records given in file order.
pub struct MarkDuplicates {
    pub(crate) order: InputOrder,
    /// Where templates start and which records give ends.
    pub(crate) templates: Templates,
    pub(crate) read_groups: ReadGroups,
    pub(crate) pixel_distance: i32,
    pub(crate) name_parser: optical::NameParser,
    pub(crate) track_optical: bool,
    pub(crate) records: spill::SlotLog,
    /// Pair and fragment ends not yet spilled (the fragment ends of
    /// records whose mate is mapped are in `mated`).
    pub(crate) ends: Vec<End>,
    /// The fragment ends of records whose mate is mapped, as their keys,
    /// not yet spilled.
    pub(crate) mated: MatedFrags,
    /// With a memory limit: where the ends and slots go beyond it.
    pub(crate) spill: Option<spill::Spill>,
    /// Mates waiting for their other half, keyed as Picard keys them: the
    /// reference the first mate says its mate is on, then read group and
    /// name. The second mate looks under its own reference, so mates whose
    /// fields disagree never pair up.
    pub(crate) pending: HashMap<(i32, i16, Vec<u8>), End, alnsort_bam::name_hash::NameHash>,
    /// The mate that waits most recently, kept out of `pending` (never
    /// in both): in name-grouped input its other half is usually the next
    /// primary record, which then pairs without hashing or allocating.
    pub(crate) recent: Option<Waiting>,
    /// A spare name buffer for `recent`.
    pub(crate) recent_spare: Vec<u8>,
    /// A mate of the whole template being pushed waits
    /// ([`MarkDuplicates::push_template`]: where the per-record push would
    /// hold it in `recent`).
    pub(crate) template_waits: bool,
    pub(crate) library_ids: HashMap<u32, i16>,
    /// The last library looked up and its id (libraries change rarely
    /// from one record to the next).
    pub(crate) last_library: Option<(u32, i16)>,
    /// The flow-cell location of the current template's name, and the read
    /// group it was parsed for (name-grouped input: every mate of a
    /// template has the same name).
    pub(crate) template_loc: Option<(i64, i16, Location)>,
    /// Bytes of the names of `pending`'s keys.
    pub(crate) pending_name_bytes: usize,
    /// Where [`MarkDuplicates::finish`] sorts the read ends in parallel,
    /// and where the pages of the ends', keys' and slots' buffers are made
    /// resident ahead of the pushes ([`MarkDuplicates::prefault`]).
    pub(crate) pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    /// How far `ends`, `mated.packed` and `records`' buffer are prefaulted.
    pub(crate) prefaulted: [PrefaultAhead; 3],
    /// A `pending` key to look up with.
    pub(crate) key_buf: (i32, i16, Vec<u8>),
    /// Coordinate order: the largest reference read so far (mates waiting
    /// for a later one may be spilled; a reference's spilled mates are
    /// read back when reading reaches it).
    pub(crate) current_ref: i32,
    /// Mates left in `pending` by the last spill of waiting mates: the
    /// next one waits for twice as many (each spill scans them all).
    pub(crate) waiting_floor: usize,
    /// A second mate waiting under a key is an error, as in Picard on
    /// coordinate-sorted input ([`MarkdupError::WaitingTwice`],
    /// [`MarkDuplicates::set_waiting_twice_fails`]); otherwise it replaces
    /// the first, as Picard's map for name-grouped input does.
    pub(crate) waiting_twice_fails: bool,
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

    pub fn read_groups_mut(&mut self) -> &mut ReadGroups {
        &mut self.read_groups
    }

    pub(crate) fn library_id(&mut self, lib: u32) -> Result<i16, MarkdupError> {
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
    pub(crate) fn location(&mut self, r: &ReadInfo<'_>, parsed: Option<Location>) -> Location {
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

    pub(crate) fn push_record(
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
}
