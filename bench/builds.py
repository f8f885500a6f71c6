#!/usr/bin/env python3
"""Two builds of alnsort side by side: the same jobs, output bytes and CPU.

A refactoring must change neither the bytes alnsort writes nor its speed.
This runs each job with both binaries, alternating (A B A B ...), and
reports per job: the md5 of each build's output file (and of its metrics
file where the job writes one), whether they are identical, the median
CPU seconds (user+sys of the child) and wall seconds of each build, and
the CPU ratio. CPU is the measure to read on a shared machine; wall is
given for completeness.

    bench/builds.py --a OLD/alnsort --b NEW/alnsort --input in.bam
                    [--runs 3] [--threads 2] [--reference ref.fa] [--out FILE.md]

The jobs: `sort` in every order (coordinate, -n, -N, -t RG,
--template-coordinate) at -m 1G and 10M (spilling), `sort --markdup` with
metrics on the name-grouped input and on its coordinate-sorted copy,
`-O sam`, CRAM out and CRAM back in (with --reference), `merge` of two
halves (`-s 1`: the clashing @RG/@PG IDs' suffixes are random, as
samtools', unless seeded). Every job runs with --no-PG so the @PG line (which names the
binary's path) does not differ.
"""
import argparse
import datetime
import hashlib
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def md5(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(argv):
    """Runs argv; returns (wall, cpu) of the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def jobs(inp, tmp, threads, reference, prepare):
    """(name, argv builder(bin, out, metrics), has metrics)."""
    t = ["-@", str(threads), "--no-PG", "-T", os.path.join(tmp, "t")]
    coord = os.path.join(tmp, "coord.bam")
    halves = [os.path.join(tmp, f"half{k}.bam") for k in range(2)]
    prepare(coord, halves)
    out = []
    for mem in ["1G", "10M"]:
        for order in [[], ["-n"], ["-N"], ["-t", "RG"], ["--template-coordinate"]]:
            name = f"sort {' '.join(order) or 'coordinate'} -m {mem}"
            out.append((name, lambda b, o, m, order=order, mem=mem: [b, "sort", *t, *order, "-m", mem, "-o", o, inp],
                        False))
    out.append(("sort --markdup (name-grouped input) -m 1G",
                lambda b, o, m: [b, "sort", *t, "-m", "1G", "--markdup", "--metrics", m, "-o", o, inp], True))
    out.append(("sort --markdup (coordinate input) -m 10M",
                lambda b, o, m: [b, "sort", *t, "-m", "10M", "--markdup", "--metrics", m, "-o", o, coord], True))
    out.append(("sort -O sam", lambda b, o, m: [b, "sort", *t, "-m", "1G", "-O", "sam", "-o", o, inp], False))
    out.append(("merge two halves", lambda b, o, m: [b, "merge", "--no-PG", "-s", "1", "-@", str(threads), "-f", o,
                                                   *halves],
                False))
    if reference:
        cram = os.path.join(tmp, "coord.cram")
        out.append(("sort -O cram", lambda b, o, m: [b, "sort", *t, "-m", "1G", "-O", "cram", "--reference",
                                                      reference, "-o", o, inp], False))
        out.append(("sort CRAM input -n", lambda b, o, m: [b, "sort", *t, "-n", "-m", "1G", "--reference", reference,
                                                           "-o", o, cram], False))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the build before")
    ap.add_argument("--b", required=True, help="the build after")
    ap.add_argument("--input", required=True, help="a name-grouped (aligner order) BAM")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reference", default=None, help="FASTA of the input's references: adds the CRAM jobs")
    ap.add_argument("--only", default=None, help="run only jobs whose name contains this")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="builds.", dir=os.path.dirname(os.path.abspath(args.input)))
    os.makedirs(os.path.join(tmp, "t"))

    def prepare(coord, halves):
        # Made with build A, once: inputs for the coordinate --markdup,
        # merge and CRAM-in jobs.
        subprocess.run([args.a, "sort", "--no-PG", "-@", str(args.threads), "-m", "1G", "-o", coord, args.input],
                       check=True)
        for k, h in enumerate(halves):
            subprocess.run(["samtools", "view", "-b", "--no-PG", "-e", f"(pos & 1) == {k}", "-o", h, coord],
                           check=True)
        if args.reference:
            subprocess.run([args.a, "sort", "--no-PG", "-@", str(args.threads), "-m", "1G", "-O", "cram",
                            "--reference", args.reference, "-o", os.path.join(os.path.dirname(coord), "coord.cram"),
                            args.input], check=True)

    rows = []
    for name, argv, has_metrics in jobs(args.input, tmp, args.threads, args.reference, prepare):
        if args.only and args.only not in name:
            continue
        res = {}
        for _ in range(args.runs):
            for tag, b in (("a", args.a), ("b", args.b)):
                o = os.path.join(tmp, f"out.{tag}")
                m = os.path.join(tmp, f"metrics.{tag}")
                wall, cpu = run(argv(b, o, m))
                r = res.setdefault(tag, {"wall": [], "cpu": []})
                r["wall"].append(wall)
                r["cpu"].append(cpu)
                r["md5"] = md5(o)
                if has_metrics:
                    # The metrics' first lines name the command and date.
                    with open(m, "rb") as f:
                        body = b"".join(line for line in f if not line.startswith(b"#"))
                    r["metrics"] = hashlib.md5(body).hexdigest()
                os.remove(o)
        same = res["a"]["md5"] == res["b"]["md5"] and res["a"].get("metrics") == res["b"].get("metrics")
        ca, cb = statistics.median(res["a"]["cpu"]), statistics.median(res["b"]["cpu"])
        row = (name, res["a"]["md5"][:12], res["b"]["md5"][:12], res["a"].get("metrics", "")[:12],
               res["b"].get("metrics", "")[:12], "yes" if same else "**NO**", ca, cb, cb / ca,
               statistics.median(res["a"]["wall"]), statistics.median(res["b"]["wall"]))
        rows.append(row)
        print(f"{name}: same={row[5]} cpu {ca:.2f} -> {cb:.2f} ({cb / ca:.3f}x) md5 {row[1]} {row[2]}",
              flush=True)
    lines = [
        f"# Two builds, same jobs ({datetime.date.today()}, {platform.node()})",
        "",
        f"A = `{args.a}`, B = `{args.b}`; input `{args.input}`; -@{args.threads}; medians of {args.runs} runs "
        f"alternating A and B; CPU = user+sys of the child; load average at the end "
        f"{os.getloadavg()[0]:.1f}. Output md5 of the whole file (--no-PG); metrics md5 without its `#` lines.",
        "",
        "| job | output md5 A | output md5 B | metrics A | metrics B | identical | CPU A s | CPU B s | B/A CPU | wall A s | wall B s |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]:.2f} | {r[7]:.2f} | {r[8]:.3f} | "
                     f"{r[9]:.2f} | {r[10]:.2f} |")
    if rows:
        lines += ["", f"Median B/A CPU over the jobs: {statistics.median(r[8] for r in rows):.3f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    subprocess.run(["rm", "-rf", tmp])
    return 0 if all(r[5] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
