#!/bin/bash
# conda-build's build script for alnsort (bioconda's layout for a Rust
# tool): the licenses of the statically linked crates into THIRDPARTY.yml,
# then the binary into $PREFIX/bin with the versions in Cargo.lock.
set -euxo pipefail

cargo-bundle-licenses --format yaml --output "${SRC_DIR}/THIRDPARTY.yml"

# The C compiler builds libdeflate (libdeflate-sys, through the cc crate).
export CARGO_PROFILE_RELEASE_STRIP=symbols
cargo install --locked --no-track --verbose --root "${PREFIX}" --path crates/cli

# The man page and completions, where conda environments keep them.
mkdir -p "${PREFIX}/share/man/man1" "${PREFIX}/share/bash-completion/completions" \
    "${PREFIX}/share/zsh/site-functions" "${PREFIX}/share/fish/vendor_completions.d"
"${PREFIX}/bin/alnsort" generate man > "${PREFIX}/share/man/man1/alnsort.1"
"${PREFIX}/bin/alnsort" generate bash > "${PREFIX}/share/bash-completion/completions/alnsort"
"${PREFIX}/bin/alnsort" generate zsh > "${PREFIX}/share/zsh/site-functions/_alnsort"
"${PREFIX}/bin/alnsort" generate fish > "${PREFIX}/share/fish/vendor_completions.d/alnsort.fish"
