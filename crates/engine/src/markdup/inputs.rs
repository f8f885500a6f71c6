//! `alnsort sort --markdup IN1 IN2 ...`: Picard MarkDuplicates' answer on
//! several inputs (several `I=`).
//!
//! Picard 3.4.0 reads several inputs through htsjdk's
//! `MergingSamRecordIterator`, ordered by the first header's sort order
//! (`ASSUME_SORT_ORDER=queryname` for name-grouped input; coordinate for
//! coordinate-sorted input): a priority queue over the inputs' next
//! records compared by `SAMRecordQueryNameComparator` or
//! `SAMRecordCoordinateComparator`. That order, not the order of the
//! inputs given, is the file order its tie-breaks (the representative of
//! equal scores, `read1IndexInFile`) follow: with two inputs holding `zzz`
//! and `aaa` as equal-scoring duplicates, Picard keeps `aaa` whichever
//! input comes first (checked against Picard 3.4.0 by
//! `tests/markdup/test_sort_markdup_inputs.py`). htsjdk's header merge
//! keeps one of several identical `@RG` lines, so their reads are one read
//! group (optical duplicates are found across those inputs).
//!
//! The sort itself keeps `alnsort sort IN1 IN2 ...`'s record order (the
//! inputs merged as samtools merges them), so the decision is a pass of its
//! own over the inputs before the sort's: [`decide`] reads them merged in
//! Picard's order ([`crate::io::merged::MergedStream::for_each_by`]) into a
//! [`Marker`], then renumbers the decisions from that order to ordinals in
//! input order (input `i`'s record `j` is `base[i] + j`), the ordinals the
//! sort's feed appends to each record ([`crate::io::merged::feed_sorter`]). The
//! pass keeps 2 bytes per record (the input each record of Picard's order
//! came from) beside the marker's own state; the inputs are read twice.
//!
//! Refused by name rather than answered differently from Picard: inputs
//! whose `@SQ` lines differ (htsjdk and samtools merge dictionaries
//! differently), and inputs of which some say `SO:coordinate` and others
//! do not (Picard takes the first header's order for all of them).

use crate::config::Config;
use crate::error::{bail, Context, Error, Result};
use crate::io::cleanup::{Debris, TempDir};
use crate::io::input;
use crate::io::merged::MergePlan;
use crate::markdup::decisions::Decisions;
use crate::markdup::ends::BatchEnds;
use crate::markdup::marker::Marker;
use crate::markdup::several::SeveralInputs;
use crate::options::markdup::MarkdupConfig;
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::MergeOptions;
use alnsort_bam::keys::SortOrder;
use alnsort_bam::RecordRef;
use alnsort_markdup::dist::merge_order::MergeKey;
use alnsort_markdup::InputOrder;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Records handed to the marker at a time.
const ENDS_BATCH: usize = 4096;

/// What [`decide`] found: the decisions over input-order ordinals and each
/// input's record count.
pub struct Decided {
    pub decisions: Decisions,
    pub records: Vec<u64>,
}

/// The plan of Picard's merge of several inputs (`decide` here,
/// `alnsort MarkDuplicates` with several `I=`): the inputs opened and
/// interleaved by coordinate keys, unchecked, with their headers merged by
/// `opts`; [`crate::io::merged::MergedStream::for_each_by`] with [`picard_cmp`] then
/// takes the records in Picard's order.
pub(crate) fn picard_plan<'a>(
    paths: &'a [String],
    cfg: &'a Config,
    opts: MergeOptions,
) -> MergePlan<'a> {
    MergePlan {
        paths,
        opts,
        order: &SortOrder::Coordinate,
        sort_order: None,
        region: None,
        unknown_reference: cfg.unknown_reference,
        refs: &cfg.refs,
        check_sorted: false,
    }
}

/// htsjdk's comparator of Picard's merge of several inputs in `order`.
pub(crate) fn picard_cmp(order: InputOrder) -> fn(&[u8], &[u8]) -> Ordering {
    match order {
        InputOrder::Queryname => htsjdk_queryname_cmp,
        InputOrder::Coordinate => htsjdk_coordinate_cmp,
    }
}

/// htsjdk's `SAMRecordQueryNameComparator.compare` on two framed BAM
/// records: names as Java strings (`String.compareTo`: byte order for the
/// ASCII that SAM names are), then paired before unpaired, first of pair
/// before second, forward before reverse, primary before secondary, then
/// before supplementary, then the `HI` tag (absent first).
pub fn htsjdk_queryname_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (RecordRef::with_block_size(a), RecordRef::with_block_size(b));
    let c = a.read_name().cmp(b.read_name());
    if c != Ordering::Equal {
        return c;
    }
    use alnsort_markdup::flags;
    let (fa, fb) = (a.flag(), b.flag());
    let (pa, pb) = (fa & flags::PAIRED != 0, fb & flags::PAIRED != 0);
    let first = |f: u16| f & flags::READ1 != 0;
    let second = |f: u16| f & flags::READ2 != 0;
    let paired = match (pa, pb) {
        (false, false) => Ordering::Equal,
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (true, true) if first(fa) && second(fb) => Ordering::Less,
        (true, true) if second(fa) && first(fb) => Ordering::Greater,
        (true, true) => Ordering::Equal,
    };
    if paired != Ordering::Equal {
        return paired;
    }
    let bit = |f: u16, m: u16| f & m != 0;
    for m in [flags::REVERSE, flags::SECONDARY, flags::SUPPLEMENTARY] {
        if bit(fa, m) != bit(fb, m) {
            return if bit(fa, m) {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
    }
    let hi = |r: &RecordRef<'_>| r.aux().find(*b"HI").and_then(|f| f.int());
    match (hi(&a), hi(&b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => Ordering::Equal,
    }
}

/// htsjdk's `SAMRecordCoordinateComparator.compare` on two framed BAM
/// records ([`MergeKey::cmp`]: reference (no reference last), 1-based
/// start, forward before reverse, then name, flags, mapping quality, mate
/// reference, mate start, insert size).
pub fn htsjdk_coordinate_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (RecordRef::with_block_size(a), RecordRef::with_block_size(b));
    MergeKey::of(&a).htsjdk_cmp(&MergeKey::of(&b))
}

/// Decides duplicates on `cfg.inputs` together as Picard does with one
/// `I=` per input; the marker's state is kept within `budget` (as for one
/// input), spilling into a temporary directory of its own.
pub fn decide(
    cfg: &Config,
    md: &MarkdupConfig,
    budget: (usize, Option<u64>),
    merge_opts: MergeOptions,
    pool: &Arc<rayon::ThreadPool>,
    debris: &Debris,
) -> Result<Decided> {
    let paths = &cfg.inputs;
    if paths.len() > u16::MAX as usize {
        bail!(Refused, "--markdup takes at most {} inputs", u16::MAX);
    }
    // The inputs' own headers: their semantics, dictionaries and read
    // groups.
    let mut headers = Vec::with_capacity(paths.len());
    for p in paths {
        let inp = input::open_with_refs(p, Arc::clone(pool), &cfg.refs)?;
        headers.push(inp.header.clone());
    }
    let several = SeveralInputs::new(paths, &headers, merge_opts)?;
    let (order, aliases) = (several.order, several.aliases);
    drop(headers);
    let (m, _) = crate::io::merged::merged_inputs(&picard_plan(paths, cfg, merge_opts), pool)?;
    let name = format!("{} (merged in Picard's order)", paths.join(", "));
    let tmp = TempDir::new(&cfg.temp_parent, "alnsort-markdup", debris).with_context(|| {
        format!(
            "cannot create a temporary directory in {}",
            cfg.temp_parent.display()
        )
    })?;
    let mut marker = Marker::with_order(&m.header, md, &name, budget, Some(tmp.path()), order);
    marker.set_pool(Arc::clone(pool));
    marker.check_inputs_apart(paths);
    for (id, same_as) in &aliases {
        marker.alias_read_group(id, same_as);
    }
    let spec = marker.ends_spec();
    let mut ends = BatchEnds::new(spec.clone());
    // The input of each record, in Picard's order (`batch`: of the ends
    // not pushed yet).
    let mut from: Vec<u16> = Vec::new();
    let mut batch = 0usize;
    let mut counts = vec![0u64; paths.len()];
    m.for_each_by(picard_cmp(order), |input, rec| {
        ends.add_fields(rec);
        from.push(input as u16);
        counts[input] += 1;
        if ends.len() >= ENDS_BATCH {
            marker.push_from(&ends, &from[batch..])?;
            batch = from.len();
            ends = BatchEnds::new(spec.clone());
        }
        Ok(())
    })?;
    marker.push_from(&ends, &from[batch..])?;
    let decisions = marker.finish()?;
    drop(tmp);
    // Record p of Picard's order is record `next[i]` of its input i.
    let mut next: Vec<u64> = counts
        .iter()
        .scan(0u64, |base, &c| {
            let b = *base;
            *base += c;
            Some(b)
        })
        .collect();
    let decisions = decisions.renumbered(from.iter().map(|&i| {
        let o = next[i as usize];
        next[i as usize] += 1;
        o
    }))?;
    Ok(Decided {
        decisions,
        records: counts,
    })
}

/// A header line's fields but the ID: (`TAG`, value).
type Attrs = Vec<([u8; 2], Vec<u8>)>;

/// One `@RG` or `@PG` line as htsjdk holds it: the ID, and the other
/// fields in the line's order (`TAG`, value).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeaderRecord {
    id: Vec<u8>,
    attrs: Attrs,
}

impl HeaderRecord {
    fn parse(line: &[u8]) -> Option<HeaderRecord> {
        let mut id = None;
        let mut attrs = Vec::new();
        for f in line.split(|&b| b == b'\t').skip(1) {
            if f.len() < 3 || f[2] != b':' {
                continue;
            }
            let tag = [f[0], f[1]];
            if &tag == b"ID" && id.is_none() {
                id = Some(f[3..].to_vec());
            } else if let Some(slot) = attrs.iter_mut().find(|(t, _)| *t == tag) {
                // htsjdk's attribute map keeps one value per tag: the last.
                slot.1 = f[3..].to_vec();
            } else {
                attrs.push((tag, f[3..].to_vec()));
            }
        }
        Some(HeaderRecord { id: id?, attrs })
    }

    fn attr(&self, tag: &[u8; 2]) -> Option<&[u8]> {
        self.attrs
            .iter()
            .find(|(t, _)| t == tag)
            .map(|(_, v)| v.as_slice())
    }

    fn set_attr(&mut self, tag: [u8; 2], value: Vec<u8>) {
        match self.attrs.iter_mut().find(|(t, _)| *t == tag) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((tag, value)),
        }
    }

    /// htsjdk's `equals` of two header records: the ID and the attributes
    /// as a map (their order does not count).
    fn identity(&self) -> (Vec<u8>, Attrs) {
        let mut attrs = self.attrs.clone();
        attrs.sort();
        (self.id.clone(), attrs)
    }

    fn line(&self, kind: &str) -> Vec<u8> {
        let mut out = format!("@{kind}\tID:").into_bytes();
        out.extend_from_slice(&self.id);
        for (t, v) in &self.attrs {
            out.push(b'\t');
            out.extend_from_slice(t);
            out.push(b':');
            out.extend_from_slice(v);
        }
        out
    }
}

/// htsjdk's `SamFileHeaderMerger.positiveFourDigitBase36Str`: digits and
/// upper-case letters, most significant first, "0" for zero. The suffix of
/// a renamed `@RG`/`@PG` ID in a header merge, and of the `@PG` IDs Picard
/// chains (`SAMFileHeader.PgIdGenerator`).
pub(crate) fn htsjdk_base36(n: u64) -> String {
    let mut n = n;
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    if n == 0 {
        return "0".into();
    }
    let mut s = Vec::new();
    while n > 0 {
        s.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    s.reverse();
    String::from_utf8(s).unwrap_or_default()
}

/// htsjdk's `mergeHeaderRecords`: records with the same ID and the same
/// attributes become one; a record whose ID is taken gets
/// `ID.<base 36 of the running counter>`. Fills each input's translation
/// (old ID -> new ID) and returns the merged records in the order made,
/// and whether any ID was renamed.
fn merge_header_records(
    records: &[(usize, HeaderRecord)],
    taken: &mut HashSet<Vec<u8>>,
    counter: &mut u64,
    tables: &mut [Option<HashMap<Vec<u8>, Vec<u8>>>],
) -> (Vec<(HeaderRecord, Vec<usize>)>, bool) {
    // ID (first seen first) -> distinct records (first seen first) -> inputs.
    type Variants = Vec<(HeaderRecord, Vec<usize>)>;
    let mut by_id: Vec<(Vec<u8>, Variants)> = Vec::new();
    for (input, rec) in records {
        let slot = match by_id.iter().position(|(id, _)| *id == rec.id) {
            Some(i) => i,
            None => {
                by_id.push((rec.id.clone(), Vec::new()));
                by_id.len() - 1
            }
        };
        let variants = &mut by_id[slot].1;
        let key = rec.identity();
        match variants.iter_mut().find(|(r, _)| r.identity() == key) {
            Some((_, inputs)) => inputs.push(*input),
            None => variants.push((rec.clone(), vec![*input])),
        }
    }
    let mut collisions = false;
    let mut out = Vec::new();
    for (id, variants) in by_id {
        for (mut rec, inputs) in variants {
            let new_id = if !taken.contains(&id) {
                *counter += 1;
                id.clone()
            } else {
                collisions = true;
                loop {
                    let mut candidate = id.clone();
                    candidate.push(b'.');
                    candidate.extend_from_slice(htsjdk_base36(*counter).as_bytes());
                    *counter += 1;
                    if !taken.contains(&candidate) {
                        break candidate;
                    }
                }
            };
            taken.insert(new_id.clone());
            for &i in &inputs {
                tables[i]
                    .get_or_insert_with(HashMap::new)
                    .insert(id.clone(), new_id.clone());
            }
            rec.id = new_id;
            out.push((rec, inputs));
        }
    }
    (out, collisions)
}

/// Several inputs read as Picard reads them: htsjdk's
/// `SamFileHeaderMerger` (the dictionaries must be the same), and the
/// translation of each record's `RG` and `PG` tags its
/// `MergingSamRecordIterator` makes.
///
/// The merged header is a new one: `@HD VN:1.6 GO:none SO:<the first
/// input's order>`, the first input's `@SQ` lines, the `@RG` and `@PG`
/// lines of every input with identical ones made one and clashing IDs
/// renamed `ID.N` (`@PG` root programs first, then the programs that
/// follow them, PP following the renames), each kind sorted by ID, then
/// every input's `@CO` lines.
#[derive(Debug)]
pub struct HtsjdkMerge {
    pub header: Header,
    /// Per input: its read groups' old ID -> merged ID (None: the input's
    /// header has no `@RG` line).
    rg: Vec<Option<HashMap<Vec<u8>, Vec<u8>>>>,
    pg: Vec<Option<HashMap<Vec<u8>, Vec<u8>>>>,
    /// htsjdk translates records' tags only when some ID was renamed.
    rg_collisions: bool,
    pg_collisions: bool,
    paths: Vec<String>,
}

impl HtsjdkMerge {
    /// Merges `headers` (of `paths`) as htsjdk does for Picard, the merged
    /// `@HD` saying `SO:sort_order`.
    pub fn new(headers: &[Header], paths: &[String], sort_order: &str) -> Result<HtsjdkMerge> {
        let n = headers.len();
        // The dictionaries: htsjdk's isSameSequence (name, length, and M5
        // where both lines have one), in the same order.
        let m5s = |h: &Header| -> Vec<Option<Vec<u8>>> {
            h.lines()
                .iter()
                .filter(|l| l.starts_with(b"@SQ\t"))
                .map(|l| {
                    l.split(|&b| b == b'\t')
                        .find(|f| f.starts_with(b"M5:"))
                        .map(|f| f[3..].to_ascii_lowercase())
                })
                .collect()
        };
        let first_m5 = m5s(&headers[0]);
        for (h, p) in headers.iter().zip(paths).skip(1) {
            let same = h.refs() == headers[0].refs()
                && m5s(h)
                    .iter()
                    .zip(&first_m5)
                    .all(|(a, b)| a.is_none() || b.is_none() || a == b);
            if !same {
                return Err(Error::Refused(format!(
                    "{p}: its @SQ lines differ from those of {} (names, lengths, order or M5); Picard \
                     MarkDuplicates merges several inputs only with the same sequence dictionary \
                     (htsjdk: \"Sequence dictionaries are not the same\")",
                    paths[0]
                )));
            }
        }
        let lines_of = |kind: &[u8], what: &str| -> Result<Vec<(usize, HeaderRecord)>> {
            let mut out = Vec::new();
            for (i, (h, p)) in headers.iter().zip(paths).enumerate() {
                let mut ids = HashSet::new();
                for l in h.lines().iter().filter(|l| l.starts_with(kind)) {
                    let Some(r) = HeaderRecord::parse(l) else {
                        continue;
                    };
                    if !ids.insert(r.id.clone()) {
                        return Err(Error::Refused(format!(
                            "{p}: its header has more than one {what} line with ID:{} (htsjdk refuses it)",
                            String::from_utf8_lossy(&r.id)
                        )));
                    }
                    out.push((i, r));
                }
            }
            Ok(out)
        };
        // @PG: the roots, then level by level the programs whose PP names
        // one of the level just merged (in the same input), their PP
        // following the renames.
        let mut pg_tables: Vec<Option<HashMap<Vec<u8>, Vec<u8>>>> = vec![None; n];
        let mut taken = HashSet::new();
        let mut counter = 0u64;
        let mut pg_collisions = false;
        let mut merged_pg = Vec::new();
        let mut left = lines_of(b"@PG\t", "@PG")?;
        let mut current: Vec<(usize, HeaderRecord)> = Vec::new();
        left.retain(|(i, r)| {
            let root = r.attr(b"PP").is_none();
            if root {
                current.push((*i, r.clone()));
            }
            !root
        });
        let translate = |recs: Vec<(usize, HeaderRecord)>,
                         tables: &[Option<HashMap<Vec<u8>, Vec<u8>>>],
                         pp_too: bool|
         -> Vec<(usize, HeaderRecord)> {
            recs.into_iter()
                .map(|(i, mut r)| {
                    if let Some(t) = &tables[i] {
                        if let Some(new) = t.get(&r.id) {
                            r.id = new.clone();
                        }
                        if pp_too {
                            if let Some(new) = r.attr(b"PP").and_then(|pp| t.get(pp)).cloned() {
                                r.set_attr(*b"PP", new);
                            }
                        }
                    }
                    (i, r)
                })
                .collect()
        };
        while !current.is_empty() {
            let (made, c) =
                merge_header_records(&current, &mut taken, &mut counter, &mut pg_tables);
            pg_collisions |= c;
            merged_pg.extend(made.into_iter().map(|(r, _)| r));
            let done = translate(std::mem::take(&mut current), &pg_tables, false);
            left = translate(left, &pg_tables, true);
            let mut next = Vec::new();
            left.retain(|(i, r)| {
                let pp = r.attr(b"PP");
                let follows = done.iter().any(|(j, d)| j == i && Some(&d.id[..]) == pp);
                if follows {
                    next.push((*i, r.clone()));
                }
                !follows
            });
            current = next;
        }
        if let Some((i, r)) = left.first() {
            return Err(Error::Refused(format!(
                "{}: its @PG line ID:{} names PP:{}, which no @PG line of that header has (htsjdk's \
                 header merge refuses it)",
                paths[*i],
                String::from_utf8_lossy(&r.id),
                String::from_utf8_lossy(r.attr(b"PP").unwrap_or_default())
            )));
        }
        merged_pg.sort_by(|a, b| a.id.cmp(&b.id));
        // @RG: one level, a counter of its own.
        let mut rg_tables = vec![None; n];
        let mut counter = 0u64;
        let (made, rg_collisions) = merge_header_records(
            &lines_of(b"@RG\t", "@RG")?,
            &mut HashSet::new(),
            &mut counter,
            &mut rg_tables,
        );
        let mut merged_rg: Vec<HeaderRecord> = made.into_iter().map(|(r, _)| r).collect();
        merged_rg.sort_by(|a, b| a.id.cmp(&b.id));
        let mut lines: Vec<Vec<u8>> =
            vec![format!("@HD\tVN:1.6\tGO:none\tSO:{sort_order}").into_bytes()];
        lines.extend(
            headers[0]
                .lines()
                .iter()
                .filter(|l| l.starts_with(b"@SQ\t"))
                .cloned(),
        );
        lines.extend(merged_rg.iter().map(|r| r.line("RG")));
        lines.extend(merged_pg.iter().map(|r| r.line("PG")));
        for h in headers {
            lines.extend(h.lines().iter().filter(|l| l.starts_with(b"@CO")).cloned());
        }
        let header = alnsort_bam::header::parse_sam_header(lines.iter().map(Vec::as_slice))
            .context("the inputs' merged header")?;
        Ok(HtsjdkMerge {
            header,
            rg: rg_tables,
            pg: pg_tables,
            rg_collisions,
            pg_collisions,
            paths: paths.to_vec(),
        })
    }

    /// Record `rec` (with its block_size) of input `input` as htsjdk's
    /// merging iterator hands it on: when some read group (program) ID was
    /// renamed, the `RG` (`PG`) tag takes its input's new ID, and a tag
    /// naming no line of its input's header is dropped (htsjdk sets it to
    /// null). The record is built in `buf` when it changes (true).
    /// `number`: the record's position in its input (1-based), for errors.
    pub fn translate(
        &self,
        input: usize,
        rec: &[u8],
        number: u64,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let mut changed = false;
        for (tag, on, tables, kind) in [
            (*b"RG", self.rg_collisions, &self.rg, "@RG"),
            (*b"PG", self.pg_collisions, &self.pg, "@PG"),
        ] {
            if !on {
                continue;
            }
            let cur: &[u8] = if changed { buf } else { rec };
            let Some(old) = crate::markdup::decisions::string_tag(cur, tag) else {
                continue;
            };
            let Some(table) = &tables[input] else {
                return Err(Error::Refused(format!(
                    "{}: record {number} (read {:?}) has {}:Z:{} but the file's header has no {kind} line; \
                     Picard stops on it when the inputs' {kind} IDs clash (add the {kind} line, or \
                     remove the tag)",
                    self.paths[input],
                    String::from_utf8_lossy(RecordRef::with_block_size(rec).read_name()),
                    String::from_utf8_lossy(&tag),
                    String::from_utf8_lossy(old),
                )));
            };
            let new = table.get(old).cloned();
            if new.as_deref() == Some(old) {
                continue;
            }
            if !changed {
                buf.clear();
                buf.extend_from_slice(rec);
                changed = true;
            }
            match new {
                Some(id) => crate::markdup::decisions::set_string_tag(buf, tag, &id),
                None => crate::markdup::decisions::remove_tag(buf, tag),
            }
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdup::several::SeveralInputs;
    use alnsort_markdup::flags;

    fn rec(name: &[u8], flag: u16, ref_id: i32, pos: i32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&ref_id.to_le_bytes());
        body.extend_from_slice(&pos.to_le_bytes());
        body.push(name.len() as u8 + 1);
        body.push(0); // mapq
        body.extend_from_slice(&4680u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes()); // n_cigar
        body.extend_from_slice(&flag.to_le_bytes());
        body.extend_from_slice(&0i32.to_le_bytes()); // l_seq
        body.extend_from_slice(&(-1i32).to_le_bytes());
        body.extend_from_slice(&(-1i32).to_le_bytes());
        body.extend_from_slice(&0i32.to_le_bytes());
        body.extend_from_slice(name);
        body.push(0);
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend(body);
        out
    }

    /// The running-maximum order of `dist::merge_order` against htsjdk's
    /// merging iterator as one node runs it (a Java heap over the inputs'
    /// next records, compared by htsjdk's coordinate comparator): random
    /// coordinate-sorted inputs whose records of one position are in no
    /// order of names, so that runs interleave; wherever no two inputs'
    /// running maxima tie, the order is the heap's, and a tie is reported
    /// only between two inputs' equal records.
    #[test]
    fn running_maximum_gives_the_merged_order_of_coordinate_inputs() {
        use crate::io::merged::JavaHeap;
        use alnsort_markdup::dist::merge_order::{order_places, Place, RunningMax};
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut below = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut exact, mut ties, mut interleaved) = (0, 0, 0);
        for _ in 0..3000 {
            let inputs = 2 + below(3) as usize;
            let names = 4 + below(40);
            let recs: Vec<Vec<Vec<u8>>> = (0..inputs)
                .map(|_| {
                    let mut v = Vec::new();
                    for pos in 0..3 {
                        for strand in [0u16, flags::REVERSE] {
                            for _ in 0..below(4) {
                                let name = format!("r{}", below(names));
                                let flag = strand | [0x41, 0x81, 0x1][below(3) as usize];
                                v.push(rec(name.as_bytes(), flag, 0, pos));
                            }
                        }
                    }
                    v
                })
                .collect();
            // htsjdk's merge, as `MergedStream::for_each_by` runs it.
            let mut next = vec![0usize; inputs];
            let head = |next: &[usize], i: usize| recs[i].get(next[i]);
            let mut heap = JavaHeap::default();
            let cmp = |next: &[usize], a: usize, b: usize| {
                htsjdk_coordinate_cmp(head(next, a).unwrap(), head(next, b).unwrap())
            };
            for i in 0..inputs {
                if head(&next, i).is_some() {
                    heap.offer(i, |a, b| cmp(&next, a, b));
                }
            }
            let mut merged = Vec::new();
            while let Some(i) = heap.poll(|a, b| cmp(&next, a, b)) {
                merged.push((i as u32, next[i] as i64));
                next[i] += 1;
                if head(&next, i).is_some() {
                    heap.offer(i, |a, b| cmp(&next, a, b));
                }
            }
            // Each input alone: its records' running maxima.
            let places: Vec<Place> = recs
                .iter()
                .enumerate()
                .flat_map(|(i, v)| {
                    let mut m = RunningMax::default();
                    v.iter()
                        .enumerate()
                        .map(|(o, r)| Place {
                            input: i as u32,
                            ordinal: o as i64,
                            max: m
                                .push(&MergeKey::of(&RecordRef::with_block_size(r)))
                                .clone(),
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            match order_places(&places) {
                Ok(order) => {
                    let got: Vec<(u32, i64)> = order
                        .iter()
                        .map(|&p| (places[p].input, places[p].ordinal))
                        .collect();
                    assert_eq!(got, merged);
                    exact += 1;
                    // Not the order of the records' own keys (and input):
                    // a smaller record waited behind a larger one.
                    let mut own: Vec<(u32, i64)> = merged.clone();
                    own.sort_by(|a, b| {
                        let r = |p: &(u32, i64)| &recs[p.0 as usize][p.1 as usize];
                        htsjdk_coordinate_cmp(r(a), r(b)).then(a.cmp(b))
                    });
                    interleaved += (own != merged) as u32;
                }
                Err(t) => {
                    assert_ne!(t.a.0, t.b.0);
                    let at = |(i, o): (u32, i64)| {
                        &places
                            .iter()
                            .find(|p| (p.input, p.ordinal) == (i, o))
                            .unwrap()
                            .max
                    };
                    assert_eq!(at(t.a).htsjdk_cmp(at(t.b)), Ordering::Equal);
                    ties += 1;
                }
            }
        }
        assert!(
            exact > 1000 && ties > 100 && interleaved > 500,
            "{exact} {ties} {interleaved}"
        );
    }

    #[test]
    fn queryname_comparator_is_htsjdks() {
        use Ordering::*;
        // Names by bytes (not samtools' natural order: "r10" < "r9").
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"r10", 0, 0, 0), &rec(b"r9", 0, 0, 0)),
            Less
        );
        // Same name: first of pair before second, paired before unpaired.
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0x41, 0, 0), &rec(b"a", 0x81, 0, 0)),
            Less
        );
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0, 0, 0), &rec(b"a", 0x41, 0, 0)),
            Greater
        );
        // Then forward before reverse, primary before secondary.
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0x10, 0, 0), &rec(b"a", 0, 0, 0)),
            Greater
        );
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0x100, 0, 0), &rec(b"a", 0, 0, 0)),
            Greater
        );
        assert_eq!(
            htsjdk_queryname_cmp(&rec(b"a", 0, 0, 0), &rec(b"a", 0, 0, 0)),
            Equal
        );
    }

    #[test]
    fn coordinate_comparator_is_htsjdks() {
        use Ordering::*;
        // No reference last; then position; forward first; then name.
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"a", 4, -1, -1), &rec(b"b", 0, 2, 5)),
            Greater
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"z", 0, 0, 5), &rec(b"a", 0, 0, 6)),
            Less
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"a", 0x10, 0, 5), &rec(b"z", 0, 0, 5)),
            Greater
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"z", 0, 0, 5), &rec(b"a", 0, 0, 5)),
            Greater
        );
        assert_eq!(
            htsjdk_coordinate_cmp(&rec(b"a", 0x41, 0, 5), &rec(b"a", 0x81, 0, 5)),
            Less
        );
    }

    #[test]
    fn base36_is_htsjdks() {
        assert_eq!(htsjdk_base36(0), "0");
        assert_eq!(htsjdk_base36(11), "B");
        // Most significant digit first.
        assert_eq!(htsjdk_base36(36), "10");
        assert_eq!(htsjdk_base36(36 * 36 + 35), "10Z");
    }

    fn header(lines: &[&str]) -> Header {
        alnsort_bam::header::parse_sam_header(lines.iter().map(|l| l.as_bytes())).unwrap()
    }

    fn text(h: &Header) -> Vec<String> {
        h.lines()
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect()
    }

    /// The header Picard 3.4.0 wrote for these two inputs (observed with
    /// `MarkDuplicates I=a.bam I=b.bam`, its own @PG line left out).
    #[test]
    fn header_merge_is_htsjdks() {
        let a = header(&[
            "@HD\tVN:1.5\tSO:coordinate\tSS:coordinate:foo",
            "@SQ\tSN:chr1\tLN:100000\tM5:d41d8cd98f00b204e9800998ecf8427e",
            "@RG\tID:rg1\tSM:s\tLB:libA",
            "@RG\tID:rg2\tSM:s\tLB:libB",
            "@PG\tID:bwa\tPN:bwa\tCL:bwa a",
            "@PG\tID:sam\tPN:samtools\tPP:bwa",
            "@CO\tcomment A",
        ]);
        let b = header(&[
            "@HD\tVN:1.6\tSO:coordinate",
            "@SQ\tSN:chr1\tLN:100000\tM5:d41d8cd98f00b204e9800998ecf8427e",
            "@RG\tID:rg1\tSM:s\tLB:libC",
            "@RG\tID:rg2\tSM:s\tLB:libB",
            "@RG\tID:rg0\tSM:t\tLB:libA",
            "@PG\tID:bwa\tPN:bwa\tCL:bwa b",
            "@PG\tID:sam\tPN:samtools\tPP:bwa",
            "@CO\tcomment B",
        ]);
        let paths = ["a.bam".to_string(), "b.bam".to_string()];
        let m = HtsjdkMerge::new(&[a, b], &paths, "coordinate").unwrap();
        assert_eq!(
            text(&m.header),
            [
                "@HD\tVN:1.6\tGO:none\tSO:coordinate",
                "@SQ\tSN:chr1\tLN:100000\tM5:d41d8cd98f00b204e9800998ecf8427e",
                "@RG\tID:rg0\tSM:t\tLB:libA",
                "@RG\tID:rg1\tSM:s\tLB:libA",
                "@RG\tID:rg1.1\tSM:s\tLB:libC",
                "@RG\tID:rg2\tSM:s\tLB:libB",
                "@PG\tID:bwa\tPN:bwa\tCL:bwa a",
                "@PG\tID:bwa.1\tPN:bwa\tCL:bwa b",
                "@PG\tID:sam\tPN:samtools\tPP:bwa",
                "@PG\tID:sam.3\tPN:samtools\tPP:bwa.1",
                "@CO\tcomment A",
                "@CO\tcomment B",
            ]
        );
        // b's records: rg1 renamed, rg2 kept; a PG tag naming no @PG line
        // of b's header dropped.
        let mut rec = rec(b"q1", 0, 0, 5);
        let tags = b"RGZrg1\0PGZzz\0";
        rec.extend_from_slice(tags);
        let bs = (rec.len() - 4) as u32;
        rec[..4].copy_from_slice(&bs.to_le_bytes());
        let mut buf = Vec::new();
        assert!(m.translate(1, &rec, 1, &mut buf).unwrap());
        assert_eq!(
            crate::markdup::decisions::string_tag(&buf, *b"RG"),
            Some(&b"rg1.1"[..])
        );
        assert_eq!(crate::markdup::decisions::string_tag(&buf, *b"PG"), None);
        assert_eq!(
            u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize,
            buf.len() - 4
        );
        // a's rg1 stays.
        let mut rec_a = rec.clone();
        rec_a.truncate(rec.len() - tags.len());
        rec_a.extend_from_slice(b"RGZrg1\0PGZsam\0");
        assert!(!m.translate(0, &rec_a, 1, &mut buf).unwrap());
    }

    #[test]
    fn several_inputs_are_cut_into_tasks_only_where_that_is_picards_answer() {
        let sq = "@SQ\tSN:chr1\tLN:100";
        let coord = "@HD\tVN:1.6\tSO:coordinate";
        let paths = ["a.bam".to_string(), "b.bam".to_string()];
        let plan = |a: &[&str], b: &[&str]| {
            SeveralInputs::new(&paths, &[header(a), header(b)], Default::default()).unwrap()
        };
        // Libraries apart (an @RG without LB is the unknown library).
        let apart = plan(
            &[coord, sq, "@RG\tID:x\tLB:libA"],
            &[coord, sq, "@RG\tID:x\tLB:libB", "@RG\tID:y"],
        );
        assert_eq!(apart.order, InputOrder::Coordinate);
        assert_eq!(apart.tasks_refusal(), None);
        // The clashing ID x is renamed for b's records.
        assert_ne!(
            apart.translations[1].known_read_group(b"x"),
            Some(&b"x"[..])
        );
        assert_eq!(apart.translations[1].known_read_group(b"z"), None);
        // Lanes of one library.
        let lanes = plan(
            &[coord, sq, "@RG\tID:x.1\tLB:libA"],
            &[coord, sq, "@RG\tID:x.2\tLB:libA"],
        );
        // Lanes of one library: decided by the tasks in Picard's merged
        // order; libraries apart need no such order.
        assert_eq!(lanes.tasks_refusal(), None);
        assert!(lanes.keeps_merge_order());
        assert!(!apart.keeps_merge_order());
        // No @RG in either: the unknown library in both.
        let none = plan(&[coord, sq], &[coord, sq]);
        assert_eq!(none.tasks_refusal(), None);
        assert!(none.keeps_merge_order());
        // Name-grouped inputs.
        let grouped = plan(&[sq, "@RG\tID:x\tLB:libA"], &[sq, "@RG\tID:y\tLB:libB"]);
        assert_eq!(grouped.order, InputOrder::Queryname);
        assert!(grouped.tasks_refusal().unwrap().contains("grouped by name"));
    }

    #[test]
    fn header_merge_refuses_what_htsjdk_refuses() {
        let a = header(&["@HD\tVN:1.6\tSO:coordinate", "@SQ\tSN:chr1\tLN:100"]);
        let b = header(&["@HD\tVN:1.6\tSO:coordinate", "@SQ\tSN:chr1\tLN:101"]);
        let paths = ["a.bam".to_string(), "b.bam".to_string()];
        let e = HtsjdkMerge::new(&[a.clone(), b], &paths, "coordinate").unwrap_err();
        assert!(
            e.to_string().starts_with("b.bam: its @SQ lines differ"),
            "{e}"
        );
        let c = header(&[
            "@HD\tVN:1.6\tSO:coordinate",
            "@SQ\tSN:chr1\tLN:100",
            "@PG\tID:x\tPN:x\tPP:nowhere",
        ]);
        let e = HtsjdkMerge::new(&[a, c], &paths, "coordinate").unwrap_err();
        assert!(e.to_string().contains("PP:nowhere"), "{e}");
    }
}
