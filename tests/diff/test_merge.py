"""`alnsort merge` against `samtools merge` 1.24 (pysam 0.24.1): header and
records identical (SAM text, `--no-PG`, the same `-s SEED` so renamed
@RG/@PG IDs get the same random suffixes) for 1, 2 and many sorted inputs
with conflicting headers: clashing @RG and @PG IDs (renamed, or combined
with -c/-p), @SQ lists in another order or with extra references
(translated), @CO lines; in every input order; with -b file lists; in each
merge order (coordinate, -n, -N, -t, --template-coordinate). An input that
is not sorted is an error naming the file and the record.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
from pathlib import Path

import gen
import harness
import oracle
import pytest
from harness import assert_same_text, check_ok

SEED = "7"


def _alnsort_merge(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [harness.alnsort_path(), "merge", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        timeout=harness.RUN_TIMEOUT_S,
    )


def _split_records(text: str, parts: int, seed: int) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines(keepends=True)
    header = [line for line in lines if line.startswith("@")]
    records = [line for line in lines if not line.startswith("@")]
    rng = random.Random(seed)
    out: list[list[str]] = [[] for _ in range(parts)]
    for rec in records:
        out[rng.randrange(parts)].append(rec)
    return header, out


def _variant(header: list[str], which: int) -> list[str]:
    """Header of part `which`: part 0 keeps the generated header; part 1 has
    @RG rgA with other fields (a clash), a @PG clash and a @CO; part 2 lists
    the references in another order with an extra one and its own @RG; part
    3 and later clash on everything with the first."""
    hd = [h for h in header if h.startswith("@HD")]
    sq = [h for h in header if h.startswith("@SQ")]
    rg = [h for h in header if h.startswith("@RG")]
    pg = [h for h in header if h.startswith("@PG")]
    co = [h for h in header if h.startswith("@CO")]
    if which == 0:
        return header
    if which == 1:
        rg1 = [h.replace("SM:sample1", "SM:sample2") for h in rg]
        return hd + sq + rg1 + ["@PG\tID:aligner\tPN:other\tVN:2\n"] + pg + ["@CO\tpart one\n"]
    if which == 2:
        sq2 = list(reversed(sq)) + ["@SQ\tSN:chrExtra\tLN:5000\n"]
        return hd + sq2 + rg + ["@RG\tID:rgNew\tSM:s3\tPG:aligner\n"] + pg + co + ["@CO\tpart two\n"]
    return hd + sq + rg + pg + [f"@CO\tpart {which}\n"]


@pytest.fixture(scope="module")
def base_text() -> str:
    return gen.generate(gen.Params(seed=41, n_templates=1500, header="pgchain"))


def _make_parts(tmp: Path, base: str, parts: int, sort_args: list[str], tag: str) -> list[str]:
    header, recs = _split_records(base, parts, seed=parts)
    paths = []
    for i, rs in enumerate(recs):
        raw = tmp / f"{tag}_raw{i}.sam"
        raw.write_text("".join(_variant(header, i)) + "".join(rs))
        out = tmp / f"{tag}_part{i}.bam"
        oracle.samtools("sort", *sort_args, "-o", str(out), str(raw))
        paths.append(str(out))
    return paths


def _compare(tmp: Path, args: list[str], inputs: list[str], what: str) -> None:
    exp = oracle.samtools("merge", "--no-PG", "-s", SEED, *args, "-O", "SAM", "-o", "-", *inputs, check=False)
    assert exp.returncode == 0, exp.stderr.decode()
    res = _alnsort_merge(["--no-PG", "-s", SEED, *args, "-O", "SAM", "-o", "-", *inputs])
    check_ok(res)
    assert_same_text(exp.stdout.decode(), res.stdout.decode(), what)


ORDERS = {
    "coordinate": [],
    "name": ["-n"],
    "name_lex": ["-N"],
    "tag_rg": ["-t", "RG"],
    "tag_xi_name": ["-n", "-t", "XI"],
    "template": ["--template-coordinate"],
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_merge_three_conflicting_headers(tmp_path, base_text, order):
    args = ORDERS[order]
    parts = _make_parts(tmp_path, base_text, 3, args, order)
    _compare(tmp_path, args, parts, f"merge {order}")


@pytest.mark.parametrize("combine", [[], ["-c"], ["-p"], ["-c", "-p"]])
def test_merge_every_input_order(tmp_path, base_text, combine):
    parts = _make_parts(tmp_path, base_text, 3, [], "perm")
    for perm in itertools.permutations(parts):
        _compare(tmp_path, combine, list(perm), f"merge {combine} {[os.path.basename(p) for p in perm]}")


def test_merge_one_input(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 1, [], "one")
    _compare(tmp_path, [], parts, "merge of one input")


def test_merge_many_inputs_bam_output_and_threads(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 9, [], "many")
    _compare(tmp_path, ["-c"], parts, "merge of 9 inputs")
    exp_bam = tmp_path / "exp.bam"
    got_bam = tmp_path / "got.bam"
    oracle.samtools("merge", "--no-PG", "-s", SEED, "-o", str(exp_bam), *parts)
    check_ok(_alnsort_merge(["--no-PG", "-s", SEED, "-@", "3", "-o", str(got_bam), *parts]))
    assert_same_text(oracle.view(str(exp_bam)), oracle.view(str(got_bam)), "BAM output, -@3")
    one = tmp_path / "one.bam"
    check_ok(_alnsort_merge(["--no-PG", "-s", SEED, "-@", "1", "-o", str(one), *parts]))
    assert one.read_bytes() == got_bam.read_bytes(), "output bytes differ between -@1 and -@3"


def test_merge_file_list(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 4, [], "list")
    listing = tmp_path / "inputs.txt"
    listing.write_text("\n".join(parts[:3]) + "\n")
    exp = oracle.samtools("merge", "--no-PG", "-s", SEED, "-b", str(listing), "-O", "SAM", "-o", "-", parts[3])
    res = _alnsort_merge(["--no-PG", "-s", SEED, "-b", str(listing), "-O", "SAM", "-o", "-", parts[3]])
    check_ok(res)
    assert_same_text(exp.stdout.decode(), res.stdout.decode(), "merge -b list + argument")


def test_merge_write_index(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 2, [], "idx")
    out = tmp_path / "merged.bam"
    check_ok(_alnsort_merge(["--write-index", "-o", str(out), *parts]))
    assert (tmp_path / "merged.bam.csi").exists()
    ref = tmp_path / "ref.bam"
    ref.write_bytes(out.read_bytes())
    ref_csi = oracle.index(str(ref))
    for region in ["chr1:1-500", "chr2", "chrM:100-200", "chr1:1500000-1600000"]:
        assert oracle.view_records(str(out), region, index=str(out) + ".csi") == oracle.view_records(
            str(ref), region, index=ref_csi
        ), region


@pytest.mark.alnsort_only
def test_unsorted_input_is_an_error_naming_file_and_record(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 2, [], "uns")
    unsorted = tmp_path / "unsorted.sam"
    header, recs = _split_records(base_text, 1, seed=1)
    unsorted.write_text("".join(header) + "".join(recs[0]))
    out = tmp_path / "out.bam"
    res = _alnsort_merge(["-o", str(out), parts[0], str(unsorted)])
    assert res.returncode == 1
    err = res.stderr.decode()
    assert str(unsorted) in err and "out of order" in err and "record " in err, err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("out.bam")] == []


@pytest.mark.alnsort_only
def test_existing_output_needs_force_and_bed_is_refused(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 2, [], "force")
    out = tmp_path / "out.bam"
    out.write_bytes(b"keep")
    res = _alnsort_merge(["-o", str(out), *parts])
    assert res.returncode == 1 and b"-f" in res.stderr
    assert out.read_bytes() == b"keep"
    check_ok(_alnsort_merge(["-f", "-o", str(out), *parts]))
    res = _alnsort_merge(["-L", "x.bed", "-f", "-o", str(out), *parts])
    assert res.returncode == 1 and b"not supported" in res.stderr


def test_region(tmp_path, base_text):
    """-R: the records overlapping the region, as samtools' index iterators
    give them (each input indexed; the region in the merged header's terms,
    here also naming a reference only one input has)."""
    parts = _make_parts(tmp_path, base_text, 3, [], "reg")
    for p in parts:
        oracle.index(p)
    for region in ["chr1", "chr1:100-250", "chr2:1,000-", "chrM:-150", "chr1:260", "chrExtra", "chr2:5-5"]:
        _compare(tmp_path, ["-R", region], parts, f"-R {region}")


@pytest.mark.alnsort_only
def test_region_needs_indexes_and_a_known_reference(tmp_path, base_text):
    parts = _make_parts(tmp_path, base_text, 2, [], "regerr")
    res = _alnsort_merge(["-R", "chr1", "-o", str(tmp_path / "o.bam"), *parts])
    assert res.returncode == 1 and b"index" in res.stderr and parts[0].encode() in res.stderr, res.stderr
    for p in parts:
        oracle.index(p)
    res = _alnsort_merge(["-R", "nosuch:1-5", "-o", str(tmp_path / "o.bam"), *parts])
    assert res.returncode == 1 and b"nosuch" in res.stderr, res.stderr
    assert not (tmp_path / "o.bam").exists()


@pytest.fixture(scope="module")
def spread_text() -> str:
    """Reads spread over every reference (few ties), long reads that cross
    16 kbp windows and land in large bins, placed unmapped mates: enough
    BGZF blocks that an index names chunks well inside each input."""
    return gen.generate(
        gen.Params(seed=43, n_templates=9000, tie_fraction=0.05, n_long_reads=6, header="plain")
    )


def test_region_reads_the_indexed_chunks_as_samtools(tmp_path, spread_text):
    """-R through each input's index (one BAI, two CSI): the records
    overlapping the region, with reads crossing its edges, placed unmapped
    mates, regions at a reference's start and end and on every reference,
    as samtools merge -R gives them."""
    parts = _make_parts(tmp_path, spread_text, 3, [], "spread")
    oracle.index(parts[0], "bai")
    for p in parts[1:]:
        oracle.index(p, "csi")
    regions = [
        "chr1:500000-520000",
        "chr1:1-20000",
        "chr1:1990000-",
        "chr2:700000-700100",
        "chr2:1000000",
        "chrM:150000-150001",
        "chrM",
        "chr1:1234567-1234567",
    ]
    for region in regions:
        _compare(tmp_path, ["-R", region], parts, f"-R {region}")
    _compare(tmp_path, ["-R", "chr2:300000-400000", "-@", "3"], parts, "-R with threads")


def _corrupt_block_before(path: str, ref: str) -> None:
    """Damages the deflate data of a BGZF block that holds records before
    the first record on `ref` (and no header, and none of `ref`'s)."""
    import pysam

    with pysam.AlignmentFile(path, "rb") as f:
        first_block = f.tell() >> 16
        blocks = []
        for rec in f:
            if rec.reference_name == ref:
                break
            blocks.append(f.tell() >> 16)
        ref_block = f.tell() >> 16
    candidates = sorted({b for b in blocks if first_block < b < ref_block})
    assert len(candidates) >= 3, "the input needs blocks before the region"
    victim = candidates[len(candidates) // 2]
    data = bytearray(Path(path).read_bytes())
    for i in range(victim + 30, victim + 60):
        data[i] ^= 0x5A
    Path(path).write_bytes(bytes(data))


def test_region_does_not_read_outside_the_indexed_chunks(tmp_path, spread_text):
    """An input damaged before the region (a bad BGZF block among chr1's
    records): samtools merge -R chr2 never reads it and succeeds, and so
    must alnsort (reading the input whole, it stopped at the damage). The
    damage is real: merging the whole input fails."""
    parts = _make_parts(tmp_path, spread_text, 2, [], "damaged")
    for p in parts:
        oracle.index(p, "csi")
    _corrupt_block_before(parts[0], "chr2")
    for region in ["chr2:100000-300000", "chrM"]:
        _compare(tmp_path, ["-R", region], parts, f"-R {region} past damage")
    res = _alnsort_merge(["-O", "SAM", "-o", "-", *parts])
    assert res.returncode == 1 and parts[0].encode() in res.stderr, res.stderr


@pytest.mark.alnsort_only
def test_region_with_a_damaged_index_names_it(tmp_path, base_text):
    """An index that does not parse stops -R with its name (samtools fails
    to load it too), and leaves no output."""
    parts = _make_parts(tmp_path, base_text, 2, [], "badidx")
    for p in parts:
        oracle.index(p, "bai")
    bad = Path(parts[1] + ".bai")
    bad.write_bytes(bad.read_bytes()[:40])
    out = tmp_path / "o.bam"
    res = _alnsort_merge(["-R", "chr1:1-500", "-o", str(out), *parts])
    assert res.returncode == 1, res.stderr
    assert str(bad).encode() in res.stderr and b"damaged index" in res.stderr, res.stderr
    assert not out.exists()


# --- CRAM inputs and output ------------------------------------------------
#
# Inputs are made by samtools from SAM generated against a generated
# reference (tests/diff/test_cram.py's generator): sorted parts, each with
# its own header (a clashing @RG, an extra @PG and @CO, @SQ in another
# order), written as CRAM 3.1, CRAM 3.0, BAM and SAM. The CRAMs are made
# against a copy of the reference that is then removed, so their @SQ UR
# names no file and only --reference serves.

CRAM_ORDERS = {
    "coordinate": [],
    "name": ["-n"],
    "name_lex": ["-N"],
    "tag_rg": ["-t", "RG"],
    "template": ["--template-coordinate"],
}


@pytest.fixture(scope="module")
def cram_world(tmp_path_factory) -> dict:
    from test_cram import _ref_seqs, _write_fasta, generate

    d = tmp_path_factory.mktemp("merge_cram")
    seqs = _ref_seqs(random.Random(11))
    ref = d / "ref.fa"
    _write_fasta(ref, seqs)
    oracle.samtools("faidx", str(ref))
    return {"dir": d, "ref": ref, "seqs": seqs, "text": generate(51, seqs, True, with_noseq=False)}


def _cram_header(header: list[str], which: int, reorder: bool) -> list[str]:
    hd = [h for h in header if h.startswith("@HD")]
    sq = [h for h in header if h.startswith("@SQ")]
    rg = [h for h in header if h.startswith("@RG")]
    if which == 1:
        rg = [h.replace("SM:s1", "SM:s2") for h in rg] + ["@PG\tID:aligner\tPN:other\tVN:2\n", "@CO\tpart one\n"]
    if which == 2 and reorder:
        sq = list(reversed(sq))
    return hd + sq + rg + [f"@CO\tpart {which}\n"]


# Part i: its format (samtools -O) and file suffix.
CRAM_PARTS = [("cram,version=3.1", "cram"), ("cram,version=3.0", "cram"), ("bam", "bam"), ("sam", "sam")]


def _cram_parts(world: dict, tmp: Path, sort_args: list[str], kinds=CRAM_PARTS, reorder: bool = True) -> list[str]:
    """Sorted parts of the generated records in the formats `kinds` names;
    with `reorder`, part 2 lists the references in reverse order (which
    makes samtools merge drop coordinate order)."""
    header, recs = _split_records(world["text"], len(kinds), seed=len(kinds))
    gone = tmp / "gone"
    gone.mkdir(exist_ok=True)
    gone_ref = gone / "ref.fa"
    gone_ref.write_bytes(world["ref"].read_bytes())
    paths = []
    for i, ((fmt, ext), rs) in enumerate(zip(kinds, recs)):
        raw = tmp / f"raw{i}.sam"
        raw.write_text("".join(_cram_header(header, i, reorder)) + "".join(rs))
        out = tmp / f"part{i}.{ext}"
        oracle.samtools("sort", *sort_args, "--reference", str(gone_ref), "-O", fmt, "-o", str(out), str(raw))
        paths.append(str(out))
    for f in gone.iterdir():
        f.unlink()
    gone.rmdir()
    return paths


@pytest.mark.parametrize("order", sorted(CRAM_ORDERS))
def test_merge_cram_inputs_mixed_with_bam_and_sam(tmp_path, cram_world, order):
    """CRAM 3.1 and 3.0 inputs beside BAM and SAM ones: header and records
    as samtools merge gives them, for -@1 and -@3, and with -c/-p."""
    args = CRAM_ORDERS[order]
    parts = _cram_parts(cram_world, tmp_path, args)
    ref = ["--reference", str(cram_world["ref"])]
    _compare(tmp_path, [*args, *ref], parts, f"merge {order} of CRAM/BAM/SAM")
    _compare(tmp_path, [*args, *ref, "-@", "3"], list(reversed(parts)), f"merge {order} -@3, reversed")
    _compare(tmp_path, [*args, *ref, "-c", "-p"], parts, f"merge {order} -c -p")


def test_merge_cram_input_fmt_option_reference(tmp_path, cram_world):
    parts = _cram_parts(cram_world, tmp_path, [])
    _compare(tmp_path, ["--input-fmt-option", f"reference={cram_world['ref']}"], parts, "merge, reference as input option")
    assert any(p.endswith(".cram") for p in parts)


def _view_cram(path: Path, ref: Path) -> str:
    """A CRAM as samtools reads it, as text, without the @SQ M5/UR fields a
    CRAM carries (reading a CRAM, samtools adds MD/NM and puts RG last, so a
    CRAM is compared with samtools' own CRAM of the same merge)."""
    text = oracle.samtools("view", "-h", "--no-PG", "--reference", str(ref), str(path)).stdout.decode()
    out = []
    for ln in text.splitlines():
        if ln.startswith("@SQ"):
            ln = "\t".join(f for f in ln.split("\t") if not f.startswith(("M5:", "UR:")))
        out.append(ln)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("version", ["3.0", "3.1"])
@pytest.mark.parametrize("order", ["coordinate", "name"])
def test_merge_cram_output(tmp_path, cram_world, order, version):
    """-O cram (and -o out.cram): read back by samtools, the records and
    header samtools merge gives; the same bytes for -@1 and -@3; with
    --write-index (coordinate order) a .crai samtools reads regions by."""
    args = CRAM_ORDERS[order]
    parts = _cram_parts(cram_world, tmp_path, args, reorder=False)
    ref = cram_world["ref"]
    theirs = tmp_path / "samtools.cram"
    oracle.samtools(
        "merge", "--no-PG", "-s", SEED, *args, "--reference", str(ref), "-O", f"cram,version={version}", "-o", str(theirs), *parts
    )
    want = _view_cram(theirs, ref)
    assert want.count("\n") > 1000
    outs = []
    for threads in ("1", "3"):
        out = tmp_path / f"out{threads}.cram"
        index = ["--write-index"] if order == "coordinate" else []
        res = _alnsort_merge(
            ["--no-PG", "-s", SEED, *args, "--reference", str(ref), "-@", threads, *index,
             "--output-fmt-option", f"version={version}", "-o", str(out), *parts]
        )
        check_ok(res)
        assert out.read_bytes()[:6] == b"CRAM" + bytes([3, int(version[-1])])
        assert_same_text(want, _view_cram(out, ref), f"CRAM {version} out, -@{threads}")
        outs.append(out.read_bytes())
    assert outs[0] == outs[1], "CRAM bytes differ between -@1 and -@3"
    if order == "coordinate":
        crai = tmp_path / "out3.cram.crai"
        assert crai.exists()
        # Regions read through each .crai: the records samtools reads from
        # its own CRAM of the merge through the index it makes for it.
        oracle.samtools("index", str(theirs))
        for region in ["chrA:1000-5000", "chrB", "chrC:100-200"]:
            got = oracle.samtools("view", "--reference", str(ref), "-X", str(tmp_path / "out3.cram"), str(crai), region)
            want = oracle.samtools("view", "--reference", str(ref), "-X", str(theirs), str(theirs) + ".crai", region)
            assert got.stdout == want.stdout and want.stdout, region


def test_merge_cram_by_output_extension(tmp_path, cram_world):
    parts = _cram_parts(cram_world, tmp_path, [], kinds=CRAM_PARTS[2:])
    out = tmp_path / "by_name.cram"
    check_ok(_alnsort_merge(["--no-PG", "-s", SEED, "--reference", str(cram_world["ref"]), str(out), *parts]))
    assert out.read_bytes()[:4] == b"CRAM"
    theirs = tmp_path / "samtools.cram"
    oracle.samtools("merge", "--no-PG", "-s", SEED, "--reference", str(cram_world["ref"]), "-o", str(theirs), *parts)
    assert theirs.read_bytes()[:4] == b"CRAM"
    assert_same_text(_view_cram(theirs, cram_world["ref"]), _view_cram(out, cram_world["ref"]), "-o out.cram")


@pytest.mark.alnsort_only
@pytest.mark.parametrize("dest", ["file", "stdout"])
def test_merge_cram_without_its_reference_names_input_and_reference(tmp_path, cram_world, monkeypatch, dest):
    """No --reference, nothing under REF_PATH: an error naming the CRAM
    input and the reference, before any output is written; nothing left."""
    work = tmp_path / "work"
    work.mkdir()
    parts = _cram_parts(cram_world, work, [], kinds=[CRAM_PARTS[2], CRAM_PARTS[0]])
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("REF_PATH", f"{empty}/%2s/%2s/%s")
    monkeypatch.delenv("REF_CACHE", raising=False)
    out = tmp_path / "out.bam"
    target = ["-o", "-"] if dest == "stdout" else ["-o", str(out)]
    res = _alnsort_merge([*target, *parts])
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert parts[1] in err, err
    assert "not found" in err and any(f"reference {n} (M5" in err for n in ("chrA", "chrB", "chrC")), err
    assert res.stdout == b""
    assert not out.exists()
    assert harness.leftover_files(tmp_path, {"work", "empty"}) == []


@pytest.mark.alnsort_only
def test_merge_bad_cram_among_inputs_names_it(tmp_path, cram_world):
    work = tmp_path / "work"
    work.mkdir()
    parts = _cram_parts(cram_world, work, [], kinds=CRAM_PARTS[:3])
    ref = ["--reference", str(cram_world["ref"])]
    # A CRAM cut short in its first data container, and one whose header
    # container is cut: each named as the input that failed.
    data = Path(parts[1]).read_bytes()
    cut = work / "cut.cram"
    cut.write_bytes(data[: len(data) // 2])
    head_cut = work / "head_cut.cram"
    head_cut.write_bytes(data[:40])
    for bad in (cut, head_cut):
        out = tmp_path / "out.cram"
        res = _alnsort_merge([*ref, "-o", str(out), parts[0], str(bad), parts[2]])
        err = res.stderr.decode()
        assert res.returncode == 1, err
        assert str(bad) in err, err
        assert not out.exists()
        assert harness.leftover_files(tmp_path, {"work"}) == []
