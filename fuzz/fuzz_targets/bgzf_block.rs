//! libFuzzer entry for the `bgzf_block` target; the body is
//! `alnsort_fuzz_harness::bgzf_block` (see harness/src/lib.rs for what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alnsort_fuzz_harness::bgzf_block(data));
