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
    // The data containers: the header container is read through
    // noodles-cram, which does not hold it to its length (README finding 9).
    for &at in &starts[1..] {
        for len in [0x7fff_ffffu32, 0x8000_0000, 0xffff_fff0] {
            let mut d = data.clone();
            d[at..at + 4].copy_from_slice(&len.to_le_bytes());
            let d = alnsort_fuzz_harness::cram_reseal(&d);
            let o = alnsort_fuzz_harness::cram_outcome(&d);
            assert!(o.failed, "container at {at} with length {len:#x}: {o:?}");
            checked += 1;
        }
    }
    assert!(checked >= 6);
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
