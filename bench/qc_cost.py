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
    t = time.perf_counter()
    res = subprocess.run(argv, capture_output=True)
    took = time.perf_counter() - t
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{res.stderr.decode()}")
    return took


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
    times: dict[str, list[tuple[float, str]]] = {k: [] for k in configs}
    out = work / "out.bam"
    for _ in range(a.rounds):
        for name, extra in configs.items():
            s = timed([a.alnsort, "sort", "-@", t, "-m", "1G", *extra, "-o", str(out), a.input])
            times[name].append((s, md5(out)))
    decode: dict[str, list[float]] = {"alnsort verify": [], "samtools view -c (pysam 1.24)": []}
    for _ in range(a.rounds):
        decode["alnsort verify"].append(timed([a.alnsort, "verify", "-@", t, str(out)]))
        decode["samtools view -c (pysam 1.24)"].append(
            timed([sys.executable, str(ORACLE), "view", "-c", "-@", t, str(out)]))
    print("| configuration | wall s per run | median | output md5 |")
    print("|---|---|---|---|")
    for name, runs in times.items():
        secs = ", ".join(f"{s:.2f}" for s, _ in runs)
        sums = sorted({m for _, m in runs})
        print(f"| `{name}` | {secs} | {statistics.median(s for s, _ in runs):.2f} | {' '.join(sums)} |")
    print()
    print("| read of the sorted output | wall s per run | median |")
    print("|---|---|---|")
    for name, runs in decode.items():
        print(f"| `{name}` | {', '.join(f'{s:.2f}' for s in runs)} | {statistics.median(runs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
