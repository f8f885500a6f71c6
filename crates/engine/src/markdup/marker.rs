//! `alnsort sort --markdup`: duplicate marking in the same pass as the sort,
//! with Picard MarkDuplicates 3.4.0's answer (`alnsort_markdup` decides).
//!
//! How it rides along the sort without the sort engine knowing:
//! * read stage (pool jobs, [`BatchEnds::add_fields`]): each record's
//!   read-end fields are taken out (its name's flow-cell location parsed,
//!   once per template; whether its name and `RG` value are the previous
//!   record's, so that the serial push compares neither; in name-grouped
//!   input, the templates that lie whole in the batch paired, their ends
//!   and keys built: [`alnsort_markdup::batch`]), and the record
//!   enters the sorter with its input
//!   ordinal appended as 8 little-endian bytes ([`ORDINAL_BYTES`],
//!   [`ordinal_suffix`]) after its BAM bytes (the sorter sees opaque
//!   slices; `block_size` is untouched);
//! * after each batch, in input order ([`Marker::push`]), the ends go to
//!   the core (a whole template's appended with its library, read group
//!   and template number put in; the templates cut by the batch's ends
//!   record by record), and the input's grouping is checked (name-grouped input: no
//!   scattered template; coordinate-sorted input: records in order);
//! * once the input is read, the core decides ([`Marker::finish`]): a
//!   bitset over input ordinals, and the metrics (the read ends are sorted
//!   on the pool, which has little else to do then);
//! * write stage: the ordinal is cut off and 0x400 set or cleared (every
//!   existing 0x400 is cleared, as Picard does). When records keep their
//!   length (no `DT` tag, nothing removed), whole merged chunks go to the
//!   writer as [`MarkedChunk`]s and the compression jobs set the flag as
//!   they copy the records (the writer thread touches no record);
//!   otherwise the writer thread rewrites each record
//!   ([`Decisions::apply`]: `DT` tags, `--remove-duplicates`).
//!
//! Which Picard semantics: input whose `@HD` says `SO:coordinate` gets
//! Picard's coordinate-input answer (`ASSUME_SORT_ORDER=coordinate`: only
//! primary records marked), anything else is taken as name-grouped
//! (`ASSUME_SORT_ORDER=queryname`: every record of a duplicate template).
//!
//! Memory: the core's state (read ends, record slots, waiting mates, the
//! decision's bitsets) is kept within a budget: with `--max-memory`, a
//! quarter of the sorter's share, taken from the sorter; with `-m` alone
//! (which, as in samtools, bounds the record buffer), `-m` times the
//! threads again, beside the sorter's:
//! read ends beyond it are sorted into run files in the sort's temporary
//! directory and merged back, one duplicate set at a time, when the input
//! is read; record slots go to a file there too (`MarkDuplicates::set_spill`).
//! Two parts are not spilled: mates of coordinate-sorted input waiting for
//! their other half (they may take all of the limit but 4096 ends' room),
//! and the names of incomplete templates the grouping check remembers (an
//! eighth). Beyond that they stop the run, naming `--max-memory`; with
//! `-m` alone, waiting mates are kept beyond it instead (the ends still
//! spill), as `-m` bounds the record buffer only. The
//! appended ordinals are record bytes the sorter counts itself.

use crate::error::{bail, Context, Error, Result};
use crate::io::input::EndsSink;
use crate::markdup::decisions::Decisions;
use crate::options::markdup::MarkdupConfig;
use alnsort_bam::header::Header;
use alnsort_markdup::decision::TaggingPolicy;
use alnsort_markdup::extract::EndsSpec;
use alnsort_markdup::extract::{BadBarcode, BatchEnds};
use alnsort_markdup::grouping::GroupCheck;
use alnsort_markdup::{InputOrder, MarkDuplicates, MarkdupError, ReadGroups, ReadInfo, RgInfo};
use std::sync::Arc;

/// The `SO:` value of the header's `@HD` line.
fn header_sort_order(header: &Header) -> Option<&[u8]> {
    let hd = header.lines().iter().find(|l| l.starts_with(b"@HD"))?;
    hd.split(|&b| b == b'\t')
        .skip(1)
        .find(|f| f.starts_with(b"SO:"))
        .map(|f| &f[3..])
}

/// The header's `@RG` lines as `(ID, LB)`.
pub(crate) fn header_read_groups(header: &Header) -> ReadGroups {
    let tag = |line: &[u8], key: &[u8; 2]| -> Option<Vec<u8>> {
        line.split(|&b| b == b'\t')
            .skip(1)
            .find(|f| f.len() >= 3 && &f[..2] == key && f[2] == b':')
            .map(|f| f[3..].to_vec())
    };
    ReadGroups::new(
        header
            .lines()
            .iter()
            .filter(|l| l.starts_with(b"@RG\t"))
            .filter_map(|l| {
                let id = tag(l, b"ID")?;
                let lb = tag(l, b"LB").map(|v| String::from_utf8_lossy(&v).into_owned());
                Some((id, lb))
            }),
    )
}

/// The refusal of name-grouped input whose template is scattered: in
/// `file`, record `record` (1-based) of read `name` belongs to a template
/// seen earlier (`earlier`: where, or empty). One node's grouping check
/// and the distributed join's ([`crate::stages::markdup`]) give it.
pub(crate) fn scattered_message(file: &str, record: u64, name: &[u8], earlier: &str) -> String {
    format!(
        "{file}: --markdup needs the records of each template together (grouped by name, as aligners \
         write them) or a coordinate-sorted input whose @HD says SO:coordinate, but record {record} \
         (read {}) belongs to a template seen earlier in the file{earlier}; group the input first with \
         'samtools collate' or 'alnsort sort -n', or, if it is coordinate-sorted, give it an \
         @HD line with SO:coordinate",
        String::from_utf8_lossy(name)
    )
}

/// Follows the input in order and collects the read ends.
pub struct Marker {
    md: MarkDuplicates,
    /// One split of the input for the distributed marking
    /// ([`Marker::for_split`]): its ends go here, not to `md`, which only
    /// resolves read groups.
    split: Option<alnsort_markdup::dist::SplitCollector>,
    order: InputOrder,
    /// The grouping check of name-grouped input: one, or one per input
    /// when several are merged ([`Marker::check_inputs_apart`]).
    group: Vec<GroupCheck>,
    /// Several merged inputs: each one's path and records seen so far.
    inputs: Vec<(String, u64)>,
    /// Coordinate input: the last record's (reference as unsigned, so
    /// unplaced sorts last; position; ordinal).
    last: Option<(u32, i32)>,
    records: u64,
    file: String,
    /// Bytes the grouping check may hold, and the `--max-memory` total
    /// named in the message (`None` with `-m` alone).
    group_budget: (usize, Option<u64>),
    last_rg: Option<(Vec<u8>, RgInfo)>,
    no_rg: Option<RgInfo>,
    /// A split of one of several inputs: its records' `RG` IDs in the
    /// merged header's terms ([`Marker::for_split_of_several`]).
    rg_translation: Option<alnsort_bam::header_merge::Translation>,
    remove: bool,
    remove_sequencing: bool,
    tagging: TaggingPolicy,
    spec: EndsSpec,
    /// Whether a record pushed so far carries a `DT` tag.
    input_dt: bool,
}

impl Marker {
    /// `budget`: bytes the state may use, and the `--max-memory` total when
    /// that is what it comes from; `spill_dir`: where the read ends beyond
    /// the budget go (the sort's temporary directory). Without a spill
    /// directory the state is not bounded.
    pub fn new(
        header: &Header,
        cfg: &MarkdupConfig,
        file: &str,
        budget: (usize, Option<u64>),
        spill_dir: Option<&std::path::Path>,
    ) -> Marker {
        let order = if header_sort_order(header) == Some(b"coordinate") {
            InputOrder::Coordinate
        } else {
            InputOrder::Queryname
        };
        Marker::with_order(header, cfg, file, budget, spill_dir, order)
    }

    /// [`Marker::new`] with the semantics given, not read from `header`'s
    /// `@HD` (several inputs: `crate::markdup::inputs` decides from theirs).
    pub fn with_order(
        header: &Header,
        cfg: &MarkdupConfig,
        file: &str,
        budget: (usize, Option<u64>),
        spill_dir: Option<&std::path::Path>,
        order: InputOrder,
    ) -> Marker {
        let mut md = MarkDuplicates::with_order(header_read_groups(header), order);
        md.set_pixel_distance(cfg.optical_distance);
        md.set_name_parser(cfg.name_parser.clone());
        md.set_track_optical(
            cfg.remove_sequencing_duplicates || cfg.tagging != TaggingPolicy::None,
        );
        // An eighth for the grouping check's names, the rest for the core.
        let group_share = budget.0 / 8;
        if let Some(dir) = spill_dir {
            // Only --max-memory is a hard limit for waiting mates.
            md.set_spill(dir, budget.0 - group_share, budget.1.is_some());
        }
        Marker {
            md,
            split: None,
            order,
            group: if order == InputOrder::Queryname {
                vec![GroupCheck::new()]
            } else {
                Vec::new()
            },
            inputs: Vec::new(),
            last: None,
            records: 0,
            file: file.to_string(),
            group_budget: (group_share, budget.1),
            last_rg: None,
            no_rg: None,
            rg_translation: None,
            remove: cfg.remove_duplicates,
            remove_sequencing: cfg.remove_sequencing_duplicates,
            tagging: cfg.tagging,
            spec: EndsSpec {
                scoring: cfg.scoring,
                barcode_tags: cfg.barcode_tags,
                name_parser: Arc::new(cfg.name_parser.clone()),
                merge_order: false,
                pair_templates: false,
            },
            input_dt: false,
        }
    }

    /// Several inputs merged in Picard's order ([`Marker::push_from`]
    /// names each record's input): name-grouped inputs are checked one by
    /// one, since the merge may put a read name of one input apart from
    /// the same name in another (a template whose mates were written to
    /// two inputs, or the same reads in both), and Picard pairs the mates
    /// by read group and name wherever they are (as the core does).
    /// In coordinate-sorted inputs, a template (read group and name) in two
    /// of them stops the marking where Picard stops
    /// ([`MarkDuplicates::set_waiting_twice_fails`]).
    pub fn check_inputs_apart(&mut self, paths: &[String]) {
        self.md.set_waiting_twice_fails(true);
        self.inputs = paths.iter().map(|p| (p.clone(), 0)).collect();
        if self.order == InputOrder::Queryname {
            self.group = paths.iter().map(|_| GroupCheck::new()).collect();
        }
    }

    /// The read group `id` of the header is one with `same_as`
    /// ([`alnsort_markdup::ReadGroups::alias`]).
    pub fn alias_read_group(&mut self, id: &[u8], same_as: &[u8]) {
        self.md.read_groups_mut().alias(id, same_as);
    }

    /// What the read jobs take out of each record: how they score it and
    /// which barcode tags they read.
    pub fn ends_spec(&self) -> EndsSpec {
        EndsSpec {
            pair_templates: self.takes_templates(),
            ..self.spec.clone()
        }
    }

    /// Whether whole templates are pushed at once
    /// ([`alnsort_markdup::batch::BatchTemplates`]): the one marker of one
    /// name-grouped input (several inputs' records are checked input by
    /// input, a split's collector pairs its own).
    fn takes_templates(&self) -> bool {
        self.order == InputOrder::Queryname && self.split.is_none() && self.inputs.is_empty()
    }

    /// The pool the decision sorts the read ends on, in parallel (once the
    /// input is read, the pool has little else to do).
    pub fn set_pool(&mut self, pool: Arc<rayon::ThreadPool>) {
        self.md.set_pool(pool);
    }

    /// Which of Picard's semantics the input gets.
    pub fn input_order(&self) -> InputOrder {
        self.order
    }

    fn resolve_rg(&mut self, rg: Option<&[u8]>) -> RgInfo {
        match rg {
            None => *self
                .no_rg
                .get_or_insert_with(|| self.md.read_groups_mut().resolve(None)),
            Some(id) => {
                if let Some((last, info)) = &self.last_rg {
                    if last.as_slice() == id {
                        return *info;
                    }
                }
                let info = match &self.rg_translation {
                    None => self.md.read_groups_mut().resolve(Some(id)),
                    // As the merge of several inputs hands the record on:
                    // renamed, or without RG when its header lacks it.
                    Some(t) => match t.known_read_group(id).map(<[u8]>::to_vec) {
                        Some(merged) => self.md.read_groups_mut().resolve(Some(&merged)),
                        None => self.resolve_rg(None),
                    },
                };
                self.last_rg = Some((id.to_vec(), info));
                info
            }
        }
    }

    /// The next batch's ends, in input order.
    pub fn push(&mut self, ends: &BatchEnds) -> Result<()> {
        self.push_from(ends, &[])
    }

    /// [`Marker::push`] of merged inputs ([`Marker::check_inputs_apart`]):
    /// `from[i]` is the input of the batch's record `i`.
    pub fn push_from(&mut self, ends: &BatchEnds, from: &[u16]) -> Result<()> {
        if !self.inputs.is_empty() && from.len() != ends.recs.len() {
            bail!(
                Internal,
                "{} records pushed from merged inputs with {} input numbers",
                ends.recs.len(),
                from.len()
            );
        }
        self.input_dt |= ends.any_dt;
        let mut rg_before: Option<RgInfo> = None;
        // The batch's whole templates, paired by its read job.
        let wholes = if self.takes_templates() {
            ends.templates.len()
        } else {
            0
        };
        let mut t = 0;
        let mut i = 0;
        while let Some(e) = ends.recs.get(i) {
            let name = &ends.bytes[e.name.0 as usize..e.name.1 as usize];
            if t < wholes && ends.templates.span(t).0 as usize == i {
                t += 1;
                if let Some(records) = self.push_whole(ends, t - 1, &mut rg_before)? {
                    i += records;
                    continue;
                }
            }
            // The record's position in the batch.
            let at = i;
            i += 1;
            let record = self.records;
            self.records += 1;
            // The input the record comes from (the one input, or the merged
            // input it came out of) and its record number there.
            let k = match from.get(at) {
                Some(&k) => {
                    self.inputs[k as usize].1 += 1;
                    Some(k as usize)
                }
                None => None,
            };
            // With several inputs the previous record may be another's.
            let same_name = e.same_name.filter(|_| from.is_empty());
            self.check_order(k, e, name, same_name, record)?;
            if let Some(bad) = e.bad_barcode {
                let what = match bad {
                    BadBarcode::NotString(t, ty) => format!(
                        "its {}{} tag has type '{}', not a string (Z): Picard reads barcode tags as strings",
                        t[0] as char, t[1] as char, ty as char
                    ),
                    BadBarcode::UmiCharacters(t) => format!(
                        "its UMI ({}{} tag) has characters other than ATCGNatcgn- (Picard refuses it)",
                        t[0] as char, t[1] as char
                    ),
                };
                return Err(Error::Refused(format!(
                    "{}: duplicate marking at record {} (read {}): {what}",
                    self.file,
                    record + 1,
                    String::from_utf8_lossy(name)
                )));
            }
            // The previous record of the batch was pushed just before.
            let rg = match rg_before {
                Some(info) if e.same_rg => info,
                _ => self.resolve_rg(e.rg.map(|(a, b)| &ends.bytes[a as usize..b as usize])),
            };
            rg_before = Some(rg);
            let info = ReadInfo {
                name,
                flag: e.flag,
                ref_id: e.ref_id,
                mate_ref_id: e.mate_ref_id,
                five_prime: e.five_prime,
                score: e.score,
                rg,
                barcodes: e.barcodes,
            };
            let pushed = match (&mut self.split, ends.merge.get(at)) {
                (Some(c), Some(&(mapq, mate_pos, tlen))) => {
                    let key = alnsort_markdup::dist::merge_order::MergeKey {
                        ref_id: e.ref_id,
                        pos: e.pos,
                        flag: e.flag,
                        mapq,
                        mate_ref: e.mate_ref_id,
                        mate_pos,
                        tlen,
                        name,
                    };
                    c.push_keyed(&info, Some(e.loc), &key)
                }
                (Some(c), None) => c.push_parsed(&info, e.loc),
                (None, _) => self.md.push_known(&info, e.loc, e.same_name),
            };
            if let Err(err) = pushed {
                return Err(self.marking_error(err, record, name));
            }
        }
        // The pages the next batches' ends will take, made resident on the
        // pool.
        self.md.prefault();
        self.check_group_memory()
    }

    /// The order the input claims, at record `record` (0-based), from
    /// merged input `k` (`None`: the one input): grouped by name, or
    /// coordinate-sorted.
    #[inline]
    fn check_order(
        &mut self,
        k: Option<usize>,
        e: &alnsort_markdup::extract::Extracted,
        name: &[u8],
        same_name: Option<bool>,
        record: u64,
    ) -> Result<()> {
        if let Some(g) = self.group.get_mut(k.unwrap_or(0)) {
            if let Err(s) = g.push_known(name, e.flag, same_name) {
                let file = match k {
                    Some(k) => self.inputs[k].0.as_str(),
                    None => self.file.as_str(),
                };
                return Err(Error::Refused(scattered_message(
                    file,
                    s.record + 1,
                    &s.name,
                    "",
                )));
            }
            return Ok(());
        }
        let at = (e.ref_id as u32, e.pos);
        if let Some(last) = self.last {
            if at < last {
                return Err(Error::Refused(format!("{}: the header says SO:coordinate, but record {} (read {}, reference {} position {}) \
                     comes after a record at reference {} position {}; --markdup reads such input with \
                     Picard's coordinate-sorted semantics and needs it in order: sort it first \
                     (alnsort sort), or group it by name ('samtools collate', 'alnsort sort -n') and \
                     give it an @HD line without SO:coordinate",
                    self.file,
                    record + 1,
                    String::from_utf8_lossy(name),
                    e.ref_id,
                    e.pos + 1,
                    last.0 as i32,
                    last.1 + 1)));
            }
        }
        self.last = Some(at);
        Ok(())
    }

    /// Grouped input: the names of templates without both mates within the
    /// check's share of the budget.
    fn check_group_memory(&self) -> Result<()> {
        if !self.group.is_empty() {
            let (limit, total) = self.group_budget;
            let used: usize = self.group.iter().map(GroupCheck::memory_bytes).sum();
            if used > limit {
                let what = match total {
                    Some(total) => {
                        format!("--max-memory {}", crate::options::memsize::human(total))
                    }
                    None => "-m".to_string(),
                };
                return Err(Error::Refused(format!("{}: duplicate marking needs more memory than {what} leaves it: after {} records the names of \
                     templates without both mates (kept to check that the input is grouped by name; not spilled \
                     to disk) take {} of the {} they may use: raise {what}",
                    self.file,
                    self.records,
                    crate::options::memsize::human(used as u64),
                    crate::options::memsize::human(limit as u64))));
            }
        }
        Ok(())
    }

    /// The failure of the marking at record `record` (0-based), read `name`.
    fn marking_error(&self, err: MarkdupError, record: u64, name: &[u8]) -> Error {
        // Only the limit's errors are about memory.
        let within = match (&err, self.group_budget.1) {
            (MarkdupError::WaitingTwice { .. }, _) => String::new(),
            (_, Some(total)) => format!(
                ", within the part of --max-memory {} it may use",
                crate::options::memsize::human(total)
            ),
            (_, None) => ", within the part of -m it may use".to_string(),
        };
        Error::context(
            format!(
                "{}: duplicate marking at record {} (read {}){within}",
                self.file,
                record + 1,
                String::from_utf8_lossy(name)
            ),
            err,
        )
    }

    /// Pushes whole template `t` of `ends` (name-grouped input, one input:
    /// [`Marker::takes_templates`]) as [`Marker::push_from`] would push its
    /// records one by one, with the read group resolved once (its records
    /// share their `RG` value); returns its number of records, or `None`
    /// when the marker's state does not take it whole
    /// ([`MarkDuplicates::takes_template`]: the caller pushes its records).
    fn push_whole(
        &mut self,
        ends: &BatchEnds,
        t: usize,
        rg_before: &mut Option<RgInfo>,
    ) -> Result<Option<usize>> {
        let (start, records) = ends.templates.span(t);
        let e = &ends.recs[start as usize];
        let name = &ends.bytes[e.name.0 as usize..e.name.1 as usize];
        // As the first record's push resolves it (the others share it).
        let rg = match *rg_before {
            Some(info) if e.same_rg => info,
            _ => self.resolve_rg(e.rg.map(|(a, b)| &ends.bytes[a as usize..b as usize])),
        };
        *rg_before = Some(rg);
        if !self.md.takes_template(&ends.templates, t, name, rg) {
            return Ok(None);
        }
        let record = self.records;
        self.records += records as u64;
        if let Err(s) = self.group[0].push_template(name, records as u64) {
            return Err(Error::Refused(scattered_message(
                &self.file,
                s.record + 1,
                &s.name,
                "",
            )));
        }
        if let Err(te) = self.md.push_template(&ends.templates, t, name, rg) {
            return Err(self.marking_error(te.error, record + te.record as u64, name));
        }
        Ok(Some(records as usize))
    }

    /// A marker for split `split` of the input (the distributed marking,
    /// [`alnsort_markdup::dist`]): the records' checks are those of one
    /// node (within the split), their ends are collected for the join and
    /// the decision tasks, cut into `end_buckets` and mates for the join
    /// into `name_buckets` as they come ([`Marker::finish_split`]).
    pub fn for_split(
        header: &Header,
        cfg: &MarkdupConfig,
        file: &str,
        budget: (usize, Option<u64>),
        split: u32,
        (end_buckets, name_buckets): (usize, usize),
    ) -> Marker {
        Marker::new(header, cfg, file, budget, None).collecting(
            cfg,
            split,
            (end_buckets, name_buckets),
        )
    }

    /// This marker collecting split `split`'s share cut into (end, name)
    /// buckets ([`Marker::for_split`], [`Marker::for_split_of_several`]).
    fn collecting(
        mut self,
        cfg: &MarkdupConfig,
        split: u32,
        (end_buckets, name_buckets): (usize, usize),
    ) -> Marker {
        self.split = Some(alnsort_markdup::dist::SplitCollector::new(
            self.order,
            cfg.name_parser.clone(),
            split,
            end_buckets,
            name_buckets,
        ));
        self
    }

    /// [`Marker::for_split`] of a split of input `input` of `several`
    /// (split ordinals count the splits of every input, in input order):
    /// the records' read groups and libraries are the merged header's, as
    /// the one-node marker of the inputs together resolves them
    /// ([`crate::markdup::inputs::decide`]).
    pub fn for_split_of_several(
        several: &alnsort_markdup::several::SeveralInputs,
        input: usize,
        cfg: &MarkdupConfig,
        file: &str,
        budget: (usize, Option<u64>),
        split: u32,
        (end_buckets, name_buckets): (usize, usize),
    ) -> Marker {
        let mut m = Marker::with_order(&several.header, cfg, file, budget, None, several.order)
            .collecting(cfg, split, (end_buckets, name_buckets));
        if several.keeps_merge_order() {
            m.spec.merge_order = true;
            m.split = m.split.map(|c| c.keeping_merge_order(input as u32));
        }
        for (id, same_as) in &several.aliases {
            m.alias_read_group(id, same_as);
        }
        m.rg_translation = several.translations.get(input).cloned();
        m
    }

    /// The split's share ([`Marker::for_split`]).
    pub fn finish_split(self) -> Result<alnsort_markdup::dist::SplitShare> {
        match self.split {
            Some(c) => Ok(c.finish()),
            None => Err(Error::Internal(
                "finish_split on a marker of the whole input".to_string(),
            )),
        }
    }

    /// The duplicate sets of one bucket of the distributed marking
    /// ([`alnsort_markdup::MarkDuplicates::decide_ends`]) with this
    /// marker's optical settings.
    pub fn decide_ends(
        &mut self,
        blocks: &[&[u8]],
        fixups: &alnsort_markdup::dist::Fixups,
    ) -> Result<alnsort_markdup::dist::SetsDecided> {
        Ok(self.md.decide_ends(blocks, fixups)?)
    }

    /// One block of a bucket's ends
    /// ([`alnsort_markdup::MarkDuplicates::add_end_block`]), spilled beyond
    /// the marker's limit.
    pub fn add_end_block(
        &mut self,
        block: &[u8],
        fixups: &alnsort_markdup::dist::Fixups,
    ) -> Result<()> {
        Ok(self.md.add_end_block(block, fixups)?)
    }

    /// The duplicate sets of the ends added
    /// ([`alnsort_markdup::MarkDuplicates::decide_bucket`]).
    pub fn decide_bucket(&mut self) -> Result<alnsort_markdup::dist::SetsDecided> {
        Ok(self.md.decide_bucket()?)
    }

    /// What the marker spilled so far.
    pub fn spill_stats(&self) -> alnsort_markdup::SpillStats {
        self.md.spill_stats()
    }

    /// Bytes held by the state.
    pub fn memory_bytes(&self) -> usize {
        self.md.memory_bytes()
            + self
                .group
                .iter()
                .map(GroupCheck::memory_bytes)
                .sum::<usize>()
    }

    /// Decides, once every record has been pushed.
    pub fn finish(self) -> Result<Decisions> {
        let file = self.file;
        let outcome = self
            .md
            .finish()
            .map_err(Error::from)
            .with_context(|| format!("{file}: duplicate marking"))?;
        let mut d = Decisions::new(
            outcome.duplicate,
            outcome.optical.unwrap_or_default(),
            outcome.spill,
            outcome.metrics,
            (self.remove, self.remove_sequencing, self.tagging),
        );
        d.input_dt = self.input_dt;
        Ok(d)
    }
}

impl EndsSink for Marker {
    fn ends_spec(&self) -> EndsSpec {
        Marker::ends_spec(self)
    }
    fn push(&mut self, ends: &BatchEnds) -> Result<()> {
        Marker::push(self, ends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdup::decisions::FlagEdit;
    use crate::markdup::ordinal::{ordinal_suffix, ORDINAL_BYTES};
    use crate::options::markdup::{apply_arg, resolve, MarkdupArgs, MdOpt};
    use alnsort_bam::RecordRef;
    use alnsort_markdup::extract::DT;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// What a read job does with a record: its fields taken into `ends`,
    /// and the record with its `ordinal` (what enters the sorter) in `out`.
    fn add(ends: &mut BatchEnds, framed: &[u8], ordinal: u64, out: &mut Vec<u8>) {
        ends.add_fields(framed);
        out.clear();
        out.extend_from_slice(framed);
        out.extend_from_slice(&ordinal_suffix(ordinal));
    }

    /// [`record`] (flag 0) with `aux` appended to its tags, block_size
    /// following.
    fn with_aux(name: &[u8], aux: &[u8]) -> Vec<u8> {
        let mut r = record(name, 0);
        r.extend_from_slice(aux);
        let n = (r.len() - 4) as u32;
        r[..4].copy_from_slice(&n.to_le_bytes());
        r
    }

    fn record(name: &[u8], flag: u16) -> Vec<u8> {
        // refID 0, pos 99, one 10M CIGAR op, 10 bases of quality 30.
        let mut r = Vec::new();
        r.extend_from_slice(&0i32.to_le_bytes());
        r.extend_from_slice(&99i32.to_le_bytes());
        r.push(name.len() as u8 + 1);
        r.push(60);
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&1u16.to_le_bytes());
        r.extend_from_slice(&flag.to_le_bytes());
        r.extend_from_slice(&10u32.to_le_bytes());
        r.extend_from_slice(&(-1i32).to_le_bytes());
        r.extend_from_slice(&(-1i32).to_le_bytes());
        r.extend_from_slice(&0i32.to_le_bytes());
        r.extend_from_slice(name);
        r.push(0);
        r.extend_from_slice(&(10u32 << 4).to_le_bytes());
        r.extend_from_slice(&[0x11; 5]);
        r.extend_from_slice(&[30; 10]);
        let mut framed = (r.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(&r);
        framed
    }

    /// `recs` decided with `args` (`--markdup` on), as one node decides:
    /// the decisions and each record with its input ordinal appended.
    fn decide(mut args: MarkdupArgs, recs: &[Vec<u8>]) -> (Decisions, Vec<Vec<u8>>) {
        args.enabled = true;
        let header =
            alnsort_bam::header::parse_sam_header([b"@SQ\tSN:c\tLN:1000".as_slice()]).unwrap();
        let cfg = resolve(&args).unwrap().unwrap();
        let mut m = Marker::new(&header, &cfg, "in.bam", (1 << 20, None), None);
        let mut ends = BatchEnds::default();
        let mut with_ordinals = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            let mut out = Vec::new();
            add(&mut ends, r, i as u64, &mut out);
            assert_eq!(out.len(), r.len() + ORDINAL_BYTES);
            with_ordinals.push(out);
        }
        m.push(&ends).unwrap();
        (m.finish().unwrap(), with_ordinals)
    }

    /// Two fragments at the same 5' end with equal scores, both with a
    /// stale 0x400, written in reverse input order (as a sort may): the
    /// ordinal finds each one's decision; the first in input order is kept
    /// (its stale 0x400 cleared), the second marked.
    #[test]
    fn ordinals_travel_with_records_and_flags_are_rewritten() {
        let recs = [record(b"a", 0x400), record(b"b", 0x400)];
        let (d, sorted) = decide(MarkdupArgs::default(), &recs);
        let mut buf = Vec::new();
        let flags: Vec<u16> = sorted
            .iter()
            .rev()
            .map(|r| {
                let w = d.apply(r, &mut buf).unwrap().unwrap();
                assert_eq!(w.len(), r.len() - ORDINAL_BYTES);
                RecordRef::with_block_size(w).flag()
            })
            .collect();
        // Equal scores: the first in file order is kept.
        assert_eq!(flags, [0x400, 0]);
        assert_eq!(d.marked(), 1);
    }

    /// A record with aux fields: an input DT between two others is dropped
    /// and the duplicate's DT:Z appended last, block_size following.
    #[test]
    fn dt_tags_are_cleared_and_appended_last() {
        let mut args = MarkdupArgs::default();
        apply_arg(
            &mut args,
            MdOpt::TaggingPolicy,
            "--tagging-policy",
            Some("all".into()),
        )
        .unwrap();
        let recs = [
            with_aux(b"a", b"XAZx\0DTZSQ\0NMC\x01"),
            with_aux(b"b", b"XAZx\0DTZLB\0NMC\x01"),
        ];
        let (d, sorted) = decide(args, &recs);
        let mut buf = Vec::new();
        let kept = d.apply(&sorted[0], &mut buf).unwrap().unwrap().to_vec();
        assert_eq!(
            RecordRef::with_block_size(&kept).aux_bytes(),
            b"XAZx\0NMC\x01"
        );
        assert_eq!(kept.len(), recs[0].len() - 6);
        let dup = d.apply(&sorted[1], &mut buf).unwrap().unwrap().to_vec();
        let r = RecordRef::with_block_size(&dup);
        assert_eq!(r.flag(), 0x400);
        assert_eq!(r.aux_bytes(), b"XAZx\0NMC\x01DTZLB\0");
        assert_eq!(
            u32::from_le_bytes(dup[..4].try_into().unwrap()) as usize,
            dup.len() - 4
        );
    }

    /// Records copied whole or in two parts cut anywhere (a record longer
    /// than a block): the same bytes as `Decisions::apply` writes, the
    /// ordinal cut off and 0x400 set on the duplicate and cleared on the
    /// kept record, and each duplicate counted once.
    /// A `DT` tag in the input (which Picard drops: `CLEAR_DT=true`)
    /// changes the record's length as it is written, so even without
    /// tagging or removal the chunks are not marked in place; without one
    /// they are.
    #[test]
    fn an_input_dt_tag_keeps_records_off_the_in_place_path() {
        let plain = [record(b"a", 0), record(b"b", 0)];
        let tagged = [record(b"a", 0), with_aux(b"b", b"DTZSQ\0")];
        let (d, _) = decide(MarkdupArgs::default(), &plain);
        assert!(d.marks_in_place());
        let (d, sorted) = decide(MarkdupArgs::default(), &tagged);
        assert!(!d.marks_in_place());
        let mut buf = Vec::new();
        for rec in &sorted {
            let out = d.apply(rec, &mut buf).unwrap().unwrap().to_vec();
            assert!(RecordRef::with_block_size(&out).aux().find(DT).is_none());
        }
    }

    #[test]
    fn flag_edit_in_parts_matches_apply() {
        let recs = [record(b"a", 0x400), record(b"b", 0)];
        let (d, sorted) = decide(MarkdupArgs::default(), &recs);
        assert!(d.marks_in_place());
        let edit = FlagEdit {
            bits: d.duplicate_bits(),
            seen_marked: Arc::new(AtomicU64::new(0)),
        };
        let mut buf = Vec::new();
        for rec in &sorted {
            let want = d.apply(rec, &mut buf).unwrap().unwrap().to_vec();
            let n = rec.len() - ORDINAL_BYTES;
            for cut in 0..=n {
                let mut got = Vec::new();
                edit.append(rec, 0..cut, &mut got);
                edit.append(rec, cut..n, &mut got);
                assert_eq!(got, want, "cut at {cut}");
            }
        }
        let flags: Vec<u16> = sorted
            .iter()
            .map(|r| {
                let mut w = Vec::new();
                edit.append(r, 0..r.len() - ORDINAL_BYTES, &mut w);
                RecordRef::with_block_size(&w).flag()
            })
            .collect();
        assert_eq!(flags, [0, 0x400]);
        // Once per cut of the duplicate, once more whole.
        let n = sorted[1].len() - ORDINAL_BYTES;
        assert_eq!(edit.seen_marked.load(Ordering::Relaxed), n as u64 + 2);
        d.check_all_met().unwrap();
    }

    #[test]
    fn options_need_markdup_and_unsupported_values_are_refused() {
        let mut a = MarkdupArgs::default();
        apply_arg(&mut a, MdOpt::Metrics, "--metrics", Some("m.txt".into())).unwrap();
        let e = resolve(&a).unwrap_err().to_string();
        assert!(e.contains("--metrics needs --markdup"), "{e}");
        let e = apply_arg(
            &mut a,
            MdOpt::DuplicateScoring,
            "--duplicate-scoring",
            Some("random".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("random is not supported"), "{e}");
        let e = apply_arg(
            &mut a,
            MdOpt::TaggingPolicy,
            "--tagging-policy",
            Some("every".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("expected none, optical or all"), "{e}");
        apply_arg(
            &mut a,
            MdOpt::TaggingPolicy,
            "--tagging-policy",
            Some("optical".into()),
        )
        .unwrap();
        assert_eq!(a.tagging, TaggingPolicy::Optical);
        let e = apply_arg(
            &mut a,
            MdOpt::OpticalDistance,
            "--optical-distance",
            Some("x".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--optical-distance 'x'"), "{e}");
    }

    /// A record on reference 0 at `pos` (its 10M CIGAR's 5' end follows),
    /// its mate on reference 0 at `mate_pos` (-1: none), in read group
    /// `rg`.
    fn placed(name: &[u8], flag: u16, pos: i32, mate_pos: i32, rg: &[u8]) -> Vec<u8> {
        let mut r = record(name, flag);
        r[8..12].copy_from_slice(&pos.to_le_bytes());
        let mate_ref: i32 = if mate_pos < 0 { -1 } else { 0 };
        r[24..28].copy_from_slice(&mate_ref.to_le_bytes());
        r[28..32].copy_from_slice(&mate_pos.to_le_bytes());
        r.extend_from_slice(b"RGZ");
        r.extend_from_slice(rg);
        r.push(0);
        let n = (r.len() - 4) as u32;
        r[..4].copy_from_slice(&n.to_le_bytes());
        r
    }

    /// Templates of every kind over few 5' ends and two read groups (of two
    /// libraries): pairs either way round, with secondary and supplementary
    /// records, fragments, half-mapped pairs, orphans, mates in two read
    /// groups.
    fn mixed_templates(n: usize) -> Vec<Vec<u8>> {
        use alnsort_markdup::flags::*;
        let mut recs = Vec::new();
        for t in 0..n {
            let name = format!("T{t}:1:FC:1:1101:{}:{}", t % 97, t % 89);
            let name = name.as_bytes();
            let (a, b) = (100 + (t % 5) as i32 * 10, 400 + (t % 3) as i32 * 10);
            let rg: &[u8] = if t % 7 < 4 { b"rg1" } else { b"rg2" };
            let (p1, p2) = (PAIRED | READ1, PAIRED | READ2 | REVERSE);
            let tpl = match t % 11 {
                0..=4 => vec![placed(name, p1, a, b, rg), placed(name, p2, b, a, rg)],
                5 => vec![placed(name, p2, b, a, rg), placed(name, p1, a, b, rg)],
                6 => vec![placed(name, 0, a, -1, rg)],
                7 => vec![
                    placed(name, p1 | MATE_UNMAPPED, a, a, rg),
                    placed(name, PAIRED | READ2 | UNMAPPED, a, a, rg),
                ],
                8 => vec![
                    placed(name, p1, a, b, rg),
                    placed(name, p1 | SUPPLEMENTARY, a + 50, b, rg),
                    placed(name, p2, b, a, rg),
                    placed(name, p2 | SECONDARY, b + 50, a, rg),
                ],
                9 if t % 3 == 0 => vec![placed(name, p1, a, b, rg)],
                9 => vec![
                    placed(name, p1, a, b, b"rg1"),
                    placed(name, p2, b, a, b"rg2"),
                ],
                _ => vec![placed(name, p1, a, b, rg), placed(name, p2, b, a, rg)],
            };
            recs.extend(tpl);
        }
        recs
    }

    /// `recs` marked by one node's marker within `budget` bytes (spilled
    /// to a temporary directory beyond it), in batches of the sizes of
    /// `cuts` in turn, with whole templates paired by the batches when
    /// `whole`: the decisions and how many templates the batches paired.
    fn mark_batches(
        recs: &[Vec<u8>],
        cuts: &[usize],
        whole: bool,
        budget: usize,
    ) -> (Vec<u8>, usize) {
        let header = alnsort_bam::header::parse_sam_header([
            b"@SQ\tSN:c\tLN:100000".as_slice(),
            b"@RG\tID:rg1\tLB:libA".as_slice(),
            b"@RG\tID:rg2\tLB:libB".as_slice(),
        ])
        .unwrap();
        let args = MarkdupArgs {
            enabled: true,
            ..Default::default()
        };
        let cfg = resolve(&args).unwrap().unwrap();
        let dir = std::env::temp_dir();
        let mut m = Marker::new(&header, &cfg, "in.bam", (budget, None), Some(&dir));
        let spec = m.ends_spec();
        assert!(spec.pair_templates);
        let spec = EndsSpec {
            pair_templates: whole,
            ..spec
        };
        let (mut at, mut paired) = (0, 0);
        for &cut in cuts.iter().cycle() {
            if at == recs.len() {
                break;
            }
            let mut ends = BatchEnds::new(spec.clone());
            for r in &recs[at..(at + cut).min(recs.len())] {
                ends.add_fields(r);
            }
            at = (at + cut).min(recs.len());
            assert!(ends.len() > 2 || ends.templates.is_empty());
            paired += ends.templates.len();
            m.push(&ends).unwrap();
        }
        if budget < 1 << 20 {
            assert!(m.spill_stats().runs > 0);
        }
        (m.finish().unwrap().to_bytes(), paired)
    }

    /// The batches' whole templates (neither a batch's first nor its last:
    /// they may go on in the batch before or after) give the decisions
    /// the records' pushes one by one give, in batches of 1 record to
    /// many, cutting templates anywhere, with and without spills.
    #[test]
    fn whole_templates_of_batches_decide_as_their_records() {
        let recs = mixed_templates(6000);
        for cuts in [&[1, 2, 3, 5, 8, 13, 1, 40][..], &[700], &[recs.len()]] {
            for budget in [64 << 20, 768 << 10] {
                let (one, none) = mark_batches(&recs, cuts, false, budget);
                let (whole, paired) = mark_batches(&recs, cuts, true, budget);
                assert_eq!(none, 0);
                assert!(paired > 100, "{paired}");
                assert!(one == whole, "cuts {cuts:?} budget {budget}");
            }
        }
    }

    /// Merged inputs: each record's grouping check is its own input's,
    /// named with its record number there, whole templates or not.
    #[test]
    fn merged_inputs_check_each_record_in_its_input() {
        use alnsort_markdup::flags::{PAIRED, READ1, READ2};
        let header = alnsort_bam::header::parse_sam_header([
            b"@SQ\tSN:c\tLN:100000".as_slice(),
            b"@RG\tID:rg1\tLB:libA".as_slice(),
        ])
        .unwrap();
        let args = MarkdupArgs {
            enabled: true,
            ..Default::default()
        };
        let cfg = resolve(&args).unwrap().unwrap();
        let mut m = Marker::new(&header, &cfg, "merged", (64 << 20, None), None);
        m.check_inputs_apart(&["a.bam".to_string(), "b.bam".to_string()]);
        let (r1, r2) = (PAIRED | READ1, PAIRED | READ2);
        let recs = [
            (placed(b"x", r1, 100, 300, b"rg1"), 0),
            (placed(b"y", r1, 100, 300, b"rg1"), 1),
            (placed(b"x", r2, 300, 100, b"rg1"), 0),
            (placed(b"z", r1, 100, 300, b"rg1"), 1),
            (placed(b"z", r2, 300, 100, b"rg1"), 1),
            (placed(b"y", r2, 300, 100, b"rg1"), 1),
        ];
        let mut ends = BatchEnds::new(m.ends_spec());
        for (r, _) in &recs {
            ends.add_fields(r);
        }
        let from: Vec<u16> = recs.iter().map(|r| r.1).collect();
        let e = m.push_from(&ends, &from).unwrap_err().to_string();
        assert!(e.starts_with("b.bam: "), "{e}");
        assert!(e.contains("record 4 (read y)"), "{e}");
    }
}
