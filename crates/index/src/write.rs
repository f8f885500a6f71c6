//! The on-disk layouts (SAM spec §5.2 for BAI, the CSI spec for CSI), written
//! field for field as htslib's `hts_idx_save` does, and the BGZF framing CSI
//! needs. Compression itself is injected so this crate stays independent of
//! the BGZF codec.

use crate::bins::Binning;
use crate::builder::{RefIndex, META_VALUE};
use crate::error::IndexError;
use crate::finish::Parts;
use crate::IndexFormat;

/// Payload bytes per BGZF block htslib fills before flushing
/// (`BGZF_BLOCK_SIZE` in bgzf.c), which sets how a CSI is split.
pub const BGZF_BLOCK_PAYLOAD: usize = 0xff00;

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

    /// Take the uncompressed content.
    pub fn into_content(self) -> Vec<u8> {
        self.content
    }

    /// Whether the file is BGZF-compressed on disk (CSI is, BAI is not).
    pub fn is_bgzf(&self) -> bool {
        matches!(self.format, IndexFormat::Csi { .. })
    }

    /// The payload of each BGZF block, split where htslib splits it.
    pub fn bgzf_payloads(&self) -> impl Iterator<Item = &[u8]> {
        self.content.chunks(BGZF_BLOCK_PAYLOAD)
    }

    /// The file's bytes. BAI: the content as is. CSI: each payload from
    /// [`IndexFile::bgzf_payloads`] compressed by `deflate_block` (which
    /// appends one complete BGZF block to its output), then `eof_block`.
    pub fn file_bytes<E>(
        &self,
        mut deflate_block: impl FnMut(&[u8], &mut Vec<u8>) -> Result<(), E>,
        eof_block: &[u8],
    ) -> Result<Vec<u8>, E> {
        if !self.is_bgzf() {
            return Ok(self.content.clone());
        }
        let mut out = Vec::with_capacity(self.content.len() / 2 + eof_block.len());
        for payload in self.bgzf_payloads() {
            deflate_block(payload, &mut out)?;
        }
        out.extend_from_slice(eof_block);
        Ok(out)
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
