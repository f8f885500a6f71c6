//! The encodings of data series and tags (CRAM 3 §13) as a compression
//! header names them, and canonical Huffman codes built from their code
//! lengths.

use super::Fault;
use std::io;

/// then by value.
#[derive(Debug, Clone)]
pub(super) struct Huffman {
    /// Symbols in canonical order.
    pub(super) symbols: Vec<i32>,
    /// Per code length `l` (index), the first canonical code of that
    /// length, the index in `symbols` of its symbol and how many codes have
    /// that length.
    pub(super) first: Vec<(u32, usize, usize)>,
}

/// A data series or tag encoding (CRAM 3 §13). External content ids are
/// slots into the slice's blocks
/// ([`CompressionHeader::content_ids`](super::CompressionHeader)).
#[derive(Debug, Clone)]
pub(super) enum Codec {
    Null,
    External(usize),
    Huffman(Huffman),
    ByteArrayLen(Box<Codec>, Box<Codec>),
    ByteArrayStop(u8, usize),
    Beta { offset: i32, bits: u32 },
    Subexp { offset: i32, k: u32 },
    Gamma { offset: i32 },
}

impl Huffman {
    /// The canonical code of `codes`: (code length, symbol) each.
    pub(super) fn new(mut codes: Vec<(u32, i32)>) -> io::Result<Huffman> {
        codes.sort();
        let max = codes.last().map_or(0, |c| c.0) as usize;
        let mut first = vec![(0u32, 0usize, 0usize); max + 1];
        let mut code: u32 = 0;
        let mut len = codes.first().map_or(0, |c| c.0);
        for (i, &(l, _)) in codes.iter().enumerate() {
            if i > 0 {
                code += 1;
                code <<= l - len;
                len = l;
            } else {
                code = 0;
            }
            if l < 32 && (code as u64) >= 1u64 << l && l > 0 {
                return Err(Fault::Encoding {
                    what: "over-subscribed Huffman code",
                }
                .into());
            }
            let f = &mut first[l as usize];
            if f.2 == 0 {
                *f = (code, i, 0);
            }
            f.2 += 1;
        }
        Ok(Huffman {
            symbols: codes.into_iter().map(|c| c.1).collect(),
            first,
        })
    }
}
