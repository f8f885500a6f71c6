"""The Ray driver on a bare local Ray: `python -m alnsort.ray sort` with no
cluster address and no RAY_ADDRESS starts Ray in its own process
(`ray.init()`), sorts, and shuts it down again; the output is the file
`alnsort sort` writes on one machine (records, and the index answering as
the one samtools index builds).

Runs in a subprocess so that the simulated cluster of test_cluster.py (a
module fixture in this same pytest process) is neither used nor disturbed.
Ray, the alnsort package and pysam must be installed; nothing here skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pysam

import gen
import harness
import oracle

HERE = Path(__file__).resolve().parent

sys.path.insert(0, str(HERE))
from simcluster import datasets_back_as_bam, records  # noqa: E402


def test_local_ray_init_sorts_as_one_machine(tmp_path):
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=53, n_templates=4_000, n_long_reads=2)))
    bam = str(tmp_path / "in.bam")
    oracle.to_bam(str(sam), bam)

    out = str(tmp_path / "ray.bam")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    res = subprocess.run(
        [sys.executable, "-m", "alnsort.ray", "sort", "--write-index", "--splits", "3",
         "--partitions", "2", "--stats", "-o", out, bam],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    # It ran on Ray: the statistics count the splits it cut and the records.
    stats = json.loads(res.stdout)
    assert stats["splits"] == 3, stats

    want = str(tmp_path / "want.bam")
    harness.check_ok(harness.run_alnsort(["--write-index", "-o", want, bam]))
    assert records(out) == records(want)
    with pysam.AlignmentFile(want) as f:
        n = sum(1 for _ in f.fetch(until_eof=True))
    assert stats["records"] == n > 7_000

    # The merged index answers a region query as samtools' index does.
    ref = str(tmp_path / "ref.bam")
    shutil.copyfile(want, ref)
    pysam.index(ref)
    with pysam.AlignmentFile(out) as a, pysam.AlignmentFile(ref) as b:
        for name in a.references:
            for beg in (0, 5_000, 20_000):
                got = [r.query_name for r in a.fetch(name, beg, beg + 3_000)]
                exp = [r.query_name for r in b.fetch(name, beg, beg + 3_000)]
                assert got == exp, (name, beg)


def test_an_index_of_a_name_order_is_warned_about_once(tmp_path):
    """`alnsort.ray.sort(order="name", index=True)`: as `alnsort sort -n
    --write-index`, no index and that command's warning, printed once (by
    the assemble in the driver; no task prints it)."""
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=54, n_templates=1_000)))
    bam = str(tmp_path / "in.bam")
    oracle.to_bam(str(sam), bam)
    want = harness.run_alnsort(["-n", "--write-index", "-o", str(tmp_path / "want.bam"), bam])
    harness.check_ok(want)
    warning = "[W::alnsort] Ignoring --write-index as it only works for position sorted files"
    assert want.stderr.decode().splitlines() == [warning]

    out = tmp_path / "ray.bam"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    script = (
        "import sys, alnsort.ray as r\n"
        "s = r.sort([sys.argv[1]], sys.argv[2], order='name', index=True, splits=2, partitions=2)\n"
        "print(s['records'])\n"
    )
    res = subprocess.run([sys.executable, "-c", script, bam, str(out)],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    said = [line for line in (res.stdout + res.stderr).splitlines() if "Ignoring --write-index" in line]
    assert said == [warning], res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ray.bam")) == ["ray.bam"]
    assert records(str(out)) == records(str(tmp_path / "want.bam"))


def test_parquet_dataset_written_by_the_reduces_reads_as_one_machine_and_in_ray_data(tmp_path):
    """`python -m alnsort.ray sort -O parquet -o DIR`: each reduce writes
    its range's Parquet files from its own task, the driver gathers them
    into one dataset; its records are those of `alnsort sort -O parquet`
    on one machine, its header too (the @PG line aside), and Ray Data
    reads it (row count, a region filter)."""
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=55, n_templates=3_000, n_long_reads=2)))
    bam = str(tmp_path / "in.bam")
    oracle.to_bam(str(sam), bam)

    out = tmp_path / "ray.parquet"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    res = subprocess.run(
        [sys.executable, "-m", "alnsort.ray", "sort", "-O", "parquet", "--splits", "3",
         "--partitions", "3", "--stats", "-o", str(out), bam],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    assert stats["partitions"] == 3, stats
    # The files of every range, each named by its range, in reference folders.
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet"))
    ranges = {f.split("/")[-1].split("-")[1] for f in files}
    assert ranges == {"00000", "00001", "00002"}, files
    assert all(f.startswith("ref=") for f in files), files
    # Nothing of the work directory is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    got_bam, one_bam, want = datasets_back_as_bam(out, bam, tmp_path)
    assert records(got_bam) == records(one_bam)
    with pysam.AlignmentFile(one_bam) as f:
        n = sum(1 for _ in f.fetch(until_eof=True))
    assert stats["records"] == n > 5_000

    import pyarrow.parquet as pq

    def header(ds):
        meta = pq.read_metadata(next(ds.rglob("*.parquet"))).metadata
        text = meta[b"alnsort.header"].decode()
        return [line for line in text.splitlines() if not line.startswith("@PG")], text

    (got, got_text), (exp, _) = header(out), header(want)
    assert got == exp
    assert "@PG\tID:alnsort" in got_text and "alnsort.ray" in got_text

    # Ray Data reads the dataset: every row, and a region by position.
    script = f"""
import json, ray, ray.data
ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
ds = ray.data.read_parquet({str(out)!r}, file_extensions=["parquet"])
region = ds.filter(lambda r: r["rname"] == "chr1" and r["pos"] <= 20000 and r["end"] >= 10000)
print(json.dumps({{"rows": ds.count(), "region": region.count()}}))
ray.shutdown()
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["rows"] == n
    with pysam.AlignmentFile(one_bam) as f:
        exp_region = sum(
            1 for r in f.fetch(until_eof=True)
            if r.reference_name == "chr1" and r.reference_start + 1 <= 20000
            and (r.reference_end if r.reference_end is not None and not r.is_unmapped
                 else r.reference_start + 1) >= 10000
        )
    assert got["region"] == exp_region > 0
