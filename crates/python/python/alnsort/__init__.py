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
    "ALIASES",
    "merge",
    "option_keywords",
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


#: ``sort()``'s and ``merge()``'s keywords kept from before every option of
#: the command's table became a keyword, with the keyword each stands for:
#: ``order`` (see :data:`ORDERS`), ``output_format`` (``output_fmt``,
#: ``-O``), ``tmp_dir`` (``tmp_prefix``, ``-T``). ``index`` (``True`` or
#: the index's path) is ``write_index`` with ``-o OUTPUT##idx##PATH``.
ALIASES: Dict[str, str] = {"output_format": "output_fmt", "tmp_dir": "tmp_prefix"}

#: The keyword of each ``order`` value (``None``: coordinate, the default).
_ORDER_KEYWORDS: Dict[str, Optional[str]] = {
    "coordinate": None,
    "name": "name",
    "name-lexicographic": "name_lexicographic",
    "template-coordinate": "template_coordinate",
    "minimiser": "minimiser",
}

#: The keywords the stages take: those of :func:`sort` whose options the
#: engine's table says a stage takes as its own (how records are ordered
#: and written, threads, memory, temporary files:
#: ``_alnsort.stage_option_keywords()``), with ``order`` and the aliases of
#: those (:data:`ALIASES`).
_STAGE_OPTION_KEYWORDS = frozenset(_alnsort.stage_option_keywords())
_STAGE_KEYWORDS = (
    frozenset({"order"})
    | _STAGE_OPTION_KEYWORDS
    | {alias for alias, key in ALIASES.items() if key in _STAGE_OPTION_KEYWORDS}
)

_TABLES: Dict[str, Dict[str, Tuple[str, Optional[str], Optional[str]]]] = {}


def option_keywords(command: str = "sort") -> Dict[str, Tuple[str, Optional[str], Optional[str]]]:
    """Every option of ``alnsort COMMAND``'s table (``"sort"`` or
    ``"merge"``) by its keyword: the long name with ``_`` for ``-`` in lower
    case (``--max-memory``: ``max_memory``, ``--no-PG``: ``no_pg``), or the
    table's name for an option with a short name only (``-n``: ``name``,
    ``-t``: ``tag``, ``-l``: ``level``), mapped to (the option as its
    messages name it, the name of its value or ``None`` for a flag, why
    alnsort refuses it or ``None``)."""
    if command not in _TABLES:
        _TABLES[command] = {k: (name, value, why) for k, name, value, why in _alnsort.option_table(command)}
    return _TABLES[command]


def _options(command: str, kw: Dict[str, Any]) -> Tuple[List[Tuple[str, Optional[str]]], List[str]]:
    """The (keyword, value as text) pairs of these keyword arguments of
    ``sort()`` or ``merge()``, in the order given, and the command-line
    words they stand for. A keyword that is no option of the command is a
    ``TypeError``; a value of the wrong type too; a flag is ``True`` (given)
    or ``False`` (not given), an option's value ``None`` (not given)."""
    table = option_keywords(command)
    pairs: List[Tuple[str, Optional[str]]] = []
    words: List[str] = []
    for key, value in kw.items():
        if key == "order":
            allowed = [o for o in ORDERS if command == "sort" or o != "minimiser"]
            if value == "minimiser" and command == "merge":
                raise ValueError("order 'minimiser' is not an order alnsort merge (samtools merge) reads")
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(f"order must be one of {', '.join(repr(o) for o in allowed)}, not {value!r}")
            keyword = _ORDER_KEYWORDS[value]
            if keyword is None:
                continue
            key, value = keyword, True
        elif key == "unknown_reference" and command == "sort":
            if not isinstance(value, str) or value not in UNKNOWN_REFERENCE:
                raise ValueError(
                    "unknown_reference must be one of "
                    f"{', '.join(repr(v) for v in UNKNOWN_REFERENCE)}, not {value!r}"
                )
            if value == "error":
                continue
        key = ALIASES.get(key, key)
        if key not in table:
            raise TypeError(f"{command}() got an unexpected keyword argument {key!r}")
        name, value_name, _ = table[key]
        if value_name is not None and value_name.startswith("[="):
            # An optional value (``markdup``: True, "picard" or "samtools"),
            # written ``--markdup=samtools`` on the command line.
            _check(value, (bool, str), key)
            if value is True:
                pairs.append((key, None))
                words.append(name)
            elif isinstance(value, str):
                pairs.append((key, value))
                words.append(f"{name}={value}")
        elif value_name is None:
            _check(value, (bool,), key)
            if value:
                pairs.append((key, None))
                words.append(name)
        elif value is not None:
            if isinstance(value, (str, os.PathLike)):
                text = _path(value, key)
            else:
                _check(value, (str, int), key)
                text = str(value)
            pairs.append((key, text))
            words += [name, text]
    return pairs, words


def _index_words(index: Union[bool, PathArg], out: str) -> Tuple[Union[bool, str], List[str], str]:
    """``index=``: the binding's value, the words it adds and the ``-o``
    target (``OUTPUT##idx##PATH`` for a named index)."""
    if isinstance(index, bool):
        return index, (["--write-index"] if index else []), out
    idx = _path(index, "index")
    return idx, ["--write-index"], f"{out}##idx##{idx}"


def _sort_call(
    input: PathArg, output: PathArg, index: Union[bool, PathArg], kw: Dict[str, Any]
) -> Tuple[List[str], List[Tuple[str, Optional[str]]], Union[bool, str]]:
    """The command line, the option pairs and the index of a ``sort()``."""
    if kw.get("metrics") is not None and not kw.get("markdup"):
        raise ValueError("metrics= is the duplicate-marking metrics file: it needs markdup=True")
    inp = _file(input, "input")
    out = _file(output, "output")
    pairs, words = _options("sort", kw)
    idx, index_words, target = _index_words(index, out)
    argv = [_alnsort.ARGV0, "sort", *words, *index_words, "-o", target]
    if inp.startswith("-"):
        argv.append("--")
    argv.append(inp)
    return argv, pairs, idx


def sort_argv(input: PathArg, output: PathArg, *, index: Union[bool, PathArg] = False, **options: Any) -> List[str]:
    """The ``alnsort sort`` command line that :func:`sort` runs for these
    arguments, beginning ``["alnsort", "sort", ...]``; running it in a shell
    writes the same output bytes. Raises what :func:`sort` raises for
    arguments that are refused before any run (``TypeError``,
    ``ValueError``)."""
    return _sort_call(input, output, index, options)[0]


def sort_options(**options: Any) -> List[str]:
    """The ``alnsort sort`` options (no output, input or index) for these
    keyword arguments of :func:`sort`, in the order given; :mod:`alnsort.stages`
    runs every stage with them. Raises ``TypeError``/``ValueError`` for a
    wrong argument."""
    return _options("sort", options)[1]


def _keywords(**options: Any) -> Dict[str, Any]:
    """The typed options the extension module's stages take for these
    keyword arguments (those of :data:`_STAGE_KEYWORDS`), with
    ``command_line``: ``alnsort sort`` and those options, the command the
    run stands for."""
    for key in options:
        if key not in _STAGE_KEYWORDS:
            raise TypeError(f"a stage got an unexpected keyword argument {key!r}")
    pairs, words = _options("sort", options)
    return {"options": pairs, "command_line": [_alnsort.ARGV0, "sort", *words]}


def sort(input: PathArg, output: PathArg, *, index: Union[bool, PathArg] = False, **options: Any) -> Dict[str, Any]:
    """Sort the SAM or BAM file ``input`` (or CRAM) into ``output`` and
    return the run's statistics.

    The records and header edits are those of ``samtools sort`` 1.24; the
    output appears (renamed into place) only when the run succeeds.

    Every option of ``alnsort sort`` is a keyword argument, named after its
    long name (``max_memory=`` is ``--max-memory``, ``write_index=True`` is
    ``--write-index``, ``markdup=True`` is ``--markdup``) or, for an option
    with a short name only, as :func:`option_keywords` lists (``name=True``
    is ``-n``, ``tag="RG"`` is ``-t RG``, ``level=1`` is ``-l 1``,
    ``tmp_prefix=`` is ``-T``, ``kmer=`` is ``-K``). A flag takes
    ``True``/``False``, an option with a value a ``str``, an ``int`` or a
    path (``None``: not given). The keywords come in the order given, as
    options on the command line do. Options ``alnsort sort`` refuses are
    refused by name (:class:`AlnsortError`). Besides them:

    * ``order``: ``"coordinate"`` (default), ``"name"`` (``-n``, natural
      read-name order), ``"name-lexicographic"`` (``-N``),
      ``"template-coordinate"`` (``--template-coordinate``) or
      ``"minimiser"`` (``-M``).
    * ``output_format`` is ``output_fmt`` (``-O``: ``"bam"``, ``"sam"``,
      ``"cram"``, ``"parquet"`` (``output`` is then the dataset's
      directory, docs/columnar.md), with options such as ``",level=N"``);
      ``tmp_dir`` is
      ``tmp_prefix`` (``-T``).
    * ``index``: ``True`` writes ``OUTPUT.csi`` (``--write-index``); a path
      names the index (``.bai`` for BAI). Coordinate order only.
    * ``threads``: worker threads (``-@``; below 2 is single-threaded).
    * ``max_memory``: budget for the whole run: ``"1.5G"``, ``"80%"``, or
      an int of bytes.
    * ``unknown_reference``: ``"error"`` (default) or ``"unmapped"``.
    * ``markdup``: mark duplicates as Picard MarkDuplicates 3.4.0 does, in
      the same pass; the report then has a ``markdup`` object of counts;
      ``metrics``: with ``markdup=True``, Picard's DuplicationMetrics file.
      ``markdup="samtools"`` (``--markdup=samtools``) gives the records of
      ``samtools collate | fixmate -m | sort | markdup`` 1.24 instead (its
      options are keywords too: ``mode="s"``, ``mark_supplementary=True``,
      ``markdup_stats=PATH``, ...; the report has a ``samtools_markdup``
      object); ``markdup="picard"`` is ``markdup=True``.

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
    argv, pairs, idx = _sort_call(input, output, index, options)
    report: Dict[str, Any] = json.loads(
        _alnsort.sort(
            _file(input, "input"),
            _file(output, "output"),
            {"options": pairs, "command_line": argv},
            idx,
        )
    )
    return report


def merge(
    inputs: Sequence[PathArg],
    output: PathArg,
    *,
    index: Union[bool, PathArg] = False,
    seed: int = 0,
    **options: Any,
) -> None:
    """Merge the sorted files ``inputs`` (SAM, BAM or CRAM, each sorted in
    ``order``) into ``output`` as ``alnsort merge`` (``samtools merge``
    1.24) does, in this process without the GIL.

    Every option of ``alnsort merge`` is a keyword argument, named as for
    :func:`sort` (:func:`option_keywords` ``("merge")``): ``force`` (``-f``;
    without it an existing output is refused as samtools refuses it),
    ``combine_rg``/``combine_pg`` (``-c``/``-p``), ``region`` (``-R``,
    indexed inputs), ``threads``, ``level``, ``no_pg``, ``reference``, ...;
    ``order`` (how the inputs are sorted), ``output_format`` and ``index``
    mean what they mean for :func:`sort`. ``seed`` seeds the suffixes of
    renamed IDs (``-s``; the command's default is the time, this one's is 0
    so a call is reproducible).

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
    _check(seed, (int,), "seed")
    pairs, words = _options("merge", options)
    pairs.append(("seed", str(seed)))
    words += ["-s", str(seed)]
    idx, index_words, target = _index_words(index, out)
    # The @PG CL: the alnsort merge command these arguments stand for.
    argv = [_alnsort.ARGV0, "merge", *words, *index_words, "-o", target, *ins]
    _alnsort.merge(ins, out, {"options": pairs, "command_line": argv}, idx)
