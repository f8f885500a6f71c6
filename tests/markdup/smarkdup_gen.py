"""Name-grouped SAM inputs for `alnsort markdup`'s differential tests against samtools markdup 1.24:
templates in duplicate clusters that hunt the traps of the samtools-markdup reference (sections 2 and 6).

Each cluster is one fragment copied a few times with variations: equal or different base qualities
(ties go to the smaller QNAME for pairs, to the earlier read for singles), clips (soft and hard, which
move the unclipped 5' end), read names of 3/4/6/7 colons (optical tiles and distances) or none, UMIs in the
name and in a BC tag, read groups of two libraries, QC-failed copies, pairs with an unmapped mate, orphans
(a paired read without its mate), supplementary (with SA) and secondary records, reads hanging off the end
of a reference, FF/RR/RF pairs (F1F2 against F2F1), input records already flagged 0x400 with dt/do tags,
QUAL '*', and reads longer than a small `-l`.
"""

from __future__ import annotations

import random

REFS = [("chr1", 6000), ("chr2", 3000), ("chr3", 700)]
GROUPS = [("rgA", "lib1"), ("rgB", "lib1"), ("rgC", "lib2")]
BASES = "ACGT"


def header() -> str:
    lines = ["@HD\tVN:1.6\tSO:unsorted"]
    lines += [f"@SQ\tSN:{n}\tLN:{ln}" for n, ln in REFS]
    lines += [f"@RG\tID:{i}\tLB:{lb}\tSM:s1" for i, lb in GROUPS]
    lines.append("@PG\tID:aligner\tPN:aligner\tVN:1")
    return "\n".join(lines) + "\n"


def _qual(rng: random.Random, n: int, level: int | None = None) -> str:
    if level is not None:
        return chr(33 + level) * n
    # Around the threshold: 14 does not count, 15 does.
    return "".join(chr(33 + rng.choice([2, 14, 15, 20, 30, 37, 40])) for _ in range(n))


def _seq(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(BASES) for _ in range(n))


def _cigar(rng: random.Random, length: int, clip_style: int, simple: bool = False) -> tuple[str, int]:
    """A CIGAR for `length` query bases and its reference span (`simple`: no indels; fixmate's
    sanitizer mangles hard-clipped CIGARs with a deletion that overhang the reference's end)."""
    lead = trail = ""
    lead_n = trail_n = 0
    if clip_style == 1:
        lead_n = rng.randint(1, 6)
        lead = f"{lead_n}S"
    elif clip_style == 2:
        trail_n = rng.randint(1, 6)
        trail = f"{trail_n}S"
    elif clip_style == 3:
        lead = f"{rng.randint(1, 5)}H"
    elif clip_style == 4:
        trail = f"{rng.randint(1, 5)}H"
    elif clip_style == 5:
        lead_n = rng.randint(1, 4)
        lead = f"{rng.randint(1, 3)}H{lead_n}S"
    mid = length - lead_n - trail_n
    if not simple and mid > 12 and rng.random() < 0.2:
        a = mid // 2
        d = rng.randint(1, 3)
        return f"{lead}{a}M{d}D{mid - a}M{trail}", mid + d
    if not simple and mid > 12 and rng.random() < 0.1:
        a = mid // 2
        return f"{lead}{a}M2I{mid - a - 2}M{trail}", mid - 2
    return f"{lead}{mid}M{trail}", mid


class Gen:
    def __init__(self, seed: int, *, long_reads: bool = False):
        self.rng = random.Random(seed)
        self.n = 0
        self.long_reads = long_reads
        self.templates: list[list[str]] = []
        self.used: set[str] = set()

    def name(self, style: str, tile: int, x: int, y: int, umi: str) -> str:
        """A unique read name of `style`; names of one tile share everything before x (so optical
        duplicates are found by tile and distance), a taken name moves y by one."""
        self.n += 1
        while True:
            if style == "c3":
                name = f"{tile % 10}:{tile}:{x}:{y}"
            elif style == "c4":
                name = f"M1:1:{tile}:{x}:{y}"
            elif style == "c6":
                name = f"M1:7:FC:1:{tile}:{x}:{y}"
            elif style == "c7":
                name = f"M1:7:FC:1:{tile}:{x}:{y}:{umi}"
            elif style == "c5":
                name = f"M1:7:FC:{tile}:{x}:{y}"
            else:
                name = f"read{self.n:05d}"
            if name not in self.used:
                self.used.add(name)
                return name
            y += 1

    def record(self, name, flag, ref, pos, cigar, length, qual, tags, mapq=None):
        seq = _seq(self.rng, length)
        if qual == "*":
            q = "*"
        else:
            q = qual
        mq = mapq if mapq is not None else self.rng.choice([0, 20, 60])
        rname = ref if ref else "*"
        fields = [name, str(flag), rname, str(pos), str(mq if ref else 0), cigar if ref else "*", "*", "0", "0", seq, q]
        return "\t".join(fields + tags)

    def cluster(self) -> None:
        rng = self.rng
        ri = rng.choice([0, 0, 1, 2])
        ref, ln = REFS[ri]
        maxlen = 160 if self.long_reads else 60
        length = rng.randint(30, maxlen)
        paired_cluster = rng.random() < 0.75
        insert = rng.randint(length, 300)
        off_end = rng.random() < 0.08
        if off_end:
            start = ln - rng.randint(5, length)
        else:
            start = rng.randint(1, max(1, ln - insert - 10))
        strand1 = rng.random() < 0.5
        # mate strand: usually opposite (FR/RF), sometimes the same (FF/RR)
        strand2 = (not strand1) if rng.random() < 0.8 else strand1
        copies = rng.choice([1, 2, 2, 3, 3, 4, 5])
        style = rng.choice(["c3", "c4", "c6", "c7", "c7", "c5", "plain"])
        tile = rng.choice([1101, 1102, 2101])
        bx, by = rng.randint(1000, 20000), rng.randint(1000, 20000)
        umi_pool = ["ACGTAC", "TTGACA", "ACGTAC"]
        rgs = [g for g, _ in GROUPS]
        same_qual = rng.random() < 0.35
        base_level = rng.choice([15, 30, 37])
        for c in range(copies):
            near = rng.random() < 0.6
            t = tile if near or rng.random() < 0.5 else rng.choice([1101, 1102, 2101])
            x = bx + (rng.randint(-60, 60) if near else rng.randint(-5000, 5000))
            y = by + (rng.randint(-60, 60) if near else rng.randint(-5000, 5000))
            umi = rng.choice(umi_pool)
            name = self.name(style, t, max(x, 0), max(y, 0), umi)
            rg = rng.choice(rgs + ["none"] if rng.random() < 0.1 else rgs)
            tags = [] if rg == "none" else [f"RG:Z:{rg}"]
            if rng.random() < 0.5:
                tags.append(f"BC:Z:{umi}")
            qc = 0x200 if rng.random() < 0.07 else 0
            dup_in = 0x400 if rng.random() < 0.05 else 0
            if dup_in and rng.random() < 0.5:
                tags += ["dt:Z:LB", "do:Z:elsewhere"]
            clip1 = rng.choice([0, 0, 0, 1, 2, 3, 4, 5])
            clip2 = rng.choice([0, 0, 0, 1, 2, 3, 4, 5])
            lvl = base_level if same_qual else None
            qual1 = "*" if rng.random() < 0.03 else _qual(rng, length, lvl)
            qual2 = _qual(rng, length, lvl)
            jitter = 0 if rng.random() < 0.7 else rng.randint(-3, 3)
            p1 = max(1, start + jitter)
            cig1, span1 = _cigar(rng, length, clip1, off_end)
            recs: list[str] = []
            if paired_cluster and rng.random() < 0.95:
                kind = rng.random()
                p2 = max(1, start + insert - length + (0 if rng.random() < 0.7 else rng.randint(-3, 3)))
                cig2, _ = _cigar(rng, length, clip2, off_end)
                swap = rng.random() < 0.3  # F2F1 against F1F2
                f1 = 0x1 | (0x80 if swap else 0x40) | (0x10 if strand1 else 0) | qc | dup_in
                f2 = 0x1 | (0x40 if swap else 0x80) | (0x10 if strand2 else 0) | qc | dup_in
                if kind < 0.08:
                    # mate unmapped
                    recs.append(self.record(name, f1 | 0x8, ref, p1, cig1, length, qual1, tags))
                    recs.append(self.record(name, f2 | 0x4, None, 0, "*", length, qual2, tags))
                elif kind < 0.13:
                    # orphan: the mate's record is missing
                    recs.append(self.record(name, f1, ref, p1, cig1, length, qual1, tags))
                elif kind < 0.16:
                    # stale 0x8 on a mapped mate
                    recs.append(self.record(name, f1 | 0x8, ref, p1, cig1, length, qual1, tags))
                    recs.append(self.record(name, f2, ref, p2, cig2, length, qual2, tags))
                elif kind < 0.19:
                    # mate on another reference
                    oref = REFS[(ri + 1) % len(REFS)]
                    recs.append(self.record(name, f1, ref, p1, cig1, length, qual1, tags))
                    recs.append(self.record(name, f2, oref[0], rng.randint(1, oref[1] - length), cig2, length, qual2, tags))
                else:
                    recs.append(self.record(name, f1, ref, p1, cig1, length, qual1, tags))
                    recs.append(self.record(name, f2, ref, p2, cig2, length, qual2, tags))
                if rng.random() < 0.12 and kind >= 0.13:
                    # a supplementary piece of read 1, with SA on both
                    sp = rng.randint(1, REFS[0][1] - 40)
                    sa = f"SA:Z:chr1,{sp},+,20M{length - 20}S,30,0;"
                    recs[0] = recs[0] + "\t" + sa
                    recs.append(
                        self.record(name, (f1 & ~0x10) | 0x800, "chr1", sp, f"20M{length - 20}H", 20, _qual(rng, 20), tags + [sa])
                    )
                if rng.random() < 0.06:
                    sp = rng.randint(1, REFS[1][1] - length)
                    recs.append(self.record(name, f1 | 0x100, "chr2", sp, f"{length}M", length, qual1, tags))
                if rng.random() < 0.05 and len(recs) > 1 and "XA:Z" not in recs[1]:
                    recs[1] = recs[1] + "\tXA:Z:chr3,+100,20M,1;"
            else:
                f = (0x10 if strand1 else 0) | qc | dup_in
                recs.append(self.record(name, f, ref, p1, cig1, length, qual1, tags))
                if rng.random() < 0.08:
                    sp = rng.randint(1, REFS[2][1] - 40)
                    sa = f"SA:Z:chr3,{sp},+,20M{length - 20}S,30,0;"
                    recs[0] = recs[0] + "\t" + sa
                    recs.append(
                        self.record(name, (f & ~0x10) | 0x800, "chr3", sp, f"20M{length - 20}H", 20, _qual(rng, 20), tags + [sa])
                    )
            self.templates.append(recs)

    def unmapped_pairs(self, k: int) -> None:
        for _ in range(k):
            name = self.name("plain", 0, 0, 0, "")
            q = _qual(self.rng, 40)
            self.templates.append(
                [
                    self.record(name, 0x1 | 0x4 | 0x8 | 0x40, None, 0, "*", 40, q, []),
                    self.record(name, 0x1 | 0x4 | 0x8 | 0x80, None, 0, "*", 40, q, []),
                ]
            )


def generate(seed: int, clusters: int = 120, *, long_reads: bool = False) -> str:
    g = Gen(seed, long_reads=long_reads)
    for _ in range(clusters):
        g.cluster()
    g.unmapped_pairs(3)
    g.rng.shuffle(g.templates)
    body = "\n".join("\n".join(t) for t in g.templates)
    return header() + body + "\n"
