//! libFuzzer entry for the `header` target; the body is
//! `alnsort_fuzz_harness::header` (see harness/src/lib.rs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alnsort_fuzz_harness::header(data));
