"""`alnsort sort --resume DIR` (issue 39): a sort killed at any moment and run
again with the same command line writes the same output bytes (and index)
as a sort never interrupted, reading the input only from where the kept runs
end; a manifest that does not match the rerun, a kept run that fails its
checksum, standard input not wholly kept, and --markdup are refused by name.

Kills are made deterministic with the test hooks of docs/resume.md
(`ALNSORT_TEST_KILL_AFTER_RUNS=N`: SIGKILL once the process has kept N runs;
`ALNSORT_TEST_KILL_AT=merge|write`; `ALNSORT_TEST_KILL_AFTER_OUTPUT=N`: once
the output is kept on disk N times, every `ALNSORT_TEST_OUTPUT_STEP` bytes),
plus a few SIGKILLs and SIGTERMs at
timed moments. The inputs are generated with many equal keys (a tie window
of a few hundred positions), records longer than a BGZF block, and are
sorted with `-m 1M` so that there are dozens of runs and background merges
of runs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import resource
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gen  # noqa: E402
import harness  # noqa: E402

KILL_AFTER = "ALNSORT_TEST_KILL_AFTER_RUNS"
KILL_AT = "ALNSORT_TEST_KILL_AT"
KILL_AFTER_OUTPUT = "ALNSORT_TEST_KILL_AFTER_OUTPUT"
OUTPUT_STEP = "ALNSORT_TEST_OUTPUT_STEP"
HOOKS = (KILL_AFTER, KILL_AT, KILL_AFTER_OUTPUT, OUTPUT_STEP)
# --no-PG: the outputs compared come from command lines that differ (paths).
MEM = ["-m", "1M", "--no-PG"]


def env_without_hooks(env_add: dict | None = None) -> dict:
    """This process's environment without any test hook, then `env_add`."""
    env = dict(os.environ)
    for hook in HOOKS:
        env.pop(hook, None)
    env.update(env_add or {})
    return env


def sort(args: list[str], *, env_add: dict | None = None, stdin: bytes | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    env = env_without_hooks(env_add)
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run([harness.alnsort_path(), "sort", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=timeout, **feed)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    harness.check_ok(res)
    return res


def killed(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == -signal.SIGKILL, (
        f"expected the test hook's SIGKILL, got exit {res.returncode}: "
        + res.stderr.decode(errors="replace")[-2000:]
    )


def kept_runs(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("kept-*.alnrun"))


def manifest_field(d: Path, key: str) -> list[str]:
    return [line.split("\t")[1:] for line in (d / "manifest").read_text().splitlines()
            if line.split("\t")[0] == key]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A SAM of ~10k templates with many ties and long records, the same as
    BAM (written by alnsort itself at level 1, unsorted: -n of an input
    written in its own order keeps it readable as any BAM)."""
    d = tmp_path_factory.mktemp("resume_inputs")
    sam = d / "in.sam"
    sam.write_text(gen.generate(gen.Params(seed=39, n_templates=9000, n_long_reads=3, n_huge_aux=2)))
    bam = d / "in.bam"
    import pysam

    with pysam.AlignmentFile(str(sam), "r") as src, pysam.AlignmentFile(str(bam), "wb", template=src) as dst:
        for r in src:
            dst.write(r)
    return {"sam": sam, "bam": bam}


@pytest.fixture(scope="module")
def expected(inputs, tmp_path_factory) -> dict[tuple[str, str], tuple[bytes, bytes | None]]:
    """Uninterrupted outputs, without --resume, per (input kind, order)."""
    d = tmp_path_factory.mktemp("resume_expected")
    out = {}
    for kind, path in inputs.items():
        for order, opts in (("coord", ["--write-index"]), ("name", ["-n"])):
            o = d / f"{kind}.{order}.bam"
            ok(sort([*MEM, *opts, "-o", str(o), str(path)]))
            idx = Path(str(o) + ".csi")
            out[(kind, order)] = (o.read_bytes(), idx.read_bytes() if idx.exists() else None)
    return out


def order_opts(order: str) -> list[str]:
    return ["--write-index"] if order == "coord" else ["-n"]


def check_same(out: Path, want: tuple[bytes, bytes | None], what: str) -> None:
    got = out.read_bytes()
    assert got == want[0], f"{what}: the resumed output differs from the uninterrupted one ({len(got)} vs {len(want[0])} bytes)"
    if want[1] is not None:
        assert Path(str(out) + ".csi").read_bytes() == want[1], f"{what}: the resumed index differs"


@pytest.mark.parametrize("kind", ["bam", "sam"])
@pytest.mark.parametrize("order", ["coord", "name"])
@pytest.mark.parametrize("after", [1, 3, 7])
def test_kill_after_runs_then_resume_gives_the_same_bytes(tmp_path, inputs, expected, kind, order, after):
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, *order_opts(order), "--resume", str(rd), "-o", str(out), str(inputs[kind])]
    killed(sort(args, env_add={KILL_AFTER: str(after)}))
    assert len(kept_runs(rd)) >= after
    [[records]] = manifest_field(rd, "records")
    assert int(records) > 0
    # BAM is read again from the virtual offset of the batch holding the
    # next record (at or before it); SAM from its start.
    [[voffset, first]] = manifest_field(rd, "restart")
    if kind == "bam":
        assert voffset != "-" and 0 <= int(first) <= int(records), (voffset, first, records)
    else:
        assert voffset == "-"
    assert not out.exists()
    stats = tmp_path / "stats.json"
    ok(sort([*args, "--stats-json", str(stats)]))
    check_same(out, expected[(kind, order)], f"{kind} {order} killed after {after} runs")
    assert not rd.exists(), "DIR is removed when the sort succeeds"
    assert not list(tmp_path.glob(".out.bam.alnsort-*")), "no pending output left"
    # The rerun did not sort the kept records again: it read fewer record bytes.
    report = json.loads(stats.read_text())
    full = tmp_path / "full.json"
    ok(sort([*MEM, *order_opts(order), "-o", str(tmp_path / "full.bam"), "--stats-json", str(full), str(inputs[kind])]))
    whole = json.loads(full.read_text())
    assert report["records_in"] == whole["records_in"]
    assert report["bytes_in"] < whole["bytes_in"], (report["bytes_in"], whole["bytes_in"])


@pytest.mark.parametrize("phase", ["merge", "write"])
def test_kill_while_merging_or_writing_then_resume(tmp_path, inputs, expected, phase):
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "-@", "2", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    killed(sort(args, env_add={KILL_AT: phase}))
    assert kept_runs(rd)
    if phase == "write":
        assert [p for p in tmp_path.glob(".out.bam.alnsort-*") if p.stat().st_size > 0], \
            "the kill came while a partial output was pending"
    ok(sort(args))
    check_same(out, expected[("bam", "coord")], f"killed at {phase}")
    assert not list(tmp_path.glob(".out.bam*.alnsort-*")), "the partial output was discarded"
    assert not rd.exists()


def test_kill_after_the_manifest_is_removed_then_rerun(tmp_path, inputs, expected):
    """Killed while a finished sort clears DIR, after the manifest went and
    before the kept runs did: the rerun sorts afresh (it never reads runs
    a manifest does not name) to the same bytes, and clears DIR."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    killed(sort(args, env_add={KILL_AT: "finish"}))
    assert kept_runs(rd), "the kill came before the kept runs were removed"
    assert not (rd / "manifest").exists(), "the manifest goes first"
    ok(sort(args))
    check_same(out, expected[("bam", "coord")], "killed while clearing DIR")
    assert not rd.exists()


def test_killed_again_and_again_then_resumed(tmp_path, inputs, expected):
    """Each rerun is killed after one more run kept: the runs of several
    processes are merged in input order."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "-n", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    counts = []
    for _ in range(4):
        killed(sort(args, env_add={KILL_AFTER: "2"}))
        counts.append(len(kept_runs(rd)))
    assert counts == sorted(counts) and counts[-1] > counts[0], counts
    ok(sort(args))
    check_same(out, expected[("bam", "name")], "killed four times")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_timed_kills_then_resume(tmp_path, inputs, expected, sig):
    rng = random.Random(int(sig))
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "--resume", str(rd), "-o", str(out), str(inputs["sam"])]
    # How long a whole run takes here, to spread the kills over it.
    t0 = time.monotonic()
    ok(sort([*MEM, "--write-index", "-o", str(tmp_path / "timing.bam"), str(inputs["sam"])]))
    whole = time.monotonic() - t0
    for _ in range(3):
        p = subprocess.Popen([harness.alnsort_path(), "sort", *args], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.1, 0.9) * whole)
        p.send_signal(sig)
        p.communicate(timeout=120)
    ok(sort(args))
    check_same(out, expected[("sam", "coord")], f"timed {sig.name}s")
    assert not rd.exists()


def test_standard_input_resumes_once_all_is_kept(tmp_path, inputs, expected):
    data = inputs["bam"].read_bytes()
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "--resume", str(rd), "-o", str(out), "-"]
    # Killed while reading: refused on rerun, the runs kept, the remedy named.
    killed(sort(args, env_add={KILL_AFTER: "2"}, stdin=data))
    r = sort(args, stdin=data)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "standard input" in err and f"remove {rd}" in err, err
    assert kept_runs(rd)
    # Every record kept, killed while merging: the rerun reads no input.
    import shutil

    shutil.rmtree(rd)
    killed(sort(args, env_add={KILL_AT: "merge"}, stdin=data))
    ok(sort(args, stdin=b""))
    check_same(out, expected[("bam", "coord")], "standard input, all kept")


def refused(res: subprocess.CompletedProcess, *needles: str) -> str:
    assert res.returncode not in (0, -signal.SIGKILL), res.returncode
    err = res.stderr.decode(errors="replace")
    for n in needles:
        assert n in err, f"{n!r} not in: {err}"
    return err


@pytest.fixture
def half_done(tmp_path, inputs):
    """A copy of the BAM input and a DIR holding the runs of a sort of it
    killed after 3 runs."""
    src = tmp_path / "in.bam"
    src.write_bytes(inputs["bam"].read_bytes())
    rd = tmp_path / "resume"
    args = [*MEM, "--resume", str(rd), "-o", str(tmp_path / "out.bam"), str(src)]
    killed(sort(args, env_add={KILL_AFTER: "3"}))
    return src, rd, args


def test_changed_input_is_refused(half_done):
    src, rd, args = half_done
    data = bytearray(src.read_bytes())
    data[-100] ^= 1
    src.write_bytes(bytes(data))
    refused(sort(args), "different sort", "input", f"remove {rd}")
    assert kept_runs(rd), "the kept runs stay"


def test_other_input_is_refused(half_done, inputs):
    src, rd, args = half_done
    refused(sort([*args[:-1], str(inputs["bam"])]), "input path", f"remove {rd}")


def test_other_options_are_refused(half_done):
    src, rd, args = half_done
    refused(sort(["-n", *args]), "option order", f"remove {rd}")
    refused(sort(["-l", "1", *args]), "option level")
    refused(sort(["-O", "sam", *args]), "option format")


def test_other_threads_and_memory_resume(half_done, expected, tmp_path):
    """-@ and -m do not change the output, so they may differ."""
    src, rd, args = half_done
    ok(sort(["-@", "3", "-m", "3M", *args]))
    # Same bytes as the uninterrupted sort without an index.
    plain = tmp_path / "plain.bam"
    ok(sort([*MEM, "-o", str(plain), str(src)]))
    assert (tmp_path / "out.bam").read_bytes() == plain.read_bytes()


def test_kept_run_failing_its_checksum_is_refused_by_name(half_done):
    src, rd, args = half_done
    run = rd / kept_runs(rd)[1]
    data = bytearray(run.read_bytes())
    data[len(data) // 2] ^= 0x40
    run.write_bytes(bytes(data))
    refused(sort(args), str(run), "checksum")
    run.unlink()
    refused(sort(args), str(run), "cannot be read")


def test_torn_manifest_is_refused(half_done):
    src, rd, args = half_done
    m = rd / "manifest"
    m.write_text(m.read_text()[:-5])
    refused(sort(args), "manifest", "cut short", f"remove {rd}")


def test_failure_message_says_how_to_resume(half_done, tmp_path):
    src, rd, args = half_done
    # An output directory that vanished makes the rerun fail after it read.
    bad = [*args[:-3], "-o", str(tmp_path / "gone" / "out.bam"), str(src)]
    err = refused(sort(bad), "run the same command again to resume", f"remove {rd} to start afresh")
    assert "gone" in err, err
    assert rd.exists() and kept_runs(rd)


def test_markdup_and_several_inputs_and_stdout_are_refused(tmp_path, inputs):
    rd = tmp_path / "resume"
    refused(sort(["--resume", str(rd), "--markdup", "-o", str(tmp_path / "o.bam"), str(inputs["bam"])]),
            "--resume", "--markdup")
    refused(sort(["--resume", str(rd), "-o", str(tmp_path / "o.bam"), str(inputs["bam"]), str(inputs["sam"])]),
            "--resume", "one input")
    refused(sort(["--resume", str(rd), str(inputs["bam"])]), "--resume", "output file")


def test_files_of_others_in_dir_are_kept(tmp_path, inputs, expected):
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    rd.mkdir()
    (rd / "notes.txt").write_text("mine")
    args = [*MEM, "-n", "--resume", str(rd), "-o", str(out), str(inputs["sam"])]
    killed(sort(args, env_add={KILL_AFTER: "2"}))
    ok(sort(args))
    check_same(out, expected[("sam", "name")], "DIR with a file of its own")
    assert sorted(p.name for p in rd.iterdir()) == ["notes.txt"]


def test_help_names_the_option():
    r = subprocess.run([harness.alnsort_path(), "sort", "--help"], capture_output=True)
    assert b"--resume DIR" in r.stdout + r.stderr



# Output checkpoints every 20 kB: the thread that makes them takes the
# latest waiting, so a loaded machine makes fewer than the 150 or so steps
# of these outputs, but always more than the 6 the tests wait for.
STEP = {OUTPUT_STEP: "20000"}


def kept_output(rd: Path) -> tuple[int, int]:
    """The manifest's (blocks, bytes) of the kept output."""
    [[blocks, nbytes, _crc, _header]] = manifest_field(rd, "output")
    return int(blocks), int(nbytes)


@pytest.mark.parametrize("kind,order", [("bam", "coord"), ("sam", "coord"), ("bam", "name")])
@pytest.mark.parametrize("after", [1, 3, 6])
def test_killed_writing_the_output_goes_on_from_the_kept_output(tmp_path, inputs, expected, kind, order, after):
    """Killed in the final merge after the output was kept N times (1, 3, 6): the
    rerun takes DIR/output.partial as its output (the same file, not a
    copy) and writes the same bytes, index and flagstat as a sort never
    interrupted."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    fs = tmp_path / "out.flagstat"
    args = [*MEM, *order_opts(order), "-@", "2", "--flagstat", str(fs), "--resume", str(rd),
            "-o", str(out), str(inputs[kind])]
    killed(sort(args, env_add={**STEP, KILL_AFTER_OUTPUT: str(after)}))
    blocks, nbytes = kept_output(rd)
    want = expected[(kind, order)][0]
    assert 0 < nbytes < len(want), (nbytes, len(want))
    partial = rd / "output.partial"
    assert partial.stat().st_size >= nbytes
    assert partial.read_bytes()[:nbytes] == want[:nbytes], "the kept bytes are the output's start"
    inode = partial.stat().st_ino
    ok(sort(args, env_add=STEP))
    check_same(out, expected[(kind, order)], f"{kind} {order} killed after {after} output checkpoints")
    assert out.stat().st_ino == inode, "the rerun went on in the kept file instead of writing anew"
    plain_fs = tmp_path / "plain.flagstat"
    ok(sort([*MEM, *order_opts(order), "--flagstat", str(plain_fs), "-o", str(tmp_path / "plain.bam"),
             str(inputs[kind])]))
    assert fs.read_text() == plain_fs.read_text()
    assert not rd.exists(), "DIR (the kept output too) is removed when the sort succeeds"
    assert not list(tmp_path.glob(".out.bam*.alnsort-*"))


def test_killed_writing_the_output_again_and_again(tmp_path, inputs, expected):
    """Each rerun is killed after keeping the output twice more: each goes
    on from the last kept output."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    kept = []
    for _ in range(3):
        killed(sort(args, env_add={**STEP, KILL_AFTER_OUTPUT: "2"}))
        kept.append(kept_output(rd)[1])
    assert kept == sorted(kept) and kept[0] < kept[-1], kept
    ok(sort(args, env_add=STEP))
    check_same(out, expected[("bam", "coord")], "killed three times while writing")


@pytest.fixture
def output_half_done(tmp_path, inputs):
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    killed(sort(args, env_add={**STEP, KILL_AFTER_OUTPUT: "6"}))
    return rd, out, args


def test_damaged_kept_output_is_written_again(output_half_done, expected):
    """A kept output whose bytes fail their checksum, or shorter than the
    manifest says, is not used (said on standard error, by name): the
    output is written from its start, to the same bytes."""
    rd, out, args = output_half_done
    partial = rd / "output.partial"
    blocks, nbytes = kept_output(rd)
    data = bytearray(partial.read_bytes())
    data[nbytes // 2] ^= 0x10
    partial.write_bytes(bytes(data))
    r = ok(sort(args))
    err = r.stderr.decode()
    assert str(partial) in err and "checksum" in err and "written again from its start" in err, err
    check_same(out, expected[("bam", "coord")], "damaged kept output")


def test_short_kept_output_is_written_again(output_half_done, expected):
    rd, out, args = output_half_done
    partial = rd / "output.partial"
    blocks, nbytes = kept_output(rd)
    os.truncate(partial, nbytes - 1)
    r = ok(sort(args))
    err = r.stderr.decode()
    assert "shorter than" in err, err
    check_same(out, expected[("bam", "coord")], "short kept output")


def test_kept_output_under_another_header_is_written_again(tmp_path, inputs):
    """Without --no-PG the header holds the command line: a rerun with
    another -@ writes another header, so the kept output is not its start.
    It is written again, and equals a sort never interrupted of the
    rerun's command line."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    base = ["-m", "1M", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    killed(sort(["-@", "1", *base], env_add={**STEP, KILL_AFTER_OUTPUT: "5"}))
    assert kept_output(rd)[1] > 0
    r = ok(sort(["-@", "2", *base]))
    assert "another header" in r.stderr.decode(), r.stderr.decode()
    resumed = out.read_bytes()
    ok(sort(["-@", "2", *base]))
    assert resumed == out.read_bytes()


@pytest.fixture(scope="module")
def reference(inputs, tmp_path_factory) -> Path:
    """A FASTA for the generated input's references (random bases: the
    records then differ from it, as CRAM must encode)."""
    d = tmp_path_factory.mktemp("resume_ref")
    rng = random.Random(39)
    fa = d / "ref.fa"
    with fa.open("w") as f:
        for line in inputs["sam"].read_text().splitlines():
            if not line.startswith("@"):
                break
            if line.startswith("@SQ"):
                tags = dict(t.split(":", 1) for t in line.split("\t")[1:])
                seq = "".join(rng.choice("ACGT") for _ in range(int(tags["LN"])))
                f.write(f">{tags['SN']}\n")
                for i in range(0, len(seq), 60):
                    f.write(seq[i:i + 60] + "\n")
    return fa


@pytest.mark.parametrize("kill", ["runs", "write"])
def test_cram_output_with_an_index_resumes_to_the_same_bytes(tmp_path, inputs, reference, kill):
    """CRAM output (written whole again by a rerun, docs/resume.md) and its
    .crai: killed while reading or while the output is written, the rerun
    gives the uninterrupted bytes."""
    opts = [*MEM, "-O", "cram", "--reference", str(reference), "--write-index"]
    want = tmp_path / "want.cram"
    ok(sort([*opts, "-o", str(want), str(inputs["bam"])]))
    rd, out = tmp_path / "resume", tmp_path / "out.cram"
    args = [*opts, "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    hook = {KILL_AFTER: "3"} if kill == "runs" else {KILL_AT: "write"}
    killed(sort(args, env_add={**STEP, **hook}))
    assert not (rd / "output.partial").exists(), "CRAM output is not kept"
    ok(sort(args, env_add=STEP))
    assert out.read_bytes() == want.read_bytes(), f"CRAM killed at {kill}"
    assert Path(str(out) + ".crai").read_bytes() == Path(str(want) + ".crai").read_bytes()
    assert not rd.exists()


def test_sigterm_while_writing_keeps_the_output_for_the_rerun(tmp_path, inputs, expected):
    """SIGTERM once the output is kept: alnsort cleans up what it must
    (the pending output beside -o) and keeps DIR, its kept output
    included; the rerun goes on in that file to the same bytes."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "-@", "1", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    env = env_without_hooks({OUTPUT_STEP: "20000"})
    p = subprocess.Popen([harness.alnsort_path(), "sort", *args], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        m = rd / "manifest"
        if m.exists() and "\noutput\t" in m.read_text(errors="replace"):
            break
        time.sleep(0.002)
    if p.poll() is not None:
        pytest.fail("the sort ended before its output was kept once: the test input is too small")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0, "SIGTERM ends the sort"
    blocks, nbytes = kept_output(rd)
    partial = rd / "output.partial"
    assert partial.exists() and partial.stat().st_size >= nbytes > 0
    assert not list(tmp_path.glob(".out.bam*.alnsort-*")), "the pending output beside -o is removed"
    inode = partial.stat().st_ino
    ok(sort(args, env_add={OUTPUT_STEP: "20000"}))
    check_same(out, expected[("bam", "coord")], "SIGTERM while writing")
    assert out.stat().st_ino == inode


def test_killed_after_the_output_is_in_place_then_rerun(tmp_path, inputs, expected):
    """Killed once the output (kept along the way) is renamed into place,
    before DIR is cleared: the rerun does not go on in that file (it is the
    file at -o), writes the output again and replaces it by its rename;
    no pending file of either run is left (--flagstat's included)."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    fs = tmp_path / "out.flagstat"
    args = [*MEM, "--write-index", "--flagstat", str(fs), "--resume", str(rd), "-o", str(out),
            str(inputs["bam"])]
    killed(sort(args, env_add={**STEP, KILL_AT: "committed"}))
    assert out.read_bytes() == expected[("bam", "coord")][0]
    assert (rd / "manifest").exists() and kept_output(rd)[1] > 0
    first = out.stat().st_ino
    r = ok(sort(args, env_add=STEP))
    assert "renamed into place by the run that was killed" in r.stderr.decode(), r.stderr.decode()
    check_same(out, expected[("bam", "coord")], "killed after the rename")
    assert out.stat().st_ino != first, "the file at -o was replaced, not written in place"
    assert not rd.exists()
    assert not [p.name for p in tmp_path.iterdir() if ".alnsort-" in p.name]


def _fsize_limit(limit: int):
    """RLIMIT_FSIZE in the child, SIGXFSZ ignored: a write that crosses
    `limit` fails with EFBIG, as a write to a full disk fails with ENOSPC."""
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return pre


@pytest.mark.parametrize("where,limit", [("runs", 96 << 10), ("output", 1 << 20)])
def test_disk_full_then_rerun_gives_the_same_bytes(tmp_path, inputs, expected, where, limit):
    """The disk fills (a file-size limit, the same for every file) while
    the first run is written (runs here are ~680 KB each, so none fits), or
    while the output is (the runs fit, the output's first MiB is kept): a
    clear error, DIR kept with its manifest and what was durable before the
    failure; the same command, with room again, resumes to the bytes and
    index of a sort never interrupted."""
    rd, out = tmp_path / "resume", tmp_path / "out.bam"
    args = [*MEM, "--write-index", "-@", "2", "--resume", str(rd), "-o", str(out), str(inputs["bam"])]
    env = env_without_hooks({OUTPUT_STEP: "20000"})
    res = subprocess.run([harness.alnsort_path(), "sort", *args], stdin=subprocess.DEVNULL,
                         capture_output=True, env=env, timeout=300, preexec_fn=_fsize_limit(limit))
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 1, f"exit {res.returncode}: {err[-2000:]}"
    assert "File too large" in err and "run the same command again to resume" in err, err[-2000:]
    assert not out.exists(), "nothing at -o after a failed sort"
    assert (rd / "manifest").is_file(), "the manifest is kept for the rerun"
    if where == "runs":
        assert not kept_runs(rd), "no run fits, none is kept"
        assert not manifest_field(rd, "output"), "the output was not started"
    else:
        assert kept_runs(rd), "the runs fit and are kept"
        blocks, nbytes = kept_output(rd)
        assert 0 < nbytes <= limit
    ok(sort(args, env_add={OUTPUT_STEP: "20000"}))
    check_same(out, expected[("bam", "coord")], f"disk full while writing the {where}")
    assert not rd.exists(), "DIR is removed after the resumed sort succeeds"
