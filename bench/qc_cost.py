#!/usr/bin/env python3
"""What `--flagstat`/`--idxstats` cost on a sort, and how fast `alnsort
verify` reads the output next to a plain decode.

    bench/qc_cost.py ALNSORT IN.bam WORKDIR [--rounds 3] [--threads 2]

Runs, interleaved round by round, `alnsort sort -@T` with and without
`--flagstat F --idxstats I` (and both again with `--write-index`), printing
wall seconds and the output's md5 per run (the reports must not change the
output), then `alnsort verify -@T` of the output beside `samtools view -c
-@T` (pysam's samtools 1.24, in a fresh process). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORACLE = HERE.parent / "tests" / "oracle.py"


def md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def timed(argv: list[str]) -> float:
    return timed_cpu(argv)[0]


def timed_cpu(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(argv, capture_output=True)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{res.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("alnsort")
    ap.add_argument("input")
    ap.add_argument("workdir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t = str(a.threads)
    configs = {
        "sort": [],
        "sort --flagstat --idxstats": ["--flagstat", str(work / "f.txt"), "--idxstats", str(work / "i.txt")],
        "sort --write-index": ["--write-index"],
        "sort --write-index --flagstat --idxstats": ["--write-index", "--flagstat", str(work / "f.txt"),
                                                     "--idxstats", str(work / "i.txt")],
    }
    times: dict[str, list[tuple[float, float, str]]] = {k: [] for k in configs}
    out = work / "out.bam"
    for _ in range(a.rounds):
        for name, extra in configs.items():
            # --no-PG: the @PG CL would name the options, and the bytes
            # are to be compared.
            s, cpu = timed_cpu([a.alnsort, "sort", "--no-PG", "-@", t, "-m", "1G", *extra, "-o", str(out),
                                a.input])
            times[name].append((s, cpu, md5(out)))
    decode: dict[str, list[float]] = {"alnsort verify": [], "samtools view -c (pysam 1.24)": []}
    for _ in range(a.rounds):
        decode["alnsort verify"].append(timed([a.alnsort, "verify", "-@", t, str(out)]))
        decode["samtools view -c (pysam 1.24)"].append(
            timed([sys.executable, str(ORACLE), "view", "-c", "-@", t, str(out)]))
    print("| configuration | wall s per run | median wall | CPU s per run | median CPU | output md5 |")
    print("|---|---|---|---|---|---|")
    for name, runs in times.items():
        secs = ", ".join(f"{s:.2f}" for s, _, _ in runs)
        cpus = ", ".join(f"{c:.2f}" for _, c, _ in runs)
        sums = sorted({m for _, _, m in runs})
        print(f"| `{name}` | {secs} | {statistics.median(s for s, _, _ in runs):.2f} | {cpus} | "
              f"{statistics.median(c for _, c, _ in runs):.2f} | {' '.join(sums)} |")
    print()
    print("| read of the sorted output | wall s per run | median |")
    print("|---|---|---|")
    for name, runs in decode.items():
        print(f"| `{name}` | {', '.join(f'{s:.2f}' for s in runs)} | {statistics.median(runs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
