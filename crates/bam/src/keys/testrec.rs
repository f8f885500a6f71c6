//! Test-only builder of BAM record bytes (SAM spec §4.2), so key tests can
//! make records with exactly the names, flags, CIGARs and aux tags they need
//! without going through a parser.

/// CIGAR op letters in BAM code order (`MIDNSHP=X` = 0..8).
pub(crate) const CIGAR_OPS: &[u8; 9] = b"MIDNSHP=X";

/// The fields of one record; `bytes()` lays them out.
#[derive(Clone, Debug)]
pub(crate) struct Rec {
    pub name: Vec<u8>,
    pub flag: u16,
    pub tid: i32,
    pub pos: i32,
    pub mapq: u8,
    pub cigar: Vec<(u8, u32)>,
    pub mtid: i32,
    pub mpos: i32,
    pub tlen: i32,
    pub aux: Vec<u8>,
}

impl Rec {
    /// An unplaced, unmapped record with no tags.
    pub fn new(name: &[u8]) -> Self {
        Rec {
            name: name.to_vec(),
            flag: 4,
            tid: -1,
            pos: -1,
            mapq: 0,
            cigar: Vec::new(),
            mtid: -1,
            mpos: -1,
            tlen: 0,
            aux: Vec::new(),
        }
    }

    pub fn at(mut self, tid: i32, pos: i32, flag: u16) -> Self {
        self.tid = tid;
        self.pos = pos;
        self.flag = flag;
        self
    }

    pub fn mate(mut self, mtid: i32, mpos: i32) -> Self {
        self.mtid = mtid;
        self.mpos = mpos;
        self
    }

    /// Sets the CIGAR from text such as `5S10M2H`.
    pub fn cigar(mut self, text: &str) -> Self {
        self.cigar = parse_cigar(text.as_bytes()).expect("test CIGAR");
        self
    }

    /// Appends a `Z` tag.
    pub fn z(mut self, tag: &[u8; 2], value: &[u8]) -> Self {
        self.aux.extend_from_slice(tag);
        self.aux.push(b'Z');
        self.aux.extend_from_slice(value);
        self.aux.push(0);
        self
    }

    /// Appends a tag with a raw type byte and value bytes.
    pub fn raw(mut self, tag: &[u8; 2], ty: u8, value: &[u8]) -> Self {
        self.aux.extend_from_slice(tag);
        self.aux.push(ty);
        self.aux.extend_from_slice(value);
        self
    }

    /// Query length implied by the CIGAR (M, I, S, =, X).
    fn query_len(&self) -> usize {
        crate::cigar::query_length(self.cigar.iter().copied()) as usize
    }

    /// The record bytes without the `block_size` prefix.
    pub fn bytes(&self) -> Vec<u8> {
        let l_seq = self.query_len();
        let mut v = Vec::with_capacity(64 + self.name.len() + self.aux.len());
        v.extend_from_slice(&self.tid.to_le_bytes());
        v.extend_from_slice(&self.pos.to_le_bytes());
        v.push((self.name.len() + 1) as u8);
        v.push(self.mapq);
        v.extend_from_slice(&0u16.to_le_bytes()); // bin: not used by keys
        v.extend_from_slice(&(self.cigar.len() as u16).to_le_bytes());
        v.extend_from_slice(&self.flag.to_le_bytes());
        v.extend_from_slice(&(l_seq as u32).to_le_bytes());
        v.extend_from_slice(&self.mtid.to_le_bytes());
        v.extend_from_slice(&self.mpos.to_le_bytes());
        v.extend_from_slice(&self.tlen.to_le_bytes());
        v.extend_from_slice(&self.name);
        v.push(0);
        for &(op, len) in &self.cigar {
            v.extend_from_slice(&(len << 4 | op as u32).to_le_bytes());
        }
        v.resize(v.len() + l_seq.div_ceil(2), 0x11); // all 'A'
        v.resize(v.len() + l_seq, 0xff);
        v.extend_from_slice(&self.aux);
        v
    }
}

/// Parses CIGAR text into `(op_code, len)`; `None` on anything malformed.
pub(crate) fn parse_cigar(text: &[u8]) -> Option<Vec<(u8, u32)>> {
    let mut ops = Vec::new();
    let mut num: u32 = 0;
    let mut have_num = false;
    for &c in text {
        if c.is_ascii_digit() {
            num = num.checked_mul(10)?.checked_add((c - b'0') as u32)?;
            have_num = true;
        } else {
            let op = CIGAR_OPS.iter().position(|&o| o == c)? as u8;
            if !have_num {
                return None;
            }
            ops.push((op, num));
            num = 0;
            have_num = false;
        }
    }
    if have_num {
        return None;
    }
    Some(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordRef;

    #[test]
    fn builder_round_trips_through_record_ref() {
        let bytes = Rec::new(b"q7")
            .at(2, 99, 0x53)
            .mate(1, 10)
            .cigar("2S3M1H")
            .z(b"MC", b"4M")
            .raw(b"XI", b'i', &(-5i32).to_le_bytes())
            .bytes();
        let r = RecordRef::new(&bytes);
        assert_eq!(r.read_name(), b"q7");
        assert_eq!((r.ref_id(), r.pos(), r.flag()), (2, 99, 0x53));
        assert_eq!((r.next_ref_id(), r.next_pos()), (1, 10));
        assert_eq!(
            r.cigar().ops().collect::<Vec<_>>(),
            vec![(4, 2), (0, 3), (5, 1)]
        );
        assert_eq!(r.l_seq(), 5);
        assert_eq!(
            r.aux().find(*b"MC").map(|f| (f.ty, f.value)),
            Some((b'Z', &b"4M\0"[..]))
        );
        assert_eq!(
            r.aux().find(*b"XI").map(|f| (f.ty, f.int())),
            Some((b'i', Some(-5)))
        );
    }

    #[test]
    fn cigar_parser_rejects_bad_text() {
        assert_eq!(parse_cigar(b"10M5S"), Some(vec![(0, 10), (4, 5)]));
        assert_eq!(parse_cigar(b""), Some(vec![]));
        assert_eq!(parse_cigar(b"M"), None);
        assert_eq!(parse_cigar(b"10"), None);
        assert_eq!(parse_cigar(b"10Q"), None);
    }
}
