//! Prints a BAM record as the SAM line htslib 1.24's `sam_format1` prints,
//! so `-O SAM` output matches samtools byte for byte: `=` for a mate on the
//! same reference, upper-case bases from the 4-bit codes, `*` for absent
//! qualities (first byte 0xFF), integer tags as `i` whatever their stored
//! type, `f`/`d` tags with C's `%g`, and float B-array elements with
//! htslib's own `kputd` (which is *not* `%g` for every value).

use crate::header::Header;
use crate::RecordRef;

/// Appends one SAM line (with its `\n`) for `rec` to `out`. The record must
/// have passed `validate_record` for this header; a malformed aux area ends
/// the line early rather than panicking.
pub fn format_sam_record(rec: RecordRef, header: &Header, out: &mut Vec<u8>) {
    let name_raw =
        &rec.bytes()[crate::record::FIXED_LEN..crate::record::FIXED_LEN + rec.l_read_name()];
    // htslib prints l_read_name - 1 bytes, embedded NULs included.
    out.extend_from_slice(&name_raw[..name_raw.len().saturating_sub(1)]);
    out.push(b'\t');
    push_int(out, rec.flag() as i64);
    out.push(b'\t');
    push_ref(out, header, rec.ref_id());
    out.push(b'\t');
    // 64-bit positions of a record parsed with wide positions.
    let wide = crate::sam_parse::wide_positions(rec.bytes());
    let [pos, next_pos, tlen] =
        wide.unwrap_or([rec.pos() as i64, rec.next_pos() as i64, rec.tlen() as i64]);
    push_int(out, pos + 1);
    out.push(b'\t');
    push_int(out, rec.mapq() as i64);
    out.push(b'\t');
    // htslib's reader moves a CG:B:I CIGAR into place before printing.
    let cg = crate::validate::cg_cigar_field(rec);
    let cigar = match cg {
        Some((at, n)) => &rec.aux_bytes()[at + 8..at + 8 + 4 * n],
        None => rec.cigar_bytes(),
    };
    crate::cigar::Cigar::new(cigar).push_text(out);
    out.push(b'\t');
    if rec.next_ref_id() >= 0 && rec.next_ref_id() == rec.ref_id() {
        out.push(b'=');
    } else {
        push_ref(out, header, rec.next_ref_id());
    }
    out.push(b'\t');
    push_int(out, next_pos + 1);
    out.push(b'\t');
    push_int(out, tlen);
    out.push(b'\t');
    let l_seq = rec.l_seq();
    if l_seq == 0 {
        out.extend_from_slice(b"*\t*");
    } else {
        rec.push_bases(out);
        out.push(b'\t');
        let qual = rec.qual();
        if qual[0] == 0xff {
            out.push(b'*');
        } else {
            out.extend(qual.iter().map(|q| q.wrapping_add(33)));
        }
    }
    let aux = rec.aux_bytes();
    let aux = match wide {
        Some(_) => &aux[..aux.len() - crate::sam_parse::WIDE_FIELD_LEN],
        None => aux,
    };
    match cg {
        Some((at, n)) => {
            format_aux(&aux[..at], out);
            format_aux(&aux[at + 8 + 4 * n..], out);
        }
        None => format_aux(aux, out),
    }
    out.push(b'\n');
}

fn push_ref(out: &mut Vec<u8>, header: &Header, tid: i32) {
    match usize::try_from(tid).ok().and_then(|t| header.refs().get(t)) {
        Some(r) => out.extend_from_slice(&r.name),
        None => out.push(b'*'),
    }
}

/// Decimal integer, as htslib's `kputw`/`kputll`.
pub fn push_int(out: &mut Vec<u8>, v: i64) {
    let mut buf = [0u8; 20];
    let mut n = v.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[at..]);
}

/// htslib's aux loop (fields while at least 4 bytes remain: every field
/// of a valid record, the shortest being 4 bytes).
fn format_aux(aux: &[u8], out: &mut Vec<u8>) {
    for f in crate::Aux::new(aux).fields().map_while(Result::ok) {
        out.push(b'\t');
        out.extend_from_slice(&f.tag);
        out.push(b':');
        format_aux_value(f.ty, f.value, out);
    }
}

fn format_aux_value(ty: u8, v: &[u8], out: &mut Vec<u8>) {
    let int = |out: &mut Vec<u8>, x: i64| {
        out.extend_from_slice(b"i:");
        push_int(out, x);
    };
    if let Some(x) = crate::aux::int_value(ty, v) {
        return int(out, x);
    }
    match ty {
        b'A' => out.extend_from_slice(&[b'A', b':', v[0]]),
        b'f' => {
            out.extend_from_slice(b"f:");
            format_g(f32::from_le_bytes([v[0], v[1], v[2], v[3]]) as f64, out);
        }
        b'd' => {
            out.extend_from_slice(b"d:");
            let mut b = [0u8; 8];
            b.copy_from_slice(&v[..8]);
            format_g(f64::from_le_bytes(b), out);
        }
        b'Z' | b'H' => {
            out.extend_from_slice(&[ty, b':']);
            out.extend_from_slice(&v[..v.len() - 1]);
        }
        b'B' => format_b_array(v, out),
        _ => {}
    }
}

fn format_b_array(v: &[u8], out: &mut Vec<u8>) {
    let sub = v[0];
    out.extend_from_slice(&[b'B', b':', sub]);
    let size = match sub {
        b'c' | b'C' => 1,
        b's' | b'S' => 2,
        _ => 4,
    };
    for e in v[5..].chunks_exact(size) {
        out.push(b',');
        match sub {
            b'c' => push_int(out, e[0] as i8 as i64),
            b'C' => push_int(out, e[0] as i64),
            b's' => push_int(out, i16::from_le_bytes([e[0], e[1]]) as i64),
            b'S' => push_int(out, u16::from_le_bytes([e[0], e[1]]) as i64),
            b'i' => push_int(out, i32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64),
            b'I' => push_int(out, u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as i64),
            _ => kputd(f32::from_le_bytes([e[0], e[1], e[2], e[3]]) as f64, out),
        }
    }
}

/// C's `printf("%g", d)` as glibc prints it: 6 significant digits, exponent
/// form when the decimal exponent is < -4 or >= 6, trailing zeros and a bare
/// point removed, exponent with a sign and at least two digits.
pub fn format_g(d: f64, out: &mut Vec<u8>) {
    if d.is_nan() {
        out.extend_from_slice(if d.is_sign_negative() {
            b"-nan"
        } else {
            b"nan"
        });
        return;
    }
    if d.is_infinite() {
        out.extend_from_slice(if d < 0.0 { b"-inf" } else { b"inf" });
        return;
    }
    if d == 0.0 {
        out.extend_from_slice(if d.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    // Rust's `{:e}` with a precision rounds exactly, ties to even, as glibc.
    let e_form = format!("{:.5e}", d.abs());
    let (mantissa, exp) = e_form.split_once('e').unwrap_or((&e_form, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    if d < 0.0 {
        out.push(b'-');
    }
    if !(-4..6).contains(&exp) {
        let kept = strip_zeros(&digits[1..]);
        out.push(digits[0]);
        if !kept.is_empty() {
            out.push(b'.');
            out.extend_from_slice(kept);
        }
        out.extend_from_slice(
            format!("e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs()).as_bytes(),
        );
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        out.extend_from_slice(&digits[..int_len]);
        let frac = strip_zeros(&digits[int_len..]);
        if !frac.is_empty() {
            out.push(b'.');
            out.extend_from_slice(frac);
        }
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
        out.extend_from_slice(strip_zeros(&digits));
    }
}

fn strip_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().rposition(|&c| c != b'0').map_or(0, |p| p + 1);
    &d[..n]
}

/// htslib's `kputd` (kstring.c), used for `B:f` elements: values in
/// [0.0001, 999999] are scaled to a 6-digit integer with `rint` and printed
/// with trailing zeros cut; everything else goes to `%g`. Ported step by
/// step, because its rounding differs from `%g` near digit boundaries.
pub fn kputd(d: f64, out: &mut Vec<u8>) {
    if d == 0.0 {
        out.extend_from_slice(if d.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    let mut d = d;
    if d < 0.0 {
        out.push(b'-');
        d = -d;
    }
    if !(0.0001..=999999.0).contains(&d) {
        format_g(d, out);
        return;
    }
    // (scale, digits before buf end) exactly as the C `if` ladder.
    let ladder: [(f64, f64, usize); 10] = [
        (0.001, 1e9, 1),
        (0.01, 1e8, 2),
        (0.1, 1e7, 3),
        (1.0, 1e6, 4),
        (10.0, 1e5, 5),
        (100.0, 1e4, 6),
        (1000.0, 1e3, 7),
        (10000.0, 1e2, 8),
        (100000.0, 1e1, 9),
        (f64::INFINITY, 1.0, 10),
    ];
    let &(_, scale, shift) = ladder
        .iter()
        .find(|(limit, _, _)| d < *limit)
        .unwrap_or(&ladder[9]);
    let mut i = (d * scale).round_ties_even() as u32;
    // buf[0..32]; the C code's buf+20 is index END.
    const END: usize = 28;
    let mut buf = [0u8; 32];
    let mut cp = END - shift;
    for _ in 0..2 {
        cp -= 2;
        buf[cp..cp + 2].copy_from_slice(format!("{:02}", i % 100).as_bytes());
        i /= 100;
    }
    cp -= 2;
    buf[cp..cp + 2].copy_from_slice(format!("{:02}", i % 100).as_bytes());
    if i >= 100 {
        cp -= 1;
        buf[cp] = b'0' + (i / 100) as u8;
    }
    let mut p = END - cp;
    let mut ep;
    if p <= 10 {
        ep = cp + 5;
        while p < 10 {
            cp -= 1;
            buf[cp] = b'0';
            p += 1;
        }
        cp -= 1;
        buf[cp] = b'.';
        cp -= 1;
        buf[cp] = b'0';
    } else {
        cp -= 1;
        let mut xp = cp;
        ep = cp + 6;
        while p > 10 {
            buf[xp] = buf[xp + 1];
            xp += 1;
            p -= 1;
        }
        buf[xp] = b'.';
    }
    while buf[ep] == b'0' && ep > cp {
        ep -= 1;
    }
    if buf[ep] != 0 && buf[ep] != b'.' {
        ep += 1;
    }
    out.extend_from_slice(&buf[cp..ep]);
}

#[cfg(test)]
#[path = "sam_format_tests.rs"]
mod tests;
