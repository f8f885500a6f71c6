"""The distributed sort's stages, one function each, for a driver (Ray,
Dask, a workflow manager) that runs them as tasks:

    >>> from alnsort import stages
    >>> splits = stages.split(["in.bam"], parts=8)
    >>> samples = [k for s in splits for k in stages.sample(["in.bam"], s, 100)]
    >>> cuts = stages.splitters(samples, partitions=4)
    >>> maps = [stages.map(["in.bam"], s, cuts) for s in splits]
    >>> # check each map's proven "end" against the next split's "start"
    >>> for r in range(len(cuts) + 1):
    ...     stages.reduce(["in.bam"], [m["blocks"][r] for m in maps], f"part{r}", r, len(cuts) + 1)
    >>> stages.assemble(["in.bam"], [f"part{r}" for r in range(len(cuts) + 1)], "out.bam")

``assemble(reduce(map(...)))`` over any splits and partitions holds the
records of ``alnsort sort`` on the same input with the same options, in
its order, with its header; the output bytes are the same between runs
with the same splits and partitions.

**Splits and their repair.** The first split of an input starts where
the header ends; the others start at guessed record starts (a BGZF block
start, then ten records in a row that pass the reader's full record
check). A guess is never trusted alone: ``map`` reads its split
sequentially from its start and returns ``"end"``, the virtual offset of
the first record at or past the split's end, a record start proven by
parsing. The driver compares it with the next split's ``"start"``; when
they differ (a wrong guess), it runs the next split's ``map`` again with
``"start"`` set to that proven end (:func:`repair` does this) and drops
the first run's blocks. Every record is then read exactly once.

**Order options** are the keyword arguments of :func:`alnsort.sort`
(``order``, ``tag``, ``threads``, ``max_memory``, ``level``,
``output_format``, ``tmp_dir``, ``no_pg``, ``unknown_reference``); every
stage of one sort must get the same ones. They become ``alnsort sort``
options parsed by the command's own parser, so a refused option raises
:class:`alnsort.AlnsortError` with the command's message.

**Several inputs** (lanes) are sorted together, as if concatenated in
order, when their ``@SQ`` lines are identical; the output header is the
first input's. Other inputs are refused (header merging is not wired
into the stages yet). Only BAM inputs can be split.

Every function releases the GIL while it works and raises
:class:`alnsort.AlnsortError` (:class:`alnsort.AlnsortIOError` for I/O
causes) on bad input, naming the file, offset and record.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _alnsort, _check, _path, ORDERS, UNKNOWN_REFERENCE, PathArg

__all__ = [
    "Split",
    "split",
    "sample",
    "splitters",
    "map",
    "repair",
    "reduce",
    "assemble",
    "options",
]

#: A split: ``{"input": int, "start": int, "end": int | None, "ordinal": int}``.
Split = Dict[str, Any]

#: The index kinds ``reduce``/``assemble`` take.
INDEX_KINDS = (None, "bai", "csi")


def options(
    *,
    order: str = "coordinate",
    tag: Optional[str] = None,
    threads: int = 1,
    max_memory: Union[str, int, None] = None,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    tmp_dir: Optional[PathArg] = None,
    no_pg: bool = False,
    unknown_reference: str = "error",
) -> List[str]:
    """The ``alnsort sort`` options the stages run with, for these keyword
    arguments (those of :func:`alnsort.sort`)."""
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(
            f"order must be one of {', '.join(repr(o) for o in ORDERS)}, not {order!r}"
        )
    if not isinstance(unknown_reference, str) or unknown_reference not in UNKNOWN_REFERENCE:
        raise ValueError(
            "unknown_reference must be one of "
            f"{', '.join(repr(v) for v in UNKNOWN_REFERENCE)}, not {unknown_reference!r}"
        )
    argv: List[str] = list(ORDERS[order])
    if unknown_reference != "error":
        argv.append(f"--unknown-reference={unknown_reference}")
    if tag is not None:
        _check(tag, (str,), "tag")
        argv += ["-t", tag]
    _check(threads, (int,), "threads")
    if threads != 1:
        argv += ["-@", str(threads)]
    if max_memory is not None:
        _check(max_memory, (str, int), "max_memory")
        argv += ["--max-memory", str(max_memory)]
    if level is not None:
        _check(level, (int,), "level")
        argv += ["-l", str(level)]
    if output_format is not None:
        _check(output_format, (str,), "output_format")
        argv += ["-O", output_format]
    if tmp_dir is not None:
        argv += ["-T", _path(tmp_dir, "tmp_dir")]
    _check(no_pg, (bool,), "no_pg")
    if no_pg:
        argv.append("--no-PG")
    return argv


def _inputs(inputs: Sequence[PathArg]) -> List[str]:
    if isinstance(inputs, (str, os.PathLike)):
        raise TypeError("inputs must be a list of paths, not one path")
    return [_path(p, "input") for p in inputs]


def _split_tuple(split: Split) -> tuple:
    try:
        return (split["input"], split["start"], split["end"], split["ordinal"])
    except (KeyError, TypeError) as e:
        raise TypeError(
            "split must be a dict with 'input', 'start', 'end' and 'ordinal' (as split() "
            f"returns), not {split!r}"
        ) from e


def split(inputs: Sequence[PathArg], parts: int, *, threads: int = 1) -> List[Split]:
    """Cut ``inputs`` (BAM files) into about ``parts`` splits in all (at
    least one per input), in input order. Each split is a dict:
    ``{"input": index into inputs, "start": virtual offset of its first
    record, "end": the next split's start or None (to the end of the
    input), "ordinal": its place in input order}``."""
    _check(parts, (int,), "parts")
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    got = _alnsort.stage_split(_inputs(inputs), parts, threads)
    return [{"input": i, "start": s, "end": e, "ordinal": o} for (i, s, e, o) in got]


def sample(inputs: Sequence[PathArg], split: Split, count: int, **order: Any) -> List[bytes]:
    """Up to ``count`` sort keys of ``split``'s records, drawn from a few
    evenly spaced stretches of it (only those are read), each with its
    tie-break (the split's ordinal and the record's virtual offset) as one
    ``bytes``."""
    _check(count, (int,), "count")
    return _alnsort.stage_sample(_inputs(inputs), _split_tuple(split), count, options(**order))


def splitters(samples: Sequence[bytes], partitions: int) -> List[bytes]:
    """``partitions - 1`` range splitters (fewer when the samples have too
    few distinct points) from every split's samples. Skew-safe: a key held
    by many records (unmapped reads, a pileup) is cut inside, by input
    order, so ranges stay even and the order is the single-node sort's."""
    _check(partitions, (int,), "partitions")
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return _alnsort.stage_splitters([bytes(s) for s in samples], partitions)


def map(  # noqa: A001 - the stage's name in the interface
    inputs: Sequence[PathArg], split: Split, splitters: Sequence[bytes], **order: Any
) -> Dict[str, Any]:
    """The map task of ``split``: its records read, keyed, sorted and cut
    into ``len(splitters) + 1`` framed blocks. Returns ``{"blocks":
    list[bytes] (one per range, in range order), "records": int, "end":
    int | None}``; ``"end"`` is the proven end (see the module
    documentation): compare it with the next split's ``"start"``."""
    blocks, records, end = _alnsort.stage_map(
        _inputs(inputs), _split_tuple(split), [bytes(s) for s in splitters], options(**order)
    )
    return {"blocks": blocks, "records": records, "end": end}


def repair(splits: List[Split], ends: Sequence[Optional[int]]) -> List[int]:
    """Checks each map's proven end (``ends[i]``, from ``map`` of
    ``splits[i]``) against the next split's start; where they differ,
    sets that next split's ``"start"`` to the proven end (in place) and
    returns its index: the map tasks to run again (their earlier output,
    or failure, is dropped). The end of a split repaired in this call is
    not checked (it is not known yet): call again after the reruns, until
    nothing is returned.

    A map (or sample) of a split whose start was guessed wrong usually
    fails on its first record; a driver holds such a failure until the
    previous map's proven end is known: if ``repair`` returns that split,
    the failure was the wrong guess, otherwise it is real."""
    redo: List[int] = []
    for i in range(len(splits) - 1):
        nxt = splits[i + 1]
        if nxt["input"] != splits[i]["input"] or i in redo:
            continue
        if ends[i] != nxt["start"]:
            if ends[i] is None:
                raise ValueError(
                    f"split {i} read to the end of its input, past split {i + 1}'s start"
                )
            nxt["start"] = ends[i]
            splits[i]["end"] = ends[i]
            redo.append(i + 1)
    return redo


def reduce(
    inputs: Sequence[PathArg],
    blocks: Sequence[bytes],
    part_path: PathArg,
    range_index: int,
    partitions: int,
    *,
    index: Optional[str] = None,
    **order: Any,
) -> Dict[str, int]:
    """The reduce task of range ``range_index``: ``blocks`` (that range's
    block from every map, in split order) merged into a headerless,
    EOF-less part at ``part_path``, plus its part index at
    ``part_path + ".idx"`` when ``index`` is ``"bai"`` or ``"csi"``.
    Returns ``{"records": int, "bytes": int}``."""
    if index not in INDEX_KINDS:
        raise ValueError(f"index must be None, 'bai' or 'csi', not {index!r}")
    records, nbytes = _alnsort.stage_reduce(
        _inputs(inputs),
        [bytes(b) for b in blocks],
        _path(part_path, "part_path"),
        range_index,
        partitions,
        options(**order),
        index is not None,
    )
    return {"records": records, "bytes": nbytes}


def assemble(
    inputs: Sequence[PathArg],
    parts: Sequence[PathArg],
    output: PathArg,
    *,
    index: Optional[str] = None,
    sharded: bool = False,
    argv: Optional[Sequence[str]] = None,
    **order: Any,
) -> Dict[str, Any]:
    """Write ``output``: the header (edited as ``alnsort sort`` edits it),
    the ``parts`` in range order, one EOF block; with ``index`` (``"bai"``:
    ``output + ".bai"``, ``"csi"``: ``output + ".csi"``) the index merged
    from the parts' indexes, as ``samtools index`` would build it. Atomic:
    the output appears only complete. ``argv`` is the command line the
    ``@PG`` line records (default: the ``alnsort sort`` line of these
    options). With ``sharded=True``, ``output`` is a new directory of
    complete files ``part-00000.bam``..., each with its own index.
    Returns ``{"bytes": int, "index": str | None, "files": list[str]}``."""
    if index not in INDEX_KINDS:
        raise ValueError(f"index must be None, 'bai' or 'csi', not {index!r}")
    _check(sharded, (bool,), "sharded")
    nbytes, idx, files = _alnsort.stage_assemble(
        _inputs(inputs),
        [_path(p, "part") for p in parts],
        _path(output, "output"),
        options(**order),
        index,
        sharded,
        None if argv is None else [str(a) for a in argv],
    )
    return {
        "bytes": nbytes,
        "index": None if idx is None else os.fsdecode(idx),
        "files": [os.fsdecode(f) for f in files],
    }
