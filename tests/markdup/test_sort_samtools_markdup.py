"""`alnsort sort --markdup=samtools` against samtools 1.24's four-program chain (pysam 0.24.1's):
`samtools collate | samtools fixmate -m | samtools sort | samtools markdup` on generated name-grouped
inputs (smarkdup_gen.py: duplicate clusters with equal scores, clips, optical names across tiles, UMIs
in names and tags, two libraries in three read groups, QC fails, unmapped mates, orphans, supplementary
and secondary records, reads off the reference end, FF/RR/RF pairs, input already flagged 0x400), with
each of samtools markdup's options given as sort's long options. Every record compared field by field
and tag by tag (tag types too) in order (ties included: the chain's order of records with equal
coordinates is collate's), the header aside from @PG, and the statistics text aside from its COMMAND
line. Also: bytes identical for -@1/-@2 and a small -m (spilling), and the refusals by name.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
import oracle  # noqa: E402
import smarkdup_gen  # noqa: E402
from test_samtools_markdup import compare_records, header_without_pg, records  # noqa: E402

TIMEOUT_S = 300

#: samtools markdup's options and the `alnsort sort` options that stand for them.
SORT_NAMES = {
    "-r": "--remove-duplicates",
    "-S": "--mark-supplementary",
    "-t": "--tag-original",
    "-d": "--optical-distance",
    "-c": "--clear-existing",
    "-m": "--mode",
    "-l": "--max-read-length",
    "--json": "--markdup-json",
}


def sort_opts(opts: list[str]) -> list[str]:
    return [SORT_NAMES.get(o, o) for o in opts]


def chain(tmp: Path, src: Path, opts: list[str], stats: bool = True) -> Path:
    """samtools' four programs, each run as pysam runs it (files between them)."""
    col, fm, srt, out = (tmp / f"chain.{s}.bam" for s in ("col", "fm", "srt", "out"))
    oracle.samtools("collate", "-o", str(col), str(src))
    oracle.samtools("fixmate", "-m", str(col), str(fm))
    oracle.samtools("sort", "-o", str(srt), str(fm))
    extra = ["-f", str(tmp / "exp.stats")] if stats else []
    oracle.samtools("markdup", *opts, *extra, str(srt), str(out))
    return out


def run_sort(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [harness.alnsort_path(), "sort", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT_S,
    )


def stats_body(text: str) -> str:
    """The statistics without the COMMAND line (the programs' command lines differ)."""
    return "\n".join(
        line for line in text.splitlines() if not line.startswith(("COMMAND: ", '    "COMMAND": '))
    )


OPTION_SETS = [
    [],
    ["-r"],
    ["-d", "100"],
    ["-d", "100", "-t"],
    ["-d", "2000", "-t", "--no-multi-dup"],
    ["-m", "s"],
    ["-m", "s", "-d", "100", "-t"],
    ["-c", "-d", "100"],
    ["--include-fails", "-t"],
    ["--duplicate-count", "-r", "-d", "100"],
    ["-S"],
    ["-S", "-d", "100", "-t"],
    ["-S", "-r", "--duplicate-count"],
    ["--barcode-name"],
    ["--barcode-tag", "BC", "-d", "100"],
    ["--barcode-rgx", "M1:[0-9]+:FC:1:[0-9]+:([0-9]+):"],
    ["--barcode-name", "--move-umi-to-tag", "-S", "-t"],
    ["--use-read-groups", "-d", "100"],
    ["--use-read-groups", "--json", "-S", "-t"],
    ["-l", "40", "-d", "100"],
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sortsmd")
    out = {}
    for seed in (1, 2, 3):
        p = tmp / f"in{seed}.sam"
        p.write_text(smarkdup_gen.generate(seed, long_reads=(seed == 3)))
        out[seed] = p
    return out


def check_same(tmp: Path, src: Path, opts: list[str], extra: list[str] | None = None) -> None:
    exp = chain(tmp, src, opts)
    got = tmp / "got.bam"
    g = run_sort(
        ["--markdup=samtools", *sort_opts(opts), "--markdup-stats", "got.stats", *(extra or []), "-o", "got.bam", str(src)],
        tmp,
    )
    harness.check_ok(g)
    compare_records(records(exp), records(got), f"{src.name} {' '.join(opts)}")
    assert header_without_pg(got) == header_without_pg(exp)
    assert stats_body((tmp / "got.stats").read_text()) == stats_body((tmp / "exp.stats").read_text())


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: "_".join(o) or "default")
def test_same_as_the_samtools_chain(alnsort_bin, inputs, tmp_path, seed, opts):
    check_same(tmp_path, inputs[seed], opts)


def test_read_coords(alnsort_bin, tmp_path):
    """--read-coords/--coords-order on names that all match the pattern."""
    text = smarkdup_gen.generate(5)
    lines = [ln for ln in text.splitlines() if ln.startswith("@") or ln.split("\t")[0].count(":") in (6, 7)]
    src = tmp_path / "rc.sam"
    src.write_text("\n".join(lines) + "\n")
    check_same(
        tmp_path, src, ["--read-coords", "^M1:([0-9]+):FC:[0-9]+:([0-9]+):([0-9]+)", "--coords-order", "xty", "-d", "300"]
    )


def test_collated_and_bam_input(alnsort_bin, inputs, tmp_path):
    """samtools collate's own output (GO:query) as the input, and a BAM input: the same answer."""
    src = inputs[2]
    col = tmp_path / "collated.bam"
    oracle.samtools("collate", "-o", str(col), str(src))
    exp = chain(tmp_path, src, ["-d", "100"], stats=False)
    for inp in (col,):
        g = run_sort(["--markdup=samtools", "--optical-distance", "100", "-o", "got.bam", str(inp)], tmp_path)
        harness.check_ok(g)
        compare_records(records(exp), records(tmp_path / "got.bam"), inp.name)


def test_many_ties_threads_and_spilling_give_the_same_bytes(alnsort_bin, tmp_path):
    """A larger input (many equal coordinates across templates): the chain's records, and the same
    output bytes for -@1, -@2 and a small -m that spills runs to disk."""
    src = tmp_path / "big.sam"
    src.write_text(smarkdup_gen.generate(9, clusters=600))
    exp = chain(tmp_path, src, ["-d", "100", "-t"], stats=False)
    outs = []
    for extra in (["-@", "1"], ["-@", "2"], ["-@", "2", "-m", "1M"], ["-@", "1", "--max-memory", "40M"]):
        name = f"got{len(outs)}.bam"
        g = run_sort(
            ["--markdup=samtools", "--optical-distance", "100", "--tag-original", "--no-PG", *extra, "-o", name, str(src)],
            tmp_path,
        )
        harness.check_ok(g)
        outs.append((tmp_path / name).read_bytes())
    compare_records(records(exp), records(tmp_path / "got0.bam"), "-@1")
    assert all(o == outs[0] for o in outs[1:]), "outputs differ between -@/-m"


def test_stats_on_stderr_and_json(alnsort_bin, inputs, tmp_path):
    src = inputs[1]
    chain(tmp_path, src, ["--json", "--use-read-groups"])
    g = run_sort(["--markdup=samtools", "--markdup-json", "--use-read-groups", "-o", "got.bam", str(src)], tmp_path)
    harness.check_ok(g)
    # samtools' warnings (the library size) come on standard error before the statistics, as in samtools.
    got = "\n".join(ln for ln in g.stderr.decode().splitlines() if not ln.startswith("alnsort sort --markdup"))
    assert "unable to calculate estimated library size" in g.stderr.decode()
    assert stats_body(got).strip() == stats_body((tmp_path / "exp.stats").read_text()).strip()


def _refused(tmp: Path, args: list[str], expect: str) -> None:
    g = run_sort([*args, "-o", "x.bam"], tmp)
    assert g.returncode != 0, args
    assert expect in g.stderr.decode(), g.stderr.decode()
    assert not (tmp / "x.bam").exists()
    assert [p.name for p in tmp.iterdir() if p.name.startswith("x.bam")] == []


def test_refusals_are_named(alnsort_bin, inputs, tmp_path):
    src = str(inputs[1])
    _refused(tmp_path, ["--markdup=samtools", "--metrics", "m.txt", src], "--metrics")
    _refused(tmp_path, ["--markdup=samtools", "--tagging-policy", "all", src], "--tagging-policy")
    _refused(tmp_path, ["--markdup", "--mode", "s", src], "--mode")
    _refused(tmp_path, ["--markdup=picard", "--mark-supplementary", src], "--mark-supplementary")
    _refused(tmp_path, ["--include-fails", src], "--include-fails needs --markdup")
    _refused(tmp_path, ["--markdup=gatk", src], "--markdup=gatk")
    _refused(tmp_path, ["--markdup=samtools", "-n", src], "coordinate only")
    _refused(tmp_path, ["--markdup=samtools", src, src], "one input")
    _refused(tmp_path, ["--markdup=samtools", "--move-umi-to-tag", src], "--move-umi-to-tag")


def test_coordinate_sorted_input_is_grouped_first(alnsort_bin, inputs, tmp_path):
    """Input whose @HD says SO:coordinate: grouped by name in collate's order by a sort of its own, then
    the chain's answer (the chain run on the sorted file, collate included); also when it spills."""
    srt = tmp_path / "sorted.bam"
    oracle.samtools("sort", "-o", str(srt), str(inputs[3]))
    exp = chain(tmp_path, srt, ["-d", "100", "-S", "-t"])
    for extra in ([], ["-m", "1M", "-@", "2"]):
        g = run_sort(
            ["--markdup=samtools", "--optical-distance", "100", "--mark-supplementary", "--tag-original",
             "--markdup-stats", "got.stats", *extra, "-o", "got.bam", str(srt)],
            tmp_path,
        )
        harness.check_ok(g)
        compare_records(records(exp), records(tmp_path / "got.bam"), f"coordinate-sorted input {extra}")
        assert stats_body((tmp_path / "got.stats").read_text()) == stats_body((tmp_path / "exp.stats").read_text())


def test_scattered_input_is_refused(alnsort_bin, inputs, tmp_path):
    """Records not grouped by name whose @HD does not say so: refused naming the read, no output left."""
    srt = tmp_path / "sorted.bam"
    oracle.samtools("sort", "-o", str(srt), str(inputs[1]))
    text = tmp_path / "scattered.sam"
    view = oracle.samtools("view", "-h", str(srt))
    text.write_text(view.stdout.decode().replace("SO:coordinate", "SO:unsorted"))
    _refused(tmp_path, ["--markdup=samtools", str(text)], "comes back after other names")


def test_picard_answer_unchanged(alnsort_bin, inputs, tmp_path):
    """--markdup and --markdup=picard are the same run, byte for byte."""
    src = str(inputs[2])
    for i, flag in enumerate(("--markdup", "--markdup=picard")):
        harness.check_ok(run_sort([flag, "--no-PG", "-o", f"p{i}.bam", src], tmp_path))
    assert (tmp_path / "p0.bam").read_bytes() == (tmp_path / "p1.bam").read_bytes()


def test_flagstat_idxstats_and_index_in_the_same_pass(alnsort_bin, inputs, tmp_path):
    """--flagstat/--idxstats/--write-index with --markdup=samtools: samtools' text for the marked output."""
    import pysam

    g = run_sort(
        ["--markdup=samtools", "--optical-distance", "100", "--flagstat", "fs.txt", "--idxstats", "ix.txt",
         "--write-index", "-o", "q.bam", str(inputs[1])],
        tmp_path,
    )
    harness.check_ok(g)
    q = str(tmp_path / "q.bam")
    assert (tmp_path / "fs.txt").read_text() == pysam.flagstat(q)
    assert (tmp_path / "ix.txt").read_text() == pysam.idxstats(q)
    assert " duplicates" in (tmp_path / "fs.txt").read_text() and (tmp_path / "q.bam.csi").exists()


def _pairs_sam(n: int, seed: int) -> list[str]:
    """SAM lines of `n` mapped pairs grouped by name (header first)."""
    import random

    rng = random.Random(seed)
    lines = ["@HD\tVN:1.6\tSO:unsorted", "@SQ\tSN:chr1\tLN:1000000"]
    for i in range(n):
        pos = rng.randrange(1, 990_000)
        mpos = pos + rng.randrange(0, 400)
        seq = "".join(rng.choice("ACGT") for _ in range(50))
        qual = "".join(chr(33 + rng.randrange(2, 41)) for _ in range(50))
        name = f"read{i:06d}:{rng.randrange(1 << 30)}"
        lines.append(f"{name}\t99\tchr1\t{pos}\t60\t50M\t=\t{mpos}\t{mpos + 50 - pos}\t{seq}\t{qual}")
        lines.append(f"{name}\t147\tchr1\t{mpos}\t60\t50M\t=\t{pos}\t{pos - mpos - 50}\t{seq}\t{qual}")
    return lines


def test_name_check_spills_and_still_finds_a_name_that_comes_back(alnsort_bin, tmp_path):
    """The read-name check keeps a sixteenth of the budget in memory and
    spills beyond it: at -m 1M, 6,000 grouped templates give the chain's
    answer (checked against the same run at -m 1G, where nothing spills),
    and a template whose mate comes back after thousands of others (its
    first part long spilled) is refused naming both templates' numbers,
    with no output; one that comes back soon is refused by name."""
    lines = _pairs_sam(6000, 7)
    head, recs = lines[:2], lines[2:]
    grouped = tmp_path / "grouped.sam"
    grouped.write_text("\n".join(lines) + "\n")
    for mem in ("1M", "1G"):
        harness.check_ok(run_sort(["--markdup=samtools", "--no-PG", "-m", mem, "-o", f"g{mem}.bam",
                                   str(grouped)], tmp_path))
    assert (tmp_path / "g1M.bam").read_bytes() == (tmp_path / "g1G.bam").read_bytes()
    # Template 3's second record moved to the end: 5,997 templates later.
    far = recs[:5] + recs[6:] + [recs[5]]
    (tmp_path / "far.sam").write_text("\n".join(head + far) + "\n")
    _refused(tmp_path, ["--markdup=samtools", "-m", "1M", str(tmp_path / "far.sam")],
             "templates 3 and 6001 (counted from the input's start) have the same read name")
    # Moved two templates on: still in memory, refused by name.
    near = recs[:5] + recs[6:10] + [recs[5]] + recs[10:]
    (tmp_path / "near.sam").write_text("\n".join(head + near) + "\n")
    name = recs[5].split("\t")[0]
    _refused(tmp_path, ["--markdup=samtools", "-m", "1M", str(tmp_path / "near.sam")],
             f"read name {name} comes back after other names")
