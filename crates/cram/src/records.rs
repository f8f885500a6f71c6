//! CRAM records decoded from a slice's data series straight into BAM record
//! bytes (CRAM 3.0/3.1 §8-§10), as htslib 1.24's decoder gives them.
//!
//! The compression header ([`CompressionHeader::parse`]) gives the
//! preservation map (RN, AP, RR, SM, TD) and the encodings of the data
//! series and tags; [`SliceDecoder::decode`] walks a slice's core bit
//! stream and external blocks record by record and appends each record,
//! framed by its `block_size`, to the output buffer. What htslib's reader
//! adds is added the same way: the bases of implicit reference matches,
//! MD/NM (`md_nm.rs`) after the stored tags and before an RG from the
//! read-group series, MAPQ 0 for unmapped records, the mate fields of
//! mates attached within the slice (flags, RNEXT/PNEXT and TLEN by
//! htslib's rule), generated names when RN is not stored.

use crate::codecs::{self, CodecScratch};
use crate::container::{content_type, read_itf8, RawBlock, SliceBlocks};
use crate::error::{DecodeError, RecordFault as Fault};
use crate::md_nm;
use crate::reference::Lease;
use alnsort_bam::cigar::{self, op};
use alnsort_bam::record::reg2bin;
use std::io;
use std::sync::Arc;

/// [`Fault::OutOfRange`] of `field`, `value` as read.
fn out_of_range(field: &'static str, value: impl TryInto<i64>) -> io::Error {
    let value = value.try_into().unwrap_or(i64::MAX);
    Fault::OutOfRange { field, value }.into()
}

/// Reads one ITF8 value (CRAM 3 §2.3) at `*at` of `buf`.
#[inline]
fn itf8(buf: &[u8], at: &mut usize) -> io::Result<i32> {
    let mut s = buf.get(*at..).unwrap_or_default();
    let v = read_itf8(&mut s)?;
    *at = buf.len() - s.len();
    Ok(v)
}

/// The data series (CRAM 3 §8.4.2), in the order of [`SERIES`].
#[derive(Clone, Copy)]
enum Ds {
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

const SERIES: [&[u8; 2]; 28] = [
    b"BF", b"CF", b"RI", b"RL", b"AP", b"RG", b"RN", b"MF", b"NS", b"NP", b"TS", b"NF", b"TL",
    b"FN", b"FC", b"FP", b"DL", b"BB", b"QQ", b"BS", b"IN", b"RS", b"PD", b"HC", b"SC", b"MQ",
    b"BA", b"QS",
];

/// A canonical Huffman code (CRAM 3 §13.3): symbols sorted by code length,
/// then by value.
#[derive(Debug, Clone)]
struct Huffman {
    /// Symbols in canonical order.
    symbols: Vec<i32>,
    /// Per code length `l` (index), the first canonical code of that
    /// length, the index in `symbols` of its symbol and how many codes have
    /// that length.
    first: Vec<(u32, usize, usize)>,
}

/// A data series or tag encoding (CRAM 3 §13). External content ids are
/// slots into the slice's blocks ([`CompressionHeader::content_ids`]).
#[derive(Debug, Clone)]
enum Codec {
    Null,
    External(usize),
    Huffman(Huffman),
    ByteArrayLen(Box<Codec>, Box<Codec>),
    ByteArrayStop(u8, usize),
    Beta { offset: i32, bits: u32 },
    Subexp { offset: i32, k: u32 },
    Gamma { offset: i32 },
}

/// A container's compression header (CRAM 3 §8.4).
pub(crate) struct CompressionHeader {
    read_names: bool,
    ap_delta: bool,
    reference_required: bool,
    /// The base a substitution code gives, by reference base (A, C, G, T,
    /// N) and code.
    substitutions: [[u8; 4]; 5],
    /// The tag lines of the tag dictionary: (tag name, BAM type) each.
    tag_lines: Vec<Vec<[u8; 3]>>,
    series: Vec<Codec>,
    /// Tag encodings by key (name << 8 | type).
    tags: Vec<(u32, Codec)>,
    /// The external content ids the encodings name, by slot.
    content_ids: Vec<i32>,
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

    fn tag_codec(&self, key: u32) -> Option<&Codec> {
        self.tags
            .binary_search_by_key(&key, |t| t.0)
            .ok()
            .map(|i| &self.tags[i].1)
    }
}

impl Huffman {
    fn new(mut codes: Vec<(u32, i32)>) -> io::Result<Huffman> {
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

/// MSB-first bit reader over the core block.
struct Bits<'a> {
    data: &'a [u8],
    byte: usize,
    bit: u32,
}

impl Bits<'_> {
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
struct Streams<'a> {
    core: Bits<'a>,
    ext: Vec<Ext<'a>>,
}

impl<'a> Streams<'a> {
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
    fn int(&mut self, c: &Codec) -> io::Result<i32> {
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
    fn byte(&mut self, c: &Codec) -> io::Result<u8> {
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
    fn bytes_n(&mut self, c: &Codec, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
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
    fn array(&mut self, c: &Codec, out: &mut Vec<u8>, fixed: usize) -> io::Result<usize> {
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

/// What the records need of the file: its name (for generated read
/// names), reference lengths, read group names in header order.
pub(crate) struct FileInfo {
    /// htslib's prefix of generated names: the file's base name.
    pub prefix: Vec<u8>,
    pub ref_lengths: Vec<u64>,
    pub read_groups: Vec<Vec<u8>>,
}

/// One record's mate data, kept until the slice's mates are resolved.
#[derive(Clone, Copy)]
struct Mate {
    /// Offset of the record (its `block_size`) in the output.
    at: usize,
    flag: u16,
    ref_id: i32,
    apos: i64,
    aend: i64,
    /// The next record of the template in the slice (attached), or -1.
    line: i64,
    tlen: Option<i64>,
    explicit_tlen: Option<i64>,
    /// From this record's own mate series (detached).
    mate_ref: i32,
    mate_pos: i64,
}

const CF_QUAL_ARRAY: i32 = 1;
const CF_DETACHED: i32 = 2;
const CF_MATE_DOWNSTREAM: i32 = 4;
const CF_NO_SEQ: i32 = 8;
const CF_EXPLICIT_TLEN: i32 = 16;

/// The substitution matrix row of a reference base.
fn base_row(b: u8) -> usize {
    match b {
        b'A' | b'a' => 0,
        b'C' | b'c' => 1,
        b'G' | b'g' => 2,
        b'T' | b't' => 3,
        _ => 4,
    }
}

/// The reference a slice's mapped records are read against.
enum SliceRef {
    /// Not loaded yet (or a multi-reference slice: per record).
    None,
    /// A whole sequence by id.
    Whole(i32, Arc<noodles_fasta::record::Sequence>),
}

/// Reused buffers of one decoding job.
#[derive(Default)]
pub(crate) struct SliceDecoder {
    name: Vec<u8>,
    tags: Vec<u8>,
    seq: Vec<u8>,
    qual: Vec<u8>,
    cigar: Vec<u32>,
    /// Where the record's deletions of length 0 (a `D` feature with DL 0,
    /// as old htsjdk wrote them) stand in `cigar`: each index is that of
    /// the operation it precedes. They are not in the CIGAR, but htslib's
    /// MD has them (`^` with no bases).
    zero_dels: Vec<usize>,
    /// `cigar` with the zero-length deletions put in, for MD.
    md_cigar: Vec<u32>,
    md: Vec<u8>,
    /// The 0-based reference position of the record's first feature that
    /// gives a base past the reference's end (`X`, `B`, `b`), where htslib
    /// ends its MD (see [`md_nm::compute`]); `usize::MAX` when none.
    md_end: usize,
    array: Vec<u8>,
    mates: Vec<Mate>,
    /// Per record: the first record of the attached chain that points at
    /// it (-1: none). Grown as records and mate links reach a line, never
    /// sized by the slice header's record count, which is not trusted: a
    /// count of 2^31 would otherwise allocate and fill 16 GiB up front.
    chain_head: Vec<i64>,
    /// The same for lines more than [`NEAR_LINES`] ahead of the record
    /// whose mate link names them (only a malformed or unusually large
    /// slice has such links).
    far_heads: std::collections::HashMap<usize, i64>,
}

/// How far ahead of the current record `chain_head` grows for a mate link.
const NEAR_LINES: usize = 1 << 16;

/// Cigar being built: pending operation and length.
struct Cig<'a> {
    ops: &'a mut Vec<u32>,
    zero_dels: &'a mut Vec<usize>,
    op: u8,
    len: u32,
}

impl Cig<'_> {
    #[inline]
    fn switch(&mut self, op: u8) {
        if self.op != op {
            self.flush();
        }
        self.op = op;
    }

    /// Extends the CIGAR by `n` of `op`, merged with a preceding `op`.
    #[inline]
    fn add(&mut self, op: u8, n: u32) {
        self.switch(op);
        self.len = self.len.saturating_add(n);
    }

    /// Ends the operation being built, if it has a length.
    #[inline]
    fn flush(&mut self) {
        if self.len > 0 {
            self.ops.push(cigar::pack(self.op, self.len));
            self.len = 0;
        }
    }
}

impl SliceDecoder {
    /// The first record of the attached chain that points at line `rec`,
    /// or -1.
    fn chain_head_of(&self, rec: usize) -> i64 {
        match self.chain_head.get(rec) {
            Some(&h) if h >= 0 => h,
            _ if self.far_heads.is_empty() => -1,
            _ => self.far_heads.get(&rec).copied().unwrap_or(-1),
        }
    }

    /// Decodes the records of one slice and appends them to `out`, framed.
    /// `first_record`: the 0-based number in the file of the slice's first
    /// record (for error messages).
    pub(crate) fn decode(
        &mut self,
        ch: &CompressionHeader,
        slice: &SliceBlocks,
        file: &FileInfo,
        lease: &mut Lease,
        first_record: u64,
        out: &mut Vec<u8>,
    ) -> io::Result<usize> {
        let h = &slice.header;
        let mut st = Streams {
            core: Bits {
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
        let embedded: Option<&[u8]> = match h.embedded_reference {
            Some(id) => {
                let b = slice
                    .external
                    .iter()
                    .find(|e| e.0 == id)
                    .ok_or(Fault::EmbeddedReferenceMissing { content_id: id })?;
                if (b.1.len() as i64) < h.alignment_span as i64 {
                    return Err(Fault::EmbeddedReferenceShort {
                        len: b.1.len(),
                        span: h.alignment_span.into(),
                    }
                    .into());
                }
                Some(&b.1)
            }
            None => None,
        };
        // htslib checks every slice of one reference whose records were
        // written against it (RR true), against the reference given or
        // the slice's embedded one.
        if let (true, Ok(id)) = (ch.reference_required, usize::try_from(h.reference_id)) {
            lease.check_slice(
                id,
                h.alignment_start as i64 - 1,
                h.alignment_span as i64,
                &h.reference_md5,
                embedded,
            )?;
        }
        self.mates.clear();
        self.chain_head.clear();
        self.far_heads.clear();
        let mut slice_ref = SliceRef::None;
        let mut last_apos = h.alignment_start as i64;
        for rec in 0..h.record_count {
            let number = first_record + rec as u64 + 1;
            self.record(
                ch,
                h,
                &mut st,
                file,
                lease,
                embedded,
                &mut slice_ref,
                &mut last_apos,
                rec,
                out,
            )
            .map_err(|e| match crate::error::take_reference_error(e) {
                Ok(r) => io::Error::other(r),
                Err(error) => DecodeError::InRecord { number, error }.io(),
            })?;
        }
        self.resolve_mates(out).map_err(|error| {
            DecodeError::InMates {
                first: first_record + 1,
                last: first_record + h.record_count as u64,
                error,
            }
            .io()
        })?;
        Ok(h.record_count)
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        ch: &CompressionHeader,
        h: &crate::container::SliceHeader,
        st: &mut Streams<'_>,
        file: &FileInfo,
        lease: &mut Lease,
        embedded: Option<&[u8]>,
        slice_ref: &mut SliceRef,
        last_apos: &mut i64,
        rec: usize,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let s = &ch.series;
        let ds = |d: Ds| &s[d as usize];
        let bf = st.int(ds(Ds::BF))?;
        if !(0..=0xffff).contains(&bf) {
            return Err(out_of_range("BAM flags", bf));
        }
        let mut flag = bf as u16;
        let cf = st.int(ds(Ds::CF))?;
        let ref_id = if h.reference_id == -2 {
            st.int(ds(Ds::RI))?
        } else {
            h.reference_id
        };
        if ref_id < -1 || ref_id as i64 >= file.ref_lengths.len() as i64 {
            return Err(Fault::NotIn {
                what: "reference id",
                value: ref_id.into(),
                place: "the header",
            }
            .into());
        }
        let rl = st.int(ds(Ds::RL))?;
        let rl = usize::try_from(rl)
            .ok()
            .filter(|&n| n < 1 << 28)
            .ok_or_else(|| out_of_range("read length", rl))?;
        let mut apos = st.int(ds(Ds::AP))? as i64;
        if ch.ap_delta {
            apos += *last_apos;
            *last_apos = apos;
        }
        let rg = st.int(ds(Ds::RG))?;
        let rg = if rg == -1 {
            None
        } else {
            let name = usize::try_from(rg)
                .ok()
                .and_then(|i| file.read_groups.get(i))
                .ok_or(Fault::NotIn {
                    what: "read group",
                    value: rg.into(),
                    place: "the header",
                })?;
            (name != b"UNKNOWN" || rg as usize + 1 != file.read_groups.len()).then_some(name)
        };
        self.name.clear();
        let mut has_name = false;
        if ch.read_names {
            st.array(ds(Ds::RN), &mut self.name, 1)?;
            has_name = true;
        }
        let mut m = Mate {
            at: out.len(),
            flag: 0,
            ref_id,
            apos,
            aend: apos,
            line: -1,
            tlen: None,
            explicit_tlen: None,
            mate_ref: -1,
            mate_pos: 0,
        };
        if cf & CF_DETACHED != 0 {
            let mf = st.int(ds(Ds::MF))?;
            if !ch.read_names {
                st.array(ds(Ds::RN), &mut self.name, 1)?;
                has_name = true;
            }
            m.mate_ref = st.int(ds(Ds::NS))?;
            if m.mate_ref < -1 || m.mate_ref as i64 >= file.ref_lengths.len() as i64 {
                return Err(Fault::NotIn {
                    what: "mate reference id",
                    value: m.mate_ref.into(),
                    place: "the header",
                }
                .into());
            }
            m.mate_pos = st.int(ds(Ds::NP))? as i64;
            m.tlen = Some(st.int(ds(Ds::TS))? as i64);
            if mf & 1 != 0 {
                flag |= 0x1 | 0x20;
            }
            if mf & 2 != 0 {
                flag |= 0x8;
            }
            if flag & 0x1 == 0 {
                m.mate_ref = -1;
            }
        } else if cf & CF_MATE_DOWNSTREAM != 0 {
            let nf = st.int(ds(Ds::NF))? as i64;
            m.line = rec as i64 + nf + 1;
            if nf < 0 || m.line >= h.record_count as i64 {
                return Err(Fault::NotIn {
                    what: "mate line",
                    value: m.line,
                    place: "the slice",
                }
                .into());
            }
            let head = match self.chain_head_of(rec) {
                -1 => rec as i64,
                x => x,
            };
            let line = m.line as usize;
            if line - rec <= NEAR_LINES {
                if self.chain_head.len() <= line {
                    self.chain_head.resize(line + 1, -1);
                }
                self.chain_head[line] = head;
            } else {
                self.far_heads.insert(line, head);
            }
            if cf & CF_EXPLICIT_TLEN != 0 {
                m.explicit_tlen = Some(st.int(ds(Ds::TS))? as i64);
            }
        } else if cf & CF_EXPLICIT_TLEN != 0 {
            m.explicit_tlen = Some(st.int(ds(Ds::TS))? as i64);
        }

        // Tags, as BAM bytes.
        self.tags.clear();
        let tl = st.int(ds(Ds::TL))?;
        let line = usize::try_from(tl)
            .ok()
            .and_then(|i| ch.tag_lines.get(i))
            .ok_or(Fault::NotIn {
                what: "tag line",
                value: tl.into(),
                place: "the tag dictionary",
            })?;
        let (mut has_md, mut has_nm) = (false, false);
        for t in line {
            has_md |= t[..2] == *b"MD";
            has_nm |= t[..2] == *b"NM";
            let key = (t[0] as u32) << 16 | (t[1] as u32) << 8 | t[2] as u32;
            let codec = ch.tag_codec(key).ok_or(Fault::TagEncoding {
                tag: [t[0], t[1]],
                ty: t[2],
            })?;
            let at = self.tags.len();
            self.tags.extend_from_slice(t);
            let fixed = match t[2] {
                b's' | b'S' => 2,
                b'i' | b'I' | b'f' => 4,
                _ => 1,
            };
            st.array(codec, &mut self.tags, fixed)?;
            // htslib's `cram_decode_aux`: a one-byte cF:C is the writer's
            // CRAM flags for the record, never output; bit 1 says its MD,
            // bit 2 its NM, is not to be generated.
            if *t == *b"cFC" && self.tags.len() == at + 4 {
                let cf_tag = self.tags[at + 3];
                self.tags.truncate(at);
                has_md |= cf_tag & 1 != 0;
                has_nm |= cf_tag & 2 != 0;
            }
        }

        // Sequence, qualities, CIGAR.
        self.seq.clear();
        self.qual.clear();
        self.cigar.clear();
        let unmapped = flag & 0x4 != 0;
        let mapq;
        let mut l_seq = rl;
        let mut span: i64 = 0;
        let mut refseq: Option<(&[u8], i64)> = None;
        let whole;
        if unmapped {
            mapq = 0u8;
            if rl > 0 {
                st.bytes_n(ds(Ds::BA), rl, &mut self.seq)?;
            }
            if cf & CF_QUAL_ARRAY != 0 {
                st.bytes_n(ds(Ds::QS), rl, &mut self.qual)?;
            } else {
                self.qual.resize(rl, 0xff);
            }
        } else {
            if apos <= 0 {
                return Err(out_of_range("mapped record's alignment position", apos));
            }
            // The reference: embedded, or the whole sequence (RR), or none.
            if ref_id >= 0 {
                if let Some(e) = embedded {
                    if h.reference_id == ref_id {
                        refseq = Some((e, h.alignment_start as i64 - 1));
                    }
                } else if ch.reference_required {
                    let fresh = !matches!(slice_ref, SliceRef::Whole(id, _) if *id == ref_id);
                    if fresh {
                        let seq = lease.sequence(ref_id as usize)?;
                        // Bases no slice MD5 vouches for (checked in
                        // `decode` when the slice has one).
                        if h.reference_id != ref_id || h.reference_md5 == [0; 16] {
                            let span = (h.reference_id == ref_id).then(|| {
                                let first = h.alignment_start as i64;
                                (first, first + h.alignment_span as i64 - 1)
                            });
                            lease.refuse_unchecked(ref_id as usize, span)?;
                        }
                        *slice_ref = SliceRef::Whole(ref_id, seq);
                    }
                    if let SliceRef::Whole(_, seq) = slice_ref {
                        whole = Arc::clone(seq);
                        refseq = Some((whole.as_ref().as_ref(), 0));
                    }
                }
            }
            if refseq.is_none() {
                self.seq.resize(rl, b'=');
            } else {
                self.seq.resize(rl, b'N');
            }
            self.qual.resize(rl, 0xff);
            let ref_len = if ref_id >= 0 {
                file.ref_lengths[ref_id as usize] as i64
            } else {
                0
            };
            span = self.features(ch, st, cf, rl, apos, ref_len, refseq)?;
            mapq = st.int(ds(Ds::MQ))? as u8;
            if cf & CF_QUAL_ARRAY != 0 {
                self.qual.clear();
                st.bytes_n(ds(Ds::QS), rl, &mut self.qual)?;
            }
            if cf & CF_NO_SEQ != 0 {
                l_seq = 0;
            }
            m.aend = apos.max(apos + span - 1);
        }
        m.flag = flag;
        // Name: stored, or generated as htslib generates it.
        if !has_name || self.name.is_empty() {
            self.name.clear();
            self.name.extend_from_slice(&file.prefix);
            self.name.push(b':');
            let head = self.chain_head_of(rec);
            let k = if head >= 0 && m.line < 0 {
                head
            } else {
                rec as i64
            };
            let n = h.record_counter.wrapping_add(k + 1);
            self.name.extend_from_slice(n.to_string().as_bytes());
        }
        if self.name.is_empty() {
            self.name.push(b'*');
        }

        // The BAM record.
        let start = out.len();
        let pos = apos - 1;
        let l_name = u8::try_from(self.name.len() + 1)
            .map_err(|_| out_of_range("read name length", self.name.len()))?;
        let long_cigar = self.cigar.len() > 0xffff;
        let bin = {
            let extent = if unmapped { rl as i64 } else { span };
            if pos < 0 || (extent == 0 && pos == 0) {
                4680
            } else {
                reg2bin(pos, pos + extent)
            }
        };
        let pos32 = i32::try_from(pos.max(-1)).map_err(|_| out_of_range("position", apos))?;
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&ref_id.to_le_bytes());
        out.extend_from_slice(&pos32.to_le_bytes());
        out.push(l_name);
        out.push(mapq);
        out.extend_from_slice(&bin.to_le_bytes());
        let n_cigar: u16 = if long_cigar {
            2
        } else {
            self.cigar.len() as u16
        };
        out.extend_from_slice(&n_cigar.to_le_bytes());
        out.extend_from_slice(&flag.to_le_bytes());
        out.extend_from_slice(&(l_seq as u32).to_le_bytes());
        // Mate fields: set when the slice's mates are resolved.
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(&self.name);
        out.push(0);
        if long_cigar {
            out.extend_from_slice(&((l_seq as u32) << 4 | 4).to_le_bytes());
            out.extend_from_slice(&((span as u32) << 4 | 3).to_le_bytes());
        } else {
            for c in &self.cigar {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        let bases = &self.seq[..l_seq];
        out.extend(
            bases
                .chunks(2)
                .map(|p| md_nm::nt16(p[0]) << 4 | p.get(1).map_or(0, |&b| md_nm::nt16(b))),
        );
        out.extend_from_slice(&self.qual[..l_seq]);
        out.extend_from_slice(&self.tags);
        // htslib adds MD/NM to a placed record unless its CRAM flags say it
        // has no sequence: a read of length 0 not so flagged (old htsjdk
        // wrote them) gets them too.
        if !unmapped && ref_id >= 0 && cf & CF_NO_SEQ == 0 && !(has_md && has_nm) {
            if let Some((reference, offset)) = refseq {
                let at = usize::try_from(pos - offset)
                    .map_err(|_| Fault::BeforeEmbeddedReference { position: apos })?;
                // In `reference`'s coordinates (an embedded one starts at
                // the slice's start).
                let offset = usize::try_from(offset).unwrap_or(0);
                let ends = md_nm::Ends {
                    reference: (file.ref_lengths[ref_id as usize] as usize).saturating_sub(offset),
                    md: self.md_end.saturating_sub(offset),
                };
                let cigar = if self.zero_dels.is_empty() {
                    &self.cigar
                } else {
                    self.md_cigar.clear();
                    let mut dels = self.zero_dels.iter().peekable();
                    for (i, &c) in self.cigar.iter().enumerate() {
                        while dels.next_if(|&&d| d == i).is_some() {
                            self.md_cigar.push(cigar::pack(op::DELETION, 0));
                        }
                        self.md_cigar.push(c);
                    }
                    self.md_cigar
                        .extend(dels.map(|_| cigar::pack(op::DELETION, 0)));
                    &self.md_cigar
                };
                if let Some(nm) = md_nm::compute(bases, cigar, at, reference, ends, &mut self.md) {
                    md_nm::push(
                        out,
                        (!has_md).then_some(&self.md[..]),
                        (!has_nm).then_some(nm),
                    );
                }
            }
        }
        if let Some(rg) = rg {
            out.extend_from_slice(b"RGZ");
            out.extend_from_slice(rg);
            out.push(0);
        }
        if long_cigar {
            out.extend_from_slice(b"CGBI");
            out.extend_from_slice(&(self.cigar.len() as u32).to_le_bytes());
            for c in &self.cigar {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        let block_size = u32::try_from(out.len() - start - 4)
            .map_err(|_| out_of_range("record size", out.len() - start - 4))?;
        out[start..start + 4].copy_from_slice(&block_size.to_le_bytes());
        self.mates.push(m);
        Ok(())
    }

    /// Decodes a mapped record's read features (CRAM 3 §10.6) into its
    /// bases, qualities and CIGAR; returns its reference span.
    #[allow(clippy::too_many_arguments)]
    fn features(
        &mut self,
        ch: &CompressionHeader,
        st: &mut Streams<'_>,
        cf: i32,
        rl: usize,
        apos: i64,
        ref_len: i64,
        refseq: Option<(&[u8], i64)>,
    ) -> io::Result<i64> {
        let s = &ch.series;
        let ds = |d: Ds| &s[d as usize];
        let ref_at = |p: i64| -> u8 {
            match refseq {
                Some((r, off)) if p < ref_len => usize::try_from(p - off)
                    .ok()
                    .and_then(|i| r.get(i))
                    .copied()
                    .unwrap_or(b'N'),
                _ => b'N',
            }
        };
        let fn_ = st.int(ds(Ds::FN))?;
        self.md_end = usize::MAX;
        let mut md_end = i64::MAX;
        let mut prev_pos: i64 = 0;
        let mut seq_pos: i64 = 1;
        let mut ref_pos: i64 = apos - 1;
        self.zero_dels.clear();
        let mut cig = Cig {
            ops: &mut self.cigar,
            zero_dels: &mut self.zero_dels,
            op: op::MATCH,
            len: 0,
        };
        let seq = &mut self.seq;
        let qual = &mut self.qual;
        let rl_i = rl as i64;
        let fill_qual = |qual: &mut Vec<u8>| {
            if cf & CF_QUAL_ARRAY == 0 && rl > 0 && qual[0] == 0xff {
                qual.iter_mut().for_each(|q| *q = 30);
            }
        };
        for _ in 0..fn_ {
            let op = st.byte(ds(Ds::FC))?;
            let pos = prev_pos + st.int(ds(Ds::FP))? as i64;
            if pos <= 0 {
                return Err(Fault::FeatureOutsideRead {
                    position: pos,
                    read_length: rl_i,
                }
                .into());
            }
            if rl != 0 && pos > rl_i {
                let valid_end = if matches!(op, b'N' | b'P' | b'H' | b'D') {
                    rl_i + 1
                } else {
                    rl_i
                };
                if pos > valid_end {
                    return Err(Fault::FeatureOutsideRead {
                        position: pos,
                        read_length: rl_i,
                    }
                    .into());
                }
            }
            if pos > seq_pos {
                let n = pos - seq_pos;
                if rl > 0 {
                    copy_ref(
                        seq,
                        (seq_pos - 1) as usize,
                        n as usize,
                        ref_pos,
                        ref_len,
                        refseq,
                    );
                }
                cig.add(op::MATCH, n as u32);
                ref_pos += n;
                seq_pos = pos;
            }
            prev_pos = pos;
            let at = (pos - 1) as usize;
            match op {
                b'S' => {
                    self.array.clear();
                    let n = st.array(ds(Ds::SC), &mut self.array, 1)?;
                    put(seq, rl, at, &self.array)?;
                    cig.flush();
                    cig.ops.push(cigar::pack(op::SOFT_CLIP, n as u32));
                    cig.op = op::SOFT_CLIP;
                    seq_pos += n as i64;
                }
                b'X' => {
                    if ref_pos >= ref_len {
                        md_end = md_end.min(ref_pos);
                    }
                    let code = st.byte(ds(Ds::BS))? as usize & 3;
                    let row = if refseq.is_none() || ref_pos >= ref_len {
                        4
                    } else {
                        base_row(ref_at(ref_pos))
                    };
                    put(seq, rl, at, &[ch.substitutions[row][code]])?;
                    cig.add(op::MATCH, 1);
                    seq_pos += 1;
                    ref_pos += 1;
                }
                b'D' => {
                    let n = nonneg(st.int(ds(Ds::DL))?)?;
                    cig.add(op::DELETION, n);
                    if n == 0 {
                        // htslib's decoder ends the operation before it
                        // (as `add` did) and writes `^` into the MD.
                        cig.zero_dels.push(cig.ops.len());
                    }
                    ref_pos += n as i64;
                }
                b'I' => {
                    self.array.clear();
                    let n = st.array(ds(Ds::IN), &mut self.array, 1)?;
                    put(seq, rl, at, &self.array)?;
                    cig.add(op::INSERTION, n as u32);
                    seq_pos += n as i64;
                }
                b'i' => {
                    let b = st.byte(ds(Ds::BA))?;
                    put(seq, rl, at, &[b])?;
                    cig.add(op::INSERTION, 1);
                    seq_pos += 1;
                }
                b'b' => {
                    self.array.clear();
                    let n = st.array(ds(Ds::BB), &mut self.array, 1)?;
                    if n > 0 && ref_pos + n as i64 > ref_len {
                        md_end = md_end.min(ref_pos.max(ref_len));
                    }
                    put(seq, rl, at, &self.array)?;
                    cig.add(op::MATCH, n as u32);
                    seq_pos += n as i64;
                    ref_pos += n as i64;
                }
                b'q' => {
                    cig.switch(op::MATCH);
                    fill_qual(qual);
                    self.array.clear();
                    st.array(ds(Ds::QQ), &mut self.array, 1)?;
                    put(qual, rl, at, &self.array)?;
                }
                b'B' => {
                    if ref_pos >= ref_len {
                        md_end = md_end.min(ref_pos);
                    }
                    let b = st.byte(ds(Ds::BA))?;
                    put(seq, rl, at, &[b])?;
                    fill_qual(qual);
                    let q = st.byte(ds(Ds::QS))?;
                    put(qual, rl, at, &[q])?;
                    cig.add(op::MATCH, 1);
                    seq_pos += 1;
                    ref_pos += 1;
                }
                b'Q' => {
                    fill_qual(qual);
                    let q = st.byte(ds(Ds::QS))?;
                    put(qual, rl, at, &[q])?;
                }
                b'H' => {
                    cig.add(op::HARD_CLIP, nonneg(st.int(ds(Ds::HC))?)?);
                }
                b'P' => {
                    cig.add(op::PADDING, nonneg(st.int(ds(Ds::PD))?)?);
                }
                b'N' => {
                    let n = nonneg(st.int(ds(Ds::RS))?)?;
                    cig.add(op::SKIP, n);
                    ref_pos += n as i64;
                }
                code => return Err(Fault::UnknownFeature { code }.into()),
            }
        }
        // An implicit match for the bases after the last feature.
        if rl_i >= seq_pos {
            let n = rl_i - seq_pos + 1;
            copy_ref(
                seq,
                (seq_pos - 1) as usize,
                n as usize,
                ref_pos,
                ref_len,
                refseq,
            );
            cig.add(op::MATCH, n as u32);
            ref_pos += n;
        }
        cig.flush();
        self.md_end = usize::try_from(md_end).unwrap_or(usize::MAX);
        Ok(ref_pos - (apos - 1))
    }

    /// Sets the mate fields of the slice's records (htslib's
    /// `cram_decode_slice_xref`): attached mates from each other, detached
    /// ones from their own series.
    fn resolve_mates(&mut self, out: &mut [u8]) -> io::Result<()> {
        let n = self.mates.len();
        let ms = &mut self.mates;
        for rec in 0..n {
            if ms[rec].line >= 0 {
                if ms[rec].tlen.is_none() {
                    // The chain from this record: its span and signs.
                    let mut id2 = rec;
                    let (mut aleft, mut aright) = (ms[rec].apos, ms[rec].aend);
                    let (mut left_cnt, mut right_cnt) = (0, 0);
                    let mut same_ref = true;
                    let r = ms[rec].ref_id;
                    let mut steps = 0;
                    loop {
                        let m = ms[id2];
                        if aleft > m.apos {
                            aleft = m.apos;
                            left_cnt = 1;
                        } else if aleft == m.apos {
                            left_cnt += 1;
                        }
                        if aright < m.aend {
                            aright = m.aend;
                            right_cnt = 1;
                        } else if aright == m.aend {
                            right_cnt += 1;
                        }
                        if m.line == -1 {
                            ms[id2].line = rec as i64;
                            break;
                        }
                        if m.line as usize <= id2 || m.line as usize >= n {
                            // Record id2 is linked already (its line
                            // points back to its chain's first record).
                            return Err(Fault::MateOfTwo {
                                record: id2 as i64 + 1,
                            }
                            .into());
                        }
                        id2 = m.line as usize;
                        if ms[id2].ref_id != r {
                            same_ref = false;
                        }
                        steps += 1;
                        if steps > n || id2 == rec {
                            break;
                        }
                    }
                    let chain = |ms: &mut Vec<Mate>, f: &mut dyn FnMut(usize, &mut Mate)| {
                        let mut id = ms[rec].line as usize;
                        let mut guard = 0;
                        while id != rec && guard <= n {
                            let mut m = ms[id];
                            f(id, &mut m);
                            ms[id] = m;
                            match usize::try_from(ms[id].line) {
                                Ok(next) if next < n => id = next,
                                _ => break,
                            }
                            guard += 1;
                        }
                    };
                    if same_ref {
                        let mut tlen = aright - aleft + 1;
                        let head = ms[rec];
                        if head.apos == aleft && (head.aend < aright || left_cnt <= 1) {
                            ms[rec].tlen = Some(tlen);
                            tlen = -tlen;
                        } else if head.apos == aleft
                            && head.aend == aright
                            && left_cnt > 1
                            && right_cnt > 1
                        {
                            if head.flag & 0x40 != 0 {
                                ms[rec].tlen = Some(tlen);
                                tlen = -tlen;
                            } else {
                                ms[rec].tlen = Some(-tlen);
                            }
                        } else {
                            ms[rec].tlen = Some(-tlen);
                        }
                        chain(ms, &mut |_, m| m.tlen = Some(tlen));
                    } else {
                        ms[rec].tlen = Some(0);
                        chain(ms, &mut |_, m| m.tlen = Some(0));
                    }
                }
                let line = ms[rec].line as usize;
                if line < n {
                    let mate = ms[line];
                    let m = &mut ms[rec];
                    m.mate_pos = mate.apos;
                    m.mate_ref = mate.ref_id;
                    m.flag |= 0x1;
                    if mate.flag & 0x4 != 0 {
                        m.flag |= 0x8;
                        m.tlen = Some(0);
                    }
                    if m.flag & 0x4 != 0 {
                        m.tlen = Some(0);
                    }
                    if mate.flag & 0x10 != 0 {
                        m.flag |= 0x20;
                    }
                }
            }
        }
        for m in ms.iter() {
            let tlen = m.explicit_tlen.or(m.tlen).unwrap_or(0);
            let r = &mut out[m.at + 4..];
            r[14..16].copy_from_slice(&m.flag.to_le_bytes());
            r[20..24].copy_from_slice(&m.mate_ref.to_le_bytes());
            r[24..28].copy_from_slice(&((m.mate_pos - 1).max(-1) as i32).to_le_bytes());
            r[28..32].copy_from_slice(&(tlen as i32).to_le_bytes());
        }
        Ok(())
    }
}

/// Copies the `n` reference bases from 0-based `ref_pos` into `seq` at
/// `at` (an implicit match); a base past the reference's end is `N`. Without
/// a reference the read keeps its `=`s.
fn copy_ref(
    seq: &mut [u8],
    at: usize,
    n: usize,
    ref_pos: i64,
    ref_len: i64,
    refseq: Option<(&[u8], i64)>,
) {
    let Some((r, off)) = refseq else {
        return;
    };
    let dst = &mut seq[at..at + n];
    let from = ref_pos - off;
    if from >= 0 && ref_pos + n as i64 <= ref_len {
        if let Some(src) = r.get(from as usize..from as usize + n) {
            dst.copy_from_slice(src);
            return;
        }
    }
    for (i, d) in dst.iter_mut().enumerate() {
        let p = ref_pos + i as i64;
        *d = if p < ref_len && p - off >= 0 {
            r.get((p - off) as usize).copied().unwrap_or(b'N')
        } else {
            b'N'
        };
    }
}

fn nonneg(v: i32) -> io::Result<u32> {
    u32::try_from(v).map_err(|_| out_of_range("feature length", v))
}

/// Writes `bytes` at `at` of a read of `rl` bases (nothing when the read
/// has no stored length).
fn put(buf: &mut [u8], rl: usize, at: usize, bytes: &[u8]) -> io::Result<()> {
    if rl == 0 {
        return Ok(());
    }
    buf.get_mut(at..at + bytes.len())
        .ok_or(Fault::FeatureOutsideRead {
            position: (at + bytes.len()) as i64,
            read_length: rl as i64,
        })?
        .copy_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_bytes_asked_of_a_missing_external_block_is_no_error() {
        // htslib's external decoders only fail on a missing block when
        // asked for bytes (htsjdk's xx#minimal.cram reads 0 bases so).
        let mut st = Streams {
            core: Bits {
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

    /// The record fault an error of the decoder carries.
    fn fault(e: &io::Error) -> &Fault {
        match DecodeError::of(e) {
            Some(DecodeError::Record(f)) => f,
            _ => panic!("not a record fault: {e:?}"),
        }
    }

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

    /// Data series read past their blocks, or through encodings that
    /// cannot give them: the typed fault with the values read.
    #[test]
    fn data_series_faults_are_typed() {
        let mut st = Streams {
            core: Bits {
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
        let e = nonneg(-3).unwrap_err();
        assert!(
            matches!(
                fault(&e),
                Fault::OutOfRange {
                    field: "feature length",
                    value: -3
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "feature length -3 out of range");
        let e = put(&mut [0; 4], 4, 3, b"ab").unwrap_err();
        assert!(
            matches!(
                fault(&e),
                Fault::FeatureOutsideRead {
                    position: 5,
                    read_length: 4
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "read feature at position 5 outside the read of 4 bases"
        );
    }

    #[test]
    fn itf8_reads_at_an_offset() {
        let mut at = 0;
        let b = [
            0x7f, 0x80, 0xff, 0xc1, 0x02, 0x03, 0xff, 0xff, 0xff, 0xff, 0x0f,
        ];
        assert_eq!(itf8(&b, &mut at).unwrap(), 0x7f);
        assert_eq!(itf8(&b, &mut at).unwrap(), 0xff);
        assert_eq!(itf8(&b, &mut at).unwrap(), 0x010203);
        assert_eq!(itf8(&b, &mut at).unwrap(), -1);
        assert_eq!(at, b.len());
        assert!(itf8(&[0xe0, 1], &mut 0).is_err());
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
            core: Bits {
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
            core: Bits {
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

    /// Mate data of a record at `apos..=aend` (1-based) on reference 0.
    fn mate(i: usize, flag: u16, apos: i64, aend: i64, line: i64) -> Mate {
        Mate {
            at: i * 36,
            flag,
            ref_id: 0,
            apos,
            aend,
            line,
            tlen: None,
            explicit_tlen: None,
            mate_ref: -1,
            mate_pos: 0,
        }
    }

    /// (flag, RNEXT, PNEXT, TLEN) of each record after the slice's mates
    /// are resolved.
    fn resolved(mates: Vec<Mate>) -> Vec<(u16, i32, i32, i32)> {
        let mut d = SliceDecoder {
            mates,
            ..Default::default()
        };
        let mut out = vec![0u8; d.mates.len() * 36];
        d.resolve_mates(&mut out).unwrap();
        let int = |r: &[u8], at: usize| i32::from_le_bytes(r[at..at + 4].try_into().unwrap());
        out.chunks(36)
            .map(|c| {
                let r = &c[4..];
                (
                    u16::from_le_bytes([r[14], r[15]]),
                    int(r, 20),
                    int(r, 24),
                    int(r, 28),
                )
            })
            .collect()
    }

    #[test]
    fn attached_mates_get_htslib_mate_fields_and_tlen() {
        // The rightmost first: the leftmost is positive; PNEXT from the mate.
        let got = resolved(vec![
            mate(0, 0x80 | 0x10, 401, 410, 1),
            mate(1, 0x40, 1, 10, -1),
        ]);
        assert_eq!(got, vec![(0x91, 0, 0, -410), (0x41 | 0x20, 0, 400, 410)]);
        // Equal starts: the one ending first is positive.
        let got = resolved(vec![mate(0, 0x40, 1, 20, 1), mate(1, 0x80, 1, 10, -1)]);
        assert_eq!((got[0].3, got[1].3), (-20, 20));
        // Equal starts and ends: READ1 is positive.
        let got = resolved(vec![mate(0, 0x80, 5, 14, 1), mate(1, 0x40, 5, 14, -1)]);
        assert_eq!((got[0].3, got[1].3), (-10, 10));
        // Other references: 0; an unmapped mate: 0 and mate-unmapped.
        let mut other = mate(1, 0x80, 5, 14, -1);
        other.ref_id = 1;
        let got = resolved(vec![mate(0, 0x40, 1, 10, 1), other]);
        assert_eq!((got[0].1, got[0].3, got[1].1, got[1].3), (1, 0, 0, 0));
        let got = resolved(vec![mate(0, 0x40, 1, 10, 1), mate(1, 0x80 | 0x4, 1, 1, -1)]);
        assert_eq!((got[0].0, got[0].3, got[1].0, got[1].3), (0x49, 0, 0x85, 0));
    }

    #[test]
    fn a_record_named_as_the_mate_of_two_is_an_error() {
        let mut d = SliceDecoder {
            mates: vec![
                mate(0, 0x40, 1, 10, 2),
                mate(1, 0x40, 1, 10, 2),
                mate(2, 0x80, 1, 10, -1),
            ],
            ..Default::default()
        };
        let mut out = vec![0u8; 3 * 36];
        let e = d.resolve_mates(&mut out).unwrap_err();
        // Records 1 and 2 both name record 3.
        assert!(matches!(fault(&e), Fault::MateOfTwo { record: 3 }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "record 3 of the slice is the mate of two records"
        );
    }
}
