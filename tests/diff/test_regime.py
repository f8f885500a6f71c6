"""The spilling regime (issue 38): wide merges within the open-file limit,
and the pre-flight check of temporary space.

* Wide merge: a tiny `-m` makes the generated input spill more runs than
  `ulimit -n` lets one process open (the limit set hard and soft in the
  child, so the binary cannot raise it); the runs are merged in passes of
  what fits, and the records are samtools 1.24's (pysam), byte for byte
  in SAM text. `--stats-json` must show more runs than the limit and more
  than one merge pass, so the test cannot pass without the case it names.
* Pre-flight: a BAM whose length promises far more run files than any
  filesystem holds (a real BAM extended by a hole) is refused before any
  record is read, naming the temporary directory, what the sort needs and
  what the filesystem has, leaving nothing behind; `--no-tmp-space-check`
  skips the estimate, and the run then fails on the input's bytes instead.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
from pathlib import Path

import gen
import harness
import oracle
import pytest
from harness import check_ok

pytestmark = pytest.mark.alnsort_only


def _limit_open_files(n: int):
    def pre():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return pre


@pytest.fixture(scope="module")
def big_sam(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("regime") / "big.sam"
    path.write_text(gen.big_input())
    return path


@pytest.fixture(scope="module")
def long_sam(tmp_path_factory) -> Path:
    """~200 MB of 1 kb reads: ~300 runs at -m 1M."""
    path = tmp_path_factory.mktemp("regime") / "long.sam"
    path.write_text(gen.generate(gen.Params(seed=38, n_templates=48_000, read_len=1000, header="plain")))
    return path


def test_runs_beyond_the_open_file_limit_merge_in_passes(big_sam: Path, tmp_path: Path):
    """At -m 1M a run holds ~2k of the input's ~200k records (~90 runs); the
    final merge may open 32 runs (64 less the 32 descriptors kept back), fewer
    than the budget's reader buffers allow (~60)."""
    _wide_merge(big_sam, tmp_path, 64)


@pytest.mark.slow
def test_runs_beyond_256_open_files(long_sam: Path, tmp_path: Path):
    """Several hundred runs under `ulimit -n 256` (the budget's reader buffers
    bind first there: ~60 runs a pass)."""
    _wide_merge(long_sam, tmp_path, 256)


def _wide_merge(sam: Path, tmp_path: Path, nofile: int, mem: str = "1M"):
    big_sam = sam
    out = tmp_path / "out.sam"
    stats = tmp_path / "stats.json"
    tdir = tmp_path / "T"
    tdir.mkdir()
    argv = [harness.alnsort_path(), "sort", "-m", mem, "--no-PG", "-O", "sam", "--stats-json", str(stats),
            "-T", str(tdir), "-o", str(out), str(big_sam)]
    res = subprocess.run(argv, capture_output=True, timeout=300, preexec_fn=_limit_open_files(nofile))
    check_ok(res)
    s = json.loads(stats.read_text())
    assert s["runs_written"] > nofile, s
    assert s["merge_passes"] >= 2, s
    expected = oracle.sort_sam_text(["-m", mem, "--no-PG"], str(big_sam))
    harness.assert_same_text(expected, out.read_text(), f"alnsort sort -m {mem} under ulimit -n {nofile}")
    assert os.listdir(tdir) == []


def _bam_with_a_hole(tmp_path: Path) -> Path:
    """A real BAM made 2^43 bytes (8 TiB) long by a hole after its end: its first
    blocks give the inflation ratio, its length the estimate."""
    sam = tmp_path / "small.sam"
    sam.write_text(gen.main_input())
    bam = tmp_path / "huge.bam"
    oracle.to_bam(str(sam), str(bam))
    os.truncate(bam, 1 << 43)
    return bam


def test_preflight_refuses_naming_directory_need_and_free_space(tmp_path: Path):
    bam = _bam_with_a_hole(tmp_path)
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    res = harness.run_alnsort(["-m", "1M", "-T", str(tdir), "-o", str(outdir / "x.bam"), str(bam)])
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, err
    m = re.search(r"not enough temporary space in (\S+): this sort needs about ([\d.]+ \w+) there "
                  r"\(run files for about ([\d.]+ \w+) of records, estimated from the inputs' sizes\) "
                  r"and the filesystem has ([\d.]+ \w+) free", err)
    assert m, err
    assert m.group(1).startswith(str(tdir)), err
    assert m.group(2).endswith("TiB"), err  # hundreds of TiB, from an 8 TiB input
    assert os.listdir(tdir) == [] and os.listdir(outdir) == [], (os.listdir(tdir), os.listdir(outdir))


def test_no_tmp_space_check_skips_the_estimate(tmp_path: Path):
    bam = _bam_with_a_hole(tmp_path)
    tdir = tmp_path / "T"
    tdir.mkdir()
    res = harness.run_alnsort(["-m", "1M", "--no-tmp-space-check", "-T", str(tdir),
                               "-o", str(tmp_path / "x.bam"), str(bam)])
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, err
    assert "temporary space" not in err, err
    assert str(bam) in err, err  # the input's bytes after its EOF block are what fails
    assert os.listdir(tdir) == []


def test_a_sort_that_fits_is_not_refused(tmp_path: Path):
    sam = tmp_path / "in.sam"
    sam.write_text(gen.main_input())
    out = tmp_path / "out.bam"
    check_ok(harness.run_alnsort(["-m", "1M", "-T", str(tmp_path), "-o", str(out), str(sam)]))
    assert out.stat().st_size > 0
