#!/usr/bin/env python3
"""Head-to-head: alnsort against samtools and mako (Fulcrum Genomics' sorter
on the fgumi engine), and duplicate marking against `samblaster | samtools
sort` and `dupblaster | mako`, on the same input in the same run.

Each configuration runs every tool in turn, run after run (so a change of
the machine's load falls on all alike), and reports the median wall time,
the CPU seconds and peak RSS of that run, the output size, and a checksum of
the decoded records (`samtools view` of the output, header left out): a time
only counts beside its result. Ratios are the faster peer's wall over
alnsort's, computed in the same run, and the same for CPU seconds (user +
sys of every process; the one to read on a shared machine).

    bench/peers.py --input reads-2000000.bam [--runs 3] [--mem default,768M,1G,2G,100M] [--peers samtools,mako]
                   [--levels 1,6] [--orders coord,name,tc] [--markdup] [--out FILE]

Tools: samtools on PATH (Debian's 1.16.1; name-order records are also
checksummed with samtools 1.24 from pysam, whose ties differ), mako and
dupblaster built from crates.io by `bench/peers-tools.sh` into
`.tools/peers/bin` (pinned versions), samblaster on PATH (Debian), alnsort
from target/release.

Memory: every tool gets the same `-m` (per thread, as samtools counts it;
mako's `--max-memory` is per thread by default too); "default" passes none,
so each tool uses its own default (768M per thread for all three).
"""
import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, oracle_checksum, records_checksum, run_timed, write_table  # noqa: E402

PEERS_BIN = os.path.join(ROOT, ".tools", "peers", "bin")

# order -> (samtools/alnsort options, mako --order)
ORDERS = {
    "coord": ([], "coordinate"),
    "name": (["-n"], "queryname::natural"),
    "tc": (["--template-coordinate"], "template-coordinate"),
}


def shell_timed(script):
    """A pipeline run by bash (`set -o pipefail`): (wall, cpu, max RSS of
    the largest process). RUSAGE_CHILDREN of the shell covers every stage;
    its max RSS is the largest single process, not the sum."""
    return run_timed(["bash", "-c", "set -eo pipefail; " + script])


def sort_cmds(tool, opts, mako_order, mem, level, threads, tmp, out, inp, a):
    m = [] if mem == "default" else ["-m", mem]
    if tool == "samtools":
        return ["samtools", "sort", *opts, *m, "-l", str(level), "-@", str(threads),
                "-T", os.path.join(tmp, "st"), "-o", out, inp]
    if tool == "alnsort":
        return [a.alnsort, "sort", "--no-progress", *opts, *m, "-l", str(level), "-@", str(threads),
                "-T", tmp, "-o", out, inp]
    if tool == "mako":
        mm = [] if mem == "default" else ["--max-memory", mem]
        return [os.path.join(PEERS_BIN, "mako"), "-i", inp, "-o", out, "--order", mako_order, *mm,
                "--compression-level", str(level), "--threads", str(threads), "-T", tmp]
    raise ValueError(tool)


def markdup_cmds(tool, mem, level, threads, tmp, out, inp, a):
    """Duplicate marking with coordinate-sorted output, from the
    aligner-order input. samblaster and dupblaster read name-grouped SAM."""
    m = "" if mem == "default" else f"-m {mem}"
    q = lambda s: "'" + s.replace("'", "'\\''") + "'"  # noqa: E731
    if tool == "alnsort":
        return [a.alnsort, "sort", "--no-progress", "--markdup", *([] if mem == "default" else ["-m", mem]),
                "-l", str(level), "-@", str(threads), "-T", tmp, "-o", out, inp]
    if tool == "samtools":
        return (f"samtools view -h -@ {threads} {q(inp)} | samblaster --ignoreUnmated -q 2>/dev/null | "
                f"samtools sort {m} -l {level} -@ {threads} -T {q(os.path.join(tmp, 'st'))} -o {q(out)} -")
    if tool == "mako":
        mm = "" if mem == "default" else f"--max-memory {mem}"
        return (f"{q(os.path.join(PEERS_BIN, 'dupblaster'))} -i {q(inp)} -o - --ignore-unmated "
                f"--metrics-prefix {q(os.path.join(tmp, 'dupblaster'))} --tmp-dir {q(tmp)} --compression-level 0 | "
                f"{q(os.path.join(PEERS_BIN, 'mako'))} -i /dev/stdin -o {q(out)} --order coordinate {mm} "
                f"--compression-level {level} --threads {threads} -T {q(tmp)}")
    raise ValueError(tool)


def dup_count(path, threads):
    p = subprocess.run(["samtools", "view", "-c", "-f", "1024", "-@", str(threads), path],
                       capture_output=True, text=True, check=True)
    return int(p.stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mem", default="default,768M,1G,2G,100M")
    ap.add_argument("--levels", default="1,6")
    ap.add_argument("--orders", default="coord,name,tc")
    ap.add_argument("--markdup", action="store_true", help="also the duplicate-marking rows (-m 1G, -l 6 unless --markdup-mem)")
    ap.add_argument("--markdup-mem", default="1G")
    ap.add_argument("--peers", default="samtools,mako",
                    help="the peers run beside alnsort (samtools, mako or both; a loaded machine may leave time for one)")
    ap.add_argument("--alnsort", default=os.path.join(ROOT, "target", "release", "alnsort"))
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    peers = tuple(a.peers.split(","))
    if not peers or any(p not in ("samtools", "mako") for p in peers):
        sys.exit(f"bench/peers.py: --peers takes samtools and/or mako, not {a.peers}")
    for exe in ("samtools", os.path.join(PEERS_BIN, "mako"), a.alnsort):
        if not shutil.which(exe):
            sys.exit(f"bench/peers.py: {exe} not found (bash bench/peers-tools.sh builds mako and dupblaster)")
    tmp = tempfile.mkdtemp(prefix="alnsort-peers-", dir=a.tmp or os.path.dirname(os.path.abspath(a.input)))
    ver = lambda cmd: subprocess.run(cmd, capture_output=True, text=True, errors="replace").stdout.strip().splitlines()[0]  # noqa: E731
    lines = [
        f"# alnsort vs samtools and mako, {datetime.date.today().isoformat()}",
        "",
        f"- machine: {platform.node()}, {os.cpu_count()} cores, load before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        f"- samtools: {ver(['samtools', '--version'])}; mako: {ver([os.path.join(PEERS_BIN, 'mako'), '--version'])}; "
        f"alnsort: {ver([a.alnsort, '--version'])} "
        f"({subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})",
        f"- peers: {', '.join(peers)}",
        f"- input: {os.path.basename(a.input)} ({os.path.getsize(a.input) / 1e6:.0f} MB), -@{a.threads}, median of {a.runs}; "
        "md5 = decoded records (samtools view, no header)",
        "",
        "| config | tool | wall s | CPU s | peak RSS MB | output MB | records md5 | alnsort ahead of the faster peer (wall) | (CPU) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    jobs = []
    for mem in a.mem.split(","):
        for level in a.levels.split(","):
            for order in a.orders.split(","):
                jobs.append(("sort", mem, int(level), order))
    if a.markdup:
        jobs.append(("markdup", a.markdup_mem, 6, "coord"))
    try:
        for kind, mem, level, order in jobs:
            opts, mako_order = ORDERS[order]
            name = f"{kind} {order} -m {mem} -l {level}"
            tools = (*peers, "alnsort")
            cmds = {}
            for tool in tools:
                out = os.path.join(tmp, f"{tool}.bam")
                if kind == "sort":
                    cmd = sort_cmds(tool, opts, mako_order, mem, level, a.threads, tmp, out, a.input, a)
                else:
                    cmd = markdup_cmds(tool, mem, level, a.threads, tmp, out, a.input, a)
                cmds[tool] = (cmd, out)
            runs = {t: [] for t in tools}
            for _ in range(a.runs):
                for tool in tools:
                    cmd = cmds[tool][0]
                    runs[tool].append(shell_timed(cmd) if isinstance(cmd, str) else run_timed(cmd))
                    print(f"{name} {tool}: {runs[tool][-1][0]:.2f} s (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
            res = {}
            for tool in tools:
                out = cmds[tool][1]
                med = sorted(runs[tool])[len(runs[tool]) // 2]
                extra = f" ({dup_count(out, a.threads)} dup)" if kind == "markdup" else ""
                res[tool] = (med, os.path.getsize(out), records_checksum(out, a.threads) + extra)
                os.remove(out)
            best_peer = min(res[t][0][0] for t in peers)
            best_peer_cpu = min(res[t][0][1] for t in peers)
            label = {"samtools": "samblaster \\| samtools sort", "mako": "dupblaster \\| mako",
                     "alnsort": "alnsort sort --markdup"} if kind == "markdup" else {t: t for t in tools}
            for tool in tools:
                (wall, cpu, rss), size, ck = res[tool]
                ratio = f"{best_peer / wall:.2f} | {best_peer_cpu / cpu:.2f}" if tool == "alnsort" else " |"
                lines.append(f"| {name} | {label[tool]} | {wall:.2f} | {cpu:.2f} | {rss / 1e6:.0f} | {size / 1e6:.1f} | {ck} | {ratio} |")
            if kind == "sort" and order != "coord" and res.get("samtools", res["alnsort"])[2] != res["alnsort"][2]:
                ock = oracle_checksum(a.input, opts, tmp)
                lines.append(f"| {name} | samtools 1.24 (pysam, checksum only) | | | | | {ock} | | |")
            print("\n".join(lines[-len(tools):]), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_table(lines, a.out)


if __name__ == "__main__":
    main()
