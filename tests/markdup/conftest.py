"""pytest setup for the duplicate-marking differential tests: the oracle is
Picard MarkDuplicates 3.4.0 itself (installed by `bash scripts/picard.sh`
into `.tools/picard/lib`, or named by `ALNSORT_PICARD_LIB`), run with java.

When Picard or java is missing, the tests are skipped with a loud message;
under CI (`CI=true`) that is a failure instead, so CI never goes green by
testing nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def picard_lib() -> Path:
    env = os.environ.get("ALNSORT_PICARD_LIB")
    return Path(env) if env else REPO / ".tools" / "picard" / "lib"


def _missing() -> str | None:
    lib = picard_lib()
    if shutil.which("java") is None:
        return "java is not on PATH"
    if not any(lib.glob("picard-3.4.0*.jar")):
        return f"Picard 3.4.0 is not installed in {lib} (run `bash scripts/picard.sh` or set ALNSORT_PICARD_LIB)"
    return None


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def picard() -> list[str]:
    why = _missing()
    if why is not None:
        msg = f"MARKDUP DIFFERENTIAL TESTS NOT RUN: {why}"
        if _in_ci():
            pytest.fail(msg, pytrace=False)
        warnings.warn(msg)
        print(f"\n*** {msg} ***", file=sys.stderr)
        pytest.skip(msg)
    return ["java", "-Xmx1g", "-cp", str(picard_lib() / "*"), "picard.cmdline.PicardCommandLine"]


@pytest.fixture(scope="session")
def driver() -> str:
    """The core's example driver, built once per session (where cargo puts
    it: CARGO_TARGET_DIR, relative to the repository, as scripts/test.sh
    honours it, else target/)."""
    exe = REPO / (os.environ.get("CARGO_TARGET_DIR") or "target") / "release" / "examples" / "markdup_flags"
    if not os.environ.get("ALNSORT_MARKDUP_NO_BUILD"):
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "alnsort-markdup", "--example", "markdup_flags"],
            cwd=REPO,
            check=True,
        )
    if not exe.is_file():
        pytest.fail(f"markdup driver not found at {exe}", pytrace=False)
    return str(exe)
