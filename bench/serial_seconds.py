#!/usr/bin/env python3
"""Serial seconds (`--stats-json` serial_seconds: read_scan, read_push,
write_consume) of two alnsort builds, side by side, per configuration.

Each round runs every configuration with the base build, then with the new
one (interleaved, the same machine and load), both as the same path
(`WORK/run/alnsort`) writing the same output path, so that the @PG line and
so the output bytes can be compared with `cmp`; the records' checksum
(`samtools view OUT | md5sum`) is taken in the first round. CPU seconds
(user + sys of the whole run) come from getrusage of the child; the load
average is read after each run. Prints a markdown table of the medians over
the rounds, and each run's figures.

    bench/serial_seconds.py --base OLD/alnsort --new target/release/alnsort \\
        --input /work/benchdata/reads-2000000.bam --rounds 3
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys

CONFIGS = [
    ("coordinate", ["-m", "1G"]),
    ("name", ["-n", "-m", "1G"]),
    ("template-coordinate", ["--template-coordinate", "-m", "1G"]),
    ("spill", ["-m", "100M"]),
    ("l1", ["-l", "1", "-m", "1G"]),
    ("markdup", ["--markdup", "-m", "1G"]),
    ("write-index", ["--write-index", "-m", "1G"]),
]
STAGES = ["read_scan", "read_push", "write_consume"]


def run(binary, work, inp, opts, threads):
    run_dir = os.path.join(work, "run")
    os.makedirs(run_dir, exist_ok=True)
    exe = os.path.join(run_dir, "alnsort")
    shutil.copyfile(binary, exe)
    os.chmod(exe, 0o755)
    out = os.path.join(work, "out.bam")
    stats = os.path.join(work, "stats.json")
    for p in (out, out + ".csi", stats):
        if os.path.exists(p):
            os.remove(p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        ["./alnsort", "sort", f"-@{threads}", *opts, "-o", out, "--stats-json", stats, inp],
        cwd=run_dir,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(stats) as f:
        serial = json.load(f)["serial_seconds"]
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    return serial, cpu, load, out


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def records_md5(samtools, path):
    view = subprocess.Popen([samtools, "view", "-@2", path], stdout=subprocess.PIPE)
    h = hashlib.md5()
    for block in iter(lambda: view.stdout.read(1 << 20), b""):
        h.update(block)
    if view.wait() != 0:
        sys.exit(f"samtools view {path} failed")
    return h.hexdigest()[:12]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/serial_seconds")
    ap.add_argument("--samtools", default="samtools")
    ap.add_argument("--only", nargs="*", help="configuration names to run")
    ap.add_argument("--md5-both", action="store_true", help="checksum the base's records too")
    args = ap.parse_args()
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    runs = {}
    checks = {}
    for r in range(args.rounds):
        for name, opts in configs:
            files = {}
            for build in ("base", "new"):
                binary = args.base if build == "base" else args.new
                serial, cpu, load, out = run(binary, args.work, args.input, opts, args.threads)
                # The output and, with --write-index, its index.
                both = digest(out) + (digest(out + ".csi") if os.path.exists(out + ".csi") else "")
                # Records checksum of the new build's output in the first
                # round (the base's equals it when the bytes are equal).
                want_md5 = r == 0 and (build == "new" or args.md5_both)
                files[build] = (both, records_md5(args.samtools, out) if want_md5 else None)
                runs.setdefault((name, build), []).append((serial, cpu, load))
                total = sum(serial[s] for s in STAGES)
                print(
                    f"round {r + 1} {name:20s} {build:4s} "
                    + " ".join(f"{s} {serial[s]:.3f}" for s in STAGES)
                    + f" sum {total:.3f} cpu {cpu:.2f} load {load:.1f}",
                    flush=True,
                )
            same = files["base"][0] == files["new"][0]
            print(f"round {r + 1} {name:20s} bytes equal {same} records md5 {files['new'][1]}", flush=True)
            if r == 0:
                checks[name] = (same, files["base"][1], files["new"][1])
            elif not same:
                checks[name] = (False,) + checks[name][1:]
    print()
    print("| config | options | build | read_scan | read_push | write_consume | sum | CPU s | load | bytes = base | records md5 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, opts in configs:
        same, md5_base, md5_new = checks[name]
        for build in ("base", "new"):
            rs = runs[(name, build)]
            med = {s: statistics.median(x[0][s] for x in rs) for s in STAGES}
            total = statistics.median(sum(x[0][s] for s in STAGES) for x in rs)
            cpu = statistics.median(x[1] for x in rs)
            load = statistics.median(x[2] for x in rs)
            md5 = md5_new if build == "new" else (md5_base or ("= new" if same else "?"))
            print(
                f"| {name} | `{' '.join(opts)}` | {build} | "
                + " | ".join(f"{med[s]:.3f}" for s in STAGES)
                + f" | {total:.3f} | {cpu:.2f} | {load:.1f} | "
                + ("yes" if same else "**no**")
                + f" | {md5} |"
            )


if __name__ == "__main__":
    main()
