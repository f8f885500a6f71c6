//! Several inputs as Picard reads them together: one semantics for all, the same dictionaries, their read groups and libraries in the merged header's terms.

use crate::error::{bail, Context, Result};
use alnsort_bam::header::Header;
use alnsort_bam::header_merge::{HeaderMerger, MergeOptions, Translation};
use alnsort_markdup::InputOrder;
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
    pub fn new(paths: &[String], headers: &[Header], opts: MergeOptions) -> Result<SeveralInputs> {
        let coordinate: Vec<bool> = headers.iter().map(says_coordinate).collect();
        let order = if coordinate.iter().all(|&c| c) {
            InputOrder::Coordinate
        } else if coordinate.iter().all(|&c| !c) {
            InputOrder::Queryname
        } else {
            let (c, n): (Vec<_>, Vec<_>) = paths.iter().zip(&coordinate).partition(|(_, &c)| c);
            bail!(Refused,
                "--markdup with several inputs reads them all with one of Picard's semantics, but {} says \
                 SO:coordinate and {} does not: give inputs that are all coordinate-sorted or all grouped by name",
                c[0].0,
                n[0].0
            );
        };
        let dict = |h: &Header| -> Vec<(Vec<u8>, u64)> {
            h.refs().iter().map(|r| (r.name.clone(), r.len)).collect()
        };
        let first = dict(&headers[0]);
        for (p, h) in paths.iter().zip(headers).skip(1) {
            if dict(h) != first {
                bail!(Refused,
                    "--markdup with several inputs needs the same @SQ lines, in the same order, in every input \
                     (Picard's header merge and samtools' order references differently otherwise), but those of {p} \
                     differ from those of {}",
                    paths[0]
                );
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
                .with_context(|| format!("{p}: merging its header"))?;
            let mut libs = BTreeSet::new();
            for (id, fields) in read_groups(h) {
                let merged = t.read_group(&id).to_vec();
                let lb = fields.iter().find(|f| f.starts_with(b"LB:"));
                libs.insert(
                    lb.map_or(alnsort_markdup::UNKNOWN_LIBRARY.to_string(), |l| {
                        String::from_utf8_lossy(&l[3..]).into_owned()
                    }),
                );
                match seen.get(&fields) {
                    Some(first) if *first != merged => aliases.push((merged, first.clone())),
                    Some(_) => {}
                    None => {
                        seen.insert(fields, merged);
                    }
                }
            }
            if libs.is_empty() {
                libs.insert(alnsort_markdup::UNKNOWN_LIBRARY.to_string());
            }
            translations.push(t);
            libraries.push(libs);
        }
        let header = merger
            .finish(false)
            .context("merging the inputs' headers")?;
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
    /// [`crate::stages::markdup::walk_refusal`]).
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
