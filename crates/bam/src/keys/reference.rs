//! Test-only comparators written straight from the samtools sort description
//! (`shared/reference/samtools-sort.md` §1.1-§1.7), deliberately without
//! sharing code with the key encoders, so the property tests can check
//! `sign(memcmp(key(a), key(b))) == reference_cmp(a, b)`.

use std::cmp::Ordering;

use super::{KeyError, SortOrder, TagSecondary};
use crate::RecordRef;

/// Everything a comparison needs besides the two records.
pub(crate) struct RefCtx<'a> {
    pub order: &'a SortOrder,
    pub libraries: &'a [(Vec<u8>, Vec<u8>)],
}

use super::minimiser::KEY_MASK;

/// Compares two records as samtools 1.24 does (input order excluded).
/// Template-coordinate records that samtools rejects give their error.
pub(crate) fn reference_cmp(
    ctx: &RefCtx<'_>,
    a: RecordRef<'_>,
    b: RecordRef<'_>,
) -> Result<Ordering, KeyError> {
    Ok(match ctx.order {
        SortOrder::Coordinate => cmp_coordinate(a, b),
        SortOrder::Name { natural } => cmp_name(*natural, a, b),
        SortOrder::Tag { tag, secondary } => cmp_tag(tag, a, b).then_with(|| match secondary {
            TagSecondary::Coordinate => cmp_coordinate(a, b),
            TagSecondary::Name { natural } => cmp_name(*natural, a, b),
        }),
        SortOrder::TemplateCoordinate => {
            let ka = TcKey::build(a, ctx.libraries)?;
            let kb = TcKey::build(b, ctx.libraries)?;
            ka.cmp_with(&kb)
        }
        // bam1_cmp_by_minhash on the values samtools stashes in the record.
        SortOrder::Minimiser(m) => {
            if a.ref_id() != -1 || b.ref_id() != -1 {
                cmp_coordinate(a, b)
            } else {
                let (ma, pa, ta) = m.stash(a);
                let (mb, pb, tb) = m.stash(b);
                let rev = |r: RecordRef<'_>, t: bool| (r.flag() & 0x10 != 0) != t;
                (ma & KEY_MASK)
                    .cmp(&(mb & KEY_MASK))
                    .then(pb.cmp(&pa))
                    .then(rev(a, ta).cmp(&rev(b, tb)))
            }
        }
    })
}

/// `strnum_cmp` (1.17+), §1.3: bytes unsigned, a C string's end reads as 0.
pub(crate) fn strnum_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let dig = |c: u8| c.is_ascii_digit();
    let (mut i, mut j) = (0, 0);
    while at(a, i) != 0 && at(b, j) != 0 {
        let (ca, cb) = (at(a, i), at(b, j));
        if !(dig(ca) && dig(cb)) {
            if ca != cb {
                return ca.cmp(&cb);
            }
            i += 1;
            j += 1;
            continue;
        }
        while at(a, i) == b'0' {
            i += 1;
        }
        while at(b, j) == b'0' {
            j += 1;
        }
        while dig(at(a, i)) && at(a, i) == at(b, j) {
            i += 1;
            j += 1;
        }
        let diff = (at(a, i) as i32) - (at(b, j) as i32);
        while dig(at(a, i)) && dig(at(b, j)) {
            i += 1;
            j += 1;
        }
        if dig(at(a, i)) {
            return Ordering::Greater;
        }
        if dig(at(b, j)) {
            return Ordering::Less;
        }
        if diff != 0 {
            return diff.cmp(&0);
        }
    }
    if at(a, i) != 0 {
        Ordering::Greater
    } else if at(b, j) != 0 {
        Ordering::Less
    } else {
        Ordering::Equal
    }
}

/// `bam1_cmp_core`, coordinate branch: tid, pos+1 and strand as uint64.
fn cmp_coordinate(a: RecordRef<'_>, b: RecordRef<'_>) -> Ordering {
    let k = |r: RecordRef<'_>| {
        (
            r.ref_id() as i64 as u64,
            (r.pos() as i64 + 1) as u64,
            (r.flag() & 0x10 != 0) as u64,
        )
    };
    k(a).cmp(&k(b))
}

/// `bam1_cmp_core`, name branch: `strnum_cmp` or `strcmp`, then `af - bf`.
fn cmp_name(natural: bool, a: RecordRef<'_>, b: RecordRef<'_>) -> Ordering {
    let by_name = if natural {
        strnum_cmp(a.read_name(), b.read_name())
    } else {
        a.read_name().cmp(b.read_name())
    };
    let fk = |f: u16| -> i32 {
        let f = f as i32;
        ((f & 0xc0) << 8) | ((f & 0x100) << 3) | ((f & 0x800) >> 3)
    };
    by_name.then_with(|| (fk(a.flag()) - fk(b.flag())).cmp(&0))
}

/// A decoded tag value, as `bam1_cmp_by_tag` sees it.
enum TagVal {
    Int(i64),
    Float(f64),
    Char(u8),
    Str(Vec<u8>),
    Array,
}

fn tag_val(tag: &[u8], r: RecordRef<'_>) -> Option<TagVal> {
    if tag.len() < 2 || tag[0] == 0 || tag[1] == 0 {
        return None;
    }
    let f = r.aux().find([tag[0], tag[1]])?;
    let (ty, v) = (f.ty, f.value);
    let le4 = |v: &[u8]| [v[0], v[1], v[2], v[3]];
    Some(match ty {
        b'c' => TagVal::Int(v[0] as i8 as i64),
        b'C' => TagVal::Int(v[0] as i64),
        b's' => TagVal::Int(i16::from_le_bytes([v[0], v[1]]) as i64),
        b'S' => TagVal::Int(u16::from_le_bytes([v[0], v[1]]) as i64),
        b'i' => TagVal::Int(i32::from_le_bytes(le4(v)) as i64),
        b'I' => TagVal::Int(u32::from_le_bytes(le4(v)) as i64),
        b'f' => TagVal::Float(f32::from_le_bytes(le4(v)) as f64),
        b'A' => TagVal::Char(v[0]),
        b'Z' | b'H' => TagVal::Str(v.iter().copied().take_while(|&c| c != 0).collect()),
        b'B' => TagVal::Array,
        other => panic!("test records carry no type {other}"),
    })
}

/// `bam1_cmp_by_tag` without the secondary key (`Equal` means "fall
/// through"). NaN is not modelled: samtools' answer there is not an order.
fn cmp_tag(tag: &[u8], a: RecordRef<'_>, b: RecordRef<'_>) -> Ordering {
    use TagVal::*;
    let rank = |v: &TagVal| match v {
        Char(_) => b'A',
        Array => b'B',
        Str(_) => b'H',
        Int(_) => b'c',
        Float(_) => b'f',
    };
    let fcmp = |x: f64, y: f64| {
        if x == y {
            Ordering::Equal
        } else if x < y {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    };
    match (tag_val(tag, a), tag_val(tag, b)) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => match (x, y) {
            (Int(p), Int(q)) => p.cmp(&q),
            (Int(p), Float(q)) => fcmp(p as f64, q),
            (Float(p), Int(q)) => fcmp(p, q as f64),
            (Float(p), Float(q)) => fcmp(p, q),
            (Char(p), Char(q)) => p.cmp(&q),
            (Str(p), Str(q)) => p.cmp(&q),
            (Array, Array) => Ordering::Equal,
            (x, y) => rank(&x).cmp(&rank(&y)),
        },
    }
}

/// `template_coordinate_key_t`, built per §1.7.
struct TcKey {
    tid1: i32,
    tid2: i32,
    pos1: i64,
    pos2: i64,
    neg1: bool,
    neg2: bool,
    library: Vec<u8>,
    cid: Vec<u8>,
    mid: Vec<u8>,
    name: Vec<u8>,
    upper: bool,
}

/// Splits CIGAR text into (number or 1, op byte or 0 at the end) pairs, the
/// way samtools' `strtol` walk sees them; stops at the end or at '*'.
fn cigar_tokens(s: &[u8]) -> Vec<(i64, u8)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() && s[i] != b'*' {
        let start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        let num = if i == start {
            1
        } else {
            std::str::from_utf8(&s[start..i])
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(i64::MAX)
        };
        let op = s.get(i).copied().unwrap_or(0);
        out.push((num, op));
        if op == 0 {
            break;
        }
        i += 1;
    }
    out
}

impl TcKey {
    fn build(r: RecordRef<'_>, libs: &[(Vec<u8>, Vec<u8>)]) -> Result<TcKey, KeyError> {
        let name = || String::from_utf8_lossy(r.read_name()).into_owned();
        let zstr = |tag: [u8; 2]| -> Option<Option<Vec<u8>>> {
            r.aux().find(tag).map(|f| (f.ty, f.value)).map(|(ty, v)| {
                (ty == b'Z' || ty == b'H')
                    .then(|| v.iter().copied().take_while(|&c| c != 0).collect())
            })
        };
        let flag = r.flag();
        let library = match r.aux().find(*b"RG").map(|f| (f.ty, f.value)) {
            Some((b'Z', v)) => {
                let id: Vec<u8> = v.iter().copied().take_while(|&c| c != 0).collect();
                libs.iter()
                    .find(|(i, _)| *i == id)
                    .map(|(_, lb)| lb.clone())
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        };
        let mut k = TcKey {
            tid1: i32::MAX,
            tid2: i32::MAX,
            pos1: ((i32::MAX as i64) << 32) | i32::MAX as i64,
            pos2: ((i32::MAX as i64) << 32) | i32::MAX as i64,
            neg1: false,
            neg2: false,
            library,
            cid: Vec::new(),
            mid: Vec::new(),
            name: r.read_name().to_vec(),
            upper: false,
        };
        let ops: Vec<(u8, u32)> = r.cigar().ops().collect();
        if flag & 0x4 == 0 {
            k.tid1 = r.ref_id();
            k.neg1 = flag & 0x10 != 0;
            // Soft clips count; hard clips are passed over (1.24).
            let lead: i64 = ops
                .iter()
                .take_while(|(o, _)| *o == 4 || *o == 5)
                .filter(|(o, _)| *o == 4)
                .map(|&(_, n)| n as i64)
                .sum();
            let trail: i64 = ops
                .iter()
                .rev()
                .take_while(|(o, _)| *o == 4 || *o == 5)
                .filter(|(o, _)| *o == 4)
                .map(|&(_, n)| n as i64)
                .sum();
            let rlen: i64 = ops
                .iter()
                .filter(|(o, _)| [0, 2, 3, 7, 8].contains(o))
                .map(|&(_, n)| n as i64)
                .sum();
            k.pos1 = if k.neg1 {
                r.pos() as i64 + rlen.max(1) + trail
            } else {
                r.pos() as i64 + 1 - lead
            };
        }
        if flag & 0x1 != 0 && flag & 0x8 == 0 {
            let mc = match zstr(*b"MC") {
                None => return Err(KeyError::MissingMateCigar { read_name: name() }),
                Some(None) => return Err(KeyError::MateCigarWrongType { read_name: name() }),
                Some(Some(mc)) => mc,
            };
            k.tid2 = r.next_ref_id();
            k.neg2 = flag & 0x20 != 0;
            let mpos = r.next_pos() as i64;
            let toks = cigar_tokens(&mc);
            k.pos2 = if k.neg2 {
                let mut refpos = 0i64;
                let mut seen_ref = false;
                for &(n, op) in &toks {
                    if b"MDN=X".contains(&op) && op != 0 {
                        refpos = refpos.wrapping_add(n);
                        seen_ref = true;
                    } else if op == b'S' && seen_ref {
                        refpos = refpos.wrapping_add(n);
                    }
                }
                mpos.wrapping_add(refpos)
            } else {
                let mut clipped = 0i64;
                for &(n, op) in &toks {
                    match op {
                        b'S' => clipped = clipped.wrapping_add(n),
                        b'H' => {}
                        _ => break,
                    }
                }
                mpos.wrapping_sub(clipped).wrapping_add(1)
            };
        }
        match zstr(*b"CB") {
            Some(None) => return Err(KeyError::CellBarcodeWrongType { read_name: name() }),
            Some(Some(v)) => k.cid = v,
            None => {}
        }
        match zstr(*b"MI") {
            Some(None) => return Err(KeyError::MolecularIdWrongType { read_name: name() }),
            Some(Some(v)) => k.mid = v,
            None => {}
        }
        let lower = k.tid1 < k.tid2
            || (k.tid1 == k.tid2 && k.pos1 < k.pos2)
            || (k.tid1 == k.tid2 && k.pos1 == k.pos2 && !k.neg1);
        if !lower {
            k.upper = true;
            (k.tid1, k.tid2) = (k.tid2, k.tid1);
            (k.pos1, k.pos2) = (k.pos2, k.pos1);
            (k.neg1, k.neg2) = (k.neg2, k.neg1);
        }
        Ok(k)
    }

    /// `bam1_cmp_template_coordinate` (tids compared as values, not by the
    /// overflowing subtraction).
    fn cmp_with(&self, o: &TcKey) -> Ordering {
        let neg = |x: bool, y: bool| match (x, y) {
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => Ordering::Equal,
        };
        self.tid1
            .cmp(&o.tid1)
            .then(self.tid2.cmp(&o.tid2))
            .then(self.pos1.cmp(&o.pos1))
            .then(self.pos2.cmp(&o.pos2))
            .then(neg(self.neg1, o.neg1))
            .then(neg(self.neg2, o.neg2))
            .then(self.library.cmp(&o.library))
            .then(self.cid.cmp(&o.cid))
            .then(cmp_mid(&self.mid, &o.mid))
            .then(self.name.cmp(&o.name))
            .then(self.upper.cmp(&o.upper))
    }
}

/// `template_coordinate_key_compare_mid`: drop a trailing "/X", compare as
/// signed chars (x86-64), a prefix first.
pub(crate) fn cmp_mid(a: &[u8], b: &[u8]) -> Ordering {
    let cut = |s: &[u8]| -> usize {
        if s.len() >= 2 && s[s.len() - 2] == b'/' {
            s.len() - 2
        } else {
            s.len()
        }
    };
    let (la, lb) = (cut(a), cut(b));
    let mut i = 0;
    while i < la.min(lb) && a[i] == b[i] {
        i += 1;
    }
    if i == la && i == lb {
        Ordering::Equal
    } else if i == la {
        Ordering::Less
    } else if i == lb {
        Ordering::Greater
    } else {
        (a[i] as i8).cmp(&(b[i] as i8))
    }
}
