//! One record's fields to the columns and back: the builders of a row
//! group ([`Columns`]) and the rows of a batch made BAM bytes again
//! ([`Rows`]).

use crate::schema::{self, col, TagKind, STD_TAGS};
use alnsort_bam::aux::Value;
use alnsort_bam::RecordRef;
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    StringDictionaryBuilder, StructBuilder, UInt16Builder, UInt8Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt16Type, UInt8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use std::sync::Arc;

/// The 4-bit base codes of BAM's SEQ (SAM spec §4.2.3).
const SEQ_CODES: &[u8; 16] = b"=ACMGRSVTWYHKDBN";
/// The CIGAR operations by BAM code (SAM spec §4.2.3).
const CIGAR_OPS: &[u8; 9] = b"MIDNSHP=X";

/// The builders of the rows not yet written.
pub struct Columns {
    qname: StringBuilder,
    flag: UInt16Builder,
    rname: StringDictionaryBuilder<Int32Type>,
    pos: Int32Builder,
    end: Int64Builder,
    mapq: UInt8Builder,
    cigar: StringBuilder,
    rnext: StringDictionaryBuilder<Int32Type>,
    pnext: Int32Builder,
    tlen: Int32Builder,
    seq: StringBuilder,
    qual: BinaryBuilder,
    bin: UInt16Builder,
    std_str: Vec<StringBuilder>,
    std_int: Vec<Int32Builder>,
    tags: ListBuilder<StructBuilder>,
    text: String,
    bases: Vec<u8>,
    rows: usize,
}

impl Default for Columns {
    fn default() -> Self {
        Self::new()
    }
}

/// Which builder of `std_str`/`std_int` a standard tag uses.
fn std_slot(i: usize) -> usize {
    let kind = STD_TAGS[i].kind;
    STD_TAGS[..i].iter().filter(|t| t.kind == kind).count()
}

impl Columns {
    pub fn new() -> Columns {
        let n_str = STD_TAGS
            .iter()
            .filter(|t| t.kind == TagKind::String)
            .count();
        let n_int = STD_TAGS.len() - n_str;
        let entry = StructBuilder::new(
            schema::tag_entry_fields(),
            vec![
                Box::new(StringBuilder::new()) as Box<dyn ArrayBuilder>,
                Box::new(StringBuilder::new()),
                Box::new(BinaryBuilder::new()),
            ],
        );
        Columns {
            qname: StringBuilder::new(),
            flag: UInt16Builder::new(),
            rname: StringDictionaryBuilder::new(),
            pos: Int32Builder::new(),
            end: Int64Builder::new(),
            mapq: UInt8Builder::new(),
            cigar: StringBuilder::new(),
            rnext: StringDictionaryBuilder::new(),
            pnext: Int32Builder::new(),
            tlen: Int32Builder::new(),
            seq: StringBuilder::new(),
            qual: BinaryBuilder::new(),
            bin: UInt16Builder::new(),
            std_str: (0..n_str).map(|_| StringBuilder::new()).collect(),
            std_int: (0..n_int).map(|_| Int32Builder::new()).collect(),
            tags: ListBuilder::new(entry).with_field(schema::tag_item_field()),
            text: String::new(),
            bases: Vec::new(),
            rows: 0,
        }
    }

    /// Rows pushed since the last [`Columns::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends one record (a valid BAM record, `block_size` included);
    /// `names` are the header's reference names. The error is the problem
    /// in words, for the caller to name the record.
    pub fn push(&mut self, rec: RecordRef<'_>, names: &[String]) -> Result<(), String> {
        let name_of = |id: i32| -> Result<Option<&str>, String> {
            if id < 0 {
                return Ok(None);
            }
            names
                .get(id as usize)
                .map(|s| Some(s.as_str()))
                .ok_or_else(|| format!("reference id {id} is not in the header"))
        };
        let qname = std::str::from_utf8(rec.read_name())
            .map_err(|_| "the read name is not UTF-8 text".to_string())?;
        if rec.l_read_name() != qname.len() + 1 {
            return Err(format!(
                "l_read_name is {} for a name of {} bytes (NUL padding is not kept)",
                rec.l_read_name(),
                qname.len()
            ));
        }
        self.qname.append_value(qname);
        self.flag.append_value(rec.flag());
        match name_of(rec.ref_id())? {
            Some(n) => self.rname.append_value(n),
            None => self.rname.append_null(),
        }
        self.pos.append_value(rec.pos().wrapping_add(1));
        self.end.append_value(rec.end_pos());
        self.mapq.append_value(rec.mapq());
        if rec.n_cigar_op() == 0 {
            self.cigar.append_null();
        } else {
            self.text.clear();
            for (op, len) in rec.cigar().ops() {
                let c = *CIGAR_OPS
                    .get(op as usize)
                    .ok_or_else(|| format!("CIGAR operation code {op} is not one of MIDNSHP=X"))?;
                self.text.push_str(&len.to_string());
                self.text.push(c as char);
            }
            self.cigar.append_value(&self.text);
        }
        match name_of(rec.next_ref_id())? {
            Some(n) => self.rnext.append_value(n),
            None => self.rnext.append_null(),
        }
        self.pnext.append_value(rec.next_pos().wrapping_add(1));
        self.tlen.append_value(rec.tlen());
        let l_seq = rec.l_seq();
        if l_seq == 0 {
            self.seq.append_null();
            self.qual.append_null();
        } else {
            let packed = rec.seq_bytes();
            if l_seq % 2 == 1 && packed[l_seq / 2] & 0x0f != 0 {
                return Err("the unused low half of the last SEQ byte is not zero".into());
            }
            self.bases.clear();
            rec.push_bases(&mut self.bases);
            self.seq
                .append_value(std::str::from_utf8(&self.bases).expect("bases are ASCII letters"));
            let qual = rec.qual();
            if qual.iter().all(|&q| q == 0xff) {
                self.qual.append_null();
            } else {
                self.qual.append_value(qual);
            }
        }
        self.bin.append_value(rec.bin());
        self.push_tags(rec)?;
        self.rows += 1;
        Ok(())
    }

    fn push_tags(&mut self, rec: RecordRef<'_>) -> Result<(), String> {
        let mut taken = [false; STD_TAGS.len()];
        for field in rec.aux().fields() {
            let field = field.map_err(|e| e.to_string())?;
            let std = STD_TAGS
                .iter()
                .position(|t| t.tag == field.tag)
                .filter(|&i| !taken[i]);
            let typed = std.is_some_and(|i| match STD_TAGS[i].kind {
                TagKind::String => {
                    matches!(field.value(), Value::String(s) if std::str::from_utf8(s).is_ok())
                }
                TagKind::Int => field.int().is_some_and(|v| i32::try_from(v).is_ok()),
            });
            let entry = self.tags.values();
            let tag = String::from_utf8_lossy(&field.tag);
            if !field.tag.iter().all(u8::is_ascii_alphanumeric) {
                return Err(format!("tag {tag:?} is not two letters or digits"));
            }
            entry
                .field_builder::<StringBuilder>(0)
                .expect("tag builder")
                .append_value(tag);
            entry
                .field_builder::<StringBuilder>(1)
                .expect("type builder")
                .append_value((field.ty as char).to_string());
            let values = entry
                .field_builder::<BinaryBuilder>(2)
                .expect("value builder");
            if let (true, Some(i)) = (typed, std) {
                // The value lives in the tag's own column; the entry keeps
                // its place and its type.
                values.append_null();
                taken[i] = true;
                let slot = std_slot(i);
                match field.value() {
                    Value::String(s) => self.std_str[slot]
                        .append_value(std::str::from_utf8(s).expect("checked UTF-8")),
                    _ => self.std_int[slot].append_value(
                        i32::try_from(field.int().expect("checked integer"))
                            .expect("checked range"),
                    ),
                }
            } else {
                let v = match field.ty {
                    b'Z' | b'H' => &field.value[..field.value.len() - 1],
                    _ => field.value,
                };
                values.append_value(v);
            }
            entry.append(true);
        }
        for (i, t) in STD_TAGS.iter().enumerate() {
            if !taken[i] {
                let slot = std_slot(i);
                match t.kind {
                    TagKind::String => self.std_str[slot].append_null(),
                    TagKind::Int => self.std_int[slot].append_null(),
                }
            }
        }
        self.tags.append(true);
        Ok(())
    }

    /// The rows pushed as a batch of the dataset's schema; the builders
    /// start again empty.
    pub fn finish(&mut self) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.qname.finish()),
            Arc::new(self.flag.finish()),
            Arc::new(self.rname.finish()),
            Arc::new(self.pos.finish()),
            Arc::new(self.end.finish()),
            Arc::new(self.mapq.finish()),
            Arc::new(self.cigar.finish()),
            Arc::new(self.rnext.finish()),
            Arc::new(self.pnext.finish()),
            Arc::new(self.tlen.finish()),
            Arc::new(self.seq.finish()),
            Arc::new(self.qual.finish()),
            Arc::new(self.bin.finish()),
        ];
        for (i, t) in STD_TAGS.iter().enumerate() {
            let slot = std_slot(i);
            cols.push(match t.kind {
                TagKind::String => Arc::new(self.std_str[slot].finish()),
                TagKind::Int => Arc::new(self.std_int[slot].finish()),
            });
        }
        cols.push(Arc::new(self.tags.finish()));
        self.rows = 0;
        RecordBatch::try_new(schema::schema(), cols)
    }
}

/// Checks that BATCH has every column of the schema with its type; the
/// error names each one missing or of another type.
pub fn check_columns(batch_schema: &arrow_schema::Schema) -> Result<(), String> {
    let want = schema::schema();
    let mut missing = Vec::new();
    for f in want.fields() {
        match batch_schema.field_with_name(f.name()) {
            Err(_) => missing.push(format!("column {:?}", f.name())),
            Ok(have) if !types_match(have.data_type(), f.data_type()) => missing.push(format!(
                "column {:?} of type {} (found {})",
                f.name(),
                f.data_type(),
                have.data_type()
            )),
            Ok(_) => {}
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(", "))
    }
}

/// Equal types, with the names and nullability of nested fields ignored
/// (a writer other than arrow-rs may name a list's item differently).
fn types_match(a: &arrow_schema::DataType, b: &arrow_schema::DataType) -> bool {
    use arrow_schema::DataType as D;
    match (a, b) {
        (D::List(x), D::List(y)) => types_match(x.data_type(), y.data_type()),
        (D::Struct(x), D::Struct(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| p.name() == q.name() && types_match(p.data_type(), q.data_type()))
        }
        _ => a == b,
    }
}

/// Reference ids of a dictionary column's values, by the header's names.
fn dict_ids(
    array: &dyn Array,
    lookup: &dyn Fn(&str) -> Option<i32>,
) -> Result<(Vec<i32>, Vec<i32>), String> {
    let dict = array.as_dictionary::<Int32Type>();
    let values = dict.values().as_string::<i32>();
    let mut ids = Vec::with_capacity(values.len());
    for i in 0..values.len() {
        let name = values.value(i);
        ids.push(lookup(name).unwrap_or(-2));
    }
    let keys: Vec<i32> = (0..dict.len())
        .map(|r| {
            if dict.is_null(r) {
                -1
            } else {
                dict.keys().value(r)
            }
        })
        .collect();
    let names: Vec<i32> = keys
        .iter()
        .map(|&k| if k < 0 { -1 } else { ids[k as usize] })
        .collect();
    if let Some(r) = names.iter().position(|&id| id == -2) {
        let k = keys[r] as usize;
        return Err(format!(
            "reference {:?} is not in the header (row {r} of the batch)",
            values.value(k)
        ));
    }
    Ok((names, keys))
}

/// The rows of one batch made BAM record bytes (`block_size` included)
/// appended to OUT. `lookup` maps a reference name to its id. The error
/// is (row in the batch, problem).
pub fn rows_to_records(
    batch: &RecordBatch,
    lookup: &dyn Fn(&str) -> Option<i32>,
    out: &mut Vec<u8>,
) -> Result<usize, (usize, String)> {
    let c = |name: &str| batch.column_by_name(name).expect("checked columns");
    let qname = c(col::QNAME).as_string::<i32>();
    let flag = c(col::FLAG).as_primitive::<UInt16Type>();
    let (rname, _) = dict_ids(c(col::RNAME).as_ref(), lookup).map_err(|e| (0, e))?;
    let pos = c(col::POS).as_primitive::<Int32Type>();
    let mapq = c(col::MAPQ).as_primitive::<UInt8Type>();
    let cigar = c(col::CIGAR).as_string::<i32>();
    let (rnext, _) = dict_ids(c(col::RNEXT).as_ref(), lookup).map_err(|e| (0, e))?;
    let pnext = c(col::PNEXT).as_primitive::<Int32Type>();
    let tlen = c(col::TLEN).as_primitive::<Int32Type>();
    let seq = c(col::SEQ).as_string::<i32>();
    let qual = c(col::QUAL).as_binary::<i32>();
    let bin = c(col::BIN).as_primitive::<UInt16Type>();
    let std_cols: Vec<&ArrayRef> = STD_TAGS.iter().map(|t| c(t.column)).collect();
    let tags = c(col::TAGS).as_list::<i32>();
    let entries = tags.values().as_struct();
    let e_tag = entries.column(0).as_string::<i32>();
    let e_type = entries.column(1).as_string::<i32>();
    let e_value = entries.column(2).as_binary::<i32>();
    let mut cigar_words: Vec<u32> = Vec::new();
    for r in 0..batch.num_rows() {
        let start = out.len();
        let err = |p: String| (r, p);
        let name = qname.value(r).as_bytes();
        if name.len() + 1 > 255 {
            return Err(err("the read name is longer than 254 bytes".into()));
        }
        cigar_words.clear();
        if cigar.is_valid(r) {
            let mut len: u64 = 0;
            for &b in cigar.value(r).as_bytes() {
                if b.is_ascii_digit() {
                    len = len * 10 + u64::from(b - b'0');
                    if len >= 1 << 28 {
                        return Err(err("a CIGAR operation is too long".into()));
                    }
                } else {
                    let op = CIGAR_OPS
                        .iter()
                        .position(|&o| o == b)
                        .ok_or_else(|| err(format!("CIGAR operation {:?}", b as char)))?;
                    cigar_words.push(alnsort_bam::cigar::pack(op as u8, len as u32));
                    len = 0;
                }
            }
        }
        let bases = if seq.is_valid(r) {
            seq.value(r).as_bytes()
        } else {
            &[]
        };
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&rname[r].to_le_bytes());
        out.extend_from_slice(&pos.value(r).wrapping_sub(1).to_le_bytes());
        out.push((name.len() + 1) as u8);
        out.push(mapq.value(r));
        out.extend_from_slice(&bin.value(r).to_le_bytes());
        let n_cigar = u16::try_from(cigar_words.len())
            .map_err(|_| err("more than 65535 CIGAR operations".into()))?;
        out.extend_from_slice(&n_cigar.to_le_bytes());
        out.extend_from_slice(&flag.value(r).to_le_bytes());
        out.extend_from_slice(&(bases.len() as u32).to_le_bytes());
        out.extend_from_slice(&rnext[r].to_le_bytes());
        out.extend_from_slice(&pnext.value(r).wrapping_sub(1).to_le_bytes());
        out.extend_from_slice(&tlen.value(r).to_le_bytes());
        out.extend_from_slice(name);
        out.push(0);
        for w in &cigar_words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for pair in bases.chunks(2) {
            let code = |b: u8| {
                SEQ_CODES
                    .iter()
                    .position(|&c| c == b)
                    .map(|p| p as u8)
                    .ok_or_else(|| err(format!("base {:?} in SEQ", b as char)))
            };
            let hi = code(pair[0])?;
            let lo = match pair.get(1) {
                Some(&b) => code(b)?,
                None => 0,
            };
            out.push(hi << 4 | lo);
        }
        if qual.is_valid(r) {
            let q = qual.value(r);
            if q.len() != bases.len() {
                return Err(err(format!(
                    "{} qualities for {} bases",
                    q.len(),
                    bases.len()
                )));
            }
            out.extend_from_slice(q);
        } else {
            out.resize(out.len() + bases.len(), 0xff);
        }
        let range = tags.value_offsets()[r] as usize..tags.value_offsets()[r + 1] as usize;
        for e in range {
            let tag = e_tag.value(e).as_bytes();
            let ty = e_type.value(e).as_bytes();
            if tag.len() != 2 || ty.len() != 1 {
                return Err(err(format!(
                    "tag entry {:?}:{:?} is not a two-letter tag and a one-letter type",
                    e_tag.value(e),
                    e_type.value(e)
                )));
            }
            out.extend_from_slice(tag);
            out.push(ty[0]);
            if e_value.is_valid(e) {
                out.extend_from_slice(e_value.value(e));
                if matches!(ty[0], b'Z' | b'H') {
                    out.push(0);
                }
                continue;
            }
            let i = STD_TAGS
                .iter()
                .position(|t| t.tag == tag)
                .ok_or_else(|| err(format!("tag {:?} has no value", e_tag.value(e))))?;
            let column = std_cols[i];
            if column.is_null(r) {
                return Err(err(format!(
                    "tag {:?} has no value in column {}",
                    e_tag.value(e),
                    STD_TAGS[i].column
                )));
            }
            match STD_TAGS[i].kind {
                TagKind::String => {
                    out.extend_from_slice(column.as_string::<i32>().value(r).as_bytes());
                    out.push(0);
                }
                TagKind::Int => {
                    let v = column.as_primitive::<Int32Type>().value(r);
                    push_int(out, ty[0], v).map_err(err)?;
                }
            }
        }
        let block = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&block.to_le_bytes());
    }
    Ok(batch.num_rows())
}

/// V written as an integer of BAM type TY (`cCsSiI`).
fn push_int(out: &mut Vec<u8>, ty: u8, v: i32) -> Result<(), String> {
    let bad = || format!("value {v} does not fit type {:?}", ty as char);
    match ty {
        b'c' => out.push(i8::try_from(v).map_err(|_| bad())? as u8),
        b'C' => out.push(u8::try_from(v).map_err(|_| bad())?),
        b's' => out.extend_from_slice(&i16::try_from(v).map_err(|_| bad())?.to_le_bytes()),
        b'S' => out.extend_from_slice(&u16::try_from(v).map_err(|_| bad())?.to_le_bytes()),
        b'i' => out.extend_from_slice(&v.to_le_bytes()),
        b'I' => out.extend_from_slice(&u32::try_from(v).map_err(|_| bad())?.to_le_bytes()),
        _ => {
            return Err(format!(
                "an integer column holds a value of type {:?}",
                ty as char
            ))
        }
    }
    Ok(())
}
