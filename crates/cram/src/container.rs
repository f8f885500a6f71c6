//! CRAM containers, slices and blocks read by alnsort itself (CRAM 3.0/3.1
//! §7 to §9): the reading thread cuts the file into [`RawContainer`]s
//! (header parsed, CRC32 checked, body kept as bytes), and a decoding job
//! turns each slice of one into a [`SliceBlocks`] (slice header parsed,
//! every block checked and decompressed into buffers the job reuses).
//!
//! CRAM 2.0 and 2.1 lay these out as 3.x does but for three fields (CRAM
//! 2.1 spec §7 to §8; htslib's `cram_read_container`, `cram_read_block`
//! and `cram_decode_slice_header` read them so): a container header has no
//! CRC32 and its record counter is an ITF8 (3.x: LTF8), a block has no
//! CRC32, and a slice header's record counter is an ITF8 (3.x: LTF8) and
//! no optional tags follow its MD5. Each reader takes the file's `major`
//! version; the ones without it read 3.x.

use crate::codecs::{self, CodecScratch};
use crate::error::ContainerFault;
pub(crate) use crate::wire::{read_itf8, read_ltf8};
use std::io::{self, Read};

/// The most landmarks (slices) a container header may list: a bound of
/// this decoder, not of the format (htslib has none; writers put a few
/// slices in a container), so that a damaged count is refused before that
/// many integers are read.
const MAX_LANDMARKS: usize = 1 << 20;

/// An ITF8 integer that must be a count or size (not negative).
fn read_size(src: &mut &[u8], what: &'static str) -> io::Result<usize> {
    let v = read_itf8(src)?;
    usize::try_from(v).map_err(|_| {
        ContainerFault::Negative {
            what,
            value: v.into(),
        }
        .into()
    })
}

fn read_u32_le(src: &mut &[u8]) -> io::Result<u32> {
    let (b, rest) = src
        .split_first_chunk::<4>()
        .ok_or(ContainerFault::CutShort {
            what: "32-bit integer",
        })?;
    *src = rest;
    Ok(u32::from_le_bytes(*b))
}

/// A container header (CRAM 3 §7).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerHeader {
    /// Bytes of the container's body (compression header and slices).
    pub length: usize,
    /// Reference id of its records: `>= 0` one reference, -1 unmapped, -2 several.
    pub reference_id: i32,
    pub alignment_start: i32,
    pub alignment_span: i32,
    pub record_count: i32,
    /// Records of the file before this container's first.
    pub record_counter: i64,
    pub bases: i64,
    pub block_count: i32,
    /// Each slice's offset in the body.
    pub landmarks: Vec<i32>,
    /// The header's CRC32 (0 in CRAM 2.x, which has none).
    pub crc32: u32,
}

impl ContainerHeader {
    /// Whether this is the EOF container (CRAM 3 §9; CRAM 2.1's has a body
    /// of 11 bytes, its block having no CRC32).
    pub fn is_eof(&self) -> bool {
        (self.length == 15 || self.length == 11)
            && self.reference_id == -1
            && self.alignment_start == 4_542_278
            && self.record_count == 0
            && self.block_count == 1
    }
}

/// One container read whole: its header and its body's bytes.
#[derive(Default)]
pub struct RawContainer {
    /// The major version of the file it was read from (2 or 3), which
    /// says how its blocks and slice headers are laid out.
    pub major: u8,
    pub header: ContainerHeader,
    /// The header's bytes as stored (CRC32 included).
    pub header_bytes: Vec<u8>,
    pub body: Vec<u8>,
}

/// Reads exactly `n` bytes of a container header from `r`, appending them
/// to `buf`.
fn read_more<R: Read + ?Sized>(r: &mut R, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    let at = buf.len();
    buf.resize(at + n, 0);
    r.read_exact(&mut buf[at..])
}

/// Reads one variable-length integer (ITF8 when `long` is false, else
/// LTF8) from `r` into `buf`, whole.
fn read_varint<R: Read + ?Sized>(r: &mut R, buf: &mut Vec<u8>, long: bool) -> io::Result<()> {
    read_more(r, buf, 1)?;
    let b0 = buf[buf.len() - 1];
    let extra = if long {
        b0.leading_ones() as usize
    } else {
        (b0.leading_ones() as usize).min(4)
    };
    read_more(r, buf, extra)
}

impl RawContainer {
    /// Reads the next container from `r` into `self` (its body buffer
    /// reused). Returns `false` at a clean end of the stream. The EOF
    /// container is read like any other (see [`ContainerHeader::is_eof`]).
    pub fn read_from<R: Read + ?Sized>(&mut self, r: &mut R) -> io::Result<bool> {
        self.read_from_version(r, 3)
    }

    /// As [`RawContainer::read_from`], for a file of CRAM major version
    /// `major` (2: no CRC32, an ITF8 record counter; 3).
    pub fn read_from_version<R: Read + ?Sized>(
        &mut self,
        r: &mut R,
        major: u8,
    ) -> io::Result<bool> {
        self.major = major;
        let Some((header, head)) = ContainerHeader::read_from_version(r, major)? else {
            return Ok(false);
        };
        let length = header.length;
        self.header = header;
        self.header_bytes = head;
        self.body.clear();
        // Read through `take` so that a length larger than the file does
        // not allocate it before finding out.
        let n = r.take(length as u64).read_to_end(&mut self.body)?;
        if n != length {
            return Err(ContainerFault::Bytes {
                what: "container body",
                found: n as u64,
                expected: length as u64,
            }
            .into());
        }
        Ok(true)
    }
}

impl ContainerHeader {
    /// Reads a container header from `r`, of a file of CRAM major version
    /// `major`, with the bytes it was read from; `None` at a clean end of
    /// the stream.
    pub fn read_from_version<R: Read + ?Sized>(
        r: &mut R,
        major: u8,
    ) -> io::Result<Option<(ContainerHeader, Vec<u8>)>> {
        let mut head = Vec::with_capacity(64);
        // The length, or a clean end of the stream before it.
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match r.read(&mut len[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        head.extend_from_slice(&len);
        for _ in 0..4 {
            read_varint(r, &mut head, false)?; // reference id, start, span, records
        }
        read_varint(r, &mut head, major >= 3)?; // record counter
        read_varint(r, &mut head, true)?; // bases
        read_varint(r, &mut head, false)?; // blocks
        read_varint(r, &mut head, false)?; // landmark count
                                           // Parse what has been read so far to learn the landmark count.
        let mut s = &head[4..];
        let reference_id = read_itf8(&mut s)?;
        let alignment_start = read_itf8(&mut s)?;
        let alignment_span = read_itf8(&mut s)?;
        let record_count = read_itf8(&mut s)?;
        let record_counter = if major >= 3 {
            read_ltf8(&mut s)?
        } else {
            i64::from(read_itf8(&mut s)?)
        };
        let bases = read_ltf8(&mut s)?;
        let block_count = read_itf8(&mut s)?;
        let landmark_count = read_size(&mut s, "the container's landmark count")?;
        if landmark_count > MAX_LANDMARKS {
            return Err(ContainerFault::Landmarks {
                count: landmark_count,
                max: MAX_LANDMARKS,
            }
            .into());
        }
        let at = head.len();
        for _ in 0..landmark_count {
            read_varint(r, &mut head, false)?;
        }
        let mut s = &head[at..];
        let landmarks = (0..landmark_count)
            .map(|_| read_itf8(&mut s))
            .collect::<io::Result<Vec<_>>>()?;
        let mut crc32 = 0;
        if major >= 3 {
            let mut crc = [0u8; 4];
            r.read_exact(&mut crc)?;
            crc32 = u32::from_le_bytes(crc);
            let actual = crate::wire::crc32(&head);
            head.extend_from_slice(&crc);
            if actual != crc32 {
                return Err(ContainerFault::HeaderCrc32 {
                    stored: crc32,
                    computed: actual,
                }
                .into());
            }
        }
        let length = i32::from_le_bytes(len);
        let length = usize::try_from(length).map_err(|_| ContainerFault::Negative {
            what: "container length",
            value: length.into(),
        })?;
        let header = ContainerHeader {
            length,
            reference_id,
            alignment_start,
            alignment_span,
            record_count,
            record_counter,
            bases,
            block_count,
            landmarks,
            crc32,
        };
        Ok(Some((header, head)))
    }
}

/// Reads one whole block from `r` (header, data and, from CRAM 3 on, its
/// CRC32) into `buf`, for [`RawBlock::read_version`] to parse.
pub(crate) fn read_block_bytes<R: Read + ?Sized>(
    r: &mut R,
    major: u8,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    buf.clear();
    read_more(r, buf, 2)?; // method, content type
    for _ in 0..3 {
        read_varint(r, buf, false)?; // content id, sizes
    }
    let mut s = &buf[2..];
    read_itf8(&mut s)?;
    let size = read_size(&mut s, "a block's compressed size")?;
    let at = buf.len();
    let want = size as u64 + if major >= 3 { 4 } else { 0 };
    let n = r.take(want).read_to_end(buf)?;
    if n as u64 != want {
        return Err(ContainerFault::Bytes {
            what: "block",
            found: (buf.len() - at) as u64,
            expected: want,
        }
        .into());
    }
    Ok(())
}

impl RawContainer {
    /// The compression header's bytes (the body up to the first slice).
    pub fn compression_header_bytes(&self) -> io::Result<&[u8]> {
        let end = match self.header.landmarks.first() {
            Some(&l) => self.offset(l)?,
            None => self.body.len(),
        };
        Ok(&self.body[..end])
    }

    fn offset(&self, landmark: i32) -> io::Result<usize> {
        usize::try_from(landmark)
            .ok()
            .filter(|&l| l <= self.body.len())
            .ok_or_else(|| {
                ContainerFault::LandmarkOutside {
                    landmark,
                    body: self.body.len(),
                }
                .into()
            })
    }

    /// Number of slices (landmarks).
    pub fn slice_count(&self) -> usize {
        self.header.landmarks.len()
    }

    /// The bytes of slice `i` (from its landmark to the next, or to the end).
    pub fn slice_bytes(&self, i: usize) -> io::Result<&[u8]> {
        let start = self.offset(self.header.landmarks[i])?;
        let end = match self.header.landmarks.get(i + 1) {
            Some(&l) => self.offset(l)?,
            None => self.body.len(),
        };
        if end < start {
            return Err(ContainerFault::LandmarksOutOfOrder { start, end }.into());
        }
        Ok(&self.body[start..end])
    }
}

/// Block content types (CRAM 3 §8).
pub mod content_type {
    pub const FILE_HEADER: u8 = 0;
    pub const COMPRESSION_HEADER: u8 = 1;
    pub const SLICE_HEADER: u8 = 2;
    pub const EXTERNAL: u8 = 4;
    pub const CORE: u8 = 5;
}

/// A block's header and its (still compressed) data (CRAM 3 §8).
#[derive(Clone, Copy, Debug)]
pub struct RawBlock<'a> {
    pub method: u8,
    pub content_type: u8,
    pub content_id: i32,
    pub raw_size: usize,
    pub data: &'a [u8],
}

impl<'a> RawBlock<'a> {
    /// Reads one block from the front of `src`, checking its CRC32.
    pub fn read(src: &mut &'a [u8]) -> io::Result<RawBlock<'a>> {
        RawBlock::read_version(src, 3)
    }

    /// As [`RawBlock::read`], for a file of CRAM major version `major`
    /// (2: no CRC32 follows the data).
    pub fn read_version(src: &mut &'a [u8], major: u8) -> io::Result<RawBlock<'a>> {
        let start = *src;
        let mut s = *src;
        let cut_short = || ContainerFault::CutShort { what: "block" };
        let (&method, rest) = s.split_first().ok_or_else(cut_short)?;
        s = rest;
        let (&content_type, rest) = s.split_first().ok_or_else(cut_short)?;
        s = rest;
        let content_id = read_itf8(&mut s)?;
        let size = read_size(&mut s, "a block's compressed size")?;
        let raw_size = read_size(&mut s, "a block's raw size")?;
        if s.len() < size {
            return Err(ContainerFault::BlockBytes {
                content_id,
                size,
                left: s.len(),
            }
            .into());
        }
        let (data, rest) = s.split_at(size);
        let mut after = rest;
        if major >= 3 {
            let covered = start.len() - rest.len();
            let stored = read_u32_le(&mut after)?;
            let actual = crate::wire::crc32(&start[..covered]);
            if stored != actual {
                return Err(ContainerFault::BlockCrc32 {
                    content_id,
                    stored,
                    computed: actual,
                }
                .into());
            }
        }
        *src = after;
        Ok(RawBlock {
            method,
            content_type,
            content_id,
            raw_size,
            data,
        })
    }
}

/// A slice header (CRAM 3 §8.5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceHeader {
    pub reference_id: i32,
    pub alignment_start: i32,
    pub alignment_span: i32,
    pub record_count: usize,
    pub record_counter: i64,
    /// Blocks of the slice (core and external).
    pub block_count: usize,
    pub block_content_ids: Vec<i32>,
    /// Content id of the external block holding the embedded reference, if any.
    pub embedded_reference: Option<i32>,
    /// MD5 of the reference span (all zero when none).
    pub reference_md5: [u8; 16],
    /// The optional tags, as stored (BAM-like aux bytes).
    pub tags: Vec<u8>,
}

impl SliceHeader {
    /// Reads the header of the slice in `bytes` (its first block) alone,
    /// for a file of CRAM major version `major`, leaving its data blocks
    /// as they are (a `.crai` needs no more of a single-reference slice).
    pub fn read_version(bytes: &[u8], major: u8) -> io::Result<SliceHeader> {
        let mut src = bytes;
        let head = RawBlock::read_version(&mut src, major)?;
        if head.content_type != content_type::SLICE_HEADER {
            return Err(ContainerFault::SliceStart {
                content_type: head.content_type,
            }
            .into());
        }
        let mut hb = Vec::new();
        codecs::decode_block(&head, &mut hb, &mut CodecScratch::default())?;
        SliceHeader::parse(&hb, major)
    }

    fn parse(mut s: &[u8], major: u8) -> io::Result<SliceHeader> {
        let reference_id = read_itf8(&mut s)?;
        let alignment_start = read_itf8(&mut s)?;
        let alignment_span = read_itf8(&mut s)?;
        let record_count = read_size(&mut s, "a slice's record count")?;
        let record_counter = if major >= 3 {
            read_ltf8(&mut s)?
        } else {
            i64::from(read_itf8(&mut s)?)
        };
        let block_count = read_size(&mut s, "a slice's block count")?;
        let n = read_size(&mut s, "a slice's block id count")?;
        if n > s.len() {
            return Err(ContainerFault::BlockIds {
                count: n,
                bytes: s.len(),
            }
            .into());
        }
        let block_content_ids = (0..n)
            .map(|_| read_itf8(&mut s))
            .collect::<io::Result<Vec<_>>>()?;
        let embedded = read_itf8(&mut s)?;
        let (md5, rest) = s
            .split_first_chunk::<16>()
            .ok_or(ContainerFault::CutShortBefore {
                what: "slice header",
                field: "MD5",
            })?;
        Ok(SliceHeader {
            reference_id,
            alignment_start,
            alignment_span,
            record_count,
            record_counter,
            block_count,
            block_content_ids,
            embedded_reference: (embedded >= 0).then_some(embedded),
            reference_md5: *md5,
            tags: rest.to_vec(),
        })
    }
}

/// One slice decoded to its blocks' bytes, with buffers reused from slice
/// to slice (keep one per decoding job).
#[derive(Default)]
pub struct SliceBlocks {
    pub header: SliceHeader,
    /// The core data block, decompressed.
    pub core: Vec<u8>,
    /// The external blocks, decompressed, by content id, in file order.
    pub external: Vec<(i32, Vec<u8>)>,
    /// Content ids of the external blocks compressed by the name tokeniser
    /// (whose names end with NUL, whatever stop byte an encoding names).
    pub tok3: Vec<i32>,
    spare: Vec<Vec<u8>>,
    header_buf: Vec<u8>,
    scratch: CodecScratch,
}

impl SliceBlocks {
    /// Parses the slice in `bytes` (from its header block to its last
    /// block) and decompresses every block into `self`.
    pub fn decode_slice(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.decode_slice_version(bytes, 3)
    }

    /// As [`SliceBlocks::decode_slice`], for a file of CRAM major version
    /// `major` (2: blocks without CRC32, an ITF8 record counter).
    pub fn decode_slice_version(&mut self, bytes: &[u8], major: u8) -> io::Result<()> {
        for (_, b) in self.external.drain(..) {
            self.spare.push(b);
        }
        self.core.clear();
        self.tok3.clear();
        let mut src = bytes;
        let head = RawBlock::read_version(&mut src, major)?;
        if head.content_type != content_type::SLICE_HEADER {
            return Err(ContainerFault::SliceStart {
                content_type: head.content_type,
            }
            .into());
        }
        let mut hb = std::mem::take(&mut self.header_buf);
        codecs::decode_block(&head, &mut hb, &mut self.scratch)?;
        let header = SliceHeader::parse(&hb, major);
        self.header_buf = hb;
        self.header = header?;
        let mut cores = 0;
        for _ in 0..self.header.block_count {
            let block = RawBlock::read_version(&mut src, major)?;
            match block.content_type {
                content_type::CORE => {
                    cores += 1;
                    if cores > 1 {
                        return Err(ContainerFault::TwoCoreBlocks.into());
                    }
                    let mut core = std::mem::take(&mut self.core);
                    let r = codecs::decode_block(&block, &mut core, &mut self.scratch);
                    self.core = core;
                    r?;
                }
                content_type::EXTERNAL => {
                    if block.method == codecs::method::TOK3 {
                        self.tok3.push(block.content_id);
                    }
                    let mut buf = self.spare.pop().unwrap_or_default();
                    let r = codecs::decode_block(&block, &mut buf, &mut self.scratch);
                    self.external.push((block.content_id, buf));
                    r?;
                }
                other => {
                    return Err(ContainerFault::SliceBlockType {
                        content_id: block.content_id,
                        content_type: other,
                    }
                    .into())
                }
            }
        }
        if cores == 0 {
            return Err(ContainerFault::NoCoreBlock.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::DecodeError;

    #[test]
    fn itf8_and_ltf8_forms() {
        let cases: &[(&[u8], i32)] = &[
            (&[0x00], 0),
            (&[0x7f], 127),
            (&[0x80, 0x80], 128),
            (&[0xbf, 0xff], 0x3fff),
            (&[0xc0, 0x40, 0x00], 0x4000),
            (&[0xe0, 0x20, 0x00, 0x00], 0x20_0000),
            (&[0xff, 0xff, 0xff, 0xff, 0x0f], -1),
            (&[0xf0, 0x00, 0x00, 0x01, 0x00], 16),
        ];
        for &(bytes, v) in cases {
            let mut s = bytes;
            assert_eq!(read_itf8(&mut s).unwrap(), v, "{bytes:02x?}");
            assert!(s.is_empty());
        }
        let mut s: &[u8] = &[0xe0, 0x20];
        let e = read_itf8(&mut s).unwrap_err();
        assert!(
            matches!(
                DecodeError::of(&e),
                Some(DecodeError::Wire { kind: "ITF8" })
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "ITF8 integer cut short");
        let cases: &[(&[u8], i64)] = &[
            (&[0x05], 5),
            (&[0x80, 0xff], 255),
            (&[0xc0, 0x01, 0x00], 256),
            (&[0xff, 0, 0, 0, 0, 0, 0, 1, 0], 256),
            (&[0xfe, 0, 0, 0, 0, 0, 1, 0], 256),
        ];
        for &(bytes, v) in cases {
            let mut s = bytes;
            assert_eq!(read_ltf8(&mut s).unwrap(), v, "{bytes:02x?}");
            assert!(s.is_empty());
        }
    }

    fn block(method: u8, ct: u8, id: u8, data: &[u8], raw: u8) -> Vec<u8> {
        let mut b = vec![method, ct, id, data.len() as u8, raw];
        b.extend_from_slice(data);
        let crc = crate::wire::crc32(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn block_crc_is_checked() {
        let b = block(0, content_type::EXTERNAL, 1, b"ndls", 4);
        let mut s = &b[..];
        let r = RawBlock::read(&mut s).unwrap();
        assert_eq!((r.content_id, r.raw_size, r.data), (1, 4, &b"ndls"[..]));
        assert!(s.is_empty());
        let mut bad = b.clone();
        bad[6] ^= 1;
        let e = RawBlock::read(&mut &bad[..]).unwrap_err();
        let stored = u32::from_le_bytes(b[9..13].try_into().unwrap());
        let computed = crate::wire::crc32(&bad[..9]);
        let Some(DecodeError::Container(ContainerFault::BlockCrc32 {
            content_id: 1,
            stored: s,
            computed: c,
        })) = DecodeError::of(&e)
        else {
            panic!("a typed CRC32 fault: {e:?}")
        };
        assert_eq!((*s, *c), (stored, computed));
        assert_eq!(
            e.to_string(),
            format!(
                "block of content id 1: CRC32 mismatch: stored {stored:08x}, computed {computed:08x}"
            )
        );
        // Cut inside its data: the sizes it holds and says, typed.
        let e = RawBlock::read(&mut &b[..7]).unwrap_err();
        assert!(
            matches!(
                DecodeError::of(&e),
                Some(DecodeError::Container(ContainerFault::BlockBytes {
                    content_id: 1,
                    size: 4,
                    left: 2
                }))
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "block of content id 1 cut short: 4 bytes stored, 2 left"
        );
    }

    proptest::proptest! {
        #[test]
        fn garbage_containers_and_slices_are_errors_not_panics(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
        ) {
            let mut c = RawContainer::default();
            let mut src = &data[..];
            if let Ok(true) = c.read_from(&mut src) {
                proptest::prop_assert!(c.body.len() <= data.len());
                for i in 0..c.slice_count() {
                    if let Ok(bytes) = c.slice_bytes(i) {
                        let _ = SliceBlocks::default().decode_slice(bytes);
                    }
                }
            }
            let mut sb = SliceBlocks::default();
            let _ = sb.decode_slice(&data);
        }

        #[test]
        fn slices_with_a_flipped_byte_are_errors_not_panics(at in 0usize..200, by in 1u8..=255) {
            let mut bytes = slice_bytes();
            let k = at % bytes.len();
            bytes[k] ^= by;
            let _ = SliceBlocks::default().decode_slice(&bytes);
        }
    }

    fn slice_bytes() -> Vec<u8> {
        let mut head = vec![0, 1, 4, 1, 0, 2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f];
        head.extend_from_slice(&[0; 16]);
        let mut bytes = block(0, content_type::SLICE_HEADER, 0, &head, head.len() as u8);
        bytes.extend(block(0, content_type::CORE, 0, b"\x01", 1));
        bytes.extend(block(0, content_type::EXTERNAL, 1, b"ACGT", 4));
        bytes
    }

    #[test]
    fn slice_blocks_decode_raw_blocks_and_reuse_buffers() {
        // Slice header: ref 0, start 1, span 4, 1 record, counter 0, 2 blocks, ids [1], no embedded ref.
        let bytes = slice_bytes();
        let mut sb = SliceBlocks::default();
        for _ in 0..2 {
            sb.decode_slice(&bytes).unwrap();
            assert_eq!(sb.header.record_count, 1);
            assert_eq!(sb.header.block_content_ids, vec![1]);
            assert_eq!(sb.header.embedded_reference, None);
            assert_eq!(sb.core, b"\x01");
            assert_eq!(sb.external, vec![(1, b"ACGT".to_vec())]);
        }
    }
}
