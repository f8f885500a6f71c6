//! libFuzzer entry for the `cram` target; the body is
//! `alnsort_fuzz_harness::cram` (see harness/src/lib.rs for what it checks).
//!
//! libfuzzer-sys's panic hook aborts on every panic, also one that is
//! caught. alnsort-cram runs noodles-cram's arithmetic and fqzcomp decoders
//! inside `catch_unwind` (`codecs/via_noodles.rs`) and makes their panics
//! errors, so a panic raised in noodles-cram's source unwinds to that catch
//! here too; any other panic (alnsort's own code, the harness's checks) still
//! goes to libFuzzer's hook, and a noodles panic that nothing catches still
//! aborts where libfuzzer-sys catches the unwinding body.
#![no_main]

use std::sync::Once;

fn let_noodles_panics_unwind() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_noodles = info
                .location()
                .is_some_and(|l| l.file().contains("/noodles-cram-"));
            if !in_noodles {
                fuzzer_hook(info);
            }
        }));
    });
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let_noodles_panics_unwind();
    alnsort_fuzz_harness::cram(data)
});
