//! libFuzzer entry for the `sam_line` target; the body is
//! `alnsort_fuzz_harness::sam_line` (see harness/src/lib.rs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alnsort_fuzz_harness::sam_line(data));
