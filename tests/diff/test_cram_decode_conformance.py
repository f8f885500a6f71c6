"""CRAM decoding as samtools 1.24 (pysam 0.24.1) decodes, on the cases the
public conformance data (hts-specs, htslib's and htsjdk's test files) showed
alnsort decoding otherwise; every input is made here, by samtools from a
generated SAM or by editing the bytes samtools wrote.

Contracts under test:
* CRAM 2.0 and 2.1 (samtools writes both) are read into the records
  samtools reads, in coordinate and name order; CRAM 1.x and 4.x are
  refused by their version, not as damaged files. The header container's
  blocks are read whatever its length says, as htslib reads them (CRAM 2.1
  writers gave lengths two bytes short of them).
* A one-byte cF tag is htslib's CRAM flags for the record: never output,
  and its bits 1 and 2 say that MD and NM are not to be generated.
* MD and NM of a read that runs past its reference's end are htslib's:
  the bases past the end add nothing to NM, and the first feature there
  ends the MD.
* Every slice's reference MD5 is checked as htslib checks it, even when the
  @SQ M5 matches the reference given: a slice written against other bases
  is an error naming the reference and the slice's range, nothing written.
"""

from __future__ import annotations

import random
import re
import zlib
from pathlib import Path

import harness
import oracle
import pytest
from harness import assert_same_text, check_ok, run_alnsort
from test_cram import _itf8, _ltf8, _md5, _ref_seqs, _write_fasta, generate


@pytest.fixture(scope="module")
def refs(tmp_path_factory) -> dict[str, Path]:
    """A reference, a copy with one base of chrC changed, and a SAM of
    reads on them (pairs, tags, unmapped reads)."""
    d = tmp_path_factory.mktemp("cram_conformance")
    seqs = _ref_seqs(random.Random(7))
    ref = d / "ref.fa"
    _write_fasta(ref, seqs)
    bad = dict(seqs)
    c = list(bad["chrC"])
    c[500] = "A" if c[500] != "A" else "C"
    bad["chrC"] = "".join(c)
    bad_ref = d / "bad.fa"
    _write_fasta(bad_ref, bad)
    for r in (ref, bad_ref):
        oracle.samtools("faidx", str(r))
    # chrC's reads alone, so that samtools writes single-reference slices
    # (whose MD5 htslib checks), not one multi-reference slice.
    lines = generate(33, seqs, True).splitlines()
    chrc = [ln for ln in lines if not ln.startswith("@") and ln.split("\t")[2] == "chrC" and ln.split("\t")[6] in ("=", "*")]
    assert len(chrc) > 200
    sam = d / "in.sam"
    sam.write_text("\n".join([ln for ln in lines if ln.startswith("@")] + chrc) + "\n")
    every = d / "every.sam"
    every.write_text("\n".join(lines) + "\n")
    return {"dir": d, "ref": ref, "every": every, "bad_ref": bad_ref, "sam": sam, "md5_chrC": Path(_md5(seqs["chrC"]))}


def test_slice_md5_is_checked_when_the_sq_m5_matches(alnsort_bin, refs, tmp_path):
    """A CRAM written by samtools against a chrC that differs in one base,
    its header then given the M5s of the right reference: the @SQ M5 matches
    the reference given, but the slices over base 501 were written against
    other bases. samtools refuses it (`MD5 checksum reference mismatch at
    chrC:START-END`); so does alnsort, naming the file, the reference and
    the slice's range, and writing nothing."""
    written = tmp_path / "written.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(refs["bad_ref"]), "-o", str(written), str(refs["sam"]))
    with_right = tmp_path / "right.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(refs["ref"]), "-o", str(with_right), str(refs["sam"]))
    right = oracle.samtools("view", "--no-PG", "-H", str(with_right)).stdout.decode()
    assert f"M5:{refs['md5_chrC']}" in right
    hdr = tmp_path / "h.sam"
    hdr.write_text(right)
    cram = tmp_path / "in.cram"
    cram.write_bytes(oracle.samtools("reheader", "--no-PG", str(hdr), str(written)).stdout)
    theirs = oracle.samtools("view", "-T", str(refs["ref"]), str(cram), check=False)
    assert theirs.returncode != 0
    assert b"MD5 checksum reference mismatch at chrC:" in theirs.stderr
    for order in ([], ["-n"]):
        out = tmp_path / "out.bam"
        res = run_alnsort([*order, "--reference", str(refs["ref"]), "-o", str(out), str(cram)])
        assert res.returncode != 0
        err = res.stderr.decode()
        assert "in.cram" in err and "MD5 checksum reference mismatch at chrC:" in err, err
        assert not out.exists()
        assert harness.leftover_files(tmp_path, {"written.cram", "right.cram", "h.sam", "in.cram"}) == []


def _sorted_both(src: Path, ref: Path | None, order: list[str], tmp: Path) -> tuple[str, str]:
    """(samtools sort's SAM, alnsort sort's SAM) of `src`, no @PG."""
    extra = ["--reference", str(ref)] if ref else []
    theirs, ours = tmp / "samtools.sam", tmp / "alnsort.sam"
    oracle.samtools("sort", *order, "-O", "sam", "--no-PG", *extra, "-o", str(theirs), str(src))
    check_ok(run_alnsort([*order, "-O", "sam", "--no-PG", *extra, "-o", str(ours), str(src)]))
    return theirs.read_text(), ours.read_text()


@pytest.mark.parametrize("version", ["2.0", "2.1"])
@pytest.mark.parametrize("order", [[], ["-n"]], ids=["coord", "name"])
@pytest.mark.parametrize("src", ["sam", "every"])
def test_cram2_input_matches_samtools(alnsort_bin, refs, tmp_path, version, order, src):
    """samtools' CRAM 2.0 and 2.1 (no CRC32s, ITF8 record counters) of
    reads with mates, tags, read groups and unmapped reads, on one
    reference (single-reference slices) or on all (a multi-reference
    slice): alnsort sort prints what samtools sort prints."""
    cram = tmp_path / "in.cram"
    oracle.samtools(
        "view", "--no-PG", "-C", "--output-fmt-option", f"version={version}", "-T", str(refs["ref"]),
        "-o", str(cram), str(refs[src]),
    )
    assert cram.read_bytes()[:6] == b"CRAM" + bytes([2, int(version[2])])
    theirs, ours = _sorted_both(cram, refs["ref"], order, tmp_path)
    assert theirs.count("\n") > 200
    assert_same_text(theirs, ours, f"CRAM {version} {order}")


@pytest.mark.parametrize("version", [(1, 0), (4, 0), (3, 2)])
def test_unsupported_cram_versions_are_refused_by_name(alnsort_bin, refs, tmp_path, version):
    """A file definition naming a version alnsort does not read (samtools'
    3.0 CRAM with its version bytes changed) is refused by that version,
    not reported as a checksum error; nothing is written."""
    cram = tmp_path / "in.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(refs["ref"]), "-o", str(cram), str(refs["sam"]))
    b = bytearray(cram.read_bytes())
    b[4:6] = bytes(version)
    cram.write_bytes(bytes(b))
    out = tmp_path / "out.bam"
    res = run_alnsort(["--reference", str(refs["ref"]), "-o", str(out), str(cram)])
    assert res.returncode != 0
    err = res.stderr.decode()
    want = f"in.cram: CRAM version {version[0]}.{version[1]} is not supported; alnsort reads 2.0, 2.1, 3.0 and 3.1"
    assert want in err, err
    assert "checksum" not in err.lower() and "crc" not in err.lower(), err
    assert not out.exists()


def test_cf_tag_is_dropped_and_says_which_of_md_nm_to_generate(alnsort_bin, refs, tmp_path):
    """Records carrying cF:i:0 to cF:i:3 and no MD/NM (samtools stores an
    integer tag of 0..255 as one byte, C): samtools' decoder drops the tag
    and adds MD unless bit 1 is set, NM unless bit 2 is; so does alnsort."""
    lines = refs["sam"].read_text().splitlines()
    out, n = [], 0
    for ln in lines:
        if not ln.startswith("@"):
            f = [t for t in ln.split("\t") if not t.startswith(("MD:", "NM:"))]
            ln = "\t".join([*f, f"cF:i:{n % 4}"])
            n += 1
        out.append(ln)
    src = tmp_path / "cf.sam"
    src.write_text("\n".join(out) + "\n")
    cram = tmp_path / "cf.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(refs["ref"]), "-o", str(cram), str(src))
    for order in ([], ["-n"]):
        theirs, ours = _sorted_both(cram, refs["ref"], order, tmp_path)
        recs = [ln for ln in theirs.splitlines() if not ln.startswith("@")]
        assert len(recs) > 200 and not any("\tcF:" in r for r in recs)
        assert any("\tMD:Z:" in r and "\tNM:i:" not in r for r in recs)
        assert any("\tNM:i:" in r and "\tMD:Z:" not in r for r in recs)
        assert_same_text(theirs, ours, f"cF tags {order}")


def test_md_nm_of_reads_past_the_reference_end_match_samtools(alnsort_bin, refs, tmp_path):
    """Reads that run 1 to 30 bases past the end of chrC (matching it, or
    with mismatches, before the end; bases past it of every kind): the MD
    and NM samtools' decoder adds, which alnsort must add the same."""
    seqs = {}
    name = None
    for ln in refs["ref"].read_text().splitlines():
        if ln.startswith(">"):
            name = ln[1:].split()[0]
            seqs[name] = []
        else:
            seqs[name].append(ln)
    chrc = "".join(seqs["chrC"])
    rng = random.Random(5)
    header = [ln for ln in refs["sam"].read_text().splitlines() if ln.startswith("@")]
    recs = []
    for i in range(120):
        over = 1 + i % 30
        inside = 20 + rng.randrange(40)
        pos = len(chrc) - inside + 1
        bases = list(chrc[pos - 1:].upper())
        if i % 3 == 1:
            bases[rng.randrange(inside)] = "A" if bases[0] != "A" else "C"
        tail = "".join(rng.choice("NNACGTRY") if i % 2 else "N" for _ in range(over))
        seq = "".join(bases) + tail
        recs.append(f"over{i:03d}\t0\tchrC\t{pos}\t40\t{len(seq)}M\t*\t0\t0\t{seq}\t{'I' * len(seq)}")
    src = tmp_path / "over.sam"
    src.write_text("\n".join(header + recs) + "\n")
    cram = tmp_path / "over.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(refs["ref"]), "-o", str(cram), str(src))
    for order in ([], ["-n"]):
        theirs, ours = _sorted_both(cram, refs["ref"], order, tmp_path)
        assert theirs.count("\tMD:Z:") == 120
        assert_same_text(theirs, ours, f"reads past the reference end {order}")


@pytest.mark.parametrize("version", ["2.1", "3.0"])
def test_header_container_length_short_of_its_blocks_is_read_as_samtools_reads_it(
    alnsort_bin, refs, tmp_path, version
):
    """samtools' CRAM with its header container's length made two bytes
    short of its blocks (as htsjdk's CRAM 2.1 test files have it): htslib
    reads the header's blocks by their own sizes and skips only padding the
    length leaves beyond them, so it reads the file; so does alnsort."""
    cram = tmp_path / "in.cram"
    oracle.samtools(
        "view", "--no-PG", "-C", "--output-fmt-option", f"version={version}", "-T", str(refs["ref"]),
        "-o", str(cram), str(refs["sam"]),
    )
    b = bytearray(cram.read_bytes())
    # File definition: 26 bytes (magic, version, file id); then the header
    # container's 32-bit length.
    length = int.from_bytes(b[26:30], "little")
    b[26:30] = (length - 2).to_bytes(4, "little")
    if version == "3.0":
        # CRAM 3's container header ends with a CRC32 over its bytes: made
        # again over the new length (ref id, start, span, records: ITF8;
        # record counter, bases: LTF8; blocks, landmarks: ITF8 each).
        at = 30
        for read in (_itf8, _itf8, _itf8, _itf8, _ltf8, _ltf8, _itf8):
            _, at = read(b, at)
        landmarks, at = _itf8(b, at)
        for _ in range(landmarks):
            _, at = _itf8(b, at)
        b[at : at + 4] = zlib.crc32(bytes(b[26:at])).to_bytes(4, "little")
    edited = tmp_path / "edited.cram"
    edited.write_bytes(bytes(b))
    for order in ([], ["-n"]):
        theirs, ours = _sorted_both(edited, refs["ref"], order, tmp_path)
        assert theirs.count("\n") > 200
        assert_same_text(theirs, ours, f"short header container, CRAM {version} {order}")


def _ref_end(rec: list[str]) -> int:
    """The 1-based last reference base of a SAM record's alignment."""
    span = sum(int(n) for n, op in re.findall(r"(\d+)([MDN=X])", rec[5]))
    return int(rec[3]) + max(span, 1) - 1


@pytest.mark.parametrize("shape", ["piece", "other_base"])
def test_reference_other_than_the_sq_m5_is_read_as_samtools_reads_it(alnsort_bin, refs, tmp_path, shape):
    """The conformance files htslib, htsjdk and samtools test with pair a
    CRAM with a FASTA whose sequence is not the one the @SQ M5 is of (a
    piece of it, or other bases where no read lies). htslib compares no @SQ
    M5 with a local FASTA: each slice's MD5 checks the bases it uses, and
    the FASTA's length replaces a different @SQ LN (with a warning). alnsort
    reads them as samtools does, header included, with a warning naming the
    file, the reference and both MD5s."""
    seqs = {}
    for ln in refs["ref"].read_text().splitlines():
        if ln.startswith(">"):
            name = ln[1:].split()[0]
            seqs[name] = []
        else:
            seqs[name].append(ln)
    seqs = {k: "".join(v) for k, v in seqs.items()}
    lines = refs["sam"].read_text().splitlines()
    keep = 12_000
    recs = [ln for ln in lines if not ln.startswith("@") and ln.split("\t")[2] == "chrC" and int(ln.split("\t")[3]) > 0]
    recs = [ln for ln in recs if _ref_end(ln.split("\t")) <= keep and ln.split("\t")[6] in ("=", "*")]
    assert len(recs) > 100
    src = tmp_path / "in.sam"
    src.write_text("\n".join([ln for ln in lines if ln.startswith("@")] + recs) + "\n")
    cram = tmp_path / "in.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(refs["ref"]), "-o", str(cram), str(src))
    local = dict(seqs)
    if shape == "piece":
        local["chrC"] = seqs["chrC"][:keep]
    else:
        c = list(seqs["chrC"])
        c[keep + 500] = "A" if c[keep + 500] != "A" else "C"
        local["chrC"] = "".join(c)
    fa = tmp_path / "local.fa"
    _write_fasta(fa, local)
    oracle.samtools("faidx", str(fa))
    for order in ([], ["-n"]):
        theirs, ours = _sorted_both(cram, fa, order, tmp_path)
        assert theirs.count("\n") > 100
        if shape == "piece":
            assert f"SN:chrC\tLN:{keep}\t" in theirs
        assert_same_text(theirs, ours, f"reference {shape} {order}")
    res = run_alnsort(["--reference", str(fa), "-o", str(tmp_path / "out.bam"), str(cram)])
    check_ok(res)
    err = res.stderr.decode()
    local_m5 = _md5(local["chrC"])
    assert (
        f"[W::alnsort] {cram}: reference chrC: its MD5 is {local_m5} in --reference {fa}, "
        f"but the header's @SQ M5 is {refs['md5_chrC']}"
    ) in err, err
    if shape == "piece":
        assert f"[W::alnsort] {cram}: @SQ chrC has LN:20000, but the --reference sequence of that name has {keep} bases" in err, err


@pytest.mark.parametrize("version", ["2.1", "3.0"])
def test_md_nm_of_reads_without_bases_and_of_empty_deletions_match_samtools(alnsort_bin, refs, tmp_path, version):
    """Placed reads with no bases (SEQ `*`: only hard clips, no CIGAR, or
    matches) and deletions of length 0 (`5M0D5M`, which a CRAM holds as a
    D feature of length 0, as htsjdk's `xx#minimal.2.1.cram` does): htslib
    adds MD/NM to every placed read whose CRAM flags do not say "no
    sequence" (so `MD:Z:0 NM:i:0` to a read of length 0 in CRAM 2.1, whose
    writer does not set that flag) and writes `^` with no bases for an
    empty deletion (`MD:Z:5^5`, `MD:Z:0^0`). alnsort adds the same."""
    chrc = _read_fasta_seq(refs["ref"], "chrC")
    rng = random.Random(11)
    header = [ln for ln in refs["sam"].read_text().splitlines() if ln.startswith("@")]
    recs = []
    shapes = ["10H", "*", "5M", "3S5M2D4M", "5M0D5M", "5H10M0D5H", "0D", "4M0D0D4M", "0D6M", "6M0D"]
    for i in range(200):
        cigar = shapes[i % len(shapes)]
        pos = 1 + rng.randrange(len(chrc) - 100)
        qlen = sum(int(n) for n, op in re.findall(r"(\d+)([MIS=X])", cigar))
        with_seq = qlen > 0 and i % 3 != 0
        if with_seq:
            bases = list(chrc[pos - 1 : pos - 1 + qlen].upper())
            if i % 4 == 1:
                bases[rng.randrange(qlen)] = "N"
            seq = "".join(bases)
        else:
            seq = "*"
        recs.append(f"z{i:03d}\t{16 * (i % 2)}\tchrC\t{pos}\t30\t{cigar}\t*\t0\t0\t{seq}\t*")
    src = tmp_path / "noseq.sam"
    src.write_text("\n".join(header + recs) + "\n")
    cram = tmp_path / "noseq.cram"
    oracle.samtools(
        "view", "--no-PG", "-O", f"cram,version={version}", "-T", str(refs["ref"]), "-o", str(cram), str(src)
    )
    for order in ([], ["-n"]):
        theirs, ours = _sorted_both(cram, refs["ref"], order, tmp_path)
        # An empty deletion: `^` followed by the next run's digits.
        assert len(re.findall(r"\tMD:Z:[0-9A-Z^]*\^[0-9]", theirs)) > 20
        if version == "2.1":
            assert "\t10H\t*\t0\t0\t*\t*\tMD:Z:0\tNM:i:0" in theirs
        assert_same_text(theirs, ours, f"reads without bases, CRAM {version} {order}")


def _read_fasta_seq(path: Path, name: str) -> str:
    seqs: dict[str, list[str]] = {}
    cur = None
    for ln in path.read_text().splitlines():
        if ln.startswith(">"):
            cur = ln[1:].split()[0]
            seqs[cur] = []
        elif cur is not None:
            seqs[cur].append(ln)
    return "".join(seqs[name])
