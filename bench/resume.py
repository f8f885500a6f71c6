"""Cost of `alnsort sort --resume DIR` (issue 39): wall and CPU seconds of a
plain sort and of the same sort with --resume, at -m 100M and -m 1G, -@ 2,
alternating; of a rerun after a kill at about 80% of the runs
(ALNSORT_TEST_KILL_AFTER_RUNS, docs/resume.md); and of a rerun after a kill
at 50% and 80% of the output written (ALNSORT_TEST_OUTPUT_STEP at a tenth of
the output, ALNSORT_TEST_KILL_AFTER_OUTPUT=5 and 8). Beside them, the share
of a plain sort's wall time spent after its input is read (the final merge
and the output; `--stats-json` phases): no rerun after a kill before the
output is started can take less. Prints Markdown tables.

    [MEMS=100M,1G] python bench/resume.py BIN INPUT.bam WORKDIR [REPEATS]
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(argv: list[str], env_add: dict | None = None) -> tuple[float, float, int]:
    env = dict(os.environ)
    env.update(env_add or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode


def main() -> None:
    binary, inp, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for mem in os.environ.get("MEMS", "100M,1G").split(","):
        base = [binary, "sort", "-@", "2", "-m", mem, "--no-PG", "-o", str(work / "out.bam")]
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "resume": []}
        for _ in range(repeats):
            for kind in ("plain", "resume"):
                extra = ["--resume", str(work / "r")] if kind == "resume" else []
                w, c, rc = run([*base, *extra, inp])
                assert rc == 0, rc
                times[kind].append((w, c))
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in times.items()}
        row = {"mem": mem, **{f"{k}_wall": v[0] for k, v in med.items()}, **{f"{k}_cpu": v[1] for k, v in med.items()}}
        # The runs a sort keeps (its spills): killed before the final merge.
        shutil.rmtree(work / "r", ignore_errors=True)
        _, _, rc = run([*base, "--resume", str(work / "r"), inp], {"ALNSORT_TEST_KILL_AT": "merge"})
        assert rc == -9, rc
        spills = len(list((work / "r").glob("kept-*.alnrun")))
        row["spills"] = spills
        # Kill at ~80% of the runs, then rerun.
        if spills >= 2:
            n = max(1, int(spills * 0.8))
            shutil.rmtree(work / "r", ignore_errors=True)
            rr = [*base, "--resume", str(work / "r"), inp]
            w1, c1, rc = run(rr, {"ALNSORT_TEST_KILL_AFTER_RUNS": str(n)})
            assert rc == -9, rc
            w2, c2, rc = run(rr)
            assert rc == 0, rc
            row.update(kill_after=n, killed_wall=w1, rerun_wall=w2, rerun_cpu=c2)
        # The plain sort's phases: what comes after the input is read.
        stats = work / "stats.json"
        w, _, rc = run([*base, "--stats-json", str(stats), inp])
        assert rc == 0, rc
        phases = {p["phase"]: p["wall_s"] for p in json.loads(stats.read_text())["phases"]}
        after_input = sum(v for k, v in phases.items() if k != "read and sort")
        row["after_input_share"] = after_input / sum(phases.values())
        # Kills while writing the output, at 50% and 80% of it.
        size = (work / "out.bam").stat().st_size
        step = {"ALNSORT_TEST_OUTPUT_STEP": str(size // 10)}
        for at in (5, 8):
            reruns = []
            for _ in range(repeats):
                shutil.rmtree(work / "r", ignore_errors=True)
                rr = [*base, "--resume", str(work / "r"), inp]
                _, _, rc = run(rr, {**step, "ALNSORT_TEST_KILL_AFTER_OUTPUT": str(at)})
                assert rc == -9, rc
                w2, c2, rc = run(rr, step)
                assert rc == 0, rc
                reruns.append((w2, c2))
            row[f"out{at}_wall"] = statistics.median(x[0] for x in reruns)
            row[f"out{at}_cpu"] = statistics.median(x[1] for x in reruns)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("| -m | spills | plain wall (s) | --resume wall (s) | ratio | plain CPU (s) | --resume CPU (s) | rerun after kill at run N | rerun wall (s) | rerun / plain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rerun = (f"{r['kill_after']} | {r['rerun_wall']:.2f} | {r['rerun_wall'] / r['plain_wall']:.2f}"
                 if "kill_after" in r else "- | - | -")
        print(f"| {r['mem']} | {r['spills']} | {r['plain_wall']:.2f} | {r['resume_wall']:.2f} | "
              f"{r['resume_wall'] / r['plain_wall']:.3f} | {r['plain_cpu']:.2f} | {r['resume_cpu']:.2f} | {rerun} |")
    print()
    print("| -m | plain wall after the input is read (share) | rerun after a kill at 50% of the output: wall s (/ plain) | CPU s (/ plain) | at 80%: wall s (/ plain) | CPU s (/ plain) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [f"{r['after_input_share']:.2f}"]
        for at in (5, 8):
            cells.append(f"{r[f'out{at}_wall']:.2f} ({r[f'out{at}_wall'] / r['plain_wall']:.2f})")
            cells.append(f"{r[f'out{at}_cpu']:.2f} ({r[f'out{at}_cpu'] / r['plain_cpu']:.2f})")
        print(f"| {r['mem']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
