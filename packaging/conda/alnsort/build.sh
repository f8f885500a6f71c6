#!/bin/bash
# conda-build's build script for alnsort (bioconda's layout for a Rust
# tool): the licenses of the statically linked crates into THIRDPARTY.yml,
# then the binary into $PREFIX/bin with the versions in Cargo.lock.
set -euxo pipefail

cargo-bundle-licenses --format yaml --output "${SRC_DIR}/THIRDPARTY.yml"

# The C compiler builds libdeflate (libdeflate-sys, through the cc crate).
export CARGO_PROFILE_RELEASE_STRIP=symbols
cargo install --locked --no-track --verbose --root "${PREFIX}" --path crates/cli
