"""`alnsort sort --markdup` (the binary) against Picard MarkDuplicates 3.4.0.

Each case writes one generated input (the generators of test_vs_picard.py),
runs Picard once per input form (name-grouped with
ASSUME_SORT_ORDER=queryname; coordinate-sorted, read by Picard from the
header's SO:coordinate) and alnsort once per sort order, and asserts for
every output record the 0x400 bit Picard gives the same record, the same
metrics and histogram rows, and records otherwise identical (same order,
same bytes but 0x400) to `alnsort sort` without --markdup. Inputs carry
stale 0x400 bits, which both tools must clear.
"""

from __future__ import annotations

import collections
import json
import random
import re
import subprocess
from pathlib import Path

import pysam
import pytest

import test_vs_picard as g

ORDERS = {
    "coordinate": [],
    "name": ["-n"],
    "tag": ["-t", "RG"],
    "template-coordinate": ["--template-coordinate"],
}


@pytest.fixture(scope="session")
def alnsort() -> str:
    import harness

    return harness.alnsort_path()


def stale_dups(recs, seed):
    """Sets 0x400 on about a third of the records (Picard clears them)."""
    rng = random.Random(seed)
    for r in recs:
        if rng.random() < 0.3:
            r.flag |= 0x400
    return recs


def with_mate_cigars(recs):
    """MC tags (the mate's CIGAR) on paired records whose mate is mapped, as
    `samtools fixmate -m` adds them: --template-coordinate needs them."""
    primary = {}
    for r in recs:
        if r.flag & 0x1 and not r.flag & 0x900:
            primary.setdefault((r.name, r.flag & 0xc0), r)
    for r in recs:
        if r.flag & 0x1 and not r.flag & 0x8 and not any(t == "MC" for t, _ in r.tags):
            mate = primary.get((r.name, 0xc0 ^ (r.flag & 0xc0)))
            cigar = mate.cigar if mate is not None and mate.cigar != "*" else "50M"
            r.tags = list(r.tags) + [("MC", cigar)]
    return recs


def identity(r: pysam.AlignedSegment):
    """A record's fields but 0x400: what matches a record across tools."""
    return (r.query_name, r.flag & ~0x400, r.reference_id, r.reference_start, r.cigarstring,
            r.next_reference_id, r.next_reference_start, r.query_sequence,
            tuple(r.query_qualities or ()), tuple(sorted(r.get_tags())))


def read_all(path: Path):
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        return [(identity(r), bool(r.flag & 0x400)) for r in f.fetch(until_eof=True)]


def flags_by_identity(records):
    """identity -> sorted duplicate bits (identical records can repeat)."""
    d = collections.defaultdict(list)
    for k, dup in records:
        d[k].append(dup)
    return {k: sorted(v) for k, v in d.items()}


def run_picard(picard, inp: Path, tmp: Path, coordinate: bool):
    out, m = tmp / "picard.bam", tmp / "picard.metrics"
    args = [] if coordinate else ["ASSUME_SORT_ORDER=queryname"]
    p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={out}", f"M={m}", *args,
                                 "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true", "VERBOSITY=ERROR"],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"Picard failed:\n{p.stderr[-3000:]}"
    return read_all(out), g.parse_metrics(m)


def sort(alnsort, args, check=True):
    p = subprocess.run([alnsort, "sort", *args], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, f"alnsort sort {args} failed:\n{p.stderr}"
    return p


def check_case(tmp: Path, picard, alnsort, recs, rgs=g.RGS, coordinate=False, orders=ORDERS):
    """Flags and metrics of `alnsort sort --markdup` in each order equal
    Picard's; records otherwise equal to plain `alnsort sort`."""
    inp = tmp / "in.bam"
    g.write_bam(inp, with_mate_cigars(recs), rgs)
    if coordinate:
        pysam.sort("-o", str(tmp / "in.sorted.bam"), str(inp))
        inp = tmp / "in.sorted.bam"
    picard_recs, (pmet, phist) = run_picard(picard, inp, tmp, coordinate)
    want = flags_by_identity(picard_recs)
    assert any(d for _, d in picard_recs), "Picard marked nothing: the case proves nothing"
    for order, oargs in orders.items():
        out, plain, met = tmp / f"md.{order}.bam", tmp / f"plain.{order}.bam", tmp / f"md.{order}.metrics"
        sort(alnsort, [*oargs, "--markdup", "--metrics", str(met), "-o", str(out), str(inp)])
        sort(alnsort, [*oargs, "-o", str(plain), str(inp)])
        ours = read_all(out)
        got = flags_by_identity(ours)
        assert got.keys() == want.keys(), f"{order}: the records differ from Picard's"
        diffs = [(k[:4], want[k], got[k]) for k in want if want[k] != got[k]]
        assert not diffs, f"{order}: 0x400 differs from Picard on {len(diffs)} records " \
                          f"(name, flag, ref, pos; picard, ours):\n" + "\n".join(map(str, diffs[:20]))
        omet, ohist = g.parse_metrics(met)
        assert omet == pmet, f"{order}: metrics differ:\npicard {pmet}\nours   {omet}"
        assert ohist == phist, f"{order}: histograms differ:\npicard {phist}\nours   {ohist}"
        assert [k for k, _ in ours] == [k for k, _ in read_all(plain)], \
            f"{order}: records or their order differ from alnsort sort without --markdup"
    return picard_recs, pmet


def moved(recs, n: int):
    """Records of case n, moved 100 kb * n along each reference and renamed
    apart from other cases (the first ':' field of a name gets a suffix, so
    flow-cell fields stay as they were)."""
    out = []
    for r in recs:
        r = g.Rec(**{**r.__dict__, "tags": list(r.tags)})
        head, sep, tail = r.name.partition(":")
        r.name = f"{head}T{n}{sep}{tail}" if sep else f"T{n}.{r.name}"
        if r.pos >= 0:
            r.pos += 100_000 * n
        if r.mpos >= 0:
            r.mpos += 100_000 * n
        out.append(r)
    return out


@pytest.fixture
def long_refs(monkeypatch):
    monkeypatch.setattr(g, "REFS", [(n, 2_000_000) for n, _ in g.REFS])


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_traps_in_every_order(coordinate, tmp_path, picard, alnsort, long_refs):
    """Every trap input of test_vs_picard.py in one file (each moved to its
    own stretch of the references), plus adversarial templates."""
    recs = []
    for n, name in enumerate(sorted(g.TRAPS)):
        recs += moved(g.TRAPS[name](), n)
    recs += moved(g.t_adversarial(100), len(g.TRAPS))
    picard_recs, _ = check_case(tmp_path, picard, alnsort, stale_dups(recs, 1), coordinate=coordinate)
    assert sum(d for _, d in picard_recs) > 50


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_random_templates_in_every_order(coordinate, tmp_path, picard, alnsort):
    recs = g.t_random(3) + g.t_adversarial(101)
    check_case(tmp_path, picard, alnsort, stale_dups(recs, 2), coordinate=coordinate)


def test_queryname_sorted_input(tmp_path, picard, alnsort):
    """samtools sort -n output, header SO:queryname."""
    inp = tmp_path / "grouped.bam"
    g.write_bam(inp, stale_dups(g.t_adversarial(11), 3))
    byname = tmp_path / "byname.bam"
    pysam.sort("-n", "-o", str(byname), str(inp))
    picard_recs, (pmet, _) = run_picard(picard, byname, tmp_path, coordinate=False)
    out, met = tmp_path / "md.bam", tmp_path / "md.metrics"
    sort(alnsort, ["--markdup", "--metrics", str(met), "-o", str(out), str(byname)])
    assert flags_by_identity(read_all(out)) == flags_by_identity(picard_recs)
    assert g.parse_metrics(met)[0] == pmet


def big_input(tmp: Path, n: int = 30_000) -> Path:
    rng = random.Random(42)
    recs = []
    for i in range(n):
        a = rng.randrange(0, 6_000) * 3
        name = f"I{i}:1:FC:1:{rng.choice([1101, 1102])}:{rng.randrange(0, 3000)}:{rng.randrange(0, 3000)}"
        k = rng.random()
        if k < 0.8:
            recs += g.pair(name, a, a + rng.choice([200, 250, 300]), rev1=rng.random() < 0.5,
                           rev2=rng.random() < 0.5, q1=rng.choice([20, 30, 40]), rg=rng.choice(["rg1", "rg2"]))
        elif k < 0.9:
            recs += g.frag(name, a, rev=rng.random() < 0.5, q=rng.choice([20, 30]))
        else:
            recs += g.half_mapped(name, a)
    inp = tmp / "big.bam"
    # Stale 0x400 and DT tags: Picard clears both, so output that keeps
    # its records' lengths (no DT written) still drops the DT tags.
    g.write_bam(inp, stale_dt(stale_dups(recs, 4), 5))
    return inp


def test_threads_and_spills_give_the_same_bytes_and_picards_flags(tmp_path, picard, alnsort):
    """-@1, -@2, and -@2 with a 1M record buffer (many spilled runs), BAM
    with an index and SAM: the same bytes; the flags Picard's."""
    inp = big_input(tmp_path)
    picard_recs, (pmet, _) = run_picard(picard, inp, tmp_path, coordinate=False)
    outs = {}
    for name, extra in {"t1": ["-@1"], "t2": ["-@2"], "spill": ["-@2", "-m", "1M"]}.items():
        out, st = tmp_path / f"{name}.bam", tmp_path / f"{name}.json"
        sort(alnsort, [*extra, "--no-PG", "--markdup", "--write-index", "--stats-json", str(st), "-o", str(out), str(inp)])
        outs[name] = (out.read_bytes(), Path(str(out) + ".csi").read_bytes(), json.loads(st.read_text()))
    assert outs["spill"][2]["runs_written"] > 1, "the small buffer did not spill"
    # -m 1M also bounds the marker (-m times the threads, beside the sorter): its
    # read ends went to runs on disk, and the bytes are the same.
    assert outs["spill"][2]["markdup"]["spill_runs"] > 2, outs["spill"][2]["markdup"]
    assert outs["t1"][2]["markdup"]["spill_runs"] == outs["t2"][2]["markdup"]["spill_runs"] == 0
    assert outs["t1"][:2] == outs["t2"][:2] == outs["spill"][:2]
    assert flags_by_identity(read_all(tmp_path / "t1.bam")) == flags_by_identity(picard_recs)
    md = outs["t1"][2]["markdup"]
    (header, *rows) = pmet
    total = lambda col: sum(int(r[header.index(col)]) for r in rows)  # noqa: E731
    for key in ["unpaired_reads_examined", "read_pairs_examined", "secondary_or_supplementary_rds",
                "unmapped_reads", "unpaired_read_duplicates", "read_pair_duplicates",
                "read_pair_optical_duplicates"]:
        assert md[key] == total(key.upper()), key
    assert md["libraries"] == len(rows)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "stats-json.md").read_text()
    documented = set(re.findall(r"^\| `markdup\.([a-z_]+)` \| integer \|", doc, re.M))
    assert documented == set(md), "docs/stats-json.md and the markdup object differ"
    assert md["records_marked"] == sum(d for _, d in picard_recs) > 5000
    sam = sort(alnsort, ["-@2", "--markdup", "-O", "sam", str(inp)]).stdout
    body = [ln.split("\t") for ln in sam.splitlines() if not ln.startswith("@")]
    assert sum(int(f[1]) & 0x400 != 0 for f in body) == md["records_marked"]


def test_remove_duplicates(tmp_path, picard, alnsort):
    inp = tmp_path / "in.bam"
    g.write_bam(inp, g.t_random(1))
    picard_recs, _ = run_picard(picard, inp, tmp_path, coordinate=False)
    out = tmp_path / "rm.bam"
    sort(alnsort, ["--markdup", "--remove-duplicates", "-o", str(out), str(inp)])
    kept = collections.Counter(k for k, d in picard_recs if not d)
    assert collections.Counter(k for k, _ in read_all(out)) == kept
    assert not any(d for _, d in read_all(out))


def test_optical_distance(tmp_path, picard, alnsort):
    """A larger pixel distance finds more optical duplicates, as Picard's."""
    inp = tmp_path / "in.bam"
    g.write_bam(inp, g.t_random(5, one_rg=True, dense=True), rgs=[("rg1", "libA")])
    m = tmp_path / "p.metrics"
    p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={tmp_path / 'p.bam'}", f"M={m}",
                                 "ASSUME_SORT_ORDER=queryname", "OPTICAL_DUPLICATE_PIXEL_DISTANCE=2500",
                                 "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true", "VERBOSITY=ERROR"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    ours, default = tmp_path / "o.metrics", tmp_path / "d.metrics"
    sort(alnsort, ["--markdup", "--optical-distance", "2500", "--metrics", str(ours), "-o",
                   str(tmp_path / "o.bam"), str(inp)])
    sort(alnsort, ["--markdup", "--metrics", str(default), "-o", str(tmp_path / "d.bam"), str(inp)])
    assert g.parse_metrics(ours) == g.parse_metrics(m)
    col = g.parse_metrics(m)[0][0].index("READ_PAIR_OPTICAL_DUPLICATES")
    assert int(g.parse_metrics(ours)[0][1][col]) > int(g.parse_metrics(default)[0][1][col])


def test_scattered_templates_are_refused_and_leave_nothing(tmp_path, alnsort):
    recs = g.pair("a", 100, 300) + g.pair("b", 500, 700) + g.frag("c", 900)
    recs = [recs[0], recs[2], recs[3], recs[4], recs[1]]  # a's read2 after b and c
    inp = tmp_path / "scattered.bam"
    g.write_bam(inp, recs)
    out, met = tmp_path / "out.bam", tmp_path / "m.txt"
    p = sort(alnsort, ["--markdup", "--metrics", str(met), "--write-index", "-o", str(out), str(inp)],
             check=False)
    assert p.returncode == 1
    assert "record 5 (read a)" in p.stderr and "samtools collate" in p.stderr \
        and "alnsort sort -n" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["scattered.bam"]


def test_unsorted_input_claiming_coordinate_is_refused(tmp_path, alnsort):
    recs = g.pair("a", 900, 1000) + g.pair("b", 100, 300)
    inp = tmp_path / "in.sam"
    with open(inp, "w") as f:
        f.write("@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:100000\n")
        for r in recs:
            f.write(f"{r.name}\t{r.flag}\tchr1\t{r.pos + 1}\t60\t50M\t=\t{r.mpos + 1}\t0\t{'A' * 50}\t{'I' * 50}\n")
    p = sort(alnsort, ["--markdup", "-o", str(tmp_path / "o.bam"), str(inp)], check=False)
    assert p.returncode == 1 and "SO:coordinate" in p.stderr and "record 3 (read b" in p.stderr, p.stderr
    assert not (tmp_path / "o.bam").exists()


@pytest.mark.slow
def test_markdup_state_beyond_max_memory_spills(tmp_path, picard, alnsort):
    """--max-memory too small for the marker's read ends: they are sorted
    into runs in the temporary directory and merged back, and the output
    is byte for byte the in-memory run's (and its flags Picard's), for
    name-grouped and coordinate-sorted input, at -@1 and -@2; the
    temporary directory is left empty."""
    inp = big_input(tmp_path, 60_000)
    picard_recs, (pmet, _) = run_picard(picard, inp, tmp_path, coordinate=False)
    coord = tmp_path / "coord.bam"
    sort(alnsort, ["--no-PG", "-o", str(coord), str(inp)])
    picard_coord, (pmet_coord, _) = run_picard(picard, coord, tmp_path, coordinate=True)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    for src, want, want_met in [(inp, picard_recs, pmet), (coord, picard_coord, pmet_coord)]:
        runs = {}
        for name, extra in {"memory": ["-@2", "--max-memory", "2G"],
                            "spill1": ["-@1", "--max-memory", "24M"],
                            "spill2": ["-@2", "--max-memory", "24M"]}.items():
            out, st, met = (tmp_path / f"{src.stem}-{name}.{x}" for x in ("bam", "json", "metrics"))
            sort(alnsort, [*extra, "--no-PG", "--markdup", "--metrics", str(met), "-T", str(tmpdir / "x"),
                           "--stats-json", str(st), "-o", str(out), str(src)])
            runs[name] = (out.read_bytes(), json.loads(st.read_text())["markdup"], g.parse_metrics(met))
            assert list(tmpdir.iterdir()) == [], "temporary files left behind"
        assert runs["memory"][1]["spill_runs"] == 0
        assert runs["spill1"][1]["spill_runs"] > 2 and runs["spill2"][1]["spill_runs"] > 2, runs["spill2"][1]
        assert runs["memory"][0] == runs["spill1"][0] == runs["spill2"][0]
        assert runs["memory"][2] == runs["spill2"][2]
        assert runs["memory"][2][0] == want_met
        assert flags_by_identity(read_all(tmp_path / f"{src.stem}-spill2.bam")) == flags_by_identity(want)


def cross_reference_input(tmp: Path, n: int) -> Path:
    """Templates whose mates are mostly on other references: 45% from chr1
    to chr2, 45% from chr1 to chr3 (so while chr1 is read, about 90% of
    them wait), the rest pairs within one reference and fragments."""
    rng = random.Random(7)
    recs = []
    for i in range(n):
        name = f"W{i}:1:FC:1:{rng.choice([1101, 1102])}:{rng.randrange(0, 3000)}:{rng.randrange(0, 3000)}"
        a, b = rng.randrange(0, 300) * 7, rng.randrange(0, 30) * 11
        kw = dict(rev1=rng.random() < 0.5, rev2=rng.random() < 0.5, q1=rng.choice([20, 30, 40]),
                  rg=rng.choice(["rg1", "rg2"]))
        k = rng.random()
        if k < 0.45:
            recs += g.pair(name, a, b, ref=0, mref=1, **kw)
        elif k < 0.9:
            recs += g.pair(name, a, b, ref=0, mref=2, **kw)
        elif k < 0.95:
            recs += g.pair(name, a, a + 300, ref=rng.randrange(0, 3), **kw)
        else:
            recs += g.frag(name, a, ref=rng.randrange(0, 3), q=rng.choice([20, 30]))
    inp = tmp / "cross.bam"
    g.write_bam(inp, stale_dups(recs, 4))
    return inp


def test_waiting_mates_beyond_max_memory_spill_by_reference(tmp_path, picard, alnsort):
    """Coordinate-sorted input (@HD SO:coordinate) whose mates wait for
    their other half on later references: at --max-memory 30M (-@1) and
    32M (-@2) (which alnsort refused before these mates were spilled: about
    19,000 waiting mates left the read ends too little of the marker's
    part; -@1 leaves the marker more of the budget, and since the fragment
    ends of mapped mates are kept as 8-byte keys, it needs less) the mates
    waiting for a later reference go to spill files and come back when
    reading reaches it. Flags and metrics are Picard's, the bytes those of
    the unlimited run at -@1 and -@2, and the temporary directory is left
    empty. Too little memory for the mates waiting on the reference being
    read still stops the run with the clear error."""
    coord = tmp_path / "coord.bam"
    sort(alnsort, ["--no-PG", "-o", str(coord), str(cross_reference_input(tmp_path, 28_000))])
    with pysam.AlignmentFile(str(coord), "rb") as f:
        assert f.header.to_dict()["HD"]["SO"] == "coordinate"
    picard_recs, (pmet, _) = run_picard(picard, coord, tmp_path, coordinate=True)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    runs = {}
    for name, extra in {"memory": ["-@2", "--max-memory", "2G"],
                        "spill1": ["-@1", "--max-memory", "30M"],
                        "spill2": ["-@2", "--max-memory", "32M"]}.items():
        out, st, met = (tmp_path / f"{name}.{x}" for x in ("bam", "json", "metrics"))
        sort(alnsort, [*extra, "--no-PG", "--markdup", "--metrics", str(met), "-T", str(tmpdir / "x"),
                       "--stats-json", str(st), "-o", str(out), str(coord)])
        runs[name] = (out.read_bytes(), json.loads(st.read_text())["markdup"], g.parse_metrics(met))
        assert list(tmpdir.iterdir()) == [], "temporary files left behind"
    assert runs["memory"][1]["waiting_spilled"] == 0
    assert runs["spill1"][1]["waiting_spilled"] > 10_000, runs["spill1"][1]
    assert runs["spill2"][1]["waiting_spilled"] > 10_000, runs["spill2"][1]
    assert runs["memory"][0] == runs["spill1"][0] == runs["spill2"][0]
    assert runs["memory"][2] == runs["spill1"][2] == runs["spill2"][2]
    assert runs["memory"][2][0] == pmet
    assert runs["memory"][1]["read_pair_duplicates"] > 100, runs["memory"][1]
    assert flags_by_identity(read_all(tmp_path / "spill2.bam")) == flags_by_identity(picard_recs)
    # At 16M the ~12,700 mates of chr1 waiting for chr2 (read back when
    # chr2 is reached) are too many: the clear error, and no files left.
    out = tmp_path / "small.bam"
    p = sort(alnsort, ["-@2", "--max-memory", "16M", "--no-PG", "--markdup", "-T", str(tmpdir / "x"),
                       "-o", str(out), str(coord)], check=False)
    assert p.returncode == 1 and "mates wait for their other half" in p.stderr, p.stderr
    assert "--max-memory" in p.stderr and not out.exists()
    assert list(tmpdir.iterdir()) == [], "temporary files left behind"


def test_refused_options(tmp_path, alnsort):
    inp = tmp_path / "in.bam"
    g.write_bam(inp, g.t_qc_fail())
    for args, words in [
        (["--metrics", "m.txt"], "needs --markdup"),
        (["--markdup", "--duplicate-scoring", "random"], "random is not supported"),
        (["--markdup", "--tagging-policy", "every"], "expected none, optical or all"),
        (["--markdup", "--optical-distance", "-3"], "must be 0 or more"),
        (["--markdup", "--metrics", str(tmp_path / "o.bam")], "names the same file as the output"),
    ]:
        p = sort(alnsort, [*args, "-o", str(tmp_path / "o.bam"), str(inp)], check=False)
        assert p.returncode == 1 and words in p.stderr, (args, p.stderr)
        assert not (tmp_path / "o.bam").exists()


def test_sam_input_and_output(tmp_path, picard, alnsort):
    """SAM text in (name-grouped), SAM out: Picard's flags."""
    bam = tmp_path / "in.bam"
    g.write_bam(bam, stale_dups(g.t_random(2), 5))
    picard_recs, _ = run_picard(picard, bam, tmp_path, coordinate=False)
    sam = tmp_path / "in.sam"
    pysam.view("-h", "-o", str(sam), str(bam), catch_stdout=False)
    out = tmp_path / "out.sam"
    sort(alnsort, ["-n", "--markdup", "-O", "sam", "-o", str(out), str(sam)])
    with pysam.AlignmentFile(str(out), "r", check_sq=False) as f:
        ours = [(identity(r), bool(r.flag & 0x400)) for r in f.fetch(until_eof=True)]
    assert flags_by_identity(ours) == flags_by_identity(picard_recs)
    assert sum(d for _, d in ours) > 20


def test_total_mapped_reference_length_scoring(tmp_path, picard, alnsort):
    """--duplicate-scoring total-mapped-reference-length keeps the duplicate
    Picard keeps with DUPLICATE_SCORING_STRATEGY=TOTAL_MAPPED_REFERENCE_LENGTH
    (clips and deletions change the reference length; QC-failed reads)."""
    rng = random.Random(21)
    recs = []
    for t in range(400):
        a, b = rng.choice([1000, 1040]), rng.choice([1300, 1340])
        tpl = g.pair(f"L{t}", a, b, cig1=rng.choice(["50M", "10M5D40M", "5S45M", "40M10S", "20M3I27M"]),
                     cig2=rng.choice(["50M", "25M8D25M", "45M5S"]), q1=rng.choice([20, 30, 40]),
                     rev1=rng.random() < 0.3, rev2=rng.random() < 0.8)
        if rng.random() < 0.1:
            tpl[0].flag |= 0x200
        recs += tpl
        if rng.random() < 0.2:
            recs += g.frag(f"F{t}", a, cig=rng.choice(["50M", "10M5D40M"]), q=rng.choice([20, 40]))
    inp = tmp_path / "in.bam"
    g.write_bam(inp, recs)
    out, m = tmp_path / "p.bam", tmp_path / "p.metrics"
    p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={out}", f"M={m}", "ASSUME_SORT_ORDER=queryname",
                                 "DUPLICATE_SCORING_STRATEGY=TOTAL_MAPPED_REFERENCE_LENGTH",
                                 "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true",
                                 "VERBOSITY=ERROR"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    want = flags_by_identity(read_all(out))
    ours, default = tmp_path / "o.bam", tmp_path / "d.bam"
    sort(alnsort, ["--markdup", "--duplicate-scoring", "total-mapped-reference-length", "-o", str(ours), str(inp)])
    sort(alnsort, ["--markdup", "-o", str(default), str(inp)])
    assert flags_by_identity(read_all(ours)) == want
    # The strategy matters on this input: the default keeps other reads.
    assert flags_by_identity(read_all(default)) != want


def read_tagged(path: Path):
    """(fields but 0x400 and DT, in their aux order; 0x400; DT value) of
    every record, in file order."""
    out = []
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        for r in f.fetch(until_eof=True):
            tags = r.get_tags()
            dt = [v for t, v in tags if t == "DT"]
            key = (r.query_name, r.flag & ~0x400, r.reference_id, r.reference_start, r.cigarstring,
                   r.next_reference_id, r.next_reference_start, r.query_sequence,
                   tuple(r.query_qualities or ()))
            out.append((key, tuple((t, v) for t, v in tags if t != "DT"), bool(r.flag & 0x400),
                        dt[0] if dt else None, [t for t, _ in tags]))
    return out


def by_key(recs, ordered=True):
    """Records matched by their fields and tags; with `ordered`, the aux
    order (DT's place included) is compared too."""
    d = collections.defaultdict(list)
    for key, tags, dup, dt, order in recs:
        if ordered:
            d[(key, tags)].append((dup, dt, tuple(order)))
        else:
            d[(key, tuple(sorted(tags)))].append((dup, dt))
    return {k: sorted(v, key=repr) for k, v in d.items()}


def stale_dt(recs, seed):
    """A DT tag (Picard drops every DT of its input: CLEAR_DT) between two
    other tags on about a quarter of the records."""
    rng = random.Random(seed)
    for r in recs:
        r.tags = [("XA", "x"), *r.tags]
        if rng.random() < 0.25:
            r.tags = [("XA", "x"), ("DT", rng.choice(["SQ", "LB"])), *r.tags[1:]]
    return recs


# Picard's options and ours, one Picard run each.
POLICIES = {
    "none": ([], []),
    "all": (["TAGGING_POLICY=All"], ["--tagging-policy", "all"]),
    "optical-remove-sequencing": (["TAGGING_POLICY=OpticalOnly", "REMOVE_SEQUENCING_DUPLICATES=true"],
                                  ["--tagging-policy", "optical", "--remove-sequencing-duplicates"]),
}


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_tagging_policy_and_sequencing_duplicates(coordinate, tmp_path, picard, alnsort, long_refs):
    """--tagging-policy none/all/optical and --remove-sequencing-duplicates
    against Picard's TAGGING_POLICY and REMOVE_SEQUENCING_DUPLICATES: every
    record's 0x400 and DT:Z value, where DT sits among the aux fields, which
    records are left out, the metrics; input DT tags are dropped."""
    recs = []
    for n, name in enumerate(["optical", "secondary_and_supplementary", "one_mate_unmapped", "large_sets"]):
        recs += moved(g.TRAPS[name](), n)
    recs += moved(g.t_random(5, one_rg=True, dense=True), 4) + moved(g.t_random(6, dense=True), 5)
    inp = tmp_path / "in.bam"
    recs = with_mate_cigars(stale_dt(stale_dups(recs, 7), 8))
    for r in recs:  # RG, then ZX (whose htsjdk key is above DT's) last
        r.tags, r.rg = list(r.tags) + ([("RG", r.rg)] if r.rg else []) + [("ZX", "z")], None
    g.write_bam(inp, recs)
    if coordinate:
        pysam.sort("-o", str(tmp_path / "in.sorted.bam"), str(inp))
        inp = tmp_path / "in.sorted.bam"
    seen = {}
    for policy, (popts, ours) in POLICIES.items():
        out, m = tmp_path / f"p.{policy}.bam", tmp_path / f"p.{policy}.metrics"
        p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={out}", f"M={m}", *popts,
                                     *([] if coordinate else ["ASSUME_SORT_ORDER=queryname"]),
                                     "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true",
                                     "VERBOSITY=ERROR"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        want = read_tagged(out)
        seen[policy] = collections.Counter(dt for *_, dt, _ in want)
        for order in ["coordinate", "name"]:
            o, om = tmp_path / f"o.{policy}.{order}.bam", tmp_path / f"o.{policy}.{order}.metrics"
            sort(alnsort, [*ORDERS[order], "--markdup", *ours, "--metrics", str(om), "-o", str(o), str(inp)])
            got = read_tagged(o)
            assert len(got) == len(want), f"{policy} {order}: {len(got)} records, Picard wrote {len(want)}"
            w, h = by_key(want), by_key(got)
            assert w.keys() == h.keys(), f"{policy} {order}: the records differ from Picard's"
            diffs = [(k[0][:4], w[k], h[k]) for k in w if w[k] != h[k]]
            assert not diffs, f"{policy} {order}: 0x400/DT/aux order differ on {len(diffs)} records " \
                              f"(picard, ours):\n" + "\n".join(map(str, diffs[:20]))
            assert g.parse_metrics(om) == g.parse_metrics(m), f"{policy} {order}: metrics differ"
    # The cases prove something: stale DT tags dropped, both tags written,
    # optical duplicates found and left out.
    assert set(seen["none"]) == {None}
    assert seen["all"]["SQ"] > 10 and seen["all"]["LB"] > 50
    assert seen["optical-remove-sequencing"]["SQ"] == 0 and set(seen["optical-remove-sequencing"]) == {None}
    assert sum(seen["optical-remove-sequencing"].values()) == sum(seen["all"].values()) - seen["all"]["SQ"]


REGEXES = {
    "classic": r"[a-zA-Z0-9]+:[0-9]:([0-9]+):([0-9]+):([0-9]+).*",
    "null": "null",
    "last-three": r"(?:.*:)?([0-9]+):([-0-9]+):(\d+)",
}


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_read_name_regex(coordinate, tmp_path, picard, alnsort, long_refs):
    """--read-name-regex against Picard's READ_NAME_REGEX (a classic
    Illumina regex, `null`, a regex taking the last three fields of any
    name): flags, DT tags (TAGGING_POLICY=All), metrics and histograms."""
    recs = []
    for n, name in enumerate(["optical", "names_that_do_not_parse", "large_sets"]):
        recs += moved(g.TRAPS[name](), n)
    recs += moved(g.t_random(5, one_rg=True, dense=True), 3)
    # Names the default parsing refuses (8 fields, a negative x) that the
    # regexes read, and names with classic Illumina fields.
    for t in range(60):
        name = f"E{t}:9:FC:1:2:{1101 + t % 2}:{1000 + 7 * t % 300}:{1000 + 13 * t % 300}"
        recs += g.pair(name, 1_000_000 + 40 * (t % 3), 1_000_300, q1=20 + t % 3, rg="rg1")
        recs += g.pair(f"H{t}:{t % 8}:{1101 + t % 2}:{-5 * t}:{100 + t}", 1_100_000, 1_100_300, q1=30, rg="rg1")
    inp = tmp_path / "in.bam"
    g.write_bam(inp, with_mate_cigars(recs), rgs=[("rg1", "libA"), ("rg2", "libB"), ("rg3", None)])
    if coordinate:
        pysam.sort("-o", str(tmp_path / "in.sorted.bam"), str(inp))
        inp = tmp_path / "in.sorted.bam"
    optical = {}
    for label, regex in REGEXES.items():
        out, m = tmp_path / f"p.{label}.bam", tmp_path / f"p.{label}.metrics"
        p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={out}", f"M={m}", f"READ_NAME_REGEX={regex}",
                                     "TAGGING_POLICY=All", *([] if coordinate else ["ASSUME_SORT_ORDER=queryname"]),
                                     "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true",
                                     "VERBOSITY=ERROR"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        o, om = tmp_path / f"o.{label}.bam", tmp_path / f"o.{label}.metrics"
        sort(alnsort, ["--markdup", "--read-name-regex", regex, "--tagging-policy", "all", "--metrics", str(om),
                       "-o", str(o), str(inp)])
        w, h = by_key(read_tagged(out)), by_key(read_tagged(o))
        assert w.keys() == h.keys(), f"{label}: the records differ from Picard's"
        diffs = [(k[0][:4], w[k], h[k]) for k in w if w[k] != h[k]]
        assert not diffs, f"{label}: 0x400/DT differ on {len(diffs)} records (picard, ours):\n" + \
                          "\n".join(map(str, diffs[:20]))
        assert g.parse_metrics(om) == g.parse_metrics(m), f"{label}: metrics differ"
        optical[label] = sum(dt == "SQ" for *_, dt, _ in read_tagged(out))
    # The regexes matter: null finds none, the others differ from each other.
    assert optical["null"] == 0 and optical["classic"] > 5 and optical["last-three"] > optical["classic"]


def test_java_only_read_name_regex_is_refused(tmp_path, alnsort):
    inp = tmp_path / "in.bam"
    g.write_bam(inp, g.t_qc_fail())
    for regex, words in [
        (r"(?<=x)([0-9]+):([0-9]+):([0-9]+)", "a lookbehind '(?<='"),
        (r"([0-9]++):([0-9]+):([0-9]+)", "a possessive quantifier '++'"),
        (r"(\d+):(\d+):\1", "a backreference"),
        (r"\p{javaDigit}+:(\d+):(\d+):(\d+)", "a character property"),
        (r"(?U)(\d+):(\d+):(\d+)", "an inline flag"),
        (r"(\d+):(\d+)", "has 2 capturing group(s)"),
        (r"(\d+:(\d+):(\d+)", "does not compile"),
    ]:
        p = sort(alnsort, ["--markdup", "--read-name-regex", regex, "-o", str(tmp_path / "o.bam"), str(inp)],
                 check=False)
        assert p.returncode == 1 and "--read-name-regex" in p.stderr and words in p.stderr, (regex, p.stderr)
        assert not (tmp_path / "o.bam").exists()


def with_barcodes(recs, seed):
    """ZU UMIs (mostly one per template, sometimes per record, sometimes
    none) and B1/B2 read barcodes on a few values, so that duplicate sets
    split by them."""
    rng = random.Random(seed)
    per_name = {}
    for r in recs:
        umi = per_name.setdefault(r.name, rng.choice(["AACG", "AACG", "GGTN", "ac-gt", None]))
        if rng.random() < 0.1:
            umi = rng.choice(["AACG", "TTTT"])
        tags = []
        if umi is not None:
            tags.append(("ZU", umi))
        if rng.random() < 0.8:
            tags.append(("B1" if r.flag & 0x80 == 0 else "B2", rng.choice(["CCA", "CCA", "GTA"])))
        r.tags = tags + list(r.tags)
    return recs


BARCODE_RUNS = {
    "umi": (["BARCODE_TAG=ZU"], ["--barcode-tag", "ZU"]),
    "umi-and-reads": (["BARCODE_TAG=ZU", "READ_ONE_BARCODE_TAG=B1", "READ_TWO_BARCODE_TAG=B2"],
                      ["--barcode-tag", "ZU", "--read-one-barcode-tag", "B1", "--read-two-barcode-tag", "B2"]),
    "reads": (["READ_ONE_BARCODE_TAG=B1", "READ_TWO_BARCODE_TAG=B2"],
              ["--read-one-barcode-tag", "B1", "--read-two-barcode-tag", "B2"]),
}


@pytest.mark.parametrize("coordinate", [False, True], ids=["name-grouped", "coordinate-sorted"])
def test_barcode_tags(coordinate, tmp_path, picard, alnsort, long_refs):
    """--barcode-tag and --read-one/--read-two-barcode-tag against Picard's
    BARCODE_TAG, READ_ONE_BARCODE_TAG and READ_TWO_BARCODE_TAG: flags, DT
    tags (TAGGING_POLICY=All) and metrics."""
    recs = moved(g.t_random(7, one_rg=True, dense=True), 0) + moved(g.t_random(8, dense=True), 1) \
        + moved(g.TRAPS["secondary_and_supplementary"](), 2) + moved(g.TRAPS["large_sets"](), 3)
    inp = tmp_path / "in.bam"
    g.write_bam(inp, with_mate_cigars(with_barcodes(recs, 9)))
    if coordinate:
        pysam.sort("-o", str(tmp_path / "in.sorted.bam"), str(inp))
        inp = tmp_path / "in.sorted.bam"
    marked = {}
    for label, (popts, ours) in {"none": ([], []), **BARCODE_RUNS}.items():
        out, m = tmp_path / f"p.{label}.bam", tmp_path / f"p.{label}.metrics"
        p = subprocess.run(picard + ["MarkDuplicates", f"I={inp}", f"O={out}", f"M={m}", *popts, "TAGGING_POLICY=All",
                                     *([] if coordinate else ["ASSUME_SORT_ORDER=queryname"]),
                                     "ADD_PG_TAG_TO_READS=false", "VALIDATION_STRINGENCY=SILENT", "QUIET=true",
                                     "VERBOSITY=ERROR"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        o, om = tmp_path / f"o.{label}.bam", tmp_path / f"o.{label}.metrics"
        sort(alnsort, ["--markdup", *ours, "--tagging-policy", "all", "--metrics", str(om), "-o", str(o), str(inp)])
        # Aux order not compared: Picard (htsjdk) reorders the tags of
        # every record it decodes, which alnsort does not reproduce.
        w, h = by_key(read_tagged(out), ordered=False), by_key(read_tagged(o), ordered=False)
        assert w.keys() == h.keys(), f"{label}: the records differ from Picard's"
        diffs = [(k[0][:4], w[k], h[k]) for k in w if w[k] != h[k]]
        assert not diffs, f"{label}: 0x400/DT differ on {len(diffs)} records (picard, ours):\n" + \
                          "\n".join(map(str, diffs[:20]))
        assert g.parse_metrics(om) == g.parse_metrics(m), f"{label}: metrics differ"
        marked[label] = sum(dup for _, _, dup, _, _ in read_tagged(out))
    # Barcodes split sets: fewer duplicates with each, fewest with all.
    assert marked["none"] > marked["umi"] > marked["umi-and-reads"] > 20
    assert marked["none"] > marked["reads"] > marked["umi-and-reads"]


def test_bad_barcodes_are_refused(tmp_path, alnsort):
    for tags, words in [([("RX", "ACGX")], "has characters other than ATCGNatcgn-"),
                        ([("RX", 7)], "RX tag has type")]:
        recs = g.pair("a", 100, 300) + g.pair("b", 100, 300)
        recs[2].tags = tags
        inp = tmp_path / "in.bam"
        g.write_bam(inp, recs)
        out = tmp_path / "o.bam"
        p = sort(alnsort, ["--markdup", "--barcode-tag", "RX", "-o", str(out), str(inp)], check=False)
        assert p.returncode == 1 and words in p.stderr and "record 3 (read b)" in p.stderr, p.stderr
        assert not out.exists()
