"""SAM and BAM that samtools 1.24 reads are read as samtools reads them
(project issue 21): other projects' test files held inputs samtools sorts
and alnsort refused.

* A SAM header line that is exactly `@CO` (htslib's SAM header reader lets
  it through as `@CO<TAB>`; in a BAM header's text it is refused by both).
* A BAM (or BGZF-compressed SAM) whose last BGZF block is whole but which
  lacks the 28-byte EOF block (older htsjdk wrote these): samtools warns
  "EOF marker is absent" and sorts
  every record; alnsort warns naming the input, counts it in --stats-json
  (`missing_eof_inputs`) and writes samtools' records. A record cut short at
  a block boundary stays an error naming the file and offset, with no
  output left behind.
* BAM fields samtools keeps as they are: `pos` and `next_pos` below -1, and
  the other fields at their limits (TLEN, MAPQ 255, every flag bit, a wrong
  `bin`, qualities 0xff, every B-array type, empty Z/H tags, `=`/`N` bases,
  a 254-byte read name, no CIGAR with a sequence). What samtools refuses in
  SAM (POS or PNEXT below 0) stays refused.
* CRAM output of those BAM positions as samtools writes it: a mate
  position below -1 stored as 0 (samtools reads back PNEXT 0), a POS below
  0 refused by name (samtools fails writing it).
* An empty SAM line, among the records, after the last or before the
  header: samtools stops at it ("Parse error at line N"); so does alnsort,
  naming the file and the line.

Each case is sorted by alnsort and by samtools 1.24 (pysam 0.24.1, a fresh
process per call) in coordinate and name order, to SAM and to BAM, and the
outputs are compared exactly: SAM text byte for byte, BAM by its inflated
payload (header and records; the compressed bytes differ by design). Inputs
are generated here: SAM text written by the test, BAMs written by samtools
or built byte by byte (tests/safety/safety_util.py) where no writer makes
them.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
import subprocess
import sys
from pathlib import Path

import harness
import oracle
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "safety"))
import safety_util as u  # noqa: E402

ORDERS = {"coord": [], "name": ["-n"]}
OUT_FORMATS = ["sam", "bam"]
REFS = [("chr1", 200_000), ("chr2", 100_000)]
SQ = "".join(f"@SQ\tSN:{n}\tLN:{ln}\n" for n, ln in REFS)


def _sam_records(n: int, seed: int) -> str:
    """N paired-looking SAM records on chr1/chr2 with distinct names."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rname = rng.choice(["chr1", "chr2"])
        pos = rng.randrange(1, 90_000)
        flag = rng.choice([0, 16, 99, 147, 83, 163])
        seq = "".join(rng.choice("ACGT") for _ in range(30))
        qual = "".join(chr(33 + rng.randrange(41)) for _ in range(30))
        pnext = rng.randrange(1, 90_000)
        out.append(f"r{i:06d}\t{flag}\t{rname}\t{pos}\t{rng.randrange(61)}\t30M\t=\t{pnext}\t0\t{seq}\t{qual}\tXI:i:{i}\n")
    return "".join(out)


def _payload(path: Path) -> bytes:
    """The inflated BGZF payload of a BAM (every gzip member)."""
    return gzip.decompress(path.read_bytes())


def _output(path: Path, fmt: str) -> bytes:
    return path.read_bytes() if fmt == "sam" else _payload(path)


def _samtools_sort(inp: Path, order: list[str], fmt: str, out: Path) -> None:
    oracle.samtools("sort", *order, "--no-PG", "-O", fmt, "-o", str(out), str(inp))


def _alnsort_sort(args: list[str], **kw):
    res = harness.run_alnsort(["--no-PG", *args], **kw)
    harness.check_ok(res)
    return res


def _assert_same(expected: bytes, actual: bytes, what: str) -> None:
    if expected == actual:
        return
    try:
        harness.assert_same_text(expected.decode(), actual.decode(), what)
    except UnicodeDecodeError:
        pass
    raise AssertionError(f"{what}: outputs differ ({len(expected)} bytes from samtools, {len(actual)} from alnsort)")


def _compare_sorts(tmp_path: Path, inp: Path, tag: str, extra: list[str] | None = None) -> dict[str, str]:
    """Sorts INP with both tools in each order and output format and compares
    the outputs exactly; returns alnsort's stderr per case."""
    errs = {}
    for oname, order in ORDERS.items():
        for fmt in OUT_FORMATS:
            s_out = tmp_path / f"{tag}.{oname}.samtools.{fmt}"
            a_out = tmp_path / f"{tag}.{oname}.alnsort.{fmt}"
            _samtools_sort(inp, order, fmt, s_out)
            res = _alnsort_sort([*order, *(extra or []), "-O", fmt, "-o", str(a_out), str(inp)])
            _assert_same(_output(s_out, fmt), _output(a_out, fmt), f"{tag} {oname} -> {fmt}")
            errs[f"{oname}.{fmt}"] = res.stderr.decode("utf-8", "replace")
    return errs


def _refused_by_both(tmp_path: Path, inp: Path, alnsort_message: str) -> str:
    """samtools and alnsort both fail on INP; alnsort names the file, says
    ALNSORT_MESSAGE and leaves no output. Returns alnsort's stderr."""
    s = oracle.samtools("sort", "-o", str(tmp_path / "s.bam"), str(inp), check=False)
    assert s.returncode != 0, f"samtools 1.24 sorted {inp.name}; the test's premise is wrong"
    out = tmp_path / "a.bam"
    before = {p.name for p in tmp_path.iterdir()}
    res = harness.run_alnsort(["-o", str(out), str(inp)])
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, f"alnsort exited {res.returncode}; stderr:\n{err}"
    assert inp.name in err and alnsort_message in err, err
    assert harness.leftover_files(tmp_path, before) == [], "a failed run left files behind"
    return err


# ---- @CO lines ---------------------------------------------------------------------


def test_bare_comment_lines_read_as_samtools_reads_them(tmp_path: Path):
    """`@CO` alone (also with CRLF) is an empty comment, `@CO<TAB>`, kept in
    place among the other lines; a tabbed comment is kept as it is."""
    text = (
        "@HD\tVN:1.6\tSO:unsorted\n@CO\n"
        + SQ
        + "@CO\r\n@CO\t\n@CO\tkept\tas\tis \n@RG\tID:g1\tSM:s\n@CO\n"
        + _sam_records(300, seed=1)
    )
    inp = tmp_path / "bare_co.sam"
    inp.write_text(text)
    _compare_sorts(tmp_path, inp, "bare_co")
    # The same through standard input.
    s_out = tmp_path / "stdin.samtools.sam"
    _samtools_sort(inp, [], "sam", s_out)
    res = _alnsort_sort(["-O", "sam", "-"], stdin_path=str(inp))
    _assert_same(s_out.read_bytes(), res.stdout, "bare_co from stdin")
    assert s_out.read_text().count("@CO\t\n") == 4


@pytest.mark.parametrize(
    "line",
    ["@CO text after a space", "@COtext", "@CO "],
)
def test_comment_lines_samtools_refuses_stay_refused(tmp_path: Path, line: str):
    inp = tmp_path / "bad_co.sam"
    inp.write_text("@HD\tVN:1.6\n" + SQ + line + "\n" + _sam_records(5, seed=2))
    _refused_by_both(tmp_path, inp, "header line 4")


def test_bare_comment_in_bam_header_text_stays_refused(tmp_path: Path):
    """htslib's allowance is its SAM reader's only: a BAM whose header text
    holds a bare `@CO` fails in samtools too."""
    inp = tmp_path / "bare_co.bam"
    text = "@HD\tVN:1.6\n" + SQ + "@CO\n"
    recs = [u.Rec(name=f"r{i}", pos=100 - i).framed() for i in range(5)]
    inp.write_bytes(u.bam_file(u.bam_header(text, REFS), recs))
    _refused_by_both(tmp_path, inp, "malformed header line 4")


# ---- BAM without the BGZF EOF block -------------------------------------------------


@pytest.fixture(scope="module")
def eof_inputs(tmp_path_factory) -> dict[str, Path]:
    """A BAM of many blocks written by samtools, and copies: without the EOF
    block, and cut at a block boundary inside a record."""
    d = tmp_path_factory.mktemp("eof")
    sam = d / "in.sam"
    sam.write_text("@HD\tVN:1.6\tSO:unsorted\n" + SQ + _sam_records(40_000, seed=3))
    full = d / "full.bam"
    oracle.to_bam(str(sam), str(full))
    data = full.read_bytes()
    assert data.endswith(u.EOF_BLOCK)
    offs = u.block_offsets(data)
    assert len(offs) > 20, "the input must span many blocks (several inflate jobs)"
    noeof = d / "noeof.bam"
    noeof.write_bytes(data[: -len(u.EOF_BLOCK)])
    # Cut where a block's payload ends inside a record: samtools' blocks end
    # at record boundaries, so rebuild the records in 0xff00-byte chunks.
    payload = gzip.decompress(data)
    cut = d / "cut.bam"
    blocks = u.bgzf_blocks(payload)
    cut.write_bytes(b"".join(blocks[: len(blocks) // 2]))
    # A second input for several inputs and merge: sorted, without EOF block.
    sorted_bam = d / "sorted.bam"
    oracle.samtools("sort", "--no-PG", "-o", str(sorted_bam), str(full))
    sorted_noeof = d / "sorted_noeof.bam"
    sorted_noeof.write_bytes(sorted_bam.read_bytes()[: -len(u.EOF_BLOCK)])
    return {"sam": sam, "full": full, "noeof": noeof, "cut": cut, "sorted": sorted_bam, "sorted_noeof": sorted_noeof}


def _warned(err: str, name: str) -> bool:
    return any(name in line and "EOF marker is absent" in line for line in err.splitlines())


@pytest.mark.parametrize("threads", [[], ["-@", "3"]], ids=["t1", "t3"])
def test_missing_eof_block_sorts_as_samtools_with_a_warning(tmp_path: Path, eof_inputs, threads):
    inp = eof_inputs["noeof"]
    errs = _compare_sorts(tmp_path, inp, "noeof", threads)
    for case, err in errs.items():
        assert _warned(err, str(inp)), f"{case}: no warning naming the input; stderr:\n{err}"
    stats = tmp_path / "stats.json"
    _alnsort_sort([*threads, "--stats-json", str(stats), "-o", str(tmp_path / "x.bam"), str(inp)])
    got = json.loads(stats.read_text())
    assert (got["missing_eof_inputs"], got["records_in"]) == (1, 40_000)


def test_missing_eof_block_on_stdin(tmp_path: Path, eof_inputs):
    inp = eof_inputs["noeof"]
    s_out = tmp_path / "s.sam"
    _samtools_sort(inp, ["-n"], "sam", s_out)
    res = _alnsort_sort(["-n", "-@", "2", "-O", "sam", "-"], stdin_path=str(inp))
    _assert_same(s_out.read_bytes(), res.stdout, "noeof from stdin")
    assert _warned(res.stderr.decode(), "<stdin>"), res.stderr.decode()


def test_missing_eof_block_in_several_inputs_and_merge(tmp_path: Path, eof_inputs):
    """Several inputs: each input without its EOF block is warned about and
    counted; the output is the one the same inputs with their EOF blocks
    give. `alnsort merge` of sorted inputs without EOF blocks writes
    samtools merge's records."""
    noeof, full = eof_inputs["noeof"], eof_inputs["full"]
    stats = tmp_path / "stats.json"
    got = tmp_path / "got.sam"
    res = _alnsort_sort(["--stats-json", str(stats), "-O", "sam", "-o", str(got), str(noeof), str(full), str(noeof)])
    err = res.stderr.decode()
    assert sum(_warned(line, str(noeof)) for line in err.splitlines()) == 2, err
    assert json.loads(stats.read_text())["missing_eof_inputs"] == 2
    want = tmp_path / "want.sam"
    _alnsort_sort(["-O", "sam", "-o", str(want), str(full), str(full), str(full)])
    _assert_same(want.read_bytes(), got.read_bytes(), "several inputs without EOF blocks")

    sorted_bam, sorted_noeof = eof_inputs["sorted"], eof_inputs["sorted_noeof"]
    s_out = tmp_path / "merged.samtools.sam"
    oracle.samtools("merge", "--no-PG", "-O", "SAM", "-o", str(s_out), str(sorted_noeof), str(sorted_bam))
    a_out = tmp_path / "merged.alnsort.sam"
    res = subprocess.run(
        [harness.alnsort_path(), "merge", "--no-PG", "-O", "SAM", "-o", str(a_out), str(sorted_noeof), str(sorted_bam)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=harness.RUN_TIMEOUT_S,
    )
    harness.check_ok(res)
    _assert_same(s_out.read_bytes(), a_out.read_bytes(), "merge without EOF block")
    assert _warned(res.stderr.decode(), str(sorted_noeof)), res.stderr.decode()


def test_bgzf_sam_without_eof_block(tmp_path: Path, eof_inputs):
    """BGZF-compressed SAM text without the EOF block: samtools warns
    ("EOF marker is absent", from its block reader) and sorts it."""
    inp = tmp_path / "noeof.sam.gz"
    inp.write_bytes(b"".join(u.bgzf_blocks(eof_inputs["sam"].read_bytes())))
    errs = _compare_sorts(tmp_path, inp, "sam_noeof", ["-@", "2"])
    assert all(_warned(e, str(inp)) for e in errs.values()), errs
    stats = tmp_path / "stats.json"
    _alnsort_sort(["--stats-json", str(stats), "-o", str(tmp_path / "x.bam"), str(inp)])
    assert json.loads(stats.read_text())["missing_eof_inputs"] == 1


def test_header_only_bam_without_eof_block(tmp_path: Path):
    inp = tmp_path / "empty_noeof.bam"
    inp.write_bytes(u.bam_file(u.bam_header("@HD\tVN:1.6\n" + SQ, REFS), [], eof=False))
    errs = _compare_sorts(tmp_path, inp, "empty_noeof")
    assert all(_warned(e, str(inp)) for e in errs.values()), errs


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_record_cut_at_a_block_boundary_stays_an_error(tmp_path: Path, eof_inputs, stdin):
    src = eof_inputs["cut"]
    s = oracle.samtools("sort", "-o", str(tmp_path / "s.bam"), str(src), check=False)
    assert s.returncode != 0, "samtools sorted a BAM with a record cut short"
    out = tmp_path / "a.bam"
    before = {p.name for p in tmp_path.iterdir()}
    if stdin:
        res = harness.run_alnsort(["-o", str(out), "-"], stdin_path=str(src))
        name = "<stdin>"
    else:
        res = harness.run_alnsort(["-o", str(out), str(src)])
        name = str(src)
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, err
    assert f"{name}: record " in err and "uncompressed byte offset" in err and "truncated" in err, err
    assert harness.leftover_files(tmp_path, before) == [], "a failed run left files behind"


# ---- field values ---------------------------------------------------------------------


def _bam(tmp_path: Path, name: str, recs: list[u.Rec]) -> Path:
    p = tmp_path / name
    p.write_bytes(u.bam_file(u.bam_header("@HD\tVN:1.6\tSO:unsorted\n" + SQ, REFS), [r.framed() for r in recs]))
    return p


def test_positions_below_minus_one_are_kept(tmp_path: Path):
    """htslib reads any i32 `pos` and `next_pos`: samtools sorts them (pos+1
    compared unsigned: a negative pos sorts after its reference's others)
    and prints them as they are."""
    recs = [
        u.Rec(name="mate_neg", pos=500, next_ref_id=0, next_pos=-5, flag=1 | 32),
        u.Rec(name="mate_min", pos=400, next_ref_id=1, next_pos=-(2**31), flag=1),
        u.Rec(name="pos_neg", pos=-5),
        u.Rec(name="pos_min", ref_id=1, pos=-(2**31), next_pos=-7),
        u.Rec(name="unplaced_neg", ref_id=-1, pos=-9, flag=4, cigar=[], next_pos=-3),
        u.Rec(name="plain", pos=600),
        u.Rec(name="plain2", ref_id=1, pos=7),
    ]
    _compare_sorts(tmp_path, _bam(tmp_path, "neg_pos.bam", recs), "neg_pos")


def test_field_limits_are_kept(tmp_path: Path):
    """Fields at their limits that samtools keeps (these matched before the
    negative positions did; kept as a guard of the same contract)."""
    b_arrays = (
        b"XcBc" + struct.pack("<Ibb", 2, -128, 127)
        + b"XCBC" + struct.pack("<IB", 1, 255)
        + b"XsBs" + struct.pack("<Ih", 1, -32768)
        + b"XSBS" + struct.pack("<I", 0)
        + b"XiBi" + struct.pack("<Ii", 1, -(2**31))
        + b"XIBI" + struct.pack("<II", 1, 2**32 - 1)
        + b"XfBf" + struct.pack("<If", 1, 1.5)
    )
    recs = [
        u.Rec(name="tlen_min", pos=10, tlen=-(2**31)),
        u.Rec(name="tlen_max", pos=10, tlen=2**31 - 1),
        u.Rec(name="mapq255", pos=20, mapq=255),
        u.Rec(name="all_flags", pos=30, flag=0xFFFF & ~4),
        u.Rec(name="qual_ff", pos=40, qual=b"\xff" * 10),
        u.Rec(name="b_arrays", pos=50, aux=b_arrays),
        u.Rec(name="empty_z_h", pos=60, aux=b"XZZ\0XHH\0XAA!"),
        u.Rec(name="eq_and_n", pos=70, seq="=ACGTNNN=A"),
        u.Rec(name="n" * 254, pos=80),
        u.Rec(name="no_cigar", pos=90, cigar=[]),
        u.Rec(name="end_of_ref", pos=REFS[0][1] - 10),
    ]
    inp = _bam(tmp_path, "limits.bam", recs)
    # A wrong bin: samtools recomputes it from the CIGAR (and keeps it
    # without one); patch record 1's bin field.
    raw = bytearray(gzip.decompress(inp.read_bytes()))
    first = len(u.bam_header("@HD\tVN:1.6\tSO:unsorted\n" + SQ, REFS))
    raw[first + 4 + 10 : first + 4 + 12] = struct.pack("<H", 7)
    inp.write_bytes(b"".join(u.bgzf_blocks(bytes(raw))) + u.EOF_BLOCK)
    _compare_sorts(tmp_path, inp, "limits")


@pytest.mark.parametrize("field,value", [("POS", "-5"), ("PNEXT", "-5")])
def test_sam_positions_below_zero_stay_refused(tmp_path: Path, field: str, value: str):
    pos, pnext = ("-5", "0") if field == "POS" else ("10", "-5")
    inp = tmp_path / "neg.sam"
    inp.write_text("@HD\tVN:1.6\n" + SQ + f"a\t0\tchr1\t{pos}\t60\t4M\t=\t{pnext}\t0\tACGT\tIIII\n")
    _refused_by_both(tmp_path, inp, f"malformed {field} field")


# ---- empty lines -----------------------------------------------------------------


@pytest.mark.parametrize(
    "where, line",
    [("middle", 6), ("end", 8), ("end_twice", 8), ("after_header", 4), ("first", 1)],
)
@pytest.mark.parametrize("form", ["sam", "sam.gz", "stdin"])
def test_an_empty_line_is_refused_as_samtools_refuses_it(tmp_path: Path, where: str, line: int, form: str):
    """An empty line among the records, after the last one (hts-specs'
    `rnext.fail*.sam` style), right after the header or before it: samtools
    1.24 stops ("Parse error at line N", "truncated file"); so does alnsort,
    naming the file and the line, leaving no output."""
    head = "@HD\tVN:1.6\n" + SQ
    recs = _sam_records(4, 3).splitlines(keepends=True)
    text = {
        "middle": head + "".join(recs[:2]) + "\n" + "".join(recs[2:]),
        "end": head + "".join(recs) + "\n",
        "end_twice": head + "".join(recs) + "\n\n",
        "after_header": head + "\n" + "".join(recs),
        "first": "\n" + head + "".join(recs),
    }[where]
    inp = tmp_path / ("in.sam.gz" if form == "sam.gz" else "in.sam")
    if form == "sam.gz":
        inp.write_bytes(gzip.compress(text.encode()))
    else:
        inp.write_text(text)
    s = oracle.samtools("sort", "-o", str(tmp_path / "s.bam"), str(inp), check=False)
    assert s.returncode != 0, f"samtools 1.24 sorted {where}; the test's premise is wrong"
    if where != "first":
        assert f"Parse error at line {line}" in s.stderr.decode(), s.stderr
    out = tmp_path / "a.bam"
    before = {p.name for p in tmp_path.iterdir()}
    if form == "stdin":
        res = harness.run_alnsort(["-o", str(out), "-"], stdin_path=str(inp))
        name = "<stdin>"
    else:
        res = harness.run_alnsort(["-o", str(out), str(inp)])
        name = inp.name
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, f"alnsort exited {res.returncode}; stderr:\n{err}"
    assert f"{name}: line {line} (record" in err and "an empty line" in err, err
    assert harness.leftover_files(tmp_path, before) == [], "a failed run left files behind"


# ---- CRAM output of positions below -1 -------------------------------------------------


@pytest.fixture(scope="module")
def small_ref(tmp_path_factory) -> Path:
    """A FASTA for REFS (random bases), with its .fai."""
    d = tmp_path_factory.mktemp("negref")
    rng = random.Random(5)
    fa = d / "ref.fa"
    fa.write_text("".join(f">{n}\n{''.join(rng.choice('ACGT') for _ in range(ln))}\n" for n, ln in REFS))
    oracle.samtools("faidx", str(fa))
    return fa


@pytest.mark.parametrize(
    "rec",
    [
        u.Rec(name="mate_neg", pos=500, next_ref_id=0, next_pos=-5, flag=1 | 32),
        u.Rec(name="mate_min", pos=400, next_ref_id=1, next_pos=-(2**31), flag=1),
    ],
    ids=["mate_neg", "mate_min"],
)
def test_cram_output_stores_a_mate_position_below_minus_one_as_samtools(tmp_path: Path, small_ref: Path, rec):
    """A BAM mate position below -1 written to CRAM: htslib stores it as 0
    (PNEXT 0, `MAX(mpos+1, 0)`), so samtools reads back PNEXT 0 from its own
    CRAM; it reads the same from alnsort's."""
    bam = _bam(tmp_path, "in.bam", [rec, u.Rec(name="plain", pos=600)])
    theirs, ours = tmp_path / "samtools.cram", tmp_path / "alnsort.cram"
    oracle.samtools("view", "--no-PG", "-C", "-T", str(small_ref), "-o", str(theirs), str(bam))
    harness.check_ok(harness.run_alnsort(["-n", "--no-PG", "-O", "cram", "--reference", str(small_ref), "-o", str(ours), str(bam)]))
    view = lambda p: sorted(oracle.samtools("view", "-T", str(small_ref), str(p)).stdout.decode().splitlines())  # noqa: E731
    want = view(theirs)
    assert any(ln.startswith(rec.name) and ln.split("\t")[7] == "0" for ln in want), want
    assert view(ours) == want


@pytest.mark.parametrize(
    "rec",
    [
        u.Rec(name="pos_neg", pos=-5),
        u.Rec(name="pos_min", ref_id=1, pos=-(2**31), next_pos=-7),
        u.Rec(name="unplaced_neg", ref_id=-1, pos=-9, flag=4, cigar=[], next_pos=-3),
        u.Rec(name="unmapped_placed_neg", ref_id=0, pos=-9, flag=4, cigar=[]),
    ],
    ids=["pos_neg", "pos_min", "unplaced_neg", "unmapped_placed_neg"],
)
def test_cram_output_of_a_position_below_minus_one_is_refused_as_samtools_refuses_it(
    tmp_path: Path, small_ref: Path, rec
):
    """A BAM record whose POS is below 0, mapped or not: samtools fails
    writing it to CRAM; alnsort refuses it by name and leaves no output
    (it wrote an unplaced one, and a placed unmapped one that samtools then
    could not read)."""
    bam = _bam(tmp_path, "in.bam", [rec, u.Rec(name="plain", pos=600)])
    s = oracle.samtools("view", "--no-PG", "-C", "-T", str(small_ref), "-o", str(tmp_path / "s.cram"), str(bam), check=False)
    assert s.returncode != 0
    (tmp_path / "s.cram").unlink(missing_ok=True)
    before = {p.name for p in tmp_path.iterdir()}
    out = tmp_path / "out.cram"
    res = harness.run_alnsort(["-O", "cram", "--reference", str(small_ref), "-o", str(out), str(bam)])
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert f"out.cram: CRAM record" in err and f"it has position {rec.pos + 1} (POS below 0" in err, err
    assert harness.leftover_files(tmp_path, before) == []
