"""The checks of :func:`alnsort.ray.sort`'s arguments: order, output format
and index, progress lines, and the command line of the output's ``@PG``
line."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Optional, Union

from .. import ORDERS, sort_options

PathArg = Union[str, "os.PathLike[str]"]


def _order_options(order: str, tag: Optional[str], unknown_reference: Optional[str]) -> Dict[str, Any]:
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(repr(o) for o in ORDERS)}, not {order!r}")
    out: Dict[str, Any] = {"order": order}
    if tag is not None:
        out["tag"] = tag
    if unknown_reference is not None and unknown_reference != "error":
        out["unknown_reference"] = unknown_reference
    return out


def _index_kind(index: Union[bool, str, None]) -> Optional[str]:
    if index is None or index is False:
        return None
    if index is True:
        return "csi"  # --write-index writes FILE.csi, as alnsort sort does
    if index in ("bai", "csi"):
        return index
    raise ValueError(f"index must be True, False, 'bai' or 'csi', not {index!r}")


def _output_format(output: str, output_format: Optional[str]) -> str:
    if output_format is None:
        return "sam" if output.endswith(".sam") else "bam"
    fmt = output_format.lower()
    base = fmt.split(",")[0]
    if base not in ("bam", "sam", "parquet") or (base != "parquet" and "," in fmt):
        raise ValueError(
            f"output_format must be 'bam', 'sam' or 'parquet' (with its options: "
            f"'parquet,codec=snappy'), not {output_format!r}"
        )
    return fmt


def _progress(progress: Union[bool, Callable[[str], None]]) -> Callable[[str], None]:
    """Where the driver's progress lines go: standard error with
    ``True``, a callable's argument, or nowhere."""
    if callable(progress):
        return progress
    if not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or a callable, not {progress!r}")
    if not progress:
        return lambda line: None
    return lambda line: print(f"[alnsort.ray] {line}", file=sys.stderr, flush=True)


def _argv(
    ins: List[str],
    out: str,
    order: Dict[str, Any],
    level: Optional[int],
    fmt: str,
    idx: Optional[str],
    parts: int,
    splits: int,
    sharded: bool,
    markdup: Optional[Dict[str, Any]] = None,
) -> List[str]:
    """The command line for the @PG line of a run started from Python."""
    argv = ["python", "-m", "alnsort.ray", "sort"] + ORDERS[order["order"]]
    if "tag" in order:
        argv += ["-t", order["tag"]]
    if level is not None:
        argv += ["-l", str(level)]
    argv += ["-O", fmt]
    if idx is not None:
        argv.append("--write-index")
    argv += ["--partitions", str(parts), "--splits", str(splits)]
    if sharded:
        argv.append("--sharded")
    if markdup is not None:
        argv += sort_options(**markdup)
    return argv + ["-o", out] + ins
