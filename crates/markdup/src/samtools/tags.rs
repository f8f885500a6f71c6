//! The aux edits samtools markdup makes, with htslib's placement and types: `bam_aux_update_str`, `bam_aux_update_int`, `bam_aux_del`.

use alnsort_bam::record::RecordMut;
use alnsort_bam::sam_parse::{wide_positions, WIDE_FIELD_LEN};
use alnsort_bam::RecordRef;

/// Where htslib appends a new field: the aux area's end, before the SAM
/// parser's field of 64-bit positions when the record carries one (it
/// stays last, see `alnsort_bam::sam_parse::WIDE_TAG`).
fn append_at(rec: &[u8]) -> usize {
    let view = RecordRef::with_block_size(rec);
    let len = view.aux().len();
    if wide_positions(&rec[4..]).is_some() {
        len - WIDE_FIELD_LEN
    } else {
        len
    }
}

/// `bam_aux_update_str(b, tag, value)`: a field `tag` already there is
/// replaced where it stands (whatever its type: htslib refuses a non-`Z`
/// one, which samtools ignores, and the record then keeps it); otherwise
/// `tag:Z:value` is appended.
pub fn update_str(rec: &mut Vec<u8>, tag: [u8; 2], value: &[u8]) {
    let existing = RecordRef::with_block_size(rec)
        .aux()
        .find(tag)
        .map(|f| f.ty);
    if matches!(existing, Some(t) if t != b'Z') {
        return;
    }
    let at = append_at(rec);
    RecordMut::new(rec).set_string(tag, value, |_| at);
}

/// `bam_aux_update_int(b, tag, value)` for a value in 0..2^32: a new field
/// gets the smallest type htslib picks (`C` below 255, `S` below 65535,
/// else `I`: 255 is `S`); an integer field already there keeps its place
/// and, when wide enough, its size.
pub fn update_int(rec: &mut Vec<u8>, tag: [u8; 2], value: i64) {
    let (mut ty, mut size) = if value < 255 {
        (b'C', 1)
    } else if value < 65535 {
        (b'S', 2)
    } else {
        (b'I', 4)
    };
    let found = RecordRef::with_block_size(rec)
        .aux()
        .find(tag)
        .map(|f| (f.range(), f.ty));
    let at = match found {
        Some((range, old)) => {
            let old_size = match old {
                b'c' | b'C' => 1,
                b's' | b'S' => 2,
                b'i' | b'I' => 4,
                // Not an integer: htslib refuses, samtools carries on.
                _ => return,
            };
            if old_size >= size {
                size = old_size;
                ty = match size {
                    1 => b'C',
                    2 => b'S',
                    _ => b'I',
                };
            }
            RecordMut::new(rec).remove_aux_range(range.clone());
            range.start
        }
        None => append_at(rec),
    };
    let bytes = (value as u32).to_le_bytes();
    RecordMut::new(rec).insert_field(at, tag, ty, &bytes[..size]);
}

/// `bam_aux_del` of the first field `tag`, if any.
pub fn delete(rec: &mut Vec<u8>, tag: [u8; 2]) {
    RecordMut::new(rec).remove_tag(tag);
}

/// Sets or clears flag bits.
pub fn set_flag(rec: &mut Vec<u8>, flag: u16) {
    RecordMut::new(rec).set_flag(flag);
}

/// Replaces the read name (given without its NUL).
pub fn set_read_name(rec: &mut Vec<u8>, name: &[u8]) {
    let l_old = RecordRef::with_block_size(rec).l_read_name();
    let at = 4 + alnsort_bam::record::FIXED_LEN;
    let mut stored = name.to_vec();
    stored.push(0);
    rec.splice(at..at + l_old, stored.iter().copied());
    // l_read_name is byte 8 of the record (after block_size).
    rec[4 + 8] = stored.len() as u8;
    let block_size = (rec.len() - 4) as u32;
    rec[..4].copy_from_slice(&block_size.to_le_bytes());
}
