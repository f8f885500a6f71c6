#!/usr/bin/env bash
# TEST-ONLY STAND-IN, NOT alnsort: runs samtools 1.24 (from pysam) as if it
# were `alnsort`, to validate the differential harness before/without the
# real binary:
#     ALNSORT_BIN=tests/samtools_as_alnsort.sh python3 -m pytest -q tests/ -m "not alnsort_only"
# `alnsort sort ARGS` becomes `samtools sort ARGS`. Tests marked alnsort_only
# (alnsort's @PG, its error messages, --max-memory) are expected to fail here.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/oracle.py" "$@"
