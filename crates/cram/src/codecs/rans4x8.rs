//! rANS 4x8 decoding (CRAMcodecs §2), order 0 and 1.
//!
//! Four interleaved 32-bit states, 12-bit frequencies. Each symbol costs
//! one table lookup: for every frequency slot the table holds the symbol,
//! its frequency and the slot's offset from the symbol's cumulative
//! frequency, so a state advances as `F * (R >> 12) + offset`. Input bytes
//! are read with one bounds check each (past the end they read as 0 and
//! the stream is then reported cut short). The order-1 tables (1 MiB of
//! symbol slots, 256 KiB of frequencies) live in [`Tables`], kept by the
//! decoding job and reused from block to block; only the contexts a block
//! defines are rebuilt.

use crate::error::Rans4x8Fault as Fault;
use std::io;

const TOTAL_BITS: u32 = 12;
const TOTAL: usize = 1 << TOTAL_BITS;
const MASK: u32 = (TOTAL as u32) - 1;
const LOWER_BOUND: u32 = 1 << 23;

/// Reused decoding tables.
#[derive(Default)]
pub struct Tables {
    /// Order 0: per frequency slot, `symbol | (F - 1) << 8 | offset << 20`.
    slots0: Vec<u32>,
    /// Order 1: the symbol of each slot, per context (`ctx * 4096 + slot`).
    sym1: Vec<u8>,
    /// Order 1: per context and symbol, `F | C << 16`.
    fc1: Vec<u32>,
}

/// Reads the input, one byte at a time, past the end as zeros.
struct Input<'a> {
    src: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn strict_byte(&mut self) -> io::Result<u8> {
        let b = *self.src.get(self.pos).ok_or(Fault::TableCutShort)?;
        self.pos += 1;
        Ok(b)
    }

    fn u32_le(&mut self) -> io::Result<u32> {
        let b = self
            .src
            .get(self.pos..self.pos + 4)
            .ok_or(Fault::CutShort)?;
        self.pos += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A frequency (ITF8, at most 4096).
    fn freq(&mut self) -> io::Result<u32> {
        let b0 = u32::from(self.strict_byte()?);
        let f = if b0 < 0x80 {
            b0
        } else {
            ((b0 & 0x7f) << 8) | u32::from(self.strict_byte()?)
        };
        if f as usize > TOTAL {
            return Err(Fault::Frequency {
                found: f,
                max: TOTAL,
            }
            .into());
        }
        Ok(f)
    }

    #[inline(always)]
    fn renorm(&mut self, r: u32) -> u32 {
        let mut r = r;
        for _ in 0..2 {
            let b = u32::from(self.src.get(self.pos).copied().unwrap_or(0));
            let take = r < LOWER_BOUND;
            r = if take { (r << 8) | b } else { r };
            self.pos += usize::from(take);
        }
        r
    }
}

/// Renormalises state `x` with the input at `pos`: returns the new state
/// and how many bytes it took (0 to 2, as [`Input::renorm`] takes them;
/// past the end they read as 0). How many is known from `x` alone (a second
/// byte is taken exactly when `x < 2^15`), so the reads of the four states
/// do not wait on one another.
#[inline(always)]
fn renorm_at(src: &[u8], pos: usize, x: u32) -> (u32, usize) {
    let one = x < LOWER_BOUND;
    let two = x < LOWER_BOUND >> 8;
    let b0 = u32::from(src.get(pos).copied().unwrap_or(0));
    let b1 = u32::from(src.get(pos + 1).copied().unwrap_or(0));
    let y = if one { (x << 8) | b0 } else { x };
    let y = if two { (y << 8) | b1 } else { y };
    (y, usize::from(one) + usize::from(two))
}

/// Reads one order-0 frequency table: calls `set(symbol, F)` for each
/// symbol it lists; checks that they add up to at most 4096.
fn read_freqs(inp: &mut Input<'_>, mut set: impl FnMut(u8, u32)) -> io::Result<()> {
    let mut sym = u32::from(inp.strict_byte()?);
    let mut last = sym;
    let mut rle = 0u32;
    let mut total = 0u32;
    loop {
        if sym > 255 {
            return Err(Fault::PastSymbol255.into());
        }
        let f = inp.freq()?;
        total += f;
        if total as usize > TOTAL {
            return Err(Fault::FrequencySum { max: TOTAL }.into());
        }
        set(sym as u8, f);
        if rle > 0 {
            rle -= 1;
            sym += 1;
        } else {
            sym = u32::from(inp.strict_byte()?);
            if sym == last + 1 {
                rle = u32::from(inp.strict_byte()?);
            }
        }
        last = sym;
        if sym == 0 {
            return Ok(());
        }
    }
}

/// Decodes a rANS 4x8 stream `src` into `dst` (cleared), which must come
/// to `expected` bytes (the block's raw size).
pub fn decode(src: &[u8], expected: usize, dst: &mut Vec<u8>, t: &mut Tables) -> io::Result<()> {
    dst.clear();
    let mut inp = Input { src, pos: 0 };
    let order = inp.strict_byte().map_err(|_| Fault::Empty)?;
    let n_in = inp.u32_le()? as usize;
    let n_out = inp.u32_le()? as usize;
    if n_out != expected {
        return Err(Fault::OutputLength {
            found: n_out,
            expected,
        }
        .into());
    }
    if n_in > src.len() - inp.pos {
        return Err(Fault::InputLength {
            said: n_in,
            left: src.len() - inp.pos,
        }
        .into());
    }
    inp.src = &src[..inp.pos + n_in];
    dst.resize(n_out, 0);
    match order {
        0 => decode0(&mut inp, dst, t)?,
        1 => decode1(&mut inp, dst, t)?,
        order => return Err(Fault::Order { order }.into()),
    }
    if inp.pos > inp.src.len() {
        dst.clear();
        return Err(Fault::CutShort.into());
    }
    Ok(())
}

fn states(inp: &mut Input<'_>) -> io::Result<[u32; 4]> {
    Ok([inp.u32_le()?, inp.u32_le()?, inp.u32_le()?, inp.u32_le()?])
}

#[inline(always)]
fn step0(slots: &[u32; TOTAL], r: u32) -> (u8, u32) {
    let e = slots[(r & MASK) as usize];
    let f = ((e >> 8) & MASK) + 1;
    let r = f.wrapping_mul(r >> TOTAL_BITS).wrapping_add(e >> 20);
    (e as u8, r)
}

fn decode0(inp: &mut Input<'_>, out: &mut [u8], t: &mut Tables) -> io::Result<()> {
    let mut freqs = [0u32; 256];
    read_freqs(inp, |s, f| freqs[s as usize] = f)?;
    t.slots0.resize(TOTAL, 0);
    let slots: &mut [u32; TOTAL] = (&mut t.slots0[..]).try_into().expect("sized above");
    let mut c = 0usize;
    for (s, &f) in freqs.iter().enumerate() {
        for (k, slot) in slots[c..c + f as usize].iter_mut().enumerate() {
            *slot = s as u32 | ((f - 1) << 8) | ((k as u32) << 20);
        }
        c += f as usize;
    }
    let slots: &[u32; TOTAL] = slots;
    let mut r = states(inp)?;
    let mut chunks = out.chunks_exact_mut(4);
    for chunk in &mut chunks {
        for j in 0..4 {
            let (s, x) = step0(slots, r[j]);
            chunk[j] = s;
            r[j] = inp.renorm(x);
        }
    }
    for (j, o) in chunks.into_remainder().iter_mut().enumerate() {
        let (s, x) = step0(slots, r[j]);
        *o = s;
        r[j] = inp.renorm(x);
    }
    Ok(())
}

#[inline(always)]
fn step1(sym1: &[u8], fc1: &[u32], ctx: u8, r: u32) -> (u8, u32) {
    let slot = (r & MASK) as usize;
    let base = ctx as usize * TOTAL;
    let s = sym1[base + slot];
    let fc = fc1[ctx as usize * 256 + s as usize];
    let f = fc & 0xffff;
    let c = fc >> 16;
    let r = f
        .wrapping_mul(r >> TOTAL_BITS)
        .wrapping_add(slot as u32)
        .wrapping_sub(c);
    (s, r)
}

fn decode1(inp: &mut Input<'_>, out: &mut [u8], t: &mut Tables) -> io::Result<()> {
    // Allocated zeroed once (calloc: pages of contexts never used are
    // never touched), then reused.
    if t.sym1.is_empty() {
        t.sym1 = vec![0; 256 * TOTAL];
        t.fc1 = vec![0; 256 * 256];
    }
    // The contexts, in the same run-length form as the symbols.
    let mut ctx = u32::from(inp.strict_byte()?);
    let mut last = ctx;
    let mut rle = 0u32;
    loop {
        if ctx > 255 {
            return Err(Fault::PastContext255.into());
        }
        let cx = ctx as usize;
        let fc = &mut t.fc1[cx * 256..cx * 256 + 256];
        fc.fill(0);
        read_freqs(inp, |s, f| fc[s as usize] = f)?;
        let mut c = 0u32;
        let sym = &mut t.sym1[cx * TOTAL..cx * TOTAL + TOTAL];
        for (s, e) in fc.iter_mut().enumerate() {
            let f = *e;
            sym[c as usize..(c + f) as usize].fill(s as u8);
            *e = f | (c << 16);
            c += f;
        }
        if rle > 0 {
            rle -= 1;
            ctx += 1;
        } else {
            ctx = u32::from(inp.strict_byte()?);
            if ctx == last + 1 {
                rle = u32::from(inp.strict_byte()?);
            }
        }
        last = ctx;
        if ctx == 0 {
            break;
        }
    }
    let (sym1, fc1) = (&t.sym1[..], &t.fc1[..]);
    let mut r = states(inp)?;
    let mut l = [0u8; 4];
    let q = out.len() / 4;
    {
        let (o0, rest) = out.split_at_mut(q);
        let (o1, rest) = rest.split_at_mut(q);
        let (o2, rest) = rest.split_at_mut(q);
        let (o3, tail) = rest.split_at_mut(q);
        for i in 0..q {
            let (s0, x0) = step1(sym1, fc1, l[0], r[0]);
            let (s1, x1) = step1(sym1, fc1, l[1], r[1]);
            let (s2, x2) = step1(sym1, fc1, l[2], r[2]);
            let (s3, x3) = step1(sym1, fc1, l[3], r[3]);
            o0[i] = s0;
            o1[i] = s1;
            o2[i] = s2;
            o3[i] = s3;
            let src = inp.src;
            let (y0, n0) = renorm_at(src, inp.pos, x0);
            inp.pos += n0;
            let (y1, n1) = renorm_at(src, inp.pos, x1);
            inp.pos += n1;
            let (y2, n2) = renorm_at(src, inp.pos, x2);
            inp.pos += n2;
            let (y3, n3) = renorm_at(src, inp.pos, x3);
            inp.pos += n3;
            r = [y0, y1, y2, y3];
            l = [s0, s1, s2, s3];
        }
        // What is left over after four equal parts goes through state 3.
        for o in tail.iter_mut() {
            let (s, x) = step1(sym1, fc1, l[3], r[3]);
            *o = s;
            r[3] = inp.renorm(x);
            l[3] = s;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use noodles_cram::codecs::rans_4x8::Order;

    /// A stream of noodles-cram's encoder and what it decodes to (the
    /// bytes behind a short prefix: see `codecs::test_support`).
    fn encode(order: Order, data: &[u8]) -> (Vec<u8>, Vec<u8>) {
        crate::codecs::test_support::rans4x8_encode(order, data)
    }

    fn roundtrip(data: &[u8]) {
        let mut t = Tables::default();
        let mut out = Vec::new();
        for order in [Order::Zero, Order::One] {
            let (enc, plain) = encode(order, data);
            decode(&enc, plain.len(), &mut out, &mut t).unwrap();
            assert_eq!(out, plain, "order {order:?}, {} bytes", data.len());
        }
    }

    #[test]
    fn tiny_and_empty() {
        roundtrip(b"");
        roundtrip(b"a");
        roundtrip(b"ab");
        roundtrip(b"abcde");
        roundtrip(b"noodles");
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_roundtrip(data in proptest::collection::vec(proptest::num::u8::ANY, 0..5000)) {
            roundtrip(&data);
        }

        #[test]
        fn skewed_bytes_roundtrip(data in proptest::collection::vec(
            proptest::prop_oneof![8 => proptest::strategy::Just(b'I'), 2 => b'#'..b'J', 1 => proptest::num::u8::ANY],
            0..20000)) {
            roundtrip(&data);
        }

        #[test]
        fn garbage_is_an_error_or_bytes_never_a_panic(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
            expected in 0usize..4096,
        ) {
            let mut t = Tables::default();
            let mut out = Vec::new();
            let _ = decode(&data, expected, &mut out, &mut t);
            proptest::prop_assert!(out.len() <= expected);
        }

        #[test]
        fn corrupted_streams_never_panic(
            data in proptest::collection::vec(0u8..8, 1..3000),
            at in 0usize..10_000, by in 1u8..=255, order in 0u8..2,
        ) {
            let order = if order == 0 { Order::Zero } else { Order::One };
            let (mut enc, plain) = encode(order, &data);
            let k = at % enc.len();
            enc[k] ^= by;
            let mut t = Tables::default();
            let mut out = Vec::new();
            let _ = decode(&enc, plain.len(), &mut out, &mut t);
            let _ = decode(&enc[..k], plain.len(), &mut out, &mut t);
        }
    }

    #[test]
    fn tables_are_reused_across_blocks_of_both_orders() {
        let mut t = Tables::default();
        let mut out = Vec::new();
        let a: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 13) as u8 + b'A').collect();
        let b: Vec<u8> = (0..7_777u32).map(|i| (i % 3) as u8 + b'x').collect();
        for data in [&a, &b, &a] {
            for order in [Order::One, Order::Zero] {
                let (enc, plain) = encode(order, data);
                decode(&enc, plain.len(), &mut out, &mut t).unwrap();
                assert_eq!(out, plain);
            }
        }
    }

    #[test]
    fn a_huge_claimed_size_is_refused_before_allocating() {
        let (mut enc, plain) = encode(Order::Zero, b"hello");
        enc[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut t = Tables::default();
        let mut out = Vec::new();
        let e = decode(&enc, plain.len(), &mut out, &mut t).unwrap_err();
        assert!(
            matches!(
                crate::DecodeError::of(&e),
                Some(crate::DecodeError::Rans4x8(Fault::OutputLength {
                    found: 0xffff_ffff,
                    expected
                })) if *expected == plain.len()
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("were expected"), "{e}");
        assert!(out.capacity() < 1 << 20);
    }
}
