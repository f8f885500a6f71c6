"""``python -m alnsort.ray``: the command line read by ``alnsort sort``'s
parser, with the Ray driver's own options and those it refuses by name."""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Any, Dict, List, Optional

from .. import AlnsortError, _alnsort, option_keywords

# alnsort sort's duplicate-marking options taken by the driver, from the
# engine's table (its group "Duplicate marking"): (option, takes a value).
# --markdup and --metrics are sort()'s own keywords.
# samtools markdup's options (--markdup=samtools, group "Duplicate marking
# as samtools markdup"): the driver's tasks mark as Picard, so they are refused.
SAMTOOLS_MARKDUP_OPTIONS = frozenset(
    name for name, _, group in _alnsort.sort_option_table() if group == "samtoolsmarkdup"
)
MARKDUP_OPTIONS = tuple(
    (name, value is not None)
    for _, name, value in _alnsort.markdup_options()
    if name not in ("--markdup", "--metrics") and name not in SAMTOOLS_MARKDUP_OPTIONS
)


def _progress_given(a: Dict[str, Any]) -> bool:
    """Whether the command line asks for progress lines (``--progress``;
    the last of ``--progress``/``--no-progress`` counts)."""
    on = False
    for name, _ in a["given_values"]:
        if name in ("--progress", "--no-progress"):
            on = name == "--progress"
    return on


def _markdup_kwargs(a: Dict[str, Any]) -> Dict[str, Any]:
    """``sort()``'s duplicate-marking keywords from the options of the
    command line (checked by ``alnsort sort``'s parser, which also refuses
    the group's options without ``--markdup``)."""
    markdup, metrics, opts = False, None, {}
    names = {opt for opt, _ in MARKDUP_OPTIONS}
    keyword = {name: key for key, (name, _, _) in option_keywords("sort").items()}
    for name, value in a["given_values"]:
        if name == "--markdup":
            if value not in (None, "picard"):
                raise AlnsortError(
                    f"--markdup={value} is not supported by the Ray driver: its tasks mark duplicates "
                    "as Picard does (--markdup); run alnsort sort --markdup=samtools on one machine"
                )
            markdup = True
        elif name == "--metrics":
            metrics = value
        elif name in names:
            opts[keyword[name]] = True if value is None else value
    if not markdup:
        return {}
    return {"markdup": True, "metrics": metrics, "markdup_options": opts}


# ---- python -m alnsort.ray ----------------------------------------------------

#: The Ray driver's own options, read beside ``alnsort sort``'s (by the
#: same parser: ``--NAME VALUE``, ``--NAME=VALUE`` or a unique prefix), as
#: (name, value name or None, help).
RAY_OPTIONS = (
    ("partitions", "R", "reduce tasks = output parts [input size / 64 MiB]"),
    ("splits", "S", "map tasks [input size / 64 MiB]"),
    ("sharded", None, "write -o as a directory of indexed BAMs, one per partition"),
    ("index-format", "bai|csi", "the kind of --write-index's index [csi; a ##idx## name ending .bai: bai]"),
    ("address", "ADDR", "Ray cluster address (HOST:PORT of the head, or 'auto'); default: RAY_ADDRESS, "
     "a cluster started here by `ray start`, else a new local Ray"),
    ("work-dir", "DIR", "shared directory for the parts [beside the output]"),
    ("max-retries", "N", "retries per task after a lost worker or node [3]"),
    ("decision-buckets", "B", "with --markdup: the duplicate decision's end and name buckets "
     "(join and decide tasks) [max(splits, partitions), at most 25000 / splits]; 0: one decide task over "
     "the whole input (several inputs grouped by name always)"),
    ("stats", None, "print the run's statistics as JSON on stdout"),
)

#: ``alnsort sort``'s options (named as its messages name them) that the Ray
#: driver honours; every other option of its table is refused by name
#: (:data:`REFUSED` says why), never ignored.
HONOURED = frozenset(
    {
        "-n", "-N", "-t", "--template-coordinate", "-M",  # order
        "-o", "-O", "--output-fmt-option", "-l", "-u", "--write-index", "--no-PG",  # output
        "-@", "-m", "--max-memory", "--unknown-reference",  # tasks
        "--progress", "--no-progress",  # a line per phase on standard error
        "-h", "--version",  # -h, --help
        "--markdup", "--metrics",  # duplicate marking, and the options of MARKDUP_OPTIONS
    }
    | {opt for opt, _ in MARKDUP_OPTIONS}
)

#: Why an option of ``alnsort sort`` that the Ray driver does not honour is
#: refused (options alnsort refuses itself keep alnsort's message).
REFUSED = {
    "-I": "minimiser index options are not passed to the map tasks yet",
    "-K": "minimiser options are not passed to the map tasks yet",
    "-w": "minimiser options are not passed to the map tasks yet",
    "-R": "minimiser options are not passed to the map tasks yet",
    "-H": "minimiser options are not passed to the map tasks yet",
    "-T": "the tasks' temporary files go under --work-dir",
    "--no-tmp-space-check": "the Ray driver's tasks make no estimate of temporary space to skip",
    "--reference": "CRAM input and output are not supported by the Ray driver yet",
    "--progress-interval": "the Ray driver prints a line per phase (--progress), not at intervals",
    "--stats-json": "the Ray driver reports its statistics with --stats",
    "--verbosity": "the Ray driver has no verbosity levels",
    "--resume": "the Ray driver does not resume a killed run (docs/cluster.md: the stage subcommands driven by a workflow manager do)",
}

#: An option of the table that is neither honoured nor in :data:`REFUSED`
#: (one added to ``alnsort sort`` later) is refused with this reason.
REFUSED_OTHER = "not supported by the Ray driver yet"

PROG = "python -m alnsort.ray"


def _why_refused(name: str) -> str:
    if name in SAMTOOLS_MARKDUP_OPTIONS:
        return "an option of --markdup=samtools, which the driver does not run (its tasks mark duplicates as Picard)"
    return REFUSED.get(name, REFUSED_OTHER)


def help_text() -> str:
    """``python -m alnsort.ray --help``: the Ray driver's own options, then
    every option of ``alnsort sort`` (the same table and help), then those
    the driver refuses."""
    lines = [
        f"Usage: {PROG} sort [options] -o OUT.bam IN.bam [IN2.bam ...]",
        "",
        "Sorts BAM files on a Ray cluster into the file `alnsort sort` writes (several",
        "inputs are sorted together, their headers merged, as by alnsort sort IN1 IN2).",
        "The command line is read by alnsort sort's own parser: its options below mean",
        "what they mean there (-@ and -m per task, each task reserving -@ CPUs; -m is",
        "taken as the task's --max-memory, -m x -@), plus the Ray driver's own.",
        "",
        "Ray driver options:",
    ]
    for name, value, text in RAY_OPTIONS:
        left = f"    --{name}" + (f" {value}" if value else "")
        lines += textwrap.wrap(text, 80, initial_indent=f"{left:<27}", subsequent_indent=" " * 27)
    lines += ["", "alnsort sort's options:", ""]
    lines.append(_alnsort.sort_help().rstrip("\n"))
    lines += ["", "Refused by the Ray driver (each named when used):"]
    for name, synopsis, group in _alnsort.sort_option_table():
        if name in HONOURED or group == "unsupported":
            continue
        left = f"  {synopsis:<25}"
        if len(left) > 27:
            lines.append(left.rstrip())
            left = " " * 27
        lines += textwrap.wrap(_why_refused(name), 80, initial_indent=left, subsequent_indent=" " * 27)
    lines += [
        "  CRAM input or output     the distributed stages read BAM and write BAM or SAM",
        "  standard input, output   name the input files and -o FILE",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: List[str]) -> Dict[str, Any]:
    """Reads ``python -m alnsort.ray sort``'s arguments (after ``sort``)
    with ``alnsort sort``'s parser and option table (the binding's
    :func:`alnsort._alnsort.parse_sort_args`), refuses by name what the
    driver cannot honour, and returns the resolved options with the Ray
    driver's own under ``"ray"``. Raises :class:`AlnsortError` with the
    message ``alnsort sort`` would print, or naming the refused option."""
    extras = [(name, value is not None) for name, value, _ in RAY_OPTIONS]

    def refuse(given: List[str]) -> None:
        for name in given:
            if name not in HONOURED:
                raise AlnsortError(f"{name} is not supported by the Ray driver: {_why_refused(name)}")

    a = _alnsort.parse_sort_args(PROG, list(argv), extras, refuse)
    _markdup_kwargs(a)  # refuses --markdup=samtools by name
    ray: Dict[str, Any] = {"max-retries": 3}
    for name, value in a["extra"]:
        if name in ("partitions", "splits", "max-retries", "decision-buckets"):
            try:
                ray[name] = int(value)
            except ValueError:
                raise AlnsortError(f"--{name} {value}: expected a whole number") from None
        elif name == "index-format":
            if value not in ("bai", "csi"):
                raise AlnsortError(f"--index-format {value}: expected 'bai' or 'csi'")
            ray[name] = value
        else:
            ray[name] = True if value is None else value
    a["ray"] = ray
    if a["action"] != "run":
        return a
    if "decision-buckets" in ray:
        if not _markdup_kwargs(a):
            raise AlnsortError("--decision-buckets is duplicate marking's: it needs --markdup")
        if ray["decision-buckets"] < 0:
            raise AlnsortError(f"--decision-buckets {ray['decision-buckets']}: expected a whole number")
    if not a["inputs"] or "-" in a["inputs"]:
        raise AlnsortError("the Ray driver reads files: name the input BAM files (not standard input)")
    if a["output"] is None:
        raise AlnsortError("the Ray driver writes a file: name it with -o FILE (not standard output)")
    if a["format"] == "cram":
        raise AlnsortError(
            "CRAM output is not supported by the Ray driver yet (the distributed stages write BAM or SAM): "
            "sort to BAM, or use alnsort sort"
        )
    if a["format"] == "sam.gz":
        raise AlnsortError("BGZF-compressed SAM output is not supported by the Ray driver yet: write BAM or SAM")
    for p in a["inputs"]:
        try:
            with open(p, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise AlnsortError(f"cannot open input {p}: {e.strerror or e}") from None
        if magic == b"CRAM":
            raise AlnsortError(
                f"{p}: CRAM input is not supported by the Ray driver yet (the distributed stages read BAM): "
                "convert it first, or use alnsort sort"
            )
    if a["index"] is not None:
        kind, path = a["index"]
        if "index-format" in ray and not any("##idx##" in x for x in argv):
            # --index-format names the kind when no ##idx## name does.
            kind = ray["index-format"]
            path = a["output"] + "." + kind
        if ray.get("sharded") and path != a["output"] + "." + kind:
            raise AlnsortError("--sharded indexes each shard beside it: an index name (##idx##) cannot be honoured")
        a["index"] = (kind, path)
    return a


def main(argv: Optional[List[str]] = None) -> int:
    import json

    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] in ("--help", "-h", "help"):
        sys.stdout.write(help_text())
        return 0
    if not args_in or args_in[0] != "sort":
        print(f"usage: {PROG} sort [options] -o OUT.bam IN.bam...", file=sys.stderr)
        print(f"Try '{PROG} --help' for the options.", file=sys.stderr)
        return 2
    try:
        a = parse_args(args_in[1:])
    except AlnsortError as e:
        print(f"alnsort.ray sort: {e}", file=sys.stderr)
        print(f"Try '{PROG} --help' for the options.", file=sys.stderr)
        return 1
    if a["action"] == "help":
        sys.stdout.write(help_text())
        return 0
    if a["action"] == "version":
        from .. import __version__

        print(f"alnsort {__version__}")
        return 0
    for w in a["warnings"]:
        print(f"[W::alnsort] {w}", file=sys.stderr)
    ray = a["ray"]
    threads = max(1, a["threads"])
    max_memory = a["max_memory"]
    if max_memory is None and a["mem_per_thread"] is not None:
        max_memory = str(a["mem_per_thread"] * threads)
    out = a["output"]
    index = a["index"]
    from . import sort

    try:
        stats = sort(
            a["inputs"],
            out,
            order=a["order"],
            tag=a["tag"],
            unknown_reference=a["unknown_reference"],
            threads=threads,
            max_memory=max_memory,
            # A dataset's zstd level travels in its -O options.
            level=None if a["format"].startswith("parquet") else a["level"],
            output_format=a["format"],
            index=index[0] if index is not None else False,
            no_pg=a["no_pg"],
            partitions=ray.get("partitions"),
            splits=ray.get("splits"),
            sharded=bool(ray.get("sharded")),
            address=ray.get("address"),
            work_dir=ray.get("work-dir"),
            max_retries=ray["max-retries"],
            argv=["python", "-m", "alnsort.ray"] + args_in,
            decision_buckets=ray.get("decision-buckets"),
            progress=_progress_given(a),
            **_markdup_kwargs(a),
        )
        if index is not None and not ray.get("sharded"):
            # The stages write OUTPUT.bai or OUTPUT.csi; a ##idx## name moves it.
            written = f"{out}.{index[0]}"
            if os.path.abspath(written) != os.path.abspath(index[1]):
                os.replace(written, index[1])
    except (AlnsortError, OSError, ValueError) as e:
        print(f"alnsort.ray sort: {e}", file=sys.stderr)
        return 1
    if ray.get("stats"):
        print(json.dumps(stats, indent=1))
    return 0
