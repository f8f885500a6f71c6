//! The input ordinal appended to the record bytes the sorter carries with `--markdup`: its width, the bytes, and reading it back.

use crate::error::{Error, Result};

/// Bytes appended to each record while it is in the sorter.
pub const ORDINAL_BYTES: usize = 8;

/// The bytes appended to the record of input ordinal `ordinal`.
pub fn ordinal_suffix(ordinal: u64) -> [u8; ORDINAL_BYTES] {
    ordinal.to_le_bytes()
}

/// The ordinal a record carries through the sorter ([`ordinal_suffix`]).
pub fn record_ordinal(rec: &[u8]) -> Result<u64> {
    let Some(body_len) = rec.len().checked_sub(ORDINAL_BYTES) else {
        return Err(Error::Internal(
            "a record came back without its ordinal".to_string(),
        ));
    };
    let mut ord = [0u8; 8];
    ord.copy_from_slice(&rec[body_len..]);
    Ok(u64::from_le_bytes(ord))
}
