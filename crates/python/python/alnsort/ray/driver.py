"""The driver of a Ray run, phase by phase (:class:`_Driver`): split,
sample and splitters, map with its check (repairs of wrong guesses, maps
run again with a corrected prior), the duplicate decision, reduce, and
assemble."""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Dict, List, Optional

from .. import AlnsortError
from .markdup import _decide_task, _markdup_stats, _MarkdupTasks, _write_metrics, default_buckets
from .tasks import (
    _cluster_cpus,
    _get,
    _groups,
    _map_task,
    _reduce_task,
    _Run,
    _sample_task,
    _timed,
    _warm_task,
)


class _Driver:
    """One run's driver: the remote functions, the workers warmed up, and
    what each phase leaves for the next (the splits, the splitters and
    priors, the maps' references and summaries, the decision), with each
    phase's times in :attr:`phases` and a progress line per phase."""

    def __init__(self, ray: Any, run: _Run, stage_mod: Any, max_retries: int, say: Callable[[str], None]):
        self.ray, self.run, self.stage_mod, self.say = ray, run, stage_mod, say
        self.t_start = time.perf_counter()
        self.phases: Dict[str, Dict[str, float]] = {}
        self.common = common = dict(max_retries=max_retries, retry_exceptions=False)
        threads = run.threads
        self.sample_r = ray.remote(num_cpus=1, **common)(_sample_task)
        self.map_r = ray.remote(num_cpus=threads, **common)(_map_task)
        self.reduce_r = ray.remote(num_cpus=threads, **common)(_reduce_task)
        # Workers start while the driver works (a fresh worker's first task
        # waits for its process to start; the maps then find it running).
        # Nothing waits for these tasks: a failure to start shows in the
        # stages' own tasks.
        warm_r = ray.remote(num_cpus=1, max_retries=0)(_warm_task)
        self.warm: Optional[list] = [warm_r.remote(run.stages) for _ in range(_cluster_cpus(ray))]
        self.decide_r = ray.remote(num_cpus=threads, **common)(_decide_task)
        self.decide_ref: Any = None
        self.md_run: Optional[_MarkdupTasks] = None

    # 1. split (driver)
    def split(self, n_splits: int) -> None:
        ins = self.run.inputs
        t0 = time.perf_counter()
        self.splits, secs = _timed(self.stage_mod.split, ins, n_splits)
        self.phases["split"] = {"wall": time.perf_counter() - t0, "stage": secs}
        self.say(f"split: {len(self.splits)} splits of {len(ins)} input(s) ({time.perf_counter() - t0:.2f} s)")

    def start_decision(self, tasks: bool, decision_buckets: Optional[int], n_parts: int, names: Optional[tuple]) -> None:
        """--markdup: the decision cut into tasks (each split's share is
        collected by its map: :meth:`_submit_map`; again where the map runs
        again), or one decide task, started now, reading the inputs beside
        the maps."""
        if tasks:
            buckets = decision_buckets if decision_buckets is not None else default_buckets(len(self.splits), n_parts)
            self.md_run = _MarkdupTasks(self.ray, self.common, self.run, buckets, self.say)
        elif self.run.markdup is not None:
            self.decide_ref = self.decide_r.remote(self.run, names)

    # 2. sample -> splitters
    def sample(self, n_parts: int, samples_per_partition: int, driver_sample_splits: int) -> int:
        """Draws the samples (here for a few splits of one input, else in
        tasks), the splitters and each map's prior; returns the number of
        partitions (fewer when the samples have too few distinct points)."""
        ray, run, split_list = self.ray, self.run, self.splits
        ins = run.inputs
        t0 = time.perf_counter()
        per_split = max(1, math.ceil(n_parts * samples_per_partition / len(split_list)))

        # Several inputs: the reach of every split but the last of its input
        # (no map's prior needs that one).
        def needs_reach(i: int) -> bool:
            nxt = split_list[i + 1] if i + 1 < len(split_list) else None
            return len(ins) > 1 and nxt is not None and nxt["input"] == split_list[i]["input"]

        every = list(range(len(split_list)))
        if len(ins) == 1 and len(split_list) <= driver_sample_splits:
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
                        self.sample_r.remote(
                            run, [split_list[i] for i in g], per_split, [needs_reach(i) for i in g]
                        )
                        for g in groups
                    ],
                )
                for x in got
            ]
        self.priors = self.stage_mod.priors(split_list, [x["reach"] for x in samples])
        keys = [k for s in samples for k in s["keys"]]
        if not keys and any("error" in x for x in samples):
            raise AlnsortError(next(x["error"] for x in samples if "error" in x))
        splitters, sp_secs = _timed(self.stage_mod.splitters, keys, n_parts)
        self.splitters = list(splitters)
        # Fewer splitters when the samples have too few distinct points.
        n_parts = len(self.splitters) + 1
        self.phases["sample"] = {
            "wall": time.perf_counter() - t0,
            "stage": sum(x["seconds"] for x in samples) + sp_secs,
            "cpu": sum(x.get("cpu", 0.0) for x in samples),
            "tasks": sample_tasks,
        }
        self.say(f"sample: {len(keys)} keys, {n_parts} partitions ({self.phases['sample']['wall']:.2f} s)")
        self.n_parts = n_parts
        return n_parts

    # 3. map, 4. check
    def map(self) -> None:
        """Runs a map per split and checks each one's proven end against the
        next split's start (:meth:`_check`) and each one's prior
        (:meth:`_rerun_priors`); the maps' summaries in :attr:`metas`."""
        t0 = time.perf_counter()
        self.splitters_ref = self.ray.put(self.splitters)
        self.refs = [self._submit_map(i, s) for i, s in enumerate(self.splits)]
        self.metas: List[Dict[str, Any]] = []
        self.repairs = self._check()
        self.rerun = self._rerun_priors()
        metas = self.metas
        self.records = sum(m["records"] for m in metas)
        self.phases["map"] = {
            "wall": time.perf_counter() - t0,
            "stage": sum(m["seconds"] for m in metas),
            "cpu": sum(m.get("cpu", 0.0) for m in metas),
        }
        self.say(
            f"map: {len(metas)} splits, {self.records} records, {sum(m['bytes'] for m in metas) / 1e6:.1f} MB of blocks"
            f" ({self.phases['map']['wall']:.2f} s; {self.repairs} repaired)"
        )

    def _submit_map(self, i: int, split: Dict[str, Any]) -> list:
        n_parts, md_run = self.n_parts, self.md_run
        if md_run is None:
            return self.map_r.options(num_returns=n_parts + 1).remote(
                self.run, i, split, self.splitters_ref, self.priors[i]
            )
        # The map collects the split's share of the decision too (one
        # read of the split); its blocks are the first n_parts returns
        # after the meta.
        got = self.map_r.options(num_returns=n_parts + 1 + md_run.map_returns()).remote(
            self.run, i, split, self.splitters_ref, self.priors[i], md_run.buckets
        )
        md_run.from_map(i, got, n_parts)
        return got[: n_parts + 1]

    def _outcome(self, i: int) -> Any:
        try:
            return _get(self.ray, self.refs[i][0])
        except AlnsortError as e:
            return e

    def _check(self) -> int:
        """Checks each map's proven end against the next split's start; a
        map of a wrongly guessed split may have failed: its failure is held
        until the previous map's end shows whether the guess was wrong.
        Returns the number of maps run again from a proven start."""
        split_list, metas = self.splits, self.metas
        repairs = 0
        for i in range(len(split_list)):
            got = self._outcome(i)
            if i > 0 and split_list[i - 1]["input"] == split_list[i]["input"]:
                pair = split_list[i - 1 : i + 1]  # the same dicts: repair edits them
                if self.stage_mod.repair(pair, [metas[i - 1]["end"], None]):
                    repairs += 1
                    self.refs[i] = self._submit_map(i, split_list[i])
                    got = self._outcome(i)
            if isinstance(got, Exception):
                raise got
            metas.append(got)
        return repairs

    def _rerun_priors(self) -> List[int]:
        """Several inputs: the maps' own reaches are exact (a split repaired
        by :meth:`_check` had its reach taken from the wrong start); a map
        that ran with another prior runs again with the right one. Returns
        those maps."""
        exact = self.stage_mod.priors(self.splits, [m["reach"] for m in self.metas])
        rerun = [i for i, p in enumerate(exact) if p != self.priors[i]]
        for i in rerun:
            self.priors[i] = exact[i]
            self.refs[i] = self._submit_map(i, self.splits[i])
        for i in rerun:
            got = self._outcome(i)
            if isinstance(got, Exception):
                raise got
            self.metas[i] = got
        return rerun

    def decide(self, names: Optional[tuple]) -> "tuple[Dict[str, Any], Any, Any, Optional[List[list]]]":
        """--markdup: the decision (from its tasks: collect -> join -> decide
        -> finish -> assemble; or from the one decide task) and what the
        reduces take of it: (the decision's summary, the marks' reference,
        the whole decision's reference, each range's slices)."""
        ray, md = self.ray, self.run.markdup
        marks_ref = decisions_ref = None
        slices: Optional[List[list]] = None
        decided: Dict[str, Any] = {}
        if self.md_run is not None:
            decided, decisions_ref, slices = self.md_run.decide(
                self.splits, [m["records"] for m in self.metas], names, self.phases, self.n_parts
            )
            if not decided:
                # Several inputs whose records the tasks cannot decide as
                # Picard does (md_run.stats says why): one decide task.
                self.decide_ref = self.decide_r.remote(self.run, names)
        if self.decide_ref is not None:
            t1 = time.perf_counter()
            decided = _get(ray, self.decide_ref)
            self.phases["decide"] = {
                "wall_waited": time.perf_counter() - t1, "stage": decided["seconds"], "cpu": decided["cpu"],
            }
            decisions_ref = ray.put(decided["decisions"])
            self.say(f"decide: one task over {len(self.run.inputs)} input(s), {sum(decided['records'])} records "
                     f"(waited {self.phases['decide']['wall_waited']:.2f} s)")
        if slices is not None:
            # Each reduce receives its range's slice of every split's outcome.
            marks_ref, decisions_ref = ray.put((md, None, len(self.splits))), None
        elif decisions_ref is not None:
            bases = self.stage_mod.markdup_split_bases(
                [m["records"] for m in self.metas], [s["input"] for s in self.splits], decided["records"]
            )
            marks_ref = ray.put((md, bases, 0))
        return decided, marks_ref, decisions_ref, slices

    # 5. reduce
    def reduce(self, work: str, options: Dict[str, Any], names: Optional[tuple]) -> None:
        """The reduces, one per key range, into parts under ``work`` (with
        the decision's marks under --markdup); :attr:`reduced` their
        summaries, :attr:`marked` the duplicates set."""
        n_parts = self.n_parts
        t0 = time.perf_counter()
        # A part is BGZF blocks, or a Parquet dataset directory.
        ext = "dataset" if str(options.get("output_format", "")).startswith("parquet") else "bgzf"
        self.parts = [os.path.join(work, f"part-{r:06d}.{ext}") for r in range(n_parts)]
        self.decided, marks_ref, decisions_ref, slices = self.decide(names)
        refs = self.refs
        reduced = _get(
            self.ray,
            [
                self.reduce_r.remote(
                    self.run, r, self.parts[r], n_parts, options, marks_ref, decisions_ref,
                    *(slices[r] if slices is not None else []), *[ref[1 + r] for ref in refs],
                )
                for r in range(n_parts)
            ]
        )
        del refs
        self.refs, self.warm = [], None  # the blocks are no longer needed: let Ray free them
        self.reduced = reduced
        self.phases["reduce"] = {
            "wall": time.perf_counter() - t0,
            "stage": sum(x["seconds"] for x in reduced),
            "cpu": sum(x.get("cpu", 0.0) for x in reduced),
        }
        out_records = sum(x["records"] for x in reduced)
        if out_records != self.records:
            raise AlnsortError(f"reduce wrote {out_records} records; the maps read {self.records}")
        self.marked = sum(x.get("marked", 0) for x in reduced)
        self.say(
            f"reduce: {n_parts} parts, {out_records} records"
            + (f", {self.marked} duplicates" if self.run.markdup is not None else "")
            + f" ({self.phases['reduce']['wall']:.2f} s)"
        )

    # 6. assemble (driver)
    def assemble(self, out: str, asm_kwargs: Dict[str, Any], metrics: Any, one_task_because: Optional[str]) -> Dict[str, Any]:
        """Header + parts in range order (and the metrics file); returns the
        run's statistics."""
        t0 = time.perf_counter()
        assembled, secs = _timed(self.stage_mod.assemble, self.run.inputs, self.parts, out, **asm_kwargs)
        self.phases["assemble"] = {"wall": time.perf_counter() - t0, "stage": secs}
        md = self.run.markdup
        if md is not None:
            _write_metrics(metrics, self.decided.get("metrics"))
        wall = time.perf_counter() - self.t_start
        self.say(f"assemble: {self.n_parts} parts into {out} ({self.phases['assemble']['wall']:.2f} s; {wall:.2f} s in all)")
        stage_secs = sum(p["stage"] for p in self.phases.values())
        return {
            "records": self.records,
            "splits": len(self.splits),
            "partitions": self.n_parts,
            "repairs": self.repairs,
            "prior_reruns": len(self.rerun),
            "shuffle_bytes": sum(m["bytes"] for m in self.metas),
            "output_bytes": sum(x["bytes"] for x in self.reduced),
            "wall_seconds": wall,
            "stage_seconds": stage_secs,
            "cluster_cpus": _cluster_cpus(self.ray),
            "phases": self.phases,
            "assemble": assembled,
            **({"markdup": _markdup_stats(self.marked, self.md_run, one_task_because)} if md is not None else {}),
        }
