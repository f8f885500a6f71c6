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

The package: :func:`sort` here (its arguments checked, Ray started, the
phases run, the work directory removed), the phases in :mod:`.driver`, the
tasks in :mod:`.tasks`, duplicate marking's tasks in :mod:`.markdup`, the
checks of ``sort()``'s arguments in :mod:`.options` and the command line in
:mod:`.cli`; their names are importable from here as they were from the one
module it was.
"""

from __future__ import annotations

import importlib
import math
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .. import AlnsortError

# The names of the modules below, importable from alnsort.ray (the tests
# use some of the private ones).
from .cli import (
    HONOURED,
    MARKDUP_OPTIONS,
    PROG,
    RAY_OPTIONS,
    REFUSED,
    REFUSED_OTHER,
    _markdup_kwargs,
    _progress_given,
    _why_refused,
    help_text,
    main,
    parse_args,
)
from .driver import _Driver
from .markdup import (
    DECISION_OBJECTS,
    _assemble_decision_task,
    _collect_task,
    _decide_bucket_task,
    _decide_task,
    _finish_task,
    _join_task,
    _markdup_keywords,
    _markdup_stats,
    _MarkdupTasks,
    _write_metrics,
    default_buckets,
)
from .options import PathArg, _argv, _index_kind, _order_options, _output_format, _progress
from .tasks import (
    TaskHook,
    _buffers,
    _cluster_cpus,
    _cpu,
    _get,
    _groups,
    _map_task,
    _reduce_task,
    _Run,
    _sample_task,
    _share_buffers,
    _share_meta,
    _stages,
    _timed,
    _warm_task,
)

__all__ = ["sort", "main", "parse_args", "help_text", "default_splits", "default_buckets"]

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


def default_splits(inputs: Sequence[str]) -> int:
    """The number of splits (and of partitions) used when none is given:
    one per :data:`SPLIT_BYTES` of compressed input, at least one per input."""
    total = sum(os.path.getsize(p) for p in inputs)
    return max(len(inputs), math.ceil(total / SPLIT_BYTES))


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
    one per partition. ``output_format="parquet"`` (with its options:
    ``"parquet,codec=snappy"``, ``"parquet,level=6"``) writes ``output`` as
    the Parquet dataset of docs/columnar.md, each reduce task writing its
    range's files (``ray.data.read_parquet`` reads it).

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
    ins, out = _paths(inputs, output)
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
    try:
        drv = _Driver(ray, run, stage_mod, max_retries, say)
        drv.split(n_splits)
        pg_argv = argv if argv is not None else _argv(
            ins, out, order_opts, level, fmt, idx, wanted_parts, n_splits, sharded, md
        )
        # --markdup: the decision reads the inputs beside the maps.
        names = None
        if md is not None and metrics is not None:
            names = (os.fsdecode(os.fspath(metrics)), ins, out, " ".join(pg_argv))
        md_tasks = md is not None and decision_buckets != 0 and one_task_because is None
        drv.start_decision(md_tasks, decision_buckets, n_parts, names)
        drv.sample(n_parts, SAMPLES_PER_PARTITION, DRIVER_SAMPLE_SPLITS)
        drv.map()
        options: Dict[str, Any] = {"output_format": fmt, "index": idx, "threads": threads}
        if level is not None:
            options["level"] = level
        if fmt.startswith("parquet"):
            # Each reduce writes its range's Parquet files with the
            # output's header in them (the @PG line too).
            options.update(argv=pg_argv, no_pg=no_pg)
        drv.reduce(work, options, names)
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
        return drv.assemble(out, asm_kwargs, metrics, one_task_because)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if started_ray:
            ray.shutdown()


def _paths(inputs: Union[PathArg, Sequence[PathArg]], output: PathArg) -> "tuple[List[str], str]":
    """The input paths (each an existing file) and the output path, as
    strings."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    ins = [os.fsdecode(os.fspath(p)) for p in inputs]
    if not ins:
        raise ValueError("no input: name one or more BAM files")
    out = os.fsdecode(os.fspath(output))
    for p in ins:
        if not os.path.isfile(p):
            raise AlnsortError(f"cannot open input '{p}': no such file")
    return ins, out
