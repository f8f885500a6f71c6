//! htsjdk's orders of Picard's merge of several inputs: its query-name and coordinate comparators on BAM records, and Java's `PriorityQueue` over the inputs (`JavaHeap`), which breaks their ties.

use crate::dist::merge_order::MergeKey;
use crate::InputOrder;
use alnsort_bam::RecordRef;
use std::cmp::Ordering;

/// htsjdk's comparator of Picard's merge of several inputs in `order`.
pub fn picard_cmp(order: InputOrder) -> fn(&[u8], &[u8]) -> Ordering {
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
    use crate::flags;
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

/// `java.util.PriorityQueue` over input numbers, compared by the caller's
/// `cmp` of their next records: the same sift-up and sift-down steps
/// (OpenJDK's `siftUpComparable`/`siftDownComparable`: an element moves
/// only past strictly greater ones), so ties between inputs are broken as
/// htsjdk's merging iterator breaks them (`poll`, then `offer` of the
/// input it came from).
#[derive(Debug, Default)]
pub struct JavaHeap {
    queue: Vec<usize>,
}

impl JavaHeap {
    pub fn offer(&mut self, x: usize, cmp: impl Fn(usize, usize) -> Ordering) {
        let mut k = self.queue.len();
        self.queue.push(x);
        while k > 0 {
            let parent = (k - 1) >> 1;
            let e = self.queue[parent];
            if cmp(x, e).is_ge() {
                break;
            }
            self.queue[k] = e;
            k = parent;
        }
        self.queue[k] = x;
    }

    pub fn poll(&mut self, cmp: impl Fn(usize, usize) -> Ordering) -> Option<usize> {
        let result = *self.queue.first()?;
        let x = self.queue.pop()?;
        let n = self.queue.len();
        if n > 0 {
            let mut k = 0;
            let half = n >> 1;
            while k < half {
                let mut child = 2 * k + 1;
                let mut c = self.queue[child];
                let right = child + 1;
                if right < n && cmp(c, self.queue[right]).is_gt() {
                    child = right;
                    c = self.queue[child];
                }
                if cmp(x, c).is_le() {
                    break;
                }
                self.queue[k] = c;
                k = child;
            }
            self.queue[k] = x;
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// java.util.PriorityQueue's order, worked by hand from OpenJDK's
    /// siftUp/siftDown: elements that compare equal are not taken in
    /// insertion order once the heap has been reshaped.
    #[test]
    fn java_heap_breaks_ties_as_java() {
        // Two inputs whose next records always tie: the one offered back
        // goes behind the one waiting, so they alternate.
        let mut h = JavaHeap::default();
        let eq = |_: usize, _: usize| std::cmp::Ordering::Equal;
        h.offer(0, eq);
        h.offer(1, eq);
        let mut out = Vec::new();
        for _ in 0..4 {
            let x = h.poll(eq).unwrap();
            out.push(x);
            h.offer(x, eq);
        }
        assert_eq!(out, [0, 1, 0, 1]);
        // Three: poll 0 moves the last (2) to the root, so 2 comes before 1.
        let mut h = JavaHeap::default();
        for i in 0..3 {
            h.offer(i, eq);
        }
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(h.poll(eq).unwrap());
        }
        assert_eq!(out, [0, 2, 1]);
        assert_eq!(h.poll(eq), None);
        // Distinct keys come out in order.
        let keys = [5, 1, 4, 2, 3];
        let by = |a: usize, b: usize| keys[a].cmp(&keys[b]);
        let mut h = JavaHeap::default();
        for i in 0..keys.len() {
            h.offer(i, by);
        }
        let order: Vec<usize> = std::iter::from_fn(|| h.poll(by)).collect();
        assert_eq!(order, [1, 3, 4, 2, 0]);
    }

    /// A record named `name` with `flag` at reference `ref_id` (-1: none)
    /// and 0-based `pos`, through alnsort_bam's SAM parser.
    fn rec(name: &[u8], flag: u16, ref_id: i32, pos: i32) -> Vec<u8> {
        let h = alnsort_bam::header::parse_sam_header(
            [
                "@SQ\tSN:c0\tLN:1000",
                "@SQ\tSN:c1\tLN:1000",
                "@SQ\tSN:c2\tLN:1000",
            ]
            .iter()
            .map(|l| l.as_bytes()),
        )
        .unwrap();
        let rname = match ref_id {
            -1 => "*".to_string(),
            r => format!("c{r}"),
        };
        let line = format!(
            "{}\t{flag}\t{rname}\t{}\t0\t*\t*\t0\t0\t*\t*",
            String::from_utf8_lossy(name),
            pos + 1
        );
        let mut out = Vec::new();
        alnsort_bam::sam_parse::parse_sam_record(line.as_bytes(), &h, &h.ref_lookup(), &mut out)
            .unwrap();
        out
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

    /// The running-maximum order of `dist::merge_order` against htsjdk's
    /// merging iterator as one node runs it (a Java heap over the inputs'
    /// next records, compared by htsjdk's coordinate comparator): random
    /// coordinate-sorted inputs whose records of one position are in no
    /// order of names, so that runs interleave; wherever no two inputs'
    /// running maxima tie, the order is the heap's, and a tie is reported
    /// only between two inputs' equal records.
    #[test]
    fn running_maximum_gives_the_merged_order_of_coordinate_inputs() {
        use crate::dist::merge_order::{order_places, Place, RunningMax};
        use crate::htsjdk::{htsjdk_coordinate_cmp, JavaHeap};
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
                        for strand in [0u16, crate::flags::REVERSE] {
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
}
