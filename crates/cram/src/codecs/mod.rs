//! Block decompression (CRAM 3 §8 and CRAMcodecs): every block method,
//! into a caller's reused buffer.
//!
//! gzip (libdeflate), bzip2 and xz (the crates noodles-cram itself uses),
//! rANS 4x8 ([`rans4x8`]), rANS Nx16 ([`rans_nx16`]) and the name
//! tokeniser ([`tok3`]) are alnsort's; the arithmetic coder and fqzcomp
//! go through noodles-cram's decoders (`via_noodles`).

pub mod rans4x8;
pub mod rans_nx16;
pub mod tok3;
pub(crate) mod via_noodles;

use crate::container::RawBlock;
use crate::error::{BlockFault, DecodeError};
use std::io::{self, Read};

/// Block compression methods (CRAM 3 §8).
pub mod method {
    pub const RAW: u8 = 0;
    pub const GZIP: u8 = 1;
    pub const BZIP2: u8 = 2;
    pub const LZMA: u8 = 3;
    pub const RANS4X8: u8 = 4;
    pub const RANSNX16: u8 = 5;
    pub const ARITH: u8 = 6;
    pub const FQZCOMP: u8 = 7;
    pub const TOK3: u8 = 8;
}

/// The largest raw size a block may claim (a guard against a corrupt size
/// making a huge allocation; real blocks are a few MiB).
pub const MAX_RAW_SIZE: usize = 1 << 30;

/// Reused state of the decoders (one per decoding job).
#[derive(Default)]
pub struct CodecScratch {
    gzip: Option<libdeflater::Decompressor>,
    pub(crate) rans: rans4x8::Tables,
    pub(crate) nx16: rans_nx16::Tables,
    pub(crate) noodles: via_noodles::Shim,
}

/// The name of a block method, for messages.
pub fn method_name(m: u8) -> String {
    match m {
        method::RAW => "raw".into(),
        method::GZIP => "gzip".into(),
        method::BZIP2 => "bzip2".into(),
        method::LZMA => "lzma".into(),
        method::RANS4X8 => "rANS 4x8".into(),
        method::RANSNX16 => "rANS Nx16".into(),
        method::ARITH => "arithmetic coder".into(),
        method::FQZCOMP => "fqzcomp".into(),
        method::TOK3 => "name tokeniser".into(),
        other => format!("unknown method {other}"),
    }
}

/// Decompresses `block` into `dst` (cleared first), checking that it
/// holds exactly the block's raw size.
pub fn decode_block(
    block: &RawBlock<'_>,
    dst: &mut Vec<u8>,
    s: &mut CodecScratch,
) -> io::Result<()> {
    dst.clear();
    let raw = block.raw_size;
    // CRAM 3 §8: a block of raw size 0 is empty, whatever its method.
    if raw == 0 {
        return Ok(());
    }
    if raw > MAX_RAW_SIZE {
        return Err(BlockFault::RawTooLarge {
            content_id: block.content_id,
            raw,
            max: MAX_RAW_SIZE,
        }
        .into());
    }
    let src = block.data;
    let r = match block.method {
        method::RAW => {
            dst.extend_from_slice(src);
            Ok(())
        }
        method::GZIP => {
            // Deflate expands at most 1032:1: a larger claim is corrupt,
            // refused before the buffer is sized and zero-filled to it.
            if raw > src.len().saturating_mul(1032).saturating_add(64) {
                return Err(BlockFault::GzipExpansion {
                    content_id: block.content_id,
                    raw,
                    compressed: src.len(),
                }
                .into());
            }
            dst.resize(raw, 0);
            let d = s.gzip.get_or_insert_with(libdeflater::Decompressor::new);
            d.gzip_decompress(src, dst)
                .map_err(|e| DecodeError::Gzip(e).io())
                .map(|n| dst.truncate(n))
        }
        method::BZIP2 => read_all(bzip2::read::BzDecoder::new(src), raw, dst),
        method::LZMA => read_all(lzma_rust2::XzReader::new(src, false), raw, dst),
        method::RANS4X8 => rans4x8::decode(src, raw, dst, &mut s.rans),
        method::TOK3 => tok3::decode(src, raw, dst, s),
        method::RANSNX16 => rans_nx16::decode(src, Some(raw), dst, &mut s.nx16),
        method::ARITH | method::FQZCOMP => s.noodles.decode(block.method, src, raw, dst),
        other => Err(BlockFault::UnknownMethod { method: other }.into()),
    };
    r.map_err(|e| {
        io::Error::new(
            e.kind(),
            DecodeError::InBlock {
                content_id: block.content_id,
                method: method_name(block.method),
                error: e,
            },
        )
    })?;
    if dst.len() != raw {
        return Err(BlockFault::RawSize {
            content_id: block.content_id,
            method: method_name(block.method),
            decoded: dst.len(),
            raw,
        }
        .into());
    }
    Ok(())
}

/// Reads the `raw` bytes a block claims from a stream decoder into `dst`,
/// which grows as output arrives (from at most [`STREAM_FIRST_CAPACITY`]):
/// the claim is not trusted for an allocation, as bzip2's and xz's
/// expansion has no useful bound (deflate's has, see `decode_block`). A
/// stream that ends short of `raw` leaves `dst` short (the caller's length
/// check names both); one that gives more is an error here.
fn read_all(r: impl Read, raw: usize, dst: &mut Vec<u8>) -> io::Result<()> {
    dst.reserve(raw.min(STREAM_FIRST_CAPACITY));
    let got = r.take(raw as u64 + 1).read_to_end(dst)?;
    if got > raw {
        return Err(BlockFault::StreamLonger { raw }.into());
    }
    Ok(())
}

/// The most a bzip2 or xz block's buffer is sized to before its stream
/// gives bytes: 4 MiB, more than a block of samtools' usual slices holds
/// (the qualities of 10,000 reads of 150 bases are 1.5 MB), so that such
/// blocks take one allocation; larger ones grow as they decode.
const STREAM_FIRST_CAPACITY: usize = 4 << 20;

/// Streams made by noodles-cram's encoders (crate-private in 0.102): a
/// one-record CRAM whose `xb:B:C` tag holds the bytes, its tag block
/// written with the encoder asked for, the block then taken out of the
/// file by this crate's container reader.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::container::{RawBlock, RawContainer};
    use noodles_cram::{
        self as cram,
        codecs::Encoder,
        container::{compression_header::preservation_map::tag_sets::Key, BlockContentEncoderMap},
    };
    use noodles_sam::{
        self as sam,
        alignment::io::Write as _,
        alignment::{
            record::data::field::{Tag, Type},
            record_buf::{data::field::value::Array, data::field::Value, RecordBuf},
        },
    };

    /// The block holding `data` encoded with `encoder`: (method, stream,
    /// raw size, what it decodes to: the value's length and its bytes).
    pub(crate) fn encode_block(encoder: Encoder, data: &[u8]) -> (u8, Vec<u8>, usize, Vec<u8>) {
        let tag = Tag::from(*b"xb");
        let key = Key::new(tag, Type::Array);
        let map = BlockContentEncoderMap::builder()
            .set_default_encoder(None)
            .set_tag_values_encoder(key, Some(encoder))
            .build();
        let header = sam::Header::default();
        let mut w = cram::io::writer::Builder::default()
            .set_block_content_encoder_map(map)
            .build_from_writer(Vec::new());
        w.write_header(&header).unwrap();
        let mut rec = RecordBuf::builder()
            .set_name("r")
            .set_flags(sam::alignment::record::Flags::UNMAPPED)
            .build();
        rec.data_mut()
            .insert(tag, Value::Array(Array::UInt8(data.to_vec())));
        w.write_alignment_record(&header, &rec).unwrap();
        w.try_finish(&header).unwrap();
        let file = w.get_ref().clone();
        // Tag blocks' content ids: the tag's two letters and its type (htslib's rule).
        let id = (i32::from(b'x') << 16) | (i32::from(b'b') << 8) | i32::from(b'B');
        let mut src = &file[26..];
        let mut c = RawContainer::default();
        c.read_from(&mut src).unwrap(); // the header container
        while c.read_from(&mut src).unwrap() {
            for i in 0..c.slice_count() {
                let mut s = c.slice_bytes(i).unwrap();
                RawBlock::read(&mut s).unwrap(); // slice header
                while !s.is_empty() {
                    let b = RawBlock::read(&mut s).unwrap();
                    if b.content_id == id {
                        let mut plain = Vec::new();
                        let len = 5 + data.len() as u32;
                        crate::wire::write_itf8(&mut plain, len);
                        plain.push(b'C');
                        plain.extend_from_slice(&(data.len() as u32).to_le_bytes());
                        plain.extend_from_slice(data);
                        return (b.method, b.data.to_vec(), b.raw_size, plain);
                    }
                }
            }
        }
        panic!("no block {id} in noodles' CRAM");
    }

    /// A rANS 4x8 stream of noodles' encoder, with what it decodes to.
    pub(crate) fn rans4x8_encode(
        order: cram::codecs::rans_4x8::Order,
        data: &[u8],
    ) -> (Vec<u8>, Vec<u8>) {
        let (m, stream, _, plain) = encode_block(Encoder::Rans4x8(order), data);
        assert_eq!(m, super::method::RANS4X8);
        (stream, plain)
    }
}

#[cfg(test)]
mod timing {
    use crate::container::{content_type, RawBlock, RawContainer};
    use std::time::Instant;

    /// `ALNSORT_CRAM=FILE cargo test --release -p alnsort-cram -- --ignored
    /// --nocapture rans_against_noodles`: decodes every rANS 4x8 and rANS
    /// Nx16 block of FILE with this crate's decoders and with
    /// noodles-cram's, the same blocks in the same run (three alternating
    /// rounds), and prints the time of each. Not a test of speed (nothing
    /// is asserted about it); the outputs must be equal.
    #[test]
    #[ignore]
    fn rans_against_noodles() {
        let Ok(path) = std::env::var("ALNSORT_CRAM") else {
            return;
        };
        let file = std::fs::read(path).unwrap();
        let mut src = &file[26..];
        let mut c = RawContainer::default();
        let mut blocks: Vec<(Vec<u8>, usize, u8)> = Vec::new();
        let rans = [super::method::RANS4X8, super::method::RANSNX16];
        while c.read_from(&mut src).unwrap() {
            for i in 0..c.slice_count() {
                let mut s = c.slice_bytes(i).unwrap();
                while !s.is_empty() {
                    let b = RawBlock::read(&mut s).unwrap();
                    if rans.contains(&b.method)
                        && b.raw_size > 0
                        && b.content_type != content_type::SLICE_HEADER
                    {
                        blocks.push((b.data.to_vec(), b.raw_size, b.method));
                    }
                }
            }
        }
        let bytes: usize = blocks.iter().map(|b| b.1).sum();
        let o1 = blocks.iter().filter(|b| b.0[0] & 1 == 1).count();
        println!(
            "{} rANS blocks ({o1} order 1), {bytes} bytes decoded",
            blocks.len()
        );
        let mut s = super::CodecScratch::default();
        let mut out = Vec::new();
        let mut theirs = Vec::new();
        for round in 0..3 {
            let t = Instant::now();
            for (data, raw, m) in &blocks {
                ours(*m, data, *raw, &mut out, &mut s);
            }
            let ours_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for (data, raw, m) in &blocks {
                s.noodles.decode(*m, data, *raw, &mut theirs).unwrap();
            }
            let noodles = t.elapsed().as_secs_f64();
            println!(
                "round {round}: alnsort {ours_s:.3} s, noodles-cram {noodles:.3} s ({:.2}x)",
                noodles / ours_s
            );
        }
        for (data, raw, m) in &blocks {
            ours(*m, data, *raw, &mut out, &mut s);
            s.noodles.decode(*m, data, *raw, &mut theirs).unwrap();
            assert_eq!(out, theirs);
        }
    }

    fn ours(m: u8, data: &[u8], raw: usize, out: &mut Vec<u8>, s: &mut super::CodecScratch) {
        if m == super::method::RANS4X8 {
            super::rans4x8::decode(data, raw, out, &mut s.rans).unwrap();
        } else {
            super::rans_nx16::decode(data, Some(raw), out, &mut s.nx16).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `b"ACGT" * 250` as an xz stream (CRC32 check), as Python's
    /// `lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)`
    /// writes it (the xz crate here is built without its encoder).
    const XZ_ACGT_250: [u8; 76] = [
        0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0x00, 0x01, 0x69, 0x22, 0xde, 0x36, 0x02, 0x00, 0x21,
        0x01, 0x16, 0x00, 0x00, 0x00, 0x74, 0x2f, 0xe5, 0xa3, 0xe0, 0x03, 0xe7, 0x00, 0x0f, 0x5d,
        0x00, 0x20, 0x90, 0xc5, 0x0a, 0xbc, 0x42, 0xdd, 0x74, 0x31, 0x8a, 0xc1, 0xd1, 0x18, 0x05,
        0x00, 0x00, 0x00, 0xb1, 0xcb, 0xdd, 0x3c, 0x00, 0x01, 0x27, 0xe8, 0x07, 0x00, 0x00, 0x00,
        0xf4, 0x55, 0x8f, 0x5c, 0x3e, 0x30, 0x0d, 0x8b, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x59,
        0x5a,
    ];

    fn bzip2_acgt_250() -> Vec<u8> {
        let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
        e.write_all(&b"ACGT".repeat(250)).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn bzip2_and_xz_blocks_are_sized_by_their_output_not_their_claim() {
        let bz = bzip2_acgt_250();
        for (method, data) in [(method::BZIP2, &bz[..]), (method::LZMA, &XZ_ACGT_250[..])] {
            let block = |raw_size| RawBlock {
                method,
                content_type: 4,
                content_id: 11,
                raw_size,
                data,
            };
            let mut dst = Vec::new();
            let mut s = CodecScratch::default();
            decode_block(&block(1000), &mut dst, &mut s).expect("the claim is right");
            assert_eq!(dst, b"ACGT".repeat(250));
            // A claim of 1 GiB from ~70 bytes: an error naming the block
            // and both sizes, with no buffer near the claim.
            let mut dst = Vec::new();
            let e = decode_block(&block(MAX_RAW_SIZE), &mut dst, &mut s).unwrap_err();
            assert!(
                matches!(
                    DecodeError::of(&e),
                    Some(DecodeError::Block(BlockFault::RawSize {
                        content_id: 11,
                        decoded: 1000,
                        raw: MAX_RAW_SIZE,
                        ..
                    }))
                ),
                "{e:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("block of content id 11")
                    && msg.contains("decoded to 1000 bytes")
                    && msg.contains(&format!("its header says {MAX_RAW_SIZE}")),
                "{msg}"
            );
            assert!(
                dst.capacity() <= STREAM_FIRST_CAPACITY,
                "{}",
                dst.capacity()
            );
            // A claim short of the output.
            let e = decode_block(&block(999), &mut Vec::new(), &mut s).unwrap_err();
            let Some(DecodeError::InBlock { error, .. }) = DecodeError::of(&e) else {
                panic!("the codec's error inside the block's: {e:?}")
            };
            assert!(
                matches!(
                    DecodeError::of(error),
                    Some(DecodeError::Block(BlockFault::StreamLonger { raw: 999 }))
                ),
                "{error:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("decodes to more than the 999 bytes the block claims")
                    && msg.contains("block of content id 11"),
                "{msg}"
            );
        }
    }
}
