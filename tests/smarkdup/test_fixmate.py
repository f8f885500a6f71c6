"""`alnsort fixmate` against samtools 1.24's `fixmate` (pysam 0.24.1), record
by record: every field (the BAM `bin` included) and every tag in order with
its BAM type, on generated name-grouped inputs that hunt fixmate's traps
(shared/reference/samtools-markdup.md §1 and §6): FR/FF/RF/RR and
overlapping pairs, mates on other references, unmapped reads and mates
(placed or not), orphans, stale 0x2/0x8/0x20 and mate fields, secondary
and supplementary records (with and without 0x1, of either segment or
neither, 0x900), three primaries, reads overhanging or starting past the
reference end, CIGARs that end where the reference does, QUAL `*`,
qualities 14 and 15, hard and soft clips, adjacent equal CIGAR operations,
`=`/`X`, existing MC/MQ/ms/ct/NM/MD tags, RNAME `*` with a POS.

Both tools read the same BAM (written by samtools from the generated SAM),
so SAM parsing is not what is compared, except in the one SAM-input case.
"""

from __future__ import annotations

import gzip
import os
import random
import re
import struct
import subprocess

import pysam
import pytest

import harness
import oracle

REFS = [("chr1", 2000), ("chr2", 1500), ("chr3", 300)]
OPS_Q = set("MIS=X")
OPS_R = set("MDN=X")


def _cigar_lens(cigar: str) -> tuple[int, int]:
    """(query length, reference length) of a CIGAR."""
    q = r = 0
    num = ""
    for c in cigar:
        if c.isdigit():
            num += c
            continue
        n = int(num)
        num = ""
        if c in OPS_Q:
            q += n
        if c in OPS_R:
            r += n
    return q, r


class Gen:
    """Name-grouped SAM text, templates in random shapes."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.n = 0

    def name(self) -> str:
        self.n += 1
        # Colons and varied lengths, as instrument names have.
        return f"M{self.rng.randint(1, 3)}:{self.n}:{self.rng.randint(0, 99999)}"

    def cigar(self) -> str:
        r = self.rng
        length = r.choice([10, 20, 30, 50])
        a = r.randint(1, length - 2)
        b = length - a
        shapes = [
            f"{length}M",
            f"{length}M",
            f"{a}S{b}M",
            f"{a}M{b}S",
            f"{r.randint(1, 9)}H{length}M",
            f"{length}M{r.randint(1, 9)}H",
            f"{r.randint(1, 5)}H{a}S{b}M{r.randint(1, 5)}H",
            f"{a}M{r.randint(1, 6)}D{b}M",
            f"{a}M{min(b - 1, 3)}I{b - min(b - 1, 3)}M",
            f"{a}M{b}M",
            f"{a}={b}X",
            f"{a}M{r.randint(1, 200)}N{b}M",
        ]
        return r.choice(shapes)

    def qual(self, n: int) -> str:
        r = self.rng
        if r.random() < 0.1:
            return "*"
        # Around the score threshold (14 and 15) and the usual range.
        return "".join(chr(33 + r.choice([2, 13, 14, 14, 15, 15, 16, 30, 37, 40])) for _ in range(n))

    def seq(self, n: int) -> str:
        return "".join(self.rng.choice("ACGT") for _ in range(n))

    def stale_tags(self) -> list[str]:
        r = self.rng
        pool = [
            f"MC:Z:{r.randint(1, 60)}M",
            f"MQ:i:{r.choice([0, 7, 60, 300])}",
            f"ms:i:{r.randint(0, 5000)}",
            "ct:Z:1F10M5T2R10M",
            f"NM:i:{r.randint(0, 3)}",
            "MD:Z:10",
            f"XA:Z:chr2,+{r.randint(1, 999)},10M,0;",
            "SM:i:5",
            "CG:Z:x",
            f"XS:i:{r.randint(-5, 200)}",
        ]
        return r.sample(pool, r.randint(0, 4))

    def mate_junk(self) -> tuple[str, int, int]:
        r = self.rng
        return (
            r.choice(["*", "=", "chr1", "chr2"]),
            r.choice([0, r.randint(1, 2000)]),
            r.choice([0, r.randint(-500, 500)]),
        )

    def segment(self, name: str, flag: int, mapped: bool, near: tuple[str, int] | None = None) -> str:
        """One record of a segment; `flag` holds the segment's bits. `near`:
        placed on that reference within 60 bases of that position (pairs
        that overlap, or face each other, or away)."""
        r = self.rng
        ref, ln = r.choice(REFS)
        cigar = self.cigar()
        qlen, rlen = _cigar_lens(cigar)
        where = r.random()
        if near is not None:
            ref, ln = near[0], dict(REFS)[near[0]]
            pos = max(1, near[1] + r.randint(-60, 60))
        elif where < 0.12:
            pos = ln - r.randint(0, rlen)  # overhangs (or ends at) the end
        elif where < 0.15:
            pos = ln + r.randint(1, 20)  # starts past the end
        else:
            pos = r.randint(1, max(1, ln - rlen))
        mapq = r.choice([0, 3, 20, 60, 255])
        if r.random() < 0.3:
            flag |= 0x10
        for bit, p in ((0x20, 0.3), (0x2, 0.5), (0x8, 0.1), (0x200, 0.05), (0x400, 0.05)):
            if r.random() < p:
                flag |= bit
        if not mapped:
            flag |= 0x4
            kind = r.random()
            if kind < 0.4:
                ref, pos, cigar = "*", 0, "*"
            elif kind < 0.6:
                cigar = "*"  # placed, no CIGAR
            elif kind < 0.7:
                ref = "*"  # RNAME * with a POS (and a CIGAR)
                cigar = "*"
            # else placed with a CIGAR: the sanitizer removes it
        elif r.random() < 0.03:
            ref, cigar = "*", "*"  # claims mapped, RNAME *: the sanitizer unmaps it
            pos = r.choice([0, 55])
        if r.random() < 0.05:
            seq = qual = "*"
        else:
            seq, qual = self.seq(qlen), self.qual(qlen)
        rnext, pnext, tlen = self.mate_junk()
        fields = [name, str(flag), ref, str(pos), str(mapq), cigar, rnext, str(pnext), str(tlen), seq, qual]
        return "\t".join(fields + self.stale_tags())

    def extra(self, name: str, seg: int) -> str:
        """A secondary or supplementary record of segment `seg` (1, 2, 0: neither)."""
        r = self.rng
        flag = r.choice([0x100, 0x800, 0x800, 0x900])
        if r.random() < 0.75:
            flag |= 0x1
        flag |= {1: 0x40, 2: 0x80, 0: 0}[seg]
        return self.segment(name, flag, mapped=r.random() < 0.9)

    def template(self) -> list[str]:
        r = self.rng
        name = self.name()
        shape = r.random()
        recs: list[str] = []
        if shape < 0.65:
            close = r.random() < 0.5
            for seg, bit in ((1, 0x40), (2, 0x80)):
                flag = bit | (0x1 if r.random() < 0.95 else 0)
                near = None
                if close and recs:
                    f = recs[0].split("\t")
                    near = (f[2], int(f[3])) if f[2] != "*" else None
                recs.append(self.segment(name, flag, mapped=r.random() < 0.85, near=near))
        elif shape < 0.8:
            bit = r.choice([0x40, 0x80, 0])
            flag = bit | (0x1 if r.random() < 0.7 else 0)
            recs.append(self.segment(name, flag, mapped=r.random() < 0.85))
        elif shape < 0.87:
            pass  # only secondary/supplementary records
        else:
            for bit in r.choice([(0x40, 0x80, 0x40), (0x40, 0x40), (0x80, 0x80, 0x40)]):
                recs.append(self.segment(name, bit | 0x1, mapped=r.random() < 0.85))
        n_extra = r.choice([0, 0, 1, 2, 3]) if recs else r.randint(1, 3)
        for _ in range(n_extra):
            at = r.randint(0, len(recs))
            recs.insert(at, self.extra(name, r.choice([1, 2, 2, 0])))
        return recs

    def sam(self, n_templates: int, so: str = "queryname") -> str:
        head = [f"@HD\tVN:1.6\tSO:{so}"] + [f"@SQ\tSN:{n}\tLN:{ln}" for n, ln in REFS]
        head.append("@CO\tfixmate traps")
        body = [rec for _ in range(n_templates) for rec in self.template()]
        return "\n".join(head + body) + "\n"


def _records(path: str) -> tuple[list[str], list[bytes]]:
    """The header's lines without @PG, and each record's bytes (its
    block_size included) of a BAM file. Read raw: samtools 1.24 writes
    records htslib cannot read back (bam_trim soft-clips the rest of an
    N cut at the reference end, so CIGAR and SEQ lengths disagree), and
    those must be compared too."""
    with open(path, "rb") as fh:
        data = gzip.decompress(fh.read())
    assert data[:4] == b"BAM\1", f"{path} is not BAM"
    l_text = struct.unpack_from("<i", data, 4)[0]
    text = data[8 : 8 + l_text].split(b"\0", 1)[0].decode()
    at = 8 + l_text
    n_ref = struct.unpack_from("<i", data, at)[0]
    at += 4
    for _ in range(n_ref):
        l_name = struct.unpack_from("<i", data, at)[0]
        at += 4 + l_name + 4
    recs = []
    while at < len(data):
        size = struct.unpack_from("<i", data, at)[0]
        recs.append(data[at : at + 4 + size])
        at += 4 + size
    return [l for l in text.splitlines() if not l.startswith("@PG")], recs


def _show(rec: bytes) -> str:
    """A record's fields for a failure message."""
    tid, pos, l_name, mapq, bin_, n_cig, flag, l_seq, mtid, mpos, tlen = struct.unpack_from("<iiBBHHHiiii", rec, 4)
    name = rec[36 : 36 + l_name - 1].decode()
    cig = struct.unpack_from(f"<{n_cig}I", rec, 36 + l_name)
    cigar = "".join(f"{c >> 4}{'MIDNSHP=XB'[c & 15]}" for c in cig) or "*"
    aux = rec[36 + l_name + 4 * n_cig + (l_seq + 1) // 2 + l_seq :]
    return (
        f"{name} flag={flag} tid={tid} pos={pos} mapq={mapq} bin={bin_} cigar={cigar} "
        f"mate={mtid}:{mpos} tlen={tlen} aux={aux!r}"
    )


def _alnsort(alnsort_bin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([alnsort_bin, "fixmate", *args], capture_output=True, timeout=harness.RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def traps(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("fixmate")
    sam = d / "traps.sam"
    sam.write_text(Gen(36).sam(1500))
    bam = d / "traps.bam"
    oracle.samtools("view", "--no-PG", "-b", "-o", str(bam), str(sam))
    return {"dir": str(d), "sam": str(sam), "bam": str(bam)}


OPTION_SETS = [
    [],
    ["-m"],
    ["-c"],
    ["-r"],
    ["-p"],
    ["-r", "-m"],
    ["-c", "-p"],
    ["-rpcm"],
    ["-z", "none", "-m"],
    ["-z", "on"],
    ["-z", "cigarx", "-c"],
    ["-z", "pos,unmap", "-m"],
    ["-z", "mqual,aux"],
    ["-z", "cigar"],
    ["-z", "cigar,unmap,cigdup", "-r"],
    ["-m", "-@", "2"],
]


def _compare(alnsort_bin: str, traps: dict[str, str], opts: list[str], src: str) -> int:
    d = traps["dir"]
    tag = "_".join(o.strip("-").replace(",", "+") for o in opts) or "default"
    want = os.path.join(d, f"want_{tag}_{os.path.basename(src)}.bam")
    got = os.path.join(d, f"got_{tag}_{os.path.basename(src)}.bam")
    oracle.samtools("fixmate", *opts, src, want)
    res = _alnsort(alnsort_bin, *opts, src, got)
    harness.check_ok(res)
    want_h, want_r = _records(want)
    got_h, got_r = _records(got)
    assert got_h == want_h, "headers (without @PG) differ"
    assert len(got_r) == len(want_r), f"{len(got_r)} records written, samtools wrote {len(want_r)}"
    for i, (g, w) in enumerate(zip(got_r, want_r)):
        assert g == w, f"record {i + 1} differs with {opts}:\n alnsort:  {_show(g)}\n samtools: {_show(w)}"
    return len(want_r)


@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: " ".join(o) or "default")
def test_records_match_samtools(alnsort_bin, traps, opts):
    n = _compare(alnsort_bin, traps, opts, traps["bam"])
    assert n > 2000


def test_a_template_longer_than_a_read_batch(alnsort_bin, tmp_path):
    """A template of thousands of records (more than one 256 KiB read batch
    of alnsort's reader) between ordinary ones: templates are cut across
    batches as samtools reads them."""
    g = Gen(99)
    text = g.sam(300).rstrip("\n").split("\n")
    big = "BIG:1:1"
    long = [g.segment(big, 0x41, True)]
    long += [g.extra(big, g.rng.choice([1, 2])) for _ in range(4000)]
    long.insert(2000, g.segment(big, 0x81, True))
    text[400:400] = long
    sam = tmp_path / "long.sam"
    sam.write_text("\n".join(text) + "\n")
    bam = tmp_path / "long.bam"
    oracle.samtools("view", "--no-PG", "-b", "-o", str(bam), str(sam))
    assert os.path.getsize(bam) > 100_000
    d = {"dir": str(tmp_path)}
    for opts in ([], ["-m", "-r", "-@", "3"]):
        assert _compare(alnsort_bin, d, opts, str(bam)) > 2000


def test_sam_input_matches_samtools(alnsort_bin, traps):
    """The same records given as SAM text (each tool parses them itself)."""
    _compare(alnsort_bin, traps, ["-m", "-c"], traps["sam"])


def test_sam_output_text_matches_samtools(alnsort_bin, traps):
    want = oracle.samtools("fixmate", "-m", "-O", "sam", traps["bam"], "-").stdout.decode()
    res = _alnsort(alnsort_bin, "-m", "-O", "sam", traps["bam"], "-")
    harness.check_ok(res)
    strip = lambda t: [l for l in t.splitlines() if not l.startswith("@PG")]  # noqa: E731
    assert strip(res.stdout.decode()) == strip(want)


def _pairs(recs: list, test) -> bool:
    """Whether two mapped primaries of one template on one reference pass
    `test` (in either order)."""
    by_name: dict[str, list] = {}
    for r in recs:
        if not r.flag & 0x904:
            by_name.setdefault(r.query_name, []).append(r)
    return any(
        len(p) == 2 and p[0].reference_id == p[1].reference_id and (test(p[0], p[1]) or test(p[1], p[0]))
        for p in by_name.values()
    )


def test_generator_hunts_the_traps(traps):
    """The input holds each trap the module docstring names (so a change
    to the generator cannot quietly stop testing one)."""
    with pysam.AlignmentFile(traps["bam"], "rb", check_sq=False) as f:
        recs = list(f.fetch(until_eof=True))
    lens = dict(REFS)
    names = [r.reference_name for r in recs]
    has = {
        "supplementary with 0x1": any(r.flag & 0x801 == 0x801 for r in recs),
        "supplementary without 0x1": any(r.flag & 0x801 == 0x800 for r in recs),
        "0x900": any(r.flag & 0x900 == 0x900 for r in recs),
        "secondary": any(r.flag & 0x900 == 0x100 for r in recs),
        "QUAL *": any(r.query_qualities is None and r.query_sequence for r in recs),
        "quality 14": any(r.query_qualities is not None and 14 in r.query_qualities for r in recs),
        "quality 15": any(r.query_qualities is not None and 15 in r.query_qualities for r in recs),
        "hard clip": any(r.cigarstring and "H" in r.cigarstring for r in recs),
        "overhang": any(
            r.reference_end and not r.is_unmapped and r.reference_end > lens[n] for r, n in zip(recs, names)
        ),
        "past the end": any(not r.is_unmapped and r.reference_start >= lens.get(n, 1 << 40) for r, n in zip(recs, names)),
        "stale 0x8": any(r.flag & 0x8 and not r.flag & 0x4 for r in recs),
        "RNAME * with POS": any(r.reference_id < 0 and r.reference_start >= 0 for r in recs),
        "existing MC": any(r.has_tag("MC") for r in recs),
        "existing ms": any(r.has_tag("ms") for r in recs),
        "unmapped with NM": any(r.is_unmapped and r.has_tag("NM") for r in recs),
        "FF pair": _pairs(recs, lambda a, b: not a.is_reverse and not b.is_reverse),
        "FR pair": _pairs(recs, lambda a, b: not a.is_reverse and b.is_reverse and a.reference_start < b.reference_start),
        "RF pair": _pairs(recs, lambda a, b: a.is_reverse and not b.is_reverse and a.reference_start < b.reference_start),
        "overlapping pair": _pairs(recs, lambda a, b: a.reference_start < b.reference_start < a.reference_end),
        "same 5' start": _pairs(recs, lambda a, b: a.reference_start == b.reference_start),
        "adjacent equal ops": any(r.cigartuples and any(a[0] == b[0] for a, b in zip(r.cigartuples, r.cigartuples[1:])) for r in recs),
    }
    missing = [k for k, v in has.items() if not v]
    assert not missing, f"the generated input lacks: {missing}"


def test_coordinate_sorted_input_is_refused(alnsort_bin, tmp_path):
    sam = tmp_path / "c.sam"
    sam.write_text("@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:100\nr\t0\tchr1\t1\t0\t4M\t*\t0\t0\tACGT\tIIII\n")
    out = tmp_path / "out.bam"
    want = oracle.samtools("fixmate", str(sam), str(tmp_path / "want.bam"), check=False)
    assert want.returncode != 0
    res = _alnsort(alnsort_bin, str(sam), str(out))
    assert res.returncode == 1
    assert b"SO:coordinate" in res.stderr and b"c.sam" in res.stderr, res.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args, says",
    [(["-M"], b"-M is not supported"), (["-z", "bogus"], b"bogus")],
)
def test_options_it_cannot_honour_are_refused(alnsort_bin, traps, tmp_path, args, says):
    out = tmp_path / "out.bam"
    res = _alnsort(alnsort_bin, *args, traps["bam"], str(out))
    assert res.returncode == 1
    assert says in res.stderr, res.stderr
    assert not out.exists()


def test_help_man_page_and_completion_list_fixmate(alnsort_bin):
    """`alnsort --help` names the command; the man page and the bash
    completion, generated from the option table, carry its long options."""
    run = lambda *a: subprocess.run([alnsort_bin, *a], capture_output=True, text=True, check=True).stdout  # noqa: E731
    assert "fixmate" in run("--help")
    help_text = run("fixmate", "--help")
    assert help_text == run("help", "fixmate")
    longs = set(re.findall(r"--([a-zA-Z][a-zA-Z-]*)", help_text))
    assert {"sanitize", "output-fmt", "threads", "no-PG"} <= longs
    man = run("generate", "man")
    assert "fixmate" in man
    for opt in longs:
        assert "\\-\\-" + opt.replace("-", "\\-") in man, f"the man page lacks --{opt}"
    assert "--sanitize" in run("generate", "bash")
