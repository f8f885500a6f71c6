//! Bounded allocation in the `cram` target: a length field of 2 GB must
//! not allocate it. A process of its own (this file), whose allocator
//! records the largest single allocation asked for.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const LIMIT: usize = 256 << 20;

/// `b"ACGT" * 250` compressed by Python's `bz2.compress(data, 9)`.
const BZIP2_ACGT_250: [u8; 48] = [
    0x42, 0x5a, 0x68, 0x39, 0x31, 0x41, 0x59, 0x26, 0x53, 0x59, 0xa2, 0x6e, 0xa9, 0x30, 0x00, 0x00,
    0x7c, 0x86, 0x00, 0x28, 0x80, 0x04, 0x00, 0x20, 0x00, 0x30, 0xcd, 0x34, 0x13, 0x54, 0x1d, 0x20,
    0xc9, 0x06, 0xc8, 0x3a, 0x41, 0xe2, 0xee, 0x48, 0xa7, 0x0a, 0x12, 0x14, 0x4d, 0xd5, 0x26, 0x00,
];

/// The same as an xz stream, by Python's `lzma.compress(data,
/// format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)`.
const XZ_ACGT_250: [u8; 76] = [
    0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0x00, 0x01, 0x69, 0x22, 0xde, 0x36, 0x02, 0x00, 0x21, 0x01,
    0x16, 0x00, 0x00, 0x00, 0x74, 0x2f, 0xe5, 0xa3, 0xe0, 0x03, 0xe7, 0x00, 0x0f, 0x5d, 0x00, 0x20,
    0x90, 0xc5, 0x0a, 0xbc, 0x42, 0xdd, 0x74, 0x31, 0x8a, 0xc1, 0xd1, 0x18, 0x05, 0x00, 0x00, 0x00,
    0xb1, 0xcb, 0xdd, 0x3c, 0x00, 0x01, 0x27, 0xe8, 0x07, 0x00, 0x00, 0x00, 0xf4, 0x55, 0x8f, 0x5c,
    0x3e, 0x30, 0x0d, 0x8b, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x59, 0x5a,
];

fn seed(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus/cram")
        .join(name);
    std::fs::read(p).expect("seed")
}

#[test]
fn huge_lengths_are_errors_without_huge_allocations() {
    let data = seed("seed-3.0-default");
    let starts = alnsort_fuzz_harness::cram_container_starts(&data);
    assert!(starts.len() >= 3, "{starts:?}");
    let mut checked = 0;
    // The header container (its padding is skipped, never allocated:
    // README finding 9) and the data containers.
    for &at in &starts {
        for len in [0x7fff_ffffu32, 0x8000_0000, 0xffff_fff0] {
            let mut d = data.clone();
            d[at..at + 4].copy_from_slice(&len.to_le_bytes());
            let d = alnsort_fuzz_harness::cram_reseal(&d);
            let o = alnsort_fuzz_harness::cram_outcome(&d);
            assert!(o.failed, "container at {at} with length {len:#x}: {o:?}");
            checked += 1;
        }
    }
    assert!(checked >= 9);
    // bzip2 and xz blocks claiming 1 GiB from a few dozen bytes (README
    // finding 10): errors, their buffers grown by what the stream gives.
    for (method, data) in [
        (alnsort_cram::codecs::method::BZIP2, &BZIP2_ACGT_250[..]),
        (alnsort_cram::codecs::method::LZMA, &XZ_ACGT_250[..]),
    ] {
        let block = alnsort_cram::RawBlock {
            method,
            content_type: 4,
            content_id: 1,
            raw_size: alnsort_cram::codecs::MAX_RAW_SIZE,
            data,
        };
        let mut dst = Vec::new();
        let mut scratch = alnsort_cram::codecs::CodecScratch::default();
        let e = alnsort_cram::codecs::decode_block(&block, &mut dst, &mut scratch)
            .expect_err("a claim of 1 GiB for 1000 bytes");
        assert!(e.to_string().contains("decoded to 1000 bytes"), "{e}");
    }
    // Mutants with 2 GB and -1 written over 4-byte fields anywhere.
    let mut state = 0x5851_f42d_4c95_7f2du64;
    for name in [
        "seed-3.0-default",
        "seed-3.1-default",
        "seed-3.1-archive",
        "seed-3.0-bzip2-lzma",
    ] {
        alnsort_fuzz_harness::cram_mutations(&seed(name), 150, &mut state);
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest < LIMIT, "an allocation of {largest} bytes");
}
