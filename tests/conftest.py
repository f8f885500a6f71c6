"""pytest setup for the differential suite: makes tests/ importable, checks
that the oracle (pysam 0.24.1 = samtools 1.24) is present, and provides the
session-wide generated inputs and oracle cache.

Nothing here skips: a missing pysam or alnsort binary is a failure, so a CI
run can never go green by testing nothing.
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
