"""MultiQC (the version pinned in tests/requirements.txt) reads alnsort's
duplicate metrics as it reads Picard MarkDuplicates 3.4.0's own: the same
sample name and the same numbers in its parsed data.

MultiQC names a Picard sample after the file in the `INPUT=` of the
metrics file's command-line header (`# MarkDuplicates INPUT=[in.bam] ...`),
and after the metrics file when there is none. Each test runs Picard and
alnsort on one generated input named `sample1.bam`, puts each metrics file
under a name of its own (so a sample named after the metrics file shows),
runs MultiQC over each, and compares `multiqc_picard_dups` of
`multiqc_data.json`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import test_vs_picard as g

# The input's file name, and the sample name MultiQC makes of it (it drops
# the `.bam` extension).
INPUT_NAME = "sample1.bam"
SAMPLE = "sample1"
# MultiQC runs in well under a minute here; more means it hung.
MULTIQC_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def multiqc() -> list[str]:
    if importlib.util.find_spec("multiqc") is None:
        pytest.fail(
            "multiqc is not installed in this Python: install tests/requirements.txt "
            "(`bash scripts/test.sh` does it)",
            pytrace=False,
        )
    return [sys.executable, "-m", "multiqc"]


def parsed(multiqc: list[str], metrics: Path, work: Path) -> dict:
    """MultiQC's parsed Picard MarkDuplicates data for one metrics file:
    {sample name: {column: value}}."""
    src = work / "in"
    src.mkdir()
    (src / metrics.name).write_bytes(metrics.read_bytes())
    out = work / "out"
    p = subprocess.run(
        [*multiqc, str(src), "-o", str(out), "-m", "picard", "--no-report", "-k", "json",
         "--no-version-check", "--no-ansi", "-q"],
        capture_output=True, text=True, timeout=MULTIQC_TIMEOUT_S, cwd=work,
    )
    assert p.returncode == 0, f"multiqc failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    data = json.loads((out / "multiqc_data" / "multiqc_data.json").read_text())
    dups = data["report_saved_raw_data"].get("multiqc_picard_dups")
    assert dups, f"MultiQC found no MarkDuplicates metrics in {metrics.name}:\n{p.stderr[-3000:]}"
    return dups


@pytest.fixture(scope="module")
def case(tmp_path_factory, picard, multiqc):
    """The input, and MultiQC's reading of Picard's metrics for it."""
    tmp = tmp_path_factory.mktemp("multiqc")
    inp = tmp / INPUT_NAME
    # Two libraries, a read group without one, optical-distance names:
    # MultiQC merges the libraries and recomputes the derived columns.
    g.write_bam(inp, g.t_random(9))
    m = tmp / "picard.dup_metrics.txt"
    p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={tmp / 'picard.bam'}", f"M={m}",
                                 "ASSUME_SORT_ORDER=queryname", "VALIDATION_STRINGENCY=SILENT",
                                 "QUIET=true", "VERBOSITY=ERROR"],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"Picard failed:\n{p.stderr[-3000:]}"
    (tmp / "picard").mkdir()
    want = parsed(multiqc, m, tmp / "picard")
    assert list(want) == [SAMPLE], f"MultiQC names Picard's sample {list(want)}, not after {INPUT_NAME}"
    values = want[SAMPLE]
    assert values["READ_PAIR_DUPLICATES"] > 0 and values["UNPAIRED_READ_DUPLICATES"] > 0, \
        "Picard marked no duplicates: the case proves nothing"
    return tmp, inp, want


def test_core_metrics_are_named_after_the_input(case, driver, multiqc, tmp_path):
    """The markdup core's metrics file (its header written by
    PicardCommandLine, through the markdup_flags driver)."""
    _, inp, want = case
    m = tmp_path / "core.dup_metrics.txt"
    subprocess.run([driver, str(inp), str(m)], check=True, stdout=subprocess.DEVNULL)
    assert parsed(multiqc, m, tmp_path) == want


def test_sort_markdup_metrics_are_named_after_the_input(case, alnsort_bin, multiqc, tmp_path):
    _, inp, want = case
    m = tmp_path / "alnsort.dup_metrics.txt"
    subprocess.run([alnsort_bin, "sort", "--markdup", "--metrics", str(m), "-o", str(tmp_path / "out.bam"), str(inp)],
                   check=True, capture_output=True)
    assert parsed(multiqc, m, tmp_path) == want


def test_sort_markdup_metrics_from_a_pipe_have_picards_numbers(case, alnsort_bin, multiqc, tmp_path):
    """Standard input names no file: MultiQC names the sample after the
    metrics file, with Picard's numbers."""
    _, inp, want = case
    m = tmp_path / "piped.dup_metrics.txt"
    with open(inp, "rb") as fh:
        subprocess.run([alnsort_bin, "sort", "--markdup", "--metrics", str(m), "-o", str(tmp_path / "out.bam"), "-"],
                       check=True, stdin=fh, capture_output=True)
    got = parsed(multiqc, m, tmp_path)
    assert len(got) == 1 and next(iter(got)).startswith("piped"), \
        f"MultiQC named the piped sample {list(got)}, not after the metrics file {m.name}"
    assert next(iter(got.values())) == want[SAMPLE]


@pytest.mark.parametrize("syntax", ["legacy", "current"])
def test_markduplicates_metrics_are_named_after_the_input(case, alnsort_bin, multiqc, tmp_path, syntax):
    """`alnsort MarkDuplicates` (Picard's command line, either syntax, with
    options): its header's first line is Picard's `MarkDuplicates INPUT=[...]
    ... ASSUME_SORT_ORDER=queryname ...`, so MultiQC names the sample after
    the input, with Picard's numbers."""
    _, inp, want = case
    m = tmp_path / "md.dup_metrics.txt"
    out = tmp_path / "out.bam"
    args = {"legacy": [f"I={inp}", f"O={out}", f"M={m}", "ASSUME_SORT_ORDER=queryname", "VALIDATION_STRINGENCY=SILENT"],
            "current": ["--INPUT", str(inp), "--OUTPUT", str(out), "--METRICS_FILE", str(m), "-ASO", "queryname",
                        "--VALIDATION_STRINGENCY", "SILENT"]}[syntax]
    subprocess.run([alnsort_bin, "MarkDuplicates", *args], check=True, capture_output=True)
    first = m.read_text().splitlines()[1]
    assert first == f"# MarkDuplicates INPUT=[{inp}] OUTPUT={out} METRICS_FILE={m} ASSUME_SORT_ORDER=queryname " \
                    "VALIDATION_STRINGENCY=SILENT", first
    assert parsed(multiqc, m, tmp_path) == want


def test_multiqc_is_the_pinned_version(multiqc):
    """The parsing rules above are MultiQC's of the pinned version."""
    pins = (Path(__file__).resolve().parents[1] / "requirements.txt").read_text().split()
    pin = next(p.split("==")[1] for p in pins if p.startswith("multiqc=="))
    p = subprocess.run([*multiqc, "--version"], capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[-1] == pin, f"multiqc --version says {p.stdout.strip()!r}; tests/requirements.txt pins {pin}"
