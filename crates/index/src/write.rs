//! The on-disk layouts (SAM spec §5.2 for BAI, the CSI spec for CSI), written
//! field for field as htslib's `hts_idx_save` does, and the file itself: BAI
//! as is, CSI compressed in BGZF blocks split where htslib splits them.

use crate::bins::Binning;
use crate::builder::{RefIndex, META_VALUE};
use crate::error::IndexError;
use crate::finish::Parts;
use crate::IndexFormat;
use alnsort_bgzf::CompressionLevel;

/// A finished index: its uncompressed content and how to frame it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    format: IndexFormat,
    content: Vec<u8>,
}

impl IndexFile {
    /// BAI or CSI (with the `min_shift` actually used).
    pub fn format(&self) -> IndexFormat {
        self.format
    }

    /// The index bytes before any compression. For BAI this is the file.
    pub fn content(&self) -> &[u8] {
        &self.content
    }

    /// Whether the file is BGZF-compressed on disk (CSI is, BAI is not).
    pub fn is_bgzf(&self) -> bool {
        matches!(self.format, IndexFormat::Csi { .. })
    }

    /// The file's bytes as htslib writes them: BAI is the content as is;
    /// CSI is the content in BGZF blocks of at most `0xff00` payload bytes
    /// (htslib's `BGZF_BLOCK_SIZE`) at the default level, then the EOF
    /// block.
    pub fn file_bytes(&self) -> Vec<u8> {
        if self.is_bgzf() {
            alnsort_bgzf::compress_all(&self.content, CompressionLevel::default())
        } else {
            self.content.clone()
        }
    }
}

/// Little-endian field writer.
struct Out(Vec<u8>);

impl Out {
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A count stored as `int32_t`.
    fn count(&mut self, ref_id: usize, what: &'static str, n: usize) -> Result<(), IndexError> {
        let v = i32::try_from(n).map_err(|_| IndexError::TooLarge {
            ref_id,
            what,
            count: n,
        })?;
        self.i32(v);
        Ok(())
    }
}

/// Serialise finished references (`hts_idx_write_out` + `idx_save_core`).
pub(crate) fn serialize(parts: &Parts) -> Result<IndexFile, IndexError> {
    let mut out = Out(Vec::new());
    let csi = matches!(parts.format, IndexFormat::Csi { .. });
    if csi {
        out.0.extend_from_slice(b"CSI\x01");
        out.i32(parts.binning.min_shift as i32);
        out.i32(parts.binning.n_lvls as i32);
        out.u32(0); // l_aux: htslib writes no auxiliary data for BAM
    } else {
        out.0.extend_from_slice(b"BAI\x01");
    }
    out.count(0, "reference count", parts.refs.len())?;
    for (ref_id, r) in parts.refs.iter().enumerate() {
        match r {
            Some(r) => write_ref(&mut out, ref_id, r, parts.binning, csi)?,
            None => {
                out.i32(0); // n_bin
                if !csi {
                    out.i32(0); // n_intv
                }
            }
        }
    }
    out.u64(parts.n_no_coor);
    let format = match parts.format {
        IndexFormat::Bai => IndexFormat::Bai,
        IndexFormat::Csi { .. } => IndexFormat::Csi {
            min_shift: parts.binning.min_shift,
        },
    };
    Ok(IndexFile {
        format,
        content: out.0,
    })
}

/// One reference: bins in khash bucket order, then (BAI) the linear index.
fn write_ref(
    out: &mut Out,
    ref_id: usize,
    r: &RefIndex,
    binning: Binning,
    csi: bool,
) -> Result<(), IndexError> {
    out.count(ref_id, "bin count", r.table.len())?;
    for (key, value) in r.table.iter() {
        out.u32(key);
        if value == META_VALUE {
            let meta = r.meta.unwrap_or_default();
            if csi {
                out.u64(0); // htslib sets loff = 0 for the pseudo-bin
            }
            out.i32(2);
            out.u64(meta.off_beg);
            out.u64(meta.off_end);
            out.u64(meta.n_mapped);
            out.u64(meta.n_unmapped);
            continue;
        }
        let bin = r.bins.get(value).filter(|_| key < binning.n_bins());
        let (loff, chunks) = bin.map_or((0, &[][..]), |b| (b.loff, &b.chunks[..]));
        if csi {
            out.u64(loff);
        }
        out.count(ref_id, "chunk count", chunks.len())?;
        for c in chunks {
            out.u64(c.beg);
            out.u64(c.end);
        }
    }
    if !csi {
        out.count(ref_id, "linear index length", r.linear.len())?;
        for &offset in &r.linear {
            out.u64(offset);
        }
    }
    Ok(())
}
