"""`alnsort MarkDuplicates` (Picard's command line) against Picard
MarkDuplicates 3.4.0 given the same arguments.

Every case writes one generated input (the trap generators of
test_vs_picard.py: every trap, random and adversarial templates, stale
0x400 bits and DT tags, PG tags from two programs on some reads), in one of
three forms: coordinate-sorted (`samtools sort`, SO:coordinate),
queryname-sorted (Picard SortSam, SO:queryname) or grouped by name with
SO:unsorted (aligner output, given ASSUME_SORT_ORDER=queryname). Both tools
run the same option list, in Picard's legacy syntax (`I=in.bam`) or its
current one (`--INPUT in.bam`, `-ASO queryname`), and the test asserts:
the same records in the same order with every field and tag (the PG and DT
tags included; compared as sets per record, since htsjdk reorders every
record's tags), the same header but the @PG lines' CL and VN (IDs, PP and
PN the same), the same metrics and histogram rows, and the metrics header
naming the input as Picard's.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pysam
import pytest

import test_sort_markdup as sm
import test_vs_picard as g

SHORT = {"INPUT": "I", "OUTPUT": "O", "METRICS_FILE": "M", "ASSUME_SORT_ORDER": "ASO"}


@pytest.fixture(scope="session")
def alnsort() -> str:
    import harness

    return harness.alnsort_path()


@pytest.fixture(autouse=True)
def long_refs(monkeypatch):
    """References long enough for every case moved along them (Picard's
    default STRICT validation refuses a mate position past the end)."""
    monkeypatch.setattr(g, "REFS", [(n, 2_000_000) for n, _ in g.REFS])


def with_pg_tags(recs, seed):
    """PG:Z:bwa on most templates, PG:Z:aln on some, none on the rest (Picard
    chains one @PG per value seen, in Java HashSet order)."""
    rng = random.Random(seed)
    per_name = {}
    for r in recs:
        pg = per_name.setdefault(r.name, rng.choice(["bwa", "bwa", "aln", None]))
        if pg:
            r.tags = list(r.tags) + [("PG", pg)]
    return recs


def make_input(tmp: Path, form: str, picard, barcodes: bool = False) -> Path:
    recs = []
    for n, name in enumerate(sorted(g.TRAPS)):
        recs += sm.moved(g.TRAPS[name](), n)
    recs += sm.moved(g.t_adversarial(100), len(g.TRAPS)) + sm.moved(g.t_random(5, dense=True), len(g.TRAPS) + 1)
    recs = sm.with_mate_cigars(sm.stale_dt(sm.stale_dups(recs, 1), 2))
    if barcodes:
        recs = sm.with_barcodes(recs, 9)
    recs = with_pg_tags(recs, 3)
    grouped = tmp / "grouped.bam"
    g.write_bam(grouped, recs)
    if form == "grouped":
        return grouped
    out = tmp / f"{form}.bam"
    if form == "queryname":
        # Picard's own queryname order (htsjdk's comparator): Picard refuses
        # to write samtools' natural name order, whose ties differ.
        p = run(picard + ["SortSam", f"I={grouped}", f"O={out}", "SORT_ORDER=queryname", "QUIET=true",
                          "VERBOSITY=ERROR"])
        assert p.returncode == 0, p.stderr[-2000:]
    else:
        pysam.sort("-o", str(out), str(grouped))
    return out


def argv(syntax: str, inp, out: Path, metrics: Path, opts: list[str]) -> list[str]:
    """The command line in one of Picard's syntaxes; `inp` a path or a list
    of them (one INPUT each)."""
    inputs = [str(i) for i in inp] if isinstance(inp, list) else [str(inp)]
    pairs = [("INPUT", i) for i in inputs] + [("OUTPUT", str(out)), ("METRICS_FILE", str(metrics))]
    pairs += [tuple(o.split("=", 1)) for o in opts]
    if syntax == "legacy":
        named = len(inputs) + 2
        return [f"{SHORT.get(k, k) if i < named else k}={v}" for i, (k, v) in enumerate(pairs)]
    args = []
    for k, v in pairs:
        args += [f"-{SHORT[k]}" if k in SHORT and k != "METRICS_FILE" else f"--{k}", v]
    return args


def records(path: Path):
    """Every record in file order, its tags as a sorted tuple."""
    with pysam.AlignmentFile(str(path), check_sq=False) as f:
        return [(r.query_name, r.flag, r.reference_id, r.reference_start, r.mapping_quality, r.cigarstring,
                 r.next_reference_id, r.next_reference_start, r.template_length, r.query_sequence,
                 tuple(r.query_qualities or ()), tuple(sorted(r.get_tags(with_value_type=True))))
                for r in f.fetch(until_eof=True)]


def header(path: Path):
    """The header as pysam reads it, @PG lines as (ID, PN, PP) and @CO kept."""
    with pysam.AlignmentFile(str(path), check_sq=False) as f:
        h = f.header.to_dict()
    pgs = [(p.get("ID"), p.get("PN"), p.get("PP")) for p in h.pop("PG", [])]
    return h, pgs


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def run_both(tmp: Path, picard, alnsort, inp: Path, syntax: str, opts: list[str], ext: str = "bam"):
    outs = {}
    for who, prefix in (("picard", picard + ["MarkDuplicates"]), ("alnsort", [alnsort, "MarkDuplicates"])):
        d = tmp / who
        d.mkdir(exist_ok=True)
        out, met = d / f"out.{ext}", d / "metrics.txt"
        p = run(prefix + argv(syntax, inp, out, met, opts))
        assert p.returncode == 0, f"{who} failed:\n{p.stderr[-3000:]}"
        outs[who] = (out, met)
    (po, pm), (ao, am) = outs["picard"], outs["alnsort"]
    want, got = records(po), records(ao)
    assert any(r[1] & 0x400 for r in want) or "REMOVE_DUPLICATES=true" in opts, "Picard marked nothing"
    assert len(got) == len(want), f"{len(got)} records, Picard wrote {len(want)}"
    diffs = [(i, w, o) for i, (w, o) in enumerate(zip(want, got)) if w != o]
    assert not diffs, f"{len(diffs)} records differ from Picard's (index, picard, ours); first:\n" + \
        "\n".join(map(str, diffs[:5]))
    assert header(ao) == header(po)
    assert g.parse_metrics(am) == g.parse_metrics(pm)
    first = am.read_text().splitlines()[1]
    named = ", ".join(map(str, inp)) if isinstance(inp, list) else inp
    assert first.startswith(f"# MarkDuplicates INPUT=[{named}] OUTPUT={ao} METRICS_FILE={am}"), first
    return outs, want


CASES = {
    # id: (input form, syntax, options)
    "coordinate-legacy": ("coordinate", "legacy", []),
    "coordinate-current": ("coordinate", "current", []),
    "queryname-legacy": ("queryname", "legacy", []),
    "queryname-current-regex-null-no-pg-tags": ("queryname", "current", ["READ_NAME_REGEX=null", "ADD_PG_TAG_TO_READS=false"]),
    "grouped-current-assume-queryname": ("grouped", "current", ["ASSUME_SORT_ORDER=queryname"]),
    "grouped-legacy-tag-all-remove-sequencing": ("grouped", "legacy", ["ASSUME_SORT_ORDER=queryname", "TAGGING_POLICY=All",
                                                                      "REMOVE_SEQUENCING_DUPLICATES=true"]),
    "coordinate-current-optical-only-remove": ("coordinate", "current", ["TAGGING_POLICY=OpticalOnly", "REMOVE_DUPLICATES=true"]),
    "coordinate-legacy-distance-scoring-comment-pg-id": (
        "coordinate", "legacy", ["OPTICAL_DUPLICATE_PIXEL_DISTANCE=2500", "DUPLICATE_SCORING_STRATEGY=TOTAL_MAPPED_REFERENCE_LENGTH",
                                 "COMMENT=marked by the test", "PROGRAM_RECORD_ID=MD", "PROGRAM_GROUP_NAME=MDX"]),
    "grouped-legacy-no-pg": ("grouped", "legacy", ["ASSUME_SORT_ORDER=queryname", "PROGRAM_RECORD_ID=null"]),
    "coordinate-legacy-neutral-options": ("coordinate", "legacy", ["MAX_RECORDS_IN_RAM=1000", "VALIDATION_STRINGENCY=LENIENT",
                                                                   "QUIET=true", "VERBOSITY=ERROR", "COMPRESSION_LEVEL=1",
                                                                   "SORTING_COLLECTION_SIZE_RATIO=0.1", "CLEAR_DT=true"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_output_as_picard(case, tmp_path, picard, alnsort):
    form, syntax, opts = CASES[case]
    inp = make_input(tmp_path, form, picard)
    _, want = run_both(tmp_path, picard, alnsort, inp, syntax, opts)
    if "ADD_PG_TAG_TO_READS=false" not in opts and "PROGRAM_RECORD_ID=null" not in opts:
        # Records with PG:Z:bwa, PG:Z:aln and none: three chained @PG lines.
        pg_values = {dict((t, v) for t, v, _ in r[11]).get("PG") for r in want}
        assert len(pg_values) == 3, pg_values


@pytest.mark.parametrize("form", ["coordinate", "grouped"])
def test_barcode_tags(form, tmp_path, picard, alnsort):
    inp = make_input(tmp_path, form, picard, barcodes=True)
    run_both(tmp_path, picard, alnsort, inp, "legacy",
             ["BARCODE_TAG=ZU", "READ_ONE_BARCODE_TAG=B1", "READ_TWO_BARCODE_TAG=B2", "TAGGING_POLICY=All",
              *(["ASSUME_SORT_ORDER=queryname"] if form == "grouped" else [])])


def test_create_index_and_sam_output(tmp_path, picard, alnsort):
    """CREATE_INDEX=true writes out.bai (not out.bam.bai) as Picard does, and
    it answers region queries as Picard's; SAM output gets no index from
    either tool."""
    inp = make_input(tmp_path, "coordinate", None)
    (tmp_path / "bam").mkdir()
    outs, _ = run_both(tmp_path / "bam", picard, alnsort, inp, "current", ["CREATE_INDEX=true"])
    answers = {}
    for who, (out, _) in outs.items():
        assert sorted(p.name for p in out.parent.iterdir()) == ["metrics.txt", "out.bai", "out.bam"], who
        regions = ["chr1", "chr2:1-600000", "chr1:100000-300000", "chr3:1500000-1700000"]
        answers[who] = pysam.view("-X", str(out), str(out.parent / "out.bai"), *regions)
    assert answers["alnsort"] == answers["picard"] and answers["picard"].count("\n") > 100
    (tmp_path / "sam").mkdir()
    outs, _ = run_both(tmp_path / "sam", picard, alnsort, inp, "legacy", ["CREATE_INDEX=true"], ext="sam")
    for who, (out, _) in outs.items():
        assert sorted(p.name for p in out.parent.iterdir()) == ["metrics.txt", "out.sam"], who


def test_jvm_options_and_stdout(tmp_path, alnsort):
    """The JVM options of a `picard` launcher line (-Xmx, -Xms, -XX:, -D) are
    taken (memory budget, temporary directory) and O=/dev/stdout writes BAM
    to standard output, the same records as to a file."""
    inp = make_input(tmp_path, "coordinate", None)
    tmpdir = tmp_path / "jtmp"
    tmpdir.mkdir()
    base = [alnsort, "MarkDuplicates", "-Xmx300m", "-Xms100m", "-XX:+UseSerialGC", f"-Djava.io.tmpdir={tmpdir}"]
    p = run(base + [f"I={inp}", f"O={tmp_path / 'a.bam'}", f"M={tmp_path / 'a.txt'}"])
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "b.bam", "wb") as f:
        p = subprocess.run(base + [f"I={inp}", "O=/dev/stdout", f"M={tmp_path / 'b.txt'}"], stdout=f, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    assert records(tmp_path / "a.bam") == records(tmp_path / "b.bam")
    assert list(tmpdir.iterdir()) == []
    # Too small a -Xmx is --max-memory's error, naming it.
    p = run([alnsort, "MarkDuplicates", "-Xmx1m", f"I={inp}", f"O={tmp_path / 'c.bam'}", f"M={tmp_path / 'c.txt'}"])
    assert p.returncode == 1 and "--max-memory" in p.stderr and not (tmp_path / "c.bam").exists()


def test_refusals_leave_nothing(tmp_path, picard, alnsort):
    """Inputs and options alnsort cannot honour are refused by name, before
    any output is written; an input Picard refuses (SO:unsorted without
    ASSUME_SORT_ORDER) is refused by both."""
    grouped = make_input(tmp_path, "grouped", None)
    coordinate = make_input(tmp_path, "coordinate", None)
    out, met = tmp_path / "o.bam", tmp_path / "o.txt"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args, words in [
        ([f"I={grouped}"], "SO:unsorted"),
        (["I=/dev/stdin"], "standard input cannot be read twice"),
        ([f"I={fifo}"], "not a regular file"),
        ([f"I={coordinate}", "I=-"], "INPUT=- is not supported yet"),
        ([f"I={coordinate}", "O=/dev/stdout", "CREATE_MD5_FILE=true"], "CREATE_MD5_FILE=true with standard output"),
        ([f"I={coordinate}", "DUPLICATE_SCORING_STRATEGY=RANDOM"], "RANDOM"),
        ([f"I={coordinate}", "TAG_DUPLICATE_SET_MEMBERS=true"], "TAG_DUPLICATE_SET_MEMBERS=true"),
        ([f"I={coordinate}", "CLEAR_DT=false"], "CLEAR_DT=false"),
        ([f"I={coordinate}", "FLOW_MODE=true"], "FLOW_MODE=true"),
        ([f"I={coordinate}", "REMOVE_DUPLICATES=yes"], "expected true or false"),
        ([f"I={coordinate}", "ASSUME_SORT_ORDER=unsorted"], "coordinate or queryname"),
        ([f"I={coordinate}", "NO_SUCH_OPTION=1"], "NO_SUCH_OPTION"),
        ([f"I={coordinate}", f"O={out}", f"O={out}"], "OUTPUT is given more than once"),
    ]:
        p = run([alnsort, "MarkDuplicates", *args, *([] if any(a.startswith("O=") for a in args) else [f"O={out}"]),
                 f"M={met}"])
        assert p.returncode == 1 and words in p.stderr, (args, p.stderr)
        assert not out.exists() and not met.exists(), args
    cram = tmp_path / "x.cram"
    p = run([alnsort, "MarkDuplicates", f"I={coordinate}", f"O={cram}", f"M={met}", "CREATE_INDEX=true"])
    assert p.returncode == 1 and "CREATE_INDEX=true with CRAM output" in p.stderr and not cram.exists()
    p = run(picard + ["MarkDuplicates", f"I={grouped}", f"O={out}", f"M={met}"])
    assert p.returncode != 0 and "coordinate or query sorted" in p.stderr, p.stderr[-1500:]
    p = run([alnsort, "MarkDuplicates", f"I={coordinate}", f"O={out}"])
    assert p.returncode == 1 and "METRICS_FILE is required" in p.stderr


def test_help_is_the_option_table(alnsort):
    p = run([alnsort, "MarkDuplicates", "--help"])
    assert p.returncode == 0 and p.stdout.startswith("Usage: alnsort MarkDuplicates I=in.bam")
    for name in ["INPUT", "OUTPUT", "METRICS_FILE", "REMOVE_DUPLICATES", "ASSUME_SORT_ORDER", "TAGGING_POLICY",
                 "READ_NAME_REGEX", "BARCODE_TAG", "CREATE_INDEX", "TMP_DIR", "VALIDATION_STRINGENCY",
                 "COMPRESSION_LEVEL", "MAX_RECORDS_IN_RAM", "CREATE_MD5_FILE", "THREADS"]:
        assert f"--{name}" in p.stdout, name
    assert max(len(ln) for ln in p.stdout.splitlines()) <= 80
    assert run([alnsort, "help", "MarkDuplicates"]).stdout == p.stdout
    assert run([alnsort, "MarkDuplicates", "-h"]).stdout == p.stdout
