"""`alnsort sort --markdup IN1 IN2 ...` against Picard MarkDuplicates 3.4.0
given the same inputs as several `I=`.

Picard merges several inputs with htsjdk's merging iterator in the first
header's order (read names compared as Java strings for name-grouped input
with ASSUME_SORT_ORDER=queryname; htsjdk's coordinate comparator for
coordinate-sorted input), so which of two equal-scoring duplicates in
different inputs it keeps depends on that order, not on the order the
inputs are given; identical @RG lines in two inputs are one read group.
Each case splits generated templates (the traps of test_vs_picard.py) over
several inputs, whole templates per input, and asserts for every output
record Picard's 0x400 bit, Picard's metrics and histograms, and the records
and their order of `alnsort sort IN1 IN2 ...` without --markdup.
"""

from __future__ import annotations

import collections
import subprocess
from pathlib import Path

import pysam
import pytest

import test_vs_picard as g
from several_inputs import CLASHING_RGS, lane, split, traps, write_with_other_refs
from test_sort_markdup import read_all, sort, stale_dups, with_mate_cigars

ORDERS = {"coordinate": [], "name": ["-n"]}


@pytest.fixture(scope="session")
def alnsort() -> str:
    import harness

    return harness.alnsort_path()


@pytest.fixture
def long_refs(monkeypatch):
    monkeypatch.setattr(g, "REFS", [(n, 2_000_000) for n, _ in g.REFS])


def without_rg(ident):
    """A record's identity (test_sort_markdup.identity) without its RG tag:
    the tools rename clashing read groups differently (htsjdk and samtools
    merge)."""
    return ident[:-1] + (tuple(t for t in ident[-1] if t[0] != "RG"),)


def flags(records):
    """Record identity (without RG) -> the sorted 0x400 bits of the records
    that have it (a few traps repeat a template in two read groups)."""
    out = collections.defaultdict(list)
    for k, dup in records:
        out[without_rg(k)].append(dup)
    return {k: sorted(v) for k, v in out.items()}


def write_inputs(tmp: Path, inputs, coordinate: bool):
    paths = []
    for k, (recs, rgs) in enumerate(inputs):
        p = tmp / f"in{k}.bam"
        g.write_bam(p, with_mate_cigars(recs), rgs)
        if coordinate:
            s = tmp / f"in{k}.sorted.bam"
            pysam.sort("-o", str(s), str(p))
            p = s
        paths.append(p)
    return paths


def run_picard(picard, paths, tmp: Path, coordinate: bool):
    out, m = tmp / "picard.bam", tmp / "picard.metrics"
    args = [] if coordinate else ["ASSUME_SORT_ORDER=queryname"]
    p = subprocess.run(picard + ["MarkDuplicates", *[f"I={x}" for x in paths], f"O={out}", f"M={m}", *args,
                                 "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true",
                                 "VERBOSITY=ERROR"],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"Picard failed:\n{p.stderr[-3000:]}"
    return read_all(out), g.parse_metrics(m)


def check_inputs(tmp: Path, picard, alnsort, inputs, coordinate: bool, orders=ORDERS):
    paths = write_inputs(tmp, inputs, coordinate)
    picard_recs, (pmet, phist) = run_picard(picard, paths, tmp, coordinate)
    want = flags(picard_recs)
    assert any(any(v) for v in want.values()), "Picard marked nothing: the case proves nothing"
    for order, oargs in orders.items():
        # The inputs in the order given and reversed: Picard's answer
        # either way (its merge order does not depend on it).
        for rev in (False, True):
            ins = [str(p) for p in (reversed(paths) if rev else paths)]
            tag = f"{order}{'.rev' if rev else ''}"
            out, plain, met = tmp / f"md.{tag}.bam", tmp / f"plain.{tag}.bam", tmp / f"md.{tag}.metrics"
            sort(alnsort, [*oargs, "--markdup", "--metrics", str(met), "-o", str(out), *ins])
            sort(alnsort, [*oargs, "-o", str(plain), *ins])
            ours = read_all(out)
            got = flags(ours)
            assert got.keys() == want.keys(), f"{tag}: the records differ from Picard's"
            diffs = [(k[:4], want[k], got[k]) for k in want if want[k] != got[k]]
            assert not diffs, f"{tag}: 0x400 differs from Picard on {len(diffs)} records " \
                              f"(name, flag, ref, pos; picard, ours):\n" + "\n".join(map(str, diffs[:20]))
            omet, ohist = g.parse_metrics(met)
            assert omet == pmet, f"{tag}: metrics differ:\npicard {pmet}\nours   {omet}"
            assert ohist == phist, f"{tag}: histograms differ:\npicard {phist}\nours   {ohist}"
            assert [k for k, _ in ours] == [k for k, _ in read_all(plain)], \
                f"{tag}: records or their order differ from alnsort sort IN1 IN2 ... without --markdup"
    return picard_recs


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_traps_over_two_inputs_with_the_same_read_groups(coordinate, tmp_path, picard, alnsort, long_refs):
    """Two inputs with the same @RG lines (lanes written with one header):
    duplicate sets and optical clusters across the inputs, equal scores in
    different inputs."""
    a, b = split(stale_dups(traps(), 1), 2, seed=7)
    picard_recs = check_inputs(tmp_path, picard, alnsort, [(a, g.RGS), (b, g.RGS)], coordinate)
    assert sum(d for _, d in picard_recs) > 50


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_random_templates_over_lanes_of_several_libraries(coordinate, tmp_path, picard, alnsort):
    """Three lanes, each with its own @RG IDs for the same libraries (two
    named, one without LB), and a fourth input whose rg1 clashes by ID with
    a different library."""
    recs = stale_dups(g.t_random(5) + g.t_adversarial(102), 5)
    parts = split(recs, 4, seed=3)
    inputs = [lane(parts[k], k) for k in range(3)]
    inputs.append((parts[3], CLASHING_RGS))
    check_inputs(tmp_path, picard, alnsort, inputs, coordinate)


def test_mixed_semantics_and_dictionaries_are_refused(tmp_path, alnsort):
    recs = g.pair("p1", 100, 300) + g.pair("p2", 100, 300)
    grouped, = write_inputs(tmp_path, [(recs, g.RGS)], coordinate=False)
    srt = tmp_path / "s.bam"
    pysam.sort("-o", str(srt), str(grouped))
    out = tmp_path / "out.bam"
    p = sort(alnsort, ["--markdup", "-o", str(out), str(grouped), str(srt)], check=False)
    assert p.returncode != 0 and "SO:coordinate" in p.stderr and str(srt) in p.stderr, p.stderr
    assert not out.exists()
    other = tmp_path / "other.bam"
    write_with_other_refs(other, recs)
    p = sort(alnsort, ["--markdup", "-o", str(out), str(grouped), str(other)], check=False)
    assert p.returncode != 0 and "@SQ" in p.stderr and str(other) in p.stderr, p.stderr
    assert not out.exists()


def test_equal_scores_in_two_inputs_keep_the_first_name(tmp_path, picard, alnsort):
    """The smallest case: equal-scoring duplicates 'zzz' (first input) and
    'aaa' (second): Picard keeps 'aaa' (its merge reads names in order)."""
    a = g.pair("zzz", 100, 300) + g.frag("m1", 5000)
    b = g.pair("aaa", 100, 300) + g.frag("bbb", 5000)
    recs = check_inputs(tmp_path, picard, alnsort, [(a, g.RGS), (b, g.RGS)], coordinate=False,
                        orders={"coordinate": []})
    marked = sorted({k[0] for k, d in recs if d})
    assert marked == ["m1", "zzz"]


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_one_read_name_in_two_inputs(coordinate, tmp_path, picard, alnsort, long_refs):
    """Mates of a template in two inputs (test_markduplicates_inputs.
    meeting_names): Picard pairs mates by read group and name wherever its
    merge puts them; `alnsort sort --markdup IN1 IN2` gives its flags and
    metrics."""
    from test_markduplicates_inputs import meeting_names

    parts, met = meeting_names(stale_dups(traps(), 4), 2, seed=9, copies=False)
    assert len(met) > 20
    check_inputs(tmp_path, picard, alnsort, [(p, g.RGS) for p in parts], coordinate)
