"""Compares the duplicate flags of two BAM files record by record, whatever
their order, and optionally two DuplicationMetrics files (all but their
comment lines). For the benchmark check of `alnsort sort --markdup`
against Picard MarkDuplicates:

    python3 tests/markdup/compare_flags.py picard.bam ours.bam [picard.metrics ours.metrics]

A record is matched by read name, flag without 0x400, reference and
position (identical records are matched as a multiset). Prints the counts
and exits 1 on any difference.
"""

from __future__ import annotations

import collections
import sys

import pysam


def flags(path: str):
    d: dict = collections.defaultdict(list)
    n = 0
    with pysam.AlignmentFile(path, "rb", check_sq=False, threads=2) as f:
        for r in f.fetch(until_eof=True):
            d[(r.query_name, r.flag & ~0x400, r.reference_id, r.reference_start)].append(bool(r.flag & 0x400))
            n += 1
    return {k: sorted(v) for k, v in d.items()}, n


def metrics_body(path: str):
    return [ln for ln in open(path).read().split("\n") if not ln.startswith("#")]


def main(argv: list[str]) -> int:
    a, na = flags(argv[0])
    b, nb = flags(argv[1])
    dup_a = sum(sum(v) for v in a.values())
    dup_b = sum(sum(v) for v in b.values())
    print(f"{argv[0]}: {na} records, {dup_a} with 0x400")
    print(f"{argv[1]}: {nb} records, {dup_b} with 0x400")
    ok = True
    if a.keys() != b.keys():
        print(f"records differ: {len(a.keys() - b.keys())} only in the first, {len(b.keys() - a.keys())} only in the second")
        ok = False
    diff = [k for k in a.keys() & b.keys() if a[k] != b[k]]
    print(f"records whose 0x400 differs: {len(diff)}")
    for k in diff[:10]:
        print("  ", k, a[k], b[k])
    ok &= not diff
    if len(argv) == 4:
        same = metrics_body(argv[2]) == metrics_body(argv[3])
        print(f"metrics (all but comment lines) identical: {same}")
        ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
