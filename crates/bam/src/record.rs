//! A zero-copy view of one BAM record (SAM spec §4.2), so the sorter can keep
//! records as raw bytes in its arena and still read the few fields a sort key
//! needs. The view is built only over bytes that `validate` accepted (or that
//! the SAM parser produced), so accessors index without re-checking lengths.
//!
//! Layout of the bytes a `RecordRef` wraps (after the 4-byte `block_size`):
//! ```text
//!  0..4   refID        i32     4..8   pos         i32 (0-based)
//!  8      l_read_name  u8      9      mapq        u8
//! 10..12  bin          u16    12..14  n_cigar_op  u16
//! 14..16  flag         u16    16..20  l_seq       u32
//! 20..24  next_refID   i32    24..28  next_pos    i32
//! 28..32  tlen         i32    32..    read_name (NUL-terminated), cigar,
//!                                     seq (4-bit packed), qual, aux
//! ```

/// Size of the fixed part of a record (§4.2, fields refID .. tlen).
pub const FIXED_LEN: usize = 32;

/// Flag bits used by the sort orders (SAM spec §1.4).
pub mod flags {
    pub const PAIRED: u16 = 0x1;
    pub const UNMAPPED: u16 = 0x4;
    pub const MATE_UNMAPPED: u16 = 0x8;
    pub const REVERSE: u16 = 0x10;
    pub const MATE_REVERSE: u16 = 0x20;
    pub const READ1: u16 = 0x40;
    pub const READ2: u16 = 0x80;
    pub const SECONDARY: u16 = 0x100;
    pub const DUPLICATE: u16 = 0x400;
    pub const SUPPLEMENTARY: u16 = 0x800;
}

/// A borrowed, already-validated BAM record (without its `block_size` prefix).
#[derive(Clone, Copy, Debug)]
pub struct RecordRef<'a> {
    data: &'a [u8],
}

#[inline]
fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl<'a> RecordRef<'a> {
    /// Wraps record bytes (the part after `block_size`). The caller promises
    /// the bytes passed `validate`; only the fixed-part length is asserted.
    #[inline]
    pub fn new(data: &'a [u8]) -> Self {
        assert!(
            data.len() >= FIXED_LEN,
            "record shorter than its fixed part"
        );
        RecordRef { data }
    }

    /// Wraps a record that still carries its 4-byte `block_size` prefix.
    #[inline]
    pub fn with_block_size(framed: &'a [u8]) -> Self {
        Self::new(&framed[4..])
    }

    /// The raw bytes this view covers.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    #[inline]
    pub fn ref_id(&self) -> i32 {
        le_i32(self.data, 0)
    }
    /// 0-based leftmost position (-1 when unplaced).
    #[inline]
    pub fn pos(&self) -> i32 {
        le_i32(self.data, 4)
    }
    #[inline]
    pub fn l_read_name(&self) -> usize {
        self.data[8] as usize
    }
    #[inline]
    pub fn mapq(&self) -> u8 {
        self.data[9]
    }
    #[inline]
    pub fn bin(&self) -> u16 {
        le_u16(self.data, 10)
    }
    #[inline]
    pub fn n_cigar_op(&self) -> usize {
        le_u16(self.data, 12) as usize
    }
    #[inline]
    pub fn flag(&self) -> u16 {
        le_u16(self.data, 14)
    }
    #[inline]
    pub fn l_seq(&self) -> usize {
        u32::from_le_bytes([self.data[16], self.data[17], self.data[18], self.data[19]]) as usize
    }
    #[inline]
    pub fn next_ref_id(&self) -> i32 {
        le_i32(self.data, 20)
    }
    #[inline]
    pub fn next_pos(&self) -> i32 {
        le_i32(self.data, 24)
    }
    #[inline]
    pub fn tlen(&self) -> i32 {
        le_i32(self.data, 28)
    }

    #[inline]
    fn cigar_start(&self) -> usize {
        FIXED_LEN + self.l_read_name()
    }
    #[inline]
    fn seq_start(&self) -> usize {
        self.cigar_start() + 4 * self.n_cigar_op()
    }
    #[inline]
    fn qual_start(&self) -> usize {
        self.seq_start() + self.l_seq().div_ceil(2)
    }
    #[inline]
    fn aux_start(&self) -> usize {
        self.qual_start() + self.l_seq()
    }

    /// Read name without its NUL terminator.
    #[inline]
    pub fn read_name(&self) -> &'a [u8] {
        let raw = &self.data[FIXED_LEN..self.cigar_start()];
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        &raw[..end]
    }

    /// Iterator over CIGAR operations as `(op_code, length)`; op codes follow
    /// §4.2 (`MIDNSHP=X` = 0..8).
    pub fn cigar(&self) -> impl Iterator<Item = (u8, u32)> + 'a {
        let start = self.cigar_start();
        let raw = &self.data[start..start + 4 * self.n_cigar_op()];
        raw.chunks_exact(4).map(|c| {
            let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            ((v & 0xf) as u8, v >> 4)
        })
    }

    /// Raw CIGAR bytes (4 per op, little-endian `len<<4|op`).
    #[inline]
    pub fn cigar_bytes(&self) -> &'a [u8] {
        &self.data[self.cigar_start()..self.seq_start()]
    }
    /// 4-bit packed sequence bytes.
    #[inline]
    pub fn seq_bytes(&self) -> &'a [u8] {
        &self.data[self.seq_start()..self.qual_start()]
    }
    /// Appends the record's bases as upper-case letters (`=ACMGRSVTWYHKDBN`
    /// by 4-bit code, SAM spec §4.2.3) to `out`.
    #[inline]
    pub fn push_bases(&self, out: &mut Vec<u8>) {
        push_bases(self.seq_bytes(), self.l_seq(), out)
    }
    /// Phred qualities (0xFF bytes when absent).
    #[inline]
    pub fn qual(&self) -> &'a [u8] {
        &self.data[self.qual_start()..self.aux_start()]
    }
    /// The aux (tag) area.
    #[inline]
    pub fn aux(&self) -> &'a [u8] {
        &self.data[self.aux_start()..]
    }

    /// Number of reference bases the alignment covers (M, D, N, =, X);
    /// htslib's `bam_cigar2rlen`.
    pub fn reference_length(&self) -> i64 {
        self.cigar()
            .filter(|(op, _)| matches!(op, 0 | 2 | 3 | 7 | 8))
            .map(|(_, len)| len as i64)
            .sum()
    }

    /// Finds the aux field for `tag` and returns `(type_byte, value_bytes)`
    /// where value_bytes starts right after the type byte and runs to the end
    /// of the aux area (callers decode only what the type says). Tags are
    /// searched in order; the first match wins, as in htslib's `bam_aux_get`.
    pub fn aux_get(&self, tag: [u8; 2]) -> Option<(u8, &'a [u8])> {
        let aux = self.aux();
        let mut i = 0;
        while i + 3 <= aux.len() {
            let t = [aux[i], aux[i + 1]];
            let ty = aux[i + 2];
            let val = &aux[i + 3..];
            if t == tag {
                return Some((ty, val));
            }
            i += 3 + aux_value_len(ty, val)?;
        }
        None
    }

    /// [`aux_get`](RecordRef::aux_get) for each of `tags`, in one pass over
    /// the aux area: element `j` is what `aux_get(tags[j])` returns (the
    /// first field with that tag; `None` when it is absent or lies after a
    /// field whose length cannot be read). For keys that need several tags
    /// of every record.
    pub fn aux_get_each<const N: usize>(&self, tags: [[u8; 2]; N]) -> [Option<(u8, &'a [u8])>; N] {
        let aux = self.aux();
        let mut found = [None; N];
        let mut missing = N;
        let mut i = 0;
        while missing > 0 && i + 3 <= aux.len() {
            let t = [aux[i], aux[i + 1]];
            let ty = aux[i + 2];
            let val = &aux[i + 3..];
            for (slot, tag) in found.iter_mut().zip(tags) {
                if slot.is_none() && t == tag {
                    *slot = Some((ty, val));
                    missing -= 1;
                }
            }
            match aux_value_len(ty, val) {
                Some(len) => i += 3 + len,
                None => break,
            }
        }
        found
    }
}

/// Length in bytes of an aux value of type `ty` whose bytes start at `val`
/// (SAM spec §4.2.4). `None` when the type is unknown or the value runs past
/// the end of `val`.
pub fn aux_value_len(ty: u8, val: &[u8]) -> Option<usize> {
    let fixed = |n: usize| if val.len() >= n { Some(n) } else { None };
    match ty {
        b'A' | b'c' | b'C' => fixed(1),
        b's' | b'S' => fixed(2),
        b'i' | b'I' | b'f' => fixed(4),
        // Not in the SAM spec, but htslib reads and writes it (`aux_type2size`).
        b'd' => fixed(8),
        b'Z' | b'H' => val.iter().position(|&b| b == 0).map(|p| p + 1),
        b'B' => {
            if val.len() < 5 {
                return None;
            }
            let sub = match val[0] {
                b'c' | b'C' => 1,
                b's' | b'S' => 2,
                b'i' | b'I' | b'f' => 4,
                _ => return None,
            };
            let n = u32::from_le_bytes([val[1], val[2], val[3], val[4]]) as usize;
            let len = n.checked_mul(sub)?.checked_add(5)?;
            if val.len() >= len {
                Some(len)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The BAI/CSI bin of the 0-based half-open interval `[beg, end)` at the BAM
/// index depth (SAM spec §5.3, htslib `hts_reg2bin(beg, end, 14, 5)`).
/// Shifts are arithmetic, so an unplaced record (`beg = -1, end = 0`) gets
/// bin 4680, as htslib gives it.
pub fn reg2bin(beg: i64, end: i64) -> u16 {
    let end = end - 1;
    let mut s = 14;
    let mut t: i64 = ((1 << 15) - 1) / 7;
    for l in (1..=5).rev() {
        if beg >> s == end >> s {
            return (t + (beg >> s)) as u16;
        }
        s += 3;
        t -= 1 << (3 * (l - 1));
    }
    0
}

/// The value of an integer tag of type `ty` (`cCsSiI`) whose value bytes
/// start `val`; `None` for other types or too few bytes.
pub fn aux_int(ty: u8, val: &[u8]) -> Option<i64> {
    let le4 = |v: &[u8]| Some([*v.first()?, *v.get(1)?, *v.get(2)?, *v.get(3)?]);
    Some(match ty {
        b'c' => *val.first()? as i8 as i64,
        b'C' => *val.first()? as i64,
        b's' => i16::from_le_bytes([*val.first()?, *val.get(1)?]) as i64,
        b'S' => u16::from_le_bytes([*val.first()?, *val.get(1)?]) as i64,
        b'i' => i32::from_le_bytes(le4(val)?) as i64,
        b'I' => u32::from_le_bytes(le4(val)?) as i64,
        _ => return None,
    })
}

/// htslib's `seq_nt16_str`: the letter of each 4-bit base code (SAM spec
/// §4.2.3).
pub const NT16_STR: &[u8; 16] = b"=ACMGRSVTWYHKDBN";

/// The two letters of each packed byte (high nibble first), so that bases
/// are unpacked a byte at a time.
const NT16_PAIRS: [[u8; 2]; 256] = {
    let mut t = [[0; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [NT16_STR[i >> 4], NT16_STR[i & 0xf]];
        i += 1;
    }
    t
};

/// Appends the `l_seq` letters of BAM's packed bases `packed` (two a
/// byte, the first in the high nibble) to `out`.
pub fn push_bases(packed: &[u8], l_seq: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + l_seq, 0);
    let dst = &mut out[start..];
    let mut pairs = dst.chunks_exact_mut(2);
    for (d, &b) in (&mut pairs).zip(packed) {
        d.copy_from_slice(&NT16_PAIRS[b as usize]);
    }
    if let [last] = pairs.into_remainder() {
        *last = NT16_STR[(packed[l_seq / 2] >> 4) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Unpacking a byte at a time gives each nibble's letter in
        /// order, for odd and even lengths, after what `out` held.
        #[test]
        fn push_bases_gives_each_nibble_in_order(
            packed in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            drop_last in proptest::bool::ANY,
        ) {
            let l_seq = (2 * packed.len()).saturating_sub(usize::from(drop_last));
            let mut out = b"x".to_vec();
            push_bases(&packed, l_seq, &mut out);
            let mut want = b"x".to_vec();
            for i in 0..l_seq {
                want.push(NT16_STR[((packed[i / 2] >> (4 * (1 - i % 2))) & 0xf) as usize]);
            }
            proptest::prop_assert_eq!(out, want);
        }
    }

    /// A minimal mapped record: name "r1", 1 CIGAR op 4M, seq ACGT, qual, tag NM:c:1.
    #[rustfmt::skip]
    fn sample() -> Vec<u8> {
        let mut v = vec![
            2, 0, 0, 0,       // refID = 2
            99, 0, 0, 0,      // pos = 99
            3,                // l_read_name = 3 ("r1\0")
            60,               // mapq
            0x49, 0x12,       // bin
            1, 0,             // n_cigar_op = 1
            0x53, 0x00,       // flag = 0x53
            4, 0, 0, 0,       // l_seq = 4
            2, 0, 0, 0,       // next_refID
            199, 0, 0, 0,     // next_pos
            150, 0, 0, 0,     // tlen
        ];
        v.extend_from_slice(b"r1\0");
        v.extend_from_slice(&(4u32 << 4).to_le_bytes()); // 4M
        v.extend_from_slice(&[0x12, 0x48]); // ACGT
        v.extend_from_slice(&[30, 30, 30, 30]);
        v.extend_from_slice(b"NMc\x01");
        v
    }

    #[test]
    fn fields_read_back() {
        let bytes = sample();
        let r = RecordRef::new(&bytes);
        assert_eq!(r.ref_id(), 2);
        assert_eq!(r.pos(), 99);
        assert_eq!(r.read_name(), b"r1");
        assert_eq!(r.flag(), 0x53);
        assert_eq!(r.l_seq(), 4);
        assert_eq!(r.cigar().collect::<Vec<_>>(), vec![(0, 4)]);
        assert_eq!(r.reference_length(), 4);
        assert_eq!(r.seq_bytes(), &[0x12, 0x48]);
        assert_eq!(r.qual(), &[30, 30, 30, 30]);
        assert_eq!(r.aux_get(*b"NM"), Some((b'c', &b"\x01"[..])));
        assert_eq!(r.aux_get(*b"XX"), None);
    }

    /// `aux_get_each` answers as `aux_get` per tag: first match wins, an
    /// absent tag and one after an unreadable field are `None`.
    #[test]
    fn aux_get_each_is_aux_get_per_tag() {
        let mut bytes = sample();
        bytes.extend_from_slice(b"RGZab\0NMc\x02MCZ4M\0");
        // A field of unknown type: nothing after it can be read.
        bytes.extend_from_slice(b"XXq\x00CBZc\0");
        let r = RecordRef::new(&bytes);
        let tags = [*b"MC", *b"NM", *b"CB", *b"RG", *b"MI", *b"XX"];
        let each = r.aux_get_each(tags);
        for (tag, got) in tags.iter().zip(each) {
            assert_eq!(got, r.aux_get(*tag), "{}", String::from_utf8_lossy(tag));
        }
        assert_eq!(
            each[1],
            Some((b'c', &b"\x01RGZab\0NMc\x02MCZ4M\0XXq\x00CBZc\0"[..]))
        );
        assert_eq!(each[2], None);
        assert!(each[5].is_some());
    }

    #[test]
    fn aux_lengths() {
        assert_eq!(aux_value_len(b'Z', b"ab\0rest"), Some(3));
        assert_eq!(aux_value_len(b'Z', b"ab"), None);
        assert_eq!(
            aux_value_len(b'B', &[b's', 2, 0, 0, 0, 1, 0, 2, 0]),
            Some(9)
        );
        assert_eq!(aux_value_len(b'B', &[b's', 2, 0, 0, 0, 1, 0]), None);
        assert_eq!(aux_value_len(b'q', &[0]), None);
        assert_eq!(aux_value_len(b'd', &[0; 8]), Some(8));
    }

    #[test]
    fn bins_match_the_spec() {
        // Values from SAM spec §5.3's reg2bin: level 5 (16 kb) bins start at
        // 4681, a read crossing a 16 kb boundary goes one level up.
        assert_eq!(reg2bin(0, 1), 4681);
        assert_eq!(reg2bin(16383, 16385), 585);
        assert_eq!(reg2bin(-1, 0), 4680);
        assert_eq!(reg2bin(0, 1 << 29), 0);
    }
}
