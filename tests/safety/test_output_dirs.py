"""An output (or index) that cannot be created is found before any input is
read, and the message names it (issue 8, item 8). Before this was fixed a
missing output directory was reported as "cannot create a temporary
directory in nodir" when TMPDIR was unset (the temp directory defaults to
the output's directory), and with TMPDIR set only after the whole input had
been read and sorted.

"Before any input is read" is checked by giving the input on a pipe that is
never closed: a run that starts reading would wait on it forever (the test
then fails on its timeout); a run that checks its destination first exits at
once. The temp directory (TMPDIR) must stay empty.

A read-only directory is made with a read-only tmpfs mount, since as root
permission bits do not stop writes (skipped, with the reason, where mounting
is not permitted); a path whose parent is a regular file gives ENOTDIR.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import safety_util as u

FAST_S = 20


def run_on_open_pipe(args: list[str], tmpdir: Path | None) -> tuple[int, str]:
    """Runs `alnsort sort ARGS -` with a BAM header and a few records on a
    stdin pipe that stays open; returns (exit status, stderr)."""
    env = dict(os.environ)
    env.pop("TMPDIR", None)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    proc = subprocess.Popen([u.alnsort_bin(), "sort", *args, "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        try:
            proc.stdin.write(u.bam_file(u.bam_header(), u.records(100), eof=False))
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # alnsort already exited without reading: what we want
        try:
            rc = proc.wait(timeout=FAST_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"alnsort was still running after {FAST_S}s: it read its input before checking "
                        f"that the output can be created")
        return rc, proc.stderr.read().decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stderr):
            try:
                f.close()
            except BrokenPipeError:
                pass


@pytest.fixture(params=["TMPDIR_unset", "TMPDIR_set"])
def tmpdir_case(request, tmp_path: Path) -> Path | None:
    if request.param == "TMPDIR_unset":
        return None
    t = tmp_path / "tmpdir"
    t.mkdir()
    return t


def check(rc: int, err: str, pattern: str, tmpdir: Path | None) -> None:
    ctx = f"exit {rc}; stderr:\n{err}"
    assert rc == 1, ctx
    assert "panicked" not in err, ctx
    assert re.search(pattern, err), f"expected /{pattern}/\n{ctx}"
    assert "temporary directory" not in err, ctx
    if tmpdir is not None:
        assert u.entries(tmpdir) == [], f"a temp directory was made before the output was checked\n{ctx}"


def test_missing_output_directory(tmpdir_case: Path | None, tmp_path: Path):
    out = tmp_path / "nodir" / "out.bam"
    rc, err = run_on_open_pipe(["-o", str(out)], tmpdir_case)
    check(rc, err, rf"cannot create output '{re.escape(str(out))}': directory '{re.escape(str(out.parent))}' "
                   r"does not exist", tmpdir_case)
    assert not (tmp_path / "nodir").exists()


def test_output_directory_is_a_file(tmpdir_case: Path | None, tmp_path: Path):
    f = tmp_path / "plain.txt"
    f.write_text("x")
    out = f / "out.bam"
    rc, err = run_on_open_pipe(["-o", str(out)], tmpdir_case)
    check(rc, err, rf"cannot create output '{re.escape(str(out))}': '{re.escape(str(f))}' is not a directory",
          tmpdir_case)
    assert f.read_text() == "x"


def test_output_is_a_directory(tmpdir_case: Path | None, tmp_path: Path):
    d = tmp_path / "adir"
    d.mkdir()
    rc, err = run_on_open_pipe(["-o", str(d)], tmpdir_case)
    check(rc, err, rf"cannot create output '{re.escape(str(d))}': '{re.escape(str(d))}' is a directory", tmpdir_case)
    assert u.entries(d) == []


def test_read_only_output_directory(tmpdir_case: Path | None, tmp_path: Path):
    ro = tmp_path / "ro"
    ro.mkdir()
    with u.mounted_tmpfs(ro, "ro,size=1m") as why_not:
        if why_not:
            pytest.skip(f"cannot make a read-only directory (as root permission bits do not stop writes): "
                        f"{why_not}")
        out = ro / "out.bam"
        rc, err = run_on_open_pipe(["-o", str(out)], tmpdir_case)
        check(rc, err, rf"cannot create output '{re.escape(str(out))}': directory '{re.escape(str(ro))}' is on "
                       r"a read-only file ?system", tmpdir_case)


def test_missing_index_directory(tmpdir_case: Path | None, tmp_path: Path):
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "out.bam"
    idx = tmp_path / "noidx" / "out.bam.bai"
    rc, err = run_on_open_pipe(["--write-index", "-o", f"{out}##idx##{idx}"], tmpdir_case)
    check(rc, err, rf"cannot create index '{re.escape(str(idx))}': directory '{re.escape(str(idx.parent))}' "
                   r"does not exist", tmpdir_case)
    assert u.entries(outdir) == [], f"the pending output was left: {u.entries(outdir)}"
