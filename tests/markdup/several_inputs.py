"""Builders of the several-input duplicate-marking cases, shared by
test_sort_markdup_inputs.py (`alnsort sort --markdup IN1 IN2 ...`) and
test_markduplicates_inputs.py (`alnsort MarkDuplicates I=.. I=..`): the
templates spread over inputs, their read groups per lane or clashing, and
the inputs written in the form a case asks for.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pysam

import test_vs_picard as g
from test_sort_markdup import moved

# Read groups of an input whose rg1 clashes by ID with the other inputs'
# (g.RGS) but names another library.
CLASHING_RGS = [("rg1", "libC"), ("rg2", "libB"), ("rg3", None)]


def split(recs, n: int, seed: int):
    """Whole templates spread over n inputs (by a hash of the name)."""
    parts = [[] for _ in range(n)]
    for r in recs:
        parts[zlib.crc32(f"{seed}:{r.name}".encode()) % n].append(r)
    return parts


def lane(recs, k: int):
    """Read groups renamed for lane k (rg1 -> rg1.L<k>), libraries kept:
    lanes of the same libraries with their own @RG IDs. Returns the records
    and the lane's read groups."""
    out = []
    for r in recs:
        r = g.Rec(**{**r.__dict__, "tags": list(r.tags)})
        if r.rg is not None:
            r.rg = f"{r.rg}.L{k}"
        out.append(r)
    return out, [(f"{i}.L{k}", lb) for i, lb in g.RGS]


def traps(adversarial_seed: int = 100):
    """Every trap of test_vs_picard.py and adversarial templates, each set
    moved to a place of its own."""
    recs = []
    for n, name in enumerate(sorted(g.TRAPS)):
        recs += moved(g.TRAPS[name](), n)
    return recs + moved(g.t_adversarial(adversarial_seed), len(g.TRAPS))


def add_header_lines(path: Path, lines: list[str]) -> None:
    """Adds header lines (@PG, @CO) to a BAM in place, records untouched."""
    sam = pysam.view("-h", "--no-PG", str(path))
    head = [ln for ln in sam.splitlines() if ln.startswith("@")]
    body = [ln for ln in sam.splitlines() if not ln.startswith("@")]
    text = path.with_suffix(".sam")
    text.write_text("\n".join(head + lines + body) + "\n")
    pysam.view("-b", "--no-PG", "-o", str(path), str(text), catch_stdout=False)
    text.unlink()


def write_with_other_refs(path: Path, recs) -> None:
    """`recs` written as `g.write_bam` writes them, but under @SQ lines
    that differ from the other inputs' (a chrX before `g.REFS`)."""
    refs = g.REFS
    try:
        g.REFS = [("chrX", 100_000)] + refs
        g.write_bam(path, recs, g.RGS)
    finally:
        g.REFS = refs


def by_library(recs, unknown_in_both: bool = False):
    """Whole templates spread over two inputs by library, each input's
    header naming only its own: input 0 holds libA's templates (rg1),
    input 1 libB's (rg2) and those of rg3 and of no read group (Picard's
    unknown library). A template's records take its first record's read
    group. With `unknown_in_both`, input 0 also holds some of the unknown
    library's templates, without RG tags: Picard's unknown library then has records in both inputs
    though no header says so. Returns [(records, read groups)] per input."""
    first = {}
    for r in recs:
        first.setdefault(r.name, r.rg)
    parts = [[], []]
    for r in recs:
        rg = first[r.name]
        r = g.Rec(**{**r.__dict__, "tags": list(r.tags)})
        if rg == "rg1":
            k, r.rg = 0, "rg1"
        elif unknown_in_both and rg in (None, "rg3") and zlib.crc32(r.name.encode()) % 2 == 0:
            k, r.rg = 0, None
        else:
            k, r.rg = 1, rg
        parts[k].append(r)
    return [(parts[0], [g.RGS[0]]), (parts[1], g.RGS[1:])]
