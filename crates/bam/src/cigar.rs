//! CIGAR operations (SAM spec §4.2: a record stores each as a
//! little-endian `u32`, `len << 4 | op`, op codes `MIDNSHP=X` = 0..8) and
//! [`Cigar`], the view over a record's packed operations. The one place
//! that says which operations consume reference or query bases, and so
//! the one reference length and query length of the workspace.

/// Operation codes, SAM spec §4.2 (htslib's `BAM_CMATCH` .. `BAM_CDIFF`).
pub mod op {
    /// `M`: alignment match (either a match or a mismatch).
    pub const MATCH: u8 = 0;
    /// `I`: insertion to the reference.
    pub const INSERTION: u8 = 1;
    /// `D`: deletion from the reference.
    pub const DELETION: u8 = 2;
    /// `N`: skipped region of the reference.
    pub const SKIP: u8 = 3;
    /// `S`: soft clip (the bases are in SEQ).
    pub const SOFT_CLIP: u8 = 4;
    /// `H`: hard clip (the bases are not in SEQ).
    pub const HARD_CLIP: u8 = 5;
    /// `P`: padding (silent deletion from the padded reference).
    pub const PADDING: u8 = 6;
    /// `=`: sequence match.
    pub const SEQ_MATCH: u8 = 7;
    /// `X`: sequence mismatch.
    pub const SEQ_MISMATCH: u8 = 8;
}

/// Operation letters by code (htslib's `BAM_CIGAR_STR`, which has `B`, a
/// back-skip no spec defines, as code 9).
pub const OP_LETTERS: &[u8; 10] = b"MIDNSHP=XB";

/// Whether `op` consumes reference bases (M, D, N, =, X; htslib's
/// `bam_cigar_type` bit 1).
#[inline]
pub fn consumes_ref(op: u8) -> bool {
    matches!(
        op,
        op::MATCH | op::DELETION | op::SKIP | op::SEQ_MATCH | op::SEQ_MISMATCH
    )
}

/// Whether `op` consumes query bases (M, I, S, =, X; htslib's
/// `bam_cigar_type` bit 0).
#[inline]
pub fn consumes_query(op: u8) -> bool {
    matches!(
        op,
        op::MATCH | op::INSERTION | op::SOFT_CLIP | op::SEQ_MATCH | op::SEQ_MISMATCH
    )
}

/// The packed form of one operation (`len << 4 | op`).
#[inline]
pub fn pack(op: u8, len: u32) -> u32 {
    len << 4 | u32::from(op)
}

/// `(op, len)` of a packed operation.
#[inline]
pub fn unpack(word: u32) -> (u8, u32) {
    ((word & 0xf) as u8, word >> 4)
}

/// Number of reference bases the operations `ops` cover (htslib's
/// `bam_cigar2rlen`).
#[inline]
pub fn reference_length(ops: impl IntoIterator<Item = (u8, u32)>) -> i64 {
    ops.into_iter()
        .filter(|&(op, _)| consumes_ref(op))
        .map(|(_, len)| i64::from(len))
        .sum()
}

/// Number of query bases the operations `ops` cover (htslib's
/// `bam_cigar2qlen`).
#[inline]
pub fn query_length(ops: impl IntoIterator<Item = (u8, u32)>) -> u64 {
    ops.into_iter()
        .filter(|&(op, _)| consumes_query(op))
        .map(|(_, len)| u64::from(len))
        .sum()
}

/// A borrowed CIGAR: the record's packed operations, 4 bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cigar<'a> {
    raw: &'a [u8],
}

impl<'a> Cigar<'a> {
    /// Views packed operations; `raw`'s length must be a multiple of 4
    /// (a trailing part of an operation is not read).
    #[inline]
    pub fn new(raw: &'a [u8]) -> Self {
        debug_assert!(
            raw.len().is_multiple_of(4),
            "CIGAR bytes not a multiple of 4"
        );
        Cigar { raw }
    }

    /// The packed bytes.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Number of operations.
    #[inline]
    pub fn len(&self) -> usize {
        self.raw.len() / 4
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The operations as `(op, len)`, from either end.
    #[inline]
    pub fn ops(&self) -> Ops<'a> {
        Ops {
            words: self.raw.chunks_exact(4),
        }
    }

    /// The operations in their packed form.
    #[inline]
    pub fn words(&self) -> impl DoubleEndedIterator<Item = u32> + ExactSizeIterator + 'a {
        self.raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// Appends the CIGAR as SAM text (`*` when empty), as htslib prints
    /// it: each length in decimal, then its operation's letter (`?` for a
    /// code past [`OP_LETTERS`]).
    pub fn push_text(&self, out: &mut Vec<u8>) {
        if self.is_empty() {
            out.push(b'*');
        }
        for w in self.words() {
            crate::sam_format::push_int(out, i64::from(w >> 4));
            out.push(OP_LETTERS.get((w & 0xf) as usize).copied().unwrap_or(b'?'));
        }
    }

    /// Number of reference bases covered ([`reference_length`]).
    #[inline]
    pub fn reference_length(&self) -> i64 {
        reference_length(self.ops())
    }

    /// Number of query bases covered ([`query_length`]).
    #[inline]
    pub fn query_length(&self) -> u64 {
        query_length(self.ops())
    }
}

impl<'a> IntoIterator for Cigar<'a> {
    type Item = (u8, u32);
    type IntoIter = Ops<'a>;
    #[inline]
    fn into_iter(self) -> Ops<'a> {
        self.ops()
    }
}

/// The operations of a [`Cigar`] as `(op, len)`.
#[derive(Clone, Debug)]
pub struct Ops<'a> {
    words: std::slice::ChunksExact<'a, u8>,
}

#[inline]
fn op_of(c: &[u8]) -> (u8, u32) {
    unpack(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

impl Iterator for Ops<'_> {
    type Item = (u8, u32);
    #[inline]
    fn next(&mut self) -> Option<(u8, u32)> {
        self.words.next().map(op_of)
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.words.size_hint()
    }
}

impl DoubleEndedIterator for Ops<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<(u8, u32)> {
        self.words.next_back().map(op_of)
    }
}

impl ExactSizeIterator for Ops<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packed(ops: &[(u8, u32)]) -> Vec<u8> {
        ops.iter()
            .flat_map(|&(op, len)| pack(op, len).to_le_bytes())
            .collect()
    }

    #[test]
    fn lengths_of_a_spliced_clipped_alignment() {
        // 3S 5M 2I 4D 100N 6= 1X 2H: reference 5+4+100+6+1, query 3+5+2+6+1.
        use op::*;
        let ops = [
            (SOFT_CLIP, 3),
            (MATCH, 5),
            (INSERTION, 2),
            (DELETION, 4),
            (SKIP, 100),
            (SEQ_MATCH, 6),
            (SEQ_MISMATCH, 1),
            (HARD_CLIP, 2),
        ];
        let bytes = packed(&ops);
        let c = Cigar::new(&bytes);
        assert_eq!(c.len(), 8);
        assert_eq!(c.reference_length(), 116);
        assert_eq!(c.query_length(), 17);
        assert_eq!(c.ops().collect::<Vec<_>>(), ops);
        assert_eq!(c.ops().next_back(), Some((HARD_CLIP, 2)));
        assert_eq!(c.words().next(), Some(3 << 4 | 4));
        assert!(Cigar::new(&[]).is_empty());
        // Letters by code, as SAM text writes them.
        let text: Vec<u8> = c.ops().map(|(op, _)| OP_LETTERS[op as usize]).collect();
        assert_eq!(text, b"SMIDN=XH");
    }

    proptest! {
        /// The lengths are the sums of the lengths of the operations that
        /// consume each side (by the letter table), packing round-trips.
        #[test]
        fn lengths_sum_the_consuming_ops(
            ops in proptest::collection::vec((0u8..9, 0u32..(1 << 28)), 0..20)
        ) {
            let bytes = packed(&ops);
            let c = Cigar::new(&bytes);
            let sum = |letters: &[u8]| -> u64 {
                ops.iter()
                    .filter(|(op, _)| letters.contains(&OP_LETTERS[*op as usize]))
                    .map(|&(_, l)| u64::from(l))
                    .sum()
            };
            prop_assert_eq!(c.reference_length() as u64, sum(b"MDN=X"));
            prop_assert_eq!(c.query_length(), sum(b"MIS=X"));
            prop_assert_eq!(c.ops().collect::<Vec<_>>(), ops.clone());
            prop_assert_eq!(c.words().map(unpack).collect::<Vec<_>>(), ops);
        }
    }
}
