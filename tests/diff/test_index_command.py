"""`alnsort index` against `samtools index` 1.24 (pysam 0.24.1) on generated
BAM and CRAM files made by samtools itself.

What is compared: the index files' bytes (BAI; CSI, whose BGZF blocks are
zlib's deflate as in htslib; the .crai, zlib's gzip of htslib's lines).
On a mismatch the content is compared first, to say where it differs.
And the errors: unsorted input, a truncated file, SAM text; no index left.
"""

from __future__ import annotations

import gzip
import random
import shutil
import struct
import subprocess
from pathlib import Path

import gen
import harness
import oracle
import pytest

TIMEOUT_S = 300


def run_index(args: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [harness.alnsort_path(), "index", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, timeout=TIMEOUT_S
    )


def ok(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, res.stderr.decode("utf-8", "replace")[-3000:]


def _with_empty_ref(sam: str, name: str, length: int) -> str:
    """Adds an @SQ no record names, after the first one."""
    lines = sam.split("\n")
    i = next(k for k, ln in enumerate(lines) if ln.startswith("@SQ"))
    lines.insert(i + 1, f"@SQ\tSN:{name}\tLN:{length}")
    return "\n".join(lines)


def _bgzf_blocks(data: bytes) -> list[tuple[int, bytes]]:
    """(uncompressed size, payload) of each BGZF block."""
    out, i = [], 0
    while i < len(data):
        bsize = struct.unpack("<H", data[i + 16 : i + 18])[0] + 1
        block = data[i : i + bsize]
        isize = struct.unpack("<I", block[-4:])[0]
        out.append((isize, gzip.decompress(block)))
        i += bsize
    return out


@pytest.fixture(scope="module")
def bams(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("index")
    shapes = {
        # Several references, one with no record, unmapped reads placed and
        # unplaced, records longer than a BGZF block.
        "several": gen.Params(
            seed=21,
            n_templates=4000,
            n_long_reads=3,
            n_huge_aux=2,
            refs=[("chr1", 2_000_000), ("chr2", 1_500_000), ("chrM", 16_569)],
        ),
        # A reference past 2^29 (BAI cannot hold it; CSI needs more levels).
        "long": gen.Params(seed=22, n_templates=1500, refs=[("chr1", 100_000), ("chrLong", 700_000_000)]),
        # 3000 references, most with a record or two.
        "many": None,
    }
    out = {}
    for name, p in shapes.items():
        sam = gen.many_refs_input() if p is None else gen.generate(p)
        if name == "several":
            sam = _with_empty_ref(sam, "chrEmpty", 5000)
        src = d / f"{name}.sam"
        src.write_text(sam)
        bam = d / f"{name}.bam"
        oracle.sort([], str(src), str(bam))
        out[name] = bam
        out[name + ".sam"] = src
    return out


def _pair(bams: dict[str, Path], name: str, tmp: Path) -> tuple[Path, Path]:
    theirs, ours = tmp / f"{name}.samtools.bam", tmp / f"{name}.alnsort.bam"
    shutil.copy(bams[name], theirs)
    shutil.copy(bams[name], ours)
    return theirs, ours


def _assert_same_index(theirs: Path, ours: Path, ext: str) -> None:
    a, b = theirs.read_bytes(), ours.read_bytes()
    if ext == "csi" and a != b:
        ba, bb = _bgzf_blocks(a), _bgzf_blocks(b)
        assert b"".join(p for _, p in bb) == b"".join(p for _, p in ba), "CSI content differs"
        assert [n for n, _ in bb] == [n for n, _ in ba], "CSI BGZF framing differs"
    assert a == b, f"{ext} differs ({len(a)} vs {len(b)} bytes)"


@pytest.mark.parametrize(
    "name,opts,ext",
    [
        ("several", [], "bai"),
        ("several", ["-b"], "bai"),
        ("several", ["-c"], "csi"),
        ("several", ["-m", "12"], "csi"),
        ("several", ["-m", "16"], "csi"),
        ("several", ["-c", "-b"], "bai"),
        ("several", ["-@", "1"], "bai"),
        ("several", ["-@", "2", "-c"], "csi"),
        ("long", ["-c"], "csi"),
        ("long", ["-m", "12"], "csi"),
        ("long", ["-m", "16", "-@", "2"], "csi"),
        ("many", [], "bai"),
        ("many", ["-c"], "csi"),
    ],
)
def test_index_is_samtools_index(bams, tmp_path, name, opts, ext):
    theirs, ours = _pair(bams, name, tmp_path)
    oracle.samtools("index", *opts, str(theirs))
    ok(run_index([*opts, str(ours)]))
    _assert_same_index(Path(f"{theirs}.{ext}"), Path(f"{ours}.{ext}"), ext)
    # The other kind was not written.
    other = "csi" if ext == "bai" else "bai"
    assert not Path(f"{ours}.{other}").exists()


def test_regions_through_alnsort_csi(bams, tmp_path):
    """samtools reads regions through alnsort's CSI of the long reference
    exactly as through its own."""
    theirs, ours = _pair(bams, "long", tmp_path)
    oracle.samtools("index", "-c", str(theirs))
    ok(run_index(["-c", str(ours)]))
    regions = ["chr1:1-300", "chr1:50000-60000", "chrLong:1-1000", "chrLong:600000000-600100000", "*"]
    for region in regions:
        want = oracle.view_records(str(theirs), region, index=f"{theirs}.csi")
        got = oracle.view_records(str(ours), region, index=f"{ours}.csi")
        assert got == want, region
    assert want  # the unplaced reads are there


def test_bai_refuses_a_reference_past_2_29_as_samtools_does(bams, tmp_path):
    theirs, ours = _pair(bams, "long", tmp_path)
    res = oracle.samtools("index", str(theirs), check=False)
    assert res.returncode != 0
    got = run_index([str(ours)])
    assert got.returncode != 0
    err = got.stderr.decode()
    assert str(ours) in err and "chrLong" in err and "CSI" in err, err
    assert not Path(f"{ours}.bai").exists()
    assert [p.name for p in tmp_path.iterdir() if "alnsort" in p.name and p.suffix != ".bam"] == []


def test_output_option_and_legacy_second_argument(bams, tmp_path):
    theirs, ours = _pair(bams, "several", tmp_path)
    oracle.samtools("index", "-c", "-o", str(tmp_path / "theirs.idx"), str(theirs))
    ok(run_index(["-c", "-o", str(tmp_path / "ours.idx"), str(ours)]))
    _assert_same_index(tmp_path / "theirs.idx", tmp_path / "ours.idx", "csi")
    oracle.samtools("index", str(theirs), str(tmp_path / "theirs2.bai"))
    ok(run_index([str(ours), str(tmp_path / "ours2.bai")]))
    _assert_same_index(tmp_path / "theirs2.bai", tmp_path / "ours2.bai", "bai")
    assert not Path(f"{ours}.csi").exists() and not Path(f"{ours}.bai").exists()


def test_several_inputs_with_M(bams, tmp_path):
    names = ["several", "many", "long"]
    ours = []
    for n in names:
        _, o = _pair(bams, n, tmp_path)
        ours.append(o)
    res = run_index([str(p) for p in ours])  # no -M: refused, as samtools does
    assert res.returncode != 0 and b"-M" in res.stderr
    ok(run_index(["-M", "-c", "-@", "2", *map(str, ours)]))
    for n, o in zip(names, ours):
        t = tmp_path / f"{n}.samtools.bam"
        oracle.samtools("index", "-c", str(t))
        _assert_same_index(Path(f"{t}.csi"), Path(f"{o}.csi"), "csi")
    res = run_index(["-M", "-o", str(tmp_path / "x.bai"), *map(str, ours)])
    assert res.returncode != 0 and b"-o" in res.stderr


def test_unsorted_input_fails_naming_the_record(bams, tmp_path):
    bam = tmp_path / "unsorted.bam"
    oracle.to_bam(str(bams["several.sam"]), str(bam))
    assert oracle.samtools("index", str(bam), check=False).returncode != 0
    res = run_index([str(bam)])
    assert res.returncode == 1
    err = res.stderr.decode()
    assert str(bam) in err and "record" in err and "unsorted" in err.lower() and "virtual offset" in err, err
    assert not Path(f"{bam}.bai").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unsorted.bam"]


def test_truncated_bam_fails_and_leaves_nothing(bams, tmp_path):
    data = bams["several"].read_bytes()
    bam = tmp_path / "cut.bam"
    bam.write_bytes(data[: len(data) * 2 // 3])
    res = run_index([str(bam)])
    assert res.returncode == 1
    err = res.stderr.decode()
    assert str(bam) in err and ("offset" in err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.bam"]


def test_sam_text_is_refused(bams, tmp_path):
    sam = tmp_path / "in.sam"
    shutil.copy(bams["several.sam"], sam)
    res = run_index([str(sam)])
    assert res.returncode == 1
    assert b"not BGZF" in res.stderr and str(sam).encode() in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.sam"]


def test_options_samtools_index_refuses_are_refused_by_name(bams, tmp_path):
    res = run_index(["--reference", "x.fa", str(bams["several"])])
    assert res.returncode == 1 and b"--reference" in res.stderr
    res = run_index(["--help"])
    assert res.returncode == 0 and b"--min-shift INT" in res.stdout


def _fasta(path: Path, refs: list[tuple[str, int]], seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for name, n in refs:
            f.write(f">{name}\n")
            s = "".join(rng.choice("ACGT") for _ in range(n))
            for i in range(0, n, 60):
                f.write(s[i : i + 60] + "\n")
    oracle.samtools("faidx", str(path))


@pytest.mark.parametrize("shape", ["one_ref_slices", "multi_ref_slices"])
def test_crai_is_samtools_crai(tmp_path, shape):
    if shape == "one_ref_slices":
        refs = [("chr1", 300_000), ("chr2", 200_000), ("chrM", 16_569)]
        p = gen.Params(seed=31, n_templates=6000, refs=refs, trap_tags=False)
    else:
        refs = [(f"c{i}", 3000 + i) for i in range(300)]
        p = gen.Params(seed=32, n_templates=1500, refs=refs, trap_tags=False, tie_window=50)
    ref = tmp_path / "ref.fa"
    _fasta(ref, refs, 5)
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(p))
    bam = tmp_path / "sorted.bam"
    oracle.sort([], str(sam), str(bam))
    theirs, ours = tmp_path / "t.cram", tmp_path / "o.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(ref), "-o", str(theirs), str(bam))
    shutil.copy(theirs, ours)
    oracle.samtools("index", str(theirs))
    res = subprocess.run(
        [harness.alnsort_path(), "index", str(ours)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT_S,
        env={"REF_PATH": ":", "REF_CACHE": ":", "PATH": "/usr/bin:/bin", **({})},
    )
    if res.returncode != 0 and shape == "multi_ref_slices":
        # A slice of several references is decoded: with the reference given
        # through the @SQ UR the CRAM carries, or refused naming it.
        assert b"reference" in res.stderr, res.stderr
        pytest.fail("multi-reference slices need the reference: " + res.stderr.decode()[-500:])
    ok(res)
    want = gzip.decompress(Path(f"{theirs}.crai").read_bytes()).decode().splitlines()
    got = gzip.decompress(Path(f"{ours}.crai").read_bytes()).decode().splitlines()
    assert len(want) >= 2
    if shape == "multi_ref_slices":
        # Several lines share a container offset and landmark: one slice.
        keys = [tuple(ln.split("\t")[3:5]) for ln in want]
        assert len(set(keys)) < len(keys)
    assert got == want
    assert Path(f"{ours}.crai").read_bytes() == Path(f"{theirs}.crai").read_bytes()


EOF_BLOCK = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")


def _raw_blocks(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        bsize = struct.unpack("<H", data[i + 16 : i + 18])[0] + 1
        out.append(data[i : i + bsize])
        i += bsize
    return out


@pytest.mark.parametrize("variant", ["empty_in_middle", "empty_after_header", "empty_everywhere", "no_eof_block", "two_eof_blocks"])
def test_empty_blocks_and_the_eof_block(bams, tmp_path, variant):
    """htslib's offsets at a block's end are the next block's, empty or
    not: empty BGZF blocks in the middle (a concatenation leaves them), a
    second EOF block, or none (samtools warns and indexes all the same)."""
    bl = _raw_blocks(bams["several"].read_bytes())
    assert bl[-1] == EOF_BLOCK and len(bl) > 8
    data = {
        "empty_in_middle": b"".join(bl[:5] + [EOF_BLOCK, EOF_BLOCK] + bl[5:]),
        "empty_after_header": b"".join(bl[:1] + [EOF_BLOCK] + bl[1:]),
        "empty_everywhere": b"".join(b for x in bl[:-1] for b in (x, EOF_BLOCK)) + bl[-1],
        "no_eof_block": b"".join(bl[:-1]),
        "two_eof_blocks": b"".join(bl + [EOF_BLOCK]),
    }[variant]
    theirs, ours = tmp_path / "t.bam", tmp_path / "o.bam"
    theirs.write_bytes(data)
    ours.write_bytes(data)
    for opts, ext in (([], "bai"), (["-c"], "csi")):
        oracle.samtools("index", *opts, str(theirs))
        res = run_index([*opts, str(ours)])
        ok(res)
        if variant == "no_eof_block":
            assert b"EOF marker is absent" in res.stderr
        _assert_same_index(Path(f"{theirs}.{ext}"), Path(f"{ours}.{ext}"), ext)


def test_unsorted_and_truncated_cram_fail_and_leave_nothing(tmp_path):
    refs = [("chr1", 300_000), ("chr2", 200_000)]
    ref = tmp_path / "ref.fa"
    _fasta(ref, refs, 6)
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=33, n_templates=3000, refs=refs, trap_tags=False)))
    unsorted = tmp_path / "unsorted.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(ref), "-o", str(unsorted), str(sam))
    theirs = tmp_path / "theirs.cram"
    shutil.copy(unsorted, theirs)
    assert oracle.samtools("index", str(theirs), check=False).returncode != 0
    res = run_index([str(unsorted)])
    assert res.returncode == 1
    err = res.stderr.decode()
    assert str(unsorted) in err and "not sorted" in err and "byte offset" in err, err
    assert not Path(f"{unsorted}.crai").exists()
    sorted_bam, good = tmp_path / "sorted.bam", tmp_path / "good.cram"
    oracle.sort([], str(sam), str(sorted_bam))
    oracle.samtools("view", "--no-PG", "-C", "-T", str(ref), "-o", str(good), str(sorted_bam))
    cut = tmp_path / "cut.cram"
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    res = run_index([str(cut)])
    assert res.returncode == 1 and str(cut).encode() in res.stderr, res.stderr
    assert not Path(f"{cut}.crai").exists()
