"""CRAM input and output against samtools 1.24 (pysam 0.24.1).

Contracts under test:
* CRAM input: `alnsort sort` of a CRAM (3.0 or 3.1, made by samtools from a
  generated SAM) prints, record for record and header line for header line
  (@PG aside), what `samtools sort` of the same CRAM prints; references come
  from --reference or from REF_PATH (htslib's %2s/%2s/%s layout by M5).
* CRAM output: a CRAM that alnsort writes is read by samtools into exactly
  the records of alnsort's BAM output for the same sort.
* A missing reference is an error naming the reference (SN, M5) and where
  alnsort looked, leaving no output behind. A reference whose MD5 differs
  from the @SQ M5 is an error writing CRAM; reading, a warning, and the
  wrong base is still refused (by the slice's MD5, or, in a slice without
  one, by name). -O cram options that cannot be honoured are refused by
  name.

The generated inputs have several references (one with lowercase bases),
pairs on one and on two references, reads with mismatches, insertions,
deletions and soft clips, records with no sequence (SEQ *), long reads
(20-30 kb), unplaced and placed unmapped reads, and tags of each type.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
from pathlib import Path

import harness
import oracle
import pytest
from harness import assert_same_text, check_ok, run_alnsort

ORDERS = {"coord": [], "name": ["-n"], "template": ["--template-coordinate"]}
BASES = "ACGT"


def _ref_seqs(rng: random.Random) -> dict[str, str]:
    seqs = {}
    for name, n in (("chrA", 60_000), ("chrB", 35_000), ("chrC", 20_000)):
        seqs[name] = "".join(rng.choice(BASES) for _ in range(n))
    # A soft-masked stretch: htslib's M5 is of the upper-cased sequence.
    b = seqs["chrB"]
    seqs["chrB"] = b[:1000] + b[1000:3000].lower() + b[3000:]
    return seqs


def _write_fasta(path: Path, seqs: dict[str, str], width: int = 60) -> None:
    with open(path, "w") as fh:
        for name, s in seqs.items():
            fh.write(f">{name} generated\n")
            for i in range(0, len(s), width):
                fh.write(s[i : i + width] + "\n")


def _read_fasta(path: Path) -> dict[str, str]:
    """The sequences of a FASTA file by name, upper-cased."""
    seqs: dict[str, list[str]] = {}
    name = None
    for ln in path.read_text().splitlines():
        if ln.startswith(">"):
            name = ln[1:].split()[0]
            seqs[name] = []
        elif name is not None:
            seqs[name].append(ln)
    return {k: "".join(v).upper() for k, v in seqs.items()}


def _md5(seq: str) -> str:
    return hashlib.md5(seq.upper().encode()).hexdigest()


def _mutate(rng: random.Random, ref: str, pos: int, length: int) -> tuple[str, str, int]:
    """A read starting at 0-based `pos`: (seq, cigar, reference span)."""
    seq, ops = [], []
    clip = rng.choice([0, 0, 0, 5])
    if clip:
        seq.append("".join(rng.choice(BASES) for _ in range(clip)))
        ops.append(f"{clip}S")
    r = pos
    left = length - clip
    m = 0
    while left > 0:
        event = rng.random()
        if event < 0.01 and m > 5 and left > 3:
            if m:
                ops.append(f"{m}M")
                m = 0
            k = rng.randint(1, 3)
            seq.append("".join(rng.choice(BASES) for _ in range(k)))
            ops.append(f"{k}I")
            left -= k
            continue
        if event < 0.02 and m > 5:
            ops.append(f"{m}M")
            m = 0
            k = rng.randint(1, 4)
            ops.append(f"{k}D")
            r += k
            continue
        b = ref[r].upper()
        if rng.random() < 0.02:
            b = rng.choice([x for x in BASES + "N" if x != b])
        seq.append(b)
        m += 1
        r += 1
        left -= 1
    if m:
        ops.append(f"{m}M")
    return "".join(seq), "".join(ops), r - pos


def _qual(rng: random.Random, n: int) -> str:
    return "".join(chr(33 + rng.randint(2, 40)) for _ in range(n))


def _tags(rng: random.Random, i: int) -> list[str]:
    t = [f"XI:i:{i}"]
    if i % 3 == 0:
        t.append(f"XF:f:{rng.random():.3f}")
    if i % 4 == 0:
        t.append("XB:B:s," + ",".join(str(rng.randint(-300, 300)) for _ in range(3)))
    if i % 5 == 0:
        t.append("XC:A:" + rng.choice("xyz"))
    if i % 2 == 0:
        t.append("XZ:Z:" + "".join(rng.choice("abc") for _ in range(rng.randint(1, 8))))
    return t


def generate(seed: int, seqs: dict[str, str], with_rg: bool, with_noseq: bool = True) -> str:
    """Unsorted SAM text aligned to `seqs`."""
    rng = random.Random(seed)
    names = list(seqs)
    lines = ["@HD\tVN:1.6\tSO:unsorted"]
    lines += [f"@SQ\tSN:{n}\tLN:{len(s)}" for n, s in seqs.items()]
    if with_rg:
        lines += ["@RG\tID:g1\tSM:s1\tLB:l1", "@RG\tID:g2\tSM:s1\tLB:l2"]
    recs = []
    i = 0

    def tags() -> str:
        nonlocal i
        i += 1
        t = _tags(rng, i)
        if with_rg:
            t.append("RG:Z:" + rng.choice(["g1", "g2"]))
        return "\t".join(t)

    for p in range(700):
        name = f"p{p:05d}"
        r1 = rng.choice(names)
        other_ref = rng.random() < 0.08
        r2 = rng.choice([n for n in names if n != r1]) if other_ref else r1
        l1, l2 = rng.randint(80, 151), rng.randint(80, 151)
        pos1 = rng.randint(0, len(seqs[r1]) - 400)
        pos2 = rng.randint(0, len(seqs[r2]) - 400) if other_ref else min(len(seqs[r1]) - 300, pos1 + rng.randint(-50, 400))
        pos2 = max(0, pos2)
        s1, c1, span1 = _mutate(rng, seqs[r1], pos1, l1)
        s2, c2, span2 = _mutate(rng, seqs[r2], pos2, l2)
        unmapped2 = rng.random() < 0.05
        rev1 = rng.random() < 0.5
        f1 = 0x1 | 0x40 | (0x10 if rev1 else 0)
        f2 = 0x1 | 0x80 | (0x20 if rev1 else 0)
        if not unmapped2:
            f1 |= 0x2 if not other_ref else 0
            f2 |= 0x2 if not other_ref else 0
            f1 |= 0x20 if not rev1 else 0
            f2 |= 0x10 if not rev1 else 0
        if unmapped2:
            f1 |= 0x8
            f2 |= 0x4
            rec1 = [name, f1, r1, pos1 + 1, 60, c1, "=", pos1 + 1, 0, s1, _qual(rng, len(s1))]
            rec2 = [name, f2, r1, pos1 + 1, 0, "*", "=", pos1 + 1, 0, s2, _qual(rng, len(s2))]
        else:
            if other_ref:
                t1 = t2 = 0
            else:
                start = min(pos1, pos2)
                end = max(pos1 + span1, pos2 + span2)
                tl = end - start
                if pos1 < pos2 or (pos1 == pos2):
                    t1, t2 = tl, -tl
                else:
                    t1, t2 = -tl, tl
            rn2 = "=" if r2 == r1 else r2
            rn1 = "=" if r2 == r1 else r1
            rec1 = [name, f1, r1, pos1 + 1, rng.randint(0, 60), c1, rn2, pos2 + 1, t1, s1, _qual(rng, len(s1))]
            rec2 = [name, f2, r2, pos2 + 1, rng.randint(0, 60), c2, rn1, pos1 + 1, t2, s2, _qual(rng, len(s2))]
        # MC (the mate's CIGAR), which template-coordinate order needs.
        recs.append(rec1 + [tags() + f"\tMC:Z:{rec2[5]}"])
        recs.append(rec2 + [tags() + f"\tMC:Z:{rec1[5]}"])
    # Single reads with no sequence (SEQ *), mapped.
    for k in range(40 if with_noseq else 0):
        r = rng.choice(names)
        pos = rng.randint(0, len(seqs[r]) - 200)
        _, c, _ = _mutate(rng, seqs[r], pos, 100)
        recs.append([f"noseq{k:03d}", rng.choice([0, 16]), r, pos + 1, 30, c, "*", 0, 0, "*", "*", tags()])
    # Long reads.
    for k in range(4):
        r = "chrA"
        n = rng.randint(20_000, 30_000)
        pos = rng.randint(0, len(seqs[r]) - n - 2000)
        s, c, _ = _mutate(rng, seqs[r], pos, n)
        recs.append([f"long{k}", 0, r, pos + 1, 60, c, "*", 0, 0, s, _qual(rng, len(s)), tags()])
    # Unplaced unmapped reads, single and paired.
    for k in range(60):
        s = "".join(rng.choice(BASES) for _ in range(rng.randint(50, 150)))
        recs.append([f"un{k:03d}", 4, "*", 0, 0, "*", "*", 0, 0, s, _qual(rng, len(s)), tags()])
    for k in range(20):
        for f in (0x1 | 0x4 | 0x8 | 0x40, 0x1 | 0x4 | 0x8 | 0x80):
            s = "".join(rng.choice(BASES) for _ in range(100))
            recs.append([f"upair{k:03d}", f, "*", 0, 0, "*", "*", 0, 0, s, _qual(rng, 100), tags()])
    rng.shuffle(recs)
    lines += ["\t".join(str(x) for x in rec) for rec in recs]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cram")
    rng = random.Random(7)
    seqs = _ref_seqs(rng)
    ref = d / "ref.fa"
    _write_fasta(ref, seqs)
    oracle.samtools("faidx", str(ref))
    # The CRAMs are made against a copy that is then removed, so that their
    # @SQ UR names no file and only --reference or REF_PATH can serve.
    gone = d / "gone"
    gone.mkdir()
    _write_fasta(gone / "ref.fa", seqs)
    oracle.samtools("faidx", str(gone / "ref.fa"))
    # REF_PATH layout: DIR/ab/cd/<rest of the M5>, sequences upper-cased.
    cache = d / "refcache"
    for s in seqs.values():
        m5 = _md5(s)
        p = cache / m5[:2] / m5[2:4]
        p.mkdir(parents=True, exist_ok=True)
        (p / m5[4:]).write_text(s.upper())
    # The same contigs, one base of chrC changed: a mismatching reference.
    bad = dict(seqs)
    c = list(bad["chrC"])
    c[500] = "A" if c[500] != "A" else "C"
    bad["chrC"] = "".join(c)
    bad_ref = d / "bad.fa"
    _write_fasta(bad_ref, bad)
    out = {"dir": d, "ref": ref, "cache": cache, "bad_ref": bad_ref}
    out["md5_chrC"] = Path(_md5(seqs["chrC"]))
    # CRAM output refuses RG tags and SEQ * with an alignment (noodles-cram
    # limits, see docs/cram.md): "plain" has neither.
    plain = d / "in_plain.sam"
    plain.write_text(generate(33, seqs, False, with_noseq=False))
    out["sam_plain"] = plain
    rg_plain = d / "in_rg_plain.sam"
    rg_plain.write_text(generate(34, seqs, True, with_noseq=False))
    out["sam_rg_plain"] = rg_plain
    # Read groups every way samtools meets them: none, a name in the header
    # (RG first, in the middle, or before MC), a name not in the header
    # (samtools keeps it as a tag, in place, with a warning), RG of type i,
    # and a record using the tag name `rg` beside its RG.
    mixed = []
    i = 0
    for ln in rg_plain.read_text().splitlines():
        if ln.startswith("@"):
            mixed.append(ln)
            continue
        f = ln.split("\t")
        rg = next(t for t in f[11:] if t.startswith("RG:"))
        rest = [t for t in f[11:] if t != rg]
        k = i % 7
        i += 1
        if k == 0:
            tags = rest
        elif k == 1:
            tags = [*rest[:-1], "RG:Z:gX", rest[-1]]
        elif k == 2:
            tags = [rg, *rest]
        elif k == 3:
            tags = [*rest[:-1], "RG:i:7", rest[-1]]
        elif k == 4:
            tags = [*rest[:1], "rg:Z:lower", *rest[1:-1], rg, rest[-1]]
        elif k == 5:
            tags = [*rest, "RG:Z:unknown2"]
        else:
            tags = f[11:]
        mixed.append("\t".join([*f[:11], *tags]))
    rg_mixed = d / "in_rg_mixed.sam"
    rg_mixed.write_text("\n".join(mixed) + "\n")
    out["sam_rg_mixed"] = rg_mixed
    # QUAL * on records with bases: noodles-cram writes a slice that
    # samtools cannot decode, so CRAM output refuses them.
    noqual = d / "in_noqual.sam"
    noqual.write_text(
        "".join(
            ln if ln.startswith("@") or ln.split("\t")[9] == "*" else "\t".join([*ln.split("\t")[:10], "*", *ln.split("\t")[11:]])
            for ln in plain.read_text().splitlines(keepends=True)
        )
    )
    out["sam_noqual"] = noqual
    for tag, rg in (("rg", True), ("norg", False)):
        sam = d / f"in_{tag}.sam"
        sam.write_text(generate(31 if rg else 32, seqs, rg))
        out[f"sam_{tag}"] = sam
        for version in ("3.0", "3.1"):
            cram = d / f"in_{tag}_{version}.cram"
            oracle.samtools(
                "view", "--no-PG", "-O", f"cram,version={version}", "-T", str(gone / "ref.fa"), "-o", str(cram), str(sam)
            )
            out[f"cram_{tag}_{version}"] = cram
    for f in gone.iterdir():
        f.unlink()
    gone.rmdir()
    return out


def _view(path: Path | str, ref: Path) -> str:
    return oracle.samtools("view", "-h", "--no-PG", "-T", str(ref), str(path)).stdout.decode()


def _samtools_sorted(args: list[str], src: Path, ref: Path | None, tmp: Path) -> str:
    out = tmp / "expected.bam"
    extra = ["--reference", str(ref)] if ref else []
    oracle.samtools("sort", *args, *extra, "-o", str(out), str(src))
    return oracle.strip_pg(oracle.view(str(out)))


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("config", [[], ["-@", "3", "-m", "1M"]], ids=["default", "t3_m1M"])
def test_cram_input_matches_samtools(alnsort_bin, data, tmp_path, order, version, config):
    """CRAM in (with RG, MD/NM regenerated, attached mates): records and
    header as samtools sort gives them."""
    src = data[f"cram_rg_{version}"]
    out = tmp_path / "out.bam"
    res = run_alnsort([*ORDERS[order], *config, "--reference", str(data["ref"]), "-o", str(out), str(src)])
    check_ok(res)
    expected = _samtools_sorted(ORDERS[order], src, data["ref"], tmp_path)
    assert_same_text(expected, oracle.strip_pg(oracle.view(str(out))), f"CRAM {version} in, order={order}")


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_cram_input_with_read_groups_of_every_kind_matches_samtools(alnsort_bin, data, tmp_path, version):
    """CRAM in made by samtools from the mixed read-group input: an RG not in
    the header (or not of type Z) is a stored tag, so the MD/NM a reader
    adds go after it; a header read group's RG (from the series) stays last,
    after MD/NM."""
    src = tmp_path / "in.cram"
    oracle.samtools(
        "view", "--no-PG", "-O", f"cram,version={version}", "-T", str(data["ref"]), "-o", str(src), str(data["sam_rg_mixed"])
    )
    out = tmp_path / "out.bam"
    check_ok(run_alnsort(["--reference", str(data["ref"]), "-o", str(out), str(src)]))
    expected = _samtools_sorted([], src, data["ref"], tmp_path)
    assert "\tRG:Z:gX\tMC:Z:" in expected and "\tRG:Z:unknown2\tMD:Z:" in expected
    assert_same_text(expected, oracle.strip_pg(oracle.view(str(out))), f"CRAM {version} in, mixed read groups")


def test_cram_input_through_ref_path(alnsort_bin, data, tmp_path, monkeypatch):
    """No --reference: the references are found by M5 under REF_PATH."""
    monkeypatch.setenv("REF_PATH", f"{tmp_path / 'nothing-here'}:{data['cache']}/%2s/%2s/%s")
    monkeypatch.delenv("REF_CACHE", raising=False)
    src = data["cram_norg_3.0"]
    out = tmp_path / "out.bam"
    res = run_alnsort(["-o", str(out), str(src)])
    check_ok(res)
    expected = _samtools_sorted([], src, None, tmp_path)
    assert_same_text(expected, oracle.strip_pg(oracle.view(str(out))), "CRAM in via REF_PATH")


def test_missing_reference_is_an_error_naming_it(alnsort_bin, data, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("REF_PATH", f"{empty}/%2s/%2s/%s")
    monkeypatch.delenv("REF_CACHE", raising=False)
    out = tmp_path / "out.bam"
    res = run_alnsort(["-o", str(out), str(data["cram_norg_3.0"])], cwd=str(tmp_path))
    assert res.returncode != 0
    err = res.stderr.decode()
    assert "not found" in err and "REF_PATH file " + str(empty) in err, err
    # The reference is named with its M5.
    assert "(M5 " in err and any(f"reference {n} (M5" in err for n in ("chrA", "chrB", "chrC")), err
    assert not out.exists()
    assert harness.leftover_files(tmp_path, {"empty"}) == []


@pytest.mark.parametrize("sort", ["unsorted", "coordinate"])
def test_mismatching_reference_is_an_error_naming_it(alnsort_bin, data, tmp_path, sort):
    """A FASTA whose chrC differs from the @SQ M5 in one base that reads
    cover: reading goes on past the whole-sequence M5 (a warning naming the
    file, the reference and both MD5s, as htslib compares no @SQ M5 with a
    local FASTA), but the wrong base never reaches the output. Unsorted
    records are in multi-reference slices, which carry no MD5: samtools
    decodes them against the wrong base (exit 0), alnsort refuses them by
    name. Coordinate-sorted ones written one reference per slice
    (`multi_seq_per_slice=0`) are in single-reference slices, whose MD5
    refuses the slice over the base (samtools too)."""
    src = data["cram_norg_3.0"]
    if sort == "coordinate":
        src = tmp_path / "sorted.cram"
        oracle.samtools(
            "sort", "--no-PG", "-O", "cram,multi_seq_per_slice=0", "--reference", str(data["ref"]),
            "-o", str(src), str(data["cram_norg_3.0"]),
        )
    theirs = oracle.samtools("view", "-T", str(data["bad_ref"]), str(src), check=False)
    if sort == "coordinate":
        assert theirs.returncode != 0 and b"MD5 checksum reference mismatch at chrC:" in theirs.stderr
    else:
        good = oracle.samtools("view", "-T", str(data["ref"]), str(src)).stdout
        assert theirs.returncode == 0 and theirs.stdout != good, "samtools decodes the wrong base unchecked"
    out = tmp_path / "out.bam"
    res = run_alnsort(["--reference", str(data["bad_ref"]), "-o", str(out), str(src)], cwd=str(tmp_path))
    assert res.returncode != 0
    err = res.stderr.decode()
    m5 = str(data["md5_chrC"])
    bad_m5 = _md5(_read_fasta(data["bad_ref"])["chrC"])
    warning = f"[W::alnsort] {src}: reference chrC: its MD5 is {bad_m5} in --reference {data['bad_ref']}, but the header's @SQ M5 is {m5}"
    assert warning in err, err
    if sort == "coordinate":
        assert "MD5 checksum reference mismatch at chrC:" in err, err
    else:
        assert f"reference chrC: its MD5 is {bad_m5}" in err and f"the header's @SQ M5 is {m5}, and a multi-reference slice carries no reference MD5" in err, err
    assert "decoding CRAM container" in err and str(src) in err, err
    assert not out.exists()
    assert harness.leftover_files(tmp_path, {"sorted.cram"}) == []


def test_mismatching_reference_is_an_error_writing_cram(alnsort_bin, data, tmp_path):
    """Writing CRAM against a FASTA whose chrC differs from the input's
    @SQ M5 is an error naming both (records stored against other bases than
    the header names would be read back wrong); nothing is written."""
    src = tmp_path / "in.sam"
    src.write_text(oracle.samtools("view", "-h", "--no-PG", "-T", str(data["ref"]), str(data["cram_norg_3.0"])).stdout.decode())
    out = tmp_path / "out.cram"
    res = run_alnsort(["-O", "cram", "--reference", str(data["bad_ref"]), "-o", str(out), str(src)], cwd=str(tmp_path))
    assert res.returncode != 0
    err = res.stderr.decode()
    m5 = str(data["md5_chrC"])
    assert f"reference chrC: its MD5 is" in err and f"the header's @SQ M5 is {m5}" in err, err
    assert str(data["bad_ref"]) in err and "[W::alnsort]" not in err, err
    assert not out.exists()
    assert harness.leftover_files(tmp_path, {"in.sam"}) == []


@pytest.mark.parametrize(
    "fmt, version",
    [("cram", b"\x03\x00"), ("cram,version=3.1", b"\x03\x01"), ("cram,version=3.0,level=1,embed_ref=0,no_ref=0", b"\x03\x00")],
)
@pytest.mark.parametrize("order", list(ORDERS))
def test_cram_output_reads_back_as_samtools_own_cram(alnsort_bin, data, tmp_path, order, fmt, version):
    """samtools reads alnsort's CRAM into the records it reads from a CRAM
    it makes itself of alnsort's BAM output for the same sort (reading a
    CRAM, samtools adds MD/NM and puts RG last, so the BAM itself is not the
    yardstick); the whole header equal, @SQ M5 and UR included."""
    src = data["sam_plain"]
    cram = tmp_path / "out.cram"
    bam = tmp_path / "out.bam"
    check_ok(run_alnsort([*ORDERS[order], "--no-PG", "-O", fmt, "--reference", str(data["ref"]), "-o", str(cram), str(src)]))
    check_ok(run_alnsort([*ORDERS[order], "--no-PG", "-o", str(bam), str(src)]))
    assert cram.read_bytes()[:6] == b"CRAM" + version
    theirs = tmp_path / "samtools.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(data["ref"]), "-o", str(theirs), str(bam))
    got = _view(cram, data["ref"])
    want = _view(theirs, data["ref"])
    rec = lambda t: [ln for ln in t.splitlines() if not ln.startswith("@")]  # noqa: E731
    assert len(rec(want)) == 2 * 700 + 4 + 60 + 40
    assert_same_text("\n".join(rec(want)), "\n".join(rec(got)), f"CRAM out ({fmt}) read back, order={order}")

    assert oracle.header_lines(got) == oracle.header_lines(want)


def _cram_size(path: Path) -> str:
    """`samtools cram-size -v` (pysam's samtools 1.24, in process: its
    output does not come through the oracle's subprocess)."""
    import pysam

    return pysam.samtools.cram_size("-v", str(path))


@pytest.mark.parametrize("fmt, method", [("cram", "r4x8-o1"), ("cram,version=3.1", "r4x16-o1")])
def test_cram_output_stores_qualities_with_samtools_codec(alnsort_bin, data, tmp_path, fmt, method):
    """CRAM output stores the quality scores (QS) with rANS order 1 (4x8
    in CRAM 3.0, the codec samtools picks for them on the benchmark; Nx16
    in CRAM 3.1; samtools tries
    codecs on each input, so its choice on this small one is not checked);
    samtools reads the records back as it reads its own CRAM of them."""
    src = data["sam_plain"]
    cram = tmp_path / "out.cram"
    check_ok(run_alnsort(["-O", fmt, "--reference", str(data["ref"]), "-o", str(cram), str(src)]))
    sizes = _cram_size(cram)
    qs = [ln.split() for ln in sizes.splitlines() if ln.startswith("BLOCK") and ln.split()[-1] == "QS"]
    assert qs, sizes
    assert {f[5] for f in qs} == {method}, sizes
    theirs = tmp_path / "samtools.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(data["ref"]), "-o", str(theirs), str(src))
    rec = lambda t: sorted(ln for ln in t.splitlines() if not ln.startswith("@"))  # noqa: E731
    assert_same_text("\n".join(rec(_view(theirs, data["ref"]))), "\n".join(rec(_view(cram, data["ref"]))), f"QS codec, {fmt}")


@pytest.mark.parametrize("src", ["sam_plain", "sam_rg_mixed"])
def test_cram_round_trip_through_alnsort(alnsort_bin, data, tmp_path, src):
    """CRAM written by alnsort and read back by alnsort gives what samtools
    reads from it (with read groups of every kind in `sam_rg_mixed`)."""
    src = data[src]
    cram = tmp_path / "out.cram"
    check_ok(run_alnsort(["-O", "cram", "--reference", str(data["ref"]), "-o", str(cram), str(src)]))
    back = tmp_path / "back.bam"
    check_ok(run_alnsort(["--reference", str(data["ref"]), "-o", str(back), str(cram)]))
    # Decoding adds MD/NM as samtools does: compare with samtools' reading.
    want = "".join(ln + "\n" for ln in _view(cram, data["ref"]).splitlines() if not ln.startswith("@"))
    assert_same_text(want, oracle.view_records(str(back)), "CRAM written and read by alnsort vs samtools reading it")


def _with_extra_alignments(src: Path, dst: Path) -> Path:
    """`src` with, for every fifth name, a supplementary copy of its first
    record (flag 0x800, 1,000 bases on where the reference allows) and a
    secondary one without bases or qualities (flag 0x100, SEQ and QUAL *):
    three or four records of one name, mostly in one slice."""
    out, seen = [], {}
    for ln in src.read_text().splitlines(keepends=True):
        out.append(ln)
        if ln.startswith("@"):
            continue
        f = ln.rstrip("\n").split("\t")
        if f[0] in seen or int(f[1]) & 0x4:
            continue
        seen[f[0]] = True
        if len(seen) % 5:
            continue
        sup = list(f)
        sup[1] = str(int(f[1]) | 0x800)
        sup[3] = str(max(1, int(f[3]) - 1000) if int(f[3]) > 5000 else int(f[3]) + 1000)
        sec = list(f)
        sec[1] = str(int(f[1]) | 0x100)
        sec[9] = sec[10] = "*"
        out += ["\t".join(sup) + "\n", "\t".join(sec) + "\n"]
    dst.write_text("".join(out))
    return dst


def _with_odd_tlen(src: Path, dst: Path) -> tuple[Path, str]:
    """`src` with the TLENs of one pair one off the SAM rule (a reader
    rebuilding TLEN from the mates would change them)."""
    lines = src.read_text().splitlines(keepends=True)
    name = next(ln.split("\t")[0] for ln in lines if not ln.startswith("@") and ln.split("\t")[8] != "0")
    out = []
    for ln in lines:
        f = ln.split("\t")
        if not ln.startswith("@") and f[0] == name:
            t = int(f[8])
            f[8] = str(t + 1 if t > 0 else t - 1)
            ln = "\t".join(f)
        out.append(ln)
    dst.write_text("".join(out))
    return dst, name


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("order", ["coord", "name"])
@pytest.mark.parametrize("src", ["sam_norg", "sam_noqual", "extra_alignments", "odd_tlen"])
def test_cram_output_of_records_noodles_could_not_write(alnsort_bin, data, tmp_path, src, order, version):
    """Records the noodles-cram writer could not write as samtools reads
    them back, now written: aligned records without bases (SEQ *), records
    without qualities (QUAL *), supplementary and secondary alignments (three
    or four records of a name in a slice), a pair whose TLENs break the SAM
    rule (mates are stored detached, their fields as given); among them
    long reads (20 to 30 kb), unmapped reads placed and unplaced, pairs on
    two references, in slices of several references. samtools reads them
    back as it reads its own CRAM of alnsort's BAM of the same sort."""
    if src == "extra_alignments":
        path = _with_extra_alignments(data["sam_norg"], tmp_path / "extra.sam")
    elif src == "odd_tlen":
        path, _ = _with_odd_tlen(data["sam_plain"], tmp_path / "tlen.sam")
    else:
        path = data[src]
    fmt = f"cram,version={version}"
    got, want, bam = _cram_records_ours_and_samtools(path, data["ref"], tmp_path, fmt, ORDERS[order])
    assert len(want) == len(_records(oracle.view(str(bam))))
    if src == "sam_norg":
        assert sum(ln.split("\t")[9] == "*" and ln.split("\t")[5] != "*" for ln in want) >= 40
    if src == "sam_noqual":
        assert sum(ln.split("\t")[10] == "*" and ln.split("\t")[9] != "*" for ln in want) > 1000
    if src == "extra_alignments":
        assert sum(int(ln.split("\t")[1]) & 0x900 != 0 for ln in want) > 200
    assert_same_text("\n".join(want), "\n".join(got), f"CRAM out of {src}, {order}, {version}")


def _records(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith("@")]


def _cram_records_ours_and_samtools(src: Path, ref: Path, tmp: Path, fmt: str, order: list[str]):
    """alnsort sorts `src` to CRAM (`-O fmt`) and to BAM; samtools makes its
    own CRAM (same `fmt`) of that BAM. Returns the records samtools reads
    from alnsort's CRAM, those it reads from its own, and the BAM."""
    cram, bam = tmp / "out.cram", tmp / "out.bam"
    check_ok(run_alnsort([*order, "-O", fmt, "--reference", str(ref), "-o", str(cram), str(src)]))
    check_ok(run_alnsort([*order, "-o", str(bam), str(src)]))
    theirs = tmp / "samtools.cram"
    oracle.samtools("view", "--no-PG", "-O", fmt, "-T", str(ref), "-o", str(theirs), str(bam))
    return _records(_view(cram, ref)), _records(_view(theirs, ref)), bam


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("src", ["sam_rg_plain", "sam_rg_mixed"])
@pytest.mark.parametrize("order", list(ORDERS))
def test_cram_output_with_read_groups_reads_back_as_samtools_sorted_cram(
    alnsort_bin, data, tmp_path, order, src, version
):
    """Records with RG tags (two read groups; in the mixed input also RG
    first, RG not in the header, RG of type i, a tag named rg, and records
    without RG): samtools reads alnsort's CRAM into exactly the records, tag
    order included, it reads from `samtools sort -O cram` of the same input
    (RG given once: a header read group last, from the read-group series;
    any other RG kept as a tag in its place)."""
    cram = tmp_path / "out.cram"
    res = run_alnsort(
        [*ORDERS[order], "--no-PG", "-O", f"cram,version={version}", "--reference", str(data["ref"]), "-o", str(cram),
         str(data[src])]
    )
    check_ok(res)
    theirs = tmp_path / "samtools.cram"
    oracle.samtools(
        "sort", *ORDERS[order], "--no-PG", "-O", f"cram,version={version}", "--reference", str(data["ref"]),
        "-o", str(theirs), str(data[src]),
    )
    got, want = _view(cram, data["ref"]), _view(theirs, data["ref"])
    assert len(_records(want)) == 2 * 700 + 4 + 60 + 40
    # The inputs exercise what they claim: RG once per record in the
    # header's groups, and in the mixed input the other kinds of RG.
    with_rg = [r for r in _records(want) if "\tRG:" in r]
    assert all(r.count("\tRG:") == 1 for r in with_rg)
    if src == "sam_rg_mixed":
        assert any("\tRG:Z:gX\t" in r for r in with_rg) and any("\tRG:i:7\t" in r for r in with_rg)
        assert any(r.endswith("\tRG:Z:unknown2") for r in with_rg)
        assert any("\trg:Z:lower\t" in r for r in with_rg)
        assert len(with_rg) < len(_records(want))
    else:
        assert len(with_rg) == len(_records(want))
    assert_same_text("\n".join(_records(want)), "\n".join(_records(got)), f"CRAM with RG read back, {src} {order} {version}")
    assert oracle.header_lines(got) == oracle.header_lines(want)


def _header_variant(data, kind: str, path: Path) -> Path:
    """`in_plain.sam`'s records under a header of kind `kind`: lines in an
    order samtools keeps (@CO, @RG, @PG between @SQ lines), @SQ with and
    without M5, UR (local, remote), AS, SP and other
    tags, and @HD with GO, SS, or none."""
    text = data["sam_plain"].read_text()
    records = [ln for ln in text.splitlines() if not ln.startswith("@")]
    seqs = _read_fasta(data["ref"])
    a, b, c = (f"LN:{len(seqs[n])}" for n in ("chrA", "chrB", "chrC"))
    m5a = _md5(seqs["chrA"])
    header = {
        "mixed": [
            "@CO\tfirst comment",
            "@RG\tID:g1\tSM:s1\tLB:l1",
            "@HD\tVN:1.4\tSO:unsorted\tGO:query",
            f"@SQ\tSN:chrA\t{a}\tAS:hg\tM5:{m5a}\tSP:human",
            "@PG\tID:bwa\tPN:bwa\tVN:0.7",
            f"@SQ\tSN:chrB\tUR:file:/elsewhere/x.fa\t{b}\tXX:yy",
            f"@SQ\tSN:chrC\t{c}\tUR:http://example.org/r.fa\tM5:{_md5(seqs['chrC'])}",
            "@CO\tlast comment",
        ],
        "no_hd": [
            "@PG\tID:x\tPN:x",
            f"@SQ\tSN:chrA\t{a}\tUR:ref.fa",
            f"@SQ\tSN:chrB\t{b}",
            f"@SQ\tSN:chrC\t{c}\tAS:x\tM5:{_md5(seqs['chrC'])}\tUR:/old/ref.fa\tDS:d",
        ],
        "hd_ss": [
            "@HD\tVN:1.6\tSS:coordinate:queryname\tSO:coordinate",
            f"@SQ\tSN:chrA\t{a}",
            f"@SQ\tSN:chrB\t{b}\tM5:{_md5(seqs['chrB'])}",
            f"@SQ\tSN:chrC\t{c}",
            "@RG\tID:g2\tSM:s2",
        ],
    }[kind]
    path.write_text("\n".join([*header, *records]) + "\n")
    return path


@pytest.mark.parametrize("kind", ["mixed", "no_hd", "hd_ss"])
@pytest.mark.parametrize(
    "how", ["absolute", "relative", "ref_path", "no_ref", "embed_ref", "name_order", "cram_input"]
)
def test_cram_output_header_is_samtools(alnsort_bin, data, tmp_path, monkeypatch, kind, how):
    """The header of alnsort's CRAM is, byte for byte (@PG left out on both
    sides with --no-PG), the header of `samtools sort -O cram` of the same
    input: line order kept, M5 added to each @SQ without one, UR set to the
    --reference FASTA as htslib writes it (the working directory joined to
    a relative path), left alone when the reference is found through
    REF_PATH, and neither with no_ref=1."""
    src = _header_variant(data, kind, tmp_path / "in.sam")
    ref = data["ref"]
    work = ref.parent
    ref_arg = ["--reference", str(ref)]
    fmt = "cram"
    order: list[str] = []
    if how == "relative":
        # Run in the reference's directory with a path through `..`: htslib
        # keeps it as written after the working directory.
        ref_arg = ["--reference", f"../{work.name}/./{ref.name}"]
    elif how == "ref_path":
        monkeypatch.setenv("REF_PATH", f"{data['cache']}/%2s/%2s/%s")
        monkeypatch.delenv("REF_CACHE", raising=False)
        ref_arg = []
        # Found by M5 only: each @SQ needs one.
        seqs = _read_fasta(ref)
        src.write_text(
            "".join(
                ln.rstrip("\n") + f"\tM5:{_md5(seqs[ln.split('SN:')[1].split()[0]])}\n"
                if ln.startswith("@SQ") and "\tM5:" not in ln
                else ln
                for ln in src.read_text().splitlines(keepends=True)
            )
        )
    elif how in ("no_ref", "embed_ref"):
        fmt = f"cram,{how}=1"
    elif how == "name_order":
        order = ["-n"]
    elif how == "cram_input":
        cram_in = tmp_path / "in.cram"
        oracle.samtools("view", "--no-PG", "-O", "cram", "-T", str(ref), "-o", str(cram_in), str(src))
        src = cram_in
    ours, theirs = tmp_path / "ours.cram", tmp_path / "theirs.cram"
    check_ok(run_alnsort([*order, "--no-PG", "-O", fmt, *ref_arg, "-o", str(ours), str(src)], cwd=str(work)))
    oracle.samtools("sort", *order, "--no-PG", "-O", fmt, *ref_arg, "-o", str(theirs), str(src), cwd=str(work))
    got, want = _view(ours, ref), _view(theirs, ref)
    want_header = [ln for ln in want.splitlines() if ln.startswith("@")]
    # The header says what the case is about.
    sq = [ln for ln in want_header if ln.startswith("@SQ")]
    if how in ("absolute", "relative", "embed_ref", "name_order", "cram_input"):
        assert all(f"\tUR:{work}/" in ln or f"\tUR:{ref}" in ln for ln in sq), sq
    if how != "no_ref":
        assert all("\tM5:" in ln for ln in sq), sq
    assert_same_text(
        "\n".join(want_header), "\n".join(ln for ln in got.splitlines() if ln.startswith("@")), f"header {kind} {how}"
    )
    assert_same_text("\n".join(_records(want)), "\n".join(_records(got)), f"records {kind} {how}")


def _cram_output_refused(data, tmp_path: Path, src: Path) -> str:
    """Runs a CRAM output of `src` (in `tmp_path`) that must fail, leaving
    no output and no other file; returns its stderr."""
    out = tmp_path / "out.cram"
    res = run_alnsort(["-O", "cram", "--reference", str(data["ref"]), "-o", str(out), str(src)], cwd=str(tmp_path))
    assert res.returncode != 0
    assert not out.exists()
    assert harness.leftover_files(tmp_path, set()) == []
    return res.stderr.decode()


def test_cram_output_refuses_a_record_with_two_rg_tags(alnsort_bin, data, tmp_path):
    """Two RG tags on one record: samtools would keep one (which depends on
    the header), alnsort refuses naming the record, leaving nothing."""
    lines = data["sam_rg_plain"].read_text().splitlines(keepends=True)
    k = next(i for i, ln in enumerate(lines) if not ln.startswith("@"))
    lines[k] = lines[k].rstrip("\n") + "\tRG:Z:g2\n"
    src = tmp_path.parent / f"{tmp_path.name}-2rg.sam"
    src.write_text("".join(lines))
    err = _cram_output_refused(data, tmp_path, src)
    assert "more than one RG tag" in err and "CRAM record " in err, err


@pytest.mark.parametrize(
    "fmt, message",
    [
        ("cram,embed_ref=2", "embed_ref=2 cannot be honoured"),
        ("cram,embed_ref=1,no_ref=1", "embed_ref=1 and no_ref=1 contradict each other"),
        ("cram,no_ref=2", "no_ref=2: expected 0 or 1"),
        ("cram,version=2.1", "version=2.1"),
        ("bam,version=3.1", "version=3.1 applies to CRAM output only"),
        ("cram,seqs_per_slice=100", "unsupported output format option 'seqs_per_slice=100'"),
    ],
)
def test_cram_options_that_cannot_be_honoured_are_refused(alnsort_bin, data, tmp_path, fmt, message):
    out = tmp_path / "out.cram"
    res = run_alnsort(["-O", fmt, "--reference", str(data["ref"]), "-o", str(out), str(data["sam_norg"])], cwd=str(tmp_path))
    assert res.returncode != 0
    assert message in res.stderr.decode(), res.stderr.decode()
    assert not out.exists()


def test_cram_output_without_a_reference_is_an_error(alnsort_bin, data, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("REF_PATH", f"{empty}/%s")
    monkeypatch.delenv("REF_CACHE", raising=False)
    out = tmp_path / "out.cram"
    res = run_alnsort(["-O", "cram", "-o", str(out), str(data["sam_norg"])], cwd=str(tmp_path))
    assert res.returncode != 0
    err = res.stderr.decode()
    # The SAM has no M5: alnsort says so, and that no --reference was given.
    assert "no --reference given" in err and "has no M5" in err, err
    assert not out.exists()


def test_cram_output_with_an_unreadable_reference_is_refused_before_the_work(alnsort_bin, data, tmp_path):
    """A --reference path that cannot be opened (a typo) is refused at the
    start, naming it, not after the sort when the first container is
    written; nothing is left."""
    out = tmp_path / "out.cram"
    res = run_alnsort(["--reference", str(tmp_path / "no-such.fa"), "-o", str(out), str(data["sam_norg"])],
                      cwd=str(tmp_path))
    err = res.stderr.decode()
    assert res.returncode != 0 and f"--reference {tmp_path / 'no-such.fa'}: cannot open it" in err, err
    assert "No such file" in err and not out.exists() and list(tmp_path.iterdir()) == []


def _itf8(buf: bytes, at: int) -> tuple[int, int]:
    b0 = buf[at]
    n = 0
    while n < 4 and b0 & (0x80 >> n):
        n += 1
    if n == 4:
        b = buf[at : at + 5]
        return ((b[0] & 0x0F) << 28) | (b[1] << 20) | (b[2] << 12) | (b[3] << 4) | (b[4] & 0x0F), at + 5
    v = b0 & (0xFF >> (n + 1))
    for b in buf[at + 1 : at + 1 + n]:
        v = (v << 8) | b
    return v, at + 1 + n


def _ltf8(buf: bytes, at: int) -> tuple[int, int]:
    b0 = buf[at]
    n = 0
    while n < 8 and b0 & (0x80 >> n):
        n += 1
    v = b0 & (0xFF >> (n + 1)) if n < 7 else 0
    for b in buf[at + 1 : at + 1 + n]:
        v = (v << 8) | b
    return v, at + 1 + n


def _containers(path: Path) -> list[tuple[int, int]]:
    """(record count, record counter) of each container after the header
    container, from the container headers (CRAM 3 §7)."""
    buf = path.read_bytes()
    at = 26  # file definition
    out = []
    while at < len(buf):
        length = int.from_bytes(buf[at : at + 4], "little", signed=True)
        p = at + 4
        for _ in range(3):  # reference id, start, span
            _, p = _itf8(buf, p)
        n, p = _itf8(buf, p)
        counter, p = _ltf8(buf, p)
        _, p = _ltf8(buf, p)  # bases
        _, p = _itf8(buf, p)  # blocks
        k, p = _itf8(buf, p)
        for _ in range(k):
            _, p = _itf8(buf, p)
        out.append((n, counter))
        at = p + 4 + length
    return out[1:]


def _many_records_sam(data, path: Path) -> Path:
    """25,000 unpaired 100-base reads on every reference (with and without
    RG), unsorted, written to `path`."""
    rng = random.Random(99)
    seqs = {}
    for ln in Path(data["ref"]).read_text().splitlines():
        if ln.startswith(">"):
            name = ln[1:].split()[0]
            seqs[name] = []
        else:
            seqs[name].append(ln.upper())
    seqs = {k: "".join(v) for k, v in seqs.items()}
    lines = ["@HD\tVN:1.6\tSO:unsorted"] + [f"@SQ\tSN:{n}\tLN:{len(s)}" for n, s in seqs.items()]
    lines += ["@RG\tID:a\tSM:x", "@RG\tID:b\tSM:x"]
    names = list(seqs)
    # Read groups in every container: none, a or b (the read-group series),
    # zz (not in the header: kept as a tag).
    rgs = ["", "\tRG:Z:a", "\tRG:Z:b", "\tRG:Z:zz"]
    for i in range(25_000):
        ref = rng.choice(names)
        pos = rng.randrange(0, len(seqs[ref]) - 100)
        seq = list(seqs[ref][pos : pos + 100])
        for _ in range(rng.randint(0, 2)):
            j = rng.randrange(100)
            seq[j] = rng.choice([b for b in BASES if b != seq[j]])
        qual = "".join(chr(33 + rng.randint(2, 40)) for _ in range(100))
        flag = rng.choice([0, 16])
        lines.append(f"r{i}\t{flag}\t{ref}\t{pos + 1}\t{rng.randint(0, 60)}\t100M\t*\t0\t0\t{''.join(seq)}\t{qual}\tXA:i:{i}{rgs[i % 4]}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cram_output_of_several_containers_is_the_same_for_any_thread_count(alnsort_bin, data, tmp_path):
    """25,000 records (with and without RG) make three containers, encoded
    on the pool and written in order: the file is byte-identical for -@1 and -@3, each container
    carries its records' place in the file (record counters 0, 10240,
    20480; the EOF container last), and samtools reads it into the records
    of the CRAM it makes itself of alnsort's BAM output."""
    src = _many_records_sam(data, tmp_path / "many.sam")
    outs = []
    for threads in ("1", "3"):
        cram = tmp_path / f"out{threads}.cram"
        check_ok(run_alnsort(["--no-PG", "-@", threads, "-O", "cram", "--reference", str(data["ref"]), "-o", str(cram), str(src)]))
        outs.append(cram)
    assert outs[0].read_bytes() == outs[1].read_bytes(), "CRAM output differs between -@1 and -@3"
    assert _containers(outs[1]) == [(10_240, 0), (10_240, 10_240), (4_520, 20_480), (0, 0)]
    bam = tmp_path / "out.bam"
    check_ok(run_alnsort(["-o", str(bam), str(src)]))
    theirs = tmp_path / "samtools.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(data["ref"]), "-o", str(theirs), str(bam))
    rec = lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith("@"))  # noqa: E731
    got, want = rec(_view(outs[1], data["ref"])), rec(_view(theirs, data["ref"]))
    assert want.count("\n") + 1 == 25_000
    assert_same_text(want, got, "CRAM out of three containers read back")


def _crai_lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode().splitlines()


@pytest.mark.parametrize("src", ["sam_rg_mixed", "many"])
def test_cram_write_index_gives_the_crai_samtools_index_makes(alnsort_bin, data, tmp_path, src):
    """--write-index with CRAM output writes out.cram.crai: the same lines
    as `samtools index` of the same file (one slice of several references
    and unmapped reads, one line per reference; or three containers), the
    same bytes for -@1 and -@3, and region queries through it return every
    record overlapping the region."""
    path = _many_records_sam(data, tmp_path / "many.sam") if src == "many" else data[src]
    outs = []
    for threads in ("1", "3"):
        cram = tmp_path / f"out{threads}.cram"
        check_ok(run_alnsort(["--no-PG", "-@", threads, "--write-index", "-O", "cram", "--reference", str(data["ref"]), "-o", str(cram), str(path)]))
        outs.append(cram)
    crai = Path(f"{outs[1]}.crai")
    assert crai.read_bytes() == Path(f"{outs[0]}.crai").read_bytes()
    copy = tmp_path / "copy.cram"
    copy.write_bytes(outs[1].read_bytes())
    oracle.samtools("index", str(copy))
    want = _crai_lines(Path(f"{copy}.crai"))
    assert len(want) >= (4 if src != "many" else 3)
    assert _crai_lines(crai) == want
    # The file itself too: the gzip stream zlib writes, as samtools does.
    assert crai.read_bytes() == Path(f"{copy}.crai").read_bytes(), "the .crai differs from samtools index's bytes"
    # Region queries through alnsort's index against a scan of the file.
    import pysam

    with pysam.AlignmentFile(str(outs[1]), "rc", reference_filename=str(data["ref"])) as f:
        everything = [(r.query_name, r.flag, r.reference_name, r.reference_start, r.reference_end or r.reference_start + 1) for r in f.fetch(until_eof=True)]
        for ref, beg, end in (("chrA", 1000, 5000), ("chrB", 0, 800), ("chrC", 2500, 2600), ("chrA", 40_000, 41_000)):
            got = [(r.query_name, r.flag) for r in f.fetch(ref, beg, end)]
            want_region = [(n, fl) for n, fl, rn, s, e in everything if rn == ref and s < end and e > beg]
            assert want_region, (ref, beg, end)
            assert got == want_region, (ref, beg, end)


def test_cram_write_index_in_minimiser_order_is_refused(alnsort_bin, data, tmp_path):
    out = tmp_path / "out.cram"
    res = run_alnsort(["-M", "--write-index", "-O", "cram", "--reference", str(data["ref"]), "-o", str(out), str(data["sam_plain"])], cwd=str(tmp_path))
    assert res.returncode != 0
    assert "--write-index with CRAM output is supported for coordinate order only" in res.stderr.decode()
    assert not out.exists()


def _picard() -> list[str]:
    """Picard 3.4.0 (htsjdk) as tests/markdup finds it; skipped loudly when
    java or Picard is missing (a failure under CI)."""
    import shutil
    import sys
    import warnings

    env = os.environ.get("ALNSORT_PICARD_LIB")
    lib = Path(env) if env else Path(__file__).resolve().parents[2] / ".tools" / "picard" / "lib"
    why = None
    if shutil.which("java") is None:
        why = "java is not on PATH"
    elif not any(lib.glob("picard-3.4.0*.jar")):
        why = f"Picard 3.4.0 is not installed in {lib} (run `bash scripts/picard.sh` or set ALNSORT_PICARD_LIB)"
    if why:
        msg = f"HTSJDK CRAM READ-GROUP TEST NOT RUN: {why}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg, pytrace=False)
        warnings.warn(msg)
        print(f"\n*** {msg} ***", file=sys.stderr)
        pytest.skip(msg)
    return ["java", "-Xmx1g", "-cp", str(lib / "*"), "picard.cmdline.PicardCommandLine"]


def test_htsjdk_reads_the_read_groups_samtools_reads(alnsort_bin, data, tmp_path):
    """htsjdk (Picard 3.4.0 ViewSam) reads alnsort's CRAM 3.0 with RG tags
    (header groups, names not in the header, records without RG) into the
    records, every field (FLAG, RNEXT, PNEXT included) and tag, RG included
    and in the same place, that it reads from samtools' CRAM of the same
    input, but TLEN: alnsort stores mates detached, so htsjdk reads the
    TLENs samtools reads (the input's), where from samtools' CRAM it
    rebuilds those of attached mates by its own rule (e.g. -8 for -172).
    RG:i records are left out of the input: htsjdk fails on them whoever
    wrote the CRAM."""
    import subprocess

    picard = _picard()
    src = tmp_path / "in.sam"
    src.write_text("".join(ln for ln in data["sam_rg_mixed"].read_text().splitlines(keepends=True) if "\tRG:i:" not in ln))
    ours, theirs = tmp_path / "ours.cram", tmp_path / "theirs.cram"
    check_ok(run_alnsort(["-O", "cram,version=3.0", "--reference", str(data["ref"]), "-o", str(ours), str(src)]))
    oracle.samtools("sort", "--no-PG", "-O", "cram,version=3.0", "--reference", str(data["ref"]), "-o", str(theirs), str(src))

    def view(path: Path) -> list[tuple]:
        res = subprocess.run(
            [*picard, "ViewSam", "-I", str(path), "-R", str(data["ref"]), "--ALIGNMENT_STATUS", "All",
             "--PF_STATUS", "All", "--VALIDATION_STRINGENCY", "SILENT"],
            capture_output=True, check=False,
        )
        assert res.returncode == 0, res.stderr.decode()[-2000:]
        lines = [ln.split("\t") for ln in res.stdout.decode().splitlines() if not ln.startswith("@")]
        return sorted(tuple(f) for f in lines)

    got, want = view(ours), view(theirs)
    tlen = sorted((f[0], f[1], f[8]) for f in (ln.split("\t") for ln in _records(_view(ours, data["ref"]))))
    assert sorted((f[0], f[1], f[8]) for f in got) == tlen
    assert sum((g[0], g[1], g[8]) != (w[0], w[1], w[8]) for g, w in zip(got, want)) > 0
    got = [(*f[:8], *f[9:]) for f in got]
    want = [(*f[:8], *f[9:]) for f in want]
    assert len(want) == 2 * 700 + 4 + 60 + 40 - sum("\tRG:i:" in ln for ln in data["sam_rg_mixed"].read_text().splitlines())
    assert sum(any(t.startswith("RG:Z:") for t in r) for r in want) > len(want) // 2
    assert any("RG:Z:gX" in r for r in want)
    assert got == want


# ---------------------------------------------------------------------------
# CRAM input of every kind samtools writes, decoded by alnsort's own record
# decoder (crates/cram/src/records.rs).

KINDS = {
    "3.0": "cram,version=3.0",
    "3.1": "cram,version=3.1,use_tok=0",
    "3.1_tok": "cram,version=3.1",
    "lossy_names": "cram,version=3.0,lossy_names=1",
    "lossy_names_3.1": "cram,version=3.1,use_tok=0,lossy_names=1",
    "embed_ref": "cram,version=3.0,embed_ref=1",
    "no_ref": "cram,version=3.0,no_ref=1",
    "no_ref_3.1": "cram,version=3.1,use_tok=0,no_ref=1",
    "small_slices": "cram,version=3.0,seqs_per_slice=50",
}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> dict[str, Path]:
    """A SAM input (unsorted and sorted) on 3 large and 30 small references
    (a few reads each, so that samtools writes slices of several
    references), with the generated pairs, long reads, SEQ * and unmapped
    reads of `generate`, plus hard clips, N skips, padding, deletions and
    records with bases but no qualities."""
    d = tmp_path_factory.mktemp("cram_kinds")
    rng = random.Random(11)
    seqs = _ref_seqs(rng)
    for k in range(30):
        seqs[f"s{k:02d}"] = "".join(rng.choice(BASES) for _ in range(3000))
    ref = d / "ref.fa"
    _write_fasta(ref, seqs)
    oracle.samtools("faidx", str(ref))
    text = generate(41, {k: seqs[k] for k in ("chrA", "chrB", "chrC")}, True)
    hdr = [ln for ln in text.splitlines() if ln.startswith("@") and not ln.startswith("@SQ")]
    hdr += [f"@SQ\tSN:{n}\tLN:{len(s)}" for n, s in seqs.items()]
    recs = [ln for ln in text.splitlines() if not ln.startswith("@")]
    for k in range(30):
        n = f"s{k:02d}"
        s = seqs[n]
        for j in range(k % 3 + 1):
            p = rng.randint(100, 2000)
            q = s[p : p + 50] + s[p + 150 : p + 200]
            recs.append(f"skip{k}_{j}\t0\t{n}\t{p + 1}\t20\t3H50M100N50M2H\t*\t0\t0\t{q}\t{_qual(rng, 100)}\tXI:i:{k}")
        p = rng.randint(100, 2000)
        q = s[p : p + 30] + "AC" + s[p + 30 : p + 60]
        recs.append(f"pad{k}\t16\t{n}\t{p + 1}\t20\t30M1P2I1P30M\t*\t0\t0\t{q}\t*")
        q = s[p : p + 10] + s[p + 15 : p + 35]
        recs.append(f"del{k}\t0\t{n}\t{p + 1}\t20\t10M5D20M\t*\t0\t0\t{q}\t*\tXZ:Z:x")
    rng.shuffle(recs)
    unsorted = d / "in.sam"
    unsorted.write_text("\n".join(hdr + recs) + "\n")
    srt = d / "sorted.sam"
    oracle.samtools("sort", "--no-PG", "-o", str(srt), str(unsorted))
    return {"ref": ref, "unsorted": unsorted, "sorted": srt, "dir": d}


def _kind_cram(kinds: dict[str, Path], src: str, kind: str) -> Path:
    cram = kinds["dir"] / f"{src}_{kind}.cram"
    if not cram.exists():
        oracle.samtools("view", "--no-PG", "-O", KINDS[kind], "-T", str(kinds["ref"]), "-o", str(cram), str(kinds[src]))
    return cram


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("src", ["unsorted", "sorted"])
def test_cram_input_of_every_kind_matches_samtools(alnsort_bin, kinds, tmp_path, src, kind):
    """Every CRAM samtools writes (3.0, 3.1, names not stored, embedded
    reference, no reference, slices of several references) sorts into the
    records samtools sort gives: generated names (`<file name>:<record
    number>`, the mate's number for the second of attached mates), no MD/NM
    where samtools has no reference to compute them (no_ref), the mate
    fields of attached mates."""
    cram = _kind_cram(kinds, src, kind)
    if kind == "small_slices" and src == "sorted":
        # The input does hold slices of several references.
        assert -2 in [ref_id for _, ref_id, _, _ in harness.cram_containers(cram.read_bytes())]
    out = tmp_path / "out.bam"
    check_ok(run_alnsort(["--reference", str(kinds["ref"]), "-o", str(out), str(cram)]))
    expected = _samtools_sorted([], cram, kinds["ref"], tmp_path)
    assert_same_text(expected, oracle.strip_pg(oracle.view(str(out))), f"CRAM {kind} of {src} input")
    if kind.startswith("lossy_names"):
        assert f"\n{cram.name}:" in expected


def test_damaged_cram_input_is_an_error_naming_file_and_container(alnsort_bin, kinds, tmp_path):
    """A CRAM cut short, or with bytes changed inside a container, is an
    error naming the file and the container (and the record where the
    decoder knows it), never a crash, and leaves no output."""
    cram = _kind_cram(kinds, "sorted", "small_slices").read_bytes()
    rng = random.Random(5)
    cases = []
    for cut in (len(cram) // 3, len(cram) // 2, len(cram) - 50):
        cases.append(("cut", cram[:cut]))
    for _ in range(12):
        b = bytearray(cram)
        at = rng.randint(len(cram) // 4, len(cram) - 100)
        for k in range(4):
            b[at + k] ^= 0x5A
        cases.append(("flip", bytes(b)))
    for what, data in cases:
        src = tmp_path / "bad.cram"
        src.write_bytes(data)
        out = tmp_path / "out.bam"
        res = run_alnsort(["--reference", str(kinds["ref"]), "-o", str(out), str(src)], cwd=str(tmp_path))
        err = res.stderr.decode()
        assert res.returncode not in (0, 101) and "panicked" not in err, (what, res.returncode, err)
        assert "bad.cram" in err and "container" in err, (what, err)
        assert not out.exists()


# ---- read names through the CRAM 3.1 name tokeniser ---------------------------------

def _name_styles(rng: random.Random) -> dict[str, list[str]]:
    """Read-name sets of the forms sequencers and archives use, each in
    the order a sorted or an unsorted file would hold them."""
    n = 3000
    illumina = [f"A00123:8:H5KJDSX2:{rng.randrange(1, 5)}:{rng.choice((1101, 1102, 2101, 2488))}:"
                f"{rng.randrange(1000, 32000)}:{rng.randrange(1000, 37000)}" for _ in range(n)]
    srr = [f"SRR123.{i}" for i in range(1, n + 1)]
    srr_sparse = [f"SRR9876543.{i * 7 + rng.randrange(7)}" for i in range(n)]
    hexes = [f"r{rng.getrandbits(40):010x}.{i}" for i in range(n)]
    zeros = [f"{i:08d}" for i in range(n)] + [f"read_{rng.randrange(100000):06d}_x{rng.randrange(3):02d}" for _ in range(n)]
    dups = [name for i in range(n // 3) for name in [f"frag{i:05d}"] * rng.randrange(1, 5)]
    mixed = [rng.choice(["a", "a:1", "a-1-b", "x.y.z.1", "read-10", "read10", "r12345678901234",
                         f"m{rng.randrange(10 ** 12)}", f"q_{rng.randrange(99)}:{rng.randrange(10)}#0/1",
                         f"{rng.randrange(5)}", f"z{'0' * rng.randrange(12)}{rng.randrange(100)}"]) for _ in range(n)]
    return {"illumina": illumina, "srr": srr, "srr_sparse": srr_sparse, "hex": hexes, "zeros": zeros,
            "dups": dups, "mixed": mixed, "one": ["only.1"]}


@pytest.fixture(scope="module")
def name_crams(tmp_path_factory) -> dict[str, Path]:
    """Unmapped reads named in each style, written by samtools 1.24 as CRAM
    3.1 (the name tokeniser): the default profile (rANS Nx16 streams), one
    record per slice, and the archive profile (arithmetic-coded streams)."""
    d = tmp_path_factory.mktemp("names")
    rng = random.Random(31)
    out = {}
    for style, names in _name_styles(rng).items():
        sam = d / f"{style}.sam"
        with open(sam, "w") as fh:
            fh.write("@HD\tVN:1.6\tSO:unsorted\n")
            for name in names:
                seq = "".join(rng.choice("ACGT") for _ in range(rng.randrange(20, 60)))
                fh.write(f"{name}\t4\t*\t0\t0\t*\t*\t0\t0\t{seq}\t{_qual(rng, len(seq))}\n")
        for profile, opts in (("normal", ""), ("slice1", ",seqs_per_slice=1"), ("archive", ",archive")):
            if profile == "slice1" and len(names) > 300:
                continue
            cram = d / f"{style}-{profile}.cram"
            oracle.samtools("view", "--no-PG", "-O", f"cram,version=3.1{opts}", "-o", str(cram), str(sam))
            out[f"{style}-{profile}"] = cram
    return out


@pytest.mark.parametrize("order", [[], ["-n"]], ids=["coordinate", "name"])
def test_cram31_read_names_of_every_style_decode_as_samtools(alnsort_bin, name_crams, tmp_path, order):
    """Names written with the name tokeniser (DIFF and DUP names, every
    token type, both entropy coders, one-name slices) come back exactly as
    samtools 1.24 reads them."""
    for key, src in name_crams.items():
        out = tmp_path / f"{key}.bam"
        check_ok(run_alnsort([*order, "-o", str(out), str(src)]))
        expected = tmp_path / f"{key}-expected.bam"
        oracle.samtools("sort", *order, "-o", str(expected), str(src))
        assert_same_text(oracle.strip_pg(oracle.view(str(expected))), oracle.strip_pg(oracle.view(str(out))),
                         f"{key}, order {order}")


# ---- every block codec samtools writes ---------------------------------------------

CODEC_PROFILES = {
    # profile: (CRAM options, block methods the file must use)
    "3.0-gzip-lzma": ("version=3.0,use_lzma=1,level=9", {1, 3}),
    "3.0-rans": ("version=3.0", {4}),
    "3.1-small": ("version=3.1,small", {2, 5, 8}),
    "3.1-archive": ("version=3.1,archive", {6, 7, 8}),
}


def _illumina_like(text: str, path: Path, copies: int = 10) -> None:
    """The records of `text` `copies` times, each copy's reads renamed in
    Illumina's style (mates keep one name) and given qualities shaped as a
    sequencer's (falling along the read, with noise): what samtools'
    fqzcomp and name tokeniser are chosen for."""
    rng = random.Random(9)
    lines = text.splitlines()
    out = [ln for ln in lines if ln.startswith("@")]
    for c in range(copies):
        names: dict[str, str] = {}
        for ln in lines:
            if ln.startswith("@"):
                continue
            f = ln.split("\t")
            if f[0] not in names:
                names[f[0]] = f"A00123:8:H5KJDSX2:{c + 1}:1101:{rng.randrange(1000, 32000)}:{len(names) + 1000}"
            f[0] = names[f[0]]
            if f[10] != "*":
                n = len(f[10])
                f[10] = "".join(chr(33 + 38 - 24 * i // n + rng.randrange(-2, 3)) for i in range(n))
            out.append("\t".join(f))
    path.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("profile", list(CODEC_PROFILES))
def test_cram_of_every_block_codec_decodes_as_samtools(alnsort_bin, data, tmp_path, profile):
    """samtools 1.24's CRAMs whose blocks use gzip, bzip2, xz, rANS 4x8,
    rANS Nx16, the arithmetic coder, fqzcomp and the name tokeniser (checked
    in the file) sort to exactly samtools' records."""
    opts, methods = CODEC_PROFILES[profile]
    sam = tmp_path / "in.sam"
    _illumina_like(generate(41, _ref_seqs(random.Random(5)), True), sam)
    ref = tmp_path / "ref.fa"
    _write_fasta(ref, _ref_seqs(random.Random(5)))
    cram = tmp_path / "in.cram"
    oracle.samtools("view", "--no-PG", "-O", f"cram,{opts}", "-T", str(ref), "-o", str(cram), str(sam))
    used = {m for _, _, m, _, _ in harness.cram_blocks(cram.read_bytes())}
    assert methods <= used, f"{profile}: samtools used methods {sorted(used)}"
    for order in ([], ["-n"]):
        out = tmp_path / "out.bam"
        check_ok(run_alnsort([*order, "--reference", str(ref), "-o", str(out), str(cram)]))
        expected = _samtools_sorted(order, cram, ref, tmp_path)
        assert_same_text(expected, oracle.strip_pg(oracle.view(str(out))), f"{profile}, order {order}")


@pytest.mark.parametrize("src", ["sam_norg", "extra_alignments"])
def test_htsjdk_reads_records_noodles_could_not_write(alnsort_bin, data, tmp_path, src):
    """htsjdk (Picard 3.4.0 ViewSam) reads alnsort's CRAM of aligned records
    without bases, long reads, unmapped reads and supplementary/secondary
    alignments into the fields it reads from samtools' CRAM of the same
    input (tags aside: samtools drops and re-adds MD/NM), and reads the TLEN
    samtools reads from alnsort's CRAM."""
    import subprocess

    picard = _picard()
    path = _with_extra_alignments(data["sam_norg"], tmp_path / "extra.sam") if src == "extra_alignments" else data[src]
    ours, theirs = tmp_path / "ours.cram", tmp_path / "theirs.cram"
    check_ok(run_alnsort(["-O", "cram,version=3.0", "--reference", str(data["ref"]), "-o", str(ours), str(path)]))
    oracle.samtools("sort", "--no-PG", "-O", "cram,version=3.0", "--reference", str(data["ref"]), "-o", str(theirs), str(path))

    def view(p: Path) -> list[list[str]]:
        res = subprocess.run(
            [*picard, "ViewSam", "-I", str(p), "-R", str(data["ref"]), "--ALIGNMENT_STATUS", "All",
             "--PF_STATUS", "All", "--VALIDATION_STRINGENCY", "SILENT"],
            capture_output=True, check=False,
        )
        assert res.returncode == 0, res.stderr.decode()[-2000:]
        return [ln.split("\t") for ln in res.stdout.decode().splitlines() if not ln.startswith("@")]

    got, want = view(ours), view(theirs)
    fields = lambda rs: sorted((*f[:8], *f[9:11]) for f in rs)  # noqa: E731
    assert len(got) == len(_records(oracle.view(str(path)))) and any(f[9] == "*" and f[5] != "*" for f in got)
    assert fields(got) == fields(want)
    tlen = sorted((f[0], f[1], f[3], f[8]) for f in (ln.split("\t") for ln in _records(_view(ours, data["ref"]))))
    assert sorted((f[0], f[1], f[3], f[8]) for f in got) == tlen


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("order", ["coord", "name"])
@pytest.mark.parametrize("src", ["sam_norg", "extra_alignments"])
def test_cram_output_without_reference_no_ref(alnsort_bin, data, tmp_path, monkeypatch, src, order, version):
    """`-O cram,no_ref=1` stores the bases verbatim: it is written and read
    back without any reference to be found (no --reference, REF_PATH
    pointing nowhere), and samtools reads it as it reads its own no_ref
    CRAM of alnsort's BAM of the same sort."""
    path = _with_extra_alignments(data["sam_norg"], tmp_path / "extra.sam") if src == "extra_alignments" else data[src]
    cram, bam = tmp_path / "out.cram", tmp_path / "out.bam"
    check_ok(run_alnsort([*ORDERS[order], "-o", str(bam), str(path)]))
    monkeypatch.setenv("REF_PATH", str(tmp_path / "no-refs"))
    monkeypatch.delenv("REF_CACHE", raising=False)
    fmt = f"cram,version={version},no_ref=1"
    check_ok(run_alnsort([*ORDERS[order], "-O", fmt, "-o", str(cram), str(path)]))
    theirs = tmp_path / "samtools.cram"
    oracle.samtools("view", "--no-PG", "-O", fmt, "-o", str(theirs), str(bam))
    view = lambda p: _records(oracle.samtools("view", "--no-PG", str(p)).stdout.decode())  # noqa: E731
    got, want = view(cram), view(theirs)
    assert len(want) == len(_records(oracle.view(str(bam)))) > 1500
    assert_same_text("\n".join(want), "\n".join(got), f"no_ref CRAM of {src}, {order}, {version}")


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_cram_output_of_unusual_alignments(alnsort_bin, data, tmp_path, version):
    """Read features beyond the usual: a read running past the end of its
    reference, bases N and IUPAC codes (stored as B features where no
    substitution code fits), `=`/`X` CIGAR operations, padding, hard clips
    and reference skips, an insertion at the read's start, a record of
    soft clips only. samtools reads alnsort's CRAM as it reads its own CRAM
    of alnsort's BAM of the same input."""
    ref = _read_fasta(data["ref"])
    c = ref["chrC"]
    q = lambda n: "I" * n  # noqa: E731
    recs = [
        # 60 bases from 19,971: the last 30 past chrC's end (20,000).
        ("over", 0, "chrC", 19971, "60M", c[19970:] + "ACGT" * 7 + "AC"),
        # N and IUPAC bases against the reference, and an N read base.
        ("iupac", 16, "chrC", 101, "40M", c[100:110] + "NRYK" + c[114:130] + "NNMW" + c[134:140]),
        # = and X operations, P, H, N, an insertion first, soft clips only.
        ("eqx", 0, "chrC", 201, "5H2I10=1X9=4N8M5H", "GG" + c[200:210] + ("A" if c[210] != "A" else "C") + c[211:220] + c[224:232]),
        ("pad", 0, "chrC", 301, "10M2P3I10M", c[300:310] + "TTT" + c[310:320]),
        ("clips", 0, "chrC", 401, "30S", c[400:430]),
    ]
    lines = ["@HD\tVN:1.6\tSO:unsorted"] + [f"@SQ\tSN:{k}\tLN:{len(v)}" for k, v in ref.items()]
    for n, flag, rname, pos, cigar, seq in recs:
        lines.append("\t".join(map(str, [n, flag, rname, pos, 60, cigar, "*", 0, 0, seq, q(len(seq))])))
    src = tmp_path / "in.sam"
    src.write_text("\n".join(lines) + "\n")
    got, want, _ = _cram_records_ours_and_samtools(src, data["ref"], tmp_path, f"cram,version={version}", [])
    assert len(want) == len(recs)
    assert_same_text("\n".join(want), "\n".join(got), f"unusual alignments, {version}")


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_cram_output_of_a_cigar_too_long_for_bam(alnsort_bin, data, tmp_path, version):
    """A read of 66,000 CIGAR operations (more than BAM's 65,535: the record
    holds `kSmN` and the real CIGAR in CG) is encoded with its real CIGAR,
    as samtools encodes it: samtools reads alnsort's CRAM as its own."""
    ref = "".join(ln for ln in data["ref"].read_text().split(">chrA", 1)[1].split(">", 1)[0].splitlines()[1:]).upper()
    n = 33_000
    seq = "".join(ref[1000 + i] + "A" for i in range(n))
    lines = ["@HD\tVN:1.6\tSO:unsorted", "@SQ\tSN:chrA\tLN:60000", "@SQ\tSN:chrB\tLN:35000", "@SQ\tSN:chrC\tLN:20000"]
    lines.append("\t".join(["huge", "0", "chrA", "1001", "60", "1M1I" * n, "*", "0", "0", seq, "I" * len(seq)]))
    lines.append("\t".join(["small", "0", "chrA", "1001", "60", "10M", "*", "0", "0", ref[1000:1010], "I" * 10]))
    src = tmp_path / "in.sam"
    src.write_text("\n".join(lines) + "\n")
    got, want, _ = _cram_records_ours_and_samtools(src, data["ref"], tmp_path, f"cram,version={version}", [])
    assert len(want) == 2 and want[0].split("\t")[5] == "1M1I" * n
    assert_same_text("\n".join(want), "\n".join(got), f"a CIGAR too long for BAM, {version}")


def _with_md_nm(data, tmp: Path) -> Path:
    """data's plain SAM with MD and NM from `samtools calmd`, then varied
    record by record: both right, MD wrong, NM wrong, MD only, NM only,
    NM stored as a 32-bit integer, and both wrong; unmapped records and
    those without bases keep whatever calmd gave them."""
    sorted_bam = tmp / "sorted.bam"
    oracle.samtools("sort", "-o", str(sorted_bam), str(data["sam_plain"]))
    calmd = oracle.samtools("calmd", str(sorted_bam), str(data["ref"])).stdout.decode()
    out = []
    n = 0
    for ln in calmd.splitlines():
        if ln.startswith("@"):
            out.append(ln)
            continue
        f = ln.split("\t")
        tags = f[11:]
        md = [t for t in tags if t.startswith("MD:Z:")]
        nm = [t for t in tags if t.startswith("NM:i:")]
        rest = [t for t in tags if not t.startswith(("MD:Z:", "NM:i:"))]
        if md and nm:
            n += 1
            k = n % 7
            if k == 1:
                md = ["MD:Z:0" + md[0][5:]] if not md[0][5:].startswith("0") else ["MD:Z:9999"]
            elif k == 2:
                nm = [f"NM:i:{int(nm[0][5:]) + 1}"]
            elif k == 3:
                nm = []
            elif k == 4:
                md = []
            elif k == 5:
                md = ["MD:Z:" + md[0][5:].lower()]
            elif k == 6:
                md, nm = ["MD:Z:1"], ["NM:i:999"]
        # MD and NM in the middle of the other tags, so that their place shows.
        out.append("\t".join(f[:11] + rest[:1] + nm + md + rest[1:]))
    assert n > 100, n
    path = tmp / "md_nm.sam"
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_cram_output_leaves_out_md_nm_as_samtools_does(alnsort_bin, data, tmp_path, version):
    """MD and NM that a reader computes back the same are left out, as
    samtools leaves them out (and a reader appends them after the other
    tags); wrong or partial ones are stored: samtools reads alnsort's CRAM
    into exactly the records, tag order included, it reads from its own
    CRAM of alnsort's BAM. Fewer MD bytes are stored than with store_md=1."""
    src = _with_md_nm(data, tmp_path)
    got, want, _ = _cram_records_ours_and_samtools(src, data["ref"], tmp_path, f"cram,version={version}", [])
    assert_same_text("\n".join(want), "\n".join(got), f"MD/NM left out, {version}")
    # The records with right MD/NM got them back last: the rule was used.
    moved = [r for r in got if r.split("\t")[-2].startswith("MD:Z:") and r.split("\t")[-1].startswith("NM:i:")]
    assert len(moved) > 50, len(moved)

    def md_bytes(path: Path) -> int:
        blocks = [ln.split() for ln in _cram_size(path).splitlines() if ln.startswith("BLOCK")]
        return sum(int(b[2]) for b in blocks if b[-1] == "MDZ")

    stored = tmp_path / "stored.cram"
    check_ok(run_alnsort(["-O", f"cram,version={version},store_md=1,store_nm=1", "--reference", str(data["ref"]), "-o", str(stored), str(src)]))
    assert md_bytes(tmp_path / "out.cram") < md_bytes(stored) / 2


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_cram_output_store_md_nm_keeps_the_tags_in_place(alnsort_bin, data, tmp_path, version):
    """With store_md=1,store_nm=1 (htslib's options) every MD and NM is
    stored as given: samtools reads alnsort's CRAM of records that all carry
    both into the BAM's records, MD/NM in their place among the other tags."""
    sorted_bam = tmp_path / "sorted.bam"
    oracle.samtools("sort", "-o", str(sorted_bam), str(data["sam_plain"]))
    calmd = oracle.samtools("calmd", str(sorted_bam), str(data["ref"])).stdout.decode()
    lines = []
    for ln in calmd.splitlines():
        f = ln.split("\t")
        if ln.startswith("@") or int(f[1]) & 4 or f[9] == "*":
            # Only placed records with bases: a reader adds MD/NM to those
            # without, so the BAM is the yardstick only for these.
            if ln.startswith("@"):
                lines.append(ln)
            continue
        tags = f[11:]
        md = [t for t in tags if t.startswith(("MD:", "NM:"))]
        rest = [t for t in tags if not t.startswith(("MD:", "NM:"))]
        assert len(md) == 2, ln
        lines.append("\t".join(f[:11] + md + rest))
    src = tmp_path / "in.sam"
    src.write_text("\n".join(lines) + "\n")
    cram, bam = tmp_path / "out.cram", tmp_path / "out.bam"
    fmt = f"cram,version={version},store_md=1,store_nm=1"
    check_ok(run_alnsort(["-O", fmt, "--reference", str(data["ref"]), "-o", str(cram), str(src)]))
    check_ok(run_alnsort(["-o", str(bam), str(src)]))
    got = _records(_view(cram, data["ref"]))
    want = _records(oracle.samtools("view", "--no-PG", str(bam)).stdout.decode())
    assert len(want) > 100
    assert all("\tMD:Z:" in r for r in want)
    assert_same_text("\n".join(want), "\n".join(got), f"store_md/store_nm, {version}")


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("order", list(ORDERS))
def test_cram_output_embed_ref_reads_without_the_reference(alnsort_bin, data, tmp_path, monkeypatch, order, version):
    """embed_ref=1: each slice carries the reference bases it spans (one
    reference per slice), so samtools, and alnsort, read the file with no
    reference anywhere (no --reference, REF_PATH and REF_CACHE naming an
    empty directory): the records samtools reads from its own embed_ref=1
    CRAM of alnsort's BAM, in every order (name order: slices end at each
    change of reference)."""
    src = data["sam_plain"]
    fmt = f"cram,version={version},embed_ref=1"
    cram, bam = tmp_path / "out.cram", tmp_path / "out.bam"
    check_ok(run_alnsort([*ORDERS[order], "-O", fmt, "--reference", str(data["ref"]), "-o", str(cram), str(src)]))
    check_ok(run_alnsort([*ORDERS[order], "-o", str(bam), str(src)]))
    theirs = tmp_path / "samtools.cram"
    oracle.samtools("view", "--no-PG", "-O", fmt, "-T", str(data["ref"]), "-o", str(theirs), str(bam))
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("REF_PATH", f"{empty}/%s")
    monkeypatch.setenv("REF_CACHE", f"{empty}/%s")
    got = _records(oracle.samtools("view", "--no-PG", str(cram)).stdout.decode())
    want = _records(oracle.samtools("view", "--no-PG", str(theirs)).stdout.decode())
    assert len(want) == 2 * 700 + 4 + 60 + 40
    assert_same_text("\n".join(want), "\n".join(got), f"embed_ref=1 read by samtools, {order}, {version}")
    # alnsort reads it back without a reference too (to BAM, in its order).
    back = tmp_path / "back.bam"
    check_ok(run_alnsort([*ORDERS[order], "-o", str(back), str(cram)]))
    assert_same_text("\n".join(want), "\n".join(_records(oracle.view(str(back)))), f"embed_ref=1 read by alnsort, {order}")
    # Without embed_ref the same read fails for want of the reference (made
    # with a copy that is then removed: the @SQ UR names the FASTA given).
    plain, copy = tmp_path / "plain.cram", tmp_path / "copy.fa"
    copy.write_bytes(data["ref"].read_bytes())
    check_ok(run_alnsort([*ORDERS[order], "-O", f"cram,version={version}", "--reference", str(copy), "-o", str(plain), str(src)]))
    copy.unlink()
    assert f"UR:{copy}" in oracle.samtools("view", "-H", str(plain)).stdout.decode()
    assert oracle.samtools("view", str(plain), check=False).returncode != 0


def test_slice_md5_catches_a_wrong_reference_when_the_header_has_no_m5(alnsort_bin, data, tmp_path):
    """A CRAM of chrC's reads whose @SQ lines carry no M5 (samtools' CRAM,
    its header replaced by one without them), read with a chrC that differs in every
    100th base: the whole sequence cannot be checked, so each slice's MD5
    is, as htslib checks it: the error names the reference and the bases of
    the slice, and nothing is left behind. With the right reference the
    records are those samtools reads."""
    sam = [ln for ln in data["sam_plain"].read_text().splitlines()]
    header = [ln for ln in sam if ln.startswith("@") and "\tSN:chrA" not in ln and "\tSN:chrB" not in ln]
    body = [ln for ln in sam if not ln.startswith("@") and ln.split("\t")[2] == "chrC"
            and ln.split("\t")[6] in ("=", "*", "chrC")]
    assert len(body) > 50 and all("M5:" not in ln for ln in header)
    src = tmp_path / "chrC.sam"
    src.write_text("\n".join(header + body) + "\n")
    chrc = _read_fasta(data["ref"])["chrC"]
    wrong = "".join(("A" if b != "A" else "C") if i % 100 == 0 else b for i, b in enumerate(chrc))
    ref_c, bad_c = tmp_path / "c.fa", tmp_path / "bad_c.fa"
    _write_fasta(ref_c, {"chrC": chrc})
    _write_fasta(bad_c, {"chrC": wrong})
    sorted_sam = tmp_path / "sorted.sam"
    oracle.samtools("sort", "--no-PG", "-o", str(sorted_sam), str(src))
    with_m5 = tmp_path / "with_m5.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(ref_c), "-o", str(with_m5), str(sorted_sam))
    hdr = tmp_path / "h.sam"
    hdr.write_text("\n".join(header) + "\n")
    no_m5 = tmp_path / "no_m5.cram"
    no_m5.write_bytes(oracle.samtools("reheader", "--no-PG", str(hdr), str(with_m5)).stdout)
    assert "M5:" not in oracle.samtools("view", "-H", str(no_m5)).stdout.decode()
    out = tmp_path / "out.bam"
    res = run_alnsort(["--reference", str(bad_c), "-o", str(out), str(no_m5)], cwd=str(tmp_path))
    assert res.returncode != 0
    err = res.stderr.decode()
    assert "MD5 checksum reference mismatch at chrC:" in err and "the slice was written against bases of MD5" in err, err
    assert "no_m5.cram" in err, err
    assert not out.exists()
    made = {"chrC.sam", "c.fa", "c.fa.fai", "bad_c.fa", "sorted.sam", "with_m5.cram", "h.sam", "no_m5.cram"}
    assert harness.leftover_files(tmp_path, made) == []
    check_ok(run_alnsort(["--reference", str(ref_c), "-o", str(out), str(no_m5)]))
    want = oracle.samtools("view", "--no-PG", "-T", str(ref_c), str(no_m5)).stdout.decode()
    assert_same_text("\n".join(_records(want)), "\n".join(_records(oracle.view(str(out)))), "CRAM without M5s")


def test_htsjdk_reads_embed_ref_without_the_reference(alnsort_bin, data, tmp_path):
    """htsjdk (Picard 3.4.0 ViewSam, no -R) reads alnsort's embed_ref=1 CRAM
    into the fields (tags aside) samtools reads from it with no reference."""
    import subprocess

    picard = _picard()
    cram = tmp_path / "out.cram"
    check_ok(run_alnsort(["-O", "cram,embed_ref=1", "--reference", str(data["ref"]), "-o", str(cram), str(data["sam_plain"])]))
    res = subprocess.run(
        [*picard, "ViewSam", "-I", str(cram), "--ALIGNMENT_STATUS", "All", "--PF_STATUS", "All",
         "--VALIDATION_STRINGENCY", "SILENT"],
        capture_output=True, check=False, env={**os.environ, "REF_PATH": str(tmp_path / "none"), "REF_CACHE": str(tmp_path / "none")},
    )
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    got = [ln.split("\t")[:11] for ln in res.stdout.decode().splitlines() if not ln.startswith("@")]
    want = [ln.split("\t")[:11] for ln in _records(oracle.samtools("view", "--no-PG", str(cram)).stdout.decode())]
    assert len(want) == 2 * 700 + 4 + 60 + 40
    assert got == want


def _pair_cases(ref: Path, path: Path) -> Path:
    """Pairs whose TLENs htslib (1.24 and 1.16) and htsjdk rebuild alike or
    not: FR pairs apart and overlapping, one read inside the other, both
    from one start (either segment ending first), both ending at one end,
    reads of one base, RF and FF/RR orientations, TLENs one off or 0, a
    mate on another reference, a mate unmapped, a name with a supplementary
    record too, and unpaired reads: every geometry with either segment
    first and with the TLEN signs either way round."""
    ref_seq = _read_fasta(ref)
    a = ref_seq["chrA"]
    rows = []

    def rec(n, flag, rname, pos, cigar, rnext, pnext, tlen, length):
        seq = (a if rname == "chrA" else ref_seq[rname])[pos - 1:pos - 1 + length] if rname != "*" else "A" * length
        mapq = 0 if flag & 0x4 else 60  # a CRAM reader gives unmapped records MAPQ 0
        rows.append("\t".join(map(str, [n, flag, rname, pos, mapq, cigar, rnext, pnext, tlen, seq, "I" * length])))

    def sam_tlen(p1, l1, p2, l2):
        left, right = min(p1, p2), max(p1 + l1 - 1, p2 + l2 - 1)
        return right - left + 1

    k = 0
    # (start1, len1, reverse1, start2, len2, reverse2, tlen change)
    cases = [
        (1000, 100, False, 1300, 100, True, 0),    # FR apart
        (2000, 100, False, 2050, 100, True, 0),    # FR overlapping
        (3000, 150, False, 3020, 80, True, 0),     # second inside the first
        (4000, 100, False, 4000, 100, True, 0),    # one start, one end
        (5000, 100, False, 5000, 60, True, 0),     # one start
        (6000, 60, False, 5960, 100, True, 0),     # one end, the reverse read leftmost
        (7000, 100, True, 7300, 100, False, 0),    # RF
        (8000, 100, False, 8300, 100, False, 0),   # FF
        (9000, 100, True, 9300, 100, True, 0),     # RR
        (10000, 100, False, 10300, 100, True, 1),  # TLEN one off
        (11000, 100, False, 11300, 100, True, None),  # TLEN 0
        (15200, 1, False, 15200, 1, True, 0),      # one base each, one place
        (15300, 1, False, 15250, 100, True, 0),    # one base inside the other
        (15500, 100, True, 15500, 40, False, 0),   # one start, RF, the reverse longer
        (15800, 50, False, 15700, 150, True, 0),   # first inside the second
        (16000, 80, False, 15980, 100, False, 0),  # FF, one end
    ]  # every start below 16384: 2 bytes of ITF8 in NP
    for s1, l1, r1, s2, l2, r2, change in cases:
        for first_is_r1, flip in ((True, False), (False, False), (True, True), (False, True)):
            k += 1
            t = sam_tlen(s1, l1, s2, l2)
            t1 = t if s1 <= s2 else -t
            if change is None:
                t1 = 0
            elif change:
                t1 += change
            if flip:
                t1 = -t1
            f1 = 0x1 | (0x10 if r1 else 0) | (0x20 if r2 else 0) | (0x40 if first_is_r1 else 0x80)
            f2 = 0x1 | (0x10 if r2 else 0) | (0x20 if r1 else 0) | (0x80 if first_is_r1 else 0x40)
            rec(f"p{k}", f1, "chrA", s1, f"{l1}M", "=", s2, t1, l1)
            rec(f"p{k}", f2, "chrA", s2, f"{l2}M", "=", s1, -t1, l2)
    # Mate on another reference; mate unmapped (placed at its mate).
    rec("x1", 0x1 | 0x40, "chrA", 12000, "100M", "chrB", 500, 0, 100)
    rec("x1", 0x1 | 0x80, "chrB", 500, "100M", "chrA", 12000, 0, 100)
    rec("u1", 0x1 | 0x40 | 0x8, "chrA", 13000, "100M", "=", 13000, 0, 100)
    rec("u1", 0x1 | 0x80 | 0x4, "chrA", 13000, "*", "=", 13000, 0, 100)
    # A pair with a supplementary record of the same name.
    rec("s1", 0x1 | 0x40, "chrA", 14000, "100M", "=", 14300, 400, 100)
    rec("s1", 0x1 | 0x80 | 0x10 | 0x20, "chrA", 14300, "100M", "=", 14000, -400, 100)
    rec("s1", 0x1 | 0x40 | 0x800, "chrA", 14600, "50M", "=", 14300, 0, 50)
    rec("single", 0, "chrA", 15000, "100M", "*", 0, 0, 100)
    header = ["@HD\tVN:1.6\tSO:unsorted"] + [f"@SQ\tSN:{n}\tLN:{len(s)}" for n, s in ref_seq.items()]
    path.write_text("\n".join(header + rows) + "\n")
    return path


# The samtools of Debian 12 and Ubuntu 22.04/24.04 (1.16.1, 1.13, 1.19.2):
# htslib before 1.23 rebuilds an attached pair's TLEN signs with another
# tie rule than 1.24 (htslib commit 4ec8b744).
OLD_SAMTOOLS = os.environ.get("ALNSORT_OLD_SAMTOOLS", "/usr/bin/samtools")


def _old_samtools() -> str:
    """A samtools built on htslib 1.10 to 1.22 (scripts/test.sh installs
    Debian's with apt-get); its absence fails the test, never skips it."""
    import subprocess

    try:
        res = subprocess.run([OLD_SAMTOOLS, "--version"], capture_output=True, check=False)
    except OSError as e:
        pytest.fail(f"OLD SAMTOOLS NOT FOUND at {OLD_SAMTOOLS} ({e}): apt-get install samtools "
                    "or set ALNSORT_OLD_SAMTOOLS", pytrace=False)
    first = res.stdout.decode("latin-1").splitlines()[0] if res.returncode == 0 and res.stdout else ""
    minor = first.split(" ")[1].split(".")[:2] if first.startswith("samtools 1.") else []
    if len(minor) != 2 or not minor[1].isdigit() or not 10 <= int(minor[1]) <= 22:
        pytest.fail(f"{OLD_SAMTOOLS} is {first or 'not a samtools'}: the test needs one of 1.10 to 1.22 "
                    "(apt-get install samtools on Debian 12 gives 1.16.1)", pytrace=False)
    return OLD_SAMTOOLS


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("order", ["coord", "name"])
def test_cram_output_attaches_mates_that_read_back_the_same(alnsort_bin, data, tmp_path, order, version):
    """Pairs in one slice are stored attached where htslib 1.24, htslib 1.16
    and htsjdk all rebuild each record's mate fields and TLEN as given, else
    detached: samtools 1.24, an older samtools (1.16, whose tie rule for
    pairs from one start differs) and htsjdk (Picard ViewSam) all read
    every field but the tags of alnsort's CRAM as they are in the BAM, TLEN
    included, and some pairs (not all) were attached (an NF series is
    written, fewer NP values than records)."""
    import subprocess

    src = _pair_cases(data["ref"], tmp_path / "pairs.sam")
    got, theirs, bam = _cram_records_ours_and_samtools(src, data["ref"], tmp_path, f"cram,version={version}", ORDERS[order])
    # The yardstick is the BAM's fields (samtools' own CRAM changes some
    # TLENs: it attaches pairs from one start and rebuilds their TLEN with
    # the other sign); the tags are MD/NM added on reading.
    fields = lambda recs: [ln.split("\t")[:11] for ln in recs]  # noqa: E731
    want = fields(_records(oracle.view(str(bam))))
    assert len(want) == len(got) == len(theirs) == 136
    assert fields(got) == want
    ours = tmp_path / "out.cram"
    old = subprocess.run(
        [_old_samtools(), "view", "--no-PG", "-T", str(data["ref"]), str(ours)], capture_output=True, check=False
    )
    assert old.returncode == 0, old.stderr.decode()[-2000:]
    assert fields(old.stdout.decode().splitlines()) == want
    if version == "3.0":  # htsjdk reads CRAM 3.0 only
        res = subprocess.run(
            [*_picard(), "ViewSam", "-I", str(ours), "-R", str(data["ref"]), "--ALIGNMENT_STATUS", "All",
             "--PF_STATUS", "All", "--VALIDATION_STRINGENCY", "SILENT"],
            capture_output=True, check=False,
        )
        assert res.returncode == 0, res.stderr.decode()[-2000:]
        htsjdk = [ln.split("\t")[:11] for ln in res.stdout.decode().splitlines() if not ln.startswith("@")]
        assert htsjdk == want
    sizes = [ln.split() for ln in _cram_size(ours).splitlines() if ln.startswith("BLOCK")]
    raw = {b[-1]: int(b[2]) for b in sizes}
    assert raw.get("NF", 0) > 0, sizes
    # NP holds one ITF8 per detached record only: 2 bytes for each of these
    # positions (1 for the unpaired read's 0), 271 bytes were all detached;
    # at least four pairs are attached.
    assert 0 < raw.get("NP", 0) <= 271 - 2 * 8, sizes
