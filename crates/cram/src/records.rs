//! CRAM records decoded from a slice's data series straight into BAM record
//! bytes (CRAM 3.0/3.1 §8-§10), as htslib 1.24's decoder gives them.
//!
//! The compression header ([`CompressionHeader::parse`],
//! `compression_header`) gives the preservation map (RN, AP, RR, SM, TD)
//! and the encodings of the data series and tags (`codec`);
//! [`SliceDecoder::decode`] (`slice`) walks a slice's core bit stream and
//! external blocks (`streams`) record by record, decodes each mapped
//! record's read features (`features`) and appends each record, framed by
//! its `block_size`, to the output buffer (`bam_record`). What htslib's
//! reader adds is added the same way: the bases of implicit reference
//! matches, MD/NM (`md_nm.rs`) after the stored tags and before an RG from
//! the read-group series, MAPQ 0 for unmapped records, the mate fields of
//! mates attached within the slice (flags, RNEXT/PNEXT and TLEN by
//! htslib's rule, `mates`), generated names when RN is not stored.

mod bam_record;
mod codec;
mod compression_header;
mod features;
mod mates;
mod slice;
mod streams;

pub(crate) use compression_header::CompressionHeader;
pub(crate) use slice::{FileInfo, SliceDecoder};

use crate::container::read_itf8;
use crate::error::RecordFault as Fault;
use std::io;

/// [`Fault::OutOfRange`] of `field`, `value` as read.
fn out_of_range(field: &'static str, value: impl TryInto<i64>) -> io::Error {
    let value = value.try_into().unwrap_or(i64::MAX);
    Fault::OutOfRange { field, value }.into()
}

/// Reads one ITF8 value (CRAM 3 §2.3) at `*at` of `buf`.
#[inline]
fn itf8(buf: &[u8], at: &mut usize) -> io::Result<i32> {
    let mut s = buf.get(*at..).unwrap_or_default();
    let v = read_itf8(&mut s)?;
    *at = buf.len() - s.len();
    Ok(v)
}

// The CRAM flags of a record (CF, CRAM 3 §8.4.2).
/// Quality scores stored as an array (QS for every base).
const CF_QUAL_ARRAY: i32 = 1;
/// The mate's fields are stored with the record (detached).
const CF_DETACHED: i32 = 2;
/// The mate is a later record of the slice (NF says which).
const CF_MATE_DOWNSTREAM: i32 = 4;
/// The record has no sequence (SEQ `*`).
const CF_NO_SEQ: i32 = 8;
/// TLEN is stored (TS) although the mate is attached.
const CF_EXPLICIT_TLEN: i32 = 16;

/// The record fault an error of the decoder carries.
#[cfg(test)]
fn fault(e: &io::Error) -> &Fault {
    match crate::error::DecodeError::of(e) {
        Some(crate::error::DecodeError::Record(f)) => f,
        _ => panic!("not a record fault: {e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itf8_reads_at_an_offset() {
        let mut at = 0;
        let b = [
            0x7f, 0x80, 0xff, 0xc1, 0x02, 0x03, 0xff, 0xff, 0xff, 0xff, 0x0f,
        ];
        assert_eq!(itf8(&b, &mut at).unwrap(), 0x7f);
        assert_eq!(itf8(&b, &mut at).unwrap(), 0xff);
        assert_eq!(itf8(&b, &mut at).unwrap(), 0x010203);
        assert_eq!(itf8(&b, &mut at).unwrap(), -1);
        assert_eq!(at, b.len());
        assert!(itf8(&[0xe0, 1], &mut 0).is_err());
    }
}
