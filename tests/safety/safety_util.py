"""Byte-level builders and run helpers for the operational-safety tests.

Why this exists: the corruption table needs BAM files that are wrong in one
precise way (a CRC, one length field, a cut at a chosen byte), which no
writer library will produce; the signal, no-space and memory tests need
large inputs generated quickly and a way to run alnsort while watching its
temp directory. Everything here builds bytes by hand from the SAM spec
(section 4.1 BGZF, section 4.2 BAM) with `zlib`, so each test can say exactly
which byte it broke.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness  # noqa: E402

# SAM spec 4.1.2: the 28-byte empty block that ends every BGZF file.
EOF_BLOCK = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
# htslib's largest block payload (bgzf.c BGZF_BLOCK_SIZE 0xff00).
MAX_PAYLOAD = 0xFF00
# SAM spec 4.2: magic of the uncompressed BAM stream.
BAM_MAGIC = b"BAM\x01"
SEQ_CODES = {c: i for i, c in enumerate("=ACMGRSVTWYHKDBN")}
CIGAR_OPS = "MIDNSHP=X"


# ---- BGZF ---------------------------------------------------------------------


def default_signals():
    """The handled signals at their default action in the child, whatever
    the test run inherited: a test suite started in the background by a
    non-interactive shell has SIGINT ignored, and alnsort keeps an ignored
    signal ignored (test_ignored_signal_stays_ignored), so a SIGINT sent to
    check the handling would do nothing there."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def bgzf_block(payload: bytes, level: int = 6, *, crc: int | None = None, isize: int | None = None) -> bytes:
    """One BGZF block holding PAYLOAD (raw deflate, gzip header with the BC
    extra field). CRC/ISIZE override the footer to make a block whose content
    is fine but whose checks are not."""
    co = zlib.compressobj(level, zlib.DEFLATED, -15)
    cdata = co.compress(payload) + co.flush()
    bsize = 18 + len(cdata) + 8  # header (18) + data + CRC32 + ISIZE
    assert bsize <= 65536, "payload does not compress into one block"
    head = b"\x1f\x8b\x08\x04" + b"\0\0\0\0" + b"\0\xff" + struct.pack("<H", 6) + b"BC" + struct.pack("<HH", 2, bsize - 1)
    c = zlib.crc32(payload) if crc is None else crc
    n = len(payload) if isize is None else isize
    return head + cdata + struct.pack("<II", c & 0xFFFFFFFF, n & 0xFFFFFFFF)


def bgzf_blocks(payload: bytes, chunk: int = MAX_PAYLOAD) -> list[bytes]:
    """PAYLOAD cut into blocks of at most CHUNK bytes (no EOF block)."""
    return [bgzf_block(payload[i : i + chunk]) for i in range(0, len(payload), chunk)]


# ---- BAM ----------------------------------------------------------------------

DEFAULT_REFS: list[tuple[str, int]] = [("chr1", 1_000_000), ("chr2", 500_000)]


def bam_header(text: str | None = None, refs: list[tuple[str, int]] | None = None) -> bytes:
    """The uncompressed BAM header: magic, l_text, text, n_ref, refs."""
    refs = DEFAULT_REFS if refs is None else refs
    if text is None:
        text = "@HD\tVN:1.6\tSO:unsorted\n" + "".join(f"@SQ\tSN:{n}\tLN:{ln}\n" for n, ln in refs)
    t = text.encode()
    out = BAM_MAGIC + struct.pack("<I", len(t)) + t + struct.pack("<i", len(refs))
    for name, ln in refs:
        nb = name.encode() + b"\0"
        out += struct.pack("<i", len(nb)) + nb + struct.pack("<I", ln)
    return out


def reg2bin(beg: int, end: int) -> int:
    """SAM spec 5.3 (BAI binning), used for the bin field."""
    end -= 1
    if beg >> 14 == end >> 14:
        return ((1 << 15) - 1) // 7 + (beg >> 14)
    if beg >> 17 == end >> 17:
        return ((1 << 12) - 1) // 7 + (beg >> 17)
    if beg >> 20 == end >> 20:
        return ((1 << 9) - 1) // 7 + (beg >> 20)
    if beg >> 23 == end >> 23:
        return ((1 << 6) - 1) // 7 + (beg >> 23)
    if beg >> 26 == end >> 26:
        return ((1 << 3) - 1) // 7 + (beg >> 26)
    return 0


@dataclass
class Rec:
    """One BAM record's fields; `raw()` packs them (without block_size),
    `framed()` with it. Fields can be overridden after packing by the tests."""

    name: str = "r1"
    flag: int = 0
    ref_id: int = 0
    pos: int = 99  # 0-based
    mapq: int = 60
    cigar: list[tuple[int, str]] = field(default_factory=lambda: [(10, "M")])
    seq: str = "ACGTACGTAC"
    qual: bytes | None = None
    next_ref_id: int = -1
    next_pos: int = -1
    tlen: int = 0
    aux: bytes = b"XI" + b"i" + struct.pack("<i", 7)

    def raw(self) -> bytes:
        name = self.name.encode() + b"\0"
        ref_len = sum(n for n, op in self.cigar if op in "MDN=X") or 1
        bin_ = reg2bin(max(self.pos, 0), max(self.pos, 0) + ref_len)
        fixed = struct.pack(
            "<iiBBHHHIiii",
            self.ref_id,
            self.pos,
            len(name),
            self.mapq,
            bin_,
            len(self.cigar),
            self.flag,
            len(self.seq),
            self.next_ref_id,
            self.next_pos,
            self.tlen,
        )
        cig = b"".join(struct.pack("<I", n << 4 | CIGAR_OPS.index(op)) for n, op in self.cigar)
        codes = [SEQ_CODES[c] for c in self.seq]
        if len(codes) % 2:
            codes.append(0)
        seq = bytes(codes[i] << 4 | codes[i + 1] for i in range(0, len(codes), 2))
        qual = self.qual if self.qual is not None else bytes([30]) * len(self.seq)
        return fixed + name + cig + seq + qual + self.aux

    def framed(self) -> bytes:
        r = self.raw()
        return struct.pack("<I", len(r)) + r


def records(n: int, seed: int = 1, refs: int = 2) -> list[bytes]:
    """N valid framed records with distinct names and shuffled positions."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            Rec(
                name=f"read{i:06d}",
                ref_id=rng.randrange(refs),
                pos=rng.randrange(400_000),
                seq="".join(rng.choice("ACGT") for _ in range(10)),
                aux=b"XIi" + struct.pack("<i", i),
            ).framed()
        )
    return out


def bam_file(header: bytes, recs: list[bytes], *, eof: bool = True, record_blocks: bool = True) -> bytes:
    """A BGZF file: the header in blocks of its own, then the records packed
    into blocks (htslib-style, a record does not straddle unless it must),
    then the EOF block."""
    out = b"".join(bgzf_blocks(header))
    out += b"".join(bgzf_blocks(pack_records(recs))) if record_blocks else b""
    return out + (EOF_BLOCK if eof else b"")


def pack_records(recs: list[bytes]) -> bytes:
    return b"".join(recs)


def block_offsets(data: bytes) -> list[int]:
    """Compressed offsets of every BGZF block in DATA (which must be well
    formed up to the last full block)."""
    offs, i = [], 0
    while i + 18 <= len(data):
        offs.append(i)
        bsize = struct.unpack_from("<H", data, i + 16)[0] + 1
        i += bsize
    return offs


# ---- SAM ----------------------------------------------------------------------

SAM_HEADER = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:1000000\n@SQ\tSN:chr2\tLN:500000\n"


def sam_line(name: str = "r1", flag: str = "0", rname: str = "chr1", pos: str = "100", cigar: str = "10M",
             seq: str = "ACGTACGTAC", qual: str = "IIIIIIIIII", extra: str = "") -> str:
    return f"{name}\t{flag}\t{rname}\t{pos}\t60\t{cigar}\t*\t0\t0\t{seq}\t{qual}{extra}\n"


def valid_sam_lines(n: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "".join(
        sam_line(name=f"read{i:06d}", rname=rng.choice(["chr1", "chr2"]), pos=str(rng.randrange(1, 400_000)),
                 extra=f"\tXI:i:{i}")
        for i in range(n)
    )


def big_sam(path: Path, target_bytes: int, seed: int = 7, read_len: int = 150) -> Path:
    """A valid SAM file of about TARGET_BYTES (random positions, 150 bp reads),
    written quickly: sequences are slices of one random string."""
    rng = random.Random(seed)
    pool = "".join(rng.choice("ACGT") for _ in range(1 << 16))
    qpool = "".join(chr(rng.randrange(35, 74)) for _ in range(1 << 16))
    with open(path, "w") as fh:
        fh.write("@HD\tVN:1.6\tSO:unsorted\n")
        for i in range(24):
            fh.write(f"@SQ\tSN:chr{i + 1}\tLN:200000000\n")
        written, i, lines = 0, 0, []
        while written < target_bytes:
            a = rng.randrange(0, len(pool) - read_len)
            b = rng.randrange(0, len(qpool) - read_len)
            line = (
                f"r{i:09d}\t{rng.choice((0, 16, 99, 147))}\tchr{rng.randrange(1, 25)}\t{rng.randrange(1, 199_000_000)}"
                f"\t60\t{read_len}M\t=\t{rng.randrange(1, 199_000_000)}\t0\t{pool[a:a + read_len]}\t{qpool[b:b + read_len]}"
                f"\tNM:i:{i % 5}\tRG:Z:grp{i % 3}\n"
            )
            lines.append(line)
            written += len(line)
            i += 1
            if len(lines) >= 10000:
                fh.write("".join(lines))
                lines.clear()
        fh.write("".join(lines))
    return path


def long_read_sam(path: Path, n: int, min_len: int, max_len: int, seed: int = 9) -> Path:
    """N records whose SEQ/QUAL are MIN_LEN..MAX_LEN bases (each record is
    then larger than a BGZF block)."""
    rng = random.Random(seed)
    pool = "".join(rng.choice("ACGT") for _ in range(max_len + 4096))
    with open(path, "w") as fh:
        fh.write("@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:250000000\n@SQ\tSN:chr2\tLN:250000000\n")
        for i in range(n):
            ln = rng.randrange(min_len, max_len + 1)
            a = rng.randrange(0, 4096)
            seq = pool[a : a + ln]
            fh.write(
                f"long{i:06d}\t0\tchr{rng.randrange(1, 3)}\t{rng.randrange(1, 240_000_000)}\t60\t{ln}M\t*\t0\t0"
                f"\t{seq}\t{'I' * ln}\tXI:i:{i}\n"
            )
    return path


# ---- running --------------------------------------------------------------------


def alnsort_bin() -> str:
    return harness.alnsort_path()


def run(args: list[str], *, stdin: bytes | None = None, timeout: float = 120, env: dict | None = None,
        **kw) -> subprocess.CompletedProcess:
    """`alnsort sort ARGS` with output captured; never raises on exit status."""
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run([alnsort_bin(), "sort", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, env=env, **feed, **kw)


def entries(d: Path) -> list[str]:
    """Everything under D, recursively, as relative paths (debris)."""
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def pending_outputs(d: Path) -> list[str]:
    """Temporary output files (`.<name>.alnsort-<pid>-<n>.tmp`) left in D."""
    return sorted(p.name for p in d.iterdir() if ".alnsort-" in p.name and p.name.endswith(".tmp"))


def env_with_tmpdir(tmpdir: Path) -> dict:
    e = dict(os.environ)
    e["TMPDIR"] = str(tmpdir)
    return e


@contextlib.contextmanager
def mounted_tmpfs(mnt: Path, options: str):
    """Mounts a tmpfs with OPTIONS (e.g. "size=5m", "ro") on MNT for the
    body and unmounts it after. Yields None when mounted, or the reason it
    could not be (mounting needs CAP_SYS_ADMIN, i.e. root): the caller
    skips with that reason."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        yield f"mount -t tmpfs -o {options} failed: {r.stderr.decode(errors='replace').strip() or r.returncode}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
