//! The data series read from a slice's blocks: an MSB-first bit reader
//! over the core block, the external blocks, and the values each encoding
//! gives (integers, bytes, byte arrays).

use super::codec::{Codec, Huffman};
use super::compression_header::CompressionHeader;
use super::{itf8, out_of_range, Fault};
use crate::container::SliceBlocks;
use std::io;

/// MSB-first bit reader over the core block.
struct BitReader<'a> {
    data: &'a [u8],
    byte: usize,
    bit: u32,
}

impl BitReader<'_> {
    #[inline]
    fn bit(&mut self) -> io::Result<u32> {
        let b = *self.data.get(self.byte).ok_or(Fault::CoreExhausted)?;
        let v = (b >> (7 - self.bit)) & 1;
        self.bit += 1;
        if self.bit == 8 {
            self.bit = 0;
            self.byte += 1;
        }
        Ok(v as u32)
    }

    fn bits(&mut self, n: u32) -> io::Result<u32> {
        let mut v: u64 = 0;
        for _ in 0..n {
            v = v << 1 | self.bit()? as u64;
        }
        Ok(v as u32)
    }
}

/// An external block being read.
#[derive(Default, Clone, Copy)]
struct Ext<'a> {
    data: &'a [u8],
    at: usize,
    /// Compressed with the name tokeniser (its names end with NUL, whatever
    /// stop byte the encoding names, as htslib reads them).
    tok3: bool,
    present: bool,
    /// The block's content id (the encodings name it).
    content_id: i32,
}

/// A slice's blocks as the decoder reads them.
pub(super) struct Streams<'a> {
    core: BitReader<'a>,
    ext: Vec<Ext<'a>>,
}

impl<'a> Streams<'a> {
    /// The streams of `slice`'s blocks: its core block, and its external
    /// blocks in the slots `ch`'s encodings name (a slot whose block the
    /// slice lacks is an error only when read).
    pub(super) fn of_slice(ch: &CompressionHeader, slice: &'a SliceBlocks) -> Streams<'a> {
        let mut st = Streams {
            core: BitReader {
                data: &slice.core,
                byte: 0,
                bit: 0,
            },
            ext: ch
                .content_ids
                .iter()
                .map(|&content_id| Ext {
                    content_id,
                    ..Ext::default()
                })
                .collect(),
        };
        for (slot, &id) in ch.content_ids.iter().enumerate() {
            if let Some((_, data)) = slice.external.iter().find(|e| e.0 == id) {
                st.ext[slot] = Ext {
                    data,
                    at: 0,
                    tok3: slice.tok3.contains(&id),
                    present: true,
                    content_id: id,
                };
            }
        }
        st
    }

    /// The external block of `slot`, if the slice has it.
    fn ext(&mut self, slot: usize) -> io::Result<&mut Ext<'a>> {
        match self.ext.get_mut(slot) {
            Some(e) if e.present => Ok(e),
            e => Err(Fault::MissingBlock {
                content_id: e.map_or(-1, |e| e.content_id),
            }
            .into()),
        }
    }

    #[inline]
    pub(super) fn int(&mut self, c: &Codec) -> io::Result<i32> {
        match c {
            Codec::External(s) => {
                let e = self.ext(*s)?;
                itf8(e.data, &mut e.at)
            }
            Codec::Huffman(h) => self.huffman(h),
            Codec::Beta { offset, bits } => {
                Ok((self.core.bits(*bits)? as i32).wrapping_sub(*offset))
            }
            Codec::Subexp { offset, k } => {
                let mut i = 0u32;
                while self.core.bit()? == 1 {
                    i += 1;
                    if i > 32 {
                        return Err(out_of_range("SUBEXP prefix", i));
                    }
                }
                let v = if i == 0 {
                    self.core.bits(*k)?
                } else {
                    let b = i + k - 1;
                    if b >= 32 {
                        return Err(out_of_range("SUBEXP bit count", b));
                    }
                    (1u32 << b) + self.core.bits(b)?
                };
                Ok((v as i32).wrapping_sub(*offset))
            }
            Codec::Gamma { offset } => {
                let mut nz = 0u32;
                while self.core.bit()? == 0 {
                    nz += 1;
                    if nz >= 32 {
                        return Err(out_of_range("GAMMA bit count", nz));
                    }
                }
                let v = (1u32 << nz) | self.core.bits(nz)?;
                Ok((v as i32).wrapping_sub(*offset))
            }
            Codec::Null => Err(Fault::Encoding {
                what: "a data series the records need has no encoding",
            }
            .into()),
            Codec::ByteArrayLen(..) | Codec::ByteArrayStop(..) => Err(Fault::Encoding {
                what: "a byte-array encoding for an integer data series",
            }
            .into()),
        }
    }

    fn huffman(&mut self, h: &Huffman) -> io::Result<i32> {
        if h.first.len() <= 1 {
            // One symbol of length 0 (or none): no bits.
            return h.symbols.first().copied().ok_or_else(|| {
                Fault::Encoding {
                    what: "an empty Huffman code is used",
                }
                .into()
            });
        }
        let mut code: u32 = 0;
        for l in 1..h.first.len() {
            code = code << 1 | self.core.bit()?;
            let (first, index, count) = h.first[l];
            if count > 0 && code >= first && ((code - first) as usize) < count {
                return Ok(h.symbols[index + (code - first) as usize]);
            }
        }
        Err(Fault::Encoding {
            what: "invalid Huffman code in the core data block",
        }
        .into())
    }

    #[inline]
    pub(super) fn byte(&mut self, c: &Codec) -> io::Result<u8> {
        match c {
            Codec::External(s) => {
                let e = self.ext(*s)?;
                let b = *e.data.get(e.at).ok_or(Fault::ExternalExhausted {
                    content_id: e.content_id,
                })?;
                e.at += 1;
                Ok(b)
            }
            other => Ok(self.int(other)? as u8),
        }
    }

    /// Appends `n` bytes of a byte series to `out`.
    pub(super) fn bytes_n(&mut self, c: &Codec, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
        // htslib's external decoders ask for no block when asked for no
        // bytes (`cram_external_decode_char`: a missing block is an error
        // only when `*out_size` is not 0), so a slice may lack the block
        // of a series it reads nothing from (htsjdk's xx#minimal.cram).
        if n == 0 {
            return Ok(());
        }
        match c {
            Codec::External(s) => {
                let e = self.ext(*s)?;
                let b = e.data.get(e.at..e.at + n).ok_or(Fault::ExternalExhausted {
                    content_id: e.content_id,
                })?;
                e.at += n;
                out.extend_from_slice(b);
            }
            other => {
                for _ in 0..n {
                    out.push(self.byte(other)?);
                }
            }
        }
        Ok(())
    }

    /// Appends one value of a byte-array series to `out`; returns its
    /// length. `fixed`: the size of a value read by an EXTERNAL encoding.
    pub(super) fn array(
        &mut self,
        c: &Codec,
        out: &mut Vec<u8>,
        fixed: usize,
    ) -> io::Result<usize> {
        match c {
            Codec::ByteArrayLen(len, val) => {
                let n = self.int(len)?;
                let n = usize::try_from(n).map_err(|_| out_of_range("byte-array length", n))?;
                self.bytes_n(val, n, out)?;
                Ok(n)
            }
            Codec::ByteArrayStop(stop, s) => {
                let e = self.ext(*s)?;
                let stop = if e.tok3 { 0 } else { *stop };
                let rest = &e.data[e.at.min(e.data.len())..];
                let n = rest
                    .iter()
                    .position(|&b| b == stop)
                    .ok_or(Fault::ExternalExhausted {
                        content_id: e.content_id,
                    })?;
                out.extend_from_slice(&rest[..n]);
                e.at += n + 1;
                Ok(n)
            }
            other => {
                self.bytes_n(other, fixed, out)?;
                Ok(fixed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::fault;

    #[test]
    fn no_bytes_asked_of_a_missing_external_block_is_no_error() {
        // htslib's external decoders only fail on a missing block when
        // asked for bytes (htsjdk's xx#minimal.cram reads 0 bases so).
        let mut st = Streams {
            core: BitReader {
                data: &[],
                byte: 0,
                bit: 0,
            },
            ext: vec![Ext {
                content_id: 9,
                ..Ext::default()
            }],
        };
        let mut out = Vec::new();
        st.bytes_n(&Codec::External(0), 0, &mut out).unwrap();
        assert!(out.is_empty());
        let e = st.bytes_n(&Codec::External(0), 1, &mut out).unwrap_err();
        assert!(
            matches!(fault(&e), Fault::MissingBlock { content_id: 9 }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "an encoding names an external block the slice lacks (content id 9)"
        );
    }

    /// Data series read past their blocks, or through encodings that
    /// cannot give them: the typed fault with the values read.
    #[test]
    fn data_series_faults_are_typed() {
        let mut st = Streams {
            core: BitReader {
                data: &[0; 5],
                byte: 0,
                bit: 0,
            },
            ext: vec![Ext {
                data: &[1, 2],
                at: 0,
                tok3: false,
                present: true,
                content_id: 7,
            }],
        };
        // 40 zero bits: GAMMA's prefix reaches 32.
        let e = st.int(&Codec::Gamma { offset: 0 }).unwrap_err();
        assert!(
            matches!(
                fault(&e),
                Fault::OutOfRange {
                    field: "GAMMA bit count",
                    value: 32
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "GAMMA bit count 32 out of range");
        // 8 bits are left: 9 are asked.
        let e = st.int(&Codec::Beta { offset: 0, bits: 9 }).unwrap_err();
        assert!(matches!(fault(&e), Fault::CoreExhausted), "{e:?}");
        assert_eq!(e.to_string(), "core data block exhausted");
        let mut out = Vec::new();
        let e = st.bytes_n(&Codec::External(0), 3, &mut out).unwrap_err();
        assert!(
            matches!(fault(&e), Fault::ExternalExhausted { content_id: 7 }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the external block of content id 7 is exhausted"
        );
        // A byte array of stop byte 0 in a block without one.
        let e = st
            .array(&Codec::ByteArrayStop(0, 0), &mut out, 0)
            .unwrap_err();
        assert!(
            matches!(fault(&e), Fault::ExternalExhausted { content_id: 7 }),
            "{e:?}"
        );
        let e = st.int(&Codec::Null).unwrap_err();
        assert!(
            matches!(
                fault(&e),
                Fault::Encoding {
                    what: "a data series the records need has no encoding"
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn huffman_codes_are_canonical() {
        // Lengths: a=1, b=2, c=3, d=3 → a 0, b 10, c 110, d 111.
        let h = Huffman::new(vec![
            (1, b'a' as i32),
            (2, b'b' as i32),
            (3, b'c' as i32),
            (3, b'd' as i32),
        ])
        .unwrap();
        let data = [0b0101_1011, 0b1000_0000];
        let mut st = Streams {
            core: BitReader {
                data: &data,
                byte: 0,
                bit: 0,
            },
            ext: Vec::new(),
        };
        let got: Vec<u8> = (0..5).map(|_| st.huffman(&h).unwrap() as u8).collect();
        assert_eq!(got, b"abcda");
        // One symbol: no bits read.
        let one = Huffman::new(vec![(0, 7)]).unwrap();
        assert_eq!(st.huffman(&one).unwrap(), 7);
        assert_eq!((st.core.byte, st.core.bit), (1, 2));
        // Exhausted core: an error, not a panic.
        assert!(st.bits(20).is_err());
    }

    impl Streams<'_> {
        fn bits(&mut self, n: u32) -> io::Result<u32> {
            self.core.bits(n)
        }
    }

    #[test]
    fn beta_gamma_subexp_read_as_the_spec_says() {
        // BETA(offset 1, 3 bits): 101 → 4. GAMMA(offset 0): 00101 → 5.
        // SUBEXP(offset 0, k 2): 0 11 → 3; 10 11 → 2^2 + 3 = 7.
        let data = [0b1010_0101, 0b0111_0110];
        let mut st = Streams {
            core: BitReader {
                data: &data,
                byte: 0,
                bit: 0,
            },
            ext: Vec::new(),
        };
        assert_eq!(st.int(&Codec::Beta { offset: 1, bits: 3 }).unwrap(), 4);
        assert_eq!(st.int(&Codec::Gamma { offset: 0 }).unwrap(), 5);
        assert_eq!(st.int(&Codec::Subexp { offset: 0, k: 2 }).unwrap(), 3);
        assert_eq!(st.int(&Codec::Subexp { offset: 0, k: 2 }).unwrap(), 7);
    }
}
