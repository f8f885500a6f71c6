"""`--write-index`: the CSI/BAI that alnsort builds while writing must answer
region queries exactly as an index made afterwards by `samtools index`.

Both indexes describe the same BAM bytes (the samtools one indexes a copy of
alnsort's output), so any difference in `samtools view BAM REGION...` or in
`samtools idxstats` is the index's fault.
"""

from __future__ import annotations

import gzip
import random
import re

import harness
import oracle
import pytest
from harness import check_ok, run_alnsort

# (input, config) pairs: long records spanning BGZF blocks (main), 3000
# references mostly empty (manyrefs), and a spilling multi-threaded run.
CASES = [
    ("main", []),
    ("main", ["-@", "2", "-m", "1M"]),
    ("manyrefs", []),
    ("unplaced", []),
]


def _refs(sam_path: str) -> list[tuple[str, int]]:
    out = []
    with open(sam_path) as fh:
        for line in fh:
            if not line.startswith("@"):
                break
            if line.startswith("@SQ\t"):
                f = harness.pg_fields(line)
                out.append((f["SN"], int(f["LN"])))
    return out


def _regions(refs: list[tuple[str, int]], seed: int, n: int = 60) -> list[str]:
    """Random regions: small windows in the heavily-tied start of each
    reference, wide windows, whole references, and the unplaced `*`."""
    rng = random.Random(seed)
    regs = ["*"]
    picks = refs if len(refs) <= 8 else rng.sample(refs, 40)
    for name, length in picks:
        regs.append(name)
        for _ in range(max(1, n // len(picks))):
            if rng.random() < 0.6:
                beg = rng.randrange(1, 400)
                end = beg + rng.randrange(0, 300)
            else:
                beg = rng.randrange(1, length)
                end = min(length, beg + rng.randrange(1, length // 3 + 2))
            regs.append(f"{name}:{beg}-{end}")
    return regs


def _check_queries(out_bam: str, out_idx: str, ref_bam: str, ref_idx: str, regions: list[str]) -> None:
    expected = oracle.view_records(ref_bam, *regions, index=ref_idx)
    actual = oracle.view_records(out_bam, *regions, index=out_idx)
    if expected == actual:
        return
    for reg in regions:  # narrow down to the first region that differs
        e = oracle.view_records(ref_bam, reg, index=ref_idx)
        a = oracle.view_records(out_bam, reg, index=out_idx)
        harness.assert_same_text(e, a, f"region {reg} with alnsort's index vs samtools index")
    raise AssertionError("multi-region query differs but no single region does")


def _magic(path: str, compressed: bool) -> bytes:
    data = open(path, "rb").read()
    return (gzip.decompress(data) if compressed else data)[:4]


@pytest.mark.parametrize("name,config", CASES, ids=[f"{n}{''.join(c)}" for n, c in CASES])
def test_csi_matches_samtools_index(alnsort_bin, inputs, tmp_path, name, config):
    src = inputs.bam(name)
    out = tmp_path / "out.bam"
    check_ok(run_alnsort([*config, "--write-index", "-o", str(out), src], cwd=str(tmp_path)))
    idx = str(out) + ".csi"
    assert _magic(idx, compressed=True) == b"CSI\x01", "out.bam.csi must be a BGZF-compressed CSI"
    assert harness.leftover_files(tmp_path, {"out.bam", "out.bam.csi"}) == []
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref_bam = harness.copy(str(out), str(ref_dir / "ref.bam"))
    ref_idx = oracle.index(ref_bam, "csi")
    _check_queries(str(out), idx, ref_bam, ref_idx, _regions(_refs(inputs.sam(name)), seed=len(name)))
    harness.assert_same_text(oracle.idxstats(ref_bam), oracle.idxstats(str(out)), "idxstats (index metadata)")
    # The file itself: samtools' index of the same BAM, byte for byte
    # (content and zlib's deflate of its BGZF blocks).
    assert open(idx, "rb").read() == open(ref_idx, "rb").read(), "the CSI differs from samtools index's bytes"


def test_bai_via_idx_suffix(alnsort_bin, inputs, tmp_path):
    """`-o out.bam##idx##out.bam.bai` writes a BAI next to out.bam."""
    src = inputs.bam("main")
    out = tmp_path / "out.bam"
    bai = tmp_path / "out.bam.bai"
    check_ok(run_alnsort(["--write-index", "-o", f"{out}##idx##{bai}", src], cwd=str(tmp_path)))
    assert out.exists(), "the BAM must be written to the path before ##idx##"
    assert _magic(str(bai), compressed=False) == b"BAI\x01", "out.bam.bai must be a BAI"
    assert harness.leftover_files(tmp_path, {"out.bam", "out.bam.bai"}) == []
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref_bam = harness.copy(str(out), str(ref_dir / "ref.bam"))
    ref_idx = oracle.index(ref_bam, "bai")
    _check_queries(str(out), str(bai), ref_bam, ref_idx, _regions(_refs(inputs.sam("main")), seed=7))
    harness.assert_same_text(oracle.idxstats(ref_bam), oracle.idxstats(str(out)), "idxstats (BAI metadata)")
    assert bai.read_bytes() == open(ref_idx, "rb").read(), "the BAI differs from samtools index's bytes"


def test_write_index_to_stdout_fails(alnsort_bin, inputs, tmp_path):
    """samtools: 'failed to create "-"', exit 1. Nothing useful can be indexed on a pipe."""
    res = run_alnsort(["--write-index", inputs.sam("hdr_plain")], cwd=str(tmp_path))
    assert res.returncode == 1, f"expected exit 1, got {res.returncode}"
    assert res.stderr.strip(), "a message must say why"


@pytest.mark.parametrize("order", [["-n"], ["-t", "XI"], ["--template-coordinate"]])
def test_write_index_ignored_for_unsorted_orders(alnsort_bin, inputs, oracle_cache, tmp_path, order):
    """Non-coordinate order: warn, write the BAM, no index (samtools 'Ignoring --write-index')."""
    src = inputs.sam("hdr_plain")
    out = tmp_path / "out.bam"
    res = run_alnsort([*order, "--write-index", "-o", str(out), src], cwd=str(tmp_path))
    check_ok(res)
    assert re.search(r"index", res.stderr.decode(), re.I), "a warning must mention the ignored index"
    assert harness.leftover_files(tmp_path, {"out.bam"}) == [], "no index file for a non-coordinate order"
    harness.assert_same_text(
        oracle.strip_pg(oracle_cache.sorted_text(src, order)),
        oracle.strip_pg(oracle.view(str(out))),
        f"{order} --write-index output",
    )
