"""Type stub of the extension module alnsort._alnsort (crates/python/src/lib.rs)."""

import os
from typing import Any, Callable, Dict, Optional, Sequence, Union

__version__: str
ARGV0: str

# The typed options: {"options": [(keyword, value or None), ...],
# "command_line": [...]}, each keyword an option of the command's table
# (option_table), as alnsort._options() makes them.
_Keywords = Dict[str, Any]

def sort(input: str, output: str, options: _Keywords, index: Union[bool, str]) -> str: ...
def sort_help() -> str: ...
def merge(inputs: Sequence[str], output: str, options: _Keywords, index: Union[bool, str]) -> None: ...

# (keyword, name as messages write it, value name or None, refusal or None)
# of each option of "sort" or "merge".
def option_table(command: str) -> list[tuple[str, str, Optional[str], Optional[str]]]: ...

# alnsort sort's parser and option table, for a driver's command line
# (alnsort.ray): see parse_sort_args in crates/python/src/lib.rs.
def parse_sort_args(
    argv0: str, args: Sequence[str], extras: Sequence[tuple[str, bool]], check: Callable[[list[str]], None]
) -> Dict[str, Any]: ...
def sort_option_table() -> list[tuple[str, str, str]]: ...

# The distributed stages (crates/python/src/stages.rs); use alnsort.stages.
# A split crosses as (input, start, end, ordinal).
_SplitTuple = tuple[int, int, Optional[int], int]

def stage_split(inputs: Sequence[Union[str, "os.PathLike[str]"]], parts: int, threads: int) -> list[_SplitTuple]: ...
def stage_sample(
    inputs: Sequence[Union[str, "os.PathLike[str]"]], split: _SplitTuple, count: int, options: _Keywords
) -> list[bytes]: ...
def stage_splitters(samples: Sequence[bytes], partitions: int) -> list[bytes]: ...
def stage_map(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    split: _SplitTuple,
    splitters: Sequence[bytes],
    options: _Keywords,
) -> tuple[list[bytes], int, Optional[int]]: ...
def stage_reduce(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    blocks: Sequence[bytes],
    part_path: Union[str, "os.PathLike[str]"],
    range_index: int,
    partitions: int,
    options: _Keywords,
    index: bool,
) -> tuple[int, int]: ...
def stage_assemble(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    parts: Sequence[Union[str, "os.PathLike[str]"]],
    output: Union[str, "os.PathLike[str]"],
    options: _Keywords,
    index: Optional[str],
    sharded: bool,
    argv: Optional[Sequence[str]],
) -> tuple[int, Optional[Union[str, "os.PathLike[str]"]], list[Union[str, "os.PathLike[str]"]]]: ...
