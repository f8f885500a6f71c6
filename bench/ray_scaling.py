#!/usr/bin/env python3
"""Scaling of the Ray driver (python -m alnsort.ray) on a simulated cluster.

For each node count N (default 1, 2, 3) it starts a `ray.cluster_utils.Cluster`
with a head of 0 CPUs (the driver) and N one-CPU worker nodes, sorts the
input with the same --splits and --partitions, and reports:

* wall time of the sort (cluster start-up excluded, reported apart),
* the time inside the Rust stage functions (summed over tasks) and the time
  outside them: wall - (driver stages + task stages / N), i.e. the driver's
  Python, Ray's scheduling and object transfers, and waiting,
* the data moved through the object store per record (map block bytes /
  records),
* a checksum of the output file: it must be the same for every N,

and, on the same input, `alnsort sort -@ 1` (one core, as one one-CPU node)
with the checksum of its decoded records, which must equal the Ray runs'.
With `--repeat K` the comparison (the baseline, then each node count) runs
K times in a row, each round with the machine's load average (`uptime`)
before it, and per phase the tasks' CPU seconds beside the wall time.
With `--index` both write a CSI index (`--write-index`, `index=True`).
With `--markdup` both mark duplicates (`alnsort sort --markdup -@ 1
--metrics`, `markdup=True, metrics=...`; `--decision-buckets B` passed to
the Ray runs, 0 for the one decide task): the metrics files must have the
same numbers (their command-line header lines differ), and the records
digest is of the marked records.

    .venv/bin/python bench/ray_scaling.py [--input X.bam | --records 1000000]
        [--nodes 1,2,3] [--splits 6] [--partitions 6] [--repeat 2] [--index]
        [--markdup [--decision-buckets B]]
        [--out bench/results/DATE-ray-scaling.md]

Needs the alnsort package with alnsort.stages and ray==2.60.0 installed
(pip install '.[ray]'), pysam (to generate and to check records), and the
release binary target/release/alnsort.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ray"))

from simcluster import records, simulated_cluster  # noqa: E402  (the tests' cluster set-up)


def generate(records: int, path: str) -> None:
    import gen
    import oracle

    sam = path + ".sam"
    p = gen.Params(
        seed=77,
        n_templates=records * 100 // 185,  # ~1.85 records per template
        read_len=100,
        header="v15",
        refs=[("chr1", 50_000_000), ("chr2", 40_000_000), ("chrM", 400_000)],
        tie_fraction=0.05,
    )
    with open(sam, "w") as f:
        f.write(gen.generate(p))
    oracle.to_bam(sam, path)
    os.unlink(sam)


def record_digest(path: str) -> str:
    """sha256 of the decompressed record section (after the header)."""
    return hashlib.sha256(records(path)).hexdigest()[:16]


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def children_cpu() -> float:
    """CPU seconds of the finished child processes (user + system)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def tree_cpu() -> float:
    """CPU seconds (user + system) used so far by this process and its live
    descendants (the simulated cluster's processes: GCS, raylets, workers,
    object stores), read from /proc; 0 where /proc is missing."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    family = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in stats.items():
            if ppid in family and pid not in family:
                family.add(pid)
                grew = True
    return sum(stats[p][1] for p in family if p in stats)


def metrics_digest(path: str) -> str:
    """sha256 of a metrics file without its '#' lines (the command line)."""
    with open(path) as f:
        body = "".join(line for line in f if not line.startswith("#"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def aray_module_file() -> str:
    import alnsort.ray as aray

    return aray.__file__


def run_ray(n: int, inp: str, out: str, args: argparse.Namespace, sampling: str) -> dict:
    import alnsort.ray as aray

    default = getattr(aray, "DRIVER_SAMPLE_SPLITS", None)
    if sampling == "tasks" and default is not None:
        aray.DRIVER_SAMPLE_SPLITS = 0  # every split sampled by tasks

    t0 = time.perf_counter()
    with simulated_cluster(n, args.store_mib << 20):
        startup = time.perf_counter() - t0
        # One @PG command line for every run (it names the output file),
        # so that the output bytes can be compared across node counts.
        argv = ["python", "-m", "alnsort.ray", "sort", "-o", "out.bam", "in.bam"]
        c0 = tree_cpu()
        md = {}
        if args.markdup:
            md = {"markdup": True, "metrics": out + ".metrics", "decision_buckets": args.decision_buckets}
        stats = aray.sort(
            inp, out, splits=args.splits, partitions=args.partitions, threads=1, max_memory=args.memory, argv=argv,
            index=args.index, **md,
        )
        stats["tree_cpu_seconds"] = tree_cpu() - c0
    stats["startup_seconds"] = startup
    if default is not None:
        aray.DRIVER_SAMPLE_SPLITS = default
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", help="a BAM file (default: generate one of --records records)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--splits", type=int, default=6)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--memory", default="768M", help="-m per map task")
    ap.add_argument("--store-mib", type=int, default=1024, help="object store per node (MiB)")
    ap.add_argument("--out", help="write the Markdown report here (default: stdout only)")
    ap.add_argument("--work", help="directory for inputs and outputs (default: a temporary one)")
    ap.add_argument(
        "--sampling",
        default="driver",
        help="comma-separated: 'driver' (the default rule: the driver samples a few splits of one input) "
        "and/or 'tasks' (sample tasks only); each node count runs once per entry",
    )
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the whole comparison")
    ap.add_argument("--index", action="store_true", help="write a CSI index (both the baseline and Ray)")
    ap.add_argument("--markdup", action="store_true", help="mark duplicates (both the baseline and Ray)")
    ap.add_argument("--decision-buckets", type=int, help="with --markdup: the Ray runs' decision_buckets")
    args = ap.parse_args()
    binary = os.path.join(ROOT, "target", "release", "alnsort")

    work = args.work or tempfile.mkdtemp(prefix="ray-scaling-")
    os.makedirs(work, exist_ok=True)
    inp = args.input
    if inp is None:
        inp = os.path.join(work, f"gen-{args.records}.bam")
        if not os.path.exists(inp):
            print(f"generating {inp} ...", file=sys.stderr)
            generate(args.records, inp)

    rows = []
    singles = []
    single = os.path.join(work, "single.bam")
    for rnd in range(1, args.repeat + 1):
        load = load_average()
        c0 = children_cpu()
        t0 = time.perf_counter()
        index = ["--write-index"] if args.index else []
        if args.markdup:
            index += ["--markdup", "--metrics", single + ".metrics"]
        subprocess.run([binary, "sort", "-@", "1", "-m", args.memory, *index, "-o", single, inp], check=True)
        single_wall = time.perf_counter() - t0
        single_cpu = children_cpu() - c0
        single_digest = record_digest(single)
        singles.append(
            {"round": rnd, "wall": single_wall, "cpu": single_cpu, "load": load,
             "file": file_digest(single), "records_digest": single_digest,
             "metrics": metrics_digest(single + ".metrics") if args.markdup else ""}
        )
        print(f"round {rnd}: alnsort sort -@ 1: {single_wall:.2f} s (load {load})", file=sys.stderr)

        for n, sampling in [(int(x), v) for x in args.nodes.split(",") for v in args.sampling.split(",")]:
            out = os.path.join(work, f"ray-{n}.bam")
            load = load_average()
            s = run_ray(n, inp, out, args, sampling)
            # The driver samples a few splits of one input itself.
            on_driver = ("split", "assemble") + (("sample",) if s["phases"]["sample"].get("tasks") == 0 else ())
            # The decision's phases ran beside the maps: their wall is the
            # driver's wait for them.
            for v in s["phases"].values():
                v.setdefault("wall", v.get("wall_waited", 0.0))
            task_stage = sum(v["stage"] for p, v in s["phases"].items() if p not in on_driver)
            driver_stage = sum(s["phases"][p]["stage"] for p in on_driver)
            outside = s["wall_seconds"] - (driver_stage + task_stage / n)
            row = {
                "round": rnd,
                "load": load,
                "single": single_wall,
                "single_cpu": single_cpu,
                "nodes": n,
                "sampling": "driver" if s["phases"]["sample"].get("tasks") == 0 else "tasks",
                "wall": s["wall_seconds"],
                "startup": s["startup_seconds"],
                "stage": s["stage_seconds"],
                "outside": outside,
                "moved_per_record": s["shuffle_bytes"] / max(1, s["records"]),
                "records": s["records"],
                "phases": {k: round(v["wall"], 2) for k, v in s["phases"].items()},
                "cpu": {k: round(v["cpu"], 2) for k, v in s["phases"].items() if "cpu" in v},
                "tree_cpu": s["tree_cpu_seconds"],
                "file": file_digest(out),
                "records_digest": record_digest(out),
                "metrics": metrics_digest(out + ".metrics") if args.markdup else "",
                "decision": s.get("markdup", {}).get("path", ""),
            }
            rows.append(row)
            print(row, file=sys.stderr)
            for leftover in (out, out + ".csi", out + ".metrics"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
    single_digest = singles[0]["records_digest"]

    lines = [
        f"# Ray scaling, {datetime.date.today().isoformat()}",
        "",
        f"Machine: {platform.node()}, {os.cpu_count()} cores (shared with other work), "
        f"Python {platform.python_version()}; simulated cluster (ray.cluster_utils.Cluster): "
        "head with 0 CPUs + N one-CPU worker nodes, object store "
        f"{args.store_mib} MiB per node; `--splits {args.splits} --partitions {args.partitions}`, "
        f"`-m {args.memory}` per map task, `-@ 1` per task{'; CSI index written' if args.index else ''}"
        f"{'; duplicates marked (--markdup)' if args.markdup else ''}.",
        f"alnsort package: {os.path.dirname(aray_module_file())} (Python {sys.executable}).",
        "",
        f"Input: `{inp if args.input else f'tests/gen.py, {args.records} records requested'}` "
        f"({os.path.getsize(inp) / 1e6:.1f} MB), {rows[0]['records'] if rows else '?'} records.",
        "Command: `.venv/bin/python bench/ray_scaling.py "
        + " ".join(sys.argv[1:])
        + "`",
        "",
        f"Baseline `alnsort sort -@ 1 -m {args.memory}{' --write-index' if args.index else ''}"
        f"{' --markdup --metrics M' if args.markdup else ''}`, one line per round:",
        "",
        "| round | load before (1, 5, 15 min) | wall s | CPU s | output sha256 | records digest | metrics digest |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in singles:
        lines.append(
            f"| {b['round']} | {b['load']} | **{b['wall']:.2f}** | {b['cpu']:.2f} | {b['file']} | "
            f"{b['records_digest']} | {b['metrics'] or '-'} |"
        )
    lines += [
        "",
        "| round | load before | nodes | sampled by | decision | wall s | vs `alnsort sort -@ 1` (same round) | CPU s (all processes) | CPU vs `alnsort sort -@ 1` | start-up s | in stages s (sum) | outside stages s | object-store bytes/record | phases (wall s) | task CPU s | output sha256 | records digest | metrics digest |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ph = ", ".join(f"{k} {v}" for k, v in r["phases"].items())
        cpu = ", ".join(f"{k} {v}" for k, v in r["cpu"].items())
        lines.append(
            f"| {r['round']} | {r['load']} | {r['nodes']} | {r['sampling']} | {r['decision'] or '-'} | {r['wall']:.2f} | "
            f"{r['wall'] / r['single']:.2f}x | "
            f"{r['tree_cpu']:.2f} | {r['tree_cpu'] / r['single_cpu']:.2f}x | "
            f"{r['startup']:.1f} | {r['stage']:.2f} | {r['outside']:.2f} | {r['moved_per_record']:.0f} | {ph} | "
            f"{cpu} | {r['file']} | "
            f"{r['records_digest']}{'' if r['records_digest'] == single_digest else ' (DIFFERS)'} | "
            f"{r['metrics'] or '-'}{'' if r['metrics'] == singles[0]['metrics'] else ' (DIFFERS)'} |"
        )
    lines += [
        "",
        "outside stages = wall - (split + assemble on the driver) - (sample + map + reduce task time) / N;",
        "the driver samples a few splits of one input itself (sample task CPU is then the driver's): sample counts with split and assemble.",
        "With 2 cores, 3 one-CPU nodes (plus the driver and Ray's own processes) oversubscribe the machine.",
    ]
    same = len({r["file"] for r in rows}) <= 1 and all(
        r["records_digest"] == single_digest and r["metrics"] == singles[0]["metrics"] for r in rows + singles
    )
    lines.append(
        "Output bytes identical for every node count and records identical to `alnsort sort`"
        + (" (metrics numbers too)" if args.markdup else "")
        + ": "
        + ("yes" if same else "**NO**")
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
