//! The aux (optional fields) area of a BAM record, SAM spec §4.2.4: each
//! field is a two-byte tag, a type byte and a value whose length the type
//! gives. [`Aux`] walks it (every walk of the workspace is this one,
//! checked: a field whose length cannot be read is an [`AuxError`] naming
//! the tag and its offset), finds a tag and reads typed values; the edits
//! (remove, insert, replace) are on [`crate::record::RecordMut`], which
//! keeps `block_size` right.

/// Why an aux field is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuxProblem {
    #[error("{0} trailing bytes, too few for a tag and a type")]
    Truncated(usize),
    #[error("tag {tag:?} has unknown type {ty:?}")]
    UnknownType { tag: String, ty: char },
    #[error("tag {tag:?} of type {ty:?} runs past the end of the record")]
    ValueOverrun { tag: String, ty: char },
    #[error("tag {tag:?} is a B array of unknown element type {sub:?}")]
    UnknownArrayType { tag: String, sub: char },
}

/// A malformed field: its offset in the aux area and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("aux field at aux byte {offset}: {problem}")]
pub struct AuxError {
    pub offset: usize,
    pub problem: AuxProblem,
}

/// Length in bytes of an aux value of type `ty` whose bytes start at `val`
/// (SAM spec §4.2.4). `None` when the type is unknown or the value runs past
/// the end of `val`.
#[inline]
pub fn value_len(ty: u8, val: &[u8]) -> Option<usize> {
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
            let sub = array_element_size(val[0])?;
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

/// Size of one element of a `B` array of subtype `sub` (`cCsSiIf`).
#[inline]
pub fn array_element_size(sub: u8) -> Option<usize> {
    match sub {
        b'c' | b'C' => Some(1),
        b's' | b'S' => Some(2),
        b'i' | b'I' | b'f' => Some(4),
        _ => None,
    }
}

/// The value of an integer of type `ty` (`cCsSiI`) whose bytes start `val`;
/// `None` for other types or too few bytes.
#[inline]
pub fn int_value(ty: u8, val: &[u8]) -> Option<i64> {
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

/// A borrowed aux area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aux<'a> {
    data: &'a [u8],
}

/// One field of an aux area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field<'a> {
    /// Offset of the field (its tag) in the aux area.
    pub offset: usize,
    pub tag: [u8; 2],
    /// The type byte (`AcCsSiIfdZHB`).
    pub ty: u8,
    /// The value's bytes as stored: a `Z`/`H` string with its NUL, a `B`
    /// array with its subtype and count.
    pub value: &'a [u8],
}

/// A field's value by its type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// `A`.
    Char(u8),
    /// `cCsSiI`.
    Int(i64),
    /// `f`.
    Float(f32),
    /// `d` (htslib's, not in the spec).
    Double(f64),
    /// `Z`, without its NUL.
    String(&'a [u8]),
    /// `H`, without its NUL.
    Hex(&'a [u8]),
    /// `B`: the element subtype and the elements' bytes (little-endian).
    Array { sub: u8, elements: &'a [u8] },
}

impl<'a> Field<'a> {
    /// The field's bytes in the aux area, tag and type included.
    #[inline]
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.end()
    }

    /// Offset just past the field.
    #[inline]
    pub fn end(&self) -> usize {
        self.offset + 3 + self.value.len()
    }

    /// The value of an integer field (`cCsSiI`).
    #[inline]
    pub fn int(&self) -> Option<i64> {
        int_value(self.ty, self.value)
    }

    /// The value of a `Z` string, without its NUL (htsjdk's
    /// `getStringAttribute`).
    #[inline]
    pub fn string(&self) -> Option<&'a [u8]> {
        (self.ty == b'Z').then(|| &self.value[..self.value.len() - 1])
    }

    /// The text of a `Z` or `H` field, without its NUL (samtools reads
    /// both with `bam_aux2Z`).
    #[inline]
    pub fn text(&self) -> Option<&'a [u8]> {
        matches!(self.ty, b'Z' | b'H').then(|| &self.value[..self.value.len() - 1])
    }

    /// The value by its type (the field was read by [`Aux::fields`], so its
    /// bytes are as long as the type says).
    pub fn value(&self) -> Value<'a> {
        let v = self.value;
        if let Some(x) = self.int() {
            return Value::Int(x);
        }
        match self.ty {
            b'A' => Value::Char(v[0]),
            b'f' => Value::Float(f32::from_le_bytes([v[0], v[1], v[2], v[3]])),
            b'd' => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&v[..8]);
                Value::Double(f64::from_le_bytes(b))
            }
            b'Z' => Value::String(&v[..v.len() - 1]),
            b'H' => Value::Hex(&v[..v.len() - 1]),
            b'B' => Value::Array {
                sub: v[0],
                elements: &v[5..],
            },
            ty => unreachable!("aux type {ty} passed value_len"),
        }
    }

    /// The elements of an integer `B` array (`cCsSiI`), `None` for another
    /// type or subtype.
    pub fn int_array(&self) -> Option<impl ExactSizeIterator<Item = i64> + 'a> {
        let Value::Array { sub, elements } = self.value() else {
            return None;
        };
        if !matches!(sub, b'c' | b'C' | b's' | b'S' | b'i' | b'I') {
            return None;
        }
        let size = array_element_size(sub)?;
        Some(
            elements
                .chunks_exact(size)
                .map(move |e| int_value(sub, e).expect("an integer subtype")),
        )
    }
}

impl<'a> Aux<'a> {
    #[inline]
    pub fn new(data: &'a [u8]) -> Self {
        Aux { data }
    }

    /// The area's bytes.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The fields in order; a field that cannot be read is an error, and
    /// the walk ends after it.
    #[inline]
    pub fn fields(&self) -> Fields<'a> {
        Fields {
            data: self.data,
            at: 0,
        }
    }

    /// Checks that every field can be read (a known type, a value within
    /// the area).
    pub fn validate(&self) -> Result<(), AuxError> {
        self.fields().try_for_each(|f| f.map(drop))
    }

    /// The first field with `tag` (htslib's `bam_aux_get`), among those
    /// before any field that cannot be read.
    #[inline]
    pub fn find(&self, tag: [u8; 2]) -> Option<Field<'a>> {
        self.fields().map_while(Result::ok).find(|f| f.tag == tag)
    }

    /// [`find`](Aux::find) for each of `tags`, in one pass: element `j`
    /// is what `find(tags[j])` returns. For keys that need several tags of
    /// every record.
    #[inline]
    pub fn find_each<const N: usize>(&self, tags: [[u8; 2]; N]) -> [Option<Field<'a>>; N] {
        let mut found = [None; N];
        let mut missing = N;
        for f in self.fields().map_while(Result::ok) {
            for (slot, tag) in found.iter_mut().zip(tags) {
                if slot.is_none() && f.tag == tag {
                    *slot = Some(f);
                    missing -= 1;
                }
            }
            if missing == 0 {
                break;
            }
        }
        found
    }
}

/// The fields of an [`Aux`] area ([`Aux::fields`]).
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, AuxError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let i = self.at;
        let rest = self.data.get(i..).filter(|r| !r.is_empty())?;
        if rest.len() < 3 {
            self.at = self.data.len();
            return Some(Err(AuxError {
                offset: i,
                problem: AuxProblem::Truncated(rest.len()),
            }));
        }
        let (tag, ty, val) = ([rest[0], rest[1]], rest[2], &rest[3..]);
        match value_len(ty, val) {
            Some(n) => {
                self.at = i + 3 + n;
                Some(Ok(Field {
                    offset: i,
                    tag,
                    ty,
                    value: &val[..n],
                }))
            }
            None => {
                self.at = self.data.len();
                Some(Err(AuxError {
                    offset: i,
                    problem: unreadable(tag, ty, val),
                }))
            }
        }
    }
}

/// Why a field of type `ty` with value bytes `val` has no length (only on
/// the error path: the walk allocates nothing).
#[cold]
fn unreadable(tag: [u8; 2], ty: u8, val: &[u8]) -> AuxProblem {
    let tag = String::from_utf8_lossy(&tag).into_owned();
    let ty_c = ty as char;
    match ty {
        b'A' | b'c' | b'C' | b's' | b'S' | b'i' | b'I' | b'f' | b'd' | b'Z' | b'H' => {
            AuxProblem::ValueOverrun { tag, ty: ty_c }
        }
        b'B' if val.len() >= 5 && array_element_size(val[0]).is_none() => {
            AuxProblem::UnknownArrayType {
                tag,
                sub: val[0] as char,
            }
        }
        b'B' => AuxProblem::ValueOverrun { tag, ty: ty_c },
        _ => AuxProblem::UnknownType { tag, ty: ty_c },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn value_lengths() {
        assert_eq!(value_len(b'Z', b"ab\0rest"), Some(3));
        assert_eq!(value_len(b'Z', b"ab"), None);
        assert_eq!(value_len(b'B', &[b's', 2, 0, 0, 0, 1, 0, 2, 0]), Some(9));
        assert_eq!(value_len(b'B', &[b's', 2, 0, 0, 0, 1, 0]), None);
        assert_eq!(value_len(b'q', &[0]), None);
        assert_eq!(value_len(b'd', &[0; 8]), Some(8));
    }

    #[test]
    fn fields_read_with_typed_values() {
        let mut a = b"NMc\xffRGZgrp\0XHHa1\0".to_vec();
        a.extend_from_slice(b"XfF");
        a.extend_from_slice(b"XFf");
        a.extend_from_slice(&1.5f32.to_le_bytes());
        a.extend_from_slice(b"XDd");
        a.extend_from_slice(&(-2.25f64).to_le_bytes());
        a.extend_from_slice(b"XAAq");
        a.extend_from_slice(b"CGBI\x02\0\0\0");
        a.extend_from_slice(&(5u32 << 4).to_le_bytes());
        a.extend_from_slice(&(7u32 << 4 | 1).to_le_bytes());
        a.extend_from_slice(b"XSS\x34\x12");
        // `XfF` is an unknown type: take it out before reading the rest.
        let bad_at = a.windows(3).position(|w| w == b"XfF").unwrap();
        let good: Vec<u8> = [&a[..bad_at], &a[bad_at + 3..]].concat();
        let aux = Aux::new(&good);
        let vals: Vec<([u8; 2], Value)> = aux
            .fields()
            .map(|f| f.map(|f| (f.tag, f.value())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            vals,
            vec![
                (*b"NM", Value::Int(-1)),
                (*b"RG", Value::String(b"grp")),
                (*b"XH", Value::Hex(b"a1")),
                (*b"XF", Value::Float(1.5)),
                (*b"XD", Value::Double(-2.25)),
                (*b"XA", Value::Char(b'q')),
                (
                    *b"CG",
                    Value::Array {
                        sub: b'I',
                        elements: &good[good.len() - 13..good.len() - 5]
                    }
                ),
                (*b"XS", Value::Int(0x1234)),
            ]
        );
        let cg = aux.find(*b"CG").unwrap();
        assert_eq!(
            cg.int_array().unwrap().collect::<Vec<_>>(),
            [5 << 4, 7 << 4 | 1]
        );
        assert_eq!(aux.find(*b"RG").unwrap().string(), Some(&b"grp"[..]));
        assert_eq!(aux.find(*b"XH").unwrap().string(), None);
        assert_eq!(aux.find(*b"XH").unwrap().text(), Some(&b"a1"[..]));
        assert_eq!(aux.find(*b"RG").unwrap().range(), 4..11);
        assert_eq!(aux.find(*b"ZZ"), None);
        assert_eq!(aux.validate(), Ok(()));
        // The unknown type stops the walk with an error naming it.
        let aux = Aux::new(&a);
        assert_eq!(
            aux.validate(),
            Err(AuxError {
                offset: bad_at,
                problem: AuxProblem::UnknownType {
                    tag: "Xf".into(),
                    ty: 'F'
                }
            })
        );
        assert_eq!(aux.find(*b"XD"), None);
    }

    #[test]
    fn errors_name_offset_and_tag() {
        let err = |a: &[u8]| Aux::new(a).validate().unwrap_err();
        assert_eq!(
            err(b"NMC\x01XZ"),
            AuxError {
                offset: 4,
                problem: AuxProblem::Truncated(2)
            }
        );
        assert_eq!(
            err(b"XBBq\x01\0\0\0\0").problem,
            AuxProblem::UnknownArrayType {
                tag: "XB".into(),
                sub: 'q'
            }
        );
        assert_eq!(
            err(b"XIi\x01\0").to_string(),
            "aux field at aux byte 0: tag \"XI\" of type 'i' runs past the end of the record"
        );
    }

    /// One field of any type, as (tag, type, value bytes).
    fn arb_field() -> impl Strategy<Value = ([u8; 2], u8, Vec<u8>)> {
        let tag = (b'A'..=b'Z', b'0'..=b'Z').prop_map(|(a, b)| [a, b]);
        let value = prop_oneof![
            (prop::sample::select(b"AcC".to_vec()), any::<u8>()).prop_map(|(t, b)| (t, vec![b])),
            (prop::sample::select(b"sS".to_vec()), any::<[u8; 2]>())
                .prop_map(|(t, b)| (t, b.to_vec())),
            (prop::sample::select(b"iIf".to_vec()), any::<[u8; 4]>())
                .prop_map(|(t, b)| (t, b.to_vec())),
            any::<[u8; 8]>().prop_map(|b| (b'd', b.to_vec())),
            (
                prop::sample::select(b"ZH".to_vec()),
                prop::collection::vec(1u8..=255, 0..8)
            )
                .prop_map(|(t, mut s)| {
                    s.push(0);
                    (t, s)
                }),
            (
                prop::sample::select(b"cCsSiIf".to_vec()),
                prop::collection::vec(any::<u8>(), 0..4)
            )
                .prop_map(|(sub, n)| {
                    let size = array_element_size(sub).unwrap();
                    let mut v = vec![sub];
                    v.extend_from_slice(&(n.len() as u32).to_le_bytes());
                    for x in &n {
                        v.extend(std::iter::repeat_n(*x, size));
                    }
                    (b'B', v)
                }),
        ];
        (tag, value).prop_map(|(tag, (ty, v))| (tag, ty, v))
    }

    proptest! {
        /// Fields written one after another read back in order with their
        /// offsets; `find` is the first with the tag; any cut short of the
        /// end is an error at the field it cuts.
        #[test]
        fn fields_read_back_and_cuts_are_errors(
            fields in prop::collection::vec(arb_field(), 0..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut area = Vec::new();
            let mut starts = Vec::new();
            for (tag, ty, v) in &fields {
                starts.push(area.len());
                area.extend_from_slice(tag);
                area.push(*ty);
                area.extend_from_slice(v);
            }
            let aux = Aux::new(&area);
            let read: Vec<Field> = aux.fields().collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(read.len(), fields.len());
            for ((f, (tag, ty, v)), at) in read.iter().zip(&fields).zip(&starts) {
                prop_assert_eq!((f.tag, f.ty, f.value, f.offset), (*tag, *ty, &v[..], *at));
            }
            for (tag, _, _) in &fields {
                let first = fields.iter().position(|(t, _, _)| t == tag).unwrap();
                prop_assert_eq!(aux.find(*tag).map(|f| f.offset), Some(starts[first]));
            }
            if !area.is_empty() {
                let len = cut.index(area.len());
                let short = Aux::new(&area[..len]);
                let cut_field = starts.iter().rposition(|&s| s <= len).unwrap();
                if starts[cut_field] < len {
                    let e = short.validate().unwrap_err();
                    prop_assert_eq!(e.offset, starts[cut_field]);
                } else {
                    prop_assert!(short.validate().is_ok());
                }
            }
        }
    }
}
