"""Fault injection for the Ray cluster tests: a task hook that stops one
chosen task (stage, index) on its first attempt until the test has killed
the node it runs on, and logs every attempt of every task (stage, index,
node) so the test can see what ran again. Importable by Ray workers (the
test puts this directory on their PYTHONPATH)."""

from __future__ import annotations

import os
import time


class Barrier:
    def __init__(self, directory: str, stage: str, index: int, wait_s: float = 240.0):
        self.directory = directory
        self.stage = stage
        self.index = index
        self.wait_s = wait_s

    @property
    def marker(self) -> str:
        return os.path.join(self.directory, f"{self.stage}-{self.index}.node")

    def __call__(self, stage: str, index: int) -> None:
        import ray

        node = ray.get_runtime_context().get_node_id()
        with open(os.path.join(self.directory, "attempts.log"), "a") as log:
            log.write(f"{stage} {index} {node}\n")
        if (stage, index) != (self.stage, self.index):
            return
        tmp = f"{self.marker}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(node)
        try:
            os.link(tmp, self.marker)  # atomic: only the first attempt wins
        except FileExistsError:
            return  # a retry: the node of the first attempt is gone
        finally:
            os.unlink(tmp)
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
        raise RuntimeError(f"{stage} task {index}: its node was not killed within {self.wait_s} s")

    def attempts(self) -> list:
        path = os.path.join(self.directory, "attempts.log")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [tuple(line.split()) for line in f]
