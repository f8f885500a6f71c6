"""Differential tests: alnsort sort against samtools 1.24 sort.

Contract under test: for every order and every resource setting, the output
header (minus @PG) is byte-identical to samtools', every record prints as
`samtools view` prints it, in the same order. Ties keep input order, so the
order cannot depend on -m/-@/--max-memory: every configuration is compared
with samtools' default-configuration output (test_oracle_is_config_invariant
checks that premise on samtools itself).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import harness
import oracle
import pytest
from harness import ALNSORT_ONLY_CONFIGS, CONFIGS, ORDERS, assert_same_text, check_ok, run_alnsort


def _sort_to_bam(tmp_path, args, input_path):
    out = tmp_path / "out.bam"
    res = run_alnsort([*args, "-o", str(out), input_path], cwd=str(tmp_path))
    check_ok(res)
    assert res.stdout == b"", "nothing may go to stdout when -o is given"
    leftovers = harness.leftover_files(tmp_path, {"out.bam"})
    assert leftovers == [], f"temp files left behind: {leftovers}"
    return str(out)


def _configs():
    """CONFIGS as pytest params; options samtools lacks are marked alnsort_only."""
    return [pytest.param(c, marks=pytest.mark.alnsort_only) if c in ALNSORT_ONLY_CONFIGS else c for c in CONFIGS]


@pytest.mark.parametrize("fmt", ["sam", "bam"])
@pytest.mark.parametrize("config", _configs())
@pytest.mark.parametrize("order", list(ORDERS))
def test_matrix(alnsort_bin, inputs, oracle_cache, tmp_path, order, config, fmt):
    """Main input (~34k records, ties, traps, 3 records > 64 KiB) -> BAM."""
    src = inputs.get("main", fmt)
    out = _sort_to_bam(tmp_path, [*ORDERS[order], *CONFIGS[config]], src)
    expected = oracle.strip_pg(oracle_cache.sorted_text(src, ORDERS[order]))
    actual = oracle.strip_pg(oracle.view(out))
    assert_same_text(expected, actual, f"order={order} config={config} input={fmt}")


@pytest.mark.parametrize("fmt", ["sam", "bam"])
@pytest.mark.parametrize("order", list(ORDERS))
def test_sam_output_text(alnsort_bin, inputs, oracle_cache, tmp_path, order, fmt):
    """`-O SAM -o out.sam`: the SAM text itself equals samtools' (no re-view)."""
    src = inputs.get("main", fmt)
    out = tmp_path / "out.sam"
    res = run_alnsort([*ORDERS[order], "-O", "SAM", "-o", str(out), src], cwd=str(tmp_path))
    check_ok(res)
    expected = oracle.strip_pg(oracle_cache.sorted_text(src, ORDERS[order]))
    assert_same_text(expected, oracle.strip_pg(out.read_text()), f"SAM text order={order} input={fmt}")


@pytest.mark.parametrize("stdin", [False, True])
@pytest.mark.parametrize("order", ["coord", "name", "template"])
def test_plain_gzip_sam_input(alnsort_bin, inputs, oracle_cache, tmp_path, order, stdin):
    """SAM compressed with plain gzip (not BGZF), in two members, as
    `gzip`/`cat` make it: samtools reads it, and so must alnsort."""
    text = Path(inputs.get("main", "sam")).read_bytes()
    half = text.index(b"\n", len(text) // 2) + 1
    src = tmp_path.parent / f"{tmp_path.name}-in.sam.gz"
    src.write_bytes(gzip.compress(text[:half], compresslevel=1) + gzip.compress(text[half:], compresslevel=1))
    args = [*ORDERS[order], "-@", "2", "-m", "1M", "-O", "SAM", "-o", "-"]
    res = run_alnsort(args + ([] if stdin else [str(src)]), stdin_path=str(src) if stdin else None, cwd=str(tmp_path))
    check_ok(res)
    expected = oracle.strip_pg(oracle_cache.sorted_text(str(src), ORDERS[order]))
    assert_same_text(expected, oracle.strip_pg(res.stdout.decode()), f"gzip SAM order={order} stdin={stdin}")
    assert harness.leftover_files(tmp_path, set()) == []


@pytest.mark.parametrize("how", ["dash_arg", "no_arg"])
@pytest.mark.parametrize("fmt", ["sam", "bam"])
@pytest.mark.parametrize("order", ["coord", "name", "template"])
def test_stdin_to_stdout(alnsort_bin, inputs, oracle_cache, tmp_path, order, fmt, how):
    """Input from stdin (`-` or no positional), SAM on stdout (`-o -`)."""
    src = inputs.get("main", fmt)
    args = [*ORDERS[order], "-m", "1M", "-O", "SAM", "-o", "-"] + (["-"] if how == "dash_arg" else [])
    res = run_alnsort(args, stdin_path=src, cwd=str(tmp_path))
    check_ok(res)
    expected = oracle.strip_pg(oracle_cache.sorted_text(src, ORDERS[order]))
    assert_same_text(expected, oracle.strip_pg(res.stdout.decode()), f"stdin order={order} input={fmt}")


def test_default_output_is_bam_on_stdout(alnsort_bin, inputs, oracle_cache, tmp_path):
    """No -o: BAM to stdout, as samtools."""
    src = inputs.sam("hdr_plain")
    res = run_alnsort([src], cwd=str(tmp_path))
    check_ok(res)
    assert res.stdout[:2] == b"\x1f\x8b", "stdout must be BGZF (gzip magic)"
    out = tmp_path / "stdout.bam"
    out.write_bytes(res.stdout)
    assert_same_text(
        oracle.strip_pg(oracle_cache.sorted_text(src, [])), oracle.strip_pg(oracle.view(str(out))), "default stdout BAM"
    )


def test_sam_extension_selects_sam(alnsort_bin, inputs, oracle_cache, tmp_path):
    """`-o x.sam` without -O writes SAM (format from the extension)."""
    src = inputs.bam("hdr_plain")
    out = tmp_path / "x.sam"
    check_ok(run_alnsort(["-n", "-o", str(out), src], cwd=str(tmp_path)))
    text = out.read_text()
    assert text.startswith("@HD\t"), "x.sam must be plain SAM text"
    assert_same_text(oracle.strip_pg(oracle_cache.sorted_text(src, ["-n"])), oracle.strip_pg(text), "-o x.sam")


def _assert_same_bytes(inputs, tmp_path, order, variants):
    src = inputs.bam("main")
    digests = {}
    for name, cfg in variants.items():
        out = tmp_path / f"{name}.bam"
        # --no-PG: the @PG CL names the options, which is the one legitimate difference.
        check_ok(run_alnsort([*ORDERS[order], *cfg, "--no-PG", "-o", str(out), src], cwd=str(tmp_path)))
        digests[name] = out.read_bytes()
    base = digests["default"]
    differing = [name for name, data in digests.items() if data != base]
    assert differing == [], f"order={order}: BAM bytes differ from the default run for {differing}"


@pytest.mark.parametrize("order", list(ORDERS))
def test_bam_bytes_identical_across_configs(alnsort_bin, inputs, tmp_path, order):
    """Same output bytes for every -@ and -m (and -@ 1), given --no-PG."""
    variants = {k: v for k, v in CONFIGS.items() if k not in ALNSORT_ONLY_CONFIGS}
    _assert_same_bytes(inputs, tmp_path, order, {**variants, "t1": ["-@", "1"]})


@pytest.mark.alnsort_only
@pytest.mark.parametrize("order", ["coord", "name", "template"])
def test_max_memory_bytes_identical(alnsort_bin, inputs, tmp_path, order):
    """--max-memory (total budget) changes nothing in the output either."""
    _assert_same_bytes(
        inputs,
        tmp_path,
        order,
        {"default": [], "maxmem16M": ["--max-memory", "16M"], "maxmem20M_t2": ["--max-memory", "20M", "-@", "2"]},
    )


# ---- other inputs ----------------------------------------------------------------

SPECIAL_CASES = [
    # (input, order, config)
    *[("manyrefs", o, c) for o in ORDERS for c in ("default", "t3_m1M")],
    *[("names", o, "default") for o in ("name", "lexname", "tag_RG_name", "tag_XI", "coord")],
    *[("unplaced", o, c) for o in ("coord", "name", "template", "tag_XT") for c in ("default", "m1M")],
    ("big", "coord", "m1M"),
    ("big", "coord", "t3_m1M"),
    ("big", "name", "t3_m1M"),
    ("big", "template", "m1M"),
]


@pytest.mark.parametrize("name,order,config", SPECIAL_CASES, ids=[f"{n}-{o}-{c}" for n, o, c in SPECIAL_CASES])
def test_special_inputs(alnsort_bin, inputs, oracle_cache, tmp_path, name, order, config):
    """3000 @SQ / no @HD; name traps; all-unplaced input; >32 samtools spills."""
    src = inputs.bam(name)
    out = _sort_to_bam(tmp_path, [*ORDERS[order], *CONFIGS[config]], src)
    expected = oracle.strip_pg(oracle_cache.sorted_text(src, ORDERS[order]))
    assert_same_text(expected, oracle.strip_pg(oracle.view(out)), f"input={name} order={order} config={config}")


HEADER_VARIANTS = ["hdr_v15", "hdr_nohd", "hdr_plain", "hdr_pgchain"]


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("variant", HEADER_VARIANTS)
def test_header_edits(alnsort_bin, inputs, oracle_cache, tmp_path, variant, order):
    """@HD rewritten in place (VN kept, GO/SS edits, ZZ kept) or inserted."""
    src = inputs.sam(variant)
    res = run_alnsort([*ORDERS[order], "-O", "SAM", "-o", "-", src], cwd=str(tmp_path))
    check_ok(res)
    expected = oracle.strip_pg(oracle_cache.sorted_text(src, ORDERS[order]))
    assert_same_text(expected, oracle.strip_pg(res.stdout.decode()), f"{variant} order={order}")


# Option combinations whose precedence is a trap (reference section 1.8, 1.5).
ODD_OPTIONS = [
    ["-n", "-N"],
    ["-N", "-n"],
    ["-t", "XT", "--template-coordinate"],
    ["--template-coordinate", "-n"],
    ["-n", "--template-coordinate"],
    ["-t", "X"],  # 1-character tag: every record "missing", SS cut at the NUL
    ["-t", "XTZ"],  # only 2 characters are used
    ["-t", "CB"],
    ["-t", "MI", "-N"],
    ["-t", "ZB"],  # B arrays never compare by value
    ["-t", "MC", "-n"],
]


@pytest.mark.parametrize("args", ODD_OPTIONS, ids=[" ".join(a) for a in ODD_OPTIONS])
def test_option_precedence(alnsort_bin, inputs, oracle_cache, tmp_path, args):
    src = inputs.bam("main")
    ref = oracle_cache.result(src, args)
    res = run_alnsort([*args, "-O", "SAM", "-o", "-", src], cwd=str(tmp_path))
    if ref.returncode != 0:
        assert res.returncode == 1, f"samtools refuses {args}; alnsort must exit 1, got {res.returncode}"
        return
    check_ok(res)
    assert_same_text(oracle.strip_pg(ref.stdout.decode()), oracle.strip_pg(res.stdout.decode()), " ".join(args))


@pytest.mark.parametrize("order", ["coord", "name", "template"])
def test_header_only_input(alnsort_bin, inputs, oracle_cache, tmp_path, order):
    """No records at all: header edits still happen (placed=0 path)."""
    src = tmp_path / "empty.sam"
    src.write_text("\n".join(oracle.header_lines(open(inputs.sam("hdr_v15")).read())) + "\n")
    res = run_alnsort([*ORDERS[order], "-O", "SAM", "-o", "-", str(src)], cwd=str(tmp_path))
    check_ok(res)
    expected = oracle.strip_pg(oracle_cache.sorted_text(str(src), ORDERS[order]))
    assert_same_text(expected, oracle.strip_pg(res.stdout.decode()), f"header-only order={order}")


# ---- @PG ---------------------------------------------------------------------------


@pytest.mark.alnsort_only
@pytest.mark.parametrize("variant", HEADER_VARIANTS)
def test_pg_line_added(alnsort_bin, inputs, tmp_path, variant):
    """alnsort adds its own @PG (ID alnsort..., CL with the command line) and keeps the input's."""
    src = inputs.sam(variant)
    args = ["-n", "-m", "4M", "-O", "SAM", "-o", "-", src]
    res = run_alnsort(args, cwd=str(tmp_path))
    check_ok(res)
    input_text = open(src).read()
    out = res.stdout.decode()
    for line in oracle.pg_lines(input_text):
        assert line in oracle.pg_lines(out), f"input @PG line lost: {line}"
    added = harness.added_pg_lines(input_text, out)
    assert added, "alnsort added no @PG line"
    for line in added:
        f = harness.pg_fields(line)
        assert f.get("ID", "").startswith("alnsort"), f"@PG ID should start with 'alnsort': {line}"
        assert "CL" in f, f"@PG line without CL: {line}"
        assert "sort " + " ".join(args) in f["CL"], f"CL does not hold the command line {args}: {line}"
    ids = [harness.pg_fields(line).get("ID") for line in oracle.pg_lines(out)]
    assert len(ids) == len(set(ids)), f"duplicate @PG IDs: {ids}"


@pytest.mark.alnsort_only
@pytest.mark.parametrize("variant", HEADER_VARIANTS)
def test_pg_links_like_samtools(alnsort_bin, inputs, oracle_cache, tmp_path, variant):
    """One new @PG per chain end, PP links and placement (after the last @PG) as samtools does."""
    src = inputs.sam(variant)
    res = run_alnsort(["-O", "SAM", "-o", "-", src], cwd=str(tmp_path))
    check_ok(res)
    input_text = open(src).read()
    ours = res.stdout.decode()
    theirs = oracle_cache.sorted_text(src, [])
    ours_added = harness.added_pg_lines(input_text, ours)
    theirs_added = harness.added_pg_lines(input_text, theirs)
    assert sorted(harness.pg_fields(x).get("PP", "") for x in ours_added) == sorted(
        harness.pg_fields(x).get("PP", "") for x in theirs_added
    ), f"PP links differ: samtools {theirs_added} alnsort {ours_added}"
    pos_ours = [i for i, line in enumerate(oracle.header_lines(ours)) if line in ours_added]
    pos_theirs = [i for i, line in enumerate(oracle.header_lines(theirs)) if line in theirs_added]
    assert pos_ours == pos_theirs, f"new @PG lines at header lines {pos_ours}, samtools puts them at {pos_theirs}"


@pytest.mark.parametrize("variant", HEADER_VARIANTS)
def test_no_pg(alnsort_bin, inputs, tmp_path, variant):
    """--no-PG: the header's @PG lines are exactly the input's."""
    src = inputs.sam(variant)
    res = run_alnsort(["--no-PG", "-O", "SAM", "-o", "-", src], cwd=str(tmp_path))
    check_ok(res)
    assert oracle.pg_lines(res.stdout.decode()) == oracle.pg_lines(open(src).read())


# ---- harness self-checks --------------------------------------------------------


@pytest.mark.parametrize("order", list(ORDERS))
def test_oracle_is_config_invariant(inputs, oracle_cache, order):
    """The premise of comparing every config against samtools' default run:
    samtools' own output does not depend on -m/-@ for these inputs."""
    src = inputs.bam("main")
    base = oracle.strip_pg(oracle_cache.sorted_text(src, ORDERS[order]))
    for cfg in (["-m", "1M"], ["-@", "3", "-m", "1M"]):
        other = oracle.strip_pg(oracle_cache.sorted_text(src, [*ORDERS[order], *cfg]))
        assert_same_text(base, other, f"samtools {order} default vs {cfg}")


@pytest.mark.alnsort_only
@pytest.mark.parametrize("order", ["coord", "name", "template"])
def test_final_merge_is_cut_by_key_range_with_threads(alnsort_bin, inputs, tmp_path, order):
    """The threaded runs of this suite really go through the partitioned
    final merge (in memory and after spills), and it gives the same BAM
    bytes as the single-tree merge of a one-thread run."""
    import json

    src = inputs.get("main", "bam")
    outputs = {}
    for name, args in {"t1": ["-@", "1"], "t2": ["-@", "2"], "t3_m1M": ["-@", "3", "-m", "1M"]}.items():
        stats = tmp_path / f"{name}.json"
        out = tmp_path / f"{name}.bam"
        check_ok(run_alnsort([*ORDERS[order], *args, "--no-PG", "--stats-json", str(stats), "-o", str(out), src],
                             cwd=str(tmp_path)))
        outputs[name] = out.read_bytes()
        fields = json.loads(stats.read_text())
        assert int(fields["records_in"]) == int(fields["records_out"]) > 30000, fields
        if name == "t1":
            assert int(fields["merge_partitions"]) == 1, fields
        else:
            assert int(fields["merge_partitions"]) > 4, fields
        if name == "t3_m1M":
            assert int(fields["runs_written"]) > 2, fields
        stats.unlink()
    assert outputs["t1"] == outputs["t2"] == outputs["t3_m1M"]
