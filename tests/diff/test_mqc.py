"""`--mqc FILE`: the run's report as MultiQC custom content (project issue
25, item 3).

MultiQC (the version pinned in tests/requirements.txt) is run over a
directory holding the file `alnsort sort --mqc` wrote; the test reads back
what MultiQC parsed (`multiqc_data.json`) and checks it against the same
run's `--stats-json`: one table section, the sample named after the input
(MultiQC drops `.bam`), and records, threads, order, times, memory and
output size equal to the JSON report's. With `--markdup --metrics` in the
same directory, MultiQC names the custom-content sample and the Picard
MarkDuplicates sample alike, so a report has one row per input. Also: a
name MultiQC would not find is warned about, and the file may not replace
the output or another report.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import check_ok, run_alnsort

pytestmark = pytest.mark.alnsort_only

MULTIQC_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def multiqc() -> list[str]:
    if importlib.util.find_spec("multiqc") is None:
        pytest.fail("multiqc is not installed in this Python: install tests/requirements.txt "
                    "(`bash scripts/test.sh` does it)", pytrace=False)
    return [sys.executable, "-m", "multiqc"]


def run_multiqc(multiqc: list[str], src: Path, work: Path) -> dict:
    out = work / "mqc_out"
    p = subprocess.run([*multiqc, str(src), "-o", str(out), "--no-report", "-k", "json",
                        "--no-version-check", "--no-ansi", "-q"],
                       capture_output=True, text=True, timeout=MULTIQC_TIMEOUT_S, cwd=work)
    assert p.returncode == 0, f"multiqc failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return json.loads((out / "multiqc_data" / "multiqc_data.json").read_text())


def test_multiqc_shows_the_run_under_the_input_name(alnsort_bin, inputs, tmp_path, multiqc):
    inp = tmp_path / "sampleA.bam"  # coordinate-sorted (SO:coordinate), which --markdup reads
    check_ok(run_alnsort(["-o", str(inp), inputs.bam("main")], cwd=str(tmp_path)))
    reports = tmp_path / "reports"
    reports.mkdir()
    mqc = reports / "sampleA.alnsort_mqc.json"
    stats = tmp_path / "stats.json"
    res = run_alnsort(["-@", "2", "--markdup", "--metrics", str(reports / "sampleA.dup_metrics.txt"),
                       "--mqc", str(mqc), "--stats-json", str(stats), "-o", str(tmp_path / "out.bam"),
                       str(inp)], cwd=str(tmp_path))
    check_ok(res)
    assert b"--mqc" not in res.stderr, res.stderr.decode()  # a name MultiQC finds: no warning
    want = json.loads(stats.read_text())
    data = run_multiqc(multiqc, reports, tmp_path)
    raw = data["report_saved_raw_data"]
    assert "multiqc_alnsort_runs" in raw, f"MultiQC did not read {mqc.name}: {sorted(raw)}"
    rows = raw["multiqc_alnsort_runs"]
    assert list(rows) == ["sampleA"], rows
    row = rows["sampleA"]
    assert row["records_in"] == want["records_in"] > 30000
    assert row["threads"] == want["threads"] == 2
    assert row["sort_order"] == want["sort_order"] == "coordinate"
    assert row["wall_s"] == pytest.approx(want["wall_s"], abs=0.002)
    assert row["cpu_s"] == pytest.approx(want["cpu_s"], abs=0.002)
    assert row["runs_written"] == want["runs_written"]
    assert row["peak_rss_mib"] == pytest.approx(want["peak_rss_bytes"] / 2**20, abs=0.001)
    assert row["bytes_out_mib"] == pytest.approx(want["bytes_out"] / 2**20, abs=0.001)
    assert row["duplicates_marked"] == want["markdup"]["records_marked"]
    # The duplicate metrics of the same run land on the same sample.
    assert list(raw["multiqc_picard_dups"]) == ["sampleA"], raw["multiqc_picard_dups"]


def test_stdin_names_the_sample_after_the_output(alnsort_bin, inputs, tmp_path, multiqc):
    reports = tmp_path / "r"
    reports.mkdir()
    check_ok(run_alnsort(["-n", "--mqc", str(reports / "x_mqc.json"), "-o", str(tmp_path / "byname.bam"), "-"],
                         stdin_path=inputs.sam("main"), cwd=str(tmp_path)))
    rows = run_multiqc(multiqc, reports, tmp_path)["report_saved_raw_data"]["multiqc_alnsort_runs"]
    assert list(rows) == ["byname"] and rows["byname"]["sort_order"] == "queryname", rows


def test_a_name_multiqc_would_not_find_is_warned_about(alnsort_bin, inputs, tmp_path):
    res = run_alnsort(["--mqc", str(tmp_path / "report.json"), "-o", str(tmp_path / "o.bam"), inputs.bam("main")],
                      cwd=str(tmp_path))
    check_ok(res)
    err = res.stderr.decode()
    assert "--mqc" in err and "_mqc.json" in err, err
    assert json.loads((tmp_path / "report.json").read_text())["plot_type"] == "table"


@pytest.mark.parametrize("clash", ["output", "stats"])
def test_the_report_may_not_replace_another_file(alnsort_bin, inputs, tmp_path, clash):
    out = tmp_path / "o.bam"
    mqc = out if clash == "output" else tmp_path / "r_mqc.json"
    args = ["--mqc", str(mqc), "-o", str(out), inputs.bam("main")]
    if clash == "stats":
        args = ["--stats-json", str(mqc), *args]
    res = run_alnsort(args, cwd=str(tmp_path))
    assert res.returncode != 0
    err = res.stderr.decode()
    assert "--mqc" in err and str(mqc) in err, err
    assert not out.exists() and not mqc.exists()
