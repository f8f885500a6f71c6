//! Merging the headers of several inputs into one, as `samtools merge`
//! (1.24) does, and the per-input translation of records into the merged
//! header's terms. Used by `alnsort merge`, by `alnsort sort` with several
//! inputs, and by anything else that combines inputs.
//!
//! The rules (learnt from samtools' `bam_sort.c`, checked with pysam 0.24.1):
//! * `@HD`: the first input that has one gives it, unchanged; when the
//!   reference order of a later input cannot be kept in coordinate order
//!   (its references map to merged ids out of order) `SO` becomes
//!   `unsorted` and `GO`/`SS` are dropped.
//! * `@SQ`: the first input's lines, then each later input's references the
//!   merged header does not know yet (by name or `AN` alias), appended with
//!   their line as written; records' `refID`/`next refID` are translated.
//! * `@RG`/`@PG`: an ID already taken by an earlier input is renamed
//!   `ID-XXXXXXXX` (a random 32-bit hex suffix from `lrand48` seeded by
//!   `-s SEED`, time otherwise), unless combined (`-c`/`-p`), when the
//!   later line is dropped and its ID kept. `PG:` in `@RG` lines and `PP:`
//!   in `@PG` lines follow their input's `@PG` renames. Records' `RG:Z` and
//!   `PG:Z` tags are translated and moved to the end of the aux fields
//!   (samtools deletes and re-appends them); a tag whose ID is not in its
//!   input's header is dropped with a warning once per input and ID.
//! * `@CO` lines of every input, in input order.
//!
//! The output order is `@HD`, `@SQ`, `@RG`, `@PG`, `@CO`.

use crate::header::{first_tag, line_type, parse_sam_header, remove_tag, set_tag};
use crate::header::{Header, HeaderError};
use crate::record::{RecordMut, RecordRef};
use std::collections::{HashMap, HashSet};

/// What a header merge may fail on.
#[derive(Debug, thiserror::Error)]
pub enum HeaderMergeError {
    /// The merged lines do not make a valid header (cannot happen for
    /// inputs that are themselves valid; kept for the library's callers).
    #[error("the merged header is invalid: {0}")]
    Invalid(#[from] HeaderError),
    /// An `@SQ` line for a reference of the input's list is missing.
    #[error("input {input}: no @SQ line for reference {name}")]
    MissingSq { input: usize, name: String },
}

/// How IDs that clash are handled.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeOptions {
    /// `-c`: `@RG` lines with the same ID are one read group.
    pub combine_rg: bool,
    /// `-p`: `@PG` lines with the same ID are one program.
    pub combine_pg: bool,
    /// The `lrand48` seed of the clash suffixes (`-s`).
    pub seed: i64,
}

/// glibc's `lrand48` (the 48-bit linear congruential generator of POSIX
/// `drand48`), seeded as `srand48` does.
#[derive(Debug, Clone)]
struct Rand48(u64);

impl Rand48 {
    fn new(seed: i64) -> Self {
        Rand48((((seed as u64) & 0xffff_ffff) << 16) | 0x330e)
    }

    fn next(&mut self) -> u32 {
        self.0 = (self.0.wrapping_mul(0x5_deec_e66d).wrapping_add(0xb)) & ((1u64 << 48) - 1);
        (self.0 >> 17) as u32
    }
}

/// Receives `(tag, ID, read name)` of a tag dropped by [`Translation::apply`].
pub type UnknownTag<'a> = dyn FnMut([u8; 2], &[u8], &[u8]) + 'a;

/// How one input's records map into the merged header.
#[derive(Debug, Clone)]
pub struct Translation {
    /// Merged reference id of each of the input's references.
    tid: Vec<i32>,
    identity_tids: bool,
    /// `RG` ID -> merged ID.
    rg: HashMap<Vec<u8>, Vec<u8>>,
    pg: HashMap<Vec<u8>, Vec<u8>>,
    /// The input's references map out of order (coordinate order is lost).
    pub lost_coord_sort: bool,
}

/// Builds the merged header input by input.
#[derive(Debug)]
pub struct HeaderMerger {
    opts: MergeOptions,
    rand: Rand48,
    hd: Option<Vec<u8>>,
    sq: Vec<Vec<u8>>,
    sq_ids: HashMap<Vec<u8>, i32>,
    rg_ids: HashSet<Vec<u8>>,
    pg_ids: HashSet<Vec<u8>>,
    out_rg: Vec<Vec<u8>>,
    out_pg: Vec<Vec<u8>>,
    out_co: Vec<Vec<u8>>,
    inputs: usize,
    /// Warnings for the user, in the order samtools prints them.
    pub warnings: Vec<String>,
}

impl HeaderMerger {
    pub fn new(opts: MergeOptions) -> Self {
        HeaderMerger {
            opts,
            rand: Rand48::new(opts.seed),
            hd: None,
            sq: Vec::new(),
            sq_ids: HashMap::new(),
            rg_ids: HashSet::new(),
            pg_ids: HashSet::new(),
            out_rg: Vec::new(),
            out_pg: Vec::new(),
            out_co: Vec::new(),
            inputs: 0,
            warnings: Vec::new(),
        }
    }

    /// Adds the next input's header; returns how its records translate.
    pub fn add(&mut self, header: &Header) -> Result<Translation, HeaderMergeError> {
        let input = self.inputs;
        self.inputs += 1;
        if self.hd.is_none() {
            self.hd = header
                .lines()
                .iter()
                .find(|l| line_type(l) == *b"HD")
                .cloned();
        }
        // @SQ: by name (and AN alias) into the merged list.
        let mut tid = Vec::with_capacity(header.n_ref());
        let mut lost_coord_sort = false;
        let mut max_tid = -1i32;
        for r in header.refs() {
            let t = match self.sq_ids.get(&r.name) {
                Some(&t) => t,
                None => {
                    let line = header
                        .lines()
                        .iter()
                        .find(|l| line_type(l) == *b"SQ" && sq_name(l) == Some(&r.name[..]))
                        .ok_or_else(|| HeaderMergeError::MissingSq {
                            input,
                            name: String::from_utf8_lossy(&r.name).into_owned(),
                        })?;
                    let t = self.sq.len() as i32;
                    self.sq_ids.insert(r.name.clone(), t);
                    if let Some(an) = first_tag(line, b"AN") {
                        for alt in an.split(|&b| b == b',').filter(|a| !a.is_empty()) {
                            self.sq_ids.entry(alt.to_vec()).or_insert(t);
                        }
                    }
                    self.sq.push(line.clone());
                    t
                }
            };
            if t > max_tid {
                max_tid = t;
            } else {
                lost_coord_sort = true;
            }
            tid.push(t);
        }
        let identity_tids = tid.iter().enumerate().all(|(i, &t)| t == i as i32);
        let mut rg = HashMap::new();
        let mut pg = HashMap::new();
        let rg_lines = self.trans_ids(header, b"RG", &mut rg);
        let pg_lines = self.trans_ids(header, b"PG", &mut pg);
        for line in rg_lines {
            let line = self.fix_reference(line, b"PG", &pg);
            self.out_rg.push(line);
        }
        for line in pg_lines {
            let line = self.fix_reference(line, b"PP", &pg);
            self.out_pg.push(line);
        }
        self.out_co.extend(
            header
                .lines()
                .iter()
                .filter(|l| line_type(l) == *b"CO")
                .cloned(),
        );
        Ok(Translation {
            tid,
            identity_tids,
            rg,
            pg,
            lost_coord_sort,
        })
    }

    /// samtools' `trans_rg_pg`: the lines of type `kind` this input adds,
    /// with renamed IDs, and the ID map.
    fn trans_ids(
        &mut self,
        header: &Header,
        kind: &[u8; 2],
        map: &mut HashMap<Vec<u8>, Vec<u8>>,
    ) -> Vec<Vec<u8>> {
        let combine = if kind == b"RG" {
            self.opts.combine_rg
        } else {
            self.opts.combine_pg
        };
        let mut added = Vec::new();
        for line in header.lines().iter().filter(|l| line_type(l) == *kind) {
            let Some(orig) = first_tag(line, b"ID") else {
                continue;
            };
            let known = if kind == b"RG" {
                &self.rg_ids
            } else {
                &self.pg_ids
            };
            let taken = known.contains(orig);
            let new_id = if !taken || combine {
                orig.to_vec()
            } else {
                loop {
                    let id = format!("{}-{:08X}", String::from_utf8_lossy(orig), self.rand.next())
                        .into_bytes();
                    if !known.contains(&id) {
                        break id;
                    }
                }
            };
            if !taken || !combine {
                let mut out = line.clone();
                if new_id != orig {
                    set_tag(&mut out, b"ID", &new_id);
                }
                added.push(out);
                let known = if kind == b"RG" {
                    &mut self.rg_ids
                } else {
                    &mut self.pg_ids
                };
                known.insert(new_id.clone());
            }
            map.insert(orig.to_vec(), new_id);
        }
        added
    }

    /// samtools' `finish_rg_pg`: the value of the first `\tKEY:` field
    /// follows the input's `@PG` renames (unknown: a warning, unchanged).
    fn fix_reference(
        &mut self,
        mut line: Vec<u8>,
        key: &[u8; 2],
        pg: &HashMap<Vec<u8>, Vec<u8>>,
    ) -> Vec<u8> {
        let needle = [b'\t', key[0], key[1], b':'];
        let Some(at) = line.windows(4).position(|w| w == needle) else {
            return line;
        };
        let start = at + 4;
        let end = line[start..]
            .iter()
            .position(|&b| b == b'\t')
            .map_or(line.len(), |p| start + p);
        match pg.get(&line[start..end]) {
            Some(new) => {
                let new = new.clone();
                line.splice(start..end, new);
            }
            None => self.warnings.push(format!(
                "[W::finish_rg_pg] Tag {}:{} not found in @PG records",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&line[start..end])
            )),
        }
        line
    }

    /// The merged header. `reset_order`: some input lost coordinate order
    /// (samtools sets `SO:unsorted` and drops `GO`/`SS`).
    pub fn finish(self, reset_order: bool) -> Result<Header, HeaderMergeError> {
        let mut lines = Vec::new();
        if let Some(mut hd) = self.hd {
            if reset_order {
                remove_tag(&mut hd, b"SS");
                remove_tag(&mut hd, b"GO");
                set_tag(&mut hd, b"SO", b"unsorted");
            }
            lines.push(hd);
        }
        lines.extend(self.sq);
        lines.extend(self.out_rg);
        lines.extend(self.out_pg);
        lines.extend(self.out_co);
        Ok(parse_sam_header(lines.iter().map(|l| l.as_slice()))?)
    }
}

fn sq_name(line: &[u8]) -> Option<&[u8]> {
    first_tag(line, b"SN")
}

impl Translation {
    /// Whether records of this input may need changes.
    pub fn is_identity(&self) -> bool {
        self.identity_tids && self.rg.is_empty() && self.pg.is_empty()
    }

    /// The merged header's ID of the input's read group `id` (renamed when
    /// it clashed with an earlier input's).
    pub fn read_group<'a>(&'a self, id: &'a [u8]) -> &'a [u8] {
        self.rg.get(id).map_or(id, Vec::as_slice)
    }

    /// The merged header's ID of the input's read group `id`, or `None`
    /// when the input's header has no such read group (samtools' merge
    /// then drops the record's `RG` tag: [`Translation::apply`]).
    pub fn known_read_group(&self, id: &[u8]) -> Option<&[u8]> {
        self.rg.get(id).map(Vec::as_slice)
    }

    /// The merged header's reference id of the input's reference `tid`
    /// (negative ids, and ids the input's header lacks, stay as they are).
    pub fn ref_id(&self, tid: i32) -> i32 {
        if tid >= 0 {
            self.tid.get(tid as usize).copied().unwrap_or(tid)
        } else {
            tid
        }
    }

    /// Translates `rec` (BAM form with its `block_size`) into `out` as
    /// samtools merge's `bam_translate` does; returns false (and leaves
    /// `out` alone) when the record stays as it is. A tag whose ID the
    /// input's header lacks is dropped and reported to `unknown` as
    /// `(tag, ID, read name)` (samtools warns once per input and ID).
    pub fn apply(&self, rec: &[u8], out: &mut Vec<u8>, unknown: &mut UnknownTag<'_>) -> bool {
        let r = RecordRef::with_block_size(rec);
        let tid = r.ref_id();
        let mtid = r.next_ref_id();
        let aux_at = 4 + r.aux_offset();
        let rg = find_tag(&rec[aux_at..], *b"RG");
        let pg = find_tag(&rec[aux_at..], *b"PG");
        if self.identity_tids && self.unchanged_tags(rec, aux_at, rg, pg) {
            return false;
        }
        out.clear();
        out.extend_from_slice(rec);
        let mut m = RecordMut::new(out);
        m.set_ref_id(self.ref_id(tid));
        m.set_next_ref_id(self.ref_id(mtid));
        for (tag, map) in [(*b"RG", &self.rg), (*b"PG", &self.pg)] {
            m.move_string_to_end(tag, |value| {
                let new = map.get(value).cloned();
                if new.is_none() {
                    unknown(tag, value, r.read_name());
                }
                new
            });
        }
        true
    }
}

impl Translation {
    /// Whether deleting and re-appending the record's `RG` and `PG` tags
    /// (at `rg`, `pg` in its aux area at `aux_at`) would give the same
    /// bytes: each maps to itself and they already end the record, `RG`
    /// before `PG` (the common case of one input's own read group).
    fn unchanged_tags(
        &self,
        rec: &[u8],
        aux_at: usize,
        rg: Option<(usize, usize)>,
        pg: Option<(usize, usize)>,
    ) -> bool {
        let aux = &rec[aux_at..];
        let same = |span: (usize, usize), map: &HashMap<Vec<u8>, Vec<u8>>| {
            let (start, end) = span;
            aux[start + 2] == b'Z'
                && map
                    .get(&aux[start + 3..end - 1])
                    .is_some_and(|v| v[..] == aux[start + 3..end - 1])
        };
        match (rg, pg) {
            (None, None) => true,
            (Some(r), None) => r.1 == aux.len() && same(r, &self.rg),
            (None, Some(p)) => p.1 == aux.len() && same(p, &self.pg),
            (Some(r), Some(p)) => {
                r.1 == p.0 && p.1 == aux.len() && same(r, &self.rg) && same(p, &self.pg)
            }
        }
    }
}

/// Byte range `[start, end)` of the first aux field `tag` in `aux`.
fn find_tag(aux: &[u8], tag: [u8; 2]) -> Option<(usize, usize)> {
    crate::Aux::new(aux).find(tag).map(|f| (f.offset, f.end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> Header {
        parse_sam_header(text.lines().map(str::as_bytes)).unwrap()
    }

    #[test]
    fn lrand48_matches_glibc() {
        // glibc: srand48(1); lrand48() x3 = 89400484, 976015093, 1792756325
        let mut r = Rand48::new(1);
        assert_eq!(
            [r.next(), r.next(), r.next()],
            [89400484, 976015093, 1792756325]
        );
    }

    #[test]
    fn clashing_ids_are_renamed_and_sq_translated() {
        let a = header("@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:c1\tLN:10\n@RG\tID:x\tPG:p\n@PG\tID:p\tPN:a\n@CO\tone");
        let b = header("@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:c2\tLN:20\n@SQ\tSN:c1\tLN:10\n@RG\tID:x\tPG:p\n@PG\tID:p\tPN:b\n@CO\ttwo");
        let mut m = HeaderMerger::new(MergeOptions {
            seed: 1,
            ..Default::default()
        });
        let ta = m.add(&a).unwrap();
        let tb = m.add(&b).unwrap();
        assert!(!ta.lost_coord_sort);
        assert!(tb.lost_coord_sort);
        assert_eq!(tb.tid, vec![1, 0]);
        let h = m.finish(true).unwrap();
        let text = String::from_utf8(h.to_sam_text()).unwrap();
        let rg2 = format!("x-{:08X}", 89400484u32);
        let pg2 = format!("p-{:08X}", 976015093u32);
        assert_eq!(
            text,
            format!(
                "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:c1\tLN:10\n@SQ\tSN:c2\tLN:20\n@RG\tID:x\tPG:p\n@RG\tID:{rg2}\tPG:{pg2}\n\
                 @PG\tID:p\tPN:a\n@PG\tID:{pg2}\tPN:b\n@CO\tone\n@CO\ttwo\n"
            )
        );
    }

    #[test]
    fn combined_ids_keep_the_first_line() {
        let a = header("@SQ\tSN:c1\tLN:10\n@RG\tID:x\tSM:a");
        let b = header("@SQ\tSN:c1\tLN:10\n@RG\tID:x\tSM:b");
        let mut m = HeaderMerger::new(MergeOptions {
            combine_rg: true,
            ..Default::default()
        });
        m.add(&a).unwrap();
        let tb = m.add(&b).unwrap();
        assert!(tb.identity_tids);
        let text = String::from_utf8(m.finish(false).unwrap().to_sam_text()).unwrap();
        assert_eq!(text, "@SQ\tSN:c1\tLN:10\n@RG\tID:x\tSM:a\n");
    }
}
