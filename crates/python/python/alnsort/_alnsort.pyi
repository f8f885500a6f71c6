"""Type stub of the extension module alnsort._alnsort (crates/python/src/lib.rs)."""

import os
from typing import Optional, Sequence, Union

__version__: str
ARGV0: str

def run(argv: Sequence[Union[str, "os.PathLike[str]"]]) -> str: ...
def sort_help() -> str: ...

# The distributed stages (crates/python/src/stages.rs); use alnsort.stages.
# A split crosses as (input, start, end, ordinal).
_SplitTuple = tuple[int, int, Optional[int], int]

def stage_split(inputs: Sequence[Union[str, "os.PathLike[str]"]], parts: int, threads: int) -> list[_SplitTuple]: ...
def stage_sample(
    inputs: Sequence[Union[str, "os.PathLike[str]"]], split: _SplitTuple, count: int, options: Sequence[str]
) -> list[bytes]: ...
def stage_splitters(samples: Sequence[bytes], partitions: int) -> list[bytes]: ...
def stage_map(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    split: _SplitTuple,
    splitters: Sequence[bytes],
    options: Sequence[str],
) -> tuple[list[bytes], int, Optional[int]]: ...
def stage_reduce(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    blocks: Sequence[bytes],
    part_path: Union[str, "os.PathLike[str]"],
    range_index: int,
    partitions: int,
    options: Sequence[str],
    index: bool,
) -> tuple[int, int]: ...
def stage_assemble(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    parts: Sequence[Union[str, "os.PathLike[str]"]],
    output: Union[str, "os.PathLike[str]"],
    options: Sequence[str],
    index: Optional[str],
    sharded: bool,
    argv: Optional[Sequence[str]],
) -> tuple[int, Optional[Union[str, "os.PathLike[str]"]], list[Union[str, "os.PathLike[str]"]]]: ...
