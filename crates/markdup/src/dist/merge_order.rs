//! Picard's merged-stream order of the records of several
//! coordinate-sorted inputs, from each input alone (lanes of one library).
//!
//! Picard reads several `I=` through htsjdk's `MergingSamRecordIterator`:
//! a `java.util.PriorityQueue` over each input's next record, compared by
//! `SAMRecordCoordinateComparator` ([`MergeKey::cmp`]), whose `poll`
//! returns a smallest head. The place of a record in that stream is the
//! last tie-break of Picard's read ends. A coordinate-sorted input is
//! sorted by (reference, position, strand) (samtools' `bam1_cmp_core`),
//! the comparator's first three fields, but not by the rest (name, flags,
//! mapping quality, mate, insert size). Such a merge still orders two
//! records of two inputs by each one's *running maximum* (the largest
//! record, by the comparator, of its input up to it): if `b` of input B
//! is still waiting when `a` of input A leaves, `a` is no larger than
//! B's head, which is no larger than `b`'s running maximum; and each
//! earlier record of A left while a record of B up to `b` was B's head,
//! so it too is no larger than `b`'s running maximum. So a record whose
//! running maximum is the strictly smaller leaves first, whichever input
//! it is in; only equal running maxima of two inputs (records identical
//! in every compared field in both) are ordered by Java's heap, which no
//! input alone knows ([`order_places`] reports them: the decision then
//! goes to one task). The running maximum is not restarted per (reference,
//! position, strand): an input's records grow in those fields, so its
//! maximum is always one of the current position's records.
//!
//! A split knows the running maximum of its records from its own records
//! only; the input's is the larger of that and the largest record of the
//! input's earlier splits ([`priors`], [`with_prior`]): the boundary
//! fix-up.

use std::cmp::Ordering;

use alnsort_bam::record::{flags, RecordRef};

use crate::MarkdupError;

/// The fields of one record that htsjdk's `SAMRecordCoordinateComparator`
/// compares; the name owned (`Vec<u8>`, kept and sent between tasks) or
/// borrowed from the record (`&[u8]`, compared as it is read).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MergeKey<N = Vec<u8>> {
    pub ref_id: i32,
    /// 0-based position (the comparator's 1-based start, less one).
    pub pos: i32,
    pub flag: u16,
    pub mapq: u8,
    pub mate_ref: i32,
    pub mate_pos: i32,
    pub tlen: i32,
    pub name: N,
}

/// Bytes of a [`MergeKey`] before its name (whose length they end with).
pub(crate) const KEY_FIXED: usize = 4 + 4 + 2 + 1 + 4 + 4 + 4 + 4;

/// The name's length, from a key's fixed bytes.
pub(crate) fn key_name_len(fixed: &[u8; KEY_FIXED]) -> usize {
    u32::from_le_bytes(fixed[23..27].try_into().expect("sized")) as usize
}

impl<'a> MergeKey<&'a [u8]> {
    /// The key of a BAM record, its name borrowed.
    pub fn of(r: &RecordRef<'a>) -> Self {
        MergeKey {
            ref_id: r.ref_id(),
            pos: r.pos(),
            flag: r.flag(),
            mapq: r.mapq(),
            mate_ref: r.next_ref_id(),
            mate_pos: r.next_pos(),
            tlen: r.tlen(),
            name: r.read_name(),
        }
    }

    /// The key with its name copied.
    pub fn to_owned(&self) -> MergeKey {
        self.with_name(self.name.to_vec())
    }
}

impl<N: AsRef<[u8]>> MergeKey<N> {
    /// The same fields with the name `name`.
    fn with_name<M>(&self, name: M) -> MergeKey<M> {
        MergeKey {
            ref_id: self.ref_id,
            pos: self.pos,
            flag: self.flag,
            mapq: self.mapq,
            mate_ref: self.mate_ref,
            mate_pos: self.mate_pos,
            tlen: self.tlen,
            name,
        }
    }

    /// htsjdk's `SAMRecordCoordinateComparator.compare`: reference (no
    /// reference last, and then the position is not compared), start,
    /// forward before reverse, then name (Java's `String.compareTo`: byte
    /// order for the ASCII of SAM names), flags, mapping quality, mate
    /// reference, mate start, insert size.
    pub fn htsjdk_cmp<M: AsRef<[u8]>>(&self, o: &MergeKey<M>) -> Ordering {
        let place = match (self.ref_id == -1, o.ref_id == -1) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => self.ref_id.cmp(&o.ref_id).then(self.pos.cmp(&o.pos)),
        };
        let (ra, rb) = (self.flag & flags::REVERSE, o.flag & flags::REVERSE);
        place
            .then(ra.cmp(&rb))
            .then_with(|| self.name.as_ref().cmp(o.name.as_ref()))
            .then(self.flag.cmp(&o.flag))
            .then(self.mapq.cmp(&o.mapq))
            .then(self.mate_ref.cmp(&o.mate_ref))
            .then(self.mate_pos.cmp(&o.mate_pos))
            .then(self.tlen.cmp(&o.tlen))
    }
}

impl MergeKey {
    /// Appends the key's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ref_id.to_le_bytes());
        out.extend_from_slice(&self.pos.to_le_bytes());
        out.extend_from_slice(&self.flag.to_le_bytes());
        out.push(self.mapq);
        out.extend_from_slice(&self.mate_ref.to_le_bytes());
        out.extend_from_slice(&self.mate_pos.to_le_bytes());
        out.extend_from_slice(&self.tlen.to_le_bytes());
        out.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.name);
    }

    /// The key encoded at `block[at..]`, and the byte after it.
    pub fn decode(block: &[u8], at: usize) -> Result<(MergeKey, usize), MarkdupError> {
        let short = || MarkdupError::BadBlock {
            what: "merge keys",
            len: block.len(),
            at,
        };
        let f = block.get(at..at + KEY_FIXED).ok_or_else(short)?;
        let i32_ = |s: &[u8]| i32::from_le_bytes(s.try_into().expect("sized"));
        let len = key_name_len(f.try_into().expect("sized"));
        let name_at = at + KEY_FIXED;
        let name = block.get(name_at..name_at + len).ok_or_else(short)?;
        Ok((
            MergeKey {
                ref_id: i32_(&f[0..4]),
                pos: i32_(&f[4..8]),
                flag: u16::from_le_bytes(f[8..10].try_into().expect("sized")),
                mapq: f[10],
                mate_ref: i32_(&f[11..15]),
                mate_pos: i32_(&f[15..19]),
                tlen: i32_(&f[19..23]),
                name: name.to_vec(),
            },
            name_at + len,
        ))
    }
}

/// The running maximum of one input's records in input order, by
/// [`MergeKey::cmp`].
#[derive(Debug, Default)]
pub struct RunningMax {
    max: Option<MergeKey>,
}

impl RunningMax {
    /// Takes the input's next record; gives its running maximum (the
    /// name is copied only when the record is a new maximum).
    pub fn push(&mut self, key: &MergeKey<&[u8]>) -> &MergeKey {
        match &mut self.max {
            Some(m) if m.htsjdk_cmp(key) != Ordering::Less => {}
            slot => *slot = Some(key.to_owned()),
        }
        self.max.as_ref().expect("set above")
    }

    /// The largest record so far (`None`: none yet).
    pub fn max(&self) -> Option<&MergeKey> {
        self.max.as_ref()
    }
}

/// For each split, given its input and the largest record of the split
/// alone ([`RunningMax::max`] after its last record; splits in input
/// order, an input's splits in order), the largest record of its input's
/// earlier splits: its *prior*.
pub fn priors(splits: &[(usize, Option<&MergeKey>)]) -> Vec<Option<MergeKey>> {
    let mut out = Vec::with_capacity(splits.len());
    let mut current: Option<(usize, Option<MergeKey>)> = None;
    for &(input, largest) in splits {
        let before = match &current {
            Some((i, m)) if *i == input => m.clone(),
            _ => None,
        };
        out.push(before.clone());
        let after = match (before, largest) {
            (Some(b), Some(l)) if b.htsjdk_cmp(l) != Ordering::Less => Some(b),
            (b, None) => b,
            (_, Some(l)) => Some(l.clone()),
        };
        current = Some((input, after));
    }
    out
}

/// A record's running maximum in its input, from the one its split gave
/// (`local`) and the split's prior.
pub fn with_prior(local: MergeKey, prior: Option<&MergeKey>) -> MergeKey {
    match prior {
        Some(p) if p.htsjdk_cmp(&local) == Ordering::Greater => p.clone(),
        _ => local,
    }
}

/// What the tasks need to put the records of several coordinate-sorted
/// inputs in Picard's merged order: each split's input and prior (splits
/// numbered across the inputs, in input order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeOrder {
    pub split_input: Vec<u32>,
    pub priors: Vec<Option<MergeKey>>,
}

impl MergeOrder {
    /// From each split's input and largest record ([`super::SplitShare::largest`]).
    pub fn new(splits: &[(usize, Option<&MergeKey>)]) -> MergeOrder {
        MergeOrder {
            split_input: splits.iter().map(|s| s.0 as u32).collect(),
            priors: priors(splits),
        }
    }

    /// The input of the record numbered `ordinal` ([`super::ordinal`]).
    pub fn input_of(&self, ordinal: i64) -> Result<u32, MarkdupError> {
        let (split, _) = super::split_of(ordinal as u64);
        self.split_input
            .get(split)
            .copied()
            .ok_or(MarkdupError::SplitBeyond {
                split,
                splits: self.split_input.len(),
            })
    }

    /// The place of record `ordinal`, whose running maximum within its
    /// split is `local`.
    pub fn place(&self, ordinal: i64, local: MergeKey) -> Result<Place, MarkdupError> {
        let input = self.input_of(ordinal)?;
        let (split, _) = super::split_of(ordinal as u64);
        Ok(Place {
            input,
            ordinal,
            max: with_prior(local, self.priors[split].as_ref()),
        })
    }
}

/// A record as the merged order needs it: its input, its [`super::ordinal`]
/// (growing with input order) and its running maximum in its input.
#[derive(Clone, Debug)]
pub struct Place {
    pub input: u32,
    pub ordinal: i64,
    pub max: MergeKey,
}

/// Two records of two inputs whose running maxima are equal: Java's heap
/// orders them, which the inputs alone do not tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeTie {
    pub a: (u32, i64),
    pub b: (u32, i64),
    pub name: Vec<u8>,
}

/// `places` (distinct records) in the order of Picard's merged stream:
/// the indexes of `places`, sorted; or the first tie found.
pub fn order_places(places: &[Place]) -> Result<Vec<usize>, MergeTie> {
    let mut order: Vec<usize> = (0..places.len()).collect();
    // Within one input a running maximum never falls, so (maximum, input,
    // ordinal) keeps each input's order; across inputs it is the merged
    // order wherever the maxima differ.
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (&places[a], &places[b]);
        a.max
            .htsjdk_cmp(&b.max)
            .then(a.input.cmp(&b.input))
            .then(a.ordinal.cmp(&b.ordinal))
    });
    for w in order.windows(2) {
        let (a, b) = (&places[w[0]], &places[w[1]]);
        if a.input != b.input && a.max.htsjdk_cmp(&b.max) == Ordering::Equal {
            return Err(MergeTie {
                a: (a.input, a.ordinal),
                b: (b.input, b.ordinal),
                name: a.max.name.clone(),
            });
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl MergeKey {
        fn borrowed(&self) -> MergeKey<&[u8]> {
            self.with_name(&self.name[..])
        }
    }

    fn key(pos: i32, reverse: bool, name: &str, flag: u16) -> MergeKey {
        MergeKey {
            ref_id: 0,
            pos,
            flag: flag | if reverse { flags::REVERSE } else { 0 },
            mapq: 60,
            mate_ref: 0,
            mate_pos: 0,
            tlen: 0,
            name: name.as_bytes().to_vec(),
        }
    }

    #[test]
    fn compares_as_htsjdk() {
        let a = key(10, false, "b", 0);
        assert_eq!(a.htsjdk_cmp(&key(11, false, "a", 0)), Ordering::Less);
        assert_eq!(a.htsjdk_cmp(&key(10, true, "a", 0)), Ordering::Less);
        assert_eq!(a.htsjdk_cmp(&key(10, false, "a", 0)), Ordering::Greater);
        assert_eq!(a.htsjdk_cmp(&key(10, false, "b", 1)), Ordering::Less);
        let unplaced = |pos| MergeKey {
            ref_id: -1,
            pos,
            ..key(0, false, "a", 0)
        };
        assert_eq!(unplaced(5).htsjdk_cmp(&unplaced(1)), Ordering::Equal);
        assert_eq!(
            unplaced(0).htsjdk_cmp(&key(1 << 30, false, "z", 0)),
            Ordering::Greater
        );
    }

    #[test]
    fn encodes_and_decodes() {
        let mut b = Vec::new();
        let (k1, k2) = (key(3, true, "r1", 99), key(-1, false, "", 0));
        k1.encode(&mut b);
        k2.encode(&mut b);
        let (d1, at) = MergeKey::decode(&b, 0).unwrap();
        let (d2, end) = MergeKey::decode(&b, at).unwrap();
        assert_eq!((d1, d2, end), (k1, k2, b.len()));
        assert!(matches!(
            MergeKey::decode(&b[..b.len() - 1], at),
            Err(MarkdupError::BadBlock { .. })
        ));
    }

    #[test]
    fn prior_of_a_split_is_the_largest_of_its_inputs_earlier_splits() {
        let (a, b, c) = (
            key(1, false, "z", 0),
            key(2, false, "a", 0),
            key(2, false, "b", 0),
        );
        let got = priors(&[
            (0, Some(&a)),
            (0, None),
            (0, Some(&c)),
            (0, Some(&b)),
            (1, Some(&b)),
        ]);
        assert_eq!(
            got,
            vec![None, Some(a.clone()), Some(a), Some(c.clone()), None]
        );
        assert_eq!(
            with_prior(b.clone(), got[3].as_ref()),
            got[3].clone().unwrap()
        );
        assert_eq!(with_prior(c.clone(), Some(&b)), c);
    }

    #[test]
    fn orders_by_running_maximum_and_finds_ties() {
        let mut m = RunningMax::default();
        // Input 0 at one position: names d, a (running max d, d).
        let p0: Vec<Place> = ["d", "a"]
            .iter()
            .enumerate()
            .map(|(i, n)| Place {
                input: 0,
                ordinal: i as i64,
                max: m.push(&key(5, false, n, 0).borrowed()).clone(),
            })
            .collect();
        // Input 1: c (before input 0's d), then e.
        let mut m = RunningMax::default();
        let p1: Vec<Place> = ["c", "e"]
            .iter()
            .enumerate()
            .map(|(i, n)| Place {
                input: 1,
                ordinal: i as i64,
                max: m.push(&key(5, false, n, 0).borrowed()).clone(),
            })
            .collect();
        let all: Vec<Place> = p0.iter().chain(&p1).cloned().collect();
        // c, d, a, e: the "a" of input 0 waits behind its input's "d".
        assert_eq!(order_places(&all).unwrap(), vec![2, 0, 1, 3]);
        let mut tied = all.clone();
        tied[3].max = tied[0].max.clone();
        let t = order_places(&tied).unwrap_err();
        assert_eq!(t.name, b"d");
        assert_ne!(t.a.0, t.b.0);
    }
}
