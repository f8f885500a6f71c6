#!/usr/bin/env python3
"""`-u` (uncompressed BAM) output against samtools (issue 38, item 7), with
alnsort's output durability separated: alnsort writing a file (fsynced and
renamed, writeback started every 8 MiB) and alnsort writing standard output
redirected to a file (no fsync, as samtools' file output), run after run.

    bench/uncompressed.py --input IN.bam [--runs 5] [--threads 2] [--mem 768M]
                          [--alnsort BIN] [--tmp DIR] [--out FILE]

Reports the median wall and CPU seconds of each, and the records checksum
of each output.
"""
import argparse
import datetime
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, records_checksum, run_timed, write_table  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mem", default="768M")
    ap.add_argument("--alnsort", default=os.path.join(ROOT, "target", "release", "alnsort"))
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out")
    a = ap.parse_args()
    work = a.tmp or os.path.dirname(os.path.abspath(a.input))
    t = str(a.threads)
    outs = {k: os.path.join(work, f"uncompressed-{k}.bam") for k in ("file", "stdout", "samtools")}
    cmds = {
        "alnsort -o file": ([a.alnsort, "sort", "-u", "-m", a.mem, "-@", t, "-T", work, "-o", outs["file"],
                             a.input], None, outs["file"]),
        "alnsort > file": ([a.alnsort, "sort", "-u", "-m", a.mem, "-@", t, "-T", work, "-o", "-", a.input],
                           outs["stdout"], outs["stdout"]),
        "samtools -o file": (["samtools", "sort", "-u", "-m", a.mem, "-@", t, "-T", os.path.join(work, "st"),
                              "-o", outs["samtools"], a.input], None, outs["samtools"]),
    }
    res = {k: [] for k in cmds}
    for _ in range(a.runs):
        for name, (cmd, redirect, _) in cmds.items():
            if redirect:
                with open(redirect, "wb") as f:
                    res[name].append(run_timed(cmd, stdout=f))
            else:
                res[name].append(run_timed(cmd))
    lines = [
        f"`-u` output, input {a.input}, -@{a.threads} -m {a.mem}, {a.runs} runs each, {datetime.date.today()}",
        "",
        "| tool | wall s (median) | CPU s (median) | output MB | records md5 |",
        "|---|---|---|---|---|",
    ]
    for name, (cmd, _, out) in cmds.items():
        wall = statistics.median(r[0] for r in res[name])
        cpu = statistics.median(r[1] for r in res[name])
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {os.path.getsize(out) / 1e6:.0f} "
                     f"| {records_checksum(out, a.threads)} |")
    for name, (cmd, _, _) in cmds.items():
        lines.append(f"\n`{' '.join(cmd)}`")
    for out in outs.values():
        os.remove(out)
    write_table(lines, a.out)


if __name__ == "__main__":
    main()
