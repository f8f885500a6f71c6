"""Positions beyond 2^31 (project issue 12, item 2): a header with a
reference longer than 2147483647 bases makes samtools 1.24 sort with 64-bit
positions, SAM in and SAM out, and refuse BAM output ("output format is not
compatible with very large references"). alnsort must give samtools' records
for samtools' own test/large_pos case (data/large_pos, see its README) and for
generated input with positions up to 2^34, in every order it supports, for
every -@ and -m (spilled runs carry the 64-bit positions), in merge and in a
sort of several inputs; and refuse BAM output as samtools does, leaving
nothing behind.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import harness
import oracle
import pytest
from harness import assert_same_text, check_ok, run_alnsort

DATA = Path(__file__).resolve().parent / "data" / "large_pos"
LONGREF_NAME = str(DATA / "longref_name.sam")
LONGREF = str(DATA / "longref.sam")
LONGREF2 = str(DATA / "longref2.sam")
LONGREF3 = str(DATA / "longref3.sam")


def _oracle_sort(args: list[str], path: str) -> str:
    return oracle.samtools("sort", "--no-PG", *args, "-O", "SAM", "-o", "-", path).stdout.decode()


def _alnsort_sort(args: list[str], *paths: str) -> str:
    res = run_alnsort(["--no-PG", *args, "-O", "SAM", "-o", "-", *paths])
    check_ok(res)
    return res.stdout.decode()


def test_samtools_own_case():
    """samtools' test: sort -O sam --no-PG -m 10M longref_name.sam == longref.sam."""
    got = _alnsort_sort(["-m", "10M"], LONGREF_NAME)
    assert got == Path(LONGREF).read_text()
    assert_same_text(_oracle_sort(["-m", "10M"], LONGREF_NAME), got, "large_pos sort")


@pytest.mark.parametrize("order", [[], ["-n"], ["-N"], ["-t", "XA"], ["-n", "-t", "NM"]], ids=str)
@pytest.mark.parametrize("path", [LONGREF_NAME, LONGREF3], ids=["longref_name", "longref3"])
def test_orders_threads_memory(order, path):
    expected = _oracle_sort(order, path)
    for config in ([], ["-@", "3", "-m", "1M"]):
        assert_same_text(expected, _alnsort_sort([*order, *config], path), f"{order} {config} {path}")


def _generated(tmp: Path, n: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["@HD\tVN:1.6\tSO:unsorted\n", "@SQ\tSN:big\tLN:20000000000\n", "@SQ\tSN:small\tLN:5000\n"]
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            rname, pos = "*", 0
        elif r < 0.25:
            rname, pos = "small", rng.randint(1, 4000)
        else:
            # ties around 2^31 and 2^32, and positions up to 2^34
            pos = rng.choice([2**31 - 1, 2**31, 2**31 + 1, 2**32, rng.randint(1, 2**34)])
            rname = "big"
        flag = rng.choice([0, 16]) | (4 if rname == "*" else 0)
        cigar = "*" if rname == "*" else "10M"
        if rname != "*" and rng.random() < 0.5:
            flag |= 1 | 0x40
            pnext = rng.choice([2**33, 5, pos])
            tlen = pnext - pos
            mate = ("=", pnext)
        else:
            mate, tlen = ("*", 0), 0
        lines.append(
            f"q{rng.randint(0, n // 3)}\t{flag}\t{rname}\t{pos}\t30\t{cigar}\t{mate[0]}\t{mate[1]}\t{tlen}"
            f"\tACGTACGTAC\tIIIIIIIIII\tXI:i:{i}\n"
        )
    path = tmp / f"gen{seed}.sam"
    path.write_text("".join(lines))
    return str(path)


@pytest.mark.parametrize("order", [[], ["-n"]], ids=str)
def test_generated_positions_up_to_2_34(tmp_path, order):
    path = _generated(tmp_path, 20000, seed=3)
    expected = _oracle_sort(order, path)
    for config in ([], ["-@", "2", "-m", "1M"], ["--max-memory", "20M"]):
        assert_same_text(expected, _alnsort_sort([*order, *config], path), f"generated {order} {config}")


def test_merge_and_several_inputs():
    exp = oracle.samtools("merge", "-O", "SAM", "--no-PG", "-s", "0", "-o", "-", LONGREF, LONGREF2).stdout.decode()
    res = subprocess.run(
        [harness.alnsort_path(), "merge", "-O", "SAM", "--no-PG", "-s", "0", "-o", "-", LONGREF, LONGREF2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    check_ok(res)
    assert_same_text(exp, res.stdout.decode(), "merge of large positions")
    merged = oracle.samtools("merge", "-O", "SAM", "--no-PG", "-s", "0", "-o", "-", LONGREF_NAME, LONGREF2).stdout
    expected = oracle.samtools("sort", "--no-PG", "-O", "SAM", "-o", "-", "-", stdin=merged).stdout.decode()
    assert_same_text(expected, _alnsort_sort([], LONGREF_NAME, LONGREF2), "sort of two inputs")


@pytest.mark.parametrize("out_args", [["-o", "out.bam"], ["-O", "BAM", "-o", "out.x"]], ids=["ext", "O"])
def test_bam_output_refused_as_samtools(tmp_path, out_args):
    exp = oracle.samtools("sort", *out_args, LONGREF_NAME, check=False, cwd=str(tmp_path))
    assert exp.returncode == 1 and b"not compatible with very large references" in exp.stderr
    for p in tmp_path.iterdir():
        p.unlink()
    res = run_alnsort([*out_args, LONGREF_NAME], cwd=str(tmp_path))
    assert res.returncode == 1
    assert b"output format is not compatible with very large references" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == [], "nothing left behind"
