"""`python -m alnsort.ray sort`'s command line: read by `alnsort sort`'s own
parser and option table (through the binding's `parse_sort_args`), so every
option of that table is either honoured or refused by name, `##idx##`
names the index, `-n --write-index` warns as `alnsort sort` does, CRAM in
and out are refused by name (the distributed stages read and write BAM),
and `--help` lists every option. One end-to-end run (local Ray, in a
subprocess) of nf-core's form `-o 'OUT##idx##OUT.bai' --write-index`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pysam
import pytest

import gen
import harness
import oracle

import alnsort
from alnsort import _alnsort
from alnsort import ray as aray

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from simcluster import records  # noqa: E402

# A value for each value name of the table's synopses.
SAMPLE = {
    "INT": "2",
    "TAG": "XI",
    "FILE": "x.fa",
    "FMT[,OPT=VAL]...": "bam",
    "OPT=VAL": "level=3",
    "PREFIX": "tmp",
    "SIZE": "1G",
    "SECS": "5",
    "PATH": "stats.json",
    "INT[K|M|G]": "100M",
    "N": "50",
    "STRATEGY": "sum-of-base-qualities",
    "default|json|tsv": "json",
    "POLICY": "all",
    "REGEX": "[a-zA-Z0-9]+:[0-9]:([0-9]+):([0-9]+):([0-9]+).*",
    "t|s": "s",
    "ORDER": "txy",
    "CHAR": "_",
}


def _value(synopsis: str) -> list:
    parts = synopsis.split(" ")
    last = parts[-1]
    if last.startswith("-"):  # a flag
        return []
    if last == "error|unmapped":
        return ["unmapped"]
    return [SAMPLE.get(last, "1")]


@pytest.fixture
def bam(tmp_path):
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=7, n_templates=300)))
    path = str(tmp_path / "in.bam")
    oracle.to_bam(str(sam), path)
    return path


def test_every_sort_option_is_honoured_or_refused_by_name(bam, tmp_path):
    table = _alnsort.sort_option_table()
    assert len(table) > 30
    names = {name for name, _, _ in table}
    # The driver's lists name only options of the table.
    assert aray.HONOURED <= names, aray.HONOURED - names
    assert set(aray.REFUSED) <= names, set(aray.REFUSED) - names
    out = str(tmp_path / "o.bam")
    seen = {"honoured": 0, "refused": 0}
    for name, synopsis, group in table:
        argv = [name] + _value(synopsis)
        if name == "-o":
            argv = ["-o", out]
        args = argv + ([] if name == "-o" else ["-o", out]) + [bam]
        if group == "markdup" and name != "--markdup":
            args = ["--markdup"] + args  # the group's options need it, as in alnsort sort
        if name in aray.HONOURED:
            a = aray.parse_args(args)
            if name in ("-h", "--version"):
                assert a["action"] == {"-h": "help", "--version": "version"}[name], (name, a)
            else:
                assert a["action"] == "run" and name in a["given"], (name, a)
            seen["honoured"] += 1
        else:
            with pytest.raises(alnsort.AlnsortError) as e:
                aray.parse_args(args)
            # Named, as written: by the driver, or by alnsort itself for the
            # options alnsort does not implement.
            assert str(e.value).startswith(f"{name} is not supported"), (name, str(e.value))
            if group != "unsupported":
                assert "Ray driver" in str(e.value), (name, str(e.value))
            assert group != "markdup", f"{name}: duplicate marking runs on the Ray driver"
            seen["refused"] += 1
    assert seen["honoured"] == len(aray.HONOURED) and seen["refused"] > 10, seen


def test_options_mean_what_they_mean_for_alnsort_sort(bam):
    a = aray.parse_args(["-n", "-@", "3", "-m", "100M", "-l", "1", "--no-PG", "-o", "o.sam", bam,
                         "--partitions", "4", "--split=2", "--shard"])
    assert (a["order"], a["threads"], a["level"], a["no_pg"], a["format"]) == ("name", 3, 1, True, "sam")
    assert a["mem_per_thread"] == 100 << 20
    assert a["ray"] == {"partitions": 4, "splits": 2, "sharded": True, "max-retries": 3}
    # The last order wins, -N sticks, as in alnsort sort.
    assert aray.parse_args(["-N", "-n", "-o", "o.bam", bam])["order"] == "name-lexicographic"
    assert aray.parse_args(["-n", "--template-coordinate", "-o", "o.bam", bam])["order"] == "template-coordinate"
    # Values are checked by alnsort sort's own setters, with its messages.
    with pytest.raises(alnsort.AlnsortError, match="unknown-reference 'x'"):
        aray.parse_args(["--unknown-reference", "x", "-o", "o.bam", bam])
    with pytest.raises(alnsort.AlnsortError, match="--partitions x"):
        aray.parse_args(["--partitions", "x", "-o", "o.bam", bam])
    with pytest.raises(alnsort.AlnsortError, match="unknown option '--bogus'"):
        aray.parse_args(["--bogus", "-o", "o.bam", bam])


def test_duplicate_marking_options_reach_the_dataflow(bam):
    a = aray.parse_args(["--markdup", "--metrics", "m.txt", "--optical-dist", "100", "--remove-duplicates",
                         "--tagging-policy=all", "-o", "o.bam", bam])
    assert aray._markdup_kwargs(a) == {
        "markdup": True, "metrics": "m.txt",
        "markdup_options": {"optical_distance": "100", "remove_duplicates": True, "tagging_policy": "all"}}
    assert aray._markdup_kwargs(aray.parse_args(["-o", "o.bam", bam])) == {}
    # The group's options without --markdup: alnsort sort's own refusal.
    with pytest.raises(alnsort.AlnsortError, match="--markdup"):
        aray.parse_args(["--metrics", "m.txt", "-o", "o.bam", bam])


def test_idx_names_the_index_and_name_order_warns(bam, tmp_path):
    out = str(tmp_path / "out.bam")
    a = aray.parse_args(["--write-index", "-o", f"{out}##idx##{out}.bai", bam])
    assert a["output"] == out and a["index"] == ("bai", f"{out}.bai")
    a = aray.parse_args(["--write-index", "-o", f"{out}##idx##{tmp_path}/other.csi", bam])
    assert a["index"] == ("csi", f"{tmp_path}/other.csi")
    a = aray.parse_args(["--write-index", "--index-format", "bai", "-o", out, bam])
    assert a["index"] == ("bai", f"{out}.bai")
    # -n --write-index: no index, and alnsort sort's warning.
    a = aray.parse_args(["-n", "--write-index", "-o", f"{out}##idx##{out}.bai", bam])
    assert a["index"] is None
    assert a["warnings"] == ["Ignoring --write-index as it only works for position sorted files"]


def test_cram_and_standard_streams_are_refused_by_name(bam, tmp_path):
    with pytest.raises(alnsort.AlnsortError, match="CRAM output is not supported by the Ray driver"):
        aray.parse_args(["-o", str(tmp_path / "o.cram"), bam])
    with pytest.raises(alnsort.AlnsortError, match="CRAM output is not supported by the Ray driver"):
        aray.parse_args(["-O", "cram", "-o", str(tmp_path / "o.x"), bam])
    cram = str(tmp_path / "in.cram")
    harness.check_ok(harness.run_alnsort(["-O", "cram,no_ref=1", "-o", cram, bam]))
    with pytest.raises(alnsort.AlnsortError, match=re.escape(f"{cram}: CRAM input is not supported")):
        aray.parse_args(["-o", str(tmp_path / "o.bam"), cram])
    with pytest.raises(alnsort.AlnsortError, match="not standard input"):
        aray.parse_args(["-o", "o.bam", "-"])
    with pytest.raises(alnsort.AlnsortError, match="not standard output"):
        aray.parse_args([bam])


def _ray(args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    return subprocess.run([sys.executable, "-m", "alnsort.ray"] + args, capture_output=True, text=True,
                          env=env, timeout=300, cwd=cwd)


def test_help_lists_every_option(tmp_path):
    for args in (["--help"], ["sort", "--help"]):
        res = _ray(args, tmp_path)
        assert res.returncode == 0, res.stderr
        for name, synopsis, group in _alnsort.sort_option_table():
            assert synopsis in res.stdout, synopsis
            if name not in aray.HONOURED and group != "unsupported":
                assert re.search(rf"^  {re.escape(synopsis)} ", res.stdout, re.M) or f"  {synopsis}\n" in res.stdout, name
        assert all(len(line) <= 80 for line in res.stdout.splitlines()), "80 columns"
        for name, _, _ in aray.RAY_OPTIONS:
            assert f"--{name}" in res.stdout, name
        # Each refused option is listed with why.
        words = " ".join(res.stdout.split())
        for name, why in aray.REFUSED.items():
            assert why in words, name
    res = _ray(["sort", "-K", "5", "-o", "o.bam", "x.bam"], tmp_path)
    assert res.returncode == 1
    assert "-K is not supported by the Ray driver" in res.stderr


def test_nf_core_idx_form_runs_on_ray(bam, tmp_path):
    out = str(tmp_path / "out.bam")
    res = _ray(["sort", "--write-index", "--splits", "2", "--partitions", "2",
                "-o", f"{out}##idx##{out}.bai", bam], tmp_path)
    assert res.returncode == 0, res.stderr
    assert not any("##idx##" in p for p in os.listdir(tmp_path)), os.listdir(tmp_path)
    assert os.path.exists(f"{out}.bai") and not os.path.exists(f"{out}.csi")
    want = str(tmp_path / "want.bam")
    harness.check_ok(harness.run_alnsort(["-o", want, bam]))
    assert records(out) == records(want)
    with pysam.AlignmentFile(out, index_filename=f"{out}.bai") as f:
        name = f.references[0]
        assert sum(1 for _ in f.fetch(name)) == f.count(name) > 0
    # -n --write-index: the warning alnsort sort prints, and no index.
    byname = str(tmp_path / "byname.bam")
    res = _ray(["sort", "-n", "--write-index", "--splits", "2", "-o", byname, bam], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "[W::alnsort] Ignoring --write-index as it only works for position sorted files" in res.stderr
    assert not os.path.exists(byname + ".csi")


def test_every_duplicate_marking_option_reaches_the_dataflow(bam):
    """Every option of alnsort sort's group "Duplicate marking", as the
    table lists it, is read by the driver into sort()'s duplicate-marking
    keywords with its value: the driver's list (MARKDUP_OPTIONS) comes
    from the engine's table, so an option added there reaches the Ray
    dataflow with nothing else to update."""
    keyword = {name: key for key, (name, _, _) in alnsort.option_keywords("sort").items()}
    group = [(name, synopsis) for name, synopsis, g in _alnsort.sort_option_table() if g == "markdup"]
    assert len(group) >= 11, group
    for name, synopsis in group:
        value = _value(synopsis)
        args = ([] if name == "--markdup" else ["--markdup"]) + [name, *value, "-o", "o.bam", bam]
        got = aray._markdup_kwargs(aray.parse_args(args))
        assert got["markdup"] is True, (name, got)
        if name == "--metrics":
            assert got["metrics"] == value[0] and got["markdup_options"] == {}, (name, got)
        elif name != "--markdup":
            want = {keyword[name]: value[0] if value else True}
            assert got["markdup_options"] == want, (name, got)


def test_samtools_markdup_is_refused_by_name(bam):
    """--markdup=samtools (samtools' answer) is not run by the driver's tasks (Picard's): refused by
    name, as are samtools markdup's own options; --markdup=picard is --markdup."""
    with pytest.raises(alnsort.AlnsortError) as e:
        aray.parse_args(["--markdup=samtools", "-o", "o.bam", bam])
    assert "--markdup=samtools is not supported by the Ray driver" in str(e.value)
    with pytest.raises(alnsort.AlnsortError) as e:
        aray.parse_args(["--markdup=samtools", "--mode", "s", "-o", "o.bam", bam])
    assert str(e.value).startswith("--mode is not supported by the Ray driver"), str(e.value)
    got = aray._markdup_kwargs(aray.parse_args(["--markdup=picard", "-o", "o.bam", bam]))
    assert got["markdup"] is True
