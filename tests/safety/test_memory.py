"""`--max-memory` is a hard budget for the whole process (issue 3, "Memory"):
peak RSS (ru_maxrss from wait4) stays within budget + 10% at several budgets,
on short reads several times larger than the budget and on long reads whose
records are each larger than a BGZF block, read as SAM and as BAM. A record
the budget cannot hold fails clearly before doing damage, and nonsense
memory values are refused before any input is read.

The measured peaks are printed (`pytest -s`) and repeated in every assertion
message. Set ALNSORT_BENCH_BAM to the BAM made by
../shared/bench/make-data.sh to measure the benchmark dataset as well.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import harness
import safety_util as u

MiB = 1 << 20
BUDGETS = [64 * MiB, 128 * MiB, 256 * MiB]
SLACK = 1.10
# ~470 MB of BAM records: 7x the 64M budget, 1.8x the 256M one; sorts in
# about 7 s per budget on the 2-core development machine.
SHORT_SAM_BYTES = 600_000_000

MEASURED: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def report_measurements():
    """Repeats every measured peak at the end of the module (pytest -s)."""
    yield
    if MEASURED:
        print("\nPeak RSS measurements:\n  " + "\n  ".join(MEASURED))


@pytest.fixture(scope="module")
def short_sam(tmp_path_factory) -> Path:
    return u.big_sam(tmp_path_factory.mktemp("mem_short") / "short.sam", SHORT_SAM_BYTES, seed=41)


@pytest.fixture(scope="module")
def long_sam(tmp_path_factory) -> Path:
    """400 records of 100-500 kbases: 150-750 kB each as BAM records."""
    return u.long_read_sam(tmp_path_factory.mktemp("mem_long") / "long.sam", 400, 100_000, 500_000)


@pytest.fixture(scope="module")
def long_bam(long_sam: Path, tmp_path_factory) -> Path:
    """The long reads as BAM (name-sorted by alnsort, so not in coordinate
    order), for the BAM reader with records spanning many BGZF blocks."""
    out = tmp_path_factory.mktemp("mem_long_bam") / "long.bam"
    res = u.run(["-n", "-l", "1", "-m", "2G", "-o", str(out), str(long_sam)], timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    return out


# ru_maxrss is not a clean per-program number: Linux carries the *old*
# address space's high-water mark into the process at exec, and Python starts
# children with vfork, whose old address space is pytest's own (80+ MiB after
# building the big-record inputs: a run that stops at once read as 76 MiB).
# So each run is started from a fresh, small launcher with a real fork, whose
# copied address space is not carried over (measured: the same run then
# reads 6 MiB under a 10 MiB launcher).
LAUNCHER = r"""
import json, os, sys
err = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0); os.dup2(null, 1); os.dup2(err, 2)
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "maxrss": ru.ru_maxrss * 1024}))
"""


def peak_rss(args: list[str], tmp_path: Path, timeout: float = 300) -> tuple[int, int, str, float]:
    """Runs `alnsort sort ARGS`; returns (exit status, peak RSS bytes, stderr, seconds)."""
    import json
    import sys

    log = tmp_path / f"stderr-{time.monotonic_ns()}"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(log), u.alnsort_bin(), "sort", *args],
                         capture_output=True, timeout=timeout)
    secs = time.monotonic() - t0
    assert res.returncode == 0, res.stderr.decode()
    r = json.loads(res.stdout)
    err = log.read_text(errors="replace")
    assert r["maxrss"] > 0, res.stdout
    return r["status"], r["maxrss"], err, secs


def check_budget(what: str, budget: int, args: list[str], tmp_path: Path) -> None:
    tdir = tmp_path / "T"
    tdir.mkdir(exist_ok=True)
    out = tmp_path / "out.bam"
    rc, rss, err, secs = peak_rss(["--max-memory", f"{budget // MiB}M", "-T", str(tdir), "-o", str(out), *args],
                                  tmp_path)
    line = (f"{what}: --max-memory {budget // MiB}M peak RSS {rss / MiB:.1f} MiB "
            f"({100 * rss / budget:.0f}% of budget, limit {SLACK * budget / MiB:.1f} MiB) in {secs:.1f}s")
    print("\n" + line)
    MEASURED.append(line)
    assert rc == 0, f"{line}\nexit {rc}: {err}"
    assert rss <= budget * SLACK, line
    assert u.entries(tdir) == []
    out.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"{b // MiB}M")
def test_budget_short_reads_sam(budget: int, short_sam: Path, tmp_path: Path):
    check_budget("short reads, SAM, 600 MB", budget, [str(short_sam)], tmp_path)


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"{b // MiB}M")
def test_budget_long_reads_sam(budget: int, long_sam: Path, tmp_path: Path):
    check_budget("long reads (100-500 kb), SAM", budget, [str(long_sam)], tmp_path)


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"{b // MiB}M")
def test_budget_long_reads_bam(budget: int, long_bam: Path, tmp_path: Path):
    check_budget("long reads (100-500 kb), BAM", budget, [str(long_bam)], tmp_path)


@pytest.mark.slow
def test_budget_with_two_threads(short_sam: Path, tmp_path: Path):
    check_budget("short reads, SAM, -@ 2", 128 * MiB, ["-@", "2", str(short_sam)], tmp_path)


@pytest.mark.skipif(not os.environ.get("ALNSORT_BENCH_BAM"), reason="ALNSORT_BENCH_BAM not set (make-data.sh BAM)")
@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"{b // MiB}M")
def test_budget_benchmark_dataset(budget: int, tmp_path: Path):
    check_budget("benchmark dataset", budget, [os.environ["ALNSORT_BENCH_BAM"]], tmp_path)


# ---- CRAM: the reference sequences and containers count too ---------------------

CRAM_REFS = 8
CRAM_REF_LEN = 5_000_000  # 40 MB of reference in all
CRAM_READS = 200_000


@pytest.fixture(scope="module")
def cram_inputs(tmp_path_factory) -> dict[str, Path]:
    """200,000 150-base reads (one substitution each, random order) on 8
    references of 5 Mb, as SAM and as samtools' CRAM 3.0: the reference
    a CRAM run must hold (40 MB) is a large part of a 128 MiB budget."""
    import random

    import oracle

    d = tmp_path_factory.mktemp("mem_cram")
    rng = random.Random(77)
    unit = "".join(rng.choice("ACGT") for _ in range(1 << 20))
    seqs = {f"c{i}": "".join(unit[rng.randrange(0, 1 << 19):][: 1 << 18] for _ in range(CRAM_REF_LEN >> 18))
            + unit[: CRAM_REF_LEN % (1 << 18)] for i in range(CRAM_REFS)}
    ref = d / "ref.fa"
    with open(ref, "w") as fh:
        for name, seq in seqs.items():
            fh.write(f">{name}\n")
            fh.writelines(seq[i:i + 60] + "\n" for i in range(0, len(seq), 60))
    oracle.samtools("faidx", str(ref))
    sam = d / "in.sam"
    names = list(seqs)
    qual = "".join(chr(rng.randrange(35, 74)) for _ in range(1 << 12))
    with open(sam, "w") as fh:
        fh.write("@HD\tVN:1.6\tSO:unsorted\n")
        fh.writelines(f"@SQ\tSN:{n}\tLN:{len(s)}\n" for n, s in seqs.items())
        lines = []
        for i in range(CRAM_READS):
            name = names[rng.randrange(CRAM_REFS)]
            pos = rng.randrange(0, CRAM_REF_LEN - 150)
            seq = list(seqs[name][pos:pos + 150])
            k = rng.randrange(150)
            seq[k] = "A" if seq[k] != "A" else "C"
            q = rng.randrange(0, len(qual) - 150)
            lines.append(f"r{rng.getrandbits(40):010x}.{i}\t{rng.choice((0, 16))}\t{name}\t{pos + 1}\t60\t150M"
                         f"\t*\t0\t0\t{''.join(seq)}\t{qual[q:q + 150]}\n")
        fh.writelines(lines)
    out = {"ref": ref, "sam": sam}
    for version in ("3.0", "3.1"):
        cram = d / f"in-{version}.cram"
        oracle.samtools("view", "--no-PG", "-O", f"cram,version={version}", "-T", str(ref), "-o", str(cram), str(sam))
        out[f"cram{version}"] = cram
    out["cram"] = out["cram3.0"]
    return out


@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_budget_cram_input(cram_inputs: dict[str, Path], tmp_path: Path, version: str):
    """Reading CRAM holds the references and the containers being decoded
    (with each worker's decoded blocks and codec tables): they are taken
    from the budget, not added to it."""
    check_budget(f"CRAM {version} input, 40 MB of reference, -@ 1", 96 * MiB,
                 ["-@", "1", "--reference", str(cram_inputs["ref"]), str(cram_inputs[f"cram{version}"])], tmp_path)


def test_budget_cram_output(cram_inputs: dict[str, Path], tmp_path: Path):
    check_budget("CRAM output, 40 MB of reference, -@ 2", 128 * MiB,
                 ["-@", "2", "-O", "cram", "--reference", str(cram_inputs["ref"]), str(cram_inputs["sam"])],
                 tmp_path)


@pytest.fixture(scope="module")
def cram_long_sam(cram_inputs: dict[str, Path]) -> Path:
    """1,500 reads of 10-30 kbases (30 Mbases, about 45 MB of BAM records)
    on the CRAM fixture's references, with a substitution every 1,000 bases:
    a CRAM slice of 10,240 records would hold all of them at once."""
    import random

    rng = random.Random(78)
    seqs = {}
    name = None
    for ln in cram_inputs["ref"].read_text().splitlines():
        if ln.startswith(">"):
            name = ln[1:]
            seqs[name] = []
        else:
            seqs[name].append(ln)
    seqs = {k: "".join(v) for k, v in seqs.items()}
    sam = cram_inputs["ref"].parent / "long.sam"
    with open(sam, "w") as fh:
        fh.write("@HD\tVN:1.6\tSO:unsorted\n")
        fh.writelines(f"@SQ\tSN:{n}\tLN:{len(s)}\n" for n, s in seqs.items())
        for i in range(1500):
            name = rng.choice(list(seqs))
            n = rng.randrange(10_000, 30_000)
            pos = rng.randrange(0, len(seqs[name]) - n)
            seq = list(seqs[name][pos:pos + n])
            for k in range(rng.randrange(1000), n, 1000):
                seq[k] = "A" if seq[k] != "A" else "C"
            qual = "".join(chr(33 + 20 + (k * 7 + i) % 21) for k in range(n))
            fh.write(f"long{i}\t0\t{name}\t{pos + 1}\t60\t{n}M\t*\t0\t0\t{''.join(seq)}\t{qual}\n")
    return sam


@pytest.mark.slow
def test_budget_cram_output_long_reads(cram_inputs: dict[str, Path], cram_long_sam: Path, tmp_path: Path):
    """CRAM slices of long reads end at htslib's 5,120,000 bases (and at a
    byte size), not only at 10,240 records, so the containers in flight
    stay within what the budget sets aside for them."""
    check_budget("CRAM output of 10-30 kb reads, 40 MB of reference, -@ 2", 128 * MiB,
                 ["-@", "2", "-O", "cram", "--reference", str(cram_inputs["ref"]), str(cram_long_sam)],
                 tmp_path)


def test_budget_too_small_for_cram_references_is_refused(cram_inputs: dict[str, Path], tmp_path: Path):
    """A budget that cannot hold the references beside some records stops
    before any record is read, saying how much the references take and what
    budget would do, and leaves nothing behind."""
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    rc, rss, err, _ = peak_rss(["--max-memory", "64M", "-@", "2", "-T", str(tdir), "--reference",
                                str(cram_inputs["ref"]), "-o", str(outdir / "s.bam"), str(cram_inputs["cram"])],
                               tmp_path)
    assert rc == 1, err
    m = re.search(r"--max-memory 64\.00 MiB is too small for this CRAM run: of its 8 reference sequence\(s\) "
                  r"up to 38\.15 MiB are held at once.* use --max-memory ([\d.]+) MiB or more", err)
    assert m, err
    assert rss <= 64 * MiB * SLACK, err
    assert u.entries(tdir) == [] and u.entries(outdir) == [], err
    # The budget it names is enough.
    check_budget("CRAM input at the budget the refusal names", int(float(m.group(1)) * MiB) + MiB,
                 ["-@", "2", "--reference", str(cram_inputs["ref"]), str(cram_inputs["cram"])], tmp_path)


@pytest.fixture(scope="module")
def sorted_cram(cram_inputs: dict[str, Path]) -> Path:
    """The fixture's reads in coordinate order, as samtools' CRAM 3.0
    (`@HD SO:coordinate`: alnsort holds its references only while in use)."""
    import oracle

    cram = cram_inputs["sam"].parent / "sorted.cram"
    oracle.samtools("sort", "--no-PG", "-O", "cram,version=3.0", "--reference", str(cram_inputs["ref"]),
                    "-o", str(cram), str(cram_inputs["sam"]))
    return cram


def stats_of(args: list[str], tmp_path: Path) -> dict:
    import json

    stats = tmp_path / f"stats-{time.monotonic_ns()}.json"
    res = u.run([*args, "--stats-json", str(stats)])
    assert res.returncode == 0, res.stderr
    return json.loads(stats.read_text())


# The smallest budgets the sum-of-all-references charge accepted for the
# fixture at -@1 (its refusal said "use --max-memory 79.65 MiB or more" for
# CRAM input and output alike); in coordinate order only three references,
# two copies and one being loaded are charged now (70.11 MiB).
OLD_CRAM_MINIMUM_1 = 79.65 * MiB


@pytest.mark.parametrize("direction", ["input", "output"])
def test_cram_in_coordinate_order_fits_a_budget_the_whole_reference_did_not(
        direction: str, cram_inputs: dict[str, Path], sorted_cram: Path, tmp_path: Path):
    """References held only while containers use them: a budget below what
    holding all eight used to need is accepted, peak RSS stays within it,
    and the output is the same bytes as without a budget."""
    budget = 72 * MiB
    assert budget < OLD_CRAM_MINIMUM_1
    ref = str(cram_inputs["ref"])
    if direction == "input":
        args, out_name = ["-@", "1", "--no-PG", "--reference", ref, str(sorted_cram)], "s.bam"
    else:
        args, out_name = ["-@", "1", "--no-PG", "-O", "cram", "--reference", ref, str(cram_inputs["sam"])], "s.cram"
    tdir = tmp_path / "T"
    tdir.mkdir()
    out, free = tmp_path / out_name, tmp_path / f"free-{out_name}"
    rc, rss, err, secs = peak_rss(["--max-memory", f"{budget // MiB}M", "-T", str(tdir), "-o", str(out), *args],
                                  tmp_path)
    line = (f"CRAM {direction} in coordinate order, -@ 1: --max-memory {budget // MiB}M peak RSS "
            f"{rss / MiB:.1f} MiB ({100 * rss / budget:.0f}% of budget) in {secs:.1f}s")
    print("\n" + line)
    MEASURED.append(line)
    assert rc == 0, f"{line}\n{err}"
    assert rss <= budget * SLACK, line
    res = u.run(["-o", str(free), *args])
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == free.read_bytes()


@pytest.mark.parametrize("threads", ["1", "2"])
def test_cram_input_in_coordinate_order_loads_each_reference_once(
        threads: str, cram_inputs: dict[str, Path], sorted_cram: Path, tmp_path: Path):
    s = stats_of(["-@", threads, "--reference", str(cram_inputs["ref"]), "-o", str(tmp_path / "s.bam"),
                  str(sorted_cram)], tmp_path)
    assert s["records_in"] == CRAM_READS
    assert s["cram_reference_loads"] == CRAM_REFS, s


def test_cram_output_reference_loads(cram_inputs: dict[str, Path], tmp_path: Path):
    """Coordinate order: each reference once for the header's missing M5
    (one at a time, as htslib computes them) and once for the records.
    Name order visits the references in every slice: all of them are held
    (and charged), each loaded once."""
    ref, sam = str(cram_inputs["ref"]), str(cram_inputs["sam"])
    for threads in ("1", "2"):
        s = stats_of(["-@", threads, "-O", "cram", "--reference", ref, "-o", str(tmp_path / "s.cram"), sam],
                     tmp_path)
        assert s["cram_reference_loads"] == 2 * CRAM_REFS, s
        s = stats_of(["-@", threads, "-n", "-O", "cram", "--reference", ref, "-o", str(tmp_path / "n.cram"), sam],
                     tmp_path)
        assert s["cram_reference_loads"] == CRAM_REFS, s
    s = stats_of(["--reference", ref, "-o", str(tmp_path / "s.bam"), sam], tmp_path)
    assert s["cram_reference_loads"] == 0, s


@pytest.mark.slow
def test_cram_31_names_noodles_could_not_decode_sort_as_samtools(cram_inputs: dict[str, Path], tmp_path: Path):
    """samtools 1.24 writes these 200,000 names (`r<10 hex>.<n>`) in CRAM 3.1
    with a name-tokeniser stream that copies a zero-padded digits' length
    (DZLEN) stream, on which noodles-cram 0.102's decoder panics; alnsort's
    own name-tokeniser decoder reads it (docs/cram.md): the sorted records
    are samtools' for the same sort, in both orders."""
    import oracle

    cram = cram_inputs["cram3.1"]
    for order in ([], ["-n"]):
        out = tmp_path / "s.bam"
        res = u.run([*order, "-@", "2", "--reference", str(cram_inputs["ref"]), "-o", str(out), str(cram)])
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        expected = tmp_path / "e.bam"
        oracle.samtools("sort", *order, "--reference", str(cram_inputs["ref"]), "-o", str(expected), str(cram))
        got, want = oracle.strip_pg(oracle.view(str(out))), oracle.strip_pg(oracle.view(str(expected)))
        assert got.count("\n") > 200_000
        assert got == want, f"order {order}: records differ from samtools'"


def test_cram_stream_the_decoder_cannot_read_fails_clearly(cram_inputs: dict[str, Path], tmp_path: Path):
    """A name-tokeniser block that does not decode (here: its entropy coder
    byte set to 7, which does not exist; the block's CRC32 made right so
    only the decoder sees it) stops the run with an error naming the file,
    the container, its records and the block, and leaves nothing behind."""
    import zlib

    data = bytearray(cram_inputs["cram3.1"].read_bytes())
    tok = [b for b in harness.cram_blocks(bytes(data)) if b[2] == 8]
    assert tok, "samtools wrote no name-tokeniser block"
    index, start, _, at, size = tok[len(tok) // 2]
    data[at + 8] = 7
    data[at + size:at + size + 4] = zlib.crc32(bytes(data[start:at + size])).to_bytes(4, "little")
    cram = tmp_path / "bad.cram"
    cram.write_bytes(bytes(data))
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    res = u.run(["-@", "2", "-T", str(tdir), "--reference", str(cram_inputs["ref"]), "-o", str(outdir / "s.bam"),
                 str(cram)], env={**os.environ, "RUST_BACKTRACE": "0"})
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 1, err
    assert re.search(rf"alnsort sort: {re.escape(str(cram))}: decoding CRAM container {index} \(records \d+\.\.\d+\): "
                     r"name tokeniser: entropy coder 7 .*\(block of content id \d+, name tokeniser\)", err), err
    assert "panicked" not in err and "without delivering its result" not in err, err
    assert u.entries(tdir) == [] and u.entries(outdir) == [], err


# ---- a record too large for the budget ---------------------------------------------

# A 36 MB BAM record and a 48 MB SAM line: more than half of a 64 MiB total
# budget, so larger than any record limit alnsort can set for it, whatever
# share it reserves for I/O.
BIG_BASES = 24_000_000


def _big_record(name: str = "huge") -> bytes:
    """A framed BAM record with BIG_BASES bases (all A), built directly."""
    import struct

    n = BIG_BASES
    nm = name.encode() + b"\0"
    fixed = struct.pack("<iiBBHHHIiii", 0, 1000, len(nm), 60, u.reg2bin(1000, 1000 + n), 1, 0, n, -1, -1, 0)
    raw = fixed + nm + struct.pack("<I", n << 4) + b"\x11" * (n // 2) + b"\x1e" * n
    return struct.pack("<I", len(raw)) + raw


@pytest.fixture(scope="module")
def huge_inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("huge")
    sam = d / "huge.sam"
    with open(sam, "w") as fh:
        fh.write(u.SAM_HEADER + u.valid_sam_lines(2000))
        fh.write(f"huge\t0\tchr1\t1001\t60\t{BIG_BASES}M\t*\t0\t0\t{'A' * BIG_BASES}\t{'?' * BIG_BASES}\n")
        fh.write(u.valid_sam_lines(100, seed=5))
    bam = d / "huge.bam"
    bam.write_bytes(u.bam_file(u.bam_header(), u.records(2000) + [_big_record()] + u.records(100, seed=5)))
    return {"sam": sam, "bam": bam}


@pytest.mark.parametrize("fmt", ["sam", "bam"])
def test_record_larger_than_budget_fails_cleanly(fmt: str, huge_inputs: dict[str, Path], tmp_path: Path):
    """One record may take at most half of what --max-memory 64M leaves the
    sorter (< 32 MiB); a 36 MB record (48 MB as a SAM line) must stop the run
    with a message that says so and what to do, within the budget (the
    record is refused before it is read whole), and leave nothing behind."""
    budget = 64 * MiB
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    out = outdir / "sorted.bam"
    rc, rss, err, _ = peak_rss(["--max-memory", "64M", "-T", str(tdir), "-o", str(out), str(huge_inputs[fmt])],
                               tmp_path)
    line = f"record too large ({fmt}): peak RSS {rss / MiB:.1f} MiB at --max-memory 64M"
    print("\n" + line)
    MEASURED.append(line)
    ctx = f"{line}; exit {rc}; stderr:\n{err}"
    assert rc == 1, ctx
    assert re.search(r"more than the \d+ bytes one record may take with this memory budget.*--max-memory", err), ctx
    assert re.search(r"record 2001\b", err), ctx
    assert "panicked" not in err, ctx
    assert rss <= budget * SLACK, ctx
    assert u.entries(tdir) == [] and u.entries(outdir) == [], ctx


# ---- nonsense values ------------------------------------------------------------------

MISSING_INPUT = "/nonexistent-alnsort-input/in.bam"


@pytest.mark.parametrize(
    "args, understood",
    [
        (["-m", "1.5G"], r"invalid -m value '1\.5G': samtools would read it as 1 bytes per thread.*--max-memory 1\.5G"),
        (["-m", "G10"], r"invalid -m value 'G10': samtools would read it as 0 bytes"),
        (["-m", "0"], r"invalid -m value '0'"),
        (["-m", "-5M"], r"invalid -m value '-5M': samtools would read it as -5242880 bytes"),
        (["-m", "09M"], r"invalid -m value '09M'"),
        (["-m", "500K"], r"-m 500K is .* per thread, below the 1M minimum"),
        (["--max-memory", "G10"], r"invalid --max-memory value 'G10'.*write a size such as"),
        (["--max-memory", "0"], r"invalid --max-memory value '0': the budget must be above zero"),
        (["--max-memory", "-5M"], r"invalid --max-memory value '-5M'"),
        (["--max-memory", "1.5X"], r"invalid --max-memory value '1\.5X'"),
        (["--max-memory", "150%"], r"invalid --max-memory value '150%': a percentage"),
        (["--max-memory", "1K"], r"--max-memory 1\.00 KiB is too small.*use --max-memory \S+ MiB or more"),
        (["--max-memory", "4M"], r"--max-memory 4\.00 MiB is too small"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_nonsense_memory_values_refused_before_reading(args: list[str], understood: str, tmp_path: Path):
    res = u.run([*args, "-T", str(tmp_path), "-o", str(tmp_path / "o.bam"), MISSING_INPUT])
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert re.search(understood, err), err
    assert MISSING_INPUT not in err and "cannot open" not in err, f"the input was opened first:\n{err}"
    assert u.entries(tmp_path) == []
