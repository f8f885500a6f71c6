#!/usr/bin/env bash
# The one test command of the project (CI runs it through .ci/run). It takes
# 10 minutes or more on a small machine:
#   1. makes (once) a Python virtual environment of its own, .venv/ in the
#      repository root (ALNSORT_TEST_VENV names another), and installs the
#      test requirements there (pysam 0.24.1 = the samtools 1.24 oracle,
#      pytest); nothing is installed into the python3 you run it with,
#   2. checks formatting (cargo fmt --check),
#   3. builds alnsort (release; a build failure stops here), builds and
#      installs the alnsort Python package into the venv (pip install .),
#      installs Picard 3.4.0 (scripts/picard.sh, the duplicate-marking
#      oracle, into .tools/picard with Maven), runs clippy with warnings as errors and the Rust tests of the whole
#      workspace,
#   4. replays the fuzz corpus and builds the fuzz targets (fuzz/check.sh),
#   5. runs the differential and safety suites in tests/ against the binary,
#      with the virtual environment's python. Tests marked `slow` (minutes
#      each: the offline wheel build, the large memory-budget runs, the
#      simulated Ray cluster with nodes killed) run only with
#      ALNSORT_SLOW_TESTS=1, as CI (.ci/run) sets it; otherwise pytest lists
#      each as skipped with that reason and ends with a line counting them.
# It also needs an older samtools (htslib 1.10-1.22) at /usr/bin/samtools
# (ALNSORT_OLD_SAMTOOLS names another), installed with apt-get when missing
# and run as root on Debian/Ubuntu.
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

venv="${ALNSORT_TEST_VENV:-$PWD/.venv}"
py="$venv/bin/python"
echo "== Python test environment: $venv"
if [[ -e "$venv" && ! -f "$venv/pyvenv.cfg" ]]; then
    die "$venv exists and is not a Python virtual environment: move it away or set ALNSORT_TEST_VENV"
fi
if ! "$py" -c 'import sys' >/dev/null 2>&1; then
    # Missing, or made by a python3 that is gone: (re)create it.
    python3 -m venv --clear "$venv" ||
        die "python3 -m venv failed: on Debian or Ubuntu install the venv module with" \
            "'apt-get install python3-venv' (or python3.N-venv for your python3 version)"
fi
"$py" -m pip --version >/dev/null 2>&1 ||
    die "$venv has no pip: remove it and install python3-venv (Debian/Ubuntu) so that python3 -m venv includes pip"
"$py" -m pip install -q -r tests/requirements.txt || die "pip install -r tests/requirements.txt into $venv failed"

# An older samtools (htslib 1.10-1.22; Debian's apt package, 1.16.1 on
# Debian 12) reads alnsort's CRAM in tests/diff/test_cram.py: its rule for
# rebuilding the TLEN of mates stored together differs from 1.24's. Installed
# with apt-get when missing (as root); ALNSORT_OLD_SAMTOOLS names another.
old_samtools="${ALNSORT_OLD_SAMTOOLS:-/usr/bin/samtools}"
if [[ ! -x "$old_samtools" ]]; then
    if [[ "$old_samtools" == /usr/bin/samtools && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "== apt-get install samtools (the older samtools the CRAM tests read with)"
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q samtools; } ||
            die "apt-get install samtools failed"
    fi
    [[ -x "$old_samtools" ]] ||
        die "$old_samtools not found: install samtools 1.10-1.22 (apt-get install samtools as root on" \
            "Debian/Ubuntu) or set ALNSORT_OLD_SAMTOOLS to one"
fi

# Programs the CLI tests run (tests/diff/test_cli.py): groff renders the
# generated man page (checked for warnings), zsh and fish exercise the
# generated completions in the shells themselves. Debian packages, installed
# with apt-get when missing.
need_pkgs=()
command -v groff >/dev/null 2>&1 || need_pkgs+=(groff-base)
command -v zsh >/dev/null 2>&1 || need_pkgs+=(zsh)
command -v fish >/dev/null 2>&1 || need_pkgs+=(fish)
if ((${#need_pkgs[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "== apt-get install ${need_pkgs[*]} (the man page and completion tests)"
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}"; } ||
            die "apt-get install ${need_pkgs[*]} failed"
    fi
    for prog in groff zsh fish; do
        command -v "$prog" >/dev/null 2>&1 ||
            die "$prog not found: install it (apt-get install groff-base zsh fish as root on Debian/Ubuntu)"
    done
fi

# From here on every step runs even if an earlier one failed, so one run
# reports all failures; the exit status says whether any step failed.
failed=()

echo "== cargo fmt --all --check"
cargo fmt --all --check || failed+=("cargo fmt --check")

echo "== cargo build --release -p alnsort"
cargo build --release -p alnsort

# The Python package (crates/python, built by maturin through pip) goes into
# the test venv so tests/python can import it; a failed build or install
# fails the run (and CI=true makes tests/python fail, not skip, without it).
echo "== pip install . (the alnsort Python package) into $venv"
"$py" -m pip install -q "maturin>=1.16,<2.0" || die "pip install maturin into $venv failed"
# maturin's build backend runs the `maturin` program: the venv's, on PATH.
PATH="$venv/bin:$PATH" "$py" -m pip install -q --no-build-isolation --no-deps --force-reinstall . ||
    failed+=("pip install . (the alnsort Python package)")

# Picard 3.4.0 (the oracle of tests/markdup) from the Maven registry into
# .tools/picard/lib; without it the markdup differential tests cannot run,
# which is a failure.
echo "== Picard 3.4.0 (scripts/picard.sh)"
bash scripts/picard.sh || failed+=("scripts/picard.sh (Picard install)")

echo "== cargo clippy --workspace --all-targets --release -- -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings || failed+=("cargo clippy")

echo "== cargo test --workspace --profile test-release"
# The Rust differential tests run `python3 -c "import pysam ..."` (the
# samtools 1.24 oracle): the venv's python3 first on PATH, so they find the
# pysam installed above rather than whatever python3 the machine has.
PATH="$venv/bin:$PATH" cargo test --workspace --profile test-release --no-fail-fast || failed+=("cargo test")

echo "== fuzz targets: replay the committed corpus and build the targets (fuzz/check.sh)"
bash fuzz/check.sh || failed+=("fuzz/check.sh")

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export ALNSORT_BIN="${ALNSORT_BIN:-$target_dir/release/alnsort}"
[[ -x "$ALNSORT_BIN" ]] || die "alnsort binary not found at $ALNSORT_BIN after the build"

echo "== differential tests against samtools 1.24 (pysam), ALNSORT_BIN=$ALNSORT_BIN"
if [[ "${ALNSORT_SLOW_TESTS:-}" == 1 ]]; then
    echo "== ALNSORT_SLOW_TESTS=1: the slow suites run too"
else
    echo "== the slow suites are skipped (ALNSORT_SLOW_TESTS=1 runs them, as CI does)"
fi
PATH="$venv/bin:$PATH" "$py" -m pytest -q -rs -p no:cacheprovider tests/ || failed+=("pytest tests/")

if ((${#failed[@]})); then
    echo "scripts/test.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "scripts/test.sh: all tests passed"
