"""The keywords of `alnsort.sort()` and `alnsort.merge()` are derived from
the commands' option tables (`alnsort.option_keywords`): the test walks
each table and, for every option, calls the function with its keyword and
runs the command with the option, and checks the two end alike: the same
output bytes, or the same message (a refused option refused by name, a
bad value by the command's words). The output, `--help` and `--version`
are not keywords of a run; the older keywords (`order`, `output_format`,
`tmp_dir`, `index`) keep working beside the derived ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness

alnsort = pytest.importorskip("alnsort")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "examples" / "example.sam")

#: A value of each value name of the tables (the help's names).
SAMPLES = {
    "TAG": "RG",
    "FILE": "x.out",
    "FMT[,OPT=VAL]...": "sam",
    "OPT=VAL": "level=1",
    "INT": "1",
    "INT[K|M|G]": "2M",
    "PREFIX": "tmp",
    "SIZE": "1G",
    "SECS": "1",
    "error|unmapped": "unmapped",
    "default|json|tsv": "json",
    "N": "2500",
    "STRATEGY": "sum-of-base-qualities",
    "POLICY": "none",
    "REGEX": "([0-9]+):([0-9]+):([0-9]+)",
    "VALUE": 5,
    "STR": "ref",
    # --markdup[=picard|samtools]: given alone (True); markdup="samtools" has a test of its own.
    "[=picard|samtools]": True,
    "t|s": "s",
    "ORDER": "txy",
    "CHAR": "_",
    # --resume DIR: made in the run's own directory, left empty and removed on success.
    "DIR": "resume.d",
}

#: Options that are arguments of the function, or ask for no run.
NOT_A_RUN = {"output", "help", "version"}


def _value(keyword: str, value_name):
    if value_name is None:
        return True
    assert value_name in SAMPLES, f"no sample value for {value_name} ({keyword}): add one"
    return SAMPLES[value_name]


#: Reports whose text holds the run's times: compared by name only.
TIMED = {"x.out"}


def _files(workdir: Path, timed: bool) -> dict:
    return {
        p.name: (None if timed and p.name in TIMED else p.read_bytes())
        for p in sorted(workdir.iterdir())
        if p.is_file()
    }


def _outcome(run, workdir: Path, timed: bool) -> tuple:
    """(ok, message or files): what a run left in workdir."""
    try:
        run()
    except alnsort.AlnsortError as e:
        return (False, str(e))
    return (True, _files(workdir, timed))


def _cli_outcome(argv: list[str], workdir: Path, command: str, timed: bool) -> tuple:
    res = subprocess.run(argv, executable=harness.alnsort_path(), cwd=workdir, capture_output=True,
                         text=True, timeout=120)
    if res.returncode != 0:
        # Warnings may come first; the failure is the command's line.
        prefix = f"alnsort {command}: "
        lines = [line for line in res.stderr.splitlines() if line.startswith(prefix)]
        assert lines, res.stderr
        return (False, lines[0][len(prefix):])
    return (True, _files(workdir, timed))


def _dirs(tmp_path: Path, name: str) -> tuple[Path, Path]:
    py, cli = tmp_path / name / "py", tmp_path / name / "cli"
    for d in (py, cli):
        d.mkdir(parents=True)
        (d / "tmp").mkdir()
    return py, cli


def test_every_sort_option_is_a_keyword_that_runs_as_the_command(tmp_path, monkeypatch):
    table = alnsort.option_keywords("sort")
    assert {"name", "tag", "level", "threads", "max_memory", "write_index", "markdup", "no_pg"} <= set(table)
    for keyword, (name, value_name, refused) in table.items():
        if keyword in NOT_A_RUN:
            continue
        value = _value(keyword, value_name)
        kw = {keyword: value}
        if keyword == "metrics":
            kw = {"markdup": True, "metrics": value}
        py, cli = _dirs(tmp_path, keyword)
        monkeypatch.chdir(py)
        timed = keyword in ("stats_json", "mqc")
        got = _outcome(lambda: alnsort.sort(EXAMPLE, "out.bam", **kw), py, timed)
        argv = alnsort.sort_argv(EXAMPLE, "out.bam", **kw)
        assert name in argv, (keyword, argv)
        want = _cli_outcome(argv, cli, "sort", timed)
        assert got == want, f"{keyword} ({name}): alnsort.sort() {got!r:.300}, the command {want!r:.300}"
        if refused is not None:
            assert got[0] is False and name in got[1] and refused in got[1], (keyword, got)


def test_markdup_samtools_is_the_command_line_s(tmp_path, monkeypatch):
    """markdup="samtools" with samtools markdup's keywords: the run `alnsort sort --markdup=samtools ...`
    gives (the same outcome and records); markdup="picard" is markdup=True; another value is refused."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "markdup"))
    import smarkdup_gen

    src = tmp_path / "grouped.sam"  # name-grouped, with duplicates
    src.write_text(smarkdup_gen.generate(1))
    kw = {"markdup": "samtools", "optical_distance": 100, "mark_supplementary": True, "mode": "s"}
    py, cli = _dirs(tmp_path, "markdup-samtools")
    monkeypatch.chdir(py)
    got = _outcome(lambda: alnsort.sort(str(src), "out.bam", **kw), py, False)
    argv = alnsort.sort_argv(str(src), "out.bam", **kw)
    assert "--markdup=samtools" in argv and "--mark-supplementary" in argv, argv
    want = _cli_outcome(argv, cli, "sort", False)
    assert got == want and got[0] is not False, (got, want)
    assert alnsort.sort_argv(EXAMPLE, "o.bam", markdup="picard")[2] == "--markdup=picard"
    with pytest.raises(alnsort.AlnsortError, match="--markdup=gatk"):
        alnsort.sort(EXAMPLE, "out.bam", markdup="gatk")


def test_every_merge_option_is_a_keyword_that_runs_as_the_command(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    inputs = []
    for i in range(2):
        p = src / f"in{i}.bam"
        harness.check_ok(harness.run_alnsort(["-o", str(p), EXAMPLE]))
        inputs.append(str(p))
    table = alnsort.option_keywords("merge")
    assert {"force", "combine_rg", "combine_pg", "seed", "region", "threads", "level1"} <= set(table)
    for keyword, (name, value_name, refused) in table.items():
        if keyword in NOT_A_RUN:
            continue
        value = _value(keyword, value_name)
        py, cli = _dirs(tmp_path, f"merge-{keyword}")
        monkeypatch.chdir(py)
        got = _outcome(lambda: alnsort.merge(inputs, "out.bam", **{keyword: value}), py, False)
        words = [name] if value is True else [name, str(value)]
        seed = [] if keyword == "seed" else ["-s", "0"]
        argv = ["alnsort", "merge", *words, *seed, "-o", "out.bam", *inputs]
        want = _cli_outcome(argv, cli, "merge", False)
        assert got == want, f"{keyword} ({name}): alnsort.merge() {got!r:.300}, the command {want!r:.300}"
        if refused is not None:
            assert got[0] is False and name in got[1] and refused in got[1], (keyword, got)


@pytest.mark.parametrize("command", ["sort", "merge"])
def test_options_that_are_not_a_run_are_refused_by_name(tmp_path, command):
    call = alnsort.sort if command == "sort" else alnsort.merge
    first = EXAMPLE if command == "sort" else [EXAMPLE]
    table = alnsort.option_keywords(command)
    for keyword in sorted(NOT_A_RUN & set(table)):
        name = table[keyword][0]
        if keyword == "output":
            with pytest.raises(TypeError):
                call(first, tmp_path / "x.bam", **{keyword: "y.bam"})
            continue
        with pytest.raises(alnsort.AlnsortError, match=f"{name} \\({keyword}=\\) is not an option of a run"):
            call(first, tmp_path / "x.bam", **{keyword: True})
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        call(first, tmp_path / "x.bam", no_such_option=True)
    # A flag takes a bool, an option's value is no bool.
    with pytest.raises(TypeError):
        call(first, tmp_path / "x.bam", threads=True)
    with pytest.raises(TypeError):
        call(first, tmp_path / "x.bam", write_index="yes")
    assert not os.listdir(tmp_path)


def test_the_older_keywords_are_aliases(tmp_path):
    """order=, output_format=, tmp_dir= and index= write what the derived
    keywords they stand for write."""
    a = alnsort.sort_argv(EXAMPLE, "o.bam", order="name-lexicographic", output_format="sam", tmp_dir="t", index=True)
    b = alnsort.sort_argv(EXAMPLE, "o.bam", name_lexicographic=True, output_fmt="sam", tmp_prefix="t", write_index=True)
    assert a == b == ["alnsort", "sort", "-N", "-O", "sam", "-T", "t", "--write-index", "-o", "o.bam", EXAMPLE]
    assert alnsort.ALIASES == {"output_format": "output_fmt", "tmp_dir": "tmp_prefix"}
    x = alnsort.sort(EXAMPLE, tmp_path / "x.sam", order="name", output_format="sam", no_pg=True)
    y = alnsort.sort(EXAMPLE, tmp_path / "y.sam", name=True, output_fmt="sam", no_pg=True)
    assert x["records_out"] == y["records_out"]
    assert (tmp_path / "x.sam").read_bytes() == (tmp_path / "y.sam").read_bytes()


def test_the_stages_take_the_keywords_the_engine_table_gives_them():
    """A stage's keywords (`alnsort._keywords`, the one conversion every
    stage's options go through) are those the engine's table gives the
    stages (`_alnsort.stage_option_keywords()`), with `order` and their
    aliases: each is taken and stands for its option on the stage's
    command line; every other option of the table is refused as no
    keyword of a stage, so a new option reaches the stages (or is refused
    there) by its row of the table alone."""
    from alnsort import _alnsort

    table = alnsort.option_keywords("sort")
    stage = set(_alnsort.stage_option_keywords())
    assert stage <= set(table), stage - set(table)
    # The keywords the stages took before they came from the table still work.
    older = {"order", "threads", "max_memory", "level", "output_format", "tag", "tmp_dir", "no_pg", "unknown_reference"}
    assert {alnsort.ALIASES.get(k, k) for k in older - {"order"}} <= stage
    # A whole run's options (its output, index, report) are no stage's.
    assert not stage & {"output", "write_index", "stats_json", "progress", "markdup", "metrics", "help"}
    for keyword, (name, value_name, _) in table.items():
        value = _value(keyword, value_name)
        if keyword in stage:
            got = alnsort._keywords(**{keyword: value})
            assert got["command_line"][:2] == ["alnsort", "sort"] and name in got["command_line"], (keyword, got)
        else:
            with pytest.raises(TypeError, match=f"a stage got an unexpected keyword argument '{keyword}'"):
                alnsort._keywords(**{keyword: value})
    for alias in older - {"order"}:
        value = _value(alias, table[alnsort.ALIASES.get(alias, alias)][1])
        assert alnsort._keywords(**{alias: value})["options"], alias
    assert alnsort._keywords(order="name")["command_line"] == ["alnsort", "sort", "-n"]
