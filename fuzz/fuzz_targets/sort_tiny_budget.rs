//! libFuzzer entry for the `sort_tiny_budget` target; the body is
//! `alnsort_fuzz_harness::sort_tiny_budget` (see harness/src/lib.rs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alnsort_fuzz_harness::sort_tiny_budget(data));
