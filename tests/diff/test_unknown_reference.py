"""No silent loss (project issue 12, item 5): a SAM record whose RNAME, or
RNEXT other than '=' and '*', is not among the header's @SQ names.

samtools 1.24 (htslib's sam_parse1) warns, reads the name as '*' (an unknown
RNAME also sets the unmapped flag) and exits 0: the record's position is lost
without the run failing. alnsort:

* by default fails (exit 1) with a message naming the file, the line, the
  record and the name, and leaves no output (an existing output untouched)
  and no temporary files;
* with --unknown-reference=unmapped writes exactly samtools' records, warns
  for each name as before, and counts such records in --stats-json
  (unknown_reference_records);
* refuses any other value of --unknown-reference.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import harness
import oracle
import pytest
from harness import check_ok, run_alnsort

pytestmark = pytest.mark.alnsort_only

HEADER = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:100000\n@SQ\tSN:chr2\tLN:100000\n"
UNMAPPED = ["--unknown-reference=unmapped"]


def _line(name: str, flag: int, rname: str, pos: int, rnext: str, pnext: int, tlen: int = 0) -> str:
    cigar = "10M" if rname != "*" else "*"
    return f"{name}\t{flag}\t{rname}\t{pos}\t60\t{cigar}\t{rnext}\t{pnext}\t{tlen}\tACGTACGTAC\tIIIIIIIIII\n"


def _records(n: int, seed: int, unknown: dict[int, tuple[str, str]]) -> tuple[str, int]:
    """N SAM records on chr1/chr2 (paired, mates on either reference or '='),
    record i (0-based) taking UNKNOWN[i] = (rname, rnext) instead. Returns
    the text and how many records name an unknown reference."""
    rng = random.Random(seed)
    out = []
    bad = 0
    for i in range(n):
        rname = rng.choice(["chr1", "chr2"])
        rnext = rng.choice(["=", "chr1", "chr2", "*"])
        if i in unknown:
            rname, rnext = unknown[i]
        known = {"chr1", "chr2", "*", "="}
        if rname not in known or rnext not in known:
            bad += 1
        flag = 1 | rng.choice([0, 16, 32, 64, 128])
        if rnext == "*":
            flag |= 8
        pnext = 0 if rnext == "*" else rng.randrange(1, 99000)
        out.append(_line(f"r{i:05d}", flag, rname, rng.randrange(1, 99000), rnext, pnext))
    return "".join(out), bad


def _write(tmp_path: Path, body: str, name: str = "in.sam") -> Path:
    p = tmp_path / name
    p.write_text(HEADER + body)
    return p


def _refused(res) -> str:
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, f"expected exit 1, got {res.returncode}; stderr:\n{err[-2000:]}"
    assert res.stdout == b"", "nothing may be written to stdout on failure"
    return err


HEADER_LINES = HEADER.count("\n")

# (case, record index -> (RNAME, RNEXT)): several unknown records of each kind.
CASES = {
    "rname": {3: ("chr9", "="), 500: ("chrUn", "*"), 4000: ("chr9", "chr1")},
    "rnext": {7: ("chr1", "chrM"), 1200: ("chr2", "chr9"), 5999: ("chr1", "chrZ")},
    "both": {0: ("chrX", "chrY"), 2500: ("chr9", "chr9"), 2501: ("chr1", "chrQ"), 2502: ("chrQ", "chr2")},
}


def _first_unknown(unknown: dict[int, tuple[str, str]]) -> tuple[int, str, str]:
    """(record index, field, name) of the first unknown name, RNAME first."""
    i = min(unknown)
    rname, rnext = unknown[i]
    if rname not in ("chr1", "chr2", "*"):
        return i, "RNAME", rname
    return i, "RNEXT", rnext


@pytest.mark.parametrize("threads", [[], ["-@1"], ["-@2"]], ids=["default", "t1", "t2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_is_an_error_naming_line_and_name(alnsort_bin, tmp_path, case, threads):
    body, _ = _records(6000, seed=sorted(CASES).index(case) + 1, unknown=CASES[case])
    inp = _write(tmp_path, body)
    out = tmp_path / "out.bam"
    tdir = tmp_path / "T"
    tdir.mkdir()
    err = _refused(run_alnsort([*threads, "-T", str(tdir), "-o", str(out), str(inp)]))
    i, field, name = _first_unknown(CASES[case])
    line = HEADER_LINES + i + 1
    want = (
        f"{inp}: line {line} (record {i + 1}): {field} '{name}' is not in the header's @SQ lines; "
        "add it to the header, or use --unknown-reference=unmapped to keep samtools' behaviour"
    )
    assert err.startswith("alnsort sort: ") and want in err, err
    assert "treated as unmapped" not in err, "the default does not warn and go on"
    assert not out.exists(), "a failed run leaves no output"
    assert harness.leftover_files(tmp_path, {"in.sam", "T"}) == []
    assert list(tdir.iterdir()) == [], "temporary files left behind"


def test_default_error_leaves_an_existing_output_untouched(alnsort_bin, tmp_path):
    inp = _write(tmp_path, _records(300, seed=5, unknown={250: ("chr1", "chr7")})[0])
    out = tmp_path / "out.bam"
    out.write_bytes(b"an older output")
    err = _refused(run_alnsort(["--write-index", "-o", str(out), str(inp)]))
    assert f"line {HEADER_LINES + 251} (record 251): RNEXT 'chr7'" in err, err
    assert out.read_bytes() == b"an older output"
    assert harness.leftover_files(tmp_path, {"in.sam", "out.bam"}) == []


def test_default_error_on_standard_input(alnsort_bin, tmp_path):
    inp = _write(tmp_path, _records(20, seed=6, unknown={9: ("chr3", "=")})[0])
    err = _refused(run_alnsort(["-O", "SAM"], stdin_path=str(inp)))
    assert f"line {HEADER_LINES + 10} (record 10): RNAME 'chr3' is not in the header's @SQ lines" in err, err


def test_explicit_error_is_the_default(alnsort_bin, tmp_path):
    inp = _write(tmp_path, _records(20, seed=7, unknown={2: ("chr3", "=")})[0])
    err = _refused(run_alnsort(["--unknown-reference", "error", "-O", "SAM", str(inp)]))
    assert "RNAME 'chr3'" in err, err


@pytest.mark.parametrize("value", ["drop", "", "Unmapped", "warn"])
def test_other_values_are_refused(alnsort_bin, tmp_path, value):
    inp = _write(tmp_path, _records(5, seed=8, unknown={})[0])
    out = tmp_path / "o.bam"
    err = _refused(run_alnsort([f"--unknown-reference={value}", "-o", str(out), str(inp)]))
    assert "--unknown-reference" in err and "'error'" in err and "'unmapped'" in err, err
    assert not out.exists()


@pytest.mark.parametrize("order", [[], ["-n"]], ids=["coord", "name"])
@pytest.mark.parametrize("threads", [["-@1"], ["-@2"]], ids=["t1", "t2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_unmapped_matches_samtools_and_counts(alnsort_bin, tmp_path, case, threads, order):
    body, bad = _records(6000, seed=sorted(CASES).index(case) + 1, unknown=CASES[case])
    assert bad == len(CASES[case])
    inp = _write(tmp_path, body)
    stats = tmp_path / "stats.json"
    res = run_alnsort([*threads, *order, *UNMAPPED, "--stats-json", str(stats), "-O", "SAM", str(inp)])
    check_ok(res)
    want = oracle.sort_sam_text(order, str(inp))
    harness.assert_same_text(oracle.strip_pg(want), oracle.strip_pg(res.stdout.decode()), f"{case} {threads} {order}")
    err = res.stderr.decode()
    # One warning per unknown name, as before, naming the file, line and record.
    names = []
    for i, (rname, rnext) in sorted(CASES[case].items()):
        if rname not in ("chr1", "chr2", "*"):
            names.append((i, f'unrecognized reference name "{rname}"'))
        if rnext not in ("chr1", "chr2", "*", "="):
            names.append((i, f'unrecognized mate reference name "{rnext}"'))
    warnings = [w for w in err.splitlines() if "unrecognized" in w]
    assert len(warnings) == len(names), err
    for w, (i, text) in zip(warnings, names):
        assert w.startswith(f"[W::alnsort] {inp}: line {HEADER_LINES + i + 1} (record {i + 1}): {text}"), (w, text)
    report = json.loads(stats.read_text())
    assert report["unknown_reference_records"] == bad
    assert report["records_in"] == report["records_out"] == 6000


def test_unmapped_record_fields_as_samtools(alnsort_bin, tmp_path):
    """The treatment itself, spelled out: an unknown RNAME becomes '*' with
    flag 0x4 and its POS kept; an unknown RNEXT becomes '*' with PNEXT kept."""
    inp = _write(
        tmp_path,
        _line("a", 1, "chr9", 500, "=", 600) + _line("b", 1, "chr1", 100, "chrZ", 700) + _line("c", 0, "chr2", 50, "*", 0),
    )
    res = run_alnsort([*UNMAPPED, "-O", "SAM", "--no-PG", str(inp)])
    check_ok(res)
    recs = [line.split("\t")[:9] for line in res.stdout.decode().splitlines() if not line.startswith("@")]
    assert recs == [
        ["b", "1", "chr1", "100", "60", "10M", "*", "700", "0"],
        ["c", "0", "chr2", "50", "60", "10M", "*", "0", "0"],
        ["a", "5", "*", "500", "60", "10M", "*", "600", "0"],
    ]
    want = oracle.sort_sam_text([], str(inp))
    assert oracle.strip_pg(want) == oracle.strip_pg(res.stdout.decode())


def test_known_names_count_zero(alnsort_bin, tmp_path):
    inp = _write(tmp_path, _records(50, seed=9, unknown={})[0])
    stats = tmp_path / "s.json"
    check_ok(run_alnsort(["--stats-json", str(stats), "-o", str(tmp_path / "o.bam"), str(inp)]))
    assert json.loads(stats.read_text())["unknown_reference_records"] == 0
