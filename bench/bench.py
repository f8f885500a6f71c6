#!/usr/bin/env python3
"""Benchmark alnsort against samtools on the same input, in the same run.

Speed is reported as ratios measured side by side (samtools wall / alnsort
wall), never as absolute targets, because this machine is shared and noisy.
Each configuration runs each tool N times (default 3) and reports the median
wall time, the CPU time and peak RSS of that median run, the output size, and
a checksum of the decoded records (`samtools view` text, without the header)
of each tool's output: a time is only worth something beside a correct result.

    bench/bench.py --input /path/reads-2000000.bam [--runs 3] [--configs default,l1,...]
                   [--out bench/results/DATE-host.md]

Needs: samtools on PATH (Debian's 1.16.1 is built with libdeflate), a release
build of alnsort (target/release/alnsort), and for name-order checksums the
samtools 1.24 oracle from pysam (its name-order tie-breaks differ from 1.16.1).
"""
import argparse
import datetime
import hashlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (options shared by both tools, target ratio at 2 threads from the
# issue on batch-parallel library stages)
CONFIGS = {
    "default": (["-m", "2G"], 1.4),
    "l1": (["-l", "1", "-m", "2G"], 1.5),
    "ext": (["-m", "100M"], 1.6),
    "ext-l1": (["-l", "1", "-m", "100M"], 2.0),
    "name": (["-n", "-m", "2G"], 1.8),
    "uncompressed": (["-u", "-m", "2G"], 2.0),
    # `merge` of the input sorted and split in 4 parts (by position modulo
    # 4), @RG/@PG combined (-c -p: the parts share their header).
    "merge4": (["-c", "-p"], 1.5),
}
MERGE_PARTS = 4


def merge_parts(inp, tmp, alnsort, threads):
    """The input sorted by coordinate (alnsort) and split into MERGE_PARTS
    sorted BAMs by `pos & 3` (samtools view -e); made once per run."""
    parts = [os.path.join(tmp, f"part{k}.bam") for k in range(MERGE_PARTS)]
    if all(os.path.exists(p) for p in parts):
        return parts
    whole = os.path.join(tmp, "sorted.bam")
    subprocess.run([alnsort, "sort", "--no-progress", "-@", str(threads), "-m", "2G", "-T", tmp, "-o", whole, inp],
                   check=True)
    for k, p in enumerate(parts):
        subprocess.run(["samtools", "view", "-b", "-@", str(threads), "-e", f"(pos & 3) == {k}", "-o", p, whole],
                       check=True)
    os.remove(whole)
    return parts

# CRAM jobs, run only with --cram REF (the default bench is unchanged):
# name -> (options shared by both tools, target ratio, input, output
# extension). Both tools get --reference REF. "cram" is the input converted
# once by samtools (`view -C`); "bam" is the input as it is (its RG tags
# included: alnsort's CRAM output stores them as samtools does).
CRAM_CONFIGS = {
    "cram-in": (["-m", "2G"], 1.3, "cram", "bam"),
    "cram-out": (["-m", "2G", "-O", "cram"], 1.3, "bam", "cram"),
}


def run_timed(cmd, stdout=subprocess.DEVNULL):
    """Runs cmd; returns (wall seconds, cpu seconds, peak RSS bytes)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}): {err[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def write_table(lines, out=None):
    """Prints the markdown table on stdout, and writes it to `out` too."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def records_checksum(path, threads, ref=None):
    """md5 of the decoded records as `samtools view` prints them."""
    h = hashlib.md5()
    extra = ["-T", ref] if ref else []
    p = subprocess.Popen(["samtools", "view", "-@", str(threads), *extra, path], stdout=subprocess.PIPE)
    for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
        h.update(chunk)
    if p.wait() != 0:
        raise RuntimeError(f"samtools view {path} failed")
    return h.hexdigest()[:12]


def oracle_checksum(inp, opts, tmp, command="sort"):
    """Checksum of samtools 1.24's output (pysam), for orders where 1.16.1
    differs. `inp` None: the inputs are at the end of `opts` (merge)."""
    out = os.path.join(tmp, "oracle.bam")
    code = f"import pysam,sys; pysam.samtools.{command}(*sys.argv[1:])"
    if inp is None:
        n = MERGE_PARTS
        args = [*opts[:-n], "-@", "2", "-o", out, *opts[-n:]]
    else:
        args = [*opts, "-@", "2", "-o", out, inp]
    subprocess.run([sys.executable, "-c", code, *args], check=True)
    c = records_checksum(out, 2)
    os.remove(out)
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--alnsort", default=os.path.join(ROOT, "target", "release", "alnsort"))
    ap.add_argument(
        "--baseline",
        metavar="BIN",
        default=None,
        help="also run this alnsort build (an earlier commit), in the same run, as the tool 'baseline'",
    )
    ap.add_argument("--tmp", default=None, help="scratch directory (default: beside the input)")
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    ap.add_argument(
        "--cram",
        metavar="REF",
        default=None,
        help="also run the CRAM jobs (CRAM in -> BAM out, BAM in -> CRAM out) against this FASTA",
    )
    ap.add_argument("--cram-jobs", default=",".join(CRAM_CONFIGS), help="which CRAM jobs --cram runs")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="alnsort-bench-", dir=a.tmp or os.path.dirname(os.path.abspath(a.input)))
    st_version = subprocess.run(["samtools", "--version"], capture_output=True).stdout.decode(errors="replace").splitlines()[0]
    lines = [
        f"# alnsort vs samtools, {datetime.date.today().isoformat()}",
        "",
        f"- machine: {platform.node()}, {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB, {platform.platform()}",
        f"- samtools: {st_version}; alnsort: {subprocess.run([a.alnsort, '--version'], capture_output=True, text=True).stdout.strip()}",
        f"- alnsort commit: {subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}"
        f"{' (with uncommitted changes)' if subprocess.run(['git', '-C', ROOT, 'status', '--porcelain', '--untracked-files=no'], capture_output=True, text=True).stdout.strip() else ''}",
        *([f"- baseline: {a.baseline} (the tool 'baseline', run in turn with the others)"] if a.baseline else []),
        f"- input: {os.path.basename(a.input)} ({os.path.getsize(a.input) / 1e6:.0f} MB), "
        f"-@{a.threads}, median of {a.runs} runs; checksum = md5 of decoded records (samtools view)",
        "",
        "| config | options | tool | wall s | CPU s | peak RSS MB | output MB | records md5 | ratio (samtools/alnsort wall) | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    jobs = [(name, *CONFIGS[name], None, "bam") for name in a.configs.split(",") if name]
    if a.cram:
        jobs += [(name, opts, target, kind, ext) for name in a.cram_jobs.split(",") for opts, target, kind, ext in [CRAM_CONFIGS[name]]]
    inputs = {None: a.input, "bam": a.input}
    try:
        for name, opts, target, kind, ext in jobs:
            if kind not in inputs:
                inputs[kind] = os.path.join(tmp, f"input.{kind}")
                conv = ["-C", "-T", a.cram]
                t = run_timed(["samtools", "view", "-@", str(a.threads), *conv, "-o", inputs[kind], a.input])
                print(f"made {inputs[kind]} in {t[0]:.1f} s", file=sys.stderr)
            inp = inputs[kind]
            ref_opts = ["--reference", a.cram] if kind else []
            if kind:
                lines.append(f"| {name} | load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} | | | | | | | | |")
            results = {}
            bins = {"alnsort": a.alnsort, "baseline": a.baseline}
            tools = ("samtools", "alnsort", "baseline") if a.baseline else ("samtools", "alnsort")
            cmds = {}
            for tool in tools:
                out = os.path.join(tmp, f"{tool}.{name}.{ext}")
                exe = ["samtools", "sort"] if tool == "samtools" else [bins[tool], "sort", "--no-progress"]
                cmd = exe + opts + ref_opts + ["-@", str(a.threads), "-T", os.path.join(tmp, f"{tool}-tmp"), "-o", out, inp]
                if tool != "samtools":
                    cmd = exe + opts + ref_opts + ["-@", str(a.threads), "-T", tmp, "-o", out, inp]
                if name == "merge4":
                    parts = merge_parts(a.input, tmp, a.alnsort, a.threads)
                    exe = ["samtools", "merge"] if tool == "samtools" else [bins[tool], "merge"]
                    cmd = exe + opts + ["-f", "-@", str(a.threads), "-o", out, *parts]
                cmds[tool] = (cmd, out)
            runs = {tool: [] for tool in tools}
            # Tools take turns run by run, so a change in the machine's
            # load falls on all of them alike.
            for _ in range(a.runs):
                for tool in tools:
                    runs[tool].append(run_timed(cmds[tool][0]))
                    print(f"{name} {tool}: {runs[tool][-1][0]:.2f} s (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
            for tool in tools:
                out = cmds[tool][1]
                med = sorted(runs[tool])[len(runs[tool]) // 2]
                results[tool] = (med, os.path.getsize(out), records_checksum(out, a.threads, a.cram if kind else None))
                os.remove(out)
            for tool in tools:
                (wall, cpu, rss), size, ck = results[tool]
                ratio = results["samtools"][0][0] / wall
                lines.append(
                    f"| {name} | `{' '.join(opts + ref_opts)}` | {tool} | {wall:.2f} | {cpu:.2f} | {rss / 1e6:.0f} | "
                    f"{size / 1e6:.1f} | {ck} | {f'{ratio:.2f}' if tool != 'samtools' else ''} | "
                    f"{f'>= {target}' if tool != 'samtools' else ''} |"
                )
            if results["samtools"][2] != results["alnsort"][2] and ext == "cram":
                lines.append(
                    f"| {name} | | | | | | | CHECKSUMS DIFFER: samtools reads other records from alnsort's CRAM "
                    "than from its own (MD/NM are left out as samtools leaves them out, so they should not) | | |"
                )
            elif results["samtools"][2] != results["alnsort"][2]:
                if name == "merge4":
                    ock = oracle_checksum(None, opts + merge_parts(a.input, tmp, a.alnsort, a.threads), tmp, "merge")
                else:
                    ock = oracle_checksum(inp, opts + ref_opts, tmp)
                lines.append(f"| {name} | | samtools 1.24 (pysam, checksum only) | | | | | {ock} | | |")
            print("\n".join(lines[-len(tools) - 1:]), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_table(lines, a.out)


if __name__ == "__main__":
    main()
