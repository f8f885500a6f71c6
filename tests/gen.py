"""Seeded SAM generators for the differential tests.

Why this exists: samtools sort's observable behaviour hides in corner cases
(/work/shared/reference/samtools-sort.md section 8), and a random "typical"
BAM never reaches them. Every generator here is deterministic for a given
seed and aims at one or more of those traps:

* heavy key ties: many records share (tid, pos, strand); each record carries a
  unique ``XI:i:<input index>`` so any loss of input-order stability shows up
  as a visible reordering of XI values;
* unmapped reads: placed (flag 0x4 with RNAME/POS of the mate), unplaced with
  POS 0 and POS > 0, with and without 0x10;
* secondary (0x100) and supplementary (0x800) records for the name-sort flag key;
* names with digit runs, leading zeros and natural-vs-lexicographic traps;
* mixed tag types for ``-t`` (A, Z, H, i of every stored size, f equal to an
  int, B arrays, missing);
* records bigger than one BGZF block (64 KiB): long SEQ/QUAL and huge B arrays;
* thousands of @SQ lines (multi-byte tids in a radix sort);
* consistent mate information (RNEXT/PNEXT/0x20/0x8 and MC) so that
  ``--template-coordinate`` is well defined, with soft/hard clips, RG with and
  without LB, unknown RG, CB and MI with "/A" "/B" suffixes;
* headers: @HD VN:1.5 with GO/SS/extra tags, no @HD at all, @PG chains with
  several ends followed by @CO.

Usage as a script (writes the shipped example):
    python3 tests/gen.py example > examples/example.sam
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

# Names from experiment E4 of the reference: natural sort treats "a1", "a01",
# "a001" as equal, "r1.2" < "r1.10", punctuation by byte value.
E4_NAMES = (
    "a1 a01 a001 a10 a9 a7b a12b A1 a ab a0 a00 x1y10 x1y2 x01y2 r1.10 r1.2 "
    "a1b a01c a9f a10a 007 7 0 00 a-1 a+1 a_1 a1_"
).split()

BASES = "ACGTN"
QUAL_CHARS = [chr(c) for c in range(ord("!"), ord("J") + 1)]


@dataclass
class Params:
    """Shape of one generated input; every field has a trap in mind."""

    seed: int = 1
    n_templates: int = 1000
    # Reference list: names and lengths. Long enough for the long reads.
    refs: list[tuple[str, int]] = field(
        default_factory=lambda: [("chr1", 2_000_000), ("chr2", 1_500_000), ("chrM", 400_000)]
    )
    # Fraction of mapped reads drawn from the small tie window [1, tie_window].
    tie_fraction: float = 0.85
    tie_window: int = 300
    read_len: int = 100
    paired_fraction: float = 0.85
    # Extra alignments per mapped read.
    secondary_fraction: float = 0.04
    supplementary_fraction: float = 0.04
    # Records that span BGZF blocks.
    n_long_reads: int = 0
    long_read_len: int = 75_000
    n_huge_aux: int = 0
    huge_aux_len: int = 40_000
    # Tags for -t / template-coordinate.
    trap_tags: bool = True
    header: str = "v15"  # "v15", "nohd", "plain", "pgchain"
    # Fraction of templates whose name is drawn from the trap pools.
    trap_name_fraction: float = 0.35
    all_unplaced: bool = False
    # When set, a mapped pair is placed like a proper pair: same reference,
    # opposite strands, the second mate within this many bases of the first.
    mate_distance: int | None = None


@dataclass
class Rec:
    qname: str
    flag: int
    rname: str = "*"
    pos: int = 0
    mapq: int = 0
    cigar: str = "*"
    rnext: str = "*"
    pnext: int = 0
    tlen: int = 0
    seq: str = "*"
    qual: str = "*"
    tags: list[str] = field(default_factory=list)

    def line(self) -> str:
        cols = [
            self.qname,
            str(self.flag),
            self.rname,
            str(self.pos),
            str(self.mapq),
            self.cigar,
            self.rnext,
            str(self.pnext),
            str(self.tlen),
            self.seq,
            self.qual,
        ]
        return "\t".join(cols + self.tags)


# Read groups: rgA and rgB share no library; rgC has no LB (library ""), rgD
# shares LB with rgA, "rgX" is used on records but absent from the header.
READ_GROUPS = [
    ("rgA", "libA"),
    ("rgB", "libB"),
    ("rgC", None),
    ("rgD", "libA"),
]


def header_text(p: Params) -> str:
    lines: list[str] = []
    if p.header == "v15":
        lines.append("@HD\tVN:1.5\tSS:coordinate:foo\tGO:query\tSO:queryname\tZZ:keep")
    elif p.header in ("plain", "pgchain"):
        lines.append("@HD\tVN:1.6\tSO:unsorted")
    elif p.header != "nohd":
        raise ValueError(f"unknown header variant {p.header!r}")
    for name, length in p.refs:
        lines.append(f"@SQ\tSN:{name}\tLN:{length}")
    for rg, lb in READ_GROUPS:
        lb_part = f"\tLB:{lb}" if lb else ""
        lines.append(f"@RG\tID:{rg}\tSM:sample1{lb_part}\tPL:ILLUMINA")
    if p.header == "v15" or p.header == "pgchain":
        # Chain ends: bull (PP:donkey) and cow (PP:moose) -> samtools adds two @PG.
        lines.append("@PG\tID:bull\tPN:bull\tPP:donkey")
        lines.append("@PG\tID:donkey\tPN:donkey")
        lines.append("@PG\tID:moose\tPN:moose")
        lines.append("@PG\tID:cow\tPN:cow\tPP:moose")
        lines.append("@CO\tcomment after the @PG lines")
    elif p.header == "nohd":
        # Standalone PGs, one already named samtools: ID de-duplication.
        lines.append("@PG\tID:samtools\tPN:samtools\tVN:0.1")
        lines.append("@PG\tID:bwa\tPN:bwa\tVN:0.7.17\tCL:bwa mem ref.fa r1.fq r2.fq")
    else:
        lines.append("@PG\tID:bwa\tPN:bwa\tVN:0.7.17\tCL:bwa mem ref.fa r1.fq r2.fq")
    lines.append("@CO\tgenerated by tests/gen.py")
    return "\n".join(lines) + "\n"


class _Gen:
    def __init__(self, p: Params):
        self.p = p
        self.rng = random.Random(p.seed)
        self.n_names = 0

    # ---- small random pieces -------------------------------------------------

    def seq(self, n: int) -> str:
        s = "".join(self.rng.choices(BASES, weights=(30, 20, 20, 30, 1), k=n))
        if self.p.trap_tags and self.rng.random() < 0.01:
            s = s.lower()  # samtools upper-cases SEQ on output
        return s

    def qual(self, n: int) -> str:
        if self.p.trap_tags and self.rng.random() < 0.01:
            return "*"
        return "".join(self.rng.choices(QUAL_CHARS, k=n))

    def name(self) -> str:
        r = self.rng
        self.n_names += 1
        n = self.n_names
        if r.random() >= self.p.trap_name_fraction:
            style = r.randrange(3)
            if style == 0:
                return f"SRR1234567.{n}"
            if style == 1:
                return f"HWI-ST1234:8:{1101 + n % 7}:{r.randrange(20000)}:{r.randrange(200000)}"
            return f"read{n}"
        style = r.randrange(7)
        if style == 0:  # leading zeros: r0042 ties r42 naturally
            return f"r{n:0{r.randrange(1, 8)}d}"
        if style == 1:
            return f"r{n}"
        if style == 2:  # dotted numbers: r1.2 < r1.10
            return f"r{n % 17}.{r.randrange(30)}"
        if style == 3:
            return r.choice(E4_NAMES) + ("" if r.random() < 0.5 else f"_{n % 5}")
        if style == 4:  # digit runs longer than 64-bit integers
            return "x" + str(r.randrange(10**25, 10**30)) + "y" + str(n)
        if style == 5:  # names that tie naturally but differ as bytes
            k = n % 23
            return r.choice([f"q{k}", f"q0{k}", f"q00{k}"]) + f":{n % 3}"
        return f"{n:05x}"  # hex-like names: "a9f" vs "a10a"

    def cigar(self, length: int) -> tuple[str, int]:
        """A CIGAR that consumes `length` query bases; returns (cigar, ref span)."""
        r = self.rng
        kind = r.randrange(10)
        if kind < 4 or length < 20:
            return f"{length}M", length
        if kind == 4:
            s = r.randrange(1, 15)
            return f"{s}S{length - s}M", length - s
        if kind == 5:
            s = r.randrange(1, 15)
            return f"{length - s}M{s}S", length - s
        if kind == 6:
            a, s2 = r.randrange(1, 10), r.randrange(1, 10)
            return f"{a}S{length - a - s2}M{s2}S", length - a - s2
        if kind == 7:
            d, a = r.randrange(1, 6), r.randrange(5, length - 5)
            return f"{a}M{d}D{length - a}M", length + d
        if kind == 8:
            i, a = r.randrange(1, 4), r.randrange(5, length - 10)
            return f"{a}M{i}I{length - a - i}M", length - i
        h = r.randrange(1, 20)  # hard clip: does not consume SEQ
        if r.random() < 0.5:
            return f"{h}H{length}M", length
        return f"{length}M{h}H", length

    def pick_pos(self, ref_len: int, span: int) -> int:
        r = self.rng
        if r.random() < self.p.tie_fraction:
            return r.randrange(1, min(self.p.tie_window, ref_len - span - 1) + 1)
        return r.randrange(1, ref_len - span - 1)

    def pick_ref(self) -> tuple[str, int]:
        refs = self.p.refs
        if len(refs) <= 8:
            # Skewed: most reads on the first refs, a few on the last.
            w = [max(1, 10 - 3 * i) for i in range(len(refs))]
            return self.rng.choices(refs, weights=w)[0]
        return self.rng.choice(refs)

    def xt(self) -> str | None:
        r = self.rng
        k = r.randrange(14)
        if k == 0:
            return None
        if k == 1:
            return "XT:A:" + r.choice("bzA~!")
        if k == 2:
            return "XT:Z:" + r.choice(["", "ABC", "abc", "abd", "1AE3", "zz"])
        if k == 3:
            return "XT:H:" + r.choice(["1AE3", "00", "FF", "ABC0"])
        if k in (4, 5, 6):  # every stored integer size: c C s S i I
            return "XT:i:" + str(r.choice([-3, 0, 10, 10, 127, 200, -200, 40000, -40000, 70000, -70000, 3_000_000_000]))
        if k in (7, 8):  # floats, including 10 == i:10 and -0.0
            return "XT:f:" + r.choice(["9.5", "10", "10.0", "-0", "1e-3", "-2.5", "3e9"])
        if k == 9:
            return "XT:B:" + r.choice(["c,1,2", "i,5", "f,1.5", "S,7,8,9", "C"])
        return "XT:i:10"

    def mi_cb(self, tmpl: int) -> list[str]:
        r = self.rng
        tags = []
        if r.random() < 0.5:
            tags.append("CB:Z:" + r.choice(["AAAC-1", "AAAG-1", "AAAC-2", "TTT"]))
        if r.random() < 0.6:
            base = str(r.choice([tmpl % 50, tmpl % 7]))
            tags.append("MI:Z:" + base + r.choice(["/A", "/B", "", "/AB", "/", "x/A"]))
        return tags

    # ---- records ----------------------------------------------------------------

    def mapped_fields(self, rec: Rec, length: int) -> tuple[str, int, int, bool, str]:
        ref, ref_len = self.pick_ref()
        cigar, span = self.cigar(length)
        pos = self.pick_pos(ref_len, span)
        rev = self.rng.random() < 0.5
        rec.rname, rec.pos, rec.cigar = ref, pos, cigar
        rec.mapq = self.rng.choice([0, 3, 60, 60, 60, 255])
        if rev:
            rec.flag |= 0x10
        return ref, pos, span, rev, cigar

    def common_tags(self, rg: str | None, extra: list[str]) -> list[str]:
        tags = []
        if rg is not None:
            tags.append(f"RG:Z:{rg}")
        if self.p.trap_tags:
            xt = self.xt()
            if xt:
                tags.append(xt)
            tags.extend(extra)
        tags.append(f"AS:i:{self.rng.randrange(0, 150)}")
        return tags

    def single(self, tmpl: int) -> list[Rec]:
        r = self.rng
        length = self.p.read_len
        rec = Rec(self.name(), 0)
        rec.seq, rec.qual = self.seq(length), self.qual(length)
        if self.p.all_unplaced or r.random() < 0.1:
            rec.flag |= 0x4
            if r.random() < 0.4:
                rec.flag |= 0x10  # unmapped reverse: sorts after forward in the tail
            if r.random() < 0.25:
                rec.pos = r.choice([10, 50, 50, 1000])  # unplaced with POS > 0
        else:
            self.mapped_fields(rec, length)
            rec.tags.append(f"NM:i:{r.randrange(5)}")
        rg = r.choice(["rgA", "rgB", "rgC", "rgD", "rgX", None])
        rec.tags += self.common_tags(rg, self.mi_cb(tmpl))
        return [rec]

    def pair(self, tmpl: int) -> list[Rec]:
        r = self.rng
        p = self.p
        name = self.name()
        rg = r.choice(["rgA", "rgB", "rgC", "rgD", "rgA", "rgB", "rgX", None])
        extra = self.mi_cb(tmpl)
        state = r.random()
        if p.all_unplaced or state < 0.05:
            mapped = (False, False)
        elif state < 0.10:
            mapped = (True, False)
        elif state < 0.15:
            mapped = (False, True)
        else:
            mapped = (True, True)
        reads = [Rec(name, 0x1 | 0x40), Rec(name, 0x1 | 0x80)]
        info = []  # (ref, pos, span, rev, cigar) or None
        for rec, m in zip(reads, mapped, strict=True):
            rec.seq, rec.qual = self.seq(p.read_len), self.qual(p.read_len)
            if m:
                info.append(self.mapped_fields(rec, p.read_len))
                rec.tags.append(f"NM:i:{r.randrange(5)}")
            else:
                rec.flag |= 0x4
                info.append(None)
        if mapped == (True, True) and p.mate_distance:
            ref, pos0, _, rev0, _ = info[0]
            cigar1 = reads[1].cigar
            span1 = _ref_span(cigar1)
            pos1 = min(pos0 + r.randrange(0, p.mate_distance), dict(p.refs)[ref] - span1 - 1)
            reads[1].rname, reads[1].pos = ref, pos1
            reads[1].flag = (reads[1].flag & ~0x10) | (0 if rev0 else 0x10)
            info[1] = (ref, pos1, span1, not rev0, cigar1)
        if mapped == (True, True):
            reads[0].flag |= 0x2 if info[0][0] == info[1][0] else 0
            reads[1].flag |= reads[0].flag & 0x2
        for i, (rec, mate_i) in enumerate(zip(reads, reversed(info), strict=True)):
            own = info[i]
            if mate_i is not None and own is None:
                # Placed unmapped read: takes the mate's coordinates.
                rec.rname, rec.pos = mate_i[0], mate_i[1]
                if r.random() < 0.3:
                    rec.flag |= 0x10
            if own is None and mate_i is None and r.random() < 0.3:
                rec.flag |= 0x10  # unmapped reverse (the mate gets 0x20 below)
                if r.random() < 0.3:
                    rec.pos = r.choice([10, 50])  # unplaced, POS > 0
        for i, rec in enumerate(reads):
            mate = reads[1 - i]
            self.set_mate(rec, mate, info[1 - i])
        for rec in reads:
            rec.tags += self.common_tags(rg, extra)
        out = list(reads)
        # Extra alignments (secondary, supplementary) keep the mate fields.
        for i, rec in enumerate(reads):
            if info[i] is None:
                continue
            if r.random() < p.secondary_fraction + p.supplementary_fraction:
                supp = r.random() < p.supplementary_fraction / (p.secondary_fraction + p.supplementary_fraction)
                x = Rec(name, (rec.flag & (0x1 | 0x2 | 0x40 | 0x80 | 0x8 | 0x20)) | (0x800 if supp else 0x100))
                self.mapped_fields(x, p.read_len)
                if supp:
                    h = r.randrange(10, 40)
                    x.cigar = f"{h}H{p.read_len - h}M" if r.random() < 0.5 else f"{p.read_len - h}M{h}H"
                    x.seq, x.qual = self.seq(p.read_len - h), self.qual(p.read_len - h)
                else:
                    x.seq, x.qual = "*", "*"
                self.set_mate(x, reads[1 - i], info[1 - i])
                x.tags += self.common_tags(rg, extra)
                out.append(x)
        return out

    def set_mate(self, rec: Rec, mate: Rec, mate_info) -> None:
        if mate.flag & 0x4:
            rec.flag |= 0x8
        if mate.flag & 0x10:
            rec.flag |= 0x20
        if mate.rname != "*":
            rec.rnext = "=" if mate.rname == rec.rname else mate.rname
            rec.pnext = mate.pos
        elif mate.pos:
            rec.pnext = mate.pos
        if mate_info is not None:
            rec.tags.append(f"MC:Z:{mate_info[4]}")
            if rec.rname == mate.rname and rec.cigar != "*" and not rec.flag & 0x900:
                own_end = rec.pos + _ref_span(rec.cigar)
                mate_end = mate.pos + mate_info[2]
                lo, hi = min(rec.pos, mate.pos), max(own_end, mate_end)
                rec.tlen = (hi - lo) if rec.pos <= mate.pos else -(hi - lo)

    def long_record(self, big_seq: bool) -> Rec:
        r = self.rng
        p = self.p
        rec = Rec(self.name(), 0)
        if big_seq:
            n = p.long_read_len + r.randrange(5000)
            rec.seq, rec.qual = "".join(r.choices("ACGT", k=n)), "".join(r.choices(QUAL_CHARS, k=n))
            if r.random() < 0.25:
                rec.flag |= 0x4  # a long unplaced read
                rec.tags.append("RG:Z:rgA")
                return rec
            ref, ref_len = p.refs[0]
            rec.rname, rec.pos, rec.cigar, rec.mapq = ref, r.randrange(1, p.tie_window), f"{n}M", 60
        else:
            self.mapped_fields(rec, p.read_len)
            rec.seq, rec.qual = self.seq(p.read_len), self.qual(p.read_len)
            vals = ",".join(str(r.randrange(-(2**31), 2**31)) for _ in range(p.huge_aux_len))
            rec.tags.append(f"ZB:B:i,{vals}")
        if r.random() < 0.5:
            rec.flag |= 0x10
        rec.tags += self.common_tags("rgB", [])
        return rec


def _ref_span(cigar: str) -> int:
    span, num = 0, ""
    for ch in cigar:
        if ch.isdigit():
            num += ch
        else:
            if ch in "MDN=X":
                span += int(num)
            num = ""
    return span



def md_nm(ref: str, pos: int, cigar: str, seq: str, past_end_as_n: bool = False) -> tuple[str, int] | None:
    """MD and NM of a read at 0-based `pos` on `ref`, as `samtools calmd`
    computes them (bases compared without case; an N never matches). A base
    past the reference's end compares as N with `past_end_as_n`, else the
    read has none (None)."""
    import re

    md, nm, run, r, q = [], 0, 0, pos, 0
    for n, op in re.findall(r"(\d+)([MIDNSHP=X])", cigar):
        n = int(n)
        if op in "M=X":
            for k in range(n):
                if r + k < len(ref):
                    a = ref[r + k].upper()
                elif past_end_as_n:
                    a = "N"
                else:
                    return None
                if a == seq[q + k].upper() and a != "N":
                    run += 1
                else:
                    md.append(f"{run}{a}")
                    run, nm = 0, nm + 1
            r, q = r + n, q + n
        elif op == "I":
            q, nm = q + n, nm + n
        elif op == "S":
            q += n
        elif op == "D":
            md.append(f"{run}^{ref[r:r + n].upper()}")
            run, r, nm = 0, r + n, nm + n
        elif op == "N":
            r += n
    md.append(str(run))
    return "".join(md), nm


def generate(p: Params) -> str:
    """SAM text for `p`: header, then records in a shuffled input order, each
    with a unique XI:i index (its input position) when trap tags are on."""
    g = _Gen(p)
    recs: list[Rec] = []
    for t in range(p.n_templates):
        if g.rng.random() < p.paired_fraction:
            recs.extend(g.pair(t))
        else:
            recs.extend(g.single(t))
    for _ in range(p.n_long_reads):
        recs.append(g.long_record(True))
    for _ in range(p.n_huge_aux):
        recs.append(g.long_record(False))
    # Shuffle in blocks so that mates are often near each other (realistic
    # aligner output) but the global order is scrambled.
    g.rng.shuffle(recs)
    out = [header_text(p)]
    for i, rec in enumerate(recs):
        if p.trap_tags:
            rec.tags.insert(0, f"XI:i:{i}")
        out.append(rec.line() + "\n")
    return "".join(out)


# ---- named inputs used by the tests -------------------------------------------


def main_input(seed: int = 11) -> str:
    """~40k records (~13 MB SAM): big enough that `-m 1M` spills many times,
    with a few records longer than a BGZF block."""
    return generate(Params(seed=seed, n_templates=17_000, n_long_reads=3, n_huge_aux=2, header="v15"))


def big_input(seed: int = 12) -> str:
    """~200k short records: makes `samtools sort -m 1M` spill more than 32
    times (it consolidates temp files there), and any sorter with a small
    budget merge many runs."""
    return generate(
        Params(
            seed=seed,
            n_templates=105_000,
            read_len=36,
            trap_tags=True,
            header="plain",
            secondary_fraction=0.0,
            supplementary_fraction=0.0,
            trap_name_fraction=0.2,
        )
    )


def many_refs_input(seed: int = 13) -> str:
    """3000 @SQ lines (tids need two radix bytes) and no @HD line."""
    refs = [(f"contig_{i}", 50_000 + 37 * i) for i in range(2990)]
    refs += [(f"chrUn_KI{i:06d}v1", 200_000) for i in range(10)]
    return generate(Params(seed=seed, n_templates=3000, refs=refs, tie_window=50, header="nohd"))


def names_input(seed: int = 14) -> str:
    """Name-sort traps: the E4 list plus same-name groups with every flag
    combination (R1/R2/neither/both x primary/secondary/supplementary)."""
    p = Params(seed=seed, refs=[("chr1", 100_000)], header="plain")
    lines = [header_text(p)]
    rng = random.Random(seed)
    recs = []
    for nm in E4_NAMES * 2:
        recs.append((nm, rng.choice([0, 16, 4, 0x41, 0x81, 0x101, 0x801])))
    for nm in ["grp7", "grp07", "grp007"]:
        for flag in [0x1, 0x41, 0x81, 0xC1, 0x141, 0x841, 0x941, 0x181, 0x881, 0x4 | 0x41, 0x10 | 0x81, 0]:
            recs.append((nm, flag))
    rng.shuffle(recs)
    for i, (nm, flag) in enumerate(recs):
        unmapped = flag & 0x4
        rname = "*" if unmapped and rng.random() < 0.5 else "chr1"
        pos = 0 if rname == "*" else rng.randrange(1, 50)
        cigar = "*" if unmapped else "10M"
        if flag & 0x1:
            flag |= 0x8  # mate unmapped: no MC needed
        lines.append(
            f"{nm}\t{flag}\t{rname}\t{pos}\t{0 if unmapped else 60}\t{cigar}\t*\t0\t0\tACGTACGTAC\tIIIIIIIIII"
            f"\tXI:i:{i}\tRG:Z:{rng.choice(['rgA', 'rgB', 'rgC'])}\n"
        )
    return "".join(lines)


def unplaced_only_input(seed: int = 15) -> str:
    """Only unplaced reads (tid -1), with POS > 0 and 0x10 on some."""
    return generate(Params(seed=seed, n_templates=800, all_unplaced=True, header="nohd"))


def header_variant_input(variant: str, seed: int = 16) -> str:
    """A small input per header variant (@HD edits, @PG chains)."""
    return generate(Params(seed=seed, n_templates=300, header=variant))


def example_input(seed: int = 2024) -> str:
    """The shipped example: ~200 paired records over 3 references, RG with
    LB, MC tags, some unmapped reads; no trap tags (it should look real)."""
    p = Params(
        seed=seed,
        n_templates=100,
        paired_fraction=1.0,
        trap_tags=False,
        trap_name_fraction=0.0,
        tie_fraction=0.2,
        header="plain",
        secondary_fraction=0.0,
        supplementary_fraction=0.02,
        refs=[("chr1", 248_956), ("chr2", 242_193), ("chrM", 16_569)],
        mate_distance=400,
    )
    return generate(p)


NAMED = {
    "main": main_input,
    "big": big_input,
    "manyrefs": many_refs_input,
    "names": names_input,
    "unplaced": unplaced_only_input,
    "example": example_input,
}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in NAMED:
        sys.exit(f"usage: gen.py {{{'|'.join(NAMED)}}} > out.sam")
    sys.stdout.write(NAMED[sys.argv[1]]())
