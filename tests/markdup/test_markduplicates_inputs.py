"""`alnsort MarkDuplicates` with several inputs (`I=a.bam I=b.bam`, or
`--INPUT a.bam --INPUT b.bam`) against Picard MarkDuplicates 3.4.0 given
the same arguments.

Picard reads several inputs through htsjdk: `SamFileHeaderMerger` makes a
new header (`@HD VN:1.6 GO:none SO:<the first input's>`, the first input's
@SQ lines, @RG and @PG lines of every input with identical ones made one
and clashing IDs renamed `ID.N`, sorted by ID, every input's @CO lines) and
`MergingSamRecordIterator` interleaves the records by htsjdk's comparator of
that order in a Java `PriorityQueue`, rewriting the RG and PG tags of the
records after a clash (a tag naming no line of its input's header is
dropped). Each case spreads generated templates (every trap, random and
adversarial templates, stale 0x400 bits and DT tags, PG tags) over two or
three inputs, whole templates per input, in one form (coordinate-sorted,
queryname-sorted by Picard SortSam, or grouped by name with
ASSUME_SORT_ORDER=queryname), with read groups per lane of one library or
of two, or clashing by ID, and @PG lines that clash, and asserts what
test_markduplicates.py asserts for one input: the records in order with
every field and tag, the header (but @PG CL and VN), the metrics.
"""

from __future__ import annotations

import hashlib
import random
import subprocess
from pathlib import Path

import pysam
import pytest

import test_markduplicates as one
import test_sort_markdup as sm
import test_vs_picard as g
from several_inputs import CLASHING_RGS, add_header_lines, lane, split, traps, write_with_other_refs
from test_markduplicates import alnsort, long_refs, run, run_both  # noqa: F401  (fixtures)


def templates(seed: int):
    """The generated templates of one case (test_markduplicates' input)."""
    recs = traps(100 + seed) + sm.moved(g.t_random(5 + seed, dense=True), len(g.TRAPS) + 1)
    recs = sm.with_mate_cigars(sm.stale_dt(sm.stale_dups(recs, 1 + seed), 2 + seed))
    return one.with_pg_tags(recs, 3 + seed)


def write_inputs(tmp: Path, picard, parts, form: str, pg_lines) -> list[Path]:
    """Input k: its records and read groups `parts[k]`, header lines
    `pg_lines[k]`, in `form` (coordinate, queryname or grouped)."""
    paths = []
    for k, ((recs, rgs), extra) in enumerate(zip(parts, pg_lines)):
        grouped = tmp / f"in{k}.grouped.bam"
        g.write_bam(grouped, recs, rgs)
        add_header_lines(grouped, extra)
        if form == "grouped":
            paths.append(grouped)
            continue
        out = tmp / f"in{k}.{form}.bam"
        if form == "queryname":
            p = run(picard + ["SortSam", f"I={grouped}", f"O={out}", "SORT_ORDER=queryname", "QUIET=true",
                              "VERBOSITY=ERROR"])
            assert p.returncode == 0, p.stderr[-2000:]
        else:
            pysam.sort("--no-PG", "-o", str(out), str(grouped))
        paths.append(out)
    return paths


def pg(ident: str, cl: str, pp: str | None = None) -> str:
    return f"@PG\tID:{ident}\tPN:{ident}\tCL:{cl}" + (f"\tPP:{pp}" if pp else "")


# Header lines per input: bwa and aln (the records' PG tag values) clash by
# CL in every input, with a program after each, and one identical line.
CLASHING_PGS = [[pg("bwa", f"bwa mem lane{k}"), pg("aln", "bwa aln"), pg("mark", f"mark {k}", "bwa"),
                 f"@CO\tlane {k}"] for k in range(3)]
SAME_PGS = [[pg("bwa", "bwa mem"), pg("aln", "bwa aln")] for _ in range(3)]

CASES = {
    # id: (form, syntax, inputs, read groups, header lines, options)
    "coordinate-legacy-two-lanes-one-library": ("coordinate", "legacy", 2, "same", SAME_PGS, []),
    "coordinate-current-three-lanes-clashing-pg-tag-all": (
        "coordinate", "current", 3, "lanes", CLASHING_PGS, ["TAGGING_POLICY=All"]),
    "queryname-current-two-lanes-two-libraries-clashing-rg": (
        "queryname", "current", 2, "clash", CLASHING_PGS, []),
    "queryname-legacy-three-lanes": ("queryname", "legacy", 3, "lanes", SAME_PGS, ["REMOVE_DUPLICATES=true"]),
    "grouped-legacy-two-clashing-rg-and-pg": (
        "grouped", "legacy", 2, "clash", CLASHING_PGS, ["ASSUME_SORT_ORDER=queryname", "COMMENT=several inputs"]),
    "grouped-current-three-lanes-remove-sequencing": (
        "grouped", "current", 3, "lanes", CLASHING_PGS,
        ["ASSUME_SORT_ORDER=queryname", "TAGGING_POLICY=OpticalOnly", "REMOVE_SEQUENCING_DUPLICATES=true"]),
    "coordinate-legacy-two-no-pg": ("coordinate", "legacy", 2, "clash", CLASHING_PGS, ["PROGRAM_RECORD_ID=null"]),
}


def read_groups(kind: str, parts):
    """The read groups of each input: the same @RG lines in every one, one
    set per lane (the same libraries), or rg1 clashing by ID with another
    library in the second input."""
    out = []
    for k, recs in enumerate(parts):
        if kind == "same":
            out.append((recs, g.RGS))
        elif kind == "lanes":
            out.append(lane(recs, k))
        else:
            out.append((recs, g.RGS if k != 1 else CLASHING_RGS))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_several_inputs_as_picard(case, tmp_path, picard, alnsort, long_refs):  # noqa: F811
    form, syntax, n, rgs, pgs, opts = CASES[case]
    parts = read_groups(rgs, split(templates(len(case)), n, seed=n))
    paths = write_inputs(tmp_path, picard, parts, form, pgs)
    _, want = run_both(tmp_path, picard, alnsort, paths, syntax, opts)
    with pysam.AlignmentFile(str(tmp_path / "picard" / "out.bam"), check_sq=False) as f:
        h = f.header.to_dict()
    assert h["HD"].get("GO") in ("none", "query"), h["HD"]
    if rgs == "clash":
        # htsjdk renamed the second input's rg1, and its reads follow.
        assert any(r["ID"] == "rg1.1" for r in h["RG"]), h["RG"]
        assert any(("RG", "rg1.1", "Z") in r[11] for r in want)
    if pgs is CLASHING_PGS and "PROGRAM_RECORD_ID=null" not in opts:
        assert any(p["ID"].startswith("bwa.") for p in h["PG"]), h["PG"]


def test_ties_between_inputs_follow_javas_priority_queue(tmp_path, picard, alnsort):
    """The same templates in three coordinate-sorted inputs (a lane each):
    every record ties with its copies under htsjdk's comparator, so the
    order they come out in, and which copy Picard keeps, is Java's
    PriorityQueue's, not simply the first input's first."""
    rng = random.Random(5)
    recs = []
    for i in range(60):
        pos = rng.randrange(1000, 5000, 50)
        recs += g.pair(f"t{i:03d}:1:1:{rng.randrange(1, 90)}:{rng.randrange(1, 90)}", pos, pos + 200)
        if i % 3 == 0:
            recs += g.frag(f"f{i:03d}:1:1:5:5", pos)
    parts = [lane(sm.with_mate_cigars([g.Rec(**{**r.__dict__}) for r in recs]), k) for k in range(3)]
    paths = write_inputs(tmp_path, picard, parts, "coordinate", [[], [], []])
    _, want = run_both(tmp_path, picard, alnsort, paths, "legacy", [])
    # The copies of one record come out of the inputs in varying orders.
    firsts = {r[11] for r in want[::3]}
    assert len({dict((t, v) for t, v, _ in tags)["RG"][-2:] for tags in firsts}) > 1


def test_gatk_best_practices_line(tmp_path, picard, alnsort, long_refs):  # noqa: F811
    """The MarkDuplicates step of GATK's best-practices data processing
    (gatk4-data-processing's processing-for-variant-discovery-gatk4.wdl:
    `MarkDuplicates --INPUT ~{sep=' --INPUT ' input_bams} --OUTPUT ..
    --METRICS_FILE .. --VALIDATION_STRINGENCY SILENT
    --OPTICAL_DUPLICATE_PIXEL_DISTANCE 2500 --ASSUME_SORT_ORDER "queryname"
    --CREATE_MD5_FILE true`) over per-lane aligner outputs, with `alnsort`
    for `picard`: Picard's records, header and metrics, and an out.bam.md5
    holding the MD5 of the output written (as Picard's holds its own)."""
    parts = read_groups("lanes", split(templates(7), 3, seed=11))
    paths = write_inputs(tmp_path, picard, parts, "grouped", SAME_PGS)
    outs, _ = run_both(tmp_path, picard, alnsort, paths, "current",
                       ["VALIDATION_STRINGENCY=SILENT", "OPTICAL_DUPLICATE_PIXEL_DISTANCE=2500",
                        "ASSUME_SORT_ORDER=queryname", "CREATE_MD5_FILE=true"])
    for who, (out, _) in outs.items():
        assert sorted(p.name for p in out.parent.iterdir()) == ["metrics.txt", "out.bam", "out.bam.md5"], who
        assert (out.parent / "out.bam.md5").read_text() == hashlib.md5(out.read_bytes()).hexdigest(), who
    # The WDL runs it through GATK's launcher: `gatk --java-options "..."
    # MarkDuplicates ...` with alnsort for gatk gives the same records.
    gatk = tmp_path / "gatk"
    gatk.mkdir()
    p = run([alnsort, "--java-options", "-Dsamjdk.compression_level=5 -Xms4000m", "MarkDuplicates",
             *one.argv("current", paths, gatk / "out.bam", gatk / "metrics.txt",
                       ["VALIDATION_STRINGENCY=SILENT", "OPTICAL_DUPLICATE_PIXEL_DISTANCE=2500",
                        "ASSUME_SORT_ORDER=queryname", "CREATE_MD5_FILE=true"])])
    assert p.returncode == 0, p.stderr
    assert one.records(gatk / "out.bam") == one.records(outs["picard"][0])


def test_what_picard_refuses_is_refused(tmp_path, picard, alnsort):
    """Inputs whose @HD SO differ (without ASSUME_SORT_ORDER) and inputs
    with different @SQ lines: Picard stops, alnsort refuses naming the
    file, and leaves nothing."""
    recs = g.pair("p1:1:1:1:1", 100, 300) + g.pair("p2:1:1:1:2", 100, 300)
    a, b = write_inputs(tmp_path, picard, [(recs, g.RGS), (recs, g.RGS)], "coordinate", [[], []])
    qn = tmp_path / "qn.bam"
    p = run(picard + ["SortSam", f"I={b}", f"O={qn}", "SORT_ORDER=queryname", "QUIET=true"])
    assert p.returncode == 0, p.stderr[-1000:]
    other = tmp_path / "other.bam"
    write_with_other_refs(other, recs)
    sorted_other = tmp_path / "other.sorted.bam"
    pysam.sort("--no-PG", "-o", str(sorted_other), str(other))
    out, met = tmp_path / "o.bam", tmp_path / "o.txt"
    for second, words, picard_words in [(qn, "Files are not compatible with sort order", "not compatible"),
                                        (sorted_other, "@SQ lines differ", "equence dictionar")]:
        p = run(picard + ["MarkDuplicates", f"I={a}", f"I={second}", f"O={out}", f"M={met}"])
        assert p.returncode != 0 and picard_words in p.stderr, p.stderr[-1500:]
        out.unlink(missing_ok=True)
        met.unlink(missing_ok=True)
        p = run([alnsort, "MarkDuplicates", f"I={a}", f"I={second}", f"O={out}", f"M={met}"])
        assert p.returncode == 1 and words in p.stderr and str(second) in p.stderr, p.stderr
        assert not out.exists() and not met.exists()
    # With ASSUME_SORT_ORDER the other inputs' @HD are not checked (Picard
    # sets it on the first header only): both tools run.
    outs, _ = run_both(tmp_path, picard, alnsort, [a, b], "current", ["ASSUME_SORT_ORDER=coordinate"])


def test_help_says_inputs_are_merged(alnsort):  # noqa: F811
    p = subprocess.run([alnsort, "MarkDuplicates", "--help"], capture_output=True, text=True)
    assert "Given more than once, the inputs are merged as Picard merges them" in " ".join(p.stdout.split())


def meeting_names(recs, n: int, seed: int, copies: bool = True):
    """Templates over n inputs where read names meet across inputs: most
    whole in one input, some with their mates in two (read 1's records in
    one, the rest in another: mates aligned apart), and with `copies` some
    whole in two (the same reads in both). Returns the records of each
    input and the names split or copied."""
    rng = random.Random(seed)
    by_name: dict[str, list] = {}
    for r in recs:
        by_name.setdefault(r.name, []).append(r)
    parts = [[] for _ in range(n)]
    met = set()
    for name, t in by_name.items():
        a, b = rng.sample(range(n), 2)
        how = rng.choice(["whole", "whole", "whole", "mates"] + (["copy"] if copies else []))
        if how == "mates" and any(r.flag & 0x40 for r in t) and any(r.flag & 0x80 for r in t):
            parts[a] += [r for r in t if r.flag & 0x40]
            parts[b] += [r for r in t if not r.flag & 0x40]
            met.add(name)
        elif how == "copy":
            parts[a] += t
            parts[b] += [g.Rec(**{**r.__dict__, "tags": list(r.tags)}) for r in t]
            met.add(name)
        else:
            parts[a] += t
    return parts, met


NAMES_MEET = {
    # id: (form, syntax, inputs, read groups, options)
    "grouped-legacy-two-same-read-groups": ("grouped", "legacy", 2, "same", ["ASSUME_SORT_ORDER=queryname"]),
    "grouped-current-three-lanes-tag-all": (
        "grouped", "current", 3, "lanes", ["ASSUME_SORT_ORDER=queryname", "TAGGING_POLICY=All"]),
    "queryname-current-two-same-read-groups": ("queryname", "current", 2, "same", []),
    "queryname-legacy-three-lanes-remove": ("queryname", "legacy", 3, "lanes", ["REMOVE_DUPLICATES=true"]),
    "coordinate-legacy-two-same-read-groups": ("coordinate", "legacy", 2, "same", []),
}


@pytest.mark.parametrize("case", list(NAMES_MEET))
def test_one_read_name_in_two_inputs_as_picard(case, tmp_path, picard, alnsort, long_refs):  # noqa: F811
    """A read name in two inputs: the mates of a template in two inputs, or
    the same template in both. Each input is grouped by name (or sorted);
    Picard's merge may put one input's records of the name apart from the
    other's (grouped inputs are not sorted), and Picard pairs mates by read
    group and name wherever they are, each run of the name a template of
    its own. alnsort gives Picard's records, header and metrics."""
    form, syntax, n, rgs, opts = NAMES_MEET[case]
    # Copies of a template only in queryname-sorted inputs: Picard stops on
    # them in coordinate-sorted ones (test below), and grouped ones may
    # differ (the name of the last duplicate, docs/markdup.md).
    parts, met = meeting_names(templates(len(case)), n, seed=n + len(case), copies=form == "queryname")
    assert len(met) > 20
    paths = write_inputs(tmp_path, picard, read_groups(rgs, parts), form, SAME_PGS[:n])
    _, want = run_both(tmp_path, picard, alnsort, paths, syntax, opts)
    # The case proves something: in Picard's order some name comes in runs
    # apart (grouped inputs), or in one run from two inputs.
    runs = [name for i, (name, *_) in enumerate(want) if i == 0 or want[i - 1][0] != name]
    if form == "grouped":
        assert len(runs) > len(set(runs)), "no read name came apart in Picard's merge"


def test_an_input_not_grouped_by_itself_is_refused(tmp_path, picard, alnsort):
    """Names meeting across inputs are Picard's answer; a template scattered
    within one name-grouped input is still refused (as for one input),
    naming that input and the record's number in it, and leaving nothing."""
    good = g.pair("a:1:1:1:1", 100, 300) + g.pair("b:1:1:1:2", 100, 300)
    x = g.pair("x:1:1:1:3", 500, 700)
    scattered = [x[0]] + g.pair("c:1:1:1:4", 100, 300) + [x[1]]
    a, b = write_inputs(tmp_path, picard, [(good, g.RGS), (scattered, g.RGS)], "grouped", [[], []])
    out, met = tmp_path / "o.bam", tmp_path / "o.txt"
    p = run([alnsort, "MarkDuplicates", f"I={a}", f"I={b}", f"O={out}", f"M={met}", "ASSUME_SORT_ORDER=queryname"])
    assert p.returncode == 1, p.stderr
    assert f"{b}: --markdup needs the records of each template together" in p.stderr, p.stderr
    assert "record 4 (read x:1:1:1:3)" in p.stderr, p.stderr
    assert not out.exists() and not met.exists()


def test_a_template_in_two_coordinate_sorted_inputs_stops_as_picard(tmp_path, picard, alnsort):
    """The same template (read group and name) in two coordinate-sorted
    inputs, its mates on two references: both of its first mates wait for
    the second on the other reference, and Picard stops ("Value was put
    into PairInfoMap more than once"). alnsort stops too, naming both
    inputs and the read, and leaves nothing; so does `alnsort sort
    --markdup` with the same inputs."""
    x = g.pair("x:1:1:1:3", 500, 700, mref=1)
    a_recs = g.pair("a:1:1:1:1", 100, 300) + x
    b_recs = g.pair("b:1:1:1:2", 100, 300) + [g.Rec(**{**r.__dict__}) for r in x]
    a, b = write_inputs(tmp_path, picard, [(a_recs, g.RGS), (b_recs, g.RGS)], "coordinate", [[], []])
    out, met = tmp_path / "o.bam", tmp_path / "o.txt"
    p = run(picard + ["MarkDuplicates", f"I={a}", f"I={b}", f"O={out}", f"M={met}"])
    assert p.returncode != 0 and "Value was put into PairInfoMap more than once" in p.stderr, p.stderr[-1500:]
    out.unlink(missing_ok=True)
    met.unlink(missing_ok=True)
    for cmd in ([alnsort, "MarkDuplicates", f"I={a}", f"I={b}", f"O={out}", f"M={met}"],
                [alnsort, "sort", "--markdup", "--metrics", str(met), "-o", str(out), str(a), str(b)]):
        p = run(cmd)
        assert p.returncode == 1, p.stderr
        assert f"{a}, {b} (merged" in p.stderr and "duplicate marking at record" in p.stderr, p.stderr
        assert "read x:1:1:1:3 waits for its mate on reference 1 in read group rg1" in p.stderr, p.stderr
        assert "Value was put into PairInfoMap more than once" in p.stderr, p.stderr
        assert not out.exists() and not met.exists()
