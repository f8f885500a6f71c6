//! Reading a BAI or CSI index back, to find where the records overlapping
//! a region lie in the BAM file (`alnsort merge -R`): the stretch of
//! virtual offsets htslib's `hts_itr_query` would read, so a reader can
//! seek to its start and stop at its end instead of reading the file whole.
//!
//! The stretch is chosen as htslib 1.24 chooses its chunks: every chunk of
//! every bin overlapping the region, less those ending at or before the
//! region's lower bound (`min_off`: the `loff` of the bottom-level bin
//! holding the region's start, or of the nearest bin left of it or above
//! it). Records inside it that do not overlap the region are the reader's
//! to skip, as htslib's iterator skips them.

use std::io;
use std::path::{Path, PathBuf};

use crate::bins::{first_bin, parent_bin, Binning, BAI_LEVELS, BAI_MIN_SHIFT};

/// Why an index could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IndexReadError {
    /// The file could not be read.
    #[error("{path}: cannot read the index")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The CSI's BGZF compression is damaged.
    #[error("{path}: the CSI index is not valid BGZF")]
    Bgzf {
        path: PathBuf,
        #[source]
        source: alnsort_bgzf::BgzfError,
    },
    /// Neither magic.
    #[error("{path}: not a BAI or CSI index (first bytes {magic:02x?})")]
    Format { path: PathBuf, magic: Vec<u8> },
    /// A count or field runs past the end, or is out of range.
    #[error("{path}: damaged index: {what} at byte {offset} (of the uncompressed index)")]
    Damaged {
        path: PathBuf,
        offset: usize,
        what: &'static str,
    },
}

/// One bin of one reference: its chunks `(start, end)` as virtual offsets
/// and its `loff` (the linear-index offset of its first window).
#[derive(Debug, Clone, Default)]
struct Bin {
    loff: u64,
    chunks: Vec<(u64, u64)>,
}

/// A BAI or CSI index, as far as region queries need it.
#[derive(Debug, Clone)]
pub struct IndexReader {
    binning: Binning,
    /// Per reference: bins by number (pseudo-bins left out).
    refs: Vec<std::collections::HashMap<u32, Bin>>,
    /// Per reference: the BAI linear index (empty for CSI).
    linear: Vec<Vec<u64>>,
}

/// Parses little-endian fields, naming where a field is missing.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl Fields<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], IndexReadError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        match end {
            Some(e) => {
                let s = &self.b[self.at..e];
                self.at = e;
                Ok(s)
            }
            None => Err(self.damaged(what)),
        }
    }

    fn damaged(&self, what: &'static str) -> IndexReadError {
        IndexReadError::Damaged {
            path: self.path.to_path_buf(),
            offset: self.at,
            what,
        }
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, IndexReadError> {
        Ok(i32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, IndexReadError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    /// A count: non-negative, and each item at least `item_bytes` long, so
    /// a damaged count cannot make the reader allocate beyond the file.
    fn count(&mut self, what: &'static str, item_bytes: usize) -> Result<usize, IndexReadError> {
        let at = self.at;
        let n = self.i32(what)?;
        let n = usize::try_from(n).map_err(|_| IndexReadError::Damaged {
            path: self.path.to_path_buf(),
            offset: at,
            what,
        })?;
        if n.saturating_mul(item_bytes) > self.b.len() - self.at {
            return Err(IndexReadError::Damaged {
                path: self.path.to_path_buf(),
                offset: at,
                what,
            });
        }
        Ok(n)
    }
}

impl IndexReader {
    /// The index htslib would load for the BAM at `bam`: `BAM.csi`, the
    /// name with its `.bam` replaced by `.csi`, `BAM.bai`, then `.bai` in
    /// place of `.bam` (`hts_idx_load`'s search). `Ok(None)` when there is
    /// none.
    pub fn find_beside(bam: &Path) -> Result<Option<(PathBuf, IndexReader)>, IndexReadError> {
        let name = bam.as_os_str().to_string_lossy().into_owned();
        let stem = name.strip_suffix(".bam");
        let mut candidates = vec![format!("{name}.csi")];
        candidates.extend(stem.map(|s| format!("{s}.csi")));
        candidates.push(format!("{name}.bai"));
        candidates.extend(stem.map(|s| format!("{s}.bai")));
        for c in candidates {
            let path = PathBuf::from(c);
            if path.is_file() {
                let index = IndexReader::read(&path)?;
                return Ok(Some((path, index)));
            }
        }
        Ok(None)
    }

    /// Reads the index file at `path`.
    pub fn read(path: &Path) -> Result<IndexReader, IndexReadError> {
        let bytes = std::fs::read(path).map_err(|source| IndexReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        IndexReader::parse(path, &bytes)
    }

    /// Parses an index's bytes (a BAI, or a BGZF-compressed CSI); `path`
    /// names it in errors.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<IndexReader, IndexReadError> {
        let inflated;
        let b: &[u8] = if bytes.starts_with(b"BAI\x01") {
            bytes
        } else if alnsort_bgzf::is_bgzf(&bytes[..bytes.len().min(18)]) {
            inflated =
                alnsort_bgzf::decompress_all(bytes).map_err(|source| IndexReadError::Bgzf {
                    path: path.to_path_buf(),
                    source,
                })?;
            &inflated
        } else {
            return Err(IndexReadError::Format {
                path: path.to_path_buf(),
                magic: bytes[..bytes.len().min(4)].to_vec(),
            });
        };
        let mut f = Fields { b, at: 4, path };
        let (binning, csi) = match &b[..b.len().min(4)] {
            b"BAI\x01" => (Binning::BAI, false),
            b"CSI\x01" => {
                let min_shift = f.i32("min_shift")?;
                let depth = f.i32("depth")?;
                let l_aux = f.count("l_aux", 1)?;
                f.take(l_aux, "aux data")?;
                let ok = (1..=30).contains(&min_shift)
                    && (0..=crate::bins::CSI_MAX_LEVELS as i32).contains(&depth)
                    && min_shift as u32 + 3 * depth as u32 <= crate::bins::MAX_TOTAL_SHIFT;
                if !ok {
                    return Err(f.damaged("min_shift or depth out of range"));
                }
                (
                    Binning {
                        min_shift: min_shift as u32,
                        n_lvls: depth as u32,
                    },
                    true,
                )
            }
            other => {
                return Err(IndexReadError::Format {
                    path: path.to_path_buf(),
                    magic: other.to_vec(),
                })
            }
        };
        debug_assert!(csi || (binning.min_shift, binning.n_lvls) == (BAI_MIN_SHIFT, BAI_LEVELS));
        let n_bins = binning.n_bins();
        let n_ref = f.count("n_ref", 4)?;
        let mut refs = Vec::with_capacity(n_ref);
        let mut linears = Vec::with_capacity(if csi { 0 } else { n_ref });
        for _ in 0..n_ref {
            let n_bin = f.count("n_bin", 8)?;
            let mut bins = std::collections::HashMap::with_capacity(n_bin);
            for _ in 0..n_bin {
                let bin = f.i32("bin")? as u32;
                let loff = if csi { f.u64("loff")? } else { 0 };
                let n_chunk = f.count("n_chunk", 16)?;
                let mut chunks = Vec::with_capacity(n_chunk);
                for _ in 0..n_chunk {
                    chunks.push((f.u64("chunk start")?, f.u64("chunk end")?));
                }
                // The pseudo-bin (mapped/unmapped counts) is not a bin.
                if bin < n_bins {
                    bins.insert(bin, Bin { loff, chunks });
                }
            }
            if !csi {
                let n_intv = f.count("n_intv", 8)?;
                let mut linear = Vec::with_capacity(n_intv);
                for _ in 0..n_intv {
                    linear.push(f.u64("linear index entry")?);
                }
                // htslib's `update_loff`: a BAI bin's loff is the linear
                // index entry of its first window (0 past the end).
                for (&bin, b) in bins.iter_mut() {
                    let w = binning.bin_bottom(bin) as usize;
                    b.loff = linear.get(w).copied().unwrap_or(0);
                }
                linears.push(linear);
            }
            refs.push(bins);
        }
        Ok(IndexReader {
            binning,
            refs,
            linear: linears,
        })
    }

    /// Every record start the index names, sorted and distinct: each
    /// chunk's start, each CSI bin's `loff` and each BAI linear-index entry
    /// (0, "none", left out). For cutting a file at record boundaries.
    pub fn record_starts(&self) -> Vec<u64> {
        let mut starts = Vec::new();
        let csi = self.linear.is_empty();
        for bins in &self.refs {
            for bin in bins.values() {
                if csi && bin.loff != 0 {
                    starts.push(bin.loff);
                }
                starts.extend(bin.chunks.iter().map(|&(u, _)| u));
            }
        }
        starts.extend(self.linear.iter().flatten().copied().filter(|&v| v != 0));
        starts.sort_unstable();
        starts.dedup();
        starts
    }

    /// References the index covers.
    pub fn n_ref(&self) -> usize {
        self.refs.len()
    }

    /// The virtual offsets `[start, end)` that hold every record of
    /// reference `tid` overlapping `[beg, end)` (0-based, end exclusive),
    /// as htslib's iterator would read them: `None` when no chunk is left
    /// (nothing overlaps). Records inside that do not overlap the region
    /// are the caller's to skip.
    pub fn region_span(&self, tid: usize, beg: i64, end: i64) -> Option<(u64, u64)> {
        let bins = self.refs.get(tid)?;
        if bins.is_empty() {
            return None;
        }
        let b = self.binning;
        let beg = beg.max(0);
        let end = end.min(b.max_pos());
        if beg >= end {
            return None;
        }
        let min_off = self.min_off(bins, beg);
        let mut span: Option<(u64, u64)> = None;
        let mut shift = b.min_shift + 3 * b.n_lvls;
        for level in 0..=b.n_lvls {
            let first = i64::from(first_bin(level));
            for bin in first + (beg >> shift)..=first + ((end - 1) >> shift) {
                let Some(found) = bins.get(&(bin as u32)) else {
                    continue;
                };
                for &(u, v) in &found.chunks {
                    if v > min_off {
                        let u = u.max(min_off);
                        span = Some(span.map_or((u, v), |(s, e)| (s.min(u), e.max(v))));
                    }
                }
            }
            shift = shift.saturating_sub(3);
        }
        span.filter(|(s, e)| s < e)
    }

    /// htslib's `min_off`: the `loff` of the bottom-level bin holding
    /// `beg`, or, when that bin is absent, of the nearest bin left of it
    /// on its level within the same parent, else of its parent, and so on
    /// up to the root (0 when none is found).
    fn min_off(&self, bins: &std::collections::HashMap<u32, Bin>, beg: i64) -> u64 {
        let b = self.binning;
        let mut bin = first_bin(b.n_lvls) as u64 + (beg >> b.min_shift) as u64;
        loop {
            if let Some(found) = bins.get(&(bin as u32)) {
                return found.loff;
            }
            if bin == 0 {
                return 0;
            }
            let first = (u64::from(parent_bin(bin as u32)) << 3) + 1;
            if bin > first {
                bin -= 1;
            } else {
                bin = u64::from(parent_bin(bin as u32));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{logical_offset, IndexBuilder, IndexFormat, IndexRecord};

    /// Builds an index over records `(tid, beg, end)` laid one per block
    /// (block i at compressed offset 100 * i), returns it parsed back.
    fn index_of(format: IndexFormat, lens: &[u64], recs: &[(i32, i64, i64)]) -> IndexReader {
        let mut builder = IndexBuilder::new(format, lens).unwrap();
        for (i, &(ref_id, beg, end)) in recs.iter().enumerate() {
            let block = i as u64 + 1;
            builder
                .push(&IndexRecord {
                    ref_id,
                    beg,
                    end,
                    mapped: true,
                    vstart: logical_offset(block, 0),
                    vend: logical_offset(block, 50),
                })
                .unwrap();
        }
        let offsets: Vec<u64> = (0..recs.len() as u64 + 3).map(|i| i * 100).collect();
        let file = builder.finish(&offsets).unwrap();
        IndexReader::parse(Path::new("t.idx"), &file.file_bytes()).unwrap()
    }

    /// Record i starts at virtual offset (100 * (i + 1)) << 16.
    fn vo(i: u64) -> u64 {
        (100 * (i + 1)) << 16
    }

    fn records() -> Vec<(i32, i64, i64)> {
        vec![
            (0, 100, 200),             // 0
            (0, 20_000, 20_100),       // 1
            (0, 40_000, 40_100),       // 2
            (0, 99_000, 140_000),      // 3: spans many 16 kbp windows
            (0, 200_000, 200_100),     // 4
            (1, 5, 10),                // 5
            (1, 1_000_000, 1_000_001), // 6
        ]
    }

    #[test]
    fn region_spans_cover_the_overlapping_records_and_little_else() {
        for format in [IndexFormat::Bai, IndexFormat::DEFAULT_CSI] {
            let idx = index_of(format, &[1 << 20, 1 << 21], &records());
            assert_eq!(idx.n_ref(), 2);
            let span = |tid, beg, end| idx.region_span(tid, beg, end);
            // Only record 2 overlaps: start at it, not at the file's start.
            let (s, e) = span(0, 40_050, 40_060).unwrap();
            assert!(
                s <= vo(2) && s > vo(0) && e > vo(2),
                "{format:?} {s:#x} {e:#x}"
            );
            // Record 3 starts far left of 120_000 but overlaps it.
            let (s, e) = span(0, 120_000, 120_001).unwrap();
            assert!(s <= vo(3) && e > vo(3), "{format:?}");
            assert!(e <= vo(5), "{format:?}: stays on reference 0");
            // Reference 1: from record 5, record 6 reached for a wide region.
            let (s, e) = span(1, 0, i64::MAX).unwrap();
            assert!(s <= vo(5) && e > vo(6), "{format:?}");
            assert!(s >= vo(4), "{format:?}: nothing of reference 0 is read");
            // No reference, empty region, nothing indexed.
            assert_eq!(span(2, 0, 10), None);
            assert_eq!(span(0, 50, 50), None);
        }
    }

    #[test]
    fn record_starts_are_record_starts() {
        for format in [IndexFormat::Bai, IndexFormat::DEFAULT_CSI] {
            let idx = index_of(format, &[1 << 20, 1 << 21], &records());
            let starts = idx.record_starts();
            let all: Vec<u64> = (0..records().len() as u64).map(vo).collect();
            assert!(
                starts.iter().all(|s| all.contains(s)),
                "{format:?} {starts:x?}"
            );
            assert!(
                starts.contains(&vo(0)) && starts.contains(&vo(5)),
                "{format:?}"
            );
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "{format:?}");
        }
    }

    #[test]
    fn damaged_and_foreign_indexes_are_named_errors() {
        let p = Path::new("x.bai");
        let e = IndexReader::parse(p, b"BAI\x01\x05\0\0\0").unwrap_err();
        assert!(
            matches!(e, IndexReadError::Damaged { what: "n_ref", .. }),
            "{e}"
        );
        assert!(e.to_string().starts_with("x.bai: damaged index"), "{e}");
        let e = IndexReader::parse(p, b"BAM\x01").unwrap_err();
        assert!(matches!(e, IndexReadError::Format { .. }), "{e}");
        let e = IndexReader::parse(p, b"BAI\x01\x01\0\0\0\xff\xff\xff\xff").unwrap_err();
        assert!(
            matches!(e, IndexReadError::Damaged { what: "n_bin", .. }),
            "{e}"
        );
    }
}
