"""`alnsort verify`: a file samtools 1.24 (pysam 0.24.1) sorted in any of
its orders passes, checked in the order its header claims and in the order
given by the sort's options; the same file with one record moved out of
place fails, naming that record (number and read name) and exiting 1;
ties and unplaced reads at the end pass; files it cannot judge (no order
claimed, unreadable, malformed) exit 2 with a message naming the file.
"""

from __future__ import annotations

import gzip
import random
import zlib
import re
import subprocess
from pathlib import Path

import gen
import harness
import oracle
import pytest

ORDERS = {
    "coordinate": ([], ["--coordinate"]),
    "name": (["-n"], ["-n"]),
    "name-lex": (["-N"], ["-N"]),
    "tag": (["-t", "RG"], ["-t", "RG"]),
    "tag-name": (["-t", "XI", "-n"], ["-t", "XI", "-n"]),
    "template": (["--template-coordinate"], ["--template-coordinate"]),
}


def verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([harness.alnsort_path(), "verify", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("verify")
    p = d / "in.sam"
    p.write_text(gen.generate(gen.Params(seed=5, n_templates=1500)))
    return p


@pytest.fixture(scope="module")
def sorted_files(source) -> dict[str, Path]:
    out = {}
    for key, (sort_opts, _) in ORDERS.items():
        path = source.parent / f"{key}.bam"
        oracle.sort(sort_opts, str(source), str(path))
        out[key] = path
    return out


def _sam_lines(path: Path) -> tuple[list[str], list[str]]:
    text = oracle.view(str(path))
    lines = text.splitlines(keepends=True)
    head = [line for line in lines if line.startswith("@")]
    return head, lines[len(head):]


@pytest.mark.parametrize("key", ORDERS)
def test_samtools_sorted_files_pass(sorted_files, key):
    path = sorted_files[key]
    for opts in ([], ORDERS[key][1]):
        res = verify(*opts, "-@", "2", str(path))
        assert res.returncode == 0, (opts, res.stderr)
        assert res.stdout.startswith(f"{path}: sorted ("), res.stdout
        assert res.stdout.count("\n") == 1


def _natural(name: str) -> str:
    """NAME with the leading zeros of its digit runs taken away."""
    return re.sub(r"(?<!\d)0+(?=\d)", "", name)


def _differs(key: str, a: str, b: str) -> bool:
    """Whether the two SAM lines' keys differ in an order (the field the
    order compares first differs)."""
    fa, fb = a.split("\t"), b.split("\t")
    if key in ("coordinate", "template"):
        # An unplaced record's POS means nothing (samtools orders them by
        # other keys, and two of one template may tie): only placed pairs.
        placed = fa[2] != "*" and fb[2] != "*"
        return placed and (fa[2] != fb[2] or fa[3] != fb[3])
    if key == "name-lex":
        return fa[0] != fb[0]
    if key == "name":
        # Natural order compares digit runs by value: names that differ only
        # in leading zeros ("r07", "r7") may be equal there, and their
        # records then tie on the name.
        return _natural(fa[0]) != _natural(fb[0])
    tag = "RG" if key == "tag" else "XI"
    va = [t for t in fa[11:] if t.startswith(tag + ":")]
    vb = [t for t in fb[11:] if t.startswith(tag + ":")]
    return va != vb and fa[0] != fb[0]


@pytest.mark.parametrize("key", ORDERS)
def test_one_swapped_record_fails_naming_it(sorted_files, tmp_path, key):
    head, recs = _sam_lines(sorted_files[key])
    # A seed of the key's bytes (str hashes differ between processes).
    rng = random.Random(zlib.crc32(key.encode()))
    candidates = [i for i in range(len(recs) - 1) if _differs(key, recs[i], recs[i + 1])]
    assert len(candidates) >= 3
    for i in rng.sample(candidates, 3):
        swapped = recs[:i] + [recs[i + 1], recs[i]] + recs[i + 2:]
        for ext in ("sam", "bam"):
            p = tmp_path / f"swapped{i}.{ext}"
            sam = tmp_path / f"swapped{i}.sam"
            sam.write_text("".join(head + swapped))
            if ext == "bam":
                oracle.to_bam(str(sam), str(p))
            for opts in ([], ORDERS[key][1]):
                res = verify(*opts, str(p))
                assert res.returncode == 1, (key, i, opts, res.stdout, res.stderr)
                moved = recs[i].split("\t")[0]
                assert f"record {i + 2} (read {moved}," in res.stderr, res.stderr
                assert f"after record {i + 1} (read {recs[i + 1].split(chr(9))[0]}," in res.stderr
                assert str(p) in res.stderr and res.stdout == ""


def test_ties_in_any_order_and_unplaced_reads_at_the_end_pass(tmp_path):
    head = "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:c1\tLN:1000\n@SQ\tSN:c2\tLN:1000\n"
    recs = [f"z{i}\t0\tc1\t100\t30\t10M\t*\t0\t0\tAAAAAAAAAA\t*\n" for i in range(5)]
    recs += [f"a{i}\t0\tc1\t100\t30\t10M\t*\t0\t0\tAAAAAAAAAA\t*\n" for i in range(5)]
    recs += ["p\t4\tc2\t50\t0\t*\t*\t0\t0\tAAAAAAAAAA\t*\n"]  # placed unmapped
    recs += [f"u{i}\t4\t*\t0\t0\t*\t*\t0\t0\tAAAAAAAAAA\t*\n" for i in range(3)]
    p = tmp_path / "ties.sam"
    p.write_text(head + "".join(recs))
    res = verify(str(p))
    assert res.returncode == 0 and res.stdout == f"{p}: sorted (coordinate order, as its @HD SO:coordinate claims): 14 records\n", res
    # An unplaced read before placed ones is out of order.
    q = tmp_path / "early.sam"
    q.write_text(head + recs[-1] + "".join(recs[:-1]))
    res = verify(str(q))
    assert res.returncode == 1 and "record 2 (read z0, c1:100) comes after record 1 (read u2, unplaced)" in res.stderr


def test_files_it_cannot_judge_exit_2(sorted_files, source, tmp_path):
    # No order claimed (the generator's SO:unsorted) and none given.
    res = verify(str(source))
    assert res.returncode == 2 and "claims no order" in res.stderr and str(source) in res.stderr
    # ...but a given order is checked.
    res = verify("-n", str(source))
    assert res.returncode == 1
    # A BAM cut short: the error names the file; nothing on stdout.
    data = sorted_files["coordinate"].read_bytes()
    cut = tmp_path / "cut.bam"
    cut.write_bytes(data[: len(data) // 2])
    res = verify(str(cut))
    assert res.returncode == 2 and str(cut) in res.stderr and res.stdout == "", res.stderr
    # Not an alignment file at all.
    junk = tmp_path / "junk.bam"
    junk.write_bytes(gzip.compress(b"hello"))
    res = verify(str(junk))
    assert res.returncode == 2 and str(junk) in res.stderr
    res = verify(str(tmp_path / "missing.bam"))
    assert res.returncode == 2 and "missing.bam" in res.stderr
    res = verify("--bogus", str(cut))
    assert res.returncode == 2 and "bogus" in res.stderr
    # SO:queryname without SS does not say which name order.
    text = oracle.view(str(sorted_files["name"])).replace("\tSS:queryname:natural", "")
    bare = tmp_path / "bare.sam"
    bare.write_text(text)
    res = verify(str(bare))
    assert res.returncode == 2 and "give -n or -N" in res.stderr
    assert verify("-n", str(bare)).returncode == 0


def test_several_files_one_line_each(sorted_files):
    files = [str(sorted_files["coordinate"]), str(sorted_files["name"])]
    res = verify(*files)
    assert res.returncode == 0 and res.stdout.count(": sorted (") == 2
    res = verify("--coordinate", *files)
    assert res.returncode == 1 and res.stdout.count("\n") == 1 and "not sorted" in res.stderr


def test_help_comes_from_the_table():
    res = verify("--help")
    assert res.returncode == 0
    for opt in ("--coordinate", "-n", "-N", "-t TAG", "--template-coordinate", "--threads", "--reference"):
        assert opt in res.stdout, opt
