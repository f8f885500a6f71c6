//! The name tokeniser ("tok3", CRAMcodecs §5), decoded by alnsort.
//!
//! The stream holds a 2-D array of byte streams `B[position][type]`, each
//! compressed with rANS Nx16 (alnsort's decoder) or the arithmetic coder
//! (noodles', through `via_noodles`), or declared a copy of an earlier one; a
//! position whose type stream is absent is one type followed by MATCHes.
//! Each name is then rebuilt token by token against an earlier name (a
//! DIFF distance) or copied whole (a DUP distance). Every token type is
//! handled, DIGITS0 with its DZLEN stream and DELTA0 with the previous
//! name's width among them. The output is the names, each ended by a NUL,
//! as the read-name data series stores them.

use super::CodecScratch;
use crate::error::Tok3Fault as Fault;
use std::io;

const TYPE: u8 = 0;
const STRING: u8 = 1;
const CHAR: u8 = 2;
const DIGITS0: u8 = 3;
const DZLEN: u8 = 4;
const DUP: u8 = 5;
const DIFF: u8 = 6;
const DIGITS: u8 = 7;
const DELTA: u8 = 8;
const DELTA0: u8 = 9;
const MATCH: u8 = 10;
const NOP: u8 = 11;
const END: u8 = 12;
const TYPES: usize = 13;

/// Token positions a stream may declare (position 0 included); the spec
/// allows 128 tokens per name, and a copy names its source in one byte.
const MAX_POSITIONS: usize = 256;

/// One byte stream `B[position][type]` and how far it has been read.
#[derive(Clone, Default)]
struct Stream {
    data: Vec<u8>,
    pos: usize,
}

impl Stream {
    fn u8(&mut self, what: (usize, u8)) -> io::Result<u8> {
        let b = *self.data.get(self.pos).ok_or_else(|| exhausted(what))?;
        self.pos += 1;
        Ok(b)
    }

    fn u32(&mut self, what: (usize, u8)) -> io::Result<u32> {
        let b = self
            .data
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| exhausted(what))?;
        self.pos += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The bytes up to the next NUL (which is consumed).
    fn string(&mut self, what: (usize, u8)) -> io::Result<&[u8]> {
        let rest = &self.data[self.pos.min(self.data.len())..];
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| exhausted(what))?;
        let start = self.pos;
        self.pos += n + 1;
        Ok(&self.data[start..start + n])
    }
}

/// The name of token type `t` (as the spec writes it), for messages.
pub(crate) fn type_name(t: u8) -> &'static str {
    [
        "TYPE", "STRING", "CHAR", "DIGITS0", "DZLEN", "DUP", "DIFF", "DIGITS", "DELTA", "DELTA0",
        "MATCH", "NOP", "END",
    ]
    .get(t as usize)
    .copied()
    .unwrap_or("unknown")
}

fn exhausted((position, ty): (usize, u8)) -> io::Error {
    Fault::StreamExhausted { position, ty }.into()
}

/// A decoded token, kept for later names' MATCH and DELTA.
#[derive(Clone, Copy, Debug)]
enum Tok {
    /// Bytes of the output (a STRING or CHAR).
    Str { at: u32, len: u32 },
    /// A number, printed at least `width` digits wide (0: as is).
    Num { v: u32, width: u8 },
    /// NOP and END.
    None,
}

fn digits(v: u32) -> u8 {
    let mut n = 1;
    let mut v = v;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

fn push_number(out: &mut Vec<u8>, v: u32, width: u8) {
    let d = digits(v);
    for _ in d..width {
        out.push(b'0');
    }
    let at = out.len();
    out.resize(at + d as usize, 0);
    let mut v = v;
    for k in (0..d as usize).rev() {
        out[at + k] = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// The streams of one block.
struct Streams {
    b: Vec<[Option<Stream>; TYPES]>,
}

impl Streams {
    fn get(&mut self, pos: usize, ty: u8) -> io::Result<&mut Stream> {
        self.b
            .get_mut(pos)
            .and_then(|s| s.get_mut(ty as usize))
            .and_then(Option::as_mut)
            .ok_or_else(|| Fault::MissingStream { position: pos, ty }.into())
    }
}

fn read_uint7(src: &mut &[u8]) -> io::Result<usize> {
    let mut v: u64 = 0;
    for _ in 0..5 {
        let (&c, rest) = src.split_first().ok_or(Fault::LengthCutShort)?;
        *src = rest;
        v = (v << 7) | u64::from(c & 0x7f);
        if c < 0x80 {
            return Ok(usize::try_from(v).map_err(|_| Fault::LengthTooLarge { value: v })?);
        }
    }
    Err(Fault::LengthTooLong.into())
}

/// Decodes a name-tokeniser stream into `dst` (cleared): the names, each
/// ended by a NUL. `expected` is the block's raw size, which the stream's
/// own total must equal.
pub fn decode(
    src: &[u8],
    expected: usize,
    dst: &mut Vec<u8>,
    s: &mut CodecScratch,
) -> io::Result<()> {
    dst.clear();
    let mut src = src;
    let (head, rest) = src
        .split_first_chunk::<9>()
        .ok_or(Fault::HeaderCutShort { len: src.len() })?;
    src = rest;
    let ulen = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let nnames = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let method = match head[8] {
        0 => super::method::RANSNX16,
        1 => super::method::ARITH,
        other => return Err(Fault::EntropyCoder { coder: other }.into()),
    };
    if ulen != expected {
        return Err(Fault::OutputLength {
            found: ulen,
            expected,
        }
        .into());
    }
    if nnames > ulen {
        return Err(Fault::TooManyNames {
            names: nnames,
            bytes: ulen,
        }
        .into());
    }
    let mut st = Streams { b: Vec::new() };
    let mut t: isize = -1;
    while !src.is_empty() {
        let ttype = src[0];
        src = &src[1..];
        let ty = ttype & 63;
        if ty as usize >= TYPES {
            return Err(Fault::TokenType { ty }.into());
        }
        if ttype & 128 != 0 {
            t += 1;
            if t as usize >= MAX_POSITIONS {
                return Err(Fault::TooManyPositions { max: MAX_POSITIONS }.into());
            }
            st.b.push(Default::default());
            if ty != TYPE {
                let mut data = vec![MATCH; nnames];
                if let Some(first) = data.first_mut() {
                    *first = ty;
                }
                st.b[t as usize][TYPE as usize] = Some(Stream { data, pos: 0 });
            }
        }
        if t < 0 {
            return Err(Fault::StreamBeforePosition.into());
        }
        let data = if ttype & 64 != 0 {
            let (&[p, d], rest) = src.split_first_chunk::<2>().ok_or(Fault::CopyCutShort)?;
            src = rest;
            let from =
                st.b.get(p as usize)
                    .and_then(|s| s.get(d as usize))
                    .and_then(Option::as_ref)
                    .ok_or(Fault::CopyOfMissing { position: p, ty: d })?;
            from.data.clone()
        } else {
            let clen = read_uint7(&mut src)?;
            if clen > src.len() {
                return Err(Fault::StreamBytes {
                    len: clen,
                    left: src.len(),
                }
                .into());
            }
            let (c, rest) = src.split_at(clen);
            src = rest;
            let mut out = Vec::new();
            if c.is_empty() {
            } else if method == super::method::RANSNX16 {
                super::rans_nx16::decode(c, None, &mut out, &mut s.nx16)?;
            } else {
                s.noodles.decode(method, c, 1, &mut out)?;
            }
            out
        };
        st.b[t as usize][ty as usize] = Some(Stream { data, pos: 0 });
    }
    decode_names(&mut st, nnames, ulen, dst)
}

fn decode_names(st: &mut Streams, nnames: usize, ulen: usize, dst: &mut Vec<u8>) -> io::Result<()> {
    dst.reserve(ulen);
    // Each name's tokens: a range of `toks`.
    let mut names: Vec<(u32, u32)> = Vec::with_capacity(nnames);
    let mut name_at: Vec<(usize, usize)> = Vec::with_capacity(nnames);
    let mut toks: Vec<Tok> = Vec::new();
    for n in 0..nnames {
        let ty = st.get(0, TYPE)?.u8((0, TYPE))?;
        if ty != DUP && ty != DIFF {
            return Err(Fault::NameStart { name: n, ty }.into());
        }
        let dist = st.get(0, ty)?.u32((0, ty))? as usize;
        let start = dst.len();
        if ty == DUP {
            let m = n
                .checked_sub(dist)
                .filter(|&m| m < n)
                .ok_or(Fault::DupDistance {
                    name: n,
                    distance: dist,
                })?;
            let (a, len) = name_at[m];
            dst.extend_from_within(a..a + len);
            dst.push(0);
            names.push(names[m]);
            name_at.push((start, len));
            continue;
        }
        let m = n.checked_sub(dist).ok_or(Fault::DiffDistance {
            name: n,
            distance: dist,
        })?;
        let first = toks.len();
        let prev = |toks: &[Tok], t: usize| -> io::Result<Tok> {
            if m >= n {
                return Err(Fault::NoEarlierName { name: n, token: t }.into());
            }
            let (s, c) = names[m];
            if t > c as usize {
                return Err(Fault::NoEarlierToken {
                    name: n,
                    token: t,
                    earlier: m,
                    tokens: c,
                }
                .into());
            }
            Ok(toks[s as usize + t - 1])
        };
        let mut t = 1;
        loop {
            if t >= st.b.len() {
                return Err(Fault::NoEnd { name: n }.into());
            }
            let ty = st.get(t, TYPE)?.u8((t, TYPE))?;
            let tok = match ty {
                CHAR => {
                    let c = st.get(t, CHAR)?.u8((t, CHAR))?;
                    dst.push(c);
                    Tok::Str {
                        at: (dst.len() - 1) as u32,
                        len: 1,
                    }
                }
                STRING => {
                    let at = dst.len();
                    let s = st.get(t, STRING)?.string((t, STRING))?;
                    dst.extend_from_slice(s);
                    Tok::Str {
                        at: at as u32,
                        len: s.len() as u32,
                    }
                }
                DIGITS => {
                    let v = st.get(t, DIGITS)?.u32((t, DIGITS))?;
                    push_number(dst, v, 0);
                    Tok::Num { v, width: 0 }
                }
                DIGITS0 => {
                    let v = st.get(t, DIGITS0)?.u32((t, DIGITS0))?;
                    let width = st.get(t, DZLEN)?.u8((t, DZLEN))?;
                    push_number(dst, v, width);
                    Tok::Num { v, width }
                }
                DELTA | DELTA0 => {
                    let d = st.get(t, ty)?.u8((t, ty))?;
                    let Tok::Num { v, width } = prev(&toks[..], t)? else {
                        return Err(Fault::DeltaOfNonNumber {
                            name: n,
                            token: t,
                            ty,
                        }
                        .into());
                    };
                    let v = v.wrapping_add(u32::from(d));
                    let width = if ty == DELTA0 {
                        width.max(digits(v.wrapping_sub(u32::from(d))))
                    } else {
                        0
                    };
                    push_number(dst, v, width);
                    Tok::Num { v, width }
                }
                MATCH => {
                    let p = prev(&toks[..], t)?;
                    match p {
                        Tok::Str { at, len } => {
                            let a = dst.len();
                            dst.extend_from_within(at as usize..(at + len) as usize);
                            Tok::Str { at: a as u32, len }
                        }
                        Tok::Num { v, width } => {
                            push_number(dst, v, width);
                            p
                        }
                        Tok::None => p,
                    }
                }
                NOP | END => Tok::None,
                other => {
                    return Err(Fault::TokenTypeInName {
                        name: n,
                        token: t,
                        ty: other,
                    }
                    .into())
                }
            };
            toks.push(tok);
            if ty == END {
                break;
            }
            t += 1;
        }
        names.push((first as u32, (toks.len() - first) as u32));
        name_at.push((start, dst.len() - start));
        dst.push(0);
        if dst.len() > ulen {
            return Err(Fault::NamesLonger { declared: ulen }.into());
        }
    }
    if dst.len() != ulen {
        return Err(Fault::NamesLength {
            found: dst.len(),
            declared: ulen,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of raw (uncompressed-flagged rANS Nx16) token streams.
    fn stream(names: usize, ulen: usize, parts: &[(u8, &[u8])]) -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(&(ulen as u32).to_le_bytes());
        s.extend_from_slice(&(names as u32).to_le_bytes());
        s.push(0);
        for &(ttype, data) in parts {
            s.push(ttype);
            if ttype & 64 != 0 {
                s.extend_from_slice(data);
                continue;
            }
            // rANS Nx16 with the "stored" flag (32) and the size (uint7).
            let mut c = vec![32u8];
            assert!(data.len() < 128);
            c.push(data.len() as u8);
            c.extend_from_slice(data);
            s.push(c.len() as u8);
            s.extend_from_slice(&c);
        }
        s
    }

    fn decode_all(src: &[u8], expected: usize) -> io::Result<Vec<u8>> {
        let mut s = CodecScratch::default();
        let mut out = Vec::new();
        decode(src, expected, &mut out, &mut s).map(|()| out)
    }

    /// Decodes `$src` as a block of `$expected` bytes, which must fail
    /// with the tok3 fault `$pat`, worded `$text`.
    macro_rules! fault {
        ($src:expr, $expected:expr, $pat:pat, $text:expr) => {{
            let e = decode_all(&$src, $expected).unwrap_err();
            assert!(
                matches!(
                    crate::DecodeError::of(&e),
                    Some(crate::DecodeError::Tok3($pat))
                ),
                "{e:?}"
            );
            assert_eq!(e.to_string(), $text);
        }};
    }

    #[test]
    fn every_token_type_by_hand() {
        // Names: "ab007x12", "ab009x12" (DELTA0 +2, MATCHes), "ab009x12" (DUP 1),
        // "c15" (DIFF 3: STRING, DIGITS).
        let expected = b"ab007x12\0ab009x12\0ab009x12\0c15\0";
        let le = |v: u32| v.to_le_bytes();
        let pos0_types = [DIFF, DIFF, DUP, DIFF];
        let diff: Vec<u8> = [le(0), le(1), le(3)].concat();
        let dup = le(1).to_vec();
        let t1 = [STRING, MATCH, STRING];
        let s1 = b"ab\0c\0";
        let t2 = [DIGITS0, DELTA0, DIGITS];
        let d0 = le(7).to_vec();
        let dz = [3u8];
        let dl0 = [2u8];
        let dg = le(15).to_vec();
        let t3 = [CHAR, MATCH, END];
        let ch = [b'x'];
        let t4 = [DIGITS, MATCH];
        let d4 = le(12).to_vec();
        let t5 = [END, END];
        let src = stream(
            4,
            expected.len(),
            &[
                (128 | TYPE, &pos0_types),
                (DIFF, &diff),
                (DUP, &dup),
                (128 | TYPE, &t1),
                (STRING, s1),
                (128 | TYPE, &t2),
                (DIGITS0, &d0),
                (DZLEN, &dz),
                (DELTA0, &dl0),
                (DIGITS, &dg),
                (128 | TYPE, &t3),
                (CHAR, &ch),
                (128 | TYPE, &t4),
                (DIGITS, &d4),
                (128 | TYPE, &t5),
            ],
        );
        assert_eq!(decode_all(&src, expected.len()).unwrap(), expected);
    }

    #[test]
    fn a_position_without_a_type_stream_and_a_copied_stream() {
        // Position 2 is DIGITS0 for every name (no TYPE stream: DIGITS0,
        // then MATCH), its DZLEN stream a copy of position 1's.
        let expected = b"!0042\0!0042\0";
        let src = stream(
            2,
            expected.len(),
            &[
                (128 | TYPE, &[DIFF, DIFF]),
                (DIFF, &[0, 0, 0, 0, 1, 0, 0, 0]),
                (128 | TYPE, &[CHAR, MATCH]),
                (CHAR, b"!"),
                (DZLEN, &[4]),
                (128 | DIGITS0, &42u32.to_le_bytes()),
                (64 | DZLEN, &[1, DZLEN]),
                (128 | TYPE, &[END, END]),
            ],
        );
        assert_eq!(decode_all(&src, expected.len()).unwrap(), expected);
    }

    #[test]
    fn inconsistent_streams_are_errors() {
        // MATCH in the first name: nothing to match.
        let src = stream(
            1,
            3,
            &[
                (128 | TYPE, &[DIFF]),
                (DIFF, &0u32.to_le_bytes()),
                (128 | TYPE, &[MATCH]),
                (128 | TYPE, &[END]),
            ],
        );
        fault!(
            src,
            3,
            Fault::NoEarlierName { name: 0, token: 1 },
            "name tokeniser: name 0 refers to an earlier name's token 1 but has none"
        );
        // A size other than the block's.
        fault!(
            src,
            4,
            Fault::OutputLength {
                found: 3,
                expected: 4
            },
            "name tokeniser stream of 3 bytes where 4 were expected"
        );
        // A copy of a stream that does not exist.
        let src = stream(1, 2, &[(128 | TYPE, &[DIFF]), (64 | DIFF, &[3, DIFF])]);
        fault!(
            src,
            2,
            Fault::CopyOfMissing {
                position: 3,
                ty: DIFF
            },
            "name tokeniser: copy of the DIFF stream of token 3, which does not exist"
        );
    }

    /// Streams malformed in their header, their stream list or their
    /// names: the typed fault with the values read, and its text.
    #[test]
    fn malformed_streams_give_typed_faults() {
        fault!(
            [0u8; 5],
            0,
            Fault::HeaderCutShort { len: 5 },
            "name tokeniser stream shorter than its header (5 bytes)"
        );
        let mut coder = stream(1, 2, &[]);
        coder[8] = 7;
        fault!(
            coder,
            2,
            Fault::EntropyCoder { coder: 7 },
            "name tokeniser: entropy coder 7 (0 rANS Nx16, 1 arithmetic)"
        );
        fault!(
            stream(3, 2, &[]),
            2,
            Fault::TooManyNames { names: 3, bytes: 2 },
            "name tokeniser: 3 names in 2 bytes"
        );
        fault!(
            stream(1, 2, &[(128 | 13, &[])]),
            2,
            Fault::TokenType { ty: 13 },
            "name tokeniser: token type 13"
        );
        fault!(
            stream(1, 2, &[(TYPE, &[DIFF])]),
            2,
            Fault::StreamBeforePosition,
            "name tokeniser: a stream before the first token position"
        );
        let mut long = stream(1, 2, &[(128 | TYPE, &[DIFF])]);
        long.extend_from_slice(&[DIFF, 9, 1]);
        fault!(
            long,
            2,
            Fault::StreamBytes { len: 9, left: 1 },
            "name tokeniser: stream of 9 bytes, 1 left"
        );
        // The first name starts with a CHAR.
        fault!(
            stream(1, 2, &[(128 | TYPE, &[CHAR])]),
            2,
            Fault::NameStart { name: 0, ty: CHAR },
            "name tokeniser: name 0 starts with CHAR (DUP or DIFF expected)"
        );
        // A DIFF without its distance stream.
        fault!(
            stream(1, 2, &[(128 | TYPE, &[DIFF])]),
            2,
            Fault::MissingStream {
                position: 0,
                ty: DIFF
            },
            "name tokeniser: token 0 needs a DIFF stream the block does not have"
        );
        // A DIFF whose distance stream has 2 of its 4 bytes.
        fault!(
            stream(1, 2, &[(128 | TYPE, &[DIFF]), (DIFF, &[0, 0])]),
            2,
            Fault::StreamExhausted {
                position: 0,
                ty: DIFF
            },
            "name tokeniser: the DIFF stream of token 0 runs out"
        );
        // The first name a duplicate of itself.
        fault!(
            stream(1, 2, &[(128 | TYPE, &[DUP]), (DUP, &0u32.to_le_bytes())]),
            2,
            Fault::DupDistance {
                name: 0,
                distance: 0
            },
            "name tokeniser: name 0 duplicates name -0"
        );
        fault!(
            stream(1, 2, &[(128 | TYPE, &[DIFF]), (DIFF, &2u32.to_le_bytes())]),
            2,
            Fault::DiffDistance {
                name: 0,
                distance: 2
            },
            "name tokeniser: name 0 differs from name -2"
        );
        // A name whose one token position holds a CHAR, no END.
        fault!(
            stream(
                1,
                2,
                &[
                    (128 | TYPE, &[DIFF]),
                    (DIFF, &0u32.to_le_bytes()),
                    (128 | CHAR, b"x"),
                ]
            ),
            2,
            Fault::NoEnd { name: 0 },
            "name tokeniser: name 0 has no END"
        );
        fault!(
            stream(
                1,
                2,
                &[
                    (128 | TYPE, &[DIFF]),
                    (DIFF, &0u32.to_le_bytes()),
                    (128 | TYPE, &[DZLEN]),
                ]
            ),
            2,
            Fault::TokenTypeInName {
                name: 0,
                token: 1,
                ty: DZLEN
            },
            "name tokeniser: name 0 token 1 has type DZLEN"
        );
        // Two names, "x" then a DELTA of its CHAR.
        let two = [
            (128 | TYPE, &[DIFF, DIFF][..]),
            (DIFF, &[0, 0, 0, 0, 1, 0, 0, 0][..]),
            (128 | TYPE, &[CHAR, DELTA][..]),
            (CHAR, &b"x"[..]),
            (DELTA, &[1][..]),
            (128 | TYPE, &[END, END][..]),
        ];
        fault!(
            stream(2, 4, &two),
            4,
            Fault::DeltaOfNonNumber {
                name: 1,
                token: 1,
                ty: DELTA
            },
            "name tokeniser: name 1 token 1 is a DELTA of a token that is not a number"
        );
        // Two names of one END each ("" twice) where 3 bytes are declared.
        let ends = [
            (128 | TYPE, &[DIFF, DIFF][..]),
            (DIFF, &[0, 0, 0, 0, 1, 0, 0, 0][..]),
            (128 | TYPE, &[END, END][..]),
        ];
        fault!(
            stream(2, 3, &ends),
            3,
            Fault::NamesLength {
                found: 2,
                declared: 3
            },
            "name tokeniser: 2 bytes of names where the stream declares 3"
        );
        // Two names of one CHAR each ("x", "y": 4 bytes) where 3 are.
        let chars = [
            (128 | TYPE, &[DIFF, DIFF][..]),
            (DIFF, &[0, 0, 0, 0, 1, 0, 0, 0][..]),
            (128 | TYPE, &[CHAR, CHAR][..]),
            (CHAR, &b"xy"[..]),
            (128 | TYPE, &[END, END][..]),
        ];
        fault!(
            stream(2, 3, &chars),
            3,
            Fault::NamesLonger { declared: 3 },
            "name tokeniser: names longer than the 3 bytes the stream declares"
        );
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
                                names in 0u32..50, arith in 0u8..2) {
            let mut src = Vec::new();
            src.extend_from_slice(&300u32.to_le_bytes());
            src.extend_from_slice(&names.to_le_bytes());
            src.push(arith);
            src.extend_from_slice(&tail);
            let _ = decode_all(&src, 300);
        }
    }
}
