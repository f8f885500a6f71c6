"""`--flagstat FILE` / `--idxstats FILE`: the text alnsort writes while
writing its output must be, byte for byte, what `samtools flagstat` and
`samtools idxstats` 1.24 (pysam 0.24.1) print when run on that output
afterwards.

The inputs are generated to hunt the traps of bam_stat.c and bam_index.c:
paired and unpaired reads, QC-failed (0x200), secondary, supplementary and
duplicate records, singletons, mates on another reference, RNEXT '*' on a
paired read whose mate is flagged mapped (counted as "different chr"),
MAPQ either side of 5, placed unmapped reads (counted as unmapped on their
reference by the index, as mapped by nothing), unplaced reads, and counts
whose percentages show the single-precision division (1/160).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import harness
import oracle
import pytest

REFS = [("chr1", 50000), ("chr2", 30000), ("chr3", 1000), ("chrM", 16569)]


def _qual(n: int) -> str:
    return "I" * n


def _gen(seed: int, n: int = 600) -> str:
    """A SAM text with the traps above, records in random order."""
    rng = random.Random(seed)
    lines = ["@HD\tVN:1.6\tSO:unsorted"]
    lines += [f"@SQ\tSN:{n_}\tLN:{ln}" for n_, ln in REFS]
    lines.append("@RG\tID:g1\tSM:s\tLB:l1")
    recs = []
    placed = [r for r in REFS if r[0] != "chr3"]

    def pos(ref: str) -> int:
        ln = dict(REFS)[ref]
        return rng.randint(1, ln - 200)

    for i in range(n):
        name = f"r{i:05d}"
        kind = rng.random()
        extra = 0
        if rng.random() < 0.12:
            extra |= 0x200
        if rng.random() < 0.15:
            extra |= 0x400
        mapq = rng.choice([0, 3, 4, 5, 6, 60])
        if kind < 0.15:
            # Unpaired: mapped, placed unmapped, or unplaced.
            sub = rng.random()
            if sub < 0.6:
                ref = rng.choice(placed)[0]
                recs.append(f"{name}\t{extra}\t{ref}\t{pos(ref)}\t{mapq}\t50M\t*\t0\t0\t{'A' * 50}\t{_qual(50)}")
            elif sub < 0.8:
                ref = rng.choice(placed)[0]
                recs.append(f"{name}\t{4 | extra}\t{ref}\t{pos(ref)}\t0\t*\t*\t0\t0\t{'A' * 50}\t{_qual(50)}")
            else:
                recs.append(f"{name}\t{4 | extra}\t*\t0\t0\t*\t*\t0\t0\t{'A' * 50}\t{_qual(50)}")
            continue
        # A pair, with its own twists.
        r1, r2 = rng.choice(placed)[0], rng.choice(placed)[0]
        if rng.random() < 0.6:
            r2 = r1
        p1, p2 = pos(r1), pos(r2)
        un1 = rng.random() < 0.1
        un2 = rng.random() < 0.12
        proper = 0x2 if (rng.random() < 0.7) else 0
        rnext_star = rng.random() < 0.05
        for mate, (ref, p, un, oref, op, oun, rflag) in enumerate(
            [(r1, p1, un1, r2, p2, un2, 0x40), (r2, p2, un2, r1, p1, un1, 0x80)]
        ):
            flag = 0x1 | rflag | proper | extra
            if un:
                flag |= 0x4
            if oun:
                flag |= 0x8
            if un and oun:
                rname, pp, cig, q = "*", 0, "*", 0
                rnext, pnext = "*", 0
            else:
                rname = ref if not un else (oref if oun is False else ref)
                pp = p if not un else op
                cig = "*" if un else "50M"
                q = 0 if un else mapq
                if oun:
                    rnext, pnext = "=", pp
                else:
                    rnext, pnext = (("=" if oref == rname else oref), op)
            if rnext_star and not un and not oun:
                rnext, pnext = "*", 0
            recs.append(f"{name}\t{flag}\t{rname}\t{pp}\t{q}\t{cig}\t{rnext}\t{pnext}\t0\t{'C' * 50}\t{_qual(50)}")
            # Secondary and supplementary copies now and then.
            if not un and rng.random() < 0.08:
                sflag = (flag & ~0x0) | (0x100 if rng.random() < 0.5 else 0x800)
                sref = rng.choice(placed)[0]
                recs.append(
                    f"{name}\t{sflag}\t{sref}\t{pos(sref)}\t{rng.choice([2, 7])}\t50M\t{rnext if rnext != '=' else rname}"
                    f"\t{pnext}\t0\t{'G' * 50}\t{_qual(50)}"
                )
    rng.shuffle(recs)
    return "\n".join(lines + recs) + "\n"


def _ratio_input() -> str:
    """160 QC-failed primary reads of which 1 is mapped (0.63% in single
    precision, 0.62 in double), 32 paired of which 1 is a singleton (an
    exact tie at 3.125%), nothing QC-passed (N/A)."""
    lines = ["@HD\tVN:1.6\tSO:unsorted", "@SQ\tSN:chr1\tLN:1000"]
    for i in range(160):
        if i == 0:
            lines.append(f"u{i}\t{0x200 | 0x1 | 0x8 | 0x40}\tchr1\t10\t30\t5M\t=\t10\t0\tAAAAA\tIIIII")
        elif i < 32:
            lines.append(f"u{i}\t{0x200 | 0x1 | 0x4 | 0x8 | 0x40}\t*\t0\t0\t*\t*\t0\t0\tAAAAA\tIIIII")
        else:
            lines.append(f"u{i}\t{0x200 | 0x4}\t*\t0\t0\t*\t*\t0\t0\tAAAAA\tIIIII")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("qc")
    paths = {}
    for key, text in (("traps", _gen(7)), ("traps2", _gen(8, 300)), ("ratio", _ratio_input())):
        p = d / f"{key}.sam"
        p.write_text(text)
        paths[key] = str(p)
    # Coordinate-sorted BAM inputs for merge and MarkDuplicates.
    for key in ("traps", "traps2", "ratio"):
        out = d / f"{key}.sorted.bam"
        oracle.sort([], paths[key], str(out))
        paths[key + ".sorted"] = str(out)
    return d, paths


#: pysam's samtools prints flagstat's and idxstats' text only into the
#: string its function returns (not onto file descriptor 1, which the
#: oracle's stand-in forwards): this runs the function in a fresh process.
_PYSAM_TEXT = (
    "import sys, pysam\n"
    "assert pysam.__version__ == sys.argv[1], pysam.__version__\n"
    "fn = getattr(pysam, sys.argv[2])\n"
    "try:\n"
    "    sys.stdout.write(fn(*sys.argv[3:]))\n"
    "except pysam.SamtoolsError as e:\n"
    "    sys.stderr.write(str(e))\n"
    "    sys.exit(1)\n"
)


def _samtools_text(cmd: str, path: str, *opts: str) -> tuple[int, str]:
    """(exit status, stdout) of `samtools CMD OPTS PATH` (pysam 0.24.1's)."""
    res = subprocess.run(
        [sys.executable, "-c", _PYSAM_TEXT, oracle.PYSAM_VERSION, cmd, *opts, path],
        capture_output=True, timeout=oracle.TIMEOUT_S,
    )
    assert res.returncode in (0, 1), res.stderr.decode()
    return res.returncode, res.stdout.decode()


def _check(out: Path, flagstat: Path | None, idxstats: Path | None, fmt: str = "default") -> None:
    if flagstat is not None:
        opts = [] if fmt == "default" else ["-O", fmt]
        rc, want = _samtools_text("flagstat", str(out), *opts)
        assert rc == 0
        assert flagstat.read_text() == want, f"flagstat {fmt} of {out.name}"
    if idxstats is not None:
        rc, want = _samtools_text("idxstats", str(out))
        assert rc == 0
        assert idxstats.read_text() == want, f"idxstats of {out.name}"


SORT_CASES = [
    # (id, sort options, output name, flagstat format)
    ("coord-bam", [], "out.bam", "default"),
    ("coord-bam-index", ["--write-index"], "out.bam", "json"),
    ("coord-bam-bai", ["--write-index"], "out.bam##idx##out.bai", "tsv"),
    ("coord-bam-index-elsewhere", ["--write-index"], "out.bam##idx##idx/elsewhere.csi", "default"),
    ("coord-sam", [], "out.sam", "default"),
    ("coord-samgz", ["-O", "sam,level=1"], "out.sam.gz", "json"),
    ("coord-threads-spill", ["-@", "3", "-m", "1M"], "out.bam", "default"),
    ("markdup", ["--markdup"], "out.bam", "default"),
    ("name", ["-n"], "out.bam", "tsv"),
]


@pytest.mark.parametrize("case", SORT_CASES, ids=[c[0] for c in SORT_CASES])
@pytest.mark.parametrize("src", ["traps", "ratio"])
def test_sort_writes_what_samtools_prints(inputs, tmp_path, case, src):
    _, paths = inputs
    _id, opts, out_name, fmt = case
    (tmp_path / "idx").mkdir()
    out = tmp_path / out_name.split("##idx##")[0]
    fs, ix = tmp_path / "out.flagstat", tmp_path / "out.idxstats"
    # Duplicate marking needs templates together: the coordinate-sorted copy.
    given = paths[src + ".sorted"] if "--markdup" in opts else paths[src]
    args = [*opts, "--flagstat", str(fs), "--idxstats", str(ix), "-o", str(tmp_path / out_name), given]
    if fmt != "default":
        args[len(opts):len(opts)] = ["--flagstat-format", fmt]
    res = harness.run_alnsort(args, cwd=str(tmp_path))
    if res.returncode != 0:
        # Only where samtools' scan refuses the file (name order): then no
        # output and no report is left behind.
        assert b"not position sorted" in res.stderr, res.stderr.decode()
        assert "-n" in opts
        assert not out.exists() and not fs.exists() and not ix.exists()
        assert os.listdir(tmp_path) == ["idx"]
        # samtools does refuse the same records sorted by name.
        oracle.sort(opts, paths[src], str(tmp_path / "oracle.bam"))
        rc, _ = _samtools_text("idxstats", str(tmp_path / "oracle.bam"))
        assert rc != 0
        return
    _check(out, fs, ix, fmt)


@pytest.mark.parametrize("order", [[], ["-n"]], ids=["coordinate", "name"])
def test_cram_output_gives_what_samtools_prints(inputs, tmp_path, order):
    """CRAM is read back by samtools' scan (never from an index): both
    reports as samtools prints them for the CRAM file."""
    d, paths = inputs
    ref = d / "ref.fa"
    if not ref.exists():
        rng = random.Random(3)
        with open(ref, "w") as fh:
            for name, ln in REFS:
                seq = "".join(rng.choice("ACGT") for _ in range(ln))
                fh.write(f">{name}\n" + "\n".join(seq[i:i + 60] for i in range(0, ln, 60)) + "\n")
    out, fs, ix = tmp_path / "o.cram", tmp_path / "o.flagstat", tmp_path / "o.idxstats"
    res = harness.run_alnsort([*order, "--write-index", "--reference", str(ref), "--flagstat", str(fs),
                               "--idxstats", str(ix), "-o", str(out), paths["traps"]])
    if order:
        assert res.returncode != 0 and b"not position sorted" in res.stderr
        return
    harness.check_ok(res)
    for cmd, report in (("flagstat", fs), ("idxstats", ix)):
        rc, want = _samtools_text(cmd, str(out), "--input-fmt-option", f"reference={ref}")
        assert rc == 0 and report.read_text() == want, cmd


def test_name_order_without_idxstats_gives_flagstat(inputs, tmp_path):
    _, paths = inputs
    fs = tmp_path / "fs.json"
    harness.check_ok(harness.run_alnsort(["-n", "--flagstat", str(fs), "--flagstat-format", "json",
                                          "-o", str(tmp_path / "n.bam"), paths["traps"]]))
    _check(tmp_path / "n.bam", fs, None, "json")


def test_the_traps_are_in_the_input(inputs, tmp_path):
    """The generated input reaches the counts the traps are about (so the
    comparisons above are not of zeros)."""
    _, paths = inputs
    fs = tmp_path / "fs.tsv"
    harness.check_ok(harness.run_alnsort(["--flagstat", str(fs), "--flagstat-format", "tsv",
                                          "-o", str(tmp_path / "o.bam"), paths["traps"]]))
    counts = {}
    for line in fs.read_text().splitlines():
        a, b, label = line.split("\t")
        counts[label] = (a, b)
    for label in ("secondary", "supplementary", "duplicates", "singletons",
                  "with mate mapped to a different chr", "with mate mapped to a different chr (mapQ>=5)"):
        assert int(counts[label][0]) > 0 and int(counts[label][1]) > 0, label
    idx = tmp_path / "o.idxstats"
    harness.check_ok(harness.run_alnsort(["--write-index", "--idxstats", str(idx),
                                          "-o", str(tmp_path / "i.bam"), paths["traps"]]))
    lines = [line.split("\t") for line in idx.read_text().splitlines()]
    assert int(lines[0][3]) > 0, "placed unmapped reads on chr1"
    assert lines[2][2:] == ["0", "0"], "chr3 is empty"
    assert int(lines[-1][3]) > 0, "unplaced reads"


def test_merge_writes_what_samtools_prints(inputs, tmp_path):
    _, paths = inputs
    for opts in ([], ["--write-index"]):
        d = tmp_path / ("idx" if opts else "plain")
        d.mkdir()
        fs, ix, out = d / "m.flagstat", d / "m.idxstats", d / "m.bam"
        res = subprocess.run(
            [harness.alnsort_path(), "merge", *opts, "--flagstat", str(fs), "--idxstats", str(ix),
             "-o", str(out), paths["traps.sorted"], paths["traps2.sorted"]],
            capture_output=True, timeout=120,
        )
        harness.check_ok(res)
        _check(out, fs, ix)


def test_markduplicates_writes_what_samtools_prints(inputs, tmp_path):
    _, paths = inputs
    for extra in ([], ["CREATE_INDEX=true"]):
        d = tmp_path / ("idx" if extra else "plain")
        d.mkdir()
        out = d / "md.bam"
        res = subprocess.run(
            [harness.alnsort_path(), "MarkDuplicates", f"I={paths['traps.sorted']}", f"O={out}",
             f"M={d / 'm.txt'}", *extra, f"FLAGSTAT={d / 'fs'}", "--idxstats", str(d / "ix")],
            capture_output=True, timeout=120,
        )
        harness.check_ok(res)
        _check(out, d / "fs", d / "ix")
        # Picard's own echo of its options (the metrics' second line) does
        # not list alnsort's additions; the command line as typed does.
        echo = (d / "m.txt").read_text().splitlines()[1]
        assert echo.startswith("# MarkDuplicates INPUT=") and "FLAGSTAT" not in echo, echo


def test_a_bad_format_and_a_clashing_file_are_refused(inputs, tmp_path):
    _, paths = inputs
    res = harness.run_alnsort(["--flagstat", str(tmp_path / "f"), "--flagstat-format", "yaml",
                               "-o", str(tmp_path / "o.bam"), paths["ratio"]])
    assert res.returncode != 0 and b"--flagstat-format 'yaml'" in res.stderr
    res = harness.run_alnsort(["--idxstats", str(tmp_path / "o.bam"), "-o", str(tmp_path / "o.bam"),
                               paths["ratio"]])
    assert res.returncode != 0 and b"--idxstats" in res.stderr
    assert os.listdir(tmp_path) == []
