"""The reference implementation: samtools 1.24 as bundled in pysam 0.24.1.

Why this exists: alnsort must match samtools 1.24 record for record, and the
only samtools 1.24 we can count on everywhere is the one inside pysam (the
system `samtools`, if any, is a different version). samtools sort keeps
global state between calls in one process (g_sam_order, natural_sort, the
sort tag), so every call here runs in a FRESH Python process.

Run as a script it is a tiny `samtools` stand-in:
    python3 tests/oracle.py sort -n -o out.bam in.sam
stdout is the real file descriptor 1 (so `-o -` streams), samtools' stderr is
forwarded, and the exit status is samtools' own.
"""

from __future__ import annotations

import os
import subprocess
import sys

PYSAM_VERSION = "0.24.1"
SAMTOOLS_VERSION = "1.24"
# Generous per-call limit: the largest test input sorts in about a second.
TIMEOUT_S = 600


def samtools(
    *args: str, stdin: bytes | None = None, check: bool = True, cwd: str | None = None
) -> subprocess.CompletedProcess:
    """Run `samtools ARGS...` (pysam's) in a fresh process; capture stdout/stderr as bytes."""
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, timeout=TIMEOUT_S, **feed)
    if check and res.returncode != 0:
        raise RuntimeError(
            f"oracle: samtools {' '.join(args)} exited {res.returncode}:\n" + res.stderr.decode("utf-8", "replace")
        )
    return res


def sort(args: list[str], input_path: str, output_path: str) -> None:
    """`samtools sort ARGS -o OUTPUT INPUT`."""
    samtools("sort", *args, "-o", output_path, input_path)


def sort_sam_text(args: list[str], input_path: str) -> str:
    """samtools sort output as SAM text (header + records), @PG lines kept."""
    res = samtools("sort", *args, "-O", "SAM", "-o", "-", input_path)
    return res.stdout.decode()


def view(path: str, *regions: str, index: str | None = None) -> str:
    """`samtools view -h` of PATH (optionally REGIONS, with an explicit
    index file) as text. `--no-PG` so view itself adds no @PG line."""
    args = ["view", "-h", "--no-PG"]
    if index is not None:
        args += ["-X", path, index]
    else:
        args.append(path)
    return samtools(*args, *regions).stdout.decode()


def view_records(path: str, *regions: str, index: str | None = None) -> str:
    """Like view() but records only (no header)."""
    args = ["view", "--no-PG"]
    if index is not None:
        args += ["-X", path, index]
    else:
        args.append(path)
    return samtools(*args, *regions).stdout.decode()


def to_bam(sam_path: str, bam_path: str) -> None:
    """Convert SAM to BAM without adding a @PG line."""
    samtools("view", "--no-PG", "-b", "-o", bam_path, sam_path)


def index(bam_path: str, fmt: str = "csi") -> str:
    """`samtools index -c|-b`; returns the index path."""
    if fmt == "csi":
        samtools("index", "-c", bam_path)
        return bam_path + ".csi"
    samtools("index", "-b", bam_path)
    return bam_path + ".bai"


def idxstats(bam_path: str) -> str:
    return samtools("idxstats", bam_path).stdout.decode()


def strip_pg(text: str) -> str:
    """Drop every `@PG` header line (the only header lines allowed to differ)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("@PG\t"))


def header_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if not line.startswith("@"):
            break
        out.append(line)
    return out


def pg_lines(text: str) -> list[str]:
    return [line for line in header_lines(text) if line.startswith("@PG\t")]


def _main(argv: list[str]) -> int:
    import pysam
    from pysam.libcutils import _pysam_dispatch

    if pysam.__version__ != PYSAM_VERSION:
        sys.stderr.write(f"oracle: pysam {pysam.__version__} found, tests need {PYSAM_VERSION}\n")
        return 2
    if not argv:
        sys.stderr.write("usage: oracle.py SAMTOOLS_COMMAND [ARGS...]\n")
        return 2
    if argv[0] == "cat" and not any(a == "-o" or a.startswith("-o") for a in argv[1:]):
        # pysam's samtools cat writes nothing to file descriptor 1 when it
        # is given no -o (samtools itself writes to standard output):
        # name standard output as a file so a pipe gets the bytes.
        argv = ["cat", "-o", "/dev/stdout", *argv[1:]]
    sys.stdout.flush()
    ret, err, _ = _pysam_dispatch("samtools", argv[0], tuple(argv[1:]), catch_stdout=False)
    if err:
        sys.stderr.write(err if isinstance(err, str) else err.decode("utf-8", "replace"))
    return ret


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
