//! One BGZF block, on its own: parse and validate the header, inflate with
//! the ISIZE and CRC32 checks, deflate into a complete block. The parallel
//! reader and writer are only scheduling around these functions, so all
//! format knowledge lives here (SAM spec §4.1 "The BGZF compression format").
//!
//! Block layout (little-endian):
//!
//! ```text
//! ID1 ID2 CM FLG MTIME(4) XFL OS XLEN(2)   12 bytes, FLG has FEXTRA
//! extra subfields (XLEN bytes), one of them  SI1='B' SI2='C' SLEN=2 BSIZE(2)
//! CDATA (raw deflate)
//! CRC32(4) ISIZE(4)
//! ```
//! BSIZE is the total block size minus one.

use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};

use crate::error::{BgzfError, IsizeFound, Result};

/// Largest total size of one block, header and footer included: BSIZE is a
/// `u16` holding "total block size minus 1" (SAM spec §4.1). It is also the
/// largest legal ISIZE.
pub const MAX_BLOCK_SIZE: usize = 65536;

/// Most uncompressed bytes htslib puts into one block (`BGZF_BLOCK_SIZE` in
/// htslib `bgzf.h`), chosen so that even incompressible data fits in
/// [`MAX_BLOCK_SIZE`] once deflated. Our writer uses the same limit so that
/// its block boundaries follow htslib's.
pub const MAX_PAYLOAD: usize = 0xff00;

/// The empty block that ends every BGZF file (SAM spec §4.1.2).
pub const EOF_BLOCK: [u8; 28] = [
    0x1f, 0x8b, 0x08, 0x04, 0x00, 0x00, 0x00, 0x00, // ID1 ID2 CM FLG MTIME
    0x00, 0xff, 0x06, 0x00, // XFL OS XLEN=6
    0x42, 0x43, 0x02, 0x00, 0x1b, 0x00, // 'B' 'C' SLEN=2 BSIZE=27
    0x03, 0x00, // empty fixed-Huffman deflate block
    0x00, 0x00, 0x00, 0x00, // CRC32
    0x00, 0x00, 0x00, 0x00, // ISIZE
];

/// Fixed part of a gzip member header, up to and including XLEN (RFC 1952).
pub const FIXED_HEADER_LEN: usize = 12;

/// Header length of the blocks we write: the fixed part plus the 6-byte BC
/// subfield (SAM spec §4.1).
pub const HEADER_LEN: usize = 18;

/// CRC32 and ISIZE.
pub const FOOTER_LEN: usize = 8;

/// gzip FLG bits (RFC 1952 §2.3.1).
const FLG_FTEXT: u8 = 0x01;
const FLG_FEXTRA: u8 = 0x04;

/// htslib maps its zlib-style 0..=9 levels onto libdeflate's 0..=12 scale
/// with `lvl_map = {0,1,2,3,5,6,7,8,10,12}` (`bgzf_compress`, htslib
/// `bgzf.c`, HAVE_LIBDEFLATE branch; read at snapshot cb88c90).
///
/// alnsort keeps that table except for levels 5, 6 (the default) and 7, which
/// it maps one or two libdeflate steps faster. Measured on 195 MB of the
/// benchmark BAM (`examples/recompress_levels.rs`, bench/results/): libdeflate
/// 5 runs 1.7x faster than libdeflate 7 and its output is 0.65% larger;
/// libdeflate 6 is 0.46% larger than 8. The contract is output within 1% of
/// samtools' size at the same `-l`, which the benchmark table checks.
/// Levels 1-4 and 8-9 are htslib's own: fast levels are already fast, and a
/// user asking for 8 or 9 wants the smallest file.
const LIBDEFLATE_LEVEL: [i32; 10] = [0, 1, 2, 3, 5, 5, 5, 6, 10, 12];

/// A samtools-style compression level, 0 (stored blocks) to 9 (best).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CompressionLevel(u8);

/// A compression level outside `0..=9`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid BGZF compression level {0} (must be 0..=9)")]
pub struct InvalidLevel(pub u32);

impl CompressionLevel {
    /// `-l 0` / `-u`: stored (uncompressed) deflate blocks.
    pub const UNCOMPRESSED: Self = CompressionLevel(0);
    /// Level 1: what samtools sort uses for its temporary files.
    pub const FASTEST: Self = CompressionLevel(1);
    /// Level 9.
    pub const BEST: Self = CompressionLevel(9);

    /// A level in `0..=9`. (samtools clamps larger `-l` values to 9 before
    /// they reach htslib; that policy belongs to the CLI.)
    pub const fn new(level: u32) -> Result<Self, InvalidLevel> {
        if level <= 9 {
            Ok(CompressionLevel(level as u8))
        } else {
            Err(InvalidLevel(level))
        }
    }

    /// The samtools-scale level (`0..=9`).
    pub const fn get(self) -> u32 {
        self.0 as u32
    }

    /// Whether blocks are written as stored deflate blocks.
    pub const fn is_uncompressed(self) -> bool {
        self.0 == 0
    }

    /// The libdeflate level this maps to (see [`LIBDEFLATE_LEVEL`]).
    pub fn libdeflate_level(self) -> i32 {
        LIBDEFLATE_LEVEL[usize::from(self.0)]
    }

    /// A libdeflate compressor for this level, for [`deflate_block`].
    pub fn compressor(self) -> Compressor {
        let level = CompressionLvl::new(self.libdeflate_level()).unwrap_or_default();
        Compressor::new(level)
    }
}

impl Default for CompressionLevel {
    /// `samtools sort` without `-l` opens the output as plain `"wb"`, so
    /// htslib's `mode2level` gives -1 (`Z_DEFAULT_COMPRESSION`). With
    /// libdeflate, `bgzf_compress` (htslib `bgzf.c`) turns -1 into 6
    /// ("libdeflate doesn't honour -1 as default") and then maps it through
    /// `lvl_map`, so samtools' default is level 6 = libdeflate level 7;
    /// ours is level 6 through `LIBDEFLATE_LEVEL` (libdeflate 5).
    fn default() -> Self {
        CompressionLevel(6)
    }
}

/// The parts of a block header the rest of the crate needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// Total block size in bytes (BSIZE + 1), header and footer included.
    pub bsize: usize,
    /// Header length: 12 + XLEN. The deflate data starts here.
    pub header_len: usize,
}

fn le_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

pub(crate) fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Parses and validates the header at the start of `bytes`, which must hold
/// at least the fixed 12 bytes and the XLEN extra bytes (the rest of the
/// block need not be there). `offset` is the block's compressed offset, used
/// only for error messages.
pub fn parse_header(bytes: &[u8], offset: u64) -> Result<BlockHeader> {
    let header_len = FIXED_HEADER_LEN + fixed_header(bytes, offset)?;
    if bytes.len() < header_len {
        return Err(BgzfError::Truncated {
            offset,
            needed: header_len,
            available: bytes.len(),
        });
    }
    let bsize = find_bsize(&bytes[FIXED_HEADER_LEN..header_len])
        .map_err(|reason| BgzfError::BadHeader { offset, reason })?;
    let min = header_len + FOOTER_LEN;
    if bsize < min {
        return Err(BgzfError::BlockSize {
            offset,
            size: bsize,
            min,
        });
    }
    Ok(BlockHeader { bsize, header_len })
}

/// Checks the fixed 12-byte part of a header and returns XLEN, so a stream
/// reader knows how many extra bytes to read before [`parse_header`].
pub(crate) fn fixed_header(bytes: &[u8], offset: u64) -> Result<usize> {
    let bad = |reason| BgzfError::BadHeader { offset, reason };
    if bytes.len() < FIXED_HEADER_LEN {
        return Err(BgzfError::Truncated {
            offset,
            needed: FIXED_HEADER_LEN,
            available: bytes.len(),
        });
    }
    if bytes[0] != 0x1f || bytes[1] != 0x8b {
        return Err(bad("not gzip (magic bytes are not 1f 8b)"));
    }
    if bytes[2] != 8 {
        return Err(bad("compression method is not deflate (CM != 8)"));
    }
    if bytes[3] & !FLG_FTEXT != FLG_FEXTRA {
        return Err(bad("flags must be FEXTRA only (FLG = 4)"));
    }
    Ok(usize::from(le_u16(bytes, 10)))
}

/// Scans the gzip extra subfields for BC and returns BSIZE + 1.
fn find_bsize(mut extra: &[u8]) -> std::result::Result<usize, &'static str> {
    let mut found = None;
    while !extra.is_empty() {
        if extra.len() < 4 {
            return Err("extra subfield header overruns XLEN");
        }
        let slen = usize::from(le_u16(extra, 2));
        let data = extra
            .get(4..4 + slen)
            .ok_or("extra subfield overruns XLEN")?;
        if extra[0] == b'B' && extra[1] == b'C' {
            if slen != 2 {
                return Err("BC subfield length is not 2");
            }
            if found.is_some() {
                return Err("more than one BC subfield");
            }
            found = Some(usize::from(le_u16(data, 0)) + 1);
        }
        extra = &extra[4 + slen..];
    }
    found.ok_or("no BC (block size) subfield; gzip but not BGZF")
}

/// True if `prefix` starts with a valid BGZF block header. Pass at least
/// [`HEADER_LEN`] bytes; a shorter prefix gives `false`.
pub fn is_bgzf(prefix: &[u8]) -> bool {
    parse_header(prefix, 0).is_ok()
}

/// True if `prefix` starts like any gzip member (magic and CM = deflate).
pub fn is_gzip(prefix: &[u8]) -> bool {
    prefix.len() >= 3 && prefix[0] == 0x1f && prefix[1] == 0x8b && prefix[2] == 8
}

/// Inflates one complete block (`block` starts at the header and holds at
/// least BSIZE + 1 bytes) into `out`, replacing its contents, and checks
/// ISIZE and CRC32. `out` keeps its allocation, so recycled buffers avoid
/// both allocation and zero-filling.
pub fn inflate_block(
    block: &[u8],
    block_offset: u64,
    out: &mut Vec<u8>,
    d: &mut Decompressor,
) -> Result<()> {
    let offset = block_offset;
    let header = parse_header(block, offset)?;
    if block.len() < header.bsize {
        return Err(BgzfError::Truncated {
            offset,
            needed: header.bsize,
            available: block.len(),
        });
    }
    let footer = header.bsize - FOOTER_LEN;
    let expected_crc = le_u32(block, footer);
    let isize = le_u32(block, footer + 4);
    let expected_len = isize as usize;
    if expected_len > MAX_BLOCK_SIZE {
        return Err(BgzfError::Isize {
            offset,
            expected: isize,
            got: IsizeFound::OverLimit,
        });
    }
    out.resize(expected_len, 0);
    let cdata = &block[header.header_len..footer];
    let got = match d.deflate_decompress(cdata, out) {
        Ok(n) => n,
        Err(DecompressionError::InsufficientSpace) => {
            return Err(BgzfError::Isize {
                offset,
                expected: isize,
                got: IsizeFound::More,
            });
        }
        Err(DecompressionError::BadData) => {
            return Err(BgzfError::Inflate {
                offset,
                reason: "invalid deflate stream",
            });
        }
    };
    if got != expected_len {
        return Err(BgzfError::Isize {
            offset,
            expected: isize,
            got: IsizeFound::Bytes(got),
        });
    }
    let crc = libdeflater::crc32(out);
    if crc != expected_crc {
        return Err(BgzfError::Crc {
            offset,
            expected: expected_crc,
            got: crc,
        });
    }
    Ok(())
}

/// Writes `payload` as one complete BGZF block into `out` (replacing its
/// contents). `c` must come from [`CompressionLevel::compressor`] for the
/// same `level`; it is not used at level 0. An empty payload gives exactly
/// [`EOF_BLOCK`]. If the deflate data would not fit in a block, the block
/// falls back to stored deflate, so the result is always a valid block.
pub fn deflate_block(
    payload: &[u8],
    level: CompressionLevel,
    out: &mut Vec<u8>,
    c: &mut Compressor,
) -> Result<()> {
    if payload.len() > MAX_PAYLOAD {
        return Err(BgzfError::PayloadSize {
            block_index: 0,
            len: payload.len(),
            max: MAX_PAYLOAD,
        });
    }
    let compressor = if level.is_uncompressed() {
        None
    } else {
        Some(c)
    };
    encode_block(payload, compressor, out);
    Ok(())
}

/// [`deflate_block`] for a payload already known to be at most
/// [`MAX_PAYLOAD`] bytes; `None` means stored blocks.
pub(crate) fn encode_block(payload: &[u8], c: Option<&mut Compressor>, out: &mut Vec<u8>) {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    if payload.is_empty() {
        out.clear();
        out.extend_from_slice(&EOF_BLOCK);
        return;
    }
    out.resize(MAX_BLOCK_SIZE, 0);
    out[..HEADER_LEN].copy_from_slice(&EOF_BLOCK[..HEADER_LEN]);
    let cdata = &mut out[HEADER_LEN..MAX_BLOCK_SIZE - FOOTER_LEN];
    let deflated = c.and_then(|c| c.deflate_compress(payload, cdata).ok());
    let cdata_len = match deflated {
        Some(n) => n,
        None => write_stored(payload, cdata),
    };
    let total = HEADER_LEN + cdata_len + FOOTER_LEN;
    // BSIZE = total - 1 <= 65535 because total <= MAX_BLOCK_SIZE.
    let bsize = (total - 1) as u16;
    out[16..18].copy_from_slice(&bsize.to_le_bytes());
    let footer = HEADER_LEN + cdata_len;
    out[footer..footer + 4].copy_from_slice(&libdeflater::crc32(payload).to_le_bytes());
    // ISIZE <= MAX_PAYLOAD fits in u32.
    out[footer + 4..total].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    out.truncate(total);
}

/// Writes `payload` (<= 65535 bytes) as one final stored deflate block
/// (RFC 1951 §3.2.4: BFINAL=1, BTYPE=00, LEN, NLEN) and returns its length.
fn write_stored(payload: &[u8], cdata: &mut [u8]) -> usize {
    let len = payload.len() as u16;
    cdata[0] = 0x01;
    cdata[1..3].copy_from_slice(&len.to_le_bytes());
    cdata[3..5].copy_from_slice(&(!len).to_le_bytes());
    cdata[5..5 + payload.len()].copy_from_slice(payload);
    5 + payload.len()
}

/// Compresses `data` into a complete BGZF file as [`compress_all`] cuts it
/// (blocks of [`MAX_PAYLOAD`] bytes, then the EOF block), each block's
/// deflate data made by `deflate` (raw deflate of the payload, `None` when
/// it would not fit a block: the block is stored then). For a caller that
/// must reproduce another deflate encoder's bytes (htslib's zlib).
pub fn compress_all_with(
    data: &[u8],
    mut deflate: impl FnMut(&[u8]) -> Option<Vec<u8>>,
) -> Vec<u8> {
    let mut file = Vec::with_capacity(data.len() / 2 + EOF_BLOCK.len());
    let limit = MAX_BLOCK_SIZE - HEADER_LEN - FOOTER_LEN;
    let mut stored = vec![0u8; MAX_BLOCK_SIZE];
    for payload in data.chunks(MAX_PAYLOAD) {
        let cdata = match deflate(payload).filter(|c| c.len() <= limit) {
            Some(c) => c,
            None => {
                let n = write_stored(payload, &mut stored);
                stored[..n].to_vec()
            }
        };
        let total = HEADER_LEN + cdata.len() + FOOTER_LEN;
        let at = file.len();
        file.extend_from_slice(&EOF_BLOCK[..HEADER_LEN]);
        // BSIZE = total - 1 <= 65535 because total <= MAX_BLOCK_SIZE.
        file[at + 16..at + 18].copy_from_slice(&((total - 1) as u16).to_le_bytes());
        file.extend_from_slice(&cdata);
        file.extend_from_slice(&libdeflater::crc32(payload).to_le_bytes());
        file.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    }
    file.extend_from_slice(&EOF_BLOCK);
    file
}

/// Compresses `data` into a complete BGZF file (blocks of [`MAX_PAYLOAD`]
/// bytes, then the EOF block) on the calling thread. For small outputs such
/// as index files.
pub fn compress_all(data: &[u8], level: CompressionLevel) -> Vec<u8> {
    let mut compressor = if level.is_uncompressed() {
        None
    } else {
        Some(level.compressor())
    };
    let mut file = Vec::with_capacity(data.len() / 2 + EOF_BLOCK.len());
    let mut block = Vec::new();
    for payload in data.chunks(MAX_PAYLOAD) {
        encode_block(payload, compressor.as_mut(), &mut block);
        file.extend_from_slice(&block);
    }
    file.extend_from_slice(&EOF_BLOCK);
    file
}

/// Decompresses a complete in-memory BGZF file on the calling thread,
/// checking every block and the final EOF block.
pub fn decompress_all(data: &[u8]) -> Result<Vec<u8>> {
    let mut d = Decompressor::new();
    let mut out = Vec::new();
    let mut block_out = Vec::new();
    let mut pos = 0usize;
    let mut last_isize = None;
    while pos < data.len() {
        let offset = pos as u64;
        let header = parse_header(&data[pos..], offset)?;
        let block = &data[pos..];
        inflate_block(block, offset, &mut block_out, &mut d)?;
        out.extend_from_slice(&block_out);
        last_isize = Some(block_out.len());
        pos += header.bsize;
    }
    if last_isize != Some(0) {
        return Err(BgzfError::MissingEof {
            offset: data.len() as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::noise;

    fn one_block(payload: &[u8], level: u32) -> Vec<u8> {
        let level = CompressionLevel::new(level).expect("level in range");
        let mut c = level.compressor();
        let mut out = Vec::new();
        deflate_block(payload, level, &mut out, &mut c).expect("payload fits");
        out
    }

    fn inflate(block: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        inflate_block(block, 100, &mut out, &mut Decompressor::new())?;
        Ok(out)
    }

    #[test]
    fn eof_block_parses_and_inflates_to_nothing() {
        let header = parse_header(&EOF_BLOCK, 0).expect("EOF block is valid");
        assert_eq!(
            header,
            BlockHeader {
                bsize: 28,
                header_len: 18
            }
        );
        assert_eq!(inflate(&EOF_BLOCK).expect("valid"), Vec::<u8>::new());
        assert_eq!(one_block(b"", 6), EOF_BLOCK);
    }

    #[test]
    fn default_level_matches_htslib_with_libdeflate() {
        assert_eq!(CompressionLevel::default().get(), 6);
        assert_eq!(CompressionLevel::default().libdeflate_level(), 5);
        assert_eq!(CompressionLevel::FASTEST.libdeflate_level(), 1);
        assert_eq!(CompressionLevel::BEST.libdeflate_level(), 12);
        assert_eq!(CompressionLevel::new(10), Err(InvalidLevel(10)));
        assert_eq!(
            InvalidLevel(10).to_string(),
            "invalid BGZF compression level 10 (must be 0..=9)"
        );
    }

    #[test]
    fn every_level_round_trips() {
        let payload: Vec<u8> = b"ACGTTGCA"
            .iter()
            .cycle()
            .take(MAX_PAYLOAD)
            .copied()
            .collect();
        for level in 0..=9 {
            let block = one_block(&payload, level);
            assert!(block.len() <= MAX_BLOCK_SIZE);
            assert_eq!(
                inflate(&block).expect("valid block"),
                payload,
                "level {level}"
            );
        }
    }

    #[test]
    fn level_zero_writes_a_stored_block() {
        let block = one_block(b"hello", 0);
        assert_eq!(block.len(), HEADER_LEN + 5 + 5 + FOOTER_LEN);
        assert_eq!(block[HEADER_LEN], 0x01, "BFINAL=1 BTYPE=00");
        assert_eq!(&block[HEADER_LEN + 5..HEADER_LEN + 10], b"hello");
    }

    #[test]
    fn incompressible_full_payload_fits_in_a_block() {
        let payload = noise(MAX_PAYLOAD, 42);
        for level in [1, 6, 9] {
            let block = one_block(&payload, level);
            assert!(
                block.len() <= MAX_BLOCK_SIZE,
                "level {level}: {}",
                block.len()
            );
            assert_eq!(inflate(&block).expect("valid"), payload);
        }
    }

    #[test]
    fn stored_fallback_is_a_valid_block() {
        let payload = noise(MAX_PAYLOAD, 7);
        let mut out = Vec::new();
        encode_block(&payload, None, &mut out);
        assert_eq!(out.len(), HEADER_LEN + 5 + MAX_PAYLOAD + FOOTER_LEN);
        assert_eq!(inflate(&out).expect("valid"), payload);
    }

    #[test]
    fn oversized_payload_is_rejected() {
        let level = CompressionLevel::default();
        let err = deflate_block(
            &[0; MAX_PAYLOAD + 1],
            level,
            &mut Vec::new(),
            &mut level.compressor(),
        )
        .expect_err("too large");
        assert!(matches!(err, BgzfError::PayloadSize { len, .. } if len == MAX_PAYLOAD + 1));
    }

    #[test]
    fn header_checks_name_the_problem() {
        let mut bad_magic = EOF_BLOCK;
        bad_magic[1] = 0x8c;
        assert!(matches!(
            parse_header(&bad_magic, 5),
            Err(BgzfError::BadHeader { offset: 5, reason }) if reason.contains("magic")
        ));
        let mut no_extra = EOF_BLOCK;
        no_extra[3] = 0;
        assert!(matches!(
            parse_header(&no_extra, 0),
            Err(BgzfError::BadHeader { .. })
        ));
        let mut not_bc = EOF_BLOCK;
        not_bc[13] = b'D';
        assert!(matches!(
            parse_header(&not_bc, 0),
            Err(BgzfError::BadHeader { reason, .. }) if reason.contains("BC")
        ));
        let mut tiny = EOF_BLOCK;
        tiny[16] = 10;
        assert!(matches!(
            parse_header(&tiny, 3),
            Err(BgzfError::BlockSize {
                offset: 3,
                size: 11,
                min: 26
            })
        ));
        assert!(matches!(
            parse_header(&EOF_BLOCK[..15], 9),
            Err(BgzfError::Truncated {
                offset: 9,
                needed: 18,
                available: 15
            })
        ));
    }

    #[test]
    fn bc_is_found_after_other_subfields() {
        // XLEN = 6 + 5: an 'XY' subfield with one data byte comes first.
        let mut block = EOF_BLOCK[..10].to_vec();
        block.extend_from_slice(&[11, 0, b'X', b'Y', 1, 0, 0xaa]);
        block.extend_from_slice(&[b'B', b'C', 2, 0, 32, 0]); // BSIZE = 33 - 1
        block.extend_from_slice(&EOF_BLOCK[18..]);
        assert_eq!(
            parse_header(&block, 0).expect("valid"),
            BlockHeader {
                bsize: 33,
                header_len: 23
            }
        );
        assert_eq!(inflate(&block).expect("valid"), Vec::<u8>::new());
    }

    #[test]
    fn corrupt_crc_is_reported_with_both_values() {
        let mut block = one_block(b"some payload", 6);
        let at = block.len() - 8;
        block[at] ^= 0xff;
        match inflate(&block) {
            Err(BgzfError::Crc {
                offset: 100,
                expected,
                got,
            }) => {
                assert_eq!(got, libdeflater::crc32(b"some payload"));
                assert_eq!(expected, got ^ 0xff);
            }
            other => panic!("expected CRC error, got {other:?}"),
        }
    }

    #[test]
    fn wrong_isize_is_reported() {
        let mut block = one_block(b"12345", 6);
        let at = block.len() - 4;
        block[at] = 4;
        assert!(matches!(
            inflate(&block),
            Err(BgzfError::Isize {
                offset: 100,
                expected: 4,
                got: IsizeFound::More
            })
        ));
        block[at] = 6;
        assert!(matches!(
            inflate(&block),
            Err(BgzfError::Isize {
                expected: 6,
                got: IsizeFound::Bytes(5),
                ..
            })
        ));
        block[at + 3] = 1;
        assert!(matches!(
            inflate(&block),
            Err(BgzfError::Isize {
                got: IsizeFound::OverLimit,
                ..
            })
        ));
    }

    #[test]
    fn corrupt_deflate_data_is_reported() {
        let mut block = one_block(b"hello hello hello", 6);
        block[HEADER_LEN] = 0x07; // BTYPE=11 is reserved
        assert!(matches!(
            inflate(&block),
            Err(BgzfError::Inflate { offset: 100, .. })
        ));
    }

    #[test]
    fn sniffing() {
        assert!(is_bgzf(&EOF_BLOCK));
        assert!(is_gzip(&EOF_BLOCK));
        assert!(!is_bgzf(&EOF_BLOCK[..17]));
        let plain_gzip = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(is_gzip(&plain_gzip));
        assert!(!is_bgzf(&plain_gzip));
        assert!(!is_gzip(b"BAM\x01"));
    }

    #[test]
    fn compress_all_round_trips_and_detects_missing_eof() {
        let data = noise(3 * MAX_PAYLOAD + 17, 3);
        let file = compress_all(&data, CompressionLevel::FASTEST);
        assert!(file.ends_with(&EOF_BLOCK));
        assert_eq!(decompress_all(&file).expect("valid"), data);
        let cut = &file[..file.len() - EOF_BLOCK.len()];
        assert!(matches!(
            decompress_all(cut),
            Err(BgzfError::MissingEof { offset }) if offset == cut.len() as u64
        ));
        let empty = compress_all(b"", CompressionLevel::default());
        assert_eq!(empty, EOF_BLOCK);
        assert!(decompress_all(&empty).expect("valid").is_empty());
    }
}
