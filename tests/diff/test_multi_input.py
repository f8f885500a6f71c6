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
