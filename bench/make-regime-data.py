#!/usr/bin/env python3
"""Inputs N times a benchmark BAM for the spilling regime (issue 38).

    make-regime-data.py IN.bam OUT.bam --copies N [--shards S] [--level L] [--block R]

Every record of IN is written N times. Copy c (0-based) of a record gets

* the read name prefixed with `c<c>.` (the Illumina fields stay the last
  seven, so optical-duplicate parsing sees the same tile, x and y);
* its packed bases passed through copy c's permutation of the 16 bytes
  whose two 4-bit codes are both A, C, G or T (copy 0: the identity), so a
  copy's bases are other bases, not the original's bytes;
* its qualities passed through copy c's permutation of the values 2..41
  (copy 0: the identity); 0xff (absent) and values outside stay;

and keeps everything else: positions, flags, CIGAR, mates, tags. So the
copies sort and pair as the original does, N times over, while neither
LZ-style run codecs nor BGZF find one copy's bytes in another's. The
copies of a template share its positions and strands, so duplicate
markers take them for duplicates of one another: of N copies, N - 1 are
flagged (75% of the records at 4x, 94% at 16x), a duplicate-heavy input
for `--markdup`, not a genome's usual rate.

Order: IN's order, in blocks of about R records (default 4096) cut where the
read name changes; each block is written for every copy of a shard before
the next block, so templates stay whole and each shard's copies are mixed
through its output as aligner output mixes reads. With S shards (processes,
default 1) shard k writes copies [k*N/S, (k+1)*N/S) into a part of its own,
and the parts are concatenated (`samtools cat`, no recompression).

Needs python3 and samtools on PATH (compression: `samtools view -O
bam,level=L`, default 6 as the benchmark BAM). Prints the shape of OUT.
"""

import argparse
import os
import random
import struct
import subprocess
import sys
import time
import zlib
from multiprocessing import Pool

BASES = (1, 2, 4, 8)
# The SAM specification's BGZF end-of-file block.
BGZF_EOF = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")  # A, C, G, T as BAM's 4-bit codes


def read_bgzf(path):
    """IN's decompressed bytes (every BGZF block inflated)."""
    data = open(path, "rb").read()
    out = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] != b"\x1f\x8b\x08\x04":
            sys.exit(f"{path}: not BGZF at byte {pos}")
        xlen = struct.unpack_from("<H", data, pos + 10)[0]
        bsize = struct.unpack_from("<H", data, pos + 16)[0] + 1
        out.append(zlib.decompress(data[pos + 12 + xlen : pos + bsize - 8], -15))
        pos += bsize
    return b"".join(out)


def split_header(raw):
    """(header bytes, offset of the first record)."""
    if raw[:4] != b"BAM\x01":
        sys.exit("input is not BAM")
    l_text = struct.unpack_from("<i", raw, 4)[0]
    pos = 8 + l_text
    n_ref = struct.unpack_from("<i", raw, pos)[0]
    pos += 4
    for _ in range(n_ref):
        l_name = struct.unpack_from("<i", raw, pos)[0]
        pos += 4 + l_name + 4
    return raw[:pos], pos


def tables(copy):
    """Copy `copy`'s byte tables for packed bases and for qualities."""
    seq = bytearray(range(256))
    qual = bytearray(range(256))
    if copy:
        rng = random.Random(1000 + copy)
        pairs = [(a << 4) | b for a in BASES for b in BASES]
        shuffled = pairs[:]
        rng.shuffle(shuffled)
        for src, dst in zip(pairs, shuffled):
            seq[src] = dst
        values = list(range(2, 42))
        shuffled = values[:]
        rng.shuffle(shuffled)
        for src, dst in zip(values, shuffled):
            qual[src] = dst
    return bytes(seq), bytes(qual)


def blocks(raw, start, block):
    """IN's records as lists of (name, fixed fields, seq, qual, rest of the record), in
    blocks of about `block` records cut at a change of read name."""
    pos = start
    end = len(raw)
    cur = []
    last = None
    while pos < end:
        size = struct.unpack_from("<i", raw, pos)[0]
        rec = raw[pos + 4 : pos + 4 + size]
        pos += 4 + size
        l_name = rec[8]
        n_cigar = struct.unpack_from("<H", rec, 12)[0]
        l_seq = struct.unpack_from("<i", rec, 16)[0]
        name = rec[32 : 32 + l_name]  # NUL-terminated
        s = 32 + l_name + 4 * n_cigar
        q = s + (l_seq + 1) // 2
        a = q + l_seq
        if len(cur) >= block and name != last:
            yield cur
            cur = []
        cur.append((name, rec[:8], rec[9:32], rec[32 + l_name : s], rec[s:q], rec[q:a], rec[a:]))
        last = name
    if cur:
        yield cur


class BgzfStored:
    """BGZF of stored (level 0) deflate blocks: cheap to make here, and
    samtools compresses it on its own threads."""

    MAX = 0xFF00  # payload bytes per block, as htslib's BGZF_BLOCK_SIZE

    def __init__(self, stream):
        self.stream = stream

    def write(self, data):
        view = memoryview(data)
        for i in range(0, len(view), self.MAX):
            self.block(bytes(view[i : i + self.MAX]))

    def block(self, payload):
        deflated = zlib.compressobj(0, zlib.DEFLATED, -15)
        body = deflated.compress(payload) + deflated.flush()
        header = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff\x06\x00BC\x02\x00"
        size = len(header) + 2 + len(body) + 8
        self.stream.write(header + struct.pack("<H", size - 1) + body)
        self.stream.write(struct.pack("<II", zlib.crc32(payload), len(payload)))

    def close(self):
        self.stream.write(BGZF_EOF)
        self.stream.close()


def write_shard(args):
    """Writes copies [lo, hi) of IN into `part` (BAM by samtools)."""
    src, part, lo, hi, block, level, threads = args
    raw = read_bgzf(src)
    header, start = split_header(raw)
    tabs = [tables(c) for c in range(lo, hi)]
    prefixes = [f"c{c}.".encode() for c in range(lo, hi)]
    proc = subprocess.Popen(
        ["samtools", "view", "--no-PG", "-@", str(threads), "-O", f"bam,level={level}", "-o", part, "-"],
        stdin=subprocess.PIPE,
    )
    out = BgzfStored(proc.stdin)
    out.write(header)
    records = 0
    for blk in blocks(raw, start, block):
        for (seq_t, qual_t), prefix in zip(tabs, prefixes):
            chunk = []
            for name, head, fixed, cigar, seq, qual, aux in blk:
                new_name = prefix + name
                body = b"".join(
                    (
                        head,
                        bytes((len(new_name),)),
                        fixed,
                        new_name,
                        cigar,
                        seq.translate(seq_t),
                        qual.translate(qual_t),
                        aux,
                    )
                )
                chunk.append(struct.pack("<i", len(body)))
                chunk.append(body)
            records += len(blk)
            out.write(b"".join(chunk))
    out.close()
    if proc.wait() != 0:
        sys.exit(f"samtools view failed writing {part}")
    return records


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--copies", type=int, required=True)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--level", type=int, default=6)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1, help="samtools threads per shard")
    a = ap.parse_args()
    if a.copies < 1 or a.shards < 1:
        sys.exit("--copies and --shards must be at least 1")
    shards = min(a.shards, a.copies)
    t0 = time.time()
    jobs = []
    for k in range(shards):
        lo, hi = k * a.copies // shards, (k + 1) * a.copies // shards
        part = a.output if shards == 1 else f"{a.output}.part{k:03d}"
        jobs.append((a.input, part, lo, hi, a.block, a.level, a.threads))
    if shards == 1:
        counts = [write_shard(jobs[0])]
    else:
        with Pool(shards) as pool:
            counts = pool.map(write_shard, jobs)
        parts = [j[1] for j in jobs]
        subprocess.run(["samtools", "cat", "--no-PG", "-o", a.output, *parts], check=True)
        for p in parts:
            os.remove(p)
    records = sum(counts)
    size = os.path.getsize(a.output)
    insize = os.path.getsize(a.input)
    print(
        f"{a.output}: {records} records ({a.copies} copies of {a.input}, "
        f"{records // a.copies} records, {insize / 1e6:.1f} MB), {size / 1e6:.1f} MB "
        f"({size / insize / a.copies:.3f} of {a.copies}x the input's bytes), "
        f"{a.input}'s order in blocks of ~{a.block} records, each block for every copy of its "
        f"shard in turn ({shards} shard(s), concatenated); BAM level {a.level}; "
        f"{time.time() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
