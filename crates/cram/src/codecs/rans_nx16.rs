//! rANS Nx16 decoding (CRAMcodecs §3): order 0 and 1 with 4 or 32
//! interleaved states, 16-bit renormalisation, and the stripe, no-size,
//! cat, run-length and bit-packing transforms.
//!
//! As in [`super::rans4x8`]: one table lookup per symbol (symbol,
//! frequency and slot offset packed in a `u32`), input read with one
//! bounds check and no branch on the state (past the end it reads as 0
//! and the stream is then reported cut short), and the order-1 tables
//! kept per worker in [`Tables`], reused from block to block.

use crate::error::RansNx16Fault as Fault;
use std::io;

const ORDER: u8 = 0x01;
const N32: u8 = 0x04;
const STRIPE: u8 = 0x08;
const NO_SIZE: u8 = 0x10;
const CAT: u8 = 0x20;
const RLE: u8 = 0x40;
const PACK: u8 = 0x80;

const LOWER_BOUND: u32 = 1 << 15;
/// Order-0 frequencies are normalised to 12 bits; order-1 to 10 or 12.
const BITS0: u32 = 12;
const SLOTS: usize = 1 << 12;

/// Reused decoding tables.
#[derive(Default)]
pub struct Tables {
    slots0: Vec<u32>,
    /// Per context, `1 << bits` slots (4096 reserved for each).
    slots1: Vec<u32>,
    meta: Vec<u8>,
    table: Vec<u8>,
}

fn u8_of(src: &mut &[u8]) -> io::Result<u8> {
    let (&b, rest) = src.split_first().ok_or(Fault::CutShort)?;
    *src = rest;
    Ok(b)
}

fn uint7(src: &mut &[u8]) -> io::Result<usize> {
    let mut v: u64 = 0;
    for _ in 0..5 {
        let c = u8_of(src)?;
        v = (v << 7) | u64::from(c & 0x7f);
        if c < 0x80 {
            return Ok(usize::try_from(v).map_err(|_| Fault::LengthTooLarge { value: v })?);
        }
    }
    Err(Fault::Uint7TooLong.into())
}

fn take<'a>(src: &mut &'a [u8], n: usize) -> io::Result<&'a [u8]> {
    if n > src.len() {
        return Err(Fault::Bytes {
            needed: n,
            left: src.len(),
        }
        .into());
    }
    let (a, b) = src.split_at(n);
    *src = b;
    Ok(a)
}

fn check_len(len: usize) -> io::Result<usize> {
    if len > super::MAX_RAW_SIZE {
        return Err(Fault::Claimed {
            len,
            max: super::MAX_RAW_SIZE,
        }
        .into());
    }
    Ok(len)
}

/// Decodes a rANS Nx16 stream `src` into `dst` (cleared). `expected` is
/// the block's raw size when known (a stream storing another size is
/// refused before anything is allocated), else the stream's own size is
/// taken (at most [`super::MAX_RAW_SIZE`]).
pub fn decode(
    src: &[u8],
    expected: Option<usize>,
    dst: &mut Vec<u8>,
    t: &mut Tables,
) -> io::Result<()> {
    let mut s = src;
    if let (Some(e), Some(&flags)) = (expected, src.first()) {
        if flags & (NO_SIZE | STRIPE) == 0 || flags & STRIPE != 0 && flags & NO_SIZE == 0 {
            let mut peek = &src[1..];
            let stored = uint7(&mut peek)?;
            if stored != e {
                return Err(Fault::OutputLength {
                    found: stored,
                    expected: e,
                }
                .into());
            }
        }
    }
    decode_into(&mut s, expected.unwrap_or(0), dst, t, 0)
}

fn decode_into(
    src: &mut &[u8],
    len_hint: usize,
    out: &mut Vec<u8>,
    t: &mut Tables,
    depth: u32,
) -> io::Result<()> {
    out.clear();
    let flags = u8_of(src)?;
    let mut len = if flags & NO_SIZE == 0 {
        check_len(uint7(src)?)?
    } else {
        len_hint
    };
    if flags & STRIPE != 0 {
        if depth > 0 {
            return Err(Fault::NestedStripe.into());
        }
        return stripe(src, len, out, t, depth);
    }
    let n = if flags & N32 != 0 { 32 } else { 4 };
    let mut pack = None;
    if flags & PACK != 0 {
        let nsym = u8_of(src)? as usize;
        if nsym == 0 || nsym > 16 {
            return Err(Fault::PackSymbols { symbols: nsym }.into());
        }
        let mut p = [0u8; 16];
        p[..nsym].copy_from_slice(take(src, nsym)?);
        pack = Some((p, nsym, len));
        len = check_len(uint7(src)?)?;
    }
    let mut rle = None;
    if flags & RLE != 0 {
        let meta_len = uint7(src)?;
        let rle_len = len;
        len = check_len(uint7(src)?)?;
        let mut meta = std::mem::take(&mut t.meta);
        if meta_len & 1 != 0 {
            meta.clear();
            meta.extend_from_slice(take(src, meta_len / 2)?);
        } else {
            let clen = uint7(src)?;
            let mut c = take(src, clen)?;
            meta.resize(check_len(meta_len / 2)?, 0);
            order0(&mut c, &mut meta, n, t)?;
        }
        rle = Some((meta, rle_len));
    }
    if flags & CAT != 0 {
        out.extend_from_slice(take(src, len)?);
    } else {
        out.resize(len, 0);
        if flags & ORDER != 0 {
            order1(src, out, n, t)?;
        } else {
            order0(src, out, n, t)?;
        }
    }
    if let Some((meta, rle_len)) = rle {
        let r = unrle(out, &meta, rle_len);
        t.meta = meta;
        *out = r?;
    }
    if let Some((p, nsym, pack_len)) = pack {
        *out = unpack(out, &p[..nsym], pack_len)?;
    }
    Ok(())
}

fn stripe(
    src: &mut &[u8],
    len: usize,
    out: &mut Vec<u8>,
    t: &mut Tables,
    depth: u32,
) -> io::Result<()> {
    let n = u8_of(src)? as usize;
    if n == 0 {
        return Err(Fault::NoStripes.into());
    }
    let clens = (0..n).map(|_| uint7(src)).collect::<io::Result<Vec<_>>>()?;
    out.resize(len, 0);
    let mut part = Vec::new();
    for (j, &clen) in clens.iter().enumerate() {
        let ulen = len / n + usize::from(len % n > j);
        let mut sub = take(src, clen)?;
        decode_into(&mut sub, ulen, &mut part, t, depth + 1)?;
        if part.len() != ulen {
            return Err(Fault::StripeLength {
                stripe: j,
                found: part.len(),
                expected: ulen,
            }
            .into());
        }
        for (i, &b) in part.iter().enumerate() {
            out[i * n + j] = b;
        }
    }
    Ok(())
}

fn unrle(data: &[u8], meta: &[u8], rle_len: usize) -> io::Result<Vec<u8>> {
    let mut m = meta;
    let mut runs = [false; 256];
    let count = match u8_of(&mut m)? {
        0 => 256,
        k => k as usize,
    };
    for _ in 0..count {
        runs[u8_of(&mut m)? as usize] = true;
    }
    let mut out = Vec::with_capacity(rle_len);
    for &s in data {
        let k = if runs[s as usize] {
            uint7(&mut m)? + 1
        } else {
            1
        };
        if out.len() + k > rle_len {
            return Err(Fault::RunsLonger { declared: rle_len }.into());
        }
        out.resize(out.len() + k, s);
    }
    if out.len() != rle_len {
        return Err(Fault::RunsLength {
            found: out.len(),
            declared: rle_len,
        }
        .into());
    }
    Ok(out)
}

fn unpack(data: &[u8], p: &[u8], len: usize) -> io::Result<Vec<u8>> {
    let per_byte = match p.len() {
        1 => return Ok(vec![p[0]; len]),
        2 => 8,
        3..=4 => 4,
        _ => 2,
    };
    let bits = 8 / per_byte;
    let needed = len.div_ceil(per_byte);
    if data.len() < needed {
        return Err(Fault::PackedShort {
            found: data.len(),
            needed,
        }
        .into());
    }
    let mask = (1u8 << bits) - 1;
    let mut out = Vec::with_capacity(len);
    for i in 0..len {
        let v = (data[i / per_byte] >> ((i % per_byte) * bits)) & mask;
        out.push(*p.get(v as usize).unwrap_or(&0));
    }
    Ok(out)
}

/// The symbols of an alphabet (run-length form of CRAMcodecs §3.1).
fn alphabet(src: &mut &[u8]) -> io::Result<Vec<u8>> {
    let mut a = Vec::new();
    let mut sym = u32::from(u8_of(src)?);
    let mut last = sym;
    let mut rle = 0u32;
    loop {
        if sym > 255 {
            return Err(Fault::PastSymbol255.into());
        }
        a.push(sym as u8);
        if rle > 0 {
            rle -= 1;
            sym += 1;
        } else {
            sym = u32::from(u8_of(src)?);
            if sym == last + 1 {
                rle = u32::from(u8_of(src)?);
            }
        }
        last = sym;
        if sym == 0 {
            return Ok(a);
        }
    }
}

/// Scales frequencies up to a total of `1 << bits` (the spec's
/// normalisation: doubling until the total reaches it).
fn normalise(f: &mut [u32; 256], bits: u32) -> io::Result<()> {
    let sum: u64 = f.iter().map(|&x| u64::from(x)).sum();
    let target = 1u64 << bits;
    let mut tot = sum;
    if tot == 0 || tot == target {
        return Ok(());
    }
    let mut shift = 0;
    while tot < target {
        tot *= 2;
        shift += 1;
    }
    if tot != target {
        return Err(Fault::FrequencySum { sum, total: target }.into());
    }
    for x in f.iter_mut() {
        *x <<= shift;
    }
    Ok(())
}

/// A frequency read as a 7-bit integer, which must fit 32 bits.
fn frequency(value: usize) -> io::Result<u32> {
    Ok(u32::try_from(value).map_err(|_| Fault::FrequencyTooLarge { value })?)
}

/// Fills `1 << bits` slots from frequencies (which add up to at most that).
fn fill_slots(f: &[u32; 256], slots: &mut [u32]) {
    let mut c = 0usize;
    for (s, &x) in f.iter().enumerate() {
        for (k, slot) in slots[c..c + x as usize].iter_mut().enumerate() {
            *slot = s as u32 | ((x.max(1) - 1) << 8) | ((k as u32) << 20);
        }
        c += x as usize;
    }
}

struct Input<'a> {
    src: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn u32(&mut self) -> io::Result<u32> {
        let b = self
            .src
            .get(self.pos..self.pos + 4)
            .ok_or(Fault::StatesCutShort)?;
        self.pos += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline(always)]
    fn renorm(&mut self, r: u32) -> u32 {
        let lo = u32::from(self.src.get(self.pos).copied().unwrap_or(0));
        let hi = u32::from(self.src.get(self.pos + 1).copied().unwrap_or(0));
        let take = r < LOWER_BOUND;
        self.pos += 2 * usize::from(take);
        if take {
            (r << 16) | (hi << 8) | lo
        } else {
            r
        }
    }
}

#[inline(always)]
fn step(slots: &[u32], r: u32, bits: u32) -> (u8, u32) {
    let mask = (1u32 << bits) - 1;
    let e = slots[(r & mask) as usize];
    let f = ((e >> 8) & 0xfff) + 1;
    (e as u8, f.wrapping_mul(r >> bits).wrapping_add(e >> 20))
}

/// Order-0 data of `out.len()` bytes with `n` states, from `src` (which
/// it consumes to its end).
fn order0(src: &mut &[u8], out: &mut [u8], n: usize, t: &mut Tables) -> io::Result<()> {
    let mut f = [0u32; 256];
    for s in alphabet(src)? {
        f[s as usize] = frequency(uint7(src)?)?;
    }
    normalise(&mut f, BITS0)?;
    t.slots0.clear();
    t.slots0.resize(SLOTS, 0);
    fill_slots(&f, &mut t.slots0);
    let slots = &t.slots0[..];
    let mut inp = Input { src, pos: 0 };
    let mut r = [0u32; 32];
    for x in r.iter_mut().take(n) {
        *x = inp.u32()?;
    }
    let mut chunks = out.chunks_exact_mut(n);
    for chunk in &mut chunks {
        for (j, o) in chunk.iter_mut().enumerate() {
            let (s, x) = step(slots, r[j], BITS0);
            *o = s;
            r[j] = inp.renorm(x);
        }
    }
    for (j, o) in chunks.into_remainder().iter_mut().enumerate() {
        let (s, x) = step(slots, r[j], BITS0);
        *o = s;
        r[j] = inp.renorm(x);
    }
    if inp.pos > inp.src.len() {
        return Err(Fault::DataCutShort { order: 0 }.into());
    }
    *src = &inp.src[inp.pos..];
    Ok(())
}

/// Reads the order-1 frequency tables into `t.slots1`.
fn read_table1(tsrc: &mut &[u8], bits: u32, t: &mut Tables) -> io::Result<()> {
    let a = alphabet(tsrc)?;
    // Allocated zeroed once (calloc: pages of contexts never used are
    // never touched), then reused.
    if t.slots1.is_empty() {
        t.slots1 = vec![0; 256 * SLOTS];
    }
    for &i in &a {
        let mut f = [0u32; 256];
        let mut run = 0usize;
        for &j in &a {
            if run > 0 {
                run -= 1;
            } else {
                let x = frequency(uint7(tsrc)?)?;
                f[j as usize] = x;
                if x == 0 {
                    run = u8_of(tsrc)? as usize;
                }
            }
        }
        normalise(&mut f, bits)?;
        let base = i as usize * SLOTS;
        fill_slots(&f, &mut t.slots1[base..base + (1 << bits)]);
    }
    Ok(())
}

fn order1(src: &mut &[u8], out: &mut [u8], n: usize, t: &mut Tables) -> io::Result<()> {
    let comp = u8_of(src)?;
    let bits = u32::from(comp >> 4);
    if bits != 10 && bits != 12 {
        return Err(Fault::Order1Bits { bits }.into());
    }
    if comp & 1 != 0 {
        let u_size = check_len(uint7(src)?)?;
        let c_size = uint7(src)?;
        let mut c = take(src, c_size)?;
        let mut table = std::mem::take(&mut t.table);
        table.clear();
        table.resize(u_size, 0);
        let r =
            order0(&mut c, &mut table, 4, t).and_then(|()| read_table1(&mut &table[..], bits, t));
        t.table = table;
        r?;
    } else {
        read_table1(src, bits, t)?;
    }
    let slots = &t.slots1[..];
    let mut inp = Input { src, pos: 0 };
    let mut r = [0u32; 32];
    for x in r.iter_mut().take(n) {
        *x = inp.u32()?;
    }
    let mut l = [0u8; 32];
    let q = out.len() / n;
    let ctx = |c: u8| &slots[c as usize * SLOTS..c as usize * SLOTS + SLOTS];
    if n == 4 {
        let (o0, rest) = out.split_at_mut(q);
        let (o1, rest) = rest.split_at_mut(q);
        let (o2, rest) = rest.split_at_mut(q);
        let (o3, _) = rest.split_at_mut(q);
        for i in 0..q {
            let (s0, x0) = step(ctx(l[0]), r[0], bits);
            let (s1, x1) = step(ctx(l[1]), r[1], bits);
            let (s2, x2) = step(ctx(l[2]), r[2], bits);
            let (s3, x3) = step(ctx(l[3]), r[3], bits);
            o0[i] = s0;
            o1[i] = s1;
            o2[i] = s2;
            o3[i] = s3;
            r[0] = inp.renorm(x0);
            r[1] = inp.renorm(x1);
            r[2] = inp.renorm(x2);
            r[3] = inp.renorm(x3);
            l[..4].copy_from_slice(&[s0, s1, s2, s3]);
        }
    } else {
        for i in 0..q {
            for j in 0..n {
                let (s, x) = step(ctx(l[j]), r[j], bits);
                out[i + j * q] = s;
                r[j] = inp.renorm(x);
                l[j] = s;
            }
        }
    }
    // What is left over after n equal parts goes through the last state.
    let last = n - 1;
    for o in out[q * n..].iter_mut() {
        let (s, x) = step(ctx(l[last]), r[last], bits);
        *o = s;
        r[last] = inp.renorm(x);
        l[last] = s;
    }
    if inp.pos > inp.src.len() {
        return Err(Fault::DataCutShort { order: 1 }.into());
    }
    *src = &inp.src[inp.pos..];
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use noodles_cram::codecs::{rans_nx16::Flags, Encoder};

    /// Streams of noodles-cram's encoder. Not order 1: noodles-cram
    /// 0.102's order-1 encoder writes streams that its own decoder (and
    /// htslib, docs/cram.md) cannot read back for some inputs (e.g. runs of
    /// four symbols); order 1 is tested on htslib's streams below.
    fn roundtrip(data: &[u8]) {
        let mut t = Tables::default();
        let mut out = Vec::new();
        let all = [
            Flags::empty(),
            Flags::N32,
            Flags::CAT,
            Flags::RLE,
            Flags::RLE | Flags::N32,
            Flags::PACK,
            Flags::PACK | Flags::RLE,
            Flags::PACK | Flags::RLE | Flags::N32,
            Flags::STRIPE,
        ];
        for flags in all {
            let (m, enc, raw, plain) =
                crate::codecs::test_support::encode_block(Encoder::RansNx16(flags), data);
            assert_eq!(m, crate::codecs::method::RANSNX16);
            assert_eq!(raw, plain.len());
            decode(&enc, Some(raw), &mut out, &mut t).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
            assert_eq!(out, plain, "{flags:?}, {} bytes", data.len());
        }
    }

    /// 28 blocks of samtools 1.24's CRAM 3.1 (the first 500,000 records of
    /// the benchmark; order 0 and 1, with and without RLE, packing, cat,
    /// 32 states), each decoded by this decoder and by noodles-cram's.
    #[test]
    fn htslib_streams_decode_as_noodles_decodes_them() {
        let file = include_bytes!("../../testdata/htslib-nx16-blocks.bin");
        let n = u32::from_le_bytes(file[..4].try_into().unwrap()) as usize;
        let mut at = 4;
        let (mut t, mut ours, mut theirs) = (Tables::default(), Vec::new(), Vec::new());
        let mut shim = crate::codecs::via_noodles::Shim::default();
        let mut order1 = 0;
        for _ in 0..n {
            let raw = u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
            let len = u32::from_le_bytes(file[at + 4..at + 8].try_into().unwrap()) as usize;
            let block = &file[at + 8..at + 8 + len];
            at += 8 + len;
            order1 += usize::from(block[0] & ORDER != 0);
            decode(block, Some(raw), &mut ours, &mut t).unwrap();
            shim.decode(crate::codecs::method::RANSNX16, block, raw, &mut theirs)
                .unwrap();
            assert_eq!(ours.len(), raw);
            assert_eq!(ours, theirs, "flags {:02x}", block[0]);
        }
        assert_eq!(at, file.len());
        assert!(order1 >= 15, "{order1} order-1 blocks");
    }

    #[test]
    fn tiny_inputs() {
        for d in [&b""[..], b"a", b"ab", b"aaaa", b"abcde", b"noodles"] {
            roundtrip(d);
        }
    }

    /// Hand-made streams, each malformed in one way: the typed fault
    /// with the values read, and its text.
    #[test]
    fn malformed_streams_give_typed_faults() {
        macro_rules! fault {
            ($src:expr, $expected:expr, $pat:pat, $text:expr) => {{
                let e =
                    decode(&$src, $expected, &mut Vec::new(), &mut Tables::default()).unwrap_err();
                assert!(
                    matches!(
                        crate::DecodeError::of(&e),
                        Some(crate::DecodeError::RansNx16($pat))
                    ),
                    "{e:?}"
                );
                assert_eq!(e.to_string(), $text);
            }};
        }
        fault!([], None, Fault::CutShort, "rANS Nx16: stream cut short");
        fault!(
            [0x00, 5],
            Some(4),
            Fault::OutputLength {
                found: 5,
                expected: 4
            },
            "rANS Nx16: stream of 5 bytes where 4 were expected"
        );
        // 2^31 bytes as a 7-bit integer.
        fault!(
            [0x00, 0x88, 0x80, 0x80, 0x80, 0x00],
            None,
            Fault::Claimed {
                len: 0x8000_0000,
                max: crate::codecs::MAX_RAW_SIZE
            },
            "rANS Nx16: 2147483648 bytes claimed (more than 1073741824)"
        );
        fault!(
            [0x00, 0x80, 0x80, 0x80, 0x80, 0x80],
            None,
            Fault::Uint7TooLong,
            "rANS Nx16: 7-bit integer of more than 5 bytes"
        );
        // Striped into one stream, itself striped.
        fault!(
            [STRIPE, 4, 1, 2, STRIPE, 4],
            Some(4),
            Fault::NestedStripe,
            "rANS Nx16: a striped stream inside a striped stream"
        );
        fault!(
            [STRIPE, 4, 0],
            Some(4),
            Fault::NoStripes,
            "rANS Nx16: striped into 0 streams"
        );
        // One stripe, stored (cat) as 3 bytes of the 4.
        fault!(
            [STRIPE, 4, 1, 5, CAT, 3, b'a', b'b', b'c'],
            Some(4),
            Fault::StripeLength {
                stripe: 0,
                found: 3,
                expected: 4
            },
            "rANS Nx16: stripe 0 decoded to 3 bytes, not 4"
        );
        fault!(
            [CAT, 4, b'a', b'b'],
            Some(4),
            Fault::Bytes { needed: 4, left: 2 },
            "rANS Nx16: 4 bytes needed, 2 left"
        );
        fault!(
            [PACK, 4, 17],
            Some(4),
            Fault::PackSymbols { symbols: 17 },
            "rANS Nx16: bit packing of 17 symbols"
        );
        // 20 values of 2 symbols (8 a byte) need 3 bytes; 1 is stored.
        fault!(
            [PACK | CAT, 20, 2, b'a', b'b', 1, 0xff],
            Some(20),
            Fault::PackedShort {
                found: 1,
                needed: 3
            },
            "rANS Nx16: packed data shorter than declared (1 bytes, 3 needed)"
        );
        // Run-length: raw metadata (length 2 * 2 + 1: one run symbol,
        // 'z'), then "ab" stored: 2 bytes, neither a run.
        fault!(
            [RLE | CAT, 5, 5, 2, 1, b'z', b'a', b'b'],
            Some(5),
            Fault::RunsLength {
                found: 2,
                declared: 5
            },
            "rANS Nx16: runs give 2 bytes, not 5"
        );
        fault!(
            [RLE | CAT, 1, 5, 2, 1, b'z', b'a', b'b'],
            Some(1),
            Fault::RunsLonger { declared: 1 },
            "rANS Nx16: runs longer than the 1 bytes declared"
        );
        // Order 0: the alphabet 254, then a run of 5 after 255.
        fault!(
            [0x00, 4, 254, 255, 5],
            Some(4),
            Fault::PastSymbol255,
            "rANS Nx16: alphabet runs past symbol 255"
        );
        // The alphabet 'a', its frequency 2^32.
        fault!(
            [0x00, 4, b'a', 0, 0x90, 0x80, 0x80, 0x80, 0x00],
            Some(4),
            Fault::FrequencyTooLarge {
                value: 0x1_0000_0000
            },
            "rANS Nx16: frequency too large (4294967296)"
        );
        fault!(
            [0x00, 4, b'a', b'c', 0, 3, 0],
            Some(4),
            Fault::FrequencySum {
                sum: 3,
                total: 4096
            },
            "rANS Nx16: frequencies add up to 3, not a power of 2 up to 4096"
        );
        fault!(
            [0x00, 4, b'a', 0, 1],
            Some(4),
            Fault::StatesCutShort,
            "rANS Nx16: states cut short"
        );
        // Four states of 0: every symbol renormalises, past the end.
        let mut cut = vec![0x00, 4, b'a', 0, 1];
        cut.extend_from_slice(&[0; 16]);
        fault!(
            cut,
            Some(4),
            Fault::DataCutShort { order: 0 },
            "rANS Nx16: order-0 data cut short"
        );
        fault!(
            [ORDER, 4, 0xb0],
            Some(4),
            Fault::Order1Bits { bits: 11 },
            "rANS Nx16: order-1 frequencies of 11 bits"
        );
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_roundtrip(data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000)) {
            roundtrip(&data);
        }

        #[test]
        fn skewed_bytes_roundtrip(data in proptest::collection::vec(
            proptest::prop_oneof![8 => proptest::strategy::Just(b'F'), 2 => b'#'..b'J', 1 => proptest::num::u8::ANY],
            0..12000)) {
            roundtrip(&data);
        }

        #[test]
        fn few_symbols_with_runs_roundtrip(data in proptest::collection::vec(
            (0u8..4, 1usize..40), 0..400)) {
            let bytes: Vec<u8> = data.iter().flat_map(|&(s, k)| std::iter::repeat_n(b'A' + s * 7, k)).collect();
            roundtrip(&bytes);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
                                expected in 0usize..5000) {
            let mut t = Tables::default();
            let mut out = Vec::new();
            let _ = decode(&data, Some(expected), &mut out, &mut t);
            let _ = decode(&data, None, &mut out, &mut t);
        }

        #[test]
        fn corrupted_streams_never_panic(data in proptest::collection::vec(0u8..6, 1..2000),
                                         at in 0usize..10_000, by in 1u8..=255, f in 0u8..=255) {
            let flags = Flags::from_bits_truncate(f) - Flags::RESERVED - Flags::NO_SIZE - Flags::ORDER;
            let (_, mut enc, raw, _) =
                crate::codecs::test_support::encode_block(Encoder::RansNx16(flags), &data);
            let k = at % enc.len();
            enc[k] ^= by;
            let mut t = Tables::default();
            let mut out = Vec::new();
            let _ = decode(&enc, Some(raw), &mut out, &mut t);
            let _ = decode(&enc[..k], Some(raw), &mut out, &mut t);
        }
    }
}
