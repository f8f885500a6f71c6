"""The map, sample and reduce tasks of a Ray run (plain functions, made
remote by the driver) and what every task takes (:class:`_Run`)."""

from __future__ import annotations

import importlib
import os
import shutil
import pickle
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .. import AlnsortError

TaskHook = Callable[[str, int], None]


def _stages(name: str) -> Any:
    return importlib.import_module(name)


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "tuple[Any, float]":
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _cpu() -> float:
    """CPU seconds of this process so far (all its threads: the stages'
    thread pools included)."""
    return time.process_time()


@dataclass(frozen=True)
class _Run:
    """What every task of one run takes, as one value: the stage module's
    name (a stand-in in the driver's own tests; a name travels to the
    tasks, a module does not), the inputs, the order options of
    :func:`_order_options`, each task's ``threads`` and ``max_memory``,
    ``alnsort sort``'s duplicate-marking options (``None`` without
    ``--markdup``) and the fault-injection hook."""

    stages: str
    inputs: List[str]
    order: Dict[str, Any] = field(default_factory=dict)
    threads: int = 1
    max_memory: Optional[Union[str, int]] = None
    markdup: Optional[Dict[str, Any]] = None
    hook: Optional[TaskHook] = None

    def kwargs(self) -> Dict[str, Any]:
        """The stages' keyword arguments of a task that sorts or decides:
        the order options with the task's threads and memory."""
        kwargs: Dict[str, Any] = dict(self.order, threads=self.threads)
        if self.max_memory is not None:
            kwargs["max_memory"] = self.max_memory
        return kwargs

    def call(self, fn: str, *args: Any, task: Optional[Tuple[str, int]] = None, **kwargs: Any) -> Tuple[Any, float, float]:
        """The stage function ``fn`` of the stage module called with these
        arguments, after the hook (with ``task``: (stage, index)): (its
        result, seconds inside it, CPU seconds of this process meanwhile)."""
        if task is not None and self.hook is not None:
            self.hook(*task)
        c0 = _cpu()
        out, secs = _timed(getattr(_stages(self.stages), fn), *args, **kwargs)
        return out, secs, _cpu() - c0


def _sample_task(
    run: _Run, splits: List[Dict[str, Any]], count: int, with_reach: List[bool]
) -> List[Dict[str, Any]]:
    """The samples (and, where asked, the reaches) of several splits (one
    task per group of splits: a sample reads little, so a task per split
    would cost more in Ray's scheduling than in the stage)."""
    out: List[Dict[str, Any]] = []
    for split, reach_too in zip(splits, with_reach):
        c0 = _cpu()
        try:
            keys, secs, _ = run.call("sample", run.inputs, split, count, **run.order)
            reach = None
            if reach_too:
                reach, more, _ = run.call("reach", run.inputs, split)
                secs += more
        except AlnsortError as e:
            # A split whose start is a wrong guess may fail here; samples only
            # balance the ranges, a missing reach is made good after the maps,
            # and a real error fails the split's map too.
            out.append(
                {"keys": [], "reach": None, "seconds": 0.0, "cpu": _cpu() - c0, "error": str(e)}
            )
            continue
        out.append({"keys": keys, "reach": reach, "seconds": secs, "cpu": _cpu() - c0})
    return out


def _warm_task(stages: str) -> None:
    """Nothing but the stage module's import: started first, it brings up a
    worker process per CPU while the driver splits and samples."""
    _stages(stages)


def _groups(items: List[Any], n: int) -> List[List[Any]]:
    """``items`` cut into at most ``n`` contiguous groups of about equal
    size, in order."""
    n = max(1, min(n, len(items)))
    return [items[len(items) * g // n : len(items) * (g + 1) // n] for g in range(n)]


def _map_task(
    run: _Run,
    index: int,
    split: Dict[str, Any],
    splitters: List[bytes],
    prior: Optional[int],
    buckets: Optional[int] = None,
) -> tuple:
    """A split's map: (meta, a block per partition...). With ``buckets``
    (duplicate marking cut into tasks) the map also collects the split's
    share of the decision from the records it reads (``map_collecting``):
    (meta with ``"collect"``, blocks..., then what :func:`_collect_task`
    returns after its meta)."""
    kwargs = run.kwargs()
    share = None
    if buckets is not None:
        if run.markdup is None:
            raise AlnsortError("the map collects the duplicate-marking share only with --markdup")
        out, secs, cpu = run.call(
            "map_collecting", run.inputs, split, splitters, run.markdup, buckets, buckets, task=("map", index),
            prior=prior, **kwargs,
        )
        share = out["share"]
    else:
        if run.markdup is not None:
            kwargs["markdup"] = run.markdup
        out, secs, cpu = run.call("map", run.inputs, split, splitters, task=("map", index), prior=prior, **kwargs)
    blocks = out["blocks"]
    if len(blocks) != len(splitters) + 1:
        raise AlnsortError(
            f"map of split {split.get('ordinal')} returned {len(blocks)} blocks "
            f"for {len(splitters) + 1} partitions"
        )
    meta = {
        "records": out["records"],
        "end": out["end"],
        "reach": out["reach"],
        "bytes": sum(len(b) for b in blocks),
        "seconds": secs,
        "cpu": cpu,
    }
    # Out-of-band (pickle protocol 5): Ray copies each block once, straight
    # into the object store, and a reduce reads it there as a buffer,
    # instead of pickling it into a stream and unpickling a copy.
    if share is None:
        return (meta, *[pickle.PickleBuffer(b) for b in blocks])
    # The share's time and CPU are the map's (one read of the split).
    meta["collect"] = dict(_share_meta(share), seconds=0.0, cpu=0.0)
    return (meta, *_buffers(blocks), *_share_buffers(share))


def _reduce_task(
    run: _Run,
    range_index: int,
    part_path: str,
    partitions: int,
    options: Dict[str, Any],
    marks: Optional[tuple],
    decisions: Optional[bytes],
    *blocks: bytes,
) -> Dict[str, Any]:
    # Each attempt writes its own temporary part, renamed into place when
    # complete: a retried or duplicated reduce writes the same bytes again.
    tmp = f"{part_path}.tmp-{uuid.uuid4().hex}"
    task = ("reduce", range_index)
    try:
        if marks is not None:
            # marks: (markdup options, split bases, slices): the whole decision
            # comes as an argument of its own (an object in the store, read in
            # place); or, with `slices` > 0, the first `slices` blocks are this
            # range's slices of the decision, one per split.
            md, bases, sliced = marks
            parts = list(blocks[:sliced]) if sliced else None
            out, secs, cpu = run.call(
                "markdup_reduce", run.inputs, list(blocks[sliced:]), tmp, range_index, partitions,
                md, decisions, bases, task=task, slices=parts, **options, **run.order,
            )
        else:
            out, secs, cpu = run.call(
                "reduce", run.inputs, list(blocks), tmp, range_index, partitions, task=task, **options, **run.order
            )
        if os.path.exists(tmp + ".idx"):
            os.replace(tmp + ".idx", part_path + ".idx")
        if os.path.isdir(tmp) and os.path.isdir(part_path):
            # A Parquet part (a dataset directory) an earlier attempt of
            # this reduce completed: the same files, replaced whole.
            shutil.rmtree(part_path)
        os.replace(tmp, part_path)
    finally:
        for leftover in (tmp, tmp + ".idx"):
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
            elif os.path.exists(leftover):
                os.unlink(leftover)
    return dict(out, seconds=secs, cpu=cpu)


def _buffers(blocks: List[bytes]) -> List[pickle.PickleBuffer]:
    """Blocks a task returns out of band (one copy, straight into the
    object store, read there in place by the next task)."""
    return [pickle.PickleBuffer(b) for b in blocks]


def _share_meta(share: Dict[str, Any]) -> Dict[str, Any]:
    """What the driver reads of a split's share (``markdup_collect``'s)."""
    return {
        "boundary": share["boundary"],
        "records": share["records"],
        "ends_bytes": sum(len(b) for b in share["ends"]),
        "halves_bytes": sum(len(b) for b in share["halves"]),
        "slots_bytes": len(share["slots"]),
        "ranges": len(share["ranges"]) > 0,
    }


def _share_buffers(share: Dict[str, Any]) -> List[pickle.PickleBuffer]:
    """A split's share as task returns: fragment ends by end bucket, mate
    halves by name bucket, slots, each record's range."""
    return _buffers([*share["ends"], *share["halves"], share["slots"], share["ranges"]])


def _get(ray: Any, refs: Any) -> Any:
    """``ray.get``, raising a failed stage's own exception (an
    :class:`AlnsortError` with the CLI's message), not Ray's wrapper with the
    remote traceback."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def _cluster_cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
