//! A *half*: what the join needs of a mapped primary record whose mate is
//! mapped, and its bytes between tasks.

use super::wire::bad_block;
use crate::ends::End;
use crate::spill::{decode_end, encode_end, END_BYTES};
use crate::{Barcodes, MarkdupError};

/// What the join needs of a mapped primary record whose mate is mapped
/// (a *half*), besides its name: its fragment end, its place in the
/// input, read group, whether it is the first of pair, and its barcodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HalfFields {
    pub(crate) end: End,
    pub(crate) seq: i64,
    pub(crate) rg: i16,
    pub(crate) read1: bool,
    pub(crate) barcodes: Barcodes,
}

/// Bytes of a half before its name: its fragment end, then `seq`, `rg`,
/// `read1`, the three barcodes and the name's length.
pub(crate) const HALF_BYTES: usize = END_BYTES + 8 + 2 + 1 + 4 * 3 + 4;

/// Appends a half (its fragment end already encoded as `end`) to `out`.
pub(crate) fn put_half(
    end: &[u8; END_BYTES],
    seq: i64,
    rg: i16,
    read1: bool,
    barcodes: Barcodes,
    name: &[u8],
    out: &mut Vec<u8>,
) {
    let mut f = [0u8; HALF_BYTES];
    f[..END_BYTES].copy_from_slice(end);
    let t = &mut f[END_BYTES..];
    t[..8].copy_from_slice(&seq.to_le_bytes());
    t[8..10].copy_from_slice(&rg.to_le_bytes());
    t[10] = read1 as u8;
    t[11..15].copy_from_slice(&barcodes.umi.to_le_bytes());
    t[15..19].copy_from_slice(&barcodes.read_one.to_le_bytes());
    t[19..23].copy_from_slice(&barcodes.read_two.to_le_bytes());
    t[23..27].copy_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(&f);
    out.extend_from_slice(name);
}

/// [`put_half`] of decoded fields.
pub(crate) fn encode_half(h: &HalfFields, name: &[u8], out: &mut Vec<u8>) {
    let mut e = [0u8; END_BYTES];
    encode_end(&h.end, &mut e);
    put_half(&e, h.seq, h.rg, h.read1, h.barcodes, name, out);
}

/// The fields of a half from its fixed bytes ([`HALF_BYTES`]).
pub(crate) fn half_fields(fixed: &[u8; HALF_BYTES]) -> HalfFields {
    let end = decode_end(fixed[..END_BYTES].try_into().expect("sized"));
    let f = &fixed[END_BYTES..];
    let i32_ = |s: &[u8]| i32::from_le_bytes(s.try_into().expect("sized"));
    HalfFields {
        end,
        seq: i64::from_le_bytes(f[..8].try_into().expect("sized")),
        rg: i16::from_le_bytes([f[8], f[9]]),
        read1: f[10] != 0,
        barcodes: Barcodes {
            umi: i32_(&f[11..15]),
            read_one: i32_(&f[15..19]),
            read_two: i32_(&f[19..23]),
        },
    }
}

/// The name's length, from a half's fixed bytes.
pub(crate) fn half_name_len(fixed: &[u8; HALF_BYTES]) -> usize {
    u32::from_le_bytes(fixed[HALF_BYTES - 4..].try_into().expect("sized")) as usize
}

/// The half that starts at `at` in `b` (its fields and name), and where
/// the next one starts.
pub(crate) fn half_at(b: &[u8], at: usize) -> Result<(HalfFields, &[u8], usize), MarkdupError> {
    let bad = || bad_block("mate halves", b.len(), at);
    let fixed: &[u8; HALF_BYTES] = b
        .get(at..at + HALF_BYTES)
        .ok_or_else(bad)?
        .try_into()
        .expect("sized");
    let name_at = at + HALF_BYTES;
    let name = b
        .get(name_at..name_at + half_name_len(fixed))
        .ok_or_else(bad)?;
    Ok((half_fields(fixed), name, name_at + name.len()))
}
