"""The Ray driver (alnsort.ray) on a simulated cluster: a head with 0 CPUs
(the driver only) and 3 one-CPU worker nodes with the smallest object stores
Ray allows and a spilling threshold low enough that map blocks spill.

The proof: a generated BAM is sorted undisturbed, then again while a worker
node is killed once in the middle of a map task and once in the middle of a
reduce task (the task waits on a file barrier until the test has removed its
node; Ray runs it again elsewhere and rebuilds the lost blocks by lineage).
Every disturbed output must be byte-identical to the undisturbed one (BAM and
merged index), record-identical to `alnsort sort` on one machine, and its
merged index must answer region queries exactly as the index `samtools index`
(pysam) builds for the same file. The same for the sharded output.

Ray, the alnsort package and pysam must be installed (scripts/test.sh does
it); nothing here skips. A failure to start Ray is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import gen
import harness
import oracle

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent

import ray  # noqa: E402  (a missing Ray is an error, not a skip)
from ray.cluster_utils import Cluster  # noqa: E402

import alnsort  # noqa: E402
import alnsort.ray as aray  # noqa: E402

from faults import Barrier  # noqa: E402
from simcluster import (  # noqa: E402
    add_worker,
    header_end,
    inflate_bgzf,
    records,
    simulated_cluster,
    spill_reports,
)

# Minutes of simulated-cluster runs with nodes killed: CI runs them (ALNSORT_SLOW_TESTS=1);
# tests/ray/test_markdup.py keeps a simulated cluster with a killed node in every run.
pytestmark = pytest.mark.slow

STORE = 80 << 20  # just above Ray's minimum object store (75 MiB)
SPLITS = 6
PARTITIONS = 5
# The @PG line records the command line, output path included: runs that
# are compared byte for byte record the same one.
ARGV = ["python", "-m", "alnsort.ray", "sort", "--write-index", "-o", "out.bam", "in.bam"]


@pytest.fixture(scope="module")
def spill_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ray-spill")


@pytest.fixture(scope="module")
def cluster(spill_dir):
    system = {
        # A dead node is noticed in about a second.
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 500,
        "health_check_failure_threshold": 2,
        # Spill early and in small batches: blocks do not stay in memory.
        # The input is ~9 MB in 6 splits, so a node that ran two maps holds
        # ~3 MB of blocks: the threshold (1% of the 80 MiB store, 0.8 MiB)
        # and the batch must be below one map's blocks, or whether anything
        # spills depends on how the maps fell on the nodes.
        "object_spilling_threshold": 0.01,
        "min_spilling_size": 256 << 10,
        "object_spilling_config": json.dumps(
            {"type": "filesystem", "params": {"directory_path": str(spill_dir)}}
        ),
    }
    # Workers must import the test helpers (faults.py, fake_stages.py).
    with simulated_cluster(
        3, STORE, head_store_bytes=STORE, system_config=system, python_path=[str(HERE), str(TESTS)]
    ) as c:
        yield c


@pytest.fixture(scope="module")
def bam(tmp_path_factory) -> str:
    """~60k records over three references, with long reads, unmapped reads
    and a hot tie window; BGZF as samtools writes it."""
    d = tmp_path_factory.mktemp("ray-input")
    sam = d / "in.sam"
    sam.write_text(
        gen.generate(
            gen.Params(seed=31, n_templates=30_000, n_long_reads=3, n_huge_aux=1, header="v15")
        )
    )
    out = str(d / "in.bam")
    oracle.to_bam(str(sam), out)
    return out


@pytest.fixture(scope="module")
def single(bam, tmp_path_factory, alnsort_bin) -> str:
    """`alnsort sort --write-index` on one machine."""
    out = str(tmp_path_factory.mktemp("ray-single") / "single.bam")
    harness.check_ok(harness.run_alnsort(["--write-index", "-o", out, bam]))
    return out


# ---- helpers ------------------------------------------------------------------


def regions(path: str) -> list[str]:
    import pysam

    with pysam.AlignmentFile(path, "rb", check_sq=False) as f:
        refs = list(zip(f.references, f.lengths))
    out = ["*"]
    for name, length in refs:
        out += [name, f"{name}:1-300", f"{name}:150-151", f"{name}:{length - 1000}-{length}"]
        step = max(1, length // 5)
        out += [f"{name}:{s + 1}-{s + step // 2}" for s in range(0, length, step)]
    return out


def assert_index_answers_as_samtools(bam_path: str, index_path: str, tmp: Path) -> None:
    """Region queries through the merged index return exactly what they return
    through an index samtools (pysam) builds for the same bytes."""
    assert os.path.getsize(index_path) > 0, f"{index_path}: empty index"
    copy = tmp / ("ref-" + os.path.basename(bam_path))
    shutil.copyfile(bam_path, copy)
    kind = "csi" if index_path.endswith(".csi") else "bai"
    ref_index = oracle.index(str(copy), kind)
    for region in regions(bam_path):
        got = oracle.view_records(bam_path, region, index=index_path)
        want = oracle.view_records(str(copy), region, index=ref_index)
        assert got == want, f"{bam_path}: region {region}: the merged index returns other records"
    import pysam

    def stats(path, idx):
        with pysam.AlignmentFile(path, "rb", index_filename=idx) as f:
            return [tuple(s) for s in f.get_index_statistics()], f.nocoordinate

    got, want = stats(bam_path, index_path), stats(str(copy), ref_index)
    assert got == want and sum(s[3] for s in got[0]) > 0, (got, want)


def run_killing(cluster: Cluster, barrier: Barrier, **kwargs) -> dict:
    """Run aray.sort in a thread; when the barrier's task has started, remove
    its node and add a fresh one; return the run's statistics."""
    result: dict = {}

    def target():
        try:
            result["stats"] = aray.sort(task_hook=barrier, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            result["error"] = e

    th = threading.Thread(target=target, daemon=True)
    th.start()
    deadline = time.monotonic() + 120
    while not os.path.exists(barrier.marker):
        assert th.is_alive() or "error" in result or os.path.exists(barrier.marker), (
            f"the run ended before {barrier.stage} task {barrier.index} started: {result}"
        )
        if "error" in result:
            raise result["error"]
        assert time.monotonic() < deadline, f"{barrier.stage} task {barrier.index} never started"
        time.sleep(0.1)
    node_id = Path(barrier.marker).read_text()
    victims = [n for n in cluster.worker_nodes if n.node_id == node_id]
    assert len(victims) == 1, f"node {node_id} of {barrier.stage} task {barrier.index} not found"
    cluster.remove_node(victims[0], allow_graceful=False)
    add_worker(cluster, STORE)
    th.join(timeout=240)
    assert not th.is_alive(), "the run did not finish after the node was killed"
    if "error" in result:
        raise result["error"]
    attempts = [a for a in barrier.attempts() if a[:2] == (barrier.stage, str(barrier.index))]
    # Run again on another node (more attempts: a repaired split, or lineage
    # reconstruction of a map whose blocks were lost).
    assert attempts[0][2] == node_id and any(a[2] != node_id for a in attempts[1:]), (
        f"{barrier.stage} task {barrier.index} should have run again on another node: {attempts}"
    )
    return result["stats"]


class SpillWatch:
    """The most bytes seen at once in the spilling directory during a run
    (spilled objects are deleted when freed, so it is sampled while it runs)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.is_set():
            total = 0
            for root, _, files in os.walk(self.directory):
                for f in files:
                    try:
                        total += os.path.getsize(os.path.join(root, f))
                    except OSError:
                        pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# ---- the driver's own control flow (a stand-in for the stages) ----------------


def test_wrong_split_guesses_are_repaired(cluster, tmp_path):
    """Splits whose start is a wrong guess (inside a record) are detected by
    the previous map's proven end and mapped again from there: the output is
    exactly the stable sort, whatever the splits and partitions."""
    import random

    rng = random.Random(5)
    inputs = []
    for n in range(2):
        p = tmp_path / f"in{n}.txt"
        p.write_text("".join(f"{rng.randrange(-50, 5000)}\n" for _ in range(20_000)))
        inputs.append(str(p))
    lines = [line for p in inputs for line in Path(p).read_text().splitlines(keepends=True)]
    want = "".join(sorted(lines, key=int))
    out = tmp_path / "out.txt"
    stats = aray.sort(inputs, str(out), splits=6, partitions=4, stages_module="fake_stages")
    assert out.read_text() == want
    assert stats["records"] == len(lines)
    assert stats["repairs"] == 4, stats  # every split but the first of each input
    assert not [p for p in os.listdir(tmp_path) if "alnsort-ray" in p], "work directory left behind"


# ---- the proof with the real stages -------------------------------------------


@pytest.fixture(scope="module")
def undisturbed(cluster, bam, spill_dir, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("ray-undisturbed")
    out = str(d / "out.bam")
    reports = spill_reports(cluster)
    with SpillWatch(spill_dir) as spill:
        stats = aray.sort(bam, out, index=True, splits=SPLITS, partitions=PARTITIONS, argv=ARGV)
    return {
        "out": out,
        "stats": stats,
        "dir": d,
        "spilled": spill.peak,
        "spill_reports": spill_reports(cluster) - reports,
    }


def test_undisturbed_matches_single_node(undisturbed, single, bam):
    out = undisturbed["out"]
    assert records(out) == records(single), "records differ from alnsort sort"
    assert oracle.strip_pg(oracle.view(out)) == oracle.strip_pg(oracle.view(single))
    stats = undisturbed["stats"]
    assert stats["records"] > 40_000 and stats["partitions"] == PARTITIONS, stats
    # Spilled files are deleted when freed: the raylets' own reports count too.
    assert undisturbed["spilled"] > 0 or undisturbed["spill_reports"] > 0, (
        "no object was spilled: the test does not exercise spilling"
    )
    assert_index_answers_as_samtools(out, out + ".csi", undisturbed["dir"])


def test_sampling_on_the_driver_or_in_tasks_gives_the_same_bytes(cluster, undisturbed, bam, tmp_path, monkeypatch):
    """A few splits of one input are sampled by the driver itself while the
    workers start (no sample task); with that turned off, one sample task
    per CPU draws the same samples: the output and its index are
    byte-identical."""
    assert SPLITS <= aray.DRIVER_SAMPLE_SPLITS
    assert undisturbed["stats"]["phases"]["sample"]["tasks"] == 0, undisturbed["stats"]["phases"]
    monkeypatch.setattr(aray, "DRIVER_SAMPLE_SPLITS", 0)
    out = str(tmp_path / "out.bam")
    stats = aray.sort(bam, out, index=True, splits=SPLITS, partitions=PARTITIONS, argv=ARGV)
    assert stats["phases"]["sample"]["tasks"] == 3, stats["phases"]  # one per CPU
    ref = undisturbed["out"]
    assert Path(out).read_bytes() == Path(ref).read_bytes(), "output differs from the driver-sampled run"
    assert Path(out + ".csi").read_bytes() == Path(ref + ".csi").read_bytes(), "index differs"


@pytest.mark.parametrize("stage,index", [("map", SPLITS - 2), ("reduce", 1)])
def test_node_killed(cluster, undisturbed, single, bam, tmp_path, stage, index):
    out = str(tmp_path / "out.bam")
    barrier = Barrier(str(tmp_path), stage, index)
    run_killing(
        cluster, barrier, inputs=bam, output=out, index=True, splits=SPLITS, partitions=PARTITIONS, argv=ARGV
    )
    ref = undisturbed["out"]
    assert Path(out).read_bytes() == Path(ref).read_bytes(), "output differs from the undisturbed run"
    assert Path(out + ".csi").read_bytes() == Path(ref + ".csi").read_bytes(), "index differs"
    assert records(out) == records(single)
    assert_index_answers_as_samtools(out, out + ".csi", tmp_path)
    assert not [p for p in os.listdir(tmp_path) if "alnsort-ray" in p], "work directory left behind"


def shard_files(directory: str) -> list[str]:
    return sorted(os.listdir(directory))


def test_sharded_with_node_killed(cluster, single, bam, tmp_path):
    a = str(tmp_path / "a.sharded")
    aray.sort(bam, a, index=True, splits=SPLITS, partitions=PARTITIONS, sharded=True, argv=ARGV)
    b = str(tmp_path / "b.sharded")
    barrier = Barrier(str(tmp_path), "reduce", 2)
    run_killing(
        cluster, barrier, inputs=bam, output=b, index=True, splits=SPLITS, partitions=PARTITIONS, sharded=True, argv=ARGV
    )
    files = shard_files(a)
    assert files == shard_files(b)
    for name in files:
        assert Path(a, name).read_bytes() == Path(b, name).read_bytes(), f"{name} differs"
    bams = [os.path.join(b, n) for n in files if n.endswith(".bam")]
    assert len(bams) == PARTITIONS, files
    assert b"".join(records(p) for p in bams) == records(single), "shards' records differ from alnsort sort"
    for p in bams:
        idx = [os.path.join(b, n) for n in files if n.startswith(os.path.basename(p) + ".")]
        assert len(idx) == 1, f"{p}: index files {idx}"
        assert_index_answers_as_samtools(p, idx[0], tmp_path)


def test_command_line(cluster, single, bam, tmp_path):
    """python -m alnsort.ray sort, joining the running cluster by --address,
    with a name order and two inputs (lanes) sorted together: the same file
    twice, so every record ties with its copy; the records of `alnsort sort
    -n IN IN`."""
    out = str(tmp_path / "n.bam")
    env = dict(os.environ)
    res = subprocess.run(
        [sys.executable, "-m", "alnsort.ray", "sort", "-n", "--splits", "3", "--partitions", "2",
         "--address", cluster.address, "--stats", "-o", out, bam, bam],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert res.returncode == 0, res.stderr
    want = str(tmp_path / "want.bam")
    harness.check_ok(harness.run_alnsort(["-n", "-o", want, bam, bam]))
    assert records(out) == records(want)


@pytest.fixture(scope="module")
def lanes(tmp_path_factory) -> list[str]:
    """Three unsorted lanes whose headers must be merged (tests/lanes.py)."""
    import lanes as lanes_mod

    return lanes_mod.make_lanes(tmp_path_factory.mktemp("ray-lanes"), seed=41, n_templates=6000)


@pytest.mark.parametrize(
    "order,args",
    [("coordinate", []), ("template-coordinate", ["--template-coordinate"])],
)
def test_lanes_with_other_headers(cluster, lanes, tmp_path, order, args):
    """Three lanes with other @SQ orders, a reference one lane alone has and
    clashing @RG/@PG IDs: the file `alnsort sort IN1 IN2 IN3` writes (header
    and records; the uncompressed streams are equal), several splits per
    lane; in coordinate order with an index that answers as samtools'."""
    want = tmp_path / "want.bam"
    index = order == "coordinate"
    harness.check_ok(
        harness.run_alnsort(["--no-PG", *args, *(["--write-index"] if index else []), "-o", str(want), *lanes])
    )
    out = tmp_path / "out.bam"
    stats = aray.sort(lanes, str(out), order=order, index=index, no_pg=True, splits=7, partitions=4)
    assert stats["splits"] >= 6, stats
    # Several inputs: the splits' reaches read them whole, in sample tasks.
    assert stats["phases"]["sample"]["tasks"] > 0, stats["phases"]
    assert inflate_bgzf(out.read_bytes()) == inflate_bgzf(want.read_bytes()), (
        "header or records differ from alnsort sort IN1 IN2 IN3"
    )
    if index:
        assert_index_answers_as_samtools(str(out), str(out) + ".csi", tmp_path)


def test_bad_input_fails_cleanly(cluster, bam, tmp_path):
    """A corrupt record in the middle of the input fails the run with the
    stage's AlnsortError naming the file (not Ray's wrapper, not retried
    forever), and leaves neither output nor work directory behind."""
    import pysam

    # Inflate the whole file, break one record's reference id mid-file, write it back as BGZF.
    bad = tmp_path / "bad.bam"
    raw = bytearray(inflate_bgzf(Path(bam).read_bytes()))
    pos = header_end(raw)
    half = len(raw) // 2
    while pos < half:  # walk to the first record past the middle
        (size,) = struct.unpack_from("<i", raw, pos)
        pos += 4 + size
    struct.pack_into("<i", raw, pos + 4, 1 << 20)  # refID far past n_ref
    with pysam.BGZFile(str(bad), "wb") as f:
        f.write(bytes(raw))
    out = tmp_path / "out.bam"
    with pytest.raises(alnsort.AlnsortError) as err:
        aray.sort(str(bad), str(out), splits=SPLITS, partitions=PARTITIONS, max_retries=1)
    assert not isinstance(err.value, ray.exceptions.RayTaskError), repr(err.value)
    assert "bad.bam" in str(err.value), str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["bad.bam"], os.listdir(tmp_path)


def test_lanes_with_a_wrong_split_guess(cluster, lanes, tmp_path):
    """Several inputs, the first coordinate-sorted (its splits' reaches
    grow), and a wrong guessed split start in it (tests/ray/
    wrong_guess_stages.py): the split is repaired, the maps whose prior
    depended on it run again with the maps' own reaches, and the output is
    still the file of `alnsort sort -n IN1 IN2 IN3`."""
    import pysam

    first = tmp_path / "lane0-sorted.bam"
    pysam.sort("-o", str(first), lanes[0], catch_stdout=False)
    lanes = [str(first), *lanes[1:]]
    want = tmp_path / "want.bam"
    harness.check_ok(harness.run_alnsort(["--no-PG", "-n", "-o", str(want), *lanes]))
    out = tmp_path / "out.bam"
    stats = aray.sort(lanes, str(out), order="name", no_pg=True, splits=10, partitions=3,
                      stages_module="wrong_guess_stages")
    assert stats["repairs"] == 1 and stats["prior_reruns"] >= 1, stats
    assert inflate_bgzf(out.read_bytes()) == inflate_bgzf(want.read_bytes())

