#!/usr/bin/env python3
"""Parquet output against BAM output in the same sort, and a region query
on each (issue 40, item 5).

    ALNSORT_BIN=target/release/alnsort python3 bench/parquet.py /work/bench/reads-300000.bam [REPEATS]

For each of `-O bam -l 6`, `-O parquet` (zstd level 3) and
`-O parquet,codec=snappy`: the wall and CPU seconds of `alnsort sort -@2`
(median of REPEATS runs) and the output's size. Then the record count of
chr1:1,000,000-2,000,000 (records overlapping it) by `samtools view -c` on
the indexed BAM (pysam), by pyarrow and by DuckDB on the zstd dataset, each
timed in a fresh process (median of REPEATS), the counts checked equal.
Prints a Markdown table.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALNSORT = os.environ.get("ALNSORT_BIN", "target/release/alnsort")
REGION = ("chr1", 1_000_000, 2_000_000)


def run_timed(argv: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{res.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, res.stdout


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


QUERIES = {
    "samtools view -c (pysam, indexed BAM)": (
        "import pysam,sys; print(pysam.view('-c', sys.argv[1], '{c}:{b}-{e}').strip())",
        "bam",
    ),
    "pyarrow (hive partitions, filter pushdown)": (
        "import pyarrow.dataset as d,sys; ds=d.dataset(sys.argv[1], format='parquet', partitioning='hive'); "
        "print(ds.count_rows(filter=(d.field('ref')=='{c}')&(d.field('pos')<={e})&(d.field('end')>={b})))",
        "ds",
    ),
    "DuckDB (hive partitions)": (
        "import duckdb,sys; print(duckdb.sql(\"select count(*) from read_parquet('\"+sys.argv[1]+\"/**/*.parquet', "
        "hive_partitioning=true) where ref='{c}' and pos<={e} and \\\"end\\\">={b}\").fetchall()[0][0])",
        "ds",
    ),
}


def main() -> None:
    src = Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="parquet-bench-", dir=os.environ.get("TMPDIR", "/tmp")))
    rows = []
    outs = {}
    try:
        for label, args, name in [
            ("BAM `-l 6`", ["-l", "6"], "out.bam"),
            ("Parquet zstd 3", ["-O", "parquet"], "out.parquet"),
            ("Parquet snappy", ["-O", "parquet,codec=snappy"], "out.snappy.parquet"),
        ]:
            out = work / name
            times = []
            for _ in range(repeats):
                if out.is_dir():
                    shutil.rmtree(out)
                times.append(run_timed([ALNSORT, "sort", "-@", "2", *args, "-o", str(out), str(src)])[:2])
            outs[label] = out
            wall = statistics.median(t[0] for t in times)
            cpu = statistics.median(t[1] for t in times)
            rows.append((label, wall, cpu, size(out)))
        bam = outs["BAM `-l 6`"]
        run_timed([sys.executable, "-c", "import pysam,sys; pysam.index(sys.argv[1])", str(bam)])
        base_wall, base_size = rows[0][1], rows[0][3]
        print("| output | wall s (median) | CPU s | vs BAM time | size MB | vs BAM size |")
        print("|---|---|---|---|---|---|")
        for label, wall, cpu, sz in rows:
            print(f"| {label} | {wall:.2f} | {cpu:.2f} | {wall / base_wall:.2f}x | {sz / 1e6:.1f} | {sz / base_size:.2f}x |")
        print()
        c, b, e = REGION
        print(f"Region {c}:{b:,}-{e:,}, records overlapping it; each query a fresh Python process (median of {repeats}).")
        print()
        print("| reader | count | wall s (median) | vs samtools |")
        print("|---|---|---|---|")
        base = None
        counts = set()
        for label, (code, on) in QUERIES.items():
            target = str(bam if on == "bam" else outs["Parquet zstd 3"])
            code = code.replace("{c}", c).replace("{b}", str(b)).replace("{e}", str(e))
            walls = []
            for _ in range(repeats):
                wall, _, out = run_timed([sys.executable, "-c", code, target])
                walls.append(wall)
            count = int(out.strip())
            counts.add(count)
            w = statistics.median(walls)
            base = base or w
            print(f"| {label} | {count} | {w:.3f} | {w / base:.2f}x |")
        if len(counts) != 1:
            sys.exit(f"the region counts differ: {counts}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
