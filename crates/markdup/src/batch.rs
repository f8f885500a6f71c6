//! Whole templates paired on the read jobs. In name-grouped input most
//! templates lie inside one batch of records; a read job pairs those
//! ([`BatchTemplates::add`]) with the reading thread's own pairing step
//! ([`crate::record_ends`]), so that the thread, in input order, only
//! appends what came out ([`MarkDuplicates::push_template`]): the record
//! slots, and the read ends with their library, read group and template
//! number put in. The templates a batch end cuts, and those whose
//! pairing depends on what waits from before, stay with the thread's
//! per-record push.

use crate::grouping::TemplateFlags;
use crate::optical::Location;
use crate::{
    fragment_end, record_ends, End, InputOrder, MarkDuplicates, MarkdupError, Pairing, ReadInfo,
    RecordSlot, RgInfo, Templates,
};

/// What one record of a whole template does to the marker's state, in the
/// order the thread's push would do it.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A pair end, or the fragment end of a record whose mate is unmapped.
    End(End),
    /// The fragment end of a record whose mate is mapped ([`crate::MatedFrags`]).
    Mated(End),
    /// The record's fragment end waits for its mate.
    Wait,
    /// The waiting mate was taken and paired.
    Paired,
}

/// One whole template of a batch.
#[derive(Clone, Copy, Debug)]
struct Whole {
    /// Its first record's position in the batch.
    start: u32,
    records: u32,
    /// Where its records' flags start in [`BatchTemplates::flags`].
    flags: u32,
    /// Where its steps start in [`BatchTemplates::steps`].
    steps: u32,
}

/// The whole templates of one batch, paired on a read job: their read ends
/// with a placeholder library, read group and template number
/// ([`PLACEHOLDER`], put in by [`MarkDuplicates::push_template`]).
#[derive(Debug, Default)]
pub struct BatchTemplates {
    wholes: Vec<Whole>,
    flags: Vec<u16>,
    /// Each step with its record's position in the template.
    steps: Vec<(u32, Step)>,
}

/// The read group the read job pairs a template with: every record of a
/// whole template has one read group (the same `RG` value), which the
/// thread resolves.
const PLACEHOLDER: RgInfo = RgInfo {
    library: 0,
    ordinal: 0,
};

/// The pairing of one template on a read job: a mate waits alone, under
/// its reference (read group and name are the template's).
struct TemplatePairing<'a> {
    steps: &'a mut Vec<(u32, Step)>,
    record: u32,
    waiting: Option<(i32, End)>,
    /// Nothing happened that the thread's state would do otherwise: a
    /// second mate waiting at once (the thread's map would hold both, or
    /// replace one).
    alone: bool,
}

impl Pairing for TemplatePairing<'_> {
    fn add_end(&mut self, e: End) -> Result<(), MarkdupError> {
        self.steps.push((self.record, Step::End(e)));
        Ok(())
    }

    fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError> {
        self.steps.push((self.record, Step::Mated(*e)));
        Ok(())
    }

    fn take_waiting(&mut self, ref_id: i32, _rg: i16, _name: &[u8]) -> Option<End> {
        match self.waiting {
            Some((r, e)) if r == ref_id => {
                self.waiting = None;
                Some(e)
            }
            _ => None,
        }
    }

    fn wait(&mut self, ref_id: i32, _rg: i16, _name: &[u8], end: End) -> Result<(), MarkdupError> {
        self.alone &= self.waiting.is_none();
        self.waiting = Some((ref_id, end));
        self.steps.push((self.record, Step::Wait));
        Ok(())
    }

    fn paired(&mut self, _name: &[u8]) {
        self.steps.push((self.record, Step::Paired));
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
        let (flags0, steps0) = (self.flags.len(), self.steps.len());
        // The one rule of which records give ends (name-grouped input).
        let mut templates = Templates::new(InputOrder::Queryname, 0);
        let mut group = TemplateFlags::default();
        let mut pairing = TemplatePairing {
            steps: &mut self.steps,
            record: 0,
            waiting: None,
            alone: true,
        };
        for (r, loc) in records {
            let r = ReadInfo {
                rg: PLACEHOLDER,
                ..r
            };
            self.flags.push(r.flag);
            group.add(r.flag);
            if templates.gives_ends(&r) {
                let loc = loc.with_read_group(PLACEHOLDER.ordinal);
                let frag = fragment_end(&r, PLACEHOLDER.library as i16, loc, 0);
                record_ends(&mut pairing, &r, frag).expect("a template's pairing does not fail");
            }
            pairing.record += 1;
        }
        let kept = pairing.alone && pairing.waiting.is_none() && !group.incomplete();
        let n = pairing.record;
        if kept && n > 0 {
            self.wholes.push(Whole {
                start,
                records: n,
                flags: flags0 as u32,
                steps: steps0 as u32,
            });
        } else {
            self.flags.truncate(flags0);
            self.steps.truncate(steps0);
        }
        kept
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

    fn steps(&self, t: usize) -> &[(u32, Step)] {
        let end = self
            .wholes
            .get(t + 1)
            .map_or(self.steps.len(), |w| w.steps as usize);
        &self.steps[self.wholes[t].steps as usize..end]
    }

    fn flags(&self, t: usize) -> &[u16] {
        let w = self.wholes[t];
        &self.flags[w.flags as usize..(w.flags + w.records) as usize]
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
    /// Whether [`MarkDuplicates::push_template`] may push a whole template
    /// now: name-grouped input, and no mate waits (one that did might be
    /// this template's, under its name).
    pub fn takes_templates(&self) -> bool {
        self.order == InputOrder::Queryname && self.waiting() == 0
    }

    /// Pushes whole template `t` of `batch` (named `name`, read group
    /// `rg`) as its records' pushes in turn would
    /// ([`MarkDuplicates::push_known`]), the state after each record the
    /// same: slots, ends, keys, library ids, the spare name buffer and the
    /// memory limit's spills. Only when [`MarkDuplicates::takes_templates`].
    pub fn push_template(
        &mut self,
        batch: &BatchTemplates,
        t: usize,
        name: &[u8],
        rg: RgInfo,
    ) -> Result<(), TemplateError> {
        debug_assert!(self.takes_templates());
        let first = self.records.len() as i64;
        let steps = batch.steps(t);
        let mut s = 0;
        let mut library = None;
        // The thread's waiting mate holds the spare name buffer.
        let mut held: Option<Vec<u8>> = None;
        for (k, &flag) in batch.flags(t).iter().enumerate() {
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
            while let Some(&(_, step)) = steps.get(s).filter(|(r, _)| *r == k) {
                s += 1;
                let mut place = |md: &mut Self, e: End| -> Result<End, MarkdupError> {
                    let lib = match library {
                        Some(l) => l,
                        None => *library.insert(md.library_id(rg.library)?),
                    };
                    Ok(placed(e, lib, rg.ordinal, first))
                };
                match step {
                    Step::End(e) => {
                        let e = place(self, e).map_err(at)?;
                        self.add_end(e).map_err(at)?;
                    }
                    Step::Mated(e) => {
                        let e = place(self, e).map_err(at)?;
                        self.add_mated(&e).map_err(at)?;
                    }
                    Step::Wait => {
                        self.pending_name_bytes += name.len();
                        let mut buf = std::mem::take(&mut self.recent_spare);
                        if buf.capacity() < name.len() {
                            buf.clear();
                            buf.extend_from_slice(name);
                        }
                        held = Some(buf);
                        self.template_waits = true;
                    }
                    Step::Paired => {
                        self.pending_name_bytes -= name.len();
                        self.recent_spare = held.take().expect("a mate waits");
                        self.template_waits = false;
                    }
                }
            }
            self.enforce_limit().map_err(at)?;
        }
        self.templates.whole(first);
        Ok(())
    }
}
