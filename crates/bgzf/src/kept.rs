//! A BGZF output written again after its writer was killed: the blocks already on disk, read back by their headers and footers, so that the writer can check that it makes the same payloads again and deflates only what follows them.
//!
//! The writer's blocks are a function of the bytes it is given (the one
//! block packer cuts them from the units' lengths alone), so a writer fed
//! the same units again makes the same payloads. A kept block is trusted
//! only once the payload made again has the CRC32 and length its footer
//! holds (the gzip footer, RFC 1952 section 2.3.1): the writer checks
//! every kept block, never writes it again, and starts writing at the end
//! of the last one.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::block::{parse_header, FOOTER_LEN, HEADER_LEN};
use crate::error::{BgzfError, Result};

/// One block kept on disk: where it starts and what its footer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptBlock {
    /// Compressed offset of the block.
    pub offset: u64,
    /// CRC32 of the block's payload (its footer).
    pub crc32: u32,
    /// Payload length (the footer's ISIZE).
    pub isize: u32,
}

/// The blocks at the start of a file, in order, and the offset just past
/// the last of them (where writing goes on). Empty for a fresh output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptBlocks {
    blocks: Vec<KeptBlock>,
    end: u64,
}

impl KeptBlocks {
    /// Reads the blocks of `file` in `[0, end)` by their headers and
    /// footers (two short reads a block, the deflate data is not read).
    /// `end` must fall on a block boundary: the file may go on past it (a
    /// killed writer's last, partial blocks), but a block that `end` cuts
    /// through is an error.
    pub fn scan(file: &File, end: u64) -> Result<KeptBlocks> {
        let mut blocks = Vec::new();
        let mut offset = 0u64;
        let mut head = [0u8; HEADER_LEN];
        let mut foot = [0u8; FOOTER_LEN];
        while offset < end {
            file.read_exact_at(&mut head, offset)
                .map_err(|e| BgzfError::io(offset, e))?;
            let h = parse_header(&head, offset)?;
            let next = offset + h.bsize as u64;
            if next > end {
                return Err(BgzfError::KeptEnd {
                    end,
                    block: offset,
                    block_end: next,
                });
            }
            file.read_exact_at(&mut foot, next - FOOTER_LEN as u64)
                .map_err(|e| BgzfError::io(next - FOOTER_LEN as u64, e))?;
            blocks.push(KeptBlock {
                offset,
                crc32: u32::from_le_bytes([foot[0], foot[1], foot[2], foot[3]]),
                isize: u32::from_le_bytes([foot[4], foot[5], foot[6], foot[7]]),
            });
            offset = next;
        }
        Ok(KeptBlocks { blocks, end })
    }

    /// How many blocks are kept.
    pub fn len(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Whether no block is kept.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The offset just past the last kept block.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Kept block `index`, if it is one.
    pub fn get(&self, index: u64) -> Option<&KeptBlock> {
        self.blocks.get(usize::try_from(index).ok()?)
    }

    /// Checks that `payload`, made again for block `index`, is the kept
    /// block's.
    pub(crate) fn check(&self, index: u64, payload: &[u8]) -> Result<()> {
        let Some(kept) = self.get(index) else {
            return Ok(());
        };
        let crc32 = libdeflater::crc32(payload);
        if crc32 != kept.crc32 || payload.len() as u64 != u64::from(kept.isize) {
            return Err(BgzfError::KeptMismatch {
                block_index: index,
                offset: kept.offset,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{compress_all, CompressionLevel};

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.gz");
        std::fs::write(&p, bytes).unwrap();
        let f = File::open(&p).unwrap();
        (dir, f)
    }

    #[test]
    fn scans_every_block_and_refuses_an_end_inside_one() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let bgzf = compress_all(&data, CompressionLevel::default());
        let (_d, f) = file_with(&bgzf);
        let all = KeptBlocks::scan(&f, bgzf.len() as u64).unwrap();
        // 200,000 bytes in blocks of 0xff00, then the EOF block.
        assert_eq!(all.len(), 5);
        assert_eq!(all.get(0).unwrap().offset, 0);
        assert_eq!(all.get(0).unwrap().isize, 0xff00);
        assert_eq!(
            all.get(0).unwrap().crc32,
            libdeflater::crc32(&data[..0xff00])
        );
        assert_eq!(all.get(4).unwrap().isize, 0);
        let second = all.get(1).unwrap().offset;
        let two = KeptBlocks::scan(&f, all.get(2).unwrap().offset).unwrap();
        assert_eq!(two.len(), 2);
        assert!(two.check(1, &data[0xff00..2 * 0xff00]).is_ok());
        assert!(matches!(
            two.check(1, &data[..0xff00]),
            Err(BgzfError::KeptMismatch { block_index: 1, offset }) if offset == second
        ));
        // Past the kept blocks nothing is checked.
        assert!(two.check(2, b"anything").is_ok());
        assert!(matches!(
            KeptBlocks::scan(&f, second + 10),
            Err(BgzfError::KeptEnd { block, .. }) if block == second
        ));
    }

    #[test]
    fn a_file_shorter_than_its_end_is_an_error() {
        let bgzf = compress_all(b"hello", CompressionLevel::default());
        let (_d, f) = file_with(&bgzf[..10]);
        assert!(KeptBlocks::scan(&f, 40).is_err());
        assert_eq!(KeptBlocks::scan(&f, 0).unwrap(), KeptBlocks::default());
    }
}
