//! A container's compression header (CRAM 3 §8.4) parsed: the preservation
//! map (RN, AP, RR, SM, TD), the data series' encodings by [`Ds`] and the
//! tags' encodings by key.

use super::codec::{Codec, Huffman};
use super::{itf8, out_of_range, Fault};
use crate::codecs::{self, CodecScratch};
use crate::container::{content_type, RawBlock};
use std::io;

/// The data series (CRAM 3 §8.4.2), in the order of [`SERIES`].
#[derive(Clone, Copy)]
pub(super) enum Ds {
    BF,
    CF,
    RI,
    RL,
    AP,
    RG,
    RN,
    MF,
    NS,
    NP,
    TS,
    NF,
    TL,
    FN,
    FC,
    FP,
    DL,
    BB,
    QQ,
    BS,
    IN,
    RS,
    PD,
    HC,
    SC,
    MQ,
    BA,
    QS,
}

/// The data series' keys, in the order of [`Ds`].
const SERIES: [&[u8; 2]; 28] = [
    b"BF", b"CF", b"RI", b"RL", b"AP", b"RG", b"RN", b"MF", b"NS", b"NP", b"TS", b"NF", b"TL",
    b"FN", b"FC", b"FP", b"DL", b"BB", b"QQ", b"BS", b"IN", b"RS", b"PD", b"HC", b"SC", b"MQ",
    b"BA", b"QS",
];

/// A canonical Huffman code (CRAM 3 §13.3): symbols sorted by code length,
/// A container's compression header (CRAM 3 §8.4).
pub(crate) struct CompressionHeader {
    pub(super) read_names: bool,
    pub(super) ap_delta: bool,
    pub(super) reference_required: bool,
    /// The base a substitution code gives, by reference base (A, C, G, T,
    /// N) and code.
    pub(super) substitutions: [[u8; 4]; 5],
    /// The tag lines of the tag dictionary: (tag name, BAM type) each.
    pub(super) tag_lines: Vec<Vec<[u8; 3]>>,
    pub(super) series: Vec<Codec>,
    /// Tag encodings by key (name << 8 | type).
    tags: Vec<(u32, Codec)>,
    /// The external content ids the encodings name, by slot.
    pub(super) content_ids: Vec<i32>,
}

impl CompressionHeader {
    /// Reads the compression header block (`bytes`: the container's body
    /// up to its first slice, of a file of CRAM major version `major`),
    /// decompressing it into `buf` if need be.
    pub(crate) fn read(
        bytes: &[u8],
        major: u8,
        buf: &mut Vec<u8>,
    ) -> io::Result<CompressionHeader> {
        let mut src = bytes;
        let block = RawBlock::read_version(&mut src, major)?;
        if block.content_type != content_type::COMPRESSION_HEADER {
            return Err(Fault::NotCompressionHeader {
                content_type: block.content_type,
            }
            .into());
        }
        if block.method == codecs::method::RAW {
            return CompressionHeader::parse(block.data);
        }
        codecs::decode_block(&block, buf, &mut CodecScratch::default())?;
        CompressionHeader::parse(buf)
    }

    /// Parses the compression header block's (decompressed) data.
    pub(crate) fn parse(data: &[u8]) -> io::Result<CompressionHeader> {
        let mut ch = CompressionHeader {
            read_names: true,
            ap_delta: true,
            reference_required: true,
            substitutions: [[b'N'; 4]; 5],
            tag_lines: Vec::new(),
            series: vec![Codec::Null; SERIES.len()],
            tags: Vec::new(),
            content_ids: Vec::new(),
        };
        let mut at = 0usize;
        let take = |at: &mut usize, n: usize| -> io::Result<&[u8]> {
            let s = data.get(*at..*at + n).ok_or(Fault::Truncated {
                what: "compression header",
            })?;
            *at += n;
            Ok(s)
        };
        // Preservation map.
        itf8(data, &mut at)?;
        let n = itf8(data, &mut at)?;
        let mut sm_seen = false;
        for _ in 0..n {
            let key: [u8; 2] = take(&mut at, 2)?.try_into().expect("two bytes");
            match &key {
                b"RN" | b"AP" | b"RR" => {
                    let v = take(&mut at, 1)?[0] != 0;
                    match &key {
                        b"RN" => ch.read_names = v,
                        b"AP" => ch.ap_delta = v,
                        _ => ch.reference_required = v,
                    }
                }
                b"SM" => {
                    let sm = take(&mut at, 5)?;
                    for (r, &byte) in sm.iter().enumerate() {
                        let alts = b"ACGTN".iter().filter(|&&b| b != b"ACGTN"[r]);
                        for (i, &alt) in alts.enumerate() {
                            let code = (byte >> (6 - 2 * i)) & 3;
                            ch.substitutions[r][code as usize] = alt;
                        }
                    }
                    sm_seen = true;
                }
                b"TD" => {
                    let len = itf8(data, &mut at)?;
                    let size = usize::try_from(len).map_err(|_| out_of_range("TD size", len))?;
                    let td = take(&mut at, size)?;
                    let mut lines = td.split(|&b| b == 0).collect::<Vec<_>>();
                    if td.last() == Some(&0) {
                        lines.pop();
                    }
                    for line in lines {
                        if line.len() % 3 != 0 {
                            return Err(Fault::CompressionHeader {
                                what: "a tag dictionary line is not a list of tags",
                            }
                            .into());
                        }
                        ch.tag_lines
                            .push(line.chunks(3).map(|c| [c[0], c[1], c[2]]).collect());
                    }
                }
                &key => return Err(Fault::PreservationKey { key }.into()),
            }
        }
        if !sm_seen {
            return Err(Fault::CompressionHeader {
                what: "the compression header has no substitution matrix",
            }
            .into());
        }
        // Data series encodings.
        itf8(data, &mut at)?;
        let n = itf8(data, &mut at)?;
        for _ in 0..n {
            let key: [u8; 2] = take(&mut at, 2)?.try_into().expect("two bytes");
            let codec = ch.read_codec(data, &mut at)?;
            if let Some(i) = SERIES.iter().position(|s| **s == key) {
                ch.series[i] = codec;
            }
            // Legacy series (TC, TN) and unknown ones are not used.
        }
        // Tag encodings.
        itf8(data, &mut at)?;
        let n = itf8(data, &mut at)?;
        for _ in 0..n {
            let key = itf8(data, &mut at)? as u32;
            let codec = ch.read_codec(data, &mut at)?;
            ch.tags.push((key, codec));
        }
        ch.tags.sort_by_key(|t| t.0);
        Ok(ch)
    }

    fn slot(&mut self, id: i32) -> usize {
        match self.content_ids.iter().position(|&c| c == id) {
            Some(s) => s,
            None => {
                self.content_ids.push(id);
                self.content_ids.len() - 1
            }
        }
    }

    fn read_codec(&mut self, data: &[u8], at: &mut usize) -> io::Result<Codec> {
        let id = itf8(data, at)?;
        let len = itf8(data, at)?;
        let len = usize::try_from(len).map_err(|_| out_of_range("encoding size", len))?;
        let p = data
            .get(*at..*at + len)
            .ok_or(Fault::Truncated { what: "encoding" })?;
        *at += len;
        let mut q = 0usize;
        let codec = match id {
            0 => Codec::Null,
            1 => Codec::External(self.slot(itf8(p, &mut q)?)),
            3 => {
                let n = itf8(p, &mut q)?;
                let n = usize::try_from(n).map_err(|_| out_of_range("Huffman size", n))?;
                let mut codes = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    codes.push((0u32, itf8(p, &mut q)?));
                }
                if itf8(p, &mut q)? as usize != n {
                    return Err(Fault::Encoding {
                        what: "Huffman code lengths do not match its symbols",
                    }
                    .into());
                }
                for c in codes.iter_mut() {
                    let l = itf8(p, &mut q)?;
                    c.0 = u32::try_from(l)
                        .ok()
                        .filter(|&l| l < 32)
                        .ok_or_else(|| out_of_range("Huffman code length", l))?;
                }
                Codec::Huffman(Huffman::new(codes)?)
            }
            4 => {
                let len = self.read_codec(p, &mut q)?;
                let val = self.read_codec(p, &mut q)?;
                Codec::ByteArrayLen(Box::new(len), Box::new(val))
            }
            5 => {
                let stop = *p.first().ok_or(Fault::Truncated { what: "encoding" })?;
                q = 1;
                Codec::ByteArrayStop(stop, self.slot(itf8(p, &mut q)?))
            }
            6 => {
                let offset = itf8(p, &mut q)?;
                let bits = itf8(p, &mut q)?;
                Codec::Beta {
                    offset,
                    bits: u32::try_from(bits)
                        .ok()
                        .filter(|&b| b <= 32)
                        .ok_or_else(|| out_of_range("BETA bit count", bits))?,
                }
            }
            7 => {
                let offset = itf8(p, &mut q)?;
                let k = itf8(p, &mut q)?;
                Codec::Subexp {
                    offset,
                    k: u32::try_from(k)
                        .ok()
                        .filter(|&k| k < 32)
                        .ok_or_else(|| out_of_range("SUBEXP k", k))?,
                }
            }
            9 => Codec::Gamma {
                offset: itf8(p, &mut q)?,
            },
            id => return Err(Fault::UnsupportedEncoding { id }.into()),
        };
        Ok(codec)
    }

    /// The encoding of tag `key` (name << 8 | type).
    pub(super) fn tag_codec(&self, key: u32) -> Option<&Codec> {
        self.tags
            .binary_search_by_key(&key, |t| t.0)
            .ok()
            .map(|i| &self.tags[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::fault;

    /// A preservation map with only a substitution matrix, then `rest`
    /// (the data series and tag encodings).
    fn header_with(rest: &[u8]) -> Vec<u8> {
        let mut h = vec![7, 1, b'S', b'M', 0, 0, 0, 0, 0];
        h.extend_from_slice(rest);
        h
    }

    /// Compression headers malformed in one place each: the typed fault
    /// with the values read, and its text.
    #[test]
    fn malformed_compression_headers_give_typed_faults() {
        let err = |data: &[u8]| match CompressionHeader::parse(data) {
            Ok(_) => panic!("parsed: {data:?}"),
            Err(e) => e,
        };
        let e = err(&[5, 1, b'R']);
        assert!(
            matches!(
                fault(&e),
                Fault::Truncated {
                    what: "compression header"
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "truncated compression header");
        let e = err(&[3, 1, b'X', b'Y']);
        assert!(
            matches!(fault(&e), Fault::PreservationKey { key: [b'X', b'Y'] }),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "unknown preservation map key \"XY\"");
        let e = err(&[0, 0]);
        assert!(
            matches!(fault(&e), Fault::CompressionHeader { .. }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the compression header has no substitution matrix"
        );
        // BF: encoding 2 (none has that id).
        let e = err(&header_with(&[4, 1, b'B', b'F', 2, 0]));
        assert!(
            matches!(fault(&e), Fault::UnsupportedEncoding { id: 2 }),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "encoding 2 is not supported");
        // BF: BETA of offset 0 and 33 bits.
        let e = err(&header_with(&[6, 1, b'B', b'F', 6, 2, 0, 33]));
        assert!(
            matches!(
                fault(&e),
                Fault::OutOfRange {
                    field: "BETA bit count",
                    value: 33
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "BETA bit count 33 out of range");
        // BF: an encoding of size -1 (ITF8).
        let e = err(&header_with(&[
            9, 1, b'B', b'F', 1, 0xff, 0xff, 0xff, 0xff, 0x0f,
        ]));
        assert!(
            matches!(
                fault(&e),
                Fault::OutOfRange {
                    field: "encoding size",
                    value: -1
                }
            ),
            "{e:?}"
        );
        // BF: Huffman of one symbol (5) and two code lengths.
        let e = err(&header_with(&[7, 1, b'B', b'F', 3, 3, 1, 5, 2]));
        assert!(matches!(fault(&e), Fault::Encoding { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "Huffman code lengths do not match its symbols"
        );
    }
}
