"""Lanes whose headers must be merged: BAM inputs for the tests of several
inputs on the distributed path (tests/python/test_stages.py, tests/ray/).

`make_lanes` cuts one generated run (tests/gen.py: unsorted, coordinate
ties across lanes, hot keys, trap tags) into three lanes at random:

* lane 1 renames the sample of every read group: its @RG IDs clash with
  lane 0's (renamed in the merged header) and so do its @PG IDs;
* lane 2 lists the @SQ lines in reverse, after a reference only it has
  (chrZ, which holds its chrM reads): every reference id of it changes.
"""

from __future__ import annotations

import random
from pathlib import Path

import gen
import oracle


def make_lanes(directory: Path, *, seed: int, n_templates: int, n_long_reads: int = 0) -> list[str]:
    text = gen.generate(
        gen.Params(seed=seed, n_templates=n_templates, header="pgchain", n_long_reads=n_long_reads)
    )
    lines = text.splitlines(keepends=True)
    header = [x for x in lines if x.startswith("@")]
    body = [x for x in lines if not x.startswith("@")]
    rng = random.Random(seed)
    groups: list[list[str]] = [[], [], []]
    for rec in body:
        groups[rng.randrange(3)].append(rec)
    paths = []
    for i, recs in enumerate(groups):
        h = list(header)
        if i == 1:
            h = [x.replace("SM:sample1", "SM:other") for x in h] + ["@CO\tsecond lane\n"]
        if i == 2:
            sq = [x for x in h if x.startswith("@SQ")]
            hd = [x for x in h if x.startswith("@HD")]
            rest = [x for x in h if not x.startswith(("@SQ", "@HD"))]
            h = hd + ["@SQ\tSN:chrZ\tLN:400000\n"] + list(reversed(sq)) + rest
            recs = [r.replace("\tchrM\t", "\tchrZ\t") for r in recs]
        sam = directory / f"lane{i}.sam"
        sam.write_text("".join(h) + "".join(recs))
        bam = directory / f"lane{i}.bam"
        oracle.to_bam(str(sam), str(bam))
        sam.unlink()
        paths.append(str(bam))
    return paths
