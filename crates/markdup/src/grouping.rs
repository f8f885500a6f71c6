//! Is name-grouped input really grouped? Picard reading with
//! `ASSUME_SORT_ORDER=queryname` takes a change of read name as the end of
//! a template; a template whose records are scattered (a coordinate-sorted
//! file without `SO:coordinate`, a shuffled file) would be split into
//! several and marked wrongly, so it is refused instead.
//!
//! The check is cheap for grouped input: a template that ends with a paired
//! record but without both primary mates is *incomplete* and its name is
//! remembered (aligners never write those; a filtered file has a few); a
//! later template with a remembered name is scattered. Scattering that
//! leaves every first occurrence complete (only secondary or supplementary
//! records elsewhere) is not detected.

use std::collections::HashSet;

use crate::flags;

/// The first record that shows the input is not grouped by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scattered {
    pub name: Vec<u8>,
    /// 0-based position of the record among the input's records.
    pub record: u64,
}

/// What a template's flags say of it: whether it is incomplete (paired,
/// without both primary mates). The one rule of [`GroupCheck`] and of the
/// whole templates the read jobs pair ([`crate::batch::BatchTemplates`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TemplateFlags {
    paired: bool,
    read1: bool,
    read2: bool,
}

impl TemplateFlags {
    /// The template's next record's flag.
    pub(crate) fn add(&mut self, flag: u16) {
        if flag & flags::PAIRED != 0 {
            self.paired = true;
            if flag & (flags::SECONDARY | flags::SUPPLEMENTARY) == 0 {
                self.read1 |= flag & flags::READ1 != 0;
                self.read2 |= flag & flags::READ2 != 0;
            }
        }
    }

    pub(crate) fn incomplete(&self) -> bool {
        self.paired && !(self.read1 && self.read2)
    }
}

/// Follows the records in input order; see the module documentation.
#[derive(Debug, Default)]
pub struct GroupCheck {
    current: Vec<u8>,
    started: bool,
    template: TemplateFlags,
    incomplete: HashSet<Vec<u8>, alnsort_bam::name_hash::NameHash>,
    incomplete_bytes: usize,
    records: u64,
}

impl GroupCheck {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next record, in input order.
    pub fn push(&mut self, name: &[u8], flag: u16) -> Result<(), Scattered> {
        self.push_known(name, flag, None)
    }

    /// [`GroupCheck::push`] told whether `name` is the previous record's
    /// (`same_name`, compared by the caller; `None`: not known).
    pub fn push_known(
        &mut self,
        name: &[u8],
        flag: u16,
        same_name: Option<bool>,
    ) -> Result<(), Scattered> {
        let record = self.records;
        self.records += 1;
        if !self.started || !same_name.unwrap_or_else(|| self.current == name) {
            self.close();
            if self.incomplete.contains(name) {
                return Err(Scattered {
                    name: name.to_vec(),
                    record,
                });
            }
            self.current.clear();
            self.current.extend_from_slice(name);
            self.started = true;
        }
        self.template.add(flag);
        Ok(())
    }

    /// A whole template of `records` records named `name`, which the
    /// caller found complete ([`TemplateFlags`]), and after which the next
    /// record starts another template: [`GroupCheck::push_known`] of each
    /// record in turn, without keeping the name.
    pub fn push_template(&mut self, name: &[u8], records: u64) -> Result<(), Scattered> {
        let record = self.records;
        self.records += records;
        self.close();
        if !self.incomplete.is_empty() && self.incomplete.contains(name) {
            return Err(Scattered {
                name: name.to_vec(),
                record,
            });
        }
        // Complete and ended: nothing to close.
        self.started = false;
        Ok(())
    }

    fn close(&mut self) {
        if self.started && self.template.incomplete() {
            self.incomplete_bytes += self.current.len() + 48;
            self.incomplete.insert(self.current.clone());
        }
        self.template = TemplateFlags::default();
    }

    /// Bytes held (names of incomplete templates, with table overhead).
    pub fn memory_bytes(&self) -> usize {
        self.incomplete_bytes + self.current.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P1: u16 = flags::PAIRED | flags::READ1;
    const P2: u16 = flags::PAIRED | flags::READ2;

    #[test]
    fn grouped_templates_pass() {
        let mut g = GroupCheck::new();
        for (n, f) in [
            ("a", P1),
            ("a", P2),
            ("a", P1 | flags::SUPPLEMENTARY),
            ("b", 0),
            ("c", P2),
            ("c", P1),
        ] {
            g.push(n.as_bytes(), f).unwrap();
        }
        assert_eq!(g.memory_bytes(), g.current.capacity());
    }

    #[test]
    fn a_mate_after_another_template_is_scattered() {
        let mut g = GroupCheck::new();
        g.push(b"a", P1).unwrap();
        g.push(b"b", P1).unwrap();
        g.push(b"b", P2).unwrap();
        let e = g.push(b"a", P2).unwrap_err();
        assert_eq!(
            e,
            Scattered {
                name: b"a".to_vec(),
                record: 3
            }
        );
    }

    #[test]
    fn whole_templates_count_their_records_and_meet_earlier_names() {
        let mut g = GroupCheck::new();
        g.push(b"a", P1).unwrap();
        g.push_template(b"b", 3).unwrap();
        g.push_known(b"c", P1, Some(false)).unwrap();
        g.push_template(b"d", 2).unwrap();
        // "a" and "c" were closed incomplete, by the whole templates after
        // them.
        let e = g.push_template(b"c", 2).unwrap_err();
        assert_eq!(
            e,
            Scattered {
                name: b"c".to_vec(),
                record: 7
            }
        );
        let e = g.push_known(b"a", P2, Some(false)).unwrap_err();
        assert_eq!(e.record, 9);
    }

    #[test]
    fn an_orphan_mate_alone_is_accepted() {
        // A filtered file: "a" lost its mate, nothing of it comes back.
        let mut g = GroupCheck::new();
        g.push(b"a", P1).unwrap();
        g.push(b"b", P1).unwrap();
        g.push(b"b", P2).unwrap();
        g.push(b"c", 0).unwrap();
        assert!(g.memory_bytes() > 0);
    }
}
