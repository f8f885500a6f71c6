//! The arithmetic coder and fqzcomp through noodles-cram 0.102,
//! whose decoders are crate-private: the only public way in is a whole
//! container (`io::Reader::read_container`), its slices
//! (`Container::slices`) and `Slice::decode_blocks`. So one compressed
//! stream is wrapped as the core block of a one-block slice in a
//! one-slice container (a container header, a fixed slice header block,
//! then a block header with the stream's method, the stream, and its
//! CRC32) and decoded by noodles from there. A panic in noodles' decoders
//! is turned into an error.

use crate::error::DecodeError;
use crate::wire::{crc32, write_itf8};
use std::io;

/// The longest stream wrapped for noodles-cram.
const MAX_STREAM: usize = 1 << 30;

/// The raw slice header block: no reference (-1, 0, 0), 0 records,
/// counter 0, 1 block (id 0), no embedded reference, MD5 all zero.
fn slice_header_block() -> Vec<u8> {
    let mut data = vec![0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0, 1, 1, 0];
    data.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    data.extend_from_slice(&[0; 16]);
    let mut b = vec![0, crate::container::content_type::SLICE_HEADER, 0];
    write_itf8(&mut b, data.len() as u32);
    write_itf8(&mut b, data.len() as u32);
    b.extend_from_slice(&data);
    let crc = crc32(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// The wrapping buffers, reused.
#[derive(Default)]
pub(crate) struct Shim {
    body: Vec<u8>,
    file: Vec<u8>,
    container: Option<noodles_cram::io::reader::Container>,
}

impl Shim {
    /// Decodes `src`, compressed with block method `method`, into `dst`
    /// (replaced). `raw` is the uncompressed size (streams that store
    /// their own size ignore it; it must not be 0).
    pub(crate) fn decode(
        &mut self,
        method: u8,
        src: &[u8],
        raw: usize,
        dst: &mut Vec<u8>,
    ) -> io::Result<()> {
        let len = stream_len(src.len())?;
        let b = &mut self.body;
        b.clear();
        b.extend_from_slice(&slice_header_block());
        let start = b.len();
        b.extend_from_slice(&[method, crate::container::content_type::CORE, 0]);
        write_itf8(b, len);
        write_itf8(b, raw.max(1) as u32);
        b.extend_from_slice(src);
        let crc = crate::wire::crc32(&b[start..]);
        b.extend_from_slice(&crc.to_le_bytes());
        // Container header: length, no reference (-1, 0, 0), 0 records,
        // counter 0, 0 bases, 1 block, landmarks [0], CRC32.
        let f = &mut self.file;
        f.clear();
        f.extend_from_slice(&(self.body.len() as i32).to_le_bytes());
        f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0, 0, 1, 1, 0]);
        let crc = crate::wire::crc32(f);
        f.extend_from_slice(&crc.to_le_bytes());
        f.extend_from_slice(&self.body);
        let (file, container) = (
            &self.file[..],
            self.container.get_or_insert_with(Default::default),
        );
        let out = catch(|| {
            noodles_cram::io::Reader::new(file).read_container(container)?;
            let slice = container
                .slices()
                .next()
                .ok_or_else(|| DecodeError::NoSlice.io())??;
            let (core, _) = slice.decode_blocks()?;
            Ok(core.into_owned())
        })?;
        *dst = out;
        Ok(())
    }
}

/// A stream's length as the block header's ITF8, if noodles-cram takes
/// a stream that long.
fn stream_len(len: usize) -> io::Result<u32> {
    u32::try_from(len)
        .ok()
        .filter(|&l| (l as usize) < MAX_STREAM)
        .ok_or_else(|| {
            DecodeError::StreamTooLarge {
                len,
                max: MAX_STREAM - 1,
            }
            .io()
        })
}

/// `f`, with a panic inside noodles-cram made an error that says what to do.
pub(crate) fn catch<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "no message".to_string());
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            DecodeError::CodecPanicked { message },
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_too_large_is_a_typed_decode_error_naming_its_length() {
        assert_eq!(stream_len(100).expect("small"), 100);
        let e = stream_len(MAX_STREAM).expect_err("too large");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(matches!(
            DecodeError::of(&e),
            Some(DecodeError::StreamTooLarge { len, .. }) if *len == MAX_STREAM
        ));
        assert_eq!(
            e.to_string(),
            "a stream of 1073741824 bytes is too large for the noodles-cram decoder \
             (at most 1073741823)"
        );
    }

    #[test]
    fn no_slice_is_a_typed_decode_error() {
        let e = DecodeError::NoSlice.io();
        assert!(matches!(DecodeError::of(&e), Some(DecodeError::NoSlice)));
        assert!(e.to_string().contains("no slice"), "{e}");
    }

    #[test]
    fn a_panic_in_the_decoder_is_a_typed_error_keeping_its_message() {
        let e =
            catch(|| -> io::Result<()> { panic!("bad {} table", "fqzcomp") }).expect_err("caught");
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        let Some(DecodeError::CodecPanicked { message }) = DecodeError::of(&e) else {
            panic!("typed: {e:?}")
        };
        assert_eq!(message, "bad fqzcomp table");
        let text = e.to_string();
        assert!(text.contains("cannot decode (bad fqzcomp table)"), "{text}");
        assert!(text.contains("samtools view -O cram,version=3.0"), "{text}");
        let e = catch(|| -> io::Result<()> { panic!("static text") }).expect_err("caught");
        assert!(matches!(
            DecodeError::of(&e),
            Some(DecodeError::CodecPanicked { message }) if message == "static text"
        ));
    }
}
