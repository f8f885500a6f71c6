"""Progress display (project issue 8, items 4 and 5).

* With stderr a pipe, `--progress` writes a plain line every
  `--progress-interval` seconds (phase, records, a rate with its unit) and a
  final line; without `--progress` stderr stays empty. Input is fed through
  a pipe at a measured pace so the run lasts long enough to see the lines
  arrive, whatever the machine's speed.
* On a terminal (tmux, 80x24): no line ever exceeds 80 columns (wrapped
  lines are joined back with `capture-pane -J`, so a wrap shows as a long
  line), the bar is visible, rates carry a unit and at most one decimal,
  stdin input shows records and a rate, the display is gone when the sort
  ends, and after SIGINT the pane shows the interruption message and no
  progress line.

tmux missing: the terminal tests fail under CI=true and skip loudly elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import harness
import oracle
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "safety"))
import safety_util  # noqa: E402

pytestmark = pytest.mark.alnsort_only

LINE = re.compile(r"^\[alnsort\] progress (\d+\.\d)s: (read and sort|merge runs|merge and write|done), (.+)$")
# A rate: a count with at most one decimal and an optional k/M/G, then "rec/s".
RATE = re.compile(r"(?<![\d.,])(\d+(?:\.\d)?)(?: [kMG])? rec/s")
ANY_RATE = re.compile(r"[\d.,]+\S* ?\S*/s")
# What a terminal keeps when the run ends: one line, no bar.
SUMMARY = re.compile(r"\[alnsort\] done: \d+(\.\d)?( [kMG])? records in (\d+\.\d s|\d+m\d\ds|\d+h\d\dm), "
                     + RATE.pattern + r", peak RSS \d+\.\d\d (KiB|MiB|GiB)")


@pytest.fixture(scope="module")
def big_sam(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("progress_input")
    return safety_util.big_sam(d / "big.sam", 40_000_000, seed=31)


@pytest.fixture(scope="module")
def big_bam(big_sam) -> Path:
    bam = big_sam.with_suffix(".bam")
    oracle.to_bam(str(big_sam), str(bam))
    return bam


def feed_slowly(dst, src: Path, seconds: float, stop: threading.Event | None = None) -> None:
    """Writes SRC to DST spread over about SECONDS and closes DST. With STOP,
    writing ends early once it is set, and DST stays open until it is."""
    data = src.read_bytes()
    step = max(1, len(data) // int(seconds / 0.02))
    try:
        for i in range(0, len(data), step):
            if stop is not None and stop.is_set():
                break
            dst.write(data[i : i + step])
            dst.flush()
            time.sleep(0.02)
        if stop is not None:
            stop.wait(60)
    except BrokenPipeError:
        pass
    finally:
        try:
            dst.close()
        except BrokenPipeError:
            pass


def test_plain_lines_on_a_pipe(alnsort_bin, big_sam, tmp_path):
    interval = 0.25
    out = tmp_path / "out.bam"
    proc = subprocess.Popen([alnsort_bin, "sort", "--progress", "--progress-interval", str(interval),
                             "-o", str(out), "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=str(tmp_path))
    feeder = threading.Thread(target=feed_slowly, args=(proc.stdin, big_sam, 2.5))
    feeder.start()
    arrivals = []
    for raw in proc.stderr:
        arrivals.append((time.monotonic(), raw.decode("utf-8", "replace").rstrip("\n")))
    proc.wait(timeout=120)
    feeder.join()
    text = "\n".join(t for _, t in arrivals)
    assert proc.returncode == 0, text
    parsed = []
    for _, t in arrivals:
        m = LINE.match(t)
        assert m, f"not a progress line: {t!r}\nall of stderr:\n{text}"
        parsed.append(m)
    assert parsed and parsed[-1].group(2) == "done", text
    n = sum(1 for ln in big_sam.read_text().splitlines() if not ln.startswith("@"))
    assert re.fullmatch(rf"{re.escape(harness_count(n))} records in \d+\.\d s, {RATE.pattern}, peak RSS \d+\.\d\d (KiB|MiB|GiB)",
                        parsed[-1].group(3)), text
    periodic = parsed[:-1]
    assert len(periodic) >= 5, f"a 2.5 s run at {interval} s intervals printed {len(periodic)} lines:\n{text}"
    reading = [m for m in periodic if m.group(2) == "read and sort"]
    assert len(reading) >= 4, text
    for m in reading[1:]:
        body = m.group(3)
        assert re.search(r"^\d+(\.\d)?( [kMG])? records, ", body), body
        assert RATE.search(body), f"no rate with a unit: {body}"
        assert re.search(r"\d+(\.\d+)? (B|KiB|MiB|GiB) read \(uncompressed\)", body), body
    for m in periodic:
        for r in ANY_RATE.findall(m.group(3)):
            assert RATE.fullmatch(r), f"rate {r!r} has no unit or more than one decimal: {m.group(0)}"
    # The stamps are whole intervals apart, and the lines arrive that way too.
    stamps = [float(m.group(1)) for m in periodic]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    mean = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    assert interval * 0.8 <= mean <= interval * 1.3 and min(gaps) >= interval * 0.5, f"stamps {stamps}"
    times = [t for t, _ in arrivals[:-1]]
    real = sorted(b - a for a, b in zip(times, times[1:]))
    assert interval * 0.5 <= real[len(real) // 2] <= interval * 2, f"arrival gaps {real}"

    # Without --progress a pipe gets nothing; with --no-progress neither.
    for flags in ([], ["--no-progress"]):
        res = harness.run_alnsort([*flags, "-o", str(out), str(big_sam)], cwd=str(tmp_path))
        harness.check_ok(res)
        assert res.stderr == b"", f"{flags}: {res.stderr[:500]!r}"


def harness_count(n: int) -> str:
    """The display's k/M/G form of N (as progress.rs count_text)."""
    v, units, u = float(n), ["", " k", " M", " G"], 0
    while v >= 999.5 and u < 3:
        v, u = v / 1000, u + 1
    return str(n) if u == 0 else (f"{v:.1f}{units[u]}" if v < 99.95 else f"{v:.0f}{units[u]}")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--progress-interval", "0"], "invalid value '0' for --progress-interval: expected seconds"),
        (["--progress-interval", "soon"], "invalid value 'soon' for --progress-interval: expected seconds"),
        (["--no-progress", "--progress-interval", "1"], "--no-progress turns it off"),
    ],
)
def test_interval_refusals(alnsort_bin, inputs, tmp_path, args, message):
    res = harness.run_alnsort([*args, "-o", str(tmp_path / "o.bam"), inputs.sam("hdr_plain")], cwd=str(tmp_path))
    err = res.stderr.decode()
    assert res.returncode == 1 and message in err, err
    assert not (tmp_path / "o.bam").exists()


# ---- terminal -------------------------------------------------------------------


def need_tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        msg = "tmux is not installed: the live progress display on a terminal is NOT TESTED"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg, pytrace=False)
        print(f"\n*** SKIPPED: {msg} ***", file=sys.stderr)
        pytest.skip(msg)
    return path


class Pane:
    """One tmux server (its own socket) with one 80x24 window running CMD."""

    def __init__(self, tmux: str, tmp: Path, cmd: str):
        self.tmux, self.sock = tmux, f"alnsort-progress-{os.getpid()}-{time.monotonic_ns()}"
        self.run("new-session", "-d", "-x", "80", "-y", "24", f"cd {tmp} && {cmd}; echo EXIT=$?; sleep 60")

    def run(self, *args: str) -> str:
        return subprocess.run([self.tmux, "-L", self.sock, *args], capture_output=True, text=True,
                              timeout=30).stdout

    def capture(self) -> list[str]:
        return [ln.rstrip() for ln in self.run("capture-pane", "-p", "-J").splitlines()]

    def close(self) -> None:
        self.run("kill-server")


def watch(pane: Pane, until, timeout: float = 120) -> list[list[str]]:
    """Pane snapshots, as fast as tmux gives them, until UNTIL(lines) holds."""
    frames, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = pane.capture()
        frames.append(lines)
        if until(lines):
            return frames
        time.sleep(0.01)
    raise AssertionError("timed out; last pane:\n" + "\n".join(frames[-1] if frames else []))


def progress_lines(frames: list[list[str]]) -> list[str]:
    return [ln for f in frames for ln in f if "records" in ln and "EXIT=" not in ln]


def check_width_and_rates(lines: list[str]) -> None:
    for ln in lines:
        assert len(ln) <= 80, f"{len(ln)} columns (wrapped on an 80-column terminal): {ln!r}"
        for r in ANY_RATE.findall(ln):
            assert RATE.fullmatch(r), f"rate {r!r} has no unit or more than one decimal: {ln!r}"


def test_live_display_fits_80_columns(alnsort_bin, big_bam, tmp_path):
    """The live line fits 80 columns, shows a bar and rates, and at the end
    gives way to one summary line (records, time, rate, peak memory)."""
    tmux = need_tmux()
    pane = Pane(tmux, tmp_path, f"{alnsort_bin} sort -@1 -m 1M -o out.bam {big_bam}")
    try:
        frames = watch(pane, lambda ls: any(ln.startswith("EXIT=") for ln in ls))
    finally:
        pane.close()
    final = frames[-1]
    assert "EXIT=0" in final, "\n".join(final)
    lines = progress_lines(frames)
    assert lines, "no progress line was ever seen on the terminal"
    check_width_and_rates(lines)
    bars = [ln for ln in lines if re.search(r"\[[#-]{10,}\]\s+\d+%", ln)]
    assert bars, "no bar seen at 80 columns:\n" + "\n".join(sorted(set(lines)))
    assert any(RATE.search(ln) for ln in lines), "no rate with a unit:\n" + "\n".join(sorted(set(lines)))
    left = progress_lines([final])
    assert len(left) == 1 and SUMMARY.fullmatch(left[0].rstrip()), (
        "the end of the run should leave exactly one summary line:\n" + "\n".join(final))
    n = sum(1 for ln in big_bam.with_suffix(".sam").read_text().splitlines() if not ln.startswith("@"))
    assert left[0].startswith(f"[alnsort] done: {harness_count(n)} records in "), left[0]


def test_stdin_display_and_sigint_clears_it(alnsort_bin, big_sam, tmp_path):
    tmux = need_tmux()
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    pidfile = tmp_path / "pid"
    pane = Pane(tmux, tmp_path,
                f"sh -c 'echo $$ > {pidfile}; exec {alnsort_bin} sort -@1 -m 1M -o out.bam -' < {fifo}")
    done = threading.Event()
    feeder = None
    try:
        w = open(fifo, "wb")  # blocks until the pane's shell opens the FIFO; the feeder closes it
        feeder = threading.Thread(target=feed_slowly, args=(w, big_sam, 20, done))
        feeder.start()
        frames = watch(pane, lambda ls: any(RATE.search(ln) for ln in ls), timeout=60)
        lines = progress_lines(frames)
        check_width_and_rates(lines)
        seen = [ln for ln in lines if RATE.search(ln)][-1]
        assert re.search(r"\d+(\.\d)?( [kMG])? records", seen), seen
        os.kill(int(pidfile.read_text()), signal.SIGINT)
        frames = watch(pane, lambda ls: any(ln.startswith("EXIT=") for ln in ls), timeout=60)
    finally:
        done.set()
        pane.close()
        if feeder is not None:
            feeder.join()
    final = frames[-1]
    assert "EXIT=130" in final, "\n".join(final)
    assert any("interrupted" in ln for ln in final), "\n".join(final)
    assert not progress_lines([final]) and not any(RATE.search(ln) for ln in final), (
        "the progress line is still on screen after SIGINT:\n" + "\n".join(final)
    )
