"""pytest setup for the differential suite: makes tests/ importable, checks
that the oracle (pysam 0.24.1 = samtools 1.24) is present, and provides the
session-wide generated inputs and oracle cache.

Nothing here skips for a missing tool: a missing pysam or alnsort binary is a
failure, so a CI run can never go green by testing nothing. The one deliberate
skip is the `slow` marker: the suites that take minutes each (the offline wheel
build, the large memory-budget runs, the simulated Ray cluster) run only when
ALNSORT_SLOW_TESTS=1, which CI (`.ci/run`) sets; elsewhere each shows as
skipped with that reason and the session ends with a line counting them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import oracle  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "alnsort_only: checks an alnsort-specific contract (its @PG line, its own error "
        "messages, options samtools lacks); expected to fail when samtools stands in "
        "via tests/samtools_as_alnsort.sh",
    )
    config.addinivalue_line(
        "markers",
        f"slow: takes minutes; runs only with {SLOW_ENV}=1 (CI's .ci/run sets it), "
        "skipped with that reason otherwise",
    )


SLOW_ENV = "ALNSORT_SLOW_TESTS"


def run_slow() -> bool:
    value = os.environ.get(SLOW_ENV, "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(f"{SLOW_ENV}={value!r}: expected 1 (run the slow suites) or 0/unset (skip them)")
    return value == "1"


def pytest_collection_modifyitems(config, items):
    if run_slow():
        return
    skip = pytest.mark.skip(reason=f"slow suite: runs only with {SLOW_ENV}=1 (CI's .ci/run sets it)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if run_slow():
        terminalreporter.write_line(f"{SLOW_ENV}=1: the slow suites ran")
        return
    skipped = [
        r for r in terminalreporter.stats.get("skipped", [])
        if "slow suite" in str(getattr(r, "longrepr", ""))
    ]
    if skipped:
        terminalreporter.write_sep(
            "!", f"{len(skipped)} SLOW TESTS NOT RUN: set {SLOW_ENV}=1 to run them (CI does)", yellow=True
        )


def pytest_sessionstart(session):
    try:
        import pysam
    except ImportError:
        pytest.exit("pysam is not installed in this Python: run `bash scripts/test.sh` (it makes .venv/ with the test requirements) or `.venv/bin/python -m pip install -r tests/requirements.txt`", returncode=1)
    if pysam.__version__ != oracle.PYSAM_VERSION:
        pytest.exit(
            f"pysam {pysam.__version__} is installed; the oracle must be pysam {oracle.PYSAM_VERSION} "
            f"(samtools {oracle.SAMTOOLS_VERSION})",
            returncode=1,
        )


def pytest_report_header(config):
    return f"alnsort under test: {harness.alnsort_path()}"


@pytest.fixture(scope="session")
def alnsort_bin() -> str:
    path = harness.alnsort_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"alnsort binary not found at {path}: build it with `cargo build --release -p alnsort` or set ALNSORT_BIN",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> harness.Inputs:
    return harness.Inputs(tmp_path_factory.mktemp("inputs"))


@pytest.fixture(scope="session")
def oracle_cache() -> harness.OracleCache:
    return harness.OracleCache()
