//! htsjdk's header merge, as Picard merges the headers of several inputs (`SamFileHeaderMerger`): `@RG` and `@PG` records merged by identity, clashing IDs renamed with base-36 suffixes, and each record's `RG`/`PG` tags translated.

use crate::header::{Header, HeaderError};
use crate::htsjdk::tags::insert_at;
use crate::{RecordMut, RecordRef};
use std::collections::{HashMap, HashSet};

/// What htsjdk refuses in a header merge (inputs whose dictionaries differ,
/// a record naming a read group or program its header lacks while IDs
/// clash), or a merged header that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum HtsjdkMergeError {
    /// What htsjdk stops on, with the text saying which file and record.
    #[error("{0}")]
    Refused(String),
    /// The merged lines do not make a header (cannot happen for inputs
    /// that are themselves valid).
    #[error("the inputs' merged header")]
    Header(#[source] HeaderError),
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
pub fn htsjdk_base36(n: u64) -> String {
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
    pub fn new(
        headers: &[Header],
        paths: &[String],
        sort_order: &str,
    ) -> Result<HtsjdkMerge, HtsjdkMergeError> {
        let n = headers.len();
        check_dictionaries(headers, paths)?;
        let (merged_pg, pg_tables, pg_collisions) = merge_programs(headers, paths)?;
        // @RG: one level, a counter of its own.
        let mut rg_tables = vec![None; n];
        let mut counter = 0u64;
        let (made, rg_collisions) = merge_header_records(
            &lines_of(headers, paths, b"@RG\t", "@RG")?,
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
        let header = crate::header::parse_sam_header(lines.iter().map(Vec::as_slice))
            .map_err(HtsjdkMergeError::Header)?;
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
    ) -> Result<bool, HtsjdkMergeError> {
        let mut changed = false;
        for (tag, on, tables, kind) in [
            (*b"RG", self.rg_collisions, &self.rg, "@RG"),
            (*b"PG", self.pg_collisions, &self.pg, "@PG"),
        ] {
            if !on {
                continue;
            }
            let cur: &[u8] = if changed { buf } else { rec };
            let Some(old) = RecordRef::with_block_size(cur)
                .aux()
                .find(tag)
                .and_then(|f| f.string())
            else {
                continue;
            };
            let Some(table) = &tables[input] else {
                return Err(HtsjdkMergeError::Refused(format!(
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
                Some(id) => RecordMut::new(buf).set_string(tag, &id, |aux| insert_at(aux, tag)),
                None => {
                    RecordMut::new(buf).remove_tag(tag);
                }
            }
        }
        Ok(changed)
    }
}

/// htsjdk's isSameSequence over the inputs' dictionaries (name, length,
/// and M5 where both lines have one), in the same order.
fn check_dictionaries(headers: &[Header], paths: &[String]) -> Result<(), HtsjdkMergeError> {
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
            return Err(HtsjdkMergeError::Refused(format!(
                "{p}: its @SQ lines differ from those of {} (names, lengths, order or M5); Picard \
                 MarkDuplicates merges several inputs only with the same sequence dictionary \
                 (htsjdk: \"Sequence dictionaries are not the same\")",
                paths[0]
            )));
        }
    }
    Ok(())
}

/// The `kind` lines (`@RG\t`, `@PG\t`) of every input, with the input's
/// number; an ID twice in one header is refused, as htsjdk does.
fn lines_of(
    headers: &[Header],
    paths: &[String],
    kind: &[u8],
    what: &str,
) -> Result<Vec<(usize, HeaderRecord)>, HtsjdkMergeError> {
    let mut out = Vec::new();
    for (i, (h, p)) in headers.iter().zip(paths).enumerate() {
        let mut ids = HashSet::new();
        for l in h.lines().iter().filter(|l| l.starts_with(kind)) {
            let Some(r) = HeaderRecord::parse(l) else {
                continue;
            };
            if !ids.insert(r.id.clone()) {
                return Err(HtsjdkMergeError::Refused(format!(
                    "{p}: its header has more than one {what} line with ID:{} (htsjdk refuses it)",
                    String::from_utf8_lossy(&r.id)
                )));
            }
            out.push((i, r));
        }
    }
    Ok(out)
}

/// The renaming tables of one kind of header record, per input.
type IdTables = Vec<Option<HashMap<Vec<u8>, Vec<u8>>>>;

/// The `@PG` records merged as htsjdk merges them: the roots, then level by
/// level the programs whose PP names one of the level just merged (in the
/// same input), their PP following the renames. Returns the merged records
/// sorted by ID, each input's renames, and whether any ID was renamed.
fn merge_programs(
    headers: &[Header],
    paths: &[String],
) -> Result<(Vec<HeaderRecord>, IdTables, bool), HtsjdkMergeError> {
    // @PG: the roots, then level by level the programs whose PP names
    // one of the level just merged (in the same input), their PP
    // following the renames.
    let mut pg_tables: Vec<Option<HashMap<Vec<u8>, Vec<u8>>>> = vec![None; headers.len()];
    let mut taken = HashSet::new();
    let mut counter = 0u64;
    let mut pg_collisions = false;
    let mut merged_pg = Vec::new();
    let mut left = lines_of(headers, paths, b"@PG\t", "@PG")?;
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
        let (made, c) = merge_header_records(&current, &mut taken, &mut counter, &mut pg_tables);
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
        return Err(HtsjdkMergeError::Refused(format!(
            "{}: its @PG line ID:{} names PP:{}, which no @PG line of that header has (htsjdk's \
             header merge refuses it)",
            paths[*i],
            String::from_utf8_lossy(&r.id),
            String::from_utf8_lossy(r.attr(b"PP").unwrap_or_default())
        )));
    }
    merged_pg.sort_by(|a, b| a.id.cmp(&b.id));
    Ok((merged_pg, pg_tables, pg_collisions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_tag(rec: &[u8], tag: [u8; 2]) -> Option<&[u8]> {
        RecordRef::with_block_size(rec).aux().find(tag)?.string()
    }

    fn header(lines: &[&str]) -> Header {
        crate::header::parse_sam_header(lines.iter().map(|l| l.as_bytes())).unwrap()
    }

    fn text(h: &Header) -> Vec<String> {
        h.lines()
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect()
    }

    #[test]
    fn base36_is_htsjdks() {
        assert_eq!(htsjdk_base36(0), "0");
        assert_eq!(htsjdk_base36(11), "B");
        // Most significant digit first.
        assert_eq!(htsjdk_base36(36), "10");
        assert_eq!(htsjdk_base36(36 * 36 + 35), "10Z");
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
        let sq = header(&["@SQ\tSN:chr1\tLN:100000"]);
        let parse = |tags: &str| {
            let line = format!("q1\t0\tchr1\t6\t0\t*\t*\t0\t0\t*\t*\t{tags}");
            let mut rec = Vec::new();
            crate::sam_parse::parse_sam_record(line.as_bytes(), &sq, &sq.ref_lookup(), &mut rec)
                .unwrap();
            rec
        };
        let rec = parse("RG:Z:rg1\tPG:Z:zz");
        let mut buf = Vec::new();
        assert!(m.translate(1, &rec, 1, &mut buf).unwrap());
        assert_eq!(string_tag(&buf, *b"RG"), Some(&b"rg1.1"[..]));
        assert_eq!(string_tag(&buf, *b"PG"), None);
        assert_eq!(
            u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize,
            buf.len() - 4
        );
        // a's rg1 stays.
        let rec_a = parse("RG:Z:rg1\tPG:Z:sam");
        assert!(!m.translate(0, &rec_a, 1, &mut buf).unwrap());
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
