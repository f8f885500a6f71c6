//! Indexes of parts, merged by shifting virtual offsets (the distributed
//! sort's assemble step).
//!
//! A reduce task writes one part of the output: headerless, EOF-less BGZF
//! blocks that are concatenated, after the header's blocks, into the final
//! file. Its *part index* ([`PartIndexWriter`]) lists each record's index
//! fields (reference, span, mapped flag) with its virtual offsets relative
//! to the part's first byte, as a reader of the part sees them (the end of
//! a record that ends a block is the next block's start, offset 0).
//! [`merge_part_indexes`] shifts each part's offsets by the part's place in
//! the final file and replays every record, in order, through one
//! [`IndexBuilder`]: the index is then the one htslib builds reading the
//! final file (`samtools index`), however the parts were cut — bins whose
//! chunks cross a part boundary, sparse-bin merging by compressed distance
//! and the linear index all come out as for one file.
//!
//! Part index format (integers little-endian, varints LEB128):
//!
//! ```text
//! MAGIC "ALNSPIX1" records:u64 part_bytes:u64 record*
//! record = (ref_id + 1) << 1 | mapped : varint
//!          zigzag(beg) : varint   zigzag(end - beg) : varint
//!          vstart - previous vend : varint   vend - vstart : varint
//! ```
//!
//! About 10 bytes a record; replaying is a few seconds per hundred
//! million records.

use alnsort_pipeline::varint::{self, unzigzag, zigzag, VarintError};

use crate::builder::{IndexBuilder, IndexRecord};
use crate::error::IndexError;
use crate::write::IndexFile;
use crate::IndexFormat;

const MAGIC: &[u8; 8] = b"ALNSPIX1";
const HEAD: usize = 24;

/// Builds one part's index, record by record, in the part's order.
#[derive(Debug, Clone, Default)]
pub struct PartIndexWriter {
    body: Vec<u8>,
    records: u64,
    previous_end: u64,
}

impl PartIndexWriter {
    /// An empty part index.
    pub fn new() -> PartIndexWriter {
        PartIndexWriter::default()
    }

    /// Adds the next record; `vstart` and `vend` are real virtual offsets
    /// relative to the part's first byte, and must not go backwards.
    pub fn push(&mut self, rec: &IndexRecord) -> Result<(), IndexError> {
        if rec.vend <= rec.vstart || rec.vstart < self.previous_end {
            return Err(IndexError::OffsetsOutOfOrder {
                record: self.records,
                previous_end: self.previous_end,
                vstart: rec.vstart,
                vend: rec.vend,
            });
        }
        let tid = u64::from((rec.ref_id.max(-1) + 1) as u32);
        varint::put(&mut self.body, tid << 1 | u64::from(rec.mapped));
        varint::put(&mut self.body, zigzag(rec.beg));
        varint::put(&mut self.body, zigzag(rec.end.wrapping_sub(rec.beg)));
        varint::put(&mut self.body, rec.vstart - self.previous_end);
        varint::put(&mut self.body, rec.vend - rec.vstart);
        self.previous_end = rec.vend;
        self.records += 1;
        Ok(())
    }

    /// Records added.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The part index of a part of `part_bytes` bytes.
    pub fn finish(self, part_bytes: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + self.body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.records.to_le_bytes());
        out.extend_from_slice(&part_bytes.to_le_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

/// Reads a part index's records.
struct PartReader<'a> {
    part: usize,
    data: &'a [u8],
    at: usize,
    left: u64,
    previous_end: u64,
}

impl<'a> PartReader<'a> {
    fn open(part: usize, data: &'a [u8]) -> Result<(PartReader<'a>, u64), IndexError> {
        let bad = |reason| IndexError::BadPartIndex {
            part,
            offset: 0,
            reason,
        };
        if data.len() < HEAD || &data[..8] != MAGIC {
            return Err(bad("not a part index (bad magic or truncated)"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap_or([0; 8]));
        let reader = PartReader {
            part,
            data,
            at: HEAD,
            left: u64_at(8),
            previous_end: 0,
        };
        Ok((reader, u64_at(16)))
    }

    fn varint(&mut self) -> Result<u64, IndexError> {
        varint::read(self.data, &mut self.at).map_err(|e| {
            self.bad(match e {
                VarintError::Truncated => "truncated",
                VarintError::Overlong => "overlong varint",
            })
        })
    }

    fn bad(&self, reason: &'static str) -> IndexError {
        IndexError::BadPartIndex {
            part: self.part,
            offset: self.at as u64,
            reason,
        }
    }

    /// The next record, offsets relative to the part.
    fn next(&mut self) -> Result<Option<IndexRecord>, IndexError> {
        if self.left == 0 {
            if self.at != self.data.len() {
                return Err(self.bad("bytes after the last record"));
            }
            return Ok(None);
        }
        self.left -= 1;
        let tid = self.varint()?;
        let beg = unzigzag(self.varint()?);
        let len = unzigzag(self.varint()?);
        let vstart = self
            .previous_end
            .checked_add(self.varint()?)
            .ok_or_else(|| self.bad("offset overflows"))?;
        let vend = vstart
            .checked_add(self.varint()?)
            .ok_or_else(|| self.bad("offset overflows"))?;
        self.previous_end = vend;
        let ref_id = i32::try_from(tid >> 1).map_err(|_| self.bad("reference out of range"))? - 1;
        Ok(Some(IndexRecord {
            ref_id,
            beg,
            end: beg.wrapping_add(len),
            mapped: tid & 1 == 1,
            vstart,
            vend,
        }))
    }
}

/// The index of a file made of a header, then `parts` (each `(part
/// index, compressed offset where the part starts)`, in file order), then
/// the EOF block at compressed offset `eof_offset`: every part's records
/// replayed with shifted offsets through one [`IndexBuilder`] for the
/// references of `ref_lengths`. A part index whose recorded length does
/// not match the gap to the next part is refused (it belongs to another
/// part).
pub fn merge_part_indexes(
    format: IndexFormat,
    ref_lengths: &[u64],
    parts: &[(&[u8], u64)],
    eof_offset: u64,
) -> Result<IndexFile, IndexError> {
    let mut builder = IndexBuilder::new(format, ref_lengths)?;
    // Logical offsets for the builder: block number among the compressed
    // block addresses the records touch, in order.
    let mut addresses: Vec<u64> = Vec::new();
    let mut logical = |real: u64| -> u64 {
        let addr = real >> 16;
        if addresses.last() != Some(&addr) {
            addresses.push(addr);
        }
        (((addresses.len() - 1) as u64) << 16) | (real & 0xffff)
    };
    for (i, &(data, shift)) in parts.iter().enumerate() {
        let (mut reader, part_bytes) = PartReader::open(i, data)?;
        let next_start = parts.get(i + 1).map_or(eof_offset, |p| p.1);
        if shift.checked_add(part_bytes) != Some(next_start) {
            return Err(IndexError::BadPartIndex {
                part: i,
                offset: 16,
                reason: "the part's recorded length does not match its place in the file",
            });
        }
        while let Some(mut rec) = reader.next()? {
            if rec.vend > part_bytes << 16 {
                return Err(reader.bad("a record ends past the part's end"));
            }
            rec.vstart = logical(rec.vstart + (shift << 16));
            rec.vend = logical(rec.vend + (shift << 16));
            builder.push(&rec)?;
        }
    }
    let eof = logical(eof_offset << 16);
    debug_assert_eq!(eof & 0xffff, 0);
    builder.finish(&addresses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logical_offset;

    /// Records laid out in blocks: (ref, beg, len, mapped, block, offset,
    /// size). Blocks are `block_size` compressed bytes each after a header
    /// of `header` bytes.
    struct Layout {
        recs: Vec<(i32, i64, i64, bool, u64, u16, u16)>,
        n_blocks: u64,
    }

    fn layout(n: usize) -> Layout {
        let mut recs = Vec::new();
        let (mut block, mut off) = (0u64, 0u16);
        let mut state = 12345u64;
        let mut pos = 0i64;
        let mut tid = 0;
        for i in 0..n {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let size = 200 + (state >> 50) as u16 % 300;
            if u32::from(off) + u32::from(size) > 0xff00 {
                block += 1;
                off = 0;
            }
            if i == n / 2 {
                tid = 1;
                pos = 0;
            }
            pos += (state >> 40) as i64 % 40;
            let unplaced = i >= n - n / 10;
            let r = if unplaced {
                (-1, -1, 1, false)
            } else {
                (
                    tid,
                    pos,
                    100 + (state >> 30) as i64 % 5000,
                    !state.is_multiple_of(7),
                )
            };
            recs.push((r.0, r.1, r.2, r.3, block, off, size));
            off += size;
        }
        Layout {
            recs,
            n_blocks: block + 1,
        }
    }

    fn index_record(
        r: &(i32, i64, i64, bool, u64, u16, u16),
        vstart: u64,
        vend: u64,
    ) -> IndexRecord {
        IndexRecord {
            ref_id: r.0,
            beg: r.1,
            end: r.1 + r.2,
            mapped: r.3,
            vstart,
            vend,
        }
    }

    /// Compressed size of block `b` (varied, so distances differ).
    fn csize(b: u64) -> u64 {
        9_000 + (b * 7_919) % 20_000
    }

    #[test]
    fn merged_part_indexes_equal_the_whole_files_index() {
        let l = layout(6_000);
        let header = 333u64;
        let mut addr = vec![header];
        for b in 0..l.n_blocks {
            addr.push(addr[b as usize] + csize(b));
        }
        let eof = addr[l.n_blocks as usize];
        for format in [IndexFormat::Bai, IndexFormat::DEFAULT_CSI] {
            let lengths = [1_000_000u64, 2_000_000];
            // The whole file: logical offsets over blocks 0.. (block 0 the header).
            let mut whole = IndexBuilder::new(format, &lengths).expect("builder");
            for (i, r) in l.recs.iter().enumerate() {
                let vstart = logical_offset(r.4 + 1, r.5);
                let vend = match l.recs.get(i + 1) {
                    Some(n) if n.4 == r.4 => logical_offset(r.4 + 1, r.5 + r.6),
                    _ => logical_offset(r.4 + 2, 0),
                };
                whole.push(&index_record(r, vstart, vend)).expect("push");
            }
            let mut block_offsets = vec![0u64];
            block_offsets.extend_from_slice(&addr);
            let want = whole.finish(&block_offsets).expect("finish");

            // Parts: cut at block boundaries, every few blocks.
            let cuts: Vec<u64> = vec![0, 3, 4, 11, l.n_blocks];
            let mut parts: Vec<(Vec<u8>, u64)> = Vec::new();
            for w in cuts.windows(2) {
                let (first, last) = (w[0], w[1]);
                let start = addr[first as usize];
                let end = addr[last as usize];
                let mut p = PartIndexWriter::new();
                let rel = |b: u64, o: u16| ((addr[b as usize] - start) << 16) | u64::from(o);
                let recs: Vec<_> = l
                    .recs
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.4 >= first && r.4 < last)
                    .collect();
                for (i, r) in recs {
                    let vend = match l.recs.get(i + 1) {
                        Some(n) if n.4 == r.4 => rel(r.4, r.5 + r.6),
                        _ => (addr[r.4 as usize + 1] - start) << 16,
                    };
                    p.push(&index_record(r, rel(r.4, r.5), vend))
                        .expect("part push");
                }
                parts.push((p.finish(end - start), start));
            }
            let refs: Vec<(&[u8], u64)> = parts.iter().map(|(d, s)| (d.as_slice(), *s)).collect();
            let got = merge_part_indexes(format, &lengths, &refs, eof).expect("merge");
            assert_eq!(got.content(), want.content(), "{format:?}");

            // A part index in the wrong place is refused.
            let mut swapped = refs.clone();
            swapped.swap(0, 1);
            swapped[0].1 = header;
            assert!(matches!(
                merge_part_indexes(format, &lengths, &swapped, eof),
                Err(IndexError::BadPartIndex { .. })
            ));
            // A truncated one too.
            let short = &parts[1].0[..parts[1].0.len() - 3];
            let mut cut = refs.clone();
            cut[1].0 = short;
            assert!(matches!(
                merge_part_indexes(format, &lengths, &cut, eof),
                Err(IndexError::BadPartIndex { part: 1, .. })
            ));
        }
    }
}
