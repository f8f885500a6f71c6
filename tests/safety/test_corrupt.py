"""The corruption table (issue 3, "Output"): every malformed input stops the
run with exit status 1 and a message that names the file, a byte offset or
line number, the record number where a record is involved, and what was
wrong; and afterwards there is no output file, no index, no pending output
temp file, and nothing in the `-T` directory.

Each BAM case is built byte by byte (safety_util.py) so the table says which
field it broke. Cases that must fail late run with `-m 1M` on inputs large
enough that alnsort has already spilled run files when it meets the damage,
so the temp-directory check is not vacuous.
"""

from __future__ import annotations

import gzip
import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pytest

import safety_util as u

# ---- building the inputs -----------------------------------------------------


@lru_cache(maxsize=None)
def header() -> bytes:
    return u.bam_header()


@lru_cache(maxsize=None)
def good_bam() -> bytes:
    """3000 records in 4 record blocks after the header block."""
    return u.bam_file(header(), u.records(3000))


def offsets() -> list[int]:
    return u.block_offsets(good_bam())


def with_record(rec: bytes, n_before: int = 5, n_after: int = 0) -> bytes:
    """A valid BAM whose record number n_before+1 is REC."""
    return u.bam_file(header(), u.records(n_before) + [rec] + u.records(n_after, seed=2))


def patch(data: bytes, at: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def rec_patch(at: int, fmt: str, value, **fields) -> bytes:
    """A record (with block_size) with FMT packed at byte AT of its framed form.
    Offsets: 4 + field offset of SAM spec 4.2.1 (refID 0, pos 4, l_read_name 8,
    n_cigar_op 12, flag 14, l_seq 16, next_refID 20)."""
    return patch(u.Rec(**fields).framed(), at, fmt, value)


def bam_hdr(text=b"@HD\tVN:1.6\n", n_ref=None, refs=((b"chr1\0", 1000),), l_text=None, l_name=None) -> bytes:
    out = u.BAM_MAGIC + struct.pack("<I", len(text) if l_text is None else l_text) + text
    out += struct.pack("<i", len(refs) if n_ref is None else n_ref)
    for name, ln in refs:
        out += struct.pack("<i", len(name) if l_name is None else l_name) + name + struct.pack("<I", ln)
    return out


def one_block(payload: bytes) -> bytes:
    return u.bgzf_block(payload) + u.EOF_BLOCK


def flip_in_block(data: bytes, block: int, delta: int) -> bytes:
    b = bytearray(data)
    b[offsets()[block] + delta] ^= 0xFF
    return bytes(b)


def replace_block(data: bytes, block: int, new: bytes) -> bytes:
    offs = offsets()
    return data[: offs[block]] + new + data[offs[block + 1] :]


def body_block(**kw) -> bytes:
    """A BGZF block with the first 5000 bytes of records, footer overridable."""
    return u.bgzf_block(u.pack_records(u.records(3000))[:5000], **kw)


def bsize_patched(value: int) -> bytes:
    return patch(body_block(), 16, "<H", value - 1)


def late_bam_error() -> bytes:
    """20000 good records (enough to spill with -m 1M), then a bad refID."""
    bad = rec_patch(4 + 0, "<i", 7)
    return u.bam_file(header(), u.records(20000, seed=3) + [bad] + u.records(10, seed=4))


def late_bam_truncation() -> bytes:
    """20000 good records, then the file cut in the middle of a block."""
    data = u.bam_file(header(), u.records(20000, seed=3))
    offs = u.block_offsets(data)
    return data[: offs[-3] + 200]


def sam(body: str, hdr: str = u.SAM_HEADER) -> bytes:
    return (hdr + body).encode()


def late_sam_error() -> bytes:
    return sam(u.valid_sam_lines(30000) + u.sam_line(name="bad", cigar="10M3Q"))


# ---- the table ------------------------------------------------------------------

TRUNCATED_RECORD = (r"truncated: (block_size says \d+ bytes but the input ends after \d+"
                    r"|the input ends inside the record's block_size field)")


@dataclass
class Case:
    id: str
    make: Callable[[], bytes]
    message: str  # regex the message must match
    record: bool = False  # the message must name a record number
    stdin: bool = False
    fmt: str = "bam"
    where: str = r"(byte offset \d+|uncompressed offset \d+|line \d+)"
    extra: list[str] = field(default_factory=list)


CASES = [
    # -- empty / not SAM-or-BAM
    Case("empty_file", lambda: b"", r"the input is empty", where=""),
    Case("empty_stdin", lambda: b"", r"the input is empty", stdin=True, where=""),
    Case("bgzf_eof_block_only", lambda: u.EOF_BLOCK, r"the input is empty", where=""),
    Case("bad_bam_magic", lambda: one_block(b"BAM\x02" + header()[4:]), r"not a BAM file.*BAM magic",
         where=r"bytes 0\.\.4"),
    Case("binary_not_sam", lambda: one_block(b"\x00\x01\x02garbage\n"), r"neither BAM nor SAM", where=r"byte 0"),
    # -- BGZF framing
    Case("truncated_in_header_block", lambda: u.bgzf_block(header())[:50], r"ends mid-block.*truncated"),
    Case("truncated_in_header_text", lambda: one_block(header()[:30]), r"truncated BAM header: header text"),
    Case("truncated_mid_block", lambda: good_bam()[: offsets()[2] + 100], r"ends mid-block.*truncated", record=True),
    Case("truncated_mid_block_stdin", lambda: good_bam()[: offsets()[2] + 100], r"ends mid-block", record=True,
         stdin=True),
    Case("truncated_mid_record", lambda: u.bgzf_block(header()) + u.bgzf_block(u.pack_records(u.records(50))[:1000])
         + u.EOF_BLOCK, r"truncated: block_size says \d+ bytes but the input ends after \d+", record=True),
    # A file cut at a block boundary inside a record (records straddle the
    # 0xff00-byte blocks): no EOF block either, but a record is cut short.
    # (Whole records and no EOF block sort with a warning, as in samtools:
    # tests/diff/test_sambam_conformance.py.)
    Case("cut_at_block_boundary_mid_record", lambda: good_bam()[: offsets()[-2]], TRUNCATED_RECORD, record=True),
    Case("cut_at_block_boundary_mid_record_stdin", lambda: good_bam()[: offsets()[-2]], TRUNCATED_RECORD,
         record=True, stdin=True),
    Case("flipped_byte_in_deflate_data", lambda: flip_in_block(good_bam(), 2, 40),
         r"deflate data is corrupt|CRC32 mismatch|ISIZE mismatch", record=True),
    Case("flipped_byte_late_in_block", lambda: flip_in_block(good_bam(), 3, 5000),
         r"deflate data is corrupt|CRC32 mismatch|ISIZE mismatch", record=True),
    Case("wrong_crc", lambda: replace_block(good_bam(), 1, body_block(crc=0x1234)), r"CRC32 mismatch", record=True),
    Case("wrong_isize_smaller", lambda: replace_block(good_bam(), 1, body_block(isize=4999)), r"ISIZE mismatch",
         record=True),
    Case("wrong_isize_larger", lambda: replace_block(good_bam(), 1, body_block(isize=6000)), r"ISIZE mismatch",
         record=True),
    Case("bsize_past_end_of_file", lambda: u.bgzf_block(header()) + bsize_patched(60000),
         r"ends mid-block.*truncated", record=True),
    Case("bsize_too_small", lambda: replace_block(good_bam(), 1, bsize_patched(11)), r"block size 11 is out of range",
         record=True),
    Case("bad_gzip_magic_in_block", lambda: flip_in_block(good_bam(), 1, 0), r"bad header: not gzip", record=True),
    Case("no_bc_subfield", lambda: replace_block(good_bam(), 1, patch(body_block(), 12, "2s", b"XY")),
         r"bad header: no BC", record=True),
    # -- BAM header
    Case("l_text_absurd", lambda: one_block(bam_hdr(l_text=0xFFFFFFF0)), r"truncated BAM header: header text"),
    Case("n_ref_negative", lambda: one_block(bam_hdr(n_ref=-3)), r"n_ref is -3"),
    Case("n_ref_absurd", lambda: one_block(bam_hdr(n_ref=1 << 30)), r"truncated BAM header: reference l_name"),
    Case("l_name_zero", lambda: one_block(bam_hdr(l_name=0)), r"reference 0 has l_name 0"),
    Case("l_name_negative", lambda: one_block(bam_hdr(l_name=-7)), r"reference 0 has l_name -7"),
    Case("l_name_absurd", lambda: one_block(bam_hdr(l_name=1 << 30)), r"truncated BAM header: reference name"),
    # fuzz finding 4: samtools refuses a zero-length reference
    Case("l_ref_zero", lambda: one_block(bam_hdr(refs=((b"chr1\0", 0),))), r"reference 0 \(\"chr1\"\) has length 0"),
    Case("l_name_absurd_stdin", lambda: one_block(bam_hdr(l_name=1 << 30)), r"truncated BAM header", stdin=True),
    # -- BAM records
    Case("block_size_too_small", lambda: with_record(rec_patch(0, "<I", 10)), r"block_size 10 is outside",
         record=True),
    Case("block_size_negative", lambda: with_record(rec_patch(0, "<i", -5)), r"block_size -5 is outside",
         record=True),
    Case("block_size_past_data", lambda: with_record(rec_patch(0, "<I", 5000)),
         r"block_size says 5000 bytes but the input ends", record=True),
    Case("block_size_past_budget", lambda: with_record(rec_patch(0, "<I", 0x7FFFFFF0)),
         r"block_size says 2147483632 bytes.*more than the \d+ bytes one record may take", record=True),
    Case("l_read_name_zero", lambda: with_record(rec_patch(4 + 8, "<B", 0)), r"l_read_name is 0", record=True),
    Case("name_not_nul_terminated", lambda: with_record(rec_patch(4 + 32 + 3, "<B", ord("x"), name="abc")),
         r"not NUL-terminated", record=True),
    Case("n_cigar_op_past_record", lambda: with_record(rec_patch(4 + 12, "<H", 500)),
         r"need \d+ bytes but the record has \d+", record=True),
    Case("l_seq_past_record", lambda: with_record(rec_patch(4 + 16, "<I", 5000)),
         r"need \d+ bytes but the record has \d+", record=True),
    Case("l_seq_negative", lambda: with_record(rec_patch(4 + 16, "<i", -5)), r"l_seq -5 is negative", record=True),
    Case("ref_id_out_of_range", lambda: with_record(rec_patch(4 + 0, "<i", 7)), r"refID 7 is outside -1\.\.2",
         record=True),
    Case("ref_id_below_minus_one", lambda: with_record(rec_patch(4 + 0, "<i", -2)), r"refID -2 is outside",
         record=True),
    Case("next_ref_id_out_of_range", lambda: with_record(rec_patch(4 + 20, "<i", 9)),
         r"next_refID 9 is outside -1\.\.2", record=True),
    Case("cigar_seq_length_mismatch", lambda: with_record(u.Rec(cigar=[(5, "M")]).framed()),
         r"CIGAR covers 5 query bases but l_seq is 10", record=True),
    Case("aux_bad_type", lambda: with_record(u.Rec(aux=b"XXq123").framed()), r"tag \"XX\" has unknown type 'q'",
         record=True),
    Case("aux_z_without_nul", lambda: with_record(u.Rec(aux=b"XXZabc").framed()),
         r"tag \"XX\" of type 'Z' runs past the end", record=True),
    Case("aux_b_bad_subtype", lambda: with_record(u.Rec(aux=b"XXBq" + struct.pack("<i", 2) + b"ab").framed()),
         r"B array of unknown element type 'q'", record=True),
    Case("aux_truncated_tag", lambda: with_record(u.Rec(aux=b"XIi\x01\x00\x00\x00X").framed()),
         r"too few for a tag and a type", record=True),
    Case("aux_bad_type_stdin", lambda: with_record(u.Rec(aux=b"XXq123").framed()), r"unknown type 'q'", record=True,
         stdin=True),
    Case("bad_record_after_spill", late_bam_error, r"record 20001 .*refID 7 is outside", record=True,
         extra=["-m", "1M"]),
    Case("truncated_after_spill", late_bam_truncation, r"ends mid-block.*truncated", record=True,
         extra=["-m", "1M"]),
    # -- SAM
    Case("sam_too_few_fields", lambda: sam("r1\t0\tchr1\n"), r"too few fields", record=True, fmt="sam"),
    Case("sam_too_few_fields_no_qual", lambda: sam("r1\t0\tchr1\t100\t60\t10M\t*\t0\t0\tACGTACGTAC\n"),
         r"too few fields", record=True, fmt="sam"),
    Case("sam_bad_cigar", lambda: sam(u.sam_line(cigar="10Q")), r"CIGAR", record=True, fmt="sam"),
    Case("sam_cigar_seq_mismatch", lambda: sam(u.sam_line(cigar="7M")),
         r"CIGAR and query sequence are of different length", record=True, fmt="sam"),
    Case("sam_seq_qual_mismatch", lambda: sam(u.sam_line(qual="III")), r"SEQ and QUAL are of different length",
         record=True, fmt="sam"),
    Case("sam_non_numeric_pos", lambda: sam(u.sam_line(pos="1x0")), r"malformed POS field", record=True, fmt="sam"),
    Case("sam_bad_flag_text", lambda: sam(u.sam_line(flag="abc")), r"malformed FLAG field", record=True, fmt="sam"),
    Case("sam_flag_out_of_range", lambda: sam(u.sam_line(flag="70000")), r"outside allowed range", record=True,
         fmt="sam"),
    Case("sam_bad_aux", lambda: sam(u.sam_line(extra="\tXX:q:1")), r"aux field", record=True, fmt="sam"),
    Case("sam_sq_without_ln", lambda: sam(u.sam_line(), hdr="@HD\tVN:1.6\n@SQ\tSN:chr1\n"),
         r"header line 2: @SQ line \"chr1\" has an invalid or no LN tag", fmt="sam"),
    # fuzz finding 3: a NUL inside a header line would end the BAM text
    Case("sam_nul_in_sq_line", lambda: sam(u.sam_line(), hdr="@HD\tVN:1.6\n@SQ\tSN:chr1\x01\x00\x00\tLN:1000\n"),
         r"header line 2.*NUL byte", fmt="sam"),
    Case("sam_bad_header_line", lambda: sam(u.sam_line(), hdr="@HD\tVN:1.6\n@XYZ\n"), r"header line 2", fmt="sam"),
    Case("sam_bad_line_stdin", lambda: sam(u.valid_sam_lines(10) + u.sam_line(qual="II")),
         r"line 14 \(record 11\): SEQ and QUAL", record=True, fmt="sam", stdin=True),
    Case("sam_error_after_spill", late_sam_error, r"line 30004 \(record 30001\): CIGAR", record=True, fmt="sam",
         extra=["-m", "1M"]),
    Case("sam_gz_truncated", lambda: u.bgzf_block(sam(u.valid_sam_lines(100)))[:300], r"ends mid-block",
         fmt="sam"),
]


def _check_failure(case: Case, res, display_name: str, out: Path, tdir: Path, outdir: Path) -> None:
    err = res.stderr.decode("utf-8", "replace")
    ctx = f"case {case.id}: exit {res.returncode}; stderr:\n{err}"
    assert res.returncode == 1, ctx
    assert "panicked" not in err and "RUST_BACKTRACE" not in err, ctx
    assert re.search(case.message, err), f"expected /{case.message}/\n{ctx}"
    assert display_name in err, f"message does not name the input {display_name!r}\n{ctx}"
    if case.where:
        assert re.search(case.where, err), f"message gives no offset/line (/{case.where}/)\n{ctx}"
    if case.record:
        assert re.search(r"record \d+", err), f"message names no record number\n{ctx}"
    assert not out.exists(), f"output file left behind\n{ctx}"
    assert not Path(str(out) + ".csi").exists(), f"index left behind\n{ctx}"
    assert u.entries(outdir) == [], f"debris beside the output: {u.entries(outdir)}\n{ctx}"
    assert u.entries(tdir) == [], f"debris in -T: {u.entries(tdir)}\n{ctx}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corrupt_input_fails_cleanly(case: Case, tmp_path: Path):
    data = case.make()
    indir, outdir, tdir = tmp_path / "in", tmp_path / "out", tmp_path / "T"
    for d in (indir, outdir, tdir):
        d.mkdir()
    out = outdir / "sorted.bam"
    args = ["--write-index", "-T", str(tdir), "-o", str(out), *case.extra]
    if case.stdin:
        res = u.run([*args, "-"], stdin=data)
        name = "<stdin>"
    else:
        inp = indir / f"{case.id}.{case.fmt}"
        inp.write_bytes(data)
        res = u.run([*args, str(inp)])
        name = str(inp)
    _check_failure(case, res, name, out, tdir, outdir)


def test_table_is_large_enough():
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)


# ---- valid edge cases ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["bam", "sam", "sam_stdin"])
def test_header_only_input_gives_header_only_output(fmt: str, tmp_path: Path):
    """samtools 1.24 sorts a header-only file into a header-only file (exit 0,
    @HD SO:coordinate); alnsort must do the same."""
    import oracle

    if fmt == "bam":
        data = one_block(header())
    else:
        data = u.SAM_HEADER.encode()
    inp = tmp_path / ("in.bam" if fmt == "bam" else "in.sam")
    inp.write_bytes(data)
    tdir = tmp_path / "T"
    tdir.mkdir()
    if fmt == "sam_stdin":
        res = u.run(["-T", str(tdir), "-O", "SAM", "-"], stdin=data)
    else:
        res = u.run(["-T", str(tdir), "-O", "SAM", str(inp)])
    assert res.returncode == 0, res.stderr.decode()
    want = oracle.samtools("sort", "-O", "SAM", "-o", "-", str(inp)).stdout.decode()
    got = res.stdout.decode()
    assert oracle.strip_pg(got) == oracle.strip_pg(want)
    assert "SO:coordinate" in got and not [l for l in got.splitlines() if not l.startswith("@")]
    assert u.entries(tdir) == []


def test_unknown_reference_is_a_warning_as_in_samtools_with_the_option(tmp_path: Path):
    """htslib reads an RNAME/RNEXT missing from the header as '*' (unmapped)
    and warns; samtools sort then succeeds. With --unknown-reference=unmapped
    (by default it is an error: tests/diff/test_unknown_reference.py) alnsort
    warns the same way, naming the file, line and record, and sorts the same
    records."""
    import oracle

    inp = tmp_path / "in.sam"
    inp.write_bytes(sam(u.valid_sam_lines(5) + u.sam_line(name="u1", rname="chrX")
                        + "u2\t1\tchr1\t100\t60\t10M\tchrZ\t50\t0\tACGTACGTAC\tIIIIIIIIII\n"))
    tdir = tmp_path / "T"
    tdir.mkdir()
    res = u.run(["-T", str(tdir), "--unknown-reference=unmapped", "-O", "SAM", str(inp)])
    err = res.stderr.decode()
    assert res.returncode == 0, err
    assert re.search(rf"{re.escape(str(inp))}: line 9 \(record 6\): unrecognized reference name \"chrX\"; "
                     r"treated as unmapped", err), err
    assert re.search(r"line 10 \(record 7\): unrecognized mate reference name \"chrZ\"", err), err
    want = oracle.samtools("sort", "-O", "SAM", "-o", "-", str(inp)).stdout.decode()
    assert oracle.strip_pg(res.stdout.decode()) == oracle.strip_pg(want)
    assert u.entries(tdir) == []


def test_truncated_plain_gzip_sam_is_an_error(tmp_path: Path):
    """A plain gzip SAM cut short: an error naming the file, no output, no
    temp files."""
    inp = tmp_path / "in.sam.gz"
    data = gzip.compress(sam(u.valid_sam_lines(200)))
    inp.write_bytes(data[: len(data) // 2])
    out = tmp_path / "o.bam"
    tdir = tmp_path / "t"
    tdir.mkdir()
    res = u.run(["-T", str(tdir), "-o", str(out), str(inp)])
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert str(inp) in err and ("deflate" in err or "gzip" in err or "end of file" in err), err
    assert not out.exists()
    assert u.entries(tdir) == []


def test_gzip_wrapped_bam_is_refused(tmp_path: Path):
    """BAM must be BGZF: BAM bytes inside plain gzip are refused with a
    message that says so (samtools refuses them too)."""
    raw = gzip.decompress(u.bam_file(header(), u.records(5)))
    inp = tmp_path / "in.bam.gz"
    inp.write_bytes(gzip.compress(raw))
    out = tmp_path / "o.bam"
    res = u.run(["-o", str(out), str(inp)])
    err = res.stderr.decode()
    assert res.returncode == 1 and "BGZF" in err and str(inp) in err, err
    assert not out.exists()
