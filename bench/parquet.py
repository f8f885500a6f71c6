#!/usr/bin/env python3
"""Parquet output against BAM output in the same sort, and a region query
on each (issue 40, item 5).

    ALNSORT_BIN=target/release/alnsort python3 bench/parquet.py /work/bench/reads-300000.bam [REPEATS]

For each of `-O bam -l 6`, `-O parquet` (zstd level 1, the default),
`-O parquet,level=3` and `-O parquet,codec=snappy`: the wall and CPU
seconds of `alnsort sort -@2` (median of REPEATS runs, the outputs taken in
turn within each repeat so that the machine's load falls on all alike), the
output's size, and a checksum of its records (md5 of the SAM records,
header left out, that `alnsort sort -O sam` reads back from it). Then the record count of
chr1:1,000,000-2,000,000 (records overlapping it) by `samtools view -c` on
the indexed BAM (pysam), by pyarrow and by DuckDB on the default dataset,
each in a fresh process (median of REPEATS): the process's wall time
(Python start and the reader's import included) and the query's own
(timed inside, after the import); the counts checked equal.
Prints a Markdown table.
"""

from __future__ import annotations

import hashlib
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


def records_md5(out: Path) -> str:
    """md5 of the SAM records (no header) alnsort reads back from OUT."""
    res = subprocess.run([ALNSORT, "sort", "--no-PG", "-O", "sam", "-o", "-", str(out)],
                         stdout=subprocess.PIPE, check=True)
    h = hashlib.md5()
    for line in res.stdout.splitlines(keepends=True):
        if not line.startswith(b"@"):
            h.update(line)
    return h.hexdigest()


# Each snippet imports its reader, then times the query alone and prints
# "COUNT SECONDS".
QUERIES = {
    "samtools view -c (pysam, indexed BAM)": (
        "import pysam,sys,time; t=time.perf_counter(); n=pysam.view('-c', sys.argv[1], '{c}:{b}-{e}').strip(); "
        "print(n, time.perf_counter()-t)",
        "bam",
    ),
    "pyarrow (hive partitions, filter pushdown)": (
        "import pyarrow.dataset as d,sys,time; t=time.perf_counter(); "
        "ds=d.dataset(sys.argv[1], format='parquet', partitioning='hive'); "
        "n=ds.count_rows(filter=(d.field('ref')=='{c}')&(d.field('pos')<={e})&(d.field('end')>={b})); "
        "print(n, time.perf_counter()-t)",
        "ds",
    ),
    "DuckDB (hive partitions)": (
        "import duckdb,sys,time; t=time.perf_counter(); "
        "n=duckdb.sql(\"select count(*) from read_parquet('\"+sys.argv[1]+\"/**/*.parquet', "
        "hive_partitioning=true) where ref='{c}' and pos<={e} and \\\"end\\\">={b}\").fetchall()[0][0]; "
        "print(n, time.perf_counter()-t)",
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
        configs = [
            ("BAM `-l 6`", ["-l", "6"], "out.bam"),
            ("Parquet zstd 1 (default)", ["-O", "parquet"], "out.parquet"),
            ("Parquet zstd 3", ["-O", "parquet,level=3"], "out.z3.parquet"),
            ("Parquet snappy", ["-O", "parquet,codec=snappy"], "out.snappy.parquet"),
        ]
        times: dict[str, list] = {label: [] for label, _, _ in configs}
        for _ in range(repeats):
            for label, args, name in configs:
                out = work / name
                if out.is_dir():
                    shutil.rmtree(out)
                times[label].append(run_timed([ALNSORT, "sort", "-@", "2", *args, "-o", str(out), str(src)])[:2])
                outs[label] = out
        for label, _, _ in configs:
            out = outs[label]
            wall = statistics.median(t[0] for t in times[label])
            cpu = statistics.median(t[1] for t in times[label])
            rows.append((label, wall, cpu, size(out), records_md5(out)))
        bam = outs["BAM `-l 6`"]
        run_timed([sys.executable, "-c", "import pysam,sys; pysam.index(sys.argv[1])", str(bam)])
        base_wall, base_size = rows[0][1], rows[0][3]
        base_cpu = rows[0][2]
        print("| output | wall s (median) | CPU s | vs BAM wall | vs BAM CPU | size MB | vs BAM size | records md5 |")
        print("|---|---|---|---|---|---|---|---|")
        for label, wall, cpu, sz, md5 in rows:
            print(f"| {label} | {wall:.2f} | {cpu:.2f} | {wall / base_wall:.2f}x | {cpu / base_cpu:.2f}x "
                  f"| {sz / 1e6:.1f} | {sz / base_size:.2f}x | {md5[:12]} |")
        print()
        c, b, e = REGION
        print(f"Region {c}:{b:,}-{e:,}, records overlapping it; each query a fresh Python process (median of {repeats}).")
        print()
        print("| reader | count | query s (median) | vs samtools | process wall s (median) | vs samtools |")
        print("|---|---|---|---|---|---|")
        base = None
        counts = set()
        for label, (code, on) in QUERIES.items():
            target = str(bam if on == "bam" else outs["Parquet zstd 1 (default)"])
            code = code.replace("{c}", c).replace("{b}", str(b)).replace("{e}", str(e))
            walls, queries = [], []
            for _ in range(repeats):
                wall, _, out = run_timed([sys.executable, "-c", code, target])
                count_text, secs = out.split()
                walls.append(wall)
                queries.append(float(secs))
            count = int(count_text)
            counts.add(count)
            w, q = statistics.median(walls), statistics.median(queries)
            base = base or (q, w)
            print(f"| {label} | {count} | {q:.3f} | {q / base[0]:.2f}x | {w:.3f} | {w / base[1]:.2f}x |")
        if len(counts) != 1:
            sys.exit(f"the region counts differ: {counts}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
