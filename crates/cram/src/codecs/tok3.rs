//! The name tokeniser (CRAMcodecs §5, "tok3").

use super::CodecScratch;
use std::io;

/// Decodes a name-tokeniser stream into `dst`: the names, each ended by a NUL.
pub fn decode(src: &[u8], dst: &mut Vec<u8>, s: &mut CodecScratch) -> io::Result<()> {
    s.noodles.decode(super::method::TOK3, src, 1, dst)
}
