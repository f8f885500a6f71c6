//! Accumulating an index while records are written. Each pushed record
//! extends the current run of records sharing a bin, the reference's linear
//! index and its mapped/unmapped counts, following the state machine of
//! htslib's `hts_idx_push` so the chunk lists come out identical. Offsets are
//! kept *logical* (`block_index << 16 | offset_in_block`) until `finish`
//! learns where the writer put each compressed block.

use crate::bins::Binning;
use crate::error::IndexError;
use crate::finish::{self, IndexFile};
use crate::khash::BinTable;
use crate::IndexFormat;

/// Marks "no bin yet" (`0xffffffffu` in htslib).
const NO_BIN: u32 = u32::MAX;
/// htslib's initial `last_coor`; only ever compared within one reference.
const NO_COOR: i64 = 0xffff_ffff;
/// Linear-index window not yet touched by any record (`(uint64_t)-1`).
pub(crate) const UNSET: u64 = u64::MAX;
/// Value slot the metadata pseudo-bin occupies in a [`BinTable`]; its data
/// lives in [`RefIndex::meta`].
pub(crate) const META_VALUE: usize = usize::MAX;

/// One record as the writer placed it, in output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRecord {
    /// Reference id; negative for unplaced records.
    pub ref_id: i32,
    /// 0-based leftmost position (BAM `pos`; -1 allowed).
    pub beg: i64,
    /// Exclusive end as htslib's `bam_endpos` gives it: see [`record_end`].
    pub end: i64,
    /// Flag 0x4 is clear.
    pub mapped: bool,
    /// Logical virtual offset of the record's first byte: the block that
    /// holds it, so a record that opens a new block starts at `(i + 1, 0)`,
    /// never at the end of block `i`.
    pub vstart: u64,
    /// Logical virtual offset just past the record; must exceed `vstart`.
    pub vend: u64,
}

/// End position htslib indexes a BAM record under (`bam_endpos`): the
/// alignment's reference span, or one base when the record is unmapped or
/// its CIGAR consumes no reference.
pub fn record_end(beg: i64, reference_span: i64, mapped: bool) -> i64 {
    let span = if mapped && reference_span > 0 {
        reference_span
    } else {
        0
    };
    beg + span.max(1)
}

/// Pack a logical virtual offset: `block_index << 16 | offset_in_block`.
pub fn logical_offset(block_index: u64, offset_in_block: u16) -> u64 {
    (block_index << 16) | u64::from(offset_in_block)
}

/// A chunk `[beg, end)` of virtual offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub beg: u64,
    pub end: u64,
}

/// One bin's chunk list and (CSI) the linear-index offset of its first window.
#[derive(Debug, Clone, Default)]
pub(crate) struct BinData {
    pub chunks: Vec<Chunk>,
    pub loff: u64,
}

/// The metadata pseudo-bin: the reference's span of offsets and its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Meta {
    pub off_beg: u64,
    pub off_end: u64,
    pub n_mapped: u64,
    pub n_unmapped: u64,
}

/// Index data for one reference that has at least one placed record.
#[derive(Debug, Clone, Default)]
pub(crate) struct RefIndex {
    /// Bin number -> index into `bins` (or [`META_VALUE`]), in khash order.
    pub table: BinTable,
    pub bins: Vec<BinData>,
    /// First record offset per `2^min_shift` window; [`UNSET`] if none yet.
    pub linear: Vec<u64>,
    pub meta: Option<Meta>,
}

impl RefIndex {
    /// Append a chunk to `bin` (`insert_to_b`).
    fn add_chunk(&mut self, bin: u32, chunk: Chunk) {
        let bins = &mut self.bins;
        let slot = self.table.insert_with(bin, || {
            bins.push(BinData::default());
            bins.len() - 1
        });
        if let Some(data) = self.bins.get_mut(slot) {
            data.chunks.push(chunk);
        }
    }

    /// Record the metadata pseudo-bin; it takes its place in bin order now.
    /// htslib puts it twice (`insert_to_b` for the offsets, then for the
    /// counts), and `kh_put` grows a full table before it looks the key up,
    /// so the second put can resize (and reorder) the table: it is made here
    /// too.
    fn set_meta(&mut self, meta_bin: u32, meta: Meta) {
        self.table.insert_with(meta_bin, || META_VALUE);
        self.table.insert_with(meta_bin, || META_VALUE);
        self.meta = Some(meta);
    }

    /// Note `offset` as the first record touching windows `beg..end`
    /// (`insert_to_l`).
    fn add_linear(&mut self, beg: i64, end: i64, offset: u64, min_shift: u32) {
        let first = (beg >> min_shift) as usize;
        let last = ((end - 1) >> min_shift) as usize;
        if self.linear.len() <= last {
            self.linear.resize(last + 1, UNSET);
        }
        for window in &mut self.linear[first..=last] {
            if *window == UNSET {
                *window = offset;
            }
        }
    }
}

/// The run state carried between pushes (`idx->z` in htslib).
#[derive(Debug, Clone)]
struct RunState {
    last_bin: u32,
    save_bin: u32,
    last_coor: i64,
    last_tid: i32,
    save_tid: i32,
    /// Start of the current record.
    last_off: u64,
    /// Start of the current same-bin run.
    save_off: u64,
    /// Start of the current reference's records.
    off_beg: u64,
    n_mapped: u64,
    n_unmapped: u64,
}

/// Builds a BAI or CSI index from records pushed in output order.
#[derive(Debug, Clone)]
pub struct IndexBuilder {
    format: IndexFormat,
    binning: Binning,
    refs: Vec<Option<RefIndex>>,
    state: RunState,
    n_no_coor: u64,
    n_records: u64,
    previous_end: u64,
}

impl IndexBuilder {
    /// A builder for a file whose header lists references of these lengths.
    /// For CSI the depth (and, for references past 2^41 bases, `min_shift`)
    /// follows the longest reference as in htslib's `sam_idx_init`.
    pub fn new(format: IndexFormat, ref_lengths: &[u64]) -> Result<IndexBuilder, IndexError> {
        let binning = match format {
            IndexFormat::Bai => Binning::BAI,
            IndexFormat::Csi { min_shift } => {
                Binning::csi_for(min_shift, ref_lengths.iter().copied().max().unwrap_or(0))?
            }
        };
        Ok(IndexBuilder {
            format,
            binning,
            refs: vec![None; ref_lengths.len()],
            state: RunState {
                last_bin: NO_BIN,
                save_bin: NO_BIN,
                last_coor: NO_COOR,
                last_tid: -1,
                save_tid: -1,
                last_off: 0,
                save_off: 0,
                off_beg: 0,
                n_mapped: 0,
                n_unmapped: 0,
            },
            n_no_coor: 0,
            n_records: 0,
            previous_end: 0,
        })
    }

    /// The binning shape in use (`min_shift`, depth).
    pub fn binning(&self) -> Binning {
        self.binning
    }

    /// Records pushed so far.
    pub fn records(&self) -> u64 {
        self.n_records
    }

    /// Add the next record in output order. Errors mean the output cannot
    /// be indexed (samtools fails the same way); the builder is then spent.
    pub fn push(&mut self, rec: &IndexRecord) -> Result<(), IndexError> {
        let record = self.n_records;
        if rec.vend <= rec.vstart || rec.vstart < self.previous_end {
            return Err(IndexError::OffsetsOutOfOrder {
                record,
                previous_end: self.previous_end,
                vstart: rec.vstart,
                vend: rec.vend,
            });
        }
        let placed = rec.ref_id >= 0;
        let tid = if placed { rec.ref_id } else { -1 };
        let (mut beg, mut end) = if placed { (rec.beg, rec.end) } else { (-1, 0) };
        if placed {
            self.check_placed(record, tid, beg, end)?;
        }
        let z = &mut self.state;
        if record == 0 {
            // htslib starts the first reference's span at the offset after
            // the header, which is where the first record starts.
            z.off_beg = rec.vstart;
        }
        // htslib amends `last_off` to the record's true start (a record that
        // does not fit opens a new block) before pushing it.
        z.last_off = rec.vstart;
        if tid != z.last_tid {
            if placed && self.n_no_coor > 0 {
                return Err(IndexError::PlacedAfterUnplaced {
                    record,
                    ref_id: tid,
                });
            }
            if placed && self.refs[tid as usize].is_some() {
                return Err(IndexError::ReferenceNotContiguous {
                    record,
                    ref_id: tid,
                });
            }
            z.last_tid = tid;
            z.last_bin = NO_BIN;
        } else if placed && z.last_coor > beg {
            return Err(IndexError::Unsorted {
                record,
                ref_id: tid,
                previous: z.last_coor,
                beg,
            });
        }
        if end < beg {
            return Err(IndexError::EndBeforeStart {
                record,
                ref_id: tid,
                beg,
                end,
            });
        }
        if placed {
            // htslib shoehorns [-1, 0) into the leftmost bottom bin.
            beg = beg.max(0);
            end = end.max(1);
            let min_shift = self.binning.min_shift;
            self.refs[tid as usize]
                .get_or_insert_with(RefIndex::default)
                .add_linear(beg, end, z.last_off, min_shift);
        } else {
            self.n_no_coor += 1;
        }
        let bin = self.binning.reg2bin(beg, end) as u32;
        if z.last_bin != bin {
            let meta_bin = self.binning.meta_bin();
            if z.save_bin != NO_BIN {
                let saved = usize::try_from(z.save_tid)
                    .ok()
                    .and_then(|t| self.refs.get_mut(t))
                    .and_then(Option::as_mut);
                if let Some(r) = saved {
                    r.add_chunk(
                        z.save_bin,
                        Chunk {
                            beg: z.save_off,
                            end: z.last_off,
                        },
                    );
                    if z.last_bin == NO_BIN {
                        // Change of reference: close the previous one.
                        r.set_meta(meta_bin, z.take_meta());
                    }
                }
            }
            z.save_off = z.last_off;
            z.save_bin = bin;
            z.last_bin = bin;
            z.save_tid = tid;
        }
        if rec.mapped {
            z.n_mapped += 1;
        } else {
            z.n_unmapped += 1;
        }
        z.last_coor = beg;
        self.previous_end = rec.vend;
        self.n_records += 1;
        Ok(())
    }

    /// The checks htslib makes on a placed record before touching state.
    fn check_placed(&self, record: u64, tid: i32, beg: i64, end: i64) -> Result<(), IndexError> {
        if tid as usize >= self.refs.len() {
            return Err(IndexError::ReferenceOutOfRange {
                record,
                ref_id: tid,
                n_refs: self.refs.len(),
            });
        }
        let max_pos = self.binning.max_pos();
        if beg > max_pos || end > max_pos {
            let hint = match self.format {
                IndexFormat::Bai => "try a CSI index",
                IndexFormat::Csi { .. } => "use a larger min_shift",
            };
            return Err(IndexError::PositionOutOfRange {
                record,
                ref_id: tid,
                beg,
                end,
                max_pos,
                hint,
            });
        }
        Ok(())
    }

    /// Close the last run, translate logical offsets with `block_offsets`
    /// (compressed offset of each block the writer wrote, in order, with the
    /// EOF block's offset last) and serialise the index.
    pub fn finish(mut self, block_offsets: &[u64]) -> Result<IndexFile, IndexError> {
        let final_block = finish::check_block_offsets(block_offsets)?;
        let final_offset = logical_offset(final_block as u64, 0);
        if self.previous_end > final_offset {
            return Err(IndexError::UnknownBlock {
                offset: self.previous_end,
                block: self.previous_end >> 16,
                n_blocks: block_offsets.len(),
            });
        }
        let meta_bin = self.binning.meta_bin();
        let z = &mut self.state;
        if z.save_tid >= 0 {
            if let Some(Some(r)) = self.refs.get_mut(z.save_tid as usize) {
                r.add_chunk(
                    z.save_bin,
                    Chunk {
                        beg: z.save_off,
                        end: final_offset,
                    },
                );
                z.last_off = final_offset;
                r.set_meta(meta_bin, z.take_meta());
            }
        }
        let parts = finish::Parts {
            format: self.format,
            binning: self.binning,
            refs: self.refs,
            n_no_coor: self.n_no_coor,
        };
        finish::finish(parts, block_offsets)
    }
}

impl RunState {
    /// Metadata for the reference that just ended at `last_off`; resets the
    /// counts and starts the next reference's span there.
    fn take_meta(&mut self) -> Meta {
        let meta = Meta {
            off_beg: self.off_beg,
            off_end: self.last_off,
            n_mapped: self.n_mapped,
            n_unmapped: self.n_unmapped,
        };
        self.n_mapped = 0;
        self.n_unmapped = 0;
        self.off_beg = self.last_off;
        meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapped record of `len` bases at `beg` whose bytes are `[start, start + 100)`
    /// within block 1.
    fn rec(ref_id: i32, beg: i64, len: i64, start: u16) -> IndexRecord {
        IndexRecord {
            ref_id,
            beg,
            end: beg + len,
            mapped: true,
            vstart: logical_offset(1, start),
            vend: logical_offset(1, start + 100),
        }
    }

    fn builder(format: IndexFormat) -> IndexBuilder {
        IndexBuilder::new(format, &[100_000, 100_000]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn record_end_follows_bam_endpos() {
        assert_eq!(record_end(10, 50, true), 60);
        assert_eq!(record_end(10, 0, true), 11); // CIGAR consumes no reference
        assert_eq!(record_end(10, 50, false), 11); // unmapped, even with a CIGAR
        assert_eq!(record_end(-1, 0, false), 0);
    }

    #[test]
    fn rejects_what_htslib_rejects() {
        let mut b = builder(IndexFormat::Bai);
        assert_eq!(b.push(&rec(0, 500, 10, 0)), Ok(()));
        assert_eq!(
            b.push(&rec(0, 499, 10, 100)),
            Err(IndexError::Unsorted {
                record: 1,
                ref_id: 0,
                previous: 500,
                beg: 499
            })
        );

        let mut b = builder(IndexFormat::Bai);
        for (i, r) in [rec(0, 5, 10, 0), rec(1, 5, 10, 100)].iter().enumerate() {
            assert_eq!(b.push(r), Ok(()), "record {i}");
        }
        assert_eq!(
            b.push(&rec(0, 9, 10, 200)),
            Err(IndexError::ReferenceNotContiguous {
                record: 2,
                ref_id: 0
            })
        );

        let mut b = builder(IndexFormat::Bai);
        assert_eq!(b.push(&rec(-1, -1, 1, 0)), Ok(()));
        assert_eq!(
            b.push(&rec(1, 5, 10, 100)),
            Err(IndexError::PlacedAfterUnplaced {
                record: 1,
                ref_id: 1
            })
        );

        let mut b = builder(IndexFormat::Bai);
        assert!(matches!(
            b.push(&rec(2, 5, 10, 0)),
            Err(IndexError::ReferenceOutOfRange { n_refs: 2, .. })
        ));
        assert!(matches!(
            b.push(&rec(0, 5, -1, 0)),
            Err(IndexError::EndBeforeStart { .. })
        ));
        assert!(matches!(
            b.push(&rec(0, 1 << 29, 10, 0)),
            Err(IndexError::PositionOutOfRange {
                max_pos: 536_870_912,
                ..
            })
        ));
    }

    #[test]
    fn second_placed_record_at_pos_minus_one_is_unsorted_as_in_htslib() {
        // htslib compares the next start with the *clamped* previous start.
        let mut b = builder(IndexFormat::Bai);
        assert_eq!(b.push(&rec(0, -1, 1, 0)), Ok(()));
        assert_eq!(
            b.push(&rec(0, -1, 1, 100)),
            Err(IndexError::Unsorted {
                record: 1,
                ref_id: 0,
                previous: 0,
                beg: -1
            })
        );
    }

    #[test]
    fn offsets_must_advance() {
        let mut b = builder(IndexFormat::DEFAULT_CSI);
        assert_eq!(b.push(&rec(0, 5, 10, 100)), Ok(()));
        assert!(matches!(
            b.push(&rec(0, 6, 10, 150)),
            Err(IndexError::OffsetsOutOfOrder { record: 1, .. })
        ));
        let mut empty = rec(0, 6, 10, 300);
        empty.vend = empty.vstart;
        assert!(matches!(
            b.push(&empty),
            Err(IndexError::OffsetsOutOfOrder { .. })
        ));
        assert_eq!(b.records(), 1);
    }

    #[test]
    fn finish_checks_block_offsets_cover_the_records() {
        let mut b = builder(IndexFormat::Bai);
        assert_eq!(b.push(&rec(0, 5, 10, 0)), Ok(()));
        // Records are in block 1; block 1 must exist and precede the EOF block.
        assert!(matches!(
            b.clone().finish(&[0]),
            Err(IndexError::UnknownBlock { block: 1, .. })
        ));
        assert!(b.finish(&[0, 50, 90]).is_ok());
    }

    #[test]
    fn single_record_bai_layout() {
        let mut b = builder(IndexFormat::Bai);
        assert_eq!(b.push(&rec(0, 20_000, 100, 0)), Ok(()));
        let idx = b.finish(&[0, 50, 90]).unwrap_or_else(|e| panic!("{e}"));
        let start = 50u64 << 16;
        let end = 90u64 << 16;
        let mut want = b"BAI\x01".to_vec();
        want.extend_from_slice(&2i32.to_le_bytes());
        want.extend_from_slice(&2i32.to_le_bytes()); // n_bin: bin 4682 and the meta bin
        want.extend_from_slice(&4682u32.to_le_bytes());
        want.extend_from_slice(&1i32.to_le_bytes());
        want.extend_from_slice(&start.to_le_bytes());
        want.extend_from_slice(&end.to_le_bytes());
        want.extend_from_slice(&37450u32.to_le_bytes());
        want.extend_from_slice(&2i32.to_le_bytes());
        for v in [start, end, 1, 0] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        // Linear index: windows 0 (back-filled) and 1.
        want.extend_from_slice(&2i32.to_le_bytes());
        want.extend_from_slice(&start.to_le_bytes());
        want.extend_from_slice(&start.to_le_bytes());
        want.extend_from_slice(&0i32.to_le_bytes()); // reference 1: no bins
        want.extend_from_slice(&0i32.to_le_bytes()); // ... and no linear index
        want.extend_from_slice(&0u64.to_le_bytes()); // n_no_coor
        assert_eq!(idx.content(), &want[..]);
        assert_eq!(idx.file_bytes(), want);
    }

    #[test]
    fn second_meta_put_grows_a_full_table_as_khash_does() {
        // One reference with records in windows 0 and 3, then another:
        // keys 4681, 4684 and the meta bin fill four buckets, and htslib's
        // second meta put grows the table to eight, which orders the bins
        // 4681, 37450, 4684 (samtools index 1.24 writes them so).
        let mut b = builder(IndexFormat::Bai);
        for (i, r) in [
            rec(0, 10, 10, 0),
            rec(0, 3 * 16384 + 10, 10, 100),
            rec(1, 5, 10, 200),
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(b.push(r), Ok(()), "record {i}");
        }
        let idx = b.finish(&[0, 50, 90]).unwrap_or_else(|e| panic!("{e}"));
        let c = idx.content();
        let n_bin = i32::from_le_bytes([c[8], c[9], c[10], c[11]]);
        assert_eq!(n_bin, 3);
        let first = u32::from_le_bytes([c[12], c[13], c[14], c[15]]);
        let one_chunk = 8 + 16;
        let at = 12 + one_chunk;
        let second = u32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]]);
        assert_eq!((first, second), (4681, 37450));
    }

    #[test]
    fn csi_is_framed_in_htslib_sized_blocks() {
        let mut b =
            IndexBuilder::new(IndexFormat::DEFAULT_CSI, &[1_000]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            b.binning(),
            Binning {
                min_shift: 14,
                n_lvls: 0
            }
        );
        assert_eq!(b.push(&rec(0, 0, 10, 0)), Ok(()));
        let idx = b.finish(&[0, 10, 20]).unwrap_or_else(|e| panic!("{e}"));
        assert!(idx.is_bgzf());
        assert_eq!(&idx.content()[..16], b"CSI\x01\x0e\0\0\0\0\0\0\0\0\0\0\0");
        let file = idx.file_bytes();
        let eof = alnsort_bgzf::EOF_BLOCK.len();
        assert_eq!(&file[file.len() - eof..], &alnsort_bgzf::EOF_BLOCK);
        assert_eq!(
            alnsort_bgzf::decompress_all(&file).unwrap_or_else(|e| panic!("{e}")),
            idx.content()
        );
    }
}
