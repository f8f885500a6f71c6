#!/usr/bin/env python3
"""Cost of duplicate marking: `alnsort sort --markdup` against `alnsort sort`
alone and against samblaster piped into samtools sort, on the same input,
runs alternating (the machine is shared: the load average before each run
is printed beside it).

    bench/markdup.py --input /path/reads-2000000.bam [--runs 2] [--threads 2]
                     [--jobs sort,markdup,markdup-maxmem,samblaster] [--out bench/results/DATE-markdup.md]
                     [--baseline OTHER_ALNSORT]

Jobs:
  sort            alnsort sort -@T -m 2G
  markdup         alnsort sort -@T -m 2G --markdup --metrics M
  markdup-maxmem  alnsort sort -@T --max-memory 300M --markdup --metrics M
                  (the marker's read ends spill; peak RSS must stay within 300M)
  markdup-base    the markdup job with the --baseline binary (an earlier build),
                  to compare builds in the same run
  samblaster      samtools view -h IN | samblaster | samtools sort -@T -o OUT
                  (samblaster needs name-grouped SAM; samtools from PATH)

Wall and CPU seconds (user + sys of the job and all its processes) come
from wait4; peak RSS is the largest of any one process of the job
(ru_maxrss). Each output's 0x400 count is taken once per job with
`samtools view -c -f 1024`, and the MD5 of its records (`samtools view`,
no header: the @PG line names the binary) and of the metrics file's
lines other than comments. Each alnsort run writes `--stats-json`; the
table shows its read_push serial CPU seconds (less disturbed by load than
wall time) and the wall seconds of its 'merge runs' phase (the duplicate
decision).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, run_timed  # noqa: E402


def jobs(alnsort, inp, out, tmp, threads, baseline=None):
    t = str(threads)
    met = os.path.join(tmp, "m.txt")
    st = os.path.join(tmp, "st.json")
    base = [alnsort, "sort", "--no-progress", "-@", t, "-T", os.path.join(tmp, "x"), "--stats-json", st]
    shell = (
        f"samtools view -h {inp} | samblaster --quiet | samtools sort -@{t} -T {os.path.join(tmp, 'sb')} -o {out}"
    )
    return {
        "sort": base + ["-m", "2G", "-o", out, inp],
        "markdup": base + ["-m", "2G", "--markdup", "--metrics", met, "-o", out, inp],
        "markdup-maxmem": base + ["--max-memory", "300M", "--markdup", "--metrics", met, "-o", out, inp],
        "samblaster": ["bash", "-o", "pipefail", "-c", shell],
        "markdup-base": [baseline or alnsort, *base[1:], "-m", "2G", "--markdup", "--metrics", met, "-o", out, inp],
    }


def serial_figures(path):
    """The run's read_push serial CPU seconds and 'merge runs' phase wall
    seconds from its --stats-json file (removed after reading); '-' when
    absent (samblaster)."""
    if not os.path.exists(path):
        return "-", "-"
    with open(path) as f:
        st = json.load(f)
    os.remove(path)
    push = st.get("serial_seconds", {}).get("read_push", "-")
    decide = next((p["wall_s"] for p in st.get("phases", []) if p.get("phase") == "merge runs"), "-")
    return push, decide


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--jobs", default="sort,markdup,markdup-maxmem,samblaster")
    ap.add_argument("--alnsort", default=os.path.join(ROOT, "target", "release", "alnsort"))
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--baseline", default=None, help="alnsort binary of the markdup-base job")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    names = a.jobs.split(",")
    tmp = tempfile.mkdtemp(prefix="mdbench-", dir=a.tmp or os.path.dirname(os.path.abspath(a.input)))
    out = os.path.join(tmp, "out.bam")
    all_jobs = jobs(a.alnsort, a.input, out, tmp, a.threads, a.baseline)
    met = os.path.join(tmp, "m.txt")
    sums = {}
    rows = {n: [] for n in names}
    dups = {}
    for r in range(a.runs):
        for n in names:
            load = os.getloadavg()[0]
            wall, cpu, rss = run_timed(all_jobs[n])
            push, decide = serial_figures(os.path.join(tmp, "st.json"))
            rows[n].append((wall, cpu, rss, load, push, decide))
            print(f"run {r + 1} {n}: wall {wall:.2f} s cpu {cpu:.2f} s rss {rss / 2**20:.0f} MB load {load:.1f} "
                  f"read_push {push} s merge-runs {decide} s", flush=True)
            if n not in dups:
                c = subprocess.run(["samtools", "view", "-c", "-f", "1024", "-@", str(a.threads), out],
                                   capture_output=True, text=True, check=True)
                dups[n] = int(c.stdout)
                v = subprocess.run(f"samtools view -@{a.threads} {out} | md5sum", shell=True,
                                   capture_output=True, text=True, check=True)
                m = "-"
                if os.path.exists(met) and n.startswith("markdup"):
                    body = b"".join(ln for ln in open(met, "rb") if not ln.startswith(b"#"))
                    m = hashlib.md5(body).hexdigest()[:12]
                sums[n] = (v.stdout.split()[0][:12], m)
                print(f"{n}: {dups[n]} records with 0x400, records md5 {sums[n][0]}, metrics md5 {sums[n][1]}",
                      flush=True)
            os.remove(out)
            if os.path.exists(met):
                os.remove(met)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    sv = subprocess.run(["samblaster", "--version"], capture_output=True, text=True, errors="replace")
    lines = [
        f"# sort --markdup vs sort and vs samblaster | samtools sort, {datetime.date.today()}",
        "",
        f"- machine: {platform.node()}, {os.cpu_count()} cores, shared (load average before each run in the table)",
        f"- alnsort {commit}; {(sv.stdout + sv.stderr).strip().splitlines()[0] if (sv.stdout + sv.stderr).strip() else 'samblaster'}; "
        # (samtools --version prints a non-UTF-8 byte further down)
        + subprocess.run(["samtools", "--version"], capture_output=True, text=True,
                         errors="replace").stdout.splitlines()[0],
        f"- input: {a.input}; -@{a.threads}",
        "",
        "- read_push: CPU seconds of the thread that takes the decoded batches in input order (`--stats-json`"
        " `serial_seconds.read_push`; with --markdup it also hands each batch's read ends to the marker);"
        " merge runs: wall seconds of that phase, which waits for the duplicate decision (`phases`)",
        "",
        "| job | run | wall s | CPU s | read_push CPU s | merge runs wall s | peak RSS MB (one process) | load before "
        "| 0x400 records | records md5 | metrics md5 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        for i, (w, c, m, ld, push, decide) in enumerate(rows[n]):
            lines.append(f"| {n} | {i + 1} | {w:.2f} | {c:.2f} | {push} | {decide} | {m / 2**20:.0f} | {ld:.1f} "
                         f"| {dups[n]:,} | {sums[n][0]} | {sums[n][1]} |")
    lines.append("")
    lines.append("| job | median wall s | median CPU s | wall / sort | CPU / sort |")
    lines.append("|---|---|---|---|---|")
    base = statistics.median(w for w, *_ in rows["sort"]) if "sort" in rows else None
    base_cpu = statistics.median(c for _, c, *_ in rows["sort"]) if "sort" in rows else None
    for n in names:
        mw = statistics.median(w for w, *_ in rows[n])
        mc = statistics.median(c for _, c, *_ in rows[n])
        ratio = f"{mw / base:.2f}" if base else "-"
        cratio = f"{mc / base_cpu:.2f}" if base_cpu else "-"
        lines.append(f"| {n} | {mw:.2f} | {mc:.2f} | {ratio} | {cratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    for p in os.listdir(tmp):
        os.remove(os.path.join(tmp, p))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
