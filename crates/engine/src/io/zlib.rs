//! zlib's deflate, loaded at run time (`libz.so.1`), for the index files
//! htslib compresses with it: a CSI's BGZF blocks and a `.crai`'s gzip
//! stream are zlib's level-6 output in samtools 1.24 (`bgzf_compress`,
//! `bgzf_open(fn, "wg")`), and another encoder's bytes, however valid, are
//! not the same file. Where the library cannot be loaded the caller falls
//! back to its own encoder (same content, other bytes).

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::sync::OnceLock;

/// zlib's `z_stream` (zlib.h), as laid out on LP64 and LLP64 alike for
/// these field types.
#[repr(C)]
struct ZStream {
    next_in: *const u8,
    avail_in: c_uint,
    total_in: c_ulong,
    next_out: *mut u8,
    avail_out: c_uint,
    total_out: c_ulong,
    msg: *const c_char,
    state: *mut c_void,
    zalloc: *const c_void,
    zfree: *const c_void,
    opaque: *mut c_void,
    data_type: c_int,
    adler: c_ulong,
    reserved: c_ulong,
}

type DeflateInit2 = unsafe extern "C" fn(
    *mut ZStream,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_char,
    c_int,
) -> c_int;
type Deflate = unsafe extern "C" fn(*mut ZStream, c_int) -> c_int;
type DeflateEnd = unsafe extern "C" fn(*mut ZStream) -> c_int;
type ZlibVersion = unsafe extern "C" fn() -> *const c_char;

/// zlib.h constants.
const Z_DEFLATED: c_int = 8;
const Z_PARTIAL_FLUSH: c_int = 1;
const Z_FINISH: c_int = 4;
const Z_OK: c_int = 0;
const Z_STREAM_END: c_int = 1;
const Z_DEFAULT_STRATEGY: c_int = 0;
/// `Z_DEFAULT_COMPRESSION`: htslib's level when none is asked for (zlib's 6).
const Z_DEFAULT_COMPRESSION: c_int = -1;
/// `MAX_MEM_LEVEL` default of `deflateInit` (`DEF_MEM_LEVEL`).
const DEF_MEM_LEVEL: c_int = 8;
/// The payload bytes htslib's BGZF writer gathers before it deflates
/// (`BGZF_BLOCK_SIZE`), in gzip mode too.
const BGZF_BLOCK_SIZE: usize = 0xff00;
/// Raw deflate (BGZF blocks) and gzip framing (15 + 16) window bits.
const RAW_WINDOW_BITS: c_int = -15;
const GZIP_WINDOW_BITS: c_int = 15 + 16;

/// The loaded library's entry points.
pub(crate) struct Zlib {
    init: DeflateInit2,
    deflate: Deflate,
    end: DeflateEnd,
    version: *const c_char,
}

// SAFETY: the fields are function pointers into a library that stays
// loaded for the life of the process (never dlclose'd) and a pointer to its
// static version string; zlib's deflate functions are reentrant on
// distinct streams.
unsafe impl Send for Zlib {}
// SAFETY: as for Send: nothing is mutated through a shared Zlib.
unsafe impl Sync for Zlib {}

/// An index file's bytes as samtools writes them: a BAI as is; a CSI's
/// BGZF blocks deflated by zlib where it loads, else by alnsort's own
/// encoder (the same content, other bytes).
pub(crate) fn index_file_bytes(index: &alnsort_index::IndexFile) -> Vec<u8> {
    match (index.is_bgzf(), zlib()) {
        (true, Some(z)) => alnsort_bgzf::compress_all_with(index.content(), |p| z.raw(p)),
        _ => index.file_bytes(),
    }
}

/// A `.crai`'s bytes as samtools writes them: the text's gzip stream by
/// zlib where it loads, else by alnsort's own encoder.
pub(crate) fn crai_bytes(text: &[u8]) -> Vec<u8> {
    zlib()
        .and_then(|z| z.gzip(text))
        .unwrap_or_else(|| alnsort_cram::crai::gzip(text))
}

/// The process's zlib, loaded on first use; `None` where it cannot be.
pub(crate) fn zlib() -> Option<&'static Zlib> {
    static ZLIB: OnceLock<Option<Zlib>> = OnceLock::new();
    ZLIB.get_or_init(load).as_ref()
}

fn load() -> Option<Zlib> {
    // SAFETY: dlopen gets a NUL-terminated name; the handle is kept for the
    // life of the process, so the symbols stay valid.
    let handle = unsafe { libc::dlopen(c"libz.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return None;
    }
    let sym = |name: &CStr| {
        // SAFETY: a live handle and a NUL-terminated symbol name.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let (init, deflate, end, version) = (
        sym(c"deflateInit2_")?,
        sym(c"deflate")?,
        sym(c"deflateEnd")?,
        sym(c"zlibVersion")?,
    );
    // SAFETY: the symbols are zlib's exported functions, whose C
    // signatures the types above repeat (zlib.h).
    unsafe {
        let version_fn: ZlibVersion = std::mem::transmute::<*mut c_void, ZlibVersion>(version);
        Some(Zlib {
            init: std::mem::transmute::<*mut c_void, DeflateInit2>(init),
            deflate: std::mem::transmute::<*mut c_void, Deflate>(deflate),
            end: std::mem::transmute::<*mut c_void, DeflateEnd>(end),
            version: version_fn(),
        })
    }
}

impl Zlib {
    /// `steps` deflated as one stream at zlib's default level with
    /// `window_bits` (raw or gzip framing): each step's input with its
    /// flush mode, the last one `Z_FINISH`. `None` if zlib fails.
    fn compress(&self, steps: &[(&[u8], c_int)], window_bits: c_int) -> Option<Vec<u8>> {
        let total: usize = steps.iter().map(|(d, _)| d.len()).sum();
        // deflateBound's worst case, generously: stored blocks, the flush
        // markers of every step and the headers.
        let cap = total + total / 1000 * 5 + 64 + 16 * steps.len();
        let mut out = vec![0u8; cap];
        let mut z = ZStream {
            next_in: std::ptr::null(),
            avail_in: 0,
            total_in: 0,
            next_out: out.as_mut_ptr(),
            avail_out: c_uint::try_from(cap).ok()?,
            total_out: 0,
            msg: std::ptr::null(),
            state: std::ptr::null_mut(),
            zalloc: std::ptr::null(),
            zfree: std::ptr::null(),
            opaque: std::ptr::null_mut(),
            data_type: 0,
            adler: 0,
            reserved: 0,
        };
        let size = std::mem::size_of::<ZStream>() as c_int;
        // SAFETY: `z` is a zeroed z_stream (null allocators: zlib's own)
        // of the size passed; the version string is zlib's own.
        let rc = unsafe {
            (self.init)(
                &mut z,
                Z_DEFAULT_COMPRESSION,
                Z_DEFLATED,
                window_bits,
                DEF_MEM_LEVEL,
                Z_DEFAULT_STRATEGY,
                self.version,
                size,
            )
        };
        if rc != Z_OK {
            return None;
        }
        let mut ok = true;
        for &(data, flush) in steps {
            let Ok(avail_in) = c_uint::try_from(data.len()) else {
                ok = false;
                break;
            };
            z.next_in = data.as_ptr();
            z.avail_in = avail_in;
            // SAFETY: the stream was initialised above; its input covers
            // `data` and its output the rest of `out`, both alive here.
            let rc = unsafe { (self.deflate)(&mut z, flush) };
            let want = if flush == Z_FINISH {
                Z_STREAM_END
            } else {
                Z_OK
            };
            if rc != want || z.avail_in != 0 {
                ok = false;
                break;
            }
        }
        let written = z.total_out as usize;
        // SAFETY: the initialised stream is ended once.
        unsafe { (self.end)(&mut z) };
        if !ok {
            return None;
        }
        out.truncate(written);
        Some(out)
    }

    /// Raw deflate of one BGZF block's payload, as htslib's `bgzf_compress`.
    pub(crate) fn raw(&self, payload: &[u8]) -> Option<Vec<u8>> {
        self.compress(&[(payload, Z_FINISH)], RAW_WINDOW_BITS)
    }

    /// A gzip stream of `data`, as htslib's `bgzf_open(fn, "wg")` writes
    /// it (`bgzf_gzip_compress`): each `BGZF_BLOCK_SIZE` bytes deflated
    /// with a partial flush, then an empty finish at the close.
    pub(crate) fn gzip(&self, data: &[u8]) -> Option<Vec<u8>> {
        let mut steps: Vec<(&[u8], c_int)> = data
            .chunks(BGZF_BLOCK_SIZE)
            .map(|c| (c, Z_PARTIAL_FLUSH))
            .collect();
        steps.push((&[], Z_FINISH));
        self.compress(&steps, GZIP_WINDOW_BITS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn zlib_round_trips_through_flate2() {
        let Some(z) = zlib() else {
            panic!("libz.so.1 cannot be loaded on this machine");
        };
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let gz = z.gzip(&data).unwrap_or_else(|| panic!("gzip failed"));
        // zlib's gzip header: no mtime, no extra flags at level 6, OS unix.
        assert_eq!(&gz[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut back)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, data);
        let raw = z
            .raw(&data[..1000])
            .unwrap_or_else(|| panic!("deflate failed"));
        let mut back = Vec::new();
        flate2::read::DeflateDecoder::new(&raw[..])
            .read_to_end(&mut back)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, &data[..1000]);
    }
}
