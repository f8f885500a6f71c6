#!/usr/bin/env python3
"""alnsort against mako on a loaded machine (issue 22): wall and CPU seconds
of interleaved runs while busy loops compete for the cores.

    bench/loaded.py --input in.bam --alnsort A [--alnsort B ...] [--runs 3] [--load 2] [--sessions 3]

The load is `--sessions` sessions (`setsid`: each its own scheduler
autogroup, as another user's or another shell's jobs are), each with
`--load` busy loops pinned alternately to CPU 0 and 1; `--sessions 0` runs
the loops in the benchmark's own session instead (they then compete with
the sorter's threads one by one). Every binary given with `--alnsort` and
mako run `-@2 -m 1G -l 6` in coordinate, name and template-coordinate
order, interleaved; the table gives the median wall and CPU seconds and the
records' checksum (`samtools view | md5sum`) of the last output of each.
Wall seconds here measure how well a tool's threads hold the cores against
the load, which is what this script is for; CPU seconds are the work."""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKO = os.path.join(ROOT, ".tools", "peers", "bin", "mako")
ORDERS = {"coord": ([], "coordinate"), "name": (["-n"], "queryname::natural"),
          "tc": (["--template-coordinate"], "template-coordinate")}


def command(tool, order, inp, out, tmp, mako):
    opts, mako_order = ORDERS[order]
    if tool == "mako":
        return [mako, "-i", inp, "-o", out, "--order", mako_order, "--max-memory", "1G",
                "--compression-level", "6", "--threads", "2", "-T", tmp]
    return [tool, "sort", "--no-progress", *opts, "-m", "1G", "-l", "6", "-@", "2", "-T", tmp, "-o", out, inp]


def timed(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def start_load(loops, sessions):
    loop = "while :; do :; done"
    if sessions == 0:
        return [subprocess.Popen(["taskset", "-c", str(i % 2), "bash", "-c", loop]) for i in range(loops)]
    body = "; ".join(f"taskset -c {i % 2} bash -c '{loop}' &" for i in range(loops)) + " wait"
    return [subprocess.Popen(["setsid", "-w", "bash", "-c", body]) for _ in range(sessions)]


def stop_load(procs, sessions):
    if sessions:
        # Each session's loops are children of its bash: those first.
        subprocess.run(["pkill", "-P", ",".join(str(p.pid) for p in procs)])
    for p in procs:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True)
    ap.add_argument("--alnsort", action="append", required=True, help="an alnsort binary (repeatable)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load", type=int, default=2, help="busy loops per session")
    ap.add_argument("--sessions", type=int, default=3, help="sessions of busy loops (0: in this session)")
    ap.add_argument("--orders", default="coord,name,tc")
    ap.add_argument("--mako", default=MAKO, help=f"the mako binary (default {MAKO})")
    a = ap.parse_args()
    if not os.access(a.mako, os.X_OK):
        sys.exit(f"bench/loaded.py: {a.mako} not found (bash bench/peers-tools.sh builds it)")
    tools = [*a.alnsort, "mako"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="alnsort-loaded-") as tmp:
        load = start_load(a.load, a.sessions)
        try:
            for order in a.orders.split(","):
                for run in range(a.runs):
                    for i, tool in enumerate(tools):
                        out = os.path.join(tmp, f"{i}-{order}.bam")
                        wall, cpu = timed(command(tool, order, a.input, out, tmp, a.mako))
                        results.setdefault((order, i), []).append((wall, cpu))
                        print(f"{order} {tool} run {run}: wall {wall:.2f} s, CPU {cpu:.2f} s, "
                              f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        finally:
            stop_load(load, a.sessions)
        print("| order | tool | wall s (median) | CPU s (median) | walls | CPUs | records md5 |")
        print("|---|---|---|---|---|---|---|")
        for (order, i), runs in results.items():
            out = os.path.join(tmp, f"{i}-{order}.bam")
            md5 = subprocess.run(f"samtools view '{out}' | md5sum", shell=True, check=True,
                                 capture_output=True, text=True).stdout[:12]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(f"| {order} | {tools[i]} | {statistics.median(walls):.2f} | {statistics.median(cpus):.2f} | "
                  f"{' '.join(f'{w:.1f}' for w in walls)} | {' '.join(f'{c:.2f}' for c in cpus)} | {md5} |")


if __name__ == "__main__":
    main()
