#!/usr/bin/env bash
# CI check for the fuzz targets (run from anywhere):
#  1. on stable Rust: replays the committed seed corpus and the crash
#     reproducers in regressions/ through the target bodies (cargo test);
#  2. builds the six libFuzzer targets: with `cargo fuzz build` (nightly,
#     sanitizer-instrumented) when cargo-fuzz and a nightly toolchain are
#     installed, otherwise a plain stable `cargo build` of the same binaries,
#     which proves they compile and link but does not instrument them.
# FUZZ_SECONDS=N additionally runs each target for N seconds (needs nightly).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
target_dir=${CARGO_TARGET_DIR:-$here/target}

echo "== replaying the corpus (stable)"
CARGO_TARGET_DIR=$target_dir cargo test --release --locked -p alnsort-fuzz-harness

targets=$(sed -n 's/^name = "\([a-z_0-9]*\)"$/\1/p' Cargo.toml | grep -v -e '^alnsort-fuzz$')
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== cargo fuzz build (nightly)"
    (cd .. && cargo +nightly fuzz build --target-dir "$target_dir/fuzz")
    if [ -n "${FUZZ_SECONDS:-}" ]; then
        for t in $targets; do
            echo "== fuzzing $t for ${FUZZ_SECONDS}s"
            scratch=$(mktemp -d)
            (cd .. && cargo +nightly fuzz run --target-dir "$target_dir/fuzz" "$t" "$scratch" "fuzz/corpus/$t" -- \
                -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1)
            rm -rf "$scratch"
        done
    fi
else
    echo "== cargo-fuzz or nightly not available: plain build of the targets (not instrumented)"
    CARGO_TARGET_DIR=$target_dir cargo build --release --locked --bins
fi
echo "fuzz check: OK ($(echo $targets | wc -w) targets)"
