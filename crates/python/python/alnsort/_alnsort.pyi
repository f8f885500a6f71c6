"""Type stub of the extension module alnsort._alnsort (crates/python/src/lib.rs).
tests/python/test_stubs.py checks that every function here has the module's
parameters, in its order, with its defaults."""

import os
from typing import Any, Callable, Dict, Optional, Sequence, Union

__version__: str
ARGV0: str

# The typed options: {"options": [(keyword, value or None), ...],
# "command_line": [...]}, each keyword an option of the command's table
# (option_table), as alnsort._options() makes them; a stage that marks
# duplicates also has "markdup": [(keyword, value or None), ...], the
# keywords of alnsort sort's duplicate-marking options.
_Keywords = Dict[str, Any]

def sort(input: str, output: str, options: _Keywords, index: Union[bool, str]) -> str: ...
def sort_help() -> str: ...
def merge(inputs: Sequence[str], output: str, options: _Keywords, index: Union[bool, str]) -> None: ...

# (keyword, name as messages write it, value name or None, refusal or None)
# of each option of "sort" or "merge".
def option_table(command: str) -> list[tuple[str, str, Optional[str], Optional[str]]]: ...
# alnsort sort's group "Duplicate marking" as (keyword, name, value name or
# None), and the keywords a stage takes as its own (crates/engine/src/options.rs).
def markdup_options() -> list[tuple[str, str, Optional[str]]]: ...
def stage_option_keywords() -> list[str]: ...

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
    prior: Optional[int] = None,
) -> tuple[list[bytes], int, Optional[int], Optional[int]]: ...
def stage_reach(inputs: Sequence[Union[str, "os.PathLike[str]"]], split: _SplitTuple, threads: int) -> Optional[int]: ...
def stage_reduce(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    blocks: Sequence[bytes],
    part_path: Union[str, "os.PathLike[str]"],
    range_index: int,
    partitions: int,
    options: _Keywords,
    index: bool,
    marks: Optional[tuple[Any, Sequence[int]]] = None,
    slices: Optional[Sequence[Any]] = None,
    argv: Optional[Sequence[str]] = None,
) -> tuple[int, int, int]: ...
def stage_assemble(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    parts: Sequence[Union[str, "os.PathLike[str]"]],
    output: Union[str, "os.PathLike[str]"],
    options: _Keywords,
    index: Optional[str],
    sharded: bool,
    argv: Optional[Sequence[str]],
) -> tuple[int, Optional[Union[str, "os.PathLike[str]"]], list[Union[str, "os.PathLike[str]"]]]: ...

# Duplicate marking in the stages (crates/python/src/markdup_stages.rs); use
# alnsort.stages.markdup_*. Their options have "markdup" (see _Keywords).
# A buffer is any object with the buffer protocol (bytes, memoryview, Ray's
# object-store buffers).
_Buffer = Any
# (metrics path, inputs and output as the user named them, command line)
_MetricsNames = tuple[Union[str, "os.PathLike[str]"], Sequence[str], Optional[Union[str, "os.PathLike[str]"]], str]
# (first name, last name, ordinal of the last template's first record, first ordinal)
_Boundary = tuple[Optional[bytes], Optional[bytes], int, int]
# ({size: sets} of all, optical and non-optical sets, {library: optical duplicates})
_SetCounts = tuple[Dict[int, int], Dict[int, int], Dict[int, int], Dict[int, int]]
# Picard's output walk: (stale, duplicate template, optical stale, optical duplicate template)
_Carry = tuple[int, bool, int, bool]

def stage_markdup_decide(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    options: _Keywords,
    metrics: Optional[_MetricsNames] = None,
) -> tuple[bytes, list[int], Optional[str]]: ...
def stage_markdup_tasks_refusal(
    inputs: Sequence[Union[str, "os.PathLike[str]"]], options: _Keywords
) -> Optional[str]: ...
def stage_markdup_walk_refusal(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    split_inputs: Sequence[int],
    counts: Sequence[Sequence[Sequence[int]]],
    repeated: Sequence[int],
) -> Optional[str]: ...
def stage_markdup_split_bases(
    split_records: Sequence[int], split_inputs: Sequence[int], input_records: Sequence[int]
) -> list[int]: ...
def stage_markdup_collect(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    split: _SplitTuple,
    options: _Keywords,
    end_buckets: int,
    name_buckets: int,
) -> tuple[list[bytes], list[bytes], bytes, _Boundary, int, bytes]: ...
def stage_map_collecting(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    split: _SplitTuple,
    splitters: Sequence[bytes],
    options: _Keywords,
    end_buckets: int,
    name_buckets: int,
    prior: Optional[int] = None,
) -> tuple[
    tuple[list[bytes], int, Optional[int], Optional[int]], tuple[list[bytes], list[bytes], bytes, _Boundary, int, bytes]
]: ...
def stage_markdup_continued(bounds: Sequence[_Boundary]) -> list[Optional[int]]: ...
def stage_markdup_join(
    blocks: Sequence[_Buffer],
    bounds: Sequence[_Boundary],
    end_buckets: int,
    options: _Keywords,
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    splits: Sequence[_SplitTuple],
) -> tuple[list[bytes], int]: ...
def stage_markdup_decide_bucket(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    blocks: Sequence[_Buffer],
    bounds: Sequence[_Boundary],
    options: _Keywords,
    splits: int,
) -> tuple[list[bytes], list[bytes], _SetCounts]: ...
def stage_markdup_finish(
    slots: _Buffer,
    continued: bool,
    duplicates: Sequence[_Buffer],
    optical: Sequence[_Buffer],
    carry: _Carry,
    ranges: Optional[_Buffer] = None,
    partitions: int = 0,
) -> tuple[bytes, Optional[bytes], int, list[list[int]], _Carry, list[bytes], int]: ...
def stage_markdup_assemble(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    options: _Keywords,
    outcomes: Sequence[tuple[_Buffer, Optional[_Buffer], int, Sequence[Sequence[int]]]],
    buckets: Sequence[_SetCounts],
    metrics: Optional[_MetricsNames] = None,
) -> tuple[bytes, list[int], Optional[str]]: ...
def stage_markdup_metrics(
    inputs: Sequence[Union[str, "os.PathLike[str]"]],
    options: _Keywords,
    counts: Sequence[Sequence[Sequence[int]]],
    buckets: Sequence[_SetCounts],
    metrics: Optional[_MetricsNames] = None,
) -> Optional[str]: ...
