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
from simcluster import records  # noqa: E402


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
