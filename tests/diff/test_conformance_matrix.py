"""A generated conformance matrix: alnsort against samtools 1.24 (pysam
0.24.1) on CRAMs of every version and codec/option combination htslib 1.24
offers, on CRAMs written by htsjdk (Picard 3.4.0), on SAM/BAM with unusual
traits, and on damaged CRAMs.

Contracts under test:
* Each well-formed input, sorted by alnsort in coordinate order and with
  `-n`, gives records and header lines (@PG aside) identical to what
  `samtools sort` gives for the same file with the same reference.
* A damaged CRAM (cut at several offsets, bytes flipped inside containers)
  gives an error (exit status other than 0 and 101, no "panicked", no output
  file and nothing else left in the directory) or, when alnsort accepts it,
  exactly the records samtools sort gives for it; never a hang (each run is
  bounded by a timeout).

Everything is generated here from a seeded generator: a reference FASTA
(one sequence partly lowercase, one with N runs, one short enough that
reads run past its end) and a SAM with pairs (same and different
references, mate unmapped, both unmapped placed and unplaced), secondary and
supplementary records, soft and hard clips, insertions, deletions, skips,
padding, =/X operations, mismatches, N bases, lowercase bases, SEQ/QUAL `*`,
correct and wrong MD/NM tags, and tags of every type (A, c/C/s/S/i/I by
value, f, Z, H, B of each subtype).

The htslib options matrix (from htslib 1.24's `cram_option` names, checked
against its library): `use_bzip2`, `use_lzma` (all versions), `use_rans`
(3.0 and 3.1; 2.1 has no rANS), `use_tok`, `use_arith`, `use_fqz` (3.1
only), `lossy_names`, `seqs_per_slice`, `bases_per_slice`,
`slices_per_container`, `multi_seq_per_slice`, `embed_ref` (1, and 2: the
consensus, made from the records), `no_ref`, `store_md`, `store_nm`,
`ignore_md5` (a writer option), `pos_delta`, and the `fast`/`small`/
`archive` profiles.

Reads that run past the end of their reference and reads over the
reference's N runs are kept to inputs of their own (`ends-*`, `refn-*`),
so that MD/NM differences there would not hide the codec matrix.

Known failures today, each `xfail(strict=True)` so that the case turns red
when the fix lands and the mark must go (XFAIL and DAMAGE_XFAIL below):
none at present. (CRAM 2.1 input, MD/NM past the reference end and over
reference N runs, and a CRAM cut inside the padding of its header
container were marked so until their fixes landed.)
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
import gen
import oracle
import pytest
from harness import assert_same_text, run_alnsort

ORDERS = {"coord": [], "name": ["-n"]}
REFS = (("m1", 9000), ("m2", 5000), ("m3", 700))


# ---- generated reference and SAM ---------------------------------------------------

def _reference(rng: random.Random) -> dict[str, str]:
    seqs = {name: "".join(rng.choice("ACGT") for _ in range(n)) for name, n in REFS}
    s = seqs["m1"]
    seqs["m1"] = s[:2000] + s[2000:3500].lower() + s[3500:]
    s = seqs["m2"]
    seqs["m2"] = s[:1000] + "N" * 60 + s[1060:4000] + "n" * 10 + s[4010:]
    return seqs


def _write_fasta(path: Path, seqs: dict[str, str]) -> None:
    with open(path, "w") as fh:
        for name, s in seqs.items():
            fh.write(f">{name} matrix\n")
            for i in range(0, len(s), 70):
                fh.write(s[i : i + 70] + "\n")


def _qual(rng: random.Random, n: int) -> str:
    """Qualities shaped as a sequencer's (falling along the read, with
    noise), what htslib's fqzcomp is chosen for; now and then flat noise."""
    if rng.random() < 0.1:
        return "".join(chr(33 + rng.randrange(42)) for _ in range(n))
    return "".join(chr(33 + max(2, 38 - 24 * i // max(n, 1) + rng.randrange(-2, 3))) for i in range(n))


def _tags(rng: random.Random, i: int) -> list[str]:
    pick = [
        f"XA:A:{rng.choice('az!~')}",
        f"Xc:i:{rng.randrange(-128, 0)}",
        f"XC:i:{rng.randrange(128, 256)}",
        f"Xs:i:{rng.randrange(-32768, -129)}",
        f"XS:i:{rng.randrange(256, 65536)}",
        f"Xi:i:{rng.randrange(-2**31, -32769)}",
        f"XU:i:{rng.randrange(65536, 2**32)}",
        f"Xf:f:{rng.choice(['1.5', '-0.25', '3e+07', '0'])}",
        f"XZ:Z:{rng.choice(['', 'hello world', 'a' * 300, 'x:y:z'])}",
        f"XH:H:{rng.choice(['', '1AE3', '00FF'])}",
        f"Bc:B:c,{','.join(str(rng.randrange(-128, 128)) for _ in range(rng.randrange(1, 5)))}",
        f"BC:B:C,{','.join(str(rng.randrange(256)) for _ in range(3))}",
        f"Bs:B:s,{','.join(str(rng.randrange(-32768, 32768)) for _ in range(2))}",
        f"BS:B:S,{rng.randrange(65536)}",
        f"Bi:B:i,{rng.randrange(-2**31, 2**31)},{rng.randrange(-5, 5)}",
        f"BI:B:I,{rng.randrange(2**32)}",
        f"Bf:B:f,{rng.choice(['0.5', '-1e3', '2'])},7",
        "BE:B:c",
    ]
    out = [f"XI:i:{i}"]
    out += rng.sample(pick, rng.randrange(0, 6))
    if rng.random() < 0.5:
        out.append(f"RG:Z:{rng.choice(['g1', 'g2'])}")
    return out


def _aligned(rng: random.Random, ref: str, pos: int, length: int) -> tuple[str, str, int]:
    """A CIGAR and read bases for a read starting at 0-based `pos`, with
    clips, indels, mismatches and Ns; returns (cigar, seq, reference span)."""
    ops: list[tuple[int, str]] = []
    seq: list[str] = []
    r = pos
    if rng.random() < 0.2:
        ops.append((rng.randrange(1, 20), "H"))
    if rng.random() < 0.3:
        k = rng.randrange(1, 15)
        ops.append((k, "S"))
        seq += [rng.choice("ACGTN") for _ in range(k)]
    remaining = length
    while remaining > 0:
        m = min(remaining, rng.randrange(5, 60))
        op = rng.choice("MMMMM=X") if rng.random() < 0.15 else "M"
        ops.append((m, op))
        for k in range(m):
            b = ref[r + k] if r + k < len(ref) else rng.choice("ACGT")
            if op == "X" or rng.random() < 0.02:
                b = rng.choice([c for c in "ACGT" if c != b.upper()])
            elif rng.random() < 0.005:
                b = "N"
            seq.append(b)
        r += m
        remaining -= m
        if remaining > 10 and rng.random() < 0.25:
            kind = rng.choice("IDDNP")
            k = rng.randrange(1, 6)
            if kind in "DN" and r + 50 * k >= len(ref):
                # samtools 1.24 cannot read back a CRAM where a deletion or
                # skip runs past the reference end ("CRAM CIGAR extends
                # beyond slice reference extents"): bases only go past it.
                kind = "I"
            if kind == "I":
                seq += [rng.choice("ACGT") for _ in range(k)]
                remaining -= k
            elif kind in "DN":
                r += k if kind == "D" else 50 * k
            ops.append((k, kind))
    if rng.random() < 0.3:
        k = rng.randrange(1, 15)
        ops.append((k, "S"))
        seq += [rng.choice("ACGT") for _ in range(k)]
    if rng.random() < 0.2:
        ops.append((rng.randrange(1, 20), "H"))
    s = "".join(seq)
    if rng.random() < 0.1:
        s = s.lower()
    return "".join(f"{n}{o}" for n, o in ops), s, r - pos


N_RUNS = {"m2": [(1000, 1060), (4000, 4010)]}


def _sam(rng: random.Random, seqs: dict[str, str], n: int = 420, special: str | None = None) -> str:
    """The generated records. Reads that run past the end of their
    reference (`special="ends"`) and reads over the reference's N runs
    (`special="refn"`) are kept to inputs of their own (see the module
    docstring); other reads stay clear of both."""
    lines = ["@HD\tVN:1.6\tSO:unsorted"]
    lines += [f"@SQ\tSN:{name}\tLN:{len(s)}" for name, s in seqs.items()]
    lines += ["@RG\tID:g1\tSM:s1\tLB:l1", "@RG\tID:g2\tSM:s2\tLB:l2", "@CO\tconformance matrix"]
    names = list(seqs)
    i = 0

    def mapped(name: str, flag: int, chrom: str, length: int, near_end: bool = False, at_n: bool = False):
        ref = seqs[chrom]
        if near_end:
            pos = len(ref) - rng.randrange(5, length)
        elif at_n:
            a, b = rng.choice(N_RUNS[chrom])
            pos = max(0, rng.randrange(a - length + 1, b))
        else:
            while True:
                pos = rng.randrange(0, len(ref) - length - 400)
                if not any(pos < b + 300 and a < pos + length + 300 for a, b in N_RUNS.get(chrom, [])):
                    break
        cigar, seq, span = _aligned(rng, ref, pos, length)
        qual = "*" if rng.random() < 0.1 else _qual(rng, len(seq))
        return [name, flag, chrom, pos + 1, rng.choice([0, 1, 37, 60, 255]), cigar, seq, qual, span]

    out = []
    while i < n:
        kind = rng.randrange(10)
        rname = rng.choice([f"A00123:8:H5KJDSX2:{rng.randrange(1, 3)}:1101:{rng.randrange(1000, 32000)}:{i + 1000}"] * 6
                           + [f"r{i}", f"read:{rng.randrange(99)}:{i}", f"SRR1.{i}", f"x{i:05d}"])
        if kind <= 3:  # a pair, both mapped
            c1 = rng.choice(names[:2])
            c2 = c1 if rng.random() < 0.8 else rng.choice(names)
            a = mapped(rname, 0, c1, rng.randrange(30, 150))
            b = mapped(rname, 0, c2, rng.randrange(30, 150))
            for x, y, first in ((a, b, True), (b, a, False)):
                flag = 1 | (0x40 if first else 0x80) | (0x2 if c1 == c2 else 0)
                flag |= 0x10 if rng.random() < 0.5 else 0
                flag |= 0x20 if rng.random() < 0.5 else 0
                rnext = "=" if x[2] == y[2] else y[2]
                tlen = (y[3] - x[3] + (y[8] if first else -x[8])) if x[2] == y[2] else 0
                out.append((x, flag, rnext, y[3], tlen))
        elif kind == 4:  # mate unmapped, placed at its mate
            a = mapped(rname, 0, rng.choice(names), rng.randrange(30, 100))
            seq = "".join(rng.choice("ACGTN") for _ in range(50))
            out.append((a, 0x1 | 0x8 | 0x40, "=", a[3], 0))
            u = [rname, 0, a[2], a[3], 0, "*", seq, _qual(rng, 50), 0]
            out.append((u, 0x1 | 0x4 | 0x80, "=", a[3], 0))
        elif kind == 5:  # unplaced unmapped pair, or a lone unmapped read
            seq = "".join(rng.choice("ACGTN") for _ in range(rng.randrange(1, 80)))
            u = [rname, 0, "*", 0, 0, "*", seq, _qual(rng, len(seq)), 0]
            if rng.random() < 0.5:
                out.append((u, 0x4, "*", 0, 0))
            else:
                out.append((u, 0x1 | 0x4 | 0x8 | 0x40, "*", 0, 0))
                out.append((list(u), 0x1 | 0x4 | 0x8 | 0x80, "*", 0, 0))
        elif kind == 6:  # secondary / supplementary
            a = mapped(rname, 0, rng.choice(names), rng.randrange(30, 120))
            out.append((a, rng.choice([0x100, 0x800, 0x810, 0x110]), "*", 0, 0))
        elif kind == 7 and special == "ends":  # past the reference end (the short reference mostly)
            a = mapped(rname, 0, rng.choice(["m3", "m3", "m1"]), rng.randrange(30, 90), near_end=True)
            out.append((a, rng.choice([0, 16]), "*", 0, 0))
        elif kind == 7 and special == "refn":  # over the reference's N runs
            a = mapped(rname, 0, "m2", rng.randrange(20, 90), at_n=True)
            out.append((a, rng.choice([0, 16]), "*", 0, 0))
        elif kind == 8:  # SEQ *, or QC fail / duplicate
            a = mapped(rname, 0, rng.choice(names), rng.randrange(20, 60))
            if rng.random() < 0.5:
                a[6], a[7] = "*", "*"
                out.append((a, 0x100, "*", 0, 0))
            else:
                out.append((a, rng.choice([0x200, 0x400]), "*", 0, 0))
        else:  # single mapped read
            a = mapped(rname, 0, rng.choice(names), rng.randrange(10, 200))
            out.append((a, rng.choice([0, 16]), "*", 0, 0))
        i = len(out)
    for k, (a, flag, rnext, pnext, tlen) in enumerate(out):
        tags = _tags(rng, k)
        if a[5] != "*" and a[6] != "*" and rng.random() < 0.3:
            mdnm = gen.md_nm(seqs[a[2]], a[3] - 1, a[5], a[6]) if "P" not in a[5] else None
            if mdnm is not None:
                md, nm = mdnm
                if rng.random() < 0.2:
                    nm += 1  # a wrong NM: kept verbatim by CRAM
                tags += [f"MD:Z:{md}", f"NM:i:{nm}"]
        lines.append("\t".join(map(str, [a[0], flag, a[2], a[3], a[4], a[5], rnext, pnext, tlen, a[6], a[7], *tags])))
    return "\n".join(lines) + "\n"


# ---- the matrix ----------------------------------------------------------------------------

SAMTOOLS_CRAMS = {
    # version 3.0
    "3.0-default": "version=3.0",
    "3.0-gzip-only": "version=3.0,use_rans=0",
    "3.0-bzip2": "version=3.0,use_bzip2=1",
    "3.0-lzma": "version=3.0,use_lzma=1,use_rans=0",
    "3.0-lossy-names": "version=3.0,lossy_names=1",
    "3.0-small-slices": "version=3.0,seqs_per_slice=23,slices_per_container=3",
    "3.0-bases-per-slice": "version=3.0,bases_per_slice=2000",
    "3.0-multi-seq": "version=3.0,multi_seq_per_slice=1,seqs_per_slice=60",
    "3.0-embed-ref": "version=3.0,embed_ref=1",
    "3.0-embed-consensus": "version=3.0,embed_ref=2",
    "3.0-no-ref": "version=3.0,no_ref=1",
    "3.0-store-md-nm": "version=3.0,store_md=1,store_nm=1",
    "3.0-ignore-md5": "version=3.0,ignore_md5=1",
    "3.0-no-pos-delta": "version=3.0,pos_delta=0",
    "3.0-fast": "version=3.0,fast",
    "3.0-archive": "version=3.0,archive",
    # version 3.1
    "3.1-default": "version=3.1",
    "3.1-no-tok": "version=3.1,use_tok=0",
    "3.1-arith": "version=3.1,use_arith=1",
    "3.1-fqz": "version=3.1,use_fqz=1",
    "3.1-small": "version=3.1,small",
    "3.1-archive": "version=3.1,archive",
    "3.1-archive-bzip2-lzma": "version=3.1,archive,use_bzip2=1,use_lzma=1",
    "3.1-lossy-names": "version=3.1,lossy_names=1",
    "3.1-one-per-slice": "version=3.1,seqs_per_slice=1,slices_per_container=4",
    "3.1-embed-ref": "version=3.1,embed_ref=1",
    "3.1-no-ref": "version=3.1,no_ref=1,use_fqz=1",
    "3.1-store-md-nm": "version=3.1,store_md=1,store_nm=1",
    "3.1-multi-seq": "version=3.1,multi_seq_per_slice=1,seqs_per_slice=50",
    # version 2.1 (no rANS there)
    "2.1-default": "version=2.1",
    "2.1-bzip2-lzma": "version=2.1,use_bzip2=1,use_lzma=1",
    "2.1-embed-ref": "version=2.1,embed_ref=1",
    "2.1-no-ref": "version=2.1,no_ref=1",
    # reads past the end of the reference
    "ends-3.0": "version=3.0",
    "ends-3.1": "version=3.1",
    "ends-3.1-store-md-nm": "version=3.1,store_md=1,store_nm=1",
    "ends-3.1-embed-ref": "version=3.1,embed_ref=1",
    "ends-3.0-embed-consensus": "version=3.0,embed_ref=2",
    # reads over N runs of the reference
    "refn-3.0": "version=3.0",
    "refn-3.1": "version=3.1",
}

# Cases that fail today, each naming the issue whose fix must remove it.
XFAIL: dict[str, str] = {}

HTSJDK_CRAMS = ("htsjdk-unsorted", "htsjdk-coordinate")

# SAM/BAM traits samtools' reader keeps and a sort must carry through.
OTHER_INPUTS = ("sam-unusual", "bam-unusual", "sam-no-sq", "bam-level0")

CASES = [*SAMTOOLS_CRAMS, *HTSJDK_CRAMS, *OTHER_INPUTS]


def _picard() -> list[str] | None:
    env = os.environ.get("ALNSORT_PICARD_LIB")
    lib = Path(env) if env else harness.REPO_ROOT / ".tools" / "picard" / "lib"
    if shutil.which("java") is None or not any(lib.glob("picard-3.4.0*.jar")):
        return None
    return ["java", "-Xmx1g", "-cp", str(lib / "*"), "picard.cmdline.PicardCommandLine"]


def _unusual_sam(rng: random.Random, seqs: dict[str, str]) -> str:
    """SAM text with traits a parser must keep: @SQ extra fields and a
    long @CO, an @HD with GO, a 254-character name, CIGAR-only records
    with SEQ *, a record with every base N, MAPQ 255, PNEXT without RNEXT
    and an RNEXT naming another reference, a B array of 500 values."""
    head = ["@HD\tVN:1.4\tGO:query", "@CO\t" + "c" * 2000]
    head += [f"@SQ\tSN:{name}\tLN:{len(s)}\tAS:x\tSP:y" for name, s in seqs.items()]
    recs = [
        "n" * 254 + "\t0\tm1\t100\t255\t10M\t*\t0\t0\tACGTACGTAC\t*",
        "cig\t0\tm2\t50\t30\t5M2D5M\t*\t0\t0\t*\t*\tXI:i:1",
        "alln\t16\tm1\t200\t0\t20M\t*\t0\t0\t" + "N" * 20 + "\t" + "!" * 20,
        "pn\t1\tm1\t300\t10\t4M\tm2\t20\t0\tACGT\tIIII",
        "big\t0\tm3\t10\t5\t3M\t*\t0\t0\tAAA\t###\tZB:B:I," + ",".join(str(rng.randrange(2**32)) for _ in range(500)),
        "lower\t0\tm3\t600\t60\t150M\t*\t0\t0\t" + "acgtn" * 30 + "\t*",
        "eq\t0\tm1\t400\t60\t3=1X2=\t*\t0\t0\tACGTAC\t*",
        "zero\t4\tm2\t0\t0\t*\t*\t0\t0\tA\t!",
    ]
    for k in range(200):
        pos = rng.randrange(1, 600)
        recs.append(f"t{k % 7}\t{rng.choice([0, 16, 256, 2048])}\tm3\t{pos}\t{rng.randrange(61)}\t8M\t*\t0\t0\tACGTACGT\t*\tXI:i:{k + 10}")
    return "\n".join(head + recs) + "\n"


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("matrix")
    rng = random.Random(2126)
    seqs = _reference(rng)
    ref = d / "ref.fa"
    _write_fasta(ref, seqs)
    oracle.samtools("faidx", str(ref))
    sam = d / "in.sam"
    sam.write_text(_sam(rng, seqs))
    special = {}
    for what in ("ends", "refn"):
        special[what] = d / f"{what}.sam"
        special[what].write_text(_sam(rng, seqs, 200, special=what))
    files: dict[str, Path] = {}

    def samtools_cram(name: str) -> None:
        out = d / f"{name}.cram"
        src = special.get(name.split("-")[0], sam)
        oracle.samtools("view", "--no-PG", "-O", f"cram,{SAMTOOLS_CRAMS[name]}", "-T", str(ref), "-o", str(out), str(src))
        files[name] = out

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(samtools_cram, SAMTOOLS_CRAMS))
    unusual = d / "unusual.sam"
    unusual.write_text(_unusual_sam(rng, seqs))
    files["sam-unusual"] = unusual
    oracle.samtools("view", "--no-PG", "-b", "-o", str(d / "unusual.bam"), str(unusual))
    files["bam-unusual"] = d / "unusual.bam"
    nosq = d / "nosq.sam"
    nosq.write_text("@HD\tVN:1.6\n@CO\tno references\n" + "".join(
        f"u{k}\t4\t*\t0\t0\t*\t*\t0\t0\t{'ACGT' * (k % 5 + 1)}\t*\tXI:i:{k}\n" for k in range(50)))
    files["sam-no-sq"] = nosq
    oracle.samtools("view", "--no-PG", "-O", "bam,level=0", "-o", str(d / "level0.bam"), str(sam))
    files["bam-level0"] = d / "level0.bam"
    picard = _picard()
    if picard is not None:
        oracle.samtools("dict", "-o", str(d / "ref.dict"), str(ref))
        coord = d / "coord.bam"
        oracle.samtools("sort", "--no-PG", "-o", str(coord), str(sam))
        for name, src in (("htsjdk-unsorted", sam), ("htsjdk-coordinate", coord)):
            out = d / f"{name}.cram"
            subprocess.run([*picard, "SamFormatConverter", f"I={src}", f"O={out}", f"R={ref}",
                            "VALIDATION_STRINGENCY=SILENT", "VERBOSITY=ERROR", "QUIET=true"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
            files[name] = out
    return {"ref": ref, "files": files, "dir": d}


def _samtools_sorted(order: list[str], src: Path, ref: Path) -> str:
    res = oracle.samtools("sort", *order, "--reference", str(ref), "-O", "SAM", "-o", "-", str(src))
    return oracle.strip_pg(res.stdout.decode())


def _alnsort_sorted(order: list[str], src: Path, ref: Path, tmp: Path) -> str:
    out = tmp / "out.sam"
    res = run_alnsort([*order, "--reference", str(ref), "-O", "sam", "-o", str(out), str(src)])
    harness.check_ok(res)
    return oracle.strip_pg(out.read_text())


def _case_params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[case])] if case in XFAIL else []
        yield pytest.param(case, marks=marks, id=case)


@pytest.mark.parametrize("case", list(_case_params()))
def test_matrix_sorts_as_samtools(alnsort_bin, matrix, tmp_path, case):
    """Both orders, records and header lines (@PG aside) as samtools sort."""
    if case not in matrix["files"]:
        msg = f"{case}: java or Picard 3.4.0 not installed (run `bash scripts/picard.sh` or set ALNSORT_PICARD_LIB)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    src = matrix["files"][case]
    for name, order in ORDERS.items():
        expected = _samtools_sorted(order, src, matrix["ref"])
        assert expected.count("\n") > 50, f"{case}: samtools gave only {expected.count(chr(10))} lines"
        got = _alnsort_sorted(order, src, matrix["ref"], tmp_path)
        assert_same_text(expected, got, f"{case}, order={name}")


def test_matrix_inputs_use_what_they_name(matrix):
    """The matrix really holds what its names say: the CRAM version in each
    file definition, and the block codecs the options ask for."""
    files = matrix["files"]
    for name in SAMTOOLS_CRAMS:
        data = files[name].read_bytes()
        major, minor = data[4], data[5]
        assert f"version={major}.{minor}" in SAMTOOLS_CRAMS[name], name
    methods = {name: {m for _, _, m, _, _ in harness.cram_blocks(files[name].read_bytes())}
               for name in SAMTOOLS_CRAMS if not name.startswith("2.1")}
    # CRAM block methods: 1 gzip, 2 bzip2, 3 lzma, 4 rANS4x8, 5 rANSNx16,
    # 6 adaptive arithmetic, 7 fqzcomp, 8 name tokeniser.
    assert 4 not in methods["3.0-gzip-only"] and 2 not in methods["3.0-gzip-only"]
    assert 2 in methods["3.0-bzip2"] and 3 in methods["3.0-lzma"]
    assert 8 in methods["3.1-default"] and 8 not in methods["3.1-no-tok"]
    # (htslib 1.24 picks fqzcomp for none of these small inputs, whatever
    # use_fqz says: test_cram.py's archive profile covers method 7.)
    assert 6 in methods["3.1-arith"] and 6 in methods["3.1-archive"]
    assert 2 in methods["3.1-archive-bzip2-lzma"] and 2 in methods["3.1-small"]


# ---- damaged CRAMs --------------------------------------------------------------------------

DAMAGE = ("cut-file-definition", "cut-in-header-container", "cut-in-header-padding", "cut-after-header-container",
          "cut-in-container-length", "cut-in-container-header", "cut-in-slice", "cut-half",
          "cut-before-eof-container", "cut-last-byte", "flip-0", "flip-1", "flip-2", "flip-3", "flip-4")
# Damages that fail today, each naming the issue whose fix must remove it.
DAMAGE_XFAIL: dict[str, str] = {}


def _damage(data: bytes, how: str) -> bytes:
    ends = [c[3] for c in harness.cram_containers(data)]
    starts = [26, *ends[:-1]]  # [0] the header container, [1] the first data container
    cuts = {
        "cut-file-definition": 20,
        "cut-in-header-container": 40,
        "cut-in-header-padding": starts[1] - 1,
        "cut-after-header-container": starts[1],
        "cut-in-container-length": starts[1] + 1,
        "cut-in-container-header": starts[1] + 7,
        "cut-in-slice": starts[2] + 30,
        "cut-half": len(data) // 2,
        "cut-before-eof-container": starts[-1],
        "cut-last-byte": len(data) - 1,
    }
    if how in cuts:
        return data[: cuts[how]]
    rng = random.Random(how)
    b = bytearray(data)
    at = rng.randrange(starts[1], len(data) - 40)
    for j in range(rng.randrange(1, 4)):
        b[at + j] ^= 1 << rng.randrange(8)
    return bytes(b)


def _damage_params():
    for name in ("3.0-small-slices", "3.1-archive"):
        for how in DAMAGE:
            marks = [pytest.mark.xfail(strict=True, reason=DAMAGE_XFAIL[how])] if how in DAMAGE_XFAIL else []
            yield pytest.param(name, how, marks=marks, id=f"{name}-{how}")


@pytest.mark.parametrize("name,how", list(_damage_params()))
def test_damaged_cram_errors_or_matches_samtools(alnsort_bin, matrix, tmp_path, name, how):
    """A damaged CRAM: an error naming the file that leaves nothing
    behind, or (where alnsort reads it) samtools' own records for it, and
    only where samtools reads it too."""
    ref = matrix["ref"]
    src = tmp_path / "bad.cram"
    src.write_bytes(_damage(matrix["files"][name].read_bytes(), how))
    out = tmp_path / "out.sam"
    res = run_alnsort(["--reference", str(ref), "-O", "sam", "-o", str(out), str(src)], cwd=str(tmp_path))
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode != 101 and "panicked" not in err, (res.returncode, err)
    if res.returncode == 0:
        theirs = oracle.samtools("sort", "--reference", str(ref), "-O", "SAM", "-o", "-", str(src), check=False)
        assert theirs.returncode == 0, ("alnsort read a file samtools refuses", theirs.stderr.decode()[-500:])
        assert_same_text(oracle.strip_pg(theirs.stdout.decode()), oracle.strip_pg(out.read_text()), how)
    else:
        assert "bad.cram" in err, err
        assert harness.leftover_files(tmp_path, {"bad.cram"}) == []
