"""`alnsort.merge()`: the engine's merge run from Python with typed options
(no argv), against `alnsort merge` with the matching options: the same
output bytes (BAM, with and without an index; SAM; name order; clashing
@RG IDs renamed with the same seed, or combined), the same refusals with
the command's message, and nothing left behind on failure.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gen
import harness
import oracle

import alnsort


def _cli_merge(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([harness.alnsort_path(), "merge", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def parts(tmp_path):
    """Three coordinate-sorted BAMs of one generated input, and the same
    three sorted by name; every part has the input's @RG lines (clashing
    IDs)."""
    sam = tmp_path / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=31, n_templates=900)))
    bam = str(tmp_path / "in.bam")
    oracle.to_bam(str(sam), bam)
    out = {"coordinate": [], "name": []}
    for i in range(3):
        for order, flags in (("coordinate", []), ("name", ["-n"])):
            p = str(tmp_path / f"part{i}.{order}.bam")
            # Parts differ: each takes every third record of the input.
            sub = str(tmp_path / f"sub{i}.sam")
            with open(sam) as f, open(sub, "w") as g:
                body = 0
                for line in f:
                    if line.startswith("@"):
                        g.write(line)
                    else:
                        if body % 3 == i:
                            g.write(line)
                        body += 1
            harness.check_ok(harness.run_alnsort(flags + ["--no-PG", "-o", p, sub]))
            out[order].append(p)
    return out


@pytest.mark.parametrize(
    "kwargs,flags,name",
    [
        ({}, [], "out.bam"),
        ({"threads": 3, "level": 1}, ["-@", "3", "-l", "1"], "out.bam"),
        ({"combine_rg": True, "combine_pg": True}, ["-c", "-p"], "out.bam"),
        ({"seed": 7}, ["-s", "7"], "out.sam"),
        ({"output_format": "sam"}, ["-O", "sam"], "out.x"),
    ],
)
def test_same_bytes_as_alnsort_merge(tmp_path, parts, kwargs, flags, name):
    got = tmp_path / f"py-{name}"
    alnsort.merge(parts["coordinate"], got, no_pg=True, **kwargs)
    want = tmp_path / f"cli-{name}"
    seed = [] if "seed" in kwargs else ["-s", "0"]
    harness.check_ok(_cli_merge(["--no-PG", *seed, *flags, "-o", str(want), *parts["coordinate"]], tmp_path))
    assert got.read_bytes() == want.read_bytes()


def test_name_order_index_and_pg(tmp_path, parts):
    got = tmp_path / "py.bam"
    alnsort.merge(parts["name"], got, order="name", no_pg=True)
    want = tmp_path / "cli.bam"
    harness.check_ok(_cli_merge(["--no-PG", "-n", "-s", "0", "-o", str(want), *parts["name"]], tmp_path))
    assert got.read_bytes() == want.read_bytes()
    # An index: CSI beside the output, or the path named (BAI).
    alnsort.merge(parts["coordinate"], tmp_path / "i.bam", index=True, no_pg=True)
    harness.check_ok(_cli_merge(["--no-PG", "-s", "0", "--write-index", "-o", str(tmp_path / "c.bam"),
                                 *parts["coordinate"]], tmp_path))
    assert (tmp_path / "i.bam.csi").read_bytes() == (tmp_path / "c.bam.csi").read_bytes()
    alnsort.merge(parts["coordinate"], tmp_path / "j.bam", index=tmp_path / "j.bai", no_pg=True)
    assert (tmp_path / "j.bai").exists() and not (tmp_path / "j.bam.csi").exists()
    # The @PG line names the alnsort merge command the call stands for.
    alnsort.merge(parts["coordinate"], tmp_path / "pg.sam", force=True)
    # (samtools adds one @PG line per chain of the merged headers.)
    cl = f"CL:alnsort merge -f -s 0 -o {tmp_path / 'pg.sam'} {' '.join(parts['coordinate'])}"
    pg = [line for line in (tmp_path / "pg.sam").read_text().splitlines() if line.startswith("@PG\tID:alnsort")]
    assert pg and all(line.endswith(cl) for line in pg), (pg, cl)


def test_refusals_carry_the_commands_message(tmp_path, parts):
    out = tmp_path / "exists.bam"
    out.write_bytes(b"keep")
    with pytest.raises(alnsort.AlnsortError) as e:
        alnsort.merge(parts["coordinate"], out)
    res = _cli_merge(["-o", str(out), *parts["coordinate"]], tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == f"alnsort merge: {e.value}"
    assert out.read_bytes() == b"keep"
    # Unsorted input: the command's message naming file and record, nothing left.
    bad = tmp_path / "bad.bam"
    with pytest.raises(alnsort.AlnsortError) as e:
        alnsort.merge([parts["coordinate"][0], parts["name"][1]], bad)
    res = _cli_merge(["-o", str(tmp_path / "bad2.bam"), parts["coordinate"][0], parts["name"][1]], tmp_path)
    assert res.stderr.strip().splitlines()[-1] == f"alnsort merge: {e.value}"
    assert "out of order" in str(e.value)
    assert not bad.exists()
    with pytest.raises(alnsort.AlnsortIOError):
        alnsort.merge([str(tmp_path / "missing.bam")], tmp_path / "m.bam")
    with pytest.raises(ValueError):
        alnsort.merge([], tmp_path / "m.bam")
    with pytest.raises(TypeError):
        alnsort.merge(parts["coordinate"][0], tmp_path / "m.bam")
    with pytest.raises(ValueError, match="minimiser"):
        alnsort.merge(parts["coordinate"], tmp_path / "m.bam", order="minimiser")
