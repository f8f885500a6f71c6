"""Sort one or more BAM files on a Ray cluster, into the file that
``alnsort sort`` writes on one machine.

    $ python -m alnsort.ray sort --partitions 8 -o out.bam lane1.bam lane2.bam
    >>> import alnsort.ray
    >>> stats = alnsort.ray.sort(["lane1.bam", "lane2.bam"], "out.bam", partitions=8)

The work is a sample sort over the stage functions of :mod:`alnsort.stages`,
run as Ray Core tasks:

1. **split** (driver): exact or guessed-and-verifiable record boundaries,
   ``splits`` of them over all inputs;
2. **sample** (one task per CPU of the cluster, each over a group of
   splits; for a few splits of one input, the driver itself, while the
   workers start): sort keys drawn from each split; the driver turns them
   into ``partitions - 1`` splitters. With several inputs the task also takes
   the split's reach (its largest coordinate merge key), from which each
   map gets its prior (see :mod:`alnsort.stages`);
3. **map** (one task per split, ``num_returns = partitions + 1``): decode,
   key, sort and cut the split's records into one framed block per key range.
   The blocks stay in Ray's object store (spilled to each node's spilling
   directory when the store is full), put there out of band (one copy, no
   pickling) and read there by the reduces; only a small summary (record
   count, the split's proven end) comes back to the driver;
4. **check** (driver): each map proves where its split really ends; when that
   is not where the next split of the same input begins (a guessed boundary
   that was wrong), the next map is run again from the proven start, so a
   wrong guess costs time, never records. With several inputs, a map whose
   prior differs from the one its predecessors' own reaches give (after a
   repair) is run again with that one;
5. **reduce** (one task per key range): merges the range's block from every
   map, in split order, into a headerless BGZF part (plus its part index) on
   the shared filesystem, written under a temporary name and renamed, so a
   retried reduce is harmless;
6. **assemble** (driver): header + parts in range order + one EOF block, the
   index merged by shifting virtual offsets (or, ``sharded=True``, a
   directory of complete, individually indexed BAMs).

With ``markdup=True`` (``--markdup``) the maps carry each record's place
to the reduces, which set 0x400, ``DT`` and removal as one node does; the
decision comes, for one input, from tasks none of which holds the whole
input (each map collects its split's share as it reads it; after the
check, join per name bucket, decide per end bucket, finish per split, one
assemble task: :class:`_MarkdupTasks`); several inputs go through those tasks too
where that is Picard's answer (coordinate-sorted, no library in two inputs;
their maps, given their priors, collect their shares too), else through one decide task
reading the inputs beside the maps; the metrics file is written by the driver.

Fault tolerance is Ray's: a task on a node that dies is run again
(``max_retries``) and map blocks lost with a node are rebuilt from the input
by lineage reconstruction. Every stage is deterministic, so the output bytes
depend only on the inputs, the options, ``splits`` and ``partitions``: not on
the number of nodes, on ``threads``, or on which tasks failed. The driver owns
the objects; if it dies, the run is lost (nothing is written to ``output``)
and is run again from the start (docs/cluster.md).

All inputs, the output and ``work_dir`` must be on a filesystem that every
node and the driver see at the same path.
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import ORDERS, AlnsortError, _alnsort, option_keywords, sort_options

__all__ = ["sort", "main", "parse_args", "help_text", "default_splits", "default_buckets"]

PathArg = Union[str, "os.PathLike[str]"]

#: Compressed input bytes per split when ``splits`` is not given (the
#: default depends on the inputs only, so the output bytes do not depend on
#: the cluster the run happens to get).
SPLIT_BYTES = 64 << 20

#: Sort keys sampled per partition (spread over the splits); skewed inputs
#: (a pileup, the unmapped reads) need many more than Spark's 20.
SAMPLES_PER_PARTITION = 128

#: With one input and at most this many splits the driver samples them
#: itself (about 40 ms a split: a few short stretches each) while the
#: cluster's workers start, instead of waiting for a sample task in a fresh
#: worker (0.3-0.7 s on one node). More splits, or several inputs (whose
#: splits' reaches read them whole), are sampled by tasks. The samples do not
#: depend on where they are drawn: neither do the output bytes.
DRIVER_SAMPLE_SPLITS = 8

#: The module with the stage functions. Tests may name a stand-in with the
#: same functions (``sort(stages_module=...)``).
STAGES = "alnsort.stages"

TaskHook = Callable[[str, int], None]


def default_splits(inputs: Sequence[str]) -> int:
    """The number of splits (and of partitions) used when none is given:
    one per :data:`SPLIT_BYTES` of compressed input, at least one per input."""
    total = sum(os.path.getsize(p) for p in inputs)
    return max(len(inputs), math.ceil(total / SPLIT_BYTES))


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


# ---- the tasks (plain functions; made remote once Ray is imported) ----------


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
        os.replace(tmp, part_path)
    finally:
        for leftover in (tmp, tmp + ".idx"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return dict(out, seconds=secs, cpu=cpu)


# ---- the driver --------------------------------------------------------------


def _order_options(order: str, tag: Optional[str], unknown_reference: Optional[str]) -> Dict[str, Any]:
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(repr(o) for o in ORDERS)}, not {order!r}")
    out: Dict[str, Any] = {"order": order}
    if tag is not None:
        out["tag"] = tag
    if unknown_reference is not None and unknown_reference != "error":
        out["unknown_reference"] = unknown_reference
    return out


def _index_kind(index: Union[bool, str, None]) -> Optional[str]:
    if index is None or index is False:
        return None
    if index is True:
        return "csi"  # --write-index writes FILE.csi, as alnsort sort does
    if index in ("bai", "csi"):
        return index
    raise ValueError(f"index must be True, False, 'bai' or 'csi', not {index!r}")


def _output_format(output: str, output_format: Optional[str]) -> str:
    if output_format is None:
        return "sam" if output.endswith(".sam") else "bam"
    fmt = output_format.lower()
    if fmt not in ("bam", "sam"):
        raise ValueError(f"output_format must be 'bam' or 'sam', not {output_format!r}")
    return fmt


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


def sort(
    inputs: Union[PathArg, Sequence[PathArg]],
    output: PathArg,
    *,
    order: str = "coordinate",
    tag: Optional[str] = None,
    unknown_reference: Optional[str] = None,
    threads: int = 1,
    max_memory: Union[str, int, None] = None,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    index: Union[bool, str, None] = False,
    no_pg: bool = False,
    partitions: Optional[int] = None,
    splits: Optional[int] = None,
    sharded: bool = False,
    address: Optional[str] = None,
    work_dir: Optional[PathArg] = None,
    max_retries: int = 3,
    task_hook: Optional[TaskHook] = None,
    argv: Optional[List[str]] = None,
    stages_module: str = STAGES,
    markdup: bool = False,
    metrics: Optional[PathArg] = None,
    markdup_options: Union[Mapping[str, Any], Sequence[str]] = (),
    decision_buckets: Optional[int] = None,
    progress: Union[bool, Callable[[str], None]] = False,
) -> Dict[str, Any]:
    """Sort ``inputs`` (one BAM path or several, sorted together into one
    output with their headers merged: the file ``alnsort sort IN1 IN2 ...``
    writes) into ``output`` on Ray and return the run's statistics.

    Order and output options mean what they mean for :func:`alnsort.sort`
    (``threads`` and ``max_memory`` are per task; each task reserves
    ``threads`` CPUs). ``index`` is ``True`` (CSI, as ``--write-index``),
    ``"bai"`` or ``"csi"``. ``partitions`` (R, reduce tasks and output parts)
    and ``splits`` (map tasks) default to :func:`default_splits`; the output
    bytes depend on both, and on nothing about the cluster. ``sharded=True``
    writes ``output`` as a directory of complete, individually indexed BAMs,
    one per partition.

    Ray: when Ray is not initialised in this process, ``ray.init(address)``
    connects to ``address`` (``"host:port"`` of a cluster's head, or
    ``"auto"``); with ``None``, to the cluster named by ``RAY_ADDRESS`` or
    started on this machine by ``ray start``, else to a new local instance;
    it disconnects at the end. ``max_retries`` is each task's retry budget
    for lost workers and nodes. ``task_hook(stage, index)``, if given, is
    called inside every map and reduce task before it works (fault-injection
    tests; ``stages_module`` names a stand-in for :mod:`alnsort.stages`
    in the driver's own tests). ``work_dir`` (on the shared filesystem; default: a new directory
    beside ``output``) holds the parts until they are assembled; it is
    removed afterwards, also on failure.

    The statistics: ``records``, ``splits``, ``partitions``, ``repairs``
    (maps run again after a wrong split guess), ``prior_reruns`` (several
    inputs: maps run again with a corrected prior), ``shuffle_bytes`` (block
    bytes put into the object store), ``wall_seconds``, ``stage_seconds``
    (time inside the stage functions, summed over tasks and the driver), and
    per phase (``phases``) the wall time, the time inside stages and, for the
    task phases, the tasks' CPU seconds (``cpu``: all threads of the task's
    process while the task function runs); the sample phase's ``tasks`` is
    0 where the driver drew the samples itself (one input, at most
    :data:`DRIVER_SAMPLE_SPLITS` splits; ``cpu`` is then the driver's).

    Duplicate marking (``markdup=True``; ``metrics`` the metrics file,
    ``markdup_options`` ``alnsort sort``'s other duplicate-marking options
    by keyword, e.g. ``{"tagging_policy": "all"}``, or as command-line
    words, ``["--tagging-policy", "all"]``) gives the records,
    flags and metrics of ``alnsort sort --markdup``. With one input the
    decision is cut into tasks, none holding the whole input: collect (per
    split, by its map as it reads the split) -> join (per name bucket) -> decide (per end bucket) -> finish
    (per split) -> assemble (one task, the decision bits and metrics);
    ``decision_buckets`` (end and name buckets; default
    :func:`default_buckets`) says into how many, and ``0`` asks for the one
    decide task over the whole input. Several coordinate-sorted inputs are
    cut into those tasks; where a library is in two of them (lanes of one
    library) each end carries its record's running maximum by htsjdk's
    coordinate comparator, which puts the records of a bucket in Picard's
    merged order. Name-grouped inputs go to the one decide task, and an
    explicit ``decision_buckets`` > 0 is refused for them, saying why. The
    statistics then hold ``markdup``: ``marked``, ``path`` (``"tasks"`` or
    ``"one task"``; then ``one_task_because`` for several inputs, and
    ``tasks_discarded`` when the tasks ran but found records they cannot
    decide as Picard does: a library in two inputs whose headers did not
    say so, two inputs' records equal in every compared field, a
    template's mates in two inputs), ``buckets`` and the tasks' byte
    counts.

    ``progress=True`` prints a line per phase (what it did, counts, time)
    on standard error; a callable gets each line instead.
    """
    import ray  # only this module needs Ray

    md = _markdup_keywords(markdup, metrics, markdup_options)
    say = _progress(progress)

    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    ins = [os.fsdecode(os.fspath(p)) for p in inputs]
    if not ins:
        raise ValueError("no input: name one or more BAM files")
    out = os.fsdecode(os.fspath(output))
    for p in ins:
        if not os.path.isfile(p):
            raise AlnsortError(f"cannot open input '{p}': no such file")
    if decision_buckets is not None:
        if not isinstance(decision_buckets, int) or isinstance(decision_buckets, bool) or decision_buckets < 0:
            raise ValueError(f"decision_buckets must be a whole number, not {decision_buckets!r}")
        if md is None:
            raise ValueError("decision_buckets= is duplicate marking's: it needs markdup=True")
    order_opts = _order_options(order, tag, unknown_reference)
    fmt = _output_format(out, output_format)
    idx = _index_kind(index)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    n_splits = splits if splits is not None else default_splits(ins)
    n_parts = wanted_parts = partitions if partitions is not None else n_splits
    if n_splits < 1 or n_parts < 1:
        raise ValueError("splits and partitions must be at least 1")
    stages = stages_module  # a module name: it travels to the tasks
    stage_mod = importlib.import_module(stages)
    run = _Run(stages, ins, order_opts, threads, max_memory, md, task_hook)
    # Several inputs: the decision is cut into tasks where that gives
    # Picard's answer (coordinate-sorted inputs whose libraries are apart),
    # else one decide task, the reason in the statistics.
    one_task_because = None
    if md is not None and len(ins) > 1 and decision_buckets != 0:
        one_task_because = stage_mod.markdup_tasks_refusal(ins, md, **run.kwargs())
        if one_task_because is not None and decision_buckets is not None:
            raise ValueError(f"decision_buckets: {one_task_because}; leave it out, or give 0")

    started_ray = False
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
        started_ray = True
    out_dir = os.path.dirname(os.path.abspath(out))
    work = (
        tempfile.mkdtemp(prefix=".alnsort-ray-", dir=os.fsdecode(os.fspath(work_dir)))
        if work_dir is not None
        else tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.alnsort-ray-", dir=out_dir)
    )
    t_start = time.perf_counter()
    phases: Dict[str, Dict[str, float]] = {}
    try:
        common = dict(max_retries=max_retries, retry_exceptions=False)
        sample_r = ray.remote(num_cpus=1, **common)(_sample_task)
        map_r = ray.remote(num_cpus=threads, **common)(_map_task)
        reduce_r = ray.remote(num_cpus=threads, **common)(_reduce_task)
        # Workers start while the driver works (a fresh worker's first task
        # waits for its process to start; the maps then find it running).
        # Nothing waits for these tasks: a failure to start shows in the
        # stages' own tasks.
        warm_r = ray.remote(num_cpus=1, max_retries=0)(_warm_task)
        warm = [warm_r.remote(stages) for _ in range(_cluster_cpus(ray))]
        decide_r = ray.remote(num_cpus=threads, **common)(_decide_task)
        md_tasks = md is not None and decision_buckets != 0 and one_task_because is None

        # 1. split (driver)
        t0 = time.perf_counter()
        split_list, secs = _timed(stage_mod.split, ins, n_splits)
        phases["split"] = {"wall": time.perf_counter() - t0, "stage": secs}
        say(f"split: {len(split_list)} splits of {len(ins)} input(s) ({time.perf_counter() - t0:.2f} s)")
        pg_argv = argv if argv is not None else _argv(
            ins, out, order_opts, level, fmt, idx, wanted_parts, n_splits, sharded, md
        )
        # --markdup: the decision reads the inputs beside the maps.
        decide_ref = None
        names = None
        if md is not None and metrics is not None:
            names = (os.fsdecode(os.fspath(metrics)), ins, out, " ".join(pg_argv))
        md_run: Optional[_MarkdupTasks] = None
        if md_tasks:
            # The decision cut into tasks: each split's share is collected
            # by its map (submit_map below; again where the map runs again).
            buckets = decision_buckets if decision_buckets is not None else default_buckets(len(split_list), n_parts)
            md_run = _MarkdupTasks(ray, common, run, buckets, say)
        elif md is not None:
            decide_ref = decide_r.remote(run, names)

        # 2. sample -> splitters
        t0 = time.perf_counter()
        per_split = max(1, math.ceil(n_parts * SAMPLES_PER_PARTITION / len(split_list)))
        # Several inputs: the reach of every split but the last of its input
        # (no map's prior needs that one).
        def needs_reach(i: int) -> bool:
            nxt = split_list[i + 1] if i + 1 < len(split_list) else None
            return len(ins) > 1 and nxt is not None and nxt["input"] == split_list[i]["input"]

        every = list(range(len(split_list)))
        if len(ins) == 1 and len(split_list) <= DRIVER_SAMPLE_SPLITS:
            # A few splits of one input: sampled here, while workers start.
            sample_tasks = 0
            samples = _sample_task(run, split_list, per_split, [needs_reach(i) for i in every])
        else:
            # One sample task per CPU of the cluster (the samples do not
            # depend on how the splits are grouped).
            groups = _groups(every, _cluster_cpus(ray))
            sample_tasks = len(groups)
            samples = [
                x
                for got in _get(
                    ray,
                    [
                        sample_r.remote(
                            run, [split_list[i] for i in g], per_split, [needs_reach(i) for i in g]
                        )
                        for g in groups
                    ],
                )
                for x in got
            ]
        priors = stage_mod.priors(split_list, [x["reach"] for x in samples])
        keys = [k for s in samples for k in s["keys"]]
        if not keys and any("error" in x for x in samples):
            raise AlnsortError(next(x["error"] for x in samples if "error" in x))
        splitters, sp_secs = _timed(stage_mod.splitters, keys, n_parts)
        splitters = list(splitters)
        # Fewer splitters when the samples have too few distinct points.
        n_parts = len(splitters) + 1
        phases["sample"] = {
            "wall": time.perf_counter() - t0,
            "stage": sum(x["seconds"] for x in samples) + sp_secs,
            "cpu": sum(x.get("cpu", 0.0) for x in samples),
            "tasks": sample_tasks,
        }
        say(f"sample: {len(keys)} keys, {n_parts} partitions ({phases['sample']['wall']:.2f} s)")

        # 3. map
        t0 = time.perf_counter()
        splitters_ref = ray.put(splitters)

        def submit_map(i: int, split: Dict[str, Any]) -> list:
            if md_run is None:
                return map_r.options(num_returns=n_parts + 1).remote(run, i, split, splitters_ref, priors[i])
            # The map collects the split's share of the decision too (one
            # read of the split); its blocks are the first n_parts returns
            # after the meta.
            got = map_r.options(num_returns=n_parts + 1 + md_run.map_returns()).remote(
                run, i, split, splitters_ref, priors[i], md_run.buckets
            )
            md_run.from_map(i, got, n_parts)
            return got[: n_parts + 1]

        refs = [submit_map(i, s) for i, s in enumerate(split_list)]

        def outcome(i: int) -> Any:
            try:
                return _get(ray, refs[i][0])
            except AlnsortError as e:
                return e

        # 4. check each map's proven end against the next split's start; a
        # map of a wrongly guessed split may have failed: its failure is held
        # until the previous map's end shows whether the guess was wrong.
        repairs = 0
        metas: List[Dict[str, Any]] = []
        for i in range(len(split_list)):
            got = outcome(i)
            if i > 0 and split_list[i - 1]["input"] == split_list[i]["input"]:
                pair = split_list[i - 1 : i + 1]  # the same dicts: repair edits them
                if stage_mod.repair(pair, [metas[i - 1]["end"], None]):
                    repairs += 1
                    refs[i] = submit_map(i, split_list[i])
                    got = outcome(i)
            if isinstance(got, Exception):
                raise got
            metas.append(got)
        # Several inputs: the maps' own reaches are exact (a split repaired
        # above had its reach taken from the wrong start); a map that ran
        # with another prior runs again with the right one.
        exact = stage_mod.priors(split_list, [m["reach"] for m in metas])
        rerun = [i for i, p in enumerate(exact) if p != priors[i]]
        for i in rerun:
            priors[i] = exact[i]
            refs[i] = submit_map(i, split_list[i])
        for i in rerun:
            got = outcome(i)
            if isinstance(got, Exception):
                raise got
            metas[i] = got
        records = sum(m["records"] for m in metas)
        phases["map"] = {
            "wall": time.perf_counter() - t0,
            "stage": sum(m["seconds"] for m in metas),
            "cpu": sum(m.get("cpu", 0.0) for m in metas),
        }
        say(
            f"map: {len(metas)} splits, {records} records, {sum(m['bytes'] for m in metas) / 1e6:.1f} MB of blocks"
            f" ({phases['map']['wall']:.2f} s; {repairs} repaired)"
        )

        # 5. reduce
        t0 = time.perf_counter()
        parts = [os.path.join(work, f"part-{r:06d}.bgzf") for r in range(n_parts)]
        options: Dict[str, Any] = {"output_format": fmt, "index": idx, "threads": threads}
        if level is not None:
            options["level"] = level
        marks_ref = decisions_ref = None
        slices: Optional[List[list]] = None
        decided: Dict[str, Any] = {}
        if md_run is not None:
            # collect -> join -> decide -> finish -> assemble
            decided, decisions_ref, slices = md_run.decide(
                split_list, [m["records"] for m in metas], names, phases, n_parts
            )
            if not decided:
                # Several inputs whose records the tasks cannot decide as
                # Picard does (md_run.stats says why): one decide task.
                decide_ref = decide_r.remote(run, names)
        if decide_ref is not None:
            t1 = time.perf_counter()
            decided = _get(ray, decide_ref)
            phases["decide"] = {
                "wall_waited": time.perf_counter() - t1, "stage": decided["seconds"], "cpu": decided["cpu"],
            }
            decisions_ref = ray.put(decided["decisions"])
            say(f"decide: one task over {len(ins)} input(s), {sum(decided['records'])} records "
                f"(waited {phases['decide']['wall_waited']:.2f} s)")
        if slices is not None:
            # Each reduce receives its range's slice of every split's outcome.
            marks_ref, decisions_ref = ray.put((md, None, len(split_list))), None
        elif decisions_ref is not None:
            bases = stage_mod.markdup_split_bases(
                [m["records"] for m in metas], [s["input"] for s in split_list], decided["records"]
            )
            marks_ref = ray.put((md, bases, 0))
        reduced = _get(
            ray,
            [
                reduce_r.remote(
                    run, r, parts[r], n_parts, options, marks_ref, decisions_ref,
                    *(slices[r] if slices is not None else []), *[ref[1 + r] for ref in refs],
                )
                for r in range(n_parts)
            ]
        )
        del refs, warm  # the blocks are no longer needed: let Ray free them
        phases["reduce"] = {
            "wall": time.perf_counter() - t0,
            "stage": sum(x["seconds"] for x in reduced),
            "cpu": sum(x.get("cpu", 0.0) for x in reduced),
        }
        out_records = sum(x["records"] for x in reduced)
        if out_records != records:
            raise AlnsortError(f"reduce wrote {out_records} records; the maps read {records}")
        marked = sum(x.get("marked", 0) for x in reduced)
        say(
            f"reduce: {n_parts} parts, {out_records} records"
            + (f", {marked} duplicates" if md is not None else "")
            + f" ({phases['reduce']['wall']:.2f} s)"
        )

        # 6. assemble (driver)
        t0 = time.perf_counter()
        asm_kwargs: Dict[str, Any] = {
            **order_opts,
            **({"level": level} if level is not None else {}),
            "output_format": fmt,
            "index": idx,
            "no_pg": no_pg,
            "argv": pg_argv,
        }
        if sharded:
            asm_kwargs["sharded"] = True
        assembled, secs = _timed(stage_mod.assemble, ins, parts, out, **asm_kwargs)
        phases["assemble"] = {"wall": time.perf_counter() - t0, "stage": secs}
        if md is not None:
            _write_metrics(metrics, decided.get("metrics"))
        wall = time.perf_counter() - t_start
        say(f"assemble: {n_parts} parts into {out} ({phases['assemble']['wall']:.2f} s; {wall:.2f} s in all)")
        stage_secs = sum(p["stage"] for p in phases.values())
        return {
            "records": records,
            "splits": len(split_list),
            "partitions": n_parts,
            "repairs": repairs,
            "prior_reruns": len(rerun),
            "shuffle_bytes": sum(m["bytes"] for m in metas),
            "output_bytes": sum(x["bytes"] for x in reduced),
            "wall_seconds": wall,
            "stage_seconds": stage_secs,
            "cluster_cpus": _cluster_cpus(ray),
            "phases": phases,
            "assemble": assembled,
            **({"markdup": _markdup_stats(marked, md_run, one_task_because)} if md is not None else {}),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if started_ray:
            ray.shutdown()


def _argv(
    ins: List[str],
    out: str,
    order: Dict[str, Any],
    level: Optional[int],
    fmt: str,
    idx: Optional[str],
    parts: int,
    splits: int,
    sharded: bool,
    markdup: Optional[Dict[str, Any]] = None,
) -> List[str]:
    """The command line for the @PG line of a run started from Python."""
    argv = ["python", "-m", "alnsort.ray", "sort"] + ORDERS[order["order"]]
    if "tag" in order:
        argv += ["-t", order["tag"]]
    if level is not None:
        argv += ["-l", str(level)]
    argv += ["-O", fmt]
    if idx is not None:
        argv.append("--write-index")
    argv += ["--partitions", str(parts), "--splits", str(splits)]
    if sharded:
        argv.append("--sharded")
    if markdup is not None:
        argv += sort_options(**markdup)
    return argv + ["-o", out] + ins


# ---- duplicate marking (--markdup) -------------------------------------------


def _decide_task(run: _Run, metrics: Optional[tuple]) -> Dict[str, Any]:
    """The duplicate decision of one node over all inputs (it reads them
    beside the maps); its bytes go to every reduce."""
    out, secs, cpu = run.call("markdup_decide", run.inputs, run.markdup, metrics=metrics, **run.kwargs())
    return dict(out, seconds=secs, cpu=cpu)


def _buffers(blocks: List[bytes]) -> List[pickle.PickleBuffer]:
    """Blocks a task returns out of band (one copy, straight into the
    object store, read there in place by the next task)."""
    return [pickle.PickleBuffer(b) for b in blocks]


#: Object references the decision's tasks may give the driver to hold:
#: each split's collect returns two blocks per bucket and each bucket's
#: decide two lists per split, so about 4 x splits x buckets (the same
#: bound docs/cluster.md gives for the maps' splits x partitions blocks).
DECISION_OBJECTS = 100_000


def default_buckets(splits: int, partitions: int) -> int:
    """End and name buckets of the duplicate decision when none are given:
    as many as splits or partitions, whichever is more (a bucket then
    holds about one split's share of the ends), but no more than keep the
    decision's objects within :data:`DECISION_OBJECTS`. The decision does
    not depend on the buckets, only the tasks' sizes do."""
    cap = max(1, DECISION_OBJECTS // (4 * max(1, splits)))
    return max(1, min(max(splits, partitions), cap))


def _collect_task(run: _Run, index: int, split: Dict[str, Any], buckets: int) -> tuple:
    """A split's share of the decision: (meta, fragment ends by end
    bucket..., mate halves by name bucket..., slots, each record's range:
    empty, only a map knows its ranges)."""
    out, secs, cpu = run.call(
        "markdup_collect", run.inputs, split, run.markdup, buckets, buckets, task=("collect", index), **run.kwargs()
    )
    meta = dict(_share_meta(out), seconds=secs, cpu=cpu)
    return (meta, *_share_buffers(out))


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


def _join_task(
    run: _Run,
    index: int,
    boundaries: List[Dict[str, Any]],
    splits: List[Dict[str, Any]],
    buckets: int,
    *halves: bytes,
) -> tuple:
    """One name bucket's halves from every split paired, within the task's
    duplicate-marking budget (beyond it spilled under the task's
    temporary directory): (meta, pair ends by end bucket...)."""
    out, secs, cpu = run.call(
        "markdup_join", list(halves), boundaries, buckets, run.markdup, task=("join", index),
        inputs=run.inputs, splits=splits, tmp_dir=tempfile.gettempdir(), **run.kwargs(),
    )
    meta = {
        "bytes": sum(len(b) for b in out["ends"]), "runs": out["runs"], "seconds": secs, "cpu": cpu,
        "one_task_because": out.get("one_task_because"),
    }
    return (meta, *_buffers(out["ends"]))


def _decide_bucket_task(
    run: _Run, index: int, boundaries: List[Dict[str, Any]], splits: int, *blocks: bytes
) -> tuple:
    """One end bucket's duplicate sets: (meta with the bucket's counts,
    duplicate lists by split..., optical lists by split...)."""
    out, secs, cpu = run.call(
        "markdup_decide_bucket", run.inputs, list(blocks), boundaries, run.markdup, splits, task=("decide", index),
        tmp_dir=tempfile.gettempdir(), **run.kwargs(),
    )
    meta = {
        "counts": out["counts"],
        "ends_bytes": sum(len(b) for b in blocks),
        "listed": sum(len(b) for b in out["duplicates"]) // 8,
        "seconds": secs,
        "cpu": cpu,
        "one_task_because": out.get("one_task_because"),
    }
    return (meta, *_buffers([*out["duplicates"], *out["optical"]]))


def _finish_task(
    run: _Run,
    index: int,
    continued: bool,
    carry: Optional[Dict[str, Any]],
    buckets: int,
    partitions: int,
    slots: bytes,
    ranges: bytes,
    *lists: bytes,
) -> tuple:
    """Picard's output walk over one split: (meta with its counts and
    carry, duplicate bits, optical bits or None, its slice for each of
    ``partitions`` reduces...: none without ``ranges``)."""
    out, secs, cpu = run.call(
        "markdup_finish", slots, continued, list(lists[:buckets]), list(lists[buckets:]), carry,
        task=("finish", index), ranges=ranges if partitions else None, partitions=partitions,
    )
    meta = {
        "records": out["records"],
        "counts": out["counts"],
        "carry": out["carry"],
        "repeated": out["repeated"],
        "optical": out["optical"] is not None,
        "slices_bytes": [len(x) for x in out["slices"]],
        "seconds": secs,
        "cpu": cpu,
    }
    if partitions:
        # The reduces take the slices; the split's bits go nowhere.
        return (meta, None, None, *_buffers(out["slices"]))
    opt = None if out["optical"] is None else pickle.PickleBuffer(out["optical"])
    return (meta, pickle.PickleBuffer(out["duplicate"]), opt, *_buffers(out["slices"]))


def _assemble_decision_task(
    run: _Run,
    metrics: Optional[tuple],
    finished: List[Dict[str, Any]],
    bucket_counts: List[Dict[str, Any]],
    *bits: Any,
) -> tuple:
    """The decision bits (for the reduces) and metrics from the splits'
    walks and the buckets' counts: (meta, decisions); with no ``bits``
    (the reduces take their ranges' slices) the metrics alone, from the
    walks' counts: (meta, None)."""
    if not bits:
        out, secs, cpu = run.call(
            "markdup_metrics", run.inputs, run.markdup, finished, bucket_counts, metrics=metrics, **run.kwargs()
        )
        return ({"records": out["records"], "metrics": out["metrics"], "seconds": secs, "cpu": cpu}, None)
    n = len(finished)
    outcomes = [
        {"duplicate": bits[s], "optical": bits[n + s], "records": f["records"], "counts": f["counts"]}
        for s, f in enumerate(finished)
    ]
    out, secs, cpu = run.call(
        "markdup_assemble", run.inputs, run.markdup, outcomes, bucket_counts, metrics=metrics, **run.kwargs()
    )
    meta = {"records": out["records"], "metrics": out["metrics"], "seconds": secs, "cpu": cpu}
    return (meta, pickle.PickleBuffer(out["decisions"]))


class _MarkdupTasks:
    """The duplicate decision of one input (or of several coordinate-sorted
    inputs whose libraries are apart: each input's walk starts afresh, and
    the walks are checked by ``markdup_walk_refusal``) cut into Ray tasks, none of
    which holds the whole input (``alnsort.stages.markdup_*``): collect per
    split (by each map, :meth:`from_map`; or a task of its own,
    :meth:`collect`), then, once the maps have proven the
    splits, join per name bucket, decide per end bucket, finish per split
    (a split whose predecessor's walk ended in another state than the one
    assumed is finished again with it: rare), and one task that assembles
    the decision bits and metrics."""

    def __init__(
        self, ray: Any, common: Dict[str, Any], run: _Run, buckets: int, say: Callable[[str], None]
    ):
        self.ray, self.run = ray, run
        threads = run.threads
        self.buckets = max(1, buckets)
        self.say = say
        self.collect_r = ray.remote(num_cpus=threads, **common)(_collect_task)
        self.join_r = ray.remote(num_cpus=1, **common)(_join_task)
        self.decide_r = ray.remote(num_cpus=threads, **common)(_decide_bucket_task)
        self.finish_r = ray.remote(num_cpus=1, **common)(_finish_task)
        self.assemble_r = ray.remote(num_cpus=1, **common)(_assemble_decision_task)
        self.collected: Dict[int, list] = {}
        self.stats: Dict[str, Any] = {"path": "tasks", "buckets": self.buckets}

    def collect(self, i: int, split: Dict[str, Any]) -> None:
        """Submits split ``i``'s collect as a task of its own (a driver
        whose maps do not collect: :meth:`from_map` is the usual way)."""
        b = self.buckets
        self.collected[i] = self.collect_r.options(num_returns=3 + 2 * b).remote(self.run, i, split, b)

    def map_returns(self) -> int:
        """The references a collecting map returns beyond its meta and
        blocks (:func:`_map_task` with ``buckets``)."""
        return 2 * self.buckets + 2

    def from_map(self, i: int, refs: list, partitions: int) -> None:
        """Split ``i``'s share from its map's references (the map ran with
        ``buckets``; again after a repair)."""
        self.collected[i] = [refs[0], *refs[1 + partitions :]]

    def decide(
        self,
        splits: List[Dict[str, Any]],
        map_records: List[int],
        metrics: Optional[tuple],
        phases: Dict[str, Dict[str, float]],
        partitions: int,
    ) -> "tuple[Dict[str, Any], Any, Optional[List[list]]]":
        """Runs the decision's tasks after the maps; returns the decision's
        summary (``records``, ``metrics``; empty when the walks of several
        inputs are not Picard's), and either, when the maps gave each
        record's range, each range's slices (one reference per split: what
        that range's reduce receives; no whole decision is built), or the
        reference of the whole decision's bytes."""
        ray, b, n = self.ray, self.buckets, len(splits)
        cols = [self.collected[i] for i in range(n)]
        t0 = time.perf_counter()
        # A collecting map's meta holds the share's under "collect".
        metas = [m.get("collect", m) for m in _get(ray, [c[0] for c in cols])]
        for i, (m, r) in enumerate(zip(metas, map_records)):
            if m["records"] != r:
                raise AlnsortError(
                    f"split {i}: duplicate marking collected {m['records']} records, its map read {r}: "
                    "an input changed during the run"
                )
        bounds = [m["boundary"] for m in metas]
        continued = _stages(self.run.stages).markdup_continued(bounds)
        self._phase(phases, "collect", t0, metas)
        self.say(
            f"collect: {n} splits, {sum(m['records'] for m in metas)} records, "
            f"{sum(m['ends_bytes'] for m in metas) / 1e6:.1f} MB of fragment ends, "
            f"{sum(m['halves_bytes'] for m in metas) / 1e6:.1f} MB of mate halves, "
            f"{sum(c is not None for c in continued)} templates across split boundaries "
            f"({phases['collect']['wall_waited']:.2f} s after the maps)"
        )

        t0 = time.perf_counter()
        joins = [
            self.join_r.options(num_returns=1 + b).remote(
                self.run, j, bounds, splits, b, *[c[1 + b + j] for c in cols]
            )
            for j in range(b)
        ]
        decides = [
            self.decide_r.options(num_returns=1 + 2 * n).remote(
                self.run, e, bounds, n, *[c[1 + e] for c in cols], *[j[1 + e] for j in joins]
            )
            for e in range(b)
        ]

        # The maps gave each record's range (a collect task gives none): each
        # finish cuts its split's outcome into one slice per reduce.
        sliced = partitions if all(m.get("ranges", False) for m in metas) else 0

        def finish(s: int, carry: Optional[Dict[str, Any]]) -> list:
            return self.finish_r.options(num_returns=3 + sliced).remote(
                self.run, s, continued[s] is not None, carry, b, sliced, cols[s][1 + 2 * b], cols[s][2 + 2 * b],
                *[d[1 + s] for d in decides], *[d[1 + n + s] for d in decides],
            )

        # Every split finished with the start's carry, submitted with the
        # joins and decides (the driver waits below only to report them).
        fins = [finish(s, None) for s in range(n)]
        join_metas = _get(ray, [j[0] for j in joins])
        self._phase(phases, "join", t0, join_metas)
        self.say(
            f"join: {b} name buckets, {sum(m['bytes'] for m in join_metas) / 1e6:.1f} MB of pair ends "
            f"({phases['join']['wall_waited']:.2f} s)"
        )
        t0 = time.perf_counter()
        dec_metas = _get(ray, [d[0] for d in decides])
        self._phase(phases, "decide", t0, dec_metas)
        self.say(
            f"decide: {b} end buckets, {sum(m['ends_bytes'] for m in dec_metas) / 1e6:.1f} MB of ends, "
            f"{sum(m['listed'] for m in dec_metas)} duplicates listed ({phases['decide']['wall_waited']:.2f} s)"
        )
        # Records of several inputs the tasks could not put in Picard's
        # merged order (mates in two inputs, two inputs' equal records).
        why = next((m["one_task_because"] for m in [*join_metas, *dec_metas] if m.get("one_task_because")), None)
        if why is not None:
            self.stats.update({"path": "one task", "one_task_because": why, "tasks_discarded": True})
            self.say(f"decide: {why}: the decision goes to one task")
            return {}, None, None
        t0 = time.perf_counter()
        fin_metas = _get(ray, [f[0] for f in fins])
        again = 0
        start = _stages(self.run.stages).START_CARRY
        for s in range(1, n):
            carry = fin_metas[s - 1]["carry"]
            if splits[s]["input"] != splits[s - 1]["input"]:
                continue  # several inputs: each input's walk starts afresh
            if carry != start:
                # Picard's walk ended split s - 1 in a state the default
                # finish of split s did not assume: finish it again.
                fins[s] = finish(s, carry)
                fin_metas[s] = _get(ray, fins[s][0])
                again += 1
        self._phase(phases, "finish", t0, fin_metas)
        split_inputs = [sp["input"] for sp in splits]
        if len(self.run.inputs) > 1:
            why = _stages(self.run.stages).markdup_walk_refusal(self.run.inputs, split_inputs, fin_metas)
            if why is not None:
                self.stats.update({"path": "one task", "one_task_because": why, "tasks_discarded": True})
                self.say(f"finish: {why}: the decision goes to one task")
                return {}, None, None
        t0 = time.perf_counter()
        # Reduces that take their ranges' slices need only the metrics; the
        # one-task reduces the whole decision, joined from the splits' bits.
        bits = [] if sliced else [*[f[1] for f in fins], *[f[2] for f in fins]]
        asm = self.assemble_r.options(num_returns=2).remote(
            self.run, metrics, fin_metas, [m["counts"] for m in dec_metas], *bits,
        )
        decided = _get(ray, asm[0])
        if len(self.run.inputs) > 1:
            # The records per input, for the reduces' split bases (the
            # collect of each split counted the map's records, above).
            per_input = [0] * len(self.run.inputs)
            for i, m in zip(split_inputs, metas):
                per_input[i] += m["records"]
            decided = dict(decided, records=per_input)
        phases["finish"]["again"] = again
        self._phase(phases, "assemble_decision", t0, [decided])
        self.say(
            f"finish: {n} splits ({again} finished again), decision assembled "
            f"({phases['finish']['wall_waited'] + phases['assemble_decision']['wall_waited']:.2f} s)"
        )
        self.stats.update(
            {
                "fragment_ends_bytes": sum(m["ends_bytes"] for m in metas),
                "mate_halves_bytes": sum(m["halves_bytes"] for m in metas),
                "slots_bytes": sum(m["slots_bytes"] for m in metas),
                "pair_ends_bytes": sum(m["bytes"] for m in join_metas),
                # Sorted runs the joins spilled beyond their budget (0: every
                # join's halves fitted).
                "join_runs": sum(m["runs"] for m in join_metas),
                "largest_bucket_bytes": max(m["ends_bytes"] for m in dec_metas),
                "templates_across_splits": sum(c is not None for c in continued),
                "finished_again": again,
                # What the reduce receiving the most of the decision receives
                # (the whole decision's bytes when the reduces are not sliced).
                "largest_reduce_decision_bytes": (
                    max(sum(m["slices_bytes"][r] for m in fin_metas) for r in range(sliced))
                    if sliced
                    else None
                ),
            }
        )
        if sliced:
            return decided, None, [[f[3 + r] for f in fins] for r in range(sliced)]
        return decided, asm[1], None

    @staticmethod
    def _phase(phases: Dict[str, Dict[str, float]], name: str, t0: float, metas: List[Dict[str, Any]]) -> None:
        """A phase of the decision: the driver's wait for it (its tasks ran
        beside earlier phases), the time inside the stages, the tasks' CPU."""
        phases[name] = {
            "wall_waited": time.perf_counter() - t0,
            "stage": sum(m["seconds"] for m in metas),
            "cpu": sum(m.get("cpu", 0.0) for m in metas),
            "tasks": len(metas),
        }


def _markdup_stats(marked: int, tasks: Optional[_MarkdupTasks], one_task_because: Optional[str]) -> Dict[str, Any]:
    if tasks is not None:
        return {"marked": marked, **tasks.stats}
    return {"marked": marked, "path": "one task", **({"one_task_because": one_task_because} if one_task_because else {})}


def _progress(progress: Union[bool, Callable[[str], None]]) -> Callable[[str], None]:
    """Where the driver's progress lines go: standard error with
    ``True``, a callable's argument, or nowhere."""
    if callable(progress):
        return progress
    if not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or a callable, not {progress!r}")
    if not progress:
        return lambda line: None
    return lambda line: print(f"[alnsort.ray] {line}", file=sys.stderr, flush=True)


# alnsort sort's duplicate-marking options taken by the driver, from the
# engine's table (its group "Duplicate marking"): (option, takes a value).
# --markdup and --metrics are sort()'s own keywords.
MARKDUP_OPTIONS = tuple(
    (name, value is not None)
    for _, name, value in _alnsort.markdup_options()
    if name not in ("--markdup", "--metrics")
)


def _markdup_keywords(
    markdup: bool, metrics: Optional[PathArg], options: Union[Mapping[str, Any], Sequence[str]]
) -> Optional[Dict[str, Any]]:
    """The duplicate-marking keywords the stages take (``markdup`` of
    :mod:`alnsort.stages`), or None without ``markdup``; the options
    themselves are checked by the engine."""
    if not isinstance(markdup, bool):
        raise ValueError(f"markdup must be True or False, not {markdup!r}")
    if not markdup:
        if metrics is not None or options:
            raise ValueError("metrics= and markdup_options= are duplicate marking's: they need markdup=True")
        return None
    if isinstance(options, Mapping):
        return {"markdup": True, **options}
    if isinstance(options, str):
        raise ValueError("markdup_options must be keywords or a list of words, e.g. ['--tagging-policy', 'all']")
    from .stages import markdup_keywords

    return {"markdup": True, **markdup_keywords(options)}


def _write_metrics(path: Optional[PathArg], text: Optional[str]) -> None:
    """The metrics file, written whole under a temporary name and renamed."""
    if path is None:
        return
    if text is None:
        raise AlnsortError("internal error: the duplicate decision returned no metrics")
    dest = os.fsdecode(os.fspath(path))
    tmp = f"{dest}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _progress_given(a: Dict[str, Any]) -> bool:
    """Whether the command line asks for progress lines (``--progress``;
    the last of ``--progress``/``--no-progress`` counts)."""
    on = False
    for name, _ in a["given_values"]:
        if name in ("--progress", "--no-progress"):
            on = name == "--progress"
    return on


def _markdup_kwargs(a: Dict[str, Any]) -> Dict[str, Any]:
    """``sort()``'s duplicate-marking keywords from the options of the
    command line (checked by ``alnsort sort``'s parser, which also refuses
    the group's options without ``--markdup``)."""
    markdup, metrics, opts = False, None, {}
    names = {opt for opt, _ in MARKDUP_OPTIONS}
    keyword = {name: key for key, (name, _, _) in option_keywords("sort").items()}
    for name, value in a["given_values"]:
        if name == "--markdup":
            markdup = True
        elif name == "--metrics":
            metrics = value
        elif name in names:
            opts[keyword[name]] = True if value is None else value
    if not markdup:
        return {}
    return {"markdup": True, "metrics": metrics, "markdup_options": opts}


# ---- python -m alnsort.ray ----------------------------------------------------


#: The Ray driver's own options, read beside ``alnsort sort``'s (by the
#: same parser: ``--NAME VALUE``, ``--NAME=VALUE`` or a unique prefix), as
#: (name, value name or None, help).
RAY_OPTIONS = (
    ("partitions", "R", "reduce tasks = output parts [input size / 64 MiB]"),
    ("splits", "S", "map tasks [input size / 64 MiB]"),
    ("sharded", None, "write -o as a directory of indexed BAMs, one per partition"),
    ("index-format", "bai|csi", "the kind of --write-index's index [csi; a ##idx## name ending .bai: bai]"),
    ("address", "ADDR", "Ray cluster address (HOST:PORT of the head, or 'auto'); default: RAY_ADDRESS, "
     "a cluster started here by `ray start`, else a new local Ray"),
    ("work-dir", "DIR", "shared directory for the parts [beside the output]"),
    ("max-retries", "N", "retries per task after a lost worker or node [3]"),
    ("decision-buckets", "B", "with --markdup: the duplicate decision's end and name buckets "
     "(join and decide tasks) [max(splits, partitions), at most 25000 / splits]; 0: one decide task over "
     "the whole input (several inputs grouped by name always)"),
    ("stats", None, "print the run's statistics as JSON on stdout"),
)

#: ``alnsort sort``'s options (named as its messages name them) that the Ray
#: driver honours; every other option of its table is refused by name
#: (:data:`REFUSED` says why), never ignored.
HONOURED = frozenset(
    {
        "-n", "-N", "-t", "--template-coordinate", "-M",  # order
        "-o", "-O", "--output-fmt-option", "-l", "-u", "--write-index", "--no-PG",  # output
        "-@", "-m", "--max-memory", "--unknown-reference",  # tasks
        "--progress", "--no-progress",  # a line per phase on standard error
        "-h", "--version",  # -h, --help
        "--markdup", "--metrics",  # duplicate marking, and the options of MARKDUP_OPTIONS
    }
    | {opt for opt, _ in MARKDUP_OPTIONS}
)

#: Why an option of ``alnsort sort`` that the Ray driver does not honour is
#: refused (options alnsort refuses itself keep alnsort's message).
REFUSED = {
    "-I": "minimiser index options are not passed to the map tasks yet",
    "-K": "minimiser options are not passed to the map tasks yet",
    "-w": "minimiser options are not passed to the map tasks yet",
    "-R": "minimiser options are not passed to the map tasks yet",
    "-H": "minimiser options are not passed to the map tasks yet",
    "-T": "the tasks' temporary files go under --work-dir",
    "--reference": "CRAM input and output are not supported by the Ray driver yet",
    "--progress-interval": "the Ray driver prints a line per phase (--progress), not at intervals",
    "--stats-json": "the Ray driver reports its statistics with --stats",
    "--verbosity": "the Ray driver has no verbosity levels",
}
#: An option of the table that is neither honoured nor in :data:`REFUSED`
#: (one added to ``alnsort sort`` later) is refused with this reason.
REFUSED_OTHER = "not supported by the Ray driver yet"

PROG = "python -m alnsort.ray"


def _why_refused(name: str) -> str:
    return REFUSED.get(name, REFUSED_OTHER)


def help_text() -> str:
    """``python -m alnsort.ray --help``: the Ray driver's own options, then
    every option of ``alnsort sort`` (the same table and help), then those
    the driver refuses."""
    lines = [
        f"Usage: {PROG} sort [options] -o OUT.bam IN.bam [IN2.bam ...]",
        "",
        "Sorts BAM files on a Ray cluster into the file `alnsort sort` writes (several",
        "inputs are sorted together, their headers merged, as by alnsort sort IN1 IN2).",
        "The command line is read by alnsort sort's own parser: its options below mean",
        "what they mean there (-@ and -m per task, each task reserving -@ CPUs; -m is",
        "taken as the task's --max-memory, -m x -@), plus the Ray driver's own.",
        "",
        "Ray driver options:",
    ]
    for name, value, text in RAY_OPTIONS:
        left = f"    --{name}" + (f" {value}" if value else "")
        lines += textwrap.wrap(text, 80, initial_indent=f"{left:<27}", subsequent_indent=" " * 27)
    lines += ["", "alnsort sort's options:", ""]
    lines.append(_alnsort.sort_help().rstrip("\n"))
    lines += ["", "Refused by the Ray driver (each named when used):"]
    for name, synopsis, group in _alnsort.sort_option_table():
        if name in HONOURED or group == "unsupported":
            continue
        left = f"  {synopsis:<25}"
        if len(left) > 27:
            lines.append(left.rstrip())
            left = " " * 27
        lines += textwrap.wrap(_why_refused(name), 80, initial_indent=left, subsequent_indent=" " * 27)
    lines += [
        "  CRAM input or output     the distributed stages read BAM and write BAM or SAM",
        "  standard input, output   name the input files and -o FILE",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: List[str]) -> Dict[str, Any]:
    """Reads ``python -m alnsort.ray sort``'s arguments (after ``sort``)
    with ``alnsort sort``'s parser and option table (the binding's
    :func:`alnsort._alnsort.parse_sort_args`), refuses by name what the
    driver cannot honour, and returns the resolved options with the Ray
    driver's own under ``"ray"``. Raises :class:`AlnsortError` with the
    message ``alnsort sort`` would print, or naming the refused option."""
    extras = [(name, value is not None) for name, value, _ in RAY_OPTIONS]

    def refuse(given: List[str]) -> None:
        for name in given:
            if name not in HONOURED:
                raise AlnsortError(f"{name} is not supported by the Ray driver: {_why_refused(name)}")

    a = _alnsort.parse_sort_args(PROG, list(argv), extras, refuse)
    ray: Dict[str, Any] = {"max-retries": 3}
    for name, value in a["extra"]:
        if name in ("partitions", "splits", "max-retries", "decision-buckets"):
            try:
                ray[name] = int(value)
            except ValueError:
                raise AlnsortError(f"--{name} {value}: expected a whole number") from None
        elif name == "index-format":
            if value not in ("bai", "csi"):
                raise AlnsortError(f"--index-format {value}: expected 'bai' or 'csi'")
            ray[name] = value
        else:
            ray[name] = True if value is None else value
    a["ray"] = ray
    if a["action"] != "run":
        return a
    if "decision-buckets" in ray:
        if not _markdup_kwargs(a):
            raise AlnsortError("--decision-buckets is duplicate marking's: it needs --markdup")
        if ray["decision-buckets"] < 0:
            raise AlnsortError(f"--decision-buckets {ray['decision-buckets']}: expected a whole number")
    if not a["inputs"] or "-" in a["inputs"]:
        raise AlnsortError("the Ray driver reads files: name the input BAM files (not standard input)")
    if a["output"] is None:
        raise AlnsortError("the Ray driver writes a file: name it with -o FILE (not standard output)")
    if a["format"] == "cram":
        raise AlnsortError(
            "CRAM output is not supported by the Ray driver yet (the distributed stages write BAM or SAM): "
            "sort to BAM, or use alnsort sort"
        )
    if a["format"] == "sam.gz":
        raise AlnsortError("BGZF-compressed SAM output is not supported by the Ray driver yet: write BAM or SAM")
    for p in a["inputs"]:
        try:
            with open(p, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise AlnsortError(f"cannot open input {p}: {e.strerror or e}") from None
        if magic == b"CRAM":
            raise AlnsortError(
                f"{p}: CRAM input is not supported by the Ray driver yet (the distributed stages read BAM): "
                "convert it first, or use alnsort sort"
            )
    if a["index"] is not None:
        kind, path = a["index"]
        if "index-format" in ray and not any("##idx##" in x for x in argv):
            # --index-format names the kind when no ##idx## name does.
            kind = ray["index-format"]
            path = a["output"] + "." + kind
        if ray.get("sharded") and path != a["output"] + "." + kind:
            raise AlnsortError("--sharded indexes each shard beside it: an index name (##idx##) cannot be honoured")
        a["index"] = (kind, path)
    return a


def main(argv: Optional[List[str]] = None) -> int:
    import json

    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] in ("--help", "-h", "help"):
        sys.stdout.write(help_text())
        return 0
    if not args_in or args_in[0] != "sort":
        print(f"usage: {PROG} sort [options] -o OUT.bam IN.bam...", file=sys.stderr)
        print(f"Try '{PROG} --help' for the options.", file=sys.stderr)
        return 2
    try:
        a = parse_args(args_in[1:])
    except AlnsortError as e:
        print(f"alnsort.ray sort: {e}", file=sys.stderr)
        print(f"Try '{PROG} --help' for the options.", file=sys.stderr)
        return 1
    if a["action"] == "help":
        sys.stdout.write(help_text())
        return 0
    if a["action"] == "version":
        from . import __version__

        print(f"alnsort {__version__}")
        return 0
    for w in a["warnings"]:
        print(f"[W::alnsort] {w}", file=sys.stderr)
    ray = a["ray"]
    threads = max(1, a["threads"])
    max_memory = a["max_memory"]
    if max_memory is None and a["mem_per_thread"] is not None:
        max_memory = str(a["mem_per_thread"] * threads)
    out = a["output"]
    index = a["index"]
    try:
        stats = sort(
            a["inputs"],
            out,
            order=a["order"],
            tag=a["tag"],
            unknown_reference=a["unknown_reference"],
            threads=threads,
            max_memory=max_memory,
            level=a["level"],
            output_format=a["format"],
            index=index[0] if index is not None else False,
            no_pg=a["no_pg"],
            partitions=ray.get("partitions"),
            splits=ray.get("splits"),
            sharded=bool(ray.get("sharded")),
            address=ray.get("address"),
            work_dir=ray.get("work-dir"),
            max_retries=ray["max-retries"],
            argv=["python", "-m", "alnsort.ray"] + args_in,
            decision_buckets=ray.get("decision-buckets"),
            progress=_progress_given(a),
            **_markdup_kwargs(a),
        )
        if index is not None and not ray.get("sharded"):
            # The stages write OUTPUT.bai or OUTPUT.csi; a ##idx## name moves it.
            written = f"{out}.{index[0]}"
            if os.path.abspath(written) != os.path.abspath(index[1]):
                os.replace(written, index[1])
    except (AlnsortError, OSError, ValueError) as e:
        print(f"alnsort.ray sort: {e}", file=sys.stderr)
        return 1
    if ray.get("stats"):
        print(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
