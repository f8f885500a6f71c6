"""A stand-in for alnsort.stages over text files of integer lines, used only
by the driver's control-flow test (test_cluster.py::test_wrong_split_guesses_
are_repaired). It follows the stage interface (docs: prompts/stages-spec)
with one deliberate weakness: its split boundaries are byte guesses that
usually fall inside a line, so every map but the first starts on a wrong
guess that the driver must detect (the proven end of the previous map) and
repair. Records are lines; the key is the line's integer; ties keep input
order (split ordinal, record ordinal), as a stable sort does."""

from __future__ import annotations

import heapq
import os
import pickle
import struct


def split(inputs, parts):
    out = []
    per = max(1, parts // len(inputs))
    for i, path in enumerate(inputs):
        size = os.path.getsize(path)
        starts = sorted({0} | {size * k // per + 1 for k in range(1, per)})
        starts = [s for s in starts if s < size] or [0]
        for j, s in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else None
            out.append({"input": i, "start": s, "end": end, "ordinal": len(out)})
    return out


def _records(inputs, sp):
    """(lines, proven end): the lines that start in [start, end)."""
    lines = []
    with open(inputs[sp["input"]], "rb") as f:
        f.seek(sp["start"])
        pos = sp["start"]
        while True:
            if sp["end"] is not None and pos >= sp["end"]:
                return lines, pos
            line = f.readline()
            if not line:
                return lines, None
            lines.append(line)
            pos += len(line)


def _key(line, ordinal, n):
    try:
        k = int(line)
    except ValueError:  # a fragment read from a wrong guess
        k = -1
    return struct.pack(">QIQ", k + (1 << 63), ordinal, n)  # bytes order = number order


def sample(inputs, sp, count, **order):
    lines, _ = _records(inputs, sp)
    step = max(1, len(lines) // max(1, count))
    return [_key(lines[n], sp["ordinal"], n) for n in range(0, len(lines), step)][:count]


def splitters(samples, partitions):
    s = sorted(samples)
    return [s[len(s) * k // partitions] for k in range(1, partitions)]


def repair(splits, ends):
    redo = []
    for i in range(len(splits) - 1):
        if splits[i + 1]["input"] == splits[i]["input"] and ends[i] != splits[i + 1]["start"]:
            splits[i + 1]["start"] = ends[i]
            redo.append(i + 1)
    return redo


def reach(inputs, sp):
    """No merge tie-break here: ties keep input order."""
    return None


def priors(splits, reaches):
    return [None] * len(splits)


def map(inputs, sp, splitters, threads=1, max_memory=None, prior=None, **order):
    import bisect

    assert prior is None, prior
    lines, end = _records(inputs, sp)
    keyed = sorted((_key(x, sp["ordinal"], n), x) for n, x in enumerate(lines))
    blocks = [[] for _ in range(len(splitters) + 1)]
    for k, x in keyed:
        blocks[bisect.bisect_right(splitters, k)].append((k, x))
    return {"blocks": [pickle.dumps(b) for b in blocks], "records": len(lines), "end": end,
            "reach": None}


def reduce(inputs, blocks, part_path, range_index, partitions, *, index=None, **order):
    merged = heapq.merge(*[pickle.loads(b) for b in blocks])
    data = b"".join(x for _, x in merged)
    with open(part_path, "wb") as f:
        f.write(data)
    return {"records": data.count(b"\n"), "bytes": len(data)}


def assemble(inputs, parts, output, *, index=None, sharded=False, argv=None, **order):
    if sharded:
        os.mkdir(output)
        for r, p in enumerate(parts):
            os.replace(p, os.path.join(output, f"part-{r:06d}.txt"))
        return {"parts": len(parts)}
    with open(output + ".tmp", "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                out.write(f.read())
    os.replace(output + ".tmp", output)
    return {"parts": len(parts)}
