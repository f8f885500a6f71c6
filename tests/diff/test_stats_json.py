"""`--stats-json FILE` (project issue 8, items 2 and 6).

* The JSON parses and has exactly the fields docs/stats-json.md lists, with
  the documented types: the test reads the markdown table, so the document
  and the program cannot drift apart. Values are checked against what the
  run really did (record count from pysam, file sizes, paths, threads).
* An unwritable stats path fails before any input is read, names the path,
  and leaves a pre-existing output (and the directory) exactly as it was:
  input comes from a pipe that is never written or closed, so a run that
  read input first would hang and be killed by the test's timeout.
* The stats file is created (under a temporary name) before reading; an
  interrupted run removes it and leaves an older stats file unchanged.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import harness
import pysam
import pytest
from harness import check_ok, run_alnsort

pytestmark = pytest.mark.alnsort_only

DOC = harness.REPO_ROOT / "docs" / "stats-json.md"

# The doc's type words -> the Python types json.loads gives.
TYPES = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "array": (list,),
    "object": (dict,),
}


def doc_fields() -> dict[str, str]:
    """field -> type, from the table under '## Fields' in docs/stats-json.md."""
    text = DOC.read_text()
    section = text.split("## Fields", 1)[1].split("\n## ", 1)[0]
    fields = {}
    for line in section.splitlines():
        m = re.match(r"^\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|\s*(.+?)\s*\|\s*$", line)
        if m:
            assert m.group(1) not in fields, f"{m.group(1)} is documented twice"
            assert m.group(3), f"{m.group(1)} has no description"
            fields[m.group(1)] = m.group(2)
    assert len(fields) > 20, f"could not read the fields table of {DOC}: {fields}"
    return fields


def flatten(stats: dict) -> dict[str, object]:
    """Top-level fields, each object field's fields as NAME.KEY, and each
    phase object's fields as phases[].NAME."""
    flat = dict(stats)
    for name, value in stats.items():
        if isinstance(value, dict):
            flat.update({f"{name}.{k}": v for k, v in value.items()})
    assert stats.get("phases"), stats
    for p in stats["phases"]:
        for k, v in p.items():
            flat.setdefault(f"phases[].{k}", v)
            assert set(p) == set(stats["phases"][0]), "phase objects differ in shape"
    return flat


def check_type(name: str, value, doc_type: str) -> None:
    nullable = doc_type.endswith(" or null")
    base = doc_type.removesuffix(" or null")
    assert base in TYPES, f"{name}: unknown documented type {doc_type!r}"
    if value is None:
        assert nullable, f"{name} is null but documented as {doc_type}"
        return
    assert isinstance(value, TYPES[base]) and not isinstance(value, bool), (
        f"{name} = {value!r} is not {doc_type}"
    )


def count_records(path: str) -> int:
    with pysam.AlignmentFile(path, "rb", check_sq=False) as f:
        return sum(1 for _ in f.fetch(until_eof=True))


def test_fields_match_the_doc_and_the_run(alnsort_bin, inputs, tmp_path):
    src = inputs.bam("main")
    out = tmp_path / "out.bam"
    stats_path = tmp_path / "stats.json"
    check_ok(run_alnsort(["-@", "2", "--write-index", "--stats-json", str(stats_path), "-o", str(out), src],
                         cwd=str(tmp_path)))
    stats = json.loads(stats_path.read_text())
    # The markdup object is only written with --markdup (tests/markdup checks it).
    documented = {k: v for k, v in doc_fields().items() if k != "markdup" and not k.startswith("markdup.")}
    flat = flatten(stats)
    assert set(flat) == set(documented), (
        f"in the JSON, not in {DOC.name}: {sorted(set(flat) - set(documented))}; "
        f"documented, not in the JSON: {sorted(set(documented) - set(flat))}"
    )
    for name, doc_type in documented.items():
        check_type(name, flat[name], doc_type)

    version = subprocess.run([alnsort_bin, "--version"], capture_output=True, text=True).stdout.split()[-1]
    n = count_records(src)
    assert stats["schema_version"] == 1
    assert stats["tool"] == "alnsort" and stats["version"] == version
    assert "--stats-json" in stats["command_line"] and stats["command_line"].endswith(src)
    assert stats["input"] == src and stats["input_file_bytes"] == os.path.getsize(src)
    assert stats["output"] == str(out) and stats["output_format"] == "bam"
    assert stats["index"] == str(out) + ".csi" and os.path.exists(stats["index"])
    assert stats["sort_order"] == "coordinate" and stats["sub_sort"] is None
    assert stats["threads"] == 2
    assert stats["memory_budget_scope"] == "records" and stats["memory_budget_bytes"] == 2 * 768 << 20
    assert stats["records_in"] == stats["records_out"] == n > 30000
    assert stats["unknown_reference_records"] == 0
    assert stats["bytes_in"] == stats["bytes_in_uncompressed"] > n * 100
    assert stats["bytes_out"] == out.stat().st_size < stats["bytes_out_uncompressed"]
    assert [p["phase"] for p in stats["phases"]] == ["read and sort", "merge runs", "merge and write"]
    assert stats["wall_s"] == pytest.approx(sum(p["wall_s"] for p in stats["phases"]), abs=0.01)
    assert 0 < stats["peak_rss_bytes"] < 4 << 30


def test_stdin_stdout_and_process_budget(alnsort_bin, inputs, tmp_path):
    src = inputs.sam("main")
    stats_path = tmp_path / "s.json"
    res = run_alnsort(["-n", "--max-memory", "64M", "--stats-json", str(stats_path), "-O", "sam", "-"],
                      stdin_path=src, cwd=str(tmp_path))
    check_ok(res)
    stats = json.loads(stats_path.read_text())
    assert stats["input"] == "-" and stats["input_file_bytes"] is None
    assert stats["output"] is None and stats["output_format"] == "sam" and stats["index"] is None
    assert stats["sort_order"] == "queryname" and stats["sub_sort"] == "queryname:natural"
    assert stats["memory_budget_scope"] == "process" and stats["memory_budget_bytes"] == 64 << 20
    body = [ln for ln in res.stdout.decode().splitlines() if not ln.startswith("@")]
    assert stats["records_out"] == len(body)
    assert stats["bytes_out"] == stats["bytes_out_uncompressed"] == len(res.stdout)


def _blocked_stdin_run(args: list[str], cwd: Path):
    """alnsort reading a pipe that stays open and empty: it can only finish
    on its own if it fails before reading input."""
    r, w = os.pipe()
    # SIGINT at its default action in the child, as from a terminal: a test
    # run started in the background inherits it ignored, and alnsort keeps
    # an ignored signal ignored.
    proc = subprocess.Popen([harness.alnsort_path(), "sort", *args, "-"], stdin=r, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=str(cwd),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(r)
    return proc, w


@pytest.mark.parametrize("kind", ["parent_is_a_file", "missing_directory", "is_a_directory"])
def test_unwritable_path_fails_before_reading(alnsort_bin, tmp_path, kind):
    out = tmp_path / "out.bam"
    out.write_bytes(b"an earlier finished sort")
    (tmp_path / "plain_file").write_text("x")
    (tmp_path / "a_dir").mkdir()
    stats_path = {
        "parent_is_a_file": tmp_path / "plain_file" / "stats.json",
        "missing_directory": tmp_path / "no_such_dir" / "stats.json",
        "is_a_directory": tmp_path / "a_dir",
    }[kind]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc, w = _blocked_stdin_run(["--stats-json", str(stats_path), "-o", str(out)], tmp_path)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"--stats-json {stats_path}: alnsort waited for input instead of refusing the path at once")
    finally:
        os.close(w)
    err = err.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    assert err.startswith("alnsort") and str(stats_path) in err, err
    assert out.read_bytes() == b"an earlier finished sort", "the existing output was changed"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "files were left behind"


def test_interrupted_run_keeps_the_old_stats_file(alnsort_bin, tmp_path):
    stats_path = tmp_path / "stats.json"
    stats_path.write_text('{"an": "older run"}')
    out = tmp_path / "out.bam"
    proc, w = _blocked_stdin_run(["--stats-json", str(stats_path), "-o", str(out)], tmp_path)
    try:
        deadline = time.monotonic() + 30
        pending = []
        while not pending and time.monotonic() < deadline and proc.poll() is None:
            pending = [p for p in tmp_path.iterdir() if p.name.startswith(".stats.json.")]
            time.sleep(0.01)
        assert pending, "the stats file was not created before input was read"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(w)
    assert proc.returncode == 130, err.decode("utf-8", "replace")
    assert stats_path.read_text() == '{"an": "older run"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]


@pytest.mark.parametrize("target", ["out.bam", "out.bam.csi"])
def test_stats_path_that_is_the_output_is_refused(alnsort_bin, inputs, tmp_path, target):
    out = tmp_path / "out.bam"
    out.write_bytes(b"an earlier finished sort")
    res = run_alnsort(["--write-index", "--stats-json", str(tmp_path / target), "-o", str(out),
                       inputs.sam("hdr_plain")], cwd=str(tmp_path))
    err = res.stderr.decode()
    assert res.returncode == 1 and "names the same file as the output" in err, err
    assert out.read_bytes() == b"an earlier finished sort"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bam"]
