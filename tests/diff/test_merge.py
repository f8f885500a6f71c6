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
