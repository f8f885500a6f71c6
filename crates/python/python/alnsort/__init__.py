"""alnsort from Python: sort SAM/BAM files as ``samtools sort`` 1.24 does.

    >>> import alnsort
    >>> stats = alnsort.sort("in.sam", "out.bam", threads=4, index=True)
    >>> stats["records_in"]

:func:`sort` runs the same code as the ``alnsort sort`` command, in this
process, without holding the GIL. Its keyword arguments are passed as
typed values to the engine the command runs, each setting what its
``alnsort sort`` option sets (:func:`sort_argv` shows that command line,
which the output's ``@PG`` line and the report record), so every option
means what it means on the command line and every error message is the
command's.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _alnsort

__all__ = [
    "AlnsortError",
    "AlnsortIOError",
    "ORDERS",
    "UNKNOWN_REFERENCE",
    "__version__",
    "merge",
    "sort",
    "sort_argv",
    "sort_options",
    "sort_help",
]

#: The version of alnsort (the Rust crates and this package are one version).
__version__: str = _alnsort.__version__

#: A file name: ``str`` or any ``os.PathLike`` (``pathlib.Path``).
PathArg = Union[str, "os.PathLike[str]"]

#: The values of ``sort(order=...)`` and the ``alnsort sort`` options they stand for.
ORDERS: Dict[str, List[str]] = {
    "coordinate": [],
    "name": ["-n"],
    "name-lexicographic": ["-N"],
    "template-coordinate": ["--template-coordinate"],
    "minimiser": ["-M"],
}

#: The values of ``sort(unknown_reference=...)`` (``--unknown-reference``).
UNKNOWN_REFERENCE = ("error", "unmapped")


class AlnsortError(RuntimeError):
    """A sort failed. The message is what ``alnsort sort`` prints after
    ``"alnsort sort: "`` for the same arguments and input: the file, byte
    offset (or line) and record of bad input, or the option that is wrong.
    The run's output, index and temporary files are gone; an output file
    that existed before the call is left as it was."""


class AlnsortIOError(AlnsortError, OSError):
    """An :class:`AlnsortError` whose cause is an operating-system I/O error
    (a missing input, a directory that cannot be written, a full disk).
    It is also an ``OSError``; its ``errno`` is not set."""


def sort_help() -> str:
    """The text of ``alnsort sort --help``: every option of the command."""
    return _alnsort.sort_help()


def _path(value: Any, what: str) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what} must be a str or os.PathLike, not {type(value).__name__}")
    return os.fsdecode(os.fspath(value))


def _file(value: Any, what: str) -> str:
    """The input or output path; "-" (a standard stream) is refused."""
    path = _path(value, what)
    if path == "-":
        stream = "standard input" if what == "input" else "standard output"
        raise ValueError(
            f"{what} '-' ({stream}) cannot be used from Python: name a file "
            "(or run the alnsort command in a pipe)"
        )
    return path


def _check(value: Any, types: Tuple[type, ...], what: str) -> None:
    # bool is an int subclass; a count or a level given as True is a mistake.
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types)
        raise TypeError(f"{what} must be {names}, not {type(value).__name__}")


def sort_argv(
    input: PathArg,
    output: PathArg,
    *,
    order: str = "coordinate",
    threads: int = 1,
    max_memory: Union[str, int, None] = None,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    index: Union[bool, PathArg] = False,
    tag: Optional[str] = None,
    tmp_dir: Optional[PathArg] = None,
    no_pg: bool = False,
    markdup: bool = False,
    metrics: Optional[PathArg] = None,
    unknown_reference: str = "error",
) -> List[str]:
    """The ``alnsort sort`` command line that :func:`sort` runs for these
    arguments, beginning ``["alnsort", "sort", ...]``; running it in a shell
    writes the same output bytes. Raises what :func:`sort` raises for
    arguments that are refused before any run (``TypeError``,
    ``ValueError``, ``NotImplementedError``)."""
    _check(markdup, (bool,), "markdup")
    if metrics is not None and not markdup:
        raise ValueError("metrics= is the duplicate-marking metrics file: it needs markdup=True")
    _check(no_pg, (bool,), "no_pg")
    inp = _file(input, "input")
    out = _file(output, "output")
    argv: List[str] = [_alnsort.ARGV0, "sort"]
    argv += sort_options(
        order=order,
        threads=threads,
        max_memory=max_memory,
        level=level,
        output_format=output_format,
        tag=tag,
        tmp_dir=tmp_dir,
        no_pg=no_pg,
        unknown_reference=unknown_reference,
    )
    if markdup:
        argv.append("--markdup")
    if metrics is not None:
        argv += ["--metrics", _path(metrics, "metrics")]
    if isinstance(index, bool):
        if index:
            argv.append("--write-index")
    else:
        # A named index: FILE.bai writes BAI, anything else CSI.
        out = f"{out}##idx##{_path(index, 'index')}"
        argv.append("--write-index")
    argv += ["-o", out]
    if inp.startswith("-"):
        argv.append("--")
    argv.append(inp)
    return argv


def sort_options(
    *,
    order: str = "coordinate",
    threads: int = 1,
    max_memory: Union[str, int, None] = None,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    tag: Optional[str] = None,
    tmp_dir: Optional[PathArg] = None,
    no_pg: bool = False,
    unknown_reference: str = "error",
) -> List[str]:
    """The ``alnsort sort`` options (no output, input, index or duplicate
    marking) for these keyword arguments of :func:`sort`, in the order
    :func:`sort_argv` writes them; :mod:`alnsort.stages` runs every stage
    with them. Raises ``TypeError``/``ValueError`` for a wrong argument."""
    _check(no_pg, (bool,), "no_pg")
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(
            f"order must be one of {', '.join(repr(o) for o in ORDERS)}, not {order!r}"
        )
    if not isinstance(unknown_reference, str) or unknown_reference not in UNKNOWN_REFERENCE:
        raise ValueError(
            "unknown_reference must be one of "
            f"{', '.join(repr(v) for v in UNKNOWN_REFERENCE)}, not {unknown_reference!r}"
        )
    argv: List[str] = list(ORDERS[order])
    if unknown_reference != "error":
        argv.append(f"--unknown-reference={unknown_reference}")
    if tag is not None:
        _check(tag, (str,), "tag")
        argv += ["-t", tag]
    _check(threads, (int,), "threads")
    if threads != 1:
        argv += ["-@", str(threads)]
    if max_memory is not None:
        _check(max_memory, (str, int), "max_memory")
        argv += ["--max-memory", str(max_memory)]
    if level is not None:
        _check(level, (int,), "level")
        argv += ["-l", str(level)]
    if output_format is not None:
        _check(output_format, (str,), "output_format")
        argv += ["-O", output_format]
    if tmp_dir is not None:
        argv += ["-T", _path(tmp_dir, "tmp_dir")]
    if no_pg:
        argv.append("--no-PG")
    return argv


def _keywords(
    *,
    order: str = "coordinate",
    threads: int = 1,
    max_memory: Union[str, int, None] = None,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    tag: Optional[str] = None,
    tmp_dir: Optional[PathArg] = None,
    no_pg: bool = False,
    unknown_reference: str = "error",
) -> Dict[str, Any]:
    """The typed options the extension module takes for these keyword
    arguments (checked as :func:`sort_options` checks them), with
    ``command_line``: ``alnsort sort`` and those options, the command the
    run stands for."""
    words = sort_options(
        order=order,
        threads=threads,
        max_memory=max_memory,
        level=level,
        output_format=output_format,
        tag=tag,
        tmp_dir=tmp_dir,
        no_pg=no_pg,
        unknown_reference=unknown_reference,
    )
    return {
        "order": order,
        "threads": threads,
        "max_memory": None if max_memory is None else str(max_memory),
        "level": level,
        "output_format": output_format,
        "tag": tag,
        "tmp_dir": None if tmp_dir is None else _path(tmp_dir, "tmp_dir"),
        "no_pg": no_pg,
        "unknown_reference": unknown_reference,
        "command_line": [_alnsort.ARGV0, "sort", *words],
    }


def sort(
    input: PathArg,
    output: PathArg,
    *,
    order: str = "coordinate",
    threads: int = 1,
    max_memory: Union[str, int, None] = None,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    index: Union[bool, PathArg] = False,
    tag: Optional[str] = None,
    tmp_dir: Optional[PathArg] = None,
    no_pg: bool = False,
    markdup: bool = False,
    metrics: Optional[PathArg] = None,
    unknown_reference: str = "error",
) -> Dict[str, Any]:
    """Sort the SAM or BAM file ``input`` into ``output`` and return the
    run's statistics.

    The records and header edits are those of ``samtools sort`` 1.24; the
    output appears (renamed into place) only when the run succeeds.

    Arguments (each maps onto an ``alnsort sort`` option):

    * ``order``: ``"coordinate"`` (default), ``"name"`` (``-n``, natural
      read-name order), ``"name-lexicographic"`` (``-N``) or
      ``"template-coordinate"`` (``--template-coordinate``) or
      ``"minimiser"`` (``-M``, samtools' minimiser order for unplaced reads).
    * ``tag``: sort by the value of this two-letter aux tag first, then by
      ``order`` (``-t TAG``).
    * ``threads``: worker threads (``-@``; below 2 is single-threaded).
    * ``max_memory``: budget for the whole run (``--max-memory``): a size
      such as ``"1.5G"``, ``"800M"``, ``"80%"``, or an int of bytes.
    * ``level``: compression level 0-9 (``-l``).
    * ``output_format``: ``"bam"`` or ``"sam"``, with an optional
      ``",level=N"`` (``-O``); by default the output name's extension decides.
    * ``index``: ``True`` writes ``OUTPUT.csi`` (``--write-index``); a path
      names the index (``.bai`` for BAI). Coordinate order and BAM only.
    * ``tmp_dir``: directory for the run's private temporary directory (``-T``).
    * ``no_pg``: add no ``@PG`` line (``--no-PG``).
    * ``unknown_reference``: ``"error"`` (default: a SAM record whose RNAME
      or RNEXT is not in the header stops the run, naming its line) or
      ``"unmapped"`` (samtools' behaviour: such records become unmapped and
      are counted in the report's ``unknown_reference_records``).
    * ``markdup``: mark duplicates as Picard MarkDuplicates 3.4.0 does, in
      the same pass (``--markdup``); the report then has a ``markdup``
      object of counts.
    * ``metrics``: with ``markdup=True``, write Picard's DuplicationMetrics
      text to this path (``--metrics``).

    ``input`` and ``output`` are ``str`` or ``os.PathLike``; ``"-"``
    (standard input or output) is refused with ``ValueError``.

    Returns the report that ``--stats-json`` writes, as a dict:
    ``records_in``, ``records_out``, ``bytes_out``, ``runs_written``,
    ``wall_s``, ``phases`` and the other fields of docs/stats-json.md.

    Raises :class:`AlnsortError` (:class:`AlnsortIOError` for I/O causes)
    with the command's message when an option is refused or the run fails;
    ``TypeError``/``ValueError`` for a wrong Python argument.
    The GIL is released while the sort runs, so other Python threads (and
    other sorts) run meanwhile.
    """
    argv = sort_argv(
        input,
        output,
        order=order,
        threads=threads,
        max_memory=max_memory,
        level=level,
        output_format=output_format,
        index=index,
        tag=tag,
        tmp_dir=tmp_dir,
        no_pg=no_pg,
        markdup=markdup,
        metrics=metrics,
        unknown_reference=unknown_reference,
    )
    options = _keywords(
        order=order,
        threads=threads,
        max_memory=max_memory,
        level=level,
        output_format=output_format,
        tag=tag,
        tmp_dir=tmp_dir,
        no_pg=no_pg,
        unknown_reference=unknown_reference,
    )
    options["command_line"] = argv
    report: Dict[str, Any] = json.loads(
        _alnsort.sort(
            _file(input, "input"),
            _file(output, "output"),
            options,
            index if isinstance(index, bool) else _path(index, "index"),
            markdup,
            None if metrics is None else _path(metrics, "metrics"),
        )
    )
    return report


def merge(
    inputs: Sequence[PathArg],
    output: PathArg,
    *,
    order: str = "coordinate",
    tag: Optional[str] = None,
    threads: int = 1,
    level: Optional[int] = None,
    output_format: Optional[str] = None,
    index: Union[bool, PathArg] = False,
    no_pg: bool = False,
    force: bool = False,
    combine_rg: bool = False,
    combine_pg: bool = False,
    seed: int = 0,
    region: Optional[str] = None,
) -> None:
    """Merge the sorted files ``inputs`` (SAM, BAM or CRAM, each sorted in
    ``order``) into ``output`` as ``alnsort merge`` (``samtools merge``
    1.24) does, in this process without the GIL.

    ``order``, ``tag``, ``threads``, ``level``, ``output_format``, ``index``
    and ``no_pg`` mean what they mean for :func:`sort` (for merge,
    ``order``/``tag`` say how the inputs are sorted); ``force`` overwrites
    an existing output (``-f``; without it an existing output is refused as
    samtools refuses it); ``combine_rg``/``combine_pg`` merge ``@RG``/``@PG``
    lines with the same ID (``-c``/``-p``); ``seed`` seeds the suffixes of
    renamed IDs (``-s``; the command's default is the time, this one's is 0
    so a call is reproducible); ``region`` merges only the records
    overlapping it (``-R``, indexed inputs).

    Raises :class:`AlnsortError` (:class:`AlnsortIOError` for I/O causes)
    with ``alnsort merge``'s message; ``TypeError``/``ValueError`` for a
    wrong Python argument. The output appears only when the merge succeeds.
    """
    if isinstance(inputs, (str, os.PathLike)):
        raise TypeError("inputs must be a sequence of paths (a list), not one path")
    ins = [_file(p, "input") for p in inputs]
    if not ins:
        raise ValueError("inputs is empty: name the sorted files to merge")
    out = _file(output, "output")
    for flag, what in ((force, "force"), (combine_rg, "combine_rg"), (combine_pg, "combine_pg")):
        _check(flag, (bool,), what)
    _check(seed, (int,), "seed")
    if region is not None:
        _check(region, (str,), "region")
    if order == "minimiser":
        raise ValueError("order 'minimiser' is not an order alnsort merge (samtools merge) reads")
    options = _keywords(
        order=order, threads=threads, level=level, output_format=output_format, tag=tag, no_pg=no_pg
    )
    # The @PG CL: the alnsort merge command these arguments stand for.
    words = [w for w in options["command_line"][2:]]
    if force:
        words.append("-f")
    words += [w for flag, w in ((combine_rg, "-c"), (combine_pg, "-p")) if flag]
    words += ["-s", str(seed)]
    if region is not None:
        words += ["-R", region]
    idx = index if isinstance(index, bool) else _path(index, "index")
    if idx is True:
        words.append("--write-index")
    target = out if isinstance(idx, bool) else f"{out}##idx##{idx}"
    if not isinstance(idx, bool):
        words.append("--write-index")
    options["command_line"] = [_alnsort.ARGV0, "merge", *words, "-o", target, *ins]
    _alnsort.merge(ins, out, options, idx, force, combine_rg, combine_pg, seed, region)
