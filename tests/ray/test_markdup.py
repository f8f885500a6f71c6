"""`alnsort.ray.sort(..., markdup=True)` on a simulated cluster (a 0-CPU head
and three one-CPU workers) against one-node `alnsort sort --markdup` on the
same inputs: the output (the same bytes with one partition, the same BGZF
payload with several: the parts' blocks are cut at part boundaries, as
without --markdup) and the metrics file byte for byte, on name-grouped and
coordinate-sorted input (Picard's two semantics), one and two inputs, with
DT tags, removal and barcodes, 1 to 8 partitions. One input goes through
the decision cut into tasks (collect, join, decide, finish, assemble) with
1 to 8 buckets (templates crossing split boundaries among them); two
name-grouped inputs, and `decision_buckets=0`, through the one decide
task, which the statistics say why; coordinate-sorted inputs through the
tasks: libraries apart, and lanes of one library (two and three inputs,
one library in two inputs beside a library of its own; each end carrying
its record's place in Picard's merged stream), and with the unknown
library in inputs whose headers are apart, or a record equal in every
compared field in two inputs, the tasks' decision discarded for the one
task's. A worker
node killed in the middle of a reduce, of a join and of a decide task (Ray
runs it again elsewhere, rebuilding the lost blocks) gives the same bytes.

The inputs are the duplicate traps of tests/markdup/test_vs_picard.py
(pairs across references, fragments at pair ends, mates unmapped,
secondary and supplementary records, optical sets on two tiles, three read
groups of two libraries and one without LB) with UMI and read barcodes
(tests/markdup/test_sort_markdup.py's `with_barcodes`), spread over the
inputs whole templates at a time. One node's flags are Picard's
(tests/markdup/).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pysam
import pytest

import harness

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(TESTS / "markdup"))

import several_inputs as si  # noqa: E402
import test_vs_picard as g  # noqa: E402
from test_sort_markdup import moved, stale_dups, with_barcodes, with_mate_cigars  # noqa: E402

import alnsort  # noqa: E402
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
    # Enough random templates for about twenty BGZF blocks, so that up to
    # eight splits cut the name-grouped input inside templates.
    for s in range(12):
        recs += moved(g.t_random(10 + s, dense=s % 3 == 0), len(g.TRAPS) + 1 + s)
    return with_barcodes(stale_dups(recs, 9), 5), old


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
        # Coordinate-sorted inputs of which no two hold one library, and
        # the same with the unknown library's records in both (no header
        # says so).
        for shape, unknown in (("apart", False), ("unknown", True)):
            paths = []
            for k, (part, rgs) in enumerate(si.by_library(recs, unknown_in_both=unknown)):
                path = d / f"{shape}.{k}.bam"
                g.write_bam(path, with_mate_cigars(part), rgs)
                s = d / f"{shape}.{k}.sorted.bam"
                pysam.sort("-o", str(s), str(path))
                paths.append(str(s))
            out[shape] = paths
    finally:
        g.REFS = old
    return out


def one_node(tmp: Path, ins, opts):
    out, m = tmp / "one.bam", tmp / "one.metrics"
    harness.check_ok(harness.run_alnsort(["--no-PG", "--markdup", *opts, "--metrics", str(m), "-o", str(out), *ins]))
    text = m.read_text()
    return out.read_bytes(), text


def ray_run(tmp: Path, ins, opts, partitions, splits, one_text, name="ray", hook=None, cluster=None, buckets=None,
            **sort_kw):
    out, m = tmp / f"{name}.bam", tmp / f"{name}.metrics"
    # The metrics file records a command line: the one node's, so the two
    # files can be compared byte for byte.
    argv = one_text.split("\n")[3][2:].split(" ")
    kw = dict(inputs=ins, output=str(out), no_pg=True, partitions=partitions, splits=splits, markdup=True,
              metrics=str(m), markdup_options=list(opts), argv=argv, decision_buckets=buckets, **sort_kw)
    stats = run_killing(cluster, hook, **kw) if hook is not None else aray.sort(**kw)
    return out.read_bytes(), m.read_text(), stats


def same_output(got: bytes, want: bytes, partitions: int) -> bool:
    if partitions == 1:
        return got == want
    return inflate_bgzf(got) == inflate_bgzf(want)


BARCODES = ["--barcode-tag", "ZU", "--read-one-barcode-tag", "B1", "--read-two-barcode-tag", "B2"]

CASES = [
    # (coordinate-sorted, inputs, options, partitions, splits, buckets: None
    # for the default, 0 for the one decide task)
    (False, 1, [], 1, 3, 2),
    (False, 1, ["--tagging-policy", "all", *BARCODES], 2, 6, 5),
    (False, 1, ["--remove-sequencing-duplicates"], 4, 8, None),
    (False, 1, [], 8, 4, 0),
    (False, 2, ["--tagging-policy", "all"], 4, 5, None),
    (True, 1, ["--remove-sequencing-duplicates"], 8, 8, 3),
    (True, 1, ["--tagging-policy", "optical", *BARCODES], 2, 5, 8),
    (True, 1, [], 4, 4, 1),
    (True, 2, ["--remove-duplicates"], 2, 4, None),
]


@pytest.mark.parametrize("coordinate,n,opts,partitions,splits,buckets", CASES)
def test_ray_markdup_is_one_nodes(coordinate, n, opts, partitions, splits, buckets, cluster, inputs, tmp_path):
    ins = inputs[(coordinate, n)]
    want, want_text = one_node(tmp_path, ins, opts)
    # The metrics name the output and metrics paths: the Ray run writes to
    # the same ones.
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    got, text, stats = ray_run(tmp_path, ins, opts, partitions, splits, want_text, name="one", buckets=buckets)
    assert stats["partitions"] == partitions and stats["splits"] >= min(splits, 2)
    md = stats["markdup"]
    assert md["marked"] > 50, md
    if (n == 1 or coordinate) and buckets != 0:
        assert md["path"] == "tasks", md
        assert md["buckets"] == (buckets if buckets is not None else aray.default_buckets(stats["splits"], partitions)), md
        # The maps collected (with their priors): each reduce got only its
        # range's slices of the decision.
        assert md["largest_reduce_decision_bytes"] is not None, md
        # The joins' halves fitted the default budget: nothing spilled.
        assert md["join_runs"] == 0, md
        # No task held the whole input's ends.
        if md["buckets"] > 1:
            assert md["largest_bucket_bytes"] < md["fragment_ends_bytes"] + md["pair_ends_bytes"], md
        # Each reduce received its range's slices only: 24 bytes a split
        # and at most 10 per duplicate or optical duplicate listed.
        assert 0 < md["largest_reduce_decision_bytes"] <= 24 * stats["splits"] + 20 * md["marked"], md
    else:
        assert md["path"] == "one task", md
        if buckets != 0:
            # Two name-grouped inputs: one decide task, which says why.
            assert "the inputs are grouped by name" in md["one_task_because"], md
    assert same_output(got, want, partitions), "the Ray output differs from one node's"
    assert text == want_text, "the Ray metrics differ from one node's"
    if not coordinate and n == 1 and buckets != 0:
        ACROSS.append(md["templates_across_splits"])


SEVERAL = [
    # (inputs, options, partitions, splits, buckets: None for the default)
    ("apart", [], 1, 2, 1),
    ("apart", ["--tagging-policy", "all", *BARCODES], 2, 4, 2),
    ("apart", ["--remove-sequencing-duplicates"], 3, 5, 4),
    ("apart", ["--remove-duplicates"], 4, 3, None),
    ("unknown", ["--tagging-policy", "optical"], 2, 4, 3),
]


@pytest.mark.parametrize("shape,opts,partitions,splits,buckets", SEVERAL)
def test_several_inputs_whose_libraries_are_apart_go_through_the_tasks(shape, opts, partitions, splits, buckets,
                                                                       cluster, inputs, tmp_path):
    """Two coordinate-sorted inputs, libA in one, libB and the unknown
    library in the other: decided per bucket (no two compared ends come
    from two inputs, so the tasks' numbering orders them as Picard's merged
    stream does), one node's bytes and metrics. With the unknown library's
    records in both inputs (no header says so) the walk's check finds it:
    the tasks' decision is discarded for the one decide task's, which the
    statistics say, and the bytes are one node's still."""
    ins = inputs[shape]
    want, want_text = one_node(tmp_path, ins, opts)
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    got, text, stats = ray_run(tmp_path, ins, opts, partitions, splits, want_text, name="one", buckets=buckets)
    md = stats["markdup"]
    assert md["marked"] > 50, md
    if shape == "apart":
        assert md["path"] == "tasks", md
        assert md["buckets"] == (buckets if buckets is not None else aray.default_buckets(stats["splits"], partitions)), md
        # The maps collected (with their priors): each reduce got only its
        # range's slices of the decision.
        assert md["largest_reduce_decision_bytes"] is not None, md
    else:
        assert md["path"] == "one task" and md["tasks_discarded"], md
        assert f"library Unknown Library has records in {ins[0]} and in {ins[1]}" in md["one_task_because"], md
    assert same_output(got, want, partitions), "the Ray output differs from one node's"
    assert text == want_text, "the Ray metrics differ from one node's"


#: Templates that crossed a split boundary in the name-grouped cases above.
ACROSS: list = []


def test_templates_crossed_split_boundaries():
    """The name-grouped cases above had templates that began in one split
    and went on in the next (the boundary fix-ups were exercised)."""
    if not ACROSS:
        pytest.skip("the name-grouped cases did not run")
    assert sum(ACROSS) > 0, ACROSS


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


def scattered_copy(inp: str, out: Path) -> str:
    """`inp` (name-grouped) with the second mate of its first plain pair
    (both mates mapped primaries, nothing else of the name) moved to the
    end; returns the read name."""
    with pysam.AlignmentFile(inp, "rb") as f:
        header, recs = f.header, list(f)
    plain = lambda r: r.is_paired and not (r.is_unmapped or r.mate_is_unmapped or r.is_secondary  # noqa: E731
                                           or r.is_supplementary)
    for i in range(1, len(recs) - 2):
        a, b = recs[i], recs[i + 1]
        if (a.query_name == b.query_name and plain(a) and plain(b) and recs[i - 1].query_name != a.query_name
                and recs[i + 2].query_name != a.query_name):
            break
    else:
        raise AssertionError("no plain pair in the input")
    recs.append(recs.pop(i + 1))
    with pysam.AlignmentFile(str(out), "wb", header=header) as w:
        for r in recs:
            w.write(r)
    return a.query_name


def test_a_template_scattered_over_splits_is_refused_as_one_node_refuses_it(cluster, inputs, tmp_path):
    """Name-grouped input whose template is scattered over the first and
    the last of four splits: each split alone is grouped; the join of the
    name's bucket refuses it with one node's message: the input, the split
    (its virtual offset), the record (counted from the split's start: the
    same record as one node's) and the read. Nothing is written."""
    from alnsort import stages

    inp = str(tmp_path / "scattered.bam")
    name = scattered_copy(inputs[(False, 1)][0], Path(inp))
    res = harness.run_alnsort(["--no-PG", "--markdup", "-o", str(tmp_path / "one.bam"), inp])
    one = res.stderr if isinstance(res.stderr, str) else res.stderr.decode()
    assert res.returncode == 1, one
    assert f"{inp}: --markdup needs the records of each template together" in one, one
    assert f"(read {name}) belongs to a template seen earlier in the file" in one, one
    record = int(one.split("but record ")[1].split(" ")[0])
    out = tmp_path / "ray.bam"
    with pytest.raises(alnsort.AlnsortError) as e:
        aray.sort(inputs=[inp], output=str(out), no_pg=True, partitions=2, splits=4, markdup=True,
                  decision_buckets=3)
    err = str(e.value)
    splits = stages.split([inp], 4)
    assert len(splits) == 4, splits
    last, first = splits[-1]["start"], splits[0]["start"]
    assert f"{inp} (the split from virtual offset {last:#x}): --markdup needs the records of each template " \
           "together" in err, err
    assert f"(read {name}) belongs to a template seen earlier in the file (at record " in err, err
    assert f"of {inp} (the split from virtual offset {first:#x}), without both mates)" in err, err
    # One node's record: the records before the last split plus the index.
    with pysam.AlignmentFile(inp, "rb") as f:
        before = 0
        while f.tell() < last:
            next(f)
            before += 1
    assert before + int(err.split("but record ")[1].split(" ")[0]) == record, (record, before, err)
    assert not out.exists() and not list(tmp_path.glob(".ray.bam.alnsort-ray-*"))


@pytest.mark.parametrize("coordinate", [False, True])
def test_a_wrong_split_guess_is_repaired_with_its_share(coordinate, cluster, inputs, tmp_path):
    """The second split's start guessed wrong (tests/ray/
    wrong_guess_stages.py): its map fails, is run again from the proven
    start and collects the repaired split's share; one node's output and
    metrics."""
    ins = inputs[(coordinate, 1)]
    opts = ["--tagging-policy", "all"]
    want, want_text = one_node(tmp_path, ins, opts)
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    out, m = tmp_path / "one.bam", tmp_path / "one.metrics"
    stats = aray.sort(inputs=ins, output=str(out), no_pg=True, partitions=2, splits=4, markdup=True,
                      metrics=str(m), markdup_options=opts, argv=want_text.split("\n")[3][2:].split(" "),
                      decision_buckets=3, stages_module="wrong_guess_stages")
    assert stats["repairs"] == 1 and stats["markdup"]["path"] == "tasks", stats
    assert same_output(out.read_bytes(), want, 2), "the repaired run's output differs from one node's"
    assert m.read_text() == want_text


@pytest.mark.parametrize("stage,index", [("join", 1), ("decide", 2)])
def test_a_worker_killed_mid_decision_task_gives_the_same_bytes(stage, index, cluster, inputs, tmp_path):
    """A node killed while it runs a join or a decide task: Ray runs the task
    again on another node (and rebuilds the collect and join blocks that
    lived on the lost node); the output and metrics are one node's."""
    ins = inputs[(False, 1)]
    opts = ["--tagging-policy", "all"]
    want, want_text = one_node(tmp_path, ins, opts)
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    barrier_dir = tmp_path / "barrier"
    barrier_dir.mkdir()
    hook = Barrier(str(barrier_dir), stage, index)
    got, text, stats = ray_run(tmp_path, ins, opts, 1, 4, want_text, name="one", hook=hook, cluster=cluster,
                               buckets=3)
    assert stats["markdup"]["path"] == "tasks"
    assert got == want, f"a node killed mid-{stage}: the output differs from one node's"
    assert text == want_text


def test_command_line_markdup_with_progress(cluster, inputs, tmp_path):
    """`python -m alnsort.ray sort --markdup --metrics M --decision-buckets 3
    --progress`: one node's output and metrics (the metrics file records the
    driver's command line, so only its numbers are compared), and a line
    per phase on standard error with its counts."""
    ins = inputs[(False, 1)]
    opts = ["--tagging-policy", "all"]
    want, want_text = one_node(tmp_path, ins, opts)
    out, m = tmp_path / "cli.bam", tmp_path / "cli.metrics"
    argv = [sys.executable, "-m", "alnsort.ray", "sort", "--address", cluster.address, "--no-PG", "--markdup",
            *opts, "--metrics", str(m), "--decision-buckets", "3", "--partitions", "1", "--splits", "4",
            "--progress", "-o", str(out), *ins]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == want
    # Past the command-line header (#-lines), the metrics are one node's.
    body = [line for line in m.read_text().split("\n") if not line.startswith("#")]
    assert body == [line for line in want_text.split("\n") if not line.startswith("#")]
    lines = [line for line in p.stderr.splitlines() if line.startswith("[alnsort.ray] ")]
    phases = [line.split()[1].rstrip(":") for line in lines]
    assert phases == ["split", "sample", "map", "collect", "join", "decide", "finish", "reduce", "assemble"], lines
    records = sum(1 for _ in pysam.AlignmentFile(ins[0], check_sq=False))
    assert f"{records} records" in lines[2] and f"{records} records" in lines[3], lines
    assert "3 name buckets" in lines[4] and "3 end buckets" in lines[5], lines


def test_the_stage_functions_in_process(inputs, tmp_path):
    """alnsort.stages' decision tasks called in process, as a driver
    without Ray would: the decision bytes and metrics of the one task
    (markdup_decide), with splits finished again where a carry says so;
    each reduce given only its range's slices of the splits' outcomes
    writes the part it writes with the whole decision; values that are not
    the tasks' own are refused with the reason. The duplicate-marking
    options are alnsort.sort()'s keywords (typed values, applied by the
    engine's setters), or the same options as command-line words, read
    once by alnsort sort's parser: the same decision."""
    from alnsort import stages

    ins = inputs[(False, 1)]
    md = {"tagging_policy": "all"}
    words = ["--markdup", "--tagging-policy", "all"]
    assert stages.markdup_keywords(words) == {"markdup": True, **md}
    names = ("m.txt", ins, "out.bam", "a command line")
    one = stages.markdup_decide(ins, md, metrics=names)
    assert stages.markdup_decide(ins, words, metrics=names) == one
    assert one != stages.markdup_decide(ins, {}, metrics=names)  # the policy reaches the engine
    splits = stages.split(ins, 6)
    assert len(splits) >= 3
    b = 4
    cols = [stages.markdup_collect(ins, s, md, b, b) for s in splits]
    # A map that collects as it reads: the same share, the plain map's blocks.
    keys = [k for s in splits for k in stages.sample(ins, s, 16)]
    splitters = stages.splitters(keys, 3)
    maps = []
    for s, c in zip(splits, cols):
        folded = stages.map_collecting(ins, s, splitters, md, b, b)
        share = folded.pop("share")
        # The map also gives the range each record went to (2 bytes each).
        ranges = share.pop("ranges")
        assert len(ranges) == 2 * share["records"] and c.pop("ranges") == b"", s
        assert share == c, s
        assert folded == stages.map(ins, s, splitters, markdup=md), s
        maps.append((folded, ranges))
    bounds = [c["boundary"] for c in cols]
    continued = stages.markdup_continued(bounds)
    joins = [
        stages.markdup_join([c["halves"][j] for c in cols], bounds, b, md, inputs=ins, splits=splits)["ends"]
        for j in range(b)
    ]
    # Within the smallest budget (--max-memory 16M: 1.1 MiB for duplicate
    # marking) the halves of one bucket, every split's block given four
    # times (2 MB), go to sorted run files under tmp_dir, removed
    # afterwards: the same pair ends as in memory.
    spill = tmp_path / "spill"
    spill.mkdir()
    whole = stages.markdup_collect(ins, {"input": 0, "start": splits[0]["start"], "end": None, "ordinal": 0}, md, 1, 1)
    one_split = [dict(splits[0], end=None)]
    four = [whole["halves"][0]] * 4
    held = stages.markdup_join(four, [whole["boundary"]], 2, md, inputs=ins, splits=one_split)
    tiny = stages.markdup_join(four, [whole["boundary"]], 2, md, inputs=ins, splits=one_split, max_memory="16M",
                               tmp_dir=str(spill))
    assert held["runs"] == 0 and tiny["runs"] > 0 and tiny["ends"] == held["ends"], (held["runs"], tiny["runs"])
    assert list(spill.iterdir()) == []
    decided = [
        stages.markdup_decide_bucket(ins, [c["ends"][e] for c in cols] + [j[e] for j in joins], bounds, md,
                                     len(splits))
        for e in range(b)
    ]

    parts = len(splitters) + 1

    def finish(s, carry=None):
        return stages.markdup_finish(cols[s]["slots"], continued[s] is not None,
                                     [d["duplicates"][s] for d in decided], [d["optical"][s] for d in decided], carry,
                                     ranges=maps[s][1], partitions=parts)

    outs = [finish(s) for s in range(len(splits))]
    for s in range(1, len(splits)):
        if outs[s - 1]["carry"] != stages.START_CARRY:
            outs[s] = finish(s, outs[s - 1]["carry"])
    got = stages.markdup_assemble(ins, md, outs, [d["counts"] for d in decided], metrics=names)
    assert got == one
    assert sum(o["records"] for o in outs) == one["records"][0] == sum(c["records"] for c in cols)

    # Each reduce from its range's slices: the part of the whole decision.
    bases = stages.markdup_split_bases([m["records"] for m, _ in maps], [0] * len(splits), one["records"])
    assert all(len(o["slices"]) == parts for o in outs)
    for r in range(parts):
        blocks = [m["blocks"][r] for m, _ in maps]
        whole = stages.markdup_reduce(ins, blocks, tmp_path / f"w{r}", r, parts, md, one["decisions"], bases)
        sliced = stages.markdup_reduce(ins, blocks, tmp_path / f"s{r}", r, parts, md, None, None,
                                       slices=[o["slices"][r] for o in outs])
        assert sliced == whole and (tmp_path / f"s{r}").read_bytes() == (tmp_path / f"w{r}").read_bytes(), r
    # Slices of another range: the reduce meets other counts, and says so.
    with pytest.raises(alnsort.AlnsortError, match="range 0: the blocks held .* records of split .* slice says"):
        stages.markdup_reduce(ins, [m["blocks"][0] for m, _ in maps], tmp_path / "x", 0, parts, md, None, None,
                              slices=[o["slices"][1] for o in outs])
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="either the whole decision and the splits' bases, or slices"):
        stages.markdup_reduce(ins, [m["blocks"][0] for m, _ in maps], tmp_path / "x", 0, parts, md,
                              one["decisions"], None)

    with pytest.raises(TypeError, match="boundary"):
        stages.markdup_continued([{"first": 0}])
    with pytest.raises(ValueError, match="not the words of"):
        stages.markdup_assemble(ins, md, [dict(outs[0], records=outs[0]["records"] + 64)] + outs[1:],
                                [d["counts"] for d in decided])
    with pytest.raises(alnsort.AlnsortError, match="read ends .* cut short"):
        stages.markdup_decide_bucket(ins, [cols[0]["ends"][0][:-1]], bounds, md, len(splits))
    with pytest.raises(alnsort.AlnsortError, match="-n: not a duplicate-marking option"):
        stages.markdup_collect(ins, splits[0], ["--markdup", "-n"], b, b)
    with pytest.raises(alnsort.AlnsortError, match=r"-n \(name=\): not a duplicate-marking option"):
        stages.map_collecting(ins, splits[0], [], {"name": True}, b, b)
    with pytest.raises(alnsort.AlnsortError, match="optical-distance 'x'"):
        stages.markdup_collect(ins, splits[0], {"optical_distance": "x"}, b, b)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tagging'"):
        stages.markdup_collect(ins, splits[0], {"tagging": "all"}, b, b)
    with pytest.raises(TypeError, match="markdup must be a dict"):
        stages.markdup_collect(ins, splits[0], "--markdup", b, b)
    with pytest.raises(alnsort.AlnsortError, match="'x.bam': not a duplicate-marking option"):
        stages.markdup_keywords(["--tagging-policy", "all", "x.bam"])
    with pytest.raises(alnsort.AlnsortError, match="missing argument for option '--metrics'"):
        stages.markdup_keywords(["--metrics"])
    with pytest.raises(ValueError, match="it marks duplicates"):
        stages.markdup_collect(ins, splits[0], {"markdup": False}, b, b)
    with pytest.raises(ValueError, match="end_buckets must be at least 1"):
        stages.map_collecting(ins, splits[0], [], md, 0, b)


def test_default_buckets():
    """As many decision buckets as splits or partitions, but the driver's
    object references for the decision (about 4 x splits x buckets) stay
    within DECISION_OBJECTS."""
    assert aray.default_buckets(4, 8) == 8 and aray.default_buckets(6, 2) == 6
    for splits in (1, 100, 1000, 30_000):
        b = aray.default_buckets(splits, 4 * splits)
        assert b >= 1 and (b == 1 or 4 * splits * b <= aray.DECISION_OBJECTS), (splits, b)


def test_decision_buckets_that_cannot_be_honoured_are_refused(inputs, tmp_path):
    """decision_buckets without markdup, with several inputs (decided by one
    task), or not a whole number: refused before Ray starts, naming why."""
    out = str(tmp_path / "o.bam")
    for kw, words in [
        (dict(inputs=inputs[(False, 1)], decision_buckets=4), "needs markdup=True"),
        (dict(inputs=inputs[(False, 2)], markdup=True, decision_buckets=4), "the inputs are grouped by name"),
        (dict(inputs=inputs[(False, 1)], markdup=True, decision_buckets=-1), "whole number"),
        (dict(inputs=inputs[(False, 1)], markdup=True, decision_buckets=True), "whole number"),
    ]:
        with pytest.raises(ValueError, match=words):
            aray.sort(output=out, **kw)
    assert not (tmp_path / "o.bam").exists()
    # The command line says it in its own terms.
    for argv, words in [
        (["--decision-buckets", "3", "-o", out, *inputs[(False, 1)]], "needs --markdup"),
        (["--markdup", "--decision-buckets", "-2", "-o", out, *inputs[(False, 1)]], "whole number"),
    ]:
        with pytest.raises(alnsort.AlnsortError, match=words):
            aray.parse_args(argv)
    a = aray.parse_args(["--markdup", "--decision-buckets", "0", "-o", out, *inputs[(False, 2)]])
    assert a["ray"]["decision-buckets"] == 0
    # Several inputs: whether they can be cut into tasks is the run's to say
    # (it reads their headers).
    a = aray.parse_args(["--markdup", "--decision-buckets", "3", "-o", out, *inputs[(True, 2)]])
    assert a["ray"]["decision-buckets"] == 3


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    """Coordinate-sorted lanes of one library: {shape: [paths]}. "lanes2"
    and "lanes3": the templates spread over two and three inputs by name,
    each input's read groups its own (rg1.L<k>: the same libraries);
    "mix": libA's templates in two lanes, the other libraries' in a third
    input of their own; "tie": "lanes2" with one mapped fragment in both
    inputs (equal in every field htsjdk's coordinate comparator reads, at
    the start of its position in both, so the two inputs' running maxima
    are equal there: Java's heap orders them)."""
    d = tmp_path_factory.mktemp("md-lanes")
    recs, old = templates()
    out = {}

    def write(shape, k, part, rgs):
        path, s = d / f"{shape}.{k}.bam", d / f"{shape}.{k}.sorted.bam"
        g.write_bam(path, with_mate_cigars(part), rgs)
        pysam.sort("-o", str(s), str(path))
        return str(s)

    try:
        for shape, n in (("lanes2", 2), ("lanes3", 3)):
            out[shape] = [write(shape, k, *si.lane(p, k)) for k, p in enumerate(si.split(recs, n, 24))]
        (liba, _), (rest, rest_rgs) = si.by_library(recs)
        mix = [write("mix", k, si.lane(p, k)[0], [(f"rg1.L{k}", "libA")]) for k, p in enumerate(si.split(liba, 2, 5))]
        out["mix"] = [*mix, write("mix", 2, rest, rest_rgs)]
        frag = next(r for r in recs if r.flag & 0x905 == 0 and r.ref >= 0)
        twice = [r for r in recs if r.name != frag.name]
        parts = si.split(twice, 2, 24)
        tie = g.Rec(**{**frag.__dict__, "name": "tie:1:FC:1:1101:1:1", "pos": 3_900_000, "tags": list(frag.tags)})
        out["tie"] = [write("tie", k, *si.lane(p + [tie], k)) for k, p in enumerate(parts)]
    finally:
        g.REFS = old
    return out


LANES = [
    # (shape, options, partitions, splits, buckets: None for the default)
    ("lanes2", [], 1, 8, 1),
    ("lanes2", ["--tagging-policy", "all", *BARCODES], 3, 12, 5),
    ("lanes3", ["--remove-sequencing-duplicates"], 4, 9, 8),
    ("lanes3", [], 2, 3, None),
    ("mix", ["--tagging-policy", "optical"], 2, 7, 3),
    ("tie", [], 2, 4, 2),
]


@pytest.mark.parametrize("shape,opts,partitions,splits,buckets", LANES)
def test_lanes_of_one_library_are_decided_per_bucket(shape, opts, partitions, splits, buckets, cluster, lanes,
                                                     tmp_path):
    """Coordinate-sorted lanes of one library through the tasks: each end
    carries its record's running maximum by htsjdk's coordinate comparator
    (a split's first records take the earlier splits' maximum), which puts
    a bucket's records in Picard's merged order; one node's bytes and
    metrics (one node's several-input marking is checked against Picard
    3.4.0 with several I= in tests/markdup). An exact tie between two
    inputs' maxima sends the decision to one task, which the statistics
    say; the bytes are one node's still."""
    ins = lanes[shape]
    want, want_text = one_node(tmp_path, ins, opts)
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    got, text, stats = ray_run(tmp_path, ins, opts, partitions, splits, want_text, name="one", buckets=buckets)
    md = stats["markdup"]
    assert md["marked"] > 50, md
    if shape == "tie":
        assert md["path"] == "one task" and md["tasks_discarded"], md
        assert "equal running maxima (read tie:1:FC:1:1101:1:1)" in md["one_task_because"], md
    else:
        assert md["path"] == "tasks", md
        assert md["buckets"] == (buckets if buckets is not None else aray.default_buckets(stats["splits"], partitions)), md
        assert md["largest_reduce_decision_bytes"] is not None, md
    assert same_output(got, want, partitions), "the Ray output differs from one node's"
    assert text == want_text, "the Ray metrics differ from one node's"


def test_lanes_whose_bucket_needs_more_than_the_budget_take_the_one_task(cluster, lanes, tmp_path):
    """A lanes decide task holds its bucket's ends and their records' places
    until all are read (the ranks need every record of the bucket): beyond
    half the budget (`max_memory`, of which the marker gets its part) it
    declines and the decision goes to the one decide task, which spills its
    read ends; the statistics say why; the bytes and metrics are one
    node's."""
    ins = lanes["lanes2"]
    want, want_text = one_node(tmp_path, ins, [])
    (tmp_path / "one.bam").unlink()
    (tmp_path / "one.metrics").unlink()
    got, text, stats = ray_run(tmp_path, ins, [], 2, 6, want_text, name="one", buckets=1, max_memory="16M")
    md = stats["markdup"]
    assert md["path"] == "one task" and md["tasks_discarded"], md
    assert "ranking the bucket's read ends in Picard's merged order would hold more than" in md["one_task_because"], md
    assert same_output(got, want, 2), "the Ray output differs from one node's"
    assert text == want_text, "the Ray metrics differ from one node's"
