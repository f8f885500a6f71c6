"""MD and NM in alnsort's CRAM output, beside the conformance matrix: their
values and their place among the tags, as samtools 1.24 (pysam 0.24.1)
gives them from its own CRAM of the same SAM.

htslib's CRAM 3.x writer leaves MD/NM out where its own MD/NM of the read
against the reference equals theirs, and its reader then appends them after
the other tags; it keeps them as given, in their place, when they differ,
and whatever their values when the read has an N over a reference N or an
aligned base past the reference's end (hts-specs' `md#1.sam` case). The
inputs here are generated from a seeded generator: MD/NM before, after and
between the other tags, in either order, one of them alone, right, wrong
(MD or NM) and lower-case values, over a reference with N runs (upper and
lower case), IUPAC codes and a short sequence that reads run past, and
reads with N bases, mismatches, indels, skips, clips, SEQ `*` and unmapped
records. Each is written to CRAM by alnsort (with the reference) and by
samtools (`view -C`); samtools reads both into the same records, tag order
included, and so does alnsort reading its own CRAM.
"""

from __future__ import annotations

import random
from pathlib import Path

import gen
import oracle
import pytest
from harness import assert_same_text, check_ok, run_alnsort

REFS = {"c1": 1500, "c2": 300}
OTHER_TAGS = ("AS:i:{}", "XS:i:{}", "XT:Z:t{}", "ZF:f:{}.5")


def _reference(rng: random.Random) -> dict[str, str]:
    seqs = {name: [rng.choice("ACGT") for _ in range(n)] for name, n in REFS.items()}
    c1 = seqs["c1"]
    for at in range(100, 1400, 90):
        # An N run, a lower-case n run and IUPAC codes every 90 bases.
        c1[at : at + 3] = "NNN"
        c1[at + 20 : at + 22] = "nn"
        c1[at + 40] = rng.choice("RYKMSW")
        c1[at + 50 : at + 60] = [b.lower() for b in c1[at + 50 : at + 60]]
    return {name: "".join(s) for name, s in seqs.items()}


def _read(rng: random.Random, ref: str, pos: int, length: int, past_end: bool) -> tuple[str, str]:
    """A CIGAR and bases for a read at 0-based `pos`: mostly the
    reference's own letters (so that Ns meet the reference's Ns and IUPAC
    codes their own), with mismatches, N bases, indels, skips and clips."""
    ops: list[tuple[int, str]] = []
    seq: list[str] = []
    r = pos
    if rng.random() < 0.25:
        k = rng.randrange(1, 6)
        ops.append((k, "S"))
        seq += [rng.choice("ACGTN") for _ in range(k)]
    left = length
    while left > 0:
        m = min(left, rng.randrange(4, 40))
        ops.append((m, rng.choice("MMMM=X") if rng.random() < 0.1 else "M"))
        for k in range(m):
            b = ref[r + k].upper() if r + k < len(ref) else rng.choice("ACGT")
            x = rng.random()
            if x < 0.03:
                b = rng.choice([c for c in "ACGT" if c != b])
            elif x < 0.05:
                b = "N"
            seq.append(b)
        r += m
        left -= m
        if left > 8 and rng.random() < 0.3:
            kind, k = rng.choice("IDN"), rng.randrange(1, 4)
            if kind != "I" and r + 20 * k >= len(ref):
                kind = "I"
            if kind == "I":
                seq += [rng.choice("ACGTN") for _ in range(k)]
                left -= k
            else:
                k = k if kind == "D" else 20 * k
                r += k
            ops.append((k, kind))
    if rng.random() < 0.25:
        k = rng.randrange(1, 6)
        ops.append((k, "S"))
        seq += [rng.choice("ACGTN") for _ in range(k)]
    assert past_end or r <= len(ref)
    return "".join(f"{n}{o}" for n, o in ops), "".join(seq)


def _sam(rng: random.Random, seqs: dict[str, str], n: int = 400) -> str:
    lines = ["@HD\tVN:1.6\tSO:coordinate"]
    lines += [f"@SQ\tSN:{name}\tLN:{len(s)}" for name, s in seqs.items()]
    recs = []
    taken = set()
    for i in range(n):
        while True:
            chrom = "c2" if rng.random() < 0.2 else "c1"
            ref = seqs[chrom]
            length = rng.randrange(15, 80)
            past_end = chrom == "c2" and rng.random() < 0.5
            pos = len(ref) - rng.randrange(3, length) if past_end else rng.randrange(0, len(ref) - length - 70)
            if (chrom, pos) not in taken:  # one record per place: the sort keeps the input's order
                taken.add((chrom, pos))
                break
        cigar, seq = _read(rng, ref, pos, length, past_end)
        md, nm = gen.md_nm(ref, pos, cigar, seq, past_end_as_n=True)
        flag = rng.choice([0, 0, 16, 256])
        kind = rng.randrange(12)
        if kind == 0:
            md = md.lower()  # compared ignoring case: left out as right
        elif kind == 1:
            md = md + "0A0"  # a wrong MD: kept as given
        elif kind == 2:
            nm += 1  # a wrong NM: kept as given
        elif kind == 3:
            seq = "*"  # no bases: kept as given
        elif kind == 4:
            flag |= 4  # unmapped, placed: kept as given
        mdnm = [f"MD:Z:{md}", f"NM:i:{nm}"]
        shape = rng.randrange(7)
        if shape == 1:
            mdnm.reverse()
        elif shape == 2:
            mdnm = mdnm[:1]
        elif shape == 3:
            mdnm = mdnm[1:]
        others = [t.format(rng.randrange(100)) for t in rng.sample(OTHER_TAGS, rng.randrange(0, 4))]
        where = rng.randrange(4)
        if where == 0:  # before the others
            tags = mdnm + others
        elif where == 1:  # after them
            tags = others + mdnm
        elif where == 2:  # between them
            k = rng.randrange(len(others) + 1)
            tags = others[:k] + mdnm + others[k:]
        else:  # apart, with other tags between
            tags = mdnm[:1] + others + mdnm[1:]
        qual = "*" if seq == "*" or rng.random() < 0.3 else "".join(chr(33 + rng.randrange(40)) for _ in seq)
        recs.append((chrom, pos, f"r{i}", flag, cigar, seq, qual, tags))
    recs.sort(key=lambda t: (list(REFS).index(t[0]), t[1]))
    for chrom, pos, name, flag, cigar, seq, qual, tags in recs:
        lines.append("\t".join([name, str(flag), chrom, str(pos + 1), "60", cigar, "*", "0", "0", seq, qual, *tags]))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("mdnm")
    rng = random.Random(3624)
    seqs = _reference(rng)
    ref = d / "ref.fa"
    ref.write_text("".join(f">{name}\n{s}\n" for name, s in seqs.items()))
    oracle.samtools("faidx", str(ref))
    sam = d / "in.sam"
    sam.write_text(_sam(rng, seqs))
    return {"ref": ref, "sam": sam, "dir": d}


def _records(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("@")]


def _tags(rec: str) -> list[str]:
    return [t[:2] for t in rec.split("\t")[11:]]


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_cram_output_keeps_md_nm_where_samtools_does(alnsort_bin, inputs, tmp_path, version):
    """samtools reads alnsort's CRAM into the records (MD/NM values and
    places included) it reads from its own CRAM of the same SAM; alnsort
    reads its CRAM into them too."""
    ref, sam = inputs["ref"], inputs["sam"]
    theirs, ours = tmp_path / "samtools.cram", tmp_path / "alnsort.cram"
    fmt = f"cram,version={version}"
    oracle.samtools("view", "--no-PG", "-O", fmt, "-T", str(ref), "-o", str(theirs), str(sam))
    check_ok(run_alnsort(["--no-PG", "-O", fmt, "--reference", str(ref), "-o", str(ours), str(sam)]))
    want = _records(oracle.samtools("view", "--no-PG", "-T", str(ref), str(theirs)).stdout.decode())
    assert len(want) == 400, len(want)
    # The inputs hold what the test is about: records whose MD/NM samtools
    # keeps in place (before another tag, or NM before MD) and records it
    # moves to the end (left out, then added back).
    kept = [r for r in want if any(t in ("MD", "NM") for t in _tags(r)[:-1]) and _tags(r)[-2:] != ["MD", "NM"]]
    at_end = [r for r in want if _tags(r)[-2:] == ["MD", "NM"]]
    assert len(kept) > 60 and len(at_end) > 60, (len(kept), len(at_end))
    n_over_n = [r for r in kept if "N" in r.split("\t")[9] and any(t.startswith("MD:Z:") and "N" in t for t in r.split("\t")[11:])]
    assert len(n_over_n) > 10, len(n_over_n)
    got = _records(oracle.samtools("view", "--no-PG", "-T", str(ref), str(ours)).stdout.decode())
    assert_same_text("\n".join(want), "\n".join(got), f"samtools reading alnsort's CRAM {version}")
    back = tmp_path / "back.sam"
    check_ok(run_alnsort(["--no-PG", "-O", "sam", "--reference", str(ref), "-o", str(back), str(ours)]))
    assert_same_text("\n".join(want), "\n".join(_records(back.read_text())), f"alnsort reading its CRAM {version}")
