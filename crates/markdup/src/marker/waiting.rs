//! Mates waiting for their other half: the most recent one apart, the others
//! in a map under Picard's key, spilled per reference in coordinate order.

use std::collections::HashMap;

use crate::ends::{End, Pairing};
#[cfg(doc)]
use crate::templates::Templates;
use crate::{spill, InputOrder, MarkDuplicates, MarkdupError, ReadGroups};

/// A mate waiting for its other half, under the key Picard gives it.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) ref_id: i32,
    pub(crate) rg: i16,
    pub(crate) name: Vec<u8>,
    pub(crate) end: End,
    /// The template it waits in ([`Templates::index`]): in name-grouped
    /// input a record of the same template has the same name
    /// ([`MarkDuplicates::waits_as`]).
    pub(crate) template: i64,
}

impl MarkDuplicates {
    pub(crate) fn pending_bytes(&self) -> usize {
        let pending_entry = std::mem::size_of::<((i32, i16, Vec<u8>), End)>() + 8;
        self.pending.capacity() * pending_entry
            + self.pending_name_bytes
            + std::mem::size_of::<Waiting>()
            + self.recent_spare.capacity()
    }

    /// Mates waiting for their other half.
    pub(crate) fn waiting(&self) -> usize {
        self.pending.len() + self.recent.is_some() as usize + self.template_waits as usize
    }

    /// Runs `f` on `pending` with the key `(ref_id, rg, name)`, built in a
    /// reused buffer: no allocation per lookup.
    pub(crate) fn with_pending_key<R>(
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
    pub(crate) fn waits_as(&self, w: &Waiting, ref_id: i32, rg: i16, name: &[u8]) -> bool {
        w.ref_id == ref_id
            && w.rg == rg
            && ((self.order == InputOrder::Queryname && w.template == self.templates.index)
                || w.name == name)
    }

    /// Takes the mate waiting under `(ref_id, rg, name)`, if any.
    pub(crate) fn take_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> Option<End> {
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
    pub(crate) fn is_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> bool {
        if let Some(w) = &self.recent {
            if self.waits_as(w, ref_id, rg, name) {
                return true;
            }
        }
        self.with_pending_key(ref_id, rg, name, |pending, key| pending.contains_key(key))
    }

    pub(crate) fn waiting_twice(
        groups: &ReadGroups,
        ref_id: i32,
        rg: i16,
        name: &[u8],
    ) -> MarkdupError {
        MarkdupError::WaitingTwice {
            name: String::from_utf8_lossy(name).into_owned(),
            mate_ref: ref_id,
            read_group: groups.id_name(rg),
        }
    }

    /// Makes `end` wait under `(ref_id, rg, name)`, replacing any mate
    /// waiting under that key (as a map insert does).
    pub(crate) fn add_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8], end: End) {
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

    /// Coordinate order: moves the waiting mates whose mate is on a later
    /// reference than the one being read to the spill files of their
    /// mate's reference (in memory they would wait at least until reading
    /// reaches it).
    pub(crate) fn spill_waiting(&mut self) -> Result<(), MarkdupError> {
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
    pub(crate) fn reach_reference(&mut self, ref_id: i32) -> Result<(), MarkdupError> {
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
