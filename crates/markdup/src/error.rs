//! The crate's error type: bad input, blocks cut short between tasks, limits
//! that cannot be kept, and spill files that cannot be written or read.

use crate::dist;
#[cfg(doc)]
use crate::MarkDuplicates;

#[derive(Debug, thiserror::Error)]
pub enum MarkdupError {
    /// Picard numbers libraries in a Java `short`.
    #[error("more than 32767 libraries")]
    TooManyLibraries,
    /// A duplicate set mixes FR/RF optical orientations with another one;
    /// Picard stops with "Found an unexpected orientation".
    #[error("duplicate set at reference {ref_id} position {coordinate} has an unexpected orientation for optical duplicate detection")]
    UnexpectedOrientation { ref_id: i32, coordinate: i32 },
    /// A block of ends, halves, slots or indexes handed from another task
    /// of the distributed marking ([`dist`]) is cut short.
    #[error("a block of {what} of {len} bytes ends within the entry at byte {at}: it was cut short on its way between tasks")]
    BadBlock {
        what: &'static str,
        len: usize,
        at: usize,
    },
    /// A read end of the distributed marking names a split beyond those
    /// the run has.
    #[error("a read end names split {split}, but the run has {splits} splits: the ends come from another run")]
    SplitBeyond { split: usize, splits: usize },
    /// A split's range numbers (which range of the output each record
    /// went to, from its map) do not fit its outcome.
    #[error("the range numbers of a split cover {got} records, but its duplicate walk has {records}: they come from another run")]
    RangesCount { got: usize, records: u64 },
    /// A record went to a range beyond those the run has.
    #[error("a record went to range {range}, but the run has {partitions} ranges: the range numbers come from another run")]
    RangeBeyond { range: usize, partitions: usize },
    /// Name-grouped input cut into splits: a template of read `name`
    /// begins at `ordinal` ([`dist::ordinal`] of its first record) after
    /// an earlier template of that name (beginning at `earlier`) that
    /// lacks a primary mate: the records of one template are scattered,
    /// which one node refuses ([`crate::grouping::GroupCheck`]).
    #[error(
        "read {}: a template begins at record {} of split {} after a template of that name without both \
         mates (at record {} of split {}): the input is not grouped by name",
        String::from_utf8_lossy(name),
        dist::split_of(*ordinal as u64).1 + 1,
        dist::split_of(*ordinal as u64).0,
        dist::split_of(*earlier as u64).1 + 1,
        dist::split_of(*earlier as u64).0
    )]
    ScatteredTemplate {
        name: Vec<u8>,
        ordinal: i64,
        earlier: i64,
    },
    /// A collector keeping Picard's merge order was given a record without
    /// its comparator fields, or one not keeping it a record with them.
    #[error("a split's records were collected with and without their merge keys: a caller mixed the paths")]
    MergeKeys,
    /// Several coordinate-sorted inputs: two records of two inputs have
    /// equal running maxima by htsjdk's coordinate comparator
    /// ([`dist::merge_order`]), so Java's heap orders them in Picard's
    /// merged stream, which the tasks do not know; one task decides.
    #[error(
        "records of input {} and input {} have equal running maxima (read {}) by htsjdk's coordinate comparator: \
         Java's heap orders them in Picard's merged stream",
        a_input, b_input, String::from_utf8_lossy(name)
    )]
    MergeTie {
        a_input: u32,
        b_input: u32,
        name: Vec<u8>,
    },
    /// Several coordinate-sorted inputs: a template's mates are in two
    /// inputs, which Picard pairs in its merged stream's order.
    #[error(
        "the mates of read {} are in two inputs: Picard pairs them in its merged stream's order",
        String::from_utf8_lossy(name)
    )]
    MatesInTwoInputs { name: Vec<u8> },
    /// Several coordinate-sorted inputs sharing a library: a bucket's read
    /// ends and their records' places, held in memory until all are read
    /// to rank the records in Picard's merged order
    /// ([`MarkDuplicates::decide_merged`]), would take more than half the
    /// marker's limit (the other half is the marker's own, as it spills);
    /// one task decides then, spilling its read ends.
    #[error(
        "ranking the bucket's read ends in Picard's merged order would hold more than {} bytes, half the \
         duplicate marker's limit of {limit} bytes ({held} bytes after {ends} ends; more end buckets make \
         each smaller)",
        limit / 2
    )]
    MergeBeyondLimit {
        held: usize,
        ends: usize,
        limit: usize,
    },
    /// A spill file of the read ends could not be written or read back.
    #[error("{op} {}: {source}", path.display())]
    Spill {
        path: std::path::PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Coordinate-sorted input: the mates waiting for their other half on
    /// the reference being read (those waiting for a later reference are
    /// spilled) leave the read ends too little of the limit.
    #[error(
        "{waiting} mates wait for their other half and take {waiting_bytes} bytes, which leaves the \
         read ends less than {min_bytes} bytes of the duplicate marker's {limit} (mates waiting for \
         a mate on the reference being read are kept in memory; the others and the ends are \
         spilled to disk)"
    )]
    WaitingMatesBeyondLimit {
        waiting: usize,
        waiting_bytes: usize,
        min_bytes: usize,
        limit: usize,
    },
    /// Coordinate-sorted input: a mate waits under a key (reference of its
    /// mate, read group, name) another mate already waits under (a
    /// template twice in the input, or in two merged inputs). Picard
    /// 3.4.0's waiting map for coordinate-sorted input (htsjdk's
    /// `CoordinateSortedPairInfoMap`) stops there.
    #[error(
        "read {name} waits for its mate on reference {mate_ref} in read group {read_group} while \
         another read of that name and read group already waits there: the template is twice in \
         the input (or in two of the inputs). Picard 3.4.0 stops on such coordinate-sorted input \
         (\"Value was put into PairInfoMap more than once\")"
    )]
    WaitingTwice {
        name: String,
        mate_ref: i32,
        read_group: String,
    },
}

impl MarkdupError {
    /// Whether the tasks of several coordinate-sorted inputs cannot put
    /// these records in Picard's merged order ([`dist::merge_order`]), or
    /// not within the marker's limit: the decision then goes to one task,
    /// not an error of the input.
    pub fn needs_one_task(&self) -> bool {
        matches!(
            self,
            MarkdupError::MergeTie { .. }
                | MarkdupError::MatesInTwoInputs { .. }
                | MarkdupError::MergeBeyondLimit { .. }
        )
    }
}
