"""`alnsort markdup` against samtools markdup 1.24 (pysam 0.24.1's): generated name-grouped inputs
(smarkdup_gen.py) made into markdup's input by samtools itself (collate -> fixmate -m -> sort), then
marked by both with each option set; every record compared field by field and tag by tag (with the tags'
BAM types), the header aside from @PG, and the statistics text (-f, --json, -s).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pysam
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
import oracle  # noqa: E402
import smarkdup_gen  # noqa: E402

TIMEOUT_S = 300


def run_markdup(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [harness.alnsort_path(), "markdup", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT_S,
    )


def prepare(tmp: Path, sam_text: str, name: str = "in") -> Path:
    """samtools' own chain up to markdup's input: collate, fixmate -m, sort."""
    src = tmp / f"{name}.sam"
    src.write_text(sam_text)
    col, fm, srt = tmp / f"{name}.col.bam", tmp / f"{name}.fm.bam", tmp / f"{name}.sorted.bam"
    oracle.samtools("collate", "-o", str(col), str(src))
    oracle.samtools("fixmate", "-m", str(col), str(fm))
    oracle.samtools("sort", "-o", str(srt), str(fm))
    return srt


def records(path: Path) -> list[tuple]:
    out = []
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        for r in f.fetch(until_eof=True):
            out.append(
                (
                    r.query_name,
                    r.flag,
                    r.reference_id,
                    r.reference_start,
                    r.mapping_quality,
                    r.cigarstring,
                    r.next_reference_id,
                    r.next_reference_start,
                    r.template_length,
                    r.query_sequence,
                    None if r.query_qualities is None else bytes(r.query_qualities),
                    tuple(r.get_tags(with_value_type=True)),
                )
            )
    return out


def header_without_pg(path: Path) -> str:
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        text = str(f.header)
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("@PG"))


def compare_records(exp: list[tuple], got: list[tuple], what: str) -> None:
    assert len(got) == len(exp), f"{what}: {len(exp)} records expected, {len(got)} written"
    bad = [(i, e, g) for i, (e, g) in enumerate(zip(exp, got)) if e != g]
    if bad:
        lines = [f"{what}: {len(bad)} of {len(exp)} records differ; first ones:"]
        for i, e, g in bad[:5]:
            lines.append(f"  #{i}\n    samtools: {e[:2]} {e[11]}\n    alnsort:  {g[:2]} {g[11]}")
            if e[:11] != g[:11]:
                lines.append(f"    fields: {e[:11]}\n            {g[:11]}")
        raise AssertionError("\n".join(lines))


def stats_text(text: str, own_name: str) -> str:
    """The statistics with the COMMAND line's program and file names made comparable."""
    out = []
    skip_blank = False
    for line in text.splitlines():
        # Warnings on standard error: samtools' print_error ends each with an empty line.
        if line.startswith(("samtools markdup: ", "alnsort markdup: ")):
            skip_blank = line.startswith("samtools")
            continue
        if skip_blank and line == "":
            skip_blank = False
            continue
        skip_blank = False
        for key in ("COMMAND: ", '    "COMMAND": "'):
            if line.startswith(key):
                rest = line[len(key):]
                line = key + rest[rest.index("markdup"):].replace(own_name, "X")
        out.append(line)
    return "\n".join(out)


def both(tmp: Path, src: Path, opts: list[str], stats: bool = True):
    """Runs samtools and alnsort with `opts` on `src`; returns their results."""
    exp_bam, got_bam = tmp / "exp.bam", tmp / "got.bam"
    extra_e = ["-f", "exp.stats"] if stats else []
    extra_g = ["-f", "got.stats"] if stats else []
    e = oracle.samtools("markdup", *opts, *extra_e, str(src), "exp.bam", cwd=str(tmp), check=False)
    g = run_markdup([*opts, *extra_g, str(src), "got.bam"], tmp)
    return e, g, exp_bam, got_bam


OPTION_SETS = [
    [],
    ["-r"],
    ["-d", "100"],
    ["-d", "100", "-t"],
    ["-d", "2000", "-t"],
    ["-t", "--no-multi-dup", "-d", "50"],
    ["-m", "s"],
    ["-m", "s", "-d", "100", "-t"],
    ["-c"],
    ["-c", "-d", "100"],
    ["--include-fails", "-t"],
    ["--include-fails", "-d", "100"],
    ["--duplicate-count"],
    ["--duplicate-count", "-r", "-d", "100"],
    ["-S"],
    ["-S", "-d", "100", "-t"],
    ["-S", "-r", "--duplicate-count"],
    ["--barcode-name"],
    ["--barcode-tag", "BC", "-d", "100"],
    ["--barcode-rgx", "M1:[0-9]+:FC:1:[0-9]+:([0-9]+):"],
    ["--barcode-name", "--move-umi-to-tag", "-d", "100"],
    ["--barcode-name", "--move-umi-to-tag", "-S", "-t"],
    ["--barcode-rgx", ":([ACGT]+)$", "--move-umi-to-tag", "--umi-separator", "-", "-r"],
    ["--use-read-groups", "-d", "100"],
    ["--use-read-groups", "--json", "-S", "-t"],
    ["--json", "-d", "100"],
    ["-l", "40", "-d", "100"],
    ["-l", "-5"],
]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smarkdup")
    return {
        seed: prepare(tmp, smarkdup_gen.generate(seed, long_reads=(seed == 3)), f"in{seed}") for seed in (1, 2, 3)
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: "_".join(o) or "default")
def test_same_as_samtools(alnsort_bin, prepared, tmp_path, seed, opts):
    src = prepared[seed]
    e, g, exp_bam, got_bam = both(tmp_path, src, opts)
    assert e.returncode == 0, e.stderr.decode()
    harness.check_ok(g)
    compare_records(records(exp_bam), records(got_bam), f"seed {seed} {' '.join(opts)}")
    assert header_without_pg(got_bam) == header_without_pg(exp_bam)
    exp_stats = stats_text((tmp_path / "exp.stats").read_text(), "exp.")
    got_stats = stats_text((tmp_path / "got.stats").read_text(), "got.")
    assert got_stats == exp_stats


def test_read_coords_regex(alnsort_bin, tmp_path):
    """--read-coords/--coords-order on names that all match the pattern."""
    text = smarkdup_gen.generate(5)
    # keep only templates whose names have 6 or 7 colons (M1:n:FC:lane:tile:x:y[:umi])
    lines = [ln for ln in text.splitlines() if ln.startswith("@") or ln.split("\t")[0].count(":") in (6, 7)]
    src = prepare(tmp_path, "\n".join(lines) + "\n", "rc")
    for opts in (
        ["--read-coords", "FC:([0-9]+:[0-9]+):([0-9]+):([0-9]+)", "-d", "100", "-t"],
        ["--read-coords", "^M1:([0-9]+):FC:[0-9]+:([0-9]+):([0-9]+)", "--coords-order", "xty", "-d", "300"],
        ["--read-coords", "FC:[0-9]+:([0-9]+):([0-9]+):([0-9]+)", "--coords-order", "tyx", "-d", "100"],
        ["--read-coords", "([0-9]+):([0-9]+)(:[A-Z]+)?$", "--coords-order", "xy", "-d", "100"],
    ):
        e, g, exp_bam, got_bam = both(tmp_path, src, opts)
        assert e.returncode == 0, e.stderr.decode()
        harness.check_ok(g)
        compare_records(records(exp_bam), records(got_bam), " ".join(opts))
        assert stats_text((tmp_path / "got.stats").read_text(), "got.") == stats_text(
            (tmp_path / "exp.stats").read_text(), "exp."
        )


def test_read_coords_group_not_taking_part(alnsort_bin, tmp_path):
    """A tile group that takes no part in the match: samtools fails ("duplicate checking failed") once
    such an original heads a duplicate chain; so does alnsort, naming the read, with no output left."""
    text = smarkdup_gen.generate(5)
    lines = [ln for ln in text.splitlines() if ln.startswith("@") or ln.split("\t")[0].count(":") == 6]
    src = prepare(tmp_path, "\n".join(lines) + "\n", "rc")
    _fails_cleanly(
        tmp_path,
        src,
        "does not match --read-coords",
        ["--read-coords", "([0-9]+):([0-9]+)(:[A-Z]+)?$", "--coords-order", "xyt", "-d", "100"],
    )


def test_stats_on_stderr(alnsort_bin, prepared, tmp_path):
    """-s writes the statistics on standard error."""
    e, g, _, _ = both(tmp_path, prepared[1], ["-s", "--use-read-groups"], stats=False)
    harness.check_ok(g)
    exp = stats_text(e.stderr.decode(), "exp.")
    got = stats_text(g.stderr.decode(), "got.")
    assert "COMMAND: markdup -s" in got
    assert got == exp


def test_sam_output_and_stdio(alnsort_bin, prepared, tmp_path):
    """'-' reads standard input and writes standard output; a .sam name writes SAM."""
    src = prepared[2]
    e = oracle.samtools("markdup", "-d", "100", str(src), "exp.bam", cwd=str(tmp_path))
    assert e.returncode == 0
    with open(src, "rb") as fh:
        g = subprocess.run(
            [harness.alnsort_path(), "markdup", "-d", "100", "-", "-"],
            stdin=fh,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT_S,
        )
    harness.check_ok(g)
    (tmp_path / "got.bam").write_bytes(g.stdout)
    compare_records(records(tmp_path / "exp.bam"), records(tmp_path / "got.bam"), "stdin/stdout")
    # SAM text has no tag types: compared with samtools' own SAM output.
    oracle.samtools("markdup", "-d", "100", str(src), "exp.sam", cwd=str(tmp_path))
    g = run_markdup(["-d", "100", str(src), "got.sam"], tmp_path)
    harness.check_ok(g)
    assert (tmp_path / "got.sam").read_text().startswith("@HD")
    compare_records(records(tmp_path / "exp.sam"), records(tmp_path / "got.sam"), "SAM output")


def _fails_cleanly(tmp: Path, src: Path, expect: str, opts: list[str] | None = None) -> None:
    g = run_markdup([*(opts or []), str(src), "bad_out.bam"], tmp)
    err = g.stderr.decode()
    assert g.returncode != 0, err
    assert expect in err, err
    assert str(src.name) in err or str(src) in err, err
    assert not (tmp / "bad_out.bam").exists()
    e = oracle.samtools("markdup", *(opts or []), str(src), "exp_bad.bam", cwd=str(tmp), check=False)
    assert e.returncode != 0, "samtools accepted what alnsort refused"


def test_queryname_input_is_refused(alnsort_bin, tmp_path):
    src = tmp_path / "qn.sam"
    text = smarkdup_gen.generate(7, 10).replace("SO:unsorted", "SO:queryname")
    src.write_text(text)
    _fails_cleanly(tmp_path, src, "SO:queryname")


def test_unsorted_input_is_refused(alnsort_bin, tmp_path):
    srt = prepare(tmp_path, smarkdup_gen.generate(8, 40), "uns")
    lines = oracle.samtools("view", "-h", str(srt)).stdout.decode().splitlines()
    head = [ln for ln in lines if ln.startswith("@")]
    body = [ln for ln in lines if not ln.startswith("@")]
    placed = [i for i, ln in enumerate(body) if ln.split("\t")[2] == "chr1"]
    i, j = placed[5], placed[-5]
    body[i], body[j] = body[j], body[i]
    src = tmp_path / "unsorted.sam"
    src.write_text("\n".join(head + body) + "\n")
    _fails_cleanly(tmp_path, src, "not in coordinate sorted order")


def test_missing_mate_cigar_is_refused(alnsort_bin, tmp_path):
    """A coordinate-sorted input that did not go through fixmate: paired reads without MC."""
    src_sam = tmp_path / "nofix.sam"
    src_sam.write_text(smarkdup_gen.generate(9, 30))
    srt = tmp_path / "nofix.bam"
    # mates' fields as an aligner writes them (RNEXT '=') but no MC tag
    lines = []
    for ln in src_sam.read_text().splitlines():
        f = ln.split("\t")
        if not ln.startswith("@") and int(f[1]) & 1 and not int(f[1]) & 0xC and f[2] != "*":
            f[6], f[7] = "=", f[3]
        lines.append("\t".join(f))
    src_sam.write_text("\n".join(lines) + "\n")
    oracle.samtools("sort", "-o", str(srt), str(src_sam))
    _fails_cleanly(tmp_path, srt, "no MC tag")


def test_refused_options_are_named(alnsort_bin, prepared, tmp_path):
    g = run_markdup(["--move-umi-to-tag", str(prepared[1]), "x.bam"], tmp_path)
    assert g.returncode != 0
    assert "--move-umi-to-tag requires --barcode-name" in g.stderr.decode()
    assert not (tmp_path / "x.bam").exists()
    g = run_markdup(["--input-fmt", "sam", str(prepared[1]), "x.bam"], tmp_path)
    assert g.returncode != 0 and "--input-fmt" in g.stderr.decode()
    g = run_markdup(["-m", "q", str(prepared[1]), "x.bam"], tmp_path)
    assert g.returncode != 0 and "unknown mode" in g.stderr.decode()


def test_inputs_hit_the_traps(prepared, tmp_path):
    """The generated inputs give samtools what the comparisons are about: duplicate pairs and singles,
    optical ones of both, non-primary duplicates (-S), singles beaten by pairs and unscored names."""
    totals: dict[str, int] = {}
    for src in prepared.values():
        e = oracle.samtools("markdup", "-S", "-d", "100", "-s", str(src), "o.bam", cwd=str(tmp_path))
        for line in e.stderr.decode().splitlines():
            key, _, value = line.partition(": ")
            if value.strip().isdigit():
                totals[key] = totals.get(key, 0) + int(value)
    for key in (
        "DUPLICATE PAIR",
        "DUPLICATE SINGLE",
        "DUPLICATE PAIR OPTICAL",
        "DUPLICATE SINGLE OPTICAL",
        "DUPLICATE NON PRIMARY",
        "DUPLICATE NON PRIMARY OPTICAL",
        "EXCLUDED",
    ):
        assert totals.get(key, 0) > 0, f"{key} is 0 over the generated inputs: {totals}"


UNPARSEABLE_CHAINS = """@HD\tVN:1.6\tSO:coordinate
@SQ\tSN:chr1\tLN:10000
A:1:1101:100:200\t0\tchr1\t100\t60\t10M\t*\t0\t0\tAAAAAAAAAA\tIIIIIIIIII
A:1:1101:100:290\t0\tchr1\t100\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
A:1:1101:100:390\t0\tchr1\t100\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
B:1:1101:100:200\t0\tchr1\t1000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\tIIIIIIIIII
readxxx\t0\tchr1\t1000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
readxxx2\t0\tchr1\t1000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
C:1:1101:100:200\t0\tchr1\t2000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\tIIIIIIIIII
rea\t0\tchr1\t2000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
reb\t0\tchr1\t2000\t60\t9M\t*\t0\t0\tAAAAAAAAA\t555555555
D:1:1101:100:200\t0\tchr1\t3000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\tIIIIIIIIII
rec\t0\tchr1\t3000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
red\t0\tchr1\t3000\t60\t10M\t*\t0\t0\tAAAAAAAAAA\t5555555555
"""


def test_unparseable_names_in_duplicate_chains(alnsort_bin, tmp_path):
    """Duplicates whose names give no coordinates, in chains whose original's name does: samtools
    compares them through the tile fields its reused check array still holds from the previous chain
    (read from the name's start in memory, past the name into its padding and CIGAR)."""
    src = tmp_path / "chains.sam"
    src.write_text(UNPARSEABLE_CHAINS)
    for opts in (["-d", "100"], ["-d", "100", "-t"]):
        e, g, exp_bam, got_bam = both(tmp_path, src, opts)
        assert e.returncode == 0, e.stderr.decode()
        harness.check_ok(g)
        exp = records(exp_bam)
        compare_records(exp, records(got_bam), " ".join(opts))
        assert {r[0]: dict((t[0], t[1]) for t in r[11]).get("dt") for r in exp}["A:1:1101:100:390"] == "SQ"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 120))
def test_same_as_samtools_more_seeds(alnsort_bin, tmp_path, seed):
    """The option matrix on 20 more generated inputs of 200 clusters each."""
    src = prepare(tmp_path, smarkdup_gen.generate(seed, clusters=200, long_reads=(seed % 3 == 0)), "in")
    for opts in OPTION_SETS:
        e, g, exp_bam, got_bam = both(tmp_path, src, opts)
        assert e.returncode == 0, e.stderr.decode()
        harness.check_ok(g)
        compare_records(records(exp_bam), records(got_bam), f"seed {seed} {' '.join(opts)}")
        assert stats_text((tmp_path / "got.stats").read_text(), "got.") == stats_text(
            (tmp_path / "exp.stats").read_text(), "exp."
        )


def test_pg_threads_and_index(alnsort_bin, prepared, tmp_path):
    """@PG added (or not, --no-PG) as the other commands do; -@ and --write-index give the same records
    and an index that region queries read."""
    src = prepared[1]
    with pysam.AlignmentFile(str(src), "rb") as f:
        input_pg = [line for line in str(f.header).splitlines() if line.startswith("@PG")]
    harness.check_ok(run_markdup(["--no-PG", str(src), "nopg.bam"], tmp_path))
    with pysam.AlignmentFile(str(tmp_path / "nopg.bam"), "rb") as f:
        assert [line for line in str(f.header).splitlines() if line.startswith("@PG")] == input_pg
    harness.check_ok(run_markdup(["-@", "3", "--write-index", "-d", "100", str(src), "idx.bam"], tmp_path))
    with pysam.AlignmentFile(str(tmp_path / "idx.bam"), "rb") as f:
        pg = [line for line in str(f.header).splitlines() if line.startswith("@PG")]
        assert len(pg) == len(input_pg) + 1 and "markdup" in pg[-1]
        n_chr2 = sum(1 for _ in f.fetch("chr2"))
    oracle.samtools("markdup", "-d", "100", str(src), "exp.bam", cwd=str(tmp_path))
    exp = records(tmp_path / "exp.bam")
    compare_records(exp, records(tmp_path / "idx.bam"), "-@ 3 --write-index")
    assert n_chr2 == sum(1 for r in exp if r[2] == 1) > 0


def test_truncated_input_is_refused(alnsort_bin, prepared, tmp_path):
    src = tmp_path / "truncated.bam"
    src.write_bytes(prepared[1].read_bytes()[:20000])
    _fails_cleanly(tmp_path, src, "truncated")
