"""Duplicate marking through the stage subcommands, driven as a workflow
manager would (no Ray): split -> sample -> splitters -> map (with
--markdup) -> markdup-collect per split (or the maps collect, with
--end-buckets/--name-buckets) -> markdup-join per name bucket
-> markdup-decide per end bucket -> markdup-finish per split (run again
with --after where the previous split's walk ends with a carry) ->
markdup-assemble -> reduce --marks per range (or, where the maps
collected, markdup-finish --partitions cuts each split's outcome into
one slice per range and each reduce takes its range's: --finished) ->
assemble. The output BAM
(the same bytes with one range, the same BGZF payload with several) and
the metrics file equal one-node `alnsort sort --markdup`'s, on
name-grouped and coordinate-sorted input (Picard's two semantics), with
several splits and buckets, DT tags, removal, and a memory budget small
enough that the joins and decisions spill their buckets to run files;
the spill files are gone after success and after a failure.

The input is the duplicate traps of tests/markdup/test_vs_picard.py
(pairs across references, fragments at pair ends, mates unmapped,
secondary and supplementary records, optical sets on two tiles, read
groups of two libraries and one without LB). One node's flags are
Picard's (tests/markdup/)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pysam
import pytest

import harness

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "markdup"))

import test_vs_picard as g  # noqa: E402
from test_sort_markdup import moved, stale_dups  # noqa: E402


def run(alnsort_bin: str, *argv: str) -> subprocess.CompletedProcess:
    # argv[0] 'alnsort': the command line the metrics file records is the
    # one-node run's and the stages' ('alnsort sort ...') alike.
    return subprocess.run(["alnsort", *argv], executable=alnsort_bin, capture_output=True,
                          text=True, timeout=600)


def stage(alnsort_bin: str, tmp: Path, name: str, *argv: str) -> tuple[dict | list, str]:
    """Runs a stage; returns its JSON and the file it was saved to."""
    res = run(alnsort_bin, *argv)
    assert res.returncode == 0, f"alnsort {' '.join(argv)}: {res.stderr}"
    path = tmp / f"{name}.json"
    path.write_text(res.stdout)
    return json.loads(res.stdout), str(path)


@pytest.fixture(scope="module")
def traps(tmp_path_factory) -> dict[bool, str]:
    """{coordinate-sorted: the input BAM}."""
    d = tmp_path_factory.mktemp("md-cli-in")
    old = g.REFS
    g.REFS = [(n, 4_000_000) for n, _ in old]
    try:
        recs = []
        for n, name in enumerate(sorted(g.TRAPS)):
            recs += moved(g.TRAPS[name](), n)
        for s in range(2):
            recs += moved(g.t_random(20 + s), len(g.TRAPS) + s)
        recs = stale_dups(recs, 3)
        name_grouped = d / "in.bam"
        g.write_bam(name_grouped, recs)
    finally:
        g.REFS = old
    coordinate = d / "in.sorted.bam"
    pysam.sort("-o", str(coordinate), str(name_grouped))
    return {False: str(name_grouped), True: str(coordinate)}


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> str:
    """A name-grouped input of 60 random trap sets (about 33,000 records):
    the splits' fragment ends of one bucket take twice -m 1M."""
    d = tmp_path_factory.mktemp("md-cli-many")
    old = g.REFS
    g.REFS = [(n, 8_000_000) for n, _ in old]
    try:
        recs = []
        for n in range(60):
            recs += moved(g.t_random(100 + n), n)
        path = d / "many.bam"
        g.write_bam(path, recs)
    finally:
        g.REFS = old
    return str(path)


def chain(alnsort_bin: str, tmp: Path, inp: str | list[str], sort_opts: list[str], splits: int,
          ranges: int, end_buckets: int, name_buckets: int, out: Path, folded: bool = False) -> dict:
    """The stage subcommands over `inp` (one input, or several: each
    map then gets its --prior from `alnsort reach` of the earlier splits
    of its input); the output at `out`. Returns what the joins and
    decisions printed. With `folded` the maps collect the splits' shares
    (map --end-buckets --name-buckets) and their JSON is the --collected
    of the later tasks; markdup-collect then runs apart only to check that
    it writes the same files."""
    ins = [inp] if isinstance(inp, str) else list(inp)
    opts = ["--", *sort_opts]
    work = tmp / "work"
    work.mkdir()
    spl, _ = stage(alnsort_bin, work, "split", "split", "--parts", str(splits), *ins)
    samples = [stage(alnsort_bin, work, f"sample-{s['ordinal']}", "sample", "--split", s["arg"], *ins, *opts)[1]
               for s in spl]
    _, cuts = stage(alnsort_bin, work, "splitters", "splitters", "--partitions", str(ranges), *samples)
    buckets = ["--end-buckets", str(end_buckets), "--name-buckets", str(name_buckets)]
    reaches = ([stage(alnsort_bin, work, f"reach-{s['ordinal']}", "reach", "--split", s["arg"], *ins)[0]["reach"]
                for s in spl] if len(ins) > 1 else [])

    def prior(i: int) -> list[str]:
        earlier = [reaches[j] for j in range(i) if reaches and spl[j]["input"] == spl[i]["input"]]
        return ["--prior", str(max(earlier))] if earlier else []

    mapped = [stage(alnsort_bin, work, f"map-{s['ordinal']}", "map", "--split", s["arg"], "--splitters", cuts,
                    *prior(i), *(buckets if folded else []), "--out-dir", str(work), *ins, *opts)
              for i, s in enumerate(spl)]
    maps = [m for m, _ in mapped]
    apart = work / "apart" if folded else work
    apart.mkdir(exist_ok=True)
    collected = [stage(alnsort_bin, apart, f"collect-{s['ordinal']}", "markdup-collect", "--split", s["arg"],
                       *buckets, "--out-dir", str(apart), *ins, *opts) for s in spl]
    for (c, _), m in zip(collected, maps):
        assert c["records"] == m["records"], "collect and map read the same split"
    if folded:
        for (c, _), m in zip(collected, maps):
            for field in ("ends", "halves", "slots", "boundary"):
                ours, theirs = m[field], c[field]
                if isinstance(ours, str):
                    ours, theirs = [ours], [theirs]
                assert len(ours) == len(theirs) and ours != theirs, field
                for a, b in zip(ours, theirs):
                    assert Path(a).read_bytes() == Path(b).read_bytes(), (field, a, b)
    apart_json = collected
    if folded:
        collected = mapped
    coll = [a for _, f in collected for a in ("--collected", f)]
    joins = [stage(alnsort_bin, work, f"join-{j}", "markdup-join", *coll, "--bucket", str(j),
                   "--out-dir", str(work), *opts) for j in range(name_buckets)]
    joined = [a for _, f in joins for a in ("--joined", f)]
    decides = [stage(alnsort_bin, work, f"decide-{b}", "markdup-decide", *coll, *joined, "--bucket", str(b),
                     "--out-dir", str(work), *ins, *opts) for b in range(end_buckets)]
    decided = [a for _, f in decides for a in ("--decided", f)]

    # Maps that collect give each record's range: each finish cuts its
    # split's outcome into one slice per reduce.
    sliced = ["--partitions", str(ranges)] if folded else []

    def finish(s: int, after: str | None):
        extra = ["--after", after] if after else []
        return stage(alnsort_bin, work, f"finish-{s}", "markdup-finish", *coll, *decided, "--ordinal", str(s),
                     *extra, *sliced, "--out-dir", str(work), *opts)

    # Every split at once from the start of the walk; then, in order, those
    # whose previous split's walk ended with a carry, again after it.
    finished = [finish(s, None) for s in range(len(spl))]
    reruns = 0
    for s in range(1, len(spl)):
        # (Several inputs: each input's walk starts afresh.)
        if finished[s - 1][0]["carry"] is not None and spl[s]["input"] == spl[s - 1]["input"]:
            finished[s] = finish(s, finished[s - 1][1])
            reruns += 1
    decisions = work / "decisions"
    fin = [a for _, f in finished for a in ("--finished", f)]
    done, _ = stage(alnsort_bin, work, "md-assemble", "markdup-assemble", *fin, *decided,
                    *([] if folded else ["--decisions", str(decisions)]), "--output", str(out), *ins, *opts)
    assert done["records"] == sum(m["records"] for m in maps)
    records = [a for m in maps for a in ("--records", str(m["records"]))]
    parts = []
    for r in range(ranges):
        part = work / f"part-{r}"
        # Sliced: this range's slice of every split (--finished), not the
        # whole decision (--marks with the maps' record counts).
        marks = fin if folded else ["--marks", str(decisions), *records]
        stage(alnsort_bin, work, f"reduce-{r}", "reduce", "--range", str(r), "--partitions", str(ranges),
              "--part", str(part), *[a for m in maps for a in ("--block", m["blocks"][r])],
              *marks, *ins, *opts)
        parts.append(str(part))
    if folded:
        assert done["decisions"] is None and not decisions.exists()
        assert all(len(f["slices"]) == ranges for f, _ in finished)
        if ranges >= 2:
            # Another range's slices: the reduce meets other counts, says so.
            res = run(alnsort_bin, "reduce", "--range", "0", "--partitions", str(ranges), "--part",
                      str(work / "wrong"), *[a for m in maps for a in ("--block", m["blocks"][1])], *fin,
                      *ins, *opts)
            assert res.returncode == 1 and "slice says" in res.stderr and not (work / "wrong").exists(), res.stderr
        # Slices need the maps' ranges: markdup-collect's JSON has none.
        res = run(alnsort_bin, "markdup-finish", *[a for _, f in apart_json for a in ("--collected", f)],
                  *decided, "--ordinal", "0", "--partitions", str(ranges), "--out-dir", str(work), *opts)
        assert res.returncode == 1 and 'names no "ranges"' in res.stderr, res.stderr
    elif len(maps) >= 2:
        # Record counts of the right total but cut elsewhere between the
        # first two splits: split 0's last record lies beyond its count,
        # and the reduce that meets it says so (nothing written).
        counts = [m["records"] for m in maps]
        counts[0], counts[1] = counts[0] - 1, counts[1] + 1
        wrong = [a for n in counts for a in ("--records", str(n))]
        said = []
        for r in range(ranges):
            part = work / f"wrong-{r}"
            res = run(alnsort_bin, "reduce", "--range", str(r), "--partitions", str(ranges), "--part", str(part),
                      *[a for m in maps for a in ("--block", m["blocks"][r])], "--marks", str(decisions),
                      *wrong, *ins, *opts)
            if res.returncode != 0:
                assert res.returncode == 1 and not part.exists(), res.stderr
                said.append(res.stderr)
        assert any(f"a record at index {counts[0]} of split 0, which has {counts[0]} records" in e for e in said), said
    stage(alnsort_bin, work, "assemble", "assemble", "--output", str(out),
          *[a for p in parts for a in ("--part", p)], *ins, *opts)
    return {"joins": [j for j, _ in joins], "decides": [d for d, _ in decides], "reruns": reruns}


def inflated(path: Path) -> bytes:
    with gzip.open(path, "rb") as f:
        return f.read()


CASES = [
    # (coordinate-sorted, options, splits, ranges, end buckets, name buckets)
    (False, [], 3, 1, 4, 2),
    (False, ["-n", "--tagging-policy", "all"], 5, 3, 2, 3),
    (True, ["--remove-sequencing-duplicates"], 4, 2, 3, 2),
    (True, ["--remove-duplicates", "--tagging-policy", "optical"], 2, 1, 1, 1),
]


@pytest.mark.parametrize("coordinate,opts,splits,ranges,ends,names", CASES)
def test_stage_subcommands_mark_as_one_node(alnsort_bin, traps, tmp_path, coordinate, opts, splits, ranges,
                                            ends, names):
    inp = traps[coordinate]
    out, metrics = tmp_path / "out.bam", tmp_path / "out.metrics"
    sort_opts = ["--no-PG", "--markdup", *opts, "--metrics", str(metrics), "-o", str(out), inp]
    res = run(alnsort_bin, "sort", *sort_opts)
    assert res.returncode == 0, res.stderr
    want, want_text = out.read_bytes(), metrics.read_text()
    assert "\tREAD_PAIR_DUPLICATES" in want_text and want_text.count("\n") > 10
    out.unlink()
    metrics.unlink()
    chain(alnsort_bin, tmp_path, inp, sort_opts, splits, ranges, ends, names, out)
    if ranges == 1:
        assert out.read_bytes() == want
    else:
        assert inflated(out) == gzip.decompress(want)
    assert metrics.read_text() == want_text


@pytest.mark.parametrize("coordinate,opts,splits,ranges,ends,names", [CASES[1], CASES[2]])
def test_maps_that_collect_make_markdup_collect_unneeded(alnsort_bin, traps, tmp_path, coordinate, opts, splits,
                                                         ranges, ends, names):
    """`map --end-buckets B --name-buckets J` (with --markdup) writes the
    split's share beside its blocks, the same files as markdup-collect's;
    its JSON serves as --collected: one node's output and metrics."""
    inp = traps[coordinate]
    out, metrics = tmp_path / "out.bam", tmp_path / "out.metrics"
    sort_opts = ["--no-PG", "--markdup", *opts, "--metrics", str(metrics), "-o", str(out), inp]
    res = run(alnsort_bin, "sort", *sort_opts)
    assert res.returncode == 0, res.stderr
    want, want_text = out.read_bytes(), metrics.read_text()
    out.unlink()
    metrics.unlink()
    chain(alnsort_bin, tmp_path, inp, sort_opts, splits, ranges, ends, names, out, folded=True)
    assert inflated(out) == gzip.decompress(want)
    assert metrics.read_text() == want_text
    # Without --markdup the map refuses to collect, by name.
    res = run(alnsort_bin, "map", "--split", "0:0:-:0", "--end-buckets", "2", "--out-dir", str(tmp_path), inp,
              "--", "--no-PG", "-o", str(out), inp)
    assert res.returncode != 0 and "only with --markdup" in res.stderr, res.stderr


def test_joins_and_decisions_within_a_small_budget_spill(alnsort_bin, many, tmp_path):
    """With -m 1M (what one node's marker gets) the buckets of one
    name-grouped input spill to sorted runs under -T: the same output and
    metrics, and the -T directory is empty afterwards."""
    inp = many
    spill = tmp_path / "spill"
    spill.mkdir()
    out, metrics = tmp_path / "out.bam", tmp_path / "out.metrics"
    sort_opts = ["--no-PG", "--markdup", "-m", "1M", "-T", str(spill), "--metrics", str(metrics),
                 "-o", str(out), inp]
    res = run(alnsort_bin, "sort", *sort_opts)
    assert res.returncode == 0, res.stderr
    want, want_text = out.read_bytes(), metrics.read_text()
    out.unlink()
    metrics.unlink()
    seen = chain(alnsort_bin, tmp_path, inp, sort_opts, 2, 1, 1, 1, out)
    assert seen["joins"][0]["runs"] > 0 and seen["decides"][0]["runs"] > 1, seen
    assert out.read_bytes() == want
    assert metrics.read_text() == want_text
    assert list(spill.iterdir()) == []

    # A failure after the spill (the join's pair ends cut short, read after
    # the splits' ends): exit 1 naming the file, nothing written, the spill
    # directory empty.
    work = tmp_path / "work"
    bad = work / "cut.ends"
    ends = json.loads((work / "join-0.json").read_text())["ends"][0]
    bad.write_bytes(Path(ends).read_bytes()[:-5])
    joined = work / "join-bad.json"
    joined.write_text(json.dumps({"ends": [str(bad)]}))
    res = run(alnsort_bin, "markdup-decide", "--collected", str(work / "collect-0.json"),
              "--collected", str(work / "collect-1.json"), "--joined", str(joined),
              "--bucket", "0", "--out-dir", str(tmp_path), inp, "--", *sort_opts)
    assert res.returncode == 1 and "cut.ends" in res.stderr and "read ends" in res.stderr, res.stderr
    assert list(spill.iterdir()) == []
    assert not (tmp_path / "markdup-decide-0.counts").exists()


def test_errors_name_the_problem(alnsort_bin, traps, tmp_path):
    inp = traps[False]
    res = run(alnsort_bin, "markdup-collect", "--bucket", "1", inp)
    assert res.returncode == 2 and "unknown option '--bucket' for alnsort markdup-collect" in res.stderr
    res = run(alnsort_bin, "markdup-collect", "--end-buckets", "0", inp)
    assert res.returncode == 2 and "--end-buckets 0: at least 1" in res.stderr
    res = run(alnsort_bin, "markdup-collect", "--split", "0:0:-:0", "--out-dir", str(tmp_path), inp, "--", "-n")
    assert res.returncode == 1 and "need --markdup" in res.stderr, res.stderr
    res = run(alnsort_bin, "markdup-join", "--bucket", "0", "--out-dir", str(tmp_path), "--", "--markdup")
    assert res.returncode == 1 and "needs --collected" in res.stderr, res.stderr
    res = run(alnsort_bin, "markdup-decide", "--help")
    assert res.returncode == 0 and "--joined FILE" in res.stdout
    assert all(len(line) <= 80 for line in res.stdout.splitlines())


@pytest.fixture(scope="module")
def several(tmp_path_factory) -> dict[str, list[str]]:
    """Coordinate-sorted inputs of the traps, whole templates spread over
    two inputs (several_inputs.py): {"apart": libA in one input, libB and
    the unknown library in the other; "unknown": the same, but some of the
    unknown library's templates in the first input too (no header says
    so); "lanes": both libraries in both inputs, each under its own @RG
    IDs; "same": both under the same @RG lines (one read group each to
    Picard; samtools' merge renames the second input's IDs); "grouped":
    "apart" grouped by name}."""
    import several_inputs as si

    d = tmp_path_factory.mktemp("md-cli-several")
    old = g.REFS
    g.REFS = [(n, 4_000_000) for n, _ in old]
    out: dict[str, list[str]] = {}
    try:
        recs = si.traps()
        for s in range(4):
            recs += moved(g.t_random(40 + s, dense=s % 2 == 0), len(g.TRAPS) + 1 + s)
        recs = stale_dups(recs, 5)
        shapes = {
            "apart": si.by_library(recs),
            "unknown": si.by_library(recs, unknown_in_both=True),
            "lanes": [si.lane(p, k) for k, p in enumerate(si.split(recs, 2, 7))],
            "same": [(p, g.RGS) for p in si.split(recs, 2, 7)],
        }
        # "lanes" with one mapped fragment in both inputs, alone at its
        # position: the two inputs' running maxima are equal there.
        frag = next(r for r in recs if r.flag & 0x905 == 0 and r.ref >= 0)
        tie = g.Rec(**{**frag.__dict__, "name": "tie:1:FC:1:1101:1:1", "pos": 3_900_000, "tags": list(frag.tags)})
        rest = [r for r in recs if r.name != frag.name]
        shapes["tie"] = [si.lane(p + [tie], k) for k, p in enumerate(si.split(rest, 2, 7))]
        for shape, parts in shapes.items():
            paths = []
            for k, (part, rgs) in enumerate(parts):
                grouped = d / f"{shape}.{k}.bam"
                g.write_bam(grouped, part, rgs)
                sorted_ = d / f"{shape}.{k}.sorted.bam"
                pysam.sort("-o", str(sorted_), str(grouped))
                paths.append(str(sorted_))
                if shape == "apart":
                    out.setdefault("grouped", []).append(str(grouped))
            out[shape] = paths
    finally:
        g.REFS = old
    return out


SEVERAL = [
    # (options, splits, ranges, end buckets, name buckets)
    ([], 2, 1, 1, 1),
    (["--tagging-policy", "all"], 3, 2, 4, 2),
    (["--remove-sequencing-duplicates"], 4, 3, 2, 3),
]


@pytest.mark.parametrize("shape", ["apart", "lanes", "same"])
@pytest.mark.parametrize("opts,splits,ranges,ends,names", SEVERAL)
def test_several_coordinate_sorted_inputs_are_decided_per_bucket(alnsort_bin, several, tmp_path, shape, opts,
                                                                 splits, ranges, ends, names):
    """Coordinate-sorted inputs: of which no two hold one library (the
    tasks number records by input, split and place, which orders every two
    ends they compare, of one library so of one input, as Picard's merged
    stream does), and lanes of one library (each end carries its record's
    running maximum by htsjdk's coordinate comparator, in the splits'
    boundaries the largest record of each split: the ends are compared in
    Picard's merged order), under their own or the same @RG lines: one
    node's output and metrics (one node's flags are Picard's:
    tests/markdup/test_sort_markdup_inputs.py). The maps collect (their
    shares the same bytes as markdup-collect's: the map takes the records'
    read groups before the merge renames them)."""
    ins = several[shape]
    out, metrics = tmp_path / "out.bam", tmp_path / "out.metrics"
    sort_opts = ["--no-PG", "--markdup", *opts, "--metrics", str(metrics), "-o", str(out), *ins]
    res = run(alnsort_bin, "sort", *sort_opts)
    assert res.returncode == 0, res.stderr
    want, want_text = out.read_bytes(), metrics.read_text()
    assert "libA" in want_text and "libB" in want_text and "Unknown Library" in want_text
    out.unlink()
    metrics.unlink()
    seen = chain(alnsort_bin, tmp_path, ins, sort_opts, splits, ranges, ends, names, out, folded=True)
    assert len(seen["decides"]) == ends and all(d["bucket"] == b for b, d in enumerate(seen["decides"]))
    assert inflated(out) == gzip.decompress(want)
    assert metrics.read_text() == want_text


@pytest.mark.parametrize("shape,why", [
    ("grouped", "the inputs are grouped by name"),
])
def test_several_inputs_the_tasks_cannot_decide_are_refused_by_name(alnsort_bin, several, tmp_path, shape, why):
    """Name-grouped inputs (one template of a name's records in two
    inputs): markdup-collect refuses, saying why and what decides them."""
    ins = several[shape]
    spl, _ = stage(alnsort_bin, tmp_path, "split", "split", "--parts", "2", *ins)
    res = run(alnsort_bin, "markdup-collect", "--split", spl[0]["arg"], "--out-dir", str(tmp_path), *ins,
              "--", "--markdup", "-o", str(tmp_path / "o.bam"), *ins)
    assert res.returncode == 1, res.stderr
    assert why.format(*ins) in res.stderr and "--decision-buckets 0" in res.stderr, res.stderr
    assert "alnsort sort --markdup" in res.stderr


def test_lanes_whose_records_tie_in_the_merged_order_are_refused_by_the_decide(alnsort_bin, several, tmp_path):
    """A record equal in every field htsjdk's coordinate comparator reads
    in two lanes, the first of its position in both: Java's heap orders
    the two in Picard's merged stream, which the tasks do not know, so the
    decide of its bucket refuses (exit 1), naming the read, the inputs and
    what decides them; nothing is written."""
    ins = several["tie"]
    out, metrics = tmp_path / "out.bam", tmp_path / "out.metrics"
    sort_opts = ["--no-PG", "--markdup", "--metrics", str(metrics), "-o", str(out), *ins]
    with pytest.raises(AssertionError) as e:
        chain(alnsort_bin, tmp_path, ins, sort_opts, 3, 1, 1, 2, out)
    msg = str(e.value)
    assert "markdup-decide" in msg and "equal running maxima (read tie:1:FC:1:1101:1:1)" in msg, msg
    assert f"{ins[0]}, {ins[1]}" in msg and "--decision-buckets 0" in msg, msg
    assert not out.exists() and not metrics.exists()


def test_a_library_the_headers_keep_apart_but_the_records_do_not_is_refused(alnsort_bin, several, tmp_path):
    """Records of no read group in both inputs (Picard's unknown library,
    though their headers name other libraries): the maps and tasks run,
    markdup-assemble then refuses, naming the library's inputs."""
    ins = several["unknown"]
    out, metrics = tmp_path / "out.bam", tmp_path / "out.metrics"
    sort_opts = ["--no-PG", "--markdup", "--metrics", str(metrics), "-o", str(out), *ins]
    with pytest.raises(AssertionError) as e:
        chain(alnsort_bin, tmp_path, ins, sort_opts, 2, 1, 2, 2, out)
    msg = str(e.value)
    assert "markdup-assemble" in msg and f"has records in {ins[0]} and in {ins[1]}" in msg, msg
    assert not out.exists() and not metrics.exists()


@pytest.fixture(scope="module")
def scattered(many, tmp_path_factory) -> tuple[str, str]:
    """`many` (name-grouped) with the second mate of its first pair (both
    mates mapped) moved to the end: that template is scattered over the
    first and the last split. Returns (the input, the read name)."""
    d = tmp_path_factory.mktemp("md-cli-scattered")
    with pysam.AlignmentFile(many, "rb") as f:
        header = f.header
        recs = list(f)
    for i in range(len(recs) - 1):
        a, b = recs[i], recs[i + 1]
        primary = all(r.is_paired and not (r.is_unmapped or r.mate_is_unmapped or r.is_secondary
                                           or r.is_supplementary) for r in (a, b))
        if a.query_name == b.query_name and primary and (i == 0 or recs[i - 1].query_name != a.query_name) \
                and (i + 2 == len(recs) or recs[i + 2].query_name != a.query_name):
            break
    else:
        raise AssertionError("no plain pair in the input")
    moved_rec = recs.pop(i + 1)
    recs.append(moved_rec)
    path = d / "scattered.bam"
    with pysam.AlignmentFile(str(path), "wb", header=header) as out:
        for r in recs:
            out.write(r)
    return str(path), a.query_name


def test_a_template_scattered_over_splits_is_refused_as_one_node_refuses_it(alnsort_bin, scattered, tmp_path):
    """Name-grouped input whose template is scattered over two splits that
    are not neighbours: every split alone is grouped, and the join of the
    template's name bucket refuses it with one node's message: the input,
    the record (counted from its split's start, the split named by its
    virtual offset) and the read."""
    inp, name = scattered
    out = tmp_path / "out.bam"
    sort_opts = ["--no-PG", "--markdup", "-o", str(out), inp]
    res = run(alnsort_bin, "sort", *sort_opts)
    assert res.returncode == 1 and not out.exists(), res.stderr
    one = res.stderr
    assert f"(read {name}) belongs to a template seen earlier in the file" in one and inp in one, one
    record = int(one.split("but record ")[1].split(" ")[0])

    work = tmp_path / "work"
    work.mkdir()
    opts = ["--", *sort_opts]
    spl, _ = stage(alnsort_bin, work, "split", "split", "--parts", "3", inp)
    assert len(spl) == 3, spl
    buckets = ["--end-buckets", "2", "--name-buckets", "2"]
    cols = [stage(alnsort_bin, work, f"collect-{s['ordinal']}", "markdup-collect", "--split", s["arg"], *buckets,
                  "--out-dir", str(work), inp, *opts) for s in spl]
    coll = [a for _, f in cols for a in ("--collected", f)]
    said = []
    for j in range(2):
        res = run(alnsort_bin, "markdup-join", *coll, "--bucket", str(j), "--out-dir", str(work), *opts)
        if res.returncode != 0:
            assert res.returncode == 1, res.stderr
            said.append(res.stderr)
            failed = j
    assert len(said) == 1, said
    err = said[0]
    last = spl[-1]
    assert f"{inp} (the split from virtual offset {last['start']:#x}): --markdup needs the records of each " \
           "template together" in err, err
    assert f"(read {name}) belongs to a template seen earlier in the file (at record " in err, err
    assert f"of {inp} (the split from virtual offset {spl[0]['start']:#x}), without both mates)" in err, err
    # The same record as one node's: its split's first record's place plus
    # its index in the split.
    k = int(err.split("but record ")[1].split(" ")[0])
    assert sum(c["records"] for c, _ in cols[:-1]) + k == record, (record, k, [c["records"] for c, _ in cols])
    assert not list(work.glob(f"markdup-join-{failed}.*")), "the refused join wrote nothing"
