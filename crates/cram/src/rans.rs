//! The rANS 4x8 encoder of CRAM 3 (CRAM codecs spec §2, block method 4),
//! order 0 and order 1: four interleaved 32-bit rANS states, frequencies
//! scaled to 4096, renormalised a byte at a time.
//!
//! The stream is: order (1 byte), compressed size and raw size (u32 LE),
//! the frequency table, the four final states (u32 LE, state 0 first), then
//! the renormalisation bytes in the order the decoder reads them.
//! Encoding runs over the decoder's steps backwards, so the bytes are
//! written from the end of a buffer towards its start.

const SCALE_BITS: u32 = 12;
const TOTAL: u32 = 1 << SCALE_BITS;
/// The lower bound of a normalised state.
const LOWER: u32 = 1 << 23;

/// Compresses `src` with rANS 4x8 of order 0 or 1.
pub(crate) fn encode(order1: bool, src: &[u8]) -> Vec<u8> {
    if order1 {
        encode_order1::<false>(src)
    } else {
        encode_order0::<false>(src)
    }
}

/// Compresses `src` with rANS Nx16 (CRAM 3.1, block method 5) of order 0
/// or 1, four states, no transforms (flag byte 0 or 1): as rANS 4x8 but
/// for a 16-bit renormalisation from a lower bound of 2^15, a size in
/// uint7, and other frequency tables (an alphabet, then uint7
/// frequencies; for order 1 a row per alphabet symbol with runs of zeros
/// counted).
pub(crate) fn encode_nx16(order1: bool, src: &[u8]) -> Vec<u8> {
    if order1 {
        encode_order1::<true>(src)
    } else {
        encode_order0::<true>(src)
    }
}

/// The lower bound of a normalised rANS Nx16 state.
const LOWER_NX16: u32 = 1 << 15;

/// Appends `v` as uint7: 7 bits a byte, most significant first, the top
/// bit set on all but the last.
fn put_uint7(out: &mut Vec<u8>, v: u32) {
    let mut groups = [0u8; 5];
    let mut n = 0;
    let mut v = v;
    loop {
        groups[n] = (v & 0x7f) as u8;
        n += 1;
        v >>= 7;
        if v == 0 {
            break;
        }
    }
    for i in (0..n).rev() {
        out.push(groups[i] | if i > 0 { 0x80 } else { 0 });
    }
}

/// Scales `counts` to frequencies that sum to [`TOTAL`], every counted
/// symbol keeping at least 1.
fn normalise(counts: &[u32; 256]) -> [u32; 256] {
    let total: u64 = counts.iter().map(|&c| c as u64).sum();
    let mut f = [0u32; 256];
    if total == 0 {
        return f;
    }
    let mut sum = 0u32;
    for s in 0..256 {
        if counts[s] > 0 {
            f[s] = ((counts[s] as u64 * TOTAL as u64 / total) as u32).max(1);
            sum += f[s];
        }
    }
    while sum != TOTAL {
        let m = (0..256)
            .max_by_key(|&s| (f[s], std::cmp::Reverse(s)))
            .expect("256 symbols");
        if sum < TOTAL {
            f[m] += TOTAL - sum;
            sum = TOTAL;
        } else {
            let take = (sum - TOTAL).min(f[m] - 1);
            f[m] -= take;
            sum -= take;
        }
    }
    f
}

/// Appends one frequency (1 byte below 128, else 2).
fn put_freq(out: &mut Vec<u8>, f: u32) {
    if f < 128 {
        out.push(f as u8);
    } else {
        out.push(0x80 | (f >> 8) as u8);
        out.push(f as u8);
    }
}

/// Appends the symbols present in `present` (ascending) as the decoder
/// reads them: a symbol, and after a symbol that follows the previous one
/// directly, the count of further consecutive symbols (which are then left
/// out); `each` writes what follows each symbol. Ends with a 0.
fn put_symbols(
    out: &mut Vec<u8>,
    present: &[bool; 256],
    mut each: impl FnMut(&mut Vec<u8>, usize),
) {
    let mut run = 0usize;
    for s in 0..256 {
        if !present[s] {
            continue;
        }
        if run > 0 {
            run -= 1;
        } else {
            out.push(s as u8);
            if s > 0 && present[s - 1] {
                let mut e = s + 1;
                while e < 256 && present[e] {
                    e += 1;
                }
                run = e - (s + 1);
                out.push(run as u8);
            }
        }
        each(out, s);
    }
    out.push(0);
}

/// Cumulative starts of `freqs`.
fn starts(freqs: &[u32; 256]) -> [u32; 256] {
    let mut c = [0u32; 256];
    let mut acc = 0;
    for s in 0..256 {
        c[s] = acc;
        acc += freqs[s];
    }
    c
}

/// A symbol's frequency and start, prepared so that encoding needs a
/// multiplication rather than a division (`x / f` as a multiply-high by
/// a rounded-up reciprocal and a shift, exact for states below 2^31).
#[derive(Clone, Copy, Default)]
struct Sym {
    x_max: u32,
    rcp: u32,
    bias: u32,
    /// `TOTAL - f` (below 2^12) and the shift (below 32): 16 bytes in all,
    /// so that an order-1 table of 256 contexts is 1 MiB.
    cmpl: u16,
    shift: u16,
}

impl Sym {
    fn new(f: u32, c: u32) -> Sym {
        let x_max = ((LOWER >> SCALE_BITS) << 8) * f;
        let cmpl = (TOTAL - f) as u16;
        if f < 2 {
            // x / 1: the reciprocal 2^32 - 1 gives x - 1, made up in bias.
            return Sym {
                x_max,
                rcp: u32::MAX,
                shift: 0,
                bias: c + TOTAL - 1,
                cmpl,
            };
        }
        let mut shift = 0;
        while f > 1 << shift {
            shift += 1;
        }
        let rcp = (1u64 << (shift + 31)).div_ceil(f as u64) as u32;
        Sym {
            x_max,
            rcp,
            shift: (shift - 1) as u16,
            bias: c,
            cmpl,
        }
    }
}

/// Renormalisation bytes, written backwards from the end of `buf`.
struct Back {
    buf: Vec<u8>,
    at: usize,
}

thread_local! {
    /// Each thread's [`Back`] buffer, reused from block to block (a fresh
    /// one for each block of qualities is megabytes of new pages to fault
    /// in and zero); up to [`BACK_KEPT`] bytes.
    static BACK: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Back {
    /// Room for `n` symbols: a state below 2^31 sheds at most two bytes
    /// before a symbol of frequency 1 or more (its bound is at least 2^19).
    fn new(n: usize) -> Back {
        let mut buf = BACK.take();
        let len = 2 * n + 16;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        Back { at: buf.len(), buf }
    }

    /// The bytes written, in order.
    fn bytes(&self) -> &[u8] {
        &self.buf[self.at..]
    }
}

/// The largest [`Back`] buffer a thread keeps (blocks of long reads can
/// need far more, for once).
const BACK_KEPT: usize = 16 << 20;

impl Drop for Back {
    fn drop(&mut self) {
        if self.buf.len() <= BACK_KEPT {
            BACK.set(std::mem::take(&mut self.buf));
        }
    }
}

/// Encodes one symbol into state `x` (`x / f << 12 | x % f` plus the
/// symbol's start), writing renormalisation bytes before those already in
/// `out`.
#[inline]
fn put(x: &mut u32, s: &Sym, out: &mut Back) {
    // A state below 2^31 sheds no, one or two bytes against a bound of
    // 2^19 or more: both candidates are written, and the count taken
    // without a branch (which bytes a state sheds is data, and a
    // mispredicted loop was half the encoder's time on qualities).
    let v = *x;
    let n = u32::from(v >= s.x_max) + u32::from(u64::from(v) >= u64::from(s.x_max) << 8);
    let at = out.at - 2;
    out.buf[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
    let v = v >> (8 * n);
    out.at -= n as usize;
    let q = (((v as u64 * s.rcp as u64) >> 32) as u32) >> s.shift;
    *x = v
        .wrapping_add(s.bias)
        .wrapping_add(q.wrapping_mul(u32::from(s.cmpl)));
}

/// As [`put`], with rANS Nx16's renormalisation: one 16-bit word
/// (little-endian), enough for a state below 2^31 and a bound of 2^19 or
/// more.
#[inline]
fn put16(x: &mut u32, s: &Sym, out: &mut Back) {
    // Written whether shed or not, the count taken without a branch (as
    // in [`put`]).
    let v = *x;
    let shed = u32::from(v >= s.x_max);
    let at = out.at - 2;
    out.buf[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
    let v = v >> (16 * shed);
    out.at -= 2 * shed as usize;
    let q = (((v as u64 * s.rcp as u64) >> 32) as u32) >> s.shift;
    *x = v
        .wrapping_add(s.bias)
        .wrapping_add(q.wrapping_mul(u32::from(s.cmpl)));
}

#[inline]
fn put_any<const N16: bool>(x: &mut u32, s: &Sym, out: &mut Back) {
    if N16 {
        put16(x, s, out)
    } else {
        put(x, s, out)
    }
}

/// The prepared symbols of a frequency table.
fn syms(freqs: &[u32; 256]) -> [Sym; 256] {
    let cum = starts(freqs);
    let mut out = [Sym::default(); 256];
    for s in 0..256 {
        if freqs[s] > 0 {
            out[s] = Sym::new(freqs[s], cum[s]);
        }
    }
    out
}

fn finish<const N16: bool>(
    order: u8,
    src_len: usize,
    table: Vec<u8>,
    states: [u32; 4],
    bytes: Back,
) -> Vec<u8> {
    let tail = bytes.bytes();
    let mut out = Vec::with_capacity(9 + table.len() + 16 + tail.len());
    out.push(order);
    if N16 {
        put_uint7(&mut out, src_len as u32);
    } else {
        let body = table.len() + 16 + tail.len();
        out.extend_from_slice(&(body as u32).to_le_bytes());
        out.extend_from_slice(&(src_len as u32).to_le_bytes());
    }
    out.extend_from_slice(&table);
    for s in states {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(tail);
    out
}

fn encode_order0<const N16: bool>(src: &[u8]) -> Vec<u8> {
    let mut counts = [0u32; 256];
    for &b in src {
        counts[b as usize] += 1;
    }
    let freqs = normalise(&counts);
    let table0 = syms(&freqs);
    let present = counts.map(|c| c > 0);
    let mut table = Vec::new();
    if N16 {
        put_symbols(&mut table, &present, |_, _| {});
        for s in (0..256).filter(|&s| present[s]) {
            put_uint7(&mut table, freqs[s]);
        }
    } else {
        put_symbols(&mut table, &present, |out, s| put_freq(out, freqs[s]));
    }
    let mut states = [if N16 { LOWER_NX16 } else { LOWER }; 4];
    let mut rev = Back::new(src.len());
    // The decoder takes symbol i with state i % 4.
    for i in (0..src.len()).rev() {
        put_any::<N16>(&mut states[i % 4], &table0[src[i] as usize], &mut rev);
    }
    finish::<N16>(0, src.len(), table, states, rev)
}

fn encode_order1<const N16: bool>(src: &[u8]) -> Vec<u8> {
    let n = src.len();
    let q = n / 4;
    // The decoder's steps: for i in 0..q, streams 0..4 (stream j at j*q + i,
    // its context the symbol before within the stream, 0 at its start);
    // then positions 4q..n on stream 3, continuing its context (0 when
    // there are no streams, n < 4).
    let context = |p: usize| -> usize {
        if p == 0 || (p < 4 * q && p.is_multiple_of(q)) {
            0
        } else {
            src[p - 1] as usize
        }
    };
    ORDER1.with(|o1| {
        let o1 = &mut *o1.borrow_mut();
        let (counts, table) = (&mut o1.counts, &mut o1.table);
        // Stream by stream, as `context` gives them (without its division
        // per symbol): four streams of q from context 0, then the rest
        // continuing the last stream (from 0 when there are none).
        let mut count = |from: usize, to: usize, mut last: usize| -> usize {
            for &b in &src[from..to] {
                counts[last][b as usize] += 1;
                last = b as usize;
            }
            last
        };
        let mut last = 0;
        if q > 0 {
            for j in 0..4 {
                last = count(j * q, (j + 1) * q, 0);
            }
        }
        count(4 * q, n, last);
        let mut used = [false; 256];
        for c in 0..256 {
            used[c] = counts[c].iter().any(|&x| x > 0);
        }
        let mut head = Vec::new();
        if N16 {
            // One alphabet for symbols and contexts (0, the contexts'
            // start, always in it), 12-bit frequencies, table stored
            // uncompressed; each context's row over the alphabet, a zero
            // followed by how many more zeros are left out.
            let mut alphabet = used;
            alphabet[0] = true;
            for row in counts.iter() {
                for (a, &x) in alphabet.iter_mut().zip(row.iter()) {
                    *a |= x > 0;
                }
            }
            head.push((SCALE_BITS as u8) << 4);
            put_symbols(&mut head, &alphabet, |_, _| {});
            let letters: Vec<usize> = (0..256).filter(|&x| alphabet[x]).collect();
            for &c in &letters {
                let freqs = if used[c] {
                    normalise(&counts[c])
                } else {
                    [0; 256]
                };
                if used[c] {
                    table[c] = syms(&freqs);
                }
                let mut k = 0;
                while k < letters.len() {
                    let f = freqs[letters[k]];
                    put_uint7(&mut head, f);
                    k += 1;
                    if f == 0 {
                        let mut run = 0;
                        while run < 255 && k + run < letters.len() && freqs[letters[k + run]] == 0 {
                            run += 1;
                        }
                        head.push(run as u8);
                        k += run;
                    }
                }
            }
        } else {
            put_symbols(&mut head, &used, |out, c| {
                let freqs = normalise(&counts[c]);
                table[c] = syms(&freqs);
                let present = counts[c].map(|x| x > 0);
                put_symbols(out, &present, |out, s| put_freq(out, freqs[s]));
            });
        }
        for c in 0..256 {
            if used[c] {
                counts[c] = [0; 256];
            }
        }
        encode_order1_with::<N16>(src, q, &context, table, head)
    })
}

/// Each thread's order-1 tables, reused from block to block (1.3 MB that
/// would otherwise be allocated and zeroed for every block), as fixed-size
/// arrays so that indexing them by a byte needs no bounds check.
struct Order1 {
    counts: Box<[[u32; 256]; 256]>,
    table: Box<[[Sym; 256]; 256]>,
}

/// 256 rows of `v`, made on the heap (too large for a thread's stack).
fn boxed_rows<T: Copy>(v: T) -> Box<[[T; 256]; 256]> {
    match vec![[v; 256]; 256].into_boxed_slice().try_into() {
        Ok(rows) => rows,
        Err(_) => unreachable!("256 rows were made"),
    }
}

thread_local! {
    static ORDER1: std::cell::RefCell<Order1> = std::cell::RefCell::new(Order1 {
        counts: boxed_rows(0),
        table: boxed_rows(Sym::default()),
    });
}

fn encode_order1_with<const N16: bool>(
    src: &[u8],
    q: usize,
    context: &dyn Fn(usize) -> usize,
    table: &[[Sym; 256]; 256],
    head: Vec<u8>,
) -> Vec<u8> {
    let n = src.len();
    let mut states = [if N16 { LOWER_NX16 } else { LOWER }; 4];
    let mut rev = Back::new(n);
    for p in (4 * q..n).rev() {
        put_any::<N16>(
            &mut states[3],
            &table[context(p)][src[p] as usize],
            &mut rev,
        );
    }
    if q > 0 {
        // The four streams' states in locals (kept in registers), each
        // stream's symbols and contexts as their own slice.
        let [mut x0, mut x1, mut x2, mut x3] = states;
        let (s0, s1, s2, s3) = (
            &src[..q],
            &src[q..2 * q],
            &src[2 * q..3 * q],
            &src[3 * q..4 * q],
        );
        for i in (1..q).rev() {
            put_any::<N16>(
                &mut x3,
                &table[s3[i - 1] as usize][s3[i] as usize],
                &mut rev,
            );
            put_any::<N16>(
                &mut x2,
                &table[s2[i - 1] as usize][s2[i] as usize],
                &mut rev,
            );
            put_any::<N16>(
                &mut x1,
                &table[s1[i - 1] as usize][s1[i] as usize],
                &mut rev,
            );
            put_any::<N16>(
                &mut x0,
                &table[s0[i - 1] as usize][s0[i] as usize],
                &mut rev,
            );
        }
        states = [x0, x1, x2, x3];
        for j in (0..4).rev() {
            put_any::<N16>(&mut states[j], &table[0][src[j * q] as usize], &mut rev);
        }
    }
    finish::<N16>(1, n, head, states, rev)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trips go through the crate's own decoders (crates/cram/src/codecs),
    /// which are tested against htslib's streams.
    fn decode(src: &[u8], n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        crate::codecs::rans4x8::decode(src, n, &mut out, &mut Default::default()).unwrap();
        out
    }

    fn decode_nx16(src: &[u8], n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        crate::codecs::rans_nx16::decode(src, Some(n), &mut out, &mut Default::default()).unwrap();
        out
    }

    #[test]
    fn both_orders_round_trip() {
        let mut inputs: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"abc".to_vec(),
            b"abcd".to_vec(),
            b"noodles and more noodles".to_vec(),
            vec![7; 1000],
            (0..=255u8).collect(),
        ];
        let mut x = 12345u32;
        let mut v = Vec::new();
        for _ in 0..100_003 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            v.push(b'!' + ((x >> 16) % 41) as u8 * ((x >> 28) as u8 % 2));
        }
        inputs.push(v);
        // Rare symbols among one common one get frequency 1 of 4096, so a
        // state sheds two bytes before them (both renormalisation paths).
        let skewed: Vec<u8> = (0..60_000u32)
            .map(|i| {
                if i % 997 == 0 {
                    (i / 997 % 200) as u8 + 1
                } else {
                    0
                }
            })
            .collect();
        inputs.push(skewed);
        for src in &inputs {
            for order1 in [false, true] {
                let enc = encode(order1, src);
                assert_eq!(
                    decode(&enc, src.len()),
                    *src,
                    "order1 {order1}, {} bytes",
                    src.len()
                );
                let enc = encode_nx16(order1, src);
                assert_eq!(
                    decode_nx16(&enc, src.len()),
                    *src,
                    "Nx16, order1 {order1}, {} bytes",
                    src.len()
                );
            }
        }
    }

    #[test]
    fn frequencies_sum_to_the_total() {
        let mut counts = [0u32; 256];
        counts[0] = 1_000_000;
        for c in counts.iter_mut().skip(1) {
            *c = 1;
        }
        let f = normalise(&counts);
        assert_eq!(f.iter().sum::<u32>(), TOTAL);
        assert!(f.iter().all(|&x| x >= 1));
    }
}
