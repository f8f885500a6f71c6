"""Command-line contract: options parsed as samtools parses them, refusals
that exit 1 with a clear message, and error messages that say where.

Exit codes are checked against samtools' behaviour (these tests also pass
with samtools standing in); message wording is alnsort's own and those tests
are marked alnsort_only. Contract for messages: stderr starts with
"alnsort", names the file, and the line number (SAM) or byte offset (BAM),
and the record number.
"""

from __future__ import annotations

import gzip
import os
import re
import shlex
import subprocess

import harness
import oracle
import pytest
from harness import check_ok, run_alnsort


def _refused(res, what: str) -> str:
    """Exit 1 (not a crash, not 0), nothing on stdout; returns stderr text."""
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, f"{what}: expected exit 1, got {res.returncode}; stderr:\n{err[-2000:]}"
    assert res.stdout == b"", f"{what}: nothing may be written to stdout on failure"
    assert err.strip(), f"{what}: a refusal must say why on stderr"
    return err


def _starts_with_alnsort(err: str, what: str) -> None:
    assert err.lstrip().startswith("alnsort"), f"{what}: stderr must start with 'alnsort':\n{err[:1000]}"


def _bytes_no_pg(tmp_path, args, src, name):
    out = tmp_path / name
    check_ok(run_alnsort([*args, "--no-PG", "-o", str(out), src], cwd=str(tmp_path)))
    return out.read_bytes()


# ---- -m ----------------------------------------------------------------------------

ACCEPTED_M = ["1M", "1048576", "0x100000", "2m", "1024k", "010M", "1G"]  # 010M is octal: 8 MiB
REFUSED_M = ["1000000", "1.5G", "09M", "1K", "0", "abc"]


@pytest.mark.parametrize("value", ACCEPTED_M)
def test_m_accepted(alnsort_bin, inputs, tmp_path, value):
    src = inputs.bam("hdr_v15")
    assert _bytes_no_pg(tmp_path, ["-m", value], src, "m.bam") == _bytes_no_pg(tmp_path, [], src, "d.bam"), (
        f"-m {value} changed the output"
    )


@pytest.mark.parametrize("value", REFUSED_M)
def test_m_refused(alnsort_bin, inputs, tmp_path, value):
    """samtools reads these as < 1 MiB (976K, 1 byte, 0 bytes, ...) and exits 1."""
    out = tmp_path / "out.bam"
    _refused(run_alnsort(["-m", value, "-o", str(out), inputs.sam("hdr_plain")], cwd=str(tmp_path)), f"-m {value}")
    assert not out.exists(), "no output file on a refused command line"


@pytest.mark.alnsort_only
@pytest.mark.parametrize("value", REFUSED_M)
def test_m_refused_message(alnsort_bin, inputs, tmp_path, value):
    """The message names -m and the value as typed (samtools says e.g. '(1 bytes)' for 1.5G)."""
    err = _refused(run_alnsort(["-m", value, inputs.sam("hdr_plain")], cwd=str(tmp_path)), f"-m {value}")
    _starts_with_alnsort(err, f"-m {value}")
    assert "-m" in err and value in err, f"-m {value}: message should quote the option and value:\n{err}"


# ---- threads -------------------------------------------------------------------------


def test_threads_1_is_single_threaded(alnsort_bin, inputs, tmp_path):
    src = inputs.bam("main")
    assert _bytes_no_pg(tmp_path, ["-@", "1", "-m", "1M"], src, "t1.bam") == _bytes_no_pg(
        tmp_path, ["-m", "1M"], src, "t0.bam"
    )


def test_long_threads_option(alnsort_bin, inputs, tmp_path):
    src = inputs.bam("hdr_v15")
    assert _bytes_no_pg(tmp_path, ["--threads", "2"], src, "a.bam") == _bytes_no_pg(tmp_path, ["-@", "2"], src, "b.bam")


# ---- refusals ------------------------------------------------------------------------


@pytest.mark.alnsort_only
def test_stdin_among_several_inputs(alnsort_bin, inputs, tmp_path):
    # Several inputs are sorted as one (tests/diff/test_multi_input.py);
    # standard input can only be the one input.
    src = inputs.sam("hdr_plain")
    _refused(run_alnsort([src, "-"], cwd=str(tmp_path)), "a file and standard input")


@pytest.mark.parametrize(
    "args", [["-O", "cram"], ["-O", "CRAM,level=3"], ["-o", "out.cram"]], ids=["O-cram", "O-CRAM-level", "o-ext"]
)
@pytest.mark.alnsort_only
def test_cram_without_a_reference_refused(alnsort_bin, inputs, tmp_path, monkeypatch, args):
    """CRAM output needs each reference (tests/diff/test_cram.py has the rest):
    with none to be found, the run stops naming it, and leaves no output."""
    monkeypatch.setenv("REF_PATH", str(tmp_path / "no-refs"))
    monkeypatch.delenv("REF_CACHE", raising=False)
    if "-o" not in args:
        args = [*args, "-o", "out.x"]
    err = _refused(run_alnsort([*args, inputs.sam("hdr_plain")], cwd=str(tmp_path)), " ".join(args))
    assert re.search(r"reference \S+ \(M5 [^)]+\) not found", err), f"the refusal should name the reference:\n{err}"
    assert harness.leftover_files(tmp_path, set()) == [], "no output file on refusal"


def test_unknown_option(alnsort_bin, inputs, tmp_path):
    _refused(run_alnsort(["--no-such-option", inputs.sam("hdr_plain")], cwd=str(tmp_path)), "unknown option")


@pytest.mark.alnsort_only
def test_unknown_option_gives_a_hint_not_the_usage(alnsort_bin, inputs, tmp_path):
    """The error and one line pointing at --help; exit 1 as samtools sort (see _refused)."""
    err = _refused(run_alnsort(["--bogus", inputs.sam("hdr_plain")], cwd=str(tmp_path)), "--bogus")
    lines = err.strip().splitlines()
    assert len(lines) == 2, f"expected the error and a hint, got {len(lines)} lines:\n{err}"
    assert lines[0].startswith("alnsort sort:") and "'--bogus'" in lines[0], err
    assert lines[1] == "Try 'alnsort sort --help' for the options.", err


# ---- help, version, top level ----------------------------------------------------------

# samtools 1.24 sort's getopt string and long options (reference section 3):
# every one of them must be documented by `alnsort sort --help`.
SAMTOOLS_SORT_SHORT = "lmnNoOT@tMIKuRwH"
SAMTOOLS_SORT_LONG = [
    "threads", "no-PG", "template-coordinate", "write-index", "output-fmt",
    "output-fmt-option", "input-fmt-option", "reference", "verbosity",
]  # fmt: skip


def _run_top(args: list[str]) -> subprocess.CompletedProcess:
    """`alnsort ARGS` (no `sort` inserted), stdin closed."""
    return subprocess.run(
        [harness.alnsort_path(), *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )


def _help_sections(text: str) -> dict[str, list[str]]:
    """Option names listed in the left column of `sort --help`, per group title."""
    sections: dict[str, list[str]] = {}
    title = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith(":"):
            title = line
            sections[title] = []
        elif line.startswith("  -") or line.startswith("      --"):
            synopsis = line.strip().split("  ")[0]
            sections.setdefault(title, []).extend(
                w for w in re.split(r"[ ,]", synopsis) if w.startswith("-")
            )
    return sections


@pytest.mark.alnsort_only
def test_sort_help_lists_every_samtools_option_and_fits_80_columns(alnsort_bin):
    res = _run_top(["sort", "--help"])
    assert res.returncode == 0 and res.stderr == b"", res.stderr[-500:]
    text = res.stdout.decode()
    long_lines = [ln for ln in text.splitlines() if len(ln) > 80]
    assert not long_lines, f"help lines over 80 columns: {long_lines}"
    listed = {name for names in _help_sections(text).values() for name in names}
    missing = [f"-{c}" for c in SAMTOOLS_SORT_SHORT if f"-{c}" not in listed]
    missing += [f"--{name}" for name in SAMTOOLS_SORT_LONG if f"--{name}" not in listed]
    assert not missing, f"samtools sort options that alnsort sort --help does not list: {missing}"


@pytest.mark.alnsort_only
def test_options_help_calls_unsupported_are_refused(alnsort_bin, inputs, tmp_path):
    """Every option in the 'Not supported yet' group is refused by name, exit 1, no output."""
    text = _run_top(["sort", "--help"]).stdout.decode()
    groups = [names for title, names in _help_sections(text).items() if title.startswith("Not supported yet")]
    assert len(groups) == 1 and groups[0], f"no 'Not supported yet' group in the help:\n{text}"
    values = {"-I": "ref.fa", "-K": "10", "-w": "10", "--reference": "ref.fa", "--input-fmt-option": "filter=mapq>10"}
    for name in groups[0]:
        args = [name, values[name]] if name in values else [name]
        out = tmp_path / "out.bam"
        err = _refused(run_alnsort([*args, "-o", str(out), inputs.sam("hdr_plain")], cwd=str(tmp_path)), name)
        assert "not supported" in err and name in err, f"{name}: {err}"
        assert not out.exists(), f"{name}: no output on a refusal"


@pytest.mark.alnsort_only
def test_top_level_help(alnsort_bin):
    for arg in ["--help", "-h", "help"]:
        res = _run_top([arg])
        assert res.returncode == 0 and res.stderr == b"", f"alnsort {arg}: exit {res.returncode} {res.stderr!r}"
        text = res.stdout.decode()
        for needle in ["samtools sort", "Commands:", "Examples:", "alnsort sort --help", "README.md", "CRAM",
                       "--markdup", "Picard"]:
            assert needle in text, f"alnsort {arg}: help lacks {needle!r}:\n{text}"
        assert max(len(ln) for ln in text.splitlines()) <= 80, f"alnsort {arg}: lines over 80 columns"
    res = _run_top(["help", "sort"])
    assert res.returncode == 0 and "Not supported yet" in res.stdout.decode(), "alnsort help sort = sort --help"


@pytest.mark.alnsort_only
def test_version(alnsort_bin):
    outs = set()
    for arg in ["-V", "--version", "version"]:
        res = _run_top([arg])
        assert res.returncode == 0 and res.stderr == b"", f"alnsort {arg}: exit {res.returncode} {res.stderr!r}"
        assert re.fullmatch(rb"alnsort \d+\.\d+\.\d+\n", res.stdout), f"alnsort {arg}: {res.stdout!r}"
        outs.add(res.stdout)
    assert len(outs) == 1, f"the three spellings disagree: {outs}"


@pytest.mark.alnsort_only
def test_bare_alnsort_is_a_usage_error(alnsort_bin):
    """No command: short usage on stderr, nothing on stdout, exit 2."""
    res = _run_top([])
    err = res.stderr.decode()
    assert res.returncode == 2, f"expected exit 2, got {res.returncode}"
    assert res.stdout == b"", "usage errors print on stderr"
    assert err.startswith("Usage: alnsort sort") and "--help" in err and len(err.splitlines()) <= 3, err


@pytest.mark.alnsort_only
def test_unknown_command_is_a_usage_error(alnsort_bin):
    res = _run_top(["frobnicate", "in.bam"])
    err = res.stderr.decode()
    assert res.returncode == 2, f"expected exit 2, got {res.returncode}"
    assert res.stdout == b"" and "'frobnicate'" in err and "alnsort --help" in err, err


# ---- output format options ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["-u"], ["-l", "0"], ["-l", "1"], ["-l", "9"], ["-O", "BAM,level=1"], ["-O", "bam"], ["-O", "sam"]],
    ids=["u", "l0", "l1", "l9", "O-BAM-level1", "O-bam", "O-sam"],
)
def test_output_format_options(alnsort_bin, inputs, oracle_cache, tmp_path, args):
    src = inputs.bam("main")
    out = tmp_path / "out.x"
    check_ok(run_alnsort([*args, "-o", str(out), src], cwd=str(tmp_path)))
    data = out.read_bytes()
    if args[-1] == "sam":
        assert data.startswith(b"@HD"), "-O sam writes plain SAM"
    else:
        assert data[:2] == b"\x1f\x8b", "BAM output must be BGZF"
        if args in (["-u"], ["-l", "0"]):
            assert b"BAM\x01" in data[:64], "level 0 must store the BAM magic uncompressed"
    harness.assert_same_text(
        oracle.strip_pg(oracle_cache.sorted_text(src, [])), oracle.strip_pg(oracle.view(str(out))), " ".join(args)
    )


def test_temp_prefix_is_cleaned(alnsort_bin, inputs, oracle_cache, tmp_path):
    """-T PREFIX with spills: output right, no temp file left anywhere we can see."""
    src = inputs.bam("main")
    tdir = tmp_path / "tmpdir"
    tdir.mkdir()
    out = tmp_path / "out.bam"
    check_ok(run_alnsort(["-m", "1M", "-T", str(tdir / "pref"), "-o", str(out), src], cwd=str(tmp_path)))
    assert harness.leftover_files(tdir, set()) == [], "temp files left in the -T directory"
    assert harness.leftover_files(tmp_path, {"out.bam", "tmpdir"}) == []
    harness.assert_same_text(
        oracle.strip_pg(oracle_cache.sorted_text(src, [])), oracle.strip_pg(oracle.view(str(out))), "-T"
    )


def test_verbosity_0_is_quiet(alnsort_bin, inputs, tmp_path):
    """--verbosity 0 silences progress/merge chatter (samtools 1.22+ does)."""
    res = run_alnsort(
        ["--verbosity", "0", "-m", "1M", "-o", str(tmp_path / "o.bam"), inputs.bam("main")], cwd=str(tmp_path)
    )
    check_ok(res)
    assert res.stderr == b"", f"stderr not empty: {res.stderr[:500]!r}"


# ---- errors say where -------------------------------------------------------------------


def _bad_sam(tmp_path) -> str:
    path = tmp_path / "bad.sam"
    path.write_text(
        "@HD\tVN:1.6\n@SQ\tSN:c1\tLN:1000\n"
        "r1\t0\tc1\t10\t60\t4M\t*\t0\t0\tACGT\tIIII\n"
        "r2\t0\tc1\t20\t60\t4M\t*\t0\t0\tACGT\tIIII\n"
        "r3\tabc\tc1\t30\t60\t4M\t*\t0\t0\tACGT\tIIII\n"  # line 5, record 3: FLAG not a number
        "r4\t0\tc1\t40\t60\t4M\t*\t0\t0\tACGT\tIIII\n"
    )
    return str(path)


def test_malformed_sam_fails(alnsort_bin, tmp_path):
    _refused(run_alnsort([_bad_sam(tmp_path)], cwd=str(tmp_path)), "malformed SAM")


@pytest.mark.alnsort_only
def test_malformed_sam_message(alnsort_bin, tmp_path):
    path = _bad_sam(tmp_path)
    err = _refused(run_alnsort([path], cwd=str(tmp_path)), "malformed SAM")
    _starts_with_alnsort(err, "malformed SAM")
    assert "bad.sam" in err, f"message must name the file:\n{err}"
    assert re.search(r"line\D{0,3}5\b", err), f"message must give line 5:\n{err}"
    assert re.search(r"record[^\n\d]{0,12}3\b", err), f"message must give record 3:\n{err}"


def _truncated_bam(inputs, tmp_path) -> str:
    data = open(inputs.bam("main"), "rb").read()
    path = tmp_path / "trunc.bam"
    path.write_bytes(data[: len(data) // 2])
    return str(path)


def test_truncated_bam_fails(alnsort_bin, inputs, tmp_path):
    out = tmp_path / "out.bam"
    _refused(run_alnsort(["-o", str(out), _truncated_bam(inputs, tmp_path)], cwd=str(tmp_path)), "truncated BAM")


@pytest.mark.alnsort_only
def test_truncated_bam_message(alnsort_bin, inputs, tmp_path):
    err = _refused(
        run_alnsort(["-o", str(tmp_path / "o.bam"), _truncated_bam(inputs, tmp_path)], cwd=str(tmp_path)),
        "truncated BAM",
    )
    _starts_with_alnsort(err, "truncated BAM")
    assert "trunc.bam" in err, f"message must name the file:\n{err}"
    assert re.search(r"(offset|byte)\D{0,12}\d+", err, re.I), f"message must give a byte offset:\n{err}"
    assert re.search(r"record", err, re.I), f"message must give the record number:\n{err}"


def test_corrupt_bgzf_block_fails(alnsort_bin, inputs, tmp_path):
    """A flipped byte inside compressed data: CRC32/inflate error, exit 1."""
    data = bytearray(open(inputs.bam("main"), "rb").read())
    data[len(data) // 3] ^= 0xFF
    path = tmp_path / "corrupt.bam"
    path.write_bytes(bytes(data))
    _refused(run_alnsort(["-o", str(tmp_path / "o.bam"), str(path)], cwd=str(tmp_path)), "corrupt BAM")


def test_missing_input(alnsort_bin, tmp_path):
    err = _refused(run_alnsort([str(tmp_path / "nope.bam")], cwd=str(tmp_path)), "missing input")
    assert "nope.bam" in err, f"message must name the file:\n{err}"


def test_gzip_not_bgzf_input(alnsort_bin, inputs, tmp_path):
    """Plain-gzip SAM is readable by htslib; at least it must not crash."""
    path = tmp_path / "in.sam.gz"
    path.write_bytes(gzip.compress(open(inputs.sam("hdr_plain"), "rb").read()))
    res = run_alnsort(["-o", str(tmp_path / "o.bam"), str(path)], cwd=str(tmp_path))
    assert res.returncode in (0, 1), f"exit {res.returncode} (crash?): {res.stderr[-500:]!r}"
    if res.returncode == 0:
        harness.assert_same_text(
            oracle.strip_pg(oracle.samtools("sort", "-O", "SAM", inputs.sam("hdr_plain")).stdout.decode()),
            oracle.strip_pg(oracle.view(str(tmp_path / "o.bam"))),
            "gzip input",
        )


def test_unwritable_output(alnsort_bin, inputs, tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "out.bam"
    err = _refused(run_alnsort(["-o", str(target), inputs.sam("hdr_plain")], cwd=str(tmp_path)), "bad -o")
    # samtools fails on its temp files first (they go beside the output); naming
    # the missing directory or the output file are both clear.
    assert "no/such/dir" in err, f"message must name the output path:\n{err}"
    assert not os.path.exists(target)


def _generate(what: str) -> str:
    res = _run_top(["generate", what])
    assert res.returncode == 0 and res.stderr == b"", f"alnsort generate {what}: {res.returncode} {res.stderr!r}"
    return res.stdout.decode()


def _long_options(help_text: str) -> set[str]:
    """The long options a --help lists, those under 'Not supported yet' left out."""
    supported = help_text.split("Not supported yet")[0]
    return set(re.findall(r"^\s+(?:-., )?(--[a-zA-Z][a-zA-Z0-9-]*)", supported, re.M))


def test_generated_man_page_renders_cleanly_and_lists_every_option():
    """`alnsort generate man` is roff that groff renders without a warning
    and that documents every option `sort --help` and `merge --help` list."""
    import shutil
    groff = shutil.which("groff")
    assert groff, "groff is needed to render the man page (scripts/test.sh installs groff-base)"
    man = _generate("man")
    res = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z"], input=man.encode(), capture_output=True)
    assert res.returncode == 0 and res.stderr == b"", res.stderr.decode()
    text = subprocess.run([groff, "-man", "-Tascii", "-P-cbou"], input=man.encode(),
                          capture_output=True, check=True).stdout.decode()
    flat = re.sub(r"-\n\s*", "-", text)
    for cmd in ("sort", "merge"):
        for opt in _long_options(_run_top([cmd, "--help"]).stdout.decode()):
            assert opt in flat, f"the man page lacks {cmd}'s {opt}"
    for needle in ("alnsort generate", "CRAM", "Picard", "EXIT STATUS"):
        assert needle in flat, f"the man page lacks {needle!r}"


def test_generated_bash_completion_completes_commands_and_options(tmp_path):
    """The bash script, sourced, completes the command, then sort's and
    merge's options (refused ones left out), then files after -o."""
    script = tmp_path / "alnsort.bash"
    script.write_text(_generate("bash"))
    (tmp_path / "out.bam").write_bytes(b"")

    def complete(*words: str) -> list[str]:
        words_q = " ".join(f"'{w}'" for w in words)
        prog = (f"source '{script}'; COMP_WORDS=(alnsort {words_q}); COMP_CWORD={len(words)}; "
                "_alnsort; printf '%s\\n' \"${COMPREPLY[@]}\"")
        res = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        return [w for w in res.stdout.splitlines() if w]

    assert set(complete("me")) == {"merge"}
    assert {"sort", "merge", "generate", "help", "version"} <= set(complete(""))
    assert "--template-coordinate" in complete("sort", "--templ")
    assert {"--markdup", "--max-memory"} <= set(complete("sort", "--ma"))
    assert "--reference" in complete("merge", "--ref")
    assert complete("sort", "-o", "ou") == ["out.bam"]
    assert set(complete("generate", "")) == {"man", "bash", "zsh", "fish"}
    refused = _run_top(["sort", "--help"]).stdout.decode().split("Not supported yet")[1]
    for opt in re.findall(r"^\s+(?:-., )?(--[a-z][a-z0-9-]*)", refused, re.M):
        assert opt not in complete("sort", opt), f"bash completes the refused {opt}"


def _shell(name: str) -> str:
    import shutil
    path = shutil.which(name)
    assert path, f"{name} is needed to exercise its completion (scripts/test.sh installs it with apt-get)"
    return path


# Drives an interactive zsh in a pseudo-terminal (zsh/zpty): the setup
# line ($1: the generated script put in $fpath, or sourced after compinit),
# then a command line ($2) and a TAB; prints what the terminal showed after
# the TAB (read for 3 s, or until it shows $3).
ZPTY_DRIVER = r"""
zmodload zsh/zpty
zpty -b z zsh -f -i
zpty -w z "PS1='> '; $1; print SOURCED"
acc=""
for i in {1..100}; do
  if zpty -r -t z chunk; then acc+=$chunk; else sleep 0.05; fi
  [[ $acc == *SOURCED*'> '* ]] && break
done
zpty -w -n z "$2"$'\t'
acc=""
for i in {1..60}; do
  if zpty -r -t z chunk; then acc+=$chunk; else sleep 0.05; fi
  [[ $acc == *"$3"* ]] && break
done
zpty -d z
print -r -- "$acc"
"""


def test_generated_zsh_completion_completes_in_zsh(tmp_path):
    """zsh (interactive, in a pseudo-terminal, compinit loaded) completes
    with the generated script, installed as the README says (a file named
    _alnsort in a directory of $fpath, autoloaded at the first TAB) and
    sourced: a TAB after the typed words finishes the command, an option, a
    file after -o."""
    zsh = _shell("zsh")
    zfunc = tmp_path / "zfunc"
    zfunc.mkdir()
    script = zfunc / "_alnsort"
    script.write_text(_generate("zsh"))
    setups = {"fpath": f"fpath=({zfunc} $fpath); autoload -U compinit; compinit -u -D",
              "sourced": f"autoload -U compinit; compinit -u -D; source {script}"}
    driver = tmp_path / "drive.zsh"
    driver.write_text(ZPTY_DRIVER)
    (tmp_path / "out.bam").write_bytes(b"")

    def after_tab(setup: str, line: str, want: str) -> str:
        res = subprocess.run([zsh, "-f", str(driver), setup, line, want], capture_output=True, text=True,
                             cwd=tmp_path, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "command not found" not in res.stdout, res.stdout
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\r]", "", res.stdout)

    for typed, want in [("alnsort sort --templ", "alnsort sort --template-coordinate"),
                        ("alnsort me", "alnsort merge"),
                        ("alnsort sort -o ou", "alnsort sort -o out.bam"),
                        ("alnsort merge --refe", "alnsort merge --reference")]:
        for how, setup in setups.items():
            shown = after_tab(setup, typed, want)
            assert want in shown, (f"zsh ({how}): {typed!r}+TAB did not give {want!r}; "
                                   f"the terminal showed:\n{shown[-600:]}")


def test_generated_fish_completion_completes_in_fish(tmp_path):
    """fish's own completion engine (`complete -C`) with the generated
    script: commands, options with the first sentence of their help, values
    of `generate`, no refused option; every long option of sort and merge."""
    fish = _shell("fish")
    script = tmp_path / "alnsort.fish"
    script.write_text(_generate("fish"))

    def complete(line: str) -> dict[str, str]:
        res = subprocess.run([fish, "--no-config", "-c", f"source {script}; complete -C {shlex.quote(line)}"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert res.returncode == 0 and not res.stderr, res.stderr
        return dict((ln.split("\t", 1) + [""])[:2] for ln in res.stdout.splitlines() if ln)

    assert set(complete("alnsort me")) == {"merge"}
    templ = complete("alnsort sort --templ")
    assert list(templ) == ["--template-coordinate"] and templ["--template-coordinate"].startswith("Sort by"), templ
    assert set(complete("alnsort generate ")) == {"man", "bash", "zsh", "fish"}
    for cmd in ("sort", "merge"):
        offered = complete(f"alnsort {cmd} --")
        help_text = _run_top([cmd, "--help"]).stdout.decode()
        for opt in _long_options(help_text):
            assert opt in offered, f"fish does not complete {cmd}'s {opt}"
        refused = help_text.split("Not supported yet")[1] if "Not supported yet" in help_text else ""
        for opt in re.findall(r"^\s+(?:-., )?(--[a-z][a-z0-9-]*)", refused, re.M):
            assert opt not in offered, f"fish completes the refused {opt}"


def test_generate_refuses_an_unknown_shell():
    res = _run_top(["generate", "tcsh"])
    assert res.returncode == 2 and b"man, bash, zsh, fish" in res.stderr
