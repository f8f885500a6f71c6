//! Several inputs as Picard reads them together (`I=` more than once): one semantics for all, the same dictionaries, their read groups and libraries in the merged header's terms.

use crate::InputOrder;
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::{HeaderMergeError, HeaderMerger, MergeOptions, Translation};
use std::collections::{BTreeSet, HashMap};

/// The `@HD` sort order of a header says coordinate.
fn says_coordinate(h: &Header) -> bool {
    h.lines()
        .iter()
        .find(|l| l.starts_with(b"@HD"))
        .is_some_and(|l| l.split(|&b| b == b'\t').any(|f| f == b"SO:coordinate"))
}

/// The `@RG` lines of a header as (ID, the line's fields sorted: the
/// read group's identity as htsjdk compares two of them).
fn read_groups(h: &Header) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
    h.lines()
        .iter()
        .filter(|l| l.starts_with(b"@RG\t"))
        .filter_map(|l| {
            let mut fields: Vec<Vec<u8>> = l
                .split(|&b| b == b'\t')
                .skip(1)
                .map(<[u8]>::to_vec)
                .collect();
            let id = fields.iter().find(|f| f.starts_with(b"ID:"))?[3..].to_vec();
            fields.sort();
            Some((id, fields))
        })
        .collect()
}

/// Several inputs Picard cannot mark together, as one-node marking
/// refuses them.
#[derive(Debug, thiserror::Error)]
pub enum SeveralInputsError {
    /// Some inputs say `SO:coordinate` and others do not.
    #[error(
        "--markdup with several inputs reads them all with one of Picard's semantics, but {coordinate} says \
         SO:coordinate and {other} does not: give inputs that are all coordinate-sorted or all grouped by name"
    )]
    MixedOrders { coordinate: String, other: String },
    /// An input's `@SQ` lines are not the first input's.
    #[error(
        "--markdup with several inputs needs the same @SQ lines, in the same order, in every input \
         (Picard's header merge and samtools' order references differently otherwise), but those of {path} \
         differ from those of {first}"
    )]
    Dictionaries { path: String, first: String },
    /// samtools' header merge of the inputs failed (WHAT says where).
    #[error("{what}")]
    HeaderMerge {
        what: String,
        #[source]
        source: HeaderMergeError,
    },
}

impl SeveralInputsError {
    /// Whether the inputs are refused as a combination (not a header that
    /// does not merge): the reason why their marking cannot be cut into
    /// tasks either.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, SeveralInputsError::HeaderMerge { .. })
    }
}

/// Several inputs as Picard reads them together: the semantics all of
/// them get, and their read groups in the merged header's terms (what the
/// one-node marker and every task of the distributed one resolve the
/// records' `RG` tags against).
pub struct SeveralInputs {
    pub order: InputOrder,
    /// The inputs' headers merged (samtools' header merge, the options
    /// given): its `@RG` lines are the read groups the records name once
    /// their `RG` tags are translated.
    pub header: Header,
    /// Read groups (merged IDs) that are one with an earlier one: the same
    /// `@RG` fields in two inputs, one read group in htsjdk's merged header.
    pub aliases: Vec<(Vec<u8>, Vec<u8>)>,
    /// How each input's `RG` IDs map into `header`.
    pub translations: Vec<Translation>,
    /// The libraries each input's header names (Picard's unknown library
    /// for an `@RG` line without `LB`, or an input without `@RG` lines).
    libraries: Vec<BTreeSet<String>>,
}

impl SeveralInputs {
    /// Checks what one-node marking of `paths` (with these `headers`)
    /// checks: one semantics for all, the same dictionaries.
    pub fn new(
        paths: &[String],
        headers: &[Header],
        opts: MergeOptions,
    ) -> Result<SeveralInputs, SeveralInputsError> {
        let coordinate: Vec<bool> = headers.iter().map(says_coordinate).collect();
        let order = if coordinate.iter().all(|&c| c) {
            InputOrder::Coordinate
        } else if coordinate.iter().all(|&c| !c) {
            InputOrder::Queryname
        } else {
            let (c, n): (Vec<_>, Vec<_>) = paths.iter().zip(&coordinate).partition(|(_, &c)| c);
            return Err(SeveralInputsError::MixedOrders {
                coordinate: c[0].0.clone(),
                other: n[0].0.clone(),
            });
        };
        let dict = |h: &Header| -> Vec<(Vec<u8>, u64)> {
            h.refs().iter().map(|r| (r.name.clone(), r.len)).collect()
        };
        let first = dict(&headers[0]);
        for (p, h) in paths.iter().zip(headers).skip(1) {
            if dict(h) != first {
                return Err(SeveralInputsError::Dictionaries {
                    path: p.clone(),
                    first: paths[0].clone(),
                });
            }
        }
        // Read groups: an @RG line an earlier input has too (same fields) is
        // one read group, as in htsjdk's merged header; samtools' merge (the
        // records' RG tags here) renamed it.
        let mut merger = HeaderMerger::new(opts);
        let mut aliases = Vec::new();
        let mut seen: HashMap<Vec<Vec<u8>>, Vec<u8>> = HashMap::new();
        let mut translations = Vec::with_capacity(paths.len());
        let mut libraries = Vec::with_capacity(paths.len());
        for (p, h) in paths.iter().zip(headers) {
            let t = merger
                .add(h)
                .map_err(|source| SeveralInputsError::HeaderMerge {
                    what: format!("{p}: merging its header"),
                    source,
                })?;
            let mut libs = BTreeSet::new();
            for (id, fields) in read_groups(h) {
                let merged = t.read_group(&id).to_vec();
                let lb = fields.iter().find(|f| f.starts_with(b"LB:"));
                libs.insert(lb.map_or(crate::UNKNOWN_LIBRARY.to_string(), |l| {
                    String::from_utf8_lossy(&l[3..]).into_owned()
                }));
                match seen.get(&fields) {
                    Some(first) if *first != merged => aliases.push((merged, first.clone())),
                    Some(_) => {}
                    None => {
                        seen.insert(fields, merged);
                    }
                }
            }
            if libs.is_empty() {
                libs.insert(crate::UNKNOWN_LIBRARY.to_string());
            }
            translations.push(t);
            libraries.push(libs);
        }
        let header = merger
            .finish(false)
            .map_err(|source| SeveralInputsError::HeaderMerge {
                what: "merging the inputs' headers".into(),
                source,
            })?;
        Ok(SeveralInputs {
            order,
            header,
            aliases,
            translations,
            libraries,
        })
    }

    /// Why the duplicate decision of these inputs cannot be cut into tasks
    /// per split and end bucket, or `None` when it can. The tasks number a
    /// record by its input, split and place in the split; Picard numbers
    /// it by its place in its merged stream (htsjdk's
    /// `MergingSamRecordIterator`: a priority queue over the inputs' next
    /// records), and breaks ties between ends by that number. The two
    /// agree wherever two compared ends come from one input. They need not
    /// otherwise: the inputs are not sorted by htsjdk's comparators
    /// (samtools orders records of one position, and names, differently),
    /// so where a record lands depends on the records of every input
    /// around it, and on Java's heap where two inputs' next records compare
    /// equal. Ends are compared only within a library, so coordinate-sorted
    /// inputs whose libraries are apart are decided per bucket exactly
    /// (the records' libraries are checked after the walk:
    /// `alnsort_engine::stages::markdup::walk_refusal`).
    pub fn tasks_refusal(&self) -> Option<String> {
        if self.order == InputOrder::Queryname {
            return Some(
                "the inputs are grouped by name: Picard's merged stream (htsjdk's MergingSamRecordIterator, by \
                 read name) makes one template of a name's records in two inputs, which no split of one input sees"
                    .to_string(),
            );
        }
        None
    }

    /// Whether the tasks must put the records of these inputs in Picard's
    /// merged order (`alnsort_markdup::dist::merge_order`): coordinate-sorted
    /// inputs of which two share a library (lanes of one library), whose
    /// duplicate sets hold records of both, ordered by that stream where
    /// their scores and locations tie. The tasks' splits then carry each
    /// end's running maximum; where two inputs' maxima tie the decision
    /// goes to one task.
    pub fn keeps_merge_order(&self) -> bool {
        self.order == InputOrder::Coordinate
            && self.libraries.iter().enumerate().any(|(i, libs)| {
                self.libraries[i + 1..]
                    .iter()
                    .any(|other| libs.intersection(other).next().is_some())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(lines: &[&str]) -> Header {
        alnsort_bam::header::parse_sam_header(lines.iter().map(|l| l.as_bytes())).unwrap()
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
}
