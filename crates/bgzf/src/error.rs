//! The one error type of the BGZF layer. Every reader-side variant names the
//! compressed byte offset of the block it is about, so a user can find the
//! damage with `dd`/`xxd` and the BAM layer can report where a bad record
//! sits; writer-side variants name the block index or the output offset.

use std::io;
use std::sync::Arc;

/// Result alias for this crate.
pub type Result<T, E = BgzfError> = std::result::Result<T, E>;

/// What went wrong while reading or writing BGZF data.
///
/// The type is `Clone` (the I/O source sits behind an `Arc`) so that a reader
/// or writer that has failed can hand the same error out again on every
/// later call instead of inventing a vaguer one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BgzfError {
    /// The gzip/BGZF header is malformed (magic, method, flags, extra field).
    #[error("BGZF block at byte offset {offset}: bad header: {reason}")]
    BadHeader { offset: u64, reason: &'static str },

    /// BSIZE is too small to hold the header and footer it claims.
    #[error(
        "BGZF block at byte offset {offset}: block size {size} is out of \
         range (must be {min}..=65536 bytes)"
    )]
    BlockSize {
        offset: u64,
        size: usize,
        min: usize,
    },

    /// The input ends inside a block.
    #[error(
        "BGZF block at byte offset {offset}: file ends mid-block (needs \
         {needed} bytes, only {available} present); the file is truncated"
    )]
    Truncated {
        offset: u64,
        needed: usize,
        available: usize,
    },

    /// The deflate data is corrupt.
    #[error("BGZF block at byte offset {offset}: deflate data is corrupt ({reason})")]
    Inflate { offset: u64, reason: &'static str },

    /// The inflated data does not match the CRC32 in the block footer.
    #[error(
        "BGZF block at byte offset {offset}: CRC32 mismatch (header says \
         {expected:#010x}, data gives {got:#010x})"
    )]
    Crc {
        offset: u64,
        expected: u32,
        got: u32,
    },

    /// The deflate data does not inflate to ISIZE bytes (or ISIZE > 65536).
    #[error(
        "BGZF block at byte offset {offset}: ISIZE mismatch (footer says \
         {expected} bytes, {got})"
    )]
    Isize {
        offset: u64,
        expected: u32,
        got: IsizeFound,
    },

    /// The stream does not end with the empty BGZF EOF block (SAM spec
    /// §4.1.2), from [`decompress_all`](crate::block::decompress_all), which
    /// checks a whole file. The streaming reader reads such a stream as
    /// samtools does and reports it instead
    /// ([`ParallelReader::missing_eof_block`](crate::reader::ParallelReader::missing_eof_block)).
    #[error(
        "BGZF stream ends at byte offset {offset} without the 28-byte EOF \
         block; the file is probably truncated"
    )]
    MissingEof { offset: u64 },

    /// Reading or writing the underlying stream failed.
    #[error("BGZF I/O error at byte offset {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: Arc<io::Error>,
    },

    /// A payload handed to the writer is empty or larger than
    /// [`MAX_PAYLOAD`](crate::block::MAX_PAYLOAD).
    #[error(
        "BGZF block {block_index}: payload of {len} bytes is invalid \
         (must be 1..={max} bytes)"
    )]
    PayloadSize {
        block_index: u64,
        len: usize,
        max: usize,
    },

    /// A worker (pool job or reader/writer thread) ended without delivering
    /// the result it owed; the block is never silently skipped.
    #[error("BGZF block at byte offset {offset}: {what} ended without a result")]
    WorkerLost { what: &'static str, offset: u64 },

    /// A kept block (see [`crate::kept`]) is not what the writer makes
    /// again for it: the kept output is not this output's start.
    #[error(
        "BGZF block {block_index} (at byte offset {offset} of the kept output): \
         the block made again differs from the one kept (CRC32 or length), so \
         the kept output is not the start of this output"
    )]
    KeptMismatch { block_index: u64, offset: u64 },

    /// The end given for a kept output cuts a block.
    #[error(
        "kept BGZF output: its end {end} falls inside the block at byte offset \
         {block}, which ends at {block_end}"
    )]
    KeptEnd {
        end: u64,
        block: u64,
        block_end: u64,
    },

    /// The writer's thread or a deflate job ended without a result.
    #[error("BGZF writer: a worker ended without a result at block {block_index}")]
    WriterLost { block_index: u64 },
}

/// What an ISIZE check found instead of the expected size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsizeFound {
    /// The deflate data inflates to this many bytes.
    Bytes(usize),
    /// The deflate data inflates to more bytes than ISIZE.
    More,
    /// ISIZE itself exceeds the 65536-byte BGZF limit.
    OverLimit,
}

impl std::fmt::Display for IsizeFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IsizeFound::Bytes(n) => write!(f, "data inflates to {n}"),
            IsizeFound::More => f.write_str("data inflates to more"),
            IsizeFound::OverLimit => f.write_str("which exceeds the 65536-byte limit"),
        }
    }
}

impl BgzfError {
    /// Wraps an I/O error with the byte offset at which it happened.
    pub fn io(offset: u64, source: io::Error) -> Self {
        BgzfError::Io {
            offset,
            source: Arc::new(source),
        }
    }

    /// The byte offset the error is about: the compressed offset of the bad
    /// block for reader errors, the output offset for writer I/O errors and
    /// the block index for [`BgzfError::PayloadSize`] and
    /// [`BgzfError::WriterLost`].
    pub fn offset(&self) -> u64 {
        match self {
            BgzfError::BadHeader { offset, .. }
            | BgzfError::BlockSize { offset, .. }
            | BgzfError::Truncated { offset, .. }
            | BgzfError::Inflate { offset, .. }
            | BgzfError::Crc { offset, .. }
            | BgzfError::Isize { offset, .. }
            | BgzfError::MissingEof { offset }
            | BgzfError::Io { offset, .. }
            | BgzfError::WorkerLost { offset, .. }
            | BgzfError::KeptMismatch { offset, .. } => *offset,
            BgzfError::KeptEnd { block, .. } => *block,
            BgzfError::PayloadSize { block_index, .. } | BgzfError::WriterLost { block_index } => {
                *block_index
            }
        }
    }
}

/// `Read`/`BufRead`/`Write` boundaries turn a [`BgzfError`] into an
/// `io::Error` that keeps the original as its inner error (recover it with
/// `io::Error::get_ref` + `downcast_ref`). I/O errors keep their kind so
/// that e.g. `BrokenPipe` stays recognisable; truncation maps to
/// `UnexpectedEof`; everything else is `InvalidData`.
impl From<BgzfError> for io::Error {
    fn from(err: BgzfError) -> io::Error {
        let kind = match &err {
            BgzfError::Io { source, .. } => source.kind(),
            BgzfError::Truncated { .. } | BgzfError::MissingEof { .. } => {
                io::ErrorKind::UnexpectedEof
            }
            BgzfError::PayloadSize { .. } => io::ErrorKind::InvalidInput,
            BgzfError::WorkerLost { .. } | BgzfError::WriterLost { .. } => io::ErrorKind::Other,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_message_is_human_readable() {
        let err = BgzfError::Crc {
            offset: 12345,
            expected: 0xdead_beef,
            got: 0x1234,
        };
        assert_eq!(
            err.to_string(),
            "BGZF block at byte offset 12345: CRC32 mismatch (header says \
             0xdeadbeef, data gives 0x00001234)"
        );
    }

    #[test]
    fn isize_message_says_what_was_found() {
        let err = BgzfError::Isize {
            offset: 7,
            expected: 10,
            got: IsizeFound::Bytes(9),
        };
        assert_eq!(
            err.to_string(),
            "BGZF block at byte offset 7: ISIZE mismatch (footer says 10 bytes, \
             data inflates to 9)"
        );
    }

    #[test]
    fn io_conversion_keeps_kind_and_inner_error() {
        let err = BgzfError::io(99, io::Error::new(io::ErrorKind::BrokenPipe, "pipe"));
        let io_err: io::Error = err.into();
        assert_eq!(io_err.kind(), io::ErrorKind::BrokenPipe);
        let inner = io_err.get_ref().and_then(|e| e.downcast_ref::<BgzfError>());
        assert_eq!(inner.map(BgzfError::offset), Some(99));
    }

    #[test]
    fn truncation_converts_to_unexpected_eof() {
        let err = BgzfError::Truncated {
            offset: 5,
            needed: 28,
            available: 3,
        };
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::UnexpectedEof);
    }
}
