#!/usr/bin/env bash
# The one test command of the project (CI runs it through .ci/run):
#   1. installs the Python test requirements (pysam 0.24.1 = the samtools 1.24
#      oracle, pytest),
#   2. builds alnsort (release; a build failure stops here) and runs the Rust
#      tests of the whole workspace,
#   3. replays the fuzz corpus and builds the fuzz targets (fuzz/check.sh),
#   4. runs the differential and safety suites in tests/ against the binary.
# Exits non-zero if anything fails. A missing tool is always a failure, never
# a skip (in CI, CI=true, as anywhere else).
# ALNSORT_BIN may point at another binary (e.g. tests/samtools_as_alnsort.sh
# to validate the harness); by default it is the binary built here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "scripts/test.sh: $*" >&2; exit 1; }

command -v python3 >/dev/null 2>&1 || die "python3 not found: the differential tests need Python 3.9+"
command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (https://rustup.rs) first"
if [[ "${CI:-}" == "true" ]]; then echo "scripts/test.sh: running in CI"; fi

echo "== installing Python test requirements"
python3 -m pip install -q -r tests/requirements.txt || die "pip install -r tests/requirements.txt failed"

echo "== cargo build --release -p alnsort"
cargo build --release -p alnsort

# From here on every step runs even if an earlier one failed, so one run
# reports all failures; the exit status says whether any step failed.
failed=()

echo "== cargo test --workspace --release"
cargo test --workspace --release --no-fail-fast || failed+=("cargo test")

echo "== fuzz targets: replay the committed corpus and build the targets (fuzz/check.sh)"
bash fuzz/check.sh || failed+=("fuzz/check.sh")

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export ALNSORT_BIN="${ALNSORT_BIN:-$target_dir/release/alnsort}"
[[ -x "$ALNSORT_BIN" ]] || die "alnsort binary not found at $ALNSORT_BIN after the build"

echo "== differential tests against samtools 1.24 (pysam), ALNSORT_BIN=$ALNSORT_BIN"
python3 -m pytest -q -p no:cacheprovider tests/ || failed+=("pytest tests/")

if ((${#failed[@]})); then
    echo "scripts/test.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "scripts/test.sh: all tests passed"
