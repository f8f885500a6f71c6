"""Interrupted runs leave nothing behind (issue 3, "Temp files"): SIGINT,
SIGTERM and SIGHUP, sent while alnsort is spilling run files and while it is
merging them into the output, make it exit 130/143/129 with its private temp
directory removed, no output file, no pending output temp file and no index.
Two concurrent runs sharing one `-T` both succeed with correct output; a run
killed with SIGKILL may leave its directory, and the next run with the same
`-T` succeeds without touching it.

The phase is observed from outside: run files appearing under `-T` mean the
sort is spilling (and still reading: the pending output, created empty
before any input is read, has no bytes yet); the pending output
`.<name>.alnsort-<pid>-<n>.tmp` growing beside the output means the final
merge is writing.

A signal that was ignored when alnsort started (`nohup`, or a shell that
ignores SIGINT for background jobs) stays ignored: the run finishes with the
same bytes as an uninterrupted one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import safety_util as u

# Big enough that `-m 1M` spills dozens of runs and the final merge writes for
# most of a second on this machine (measured: ~1.2 s total for 40 MB).
INPUT_BYTES = 40_000_000
POLL_S = 0.002
PHASE_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sig_input")
    return u.big_sam(d / "big.sam", INPUT_BYTES)


@pytest.fixture(scope="module")
def small_input(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sig_small")
    return u.big_sam(d / "small.sam", 8_000_000, seed=21)


def start(args: list[str], log: Path) -> subprocess.Popen:
    err = open(log, "wb")
    return subprocess.Popen([u.alnsort_bin(), "sort", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=err, preexec_fn=u.default_signals)


def run_files(tdir: Path) -> list[Path]:
    return [p for p in tdir.rglob("*") if p.is_file()]


def wait_for(proc: subprocess.Popen, cond, what: str) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"alnsort exited ({proc.returncode}) before {what} was seen; input too small for this machine?")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{what} not seen within {PHASE_TIMEOUT_S}s")
        time.sleep(POLL_S)


SIGNALS = {"SIGINT": (signal.SIGINT, 130), "SIGTERM": (signal.SIGTERM, 143), "SIGHUP": (signal.SIGHUP, 129)}


@pytest.mark.parametrize("phase", ["spill", "merge"])
@pytest.mark.parametrize("signame", list(SIGNALS))
def test_signal_cleans_up(signame: str, phase: str, big_input: Path, tmp_path: Path):
    sig, status = SIGNALS[signame]
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    out = outdir / "sorted.bam"
    log = tmp_path / "stderr"
    proc = start(["-m", "1M", "-T", str(tdir), "--write-index", "-o", str(out), str(big_input)], log)
    try:
        if phase == "spill":
            wait_for(proc, lambda: len(run_files(tdir)) >= 2, "run files under -T")
            state = f"run files {len(run_files(tdir))}, pending output {u.pending_outputs(outdir)}"
            # The pending output is created (empty) before any input is
            # read; it grows only once the final merge writes.
            spilling = all((outdir / p).stat().st_size == 0 for p in u.pending_outputs(outdir))
        else:
            def writing() -> bool:
                p = u.pending_outputs(outdir)
                return bool(p) and (outdir / p[0]).stat().st_size > 1_000_000
            wait_for(proc, writing, "pending output beside -o growing past 1 MB")
            state = f"run files {len(run_files(tdir))}, pending output {u.pending_outputs(outdir)}"
            spilling = False
            merging = bool(run_files(tdir))
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text(errors="replace")
    ctx = f"{signame} during {phase} (at signal: {state}); exit {rc}; stderr:\n{err}"
    if phase == "spill":
        assert spilling, f"signal was not sent while spilling\n{ctx}"
    else:
        assert merging, f"signal was not sent while merging run files\n{ctx}"
    assert rc == status, ctx
    assert "interrupted by signal" in err, ctx
    assert u.entries(tdir) == [], f"debris in -T: {u.entries(tdir)}\n{ctx}"
    assert u.entries(outdir) == [], f"output or temp output left: {u.entries(outdir)}\n{ctx}"


def test_signal_ends_the_run_when_stderr_has_no_reader(big_input: Path, tmp_path: Path):
    """A parent killed before alnsort (a benchmark script, a pipeline's
    reader) leaves its stderr a pipe with no reader: the notice cannot be
    written, and the signal must still end the run with its files removed
    (the failed write once stopped the signal thread, and the run then
    waited for its exit for ever)."""
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    proc = subprocess.Popen([u.alnsort_bin(), "sort", "-m", "1M", "-T", str(tdir), "-o", str(outdir / "sorted.bam"),
                             str(big_input)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=u.default_signals)
    try:
        proc.stderr.close()
        wait_for(proc, lambda: len(run_files(tdir)) >= 2, "run files under -T")
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("alnsort did not exit within 60 s of SIGTERM with its stderr reader gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 143
    assert u.entries(tdir) == [], f"debris in -T: {u.entries(tdir)}"
    assert u.entries(outdir) == [], f"output or temp output left: {u.entries(outdir)}"


def _sorted_records(path: Path) -> list[str]:
    import oracle

    return [line for line in oracle.view(str(path)).splitlines() if not line.startswith("@")]


def test_concurrent_runs_share_temp_dir(small_input: Path, tmp_path: Path):
    """Two runs at once with the same -T (and the same output directory)
    both succeed, both outputs equal samtools' sort, and -T is empty after."""
    import oracle

    tdir = tmp_path / "T"
    tdir.mkdir()
    outs = [tmp_path / f"out{i}.bam" for i in range(2)]
    procs = [start(["-m", "1M", "-T", str(tdir), "-o", str(o), str(small_input)], tmp_path / f"log{i}")
             for i, o in enumerate(outs)]
    # Both must really overlap: both private directories exist at once.
    saw_two = False
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if len([d for d in tdir.iterdir() if d.is_dir()]) >= 2:
            saw_two = True
        time.sleep(POLL_S)
    rcs = [p.wait(timeout=120) for p in procs]
    logs = [(tmp_path / f"log{i}").read_text() for i in range(2)]
    assert rcs == [0, 0], logs
    assert saw_two, "the two runs did not overlap (no moment with two private temp dirs)"
    assert u.entries(tdir) == []
    want = [line for line in oracle.sort_sam_text([], str(small_input)).splitlines() if not line.startswith("@")]
    for o in outs:
        got = _sorted_records(o)
        assert len(got) == len(want) and got == want, f"{o}: output differs from samtools sort"


@pytest.mark.parametrize("phase", ["spill", "merge"])
def test_sigkill_leftovers_do_not_disturb_next_run(phase: str, small_input: Path, tmp_path: Path):
    """SIGKILL cannot be caught: the run's directory (and, mid-merge, its
    pending output) stay. The next run with the same -T and -o succeeds,
    leaves the dead run's files exactly as they were, and cleans up its own."""
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    out = outdir / "sorted.bam"
    proc = start(["-m", "1M", "-T", str(tdir), "-o", str(out), str(small_input)], tmp_path / "log")
    if phase == "spill":
        wait_for(proc, lambda: len(run_files(tdir)) >= 2, "run files under -T")
    else:
        # The pending output exists (empty) from the start; bytes in it
        # mean the final merge is writing.
        wait_for(proc, lambda: any((outdir / p).stat().st_size > 0 for p in u.pending_outputs(outdir)),
                 "pending output being written")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    time.sleep(0.05)

    def snapshot(d: Path) -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*")}

    left_t, left_out = snapshot(tdir), snapshot(outdir)
    assert left_t, "SIGKILL left nothing under -T (expected the dead run's directory)"
    assert not out.exists(), "a killed run must never have renamed its output into place"
    res = u.run(["-m", "1M", "-T", str(tdir), "-o", str(out), str(small_input)])
    assert res.returncode == 0, res.stderr.decode()
    assert out.exists()
    assert snapshot(tdir) == left_t, "the second run touched (or left) files under -T"
    after_out = snapshot(outdir)
    del after_out["sorted.bam"]
    assert after_out == left_out, "the second run touched the dead run's pending output or left its own"
    assert len(_sorted_records(out)) == sum(1 for line in open(small_input) if not line.startswith("@"))


def _ignoring(*sigs: int):
    def pre():
        u.default_signals()
        for s in sigs:
            signal.signal(s, signal.SIG_IGN)

    return pre


@pytest.mark.parametrize("signame", ["SIGHUP", "SIGINT"])
def test_ignored_signal_stays_ignored(signame: str, small_input: Path, tmp_path: Path):
    """`nohup alnsort sort ...`: SIGHUP was SIG_IGN when alnsort started, so
    a SIGHUP mid-run must not stop it (same for an ignored SIGINT). The run
    exits 0 and its output equals that of an undisturbed run."""
    sig = getattr(signal, signame)
    tdir = tmp_path / "T"
    tdir.mkdir()
    out = tmp_path / "sorted.bam"
    # The same command line undisturbed (the @PG line holds it).
    res = u.run(["-m", "1M", "-T", str(tdir), "-o", str(out), str(small_input)])
    assert res.returncode == 0, res.stderr.decode()
    ref = tmp_path / "ref.bam"
    out.rename(ref)
    log = tmp_path / "stderr"
    with open(log, "wb") as err:
        proc = subprocess.Popen([u.alnsort_bin(), "sort", "-m", "1M", "-T", str(tdir), "-o", str(out),
                                 str(small_input)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=_ignoring(sig))
    try:
        wait_for(proc, lambda: len(run_files(tdir)) >= 2, "run files under -T")
        proc.send_signal(sig)
        time.sleep(0.05)
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ctx = f"{signame} ignored at start, sent mid-run: exit {rc}; stderr:\n{log.read_text(errors='replace')}"
    assert rc == 0, ctx
    assert out.read_bytes() == ref.read_bytes(), f"output differs from an undisturbed run\n{ctx}"
    assert u.entries(tdir) == [], ctx


def test_other_signals_still_handled_when_one_is_ignored(big_input: Path, tmp_path: Path):
    """Ignoring SIGHUP (nohup) must not disable the cleanup on SIGTERM."""
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    log = tmp_path / "stderr"
    with open(log, "wb") as err:
        proc = subprocess.Popen([u.alnsort_bin(), "sort", "-m", "1M", "-T", str(tdir), "-o",
                                 str(outdir / "sorted.bam"), str(big_input)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_ignoring(signal.SIGHUP))
    try:
        wait_for(proc, lambda: len(run_files(tdir)) >= 2, "run files under -T")
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.05)
        assert proc.poll() is None, "an ignored SIGHUP stopped the run"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ctx = f"exit {rc}; stderr:\n{log.read_text(errors='replace')}"
    assert rc == 143, ctx
    assert u.entries(tdir) == [] and u.entries(outdir) == [], ctx
