"""How the Ray driver (alnsort.ray) moves map blocks to the reduces: each
block leaves a map task as an out-of-band pickle buffer (Ray copies it once,
straight into the object store; a reduce reads it there as a buffer), not as
`bytes` pickled into the task's result stream, and the reduce task takes such
read-only buffers and writes the part `alnsort.stages.reduce` writes from
`bytes`. The task functions are called here directly (they are plain
functions that Ray makes remote); no cluster is started.

Also: sample tasks take groups of splits (one task per CPU of the cluster),
and the groups cover the splits in order.

Needs the alnsort package and pysam (tests/requirements.txt); nothing here
skips.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import gen
import oracle

import alnsort.ray as aray  # noqa: E402  (a missing package is an error, not a skip)
from alnsort import stages  # noqa: E402

ORDER = {"order": "coordinate"}


def run(inputs) -> "aray._Run":
    """What the driver gives every task of a run: one input's stages."""
    return aray._Run("alnsort.stages", inputs, ORDER)


@pytest.fixture(scope="module")
def bam(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("transfer-input")
    sam = d / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=5, n_templates=4_000, header="v15")))
    out = str(d / "in.bam")
    oracle.to_bam(str(sam), out)
    return out


def test_blocks_leave_a_map_out_of_band_and_reduce_from_read_only_buffers(bam, tmp_path):
    inputs = [bam]
    splits = stages.split(inputs, 2)
    assert len(splits) == 2
    samples = [k for s in splits for k in stages.sample(inputs, s, 64)]
    cuts = stages.splitters(samples, 3)
    ranges = len(cuts) + 1
    results = [
        aray._map_task(run(inputs), i, s, cuts, None)
        for i, s in enumerate(splits)
    ]
    for meta, *blocks in results:
        assert len(blocks) == ranges
        assert all(isinstance(b, pickle.PickleBuffer) for b in blocks), [type(b) for b in blocks]
        # Pickled as Ray pickles a task's result (protocol 5 with a buffer
        # callback): every block goes out of band, the stream holds only
        # the small summary.
        buffers: list = []
        stream = pickle.dumps((meta, *blocks), protocol=5, buffer_callback=buffers.append)
        assert len(buffers) == ranges
        assert sum(len(b.raw()) for b in buffers) == meta["bytes"] > 10_000
        assert len(stream) < 1_000, len(stream)

    total = 0
    for r in range(ranges):
        # What a reduce receives from the object store: read-only buffers.
        views = [memoryview(res[1 + r]).toreadonly() for res in results]
        part = tmp_path / f"part-{r}"
        got = aray._reduce_task(
            run(inputs), r, str(part), ranges, {"output_format": "bam", "index": None}, None, None, *views
        )
        want_part = tmp_path / f"want-{r}"
        want = stages.reduce(inputs, [bytes(v) for v in views], want_part, r, ranges)
        assert (got["records"], got["bytes"]) == (want["records"], want["bytes"])
        assert part.read_bytes() == want_part.read_bytes()
        total += got["records"]
    assert total == sum(meta["records"] for meta, *_ in results) > 7_000


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 64])
def test_sample_groups_cover_the_splits_in_order(n):
    splits = [{"ordinal": i} for i in range(6)]
    groups = aray._groups(splits, n)
    assert len(groups) == min(n, 6)
    assert [s for g in groups for s in g] == splits
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1, sizes


def test_a_sample_task_samples_each_split_of_its_group(bam):
    inputs = [bam]
    splits = stages.split(inputs, 3)
    got = aray._sample_task(run(inputs), splits, 20, [False] * len(splits))
    assert [g["keys"] for g in got] == [stages.sample(inputs, s, 20) for s in splits]
    assert all(len(g["keys"]) == 20 and g["cpu"] >= 0 for g in got)
    assert all(g["reach"] is None for g in got)
    # Where asked, each split's reach comes with its samples.
    want = [i % 2 == 0 for i in range(len(splits))]
    got = aray._sample_task(run(inputs), splits, 20, want)
    assert [g["reach"] for g in got] == [stages.reach(inputs, s) if w else None for s, w in zip(splits, want)]


def test_a_reduce_reads_read_only_buffers_in_place(bam, tmp_path):
    """The blocks a reduce task receives (read-only buffers over Ray's
    object store) are read where they lie, not first copied into `bytes`:
    Python allocates nothing near their size. A writable buffer (which
    Python code could change while the reduce runs without the GIL) is
    copied first and gives the same part; an object without the buffer
    protocol is refused."""
    import tracemalloc

    inputs = [bam]
    splits = stages.split(inputs, 2)
    blocks = [stages.map(inputs, s, [], **ORDER)["blocks"][0] for s in splits]
    size = sum(len(b) for b in blocks)
    assert size > 1_000_000, size
    views = [memoryview(b).toreadonly() for b in blocks]

    tracemalloc.start()
    try:
        got = stages.reduce(inputs, views, tmp_path / "part-views", 0, 1, **ORDER)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size // 4, f"the reduce allocated {peak} bytes in Python for {size} bytes of blocks"

    want = stages.reduce(inputs, [bytes(b) for b in blocks], tmp_path / "part-bytes", 0, 1, **ORDER)
    writable = stages.reduce(inputs, [bytearray(b) for b in blocks], tmp_path / "part-writable", 0, 1, **ORDER)
    assert got == want == writable and got["records"] > 7_000
    assert (tmp_path / "part-views").read_bytes() == (tmp_path / "part-bytes").read_bytes()
    assert (tmp_path / "part-writable").read_bytes() == (tmp_path / "part-bytes").read_bytes()

    with pytest.raises(TypeError):
        stages.reduce(inputs, ["not a buffer"], tmp_path / "part-str", 0, 1, **ORDER)
    assert not (tmp_path / "part-str").exists()


def test_parquet_parts_of_the_reduces_and_a_retried_reduce_assemble_into_one_dataset(bam, tmp_path):
    """With output_format="parquet" each reduce task writes its range's
    dataset directory; a reduce run again (a retried task) replaces the
    part it completed before with the same files; the assemble moves the
    parts' files into one dataset whose records are `alnsort sort -O
    parquet`'s, read back by alnsort."""
    from simcluster import datasets_back_as_bam, records

    inputs = [bam]
    splits = stages.split(inputs, 2)
    samples = [k for s in splits for k in stages.sample(inputs, s, 64)]
    cuts = stages.splitters(samples, 3)
    ranges = len(cuts) + 1
    results = [aray._map_task(run(inputs), i, s, cuts, None) for i, s in enumerate(splits)]
    argv = ["python", "-m", "alnsort.ray", "sort", "-O", "parquet", "-o", "x"]
    options = {"output_format": "parquet", "index": None, "argv": argv, "no_pg": False}
    parts = []
    for r in range(ranges):
        views = [memoryview(res[1 + r]).toreadonly() for res in results]
        part = tmp_path / f"part-{r}.dataset"
        got = aray._reduce_task(run(inputs), r, str(part), ranges, options, None, None, *views)
        first = sorted(p.relative_to(part) for p in part.rglob("*") if p.is_file())
        again = aray._reduce_task(run(inputs), r, str(part), ranges, options, None, None, *views)
        assert again["records"] == got["records"]
        assert sorted(p.relative_to(part) for p in part.rglob("*") if p.is_file()) == first
        assert all(f"part-{r:05d}-" in p.name for p in first if p.suffix == ".parquet"), first
        parts.append(str(part))
    # Nothing of the attempts is left in the work directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(p).name for p in parts)
    out = tmp_path / "out.parquet"
    done = stages.assemble(inputs, parts, out, output_format="parquet", argv=argv, **ORDER)
    assert done["bytes"] > 0 and done["index"] is None
    got_bam, one_bam, _ = datasets_back_as_bam(out, bam, tmp_path)
    assert records(got_bam) == records(one_bam)
    # An index or a sharded output of a dataset is refused by name.
    with pytest.raises(Exception, match="write-index cannot be honoured for Parquet"):
        stages.assemble(inputs, parts, tmp_path / "x.parquet", output_format="parquet", index="csi", **ORDER)
    with pytest.raises(Exception, match="a sharded output is refused"):
        stages.assemble(inputs, parts, tmp_path / "y.parquet", output_format="parquet", sharded=True, **ORDER)
    assert not (tmp_path / "x.parquet").exists() and not (tmp_path / "y.parquet").exists()
