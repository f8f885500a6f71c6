#!/usr/bin/env python3
"""`samtools index` (pysam 0.24.1, samtools 1.24) against `alnsort index`.

    bench/index.py --input sorted.bam --alnsort target/release/alnsort [--threads 2] [--runs 5] [--csi]

Each tool indexes its own copy of the input, alternating, RUNS times; each
run is timed in a fresh process (wall clock, and user + system CPU of the
process from its rusage). samtools runs in-process in a Python that imports
pysam: the import alone is timed too and reported beside it. Prints a
Markdown table with the md5 of both index files (they must be the same).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, user + system CPU seconds) of one run of ARGV."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def md5(path: str) -> str:
    return hashlib.md5(open(path, "rb").read()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--alnsort", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--csi", action="store_true")
    a = ap.parse_args()
    ext = "csi" if a.csi else "bai"
    opts = ["-c"] if a.csi else []
    tmp = tempfile.mkdtemp(prefix="index-bench-")
    try:
        theirs, ours = os.path.join(tmp, "samtools.bam"), os.path.join(tmp, "alnsort.bam")
        shutil.copy(a.input, theirs)
        shutil.copy(a.input, ours)
        py = sys.executable
        sam = [py, "-c", f"import pysam; pysam.index({', '.join(repr(x) for x in [*opts, '-@', a.threads, theirs])})"]
        aln = [a.alnsort, "index", *opts, "-@", a.threads, ours]
        imp = [py, "-c", "import pysam"]
        rows = {"samtools": [], "alnsort": [], "import": []}
        for _ in range(a.runs):
            rows["samtools"].append(timed(sam))
            rows["alnsort"].append(timed(aln))
            rows["import"].append(timed(imp))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
        best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in rows.items()}
        print(f"input {a.input} ({os.path.getsize(a.input)} bytes), -@{a.threads}, {ext}, {a.runs} runs each\n")
        print("| tool | wall median (s) | wall best (s) | CPU median (s) | CPU best (s) | index md5 |")
        print("|---|---|---|---|---|---|")
        print(f"| samtools index (pysam.index) | {med['samtools'][0]:.2f} | {best['samtools'][0]:.2f} | {med['samtools'][1]:.2f} | {best['samtools'][1]:.2f} | {md5(theirs + '.' + ext)} |")
        print(f"| python + import pysam alone | {med['import'][0]:.2f} | {best['import'][0]:.2f} | {med['import'][1]:.2f} | {best['import'][1]:.2f} | |")
        print(f"| alnsort index | {med['alnsort'][0]:.2f} | {best['alnsort'][0]:.2f} | {med['alnsort'][1]:.2f} | {best['alnsort'][1]:.2f} | {md5(ours + '.' + ext)} |")
        same = md5(theirs + "." + ext) == md5(ours + "." + ext)
        print(f"\nindex files identical: {same}")
        print("raw (wall, cpu) per run:", {k: [(round(w, 2), round(c, 2)) for w, c in v] for k, v in rows.items()})
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
