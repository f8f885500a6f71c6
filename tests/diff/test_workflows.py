"""The command lines that workflow collections generate for `samtools sort`,
run verbatim with `alnsort sort` in its place, against the same command
line run with samtools 1.24 (pysam 0.24.1).

Two collections, their command lines rebuilt here from their published
templates (read, not copied):
* nf-core/modules, `modules/nf-core/samtools/sort/main.nf` (commit
  041fbd98880c, the module pinned to samtools 1.24):
  `[samtools cat IN... | ]samtools sort ARGS -T PREFIX --threads CPUS
  [--reference FASTA] -o OUT[##idx##OUT.FMT] [--write-index] IN|-`, where
  a SAM input is read directly and anything else through `samtools cat`,
  ARGS (`task.ext.args`) picks the output format (`--output-fmt cram`,
  `--output-fmt sam`) and may add `--write-index`; the cases are the
  module's own tests (BAM with no index, BAI, CSI; two BAMs; CRAM; SAM).
* snakemake-wrappers, `bio/samtools/sort/wrapper.py` (commit d3e6a345acb4)
  with snakemake-wrapper-utils 0.9.0's `get_samtools_opts`:
  `samtools sort [--threads THREADS-1] [--reference REF] [--write-index]
  -o OUT[##idx##IDX] --output-fmt EXT -m MEM_MB/THREADS*0.9M EXTRA
  -T TMPDIR/samtools_sort IN > LOG 2>&1`, with the format from the output's
  extension, upper-cased.

Each case runs the command line in a shell in its own work directory, once
with `samtools` and once with `alnsort` for `samtools sort` (`samtools cat`
stays samtools: alnsort has no `cat`), and checks: exit status 0 both; the
same files left in the work directory (what the workflow collects, no
temporary files); the header (@PG aside) and records as samtools 1.24 reads
them (CRAM decoded against the reference); and each tool's index answering
region queries and idxstats as the other's does.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import oracle
import pytest
from harness import RUN_TIMEOUT_S, alnsort_path, assert_same_text
from test_cram import _ref_seqs, _write_fasta, generate

# The nf-core module's test profile (tests/nextflow.config) sets the
# prefix to "${meta.id}.sorted" with meta.id 'test'.
NF_PREFIX = "test.sorted"
# nf-core's process_medium label asks for 6 CPUs; 2 is what this machine has.
NF_CPUS = 2
# snakemake-wrappers' test rule: threads 8, and no mem_mb/mem_gb resource,
# so get_mem() falls back to 205 MiB and the wrapper keeps 10% of it back.
SMK_THREADS = 8
SMK_MEM_MB = 205
SMK_MEM_OVERHEAD = 0.1


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """genome.fasta (+ .fai), an unsorted BAM and SAM of paired reads with
    read groups on it (aligner output), two coordinate-sorted BAMs (lanes)
    and a coordinate-sorted CRAM, as the modules' tests use."""
    d = tmp_path_factory.mktemp("workflows")
    seqs = _ref_seqs(random.Random(25))
    ref = d / "genome.fasta"
    _write_fasta(ref, seqs)
    oracle.samtools("faidx", str(ref))
    out = {"dir": d, "ref": ref}
    sam = d / "test.paired_end.sam"
    sam.write_text(generate(251, seqs, True))
    out["sam"] = sam
    bam = d / "test.paired_end.bam"
    oracle.to_bam(str(sam), str(bam))
    out["bam"] = bam
    for i, seed in ((1, 252), (2, 253)):
        lane = d / f"lane{i}.sam"
        lane.write_text(generate(seed, seqs, True))
        sorted_bam = d / f"test{'' if i == 1 else i}.paired_end.sorted.bam"
        oracle.samtools("sort", "--no-PG", "-o", str(sorted_bam), str(lane))
        out[f"lane{i}"] = sorted_bam
    cram = d / "test.paired_end.sorted.cram"
    oracle.samtools("sort", "--no-PG", "-O", "cram", "--reference", str(ref), "-o", str(cram), str(sam))
    out["cram"] = cram
    return out


@pytest.fixture(scope="module")
def tools(tmp_path_factory, alnsort_bin) -> Path:
    """A bin directory whose `samtools` is samtools 1.24 (pysam's, through
    tests/oracle.py) and whose `alnsort` is the binary under test."""
    b = tmp_path_factory.mktemp("bin")
    oracle_py = Path(oracle.__file__).resolve()
    (b / "samtools").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(oracle_py))} \"$@\"\n")
    (b / "samtools").chmod(0o755)
    (b / "alnsort").write_text(f"#!/bin/sh\nexec {shlex.quote(alnsort_path())} \"$@\"\n")
    (b / "alnsort").chmod(0o755)
    return b


def run_shell(script: str, cwd: Path, tools: Path) -> subprocess.CompletedProcess:
    """The command line as a workflow runs it: bash, errexit and pipefail
    (Nextflow's task wrapper sets both; Snakemake's shell() too)."""
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def swap(script: str) -> str:
    """The one-word swap a user makes: `samtools sort` -> `alnsort sort`."""
    assert script.count("samtools sort") == 1, script
    return script.replace("samtools sort", "alnsort sort")


def files_in(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def view(path: Path, ref: Path, *extra: str) -> str:
    """`samtools view` of PATH with the work directory's path written as
    `WORKDIR` (a CRAM's @SQ UR names the reference in it)."""
    text = oracle.samtools("view", "--no-PG", "-T", str(ref), *extra, str(path)).stdout.decode()
    return text.replace(str(path.parent), "WORKDIR")


def regions(data) -> list[str]:
    rng = random.Random(5)
    regs = ["*", "chrA", "chrC"]
    for name, length in (("chrA", 60_000), ("chrB", 35_000), ("chrC", 20_000)):
        for _ in range(6):
            beg = rng.randrange(1, length)
            regs.append(f"{name}:{beg}-{min(length, beg + rng.randrange(1, 8000))}")
    return regs


def with_input_tlens(text: str, inputs: list[str], data) -> str:
    """samtools' CRAM read back, with each record's TLEN as samtools reads
    it from the input (records are told apart by their XI:i tag).

    samtools 1.24 stores two mates that start at one position attached and
    its reader rebuilds their TLENs with the other sign; alnsort stores
    such mates detached, so its CRAM reads back the input's TLEN
    (docs/cram.md, "How it runs": attached mates). Every other field is
    compared as read back."""
    tlen = {}
    for name in inputs:
        for ln in view(data["dir"] / name, data["ref"]).splitlines():
            f = ln.split("\t")
            xi = next(t for t in f[11:] if t.startswith("XI:i:"))
            tlen[xi] = f[8]
    out, rebuilt = [], 0
    for ln in text.splitlines():
        f = ln.split("\t")
        if not ln.startswith("@"):
            xi = next(t for t in f[11:] if t.startswith("XI:i:"))
            if f[8] != tlen[xi]:
                assert f[6] == "=" and f[3] == f[7], f"samtools changed the TLEN of a record whose mate starts elsewhere: {ln[:200]}"
                rebuilt += 1
                f[8] = tlen[xi]
        out.append("\t".join(f))
    return "\n".join(out) + "\n"


def run_both(script: str, data, tools: Path, tmp: Path, outputs: list[str], index: str | None, inputs: list[str]):
    """Runs SCRIPT with samtools and with alnsort in two work directories
    holding links to the inputs, and compares what each left."""
    dirs = {}
    for who, cmd in (("samtools", script), ("alnsort", swap(script))):
        w = tmp / who
        w.mkdir()
        for name in ("ref", "sam", "bam", "lane1", "lane2", "cram"):
            (w / data[name].name).symlink_to(data[name])
        (w / "genome.fasta.fai").symlink_to(f"{data['ref']}.fai")
        before = set(files_in(w))
        res = run_shell(cmd, w, tools)
        assert res.returncode == 0, f"{who}: `{cmd}` exited {res.returncode}:\n{res.stderr[-3000:]}"
        left = [f for f in files_in(w) if f not in before]
        assert left == sorted(outputs), f"{who}: `{cmd}` left {left}, the workflow collects {sorted(outputs)}"
        dirs[who] = w
    main = outputs[0]
    ref = data["ref"]
    want = view(dirs["samtools"] / main, ref, "-h")
    got = view(dirs["alnsort"] / main, ref, "-h")
    assert [ln for ln in want.splitlines() if not ln.startswith("@")], "no records: the case proves nothing"
    if main.endswith(".cram"):
        want = with_input_tlens(want, inputs, data)
    assert_same_text(oracle.strip_pg(want), oracle.strip_pg(got), f"{main}: header and records")
    if index is None:
        return dirs
    regs = regions(data)
    answers = {}
    for who, w in dirs.items():
        answers[who] = oracle.samtools("view", "--no-PG", "-T", str(ref), "-X", str(w / main), str(w / index), *regs).stdout.decode()
    assert answers["samtools"].count("\n") > 100, "the region queries return almost nothing"
    if main.endswith(".cram"):
        answers["samtools"] = with_input_tlens(answers["samtools"], inputs, data)
    assert_same_text(answers["samtools"], answers["alnsort"], f"region queries through {index}")
    if not main.endswith(".cram"):
        stats = {who: oracle.samtools("idxstats", "-X", str(w / main), str(w / index)).stdout.decode() for who, w in dirs.items()}
        assert_same_text(stats["samtools"], stats["alnsort"], f"idxstats through {index}")
    return dirs


# --- nf-core/modules samtools/sort ---------------------------------------


def nf_core_sort(inputs: list[str], *, args: str = "", index_format: str = "", fasta: str = "genome.fasta") -> tuple[str, list[str]]:
    """The module's script block for these inputs and settings, and the
    files its output channels collect."""
    extension = "sam" if "--output-fmt sam" in args else "cram" if "--output-fmt cram" in args else "bam"
    output_file = f"{NF_PREFIX}.{extension}"
    write_index = ""
    if index_format:
        write_index = "--write-index"
        output_file = f"{NF_PREFIX}.{extension}##idx##{NF_PREFIX}.{extension}.{index_format}"
    is_sam = inputs[0].endswith(".sam")
    pre = "" if is_sam else f"samtools cat {' '.join(inputs)} | "
    source = " ".join(inputs) if is_sam else "-"
    reference = f"--reference {fasta}" if fasta else ""
    script = (f"{pre}samtools sort \\\n    {args} \\\n    -T {NF_PREFIX} \\\n    --threads {NF_CPUS} \\\n"
              f"    {reference} \\\n    -o {output_file} \\\n    {write_index} \\\n    {source}\n")
    collected = [f"{NF_PREFIX}.{extension}"]
    # The index channel: ${prefix}.${extension}.{crai,csi,bai}.
    idx = None
    if index_format:
        idx = f"{NF_PREFIX}.{extension}.{index_format}"
    elif "--write-index" in args:
        idx = f"{NF_PREFIX}.{extension}." + ("crai" if extension == "cram" else "csi")
    if idx:
        collected.append(idx)
    return script, collected


NF_CASES = {
    # name: (inputs, ext.args, index_format)
    "bam_no_index": (["test.paired_end.bam"], "", ""),
    "bam_bai_index": (["test.paired_end.bam"], "", "bai"),
    "bam_csi_index": (["test.paired_end.bam"], "", "csi"),
    "multiple_bam_bai_index": (["test.paired_end.sorted.bam", "test2.paired_end.sorted.bam"], "", "bai"),
    "cram": (["test.paired_end.sorted.cram"], "--write-index --output-fmt cram", ""),
    "sam": (["test.paired_end.sam"], "--output-fmt sam", ""),
}


def cases(table: dict) -> list:
    """The cases of TABLE; those writing CRAM check alnsort's contract that
    TLEN reads back as the input's (with_input_tlens), which samtools' own
    CRAM does not keep: alnsort_only."""
    return [pytest.param(k, marks=pytest.mark.alnsort_only) if "cram" in k else k for k in table]


@pytest.mark.parametrize("case", cases(NF_CASES))
def test_nf_core_samtools_sort_module(data, tools, tmp_path, case):
    inputs, args, index_format = NF_CASES[case]
    script, collected = nf_core_sort(inputs, args=args, index_format=index_format)
    run_both(script, data, tools, tmp_path, collected, collected[1] if len(collected) > 1 else None, inputs)


# --- snakemake-wrappers bio/samtools/sort ---------------------------------


def snakemake_sort(inp: str, out: str, *, idx: str = "", ref: str = "", extra: str = "",
                   threads: int = SMK_THREADS, tmpdir: str) -> str:
    """The wrapper's shell command for this rule."""
    opts = ""
    if threads > 1:
        opts += f" --threads {threads - 1}"
    if ref:
        opts += f" --reference {ref}"
    if idx:
        opts += " --write-index"
    opts += f" -o {out}" + (f"##idx##{idx}" if idx else "")
    opts += f" --output-fmt {os.path.splitext(out)[1][1:].upper()}"
    mem_per_thread_mb = int(SMK_MEM_MB / threads * (1.0 - SMK_MEM_OVERHEAD))
    tmp_prefix = Path(tmpdir) / "samtools_sort"
    return f"mkdir -p logs && samtools sort{opts} -m {mem_per_thread_mb}M {extra} -T {tmp_prefix} {inp} > logs/a.log 2>&1"


SMK_CASES = {
    # name: (output, idx, ref, extra, threads)
    "test_rule": ("a.sorted.bam", "", "", "", SMK_THREADS),
    "bai": ("a.sorted.bam", "a.sorted.bam.bai", "", "", 2),
    "csi": ("a.sorted.bam", "a.sorted.bam.csi", "", "", 1),
    "cram_crai": ("a.sorted.cram", "a.sorted.cram.crai", "genome.fasta", "", 4),
    "name_order": ("a.byname.bam", "", "", "-n", 2),
    "sam": ("a.sorted.sam", "", "", "", 2),
}


@pytest.mark.parametrize("case", cases(SMK_CASES))
def test_snakemake_samtools_sort_wrapper(data, tools, tmp_path, case):
    out, idx, ref, extra, threads = SMK_CASES[case]
    tmpdir = tmp_path / "smk_tmp"  # the wrapper's tempfile.TemporaryDirectory()
    tmpdir.mkdir()
    script = snakemake_sort("test.paired_end.bam", out, idx=idx, ref=ref, extra=extra, threads=threads, tmpdir=str(tmpdir))
    run_both(script, data, tools, tmp_path, [out, *([idx] if idx else []), "logs/a.log"], idx or None, ["test.paired_end.bam"])
    assert list(tmpdir.iterdir()) == [], "temporary files left in the wrapper's temporary directory"


# --- Picard MarkDuplicates: nf-core picard/markduplicates, snakemake-wrappers
# bio/picard/markduplicates ---------------------------------------------------
#
# The command lines of:
# * nf-core/modules `modules/nf-core/picard/markduplicates/main.nf` (commit
#   041fbd98880c): `picard -Xmx{0.8 x task.memory in MB}M MarkDuplicates
#   ARGS --INPUT IN --OUTPUT PREFIX.EXT [--REFERENCE_SEQUENCE FASTA]
#   --METRICS_FILE PREFIX.metrics.txt`, EXT the input's extension; its output
#   channels collect *.bam, *.bai, *.cram and *.metrics.txt; its test profile
#   sets the prefix to "${meta.id}.md" and ARGS to `--ASSUME_SORT_ORDER
#   queryname`;
# * snakemake-wrappers `bio/picard/markduplicates/wrapper.py` (commit
#   d3e6a345acb4) with snakemake-wrapper-utils' `get_java_opts` (overhead
#   factor 0.3: `-Xmx{mem_mb x 0.7}M -Djava.io.tmpdir=TMPDIR`):
#   `(picard MarkDuplicates JAVA_OPTS EXTRA --INPUT IN --TMP_DIR TMPDIR
#   --OUTPUT OUT --METRICS_FILE METRICS) > LOG 2>&1`, EXTRA with
#   ` --CREATE_INDEX` when a BAM's index is an output; its test rules use
#   `--REMOVE_DUPLICATES true` and mem_mb 1024.
# Each runs in bash with `picard` (Picard 3.4.0 behind a launcher that, as
# bioconda's `picard` script, hands -X/-D options to java) and again with
# the one word `picard` replaced by `alnsort`. Compared: exit status, the
# files left, the records in order with every field and tag (tags as a set:
# htsjdk reorders them), the header but the @PG lines' CL and VN, the
# metrics rows and histograms, and region queries through the index.
# Not covered: the wrapper's MarkDuplicatesWithMateCigar rules (alnsort has
# no such tool) and its CRAM rule (Picard's BAM on standard output through
# `samtools view`).

NF_MD_PREFIX = "test.md"
NF_MD_MEM_MB = 6144  # process_medium's 36 GB would be -Xmx29491M; any value works
SMK_MD_MEM_MB = 1024


@pytest.fixture(scope="module")
def md_data(data) -> dict[str, Path]:
    """Aligner-style name-grouped BAM (SO:unsorted) with every tenth template
    repeated under another name (duplicates to mark), its coordinate-sorted
    BAM and CRAM (3.0)."""
    d = data["dir"] / "md"
    d.mkdir()
    lines = data["sam"].read_text().splitlines()
    head = [ln for ln in lines if ln.startswith("@")]
    body = [ln for ln in lines if not ln.startswith("@")]
    groups: dict[str, list[str]] = {}
    for ln in body:
        groups.setdefault(ln.split("\t", 1)[0], []).append(ln)
    text = []
    for i, (name, recs) in enumerate(groups.items()):
        text += recs
        if i % 10 == 3:
            text += [f"dup{name}" + r[len(name):] for r in recs]
    sam = d / "grouped.sam"
    sam.write_text("\n".join(head + text) + "\n")
    grouped = d / "test.paired_end.bam"
    oracle.to_bam(str(sam), str(grouped))
    sorted_bam = d / "test.paired_end.sorted.bam"
    oracle.samtools("sort", "--no-PG", "-o", str(sorted_bam), str(grouped))
    cram = d / "test.paired_end.sorted.cram"
    # CRAM 3.0: htsjdk (Picard 3.4.0) reads no 3.1.
    oracle.samtools("sort", "--no-PG", "-O", "cram,version=3.0", "--reference", str(data["ref"]), "-o", str(cram), str(grouped))
    return {"grouped": grouped, "sorted": sorted_bam, "cram": cram, "ref": data["ref"]}


@pytest.fixture(scope="module")
def md_tools(tools) -> Path:
    """`picard`: Picard 3.4.0, its -X/-D options given to java as bioconda's
    launcher does; skipped (failed under CI) when Picard is not installed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("markdup_conftest", Path(__file__).resolve().parents[1] / "markdup" / "conftest.py")
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    why = mc._missing()
    if why is not None:
        if mc._in_ci():
            pytest.fail(f"Picard workflow tests not run: {why}", pytrace=False)
        pytest.skip(f"Picard workflow tests not run: {why}")
    launcher = tools / "picard"
    launcher.write_text(
        "#!/bin/bash\njvm=(); args=()\nfor a in \"$@\"; do case \"$a\" in -X*|-D*) jvm+=(\"$a\");; *) args+=(\"$a\");; esac; done\n"
        f"exec java \"${{jvm[@]}}\" -cp {shlex.quote(str(mc.picard_lib()))}/'*' picard.cmdline.PicardCommandLine \"${{args[@]}}\"\n")
    launcher.chmod(0o755)
    return tools


def md_records(path: Path, ref: Path) -> list[tuple]:
    text = oracle.samtools("view", "--no-PG", "-T", str(ref), str(path)).stdout.decode()
    return [tuple(f[:11]) + (tuple(sorted(f[11:])),) for f in (ln.split("\t") for ln in text.splitlines())]


def md_header(path: Path, ref: Path):
    text = oracle.samtools("view", "--no-PG", "-H", "-T", str(ref), str(path)).stdout.decode()
    # CRAM output: @SQ UR names the reference as the writer found it (htsjdk
    # keeps the input's, alnsort writes the one given, as samtools does).
    text = re.sub(r"\tUR:[^\t\n]*", "", text)
    plain, pgs = [], []
    for ln in text.splitlines():
        if ln.startswith("@PG"):
            tags = dict(f.split(":", 1) for f in ln.split("\t")[1:])
            pgs.append((tags.get("ID"), tags.get("PN"), tags.get("PP")))
        else:
            plain.append(sorted(ln.split("\t")) if ln.startswith("@HD") else ln)
    return plain, pgs


def md_metrics(path: Path):
    lines = path.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("## METRICS CLASS"))
    return [ln for ln in lines[at:] if ln.strip()]


def run_md_both(script: str, md_data, tools: Path, tmp: Path, collected: list[str], index: str | None, metrics: str, inputs: list[str]):
    dirs = {}
    swapped = re.sub(r"\bpicard\b", "alnsort", script)
    assert len(re.findall(r"\bpicard\b", script)) == 1, script
    for who, cmd in (("picard", script), ("alnsort", swapped)):
        w = tmp / who
        w.mkdir()
        for name in inputs:
            (w / name).symlink_to(md_data[{"test.paired_end.bam": "grouped", "test.paired_end.sorted.bam": "sorted",
                                           "test.paired_end.sorted.cram": "cram"}[name]])
        for name in ("genome.fasta", "genome.fasta.fai"):
            (w / name).symlink_to(Path(str(md_data["ref"]).replace("genome.fasta", name)))
        before = set(files_in(w))
        res = run_shell(cmd, w, tools)
        assert res.returncode == 0, f"{who}: `{cmd}` exited {res.returncode}:\n{res.stderr[-3000:]}"
        left = [f for f in files_in(w) if f not in before]
        assert left == sorted(collected), f"{who}: `{cmd}` left {left}, the workflow collects {sorted(collected)}"
        dirs[who] = w
    main, ref = collected[0], md_data["ref"]
    want, got = md_records(dirs["picard"] / main, ref), md_records(dirs["alnsort"] / main, ref)
    assert sum(int(r[1]) & 0x400 != 0 for r in want) > 10 or "REMOVE_DUPLICATES" in script, "Picard marked nothing"
    assert len(got) == len(want), f"{main}: {len(got)} records, Picard wrote {len(want)}"
    if main.endswith(".cram"):
        # htsjdk's CRAM writer stores mates attached and samtools reads their
        # TLEN back rebuilt; alnsort's CRAM keeps the input's TLEN
        # (docs/cram.md), checked here against the input as samtools reads it.
        key = lambda r: (r[0], int(r[1]) & ~0x400, r[2], r[3])  # noqa: E731
        src = {key(r): r[8] for r in md_records(md_data["cram"], ref)}
        assert [r[8] for r in got] == [src[key(r)] for r in got], "alnsort's CRAM changed a TLEN"
        want = [r[:8] + ("TLEN",) + r[9:] for r in want]
        got = [r[:8] + ("TLEN",) + r[9:] for r in got]
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(want, got)) if a != b]
    assert not diffs, f"{main}: {len(diffs)} records differ from Picard's; first:\n" + "\n".join(map(str, diffs[:3]))
    assert md_header(dirs["alnsort"] / main, ref) == md_header(dirs["picard"] / main, ref)
    assert md_metrics(dirs["alnsort"] / metrics) == md_metrics(dirs["picard"] / metrics)
    first = (dirs["alnsort"] / metrics).read_text().splitlines()[1]
    assert first.startswith(f"# MarkDuplicates INPUT=[{inputs[0]}]"), first
    if index:
        regs = regions(None)
        # Tags in one order per line (htsjdk reorders them).
        answers = {who: "\n".join("\t".join(f[:11] + sorted(f[11:])) for f in (ln.split("\t") for ln in oracle.samtools(
                       "view", "--no-PG", "-X", str(w / main), str(w / index), *regs).stdout.decode().splitlines()))
                   for who, w in dirs.items()}
        assert answers["picard"].count("\n") > 100
        assert_same_text(answers["picard"], answers["alnsort"], f"region queries through {index}")
    return dirs


def nf_core_markduplicates(reads: str, *, args: str = "", fasta: str = "") -> tuple[str, list[str], str]:
    """The module's script block, the files its channels collect (main output
    first) and the metrics file."""
    suffix = reads.rsplit(".", 1)[1]
    reference = f"--REFERENCE_SEQUENCE {fasta}" if fasta else ""
    avail_mem = int(NF_MD_MEM_MB * 0.8)
    script = (f"picard \\\n    -Xmx{avail_mem}M \\\n    MarkDuplicates \\\n    {args} \\\n    --INPUT {reads} \\\n"
              f"    --OUTPUT {NF_MD_PREFIX}.{suffix} \\\n    {reference} \\\n    --METRICS_FILE {NF_MD_PREFIX}.metrics.txt\n")
    collected = [f"{NF_MD_PREFIX}.{suffix}", f"{NF_MD_PREFIX}.metrics.txt"]
    if "--CREATE_INDEX true" in args and suffix == "bam":
        collected.insert(1, f"{NF_MD_PREFIX}.bai")
    return script, collected, f"{NF_MD_PREFIX}.metrics.txt"


NF_MD_CASES = {
    # name: (input, ext.args, fasta)
    "unsorted_bam": ("test.paired_end.bam", "--ASSUME_SORT_ORDER queryname", ""),
    "sorted_bam": ("test.paired_end.sorted.bam", "", ""),
    "sorted_bam_index": ("test.paired_end.sorted.bam", "--CREATE_INDEX true", ""),
    "cram": ("test.paired_end.sorted.cram", "", "genome.fasta"),
}


@pytest.mark.parametrize("case", list(NF_MD_CASES))
def test_nf_core_picard_markduplicates_module(md_data, md_tools, tmp_path, case):
    reads, args, fasta = NF_MD_CASES[case]
    script, collected, metrics = nf_core_markduplicates(reads, args=args, fasta=fasta)
    index = next((c for c in collected if c.endswith(".bai")), None)
    run_md_both(script, md_data, md_tools, tmp_path, collected, index, metrics, [reads])


def test_nf_core_test_profile_on_sorted_input_is_refused(md_data, md_tools, tmp_path):
    """The module's test profile gives `--ASSUME_SORT_ORDER queryname` to a
    coordinate-sorted BAM too; Picard then marks with its queryname
    semantics whatever the order, alnsort refuses the scattered templates by
    name (its queryname semantics need them together) and leaves nothing."""
    script, _, _ = nf_core_markduplicates("test.paired_end.sorted.bam", args="--ASSUME_SORT_ORDER queryname")
    w = tmp_path / "w"
    w.mkdir()
    (w / "test.paired_end.sorted.bam").symlink_to(md_data["sorted"])
    res = run_shell(re.sub(r"\bpicard\b", "alnsort", script), w, md_tools)
    assert res.returncode == 1 and "belongs to a template seen earlier" in res.stderr, res.stderr
    assert files_in(w) == ["test.paired_end.sorted.bam"]


def snakemake_markduplicates(bam: str, out: str, metrics: str, *, idx: str = "", extra: str = "", tmpdir: str) -> str:
    """The wrapper's shell command for this rule (JAVA_OPTS from get_java_opts
    with the wrapper's overhead factor 0.3 and resources.tmpdir)."""
    java_opts = f" -Xmx{int(SMK_MD_MEM_MB * (1 - 0.3))}M -Djava.io.tmpdir={tmpdir}"
    if idx and out.endswith(".bam"):
        extra += " --CREATE_INDEX"
    return (f"mkdir -p logs dedup && (picard MarkDuplicates {java_opts} {extra} --INPUT {bam} --TMP_DIR {tmpdir}"
            f" --OUTPUT {out} --METRICS_FILE {metrics} ) > logs/a.log 2>&1")


SMK_MD_CASES = {
    # name: (output, idx, extra)
    "markduplicates_bam": ("dedup/test.bam", "", "--REMOVE_DUPLICATES true"),
    "markduplicates_sam": ("dedup/test.sam", "", "--REMOVE_DUPLICATES true"),
    "bam_with_index": ("dedup/test.bam", "dedup/test.bai", ""),
}


@pytest.mark.parametrize("case", list(SMK_MD_CASES))
def test_snakemake_picard_markduplicates_wrapper(md_data, md_tools, tmp_path, case):
    out, idx, extra = SMK_MD_CASES[case]
    tmpdir = tmp_path / "smk_tmp"
    tmpdir.mkdir()
    metrics = f"{out}.metrics.txt"
    script = snakemake_markduplicates("test.paired_end.sorted.bam", out, metrics, idx=idx, extra=extra, tmpdir=str(tmpdir))
    collected = [out, *([idx] if idx else []), metrics, "logs/a.log"]
    run_md_both(script, md_data, md_tools, tmp_path, collected, idx or None, metrics, ["test.paired_end.sorted.bam"])
    leftovers = [p for p in tmpdir.iterdir() if not p.name.startswith(("libgkl", "snappy", "hsperf"))]
    assert leftovers == [], f"temporary files left in the wrapper's temporary directory: {leftovers}"
