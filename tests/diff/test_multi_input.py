"""`alnsort sort IN1 IN2 ...`: several inputs sorted as one. samtools sort
takes one input, so the reference is `samtools merge` of the inputs (which
merges the headers and interleaves unsorted inputs by its heap) followed by
`samtools sort`. alnsort renames clashing @RG/@PG IDs with the suffixes of
`samtools merge -s 0`. Inputs here are unsorted, with conflicting headers
(clashing @RG/@PG IDs, @SQ lists in another order with an extra reference),
SAM and BAM mixed; outputs must be identical for every -@ and -m.
"""

from __future__ import annotations

import random

import gen
import harness
import oracle
import pytest
from harness import assert_same_text, check_ok, run_alnsort


def _parts(tmp, n: int, seed: int) -> list[str]:
    text = gen.generate(gen.Params(seed=seed, n_templates=1200, header="pgchain"))
    lines = text.splitlines(keepends=True)
    header = [line for line in lines if line.startswith("@")]
    records = [line for line in lines if not line.startswith("@")]
    rng = random.Random(seed)
    groups: list[list[str]] = [[] for _ in range(n)]
    for rec in records:
        groups[rng.randrange(n)].append(rec)
    paths = []
    for i, recs in enumerate(groups):
        h = list(header)
        if i == 1:
            h = [x.replace("SM:sample1", "SM:other") for x in h] + ["@CO\tsecond input\n"]
        if i == 2:
            sq = [x for x in h if x.startswith("@SQ")]
            rest = [x for x in h if not x.startswith("@SQ") and not x.startswith("@HD")]
            hd = [x for x in h if x.startswith("@HD")]
            h = hd + list(reversed(sq)) + ["@SQ\tSN:chrZ\tLN:1000\n"] + rest
        sam = tmp / f"in{i}.sam"
        sam.write_text("".join(h) + "".join(recs))
        if i % 2 == 1:
            bam = tmp / f"in{i}.bam"
            oracle.to_bam(str(sam), str(bam))
            paths.append(str(bam))
        else:
            paths.append(str(sam))
    return paths


ORDERS = {
    "coordinate": [],
    "name": ["-n"],
    "tag": ["-t", "RG"],
    "template": ["--template-coordinate"],
}


def _expected(tmp, args: list[str], paths: list[str]) -> str:
    merged = tmp / "merged.bam"
    oracle.samtools("merge", "-f", "--no-PG", "-s", "0", "-o", str(merged), *paths)
    return oracle.samtools("sort", "--no-PG", *args, "-O", "SAM", "-o", "-", str(merged)).stdout.decode()


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_several_inputs_as_merge_then_sort(tmp_path, order):
    args = ORDERS[order]
    paths = _parts(tmp_path, 3, seed=5)
    expected = _expected(tmp_path, args, paths)
    for config in (["-@", "1"], ["-@", "3", "-m", "1M"]):
        res = run_alnsort(["--no-PG", *args, *config, "-O", "SAM", "-o", "-", *paths])
        check_ok(res)
        assert_same_text(expected, res.stdout.decode(), f"sort {order} {config} of 3 inputs")


def test_several_inputs_bam_output_every_order_of_inputs(tmp_path):
    paths = _parts(tmp_path, 3, seed=9)
    for perm in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        ordered = [paths[i] for i in perm]
        expected = _expected(tmp_path, [], ordered)
        out = tmp_path / "out.bam"
        check_ok(run_alnsort(["--no-PG", "-@", "2", "-o", str(out), *ordered]))
        assert_same_text(expected, oracle.view(str(out)), f"inputs in order {perm}")


def _cram_parts(tmp, seed: int) -> tuple[list[str], str]:
    """CRAM 3.1, BAM, CRAM 3.0 and SAM inputs (unsorted records; the CRAMs
    made against a copy of the reference that is then removed), and the
    reference."""
    from test_cram import _ref_seqs, _write_fasta, generate

    seqs = _ref_seqs(random.Random(seed))
    ref = tmp / "ref.fa"
    _write_fasta(ref, seqs)
    oracle.samtools("faidx", str(ref))
    gone = tmp / "gone"
    gone.mkdir()
    _write_fasta(gone / "ref.fa", seqs)
    lines = generate(seed, seqs, True, with_noseq=False).splitlines(keepends=True)
    header = [line for line in lines if line.startswith("@")]
    records = [line for line in lines if not line.startswith("@")]
    rng = random.Random(seed)
    groups: list[list[str]] = [[] for _ in range(4)]
    for rec in records:
        groups[rng.randrange(4)].append(rec)
    paths = []
    for i, (fmt, ext) in enumerate([("cram,version=3.1", "cram"), ("bam", "bam"), ("cram,version=3.0", "cram"), ("sam", "sam")]):
        h = list(header)
        if i == 1:
            h = [x.replace("SM:s1", "SM:other") for x in h] + ["@CO\tsecond input\n"]
        if i == 2:
            sq = [x for x in h if x.startswith("@SQ")]
            h = [x for x in h if x.startswith("@HD")] + list(reversed(sq)) + [x for x in h if x.startswith("@RG")]
        sam = tmp / f"raw{i}.sam"
        sam.write_text("".join(h) + "".join(groups[i]))
        out = tmp / f"in{i}.{ext}"
        oracle.samtools("view", "-h", "--no-PG", "--reference", str(gone / "ref.fa"), "-O", fmt, "-o", str(out), str(sam))
        paths.append(str(out))
    for f in gone.iterdir():
        f.unlink()
    gone.rmdir()
    return paths, str(ref)


@pytest.mark.parametrize("order", ["coordinate", "name", "template"])
def test_several_inputs_with_cram_as_merge_then_sort(tmp_path, order):
    """CRAM 3.0 and 3.1 inputs among BAM and SAM ones, sorted as one: the
    records and header samtools merge then samtools sort give."""
    args = ORDERS[order]
    paths, ref = _cram_parts(tmp_path, seed=13)
    merged = tmp_path / "merged.bam"
    oracle.samtools("merge", "-f", "--no-PG", "-s", "0", "--reference", ref, "-o", str(merged), *paths)
    expected = oracle.samtools("sort", "--no-PG", *args, "-O", "SAM", "-o", "-", str(merged)).stdout.decode()
    for config in (["-@", "1"], ["-@", "3", "-m", "1M"]):
        res = run_alnsort(["--no-PG", *args, *config, "--reference", ref, "-O", "SAM", "-o", "-", *paths])
        check_ok(res)
        assert_same_text(expected, res.stdout.decode(), f"sort {order} {config} of CRAM/BAM/SAM inputs")


def test_several_inputs_with_cram_to_cram_output(tmp_path):
    paths, ref = _cram_parts(tmp_path, seed=17)
    merged = tmp_path / "merged.bam"
    oracle.samtools("merge", "-f", "--no-PG", "-s", "0", "--reference", ref, "-o", str(merged), *paths)
    expected = oracle.samtools("sort", "--no-PG", "-O", "SAM", "-o", "-", str(merged)).stdout.decode()
    out = tmp_path / "out.cram"
    check_ok(run_alnsort(["--no-PG", "--reference", ref, "-o", str(out), *paths]))
    assert out.read_bytes()[:4] == b"CRAM"
    got = oracle.samtools("view", "-h", "--no-PG", "--reference", ref, str(out)).stdout.decode()

    def plain(text: str) -> str:
        """What a CRAM keeps of SAM text as samtools reads it back: @SQ
        without the M5/UR a CRAM adds, records without MD/NM (regenerated
        from the reference on reading) and with RG last (where samtools
        puts it on reading)."""
        out = []
        for ln in text.splitlines():
            f = ln.split("\t")
            if ln.startswith("@"):
                out.append("\t".join(x for x in f if not x.startswith(("M5:", "UR:"))))
                continue
            tags = [t for t in f[11:] if not t.startswith(("MD:Z:", "NM:i:"))]
            rg = [t for t in tags if t.startswith("RG:Z:")]
            out.append("\t".join(f[:11] + [t for t in tags if t not in rg] + rg))
        return "\n".join(out)

    assert len(expected.splitlines()) > 1000
    assert_same_text(plain(expected), plain(got), "CRAM output of CRAM/BAM/SAM inputs, read back")


@pytest.mark.alnsort_only
def test_several_inputs_cram_without_reference_names_it(tmp_path, monkeypatch):
    paths, _ = _cram_parts(tmp_path, seed=19)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("REF_PATH", f"{empty}/%2s/%2s/%s")
    monkeypatch.delenv("REF_CACHE", raising=False)
    out = tmp_path / "out.bam"
    res = run_alnsort(["-o", str(out), *paths])
    err = res.stderr.decode()
    assert res.returncode != 0, err
    assert paths[0] in err and "not found" in err and "(M5" in err, err
    assert not out.exists()
