"""The `alnsort` Python package (crates/python): `alnsort.sort()` writes the
same bytes as the `alnsort sort` binary for the same options, returns the
run's real counts, fails with the binary's message and leaves nothing
behind, runs many times in one process and releases the GIL.

The package must be installed in the test environment (`pip install .`
from the repository root; scripts/test.sh does it). Without it these tests
fail under CI=true and are skipped, loudly, elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pysam
import pytest

import harness

try:
    import alnsort

    _IMPORT_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the environment
    alnsort = None
    _IMPORT_ERROR = e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "examples" / "example.sam")


@pytest.fixture(autouse=True)
def _package():
    if alnsort is not None:
        return
    why = (
        f"the alnsort Python package is not importable ({_IMPORT_ERROR}); "
        f"install it with `{sys.executable} -m pip install {REPO}`"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    warnings.warn(f"SKIPPING the Python package tests: {why}")
    print(f"\n*** SKIPPED: {why} ***", file=sys.stderr)
    pytest.skip(f"SKIPPED LOUDLY: {why}")


def run_cli(alnsort_bin: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Runs the binary with argv exactly (argv[0] "alnsort" included, as the
    @PG CL field records it)."""
    return subprocess.run(
        argv, executable=alnsort_bin, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def count_records(path: str) -> int:
    with pysam.AlignmentFile(path, "r", check_sq=False) as f:
        return sum(1 for _ in f.fetch(until_eof=True))


def same_as_cli(alnsort_bin, tmp_path, monkeypatch, inp: str, **kw) -> dict:
    """Sorts inp with alnsort.sort() in one directory and with the binary in
    another, both with the relative output name out.bam (so @PG CL is the
    same), and checks every file written is byte-identical."""
    py_dir, cli_dir = tmp_path / "py", tmp_path / "cli"
    py_dir.mkdir()
    cli_dir.mkdir()
    monkeypatch.chdir(py_dir)
    stats = alnsort.sort(inp, "out.bam", **kw)
    argv = alnsort.sort_argv(inp, "out.bam", **kw)
    res = run_cli(alnsort_bin, argv, cli_dir)
    harness.check_ok(res)
    py_files = sorted(os.listdir(py_dir))
    assert py_files == sorted(os.listdir(cli_dir))
    assert "out.bam" in py_files
    for name in py_files:
        a, b = (py_dir / name).read_bytes(), (cli_dir / name).read_bytes()
        assert a == b, f"{name}: alnsort.sort() wrote {len(a)} bytes, the binary {len(b)}, and they differ"
    assert stats["command_line"] == " ".join(argv)
    return stats


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"order": "name"},
        {"index": True},
        {"order": "name-lexicographic", "threads": 2, "level": 1},
        {"order": "template-coordinate", "no_pg": True},
        {"tag": "RG", "max_memory": "32M"},
        {"order": "minimiser", "threads": 2},
    ],
    ids=["coordinate", "name", "index", "N-threads-level", "template-coordinate", "tag-maxmem", "minimiser"],
)
@pytest.mark.parametrize("source", ["example", "main-sam", "main-bam"])
def test_sort_is_byte_identical_to_the_binary(alnsort_bin, inputs, tmp_path, monkeypatch, source, kw):
    inp = {
        "example": lambda: EXAMPLE,
        "main-sam": lambda: inputs.sam("main"),
        "main-bam": lambda: inputs.bam("main"),
    }[source]()
    stats = same_as_cli(alnsort_bin, tmp_path, monkeypatch, inp, **kw)
    if kw.get("index"):
        assert (tmp_path / "py" / "out.bam.csi").stat().st_size > 0
        assert stats["index"] == "out.bam.csi"


def test_stats_are_the_real_counts(inputs, tmp_path):
    inp = inputs.sam("main")
    out = tmp_path / "sorted.bam"
    stats = alnsort.sort(Path(inp), out, order="name", threads=2)
    n = count_records(inp)
    assert n > 1000
    assert stats["records_in"] == n
    assert stats["records_out"] == n
    assert count_records(str(out)) == n
    assert stats["bytes_out"] == out.stat().st_size
    assert stats["input_file_bytes"] == os.path.getsize(inp)
    assert stats["output"] == str(out)
    assert stats["threads"] == 2
    assert stats["sort_order"] == "queryname"
    assert stats["tool"] == "alnsort" and stats["version"] == alnsort.__version__
    assert [p["phase"] for p in stats["phases"]]
    with pysam.AlignmentFile(str(out), "rb", check_sq=False) as f:
        assert f.header.to_dict()["HD"]["SO"] == "queryname"


def cli_error(alnsort_bin: str, argv: list[str], cwd: Path) -> str:
    res = run_cli(alnsort_bin, argv, cwd)
    assert res.returncode == 1, res
    first = res.stderr.splitlines()[0]
    prefix = "alnsort sort: "
    assert first.startswith(prefix), res.stderr
    return first[len(prefix) :]


def bad_inputs(tmp_path: Path) -> dict:
    good = tmp_path / "src.bam"
    pysam.sort("-o", str(good), EXAMPLE)
    truncated = tmp_path / "truncated.bam"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    text = tmp_path / "notes.txt"
    text.write_text("this is not SAM\nnor is this\n")
    return {"missing": tmp_path / "missing.sam", "truncated": truncated, "not-sam": text}


@pytest.mark.parametrize("kind", ["missing", "truncated", "not-sam"])
def test_bad_input_raises_the_cli_message_and_leaves_nothing(alnsort_bin, tmp_path, monkeypatch, kind):
    src = tmp_path / "src"
    src.mkdir()
    inp = bad_inputs(src)[kind]
    py_dir, cli_dir = tmp_path / "py", tmp_path / "cli"
    py_dir.mkdir()
    cli_dir.mkdir()
    (py_dir / "old.bam").write_bytes(b"kept")
    monkeypatch.chdir(py_dir)
    with pytest.raises(alnsort.AlnsortError) as err:
        alnsort.sort(str(inp), "out.bam", index=True, threads=2)
    argv = alnsort.sort_argv(str(inp), "out.bam", index=True, threads=2)
    assert str(err.value) == cli_error(alnsort_bin, argv, cli_dir)
    assert isinstance(err.value, RuntimeError)
    assert sorted(os.listdir(py_dir)) == ["old.bam"], "the failed run left files behind"
    assert (py_dir / "old.bam").read_bytes() == b"kept"
    if kind == "missing":
        assert isinstance(err.value, alnsort.AlnsortIOError)
        assert isinstance(err.value, OSError)
        assert str(inp) in str(err.value)
    else:
        assert not isinstance(err.value, OSError), "bad data is not an I/O error"


def test_a_refused_option_value_raises_the_cli_message(alnsort_bin, tmp_path):
    for kw in ({"max_memory": "lots"}, {"output_format": "cram"}, {"output_format": "xyz"}):
        with pytest.raises(alnsort.AlnsortError) as err:
            alnsort.sort(EXAMPLE, tmp_path / "x.bam", **kw)
        argv = alnsort.sort_argv(EXAMPLE, str(tmp_path / "x.bam"), **kw)
        assert str(err.value) == cli_error(alnsort_bin, argv, tmp_path)
    assert os.listdir(tmp_path) == []


def test_an_unwritable_output_directory_is_an_io_error(alnsort_bin, tmp_path):
    out = tmp_path / "no-such-dir" / "out.bam"
    with pytest.raises(alnsort.AlnsortIOError) as err:
        alnsort.sort(EXAMPLE, out)
    assert str(err.value) == cli_error(alnsort_bin, alnsort.sort_argv(EXAMPLE, out), tmp_path)
    assert str(out) in str(err.value)
    assert os.listdir(tmp_path) == []


def test_two_calls_in_one_process(inputs, tmp_path):
    inp = inputs.sam("main")
    first = alnsort.sort(inp, tmp_path / "a.bam", no_pg=True)
    second = alnsort.sort(inp, tmp_path / "b.bam", no_pg=True, threads=2, max_memory="40M")
    assert first["records_in"] == second["records_in"] == count_records(inp)
    assert (tmp_path / "a.bam").read_bytes() == (tmp_path / "b.bam").read_bytes()
    with pytest.raises(alnsort.AlnsortError):
        alnsort.sort(tmp_path / "none.sam", tmp_path / "c.bam")
    third = alnsort.sort(inp, tmp_path / "c.bam", no_pg=True)
    assert third["records_out"] == first["records_out"]
    assert (tmp_path / "c.bam").read_bytes() == (tmp_path / "a.bam").read_bytes()


def test_two_threads_sort_at_once_and_the_gil_is_released(inputs, tmp_path):
    inp = inputs.sam("main")
    start = threading.Barrier(3)
    spans: dict[int, tuple[float, float]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            start.wait()
            t0 = time.monotonic()
            alnsort.sort(inp, tmp_path / f"t{i}.bam", no_pg=True)
            spans[i] = (t0, time.monotonic())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    start.wait()
    # Python code in this thread keeps running while both sorts are in
    # Rust: it could not if a sort held the GIL.
    ticks: list[float] = []
    while any(t.is_alive() for t in threads):
        ticks.append(time.monotonic())
        time.sleep(0.002)
    for t in threads:
        t.join()
    assert not errors, errors
    both_from = max(s[0] for s in spans.values())
    both_until = min(s[1] for s in spans.values())
    assert both_until > both_from, f"the two sorts did not overlap in time: {spans}"
    inside = [t for t in ticks if both_from < t < both_until]
    overlap = both_until - both_from
    assert len(inside) >= 5, f"{len(inside)} ticks of the main thread in {overlap:.3f} s of both sorts running"
    a, b = (tmp_path / "t0.bam").read_bytes(), (tmp_path / "t1.bam").read_bytes()
    assert a == b and len(a) > 0


def test_refused_arguments(tmp_path):
    out = tmp_path / "x.bam"
    with pytest.raises(ValueError, match="needs markdup=True"):
        alnsort.sort(EXAMPLE, out, metrics=tmp_path / "m.txt")
    with pytest.raises(ValueError, match="order must be one of"):
        alnsort.sort(EXAMPLE, out, order="queryname")
    with pytest.raises(ValueError, match="standard input"):
        alnsort.sort("-", out)
    with pytest.raises(ValueError, match="standard output"):
        alnsort.sort(EXAMPLE, "-")
    with pytest.raises(TypeError):
        alnsort.sort(EXAMPLE, out, threads=True)
    with pytest.raises(TypeError):
        alnsort.sort(EXAMPLE, 42)
    assert os.listdir(tmp_path) == []


def test_markdup_is_byte_identical_to_the_binary(alnsort_bin, tmp_path, monkeypatch):
    """markdup=True and metrics= run `alnsort sort --markdup --metrics`: the
    same output and metrics bytes as the binary, and the report's counts."""
    src = tmp_path / "grouped.bam"
    header = {"HD": {"VN": "1.6", "SO": "unsorted"}, "SQ": [{"SN": "c", "LN": 10000}]}
    with pysam.AlignmentFile(str(src), "wb", header=header) as f:
        for i, q in enumerate([30, 40, 20]):  # three pairs at the same ends
            for flag, pos, mpos in [(0x63, 100, 300), (0x93, 300, 100)]:
                a = pysam.AlignedSegment(f.header)
                a.query_name, a.flag, a.reference_id, a.reference_start = f"p{i}", flag, 0, pos
                a.next_reference_id, a.next_reference_start = 0, mpos
                a.cigarstring, a.mapping_quality = "50M", 60
                a.query_sequence = "A" * 50
                a.query_qualities = pysam.qualitystring_to_array(chr(33 + q) * 50)
                f.write(a)
    stats = same_as_cli(alnsort_bin, tmp_path, monkeypatch, str(src), markdup=True, metrics="m.txt")
    assert (tmp_path / "py" / "m.txt").read_bytes() == (tmp_path / "cli" / "m.txt").read_bytes()
    assert stats["markdup"]["read_pair_duplicates"] == 2
    assert stats["markdup"]["records_marked"] == 4
    with pysam.AlignmentFile(str(tmp_path / "py" / "out.bam")) as f:
        dups = sorted({r.query_name for r in f if r.flag & 0x400})
    assert dups == ["p0", "p2"]


def test_unknown_reference_names_are_an_error_unless_mapped_to_unmapped(alnsort_bin, tmp_path, monkeypatch):
    """The default stops at a SAM record whose RNAME is not in the header,
    with the binary's message; unknown_reference="unmapped" sorts it as
    samtools does (same bytes as the binary) and counts it."""
    sam = tmp_path / "unknown.sam"
    sam.write_text(
        "@HD\tVN:1.6\n@SQ\tSN:chr1\tLN:1000\n"
        "r1\t0\tchr1\t100\t60\t4M\t*\t0\t0\tACGT\tIIII\n"
        "r2\t0\tchr9\t50\t60\t4M\t*\t0\t0\tACGT\tIIII\n"
    )
    out = tmp_path / "x.bam"
    with pytest.raises(alnsort.AlnsortError) as err:
        alnsort.sort(sam, out)
    assert "line 4 (record 2)" in str(err.value) and "'chr9'" in str(err.value), str(err.value)
    assert str(err.value) == cli_error(alnsort_bin, alnsort.sort_argv(str(sam), str(out)), tmp_path)
    assert not out.exists()
    stats = same_as_cli(alnsort_bin, tmp_path, monkeypatch, str(sam), unknown_reference="unmapped")
    assert stats["unknown_reference_records"] == 1
    with pytest.raises(ValueError, match="unknown_reference must be one of"):
        alnsort.sort(sam, out, unknown_reference="drop")


def test_the_argument_mapping():
    argv = alnsort.sort_argv(
        "in.bam",
        Path("o.bam"),
        order="name-lexicographic",
        tag="HP",
        threads=4,
        max_memory=1 << 30,
        level=3,
        output_format="bam",
        tmp_dir="/scratch",
        no_pg=True,
    )
    assert argv == [
        "alnsort", "sort", "-N", "-t", "HP", "-@", "4", "--max-memory", str(1 << 30),
        "-l", "3", "-O", "bam", "-T", "/scratch", "--no-PG", "-o", "o.bam", "in.bam",
    ]  # fmt: skip
    assert alnsort.sort_argv("-odd.sam", "o.bam", index="o.bai")[-5:] == [
        "--write-index", "-o", "o.bam##idx##o.bai", "--", "-odd.sam",
    ]  # fmt: skip


def test_a_path_starting_with_a_dash_is_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("-in.sam").write_bytes(Path(EXAMPLE).read_bytes())
    stats = alnsort.sort("-in.sam", "-out.bam")
    assert stats["records_out"] == count_records(EXAMPLE)
    assert os.path.getsize("-out.bam") == stats["bytes_out"]


def test_version_docstrings_and_types():
    assert alnsort.__version__ and alnsort.__version__[0].isdigit()
    assert "Sort the SAM or BAM file" in alnsort.sort.__doc__
    assert alnsort.AlnsortError.__doc__ and issubclass(alnsort.AlnsortError, RuntimeError)
    assert "--write-index" in alnsort.sort_help()
    pkg = Path(alnsort.__file__).parent
    assert (pkg / "py.typed").exists() and (pkg / "_alnsort.pyi").exists()
