#!/usr/bin/env python3
"""Per-thread states and CPU of one command, sampled from /proc (issue 22's
loaded-machine study): which of a sorter's threads are running, runnable
(waiting for a core) or sleeping (waiting on another thread), over time.

    bench/thread_states.py [--interval 0.01] [--phase-split S] -- CMD ARGS...

Every `--interval` seconds it reads /proc/PID/task/*/stat of the command and
counts each thread's state letter (R: running or runnable, S: sleeping,
D: disk wait); at the end it prints one row per thread name: samples in R,
S, D and its CPU seconds (utime+stime at its last sample). With
`--phase-split S` the rows are split into the samples before and after S
seconds of wall time (e.g. the "read and sort" wall of `--stats-json`), so
the output phase can be read alone. R counts a thread that waits for a core
as well as one that has it: on a loaded machine, threads in S while the
others are in R are the ones that leave their share of the cores unused."""

import argparse
import collections
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def sample(pid):
    """(tid, name, state, cpu seconds) of each thread of `pid`."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        out.append((tid, name, rest[0], (int(rest[11]) + int(rest[12])) / TICK))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--phase-split", type=float, default=None)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    start = time.time()
    p = subprocess.Popen(cmd)
    states = collections.defaultdict(collections.Counter)
    cpu = {}
    names = {}
    while p.poll() is None:
        t = time.time() - start
        phase = "all" if a.phase_split is None else ("before" if t < a.phase_split else "after")
        for tid, name, state, secs in sample(p.pid):
            names[tid] = name
            states[(phase, name)][state] += 1
            cpu[(phase, tid)] = secs
        time.sleep(a.interval)
    wall = time.time() - start
    print(f"wall {wall:.2f} s, exit {p.returncode}")
    print("| phase | thread | R | S | D | CPU s (end of phase) |")
    print("|---|---|---:|---:|---:|---:|")
    for (phase, name), c in sorted(states.items()):
        secs = sum(v for (ph, tid), v in cpu.items() if ph == phase and names[tid] == name)
        print(f"| {phase} | {name} | {c['R']} | {c['S']} | {c['D']} | {secs:.2f} |")
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
