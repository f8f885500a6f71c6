"""Shared plumbing for the differential tests: locating and running the
alnsort binary, generating inputs once per session, caching the oracle's
answers, and comparing texts with a diagnostic that shows WHERE two outputs
part ways (a bare "assert a == b" on 30 MB of SAM is useless).

The binary is `$ALNSORT_BIN` if set, else `target/release/alnsort` (or
`$CARGO_TARGET_DIR/release/alnsort`). `tests/samtools_as_alnsort.sh` can stand
in for it to validate this harness against samtools itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import gen
import oracle

REPO_ROOT = Path(__file__).resolve().parent.parent
# One alnsort call sorts at most ~40 MB here; 10 minutes means "hung".
RUN_TIMEOUT_S = 600

# Sort orders under test: name -> samtools sort options.
ORDERS: dict[str, list[str]] = {
    "coord": [],
    "name": ["-n"],
    "lexname": ["-N"],
    "tag_XI": ["-t", "XI"],
    "tag_XT": ["-t", "XT"],
    "tag_RG_name": ["-t", "RG", "-n"],
    "template": ["--template-coordinate"],
}

# Resource configurations: output must not depend on any of them.
CONFIGS: dict[str, list[str]] = {
    "default": [],
    "m1M": ["-m", "1M"],
    "t2": ["-@", "2"],
    "t3_m1M": ["-@", "3", "-m", "1M"],
    "maxmem16M": ["--max-memory", "16M"],  # alnsort only; samtools has no such option
}
ALNSORT_ONLY_CONFIGS = {"maxmem16M"}


def alnsort_path() -> str:
    env = os.environ.get("ALNSORT_BIN")
    if env:
        return env
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return str(Path(target) / "release" / "alnsort")


def run_alnsort(
    args: list[str], *, stdin_path: str | None = None, cwd: str | None = None, stdin_bytes: bytes | None = None
) -> subprocess.CompletedProcess:
    """`alnsort sort ARGS`, stdout/stderr captured as bytes; never raises on exit status."""
    argv = [alnsort_path(), "sort", *args]
    if stdin_path is not None:
        with open(stdin_path, "rb") as fh:
            return subprocess.run(
                argv, stdin=fh, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, timeout=RUN_TIMEOUT_S
            )
    feed = {"input": stdin_bytes} if stdin_bytes is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, timeout=RUN_TIMEOUT_S, **feed)


def check_ok(res: subprocess.CompletedProcess) -> None:
    """Fail with alnsort's stderr when it did not exit 0."""
    if res.returncode != 0:
        raise AssertionError(
            f"alnsort {' '.join(map(str, res.args[1:]))} exited {res.returncode}; stderr:\n"
            + res.stderr.decode("utf-8", "replace")[-4000:]
        )


def _xi(line: str) -> str:
    m = re.search(r"\tXI:i:(-?\d+)", line)
    return f" [XI {m.group(1)}]" if m else ""


def assert_same_text(expected: str, actual: str, what: str) -> None:
    """Equal texts, or an AssertionError naming the first differing line with context."""
    if expected == actual:
        return
    exp, act = expected.splitlines(), actual.splitlines()
    i = 0
    while i < min(len(exp), len(act)) and exp[i] == act[i]:
        i += 1

    def cut(s: str) -> str:
        return s if len(s) <= 300 else s[:300] + f"...(+{len(s) - 300} chars)"

    lines = [f"{what}: outputs differ at line {i + 1} (samtools {len(exp)} lines, alnsort {len(act)} lines)"]
    for j in range(max(0, i - 2), i):
        lines.append(f"    same     {j + 1}: {cut(exp[j])}")
    for j in range(i, min(i + 4, max(len(exp), len(act)))):
        if j < len(exp):
            lines.append(f"  samtools  {j + 1}: {cut(exp[j])}{_xi(exp[j])}")
        if j < len(act):
            lines.append(f"  alnsort   {j + 1}: {cut(act[j])}{_xi(act[j])}")
    if sorted(exp) == sorted(act):
        lines.append("  (same multiset of lines: an ORDER difference)")
    raise AssertionError("\n".join(lines))


class Inputs:
    """Named generated inputs, written once per session as SAM and (on
    demand) BAM. BAM is made by samtools so both sorters read the same bytes."""

    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def sam(self, name: str) -> str:
        path = self.root / f"{name}.sam"
        if not path.exists():
            text = _make_text(name)
            tmp = path.with_suffix(".sam.part")
            tmp.write_text(text)
            tmp.rename(path)
        return str(path)

    def bam(self, name: str) -> str:
        path = self.root / f"{name}.bam"
        if not path.exists():
            tmp = str(path) + ".part.bam"
            oracle.to_bam(self.sam(name), tmp)
            os.rename(tmp, path)
        return str(path)

    def get(self, name: str, fmt: str) -> str:
        return self.sam(name) if fmt == "sam" else self.bam(name)


def _make_text(name: str) -> str:
    if name in gen.NAMED:
        return gen.NAMED[name]()
    if name.startswith("hdr_"):
        return gen.header_variant_input(name[len("hdr_") :])
    raise KeyError(f"no generator for input {name!r}")


class OracleCache:
    """samtools' sorted SAM text per (input, options): each is computed once.
    Inputs are sorted from the same file alnsort reads."""

    def __init__(self):
        self.cache: dict[tuple[str, tuple[str, ...]], subprocess.CompletedProcess] = {}

    def result(self, input_path: str, args: list[str]) -> subprocess.CompletedProcess:
        key = (input_path, tuple(args))
        if key not in self.cache:
            self.cache[key] = oracle.samtools("sort", *args, "-O", "SAM", "-o", "-", input_path, check=False)
        return self.cache[key]

    def sorted_text(self, input_path: str, args: list[str]) -> str:
        res = self.result(input_path, args)
        if res.returncode != 0:
            raise RuntimeError(
                f"oracle: samtools sort {' '.join(args)} {input_path} failed:\n" + res.stderr.decode("utf-8", "replace")
            )
        return res.stdout.decode()


def leftover_files(directory: Path, keep: set[str]) -> list[str]:
    """Files in DIRECTORY other than KEEP (temp files a sorter forgot)."""
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def copy(src: str, dst: str) -> str:
    shutil.copyfile(src, dst)
    return dst


def pg_fields(line: str) -> dict[str, str]:
    out = {}
    for f in line.rstrip("\n").split("\t")[1:]:
        if len(f) >= 3 and f[2] == ":":
            out[f[:2]] = f[3:]
    return out


def added_pg_lines(input_text: str, output_text: str) -> list[str]:
    """@PG lines in OUTPUT that are not in INPUT's header (the sorter's own)."""
    before = set(oracle.pg_lines(input_text))
    return [line for line in oracle.pg_lines(output_text) if line not in before]


def _cram_itf8(data: bytes, at: int) -> tuple[int, int]:
    """The ITF8 integer at `at` (CRAM 3 §2.3) and the offset after it."""
    b0 = data[at]
    n = min(8 - (b0 ^ 0xFF).bit_length(), 4)
    if n == 4:
        v = ((b0 & 0x0F) << 28) | (data[at + 1] << 20) | (data[at + 2] << 12) | (data[at + 3] << 4) | (data[at + 4] & 0x0F)
    else:
        v = b0 & (0xFF >> (n + 1))
        for k in range(n):
            v = (v << 8) | data[at + 1 + k]
    return (v - (1 << 32) if v >= 1 << 31 else v), at + 1 + n


def cram_containers(data: bytes):
    """(container index, reference id, body offset, end offset) of every
    container of a CRAM file, the header container as index -1."""

    def ltf8(at: int) -> int:
        n = 8 - (data[at] ^ 0xFF).bit_length()
        return at + 1 + n

    at = 26  # file definition
    index = -1
    while at < len(data):
        length = int.from_bytes(data[at:at + 4], "little", signed=True)
        ref_id, p = _cram_itf8(data, at + 4)
        for _ in range(3):
            _, p = _cram_itf8(data, p)
        p = ltf8(p)
        p = ltf8(p)
        _, p = _cram_itf8(data, p)
        n, p = _cram_itf8(data, p)
        for _ in range(n):
            _, p = _cram_itf8(data, p)
        body = p + 4
        yield index, ref_id, body, body + length
        index += 1
        at = body + length


def cram_blocks(data: bytes):
    """(container index, block offset, method, data offset, data size) of
    every block in the slices of a CRAM file's data containers."""
    for index, _, body, end in cram_containers(data):
        q = body
        while q < end:
            method = data[q]
            _, r = _cram_itf8(data, q + 2)
            size, r = _cram_itf8(data, r)
            _, r = _cram_itf8(data, r)
            yield index, q, method, r, size
            q = r + size + 4
