"""Duplicate flags and metrics of the markdup core (through its example
driver) against Picard MarkDuplicates 3.4.0 with ASSUME_SORT_ORDER=queryname,
record by record, on small name-grouped inputs that each aim at one trap.
"""

from __future__ import annotations

import random
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pysam
import pytest

REFS = [("chr1", 100_000), ("chr2", 100_000), ("chr3", 100_000)]
RGS = [("rg1", "libA"), ("rg2", "libB"), ("rg3", None)]


@dataclass
class Rec:
    name: str
    flag: int
    ref: int = -1
    pos: int = -1  # 0-based
    cigar: str = "50M"
    mref: int = -1
    mpos: int = -1
    qual: int = 30  # every base gets this quality
    rg: str | None = "rg1"
    tags: list = field(default_factory=list)


def cigar_qlen(cigar: str) -> int:
    return sum(int(n) for n, op in re.findall(r"(\d+)([MIDNSHP=X])", cigar) if op in "MIS=X")


def pair(name, pos1, pos2, *, ref=0, mref=None, rev1=False, rev2=True, q1=30, q2=30,
         cig1="50M", cig2="50M", rg="rg1", r1_first=True):
    """A template of two mapped mates; read1 at pos1, read2 at pos2."""
    mref = ref if mref is None else mref
    f1 = 0x1 | 0x40 | (0x10 if rev1 else 0) | (0x20 if rev2 else 0)
    f2 = 0x1 | 0x80 | (0x10 if rev2 else 0) | (0x20 if rev1 else 0)
    a = Rec(name, f1, ref, pos1, cig1, mref, pos2, q1, rg)
    b = Rec(name, f2, mref, pos2, cig2, ref, pos1, q2, rg)
    return [a, b] if r1_first else [b, a]


def frag(name, pos, *, ref=0, rev=False, q=30, cig="50M", rg="rg1"):
    return [Rec(name, 0x10 if rev else 0, ref, pos, cig, -1, -1, q, rg)]


def half_mapped(name, pos, *, ref=0, rev=False, q=30, cig="50M", rg="rg1"):
    """Read1 mapped, read2 unmapped (placed at its mate, as aligners do)."""
    a = Rec(name, 0x1 | 0x40 | 0x8 | (0x10 if rev else 0), ref, pos, cig, ref, pos, q, rg)
    b = Rec(name, 0x1 | 0x80 | 0x4 | (0x20 if rev else 0), ref, pos, "*", ref, pos, q, rg)
    return [a, b]


def write_bam(path: Path, recs: list[Rec], rgs=RGS) -> None:
    header = {
        "HD": {"VN": "1.6", "SO": "unsorted", "GO": "query"},
        "SQ": [{"SN": n, "LN": ln} for n, ln in REFS],
        "RG": [dict({"ID": i, "SM": "s"}, **({"LB": lb} if lb else {})) for i, lb in rgs],
    }
    with pysam.AlignmentFile(str(path), "wb", header=header) as out:
        for r in recs:
            a = pysam.AlignedSegment(out.header)
            a.query_name = r.name
            a.flag = r.flag
            a.reference_id = r.ref
            a.reference_start = r.pos
            unmapped = r.flag & 0x4
            a.mapping_quality = 0 if unmapped else 60
            qlen = 50 if r.cigar == "*" else cigar_qlen(r.cigar)
            if r.cigar != "*" and not unmapped:
                a.cigarstring = r.cigar
            a.query_sequence = "ACGT" * (qlen // 4) + "ACGT"[: qlen % 4]
            a.query_qualities = pysam.qualitystring_to_array(chr(33 + r.qual) * qlen)
            a.next_reference_id = r.mref
            a.next_reference_start = r.mpos
            tags = list(r.tags)
            if r.rg is not None:
                tags.append(("RG", r.rg))
            a.set_tags(tags)
            out.write(a)


def parse_metrics(path: Path):
    """(metrics rows, histogram rows) of a Picard metrics file, as strings."""
    lines = path.read_text().split("\n")
    metrics, hist = [], []
    i = 0
    while i < len(lines):
        if lines[i].startswith("## METRICS CLASS"):
            i += 1
            while i < len(lines) and lines[i].strip():
                metrics.append(lines[i].split("\t"))
                i += 1
        elif lines[i].startswith("## HISTOGRAM"):
            hist.append(lines[i])
            i += 1
            while i < len(lines) and lines[i].strip():
                hist.append(lines[i].split("\t"))
                i += 1
        else:
            i += 1
    return metrics, hist


def run_both(tmp_path: Path, picard, driver, recs: list[Rec], rgs=RGS, coordinate=False, name_sort=False):
    """Runs Picard and the driver on `recs` (name-grouped; with
    `name_sort`, queryname-sorted by `samtools sort -n` first; with
    `coordinate`, coordinate-sorted and given to Picard as the header's
    SO:coordinate) and asserts the same flags and metrics."""
    inp = tmp_path / "in.bam"
    write_bam(inp, recs, rgs)
    order_args, driver_args = ["ASSUME_SORT_ORDER=queryname"], []
    if name_sort:
        sorted_bam = tmp_path / "in.byname.bam"
        pysam.sort("-n", "-o", str(sorted_bam), str(inp))
        inp = sorted_bam
        with pysam.AlignmentFile(str(inp), "rb") as f:
            assert f.header["HD"]["SO"] == "queryname"
            recs = [Rec(r.query_name, r.flag) for r in f]
    if coordinate:
        sorted_bam = tmp_path / "in.sorted.bam"
        pysam.sort("-o", str(sorted_bam), str(inp))
        inp, order_args, driver_args = sorted_bam, [], ["--coordinate"]
        with pysam.AlignmentFile(str(inp), "rb") as f:
            assert f.header["HD"]["SO"] == "coordinate"
            recs = [Rec(r.query_name, r.flag) for r in f]
    out, pm = tmp_path / "picard.bam", tmp_path / "picard.metrics"
    p = subprocess.run(
        picard + ["MarkDuplicates", f"I={inp}", f"O={out}", f"M={pm}", *order_args,
                  "VALIDATION_STRINGENCY=SILENT", "QUIET=true", "VERBOSITY=ERROR"],
        capture_output=True, text=True,
    )
    assert p.returncode == 0, f"Picard failed:\n{p.stderr[-3000:]}"
    with pysam.AlignmentFile(str(out), "rb", check_sq=False) as f:
        picard_flags = [(r.query_name, bool(r.flag & 0x400)) for r in f]
    dm = tmp_path / "driver.metrics"
    d = subprocess.run([driver, *driver_args, str(inp), str(dm)], capture_output=True, text=True)
    assert d.returncode == 0, f"driver failed:\n{d.stderr}"
    ours = [line.split("\t") for line in d.stdout.splitlines()]
    assert [int(i) for i, _ in ours] == list(range(len(recs)))
    assert len(picard_flags) == len(recs)
    diffs = [
        (i, recs[i].name, recs[i].flag, pf, o == "1")
        for i, ((_, pf), (_, o)) in enumerate(zip(picard_flags, ours))
        if pf != (o == "1")
    ]
    assert not diffs, "duplicate flag differs (index, name, flag, picard, ours):\n" + "\n".join(map(str, diffs))
    pmet, phist = parse_metrics(pm)
    omet, ohist = parse_metrics(dm)
    assert omet == pmet, f"metrics differ:\npicard {pmet}\nours   {omet}"
    assert ohist == phist, f"histograms differ:\npicard {phist}\nours   {ohist}"
    return [pf for _, pf in picard_flags], pmet


# --- traps ------------------------------------------------------------------


def t_pairs_best_score():
    return (pair("p1", 1000, 1200, q1=20, q2=20) + pair("p2", 1000, 1200, q1=40, q2=40)
            + pair("p3", 1000, 1200, q1=30, q2=30) + pair("p4", 1000, 1201))


def t_equal_scores():
    # Equal scores: the first in Picard's order (tile/x/y, then file order).
    return (pair("q1", 500, 700) + pair("q2", 500, 700) + pair("q3", 500, 700)
            + pair("M:1:1102:10:10", 2000, 2300) + pair("M:1:1101:5000:5000", 2000, 2300))


def t_pair_and_fragment_same_end():
    return (frag("f0", 3000, q=40) + pair("p", 3000, 3300, q1=2, q2=2) + frag("f1", 3000)
            + frag("g1", 5000, q=10) + frag("g2", 5000, q=35) + frag("g3", 5000, q=35)
            + frag("g4", 5000, rev=True))


def t_clips_move_the_five_prime_end():
    # 5S45M at 1005 starts (unclipped) at 1000; 3H47M at 1003 too.
    # Reverse mates: 45M5S at 1150 ends at 1199+5; 50M at 1155 ends at 1204.
    return (pair("c1", 1000, 1155, q1=20)
            + pair("c2", 1005, 1150, cig1="5S45M", cig2="45M5S", q1=40)
            + pair("c3", 1003, 1155, cig1="3H47M")
            + pair("c4", 1000, 1153, cig2="2S48M")  # the 2S is at the 3' end of a reverse read
            + frag("cf1", 2000, rev=True, cig="40M10S") + frag("cf2", 2010, rev=True, cig="30M10D10M", q=40))


def t_orientations_and_mate_order():
    return (pair("o1", 100, 400) + pair("o2", 100, 400, r1_first=False, q1=40)
            + pair("o3", 100, 400, rev1=True, rev2=False)  # RF at the same ends
            + pair("o4", 400, 100, rev1=True, rev2=False, q2=39)  # read1 is the later one
            + pair("o5", 600, 600, rev1=False, rev2=True) + pair("o6", 600, 600, rev1=True, rev2=False)
            + pair("o7", 800, 900, rev1=False, rev2=False) + pair("o8", 800, 900, rev1=True, rev2=True)
            + pair("o9", 900, 800, rev1=False, rev2=False))


def t_mates_on_different_references():
    bad = pair("d4", 100, 500, ref=0, mref=1, q1=45)
    bad[0].mref = 2  # read1 says its mate is on chr3: Picard never pairs them
    return (pair("d1", 100, 500, ref=0, mref=1) + pair("d2", 500, 100, ref=1, mref=0, rev1=True, rev2=False, q1=40)
            + pair("d3", 100, 500, ref=0, mref=2) + bad)


def t_one_mate_unmapped():
    both_unmapped = [Rec("u", 0x1 | 0x40 | 0x4 | 0x8, -1, -1, "*", -1, -1),
                     Rec("u", 0x1 | 0x80 | 0x4 | 0x8, -1, -1, "*", -1, -1)]
    return (half_mapped("h1", 7000, q=20) + half_mapped("h2", 7000, q=40) + frag("h3", 7000)
            + pair("h4", 8000, 8400, q1=2, q2=2) + half_mapped("h5", 8000, q=40) + both_unmapped)


def t_secondary_and_supplementary():
    p2 = pair("s2", 4000, 4300, q1=10, q2=10)
    sup = Rec("s2", 0x1 | 0x40 | 0x800 | 0x20, 1, 9000, "20S30M", 0, 4300, 10)
    sec = Rec("s2", 0x1 | 0x80 | 0x100 | 0x10 | 0x20, 2, 10, "50M", 0, 4000, 10)
    p3 = pair("s3", 4000, 4300, q1=40, q2=40)
    sec3 = Rec("s3", 0x1 | 0x40 | 0x100, 1, 77, "50M", 0, 4300)
    return [p2[0], sup, p2[1], sec] + p3 + [sec3] + frag("s4", 4000, q=50)


def t_two_libraries():
    return (pair("l1", 100, 300, rg="rg1") + pair("l2", 100, 300, rg="rg2") + pair("l3", 100, 300, rg="rg1", q1=40)
            + pair("l4", 100, 300, rg="rg3") + pair("l5", 100, 300, rg="rg3", q2=35)
            + frag("l6", 100, rg="rg2", q=40))


def t_large_sets():
    recs = []
    for i in range(7):
        recs += pair(f"big{i}", 10_000, 10_250, q1=20 + (i * 7) % 5)
    for i in range(4):
        recs += frag(f"bf{i}", 12_000, q=30)
    return recs


def t_optical():
    recs = []
    # Two within 100 pixels on one tile, one far, one on another tile.
    for n, q in [("A:1:FC:1:1101:1000:1000", 40), ("A:1:FC:1:1101:1050:1090", 30),
                 ("A:1:FC:1:1101:3000:1000", 30), ("A:1:FC:1:1102:1000:1000", 30)]:
        recs += pair(n, 20_000, 20_300, q1=q)
    # Across the 16-bit wrap: x=65546 is 10 in 16 bits, near x=60.
    recs += pair("M:7:1101:60:500", 21_000, 21_300, q1=40) + pair("M:7:1101:65546:520", 21_000, 21_300)
    # y wraps too; tile 65535 is -1 (no location) in 16 bits.
    recs += pair("M:7:1101:700:65636", 22_000, 22_300, q1=40) + pair("M:7:1101:650:150", 22_000, 22_300)
    recs += pair("M:7:65535:1:1", 23_000, 23_300, q1=40) + pair("M:7:65535:2:2", 23_000, 23_300)
    # A chain of five (graph clustering) with the keeper in the middle.
    for i, x in enumerate([100, 190, 280, 370, 460]):
        recs += pair(f"M:7:1201:{x}:100", 24_000, 24_300, q1=40 if i == 2 else 30)
    # FR and RF (by read1's strand) in one set: split for optical counting.
    recs += pair("M:7:1301:100:100", 25_000, 25_300, q1=40)
    recs += pair("M:7:1301:110:110", 25_300, 25_000, rev1=True, rev2=False)
    recs += pair("M:7:1301:120:120", 25_000, 25_300)
    return recs


def t_names_that_do_not_parse():
    recs = []
    for n in ["A:B:C:1101:100:100", "A:B:C:1101:150:150", "x:y:1101:1z:100", "noname"]:
        recs += pair(n, 30_000, 30_200)
    for n in ["A:1:1101:100:100x", "A:1:1101:150:150/1", ":1:1101:120:120", "A:1:1101:-20:100"]:
        recs += pair(n, 31_000, 31_200)
    return recs


def t_qc_fail():
    p = pair("qc1", 600, 900, q1=40, q2=40)
    p[0].flag |= 0x200
    return p + pair("qc2", 600, 900, q1=5, q2=5)


def t_repeated_index():
    # Two same-name primary single-end records that are both duplicates.
    return (frag("best", 100, q=40) + frag("dd", 100) + frag("dd", 100) + frag("e", 100)
            + frag("f", 100) + frag("g", 300))


def t_random(seed: int, *, one_rg=False, dense=False):
    """Random templates over a few shared 5' ends: pairs (some with a
    supplementary record, mates on another reference, either mate first),
    fragments and half-mapped templates; names with 5, 6 or 7 fields (or
    none), coordinates spread over the 16-bit wrap or dense on one tile."""
    rng = random.Random(seed)
    recs = []
    starts = [1000 + 37 * i for i in range(4 if dense else 8)]
    for t in range(300):
        if dense:
            x, y = 1000 + rng.randrange(400), 1000 + rng.randrange(400)
        else:
            x, y = rng.randrange(1, 70_000), rng.randrange(1, 70_000)
        tile = rng.choice([1101, 1102])
        fields = rng.choice([5, 7, 7, 7, 6])
        name = ":".join([f"I{t}"] + ["I"] * (fields - 4) + [str(tile), str(x), str(y)])
        if rng.random() < 0.05:
            name = f"r{t}"
        rg = "rg1" if one_rg else rng.choice(["rg1", "rg1", "rg1", "rg2", "rg3"])
        clip = rng.choice(["50M", "5S45M", "45M5S", "2H48M", "10M2D40M", "3S40M7S"])
        a, b = rng.choice(starts), rng.choice(starts) + 300
        q1, q2 = rng.choice([20, 30, 30, 40]), rng.choice([20, 30, 40])
        kind = rng.random()
        if kind < 0.6:
            tpl = pair(name, a, b, rev1=rng.random() < 0.3, rev2=rng.random() < 0.8, q1=q1, q2=q2,
                       cig1=clip, cig2=rng.choice(["50M", "45M5S"]), rg=rg, r1_first=rng.random() < 0.7,
                       mref=rng.choice([0, 0, 0, 1]))
            if rng.random() < 0.1:
                first = tpl[0]
                tpl.insert(1, Rec(name, 0x1 | 0x800 | (first.flag & 0xf0), 2, a, "30M20S",
                                  first.mref, first.mpos, rg=rg))
        elif kind < 0.8:
            tpl = frag(name, a, rev=rng.random() < 0.5, q=q1, cig=clip, rg=rg)
        else:
            tpl = half_mapped(name, a, rev=rng.random() < 0.5, q=q1, cig=clip, rg=rg)
        recs += tpl
    return recs


TRAPS = {
    "pairs_best_score": t_pairs_best_score,
    "equal_scores": t_equal_scores,
    "pair_and_fragment_same_end": t_pair_and_fragment_same_end,
    "clips_move_the_five_prime_end": t_clips_move_the_five_prime_end,
    "orientations_and_mate_order": t_orientations_and_mate_order,
    "mates_on_different_references": t_mates_on_different_references,
    "one_mate_unmapped": t_one_mate_unmapped,
    "secondary_and_supplementary": t_secondary_and_supplementary,
    "two_libraries": t_two_libraries,
    "large_sets": t_large_sets,
    "optical": t_optical,
    "names_that_do_not_parse": t_names_that_do_not_parse,
    "qc_fail": t_qc_fail,
    "repeated_index": t_repeated_index,
}


@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_trap_matches_picard(trap, tmp_path, picard, driver):
    flags, metrics = run_both(tmp_path, picard, driver, TRAPS[trap]())
    # Every trap input has duplicates: a run that marks nothing proves nothing.
    assert any(flags), "Picard marked no duplicate: the trap input is wrong"
    assert len(metrics) >= 2


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_templates_match_picard(seed, tmp_path, picard, driver):
    flags, _ = run_both(tmp_path, picard, driver, t_random(seed))
    assert sum(flags) > 20


@pytest.mark.parametrize("seed", [4, 5])
def test_one_library_roi_histogram_matches_picard(seed, tmp_path, picard, driver):
    # With one library Picard adds the CoverageMult histogram (estimated
    # library size); dense names on two tiles give many optical duplicates.
    recs = t_random(seed, one_rg=True, dense=True)
    flags, metrics = run_both(tmp_path, picard, driver, recs, rgs=[("rg1", "libA")])
    assert sum(flags) > 20
    header, row = metrics
    assert int(row[header.index("READ_PAIR_OPTICAL_DUPLICATES")]) > 0
    assert row[header.index("ESTIMATED_LIBRARY_SIZE")] != ""


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_large_optical_sets_match_picard(seed, tmp_path, picard, driver):
    """Sets of 4 and more go through Picard's clustering (connected
    components per tile, one kept per cluster, the left-most taking over);
    x and y near the 16-bit wrap, some reads first-of-pair reverse (FR and
    RF split), read groups of one library on two header lines."""
    rng = random.Random(seed)
    recs = []
    for t in range(120):
        end = rng.choice([(40_000, 40_300), (41_000, 41_300)])
        x = rng.choice([rng.randrange(0, 400), 65_536 + rng.randrange(0, 400), rng.randrange(32_600, 32_900)])
        y = rng.randrange(0, 400)
        name = f"E{t}:1:FC:1:{rng.choice([1101, 1102])}:{x}:{y}"
        flip = rng.random() < 0.3
        a, b = (end[1], end[0]) if flip else end
        recs += pair(name, a, b, rev1=flip, rev2=not flip, q1=rng.choice([30, 31]), q2=30,
                     rg=rng.choice(["rg1", "rg4"]))
    rgs = [("rg1", "libA"), ("rg4", "libA")]
    flags, metrics = run_both(tmp_path, picard, driver, recs, rgs=rgs)
    header, row = metrics
    assert int(row[header.index("READ_PAIR_OPTICAL_DUPLICATES")]) > 5


@pytest.mark.parametrize("trap", ["one_mate_unmapped", "secondary_and_supplementary", "optical", "random"])
def test_coordinate_sorted_input_matches_picard(trap, tmp_path, picard, driver):
    """Coordinate-sorted input: Picard marks only the primary records that
    make up a duplicate end (not the unmapped mate, not secondary or
    supplementary records), indexes count records, and ends stop at the
    unplaced unmapped reads."""
    recs = t_random(9) if trap == "random" else TRAPS[trap]()
    flags, _ = run_both(tmp_path, picard, driver, recs, coordinate=True)
    assert any(flags)


def t_adversarial(seed: int):
    """Few 5' ends, every strand combination, clips on either side, QC
    failures, secondary and supplementary records, two single-end primaries
    under one name, half-mapped templates in either order, orphans whose
    mate record is absent, unmapped pairs, x/y around 32767 and the 16-bit
    wrap, tile 65535 and 65536+1101, names of 5, 6 and 7 fields."""
    rng = random.Random(seed)
    recs = []
    starts = [500, 505, 550]
    for t_ in range(200):
        x = rng.choice([rng.randrange(0, 300), 65536 + rng.randrange(0, 300), 32767 - rng.randrange(0,150), 32768 + rng.randrange(0,150)])
        y = rng.choice([rng.randrange(0, 300), 65535 - rng.randrange(0, 200)])
        tile = rng.choice([1101, 1101, 65535, 65536 + 1101])
        name = rng.choice([f"N{t_}:1:FC:1:{tile}:{x}:{y}", f"N{t_}:{tile}:{x}:{y}:z", f"N{t_}:A:{tile}:{x}:{y}", f"t{t_}"])
        rg = rng.choice(["rg1", "rg2", "rg3"])
        a, b = rng.choice(starts), rng.choice(starts) + rng.choice([0, 100])
        cig = rng.choice(["50M", "5S45M", "45M5S", "5H45M", "45M5H", "2S46M2S"])
        q1, q2 = rng.choice([10, 20, 30]), rng.choice([10, 20, 30])
        k = rng.random()
        if k < 0.45:
            tpl = pair(name, a, b, rev1=rng.random() < 0.5, rev2=rng.random() < 0.5, q1=q1, q2=q2, cig1=cig,
                       cig2=rng.choice(["50M", "45M5S", "5S45M"]), rg=rg, r1_first=rng.random() < 0.5,
                       mref=rng.choice([0, 0, 1]))
            if rng.random() < 0.15:
                tpl[0].flag |= 0x200
            if rng.random() < 0.15:
                tpl.append(Rec(name, 0x1 | 0x100 | (tpl[0].flag & 0xf0), 1, 5, "50M", tpl[0].mref, tpl[0].mpos, rg=rg))
        elif k < 0.6:
            tpl = frag(name, a, rev=rng.random() < 0.5, q=q1, cig=cig, rg=rg)
            if rng.random() < 0.2:
                tpl = tpl + frag(name, b, rev=rng.random() < 0.5, q=q2, cig=cig, rg=rg)
        elif k < 0.75:
            tpl = half_mapped(name, a, rev=rng.random() < 0.5, q=q1, cig=cig, rg=rg)
            if rng.random() < 0.5:
                tpl.reverse()
        elif k < 0.85:
            # orphan: paired, mate mapped, but the mate record is absent
            p = pair(name, a, b, rev1=rng.random() < 0.5, q1=q1, cig1=cig, rg=rg)
            tpl = [p[0]]
        elif k < 0.92:
            tpl = [Rec(name, 0x1 | 0x40 | 0x4 | 0x8, -1, -1, "*", -1, -1, rg=rg), Rec(name, 0x1 | 0x80 | 0x4 | 0x8, -1, -1, "*", -1, -1, rg=rg)]
        else:
            tpl = frag(name, a, q=q1, cig=cig, rg=rg) + [Rec(name, 0x800, 0, a + 3, "20S30M", -1, -1, rg=rg)]
        recs += tpl
    return recs


@pytest.mark.parametrize("seed", [100, 101])
@pytest.mark.parametrize("coordinate", [False, True], ids=["queryname", "coordinate"])
def test_adversarial_templates_match_picard(seed, coordinate, tmp_path, picard, driver):
    flags, _ = run_both(tmp_path, picard, driver, t_adversarial(seed), coordinate=coordinate)
    assert sum(flags) > 20


def test_thirty_thousand_templates_match_picard(tmp_path, picard, driver):
    """A larger input: many sets, optical duplicates on three tiles, two
    libraries, fragments and half-mapped templates among the pairs."""
    rng = random.Random(42)
    recs = []
    for i in range(30_000):
        a = rng.randrange(0, 6_000) * 3
        name = f"I{i}:1:FC:1:{rng.choice([1101, 1102, 1103])}:{rng.randrange(0, 3000)}:{rng.randrange(0, 3000)}"
        k = rng.random()
        if k < 0.8:
            recs += pair(name, a, a + rng.choice([200, 250, 300]), rev1=rng.random() < 0.5,
                         rev2=rng.random() < 0.5, q1=rng.choice([20, 30, 40]), rg=rng.choice(["rg1", "rg2"]))
        elif k < 0.9:
            recs += frag(name, a, rev=rng.random() < 0.5, q=rng.choice([20, 30]))
        else:
            recs += half_mapped(name, a)
    flags, metrics = run_both(tmp_path, picard, driver, recs)
    assert sum(flags) > 5000
    header = metrics[0]
    assert sum(int(r[header.index("READ_PAIR_OPTICAL_DUPLICATES")]) for r in metrics[1:]) > 0


@pytest.mark.parametrize("seed", [11, 12])
def test_queryname_sorted_input_matches_picard(seed, tmp_path, picard, driver):
    """`samtools sort -n` output (the other name-grouped input the issue
    names): templates in natural name order, records of a template by
    read1/read2 then flags."""
    flags, _ = run_both(tmp_path, picard, driver, t_adversarial(seed), name_sort=True)
    assert sum(flags) > 20
