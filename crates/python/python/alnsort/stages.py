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
that the engine's option table gives the stages
(``_alnsort.stage_option_keywords()``: ``order``, ``tag``, ``threads``,
``max_memory``, ``level``, ``output_format``, ``tmp_dir``, ``no_pg``,
``unknown_reference`` and the keywords these stand for); any other is a
``TypeError``. Every stage of one sort must get the same ones. They become ``alnsort sort``
options parsed by the command's own parser, so a refused option raises
:class:`alnsort.AlnsortError` with the command's message.

**Several inputs** (lanes) are sorted together into the file ``alnsort
sort IN1 IN2 ...`` writes: one header merged as ``samtools merge`` merges
them (``@SQ`` lines in any order or present in one input only; clashing
``@RG``/``@PG`` IDs renamed), every record translated into it, and
records of equal sort keys in the order that command gives them (the
order of the inputs' coordinate merge, not only input order). For that a
map needs the ``prior`` of its split: the largest :func:`reach` of the
earlier splits of the same input (``None`` for an input's first split).
``map`` returns its split's own ``"reach"``: a driver that took the
priors from :func:`reach` before a split was repaired checks them
against the maps' and runs a map again where they differ (:func:`priors`).
Only BAM inputs can be split.

Every function releases the GIL while it works and raises
:class:`alnsort.AlnsortError` (:class:`alnsort.AlnsortIOError` for I/O
causes) on bad input, naming the file, offset and record.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import AlnsortError, _alnsort, _check, _keywords, _options, _path, option_keywords, sort_options, PathArg

__all__ = [
    "Split",
    "split",
    "sample",
    "splitters",
    "map",
    "reach",
    "priors",
    "repair",
    "reduce",
    "assemble",
    "options",
    "markdup_keywords",
    "markdup_decide",
    "markdup_split_bases",
    "markdup_reduce",
    "markdup_collect",
    "map_collecting",
    "markdup_continued",
    "markdup_join",
    "markdup_decide_bucket",
    "markdup_finish",
    "markdup_assemble",
    "markdup_metrics",
    "START_CARRY",
    "markdup_tasks_refusal",
    "markdup_walk_refusal",
]

#: A split: ``{"input": int, "start": int, "end": int | None, "ordinal": int}``.
Split = Dict[str, Any]

#: The index kinds ``reduce``/``assemble`` take.
INDEX_KINDS = (None, "bai", "csi")


def options(**order: Any) -> List[str]:
    """The ``alnsort sort`` options the stages run with, for these keyword
    arguments (those of :func:`alnsort.sort` that a stage takes:
    :func:`alnsort.sort_options`)."""
    return sort_options(**order)


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
    return _alnsort.stage_sample(_inputs(inputs), _split_tuple(split), count, _keywords(**order))


def splitters(samples: Sequence[bytes], partitions: int) -> List[bytes]:
    """``partitions - 1`` range splitters (fewer when the samples have too
    few distinct points) from every split's samples. Skew-safe: a key held
    by many records (unmapped reads, a pileup) is cut inside, by input
    order, so ranges stay even and the order is the single-node sort's."""
    _check(partitions, (int,), "partitions")
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return _alnsort.stage_splitters([bytes(s) for s in samples], partitions)


def reach(inputs: Sequence[PathArg], split: Split, *, threads: int = 1) -> Optional[int]:
    """Several inputs: the largest coordinate merge key (in the merged
    header's terms) of ``split``'s records, ``None`` when it has none (or
    for one input, where nothing is read). Reads the whole split (inflates
    it and walks its records). See :func:`priors`."""
    _check(threads, (int,), "threads")
    return _alnsort.stage_reach(_inputs(inputs), _split_tuple(split), threads)


def priors(splits: Sequence[Split], reaches: Sequence[Optional[int]]) -> List[Optional[int]]:
    """The ``prior`` of each split for :func:`map`: the largest of
    ``reaches`` (one per split, from :func:`reach` or from a map's
    ``"reach"``) of the earlier splits of the same input; ``None`` for an
    input's first split."""
    out: List[Optional[int]] = []
    best: Optional[int] = None
    for i, s in enumerate(splits):
        if i == 0 or s["input"] != splits[i - 1]["input"]:
            best = None
        out.append(best)
        r = reaches[i]
        if r is not None:
            best = r if best is None else max(best, r)
    return out


def map(  # noqa: A001 - the stage's name in the interface
    inputs: Sequence[PathArg],
    split: Split,
    splitters: Sequence[bytes],
    *,
    prior: Optional[int] = None,
    markdup: "Optional[Markdup]" = None,
    **order: Any,
) -> Dict[str, Any]:
    """The map task of ``split``: its records read, keyed, sorted and cut
    into ``len(splitters) + 1`` framed blocks. Returns ``{"blocks":
    list[bytes] (one per range, in range order), "records": int, "end":
    int | None, "reach": int | None}``; ``"end"`` is the proven end (see
    the module documentation): compare it with the next split's
    ``"start"``. With several inputs, ``prior`` is the split's prior (see
    :func:`priors`) and ``"reach"`` the split's reach. With ``markdup``
    (duplicate marking: see :data:`Markdup`) each record carries its place
    in the input (split ordinal, index) to :func:`markdup_reduce`."""
    if prior is not None:
        _check(prior, (int,), "prior")
    blocks, records, end, got_reach = _alnsort.stage_map(
        _inputs(inputs),
        _split_tuple(split),
        [bytes(s) for s in splitters],
        _keywords(**order) if markdup is None else _marking(markdup, order),
        prior,
    )
    return {"blocks": blocks, "records": records, "end": end, "reach": got_reach}


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
    blocks: Sequence[Union[bytes, memoryview]],
    part_path: PathArg,
    range_index: int,
    partitions: int,
    *,
    index: Optional[str] = None,
    argv: Optional[Sequence[str]] = None,
    **order: Any,
) -> Dict[str, int]:
    """The reduce task of range ``range_index``: ``blocks`` (that range's
    block from every map, in split order) merged into a headerless,
    EOF-less part at ``part_path``, plus its part index at
    ``part_path + ".idx"`` when ``index`` is ``"bai"`` or ``"csi"``.
    With ``output_format="parquet"`` the part is a dataset directory of
    the range's Parquet files, whose header's ``@PG`` line records
    ``argv`` (as :func:`assemble`'s); :func:`assemble` gathers the parts
    into one dataset.
    A block is any object with the buffer protocol (``bytes``, a
    ``memoryview``, the read-only buffers a Ray task receives from the
    object store): read-only ones are read in place, not copied.
    Returns ``{"records": int, "bytes": int}``."""
    if index not in INDEX_KINDS:
        raise ValueError(f"index must be None, 'bai' or 'csi', not {index!r}")
    records, nbytes, _ = _alnsort.stage_reduce(
        _inputs(inputs),
        list(blocks),
        _path(part_path, "part_path"),
        range_index,
        partitions,
        _keywords(**order),
        index is not None,
        argv=None if argv is None else [str(a) for a in argv],
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
        _keywords(**order),
        index,
        sharded,
        None if argv is None else [str(a) for a in argv],
    )
    return {
        "bytes": nbytes,
        "index": None if idx is None else os.fsdecode(idx),
        "files": [os.fsdecode(f) for f in files],
    }


# ---- duplicate marking (alnsort_engine::stages_markdup) ---------------------

#: A stage's ``markdup``: the keywords of :func:`alnsort.sort`'s
#: duplicate-marking options (``{"tagging_policy": "all",
#: "optical_distance": 2500}``; ``markdup=True`` implied, ``{}`` for
#: Picard's defaults), each applied by the engine with the setter of its
#: ``alnsort sort`` option (any other option is refused by name); or those
#: options as written on the command line (``["--markdup",
#: "--tagging-policy", "all"]``), read once by ``alnsort sort``'s own
#: parser (:func:`markdup_keywords`).
Markdup = Union[Mapping[str, Any], Sequence[str]]


def markdup_keywords(words: Sequence[str]) -> Dict[str, Any]:
    """``alnsort sort``'s duplicate-marking options as written on its
    command line (``["--tagging-policy", "all"]``; ``--markdup`` may be
    among them) as the keywords a stage's ``markdup`` takes
    (``{"markdup": True, "tagging_policy": "all"}``), read by the
    command's own parser; any other option raises :class:`AlnsortError`
    naming it."""
    if isinstance(words, (str, bytes)) or not isinstance(words, Sequence):
        raise TypeError(f"markdup's options must be a list of words, e.g. ['--tagging-policy', 'all'], not {words!r}")
    group = {name for _, name, _ in _alnsort.markdup_options()}

    def only_markdup(given: List[str]) -> None:
        for name in given:
            if name not in group:
                raise AlnsortError(f"{name}: not a duplicate-marking option of alnsort sort")

    # Read as `alnsort sort --markdup WORDS` (nothing is opened).
    got = _alnsort.parse_sort_args(_alnsort.ARGV0, ["--markdup", *[str(w) for w in words]], [], only_markdup)
    if got.get("inputs"):
        raise AlnsortError(f"{got['inputs'][0]!r}: not a duplicate-marking option of alnsort sort")
    keyword = {name: key for key, (name, _, _) in option_keywords("sort").items()}
    return {keyword[name]: True if value is None else value for name, value in got["given_values"]}


def _marking(markdup: Markdup, order: Dict[str, Any]) -> Dict[str, Any]:
    """The typed options of a stage that marks duplicates: ``order``'s
    (:func:`alnsort._keywords`) with ``markdup``'s keywords."""
    if isinstance(markdup, Mapping):
        kw = dict(markdup)
    elif isinstance(markdup, Sequence) and not isinstance(markdup, (str, bytes)):
        kw = markdup_keywords(markdup)
    else:
        raise TypeError(
            "markdup must be a dict of alnsort.sort()'s duplicate-marking keywords, e.g. {'tagging_policy': 'all'} "
            f"(or those options as command-line words), not {type(markdup).__name__}"
        )
    if kw.get("markdup", True) is not True:
        raise ValueError(f"markdup={kw['markdup']!r} among a duplicate-marking stage's keywords: it marks duplicates")
    return dict(_keywords(**order), markdup=_options("sort", kw)[0])


def markdup_decide(
    inputs: Sequence[PathArg],
    markdup: Markdup,
    *,
    metrics: Optional[tuple] = None,
    **order: Any,
) -> Dict[str, Any]:
    """The duplicate decision over all of ``inputs``, as one-node ``alnsort
    sort --markdup IN...`` decides: ``{"decisions": bytes (for
    :func:`markdup_reduce`), "records": records per input, "metrics": the
    metrics file's text or None}``. ``metrics``: ``(metrics path, inputs
    and output as the user named them, the command line it records)``."""
    decisions, records, text = _alnsort.stage_markdup_decide(_inputs(inputs), _marking(markdup, order), metrics)
    return {"decisions": decisions, "records": records, "metrics": text}


def markdup_split_bases(
    split_records: Sequence[int], split_inputs: Sequence[int], input_records: Sequence[int]
) -> List[int]:
    """Where each split's records start in input order, from the maps'
    record counts (checked against the decision's counts per input)."""
    return _alnsort.stage_markdup_split_bases(list(split_records), list(split_inputs), list(input_records))


def markdup_reduce(
    inputs: Sequence[PathArg],
    blocks: Sequence[Union[bytes, memoryview]],
    part_path: PathArg,
    range_index: int,
    partitions: int,
    markdup: Markdup,
    decisions: Optional[Union[bytes, memoryview]],
    bases: Optional[Sequence[int]],
    *,
    slices: Optional[Sequence[Union[bytes, memoryview]]] = None,
    index: Optional[str] = None,
    argv: Optional[Sequence[str]] = None,
    **order: Any,
) -> Dict[str, int]:
    """:func:`reduce` of blocks of :func:`map` with ``markdup``, each record written as
    one node writes it (0x400, DT tags, removal). The decisions: the whole
    decision and the splits' ``bases`` (:func:`markdup_split_bases`), or,
    with ``decisions`` and ``bases`` None, ``slices``: this range's slice
    of every split, in split order (:func:`markdup_finish` with
    ``ranges``), checked against the records met of each split. Returns
    ``{"records": records read, "bytes": int, "marked": duplicates among
    them}``."""
    if index not in INDEX_KINDS:
        raise ValueError(f"index must be None, 'bai' or 'csi', not {index!r}")
    given = (decisions is not None, bases is not None, slices is not None)
    if given not in ((True, True, False), (False, False, True)):
        raise ValueError("the duplicate decisions: either the whole decision and the splits' bases, or slices")
    records, nbytes, marked = _alnsort.stage_reduce(
        _inputs(inputs),
        list(blocks),
        _path(part_path, "part_path"),
        range_index,
        partitions,
        _marking(markdup, order),
        index is not None,
        None if slices is not None else (decisions, list(bases)),
        None if slices is None else list(slices),
        argv=None if argv is None else [str(a) for a in argv],
    )
    return {"records": records, "bytes": nbytes, "marked": marked}


# ---- the decision cut into tasks (one input, or several: markdup_tasks_refusal)
# collect (per split) -> markdup_continued (driver) -> join (per name
# bucket) -> decide_bucket (per end bucket) -> finish (per split, in order:
# each split's walk resumes the previous split's carry) -> markdup_assemble:
# the decision of :func:`markdup_decide` with no task holding the whole
# input. Blocks are ``bytes`` (or any read-only buffer, read in place).

#: Where Picard's output walk stands at the start of the input (the carry
#: of :func:`markdup_finish` for the first split).
START_CARRY: Dict[str, Any] = {
    "stale": 0,
    "dup_template": False,
    "optical_stale": 0,
    "optical_dup_template": False,
}

_CARRY_KEYS = tuple(START_CARRY)
_BOUNDARY_KEYS = ("first_name", "last_name", "last_template", "first", "merge")
_COUNT_KEYS = ("all_sets", "optical_sets", "non_optical_sets", "optical_by_library")


def _boundaries(boundaries: Sequence[Dict[str, Any]]) -> List[tuple]:
    try:
        return [(*(b[k] for k in _BOUNDARY_KEYS[:4]), b.get("merge")) for b in boundaries]
    except (KeyError, TypeError) as e:
        raise TypeError(f"boundaries must be the 'boundary' dicts markdup_collect returns ({e})") from None


def markdup_collect(
    inputs: Sequence[PathArg],
    split: Split,
    markdup: Markdup,
    end_buckets: int,
    name_buckets: int,
    **order: Any,
) -> Dict[str, Any]:
    """The duplicate-marking share of ``split`` (of one input, or of several
    that :func:`markdup_tasks_refusal` lets through; others refused): its
    records read as :func:`map` reads them and checked as one node checks
    them. Returns ``{"ends": list[bytes] (fragment ends, one block per end
    bucket), "halves": list[bytes] (mate halves, one per name bucket),
    "slots": bytes (8 per record), "boundary": {"first_name",
    "last_name": bytes | None, "last_template", "first": int}, "records":
    int, "ranges": bytes (each record's range of the output: empty here,
    set by :func:`map_collecting`)}``."""
    _check_buckets(end_buckets, name_buckets)
    return _share(
        _alnsort.stage_markdup_collect(
            _inputs(inputs), _split_tuple(split), _marking(markdup, order), end_buckets, name_buckets
        )
    )


def _check_buckets(end_buckets: int, name_buckets: int) -> None:
    for n, what in ((end_buckets, "end_buckets"), (name_buckets, "name_buckets")):
        _check(n, (int,), what)
        if n < 1:
            raise ValueError(f"{what} must be at least 1, not {n}")


def _share(got: tuple) -> Dict[str, Any]:
    """A split's share as :func:`markdup_collect` returns it."""
    ends, halves, slots, bound, records, ranges = got
    return {
        "ends": ends,
        "halves": halves,
        "slots": slots,
        "boundary": dict(zip(_BOUNDARY_KEYS, bound)),
        "records": records,
        "ranges": ranges,
    }


def map_collecting(
    inputs: Sequence[PathArg],
    split: Split,
    splitters: Sequence[bytes],
    markdup: Markdup,
    end_buckets: int,
    name_buckets: int,
    *,
    prior: Optional[int] = None,
    **order: Any,
) -> Dict[str, Any]:
    """:func:`map` of ``split`` with ``markdup`` (``prior`` as :func:`map`
    takes it: several inputs), which also collects the split's
    duplicate-marking share from the records it reads (one read and
    decode instead of :func:`map` and :func:`markdup_collect`):
    :func:`map`'s dict with ``"share"``, the dict :func:`markdup_collect`
    returns (the same bytes), whose ``"ranges"`` holds each record's range
    of the output (2 bytes per record, for :func:`markdup_finish`)."""
    _check_buckets(end_buckets, name_buckets)
    (blocks, records, end, got_reach), share = _alnsort.stage_map_collecting(
        _inputs(inputs),
        _split_tuple(split),
        [bytes(s) for s in splitters],
        _marking(markdup, order),
        end_buckets,
        name_buckets,
        prior,
    )
    return {"blocks": blocks, "records": records, "end": end, "reach": got_reach, "share": _share(share)}


def markdup_continued(boundaries: Sequence[Dict[str, Any]]) -> List[Optional[int]]:
    """For each split (its ``"boundary"`` from :func:`markdup_collect`, in
    split order): where its first template began when that was in an
    earlier split (name-grouped input), else ``None``."""
    return _alnsort.stage_markdup_continued(_boundaries(boundaries))


def markdup_join(
    blocks: Sequence[Union[bytes, memoryview]],
    boundaries: Sequence[Dict[str, Any]],
    end_buckets: int,
    markdup: Markdup,
    *,
    inputs: Sequence[PathArg] = (),
    splits: Sequence[Split] = (),
    **order: Any,
) -> Dict[str, Any]:
    """One name bucket's mate halves (its block from every split) paired
    as one node pairs them, within the duplicate-marking budget of the
    options (``max_memory``; beyond it the halves are sorted into run
    files under ``tmp_dir``, removed on success and on failure). A
    template of name-grouped input scattered over the splits is refused
    as one node refuses it; ``inputs`` and ``splits`` (every split, in
    split order) name its record. Returns ``{"ends": list[bytes]}`` (the
    pair ends, one block per end bucket) and ``"runs"`` (run files
    written: 0 when the halves fitted); with ``"one_task_because"`` (and
    no ends) when the mates of a template are in two of several
    coordinate-sorted inputs, whose order Picard's merged stream decides:
    the decision then goes to one task (:func:`markdup_decide`)."""
    ends, runs, why = _alnsort.stage_markdup_join(
        list(blocks),
        _boundaries(boundaries),
        end_buckets,
        _marking(markdup, order),
        _inputs(inputs),
        [_split_tuple(s) for s in splits],
    )
    return {"ends": ends, "runs": runs, **({"one_task_because": why} if why is not None else {})}


def markdup_decide_bucket(
    inputs: Sequence[PathArg],
    blocks: Sequence[Union[bytes, memoryview]],
    boundaries: Sequence[Dict[str, Any]],
    markdup: Markdup,
    splits: int,
    **order: Any,
) -> Dict[str, Any]:
    """One end bucket's duplicate sets (``blocks``: its fragment ends from
    every split and its pair ends from every join, in any order) walked as
    one node walks them. Returns ``{"duplicates": list[bytes], "optical":
    list[bytes]}`` (the indexes listed, one block per split, for
    :func:`markdup_finish`) and ``"counts"`` (set-size histograms and
    optical duplicates per library, for :func:`markdup_assemble`). Ends of
    several coordinate-sorted inputs sharing a library (whose boundaries
    carry ``"merge"``) are compared by their records' places in Picard's
    merged stream; where two inputs' records tie there (equal in every
    field htsjdk's coordinate comparator reads), the result has
    ``"one_task_because"`` (and no lists): the decision then goes to one
    task (:func:`markdup_decide`)."""
    dups, optical, counts, why = _alnsort.stage_markdup_decide_bucket(
        _inputs(inputs), list(blocks), _boundaries(boundaries), _marking(markdup, order), splits
    )
    out = {"duplicates": dups, "optical": optical, "counts": dict(zip(_COUNT_KEYS, counts))}
    if why is not None:
        out["one_task_because"] = why
    return out


def markdup_finish(
    slots: Union[bytes, memoryview],
    continued: bool,
    duplicates: Sequence[Union[bytes, memoryview]],
    optical: Sequence[Union[bytes, memoryview]],
    carry: Optional[Dict[str, Any]] = None,
    *,
    ranges: Optional[Union[bytes, memoryview]] = None,
    partitions: int = 0,
) -> Dict[str, Any]:
    """Picard's output walk over one split: its ``slots``, whether its
    first template began in an earlier split (:func:`markdup_continued`),
    its duplicate and optical lists from every end bucket, and ``carry``,
    where the walk stood after the previous split (default: the input's
    start). Returns ``{"duplicate": bytes, "optical": bytes | None}`` (bit
    sets: 64-bit little-endian words), ``"records"``, ``"counts"`` (record
    counts per library) and ``"carry"`` (for the next split; a split
    finished with another carry than the previous split's ``"carry"`` must
    be finished again with that one); with ``ranges`` (the share's
    ``"ranges"`` from :func:`map_collecting`) also ``"slices"``: the
    outcome cut into ``partitions`` slices, one per reduce
    (:func:`markdup_reduce` with ``slices``); ``"repeated"``: the listed
    indexes found twice (for :func:`markdup_walk_refusal`)."""
    c = START_CARRY if carry is None else carry
    try:
        ct = tuple(c[k] for k in _CARRY_KEYS)
    except (KeyError, TypeError):
        raise TypeError(f"carry must be a dict with {', '.join(_CARRY_KEYS)}, not {carry!r}") from None
    _check(partitions, (int,), "partitions")
    if ranges is not None and partitions < 1:
        raise ValueError(f"ranges need the number of partitions (at least 1), not {partitions}")
    dup, opt, records, counts, out, slices, repeated = _alnsort.stage_markdup_finish(
        slots, bool(continued), list(duplicates), list(optical), ct, ranges, partitions
    )
    return {
        "duplicate": dup,
        "optical": opt,
        "records": records,
        "counts": counts,
        "carry": dict(zip(_CARRY_KEYS, out)),
        "slices": slices,
        "repeated": repeated,
    }


def markdup_tasks_refusal(inputs: Sequence[PathArg], markdup: Markdup, **order: Any) -> Optional[str]:
    """Why the decision of several ``inputs`` cannot be cut into tasks
    exactly (name-grouped inputs; a library in two inputs' headers), or
    None (one input; coordinate-sorted inputs whose libraries are apart)."""
    return _alnsort.stage_markdup_tasks_refusal(_inputs(inputs), _marking(markdup, order))


def markdup_walk_refusal(
    inputs: Sequence[PathArg], split_inputs: Sequence[int], finished: Sequence[Dict[str, Any]]
) -> Optional[str]:
    """Why the splits' walks (``finished``: each split's
    :func:`markdup_finish` result or its ``"counts"`` and ``"repeated"``;
    its input in ``split_inputs``) are not Picard's walk of the inputs' merged
    stream (a library with records in two inputs; an index listed twice),
    or None."""
    return _alnsort.stage_markdup_walk_refusal(
        _inputs(inputs), list(split_inputs), [f["counts"] for f in finished], [f["repeated"] for f in finished]
    )


def markdup_assemble(
    inputs: Sequence[PathArg],
    markdup: Markdup,
    outcomes: Sequence[Dict[str, Any]],
    bucket_counts: Sequence[Dict[str, Any]],
    *,
    metrics: Optional[tuple] = None,
    **order: Any,
) -> Dict[str, Any]:
    """The decision of :func:`markdup_decide` from every split's
    :func:`markdup_finish` outcome (in split order, each finished with the
    previous split's carry) and every bucket's ``"counts"``: counts summed,
    library size and histograms computed from the sums."""
    outs = [(o["duplicate"], o["optical"], o["records"], o["counts"]) for o in outcomes]
    counts = [tuple(c[k] for k in _COUNT_KEYS) for c in bucket_counts]
    decisions, records, text = _alnsort.stage_markdup_assemble(
        _inputs(inputs), _marking(markdup, order), outs, counts, metrics
    )
    return {"decisions": decisions, "records": records, "metrics": text}


def markdup_metrics(
    inputs: Sequence[PathArg],
    markdup: Markdup,
    finished: Sequence[Dict[str, Any]],
    bucket_counts: Sequence[Dict[str, Any]],
    *,
    metrics: Optional[tuple] = None,
    **order: Any,
) -> Dict[str, Any]:
    """The metrics of :func:`markdup_assemble` without the decision's bytes
    (for reduces that take their ranges' slices): from every split's
    :func:`markdup_finish` ``"counts"`` and ``"records"`` (in split order;
    the bits are not needed) and every bucket's ``"counts"``. Returns
    ``{"records": int, "metrics": the metrics file's text or None}``."""
    counts = [tuple(c[k] for k in _COUNT_KEYS) for c in bucket_counts]
    text = _alnsort.stage_markdup_metrics(
        _inputs(inputs), _marking(markdup, order), [f["counts"] for f in finished], counts, metrics
    )
    return {"records": sum(f["records"] for f in finished), "metrics": text}
