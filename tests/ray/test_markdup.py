"""`alnsort.ray.sort(..., markdup=True)` on a simulated cluster (a 0-CPU head
and three one-CPU workers) against one-node `alnsort sort --markdup` on the
same inputs: the output (the same bytes with one partition, the same BGZF
payload with several: the parts' blocks are cut at part boundaries, as
without --markdup) and the metrics file byte for byte, on name-grouped and
coordinate-sorted input (Picard's two semantics), one and two inputs, with
DT tags and removal, 1 to 8 partitions; and a worker node killed in the
middle of a reduce (Ray runs it again elsewhere) gives the same bytes.

The inputs are the duplicate traps of tests/markdup/test_vs_picard.py
(pairs across references, fragments at pair ends, mates unmapped,
secondary and supplementary records, optical sets on two tiles, three read
groups of two libraries and one without LB) spread over the inputs whole
templates at a time. One node's flags are Picard's (tests/markdup/).
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import pysam
import pytest

import harness

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(TESTS / "markdup"))

import test_vs_picard as g  # noqa: E402
from test_sort_markdup import moved, stale_dups, with_mate_cigars  # noqa: E402

import alnsort.ray as aray  # noqa: E402
from faults import Barrier  # noqa: E402
from simcluster import inflate_bgzf, simulated_cluster  # noqa: E402
from test_cluster import run_killing  # noqa: E402

STORE = 80 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spill = tmp_path_factory.mktemp("md-spill")
    system = {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 500,
        "health_check_failure_threshold": 2,
        "object_spilling_config": json.dumps(
            {"type": "filesystem", "params": {"directory_path": str(spill)}}
        ),
    }
    with simulated_cluster(
        3, STORE, head_store_bytes=STORE, system_config=system, python_path=[str(HERE), str(TESTS)]
    ) as c:
        yield c


def templates():
    old = g.REFS
    g.REFS = [(n, 4_000_000) for n, _ in old]
    recs = []
    for n, name in enumerate(sorted(g.TRAPS)):
        recs += moved(g.TRAPS[name](), n)
    recs += moved(g.t_adversarial(100), len(g.TRAPS))
    for s in range(3):
        recs += moved(g.t_random(10 + s), len(g.TRAPS) + 1 + s)
    return stale_dups(recs, 9), old


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """{(semantics, number of inputs): [paths]}."""
    d = tmp_path_factory.mktemp("md-in")
    recs, old = templates()
    out = {}
    try:
        for n in (1, 2):
            parts = [[] for _ in range(n)]
            for r in recs:
                parts[zlib.crc32(r.name.encode()) % n].append(r)
            for coordinate in (False, True):
                paths = []
                for k, p in enumerate(parts):
                    path = d / f"in{n}.{k}.bam"
                    g.write_bam(path, with_mate_cigars(p))
                    if coordinate:
                        s = d / f"in{n}.{k}.sorted.bam"
                        pysam.sort("-o", str(s), str(path))
                        path = s
                    paths.append(str(path))
                out[(coordinate, n)] = paths
    finally:
        g.REFS = old
    return out


def one_node(tmp: Path, ins, opts):
    out, m = tmp / "one.bam", tmp / "one.metrics"
    harness.check_ok(harness.run_alnsort(["--no-PG", "--markdup", *opts, "--metrics", str(m), "-o", str(out), *ins]))
    text = m.read_text()
    return out.read_bytes(), text


def ray_run(tmp: Path, ins, opts, partitions, splits, one_text, name="ray", hook=None, cluster=None):
    out, m = tmp / f"{name}.bam", tmp / f"{name}.metrics"
    # The metrics file records a command line: the one node's, so the two
    # files can be compared byte for byte.
    argv = one_text.split("\n")[3][2:].split(" ")
    kw = dict(inputs=ins, output=str(out), no_pg=True, partitions=partitions, splits=splits, markdup=True,
              metrics=str(m), markdup_options=list(opts), argv=argv)
    stats = run_killing(cluster, hook, **kw) if hook is not None else aray.sort(**kw)
    return out.read_bytes(), m.read_text(), stats


def same_output(got: bytes, want: bytes, partitions: int) -> bool:
    if partitions == 1:
        return got == want
    return inflate_bgzf(got) == inflate_bgzf(want)


CASES = [
    # (coordinate-sorted, inputs, options, partitions, splits)
    (False, 1, [], 1, 3),
    (False, 2, ["--tagging-policy", "all"], 4, 5),
    (True, 1, ["--remove-sequencing-duplicates"], 8, 8),
    (True, 2, ["--remove-duplicates"], 2, 4),
]


@pytest.mark.parametrize("coordinate,n,opts,partitions,splits", CASES)
def test_ray_markdup_is_one_nodes(coordinate, n, opts, partitions, splits, cluster, inputs, tmp_path):
    ins = inputs[(coordinate, n)]
    want, want_text = one_node(tmp_path, ins, opts)
    # The metrics name the output and metrics paths: the Ray run writes to
    # the same ones.
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    got, text, stats = ray_run(tmp_path, ins, opts, partitions, splits, want_text, name="one")
    assert stats["partitions"] == partitions and stats["splits"] >= min(splits, 2)
    assert stats["markdup"]["marked"] > 50, stats["markdup"]
    assert same_output(got, want, partitions), "the Ray output differs from one node's"
    assert text == want_text, "the Ray metrics differ from one node's"


def test_a_worker_killed_mid_reduce_gives_the_same_bytes(cluster, inputs, tmp_path):
    ins = inputs[(False, 2)]
    opts = ["--tagging-policy", "optical"]
    want, want_text = one_node(tmp_path, ins, opts)
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    calm, calm_text, _ = ray_run(tmp_path, ins, opts, 3, 4, want_text, name="one")
    assert same_output(calm, want, 3) and calm_text == want_text
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    barrier_dir = tmp_path / "barrier"
    barrier_dir.mkdir()
    hook = Barrier(str(barrier_dir), "reduce", 1)
    got, text, _ = ray_run(tmp_path, ins, opts, 3, 4, want_text, name="one", hook=hook, cluster=cluster)
    assert got == calm, "the disturbed run's bytes differ from the undisturbed run's"
    assert text == want_text
