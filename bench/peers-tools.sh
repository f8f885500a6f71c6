#!/usr/bin/env bash
# Builds the peers of bench/peers.py from crates.io, at pinned versions, into
# .tools/peers/bin: mako (Fulcrum Genomics' sorter, crate fg-mako) and
# dupblaster (their duplicate marker). samblaster and samtools come from the
# distribution (Debian: apt-get install samtools samblaster).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MAKO_VERSION=0.1.8
DUPBLASTER_VERSION=0.3.0
root="$PWD/.tools/peers"
have() { [[ -x "$root/bin/$1" ]] && "$root/bin/$1" --version 2>/dev/null | grep -q "$2"; }
have mako "$MAKO_VERSION" || cargo install --locked --root "$root" fg-mako --version "$MAKO_VERSION"
have dupblaster "$DUPBLASTER_VERSION" || cargo install --locked --root "$root" dupblaster --version "$DUPBLASTER_VERSION"
"$root/bin/mako" --version | head -1
"$root/bin/dupblaster" --version | head -1
