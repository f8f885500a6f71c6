#!/usr/bin/env python3
"""The spilling regime (issue 38): alnsort against samtools (and mako when
built) on one input at given -m and -@, with the peak temporary disk.

Each tool gets a fresh temporary directory; a thread sums the allocated
bytes (st_blocks * 512) of every file under it every 0.1 s, and the peak
is reported beside the median wall and CPU seconds (user + sys of the
process tree), the peak RSS, and a checksum of the output's records
(`samtools view`, header left out). Runs alternate tool by tool.
alnsort's `--stats-json` adds runs written, run bytes per record and
merge passes.

    bench/regime.py --input x4.bam [--mem 100M,256M] [--threads 2] [--runs 1]
                    [--tools samtools,alnsort,mako,alnsort-base] [--alnsort BIN] [--base BIN] [--tmp DIR]
                    [--level 6] [--order coord|name] [--uncompressed] [--markdup] [--out FILE]

With --markdup, duplicate marking with coordinate-sorted output from the
aligner-order input, as bench/peers.py times it: `alnsort sort --markdup`
(Picard's answer), `dupblaster | mako` (tool mako) and `samblaster |
samtools sort` (tool samtools); the records' md5 then differs by tool
(each marks by its own rules), and a column counts the records flagged
0x400.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, records_checksum, run_timed, write_table  # noqa: E402
from peers import dup_count, markdup_cmds  # noqa: E402

MAKO = os.path.join(ROOT, ".tools", "peers", "bin", "mako")


def dir_bytes(path):
    """Allocated bytes of every file under `path` (files may vanish)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


class Sampler(threading.Thread):
    """Peak of `dir_bytes(path)`, sampled every `period` seconds."""

    def __init__(self, path, period=0.1):
        super().__init__(daemon=True)
        self.path, self.period, self.peak = path, period, 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, dir_bytes(self.path))
            time.sleep(self.period)

    def finish(self):
        self.stop.set()
        self.join()
        self.peak = max(self.peak, dir_bytes(self.path))
        return self.peak


def command(tool, a, mem, tmp, out, stats):
    if a.markdup:
        tool_ = "alnsort" if tool.startswith("alnsort") else tool
        binary = a.alnsort if tool == "alnsort" else a.base
        cmd = markdup_cmds(tool_, mem, a.level, a.threads, tmp, out, a.input, argparse.Namespace(alnsort=binary))
        if isinstance(cmd, str):
            return ["bash", "-o", "pipefail", "-c", cmd]
        return [*cmd[:2], "--stats-json", stats, *cmd[2:]]
    order = ["-n"] if a.order == "name" else []
    if tool == "samtools":
        fmt = ["-u"] if a.uncompressed else ["-l", str(a.level)]
        return ["samtools", "sort", *order, "-m", mem, *fmt, "-@", str(a.threads),
                "-T", os.path.join(tmp, "st"), "-o", out, a.input]
    if tool in ("alnsort", "alnsort-base"):
        fmt = ["-u"] if a.uncompressed else ["-l", str(a.level)]
        return [a.alnsort if tool == "alnsort" else a.base, "sort", *order, "-m", mem, *fmt, "-@", str(a.threads),
                "-T", tmp, "--stats-json", stats, "-o", out, a.input]
    if tool == "mako":
        mo = "queryname::natural" if a.order == "name" else "coordinate"
        # mako's command line as bench/peers.py gives it (mako 0.1.8).
        return [MAKO, "-i", a.input, "-o", out, "--order", mo, "--max-memory", mem,
                "--compression-level", str(a.level), "--threads", str(a.threads), "-T", tmp]
    raise ValueError(tool)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", required=True)
    ap.add_argument("--mem", default="100M,256M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--tools", default="samtools,alnsort")
    ap.add_argument("--alnsort", default=os.path.join(ROOT, "target", "release", "alnsort"))
    ap.add_argument("--base", help="a second alnsort binary, the tool alnsort-base (a build to compare)")
    ap.add_argument("--tmp", default=None, help="directory for temp dirs and outputs")
    ap.add_argument("--level", type=int, default=6)
    ap.add_argument("--order", default="coord", choices=["coord", "name"])
    ap.add_argument("--uncompressed", action="store_true", help="-u output")
    ap.add_argument("--markdup", action="store_true",
                    help="duplicate marking with coordinate-sorted output (see above)")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.markdup and (a.order != "coord" or a.uncompressed):
        ap.error("--markdup times coordinate-sorted, compressed output only")
    work = a.tmp or os.path.dirname(os.path.abspath(a.input))
    tools = a.tools.split(",")
    lines = [
        f"input {a.input} ({os.path.getsize(a.input) / 1e6:.0f} MB), -@{a.threads}, "
        f"order {a.order}{', duplicates marked' if a.markdup else ''}, "
        f"{'-u' if a.uncompressed else f'-l {a.level}'}, {a.runs} run(s) each, "
        f"{datetime.date.today()}",
        "",
        "| -m | tool | wall s (median) | CPU s | peak RSS MB | peak temp MB | output MB "
        "| runs | run bytes/rec | passes | records md5 |" + (" 0x400 records |" if a.markdup else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.markdup else ""),
    ]
    for mem in a.mem.split(","):
        res = {t: [] for t in tools}
        for _ in range(a.runs):
            for tool in tools:
                tmp = os.path.join(work, f"regime-tmp-{tool}")
                shutil.rmtree(tmp, ignore_errors=True)
                os.makedirs(tmp)
                out = os.path.join(work, f"regime-out-{tool}.bam")
                stats = os.path.join(work, f"regime-stats-{tool}.json")
                cmd = command(tool, a, mem, tmp, out, stats)
                sampler = Sampler(tmp)
                sampler.start()
                wall, cpu, rss = run_timed(cmd)
                peak = sampler.finish()
                shutil.rmtree(tmp, ignore_errors=True)
                extra = ("", "", "")
                if tool.startswith("alnsort"):
                    s = json.load(open(stats))
                    recs = max(1, s.get("records_in", s.get("records", 1)))
                    extra = (s.get("runs_written", ""),
                             f"{s.get('run_bytes_written', 0) / recs:.1f}",
                             s.get("merge_passes", ""))
                res[tool].append((wall, cpu, rss, peak, out, extra, " ".join(cmd)))
                print(f"{mem} {tool}: {wall:.1f} s wall, {cpu:.1f} s CPU, {rss / 1e6:.0f} MB RSS, "
                      f"{peak / 1e6:.0f} MB temp {extra}", file=sys.stderr, flush=True)
        for tool in tools:
            runs = res[tool]
            med = statistics.median(r[0] for r in runs)
            wall, cpu, rss, peak, out, extra, cmd = min(runs, key=lambda r: abs(r[0] - med))
            ck = records_checksum(out, a.threads)
            dups = f" {dup_count(out, a.threads)} |" if a.markdup else ""
            lines.append(
                f"| {mem} | {tool} | {med:.1f} | {cpu:.1f} | {rss / 1e6:.0f} | {peak / 1e6:.0f} "
                f"| {os.path.getsize(out) / 1e6:.0f} | {extra[0]} | {extra[1]} | {extra[2]} | {ck} |{dups}"
            )
            os.remove(out)
        for tool in tools:
            lines.append(f"\n`{res[tool][0][6]}`")
    write_table(lines, a.out)


if __name__ == "__main__":
    main()
