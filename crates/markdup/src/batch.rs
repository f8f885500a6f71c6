//! Whole templates paired on the read jobs. In name-grouped input most
//! templates lie inside one batch of records; a read job pairs those
//! ([`BatchTemplates::add`]) with the reading thread's own pairing step
//! ([`crate::ends::record_ends`]), so that the thread, in input order, only
//! appends what came out ([`MarkDuplicates::push_template`]): the record
//! slots, and the read ends and keys with their library, read group and
//! template number put in. The templates a batch end cuts, and those whose
//! pairing depends on what waits from before, stay with the thread's
//! per-record push.

use crate::ends::{fragment_end, record_ends, End, FragKey, MatedFrags, Pairing};
use crate::grouping::TemplateFlags;
use crate::optical::Location;
use crate::templates::Templates;
use crate::walk::RecordSlot;
use crate::{InputOrder, MarkDuplicates, MarkdupError, ReadInfo, RgInfo};

/// What one record of a whole template does to the marker's state: one
/// of the four outcomes of [`crate::ends::record_ends`] (or none, for a record
/// that gives no read end), in the order the thread's push does it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Does {
    Nothing,
    /// A fragment end whose mate is unmapped (or an unpaired record's).
    End,
    /// A mated fragment's key, then the fragment end waits for its mate.
    MatedWaits,
    /// A mated fragment's key, the waiting mate taken, the pair end.
    MatedPairs,
}

/// One whole template of a batch, and where its parts start in
/// [`BatchTemplates`]' lists.
#[derive(Clone, Copy, Debug)]
struct Whole {
    /// Its first record's position in the batch.
    start: u32,
    records: u32,
    recs_at: u32,
    ends_at: u32,
    mated_at: u32,
    waits_at: u32,
}

/// The whole templates of one batch, paired on a read job: their read ends
/// and keys with a placeholder library, read group and template number
/// ([`PLACEHOLDER`], put in by [`MarkDuplicates::push_template`]), kept
/// compact (the thread reads them from another core's cache).
#[derive(Debug, Default)]
pub struct BatchTemplates {
    wholes: Vec<Whole>,
    /// Each record's flag and what it does.
    recs: Vec<(u16, Does)>,
    /// The pair ends and lone fragment ends, in order.
    ends: Vec<End>,
    /// The keys of the fragment ends whose mate is mapped, in order.
    mated: Vec<FragKey>,
    /// For each mate that waits: the reference it found no mate waiting
    /// under (its own) and the one it waits under (its mate's): the keys,
    /// with the template's read group and name, that the thread's map must
    /// not hold for the template to pair among itself there too.
    waits: Vec<(i32, i32)>,
}

/// The read group the read job pairs a template with: every record of a
/// whole template has one read group (the same `RG` value), which the
/// thread resolves. Callers of [`BatchTemplates::add`] may give their
/// records this one (it is not read).
pub const PLACEHOLDER: RgInfo = RgInfo {
    library: 0,
    ordinal: 0,
};

/// The pairing of one template on a read job: a mate waits alone, under
/// its reference (read group and name are the template's).
struct TemplatePairing<'a> {
    batch: &'a mut BatchTemplates,
    waiting: Option<(i32, End)>,
    /// The reference the last mate found nothing waiting under.
    missed: i32,
    /// What the current record did so far.
    does: Does,
    /// Nothing happened that the thread's state would do otherwise: a
    /// second mate waiting at once (the thread's map would hold both, or
    /// replace one).
    alone: bool,
}

impl Pairing for TemplatePairing<'_> {
    fn add_end(&mut self, e: End) -> Result<(), MarkdupError> {
        self.batch.ends.push(e);
        if self.does == Does::Nothing {
            self.does = Does::End;
        }
        Ok(())
    }

    fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError> {
        self.batch.mated.push(e.frag_key());
        Ok(())
    }

    fn take_waiting(&mut self, ref_id: i32, _rg: i16, _name: &[u8]) -> Option<End> {
        match self.waiting {
            Some((r, e)) if r == ref_id => {
                self.waiting = None;
                Some(e)
            }
            _ => {
                self.missed = ref_id;
                None
            }
        }
    }

    fn wait(&mut self, ref_id: i32, _rg: i16, _name: &[u8], end: End) -> Result<(), MarkdupError> {
        self.alone &= self.waiting.is_none();
        self.waiting = Some((ref_id, end));
        self.batch.waits.push((self.missed, ref_id));
        self.does = Does::MatedWaits;
        Ok(())
    }

    fn paired(&mut self, _name: &[u8]) {
        self.does = Does::MatedPairs;
    }
}

impl BatchTemplates {
    /// Pairs the template whose records are `records` (in input order,
    /// every one with the same name and the same `RG` value; their `rg`
    /// is not read), starting at position `start` of the batch; the next
    /// record of the batch has another name. Returns whether it is kept:
    /// one whose mates pair up among themselves, one at a time, and that
    /// the grouping check takes as complete
    /// ([`crate::grouping::GroupCheck`]). The others go to the thread's
    /// per-record push.
    pub fn add<'a>(
        &mut self,
        start: u32,
        records: impl IntoIterator<Item = (ReadInfo<'a>, Location)>,
    ) -> bool {
        let whole = Whole {
            start,
            records: 0,
            recs_at: self.recs.len() as u32,
            ends_at: self.ends.len() as u32,
            mated_at: self.mated.len() as u32,
            waits_at: self.waits.len() as u32,
        };
        // The one rule of which records give ends (name-grouped input).
        let mut templates = Templates::new(InputOrder::Queryname, 0);
        let mut group = TemplateFlags::default();
        let mut pairing = TemplatePairing {
            batch: self,
            waiting: None,
            missed: -1,
            does: Does::Nothing,
            alone: true,
        };
        for (r, loc) in records {
            let r = ReadInfo {
                rg: PLACEHOLDER,
                ..r
            };
            group.add(r.flag);
            pairing.does = Does::Nothing;
            if templates.gives_ends(&r) {
                let loc = loc.with_read_group(PLACEHOLDER.ordinal);
                let frag = fragment_end(&r, PLACEHOLDER.library as i16, loc, 0);
                record_ends(&mut pairing, &r, frag).expect("a template's pairing does not fail");
            }
            let does = pairing.does;
            pairing.batch.recs.push((r.flag, does));
        }
        let kept = pairing.alone && pairing.waiting.is_none() && !group.incomplete();
        let records = self.recs.len() as u32 - whole.recs_at;
        if kept && records > 0 {
            self.wholes.push(Whole { records, ..whole });
        } else {
            self.recs.truncate(whole.recs_at as usize);
            self.ends.truncate(whole.ends_at as usize);
            self.mated.truncate(whole.mated_at as usize);
            self.waits.truncate(whole.waits_at as usize);
        }
        kept && records > 0
    }

    /// Whole templates kept.
    pub fn len(&self) -> usize {
        self.wholes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wholes.is_empty()
    }

    /// Template `t`'s first record's position in the batch, and its
    /// number of records.
    pub fn span(&self, t: usize) -> (u32, u32) {
        (self.wholes[t].start, self.wholes[t].records)
    }

    /// How many pair and lone ends, and mated keys, template `t` gives.
    fn counts(&self, t: usize) -> (usize, usize) {
        let w = &self.wholes[t];
        let (ends, mated) = self
            .wholes
            .get(t + 1)
            .map_or((self.ends.len(), self.mated.len()), |n| {
                (n.ends_at as usize, n.mated_at as usize)
            });
        (ends - w.ends_at as usize, mated - w.mated_at as usize)
    }

    /// Template `t`'s waiting mates' references ([`BatchTemplates::waits`]).
    fn waits(&self, t: usize) -> &[(i32, i32)] {
        let end = self
            .wholes
            .get(t + 1)
            .map_or(self.waits.len(), |w| w.waits_at as usize);
        &self.waits[self.wholes[t].waits_at as usize..end]
    }
}

/// A failure of [`MarkDuplicates::push_template`]: at the template's record
/// `record` (0-based), as the per-record push would have failed there.
#[derive(Debug)]
pub struct TemplateError {
    pub record: u32,
    pub error: MarkdupError,
}

/// An end paired on a read job with the thread's library id, read group
/// and template number put in.
fn placed(mut e: End, library: i16, rg: i16, template: i64) -> End {
    e.library = library;
    e.loc = e.loc.with_read_group(rg);
    e.r1_index = template;
    if e.pair {
        e.r2_index = template;
    }
    e
}

impl MarkDuplicates {
    /// Whether whole template `t` of `batch` (named `name`) can be
    /// appended without any check of the per-record push acting: the
    /// slots, ends and keys fit their buffers as they are (with a memory
    /// limit; without one they grow as the pushes grow them), and the
    /// state stays within the limit after each record (it only grows by
    /// the bitsets' share of each record, and a waiting mate holds the
    /// spare name buffer, whose room for the name it then gives back).
    fn template_fits(&self, batch: &BatchTemplates, t: usize, name: &[u8], library: i16) -> bool {
        let Some(limit) = self.spill.as_ref().map(|s| s.limit) else {
            return true;
        };
        let w = &batch.wholes[t];
        let (ends, mated) = batch.counts(t);
        let keys = &batch.mated[w.mated_at as usize..][..mated];
        let packed = keys
            .iter()
            .filter(|k| MatedFrags::packs((library, k.1, k.2, k.3, k.4, k.5, k.6)))
            .count();
        let records = self.records.len();
        let bitsets = ((records + w.records as u64) / 2 - records / 2) as usize;
        self.records.room() >= w.records as usize
            && self.ends.capacity() - self.ends.len() >= ends
            && self.mated.packed.capacity() - self.mated.packed.len() >= packed
            && self.mated.wide.capacity() - self.mated.wide.len() >= mated - packed
            && (batch.waits(t).is_empty() || self.recent_spare.capacity() >= name.len())
            && self.memory_bytes() + bitsets <= limit
    }

    /// Whether [`MarkDuplicates::push_template`] may push whole template
    /// `t` of `batch` (named `name`, read group `rg`) now: name-grouped
    /// input, no mate waiting in `recent` (the template's first waiting
    /// mate would move it to the map), and none in the map under the keys
    /// the template's mates look under or wait under (a mate of an
    /// earlier template of this name).
    pub fn takes_template(
        &mut self,
        batch: &BatchTemplates,
        t: usize,
        name: &[u8],
        rg: RgInfo,
    ) -> bool {
        if self.order != InputOrder::Queryname || self.recent.is_some() || self.template_waits {
            return false;
        }
        if self.pending.is_empty() {
            return true;
        }
        batch.waits(t).iter().all(|&(take_ref, wait_ref)| {
            [take_ref, wait_ref].iter().all(|&r| {
                self.with_pending_key(r, rg.ordinal, name, |pending, key| {
                    !pending.contains_key(key)
                })
            })
        })
    }

    /// Pushes whole template `t` of `batch` (named `name`, read group
    /// `rg`) as its records' pushes in turn would
    /// ([`MarkDuplicates::push_known`]), the state after each record the
    /// same: slots, ends, keys, library ids, the spare name buffer and the
    /// memory limit's spills. Only when [`MarkDuplicates::takes_template`].
    pub fn push_template(
        &mut self,
        batch: &BatchTemplates,
        t: usize,
        name: &[u8],
        rg: RgInfo,
    ) -> Result<(), TemplateError> {
        let w = batch.wholes[t];
        let first = self.records.len() as i64;
        let recs = &batch.recs[w.recs_at as usize..(w.recs_at + w.records) as usize];
        let (mut e, mut m) = (w.ends_at as usize, w.mated_at as usize);
        // The library id, as the template's first record with an end
        // looks it up (again there below: the same id, nothing changed).
        let mut library = None;
        if let Some(k) = recs.iter().position(|r| r.1 != Does::Nothing) {
            let id = self.library_id(rg.library);
            library = Some(id.map_err(|error| TemplateError {
                record: k as u32,
                error,
            })?);
        }
        if self.template_fits(batch, t, name, library.unwrap_or(0)) {
            // No check of the per-record push can act: appended.
            let lib = library.unwrap_or(0);
            for (k, &(flag, does)) in recs.iter().enumerate() {
                self.records.push_within(RecordSlot {
                    library: rg.library,
                    flag,
                    new_template: k == 0,
                });
                if does == Does::Nothing {
                    continue;
                }
                if does != Does::End {
                    let mut key = batch.mated[m];
                    key.0 = lib;
                    self.mated.push_key(key);
                    m += 1;
                }
                if does != Does::MatedWaits {
                    self.ends
                        .push(placed(batch.ends[e], lib, rg.ordinal, first));
                    e += 1;
                }
            }
            self.templates.whole(first);
            return Ok(());
        }
        // The thread's waiting mate holds the spare name buffer.
        let mut held: Option<Vec<u8>> = None;
        for (k, &(flag, does)) in recs.iter().enumerate() {
            let k = k as u32;
            let at = |error| TemplateError { record: k, error };
            self.records
                .push(
                    RecordSlot {
                        library: rg.library,
                        flag,
                        new_template: k == 0,
                    },
                    self.spill.as_mut(),
                )
                .map_err(at)?;
            if does == Does::Nothing {
                self.enforce_limit().map_err(at)?;
                continue;
            }
            let lib = match library {
                Some(l) => l,
                None => *library.insert(self.library_id(rg.library).map_err(at)?),
            };
            if does == Does::End {
                self.add_end(placed(batch.ends[e], lib, rg.ordinal, first))
                    .map_err(at)?;
                e += 1;
            } else {
                let mut key = batch.mated[m];
                key.0 = lib;
                self.add_mated_key(key).map_err(at)?;
                m += 1;
                if does == Does::MatedWaits {
                    self.pending_name_bytes += name.len();
                    let mut buf = std::mem::take(&mut self.recent_spare);
                    if buf.capacity() < name.len() {
                        buf.clear();
                        buf.extend_from_slice(name);
                    }
                    held = Some(buf);
                    self.template_waits = true;
                } else {
                    self.pending_name_bytes -= name.len();
                    self.recent_spare = held.take().expect("a mate waits");
                    self.template_waits = false;
                    self.add_end(placed(batch.ends[e], lib, rg.ordinal, first))
                        .map_err(at)?;
                    e += 1;
                }
            }
            self.enforce_limit().map_err(at)?;
        }
        self.templates.whole(first);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optical::NameParser;
    use crate::tests::two_libraries;
    use crate::{flags, Barcodes, Outcome};

    const P: u16 = flags::PAIRED;
    const R1: u16 = P | flags::READ1;
    const R2: u16 = P | flags::READ2;

    /// A record: name, flag, reference, 5' end, mate reference, read group
    /// (0 or 1).
    type Rec = (String, u16, i32, i32, i32, usize);

    fn info<'a>(r: &'a Rec, rgs: &[RgInfo; 2]) -> ReadInfo<'a> {
        ReadInfo {
            name: r.0.as_bytes(),
            flag: r.1,
            ref_id: r.2,
            mate_ref_id: r.4,
            five_prime: r.3,
            score: (r.3 % 7) as i16,
            rg: rgs[r.5],
            barcodes: Barcodes::default(),
        }
    }

    fn loc(r: &Rec) -> Location {
        NameParser::Default.parse(r.0.as_bytes())
    }

    /// Templates of every kind, from a fixed seed: pairs (mates either way
    /// round, on two references, some with secondary or supplementary
    /// records), fragments, half-mapped and unmapped pairs, orphans, pairs
    /// whose mates are in two read groups, three primaries under one name.
    fn templates(n: usize) -> Vec<Vec<Rec>> {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m) as i32
        };
        (0..n)
            .map(|t| {
                let name = format!("T{t}:1:FC:1:{}:{}:{}", 1101 + next(2), next(500), next(500));
                let rg = next(2) as usize;
                let (a, b) = (100 + 10 * next(5), 400 + 10 * next(5));
                let mref = next(3).saturating_sub(1);
                let rec = |flag: u16, ref_id: i32, five: i32, mate_ref: i32, rg: usize| {
                    (name.clone(), flag, ref_id, five, mate_ref, rg)
                };
                let mut tpl = match next(10) {
                    0..=4 => vec![
                        rec(R1, 0, a, mref, rg),
                        rec(R2 | flags::REVERSE, mref, b, 0, rg),
                    ],
                    5 => vec![rec(0, 0, a, -1, rg)],
                    6 => vec![
                        rec(R1 | flags::MATE_UNMAPPED, 0, a, 0, rg),
                        rec(R2 | flags::UNMAPPED, 0, a, 0, rg),
                    ],
                    7 => vec![
                        rec(R1 | flags::UNMAPPED | flags::MATE_UNMAPPED, -1, 0, -1, rg),
                        rec(R2 | flags::UNMAPPED | flags::MATE_UNMAPPED, -1, 0, -1, rg),
                    ],
                    8 => match next(3) {
                        0 => vec![rec(R1, 0, a, 0, rg)],
                        1 => vec![rec(R1, 0, a, 0, 0), rec(R2, 0, b, 0, 1)],
                        _ => vec![
                            rec(R1, 0, a, 0, rg),
                            rec(R2, 0, b, 0, rg),
                            rec(0, 0, a + 5, -1, rg),
                        ],
                    },
                    _ => vec![
                        rec(R2 | flags::REVERSE, 0, b, 0, rg),
                        rec(R1 | flags::SUPPLEMENTARY, 1, a, 0, rg),
                        rec(R1, 0, a, 0, rg),
                        rec(R1 | flags::SECONDARY, 0, a + 1, 0, rg),
                    ],
                };
                if next(4) == 0 {
                    tpl.reverse();
                }
                tpl
            })
            .collect()
    }

    /// `tpls` marked with the state `within` bytes (spilled beyond it),
    /// whole templates pushed at once when `whole`, else record by record;
    /// the outcome and the state's size after each template.
    fn mark(tpls: &[Vec<Rec>], whole: bool, within: usize) -> (Outcome, Vec<usize>, usize) {
        let mut groups = two_libraries();
        let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
        let mut md = MarkDuplicates::new(groups);
        md.set_track_optical(true);
        let dir = std::env::temp_dir();
        md.set_spill(&dir, within, true);
        let mut sizes = Vec::new();
        let mut pushed_whole = 0;
        for tpl in tpls {
            let mut batch = BatchTemplates::default();
            let one_rg = tpl.iter().all(|r| r.5 == tpl[0].5);
            let name = tpl[0].0.as_bytes();
            let kept = whole
                && one_rg
                && batch.add(0, tpl.iter().map(|r| (info(r, &rgs), loc(r))))
                && md.takes_template(&batch, 0, name, rgs[tpl[0].5]);
            if kept {
                assert_eq!(batch.span(0), (0, tpl.len() as u32));
                md.push_template(&batch, 0, name, rgs[tpl[0].5]).unwrap();
                pushed_whole += 1;
            } else {
                for r in tpl {
                    md.push_known(&info(r, &rgs), loc(r), None).unwrap();
                }
            }
            sizes.push(md.memory_bytes());
        }
        (md.finish().unwrap(), sizes, pushed_whole)
    }

    #[test]
    fn whole_templates_mark_as_record_by_record() {
        let tpls = templates(3000);
        for within in [1 << 30, 192 << 10] {
            let (one, one_sizes, _) = mark(&tpls, false, within);
            let (whole, whole_sizes, pushed) = mark(&tpls, true, within);
            assert!(pushed > 100, "{pushed} whole templates");
            assert_eq!(one_sizes, whole_sizes);
            assert_eq!(one.duplicate, whole.duplicate);
            assert_eq!(one.optical, whole.optical);
            assert_eq!(one.spill, whole.spill);
            assert_eq!(one.metrics.libraries, whole.metrics.libraries);
            assert_eq!(one.metrics.set_sizes, whole.metrics.set_sizes);
            if within < 1 << 20 {
                assert!(whole.spill.runs > 0);
            }
        }
    }

    #[test]
    fn kept_templates_pair_among_themselves_one_mate_at_a_time() {
        let mut groups = two_libraries();
        let rgs = [groups.resolve(Some(b"rg1")), groups.resolve(Some(b"rg2"))];
        let rec = |flag: u16, ref_id: i32, mate_ref: i32| -> Rec {
            ("n:1:1101:5:5".to_string(), flag, ref_id, 100, mate_ref, 0)
        };
        let add = |recs: &[Rec]| {
            let mut b = BatchTemplates::default();
            let kept = b.add(3, recs.iter().map(|r| (info(r, &rgs), loc(r))));
            assert_eq!(b.len(), kept as usize);
            kept
        };
        // A pair, a fragment (a template of one record), unmapped pairs.
        assert!(add(&[rec(R1, 0, 1), rec(R2, 1, 0)]));
        assert!(add(&[rec(0, 0, -1)]));
        let unmapped = flags::UNMAPPED | flags::MATE_UNMAPPED;
        assert!(add(&[
            rec(R1 | unmapped, -1, -1),
            rec(R2 | unmapped, -1, -1)
        ]));
        // A mate whose fields disagree with its mate's waits: left to the
        // thread, as is an orphan, and a read 1 alone (incomplete).
        assert!(!add(&[rec(R1, 0, 1), rec(R2, 0, 0)]));
        assert!(!add(&[rec(R1, 0, 0)]));
        assert!(!add(&[rec(R1 | flags::MATE_UNMAPPED, 0, 0)]));
        // Two mates waiting at once, under one key or two.
        assert!(!add(&[rec(R1, 0, 0), rec(R1, 0, 0), rec(R2, 0, 0)]));
        assert!(!add(&[
            rec(R1, 0, 1),
            rec(R1, 0, 0),
            rec(R2, 1, 0),
            rec(R2, 0, 0)
        ]));
        // Secondary and supplementary records give no ends.
        let sec = rec(R1 | flags::SECONDARY, 0, 0);
        let supp = rec(R2 | flags::SUPPLEMENTARY, 0, 0);
        assert!(add(&[rec(R1, 0, 0), sec, rec(R2, 0, 0), supp]));
    }
}
