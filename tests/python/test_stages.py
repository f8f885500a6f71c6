"""The distributed sort's stages (`alnsort.stages`, crates/cli/src/stages.rs):
split -> sample -> splitters -> map -> reduce -> assemble, run in this
process as a driver would run them as tasks.

* For every order and several (splits, partitions), the assembled output
  holds the same header and records, in the same order, as `alnsort sort`
  on the same input (the uncompressed BAM streams are equal; BGZF blocks
  are cut at part boundaries, so compressed bytes differ there), and a
  second run with the same splits and partitions writes the same bytes.
* The merged BAI/CSI is the index `samtools index` builds on the output
  (same content), and answers region queries alike.
* A wrong guessed split start is caught by the previous map's proven end
  and repaired, with nothing lost or read twice.
* The sharded mode writes complete, indexed files whose records are, in
  order, the sorted records.
* Several inputs (lanes) with other @SQ orders, a reference only one of
  them has and clashing @RG/@PG IDs give the file `alnsort sort IN1 IN2
  ...` writes (merged header, translated records, its tie order), in
  every order, and an index that answers as samtools index's.

Needs the `alnsort` package (as tests/python/test_python_package.py).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pysam
import pytest

import harness

try:
    import alnsort
    from alnsort import stages

    _IMPORT_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the environment
    alnsort = None
    stages = None
    _IMPORT_ERROR = e

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _package():
    if stages is not None:
        return
    why = (
        f"the alnsort Python package is not importable ({_IMPORT_ERROR}); "
        f"install it with `{sys.executable} -m pip install {REPO}`"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    warnings.warn(f"SKIPPING the stages tests: {why}")
    print(f"\n*** SKIPPED: {why} ***", file=sys.stderr)
    pytest.skip(f"SKIPPED LOUDLY: {why}")


ORDERS = {
    "coordinate": ([], {}),
    "name": (["-n"], {"order": "name"}),
    "name-lexicographic": (["-N"], {"order": "name-lexicographic"}),
    "tag": (["-t", "XI"], {"tag": "XI"}),
    "template-coordinate": (["--template-coordinate"], {"order": "template-coordinate"}),
    "minimiser": (["-M"], {"order": "minimiser"}),
}


def cli_sort(alnsort_bin: str, args: list[str], inp: str, out: Path) -> None:
    res = subprocess.run(
        [alnsort_bin, "sort", "--no-PG", "-O", "bam", *args, "-o", str(out), inp],
        capture_output=True,
        text=True,
        timeout=600,
    )
    harness.check_ok(res)


def distributed(inputs, out: Path, n_splits: int, partitions: int, index=None, sharded=False,
                wrong_guess=False, **order) -> dict:
    """The stages end to end, as a driver runs them; returns what it saw."""
    work = out.parent / (out.name + ".work")
    work.mkdir()
    splits = stages.split(inputs, n_splits)
    if wrong_guess:
        # Move a guessed start 3 bytes into its record: not a record start.
        splits[1]["start"] += 3
        splits[0]["end"] = splits[1]["start"]
    # A split whose start was guessed wrong usually fails on its first
    # record: such a failure waits for the previous map's proven end.
    samples = []
    reaches = []
    for s in splits:
        try:
            samples += stages.sample(inputs, s, 64, **order)
            reaches.append(stages.reach(inputs, s))
        except alnsort.AlnsortError:
            if not wrong_guess:
                raise
            reaches.append(None)
    if len(inputs) == 1:
        assert reaches == [None] * len(splits), "one input: no reach"
    cuts = stages.splitters(samples, partitions)
    priors = stages.priors(splits, reaches)
    maps = []
    failed = {}
    for i, s in enumerate(splits):
        try:
            maps.append(stages.map(inputs, s, cuts, prior=priors[i], **order))
        except alnsort.AlnsortError as e:
            if not wrong_guess:
                raise
            failed[i] = e
            maps.append({"end": None, "blocks": None, "records": 0, "reach": None})
    redone = []
    while True:
        redo = stages.repair(splits, [m["end"] for m in maps])
        if not redo:
            break
        for i in redo:
            failed.pop(i, None)
            maps[i] = stages.map(inputs, splits[i], cuts, prior=priors[i], **order)
        redone += redo
    assert not failed, failed
    # The maps' own reaches are exact (a repaired split's reach from
    # before the repair is not): a map that ran with another prior runs again.
    exact = stages.priors(splits, [m["reach"] for m in maps])
    for i, p in enumerate(exact):
        if p != priors[i]:
            maps[i] = stages.map(inputs, splits[i], cuts, prior=p, **order)
            redone.append(i)
    ranges = len(cuts) + 1
    parts = []
    counts = []
    for r in range(ranges):
        part = work / f"part-{r}"
        got = stages.reduce(inputs, [m["blocks"][r] for m in maps], part, r, ranges,
                            index=index, **order)
        assert got["bytes"] == part.stat().st_size
        counts.append(got["records"])
        parts.append(part)
    done = stages.assemble(inputs, parts, out, index=index, sharded=sharded, **order)
    return {"splits": splits, "cuts": cuts, "maps": maps, "redo": redone, "counts": counts,
            "done": done}


def index_content(path: Path, kind: str) -> list:
    """A BAI or CSI index as data: per reference, its bins (number ->
    loff, chunks) and linear index, then n_no_coor. The order of bins in
    the file (htslib's hash-table order) is left out: alnsort's own
    whole-file index differs from `samtools index` there too."""
    import struct

    b = inflated(path) if kind == "csi" else path.read_bytes()
    o = 4
    if kind == "csi":
        _min_shift, _depth, l_aux = struct.unpack_from("<iii", b, o)
        o += 12 + l_aux
    (n_ref,) = struct.unpack_from("<i", b, o)
    o += 4
    refs = []
    for _ in range(n_ref):
        (n_bin,) = struct.unpack_from("<i", b, o)
        o += 4
        bins = {}
        for _ in range(n_bin):
            if kind == "csi":
                bn, loff, nc = struct.unpack_from("<IQi", b, o)
                o += 16
            else:
                (bn, nc), loff = struct.unpack_from("<Ii", b, o), None
                o += 8
            bins[bn] = (loff, [struct.unpack_from("<QQ", b, o + 16 * i) for i in range(nc)])
            o += 16 * nc
        linear = []
        if kind == "bai":
            (n_intv,) = struct.unpack_from("<i", b, o)
            linear = list(struct.unpack_from(f"<{n_intv}Q", b, o + 4))
            o += 4 + 8 * n_intv
        refs.append((bins, linear))
    return [refs, b[o:]]


def inflated(path) -> bytes:
    with gzip.open(path, "rb") as f:
        return f.read()


def records(path) -> list[str]:
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        return [r.to_string() for r in f.fetch(until_eof=True)]


@pytest.mark.parametrize("name", list(ORDERS))
def test_assembled_output_is_the_single_node_sort(alnsort_bin, inputs, tmp_path, name):
    args, order = ORDERS[name]
    inp = inputs.bam("main")
    want = tmp_path / "want.bam"
    cli_sort(alnsort_bin, args, inp, want)
    n = len(records(want))
    for n_splits, partitions in [(1, 1), (4, 3), (7, 5)]:
        out = tmp_path / f"out-{n_splits}-{partitions}.bam"
        seen = distributed([inp], out, n_splits, partitions, no_pg=True, **order)
        assert len(seen["splits"]) == n_splits, seen["splits"]
        assert len(seen["cuts"]) == partitions - 1
        assert sum(seen["counts"]) == n
        assert sum(m["records"] for m in seen["maps"]) == n
        assert inflated(out) == inflated(want), f"{name} {n_splits}x{partitions}: other records"
        if (n_splits, partitions) != (4, 3):
            continue
        again = tmp_path / f"again-{n_splits}-{partitions}.bam"
        distributed([inp], again, n_splits, partitions, no_pg=True, **order)
        assert again.read_bytes() == out.read_bytes(), "not byte-identical between runs"


def test_unmapped_heavy_input_still_gets_even_ranges(alnsort_bin, inputs, tmp_path):
    """All records unplaced: one coordinate key. The ranges are cut inside
    it (by input order) and the order is still the single-node sort's."""
    inp = inputs.bam("unplaced")
    want = tmp_path / "want.bam"
    cli_sort(alnsort_bin, [], inp, want)
    out = tmp_path / "out.bam"
    seen = distributed([inp], out, 3, 4, no_pg=True)
    n = sum(seen["counts"])
    assert n == len(records(want))
    assert all(c >= n // 8 for c in seen["counts"]), seen["counts"]
    assert inflated(out) == inflated(want)


def test_map_threads_do_not_change_the_bytes(alnsort_bin, inputs, tmp_path):
    """Maps decode on the pool with threads > 1 (counting the records
    before in-split cuts in parallel): the same splits and partitions give
    the same bytes as one thread, on an input whose hot key is cut inside."""
    inp = inputs.bam("unplaced")
    one = tmp_path / "one" / "out.bam"
    three = tmp_path / "three" / "out.bam"
    one.parent.mkdir()
    three.parent.mkdir()
    a = distributed([inp], one, 3, 4, no_pg=True)
    b = distributed([inp], three, 3, 4, no_pg=True, threads=3)
    assert a["cuts"] == b["cuts"]
    assert any(int.from_bytes(c[-8:], "big") > 0 for c in a["cuts"]), "no cut inside a key"
    assert one.read_bytes() == three.read_bytes()


def test_samples_carry_virtual_offsets_from_across_the_split(inputs):
    """A sample's tie-break is (split ordinal, the record's virtual offset),
    not an ordinal counted from the split's start, so sample draws keys
    from stretches spread over the split without reading all of it."""
    inp = inputs.bam("unplaced")
    with pysam.AlignmentFile(inp, "rb", check_sq=False) as f:
        starts = []
        while True:
            at = f.tell()
            try:
                next(f)
            except StopIteration:
                break
            starts.append(at)
    split = stages.split([inp], 1)[0]
    got = stages.sample([inp], split, 32)
    assert 0 < len(got) <= 32
    split_no = [int.from_bytes(s[-12:-8], "big") for s in got]
    voffsets = [int.from_bytes(s[-8:], "big") for s in got]
    assert set(split_no) == {split["ordinal"]}
    assert set(voffsets) <= set(starts), "a sample's position is not a record start"
    assert voffsets == sorted(set(voffsets)), "positions must grow with input order"
    # Drawn from across the split, not only from its start.
    assert max(voffsets) >= starts[len(starts) // 2], (max(voffsets), starts[-1])


@pytest.mark.parametrize("kind", ["bai", "csi"])
def test_merged_index_is_samtools_index(alnsort_bin, inputs, tmp_path, kind):
    inp = inputs.bam("main")
    out = tmp_path / "out.bam"
    seen = distributed([inp], out, 5, 4, index=kind, no_pg=True)
    assert seen["done"]["index"] == f"{out}.{kind}"
    ours = Path(f"{out}.{kind}")
    theirs = tmp_path / f"samtools.{kind}"
    pysam.index(*(["-c"] if kind == "csi" else ["-b"]), str(out), str(theirs))
    assert index_content(ours, kind) == index_content(theirs, kind)
    # And the queries: many regions, with the index beside the file.
    with pysam.AlignmentFile(str(out), "rb", index_filename=str(ours)) as a, \
            pysam.AlignmentFile(str(out), "rb", index_filename=str(theirs)) as b:
        regions = 0
        for ref, length in zip(a.references, a.lengths):
            step = max(1, length // 40)
            for beg in range(0, length, step):
                end = min(length, beg + step // 3 + 1)
                got = [r.to_string() for r in a.fetch(ref, beg, end)]
                assert got == [r.to_string() for r in b.fetch(ref, beg, end)], (ref, beg, end)
                regions += 1
        assert regions > 100
        assert a.mapped == b.mapped and a.unmapped == b.unmapped


def test_a_wrong_guessed_start_is_detected_and_repaired(alnsort_bin, inputs, tmp_path):
    inp = inputs.bam("main")
    want = tmp_path / "want.bam"
    cli_sort(alnsort_bin, [], inp, want)
    out = tmp_path / "out.bam"
    seen = distributed([inp], out, 4, 3, wrong_guess=True, no_pg=True)
    assert seen["redo"] == [1], seen["redo"]
    assert inflated(out) == inflated(want)


def test_sharded_output(alnsort_bin, inputs, tmp_path):
    inp = inputs.bam("main")
    want = tmp_path / "want.bam"
    cli_sort(alnsort_bin, [], inp, want)
    out = tmp_path / "out.sharded"
    seen = distributed([inp], out, 3, 4, index="csi", sharded=True, no_pg=True)
    files = sorted(os.listdir(out))
    assert files == [f"part-{i:05}.bam{x}" for i in range(4) for x in ("", ".csi")]
    got = []
    for f in seen["done"]["files"]:
        got += records(f)
        theirs = tmp_path / (Path(f).name + ".csi")
        pysam.index("-c", f, str(theirs))
        assert index_content(Path(f + ".csi"), "csi") == index_content(theirs, "csi")
    assert got == records(want)
    with pysam.AlignmentFile(str(want)) as w:
        header = str(w.header)
    for f in seen["done"]["files"]:
        with pysam.AlignmentFile(f) as s:
            assert str(s.header) == header


def test_pg_line_and_refusals(alnsort_bin, inputs, tmp_path):
    inp = inputs.bam("main")
    out = tmp_path / "out.bam"
    distributed([inp], out, 2, 2)
    with pysam.AlignmentFile(str(out)) as f:
        pg = [p for p in f.header.to_dict().get("PG", []) if p["ID"] == "alnsort"]
    assert len(pg) == 1 and pg[0]["CL"].startswith("alnsort sort -o "), pg
    # SAM cannot be split; CRAM output and an unknown order are refused.
    with pytest.raises(alnsort.AlnsortError, match="only BAM inputs can be split"):
        stages.split([inputs.sam("main")], 2)
    with pytest.raises(alnsort.AlnsortError, match="CRAM output is not supported"):
        stages.assemble([inp], [], tmp_path / "x.bam", output_format="cram")
    with pytest.raises(ValueError, match="order must be one of"):
        stages.sample([inp], {"input": 0, "start": 0, "end": None, "ordinal": 0}, 4,
                      order="random")
    assert not (tmp_path / "x.bam").exists()


def test_index_of_a_name_order_is_warned_about_once_as_by_sort(alnsort_bin, inputs, tmp_path, capfd):
    """An index asked of a name-sorted output: the stages, like `alnsort
    sort -n --write-index`, write none and say so once (the assemble, which
    decides the index, with `alnsort sort`'s own warning); nothing else
    is printed."""
    inp = inputs.bam("main")
    res = subprocess.run([alnsort_bin, "sort", "-n", "--write-index", "-o", str(tmp_path / "want.bam"), inp],
                         capture_output=True, text=True, timeout=600)
    harness.check_ok(res)
    assert "Ignoring --write-index" in res.stderr
    capfd.readouterr()
    out = tmp_path / "out.bam"
    seen = distributed([inp], out, 2, 2, index="csi", order="name")
    assert capfd.readouterr().err == res.stderr
    assert seen["done"]["index"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bam", "out.bam.work", "want.bam"]


def cli_sort_many(alnsort_bin: str, args: list[str], paths: list[str], out: Path) -> None:
    """`alnsort sort ARGS -o OUT IN1 IN2 ...` on one machine."""
    res = subprocess.run(
        [alnsort_bin, "sort", "--no-PG", "-O", "bam", *args, "-o", str(out), *paths],
        capture_output=True,
        text=True,
        timeout=600,
    )
    harness.check_ok(res)


def test_two_inputs_sort_as_alnsort_sort_of_both(alnsort_bin, inputs, tmp_path):
    """Two lanes with the same @SQ lines, the second a subsample of the
    first (every record of it ties with one of the first): the file of
    `alnsort sort -n IN1 IN2`."""
    inp = inputs.bam("main")
    second = tmp_path / "lane2.bam"
    pysam.view("-b", "--no-PG", "-s", "0.5", "-o", str(second), inp, catch_stdout=False)
    want = tmp_path / "want.bam"
    cli_sort_many(alnsort_bin, ["-n"], [inp, str(second)], want)
    out = tmp_path / "out.bam"
    seen = distributed([inp, str(second)], out, 5, 3, no_pg=True, order="name")
    assert {s["input"] for s in seen["splits"]} == {0, 1}
    assert inflated(out) == inflated(want)


@pytest.fixture(scope="module")
def lanes(tmp_path_factory) -> list[str]:
    """Three unsorted BAM lanes whose headers must be merged (tests/lanes.py)."""
    import lanes as lanes_mod

    return lanes_mod.make_lanes(tmp_path_factory.mktemp("lanes"), seed=23, n_templates=2500,
                                n_long_reads=2)


MULTI_ORDERS = {
    "coordinate": ([], {}),
    "name": (["-n"], {"order": "name"}),
    "tag": (["-t", "RG"], {"tag": "RG"}),
    "template-coordinate": (["--template-coordinate"], {"order": "template-coordinate"}),
    "minimiser": (["-M"], {"order": "minimiser"}),
    "name-lexicographic": (["-N"], {"order": "name-lexicographic"}),
}


@pytest.mark.parametrize("n_inputs", [2, 3])
@pytest.mark.parametrize("name", list(MULTI_ORDERS))
def test_several_inputs_with_other_headers_as_alnsort_sort(alnsort_bin, lanes, tmp_path, name,
                                                            n_inputs):
    """Lanes whose headers differ: the header and the records (uncompressed
    streams equal) of `alnsort sort IN1 IN2 [IN3]`, the merged header's
    reference only one lane has included, over several splits per lane."""
    args, order = MULTI_ORDERS[name]
    paths = lanes[-n_inputs:] if n_inputs == 2 else lanes
    want = tmp_path / "want.bam"
    cli_sort_many(alnsort_bin, args, paths, want)
    out = tmp_path / "out.bam"
    seen = distributed(paths, out, 3 * n_inputs, 4, no_pg=True, **order)
    assert len({s["input"] for s in seen["splits"]}) == n_inputs
    assert sum(seen["counts"]) == len(records(want))
    with pysam.AlignmentFile(str(out), "rb") as f:
        assert "chrZ" in f.references
        rg = [r["ID"] for r in f.header.to_dict()["RG"]]
        assert len(rg) == len(set(rg)) and any("-" in x for x in rg), rg
    assert inflated(out) == inflated(want), f"{name}, {n_inputs} inputs: other header or records"


def test_several_inputs_index_answers_as_samtools_index(alnsort_bin, lanes, tmp_path):
    """Three lanes, coordinate order, BAI: the merged index is the index
    samtools index builds on the output, and the output is the file of
    `alnsort sort IN1 IN2 IN3 --write-index`."""
    want = tmp_path / "want.bam"
    cli_sort_many(alnsort_bin, [], lanes, want)
    out = tmp_path / "out.bam"
    distributed(lanes, out, 7, 5, index="bai", no_pg=True)
    assert inflated(out) == inflated(want)
    theirs = tmp_path / "samtools.bai"
    pysam.index("-b", str(out), str(theirs))
    assert index_content(Path(f"{out}.bai"), "bai") == index_content(theirs, "bai")


def test_stages_release_the_gil(inputs, tmp_path):
    """Python code keeps running in this thread while a map task runs in
    another: it could not if the stage held the GIL."""
    import threading
    import time

    inp = inputs.bam("main")
    split = stages.split([inp], 1)[0]
    result: dict = {}

    def work() -> None:
        t0 = time.monotonic()
        result["map"] = stages.map([inp], split, [], order="name")
        result["span"] = (t0, time.monotonic())

    t = threading.Thread(target=work)
    t.start()
    ticks = []
    while t.is_alive():
        ticks.append(time.monotonic())
        time.sleep(0.002)
    t.join()
    t0, t1 = result["span"]
    inside = [x for x in ticks if t0 < x < t1]
    assert len(inside) >= 5, f"{len(inside)} ticks in {t1 - t0:.3f} s of the map"
    assert result["map"]["records"] == len(records(inp))


def test_several_inputs_wrong_guess_and_sharded(alnsort_bin, lanes, tmp_path):
    """Three lanes, the first coordinate-sorted (so its splits' reaches
    grow): a wrong guessed start in it is repaired and the maps whose prior
    it changed run again (the output is still `alnsort sort IN1 IN2 IN3`'s);
    the sharded output's files each carry the merged header."""
    first = tmp_path / "lane0-sorted.bam"
    pysam.sort("-o", str(first), lanes[0], catch_stdout=False)
    lanes = [str(first), *lanes[1:]]
    want = tmp_path / "want.bam"
    cli_sort_many(alnsort_bin, [], lanes, want)
    out = tmp_path / "out.bam"
    seen = distributed(lanes, out, 10, 3, wrong_guess=True, no_pg=True)
    assert seen["redo"][0] == 1 and len(seen["redo"]) > 1, seen["redo"]
    assert inflated(out) == inflated(want)
    shards = tmp_path / "shards"
    seen = distributed(lanes, shards, 7, 3, sharded=True, no_pg=True)
    files = seen["done"]["files"]
    assert len(files) == 3, files
    with pysam.AlignmentFile(str(want), "rb") as f:
        header = str(f.header)
    got = []
    for name in files:
        with pysam.AlignmentFile(name, "rb") as f:
            assert str(f.header) == header, name
        got += records(name)
    assert got == records(want)

