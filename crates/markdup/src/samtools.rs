//! samtools markdup 1.24's duplicate marking, streaming over coordinate-sorted BAM records.
//!
//! The answer is samtools markdup's (samtools 1.24, as bundled in pysam
//! 0.24.1) on input that went through `samtools fixmate -m` and a
//! coordinate sort: the same records flagged 0x400, the same `do`, `dt`
//! and `dc` tags in the same places, the same statistics text.
//!
//! # API
//!
//! ```text
//! let mut m = Marker::new(options, &read_group_ids);    // @RG IDs in header order
//! for rec in records_in_coordinate_order {               // BAM bytes with block_size
//!     m.push(rec)?;                                      // Error: out of order, no MC, ...
//!     while let Some(done) = m.pop_ready() { write(done) }
//!     for w in m.take_warnings() { eprintln!("{w}") }
//! }
//! m.finish()?;                                           // flushes the window
//! while let Some(done) = m.pop_ready() { write(done) }
//! // with -S (m.needs_second_pass()): write(done) went to a temporary file;
//! // now each of those records, in order: if let Some(r) = m.second_pass(rec) { write(r) }
//! let stats = m.stats();
//! let (text, warnings) = stats.text(command_line);      // or stats.json(..)
//! ```
//!
//! Records come out in input order once their fate is known: a record
//! stays in a window until the current position is `-l` (the maximum read
//! length) past its unclipped 5' end, exactly as samtools' read buffer
//! (so exceeding `-l` misses duplicates as samtools does). Records that
//! `-r` removes never come out. With `-S` (supplementary, secondary and
//! unmapped records of duplicates marked too) samtools makes a second pass
//! over a temporary file; so does the caller here: the records out of
//! [`SamtoolsMarker::pop_ready`] are then the first pass's, kept (a temporary
//! file) and, after [`SamtoolsMarker::finish`], each given in order to
//! [`SamtoolsMarker::second_pass`], which returns the record to write.
//!
//! What samtools does that is not reproduced: with `-d`, duplicates whose
//! names give no coordinates inside a duplicate chain are compared by
//! samtools through memory its chain check leaves from earlier chains;
//! the reused fields of its check array and its reused read-queue slots
//! are modelled here (`chain`), uninitialised or freed memory is not, so
//! such a duplicate's `dt` (SQ or LB) can differ.
//! `--read-coords`/`--barcode-rgx` are POSIX extended regexes in samtools
//! and Rust regexes here (the same on ordinary patterns; POSIX takes the
//! longest of alternatives, Rust the first).

mod chain;
pub mod coords;
mod keys;
pub mod stats;
mod tags;
#[cfg(test)]
mod tests;

use alnsort_bam::record::flags;
use alnsort_bam::RecordRef;
use coords::{CoordRegex, NameCoords, NameFailure};
use std::collections::VecDeque;

use crate::hash::WordMap;

pub use stats::{Stats, StatsBlock};

/// samtools' `MD_MIN_QUALITY`: base qualities below it do not score.
const MIN_QUALITY: u8 = 15;
/// samtools' `BMD_WARNING_MAX`: warnings of one kind printed at most.
const WARNING_MAX: i64 = 10;
/// samtools' pair orientations (`O_FF` ... `O_RF`).
const O_FF: u8 = 2;
const O_RR: u8 = 3;
const O_FR: u8 = 5;
const O_RF: u8 = 7;
/// samtools' leftmost marks (`R_LE`, `R_RI`).
const R_LE: u8 = 11;
const R_RI: u8 = 13;

/// `-m`: how pairs are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `t`: template start and end (the default).
    #[default]
    Template,
    /// `s`: both reads' 5' ends.
    Sequence,
}

/// What duplicates must share besides positions.
#[derive(Debug, Clone, Default)]
pub enum Barcode {
    #[default]
    None,
    /// `--barcode-tag TAG` (a `Z` or `H` field).
    Tag([u8; 2]),
    /// `--barcode-name` (samtools' regex for the 8th colon field) or
    /// `--barcode-rgx REGEX`: capture group 1 of the read name.
    Regex(regex::bytes::Regex),
}

/// samtools' `--barcode-name` pattern: "The UMI sequence is located in the
/// eighth colon-delimited field of the read name" (Illumina).
pub const BARCODE_NAME_REGEX: &str = "[0-9A-Za-z]+:[0-9A-Za-z]+:[0-9A-Za-z]+:[0-9A-Za-z]+:[0-9A-Za-z]+:[0-9A-Za-z]+:[0-9A-Za-z]+:([!-?A-~]+)";

/// samtools markdup's options that change the records or statistics.
#[derive(Debug, Clone)]
pub struct Options {
    /// `-r`.
    pub remove_duplicates: bool,
    /// `-l` (a negative value means 300, as samtools).
    pub max_length: i64,
    /// `-S`.
    pub supplementary: bool,
    /// `-t`: `do:Z` with the original's name.
    pub tag_original: bool,
    /// `-d` (0: no optical marking; negative means 0).
    pub optical_distance: i64,
    /// `-c`.
    pub clear: bool,
    /// `-m`.
    pub mode: Mode,
    /// `--include-fails`.
    pub include_fails: bool,
    /// Duplicate chains checked when `-t` or `-d` is on (`--no-multi-dup`
    /// turns it off).
    pub multi_dup: bool,
    /// `--read-coords` with `--coords-order`; `None`: Illumina colons.
    pub read_coords: Option<CoordRegex>,
    pub barcode: Barcode,
    /// `--use-read-groups`.
    pub read_groups: bool,
    /// `--duplicate-count`.
    pub duplicate_count: bool,
    /// `--move-umi-to-tag` with `--umi-separator` (default `:`): the UMI
    /// the barcode regex finds in the read name goes to `RX:Z` and leaves
    /// the name with one separator. As in samtools 1.24, only the records
    /// written at the end of the input (the last window) are changed
    /// without `-S`; with `-S` every record written is.
    pub move_umi: Option<u8>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            remove_duplicates: false,
            max_length: 300,
            supplementary: false,
            tag_original: false,
            optical_distance: 0,
            clear: false,
            mode: Mode::Template,
            include_fails: false,
            multi_dup: true,
            read_coords: None,
            barcode: Barcode::None,
            read_groups: false,
            duplicate_count: false,
            move_umi: None,
        }
    }
}

/// Why marking stopped (`record`: 1-based in input order).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "record {record} ({name}) is at {tid}:{pos} after {prev_tid}:{prev_pos}: not in coordinate \
         sorted order (samtools markdup needs coordinate-sorted input)"
    )]
    NotSorted {
        record: u64,
        name: String,
        tid: i32,
        pos: i64,
        prev_tid: i32,
        prev_pos: i64,
    },
    #[error(
        "record {record} ({name}) has a mate but no MC tag: run samtools fixmate (-m) on the file first \
         (samtools: \"error, no MC tag. Please run samtools fixmate on file first.\")"
    )]
    NoMateCigar { record: u64, name: String },
    #[error(
        "record {record} ({name}): its MC tag is not a string: use the MC tag samtools fixmate writes"
    )]
    MateCigarType { record: u64, name: String },
    #[error(
        "read {name} has no ms tag (mate score) and must be scored: run samtools fixmate -m on the file \
         first (samtools: \"error, no ms score tag. Please run samtools fixmate on file first.\")"
    )]
    NoMateScore { name: String },
    #[error("read {name}: its 'do' tag is not a string")]
    OriginalTagType { name: String },
    #[error(
        "read {name}: its name does not match --read-coords, which samtools markdup then reports as \
         \"error, duplicate checking failed.\""
    )]
    CoordsNoMatch { name: String },
    #[error("duplicate name {name} not found in the supplementary marking table")]
    DuplicateNameMissing { name: String },
}

/// A hash key of samtools' read maps (`key_data_t` as `key_equal` sees it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    this_ref: i32,
    this_coord: i64,
    other_ref: i32,
    other_coord: i64,
    leftmost: u8,
    orientation: u8,
    barcode: i32,
    read_group: usize,
}

/// One record in the window (samtools' `read_queue_t`); ids are input
/// ordinals from 0, so links to records already written are recognised.
#[derive(Debug)]
struct Entry {
    rec: Vec<u8>,
    tid: i32,
    /// Position the window measures: the unclipped 5' end (1-based) of an
    /// examined read, else the 0-based POS.
    pos: i64,
    /// The keys this record put in the maps (it takes them out on leaving).
    pair_key: Option<Key>,
    single_key: Option<Key>,
    /// Links (read-queue slots, see [`SamtoolsMarker::follow`]).
    duplicate: Option<u32>,
    original: Option<u32>,
    /// This record's read-queue slot.
    node: u32,
    dc: i64,
    dup_checked: bool,
    read_group: usize,
}

/// A duplicate whose other records `-S` marks (samtools' `dup_map_t`).
#[derive(Debug)]
struct DupName {
    original: Option<Vec<u8>>,
    optical: bool,
    read_group: usize,
}

/// Which optical counter a marking adds to.
#[derive(Debug, Clone, Copy)]
enum Counter {
    Pair,
    Single,
}

/// The streaming marker (see the module documentation).
#[derive(Debug)]
pub struct SamtoolsMarker {
    opts: Options,
    rg_ids: Vec<String>,
    rg_map: WordMap<Vec<u8>, usize>,
    read_groups: bool,
    check_chain: bool,
    window: VecDeque<Entry>,
    /// Id of the window's first record.
    base: u64,
    pair_hash: WordMap<Key, u64>,
    single_hash: WordMap<Key, u64>,
    dup_names: WordMap<Vec<u8>, DupName>,
    ready: VecDeque<Vec<u8>>,
    stats: Vec<StatsBlock>,
    prev_tid: i32,
    prev_coord: i64,
    opt_warnings: i64,
    bc_warnings: i64,
    warnings: Vec<String>,
    /// The tile fields (start, length) samtools' reused chain-check array
    /// holds at each slot (see `chain`).
    stale_tiles: Vec<(usize, usize)>,
    /// samtools' read queue (a klist): the empty tail slot the next read
    /// goes in, the free slots (reused last-freed first), the slots made,
    /// and which record holds each slot.
    tail_node: u32,
    free_nodes: Vec<u32>,
    nodes_made: u32,
    node_owner: WordMap<u32, u64>,
}

fn name_of(rec: &[u8]) -> &[u8] {
    RecordRef::with_block_size(rec).read_name()
}

fn flag_of(rec: &[u8]) -> u16 {
    RecordRef::with_block_size(rec).flag()
}

fn text(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// samtools' `has_mate`: paired, mate mapped, and a mate position.
fn has_mate(rec: &[u8]) -> bool {
    let r = RecordRef::with_block_size(rec);
    r.flag() & flags::PAIRED != 0
        && r.flag() & flags::MATE_UNMAPPED == 0
        && !(r.next_ref_id() == -1 && r.next_pos() == -1)
}

/// samtools' `calc_score`: the sum of base qualities of 15 and above
/// (QUAL `*` is 255 per base).
fn calc_score(rec: &[u8]) -> i64 {
    RecordRef::with_block_size(rec)
        .qual()
        .iter()
        .filter(|&&q| q >= MIN_QUALITY)
        .map(|&q| q as i64)
        .sum()
}

/// samtools' `get_mate_score`: the `ms` tag (a non-integer reads 0; a
/// missing one, or the value -1, is samtools' error).
fn mate_score(rec: &[u8]) -> Result<i64, Error> {
    let r = RecordRef::with_block_size(rec);
    let v = r.aux().find(*b"ms").map(|f| f.int().unwrap_or(0));
    match v {
        Some(v) if v != -1 => Ok(v),
        _ => Err(Error::NoMateScore {
            name: text(r.read_name()),
        }),
    }
}

/// Whether the record carries `SA` or `XA`, or its mate is unmapped (the
/// duplicates whose other records `-S` marks).
fn has_supplementary_hint(rec: &[u8]) -> bool {
    let r = RecordRef::with_block_size(rec);
    r.flag() & flags::MATE_UNMAPPED != 0
        || r.aux().find(*b"SA").is_some()
        || r.aux().find(*b"XA").is_some()
}

impl SamtoolsMarker {
    /// A marker for a file whose header lists `read_group_ids` (`@RG` IDs
    /// in header order). With `--use-read-groups` and no (or repeated)
    /// read groups samtools prints an error and goes on without them: so
    /// does this (the message is among [`SamtoolsMarker::take_warnings`]).
    pub fn new(mut opts: Options, read_group_ids: &[&[u8]]) -> SamtoolsMarker {
        if opts.max_length < 0 {
            opts.max_length = 300;
        }
        if opts.optical_distance < 0 {
            opts.optical_distance = 0;
        }
        let mut warnings = Vec::new();
        let mut rg_map = WordMap::default();
        let mut rg_ids = Vec::new();
        let mut read_groups = opts.read_groups;
        if read_groups {
            let mut ok = true;
            if read_group_ids.is_empty() {
                warnings.push("error, no read groups found.".to_string());
                ok = false;
            }
            for (i, id) in read_group_ids.iter().enumerate() {
                if rg_map.insert(id.to_vec(), i + 1).is_some() {
                    warnings.push(format!(
                        "error, duplicate read group ids {}.Read groups will not be used",
                        text(id)
                    ));
                    ok = false;
                    break;
                }
                rg_ids.push(text(id));
            }
            if !ok {
                warnings.push("error, read groups will not be used.".to_string());
                read_groups = false;
                rg_map.clear();
                rg_ids.clear();
            }
        }
        let check_chain = opts.multi_dup && (opts.tag_original || opts.optical_distance != 0);
        SamtoolsMarker {
            stats: vec![StatsBlock::default(); rg_ids.len() + 1],
            opts,
            rg_ids,
            rg_map,
            read_groups,
            check_chain,
            window: VecDeque::new(),
            base: 0,
            pair_hash: WordMap::default(),
            single_hash: WordMap::default(),
            dup_names: WordMap::default(),
            ready: VecDeque::new(),
            prev_tid: 0,
            prev_coord: 0,
            opt_warnings: 0,
            bc_warnings: 0,
            warnings,
            stale_tiles: Vec::new(),
            tail_node: 0,
            free_nodes: Vec::new(),
            nodes_made: 1,
            node_owner: WordMap::default(),
        }
    }

    /// The next finished record (with its `block_size`), in input order.
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Messages samtools prints on standard error (warnings, and the
    /// errors it goes on after), each a line without samtools' prefix
    /// (`samtools markdup: `).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn get(&self, id: u64) -> Option<&Entry> {
        id.checked_sub(self.base)
            .and_then(|i| self.window.get(i as usize))
    }

    fn at(&mut self, id: u64) -> &mut Entry {
        let i = (id - self.base) as usize;
        &mut self.window[i]
    }

    fn rec(&self, id: u64) -> &[u8] {
        &self.get(id).expect("a record in the window").rec
    }

    /// Takes one record (BAM bytes with `block_size`, validated) in input
    /// order.
    pub fn push(&mut self, rec: Vec<u8>) -> Result<(), Error> {
        let id = self.base + self.window.len() as u64;
        let record = id + 1;
        let v = RecordRef::with_block_size(&rec);
        let (tid, pos) = (v.ref_id(), v.pos() as i64);
        if tid >= 0 && (tid < self.prev_tid || (tid == self.prev_tid && pos < self.prev_coord)) {
            return Err(Error::NotSorted {
                record,
                name: text(v.read_name()),
                tid,
                pos: pos + 1,
                prev_tid: self.prev_tid,
                prev_pos: self.prev_coord + 1,
            });
        }
        self.prev_coord = pos;
        self.prev_tid = tid;
        let mut read_group = 0;
        if self.read_groups {
            if let Some(rg) = v.aux().find(*b"RG").and_then(|f| f.text()) {
                read_group = self.rg_map.get(rg).copied().unwrap_or(0);
            }
        }
        // klist's push: the read goes in the tail slot, a new empty tail
        // is taken from the free slots (last freed first) or made.
        let node = self.tail_node;
        self.tail_node = self.free_nodes.pop().unwrap_or_else(|| {
            self.nodes_made += 1;
            self.nodes_made - 1
        });
        self.node_owner.insert(node, id);
        self.window.push_back(Entry {
            rec,
            tid,
            pos,
            pair_key: None,
            single_key: None,
            duplicate: None,
            original: None,
            node,
            dc: 1,
            dup_checked: false,
            read_group,
        });
        self.stats[read_group].read += 1;
        if self.opts.clear {
            let e = self.at(id);
            let f = flag_of(&e.rec);
            if f & flags::DUPLICATE != 0 {
                tags::set_flag(&mut e.rec, f ^ flags::DUPLICATE);
                tags::delete(&mut e.rec, *b"dt");
                tags::delete(&mut e.rec, *b"do");
            }
        }
        let mut exclude = flags::SECONDARY | flags::SUPPLEMENTARY | flags::UNMAPPED;
        if !self.opts.include_fails {
            exclude |= flags::QC_FAIL;
        }
        if flag_of(self.rec(id)) & exclude != 0 {
            self.stats[read_group].excluded += 1;
        } else {
            self.stats[read_group].examined += 1;
            if has_mate(self.rec(id)) {
                self.examine_pair(id, record, read_group)?;
            } else {
                self.examine_single(id, read_group)?;
            }
        }
        self.flush(false)
    }

    /// Every record left in the window goes out (to [`SamtoolsMarker::pop_ready`]).
    pub fn finish(&mut self) -> Result<(), Error> {
        self.flush(true)
    }

    /// Whether the records out of [`SamtoolsMarker::pop_ready`] are only the first
    /// pass's (`-S`): each must then go through [`SamtoolsMarker::second_pass`],
    /// in order, once [`SamtoolsMarker::finish`] has run.
    pub fn needs_second_pass(&self) -> bool {
        self.opts.supplementary
    }

    /// The statistics (after [`SamtoolsMarker::finish`] and any second pass), and
    /// samtools' closing warnings among [`SamtoolsMarker::take_warnings`].
    pub fn stats(&mut self) -> Stats {
        if self.opt_warnings > 0 {
            self.warnings.push(format!(
                "warning, number of failed attempts to get coordinates from read names = {}",
                self.opt_warnings
            ));
        }
        if self.bc_warnings > 0 {
            self.warnings.push(format!(
                "warning, number of failed attempts to get barcodes = {}",
                self.bc_warnings
            ));
        }
        self.opt_warnings = 0;
        self.bc_warnings = 0;
        Stats {
            ungrouped: self.stats[0],
            groups: self
                .rg_ids
                .iter()
                .cloned()
                .zip(self.stats[1..].iter().copied())
                .collect(),
            by_group: self.read_groups,
        }
    }

    /// The last record of the duplicate chain starting at the link
    /// `start` (links to slots no record holds end the walk).
    fn chain_end(&self, start: u32) -> Option<u64> {
        let mut cur = self.follow(Some(start))?;
        let mut steps = 0usize;
        while let Some(next) = self.follow(self.get(cur).and_then(|e| e.duplicate)) {
            if steps > self.window.len() {
                break;
            }
            cur = next;
            steps += 1;
        }
        Some(cur)
    }

    /// The buffer slot (samtools' read-queue node) of the record `id`.
    fn link(&self, id: u64) -> u32 {
        self.get(id).expect("a record in the window").node
    }

    /// The record that now holds the slot a link points at: samtools'
    /// links are pointers to read-queue nodes, which are reused for later
    /// reads once their read is written, so a link can reach a newer
    /// read; `None` for a slot no read holds (samtools would read freed
    /// memory there).
    fn follow(&self, link: Option<u32>) -> Option<u64> {
        link.and_then(|n| self.node_owner.get(&n).copied())
    }

    fn set_duplicate(&mut self, id: u64, target: u64) {
        let l = self.link(target);
        self.at(id).duplicate = Some(l);
    }

    fn set_original(&mut self, id: u64, target: u64) {
        let l = self.link(target);
        self.at(id).original = Some(l);
    }

    fn examine_pair(&mut self, id: u64, record: u64, rg: usize) -> Result<(), Error> {
        let pk = self.pair_key(id, record, rg)?;
        let sk = self.single_key(id, rg);
        self.stats[rg].paired += 1;
        self.at(id).pos = sk.this_coord;
        match self.single_hash.get(&sk).copied() {
            None => {
                self.single_hash.insert(sk, id);
                self.at(id).single_key = Some(sk);
            }
            Some(rep) => {
                if !has_mate(self.rec(rep)) {
                    // A single is always the duplicate of a pair.
                    if self.check_chain {
                        self.set_duplicate(id, rep);
                        self.set_original(rep, id);
                    }
                    self.single_hash.insert(sk, id);
                    self.at(id).dc += 1;
                    self.mark_duplicate(id, rep, rg, Counter::Single)?;
                    self.stats[rg].duplicate_single += 1;
                }
            }
        }
        match self.pair_hash.get(&pk).copied() {
            None => {
                self.pair_hash.insert(pk, id);
                self.at(id).pair_key = Some(pk);
            }
            Some(rep) => {
                let qc = |rec: &[u8]| flag_of(rec) & flags::QC_FAIL != 0;
                let (old, new) = if qc(self.rec(rep)) != qc(self.rec(id)) {
                    if qc(self.rec(rep)) {
                        (0, 1)
                    } else {
                        (1, 0)
                    }
                } else {
                    let old = calc_score(self.rec(rep)) + mate_score(self.rec(rep))?;
                    let new = calc_score(self.rec(id)) + mate_score(self.rec(id))?;
                    (old, new)
                };
                let tie = if new == old {
                    if name_of(self.rec(id)) < name_of(self.rec(rep)) {
                        1
                    } else {
                        -1
                    }
                } else {
                    0
                };
                let (ori, dup) = if new + tie > old {
                    let rep_dc = self.at(rep).dc;
                    self.at(id).dc += rep_dc;
                    if self.check_chain {
                        match self.at(id).duplicate {
                            Some(d) => {
                                if let Some(end) = self.chain_end(d) {
                                    self.set_duplicate(end, rep);
                                }
                            }
                            None => self.set_duplicate(id, rep),
                        }
                        self.set_original(rep, id);
                    }
                    self.pair_hash.insert(pk, id);
                    (id, rep)
                } else {
                    if self.check_chain {
                        if let Some(rd) = self.at(rep).duplicate {
                            if let Some(idd) = self.at(id).duplicate {
                                if let Some(end) = self.chain_end(rd) {
                                    self.at(end).duplicate = Some(idd);
                                }
                            }
                            self.at(id).duplicate = Some(rd);
                        }
                        self.set_duplicate(rep, id);
                        self.set_original(id, rep);
                    }
                    self.at(rep).dc += 1;
                    (rep, id)
                };
                self.mark_duplicate(ori, dup, rg, Counter::Pair)?;
                self.stats[rg].duplicate_pair += 1;
            }
        }
        Ok(())
    }

    fn examine_single(&mut self, id: u64, rg: usize) -> Result<(), Error> {
        let sk = self.single_key(id, rg);
        self.stats[rg].single += 1;
        self.at(id).pos = sk.this_coord;
        let Some(rep) = self.single_hash.get(&sk).copied() else {
            self.single_hash.insert(sk, id);
            self.at(id).single_key = Some(sk);
            return Ok(());
        };
        if has_mate(self.rec(rep)) {
            if self.check_chain {
                if let Some(rd) = self.at(rep).duplicate {
                    self.at(id).duplicate = Some(rd);
                }
                self.set_duplicate(rep, id);
                self.set_original(id, rep);
            }
            self.at(rep).dc += 1;
            self.mark_duplicate(rep, id, rg, Counter::Single)?;
        } else {
            let old = calc_score(self.rec(rep));
            let new = calc_score(self.rec(id));
            let (ori, dup) = if new > old {
                let rep_dc = self.at(rep).dc;
                self.at(id).dc += rep_dc;
                if self.check_chain {
                    self.set_duplicate(id, rep);
                    self.set_original(rep, id);
                }
                self.single_hash.insert(sk, id);
                (id, rep)
            } else {
                if self.check_chain {
                    if let Some(rd) = self.at(rep).duplicate {
                        self.at(id).duplicate = Some(rd);
                    }
                    self.set_duplicate(rep, id);
                    self.set_original(id, rep);
                }
                self.at(rep).dc += 1;
                (rep, id)
            };
            self.mark_duplicate(ori, dup, rg, Counter::Single)?;
        }
        self.stats[rg].duplicate_single += 1;
        Ok(())
    }

    /// Coordinates of a read name, counting and printing samtools'
    /// read-name warnings.
    fn name_coords(&mut self, name: &[u8]) -> Result<NameCoords, NameFailure> {
        let got = match &self.opts.read_coords {
            None => coords::colon_coords(name),
            Some(rx) => coords::regex_coords(rx, name),
        };
        if let Err(NameFailure::Warn(w)) = &got {
            self.opt_warnings += 1;
            if self.opt_warnings <= WARNING_MAX {
                self.warnings.push(w.clone());
            }
        }
        got
    }

    /// Whether two names' tile parts are equal and x and y within the
    /// optical distance (an inclusive box).
    fn close(&self, a: &[u8], ca: &NameCoords, b: &[u8], cb: &NameCoords) -> bool {
        let ta = &a[ca.t_beg..ca.t_end];
        let tb = &b[cb.t_beg..cb.t_end];
        let d = self.opts.optical_distance;
        ta == tb && (ca.x - cb.x).abs() <= d && (ca.y - cb.y).abs() <= d
    }

    /// samtools' `mark_duplicates(ori, dup)`.
    fn mark_duplicate(
        &mut self,
        ori: u64,
        dup: u64,
        rg: usize,
        counter: Counter,
    ) -> Result<(), Error> {
        let before = self.opt_warnings;
        let ori_name = name_of(self.rec(ori)).to_vec();
        let mut rec = std::mem::take(&mut self.at(dup).rec);
        let f = flag_of(&rec);
        tags::set_flag(&mut rec, f | flags::DUPLICATE);
        if self.opts.tag_original {
            tags::update_str(&mut rec, *b"do", &ori_name);
        }
        let mut optical = false;
        if self.opts.optical_distance != 0 {
            let dup_name = name_of(&rec).to_vec();
            if let Ok(co) = self.name_coords(&ori_name) {
                if let Ok(cd) = self.name_coords(&dup_name) {
                    optical = self.close(&ori_name, &co, &dup_name, &cd);
                }
            }
            if optical {
                tags::update_str(&mut rec, *b"dt", b"SQ");
                match counter {
                    Counter::Pair => self.stats[rg].duplicate_pair_optical += 1,
                    Counter::Single => self.stats[rg].duplicate_single_optical += 1,
                }
            } else {
                tags::update_str(&mut rec, *b"dt", b"LB");
            }
        }
        if self.opt_warnings == WARNING_MAX && before != self.opt_warnings {
            self.warnings.push(format!(
                "warning, {} decipher read name warnings.  New warnings will not be reported.",
                self.opt_warnings
            ));
        }
        if self.opts.supplementary && has_supplementary_hint(&rec) {
            let original = self.opts.tag_original.then(|| ori_name.clone());
            self.dup_names
                .entry(name_of(&rec).to_vec())
                .or_insert(DupName {
                    original,
                    optical,
                    read_group: rg,
                });
        }
        self.at(dup).rec = rec;
        Ok(())
    }

    /// samtools' `optical_retag`: a duplicate found optical later.
    fn optical_retag(&mut self, id: u64, paired: bool, stats_group: usize) -> Result<(), Error> {
        let e = self.at(id);
        tags::update_str(&mut e.rec, *b"dt", b"SQ");
        let hint = has_supplementary_hint(&e.rec);
        let name = name_of(&e.rec).to_vec();
        if paired {
            self.stats[stats_group].duplicate_pair_optical += 1;
        } else {
            self.stats[stats_group].duplicate_single_optical += 1;
        }
        if self.opts.supplementary && hint {
            match self.dup_names.get_mut(&name) {
                Some(d) => d.optical = true,
                None => return Err(Error::DuplicateNameMissing { name: text(&name) }),
            }
        }
        Ok(())
    }

    /// Writes out the records whose window has passed (all with `all`).
    fn flush(&mut self, all: bool) -> Result<(), Error> {
        while let Some(front) = self.window.front() {
            if !all
                && front.pos + self.opts.max_length > self.prev_coord
                && front.tid == self.prev_tid
                && (self.prev_tid != -1 || self.prev_coord != -1)
            {
                break;
            }
            let id = self.base;
            if self.check_chain
                && !front.dup_checked
                && (front.original.is_some() || front.duplicate.is_some())
            {
                self.find_duplicate_chains(id)?;
            }
            let mut e = self.window.pop_front().expect("the front record");
            self.base += 1;
            self.node_owner.remove(&e.node);
            self.free_nodes.push(e.node);
            let dup = flag_of(&e.rec) & flags::DUPLICATE != 0;
            if !self.opts.remove_duplicates || !dup {
                if self.opts.duplicate_count && !dup {
                    tags::update_int(&mut e.rec, *b"dc", e.dc);
                }
                if all && !self.opts.supplementary {
                    self.move_umi(&mut e.rec);
                }
                self.ready.push_back(e.rec);
                self.stats[e.read_group].written += 1;
            }
            if !all {
                if let Some(k) = e.pair_key {
                    self.pair_hash.remove(&k);
                }
                if let Some(k) = e.single_key {
                    self.single_hash.remove(&k);
                }
            }
        }
        Ok(())
    }

    /// `-S`'s second pass over one first-pass record (in order, after
    /// [`SamtoolsMarker::finish`]): supplementary, secondary and unmapped records
    /// of the duplicates noted get 0x400 and their `do`/`dt`, and lose
    /// `dc`; `None` when `-r` removes it.
    pub fn second_pass(&mut self, mut rec: Vec<u8>) -> Option<Vec<u8>> {
        {
            let f = flag_of(&rec);
            if f & (flags::SUPPLEMENTARY | flags::UNMAPPED | flags::SECONDARY) != 0 {
                if let Some(d) = self.dup_names.get(name_of(&rec)) {
                    tags::set_flag(&mut rec, f | flags::DUPLICATE);
                    self.stats[d.read_group].duplicate_non_primary += 1;
                    if self.opts.tag_original {
                        if let Some(o) = &d.original {
                            tags::update_str(&mut rec, *b"do", o);
                        }
                    }
                    if self.opts.optical_distance != 0 {
                        if d.optical {
                            tags::update_str(&mut rec, *b"dt", b"SQ");
                            self.stats[d.read_group].duplicate_non_primary_optical += 1;
                        } else {
                            tags::update_str(&mut rec, *b"dt", b"LB");
                        }
                    }
                }
            }
        }
        let dup = flag_of(&rec) & flags::DUPLICATE != 0;
        if self.opts.remove_duplicates && dup {
            return None;
        }
        if self.opts.duplicate_count && dup {
            tags::delete(&mut rec, *b"dc");
        }
        self.move_umi(&mut rec);
        Some(rec)
    }

    /// samtools' `move_umi_to_tag`: group 1 of the barcode regex in the
    /// read name goes to `RX:Z`, and leaves the name with the separator
    /// before it (else the one after it).
    fn move_umi(&self, rec: &mut Vec<u8>) {
        let (Some(sep), Barcode::Regex(rx)) = (self.opts.move_umi, &self.opts.barcode) else {
            return;
        };
        let name = name_of(rec).to_vec();
        let Some(m) = rx.captures(&name).and_then(|c| c.get(1)) else {
            return;
        };
        let (mut beg, mut end) = (m.start(), m.end());
        tags::update_str(rec, *b"RX", &name[beg..end]);
        if beg > 0 && name[beg - 1] == sep {
            beg -= 1;
        } else if end < name.len() && name[end] == sep {
            end += 1;
        }
        if end > beg {
            let mut new_name = name[..beg].to_vec();
            new_name.extend_from_slice(&name[end..]);
            tags::set_read_name(rec, &new_name);
        }
    }
}
