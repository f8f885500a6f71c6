"""Differential tests of minimiser order (`-M`, `-K`, `-R`, `-H`, `-I`, `-w`)
against samtools 1.24 sort (pysam 0.24.1).

Contract: the header (minus @PG) and every record, as `samtools view` prints
it, in the same order, for every option set, `-@` and `-m`. Minimiser order
edits the records it writes (unplaced reads get POS/PNEXT 0 and TLEN 0, and
reads whose minimiser is on the reverse strand are written
reverse-complemented with flag 0x10 toggled), so the comparison covers SEQ,
QUAL and FLAG of those edits, not only the order.

Inputs: generated unaligned reads built from a few shared templates (shared
k-mers, reverse complements, homopolymer runs, N and IUPAC bases, reads
shorter than k, SEQ `*`, unmapped reads flagged reverse, stale PNEXT/TLEN),
the same reads mixed with placed ones, the suite's main input, a FASTA of
the templates for `-I` (wrapped, lower case, a repeated chunk, a sequence
shorter than the window), and samtools' own minimiser test input (real
reads: `test/dat/mpileup.1.sam` after `samtools reset --dupflag`, kept in
`data/samtools_minimiser/`).
"""

from __future__ import annotations

import random
from pathlib import Path

import harness
import oracle
import pytest
from harness import assert_same_text, check_ok, run_alnsort

BASES = "ACGT"
COMP = str.maketrans("ACGTNacgtn", "TGCANtgcan")

# Resource settings: the output must not depend on them. `-m 1M` makes both
# sorters spill (the unaligned input holds about 3 MB of records).
CONFIGS = {
    "default": [],
    "t2": ["-@", "2"],
    "m1M": ["-m", "1M"],
    "t2_m1M": ["-@", "2", "-m", "1M"],
}

# Minimiser option sets; "{fa}" is replaced by the generated FASTA's path.
OPTIONS = {
    "M": ["-M"],
    "K5": ["-M", "-K", "5"],
    "K31": ["-M", "-K", "31"],
    "K1": ["-M", "-K", "1"],
    "R": ["-M", "-R"],
    "H": ["-M", "-H"],
    "K12_R_H": ["-M", "-K", "12", "-R", "-H"],
    "I": ["-I", "{fa}"],
    "I_H_K8_w20": ["-I", "{fa}", "-H", "-K", "8", "-w", "20"],
    "I_R_K15": ["-M", "-K", "15", "-R", "-I", "{fa}"],
    "I_w0": ["-I", "{fa}", "-w", "0"],
}


def _templates(rng: random.Random) -> list[str]:
    out = []
    for i in range(12):
        n = rng.randint(300, 600)
        s = "".join(rng.choice(BASES) for _ in range(n))
        if i % 3 == 0:
            # homopolymer runs
            at = rng.randrange(50, n - 60)
            s = s[:at] + rng.choice(BASES) * rng.randint(5, 25) + s[at:]
        out.append(s)
    return out


def _revcomp(s: str) -> str:
    return s.translate(COMP)[::-1]


def _mutate(rng: random.Random, s: str) -> str:
    out = list(s)
    for _ in range(rng.randint(0, 3)):
        i = rng.randrange(len(out))
        out[i] = rng.choice("ACGTNRYMKSWBDHV=")
    if rng.random() < 0.3:
        # stretch or shrink a homopolymer (what -H squashes)
        i = rng.randrange(len(out))
        out[i:i] = out[i] * rng.randint(1, 6)
    return "".join(out)


def _read_seq(rng: random.Random, templates: list[str]) -> str:
    r = rng.random()
    if r < 0.03:
        return "*"
    if r < 0.08:
        return "".join(rng.choice(BASES) for _ in range(rng.randint(1, 9)))  # shorter than most k
    if r < 0.10:
        return rng.choice(BASES) * rng.randint(10, 60)  # pure homopolymer
    if r < 0.12:
        return "N" * rng.randint(5, 40)
    t = rng.choice(templates)
    n = rng.randint(30, 160)
    at = rng.randrange(0, len(t) - n)
    s = _mutate(rng, t[at : at + n])
    if rng.random() < 0.5:
        s = _revcomp(s)
    return s


def _qual(rng: random.Random, seq: str) -> str:
    if seq == "*" or rng.random() < 0.1:
        return "*"
    return "".join(chr(rng.randint(35, 74)) for _ in seq)


def _unplaced(rng: random.Random, i: int, templates: list[str]) -> str:
    seq = _read_seq(rng, templates)
    flag = rng.choice([4, 4, 4, 20, 77, 141, 77 | 16, 141 | 32])
    pnext, tlen, pos = 0, 0, 0
    if rng.random() < 0.1:
        pos = rng.randint(1, 1000)  # RNAME '*' with a stale POS
    if rng.random() < 0.1:
        pnext, tlen = rng.randint(1, 1000), rng.randint(-500, 500)
    tags = [f"XI:i:{i}"]
    if rng.random() < 0.5:
        tags.append(f"RG:Z:rg{rng.randint(1, 2)}")
    return "\t".join([f"u{i}", str(flag), "*", str(pos), "0", "*", "*", str(pnext), str(tlen), seq, _qual(rng, seq), *tags])


def _placed(rng: random.Random, i: int, templates: list[str]) -> str:
    seq = _read_seq(rng, templates)
    if seq == "*":
        seq = "ACGTACGTAC"
    ref = rng.choice(["chr1", "chr2"])
    pos = rng.randint(1, 9000)
    if rng.random() < 0.2:
        # placed but unmapped (keeps its coordinate key)
        fields = [f"p{i}", str(4 | rng.choice([0, 16])), ref, str(pos), "0", "*", "*", "0", "0"]
    else:
        fields = [f"p{i}", str(rng.choice([0, 16])), ref, str(pos), "60", f"{len(seq)}M", "*", "0", "0"]
    return "\t".join([*fields, seq, _qual(rng, seq), f"XI:i:{i}", "RG:Z:rg1"])


HEADER = "@HD\tVN:1.6\tSO:unknown\n@SQ\tSN:chr1\tLN:10000\n@SQ\tSN:chr2\tLN:10000\n@RG\tID:rg1\n@RG\tID:rg2\n"


def _sam(seed: int, n_unplaced: int, n_placed: int) -> tuple[str, list[str]]:
    rng = random.Random(seed)
    templates = _templates(random.Random(7))
    lines = [_unplaced(rng, i, templates) for i in range(n_unplaced)]
    lines += [_placed(rng, n_unplaced + i, templates) for i in range(n_placed)]
    rng.shuffle(lines)
    # Exact duplicates test ties (input order decides).
    lines += lines[:40]
    return HEADER + "".join(line + "\n" for line in lines), templates


def _fasta(templates: list[str]) -> str:
    out = []
    for i, t in enumerate(templates[:8]):
        body = t.lower() if i == 2 else t
        out.append(f">t{i} template {i}\n")
        out += [body[j : j + 60] + "\n" for j in range(0, len(body), 60)]
    # A repeated chunk makes k-mers that occur twice (dup in the index).
    out.append(">rep\n" + templates[0][:200] + templates[1][:150] + "\n")
    out.append(">tiny\nACGTACGTAC\n")  # shorter than the default window: not indexed
    return "".join(out)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("minimiser")
    files: dict[str, str] = {}
    text, templates = _sam(101, 12000, 0)
    files["unaligned"] = str(root / "unaligned.sam")
    Path(files["unaligned"]).write_text(text)
    text, _ = _sam(202, 3000, 3000)
    files["mixed"] = str(root / "mixed.sam")
    Path(files["mixed"]).write_text(text)
    files["mixed_bam"] = str(root / "mixed.bam")
    oracle.to_bam(files["mixed"], files["mixed_bam"])
    files["empty"] = str(root / "empty.sam")
    Path(files["empty"]).write_text(HEADER)
    files["fa"] = str(root / "ref.fa")
    Path(files["fa"]).write_text(_fasta(templates))
    return files


_expected_cache: dict[tuple[str, tuple[str, ...]], str] = {}


def _expected(src: str, args: list[str]) -> str:
    key = (src, tuple(args))
    if key not in _expected_cache:
        res = oracle.samtools("sort", *args, "-O", "SAM", "-o", "-", src)
        _expected_cache[key] = oracle.strip_pg(res.stdout.decode())
    return _expected_cache[key]


def _alnsort_text(tmp_path: Path, args: list[str], src: str) -> str:
    out = tmp_path / "out.bam"
    res = run_alnsort([*args, "-o", str(out), src], cwd=str(tmp_path))
    check_ok(res)
    leftovers = harness.leftover_files(tmp_path, {"out.bam", "ref"})
    assert leftovers == [], f"temp files left behind: {leftovers}"
    return oracle.strip_pg(oracle.view(str(out)))


def _opts(name: str, data: dict[str, str]) -> list[str]:
    return [a.replace("{fa}", data["fa"]) for a in OPTIONS[name]]


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("opts", list(OPTIONS))
def test_unaligned(alnsort_bin, data, tmp_path, opts, config):
    args = _opts(opts, data)
    expected = _expected(data["unaligned"], args)
    assert "\tSO:unsorted\tSS:unsorted:minhash" in expected.splitlines()[0]
    actual = _alnsort_text(tmp_path, [*args, *CONFIGS[config]], data["unaligned"])
    assert_same_text(expected, actual, f"unaligned {opts} {config}")


@pytest.mark.parametrize("config", ["default", "t2_m1M"])
@pytest.mark.parametrize("opts", ["M", "K5", "R", "H", "I", "I_H_K8_w20"])
@pytest.mark.parametrize("src", ["mixed", "mixed_bam"])
def test_mixed_placed_and_unplaced(alnsort_bin, data, tmp_path, src, opts, config):
    args = _opts(opts, data)
    expected = _expected(data[src], args)
    assert "\tSO:coordinate\tSS:coordinate:minhash" in expected.splitlines()[0]
    actual = _alnsort_text(tmp_path, [*args, *CONFIGS[config]], data[src])
    assert_same_text(expected, actual, f"{src} {opts} {config}")


@pytest.mark.parametrize("config", ["default", "t2_m1M"])
def test_main_input(alnsort_bin, inputs, tmp_path, config):
    """The suite's main input (ties, traps, long records) in minimiser order."""
    src = inputs.get("main", "bam")
    expected = _expected(src, ["-M", "-K", "11"])
    actual = _alnsort_text(tmp_path, ["-M", "-K", "11", *CONFIGS[config]], src)
    assert_same_text(expected, actual, f"main -M -K 11 {config}")


def test_empty_input_is_unsorted(alnsort_bin, data, tmp_path):
    expected = _expected(data["empty"], ["-M"])
    actual = _alnsort_text(tmp_path, ["-M"], data["empty"])
    assert_same_text(expected, actual, "header-only input, -M")
    assert "SS:unsorted:minhash" in actual


@pytest.mark.parametrize("order", [["-M", "-t", "RG"], ["-M", "-n"], ["-n", "-M"], ["-I", "{fa}", "-t", "XI", "-n"]])
def test_order_precedence(alnsort_bin, data, tmp_path, order):
    """The last of -n/-M/-I wins, and -t makes a tag order whatever -M says."""
    args = [a.replace("{fa}", data["fa"]) for a in order]
    expected = _expected(data["mixed"], args)
    actual = _alnsort_text(tmp_path, args, data["mixed"])
    assert_same_text(expected, actual, " ".join(order))


def test_sam_output_text(alnsort_bin, data, tmp_path):
    """-O SAM: the text itself, not a re-view of BAM."""
    out = tmp_path / "out.sam"
    check_ok(run_alnsort(["-M", "-H", "-O", "SAM", "-o", str(out), data["mixed"]], cwd=str(tmp_path)))
    assert_same_text(_expected(data["mixed"], ["-M", "-H"]), oracle.strip_pg(out.read_text()), "-M -H -O SAM")


def test_write_index(alnsort_bin, data, tmp_path):
    """samtools indexes minimiser output (placed reads are by coordinate)."""
    out = tmp_path / "out.bam"
    check_ok(run_alnsort(["-M", "--write-index", "-o", str(out), data["mixed"]], cwd=str(tmp_path)))
    assert (tmp_path / "out.bam.csi").exists()
    ref = tmp_path / "ref.bam"
    oracle.sort(["-M", "--write-index"], data["mixed"], str(ref))
    assert (tmp_path / "ref.bam.csi").exists()
    for region in ["chr1:100-5000", "chr2", "*"]:
        assert_same_text(
            oracle.view_records(str(ref), region), oracle.view_records(str(out), region), f"region {region}"
        )


@pytest.mark.parametrize("kind", ["missing", "empty", "not_fasta"])
def test_bad_index_file_fails_like_samtools(alnsort_bin, data, tmp_path, kind):
    fa = tmp_path / "bad.fa"
    if kind == "empty":
        fa.write_text("")
    elif kind == "not_fasta":
        fa.write_text("ACGT\n>x\nACGT\n")
    ref = oracle.samtools("sort", "-I", str(fa), "-o", str(tmp_path / "ref.bam"), data["mixed"], check=False)
    assert ref.returncode == 1
    res = run_alnsort(["-I", str(fa), "-o", str(tmp_path / "out.bam"), data["mixed"]], cwd=str(tmp_path))
    assert res.returncode == 1, res.stderr
    assert b"-I" in res.stderr and str(fa).encode() in res.stderr, res.stderr
    assert not (tmp_path / "out.bam").exists()


@pytest.mark.parametrize("bad", [["-K", "abc"], ["-K", "7x"], ["-w", "1.5"]])
def test_bad_numbers_fail_like_samtools(alnsort_bin, data, tmp_path, bad):
    ref = oracle.samtools("sort", "-M", *bad, "-o", str(tmp_path / "ref.bam"), data["mixed"], check=False)
    assert ref.returncode == 1
    res = run_alnsort(["-M", *bad, "-o", str(tmp_path / "out.bam"), data["mixed"]], cwd=str(tmp_path))
    assert res.returncode == 1, res.stderr
    err = res.stderr.decode()
    assert "invalid value" in err and bad[0] in err and bad[1] in err, err


@pytest.mark.parametrize("k", ["0", "-4", "32", "1000"])
def test_out_of_range_k_is_clamped_like_samtools(alnsort_bin, data, tmp_path, k):
    args = ["-M", "-K", k]
    assert_same_text(_expected(data["mixed"], args), _alnsort_text(tmp_path, args, data["mixed"]), f"-K {k}")


def test_gzip_fasta(alnsort_bin, data, tmp_path):
    import gzip

    (tmp_path / "ref").mkdir()
    gz = tmp_path / "ref" / "ref.fa.gz"
    gz.write_bytes(gzip.compress(Path(data["fa"]).read_bytes()))
    expected = _expected(data["unaligned"], ["-I", str(gz)])
    assert_same_text(expected, _alnsort_text(tmp_path, ["-I", str(gz)], data["unaligned"]), "-I ref.fa.gz")
    assert expected == _expected(data["unaligned"], ["-I", data["fa"]]), "samtools reads the gzip FASTA alike"


SAMTOOLS_DATA = Path(__file__).resolve().parent / "data" / "samtools_minimiser"


@pytest.fixture(scope="module")
def samtools_case_input(tmp_path_factory) -> str:
    """samtools' test input as its test suite makes it: view to BAM, then
    `samtools reset --dupflag` (the reads become unaligned)."""
    root = tmp_path_factory.mktemp("samtools_minimiser")
    bam = str(root / "auto_indexed.bam")
    oracle.samtools("view", "--no-PG", "-b", "-o", bam, str(SAMTOOLS_DATA / "mpileup.1.sam.gz"))
    reset = str(root / "reset.bam")
    oracle.samtools("reset", "--dupflag", "-o", reset, bam)
    return reset


@pytest.mark.parametrize("threads", [[], ["-@", "2"]], ids=["t1", "t2"])
@pytest.mark.parametrize(
    "case",
    [["-M", "-K10"], ["-M", "-K10", "-I", "REF"], ["-M", "-K10", "-I", "REF", "-H"]],
    ids=["minimiser-basic", "minimiser-indexed", "minimiser-indexed-poly"],
)
def test_samtools_own_cases(alnsort_bin, samtools_case_input, tmp_path, case, threads):
    """samtools' test/test.pl minimiser cases (`-m 10M`, input from reset)."""
    args = ["-m", "10M", *[str(SAMTOOLS_DATA / "mpileup.ref.fa") if a == "REF" else a for a in case]]
    expected = _expected(samtools_case_input, args)
    assert sum(not line.startswith("@") for line in expected.splitlines()) > 500
    actual = _alnsort_text(tmp_path, [*args, *threads], samtools_case_input)
    assert_same_text(expected, actual, " ".join(case))
