"""A simulated Ray cluster on this machine (`ray.cluster_utils.Cluster`: a
head with 0 CPUs, which runs only the driver, and one-CPU worker nodes) and
the BAM helpers its users compare outputs with. Used by the Ray tests
(tests/ray/test_cluster.py) and the scaling benchmark (bench/ray_scaling.py).
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple


@contextlib.contextmanager
def simulated_cluster(
    nodes: int,
    store_bytes: int,
    *,
    head_store_bytes: Optional[int] = None,
    system_config: Optional[Dict[str, Any]] = None,
    python_path: Sequence[str] = (),
) -> Iterator[Any]:
    """Starts a head of 0 CPUs and ``nodes`` worker nodes of one CPU and
    ``store_bytes`` of object store each, connects this process to it
    (``ray.init``), and yields the ``Cluster``; shuts both down afterwards.
    ``python_path`` is put before ``PYTHONPATH`` for the workers (modules
    the tasks import); Ray's out-of-memory killer is turned off (it would
    kill tasks on a small shared machine). The environment is restored."""
    import ray
    from ray.cluster_utils import Cluster

    old_env = {k: os.environ.get(k) for k in ("PYTHONPATH", "RAY_memory_usage_threshold")}
    if python_path:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [*python_path, os.environ.get("PYTHONPATH", "")]
        )
    os.environ["RAY_memory_usage_threshold"] = "1.0"
    head: Dict[str, Any] = {"num_cpus": 0}
    if head_store_bytes is not None:
        head["object_store_memory"] = head_store_bytes
    if system_config:
        head["_system_config"] = system_config
    c = None
    try:
        c = Cluster(initialize_head=True, head_node_args=head)
        for _ in range(nodes):
            add_worker(c, store_bytes)
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        if c is not None:
            c.shutdown()
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def add_worker(cluster: Any, store_bytes: int) -> Any:
    """Adds one worker node of one CPU to ``cluster``."""
    return cluster.add_node(num_cpus=1, object_store_memory=store_bytes)


def spill_reports(cluster: Any) -> int:
    """How many times the cluster's raylets have reported spilling so far:
    Ray logs "Spilled N MiB, M objects, write throughput ..." to each node's
    raylet log as it spills (documented in Ray's object-spilling page). A
    spilled object is deleted from disk as soon as it is freed, so sampling
    the spilling directory can miss it; the log cannot."""
    logs = Path(cluster.head_node.get_logs_dir_path())
    n = 0
    for log in logs.glob("raylet*.out"):
        with open(log, errors="replace") as f:
            n += sum(1 for line in f if "Spilled " in line and " MiB, " in line)
    return n


def inflate_bgzf(raw: bytes) -> bytes:
    """All BGZF blocks of ``raw`` inflated (block by block: gzip.decompress
    re-slices the rest of the input at each of the thousands of members)."""
    out = []
    pos = 0
    view = memoryview(raw)
    while pos < len(raw):
        (bsize,) = struct.unpack_from("<H", raw, pos + 16)
        out.append(zlib.decompress(view[pos + 18 : pos + bsize + 1 - 8], -15))
        pos += bsize + 1
    return b"".join(out)


def header_end(data: bytes) -> int:
    """Offset of the first record in an inflated BAM stream."""
    assert data[:4] == b"BAM\1", "not a BAM stream"
    (l_text,) = struct.unpack_from("<i", data, 4)
    pos = 8 + l_text
    (n_ref,) = struct.unpack_from("<i", data, pos)
    pos += 4
    for _ in range(n_ref):
        (l_name,) = struct.unpack_from("<i", data, pos)
        pos += 8 + l_name
    return pos


def records(path: str) -> bytes:
    """The decompressed record section of a BAM (everything after the header)."""
    data = inflate_bgzf(Path(path).read_bytes())
    return data[header_end(data) :]


def datasets_back_as_bam(got: Path, bam: str, tmp: Path) -> Tuple[str, str, Path]:
    """The Parquet dataset a distributed sort of BAM must equal (`alnsort
    sort -O parquet` on one machine, written to TMP/want.parquet), and both
    it and the dataset GOT read back as BAM by alnsort (`--no-PG`; alnsort
    reads its datasets as input). Returns (GOT as BAM, the one-machine
    dataset as BAM, the one-machine dataset)."""
    import harness

    want = tmp / "want.parquet"
    harness.check_ok(harness.run_alnsort(["-O", "parquet", "-o", str(want), bam]))
    back = []
    for name, ds in (("got", got), ("one", want)):
        b = str(tmp / f"{name}.bam")
        harness.check_ok(harness.run_alnsort(["--no-PG", "-o", b, str(ds)]))
        back.append(b)
    return back[0], back[1], want
