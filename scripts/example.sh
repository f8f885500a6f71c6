#!/usr/bin/env bash
# Sorts the shipped example (examples/example.sam: 200 paired reads over
# chr1, chr2, chrM with read groups, MC tags and unmapped reads) into
# $TMPDIR/example.sorted.bam with a CSI index, then prints the head of the
# result as SAM.
# Needs only a Rust toolchain (cargo) to build alnsort: no samtools, no Python.
# The build is the README's: `cargo build --locked --release`, into the same
# target/ directory that `cargo install --locked --path crates/cli` builds
# in, so after that install (or an earlier run) nothing is compiled again.
# ALNSORT_BIN=PATH runs that binary instead and builds nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n "${ALNSORT_BIN:-}" ]]; then
    bin="$ALNSORT_BIN"
    [[ -x "$bin" ]] || { echo "example.sh: ALNSORT_BIN=$bin is not an executable file" >&2; exit 1; }
else
    command -v cargo >/dev/null 2>&1 || { echo "example.sh: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
    cargo build --locked --release -p alnsort
    bin="${CARGO_TARGET_DIR:-$PWD/target}/release/alnsort"
fi

out_dir="${TMPDIR:-/tmp}"
out="$out_dir/example.sorted.bam"
"$bin" sort --write-index -o "$out" examples/example.sam
echo "wrote $out and $out.csi:"
ls -l "$out" "$out.csi"

# Round-trip the sorted BAM back to SAM text to show it (to a file, so that
# `head` closing the pipe early cannot fail the script).
sam="$out_dir/example.sorted.sam"
"$bin" sort -O SAM -o "$sam" "$out"
echo
echo "first lines of the sorted output:"
head -n 20 "$sam" | cut -c 1-160
