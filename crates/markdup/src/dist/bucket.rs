//! The buckets tasks exchange by: ends by library, barcodes and first 5'
//! end, halves by read group and name, hashed alike in every process.

use super::join::join_key;
use crate::ends::End;
use crate::hash::hash_bytes;

pub(crate) fn end_bucket_of(e: &End, buckets: usize) -> usize {
    let mut key = [0u8; 24];
    key[..2].copy_from_slice(&e.library.to_le_bytes());
    key[2..6].copy_from_slice(&e.barcode.to_le_bytes());
    key[6..10].copy_from_slice(&e.r1_barcode.to_le_bytes());
    key[10..14].copy_from_slice(&e.r2_barcode.to_le_bytes());
    key[14..18].copy_from_slice(&e.r1_ref.to_le_bytes());
    key[18..22].copy_from_slice(&e.r1_coord.to_le_bytes());
    (hash_bytes(&key, 0) % buckets as u64) as usize
}

/// The bucket of the ends whose library, barcodes and first 5' end are
/// these: a duplicate set (pair or fragment) shares them all.
pub fn end_bucket(
    library: i16,
    barcodes: (i32, i32, i32),
    ref_id: i32,
    five_prime: i32,
    buckets: usize,
) -> usize {
    let e = End {
        library,
        barcode: barcodes.0,
        r1_barcode: barcodes.1,
        r2_barcode: barcodes.2,
        orientation: 0,
        r1_ref: ref_id,
        r1_coord: five_prime,
        r2_ref: -1,
        r2_coord: -1,
        loc: crate::optical::Location::NONE,
        optical_orientation: -1,
        score: 0,
        r1_index: 0,
        r2_index: 0,
        pair: false,
    };
    end_bucket_of(&e, buckets)
}

/// The bucket of the halves of read group `rg` (its header position) and
/// name `name`.
pub fn name_bucket(rg: i16, name: &[u8], buckets: usize) -> usize {
    (join_key(rg, name) % buckets as u64) as usize
}
