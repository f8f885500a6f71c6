"""Duplicate marking on Ray (``--markdup``): the decision's tasks (collect,
join, decide, finish, assemble; or one decide task over the whole input),
the driver's side of them (:class:`_MarkdupTasks`), the keywords and the
metrics file."""

from __future__ import annotations

import os
import pickle
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .. import AlnsortError
from .options import PathArg
from .tasks import _buffers, _get, _Run, _share_buffers, _share_meta, _stages

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


def _decide_task(run: _Run, metrics: Optional[tuple]) -> Dict[str, Any]:
    """The duplicate decision of one node over all inputs (it reads them
    beside the maps); its bytes go to every reduce."""
    out, secs, cpu = run.call("markdup_decide", run.inputs, run.markdup, metrics=metrics, **run.kwargs())
    return dict(out, seconds=secs, cpu=cpu)


def _collect_task(run: _Run, index: int, split: Dict[str, Any], buckets: int) -> tuple:
    """A split's share of the decision: (meta, fragment ends by end
    bucket..., mate halves by name bucket..., slots, each record's range:
    empty, only a map knows its ranges)."""
    out, secs, cpu = run.call(
        "markdup_collect", run.inputs, split, run.markdup, buckets, buckets, task=("collect", index), **run.kwargs()
    )
    meta = dict(_share_meta(out), seconds=secs, cpu=cpu)
    return (meta, *_share_buffers(out))


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
        n = len(splits)
        cols = [self.collected[i] for i in range(n)]
        metas, bounds, continued = self._collected(cols, map_records, phases)
        t0 = time.perf_counter()
        joins, decides = self._join_and_decide(cols, bounds, splits)
        # The maps gave each record's range (a collect task gives none): each
        # finish cuts its split's outcome into one slice per reduce.
        sliced = partitions if all(m.get("ranges", False) for m in metas) else 0

        def finish(s: int, carry: Optional[Dict[str, Any]]) -> list:
            b = self.buckets
            return self.finish_r.options(num_returns=3 + sliced).remote(
                self.run, s, continued[s] is not None, carry, b, sliced, cols[s][1 + 2 * b], cols[s][2 + 2 * b],
                *[d[1 + s] for d in decides], *[d[1 + n + s] for d in decides],
            )

        # Every split finished with the start's carry, submitted with the
        # joins and decides (the driver waits below only to report them).
        fins = [finish(s, None) for s in range(n)]
        join_metas, dec_metas = self._joined_and_decided(joins, decides, phases, t0)
        # Records of several inputs the tasks could not put in Picard's
        # merged order (mates in two inputs, two inputs' equal records).
        why = next((m["one_task_because"] for m in [*join_metas, *dec_metas] if m.get("one_task_because")), None)
        if why is not None:
            self.stats.update({"path": "one task", "one_task_because": why, "tasks_discarded": True})
            self.say(f"decide: {why}: the decision goes to one task")
            return {}, None, None
        fin_metas, again = self._finished(fins, finish, splits, phases)
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
        decided = _get(self.ray, asm[0])
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
        self._add_stats(metas, continued, join_metas, dec_metas, fin_metas, again, sliced)
        if sliced:
            return decided, None, [[f[3 + r] for f in fins] for r in range(sliced)]
        return decided, asm[1], None

    def _collected(
        self, cols: List[list], map_records: List[int], phases: Dict[str, Dict[str, float]]
    ) -> "tuple[List[Dict[str, Any]], List[Any], List[Any]]":
        """The splits' shares, checked against their maps' record counts:
        (their summaries, the splits' boundaries, where each split's first
        template began when that was in an earlier split)."""
        t0 = time.perf_counter()
        # A collecting map's meta holds the share's under "collect".
        metas = [m.get("collect", m) for m in _get(self.ray, [c[0] for c in cols])]
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
            f"collect: {len(cols)} splits, {sum(m['records'] for m in metas)} records, "
            f"{sum(m['ends_bytes'] for m in metas) / 1e6:.1f} MB of fragment ends, "
            f"{sum(m['halves_bytes'] for m in metas) / 1e6:.1f} MB of mate halves, "
            f"{sum(c is not None for c in continued)} templates across split boundaries "
            f"({phases['collect']['wall_waited']:.2f} s after the maps)"
        )
        return metas, bounds, continued

    def _join_and_decide(self, cols: List[list], bounds: List[Any], splits: List[Dict[str, Any]]) -> "tuple[list, list]":
        """Submits a join per name bucket and a decide per end bucket: their
        references."""
        b, n = self.buckets, len(splits)
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
        return joins, decides

    def _joined_and_decided(
        self, joins: list, decides: list, phases: Dict[str, Dict[str, float]], t0: float
    ) -> "tuple[List[Dict[str, Any]], List[Dict[str, Any]]]":
        """Waits for the joins, then the decides (reporting each): their
        summaries."""
        b = self.buckets
        join_metas = _get(self.ray, [j[0] for j in joins])
        self._phase(phases, "join", t0, join_metas)
        self.say(
            f"join: {b} name buckets, {sum(m['bytes'] for m in join_metas) / 1e6:.1f} MB of pair ends "
            f"({phases['join']['wall_waited']:.2f} s)"
        )
        t0 = time.perf_counter()
        dec_metas = _get(self.ray, [d[0] for d in decides])
        self._phase(phases, "decide", t0, dec_metas)
        self.say(
            f"decide: {b} end buckets, {sum(m['ends_bytes'] for m in dec_metas) / 1e6:.1f} MB of ends, "
            f"{sum(m['listed'] for m in dec_metas)} duplicates listed ({phases['decide']['wall_waited']:.2f} s)"
        )
        return join_metas, dec_metas

    def _finished(
        self,
        fins: list,
        finish: Callable[[int, Optional[Dict[str, Any]]], list],
        splits: List[Dict[str, Any]],
        phases: Dict[str, Dict[str, float]],
    ) -> "tuple[List[Dict[str, Any]], int]":
        """Waits for the splits' walks; a split whose predecessor's walk
        ended in another state than the start's is finished again with it
        (``fins`` updated). Returns the walks' summaries and how many were
        finished again."""
        t0 = time.perf_counter()
        fin_metas = _get(self.ray, [f[0] for f in fins])
        again = 0
        start = _stages(self.run.stages).START_CARRY
        for s in range(1, len(splits)):
            carry = fin_metas[s - 1]["carry"]
            if splits[s]["input"] != splits[s - 1]["input"]:
                continue  # several inputs: each input's walk starts afresh
            if carry != start:
                # Picard's walk ended split s - 1 in a state the default
                # finish of split s did not assume: finish it again.
                fins[s] = finish(s, carry)
                fin_metas[s] = _get(self.ray, fins[s][0])
                again += 1
        self._phase(phases, "finish", t0, fin_metas)
        return fin_metas, again

    def _add_stats(
        self,
        metas: List[Dict[str, Any]],
        continued: List[Any],
        join_metas: List[Dict[str, Any]],
        dec_metas: List[Dict[str, Any]],
        fin_metas: List[Dict[str, Any]],
        again: int,
        sliced: int,
    ) -> None:
        """The decision's byte counts and task counts in :attr:`stats`."""
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
    from ..stages import markdup_keywords

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
