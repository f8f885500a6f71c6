#!/usr/bin/env python3
"""`alnsort sort --markdup=samtools` against `alnsort sort` alone (issue 36,
item 7: the one pass at most 1.15x the sort alone) and, optionally, samtools'
four-program chain.

    bench/smdsort.py IN.bam WORKDIR --alnsort NAME=BINARY [--alnsort ...]
                     [--rounds 3] [--threads 2] [--chain]

IN.bam should be name-grouped, as an aligner writes it (make it with
`python tests/oracle.py collate -@2 -o col.bam reads-300000.bam`). Each
round runs, interleaved, every binary's `sort` and `sort --markdup=samtools`
(and the chain `collate | fixmate -m | sort | markdup` of pysam's samtools
1.24 with uncompressed pipes, with --chain), recording wall and CPU seconds
(user + system of the process tree) and peak RSS. Prints a Markdown table of
medians, the ratio of each binary's one pass to its own sort alone, and the
md5 of every output's records (`samtools view`, the header left out): the
one pass must give the chain's records.
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


def timed(argv: list[str] | str, shell: bool = False) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of the process and the
    children it waited for) and peak RSS in bytes (the largest of them) of
    one run, from wait4 on that run alone."""
    import os

    t = time.perf_counter()
    proc = subprocess.Popen(argv, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t
    err = proc.stderr.read() if proc.stderr else b""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{argv} failed:\n{err.decode()}")
    return took, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def records_md5(path: Path) -> str:
    """md5 of the records as SAM text (pysam's samtools view, no header)."""
    res = subprocess.run([sys.executable, str(ORACLE), "view", str(path)], capture_output=True)
    if res.returncode != 0:
        sys.exit(f"view {path} failed:\n{res.stderr.decode()}")
    return hashlib.md5(res.stdout).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("workdir")
    ap.add_argument("--alnsort", action="append", required=True, metavar="NAME=BINARY")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chain", action="store_true")
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t = str(a.threads)
    cmds: dict[str, tuple[list[str] | str, Path, bool]] = {}
    for spec in a.alnsort:
        name, binary = spec.split("=", 1)
        for what, extra in (("sort", []), ("sort --markdup=samtools", ["--markdup=samtools"])):
            out = work / f"{name}-{'smd' if extra else 'sort'}.bam"
            cmds[f"{name}: {what}"] = ([binary, "sort", "-@", t, *extra, "-o", str(out), a.input], out, False)
    if a.chain:
        s = f"{sys.executable} {ORACLE}"
        out = work / "chain.bam"
        line = (f"{s} collate -@{t} -u -O {a.input} | {s} fixmate -@{t} -u -m - - | "
                f"{s} sort -@{t} -u - | {s} markdup -@{t} - {out}")
        cmds["samtools 1.24: collate | fixmate -m | sort | markdup"] = (line, out, True)
    runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cmds}
    for r in range(a.rounds):
        for k, (argv, _, shell) in cmds.items():
            runs[k].append(timed(argv, shell))
            print(f"round {r + 1} {k}: {runs[k][-1][0]:.2f} s", file=sys.stderr)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v),
               max(x[2] for x in v)) for k, v in runs.items()}
    print("| command | wall s (runs) | median wall s | median CPU s | peak RSS MiB | records md5 |")
    print("|---|---|---|---|---|---|")
    for k, (argv, out, _) in cmds.items():
        walls = ", ".join(f"{x[0]:.2f}" for x in runs[k])
        w, c, rss = med[k]
        print(f"| {k} | {walls} | {w:.2f} | {c:.2f} | {rss / 2**20:.0f} | {records_md5(out)[:12]} |")
    print()
    for spec in a.alnsort:
        name = spec.split("=", 1)[0]
        s, m = med[f"{name}: sort"], med[f"{name}: sort --markdup=samtools"]
        line = f"{name}: one pass / sort alone = {m[0] / s[0]:.2f}x wall, {m[1] / s[1]:.2f}x CPU"
        chain = "samtools 1.24: collate | fixmate -m | sort | markdup"
        if chain in med:
            line += f"; chain / one pass = {med[chain][0] / m[0]:.2f}x wall, {med[chain][1] / m[1]:.2f}x CPU"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
